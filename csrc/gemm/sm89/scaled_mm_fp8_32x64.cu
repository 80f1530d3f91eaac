// SPDX-License-Identifier: Apache-2.0
// fp8_scaled_mm, sm89+ (CUTLASS 2.x, mma.sync e4m3): 32x64x128 tiles, 2 warps of 32x32x128, 4 stages.
#include "gemm/scaled_mm_sm8x.cuh"
#include "gemm/scaled_mm_sm8x_configs.h"

namespace sgl_kernel::gemm::sm8x {

cudaError_t fp8_32x64(const ScaledMmParams& p, cudaStream_t stream) {
  return run_out_types<cutlass::float_e4m3_t, cutlass::arch::Sm89, cutlass::gemm::GemmShape<32, 64, 128>,
                       cutlass::gemm::GemmShape<32, 32, 128>, 4>(p, stream);
}

}  // namespace sgl_kernel::gemm::sm8x
