# SPDX-License-Identifier: Apache-2.0
"""store_kv_cache / set_kv_buffer_kernel (API.md 3.2) on the GPU.

Every case is built inside one uint8 buffer (``base``) holding all the bytes the op could
reach: the caches, the rows between and around them (guards, the other half of a pool,
row padding). The expected buffer is a clone of ``base`` updated by the pure-torch
reference on byte views, and the whole buffer must match bit for bit after the op: a write
to a wrong row, past a row or outside the caches fails the comparison without a memory
checker. The wrapper's CPU-side behaviour (fallback rules) is tested in test_package.py.
"""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.helpers import fake_extent, raises_op_error
from tests.project.ref_store_kv_cache import store_kv_cache_ref

pytestmark = pytest.mark.gpu

OP = torch.ops.sgl_kernel.store_kv_cache.default
BF16 = torch.bfloat16


def _rand_bytes(shape, gen) -> torch.Tensor:
    return torch.randint(0, 256, shape, dtype=torch.uint8, device="cuda", generator=gen)


def _twin(t: torch.Tensor, twin_base: torch.Tensor) -> torch.Tensor:
    """The view of ``twin_base`` (a contiguous clone of the buffer ``t`` lives in) with
    ``t``'s geometry."""
    return twin_base.view(t.dtype).as_strided(t.shape, t.stride(), t.storage_offset())


def _bytes(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.uint8)


def expected_after(base: torch.Tensor, k_cache, v_cache, loc, k, v) -> torch.Tensor:
    """``base`` as it must be after the op: the reference applied to byte views of a clone."""
    expected = base.clone()
    store_kv_cache_ref(_bytes(_twin(k_cache, expected)), _bytes(_twin(v_cache, expected)), loc, _bytes(k), _bytes(v))
    return expected


def make_caches(layout: str, num_slots: int, heads: int, dim: int, dtype, gen, guard: int = 0):
    """(k_cache, v_cache, base): caches of ``num_slots`` rows of ``heads * dim`` elements,
    random bytes everywhere, ``guard`` extra rows before and after them in ``base``."""
    elt = dtype.itemsize
    rows = guard + num_slots + guard
    if layout == "separate":  # two contiguous [N, H, D] caches
        base = _rand_bytes((2, rows, heads, dim * elt), gen)
        caches = base.view(dtype)[:, guard : guard + num_slots]
        return caches[0], caches[1], base
    if layout == "pool":  # the halves of a [N, 2, H, D] pool: row stride 2 * H * D
        base = _rand_bytes((rows, 2, heads, dim * elt), gen)
        pool = base.view(dtype)[guard : guard + num_slots]
        return pool[:, 0], pool[:, 1], base
    if layout == "padded":  # 2-D [N, H * D] caches whose rows are followed by 16 padding bytes
        base = _rand_bytes((2, rows, heads * dim * elt + 16), gen)
        caches = base.view(dtype)[:, guard : guard + num_slots, : heads * dim]
        return caches[0], caches[1], base
    if layout == "layer":  # one layer of a [L, N, 2, H, D] pool (row stride 2 * H * D, offset)
        base = _rand_bytes((3, rows, 2, heads, dim * elt), gen)
        pool = base.view(dtype)[1, guard : guard + num_slots]
        return pool[:, 0], pool[:, 1], base
    raise AssertionError(layout)


def make_src(layout: str, n: int, heads: int, dim: int, dtype, gen):
    """(k, v) of ``n`` rows of ``heads * dim`` elements, random bytes."""
    elt = dtype.itemsize
    if layout == "contiguous":
        kv = _rand_bytes((2, n, heads, dim * elt), gen).view(dtype)
        return kv[0], kv[1]
    if layout == "qkv":  # column slices of a fused [n, (Hq + 2 Hk) * D] projection
        hq = 2 * heads
        qkv = _rand_bytes((n, (hq + 2 * heads) * dim * elt), gen).view(dtype)
        return qkv[:, hq * dim : (hq + heads) * dim], qkv[:, (hq + heads) * dim :]
    if layout == "broadcast":  # one row expanded: row stride 0
        kv = _rand_bytes((2, 1, heads, dim * elt), gen).view(dtype)
        return kv[0].expand(n, heads, dim), kv[1].expand(n, heads, dim)
    raise AssertionError(layout)


