# SPDX-License-Identifier: Apache-2.0
"""sgl_per_token_group_quant_8bit (v1) and sgl_per_token_group_quant_8bit_v2 (API.md 2.2),
through the wrapper (``enable_v2`` explicit, the aliases, the environment dispatch) and through
``torch.ops``, against the exact references of ref_quant.py.

The kernels compute the reference's formulas step for step in fp32, so scales are compared bit
for bit and codes value for value (NaN == NaN, -0 == 0). Outputs are poisoned before each call
(fp8 codes 0x7F = NaN, int8 codes -128, which no finite input produces with (-128, 127); scales
NaN / 0xFF bytes), so an unwritten element fails the comparison.

Scale layouts (``LAYOUTS``): ``row`` fp32 ``[M, G]``; ``col`` fp32 column-major with the pitch
``Mp`` = M rounded up to 4; ``col_ue8m0`` packed int32 UE8M0 (codes use the rounded scale);
``row_ue8m0`` fp32 row-major with ``scale_ue8m0`` (v2 only: the rounded scale is stored, the
codes use the exact one).
"""

from __future__ import annotations

import importlib
from typing import Optional, Tuple

import pytest
import torch

import sgl_kernel
from tests.helpers import one_row_view, opcheck_any_dtype, raises_op_error
from tests.quantization.ref_quant import (
    EPS,
    FP8,
    alloc_scales,
    assert_codes_equal,
    assert_scales_equal,
    fp8_code_bytes,
    group_quant_ref,
    ieee_div,
    packed_padding_bytes,
    packed_scale_bytes,
    qrange,
    read_scales,
    scale_padding_untouched,
    ue8m0_byte,
    ue8m0_round,
)

pytestmark = pytest.mark.gpu

V1 = "sgl_per_token_group_quant_8bit"
V2 = "sgl_per_token_group_quant_8bit_v2"
OP_NAME = {"v1": V1, "v2": V2}
ENV = "SGLANG_PER_TOKEN_GROUP_QUANT_8BIT_V2"

HALF_DTYPES = (torch.float16, torch.bfloat16)
OUT_DTYPES = (FP8, torch.int8)
GROUP_SIZES = (16, 32, 64, 128)
NAN = float("nan")
INF = float("inf")

# name -> (alloc_scales layout, scale_ue8m0)
LAYOUTS = {
    "row": ("row", False),
    "col": ("col", False),
    "col_ue8m0": ("col_ue8m0", True),
    "row_ue8m0": ("row", True),  # v2 only
}
V1_LAYOUTS = ("row", "col", "col_ue8m0")

# The matrix (bf16, fp8, g=128, row-major) and the reduced one for everything else.
TOKENS = (1, 7, 128, 4096, 16384)
HIDDENS = (128, 1536, 4096, 7168, 16384)
R_SHAPES = [(t, h) for t in (1, 7, 4096) for h in (128, 1536, 7168)]
SILU_SHAPES = [(1, 128), (7, 1536), (4096, 7168)]
MASKED_SHAPES = [(1, 128), (37, 1536), (256, 7168)]  # (T, K)

POISON_FP8 = 0x7F  # e4m3 NaN
POISON_INT8 = -128  # |x * (1 / scale)| <= 127 for finite x with (qmin, qmax) = (-128, 127)


def _op(name: str):
    return getattr(torch.ops.sgl_kernel, name).default


def _dt(d: torch.dtype) -> str:
    return {FP8: "fp8", torch.int8: "int8"}.get(d, str(d).replace("torch.", ""))


def _shape_ids(shapes):
    return ["x".join(map(str, shape)) for shape in shapes]


def _versions(layout: str) -> Tuple[str, ...]:
    return ("v2",) if layout == "row_ue8m0" else ("v1", "v2")


def _rand(shape, dtype, gen, lo: float = -2.0, hi: float = 2.0) -> torch.Tensor:
    """``randn`` times a random magnitude ``10**U(lo, hi)`` per row, so that scales vary."""
    x = torch.randn(shape, dtype=torch.float32, device="cuda", generator=gen)
    mag = torch.empty((*shape[:-1], 1), device="cuda").uniform_(lo, hi, generator=gen)
    return (x * torch.pow(10.0, mag)).to(dtype)


def _poison_byte(out_dtype: torch.dtype) -> int:
    return POISON_FP8 if out_dtype == FP8 else POISON_INT8 & 0xFF


