# SPDX-License-Identifier: Apache-2.0
"""Benchmark of lightning_attention_decode (one decode step of linear attention with exponential
decay: ``new_kv = exp(-slope) * past_kv + outer(k, v)`` in fp32, ``output = q @ new_kv`` rounded
to q's dtype; q, k ``[B, H, 1, D]``, v ``[B, H, 1, E]``, state ``[B, H, D, E]`` fp32) against what
an engine would write instead: the same formula in fp32 torch ops (``ratio * past + k^T v`` as a
broadcast outer product, then ``q @ new_kv``), eager and torch.compile.

    python benchmark/attention/bench_lightning_decode.py --out bench_out [--quick] [--no-compile]

Shapes: MiniMax-Text-01 (H = 64 heads, D = E = 128) at batch B = 1, 8, 32, 128, 256, and H = 8
(a TP-8 shard) at B = 1, 8, 64; bf16, plus one fp16 and one fp32 case (the kernels differ only in
the conversions of q, k, v and the output). new_kv is a separate preallocated tensor (the op may
also update past_kv in place; an in-place call in a timing loop would time a changing state).
Bytes per call: past_kv read and new_kv written (2 B H D E fp32), q, k, v read and the output
written (B H (2 D + 2 E) elements of the dtype), slope (H fp32).
Goals: the decode calls that fit in L2 (B H D E fp32 up to 16 MB: B = 1 at H = 64, B <= 8 at
H = 8) at most 3 us in a CUDA graph; the calls that stream from HBM (>= 64 MB: B >= 8 at H = 64,
B = 64 at H = 8) >= 3800 GB/s (90 % of an H200's device copy, scaled by the copy measured in the
run); never slower than either baseline.
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
from tests.attention.ref_lightning_decode import check_results, lightning_decode_torch  # noqa: E402

OP = "lightning_attention_decode"
BF16 = torch.bfloat16
DECODE_MAX_US = 3.0
DECODE_MAX_STATE_BYTES = 16 << 20  # B H D E fp32 of the calls held to DECODE_MAX_US
STREAM_MIN_BYTES = 64 << 20  # calls at least this large are held to STREAM_GBPS
STREAM_GBPS = 3800.0

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def shapes(quick: bool):
    """(dtype, B, H, D, E) in run order."""
    if quick:
        return [(BF16, 1, 64, 128, 128), (BF16, 32, 64, 128, 128), (BF16, 1, 8, 128, 128)]
    out = [(BF16, b, 64, 128, 128) for b in (1, 8, 32, 128, 256)]
    out += [(BF16, b, 8, 128, 128) for b in (1, 8, 64)]
    out += [(torch.float16, 8, 64, 128, 128), (torch.float32, 32, 64, 128, 128)]
    return out


def make_inputs(b: int, h: int, d: int, e: int, dtype: torch.dtype):
    """One call's arguments: random q, k, v in ``dtype``, an fp32 state, decay rates in [0, 1),
    and the output and new_kv tensors (uninitialized)."""
    q = torch.randn(b, h, 1, d, device="cuda").to(dtype)
    k = torch.randn(b, h, 1, d, device="cuda").to(dtype)
    v = torch.randn(b, h, 1, e, device="cuda").to(dtype)
    past_kv = torch.randn(b, h, d, e, device="cuda")
    slope = torch.rand(h, 1, 1, device="cuda")
    return q, k, v, past_kv, slope, torch.empty_like(v), torch.empty_like(past_kv)


def call_bytes(dtype: torch.dtype, b: int, h: int, d: int, e: int) -> int:
    elt = torch.empty((), dtype=dtype).element_size()
    return 2 * b * h * d * e * 4 + b * h * (2 * d + 2 * e) * elt + h * 4


def check(args, out) -> "str | None":
    q, k, v, past_kv, slope = args[:5]
    if not (isinstance(out, tuple) and len(out) == 2):
        return f"returned {type(out).__name__}, not an (output, new_kv) pair"
    return check_results(q, k, v, past_kv, slope, out[0], out[1])


def build(args: argparse.Namespace) -> Bench:
    Bench.selected_ops(args, (OP,))
    bench = Bench("lightning_decode", "lightning_attention_decode vs the fp32 torch formula", plot_x="B")

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        fn = getattr(sgl_kernel, OP)

        def call(q, k, v, past_kv, slope, output, new_kv):
            fn(q, k, v, past_kv, slope, output, new_kv)
            return output, new_kv

        return call

    def eager(case):
        return lambda q, k, v, past_kv, slope, output, new_kv: lightning_decode_torch(q, k, v, past_kv, slope)

    compiled = {}

    def compiled_fn(case):
        if "fn" not in compiled:
            # fullgraph: a graph break would raise instead of silently timing eager code.
            compiled["fn"] = torch.compile(lightning_decode_torch, dynamic=False, fullgraph=True)
        fn = compiled["fn"]
        return lambda q, k, v, past_kv, slope, output, new_kv: fn(q, k, v, past_kv, slope)

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", eager)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    planned = []
    for dtype, b, h, d, e in shapes(args.quick):

        def setup(b=b, h=h, d=d, e=e, dtype=dtype):
            return make_inputs(b, h, d, e, dtype)

        params = {"B": b, "H": h, "D": d, "E": e}
        bench.add_case(OP, dtype, params, setup, call_bytes(dtype, b, h, d, e), check=check)
        planned.append((dtype, params))

    for dtype, params in planned:
        state = params["B"] * params["H"] * params["D"] * params["E"] * 4
        if state <= DECODE_MAX_STATE_BYTES:
            bench.goal_max_us(OP, dtype, params, max_us=DECODE_MAX_US)
        elif 2 * state >= STREAM_MIN_BYTES:
            bench.goal_gbps(OP, dtype, params, h200_gbps=STREAM_GBPS)
    if planned:
        bench.goal_min_speedup(OP, "torch", 1.0)
        if not args.no_compile:
            bench.goal_min_speedup(OP, "torch.compile", 1.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
