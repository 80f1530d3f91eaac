// SPDX-License-Identifier: Apache-2.0
// fp8_scaled_mm on the CUTLASS 2.x path: the tile heuristic of scaled_mm_sm8x_configs.h.
#include "gemm/gemm.h"
#include "gemm/scaled_mm_sm8x_configs.h"

namespace sgl_kernel::gemm {

cudaError_t launch_fp8_scaled_mm_sm89(const ScaledMmParams& p, cudaStream_t stream) {
  return sm8x::dispatch(p, 128, &sm8x::fp8_32x64, &sm8x::fp8_64x128, &sm8x::fp8_128x128, stream);
}

}  // namespace sgl_kernel::gemm
