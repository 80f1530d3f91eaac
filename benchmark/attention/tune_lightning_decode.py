# SPDX-License-Identifier: Apache-2.0
"""Sweep of lightning_attention_decode's blocks a (batch, head) row: each cluster size forced
through SGL_KERNEL_LIGHTNING_CLUSTER (1 = one block a row, 2 / 4 / 8 = a thread-block cluster;
read by the op on every call, tuning only) next to the launcher's own choice, bf16, D = E = 128,
timed in a CUDA graph (inputs rotated past L2 when one call's state does not fit in it). Every
forced output is checked against the fp64 reference (tests/attention/ref_lightning_decode.py).
The rule in csrc/attention/lightning_decode.cu (cluster_blocks) comes from this table.

    python benchmark/attention/tune_lightning_decode.py [--batches 1,2,4,8] [--heads 8,64]
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

import sgl_kernel  # noqa: E402
from benchmark.attention.bench_lightning_decode import make_inputs  # noqa: E402
from benchmark.gemm.tune_scaled_mm import _env, time_us  # noqa: E402
from tests.attention.ref_lightning_decode import check_results  # noqa: E402

VAR = "SGL_KERNEL_LIGHTNING_CLUSTER"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batches", default="1,2,4,8,16")
    ap.add_argument("--heads", default="8,16,32,64")
    ap.add_argument("--clusters", default="1,2,4", help="8 reads as 4 at D = 128 (each block keeps >= 16 kv rows)")
    ap.add_argument("--rounds", type=int, default=3, help="timing rounds (median; alternating order)")
    ap.add_argument("--reps", type=int, default=15)
    ap.add_argument("--warm-ms", type=float, default=50.0)
    args = ap.parse_args()
    os.environ.pop(VAR, None)
    d = e = 128
    dtype = torch.bfloat16
    variants = [("default", [])] + [(f"cs{c}", [(VAR, c)]) for c in args.clusters.split(",")]
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    fn = sgl_kernel.lightning_attention_decode
    print(f"# {torch.cuda.get_device_name()}, {torch.cuda.get_device_properties(0).multi_processor_count} SMs; "
          f"bf16 D = E = 128; us per call (CUDA graph of 10 calls, median of {args.reps} replays and "
          f"{args.rounds} rounds)")
    print("B,H,state_MB," + ",".join(name for name, _ in variants) + ",best")
    for h in (int(x) for x in args.heads.split(",")):
        for b in (int(x) for x in args.batches.split(",")):
            state = b * h * d * e * 4
            nsets = 1 if 2 * state * 4 <= l2 else min(8, max(2, -(-4 * l2 // (2 * state))))
            sets = [make_inputs(b, h, d, e, dtype) for _ in range(nsets)]
            times = {name: [] for name, _ in variants}
            for rnd in range(args.rounds):
                for name, env in (variants if rnd % 2 == 0 else variants[::-1]):
                    with _env(env):
                        if rnd == 0:
                            s = sets[0]
                            fn(*s)
                            err = check_results(*s)
                            if err is not None:
                                raise AssertionError(f"{name} at B={b} H={h}: {err}")
                        times[name].append(time_us(fn, sets, reps=args.reps, warm_ms=args.warm_ms))
            med = {name: sorted(t)[len(t) // 2] for name, t in times.items()}
            best = min(med, key=med.get)
            print(f"{b},{h},{state / 2**20:.1f}," + ",".join(f"{med[n]:.2f}" for n, _ in variants) + f",{best}",
                  flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
