# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of moe_align_block_size (API.md 2.4), shared by
tests/moe/test_moe_align.py and benchmark/moe/bench_moe_align.py.

Semantics: flat entry ``i`` of ``topk_ids`` goes to bucket ``b = topk_ids.flat[i] + 1``; an entry
whose bucket is outside ``[0, num_experts)`` is dropped. ``c_e`` entries in bucket ``e`` are
padded to ``c'_e = ceil(c_e / block_size) * block_size``; ``o_e = sum(c'_{e'} for e' < e)``;
``sorted_token_ids[o_e : o_e + c_e]`` holds the flat indices of bucket ``e``, here in ascending
order (the stable order, which sgl_kernel's kernel also produces); block ``j`` of bucket ``e``
gets expert id ``e - 1``.

* :func:`align_reference` computes that layout directly (int64 math; it synchronises), for the
  tests' comparisons.
* :func:`moe_align_block_size_torch` is what a serving engine could write instead of the kernel:
  destination-passing like the op, fixed shapes, no host synchronisation (so it runs in a CUDA
  graph and under ``torch.compile(fullgraph=True)``): an index_add histogram, cumsums, a stable
  ``torch.sort`` of the buckets, a scatter, and a ``searchsorted`` for the block experts. It is
  the bench's eager and compiled baseline.
"""

from __future__ import annotations

from typing import NamedTuple

import torch


class AlignRef(NamedTuple):
    counts: torch.Tensor        # [nb] int64: c_e
    offsets: torch.Tensor       # [nb + 1] int64: o_e, offsets[nb] = total
    total: int                  # num_tokens_post_pad
    sorted_ids: torch.Tensor    # [total] int32: the used part of sorted_token_ids, pads = numel
    block_experts: torch.Tensor  # [total // block_size] int32: experts_ids of the used blocks
    pad_mask: torch.Tensor      # [total] bool: True where sorted_ids is padding


def buckets(topk_ids: torch.Tensor, num_experts: int) -> torch.Tensor:
    """Flat bucket of every entry (int64), or -1 for a dropped one. Computed without overflow
    for any int32 / int64 id (INT64_MAX included)."""
    flat = topk_ids.reshape(-1)
    valid = (flat >= -1) & (flat <= num_experts - 2)
    # int64 + 1 wraps for INT64_MAX only where `valid` is False
    return torch.where(valid, flat.to(torch.int64) + 1, torch.full((), -1, dtype=torch.int64, device=flat.device))


def align_reference(topk_ids: torch.Tensor, num_experts: int, block_size: int) -> AlignRef:
    """The exact layout of API.md 2.4 with each bucket's indices ascending."""
    n = topk_ids.numel()
    nb, bs = num_experts, block_size
    dev = topk_ids.device
    b = buckets(topk_ids, nb)
    idx = torch.nonzero(b >= 0).flatten()
    bv = b[idx]
    counts = torch.bincount(bv, minlength=nb)[:nb]
    padded = (counts + bs - 1) // bs * bs
    offsets = torch.zeros(nb + 1, dtype=torch.int64, device=dev)
    offsets[1:] = torch.cumsum(padded, 0)
    total = int(offsets[-1])
    order = torch.sort(bv, stable=True).indices
    sb = bv[order]
    first = torch.cumsum(counts, 0) - counts
    rank = torch.arange(sb.numel(), device=dev) - first[sb]
    pos = offsets[sb] + rank
    sorted_ids = torch.full((total,), n, dtype=torch.int32, device=dev)
    sorted_ids[pos] = idx[order].to(torch.int32)
    pad_mask = torch.ones(total, dtype=torch.bool, device=dev)
    pad_mask[pos] = False
    block_experts = torch.repeat_interleave(torch.arange(nb, device=dev) - 1, padded // bs).to(torch.int32)
    return AlignRef(counts, offsets, total, sorted_ids, block_experts, pad_mask)


def sglang_buffer_sizes(numel: int, num_experts: int, block_size: int) -> "tuple[int, int]":
    """(sorted_token_ids entries, experts_ids entries) as SGLang's fused-MoE path allocates them
    (``num_experts`` here is the op's argument, E + 1): ``numel * block_size`` when
    ``numel < num_experts``, else ``numel + num_experts * (block_size - 1)``; the blocks of that."""
    if numel < num_experts:
        sorted_len = numel * block_size
    else:
        sorted_len = numel + num_experts * (block_size - 1)
    return sorted_len, -(-sorted_len // block_size)


def api_buffer_sizes(numel: int, num_experts: int, block_size: int) -> "tuple[int, int]":
    """(sorted_token_ids entries, experts_ids entries) of API.md 2.4's bound:
    ``numel + num_experts * (block_size - 1)`` and its blocks."""
    sorted_len = numel + num_experts * (block_size - 1)
    return sorted_len, -(-sorted_len // block_size)


def moe_align_block_size_torch(topk_ids: torch.Tensor, num_experts: int, block_size: int,
                               sorted_token_ids: torch.Tensor, experts_ids: torch.Tensor,
                               num_tokens_post_pad: torch.Tensor, cumsum_buffer: torch.Tensor,
                               pad_sorted_token_ids: bool = False) -> None:
    """moe_align_block_size in torch ops, destination-passing, no host sync (see the module doc).
    Entries of sorted_token_ids past the written ones keep their values unless
    ``pad_sorted_token_ids``; experts_ids past the used blocks keep theirs."""
    n = topk_ids.numel()
    nb, bs = num_experts, block_size
    dev = topk_ids.device
    sorted_len = sorted_token_ids.numel()
    b = buckets(topk_ids, nb)
    b = torch.where(b >= 0, b, torch.full((), nb, dtype=torch.int64, device=dev))  # dropped: bucket nb
    counts = torch.zeros(nb + 1, dtype=torch.int64, device=dev).index_add_(0, b, torch.ones_like(b))
    blocks = (counts[:nb] + bs - 1) // bs
    ends = torch.cumsum(blocks, 0) * bs          # o_{e+1}
    starts = torch.cat([ends[:1] * 0, ends])     # o_e; starts[nb] = total (the dropped bucket's)
    order = torch.sort(b, stable=True).indices   # flat indices grouped by bucket, ascending inside
    sb = b[order]
    first = torch.cumsum(counts, 0) - counts     # where each bucket starts in `order`
    pos = starts[sb] + torch.arange(n, device=dev) - first[sb]
    pos = torch.where((sb < nb) & (pos < sorted_len), pos, torch.full((), sorted_len, dtype=torch.int64, device=dev))
    if pad_sorted_token_ids:
        out = torch.full((sorted_len + 1,), n, dtype=torch.int32, device=dev)
    else:
        out = torch.cat([sorted_token_ids, sorted_token_ids.new_zeros(1)])
    out.scatter_(0, pos, order.to(torch.int32))  # dropped and clipped entries land on the extra slot
    sorted_token_ids.copy_(out[:sorted_len])
    j = torch.arange(experts_ids.numel(), device=dev)
    e = torch.searchsorted(ends // bs, j, right=True)  # the bucket that holds block j
    experts_ids.copy_(torch.where(j < ends[-1] // bs, (e - 1).to(torch.int32), experts_ids))
    num_tokens_post_pad.copy_(ends[-1:])
    cumsum_buffer[: nb + 1].copy_(starts)
