# SPDX-License-Identifier: Apache-2.0
"""Quantization family: per-token, per-tensor and per-token-group 8-bit quantization, and
RMSNorm fused with per-token-group quantization.

The public names live in the API modules of sgl-kernel: the ``sgl_per_*`` functions in
:mod:`sgl_kernel.gemm`, ``fused_rmsnorm_quant`` / ``fused_add_rmsnorm_quant`` in
:mod:`sgl_kernel.elementwise` (both re-export them from here).

Common semantics (API.md 2.2), all in fp32:

* ``amax = max(eps, max|x|)`` over a token (per-token ops: no ``eps`` floor) or a group of
  ``group_size`` consecutive elements of a token; ``scale = amax / qmax`` (IEEE division,
  so scales equal an fp32 reference bit for bit).
* ``scale_ue8m0``: the scale becomes the smallest power of two ``>= scale`` (exactly).
* codes ``q = clamp(x * (1 / scale), qmin, qmax)``, converted to fp8 e4m3 (round to nearest
  even) or int8 (truncation toward zero; ``sgl_per_token_quant_int8`` rounds half to even). A
  zero scale gives zero codes.
* NaN and inf: a NaN in a group (token) makes its scale NaN and its codes NaN (fp8) or 0
  (int8); an inf makes the scale inf, the inf elements' codes NaN (fp8) / 0 (int8) and the
  others 0. A UE8M0 byte of 255 encodes such a scale.
"""

from __future__ import annotations

import os
from typing import Callable, Dict, Optional

import torch

from sgl_kernel.utils import _assert, _resolve_pdl

__all__ = [
    "sgl_per_token_quant_fp8",
    "sgl_per_tensor_quant_fp8",
    "sgl_per_token_group_quant_8bit",
    "sgl_per_token_group_quant_fp8",
    "sgl_per_token_group_quant_int8",
    "sgl_per_token_quant_int8",
    "fused_rmsnorm_quant",
    "fused_add_rmsnorm_quant",
]

FAMILY = "quantization"
# op name -> lowest arch with a kernel (API.md)
OPS = {
    "sgl_per_token_quant_fp8": 80,
    "sgl_per_token_quant_int8": 80,
    "sgl_per_tensor_quant_fp8": 80,
    "sgl_per_token_group_quant_8bit": 80,
    "sgl_per_token_group_quant_8bit_v2": 80,
    "fused_rmsnorm_quant": 80,
    "fused_add_rmsnorm_quant": 80,
}

_per_token_fp8 = torch.ops.sgl_kernel.sgl_per_token_quant_fp8.default
_per_token_int8 = torch.ops.sgl_kernel.sgl_per_token_quant_int8.default
_per_tensor_fp8 = torch.ops.sgl_kernel.sgl_per_tensor_quant_fp8.default
_group_v1 = torch.ops.sgl_kernel.sgl_per_token_group_quant_8bit.default
_group_v2 = torch.ops.sgl_kernel.sgl_per_token_group_quant_8bit_v2.default
_fused_rmsnorm_quant = torch.ops.sgl_kernel.fused_rmsnorm_quant.default
_fused_add_rmsnorm_quant = torch.ops.sgl_kernel.fused_add_rmsnorm_quant.default

_V2_GROUP_SIZES = (16, 32, 64, 128)
_V2_ENV = "SGLANG_PER_TOKEN_GROUP_QUANT_8BIT_V2"


def sgl_per_token_quant_fp8(input: torch.Tensor, output_q: torch.Tensor, output_s: torch.Tensor) -> None:
    """Row-wise dynamic fp8 quantization.

    ``output_s[m] = max|input[m]| / 448`` (no floor: an all-zero row gets scale 0 and codes 0),
    ``output_q[m] = e4m3(clamp(input[m] * (1 / output_s[m]), -448, 448))``.

    Parameters
    ----------
    input : torch.Tensor
        ``[M, K]``, fp16/bf16/fp32, last-dim contiguous; ``K % 4 == 0`` (16-byte vector path
        when ``K`` and the row stride allow it, a correct scalar path otherwise).
    output_q : torch.Tensor
        ``[M, K]`` ``torch.float8_e4m3fn``, contiguous. Written.
    output_s : torch.Tensor
        ``M`` fp32 elements (``[M]`` or ``[M, 1]``), contiguous. Written.

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable.
    """
    _per_token_fp8(input, output_q, output_s)


