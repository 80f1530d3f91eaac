# SPDX-License-Identifier: Apache-2.0
"""embedding_lookup (API.md 3.3) on the GPU: plain gather and vocab-parallel shards.

Results are a byte copy, so they are compared bit for bit with the reference. The weight
sits between NaN-filled guard rows (and NaN padding columns / padding rows of a shard):
a read outside the rows an index may select would put NaN into the output where the
reference has a value or a zero row. The output sits between NaN guard elements that must
stay NaN. The wrapper's CPU-side checks are tested in test_package.py.
"""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.helpers import fake_extent, raises_op_error
from tests.project.ref_embedding_lookup import embedding_lookup_ref

pytestmark = pytest.mark.gpu

OP = torch.ops.sgl_kernel.embedding_lookup.default
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
BF16 = torch.bfloat16
NAN = float("nan")


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().view(torch.int32 if t.element_size() == 4 else torch.int16)


def check(out: torch.Tensor, weight: torch.Tensor, indices: torch.Tensor, vocab_range=None) -> None:
    torch.cuda.synchronize()
    expected = embedding_lookup_ref(weight, indices, vocab_range)
    assert out.shape == expected.shape and out.dtype == expected.dtype and out.device == weight.device
    assert out.is_contiguous()
    assert torch.equal(_bits(out), _bits(expected)), "output differs from the reference"


def make_weight(vocab: int, d: int, dtype, gen, layout: str = "contiguous", guard: int = 2) -> torch.Tensor:
    """[vocab, d] random rows between ``guard`` NaN rows; "padded": NaN columns after each
    row (row pitch d + 8); "misaligned": one NaN column before and two after (pointer and
    row pitch not 16-byte aligned)."""
    before, after = {"contiguous": (0, 0), "padded": (0, 8), "misaligned": (1, 2)}[layout]
    base = torch.full((guard + vocab + guard, before + d + after), NAN, dtype=dtype, device="cuda")
    weight = base[guard : guard + vocab, before : before + d]
    weight.copy_(torch.randn(vocab, d, dtype=dtype, device="cuda", generator=gen))
    if layout == "contiguous":
        assert weight.is_contiguous()
    return weight


def make_indices(shape, vocab: int, dtype, gen, layout: str = "contiguous", lo: int = 0, hi=None) -> torch.Tensor:
    """Random indices in [lo, hi) (default [0, vocab)) of logical shape ``shape``."""
    hi = vocab if hi is None else hi
    shape = tuple(shape)

    def rand(s):
        return torch.randint(lo, hi, s, device="cuda", generator=gen).to(dtype)

    if layout == "contiguous":
        idx = rand(shape)
    elif layout == "transposed":  # last two dims swapped
        idx = rand((*shape[:-2], shape[-1], shape[-2])).transpose(-1, -2)
    elif layout == "sliced":  # step 2 in every dim
        idx = rand(tuple(2 * s for s in shape))[tuple(slice(None, None, 2) for _ in shape)]
    elif layout == "expanded":  # stride 0 in the first dim
        idx = rand((1, *shape[1:])).expand(shape)
    elif layout == "reversed":  # every dim reversed: nothing merges (10 dims: more than 8)
        idx = rand(shape[::-1]).permute(tuple(range(len(shape) - 1, -1, -1)))
    elif layout == "column":  # a column of a 2-D tensor: 1-D with stride 3
        idx = rand((shape[0], 3))[:, 1]
    else:
        raise AssertionError(layout)
    assert idx.shape == shape, (idx.shape, shape, layout)
    if layout != "contiguous" and idx.numel() > 1:
        assert not idx.is_contiguous(), layout
    return idx


def guarded_out(shape, dtype, offset: int = 0, guard: int = 16):
    """(out, buf): a contiguous ``out`` inside a NaN-filled ``buf``, ``offset`` elements
    past the start of buf's data plus the guard."""
    numel = 1
    for s in shape:
        numel *= s
    buf = torch.full((guard + offset + numel + guard,), NAN, dtype=dtype, device="cuda")
    out = buf[guard + offset : guard + offset + numel].view(shape)
    return out, buf


def check_guards(buf: torch.Tensor, out: torch.Tensor) -> None:
    start = out.storage_offset() - buf.storage_offset()
    assert buf[:start].isnan().all() and buf[start + out.numel() :].isnan().all(), "wrote outside out"


# ---------------------------------------------------------------------------------------
# Plain gather


