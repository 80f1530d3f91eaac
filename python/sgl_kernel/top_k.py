# SPDX-License-Identifier: Apache-2.0
"""Top-k family: the 2048-of-L selection of sparse-attention indexers (DeepSeek V3.2), alone or
fused with the page-table gather / ragged offset that follows it in a serving engine."""

from __future__ import annotations

from typing import Callable, Dict, Optional

import torch

from sgl_kernel.utils import _assert

__all__ = [
    "fast_topk",
    "fast_topk_v2",
    "fast_topk_transform_fused",
    "fast_topk_transform_ragged_fused",
]

FAMILY = "top_k"
# op name -> lowest arch with a kernel (API.md); the Python fast_topk is pure torch (no op)
OPS = {
    "fast_topk": 80,
    "fast_topk_transform_fused": 80,
    "fast_topk_transform_ragged_fused": 80,
}

TOPK = 2048  # the only k the kernels select

_fast_topk = torch.ops.sgl_kernel.fast_topk.default
_fast_topk_transform_fused = torch.ops.sgl_kernel.fast_topk_transform_fused.default
_fast_topk_transform_ragged_fused = torch.ops.sgl_kernel.fast_topk_transform_ragged_fused.default

_SELECTION_NOTES = """
    Selection, per row ``b``: ``s = row_starts[b]`` (0 when ``row_starts`` is ``None``),
    ``n = lengths[b]``, window ``w = score[b, s : s + n]``. If ``n <= 2048`` the row's
    positions are ``0, 1, ..., n-1`` followed by ``-1``; otherwise they are the positions,
    relative to ``s`` (in ``[0, n)``), of the 2048 largest values of ``w``.

    - Order: ascending position (the API leaves it unspecified; do not rely on it).
    - Ties at the threshold value: the lowest positions win. The result is deterministic.
    - NaN ranks below every number (``-inf`` included): a NaN is selected only when the
      window has fewer than 2048 other values. ``-0.0`` and ``+0.0`` rank equal.
    - The window must satisfy ``0 <= s``, ``0 <= n`` and ``s + n <= L``. A window outside
      ``score`` breaks that contract; the kernel then clamps it to ``[max(s, 0), L)`` and never
      reads outside ``score``. With ``SGL_KERNEL_DEBUG=1`` the op raises ``RuntimeError``
      instead (it synchronises to read the flag).

    One CUDA block per row; on sm90+, when the rows are few and long (at most half as many
    rows as SMs, L >= 16384), a thread-block cluster of 2-8 blocks shares each row, with the
    same output bit for bit (``SGL_KERNEL_TOPK_CLUSTER=1|2|4|8`` forces a size). Shared memory
    per block: ~113 KiB on sm90/sm100 (two blocks per SM), ~81 KiB on sm80, ~49 KiB on
    sm86/sm89/sm120; a device with less than ~25 KiB per block raises ``RuntimeError``.
    Arch: sm80+. CUDA-graph capturable; no host sync.
"""


def fast_topk(values: torch.Tensor, topk: int, dim: int):
    r"""``torch.max(values, dim=dim, keepdim=True)`` when ``topk == 1``, else
    ``torch.topk(values, topk, dim=dim)``: a ``(values, indices)`` pair.

    Pure PyTorch (no sgl_kernel op; ``torch.ops.sgl_kernel.fast_topk`` is the kernel behind
    :func:`fast_topk_v2`).
    """
    if topk == 1:
        return torch.max(values, dim=dim, keepdim=True)
    return torch.topk(values, topk, dim=dim)


def _check_wrapper(name: str, topk: int) -> None:
    _assert(topk == TOPK, f"sgl_kernel.{name}: topk must be {TOPK} (the only k the kernel selects), got {topk}")


def _new_indices(score: torch.Tensor, topk: int) -> torch.Tensor:
    rows = score.shape[0] if score.dim() > 0 else 0  # the op reports a wrong rank
    return torch.empty((rows, topk), dtype=torch.int32, device=score.device)


