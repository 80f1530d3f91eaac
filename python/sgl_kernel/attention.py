# SPDX-License-Identifier: Apache-2.0
"""Attention family (API.md 2.5): merging partial attention states (split-KV, cascade and
chunked-prefix attention combine their pieces with these), and the decode step of lightning
(linear) attention."""

from __future__ import annotations

from typing import Callable, Dict, Optional, Tuple

import torch

__all__ = ["merge_state", "merge_state_v2", "lightning_attention_decode"]

FAMILY = "attention"
# op name -> lowest arch with a kernel (API.md)
OPS = {
    "merge_state": 80,
    "merge_state_v2": 80,
    "lightning_attention_decode": 80,
}

_merge_state = torch.ops.sgl_kernel.merge_state.default
_merge_state_v2 = torch.ops.sgl_kernel.merge_state_v2.default
_lightning_attention_decode = torch.ops.sgl_kernel.lightning_attention_decode.default


def _merge(op, v_a, s_a, v_b, s_b, v_merged, s_merged) -> Tuple[torch.Tensor, torch.Tensor]:
    s_a = s_a.to(torch.float32)
    s_b = s_b.to(torch.float32)
    if v_merged is None:
        v_merged = torch.empty_like(v_a)
    if s_merged is None:
        s_merged = torch.empty_like(s_a)
    op(v_a, s_a, v_b, s_b, v_merged, s_merged)
    return v_merged, s_merged


