# SPDX-License-Identifier: Apache-2.0
"""Benchmark of fp8_scaled_mm and int8_scaled_mm against cuBLAS with the same scales:
``torch._scaled_mm`` (row-wise fp32 scales, bf16 out; with and without fast accumulation)
and ``torch._int_mm`` (int32 out, no scales at all: a stricter baseline than ours, which also
scales and rounds).

    python benchmark/gemm/bench_scaled_mm.py --out bench_out [--quick] [--ops fp8_scaled_mm]

Shapes: M in {1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192} x the Llama-3-8B layers
(N, K) = (6144, 4096) qkv, (4096, 4096) o, (28672, 4096) gate_up, (4096, 14336) down; bf16
out, no bias. Inputs rotate through several sets when they exceed the L2 cache, so the decode
shapes read their weights from HBM as in a serving step. TFLOP/s = 2 M N K / time.

Goals (issue 5, H200 figures): fp8 geometric mean >= 1.0x cuBLAS over M >= 1024 on the
Llama-3-8B shapes; fp8 M <= 64 with N = K = 4096 <= 8 us; int8 >= 1.0x torch._int_mm at
M >= 1024.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if sys.path[0] != _ROOT:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402

from benchmark.harness import Bench, GoalResult, cli_main, short_error  # noqa: E402
from tests.gemm.ref_gemm import (  # noqa: E402
    FP8,
    LLAMA3_8B_NK,
    abs_matmul_bound,
    assert_scaled_mm_close,
    scaled_mm_ref,
)
from tests.gemm.test_blockwise_mm import blockwise_ref  # noqa: E402

OPS = ("fp8_scaled_mm", "int8_scaled_mm", "fp8_blockwise_scaled_mm")
OUT = torch.bfloat16

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def shapes(quick: bool):
    if quick:
        return [(m, 4096, 4096) for m in (1, 64, 4096)]
    return [(m, n, k) for m in (1, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192) for (n, k) in LLAMA3_8B_NK]


def check(args, out):
    a, b, sa, sb = args[:4]
    if a.shape[0] * b.shape[0] * b.shape[1] > 2**34:
        return None  # the fp32 reference of the largest shapes is skipped (tests/gemm covers them)
    if isinstance(out, torch.Tensor) and out.dtype == torch.int32:  # torch._int_mm: the exact product
        ok = torch.equal(out.double(), a.double() @ b.double())
        return None if ok else "torch._int_mm: int32 product differs from the fp64 one"
    if isinstance(out, tuple):  # the per-token baseline of a blockwise case: its own scales
        out, sa, sb = out[1], args[4], args[5]
    elif len(args) > 4:  # blockwise
        ref, bound = blockwise_ref(a, b, sa, sb)
        err = (out.float() - ref).abs()
        ok = bool((err <= 2.0**-8 * ref.abs() + 2.0**-12 * bound + 1e-6).all())
        return None if ok else f"blockwise: max err {float(err.max()):.3g}"
    try:
        ref = scaled_mm_ref(a, b, sa, sb)
        assert_scaled_mm_close(out, ref, abs_matmul_bound(a, b, sa, sb), OUT, "fp8" if a.dtype == FP8 else "int8")
    except AssertionError as e:
        return str(e)[:200]
    return None


def goal_geomean(bench: Bench, op: str, baseline: str, min_m: int) -> None:
    def fn() -> GoalResult:
        rows = [r for r in bench.results if r.op == op and r.provider == bench.ours.name and r.params["M"] >= min_m]
        ratios = [r.speedup.get(baseline) for r in rows]
        have = [s for s in ratios if s is not None]
        if not have:
            return GoalResult("N/A", f"{op} vs {baseline} geomean at M >= {min_m}: no pair measured")
        g = math.exp(sum(math.log(s) for s in have) / len(have))
        status = "PASS" if g >= 1.0 and len(have) == len(rows) else ("FAIL" if g < 1.0 else "N/A")
        return GoalResult(status, f"{op} vs {baseline}: geometric mean {g:.3f}x over {len(have)} shapes with M >= "
                                  f"{min_m} (min {min(have):.2f}x, max {max(have):.2f}x); goal >= 1.0x")

    bench.add_goal(fn)


def goal_min_speedup_m(bench: Bench, op: str, baseline: str, min_m: int) -> None:
    def fn() -> GoalResult:
        rows = [r for r in bench.results if r.op == op and r.provider == bench.ours.name and r.params["M"] >= min_m]
        have = [(r, r.speedup.get(baseline)) for r in rows if r.speedup.get(baseline) is not None]
        if not have:
            return GoalResult("N/A", f"{op} vs {baseline} at M >= {min_m}: no pair measured")
        worst_r, worst = min(have, key=lambda t: t[1])
        misses = [f"{r.shape} {s:.2f}x" for r, s in have if s < 1.0]
        text = f"{op} vs {baseline} at M >= {min_m}: min {worst:.2f}x ({worst_r.shape}) over {len(have)} shapes"
        if misses:
            text += f"; misses: {', '.join(misses)}"
        return GoalResult("FAIL" if misses else "PASS", text + "; goal >= 1.0x at every shape")

    bench.add_goal(fn)


def goal_blockwise(bench: Bench) -> None:
    """fp8_blockwise_scaled_mm >= 0.85x our per-token fp8_scaled_mm at every M >= 1024 shape."""

    def fn() -> GoalResult:
        op = "fp8_blockwise_scaled_mm"
        rows = [r for r in bench.results if r.op == op and r.provider == bench.ours.name and r.params["M"] >= 1024]
        have = [(r, r.speedup.get("sgl_per_token_fp8")) for r in rows if r.speedup.get("sgl_per_token_fp8")]
        if not have:
            return GoalResult("N/A", f"{op} vs per-token fp8_scaled_mm: no pair measured")
        worst_r, worst = min(have, key=lambda t: t[1])
        misses = [f"{r.shape} {s:.2f}x" for r, s in have if s < 0.85]
        text = (f"{op} vs our per-token fp8_scaled_mm at M >= 1024: min {worst:.2f}x ({worst_r.shape}) over "
                f"{len(have)} shapes; goal >= 0.85x")
        if misses:
            text += f"; misses: {', '.join(misses)}"
        return GoalResult("FAIL" if misses else "PASS", text)

    bench.add_goal(fn)


def build(args: argparse.Namespace) -> Bench:
    bench = Bench("scaled_mm", "fp8/int8 scaled GEMM vs cuBLAS (torch._scaled_mm / torch._int_mm)", plot_x="M")
    ops = Bench.selected_ops(args, OPS)

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        if case.op == "fp8_blockwise_scaled_mm":
            return lambda a, b, sa, sb, *_: sgl_kernel.fp8_blockwise_scaled_mm(a, b, sa, sb, OUT)
        f = sgl_kernel.fp8_scaled_mm if case.op == "fp8_scaled_mm" else sgl_kernel.int8_scaled_mm
        return lambda a, b, sa, sb: f(a, b, sa, sb, OUT)

    def ours_per_token(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        # tagged, so that check() compares it with the per-token product it computes
        return lambda a, b, _sa, _sb, sa, sb: ("per_token", sgl_kernel.fp8_scaled_mm(a, b, sa, sb, OUT))

    def cublas(fast: bool):
        def factory(case):
            if case.op == "fp8_scaled_mm":
                return lambda a, b, sa, sb: torch._scaled_mm(a, b, scale_a=sa.view(-1, 1), scale_b=sb.view(1, -1),
                                                             out_dtype=OUT, use_fast_accum=fast)
            return lambda a, b, sa, sb: torch._int_mm(a, b)

        return factory

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("cublas", cublas(True),
                       applies=lambda c: c.op == "fp8_scaled_mm" or (c.op == "int8_scaled_mm" and c.params["M"] > 16))
    bench.add_provider("cublas_exact_acc", cublas(False), applies=lambda c: c.op == "fp8_scaled_mm")
    bench.add_provider("sgl_per_token_fp8", ours_per_token, applies=lambda c: c.op == "fp8_blockwise_scaled_mm")
    bench.notes.append("cublas: torch._scaled_mm(use_fast_accum=True) for fp8 (the accumulation ours uses), "
                       "torch._int_mm (int32 out, no scaling; M > 16 only) for int8; cublas_exact_acc: "
                       "torch._scaled_mm(use_fast_accum=False)")
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    for op in ops:
        for m, n, k in shapes(args.quick):
            nbytes = m * k + n * k + m * n * 2 + 4 * (m + n)

            def setup(m=m, n=n, k=k, op=op):
                if op == "fp8_blockwise_scaled_mm":
                    a = torch.randn(m, k, device="cuda").to(FP8)
                    w = torch.randn(n, k, device="cuda").to(FP8)
                    sa = (torch.rand(k // 128, m, device="cuda") * 0.01 + 0.001).t()
                    sb = (torch.rand(n // 128, k // 128, device="cuda") * 0.01 + 0.001).t()
                    return a, w.t(), sa, sb, sa[:, 0].contiguous(), torch.rand(n, device="cuda") * 0.01 + 0.001
                if op == "fp8_scaled_mm":
                    a = torch.randn(m, k, device="cuda").to(FP8)
                    w = torch.randn(n, k, device="cuda").to(FP8)
                else:
                    a = torch.randint(-128, 128, (m, k), device="cuda", dtype=torch.int8)
                    w = torch.randint(-128, 128, (n, k), device="cuda", dtype=torch.int8)
                sa = torch.rand(m, device="cuda") * 0.01 + 0.001
                sb = torch.rand(n, device="cuda") * 0.01 + 0.001
                return a, w.t(), sa, sb

            bench.add_case(op, torch.int8 if op == "int8_scaled_mm" else FP8, {"M": m, "N": n, "K": k}, setup, nbytes,
                           check=check, flops=2 * m * n * k)

    if "fp8_scaled_mm" in ops:
        goal_geomean(bench, "fp8_scaled_mm", "cublas", 1024)
        goal_geomean(bench, "fp8_scaled_mm", "cublas_exact_acc", 1024)
        for m in (1, 16, 32, 64):
            bench.goal_max_us("fp8_scaled_mm", FP8, {"M": m, "N": 4096, "K": 4096}, 8.0)
    if "int8_scaled_mm" in ops:
        goal_min_speedup_m(bench, "int8_scaled_mm", "cublas", 1024)
    if "fp8_blockwise_scaled_mm" in ops:
        goal_blockwise(bench)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
