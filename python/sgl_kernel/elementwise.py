# SPDX-License-Identifier: Apache-2.0
"""Elementwise family: RMSNorm variants, gated activations, RoPE, KV-cache and MLA helpers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import torch

from sgl_kernel.quantization import fused_add_rmsnorm_quant, fused_rmsnorm_quant
from sgl_kernel.utils import _assert, _resolve_pdl, is_arch_support_pdl

__all__ = [
    "rmsnorm",
    "fused_add_rmsnorm",
    "gemma_rmsnorm",
    "gemma_fused_add_rmsnorm",
    "fused_rmsnorm_quant",  # implemented in sgl_kernel.quantization
    "fused_add_rmsnorm_quant",
    "silu_and_mul",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "copy_to_gpu_no_ce",
    "downcast_fp8",
    "concat_mla_k",
    "concat_mla_absorb_q",
    "FusedSetKVBufferArg",
    "apply_rope_with_cos_sin_cache_inplace",
]

FAMILY = "elementwise"
# op name -> lowest arch with a kernel (API.md)
OPS = {
    "rmsnorm": 80,
    "fused_add_rmsnorm": 80,
    "gemma_rmsnorm": 80,
    "gemma_fused_add_rmsnorm": 80,
    "silu_and_mul": 80,
    "gelu_and_mul": 80,
    "gelu_tanh_and_mul": 80,
    "copy_to_gpu_no_ce": 80,
    "downcast_fp8": 80,
    "concat_mla_k": 80,
    "concat_mla_absorb_q": 80,
    "apply_rope_pos_ids_cos_sin_cache": 80,
}

_rmsnorm = torch.ops.sgl_kernel.rmsnorm.default
_fused_add_rmsnorm = torch.ops.sgl_kernel.fused_add_rmsnorm.default
_gemma_rmsnorm = torch.ops.sgl_kernel.gemma_rmsnorm.default
_gemma_fused_add_rmsnorm = torch.ops.sgl_kernel.gemma_fused_add_rmsnorm.default

_NORM_DOC = """
    Parameters
    ----------
    input : torch.Tensor
        ``[..., H]`` (leading dims are rows), fp16/bf16/fp32, last-dim contiguous; the row
        strides are free (views of larger tensors are fine). {input_role}
    {residual_param}weight : torch.Tensor
        ``[H]``, dtype of ``input``, contiguous.
    eps : float
        Added to the mean square before the reciprocal square root.
    {out_param}enable_pdl : Optional[bool]
        Programmatic dependent launch; ``None`` turns it on for sm90+ (results are identical).

    Notes
    -----
    Any ``H >= 1`` (16-byte vector path when ``H`` and the row strides allow it). fp32 math,
    one rounding per stored value. Arch: sm80+. CUDA-graph capturable.
"""


def rmsnorm(
    input: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    out: Optional[torch.Tensor] = None,
    enable_pdl: Optional[bool] = None,
) -> torch.Tensor:
    if out is None:
        out = torch.empty_like(input)
    _rmsnorm(out, input, weight, eps, _resolve_pdl(enable_pdl))
    return out


def fused_add_rmsnorm(
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    enable_pdl: Optional[bool] = None,
) -> None:
    _fused_add_rmsnorm(input, residual, weight, eps, _resolve_pdl(enable_pdl))


def gemma_rmsnorm(
    input: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    out: Optional[torch.Tensor] = None,
    enable_pdl: Optional[bool] = None,
) -> torch.Tensor:
    if out is None:
        out = torch.empty_like(input)
    _gemma_rmsnorm(out, input, weight, eps, _resolve_pdl(enable_pdl))
    return out


def gemma_fused_add_rmsnorm(
    input: torch.Tensor,
    residual: torch.Tensor,
    weight: torch.Tensor,
    eps: float = 1e-6,
    enable_pdl: Optional[bool] = None,
) -> None:
    _gemma_fused_add_rmsnorm(input, residual, weight, eps, _resolve_pdl(enable_pdl))


_OUT_PARAM = """out : Optional[torch.Tensor]
        Shape and dtype of ``input``, last-dim contiguous. Written. ``empty_like(input)``
        when ``None``.
    """
_RESIDUAL_PARAM = """residual : torch.Tensor
        Shape and dtype of ``input``, last-dim contiguous. Written in place:
        ``residual += input`` (stored in the input dtype).
    """
rmsnorm.__doc__ = (
    r"""RMSNorm per row: ``out = x * rsqrt(mean(x**2) + eps) * weight``.

    Returns ``out``.
