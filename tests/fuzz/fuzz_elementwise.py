# SPDX-License-Identifier: Apache-2.0
"""Fuzzers of the elementwise family (API.md 2.1.1-2.1.3): the four RMSNorm variants, the three
gated activations and RoPE with a cos/sin cache (in place, out of place through the op, and with
the fused KV-cache write).

Each case draws one argument combination the bindings accept (csrc/elementwise/elementwise_ops.cc
and the wrappers of python/sgl_kernel/elementwise.py), with shapes and layouts next to the
launchers' kernel choices (csrc/elementwise/norm.cu, activation.cu, rope.cu):

- norms: the decode kernel (<= 256 rows, hidden a multiple of 512 up to 8192, fused 7168, rows
  aligned to 4 elements), its sm90 clusters (hidden >= 16384, <= 16 rows), the vector kernel
  (hidden a multiple of one 16-byte vector, at most 4096 of them, every pointer and row stride
  16-byte aligned; the compiled-in groups at 1024 / 2048 vectors), the scalar kernel (any
  length or alignment) and its warp-a-row form (more than 256 rows of at most 128 elements);
  from 16384 rows the two-pass / exact-row / evict_last kernels where the element budget
  allows it. Rows are 1-D to 4-D, with padded row strides, two-level row strides (the leading
  dims split as row_layout() splits them), misaligned starts, a broadcast input (stride 0) and
  out = input for the plain ops.
- activations: the output-size thresholds of the vector kernels (64 KiB, 1.5 MiB, 16 MiB), d
  that is or is not a multiple of the 4 / 8 / 16-byte vector, misaligned starts; through the
  wrapper where it accepts the row size (2d * element size a multiple of 16 bytes), else
  through torch.ops.
- RoPE: head sizes 16-512 (64 / 128 / 256 / 512 mostly), partial rotary, GQA and more key than
  query heads, NeoX and GPT-J, int32 / int64 (and, through the wrapper, int16) positions,
  q / k / v as slices of one fused tensor or separate 2-D / 3-D tensors with padded token and
  head strides, token counts at the plan's limits (1024, 16384, the warp targets), positions
  and cache locations out of range (skipped, API.md 1.4) unless SGL_KERNEL_DEBUG is set.

Every output is NaN-poisoned before the call where the op does not read it, every tensor lives
in a larger NaN- (or -1-) filled storage, and after the call everything outside the op's
written views must be bitwise what it was.
"""

from __future__ import annotations

import math
import os
from typing import Dict, List, Optional, Sequence, Tuple

import torch

import sgl_kernel
from sgl_kernel import FusedSetKVBufferArg
from sgl_kernel.utils import _resolve_pdl, is_arch_support_pdl
from tests.elementwise.ref_activation import REFS as ACT_REFS
from tests.elementwise.ref_norm import OPS as NORM_KINDS
from tests.elementwise.ref_norm import fused_add_rmsnorm_ref, rmsnorm_ref
from tests.elementwise.ref_rope import expected_rope
from tests.elementwise.test_norm import row_split
from tests.fuzz.common import Case, Fuzzer, dense_strides, describe
from tests.tolerances import elementwise_tol

# Where the fuzzers allocate (a name, so that a GPU-less dry run can point it elsewhere).
_DEVICE = "cuda"
NAN = float("nan")
_FLOATS = (torch.float16, torch.bfloat16, torch.float32)
_HALVES = (torch.float16, torch.bfloat16)
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _op(name: str):
    return getattr(torch.ops.sgl_kernel, name).default


def _debug_indices() -> bool:
    """SGL_KERNEL_DEBUG=1 turns out-of-range indices into errors: draw none then."""
    v = os.environ.get("SGL_KERNEL_DEBUG", "")
    return v not in ("", "0")


def _sync() -> None:
    if str(_DEVICE).startswith("cuda"):
        torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------
# Storage with guards


def _extent(shape: Sequence[int], strides: Sequence[int], offset: int) -> int:
    """Elements a view of ``shape`` / ``strides`` at ``offset`` reaches into its storage."""
    if any(n == 0 for n in shape):
        return offset
    return offset + 1 + sum((n - 1) * s for n, s in zip(shape, strides))


class _Store:
    """A flat buffer holding one or more views; the rest of it is guard (NaN, or -1 for
    integers). ``freeze`` takes the snapshot the checks compare against."""

    def __init__(self, numel: int, dtype: torch.dtype) -> None:
        fill = NAN if dtype.is_floating_point else -1
        self.base = torch.full((max(numel, 1),), fill, dtype=dtype, device=_DEVICE)
        self.before: Optional[torch.Tensor] = None

    def view(self, shape: Sequence[int], strides: Sequence[int], offset: int) -> torch.Tensor:
        return self.base.as_strided(tuple(shape), tuple(strides), offset)

    def freeze(self) -> None:
        self.before = self.base.clone()

    def mask(self, views: Sequence[torch.Tensor]) -> torch.Tensor:
        m = torch.zeros(self.base.shape, dtype=torch.bool, device=self.base.device)
        for v in views:
            m.as_strided(tuple(v.shape), tuple(v.stride()), v.storage_offset()).fill_(True)
        return m


def _store_with(shape: Sequence[int], strides: Sequence[int], offset: int, dtype: torch.dtype,
                tail: int) -> Tuple[_Store, torch.Tensor]:
    """A new store holding one view (``tail`` guard elements past its last one)."""
    store = _Store(_extent(shape, strides, offset) + tail, dtype)
    return store, store.view(shape, strides, offset)


