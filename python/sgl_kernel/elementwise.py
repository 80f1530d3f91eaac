# SPDX-License-Identifier: Apache-2.0
"""Elementwise family: gated activations (norms, RoPE and the rest come with later issues)."""

from __future__ import annotations

from typing import Callable, Dict, Optional

import torch

from sgl_kernel.utils import _assert

__all__ = ["silu_and_mul", "gelu_and_mul", "gelu_tanh_and_mul"]

FAMILY = "elementwise"
# op name -> lowest arch with a kernel (API.md)
OPS = {"silu_and_mul": 80, "gelu_and_mul": 80, "gelu_tanh_and_mul": 80}

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


# ---------------------------------------------------------------------------------------
# One-shot self checks for `python -m sgl_kernel`: small random inputs against fp32 torch.


def _check_act(fn: Callable, ref: Callable) -> None:
    for dtype, tol in ((torch.float32, 1e-3), (torch.float16, 1e-3), (torch.bfloat16, 1e-2)):
        x = torch.randn(37, 2 * 264, device="cuda", dtype=dtype)
        d = x.shape[-1] // 2
        expected = (ref(x[:, :d].float()) * x[:, d:].float()).to(dtype)
        torch.testing.assert_close(fn(x), expected, rtol=tol, atol=tol)


def self_checks() -> Dict[str, Callable[[], None]]:
    import torch.nn.functional as F

    return {
        "silu_and_mul": lambda: _check_act(silu_and_mul, F.silu),
        "gelu_and_mul": lambda: _check_act(gelu_and_mul, F.gelu),
        "gelu_tanh_and_mul": lambda: _check_act(gelu_tanh_and_mul, lambda a: F.gelu(a, approximate="tanh")),
    }
