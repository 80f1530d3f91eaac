# SPDX-License-Identifier: Apache-2.0
"""moe_sum / moe_sum_reduce (API.md 2.4) on the GPU: ``output[t] = sum_j input[t, j]`` and
``output[t] = routed_scaling_factor * sum_j input[t, j]`` for ``input`` ``[T, k, H]``.

Every result is compared bit for bit with tests/moe/ref_moe_sum.py's in-order fp32 sum (the
op's documented arithmetic: start from ``input[:, 0]``, add the other rows in order in fp32,
multiply once by the factor, round once; NaN wherever that is NaN), and, for finite data, with
the fp64 reference under the API 1.6 tolerances. Outputs are poisoned (NaN) before each call
and sit inside guard elements that must stay untouched; inputs come in several layouts
(padded rows, tokens or expert rows with a pitch, transposed, odd pitches, one element off
16-byte alignment), so the kernel's 16-byte, narrower and one-element paths all run.
"""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.helpers import raises_op_error
from tests.moe.ref_moe_sum import moe_sum_inorder, moe_sum_ref
from tests.tolerances import elementwise_tol

pytestmark = pytest.mark.gpu

OPS = ("moe_sum", "moe_sum_reduce")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
BF16 = torch.bfloat16
NAN = float("nan")
GUARD = -7.75  # exact in every dtype; what the guard elements around an output hold
SCALE = 2.5  # moe_sum_reduce's factor where a test does not vary it


def _op(name: str):
    return getattr(torch.ops.sgl_kernel, name).default


def _values(shape, dtype, gen) -> torch.Tensor:
    """Random values spread over ~2^12 of magnitude (so that the order of an fp32 sum changes
    its rounding), finite in every dtype."""
    x = torch.randn(shape, device="cuda", generator=gen)
    e = torch.randint(-6, 7, shape, device="cuda", generator=gen).float()
    return (x * torch.exp2(e)).to(dtype)


IN_LAYOUTS = ("contiguous", "k_pitch", "token_pitch", "expert_major", "odd_pitch", "misaligned")


def make_input(t: int, k: int, h: int, dtype, gen, layout: str = "contiguous") -> torch.Tensor:
    """``[t, k, h]`` random values, last dim contiguous, in one of IN_LAYOUTS:
    contiguous; k_pitch: rows h + 8 apart (``[t, k, h + 8][..., :h]``); token_pitch: rows
    1..k of ``[t, k + 2, h]`` (token pitch (k + 2) h, base h elements in); expert_major:
    ``[k, t, h].transpose(0, 1)`` (token pitch h, expert pitch t h); odd_pitch: rows h + 1
    apart (odd element offsets); misaligned: contiguous, one element past an aligned start."""
    if layout == "contiguous":
        x = _values((t, k, h), dtype, gen)
        assert x.is_contiguous()
    elif layout == "k_pitch":
        x = _values((t, k, h + 8), dtype, gen)[..., :h]
    elif layout == "token_pitch":
        x = _values((t, k + 2, h), dtype, gen)[:, 1 : k + 1]
    elif layout == "expert_major":
        x = _values((k, t, h), dtype, gen).transpose(0, 1)
    elif layout == "odd_pitch":
        x = _values((t, k, h + 1), dtype, gen)[..., :h]
    elif layout == "misaligned":
        x = _values((t * k * h + 1,), dtype, gen)[1:].view(t, k, h)
    else:
        raise ValueError(layout)
    assert x.shape == (t, k, h) and (h <= 1 or x.stride(-1) == 1)
    return x


# out layout -> (row pitch extra elements, offset in elements)
OUT_LAYOUTS = {"contiguous": (0, 0), "pitch": (16, 0), "odd_pitch": (3, 0), "misaligned": (0, 1)}


