# SPDX-License-Identifier: Apache-2.0
"""fp64 reference of the all-reduce family (API.md 2.6) and its acceptance bound, shared by the
tests and the benchmark.

The kernels add the W ranks' inputs in fp32, in the order rank 0, 1, ..., W-1, and round the
sum once to the output dtype. Against the exact (fp64) sum ``ref`` of the inputs, with
``A = sum_r |x_r|`` and ``u = 2**-24`` (fp32 unit roundoff):

- the fp32 sum ``s`` satisfies ``|s - ref| <= (W - 1) * u * A`` (W - 1 additions, each with a
  relative rounding error of at most u; the conversions of fp16/bf16 inputs to fp32 are exact);
- fp32 outputs are ``s``: the bound is ``(W - 1) * u * A``;
- fp16/bf16 outputs are ``s`` rounded once: ``|out - s| <= 0.5 * ulp(out dtype)`` at
  ``|s| <= max(|ref| + (W - 1) * u * A, |out|)``, so the bound is that half ulp plus
  ``(W - 1) * u * A``.

A small slack (1 %) covers the second-order terms. Every rank must also hold bitwise-identical
results (fixed summation order).
"""

from __future__ import annotations

from typing import Optional, Sequence, Tuple

import torch

DTYPES = (torch.float32, torch.float16, torch.bfloat16)

# dtype -> (significand bits including the implicit one, smallest normal exponent)
_FORMAT = {torch.float32: (24, -126), torch.float16: (11, -14), torch.bfloat16: (8, -126)}
FP32_UNIT_ROUNDOFF = 2.0 ** -24


def reference(inputs: Sequence[torch.Tensor]) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(sum of the inputs, sum of their absolute values)``, both fp64."""
    ref = torch.zeros(inputs[0].shape, dtype=torch.float64, device=inputs[0].device)
    mag = torch.zeros_like(ref)
    for x in inputs:
        x64 = x.to(torch.float64)
        ref += x64
        mag += x64.abs()
    return ref, mag


def ulp(v: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The unit in the last place of ``dtype`` at magnitude ``|v|`` (fp64; subnormals included)."""
    bits, emin = _FORMAT[dtype]
    exponent = torch.floor(torch.log2(v.abs().clamp_min(2.0 ** emin)))
    return torch.exp2(exponent - (bits - 1))


def error_bound(ref: torch.Tensor, mag: torch.Tensor, out: torch.Tensor, world: int) -> torch.Tensor:
    """Largest ``|out - ref|`` the kernels may produce, elementwise (module docstring)."""
    acc = 1.01 * (world - 1) * FP32_UNIT_ROUNDOFF * mag
    if out.dtype == torch.float32:
        return acc
    top = torch.maximum(ref.abs() + acc, out.to(torch.float64).abs())
    return 1.01 * 0.5 * ulp(top, out.dtype) + acc


def check_sum(out: torch.Tensor, ref: torch.Tensor, mag: torch.Tensor, world: int) -> Optional[str]:
    """None when every element of ``out`` is within :func:`error_bound` of ``ref`` (NaN fails),
    else a description of the worst element."""
    out64 = out.to(torch.float64).reshape(ref.shape)
    err = (out64 - ref).abs()
    bound = error_bound(ref, mag, out, world)
    bad = ~(err <= bound)
    if not bool(bad.any()):
        return None
    excess = torch.where(bad, torch.nan_to_num(err - bound, nan=float("inf")), torch.zeros_like(err)).flatten()
    i = int(excess.argmax())
    return (f"{int(bad.sum())} of {out.numel()} elements outside the bound; worst at flat index {i}: "
            f"out={out64.flatten()[i].item()!r} ref={ref.flatten()[i].item()!r} "
            f"|err|={err.flatten()[i].item():.3e} > bound={bound.flatten()[i].item():.3e} ({out.dtype}, W={world})")


def check_bitwise_equal(outputs: Sequence[torch.Tensor]) -> Optional[str]:
    """None when every output holds the same bytes as ``outputs[0]``."""
    first = outputs[0].contiguous().view(torch.uint8)
    for r, out in enumerate(outputs[1:], start=1):
        other = out.contiguous().view(torch.uint8).to(first.device)
        if not torch.equal(first, other):
            n = int((first != other).sum())
            return f"rank {r}'s result differs from rank 0's in {n} bytes"
    return None


def check_all_reduce(inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> Optional[str]:
    """Every rank's output against the fp64 sum of all ranks' inputs, and all outputs bitwise
    equal. None when correct, else the first problem found."""
    ref, mag = reference(inputs)
    world = len(inputs)
    for r, out in enumerate(outputs):
        msg = check_sum(out, ref, mag, world)
        if msg:
            return f"rank {r}: {msg}"
    return check_bitwise_equal(outputs)
