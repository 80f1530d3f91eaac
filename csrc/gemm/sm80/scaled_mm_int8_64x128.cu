// SPDX-License-Identifier: Apache-2.0
// int8_scaled_mm, sm80+ (CUTLASS 2.x, mma.sync s8): 64x128x128 tiles, 4 warps of 32x64x128, 3 stages.
#include "gemm/scaled_mm_sm8x.cuh"
#include "gemm/scaled_mm_sm8x_configs.h"

namespace sgl_kernel::gemm::sm8x {

cudaError_t int8_64x128(const ScaledMmParams& p, cudaStream_t stream) {
  return run_out_types<int8_t, cutlass::arch::Sm80, cutlass::gemm::GemmShape<64, 128, 128>,
                       cutlass::gemm::GemmShape<32, 64, 128>, 3>(p, stream);
}

}  // namespace sgl_kernel::gemm::sm8x
