# SPDX-License-Identifier: Apache-2.0
"""rmsnorm, fused_add_rmsnorm, gemma_rmsnorm, gemma_fused_add_rmsnorm (API.md 2.1.1) against
the fp32 references of ref_norm.py with the shared tolerance table.

The GPU tests are marked one by one (``@GPU``): a few tests here need no GPU (the references,
the layouts the strided tests rely on, CPU tensors rejected, fake tensors) and run everywhere.
"""

from __future__ import annotations

import contextlib
from typing import Callable, Dict, Optional, Tuple

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

import sgl_kernel
from tests.elementwise.ref_norm import (
    OPS as OP_KINDS,
    fused_add_rmsnorm_ref,
    fused_add_rmsnorm_torch,
    fused_add_rmsnorm_torch_,
    rmsnorm_ref,
    rmsnorm_torch,
)
from tests.helpers import assert_rounded_sum_bits, one_row_view, random_bit_pairs, raises_op_error
from tests.tolerances import elementwise_tol

GPU = pytest.mark.gpu

OPS = tuple(OP_KINDS)
PLAIN_OPS = tuple(op for op in OPS if not OP_KINDS[op][0])
FUSED_OPS = tuple(op for op in OPS if OP_KINDS[op][0])
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
HALF_DTYPES = (torch.float16, torch.bfloat16)
NAN = float("nan")
EPS = 1e-6

BATCHES = (1, 19, 99, 989)
HIDDENS = (111, 500, 1024, 3072, 3584, 4096, 8192, 16384)
# fp32: the odd sizes, a vector-path size, and the largest one.
FP32_BATCHES = (1, 99, 989)
FP32_HIDDENS = (111, 500, 4096, 16384)


def _is_fused(op: str) -> bool:
    return OP_KINDS[op][0]


def _is_gemma(op: str) -> bool:
    return OP_KINDS[op][1]


def _op(name: str):
    return getattr(torch.ops.sgl_kernel, name).default


def _randn(shape, dtype, gen, scale: float = 1.0) -> torch.Tensor:
    x = torch.randn(shape, dtype=torch.float32, device="cuda", generator=gen)
    return (x * scale).to(dtype)


def _poisoned(shape, dtype) -> torch.Tensor:
    return torch.full(shape, NAN, dtype=dtype, device="cuda")


