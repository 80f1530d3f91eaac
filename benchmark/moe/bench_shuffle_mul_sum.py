# SPDX-License-Identifier: Apache-2.0
"""Benchmark of apply_shuffle_mul_sum (the CUTLASS MoE path's weighted sum of each token's expert
outputs, gathered from expert order: ``output[i] = sum_j factors[i, j] * input[perm[i * topk +
j]]``) against what an engine would write instead:
``(input[perm].view(m, topk, K).float() * factors.view(m, topk, 1).float()).sum(1)`` rounded to
the dtype, eager and torch.compile.

    python benchmark/moe/bench_shuffle_mul_sum.py --out bench_out [--quick] [--no-compile]

Shapes (topk, K) of served MoE models: DeepSeek-V3 (8, 7168), Qwen3-30B-A3B (8, 2048),
Qwen3-235B-A22B (8, 4096), Mixtral-8x7B (2, 4096); T = m = 1, 16, 128 tokens (decode, in a CUDA
graph) and 4096 / 16384 (prefill); bf16, and one fp16 case. The permutation is a random
permutation of range(m * topk) (prepare_moe_input's output_permutation without dropped ids), the
factors router weights ``[m, topk]``.
Bytes per call: the input read once (m topk K elements: every row once), the output written
(m K), the permutation (4 bytes an entry) and the factors (one element an entry).
Goals: T <= 128 at most 2 us where the bytes fit L2 (DeepSeek-V3 at T = 128 moves 16.5 MB: there
>= 3000 GB/s instead), prefill >= 3800 GB/s (90 % of an H200's device copy, scaled by the copy
measured in the run), and never slower than either baseline.
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
from tests.moe.ref_shuffle_mul_sum import shuffle_mul_sum_ref, shuffle_mul_sum_torch  # noqa: E402
from tests.tolerances import elementwise_tol  # noqa: E402

OP = "apply_shuffle_mul_sum"
BF16 = torch.bfloat16
DECODE_T = (1, 16, 128)
# A decode case of more bytes than this cannot take 2 us even at an H200's copy bandwidth
# (bench_moe_sum.py); those get the bandwidth goal DECODE_HBM_GBPS instead.
DECODE_MAX_US_BYTES = 12 << 20
DECODE_HBM_GBPS = 3000.0
PREFILL_GBPS = 3800.0

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def shapes(quick: bool):
    """(dtype, T, topk, K) in run order."""
    if quick:
        return [(BF16, 1, 8, 7168), (BF16, 128, 8, 2048), (BF16, 4096, 8, 7168)]
    out = [(BF16, t, 8, 7168) for t in (1, 16, 128, 4096, 16384)]  # DeepSeek-V3
    out += [(BF16, t, 8, 2048) for t in (1, 128, 16384)]  # Qwen3-30B-A3B
    out += [(BF16, t, 8, 4096) for t in (16, 4096)]  # Qwen3-235B-A22B
    out += [(BF16, t, 2, 4096) for t in (128, 16384)]  # Mixtral-8x7B
    out += [(torch.float16, 4096, 8, 2048)]
    return out


def engine_form(x, out, perm, factors):
    """What an engine would run instead (and what torch.compile compiles): gather, weight and
    sum in fp32, round once."""
    return shuffle_mul_sum_torch(x, perm, factors, out.shape[0])


def check(args, out) -> "str | None":
    x, _out, perm, factors = args
    if not isinstance(out, torch.Tensor):
        return f"returned {type(out).__name__}, not a tensor"
    want = shuffle_mul_sum_ref(x, perm, factors, _out.shape[0])
    if out.shape != want.shape or out.dtype != x.dtype:
        return f"output {tuple(out.shape)} {out.dtype}, expected {tuple(want.shape)} {x.dtype}"
    try:
        torch.testing.assert_close(out.double(), want, **elementwise_tol(x.dtype))
    except AssertionError as exc:
        return str(exc).strip().splitlines()[0]
    return None


def build(args: argparse.Namespace) -> Bench:
    ops = Bench.selected_ops(args, (OP,))
    bench = Bench("shuffle_mul_sum", "apply_shuffle_mul_sum vs (x[perm] * factors).sum(1)", plot_x="T")

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        return lambda x, out, perm, factors: (sgl_kernel.apply_shuffle_mul_sum(x, out, perm, factors), out)[1]

    def eager(case):
        return engine_form

    compiled = {}

    def compiled_fn(case):
        if "fn" not in compiled:
            # fullgraph: a graph break would raise instead of silently timing eager code.
            compiled["fn"] = torch.compile(engine_form, dynamic=False, fullgraph=True)
        return compiled["fn"]

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", eager)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    planned = []
    if OP in ops:
        for dtype, t, k, h in shapes(args.quick):
            elt = torch.empty((), dtype=dtype).element_size()
            # input read once, output written once, permutation (int32) and factors read once
            nbytes = (t * k * h + t * h) * elt + t * k * (4 + elt)

            def setup(t=t, k=k, h=h, dtype=dtype):
                x = torch.randn(t * k, h, device="cuda").to(dtype)
                out = torch.empty(t, h, dtype=dtype, device="cuda")
                perm = torch.randperm(t * k, device="cuda").to(torch.int32)
                factors = torch.softmax(torch.randn(t, k, device="cuda"), dim=-1).to(dtype)
                return x, out, perm, factors

            params = {"T": t, "k": k, "H": h}
            bench.add_case(OP, dtype, params, setup, nbytes, check=check)
            planned.append((dtype, params, nbytes))

    for dtype, params, nbytes in planned:
        if params["T"] in DECODE_T:
            if nbytes <= DECODE_MAX_US_BYTES:
                bench.goal_max_us(OP, dtype, params, max_us=2.0)
            else:
                bench.goal_gbps(OP, dtype, params, h200_gbps=DECODE_HBM_GBPS)
        elif params["T"] >= 4096:
            bench.goal_gbps(OP, dtype, params, h200_gbps=PREFILL_GBPS)
    if planned:
        bench.goal_min_speedup(OP, "torch", 1.0)
        if not args.no_compile:
            bench.goal_min_speedup(OP, "torch.compile", 1.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
