// SPDX-License-Identifier: Apache-2.0
// What the decode kernels of fp8_scaled_mm / int8_scaled_mm (scaled_mm_small_m.cu,
// scaled_mm_decode.cu) share: the shapes they take, and their epilogue, in which partial sums of a [tokens x rows] output block,
// spread over the shared memory of the cs CTAs of a cluster (and over kSlices K slices within
// each), are added in a fixed order (cluster rank, then slice), scaled, biased and stored:
//   out[m, n] = fmaf(sum * scales_b[n], scales_a[m], bias[n])    (fp32, one rounding)
#pragma once

#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>
#include <climits>

#include "gemm/gemm.h"
#include "sgl_kernel/launch.cuh"  // set_launch_attrs

namespace sgl_kernel::gemm::sm90 {

// The shapes both kernels take (else cudaErrorNotSupported): 16-byte aligned operand starts and
// row strides, N % 8 == 0, K % 16 == 0, 4-byte aligned output pairs, int32-safe sizes, and for
// int8 K < 2^17 (the int32 sums of 128 x 128 products are exact below that).
inline bool decode_shape_ok(const ScaledMmParams& p, bool int8) {
  const auto aligned16 = [](const void* q) { return (reinterpret_cast<uintptr_t>(q) & 15) == 0; };
  return p.m >= 0 && p.n >= 0 && p.k > 0 && p.n % 8 == 0 && p.k % 16 == 0 && p.lda % 16 == 0 && p.ldb % 16 == 0 &&
         p.ldd % 2 == 0 && aligned16(p.a) && aligned16(p.b) && (reinterpret_cast<uintptr_t>(p.out) & 3) == 0 &&
         p.n <= INT32_MAX / 2 && p.m <= INT32_MAX / 2 && p.k <= INT32_MAX / 2 && !(int8 && p.k >= (int64_t{1} << 17));
}

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(int32_t v) { return static_cast<float>(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }

__device__ __forceinline__ void store_pair(__nv_bfloat16* p, float v0, float v1) {
  *reinterpret_cast<__nv_bfloat162*>(p) = __floats2bfloat162_rn(v0, v1);
}
__device__ __forceinline__ void store_pair(__half* p, float v0, float v1) {
  *reinterpret_cast<__half2*>(p) = __floats2half2_rn(v0, v1);
}

// The output side of a decode kernel's arguments: an [m, n] output with row stride ldd, its
// scales and bias (set on the host by of()).
struct DecodeOut {
  const float* scales_a;  // [m]
  const float* scales_b;  // [n]
  const void* bias;       // [n] in TOut, or nullptr
  void* out;
  int m, n;
  int64_t ldd;

  static DecodeOut of(const ScaledMmParams& p) {
    return {p.scales_a, p.scales_b, p.bias, p.out, static_cast<int>(p.m), static_cast<int>(p.n), p.ldd};
  }
};

// The block is tokens m0.., weight rows (output columns) row0... partial: this CTA's sums, [kSlices][kTokens][kRowStride] (token-major, kRows used per row);
// the same offset in every CTA of the cluster holds that CTA's. Every thread of the CTA calls
// this after a cluster (or, cs == 1, block) barrier; each CTA finishes a share of the block,
// two adjacent rows per thread. The caller syncs the cluster again before exiting.
template <typename Acc, typename TOut, int kSlices, int kTokens, int kRows, int kRowStride, int kThreads>
__device__ __forceinline__ void store_cluster_sums(const Acc* partial, const int cs, const int rank,
                                                   const DecodeOut& b, const int m0, const int row0) {
  namespace cg = cooperative_groups;
  const int tokens = min(kTokens, b.m - m0);
  constexpr int kPairs = kRows / 2;
  const auto* bias = static_cast<const TOut*>(b.bias);
  auto* out = static_cast<TOut*>(b.out);
  for (int e = rank * kThreads + static_cast<int>(threadIdx.x); e < tokens * kPairs; e += cs * kThreads) {
    const int tok = e / kPairs;
    const int r = 2 * (e % kPairs);
    const int n = row0 + r;
    if (n >= b.n) continue;
    Acc s0 = Acc(0), s1 = Acc(0);
    for (int q = 0; q < cs; ++q) {
      const Acc* src = cs > 1 ? cg::this_cluster().map_shared_rank(partial, q) : partial;
#pragma unroll
      for (int j = 0; j < kSlices; ++j) {
        const Acc* v = src + (j * kTokens + tok) * kRowStride + r;
        s0 += v[0];
        s1 += v[1];
      }
    }
    const float sa = b.scales_a[m0 + tok];
    const float b0 = bias != nullptr ? to_float(bias[n]) : 0.f;
    const float b1 = bias != nullptr ? to_float(bias[n + 1]) : 0.f;
    const float v0 = fmaf(to_float(s0) * b.scales_b[n], sa, b0);
    const float v1 = fmaf(to_float(s1) * b.scales_b[n + 1], sa, b1);
    store_pair(out + static_cast<int64_t>(m0 + tok) * b.ldd + n, v0, v1);
  }
}

}  // namespace sgl_kernel::gemm::sm90
