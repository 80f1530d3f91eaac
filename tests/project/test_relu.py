# SPDX-License-Identifier: Apache-2.0
"""custom_relu and fused_add_relu (API.md 3.1) on the GPU: any shape, any strides."""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.helpers import raises_op_error
from tests.project.ref_relu import fused_add_relu_ref
from tests.tolerances import elementwise_tol

pytestmark = pytest.mark.gpu

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
NAN = float("nan")


def _base(shape, dtype, gen, nan: bool) -> torch.Tensor:
    t = torch.randn(shape, dtype=dtype, device="cuda", generator=gen)
    if nan:
        t.view(-1)[5::13] = NAN  # NaN must propagate like torch.relu
    return t


def _merged_dims(t: torch.Tensor) -> int:
    """How many dimensions remain after merging dimensions that are contiguous with each
    other and dropping size-1 ones (the kernel reads at most 8 in place)."""
    dims = []
    for size, stride in zip(t.shape, t.stride()):
        if size == 1:
            continue
        if dims and dims[-1][1] == stride * size:
            dims[-1] = (dims[-1][0] * size, stride)
        else:
            dims.append((size, stride))
    return len(dims)


def make_input(shape, layout: str, dtype, gen, nan: bool = True) -> torch.Tensor:
    """A tensor of logical shape ``shape`` with the given memory layout."""
    shape = tuple(shape)
    n = len(shape)
    if layout == "contiguous":
        x = _base(shape, dtype, gen, nan)
    elif layout == "misaligned":  # contiguous, one element past a 16-byte boundary
        numel = 1
        for s in shape:
            numel *= s
        x = _base((numel + 1,), dtype, gen, nan)[1:].view(shape)
        assert x.data_ptr() % 16 != 0
    elif layout == "transposed":
        x = _base((*shape[:-2], shape[-1], shape[-2]), dtype, gen, nan).transpose(-1, -2)
    elif layout == "sliced":  # step 2 in every leading dim, step 3 in the last
        x = _base((*(2 * s for s in shape[:-1]), 3 * shape[-1]), dtype, gen, nan)
        x = x[(*(slice(None, None, 2) for _ in shape[:-1]), slice(None, None, 3))]
    elif layout == "expanded":  # stride 0 in the first dim
        x = _base((1, *shape[1:]), dtype, gen, nan).expand(shape)
    elif layout == "expanded_last":  # stride 0 in the last dim
        x = _base((*shape[:-1], 1), dtype, gen, nan).expand(shape)
    elif layout == "permuted":
        perm = (2, 0, 3, 1)
        base_shape = [0] * n
        for i, p in enumerate(perm):
            base_shape[p] = shape[i]
        x = _base(base_shape, dtype, gen, nan).permute(perm)
    elif layout == "reversed":  # every dimension reversed: no two dims merge
        x = _base(shape[::-1], dtype, gen, nan).permute(tuple(range(n - 1, -1, -1)))
    else:
        raise AssertionError(layout)
    assert x.shape == shape, (x.shape, shape, layout)
    if layout != "contiguous" and layout != "misaligned" and x.numel() > 1:
        assert not x.is_contiguous(), layout
    return x


def _poison_allocator(shape, dtype) -> None:
    """Free a NaN-filled block of the output's size so the caching allocator is likely to
    hand it to the op's output: elements the kernel skips then read NaN."""
    torch.full(shape, NAN, dtype=dtype, device="cuda")


ND8 = (2, 3, 2, 3, 2, 3, 2, 2)  # 8 dims: the most the kernel reads in place
ND10 = (2, 3, 2, 3, 2, 3, 2, 2, 3, 2)  # 10 dims: more than 8 after merging

