# SPDX-License-Identifier: Apache-2.0
"""One tolerance table for every test (API.md section 1.6)."""

from __future__ import annotations

import torch

# norms, activations, RoPE, merge_state, sums: (rtol, atol) per output dtype
ELEMENTWISE = {
    torch.float32: (1e-3, 1e-3),
    torch.float16: (1e-3, 1e-3),
    torch.bfloat16: (1e-2, 1e-2),
}


def elementwise_tol(dtype: torch.dtype) -> dict:
    rtol, atol = ELEMENTWISE[dtype]
    return {"rtol": rtol, "atol": atol}
