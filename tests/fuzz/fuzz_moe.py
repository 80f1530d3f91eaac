# SPDX-License-Identifier: Apache-2.0
"""Fuzzers of the MoE family (API.md 2.4) and of the attention-state merges (2.5).

Each case draws one argument combination the bindings accept (csrc/moe/moe_ops.cc,
csrc/attention/attention_ops.cc, csrc/gemm/gemm_ops.cc) and checks the result against the
references of ``tests/moe/ref_*.py``, ``tests/attention/ref_merge_state.py`` and the fp64
reference of ``tests/moe/test_blockwise_grouped_mm.py``, with the tolerances of those tests:

- moe_sum / moe_sum_reduce: T, topk 1..12, hidden sizes with odd ones, fp32 / fp16 / bf16,
  inputs with padded expert rows, token gaps, expert-major order and misaligned starts, outputs
  with a pitch; bit for bit against the in-order fp32 sum, and the fp64 sum under API 1.6.
- topk_softmax / topk_sigmoid: E from 1 to 65536 (the register and the block paths), k up to
  min(E, 128), renormalize, bias, soft cap, int32 / int64 ids, gate rows and outputs with a
  pitch; logits distinct in every row where the dtype can hold E distinct values of a grid
  (else normal values, whose exact ties must go to the lower index); a few NaN / inf gates.
- moe_align_block_size: 1..4096 buckets, block sizes 1..1024, routed, uniform and skewed ids,
  -1 ids, ids outside [-1, E) (dropped; none under SGL_KERNEL_DEBUG), int32 / int64 ids, the
  API's and SGLang's buffer sizes and spare capacity, the cluster cap.
- prepare_moe_input: 1..4096 experts, dropped ids (-1, E, int32 extremes), T = 0, with and
  without blockscale offsets, GEMM sizes n / k up to their limits.
- apply_shuffle_mul_sum: permutations, repeated rows and dropped (-1 / out of range) entries,
  factors None / [m * topk] / [m, topk], misaligned input, output and factors.
- fused_qk_norm_rope: head_dim 64 / 128 / 256, every rotary_dim step, NeoX or interleaved,
  YaRN (factors above and below 1, low == high, high < low), attention factors, large and
  negative positions, qkv rows with a pitch or a misaligned start, the heads-a-warp override.
- merge_state / merge_state_v2: T / H / D, LSE of -inf (empty) and +inf (v2: empty; base 2:
  the formula's NaN), far-apart states, fp16 / bf16 / fp32 LSE through the wrapper, outputs
  given, allocated or in place of v_a.
- fp8_blockwise_scaled_grouped_mm (sm90 only): E 1..40, N / K multiples of 128 up to 1024, M_e
  0..300 (not only multiples of 16), experts in permuted order with gaps, strided a / output /
  scales_a, N-major scales_b, small workspaces; rows no expert covers keep their NaN.

Outputs are poisoned before the call and sit inside guard elements; inputs sit inside guard
storage too. After the call nothing outside what the op may write has changed, bit for bit.
Ops are looked up when a case runs (an old build without some of them still collects).
"""

from __future__ import annotations

import math
from typing import Callable, Dict, Optional, Sequence, Tuple

import torch

from tests.attention.ref_merge_state import merge_state_ref
from tests.fuzz.common import Case, Fuzzer, dense_strides, debug_mode, describe, env
from tests.moe.ref_moe_align import align_reference, api_buffer_sizes, sglang_buffer_sizes
from tests.moe.ref_moe_sum import moe_sum_inorder, moe_sum_ref
from tests.moe.ref_prepare_moe_input import prepare_reference
from tests.moe.ref_qk_norm_rope import qk_norm_rope_ref, yarn_low_high
from tests.moe.ref_shuffle_mul_sum import shuffle_mul_sum_inorder, shuffle_mul_sum_ref
from tests.moe.ref_topk_gating import check_topk
from tests.tolerances import elementwise_tol

DEV = "cuda"
NAN, INF = float("nan"), float("inf")
FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16
I32, I64 = torch.int32, torch.int64
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
GUARD = -7.75  # exact in every float dtype: what guard elements around a float output hold
POISON = -12345  # what integer outputs and their guards hold before a call
_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


# ---------------------------------------------------------------------------------------
# Shared helpers


def _op(name: str):
    """``torch.ops.sgl_kernel.<name>.default``, resolved when a case runs."""
    import sgl_kernel  # noqa: F401  (loads the library that defines the ops)

    return getattr(torch.ops.sgl_kernel, name).default


def _wrapper(name: str) -> Callable:
    import sgl_kernel

    return getattr(sgl_kernel, name)


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")




