# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of custom_relu / fused_add_relu (shared by tests and benchmarks)."""

from __future__ import annotations

import torch


def custom_relu_ref(x: torch.Tensor) -> torch.Tensor:
    """fp32 ``max(x, 0)`` (NaN propagates, as torch.relu)."""
    return torch.relu(x.float())


def fused_add_relu_ref(x: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    """fp32 ``max(x + bias, 0)``."""
    return torch.relu(x.float() + bias.float())
