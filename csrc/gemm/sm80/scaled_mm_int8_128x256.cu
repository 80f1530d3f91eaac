// SPDX-License-Identifier: Apache-2.0
// int8_scaled_mm, sm80+ (CUTLASS 2.x, mma.sync s8): 128x256x64 tiles, 8 warps of 64x64x64, 3 stages.
#include "gemm/scaled_mm_sm8x.cuh"
#include "gemm/scaled_mm_sm8x_configs.h"

namespace sgl_kernel::gemm::sm8x {

cudaError_t int8_128x256(const ScaledMmParams& p, cudaStream_t stream) {
  return run_out_types<int8_t, cutlass::arch::Sm80, cutlass::gemm::GemmShape<128, 256, 64>,
                       cutlass::gemm::GemmShape<64, 64, 64>, 3>(p, stream);
}

}  // namespace sgl_kernel::gemm::sm8x