def _outputs(lead: Tuple[int, ...], m: int, k: int, group_size: int, out_dtype, layout: str, poison: Optional[int] = None):
    """Poisoned ``(output_q [*lead, m, k], output_s)`` for ``layout``."""
    q = torch.empty((*lead, m, k), dtype=out_dtype, device="cuda")
    q.view(torch.uint8).fill_(_poison_byte(out_dtype) if poison is None else poison)
    s = alloc_scales(m, k // group_size, LAYOUTS[layout][0], "cuda", lead=lead)
    return q, s


def _call(
    version: str,
    how: str,
    x: torch.Tensor,
    q: torch.Tensor,
    s: torch.Tensor,
    group_size: int,
    layout: str,
    fuse: bool = False,
    masked_m: Optional[torch.Tensor] = None,
    eps: float = EPS,
    qrange_: Optional[Tuple[float, float]] = None,
) -> None:
    """One call: through the wrapper with ``enable_v2`` explicit, or through ``torch.ops``."""
    qmin, qmax = qrange(q.dtype) if qrange_ is None else qrange_
    ue8m0 = LAYOUTS[layout][1]
    if how == "wrapper":
        ret = sgl_kernel.sgl_per_token_group_quant_8bit(
            x,
            q,
            s,
            group_size,
            eps,
            qmin,
            qmax,
            scale_ue8m0=ue8m0,
            fuse_silu_and_mul=fuse,
            masked_m=masked_m,
            enable_v2=version == "v2",
        )
        assert ret is None
    elif version == "v1":
        assert _op(V1)(x, q, s, group_size, eps, qmin, qmax, ue8m0) is None
    else:
        assert _op(V2)(x, q, s, group_size, eps, qmin, qmax, ue8m0, fuse, masked_m) is None


def _ref(
    x: torch.Tensor,
    group_size: int,
    out_dtype,
    layout: str,
    fuse: bool = False,
    eps: float = EPS,
    qrange_: Optional[Tuple[float, float]] = None,
):
    """``(q, scale)`` of the reference. With ``fuse`` the quantised values are what
    ``sgl_kernel.silu_and_mul`` stores (rounded to the input dtype), as the kernel computes them."""
    if fuse:
        x = sgl_kernel.silu_and_mul(x)
    qmin, qmax = qrange(out_dtype) if qrange_ is None else qrange_
    alloc, ue8m0 = LAYOUTS[layout]
    return group_quant_ref(
        x, group_size, eps, out_dtype, ue8m0, ue8m0_codes_use_rounded=alloc != "row", qmin=qmin, qmax=qmax
    )


def _assert_ints_equal(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    assert a.shape == b.shape, (what, a.shape, b.shape)
    bad = a != b
    n = int(bad.sum())
    if n:
        idx = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(f"{what}: {n} of {a.numel()} differ; first at {idx}: got {int(a[idx])}, expected {int(b[idx])}")


def _select_rows(q: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``q[rows]`` for int8 or fp8 codes (boolean indexing has no fp8 CUDA kernel: index the
    bytes and view them back)."""
    return q.view(torch.uint8)[rows].view(q.dtype)


def _check(
    q: torch.Tensor,
    s: torch.Tensor,
    layout: str,
    ref_q: torch.Tensor,
    ref_s: torch.Tensor,
    rows: Optional[torch.Tensor] = None,
) -> None:
    """Codes and scales against the reference. ``rows`` (bool ``[E, T]``, masked mode): only
    those rows are compared, the others must still hold the poison."""
    groups = ref_s.shape[-1]
    m = q.shape[-2]
    packed = LAYOUTS[layout][0] == "col_ue8m0"
    got_s = packed_scale_bytes(s, groups) if packed else s
    exp_s = ue8m0_byte(ref_s) if packed else ref_s
    pad = packed_padding_bytes(s, groups) if packed else None
    if rows is not None:
        skipped = ~rows
        q_bytes = q.view(torch.uint8)[skipped]
        assert bool((q_bytes == _poison_byte(q.dtype)).all()), "output_q: rows at or past masked_m were written"
        s_skipped = s[skipped]
        if packed:
            assert bool((s_skipped == -1).all()), "output_s: rows at or past masked_m were written"
        else:
            assert bool(s_skipped.isnan().all()), "output_s: rows at or past masked_m were written"
        q, ref_q = _select_rows(q, rows), _select_rows(ref_q, rows)
        got_s, exp_s = got_s[rows], exp_s[rows]
        if pad is not None:
            pad = pad[rows]
    assert_codes_equal(q, ref_q, "output_q")
    if packed:
        _assert_ints_equal(got_s, exp_s, "output_s UE8M0 bytes")
        assert bool((pad == 0).all()), "output_s: the unused trailing bytes of the last int32 are not 0"
    else:
        assert_scales_equal(got_s, exp_s, "output_s")
    assert scale_padding_untouched(s, m), "output_s: the op wrote into the pad rows (M..Mp) outside the view"


def _assert_bitwise(a: Tuple[torch.Tensor, torch.Tensor], b: Tuple[torch.Tensor, torch.Tensor]) -> None:
    """Two (output_q, output_s) results bit for bit (v1 against v2)."""
    assert torch.equal(a[0].view(torch.uint8), b[0].view(torch.uint8)), "output_q differs between v1 and v2"
    sa, sb = a[1].contiguous(), b[1].contiguous()
    assert torch.equal(sa.view(torch.int32), sb.view(torch.int32)), "output_s differs between v1 and v2"


def _run_check(version, how, x, group_size, out_dtype, layout, ref, **kw):
    m, k = x.shape[-2], x.shape[-1]
    if kw.get("fuse"):
        k //= 2
    q, s = _outputs(tuple(x.shape[:-2]), m, k, group_size, out_dtype, layout)
    _call(version, how, x, q, s, group_size, layout, **kw)
    _check(q, s, layout, *ref)
    return q, s


# ---------------------------------------------------------------------------------------
# Correctness


@pytest.mark.parametrize("hidden", HIDDENS)
@pytest.mark.parametrize("tokens", TOKENS)
def test_matrix_bf16_fp8_g128(tokens, hidden, gen):
    """The issue's 25 shapes, bf16 -> fp8, group 128, row-major scales, v1 and v2."""
    x = _rand((tokens, hidden), torch.bfloat16, gen)
    ref = _ref(x, 128, FP8, "row")
    first = _run_check("v1", "wrapper", x, 128, FP8, "row", ref)
    second = _run_check("v2", "wrapper", x, 128, FP8, "row", ref)
    _assert_bitwise(first, second)


# Decode rows (<= 256) of g=128 fp8 with fp32 (row- or column-major) or packed UE8M0 scales take
# norm_quant.cu's decode kernel: 4 groups a warp where 512 divides the row, and from 768 elements 2 or 1 groups
# a warp where 256 or 128 does (768: 3 warps of 2, 896: 7 of 1, 1152: 9 of 1, 2304: 9 of 2,
# 3456: 27 of 1, 3840: 15 of 2; 4224: 33 of 1, in two pieces as below). Packed rows of 2 or 1
# groups a warp end mid-word (896: 7 groups, the last word's byte 3 written 0). 640 (below 768)
# takes the flat kernel.
FEW_GROUP_SHAPES = [(t, h) for t in (1, 16, 256) for h in (768, 896, 1152, 2304, 3456, 3840)] + [(3, 4224), (5, 640)]
# Rows of more than 32 warps take the decode kernel in pieces of at most 32 warps, a block each
# (18944: 37 warps of 4 groups, 2 pieces of 19 with one idle warp; 16896: 33 warps, 17 + 16;
# 25600: 50; 16640: 65 warps of 2 groups, 3 pieces; 16512: 129 of 1, 5 pieces); rows of more
# than 8192 elements only from 64 rows, below it the flat kernel (63 rows).
PIECE_SHAPES = [(64, 18944), (100, 16896), (256, 25600), (77, 16640), (64, 16512), (63, 18944)]
# More than 256 rows of 16-bit input (norm_quant.cu decode_takes_many_rows): the decode kernel
# at every count from 1536 elements up to 8192 (2304: 2 groups a warp), up to 4096 rows at
# 1024 and 1152 (1 group a warp), up to 1024 at 768 and 512 at 512; one past each bound, and
# rows of more than 32 warps (4224), take the vector kernel; so does fp32 input.
MANY_ROW_SHAPES = [(512, 512), (513, 512), (1024, 768), (1025, 768), (4096, 1024), (4097, 1024), (4096, 1152)]
MANY_ROW_SHAPES += [(4097, 1152), (2049, 1536), (2049, 2304), (1000, 4096), (300, 7168), (513, 8192), (300, 4224)]
# 16-bit rows with fp32 scales at 129-256 rows take 2 or 1 groups a warp at some lengths
# (norm_quant.cu kPlainQuantGpwRows: 2560 k2 128-192, 3072 k2 128-192 and k1 193-256, 4096 k1
# 224-256, 6144 k2 192-256, 7168 k2 152-256, 8192 k2 224-256): each bound and one past it.
GPW_ROW_SHAPES = [(127, 2560), (128, 2560), (192, 2560), (193, 2560), (127, 3072), (192, 3072), (193, 3072)]
GPW_ROW_SHAPES += [(256, 3072), (223, 4096), (224, 4096), (256, 4096), (191, 6144), (192, 6144), (256, 6144)]
GPW_ROW_SHAPES += [(151, 7168), (152, 7168), (256, 7168), (223, 8192), (224, 8192), (256, 8192)]
# 16-bit rows of 4096-8192 elements at up to 160 rows take norm_quant.cu's tile kernel (8 rows x
# 4 groups a block; kGroupTileRows) by layout: every layout 5120-8192 to 32 rows; column-major
# (fp32 or packed) 4096-8192 at 33-48 rows, 4096-7168 at 49-64; with the scales staged through
# shared memory column-major fp32 4096-6144 at 65-160 rows, packed 4096 at 65-160 and 5120-6144
# at 65-96; every layout 12288-18432 to 63 rows (16 without the staging). Each bound, one past
# it, and row counts off a multiple of 8 (a partial tile).
TILE_ROWS = (1, 9, 32, 33, 48, 49, 64, 65, 96, 97, 160, 161)
TILE_ROW_SHAPES = [(t, h) for h in (4096, 5120, 6144, 7168, 8192) for t in TILE_ROWS]
TILE_ROW_SHAPES += [(t, h) for h in (12288, 14336, 18432) for t in (1, 16, 17, 63, 64)]
# Session 39: every kGroupTileRows bound past 8192 elements, and the first row length past the
# table (66048: the flat kernel below 64 rows).
TILE_ROW_SHAPES += [(t, h) for h in (8704, 11776) for t in (1, 32, 33, 63, 64)]
TILE_ROW_SHAPES += [(t, 18944) for t in (16, 17, 63)]
TILE_ROW_SHAPES += [(t, h) for h in (19456, 26624) for t in (1, 16, 17, 48, 49, 63, 64)]
TILE_ROW_SHAPES += [(t, h) for h in (27136, 32768, 34816) for t in (8, 9, 32, 33, 63)]
TILE_ROW_SHAPES += [(t, h) for h in (35328, 65536) for t in (1, 63, 64)] + [(1, 66048), (63, 66048)]
DECODE_SHAPES = FEW_GROUP_SHAPES + PIECE_SHAPES + MANY_ROW_SHAPES + GPW_ROW_SHAPES + TILE_ROW_SHAPES


@pytest.mark.parametrize("tokens, hidden", DECODE_SHAPES, ids=_shape_ids(DECODE_SHAPES))
@pytest.mark.parametrize("layout", ["row", "col", "col_ue8m0"])
@pytest.mark.parametrize("dtype", (torch.float32,) + HALF_DTYPES, ids=_dt)
def test_decode_few_groups_a_warp(dtype, layout, tokens, hidden, gen):
    """Exact codes and scales at the decode kernel's 2- and 1-group-a-warp row lengths, in
    pieces and at many rows; v1 and v2 bit-identical (fp32 input: v1 only)."""
    x = _rand((tokens, hidden), dtype, gen)
    ref = _ref(x, 128, FP8, layout)
    versions = ("v1",) if dtype == torch.float32 else _versions(layout)
    results = [_run_check(v, "wrapper", x, 128, FP8, layout, ref) for v in versions]
    if len(results) == 2:
        _assert_bitwise(*results)


@pytest.mark.parametrize("tokens, hidden", R_SHAPES, ids=_shape_ids(R_SHAPES))
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("group_size", GROUP_SIZES)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=_dt)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=_dt)
def test_group_quant(dtype, out_dtype, group_size, layout, tokens, hidden, gen):
    """fp16/bf16 -> fp8/int8, every group size and scale layout; v1 and v2 where both apply,
    bit-identical to each other."""
    if hidden % group_size:
        pytest.skip(f"hidden {hidden} is not a multiple of group_size {group_size}")
    x = _rand((tokens, hidden), dtype, gen)
    ref = _ref(x, group_size, out_dtype, layout)
    results = [_run_check(v, "wrapper", x, group_size, out_dtype, layout, ref) for v in _versions(layout)]
    if len(results) == 2:
        _assert_bitwise(*results)


# More than 256 rows take norm_quant.cu's vector kernel (kGroupShapes); 5 vectors a lane where
# neither 4 nor 8 fit: 16-bit rows of 640 / 1152 / 1280 / 2176 elements (80 / 144 / 160 / 272
# vectors: 5 on 16 / 32 / 32 / 64 lanes) at every group size up to 128, 576 up to g=64 and 288
# up to g=32 (1280 at g=256 too, a 16-bit test of test_fused_norm_quant.py); fp32 rows of 640
# at every group size, 576 up to g=64 and 288 up to g=32. The other shapes here take 2 or 4
# vectors. 257 rows (a partial last block) and 1024.
FIVE_VEC_SHAPES = [(t, h) for t in (257, 1024) for h in (288, 576, 640, 1152, 1280, 2176)]


@pytest.mark.parametrize("tokens, hidden", FIVE_VEC_SHAPES, ids=_shape_ids(FIVE_VEC_SHAPES))
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("group_size", GROUP_SIZES)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=_dt)
@pytest.mark.parametrize("dtype", (torch.float32,) + HALF_DTYPES, ids=_dt)
def test_many_rows_five_vectors(dtype, out_dtype, group_size, layout, tokens, hidden, gen):
    if hidden % group_size:
        pytest.skip(f"hidden {hidden} is not a multiple of group_size {group_size}")
    if layout == "row_ue8m0" and dtype == torch.float32:
        pytest.skip("row-major UE8M0 scales: the v2 path, 16-bit input only")
    x = _rand((tokens, hidden), dtype, gen)
    ref = _ref(x, group_size, out_dtype, layout)
    versions = ("v1",) if dtype == torch.float32 else _versions(layout)
    results = [_run_check(v, "wrapper", x, group_size, out_dtype, layout, ref) for v in versions]
    if len(results) == 2:
        _assert_bitwise(*results)


