// SPDX-License-Identifier: Apache-2.0
// fp8_blockwise_scaled_mm on sm90a: picks the CUTLASS configuration by M.
#include "gemm/gemm.h"
#include "gemm/sm90/blockwise_mm_configs.h"

namespace sgl_kernel::gemm {

namespace {

sm90::BlockwiseConfigFn pick(const BlockwiseMmParams& p) {
  if (p.config == 0) return &sm90::blockwise_coop_128x128;
  if (p.config == 1) return &sm90::blockwise_pingpong_64x128;
  return p.m <= 64 ? &sm90::blockwise_pingpong_64x128 : &sm90::blockwise_coop_128x128;
}

}  // namespace

size_t fp8_blockwise_mm_workspace(const BlockwiseMmParams& p) {
  size_t bytes = 0;
  return pick(p)(p, nullptr, &bytes, nullptr) == cudaSuccess ? bytes : 0;
}

cudaError_t launch_fp8_blockwise_mm_sm90(const BlockwiseMmParams& p, void* workspace, cudaStream_t stream) {
  return pick(p)(p, workspace, nullptr, stream);
}

}  // namespace sgl_kernel::gemm
