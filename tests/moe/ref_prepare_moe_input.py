# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of prepare_moe_input (API.md 2.4; contract in csrc/moe/moe.h), shared by
tests/moe/test_prepare_moe_input.py and benchmark/moe/bench_prepare_moe_input.py.

Semantics: flat entry ``i`` of ``topk_ids`` (token ``i // topk``) has expert ``e = topk_ids.flat[i]``;
an entry with ``e`` outside ``[0, num_experts)`` is dropped. ``c_e`` = kept entries of expert ``e``.
``expert_offsets = [0, cumsum(c)]``, ``blockscale_offsets = [0, cumsum(round_up(c, 128))]``,
``problem_sizes1[e] = (c_e, 2n, k)``, ``problem_sizes2[e] = (c_e, k, n)``. A kept entry gets slot
``q = expert_offsets[e] + (kept entries i' < i of the same expert)`` (ascending flat index inside
an expert, sgl_kernel's documented order): ``input_permutation[q] = i // topk``,
``output_permutation[i] = q``; a dropped entry gets ``output_permutation[i] = -1``, and the slots
``[expert_offsets[E], numel)`` it leaves get ``input_permutation = -1``.

* :func:`prepare_reference` computes that layout directly (int64 math, a sort of unique keys
  ``e * numel + i``; it synchronises), for the tests' comparisons.
* :func:`prepare_moe_input_torch` is what a serving engine could write instead of the kernel:
  destination-passing like the op, fixed shapes, no host synchronisation (so it runs in a CUDA
  graph and under ``torch.compile(fullgraph=True)``): a scatter_add histogram, cumsums, a stable
  ``argsort`` of the experts and two scatters. It is the bench's eager and compiled baseline.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

BLOCKSCALE_ALIGN = 128


class PrepareRef(NamedTuple):
    expert_offsets: torch.Tensor       # [E + 1] int32
    blockscale_offsets: torch.Tensor   # [E + 1] int32
    problem_sizes1: torch.Tensor       # [E, 3] int32
    problem_sizes2: torch.Tensor       # [E, 3] int32
    input_permutation: torch.Tensor    # [numel] int32
    output_permutation: torch.Tensor   # [numel] int32
    counts: torch.Tensor               # [E] int64: c_e


def problem_sizes(counts: torch.Tensor, n: int, k: int) -> "tuple[torch.Tensor, torch.Tensor]":
    """([E, 3], [E, 3]) int32: rows (c_e, 2n, k) and (c_e, k, n)."""
    E = counts.numel()
    c = counts.to(torch.int32)
    ps1 = torch.stack([c, torch.full((E,), 2 * n, dtype=torch.int32, device=c.device),
                       torch.full((E,), k, dtype=torch.int32, device=c.device)], dim=1)
    ps2 = torch.stack([c, torch.full((E,), k, dtype=torch.int32, device=c.device),
                       torch.full((E,), n, dtype=torch.int32, device=c.device)], dim=1)
    return ps1, ps2


def prepare_reference(topk_ids: torch.Tensor, num_experts: int, n: int, k: int) -> PrepareRef:
    """The exact layout of moe.h's contract (see the module doc)."""
    dev = topk_ids.device
    E = num_experts
    topk = max(topk_ids.shape[-1], 1)
    flat = topk_ids.reshape(-1).to(torch.int64)
    numel = flat.numel()
    valid = (flat >= 0) & (flat < E)
    kept = torch.nonzero(valid).flatten()  # ascending flat indices
    ek = flat[kept]
    counts = torch.bincount(ek, minlength=E)[:E] if ek.numel() else torch.zeros(E, dtype=torch.int64, device=dev)
    offsets = torch.zeros(E + 1, dtype=torch.int64, device=dev)
    offsets[1:] = torch.cumsum(counts, 0)
    rounded = (counts + BLOCKSCALE_ALIGN - 1) // BLOCKSCALE_ALIGN * BLOCKSCALE_ALIGN
    bso = torch.zeros(E + 1, dtype=torch.int64, device=dev)
    bso[1:] = torch.cumsum(rounded, 0)
    # unique keys: sorting them orders by expert, then by flat index (no stability needed)
    order = torch.sort(ek * max(numel, 1) + kept).indices
    slots = torch.empty_like(order)
    slots[order] = torch.arange(order.numel(), device=dev)
    inp = torch.full((numel,), -1, dtype=torch.int64, device=dev)
    outp = torch.full((numel,), -1, dtype=torch.int64, device=dev)
    inp[slots] = kept // topk
    outp[kept] = slots
    ps1, ps2 = problem_sizes(counts, n, k)
    return PrepareRef(offsets.to(torch.int32), bso.to(torch.int32), ps1, ps2, inp.to(torch.int32),
                      outp.to(torch.int32), counts)


def prepare_moe_input_torch(topk_ids: torch.Tensor, expert_offsets: torch.Tensor,
                            problem_sizes1: torch.Tensor, problem_sizes2: torch.Tensor,
                            input_permutation: torch.Tensor, output_permutation: torch.Tensor,
                            num_experts: int, n: int, k: int,
                            blockscale_offsets: Optional[torch.Tensor] = None) -> None:
    """prepare_moe_input in torch ops, destination-passing, no host sync (see the module doc);
    the same outputs as the kernel, bit for bit."""
    E = num_experts
    dev = topk_ids.device
    topk = topk_ids.shape[-1]
    flat = topk_ids.reshape(-1)
    numel = flat.numel()
    valid = (flat >= 0) & (flat < E)
    key = torch.where(valid, flat.to(torch.int64), torch.full((), E, dtype=torch.int64, device=dev))
    counts = torch.zeros(E + 1, dtype=torch.int64, device=dev).scatter_add_(0, key, torch.ones_like(key))[:E]
    expert_offsets[0] = 0
    expert_offsets[1:].copy_(torch.cumsum(counts, 0))
    if blockscale_offsets is not None:
        rounded = (counts + BLOCKSCALE_ALIGN - 1) // BLOCKSCALE_ALIGN * BLOCKSCALE_ALIGN
        blockscale_offsets[0] = 0
        blockscale_offsets[1:].copy_(torch.cumsum(rounded, 0))
    c = counts.to(torch.int32)
    problem_sizes1[:, 0] = c
    problem_sizes1[:, 1] = 2 * n
    problem_sizes1[:, 2] = k
    problem_sizes2[:, 0] = c
    problem_sizes2[:, 1] = k
    problem_sizes2[:, 2] = n
    order = torch.argsort(key, stable=True)  # flat indices by expert, ascending inside; dropped last
    slot = torch.arange(numel, dtype=torch.int32, device=dev)
    input_permutation.copy_(torch.where(key[order] < E, (order // topk).to(torch.int32), -1))
    output_permutation.scatter_(0, order, torch.where(key[order] < E, slot, -1))