def merge_state(
    v_a: torch.Tensor,
    s_a: torch.Tensor,
    v_b: torch.Tensor,
    s_b: torch.Tensor,
    v_merged: Optional[torch.Tensor] = None,
    s_merged: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Merge two partial attention states whose log-sum-exps are in **base 2**.

    Per token and head: ``m = max(s_a, s_b)``, ``alpha = 2^(s_a - m)``, ``beta = 2^(s_b - m)``,
    ``v = (alpha v_a + beta v_b) / (alpha + beta)``, ``s = m + log2(alpha + beta)``, in fp32,
    ``v`` rounded once. Two empty states (both ``-inf``) merge to ``v = 0``, ``s = -inf``.

    Parameters
    ----------
    v_a, v_b : torch.Tensor
        ``[T, H, D]`` fp16/bf16, contiguous; ``D`` a multiple of 8, at most 256.
    s_a, s_b : torch.Tensor
        ``[T, H]``; converted to fp32 (``.to(torch.float32)``), contiguous.
    v_merged : torch.Tensor, optional
        ``[T, H, D]``, dtype of ``v_a``, written; allocated when ``None``.
    s_merged : torch.Tensor, optional
        fp32 ``[T, H]``, written; allocated when ``None``.

    Returns
    -------
    (v_merged, s_merged)

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable.
    """
    return _merge(_merge_state, v_a, s_a, v_b, s_b, v_merged, s_merged)


def merge_state_v2(
    v_a: torch.Tensor,
    s_a: torch.Tensor,
    v_b: torch.Tensor,
    s_b: torch.Tensor,
    v_merged: Optional[torch.Tensor] = None,
    s_merged: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    r"""Merge two partial attention states whose log-sum-exps are **natural** (``e``, ``ln``).

    As :func:`merge_state` with ``e^x`` and ``ln``; an input log-sum-exp of ``+inf`` is read
    as ``-inf`` (an empty state). Two empty states merge to ``v = 0``, ``s = -inf``.

    Parameters
    ----------
    v_a, v_b : torch.Tensor
        ``[T, H, D]`` fp16/bf16/fp32, contiguous; ``D`` a multiple of 8, at most 256.
    s_a, s_b : torch.Tensor
        ``[T, H]``; converted to fp32 (``.to(torch.float32)``), contiguous.
    v_merged : torch.Tensor, optional
        ``[T, H, D]``, dtype of ``v_a``, written; allocated when ``None``.
    s_merged : torch.Tensor, optional
        fp32 ``[T, H]``, written; allocated when ``None``.

    Returns
    -------
    (v_merged, s_merged)

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable.
    """
    return _merge(_merge_state_v2, v_a, s_a, v_b, s_b, v_merged, s_merged)


def lightning_attention_decode(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    past_kv: torch.Tensor,
    slope: torch.Tensor,
    output: torch.Tensor,
    new_kv: torch.Tensor,
) -> None:
    r"""One decode step of linear attention with exponential decay (MiniMax lightning
    attention; legacy, removed from recent sgl-kernel).

    Per batch ``b`` and head ``h``, in fp32: ``ratio = exp(-slope[h])``,
    ``new_kv[b, h] = ratio * past_kv[b, h] + outer(k[b, h, 0], v[b, h, 0])`` and
    ``output[b, h, 0] = q[b, h, 0] @ new_kv[b, h]``, rounded once to ``output.dtype``.

    Parameters
    ----------
    q, k : torch.Tensor
        ``[b, h, 1, d]`` fp32/fp16/bf16, contiguous.
    v : torch.Tensor
        ``[b, h, 1, e]``, dtype of ``q``, contiguous.
    past_kv : torch.Tensor
        fp32 ``[b, h, d, e]``, contiguous: the state before this token.
    slope : torch.Tensor
        fp32 ``[h, 1, 1]`` (any shape of ``h`` elements), contiguous: the decay rates.
    output : torch.Tensor
        ``[b, h, 1, e]``, dtype of ``q``, contiguous, written.
    new_kv : torch.Tensor
        fp32 ``[b, h, d, e]``, contiguous, written; may be ``past_kv`` itself (an in-place
        update), but no other tensor's memory.

    Notes
    -----
    Arch: sm80+. CUDA-graph capturable.
    """
    _lightning_attention_decode(q, k, v, past_kv, slope, output, new_kv)


def self_checks() -> Dict[str, Callable[[], None]]:
    """Small end-to-end checks for ``python -m sgl_kernel`` against torch."""

    def check(natural: bool) -> None:
        t, h, d = 13, 8, 128
        v_a = torch.randn(t, h, d, device="cuda", dtype=torch.bfloat16)
        v_b = torch.randn(t, h, d, device="cuda", dtype=torch.bfloat16)
        s_a = torch.randn(t, h, device="cuda") * 4
        s_b = torch.randn(t, h, device="cuda") * 4
        fn = merge_state_v2 if natural else merge_state
        v, s = fn(v_a, s_a, v_b, s_b)
        sa, sb = (s_a, s_b) if natural else (s_a * 0.6931471805599453, s_b * 0.6931471805599453)
        ref_s = torch.logaddexp(sa, sb)
        wa = torch.exp(sa - ref_s).unsqueeze(-1)
        wb = torch.exp(sb - ref_s).unsqueeze(-1)
        ref_v = wa * v_a.float() + wb * v_b.float()
        torch.testing.assert_close(v.float(), ref_v, rtol=2e-2, atol=2e-2)
        torch.testing.assert_close(s, ref_s if natural else ref_s / 0.6931471805599453, rtol=1e-5, atol=1e-5)

    def check_lightning() -> None:
        b, h, d, e = 3, 8, 64, 96
        q, k = (torch.randn(b, h, 1, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
        v = torch.randn(b, h, 1, e, device="cuda", dtype=torch.bfloat16)
        past = torch.randn(b, h, d, e, device="cuda")
        slope = torch.rand(h, 1, 1, device="cuda")
        out = torch.empty_like(v)
        new = torch.empty_like(past)
        lightning_attention_decode(q, k, v, past, slope, out, new)
        ref_kv = torch.exp(-slope.double()) * past.double() + k.double().transpose(-1, -2) @ v.double()
        ref_out = q.double() @ ref_kv
        torch.testing.assert_close(new.double(), ref_kv, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(out.double(), ref_out, rtol=2e-2, atol=2e-2 * float(ref_out.abs().max()))

    return {
        "lightning_attention_decode": check_lightning,
        "merge_state": lambda: check(False),
        "merge_state_v2": lambda: check(True),
    }
