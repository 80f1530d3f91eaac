// SPDX-License-Identifier: Apache-2.0
// int8_scaled_mm, sm90a: persistent cooperative 128x128x128 tiles, 1x2 clusters (mid M, narrow N).
#include "gemm/sm90/scaled_mm_sm90.cuh"

namespace sgl_kernel::gemm::sm90 {

namespace {
template <typename ElementD>
using Kernel = ScaledMmKernel<int8_t, ElementD, cute::Shape<cute::_128, cute::_128, cute::_128>,
                              cute::Shape<cute::_1, cute::_2, cute::_1>, cutlass::gemm::KernelTmaWarpSpecializedCooperative,
                              cutlass::epilogue::TmaWarpSpecializedCooperative, false>;
}  // namespace

cudaError_t int8_coop_128x128(const ScaledMmParams& p, int splits, void* workspace, size_t* ws_bytes, cudaStream_t stream) {
  return run_out_types<Kernel>(p, splits, workspace, ws_bytes, stream);
}

}  // namespace sgl_kernel::gemm::sm90
