# SPDX-License-Identifier: Apache-2.0
"""Sweep of the fp8_scaled_mm / int8_scaled_mm configurations: every CUTLASS configuration
(and cluster split of K for the small_m / decode kernels) on each shape, timed in a CUDA graph over rotating
inputs, next to cuBLAS and the configuration the heuristic picks. The heuristic in
csrc/gemm/sm90/scaled_mm_dispatch.cu comes from this table.

    python benchmark/gemm/tune_scaled_mm.py [--kind fp8|int8] [--quick] [--csv out.csv]

Forces configurations through SGL_KERNEL_SCALED_MM_CONFIG / SGL_KERNEL_SCALED_MM_SPLITS (read
by the op on every call). Each configuration's output is checked against the heuristic's.
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
from tests.gemm.ref_gemm import scaled_mm_config_names  # noqa: E402

FP8 = torch.float8_e4m3fn
SPLITS = (1, 2, 3, 4, 6, 8)


def time_us(fn, sets, calls=10, reps=15):
    """Median per-call time of `calls` calls per graph replay, cycling through `sets`."""
    for s in sets:
        fn(*s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(*sets[i % len(sets)])
    g.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        g.replay()
        e1.record()
        e1.synchronize()
        times.append(e0.elapsed_time(e1) * 1000 / calls)
    times.sort()
    return times[len(times) // 2]


def _split_knob(name: str) -> bool:
    """Configurations tuned by a split factor (their cluster split of K) rather than a swizzle;
    a factor of 1 means their own choice."""
    return any(tag in name for tag in ("small", "decode"))


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kind", default="fp8", choices=("fp8", "int8"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--ms", default=None, help="comma-separated M values")
    ap.add_argument("--nk", default=None, help="N:K pairs, comma-separated, e.g. 4096:4096,28672:4096")
    ap.add_argument("--configs", default=None, help="comma-separated configuration names (default: all of --kind)")
    ap.add_argument("--swizzles", default="0", help="comma-separated swizzle values for the CUTLASS configs")
    ap.add_argument("--splits", default=None, help="comma-separated split factors for the small_m / decode configs")
    args = ap.parse_args()
    names = [c for c in scaled_mm_config_names() if c.startswith(args.kind + "_")]
    if args.configs:
        names = [c for c in args.configs.split(",") if c in names]
    swizzles = [int(x) for x in args.swizzles.split(",")]
    splits = [int(x) for x in args.splits.split(",")] if args.splits else SPLITS
    op = sgl_kernel.fp8_scaled_mm if args.kind == "fp8" else sgl_kernel.int8_scaled_mm
    ms = [int(x) for x in args.ms.split(",")] if args.ms else (
        [1, 16, 64, 256, 2048] if args.quick else [1, 8, 16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 1024, 2048,
                                                     4096, 8192])
    nks = [tuple(int(v) for v in p.split(":")) for p in args.nk.split(",")] if args.nk else (
        [(4096, 4096), (28672, 4096)] if args.quick else [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)])
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    rows = []
    print(f"# {torch.cuda.get_device_name()} {args.kind}; times in us (CUDA graph, rotating inputs beyond L2)")
    for n, k in nks:
        for m in ms:
            nbytes = m * k + n * k + 2 * m * n
            nsets = 1 if nbytes * 4 <= l2 else min(8, max(2, -(-4 * l2 // nbytes)))
            sets = []
            for _ in range(nsets):
                if args.kind == "fp8":
                    a, w = torch.randn(m, k, device="cuda").to(FP8), torch.randn(n, k, device="cuda").to(FP8)
                else:
                    a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
                    w = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8)
                sets.append((a, w.t(), torch.rand(m, device="cuda") * 0.01, torch.rand(n, device="cuda") * 0.01))
            f = lambda a, b, sa, sb: op(a, b, sa, sb, torch.bfloat16)  # noqa: E731
            ref = f(*sets[0]).float()
            res = {"auto": time_us(f, sets)}
            if args.kind == "fp8":
                res["cublas"] = time_us(lambda a, b, sa, sb: torch._scaled_mm(
                    a, b, scale_a=sa.view(-1, 1), scale_b=sb.view(1, -1), out_dtype=torch.bfloat16,
                    use_fast_accum=True), sets)
            elif m > 16:
                res["cublas"] = time_us(lambda a, b, sa, sb: torch._int_mm(a, b), sets)
            for name in names:
                knobs = [(s, 0) for s in splits] if _split_knob(name) else [(1, z) for z in swizzles]
                for s, z in knobs:
                    os.environ["SGL_KERNEL_SCALED_MM_CONFIG"] = name
                    os.environ["SGL_KERNEL_SCALED_MM_SPLITS"] = str(s)
                    os.environ["SGL_KERNEL_SCALED_MM_SWIZZLE"] = str(z)
                    key = name + (f"/s{s}" if _split_knob(name) else (f"/z{z}" if z else ""))
                    try:
                        out = f(*sets[0]).float()
                        err = float((out - ref).abs().max() / ref.abs().max().clamp(min=1e-30))
                        if err > 1e-2:
                            res[key] = f"BAD({err:.1e})"
                            continue
                        res[key] = time_us(f, sets)
                    except RuntimeError as e:
                        res[key] = "ERR:" + str(e).splitlines()[0][-60:]
                    finally:
                        for v in ("CONFIG", "SPLITS", "SWIZZLE"):
                            del os.environ["SGL_KERNEL_SCALED_MM_" + v]
            timed = {k2: v for k2, v in res.items() if isinstance(v, float) and k2 not in ("auto", "cublas")}
            best = min(timed, key=timed.get) if timed else "-"
            flops = 2 * m * n * k
            line = (f"M={m:5d} N={n:5d} K={k:5d} auto {res['auto']:8.2f} ({flops / res['auto'] / 1e6:6.0f} TF) "
                    f"cublas {res.get('cublas', float('nan')):8.2f} best {best} {timed.get(best, float('nan')):8.2f}"
                    f"  auto/best {res['auto'] / timed[best] if timed else float('nan'):.2f}")
            print(line, flush=True)
            print("    " + "  ".join(f"{k2}={v:.2f}" if isinstance(v, float) else f"{k2}={v}" for k2, v in res.items()
                                     if k2 not in ("auto", "cublas")), flush=True)
            rows.append((m, n, k, res))
    if args.csv:
        keys = sorted({k2 for _, _, _, r in rows for k2 in r})
        with open(args.csv, "w") as fh:
            fh.write("M,N,K," + ",".join(keys) + "\n")
            for m, n, k, r in rows:
                fh.write(f"{m},{n},{k}," + ",".join(str(r.get(k2, "")) for k2 in keys) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