INDEX_SHAPES = [(), (1,), (7,), (5, 13), (2, 3, 4)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d", [1, 2, 7, 64, 100, 4096])
@pytest.mark.parametrize("shape", INDEX_SHAPES, ids=lambda s: "x".join(map(str, s)) or "scalar")
def test_gather(dtype, d, shape, gen):
    vocab = 1000
    weight = make_weight(vocab, d, dtype, gen)
    indices = make_indices(shape, vocab, torch.int64, gen)
    out = sgl_kernel.embedding_lookup(weight, indices)
    assert out.shape == (*shape, d)
    check(out, weight, indices)


@pytest.mark.parametrize(
    "shape, layout",
    [
        ((33, 17), "transposed"),
        ((4, 5, 6), "transposed"),
        ((33, 17), "sliced"),
        ((3, 4, 5), "sliced"),
        ((9, 40), "expanded"),
        ((100,), "column"),
        ((2, 3, 2, 3, 2, 3, 2, 2), "reversed"),  # 8 dims: read in place
        ((2, 3, 2, 3, 2, 3, 2, 2, 3, 2), "reversed"),  # 10 dims: copied to contiguous first
    ],
    ids=lambda v: "x".join(map(str, v)) if isinstance(v, tuple) else v,
)
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64], ids=str)
def test_index_layouts(shape, layout, idx_dtype, gen):
    vocab, d = 500, 136
    weight = make_weight(vocab, d, BF16, gen)
    indices = make_indices(shape, vocab, idx_dtype, gen, layout)
    out = sgl_kernel.embedding_lookup(weight, indices)
    check(out, weight, indices)


@pytest.mark.parametrize("layout", ["contiguous", "padded", "misaligned"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("d", [1, 3, 8, 64, 1000, 4096])
def test_weight_layouts(layout, dtype, d, gen):
    """Row-strided and misaligned weights (narrower chunks), misaligned outputs."""
    vocab = 300
    weight = make_weight(vocab, d, dtype, gen, layout)
    indices = make_indices((77,), vocab, torch.int32, gen)
    for offset in (0, 1):
        out, buf = guarded_out((77, d), dtype, offset)
        assert sgl_kernel.embedding_lookup(weight, indices, out=out) is out
        check(out, weight, indices)
        check_guards(buf, out)


@pytest.mark.parametrize("rows", [1, 2, 16, 64, 128])
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64], ids=str)
def test_decode_sizes(rows, idx_dtype, gen):
    vocab, d = 32000, 4096
    weight = make_weight(vocab, d, BF16, gen)
    indices = make_indices((rows,), vocab, idx_dtype, gen)
    check(sgl_kernel.embedding_lookup(weight, indices), weight, indices)


@pytest.mark.parametrize(
    "rows, d, dtype, weight_layout, idx_layout, out_offset",
    [
        (300, 4104, BF16, "contiguous", "contiguous", 0),  # 513 chunks: 3 pieces, the last of 1 chunk
        (200, 1000, torch.float32, "padded", "column", 0),  # 250 chunks: one partial piece
        (400, 1027, torch.float16, "misaligned", "contiguous", 1),  # 2-byte chunks: 5 pieces
        (3000, 64, BF16, "contiguous", "column", 0),  # 8 chunks a row: one piece a row
        (24, 32768, torch.float32, "contiguous", "contiguous", 0),  # 8192 chunks: 32 pieces
    ],
)
@pytest.mark.parametrize("vocab_range", [None, (300, 500)], ids=["plain", "shard"])
def test_large_calls(rows, d, dtype, weight_layout, idx_layout, out_offset, vocab_range, gen):
    """Calls above 256 KB (a block a piece of a row): whole, partial and single pieces, narrow
    chunks, strided indices, an output off 16 bytes; out-of-range indices give zero rows (a
    shard of rows 300..799 with indices over 0..999) and nothing is written outside ``out``."""
    vocab = 1000
    weight_rows = vocab if vocab_range is None else vocab_range[1]
    weight = make_weight(weight_rows, d, dtype, gen, weight_layout)
    hi = vocab if vocab_range is not None else weight_rows
    indices = make_indices((rows,), vocab, torch.int64, gen, idx_layout, hi=hi)
    assert rows * d * weight.element_size() > 256 * 1024
    out, buf = guarded_out((rows, d), dtype, out_offset)
    assert sgl_kernel.embedding_lookup(weight, indices, vocab_range=vocab_range, out=out) is out
    check(out, weight, indices, vocab_range)
    check_guards(buf, out)
    if vocab_range is not None:
        assert (out[(indices < 300) | (indices >= 800)] == 0).all()


