# SPDX-License-Identifier: Apache-2.0
"""fast_compare_key (API.md 3.4): a CPU op; runs without a GPU. Only the CUDA-input checks
need one."""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.helpers import raises_op_error
from tests.project.ref_fast_compare_key import fast_compare_key_ref

DTYPES = (torch.int32, torch.int64)
OP = torch.ops.sgl_kernel.fast_compare_key.default


def _check(x: torch.Tensor, y: torch.Tensor) -> None:
    expected = fast_compare_key_ref(x, y)
    for got in (sgl_kernel.fast_compare_key(x, y), OP(x, y)):
        assert type(got) is int
        assert got == expected, (got, expected)


def _tokens(n: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    hi = 2**31 - 1 if dtype == torch.int32 else 2**62
    return torch.randint(-hi, hi, (n,), dtype=dtype, generator=gen)


@pytest.fixture
def cpu_gen(request) -> torch.Generator:
    import zlib

    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("n", [1, 2, 63, 64, 65, 127, 128, 129, 1000, 4097])
def test_first_difference(dtype, n, cpu_gen):
    """Every position of the first difference, around the 64-element blocks of the fast path."""
    x = _tokens(n, dtype, cpu_gen)
    _check(x, x.clone())
    positions = sorted(p for p in {0, 1, n // 2, n - 1, 63, 64, 65, 127, 128, 129} if p < n)
    for p in positions:
        y = x.clone()
        y[p] += 1
        _check(x, y)
        y[p:] = x[p:] ^ 1  # every later element differs too
        _check(x, y)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("nx, ny", [(0, 0), (0, 5), (5, 0), (1, 1), (10, 70), (70, 10), (64, 1000), (1000, 999)])
def test_lengths(dtype, nx, ny, cpu_gen):
    """Equal prefixes of different lengths: min(len(x), len(y))."""
    base = _tokens(max(nx, ny), dtype, cpu_gen)
    x, y = base[:nx].clone(), base[:ny].clone()
    _check(x, y)
    assert sgl_kernel.fast_compare_key(x, y) == min(nx, ny)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize(
    "layout",
    ["x-strided", "y-strided", "both-strided", "offset", "expanded", "single-element-strided"],
)
def test_strides(dtype, layout, cpu_gen):
    n = 300
    base = _tokens(3 * n, dtype, cpu_gen)
    if layout == "x-strided":
        x, y = base[::3], base[::3].clone()
    elif layout == "y-strided":
        x, y = base[::2][:n].clone(), base[::2][:n]
    elif layout == "both-strided":
        x, y = base[::3], base.clone()[::3]
    elif layout == "offset":  # contiguous, not at the start of the storage
        x, y = base[7 : 7 + n], base.clone()[7 : 7 + n]
    elif layout == "expanded":  # stride 0
        x, y = base[:1].expand(n), torch.full((n,), int(base[0]), dtype=dtype)
    else:
        x, y = base[:3:3], base[:1].clone()
    assert x.dim() == 1 and y.dim() == 1
    _check(x, y)
    for p in (0, 17, min(x.shape[0], y.shape[0]) - 1):
        if p < 0 or p >= min(x.shape[0], y.shape[0]):
            continue
        y2 = y.clone()
        y2[p] ^= 1
        _check(x, y2)
        if layout != "expanded":
            x2 = x.clone()
            x2[p] ^= 1
            _check(x2, y)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_extreme_values(dtype):
    info = torch.iinfo(dtype)
    x = torch.tensor([info.min, info.max, 0, -1, info.max], dtype=dtype)
    y = torch.tensor([info.min, info.max, 0, -1, info.min], dtype=dtype)
    _check(x, y)
    assert sgl_kernel.fast_compare_key(x, y) == 4


def test_long_equal(cpu_gen):
    x = _tokens(1 << 20, torch.int64, cpu_gen)
    assert sgl_kernel.fast_compare_key(x, x.clone()) == 1 << 20
    y = x.clone()
    y[(1 << 20) - 3] = ~y[(1 << 20) - 3]
    assert sgl_kernel.fast_compare_key(x, y) == (1 << 20) - 3


def test_random_against_reference(cpu_gen):
    for _ in range(200):
        dtype = DTYPES[int(torch.randint(0, 2, (1,), generator=cpu_gen))]
        nx, ny = (int(v) for v in torch.randint(0, 300, (2,), generator=cpu_gen))
        # A small alphabet, so differences come late and at random positions.
        x = torch.randint(0, 2, (nx,), dtype=dtype, generator=cpu_gen)
        y = x.clone()[:ny] if ny <= nx else torch.cat([x, torch.randint(0, 2, (ny - nx,), dtype=dtype, generator=cpu_gen)])
        if ny and int(torch.randint(0, 2, (1,), generator=cpu_gen)):
            p = int(torch.randint(0, ny, (1,), generator=cpu_gen))
            y[p] = 1 - y[p]
        _check(x, y)


# ---------------------------------------------------------------------------------------
# Bad inputs: RuntimeError naming the op and the argument (API.md 1.4)


def test_mixed_dtype():
    with raises_op_error("fast_compare_key", "y", "dtype", "torch.int64", "torch.int32"):
        sgl_kernel.fast_compare_key(torch.arange(4), torch.arange(4, dtype=torch.int32))


@pytest.mark.parametrize("dtype", [torch.float32, torch.int16, torch.uint8, torch.bool, torch.float64], ids=str)
def test_bad_dtype(dtype):
    x = torch.zeros(4, dtype=dtype)
    with raises_op_error("fast_compare_key", "x", "dtype", str(dtype)):
        sgl_kernel.fast_compare_key(x, x.clone())


@pytest.mark.parametrize("which", ["x", "y"])
@pytest.mark.parametrize("shape", [(), (2, 3), (1, 5), (0, 0)])
def test_not_1d(which, shape):
    good = torch.arange(6)
    bad = torch.zeros(shape, dtype=torch.int64)
    args = (bad, good) if which == "x" else (good, bad)
    with raises_op_error("fast_compare_key", which, "1-D"):
        OP(*args)


@pytest.mark.gpu
@pytest.mark.parametrize("which", ["x", "y", "both"])
def test_cuda_input(which):
    cpu = torch.arange(8)
    cuda = torch.arange(8, device="cuda")
    x = cuda if which in ("x", "both") else cpu
    y = cuda if which in ("y", "both") else cpu
    name = "y" if which == "y" else "x"
    with raises_op_error("fast_compare_key", name, "CPU tensor", "cuda"):
        sgl_kernel.fast_compare_key(x, y)
    with raises_op_error("fast_compare_key", name, "CPU tensor"):
        OP(x, y)


def test_build_info_reports_cpu_op():
    assert sgl_kernel.build_info()["ops"]["fast_compare_key"] is True
