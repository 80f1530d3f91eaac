# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of moe_fused_gate / kimi_k2_moe_fused_gate (API.md 2.4), shared by the
tests and the benchmark.

``fused_gate_ref`` is the exact reference in fp64 with the kernel's rules (csrc/moe/fused_gate.cu):
``s = sigmoid(input)``, ``b = s + bias``; group score = the sum of the two largest ``b`` of a
group (the single ``b`` when a group has one expert; a NaN ``b`` counts as -inf there); the
``topk_group`` best groups are kept (ties -> lower group; a NaN score ranks last); ``kr = topk -
num_shared`` kept experts by ``b`` (ties -> lower index; NaN below every number) in descending
order; weights ``s``, ``S`` their sum, shared experts ``E + j`` with weight ``S / factor``,
renormalize divides by ``S``, scale_output multiplies by the factor. It also says, per token,
whether its decisions are *robust*: every comparison that decides the ids (the group boundary,
and each consecutive pair of the first kr + 1 kept experts) is an exact tie or a gap larger
than the kernel's fp32 error, so the kernel must reproduce the ids exactly.

``biased_grouped_topk_torch`` and ``kimi_k2_gate_torch`` are what a serving engine runs without
the kernel (SGLang's ``biased_grouped_topk`` written in torch: sigmoid, group view, ``topk(2)``
sum, group ``topk``, ``masked_fill``, ``topk``, ``gather``): the benchmark baselines.
"""

from __future__ import annotations

from typing import NamedTuple, Optional

import torch

# The kernel's b is off its exact value by at most ~6e-7 (s through the hardware exp2 and
# reciprocal: relative error ~1e-6 of exp(-x), times s (1 - s) <= 1/4, plus one rounding of
# b); a group score by twice that. Gaps beyond these decide every comparison alike.
GAP_RTOL = 4e-6
GAP_ATOL = 4e-6


class GateRef(NamedTuple):
    weights: torch.Tensor  # float64 [T, topk]
    ids: torch.Tensor  # int64 [T, topk]
    robust: torch.Tensor  # bool [T]: the kernel must reproduce ids exactly
    tied: torch.Tensor  # bool [T]: one of those decisions is an exact tie (decided by index)
    b: torch.Tensor  # float64 [T, E]: s + bias
    s: torch.Tensor  # float64 [T, E]


def _rank(values: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Positions of each row ordered by (valid first, numbers before NaN, value descending, lower
    position first on ties)."""
    v = torch.where(torch.isnan(values), torch.full_like(values, float("-inf")), values)
    cls = torch.where(valid, torch.where(torch.isnan(values), 1, 2), 0)
    order = torch.argsort(v, dim=-1, descending=True, stable=True)  # ties keep position order
    order2 = torch.argsort(cls.gather(-1, order), dim=-1, descending=True, stable=True)
    return order.gather(-1, order2)


def _decided(gap: torch.Tensor, ref: torch.Tensor) -> torch.Tensor:
    """A comparison the kernel decides like the reference: an exact tie (equal inputs) or a gap
    beyond the fp32 error."""
    return (gap == 0) | (gap > GAP_ATOL + GAP_RTOL * ref.abs())