def _assert_norm(actual: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> None:
    """``actual`` (dtype) vs the fp32 reference; bf16 against the bf16 rounding of it."""
    expected = ref.to(torch.bfloat16).float() if dtype == torch.bfloat16 else ref
    torch.testing.assert_close(actual.float(), expected, **elementwise_tol(dtype))


def _assert_bitwise(a: torch.Tensor, b: torch.Tensor) -> None:
    assert a.shape == b.shape and a.dtype == b.dtype
    ints = {2: torch.int16, 4: torch.int32}[a.element_size()]
    assert torch.equal(a.contiguous().view(ints), b.contiguous().view(ints)), "not bitwise identical"


def run_and_check(
    op: str,
    x: torch.Tensor,
    w: torch.Tensor,
    other: Optional[torch.Tensor],
    eps: float = EPS,
    enable_pdl: Optional[bool] = None,
) -> None:
    """One call through the wrapper, checked against the reference. ``other`` is ``out`` for
    the plain ops (poisoned by the caller; ``None``: the wrapper allocates) and ``residual``
    for the fused ones (then ``x`` and ``residual`` are updated in place)."""
    fn = getattr(sgl_kernel, op)
    gemma = _is_gemma(op)
    if _is_fused(op):
        ref, ref_residual = fused_add_rmsnorm_ref(x.clone(), other.clone(), w, eps, gemma)
        assert fn(x, other, w, eps, enable_pdl=enable_pdl) is None
        # The stored residual is the sum rounded once to the dtype: exactly.
        torch.testing.assert_close(other, ref_residual, rtol=0, atol=0)
        _assert_norm(x, ref, x.dtype)
    else:
        ref = rmsnorm_ref(x, w, eps, gemma)
        y = fn(x, w, eps, out=other, enable_pdl=enable_pdl)
        if other is not None:
            assert y is other
        else:
            assert isinstance(y, torch.Tensor) and y is not x
            assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
        _assert_norm(y, ref, x.dtype)


def make_args(op: str, shape, dtype, gen, scale: float = 1.0) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(x, weight, other): other is a poisoned out or a random residual."""
    x = _randn(shape, dtype, gen, scale)
    w = _randn(shape[-1], dtype, gen)
    other = _randn(shape, dtype, gen, scale) if _is_fused(op) else _poisoned(shape, dtype)
    return x, w, other


def _ids(seq):
    return [str(s) for s in seq]


# ---------------------------------------------------------------------------------------
# Correctness on the grid


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
@pytest.mark.parametrize("batch", BATCHES)
@pytest.mark.parametrize("hidden", HIDDENS)
def test_correctness(op, dtype, batch, hidden, gen):
    x, w, other = make_args(op, (batch, hidden), dtype, gen)
    run_and_check(op, x, w, other)


# Many rows select the kernel's large-batch shapes (16 or 12 vectors per lane, thin rows).
@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", (1024, 3072, 4096, 5120))
def test_correctness_many_rows(op, dtype, hidden, gen):
    x, w, other = make_args(op, (16411, hidden), dtype, gen)
    run_and_check(op, x, w, other)


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("batch", FP32_BATCHES)
@pytest.mark.parametrize("hidden", FP32_HIDDENS)
def test_correctness_fp32(op, batch, hidden, gen):
    x, w, other = make_args(op, (batch, hidden), torch.float32, gen)
    run_and_check(op, x, w, other)


# The decode kernel (norm.cu: <= 256 rows, hidden a multiple of 512 up to 8192, fused up to
# 7168; 16-bit plain rows of 8192 take the vector kernel, VEC1024_SHAPES) at its shapes and
# limits, and the shapes just past them that take the other kernels (257 rows, hidden 640,
# 8192 fused, 12288 plain (the fused op's clusters from 12288: below), 16384 beyond 16 rows).
# On sm90+, hidden >= 16384 runs in clusters of 8 blocks per row up to 16 rows (16 blocks at
# >= 32768 up to 4 rows; decode_cluster_blocks): the row counts on either side of each limit;
# (1, 16896) is no multiple of 8 * 512 (no cluster). 16-bit rows of 4096 and 7168 (8 and 14 warps)
# take instances with the warp count compiled in (the fused op's 7168 up to 128 rows).
DECODE_SHAPES = [(1, 512), (16, 2048), (128, 4096), (256, 7168), (3, 8192), (257, 4096), (2, 640), (2, 16384),
                 (1, 4096), (64, 7168), (128, 7168), (129, 7168),
                 (1, 7168), (16, 8192), (17, 8192), (32, 7168), (33, 8192), (5, 12288), (20, 16384),
                 (16, 16384), (17, 16384), (4, 32768), (5, 32768), (1, 16896)]
# Decode rows of a multiple of 256 or 128 elements from 1024 (decode_chunks: 2 or 1 chunks a
# warp; bf16 Gemma sizes 1152, 2304, 3840, 5376; 7936: 31 warps; fused beyond 7168 and 4224 (33
# chunks of 128: more than 32 warps) and 896 (below 1024) take the vector kernel).
DECODE_SHORT_CHUNK_SHAPES = [(16, 1152), (1, 1152), (128, 2304), (256, 3840), (3, 5376), (7, 7936), (2, 4224),
                             (5, 896), (256, 2304)]
# The fused op from 12288 up to 16 rows: clusters of 8 blocks a row up to 8 rows where 4096
# divides the row, else 4 (14336: 4 only), and one block beyond 16 rows (the plain op: always).
CLUSTER_12K_SHAPES = [(8, 12288), (9, 12288), (16, 12288), (17, 12288), (3, 14336), (1, 12800)]
# More than 256 rows whose row length leaves 8 and 6 vectors a lane short: 9 vectors a lane
# (norm.cu kOrder; bf16 H=1152 / 2304 / 2176 / 6272: 16 / 32 / 32 with the last vector
# bounds-checked / 96 lanes a row), and the fp32 rows of the same lengths.
NINE_VECTOR_SHAPES = [(989, 1152), (257, 2304), (16411, 2304), (300, 2176), (257, 6272), (16384, 1152)]
# Decode rows of exactly 1024 16-byte vectors in 16-bit types (H=8192) take the vector kernel's
# 256-thread instances, the PDL trigger by rows (norm.cu kVec1024MidRows and kVec1024EarlyRows:
# the fused op after the loads to 160 rows, both ops early to 192, late to 256), but where
# norm.cu's kDec8Rows sends 16-bit rows of 6144-8192 to the decode kernel with 8 chunks a warp
# (plain 8192: 1-256 rows, 7168: 96-256, 6144: 192-256; fused 8192: 208-224,
# 7168: 129-256, 6144: 224-256): the row counts on either side of each switch. fp32 rows of
# 1024 vectors (H=4096) take the decode kernel at the same row counts.
VEC1024_SHAPES = [(112, 8192), (113, 8192), (128, 8192), (129, 8192), (160, 8192), (161, 8192), (192, 8192),
                  (193, 8192), (207, 8192), (208, 8192), (224, 8192), (225, 8192), (256, 8192), (160, 4096),
                  (161, 4096), (193, 4096), (95, 7168), (96, 7168), (207, 7168), (208, 7168), (256, 7168),
                  (191, 6144), (192, 6144), (223, 6144), (224, 6144)]


# From 16384 rows (norm.cu): the fused ops take the two-pass kernel (rmsnorm_twopass_kernel) on
# rows of 512 16-byte vectors, of 640-1024 in steps of 128 (one chunk held in registers: bf16
# H=5120 / 7168 / 8192, fp32 H=3072 / 4096) or a multiple of 1024 (block shapes by row length),
# the plain ops the vector kernel with L2 evict_last row loads on rows of 512 vectors or more,
# but for 768 (bf16 H=6144, fp32 H=3072: the two-pass kernel's one chunk in registers). 16383
# rows, bf16 H=2048 / 3072 (256 / 384 vectors) and fp32 H=5120 / 7168 (1280 / 1792) take the
# other kernels: the shapes on either side.
TWOPASS_SHAPES = [(16384, 2048), (16384, 3072), (16384, 4096), (16383, 8192), (16384, 8192), (16384, 5120),
                  (16384, 6144), (16384, 7168), (16400, 16384)]


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", DECODE_SHAPES + DECODE_SHORT_CHUNK_SHAPES + CLUSTER_12K_SHAPES + NINE_VECTOR_SHAPES
                         + VEC1024_SHAPES + TWOPASS_SHAPES, ids=_ids)
def test_kernel_shapes(op, dtype, shape, gen):
    """The decode kernel's, the vector kernel's and the two-pass kernel's shapes and limits (above)."""
    x, w, other = make_args(op, shape, dtype, gen)
    run_and_check(op, x, w, other)


@GPU
@pytest.mark.parametrize("op", PLAIN_OPS)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(19, 4096), (16400, 4096), (16384, 5120), (16384, 6144), (16384, 8192)], ids=_ids)
def test_out_is_input(op, dtype, shape, gen):
    """out = input: every kernel reads each element before it writes it, and the exact-row
    kernel's re-read (H=5120 from 16384 rows) reads only what its own thread has not yet
    written, so the plain ops may normalise in place."""
    x, w, _ = make_args(op, shape, dtype, gen)
    run_and_check(op, x, w, x)


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
@pytest.mark.parametrize("rows, hidden", [(16400, 4096), (16400, 5120), (16400, 6144), (16400, 8192)],
                         ids=["16400x4096", "16400x5120", "16400x6144", "16400x8192"])
