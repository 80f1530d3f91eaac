// SPDX-License-Identifier: Apache-2.0
// The first half of an RMSNorm over a row held in registers, shared by the RMSNorm kernels
// (csrc/elementwise/norm.cu) and the fused norm + quant kernel (csrc/quantization/
// norm_quant.cu): a row group of `tpr` threads (threadIdx.x; threadIdx.y picks the group)
// owns a row, kVpt 16-byte vectors per lane as 32-bit words, vector k of a lane at element
// offset col(k); exists(k) says whether that vector lies inside the row.
#pragma once

#include <cstdint>

#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"
#include "sgl_kernel/words.cuh"

namespace sgl_kernel {

// One 16-byte vector of a row (four 32-bit words of T): with kFused, x <- x + r rounded to T
// (the rounded sum, as the residual stream stores it, is what gets normalised). Returns acc
// plus the sum of squares of x's elements (fp32, in element order).
template <typename T, bool kFused>
__device__ __forceinline__ float add_sum_sq(Word4& x, const Word4& r, float acc) {
  using Wd = Words<T>;
  constexpr int kPer = Wd::kPer;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    if constexpr (kFused) x[q] = Wd::add(x[q], r[q]);
    float f[kPer];
    Wd::unpack(x[q], f);
#pragma unroll
    for (int e = 0; e < kPer; ++e) acc += f[e] * f[e];
  }
  return acc;
}

// The normalised vector x * scale * w (w -> 1 + w with kGemma) rounded to T.
template <typename T, bool kGemma>
__device__ __forceinline__ Word4 scale_vec(const Word4& x, const Word4& w, float scale) {
  using Wd = Words<T>;
  constexpr int kPer = Wd::kPer;
  Word4 o;
#pragma unroll
  for (int q = 0; q < 4; ++q) {
    float f[kPer], g[kPer];
    Wd::unpack(x[q], f);
    Wd::unpack(w[q], g);
#pragma unroll
    for (int e = 0; e < kPer; ++e) f[e] = f[e] * scale * (kGemma ? 1.0f + g[e] : g[e]);
    o[q] = Wd::pack(f);
  }
  return o;
}

// Loads the row (x), the residual (fused) and the weight (w) of this lane, all before any
// store; with kFused, x <- x + residual rounded to T and stored back to the residual. Returns
// the lane's sum of squares of x (fp32). kTrigger: the PDL trigger once the loads are issued
// (PdlTrigger::kAfterLoads); the fused op's residual loads then follow it.
// NOTE: a store to the output or the residual may alias the weight for all the compiler knows,
// so a weight load placed after a store waits out its full latency, one round trip per vector
// (16 vectors per lane, rmsnorm T=1 H=4096: 4.80 us against 1.62 with the weight loaded
// first; benchmark/elementwise/tune_rmsnorm.cu, "prod-k v16 chain" against "g v16 pre").
// NOTE (session 32): ptxas keeps the trigger in program order among the loads but schedules
// arithmetic across it. With the trigger after every load, the fused op's packed adds
// (Words<T>::add), which wait for the loaded data, went ahead of it: the kTpr instance at
// H=8192 (bf16, 1024-vector rows, up to 64 rows) read 1.566 / 1.748 -> 1.59 / 1.82 us at
// T = 1 / 16 (H200). With the residual loaded after it, nothing that waits for data can.
template <typename T, int kVpt, bool kFused, LoadPolicy kLoad = LoadPolicy::kDefault, bool kTrigger = false,
          typename Exists, typename Col>
__device__ __forceinline__ float load_row_sum_sq(const T* in, T* res, const T* weight, Word4 (&x)[kVpt],
                                                 Word4 (&w)[kVpt], Exists exists, Col col) {
  Word4 r[kFused ? kVpt : 1];
  auto load_residual = [&] {
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      if (exists(k)) r[k] = load_vec<Word4, kLoad>(res + col(k));
    }
  };
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    if (exists(k)) x[k] = load_vec<Word4, kLoad>(in + col(k));
  }
  if constexpr (kFused && !kTrigger) load_residual();
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    if (exists(k)) w[k] = load_vec<Word4>(weight + col(k));
  }
  if constexpr (kTrigger) SGL_PDL_LAUNCH_DEPENDENTS();
  if constexpr (kFused && kTrigger) load_residual();
  float sum_sq = 0.f;
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    if (exists(k)) {
      sum_sq = add_sum_sq<T, kFused>(x[k], r[kFused ? k : 0], sum_sq);
      // Stored at once: nothing later depends on the store.
      if constexpr (kFused) *reinterpret_cast<Word4*>(res + col(k)) = x[k];
    }
  }
  return sum_sq;
}

