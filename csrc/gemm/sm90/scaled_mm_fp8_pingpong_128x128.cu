// SPDX-License-Identifier: Apache-2.0
// fp8_scaled_mm, sm90a: ping-pong 128x128x128 tiles, 2x1 clusters (each consumer warpgroup owns
// a whole 128x128 tile, so one tile's epilogue overlaps the other's mainloop; prefill).
#include "gemm/sm90/scaled_mm_sm90.cuh"

namespace sgl_kernel::gemm::sm90 {

namespace {
template <typename ElementD>
using Kernel = ScaledMmKernel<cutlass::float_e4m3_t, ElementD, cute::Shape<cute::_128, cute::_128, cute::_128>,
                              cute::Shape<cute::_2, cute::_1, cute::_1>, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8FastAccum,
                              cutlass::epilogue::TmaWarpSpecialized, false>;
}  // namespace

cudaError_t fp8_pingpong_128x128(const ScaledMmParams& p, int splits, void* workspace, size_t* ws_bytes, cudaStream_t stream) {
  return run_out_types<Kernel>(p, splits, workspace, ws_bytes, stream);
}

}  // namespace sgl_kernel::gemm::sm90
