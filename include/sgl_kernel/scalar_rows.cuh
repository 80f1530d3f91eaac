// SPDX-License-Identifier: Apache-2.0
// Block-per-row scalar kernels: the fallbacks for any row length, stride and alignment
// (rmsnorm_scalar_kernel in csrc/elementwise/norm.cu, per_token_scalar_kernel in
// csrc/quantization/row_quant.cu, norm_quant_scalar_kernel in csrc/quantization/norm_quant.cu).
// A thread loads kScalarBatch elements, blockDim.x apart, before it uses any of them: a load
// that comes after a store the compiler cannot prove disjoint (the fused residual, the codes)
// waits for it, so a loop of one element at a time has a single load in flight per thread.
// NOTE (H100, session 21, bf16, a CUDA graph of back-to-back calls, us; 256 threads and one
// element at a time before): rmsnorm, rows one element past a 16-byte boundary, T=1 H=16384
// 23.4 -> 5.3, T=16 / 128 H=4096 6.7 / 6.8 -> 2.3 / 2.9, T=32768 346 -> 260; per-token fp8
// H=4100 (no 16-byte rows) T=16 5.0 -> 2.6, T=32768 338 -> 265; fused rmsnorm + group quant,
// row stride H + 3, T=16 H=7168 12.7 -> 4.6.
#pragma once

#include <cstdint>

#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/types.cuh"

namespace sgl_kernel {

constexpr int kScalarBatch = 4;

// Threads a block: enough for one batch of the row, in whole warps, at most 1024 for up to 256
// rows (few rows: each block holds a row's whole latency) and 256 beyond (more blocks an SM).
inline int scalar_row_threads(int64_t rows, int64_t hidden) {
  const int64_t cap = rows <= 256 ? 1024 : 256;
  const int64_t want = ceil_div<int64_t>(ceil_div<int64_t>(hidden, kScalarBatch), 32) * 32;
  return static_cast<int>(want < 32 ? 32 : (want > cap ? cap : want));
}

// Many short rows (one batch of a warp each: hidden <= 128) take a warp a row, kScalarWarpRowsBlock
// / 32 rows a block, instead of a one-warp block a row: the block scheduler, not the memory, set
// the pace of a block a row (a million rows of 128: about 1.2 ns a block). NOTE (H100, session
// 22, bf16 rows one element past a 16-byte boundary, a CUDA graph of back-to-back calls, us, a
// block a row -> a warp a row): rmsnorm 2^20 x 128 1263 -> 241, fused_add_rmsnorm 1268 -> 412,
// per-token fp8 2^20 x 100 1266 -> 311; rmsnorm 1024 / 512 rows of 128 2.07 / 1.61 -> 1.52 /
// 1.46, per-token 1024 rows of 100 3.09 -> 1.54; 257 rows 1.53 against 1.62 for 256 on the
// block-a-row kernel.
constexpr int64_t kScalarWarpRowsMin = 256;
constexpr int kScalarWarpRowsBlock = 256;
inline bool scalar_warp_rows(int64_t rows, int64_t hidden) {
  return rows > kScalarWarpRowsMin && hidden <= 32 * kScalarBatch;
}

// The row and this thread's place in it: kWarpRows, warp w of block b holds row b * warps + w
// (lane = the thread's index in the row, 32 = its stride); else block b holds row b.
template <bool kWarpRows>
struct ScalarRow {
  int64_t row, tid, step;
  __device__ __forceinline__ ScalarRow() {
    if constexpr (kWarpRows) {
      row = static_cast<int64_t>(blockIdx.x) * (blockDim.x >> 5) + (threadIdx.x >> 5);
      tid = threadIdx.x & 31;
      step = 32;
    } else {
      row = blockIdx.x;
      tid = threadIdx.x;
      step = blockDim.x;
    }
  }
};

// f[u] = src[j0 + u * step] as float, 0 past n.
template <typename T>
__device__ __forceinline__ void load_scalar_batch(const T* src, int64_t j0, int64_t step, int64_t n,
                                                  float (&f)[kScalarBatch]) {
#pragma unroll
  for (int u = 0; u < kScalarBatch; ++u) {
    const int64_t j = j0 + u * step;
    f[u] = j < n ? to_float(src[j]) : 0.f;
  }
}

// The first pass of an RMSNorm over a row of `hidden` elements by `step` threads (element j to
// thread j % step; this one is tid): this thread's sum of squares, in element order. kFused:
// the row is in + res, rounded to T and stored to res first (the residual stream's value).
template <typename T, bool kFused>
__device__ __forceinline__ float scalar_row_sum_sq(const T* in, T* res, int64_t hidden, int64_t tid, int64_t step) {
  float sum_sq = 0.f;
  for (int64_t j0 = tid; j0 < hidden; j0 += step * kScalarBatch) {
    float f[kScalarBatch], r[kScalarBatch];
    load_scalar_batch(in, j0, step, hidden, f);
    if constexpr (kFused) load_scalar_batch<T>(res, j0, step, hidden, r);
#pragma unroll
    for (int u = 0; u < kScalarBatch; ++u) {
      const int64_t j = j0 + u * step;
      if (j < hidden) {
        if constexpr (kFused) {
          const T s = from_float<T>(f[u] + r[u]);
          res[j] = s;
          f[u] = to_float(s);
        }
        sum_sq += f[u] * f[u];
      }
    }
  }
  return sum_sq;
}

}  // namespace sgl_kernel