def group_scores(b: torch.Tensor, num_groups: int) -> torch.Tensor:
    """[T, num_groups] sum of each group's two largest b (NaN b as -inf); one expert: its b."""
    t, e = b.shape
    bg = torch.where(torch.isnan(b), torch.full_like(b, float("-inf")), b).view(t, num_groups, e // num_groups)
    if bg.shape[-1] == 1:
        return bg[..., 0]
    return bg.topk(2, dim=-1).values.sum(-1)


def fused_gate_ref(
    x: torch.Tensor,
    bias: torch.Tensor,
    num_groups: int,
    topk_group: int,
    topk: int,
    num_shared: int = 0,
    factor: float = 1.0,
    renormalize: bool = True,
    scale_output: bool = False,
) -> GateRef:
    """The op on ``x`` [T, E] and ``bias`` [E] (any float dtype; computed in fp64)."""
    t, e = x.shape
    g = e // num_groups
    kr = topk - num_shared
    s = torch.sigmoid(x.double())
    b = s + bias.double()[None, :]
    robust = torch.ones(t, dtype=torch.bool, device=x.device)
    tied = torch.zeros(t, dtype=torch.bool, device=x.device)
    if num_groups > 1 and topk_group < num_groups:
        score = group_scores(b, num_groups)
        gorder = _rank(score, torch.ones_like(score, dtype=torch.bool))
        gmask = torch.zeros_like(score, dtype=torch.bool).scatter_(1, gorder[:, :topk_group], True)
        sv = score.gather(1, gorder)
        robust &= _decided(sv[:, topk_group - 1] - sv[:, topk_group], sv[:, topk_group - 1])
        tied |= sv[:, topk_group - 1] == sv[:, topk_group]
    else:
        gmask = torch.ones(t, num_groups, dtype=torch.bool, device=x.device)
    emask = gmask.repeat_interleave(g, dim=1)
    order = _rank(b, emask)
    ids = order[:, :kr]
    n = min(kr + 1, e)
    bv = b.gather(1, order[:, :n])
    kept = emask.gather(1, order[:, :n])
    for i in range(n - 1):
        robust &= _decided(bv[:, i] - bv[:, i + 1], bv[:, i]) | ~kept[:, i + 1]
        tied |= (bv[:, i] == bv[:, i + 1]) & kept[:, i + 1]
    weights = _weights(s.gather(1, ids), num_shared, factor, renormalize, scale_output)
    if num_shared:
        shared = torch.arange(e, e + num_shared, device=x.device)[None, :].expand(t, num_shared)
        ids = torch.cat([ids, shared], dim=1)
    return GateRef(weights, ids, robust, tied, b, s)


def _weights(w: torch.Tensor, num_shared: int, factor: float, renormalize: bool, scale_output: bool) -> torch.Tensor:
    """The weights from the chosen s [T, kr] (fp64, IEEE: a 0 factor gives inf / NaN)."""
    total = w.sum(-1, keepdim=True)
    if num_shared:
        w = torch.cat([w, (total / factor).expand(-1, num_shared)], dim=1)
    if renormalize:
        w = w / total
    if scale_output:
        w = w * factor
    return w


def check_fused_gate(
    weights: torch.Tensor,
    ids: torch.Tensor,
    ref: GateRef,
    num_shared: int = 0,
    factor: float = 1.0,
    renormalize: bool = True,
    scale_output: bool = False,
    min_robust: float = 0.9,
    rtol: float = 2e-5,
    atol: float = 1e-6,
    ties_exact: bool = True,
) -> Optional[str]:
    """None if the kernel's (weights fp32, ids int32) satisfy the op, else what is wrong.

    Every row: routed ids distinct and in [0, E), shared ids E + j, and the weights those ids
    give (in fp64) within rtol / atol (inf and NaN where the reference has them). Robust rows
    (at least ``min_robust`` of them): the ids exactly the reference's; with ``ties_exact`` off
    (for baselines that break exact ties arbitrarily, as ``torch.topk`` does) only the robust
    rows without an exact tie. Rows with a NaN input are held to ids only (``nan_rows_ok``)."""
    t, topk = ref.ids.shape
    e = ref.b.shape[1]
    kr = topk - num_shared
    if weights.dtype != torch.float32 or tuple(weights.shape) != (t, topk):
        return f"weights {tuple(weights.shape)} {weights.dtype}, expected {(t, topk)} torch.float32"
    if ids.dtype != torch.int32 or tuple(ids.shape) != (t, topk):
        return f"ids {tuple(ids.shape)} {ids.dtype}, expected {(t, topk)} torch.int32"
    got = ids.long()
    routed = got[:, :kr]
    bad = ((routed < 0) | (routed >= e)).any(1)
    if kr > 1:
        srt = routed.sort(dim=1).values
        bad |= (srt[:, 1:] == srt[:, :-1]).any(1)
    if num_shared:
        bad |= (got[:, kr:] != ref.ids[:, kr:]).any(1)
    if bool(bad.any()):
        r = int(bad.nonzero()[0])
        return (f"row {r}: ids {got[r].tolist()} not {kr} distinct experts in [0, {e}) + shared "
                f"{ref.ids[r, kr:].tolist()}")
    expected = _weights(ref.s.gather(1, routed), num_shared, factor, renormalize, scale_output)
    try:
        torch.testing.assert_close(weights.double(), expected, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as exc:
        return f"weights of the chosen ids: {str(exc).splitlines()[0]} ({' '.join(str(exc).split())[:300]})"
    robust = ref.robust
    frac = float(robust.float().mean()) if t else 1.0
    if frac < min_robust:
        return f"only {frac:.3f} of the rows are robust (near ties): the test data is too tight"
    if not ties_exact:
        robust = robust & ~ref.tied
    wrong = robust & (got != ref.ids).any(1)
    if bool(wrong.any()):
        r = int(wrong.nonzero()[0])
        return (f"{int(wrong.sum())} robust rows with other ids, first row {r}: got {got[r].tolist()}, "
                f"expected {ref.ids[r].tolist()} (b {ref.b[r, got[r, :kr]].tolist()} vs "
                f"{ref.b[r, ref.ids[r, :kr]].tolist()})")
    return None


def nan_rows_ok(weights: torch.Tensor, ids: torch.Tensor, e: int, kr: int, num_shared: int = 0) -> Optional[str]:
    """Rows with NaN inputs: the ids are kr distinct experts in [0, E) then E + j; weights any."""
    got = ids.long()
    routed = got[:, :kr]
    bad = ((routed < 0) | (routed >= e)).any(1)
    if kr > 1:
        srt = routed.sort(dim=1).values
        bad |= (srt[:, 1:] == srt[:, :-1]).any(1)
    if num_shared:
        bad |= (got[:, kr:] != torch.arange(e, e + num_shared, device=ids.device)[None, :]).any(1)
    if bool(bad.any()):
        r = int(bad.nonzero()[0])
        return f"row {r}: ids {got[r].tolist()}"
    return None


# ---------------------------------------------------------------------------------------------
# What an engine runs without the kernel (benchmark baselines)


def biased_grouped_topk_torch(
    gating_output: torch.Tensor,
    correction_bias: torch.Tensor,
    topk: int,
    renormalize: bool,
    num_expert_group: int,
    topk_group: int,
    num_fused_shared_experts: int = 0,
    routed_scaling_factor: float = 1.0,
    apply_routed_scaling_factor_on_output: bool = False,
):
    """DeepSeek-V3 routing as SGLang writes it in torch (``biased_grouped_topk``), with the fused
    shared experts given ids E + j (SGLang draws them at random for load balance)."""
    scores = gating_output.sigmoid()
    num_token, num_experts = scores.shape
    scores_for_choice = scores.view(num_token, -1) + correction_bias.unsqueeze(0)
    group_scores = scores_for_choice.view(num_token, num_expert_group, -1).topk(2, dim=-1)[0].sum(dim=-1)
    group_idx = torch.topk(group_scores, k=topk_group, dim=-1, sorted=False)[1]
    group_mask = torch.zeros_like(group_scores)
    group_mask.scatter_(1, group_idx, 1)
    score_mask = (
        group_mask.unsqueeze(-1)
        .expand(num_token, num_expert_group, num_experts // num_expert_group)
        .reshape(num_token, -1)
    )
    tmp_scores = scores_for_choice.masked_fill(~score_mask.bool(), float("-inf"))
    routed = topk - num_fused_shared_experts
    _, topk_ids = torch.topk(tmp_scores, k=routed, dim=-1, sorted=True)
    topk_weights = scores.gather(1, topk_ids).float()
    total = topk_weights.sum(dim=-1, keepdim=True)
    if num_fused_shared_experts:
        shared_ids = torch.arange(num_experts, num_experts + num_fused_shared_experts, device=topk_ids.device)
        topk_ids = torch.cat([topk_ids, shared_ids.expand(num_token, -1)], dim=1)
        topk_weights = torch.cat(
            [topk_weights, (total / routed_scaling_factor).expand(-1, num_fused_shared_experts)], dim=1
        )
    if renormalize:
        topk_weights = topk_weights / total
        if apply_routed_scaling_factor_on_output:
            topk_weights = topk_weights * routed_scaling_factor
    return topk_weights, topk_ids.to(torch.int32)


def kimi_k2_gate_torch(
    gating_output: torch.Tensor,
    correction_bias: torch.Tensor,
    topk: int,
    renormalize: bool = True,
    routed_scaling_factor: float = 1.0,
    apply_routed_scaling_factor_on_output: bool = False,
):
    """Kimi-K2 routing in torch (one group): sigmoid, + bias for the choice, topk, gather."""
    scores = gating_output.sigmoid()
    _, topk_ids = torch.topk(scores + correction_bias.unsqueeze(0), k=topk, dim=-1, sorted=True)
    topk_weights = scores.gather(1, topk_ids).float()
    if renormalize:
        topk_weights = topk_weights / topk_weights.sum(dim=-1, keepdim=True)
    if apply_routed_scaling_factor_on_output:
        topk_weights = topk_weights * routed_scaling_factor
    return topk_weights, topk_ids.to(torch.int32)
