// SPDX-License-Identifier: Apache-2.0
// fp8_blockwise_scaled_mm, sm90a: cooperative 128x128x128 tiles, with the mainloop that
// promotes each k-tile under the next one's wgmmas (blockwise_overlap_mainloop.cuh).
#include "gemm/sm90/blockwise_mm_configs.h"
#include "gemm/sm90/blockwise_mm_sm90.cuh"

namespace sgl_kernel::gemm::sm90 {

namespace {
template <typename ElementD>
using Kernel = BlockwiseMmKernel<ElementD, cute::Shape<cute::_128, cute::_128, cute::_128>,
                                 cute::Shape<cute::_1, cute::_1, cute::_1>, cutlass::gemm::KernelTmaWarpSpecializedCooperativeFP8BlockScaledAccum,
                                 cutlass::epilogue::TmaWarpSpecializedCooperative, /*kOverlap=*/true>;
}  // namespace

cudaError_t blockwise_coop_128x128(const BlockwiseMmParams& p, void* workspace, size_t* ws_bytes, cudaStream_t stream) {
  return run_blockwise_out_types<Kernel>(p, workspace, ws_bytes, stream);
}

}  // namespace sgl_kernel::gemm::sm90
