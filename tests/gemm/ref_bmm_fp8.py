# SPDX-License-Identifier: Apache-2.0
"""Pure-torch reference of bmm_fp8 (API.md 2.3), shared by tests/gemm/test_bmm_fp8.py and
benchmark/gemm/bench_bmm_fp8.py."""

from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
# (A dtype, B dtype) pairs cuBLASLt runs (no e5m2 x e5m2)
FP8_PAIRS = ((E4M3, E4M3), (E4M3, E5M2), (E5M2, E4M3))
# Spread of the random values: e4m3 and e5m2 codes over a few binades each, far from overflow
# of either type and of an fp16 output at k = 4096.
VALUE_SCALE = {E4M3: 1.0, E5M2: 4.0}


def random_fp8(shape, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """Normal values rounded to ``dtype``: real codes everywhere, not zero-heavy."""
    return (torch.randn(shape, device="cuda", generator=gen) * VALUE_SCALE[dtype]).to(dtype)


def random_scale(gen: torch.Generator) -> torch.Tensor:
    """One positive fp32 scale in [0.25, 1.75), as a 1-element tensor."""
    return torch.rand(1, device="cuda", generator=gen) * 1.5 + 0.25


def random_b(b: int, k: int, n: int, dtype: torch.dtype, gen: torch.Generator) -> torch.Tensor:
    """``B [b, k, n]`` column-major per batch: the transpose view of a contiguous ``[b, n, k]``."""
    return random_fp8((b, n, k), dtype, gen).transpose(-2, -1)


def bmm_fp8_ref(A: torch.Tensor, B: torch.Tensor, A_scale: torch.Tensor, B_scale: torch.Tensor) -> torch.Tensor:
    """``(A @ B) * A_scale * B_scale`` in fp64 (exact products and sums at these sizes), as fp32."""
    acc = torch.bmm(A.double(), B.double())
    return (acc * (A_scale.double().reshape(()) * B_scale.double().reshape(()))).float()


def bmm_fp8_bound(A: torch.Tensor, B: torch.Tensor, A_scale: torch.Tensor, B_scale: torch.Tensor) -> torch.Tensor:
    """``(|A| @ |B|) * |A_scale * B_scale|``: the scale of the accumulation error of an element."""
    acc = torch.bmm(A.double().abs(), B.double().abs())
    return (acc * (A_scale.double() * B_scale.double()).abs().reshape(())).float()


# Rounding of one output element: half an ulp of the output type, relative.
OUT_ROUNDING = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
# Accumulation error relative to bmm_fp8_bound. The fp8 tensor cores add with fewer bits than
# fp32 between the promotions of cuBLASLt's kernels (no fast accumulation), so a short k shows
# the largest relative error: measured on an H200 (cuBLAS 13) over the test grid, worst
# 2^-11.8 (k = 128, m = 1024, fp16 out), ~2^-16 at k = 4096. 2^-10 leaves a 3.5x margin.
ACC_TOL = 2.0**-10
# API.md 1.6 for fp8 GEMMs: rtol 2e-2 relative to the output's magnitude.
API_RTOL = 2e-2


def bmm_fp8_errors(out: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor) -> str:
    """'' when ``out`` is within tolerance of ``ref``, else a one-line description.

    Per element: ``|out - ref| <= OUT_ROUNDING * |ref| + ACC_TOL * bound + 1e-6``, and over the
    tensor: ``max |out - ref| <= API_RTOL * max |ref|`` (API.md 1.6).
    """
    if out.dtype not in OUT_ROUNDING:
        return f"output dtype {out.dtype} is not fp16/bf16"
    if not torch.isfinite(out).all():
        return f"{int((~torch.isfinite(out)).sum())} non-finite output elements (unwritten or overflow)"
    err = (out.float() - ref).abs()
    allowed = OUT_ROUNDING[out.dtype] * ref.abs() + ACC_TOL * bound + 1e-6
    bad = err > allowed
    if bad.any():
        idx = tuple(bad.nonzero()[0].tolist())
        worst = float((err / allowed).max())
        return (f"{int(bad.sum())} of {out.numel()} elements out of tolerance (worst err/allowed {worst:.2f}); "
                f"first at {list(idx)}: out {float(out[idx])} ref {float(ref[idx])} allowed {float(allowed[idx])}")
    max_ref = float(ref.abs().max()) if ref.numel() else 0.0
    if ref.numel() and float(err.max()) > API_RTOL * max_ref:
        return f"max error {float(err.max())} > {API_RTOL} * max |ref| ({max_ref})"
    return ""


def assert_bmm_fp8_close(out: torch.Tensor, ref: torch.Tensor, bound: torch.Tensor) -> None:
    msg = bmm_fp8_errors(out, ref, bound)
    if msg:
        raise AssertionError(msg)
