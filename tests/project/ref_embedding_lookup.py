# SPDX-License-Identifier: Apache-2.0
"""Pure-torch versions of embedding_lookup (API.md 3.3), shared by the test and the
benchmark."""

from __future__ import annotations

from typing import Optional, Tuple

import torch
import torch.nn.functional as F


def embedding_lookup_ref(
    weight: torch.Tensor, indices: torch.Tensor, vocab_range: Optional[Tuple[int, int]] = None
) -> torch.Tensor:
    """``weight[indices - start]`` where ``start <= indices < start + length``, else a row of
    (+0) zeros; a plain gather (``vocab_range=None``) takes ``(0, V)`` and so gives zero rows
    for out-of-range indices, as the op documents. Exact (no arithmetic on values)."""
    vocab, d = weight.shape
    start, length = (0, vocab) if vocab_range is None else vocab_range
    idx = indices.long()
    valid = (idx >= start) & (idx < start + length)
    out = torch.zeros((*indices.shape, d), dtype=weight.dtype, device=weight.device)
    out[valid] = weight[idx[valid] - start]
    return out


def embedding_lookup_torch(
    weight: torch.Tensor, indices: torch.Tensor, vocab_range: Optional[Tuple[int, int]] = None
) -> torch.Tensor:
    """What an engine runs instead (and what the torch.compile baseline compiles): a plain
    ``F.embedding`` (``weight[indices]``), or the masked vocab-parallel form of
    VocabParallelEmbedding for a shard."""
    if vocab_range is None:
        return F.embedding(indices, weight)
    start, length = vocab_range
    mask = (indices < start) | (indices >= start + length)
    local = (indices - start).masked_fill(mask, 0)
    return F.embedding(local, weight).masked_fill(mask.unsqueeze(-1), 0)
