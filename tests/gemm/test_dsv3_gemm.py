# SPDX-License-Identifier: Apache-2.0
"""dsv3_router_gemm and dsv3_fused_a_gemm (API.md 2.3) on the GPU against the fp64 reference of
ref_dsv3.py: every M in 1..16, both expert counts, both router output dtypes, strided views,
outputs poisoned with NaN before each call, determinism, opcheck, torch.compile, CUDA-graph
replay and the argument errors.

Tolerance (ref_dsv3.dsv3_mismatch), per element against the fp64 product of the bf16 inputs:
``|out - ref| <= rtol * |ref| + atol_rel * max|ref|``, (rtol, atol_rel) = (1e-4, 1e-4) for fp32
output and (8e-3, 1e-3) for bf16 output; normwise relative error <= 1e-5 / 4e-3.
"""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.gemm.ref_dsv3 import (
    EXPERTS,
    FUSED_A_N,
    HIDDEN,
    dsv3_mismatch,
    dsv3_ref,
    random_activations,
    random_weight,
)
from tests.helpers import raises_op_error

pytestmark = pytest.mark.gpu

MS = list(range(1, 17))
ROUTER_OUT = (torch.float32, torch.bfloat16)


def _router_op():
    return torch.ops.sgl_kernel.dsv3_router_gemm.default


def _fused_op():
    return torch.ops.sgl_kernel.dsv3_fused_a_gemm.default


def _check(out, ref):
    msg = dsv3_mismatch(out, ref)
    assert msg is None, msg


def _poisoned(shape, dtype):
    return torch.full(shape, float("nan"), dtype=dtype, device="cuda")


# ---------------------------------------------------------------------------------------
# dsv3_router_gemm


@pytest.mark.parametrize("out_dtype", ROUTER_OUT, ids=str)
@pytest.mark.parametrize("e", EXPERTS)
@pytest.mark.parametrize("m", MS)
def test_router(m, e, out_dtype, gen):
    a = random_activations(m, gen)
    w = random_weight(e, gen)
    ref = dsv3_ref(a, w)
    out = sgl_kernel.dsv3_router_gemm(a, w, out_dtype)
    assert out.shape == (m, e) and out.dtype == out_dtype
    _check(out, ref)
    given = _poisoned((m, e), out_dtype)
    assert _router_op()(given, a, w) is None
    assert torch.equal(given, out), "not deterministic"


def test_router_default_dtype(gen):
    a, w = random_activations(3, gen), random_weight(256, gen)
    out = sgl_kernel.dsv3_router_gemm(a, w)
    assert out.dtype == torch.bfloat16
    _check(out, dsv3_ref(a, w))


@pytest.mark.parametrize("m", [1, 7, 16])
@pytest.mark.parametrize("e", EXPERTS)
def test_router_strided(m, e, gen):
    """mat_a, mat_b and output views with row strides larger than their widths."""
    a = random_activations(m, gen)
    w = random_weight(e, gen)
    a_big = torch.zeros(m, HIDDEN + 64, dtype=torch.bfloat16, device="cuda")
    a_big[:, 64:] = a
    w_big = torch.zeros(e, HIDDEN + 128, dtype=torch.bfloat16, device="cuda")
    w_big[:, :HIDDEN] = w
    out_big = _poisoned((m, e + 40), torch.float32)
    out = out_big[:, 8 : 8 + e]
    _router_op()(out, a_big[:, 64:], w_big[:, :HIDDEN])
    _check(out, dsv3_ref(a, w))
    assert torch.isnan(out_big[:, :8]).all() and torch.isnan(out_big[:, 8 + e :]).all(), "wrote outside output"


@pytest.mark.parametrize("e", EXPERTS)
def test_router_deterministic(e, gen):
    a, w = random_activations(16, gen), random_weight(e, gen)
    first = sgl_kernel.dsv3_router_gemm(a, w, torch.float32)
    for _ in range(5):
        assert torch.equal(sgl_kernel.dsv3_router_gemm(a, w, torch.float32), first)


@pytest.mark.parametrize("out_dtype", ROUTER_OUT, ids=str)
def test_router_opcheck(out_dtype, gen):
    a, w = random_activations(5, gen), random_weight(256, gen)
    out = torch.empty(5, 256, dtype=out_dtype, device="cuda")
    torch.library.opcheck(_router_op(), (out, a, w))


def test_router_torch_compile(gen):
    a, w = random_activations(4, gen), random_weight(384, gen)
    fn = torch.compile(lambda x, y: sgl_kernel.dsv3_router_gemm(x, y, torch.float32), fullgraph=True)
    _check(fn(a, w), dsv3_ref(a, w))


# ---------------------------------------------------------------------------------------
# dsv3_fused_a_gemm


