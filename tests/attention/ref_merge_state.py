# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of merge_state / merge_state_v2 (API.md 2.5), shared by
tests/attention/test_merge_state.py and benchmark/attention/bench_merge_state.py.

Two partial attention states of the same queries, ``(v_a, s_a)`` and ``(v_b, s_b)`` with ``v``
``[T, H, D]`` and ``s`` ``[T, H]`` (the log-sum-exp of the logits, base 2 for merge_state and
natural for merge_state_v2), merge into the state over the union of their keys:
``m = max(s_a, s_b)``, ``alpha = E(s_a - m)``, ``beta = E(s_b - m)``,
``v = (alpha v_a + beta v_b) / (alpha + beta)``, ``s = m + L(alpha + beta)``.

* :func:`merge_state_ref`: the contract's value in fp64, special rows included (v2 reads an
  LSE of +inf as -inf; both states empty gives ``v = 0``, ``s = -inf``; NaN propagates);
* :func:`merge_state_torch` / :func:`merge_state_v2_torch`: what an engine would write instead
  (the bench's baselines): the same formula in fp32 torch ops, rounded to the value dtype.
"""

from __future__ import annotations

from typing import Tuple

import torch

INF = float("inf")


def _weights(s_a: torch.Tensor, s_b: torch.Tensor, natural: bool, dtype: torch.dtype):
    """(alpha, beta, m, both_empty) in ``dtype`` for the LSE pairs (``[T, H]`` each)."""
    a, b = s_a.to(dtype), s_b.to(dtype)
    if natural:
        a = torch.where(a == INF, -INF, a)
        b = torch.where(b == INF, -INF, b)
    both_empty = (a == -INF) & (b == -INF)
    m = torch.maximum(a, b)  # NaN in either gives NaN
    m_safe = torch.where(both_empty, torch.zeros_like(m), m)  # no -inf - -inf on empty rows
    exp = torch.exp if natural else torch.exp2
    return exp(a - m_safe), exp(b - m_safe), m, both_empty


def merge_state_ref(v_a: torch.Tensor, s_a: torch.Tensor, v_b: torch.Tensor, s_b: torch.Tensor,
                    natural: bool) -> Tuple[torch.Tensor, torch.Tensor]:
    """The merged ``(v, s)`` in fp64 (``natural``: merge_state_v2's e / ln, else base 2).
    ``s_a`` / ``s_b`` of any float dtype are widened as they are (the op's binding takes fp32;
    the wrapper converts with ``.to(torch.float32)`` first, so pass the fp32 values to compare
    with it)."""
    f64 = torch.float64
    alpha, beta, m, both_empty = _weights(s_a, s_b, natural, f64)
    total = alpha + beta
    v = (alpha[..., None] * v_a.to(f64) + beta[..., None] * v_b.to(f64)) / total[..., None]
    log = torch.log(total) if natural else torch.log2(total)
    s = m + log
    v = torch.where(both_empty[..., None], torch.zeros_like(v), v)
    s = torch.where(both_empty, torch.full_like(s, -INF), s)
    return v, s


def merge_state_torch(v_a: torch.Tensor, s_a: torch.Tensor, v_b: torch.Tensor,
                      s_b: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """An engine's merge_state (base-2 LSE): fp32 weights, fp32 blend rounded to ``v_a``'s
    dtype (no special-row handling: two empty states give NaN)."""
    m = torch.maximum(s_a, s_b)
    alpha = torch.exp2(s_a - m)
    beta = torch.exp2(s_b - m)
    total = alpha + beta
    v = v_a.float() * (alpha / total)[..., None] + v_b.float() * (beta / total)[..., None]
    return v.to(v_a.dtype), m + torch.log2(total)


def merge_state_v2_torch(v_a: torch.Tensor, s_a: torch.Tensor, v_b: torch.Tensor,
                         s_b: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """An engine's merge_state_v2 (natural LSE, +inf read as an empty state), fp32 as above."""
    s_a = torch.where(s_a == INF, -INF, s_a)
    s_b = torch.where(s_b == INF, -INF, s_b)
    m = torch.maximum(s_a, s_b)
    alpha = torch.exp(s_a - m)
    beta = torch.exp(s_b - m)
    total = alpha + beta
    v = v_a.float() * (alpha / total)[..., None] + v_b.float() * (beta / total)[..., None]
    return v.to(v_a.dtype), m + torch.log(total)