class GuardedOut:
    """A ``[t, h]`` output (row pitch h + extra, ``offset`` elements past an aligned start)
    inside a flat buffer of GUARD elements; the output itself is poisoned with NaN."""

    def __init__(self, t: int, h: int, dtype, layout: str = "contiguous", guard: int = 64):
        extra, offset = OUT_LAYOUTS[layout]
        pitch = h + extra
        start = guard + offset
        self.buf = torch.full((start + t * pitch + guard,), GUARD, dtype=dtype, device="cuda")
        self.out = self.buf.as_strided((t, h), (pitch, 1), start)
        self.out.fill_(NAN)
        idx = start + (torch.arange(t, device="cuda")[:, None] * pitch + torch.arange(h, device="cuda")[None]).flatten()
        self.outside = torch.ones(self.buf.numel(), dtype=torch.bool, device="cuda")
        self.outside[idx] = False

    def check_guards(self) -> None:
        kept = self.buf[self.outside]
        assert bool((kept == GUARD).all()), f"{int((kept != GUARD).sum())} elements outside the output changed"


def run(op: str, x: torch.Tensor, out: torch.Tensor, scale: float = SCALE) -> None:
    """Through the public wrapper (it returns None)."""
    if op == "moe_sum":
        assert sgl_kernel.moe_sum(x, out) is None
    else:
        assert sgl_kernel.moe_sum_reduce(x, out, scale) is None


