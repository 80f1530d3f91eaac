# SPDX-License-Identifier: Apache-2.0
"""``sgl_kernel.gemm``: the GEMM API module of sgl-kernel (API.md 1.1).

The 8-bit quantization functions that feed the GEMMs live here in the sgl-kernel API; they
are implemented in :mod:`sgl_kernel.quantization` and re-exported unchanged.
"""

from __future__ import annotations

from sgl_kernel.quantization import (
    sgl_per_tensor_quant_fp8,
    sgl_per_token_group_quant_8bit,
    sgl_per_token_group_quant_fp8,
    sgl_per_token_group_quant_int8,
    sgl_per_token_quant_fp8,
    sgl_per_token_quant_int8,
)

__all__ = [
    "sgl_per_token_quant_fp8",
    "sgl_per_tensor_quant_fp8",
    "sgl_per_token_group_quant_8bit",
    "sgl_per_token_group_quant_fp8",
    "sgl_per_token_group_quant_int8",
    "sgl_per_token_quant_int8",
]
