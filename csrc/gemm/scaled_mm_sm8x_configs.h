// SPDX-License-Identifier: Apache-2.0
// The CUTLASS 2.x configurations behind fp8_scaled_mm (csrc/gemm/sm89/, sm89+) and
// int8_scaled_mm (csrc/gemm/sm80/, sm80+) on GPUs without the sm90a kernels, one translation
// unit each, and the tile heuristic their dispatchers share. CUTLASS-free.
//
// Every configuration keeps its shared memory under 99 KiB, the per-block limit of sm86/sm89
// (A10, L4, L40, RTX 30xx/40xx), so one binary serves every GPU of its family.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

#include "gemm/gemm.h"

namespace sgl_kernel::gemm::sm8x {

// Decode M <= 32: 32x64x128 tiles (small, so that N / 64 blocks stream the weights), 2 warps
// of 32x32, 4 stages (48 KiB).
cudaError_t int8_32x64(const ScaledMmParams& p, cudaStream_t stream);
cudaError_t fp8_32x64(const ScaledMmParams& p, cudaStream_t stream);
// M <= 128, and larger M whose large-tile grid would leave SMs idle: 64x128x128 tiles, 3 stages
// (72 KiB); int8 with 4 warps of 32x64, fp8 with 8 warps of 32x32 (the staged fp8 accumulation
// keeps two accumulator sets, which spill at 32x64).
cudaError_t int8_64x128(const ScaledMmParams& p, cudaStream_t stream);
cudaError_t fp8_64x128(const ScaledMmParams& p, cudaStream_t stream);
// Prefill. int8: 128x256x64 tiles, 8 warps of 64x64, 3 stages (72 KiB). fp8: 128x128x64, 8 warps
// of 64x32, 4 stages (64 KiB), again sized so the two accumulator sets fit in registers.
cudaError_t int8_128x256(const ScaledMmParams& p, cudaStream_t stream);
cudaError_t fp8_128x128(const ScaledMmParams& p, cudaStream_t stream);

using ConfigFn = cudaError_t (*)(const ScaledMmParams& p, cudaStream_t stream);

// The tile heuristic: small tiles for decode M, mid tiles for M <= 128 or wherever the large
// tiles (128 x large_n) would leave SMs idle, large tiles for prefill.
inline cudaError_t dispatch(const ScaledMmParams& p, int64_t large_n, ConfigFn small, ConfigFn mid, ConfigFn large,
                            cudaStream_t stream) {
  if (p.m <= 32) return small(p, stream);
  const int64_t large_tiles = ((p.m + 127) / 128) * ((p.n + large_n - 1) / large_n);
  if (p.m <= 128 || large_tiles < p.sm_count) return mid(p, stream);
  return large(p, stream);
}

}  // namespace sgl_kernel::gemm::sm8x
