# SPDX-License-Identifier: Apache-2.0
"""Benchmark of dsv3_router_gemm and dsv3_fused_a_gemm (DeepSeek-V3 decode GEMMs, M <= 16
tokens, K = 7168) against cuBLAS through torch: ``F.linear`` (+ the cast to fp32 for an fp32
router output) and ``torch.matmul`` with the column-major ``mat_b``.

    python benchmark/gemm/bench_dsv3_gemm.py --out bench_out [--quick] [--ops dsv3_router_gemm]

Shapes: router E in {256, 384} x M in {1, 2, 4, 8, 12, 16} x out fp32 / bf16; fused A
projection N = 2112 x M in {1, 2, 4, 8, 12, 16}. Bytes per call: the activations and the weight
read once, the output written once (M K 2 + N K 2 + M N out_bytes); the weight dominates (3.7 /
5.5 / 30 MB), so GB/s is close to the weight-streaming rate. Like every case of the harness, a
call is timed inside a CUDA graph; the router's inputs fit four times in L2 and are timed hot
(the weight in L2), the fused A projection's rotate through enough sets to come from HBM.

Goals: ours at least 1.0x cuBLAS at every shape (the brief: faster than F.linear / matmul at
M = 1..16).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if sys.path[0] != _ROOT:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402

from benchmark.harness import Bench, cli_main, short_error  # noqa: E402
from tests.gemm.ref_dsv3 import (  # noqa: E402
    EXPERTS,
    FUSED_A_N,
    HIDDEN,
    dsv3_mismatch,
    dsv3_ref,
    router_torch,
)

OPS = ("dsv3_router_gemm", "dsv3_fused_a_gemm")

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def ms(quick: bool):
    return [1, 16] if quick else [1, 2, 4, 8, 12, 16]


def check(args, out) -> "str | None":
    a, b = args
    w = b.t() if b.stride(0) == 1 and b.shape[0] == HIDDEN else b  # fused: mat_b = W.t()
    return dsv3_mismatch(out, dsv3_ref(a, w))


def build(args: argparse.Namespace) -> Bench:
    bench = Bench("dsv3_gemm", "DeepSeek-V3 router / fused A GEMMs (M <= 16) vs cuBLAS (F.linear, matmul)",
                  plot_x="M")
    ops = Bench.selected_ops(args, OPS)

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        if case.op == "dsv3_router_gemm":
            out_dtype = case.dtype
            return lambda a, w: sgl_kernel.dsv3_router_gemm(a, w, out_dtype)
        return lambda a, b: sgl_kernel.dsv3_fused_a_gemm(a, b)

    def cublas(case):
        if case.op == "dsv3_router_gemm":
            out_dtype = case.dtype
            return lambda a, w: router_torch(a, w, out_dtype)
        return lambda a, b: torch.matmul(a, b)

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("cublas", cublas)
    bench.notes.append("cublas: F.linear (bf16 out; + .float() for an fp32 router output) / torch.matmul(mat_a, mat_b)")
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    if "dsv3_router_gemm" in ops:
        experts = EXPERTS[:1] if args.quick else EXPERTS
        for out_dtype in (torch.float32, torch.bfloat16):
            for e in experts:
                for m in ms(args.quick):
                    nbytes = m * HIDDEN * 2 + e * HIDDEN * 2 + m * e * out_dtype.itemsize

                    def setup(m=m, e=e):
                        a = torch.randn(m, HIDDEN, device="cuda").to(torch.bfloat16)
                        w = (torch.randn(e, HIDDEN, device="cuda") * 0.04).to(torch.bfloat16)
                        return a, w

                    bench.add_case("dsv3_router_gemm", out_dtype, {"M": m, "E": e}, setup, nbytes, check=check,
                                   flops=2 * m * e * HIDDEN)
    if "dsv3_fused_a_gemm" in ops:
        for m in ms(args.quick):
            nbytes = m * HIDDEN * 2 + FUSED_A_N * HIDDEN * 2 + m * FUSED_A_N * 2

            def setup(m=m):
                a = torch.randn(m, HIDDEN, device="cuda").to(torch.bfloat16)
                w = (torch.randn(FUSED_A_N, HIDDEN, device="cuda") * 0.04).to(torch.bfloat16)
                return a, w.t()

            bench.add_case("dsv3_fused_a_gemm", torch.bfloat16, {"M": m, "N": FUSED_A_N}, setup, nbytes, check=check,
                           flops=2 * m * FUSED_A_N * HIDDEN)

    for op in ops:
        bench.goal_min_speedup(op, "cublas", 1.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