def test_many_rows_strided(op, dtype, rows, hidden, gen):
    """The many-row kernels (the fused ops' two-pass kernel, the plain ops' vector kernel with
    L2 evict_last loads, the exact-row kernel at H=5120 / 6144 (plain) and 8192 (fused), here
    through row_offset instead of its packed-row form) on rows addressed with two levels of
    strides ([2, rows / 2, H] views of a [2, rows / 2 + 1, H + 8] base, as the 3d_split
    layout), input and the other tensor both strided; nothing outside the views may change."""
    half = rows // 2
    views, guards = [], []
    for fill in ("randn", "randn" if _is_fused(op) else "nan"):
        base = _poisoned((2, half + 1, hidden + 8), dtype)
        view = base[:, 1:, :hidden]
        if fill == "randn":
            view.copy_(_randn(view.shape, dtype, gen))
        mask = torch.zeros(base.shape, dtype=torch.bool, device="cuda")
        mask[:, 1:, :hidden] = True
        views.append(view)
        guards.append((base, mask))
    x, other = views
    assert row_split(x, other) == 1
    w = _randn(hidden, dtype, gen)
    run_and_check(op, x, w, other)
    for (base, mask), what in zip(guards, ("input", "other")):
        _assert_guards(base, mask, what)


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(3, 7, 4096), (2, 5, 111), (4, 1, 3584), (1, 1, 1024), (2, 2, 16384), (3, 5, 16384)],
                         ids=_ids)
def test_3d(op, dtype, shape, gen):
    x, w, other = make_args(op, shape, dtype, gen)
    run_and_check(op, x, w, other)


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_hidden_1(op, dtype, gen):
    x, w, other = make_args(op, (37, 1), dtype, gen)
    run_and_check(op, x, w, other)


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("eps", [1e-6, 1e-5])
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [4096, 111])
def test_eps(op, eps, dtype, hidden, gen):
    """Inputs of magnitude ~1e-3, so that mean(x**2) ~ 1e-6 and eps changes the result."""
    x, w, other = make_args(op, (19, hidden), dtype, gen, scale=1e-3)
    # Sanity: the two eps values give clearly different references on these inputs.
    ref = {e: rmsnorm_ref(x, w, e, _is_gemma(op)) for e in (1e-6, 1e-5)}
    assert not torch.allclose(ref[1e-6], ref[1e-5], rtol=0.05, atol=0)
    run_and_check(op, x, w, other, eps=eps)


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("hidden", [4096, 111])
def test_large_values_fp16(op, hidden, gen):
    """|x| up to ~5000: x**2 overflows fp16, the fp32 accumulation does not."""
    x, w, other = make_args(op, (19, hidden), torch.float16, gen, scale=1000.0)
    assert float(x.float().pow(2).sum(-1).max()) > 65504.0
    run_and_check(op, x, w, other)
    out = x if _is_fused(op) else other
    assert torch.isfinite(out).all()


