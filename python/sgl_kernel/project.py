# SPDX-License-Identifier: Apache-2.0
"""Project ops that are not in sgl-kernel (API.md section 3)."""

from __future__ import annotations

import operator
from typing import Callable, Dict, Optional, Tuple

import torch

__all__ = ["custom_relu", "fused_add_relu", "embedding_lookup", "fast_compare_key"]

FAMILY = "project"
# op name -> lowest arch with a kernel (API.md); 0: CPU op
OPS = {"custom_relu": 80, "fused_add_relu": 80, "embedding_lookup": 80, "fast_compare_key": 0}

_custom_relu = torch.ops.sgl_kernel.custom_relu.default
_fused_add_relu = torch.ops.sgl_kernel.fused_add_relu.default
_embedding_lookup = torch.ops.sgl_kernel.embedding_lookup.default
_fast_compare_key = torch.ops.sgl_kernel.fast_compare_key.default


@torch.library.register_fake("sgl_kernel::custom_relu")
def _custom_relu_fake(input: torch.Tensor) -> torch.Tensor:
    return torch.empty(input.shape, dtype=input.dtype, device=input.device)


@torch.library.register_fake("sgl_kernel::fused_add_relu")
def _fused_add_relu_fake(input: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    return torch.empty(input.shape, dtype=input.dtype, device=input.device)



def custom_relu(input: torch.Tensor) -> torch.Tensor:
    r"""``out = max(input, 0)``, equal to ``torch.relu(input)`` (NaN propagates).

    Parameters
    ----------
    input : torch.Tensor
        Any shape, any strides; fp32/fp16/bf16; CUDA.

    Returns
    -------
    torch.Tensor
        New contiguous tensor, shape and dtype of ``input``.

    Notes
    -----
    Arch: sm80+.
    """
    return _custom_relu(input)


def fused_add_relu(input: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
    r"""``out = max(input + bias, 0)`` with the sum in fp32 and one rounding.

    Parameters
    ----------
    input : torch.Tensor
        Any shape with at least one dimension, any strides; fp32/fp16/bf16; CUDA.
    bias : torch.Tensor
        ``[input.shape[-1]]``, same dtype, contiguous; broadcast over the leading dims.

    Returns
    -------
    torch.Tensor
        New contiguous tensor, shape and dtype of ``input``.

    Notes
    -----
    Arch: sm80+.
    """
    return _fused_add_relu(input, bias)


def _vocab_range(vocab_range: Optional[Tuple[int, int]]) -> Tuple[int, int]:
    if vocab_range is None:
        return 0, -1
    try:
        start, length = vocab_range
        start, length = operator.index(start), operator.index(length)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"sgl_kernel.embedding_lookup: vocab_range must be None or a pair (start, length) of ints, got {vocab_range!r}"
        ) from exc
    if start < 0 or length <= 0:
        raise ValueError(
            f"sgl_kernel.embedding_lookup: vocab_range must have start >= 0 and length > 0, got ({start}, {length})"
        )
    return start, length


def embedding_lookup(
    weight: torch.Tensor,
    indices: torch.Tensor,
    *,
    vocab_range: Optional[Tuple[int, int]] = None,
    out: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    r"""Embedding gather: ``out[...] = weight[indices[...]]``, optionally for one vocab shard.

    Plain gather (``vocab_range=None``): ``out[s] = weight[indices[s]]``. Indices must lie in
    ``[0, V)``; they are not checked on the host (that would need a sync). An index outside
    it (negative ones included) gives a row of zeros and never reads outside ``weight``;
    with ``SGL_KERNEL_DEBUG=1`` it raises ``RuntimeError`` instead (the op syncs then, and
    skips the check while a CUDA graph is being captured).

    Vocab-parallel (``vocab_range=(start, length)``, ``weight`` holding rows
    ``start .. start + length - 1`` of the full vocabulary, possibly padded beyond ``length``):
    ``out[s] = weight[indices[s] - start]`` if ``start <= indices[s] < start + length``, else a
    row of zeros, so the sum over all shards (an all-reduce) is the full embedding.

    Parameters
    ----------
    weight : torch.Tensor
        ``[V, D]``, fp32/fp16/bf16, CUDA; last dim contiguous, row stride free.
    indices : torch.Tensor
        Any shape ``S``, int32/int64, any strides, on ``weight``'s device.
    vocab_range : Optional[Tuple[int, int]]
        ``None`` or ``(start, length)`` with ``start >= 0`` and ``0 < length <= V``
        (``ValueError`` for a malformed pair, ``RuntimeError`` for ``length > V``).
    out : Optional[torch.Tensor]
        ``S + (D,)``, ``weight.dtype``, contiguous. Written. Allocated when ``None``.

    Returns
    -------
    torch.Tensor
        ``out``.

    Notes
    -----
    Arch: sm80+. A byte copy of rows (results are exact). On sm90+ the kernel uses
    programmatic dependent launch. CUDA-graph capturable.
    """
    start, length = _vocab_range(vocab_range)
    if out is None:
        d = weight.shape[-1] if weight.dim() > 0 else 1
        out = torch.empty((*indices.shape, d), dtype=weight.dtype, device=weight.device)
    _embedding_lookup(out, weight, indices, start, length)
    return out


def fast_compare_key(x: torch.Tensor, y: torch.Tensor) -> int:
    r"""Length of the common prefix of two token sequences.

    Returns the first ``i`` with ``x[i] != y[i]``, or ``min(len(x), len(y))`` when none
    differs. Used by radix prefix caches to match token sequences.

    Parameters
    ----------
    x, y : torch.Tensor
        1-D CPU tensors of one dtype, int32 or int64, any stride (contiguous is the fast
        path). CUDA, non-1-D or mixed-dtype inputs raise ``RuntimeError``.

    Returns
    -------
    int

    Notes
    -----
    CPU op: works without a GPU; never touches CUDA.
    """
    return _fast_compare_key(x, y)


def self_checks() -> Dict[str, Callable[[], None]]:
    def check_relu() -> None:
        x = torch.randn(33, 130, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(custom_relu(x), torch.relu(x), rtol=0, atol=0)

    def check_add_relu() -> None:
        x = torch.randn(33, 130, device="cuda", dtype=torch.float16)
        b = torch.randn(130, device="cuda", dtype=torch.float16)
        torch.testing.assert_close(fused_add_relu(x, b), torch.relu(x.float() + b.float()).half(), rtol=1e-3, atol=1e-3)

    def check_embedding_lookup() -> None:
        weight = torch.randn(1000, 264, device="cuda", dtype=torch.bfloat16)
        indices = torch.randint(0, 1000, (5, 7), device="cuda")
        torch.testing.assert_close(embedding_lookup(weight, indices), weight[indices], rtol=0, atol=0)
        shard = embedding_lookup(weight, indices, vocab_range=(200, 500))
        inside = ((indices >= 200) & (indices < 700)).unsqueeze(-1)
        expected = torch.where(inside, weight[(indices - 200).clamp(0, 999)], torch.zeros_like(shard))
        torch.testing.assert_close(shard, expected, rtol=0, atol=0)

    def check_fast_compare_key() -> None:
        x = torch.arange(300, dtype=torch.int64)
        y = x.clone()
        y[123] = -1
        if fast_compare_key(x, y) != 123 or fast_compare_key(x[::2], x[::2]) != 150:
            raise AssertionError("fast_compare_key: wrong common prefix length")

    return {
        "custom_relu": check_relu,
        "fused_add_relu": check_add_relu,
        "embedding_lookup": check_embedding_lookup,
        "fast_compare_key": check_fast_compare_key,
    }
