// SPDX-License-Identifier: Apache-2.0
// RMSNorm family: rmsnorm, fused_add_rmsnorm, gemma_rmsnorm, gemma_fused_add_rmsnorm.
//
// Per row x (fp32): r = rsqrt(mean(x^2) + eps); out = x * r * w (w -> 1 + w for Gemma).
// Fused: residual <- residual + input (rounded to T and stored), then input <- norm(residual).
//
// Vector path (hidden % kVec == 0, every pointer and row stride 16-byte aligned, hidden up to
// 32768 halves / 16384 floats): a group of kThreadsPerRow threads (a warp for rows up to 4096
// halves) owns one row and keeps it in registers (kVpt 16-byte vectors per thread), so the
// row is read once and written once; groups narrower than a block share it (kRowsPerBlock
// rows per block). Otherwise a block-per-row scalar path re-reads the row (from L2).
#include <algorithm>
#include <cstdint>

#include "elementwise/elementwise.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/reduce.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::elementwise {

namespace {

__device__ __forceinline__ int64_t row_offset(const RowStrides& s, uint32_t outer, uint32_t inner) {
  return static_cast<int64_t>(outer) * s.outer + static_cast<int64_t>(inner) * s.inner;
}

// Sum over the kThreadsPerRow threads of one row group (threadIdx.y selects the group).
// `scratch` holds kRowsPerBlock * (kThreadsPerRow / 32) floats; contains __syncthreads() when
// a row spans more than one warp, so every thread of the block must call it.
template <int kThreadsPerRow>
__device__ __forceinline__ float row_reduce_sum(float v, float* scratch) {
  if constexpr (kThreadsPerRow <= 32) {
#pragma unroll
    for (int offset = kThreadsPerRow / 2; offset > 0; offset >>= 1) {
      v += __shfl_xor_sync(0xffffffffu, v, offset, kThreadsPerRow);
    }
    return v;
  } else {
    constexpr int kWarps = kThreadsPerRow / 32;
    v = warp_reduce_sum(v);
    float* mine = scratch + threadIdx.y * kWarps;
    if ((threadIdx.x & 31) == 0) mine[threadIdx.x >> 5] = v;
    __syncthreads();
    float total = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) total += mine[w];
    return total;
  }
}

// Rows per block: 256-thread blocks, or 128 when a thread holds 16 vectors (~160 registers:
// smaller blocks keep three of them resident per SM instead of one).
template <int kThreadsPerRow, int kVpt>
constexpr int rows_per_block() {
  return std::max(1, (kVpt >= 16 ? 128 : 256) / kThreadsPerRow);
}

