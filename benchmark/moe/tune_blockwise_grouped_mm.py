# SPDX-License-Identifier: Apache-2.0
"""Sweep of fp8_blockwise_scaled_grouped_mm's tile configurations and scheduler swizzles on the
shapes of bench_blockwise_grouped_mm.py, timed in a CUDA graph over the bench's inputs (the
weights of every shape exceed L2, so each call reads them from HBM). The choice in
csrc/gemm/sm90/blockwise_grouped_mm.cu comes from this table.

    python benchmark/moe/tune_blockwise_grouped_mm.py [--quick] [--configs 0,2] [--swizzles 1,4]

Forces configurations through SGL_KERNEL_GROUPED_MM_CONFIG (0 cooperative 128x128, 1 ping-pong
64x128) and SGL_KERNEL_GROUPED_MM_SWIZZLE, read by the op on every call. "default" is the op's own choice.
Every configuration's output is compared with the default's (the same products and scales in
the same k order: expected equal up to fp32 rounding of the promotions).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import torch

_ROOT = str(Path(__file__).resolve().parents[2])
if sys.path[0] != _ROOT:
    sys.path.insert(0, _ROOT)

from benchmark.gemm.tune_scaled_mm import _env, time_us  # noqa: E402
from benchmark.moe.bench_blockwise_grouped_mm import make_inputs, run_ours, shapes, split_rows  # noqa: E402

CONFIG_NAMES = {0: "coop", 1: "pingpong"}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--configs", default="0,1")
    ap.add_argument("--swizzles", default="1")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds (median; alternating order)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--warm-ms", type=float, default=100.0)
    args = ap.parse_args()
    for var in ("SGL_KERNEL_GROUPED_MM_CONFIG", "SGL_KERNEL_GROUPED_MM_SWIZZLE"):
        os.environ.pop(var, None)
    variants = [("default", [])]
    for c in (int(x) for x in args.configs.split(",")):
        for s in (int(x) for x in args.swizzles.split(",")):
            variants.append((f"{CONFIG_NAMES[c]}/s{s}", [("SGL_KERNEL_GROUPED_MM_CONFIG", str(c)),
                                                         ("SGL_KERNEL_GROUPED_MM_SWIZZLE", str(s))]))
    print(f"# {torch.cuda.get_device_name()}; us per call (CUDA graph of 10 calls, median of {args.reps} "
          f"replays, median of {args.rounds} rounds)")
    print("R,E,N,K,skew," + ",".join(name for name, _ in variants) + ",best")
    for e, n, k, r, skew in shapes(args.quick):
        inp = make_inputs(split_rows(r, e, skew), n, k, with_gmm=False)
        run_ours(inp)
        want = inp.output.float().clone()
        scale = want.abs().max().item() + 1e-30
        times = {name: [] for name, _ in variants}
        for rnd in range(args.rounds):
            order = variants if rnd % 2 == 0 else variants[::-1]
            for name, env in order:
                with _env(env):
                    inp.output.fill_(float("nan"))
                    run_ours(inp)
                    err = (inp.output.float() - want).abs().max().item() / scale
                    if not err <= 1e-2:  # NaN too
                        raise AssertionError(f"{name} at R={r} E={e} N={n} K={k}: max error {err} of max |out|")
                    times[name].append(time_us(lambda i: run_ours(i), [(inp,)], reps=args.reps,
                                               warm_ms=args.warm_ms))
        med = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
        best = min(med, key=med.get)
        print(f"{r},{e},{n},{k},{skew}," + ",".join(f"{med[name]:.1f}" for name, _ in variants) + f",{best}",
              flush=True)
        del inp
        torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
