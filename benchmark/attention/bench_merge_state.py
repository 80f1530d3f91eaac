# SPDX-License-Identifier: Apache-2.0
"""Benchmark of merge_state / merge_state_v2 (two partial attention states ``(v, s)``, ``v``
``[T, H, D]``, ``s`` ``[T, H]`` fp32 LSE, merged into the state over the union of their keys;
base 2 / natural LSE) against what an engine would write instead: the formula in fp32 torch
ops (``m = max(s_a, s_b)``, exp weights, a blend rounded to the value dtype, ``m + log``),
eager and torch.compile.

    python benchmark/attention/bench_merge_state.py --out bench_out [--quick] [--no-compile]

Shapes: decode T = 1, 16, 128 (in a CUDA graph) with H = 32 heads of D = 128 (Llama-style
TP 1) and H = 16 of D = 256 (the largest head_dim the op takes), prefill T = 8192, H = 32,
D = 128; bf16 for both ops, and one fp16 / fp32 case of merge_state_v2 (the kernels differ only
in their element conversions). The outputs are preallocated (the wrapper's out path, as an
engine calls it inside a graph).
Bytes per call: both v and both s read once, v_merged and s_merged written once
(3 T H D elements + 3 T H fp32).
Goals: T <= 128 at most 2 us (every decode case here moves at most 6.3 MB), prefill >= 3800
GB/s (90 % of an H200's device copy, scaled by the copy measured in the run), and never slower
than either baseline.
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
from tests.attention.ref_merge_state import merge_state_ref, merge_state_torch, merge_state_v2_torch  # noqa: E402
from tests.tolerances import elementwise_tol  # noqa: E402

OPS = ("merge_state", "merge_state_v2")
NATURAL = {"merge_state": False, "merge_state_v2": True}
ENGINE_FORM = {"merge_state": merge_state_torch, "merge_state_v2": merge_state_v2_torch}
BF16 = torch.bfloat16
DECODE_T = (1, 16, 128)
PREFILL_GBPS = 3800.0

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def shapes(quick: bool):
    """(op, dtype, T, H, D) in run order."""
    if quick:
        return [("merge_state_v2", BF16, 1, 32, 128), ("merge_state_v2", BF16, 128, 32, 128),
                ("merge_state_v2", BF16, 8192, 32, 128)]
    out = []
    for op in OPS:
        out += [(op, BF16, t, 32, 128) for t in DECODE_T]
        out += [(op, BF16, t, 16, 256) for t in DECODE_T]
        out += [(op, BF16, 8192, 32, 128)]
    out += [("merge_state_v2", torch.float16, 128, 32, 128), ("merge_state_v2", torch.float32, 8192, 32, 128)]
    return out


def check_for(op: str):
    def check(args, out) -> "str | None":
        v_a, s_a, v_b, s_b = args[:4]
        if not (isinstance(out, tuple) and len(out) == 2):
            return f"returned {type(out).__name__}, not a (v_merged, s_merged) pair"
        v, s = out
        want_v, want_s = merge_state_ref(v_a, s_a, v_b, s_b, NATURAL[op])
        if v.shape != want_v.shape or v.dtype != v_a.dtype:
            return f"v_merged {tuple(v.shape)} {v.dtype}, expected {tuple(want_v.shape)} {v_a.dtype}"
        try:
            torch.testing.assert_close(v.double(), want_v, **elementwise_tol(v_a.dtype))
            torch.testing.assert_close(s.double(), want_s, **elementwise_tol(torch.float32))
        except AssertionError as exc:
            return str(exc).strip().splitlines()[0]
        return None

    return check


def build(args: argparse.Namespace) -> Bench:
    ops = Bench.selected_ops(args, OPS)
    bench = Bench("merge_state", "merge_state / merge_state_v2 vs the fp32 torch formula", plot_x="T")

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        fn = getattr(sgl_kernel, case.op)
        return lambda v_a, s_a, v_b, s_b, v_out, s_out: fn(v_a, s_a, v_b, s_b, v_out, s_out)

    def eager(case):
        fn = ENGINE_FORM[case.op]
        return lambda v_a, s_a, v_b, s_b, v_out, s_out: fn(v_a, s_a, v_b, s_b)

    compiled = {}

    def compiled_fn(case):
        if case.op not in compiled:
            # fullgraph: a graph break would raise instead of silently timing eager code.
            compiled[case.op] = torch.compile(ENGINE_FORM[case.op], dynamic=False, fullgraph=True)
        fn = compiled[case.op]
        return lambda v_a, s_a, v_b, s_b, v_out, s_out: fn(v_a, s_a, v_b, s_b)

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", eager)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    planned = []
    for op, dtype, t, h, d in shapes(args.quick):
        if op not in ops:
            continue
        elt = torch.empty((), dtype=dtype).element_size()
        nbytes = 3 * t * h * d * elt + 3 * t * h * 4  # v_a, v_b, s_a, s_b read; v, s written

        def setup(t=t, h=h, d=d, dtype=dtype):
            v_a = torch.randn(t, h, d, device="cuda").to(dtype)
            v_b = torch.randn(t, h, d, device="cuda").to(dtype)
            s_a = torch.randn(t, h, device="cuda") * 4
            s_b = s_a + torch.randn(t, h, device="cuda") * 2
            return v_a, s_a, v_b, s_b, torch.empty_like(v_a), torch.empty_like(s_a)

        params = {"T": t, "H": h, "D": d}
        bench.add_case(op, dtype, params, setup, nbytes, check=check_for(op))
        planned.append((op, dtype, params))

    for op, dtype, params in planned:
        if params["T"] in DECODE_T:
            bench.goal_max_us(op, dtype, params, max_us=2.0)
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