def sgl_per_token_quant_int8(input: torch.Tensor, output_q: torch.Tensor, output_s: torch.Tensor) -> None:
    """Row-wise dynamic int8 quantization (legacy sgl-kernel op).

    ``output_s[m] = max|input[m]| / 127``,
    ``output_q[m] = round_half_even(clamp(input[m] * (1 / output_s[m]), -128, 127))``
    (rounds, unlike the group op, which truncates); an all-zero row gets scale 0 and codes 0.

    Parameters
    ----------
    input : torch.Tensor
        ``[M, K]``, fp16/bf16/fp32, last-dim contiguous; ``K % 4 == 0``.
    output_q : torch.Tensor
        ``[M, K]`` int8, contiguous. Written.
    output_s : torch.Tensor
        ``M`` fp32 elements, contiguous. Written.

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable.
    """
    _per_token_int8(input, output_q, output_s)


def sgl_per_tensor_quant_fp8(
    input: torch.Tensor, output_q: torch.Tensor, output_s: torch.Tensor, is_static: bool
) -> None:
    """One fp8 scale for the whole tensor.

    Dynamic (``is_static=False``): ``output_s[0] <- max(output_s[0], max|input| / 448)``, so
    callers pass a zero-initialised ``output_s``; static: ``output_s[0]`` is read only. Then
    ``output_q = e4m3(clamp(input * (1 / output_s[0]), -448, 448))`` (0 where the scale is 0).

    Parameters
    ----------
    input : torch.Tensor
        Any shape, fp16/bf16/fp32, contiguous.
    output_q : torch.Tensor
        Same shape, ``torch.float8_e4m3fn``, contiguous. Written.
    output_s : torch.Tensor
        fp32, one element. Written (dynamic) or read (static).
    is_static : bool
        Use the given scale instead of computing one.

    Notes
    -----
    Dynamic mode runs two kernels (a max reduction with atomics, then the codes). Arch: sm80+.
    CUDA-graph capturable.
    """
    _per_tensor_fp8(input, output_q, output_s, is_static)


def _use_v2(group_size: int, enable_v2: Optional[bool]) -> bool:
    if enable_v2 is not None:
        return bool(enable_v2)
    env = os.environ.get(_V2_ENV)
    if env is not None:
        return env.strip().lower() in ("1", "true", "yes")
    return group_size in _V2_GROUP_SIZES


