# SPDX-License-Identifier: Apache-2.0
"""Pure-torch reference of awq_dequantize (API.md 2.3), shared by tests/gemm and
benchmark/gemm.

AWQ packs 8 unsigned 4-bit values per int32 word: logical column ``j`` (0..7) of a word is the
field at bit offset ``4 * ORDER[j]``."""

from __future__ import annotations

import torch

ORDER = (0, 4, 1, 5, 2, 6, 3, 7)


def awq_shifts(device) -> torch.Tensor:
    """int32 ``[8]``: the bit offset ``4 * ORDER[j]`` of logical column ``j``, computed on the
    device (``4 * (j // 2 + 4 * (j % 2))``), so that no host-to-device copy happens inside a
    CUDA graph capture."""
    j = torch.arange(8, device=device, dtype=torch.int32)
    return 4 * ((j >> 1) + 4 * (j & 1))


def awq_unpack(packed: torch.Tensor) -> torch.Tensor:
    """int32 ``[R, W]`` -> int32 ``[R, 8 W]`` of values 0..15 (logical column order)."""
    fields = (packed[..., None] >> awq_shifts(packed.device)) & 0xF
    return fields.reshape(packed.shape[0], -1)


def awq_pack(values: torch.Tensor) -> torch.Tensor:
    """Inverse of :func:`awq_unpack`, written from the API's definition with Python shifts:
    ``[R, 8 W]`` values 0..15 -> int32 ``[R, W]``."""
    v = values.to(torch.int64).reshape(values.shape[0], -1, 8)
    word = torch.zeros(v.shape[:2], dtype=torch.int64, device=values.device)
    for j, o in enumerate(ORDER):
        word |= v[..., j] << (4 * o)
    word = torch.where(word >= 2**31, word - 2**32, word)  # two's complement int32
    return word.to(torch.int32)


def awq_dequantize_ref(qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor) -> torch.Tensor:
    """``out[k, n] = (w[k, n] - z[k // G, n]) * scales[k // G, n]`` in fp32, rounded once to
    ``scales.dtype``; ``G = K / scales.shape[0]``."""
    g = qweight.shape[0] // scales.shape[0]
    w = awq_unpack(qweight).float()
    z = awq_unpack(qzeros).float().repeat_interleave(g, 0)
    s = scales.float().repeat_interleave(g, 0)
    return ((w - z) * s).to(scales.dtype)


def awq_dequantize_torch(qweight: torch.Tensor, scales: torch.Tensor, qzeros: torch.Tensor) -> torch.Tensor:
    """What a serving engine runs without the kernel (the benchmark's torch and torch.compile
    baselines): the same function in the scales' dtype. ``w - z`` is exact there and the product
    is rounded once, so it equals :func:`awq_dequantize_ref` bit for bit."""
    g = qweight.shape[0] // scales.shape[0]
    w = awq_unpack(qweight).to(scales.dtype)
    z = awq_unpack(qzeros).to(scales.dtype).repeat_interleave(g, 0)
    return (w - z) * scales.repeat_interleave(g, 0)


def random_awq(k: int, n: int, group: int, dtype: torch.dtype, gen: torch.Generator, device="cuda"):
    """(qweight, scales, qzeros): every bit pattern of the words equally likely (all 16 values
    in every field), scales positive and negative over two decades."""
    words = n // 8
    qweight = torch.randint(-(2**31), 2**31, (k, words), dtype=torch.int64, device=device, generator=gen)
    qzeros = torch.randint(-(2**31), 2**31, (k // group, words), dtype=torch.int64, device=device, generator=gen)
    mag = torch.pow(10.0, torch.rand(k // group, n, device=device, generator=gen) * 2 - 3)
    sign = torch.randint(0, 2, (k // group, n), device=device, generator=gen).float() * 2 - 1
    return qweight.to(torch.int32), (mag * sign).to(dtype), qzeros.to(torch.int32)