@GPU
@pytest.mark.parametrize("op", FUSED_OPS)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
@pytest.mark.parametrize(
    "shape",
    # decode kernel (8 chunks a warp: 208 rows of 7168 and 8192, norm.cu kDec8Rows); vector kernel
    # (1024-vector decode rows, each PDL trigger of them; many rows); two-pass and exact-row
    # kernels (>= 16384 rows); the scalar path
    [(16, 4096), (16, 7168), (208, 7168), (208, 8192), (16, 8192), (170, 8192), (200, 8192), (300, 4096),
     (16384, 2048), (16384, 8192), (7, 111)],
    ids=_ids,
)
def test_fused_residual_any_bits(op, dtype, shape, gen):
    """The stored residual from random bit patterns of input and residual (subnormals, sums
    that overflow to infinity, inf - inf, NaNs): the kernels add pairs of 16-bit values in one
    packed instruction (sgl_kernel/words.cuh), which must give the bits of the fp32 sum rounded
    once. Only the residual is checked: the normalised output of such rows is meaningless."""
    x, r = random_bit_pairs(shape, dtype, gen)
    w = _randn(shape[-1], dtype, gen)
    x0, r0 = x.clone(), r.clone()
    assert getattr(sgl_kernel, op)(x, r, w, EPS) is None
    assert_rounded_sum_bits(r, x0, r0)


@GPU
@pytest.mark.parametrize("op", PLAIN_OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_allocates_out(op, dtype, gen):
    x, w, _ = make_args(op, (5, 7, 256), dtype, gen)
    run_and_check(op, x, w, None)
    # A strided input: the new tensor is still a fresh one of the input's shape.
    big = _randn((9, 320), dtype, gen)
    x = big[:, :256]
    y = getattr(sgl_kernel, op)(x, w)
    assert y.shape == x.shape and y.data_ptr() != big.data_ptr()
    _assert_norm(y, rmsnorm_ref(x, w, EPS, _is_gemma(op)), dtype)


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(0, 64), (2, 0, 64), (0, 111)], ids=_ids)
def test_empty(op, dtype, shape):
    x = torch.empty(shape, dtype=dtype, device="cuda")
    w = torch.ones(shape[-1], dtype=dtype, device="cuda")
    other = torch.empty(shape, dtype=dtype, device="cuda")
    fn = getattr(sgl_kernel, op)
    if _is_fused(op):
        assert fn(x, other, w) is None
        assert _op(op)(x, other, w, EPS, False) is None
    else:
        y = fn(x, w)
        assert y.shape == shape and y.dtype == dtype
        assert fn(x, w, out=other) is other
        assert _op(op)(other, x, w, EPS, False) is None
    torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------
# Strided views. Each layout makes a view of logical shape `shape(H)` into a larger `base`;
# the base is NaN outside the view, so a kernel that reads outside the view puts NaN into
# the results, and one that writes outside it is caught by the guard check.

# name -> (logical shape for hidden H, base shape, view of the base)
Layout = Tuple[Callable[[int], tuple], Callable[[int], tuple], Callable[[torch.Tensor, int], torch.Tensor]]
LAYOUTS: Dict[str, Layout] = {
    # one row stride, H + 64: the vector path when H is a multiple of 8 (halves) / 4 (fp32)
    "pad64": (lambda h: (37, h), lambda h: (37, h + 64), lambda b, h: b[:, :h]),
    # row stride H + 3: never a multiple of the vector width, the scalar path
    "pad3": (lambda h: (37, h), lambda h: (37, h + 3), lambda b, h: b[:, :h]),
    # row stride H + 8, but the data pointer is one element past a 16-byte boundary
    "offset1": (lambda h: (37, h), lambda h: (37, h + 8), lambda b, h: b[:, 1 : h + 1]),
    # [B, S, H] from [B, 2S, H] with step 2: the leading dims merge into one row stride 2H
    "3d_step2": (lambda h: (3, 13, h), lambda h: (3, 26, h), lambda b, h: b[:, ::2, :]),
    # [B, S, H] from [B, S+1, H+8] without its first row: two levels of row strides (the
    # leading dims do not merge), 16-byte aligned when H is a multiple of 8
    "3d_split": (lambda h: (3, 13, h), lambda h: (3, 14, h + 8), lambda b, h: b[:, 1:, :h]),
    # two levels with a row stride of H + 3: the scalar path
    "3d_split_pad3": (lambda h: (3, 13, h), lambda h: (3, 14, h + 3), lambda b, h: b[:, :13, :h]),
    # 4-D whose dims 1 and 2 merge but dims 0 and 1 do not: two levels
    "4d_split": (lambda h: (2, 3, 5, h), lambda h: (2, 4, 5, h), lambda b, h: b[:, :3]),
}

# Which split of the leading dims row_layout() (elementwise_ops.cc) finds for each layout:
# 0 = one row stride, 1 = two levels.
LAYOUT_SPLIT = {"pad64": 0, "pad3": 0, "offset1": 0, "3d_step2": 0, "3d_split": 1, "3d_split_pad3": 1, "4d_split": 1}


def row_split(*tensors: torch.Tensor) -> Optional[int]:
    """Mirror of row_layout() in csrc/elementwise/elementwise_ops.cc: the first split of the
    leading dims into [0, split) and [split, lead), each collapsible into one stride, that
    works for every tensor; None when there is none (the op raises)."""
    lead = tensors[0].dim() - 1

    def collapses(t: torch.Tensor, begin: int, end: int) -> bool:
        prev = None
        for i in range(begin, end):
            if t.size(i) == 1:
                continue
            if prev is not None and t.stride(prev) != t.stride(i) * t.size(i):
                return False
            prev = i
        return True

    for split in range(0, max(lead - 1, 0) + 1):
        if all(collapses(t, 0, split) and collapses(t, split, lead) for t in tensors):
            return split
    return None


