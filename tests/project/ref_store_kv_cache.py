# SPDX-License-Identifier: Apache-2.0
"""Pure-torch versions of store_kv_cache / set_kv_buffer_kernel (API.md 3.2), shared by the
test and the benchmark."""

from __future__ import annotations

import torch


def store_kv_cache_ref(
    k_cache: torch.Tensor, v_cache: torch.Tensor, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> None:
    """In place: ``k_cache[loc[i]] = k[i]``, ``v_cache[loc[i]] = v[i]`` with the op's contract
    for a location outside ``[0, k_cache.shape[0])``: skipped. ``k``/``v`` rows may have
    another shape than the caches' rows (same element count). Pass byte views
    (``t.view(torch.uint8)``) for a bit-exact reference of any dtype."""
    keep = (loc >= 0) & (loc < k_cache.shape[0])
    idx = loc[keep].long()
    for cache, src in ((k_cache, k), (v_cache, v)):
        cache[idx] = src[keep].reshape(-1, *cache.shape[1:])


def store_kv_cache_torch(
    k_cache: torch.Tensor, v_cache: torch.Tensor, loc: torch.Tensor, k: torch.Tensor, v: torch.Tensor
) -> None:
    """What an engine runs instead (set_kv_buffer_kernel's fallback, and what the
    torch.compile baseline compiles): PyTorch indexing, in-range locations only."""
    k_cache[loc] = k
    v_cache[loc] = v
