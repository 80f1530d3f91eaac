# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of the scaled GEMMs, shared by tests/gemm and benchmark/gemm."""

from __future__ import annotations

from typing import Optional

import torch

FP8 = torch.float8_e4m3fn

# (N, K) of the linear layers of Llama-3-8B, Llama-3-70B and Qwen3-8B / Qwen3-32B
# (fused qkv, o, fused gate_up, down).
LLAMA3_8B_NK = [(6144, 4096), (4096, 4096), (28672, 4096), (4096, 14336)]
LLAMA3_70B_NK = [(10240, 8192), (8192, 8192), (57344, 8192), (8192, 28672)]
QWEN3_NK = [(6144, 4096), (24576, 4096), (4096, 12288), (10240, 5120), (51200, 5120), (5120, 25600)]


def random_fp8(shape, gen: torch.Generator, scale: float = 1.0) -> torch.Tensor:
    """Normal values (times ``scale``) rounded to e4m3: every code is a real value, none 0-heavy."""
    return (torch.randn(shape, device="cuda", generator=gen) * scale).to(FP8)


def random_int8(shape, gen: torch.Generator) -> torch.Tensor:
    return torch.randint(-128, 128, shape, device="cuda", dtype=torch.int8, generator=gen)


def random_scales(n: int, gen: torch.Generator) -> torch.Tensor:
    """Positive fp32 scales spread over two octaves, so a swapped or misindexed scale shows."""
    return torch.rand(n, device="cuda", generator=gen) * 1.5 + 0.25


def _exact_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """A @ B of 8-bit matrices in fp32 without TF32: the products are exact in fp32 and the sums
    carry a relative error of ~K * 2^-24, far below the tolerances of the tests."""
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return a.float() @ b.float()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def scaled_mm_ref(mat_a, mat_b, scales_a, scales_b, bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """fp32 ``(A @ B) * scales_a[:, None] * scales_b[None, :] (+ bias)`` (not rounded)."""
    acc = _exact_matmul(mat_a, mat_b)
    out = acc * scales_b.reshape(1, -1).float() * scales_a.reshape(-1, 1).float()
    if bias is not None:
        out = out + bias.float()
    return out


def abs_matmul_bound(mat_a, mat_b, scales_a, scales_b) -> torch.Tensor:
    """``(|A| @ |B|) * |scales_a| * |scales_b|``: the scale of the accumulation error."""
    acc = _exact_matmul(mat_a.float().abs(), mat_b.float().abs())
    return acc * scales_b.reshape(1, -1).float().abs() * scales_a.reshape(-1, 1).float().abs()


# Relative rounding of one output element: half an ulp of the output type.
OUT_ROUNDING = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}
# Accumulation error relative to (|A| @ |B|) * |sa| * |sb|: int8 accumulates exactly in int32
# (only the fp32 epilogue rounds); fp8 uses the tensor cores' fast accumulation (no periodic
# promotion to fp32), which keeps fewer mantissa bits than fp32: errors up to ~2^-10.4 of the
# bound were measured on an H200 (K up to 28672), so 2^-9 leaves a margin of ~2.7x.
ACC_TOL = {"fp8": 2.0**-9, "int8": 2.0**-22}
# fp8_blockwise_scaled_mm promotes its sums to fp32 once per 128-wide K block, so the error is
# relative to sum_kb |A_kb| @ |B_kb| * sa * sb; inside a block the tensor cores' accumulation
# rounds as above. 2^-12 (the first tolerance) was exceeded by up to 1.18x in 30 of 2209 fuzz
# cases (tools/fuzz_ops.py, H100; K = 128, fp16 outputs, 1-3 elements of ~8M each), so 2^-10.
BLOCKWISE_ACC_TOL = 2.0**-10


def assert_scaled_mm_close(out, ref, bound, out_dtype, kind: str) -> None:
    """|out - ref| <= OUT_ROUNDING * |ref| + ACC_TOL * bound + 1e-6, elementwise."""
    assert out.dtype == out_dtype, (out.dtype, out_dtype)
    assert torch.isfinite(out).all(), "non-finite output"
    err = (out.float() - ref).abs()
    allowed = OUT_ROUNDING[out_dtype] * ref.abs() + ACC_TOL[kind] * bound + 1e-6
    bad = err > allowed
    if bad.any():
        idx = bad.nonzero()[0].tolist()
        ratio = float((err / allowed).max())
        raise AssertionError(
            f"{int(bad.sum())} of {out.numel()} elements out of tolerance (worst err/allowed {ratio:.2f}); "
            f"first at {idx}: out {float(out[tuple(idx)])} ref {float(ref[tuple(idx)])} "
            f"allowed {float(allowed[tuple(idx)])}"
        )


def scaled_mm_config_names() -> list:
    """The CUTLASS / small-M configurations behind fp8_scaled_mm and int8_scaled_mm: the op's
    error message for an unknown SGL_KERNEL_SCALED_MM_CONFIG lists them all."""
    import os

    import sgl_kernel

    old = os.environ.get("SGL_KERNEL_SCALED_MM_CONFIG")
    os.environ["SGL_KERNEL_SCALED_MM_CONFIG"] = "?"
    try:
        a = torch.zeros(1, 16, device="cuda").to(FP8)
        s = torch.ones(8, device="cuda")
        sgl_kernel.fp8_scaled_mm(a, torch.zeros(8, 16, device="cuda").to(FP8).t(), s[:1], s, torch.bfloat16)
    except RuntimeError as e:
        return str(e).split("known: ")[1].split()[0].split(",")
    finally:
        if old is None:
            del os.environ["SGL_KERNEL_SCALED_MM_CONFIG"]
        else:
            os.environ["SGL_KERNEL_SCALED_MM_CONFIG"] = old
    raise AssertionError("an unknown configuration name was accepted")