def test_prefill_size(gen):
    """8192 rows of 4096 bf16 (the benchmark's acceptance shape) from a 128k vocabulary."""
    vocab, d = 128256, 4096
    weight = make_weight(vocab, d, BF16, gen, guard=0)
    indices = make_indices((8192,), vocab, torch.int32, gen)
    check(sgl_kernel.embedding_lookup(weight, indices), weight, indices)


@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("d", [64, 7])
def test_out_of_range_gives_zero_rows(idx_dtype, d, gen):
    """Plain gather: an index outside [0, V) gives a zero row and reads nothing (the NaN
    guard rows around the weight would show up in the output)."""
    vocab, guard = 50, 4
    weight = make_weight(vocab, d, torch.float16, gen, guard=guard)
    info = torch.iinfo(idx_dtype)
    bad = [-1, -guard, vocab, vocab + guard - 1, info.max, info.min, info.min + 1]
    if idx_dtype == torch.int64:
        bad += [2**40, -(2**40), 2**31]
    good = make_indices((len(bad),), vocab, torch.int64, gen).tolist()
    indices = torch.tensor([x for pair in zip(good, bad) for x in pair], dtype=idx_dtype, device="cuda")
    out, buf = guarded_out((indices.numel(), d), torch.float16)
    sgl_kernel.embedding_lookup(weight, indices, out=out)
    check(out, weight, indices)
    check_guards(buf, out)
    assert not out.isnan().any()
    assert (out[1::2] == 0).all() and not torch.signbit(out[1::2]).any(), "zero rows are +0.0"


def test_empty_vocabulary(gen):
    """V = 0: every index is out of range; zero rows."""
    weight = torch.empty(0, 32, dtype=BF16, device="cuda")
    indices = torch.tensor([0, 1, -1], device="cuda")
    out = sgl_kernel.embedding_lookup(weight, indices)
    torch.cuda.synchronize()
    assert out.shape == (3, 32) and (out == 0).all()