// Threads per row group for a row of hv 16-byte vectors at vpt vectors per lane (host side):
// the fewest that hold the row, a power of two below 32 (at least min_tpr, a power of two <= 32)
// or else a multiple of 32, provided every vector but each lane's last lies inside the row
// ((vpt - 1) * tpr <= hv, so a kernel bounds-checks only its last vector) and tpr <= max_threads
// (the register cap); 0 when there is none.
inline int row_group_threads(int64_t hv, int vpt, int min_tpr, int max_threads) {
  const int64_t need = (hv + vpt - 1) / vpt;
  int64_t tpr = min_tpr;
  if (need <= 32) {
    while (tpr < need) tpr *= 2;
  } else {
    tpr = (need + 31) / 32 * 32;
  }
  if (tpr > max_threads || (vpt - 1) * tpr > hv) return 0;
  return static_cast<int>(tpr);
}

// part[0] + ... + part[kN - 1] (kN = 2 * kHalf, a power of two) as part[i] + part[i + kHalf],
// halving: the order of an xor shuffle tree over kN lanes. A recursion, so that every index is
// a constant (a loop over the halves left the array in local memory in norm_quant.cu).
template <int kHalf, int kN>
__device__ __forceinline__ float halving_sum(float (&part)[kN]) {
  if constexpr (kHalf == 0) {
    return part[0];
  } else {
#pragma unroll
    for (int i = 0; i < kHalf; ++i) part[i] += part[i + kHalf];
    return halving_sum<kHalf / 2>(part);
  }
}

// Sum over the row group of tpr threads (a power of two below 32, or a multiple of 32): within
// the warp (groups below 32 threads are aligned lane ranges, so xor offsets below tpr stay
// inside the group), then across the group's warps behind a named barrier of its own (ids
// 1 + threadIdx.y: a group never waits for the rest of the block). `scratch`: shared memory,
// one float per warp of the block, 16-byte aligned. Every thread of the group must call it, rows
// past the end included. kTpr > 0: tpr == kTpr, known at compile time (see below).
template <int kTpr = 0>
__device__ __forceinline__ float row_group_sum(float v, int tpr, float* scratch) {
  if constexpr (kTpr > 0) tpr = kTpr;
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    if (offset < tpr) v += __shfl_xor_sync(0xffffffffu, v, offset);
  }
  if (tpr > 32) {
    const int warps = tpr >> 5;
    float* mine = scratch + threadIdx.y * warps;
    if ((threadIdx.x & 31) == 0) mine[threadIdx.x >> 5] = v;
    asm volatile("bar.sync %0, %1;" ::"r"(static_cast<int>(threadIdx.y) + 1), "r"(tpr) : "memory");
    // Run-time warp count: every warp adds the partials with one 5-step xor tree (float addition
    // commutes, so every lane of every warp ends with the same bits). kTpr: every lane adds them
    // all in registers in the order of the xor tree over `span` lanes (the warp count rounded up
    // to a power of two), zeros past the partials; the bits are the 5-step tree's, whose first
    // steps add zeros (exact: the partials are sums of squares, never -0).
    // NOTE (H200, tune_rmsnorm.cu / tune_norm_quant.cu --streams 64, bf16, three rounds, us at
    // T = 1 / 16 / 64 / 128):
    // - session 36, the kTpr path as the span-wide xor tree (3 shuffles for 8 warps instead of 5):
    //   the fused op's 256-thread H=8192 instance 1.53 / 1.71 / 1.87 / 2.36-2.37 -> 1.48 / 1.66 /
    //   1.84 / 2.35; bench_norm.py fused H=8192 T=128 2.36 -> 2.31. The same steps under run-time
    //   branches were slower (fused H=7168 1.45 / 1.61 / 1.74 / 2.19 -> 1.58 / 1.70 / 1.82 / 2.24).
    // - session 37, the kTpr path in registers (no shuffle after the barrier), the decode kernels
    //   given their warp count at compile time (norm.cu, norm_quant.cu): rmsnorm H=4096 (8 warps)
    //   1.15 / 1.24 / 1.35 / 1.54 -> 0.98 / 1.06 / 1.20 / 1.44, H=7168 (14, T=128: 7) 1.26 / 1.33
    //   / 1.55 / 1.91 -> 1.25 / 1.31 / 1.49 / 1.77, H=8192 T=128 (8) 2.02 -> 1.92; fused H=4096
    //   1.21 / 1.30 / 1.42 / 1.75 -> 1.16 / 1.28 / 1.37 / 1.66; the 256-thread H=8192 vector
    //   instance against its 3 shuffles: plain 1.28 / 1.35 / 1.57 -> 1.29 / 1.36 / 1.59 (T = 1 /
    //   16 / 64), fused within 0.01. norm + quant: norm_quant.cu launch_norm_decode_warps.
    if constexpr (kTpr > 0) {
      // Every lane reads all the partials (one address a load for the whole warp: a broadcast)
      // in the widest pieces their alignment allows (`scratch` 16-byte aligned), and adds them
      // in registers in the order the span-wide xor tree would: part[i] + part[i + half],
      // halving, zeros past kWarps. No shuffles after the barrier.
      constexpr int kWarps = kTpr / 32;
      constexpr int kSpan = kWarps <= 2 ? kWarps : kWarps <= 4 ? 4 : kWarps <= 8 ? 8 : kWarps <= 16 ? 16 : 32;
      constexpr int kPiece = kWarps % 4 == 0 ? 4 : kWarps % 2 == 0 ? 2 : 1;
      using Piece = Vec<float, kPiece>;
      float part[kSpan];
#pragma unroll
      for (int i = 0; i < kWarps; i += kPiece) {
        const Piece q = reinterpret_cast<const Piece*>(mine)[i / kPiece];
#pragma unroll
        for (int j = 0; j < kPiece; ++j) part[i + j] = q[j];
      }
#pragma unroll
      for (int i = kWarps; i < kSpan; ++i) part[i] = 0.f;
      v = halving_sum<kSpan / 2>(part);
    } else {
      const int lane = threadIdx.x & 31;
      v = lane < warps ? mine[lane] : 0.f;
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
    }
  }
  return v;
}

