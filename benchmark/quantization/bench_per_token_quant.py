# SPDX-License-Identifier: Apache-2.0
"""Benchmark of the per-token and per-tensor quantizations (API.md 2.2) against torch eager
and torch.compile of the shared references (tests/quantization/ref_quant.py).

    python benchmark/quantization/bench_per_token_quant.py --out bench_out [--quick] [--ops OP ...] [--no-compile]
    python -m benchmark.quantization.bench_per_token_quant --dry-run --out /tmp/b   # no GPU: the plumbing only

Ops (names in the table; input [T, H] contiguous, bf16 unless the dtype column says fp16):

* per_token_fp8:     sgl_per_token_quant_fp8(input, output_q [T, H] e4m3, output_s [T, 1] fp32)
* per_token_int8:    sgl_per_token_quant_int8(input, output_q [T, H] int8, output_s [T, 1] fp32)
* per_tensor_dyn:    sgl_per_tensor_quant_fp8(input, output_q, output_s [1], is_static=False)
* per_tensor_static: sgl_per_tensor_quant_fp8(input, output_q, output_s [1], is_static=True)
* per_tensor_dyn_op: per_tensor_dyn without the zeroing in the timed call (decode shapes)

Bytes per call (read + written, once each): input T*H*elt read, codes T*H written, and the
scales: per token T*4 written; per tensor 4 written (dynamic) or read (static). A two-pass
per-tensor kernel reads the input twice; it is counted once.

per_tensor_dyn: the op folds its maximum into output_s (``max(output_s, amax / 448)``), so a
caller zeroes output_s before each call. Every provider's timed call does the same:
``output_s.zero_()`` (one memset node in the graph) and then the quantization, for
sgl_kernel and both baselines alike; the decode-time goal includes that memset.
per_tensor_dyn_op times the op alone: output_s is zeroed before the first (checked) call
only; later calls fold the same maximum into it again (same input), so they do the same
work and leave the same result.

Baselines write into the same output_q / output_s: torch eager runs the reference (fp32
math) and copies its results there; torch.compile compiles that function per static shape
(fullgraph, dynamic=False). Output check after each provider's first call: outputs refilled
with NaN / -128 first, then scales rtol 1e-3 and codes by the API.md 1.6 criterion;
per_tensor_static also checks that output_s was left unchanged.

Goals (DESIGN.md 9, H200 figures scaled by the measured copy bandwidth): per_token_fp8 bf16
T=32768 H=4096 >= 3800 GB/s (torch.compile measured 2108 GB/s on the H200); every op at
T=1, 16, 128 <= 2 us in a CUDA graph; every op >= 1.0x torch.compile at every shape. Full
run: 26 shapes x 3 providers, about 2.5 minutes on an H100/H200, most of it compiling
(pass --max-seconds 200: past 60 % of it the compiled baseline is skipped).
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

from benchmark.harness import Bench, cli_main  # noqa: E402
from benchmark.models import hidden_sizes  # noqa: E402
from benchmark.quantization.common import (  # noqa: E402
    add_providers,
    SCALE_RTOL,
    State,
    cached,
    check_quant,
    elt_size,
    note_missing,
    reset_first,
    sgl_op,
)
from tests.quantization.ref_quant import (  # noqa: E402
    FP8,
    FP8_MAX,
    per_tensor_quant_fp8_ref,
    per_token_quant_fp8_ref,
    per_token_quant_int8_ref,
)

OPS = ("per_token_fp8", "per_token_int8", "per_tensor_dyn", "per_tensor_static", "per_tensor_dyn_op")
SGL_NAMES = {
    "per_token_fp8": "sgl_per_token_quant_fp8",
    "per_token_int8": "sgl_per_token_quant_int8",
    "per_tensor_dyn": "sgl_per_tensor_quant_fp8",
    "per_tensor_dyn_op": "sgl_per_tensor_quant_fp8",
    "per_tensor_static": "sgl_per_tensor_quant_fp8",
}
T_ALL = (1, 16, 128, 1024, 4096, 32768)
MODEL_T_QUANT = (16, 4096)  # --models
DECODE_T = (1, 16, 128)  # DESIGN.md 9: <= 2 us in a CUDA graph
BF16, FP16 = torch.bfloat16, torch.float16


def out_dtype(op: str) -> torch.dtype:
    return torch.int8 if op == "per_token_int8" else FP8


def shapes(quick: bool, models: bool = False):
    """(op, dtype, T, H) in run order: per_token_fp8 at H=4096 (the acceptance shape) first,
    then every op at the decode shapes and T=32768, then the other hidden sizes and fp16, so
    that a run cut short by --max-seconds keeps the shapes the goals need. ``models``:
    per_token_fp8 at the hidden sizes of benchmark/models.py that the default list lacks."""
    if models:
        return [("per_token_fp8", BF16, t, h) for h in hidden_sizes(skip=(4096, 7168, 16384)) for t in MODEL_T_QUANT]
    if quick:
        return [
            ("per_token_fp8", BF16, 1, 4096),  # decode: L2-hot in a graph
            ("per_token_fp8", BF16, 32768, 4096),  # the acceptance shape
            ("per_token_int8", BF16, 128, 4096),
            ("per_tensor_dyn", BF16, 16, 4096),
            ("per_tensor_static", BF16, 4096, 7168),  # rotated input sets
        ]
    out = [("per_token_fp8", BF16, t, 4096) for t in T_ALL]
    for op in ("per_token_int8", "per_tensor_dyn", "per_tensor_static"):
        out += [(op, BF16, t, 4096) for t in (1, 16, 128, 32768)]
    out += [("per_token_fp8", BF16, t, 7168) for t in (1, 128, 4096, 32768)]
    out += [("per_token_fp8", BF16, t, 16384) for t in (1, 8, 4096)]
    out += [("per_token_fp8", FP16, t, 4096) for t in (128, 32768)]
    out += [("per_tensor_dyn_op", BF16, t, 4096) for t in DECODE_T]
    return out


def nbytes_of(op: str, t: int, h: int, elt: int) -> int:
    scales = t * 4 if op.startswith("per_token") else 4
    return t * h * elt + t * h + scales  # see the module docstring


def make_setup(op: str, dtype: torch.dtype, t: int, h: int):
    def setup():
        x = torch.randn(t, h, device="cuda", dtype=dtype)
        q = torch.empty(t, h, device="cuda", dtype=out_dtype(op))
        if op.startswith("per_token"):
            s = torch.empty(t, 1, device="cuda", dtype=torch.float32)
            return (x, q, s, State(outputs=(q, s)))
        if op.startswith("per_tensor_dyn"):
            s = torch.empty(1, device="cuda", dtype=torch.float32)
            return (x, q, s, State(outputs=(q, s)))
        # static: a scale computed offline; it is an input (restored, never poisoned)
        s = (x.float().abs().amax() / FP8_MAX).reshape(1)
        return (x, q, s, State(outputs=(q,), inplace=(s,)))

    return setup


# ---------------------------------------------------------------------------------------
# The functions the providers time: (input, output_q, output_s) -> None


def torch_fn(op: str):
    """The reference (fp32 math), its results stored in output_q / output_s."""
    if op == "per_token_fp8" or op == "per_token_int8":
        ref = per_token_quant_fp8_ref if op == "per_token_fp8" else per_token_quant_int8_ref

        def per_token(x, q, s):
            qr, sr = ref(x)
            q.copy_(qr)
            s.copy_(sr.view_as(s))

        return per_token
    static = op == "per_tensor_static"

    def per_tensor(x, q, s):
        qr, sr = per_tensor_quant_fp8_ref(x, s, static)
        q.copy_(qr)
        if not static:
            s.copy_(sr)

    return per_tensor


def ours_fn(op: str, dry_run: bool):
    fn = sgl_op(SGL_NAMES[op], dry_run)
    if op.startswith("per_tensor_dyn"):
        return lambda x, q, s: fn(x, q, s, False)
    if op == "per_tensor_static":
        return lambda x, q, s: fn(x, q, s, True)
    return fn


def as_provider(op: str, fn):
    """Every provider the same way: per_tensor_dyn zeroes output_s before each call (as a
    caller must); the first call resets the set (poisoned outputs) for the output check."""
    if op == "per_tensor_dyn_op":
        first = [True]

        def zero_once_then_quantize(x, q, s):
            if first[0]:  # the checked call, outside the graph
                first[0] = False
                s.zero_()
            fn(x, q, s)

        return reset_first(zero_once_then_quantize)
    if op != "per_tensor_dyn":
        return reset_first(fn)

    def zero_then_quantize(x, q, s):
        s.zero_()
        fn(x, q, s)

    return reset_first(zero_then_quantize)


# ---------------------------------------------------------------------------------------
# Output check


def make_check(op: str):
    def reference(x, s_static):
        if op == "per_token_fp8":
            return per_token_quant_fp8_ref(x)
        if op == "per_token_int8":
            return per_token_quant_int8_ref(x)
        if op.startswith("per_tensor_dyn"):
            return per_tensor_quant_fp8_ref(x, torch.zeros(1, device=x.device), False)
        return per_tensor_quant_fp8_ref(x, s_static, True)

    def check(args, out):
        x, q, s, state = args
        s_static = state.original(0) if op == "per_tensor_static" else None
        if s_static is not None and not torch.equal(s, s_static):
            return f"output_s changed by a static call: {s.tolist()} (was {s_static.tolist()})"
        q_ref, s_ref = cached(state, "ref", lambda: reference(x, s_static))
        return check_quant(q, s.reshape(-1), q_ref, s_ref.reshape(-1), SCALE_RTOL)

    return check


# ---------------------------------------------------------------------------------------


def build(args: argparse.Namespace) -> Bench:
    ops = Bench.selected_ops(args, OPS)
    bench = Bench("per_token_quant", "per-token / per-tensor fp8 and int8 quantization vs torch eager and "
                  "torch.compile", plot_x="T")

    add_providers(bench, ours=lambda op: ours_fn(op, args.dry_run), reference=torch_fn, wrap=as_provider)

    for op, dtype, t, h in shapes(args.quick, args.models):
        if op not in ops:
            continue
        bench.add_case(op, dtype, {"T": t, "H": h}, make_setup(op, dtype, t, h),
                       nbytes_of(op, t, h, elt_size(dtype)), check=make_check(op))
    note_missing(bench, [SGL_NAMES[c.op] for c in bench.cases])
    if any(c.op == "per_tensor_dyn" for c in bench.cases):
        bench.notes.append("per_tensor_dyn: every provider's timed call is output_s.zero_() + the quantization")

    # Goals of DESIGN.md 9, for the shapes in this run.
    planned = {(c.op, c.dtype, c.params["T"], c.params["H"]) for c in bench.cases}
    if ("per_token_fp8", BF16, 32768, 4096) in planned:
        bench.goal_gbps("per_token_fp8", BF16, {"T": 32768, "H": 4096}, h200_gbps=3800)
    if not args.no_compile:
        for op in ops:
            if any(c.op == op for c in bench.cases):
                bench.goal_min_speedup(op, "torch.compile", 1.0)
    for c in bench.cases:
        if c.params["T"] in DECODE_T:
            bench.goal_max_us(c.op, c.dtype, c.params, max_us=2.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv, models=True)


if __name__ == "__main__":
    sys.exit(main())
