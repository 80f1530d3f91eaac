// SPDX-License-Identifier: Apache-2.0
// int8_scaled_mm, sm80+ (CUTLASS 2.x, mma.sync s8): 32x64x128 tiles, 2 warps of 32x32x128, 4 stages.
#include "gemm/scaled_mm_sm8x.cuh"
#include "gemm/scaled_mm_sm8x_configs.h"

namespace sgl_kernel::gemm::sm8x {

cudaError_t int8_32x64(const ScaledMmParams& p, cudaStream_t stream) {
  return run_out_types<int8_t, cutlass::arch::Sm80, cutlass::gemm::GemmShape<32, 64, 128>,
                       cutlass::gemm::GemmShape<32, 32, 128>, 4>(p, stream);
}

}  // namespace sgl_kernel::gemm::sm8x
