# SPDX-License-Identifier: Apache-2.0
"""fp8_blockwise_scaled_mm (API.md 2.3) against an fp32 reference that scales each 128-deep
k-block's exact partial product: M in {1, 7, 16, 64, 128, 1024, 4096}, DeepSeek-V3 and Llama
layer shapes, both output types, both scale layouts the API names (M-major / K-major, and
row-major ones the op copies), padded scale strides, every kernel configuration, CUDA-graph
replay, opcheck and the shape errors.

Tolerance, per element: ``|out - ref| <= u |ref| + 2^-12 * sum_kb |A_kb| @ |B_kb| * sa * sb``,
u = 2^-8 (bf16) / 2^-11 (fp16).
"""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.gemm.ref_gemm import BLOCKWISE_ACC_TOL, FP8, OUT_ROUNDING, random_fp8
from tests.helpers import opcheck_any_dtype, raises_op_error

pytestmark = pytest.mark.gpu

OUT_DTYPES = (torch.bfloat16, torch.float16)
# (N, K): DeepSeek-V3 (q_b, kv_b, o, fused gate_up and down of the dense layers), Llama-3-8B
NK = [(24576, 1536), (32768, 512), (7168, 16384), (36864, 7168), (7168, 18432), (4096, 4096), (6144, 4096)]
MS = (1, 7, 16, 64, 128, 1024, 4096)
CASES = [(m, n, k) for m in MS for (n, k) in NK if m * n * k <= 2**37]


@pytest.fixture(autouse=True)
def _need_sm90():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("fp8_blockwise_scaled_mm has sm90a kernels only")


