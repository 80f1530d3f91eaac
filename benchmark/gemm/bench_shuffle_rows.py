# SPDX-License-Identifier: Apache-2.0
"""Benchmark of shuffle_rows (the MoE row gather, ``output[i] = input[dst2src_map[i]]``) against
PyTorch's ``input[dst2src_map]`` (``index_select``), eager and torch.compile.

    python benchmark/gemm/bench_shuffle_rows.py --out bench_out [--quick] [--no-compile]

Shapes of SGLang's CUTLASS MoE path: T tokens routed to topk = 8 experts, so R = 8 T rows are
gathered from T rows: the fp8 activations (``shuffle_rows_fp8``, hidden 7168, DeepSeek-V3) and
their fp32 group scales (``shuffle_rows_scales``, 7168 / 128 = 56 a row), plus a bf16 gather
(``shuffle_rows_bf16``, hidden 4096). The map is random over the T source rows, fresh per set.
Bytes per call: the output written plus as many rows read, plus the map.
Goals: T = 1..128 tokens <= 2 us in a CUDA graph, and faster than both baselines at every shape.
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

TOPK = 8
# op -> (dtype, row length)
OPS = {
    "shuffle_rows_fp8": (torch.float8_e4m3fn, 7168),
    "shuffle_rows_scales": (torch.float32, 7168 // 128),
    "shuffle_rows_bf16": (torch.bfloat16, 4096),
}

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def shapes(quick: bool):
    """(op, T tokens) in run order."""
    if quick:
        return [("shuffle_rows_fp8", 1), ("shuffle_rows_fp8", 128), ("shuffle_rows_fp8", 4096)]
    out = [(op, t) for op in OPS for t in (1, 16, 128, 1024, 4096)]
    out += [("shuffle_rows_fp8", 16384), ("shuffle_rows_bf16", 16384)]
    return out


def gather_torch(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """What an engine would write instead: ``x[idx]`` (index_select of rows)."""
    return x[idx]


def check(args, out) -> "str | None":
    x, idx, _shape = args
    if not isinstance(out, torch.Tensor):
        return f"returned {type(out).__name__}, not a tensor"
    expected = x.view(torch.uint8)[idx.long()]
    if out.shape != (idx.numel(), x.shape[1]) or out.dtype != x.dtype:
        return f"output {tuple(out.shape)} {out.dtype}, expected {(idx.numel(), x.shape[1])} {x.dtype}"
    got = out.view(torch.uint8)
    if not torch.equal(got, expected):
        return f"{int((got != expected).any(-1).sum())} of {idx.numel()} rows differ (a gather is exact)"
    return None


def build(args: argparse.Namespace) -> Bench:
    ops = Bench.selected_ops(args, tuple(OPS))
    bench = Bench("shuffle_rows", "shuffle_rows vs x[idx] (MoE token permutation)", plot_x="T")

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        return lambda x, idx, shape: sgl_kernel.shuffle_rows(x, idx, shape)

    def eager(case):
        return lambda x, idx, shape: gather_torch(x, idx)

    compiled = {}

    def compiled_fn(case):
        if "fn" not in compiled:
            # fullgraph: a graph break would raise instead of silently timing eager code.
            compiled["fn"] = torch.compile(gather_torch, dynamic=False, fullgraph=True)
        fn = compiled["fn"]
        return lambda x, idx, shape: fn(x, idx)

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", eager)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    for op, t in shapes(args.quick):
        if op not in ops:
            continue
        dtype, cols = OPS[op]
        elt = torch.empty((), dtype=dtype).element_size()
        r = TOPK * t
        nbytes = 2 * r * cols * elt + r * 4

        def setup(t=t, r=r, cols=cols, dtype=dtype):
            x = torch.randn(t, cols, device="cuda").to(dtype)
            idx = torch.randint(0, t, (r,), device="cuda", dtype=torch.int32)
            return x, idx, (r, cols)

        bench.add_case(op, dtype, {"T": t, "R": r, "cols": cols}, setup, nbytes, check=check)

    planned = {(c.op, c.params["T"]) for c in bench.cases}
    for op in ops:
        dtype, cols = OPS[op]
        for t in (1, 16, 128):
            if (op, t) in planned:
                bench.goal_max_us(op, dtype, {"T": t, "R": TOPK * t, "cols": cols}, max_us=2.0)
        bench.goal_min_speedup(op, "torch", 1.0)
        if not args.no_compile:
            bench.goal_min_speedup(op, "torch.compile", 1.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
