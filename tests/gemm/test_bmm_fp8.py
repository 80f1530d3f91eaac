# SPDX-License-Identifier: Apache-2.0
"""bmm_fp8 (API.md 2.3, cuBLASLt) against the fp64 reference of ref_bmm_fp8.py on random fp8
data: batch 1/4/16, m 1/16/48/1024, k and n multiples of 16 from 16 to 4096, the three fp8
pairs cuBLASLt runs (e4m3 x e4m3, e4m3 x e5m2, e5m2 x e4m3), fp16 and bf16 out, ``out`` given
(poisoned with NaN first) and allocated; strided and batch-broadcast operands; opcheck; CUDA
graph replay; torch.compile; the dtype, layout, shape and device errors.

Tolerance (ref_bmm_fp8.bmm_fp8_errors), per element:
``|out - ref| <= u * |ref| + 2^-10 * (|A| @ |B|) * A_scale * B_scale + 1e-6`` with u = 2^-8
(bf16) / 2^-11 (fp16), the output rounding, and 2^-10 for the fp8 tensor-core accumulation
(worst measured on an H200: 2^-11.8, at k = 128); and over each output
``max |out - ref| <= 2e-2 * max |ref|`` (API.md 1.6). Outputs are also bitwise deterministic.
"""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from tests.helpers import opcheck_any_dtype, raises_op_error

GPU = pytest.mark.gpu
OP = "bmm_fp8"
OUT_DTYPES = (torch.bfloat16, torch.float16)
WORKSPACE_BYTES = 32 * 1024 * 1024

# (b, m, k, n)
SHAPES = [
    (1, 1, 16, 16),
    (1, 16, 4096, 4096),
    (1, 1024, 4096, 4096),
    (4, 1, 4096, 1024),
    (4, 48, 512, 128),
    (4, 1024, 4096, 16),
    (16, 1, 128, 512),  # DeepSeek MLA decode: q_nope @ w_kc per head
    (16, 48, 512, 128),  # and attn @ w_vc
    (16, 16, 16, 4096),
    (16, 1024, 128, 512),
    (16, 48, 4096, 48),
]


def _sgl():
    import sgl_kernel

    return sgl_kernel


def _op():
    return torch.ops.sgl_kernel.bmm_fp8.default


@pytest.fixture
def need_sm89():
    if torch.cuda.get_device_capability() < (8, 9):
        pytest.skip("bmm_fp8 needs sm89+ (fp8 tensor cores)")


def _ref():
    from tests.gemm import ref_bmm_fp8

    return ref_bmm_fp8


def _inputs(b, m, k, n, a_dtype, b_dtype, gen):
    ref = _ref()
    A = ref.random_fp8((b, m, k), a_dtype, gen)
    B = ref.random_b(b, k, n, b_dtype, gen)
    return A, B, ref.random_scale(gen), ref.random_scale(gen)


def _check(out, A, B, sa, sb):
    ref = _ref()
    ref.assert_bmm_fp8_close(out, ref.bmm_fp8_ref(A, B, sa, sb), ref.bmm_fp8_bound(A, B, sa, sb))


# ---------------------------------------------------------------------------------------
# Numerics


def _pair_id(p):
    return f"{str(p[0]).split('_')[-1]}x{str(p[1]).split('_')[-1]}"


@GPU
@pytest.mark.parametrize("dtype", OUT_DTYPES, ids=str)
@pytest.mark.parametrize("pair", [(torch.float8_e4m3fn, torch.float8_e4m3fn), (torch.float8_e4m3fn, torch.float8_e5m2),
                                  (torch.float8_e5m2, torch.float8_e4m3fn)], ids=_pair_id)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "b{}_m{}_k{}_n{}".format(*s))
def test_matches_reference(shape, pair, dtype, gen, need_sm89):
    b, m, k, n = shape
    A, B, sa, sb = _inputs(b, m, k, n, *pair, gen)
    # out allocated by the wrapper
    out = _sgl().bmm_fp8(A, B, sa, sb, dtype)
    assert out.shape == (b, m, n) and out.dtype == dtype and out.is_contiguous()
    _check(out, A, B, sa, sb)
    # out given, poisoned so that an unwritten element fails
    given = torch.full((b, m, n), float("nan"), dtype=dtype, device="cuda")
    assert _sgl().bmm_fp8(A, B, sa, sb, dtype, out=given) is given
    _check(given, A, B, sa, sb)
    # same inputs, same result (API.md 1.2: deterministic)
    assert torch.equal(given, out)


