# SPDX-License-Identifier: Apache-2.0
"""Benchmark of bmm_fp8 (cuBLASLt strided-batched fp8 GEMM, per-tensor scales, bf16 out)
against ``torch._scaled_mm`` called in a Python loop over the batch (the same cuBLASLt fp8
GEMM, one launch per matrix, written into slices of one output) and ``torch.bmm`` in bf16
(inputs pre-converted to bf16 with the scales folded into B, not timed).

    python benchmark/gemm/bench_bmm_fp8.py --out bench_out [--quick]

Shapes (B, M, K, N): the DeepSeek-V3 MLA absorbed projections, where serving engines call
bmm_fp8 (per head: q_nope [M, 128] @ w_kc [128, 512] and attn [M, 512] @ w_vc [512, 128];
16 heads = 128 / TP8, and all 128), M (tokens) from 1 to 8192; and square 4096 GEMMs with
B = 1, 4, 16. TFLOP/s = 2 B M N K / time; bytes = B (M K + K N + 2 M N) + 8.

Goal: bmm_fp8 >= 1.0x the scaled_mm loop (geometric mean over the shapes): one strided-batched
launch is never slower than B launches of the same library.
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
from tests.gemm.ref_bmm_fp8 import E4M3, bmm_fp8_bound, bmm_fp8_errors, bmm_fp8_ref  # noqa: E402

OP = "bmm_fp8"
OUT = torch.bfloat16

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def shapes(quick: bool):
    """(B, M, K, N)"""
    if quick:
        return [(16, 1, 128, 512), (128, 256, 512, 128), (4, 2048, 4096, 4096)]
    mla = [(h, m, k, n) for h in (16, 128) for m in (1, 8, 32, 128, 512, 2048, 8192) for (k, n) in ((128, 512), (512, 128))]
    square = [(1, 4096, 4096, 4096), (4, 4096, 4096, 4096), (16, 1024, 4096, 4096)]
    return mla + square


def check(args, out):
    A, B, sa, sb = args[:4]
    b, m, k = A.shape
    if b * m * k * B.shape[2] > 2**34:
        return None  # the fp64 reference of the largest shapes is skipped (tests/gemm covers them)
    msg = bmm_fp8_errors(out, bmm_fp8_ref(A, B, sa, sb), bmm_fp8_bound(A, B, sa, sb))
    return msg[:200] if msg else None


def goal_geomean(bench: Bench, baseline: str) -> None:
    def fn() -> GoalResult:
        rows = [r for r in bench.results if r.op == OP and r.provider == bench.ours.name]
        have = [s for s in (r.speedup.get(baseline) for r in rows) if s is not None]
        if not have:
            return GoalResult("N/A", f"{OP} vs {baseline}: no pair measured")
        g = math.exp(sum(math.log(s) for s in have) / len(have))
        status = "PASS" if g >= 1.0 and len(have) == len(rows) else ("FAIL" if g < 1.0 else "N/A")
        return GoalResult(status, f"{OP} vs {baseline}: geometric mean {g:.3f}x over {len(have)} shapes "
                                  f"(min {min(have):.2f}x, max {max(have):.2f}x); goal >= 1.0x")

    bench.add_goal(fn)


def build(args: argparse.Namespace) -> Bench:
    bench = Bench("bmm_fp8", "batched fp8 GEMM (cuBLASLt) vs a torch._scaled_mm loop and bf16 torch.bmm", plot_x="M")

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        return lambda A, B, sa, sb, A16, B16, out: sgl_kernel.bmm_fp8(A, B, sa, sb, OUT, out)

    def scaled_mm_loop(case):
        def fn(A, B, sa, sb, A16, B16, out):
            for i in range(A.shape[0]):
                torch._scaled_mm(A[i], B[i], scale_a=sa, scale_b=sb, out_dtype=OUT, out=out[i])
            return out

        return fn

    def bmm_bf16(case):
        return lambda A, B, sa, sb, A16, B16, out: torch.bmm(A16, B16, out=out)

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("scaled_mm_loop", scaled_mm_loop)
    bench.add_provider("bmm_bf16", bmm_bf16)
    bench.notes.append("scaled_mm_loop: torch._scaled_mm(A[i], B[i], per-tensor scales, out=out[i]) for i in range(B) "
                       "(use_fast_accum=False, as bmm_fp8); bmm_bf16: torch.bmm on bf16 copies of A and B "
                       "(B column-major as given), which read twice the bytes")
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    if OP in Bench.selected_ops(args, (OP,)):
        for b, m, k, n in shapes(args.quick):
            nbytes = b * (m * k + k * n + 2 * m * n) + 8

            def setup(b=b, m=m, k=k, n=n):
                A = torch.randn(b, m, k, device="cuda").to(E4M3)
                B = torch.randn(b, n, k, device="cuda").to(E4M3).transpose(-2, -1)
                # powers of two: folded into the bf16 copy of B exactly, so every provider computes the
                # same product and passes the same output check
                sa = torch.tensor([2.0 ** float(torch.randint(-2, 2, ()))], device="cuda")
                sb = torch.tensor([2.0 ** float(torch.randint(-2, 2, ()))], device="cuda")
                out = torch.empty(b, m, n, device="cuda", dtype=OUT)
                return A, B, sa, sb, A.to(OUT), B.to(OUT) * (sa * sb).to(OUT), out

            bench.add_case(OP, E4M3, {"B": b, "M": m, "K": k, "N": n}, setup, nbytes, check=check,
                           flops=2 * b * m * n * k)
        goal_geomean(bench, "scaled_mm_loop")
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
