// SPDX-License-Identifier: Apache-2.0
// fp8_blockwise_scaled_mm, sm90a: ping-pong 64x128x128 tiles.
#include "gemm/sm90/blockwise_mm_configs.h"
#include "gemm/sm90/blockwise_mm_sm90.cuh"

namespace sgl_kernel::gemm::sm90 {

namespace {
template <typename ElementD>
using Kernel = BlockwiseMmKernel<ElementD, cute::Shape<cute::_64, cute::_128, cute::_128>,
                                 cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::KernelTmaWarpSpecializedPingpongFP8BlockScaledAccum,
                                 cutlass::epilogue::TmaWarpSpecialized>;
}  // namespace

cudaError_t blockwise_pingpong_64x128(const BlockwiseMmParams& p, void* workspace, size_t* ws_bytes, cudaStream_t stream) {
  return run_blockwise_out_types<Kernel>(p, workspace, ws_bytes, stream);
}

}  // namespace sgl_kernel::gemm::sm90
