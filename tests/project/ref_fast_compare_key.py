# SPDX-License-Identifier: Apache-2.0
"""Pure-torch fast_compare_key (API.md 3.4)."""

from __future__ import annotations

import torch


def fast_compare_key_ref(x: torch.Tensor, y: torch.Tensor) -> int:
    """The first ``i`` with ``x[i] != y[i]``, or ``min(len(x), len(y))``."""
    n = min(x.shape[0], y.shape[0])
    diff = (x[:n] != y[:n]).nonzero()
    return int(diff[0, 0]) if diff.numel() else n
