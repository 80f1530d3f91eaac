# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of apply_shuffle_mul_sum (API.md 2.4), shared by
tests/moe/test_shuffle_mul_sum.py and benchmark/moe/bench_shuffle_mul_sum.py.

``input`` is ``[R, K]``, ``permutation`` int32 ``[m * topk]``, ``factors`` ``[m * topk]`` or
``[m, topk]`` (or None: ones); the op writes ``output[i] = sum_j f[i, j] * input[perm[i, j]]``
(``perm`` / ``f`` viewed as ``[m, topk]``), where an entry outside ``[0, R)`` contributes
nothing. Three forms:

* :func:`shuffle_mul_sum_ref`: the exact value in fp64 (for the API 1.6 tolerances);
* :func:`shuffle_mul_sum_inorder`: what the kernel computes, bit for bit: each term the fp32
  product of the factor and the element (both widened exactly), the sum starting from the first
  contributing term and adding the others in order of ``j`` in fp32 (one rounding per multiply
  and per add, no fused multiply-add), rounded once to the output dtype; +0 where no entry of the
  token contributes;
* :func:`shuffle_mul_sum_torch`: what an engine would write instead (the bench's baseline):
  ``(input[perm].view(m, topk, K).float() * factors.view(m, topk, 1).float()).sum(1)``.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch


def _entries(input: torch.Tensor, permutation: torch.Tensor, factors: Optional[torch.Tensor], m: int
             ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """(rows, valid, f32 factors), each ``[m, topk]``, and topk: ``rows`` the permutation entries
    as int64 with the invalid ones replaced by 0 (any row: they are masked out)."""
    topk = permutation.numel() // m
    perm = permutation.reshape(m, topk).long()
    valid = (perm >= 0) & (perm < input.shape[0])
    rows = torch.where(valid, perm, torch.zeros_like(perm))
    if factors is None:
        f = torch.ones((m, topk), dtype=torch.float32, device=input.device)
    else:
        f = factors.reshape(m, topk).float()
    return rows, valid, f, topk


def shuffle_mul_sum_ref(input: torch.Tensor, permutation: torch.Tensor, factors: Optional[torch.Tensor],
                        m: int) -> torch.Tensor:
    """fp64 ``[m, K]``: the exact weighted sum of the valid entries (0 where none), one term
    at a time (no fp64 copy of the whole gathered input)."""
    k = input.shape[1]
    acc = torch.zeros((m, k), dtype=torch.float64, device=input.device)
    if m == 0 or input.shape[0] == 0:
        return acc
    rows, valid, f, topk = _entries(input, permutation, factors, m)
    f = f.double()
    for j in range(topk):
        term = f[:, j : j + 1] * input[rows[:, j]].double()
        acc += torch.where(valid[:, j : j + 1], term, torch.zeros_like(term))
    return acc


def shuffle_mul_sum_inorder(input: torch.Tensor, permutation: torch.Tensor, factors: Optional[torch.Tensor],
                            m: int) -> torch.Tensor:
    """The op's result bit for bit (``[m, K]``, ``input.dtype``). Eager torch runs the multiply
    and the add as separate fp32 kernels, so nothing is fused: ``acc`` starts at -0.0 (the
    identity of IEEE addition, so the first valid term is taken as it is and a sum of -0.0 terms
    stays -0.0), a valid term ``f * x`` is added in order of ``j``, an invalid one leaves
    ``acc`` as it was, and a token without a valid entry gives +0."""
    k = input.shape[1]
    if m == 0 or input.shape[0] == 0:
        return torch.zeros((m, k), dtype=input.dtype, device=input.device)
    rows, valid, f, topk = _entries(input, permutation, factors, m)
    acc = torch.full((m, k), -0.0, dtype=torch.float32, device=input.device)
    for j in range(topk):
        term = f[:, j : j + 1] * input[rows[:, j]].float()
        acc = torch.where(valid[:, j : j + 1], acc + term, acc)
    acc = torch.where(valid.any(dim=1, keepdim=True), acc, torch.zeros_like(acc))
    return acc.to(input.dtype)


def shuffle_mul_sum_torch(input: torch.Tensor, permutation: torch.Tensor, factors: Optional[torch.Tensor],
                          m: int) -> torch.Tensor:
    """An engine's apply_shuffle_mul_sum for a permutation without dropped entries: gather, view
    as ``[m, topk, K]``, weight and sum over topk in fp32, round once."""
    topk = permutation.numel() // m
    x = input[permutation].view(m, topk, -1).float()  # int32 indices, as an engine holds them
    if factors is not None:
        x = x * factors.reshape(m, topk, 1).float()
    return x.sum(dim=1).to(input.dtype)
