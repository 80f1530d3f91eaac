# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of the gated activations, in fp32 (shared by tests and benchmarks)."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def _split(x: torch.Tensor):
    d = x.shape[-1] // 2
    return x[..., :d].float(), x[..., d:].float()


def silu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    """fp32 ``silu(x[..., :d]) * x[..., d:]``."""
    a, b = _split(x)
    return F.silu(a) * b


def gelu_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    """fp32 ``gelu(x[..., :d]) * x[..., d:]`` (exact erf)."""
    a, b = _split(x)
    return F.gelu(a) * b


def gelu_tanh_and_mul_ref(x: torch.Tensor) -> torch.Tensor:
    """fp32 ``gelu_tanh(x[..., :d]) * x[..., d:]``."""
    a, b = _split(x)
    return F.gelu(a, approximate="tanh") * b


# op name -> fp32 reference
REFS = {
    "silu_and_mul": silu_and_mul_ref,
    "gelu_and_mul": gelu_and_mul_ref,
    "gelu_tanh_and_mul": gelu_tanh_and_mul_ref,
}


def act_and_mul_torch(op: str, x: torch.Tensor) -> torch.Tensor:
    """What an engine would run instead (and what torch.compile compiles): the reference,
    rounded to the input dtype."""
    return REFS[op](x).to(x.dtype)