@pytest.mark.parametrize("tokens, hidden", R_SHAPES, ids=_shape_ids(R_SHAPES))
@pytest.mark.parametrize("layout", V1_LAYOUTS)
@pytest.mark.parametrize("group_size", GROUP_SIZES)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=_dt)
def test_group_quant_fp32_v1(out_dtype, group_size, layout, tokens, hidden, gen):
    """fp32 input: v1 only (v2 rejects it, see test_bad_inputs)."""
    x = _rand((tokens, hidden), torch.float32, gen)
    ref = _ref(x, group_size, out_dtype, layout)
    _run_check("v1", "wrapper", x, group_size, out_dtype, layout, ref)


@pytest.mark.parametrize("tokens", [1, 5, 33])
@pytest.mark.parametrize("group_size", [16, 128])
@pytest.mark.parametrize("groups", [1, 2, 3, 5, 6, 7])
def test_packed_ue8m0_padding(groups, group_size, tokens, gen):
    """G % 4 != 0: the unused trailing bytes of each token's last int32 are written 0; odd token
    counts leave pad rows (M..Mp) that must stay untouched. v1 and v2."""
    hidden = groups * group_size
    x = _rand((tokens, hidden), torch.bfloat16, gen)
    ref = _ref(x, group_size, FP8, "col_ue8m0")
    results = [_run_check(v, "wrapper", x, group_size, FP8, "col_ue8m0", ref) for v in ("v1", "v2")]
    _assert_bitwise(*results)


