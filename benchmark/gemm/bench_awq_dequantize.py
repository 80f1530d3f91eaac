# SPDX-License-Identifier: Apache-2.0
"""Benchmark of awq_dequantize against what an engine runs without it: the pure-torch
dequantization of tests/gemm/ref_awq.py (unpack the nibbles with shifts, subtract the zeros,
multiply by the scales, in the scales' dtype), eager and under torch.compile.

    python benchmark/gemm/bench_awq_dequantize.py --out bench_out [--quick] [--no-compile]

Shapes (K, N, G): the AWQ layers of Llama-3-8B / 70B-like models (4096 x 4096, 4096 x 14336,
14336 x 4096, 8192 x 28672), 7168 x 2112 and G in {32, 64, 128}; fp16 and bf16 scales. Bytes
per call: qweight read (K N / 2), scales and zeros read (K / G rows of N * 2 and N / 2 bytes),
the output written (K N * 2). Every output is checked bit for bit against the fp32 reference.

Goals: ours at least 1.0x torch.compile at every shape, and >= 3600 GB/s (H200 figure, scaled
by the measured copy bandwidth) on the largest shape.
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
from tests.gemm.ref_awq import awq_dequantize_ref, awq_dequantize_torch  # noqa: E402

OP = "awq_dequantize"

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)

LARGEST = (8192, 28672, 128)


def shapes(quick: bool):
    if quick:
        return [(4096, 4096, 128), LARGEST]
    return [(4096, 4096, 32), (4096, 4096, 64), (4096, 4096, 128), (7168, 2112, 64), (4096, 14336, 128),
            (14336, 4096, 128), LARGEST]


def check(args, out) -> "str | None":
    ref = awq_dequantize_ref(*args)
    if not torch.equal(out, ref):
        return f"{int((out != ref).sum())} of {ref.numel()} elements differ from the fp32 reference"
    return None


def setup_factory(k: int, n: int, g: int, dtype: torch.dtype):
    def setup():
        qweight = torch.randint(-(2**31), 2**31, (k, n // 8), device="cuda", dtype=torch.int64).to(torch.int32)
        qzeros = torch.randint(-(2**31), 2**31, (k // g, n // 8), device="cuda", dtype=torch.int64).to(torch.int32)
        scales = (torch.rand(k // g, n, device="cuda") * 0.02 + 0.001).to(dtype)
        return qweight, scales, qzeros

    return setup


def build(args: argparse.Namespace) -> Bench:
    bench = Bench("awq_dequantize", "4-bit AWQ dequantization vs pure torch, eager and torch.compile", plot_x="N")

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        return sgl_kernel.awq_dequantize

    compiled = {}

    def compiled_fn(case):
        if "fn" not in compiled:
            # fullgraph: a graph break would raise instead of silently timing eager code.
            compiled["fn"] = torch.compile(awq_dequantize_torch, dynamic=False, fullgraph=True)
        return compiled["fn"]

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", lambda case: awq_dequantize_torch)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    for dtype in (torch.float16, torch.bfloat16):
        for k, n, g in shapes(args.quick):
            nbytes = k * n // 2 + (k // g) * n * 2 + (k // g) * n // 2 + k * n * 2
            bench.add_case(OP, dtype, {"K": k, "N": n, "G": g}, setup_factory(k, n, g, dtype), nbytes, check=check)

    bench.goal_min_speedup(OP, "torch.compile", 1.0)
    for dtype in (torch.float16, torch.bfloat16):
        bench.goal_gbps(OP, dtype, {"K": LARGEST[0], "N": LARGEST[1], "G": LARGEST[2]}, 3600.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
