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

// The persistent scheduler's swizzle, from the H200 sweep of session 4 (M >= 1024, Llama-3-8B
// layers; blockwise / per-token fp8_scaled_mm): 4 lifts the wide-N shapes at M >= 4096 from
// 0.73-0.81x to 0.83-0.90x and the narrow ones at M = 2048-4096 from 0.83-0.92x to 0.85-0.96x;
// elsewhere 1 was best or within noise.
int swizzle(const BlockwiseMmParams& p) {
  if (p.swizzle > 0) return p.swizzle;
  const bool wide_n = p.n >= 16384, deep_k = p.k >= 8192;
  if (wide_n && p.m >= 4096) return 4;
  if (!wide_n && !deep_k && p.m >= 2048 && p.m <= 4096) return 4;
  // Session 7, steady-state sweep (tune_scaled_mm.py --kind blockwise): the deep-K layer at
  // M = 4096 / 8192, 0.85 / 0.87x our per-token GEMM with 4 against 0.83 / 0.83 with 1. (2x1 and
  // 1x2 clusters were tried too: never better than noise, so not kept.)
  if (deep_k && p.m >= 4096) return 4;
  return 1;
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