@pytest.mark.parametrize("tokens, hidden", SILU_SHAPES, ids=_shape_ids(SILU_SHAPES))
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("group_size", GROUP_SIZES)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=_dt)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=_dt)
def test_fuse_silu_and_mul(dtype, out_dtype, group_size, layout, tokens, hidden, gen):
    """v2 with ``fuse_silu_and_mul``: input ``[M, 2K]``, the quantised values are
    ``silu_and_mul(input)`` rounded to the input dtype. The input is left unchanged."""
    # Magnitudes up to 10: silu(a) * b stays far from the fp16 limit.
    x = _rand((tokens, 2 * hidden), dtype, gen, lo=-2.0, hi=1.0)
    x0 = x.clone()
    ref = _ref(x, group_size, out_dtype, layout, fuse=True)
    _run_check("v2", "wrapper", x, group_size, out_dtype, layout, ref, fuse=True)
    assert torch.equal(x.view(torch.int16), x0.view(torch.int16)), "input was modified"


def _masked_m(experts: int, tokens: int, gen) -> torch.Tensor:
    """int32 ``[experts]``: 0, T, then random counts in [0, T]."""
    fixed = [0, tokens]
    rest = torch.randint(0, tokens + 1, (experts - len(fixed),), device="cuda", generator=gen)
    return torch.cat([torch.tensor(fixed, device="cuda"), rest]).to(torch.int32)


def _rows(masked_m: torch.Tensor, tokens: int) -> torch.Tensor:
    """bool ``[E, T]``: the rows the op processes, ``t < masked_m[e]``."""
    t = torch.arange(tokens, device="cuda")
    return t.unsqueeze(0) < masked_m.to(torch.int64).unsqueeze(1)



@pytest.mark.parametrize("fuse", [False, True], ids=["plain", "silu"])
@pytest.mark.parametrize("tokens, hidden", MASKED_SHAPES, ids=_shape_ids(MASKED_SHAPES))
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("group_size", [32, 128])
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=_dt)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=_dt)
def test_masked(dtype, out_dtype, group_size, layout, tokens, hidden, fuse, gen):
    """v2 masked mode: ``[E, T, K]`` (``[E, T, 2K]`` fused), 3-D scales, only ``t < masked_m[e]``
    processed (experts with 0 and T rows included); the other rows keep the poison."""
    experts = 6
    in_k = 2 * hidden if fuse else hidden
    x = _rand((experts, tokens, in_k), dtype, gen, lo=-2.0, hi=1.0 if fuse else 2.0)
    masked_m = _masked_m(experts, tokens, gen)
    q, s = _outputs((experts,), tokens, hidden, group_size, out_dtype, layout)
    assert s.dim() == 3
    _call("v2", "wrapper", x, q, s, group_size, layout, fuse=fuse, masked_m=masked_m)
    ref_q, ref_s = _ref(x, group_size, out_dtype, layout, fuse=fuse)
    _check(q, s, layout, ref_q, ref_s, rows=_rows(masked_m, tokens))


# group_quant.cu's masked kernel (a row of blocks per expert stepping through its used rows):
# many experts with a few used rows each out of a large capacity (an expert-parallel decode
# step), and few experts whose blocks loop over several chunks each (two vectors a thread).
MASKED_GRID_SHAPES = [(40, 300, 2048, 20), (3, 4096, 4096, 4096), (64, 128, 7168, 3)]  # (E, T, K, max count)


@pytest.mark.parametrize("fuse", [False, True], ids=["plain", "silu"])
@pytest.mark.parametrize("experts, tokens, hidden, most", MASKED_GRID_SHAPES,
                         ids=[f"E{e}-T{t}-K{k}-m{m}" for e, t, k, m in MASKED_GRID_SHAPES])
@pytest.mark.parametrize("layout", V1_LAYOUTS)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=_dt)
def test_masked_grid(dtype, layout, experts, tokens, hidden, most, fuse, gen):
    in_k = 2 * hidden if fuse else hidden
    x = _rand((experts, tokens, in_k), dtype, gen, lo=-2.0, hi=1.0 if fuse else 2.0)
    masked_m = torch.randint(0, most + 1, (experts,), device="cuda", generator=gen).to(torch.int32)
    masked_m[0] = most
    q, s = _outputs((experts,), tokens, hidden, 128, FP8, layout)
    _call("v2", "wrapper", x, q, s, 128, layout, fuse=fuse, masked_m=masked_m)
    ref_q, ref_s = _ref(x, 128, FP8, layout, fuse=fuse)
    _check(q, s, layout, ref_q, ref_s, rows=_rows(masked_m, tokens))


