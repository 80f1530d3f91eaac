# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of the top-k family (API.md 2.1.5), shared by tests and benchmarks.

``topk_ref`` is the exact reference (the kernel's order: NaN lowest, -0.0 == +0.0; ties by
lowest position); ``check_topk`` applies the API's acceptance rule (1.6: the same index set up
to ties, i.e. the same multiset of selected values); ``topk_torch`` is what a serving engine
runs without the kernel (masked ``torch.topk`` plus the index fix-ups), the benchmark
baseline.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

TOPK = 2048
_LOW31 = (1 << 31) - 1


def order_key(score: torch.Tensor) -> torch.Tensor:
    """int64 key of each fp32 score with the kernel's order: a larger float has a larger key,
    NaN is below -inf (key 0), -0.0 and +0.0 are equal."""
    bits = score.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    bits = torch.where(bits == 0x80000000, torch.zeros_like(bits), bits)
    key = torch.where(bits >= 0x80000000, 0xFFFFFFFF - bits, bits | 0x80000000)
    return torch.where(torch.isnan(score), torch.zeros_like(key), key)


def windows(
    score: torch.Tensor, lengths: torch.Tensor, row_starts: Optional[torch.Tensor]
) -> Tuple[torch.Tensor, torch.Tensor]:
    """(s, n) per row as int64, clamped to [0, L) the way the kernel clamps a window that
    breaks the contract (valid windows are unchanged)."""
    L = score.shape[1]
    s = row_starts.to(torch.int64) if row_starts is not None else torch.zeros_like(lengths, dtype=torch.int64)
    s = s.clamp(0, L)
    n = torch.minimum(lengths.to(torch.int64).clamp(min=0), L - s)
    return s, n


def topk_ref(score: torch.Tensor, lengths: torch.Tensor, row_starts: Optional[torch.Tensor] = None) -> torch.Tensor:
    """int64 [B, 2048]: per row, 0..n-1 then -1 when n <= 2048, else the positions (relative
    to s) of the 2048 largest keys of the window, ties by lowest position, in descending
    key order."""
    B, L = score.shape
    s, n = windows(score, lengths, row_starts)
    out = torch.full((B, TOPK), -1, dtype=torch.int64, device=score.device)
    slot = torch.arange(TOPK, device=score.device)
    short = n <= TOPK
    out = torch.where(short[:, None] & (slot[None, :] < n[:, None]), slot[None, :].expand(B, TOPK), out)
    if L > TOPK and bool((~short).any()):
        rel = torch.arange(L, device=score.device)[None, :] - s[:, None]
        inside = (rel >= 0) & (rel < n[:, None])
        # key in the high bits, (2^31 - 1 - position) below: ties go to the lowest position
        combined = (order_key(score) << 31) | (_LOW31 - rel.clamp(0, _LOW31))
        combined = torch.where(inside, combined, torch.full_like(combined, -1))
        top = torch.topk(combined, TOPK, dim=1).values
        pos = _LOW31 - (top & _LOW31)
        out = torch.where(short[:, None], out, pos)
    return out


def check_topk(
    score: torch.Tensor, lengths: torch.Tensor, row_starts: Optional[torch.Tensor], out: torch.Tensor
) -> Optional[str]:
    """None if ``out`` (int32 [B, 2048]) satisfies API.md 2.1.5 under 1.6, else what is
    wrong: short rows exactly 0..n-1 then -1; long rows 2048 distinct positions in [0, n)
    whose multiset of values (as order keys) equals that of the reference."""
    B = score.shape[0]
    if out.dtype != torch.int32 or tuple(out.shape) != (B, TOPK):
        return f"output {tuple(out.shape)} {out.dtype}, expected {(B, TOPK)} torch.int32"
    s, n = windows(score, lengths, row_starts)
    ref = topk_ref(score, lengths, row_starts)
    got = out.to(torch.int64)
    short = n <= TOPK
    bad_short = short & (got != ref).any(dim=1)
    if bool(bad_short.any()):
        b = int(bad_short.nonzero()[0])
        return f"row {b} (n={int(n[b])} <= {TOPK}): expected 0..n-1 then -1, got {got[b, :8].tolist()}..."
    long_rows = (~short).nonzero().flatten()
    if long_rows.numel() == 0:
        return None
    g, r = got[long_rows], ref[long_rows]
    nl, sl = n[long_rows], s[long_rows]
    in_range = (g >= 0) & (g < nl[:, None])
    if not bool(in_range.all()):
        i = int((~in_range.all(dim=1)).nonzero()[0])
        return f"row {int(long_rows[i])}: position outside [0, {int(nl[i])}): {g[i][~in_range[i]][:8].tolist()}"
    sorted_pos = g.sort(dim=1).values
    dup = (sorted_pos[:, 1:] == sorted_pos[:, :-1]).any(dim=1)
    if bool(dup.any()):
        return f"row {int(long_rows[int(dup.nonzero()[0])])}: repeated positions"
    keys = order_key(score)[long_rows]
    got_keys = keys.gather(1, g + sl[:, None]).sort(dim=1).values
    ref_keys = keys.gather(1, r + sl[:, None]).sort(dim=1).values
    differ = (got_keys != ref_keys).any(dim=1)
    if bool(differ.any()):
        i = int(differ.nonzero()[0])
        return (f"row {int(long_rows[i])} (n={int(nl[i])}): the selected values differ from torch's top-{TOPK} "
                f"({int((got_keys[i] != ref_keys[i]).sum())} of {TOPK} sorted keys)")
    return None


