// SPDX-License-Identifier: Apache-2.0
// fp8_blockwise_scaled_grouped_mm on sm90a (gemm.h): what the dispatcher and setup kernel
// (blockwise_grouped_mm.cu) share with the CUTLASS configurations, one translation unit each
// (blockwise_grouped_<config>.cu, on blockwise_grouped_sm90.cuh). Light on purpose: no CUTLASS
// collective is instantiated by including it.
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/gemm/gemm.h>
#include <cutlass/layout/matrix.h>

#include "gemm/gemm.h"

namespace sgl_kernel::gemm::sm90 {

// One expert's (M, N, K).
using GroupedProblemMNK = cute::Shape<int, int, int>;

// 1 x 128 activation blocks and 128 x 128 weight blocks, both K-major.
using GroupedScaleConfig =
    cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, cute::GMMA::Major::K, cute::GMMA::Major::K>;
using GroupedLayoutSFA = decltype(GroupedScaleConfig::deduce_layoutSFA());
using GroupedLayoutSFB = decltype(GroupedScaleConfig::deduce_layoutSFB());
// API.md gives each layout 5 int32 of scratch per expert: ((1, M), (128, Kb), L) and its two
// run-time strides.
static_assert(sizeof(GroupedLayoutSFA) == 5 * sizeof(int32_t) && sizeof(GroupedLayoutSFB) == 5 * sizeof(int32_t));

// Per-expert strides of A (row-major), B (column-major) and D (row-major): (leading dim, 1, 0).
// Every configuration's kernel uses these types (static_assert in blockwise_grouped_sm90.cuh).
using GroupedStrideA = cute::remove_pointer_t<cutlass::gemm::TagToStrideA_t<cutlass::layout::RowMajor*>>;
using GroupedStrideB = cute::remove_pointer_t<cutlass::gemm::TagToStrideB_t<cutlass::layout::ColumnMajor*>>;
using GroupedStrideD = cute::remove_pointer_t<cutlass::gemm::TagToStrideC_t<cutlass::layout::RowMajor*>>;

// Device arrays the setup kernel fills in the workspace (after CUTLASS's part).
struct GroupedDeviceArrays {
  GroupedStrideA* stride_a;
  GroupedStrideB* stride_b;
  GroupedStrideD* stride_d;
  GroupedProblemMNK* problems;
};

// A configuration's entry point: with cutlass_bytes != nullptr it only stores the workspace its
// CUTLASS kernel needs (arrays unused); otherwise it launches the grouped GEMM with that
// workspace at `workspace`.
using GroupedConfigFn = cudaError_t (*)(const GroupedBlockwiseMmParams& p, const GroupedDeviceArrays& arrays,
                                        void* workspace, size_t* cutlass_bytes, cudaStream_t stream);

// Cooperative 128x128x128 (two consumer warp groups on one tile) and ping-pong 64x128x128 (two
// consumer warp groups on alternate tiles, one's epilogue under the other's mainloop) tiles,
// both with the overlapped-promotion consumer loop (blockwise_grouped_sm90.cuh).
cudaError_t grouped_coop_128x128(const GroupedBlockwiseMmParams&, const GroupedDeviceArrays&, void*, size_t*,
                                 cudaStream_t);
cudaError_t grouped_pingpong_64x128(const GroupedBlockwiseMmParams&, const GroupedDeviceArrays&, void*, size_t*,
                                    cudaStream_t);

}  // namespace sgl_kernel::gemm::sm90