@pytest.mark.parametrize("m", MS)
def test_fused_a(m, gen):
    a = random_activations(m, gen)
    w = random_weight(FUSED_A_N, gen)  # W [2112, 7168]; mat_b = W.t() is column-major
    ref = dsv3_ref(a, w)
    out = sgl_kernel.dsv3_fused_a_gemm(a, w.t())
    assert out.shape == (m, FUSED_A_N) and out.dtype == torch.bfloat16
    _check(out, ref)
    given = _poisoned((m, FUSED_A_N), torch.bfloat16)
    assert sgl_kernel.dsv3_fused_a_gemm(a, w.t(), given) is given
    assert torch.equal(given, out), "not deterministic"
    given.fill_(float("nan"))
    assert _fused_op()(given, a, w.t()) is None
    assert torch.equal(given, out)


@pytest.mark.parametrize("m", [1, 9, 16])
def test_fused_a_strided(m, gen):
    """mat_a rows, W rows (mat_b columns) and output rows with strides larger than their widths."""
    a = random_activations(m, gen)
    w = random_weight(FUSED_A_N, gen)
    a_big = torch.zeros(m, HIDDEN + 32, dtype=torch.bfloat16, device="cuda")
    a_big[:, :HIDDEN] = a
    w_big = torch.zeros(FUSED_A_N, HIDDEN + 64, dtype=torch.bfloat16, device="cuda")
    w_big[:, 64:] = w
    mat_b = w_big[:, 64:].t()
    assert mat_b.stride() == (1, HIDDEN + 64)
    out_big = _poisoned((m, FUSED_A_N + 16), torch.bfloat16)
    out = out_big[:, :FUSED_A_N]
    sgl_kernel.dsv3_fused_a_gemm(a_big[:, :HIDDEN], mat_b, out)
    _check(out, dsv3_ref(a, w))
    assert torch.isnan(out_big[:, FUSED_A_N:]).all(), "wrote outside output"


def test_fused_a_deterministic(gen):
    a, w = random_activations(16, gen), random_weight(FUSED_A_N, gen)
    first = sgl_kernel.dsv3_fused_a_gemm(a, w.t())
    for _ in range(5):
        assert torch.equal(sgl_kernel.dsv3_fused_a_gemm(a, w.t()), first)


def test_fused_a_opcheck(gen):
    a, w = random_activations(3, gen), random_weight(FUSED_A_N, gen)
    out = torch.empty(3, FUSED_A_N, dtype=torch.bfloat16, device="cuda")
    torch.library.opcheck(_fused_op(), (out, a, w.t()))


def test_fused_a_torch_compile(gen):
    a, w = random_activations(6, gen), random_weight(FUSED_A_N, gen)
    fn = torch.compile(lambda x, y: sgl_kernel.dsv3_fused_a_gemm(x, y), fullgraph=True)
    _check(fn(a, w.t()), dsv3_ref(a, w))


# ---------------------------------------------------------------------------------------
# CUDA graphs


@pytest.mark.parametrize("op", ["router_fp32", "router_bf16", "fused_a"])
def test_cuda_graph(op, gen):
    """Capture with static inputs, replay on new activations and weights."""
    m = 11
    n = FUSED_A_N if op == "fused_a" else 384
    a, w = random_activations(m, gen), random_weight(n, gen)

    def step():
        if op == "fused_a":
            return sgl_kernel.dsv3_fused_a_gemm(a, w.t())
        return sgl_kernel.dsv3_router_gemm(a, w, torch.float32 if op == "router_fp32" else torch.bfloat16)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for _ in range(3):
        a.copy_(random_activations(m, gen))
        w.copy_(random_weight(n, gen))
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(out, dsv3_ref(a, w))


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops: the C++ checks protect direct callers too)

ROUTER = "dsv3_router_gemm"
FUSED = "dsv3_fused_a_gemm"


def _bf16(*shape):
    return torch.zeros(shape, dtype=torch.bfloat16, device="cuda")


