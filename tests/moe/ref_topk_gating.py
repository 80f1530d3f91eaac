# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of topk_softmax / topk_sigmoid (API.md 2.4), in fp64 (shared by the
tests and the benchmark).

Per token, with ``x`` the gate row in fp64:

* ``topk_softmax``: ``z = x``; ``z = tanh(z / c) * c`` when ``c = moe_softcapping != 0``;
  ``z = z + bias`` when a bias is given; ``p = softmax(z)``; key ``p``.
* ``topk_sigmoid``: ``p = sigmoid(x)``; key ``p + bias`` (``p`` without a bias).

The k largest keys are taken in descending order, equal keys by ascending expert index, and a
NaN key ranks below every number. The weights are ``p`` of the chosen experts, divided by their
sum with ``renormalize``.

Where the key is a strictly increasing function of one value (softmax: ``z``; sigmoid without a
bias: ``x``), that value is ranked instead (``rank_and_prob``): the same order, without the ties
that rounding ``p`` would make (``p`` underflowing to 0, sigmoid saturating to 1). The kernel
ranks the same values in fp32.

``check_topk`` compares an op's output with this reference allowing for fp32 rounding: where the
op's expert differs from the reference's at an output slot, the two keys must differ (an exact
tie must go to the lower index) by at most ``RANK_MARGIN`` (relative, at least 1 in scale);
the weights are checked against the reference weights *of the experts the op chose*.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

OPS = ("topk_softmax", "topk_sigmoid")

# fp32 rank values against fp64 ones: a few ulp of the value (softcap and sigmoid included).
RANK_MARGIN = 2e-6
# fp32 weights against the fp64 reference of the same experts: expf, the fp32 row sum (over up
# to 65536 terms) and the division, a few ulp each. Softmax adds the fp32 rounding of z (softcap
# and bias: ~2 ulp of |z|) in z - m of the expert and of the maximum: SOFTMAX_Z_RTOL * max |z|.
WEIGHT_RTOL = 2e-5
WEIGHT_ATOL = 1e-7
SOFTMAX_Z_RTOL = 5e-7


