# SPDX-License-Identifier: Apache-2.0
"""Sweep of the fp8_scaled_mm / int8_scaled_mm configurations: every CUTLASS configuration
(and cluster split of K for the small_m / decode kernels) on each shape, timed in a CUDA graph over rotating
inputs, next to cuBLAS and the configuration the heuristic picks. The heuristic in
csrc/gemm/sm90/scaled_mm_dispatch.cu comes from this table.

    python benchmark/gemm/tune_scaled_mm.py [--kind fp8|int8|blockwise] [--quick] [--csv out.csv]

Forces configurations through SGL_KERNEL_SCALED_MM_CONFIG / SGL_KERNEL_SCALED_MM_SPLITS (read
by the op on every call). Each configuration's output is checked against the heuristic's.
--kind blockwise sweeps fp8_blockwise_scaled_mm's configurations (SGL_KERNEL_BLOCKWISE_MM_CONFIG
0-1, blockwise_mm_dispatch.cu) next to our per-token fp8_scaled_mm ("cublas" column: per-token).
"""

from __future__ import annotations

import argparse
import contextlib
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


def time_us(fn, sets, calls=10, reps=15, warm_ms=0.0):
    """Median per-call time of `calls` calls per graph replay, cycling through `sets`, after
    untimed replays for about `warm_ms` (the clock the GPU settles at under sustained load,
    not the boost of an idle one: benchmark/harness.py WARM_MS)."""
    for s in sets:
        fn(*s)
    torch.cuda.synchronize()
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        for i in range(calls):
            fn(*sets[i % len(sets)])
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    g.replay()
    e1.record()
    e1.synchronize()
    for _ in range(min(10000, int(warm_ms / max(e0.elapsed_time(e1), 1e-3)))):
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


# fp8_blockwise_scaled_mm's configurations, by SGL_KERNEL_BLOCKWISE_MM_CONFIG index.
BLOCKWISE_CONFIGS = ("coop_128x128", "pingpong_64x128")


def _knob_env(name: str, split: int, swizzle: int):
    """The tuning variables that force configuration `name` with a split / swizzle."""
    if name.startswith("bw"):
        return [("SGL_KERNEL_BLOCKWISE_MM_CONFIG", name[2:]), ("SGL_KERNEL_BLOCKWISE_MM_SWIZZLE", str(swizzle))]
    return [("SGL_KERNEL_SCALED_MM_CONFIG", name), ("SGL_KERNEL_SCALED_MM_SPLITS", str(split)),
            ("SGL_KERNEL_SCALED_MM_SWIZZLE", str(swizzle))]


@contextlib.contextmanager
def _env(pairs):
    """Set the tuning variables `pairs` for the duration of the block."""
    for var, val in pairs:
        os.environ[var] = val
    try:
        yield
    finally:
        for var, _ in pairs:
            del os.environ[var]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--kind", default="fp8", choices=("fp8", "int8", "blockwise"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--csv", default=None)
    ap.add_argument("--ms", default=None, help="comma-separated M values")
    ap.add_argument("--nk", default=None, help="N:K pairs, comma-separated, e.g. 4096:4096,28672:4096")
    ap.add_argument("--configs", default=None, help="comma-separated configuration names (default: all of --kind)")
    ap.add_argument("--swizzles", default="0", help="comma-separated swizzle values for the CUTLASS configs")
    ap.add_argument("--splits", default=None, help="comma-separated split factors for the small_m / decode configs")
    ap.add_argument("--rounds", type=int, default=1, help="timing rounds per shape (median; alternating order)")
    ap.add_argument("--reps", type=int, default=15, help="graph replays per timing")
    ap.add_argument("--warm-ms", type=float, default=200.0, help="untimed replays before each timing (ms)")
    args = ap.parse_args()
    blockwise = args.kind == "blockwise"
    if blockwise:
        names = [f"bw{i}" for i in range(len(BLOCKWISE_CONFIGS))]
    else:
        names = [c for c in scaled_mm_config_names() if c.startswith(args.kind + "_")]
    if args.configs:
        names = [c for c in args.configs.split(",") if c in names]
    swizzles = [int(x) for x in args.swizzles.split(",")]
    splits = [int(x) for x in args.splits.split(",")] if args.splits else SPLITS
    op = sgl_kernel.int8_scaled_mm if args.kind == "int8" else sgl_kernel.fp8_scaled_mm
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
                if args.kind == "int8":
                    a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
                    w = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8)
                else:
                    a, w = torch.randn(m, k, device="cuda").to(FP8), torch.randn(n, k, device="cuda").to(FP8)
                if blockwise:  # M-major 1x128 scales of A, K-major 128x128 scales of W
                    sa = (torch.rand(k // 128, m, device="cuda") * 0.01 + 0.001).t()
                    sb = (torch.rand(n // 128, k // 128, device="cuda") * 0.01 + 0.001).t()
                    sets.append((a, w.t(), sa, sb))
                else:
                    sets.append((a, w.t(), torch.rand(m, device="cuda") * 0.01, torch.rand(n, device="cuda") * 0.01))
            if blockwise:
                f = lambda a, b, sa, sb: sgl_kernel.fp8_blockwise_scaled_mm(a, b, sa, sb, torch.bfloat16)  # noqa: E731
            else:
                f = lambda a, b, sa, sb: op(a, b, sa, sb, torch.bfloat16)  # noqa: E731
            ref = f(*sets[0]).float()
            # Candidates: (key, fn, tuning variables). Every round times each once, alternating
            # the order (forward, backward, ...) so that a GPU that slows under sustained load
            # does not favour whatever runs first; the result is the median over the rounds.
            cands = [("auto", f, [])]
            if blockwise:  # the per-token GEMM of the same operands (its own per-row scales)
                cands.append(("cublas", lambda a, b, sa, sb: sgl_kernel.fp8_scaled_mm(
                    a, b, sa[:, 0].contiguous(), sb[0].repeat_interleave(128)[:b.shape[1]].contiguous(),
                    torch.bfloat16), []))
            elif args.kind == "fp8":
                cands.append(("cublas", lambda a, b, sa, sb: torch._scaled_mm(
                    a, b, scale_a=sa.view(-1, 1), scale_b=sb.view(1, -1), out_dtype=torch.bfloat16,
                    use_fast_accum=True), []))
            elif m > 16:
                cands.append(("cublas", lambda a, b, sa, sb: torch._int_mm(a, b), []))
            res = {}
            for name in names:
                knobs = [(s, 0) for s in splits] if _split_knob(name) else [(1, z) for z in swizzles]
                for s, z in knobs:
                    key = name + (f"/s{s}" if _split_knob(name) else (f"/z{z}" if z else ""))
                    env = _knob_env(name, s, z)
                    try:
                        with _env(env):
                            out = f(*sets[0]).float()
                        err = float((out - ref).abs().max() / ref.abs().max().clamp(min=1e-30))
                        if err > 1e-2:
                            res[key] = f"BAD({err:.1e})"
                        else:
                            cands.append((key, f, env))
                    except RuntimeError as e:
                        res[key] = "ERR:" + str(e).splitlines()[0][-60:]
            samples = {key: [] for key, _, _ in cands}
            for rnd in range(args.rounds):
                for key, fn, env in (cands if rnd % 2 == 0 else cands[::-1]):
                    with _env(env):
                        samples[key].append(time_us(fn, sets, reps=args.reps, warm_ms=args.warm_ms))
            for key, ts in samples.items():
                res[key] = sorted(ts)[len(ts) // 2]
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