def uncollapsible_4d(base: torch.Tensor) -> torch.Tensor:
    """[3, 3, 3, H] from a [3, 5, 6, H] base with step 2 in dims 1 and 2: strides
    (30H, 12H, 2H, 1), so neither dims (0, 1) (12H * 3 != 30H) nor dims (1, 2) (2H * 3 != 12H)
    merge, and no split into two levels exists."""
    return base[:, ::2, ::2, :]


def make_strided(layout: str, hidden: int, dtype, gen, fill: str):
    """(view, base, mask): ``mask`` is True where the base belongs to the view. ``fill`` is
    "randn" (random view, NaN elsewhere) or "nan"."""
    _, base_shape, view_of = LAYOUTS[layout]
    base = _poisoned(base_shape(hidden), dtype)
    view = view_of(base, hidden)
    if fill == "randn":
        view.copy_(_randn(view.shape, dtype, gen))
    mask = torch.zeros(base.shape, dtype=torch.bool, device="cuda")
    view_of(mask, hidden).fill_(True)
    return view, base, mask


def _assert_guards(base: torch.Tensor, mask: torch.Tensor, what: str) -> None:
    assert base[~mask].isnan().all(), f"{what}: the op wrote outside the view"


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("which", ["input", "other", "both"])
@pytest.mark.parametrize("hidden", [4096, 111])
def test_strided(op, dtype, layout, which, hidden, gen):
    """``which``: the input, the other tensor (out / residual), or both are strided views; the
    rest is contiguous. out given with a row stride different from the input's is the case
    which="other" (and "input")."""
    shape = LAYOUTS[layout][0](hidden)
    fused = _is_fused(op)
    guards = []
    if which in ("input", "both"):
        x, base, mask = make_strided(layout, hidden, dtype, gen, "randn")
        guards.append((base, mask, "input"))
    else:
        x = _randn(shape, dtype, gen)
    if which in ("other", "both"):
        other, base, mask = make_strided(layout, hidden, dtype, gen, "randn" if fused else "nan")
        guards.append((base, mask, "residual" if fused else "out"))
    else:
        other = _randn(shape, dtype, gen) if fused else _poisoned(shape, dtype)
    assert x.shape == other.shape == shape
    # A contiguous partner collapses at any split: the strided one decides.
    assert row_split(x, other) == LAYOUT_SPLIT[layout]
    w = _randn(hidden, dtype, gen)
    run_and_check(op, x, w, other)
    for base, mask, what in guards:
        _assert_guards(base, mask, what)


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", HALF_DTYPES, ids=str)
def test_row_stride_gt_hidden(op, dtype, gen):
    """x = big[:, :H] with big [T, H + 64] (row stride a multiple of 8 halves: the vector
    path) and [T, H + 3] (the scalar path); out / residual contiguous."""
    for pad in (64, 3):
        t, h = 99, 4096
        big = _poisoned((t, h + pad), dtype)
        x = big[:, :h]
        x.copy_(_randn((t, h), dtype, gen))
        assert x.stride() == (h + pad, 1)
        _, w, other = make_args(op, (t, h), dtype, gen)
        run_and_check(op, x, w, other)
        assert big[:, h:].isnan().all()


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(1, 16384), (2, 40000), (300, 128), (257, 4100), (5, 4097), (2053, 128),
                                   (1500, 100), (1025, 7)], ids=_ids)
def test_scalar_path_shapes(op, dtype, shape, gen):
    """The scalar (any alignment) kernel at its block sizes: rows one element past a 16-byte
    boundary (row stride H + 8), so the vector kernels do not apply. One long row (1024
    threads, several batches of loads), rows past the vector kernels' limit (H = 40000),
    many short rows (more than 256: 32 threads; more than 1024 of at most 128: a warp a row,
    8 rows a block, 2053 rows leaving 3 spare warps in the last block), and odd lengths that
    end inside a batch."""
    t, h = shape
    base = _poisoned((t, h + 8), dtype)
    x = base[:, 1 : h + 1]
    x.copy_(_randn((t, h), dtype, gen))
    _, w, other = make_args(op, (t, h), dtype, gen)
    run_and_check(op, x, w, other)
    assert base[:, 0].isnan().all() and base[:, h + 1 :].isnan().all()


# ---------------------------------------------------------------------------------------
# Launch options, determinism


def _call_on_copies(op: str, x, w, other, **kw) -> torch.Tensor:
    """Run the op on fresh copies; returns what it wrote (out, or input and residual stacked)."""
    fn = getattr(sgl_kernel, op)
    if _is_fused(op):
        xc, rc = x.clone(), other.clone()
        fn(xc, rc, w, **kw)
        return torch.stack([xc, rc])
    return fn(x, w, out=torch.full_like(x, NAN), **kw)


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("hidden", [4096, 111, 16384])
def test_pdl_identical(op, dtype, hidden, gen):
    x, w, other = make_args(op, (99, hidden), dtype, gen)
    results = [_call_on_copies(op, x, w, other, enable_pdl=pdl) for pdl in (True, False, None)]
    torch.cuda.synchronize()
    for r in results[1:]:
        _assert_bitwise(results[0], r)


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", [(989, 3584), (99, 111), (19, 16384)], ids=_ids)
def test_deterministic(op, shape, gen):
    x, w, other = make_args(op, shape, torch.bfloat16, gen)
    _assert_bitwise(_call_on_copies(op, x, w, other), _call_on_copies(op, x, w, other))