def assert_same_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    """Bitwise equality, NaN wherever ``want`` is NaN (payloads are not part of the contract)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), (
        f"{int((torch.isnan(got) != nan).sum())} NaN positions differ (a NaN where the sum is not, or not where it is)"
    )
    ints = {2: torch.int16, 4: torch.int32}[got.element_size()]
    bad = (got.contiguous().view(ints) != want.contiguous().view(ints)) & ~nan
    if bool(bad.any()):
        where = bad.nonzero()[:3].tolist()
        raise AssertionError(f"{int(bad.sum())} of {got.numel()} elements differ from the in-order fp32 sum; "
                             f"first at {where}: got {got[bad][:3].tolist()}, expected {want[bad][:3].tolist()}")


def check(op: str, out: torch.Tensor, x: torch.Tensor, scale: float = SCALE) -> None:
    torch.cuda.synchronize()
    s = None if op == "moe_sum" else scale
    assert_same_bits(out, moe_sum_inorder(x, s))
    if torch.isfinite(x).all() and (s is None or abs(s) < float("inf")):
        torch.testing.assert_close(out.double(), moe_sum_ref(x, s), **elementwise_tol(x.dtype))


# ---------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("t, h", [(1, 1), (2, 7), (3, 129), (1, 2048), (7, 4100)])
@pytest.mark.parametrize("k", list(range(1, 11)))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_values(op, dtype, k, t, h, gen):
    """topk 1..10 (the compile-time topk and the general kernel), hidden sizes from 1 to odd
    ones past a vector (129: 16 vectors and one element of 16-bit data)."""
    x = make_input(t, k, h, dtype, gen)
    g = GuardedOut(t, h, dtype)
    run(op, x, g.out)
    check(op, g.out, x)
    g.check_guards()


# (T, k, H): Qwen3-30B-A3B (2048, 8), Mixtral (4096, 2), DeepSeek-V3 (7168, 8; 9 with a fused
# shared expert), Qwen2-57B-A14B (3584, 8); T = 128 / 129 at H = 2048 bf16 straddle the
# launcher's decode/large switch (32768 16-byte vectors).
MODEL_SHAPES = [(1, 8, 7168), (16, 8, 2048), (128, 2, 4096), (128, 8, 2048), (129, 8, 2048), (128, 9, 7168),
                (300, 6, 2048), (2048, 8, 3584), (16384, 8, 2048)]


@pytest.mark.parametrize("t, k, h", MODEL_SHAPES)
@pytest.mark.parametrize("op", OPS)
def test_model_shapes(op, t, k, h, gen):
    x = make_input(t, k, h, BF16, gen)
    out = torch.full((t, h), NAN, dtype=BF16, device="cuda")
    run(op, x, out)
    check(op, out, x)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("t, k, h", [(16, 8, 2048), (4096, 2, 4096)])
def test_model_shapes_other_dtypes(dtype, t, k, h, gen):
    x = make_input(t, k, h, dtype, gen)
    out = torch.full((t, h), NAN, dtype=dtype, device="cuda")
    run("moe_sum_reduce", x, out)
    check("moe_sum_reduce", out, x)


def test_fp32_sum_order(gen):
    """The fp32 sum runs in order j = 0, 1, ...: the op matches the in-order sum bit for bit on
    data where another order (reversed) rounds differently."""
    x = _values((64, 8, 512), torch.float32, gen) * torch.exp2(
        torch.randint(-20, 21, (64, 8, 512), device="cuda", generator=gen).float())
    out = torch.full((64, 512), NAN, device="cuda")
    run("moe_sum", x, out)
    check("moe_sum", out, x)
    reversed_sum = moe_sum_inorder(x.flip(1))
    assert not torch.equal(out, reversed_sum), "data too tame: the order of the sum does not show"


# ---------------------------------------------------------------------------------------
# Layouts: strided / padded / misaligned input and output


@pytest.mark.parametrize("out_layout", list(OUT_LAYOUTS))
@pytest.mark.parametrize("in_layout", IN_LAYOUTS)
@pytest.mark.parametrize("k", [3, 8])
@pytest.mark.parametrize("h", [256, 130])
@pytest.mark.parametrize("dtype", [BF16, torch.float32], ids=str)
def test_layouts(dtype, h, k, in_layout, out_layout, gen):
    """Every input layout with every output layout: whatever pointer or pitch breaks 16-byte
    alignment moves the call to a narrower path, with the same bits."""
    t = 5
    x = make_input(t, k, h, dtype, gen, in_layout)
    g = GuardedOut(t, h, dtype, out_layout)
    run("moe_sum_reduce", x, g.out)
    check("moe_sum_reduce", g.out, x)
    g.check_guards()


@pytest.mark.parametrize("dtype", [BF16, torch.float32], ids=str)
def test_size_one_dims_with_odd_strides(dtype, gen):
    """A dimension of size 1 may carry any stride (torch does not normalise it); the kernel
    never steps along it, so the result does not depend on it."""
    h = 512
    base = _values((8 * h + 64,), dtype, gen)
    one_token = base.as_strided((1, 8, h), (12347, h, 1), 0)
    g = GuardedOut(1, h, dtype)
    run("moe_sum_reduce", one_token, g.out)
    check("moe_sum_reduce", g.out, one_token)
    g.check_guards()
    one_expert = base.as_strided((8, 1, h), (h, 99991, 1), 0)
    out = torch.full((8, h), NAN, dtype=dtype, device="cuda")
    run("moe_sum", one_expert, out)
    check("moe_sum", out, one_expert)
    one_row_out = torch.full((1, h), NAN, dtype=dtype, device="cuda").as_strided((1, h), (777, 1))
    run("moe_sum", one_token, one_row_out)
    check("moe_sum", one_row_out, one_token)


# ---------------------------------------------------------------------------------------
# The factor, special values


@pytest.mark.parametrize("scale", [0.0, -0.0, 1.0, 2.5, -0.375, 1e-3, 0.1])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_scales(dtype, scale, gen):
    """The factor is used literally (0.1 rounded to fp32 first, as the binding passes a float):
    0 gives zeros, 1 gives moe_sum's bits."""
    t, k, h = 9, 8, 264
    x = make_input(t, k, h, dtype, gen)
    out = torch.full((t, h), NAN, dtype=dtype, device="cuda")
    run("moe_sum_reduce", x, out, scale)
    check("moe_sum_reduce", out, x, scale)
    if scale == 0.0:
        assert bool((out == 0).all())
    if scale == 1.0:
        plain = torch.full((t, h), NAN, dtype=dtype, device="cuda")
        run("moe_sum", x, plain)
        torch.cuda.synchronize()
        assert_same_bits(out, plain)