# ---------------------------------------------------------------------------------------
# Vocab-parallel shards


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("idx_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("d", [64, 5, 4096])
def test_vocab_parallel_shards(dtype, idx_dtype, d, gen):
    """Four shards of a 1000-row vocabulary, each padded to 256 rows (NaN padding, never
    read); the sum over shards is the full embedding."""
    full_vocab, shards, padded = 1000, 4, 256
    full = torch.randn(full_vocab, d, dtype=dtype, device="cuda", generator=gen)
    indices = make_indices((6, 37), full_vocab, idx_dtype, gen, lo=-3, hi=full_vocab + 3)
    total = torch.zeros(6, 37, d, dtype=torch.float32, device="cuda")
    for s in range(shards):
        start, length = s * 250, 250
        base = torch.full((2 + padded + 2, d), NAN, dtype=dtype, device="cuda")
        weight = base[2 : 2 + padded]
        weight[:length] = full[start : start + length]
        out = sgl_kernel.embedding_lookup(weight, indices, vocab_range=(start, length))
        check(out, weight, indices, (start, length))
        assert not out.isnan().any(), "read a padding row"
        total += out.float()
    valid = ((indices >= 0) & (indices < full_vocab)).unsqueeze(-1)
    expected = torch.where(valid, full[indices.long().clamp(0, full_vocab - 1)].float(), torch.zeros_like(total))
    torch.testing.assert_close(total, expected, rtol=0, atol=0)


@pytest.mark.parametrize(
    "start, length, vocab",
    [
        (0, 100, 100),  # the whole weight: same as a plain gather for in-range indices
        (0, 1, 100),
        (99, 1, 100),
        (12345, 77, 100),
        (2**40, 100, 128),  # offsets past int32 (int64 indices)
    ],
)
def test_vocab_range_edges(start, length, vocab, gen):
    weight = make_weight(vocab, 48, BF16, gen)
    lo, hi = max(start - 5, -(2**62)), start + length + 5
    indices = torch.randint(lo, hi, (300,), device="cuda", generator=gen)
    indices[:3] = torch.tensor([start, start + length - 1, start + length], device="cuda")
    out = sgl_kernel.embedding_lookup(weight, indices, vocab_range=(start, length))
    check(out, weight, indices, (start, length))
    torch.testing.assert_close(out[0], weight[0], rtol=0, atol=0)
    torch.testing.assert_close(out[1], weight[length - 1], rtol=0, atol=0)
    assert (out[2] == 0).all()


# ---------------------------------------------------------------------------------------
# SGL_KERNEL_DEBUG=1


def test_debug_raises_for_plain_gather(monkeypatch, gen):
    monkeypatch.setenv("SGL_KERNEL_DEBUG", "1")
    vocab = 40
    weight = make_weight(vocab, 16, BF16, gen)
    for bad in (-1, vocab, 2**40):
        indices = torch.tensor([3, 7, bad, 1], device="cuda")
        with raises_op_error("embedding_lookup", "indices", "out of range", f"= {bad}", f"[0, {vocab})"):
            sgl_kernel.embedding_lookup(weight, indices)
    # Multi-dimensional indices: the position is given in the flattened order.
    indices = torch.tensor([[1, 2], [3, -7]], dtype=torch.int32, device="cuda")
    with raises_op_error("embedding_lookup", "indices", ".flatten()[3] = -7"):
        sgl_kernel.embedding_lookup(weight, indices)
    # In range: fine; vocab-parallel: out-of-shard indices are not errors.
    indices = make_indices((9,), vocab, torch.int64, gen)
    check(sgl_kernel.embedding_lookup(weight, indices), weight, indices)
    indices = torch.tensor([-1, 0, 5, 39, 40, 2**40], device="cuda")
    check(sgl_kernel.embedding_lookup(weight, indices, vocab_range=(5, 30)), weight, indices, (5, 30))
    monkeypatch.setenv("SGL_KERNEL_DEBUG", "0")
    check(sgl_kernel.embedding_lookup(weight, indices), weight, indices)


# ---------------------------------------------------------------------------------------
# Empty inputs, opcheck, CUDA graphs, determinism


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_empty(dtype, gen):
    weight = make_weight(10, 8, dtype, gen)
    for shape in ((0,), (3, 0), (0, 5)):
        indices = torch.empty(shape, dtype=torch.int64, device="cuda")
        out = sgl_kernel.embedding_lookup(weight, indices)
        assert out.shape == (*shape, 8) and out.dtype == dtype
        assert sgl_kernel.embedding_lookup(weight, indices, vocab_range=(0, 5)).shape == (*shape, 8)
    empty_rows = torch.empty(10, 0, dtype=dtype, device="cuda")
    out = sgl_kernel.embedding_lookup(empty_rows, torch.tensor([1, 2], device="cuda"))
    assert out.shape == (2, 0)
    torch.cuda.synchronize()


@pytest.mark.parametrize("vocab_range", [None, (100, 200)])
@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_opcheck(vocab_range, layout, gen):
    weight = make_weight(300, 40, BF16, gen, guard=0)
    # Plain gather: in-range indices only; a shard: indices across the full vocabulary.
    indices = make_indices((6, 9), 300 if vocab_range is None else 400, torch.int64, gen, layout)
    start, length = (0, -1) if vocab_range is None else vocab_range
    out = torch.empty(6, 9, 40, dtype=BF16, device="cuda")
    torch.library.opcheck(OP, (out, weight, indices, start, length))


@pytest.mark.parametrize("rows", [1, 128])
def test_cuda_graph(rows, gen):
    vocab, d = 32000, 4096
    weight = make_weight(vocab, d, BF16, gen, guard=0)
    indices = make_indices((rows,), vocab, torch.int64, gen)

    def step():
        return (
            sgl_kernel.embedding_lookup(weight, indices),  # out allocated inside the capture
            sgl_kernel.embedding_lookup(weight, indices, vocab_range=(1000, 8000)),
        )

    step()  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        plain, shard = step()
    for _ in range(3):
        indices.copy_(make_indices((rows,), vocab, torch.int64, gen))
        plain.fill_(NAN)
        shard.fill_(NAN)
        graph.replay()
        check(plain, weight, indices)
        check(shard, weight, indices, (1000, 8000))


def test_deterministic(gen):
    weight = make_weight(1000, 520, BF16, gen)
    indices = make_indices((513,), 1000, torch.int64, gen)
    assert torch.equal(_bits(sgl_kernel.embedding_lookup(weight, indices)), _bits(sgl_kernel.embedding_lookup(weight, indices)))


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops: the C++ checks protect direct callers too)