# ---------------------------------------------------------------------------------------
# opcheck, CUDA graphs


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype, shape", [(torch.bfloat16, (8, 256)), (torch.float32, (2, 3, 111))], ids=str)
def test_opcheck(op, dtype, shape, gen):
    x = _randn(shape, dtype, gen)
    w = _randn(shape[-1], dtype, gen)
    if _is_fused(op):
        args = (x, _randn(shape, dtype, gen), w, EPS, True)
    else:
        args = (torch.empty(shape, dtype=dtype, device="cuda"), x, w, EPS, True)
    torch.library.opcheck(_op(op), args)


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("how", ["wrapper", "op"])
@pytest.mark.parametrize("hidden", [4096, 111])
def test_cuda_graph(op, how, hidden, gen):
    """Capture with static tensors, then replay on new data copied into the static inputs
    (for the fused ops: both input and residual, re-filled before each replay)."""
    dtype = torch.bfloat16
    rows, gemma = 64, _is_gemma(op)
    x, w, other = make_args(op, (rows, hidden), dtype, gen)
    fused = _is_fused(op)

    def step():
        if fused:
            if how == "wrapper":
                getattr(sgl_kernel, op)(x, other, w, EPS)
            else:
                _op(op)(x, other, w, EPS, True)
            return None
        if how == "wrapper":
            return getattr(sgl_kernel, op)(x, w, EPS)  # out from the graph's pool
        _op(op)(other, x, w, EPS, True)
        return other

    step()  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for _ in range(2):
        new_x = _randn((rows, hidden), dtype, gen)
        x.copy_(new_x)
        if fused:
            new_r = _randn((rows, hidden), dtype, gen)
            other.copy_(new_r)
            ref, ref_residual = fused_add_rmsnorm_ref(new_x, new_r, w, EPS, gemma)
        else:
            out.fill_(NAN)
            ref = rmsnorm_ref(new_x, w, EPS, gemma)
        graph.replay()
        torch.cuda.synchronize()
        if fused:
            torch.testing.assert_close(other, ref_residual, rtol=0, atol=0)
            _assert_norm(x, ref, dtype)
        else:
            _assert_norm(out, ref, dtype)


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops and the wrappers: the C++ checks protect both)


def _calls(op: str, x, w, other, eps: float = EPS):
    """The ways to call the op with these arguments: torch.ops, then the wrapper."""
    fn = getattr(sgl_kernel, op)
    if _is_fused(op):
        return [lambda: _op(op)(x, other, w, eps, False), lambda: fn(x, other, w, eps)]
    return [lambda: _op(op)(other, x, w, eps, False), lambda: fn(x, w, eps, out=other)]


def _good(op: str, shape=(4, 64), dtype=torch.bfloat16, device="cuda"):
    x = torch.randn(shape, device=device).to(dtype)
    w = torch.randn(shape[-1], device=device).to(dtype)
    other = torch.randn(shape, device=device).to(dtype)
    return x, w, other


@pytest.mark.parametrize("op", OPS)
def test_cpu_input(op):
    """Needs no GPU: CPU tensors reach the op's own checks (a CPU registration)."""
    x, w, other = _good(op, device="cpu")
    for call in _calls(op, x, w, other):
        with raises_op_error(op, "input", "CUDA tensor"):
            call()
    if not _is_fused(op):
        with raises_op_error(op, "input", "CUDA tensor"):
            getattr(sgl_kernel, op)(x, w)


@GPU
@pytest.mark.parametrize("op", OPS)
def test_cpu_input_cuda_rest(op):
    x, w, other = _good(op)
    for call in _calls(op, x.cpu(), w, other):
        with raises_op_error(op, "input", "CUDA tensor"):
            call()


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("kind", ["dtype", "length", "2d", "non_contiguous", "cpu"])
def test_bad_weight(op, kind):
    x, w, other = _good(op)
    h = x.shape[-1]
    if kind == "dtype":
        w, fragments = w.float(), ("dtype", "torch.float32", "torch.bfloat16")
    elif kind == "length":
        w, fragments = torch.ones(h + 1, dtype=x.dtype, device="cuda"), (str(h), str(h + 1))
    elif kind == "2d":
        w, fragments = w.view(1, h), ("1-D",)
    elif kind == "non_contiguous":
        w, fragments = torch.ones(2 * h, dtype=x.dtype, device="cuda")[::2], ("contiguous",)
        assert w.shape == (h,) and not w.is_contiguous()
    else:
        w, fragments = w.cpu(), ("device",)
    for call in _calls(op, x, w, other):
        with raises_op_error(op, "weight", *fragments):
            call()