@pytest.mark.parametrize("fuse", [False, True], ids=["plain", "silu"])
@pytest.mark.parametrize("tokens", [24, 64])  # 5 * 64 rows: past 256, the row kernel
@pytest.mark.parametrize("layout", ["row", "col_ue8m0"])
def test_masked_m_out_of_range(layout, tokens, fuse, gen):
    """Counts above T process all T rows and nothing beyond the tensors (guard expert after
    output_q / row-major output_s); a negative count processes none."""
    experts, hidden, gs = 5, 512, 128
    x = _rand((experts, tokens, 2 * hidden if fuse else hidden), torch.bfloat16, gen)
    masked_m = torch.tensor([tokens + 3, 2**31 - 1, -1, 0, 7], dtype=torch.int32, device="cuda")
    q_buf, s_buf = _outputs((experts + 1,), tokens, hidden, gs, FP8, layout)
    q = q_buf[:experts]
    s = s_buf[:experts]
    _call("v2", "op", x, q, s, gs, layout, fuse=fuse, masked_m=masked_m)
    ref_q, ref_s = _ref(x, gs, FP8, layout, fuse=fuse)
    rows = _rows(masked_m.clamp(min=0, max=tokens), tokens)
    assert int(rows.sum()) == 2 * tokens + 7
    _check(q, s, layout, ref_q, ref_s, rows=rows)
    assert bool((q_buf[experts].view(torch.uint8) == POISON_FP8).all()), "wrote past the last expert of output_q"
    guard = s_buf[experts]
    assert bool(guard.isnan().all() if guard.dtype == torch.float32 else (guard == -1).all()), "wrote past output_s"


# ---------------------------------------------------------------------------------------
# Special values, eps, ranges


SPECIAL_CASES = [
    (d, v, lay)
    for d in (torch.float16, torch.bfloat16, torch.float32)
    for v in ("v1", "v2")
    for lay in LAYOUTS
    if not (v == "v1" and lay == "row_ue8m0") and not (v == "v2" and d == torch.float32)
]


@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=_dt)
@pytest.mark.parametrize("dtype, version, layout", SPECIAL_CASES, ids=lambda c: _dt(c) if isinstance(c, torch.dtype) else c)
def test_special_values(dtype, version, layout, out_dtype, gen):
    """NaN in a group: scale NaN (UE8M0 byte 255), fp8 codes NaN / int8 codes 0. inf: scale
    inf (byte 255), the inf element's code NaN / 0, the finite ones 0. An all-zero group:
    scale eps / qmax (its UE8M0 rounding), codes 0. Other groups unaffected (exact reference)."""
    gs, groups, tokens = 128, 5, 9
    hidden = gs * groups
    x = _rand((tokens, hidden), dtype, gen, lo=-1.0, hi=1.0)
    x[0, 10] = NAN  # row 0, group 0
    x[1, gs + 3] = INF  # row 1, group 1
    x[2, 5] = -INF  # row 2, group 0
    x[3, 2 * gs : 3 * gs] = 0  # row 3, group 2: all zero
    x[4, 4 * gs + 7] = NAN  # row 4, group 4: NaN and inf together
    x[4, 4 * gs + 8] = INF
    x[5] = 0  # a whole zero row
    x[6, 3 * gs + 1] = -NAN  # row 6, group 3
    # fp8: poison with 448 (0x7E) here, so that NaN codes that are expected cannot be the poison.
    q, s = _outputs((), tokens, hidden, gs, out_dtype, layout, poison=0x7E if out_dtype == FP8 else None)
    _call(version, "wrapper", x, q, s, gs, layout)
    ref_q, ref_s = _ref(x, gs, out_dtype, layout)
    _check(q, s, layout, ref_q, ref_s)

    packed = LAYOUTS[layout][0] == "col_ue8m0"
    scales = read_scales(s, groups)  # packed: byte 255 reads as NaN
    raw = packed_scale_bytes(s, groups) if packed else None
    qf = q.float()

    def grp(r: int, g: int) -> slice:
        return slice(g * gs, (g + 1) * gs)

    def assert_nan_scale(r, g):
        assert int(raw[r, g]) == 255 if packed else bool(torch.isnan(scales[r, g])), (r, g, scales[r, g])

    def assert_inf_scale(r, g):
        assert int(raw[r, g]) == 255 if packed else float(scales[r, g]) == INF, (r, g, scales[r, g])

    def assert_bad_codes(codes):
        """NaN codes (fp8) / 0 (int8)."""
        assert bool(torch.isnan(codes).all()) if out_dtype == FP8 else bool((codes == 0).all()), codes

    for r, g in [(0, 0), (4, 4), (6, 3)]:
        assert_nan_scale(r, g)
        assert_bad_codes(qf[r, grp(r, g)])
    for r, g, j in [(1, 1, gs + 3), (2, 0, 5)]:
        assert_inf_scale(r, g)
        assert_bad_codes(qf[r, j : j + 1])
        others = torch.cat([qf[r, g * gs : j], qf[r, j + 1 : (g + 1) * gs]])
        assert bool((others == 0).all()), f"finite codes of an inf group must be 0: {others}"
    qmax = qrange(out_dtype)[1]
    zero_scale = ieee_div(torch.tensor(EPS, dtype=torch.float32), qmax)
    if LAYOUTS[layout][1]:
        zero_scale = ue8m0_round(zero_scale)
    for r, g in [(3, 2)] + [(5, g) for g in range(groups)]:
        assert float(scales[r, g]) == float(zero_scale), (r, g, scales[r, g], zero_scale)
        assert bool((qf[r, grp(r, g)] == 0).all())
    # Finite groups next to the special ones keep finite scales.
    for r, g in [(0, 1), (1, 0), (2, 4), (4, 0), (6, 2)]:
        assert bool(torch.isfinite(scales[r, g])) and float(scales[r, g]) > 0, (r, g, scales[r, g])