def fast_topk_v2(
    score: torch.Tensor,
    lengths: torch.Tensor,
    topk: int,
    row_starts: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    r"""Positions of the 2048 largest scores of each row's window.

    Parameters
    ----------
    score : torch.Tensor
        ``[B, L]`` fp32, ``stride(1) == 1``; the row stride is free.
    lengths : torch.Tensor
        ``[B]`` int32, contiguous: window length ``n`` per row.
    topk : int
        Must be 2048 (``AssertionError`` otherwise).
    row_starts : Optional[torch.Tensor]
        ``[B]`` int32 (any stride): window start ``s`` per row; ``None`` means 0.

    Returns
    -------
    torch.Tensor
        New ``[B, 2048]`` int32 tensor (the op's ``indices``, written).

    Notes
    -----
"""
    _check_wrapper("fast_topk_v2", topk)
    _assert(score.dim() == 2, f"sgl_kernel.fast_topk_v2: score must be 2-D [B, L], got shape {tuple(score.shape)}")
    indices = _new_indices(score, topk)
    _fast_topk(score, indices, lengths, row_starts)
    return indices


def fast_topk_transform_fused(
    score: torch.Tensor,
    lengths: torch.Tensor,
    page_table_size_1: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    topk: int,
    row_starts: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    r"""Top-2048 selection fused with the page-table gather (page size 1).

    With ``idx`` the positions :func:`fast_topk_v2` selects for row ``b`` and ``r`` the
    request of row ``b`` (``cu_seqlens_q[r] <= b < cu_seqlens_q[r + 1]``; ``r = b`` when
    ``row_starts is None`` and ``R == B``):
    ``dst[b, i] = page_table_size_1[r, idx[i]]`` where ``idx[i] >= 0``, else ``-1``.

    Parameters
    ----------
    score, lengths, row_starts
        As in :func:`fast_topk_v2`.
    page_table_size_1 : torch.Tensor
        ``[R, P]`` int32, ``stride(1) == 1`` (the op's ``src_page_table``).
    cu_seqlens_q : torch.Tensor
        ``[R + 1]`` int32, contiguous, ``R <= B``, ``cu_seqlens_q[R] == B``.
    topk : int
        Must be 2048 (``AssertionError`` otherwise).

    Returns
    -------
    torch.Tensor
        New ``[B, 2048]`` int32 tensor (the op's ``dst_page_table``, written).

    Notes
    -----
    Index values are not validated on the host: a selected position ``>= P`` gives ``-1``, and
    a row that lies in no request gives a row of ``-1`` (with ``SGL_KERNEL_DEBUG=1`` both
    raise).
"""
    _check_wrapper("fast_topk_transform_fused", topk)
    dst = _new_indices(score, topk)
    _fast_topk_transform_fused(score, lengths, dst, page_table_size_1, cu_seqlens_q, row_starts)
    return dst


def fast_topk_transform_ragged_fused(
    score: torch.Tensor,
    lengths: torch.Tensor,
    topk_indices_offset: torch.Tensor,
    topk: int,
    row_starts: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    r"""Top-2048 selection fused with a per-row offset into a ragged KV layout:
    ``out[b, i] = idx[i] + topk_indices_offset[b]`` where ``idx[i] >= 0``, else ``-1``
    (``idx`` as in :func:`fast_topk_v2`; the sum wraps in int32).

    Parameters
    ----------
    score, lengths, row_starts
        As in :func:`fast_topk_v2`.
    topk_indices_offset : torch.Tensor
        ``[B]`` int32 (any stride).
    topk : int
        Must be 2048 (``AssertionError`` otherwise).

    Returns
    -------
    torch.Tensor
        New ``[B, 2048]`` int32 tensor (the op's ``topk_indices_ragged``, written).

    Notes
    -----
"""
    _check_wrapper("fast_topk_transform_ragged_fused", topk)
    out = _new_indices(score, topk)
    _fast_topk_transform_ragged_fused(score, lengths, out, topk_indices_offset, row_starts)
    return out


for _fn in (fast_topk_v2, fast_topk_transform_fused, fast_topk_transform_ragged_fused):
    if _fn.__doc__:  # None under python -OO
        _fn.__doc__ += _SELECTION_NOTES


# ---------------------------------------------------------------------------------------
# One-shot self checks for `python -m sgl_kernel`: random windows against torch.topk.


def _self_check_inputs():
    torch.manual_seed(0)
    lengths = torch.tensor([0, 1, 2048, 2049, 5000, 9000], dtype=torch.int32, device="cuda")
    starts = torch.tensor([3, 0, 7, 1, 2, 0], dtype=torch.int32, device="cuda")
    score = torch.randn(lengths.numel(), 9001, device="cuda")
    return score, lengths, starts


def _expected_positions(score, lengths, starts) -> list:
    rows = []
    for b in range(score.shape[0]):
        s, n = int(starts[b]), int(lengths[b])
        if n <= TOPK:
            rows.append(set(range(n)))
        else:
            rows.append(set(torch.topk(score[b, s : s + n], TOPK).indices.tolist()))
    return rows


def _check_v2() -> None:
    score, lengths, starts = _self_check_inputs()
    out = fast_topk_v2(score, lengths, TOPK, starts)
    for b, want in enumerate(_expected_positions(score, lengths, starts)):
        got = out[b].tolist()
        assert set(got) - {-1} == want, f"row {b}: wrong index set"
        assert got.count(-1) == TOPK - len(want), f"row {b}: wrong number of -1"


def _check_transform() -> None:
    score, lengths, starts = _self_check_inputs()
    idx = fast_topk_v2(score, lengths, TOPK, starts)
    table = torch.randperm(2 * 9001, device="cuda", dtype=torch.int32)[:9001].repeat(2, 1)
    cu = torch.tensor([0, 4, 6], dtype=torch.int32, device="cuda")
    dst = fast_topk_transform_fused(score, lengths, table, cu, TOPK, starts)
    expected = torch.where(idx >= 0, table[0][idx.clamp(min=0).long()], -1)
    assert torch.equal(dst, expected), "page-table gather differs from fast_topk_v2 + gather"


def _check_ragged() -> None:
    score, lengths, starts = _self_check_inputs()
    idx = fast_topk_v2(score, lengths, TOPK, starts)
    offset = torch.arange(score.shape[0], dtype=torch.int32, device="cuda") * 100000
    out = fast_topk_transform_ragged_fused(score, lengths, offset, TOPK, starts)
    assert torch.equal(out, torch.where(idx >= 0, idx + offset[:, None], -1)), "ragged offset differs"


def self_checks() -> Dict[str, Callable[[], None]]:
    return {
        "fast_topk": _check_v2,
        "fast_topk_transform_fused": _check_transform,
        "fast_topk_transform_ragged_fused": _check_ragged,
    }
