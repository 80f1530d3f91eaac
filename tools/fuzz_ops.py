#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Randomized differential testing of the ops on a GPU (the fuzzers of ``tests/fuzz``).

    python tools/fuzz_ops.py --seconds 120                # every fuzzer, round robin
    python tools/fuzz_ops.py --only norm. --cases 500     # fuzzers whose name starts with norm.
    python tools/fuzz_ops.py --only quant.per_token --seed 1234 --cases 1 -v   # replay one case

Case ``i`` of a run uses seed ``--seed + i`` with fuzzer ``i mod len(fuzzers)``, so a failure
line (``FAIL <fuzzer> seed=<s>``) replays with ``--only <fuzzer> --seed <s> --cases 1``. Each
case's line is printed before it runs (``-v``) so that an illegal memory access, which ends
the process, still names its case. Exit status 1 when any case failed.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import sgl_kernel  # noqa: E402,F401
from tests.fuzz.common import DEFAULT_MAX_ELEMS, Case  # noqa: E402
from tests.fuzz.registry import all_fuzzers  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=0.0, help="stop after this long (0: --cases decides)")
    ap.add_argument("--cases", type=int, default=0, help="stop after this many cases (0: --seconds decides)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the first case")
    ap.add_argument("--only", default="", help="comma-separated name prefixes of the fuzzers to run")
    ap.add_argument("--max-elems", type=int, default=DEFAULT_MAX_ELEMS, help="element budget of a case")
    ap.add_argument("--max-fail", type=int, default=50, help="stop after this many failures")
    ap.add_argument("-v", "--verbose", action="store_true", help="print every case")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("fuzz_ops: needs a CUDA GPU", file=sys.stderr)
        return 2
    fuzzers = all_fuzzers()
    if args.only:
        prefixes = tuple(p for p in args.only.split(",") if p)
        fuzzers = {k: v for k, v in fuzzers.items() if k.startswith(prefixes)}
    if not fuzzers:
        print("fuzz_ops: no fuzzer matches --only", file=sys.stderr)
        return 2
    if args.seconds <= 0 and args.cases <= 0:
        args.cases = 10 * len(fuzzers)
    names = sorted(fuzzers)
    t0 = time.monotonic()
    counts = {n: [0, 0] for n in names}  # runs, failures
    failures = 0
    i = 0
    while True:
        if args.cases and i >= args.cases:
            break
        if args.seconds and time.monotonic() - t0 >= args.seconds:
            break
        name = names[i % len(names)]
        seed = args.seed + i
        i += 1
        if args.verbose:
            print(f"RUN  {name} seed={seed}", flush=True)
        counts[name][0] += 1
        try:
            desc = fuzzers[name](Case(seed, args.max_elems))
            torch.cuda.synchronize()
            if args.verbose:
                print(f"  ok {desc}", flush=True)
        except Exception as e:  # noqa: BLE001 - a fuzz failure of any kind is reported
            failures += 1
            counts[name][1] += 1
            lines = str(e).strip().splitlines() or [type(e).__name__]
            print(f"FAIL {name} seed={seed}: {type(e).__name__}: {lines[0][:600]}", flush=True)
            for line in lines[1:9]:  # the details (assert_close's mismatch report, ...)
                print(f"     {line[:300]}", flush=True)
            if args.verbose:
                traceback.print_exc()
            if "illegal memory access" in str(e) or "unspecified launch failure" in str(e):
                print("fuzz_ops: the CUDA context is lost; stopping", flush=True)
                break
            if failures >= args.max_fail:
                break
    dt = time.monotonic() - t0
    for n in names:
        runs, fails = counts[n]
        print(f"{n:40s} {runs:6d} cases {fails:4d} failed")
    print(f"fuzz_ops: {i} cases, {failures} failed, {dt:.0f} s")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