def rank_and_prob(gating: torch.Tensor, op: str, softcap: float = 0.0,
                  bias: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(rank, p)``, both fp64 ``[T, E]``: the value whose descending order is the key's order
    (softmax ``z``; sigmoid ``x``, or ``p + bias`` with a bias) and the weight source ``p``."""
    assert op in OPS, op
    x = gating.double()
    if op == "topk_softmax":
        z = x
        if softcap != 0.0:
            z = torch.tanh(z / softcap) * softcap
        if bias is not None:
            z = z + bias.double()
        return z, torch.softmax(z, dim=-1)
    p = torch.sigmoid(x)
    return (p + bias.double() if bias is not None else x), p


def ref_order(rank: torch.Tensor) -> torch.Tensor:
    """int64 ``[T, E]``: each row's experts, best first: descending rank, equal ranks by
    ascending index, NaN after every number (NaNs by ascending index)."""
    nan = torch.isnan(rank)
    # + 0.0 turns -0.0 into +0.0: equal keys, and a radix sort must not see two bit patterns.
    key = torch.where(nan, torch.full_like(rank, float("-inf")), rank) + 0.0
    order = torch.sort(key, dim=-1, descending=True, stable=True).indices
    # A second stable sort puts the NaNs (which sorted among the -infs) after everything.
    nan_last = torch.sort(nan.gather(-1, order).to(torch.int8), dim=-1, stable=True).indices
    return order.gather(-1, nan_last)


def weights_of(p: torch.Tensor, ids: torch.Tensor, renormalize: bool) -> torch.Tensor:
    """fp64 ``[T, k]``: ``p`` of the experts ``ids``, divided by their sum with renormalize."""
    w = p.gather(-1, ids.long())
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return w


def topk_gating_ref(gating: torch.Tensor, k: int, op: str, renormalize: bool = False, softcap: float = 0.0,
                    bias: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(weights fp64 [T, k], ids int64 [T, k])`` of the contract."""
    rank, p = rank_and_prob(gating, op, softcap, bias)
    ids = ref_order(rank)[:, :k]
    return weights_of(p, ids, renormalize), ids


def check_topk(weights: torch.Tensor, ids: torch.Tensor, gating: torch.Tensor, op: str, renormalize: bool = False,
               softcap: float = 0.0, bias: Optional[torch.Tensor] = None) -> Optional[str]:
    """None when the op's ``(weights, ids)`` ``[T, k]`` agree with the reference (see the module
    docstring), else a description of the first problems."""
    t, e = gating.shape
    k = ids.shape[1]
    if ids.shape != (t, k) or weights.shape != (t, k):
        return f"shapes {tuple(weights.shape)} / {tuple(ids.shape)}, expected ({t}, {k})"
    got = ids.long()
    bad = (got < 0) | (got >= e)
    if bool(bad.any()):
        r = int(bad.any(-1).nonzero()[0])
        return f"{int(bad.sum())} ids outside [0, {e}); row {r}: {got[r].tolist()[:16]}"
    if k > 1:
        s = got.sort(dim=-1).values
        dup = (s[:, 1:] == s[:, :-1]).any(-1)
        if bool(dup.any()):
            r = int(dup.nonzero()[0])
            return f"{int(dup.sum())} rows repeat an expert; row {r}: {got[r].tolist()[:16]}"

    rank, p = rank_and_prob(gating, op, softcap, bias)
    exp = ref_order(rank)[:, :k]
    kg, ke = rank.gather(-1, got), rank.gather(-1, exp)
    both_numbers = ~torch.isnan(kg) & ~torch.isnan(ke)
    near = (kg - ke).abs() <= RANK_MARGIN * torch.clamp(ke.abs(), min=1.0)
    ok = (got == exp) | (both_numbers & (kg != ke) & near)
    if not bool(ok.all()):
        r, j = (int(v) for v in (~ok).nonzero()[0])
        return (f"{int((~ok).any(-1).sum())} rows pick other experts than the reference; row {r} slot {j}: "
                f"got {got[r].tolist()[:12]} (rank {kg[r].tolist()[:12]}), expected {exp[r].tolist()[:12]} "
                f"(rank {ke[r].tolist()[:12]})")

    want = weights_of(p, got, renormalize)
    w = weights.double()
    rtol = torch.full((t, 1), WEIGHT_RTOL, dtype=torch.float64, device=w.device)
    if op == "topk_softmax":
        finite = torch.where(torch.isfinite(rank), rank.abs(), torch.zeros_like(rank))
        rtol = rtol + SOFTMAX_Z_RTOL * finite.amax(dim=-1, keepdim=True)
    both_nan = torch.isnan(w) & torch.isnan(want)
    close = (w - want).abs() <= WEIGHT_ATOL + rtol * want.abs()  # False where either is NaN
    good = close | both_nan
    if not bool(good.all()):
        r = int((~good).any(-1).nonzero()[0])
        return (f"{int((~good).sum())} weights differ; row {r}: got {w[r].tolist()[:8]}, expected "
                f"{want[r].tolist()[:8]} (ids {got[r].tolist()[:8]})")
    return None


# What an engine runs instead (SGLang's torch fallback, fused_topk_torch_native), and what the
# benchmark's torch.compile baseline compiles: fp32 scores, torch.topk, optional renormalization.


def topk_gating_torch(gating: torch.Tensor, k: int, op: str, renormalize: bool = False,
                      bias: Optional[torch.Tensor] = None) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(weights fp32 [T, k], ids int64 [T, k])``. Softmax: ``torch.softmax(x.float(), -1)
    .topk(k)`` (a bias is added to the logits first); sigmoid: ``topk`` of ``sigmoid(x) + bias``
    and the sigmoid of the chosen experts. Ties in unspecified order (torch.topk)."""
    x = gating.float()
    if op == "topk_softmax":
        if bias is not None:
            x = x + bias
        w, ids = torch.softmax(x, dim=-1).topk(k, dim=-1)
    else:
        s = torch.sigmoid(x)
        if bias is None:
            w, ids = s.topk(k, dim=-1)
        else:
            ids = (s + bias).topk(k, dim=-1).indices
            w = s.gather(-1, ids)
    if renormalize:
        w = w / w.sum(dim=-1, keepdim=True)
    return w, ids
