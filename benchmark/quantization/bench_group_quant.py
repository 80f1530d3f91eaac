# SPDX-License-Identifier: Apache-2.0
"""Benchmark of sgl_per_token_group_quant_8bit (API.md 2.2) against torch eager and
torch.compile of the shared reference (tests/quantization/ref_quant.py), and of its fused
SiLU path against the two-kernel sequence it replaces (silu_and_mul, then the group quant).

    python benchmark/quantization/bench_group_quant.py --out bench_out [--quick] [--ops OP ...] [--no-compile]
    python -m benchmark.quantization.bench_group_quant --dry-run --out /tmp/b   # no GPU: the plumbing only

Ops (names in the table), all eps=1e-10, input bf16, H = the quantised width K:

* gq_fp8_g128:    input [T, H], e4m3 codes, fp32 scales [T, H/128] row-major (the headline)
* gq_ue8m0_g128:  the same into DeepGEMM's layout: scale_ue8m0=True, int32 [T, H/512] packed
                  exponents, column-major with the pitch T rounded up to 4
* gq_col_g128:    fp32 scales column-major with the pitch T rounded up to 4 (the TMA-aligned
                  layout Hopper's blockwise fp8 GEMMs read)
* gq_fp8_g64, gq_fp8_g32: group sizes 64 and 32, row-major fp32 scales
* gq_int8_g128:   int8 codes (fp8_min/fp8_max = -128/127), row-major fp32 scales
* gq_silu_g128:   fuse_silu_and_mul=True: input [T, 2H], codes of silu(x[:, :H]) * x[:, H:]
* gq_masked_g128: masked_m: input [E, T, H] (T = tokens per expert), column-major fp32 scales
                  (the TMA-aligned layout of a masked grouped GEMM); masked_m[e] random in
                  [1, T], then a quarter of the experts 0 and one expert full (seeded by the
                  shape: the same rows every run); shapes with M: random in [0, M] (an
                  expert-parallel decode step, DeepEP's low-latency layout: E=32 local experts
                  with room for 1024 tokens each, a few used)
* gq_masked_silu: masked and fused SiLU together (input [E, T, 2H]), as in an expert-parallel
                  MoE's down-projection input

Bytes per call (read + written, once each), with R the processed rows (T, or sum(masked_m)):
input R*H*2 (R*2H*2 with SiLU) read, codes R*H written, scales R*(H/g)*4 written (packed:
R*ceil(H/512)*4), masked_m E*4 read. The rows a masked call skips are not counted.

Providers:
* sgl_kernel.
* torch: the reference in fp32 math, its results stored into the same output_q / output_s.
  Masked: the whole [E, T, H] is quantised and torch.where leaves the rows t >= masked_m[e]
  as they were (a torch caller cannot size its kernels by masked_m without a host sync).
* torch.compile of that function per static shape (fullgraph, dynamic=False); for the SiLU
  ops with Inductor's emulate_precision_casts, which keeps the bf16 rounding of silu(a) * b
  that a fused Triton kernel would otherwise skip (see common.compile_reference).
* two-kernel (SiLU ops only): sgl_kernel.silu_and_mul into a fresh [..., H] tensor, then
  sgl_per_token_group_quant_8bit on it (with masked_m for the masked op).
Ratios: xBASE = BASE time / ours (> 1: we are faster).

Output check after each provider's first call (outputs poisoned with NaN / -128 / 0xFF
first): scales rtol 1e-3 (1e-2 on the SiLU paths, whose bf16 intermediate may differ by one
ulp), codes by the API.md 1.6 criterion, masked-out rows untouched; the two-kernel
sequence's silu_and_mul output against the fp32 reference and its codes against the reference
quantisation of that output.

Goals (DESIGN.md 9, GB/s as H200 figures scaled by the measured copy bandwidth):
gq_fp8_g128 bf16 T=32768 H=4096 >= 3800 GB/s (torch.compile measured 3139 on the H200);
gq_silu_g128 >= 1.3x two-kernel at T >= 4096; the SiLU ops >= 1.0x two-kernel everywhere;
every op >= 1.0x torch.compile at every shape; T=1, 16, 128 <= 2 us in a CUDA graph. Full
run: 43 shapes, about 3 minutes on an H100/H200, most of it compiling (pass
--max-seconds 220: past 60 % of it the compiled baseline is skipped).
"""

from __future__ import annotations

