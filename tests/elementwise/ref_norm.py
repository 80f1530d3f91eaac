# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of the RMSNorm family (API.md 2.1.1), in fp32 (shared by tests and
benchmarks).

Per row ``x`` (fp32): ``r = rsqrt(mean(x**2) + eps)``; ``out = x * r * w``, with ``w -> 1 + w``
(in fp32) for the Gemma variants. The fused variants first form the new residual
``residual + input`` rounded to the input dtype (as it is stored), then normalise that rounded
residual: API.md allows normalising either the fp32 sum or the stored one, and the kernel
normalises the stored one.
"""

from __future__ import annotations

from typing import Tuple

import torch

# op name -> (fused, gemma)
OPS = {
    "rmsnorm": (False, False),
    "fused_add_rmsnorm": (True, False),
    "gemma_rmsnorm": (False, True),
    "gemma_fused_add_rmsnorm": (True, True),
}


def _norm_fp32(xf: torch.Tensor, w: torch.Tensor, eps: float, gemma: bool) -> torch.Tensor:
    wf = w.float()
    if gemma:
        wf = 1.0 + wf
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * wf


def rmsnorm_ref(x: torch.Tensor, w: torch.Tensor, eps: float, gemma: bool = False) -> torch.Tensor:
    """fp32 ``x * rsqrt(mean(x**2) + eps) * w`` over the last dim (``(1 + w)`` when ``gemma``)."""
    return _norm_fp32(x.float(), w, eps, gemma)


def fused_add_rmsnorm_ref(
    x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float, gemma: bool = False
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(new_input_fp32, new_residual)``: ``new_residual = (x + residual)`` computed in fp32 and
    rounded once to the input dtype; ``new_input_fp32`` is the fp32 norm of that rounded
    residual. Neither argument is modified."""
    new_residual = (x.float() + residual.float()).to(x.dtype)
    return _norm_fp32(new_residual.float(), w, eps, gemma), new_residual


# What an engine would run instead (and what torch.compile compiles): the references, rounded
# to the input dtype.


def rmsnorm_torch(x: torch.Tensor, w: torch.Tensor, eps: float, gemma: bool = False) -> torch.Tensor:
    """``rmsnorm_ref`` rounded to ``x.dtype``."""
    return rmsnorm_ref(x, w, eps, gemma).to(x.dtype)


def fused_add_rmsnorm_torch(
    x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float, gemma: bool = False
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Functional: ``(new_input, new_residual)``, both in ``x.dtype``; arguments untouched."""
    normed, new_residual = fused_add_rmsnorm_ref(x, residual, w, eps, gemma)
    return normed.to(x.dtype), new_residual


def fused_add_rmsnorm_torch_(
    x: torch.Tensor, residual: torch.Tensor, w: torch.Tensor, eps: float, gemma: bool = False
) -> None:
    """In place, like the op: ``residual <- x + residual`` (rounded), ``x <- norm(residual)``."""
    normed, new_residual = fused_add_rmsnorm_torch(x, residual, w, eps, gemma)
    residual.copy_(new_residual)
    x.copy_(normed)