@GPU
@pytest.mark.parametrize("op", FUSED_OPS)
@pytest.mark.parametrize("kind", ["shape", "shape_same_numel", "dtype", "last_stride", "cpu"])
def test_bad_residual(op, kind):
    x, w, r = _good(op)
    if kind == "shape":
        r, fragments = torch.zeros(4, 65, dtype=x.dtype, device="cuda"), ("shape", "[4, 65]")
    elif kind == "shape_same_numel":
        r, fragments = r.view(2, 2, 64), ("shape", "[2, 2, 64]")
    elif kind == "dtype":
        r, fragments = r.half(), ("dtype", "torch.float16")
    elif kind == "last_stride":
        r, fragments = torch.zeros(4, 128, dtype=x.dtype, device="cuda")[:, ::2], ("stride(-1) == 1",)
    else:
        r, fragments = r.cpu(), ("device",)
    for call in _calls(op, x, w, r):
        with raises_op_error(op, "residual", *fragments):
            call()


@GPU
@pytest.mark.parametrize("op", PLAIN_OPS)
@pytest.mark.parametrize("kind", ["shape", "shape_rows", "shape_3d", "dtype", "last_stride", "cpu"])
def test_bad_output(op, kind):
    x, w, out = _good(op)
    if kind == "shape":
        out, fragments = torch.empty(4, 65, dtype=x.dtype, device="cuda"), ("shape", "[4, 65]")
    elif kind == "shape_rows":
        out, fragments = torch.empty(5, 64, dtype=x.dtype, device="cuda"), ("shape", "[5, 64]")
    elif kind == "shape_3d":
        out, fragments = torch.empty(1, 4, 64, dtype=x.dtype, device="cuda"), ("shape", "[1, 4, 64]")
    elif kind == "dtype":
        out, fragments = out.float(), ("dtype", "torch.float32")
    elif kind == "last_stride":
        out, fragments = torch.empty(4, 128, dtype=x.dtype, device="cuda")[:, ::2], ("stride(-1) == 1",)
    else:
        out, fragments = out.cpu(), ("device",)
    for call in _calls(op, x, w, out):
        with raises_op_error(op, "output", *fragments):
            call()


@GPU
@pytest.mark.parametrize("op", OPS)
def test_input_last_stride(op):
    _, w, other = _good(op)
    x = torch.randn(4, 128, device="cuda").to(torch.bfloat16)[:, ::2]
    assert x.shape == (4, 64) and x.stride(-1) == 2
    for call in _calls(op, x, w, other):
        with raises_op_error(op, "input", "stride(-1) == 1"):
            call()


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.int32, torch.float64], ids=str)
def test_bad_input_dtype(op, dtype):
    x = torch.ones(4, 64, dtype=dtype, device="cuda")
    w = torch.ones(64, dtype=dtype, device="cuda")
    other = torch.ones(4, 64, dtype=dtype, device="cuda")
    for call in _calls(op, x, w, other):
        with raises_op_error(op, "input", "dtype", str(dtype)):
            call()
    if not _is_fused(op):
        with raises_op_error(op, "input", "dtype", str(dtype)):
            getattr(sgl_kernel, op)(x, w)


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("eps", [-1e-6, NAN, float("inf")], ids=["negative", "nan", "inf"])
def test_bad_eps(op, eps):
    x, w, other = _good(op)
    for call in _calls(op, x, w, other, eps=eps):
        with raises_op_error(op, "eps"):
            call()


@contextlib.contextmanager
def _raises_layout_error(op: str):
    """The row-layout error names every tensor it looked at ("the leading dimensions of
    input, output must collapse ..."), so it does not start with the argument's name."""
    with pytest.raises(RuntimeError) as info:
        yield info
    msg = str(info.value)
    prefix = f"sgl_kernel.{op}: "
    assert msg.startswith(prefix), f"message does not start with {prefix!r}: {msg!r}"
    first = msg.splitlines()[0]
    assert "input" in first[len(prefix):], f"message does not name 'input': {first!r}"


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("where", ["input", "other"])
def test_uncollapsible_4d(op, where):
    """A 4-D tensor whose leading dims fold into no two-level row layout raises."""
    h = 64
    bad = uncollapsible_4d(torch.randn(3, 5, 6, h, device="cuda").to(torch.bfloat16))
    good = torch.randn(bad.shape, device="cuda").to(torch.bfloat16)
    w = torch.randn(h, device="cuda").to(torch.bfloat16)
    x, other = (bad, good) if where == "input" else (good, bad)
    assert row_split(x, other) is None
    for call in _calls(op, x, w, other):
        with _raises_layout_error(op):
            call()
    if not _is_fused(op) and where == "input":
        with _raises_layout_error(op):
            getattr(sgl_kernel, op)(x, w)  # the wrapper's empty_like(x) is contiguous: still x


