# SPDX-License-Identifier: Apache-2.0
"""``sgl_kernel.gemm``: the GEMM family and the GEMM API module of sgl-kernel (API.md 1.1, 2.3).

Layout convention (API.md 2.3): ``mat_a`` is row-major ``[M, K]``; ``mat_b`` is
**column-major** ``[K, N]`` (``mat_b.stride(0) == 1``: the transpose view ``W.t()`` of a
row-major weight ``W [N, K]``); outputs are new row-major ``[M, N]`` tensors.

The 8-bit quantization functions that feed the GEMMs live here in the sgl-kernel API; they
are implemented in :mod:`sgl_kernel.quantization` and re-exported unchanged.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional

import torch
from torch._subclasses.fake_tensor import FakeTensor

from sgl_kernel.quantization import (
    sgl_per_tensor_quant_fp8,
    sgl_per_token_group_quant_8bit,
    sgl_per_token_group_quant_fp8,
    sgl_per_token_group_quant_int8,
    sgl_per_token_quant_fp8,
    sgl_per_token_quant_int8,
)
from sgl_kernel.utils import _get_cache_buf

__all__ = [
    "sgl_per_token_quant_fp8",
    "sgl_per_tensor_quant_fp8",
    "sgl_per_token_group_quant_8bit",
    "sgl_per_token_group_quant_fp8",
    "sgl_per_token_group_quant_int8",
    "sgl_per_token_quant_int8",
    "fp8_scaled_mm",
    "int8_scaled_mm",
    "fp8_blockwise_scaled_mm",
    "bmm_fp8",
    "awq_dequantize",
    "dsv3_router_gemm",
    "dsv3_fused_a_gemm",
    "shuffle_rows",
]

FAMILY = "gemm"
# op name -> lowest arch with a kernel (API.md)
OPS = {
    "fp8_scaled_mm": 89,
    "int8_scaled_mm": 80,
    "fp8_blockwise_scaled_mm": 90,
    "bmm_fp8": 89,
    "awq_dequantize": 80,
    "dsv3_router_gemm": 80,
    "dsv3_fused_a_gemm": 80,
    "shuffle_rows": 80,
}
# ops whose kernels live in arch-specific parts of the family (csrc/gemm/sm90/: CUTLASS 3.x,
# sm90a; csrc/gemm/sm89/, sm80/: CUTLASS 2.x fp8 / int8 for every other GPU)
OP_FAMILIES = {
    "fp8_scaled_mm": ("gemm_sm90", "gemm_sm89"),
    "int8_scaled_mm": ("gemm_sm90", "gemm_sm80"),
    "fp8_blockwise_scaled_mm": ("gemm_sm90",),
    "shuffle_rows": ("project",),  # the row gather of csrc/project/embedding_lookup.cu
}

_FP8 = torch.float8_e4m3fn

_fp8_scaled_mm = torch.ops.sgl_kernel.fp8_scaled_mm.default
_int8_scaled_mm = torch.ops.sgl_kernel.int8_scaled_mm.default
_fp8_blockwise_scaled_mm = torch.ops.sgl_kernel.fp8_blockwise_scaled_mm.default
_bmm_fp8 = torch.ops.sgl_kernel.bmm_fp8.default
_shuffle_rows = torch.ops.sgl_kernel.shuffle_rows.default


@torch.library.register_fake("sgl_kernel::fp8_scaled_mm")
def _fp8_scaled_mm_fake(mat_a, mat_b, scales_a, scales_b, out_dtype, bias=None):
    return mat_a.new_empty((mat_a.shape[0], mat_b.shape[1]), dtype=out_dtype)


@torch.library.register_fake("sgl_kernel::int8_scaled_mm")
def _int8_scaled_mm_fake(mat_a, mat_b, scales_a, scales_b, out_dtype, bias=None):
    return mat_a.new_empty((mat_a.shape[0], mat_b.shape[1]), dtype=out_dtype)


@torch.library.register_fake("sgl_kernel::fp8_blockwise_scaled_mm")
def _fp8_blockwise_scaled_mm_fake(mat_a, mat_b, scales_a, scales_b, out_dtype):
    return mat_a.new_empty((mat_a.shape[0], mat_b.shape[1]), dtype=out_dtype)


_SCALED_MM_NOTES = """
    Parameters
    ----------
    mat_a : torch.Tensor
        ``[M, K]`` row-major (``stride(1) == 1``), {dtype}; 16-byte aligned start and a row
        stride that is a multiple of 16 elements. ``K % 16 == 0``.
    mat_b : torch.Tensor
        ``[K, N]`` column-major (``stride(0) == 1``, i.e. ``W.t()`` of a row-major ``W [N, K]``),
        {dtype}; 16-byte aligned, column stride a multiple of 16. ``N % 8 == 0``.
    scales_a : torch.Tensor
        ``M`` fp32 elements (``[M]`` or ``[M, 1]``), contiguous. A per-tensor scale is passed
        expanded to ``M`` elements.
    scales_b : torch.Tensor
        ``N`` fp32 elements (``[N]`` or ``[N, 1]``), contiguous.
    out_dtype : torch.dtype
        ``torch.bfloat16`` or ``torch.float16``.
    bias : torch.Tensor, optional
        ``[N]`` of ``out_dtype``, contiguous.

    Returns
    -------
    torch.Tensor
        New row-major ``[M, N]`` tensor of ``out_dtype``:
        ``(A @ B) * scales_a[:, None] * scales_b[None, :] (+ bias)``, the epilogue in fp32
        (``acc * scales_b * scales_a + bias``, the bias added with one fma) and one rounding.

    Kernels: on sm90a (H100/H200), CUTLASS 3.x warp-specialized GEMMs (TMA, wgmma) chosen by
    M, N, K: weight-streaming kernels (mma.sync, or TMA + wgmma in the 8-bit type itself) or
    swapped A/B for decode ``M``, ping-pong and
    cooperative persistent kernels above. On other GPUs (or a build without 9.0a), CUTLASS 2.x
    mma.sync GEMMs with the same epilogue, tiles chosen by M: int8 on sm80+, fp8 on sm89+
    (fp8 accumulation promoted to fp32 every mainloop stage). Older GPUs, or a build without
    their arch, raise ``RuntimeError`` naming the arch. ``SGL_KERNEL_SCALED_MM_BACKEND=sm8x``
    (or ``sm90``) forces one path. CUDA-graph capturable. On sm90 the decode-``M`` kernels use
    programmatic dependent launch (they start while the previous kernel finishes and wait for
    it before reading; ``SGL_KERNEL_DISABLE_PDL=1`` turns that off).
