// SPDX-License-Identifier: Apache-2.0
// fp8_scaled_mm, sm90a: swap A/B, 128 weight rows x 32 activation rows per tile (decode M).
#include "gemm/sm90/scaled_mm_sm90.cuh"

namespace sgl_kernel::gemm::sm90 {

namespace {
template <typename ElementD>
using Kernel = ScaledMmKernel<cutlass::float_e4m3_t, ElementD, cute::Shape<cute::_128, cute::_32, cute::_128>,
                              cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum,
                              cutlass::epilogue::TmaWarpSpecializedCooperative, true>;
}  // namespace

cudaError_t fp8_swap_128x32(const ScaledMmParams& p, int splits, void* workspace, size_t* ws_bytes, cudaStream_t stream) {
  return run_out_types<Kernel>(p, splits, workspace, ws_bytes, stream);
}

}  // namespace sgl_kernel::gemm::sm90
