// SPDX-License-Identifier: Apache-2.0
// int8_scaled_mm on the CUTLASS 2.x path: the tile heuristic of scaled_mm_sm8x_configs.h.
#include "gemm/gemm.h"
#include "gemm/scaled_mm_sm8x_configs.h"

namespace sgl_kernel::gemm {

cudaError_t launch_int8_scaled_mm_sm80(const ScaledMmParams& p, cudaStream_t stream) {
  return sm8x::dispatch(p, 256, &sm8x::int8_32x64, &sm8x::int8_64x128, &sm8x::int8_128x256, stream);
}

}  // namespace sgl_kernel::gemm
