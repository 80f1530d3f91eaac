// SPDX-License-Identifier: Apache-2.0
// fp8_scaled_mm, sm90a: persistent cooperative 128x256x128 tiles, 1x2 clusters (the A tile
// multicast to the two CTAs of a cluster instead of the B tile; large M and N).
#include "gemm/sm90/scaled_mm_sm90.cuh"

namespace sgl_kernel::gemm::sm90 {

namespace {
template <typename ElementD>
using Kernel = ScaledMmKernel<cutlass::float_e4m3_t, ElementD, cute::Shape<cute::_128, cute::_256, cute::_128>,
                              cute::Shape<cute::_1, cute::_2, cute::_1>, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8FastAccum,
                              cutlass::epilogue::TmaWarpSpecializedCooperative, false>;
}  // namespace

cudaError_t fp8_coop_128x256_c12(const ScaledMmParams& p, int splits, void* workspace, size_t* ws_bytes, cudaStream_t stream) {
  return run_out_types<Kernel>(p, splits, workspace, ws_bytes, stream);
}

}  // namespace sgl_kernel::gemm::sm90
