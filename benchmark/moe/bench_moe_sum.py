# SPDX-License-Identifier: Apache-2.0
"""Benchmark of moe_sum / moe_sum_reduce (the sum of each token's expert outputs, ``input``
``[T, k, H]`` -> ``output[t] = scale * sum_j input[t, j]``) against what an engine would write
instead: ``x.sum(dim=1)`` and ``torch.sum(x, 1) * scale``, eager and torch.compile.

    python benchmark/moe/bench_moe_sum.py --out bench_out [--quick] [--no-compile]

Shapes (k, H) of served MoE models: DeepSeek-V3 (8, 7168; its routed_scaling_factor 2.5 is
the factor used here), Qwen3-30B-A3B (8, 2048), Mixtral-8x7B (2, 4096), Qwen2-57B-A14B
(8, 3584); T = 1, 16, 128 tokens (decode, in a CUDA graph) and 4096 / 16384 (prefill); bf16,
and one fp16 case (the kernels differ only in their element conversions).
Bytes per call: the input read once (T k H elements) plus the output written (T H).
Goals: T <= 128 at most 2 us where the bytes fit L2 (DeepSeek-V3 at T = 128 moves 16.5 MB,
~3.9 us at an H200's copy bandwidth: there >= 3000 GB/s instead), prefill >= 3800 GB/s (90 %
of an H200's device copy, scaled by the copy measured in the run), and never slower than
either baseline.
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
from tests.moe.ref_moe_sum import moe_sum_ref, moe_sum_reduce_torch, moe_sum_torch  # noqa: E402
from tests.tolerances import elementwise_tol  # noqa: E402

OPS = ("moe_sum_reduce", "moe_sum")
SCALE = 2.5  # DeepSeek-V3's routed_scaling_factor
BF16 = torch.bfloat16
DECODE_T = (1, 16, 128)
# A decode case of more bytes than this cannot take 2 us even at an H200's copy bandwidth
# (4220 GB/s: 8.4 MB in 2 us; L2-hot it reads faster, and the harness keeps cases of up to a
# quarter of L2 hot); those get the bandwidth goal DECODE_HBM_GBPS instead.
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
    """(op, dtype, T, k, H) in run order."""
    if quick:
        return [("moe_sum_reduce", BF16, 1, 8, 7168), ("moe_sum_reduce", BF16, 128, 8, 2048),
                ("moe_sum_reduce", BF16, 4096, 8, 7168)]
    out = [("moe_sum_reduce", BF16, t, 8, 7168) for t in (1, 16, 128, 16384)]  # DeepSeek-V3
    out += [("moe_sum_reduce", BF16, t, 8, 2048) for t in (128, 4096)]  # Qwen3-30B-A3B
    out += [("moe_sum_reduce", BF16, 128, 8, 3584)]  # Qwen2-57B-A14B
    out += [("moe_sum_reduce", BF16, 16384, 2, 4096)]  # Mixtral-8x7B
    out += [("moe_sum", BF16, 16, 8, 2048), ("moe_sum", torch.float16, 4096, 2, 4096)]
    return out


def engine_form(op: str):
    """What an engine would run instead (and what torch.compile compiles)."""
    if op == "moe_sum":
        return lambda x, scale: moe_sum_torch(x)
    return moe_sum_reduce_torch


def check(args, out) -> "str | None":
    x, _out, scale = args
    if not isinstance(out, torch.Tensor):
        return f"returned {type(out).__name__}, not a tensor"
    want = moe_sum_ref(x, scale)
    if out.shape != want.shape or out.dtype != x.dtype:
        return f"output {tuple(out.shape)} {out.dtype}, expected {tuple(want.shape)} {x.dtype}"
    try:
        torch.testing.assert_close(out.double(), want, **elementwise_tol(x.dtype))
    except AssertionError as exc:
        return str(exc).strip().splitlines()[0]
    return None


def build(args: argparse.Namespace) -> Bench:
    ops = Bench.selected_ops(args, OPS)
    bench = Bench("moe_sum", "moe_sum / moe_sum_reduce vs x.sum(1) (* scale)", plot_x="T")

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        if case.op == "moe_sum":
            return lambda x, out, scale: (sgl_kernel.moe_sum(x, out), out)[1]
        return lambda x, out, scale: (sgl_kernel.moe_sum_reduce(x, out, scale), out)[1]

    def eager(case):
        fn = engine_form(case.op)
        return lambda x, out, scale: fn(x, scale)

    compiled = {}

    def compiled_fn(case):
        if case.op not in compiled:
            # fullgraph: a graph break would raise instead of silently timing eager code.
            compiled[case.op] = torch.compile(engine_form(case.op), dynamic=False, fullgraph=True)
        fn = compiled[case.op]
        return lambda x, out, scale: fn(x, scale)

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", eager)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    planned = []
    for op, dtype, t, k, h in shapes(args.quick):
        if op not in ops:
            continue
        elt = torch.empty((), dtype=dtype).element_size()
        nbytes = (t * k * h + t * h) * elt  # input read once, output written once
        scale = None if op == "moe_sum" else SCALE

        def setup(t=t, k=k, h=h, dtype=dtype, scale=scale):
            x = torch.randn(t, k, h, device="cuda").to(dtype)
            out = torch.empty(t, h, dtype=dtype, device="cuda")
            return x, out, scale

        params = {"T": t, "k": k, "H": h}
        bench.add_case(op, dtype, params, setup, nbytes, check=check)
        planned.append((op, dtype, params, nbytes))

    for op, dtype, params, nbytes in planned:
        if params["T"] in DECODE_T:
            if nbytes <= DECODE_MAX_US_BYTES:
                bench.goal_max_us(op, dtype, params, max_us=2.0)
            else:
                bench.goal_gbps(op, dtype, params, h200_gbps=DECODE_HBM_GBPS)
        elif params["T"] >= 4096:
            bench.goal_gbps(op, dtype, params, h200_gbps=PREFILL_GBPS)
    for op in ops:
        if any(p[0] == op for p in planned):
            bench.goal_min_speedup(op, "torch", 1.0)
            if not args.no_compile:
                bench.goal_min_speedup(op, "torch.compile", 1.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