"""
    + _NORM_DOC.format(input_role="Read only.", residual_param="", out_param=_OUT_PARAM)
)
gemma_rmsnorm.__doc__ = (
    r"""Gemma RMSNorm per row: ``out = x * rsqrt(mean(x**2) + eps) * (1 + weight)``.

    Returns ``out``.
"""
    + _NORM_DOC.format(input_role="Read only.", residual_param="", out_param=_OUT_PARAM)
)
fused_add_rmsnorm.__doc__ = (
    r"""Residual add then RMSNorm, in place: ``residual += input``, then
    ``input = residual * rsqrt(mean(residual**2) + eps) * weight`` (the stored, rounded
    residual is normalised). Returns ``None``.
"""
    + _NORM_DOC.format(
        input_role="Written in place with the normalised rows.", residual_param=_RESIDUAL_PARAM, out_param=""
    )
)
gemma_fused_add_rmsnorm.__doc__ = (
    r"""Residual add then Gemma RMSNorm, in place: ``residual += input``, then
    ``input = residual * rsqrt(mean(residual**2) + eps) * (1 + weight)``. Returns ``None``.
"""
    + _NORM_DOC.format(
        input_role="Written in place with the normalised rows.", residual_param=_RESIDUAL_PARAM, out_param=""
    )
)


_apply_rope_pos_ids_cos_sin_cache = torch.ops.sgl_kernel.apply_rope_pos_ids_cos_sin_cache.default
_silu_and_mul = torch.ops.sgl_kernel.silu_and_mul.default
_gelu_and_mul = torch.ops.sgl_kernel.gelu_and_mul.default
_gelu_tanh_and_mul = torch.ops.sgl_kernel.gelu_tanh_and_mul.default


def _act_and_mul_out(name: str, input: torch.Tensor, out: Optional[torch.Tensor]) -> torch.Tensor:
    if input.shape[-1] * input.element_size() % 16 != 0:
        raise ValueError(
            f"sgl_kernel.{name}: input.shape[-1] * element_size must be a multiple of 16 bytes "
            f"(16-byte aligned rows), got {input.shape[-1]} x {input.element_size()} bytes"
        )
    if out is None:
        return torch.empty((*input.shape[:-1], input.shape[-1] // 2), dtype=input.dtype, device=input.device)
    _assert(out.ndim == input.ndim, f"sgl_kernel.{name}: out must have {input.ndim} dims, got {out.ndim}")
    _assert(
        out.shape[:-1] == input.shape[:-1],
        f"sgl_kernel.{name}: out.shape[:-1] must be {tuple(input.shape[:-1])}, got {tuple(out.shape[:-1])}",
    )
    _assert(
        input.shape[-1] == 2 * out.shape[-1],
        f"sgl_kernel.{name}: input.shape[-1] must be 2 * out.shape[-1], got {input.shape[-1]} and {out.shape[-1]}",
    )
    return out


def silu_and_mul(input: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    r"""SiLU-gated product: ``out = silu(input[..., :d]) * input[..., d:]``.

    ``silu(a) = a / (1 + exp(-a))``, computed in fp32 and rounded once to the output dtype.

    Parameters
    ----------
    input : torch.Tensor
        ``[..., 2 * d]``, fp16/bf16/fp32, contiguous; ``2 * d * element_size`` a multiple
        of 16 bytes.
    out : Optional[torch.Tensor]
        ``[..., d]``, same dtype, contiguous. Written. Allocated when ``None``.

    Returns
    -------
    torch.Tensor
        ``out``.

    Notes
    -----
    Arch: sm80+. On sm90+ the kernel uses programmatic dependent launch; results are
    identical either way. CUDA-graph capturable.
    """
    out = _act_and_mul_out("silu_and_mul", input, out)
    _silu_and_mul(out, input)
    return out


def gelu_and_mul(input: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    r"""GELU-gated product (exact erf form): ``out = gelu(input[..., :d]) * input[..., d:]``.

    ``gelu(a) = 0.5 * a * (1 + erf(a / sqrt(2)))``, computed in fp32, rounded once.

    Parameters
    ----------
    input : torch.Tensor
        ``[..., 2 * d]``, fp16/bf16/fp32, contiguous; ``2 * d * element_size`` a multiple
        of 16 bytes.
    out : Optional[torch.Tensor]
        ``[..., d]``, same dtype, contiguous. Written. Allocated when ``None``.

    Returns
    -------
    torch.Tensor
        ``out``.

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable.
    """
    out = _act_and_mul_out("gelu_and_mul", input, out)
    _gelu_and_mul(out, input)
    return out


def gelu_tanh_and_mul(input: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
    r"""GELU-gated product, tanh approximation: ``out = gelu_tanh(input[..., :d]) * input[..., d:]``.

    ``gelu_tanh(a) = 0.5 * a * (1 + tanh(sqrt(2 / pi) * (a + 0.044715 * a**3)))``, computed
    in fp32, rounded once.

    Parameters
    ----------
    input : torch.Tensor
        ``[..., 2 * d]``, fp16/bf16/fp32, contiguous; ``2 * d * element_size`` a multiple
        of 16 bytes.
    out : Optional[torch.Tensor]
        ``[..., d]``, same dtype, contiguous. Written. Allocated when ``None``.

    Returns
    -------
    torch.Tensor
        ``out``.

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable.
    """
    out = _act_and_mul_out("gelu_tanh_and_mul", input, out)
    _gelu_tanh_and_mul(out, input)
    return out


_copy_to_gpu_no_ce = torch.ops.sgl_kernel.copy_to_gpu_no_ce.default
_downcast_fp8 = torch.ops.sgl_kernel.downcast_fp8.default
_concat_mla_k = torch.ops.sgl_kernel.concat_mla_k.default
_concat_mla_absorb_q = torch.ops.sgl_kernel.concat_mla_absorb_q.default


def copy_to_gpu_no_ce(input: torch.Tensor, output: torch.Tensor) -> None:
    r"""``output[:] = input[:]`` without a copy-engine transfer.

    The host values are read at call time and handed to one kernel launch as parameters, so
    under CUDA-graph capture the values present at capture time are baked into the graph.

    Parameters
    ----------
    input : torch.Tensor
        CPU int32, 1-D, contiguous, ``N <= 1000`` elements (32, 64 and 72 are the sizes
        serving engines use).
    output : torch.Tensor
        CUDA int32, 1-D, contiguous, ``N`` elements. Written.

    Notes
    -----
    Arch: sm80+.
    """
    _copy_to_gpu_no_ce(input, output)


def downcast_fp8(
    k: torch.Tensor,
    v: torch.Tensor,
    k_out: torch.Tensor,
    v_out: torch.Tensor,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
    loc: torch.Tensor,
    mult: int = 1,
    offset: int = 0,
) -> None:
    r"""Quantise K/V rows to fp8 e4m3 and scatter them into KV-cache slots.

    For each token ``t``, slot ``r = loc[t] * mult + offset``:
    ``k_out[r] = e4m3(clamp(k[t] / k_scale, -448, 448))`` (round to nearest, saturating),
    and the same for ``v``. A slot outside ``[0, k_out.shape[0])`` is skipped (with
    ``SGL_KERNEL_DEBUG=1`` it raises instead).

    Parameters
    ----------
    k, v : torch.Tensor
        ``[T, H, D]``, fp16/bf16, contiguous, 16-byte aligned; ``D % 8 == 0``.
    k_out, v_out : torch.Tensor
        ``[N, H, D]``, ``torch.float8_e4m3fn`` (or a uint8 view), contiguous. Written.
    k_scale, v_scale : torch.Tensor
        fp32, one element each.
    loc : torch.Tensor
        ``[T]`` int64.
    mult, offset : int
        Slot mapping ``loc * mult + offset``.

    Notes
    -----
    Arch: sm80+.
    """
    _downcast_fp8(k, v, k_out, v_out, k_scale, v_scale, loc, mult, offset)


def concat_mla_k(k: torch.Tensor, k_nope: torch.Tensor, k_rope: torch.Tensor) -> None:
    r"""MLA key assembly: ``k[:, :, :Dn] = k_nope``, ``k[:, :, Dn:] = k_rope`` broadcast over heads.

    Parameters
    ----------
    k : torch.Tensor
        ``[T, H, Dn + Dr]`` (DeepSeek: ``[T, 128, 192]``), bf16 (fp16/fp32 also accepted),
        last-dim contiguous, other strides free. Written.
    k_nope : torch.Tensor
        ``[T, H, Dn]`` (``[T, 128, 128]``), dtype of ``k``, last-dim contiguous.
    k_rope : torch.Tensor
        ``[T, 1, Dr]`` (``[T, 1, 64]``), dtype of ``k``, last-dim contiguous.

    Notes
    -----
    16-byte vector copies when every pointer and stride allows it. Arch: sm80+.
    """
    _concat_mla_k(k, k_nope, k_rope)


def concat_mla_absorb_q(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    r"""``out = torch.cat([a, b], dim=-1)`` for MLA absorbed queries.

    Parameters
    ----------
    a : torch.Tensor
        ``[T0, T1, Da]`` (DeepSeek: ``Da = 512``), bf16 (fp16/fp32 also accepted),
        last-dim contiguous.
    b : torch.Tensor
        ``[T0, T1, Db]`` (``Db = 64``), dtype of ``a``, last-dim contiguous.

    Returns
    -------
    torch.Tensor
        New ``[T0, T1, Da + Db]`` tensor, dtype and device of ``a``.

    Notes
    -----
    Arch: sm80+.
    """
    out = torch.empty((*a.shape[:-1], a.shape[-1] + b.shape[-1]), dtype=a.dtype, device=a.device)
    _concat_mla_absorb_q(a, b, out)
    return out


@dataclass
class FusedSetKVBufferArg:
    r"""The KV-cache write fused into :func:`apply_rope_with_cos_sin_cache_inplace`.

    After the rotation, ``k_buffer[cache_loc[i]] = rotated key[i]`` and
    ``v_buffer[cache_loc[i]] = value[i]``. The field order is binding (callers construct it
    positionally).

    Attributes
    ----------
    value : torch.Tensor
        ``[nnz, num_v_heads * head_size]`` (or 3-D), dtype of ``key``, last-dim contiguous.
    k_buffer : torch.Tensor
        ``[N, num_k_heads * head_size]`` (or 3-D), dtype of ``key``: the key cache pool. Written.
    v_buffer : torch.Tensor
        ``[N, num_v_heads * head_size]`` (or 3-D), dtype of ``key``: the value cache pool. Written.
    k_scale : Optional[float]
        Must be ``None`` (scaled caches are not supported).
    v_scale : Optional[float]
        Must be ``None``.
    cache_loc : torch.Tensor
        ``[nnz]``, int64: the cache row of each token. A row outside a buffer is skipped.
    """

    value: torch.Tensor
    k_buffer: torch.Tensor
    v_buffer: torch.Tensor
    k_scale: Optional[float]
    v_scale: Optional[float]
    cache_loc: torch.Tensor


def _view_3d(x: torch.Tensor, head_size: int) -> torch.Tensor:
    # [rows, heads, head_size]; heads spelled out, since -1 is ambiguous when rows == 0
    return x.view(x.shape[0], math.prod(x.shape[1:]) // head_size, head_size)


def apply_rope_with_cos_sin_cache_inplace(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool = True,
    fused_set_kv_buffer_arg: Optional[FusedSetKVBufferArg] = None,
    enable_pdl: Optional[bool] = None,
) -> None:
    r"""Rotary position embedding of ``query`` and ``key`` in place, from a precomputed fp32
    cos/sin cache; optionally also writes the rotated key and the value into a KV cache.

    Per token ``i`` with ``p = positions[i]``, ``c = cos_sin_cache[p, :R/2]``,
    ``s = cos_sin_cache[p, R/2:]`` (``R = cos_sin_cache.shape[1]``, the rotary dimension), and
    every head vector ``x`` of the token, in fp32, for ``j < R/2``:

    * ``is_neox=True`` (halves):
      ``x[j], x[j+R/2] = x[j]*c[j] - x[j+R/2]*s[j], x[j+R/2]*c[j] + x[j]*s[j]``
    * ``is_neox=False`` (GPT-J, interleaved pairs):
      ``x[2j], x[2j+1] = x[2j]*c[j] - x[2j+1]*s[j], x[2j+1]*c[j] + x[2j]*s[j]``

    Elements at index ``>= R`` are unchanged (partial rotary). A position outside
    ``[0, max_pos)`` leaves its token untouched and writes no KV row for it (with
    ``SGL_KERNEL_DEBUG=1`` it raises ``RuntimeError``).

    Parameters
    ----------
    positions : torch.Tensor
        ``[nnz]``, int32 or int64, passed to the op as they are (the op reads both; any other
        integer dtype is converted with ``positions.long()``, as upstream's wrapper converts
        every dtype). Converting int32 here would add a cast kernel, about 1.3 us inside a
        CUDA graph at decode sizes, and give the same values.
    query : torch.Tensor
        ``[nnz, num_q_heads * head_size]`` or ``[nnz, num_q_heads, head_size]``, fp16/bf16,
        last dimension contiguous, token stride free (a slice of a fused QKV tensor works).
        Written in place.
    key : torch.Tensor
        ``[nnz, num_k_heads * head_size]`` or 3-D, dtype of ``query``, same layout rules;
        ``num_k_heads`` may differ from ``num_q_heads`` (GQA). Written in place.
    head_size : int
        64, 128, 256 or 512 (any multiple of 16 up to 512 works).
    cos_sin_cache : torch.Tensor
        ``[max_pos, R]``, **float32**, contiguous: cos in the first half of a row, sin in the
        second. ``R`` a multiple of 16, ``R <= head_size``.
    is_neox : bool
        NeoX (halves) style when ``True``, GPT-J (interleaved) style when ``False``.
    fused_set_kv_buffer_arg : Optional[FusedSetKVBufferArg]
        When given: ``k_buffer[cache_loc[i]] = rotated key[i]``, ``v_buffer[cache_loc[i]] =
        value[i]`` (both buffers written); ``key`` is still rotated in place.
    enable_pdl : Optional[bool]
        Programmatic dependent launch (sm90+). ``None``: on when the device supports it and
        the KV write is fused.

    Raises
    ------
    ValueError
        ``cos_sin_cache`` is not float32.
    AssertionError
        ``fused_set_kv_buffer_arg`` has a ``k_scale`` or ``v_scale`` that is not ``None``,
        or a ``cache_loc`` that is not int64.

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable; results are identical with PDL on or off.
    """
    name = "apply_rope_with_cos_sin_cache_inplace"
    if cos_sin_cache.dtype != torch.float32:
        raise ValueError(f"sgl_kernel.{name}: cos_sin_cache must have dtype torch.float32, got {cos_sin_cache.dtype}")
    a = fused_set_kv_buffer_arg
    if a is not None:
        _assert(a.k_scale is None, f"sgl_kernel.{name}: k_scale is not supported, must be None, got {a.k_scale}")
        _assert(a.v_scale is None, f"sgl_kernel.{name}: v_scale is not supported, must be None, got {a.v_scale}")
        _assert(
            a.cache_loc.dtype == torch.int64,
            f"sgl_kernel.{name}: cache_loc must have dtype torch.int64, got {a.cache_loc.dtype}",
        )
    if enable_pdl is None:
        enable_pdl = a is not None and is_arch_support_pdl()
    q = _view_3d(query, head_size)
    k = _view_3d(key, head_size)
    _apply_rope_pos_ids_cos_sin_cache(
        q,
        k,
        q,
        k,
        cos_sin_cache,
        positions if positions.dtype in (torch.int32, torch.int64) else positions.long(),
        not is_neox,
        enable_pdl,
        _view_3d(a.value, head_size) if a is not None else None,
        _view_3d(a.k_buffer, head_size) if a is not None else None,
        _view_3d(a.v_buffer, head_size) if a is not None else None,
        a.cache_loc if a is not None else None,
    )


# ---------------------------------------------------------------------------------------
# One-shot self checks for `python -m sgl_kernel`: small random inputs against fp32 torch.


def _check_act(fn: Callable, ref: Callable) -> None:
    for dtype, tol in ((torch.float32, 1e-3), (torch.float16, 1e-3), (torch.bfloat16, 1e-2)):
        x = torch.randn(37, 2 * 264, device="cuda", dtype=dtype)
        d = x.shape[-1] // 2
        expected = (ref(x[:, :d].float()) * x[:, d:].float()).to(dtype)
        torch.testing.assert_close(fn(x), expected, rtol=tol, atol=tol)


def _norm_ref(x: torch.Tensor, w: torch.Tensor, eps: float, gemma: bool) -> torch.Tensor:
    xf = x.float()
    wf = w.float() + 1.0 if gemma else w.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * wf


def _check_norm(gemma: bool, fused: bool) -> None:
    for dtype, tol in ((torch.float16, 1e-3), (torch.bfloat16, 1e-2), (torch.float32, 1e-3)):
        for hidden in (4096, 111):
            x = torch.randn(19, hidden, device="cuda", dtype=dtype)
            w = torch.randn(hidden, device="cuda", dtype=dtype)
            if fused:
                r = torch.randn_like(x)
                s = (x.float() + r.float()).to(dtype)
                expected = _norm_ref(s, w, 1e-6, gemma).to(dtype)
                (gemma_fused_add_rmsnorm if gemma else fused_add_rmsnorm)(x, r, w, 1e-6)
                torch.testing.assert_close(r, s, rtol=0, atol=0)
                torch.testing.assert_close(x, expected, rtol=tol, atol=tol)
            else:
                y = (gemma_rmsnorm if gemma else rmsnorm)(x, w, 1e-6)
                torch.testing.assert_close(y, _norm_ref(x, w, 1e-6, gemma).to(dtype), rtol=tol, atol=tol)


def _check_copy_no_ce() -> None:
    for n in (32, 64, 72):
        src = torch.randint(-(2**31), 2**31 - 1, (n,), dtype=torch.int32)
        dst = torch.full((n,), -1, dtype=torch.int32, device="cuda")
        copy_to_gpu_no_ce(src, dst)
        torch.testing.assert_close(dst.cpu(), src, rtol=0, atol=0)


def _check_downcast_fp8() -> None:
    k = torch.randn(7, 4, 64, device="cuda", dtype=torch.bfloat16) * 100
    v = torch.randn_like(k)
    k_out = torch.zeros(20, 4, 64, device="cuda", dtype=torch.float8_e4m3fn)
    v_out = torch.zeros_like(k_out)
    ks = torch.tensor([0.5], device="cuda")
    vs = torch.tensor([0.25], device="cuda")
    loc = torch.randperm(9, device="cuda")[:7]
    downcast_fp8(k, v, k_out, v_out, ks, vs, loc, 2, 1)
    rows = loc * 2 + 1
    expected_k = (k.float() / 0.5).clamp(-448, 448).to(torch.float8_e4m3fn)
    expected_v = (v.float() / 0.25).clamp(-448, 448).to(torch.float8_e4m3fn)
    torch.testing.assert_close(k_out[rows].float(), expected_k.float(), rtol=0, atol=0)
    torch.testing.assert_close(v_out[rows].float(), expected_v.float(), rtol=0, atol=0)


def _check_concat_mla() -> None:
    k_nope = torch.randn(5, 128, 128, device="cuda", dtype=torch.bfloat16)
    k_rope = torch.randn(5, 1, 64, device="cuda", dtype=torch.bfloat16)
    k = torch.empty(5, 128, 192, device="cuda", dtype=torch.bfloat16)
    concat_mla_k(k, k_nope, k_rope)
    torch.testing.assert_close(k, torch.cat([k_nope, k_rope.expand(-1, 128, -1)], dim=-1), rtol=0, atol=0)


def _check_concat_absorb_q() -> None:
    a = torch.randn(3, 16, 512, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(3, 16, 64, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(concat_mla_absorb_q(a, b), torch.cat([a, b], dim=-1), rtol=0, atol=0)


def _check_rope() -> None:
    # Reference by complex multiplication: each rotated pair is (x_a + i x_b) * (cos + i sin).
    nnz, hq, hk, d, r, max_pos = 37, 4, 2, 128, 64, 100
    for dtype, tol in ((torch.float16, 1e-3), (torch.bfloat16, 1e-2)):
        for is_neox in (True, False):
            pos = torch.randint(0, max_pos, (nnz,), device="cuda")
            cache = torch.randn(max_pos, r, device="cuda")
            rotation = torch.complex(cache[pos, : r // 2], cache[pos, r // 2 :]).unsqueeze(1)  # [nnz, 1, r/2]
            q = torch.randn(nnz, hq * d, device="cuda", dtype=dtype)
            k = torch.randn(nnz, hk * d, device="cuda", dtype=dtype)
            expected = []
            for x in (q, k):
                y = x.float().view(nnz, -1, d).clone()
                if is_neox:
                    z = torch.complex(y[..., : r // 2], y[..., r // 2 : r]) * rotation
                    y[..., : r // 2], y[..., r // 2 : r] = z.real, z.imag
                else:
                    z = torch.view_as_complex(y[..., :r].reshape(nnz, -1, r // 2, 2).contiguous()) * rotation
                    y[..., :r] = torch.view_as_real(z).flatten(-2)
                expected.append(y.view(nnz, -1).to(dtype))
            apply_rope_with_cos_sin_cache_inplace(pos, q, k, d, cache, is_neox=is_neox)
            torch.testing.assert_close(q, expected[0], rtol=tol, atol=tol)
            torch.testing.assert_close(k, expected[1], rtol=tol, atol=tol)


def self_checks() -> Dict[str, Callable[[], None]]:
    import torch.nn.functional as F

    return {
        "apply_rope_pos_ids_cos_sin_cache": _check_rope,
        "copy_to_gpu_no_ce": _check_copy_no_ce,
        "downcast_fp8": _check_downcast_fp8,
        "concat_mla_k": _check_concat_mla,
        "concat_mla_absorb_q": _check_concat_absorb_q,
        "rmsnorm": lambda: _check_norm(gemma=False, fused=False),
        "gemma_rmsnorm": lambda: _check_norm(gemma=True, fused=False),
        "fused_add_rmsnorm": lambda: _check_norm(gemma=False, fused=True),
        "gemma_fused_add_rmsnorm": lambda: _check_norm(gemma=True, fused=True),
        "silu_and_mul": lambda: _check_act(silu_and_mul, F.silu),
        "gelu_and_mul": lambda: _check_act(gelu_and_mul, F.gelu),
        "gelu_tanh_and_mul": lambda: _check_act(gelu_tanh_and_mul, lambda a: F.gelu(a, approximate="tanh")),
    }
