// SPDX-License-Identifier: Apache-2.0
// fp8_blockwise_scaled_grouped_mm, sm90a: cooperative 128x128x128 tiles.
#include "gemm/sm90/blockwise_grouped_configs.h"
#include "gemm/sm90/blockwise_grouped_sm90.cuh"

namespace sgl_kernel::gemm::sm90 {

namespace {
template <typename ElementD>
using Kernel = GroupedKernel<ElementD, cute::Shape<cute::_128, cute::_128, cute::_128>,
                             cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise,
                             cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative>;
}  // namespace

cudaError_t grouped_coop_128x128(const GroupedBlockwiseMmParams& p, const GroupedDeviceArrays& d, void* workspace,
                                 size_t* cutlass_bytes, cudaStream_t stream) {
  return run_grouped_out_types<Kernel>(p, d, workspace, cutlass_bytes, stream);
}

}  // namespace sgl_kernel::gemm::sm90