def sgl_per_token_group_quant_8bit(
    input: torch.Tensor,
    output_q: torch.Tensor,
    output_s: torch.Tensor,
    group_size: int,
    eps: float,
    fp8_min: float,
    fp8_max: float,
    scale_ue8m0: bool = False,
    fuse_silu_and_mul: bool = False,
    masked_m: Optional[torch.Tensor] = None,
    enable_v2: Optional[bool] = None,
) -> None:
    """Per-token-group 8-bit quantization (fp8 e4m3 or int8, chosen by ``output_q``'s dtype).

    Per token ``m`` and group ``g`` of ``group_size`` elements: ``amax = max(eps, max|x|)``,
    ``scale = amax / fp8_max`` (the smallest power of two ``>=`` it with ``scale_ue8m0``),
    ``q = clamp(x * (1 / scale), fp8_min, fp8_max)`` converted to e4m3 (round to nearest even)
    or int8 (truncation toward zero). With ``fuse_silu_and_mul``, ``x = silu(a) * b`` of the
    halves of each input row, rounded to the input dtype as :func:`silu_and_mul` stores it.

    Parameters
    ----------
    input : torch.Tensor
        ``[M, K]`` (``[M, 2K]`` with ``fuse_silu_and_mul``; ``[E, T, K or 2K]`` with
        ``masked_m``), fp16/bf16 (v1 also fp32), contiguous, 16-byte aligned.
    output_q : torch.Tensor
        ``[M, K]`` / ``[E, T, K]``, ``torch.float8_e4m3fn`` or ``torch.int8``, contiguous. Written.
    output_s : torch.Tensor
        Written; the layout is read from its strides (``G = K / group_size``):
        row-major fp32 ``[M, G]``; column-major fp32 ``[M, G]`` with ``stride(0) == 1`` and
        ``stride(1) = Mp >= M``; with ``scale_ue8m0``, column-major int32 ``[M, ceil(G / 4)]``
        whose element ``[m, g // 4]`` holds the biased exponent ``log2(scale) + 127`` of group
        ``g`` in byte ``g % 4`` (unused bytes 0), or (v2 only) row-major fp32 holding the
        power-of-two scale while the codes use the exact scale. Masked: a leading expert dim.
    group_size : int
        16, 32, 64 or 128; divides ``K``.
    eps : float
        Floor of ``amax`` (callers use 1e-10); any value ``>= 0``.
    fp8_min, fp8_max : float
        The clamp range and the scale's divisor: (-448, 448) for fp8, (-128, 127) for int8
        (the names are kept for int8); other values are used as given.
    scale_ue8m0 : bool
        Power-of-two scales (see ``output_s``).
    fuse_silu_and_mul : bool
        v2 only: quantize ``silu_and_mul(input)``.
    masked_m : Optional[torch.Tensor]
        v2 only: int32 ``[E]``; only tokens ``t < masked_m[e]`` of expert ``e`` are processed,
        the other rows of ``output_q`` / ``output_s`` are left untouched.
    enable_v2 : Optional[bool]
        ``None``: the environment variable ``SGLANG_PER_TOKEN_GROUP_QUANT_8BIT_V2`` decides
        when set (``1``/``true``/``yes`` select v2), else v2 for group sizes 16-128. Both ops
        run the same kernels and give identical results where both apply.

    Raises
    ------
    AssertionError
        On the v1 path with ``fuse_silu_and_mul`` or ``masked_m``.

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable.
    """
    if _use_v2(group_size, enable_v2):
        _group_v2(input, output_q, output_s, group_size, eps, fp8_min, fp8_max, scale_ue8m0, fuse_silu_and_mul,
                  masked_m)
        return
    _assert(not fuse_silu_and_mul, "sgl_per_token_group_quant_8bit: fuse_silu_and_mul needs the v2 kernel "
                                   "(enable_v2=True)")
    _assert(masked_m is None, "sgl_per_token_group_quant_8bit: masked_m needs the v2 kernel (enable_v2=True)")
    _group_v1(input, output_q, output_s, group_size, eps, fp8_min, fp8_max, scale_ue8m0)


sgl_per_token_group_quant_fp8 = sgl_per_token_group_quant_8bit
sgl_per_token_group_quant_int8 = sgl_per_token_group_quant_8bit

_NORM_QUANT_DOC = """
    Parameters
    ----------
    input : torch.Tensor
        ``[T, H]``, fp16/bf16/fp32, last-dim contiguous; the row stride is free (rows that are
        not 16-byte aligned take a slower two-pass path). Not modified (its schema keeps
        sgl-kernel's ``Tensor!``).
    {residual_param}output_q : torch.Tensor
        ``[T, H]`` fp8 e4m3 or int8 (selects the code type), contiguous. Written.
    output_s : torch.Tensor
        Row-major fp32 ``[T, H / group_size]``, column-major fp32, or column-major packed UE8M0
        int32, exactly as :func:`sgl_per_token_group_quant_8bit` (row-major with
        ``scale_ue8m0`` raises). Written.
    weight : torch.Tensor
        ``[H]``, dtype of ``input``, contiguous.
    group_size : int
        128 (the engines' value); any power of two from 16 to 256 dividing ``H`` works (up to
        128 for fp32 input).
    quant_eps : float
        Floor of each group's ``amax``.
    fp8_min, fp8_max : float
        Clamp range and scale divisor, as in the group op.
    scale_ue8m0 : bool
        Power-of-two scales (packed int32 ``output_s``).
    rms_eps : float
        Added to the mean square.
    enable_pdl : Optional[bool]
        Programmatic dependent launch; ``None`` turns it on for sm90+ (results are identical).

    Notes
    -----
    One pass over memory: each row is read once and kept in registers (16-byte aligned rows,
    ``H`` up to 32768 fp16/bf16 or 16384 fp32; other rows take a two-pass path). Arch: sm80+.
    CUDA-graph capturable.
"""