def _run(desc: str, body: Callable[[], None]) -> str:
    """Runs a case's call and checks; any failure becomes an AssertionError naming the case."""
    try:
        body()
        torch.cuda.synchronize()
    except AssertionError as exc:
        raise AssertionError(f"{desc}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - an op error on an accepted input is a failure too
        raise AssertionError(f"{desc}: {type(exc).__name__}: {exc}") from exc
    return desc


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t`` as integers of its element size (bitwise compares; NaN equals NaN)."""
    return t.contiguous().view(_INT_OF_SIZE[t.element_size()])


def _extent(shape: Sequence[int], strides: Sequence[int], offset: int) -> int:
    """Elements a view of ``shape`` / ``strides`` at ``offset`` reaches into its storage."""
    if any(n == 0 for n in shape):
        return offset
    return offset + 1 + sum((n - 1) * s for n, s in zip(shape, strides))


class _Buf:
    """A view (``shape``, ``strides``, ``offset`` elements in) of a flat buffer of ``guard``
    values that runs ``tail`` elements past the view's end (fp8: ``guard`` is a byte).
    ``freeze`` snapshots the whole buffer, ``check`` compares against the snapshot."""

    def __init__(self, shape: Sequence[int], strides: Sequence[int], offset: int, dtype: torch.dtype, guard,
                 tail: int = 0) -> None:
        n = max(_extent(shape, strides, offset) + tail, 1)
        if dtype.itemsize == 1 and dtype.is_floating_point:
            self.base = torch.full((n,), int(guard), dtype=torch.uint8, device=DEV).view(dtype)
        else:
            self.base = torch.full((n,), guard, dtype=dtype, device=DEV)
        self.view = self.base.as_strided(tuple(shape), tuple(strides), offset)
        self.before: Optional[torch.Tensor] = None

    def freeze(self) -> "_Buf":
        self.before = self.base.clone()
        return self

    def check(self, name: str, written: Optional[torch.Tensor] = None) -> None:
        """Every element outside ``written`` (a view of this buffer; None: everything) is
        bitwise what it was at ``freeze``."""
        changed = _bits(self.base) != _bits(self.before)
        if written is not None:
            mask = torch.zeros(self.base.shape, dtype=torch.bool, device=DEV)
            mask.as_strided(tuple(written.shape), written.stride(), written.storage_offset()).fill_(True)
            changed &= ~mask
        n = int(changed.sum())
        if n:
            first = int(changed.nonzero()[0, 0])
            where = "outside the output " if written is not None else ""
            raise AssertionError(f"{name}: {n} element(s) {where}changed (first at storage element {first})")


def _input(values: torch.Tensor, strides: Sequence[int], offset: int = 0, tail: int = 0, guard=NAN) -> _Buf:
    """``values`` placed at ``strides`` / ``offset`` in a guard-filled buffer, frozen."""
    buf = _Buf(values.shape, strides, offset, values.dtype, guard, tail)
    buf.view.copy_(values)
    return buf.freeze()


def _output(shape: Sequence[int], strides: Sequence[int], offset: int, dtype: torch.dtype, poison, guard,
            tail: int = 0) -> _Buf:
    """An output view filled with ``poison`` inside ``guard`` elements, frozen."""
    buf = _Buf(shape, strides, offset, dtype, guard, tail)
    buf.view.fill_(poison)
    return buf.freeze()


def _randint(case: Case, lo: int, hi: int, shape: Sequence[int], dtype: torch.dtype = I64) -> torch.Tensor:
    """Integers in [lo, hi] (both included) from the case's generator."""
    x = torch.randint(lo, hi + 1, tuple(shape), device=DEV, generator=case.gen, dtype=I64)
    return x.to(dtype)


def _spread(case: Case, shape: Sequence[int], dtype: torch.dtype) -> torch.Tensor:
    """Normal values times 2^-6 .. 2^6 (the order of an fp32 sum changes its rounding), finite in
    every dtype."""
    x = case.randn(shape, FP32)
    e = _randint(case, -6, 6, shape, FP32)
    return (x * torch.exp2(e)).to(dtype)


def _sprinkle(case: Case, t: torch.Tensor, values: Sequence, p: float) -> torch.Tensor:
    """``t`` with each element replaced, with probability ``p``, by one of ``values``."""
    if p <= 0 or t.numel() == 0 or not values:
        return t
    vals = torch.tensor(list(values), dtype=t.dtype, device=DEV)
    pick = _randint(case, 0, len(values) - 1, t.shape)
    hit = case.rand(t.shape) < p
    return torch.where(hit, vals[pick], t)


def _same_bits(got: torch.Tensor, want: torch.Tensor, what: str) -> None:
    """Shapes and dtypes equal, NaN exactly where ``want`` is NaN, every other element's bits
    equal (NaN payloads are not part of any contract)."""
    assert got.shape == want.shape and got.dtype == want.dtype, (
        f"{what}: {tuple(got.shape)} {got.dtype}, expected {tuple(want.shape)} {want.dtype}")
    if not got.dtype.is_floating_point:
        if not torch.equal(got, want):
            bad = (got != want).flatten().nonzero().flatten()[:5]
            raise AssertionError(f"{what}: {int((got != want).sum())} element(s) differ; first at flat "
                                 f"{bad.tolist()}: got {got.flatten()[bad].tolist()}, "
                                 f"expected {want.flatten()[bad].tolist()}")
        return
    nan = torch.isnan(want)
    if not torch.equal(torch.isnan(got), nan):
        raise AssertionError(f"{what}: {int((torch.isnan(got) != nan).sum())} NaN position(s) differ")
    bad = (_bits(got) != _bits(want)) & ~nan
    if bool(bad.any()):
        where = bad.nonzero()[:3].tolist()
        raise AssertionError(f"{what}: {int(bad.sum())} of {got.numel()} element(s) differ bitwise; first at "
                             f"{where}: got {got[bad][:3].tolist()}, expected {want[bad][:3].tolist()}")


def _close(got: torch.Tensor, want: torch.Tensor, what: str, **tol) -> None:
    try:
        torch.testing.assert_close(got, want, **tol)
    except AssertionError as exc:
        raise AssertionError(f"{what} differs from the reference\n{exc}") from None


def _poison_next_alloc(nbytes: int) -> None:
    """Frees a block of ``nbytes`` 0xFF bytes (NaN in fp16 / bf16 / fp32) just before an op or
    wrapper allocates an output of that size: the caching allocator hands it out again, so an
    unwritten element reads NaN (best effort)."""
    if nbytes > 0:
        torch.empty(nbytes, dtype=torch.uint8, device=DEV).fill_(0xFF)


# ---------------------------------------------------------------------------------------
# moe_sum / moe_sum_reduce


_SUM_ROWS = (1, 2, 3, 7, 16, 17, 64, 127, 128, 129, 256, 257, 1024, 1025, 4096, 16384)
_SUM_TOPK = (1, 2, 3, 4, 6, 8, 9, 10, 12)
_SUM_ODD_HIDDEN = (1, 2, 7, 9, 127, 129, 130, 1023, 2050, 4100, 7167)


def _sum_fuzz(case: Case, op: str) -> str:
    dtype = case.choice((FP32, FP16, BF16))
    k = case.choice(_SUM_TOPK) if case.coin(0.6) else case.rng.randint(1, 12)
    h = case.hidden(8192) if case.coin(0.7) else case.near(_SUM_ODD_HIDDEN, 1, 8192)
    pad = 0 if case.coin(0.5) else case.choice((1, 2, 3, 8, 16))  # between expert rows
    gap = 0 if case.coin(0.6) else case.choice((1, 8, h))  # per token (per expert when expert-major)
    expert_major = case.coin(0.2)
    t = 0 if case.coin(0.02) else case.rows(16384, points=_SUM_ROWS)
    t = 0 if t == 0 else case.fit_rows(t, k * (h + pad) + gap)
    in_off = 0 if case.coin(0.6) else case.rng.randint(1, 8)
    row = h + pad
    strides = (row, t * row + gap, 1) if expert_major else (k * row + gap, row, 1)
    out_pad = 0 if case.coin(0.5) else case.choice((1, 3, 8, 16))
    out_off = 0 if case.coin(0.6) else case.rng.randint(1, 8)
    specials = case.coin(0.1)
    scale: Optional[float] = None
    scale_kind = ""
    if op == "moe_sum_reduce":
        r = case.rng.random()
        if r < 0.1:
            scale, scale_kind = 0.0, "default"
        else:
            scale = case.choice((0.0, 1.0, 2.5, 0.125, -1.5)) if r < 0.6 else case.rng.uniform(-4.0, 4.0)
            scale_kind = f"{scale:g}"
    mode = "wrapper" if case.coin(0.7) else "op"

    vals = _spread(case, (t, k, h), dtype)
    if specials:
        vals = _sprinkle(case, vals, (INF, -INF, NAN), 0.002)
    x_buf = _input(vals, strides, in_off, tail=case.rng.randint(0, 8))
    x = x_buf.view
    o_buf = _output((t, h), (h + out_pad, 1), out_off, dtype, NAN, GUARD, tail=case.rng.randint(0, 8))
    out = o_buf.view
    desc = (f"{op} {_dt(dtype)} T={t} topk={k} H={h} input={describe(x)}"
            f"{' expert-major' if expert_major else ''} out={describe(out)}"
            f"{f' scale={scale_kind}' if scale_kind else ''} specials={specials} call={mode}")

    def body() -> None:
        if op == "moe_sum":
            fn = _wrapper("moe_sum") if mode == "wrapper" else _op("moe_sum")
            result = fn(x, out)
        elif mode == "op":
            result = _op("moe_sum_reduce")(x, out, float(scale))
        elif scale_kind == "default":
            result = _wrapper("moe_sum_reduce")(x, out)
        else:
            result = _wrapper("moe_sum_reduce")(x, out, scale)
        assert result is None, f"returned {type(result).__name__}, expected None"
        torch.cuda.synchronize()
        _same_bits(out, moe_sum_inorder(x, scale), "output vs the in-order fp32 sum")
        if not specials:
            _close(out.double(), moe_sum_ref(x, scale), "output (fp64 sum)", **elementwise_tol(dtype))
        o_buf.check("output storage", written=out)
        x_buf.check("input storage")

    return _run(desc, body)


def fuzz_moe_sum(case: Case) -> str:
    return _sum_fuzz(case, "moe_sum")


def fuzz_moe_sum_reduce(case: Case) -> str:
    return _sum_fuzz(case, "moe_sum_reduce")


# ---------------------------------------------------------------------------------------
# topk_softmax / topk_sigmoid


_TOPK_E = (1, 2, 3, 5, 8, 10, 16, 17, 32, 60, 64, 100, 128, 129, 256, 257, 384, 512, 1000, 1024, 1025, 1536,
           2048, 4096, 5000)
_TOPK_ROWS = (1, 2, 3, 7, 16, 33, 64, 128, 129, 300, 1024, 4097)
# Significand bits: a grid of integers times a power of two is exact up to 2^bits.
_SIG_BITS = {FP32: 24, FP16: 11, BF16: 8}
W_GUARD, ID_GUARD = 7.25, 12345


def _gating(case: Case, t: int, e: int, dtype: torch.dtype) -> Tuple[torch.Tensor, str]:
    """``[t, e]`` logits: each row a random permutation of ``e`` distinct grid values
    ``(j - e / 2) * step`` (exact in ``dtype``, about +-spread) where the dtype holds that many,
    else normal values (ties possible: they must go to the lower index)."""
    half = (e + 1) // 2
    spread = case.choice((1.0, 4.0, 12.0))
    if half <= 2 ** _SIG_BITS[dtype] and case.coin(0.85):
        step = 2.0 ** math.floor(math.log2(spread / max(half, 1)))
        j = case.rand((t, e)).argsort(dim=1)
        return ((j - half).float() * step).to(dtype), f"distinct(step=2^{int(math.log2(step))})"
    return case.randn((t, e), dtype, scale=spread / 2), f"normal(sd={spread / 2:g})"


def _topk_fuzz(case: Case, op: str) -> str:
    dtype = case.choice((FP32, FP16, BF16))
    e = case.near(_TOPK_E, 1, 65536) if case.coin(0.85) else case.log_int(1, 65536)
    r = case.rng.random()
    if r < 0.5:
        k = case.choice((1, 2, 4, 6, 8))
    elif r < 0.75:
        k = case.near((9, 12, 16, 17, 32), 1, 128)
    else:
        k = case.log_int(1, 128)
    k = min(k, e)
    g_pad = 0 if case.coin(0.6) else case.choice((1, 2, 8))
    g_off = 0 if case.coin(0.7) else case.choice((1, 2, 3))
    t = case.fit_rows(case.rows(8192, points=_TOPK_ROWS), 4 * (e + g_pad))
    renormalize = case.coin()
    with_bias = case.coin(0.5)
    softcap = case.choice((1.0, 30.0)) if op == "topk_softmax" and case.coin(0.2) else 0.0
    ids_dtype = I64 if case.coin(0.2) else I32
    o_pad = 0 if case.coin(0.6) else case.choice((1, 3, 8))
    specials = case.coin(0.08)
    mode = "wrapper" if case.coin(0.7) else "op"

    vals, kind = _gating(case, t, e, dtype)
    if specials:
        vals = _sprinkle(case, vals, (NAN, INF, -INF), 0.02)
    g_buf = _input(vals, (e + g_pad, 1), g_off, tail=case.rng.randint(0, 8))
    gating = g_buf.view
    bias = case.randn((e,), FP32, scale=0.3) if with_bias else None
    bias_copy = bias.clone() if bias is not None else None
    w_buf = _output((t, k), (k + o_pad, 1), k + o_pad, FP32, NAN, W_GUARD, tail=k + o_pad)
    i_buf = _output((t, k), (k + o_pad, 1), k + o_pad, ids_dtype, -1, ID_GUARD, tail=k + o_pad)
    w, ids = w_buf.view, i_buf.view
    desc = (f"{op} {_dt(dtype)} T={t} E={e} k={k} gating={describe(gating)} ({kind}) renormalize={renormalize} "
            f"bias={with_bias}{f' softcap={softcap:g}' if softcap else ''} ids={_dt(ids_dtype)} "
            f"weights={describe(w)} specials={specials} call={mode}")

    def body() -> None:
        if mode == "wrapper" and op == "topk_softmax":
            result = _wrapper(op)(w, ids, gating, renormalize=renormalize, moe_softcapping=softcap,
                                  correction_bias=bias)
        elif mode == "wrapper":
            result = _wrapper(op)(w, ids, gating, renormalize=renormalize, correction_bias=bias)
        elif op == "topk_softmax":
            result = _op(op)(w, ids, gating, renormalize, softcap, bias)
        else:
            result = _op(op)(w, ids, gating, renormalize, bias)
        assert result is None, f"returned {type(result).__name__}, expected None"
        torch.cuda.synchronize()
        msg = check_topk(w, ids, gating, op, renormalize, softcap, bias)
        assert msg is None, msg
        w_buf.check("topk_weights storage", written=w)
        i_buf.check("topk_ids storage", written=ids)
        g_buf.check("gating_output storage")
        if bias is not None:
            _same_bits(bias, bias_copy, "correction_bias (an input) changed")

    return _run(desc, body)


def fuzz_topk_softmax(case: Case) -> str:
    return _topk_fuzz(case, "topk_softmax")


def fuzz_topk_sigmoid(case: Case) -> str:
    return _topk_fuzz(case, "topk_sigmoid")


# ---------------------------------------------------------------------------------------
# Expert ids shared by moe_align_block_size and prepare_moe_input


def _routed_ids(case: Case, t: int, k: int, e: int) -> torch.Tensor:
    """``[t, k]`` int64: k distinct experts a token (the top-k of random scores)."""
    if t == 0:
        return torch.empty((0, k), dtype=I64, device=DEV)
    return case.rand((t, e)).topk(k, dim=1).indices


def _draw_ids(case: Case, e: int, lo: int, max_entries: int, points: Sequence[int]) -> Tuple[torch.Tensor, str]:
    """``[T, topk]`` int64 expert ids in [lo, e) of one kind: routed (distinct a token), uniform
    (repeats) or skewed (most entries on one expert)."""
    kind = case.choice(("routed", "uniform", "uniform", "skewed"))
    if kind == "routed":
        k = case.rng.randint(1, min(e, 10))
        t = case.fit_rows(case.rows(max_entries // k, points=tuple(max(1, p // k) for p in points)), 4 * e)
        return _routed_ids(case, t, k, e), kind
    n = case.near(points, 1, max_entries) if case.coin(0.6) else case.log_int(1, max_entries)
    k = case.choice((1, 2, 4, 6, 8))
    t = max(1, n // k)
    ids = _randint(case, lo, e - 1, (t, k))
    if kind == "skewed":
        hot = case.rng.randint(lo, e - 1)
        ids = torch.where(case.rand((t, k)) < case.choice((0.5, 0.9, 1.0)), torch.full_like(ids, hot), ids)
        kind = f"skewed(hot={hot})"
    return ids, kind


# ---------------------------------------------------------------------------------------
# moe_align_block_size


_ALIGN_E = (1, 2, 7, 8, 16, 60, 64, 128, 255, 256, 384, 512, 1023, 2047, 4095)
_ALIGN_BS = (1, 2, 3, 7, 16, 32, 64, 100, 128, 256)
# Entry counts at the launch paths' edges (one entry a thread, one block, clusters, streaming).
_ALIGN_N = (1, 31, 32, 33, 1023, 1024, 1025, 4095, 4096, 4097, 8193, 16384, 16385, 65537, 262144, 262145)
_ALIGN_MAX_N = 270000


def fuzz_moe_align_block_size(case: Case) -> str:
    e = case.near(_ALIGN_E, 1, 4095) if case.coin(0.7) else case.log_int(1, 4095)
    nb = e + 1
    bs = case.choice(_ALIGN_BS) if case.coin(0.8) else case.log_int(1, 1024)
    if case.coin(0.02):
        ids, kind = torch.empty((0, case.choice((1, 8))), dtype=I64, device=DEV), "empty"
    else:
        ids, kind = _draw_ids(case, e, -1, min(_ALIGN_MAX_N, case.max_elems // 8), _ALIGN_N)
    drop = case.choice((0.0, 0.0, 0.05, 0.3, 1.0))
    if drop and ids.numel():
        ids = torch.where(case.rand(ids.shape) < drop, torch.full_like(ids, -1), ids)
    ids_dtype = I64 if case.coin(0.25) else I32
    bad = case.coin(0.3) and ids.numel() > 0 and not debug_mode()
    if bad:
        values = [e, e + 7, -2, INT32_MIN, INT32_MAX]
        if ids_dtype == I64:
            values += [2**32 - 1, 2**32 + 5, -(2**32) + 3, 2**40, 2**63 - 1, -(2**63)]
        ids = _sprinkle(case, ids, values, case.choice((0.001, 0.05, 0.3)))
    ids = ids.to(ids_dtype).contiguous()
    n = ids.numel()
    pad = case.coin()
    sorted_len, eids_len = api_buffer_sizes(n, nb, bs)
    sizing = "api"
    if n < nb and case.coin(0.3):
        sorted_len, eids_len = sglang_buffer_sizes(n, nb, bs)
        sizing = "sglang"
    elif case.coin(0.2):
        sorted_len += case.rng.randint(1, 2 * bs + 5)
        eids_len += case.rng.randint(0, 9)
        sizing = "spare"
    cumsum_len = nb + 1 + (case.rng.randint(1, 5) if case.coin(0.2) else 0)
    cluster = case.choice(("1", "2")) if case.coin(0.2) else None
    mode = "wrapper" if case.coin(0.6) else "op"

    def out(length: int) -> _Buf:
        offset = case.rng.randint(0, 3) if case.coin(0.4) else 0
        return _output((length,), (1,), 16 + offset, I32, POISON, POISON, tail=16)

    ids_buf = _input(ids, dense_strides(ids.shape), 0, guard=0)
    s_buf, e_buf, n_buf, c_buf = out(sorted_len), out(eids_len), out(1), out(cumsum_len)
    desc = (f"moe_align_block_size ids={_dt(ids_dtype)}{list(ids.shape)} ({kind}, drop={drop}, bad={bad}) "
            f"num_experts={nb} block_size={bs} pad={pad} sorted={sorted_len} experts_ids={eids_len} ({sizing}) "
            f"cumsum={cumsum_len}{f' cluster={cluster}' if cluster else ''} call={mode}")

    def body() -> None:
        fn = _wrapper("moe_align_block_size") if mode == "wrapper" else _op("moe_align_block_size")
        with env("SGL_KERNEL_MOE_ALIGN_CLUSTER", cluster):
            result = fn(ids_buf.view, nb, bs, s_buf.view, e_buf.view, n_buf.view, c_buf.view, pad)
            torch.cuda.synchronize()
        assert result is None, f"returned {type(result).__name__}, expected None"
        ref = align_reference(ids_buf.view, nb, bs)
        total = ref.total
        got_total = int(n_buf.view[0])
        assert got_total == total, f"num_tokens_post_pad {got_total}, expected {total}"
        # cumsum_buffer holds the padded offsets (moe.h's contract, asserted by test_moe_align)
        _same_bits(c_buf.view[: nb + 1].long(), ref.offsets, "cumsum_buffer[: num_experts + 1]")
        _same_bits(e_buf.view[: total // bs], ref.block_experts, "experts_ids of the used blocks")
        used = s_buf.view[:total]
        real = ~ref.pad_mask
        bucket = torch.repeat_interleave(torch.arange(nb, device=DEV), ref.offsets[1:] - ref.offsets[:-1])
        got_keys = torch.sort(bucket[real] * (n + 1) + used[real].long()).values
        ref_keys = torch.sort(bucket[real] * (n + 1) + ref.sorted_ids[real].long()).values
        if not torch.equal(got_keys, ref_keys):
            i = int((got_keys != ref_keys).nonzero()[0])
            raise AssertionError(f"bucket contents differ: (bucket, index) {divmod(int(got_keys[i]), n + 1)} "
                                 f"vs {divmod(int(ref_keys[i]), n + 1)}")
        _same_bits(used[real], ref.sorted_ids[real], "sorted_token_ids (ascending inside a bucket)")
        fill = n if pad else POISON
        assert bool((used[ref.pad_mask] == fill).all()), f"block padding is not {'numel' if pad else 'untouched'}"
        assert bool((s_buf.view[total:] == fill).all()), f"the tail is not {'numel' if pad else 'untouched'}"
        for name, buf in (("sorted_token_ids", s_buf), ("experts_ids", e_buf), ("num_tokens_post_pad", n_buf),
                          ("cumsum_buffer", c_buf)):
            buf.check(f"{name} storage", written=buf.view)
        ids_buf.check("topk_ids")

    return _run(desc, body)


# ---------------------------------------------------------------------------------------
# prepare_moe_input


_PREP_E = (1, 2, 3, 8, 16, 60, 64, 128, 256, 257, 384, 512, 1024, 2048, 4096)
# Entry counts around the single-launch limit (4096) and the 2 E switch.
_PREP_N = (1, 7, 64, 255, 256, 257, 1023, 4095, 4096, 4097, 8192, 16384, 65537)
_PREP_NK = ((7168, 2048), (4096, 1408), (2048, 768), (0, 0), (2**30 - 1, 2**31 - 1))


def fuzz_prepare_moe_input(case: Case) -> str:
    e = case.near(_PREP_E, 1, 4096) if case.coin(0.7) else case.log_int(1, 4096)
    if case.coin(0.03):
        ids, kind = torch.empty((0, case.choice((1, 8))), dtype=I64, device=DEV), "empty"
    else:
        ids, kind = _draw_ids(case, e, 0, min(70000, case.max_elems // 8), _PREP_N)
    drop = case.choice((0.0, 0.0, 0.1, 0.5, 1.0))
    if debug_mode():
        drop = 0.0  # -1 is outside [0, E) too: SGL_KERNEL_DEBUG=1 would raise
    if drop and ids.numel():
        ids = torch.where(case.rand(ids.shape) < drop, torch.full_like(ids, -1), ids)
    bad = case.coin(0.3) and ids.numel() > 0 and not debug_mode()
    if bad:
        ids = _sprinkle(case, ids, (e, e + 5, -2, INT32_MIN, INT32_MAX), case.choice((0.001, 0.05, 0.3)))
    ids = ids.to(I32).contiguous()
    numel = ids.numel()
    if case.coin(0.7):
        n, k = case.choice(_PREP_NK)
    else:
        n, k = case.rng.randint(0, 2**30 - 1), case.rng.randint(0, 2**31 - 1)
    blockscale = case.coin(0.6)
    mode = "wrapper" if case.coin(0.7) else "op"

    def out(shape: Sequence[int]) -> _Buf:
        offset = case.rng.randint(0, 3) if case.coin(0.4) else 0
        return _output(shape, dense_strides(shape), 16 + offset, I32, POISON, POISON, tail=16)

    ids_buf = _input(ids, dense_strides(ids.shape), 0, guard=0)
    outs = {
        "expert_offsets": out((e + 1,)),
        "problem_sizes1": out((e, 3)),
        "problem_sizes2": out((e, 3)),
        "input_permutation": out((numel,)),
        "output_permutation": out((numel,)),
    }
    if blockscale:
        outs["blockscale_offsets"] = out((e + 1,))
    v = {name: buf.view for name, buf in outs.items()}
    desc = (f"prepare_moe_input ids={list(ids.shape)} ({kind}, drop={drop}, bad={bad}) num_experts={e} n={n} k={k} "
            f"blockscale={blockscale} call={mode}")

    def body() -> None:
        bso = v.get("blockscale_offsets")
        if mode == "wrapper":
            result = _wrapper("prepare_moe_input")(ids_buf.view, v["expert_offsets"], v["problem_sizes1"],
                                                   v["problem_sizes2"], v["input_permutation"],
                                                   v["output_permutation"], e, n, k, blockscale_offsets=bso)
        else:
            result = _op("prepare_moe_input")(ids_buf.view, v["expert_offsets"], bso, v["problem_sizes1"],
                                              v["problem_sizes2"], v["input_permutation"], v["output_permutation"],
                                              e, n, k)
        assert result is None, f"returned {type(result).__name__}, expected None"
        torch.cuda.synchronize()
        ref = prepare_reference(ids_buf.view, e, n, k)
        for name in ("expert_offsets", "blockscale_offsets", "problem_sizes1", "problem_sizes2",
                     "output_permutation", "input_permutation"):
            if name in v:
                _same_bits(v[name], getattr(ref, name), name)
        for name, buf in outs.items():
            buf.check(f"{name} storage", written=buf.view)
        ids_buf.check("topk_ids")

    return _run(desc, body)


# ---------------------------------------------------------------------------------------
# apply_shuffle_mul_sum


_SHUF_TOPK = (1, 2, 3, 4, 6, 8, 9, 10, 12, 17)
_SHUF_ROWS = (1, 2, 3, 5, 9, 16, 33, 128, 129, 300, 1024, 2048)
_SHUF_ODD_HIDDEN = (1, 7, 100, 130, 136, 264, 4100)


def _permutation(case: Case, kind: str, entries: int, rows: int) -> torch.Tensor:
    """int32 ``[entries]``: a permutation of range(rows) (rows == entries), rows drawn with
    repeats, or a permutation with ~a quarter of its entries dropped (-1 mostly, also rows,
    rows + 7 and the int32 extremes)."""
    if kind == "perm":
        return case.randperm(entries, entries).to(I32)
    if kind == "repeats":
        return _randint(case, 0, rows - 1, (entries,), I32)
    p = torch.randperm(entries, device=DEV, generator=case.gen) % max(rows, 1)
    bad = _sprinkle(case, torch.full((entries,), -1, dtype=I64, device=DEV), (rows, rows + 7, INT32_MAX, INT32_MIN),
                    0.3)
    return torch.where(case.rand((entries,)) < case.choice((0.25, 0.6, 1.0)), bad, p).to(I32)


def fuzz_apply_shuffle_mul_sum(case: Case) -> str:
    dtype = case.choice((FP16, BF16))
    topk = case.choice(_SHUF_TOPK) if case.coin(0.7) else case.rng.randint(1, 16)
    h = case.hidden(8192) if case.coin(0.7) else case.near(_SHUF_ODD_HIDDEN, 1, 8192)
    m = case.fit_rows(case.rows(4096, points=_SHUF_ROWS), 2 * topk * h)
    perm_kind = case.choice(("perm", "perm", "repeats", "dropped"))
    rows = m * topk
    if perm_kind != "perm" and case.coin(0.4):
        rows = case.rng.randint(1, 2 * m * topk)
    factor_kind = case.choice(("none", "flat", "2d"))
    in_off = 0 if case.coin(0.6) else case.choice((1, 2, 4, 8))
    out_off = 0 if case.coin(0.6) else case.choice((1, 2, 4, 8))
    f_off = 0 if case.coin(0.7) else case.rng.randint(1, 3)
    mode = "wrapper" if case.coin(0.7) else "op"

    x_buf = _input(_spread(case, (rows, h), dtype), (h, 1), in_off, tail=case.rng.randint(0, 8))
    x = x_buf.view
    p_buf = _input(_permutation(case, perm_kind, m * topk, rows), (1,), 0, guard=0)
    perm = p_buf.view
    f_buf = None
    factors = None
    if factor_kind != "none":
        w = torch.softmax(case.randn((m, topk), FP32, scale=2.0), dim=-1).to(dtype)
        if factor_kind == "flat":
            w = w.flatten()
        f_buf = _input(w, dense_strides(w.shape), f_off, tail=4)
        factors = f_buf.view
    o_buf = _output((m, h), (h, 1), out_off, dtype, NAN, GUARD, tail=case.rng.randint(0, 8))
    out = o_buf.view
    desc = (f"apply_shuffle_mul_sum {_dt(dtype)} m={m} topk={topk} K={h} input={describe(x)} permutation={perm_kind} "
            f"factors={factor_kind}{':' + describe(factors) if factors is not None else ''} out={describe(out)} "
            f"call={mode}")

    def body() -> None:
        fn = _wrapper("apply_shuffle_mul_sum") if mode == "wrapper" else _op("apply_shuffle_mul_sum")
        result = fn(x, out, perm, factors)
        assert result is None, f"returned {type(result).__name__}, expected None"
        torch.cuda.synchronize()
        _same_bits(out, shuffle_mul_sum_inorder(x, perm, factors, m), "output vs the in-order fp32 sum")
        _close(out.double(), shuffle_mul_sum_ref(x, perm, factors, m), "output (fp64)", **elementwise_tol(dtype))
        o_buf.check("output storage", written=out)
        x_buf.check("input storage")
        p_buf.check("permutation")
        if f_buf is not None:
            f_buf.check("factors storage")

    return _run(desc, body)


# ---------------------------------------------------------------------------------------
# fused_qk_norm_rope


_QKN_ROWS = (1, 2, 5, 16, 33, 64, 257, 409, 410, 512, 1024, 2048)
_QKN_BIG_POS = (100000, 99999, (1 << 24) + 1, 1 << 30, INT32_MAX, -1, -(1 << 20), 0)


def _yarn(case: Case, r: int, base: float) -> Dict[str, float]:
    """factor / low / high / attention_factor: plain RoPE (low / high then ignored) or YaRN with
    an engine's correction range, low == high, high < low, or |high - low| <= 1e-6."""
    if case.coin(0.45):
        return dict(factor=1.0, low=case.choice((0.0, 3.0, 7.0)), high=case.choice((0.0, 9.0, 7.0)),
                    attention_factor=case.choice((1.0, 1.0, 0.5, -1.5)))
    factor = case.choice((2.0, 4.0, 8.0, 40.0, 0.5))
    kind = case.rng.random()
    if kind < 0.5:
        low, high = yarn_low_high(r, base, case.choice((4096, 32768)))
    elif kind < 0.7:
        low = high = float(case.rng.randint(0, r // 2))
    elif kind < 0.85:
        low, high = float(case.rng.randint(0, r // 2)), float(case.rng.randint(0, r // 2))
    else:
        low = case.rng.uniform(0.0, r / 2)
        high = low + 5e-7
    af = case.choice((1.0, 1.0 + 0.1 * math.log(factor), 0.75, 1.25))
    return dict(factor=factor, low=low, high=high, attention_factor=af)


def fuzz_fused_qk_norm_rope(case: Case) -> str:
    d = case.choice((64, 128, 256))
    step = 2 * d // 32
    r_kind = case.rng.random()
    if r_kind < 0.3:
        rot = None
    elif r_kind < 0.5:
        rot = case.choice((d, d // 2, step, d - step))
    else:
        rot = step * case.rng.randint(1, 16)
    r = d if rot is None else rot
    hq = 0 if case.coin(0.05) else case.choice((1, 2, 3, 4, 8, 16, 32, 40, 64))
    hk = case.choice((0, 1, 2, 4, 5, 8)) if case.coin(0.9) else case.rng.randint(0, 16)
    hv = case.choice((0, 1, 2, 4, 7, 8))
    if hq + hk == 0:
        hk = 1
    width = (hq + hk + hv) * d
    pitch_extra = 0 if case.coin(0.6) else case.choice((3, 8, 16, 24))
    offset = 0 if case.coin(0.6) else case.choice((1, 2, 4, 8))
    t = case.fit_rows(case.rows(4096, points=_QKN_ROWS), width + pitch_extra)
    is_neox = case.coin()
    base = case.choice((10000.0, 1e6, 500000.0, 2.5)) if case.coin(0.8) else case.rng.uniform(100.0, 1e6)
    eps = case.choice((1e-6, 1e-5, 1e-2))
    yarn = _yarn(case, r, base)
    max_pos = case.choice((4096, 32768, 1 << 17))
    big_pos = case.coin(0.1)
    w_off = (case.choice((0, 1)), case.choice((0, 1))) if case.coin(0.15) else (0, 0)
    heads_env = case.choice(("1", "2", "4", "8")) if case.coin(0.2) else None
    mode = "wrapper" if case.coin(0.7) else "op"

    pitch = width + pitch_extra
    q_buf = _Buf((t, width), (pitch, 1), offset, BF16, NAN, tail=case.rng.randint(0, 16))
    qkv = q_buf.view
    scale = torch.exp2(_randint(case, -6, 6, (t, hq + hk + hv, 1), FP32))
    qkv.copy_((case.randn((t, hq + hk + hv, d), FP32) * scale).reshape(t, width).to(BF16))
    q_buf.freeze()
    qkv_before = qkv.clone()
    w_bufs = [_input((case.randn((d,), FP32, scale=0.5) + centre).to(BF16), (1,), off, tail=2)
              for centre, off in ((1.0, w_off[0]), (-0.25, w_off[1]))]
    wq, wk = w_bufs[0].view, w_bufs[1].view
    pos = _randint(case, 0, max_pos - 1, (t,), I32)
    if big_pos and t:
        pos = _sprinkle(case, pos, _QKN_BIG_POS, 0.25)
    p_buf = _input(pos, (1,), 0, guard=0)
    pos = p_buf.view
    desc = (f"fused_qk_norm_rope T={t} hq={hq} hk={hk} hv={hv} head_dim={d} rotary_dim={rot} "
            f"{'neox' if is_neox else 'interleaved'} qkv={describe(qkv)} base={base:g} eps={eps:g} "
            f"factor={yarn['factor']:g} low={yarn['low']:g} high={yarn['high']:g} "
            f"attention_factor={yarn['attention_factor']:g} max_pos={max_pos} big_pos={big_pos} "
            f"weights+{w_off}{f' heads_per_warp={heads_env}' if heads_env else ''} call={mode}")

    def body() -> None:
        args = (qkv, hq, hk, hv, d, eps, wq, wk, base, is_neox, pos, yarn["factor"], yarn["low"], yarn["high"],
                yarn["attention_factor"])
        with env("SGL_KERNEL_QK_NORM_ROPE_HEADS", heads_env):
            if mode == "op":
                result = _op("fused_qk_norm_rope")(*args, *(() if rot is None else (rot,)))
            elif rot is None:
                result = _wrapper("fused_qk_norm_rope")(*args)
            else:
                result = _wrapper("fused_qk_norm_rope")(*args, rotary_dim=rot)
            torch.cuda.synchronize()
        assert result is None, f"returned {type(result).__name__}, expected None"
        h = hq + hk
        got = qkv[:, : h * d].reshape(t, h, d).double()
        ref_args = (qkv_before, hq, hk, d, eps, wq, wk, base, is_neox, pos, yarn["factor"], yarn["low"],
                    yarn["high"], yarn["attention_factor"], rot)
        ref = qk_norm_rope_ref(*ref_args)
        assert bool(torch.isfinite(got).all()), f"{int((~torch.isfinite(got)).sum())} non-finite q/k results"
        _close(got, ref, "q/k heads (kernel's angle)", **elementwise_tol(BF16))
        # test_qk_norm_rope's bound: one rounding of the fp64 value (half a bf16 ulp) plus fp32
        # noise relative to the head's largest value (rotations cancel).
        err = (got - ref).abs()
        bound = (2.0**-8 + 2.0**-14) * ref.abs() + 2.0**-16 * ref.abs().amax(-1, keepdim=True)
        bad = err > bound
        if bool(bad.any()):
            i = tuple(bad.nonzero()[0].tolist())
            raise AssertionError(f"{int(bad.sum())} q/k element(s) beyond one bf16 rounding; first at {list(i)}: "
                                 f"got {float(got[i])}, reference {float(ref[i])}")
        if t == 0 or int(pos.long().abs().max()) < 4096:
            _close(got, qk_norm_rope_ref(*ref_args, exact=True), "q/k heads (fp64 formula)", **elementwise_tol(BF16))
        q_buf.check("qkv storage (v heads, pitch, guards)", written=qkv[:, : h * d])
        for name, buf in (("q_weight", w_bufs[0]), ("k_weight", w_bufs[1]), ("position_ids", p_buf)):
            buf.check(name)

    return _run(desc, body)


# ---------------------------------------------------------------------------------------
# merge_state / merge_state_v2


_MERGE_ROWS = (1, 2, 7, 16, 128, 129, 1024, 4099)
_MERGE_D = (8, 16, 64, 72, 128, 136, 256)


def _lse_pair(case: Case, t: int, h: int) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(s_a, s_b)`` fp32 ``[t, h]``: a level (|s| up to ~40) plus a difference that is mostly
    a few units, 0 in ~5 % of the entries and +-300 (a weight underflows) in ~5 %."""
    level = case.randn((t, h), FP32, scale=12.0)
    diff = case.randn((t, h), FP32, scale=4.0)
    pick = case.rand((t, h))
    diff = torch.where(pick < 0.05, torch.zeros_like(diff), diff)
    diff = torch.where(pick > 0.95, torch.sign(diff) * 300.0, diff)
    return level + diff / 2, level - diff / 2


def _merge_fuzz(case: Case, op: str) -> str:
    natural = op == "merge_state_v2"
    dtype = case.choice((FP16, BF16, FP32) if natural else (FP16, BF16))
    d = case.choice(_MERGE_D) if case.coin(0.6) else 8 * case.rng.randint(1, 32)
    h = case.choice((1, 2, 4, 8, 16, 32, 64)) if case.coin(0.7) else case.rng.randint(1, 64)
    t = case.fit_rows(case.rows(8192, points=_MERGE_ROWS), 2 * h * d)
    special = case.choice(("none", "-inf", "+inf", "both", "nan")) if case.coin(0.6) else "none"
    far = case.coin(0.1)
    s_dtype = case.choice((FP32, FP32, FP16, BF16))
    mode = case.choice(("given", "alloc", "op", "inplace"))
    if s_dtype != FP32 and mode == "op":
        mode = "given"  # the op takes fp32 LSE only; the wrapper converts
    v_off = 0 if case.coin(0.75) else case.choice((1, 8 // dtype.itemsize))

    s_a, s_b = _lse_pair(case, t, h)
    if far:
        s_b = s_a + torch.where(case.rand((t, h)) < 0.5, -1000.0, 1000.0)
    values = {"none": (), "-inf": (-INF,), "+inf": (INF,), "both": (-INF, INF), "nan": (NAN, -INF)}[special]
    s_a = _sprinkle(case, s_a, values, 0.3)
    s_b = _sprinkle(case, s_b, values, 0.3)
    s_a, s_b = s_a.to(s_dtype), s_b.to(s_dtype)
    va_buf = _input(case.randn((t, h, d), dtype), dense_strides((t, h, d)), v_off, tail=8)
    vb_buf = _input(case.randn((t, h, d), dtype), dense_strides((t, h, d)), v_off, tail=8)
    sa_buf = _input(s_a, dense_strides((t, h)), 0, tail=4)
    sb_buf = _input(s_b, dense_strides((t, h)), 0, tail=4)
    v_a, v_b, s_a, s_b = va_buf.view, vb_buf.view, sa_buf.view, sb_buf.view
    vo_buf = so_buf = None
    if mode in ("given", "op"):
        vo_buf = _output((t, h, d), dense_strides((t, h, d)), 8 + v_off, dtype, NAN, GUARD, tail=8)
    if mode in ("given", "op", "inplace"):
        so_buf = _output((t, h), dense_strides((t, h)), 8, FP32, NAN, GUARD, tail=8)
    desc = (f"{op} {_dt(dtype)} T={t} H={h} D={d} v={describe(v_a)} lse={_dt(s_dtype)} special={special} far={far} "
            f"outputs={mode}")

    def body() -> None:
        s_a32, s_b32 = s_a.float(), s_b.float()
        v_a0 = v_a.clone()
        want_v, want_s = merge_state_ref(v_a0, s_a32, v_b, s_b32, natural)
        if mode == "op":
            result = _op(op)(v_a, s_a, v_b, s_b, vo_buf.view, so_buf.view)
            assert result is None, f"returned {type(result).__name__}, expected None"
            v_out, s_out = vo_buf.view, so_buf.view
        else:
            v_given = v_a if mode == "inplace" else (vo_buf.view if vo_buf is not None else None)
            s_given = so_buf.view if so_buf is not None else None
            if mode == "alloc":
                _poison_next_alloc(t * h * d * dtype.itemsize)
            ret = _wrapper(op)(v_a, s_a, v_b, s_b, v_given, s_given)
            assert isinstance(ret, tuple) and len(ret) == 2, f"returned {type(ret).__name__}, expected a pair"
            v_out, s_out = ret
            if v_given is not None:
                assert v_out is v_given, "the wrapper did not return the v_merged it was given"
            if s_given is not None:
                assert s_out is s_given, "the wrapper did not return the s_merged it was given"
        torch.cuda.synchronize()
        assert v_out.shape == (t, h, d) and v_out.dtype == dtype, f"v_merged {describe(v_out)}"
        assert s_out.shape == (t, h) and s_out.dtype == FP32, f"s_merged {describe(s_out)}"
        for name, got, want in (("v_merged", v_out, want_v), ("s_merged", s_out, want_s)):
            bad = torch.isnan(got) != torch.isnan(want)
            assert not bool(bad.any()), f"{name}: {int(bad.sum())} NaN position(s) differ from the reference"
        _close(v_out.double(), want_v, "v_merged", equal_nan=True, **elementwise_tol(dtype))
        _close(s_out.double(), want_s, "s_merged", equal_nan=True, **elementwise_tol(FP32))
        # Exact where the contract fixes the value: one empty state gives the other one's v and s.
        empty_a, empty_b = s_a32 == -INF, s_b32 == -INF
        if natural:
            empty_a, empty_b = empty_a | (s_a32 == INF), empty_b | (s_b32 == INF)
        one_empty = (("a", empty_a & ~empty_b, s_b32, v_b), ("b", empty_b & ~empty_a, s_a32, v_a0))
        for name, only, s_other, v_other in one_empty:
            rows = only & torch.isfinite(s_other)
            if bool(rows.any()):
                _same_bits(v_out[rows], v_other[rows], f"v_merged where only state {name} is empty")
                _same_bits(s_out[rows], s_other[rows], f"s_merged where only state {name} is empty")
        both = empty_a & empty_b
        assert bool((v_out[both] == 0).all()), "v_merged of two empty states is not 0"
        assert bool((s_out[both] == -INF).all()), "s_merged of two empty states is not -inf"
        if vo_buf is not None:
            vo_buf.check("v_merged storage", written=vo_buf.view)
        if so_buf is not None:
            so_buf.check("s_merged storage", written=so_buf.view)
        va_buf.check("v_a storage", written=v_a if mode == "inplace" else None)
        for name, buf in (("v_b", vb_buf), ("s_a", sa_buf), ("s_b", sb_buf)):
            buf.check(f"{name} storage")

    return _run(desc, body)


def fuzz_merge_state(case: Case) -> str:
    return _merge_fuzz(case, "merge_state")


def fuzz_merge_state_v2(case: Case) -> str:
    return _merge_fuzz(case, "merge_state_v2")


# ---------------------------------------------------------------------------------------
# fp8_blockwise_scaled_grouped_mm (sm90a)


_GMM_M = (0, 1, 3, 15, 16, 17, 31, 33, 127, 128, 129, 300)
_GMM_G = 2  # guard rows above and below the output inside its NaN buffer
_GMM_PTRS = ("a_ptrs", "b_ptrs", "out_ptrs", "a_scales_ptrs", "b_scales_ptrs")


def _gmm_scales(case: Case, shape: Sequence[int], kind: str) -> torch.Tensor:
    """Positive fp32 scales: uniform in [0.5, 1.5) or log-uniform in [1/4, 4)."""
    u = case.rand(shape)
    return u + 0.5 if kind == "uniform" else torch.exp2(u * 4 - 2)


def fuzz_fp8_blockwise_scaled_grouped_mm(case: Case) -> str:
    cap = tuple(torch.cuda.get_device_capability())
    if cap != (9, 0):
        return f"skip fp8_blockwise_scaled_grouped_mm: sm_{cap[0]}{cap[1]} has no kernel (sm90a only)"
    from tests.gemm.ref_gemm import random_fp8
    from tests.moe.test_blockwise_grouped_mm import assert_blockwise_close, expert_ref

    e = case.near((1, 2, 3, 4, 8, 16, 32, 40), 1, 40) if case.coin(0.5) else case.rng.randint(1, 40)
    n = 128 * case.rng.randint(1, 8)
    k = 128 * case.rng.randint(1, 8)
    kb, nb = k // 128, n // 128
    ms = [case.choice(_GMM_M) if case.coin(0.35) else case.rng.randint(0, 300) for _ in range(e)]
    if sum(ms) == 0 and case.coin(0.9):
        ms[case.rng.randrange(e)] = case.rng.randint(1, 300)
    while sum(ms) * max(n, k) > 2 * case.max_elems:
        ms = [m // 2 for m in ms]
    dtype = case.choice((BF16, FP16))
    order = case.choice(("permuted", "permuted", "sorted", "reversed"))
    seq = list(range(e))
    if order == "permuted":
        case.rng.shuffle(seq)
    elif order == "reversed":
        seq.reverse()
    wide_gaps = case.coin(0.2)
    offsets, pos = [0] * e, 0
    for x in seq:
        pos += case.rng.randint(0, 40 if wide_gaps else 3)
        offsets[x] = pos
        pos += ms[x]
    rows = pos + case.rng.randint(0, 5)
    a_pad = 16 * case.rng.randint(1, 9) if case.coin(0.3) else 0
    a_col = 16 * case.rng.randint(0, a_pad // 16) if a_pad else 0
    out_pad = 8 * case.rng.randint(1, 17) if case.coin(0.3) else 0
    sa_pad = case.rng.randint(1, 5) if case.coin(0.3) else 0
    sa_col = case.rng.randint(0, sa_pad)
    sb_n_major = case.coin(0.2)
    scale_kind = case.choice(("uniform", "log"))
    ws_kind = case.choice(("1MiB", "1MiB", "1MiB", "small", "misaligned"))

    a_buf = _input(random_fp8((rows, k), case.gen), (k + a_pad, 1), a_col, tail=a_pad, guard=0x7F)
    a = a_buf.view
    w = random_fp8((e, n, k), case.gen)
    b = w.transpose(1, 2)
    sb_nk = _gmm_scales(case, (e, nb, kb), scale_kind)
    scales_b = sb_nk.transpose(1, 2)
    if sb_n_major:  # a contiguous [E, K / 128, N / 128]: the op copies it K-major
        scales_b = scales_b.contiguous()
    sa_buf = _input(_gmm_scales(case, (rows, kb), scale_kind), (kb + sa_pad, 1), sa_col, tail=sa_pad)
    sa = sa_buf.view
    out_buf = torch.full((rows + 2 * _GMM_G, n + out_pad), NAN, dtype=dtype, device=DEV)
    out = out_buf[_GMM_G : _GMM_G + rows, :n]
    i64 = dict(dtype=I64, device=DEV)
    ptrs = [torch.full((e,), POISON, **i64) for _ in _GMM_PTRS]
    layouts = [torch.full((e, 5), POISON, dtype=I32, device=DEV) for _ in range(2)]
    strides = [torch.full((e,), k, **i64), torch.full((e,), k, **i64), torch.full((e,), n, **i64)]
    sizes = torch.tensor([[m, n, k] for m in ms], dtype=I32, device=DEV)
    offs = torch.tensor(offsets, dtype=I32, device=DEV)
    if ws_kind == "1MiB":
        workspace = torch.empty(1 << 20, dtype=torch.uint8, device=DEV)
    elif ws_kind == "small":
        workspace = torch.empty(case.rng.randint(1, 4096), dtype=torch.uint8, device=DEV)
    else:
        workspace = torch.empty((1 << 20) + 16, dtype=torch.uint8, device=DEV)[case.rng.randint(1, 15):]
    inputs = {"b": w, "scales_b": scales_b, "problem_sizes": sizes, "expert_offsets": offs,
              "stride_a": strides[0], "stride_b": strides[1], "stride_c": strides[2]}
    snap = {name: t.clone() for name, t in inputs.items()}
    desc = (f"fp8_blockwise_scaled_grouped_mm E={e} N={n} K={k} M_e={ms} offsets={offsets} order={order} "
            f"R={rows} out={describe(out)} a={describe(a)} scales_a={describe(sa)} "
            f"scales_b={'n-major' if sb_n_major else 'k-major'} scales={scale_kind} workspace={ws_kind}")

    def call(output: torch.Tensor) -> None:
        result = _wrapper("fp8_blockwise_scaled_grouped_mm")(output, *ptrs, a, b, sa, scales_b, *strides, *layouts,
                                                             sizes, offs, workspace)
        assert result is None, f"returned {type(result).__name__}, expected None"

    def body() -> None:
        call(out)
        torch.cuda.synchronize()
        covered = torch.zeros(rows + 2 * _GMM_G, dtype=torch.bool, device=DEV)
        for x in range(e):
            m, o = ms[x], offsets[x]
            if m == 0:
                continue
            ref, bound = expert_ref(a[o : o + m], sa[o : o + m], w[x], sb_nk[x])
            assert_blockwise_close(out[o : o + m], ref, bound, dtype, f"expert {x} (M {m}, first row {o})")
            covered[_GMM_G + o : _GMM_G + o + m] = True
        kept = torch.cat([out_buf[~covered].flatten(), out_buf[covered][:, n:].flatten()])
        assert bool(torch.isnan(kept).all()), (
            f"{int((~torch.isnan(kept)).sum())} output element(s) no expert covers lost their NaN")
        # API 1.2: the same inputs give the same bits (a second call into a fresh NaN buffer)
        again_buf = torch.full_like(out_buf, NAN)
        call(again_buf[_GMM_G : _GMM_G + rows, :n])
        torch.cuda.synchronize()
        _same_bits(again_buf, out_buf, "a second call (determinism)")
        a_buf.check("a storage")
        sa_buf.check("scales_a storage")
        for name, t in inputs.items():
            assert torch.equal(_bits(t), _bits(snap[name])), f"{name} (an input) changed"

    return _run(desc, body)


# ---------------------------------------------------------------------------------------

FUZZERS: Dict[str, Fuzzer] = {
    "moe.moe_sum": fuzz_moe_sum,
    "moe.moe_sum_reduce": fuzz_moe_sum_reduce,
    "moe.topk_softmax": fuzz_topk_softmax,
    "moe.topk_sigmoid": fuzz_topk_sigmoid,
    "moe.moe_align_block_size": fuzz_moe_align_block_size,
    "moe.prepare_moe_input": fuzz_prepare_moe_input,
    "moe.apply_shuffle_mul_sum": fuzz_apply_shuffle_mul_sum,
    "moe.fused_qk_norm_rope": fuzz_fused_qk_norm_rope,
    "moe.fp8_blockwise_scaled_grouped_mm": fuzz_fp8_blockwise_scaled_grouped_mm,
    "attention.merge_state": fuzz_merge_state,
    "attention.merge_state_v2": fuzz_merge_state_v2,
}
