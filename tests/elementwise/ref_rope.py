# SPDX-License-Identifier: Apache-2.0
"""Pure-torch reference of apply_rope_with_cos_sin_cache_inplace (API.md 2.1.3), in fp32
(shared by tests and benchmarks)."""

from __future__ import annotations

from typing import Optional, Tuple

import torch


def rope_ref(
    positions: torch.Tensor, x: torch.Tensor, head_size: int, cos_sin_cache: torch.Tensor, is_neox: bool
) -> torch.Tensor:
    """fp32 RoPE of ``x`` (``[nnz, H * head_size]`` or ``[nnz, H, head_size]``), returned as
    ``[nnz, H, head_size]``. Every position must index a row of ``cos_sin_cache``."""
    nnz = x.shape[0]
    x = x.float().reshape(nnz, -1, head_size)
    r = cos_sin_cache.shape[1]
    c, s = cos_sin_cache.float()[positions.long()].unsqueeze(1).chunk(2, dim=-1)  # [nnz, 1, R/2]
    rot, rest = x[..., :r], x[..., r:]
    if is_neox:
        x1, x2 = rot.chunk(2, dim=-1)
        rot = torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)
    else:
        x1, x2 = rot[..., 0::2], rot[..., 1::2]
        rot = torch.stack((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1).flatten(-2)
    return torch.cat((rot, rest), dim=-1)


def rope_torch(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool = True,
    value: Optional[torch.Tensor] = None,
    k_buffer: Optional[torch.Tensor] = None,
    v_buffer: Optional[torch.Tensor] = None,
    cache_loc: Optional[torch.Tensor] = None,
) -> None:
    """What an engine would run instead (and what torch.compile compiles): the reference,
    rounded to the input dtype and written back in place, plus the KV-cache write when
    ``value`` is given. Every position and cache location must be in range."""
    nnz = query.shape[0]
    q = rope_ref(positions, query, head_size, cos_sin_cache, is_neox).to(query.dtype)
    k = rope_ref(positions, key, head_size, cos_sin_cache, is_neox).to(key.dtype)
    query.view(nnz, -1, head_size).copy_(q)
    key.view(nnz, -1, head_size).copy_(k)
    if value is not None:
        k_buffer.view(k_buffer.shape[0], -1, head_size)[cache_loc] = k
        v_buffer.view(v_buffer.shape[0], -1, head_size)[cache_loc] = value.view(nnz, -1, head_size)


def expected_rope(
    positions: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    head_size: int,
    cos_sin_cache: torch.Tensor,
    is_neox: bool,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """fp32 ``(query, key)`` after the op, ``[nnz, H, head_size]`` each, out-of-range
    positions included: their tokens are unchanged (API.md 1.4)."""
    nnz = query.shape[0]
    pos = positions.long()
    valid = (pos >= 0) & (pos < cos_sin_cache.shape[0])
    safe = torch.where(valid, pos, torch.zeros_like(pos))
    out = []
    for x in (query, key):
        rotated = rope_ref(safe, x, head_size, cos_sin_cache, is_neox)
        out.append(torch.where(valid[:, None, None], rotated, x.float().reshape(nnz, -1, head_size)))
    return out[0], out[1]