@GPU
@pytest.mark.parametrize("dtype", OUT_DTYPES, ids=str)
def test_strided_and_broadcast_operands(dtype, gen, need_sm89):
    """Row stride > k for A, column stride > k for B, a batch-broadcast B (stride(0) == 0) and
    0-d scales: all accepted (API.md asks only row-major A / column-major B per batch)."""
    b, m, k, n = 4, 33, 256, 96
    ref = _ref()
    A = ref.random_fp8((b, m, 2 * k), torch.float8_e4m3fn, gen)[:, :, :k]
    B = ref.random_fp8((b, n, k + 32), torch.float8_e4m3fn, gen)[:, :, :k].transpose(-2, -1)
    sa, sb = ref.random_scale(gen).reshape(()), ref.random_scale(gen).reshape(())
    assert A.stride() == (m * 2 * k, 2 * k, 1) and B.stride() == (n * (k + 32), 1, k + 32)
    _check(_sgl().bmm_fp8(A, B, sa, sb, dtype), A, B, sa, sb)
    W = ref.random_fp8((1, n, k), torch.float8_e5m2, gen).expand(b, n, k)
    Bb = W.transpose(-2, -1)
    assert Bb.stride(0) == 0
    _check(_sgl().bmm_fp8(A, Bb, sa, sb, dtype), A, Bb, sa, sb)


@GPU
def test_empty_and_zero_k(gen, need_sm89):
    sgl = _sgl()
    e4m3 = torch.float8_e4m3fn
    sa = torch.ones(1, device="cuda")
    for b, m, n in ((0, 4, 16), (2, 0, 16)):
        A = torch.empty(b, m, 32, device="cuda").to(e4m3)
        B = torch.empty(b, n, 32, device="cuda").to(e4m3).transpose(-2, -1)
        assert sgl.bmm_fp8(A, B, sa, sa, torch.bfloat16).shape == (b, m, n)
    A = torch.empty(2, 3, 0, device="cuda").to(e4m3)
    B = torch.empty(2, 16, 0, device="cuda").to(e4m3).transpose(-2, -1)
    out = torch.full((2, 3, 16), float("nan"), dtype=torch.bfloat16, device="cuda")
    sgl.bmm_fp8(A, B, sa, sa, torch.bfloat16, out=out)
    assert torch.equal(out, torch.zeros_like(out))


@GPU
def test_scales_read_on_device(gen, need_sm89):
    """The scales are device pointers read at run time: changing them in place changes the
    result of the next call (and of a graph replay below) without any host sync."""
    A, B, sa, sb = _inputs(2, 16, 64, 32, torch.float8_e4m3fn, torch.float8_e4m3fn, gen)
    out1 = _sgl().bmm_fp8(A, B, sa, sb, torch.bfloat16).clone()  # bf16: no subnormals to round
    sb.mul_(2.0)
    out2 = _sgl().bmm_fp8(A, B, sa, sb, torch.bfloat16)
    torch.testing.assert_close(out2, out1 * 2, rtol=0, atol=0)


# ---------------------------------------------------------------------------------------
# Op contract: opcheck, CUDA graphs, torch.compile, fake implementation, tag


@GPU
@pytest.mark.parametrize("shape", [(1, 1, 16, 16), (4, 48, 512, 128)], ids=str)
def test_opcheck(shape, gen, need_sm89):
    b, m, k, n = shape
    A, B, sa, sb = _inputs(b, m, k, n, torch.float8_e4m3fn, torch.float8_e5m2, gen)
    D = torch.empty(b, m, n, dtype=torch.bfloat16, device="cuda")
    ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    opcheck_any_dtype(_op(), (A, B, D, sa, sb, ws, torch.cuda.current_blas_handle()))