def fused_rmsnorm_quant(
    input: torch.Tensor,
    output_q: torch.Tensor,
    output_s: torch.Tensor,
    weight: torch.Tensor,
    group_size: int,
    quant_eps: float,
    fp8_min: float,
    fp8_max: float,
    scale_ue8m0: bool,
    rms_eps: float = 1e-6,
    enable_pdl: Optional[bool] = None,
) -> None:
    _fused_rmsnorm_quant(input, output_q, output_s, weight, group_size, rms_eps, quant_eps, fp8_min, fp8_max,
                         scale_ue8m0, _resolve_pdl(enable_pdl))


fused_rmsnorm_quant.__doc__ = (
    """RMSNorm, then per-token-group quantization of the normalised row, in one kernel.

    ``y = input * rsqrt(mean(input**2) + rms_eps) * weight`` in fp32 (not rounded), then ``y``
    is quantised per group exactly as :func:`sgl_per_token_group_quant_8bit` with
    ``eps = quant_eps``.
"""
    + _NORM_QUANT_DOC.format(residual_param="")
)


def fused_add_rmsnorm_quant(
    input: torch.Tensor,
    residual: torch.Tensor,
    output_q: torch.Tensor,
    output_s: torch.Tensor,
    weight: torch.Tensor,
    group_size: int,
    quant_eps: float,
    fp8_min: float,
    fp8_max: float,
    scale_ue8m0: bool,
    rms_eps: float = 1e-6,
    enable_pdl: Optional[bool] = None,
) -> None:
    _fused_add_rmsnorm_quant(input, residual, output_q, output_s, weight, group_size, rms_eps, quant_eps, fp8_min,
                             fp8_max, scale_ue8m0, _resolve_pdl(enable_pdl))


fused_add_rmsnorm_quant.__doc__ = (
    """Residual add, RMSNorm and per-token-group quantization in one kernel.

    ``residual <- residual + input`` (rounded to the input dtype and stored), then the updated
    ``residual`` is normalised and quantised as in :func:`fused_rmsnorm_quant`.
"""
    + _NORM_QUANT_DOC.format(
        residual_param="""residual : torch.Tensor
        ``[T, H]``, dtype of ``input``, last-dim contiguous, row stride free. Updated in place.
    """
    )
)


# ---------------------------------------------------------------------------------------
# One-shot self checks for `python -m sgl_kernel`: small random inputs against fp32 torch.

_FP8 = torch.float8_e4m3fn


def _div(a: torch.Tensor, b: float) -> torch.Tensor:
    # IEEE a / b: CUDA torch turns a division by a Python float into a multiplication by its
    # reciprocal, which is not always the correctly rounded quotient the kernels compute.
    return a / torch.full_like(a, b)


def _codes_ref(x: torch.Tensor, scale: torch.Tensor, lo: float, hi: float, dtype: torch.dtype) -> torch.Tensor:
    inv = torch.where(scale == 0, torch.zeros_like(scale), 1.0 / scale)
    y = torch.clamp(x.float() * inv, lo, hi)
    return y.to(_FP8) if dtype == _FP8 else y.trunc().to(torch.int8)