@pytest.mark.parametrize("layout", ["row", "col_ue8m0", "row_ue8m0"])
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=_dt)
@pytest.mark.parametrize(
    "dtype, magnitude",
    [(torch.float16, 1e4), (torch.bfloat16, 1e30), (torch.bfloat16, 1e-12), (torch.float16, 1e-6)],
    ids=["fp16-1e4", "bf16-1e30", "bf16-1e-12", "fp16-1e-6"],
)
def test_extreme_magnitudes(dtype, magnitude, out_dtype, layout, gen):
    """Large values saturate without inf / NaN codes (fp16 up to 65504); tiny ones below eps
    take the eps floor (bf16 1e-12) or are fp16 subnormals."""
    tokens, hidden, gs = 33, 1024, 128
    x = torch.randn((tokens, hidden), device="cuda", generator=gen) * magnitude
    if dtype == torch.float16:
        x = x.clamp(-65504, 65504)
        if magnitude > 1:
            x[:, 0] = 60000.0
            x[1, 5] = -65504.0
            x[2] = 65504.0
    x = x.to(dtype)
    assert bool(torch.isfinite(x).all())
    ref = _ref(x, gs, out_dtype, layout)
    for version in _versions(layout):
        q, s = _run_check(version, "wrapper", x, gs, out_dtype, layout, ref)
        if out_dtype == FP8:
            assert not bool((fp8_code_bytes(q) == 0x7F).any()), "NaN codes from finite input"
            assert float(q.float().abs().max()) <= 448.0
        assert bool(torch.isfinite(read_scales(s, hidden // gs)).all())


@pytest.mark.parametrize("layout", ["row", "col_ue8m0"])
@pytest.mark.parametrize("out_dtype", OUT_DTYPES, ids=_dt)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=_dt)
def test_eps(dtype, out_dtype, layout, gen):
    """eps = 1e-4 on rows of magnitude 1e-5..1e-3: some groups take the eps floor."""
    eps = 1e-4
    tokens, hidden, gs = 64, 512, 64
    x = _rand((tokens, hidden), dtype, gen, lo=-5.5, hi=-3.0)
    amax = x.float().reshape(tokens, -1, gs).abs().amax(-1)
    assert bool((amax < eps).any()) and bool((amax > eps).any()), "the data must straddle eps"
    ref = _ref(x, gs, out_dtype, layout, eps=eps)
    results = [_run_check(v, "wrapper", x, gs, out_dtype, layout, ref, eps=eps) for v in ("v1", "v2")]
    _assert_bitwise(*results)


@pytest.mark.parametrize("version", ["v1", "v2"])
@pytest.mark.parametrize("out_dtype, qrange_", [(FP8, (-240.0, 240.0)), (torch.int8, (-127.0, 127.0))], ids=["fp8-240", "int8-127"])
def test_custom_range(out_dtype, qrange_, version, gen):
    """(fp8_min, fp8_max) other than the defaults are used literally."""
    tokens, hidden, gs = 37, 1536, 128
    x = _rand((tokens, hidden), torch.bfloat16, gen)
    ref = _ref(x, gs, out_dtype, "row", qrange_=qrange_)
    q, _ = _run_check(version, "wrapper", x, gs, out_dtype, "row", ref, qrange_=qrange_)
    assert float(q.float().abs().max()) <= qrange_[1]


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_deterministic(version, gen):
    x = _rand((4096, 7168), torch.bfloat16, gen)
    runs = []
    for _ in range(2):
        q, s = _outputs((), 4096, 7168, 128, FP8, "col_ue8m0")
        _call(version, "op", x, q, s, 128, "col_ue8m0")
        runs.append((q, s))
    _assert_bitwise(*runs)


@pytest.mark.parametrize("version", ["v1", "v2"])
def test_empty(version):
    x = torch.empty((0, 256), dtype=torch.bfloat16, device="cuda")
    q, s = _outputs((), 0, 256, 128, FP8, "row")
    _call(version, "op", x, q, s, 128, "row")
    _call(version, "wrapper", x, q, s, 128, "row")
    torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------
# The wrapper: aliases, dispatch


def test_aliases():
    gemm = importlib.import_module("sgl_kernel.gemm")
    fn = sgl_kernel.sgl_per_token_group_quant_8bit
    for name in ("sgl_per_token_group_quant_8bit", "sgl_per_token_group_quant_fp8", "sgl_per_token_group_quant_int8"):
        assert getattr(sgl_kernel, name) is fn, name
        assert getattr(gemm, name) is fn, name


def _dispatch_probe(group_size: int, enable_v2: Optional[bool]) -> str:
    """Which op the wrapper calls: row-major scales with scale_ue8m0 work on v2 only, and v1's
    error names v1. Returns "v1" or "v2"."""
    tokens, hidden = 4, 4 * 192  # divisible by 16, 32, 48, 64, 128
    x = torch.randn((tokens, hidden), device="cuda").to(torch.bfloat16)
    q, s = _outputs((), tokens, hidden, group_size, FP8, "row_ue8m0")
    try:
        sgl_kernel.sgl_per_token_group_quant_8bit(
            x, q, s, group_size, EPS, -448.0, 448.0, scale_ue8m0=True, enable_v2=enable_v2
        )
    except RuntimeError as e:
        msg = str(e)
        if msg.startswith(f"sgl_kernel.{V1}: "):
            return "v1"
        if msg.startswith(f"sgl_kernel.{V2}: "):
            return "v2"
        raise
    ref_q, ref_s = _ref(x, group_size, FP8, "row_ue8m0")
    _check(q, s, "row_ue8m0", ref_q, ref_s)
    return "v2"


@pytest.mark.parametrize(
    "env, group_size, enable_v2, expected",
    [
        (None, 16, None, "v2"),
        (None, 32, None, "v2"),
        (None, 64, None, "v2"),
        (None, 128, None, "v2"),
        (None, 48, None, "v1"),  # not in {16, 32, 64, 128}: v1 (which then rejects the group size)
        ("1", 128, None, "v2"),
        ("true", 128, None, "v2"),
        ("yes", 128, None, "v2"),
        ("1", 48, None, "v2"),  # the variable wins over the group-size rule (v2 then rejects 48)
        ("0", 128, None, "v1"),
        ("false", 128, None, "v1"),
        ("no", 128, None, "v1"),
        ("0", 128, True, "v2"),  # enable_v2 given: the variable is not read
        ("1", 128, False, "v1"),
        (None, 128, False, "v1"),
        (None, 48, True, "v2"),
    ],
)
def test_dispatch(env, group_size, enable_v2, expected, monkeypatch):
    if env is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, env)
    assert _dispatch_probe(group_size, enable_v2) == expected


@pytest.mark.parametrize("env, enable_v2", [("0", None), (None, False)])
def test_v1_rejects_v2_features(env, enable_v2, monkeypatch):
    """On the v1 path, fuse_silu_and_mul=True or a masked_m raise AssertionError (wrapper)."""
    if env is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, env)
    fn = sgl_kernel.sgl_per_token_group_quant_8bit
    x = torch.randn((4, 512), device="cuda").to(torch.bfloat16)
    q, s = _outputs((), 4, 256, 128, FP8, "row")
    with pytest.raises(AssertionError):
        fn(x, q, s, 128, EPS, -448.0, 448.0, fuse_silu_and_mul=True, enable_v2=enable_v2)
    xm = torch.randn((2, 4, 256), device="cuda").to(torch.bfloat16)
    qm, sm = _outputs((2,), 4, 256, 128, FP8, "row")
    mm = torch.tensor([4, 2], dtype=torch.int32, device="cuda")
    with pytest.raises(AssertionError):
        fn(xm, qm, sm, 128, EPS, -448.0, 448.0, masked_m=mm, enable_v2=enable_v2)