@pytest.mark.parametrize("scale", [NAN, float("inf"), -float("inf")])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_nonfinite_scale(dtype, scale, gen):
    """NaN / infinite factors propagate as IEEE says (inf * 0 = NaN, inf * x = +-inf)."""
    t, k, h = 4, 2, 136
    x = make_input(t, k, h, dtype, gen)
    x[0, :, :8] = 0.0  # zero sums: inf * 0
    out = torch.full((t, h), 1.0, dtype=dtype, device="cuda")
    run("moe_sum_reduce", x, out, scale)
    check("moe_sum_reduce", out, x, scale)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_special_values(op, dtype, gen):
    """inf, -inf, NaN, signed zeros and sums past the dtype's range, bit for bit (an fp32 sum
    that overflows the output dtype rounds to inf)."""
    t, k, h = 16, 4, 320
    x = make_input(t, k, h, dtype, gen)
    big = torch.finfo(dtype).max
    specials = torch.tensor([float("inf"), -float("inf"), NAN, 0.0, -0.0, big, -big], device="cuda").to(dtype)
    pick = torch.randint(0, specials.numel(), (t, k, h), device="cuda", generator=gen)
    where = torch.rand((t, k, h), device="cuda", generator=gen) < 0.2
    x = torch.where(where, specials[pick], x)
    x[0] = big  # a row of overflowing sums (finite for fp32: the sum is fp32)
    x[1] = -0.0  # -0 + -0 + ... = -0
    x[2, 0] = 0.0
    x[2, 1:] = -0.0  # +0 + -0 = +0
    out = torch.full((t, h), NAN, dtype=dtype, device="cuda")
    run(op, x, out)
    check(op, out, x)
    assert bool(torch.signbit(out[1]).all()) and bool((out[1] == 0).all())
    assert not bool(torch.signbit(out[2]).any()) and bool((out[2] == 0).all())


def test_default_factor_gives_zeros(gen):
    """moe_sum_reduce's default routed_scaling_factor is 0, used literally: zeros."""
    x = make_input(3, 8, 256, BF16, gen)
    out = torch.full((3, 256), NAN, dtype=BF16, device="cuda")
    assert sgl_kernel.moe_sum_reduce(x, out) is None
    torch.cuda.synchronize()
    assert bool((out == 0).all())


# ---------------------------------------------------------------------------------------
# Sizes: empty calls, more than 2^31 output vectors (k = 0 is refused: test_bad_input)


@pytest.mark.parametrize("op", OPS)
def test_empty(op, gen):
    """No tokens, or no hidden elements: nothing to do, no error."""
    for shape in ((0, 8, 64), (3, 8, 0)):
        x = torch.empty(shape, dtype=BF16, device="cuda")
        out = torch.empty((shape[0], shape[2]), dtype=BF16, device="cuda")
        run(op, x, out)
    torch.cuda.synchronize()


def test_over_2_31_vectors(gen):
    """More than 2^31 output vectors (fp16, H = 1: one element a vector): the launcher cuts the
    call into launches of whole tokens; the second one starts at token 2^31."""
    t, k = (1 << 31) + 4099, 2
    free, _ = torch.cuda.mem_get_info()
    if free < (24 << 30):
        pytest.skip(f"needs ~24 GiB of free GPU memory, {free >> 30} GiB free")
    x = torch.empty((t, k, 1), dtype=torch.float16, device="cuda")
    x.normal_(generator=gen)
    out = torch.empty((t, 1), dtype=torch.float16, device="cuda")
    out.fill_(NAN)
    run("moe_sum_reduce", x, out, 2.0)
    torch.cuda.synchronize()
    step = 1 << 28
    for start in list(range(0, t, step)):
        stop = min(t, start + step)
        assert_same_bits(out[start:stop], moe_sum_inorder(x[start:stop], 2.0))
    del x, out
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------
# opcheck, CUDA graphs, determinism


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", OPS)
def test_opcheck(op, dtype, gen):
    x = make_input(5, 4, 136, dtype, gen)
    out = torch.empty((5, 136), dtype=dtype, device="cuda")
    args = (x, out) if op == "moe_sum" else (x, out, SCALE)
    torch.library.opcheck(_op(op), args)