template <typename T, int kThreadsPerRow, int kVpt, bool kFused, bool kGemma>
__global__ void __launch_bounds__(kThreadsPerRow * rows_per_block<kThreadsPerRow, kVpt>())
    rmsnorm_vec_kernel(const RmsNormParams<T> p, const FastDivmod rows_inner) {
  constexpr int kVec = kVec16<T>;
  constexpr int kRowsPerBlock = rows_per_block<kThreadsPerRow, kVpt>();
  // Plain loads: the fused kernel writes input and residual (no read-only path), and for the
  // streaming case plain loads measured as fast or faster (activation sweep).
  constexpr LoadPolicy kLoad = LoadPolicy::kDefault;
  __shared__ float scratch[kRowsPerBlock * std::max(1, kThreadsPerRow / 32)];

  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  const bool row_valid = row < p.rows;
  uint32_t outer = 0, inner = 0;
  if (row_valid) rows_inner.divmod(static_cast<uint32_t>(row), outer, inner);
  const int64_t hidden_vec = p.hidden / kVec;

  SGL_PDL_WAIT();  // before any input is read (the weight included)
  // NOTE: with few vectors per lane the weight is loaded with the row, before any store: a
  // store to `out` or `residual` may alias `weight` for all the compiler knows, so a weight
  // load placed after a store waits its full latency. With 16 vectors per lane the same
  // preload costs ~100 registers (255 and spills), so there the weight is read in the output
  // loop; those configurations only run for many rows, where other warps hide the latency.
  constexpr bool kPreloadWeight = kVpt <= 4;
  Vec16<T> w[kPreloadWeight ? kVpt : 1];
  if constexpr (kPreloadWeight) {
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t v = threadIdx.x + static_cast<int64_t>(k) * kThreadsPerRow;
      if (v < hidden_vec) w[k] = load16(p.weight + v * kVec);
    }
  }
  Vec16<T> x[kVpt];
  float sum_sq = 0.f;
  if (row_valid) {
    const T* in = p.input + row_offset(p.input_rows, outer, inner);
    T* res = kFused ? p.residual + row_offset(p.residual_rows, outer, inner) : nullptr;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t v = threadIdx.x + static_cast<int64_t>(k) * kThreadsPerRow;
      if (v < hidden_vec) {
        x[k] = load16<T, kLoad>(in + v * kVec);
        if constexpr (kFused) {
          const Vec16<T> r = load16<T, kLoad>(res + v * kVec);
#pragma unroll
          for (int e = 0; e < kVec; ++e) x[k][e] = from_float<T>(to_float(x[k][e]) + to_float(r[e]));
        }
      }
    }
    // The sum is rounded (as the stored residual stream is), and that rounded value is what
    // gets normalised.
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t v = threadIdx.x + static_cast<int64_t>(k) * kThreadsPerRow;
      if (v < hidden_vec) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const float f = to_float(x[k][e]);
          sum_sq += f * f;
        }
      }
    }
  }
  sum_sq = row_reduce_sum<kThreadsPerRow>(sum_sq, scratch);
  if (row_valid) {
    const float r = rsqrtf(sum_sq / static_cast<float>(p.hidden) + p.eps);
    T* out = p.out + row_offset(p.out_rows, outer, inner);
    T* res = kFused ? p.residual + row_offset(p.residual_rows, outer, inner) : nullptr;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t v = threadIdx.x + static_cast<int64_t>(k) * kThreadsPerRow;
      if (v < hidden_vec) {
        if constexpr (kFused) store16(res + v * kVec, x[k]);
        const Vec16<T> wk = kPreloadWeight ? w[kPreloadWeight ? k : 0] : load16(p.weight + v * kVec);
        Vec16<T> o;
#pragma unroll
        for (int e = 0; e < kVec; ++e) {
          const float wf = kGemma ? 1.0f + to_float(wk[e]) : to_float(wk[e]);
          o[e] = from_float<T>(to_float(x[k][e]) * r * wf);
        }
        store16(out + v * kVec, o);
      }
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

// Any hidden size and alignment: a block per row, two passes over the row.
template <typename T, bool kFused, bool kGemma>
__global__ void __launch_bounds__(256) rmsnorm_scalar_kernel(const RmsNormParams<T> p, const FastDivmod rows_inner) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  uint32_t outer, inner;
  rows_inner.divmod(static_cast<uint32_t>(row), outer, inner);
  const T* in = p.input + row_offset(p.input_rows, outer, inner);
  T* res = kFused ? p.residual + row_offset(p.residual_rows, outer, inner) : nullptr;
  T* out = p.out + row_offset(p.out_rows, outer, inner);

  SGL_PDL_WAIT();
  float sum_sq = 0.f;
  for (int64_t j = threadIdx.x; j < p.hidden; j += blockDim.x) {
    float f = to_float(in[j]);
    if constexpr (kFused) {
      const T s = from_float<T>(f + to_float(res[j]));
      res[j] = s;
      f = to_float(s);
    }
    sum_sq += f * f;
  }
  sum_sq = block_reduce_sum(sum_sq, scratch);
  const float r = rsqrtf(sum_sq / static_cast<float>(p.hidden) + p.eps);
  // Each thread re-reads only the elements it wrote itself (fused), so no barrier is needed.
  for (int64_t j = threadIdx.x; j < p.hidden; j += blockDim.x) {
    const float f = to_float(kFused ? res[j] : in[j]);
    const float wf = kGemma ? 1.0f + to_float(p.weight[j]) : to_float(p.weight[j]);
    out[j] = from_float<T>(f * r * wf);
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

template <typename T, int kThreadsPerRow, int kVpt, bool kFused, bool kGemma>
cudaError_t launch_vec(const RmsNormParams<T>& p, const FastDivmod& rows_inner, cudaStream_t stream) {
  constexpr int kRowsPerBlock = rows_per_block<kThreadsPerRow, kVpt>();
  const dim3 grid(static_cast<uint32_t>(ceil_div<int64_t>(p.rows, kRowsPerBlock)));
  const dim3 block(kThreadsPerRow, kRowsPerBlock);
  return launch_kernel(rmsnorm_vec_kernel<T, kThreadsPerRow, kVpt, kFused, kGemma>, grid, block, 0, stream,
                       p.enable_pdl, p, rows_inner);
}

bool aligned16(const RowStrides& s, int kVec) { return s.outer % kVec == 0 && s.inner % kVec == 0; }

template <typename T, bool kFused, bool kGemma>
cudaError_t launch_variant(const RmsNormParams<T>& p, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  const FastDivmod rows_inner(static_cast<uint32_t>(p.rows_inner));
  const bool vec_ok = p.hidden % kVec == 0 && is_aligned16(p.out) && is_aligned16(p.input) &&
                      is_aligned16(p.weight) && aligned16(p.out_rows, kVec) && aligned16(p.input_rows, kVec) &&
                      (!kFused || (is_aligned16(p.residual) && aligned16(p.residual_rows, kVec)));
  if (vec_ok) {
    const int64_t v = p.hidden / kVec;  // 16-byte vectors per row
    // NOTE (H200, bf16): many rows: one warp per row up to 16 vectors per lane (4096 halves),
    // no block barrier between a warp's loads and stores: rmsnorm T=32768 H=4096 3943 GB/s,
    // where 256 threads x 2 vectors per row with a block barrier reached 1916 GB/s. Few rows
    // (decode): 2 vectors per lane over more threads, weight preloaded: T=1 H=4096 2.0 us,
    // where a warp per row took 4.7 us.
    if (p.rows > 256) {
      if (v <= 32) return launch_vec<T, 32, 1, kFused, kGemma>(p, rows_inner, stream);
      if (v <= 64) return launch_vec<T, 32, 2, kFused, kGemma>(p, rows_inner, stream);
      if (v <= 128) return launch_vec<T, 32, 4, kFused, kGemma>(p, rows_inner, stream);
      if (v <= 256) return launch_vec<T, 32, 8, kFused, kGemma>(p, rows_inner, stream);
      if (v <= 512) return launch_vec<T, 32, 16, kFused, kGemma>(p, rows_inner, stream);
      if (v <= 1024) return launch_vec<T, 64, 16, kFused, kGemma>(p, rows_inner, stream);
      if (v <= 2048) return launch_vec<T, 128, 16, kFused, kGemma>(p, rows_inner, stream);
      if (v <= 4096) return launch_vec<T, 256, 16, kFused, kGemma>(p, rows_inner, stream);
    } else {
      if (v <= 64) return launch_vec<T, 32, 2, kFused, kGemma>(p, rows_inner, stream);
      if (v <= 128) return launch_vec<T, 64, 2, kFused, kGemma>(p, rows_inner, stream);
      if (v <= 256) return launch_vec<T, 128, 2, kFused, kGemma>(p, rows_inner, stream);
      if (v <= 512) return launch_vec<T, 256, 2, kFused, kGemma>(p, rows_inner, stream);
      if (v <= 1024) return launch_vec<T, 512, 2, kFused, kGemma>(p, rows_inner, stream);
      if (v <= 2048) return launch_vec<T, 1024, 2, kFused, kGemma>(p, rows_inner, stream);
      if (v <= 4096) return launch_vec<T, 1024, 4, kFused, kGemma>(p, rows_inner, stream);
    }
  }
  return launch_kernel(rmsnorm_scalar_kernel<T, kFused, kGemma>, dim3(static_cast<uint32_t>(p.rows)), dim3(256), 0,
                       stream, p.enable_pdl, p, rows_inner);
}

}  // namespace

template <typename T>
cudaError_t launch_rmsnorm(const RmsNormParams<T>& p, cudaStream_t stream) {
  if (p.rows == 0 || p.hidden == 0) return cudaSuccess;
  if (p.rows >= (int64_t{1} << 31) || p.rows_inner < 1) return cudaErrorInvalidValue;
  const bool fused = p.residual != nullptr;
  if (fused) {
    return p.gemma ? launch_variant<T, true, true>(p, stream) : launch_variant<T, true, false>(p, stream);
  }
  return p.gemma ? launch_variant<T, false, true>(p, stream) : launch_variant<T, false, false>(p, stream);
}

template cudaError_t launch_rmsnorm<float>(const RmsNormParams<float>&, cudaStream_t);
template cudaError_t launch_rmsnorm<half>(const RmsNormParams<half>&, cudaStream_t);
template cudaError_t launch_rmsnorm<__nv_bfloat16>(const RmsNormParams<__nv_bfloat16>&, cudaStream_t);

}  // namespace sgl_kernel::elementwise
