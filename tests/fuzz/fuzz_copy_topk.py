# SPDX-License-Identifier: Apache-2.0
"""Fuzzers of the copy / cast / MLA-concat ops (API.md 2.1.4), the top-k family (2.1.5) and the
project ops (3.1 custom_relu / fused_add_relu, 3.2 store_kv_cache, 3.3 embedding_lookup), and
shuffle_rows (2.3), the embedding gather's rows of any dtype.

Every case lives in buffers the fuzzer owns: outputs are views into poisoned buffers (NaN, a
byte the op never writes, -7), so an unwritten element, a write to a wrong row or a write
outside the view all change the buffer against the expected one, which is compared bit for bit
(copies and casts are exact); inputs are compared bit for bit before and after the call. The
shapes concentrate on the launchers' path boundaries: the 16-byte chunk width of the row copies
(pointer, pitch and row-size alignment), their small/large launch shapes (store_kv_cache 64 KiB
of k and v, embedding_lookup 256 KiB of output), the tile/flat kernels of the concats and their
decode size (2^20 output vectors), downcast_fp8's 2^18 vectors, the relu vector path and its
grid cap, top-k rows of 2048 elements or fewer, windows larger than shared memory holds, and
few long rows (thread-block clusters on sm90+).

None of these ops takes ``enable_pdl`` (they launch with PDL on sm90+ by themselves).
"""

from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence, Tuple

import torch

import sgl_kernel
from tests.elementwise.ref_mla import (
    FP8_SENTINEL,
    concat_mla_absorb_q_ref,
    concat_mla_k_ref,
    copy_to_gpu_no_ce_ref,
    downcast_fp8_expected,
)
from tests.elementwise.test_mla_copy import assert_bitwise_equal
from tests.fuzz.common import Case, Fuzzer, debug_mode, describe, env
from tests.project.ref_embedding_lookup import embedding_lookup_ref
from tests.project.ref_relu import custom_relu_ref, fused_add_relu_ref
from tests.project.ref_store_kv_cache import store_kv_cache_ref
from tests.tolerances import elementwise_tol
from tests.top_k.ref_topk import TOPK, check_topk, page_table_ref, ragged_ref, windows

DEV = "cuda"
NAN = float("nan")
INF = float("inf")
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
FP8 = torch.float8_e4m3fn
POISON = -7  # int32 outputs (top-k) are filled with it before a call
_I32 = (-(2**31), 2**31 - 1)


# ---------------------------------------------------------------------------------------
# Shared helpers


def _op(name: str):
    return getattr(torch.ops.sgl_kernel, name).default


def _sync() -> None:
    torch.cuda.synchronize()