def random_locs(n: int, num_slots: int, dtype, gen) -> torch.Tensor:
    """``n`` distinct locations in ``[0, num_slots)``."""
    return torch.randperm(num_slots, device="cuda", generator=gen)[:n].to(dtype)


def run_and_check(base, k_cache, v_cache, loc, k, v) -> None:
    expected = expected_after(base, k_cache, v_cache, loc, k, v)
    assert OP(k_cache, v_cache, loc, k, v) is None
    torch.cuda.synchronize()
    assert torch.equal(base, expected), "bytes differ from the reference (wrong rows, or writes outside the rows)"


# ---------------------------------------------------------------------------------------
# Correctness: every dtype (a byte copy), row sizes from 128 bytes to 8 KB and beyond


def _shapes():
    out = []
    for dtype in (BF16, torch.float16, torch.float32, torch.float8_e4m3fn, torch.int8):
        for heads, dim in ((1, 128), (1, 64), (8, 128), (32, 128), (3, 192), (1, 576), (2, 512), (64, 128)):
            if heads * dim * dtype.itemsize % 128 == 0:
                out.append((dtype, heads, dim))
    return out


SHAPES = _shapes()


@pytest.mark.parametrize("dtype, heads, dim", SHAPES, ids=[f"{d}-h{h}-d{dd}" for d, h, dd in SHAPES])
@pytest.mark.parametrize("n", [1, 7, 128, 1000])
def test_store(dtype, heads, dim, n, gen):
    num_slots = 2 * n + 37
    k_cache, v_cache, base = make_caches("pool", num_slots, heads, dim, dtype, gen, guard=2)
    k, v = make_src("contiguous", n, heads, dim, dtype, gen)
    loc = random_locs(n, num_slots, torch.int64, gen)
    run_and_check(base, k_cache, v_cache, loc, k, v)


@pytest.mark.parametrize("cache_layout", ["separate", "pool", "padded", "layer"])
@pytest.mark.parametrize("src_layout", ["contiguous", "qkv", "broadcast"])
@pytest.mark.parametrize("loc_dtype", [torch.int32, torch.int64], ids=str)
def test_layouts(cache_layout, src_layout, loc_dtype, gen):
    heads, dim, n, num_slots = 4, 128, 300, 1024
    k_cache, v_cache, base = make_caches(cache_layout, num_slots, heads, dim, BF16, gen, guard=3)
    k, v = make_src(src_layout, n, heads, dim, BF16, gen)
    loc = random_locs(n, num_slots, loc_dtype, gen)
    run_and_check(base, k_cache, v_cache, loc, k, v)


@pytest.mark.parametrize("n", [1, 2, 16, 64, 128])
@pytest.mark.parametrize("loc_dtype", [torch.int32, torch.int64], ids=str)
def test_decode_sizes(n, loc_dtype, gen):
    """Decode batches into a large pool (8 KV heads x 128, bf16: 2 KB rows)."""
    num_slots = 100_000
    k_cache, v_cache, base = make_caches("pool", num_slots, 8, 128, BF16, gen)
    k, v = make_src("qkv", n, 8, 128, BF16, gen)
    loc = random_locs(n, num_slots, loc_dtype, gen)
    run_and_check(base, k_cache, v_cache, loc, k, v)


def test_prefill_size(gen):
    """8192 rows of 4096 bf16 (the benchmark's acceptance shape) into a 16384-slot pool."""
    n, num_slots = 8192, 16384
    k_cache, v_cache, base = make_caches("pool", num_slots, 32, 128, BF16, gen)
    k, v = make_src("contiguous", n, 32, 128, BF16, gen)
    loc = random_locs(n, num_slots, torch.int64, gen)
    run_and_check(base, k_cache, v_cache, loc, k, v)