# ---------------------------------------------------------------------------------------
# opcheck, CUDA graphs

# name -> (version, layout, out dtype, fuse, masked)
OPCHECK_CASES = {
    "v1-row-fp8": ("v1", "row", FP8, False, False),
    "v1-col_ue8m0-int8": ("v1", "col_ue8m0", torch.int8, False, False),
    "v2-row_ue8m0-int8": ("v2", "row_ue8m0", torch.int8, False, False),
    "v2-col-fp8-silu": ("v2", "col", FP8, True, False),
    "v2-col_ue8m0-fp8-masked-silu": ("v2", "col_ue8m0", FP8, True, True),
}


@pytest.mark.parametrize("case", list(OPCHECK_CASES))
def test_opcheck(case, gen):
    version, layout, out_dtype, fuse, masked = OPCHECK_CASES[case]
    # 8 tokens: the column-major pitch equals M, so the scale views are dense and opcheck's
    # clones keep their strides.
    tokens, hidden, gs = 8, 256, 64
    lead = (3,) if masked else ()
    x = _rand((*lead, tokens, 2 * hidden if fuse else hidden), torch.bfloat16, gen, hi=1.0)
    q, s = _outputs(lead, tokens, hidden, gs, out_dtype, layout)
    qmin, qmax = qrange(out_dtype)
    ue8m0 = LAYOUTS[layout][1]
    if version == "v1":
        args = (x, q, s, gs, EPS, qmin, qmax, ue8m0)
    else:
        mm = torch.tensor([8, 0, 5], dtype=torch.int32, device="cuda") if masked else None
        args = (x, q, s, gs, EPS, qmin, qmax, ue8m0, fuse, mm)
    opcheck_any_dtype(_op(OP_NAME[version]), args)


# name -> (version, layout, fuse, masked)
GRAPH_CASES = {
    "v1-col_ue8m0": ("v1", "col_ue8m0", False, False),
    "v2-row_ue8m0": ("v2", "row_ue8m0", False, False),
    "v2-col-silu": ("v2", "col", True, False),
    "v2-col_ue8m0-masked": ("v2", "col_ue8m0", False, True),
    "v2-row-masked-silu": ("v2", "row", True, True),
}


@pytest.mark.parametrize("how", ["wrapper", "op"])
@pytest.mark.parametrize("case", list(GRAPH_CASES))
def test_cuda_graph(case, how, gen):
    """Capture once, then replay on new data (and new masked_m counts) copied into the static
    inputs, with the outputs re-poisoned before each replay."""
    version, layout, fuse, masked = GRAPH_CASES[case]
    tokens, hidden, gs, experts = 37, 1536, 128, 4
    lead = (experts,) if masked else ()
    shape = (*lead, tokens, 2 * hidden if fuse else hidden)
    x = _rand(shape, torch.bfloat16, gen, hi=1.0)
    q, s = _outputs(lead, tokens, hidden, gs, FP8, layout)
    mm = _masked_m(experts, tokens, gen) if masked else None

    def step():
        _call(version, how, x, q, s, gs, layout, fuse=fuse, masked_m=mm)

    step()  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(2):
        new_x = _rand(shape, torch.bfloat16, gen, hi=1.0)
        x.copy_(new_x)
        if masked:
            mm.copy_(_masked_m(experts, tokens, gen))
        q.view(torch.uint8).fill_(POISON_FP8)
        s.fill_(-1 if s.dtype == torch.int32 else NAN)
        graph.replay()
        torch.cuda.synchronize()
        ref_q, ref_s = _ref(new_x, gs, FP8, layout, fuse=fuse)
        _check(q, s, layout, ref_q, ref_s, rows=_rows(mm, tokens) if masked else None)


# ---------------------------------------------------------------------------------------
# Bad inputs: through torch.ops and through the wrapper (the C++ checks protect both)