// Decode row layout (one row per block, <= 256 rows): warp w holds chunks w * kK .. w * kK +
// kK - 1 of the row, a chunk being 32 * kElems consecutive elements, kElems of each per lane,
// loaded as one vector (kElems = 4: 8 bytes of a 16-bit type, 16 of fp32). With no run-time
// layout choices left, the decode kernels of RMSNorm (norm.cu) and of norm + group quant
// (norm_quant.cu) built on it beat the row-group layout above by 0.1 us (RMSNorm) to 0.4 us
// (norm + quant) a call (H200; benchmark/quantization/tune_norm_quant.cu --norms 1 / --diag 1).
template <int kElems, int kK>
__device__ __forceinline__ int decode_col(int k, int warp) {
  return (warp * kK + k) * (32 * kElems) + static_cast<int>(threadIdx.x & 31) * kElems;
}
// (The chunk of this thread's own warp.)
template <int kElems, int kK>
__device__ __forceinline__ int decode_col(int k) {
  return decode_col<kElems, kK>(k, static_cast<int>(threadIdx.x >> 5));
}

// This lane's part of a row in the decode layout (fused: also the residual's), and of the
// weight where load_w, as loads only: decode_row_sum uses them. kv (warp-uniform): the warp's
// chunks inside the row; the input and residual of chunks past them are loaded from the warp's
// first chunk (unconditional loads, values unused: under a branch they were not issued ahead
// of the looping kernel's barrier, norm_quant.cu).
template <typename T, int kElems, int kK, bool kFused>
__device__ __forceinline__ void decode_row_fetch(const T* in, const T* res, const T* weight, bool load_w,
                                                 Vec<T, kElems> (&x)[kK], Vec<T, kElems> (&r)[kFused ? kK : 1],
                                                 Vec<T, kElems> (&w)[kK], int kv = kK) {
  using V = Vec<T, kElems>;
#pragma unroll
  for (int k = 0; k < kK; ++k) x[k] = load_vec<V>(in + decode_col<kElems, kK>(k < kv ? k : 0));
  if constexpr (kFused) {
#pragma unroll
    for (int k = 0; k < kK; ++k) r[k] = load_vec<V>(res + decode_col<kElems, kK>(k < kv ? k : 0));
  }
  if (load_w) {
#pragma unroll
    for (int k = 0; k < kK; ++k) w[k] = load_vec<V>(weight + decode_col<kElems, kK>(k));
  }
}