def _args(**changes):
    c = dict(device="cuda")
    args = {
        "out": torch.empty(4, 8, dtype=BF16, **c),
        "weight": torch.randn(10, 8, dtype=BF16, **c),
        "indices": torch.tensor([1, 2, 3, 4], **c),
        "vocab_start": 0,
        "vocab_length": -1,
    }
    for key, fn in changes.items():
        args[key] = fn(args[key])
    return args


BAD = [
    ("weight-cpu", dict(weight=lambda t: t.cpu()), "weight", ["CUDA tensor"]),
    ("indices-cpu", dict(indices=lambda t: t.cpu()), "indices", ["device"]),
    ("out-cpu", dict(out=lambda t: t.cpu()), "out", ["device"]),
    ("weight-int32", dict(weight=lambda t: t.int(), out=lambda t: t.int()), "weight", ["dtype", "torch.int32"]),
    ("weight-fp64", dict(weight=lambda t: t.double(), out=lambda t: t.double()), "weight", ["dtype", "torch.float64"]),
    ("indices-float", dict(indices=lambda t: t.float()), "indices", ["dtype", "torch.float32"]),
    ("indices-int16", dict(indices=lambda t: t.short()), "indices", ["dtype", "torch.int16"]),
    ("out-dtype", dict(out=lambda t: t.half()), "out", ["dtype"]),
    ("weight-1d", dict(weight=lambda t: t[0]), "weight", ["2-D"]),
    ("weight-3d", dict(weight=lambda t: t.view(10, 2, 4)), "weight", ["2-D"]),
    ("weight-transposed", dict(weight=lambda t: torch.randn(8, 10, dtype=BF16, device="cuda").t()), "weight", ["contiguous"]),
    ("out-rank", dict(out=lambda t: t.view(4, 8, 1)), "out", ["2-D"]),
    ("out-leading", dict(out=lambda t: torch.empty(5, 8, dtype=BF16, device="cuda")), "out", ["leading dimensions"]),
    ("out-last", dict(out=lambda t: torch.empty(4, 9, dtype=BF16, device="cuda")), "out", ["weight.shape[1]"]),
    ("out-strided", dict(out=lambda t: torch.empty(4, 16, dtype=BF16, device="cuda")[:, :8]), "out", ["contiguous"]),
    ("start-plain", dict(vocab_start=lambda v: 3), "vocab_start", ["must be 0"]),
    ("start-negative", dict(vocab_start=lambda v: -1, vocab_length=lambda v: 5), "vocab_start", [">= 0"]),
    ("length-zero", dict(vocab_length=lambda v: 0), "vocab_length", ["[1, 10]"]),
    ("length-too-long", dict(vocab_length=lambda v: 11), "vocab_length", ["[1, 10]", "11"]),
]


@pytest.mark.parametrize("changes, arg, fragments", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input(changes, arg, fragments):
    a = _args(**changes)
    with raises_op_error("embedding_lookup", arg, *fragments):
        OP(a["out"], a["weight"], a["indices"], a["vocab_start"], a["vocab_length"])


@pytest.mark.parametrize("d, out_offset, chunk", [(2**34 + 8, 0, 16), (2**31 + 8, 2, 2)],
                         ids=["16-byte-chunks", "2-byte-chunks"])
def test_size_limit_messages(d, out_offset, chunk):
    """Rows of more than 2^31 copy chunks are refused before any launch, with the limit and
    the chunk width named (16 bytes when every pointer, row stride and the row size allow it;
    2 bytes with out 2 bytes off). weight's rows and out must be dense, so they claim 4-32 GiB
    over 4 KiB each (fake_extent): nothing reads them."""
    weight = fake_extent((1, d), torch.float16)
    out = fake_extent((1, d), torch.float16, offset_bytes=out_offset)
    indices = torch.zeros(1, dtype=torch.int64, device="cuda")
    with raises_op_error("embedding_lookup", "weight", f"at most 2^31 copy chunks of {chunk} bytes",
                         f"rows of {2 * d} bytes = {2 * d // chunk} chunks"):
        OP(out, weight, indices, 0, -1)


def test_wrapper_bad_vocab_range():
    weight = torch.randn(10, 8, device="cuda")
    indices = torch.tensor([1, 2], device="cuda")
    with raises_op_error("embedding_lookup", "vocab_length", "[1, 10]"):
        sgl_kernel.embedding_lookup(weight, indices, vocab_range=(0, 11))
    for bad in ((0, 0), (-1, 5), (1, -1)):
        with pytest.raises(ValueError, match="embedding_lookup"):
            sgl_kernel.embedding_lookup(weight, indices, vocab_range=bad)