import argparse
import sys
import zlib
from typing import Optional
from dataclasses import dataclass
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
    ROUNDED_INPUT_SCALE_RTOL,
    SCALE_RTOL,
    State,
    cached,
    check_close,
    check_padding,
    check_quant,
    check_untouched,
    elt_size,
    note_missing,
    reset_first,
    scale_bytes,
    sgl_op,
    store_masked,
    store_scales,
)
from tests.quantization.ref_quant import (  # noqa: E402
    EPS,
    FP8,
    alloc_scales,
    group_quant_ref,
    qrange,
    read_scales,
    silu_and_mul_fp32,
)

BF16 = torch.bfloat16
DECODE_T = (1, 16, 128)  # DESIGN.md 9: <= 2 us in a CUDA graph
T_ALL = (1, 16, 128, 1024, 4096, 32768)
MODEL_T_QUANT = (16, 128, 4096)  # --models


@dataclass(frozen=True)
class Spec:
    group: int
    out_dtype: torch.dtype
    layout: str  # ref_quant.LAYOUTS: row, col, col_ue8m0
    silu: bool = False
    masked: bool = False

    @property
    def ue8m0(self) -> bool:
        return self.layout == "col_ue8m0"


SPECS = {
    "gq_fp8_g128": Spec(128, FP8, "row"),
    "gq_silu_g128": Spec(128, FP8, "row", silu=True),
    "gq_ue8m0_g128": Spec(128, FP8, "col_ue8m0"),
    "gq_col_g128": Spec(128, FP8, "col"),
    "gq_fp8_g64": Spec(64, FP8, "row"),
    "gq_fp8_g32": Spec(32, FP8, "row"),
    "gq_int8_g128": Spec(128, torch.int8, "row"),
    "gq_masked_g128": Spec(128, FP8, "col", masked=True),
    "gq_masked_silu": Spec(128, FP8, "col", silu=True, masked=True),
}
OPS = tuple(SPECS)


def shapes(quick: bool, models: bool = False):
    """(op, dtype, params) in run order: the headline op at H=4096 (the acceptance shape)
    first, then the fused SiLU path, then the other layouts, group sizes and the masked
    input, so that a run cut short by --max-seconds keeps the shapes the goals need.
    ``models``: gq_fp8_g128 at the GEMM inputs of benchmark/models.py's models that the
    default list lacks (hidden sizes, and MLP widths one rank sees at TP 1 / TP 8)."""
    if models:
        widths = sorted(set(hidden_sizes(skip=(4096, 7168, 16384))) | {768, 1152, 1792, 3456, 4864, 9728, 18944})
        return [("gq_fp8_g128", BF16, {"T": t, "H": h}) for h in widths for t in MODEL_T_QUANT]
    if quick:
        return [
            ("gq_fp8_g128", BF16, {"T": 1, "H": 4096}),  # decode: L2-hot in a graph
            ("gq_fp8_g128", BF16, {"T": 32768, "H": 4096}),  # the acceptance shape
            ("gq_silu_g128", BF16, {"T": 4096, "H": 4096}),
            ("gq_ue8m0_g128", BF16, {"T": 128, "H": 7168}),
            ("gq_masked_g128", BF16, {"E": 8, "T": 256, "H": 7168}),
        ]
    out = [("gq_fp8_g128", BF16, {"T": t, "H": 4096}) for t in T_ALL]
    out += [("gq_silu_g128", BF16, {"T": t, "H": 4096}) for t in (1, 128, 4096, 32768)]
    out += [("gq_fp8_g128", BF16, {"T": t, "H": 7168}) for t in (4096, 32768)]
    out += [("gq_ue8m0_g128", BF16, {"T": t, "H": 7168}) for t in (1, 16, 128, 4096, 32768)]
    out += [("gq_col_g128", BF16, {"T": t, "H": 7168}) for t in (1, 16, 128, 4096, 32768)]
    # (column-major rows of 4096 at 64 / 128 rows: norm_quant.cu's tile kernel, kGroupTileRows)
    out += [("gq_col_g128", BF16, {"T": t, "H": 4096}) for t in (64, 128)]
    out += [("gq_fp8_g128", BF16, {"T": t, "H": 16384}) for t in (1, 16, 128)]
    # (rows of 28672, Llama-70B's down projection, below 64 rows: the tile kernel since session 39)
    out += [("gq_col_g128", BF16, {"T": t, "H": 28672}) for t in (1, 16, 48)]
    for op in ("gq_fp8_g64", "gq_fp8_g32"):
        out += [(op, BF16, {"T": t, "H": 4096}) for t in (128, 32768)]
    out += [("gq_int8_g128", BF16, {"T": t, "H": 4096}) for t in (1, 32768)]
    out += [("gq_masked_g128", BF16, {"E": e, "T": t, "H": 7168}) for e, t in ((8, 256), (8, 4096), (32, 1024))]
    out += [("gq_masked_silu", BF16, {"E": 8, "T": 4096, "H": 2048})]
    # An expert-parallel decode step (DeepEP's low-latency layout): 32 local experts, room for
    # 1024 tokens each, at most M of them used.
    out += [("gq_masked_g128", BF16, {"E": 32, "T": 1024, "H": 7168, "M": 32})]
    out += [("gq_masked_silu", BF16, {"E": 32, "T": 1024, "H": 2048, "M": m}) for m in (32, 128)]
    return out


