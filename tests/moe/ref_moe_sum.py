# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of moe_sum / moe_sum_reduce (API.md 2.4), shared by
tests/moe/test_moe_sum.py and benchmark/moe/bench_moe_sum.py.

``input`` is ``[T, k, H]``; the ops write ``output[t] = scale * sum_j input[t, j]`` (moe_sum:
no scale). Three forms:

* :func:`moe_sum_ref`: the exact value in fp64 (for the API 1.6 tolerances);
* :func:`moe_sum_inorder`: what the kernel computes, bit for bit: an fp32 sum that starts from
  ``input[:, 0]`` and adds ``input[:, 1]``, ..., ``input[:, k - 1]`` in that order (one fp32
  rounding per add), then one fp32 multiply by ``scale`` (moe_sum_reduce only), then one
  rounding to the input dtype. An empty sum (k = 0) is +0;
* :func:`moe_sum_torch` / :func:`moe_sum_reduce_torch`: what an engine would write instead
  (the bench's baselines; torch picks its own summation order).
"""

from __future__ import annotations

from typing import Optional

import torch


def moe_sum_ref(x: torch.Tensor, scale: Optional[float] = None) -> torch.Tensor:
    """fp64 ``scale * x.sum(1)`` (``x`` ``[T, k, H]``; ``scale`` None: no multiply), one
    ``[T, H]`` slice at a time (no fp64 copy of the whole input)."""
    t, k, h = x.shape
    acc = torch.zeros((t, h), dtype=torch.float64, device=x.device)
    for j in range(k):
        acc += x[:, j].double()
    return acc if scale is None else acc * scale


def moe_sum_inorder(x: torch.Tensor, scale: Optional[float] = None) -> torch.Tensor:
    """The op's result bit for bit: fp32 in-order sum over dim 1, times fp32 ``scale`` when
    given, rounded once to ``x.dtype``. Works on one ``[T, H]`` slice at a time, so a large
    ``x`` needs only a few fp32 ``[T, H]`` temporaries."""
    t, k, h = x.shape
    if k == 0:
        acc = torch.zeros((t, h), dtype=torch.float32, device=x.device)
    else:
        acc = x[:, 0].float().clone()  # clone: for fp32 input .float() is x's own memory
        for j in range(1, k):
            acc = acc + x[:, j].float()
    if scale is not None:
        # A 0-dim fp32 tensor: the multiply happens in fp32, with scale rounded to fp32 first,
        # as the op does (the binding passes a C++ float).
        acc = acc * torch.tensor(scale, dtype=torch.float32, device=x.device)
    return acc.to(x.dtype)


def moe_sum_torch(x: torch.Tensor) -> torch.Tensor:
    """An engine's moe_sum: ``x.sum(dim=1)`` (fp32 accumulation for 16-bit inputs)."""
    return x.sum(dim=1)


def moe_sum_reduce_torch(x: torch.Tensor, scale: float) -> torch.Tensor:
    """An engine's moe_sum_reduce: ``torch.sum(x, 1) * scale`` (SGLang's fallback form; the
    product is rounded a second time for 16-bit inputs)."""
    return torch.sum(x, 1) * scale
