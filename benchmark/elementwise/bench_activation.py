# SPDX-License-Identifier: Apache-2.0
"""Benchmark of the gated activations silu_and_mul, gelu_and_mul, gelu_tanh_and_mul against
torch eager and torch.compile (the shared reference rounded to the input dtype).

    python benchmark/elementwise/bench_activation.py --out bench_out [--quick | --models] [--ops OP ...] [--no-compile]

Bytes per call: input read (T * 2I * elt) + output write (T * I * elt). The summary at the
end checks the first issue's acceptance goals (DESIGN.md 9).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The repo root first on the path: `benchmark.harness` and the shared references in `tests/`.
_ROOT = str(Path(__file__).resolve().parents[2])
if sys.path[0] != _ROOT:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402

from benchmark.harness import Bench, cli_main, short_error  # noqa: E402
from benchmark.models import mlp_widths  # noqa: E402
from tests.elementwise.ref_activation import REFS, act_and_mul_torch  # noqa: E402
from tests.tolerances import elementwise_tol  # noqa: E402

OPS = ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul")
MODEL_T_ACT = (128, 8192)  # --models

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def shapes(quick: bool, models: bool = False):
    """(op, dtype, T, I) in run order: the acceptance shapes (silu_and_mul bf16) first.
    ``models``: silu_and_mul at the MLP widths one rank of a TP 1 / TP 8 engine sees
    (benchmark/models.py) that the default list lacks."""
    bf16 = torch.bfloat16
    if models:
        return [("silu_and_mul", bf16, t, i) for i in mlp_widths(skip=(4096, 14336)) for t in MODEL_T_ACT]
    if quick:
        return [
            ("silu_and_mul", bf16, 1, 4096),  # decode: L2-hot in a graph
            ("silu_and_mul", bf16, 32768, 14336),  # the acceptance shape
            ("gelu_and_mul", bf16, 128, 14336),
            ("gelu_tanh_and_mul", bf16, 1024, 4096),  # mid-size: rotated input sets
        ]
    out = []
    for inter in (4096, 14336):
        for t in (1, 16, 128, 1024, 4096, 16384, 32768):
            out.append(("silu_and_mul", bf16, t, inter))
    out.append(("silu_and_mul", torch.float16, 4096, 14336))
    out.append(("silu_and_mul", torch.float32, 4096, 14336))
    for op in ("gelu_and_mul", "gelu_tanh_and_mul"):
        for t in (1, 128, 4096, 32768):
            out.append((op, bf16, t, 14336))
    return out


def make_check(op: str, dtype: torch.dtype):
    """Output vs the fp32 reference with the shared tolerance table; None when it matches."""
    tol = elementwise_tol(dtype)

    def check(args, out) -> "str | None":
        (x,) = args
        d = x.shape[-1] // 2
        if not isinstance(out, torch.Tensor):
            return f"returned {type(out).__name__}, not a tensor"
        if tuple(out.shape) != (*x.shape[:-1], d) or out.dtype != x.dtype:
            return f"output {tuple(out.shape)} {out.dtype}, expected {(*x.shape[:-1], d)} {x.dtype}"
        ref = REFS[op](x)
        o = out.float()
        if not torch.isfinite(o).all():
            return "non-finite values in the output"
        err = (o - ref).abs()
        bad = int((err > tol["atol"] + tol["rtol"] * ref.abs()).sum())
        if bad:
            return f"{bad} of {o.numel()} elements out of tolerance {tol}, max abs err {float(err.max()):.3g}"
        return None

    return check


def build(args: argparse.Namespace) -> Bench:
    ops = Bench.selected_ops(args, OPS)
    bench = Bench("activation", "gated activations vs torch eager and torch.compile", plot_x="T")

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        return getattr(sgl_kernel, case.op)

    def eager(case):
        op = case.op
        return lambda x: act_and_mul_torch(op, x)

    compiled = {}

    def compiled_fn(case):
        if case.op not in compiled:
            op = case.op

            def fn(x):
                return act_and_mul_torch(op, x)

            # fullgraph: a graph break would raise instead of silently timing eager code.
            compiled[op] = torch.compile(fn, dynamic=False, fullgraph=True)
        return compiled[case.op]

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", eager)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    for op, dtype, t, inter in shapes(args.quick, args.models):
        if op not in ops:
            continue
        elt = torch.empty((), dtype=dtype).element_size()
        nbytes = t * 2 * inter * elt + t * inter * elt

        def setup(t=t, inter=inter, dtype=dtype):
            return (torch.randn(t, 2 * inter, device="cuda", dtype=dtype),)

        bench.add_case(op, dtype, {"T": t, "I": inter}, setup, nbytes, check=make_check(op, dtype))

    # Acceptance goals of the first issue (DESIGN.md 9), for the shapes in this run.
    planned = {(c.op, c.dtype, c.params["T"], c.params["I"]) for c in bench.cases}
    bf16 = torch.bfloat16
    if ("silu_and_mul", bf16, 32768, 14336) in planned:
        bench.goal_gbps("silu_and_mul", bf16, {"T": 32768, "I": 14336}, h200_gbps=4300)
    if "silu_and_mul" in ops and not args.no_compile:
        bench.goal_min_speedup("silu_and_mul", "torch.compile", 1.0)
    for inter in (4096, 14336):
        for t in (1, 16, 128):
            if ("silu_and_mul", bf16, t, inter) in planned:
                bench.goal_max_us("silu_and_mul", bf16, {"T": t, "I": inter}, max_us=2.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv, models=True)


if __name__ == "__main__":
    sys.exit(main())