def masked_counts(e: int, t: int, most: Optional[int] = None) -> torch.Tensor:
    """masked_m for E experts of capacity T (CPU int32): uniform in [1, T], then a quarter
    of the experts 0 and one expert full; with ``most``, uniform in [0, most] instead. Seeded
    by the shape, so bytes are known up front."""
    if most is not None:
        gen = torch.Generator().manual_seed(zlib.crc32(f"masked_m {e} {t} {most}".encode()))
        return torch.randint(0, most + 1, (e,), generator=gen, dtype=torch.int32)
    gen = torch.Generator().manual_seed(zlib.crc32(f"masked_m {e} {t}".encode()))
    m = torch.randint(1, t + 1, (e,), generator=gen, dtype=torch.int32)
    perm = torch.randperm(e, generator=gen)
    zeros = max(1, e // 4)
    m[perm[:zeros]] = 0
    m[perm[zeros]] = t
    return m


def nbytes_of(spec: Spec, params, elt: int, rows: int) -> int:
    h = params["H"]
    h_in = 2 * h if spec.silu else h
    total = rows * h_in * elt + rows * h + scale_bytes(rows, h // spec.group, spec.layout)
    return total + (params["E"] * 4 if spec.masked else 0)


def make_setup(spec: Spec, dtype: torch.dtype, params, masked_m):
    h, t = params["H"], params["T"]
    h_in = 2 * h if spec.silu else h
    lead = (params["E"],) if spec.masked else ()

    def setup():
        x = torch.randn(*lead, t, h_in, device="cuda", dtype=dtype)
        q = torch.empty(*lead, t, h, device="cuda", dtype=spec.out_dtype)
        s = alloc_scales(t, h // spec.group, spec.layout, "cuda", lead)
        state = State(outputs=(q, s))
        if spec.masked:
            return (x, q, s, masked_m.to(device="cuda"), state)
        return (x, q, s, state)

    return setup


# ---------------------------------------------------------------------------------------
# The functions the providers time: (input, output_q, output_s[, masked_m])


def reference(spec: Spec, x: torch.Tensor):
    """``(q, scales)`` of the op: the reference on x, or on the rounded silu(a) * b."""
    src = silu_and_mul_fp32(x).to(x.dtype) if spec.silu else x
    return group_quant_ref(src, spec.group, EPS, spec.out_dtype, spec.ue8m0)


def torch_fn(spec: Spec):
    if spec.masked:

        def masked(x, q, s, masked_m):
            q_ref, s_ref = reference(spec, x)
            store_masked(q, s, q_ref, s_ref, masked_m)

        return masked

    def dense(x, q, s):
        q_ref, s_ref = reference(spec, x)
        q.copy_(q_ref)
        store_scales(s, s_ref)

    return dense


def ours_fn(spec: Spec, dry_run: bool):
    fn = sgl_op("sgl_per_token_group_quant_8bit", dry_run)
    qmin, qmax = qrange(spec.out_dtype)
    g, ue8m0, silu = spec.group, spec.ue8m0, spec.silu
    if spec.masked:

        def masked(x, q, s, masked_m):
            fn(x, q, s, g, EPS, qmin, qmax, scale_ue8m0=ue8m0, fuse_silu_and_mul=silu, masked_m=masked_m)

        return masked
    if silu:
        return lambda x, q, s: fn(x, q, s, g, EPS, qmin, qmax, scale_ue8m0=ue8m0, fuse_silu_and_mul=True)
    return lambda x, q, s: fn(x, q, s, g, EPS, qmin, qmax, scale_ue8m0=ue8m0)


def two_kernel_fn(spec: Spec, dry_run: bool):
    """silu_and_mul, then the group quant of its output; returns that output for the check."""
    act = sgl_op("silu_and_mul", dry_run)
    quant = sgl_op("sgl_per_token_group_quant_8bit", dry_run)
    qmin, qmax = qrange(spec.out_dtype)
    g, ue8m0 = spec.group, spec.ue8m0
    if spec.masked:

        def masked(x, q, s, masked_m):
            y = act(x)
            quant(y, q, s, g, EPS, qmin, qmax, scale_ue8m0=ue8m0, masked_m=masked_m)
            return y

        return masked

    def dense(x, q, s):
        y = act(x)
        quant(y, q, s, g, EPS, qmin, qmax, scale_ue8m0=ue8m0)
        return y

    return dense


# ---------------------------------------------------------------------------------------
# Output check


def make_check(spec: Spec):
    def check(args, out):
        x, q, s = args[:3]
        state = args[-1]
        groups = q.shape[-1] // spec.group
        if out is None:  # sgl_kernel, torch, torch.compile: the op's own semantics
            q_ref, s_ref = cached(state, "ref", lambda: reference(spec, x))
            rtol = ROUNDED_INPUT_SCALE_RTOL if spec.silu else SCALE_RTOL
        elif isinstance(out, torch.Tensor):  # two-kernel: out is the silu_and_mul output
            msg = check_close("silu_and_mul output", out, silu_and_mul_fp32(x), x.dtype)
            if msg:
                return msg
            q_ref, s_ref = group_quant_ref(out, spec.group, EPS, spec.out_dtype, spec.ue8m0)
            rtol = SCALE_RTOL
        else:
            return f"returned {type(out).__name__}, expected None"
        scales = read_scales(s, groups)
        rows = None
        if spec.masked:
            masked_m = args[3]
            rows = torch.arange(q.shape[-2], device=q.device) < masked_m.unsqueeze(-1)
            msg = check_untouched(q, scales, rows)
            if msg:
                return msg
        else:
            msg = check_padding(s, groups)
            if msg:
                return msg
        return check_quant(q, scales, q_ref, s_ref, rtol, rows)

    return check


# ---------------------------------------------------------------------------------------


def build(args: argparse.Namespace) -> Bench:
    ops = Bench.selected_ops(args, OPS)
    bench = Bench("group_quant", "per-token-group 8-bit quantization vs torch eager, torch.compile and "
                       "the two-kernel SiLU sequence", plot_x="T")

    add_providers(
        bench,
        ours=lambda op: ours_fn(SPECS[op], args.dry_run),
        reference=lambda op: torch_fn(SPECS[op]),
        wrap=lambda op, fn: reset_first(fn),
        rounded_intermediate=lambda op: SPECS[op].silu,
        two_kernel=lambda op: two_kernel_fn(SPECS[op], args.dry_run),
        two_kernel_applies=lambda op: SPECS[op].silu,
    )

    for op, dtype, params in shapes(args.quick, args.models):
        if op not in ops:
            continue
        spec = SPECS[op]
        masked_m = masked_counts(params["E"], params["T"], params.get("M")) if spec.masked else None
        rows = int(masked_m.sum()) if spec.masked else params["T"]
        bench.add_case(op, dtype, params, make_setup(spec, dtype, params, masked_m),
                       nbytes_of(spec, params, elt_size(dtype), rows), check=make_check(spec))
    names = ["sgl_per_token_group_quant_8bit"]
    if any(SPECS[c.op].silu for c in bench.cases):
        names.append("silu_and_mul")
    note_missing(bench, names)

    # Goals (DESIGN.md 9 and the brief of this family), for the shapes in this run.
    headline = {"T": 32768, "H": 4096}
    if any(c.op == "gq_fp8_g128" and c.dtype == BF16 and c.params == headline for c in bench.cases):
        bench.goal_gbps("gq_fp8_g128", BF16, headline, h200_gbps=3800)
    present = [op for op in ops if any(c.op == op for c in bench.cases)]
    if not args.no_compile:
        for op in present:
            bench.goal_min_speedup(op, "torch.compile", 1.0)
    for op in present:
        if SPECS[op].silu:
            if not SPECS[op].masked:
                bench.goal_min_speedup(op, "two-kernel", 1.3, min_t=4096)
            bench.goal_min_speedup(op, "two-kernel", 1.0)
    for c in bench.cases:
        if not SPECS[c.op].masked and c.params["T"] in DECODE_T:
            bench.goal_max_us(c.op, c.dtype, c.params, max_us=2.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv, models=True)


if __name__ == "__main__":
    sys.exit(main())