def request_of_rows(cu_seqlens_q: torch.Tensor, rows: int, row_is_request: bool) -> torch.Tensor:
    """int64 [B]: request r of each row (cu_seqlens_q[r] <= b < cu_seqlens_q[r + 1]), -1 if none."""
    device = cu_seqlens_q.device
    b = torch.arange(rows, device=device)
    requests = cu_seqlens_q.numel() - 1
    if row_is_request:
        return torch.where(b < requests, b, -1)
    cu = cu_seqlens_q.to(torch.int64)
    r = torch.searchsorted(cu, b, right=True) - 1  # last r with cu[r] <= b
    ok = (r >= 0) & (r < requests)
    ok &= b < cu[(r + 1).clamp(0, requests)]
    return torch.where(ok, r, -1)


def page_table_ref(
    idx: torch.Tensor, page_table: torch.Tensor, cu_seqlens_q: torch.Tensor, row_is_request: bool
) -> torch.Tensor:
    """int32: dst[b, i] = page_table[r, idx[b, i]] where idx >= 0 (and r, idx in range), else -1."""
    r = request_of_rows(cu_seqlens_q, idx.shape[0], row_is_request)
    P = page_table.shape[1]
    ok = (idx >= 0) & (idx < P) & (r[:, None] >= 0)
    if page_table.shape[0] == 0 or P == 0:
        return torch.full_like(idx, -1, dtype=torch.int32)
    vals = page_table[r.clamp(min=0)[:, None], idx.clamp(0, P - 1).long()]
    return torch.where(ok, vals, torch.full_like(vals, -1)).to(torch.int32)


def ragged_ref(idx: torch.Tensor, offset: torch.Tensor) -> torch.Tensor:
    """int32: out[b, i] = idx[b, i] + offset[b] where idx >= 0, else -1."""
    out = idx.to(torch.int64) + offset.to(torch.int64)[:, None]
    out = ((out + 2**31) % 2**32) - 2**31  # int32 wrap-around, as the kernel
    return torch.where(idx >= 0, out, torch.full_like(out, -1)).to(torch.int32)


def topk_torch(score: torch.Tensor, lengths: torch.Tensor, row_starts: Optional[torch.Tensor] = None) -> torch.Tensor:
    """What an engine runs instead of the kernel (and what torch.compile compiles): mask the
    scores outside each window to -inf, ``torch.topk(..., sorted=False)``, shift the
    positions to the window start, and write 0..n-1 / -1 for rows with n <= 2048. Needs
    L >= 2048; int32 [B, 2048]."""
    B, L = score.shape
    pos = torch.arange(L, device=score.device, dtype=torch.int32)
    s = row_starts if row_starts is not None else torch.zeros_like(lengths)
    rel = pos[None, :] - s[:, None]
    inside = (rel >= 0) & (rel < lengths[:, None])
    masked = score.masked_fill(~inside, float("-inf"))
    idx = torch.topk(masked, TOPK, dim=1, sorted=False).indices.to(torch.int32) - s[:, None]
    slot = torch.arange(TOPK, device=score.device, dtype=torch.int32)
    short = torch.where(slot[None, :] < lengths[:, None], slot[None, :], -1)
    return torch.where((lengths <= TOPK)[:, None], short, idx)
