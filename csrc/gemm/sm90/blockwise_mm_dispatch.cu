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

// The persistent scheduler's swizzle. Session 8 sweep, with the overlapped mainloop (H100,
// tune_scaled_mm.py --kind blockwise, 3 interleaved rounds, Llama-3-8B layers at M = 1024-8192):
// 4 was the best swizzle at 14 of the 16 shapes and within 2% of 1 at the other two; the gain
// grows with M (M = 8192: 6-15%). Below M = 1024 (few tiles per wave) no sweep was run: 1.
int swizzle(const BlockwiseMmParams& p) {
  if (p.swizzle > 0) return p.swizzle;
  return p.m >= 1024 ? 4 : 1;
}

size_t fp8_blockwise_mm_workspace(const BlockwiseMmParams& p) {
  BlockwiseMmParams q = p;
  q.swizzle = swizzle(p);
  size_t bytes = 0;
  return pick(q)(q, nullptr, &bytes, nullptr) == cudaSuccess ? bytes : 0;
}

cudaError_t launch_fp8_blockwise_mm_sm90(const BlockwiseMmParams& p, void* workspace, cudaStream_t stream) {
  BlockwiseMmParams q = p;
  q.swizzle = swizzle(p);
  return pick(q)(q, workspace, nullptr, stream);
}

}  // namespace sgl_kernel::gemm