def _router_case(kind):
    """(output, mat_a, mat_b, argument named, message fragments)"""
    out, a, w = torch.empty(4, 256, device="cuda"), _bf16(4, HIDDEN), _bf16(256, HIDDEN)
    if kind == "a_dtype":
        return out, a.half(), w, "mat_a", ("dtype", "torch.bfloat16", "torch.float16")
    if kind == "a_rows_17":
        return torch.empty(17, 256, device="cuda"), _bf16(17, HIDDEN), w, "mat_a", ("16", "17")
    if kind == "a_rows_0":
        return torch.empty(0, 256, device="cuda"), _bf16(0, HIDDEN), w, "mat_a", ("between 1 and 16",)
    if kind == "a_hidden":
        return out, _bf16(4, 4096), _bf16(256, 4096), "mat_a", ("7168", "4096")
    if kind == "a_rank":
        return out, a[None], w, "mat_a", ("2-D",)
    if kind == "a_transposed":
        return out, _bf16(HIDDEN, 4).t(), w, "mat_a", ("row-major",)
    if kind == "a_misaligned":
        return out, _bf16(4, HIDDEN + 8)[:, 1 : 1 + HIDDEN], w, "mat_a", ("16-byte",)
    if kind == "a_cpu":
        return out.cpu(), a.cpu(), w.cpu(), "mat_a", ("CUDA tensor",)
    if kind == "b_experts":
        return torch.empty(4, 128, device="cuda"), a, _bf16(128, HIDDEN), "mat_b", ("256 or 384", "128")
    if kind == "b_dtype":
        return out, a, w.float(), "mat_b", ("dtype",)
    if kind == "b_hidden":
        return out, a, _bf16(256, 4096), "mat_b", ("7168",)
    if kind == "b_column_major":
        return out, a, _bf16(HIDDEN, 256).t(), "mat_b", ("row-major",)
    if kind == "b_device":
        return out, a, w.cpu(), "mat_b", ("device",)
    if kind == "out_dtype":
        return out.half(), a, w, "output", ("dtype", "torch.float16")
    if kind == "out_shape":
        return torch.empty(4, 384, device="cuda"), a, w, "output", ("256",)
    if kind == "out_rows":
        return torch.empty(3, 256, device="cuda"), a, w, "output", ("shape[0]",)
    raise ValueError(kind)


ROUTER_BAD = ["a_dtype", "a_rows_17", "a_rows_0", "a_hidden", "a_rank", "a_transposed", "a_misaligned", "a_cpu",
              "b_experts", "b_dtype", "b_hidden", "b_column_major", "b_device", "out_dtype", "out_shape", "out_rows"]


@pytest.mark.parametrize("kind", ROUTER_BAD)
def test_router_bad_inputs(kind):
    out, a, w, arg, fragments = _router_case(kind)
    with raises_op_error(ROUTER, arg, *fragments):
        _router_op()(out, a, w)


def test_router_wrapper_bad_out_dtype():
    a, w = _bf16(2, HIDDEN), _bf16(256, HIDDEN)
    with raises_op_error(ROUTER, "output", "dtype", "torch.float16"):
        sgl_kernel.dsv3_router_gemm(a, w, torch.float16)


def _fused_case(kind):
    out, a, w = _bf16(4, FUSED_A_N), _bf16(4, HIDDEN), _bf16(FUSED_A_N, HIDDEN)
    b = w.t()
    if kind == "a_dtype":
        return out, a.float(), b, "mat_a", ("dtype",)
    if kind == "a_rows_17":
        return _bf16(17, FUSED_A_N), _bf16(17, HIDDEN), b, "mat_a", ("16", "17")
    if kind == "a_hidden":
        return out, _bf16(4, 4096), _bf16(FUSED_A_N, 4096).t(), "mat_a", ("7168",)
    if kind == "a_cpu":
        return out.cpu(), a.cpu(), b.cpu(), "mat_a", ("CUDA tensor",)
    if kind == "b_row_major":
        return out, a, _bf16(HIDDEN, FUSED_A_N), "mat_b", ("column-major",)
    if kind == "b_width":
        return _bf16(4, 2048), a, _bf16(2048, HIDDEN).t(), "mat_b", ("2112", "2048")
    if kind == "b_rows":
        return out, a, _bf16(FUSED_A_N, 4096).t(), "mat_b", ("7168",)
    if kind == "b_dtype":
        return out, a, b.half(), "mat_b", ("dtype",)
    if kind == "b_misaligned":
        return out, a, _bf16(FUSED_A_N, HIDDEN + 8)[:, 1 : 1 + HIDDEN].t(), "mat_b", ("16-byte",)
    if kind == "out_dtype":
        return out.float(), a, b, "output", ("dtype", "torch.float32")
    if kind == "out_shape":
        return _bf16(4, 2048), a, b, "output", ("2112",)
    if kind == "out_transposed":
        return _bf16(FUSED_A_N, 4).t(), a, b, "output", ("contiguous",)
    raise ValueError(kind)


FUSED_BAD = ["a_dtype", "a_rows_17", "a_hidden", "a_cpu", "b_row_major", "b_width", "b_rows", "b_dtype",
             "b_misaligned", "out_dtype", "out_shape", "out_transposed"]


@pytest.mark.parametrize("kind", FUSED_BAD)
def test_fused_a_bad_inputs(kind):
    out, a, b, arg, fragments = _fused_case(kind)
    with raises_op_error(FUSED, arg, *fragments):
        _fused_op()(out, a, b)
    with raises_op_error(FUSED, arg, *fragments):
        sgl_kernel.dsv3_fused_a_gemm(a, b, out)