def _check_per_token(int8: bool) -> None:
    x = torch.randn(37, 520, device="cuda", dtype=torch.bfloat16) * 3
    q = torch.empty(x.shape, device="cuda", dtype=torch.int8 if int8 else _FP8)
    s = torch.empty(37, device="cuda")
    (sgl_per_token_quant_int8 if int8 else sgl_per_token_quant_fp8)(x, q, s)
    qmax = 127.0 if int8 else 448.0
    s_ref = _div(x.float().abs().amax(-1), qmax)
    torch.testing.assert_close(s, s_ref, rtol=0, atol=0)
    y = x.float() * (1.0 / s_ref).unsqueeze(-1)
    q_ref = torch.round(y.clamp(-128, 127)).to(torch.int8) if int8 else y.clamp(-448, 448).to(_FP8)
    assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)), "codes differ"


def _check_per_tensor() -> None:
    x = torch.randn(5, 333, device="cuda", dtype=torch.float16)
    q = torch.empty(x.shape, device="cuda", dtype=_FP8)
    s = torch.zeros(1, device="cuda")
    sgl_per_tensor_quant_fp8(x, q, s, False)
    s_ref = _div(x.float().abs().amax().reshape(1), 448.0)
    torch.testing.assert_close(s, s_ref, rtol=0, atol=0)
    assert torch.equal(q.view(torch.uint8), _codes_ref(x, s_ref, -448, 448, _FP8).view(torch.uint8))


def _group_ref(x: torch.Tensor, gs: int, eps: float, qmax: float, dtype: torch.dtype):
    xg = x.float().reshape(x.shape[0], -1, gs)
    s = _div(xg.abs().amax(-1).clamp(min=eps), qmax)
    return _codes_ref(xg, s.unsqueeze(-1), -qmax if dtype == _FP8 else -128.0, qmax, dtype).reshape(x.shape), s


def _check_group(v2: bool) -> None:
    for dtype, qmax in ((_FP8, 448.0), (torch.int8, 127.0)):
        x = torch.randn(19, 512, device="cuda", dtype=torch.bfloat16)
        q = torch.empty(x.shape, device="cuda", dtype=dtype)
        s = torch.empty(19, 4, device="cuda")
        qmin = -qmax if dtype == _FP8 else -128.0
        sgl_per_token_group_quant_8bit(x, q, s, 128, 1e-10, qmin, qmax, enable_v2=v2)
        q_ref, s_ref = _group_ref(x, 128, 1e-10, qmax, dtype)
        torch.testing.assert_close(s, s_ref, rtol=0, atol=0)
        assert torch.equal(q.view(torch.uint8), q_ref.view(torch.uint8)), "codes differ"


def _check_norm_quant(fused: bool) -> None:
    x = torch.randn(19, 1024, device="cuda", dtype=torch.bfloat16)
    w = torch.rand(1024, device="cuda", dtype=torch.bfloat16) + 0.5
    q = torch.empty(x.shape, device="cuda", dtype=_FP8)
    s = torch.empty(19, 8, device="cuda")
    src = x
    if fused:
        r = torch.randn_like(x)
        src = (x.float() + r.float()).to(x.dtype)
        fused_add_rmsnorm_quant(x, r, q, s, w, 128, 1e-10, -448.0, 448.0, False)
        assert torch.equal(r, src), "residual not updated"
    else:
        fused_rmsnorm_quant(x, q, s, w, 128, 1e-10, -448.0, 448.0, False)
    y = src.float() * torch.rsqrt(src.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    q_ref, s_ref = _group_ref(y, 128, 1e-10, 448.0, _FP8)
    torch.testing.assert_close(s, s_ref, rtol=1e-5, atol=0)
    torch.testing.assert_close(q.float() * s.repeat_interleave(128, -1), y, rtol=0.07, atol=1e-2)


def self_checks() -> Dict[str, Callable[[], None]]:
    return {
        "sgl_per_token_quant_fp8": lambda: _check_per_token(False),
        "sgl_per_token_quant_int8": lambda: _check_per_token(True),
        "sgl_per_tensor_quant_fp8": _check_per_tensor,
        "sgl_per_token_group_quant_8bit": lambda: _check_group(False),
        "sgl_per_token_group_quant_8bit_v2": lambda: _check_group(True),
        "fused_rmsnorm_quant": lambda: _check_norm_quant(False),
        "fused_add_rmsnorm_quant": lambda: _check_norm_quant(True),
    }