def _like(base: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """The view of ``base`` (another storage of the same size) that ``v`` is of its store."""
    return base.as_strided(tuple(v.shape), tuple(v.stride()), v.storage_offset())


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t`` as integers of its element size (bitwise compares; NaN equals NaN)."""
    return t.contiguous().view(_INT_OF_SIZE[t.element_size()])


def _same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


def _check_outside(desc: str, name: str, store: _Store, written: Sequence[torch.Tensor]) -> None:
    """Every element of ``store`` outside the ``written`` views is bitwise unchanged."""
    changed = _bits(store.base) != _bits(store.before)
    if written:
        changed &= ~store.mask(written)
    n = int(changed.sum())
    if n:
        first = int(changed.nonzero()[0, 0])
        raise AssertionError(f"{desc}: {name}: {n} element(s) outside what the op may write changed "
                             f"(first at storage element {first})")


def _check_expected_store(desc: str, name: str, store: _Store, expected: torch.Tensor) -> None:
    """The whole store is bitwise ``expected`` (the snapshot with the rows the op must write)."""
    changed = _bits(store.base) != _bits(expected)
    n = int(changed.sum())
    if n:
        first = int(changed.nonzero()[0, 0])
        raise AssertionError(f"{desc}: {name}: {n} element(s) differ from the expected buffer "
                             f"(first at storage element {first})")


def _close(desc: str, what: str, actual: torch.Tensor, expected: torch.Tensor, dtype: torch.dtype,
           bf16_rounded: bool = False) -> None:
    """``actual`` against an fp32 reference with the shared tolerances; ``bf16_rounded``: bf16
    results against the bf16 rounding of the reference (the norm tests' convention). NaN must
    meet NaN: a row of zeros with eps = 0 normalises to 0 * inf in the reference and the op."""
    if bf16_rounded and dtype == torch.bfloat16:
        expected = expected.to(torch.bfloat16).float()
    try:
        torch.testing.assert_close(actual.float(), expected, equal_nan=True, **elementwise_tol(dtype))
    except AssertionError as e:
        raise AssertionError(f"{desc}: {what} differs from the reference\n{e}") from None


def _call(desc: str, fn, *args, **kwargs):
    """Runs the op; an error on a legal case (or one a kernel left behind) names the case."""
    try:
        out = fn(*args, **kwargs)
        _sync()
    except (RuntimeError, ValueError, AssertionError) as e:
        raise AssertionError(f"{desc}: the op failed on a legal case: {type(e).__name__}: {e}") from e
    return out


# ---------------------------------------------------------------------------------------
# Shared draws


def _lead_dims(case: Case, rows: int) -> Tuple[int, ...]:
    """Leading dims with a product of at most ``rows`` (exactly, for 1-D and 2-D): 1-D only
    for one row, else 2-D to 4-D."""
    r = case.rng.random()
    if rows == 1 and r < 0.2:
        return ()
    if r < 0.55 or rows < 2:
        return (rows,)
    if r < 0.85:
        a = case.choice((1, 2, 3, 4, 5, 7, 8, 16))
        a = min(a, rows)
        return (a, max(1, rows // a))
    a = min(case.choice((1, 2, 3)), rows)
    b = min(case.choice((1, 2, 3, 5)), max(1, rows // a))
    return (a, b, max(1, rows // (a * b)))


def _empty_lead(case: Case) -> Tuple[int, ...]:
    return case.choice(((0,), (2, 0), (0, 3)))


# ---------------------------------------------------------------------------------------
# Norms (API.md 2.1.1)

# 16-byte vectors per row at the vector kernel's choices (row_group_threads: powers of two to
# 32 lanes, then whole warps; 1024 / 2048: the compiled-in decode groups; 640 / 768 / 896 /
# 1024: the many-row exact-row and two-pass shapes; 4096: the vector kernel's limit).
_HV_POINTS = (1, 2, 3, 4, 5, 7, 8, 9, 12, 15, 16, 17, 31, 32, 33, 48, 63, 64, 65, 96, 127, 128, 129, 192, 255,
              256, 257, 320, 384, 448, 511, 512, 513, 640, 768, 896, 1023, 1024, 1025, 1536, 2047, 2048, 2049,
              3072, 4095, 4096, 4097)
# The decode kernel's row lengths (multiples of 512) around its limits (fused 7168, plain 8192),
# and its 2- and 1-chunk-a-warp lengths (multiples of 256 / 128 from 1024; 896 below it, 4224
# past 32 warps, 7936 / 7424 past the fused limit).
_DECODE_HIDDEN = (512, 1024, 1536, 2048, 2560, 3072, 4096, 5120, 6144, 7168, 7680, 8192, 8704, 12288,
                  896, 1152, 1280, 2304, 3840, 4224, 5376, 7424, 7936)
# Cluster lengths (8 blocks a row from 16384 up to 16 rows, 16 from 32768 up to 4 rows; the
# length a multiple of 512 * blocks) and lengths that are not.
_CLUSTER_HIDDEN = (16384, 16896, 20480, 24576, 32768, 36864, 40960, 49152, 65536)
# Not a multiple of any vector: the scalar kernel.
_ODD_HIDDEN = (1, 2, 3, 5, 7, 100, 111, 127, 128, 129, 1000, 3583, 4096, 4100, 16384, 40000)
_NORM_ROWS = (1, 2, 3, 7, 16, 17, 32, 63, 64, 65, 127, 128, 255, 256, 257, 1024, 1025, 2053, 4096, 16383,
              16384, 16385)


def _norm_hidden(case: Case, dtype: torch.dtype) -> Tuple[int, str]:
    vec = 16 // dtype.itemsize
    r = case.rng.random()
    if r < 0.22:
        return case.choice(_DECODE_HIDDEN), "decode"
    if r < 0.32:
        return case.choice(_CLUSTER_HIDDEN), "cluster"
    if r < 0.62:
        hv = case.near(_HV_POINTS, 1, 4097) if case.coin(0.7) else case.log_int(1, 4096)
        return hv * vec, "vec"
    if r < 0.80:
        h = max(1, case.choice(_ODD_HIDDEN) + case.rng.randint(-3, 3))
        if h % vec == 0:
            h += 1
        return h, "odd"
    return case.hidden(65536), "any"


def _norm_rows(case: Case, kind: str, hidden: int) -> int:
    if kind in ("decode", "cluster") and case.coin(0.8):
        rows = case.near((1, 2, 4, 5, 8, 16, 17, 32, 64, 65, 128, 255, 256, 257), 1)
    elif hidden <= 128 and case.coin(0.6):
        rows = case.near((256, 257, 258, 1024, 1025, 2053, 4096, 65536), 1)  # a warp a row from 257
    else:
        rows = case.rows(1 << 20, points=_NORM_ROWS)
    return case.fit_rows(rows, hidden)


def _row_split(shape: Sequence[int], strides_list: Sequence[Sequence[int]]) -> Optional[int]:
    """test_norm.row_split (the mirror of row_layout() in elementwise_ops.cc) on meta tensors
    of these strides: the split of the leading dims the op finds, None when it refuses."""
    metas = [torch.empty_strided(tuple(shape), tuple(st), device="meta") for st in strides_list]
    return row_split(*metas)


class _RowLayout:
    """How a norm operand sits in its storage: element offset, row padding past ``hidden``,
    and an optional gap that keeps leading dims ``brk - 1`` and ``brk`` from merging (a second
    level of rows); ``broadcast``: every leading stride 0 (one row read for all)."""

    def __init__(self, offset: int = 0, row_pad: int = 0, brk: Optional[int] = None, gap: int = 0,
                 broadcast: bool = False) -> None:
        self.offset, self.row_pad, self.brk, self.gap, self.broadcast = offset, row_pad, brk, gap, broadcast

    def strides(self, lead: Sequence[int], hidden: int) -> Tuple[int, ...]:
        if self.broadcast:
            return (0,) * len(lead) + (1,)
        st = [0] * len(lead)
        s = hidden + self.row_pad
        for i in range(len(lead) - 1, -1, -1):
            st[i] = s
            s = s * lead[i] + (self.gap if i == self.brk else 0)
        return tuple(st) + (1,)


def _draw_row_layout(case: Case, lead: Sequence[int], dtype: torch.dtype, aligned: bool) -> _RowLayout:
    """Dense (half the time), else an offset and padding of whole 16-byte vectors (always when
    ``aligned``), of 4 elements (the decode kernel's alignment, not the vector kernel's for
    16-bit types), or odd."""
    if case.coin(0.5):
        return _RowLayout()
    vec = 16 // dtype.itemsize

    def amount() -> int:
        r = case.rng.random()
        if aligned or r < 0.5:
            return vec * case.rng.randint(1, 4)
        if r < 0.65:
            return 4
        if r < 0.9:
            return case.rng.randint(1, 7)
        return 64

    offset = amount() if case.coin(0.5) else 0
    row_pad = amount() if case.coin(0.6) else 0
    brk, gap = None, 0
    if len(lead) >= 2 and case.coin(0.5):
        brk = case.rng.randint(1, len(lead) - 1)
        gap = amount()
    return _RowLayout(offset, row_pad, brk, gap)


def _norm_path(op_fused: bool, rows: int, hidden: int, dtype: torch.dtype, tensors: Sequence[torch.Tensor],
               weight: torch.Tensor) -> str:
    """The kernel launch_rmsnorm should pick (norm.cu's launch_variant), for the description."""
    if rows == 0 or hidden == 0:
        return "empty"
    size = dtype.itemsize
    vec = 16 // size

    def aligned(nbytes: int) -> bool:
        for t in tensors:
            if t.data_ptr() % nbytes:
                return False
            for n, s in zip(t.shape[:-1], t.stride()[:-1]):
                if n > 1 and (s * size) % nbytes:
                    return False
        return weight.data_ptr() % nbytes == 0

    if rows <= 256 and hidden % 512 == 0 and aligned(4 * size):
        if hidden >= 16384 and rows <= 16:
            cs = 16 if hidden >= 32768 and rows <= 4 else 8
            if hidden % (512 * cs) == 0 and hidden // cs // 512 * 32 <= 1024 and is_arch_support_pdl():
                return f"decode-cluster{cs}"
        if hidden <= (7168 if op_fused else 8192):
            return "decode"
    hv = hidden // vec
    if hidden % vec == 0 and hv <= 4096 and aligned(16):
        if op_fused and rows >= 16384:
            if hv in (512, 640, 768, 896):
                return "twopass"
            if hv == 1024:
                return "exact1024"
            if hv >= 2048 and hv % 1024 == 0:
                return "twopass"
        if not op_fused and rows >= 16384:
            if hv in (640, 768):
                return f"exact{hv}"
            if hv >= 512 and _group_threads(hv, 8, 512):
                return "vec8-keepL2"
        if rows <= 256 and hv in (1024, 2048):
            return f"vec8x{hv // 8}"
        order = (4, 2, 8) if rows <= 256 else (8, 6, 4, 12, 16, 2)
        for vpt in order:
            tpr = _group_threads(hv, vpt, 1024 if vpt <= 2 else 512 if vpt <= 8 else 256)
            if tpr and not (tpr < 4 and vpt > 2):
                return f"vec{vpt}/tpr{tpr}"
    if rows > 256 and hidden <= 128:
        return "scalar-warp-rows"
    return "scalar"


def _group_threads(hv: int, vpt: int, max_threads: int) -> int:
    """Mirror of row_group_threads (sgl_kernel/row_norm.cuh), min_tpr 1."""
    need = (hv + vpt - 1) // vpt
    if need <= 32:
        tpr = 1
        while tpr < need:
            tpr *= 2
    else:
        tpr = (need + 31) // 32 * 32
    if tpr > max_threads or (vpt - 1) * tpr > hv:
        return 0
    return tpr


def _norm_fuzzer(op: str) -> Fuzzer:
    fused, gemma = NORM_KINDS[op]
    wrapper = getattr(sgl_kernel, op)
    raw = _op(op)

    def fuzz(case: Case) -> str:
        dtype = case.choice(_FLOATS)
        hidden, kind = _norm_hidden(case, dtype)
        hidden = max(1, min(hidden, case.max_elems))
        if case.coin(0.02):
            lead = _empty_lead(case)
        else:
            lead = _lead_dims(case, _norm_rows(case, kind, hidden))
        shape = (*lead, hidden)
        rows = math.prod(lead)

        # Layouts: input, then out (plain) or residual (fused); out may be the input itself and
        # the plain ops' input may be one row broadcast over all (stride 0).
        broadcast = not fused and len(lead) >= 1 and rows > 1 and case.coin(0.05)
        alias = not fused and not broadcast and case.coin(0.08)
        aligned = case.coin(0.6)  # every offset and padding in whole 16-byte vectors
        x_lay = _draw_row_layout(case, lead, dtype, aligned)
        if broadcast:
            x_lay = _RowLayout(offset=x_lay.offset, broadcast=True)
        o_lay = _draw_row_layout(case, lead, dtype, aligned)
        x_st, o_st = x_lay.strides(lead, hidden), o_lay.strides(lead, hidden)
        if _row_split(shape, [x_st, o_st]) is None:
            o_lay.brk, o_lay.gap = None, 0  # the two split differently: the other one merges
            o_st = o_lay.strides(lead, hidden)
        assert alias or _row_split(shape, [x_st, o_st]) is not None, "fuzzer: illegal row layout drawn"
        w_off = (16 // dtype.itemsize) * case.rng.randint(0, 2) if aligned or case.coin(0.5) else \
            case.choice((1, 2, 3, 4, 5))

        eps = case.choice((1e-6, 1e-6, 1e-5, 1e-3, 0.0, 0.1))
        scale = case.choice((1.0, 1.0, 1.0, 1.0, 1e-3, 1000.0))
        pdl = case.choice((None, True, False))
        if fused:
            mode = "wrapper" if case.coin(0.75) else "op"
        elif alias:
            mode = case.choice(("wrapper", "op"))
        else:
            mode = case.choice(("wrapper", "wrapper", "wrapper-alloc", "op"))

        # Tensors: each in a storage of its own, guards NaN.
        x_store, x = _store_with(shape, x_st, x_lay.offset, dtype, case.rng.randint(0, 9))
        if broadcast:  # (copy_ refuses a destination with overlapping elements: the row itself)
            x_store.base[x_lay.offset:x_lay.offset + hidden].copy_(case.randn((hidden,), dtype, scale))
        else:
            x.copy_(case.randn(shape, dtype, scale))
        w_store, w = _store_with((hidden,), (1,), w_off, dtype, case.rng.randint(0, 9))
        w.copy_(case.randn((hidden,), dtype, 0.5 if gemma else 1.0))
        o_store = None
        if fused:
            o_store, other = _store_with(shape, o_st, o_lay.offset, dtype, case.rng.randint(0, 9))
            other.copy_(case.randn(shape, dtype, scale))
        elif alias:
            other = x
        elif mode != "wrapper-alloc":
            o_store, other = _store_with(shape, o_st, o_lay.offset, dtype, case.rng.randint(0, 9))
        else:
            other = None

        path = _norm_path(fused, rows, hidden, dtype, [t for t in (x, other) if t is not None], w)
        other_name = "residual" if fused else "out"
        other_desc = "input" if alias else ("alloc" if other is None else describe(other))
        desc = (f"{op} input={describe(x)} {other_name}={other_desc} weight={describe(w)} eps={eps:g} "
                f"scale={scale:g} pdl={pdl} call={mode} path~{path}")

        # References before the call (the call overwrites input / residual / out = input).
        if fused:
            ref, ref_res = fused_add_rmsnorm_ref(x, other, w, eps, gemma)
        else:
            ref = rmsnorm_ref(x, w, eps, gemma)
        for s in (x_store, w_store, o_store):
            if s is not None:
                s.freeze()

        pdl_bool = _resolve_pdl(pdl)
        if fused:
            if mode == "wrapper":
                result = _call(desc, wrapper, x, other, w, eps, enable_pdl=pdl)
            else:
                result = _call(desc, raw, x, other, w, eps, pdl_bool)
            if result is not None:
                raise AssertionError(f"{desc}: returned {type(result).__name__}, expected None")
            if not _same_bits(other, ref_res):
                bad = int((_bits(other) != _bits(ref_res.contiguous())).sum())
                raise AssertionError(f"{desc}: residual is not input + residual rounded once "
                                     f"({bad} element(s) differ bitwise)")
            _close(desc, "input (normalised in place)", x, ref, dtype, bf16_rounded=True)
            _check_outside(desc, "input storage", x_store, [x])
            _check_outside(desc, "residual storage", o_store, [other])
        else:
            if mode == "op":
                result = _call(desc, raw, other, x, w, eps, pdl_bool)
                if result is not None:
                    raise AssertionError(f"{desc}: the op returned {type(result).__name__}, expected None")
                y = other
            else:
                y = _call(desc, wrapper, x, w, eps, out=other, enable_pdl=pdl)
                if other is not None and y is not other:
                    raise AssertionError(f"{desc}: the wrapper did not return the out it was given")
                if other is None and (not isinstance(y, torch.Tensor) or y.shape != x.shape or y.dtype != dtype):
                    raise AssertionError(f"{desc}: the allocated out is not a {dtype} tensor of shape {tuple(shape)}")
            _close(desc, "out", y, ref, dtype, bf16_rounded=True)
            if alias:
                _check_outside(desc, "input (= out) storage", x_store, [x])
            else:
                _check_outside(desc, "input storage", x_store, [])
                if o_store is not None:
                    _check_outside(desc, "out storage", o_store, [other])
        _check_outside(desc, "weight storage", w_store, [])
        return desc

    fuzz.__name__ = f"fuzz_{op}"
    return fuzz


# ---------------------------------------------------------------------------------------
# Gated activations (API.md 2.1.2)

_ACT_D = (1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 31, 32, 33, 64, 100, 111, 128, 256, 264, 512, 1000, 1024, 1408,
          2048, 2056, 4096, 5120, 7168, 11008, 14336, 18944)
# activation.cu: 4-byte vectors below 64 KiB of output, 8-byte below 1.5 MiB, 16-byte below
# 16 MiB, 16-byte two a thread beyond.
_ACT_OUT_BYTES = (64 << 10, 3 << 19, 16 << 20)


def _act_path(op: str, x: torch.Tensor, out: Optional[torch.Tensor], rows: int, d: int) -> str:
    """The kernel launch_act_and_mul should pick (activation.cu's launch_typed)."""
    total = rows * d
    if total == 0:
        return "empty"
    size = x.element_size()
    out_bytes = total * size
    if out is None:
        out_ptr = 0  # a fresh allocation
    else:
        out_ptr = out.data_ptr()

    def vec(nbytes: int, unroll: int, block: int) -> bool:
        elems = nbytes // size
        return (d % elems == 0 and x.data_ptr() % nbytes == 0 and out_ptr % nbytes == 0
                and total // elems < (1 << 32) - block * unroll)

    if out_bytes >= _ACT_OUT_BYTES[2]:
        if vec(16, 2, 512 if op == "silu_and_mul" else 256):
            return "vec16x2"
    elif out_bytes >= _ACT_OUT_BYTES[1]:
        if vec(16, 1, 256):
            return "vec16"
    if out_bytes >= _ACT_OUT_BYTES[0] and vec(8, 1, 256):
        return "vec8"
    if vec(4, 1, 256):
        return "vec4"
    return "scalar"


def _act_fuzzer(op: str) -> Fuzzer:
    wrapper = getattr(sgl_kernel, op)
    raw = _op(op)
    ref_fn = ACT_REFS[op]

    def fuzz(case: Case) -> str:
        dtype = case.choice(_FLOATS)
        size = dtype.itemsize
        r = case.rng.random()
        if r < 0.4:
            d = case.choice(_ACT_D)
        elif r < 0.7:
            d = case.near(_ACT_D, 1, 1 << 16, spread=2)
        else:
            d = case.log_int(1, 32768)
        d = max(1, min(d, case.max_elems // 2))
        if case.coin(0.5):
            target = case.choice(_ACT_OUT_BYTES)
            rows = max(1, -(-target // (d * size)) + case.rng.randint(-1, 1))
        else:
            rows = case.rows(1 << 20, points=(1, 2, 3, 7, 16, 31, 32, 33, 128, 256, 1024, 4096))
        rows = case.fit_rows(rows, 2 * d)
        lead = _empty_lead(case) if case.coin(0.02) else _lead_dims(case, rows)
        rows = math.prod(lead)
        x_shape, o_shape = (*lead, 2 * d), (*lead, d)

        accepted = (2 * d * size) % 16 == 0  # the wrapper's row-size rule
        mode = case.choice(("wrapper", "wrapper", "wrapper-alloc", "op")) if accepted else "op"
        x_off = 0 if case.coin(0.5) else case.rng.randint(1, 8)
        o_off = 0 if case.coin(0.5) else case.rng.randint(1, 8)
        scale = case.choice((1.0, 1.0, 1.0, 4.0, 0.01))

        x_store, x = _store_with(x_shape, dense_strides(x_shape), x_off, dtype, case.rng.randint(0, 16))
        x.copy_(case.randn(x_shape, dtype, scale))
        o_store, out = None, None
        if mode != "wrapper-alloc":
            o_store, out = _store_with(o_shape, dense_strides(o_shape), o_off, dtype, case.rng.randint(0, 16))
        path = _act_path(op, x, out, rows, d)
        desc = (f"{op} input={describe(x)} out={'alloc' if out is None else describe(out)} scale={scale:g} "
                f"call={mode} path~{path}")

        ref = ref_fn(x)
        x_store.freeze()
        if o_store is not None:
            o_store.freeze()
        if mode == "op":
            result = _call(desc, raw, out, x)
            if result is not None:
                raise AssertionError(f"{desc}: the op returned {type(result).__name__}, expected None")
            y = out
        else:
            y = _call(desc, wrapper, x, out=out)
            if out is not None and y is not out:
                raise AssertionError(f"{desc}: the wrapper did not return the out it was given")
            if out is None and (not isinstance(y, torch.Tensor) or tuple(y.shape) != o_shape or y.dtype != dtype
                                or not y.is_contiguous()):
                raise AssertionError(f"{desc}: the allocated out is not a contiguous {dtype} tensor of shape {o_shape}")
        _close(desc, "out", y, ref, dtype)
        _check_outside(desc, "input storage", x_store, [])
        if o_store is not None:
            _check_outside(desc, "out storage", o_store, [out])
        return desc

    fuzz.__name__ = f"fuzz_{op}"
    return fuzz


# ---------------------------------------------------------------------------------------
# RoPE (API.md 2.1.3)

_ROPE_OP = _op("apply_rope_pos_ids_cos_sin_cache")
# rope.cu's plan: 1280 target warps, 10240 two-step warps, 1024 tokens (evict_last, heads of 128
# or more), 16384 tokens (several batches a warp).
_ROPE_TOKENS = (1, 2, 3, 7, 16, 31, 32, 33, 64, 127, 128, 129, 255, 256, 257, 320, 511, 512, 513, 1023, 1024,
                1025, 2047, 2048, 2049, 4096, 8192, 10240, 16383, 16384, 16385)
_ROPE_HEADS = (1, 2, 3, 4, 5, 7, 8, 12, 16, 28, 32, 40, 64)


class _Operand:
    """A [tokens, heads, head_size] operand: the 3-D view the op sees, the tensor the wrapper
    gets (2-D [tokens, heads * head_size] when the heads are packed, else 3-D) and its store."""

    def __init__(self, store: _Store, n: int, heads: int, d: int, tok_stride: int, head_stride: int, offset: int,
                 as_2d: bool) -> None:
        self.store = store
        self.v3 = store.view((n, heads, d), (tok_stride, head_stride, 1), offset)
        if as_2d and head_stride == d:
            self.user = store.view((n, heads * d), (tok_stride, 1), offset)
        else:
            self.user = self.v3


def _rope_strides(case: Case, heads: int, d: int) -> Tuple[int, int]:
    """(token stride, head stride) in elements, multiples of 8 (16 bytes): packed or padded."""
    head_stride = d + (8 * case.rng.randint(1, 4) if case.coin(0.2) else 0)
    tok_stride = heads * head_stride + (8 * case.rng.randint(1, 6) if case.coin(0.35) else 0)
    return tok_stride, head_stride


def _separate_operand(case: Case, n: int, heads: int, d: int, dtype: torch.dtype, allow_2d: bool = True) -> _Operand:
    tok_stride, head_stride = _rope_strides(case, heads, d)
    offset = 8 * case.rng.randint(1, 4) if case.coin(0.3) else 0
    store = _Store(_extent((n, heads, d), (tok_stride, head_stride, 1), offset) + case.rng.randint(0, 24), dtype)
    return _Operand(store, n, heads, d, tok_stride, head_stride, offset, allow_2d and case.coin(0.6))


def _fused_operands(case: Case, n: int, heads: Sequence[int], d: int, dtype: torch.dtype) -> List[_Operand]:
    """Operands side by side in one tensor ([tokens, sum(heads), d] or its 2-D form), as slices
    of a fused qkv projection (or of a [N, 2, H, d] KV pool)."""
    total = sum(heads)
    tok_stride, head_stride = _rope_strides(case, total, d)
    offset = 8 * case.rng.randint(1, 4) if case.coin(0.3) else 0
    store = _Store(_extent((n, total, d), (tok_stride, head_stride, 1), offset) + case.rng.randint(0, 24), dtype)
    as_2d = case.coin(0.6)
    out, first = [], 0
    for h in heads:
        out.append(_Operand(store, n, h, d, tok_stride, head_stride, offset + first * head_stride, as_2d))
        first += h
    return out


def _rope_path(nnz: int, d: int, r: int, q_pass: bool, k_pass: bool, fused: bool) -> str:
    """The instance rope.cu's plan_rope should pick, for the description."""
    kv = fused and not q_pass and not k_pass and r == d
    general = (q_pass or k_pass or fused) and not kv
    path = "lean-kv" if kv else "general" if general else "lean"
    if nnz >= 1024 and d >= 128:
        path += "+keepL2"
    if nnz >= 16384:
        path += "+long"
    return path


def _rope_fuzz(case: Case, fused: bool) -> str:
    dtype = case.choice(_HALVES)
    nnz = case.rows(1 << 16, points=_ROPE_TOKENS)
    if nnz >= 1024 and case.coin(0.5):
        # Many tokens: few heads, so that the element budget keeps the token count (1024: heads of
        # 128 or more load under evict_last; 16384: several batches a warp).
        d = case.choice((16, 32, 64, 128, 128, 256))
        hq, hk = case.choice((1, 2, 3, 4)), case.choice((1, 2))
    else:
        d = case.choice((64, 128, 256, 512)) if case.coin(0.7) else 16 * case.rng.randint(1, 32)
        hq = case.choice(_ROPE_HEADS) if case.coin(0.7) else case.log_int(1, 64)
        hk = case.choice((1, 2, 4, 8, hq, hq + 1)) if case.coin(0.8) else case.log_int(1, 16)
    hv = (hk if case.coin(0.7) else case.rng.randint(1, 8)) if fused else case.choice((0, hk))
    r_kind = case.rng.random()
    if r_kind < 0.45:
        rot = d
    elif r_kind < 0.7:
        rot = max(16, d // 2 // 16 * 16)
    else:
        rot = 16 * case.rng.randint(1, d // 16)
    if case.coin(0.02):
        nnz = 0
    nnz = 0 if nnz == 0 else case.fit_rows(nnz, (hq + hk + hv) * d)  # the elements read per token
    is_neox = case.coin()
    mode = "wrapper" if case.coin(0.75) else "op"
    pos_dtype = case.choice((torch.int32, torch.int64))
    if mode == "wrapper" and case.coin(0.1):
        pos_dtype = torch.int16  # the wrapper converts it with .long()
    max_pos = max(1, min(case.log_int(1, 16384), case.max_elems // rot, 32767))
    pdl = case.choice((None, True, False))
    bad_indices = nnz > 0 and not _debug_indices() and case.coin(0.15)

    # q / k (/ v): slices of one fused tensor, or separate tensors.
    if case.coin(0.4):
        ops = _fused_operands(case, nnz, [h for h in (hq, hk, hv) if h > 0], d, dtype)
        q_op, k_op = ops[0], ops[1]
        v_op = ops[2] if hv > 0 else None
    else:
        q_op = _separate_operand(case, nnz, hq, d, dtype)
        k_op = _separate_operand(case, nnz, hk, d, dtype)
        v_op = _separate_operand(case, nnz, hv, d, dtype) if fused else None
    for o in (q_op, k_op, v_op):
        if o is not None:
            o.v3.copy_(case.randn(o.v3.shape, dtype))
    # Outputs: q / k themselves (the wrapper), or through the op other tensors (poisoned).
    qr_op, kr_op = q_op, k_op
    if mode == "op":
        if case.coin(0.5):
            qr_op = _separate_operand(case, nnz, hq, d, dtype, allow_2d=False)
        if case.coin(0.5):
            kr_op = _separate_operand(case, nnz, hk, d, dtype, allow_2d=False)
    q_pass, k_pass = qr_op is not q_op, kr_op is not k_op

    # Positions, the cos/sin cache (16-byte aligned, contiguous).
    pos_store, pos = _store_with((nnz,), (1,), case.rng.randint(0, 3), pos_dtype, case.rng.randint(0, 4))
    if nnz:
        pos.copy_(torch.randint(0, max_pos, (nnz,), device=_DEVICE, generator=case.gen).to(pos_dtype))
    if bad_indices:
        lo = torch.iinfo(pos_dtype).min
        hi = torch.iinfo(pos_dtype).max
        choices = [-1, lo, hi] + ([max_pos] if max_pos <= hi else []) + ([2**40] if pos_dtype == torch.int64 else [])
        for _ in range(case.rng.randint(1, min(nnz, 5))):
            pos[case.rng.randrange(nnz)] = case.choice(choices)
    cache_store, cache = _store_with((max_pos, rot), (rot, 1), 4 * case.rng.randint(0, 2), torch.float32,
                                     case.rng.randint(0, 8))
    if case.coin(0.2):
        inv = 1.0 / (10000.0 ** (torch.arange(0, rot, 2, dtype=torch.float32, device=_DEVICE) / rot))
        ang = torch.outer(torch.arange(max_pos, dtype=torch.float32, device=_DEVICE), inv)
        cache.copy_(torch.cat((ang.cos(), ang.sin()), dim=-1))
        cache_kind = "table"
    else:
        cache.copy_(case.randn((max_pos, rot), torch.float32))
        cache_kind = "randn"

    # The fused KV write: buffers (separate, or k and v in one pool), distinct cache rows.
    kb_op = vb_op = None
    loc_store = loc = None
    n_kb = n_vb = 0
    if fused:
        room = max(0, case.max_elems // (max(hk, hv) * d) - nnz)
        n_kb = nnz + case.rng.randint(0, min(2 * nnz + 8, room))
        n_vb = n_kb if case.coin(0.7) else nnz + case.rng.randint(0, min(nnz + 8, room))
        n_kb, n_vb = max(n_kb, 1), max(n_vb, 1)
        if hk == hv and n_kb == n_vb and case.coin(0.35):
            kb_op, vb_op = _fused_operands(case, n_kb, [hk, hv], d, dtype)
        else:
            kb_op = _separate_operand(case, n_kb, hk, d, dtype)
            vb_op = _separate_operand(case, n_vb, hv, d, dtype)
        loc_store, loc = _store_with((nnz,), (1,), case.rng.randint(0, 3), torch.int64, case.rng.randint(0, 4))
        if nnz:
            if bad_indices and case.coin(0.5):
                loc.copy_(case.randperm(max(n_kb, n_vb), nnz))  # rows past one buffer skip only that one
            else:
                loc.copy_(case.randperm(min(n_kb, n_vb), nnz))
            if bad_indices:
                for _ in range(case.rng.randint(1, min(nnz, 4))):
                    loc[case.rng.randrange(nnz)] = case.choice((-1, -(2**40), 2**40, max(n_kb, n_vb) + 3))

    path = _rope_path(nnz, d, rot, q_pass, k_pass, fused)
    desc = (f"rope {'neox' if is_neox else 'gptj'} {_dt(dtype)} nnz={nnz} hq={hq} hk={hk}"
            f"{f' hv={hv}' if fused else ''} head_size={d} rotary_dim={rot} max_pos={max_pos} ({cache_kind}) "
            f"pos={_dt(pos_dtype)} q={describe(q_op.user)} k={describe(k_op.user)}"
            f"{f' value={describe(v_op.user)}' if fused else ''}"
            f"{f' q_rope={describe(qr_op.v3)}' if q_pass else ''}{f' k_rope={describe(kr_op.v3)}' if k_pass else ''}"
            f"{f' k_buffer={describe(kb_op.user)} v_buffer={describe(vb_op.user)}' if fused else ''}"
            f" bad_indices={bad_indices} pdl={pdl} call={mode} path~{path}")

    # Before the call: the inputs, what the outputs held, the expected fp32 results.
    q_before, k_before = q_op.v3.clone(), k_op.v3.clone()
    qr_before, kr_before = qr_op.v3.clone(), kr_op.v3.clone()
    if nnz:
        eq, ek = expected_rope(pos, q_before, k_before, d, cache, is_neox)
    else:  # (the reference's reshape cannot infer the heads of no tokens)
        eq, ek = q_before.float(), k_before.float()
    valid = (pos.long() >= 0) & (pos.long() < max_pos)
    stores = []
    for o in (q_op, k_op, v_op, qr_op, kr_op, kb_op, vb_op):
        if o is not None and all(o.store is not s for s in stores):
            stores.append(o.store)
    for s in stores + [pos_store, cache_store] + ([loc_store] if fused else []):
        s.freeze()

    if mode == "wrapper":
        arg = None
        if fused:
            arg = FusedSetKVBufferArg(v_op.user, kb_op.user, vb_op.user, None, None, loc)
        result = _call(desc, sgl_kernel.apply_rope_with_cos_sin_cache_inplace, pos, q_op.user, k_op.user, d, cache,
                       is_neox=is_neox, fused_set_kv_buffer_arg=arg, enable_pdl=pdl)
    else:
        kv = (v_op.v3, kb_op.v3, vb_op.v3, loc) if fused else (None, None, None, None)
        result = _call(desc, _ROPE_OP, q_op.v3, k_op.v3, qr_op.v3, kr_op.v3, cache, pos, not is_neox, bool(pdl), *kv)
    if result is not None:
        raise AssertionError(f"{desc}: returned {type(result).__name__}, expected None")

    # q_rope / k_rope: the rotation for valid tokens, bitwise the pass-through part; tokens
    # with an out-of-range position keep what the output held.
    for name, out, exp, src_before, out_before in (("q", qr_op.v3, eq, q_before, qr_before),
                                                   ("k", kr_op.v3, ek, k_before, kr_before)):
        _close(desc, f"{name}_rope (valid tokens)", out[valid], exp[valid], dtype)
        if rot < d and not _same_bits(out[valid][..., rot:], src_before[valid][..., rot:]):
            raise AssertionError(f"{desc}: {name}_rope: elements past rotary_dim are not the input's bitwise")
        if not _same_bits(out[~valid], out_before[~valid]):
            raise AssertionError(f"{desc}: {name}_rope: a token with an out-of-range position was written")
    # Storage: only q_rope / k_rope written (the value, q / k out of place, padding untouched).
    for s in stores:
        if fused and (s is kb_op.store or s is vb_op.store):
            continue
        written = [o.v3 for o in (qr_op, kr_op) if o.store is s]
        _check_outside(desc, "q/k/v storage", s, written)
    _check_outside(desc, "positions", pos_store, [])
    _check_outside(desc, "cos_sin_cache", cache_store, [])
    if fused:
        _check_outside(desc, "cache_loc", loc_store, [])
        # KV buffers: exactly the addressed rows of valid tokens written, the rotated key
        # (as stored in k_rope) and the value, bitwise; every other row and the padding as before.
        locs = loc.long()
        ok_k = valid & (locs >= 0) & (locs < n_kb)
        ok_v = valid & (locs >= 0) & (locs < n_vb)
        shared = vb_op.store is kb_op.store  # k and v rows of one pool
        exp_k = kb_op.store.before.clone()
        exp_v = exp_k if shared else vb_op.store.before.clone()
        _like(exp_k, kb_op.v3)[locs[ok_k]] = kr_op.v3[ok_k]
        _like(exp_v, vb_op.v3)[locs[ok_v]] = v_op.v3[ok_v]
        _check_expected_store(desc, "KV pool" if shared else "k_buffer", kb_op.store, exp_k)
        if not shared:
            _check_expected_store(desc, "v_buffer", vb_op.store, exp_v)
    return desc


def _rope_fuzzer(fused: bool) -> Fuzzer:
    def fuzz(case: Case) -> str:
        return _rope_fuzz(case, fused)

    fuzz.__name__ = "fuzz_rope_kv" if fused else "fuzz_rope"
    return fuzz


FUZZERS: Dict[str, Fuzzer] = {
    **{f"norm.{op}": _norm_fuzzer(op) for op in NORM_KINDS},
    **{f"act.{op}": _act_fuzzer(op) for op in ACT_REFS},
    "rope.apply_rope": _rope_fuzzer(fused=False),
    "rope.apply_rope_kv": _rope_fuzzer(fused=True),
}
