# SPDX-License-Identifier: Apache-2.0
"""shuffle_rows (API.md 2.3, exported by sgl_kernel.gemm) on the GPU: ``output[i] =
input[dst2src_map[i]]``.

The op is a byte copy of rows, so every dtype is compared bit for bit (as uint8) with a torch
gather. ``input`` sits between guard rows and guard columns of a fixed byte pattern: a read
outside the rows a map entry may select would put that pattern into the output where the
reference has data or a zero row. ``output`` sits between guard bytes that must stay as they
were. The wrapper's CPU-side behaviour (signature, fake tensors, CPU rejection) is tested in
test_package.py.
"""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.helpers import raises_op_error

pytestmark = pytest.mark.gpu

OP = torch.ops.sgl_kernel.shuffle_rows.default
BF16 = torch.bfloat16
FP8 = torch.float8_e4m3fn
GUARD_BYTE = 0xA5  # never produced by the zero rows; random data hits it 1 in 256 per byte
DTYPES = (torch.float16, BF16, torch.float32, FP8, torch.float8_e5m2, torch.uint8, torch.int8, torch.int32)


def _bytes(t: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as uint8, one row of ``t`` a row (2-D ``t``)."""
    return t.contiguous().view(torch.uint8)


def shuffle_rows_ref(x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
    """``x[idx]`` on the bytes; entries outside ``[0, N)`` give rows of zero bytes (the op's
    documented answer)."""
    n = x.shape[0]
    src = _bytes(x)
    i = idx.long()
    valid = (i >= 0) & (i < n)
    out = torch.zeros((idx.numel(), src.shape[1]), dtype=torch.uint8, device=x.device)
    out[valid] = src[i[valid]]
    return out


def random_rows(shape, dtype, gen) -> torch.Tensor:
    """Random values of every bit pattern class the dtype has (the op moves bytes)."""
    if dtype.is_floating_point:
        return (torch.randn(shape, device="cuda", generator=gen) * 3).to(dtype)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, device="cuda", generator=gen).to(dtype)


def make_input(rows: int, cols: int, dtype, gen, layout: str = "contiguous", guard: int = 2) -> torch.Tensor:
    """[rows, cols] random data inside a buffer of guard bytes: guard rows above and below;
    "padded": 8 guard columns after each row (row stride cols + 8); "misaligned": one guard
    column before and two after (pointer and row stride not 16-byte aligned for most dtypes)."""
    before, after = {"contiguous": (0, 0), "padded": (0, 8), "misaligned": (1, 2)}[layout]
    elt = torch.empty((), dtype=dtype).element_size()
    base = torch.full((guard + rows + guard, (before + cols + after) * elt), GUARD_BYTE, dtype=torch.uint8,
                      device="cuda")
    view = base.view(dtype)  # [.., before + cols + after]
    x = view[guard : guard + rows, before : before + cols]
    x.copy_(random_rows((rows, cols), dtype, gen))
    if layout == "contiguous":
        assert x.is_contiguous()
    return x


def make_map(r: int, n: int, dtype, gen, kind: str = "random") -> torch.Tensor:
    """[r] map entries in [0, n): "random" (repeats allowed), "permutation" (r == n), "strided"
    (a column of a [r, 3] tensor: stride 3)."""
    if kind == "permutation":
        assert r == n
        return torch.randperm(n, device="cuda", generator=gen).to(dtype)
    if kind == "strided":
        m = torch.randint(0, n, (r, 3), device="cuda", generator=gen).to(dtype)[:, 1]
        assert m.stride(0) == 3
        return m
    return torch.randint(0, n, (r,), device="cuda", generator=gen).to(dtype)


def guarded_output(r: int, cols: int, dtype, offset_bytes: int = 0, guard: int = 64):
    """(out, buf): a contiguous ``out`` [r, cols] inside a uint8 ``buf`` of guard bytes,
    ``offset_bytes`` past the guard (offset a multiple of the element size)."""
    elt = torch.empty((), dtype=dtype).element_size()
    assert offset_bytes % elt == 0
    nbytes = r * cols * elt
    buf = torch.full((guard + offset_bytes + nbytes + guard,), GUARD_BYTE, dtype=torch.uint8, device="cuda")
    start = guard + offset_bytes
    out = buf[start : start + nbytes].view(dtype).view(r, cols)
    return out, buf, start, start + nbytes


def check(out: torch.Tensor, x: torch.Tensor, idx: torch.Tensor) -> None:
    torch.cuda.synchronize()
    assert out.shape == (idx.numel(), x.shape[1]) and out.dtype == x.dtype and out.device == x.device
    assert out.is_contiguous()
    expected = shuffle_rows_ref(x, idx)
    got = _bytes(out)
    if not torch.equal(got, expected):
        bad = (got != expected).any(-1).nonzero().flatten()
        raise AssertionError(f"{bad.numel()} of {idx.numel()} rows differ, first {bad[:5].tolist()}")


def check_guards(buf: torch.Tensor, start: int, end: int) -> None:
    assert (buf[:start] == GUARD_BYTE).all() and (buf[end:] == GUARD_BYTE).all(), "wrote outside output"


# ---------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("cols", [1, 3, 16, 56, 100, 2048, 7168])
@pytest.mark.parametrize("r", [1, 7, 333])
def test_gather(dtype, cols, r, gen):
    n = 97
    x = make_input(n, cols, dtype, gen)
    idx = make_map(r, n, torch.int32, gen)
    out = sgl_kernel.shuffle_rows(x, idx, (r, cols))
    check(out, x, idx)


@pytest.mark.parametrize("map_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("kind", ["random", "permutation", "strided"])
@pytest.mark.parametrize("dtype", [BF16, FP8, torch.float32], ids=str)
def test_map_kinds(map_dtype, kind, dtype, gen):
    n, cols = 256, 512
    x = make_input(n, cols, dtype, gen)
    idx = make_map(n, n, map_dtype, gen, kind)
    check(sgl_kernel.shuffle_rows(x, idx, (n, cols)), x, idx)


@pytest.mark.parametrize("layout", ["padded", "misaligned"])
@pytest.mark.parametrize("dtype", [BF16, FP8, torch.float32, torch.uint8], ids=str)
@pytest.mark.parametrize("cols", [8, 128, 4100])
def test_input_layouts(layout, dtype, cols, gen):
    """Row strides off the row size and pointers off 16-byte alignment: narrower chunks, the
    same bytes."""
    n, r = 50, 200
    x = make_input(n, cols, dtype, gen, layout)
    idx = make_map(r, n, torch.int32, gen)
    check(sgl_kernel.shuffle_rows(x, idx, (r, cols)), x, idx)


@pytest.mark.parametrize("dtype", [BF16, FP8], ids=str)
@pytest.mark.parametrize("offset_bytes", [0, 2, 8])
@pytest.mark.parametrize("r, cols", [(3, 64), (4096, 7168), (33000, 136)])
def test_guarded_output(dtype, offset_bytes, r, cols, gen):
    """The op writes exactly the output's bytes, at any output alignment, on the small-call
    kernel and on the large-call one (over 256 KB of output)."""
    if offset_bytes % torch.empty((), dtype=dtype).element_size():
        pytest.skip("offset not a multiple of the element size")
    n = 1000
    x = make_input(n, cols, dtype, gen)
    idx = make_map(r, n, torch.int32, gen)
    out, buf, start, end = guarded_output(r, cols, dtype, offset_bytes)
    OP(x, idx, out)
    check(out, x, idx)
    check_guards(buf, start, end)


@pytest.mark.parametrize("map_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("dtype, cols, layout", [
    (torch.float32, 56, "contiguous"),   # 224 B: 14 chunks of 16 B
    (torch.float32, 64, "contiguous"),   # 256 B: 16 chunks, the longest rows of 32 a warp
    (torch.float32, 68, "contiguous"),   # 272 B: 17 chunks, the flat grid
    (BF16, 64, "padded"),                # 128 B rows 144 B apart: 8 chunks of 16 B
    (BF16, 15, "misaligned"),            # 30 B rows at odd addresses: 15 chunks of 2 B
    (torch.uint8, 7, "contiguous"),      # 7 B: 7 chunks of 1 B
    (FP8, 32, "misaligned"),             # 32 B at 1-byte offsets: 1-byte chunks (too many: flat)
])
def test_many_short_rows(map_dtype, dtype, cols, layout, gen):
    """Many short rows (R >= 32768: 32 rows a warp where a row has at most 16 chunks), with a
    partial last warp and block, out-of-range entries, a strided map and a guarded output at
    an odd offset."""
    n, r = 5000, 40000 + 7
    x = make_input(n, cols, dtype, gen, layout)
    idx = make_map(r, n, map_dtype, gen, "strided")
    bad = torch.randint(0, r, (50,), device="cuda", generator=gen)
    idx[bad] = torch.tensor([-1, n], dtype=map_dtype, device="cuda").repeat(25)
    elt = torch.empty((), dtype=dtype).element_size()
    out, buf, start, end = guarded_output(r, cols, dtype, 2 * elt)
    OP(x, idx, out)
    check(out, x, idx)
    check_guards(buf, start, end)
    check(sgl_kernel.shuffle_rows(x, idx.contiguous(), (r, cols)), x, idx)


@pytest.mark.parametrize("r", [1, 16, 128, 4096, 32768])
def test_moe_shapes(r, gen):
    """What SGLang's CUTLASS MoE path sends: fp8 activations of a hidden size and their fp32
    group scales (hidden / 128 of them), R = tokens * topk rows gathered from tokens rows."""
    topk, hidden = 8, 7168
    tokens = max(1, r // topk)
    a = make_input(tokens, hidden, FP8, gen)
    scales = make_input(tokens, hidden // 128, torch.float32, gen)
    idx = torch.randint(0, tokens, (r,), device="cuda", generator=gen, dtype=torch.int32)
    check(sgl_kernel.shuffle_rows(a, idx, (r, hidden)), a, idx)
    check(sgl_kernel.shuffle_rows(scales, idx, (r, hidden // 128)), scales, idx)


@pytest.mark.parametrize("map_dtype", [torch.int32, torch.int64], ids=str)
def test_out_of_range_gives_zero_rows(map_dtype, gen):
    n, cols = 40, 96
    x = make_input(n, cols, BF16, gen)
    hi = 2**31 - 1 if map_dtype == torch.int32 else 2**40
    lo = -(2**31) if map_dtype == torch.int32 else -(2**40)
    idx = torch.tensor([0, -1, n, n - 1, hi, lo, 5, n + 1], dtype=map_dtype, device="cuda")
    out = sgl_kernel.shuffle_rows(x, idx, (idx.numel(), cols))
    check(out, x, idx)
    torch.cuda.synchronize()
    assert (out[[1, 2, 4, 5, 7]].view(torch.int16) == 0).all()


def test_empty_input_rows(gen):
    """input with no rows: every entry is out of range, every output row zero."""
    x = torch.empty(0, 64, dtype=BF16, device="cuda")
    idx = torch.tensor([0, 3], dtype=torch.int32, device="cuda")
    out = sgl_kernel.shuffle_rows(x, idx, (2, 64))
    torch.cuda.synchronize()
    assert out.shape == (2, 64) and (out.view(torch.int16) == 0).all()


def test_debug_raises(monkeypatch, gen):
    monkeypatch.setenv("SGL_KERNEL_DEBUG", "1")
    n = 40
    x = make_input(n, 16, BF16, gen)
    for bad in (-1, n, 2**31 - 1):
        idx = torch.tensor([3, 7, bad, 1], dtype=torch.int32, device="cuda")
        with raises_op_error("shuffle_rows", "dst2src_map", "out of range", f"= {bad}", f"[0, {n})"):
            sgl_kernel.shuffle_rows(x, idx, (4, 16))
    idx = make_map(9, n, torch.int32, gen)
    check(sgl_kernel.shuffle_rows(x, idx, (9, 16)), x, idx)
    monkeypatch.setenv("SGL_KERNEL_DEBUG", "0")
    idx = torch.tensor([3, -1], dtype=torch.int32, device="cuda")
    check(sgl_kernel.shuffle_rows(x, idx, (2, 16)), x, idx)


# ---------------------------------------------------------------------------------------
# Empty calls, opcheck, CUDA graphs, determinism


def test_empty(gen):
    x = make_input(10, 8, BF16, gen)
    out = sgl_kernel.shuffle_rows(x, torch.empty(0, dtype=torch.int32, device="cuda"), (0, 8))
    assert out.shape == (0, 8)
    no_cols = torch.empty(10, 0, dtype=BF16, device="cuda")
    out = sgl_kernel.shuffle_rows(no_cols, torch.tensor([1, 2], dtype=torch.int32, device="cuda"), (2, 0))
    assert out.shape == (2, 0)
    torch.cuda.synchronize()


@pytest.mark.parametrize("dtype", [BF16, torch.float32, torch.uint8], ids=str)
def test_opcheck(dtype, gen):
    n, r, cols = 300, 517, 40
    x = make_input(n, cols, dtype, gen, guard=0)
    idx = make_map(r, n, torch.int32, gen)
    out = torch.empty(r, cols, dtype=dtype, device="cuda")
    torch.library.opcheck(OP, (x, idx, out))


@pytest.mark.parametrize("r", [1, 128, 8192])
def test_cuda_graph(r, gen):
    n, cols = 4096, 7168
    x = make_input(n, cols, FP8, gen, guard=0)
    idx = make_map(r, n, torch.int32, gen)

    def step():
        return sgl_kernel.shuffle_rows(x, idx, (r, cols))  # output allocated inside the capture

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for _ in range(3):
        idx.copy_(make_map(r, n, torch.int32, gen))
        x.copy_(random_rows((n, cols), FP8, gen))
        out.view(torch.uint8).fill_(GUARD_BYTE)
        graph.replay()
        check(out, x, idx)


def test_deterministic(gen):
    x = make_input(1000, 520, BF16, gen)
    idx = make_map(513, 1000, torch.int32, gen)
    a = sgl_kernel.shuffle_rows(x, idx, (513, 520))
    b = sgl_kernel.shuffle_rows(x, idx, (513, 520))
    assert torch.equal(_bytes(a), _bytes(b))


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops: the C++ checks protect direct callers too)


def _args(**changes):
    c = dict(device="cuda")
    args = {
        "input": torch.randn(10, 8, **c).to(BF16),
        "dst2src_map": torch.tensor([1, 2, 3, 4], dtype=torch.int32, **c),
        "output": torch.empty(4, 8, dtype=BF16, **c),
    }
    for key, fn in changes.items():
        args[key] = fn(args[key])
    return args


BAD = [
    ("input-cpu", dict(input=lambda t: t.cpu()), "input", ["CUDA tensor"]),
    ("map-cpu", dict(dst2src_map=lambda t: t.cpu()), "dst2src_map", ["device"]),
    ("output-cpu", dict(output=lambda t: t.cpu()), "output", ["device"]),
    ("map-float", dict(dst2src_map=lambda t: t.float()), "dst2src_map", ["dtype", "torch.float32"]),
    ("map-int16", dict(dst2src_map=lambda t: t.short()), "dst2src_map", ["dtype", "torch.int16"]),
    ("output-dtype", dict(output=lambda t: t.half()), "output", ["dtype"]),
    ("input-1d", dict(input=lambda t: t[0]), "input", ["2-D"]),
    ("input-3d", dict(input=lambda t: t.view(10, 2, 4)), "input", ["2-D"]),
    ("map-2d", dict(dst2src_map=lambda t: t.view(2, 2)), "dst2src_map", ["1-D"]),
    ("output-1d", dict(output=lambda t: t.view(-1)), "output", ["2-D"]),
    ("input-transposed", dict(input=lambda t: torch.randn(8, 10, device="cuda").to(BF16).t()), "input",
     ["contiguous"]),
    ("output-rows", dict(output=lambda t: torch.empty(5, 8, dtype=BF16, device="cuda")), "output",
     ["dst2src_map.shape[0]"]),
    ("output-cols", dict(output=lambda t: torch.empty(4, 9, dtype=BF16, device="cuda")), "output",
     ["input.shape[1]"]),
    ("output-strided", dict(output=lambda t: torch.empty(4, 16, dtype=BF16, device="cuda")[:, :8]), "output",
     ["contiguous"]),
    ("output-expanded", dict(output=lambda t: t[:1].expand(4, 8)), "output", ["contiguous"]),
]


@pytest.mark.parametrize("changes, arg, fragments", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input(changes, arg, fragments):
    a = _args(**changes)
    with raises_op_error("shuffle_rows", arg, *fragments):
        OP(a["input"], a["dst2src_map"], a["output"])


def test_wrapper_shape_mismatch():
    x = torch.randn(10, 8, device="cuda").to(BF16)
    idx = torch.tensor([1, 2, 3], dtype=torch.int32, device="cuda")
    with raises_op_error("shuffle_rows", "output", "dst2src_map.shape[0]"):
        sgl_kernel.shuffle_rows(x, idx, (4, 8))
    with raises_op_error("shuffle_rows", "output", "input.shape[1]"):
        sgl_kernel.shuffle_rows(x, idx, (3, 16))
