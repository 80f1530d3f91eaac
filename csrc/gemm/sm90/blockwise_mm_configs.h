// SPDX-License-Identifier: Apache-2.0
// The CUTLASS configurations behind fp8_blockwise_scaled_mm (sm90a), one translation unit
// each, and the dispatcher (blockwise_mm_dispatch.cu). With ws_bytes != nullptr an entry point
// only stores the workspace size.
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "gemm/gemm.h"

namespace sgl_kernel::gemm::sm90 {

using BlockwiseConfigFn = cudaError_t (*)(const BlockwiseMmParams& p, void* workspace, size_t* ws_bytes,
                                          cudaStream_t stream);

// Cooperative 128x128x128 (M > 64; the overlapped-promotion mainloop of
// blockwise_overlap_mainloop.cuh) and ping-pong 64x128x128 (M <= 64; CUTLASS's mainloop) tiles.
cudaError_t blockwise_coop_128x128(const BlockwiseMmParams&, void*, size_t*, cudaStream_t);
cudaError_t blockwise_pingpong_64x128(const BlockwiseMmParams&, void*, size_t*, cudaStream_t);

}  // namespace sgl_kernel::gemm::sm90
