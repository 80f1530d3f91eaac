# SPDX-License-Identifier: Apache-2.0
"""silu_and_mul, gelu_and_mul, gelu_tanh_and_mul (API.md 2.1.2) on the GPU, against the fp32
references of ref_activation.py with the shared tolerance table."""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.elementwise.ref_activation import REFS
from tests.helpers import raises_op_error
from tests.tolerances import elementwise_tol

pytestmark = pytest.mark.gpu

OPS = ("silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul")
DTYPES = (torch.float32, torch.float16, torch.bfloat16)
NAN = float("nan")


def _op(name: str):
    return getattr(torch.ops.sgl_kernel, name).default


def _wrapper_accepts(d: int, dtype: torch.dtype) -> bool:
    """The wrapper's rule: a row of 2 * d elements is a multiple of 16 bytes."""
    return (2 * d * dtype.itemsize) % 16 == 0


def _randn(shape, dtype, gen) -> torch.Tensor:
    return torch.randn(shape, dtype=dtype, device="cuda", generator=gen)


def _poisoned(shape, dtype) -> torch.Tensor:
    return torch.full(shape, NAN, dtype=dtype, device="cuda")


def _check(op: str, out: torch.Tensor, x: torch.Tensor) -> None:
    torch.testing.assert_close(out.float(), REFS[op](x), **elementwise_tol(x.dtype))


def _run(op: str, x: torch.Tensor, out: torch.Tensor) -> None:
    """Through the wrapper when it accepts the row size, else (after checking that the
    wrapper refuses it with ValueError) through torch.ops directly."""
    d = x.shape[-1] // 2
    if _wrapper_accepts(d, x.dtype):
        assert getattr(sgl_kernel, op)(x, out=out) is out
    else:
        with pytest.raises(ValueError):
            getattr(sgl_kernel, op)(x, out=out)
        assert _op(op)(out, x) is None


# (leading dims, d). d = 4 passes the wrapper for every dtype (16 bytes at 16 bits) but
# is below one 16-byte vector of fp16/bf16; d = 2 and 6 pass only for fp32; odd d never
# passes and goes through torch.ops.
SHAPES = [
    ((1,), 4),
    ((1,), 8),
    ((1,), 7),
    ((1,), 1),
    ((3,), 2),
    ((5,), 6),
    ((7,), 12),
    ((16,), 111),
    ((33,), 128),
    ((4,), 264),
    ((1,), 4096),
    ((2, 3), 64),
    ((2, 5), 7),
    ((2, 3, 4), 40),
    ((65536,), 128),
    ((65536,), 7),
    # >= 16 MiB of output (the launcher's largest path, 2 vectors a thread in blocks of 512 or
    # 256 threads) with a last block only partly full: 4099 * 2056 / 8 vectors (fp32: / 4).
    ((4099,), 2056),
]


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("lead, d", SHAPES, ids=[f"{'x'.join(map(str, s))}-d{d}" for s, d in SHAPES])
def test_correctness(op, dtype, lead, d, gen):
    x = _randn((*lead, 2 * d), dtype, gen)
    out = _poisoned((*lead, d), dtype)
    _run(op, x, out)
    _check(op, out, x)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_serving_shape(op, dtype, gen):
    """T = 4096 tokens, d = 14336 (Llama-3-70B / Mixtral MLP)."""
    x = _randn((4096, 2 * 14336), dtype, gen)
    out = _poisoned((4096, 14336), dtype)
    assert getattr(sgl_kernel, op)(x, out=out) is out
    _check(op, out, x)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_allocates_out(op, dtype, gen):
    x = _randn((3, 7, 256), dtype, gen)
    out = getattr(sgl_kernel, op)(x)
    assert out.shape == (3, 7, 128) and out.dtype == dtype and out.device == x.device
    assert out.is_contiguous()
    _check(op, out, x)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("which", ["input", "out", "both"])
@pytest.mark.parametrize("d", [256, 7])
def test_misaligned(op, dtype, which, d, gen):
    """Contiguous tensors that start one element past a 16-byte boundary. Guard elements
    around out must stay untouched."""
    rows = 37
    if which in ("input", "both"):
        x = _randn((rows * 2 * d + 1,), dtype, gen)[1:].view(rows, 2 * d)
        assert x.data_ptr() % 16 != 0
    else:
        x = _randn((rows, 2 * d), dtype, gen)
    offset = 1 if which in ("out", "both") else 0
    guard = 16
    buf = _poisoned((offset + rows * d + guard,), dtype)
    out = buf[offset : offset + rows * d].view(rows, d)
    if offset:
        assert out.data_ptr() % 16 != 0
    assert x.is_contiguous() and out.is_contiguous()
    _run(op, x, out)
    _check(op, out, x)
    assert buf[:offset].isnan().all() and buf[offset + rows * d :].isnan().all(), "wrote outside out"