@GPU
def test_cuda_graph_replay(gen, need_sm89):
    sgl = _sgl()
    b, m, k, n = 16, 4, 512, 128
    A, B, sa, sb = _inputs(b, m, k, n, torch.float8_e4m3fn, torch.float8_e4m3fn, gen)
    out = torch.empty(b, m, n, dtype=torch.bfloat16, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        sgl.bmm_fp8(A, B, sa, sb, torch.bfloat16, out=out)  # warm-up: heuristic and cache outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sgl.bmm_fp8(A, B, sa, sb, torch.bfloat16, out=out)
    for _ in range(3):
        A2, B2, sa2, sb2 = _inputs(b, m, k, n, torch.float8_e4m3fn, torch.float8_e4m3fn, gen)
        A.copy_(A2)
        B.copy_(B2)
        sa.copy_(sa2)
        sb.copy_(sb2)
        out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check(out, A, B, sa, sb)


@GPU
def test_torch_compile_fullgraph_op(gen, need_sm89):
    """The op inside torch.compile(fullgraph=True), with B made column-major inside the graph:
    the needs_fixed_stride_order tag keeps the transpose view the op was traced with."""
    b, m, k, n = 4, 16, 256, 64
    ref = _ref()
    A = ref.random_fp8((b, m, k), torch.float8_e4m3fn, gen)
    Wf = torch.randn(b, n, k, device="cuda", generator=gen)
    sa, sb = ref.random_scale(gen), ref.random_scale(gen)
    ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
    handle = torch.cuda.current_blas_handle()

    def f(A, Wf, sa, sb, ws):
        B = Wf.to(torch.float8_e4m3fn).transpose(-2, -1)
        D = torch.empty(b, m, n, dtype=torch.bfloat16, device=A.device)
        torch.ops.sgl_kernel.bmm_fp8.default(A, B, D, sa, sb, ws, handle)
        return D

    out = torch.compile(f, fullgraph=True)(A, Wf, sa, sb, ws)
    B = Wf.to(torch.float8_e4m3fn).transpose(-2, -1)
    _check(out, A, B, sa, sb)


@GPU
def test_torch_compile_wrapper(gen, need_sm89):
    A, B, sa, sb = _inputs(2, 16, 128, 32, torch.float8_e4m3fn, torch.float8_e4m3fn, gen)
    out = torch.compile(lambda A, B, sa, sb: _sgl().bmm_fp8(A, B, sa, sb, torch.float16))(A, B, sa, sb)
    _check(out, A, B, sa, sb)


def test_fixed_stride_order_tag():
    _sgl()
    assert torch.Tag.needs_fixed_stride_order in _op().tags


def test_fake_wrapper_and_op():
    """Under FakeTensorMode (no GPU needed): the wrapper allocates [b, m, n] of dtype and the op
    is a mutating op returning None. The real workspace cache is left alone."""
    sgl = _sgl()
    from sgl_kernel import utils

    cached = dict(utils._cache_buf)
    with FakeTensorMode():
        A = torch.empty(4, 5, 32, device="cuda").to(torch.float8_e4m3fn)
        B = torch.empty(4, 48, 32, device="cuda").to(torch.float8_e5m2).transpose(-2, -1)
        s = torch.empty(1, device="cuda")
        out = sgl.bmm_fp8(A, B, s, s, torch.float16)
        assert out.shape == (4, 5, 48) and out.dtype == torch.float16 and out.device.type == "cuda"
        ws = torch.empty(16, dtype=torch.uint8, device="cuda")
        assert _op()(A, B, out, s, s, ws, 1) is None
    assert utils._cache_buf == cached


# ---------------------------------------------------------------------------------------
# Errors (API.md 1.4): message "sgl_kernel.bmm_fp8: <argument> ..."


def _good(gen, b=2, m=8, k=32, n=16, a_dtype=torch.float8_e4m3fn, b_dtype=torch.float8_e4m3fn):
    return _inputs(b, m, k, n, a_dtype, b_dtype, gen)


def _call_op(A, B, sa, sb, D=None, ws=None, handle=None):
    if D is None:
        D = torch.empty(A.shape[0], A.shape[1], B.shape[-1], dtype=torch.bfloat16, device=A.device)
    if ws is None:
        ws = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=A.device)
    if handle is None:
        handle = torch.cuda.current_blas_handle()
    _op()(A, B, D, sa, sb, ws, handle)


@GPU
def test_error_both_e5m2(gen, need_sm89):
    A, B, sa, sb = _good(gen, a_dtype=torch.float8_e5m2, b_dtype=torch.float8_e5m2)
    with raises_op_error(OP, "B", "torch.float8_e4m3fn", "e5m2"):
        _sgl().bmm_fp8(A, B, sa, sb, torch.bfloat16)


@GPU
def test_error_dtypes(gen, need_sm89):
    A, B, sa, sb = _good(gen)
    with raises_op_error(OP, "A", "dtype"):
        _sgl().bmm_fp8(A.to(torch.bfloat16), B, sa, sb, torch.bfloat16)
    with raises_op_error(OP, "B", "dtype"):
        _call_op(A, B.to(torch.int8), sa, sb)
    with raises_op_error(OP, "A_scale", "torch.float32"):
        _sgl().bmm_fp8(A, B, sa.to(torch.bfloat16), sb, torch.bfloat16)
    with raises_op_error(OP, "dtype", "torch.float32"):
        _sgl().bmm_fp8(A, B, sa, sb, torch.float32)
    with raises_op_error(OP, "out", "dtype"):
        _sgl().bmm_fp8(A, B, sa, sb, torch.bfloat16, out=torch.empty(2, 8, 16, dtype=torch.float16, device="cuda"))
    with raises_op_error(OP, "D", "dtype"):
        _call_op(A, B, sa, sb, D=torch.empty(2, 8, 16, dtype=torch.float32, device="cuda"))


