# SPDX-License-Identifier: Apache-2.0
"""Elementwise family: gated activations and RoPE (norms and the rest come with later issues)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Dict, Optional

import torch

from sgl_kernel.utils import _assert, is_arch_support_pdl

__all__ = [
    "silu_and_mul",
    "gelu_and_mul",
    "gelu_tanh_and_mul",
    "FusedSetKVBufferArg",
    "apply_rope_with_cos_sin_cache_inplace",
]

FAMILY = "elementwise"
# op name -> lowest arch with a kernel (API.md)
OPS = {"silu_and_mul": 80, "gelu_and_mul": 80, "gelu_tanh_and_mul": 80, "apply_rope_pos_ids_cos_sin_cache": 80}

_silu_and_mul = torch.ops.sgl_kernel.silu_and_mul.default
_gelu_and_mul = torch.ops.sgl_kernel.gelu_and_mul.default
_gelu_tanh_and_mul = torch.ops.sgl_kernel.gelu_tanh_and_mul.default
_apply_rope_pos_ids_cos_sin_cache = torch.ops.sgl_kernel.apply_rope_pos_ids_cos_sin_cache.default


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
        ``[nnz]``, int32 or int64 (passed on as int64).
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
        positions.long(),
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
        "silu_and_mul": lambda: _check_act(silu_and_mul, F.silu),
        "gelu_and_mul": lambda: _check_act(gelu_and_mul, F.gelu),
        "gelu_tanh_and_mul": lambda: _check_act(gelu_tanh_and_mul, lambda a: F.gelu(a, approximate="tanh")),
        "apply_rope_pos_ids_cos_sin_cache": _check_rope,
    }