@pytest.mark.parametrize("op", OPS)
def test_deterministic(op, gen):
    x = _randn((513, 2 * 1000), torch.bfloat16, gen)
    fn = getattr(sgl_kernel, op)
    assert torch.equal(fn(x).view(torch.int16), fn(x).view(torch.int16))  # bitwise


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("shape", [(0, 64), (2, 0, 64), (0, 7 * 2)])
def test_empty(op, dtype, shape):
    x = torch.empty(shape, dtype=dtype, device="cuda")
    out_shape = (*shape[:-1], shape[-1] // 2)
    if _wrapper_accepts(shape[-1] // 2, dtype):
        y = getattr(sgl_kernel, op)(x)
        assert y.shape == out_shape and y.dtype == dtype and y.device == x.device
    out = torch.empty(out_shape, dtype=dtype, device="cuda")
    assert _op(op)(out, x) is None
    torch.cuda.synchronize()


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype, lead, d", [(torch.bfloat16, (8,), 64), (torch.float32, (2, 3), 7)], ids=str)
def test_opcheck(op, dtype, lead, d, gen):
    x = _randn((*lead, 2 * d), dtype, gen)
    out = torch.empty((*lead, d), dtype=dtype, device="cuda")
    torch.library.opcheck(_op(op), (out, x))


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("how", ["wrapper", "op-odd-d"])
def test_cuda_graph(op, how, gen):
    """Capture with static tensors, then replay on new data written into the static input."""
    dtype = torch.bfloat16
    rows, d = 64, (512 if how == "wrapper" else 7)
    fn = getattr(sgl_kernel, op)
    x = _randn((rows, 2 * d), dtype, gen)

    def step():
        if how == "wrapper":
            return fn(x)  # out allocated inside the capture, from the graph's pool
        out = torch.empty((rows, d), dtype=dtype, device="cuda")
        _op(op)(out, x)
        return out

    step()  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for _ in range(2):
        x.copy_(_randn((rows, 2 * d), dtype, gen))
        out.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        _check(op, out, x)


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops: the C++ checks protect direct callers too)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", [torch.float64, torch.int32], ids=str)
def test_bad_dtype(op, dtype):
    x = torch.ones(4, 32, dtype=dtype, device="cuda")
    out = torch.empty(4, 16, dtype=dtype, device="cuda")
    with raises_op_error(op, "input", "dtype", str(dtype)):
        _op(op)(out, x)
    with raises_op_error(op, "input", "dtype"):
        getattr(sgl_kernel, op)(x, out=out)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("last", [33, 1])
def test_odd_last_dim(op, last):
    x = torch.ones(4, last, device="cuda")
    out = torch.empty(4, last // 2, device="cuda")
    with raises_op_error(op, "input", "even"):
        _op(op)(out, x)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("out_shape", [(4, 15), (4, 32), (5, 16), (4, 1, 16), (64,)])
def test_bad_out_shape(op, out_shape):
    x = torch.ones(4, 32, device="cuda")
    out = torch.empty(out_shape, device="cuda")
    with raises_op_error(op, "out"):
        _op(op)(out, x)


@pytest.mark.parametrize("op", OPS)
def test_bad_out_dtype(op):
    x = torch.ones(4, 32, device="cuda")
    out = torch.empty(4, 16, dtype=torch.float16, device="cuda")
    with raises_op_error(op, "out", "dtype"):
        _op(op)(out, x)
    with raises_op_error(op, "out", "dtype"):
        getattr(sgl_kernel, op)(x, out=out)


@pytest.mark.parametrize("op", OPS)
def test_out_on_cpu(op):
    # A second GPU is not needed to test the device check: out on the host.
    x = torch.ones(4, 32, device="cuda")
    out = torch.empty(4, 16)
    with raises_op_error(op, "out", "device"):
        _op(op)(out, x)


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("layout", ["sliced", "transposed"])
def test_non_contiguous(op, layout):
    if layout == "sliced":
        x = torch.ones(4, 64, device="cuda")[:, :32]
    else:
        x = torch.ones(32, 4, device="cuda").t()
    assert x.shape == (4, 32) and not x.is_contiguous()
    out = torch.empty(4, 16, device="cuda")
    with raises_op_error(op, "input", "contiguous"):
        _op(op)(out, x)
    with raises_op_error(op, "input", "contiguous"):
        getattr(sgl_kernel, op)(x, out=out)

    x = torch.ones(4, 32, device="cuda")
    out = torch.empty(4, 32, device="cuda")[:, :16]
    with raises_op_error(op, "out", "contiguous"):
        _op(op)(out, x)