"""


def fp8_scaled_mm(
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    scales_a: torch.Tensor,
    scales_b: torch.Tensor,
    out_dtype: torch.dtype,
    bias: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    return _fp8_scaled_mm(mat_a, mat_b, scales_a, scales_b, out_dtype, bias)


def int8_scaled_mm(
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    scales_a: torch.Tensor,
    scales_b: torch.Tensor,
    out_dtype: torch.dtype,
    bias: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    return _int8_scaled_mm(mat_a, mat_b, scales_a, scales_b, out_dtype, bias)


fp8_scaled_mm.__doc__ = (
    "FP8 (e4m3) GEMM with per-row / per-column fp32 scales and an optional bias; fp32 accumulation.\n"
    + _SCALED_MM_NOTES.format(dtype="``torch.float8_e4m3fn``")
)
int8_scaled_mm.__doc__ = (
    "INT8 GEMM with per-row / per-column fp32 scales and an optional bias; int32 accumulation.\n"
    + _SCALED_MM_NOTES.format(dtype="``torch.int8``")
)


# ---------------------------------------------------------------------------------------
# bmm_fp8 (cuBLASLt)

BMM_FP8_WORKSPACE_BYTES = 32 * 1024 * 1024
_BMM_FP8_OUT_DTYPES = (torch.bfloat16, torch.float16)


def fp8_blockwise_scaled_mm(
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    scales_a: torch.Tensor,
    scales_b: torch.Tensor,
    out_dtype: torch.dtype,
) -> torch.Tensor:
    r"""FP8 GEMM with DeepSeek-style block scales: 1x128 activation blocks, 128x128 weight blocks.

    ``out[m, n] = sum_kb (sum_{k in block kb} A[m, k] B[k, n]) * scales_a[m, kb] * scales_b[kb, n // 128]``,
    each 128-deep block's partial sum promoted to fp32 with its scales, one rounding to ``out_dtype``.

    Parameters
    ----------
    mat_a : torch.Tensor
        ``[M, K]`` ``torch.float8_e4m3fn``, row-major (16-byte aligned, row stride a multiple of 16).
        ``K % 128 == 0``; any ``M >= 1``.
    mat_b : torch.Tensor
        ``[K, N]`` ``torch.float8_e4m3fn``, column-major (``W.t()`` of a row-major ``W [N, K]``).
        ``N % 128 == 0``.
    scales_a : torch.Tensor
        ``[M, K // 128]`` fp32, M-major (``stride(0) == 1``, as the column-major scales of
        ``sgl_per_token_group_quant_fp8``). Read in place when its k-block stride is a multiple of 4
        (16-byte rows for TMA); other layouts (row-major too) are copied first.
    scales_b : torch.Tensor
        ``[K // 128, N // 128]`` fp32, K-major (``stride(0) == 1``); a row-major tensor is copied first.
    out_dtype : torch.dtype
        ``torch.bfloat16`` or ``torch.float16``.

    Returns
    -------
    torch.Tensor
        New row-major ``[M, N]`` of ``out_dtype``.

    Kernels: CUTLASS 3.x sm90a FP8 blockwise-scaled warp-specialized GEMMs (ping-pong 64x128 tiles
    for ``M <= 64``, cooperative 128x128 above). Arch: sm90a. CUDA-graph capturable.
    """
    return _fp8_blockwise_scaled_mm(mat_a, mat_b, scales_a, scales_b, out_dtype)


def _bmm_fp8_error(msg: str) -> RuntimeError:
    return RuntimeError(f"sgl_kernel.bmm_fp8: {msg}")


def bmm_fp8(
    A: torch.Tensor,
    B: torch.Tensor,
    A_scale: torch.Tensor,
    B_scale: torch.Tensor,
    dtype: torch.dtype,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    r"""Batched fp8 GEMM with per-tensor scales, through cuBLASLt:
    ``out[i] = (A[i] @ B[i]) * A_scale * B_scale`` for every batch index ``i``, products
    accumulated in fp32 and rounded once to ``dtype``.

    Parameters
    ----------
    A : torch.Tensor
        ``[b, m, k]`` row-major per batch (``stride(2) == 1``; contiguous, or any row stride
        ``>= k`` and batch stride that are multiples of 16), ``torch.float8_e4m3fn`` or
        ``torch.float8_e5m2``; 16-byte aligned. ``k % 16 == 0``.
    B : torch.Tensor
        ``[b, k, n]`` column-major per batch (``stride(1) == 1``, e.g. ``W.transpose(-2, -1)``
        of a contiguous ``W [b, n, k]``), ``torch.float8_e4m3fn`` or ``torch.float8_e5m2``, not
        e5m2 when ``A`` is e5m2; 16-byte aligned. ``n % 16 == 0``.
    A_scale, B_scale : torch.Tensor
        fp32, one element each (``[]`` or ``[1]``), on the device of ``A`` (read there: no
        host sync).
    dtype : torch.dtype
        ``torch.bfloat16`` or ``torch.float16``: the output type.
    out : torch.Tensor, optional
        ``[b, m, n]`` contiguous of ``dtype``. Written. Allocated when ``None``.

    Returns
    -------
    torch.Tensor
        ``out`` (the op's ``D``).

    Notes
    -----
    cuBLASLt computes ``D^T = B^T A^T`` in its column-major "TN" form, without fp8 fast
    accumulation; the algorithm is its heuristic's first choice (cuBLASLt caches those per
    problem). A 32 MiB workspace cached per device (``_get_cache_buf("bmm_fp8_workspace", ...)``)
    and ``torch.cuda.current_blas_handle()`` are passed to the op. Arch: sm89+ (Ada, Hopper,
    Blackwell); older GPUs raise ``RuntimeError``. CUDA-graph capturable; no host sync.
    """
    if dtype not in _BMM_FP8_OUT_DTYPES:
        raise _bmm_fp8_error(f"dtype must be torch.bfloat16 or torch.float16, got {dtype}")
    if not A.is_cuda:  # before the workspace is allocated on A's device
        raise _bmm_fp8_error(f"A must be a CUDA tensor, got device {A.device}")
    if out is None:
        if A.dim() != 3 or B.dim() != 3:
            raise _bmm_fp8_error(
                f"A must be 3-D [b, m, k] and B 3-D [b, k, n], got shapes {tuple(A.shape)} and {tuple(B.shape)}"
            )
        out = torch.empty((A.shape[0], A.shape[1], B.shape[2]), device=A.device, dtype=dtype)
    elif out.dtype != dtype:
        raise _bmm_fp8_error(f"out must have dtype {dtype} (the dtype argument), got {out.dtype}")
    if isinstance(A, FakeTensor):  # FakeTensorMode: nothing runs; keep fakes out of the cache
        _bmm_fp8(A, B, out, A_scale, B_scale, torch.empty(0, dtype=torch.uint8, device=A.device), 0)
        return out
    workspace = _get_cache_buf("bmm_fp8_workspace", BMM_FP8_WORKSPACE_BYTES, A.device)
    if A.device.index is None or A.device.index == torch.cuda.current_device():
        handle = torch.cuda.current_blas_handle()
    else:  # the handle of A's device, not the current one
        with torch.cuda.device(A.device):
            handle = torch.cuda.current_blas_handle()
    _bmm_fp8(A, B, out, A_scale, B_scale, workspace, handle)
    return out


# ---------------------------------------------------------------------------------------
# awq_dequantize, dsv3_router_gemm, dsv3_fused_a_gemm (csrc/gemm/awq_dequantize.cu, dsv3_gemm.cu)

_awq_dequantize = torch.ops.sgl_kernel.awq_dequantize.default
_dsv3_router_gemm = torch.ops.sgl_kernel.dsv3_router_gemm.default
_dsv3_fused_a_gemm = torch.ops.sgl_kernel.dsv3_fused_a_gemm.default

_DSV3_FUSED_A_N = 2112  # q_a (1536) + kv_a (512) + rope key (64) columns


@torch.library.register_fake("sgl_kernel::awq_dequantize")
def _awq_dequantize_fake(qweight, scales, qzeros):
    return qweight.new_empty((qweight.shape[0], qweight.shape[1] * 8), dtype=scales.dtype)


def awq_dequantize(qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor) -> torch.Tensor:
    r"""Dequantize a 4-bit AWQ weight:
    ``out[k, n] = (w[k, n] - z[k // G, n]) * scales[k // G, n]``.

    ``w`` and ``z`` are the unsigned 4-bit fields of ``qweight`` and ``qzeros`` in AWQ order:
    logical column ``8 * i + j`` (``j`` in 0..7) is the field at bit offset
    ``4 * [0, 4, 1, 5, 2, 6, 3, 7][j]`` of word ``i`` of the row. ``G = K / scales.shape[0]``
    is the group size.

    Parameters
    ----------
    qweight : torch.Tensor
        ``[K, N / 8]`` int32, last dimension contiguous (any row stride).
    scales : torch.Tensor
        ``[K / G, N]`` fp16 or bf16, last dimension contiguous; ``scales.shape[0]`` divides ``K``.
    qzeros : torch.Tensor
        ``[K / G, N / 8]`` int32, last dimension contiguous.

    Returns
    -------
    torch.Tensor
        New contiguous ``[K, N]`` tensor of ``scales.dtype``. Bit-exact: ``w - z`` is exact and
        the product is rounded once, as ``((w - z).float() * scales.float()).to(scales.dtype)``.

    Notes
    -----
    Memory-bound: one thread per int32 word and 4 rows (a 4-byte load and a 16-byte store per
    word, the group's scales and zeros kept in registers). Arch: sm80+. CUDA-graph capturable;
    programmatic dependent launch on sm90+.
    """
    return _awq_dequantize(qweight, scales, qzeros)


def dsv3_router_gemm(
    hidden_states: torch.Tensor,
    router_weights: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    r"""DeepSeek-V3 router logits: ``output = hidden_states @ router_weights.T``, fp32
    accumulation, one rounding to ``out_dtype``.

    Parameters
    ----------
    hidden_states : torch.Tensor
        ``[M, 7168]`` bf16, row-major (``stride(1) == 1``), ``1 <= M <= 16``; 16-byte aligned,
        row stride a multiple of 8 elements (the op's ``mat_a``).
    router_weights : torch.Tensor
        ``[E, 7168]`` bf16, row-major, ``E`` in {256, 384}; 16-byte aligned, row stride a
        multiple of 8 (the op's ``mat_b``).
    out_dtype : torch.dtype
        ``torch.float32`` or ``torch.bfloat16``.

    Returns
    -------
    torch.Tensor
        New ``[M, E]`` tensor of ``out_dtype`` (the op's ``output``, written).

    Notes
    -----
    A weight-streaming bf16 tensor-core kernel that reads each weight byte once for all ``M``
    rows; on sm90 the K dimension is split over thread-block clusters and reduced through
    distributed shared memory (deterministic: no atomics). Arch: sm80+ (API: sm90).
    CUDA-graph capturable; programmatic dependent launch on sm90+.
    """
    rows = hidden_states.shape[0] if hidden_states.dim() >= 1 else 0  # the op reports a wrong rank
    experts = router_weights.shape[0] if router_weights.dim() >= 1 else 0
    output = torch.empty((rows, experts), dtype=out_dtype, device=hidden_states.device)
    _dsv3_router_gemm(output, hidden_states, router_weights)
    return output


def dsv3_fused_a_gemm(
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    output: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    r"""DeepSeek-V3 fused q_a/kv_a projection: ``output = mat_a @ mat_b``, fp32 accumulation.

    Parameters
    ----------
    mat_a : torch.Tensor
        ``[M, 7168]`` bf16, row-major, ``1 <= M <= 16``; 16-byte aligned, row stride a multiple
        of 8 elements.
    mat_b : torch.Tensor
        ``[7168, 2112]`` bf16, column-major (``stride(0) == 1``: ``W.t()`` of a row-major
        ``W [2112, 7168]``); 16-byte aligned, column stride a multiple of 8.
    output : Optional[torch.Tensor]
        ``[M, 2112]`` bf16, last dimension contiguous. Written. ``None``: a new tensor of
        ``mat_a.dtype``.

    Returns
    -------
    torch.Tensor
        ``output``.

    Notes
    -----
    A weight-streaming bf16 tensor-core kernel (each weight byte read once for all ``M`` rows,
    132 CTAs of 16 weight rows); deterministic. Arch: sm80+ (API: sm90). CUDA-graph
    capturable; programmatic dependent launch on sm90+.
    """
    if output is None:
        rows = mat_a.shape[0] if mat_a.dim() >= 1 else 0  # the op reports a wrong rank
        cols = mat_b.shape[1] if mat_b.dim() == 2 else _DSV3_FUSED_A_N
        output = torch.empty((rows, cols), dtype=mat_a.dtype, device=mat_a.device)
    _dsv3_fused_a_gemm(output, mat_a, mat_b)
    return output


def shuffle_rows(
    input_tensor: torch.Tensor,
    dst2src_map: torch.Tensor,
    output_tensor_shape,
) -> torch.Tensor:
    r"""Row gather for MoE token permutation: ``output[i] = input_tensor[dst2src_map[i]]``.

    Parameters
    ----------
    input_tensor : torch.Tensor
        ``[N, cols]``, CUDA, any dtype (fp16/bf16/fp32/fp8/uint8 in the sgl-kernel API); the
        last dimension contiguous, the row stride free.
    dst2src_map : torch.Tensor
        ``[R]`` int32 (int64 accepted), on ``input_tensor``'s device, any stride. Entries must
        lie in ``[0, N)``; they are not checked on the host (that would need a sync). An entry
        outside it gives a row of zeros and never reads outside ``input_tensor``; with
        ``SGL_KERNEL_DEBUG=1`` it raises ``RuntimeError`` instead (outside graph capture).
        Repeated entries are allowed.
    output_tensor_shape : Sequence[int]
        The shape of the new output, ``(R, cols)``.

    Returns
    -------
    torch.Tensor
        New contiguous ``[R, cols]`` tensor of ``input_tensor.dtype`` (the op's ``output``,
        written).

    Notes
    -----
    A byte copy of rows (exact for every dtype), in 16-byte chunks where the pointers, the
    row stride and the row size allow it, else narrower ones (the API's rule of rows of a
    multiple of 16 bytes is not required). Arch: sm80+. CUDA-graph capturable; programmatic
    dependent launch on sm90+.
    """
    output = torch.empty(output_tensor_shape, dtype=input_tensor.dtype, device=input_tensor.device)
    _shuffle_rows(input_tensor, dst2src_map, output)
    return output


# ---------------------------------------------------------------------------------------
# One-shot checks for ``python -m sgl_kernel``


def _check_scaled_mm(int8: bool) -> None:
    m, n, k = 37, 272, 512
    if int8:
        a = torch.randint(-127, 128, (m, k), device="cuda", dtype=torch.int8)
        w = torch.randint(-127, 128, (n, k), device="cuda", dtype=torch.int8)
    else:
        a = torch.randn(m, k, device="cuda").to(_FP8)
        w = torch.randn(n, k, device="cuda").to(_FP8)
    sa = torch.rand(m, device="cuda") + 0.5
    sb = torch.rand(n, device="cuda") + 0.5
    bias = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    out = (int8_scaled_mm if int8 else fp8_scaled_mm)(a, w.t(), sa, sb, torch.bfloat16, bias)
    ref = (a.double() @ w.double().t()) * sa.double()[:, None] * sb.double()[None, :] + bias.double()
    torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2 * float(ref.abs().max()))


def _check_bmm_fp8() -> None:
    b, m, n, k = 3, 37, 272, 512
    a = torch.randn(b, m, k, device="cuda").to(_FP8)
    w = (torch.randn(b, n, k, device="cuda") * 4).to(torch.float8_e5m2)
    sa = torch.tensor([0.75], device="cuda")
    sb = torch.tensor(1.25, device="cuda")
    out = bmm_fp8(a, w.transpose(-2, -1), sa, sb, torch.bfloat16)
    ref = torch.bmm(a.double(), w.double().transpose(-2, -1)) * 0.75 * 1.25
    torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2 * float(ref.abs().max()))


def _check_blockwise() -> None:
    m, n, k = 37, 256, 384
    a = torch.randn(m, k, device="cuda").to(_FP8)
    w = torch.randn(n, k, device="cuda").to(_FP8)
    sa = (torch.rand(k // 128, m, device="cuda") + 0.5).t()
    sb = (torch.rand(n // 128, k // 128, device="cuda") + 0.5).t()
    out = fp8_blockwise_scaled_mm(a, w.t(), sa, sb, torch.bfloat16)
    ref = torch.zeros(m, n, dtype=torch.float64, device="cuda")
    for kb in range(k // 128):
        blk = a[:, kb * 128:(kb + 1) * 128].double() @ w[:, kb * 128:(kb + 1) * 128].double().t()
        ref += blk * sa[:, kb].double()[:, None] * sb[kb].double().repeat_interleave(128)[None, :]
    torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2 * float(ref.abs().max()))


def _check_awq_dequantize() -> None:
    k, n, g = 256, 8 * 37, 64
    qweight = torch.randint(-(2**31), 2**31 - 1, (k, n // 8), device="cuda", dtype=torch.int32)
    qzeros = torch.randint(-(2**31), 2**31 - 1, (k // g, n // 8), device="cuda", dtype=torch.int32)
    shifts = torch.tensor([0, 16, 4, 20, 8, 24, 12, 28], device="cuda", dtype=torch.int32)

    def unpack(x: torch.Tensor) -> torch.Tensor:
        return ((x[..., None] >> shifts) & 0xF).reshape(x.shape[0], -1).float()

    for dtype in (torch.float16, torch.bfloat16):
        scales = (torch.rand(k // g, n, device="cuda") * 0.1 + 0.01).to(dtype)
        out = awq_dequantize(qweight, scales, qzeros)
        z = unpack(qzeros).repeat_interleave(g, 0)
        ref = ((unpack(qweight) - z) * scales.float().repeat_interleave(g, 0)).to(dtype)
        assert torch.equal(out, ref), f"awq_dequantize ({dtype}) differs from the fp32 reference"


def _check_dsv3(fused: bool) -> None:
    for m in (1, 5, 16):
        a = torch.randn(m, 7168, device="cuda", dtype=torch.bfloat16)
        if fused:
            w = torch.randn(_DSV3_FUSED_A_N, 7168, device="cuda", dtype=torch.bfloat16) * 0.05
            out = dsv3_fused_a_gemm(a, w.t())
        else:
            w = torch.randn(256, 7168, device="cuda", dtype=torch.bfloat16) * 0.05
            out = dsv3_router_gemm(a, w, torch.float32)
        ref = a.double() @ w.double().t()
        torch.testing.assert_close(out.double(), ref, rtol=1e-2, atol=1e-2 * float(ref.abs().max()))


def _check_shuffle_rows() -> None:
    for dtype in (torch.bfloat16, _FP8, torch.float32):
        x = torch.randn(300, 136, device="cuda").to(dtype)
        idx = torch.randint(0, 300, (517,), device="cuda", dtype=torch.int32)
        out = shuffle_rows(x, idx, (517, 136))
        ref = x.view(torch.uint8)[idx.long()]
        assert torch.equal(out.view(torch.uint8), ref), f"shuffle_rows ({dtype}) differs from the gather"


def self_checks() -> Dict[str, Callable[[], None]]:
    return {
        "fp8_scaled_mm": lambda: _check_scaled_mm(False),
        "int8_scaled_mm": lambda: _check_scaled_mm(True),
        "fp8_blockwise_scaled_mm": _check_blockwise,
        "bmm_fp8": _check_bmm_fp8,
        "awq_dequantize": _check_awq_dequantize,
        "dsv3_router_gemm": lambda: _check_dsv3(False),
        "dsv3_fused_a_gemm": lambda: _check_dsv3(True),
        "shuffle_rows": _check_shuffle_rows,
    }