# (shape, layout) with at least one dimension
CASES = [
    ((1,), "contiguous"),
    ((7,), "contiguous"),
    ((1000,), "contiguous"),
    ((65537,), "contiguous"),
    ((7,), "misaligned"),
    ((1000,), "misaligned"),
    ((1000,), "expanded"),
    ((1, 1), "contiguous"),
    ((16, 64), "contiguous"),
    ((33, 130), "contiguous"),
    ((33, 130), "misaligned"),
    ((33, 130), "transposed"),
    ((33, 130), "sliced"),
    ((33, 130), "expanded"),
    ((33, 130), "expanded_last"),
    ((7, 1), "contiguous"),
    ((1024, 4096), "contiguous"),
    ((3, 5, 7), "contiguous"),
    ((3, 5, 7), "misaligned"),
    ((3, 5, 7), "transposed"),
    ((3, 5, 7), "sliced"),
    ((3, 5, 7), "expanded"),
    ((3, 5, 8), "contiguous"),
    ((4, 8, 6, 10), "permuted"),
    ((5, 3, 7, 9), "permuted"),
    (ND8, "reversed"),
    (ND10, "reversed"),
]
CASE_IDS = [f"{'x'.join(map(str, s))}-{layout}" for s, layout in CASES]


def _check_output(out: torch.Tensor, x: torch.Tensor) -> None:
    assert out.shape == x.shape and out.dtype == x.dtype and out.device == x.device
    assert out.is_contiguous()


def test_layout_sanity():
    """The 10-D case really exceeds the in-place limit and the 8-D case really meets it."""
    for shape, want in ((ND8, 8), (ND10, 10)):
        x = torch.empty(shape[::-1], device="meta").permute(tuple(range(len(shape) - 1, -1, -1)))
        assert _merged_dims(x) == want


# ---------------------------------------------------------------------------------------
# custom_relu: exactly torch.relu


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, layout", [((), "contiguous"), ((), "misaligned"), *CASES], ids=["scalar", "scalar-misaligned", *CASE_IDS])
def test_custom_relu(dtype, shape, layout, gen):
    x = make_input(shape, layout, dtype, gen)
    _poison_allocator(shape, dtype)
    out = sgl_kernel.custom_relu(x)
    _check_output(out, x)
    torch.testing.assert_close(out, torch.relu(x), rtol=0, atol=0, equal_nan=True)


def test_custom_relu_nan_and_signs():
    x = torch.tensor([NAN, -1.0, 0.0, -0.0, 2.5, float("inf"), float("-inf"), -NAN], device="cuda")
    out = sgl_kernel.custom_relu(x)
    torch.testing.assert_close(out, torch.relu(x), rtol=0, atol=0, equal_nan=True)
    assert out.isnan().tolist() == [True, False, False, False, False, False, False, True]