@pytest.mark.parametrize("dtype, t, k, h", [
    (BF16, 1, 8, 2048),           # decode shape, 16-byte vectors
    (BF16, 512, 2, 4096),         # large shape
    (torch.float16, 3, 5, 7),     # one element a vector, general kernel
    (torch.float32, 64, 9, 7168),
])
@pytest.mark.parametrize("op", OPS)
def test_cuda_graph(op, dtype, t, k, h, gen):
    x = make_input(t, k, h, dtype, gen)
    out = torch.full((t, h), NAN, dtype=dtype, device="cuda")

    def step():
        run(op, x, out)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(3):
        x.copy_(make_input(t, k, h, dtype, gen))
        out.fill_(NAN)
        graph.replay()
        check(op, out, x)


def test_deterministic(gen):
    x = make_input(1000, 8, 2048, BF16, gen)
    a = torch.empty((1000, 2048), dtype=BF16, device="cuda")
    b = torch.empty_like(a)
    run("moe_sum_reduce", x, a)
    run("moe_sum_reduce", x, b)
    torch.cuda.synchronize()
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops: the C++ checks protect direct callers too)


def _args(**changes):
    c = dict(device="cuda")
    args = {
        "input": torch.randn(4, 8, 64, **c).to(BF16),
        "output": torch.empty(4, 64, dtype=BF16, **c),
    }
    for key, fn in changes.items():
        args[key] = fn(args[key])
    return args


BAD = [
    ("input-cpu", dict(input=lambda t: t.cpu()), "input", ["CUDA tensor"]),
    ("output-cpu", dict(output=lambda t: t.cpu()), "output", ["device"]),
    ("input-int32", dict(input=lambda t: t.to(torch.int32)), "input", ["dtype"]),
    ("input-fp8", dict(input=lambda t: t.to(torch.float8_e4m3fn)), "input", ["dtype"]),
    ("output-dtype", dict(output=lambda t: t.half()), "output", ["dtype", "same as input"]),
    ("input-2d", dict(input=lambda t: t[:, 0]), "input", ["3-D"]),
    ("input-4d", dict(input=lambda t: t.view(4, 8, 8, 8)), "input", ["3-D"]),
    ("output-1d", dict(output=lambda t: t.view(-1)), "output", ["2-D"]),
    ("output-3d", dict(output=lambda t: t.view(4, 1, 64)), "output", ["2-D"]),
    ("output-tokens", dict(output=lambda t: torch.empty(5, 64, dtype=BF16, device="cuda")), "output",
     ["input.shape[0]"]),
    ("output-hidden", dict(output=lambda t: torch.empty(4, 65, dtype=BF16, device="cuda")), "output",
     ["input.shape[2]"]),
    ("input-last-dim-strided", dict(input=lambda t: torch.randn(4, 64, 8, device="cuda").to(BF16).transpose(1, 2)),
     "input", ["contiguous"]),
    ("output-last-dim-strided", dict(output=lambda t: torch.empty(64, 4, dtype=BF16, device="cuda").t()), "output",
     ["contiguous"]),
    ("output-expanded", dict(output=lambda t: t[:1].expand(4, 64)), "output", ["share memory"]),
    ("input-no-experts", dict(input=lambda t: t[:, :0]), "input", ["topk", ">= 1"]),
]


@pytest.mark.parametrize("changes, arg, fragments", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
@pytest.mark.parametrize("op", OPS)
def test_bad_input(op, changes, arg, fragments):
    a = _args(**changes)
    args = (a["input"], a["output"]) if op == "moe_sum" else (a["input"], a["output"], SCALE)
    with raises_op_error(op, arg, *fragments):
        _op(op)(*args)