def _inputs(m, n, k, gen):
    a, w = random_fp8((m, k), gen), random_fp8((n, k), gen)
    # M-major scales_a (column-major, as the group quant writes them), K-major scales_b
    sa = (torch.rand(k // 128, m, device="cuda", generator=gen) * 1.5 + 0.25).t()
    sb = (torch.rand(n // 128, k // 128, device="cuda", generator=gen) * 1.5 + 0.25).t()
    return a, w.t(), sa, sb


def blockwise_ref(a, b, sa, sb):
    """fp32 reference (TF32 off) and the accumulation-error scale sum_kb |A_kb| |B_kb| sa sb."""
    m, k = a.shape
    n = b.shape[1]
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        ref = torch.zeros(m, n, device="cuda")
        bound = torch.zeros(m, n, device="cuda")
        af, bf = a.float(), b.float()
        for kb in range(k // 128):
            blk = slice(kb * 128, (kb + 1) * 128)
            scale = sa[:, kb].float()[:, None] * sb[kb].float().repeat_interleave(128)[None, :]
            ref += (af[:, blk] @ bf[blk]) * scale
            bound += (af[:, blk].abs() @ bf[blk].abs()) * scale.abs()
        return ref, bound
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def _check(a, b, sa, sb, out_dtype):
    out = sgl_kernel.fp8_blockwise_scaled_mm(a, b, sa, sb, out_dtype)
    assert out.shape == (a.shape[0], b.shape[1]) and out.dtype == out_dtype and out.is_contiguous()
    ref, bound = blockwise_ref(a, b, sa, sb)
    assert torch.isfinite(out).all()
    err = (out.float() - ref).abs()
    allowed = OUT_ROUNDING[out_dtype] * ref.abs() + BLOCKWISE_ACC_TOL * bound + 1e-6
    bad = err > allowed
    assert not bad.any(), (f"{int(bad.sum())} of {out.numel()} out of tolerance, worst err/allowed "
                           f"{float((err / allowed).max()):.2f}")


@pytest.mark.parametrize("m,n,k", CASES)
def test_layer_shapes(m, n, k, gen):
    out_dtype = OUT_DTYPES[CASES.index((m, n, k)) % 2]
    _check(*_inputs(m, n, k, gen), out_dtype)


@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("m,n,k", [(1, 128, 128), (3, 256, 384), (65, 384, 640), (130, 1152, 1024),
                                   (333, 640, 2176), (1001, 2176, 1152)])
def test_odd_sizes(out_dtype, m, n, k, gen):
    _check(*_inputs(m, n, k, gen), out_dtype)


@pytest.mark.parametrize("swizzle", ("1", "4"))
@pytest.mark.parametrize("config", ("0", "1"))
@pytest.mark.parametrize("m", (1, 50, 200, 1100))
def test_each_configuration(config, swizzle, m, gen, monkeypatch):
    """Every configuration of blockwise_mm_dispatch.cu, forced, with both swizzles; N = 1152
    and M = 1100 leave an odd number of 128-wide tiles (a partial swizzle group at 4)."""
    monkeypatch.setenv("SGL_KERNEL_BLOCKWISE_MM_CONFIG", config)
    monkeypatch.setenv("SGL_KERNEL_BLOCKWISE_MM_SWIZZLE", swizzle)
    _check(*_inputs(m, 1152, 1536, gen), torch.bfloat16)


@pytest.mark.parametrize("config", ("0", "1"))
@pytest.mark.parametrize("k", (128, 256, 384, 640, 1664))
def test_k_tile_counts(config, k, gen, monkeypatch):
    """One, two and odd numbers of 128-deep k-tiles: the cooperative configuration's mainloop
    (blockwise_overlap_mainloop.cuh) retires its two temporaries in pairs, with a separate path
    for an odd count."""
    monkeypatch.setenv("SGL_KERNEL_BLOCKWISE_MM_CONFIG", config)
    _check(*_inputs(300, 640, k, gen), torch.bfloat16)


@pytest.mark.parametrize("m", (1, 5, 64, 257))
def test_scale_layouts(m, gen):
    """Row-major scales (copied by the op), padded M-major scales_a (read in place), and an
    M-major scales_a whose k-block stride is not a multiple of 4 (copied)."""
    a, b, sa, sb = _inputs(m, 512, 1024, gen)
    ref = sgl_kernel.fp8_blockwise_scaled_mm(a, b, sa, sb, torch.bfloat16)
    _check(a, b, sa.contiguous(), sb.contiguous(), torch.bfloat16)
    pad = torch.empty(sa.shape[1], m + 12, device="cuda")[:, 4:4 + m].t()
    pad.copy_(sa)
    assert pad.stride() == (1, m + 12)
    out = sgl_kernel.fp8_blockwise_scaled_mm(a, b, pad, sb, torch.bfloat16)
    assert torch.equal(out, ref)
    odd = torch.empty(sa.shape[1], m + 1, device="cuda")[:, :m].t()
    odd.copy_(sa)
    assert torch.equal(sgl_kernel.fp8_blockwise_scaled_mm(a, b, odd, sb, torch.bfloat16), ref)


@pytest.mark.parametrize("which", ("scales_a", "scales_b"))
def test_scale_stride_past_int32(which, gen):
    """A scales view whose stride does not fit int32 (the kernel's scale layouts hold int32
    strides): the op copies it instead of truncating the stride. The view needs 8 GiB of
    storage behind it (2^31 floats between its two k-blocks or n-blocks)."""
    if torch.cuda.mem_get_info()[0] < 10 * 2**30:
        pytest.skip("needs 10 GiB of free GPU memory for an 8 GiB scales view")
    m, n, k = 4, 256, 256  # two k-blocks, two n-blocks
    a, b, sa, sb = _inputs(m, n, k, gen)
    ref = sgl_kernel.fp8_blockwise_scaled_mm(a, b, sa, sb, torch.bfloat16)
    far = 2**31
    store = torch.empty(far + max(m, k // 128), device="cuda")
    if which == "scales_a":  # [M, K/128], M-major, k-blocks 2^31 floats apart
        view = store.as_strided((m, k // 128), (1, far))
        view.copy_(sa)
        out = sgl_kernel.fp8_blockwise_scaled_mm(a, b, view, sb, torch.bfloat16)
    else:  # [K/128, N/128], K-major, n-blocks 2^31 floats apart
        view = store.as_strided((k // 128, n // 128), (1, far))
        view.copy_(sb)
        out = sgl_kernel.fp8_blockwise_scaled_mm(a, b, sa, view, torch.bfloat16)
    del store, view
    assert torch.equal(out, ref)


@pytest.mark.parametrize("m", (4, 300))
def test_cuda_graph(m, gen):
    a, b, sa, sb = _inputs(m, 1024, 2048, gen)
    sgl_kernel.fp8_blockwise_scaled_mm(a, b, sa, sb, torch.bfloat16)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = sgl_kernel.fp8_blockwise_scaled_mm(a, b, sa, sb, torch.bfloat16)
    for dst, src in zip((a, b, sa, sb), _inputs(m, 1024, 2048, gen)):
        dst.copy_(src)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    ref, bound = blockwise_ref(a, b, sa, sb)
    assert ((out.float() - ref).abs() <= 2.0**-8 * ref.abs() + 2.0**-12 * bound + 1e-6).all()


def test_opcheck(gen):
    a, b, sa, sb = _inputs(24, 256, 384, gen)
    opcheck_any_dtype(torch.ops.sgl_kernel.fp8_blockwise_scaled_mm.default, (a, b, sa, sb, torch.bfloat16))


def test_bad_inputs(gen):
    op = "fp8_blockwise_scaled_mm"
    f = sgl_kernel.fp8_blockwise_scaled_mm
    a, b, sa, sb = _inputs(32, 256, 384, gen)
    bf = torch.bfloat16
    with raises_op_error(op, "mat_a", "dtype"):
        f(a.view(torch.int8), b, sa, sb, bf)
    with raises_op_error(op, "mat_b", "column-major"):
        f(a, b.contiguous(), sa, sb, bf)
    with raises_op_error(op, "mat_a", "(K)", "128"):
        a2 = random_fp8((32, 400), gen)
        f(a2, random_fp8((256, 400), gen).t(), sa, sb, bf)
    with raises_op_error(op, "mat_b", "(N)", "128"):
        f(a, random_fp8((264, 384), gen).t(), sa, sb, bf)
    with raises_op_error(op, "scales_a", "[M, K / 128]"):
        f(a, b, sa[:31], sb, bf)
    with raises_op_error(op, "scales_b", "[K / 128, N / 128]"):
        f(a, b, sa, sb[:2], bf)
    with raises_op_error(op, "scales_b", "dtype"):
        f(a, b, sa, sb.double(), bf)
    with raises_op_error(op, "out_dtype"):
        f(a, b, sa, sb, torch.float32)
    with raises_op_error(op, "mat_a", "CUDA"):
        f(a.cpu(), b, sa, sb, bf)
    assert FP8 == torch.float8_e4m3fn


def _huge_args(m: int, n: int, k: int = 128):
    """mat_a [m, k] and mat_b [k, n] (column-major) with zero strides on M and N; scales of one
    element (they are checked after M, N and K)."""
    a = torch.empty_strided((m, k), (0, 1), dtype=FP8, device="cuda")
    b = torch.empty_strided((k, n), (1, 0), dtype=FP8, device="cuda")
    one = torch.ones(1, 1, device="cuda")
    return a, b, one, one


@pytest.mark.parametrize("dim, arg", [("M", "mat_a"), ("N", "mat_b")])
def test_size_limit_messages(dim, arg):
    """An M or N past INT32_MAX / 2 (CUTLASS takes the problem shape as int and rounds it up to
    whole tiles) is refused before any allocation or launch. K has no such test: mat_a's rows
    are dense, so a K of 2^30 takes 1 GiB for mat_a and as much for mat_b."""
    m, n = (2**30, 128) if dim == "M" else (1, 2**30)
    with raises_op_error("fp8_blockwise_scaled_mm", arg, f"({dim}) must be at most {2**30 - 1}", f"got {2**30}"):
        torch.ops.sgl_kernel.fp8_blockwise_scaled_mm.default(*_huge_args(m, n), torch.bfloat16)


def test_size_limit_boundary():
    """M = INT32_MAX / 2 passes the shape limit: scales_a's shape is the next check to fail."""
    with raises_op_error("fp8_blockwise_scaled_mm", "scales_a", "[M, K / 128]"):
        torch.ops.sgl_kernel.fp8_blockwise_scaled_mm.default(*_huge_args(2**30 - 1, 128), torch.bfloat16)