def _good(tokens=4, hidden=256, gs=128, dtype=torch.bfloat16, layout="row", lead=()):
    x = torch.randn((*lead, tokens, hidden), device="cuda").to(dtype)
    q = torch.empty((*lead, tokens, hidden), dtype=FP8, device="cuda")
    s = alloc_scales(tokens, hidden // gs, LAYOUTS[layout][0], "cuda", lead=lead)
    return x, q, s


def _bad_case(kind: str):
    """``(x, q, s, group_size, scale_ue8m0, masked_m, fuse, argument named, message fragments)``."""
    gs, ue8m0, mm, fuse, frags = 128, False, None, False, ()
    x, q, s = _good()
    if kind == "cpu_input":
        x, arg = x.cpu(), "input"
    elif kind == "input_dtype":
        x, arg, frags = x.double(), "input", ("torch.float64",)
    elif kind == "input_fp32_v2":
        x, arg, frags = x.float(), "input", ("torch.float32",)
    elif kind == "input_non_contiguous":
        x, arg = torch.randn((4, 512), device="cuda").to(torch.bfloat16)[:, :256], "input"
    elif kind == "group_size_not_dividing":
        x, q, s = _good(hidden=192, gs=192)  # s: [4, 1]
        arg = "group_size"
    elif kind == "group_size_48":
        x, q, s = _good(hidden=192, gs=48)
        gs, arg, frags = 48, "group_size", ("48",)
    elif kind == "output_q_bf16":
        q, arg, frags = torch.empty_like(x), "output_q", ("torch.bfloat16",)
    elif kind == "output_q_e5m2":
        q, arg = torch.empty(x.shape, dtype=torch.float8_e5m2, device="cuda"), "output_q"
    elif kind == "output_q_rows":
        q, arg = torch.empty((5, 256), dtype=FP8, device="cuda"), "output_q"
    elif kind == "output_q_hidden":
        q, arg = torch.empty((4, 384), dtype=FP8, device="cuda"), "output_q"
    elif kind == "output_q_non_contiguous":
        q, arg = torch.empty((4, 512), dtype=FP8, device="cuda")[:, :256], "output_q"
    elif kind == "output_s_fp16":
        s, arg = torch.empty((4, 2), dtype=torch.float16, device="cuda"), "output_s"
    elif kind == "output_s_groups":
        s, arg = torch.empty((4, 3), dtype=torch.float32, device="cuda"), "output_s"
    elif kind == "output_s_rows":
        s, arg = torch.empty((5, 2), dtype=torch.float32, device="cuda"), "output_s"
    elif kind == "output_s_col_pitch":
        # column-major with stride(1) = 6 < M = 8
        x, q, _ = _good(tokens=8)
        s, arg = torch.empty_strided((8, 2), (1, 6), dtype=torch.float32, device="cuda"), "output_s"
    elif kind == "output_s_int32_without_ue8m0":
        x, q, s = _good(layout="col_ue8m0")
        arg = "output_s"
    elif kind == "output_s_int32_row_major":
        # G = 8 groups -> 2 int32 words per token, row-major
        x, q, _ = _good(hidden=1024)
        s, ue8m0, arg = torch.empty((4, 2), dtype=torch.int32, device="cuda"), True, "output_s"
    elif kind == "output_s_packed_words":
        x, q, _ = _good(tokens=8)
        s = torch.empty((2, 8), dtype=torch.int32, device="cuda").t()  # 2 words for G = 2 (needs 1)
        ue8m0, arg = True, "output_s"
    elif kind == "row_ue8m0_v1":
        ue8m0, arg = True, "output_s"
    elif kind == "masked_m_int64":
        x, q, s = _good(lead=(2,))
        mm, arg = torch.tensor([4, 1], dtype=torch.int64, device="cuda"), "masked_m"
    elif kind == "masked_m_experts":
        x, q, s = _good(lead=(2,))
        mm, arg = torch.tensor([4, 1, 2], dtype=torch.int32, device="cuda"), "masked_m"
    elif kind == "masked_m_cpu":
        x, q, s = _good(lead=(2,))
        mm, arg = torch.tensor([4, 1], dtype=torch.int32), "masked_m"
    elif kind == "silu_output_q_hidden":
        x = torch.randn((4, 512), device="cuda").to(torch.bfloat16)  # output_q must be [4, 256]
        q = torch.empty((4, 512), dtype=FP8, device="cuda")
        fuse, arg = True, "output_q"
    else:
        raise ValueError(kind)
    return x, q, s, gs, ue8m0, mm, fuse, arg, frags


BOTH_BAD = [
    "cpu_input",
    "input_dtype",
    "input_non_contiguous",
    "group_size_not_dividing",
    "group_size_48",
    "output_q_bf16",
    "output_q_e5m2",
    "output_q_rows",
    "output_q_hidden",
    "output_q_non_contiguous",
    "output_s_fp16",
    "output_s_groups",
    "output_s_rows",
    "output_s_col_pitch",
    "output_s_int32_without_ue8m0",
    "output_s_int32_row_major",
    "output_s_packed_words",
]
BAD_CASES = (
    [("v1", k) for k in BOTH_BAD + ["row_ue8m0_v1"]]
    + [("v2", k) for k in BOTH_BAD]
    + [("v2", k) for k in ["input_fp32_v2", "masked_m_int64", "masked_m_experts", "masked_m_cpu", "silu_output_q_hidden"]]
)


# (version, input shape, input dtype, group_size, fuse_silu_and_mul, experts of masked_m or 0)
HUGE_CASES = {
    "v1": ("v1", (2**28, 128), torch.bfloat16, 128, False, 0),
    "v1_fp32": ("v1", (2**27, 128), torch.float32, 128, False, 0),
    "v1_g16": ("v1", (2147483136, 16), torch.bfloat16, 16, False, 0),
    "v2_silu": ("v2", (2**28, 256), torch.bfloat16, 128, True, 0),
    "v2_masked": ("v2", (16, 2**24, 128), torch.bfloat16, 128, False, 16),
}


def _call_huge(version: str, shape, dtype, gs: int, fuse: bool, experts: int) -> None:
    """The op on zero-stride views (one row of memory each) of the case's shapes."""
    k = shape[-1] // 2 if fuse else shape[-1]
    x = one_row_view(shape, dtype)
    q = one_row_view((*shape[:-1], k), FP8)
    s = one_row_view((*shape[:-1], k // gs), torch.float32)
    qmin, qmax = qrange(FP8)
    if version == "v1":
        _op(V1)(x, q, s, gs, EPS, qmin, qmax, False)
    else:
        mm = torch.ones(experts, dtype=torch.int32, device="cuda") if experts else None
        _op(V2)(x, q, s, gs, EPS, qmin, qmax, False, fuse, mm)


@pytest.mark.parametrize("case", list(HUGE_CASES))
def test_size_limit_messages(case):
    """More than 2^32 - 1025 16-byte vectors of output width (rows * hidden / vector) are
    refused before any launch, with the limit named."""
    version, shape, dtype, gs, fuse, experts = HUGE_CASES[case]
    rows = 1
    for n in shape[:-1]:
        rows *= n
    k = shape[-1] // 2 if fuse else shape[-1]
    vectors = rows * k * dtype.itemsize // 16
    assert vectors > 2**32 - 1025
    with raises_op_error(OP_NAME[version], "input", f"at most {2**32 - 1025} 16-byte vectors", f"got {vectors}"):
        _call_huge(version, shape, dtype, gs, fuse, experts)


def test_size_limit_boundary():
    """2^32 - 1026 vectors (2 per row: an even count, the most below the limit) pass it: the
    next check, input's contiguity, fails."""
    with raises_op_error(V1, "input", "contiguous"):
        _call_huge("v1", (2147483135, 16), torch.bfloat16, 16, False, 0)


@pytest.mark.parametrize("version, kind", BAD_CASES, ids=[f"{v}-{k}" for v, k in BAD_CASES])
def test_bad_inputs(version, kind):
    x, q, s, gs, ue8m0, mm, fuse, arg, frags = _bad_case(kind)
    op = OP_NAME[version]
    qmin, qmax = qrange(FP8)
    with raises_op_error(op, arg, *frags):
        if version == "v1":
            _op(V1)(x, q, s, gs, EPS, qmin, qmax, ue8m0)
        else:
            _op(V2)(x, q, s, gs, EPS, qmin, qmax, ue8m0, fuse, mm)
    with raises_op_error(op, arg, *frags):
        sgl_kernel.sgl_per_token_group_quant_8bit(
            x, q, s, gs, EPS, qmin, qmax, scale_ue8m0=ue8m0, fuse_silu_and_mul=fuse, masked_m=mm,
            enable_v2=version == "v2",
        )