def _dt(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _same_bits(actual: torch.Tensor, expected: torch.Tensor, desc: str, what: str) -> None:
    """Shape and every element's bits equal (test_mla_copy's check, the case named first)."""
    assert_bitwise_equal(actual, expected, f"{desc}: {what}")


def _close(actual: torch.Tensor, expected: torch.Tensor, desc: str, what: str, **tol) -> None:
    try:
        torch.testing.assert_close(actual, expected, **tol)
    except AssertionError as exc:
        raise AssertionError(f"{desc}: {what}: {exc}") from None


def _check(cond: bool, desc: str, msg: str) -> None:
    if not cond:
        raise AssertionError(f"{desc}: {msg}")


def _randint(case: Case, lo: int, hi: int, shape, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    """Integers in [lo, hi] (both included)."""
    return torch.randint(lo, hi + 1, tuple(shape), device=DEV, generator=case.gen, dtype=torch.int64).to(dtype)


def _rand_bytes(case: Case, n: int) -> torch.Tensor:
    return torch.randint(0, 256, (n,), dtype=torch.uint8, device=DEV, generator=case.gen)


def _sprinkle(case: Case, t: torch.Tensor, values: Sequence, p: float) -> torch.Tensor:
    """``t`` with each element replaced, with probability ``p``, by one of ``values``."""
    if t.numel() == 0 or p <= 0 or not values:
        return t
    pool = torch.tensor(list(values), dtype=t.dtype, device=t.device)
    pick = pool[torch.randint(0, len(values), tuple(t.shape), device=t.device, generator=case.gen)]
    return torch.where(case.rand(tuple(t.shape)) < p, pick, t)


def _strides(shape: Sequence[int], order: Sequence[int], steps=None, gaps=None, zero=()) -> Tuple[List[int], int]:
    """Strides of a view of ``shape`` whose dimensions lie in memory in ``order`` (innermost
    first): dimension d is ``steps[d]`` times the extent of the dimensions inside it apart, with
    ``gaps[d]`` more elements after its own extent; dimensions in ``zero`` get stride 0. Returns
    (strides, span): span is one past the farthest element (0 for an empty shape)."""
    n = len(shape)
    steps = list(steps) if steps is not None else [1] * n
    gaps = list(gaps) if gaps is not None else [0] * n
    strides = [0] * n
    acc = 1
    for d in order:
        if d in zero:
            continue
        strides[d] = acc * steps[d]
        acc = strides[d] * shape[d] + gaps[d]
    if any(s == 0 for s in shape):
        return strides, 0
    return strides, 1 + sum((s - 1) * st for s, st in zip(shape, strides))


def _place(data: torch.Tensor, strides: Sequence[int], span: int, front: int, back: int, fill, zero=()):
    """(buf, view): a flat buffer of ``data.dtype`` with ``front + span + back`` elements filled
    with ``fill``, and a view of ``data``'s shape and ``strides`` at ``front`` holding ``data``
    (``data`` must be constant along the stride-0 dimensions ``zero``)."""
    buf = torch.full((front + span + back,), fill, dtype=data.dtype, device=data.device)
    shape = tuple(data.shape)
    view = buf.as_strided(shape, tuple(strides), front)
    if data.numel():
        src = data
        wshape = list(shape)
        for d in zero:
            src = src.narrow(d, 0, 1)
            wshape[d] = 1
        buf.as_strided(tuple(wshape), tuple(strides), front).copy_(src)
    return buf, view


def _twin(t: torch.Tensor, buf: torch.Tensor) -> torch.Tensor:
    """The view of ``buf`` (a clone of the buffer ``t`` lives in, same dtype) with ``t``'s
    geometry."""
    return buf.as_strided(tuple(t.shape), tuple(t.stride()), t.storage_offset())


def _chunk(*values: int) -> int:
    """The widest of 16, 8, 4, 2, 1 bytes dividing every value (the row copies' chunk)."""
    bits = 16
    for v in values:
        bits |= int(v)
    return bits & -bits


def _poison_next_alloc(shape, dtype: torch.dtype, fill) -> None:
    """Free a poisoned block of the output's size so the caching allocator likely hands it to
    the output the op allocates next: elements the kernel skips then read the poison."""
    torch.full(tuple(shape), fill, dtype=dtype, device=DEV)


def _geom3(case: Case, shape: Tuple[int, int, int], elt: int, aligned: bool, swap_ok: bool = True):
    """(strides, span, front) of a 3-D view with a contiguous last dimension: the two leading
    dimensions in either memory order, padding after a row or a middle-dimension block, a start
    offset; all of them 16-byte multiples when ``aligned``, else 16-byte multiples or odd."""
    f = max(1, 16 // elt)
    order = [2, 0, 1] if swap_ok and case.coin(0.25) else [2, 1, 0]
    gaps = [0, 0, 0]
    if case.coin(0.4):
        gaps[2] = case.choice((f, 2 * f, 8 * f, 16 * f) + (() if aligned else (1, 3)))
    if case.coin(0.2):
        gaps[order[1]] = case.choice((f, 3 * f) + (() if aligned else (1, 5)))
    front = case.choice((f, 2 * f, 8 * f) + (() if aligned else (1, 2, 3))) if case.coin(0.4) else 0
    strides, span = _strides(shape, order, gaps=gaps)
    return strides, span, front


def _split(case: Case, total: int, ndim: int) -> Tuple[int, ...]:
    """A shape of ``ndim`` dimensions with about ``total`` elements."""
    if ndim == 0:
        return ()
    if ndim == 1:
        return (total,)
    lead = [case.choice((1, 2, 3)) if ndim > 5 else case.log_int(1, 12) for _ in range(ndim - 1)]
    return (*lead, max(1, total // math.prod(lead)))


# ---------------------------------------------------------------------------------------
# store_kv_cache (API.md 3.2)

_KV_DTYPES = (BF16, BF16, BF16, FP16, FP32, FP8, torch.int8, torch.uint8)
_KV_HEADS = (1, 1, 2, 4, 8, 8, 16, 32, 64, 128, 3, 5, 12)
_KV_DIMS = (64, 128, 128, 256, 576, 512, 192, 96, 80, 32, 16, 8)


def _kv_row(case: Case, elt: int) -> Tuple[int, int]:
    """(heads, head_dim) with rows of a multiple of 128 bytes."""
    if case.coin(0.15):  # one long head of any 128-byte multiple
        return 1, (128 // elt) * case.log_int(1, 96)
    for _ in range(64):
        heads, dim = case.choice(_KV_HEADS), case.choice(_KV_DIMS)
        if heads * dim * elt % 128 == 0:
            return heads, dim
    return 1, 128 // elt


def _bytes_choice(case: Case, choices: Sequence[int], elt: int) -> int:
    """An element count from byte counts ``choices`` (those that are whole elements)."""
    ok = [c // elt for c in choices if c % elt == 0 and c >= elt]
    return case.choice(ok) if ok else 1


def fuzz_store_kv_cache(case: Case) -> str:
    dtype = case.choice(_KV_DTYPES)
    elt = dtype.itemsize
    heads, dim = _kv_row(case, elt)
    row = heads * dim
    row_bytes = row * elt
    cap = max(1, case.max_elems // row)
    last_small = max(1, (64 << 10) // (2 * row_bytes))  # 2 n row_bytes <= 64 KiB: the small launch
    n = case.rows(cap, points=(1, 2, 7, 16, 64, 128, 257, last_small, last_small + 1))
    num_slots = min(cap, n + case.log_int(1, 64) - 1) if case.coin() else case.log_int(n, cap)
    num_slots = max(num_slots, n)
    loc_dtype = case.choice((torch.int32, torch.int64))

    # caches: two [N, row] views of one random-byte buffer, rows `pitch` elements apart
    layout = case.choice(("separate", "pool", "pool", "padded", "offset"))
    pair = layout == "pool"
    pad = 0
    if layout == "padded" or case.coin(0.2):
        pad = _bytes_choice(case, (16, 32, 8, 4, 2, 1, 48, 128), elt)
    off = _bytes_choice(case, (16, 8, 4, 2, 1, 64), elt) if layout == "offset" or case.coin(0.1) else 0
    pitch = (2 * row if pair else row) + pad
    guard = case.choice((0, 1, 2, 3))
    k_off = guard * pitch + off
    gap = 0 if pair else case.choice((0, 0, 1, 8, 64)) * max(1, 16 // elt)
    v_off = k_off + row if pair else k_off + num_slots * pitch + gap
    total = v_off + num_slots * pitch + guard * pitch + 16
    base = _rand_bytes(case, total * elt)
    cache_shape = (num_slots, heads, dim) if case.coin() else (num_slots, row)
    cache_strides = (pitch, dim, 1) if len(cache_shape) == 3 else (pitch, 1)
    k_cache = base.view(dtype).as_strided(cache_shape, cache_strides, k_off)
    v_cache = base.view(dtype).as_strided(cache_shape, cache_strides, v_off)

    # k, v: two views of one random-byte buffer, same sizes and strides
    src_layout = case.choice(("contiguous", "contiguous", "qkv", "padded", "offset", "broadcast"))
    if src_layout == "contiguous":
        s_pitch, sk, sv = row, 0, n * row
    elif src_layout == "qkv":  # column slices of a fused [n, (Hq + 2 H) D] projection
        q_cols = case.choice((0, 1, 2, 4)) * row
        s_pitch, sk, sv = q_cols + 2 * row, q_cols, q_cols + row
    elif src_layout == "broadcast":  # one row expanded: row stride 0
        s_pitch, sk = 0, _bytes_choice(case, (16, 2, 4), elt) if case.coin(0.3) else 0
        sv = sk + row + case.choice((0, 1, 8))
    else:
        s_pitch = row + (_bytes_choice(case, (16, 32, 8, 4, 2, 1), elt) if src_layout == "padded" else 0)
        sk = _bytes_choice(case, (16, 8, 4, 2, 1), elt) if src_layout == "offset" else 0
        sv = sk + n * s_pitch + case.choice((0, 1, 3, 8))
    src_total = max(sk, sv) + max(0, n - 1) * s_pitch + row + 8
    src_base = _rand_bytes(case, src_total * elt)
    src_shape = (n, heads, dim) if case.coin() else (n, row)
    src_strides = (s_pitch, dim, 1) if len(src_shape) == 3 else (s_pitch, 1)
    k = src_base.view(dtype).as_strided(src_shape, src_strides, sk)
    v = src_base.view(dtype).as_strided(src_shape, src_strides, sv)

    # distinct locations, some out of range (skipped) unless SGL_KERNEL_DEBUG is on
    loc = case.randperm(num_slots, n)
    nbad = 0
    if not debug_mode() and case.coin(0.2):
        info = torch.iinfo(loc_dtype)
        bad = [-1, -2, num_slots, num_slots + 1, num_slots + 7, info.max, info.min, info.min + 1]
        if loc_dtype == torch.int64:
            bad += [2**40, -(2**40), 2**31, -(2**31) - 1]
        before = loc.clone()
        loc = _sprinkle(case, loc, bad, case.choice((0.1, 0.5, 1.0)))
        nbad = int((loc != before).sum())
    loc = loc.to(loc_dtype)
    if case.coin(0.3):  # at an offset inside a larger tensor (still contiguous)
        loc = torch.cat([torch.full((3,), 5, dtype=loc_dtype, device=DEV), loc])[3:]

    chunk = _chunk(k_cache.data_ptr(), v_cache.data_ptr(), k.data_ptr(), v.data_ptr(), pitch * elt,
                   s_pitch * elt, row_bytes)
    path = "small" if 2 * n * row_bytes <= (64 << 10) else "large"
    use_wrapper = nbad == 0 and case.coin(0.15)
    desc = (f"store_kv_cache {_dt(dtype)} row={heads}x{dim} ({row_bytes} B) n={n} N={num_slots} "
            f"loc={_dt(loc_dtype)}{'+3' if loc.storage_offset() else ''} bad={nbad} cache={layout} "
            f"{describe(k_cache)} src={src_layout} {describe(k)} chunk={chunk}B {path}"
            f"{' via set_kv_buffer_kernel' if use_wrapper else ''}")

    expected = base.clone()
    store_kv_cache_ref(_twin(k_cache, expected.view(dtype)).view(torch.uint8),
                       _twin(v_cache, expected.view(dtype)).view(torch.uint8), loc, k.view(torch.uint8),
                       v.view(torch.uint8))
    src_before, loc_before = src_base.clone(), loc.clone()
    if use_wrapper:
        ret = sgl_kernel.set_kv_buffer_kernel(k_cache, v_cache, loc, k, v)
    else:
        ret = _op("store_kv_cache")(k_cache, v_cache, loc, k, v)
    _sync()
    _check(ret is None, desc, f"returned {type(ret).__name__}, expected None")
    _same_bits(base, expected, desc, "cache buffer (rows written, unaddressed rows, guards)")
    _same_bits(src_base, src_before, desc, "k/v buffer (input, must be unchanged)")
    _same_bits(loc, loc_before, desc, "out_loc (input, must be unchanged)")
    return desc


# ---------------------------------------------------------------------------------------
# embedding_lookup (API.md 3.3)


def _index_layout(case: Case, values: torch.Tensor, fill: int):
    """(buf, indices): ``values`` (constant along any dimension drawn as expanded) in a random
    layout: dense, at an offset, or strided (permuted dimensions, steps, gaps, stride 0)."""
    shape = tuple(values.shape)
    n = len(shape)
    order = list(range(n - 1, -1, -1))
    steps, gaps, zero, front = [1] * n, [0] * n, (), 0
    kind = case.choice(("contiguous", "contiguous", "offset", "strided"))
    if kind == "offset":
        front = case.rng.randint(1, 5)
    elif kind == "strided" and n:
        if case.coin(0.5):
            case.rng.shuffle(order)
        for d in range(n):
            if case.coin(0.3) and math.prod(steps) < 8:
                steps[d] = 2
            if case.coin(0.2):
                gaps[d] = case.rng.randint(1, 3)
        wide = [d for d in range(n) if shape[d] > 1]
        if wide and case.coin(0.25):
            zero = (case.choice(wide),)
        front = case.rng.randint(0, 3)
    if zero:
        d = zero[0]
        values = values.narrow(d, 0, 1).expand(shape)
    strides, span = _strides(shape, order, steps, gaps, zero)
    buf, view = _place(values, strides, span, front, 4, fill, zero)
    return buf, view, kind


def _fuzz_embedding(case: Case, shard: bool) -> str:
    dtype = case.choice((BF16, BF16, FP16, FP32))
    elt = dtype.itemsize
    d = case.hidden(min(8192, case.max_elems),
                    points=(1, 2, 3, 4, 5, 7, 8, 16, 48, 64, 100, 128, 136, 520, 1000, 4096, 7168))
    vmax = max(1, min(100_000, case.max_elems // d))
    if shard:
        length = case.rows(vmax, points=(1, 2, 250, 1000))
        vocab = max(length, min(vmax, length + (0 if case.coin() else case.log_int(1, 64))))
    else:
        vocab = case.rows(vmax, points=(1, 2, 100, 1000, 32000))
        length = vocab

    # weight: [V, D] between NaN guard rows, rows `pitch` apart, maybe misaligned
    pitch = d + (case.choice((8, 1, 2, 3, max(1, 16 // elt), 5)) if case.coin(0.45) else 0)
    before = case.choice((1, 2, 3, 4, 8)) if case.coin(0.4) else 0
    guard = 2
    wbuf, weight = _place(case.randn((vocab, d), dtype), (pitch, 1), (vocab - 1) * pitch + d,
                          guard * pitch + before, guard * pitch + 8, NAN)
    if vocab > length:
        weight[length:] = NAN  # shard padding: never read

    # indices: any shape, any layout; repeats; shard ranges / out-of-range values
    last_small = max(1, (256 << 10) // (d * elt))  # num_indices * row_bytes <= 256 KiB: small launch
    tmax = max(1, case.max_elems // d)
    count = case.rows(tmax, points=(1, 2, 7, 16, 64, 128, 257, last_small, last_small + 1))
    shape = _split(case, count, case.choice((0, 1, 1, 1, 2, 2, 3, 4, 8, 10)))
    if math.prod(shape) * d > case.max_elems:
        shape = (count,)
    if case.coin(0.02):
        shape = case.choice(((0,), (3, 0), (0, 5)))
    debug = debug_mode()
    if shard:
        start = case.choice((0, case.log_int(1, 10**6), length * case.rng.randint(1, 7), 2**40,
                             _I32[1] - length - case.rng.randint(0, 100)))
        start = max(0, start)
        margin = case.choice((3, length, 10**4))
        idx_dtype = torch.int64 if start + length + margin > _I32[1] or case.coin() else torch.int32
        info = torch.iinfo(idx_dtype)
        lo, hi = max(start - margin, info.min), min(start + length + margin, info.max, 2**62)
        values = _randint(case, lo, hi, shape)
        edges = [start - 1, start, start + length - 1, start + length, -1, 0, info.min, info.max]
        values = _sprinkle(case, values, [e for e in edges if info.min <= e <= info.max], 0.1 if case.coin(0.3) else 0)
        vocab_range: Optional[Tuple[int, int]] = (start, length)
    else:
        idx_dtype = case.choice((torch.int32, torch.int64))
        info = torch.iinfo(idx_dtype)
        values = _randint(case, 0, vocab - 1, shape)
        if not debug and case.coin(0.15):  # documented: zero rows
            bad = [-1, -2, vocab, vocab + 1, info.min, info.max]
            if idx_dtype == torch.int64:
                bad += [2**40, -(2**40), 2**31]
            values = _sprinkle(case, values, bad, case.choice((0.05, 0.5)))
        vocab_range = None
    ibuf, indices, idx_kind = _index_layout(case, values.to(idx_dtype), info.max)

    out_mode = case.choice(("alloc", "given", "op"))
    out_shape = (*shape, d)
    numel = math.prod(out_shape)
    out_off = case.choice((0, 0, 1, 2, 3, 8))
    desc = (f"embedding_lookup {_dt(dtype)} weight={describe(weight)} (V={vocab}) idx={describe(indices)} "
            f"({idx_kind}) vocab_range={vocab_range} out={out_mode}"
            f"{'+' + str(out_off) if out_mode != 'alloc' else ''}")

    wbuf_before, ibuf_before = wbuf.clone(), ibuf.clone()
    obuf = obuf_before = None
    if out_mode == "alloc":
        _poison_next_alloc(out_shape, dtype, NAN)
        out = sgl_kernel.embedding_lookup(weight, indices, vocab_range=vocab_range)
    else:
        obuf = torch.full((16 + out_off + numel + 16,), NAN, dtype=dtype, device=DEV)
        out = obuf[16 + out_off : 16 + out_off + numel].view(out_shape)
        obuf_before = obuf.clone()
        desc += f" chunk={_chunk(out.data_ptr(), weight.data_ptr(), pitch * elt, d * elt)}B"
        if out_mode == "given":
            ret = sgl_kernel.embedding_lookup(weight, indices, vocab_range=vocab_range, out=out)
            _check(ret is out, desc, "embedding_lookup(out=out) did not return out")
        else:
            start, length_arg = vocab_range if vocab_range is not None else (0, -1)
            ret = _op("embedding_lookup")(out, weight, indices, start, length_arg)
            _check(ret is None, desc, "the op returned a value")
    _sync()
    _check(tuple(out.shape) == out_shape and out.dtype == dtype and out.is_contiguous(), desc,
           f"out is {describe(out)}, expected contiguous {_dt(dtype)}{list(out_shape)}")
    expected = embedding_lookup_ref(weight, indices, vocab_range)
    _same_bits(out, expected, desc, "out")
    if obuf is not None:
        exp_buf = obuf_before
        exp_buf[16 + out_off : 16 + out_off + numel] = expected.flatten()
        _same_bits(obuf, exp_buf, desc, "out buffer (out and the guards around it)")
    _same_bits(wbuf, wbuf_before, desc, "weight buffer (input, must be unchanged)")
    _same_bits(ibuf, ibuf_before, desc, "indices buffer (input, must be unchanged)")
    return desc


def fuzz_embedding_lookup(case: Case) -> str:
    return _fuzz_embedding(case, shard=False)


def fuzz_embedding_lookup_vocab_range(case: Case) -> str:
    return _fuzz_embedding(case, shard=True)


# ---------------------------------------------------------------------------------------
# shuffle_rows (API.md 2.3; the row gather of embedding_lookup for any dtype)

_SHUFFLE_GUARD = 0xA5  # the byte around input and output; random data holds it 1 byte in 256


def fuzz_shuffle_rows(case: Case) -> str:
    """Random bytes of a random dtype in a guard-byte buffer (row pitch and start offset free),
    a 1-D int32/int64 map with repeats, out-of-range entries (zero rows) and a stride, an output
    allocated by the wrapper or given to the op at a byte offset; compared as bytes."""
    dtype = case.choice((FP8, FP8, BF16, FP16, FP32, torch.uint8, torch.int32))
    elt = dtype.itemsize
    cols = case.hidden(min(8192, case.max_elems),
                       points=(1, 2, 3, 7, 8, 16, 56, 100, 128, 136, 520, 2048, 4096, 7168))
    n = case.rows(max(1, min(100_000, case.max_elems // cols)), points=(1, 2, 16, 128, 1000))
    pitch = cols + (case.choice((1, 2, 3, 8, max(1, 16 // elt))) if case.coin(0.4) else 0)
    before = case.choice((1, 2, 3, 8)) if case.coin(0.3) else 0
    front, back = 2 * pitch + before, 2 * pitch + 8  # two guard rows each side
    span = (n - 1) * pitch + cols
    ibuf = torch.full(((front + span + back) * elt,), _SHUFFLE_GUARD, dtype=torch.uint8, device=DEV)
    inp = ibuf.view(dtype).as_strided((n, cols), (pitch, 1), front)
    inp.view(torch.uint8).copy_(_rand_bytes(case, n * cols * elt).view(n, cols * elt))

    last_small = max(1, (256 << 10) // (cols * elt))  # R * row bytes <= 256 KiB: the small launch
    r = case.rows(max(1, case.max_elems // cols), points=(1, 2, 7, 16, 64, 128, 257, last_small, last_small + 1))
    if case.coin(0.02):
        r = 0
    map_dtype = torch.int32 if case.coin(0.7) else torch.int64
    info = torch.iinfo(map_dtype)
    values = _randint(case, 0, n - 1, (r,))
    if not debug_mode() and case.coin(0.15):  # documented: zero rows
        values = _sprinkle(case, values, [-1, n, n + 1, info.min, info.max], case.choice((0.05, 0.5)))
    step = 3 if case.coin(0.25) else 1
    mbuf = torch.full((max(1, r * step),), info.max, dtype=map_dtype, device=DEV)
    dst2src = mbuf[::step][:r] if step > 1 else mbuf[:r]
    dst2src.copy_(values.to(map_dtype))

    out_mode = case.choice(("alloc", "op"))
    off = case.choice((0, 0, 1, 2, 3, 8)) * elt
    desc = (f"shuffle_rows {_dt(dtype)} input={describe(inp)} dst2src_map={describe(dst2src)} "
            f"out={out_mode}{'+' + str(off) + 'B' if out_mode == 'op' else ''}")
    ibuf_before, mbuf_before = ibuf.clone(), mbuf.clone()
    nbytes = r * cols * elt
    obuf = None
    if out_mode == "alloc":
        _poison_next_alloc((nbytes,), torch.uint8, _SHUFFLE_GUARD)
        out = sgl_kernel.shuffle_rows(inp, dst2src, (r, cols))
    else:
        obuf = torch.full((64 + off + nbytes + 64,), _SHUFFLE_GUARD, dtype=torch.uint8, device=DEV)
        out = obuf[64 + off : 64 + off + nbytes].view(dtype).view(r, cols)
        desc += f" chunk={_chunk(out.data_ptr(), inp.data_ptr(), pitch * elt, cols * elt)}B"
        _check(_op("shuffle_rows")(inp, dst2src, out) is None, desc, "the op returned a value")
    _sync()
    _check(tuple(out.shape) == (r, cols) and out.dtype == dtype and out.is_contiguous(), desc,
           f"out is {describe(out)}, expected contiguous {_dt(dtype)}[{r}, {cols}]")
    src = inp.view(torch.uint8)  # [n, cols * elt]
    idx = dst2src.long()
    valid = (idx >= 0) & (idx < n)
    expected = torch.zeros((r, cols * elt), dtype=torch.uint8, device=DEV)
    expected[valid] = src[idx[valid]]
    _same_bits(out.view(torch.uint8), expected, desc, "output")
    if obuf is not None:
        exp_buf = torch.full_like(obuf, _SHUFFLE_GUARD)
        exp_buf[64 + off : 64 + off + nbytes] = expected.flatten()
        _same_bits(obuf, exp_buf, desc, "output buffer (output and the guards around it)")
    _same_bits(ibuf, ibuf_before, desc, "input buffer (input, must be unchanged)")
    _same_bits(mbuf, mbuf_before, desc, "dst2src_map buffer (input, must be unchanged)")
    return desc


# ---------------------------------------------------------------------------------------
# concat_mla_k / concat_mla_absorb_q (API.md 2.1.4)

_DECODE_VECTORS = 1 << 20  # concat.cu kDecodeMaxVectors: output vectors of the decode shapes


def _concat_path(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, b_rows: Tuple[int, int],
                 a_cols: int, b_cols: int, tiles: Sequence[Tuple[int, int]]) -> str:
    """The kernel launch_concat_rows picks (for descriptions)."""
    f = 16 // out.element_size()
    strides = (out.stride(0), out.stride(1), a.stride(0), a.stride(1), *b_rows)
    vec = (all(t.data_ptr() % 16 == 0 for t in (out, a, b)) and a_cols % f == 0 and b_cols % f == 0
           and all(s % f == 0 for s in strides))
    if not vec:
        return "flat-elements"
    rows = out.shape[0] * out.shape[1]
    decode = rows * ((a_cols + b_cols) // f) <= _DECODE_VECTORS
    if (a_cols, b_cols) == (16 * f, 8 * f) and (16 * f, 8 * f) in tiles:
        return f"tile{'-decode' if decode else ''}"
    if (a_cols, b_cols) == (64 * f, 8 * f) and (64 * f, 8 * f) in tiles and decode:
        return "tile-decode"
    return "flat-vectors"


def _decode_points(cols_a: int, cols_b: int, elt: int, per_row_unit: int) -> List[int]:
    """Leading sizes next to the decode limit of 2^20 output vectors (when 16-byte units fit)."""
    f = 16 // elt
    if cols_a % f or cols_b % f:
        return []
    last = _DECODE_VECTORS // ((cols_a + cols_b) // f) // per_row_unit
    return [max(1, last), last + 1]


def fuzz_concat_mla_k(case: Case) -> str:
    dtype = case.choice((BF16, BF16, BF16, FP16, FP32))
    elt = dtype.itemsize
    kinds = ("mla", "mla", "tp", "other") + (("tile32",) * 2 if dtype == FP32 else ())
    kind = case.choice(kinds)
    if kind == "mla":  # DeepSeek: 128 heads, 128 + 64
        heads, dn, dr = 128, 128, 64
    elif kind == "tp":  # 128 / tp heads
        heads, dn, dr = case.choice((1, 2, 8, 16, 32, 64)), 128, 64
    elif kind == "tile32":  # fp32 rows of 16 + 8 vectors: the tile kernel
        heads, dn, dr = case.choice((1, 7, 16, 128)), 64, 32
    else:
        heads = case.log_int(1, 160)
        dn = case.choice((8, 16, 64, 128, 256)) if case.coin() else case.log_int(1, 300)
        dr = case.choice((8, 32, 64)) if case.coin() else case.log_int(1, 100)
    cols = dn + dr
    tcap = max(1, min(case.max_elems // (heads * dn), (3 * case.max_elems // 2) // (heads * cols)))
    points = [1, 2, 7, 16, 64, 341, 342, 1000] + _decode_points(dn, dr, elt, heads)
    t = 0 if case.coin(0.02) else case.rows(tcap, points)
    aligned = case.coin(0.6)  # every pointer and stride 16-byte aligned: the vector / tile paths

    ks, kspan, kfront = _geom3(case, (t, heads, cols), elt, aligned)
    kbuf = torch.full((kfront + kspan + 16,), NAN, dtype=dtype, device=DEV)
    k = kbuf.as_strided((t, heads, cols), ks, kfront)
    ns, nspan, nfront = _geom3(case, (t, heads, dn), elt, aligned)
    nbuf, k_nope = _place(case.randn((t, heads, dn), dtype), ns, nspan, nfront, 8, NAN)
    # k_rope [T, 1, Dr]: its own row stride (0: one row for every token; 512 + Dr: the rope part
    # of a latent row), any stride for the size-1 head dimension
    f = max(1, 16 // elt)
    latent = case.coin(0.15)
    s0 = 512 + dr if latent else dr + (case.choice((f, 8 * f) + (() if aligned else (1, 3))) if case.coin(0.4) else 0)
    zero = ()
    if t > 1 and case.coin(0.05):
        s0, zero = 0, (0,)
    s1 = case.choice((dr, 1, 0, 4099))
    rfront = 512 if latent else (case.choice((f, 32 * f) + (() if aligned else (1, 3))) if case.coin(0.4) else 0)
    rspan = (t - 1) * s0 + dr if t else 0
    rope = case.randn((1 if zero else t, 1, dr), dtype).expand(t, 1, dr)
    rbuf, k_rope = _place(rope, (s0, s1, 1), rspan, rfront, 8, NAN, zero)

    use_op = case.coin()
    path = _concat_path(k, k_nope, k_rope, (k_rope.stride(0), 0), dn, dr, [(16 * f, 8 * f)])
    desc = (f"concat_mla_k {_dt(dtype)} T={t} H={heads} Dn={dn} Dr={dr} k={describe(k)} "
            f"k_nope={describe(k_nope)} k_rope={describe(k_rope)}{' latent' if latent else ''} "
            f"path={path}{' torch.ops' if use_op else ''}")
    expected = kbuf.clone()
    _twin(k, expected).copy_(concat_mla_k_ref(k_nope, k_rope))
    nbuf_before, rbuf_before = nbuf.clone(), rbuf.clone()
    ret = (_op("concat_mla_k") if use_op else sgl_kernel.concat_mla_k)(k, k_nope, k_rope)
    _sync()
    _check(ret is None, desc, "returned a value")
    _same_bits(kbuf, expected, desc, "k buffer (k and the memory around it)")
    _same_bits(nbuf, nbuf_before, desc, "k_nope buffer (input, must be unchanged)")
    _same_bits(rbuf, rbuf_before, desc, "k_rope buffer (input, must be unchanged)")
    return desc


def fuzz_concat_mla_absorb_q(case: Case) -> str:
    dtype = case.choice((BF16, BF16, BF16, FP16, FP32))
    elt = dtype.itemsize
    kinds = ("mla", "mla", "other") + (("tile32",) * 2 if dtype == FP32 else ())
    kind = case.choice(kinds)
    if kind == "mla":  # DeepSeek: latent 512 + rope 64
        da, db = 512, 64
    elif kind == "tile32":  # fp32 rows of 64 + 8 vectors: the tile kernel
        da, db = 256, 32
    else:
        da = case.choice((8, 64, 128, 512)) if case.coin() else case.log_int(1, 600)
        db = case.choice((8, 64)) if case.coin() else case.log_int(1, 100)
    t1 = case.choice((1, 8, 16, 32, 64, 128)) if case.coin(0.7) else case.log_int(1, 256)
    t0cap = max(1, case.max_elems // (t1 * max(da, db)))
    points = [1, 2, 16, 1024] + _decode_points(da, db, elt, t1)
    t0 = 0 if case.coin(0.02) else case.rows(t0cap, points)
    aligned = case.coin(0.6)  # every pointer and stride 16-byte aligned: the vector / tile paths

    as_, aspan, afront = _geom3(case, (t0, t1, da), elt, aligned)  # swapped: the serving layout
    abuf, a = _place(case.randn((t0, t1, da), dtype), as_, aspan, afront, 8, NAN)
    bs, bspan, bfront = _geom3(case, (t0, t1, db), elt, aligned)
    bbuf, b = _place(case.randn((t0, t1, db), dtype), bs, bspan, bfront, 8, NAN)
    use_op = case.coin(0.4)
    f = max(1, 16 // elt)
    abuf_before, bbuf_before = abuf.clone(), bbuf.clone()
    out_shape = (t0, t1, da + db)
    if use_op:
        os_, ospan, ofront = _geom3(case, out_shape, elt, aligned)
        obuf = torch.full((ofront + ospan + 16,), NAN, dtype=dtype, device=DEV)
        out = obuf.as_strided(out_shape, os_, ofront)
        path = _concat_path(out, a, b, (b.stride(0), b.stride(1)), da, db, [(64 * f, 8 * f)])
        desc = (f"concat_mla_absorb_q {_dt(dtype)} a={describe(a)} b={describe(b)} out={describe(out)} "
                f"path={path} torch.ops")
        expected = obuf.clone()
        _twin(out, expected).copy_(concat_mla_absorb_q_ref(a, b))
        ret = _op("concat_mla_absorb_q")(a, b, out)
        _sync()
        _check(ret is None, desc, "the op returned a value")
        _same_bits(obuf, expected, desc, "out buffer (out and the memory around it)")
    else:
        _poison_next_alloc(out_shape, dtype, NAN)
        out = sgl_kernel.concat_mla_absorb_q(a, b)
        path = _concat_path(out, a, b, (b.stride(0), b.stride(1)), da, db, [(64 * f, 8 * f)])
        desc = f"concat_mla_absorb_q {_dt(dtype)} a={describe(a)} b={describe(b)} path={path} (allocated out)"
        _sync()
        _check(tuple(out.shape) == out_shape and out.dtype == dtype and out.is_contiguous(), desc,
               f"out is {describe(out)}, expected contiguous {_dt(dtype)}{list(out_shape)}")
        _same_bits(out, concat_mla_absorb_q_ref(a, b), desc, "out")
    _same_bits(abuf, abuf_before, desc, "a buffer (input, must be unchanged)")
    _same_bits(bbuf, bbuf_before, desc, "b buffer (input, must be unchanged)")
    return desc


# ---------------------------------------------------------------------------------------
# downcast_fp8 (API.md 2.1.4)

_DC_HEADS = (1, 1, 2, 4, 8, 8, 16, 32, 128, 3, 5)
_DC_DIMS = (8, 16, 64, 128, 128, 256, 512, 576, 24, 40, 200)


def _fp8_scale(case: Case) -> float:
    """A positive fp32 scale: mostly ordinary, sometimes at the edges of the kernel's fast
    division range [2^-64, 2^64] or far outside it."""
    r = case.rng.random()
    if r < 0.55:
        return case.rng.uniform(0.1, 2.0)
    return case.choice((2.0**-3, 0.5, 1.0, 4.0, 1.0 / 448, 2.0**-64, 2.0**-64 * (1 - 2.0**-24), 2.0**64,
                        2.0**64 * (1 + 2.0**-23), 1e-30, 1e30, 3e-5, 7e4))


def _kv_values(case: Case, shape, dtype: torch.dtype, scale: float) -> torch.Tensor:
    """Random signs, |x / scale| log-uniform over 2^-14 .. 2^12 (e4m3 zeros, subnormals, normals,
    saturation), sometimes +-inf, +-0 and the extremes of the dtype (no NaN: the kernel maps it
    to -448 where the reference formula gives NaN, an unspecified case)."""
    mag = torch.exp2(case.rand(shape, lo=-14.0, hi=12.0)) * scale
    sign = _randint(case, 0, 1, shape).float() * 2 - 1
    x = (mag * sign).to(dtype)
    if case.coin(0.3):
        fi = torch.finfo(dtype)
        x = _sprinkle(case, x, [INF, -INF, 0.0, -0.0, fi.max, -fi.max, fi.tiny, fi.smallest_normal / 4], 0.05)
    return x


def fuzz_downcast_fp8(case: Case) -> str:
    dtype = case.choice((BF16, FP16))
    heads, dim = case.choice(_DC_HEADS), case.choice(_DC_DIMS)
    row = heads * dim
    last_small = max(1, (1 << 20) // row)  # 2 T row / 8 <= 2^18 vectors: the small launch
    tcap = max(1, case.max_elems // row)
    t = 0 if case.coin(0.02) else case.rows(tcap, points=(1, 2, 7, 16, 128, 300, last_small, last_small + 1))
    entries = t + case.log_int(1, max(1, min(2 * t + 8, 4096)))
    mult = case.choice((1, 1, 1, 2, 3, -1))
    if mult * entries * row > 4 * case.max_elems:
        mult = 1
    if mult > 0:
        offset = case.choice((0, 0, 1, 3, case.log_int(1, 100)))
        slots = (entries - 1) * mult + offset + 1 + case.choice((0, 0, case.log_int(1, 16)))
    else:  # slot = offset - loc
        offset = entries - 1 + case.choice((0, 0, 5))
        slots = offset + 1 + case.choice((0, case.log_int(1, 16)))
    loc = case.randperm(entries, t)
    nbad = 0
    if t and not debug_mode() and case.coin(0.2):
        cands = [slots + 5, 10**12, -(10**12), -1 - offset, -1, slots, slots // max(1, abs(mult)) + 1,
                 (slots - offset) // mult + 1 if mult > 0 else offset + 1, entries + 3]
        bad = [c for c in cands if not 0 <= c * mult + offset < slots]
        before = loc.clone()
        loc = _sprinkle(case, loc, bad, case.choice((0.1, 0.5, 1.0)))
        nbad = int((loc != before).sum())

    k_scale_v, v_scale_v = _fp8_scale(case), _fp8_scale(case)
    k_scale = torch.tensor([k_scale_v], dtype=FP32, device=DEV)
    v_scale = torch.tensor([v_scale_v], dtype=FP32, device=DEV)
    k_data = _kv_values(case, (t, heads, dim), dtype, k_scale_v)
    v_data = _kv_values(case, (t, heads, dim), dtype, v_scale_v)
    # k and v contiguous in one NaN buffer, 16-byte aligned (as required)
    kfront = 8 * case.choice((0, 0, 1, 3))
    vfront = kfront + t * row + 8 * case.choice((0, 1, 2))
    inbuf = torch.full((vfront + t * row + 8,), NAN, dtype=dtype, device=DEV)
    k = inbuf[kfront : kfront + t * row].view(t, heads, dim)
    v = inbuf[vfront : vfront + t * row].view(t, heads, dim)
    k.copy_(k_data)
    v.copy_(v_data)
    # k_out and v_out contiguous in one sentinel buffer, 8-byte aligned (as required)
    out_dtype = case.choice((FP8, torch.uint8))
    ofront = 8 * case.choice((0, 1, 3))
    ovfront = ofront + slots * row + 8 * case.choice((0, 1, 2))
    obuf = torch.full((ovfront + slots * row + 16,), FP8_SENTINEL, dtype=torch.uint8, device=DEV)
    k_out = obuf[ofront : ofront + slots * row].view(slots, heads, dim)
    v_out = obuf[ovfront : ovfront + slots * row].view(slots, heads, dim)
    if out_dtype == FP8:
        k_out, v_out = k_out.view(FP8), v_out.view(FP8)

    use_op = case.coin(0.4)
    path = "small" if 2 * t * row // 8 <= (1 << 18) else "large"
    desc = (f"downcast_fp8 {_dt(dtype)} T={t} H={heads} D={dim} N={slots} mult={mult} offset={offset} "
            f"bad={nbad} k_scale={k_scale_v:.9g} v_scale={v_scale_v:.9g} out={_dt(out_dtype)}+{ofront} "
            f"k+{kfront} {path}{' torch.ops' if use_op else ''}")
    expected = obuf.clone()
    expected[ofront : ofront + slots * row] = downcast_fp8_expected(
        obuf[ofront : ofront + slots * row].view(slots, heads, dim), k, k_scale, loc, mult, offset).flatten()
    expected[ovfront : ovfront + slots * row] = downcast_fp8_expected(
        obuf[ovfront : ovfront + slots * row].view(slots, heads, dim), v, v_scale, loc, mult, offset).flatten()
    inbuf_before, loc_before = inbuf.clone(), loc.clone()
    scales_before = torch.cat([k_scale, v_scale])
    if use_op:
        ret = _op("downcast_fp8")(k, v, k_out, v_out, k_scale, v_scale, loc, mult, offset)
    elif mult == 1 and offset == 0 and case.coin():
        ret = sgl_kernel.downcast_fp8(k, v, k_out, v_out, k_scale, v_scale, loc)  # the defaults
    else:
        ret = sgl_kernel.downcast_fp8(k, v, k_out, v_out, k_scale, v_scale, loc, mult=mult, offset=offset)
    _sync()
    _check(ret is None, desc, "returned a value")
    _same_bits(obuf, expected, desc, "k_out/v_out buffer (bytes: rows written, other rows, guards)")
    _same_bits(inbuf, inbuf_before, desc, "k/v buffer (input, must be unchanged)")
    _same_bits(loc, loc_before, desc, "loc (input, must be unchanged)")
    _same_bits(torch.cat([k_scale, v_scale]), scales_before, desc, "k_scale, v_scale (inputs, must be unchanged)")
    return desc


# ---------------------------------------------------------------------------------------
# copy_to_gpu_no_ce (API.md 2.1.4)


def fuzz_copy_to_gpu_no_ce(case: Case) -> str:
    if case.coin():
        n = case.choice((32, 64, 72))
    elif case.coin(0.05):
        n = 0
    else:
        n = case.near((1, 31, 32, 33, 255, 256, 257, 511, 999, 1000), 1, 1000) if case.coin() else case.log_int(1, 1000)
    cpu_gen = torch.Generator().manual_seed(case.rng.getrandbits(63))
    src = torch.randint(-(2**31), 2**31, (n,), dtype=torch.int32, generator=cpu_gen)
    if n:
        src[0] = -(2**31)
        src[-1] = 2**31 - 1
    if case.coin(0.3):  # a contiguous view at an offset of a larger host tensor
        src = torch.cat([torch.zeros(3, dtype=torch.int32), src])[3:]
    expected = copy_to_gpu_no_ce_ref(src)
    off = case.choice((0, 0, 1, 3, 4))
    guard = 8
    buf = torch.full((guard + off + n + guard,), POISON, dtype=torch.int32, device=DEV)
    out = buf[guard + off : guard + off + n]
    out.copy_(~expected.to(DEV))  # differs from the expected value in every element
    use_op = case.coin(0.4)
    desc = f"copy_to_gpu_no_ce N={n} src+{src.storage_offset()} out+{off}{' torch.ops' if use_op else ''}"
    exp_buf = buf.clone()
    exp_buf[guard + off : guard + off + n] = expected.to(DEV)
    ret = (_op("copy_to_gpu_no_ce") if use_op else sgl_kernel.copy_to_gpu_no_ce)(src, out)
    src.copy_(~src)  # the host values are read at call time: a later change must not matter
    _sync()
    _check(ret is None, desc, "returned a value")
    _same_bits(buf, exp_buf, desc, "output buffer (output and guards)")
    return desc


# ---------------------------------------------------------------------------------------
# custom_relu / fused_add_relu (API.md 3.1)

_RELU_GRID_ELEMS = 132 * 64 * 256  # relu.cu grid cap: one grid-stride step of the scalar kernel


def _relu_input(case: Case, dtype: torch.dtype, min_dim: int):
    """(buf, x, layout): a random-shape input in a random layout inside a NaN buffer, values
    normal with NaN, +-inf and -0.0 sprinkled in."""
    ndim = max(min_dim, case.choice((0, 1, 1, 2, 2, 2, 3, 3, 4, 5, 8, 10)))
    budget = case.max_elems
    if ndim == 1:
        shape: Tuple[int, ...] = (case.rows(budget, points=(1, 3, 4, 7, 8, 9, 1000, 65537, _RELU_GRID_ELEMS,
                                                            _RELU_GRID_ELEMS + 1)),)
    elif ndim >= 8:
        shape = tuple(case.choice((1, 2, 3)) for _ in range(ndim))
    elif ndim == 0:
        shape = ()
    else:
        last = case.hidden(min(16384, budget), points=(1, 2, 3, 4, 7, 8, 9, 16, 33, 64, 130, 136, 1000, 4096))
        lead = [case.log_int(1, 64) for _ in range(ndim - 1)]
        while lead and math.prod(lead) * last > budget:
            i = max(range(len(lead)), key=lambda j: lead[j])
            lead[i] = max(1, lead[i] // 2)
            if all(s == 1 for s in lead):
                break
        shape = (*lead, last)
    if math.prod(shape) > budget:
        shape = (*shape[:-1], max(1, budget // max(1, math.prod(shape[:-1]))))
    if shape and case.coin(0.02):
        i = case.rng.randrange(len(shape))
        shape = (*shape[:i], 0, *shape[i + 1 :])
    n = len(shape)
    order = list(range(n - 1, -1, -1))
    steps, gaps, zero, front = [1] * n, [0] * n, (), 0
    layout = case.choice(("contiguous", "contiguous", "misaligned", "strided", "strided"))
    if layout == "misaligned":
        front = case.rng.randint(1, 7)
    elif layout == "strided" and n:
        if case.coin(0.6):
            case.rng.shuffle(order)
        for d in range(n):
            if case.coin(0.25) and math.prod(steps) < 4:
                steps[d] = case.choice((2, 3))
            if case.coin(0.2):
                gaps[d] = case.rng.randint(1, 5)
        wide = [d for d in range(n) if shape[d] > 1]
        if wide and case.coin(0.3):
            zero = (case.choice(wide),)
        front = case.rng.randint(0, 5)
    data = case.randn(tuple(1 if d in zero else s for d, s in enumerate(shape)), dtype)
    if case.coin(0.4):
        data = _sprinkle(case, data, [NAN, INF, -INF, -0.0, 0.0], case.choice((0.01, 0.2)))
    data = data.expand(shape)
    strides, span = _strides(shape, order, steps, gaps, zero)
    buf, x = _place(data, strides, span, front, 8, NAN, zero)
    return buf, x, layout


def _fuzz_relu(case: Case, fused: bool) -> str:
    dtype = case.choice((FP32, FP16, BF16))
    buf, x, layout = _relu_input(case, dtype, 1 if fused else 0)
    bias = bbuf = None
    bdesc = ""
    if fused:
        last = x.shape[-1]
        boff = case.choice((1, 2, 3)) if case.coin(0.3) else 0
        bdata = case.randn((last,), dtype)
        if case.coin(0.2):
            bdata = _sprinkle(case, bdata, [NAN, INF, -INF], 0.1)
        bbuf, bias = _place(bdata, (1,), last, boff, 4, NAN)
        bdesc = f" bias={describe(bias)}"
    desc = f"{'fused_add_relu' if fused else 'custom_relu'} x={describe(x)} ({layout}){bdesc}"
    buf_before = buf.clone()
    bbuf_before = bbuf.clone() if bbuf is not None else None
    _poison_next_alloc(x.shape, dtype, NAN)
    out = sgl_kernel.fused_add_relu(x, bias) if fused else sgl_kernel.custom_relu(x)
    _sync()
    _check(tuple(out.shape) == tuple(x.shape) and out.dtype == dtype and out.is_contiguous(), desc,
           f"out is {describe(out)}, expected contiguous {_dt(dtype)}{list(x.shape)}")
    if fused:
        _close(out.float(), fused_add_relu_ref(x, bias), desc, "out", equal_nan=True, **elementwise_tol(dtype))
    else:
        # exactly torch.relu (NaN propagates; the sign of zero is not significant)
        _close(out.float(), custom_relu_ref(x), desc, "out", rtol=0, atol=0, equal_nan=True)
        _close(out, torch.relu(x), desc, "out vs torch.relu", rtol=0, atol=0, equal_nan=True)
    _same_bits(buf, buf_before, desc, "input buffer (must be unchanged)")
    if bbuf is not None:
        _same_bits(bbuf, bbuf_before, desc, "bias buffer (must be unchanged)")
    return desc


def fuzz_custom_relu(case: Case) -> str:
    return _fuzz_relu(case, fused=False)


def fuzz_fused_add_relu(case: Case) -> str:
    return _fuzz_relu(case, fused=True)


# ---------------------------------------------------------------------------------------
# Top-k (API.md 2.1.5)

_TOPK_L_POINTS = (1, 100, 2047, 2048, 2049, 2050, 4096, 8191, 9000, 12000, 13000, 14000, 16383, 16384, 16385,
                  32768, 65536, 70001, 131072, 262147)
_TOPK_B_POINTS = (1, 2, 3, 7, 8, 16, 17, 33, 64, 66, 67, 128, 132, 133)
_TOPK_KINDS = ("normal", "normal", "normal", "uniform", "few_values", "equal", "narrow", "wide", "specials",
               "nan_heavy", "ties")


def _topk_scores(case: Case, b: int, length: int, kind: str) -> torch.Tensor:
    shape = (b, length)
    if kind == "normal":
        return case.randn(shape, FP32)
    if kind == "uniform":  # the threshold bin of pass 1 outgrows shared memory: re-read path
        return case.rand(shape)
    if kind == "few_values":  # massive ties at the threshold
        return _randint(case, 0, case.choice((1, 4, 99)), shape).float()
    if kind == "equal":
        return torch.full(shape, case.choice((0.25, -1.5, 0.0)), device=DEV)
    if kind == "narrow":  # one exponent: the low mantissa bits decide
        return 3.0 + case.randn(shape, FP32) * 1e-5
    if kind == "wide":  # every exponent, both signs
        mag = torch.exp2(_randint(case, -126, 127, shape).float())
        sign = _randint(case, 0, 1, shape).float() * 2 - 1
        return mag * sign * (1 + case.rand(shape))
    if kind == "specials":  # +-0, +-inf, denormals, NaN
        vals = torch.tensor([0.0, -0.0, INF, -INF, 1e-45, -1e-45, NAN, 1.0], device=DEV)
        return vals[_randint(case, 0, vals.numel() - 1, shape)]
    if kind == "nan_heavy":  # NaN ranks below every number
        return _sprinkle(case, case.randn(shape, FP32), [NAN], case.choice((0.5, 0.99)))
    # ties straddling the 2048th place
    r = case.rand(shape)
    p_top = min(1.0, 1000 / max(length, 1))
    p_tie = min(1.0, 3000 / max(length, 1))
    x = case.randn(shape, FP32) - 10
    x = torch.where(r < p_top + p_tie, torch.full_like(x, 5.0), x)
    return torch.where(r < p_top, 7 + case.rand(shape), x)


class _TopkCase:
    """One drawn top-k problem: score (a view of a padded, maybe misaligned buffer), lengths,
    row_starts, a forced cluster size, and what describes it."""

    def __init__(self, case: Case) -> None:
        budget = case.max_elems
        if case.coin(0.6):
            L = case.near(_TOPK_L_POINTS, lo=0, hi=budget, spread=2)
        else:
            L = case.log_int(1, min(300_000, budget))
        bmax = max(1, min(4096, budget // max(L, 1)))
        B = case.rows(bmax, _TOPK_B_POINTS)
        with_starts = case.coin()
        oob = not debug_mode() and case.coin(0.05)  # windows outside score: clamped (documented)
        lengths: List[int] = []
        starts: List[int] = []
        for _ in range(B):
            mode = case.choice(("full", "full", "random", "near2048", "short", "zero", "capacity"))
            if mode == "full":
                n = L
            elif mode == "random":
                n = case.rng.randint(0, L)
            elif mode == "near2048":
                n = min(L, max(0, TOPK + case.rng.randint(-2, 2)))
            elif mode == "short":
                n = case.rng.randint(0, min(L, TOPK))
            elif mode == "zero":
                n = 0
            else:  # around the candidates shared memory holds (sm80 ~9k, sm90 ~13k, sm89 ~5k)
                n = min(L, case.near((5000, 9000, 13000, 14000), 0, L, 600))
            s = case.rng.randint(0, L - n) if with_starts else 0
            if oob and case.coin(0.3):
                what = case.choice(("long", "negative_n") + (("negative_s",) if with_starts else ()))
                if what == "long":
                    n = L - s + case.rng.randint(1, 100)
                elif what == "negative_n":
                    n = -case.rng.randint(1, 5)
                else:
                    s = -case.rng.randint(1, 50)
            lengths.append(n)
            starts.append(s)
        self.B, self.L, self.kind = B, L, case.choice(_TOPK_KINDS)
        self.lengths = torch.tensor(lengths, dtype=torch.int32, device=DEV)
        self.row_starts: Optional[torch.Tensor] = None
        self.starts_buf: Optional[torch.Tensor] = None
        sdesc = "None"
        if with_starts:
            step = case.choice((1, 1, 2, 3))
            sbuf = torch.full((B * step + 2,), -5, dtype=torch.int32, device=DEV)
            view = sbuf[1 : 1 + B * step : step] if B else sbuf[1:1]
            view.copy_(torch.tensor(starts, dtype=torch.int32, device=DEV))
            self.row_starts, self.starts_buf = view, sbuf
            sdesc = f"stride{step}"
        # score rows `pitch` apart from a maybe misaligned start; positions outside every
        # window hold +inf (the kernel must not read them: +inf would be selected)
        pitch = L + (case.choice((1, 2, 3, 5, 64)) if case.coin(0.4) else 0)
        front = case.choice((1, 2, 3, 17)) if case.coin(0.4) else 0
        data = _topk_scores(case, B, L, self.kind)
        s_eff, n_eff = windows(data, self.lengths, self.row_starts)
        if case.coin(0.7) and B and L:
            rel = torch.arange(L, device=DEV)[None, :] - s_eff[:, None]
            data = torch.where((rel >= 0) & (rel < n_eff[:, None]), data, torch.full_like(data, INF))
        span = (B - 1) * pitch + L if B and L else 0
        self.buf, self.score = _place(data, (pitch, 1), span, front, 8, INF)
        self.max_n = int(n_eff.max()) if B else 0
        self.cluster = case.choice(("1", "2", "4", "8")) if case.coin(0.25) else None
        nlong = int((n_eff > TOPK).sum()) if B else 0
        self.desc = (f"B={B} L={L} score={describe(self.score)} kind={self.kind} row_starts={sdesc} "
                     f"lengths=[{min(lengths, default=0)}..{max(lengths, default=0)}] long_rows={nlong}"
                     f"{' out-of-contract windows' if oob else ''}"
                     f"{' SGL_KERNEL_TOPK_CLUSTER=' + self.cluster if self.cluster else ''}")
        self.snap = [t.clone() for t in self.inputs()]

    def inputs(self) -> List[torch.Tensor]:
        return [t for t in (self.buf, self.lengths, self.starts_buf) if t is not None]

    def out_buf(self) -> Tuple[torch.Tensor, torch.Tensor]:
        """(buf, out): a poisoned [B, 2048] int32 output between two poisoned guard rows."""
        buf = torch.full((self.B + 2, TOPK), POISON, dtype=torch.int32, device=DEV)
        return buf, buf[1 : self.B + 1]

    def check_inputs(self, desc: str, extra: Sequence[Tuple[torch.Tensor, torch.Tensor, str]] = ()) -> None:
        for before, after in zip(self.snap, self.inputs()):
            _same_bits(after, before, desc, "score / lengths / row_starts (inputs, must be unchanged)")
        for before, after, what in extra:
            _same_bits(after, before, desc, f"{what} (input, must be unchanged)")

    def check_guards(self, buf: torch.Tensor, desc: str, what: str) -> None:
        _check(bool((buf[0] == POISON).all()) and bool((buf[-1] == POISON).all()), desc,
               f"wrote outside {what} (guard rows changed)")

    def selection(self, desc: str) -> torch.Tensor:
        """fast_topk's own selection on these inputs, checked against the reference: the
        transforms must be exactly its gather / offset."""
        buf, idx = self.out_buf()
        _op("fast_topk")(self.score, idx, self.lengths, self.row_starts)
        _sync()
        msg = check_topk(self.score, self.lengths, self.row_starts, idx)
        _check(msg is None, desc, f"fast_topk selection: {msg}")
        self.check_guards(buf, desc, "indices")
        return idx


def fuzz_fast_topk_v2(case: Case) -> str:
    tc = _TopkCase(case)
    use_wrapper = case.coin(0.3)
    desc = f"fast_topk_v2 {tc.desc}{' (wrapper)' if use_wrapper else ' torch.ops'}"
    with env("SGL_KERNEL_TOPK_CLUSTER", tc.cluster):
        if use_wrapper:
            _poison_next_alloc((tc.B, TOPK), torch.int32, POISON)
            out = sgl_kernel.fast_topk_v2(tc.score, tc.lengths, TOPK, tc.row_starts)
            buf = None
        else:
            buf, out = tc.out_buf()
            ret = _op("fast_topk")(tc.score, out, tc.lengths, tc.row_starts)
            _check(ret is None, desc, "the op returned a value")
        _sync()
    msg = check_topk(tc.score, tc.lengths, tc.row_starts, out)
    _check(msg is None, desc, str(msg))
    if buf is not None:
        tc.check_guards(buf, desc, "indices")
    tc.check_inputs(desc)
    return desc


def fuzz_fast_topk_transform_fused(case: Case) -> str:
    tc = _TopkCase(case)
    B = tc.B
    if tc.row_starts is None and case.coin():  # decode: one row per request
        R = B
        cu_list = list(range(B + 1))
    else:  # requests of several rows, empty requests allowed
        R = case.log_int(1, max(1, B))
        cuts = sorted(case.rng.randint(0, B) for _ in range(R - 1))
        cu_list = [0, *cuts, B]
    row_is_request = tc.row_starts is None and R == B
    cu = torch.tensor(cu_list, dtype=torch.int32, device=DEV)
    if case.coin(0.2):
        cu = torch.cat([torch.full((2,), 9, dtype=torch.int32, device=DEV), cu])[2:]
    P = tc.max_n + case.choice((0, 0, 1, 7, 100))
    short_table = not debug_mode() and tc.max_n > 1 and case.coin(0.1)
    if short_table:  # positions >= P have no page: -1 (documented)
        P = case.rng.randint(1, tc.max_n - 1)
    pitch = P + (case.choice((1, 3, 8, 64)) if case.coin(0.3) else 0)
    front = case.choice((1, 5)) if case.coin(0.3) else 0
    values = _randint(case, _I32[0], _I32[1], (R, P), torch.int32)
    tbuf, table = _place(values, (pitch, 1), (R - 1) * pitch + P if P else 0, front, 8, POISON)
    use_wrapper = case.coin(0.3)
    desc = (f"fast_topk_transform_fused {tc.desc} R={R} cu={cu_list if R <= 8 else str(cu_list[:8]) + '...'} "
            f"table={describe(table)}{' P<n' if short_table else ''} row_is_request={row_is_request}"
            f"{' (wrapper)' if use_wrapper else ' torch.ops'}")
    snaps = [(tbuf.clone(), tbuf, "src_page_table buffer"), (cu.clone(), cu, "cu_seqlens_q")]
    with env("SGL_KERNEL_TOPK_CLUSTER", tc.cluster):
        if use_wrapper:
            _poison_next_alloc((B, TOPK), torch.int32, POISON)
            dst = sgl_kernel.fast_topk_transform_fused(tc.score, tc.lengths, table, cu, TOPK, tc.row_starts)
            buf = None
        else:
            buf, dst = tc.out_buf()
            ret = _op("fast_topk_transform_fused")(tc.score, tc.lengths, dst, table, cu, tc.row_starts)
            _check(ret is None, desc, "the op returned a value")
        _sync()
        idx = tc.selection(desc)
    _check(dst.dtype == torch.int32 and tuple(dst.shape) == (B, TOPK), desc, f"dst is {describe(dst)}")
    _same_bits(dst, page_table_ref(idx, table, cu, row_is_request), desc,
               "dst_page_table vs the page-table gather of fast_topk's selection")
    if buf is not None:
        tc.check_guards(buf, desc, "dst_page_table")
    tc.check_inputs(desc, [(a, b, w) for a, b, w in snaps])
    return desc


def fuzz_fast_topk_transform_ragged_fused(case: Case) -> str:
    tc = _TopkCase(case)
    B = tc.B
    mode = case.choice(("small", "full", "near_max"))
    if mode == "small":
        off = _randint(case, 0, 10**7, (B,), torch.int32)
    elif mode == "full":  # the sum wraps in int32 (documented)
        off = _randint(case, _I32[0], _I32[1], (B,), torch.int32)
    else:
        off = (_I32[1] - _randint(case, 0, 5000, (B,))).to(torch.int32)
    step = case.choice((1, 1, 2, 3))
    obuf = torch.full((B * step + 1,), POISON, dtype=torch.int32, device=DEV)
    offset = obuf[: B * step : step]
    offset.copy_(off)
    use_wrapper = case.coin(0.3)
    desc = (f"fast_topk_transform_ragged_fused {tc.desc} offsets={mode} stride{step}"
            f"{' (wrapper)' if use_wrapper else ' torch.ops'}")
    snap = [(obuf.clone(), obuf, "topk_indices_offset buffer")]
    with env("SGL_KERNEL_TOPK_CLUSTER", tc.cluster):
        if use_wrapper:
            _poison_next_alloc((B, TOPK), torch.int32, POISON)
            out = sgl_kernel.fast_topk_transform_ragged_fused(tc.score, tc.lengths, offset, TOPK, tc.row_starts)
            buf = None
        else:
            buf, out = tc.out_buf()
            ret = _op("fast_topk_transform_ragged_fused")(tc.score, tc.lengths, out, offset, tc.row_starts)
            _check(ret is None, desc, "the op returned a value")
        _sync()
        idx = tc.selection(desc)
    _check(out.dtype == torch.int32 and tuple(out.shape) == (B, TOPK), desc, f"out is {describe(out)}")
    _same_bits(out, ragged_ref(idx, offset), desc, "topk_indices_ragged vs fast_topk's selection + offset")
    if buf is not None:
        tc.check_guards(buf, desc, "topk_indices_ragged")
    tc.check_inputs(desc, snap)
    return desc


# ---------------------------------------------------------------------------------------

FUZZERS: Dict[str, Fuzzer] = {
    "copy.store_kv_cache": fuzz_store_kv_cache,
    "copy.embedding_lookup": fuzz_embedding_lookup,
    "copy.embedding_lookup_vocab_range": fuzz_embedding_lookup_vocab_range,
    "copy.shuffle_rows": fuzz_shuffle_rows,
    "copy.concat_mla_k": fuzz_concat_mla_k,
    "copy.concat_mla_absorb_q": fuzz_concat_mla_absorb_q,
    "copy.downcast_fp8": fuzz_downcast_fp8,
    "copy.copy_to_gpu_no_ce": fuzz_copy_to_gpu_no_ce,
    "project.custom_relu": fuzz_custom_relu,
    "project.fused_add_relu": fuzz_fused_add_relu,
    "topk.fast_topk_v2": fuzz_fast_topk_v2,
    "topk.fast_topk_transform_fused": fuzz_fast_topk_transform_fused,
    "topk.fast_topk_transform_ragged_fused": fuzz_fast_topk_transform_ragged_fused,
}