@GPU
def test_error_layouts(gen, need_sm89):
    A, B, sa, sb = _good(gen)
    # A column-major per batch
    A_t = A.transpose(-2, -1).contiguous().transpose(-2, -1)
    with raises_op_error(OP, "A", "row-major"):
        _sgl().bmm_fp8(A_t, B, sa, sb, torch.bfloat16)
    # B row-major (contiguous [b, k, n])
    with raises_op_error(OP, "B", "column-major"):
        _sgl().bmm_fp8(A, B.contiguous(), sa, sb, torch.bfloat16)
    # D not contiguous
    D = torch.empty(2, 16, 8, dtype=torch.bfloat16, device="cuda").transpose(-2, -1)
    with raises_op_error(OP, "D", "contiguous"):
        _call_op(A, B, sa, sb, D=D)
    # row stride not a multiple of 16
    A_odd = torch.empty(2, 8, 40, device="cuda").to(torch.float8_e4m3fn)[:, :, :32]
    with raises_op_error(OP, "A", "multiple of 16"):
        _sgl().bmm_fp8(A_odd, B, sa, sb, torch.bfloat16)
    # misaligned start
    flat = torch.empty(2 * 8 * 32 + 8, device="cuda").to(torch.float8_e4m3fn)
    with raises_op_error(OP, "A", "16-byte aligned"):
        _sgl().bmm_fp8(flat[8:].view(2, 8, 32), B, sa, sb, torch.bfloat16)


@GPU
def test_error_shapes(gen, need_sm89):
    A, B, sa, sb = _good(gen)
    with raises_op_error(OP, "A", "multiple of 16"):  # k % 16 != 0
        A24, B24, _, _ = _good(gen, k=24)
        _sgl().bmm_fp8(A24, B24, sa, sb, torch.bfloat16)
    with raises_op_error(OP, "B", "multiple of 16"):  # n % 16 != 0
        A8, B8, _, _ = _good(gen, n=24)
        _sgl().bmm_fp8(A8, B8, sa, sb, torch.bfloat16)
    with raises_op_error(OP, "B", "shape[1]"):  # k mismatch
        _sgl().bmm_fp8(A, _good(gen, k=48)[1], sa, sb, torch.bfloat16)
    with raises_op_error(OP, "B", "shape[0]"):  # batch mismatch
        _sgl().bmm_fp8(A, _good(gen, b=3)[1], sa, sb, torch.bfloat16)
    with raises_op_error(OP, "A", "3-D"):
        _call_op(A[0], B, sa, sb, D=torch.empty(2, 8, 16, dtype=torch.bfloat16, device="cuda"))
    with raises_op_error(OP, "A_scale", "one element"):  # non-scalar scales
        _sgl().bmm_fp8(A, B, torch.ones(2, device="cuda"), sb, torch.bfloat16)
    with raises_op_error(OP, "B_scale", "one element"):
        _sgl().bmm_fp8(A, B, sa, torch.ones(1, 2, device="cuda"), torch.bfloat16)
    with raises_op_error(OP, "D", "shape[2]"):
        _call_op(A, B, sa, sb, D=torch.empty(2, 8, 32, dtype=torch.bfloat16, device="cuda"))


@GPU
def test_error_devices(gen, need_sm89):
    A, B, sa, sb = _good(gen)
    with raises_op_error(OP, "A", "CUDA"):
        _sgl().bmm_fp8(A.cpu(), B.cpu(), sa.cpu(), sb.cpu(), torch.bfloat16)
    with raises_op_error(OP, "A", "CUDA"):
        _call_op(A.cpu(), B.cpu(), sa.cpu(), sb.cpu(), ws=torch.empty(16, dtype=torch.uint8))
    with raises_op_error(OP, "B", "device"):
        _sgl().bmm_fp8(A, B.cpu(), sa, sb, torch.bfloat16)
    with raises_op_error(OP, "A_scale", "device"):
        _sgl().bmm_fp8(A, B, sa.cpu(), sb, torch.bfloat16)
    with raises_op_error(OP, "B_scale", "device"):
        _sgl().bmm_fp8(A, B, sa, sb.cpu(), torch.bfloat16)
    with raises_op_error(OP, "workspace_buffer", "device"):
        _call_op(A, B, sa, sb, ws=torch.empty(16, dtype=torch.uint8))
    with raises_op_error(OP, "cublas_handle"):
        _call_op(A, B, sa, sb, handle=0)


@GPU
def test_error_old_gpu(gen):
    if torch.cuda.get_device_capability() >= (8, 9):
        pytest.skip("checks the error on GPUs below sm89")
    A = torch.zeros(1, 1, 16, device="cuda").to(torch.float8_e4m3fn)
    B = torch.zeros(1, 16, 16, device="cuda").to(torch.float8_e4m3fn).transpose(-2, -1)
    s = torch.ones(1, device="cuda")
    with pytest.raises(RuntimeError, match=r"sgl_kernel\.bmm_fp8: .*sm_?\d+"):
        _sgl().bmm_fp8(A, B, s, s, torch.bfloat16)