// a + b elementwise, rounded to T: Words<T>::add on each 32-bit word of the vector.
template <typename T, int kElems>
__device__ __forceinline__ Vec<T, kElems> add_rounded(const Vec<T, kElems>& a, const Vec<T, kElems>& b) {
  static_assert(sizeof(Vec<T, kElems>) % 4 == 0, "whole 32-bit words");
  constexpr int kW = static_cast<int>(sizeof(Vec<T, kElems>) / 4);
  Vec<T, kElems> s;
  const uint32_t* aw = reinterpret_cast<const uint32_t*>(&a);
  const uint32_t* bw = reinterpret_cast<const uint32_t*>(&b);
  uint32_t* sw = reinterpret_cast<uint32_t*>(&s);
#pragma unroll
  for (int q = 0; q < kW; ++q) sw[q] = Words<T>::add(aw[q], bw[q]);
  return s;
}

// The row in fp32 from decode_row_fetch's loads (fused: input + residual rounded to T, stored
// into the residual at `res` where store_res), and this lane's sum of squares of it. kv
// (warp-uniform): the warp's chunks inside the row; past them f is 0 and nothing is stored.
template <typename T, int kElems, int kK, bool kFused>
__device__ __forceinline__ float decode_row_sum(const Vec<T, kElems> (&x)[kK], const Vec<T, kElems> (&r)[kFused ? kK : 1],
                                                T* res, bool store_res, float (&f)[kK][kElems], int kv = kK) {
  using V = Vec<T, kElems>;
  float sum_sq = 0.f;
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    V sum;
    if constexpr (kFused) sum = add_rounded(x[k], r[kFused ? k : 0]);
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      if constexpr (kFused) {
        f[k][e] = to_float(sum[e]);
      } else {
        f[k][e] = to_float(x[k][e]);
      }
      if (k >= kv) f[k][e] = 0.f;
      sum_sq += f[k][e] * f[k][e];
    }
    if constexpr (kFused) {
      if (store_res && k < kv) {
        // (16-byte vectors through store_vec: a struct copy may split them; the 8-byte ones
        // keep the struct copy, whose schedule was measured.)
        if constexpr (sizeof(V) == 16) {
          store_vec(res + decode_col<kElems, kK>(k), sum);
        } else {
          *reinterpret_cast<V*>(res + decode_col<kElems, kK>(k)) = sum;
        }
      }
    }
  }
  return sum_sq;
}

// decode_row_load's step between the lane's sum of squares and the block's: none.
struct NoPreSum {
  template <typename F>
  __device__ __forceinline__ void operator()(F&) const {}
};

// Loads this lane's part of the row (fused: input + residual rounded to T, stored back into the
// residual) and of the weight, all loads before any store; f: the row in fp32. Returns the
// row's sum of squares, summed over the block (every thread of the block must call it).
// owned = false (warp-uniform; split rows, where several blocks read a row for its sum and
// each writes its own part): the warp loads no weight and stores no residual. kTrigger: the PDL
// trigger once the loads are issued (PdlTrigger::kAfterLoads). pre_sum(f): run once the lane's
// sum of squares is formed, before the block's (work that needs no scale, e.g. f * w).
// kWarps > 0: blockDim.x == 32 * kWarps, the block's sum taken by row_group_sum<32 * kWarps>.
template <typename T, int kElems, int kK, bool kFused, bool kTrigger = false, int kWarps = 0,
          typename PreSum = NoPreSum>
__device__ __forceinline__ float decode_row_load(const T* in, T* res, const T* weight, float (&f)[kK][kElems],
                                                 Vec<T, kElems> (&w)[kK], float* scratch, bool owned = true,
                                                 PreSum pre_sum = PreSum{}) {
  using V = Vec<T, kElems>;
  V x[kK], r[kFused ? kK : 1];
  decode_row_fetch<T, kElems, kK, kFused>(in, res, weight, owned, x, r, w);
  if constexpr (kTrigger) SGL_PDL_LAUNCH_DEPENDENTS();
  const float sum_sq = decode_row_sum<T, kElems, kK, kFused>(x, r, res, owned, f);
  pre_sum(f);
  return row_group_sum<kWarps * 32>(sum_sq, static_cast<int>(blockDim.x), scratch);
}

}  // namespace sgl_kernel
