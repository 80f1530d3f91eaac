# SPDX-License-Identifier: Apache-2.0
"""Project ops that are not in sgl-kernel (API.md section 3)."""

from __future__ import annotations

from typing import Callable, Dict

import torch

__all__ = ["custom_relu", "fused_add_relu"]

FAMILY = "project"
OPS = {"custom_relu": 80, "fused_add_relu": 80}

_custom_relu = torch.ops.sgl_kernel.custom_relu.default
_fused_add_relu = torch.ops.sgl_kernel.fused_add_relu.default


@torch.library.register_fake("sgl_kernel::custom_relu")
def _custom_relu_fake(input: torch.Tensor) -> torch.Tensor:
    return torch.empty(input.shape, dtype=input.dtype, device=input.device)


@torch.library.register_fake("sgl_kernel::fused_add_relu")
def _fused_add_relu_fake(input: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.empty(input.shape, dtype=input.dtype, device=input.device)


def custom_relu(input: torch.Tensor) -> torch.Tensor:
    r"""``out = max(input, 0)``, equal to ``torch.relu(input)`` (NaN propagates).

    Parameters
    ----------
    input : torch.Tensor
        Any shape, any strides; fp32/fp16/bf16; CUDA.

    Returns
    -------
    torch.Tensor
        New contiguous tensor, shape and dtype of ``input``.

    Notes
    -----
    Arch: sm80+.
    """
    return _custom_relu(input)


def fused_add_relu(input: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    r"""``out = max(input + bias, 0)`` with the sum in fp32 and one rounding.

    Parameters
    ----------
    input : torch.Tensor
        Any shape with at least one dimension, any strides; fp32/fp16/bf16; CUDA.
    bias : torch.Tensor
        ``[input.shape[-1]]``, same dtype, contiguous; broadcast over the leading dims.

    Returns
    -------
    torch.Tensor
        New contiguous tensor, shape and dtype of ``input``.

    Notes
    -----
    Arch: sm80+.
    """
    return _fused_add_relu(input, bias)


def self_checks() -> Dict[str, Callable[[], None]]:
    def check_relu() -> None:
        x = torch.randn(33, 130, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(custom_relu(x), torch.relu(x), rtol=0, atol=0)

    def check_add_relu() -> None:
        x = torch.randn(33, 130, device="cuda", dtype=torch.float16)
        b = torch.randn(130, device="cuda", dtype=torch.float16)
        torch.testing.assert_close(fused_add_relu(x, b), torch.relu(x.float() + b.float()).half(), rtol=1e-3, atol=1e-3)

    return {"custom_relu": check_relu, "fused_add_relu": check_add_relu}
