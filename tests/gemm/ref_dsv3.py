# SPDX-License-Identifier: Apache-2.0
"""Pure-torch reference and tolerances of dsv3_router_gemm and dsv3_fused_a_gemm (API.md 2.3),
shared by tests/gemm and benchmark/gemm.

Tolerance, per element, against the fp64 product of the bf16 inputs:
``|out - ref| <= rtol * |ref| + atol_rel * max|ref|`` with (rtol, atol_rel) = (1e-4, 1e-4) for
fp32 output (fp32 accumulation over K = 7168 in another order) and (8e-3, 1e-3) for bf16 output
(one rounding to bf16, 2^-9 relative, plus the accumulation error); and the normwise relative
error ``||out - ref|| / ||ref||`` below 1e-5 (fp32) / 4e-3 (bf16)."""

from __future__ import annotations

from typing import Optional

import torch

HIDDEN = 7168  # K of both GEMMs
FUSED_A_N = 2112  # q_a (1536) + kv_a (512) + rope key (64)
EXPERTS = (256, 384)

# out dtype -> (rtol, atol relative to max|ref|, normwise relative error)
TOLERANCES = {
    torch.float32: (1e-4, 1e-4, 1e-5),
    torch.bfloat16: (8e-3, 1e-3, 4e-3),
}


def dsv3_ref(a: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """fp64 ``a @ w.T`` of bf16 ``a [M, K]`` and a row-major weight ``w [N, K]``."""
    return a.double() @ w.double().t()


def dsv3_mismatch(out: torch.Tensor, ref: torch.Tensor) -> Optional[str]:
    """None when ``out`` is within the tolerance of its dtype, else a description."""
    if out.shape != ref.shape:
        return f"shape {tuple(out.shape)} != {tuple(ref.shape)}"
    rtol, atol_rel, norm_tol = TOLERANCES[out.dtype]
    o = out.double()
    if not torch.isfinite(o).all():
        return f"{int((~torch.isfinite(o)).sum())} non-finite elements"
    scale = float(ref.abs().max())
    err = (o - ref).abs()
    bad = err > rtol * ref.abs() + atol_rel * scale
    if bool(bad.any()):
        idx = tuple(int(i) for i in bad.nonzero()[0])
        return (f"{int(bad.sum())} elements off, e.g. {idx}: {float(o[idx]):.6g} vs {float(ref[idx]):.6g} "
                f"(max|ref| {scale:.4g})")
    norm = float((o - ref).norm() / ref.norm())
    if norm > norm_tol:
        return f"normwise relative error {norm:.3g} > {norm_tol:g}"
    return None


def random_activations(m: int, gen: torch.Generator) -> torch.Tensor:
    return torch.randn(m, HIDDEN, device="cuda", generator=gen).to(torch.bfloat16)


def random_weight(n: int, gen: torch.Generator) -> torch.Tensor:
    """Row-major ``[n, 7168]`` bf16 with the magnitude of trained weights (std 0.02-0.05)."""
    return (torch.randn(n, HIDDEN, device="cuda", generator=gen) * 0.04).to(torch.bfloat16)


def router_torch(hidden_states: torch.Tensor, weights: torch.Tensor, out_dtype: torch.dtype) -> torch.Tensor:
    """What an engine runs without the kernel: cuBLAS through F.linear, then the cast."""
    out = torch.nn.functional.linear(hidden_states, weights)
    return out if out_dtype == out.dtype else out.to(out_dtype)