@pytest.mark.parametrize(
    "dtype, cache_offset, cache_pad, src_offset, src_pad",
    [
        (torch.uint8, 8, 0, 0, 0),  # 8-byte chunks
        (torch.uint8, 4, 0, 0, 0),  # 4-byte chunks
        (torch.uint8, 2, 0, 0, 0),
        (torch.uint8, 1, 0, 0, 0),  # byte chunks
        (torch.uint8, 0, 8, 0, 0),  # cache row pitch only 8-byte aligned
        (torch.uint8, 0, 1, 0, 0),  # odd row pitch
        (torch.uint8, 0, 0, 1, 0),  # misaligned k / v
        (torch.uint8, 0, 0, 0, 4),
        (torch.float16, 2, 0, 0, 0),
        (torch.float16, 0, 0, 6, 2),
        (torch.float32, 4, 4, 4, 4),
    ],
)
def test_misaligned(dtype, cache_offset, cache_pad, src_offset, src_pad, gen):
    """Pointers and row pitches that are not 16-byte aligned take narrower chunks."""
    elt = dtype.itemsize
    row_bytes, num_slots, n = 384, 50, 21
    pitch = row_bytes + 16 + cache_pad
    src_pitch = row_bytes + 32 + src_pad
    # k_cache, v_cache in one buffer; k, v in another; every offset and pitch in bytes.
    base = _rand_bytes((2 * num_slots * pitch + 64,), gen)
    src_base = _rand_bytes((2 * n * src_pitch + 64,), gen)

    def view(buf, rows, pitch_b, offset_b):
        return buf.view(dtype).as_strided((rows, row_bytes // elt), (pitch_b // elt, 1), offset_b // elt)

    k_cache = view(base, num_slots, pitch, 16 + cache_offset)
    v_cache = view(base, num_slots, pitch, 16 + cache_offset + num_slots * pitch)
    k = view(src_base, n, src_pitch, 16 + src_offset)
    v = view(src_base, n, src_pitch, 16 + src_offset + n * src_pitch)
    loc = random_locs(n, num_slots, torch.int32, gen)
    run_and_check(base, k_cache, v_cache, loc, k, v)


# ---------------------------------------------------------------------------------------
# Out-of-range locations: skipped, never a write outside the caches


def _bad_locs(num_slots: int, guard: int, dtype) -> list:
    info = torch.iinfo(dtype)
    bad = [-1, -guard, num_slots, num_slots + guard - 1, info.max, info.min, info.min + 1]
    if dtype == torch.int64:
        bad += [2**40, -(2**40), 2**31, -(2**31) - 1]
    return bad


@pytest.mark.parametrize("loc_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("heads, dim", [(8, 128), (1, 64)])  # 2 KB rows; 128-byte rows (64 per block)
def test_out_of_range_skipped(loc_dtype, heads, dim, gen):
    guard, num_slots = 4, 64
    k_cache, v_cache, base = make_caches("pool", num_slots, heads, dim, BF16, gen, guard=guard)
    bad = _bad_locs(num_slots, guard, loc_dtype)
    good = random_locs(len(bad), num_slots, torch.int64, gen).tolist()
    loc = torch.tensor([x for pair in zip(good, bad) for x in pair], dtype=loc_dtype, device="cuda")
    k, v = make_src("contiguous", loc.numel(), heads, dim, BF16, gen)
    run_and_check(base, k_cache, v_cache, loc, k, v)


@pytest.mark.parametrize("loc_dtype", [torch.int32, torch.int64], ids=str)
def test_all_out_of_range(loc_dtype, gen):
    guard, num_slots = 4, 32
    k_cache, v_cache, base = make_caches("separate", num_slots, 2, 128, BF16, gen, guard=guard)
    bad = _bad_locs(num_slots, guard, loc_dtype)
    loc = torch.tensor(bad * 20, dtype=loc_dtype, device="cuda")
    k, v = make_src("contiguous", loc.numel(), 2, 128, BF16, gen)
    snapshot = base.clone()
    run_and_check(base, k_cache, v_cache, loc, k, v)
    assert torch.equal(base, snapshot)


def test_zero_slots(gen):
    """A cache with no rows: every location is out of range."""
    k_cache = torch.empty(0, 2, 64, dtype=BF16, device="cuda")
    v_cache = torch.empty(0, 2, 64, dtype=BF16, device="cuda")
    k, v = make_src("contiguous", 5, 2, 64, BF16, gen)
    assert OP(k_cache, v_cache, torch.tensor([0, 1, -1, 5, 2**40], device="cuda"), k, v) is None
    torch.cuda.synchronize()


def test_duplicate_locations(gen):
    """One of the writes wins: every element of a slot written twice comes from one of its
    two source rows, and the other slots are exact."""
    num_slots, heads, dim = 64, 2, 128
    k_cache, v_cache, base = make_caches("pool", num_slots, heads, dim, BF16, gen)
    loc = torch.tensor([5, 9, 5, 11, 9, 3], device="cuda")
    k, v = make_src("contiguous", 6, heads, dim, BF16, gen)
    unique = torch.tensor([True, False, False, True, False, True], device="cuda")
    expected = expected_after(base, k_cache, v_cache, loc[unique], k[unique], v[unique])
    OP(k_cache, v_cache, loc, k, v)
    torch.cuda.synchronize()
    for slot, (i, j) in ((5, (0, 2)), (9, (1, 4))):
        for cache, src in ((k_cache, k), (v_cache, v)):
            got, a, b = _bytes(cache[slot]), _bytes(src[i]), _bytes(src[j])
            assert ((got == a) | (got == b)).all()
            _twin(cache, expected)[slot] = cache[slot]
    assert torch.equal(base, expected)


# ---------------------------------------------------------------------------------------
# SGL_KERNEL_DEBUG=1: an out-of-range location raises (the op syncs)


def test_debug_raises(monkeypatch, gen):
    monkeypatch.setenv("SGL_KERNEL_DEBUG", "1")
    num_slots = 16
    k_cache, v_cache, base = make_caches("pool", num_slots, 2, 64, BF16, gen, guard=2)
    k, v = make_src("contiguous", 4, 2, 64, BF16, gen)
    snapshot = base.clone()
    for bad in (-1, num_slots, 2**40):
        loc = torch.tensor([3, 7, bad, 1], device="cuda")
        with raises_op_error("store_kv_cache", "out_loc", "out of range", f"= {bad}", f"[0, {num_slots})"):
            OP(k_cache, v_cache, loc, k, v)
        # The wrapper passes the error on instead of falling back to indexing.
        with raises_op_error("store_kv_cache", "out_loc", "SGL_KERNEL_DEBUG"):
            sgl_kernel.set_kv_buffer_kernel(k_cache, v_cache, loc, k, v)
    torch.cuda.synchronize()
    assert torch.equal(base, snapshot), "nothing may be written when the op raises"
    # In-range locations still work in debug mode, int32 ones too.
    loc = torch.tensor([3, 7, 0, 15], dtype=torch.int32, device="cuda")
    run_and_check(base, k_cache, v_cache, loc, k, v)
    # "0" switches the checks off: skipped, as without the variable.
    monkeypatch.setenv("SGL_KERNEL_DEBUG", "0")
    run_and_check(base, k_cache, v_cache, torch.tensor([3, -1, 99, 2], device="cuda"), k, v)


def test_debug_under_graph_capture(monkeypatch, gen):
    """The debug check needs a sync, so it is skipped while a graph is captured; replays get
    the kernel's behaviour (out-of-range locations skipped)."""
    monkeypatch.setenv("SGL_KERNEL_DEBUG", "1")
    num_slots = 32
    k_cache, v_cache, base = make_caches("pool", num_slots, 2, 64, BF16, gen, guard=2)
    k, v = make_src("contiguous", 4, 2, 64, BF16, gen)
    loc = torch.tensor([1, 2, 3, 4], device="cuda")
    OP(k_cache, v_cache, loc, k, v)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        OP(k_cache, v_cache, loc, k, v)
    loc.copy_(torch.tensor([5, -1, 40, 6], device="cuda"))
    expected = expected_after(base, k_cache, v_cache, loc, k, v)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(base, expected)


# ---------------------------------------------------------------------------------------
# Empty inputs, the wrapper, opcheck, CUDA graphs, determinism


def test_empty(gen):
    k_cache, v_cache, base = make_caches("pool", 16, 2, 64, BF16, gen)
    snapshot = base.clone()
    k, v = make_src("contiguous", 0, 2, 64, BF16, gen)
    for loc_dtype in (torch.int32, torch.int64):
        loc = torch.empty(0, dtype=loc_dtype, device="cuda")
        assert OP(k_cache, v_cache, loc, k, v) is None
        sgl_kernel.set_kv_buffer_kernel(k_cache, v_cache, loc, k, v)
    # Rows of zero elements (0 bytes is a multiple of 128).
    empty_rows = torch.empty(16, 0, dtype=BF16, device="cuda")
    src = torch.empty(3, 0, dtype=BF16, device="cuda")
    assert OP(empty_rows, empty_rows.clone(), torch.tensor([0, 1, 2], device="cuda"), src, src.clone()) is None
    torch.cuda.synchronize()
    assert torch.equal(base, snapshot)


@pytest.mark.parametrize("cache_layout", ["separate", "pool"])
def test_wrapper(cache_layout, gen):
    """set_kv_buffer_kernel runs the op (which raises nothing here) and returns None."""
    num_slots, n = 200, 50
    k_cache, v_cache, base = make_caches(cache_layout, num_slots, 8, 64, torch.float16, gen)
    k, v = make_src("qkv", n, 8, 64, torch.float16, gen)
    loc = random_locs(n, num_slots, torch.int64, gen)
    expected = expected_after(base, k_cache, v_cache, loc, k, v)
    assert sgl_kernel.set_kv_buffer_kernel(k_cache, v_cache, loc, k, v) is None
    torch.cuda.synchronize()
    assert torch.equal(base, expected)


def test_wrapper_fallback_for_unsupported_row(gen):
    """A 64-byte row is refused by the op (RuntimeError); the wrapper then indexes."""
    num_slots, n = 40, 9
    k_cache, v_cache, base = make_caches("pool", num_slots, 1, 32, BF16, gen)
    k, v = make_src("contiguous", n, 1, 32, BF16, gen)
    loc = random_locs(n, num_slots, torch.int64, gen)
    with raises_op_error("store_kv_cache", "k_cache", "128 bytes"):
        OP(k_cache, v_cache, loc, k, v)
    expected = expected_after(base, k_cache, v_cache, loc, k, v)
    sgl_kernel.set_kv_buffer_kernel(k_cache, v_cache, loc, k, v)
    torch.cuda.synchronize()
    assert torch.equal(base, expected)


def test_wrapper_fallback_flag(gen):
    num_slots, n = 40, 9
    k_cache, v_cache, base = make_caches("pool", num_slots, 2, 128, BF16, gen)
    k, v = make_src("contiguous", n, 2, 128, BF16, gen)
    loc = random_locs(n, num_slots, torch.int32, gen)
    expected = expected_after(base, k_cache, v_cache, loc, k, v)
    sgl_kernel.set_kv_buffer_kernel(k_cache, v_cache, loc, k, v, fallback=True)
    torch.cuda.synchronize()
    assert torch.equal(base, expected)


@pytest.mark.parametrize("layout", ["contiguous", "padded"])
@pytest.mark.parametrize("loc_dtype", [torch.int32, torch.int64], ids=str)
def test_opcheck(layout, loc_dtype, gen):
    # Separate allocations (no two arguments share storage), distinct locations.
    num_slots, n, heads, dim = 48, 11, 2, 64
    if layout == "contiguous":
        k_cache = torch.randn(num_slots, heads, dim, dtype=BF16, device="cuda", generator=gen)
        v_cache = torch.randn(num_slots, heads, dim, dtype=BF16, device="cuda", generator=gen)
    else:
        k_cache = torch.randn(num_slots, heads * dim + 8, dtype=BF16, device="cuda", generator=gen)[:, : heads * dim]
        v_cache = torch.randn(num_slots, heads * dim + 8, dtype=BF16, device="cuda", generator=gen)[:, : heads * dim]
    k = torch.randn(n, heads, dim, dtype=BF16, device="cuda", generator=gen)
    v = torch.randn(n, heads, dim, dtype=BF16, device="cuda", generator=gen)
    loc = random_locs(n, num_slots, loc_dtype, gen)
    torch.library.opcheck(OP, (k_cache, v_cache, loc, k, v))


@pytest.mark.parametrize("n", [1, 16, 128])
def test_cuda_graph(n, gen):
    """Capture the wrapper with static tensors; replays store fresh rows at fresh locations."""
    num_slots, heads, dim = 4096, 8, 128
    k_cache, v_cache, base = make_caches("pool", num_slots, heads, dim, BF16, gen)
    k, v = make_src("qkv", n, heads, dim, BF16, gen)
    loc = random_locs(n, num_slots, torch.int64, gen)

    def refill():
        nk, nv = make_src("contiguous", n, heads, dim, BF16, gen)
        k.copy_(nk.reshape(k.shape))  # k, v are [n, heads * dim] column slices of a qkv tensor
        v.copy_(nv.reshape(v.shape))
        loc.copy_(random_locs(n, num_slots, torch.int64, gen))

    OP(k_cache, v_cache, loc, k, v)  # warm-up outside the capture; the op must not raise
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sgl_kernel.set_kv_buffer_kernel(k_cache, v_cache, loc, k, v)
    for _ in range(3):
        refill()
        expected = expected_after(base, k_cache, v_cache, loc, k, v)
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(base, expected)


def test_deterministic(gen):
    num_slots, n = 512, 300
    k_cache, v_cache, base = make_caches("pool", num_slots, 4, 128, BF16, gen)
    k, v = make_src("qkv", n, 4, 128, BF16, gen)
    loc = random_locs(n, num_slots, torch.int64, gen)
    start = base.clone()
    OP(k_cache, v_cache, loc, k, v)
    first = base.clone()
    base.copy_(start)
    OP(k_cache, v_cache, loc, k, v)
    assert torch.equal(base, first)


# ---------------------------------------------------------------------------------------
# Bad inputs: RuntimeError naming the op and the argument (never another type: the wrapper
# catches RuntimeError to fall back)


def _args(n=4, num_slots=16, heads=2, dim=64, dtype=BF16):
    c = dict(device="cuda", dtype=dtype)
    return {
        "k_cache": torch.zeros(num_slots, heads, dim, **c),
        "v_cache": torch.zeros(num_slots, heads, dim, **c),
        "out_loc": torch.arange(n, device="cuda"),
        "k": torch.ones(n, heads, dim, **c),
        "v": torch.ones(n, heads, dim, **c),
    }


def _rows_not_contiguous(rows: int, fill: float = 0.0) -> torch.Tensor:
    """[rows, 2, 64] with the last two dims transposed in memory."""
    return torch.full((rows, 64, 2), fill, dtype=BF16, device="cuda").transpose(1, 2)


def _with(**changes):
    def make():
        args = _args()
        for key, fn in changes.items():
            args[key] = fn(args[key])
        return args

    return make


BAD = [
    ("row-64-bytes", lambda: _args(heads=1, dim=32), "k_cache", ["128 bytes", "64 bytes"]),
    ("row-192-bytes", lambda: _args(heads=1, dim=96), "k_cache", ["128 bytes", "192 bytes"]),
    ("k_cache-cpu", _with(k_cache=lambda t: t.cpu()), "k_cache", ["CUDA tensor"]),
    ("v_cache-cpu", _with(v_cache=lambda t: t.cpu()), "v_cache", ["device"]),
    ("out_loc-cpu", _with(out_loc=lambda t: t.cpu()), "out_loc", ["device"]),
    ("k-cpu", _with(k=lambda t: t.cpu()), "k", ["device"]),
    ("v-cpu", _with(v=lambda t: t.cpu()), "v", ["device"]),
    ("out_loc-float", _with(out_loc=lambda t: t.float()), "out_loc", ["dtype", "torch.float32"]),
    ("out_loc-int16", _with(out_loc=lambda t: t.short()), "out_loc", ["dtype", "torch.int16"]),
    ("out_loc-2d", _with(out_loc=lambda t: t.view(2, 2)), "out_loc", ["1-D"]),
    ("out_loc-strided", _with(out_loc=lambda t: torch.arange(8, device="cuda")[::2]), "out_loc", ["contiguous"]),
    ("k_cache-0d", _with(k_cache=lambda t: t[0, 0, 0]), "k_cache", ["dimension"]),
    ("v_cache-dtype", _with(v_cache=lambda t: t.half()), "v_cache", ["dtype"]),
    ("v_cache-shape", _with(v_cache=lambda t: torch.zeros(17, 2, 64, dtype=BF16, device="cuda")), "v_cache", ["shape"]),
    ("v_cache-strides", _with(v_cache=lambda t: torch.zeros_like(t).repeat(1, 2, 1)[:, 2:]), "v_cache", ["strides"]),
    (
        "k_cache-rows-not-contiguous",
        _with(k_cache=lambda t: _rows_not_contiguous(16), v_cache=lambda t: _rows_not_contiguous(16)),
        "k_cache",
        ["contiguous rows"],
    ),
    ("k-rows", _with(k=lambda t: torch.ones(5, 2, 64, dtype=BF16, device="cuda")), "k", ["out_loc.shape[0]"]),
    ("k-0d", _with(k=lambda t: t[0, 0, 0], v=lambda t: t[0, 0, 0]), "k", ["dimension"]),
    ("k-dtype", _with(k=lambda t: t.half(), v=lambda t: t.half()), "k", ["dtype"]),
    ("v-dtype", _with(v=lambda t: t.float()), "v", ["dtype"]),
    ("v-strides", _with(v=lambda t: torch.ones_like(t).repeat(1, 2, 1)[:, 2:]), "v", ["strides"]),
    (
        "k-row-size",
        _with(k=lambda t: t[:, :, :32].contiguous(), v=lambda t: t[:, :, :32].contiguous()),
        "k",
        ["rows of 128 elements"],
    ),
    (
        "k-rows-not-contiguous",
        _with(k=lambda t: _rows_not_contiguous(4, 1.0), v=lambda t: _rows_not_contiguous(4, 1.0)),
        "k",
        ["contiguous rows"],
    ),
]


@pytest.mark.parametrize("make, arg, fragments", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input(make, arg, fragments):
    args = make()
    with raises_op_error("store_kv_cache", arg, *fragments):
        OP(args["k_cache"], args["v_cache"], args["out_loc"], args["k"], args["v"])


@pytest.mark.parametrize("row_bytes, k_offset, chunk", [(2**35 + 128, 0, 16), (2**31 + 128, 1, 1)],
                         ids=["16-byte-chunks", "1-byte-chunks"])
def test_size_limit_messages(row_bytes, k_offset, chunk):
    """Rows of more than 2^31 copy chunks are refused before any launch, with the limit and
    the chunk width named (16 bytes when every pointer, row stride and the row size allow it;
    1 byte with k at an odd address). The rows must be contiguous, so the tensors claim 2-32
    GiB over 4 KiB each (fake_extent): nothing reads them."""
    k_cache, v_cache, v = (fake_extent((1, row_bytes), torch.uint8) for _ in range(3))
    k = fake_extent((1, row_bytes), torch.uint8, offset_bytes=k_offset)
    out_loc = torch.zeros(1, dtype=torch.int64, device="cuda")
    with raises_op_error("store_kv_cache", "k_cache", f"at most 2^31 copy chunks of {chunk} bytes",
                         f"rows of {row_bytes} bytes = {row_bytes // chunk} chunks"):
        OP(k_cache, v_cache, out_loc, k, v)


@pytest.mark.parametrize(
    "case", ["row-64-bytes", "row-192-bytes", "out_loc-strided", "k_cache-rows-not-contiguous", "k-rows-not-contiguous"]
)
def test_bad_input_wrapper_falls_back(case):
    """Inputs the op refuses but PyTorch indexing takes: the wrapper stores them anyway."""
    make = next(b[1] for b in BAD if b[0] == case)
    args = make()
    args["k"].copy_(torch.randn(args["k"].shape, device="cuda").to(BF16))
    args["v"].copy_(torch.randn(args["v"].shape, device="cuda").to(BF16))
    expected_k, expected_v = args["k_cache"].clone(), args["v_cache"].clone()
    store_kv_cache_ref(expected_k, expected_v, args["out_loc"], args["k"], args["v"])
    sgl_kernel.set_kv_buffer_kernel(args["k_cache"], args["v_cache"], args["out_loc"], args["k"], args["v"])
    torch.cuda.synchronize()
    assert torch.equal(args["k_cache"], expected_k) and torch.equal(args["v_cache"], expected_v)