# ---------------------------------------------------------------------------------------
# fused_add_relu: relu(input + bias) in fp32, one rounding


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape, layout", CASES, ids=CASE_IDS)
def test_fused_add_relu(dtype, shape, layout, gen):
    x = make_input(shape, layout, dtype, gen)
    bias = torch.randn(shape[-1], dtype=dtype, device="cuda", generator=gen)
    _poison_allocator(shape, dtype)
    out = sgl_kernel.fused_add_relu(x, bias)
    _check_output(out, x)
    torch.testing.assert_close(out.float(), fused_add_relu_ref(x, bias), equal_nan=True, **elementwise_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_fused_add_relu_misaligned_bias(dtype, gen):
    x = make_input((9, 64), "contiguous", dtype, gen)
    bias = torch.randn(65, dtype=dtype, device="cuda", generator=gen)[1:]
    assert bias.is_contiguous() and bias.data_ptr() % 16 != 0
    out = sgl_kernel.fused_add_relu(x, bias)
    torch.testing.assert_close(out.float(), fused_add_relu_ref(x, bias), equal_nan=True, **elementwise_tol(dtype))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_empty(dtype):
    for shape in ((0,), (0, 5), (3, 0), (2, 0, 4)):
        x = torch.empty(shape, dtype=dtype, device="cuda")
        out = sgl_kernel.custom_relu(x)
        _check_output(out, x)
        out = sgl_kernel.fused_add_relu(x, torch.empty(shape[-1], dtype=dtype, device="cuda"))
        _check_output(out, x)
    torch.cuda.synchronize()


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_deterministic(layout, gen):
    """Bitwise identical results on repeated calls (NaN payloads included)."""
    x = make_input((257, 1000), layout, torch.bfloat16, gen)
    bias = torch.randn(1000, dtype=torch.bfloat16, device="cuda", generator=gen)
    first = sgl_kernel.fused_add_relu(x, bias).view(torch.int16)
    assert torch.equal(first, sgl_kernel.fused_add_relu(x, bias).view(torch.int16))
    first = sgl_kernel.custom_relu(x).view(torch.int16)
    assert torch.equal(first, sgl_kernel.custom_relu(x).view(torch.int16))


# ---------------------------------------------------------------------------------------
# opcheck and CUDA graphs


@pytest.mark.parametrize("layout", ["contiguous", "transposed", "sliced"])
def test_opcheck(layout, gen):
    # No NaN here: opcheck compares eager and compiled results with equal_nan=False.
    x = make_input((6, 40), layout, torch.bfloat16, gen, nan=False)
    bias = torch.randn(40, dtype=torch.bfloat16, device="cuda", generator=gen)
    torch.library.opcheck(torch.ops.sgl_kernel.custom_relu.default, (x,))
    torch.library.opcheck(torch.ops.sgl_kernel.fused_add_relu.default, (x, bias))


@pytest.mark.parametrize("layout", ["contiguous", "transposed"])
def test_cuda_graph(layout, gen):
    dtype = torch.float16
    x = make_input((48, 136), layout, dtype, gen)
    bias = torch.randn(136, dtype=dtype, device="cuda", generator=gen)

    def step():
        return sgl_kernel.custom_relu(x), sgl_kernel.fused_add_relu(x, bias)

    step()  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        relu_out, add_out = step()
    for _ in range(2):
        x.copy_(make_input((48, 136), "contiguous", dtype, gen))
        bias.copy_(torch.randn(136, dtype=dtype, device="cuda", generator=gen))
        relu_out.fill_(NAN)
        add_out.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(relu_out, torch.relu(x), rtol=0, atol=0, equal_nan=True)
        torch.testing.assert_close(
            add_out.float(), fused_add_relu_ref(x, bias), equal_nan=True, **elementwise_tol(dtype)
        )


# ---------------------------------------------------------------------------------------
# Bad inputs


@pytest.mark.parametrize(
    "make_bias, fragment",
    [
        (lambda: torch.randn(31, device="cuda"), "32"),  # wrong length
        (lambda: torch.randn(33, device="cuda"), "32"),
        (lambda: torch.randn(32, device="cuda", dtype=torch.float16), "dtype"),
        (lambda: torch.randn(64, device="cuda")[::2], "contiguous"),
        (lambda: torch.randn(1, 32, device="cuda"), "1-D"),
        (lambda: torch.randn(32, 1, device="cuda"), "1-D"),
        (lambda: torch.randn(32), "device"),  # on the host
    ],
    ids=["short", "long", "dtype", "strided", "2d-row", "2d-col", "cpu"],
)
def test_bad_bias(make_bias, fragment):
    x = torch.randn(4, 32, device="cuda")
    with raises_op_error("fused_add_relu", "bias", fragment):
        sgl_kernel.fused_add_relu(x, make_bias())


@pytest.mark.parametrize("dtype", [torch.int32, torch.int64, torch.float64, torch.bool], ids=str)
def test_bad_input_dtype(dtype):
    x = torch.ones(4, 32, device="cuda").to(dtype)
    with raises_op_error("custom_relu", "input", "dtype", str(dtype)):
        sgl_kernel.custom_relu(x)
    with raises_op_error("fused_add_relu", "input", "dtype", str(dtype)):
        sgl_kernel.fused_add_relu(x, torch.ones(32, device="cuda").to(dtype))


def test_fused_add_relu_scalar_input():
    x = torch.randn((), device="cuda")
    with raises_op_error("fused_add_relu", "input", "dimension"):
        sgl_kernel.fused_add_relu(x, torch.randn(1, device="cuda"))