@GPU
@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("shape", [(2**31, 16), (2**16, 2**15, 16), (2, 2**30 + 1, 16)], ids=str)
def test_size_limit_messages(op, shape):
    """2^31 rows or more (all dimensions but the last) are refused with a message naming the
    limit, before any launch: zero-stride views give the row count without the memory."""
    x, other = one_row_view(shape, torch.bfloat16), one_row_view(shape, torch.bfloat16)
    w = torch.ones(shape[-1], dtype=torch.bfloat16, device="cuda")
    rows = x.numel() // shape[-1]
    for call in _calls(op, x, w, other):
        with raises_op_error(op, "input", f"at most {2**31 - 1} rows", f"got {rows}"):
            call()


@GPU
@pytest.mark.parametrize("op", OPS)
def test_size_limit_boundary(op):
    """2^31 - 1 rows pass the row limit: the next check (eps) is the one that fails."""
    x, other = one_row_view((2**31 - 1, 16), torch.bfloat16), one_row_view((2**31 - 1, 16), torch.bfloat16)
    w = torch.ones(16, dtype=torch.bfloat16, device="cuda")
    for call in _calls(op, x, w, other, eps=NAN):
        with raises_op_error(op, "eps"):
            call()


# ---------------------------------------------------------------------------------------
# No GPU needed: the references, the layouts above, fake tensors


@pytest.mark.parametrize("gemma", [False, True])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_reference(gemma, dtype):
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 37, generator=g).to(dtype)
    r = torch.randn(5, 37, generator=g).to(dtype)
    w = torch.randn(37, generator=g).to(dtype)
    x0, r0 = x.clone(), r.clone()
    wd = w.double() + 1.0 if gemma else w.double()

    def f64(v: torch.Tensor) -> torch.Tensor:
        v = v.double()
        return v / torch.sqrt(v.pow(2).mean(-1, keepdim=True) + 1e-6) * wd

    y = rmsnorm_ref(x, w, 1e-6, gemma)
    assert y.dtype == torch.float32
    torch.testing.assert_close(y.double(), f64(x), rtol=1e-5, atol=1e-5)
    assert rmsnorm_torch(x, w, 1e-6, gemma).dtype == dtype

    normed, res = fused_add_rmsnorm_ref(x, r, w, 1e-6, gemma)
    assert torch.equal(x, x0) and torch.equal(r, r0), "the reference must not modify its arguments"
    assert res.dtype == dtype and normed.dtype == torch.float32
    assert torch.equal(res, (x.double() + r.double()).to(dtype))  # one rounding of the exact sum
    torch.testing.assert_close(normed.double(), f64(res), rtol=1e-5, atol=1e-5)

    n2, res2 = fused_add_rmsnorm_torch(x, r, w, 1e-6, gemma)
    assert n2.dtype == dtype and torch.equal(n2, normed.to(dtype)) and torch.equal(res2, res)
    assert fused_add_rmsnorm_torch_(x, r, w, 1e-6, gemma) is None
    assert torch.equal(x, n2) and torch.equal(r, res)


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("hidden", [4096, 111])
def test_layouts_as_intended(layout, hidden):
    """The strided tests exercise what they claim: which split row_layout() finds, and for
    the aligned layouts with H % 8 == 0 a row stride that allows the vector path."""
    shape_of, base_shape, view_of = LAYOUTS[layout]
    for dtype in DTYPES:
        base = torch.empty(base_shape(hidden), dtype=dtype)
        v = view_of(base, hidden)
        assert tuple(v.shape) == shape_of(hidden) and v.stride(-1) == 1
        assert row_split(v) == LAYOUT_SPLIT[layout]
        assert row_split(v, torch.empty(v.shape, dtype=dtype)) == LAYOUT_SPLIT[layout]
        # The vector path's conditions (norm.cu): row strides in whole 16-byte vectors and a
        # 16-byte aligned data pointer (the base itself is allocator-aligned).
        strides = [s for s, n in zip(v.stride()[:-1], v.shape[:-1]) if n > 1]
        vec = 16 // v.element_size()
        offset_bytes = v.data_ptr() - base.data_ptr()
        aligned = all(s % vec == 0 for s in strides) and offset_bytes % 16 == 0
        if layout in ("pad3", "offset1", "3d_split_pad3"):
            assert not aligned  # the scalar path even when H allows vectors
        elif hidden % 8 == 0:
            assert aligned


def test_uncollapsible_4d_layout():
    bad = uncollapsible_4d(torch.empty(3, 5, 6, 64))
    assert bad.shape == (3, 3, 3, 64) and bad.stride(-1) == 1
    assert row_split(bad) is None
    assert row_split(bad, torch.empty(bad.shape)) is None
    assert row_split(torch.empty(bad.shape)) == 0


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fake(op, dtype):
    fn = getattr(sgl_kernel, op)
    with FakeTensorMode():
        x = torch.empty(3, 5, 64, dtype=dtype, device="cuda")
        w = torch.empty(64, dtype=dtype, device="cuda")
        if _is_fused(op):
            r = torch.empty_like(x)
            assert fn(x, r, w) is None
            assert _op(op)(x, r, w, EPS, False) is None
        else:
            y = fn(x, w)
            assert y.shape == x.shape and y.dtype == dtype and y.device.type == "cuda"
            out = torch.empty_like(x)
            assert fn(x, w, 1e-5, out=out, enable_pdl=False) is out
            assert _op(op)(out, x, w, EPS, False) is None
