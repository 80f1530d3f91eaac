// SPDX-License-Identifier: Apache-2.0
// RMSNorm family: rmsnorm, fused_add_rmsnorm, gemma_rmsnorm, gemma_fused_add_rmsnorm.
//
// Per row x (fp32): r = rsqrt(mean(x^2) + eps); out = x * r * w (w -> 1 + w for Gemma).
// Fused: residual <- residual + input (rounded to T and stored), then input <- norm(residual).
//
// Vector path (hidden % kVec == 0, every pointer and row stride 16-byte aligned, hidden up to
// 32768 halves / 16384 floats): a group of `tpr` threads (threadIdx.x; a run-time count, a
// power of two below 32 or a multiple of 32) owns one row and keeps it in registers, kVpt
// 16-byte vectors per thread (compile time), so the row is read once and written once; groups
// narrower than 128 threads share a block (threadIdx.y picks the group). Otherwise a
// block-per-row scalar path re-reads the row (from L2). Decode batches (<= 256 rows) of
// hidden sizes that are multiples of 512 take a kernel of their own (rmsnorm_decode_kernel),
// and from 16384 rows the fused op's long vector-aligned rows a two-pass kernel
// (rmsnorm_twopass_kernel: a block per row reads it twice, the second time from the cache,
// holding few registers; rows of 640-896 vectors are one chunk of it, held in registers), the
// plain op's the vector kernel with L2 evict_last loads. Rows of exactly one block shape take
// rmsnorm_exact_kernel there instead: the plain op at 640 and 768 vectors, the fused op at 1024.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "elementwise/elementwise.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/cluster.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/reduce.cuh"
#include "sgl_kernel/row_norm.cuh"
#include "sgl_kernel/scalar_rows.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"
#include "sgl_kernel/words.cuh"

namespace sgl_kernel::elementwise {

namespace {

__device__ __forceinline__ int64_t row_offset(const RowStrides& s, uint32_t outer, uint32_t inner) {
  return static_cast<int64_t>(outer) * s.outer + static_cast<int64_t>(inner) * s.inner;
}

// Per vectors-per-lane configuration: the register cap and the largest row group (threads
// per row) the launcher may use with it (cap * threads must fit the SM's 64K registers).
// 2: 64 registers (1024-thread rows); 4: 96; 6, 8 and 9: 128; 12 and 16: uncapped (ptxas takes
// up to 255, so at most 256 threads per row).
constexpr int vec_max_regs(int vpt) { return vpt <= 2 ? 64 : vpt <= 4 ? 96 : vpt <= 9 ? 128 : 255; }
constexpr int vec_max_threads(int vpt) { return vpt <= 2 ? 1024 : vpt <= 9 ? 512 : 256; }

// Row groups per block: 128-thread blocks, or one group when a row takes more threads.
constexpr int kVecBlockThreads = 128;

// Lane `lane` of a row group of `tpr` threads holds vectors lane + k * tpr, k < kVpt. The
// launcher picks tpr with (kVpt - 1) * tpr <= hidden / kVec <= kVpt * tpr, so every vector but
// the last (k = kVpt - 1) exists in every lane: only that one is bounds-checked.
// kTpr > 0: the row is exactly kVpt * kTpr vectors and the group kTpr threads (the launcher
// checks), known at compile time: no bounds check, constant offsets, an inlined group sum.
// kTrig: where the PDL trigger goes (sgl_kernel/arch.cuh; kAfterLoads: in load_row_sum_sq).
// kLoad: the cache policy of the row's loads (input and residual; the weight's are plain).
// Read-only (.nc) loads are out: the fused kernel writes input and residual.
template <typename T, int kVpt, bool kFused, bool kGemma, int kTpr = 0, PdlTrigger kTrig = PdlTrigger::kEarly,
          LoadPolicy kLoad = LoadPolicy::kDefault>
__global__ void __launch_bounds__(vec_max_threads(kVpt)) __maxnreg__(vec_max_regs(kVpt))
    rmsnorm_vec_kernel(const RmsNormParams<T> p, const FastDivmod rows_inner) {
  constexpr int kVec = kVec16<T>;
  __shared__ __align__(16) float scratch[32];  // one partial sum per warp of the block

  const int lane = threadIdx.x;
  const int tpr = kTpr > 0 ? kTpr : static_cast<int>(blockDim.x);
  const int hv = static_cast<int>(p.hidden / kVec);  // <= 4096 (launcher)
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  // Rows past the end still take part in the shuffles and the barrier (no early exit: a
  // warp may hold several row groups).
  const bool row_valid = row < p.rows;
  const bool has_last = kTpr > 0 || lane + (kVpt - 1) * tpr < hv;
  auto exists = [&](int k) { return k < kVpt - 1 || has_last; };
  auto col = [&](int k) { return (lane + k * tpr) * kVec; };  // element offset of vector k
  uint32_t outer = 0, inner = 0;
  if (row_valid) rows_inner.divmod(static_cast<uint32_t>(row), outer, inner);
  const T* in = p.input + row_offset(p.input_rows, outer, inner);
  T* res = kFused ? p.residual + row_offset(p.residual_rows, outer, inner) : nullptr;
  T* out = p.out + row_offset(p.out_rows, outer, inner);

  // Before any input is read (the weight included). The decode instances (kTpr > 0) prefetch
  // the lane's first input and weight vectors first (pdl_wait_prefetched; rows past the end
  // point at row 0); the many-row ones do not: with it the plain op at T=32768 H=4096 fell from
  // ~4250 to 3332 GB/s (session 19).
  if constexpr (kTpr > 0) {
    pdl_wait_prefetched(in + col(0), p.weight + col(0));
  } else {
    SGL_PDL_WAIT();
  }
  if constexpr (kTrig == PdlTrigger::kEarly) SGL_PDL_LAUNCH_DEPENDENTS();
  Word4 x[kVpt], w[kVpt];
  float sum_sq = 0.f;
  constexpr bool kMid = kTrig == PdlTrigger::kAfterLoads;
  if (row_valid) sum_sq = load_row_sum_sq<T, kVpt, kFused, kLoad, kMid>(in, res, p.weight, x, w, exists, col);
  // (tpr > 32: at most 2 row groups per 128-thread block, named barriers 1 and 2.)
  sum_sq = row_group_sum<kTpr>(sum_sq, tpr, scratch);
  if (row_valid) {
    const float scale = rsqrtf(sum_sq / static_cast<float>(p.hidden) + p.eps);
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      if (exists(k)) *reinterpret_cast<Word4*>(out + col(k)) = scale_vec<T, kGemma>(x[k], w[k], scale);
    }
  }
  if constexpr (kTrig == PdlTrigger::kLate) SGL_PDL_LAUNCH_DEPENDENTS();
}

// Decode kernel (<= 256 rows, hidden a multiple of 512 up to 8192 (fused: 7168), pointers and
// row strides aligned to 4 elements): a block per row in the decode layout of sgl_kernel/row_norm.cuh
// (warp w: four 128-element chunks, 8-byte vectors of 16-bit types, 16-byte of fp32; kK = 2 or 1
// chunks for rows of a multiple of 256 or 128 elements from 1024: decode_chunks; kK = 8 for
// 16-bit rows of 6144-8192 at some row counts, the fused op's 8192 included: kDec8Rows).
// NOTE (H200, bf16, PDL on; benchmark/quantization/tune_norm_quant.cu --norms 1, "n4k4"
// against "rmsnorm" = the vector kernel below): rmsnorm T=1/16/128 H=4096 1.18/1.25/1.57 us
// (1.27/1.34/1.70), H=7168 1.49/1.58/2.03 (1.56/1.62/2.13), H=8192 1.52/1.63/2.14 (1.57/1.67/
// 2.23); fused H=4096 1.37/1.51/1.85 (1.48/1.62/1.96), H=8192 1.85/2.07/2.57 (1.81/2.05/2.59).
// The fused op at H=8192 is no faster here, and bench_norm.py measured it slower (T=1/16/128
// 2.00/2.13/2.70 us against 1.83/2.06/2.67 for the vector kernel), so the fused op takes this
// kernel up to H=7168 and the plain one up to H=8192 (larger rows were not measured). In
// sessions 33-36 16-bit plain rows of 8192 took the vector kernel (kVec1024EarlyRows' NOTE);
// since session 37 they take this kernel at 8 chunks a warp (kDec8Rows).
// 16-byte vectors with four chunks a warp ("n8k4") were 0.05-0.09 us faster for rmsnorm at
// H=8192 and slower elsewhere; splitting a row over a 2-8 CTA cluster cost more in cluster
// barriers than it saved below H=8192 (fused H=8192 T=1 1.58 with 8 CTAs).
constexpr int kDecodeElems = 4, kDecodeChunks = 4;  // per lane: 4 chunks of 4 elements
constexpr int kDecodeRowElems = 32 * kDecodeElems * kDecodeChunks;  // a warp's share of a row: 512
constexpr int64_t kDecodeMaxHidden[2] = {8192, 7168};  // [fused]
// Rows that are a multiple of 128 elements but not of 512 (bf16 H=1152, 2304, 3840, 5376: Gemma
// 2 and 3) take the same kernel with 2 chunks a warp where 256 divides the row, else 1, from
// kDecodeShortChunksMin elements (below it the vector kernel's multi-row blocks serve short rows,
// q/k norms over heads included). Before, they took the vector kernel at 1.5-3 vectors a lane.
// NOTE (H100, bench_norm.py --models, T=16, us, before -> after): bf16 H=2304 plain 1.46 ->
// 1.20, fused 1.55 -> 1.42 (H=2048 and 2560, 4 chunks a warp: 1.20 / 1.27 plain, 1.42 fused).
// H=1152 after: 0.99 / 1.41; H=3840 1.38 / 1.43; H=5376 1.43 / 1.60 (1.4-1.8x torch.compile).
constexpr int64_t kDecodeShortChunksMin = 1024;

// Chunks of 32 * kDecodeElems elements a warp of the decode kernel holds for a row of `hidden`
// elements; 0 where it does not apply.
int decode_chunks(int64_t hidden) {
  constexpr int64_t kChunk = 32 * kDecodeElems;
  if (hidden % kDecodeRowElems == 0) return kDecodeChunks;
  if (hidden < kDecodeShortChunksMin) return 0;
  if (hidden % (2 * kChunk) == 0) return 2;
  return hidden % kChunk == 0 && hidden <= 32 * kChunk ? 1 : 0;  // at most 32 warps
}

//
// kCluster (sm90+): a cluster of blocks per row, block r of it holding the r-th slice of
// blockDim.x / 32 * 512 elements; the blocks' sums of squares are added through distributed
// shared memory in rank order (cluster_reduce), so every block gets the same scale.
// kTrig: the PDL trigger right after the wait (the launcher's choice) or once the loads are issued.
// kE, kK: elements a lane loads at a time and chunks a warp (the decode layout's; a warp holds
// 32 * kE * kK elements of the row). kWarps > 0: the block's warps (blockDim.x / 32), compiled in
// (row_group_sum<32 * kWarps>: no shuffles after the barrier).
template <typename T, bool kFused, bool kGemma, bool kCluster = false, PdlTrigger kTrig = PdlTrigger::kEarly,
          int kE = kDecodeElems, int kK = kDecodeChunks, int kWarps = 0>
__global__ void __launch_bounds__(1024) rmsnorm_decode_kernel(const RmsNormParams<T> p, const FastDivmod rows_inner) {
  __shared__ __align__(16) float scratch[32];
  uint32_t row = blockIdx.x, rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kCluster) {
    const uint32_t cs = cooperative_groups::this_cluster().num_blocks();
    row = blockIdx.x / cs;
    rank = blockIdx.x % cs;
  }
#elif defined(__CUDA_ARCH__)
  if constexpr (kCluster) __trap();  // no clusters below sm90: cluster_launchable refuses this code
#endif
  const int64_t part = static_cast<int64_t>(rank) * (blockDim.x / 32) * (32 * kE * kK);  // this block's slice
  uint32_t outer, inner;
  rows_inner.divmod(row, outer, inner);
  const T* in = p.input + row_offset(p.input_rows, outer, inner) + part;
  T* res = kFused ? p.residual + row_offset(p.residual_rows, outer, inner) + part : nullptr;
  T* out = p.out + row_offset(p.out_rows, outer, inner) + part;
  // The thread's first input and weight vectors (always inside the row).
  pdl_wait_prefetched(in + decode_col<kE, kK>(0), p.weight + part + decode_col<kE, kK>(0));
  static_assert(kTrig != PdlTrigger::kLate, "not measured");
  if constexpr (kTrig == PdlTrigger::kEarly) SGL_PDL_LAUNCH_DEPENDENTS();
  float f[kK][kE];
  Vec<T, kE> w[kK];
  // The fused op: f <- f * w (Gemma: f * (1 + w)) before the block's sum is reduced, so that
  // these products fill the stalls of its shuffles and barrier, and after it only f * scale is
  // rounded and stored. ((f * w) * scale rounds differently from (f * scale) * w in the last
  // fp32 bit, before the rounding to T.)
  // NOTE (session 36, H200, tune_rmsnorm.cu --streams 64, bf16, "prod" before / after, three
  // rounds each on two machines, us at T = 1 / 16 / 64 / 128): fused H=7168 1.49-1.51 / 1.65 /
  // 1.79 / 2.18-2.19 -> 1.45-1.47 / 1.61 / 1.74 / 2.19-2.20 and 1.57-1.58 / 1.63-1.64 /
  // 1.76-1.78 / 2.36-2.38 -> 1.53-1.54 / 1.59-1.60 / 1.71-1.73 / 2.36-2.37; H=4096 within 0.01.
  // The plain op lost with it (H=8192 T=128 2.01 -> 2.12-2.13, H=7168 1.89 -> 2.04-2.05: its
  // sum needs only the input, so the weight's loads were still in flight when the products
  // waited for them), and with the weight loaded before the input as well (2.08-2.09); so did
  // the fused norm + quant decode kernel (norm_quant.cu; H=7168 T=128 2.26-2.27 -> 2.28,
  // column-major scales 2.39-2.41 -> 2.41-2.43, T=1 0.01-0.02 faster). The vector kernel's
  // fused H=8192 rows moved by at most 0.02 with it: not taken there.
  auto weigh = [&](float (&v)[kK][kE]) {
    if constexpr (kFused) {
#pragma unroll
      for (int k = 0; k < kK; ++k) {
#pragma unroll
        for (int e = 0; e < kE; ++e) {
          const float g = to_float(w[k][e]);
          v[k][e] *= kGemma ? 1.0f + g : g;
        }
      }
    }
  };
  float sum_sq = decode_row_load<T, kE, kK, kFused, kTrig == PdlTrigger::kAfterLoads, kWarps>(
      in, res, p.weight + part, f, w, scratch, true, weigh);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kCluster) {
    __shared__ float partial[kMaxClusterBlocks];  // cluster_reduce's table
    sum_sq = cluster_reduce(sum_sq, partial, [](float a, float b) { return a + b; });
  }
#endif
  const float scale = rsqrtf(sum_sq / static_cast<float>(p.hidden) + p.eps);
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    Vec<T, kE> o;
#pragma unroll
    for (int e = 0; e < kE; ++e) {
      const float g = to_float(w[k][e]);
      o[e] = from_float<T>(kFused ? f[k][e] * scale : f[k][e] * scale * (kGemma ? 1.0f + g : g));
    }
    if constexpr (sizeof(o) == 16) {
      store_vec(out + decode_col<kE, kK>(k), o);
    } else {
      *reinterpret_cast<Vec<T, kE>*>(out + decode_col<kE, kK>(k)) = o;
    }
  }
}

// Any hidden size and alignment: a block per row (scalar_row_threads), two passes over the
// row, each thread loading kScalarBatch elements before it uses any (sgl_kernel/scalar_rows.cuh).
// kWarpRows: a warp a row (scalar_warp_rows: many rows of at most 128 elements).
template <typename T, bool kFused, bool kGemma, bool kWarpRows = false>
__global__ void __launch_bounds__(1024) rmsnorm_scalar_kernel(const RmsNormParams<T> p, const FastDivmod rows_inner) {
  __shared__ __align__(16) float scratch[32];
  const ScalarRow<kWarpRows> at;
  const int64_t step = at.step;
  uint32_t outer, inner;
  rows_inner.divmod(static_cast<uint32_t>(at.row), outer, inner);  // (past the last row: not used)
  const T* in = p.input + row_offset(p.input_rows, outer, inner);
  T* res = kFused ? p.residual + row_offset(p.residual_rows, outer, inner) : nullptr;
  T* out = p.out + row_offset(p.out_rows, outer, inner);

  SGL_PDL_WAIT();
  SGL_PDL_LAUNCH_DEPENDENTS();  // early: see sgl_kernel/arch.cuh
  if (kWarpRows && at.row >= p.rows) return;  // the last block's spare warps (whole warps)
  const float part = scalar_row_sum_sq<T, kFused>(in, res, p.hidden, at.tid, step);
  const float sum_sq = kWarpRows ? warp_reduce_sum(part) : block_reduce_sum(part, scratch);
  const float rstd = rsqrtf(sum_sq / static_cast<float>(p.hidden) + p.eps);
  // Each thread re-reads only the elements it wrote itself (fused), so no barrier is needed.
  for (int64_t j0 = at.tid; j0 < p.hidden; j0 += step * kScalarBatch) {
    float f[kScalarBatch], w[kScalarBatch];
    load_scalar_batch<T>(kFused ? res : in, j0, step, p.hidden, f);
    load_scalar_batch(p.weight, j0, step, p.hidden, w);
#pragma unroll
    for (int u = 0; u < kScalarBatch; ++u) {
      const int64_t j = j0 + u * step;
      if (j < p.hidden) out[j] = from_float<T>(f[u] * rstd * (kGemma ? 1.0f + w[u] : w[u]));
    }
  }
}

// Two-pass kernel (many rows): a block of kThreads threads per row walks the row twice, in
// chunks of kThreads * kUnroll 16-byte vectors (vector i of the row: thread i % kThreads).
// Pass 1 sums the squares (fused: forms the new residual and stores it); pass 2 re-reads the
// row (the new residual, fused) while it is still in L1/L2, scales it and stores it. A thread
// holds kUnroll vectors at a time, so an SM runs up to 2048 threads (4 rows of H=8192), where
// the vector kernel keeps whole rows in registers at 512. This is the shape of torch.compile's
// looped reductions. kHint picks the cache policies of (first read, re-read, weight):
// 0 plain; 1 L2 evict_last / evict_first / evict_last policies; 3 the same with L1 evict_last /
// evict_first (Triton's eviction_policy); 4 the L1 priorities alone; fused op only: 5 as 1, but
// the input (read once) evict_first; 6 as 5, and the residual stored with L2 evict_last; 7 as 1,
// and the output stored evict_first (st.global.cs, twopass_out_store); 8 as 1, and the output
// stored with L2 evict_last; 9 as 8, and the residual stored with L2 evict_last too. The
// launcher uses 1 (the fused op); the rest are for benchmark/elementwise/tune_rmsnorm.cu
// (rmsnorm_exact_kernel takes the same modes).
// Each thread re-reads only the vectors it stored itself, after row_group_sum's barrier (a
// compiler fence), so no other synchronisation is needed. kRegs (the launcher guarantees hv <=
// kThreads * kUnroll: one chunk): pass 2 takes the row from the registers of pass 1 instead.
// which: 0 first read (the residual, fused), 1 re-read, 2 weight, 3 the fused op's input.
constexpr LoadPolicy twopass_policy(int hint, int which) {
  switch (hint) {
    case 1:
    case 7:
    case 8:
    case 9: return which == 1 ? LoadPolicy::kDropL2 : LoadPolicy::kKeepL2;
    case 5:
    case 6: return which == 1 || which == 3 ? LoadPolicy::kDropL2 : LoadPolicy::kKeepL2;
    case 3: return which == 1 ? LoadPolicy::kDropL1L2 : LoadPolicy::kKeepL1L2;
    case 4: return which == 1 ? LoadPolicy::kDropL1 : LoadPolicy::kKeepL1;
    default: return which == 3 ? twopass_policy(hint, 0) : LoadPolicy::kDefault;
  }
}

// The output's store policy by hint (twopass_policy's modes).
constexpr StorePolicy twopass_out_store(int hint) {
  return hint == 7 ? StorePolicy::kStream : hint == 8 || hint == 9 ? StorePolicy::kKeepL2 : StorePolicy::kDefault;
}
// The fused op's residual store policy by hint.
constexpr bool twopass_keep_residual(int hint) { return hint == 6 || hint == 9; }


// kTrig (tune rows): the PDL trigger right after the wait (production) or after the stores.
template <typename T, int kThreads, int kUnroll, bool kFused, bool kGemma, int kHint, bool kRegs = false,
          PdlTrigger kTrig = PdlTrigger::kEarly>
__global__ void __launch_bounds__(kThreads) rmsnorm_twopass_kernel(const RmsNormParams<T> p, const FastDivmod rows_inner) {
  static_assert(kTrig == PdlTrigger::kEarly || kTrig == PdlTrigger::kLate, "early or late");
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps");
  constexpr int kVec = kVec16<T>;
  constexpr LoadPolicy kFirst = twopass_policy(kHint, 0), kAgain = twopass_policy(kHint, 1),
                       kWeight = twopass_policy(kHint, 2), kInput = kFused ? twopass_policy(kHint, 3) : kFirst;
  __shared__ __align__(16) float scratch[32];
  uint32_t outer, inner;
  rows_inner.divmod(blockIdx.x, outer, inner);
  const T* in = p.input + row_offset(p.input_rows, outer, inner);
  T* res = kFused ? p.residual + row_offset(p.residual_rows, outer, inner) : nullptr;
  T* out = p.out + row_offset(p.out_rows, outer, inner);
  const int hv = static_cast<int>(p.hidden / kVec);
  SGL_PDL_WAIT();
  if constexpr (kTrig == PdlTrigger::kEarly) SGL_PDL_LAUNCH_DEPENDENTS();  // early: see sgl_kernel/arch.cuh
  float sum_sq = 0.f;
  Word4 held[kRegs ? kUnroll : 1];  // kRegs: the row (one chunk) between the passes
  for (int base = threadIdx.x; base < hv; base += kThreads * kUnroll) {
    Word4 x[kUnroll], r[kFused ? kUnroll : 1];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads;
      if (i < hv) {
        x[u] = load_vec<Word4, kInput>(in + i * kVec);
        if constexpr (kFused) r[u] = load_vec<Word4, kFirst>(res + i * kVec);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads;
      if (i < hv) {
        sum_sq = add_sum_sq<T, kFused>(x[u], r[kFused ? u : 0], sum_sq);
        if constexpr (kRegs) held[u] = x[u];
        if constexpr (kFused && twopass_keep_residual(kHint)) {
          store16<uint32_t, StorePolicy::kKeepL2>(reinterpret_cast<uint32_t*>(res + i * kVec), x[u]);
        } else if constexpr (kFused) {
          *reinterpret_cast<Word4*>(res + i * kVec) = x[u];
        }
      }
    }
  }
  sum_sq = row_group_sum(sum_sq, kThreads, scratch);
  const float scale = rsqrtf(sum_sq / static_cast<float>(p.hidden) + p.eps);
  const T* src = kFused ? res : in;
  for (int base = threadIdx.x; base < hv; base += kThreads * kUnroll) {
    Word4 x[kUnroll], w[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads;
      if (i < hv) {
        if constexpr (kRegs) {
          x[u] = held[u];
        } else {
          x[u] = load_vec<Word4, kAgain>(src + i * kVec);
        }
        w[u] = load_vec<Word4, kWeight>(p.weight + i * kVec);
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int i = base + u * kThreads;
      if constexpr (twopass_out_store(kHint) == StorePolicy::kDefault) {
        if (i < hv) *reinterpret_cast<Word4*>(out + i * kVec) = scale_vec<T, kGemma>(x[u], w[u], scale);
      } else if (i < hv) {
        store16<uint32_t, twopass_out_store(kHint)>(reinterpret_cast<uint32_t*>(out + i * kVec),
                                                    scale_vec<T, kGemma>(x[u], w[u], scale));
      }
    }
  }
  if constexpr (kTrig == PdlTrigger::kLate) SGL_PDL_LAUNCH_DEPENDENTS();
}

// Exact-row kernel (many rows): the two-pass kernel's work on a row of exactly kChunks * kThreads
// 16-byte vectors, one row a block, with every load of each pass issued before any use and no
// bounds checks. kRegs: pass 2 takes the row from pass 1's registers; else it re-reads the
// elements the thread itself read (fused: stored) in pass 1, so out may be input. kFlat: rows
// packed back to back (input, residual and out with pitch hidden) and addressed with 32-bit
// offsets (the launcher checks rows * hidden < 2^31), else through row_offset.
// NOTE (H200, plain op, bf16 H=6144, .bundle/ab_env.py: the bench's CUDA-graph timing, us at
// T=16384 / 32768, one machine, two alternations): the two-pass kernel t256 u3 re-reading under
// L1 + L2 hints 99.65 / 197.08; this kernel with the same loads 96.76 / 191.24 (row_offset) and
// 96.10 / 190.00 (kFlat); the shipped t256 u3 kRegs two-pass kernel 98.12 / 194.32;
// torch.compile 97.71 / 192.22. The bounds checks and the runtime chunk loop cost 3 %.
template <typename T, int kThreads, int kChunks, bool kFused, bool kGemma, int kHint, bool kRegs, bool kFlat>
__global__ void __launch_bounds__(kThreads)
    rmsnorm_exact_kernel(const RmsNormParams<T> p, const FastDivmod rows_inner) {
  static_assert(kThreads % 32 == 0 && kThreads <= 1024, "whole warps");
  constexpr int kVec = kVec16<T>;
  constexpr LoadPolicy kFirst = twopass_policy(kHint, 0), kAgain = twopass_policy(kHint, 1),
                       kWeight = twopass_policy(kHint, 2), kInput = kFused ? twopass_policy(kHint, 3) : kFirst;
  __shared__ __align__(16) float scratch[32];
  const T* in;
  T* res = nullptr;
  T* out;
  if constexpr (kFlat) {
    const uint32_t base = blockIdx.x * static_cast<uint32_t>(p.hidden);
    in = p.input + base;
    out = p.out + base;
    if constexpr (kFused) res = p.residual + base;
  } else {
    uint32_t outer, inner;
    rows_inner.divmod(blockIdx.x, outer, inner);
    in = p.input + row_offset(p.input_rows, outer, inner);
    out = p.out + row_offset(p.out_rows, outer, inner);
    if constexpr (kFused) res = p.residual + row_offset(p.residual_rows, outer, inner);
  }
  SGL_PDL_WAIT();
  SGL_PDL_LAUNCH_DEPENDENTS();  // early: see sgl_kernel/arch.cuh
  const int t = static_cast<int>(threadIdx.x);
  Word4 x[kChunks], r[kFused ? kChunks : 1];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    x[c] = load_vec<Word4, kInput>(in + (c * kThreads + t) * kVec);
    if constexpr (kFused) r[c] = load_vec<Word4, kFirst>(res + (c * kThreads + t) * kVec);
  }
  float sum_sq = 0.f;
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    sum_sq = add_sum_sq<T, kFused>(x[c], r[kFused ? c : 0], sum_sq);
    if constexpr (kFused && twopass_keep_residual(kHint)) {
      store16<uint32_t, StorePolicy::kKeepL2>(reinterpret_cast<uint32_t*>(res + (c * kThreads + t) * kVec), x[c]);
    } else if constexpr (kFused) {
      *reinterpret_cast<Word4*>(res + (c * kThreads + t) * kVec) = x[c];
    }
  }
  sum_sq = row_group_sum(sum_sq, kThreads, scratch);
  const float scale = rsqrtf(sum_sq / static_cast<float>(p.hidden) + p.eps);
  const T* src = kFused ? res : in;
  Word4 w[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if constexpr (!kRegs) x[c] = load_vec<Word4, kAgain>(src + (c * kThreads + t) * kVec);
    w[c] = load_vec<Word4, kWeight>(p.weight + (c * kThreads + t) * kVec);
  }
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if constexpr (twopass_out_store(kHint) == StorePolicy::kDefault) {
      *reinterpret_cast<Word4*>(out + (c * kThreads + t) * kVec) = scale_vec<T, kGemma>(x[c], w[c], scale);
    } else {
      store16<uint32_t, twopass_out_store(kHint)>(reinterpret_cast<uint32_t*>(out + (c * kThreads + t) * kVec),
                                                  scale_vec<T, kGemma>(x[c], w[c], scale));
    }
  }
}

// rmsnorm_exact_kernel for rows of exactly kThreads * kChunks vectors (the caller checks hv),
// kFlat where the rows allow it.
template <typename T, int kThreads, int kChunks, bool kFused, bool kGemma, int kHint, bool kRegs>
cudaError_t launch_exact(const RmsNormParams<T>& p, const FastDivmod& rows_inner, cudaStream_t stream) {
  const bool flat = p.rows_inner >= p.rows && p.input_rows.inner == p.hidden && p.out_rows.inner == p.hidden &&
                    (!kFused || p.residual_rows.inner == p.hidden) && p.rows * p.hidden < (int64_t{1} << 31);
  const dim3 grid(static_cast<uint32_t>(p.rows));
  return flat ? launch_kernel(rmsnorm_exact_kernel<T, kThreads, kChunks, kFused, kGemma, kHint, kRegs, true>, grid,
                              dim3(kThreads), 0, stream, p.enable_pdl, p, rows_inner)
              : launch_kernel(rmsnorm_exact_kernel<T, kThreads, kChunks, kFused, kGemma, kHint, kRegs, false>, grid,
                              dim3(kThreads), 0, stream, p.enable_pdl, p, rows_inner);
}

template <typename T, int kThreads, int kUnroll, bool kFused, bool kGemma, int kHint, bool kRegs = false,
          PdlTrigger kTrig = PdlTrigger::kEarly>
cudaError_t launch_twopass(const RmsNormParams<T>& p, const FastDivmod& rows_inner, cudaStream_t stream) {
  return launch_kernel(rmsnorm_twopass_kernel<T, kThreads, kUnroll, kFused, kGemma, kHint, kRegs, kTrig>,
                       dim3(static_cast<uint32_t>(p.rows)), dim3(kThreads), 0, stream, p.enable_pdl, p, rows_inner);
}

template <typename T, int kVpt, bool kFused, bool kGemma, int kTpr = 0, PdlTrigger kTrig = PdlTrigger::kEarly,
          LoadPolicy kLoad = LoadPolicy::kDefault>
cudaError_t launch_vec(const RmsNormParams<T>& p, const FastDivmod& rows_inner, int tpr, cudaStream_t stream) {
  const int groups = std::max(1, kVecBlockThreads / tpr);
  const dim3 grid(static_cast<uint32_t>(ceil_div<int64_t>(p.rows, groups)));
  const dim3 block(static_cast<uint32_t>(tpr), static_cast<uint32_t>(groups));
  return launch_kernel(rmsnorm_vec_kernel<T, kVpt, kFused, kGemma, kTpr, kTrig, kLoad>, grid, block, 0, stream,
                       p.enable_pdl, p, rows_inner);
}

// The PDL trigger of the decode kernel: right after the wait (session 20; see below). The
// vector kernel on decode rows of exactly 1024 vectors: by rows, from session 33 (below).
// Before that: 128 threads, once the loads were issued up to 64 rows, else at the end.
// NOTE (H200, session 17: bf16 decode rows timed by tools/decode_rows.py, one dev build
// choosing the placement at run time, alternated twice; us at T = 1 / 16 / 32 / 64 / 128).
// Decode kernel, right after the wait against after the loads:
//   plain H=4096  1.20 / 1.27 / 1.29 / 1.33 / 1.55 against 1.29 / 1.29 / 1.30 / 1.42 / 1.77
//   plain H=8192  1.43 / 1.52 / 1.55 / 1.69 / 2.05 against 1.46 / 1.55 / 1.58 / 1.70 / 2.10
//   fused H=4096  1.38 / 1.53 / 1.52 / 1.61 / 1.89 against 1.45 / 1.68 / 1.64 / 1.72 / 2.18
//   fused H=7168  1.75 / 1.93 / 1.94 / 2.03 / 2.42 against 1.70 / 1.83 / 1.86 / 1.97 / 2.36
// Vector kernel, fused H=8192, at the end against after the loads: 1.80 / 2.00 / 2.01 / 2.15 /
// 2.49 against 1.69 / 1.84 / 1.89 / 2.09 / 3.16 (2.55 at T=128 on another machine).
// Session 20 (H100, tune_rmsnorm.cu "dx e4k4 early" / "dx e4k4 mid", the decode kernel with the
// prefetched wait of session 19, two runs in one call, us at T = 1 / 16 / 64 / 128): fused
// H=7168 1.64 / 1.80 / 2.01 / 2.42 right after the wait against 1.68 / 1.80-1.82 / 2.03 / 2.52
// after the loads (production then), so the fused op now triggers right after the wait too.
// (Also measured there: the decode kernel with 16-byte loads, "dx e8k*": no faster at any row;
// benchmark/RESULTS.md, session 20.)
// Session 21 (H100, the fused op at H=8192 in one torch process, the placement switched at
// run time in a dev copy, graphs as the bench's, three rounds; us, after the loads / at the end /
// right after the wait): T=65 2.06 / 2.20-2.24 / 2.11, T=72 2.08 / 2.26 / 2.12, T=80 2.17 /
// 2.33-2.39 / 2.21-2.22, T=88 2.25-2.32 / 2.36-2.42 / 2.24, T=96 2.30-2.44 / 2.39-2.44 / 2.29,
// T=104 2.33-2.51 / 2.42 / 2.37, T=112 2.47-2.58 / 2.46 / 2.45, T=120 2.58-2.61 / 2.52-2.57 /
// 2.53, T=128 2.60-2.78 / 2.55-2.57 / 2.64. But tools/decode_rows.py (the bench's graphs, many
// ops in one process), a build with the switch at 104 rows against one at 64, alternated twice:
// T=72 2.072-2.076 against 2.110-2.113, T=96 2.43-2.44 against 2.44-2.45, T=104 2.54-2.56
// against 2.44-2.45. The late trigger read 0.15-0.2 us slower in the dev process than here,
// so the switch stays at 64.
// Session 33 (H200, bf16 H=8192, the bench's graphs in one torch process after its side-stream
// warm-ups, a dev build choosing the instance from the environment, modes alternated over three
// rounds; median us at T = 1 / 16 / 96 / 112 / 128 / 144 / 160 / 192 / 224 / 256):
//   fused, 128 threads (production then: after the loads to 64 rows, late above)
//     1.55 / 1.73 / 2.24 / 2.32 / 2.43 / 2.99 / 3.03 / 3.17 / 3.31 / 3.43
//   fused, 256 threads, after the loads  1.51 / 1.68 / 2.06 / 2.20 / 2.36 / 2.75 / 2.75 / 2.95 / 5.16 / 5.54
//   fused, 256 threads, early            1.49 / 1.70 / 2.08 / 2.21 / 2.36 / 2.74 / 2.84 / 2.85 / 4.78 / 5.07
//   fused, 256 threads, late             1.69 / 1.85 / 2.18 / 2.27 / 2.35 / 2.97 / 3.01 / 3.06 / 3.12 / 3.19
//   plain, the decode kernel (production then) 1.31 / 1.39 / 1.81 / 1.93 / 2.06 / 2.20 / 2.24 / 2.40 / 2.84 / 2.81
//   plain, 256 threads, early            1.25 / 1.37 / 1.78 / 1.90 / 2.04 / 2.15 / 2.21 / 2.37 / 2.81 / 2.83
//   plain, 256 threads, late             1.31 / 1.61 / 1.88 / 1.94 / 2.01 / 2.30 / 2.36 / 2.44 / 2.52 / 2.61
// So rows of 1024 vectors take 256 threads (4 vectors a lane): the fused op triggers after the
// loads up to kVec1024MidRows rows, early up to kVec1024EarlyRows and late above; the plain op
// on 16-bit types early up to kVec1024EarlyRows, late above (since session 37 its rows take the
// decode kernel, kDec8Rows: these rules serve the fused op). (fp32 rows of 1024 vectors, H=4096,
// take the decode kernel before this in both ops, as before: a dev build with the old choice
// switchable read them within 0.02 us, and fp16 H=8192 gained as bf16: fused T = 1 / 16 / 128
// 1.72 / 1.91 / 2.58 -> 1.60 / 1.77 / 2.40, plain 1.31 / 1.40 / 2.05 -> 1.29 / 1.38 / 2.04.)
// tune_rmsnorm.cu ("kv t256 ...") ranked the late trigger first
// at every row count: a fresh process does not pay what a late trigger costs after side-stream
// work (arch.cuh, session 16), and --pollute / --side-warmup there did not reproduce it;
// --streams 64 does (session 34: kDec8Rows' NOTE).
constexpr int64_t kVec1024MidRows = 160, kVec1024EarlyRows = 192;

// Decode rows of 16-bit types that take the decode kernel with 8 chunks a warp (a warp a
// 1024-element slice of the row in 8-byte pieces: 6 / 7 / 8 warps at H = 6144 / 7168 / 8192)
// instead of the kernel they took before (the decode kernel's 4 chunks a warp below H=8192 and
// for the plain op at H=8192 in session 32, the vector kernel's 256-thread instances at H=8192),
// by op, row length and rows, with the PDL trigger early (session 34: plain 8192 at 113-128 rows
// once the loads were issued, "mid").
// NOTE (H200, session 34, us):
// - tune_rmsnorm.cu --streams 64 ("dx e4k8 mid / early" against "prod"; the tune in the state
//   of a torch process that has used more than 9 streams, where it reproduces the bench:
//   RESULTS.md, session 34), plain H=8192, three rounds: T = 112 / 120 / 128 / 136 / 144: prod
//   1.91-1.93 / 1.98-1.99 / 2.05-2.06 / 2.09-2.13 / 2.15-2.16, mid 1.90-1.91 / 1.94-1.95 /
//   1.99-2.01 / 2.12-2.13 / 2.22; T = 160 / 176 / 192 / 224 / 256: prod 2.23-2.24 / 2.31-2.32 /
//   2.39 / 2.54-2.56 / 2.60-2.61, early 2.22-2.23 / 2.28 / 2.32-2.33 / 2.47-2.48 / 2.64-2.65.
//   Without the many streams the mid instance reads 2.01-2.02 at T=128 and prod 1.95-1.96: a
//   fresh process ranks them the other way round.
// - The same, early trigger, two rounds, T = 64 / 96 / 128 / 160 / 192 / 208 / 224 / 240 / 256:
//   plain H=7168 prod 1.56 / 1.75-1.76 / 1.95 / 2.12 / 2.29 / 2.62 / 2.61 / 2.59 / 2.63-2.64,
//   early 1.56 / 1.72 / 1.90 / 2.08 / 2.18-2.19 / 2.25-2.26 / 2.33 / 2.37-2.38 / 2.45-2.46;
//   plain H=6144 prod 1.48 / 1.64 / 1.83 / 1.89-1.90 / 2.13 / 2.11 / 2.27-2.28 / 2.34 /
//   2.45-2.46, early 1.48 / 1.62 / 1.80 / 1.91 / 2.06 / 2.11 / 2.18 / 2.23 / 2.32;
//   fused H=8192 prod 1.86-1.87 / 2.06 / 2.37 / 2.81-2.82 / 2.82 / 3.09-3.14 / 3.17 / 5.58 /
//   5.80, early 1.96 / 2.14-2.15 / 2.42 / 2.85 / 2.88-2.89 / 2.95 / 3.02-3.03 / 5.54-5.58 /
//   5.86-5.88 (240 and 256 rows rotate out of L2); fused H=7168 prod 1.80 / 1.98-1.99 / 2.17 /
//   2.56 / 2.62 / 3.29-3.30 / 4.16 / 4.37-4.38 / 4.53-4.54, early 1.83 / 2.02-2.03 / 2.27 /
//   2.61 / 2.66 / 2.72 / 2.78 / 2.84 / 2.98; fused H=6144 prod 1.66-1.67 / 1.82-1.83 / 2.02-2.03
//   / 2.33 / 2.40 / 2.46 / 2.58 / 2.69 / 2.81, early 1.73-1.74 / 1.89 / 2.07-2.08 / 2.29-2.30 /
//   2.37-2.38 / 2.48 / 2.52-2.53 / 2.60 / 2.72. H=5120 was mixed (plain) or slower (fused but
//   at 256 rows) and H=4096 slower: not taken.
// - The bench's graphs in a torch process, the launcher before against this one through ctypes,
//   alternated over three rounds (.bundle/p34e.py; bf16 unless said):
//   - plain H=8192 T = 120 / 128 / 176 / 224: 1.97 / 2.04 / 2.32 / 2.51 against 1.95-1.96 / 2.00
//     / 2.26-2.27 / 2.48-2.49; fp16 T = 128 / 192 2.02 / 2.39 against 1.99-2.00 / 2.31-2.32;
//     T = 1 / 16 / 112 / 129 / 256 within 0.01;
//   - plain H=7168 T = 96 / 128 / 192 / 256: 1.74 / 1.93 / 2.26 / 2.61 against 1.71-1.72 / 1.88 /
//     2.19-2.20 / 2.46 (fp16 T=128 1.93 against 1.86-1.87); H=6144 T = 192 / 256: 2.11 / 2.31
//     against 2.04 / 2.30;
//   - fused H=8192 T = 208 / 224: 3.10-3.11 / 3.11-3.13 against 2.95 / 3.01; H=7168 T = 208 /
//     256: 3.40-3.80 / 4.52 against 2.73 / 3.02 (fp16 T=256 4.59 against 2.98); H=6144 T = 224 /
//     256: 2.58 / 2.74 against 2.52 / 2.76 (the one row that reads slower, by 0.02, where the tune
//     read 2.81 against 2.72);
//   - outside the rows (controls) within 0.01: plain H=7168 T=64, H=6144 T=160, fused H=8192
//     T=192, H=7168 T=192, H=6144 T=208.
// Session 37: with the warp count compiled in (row_group_sum's NOTE) the plain op's rows of 8192
// take this kernel with the early trigger at every decode row count (before: the mid trigger at
// 113-128 rows, early at 161-224, else the vector kernel). tune_rmsnorm.cu --streams 64, H200,
// bf16, two rounds, us at T = 1 / 16 / 32 / 64 / 96 / 112 / 128 / 144 / 160 / 192 / 224 / 256:
// production then 1.30 / 1.37 / 1.39 / 1.58 / 1.75 / 1.90 / 1.92 / 2.10 / 2.17 / 2.17 / 2.33 /
// 2.53, "dw e4k8w8 early" 1.29 / 1.34 / 1.35-1.36 / 1.47 / 1.65-1.66 / 1.75 / 1.87-1.88 /
// 1.99-2.00 / 2.02 / 2.17-2.18 / 2.33-2.34 / 2.48-2.49 ("dw e4k8w8 mid" 1.34 / ... / 1.92 at
// T=128 / ... / 2.90 at 256). The fused op's rows of 7168 take it from 129 rows (before: 208):
// us at T = 96 / 128 / 129 / 144 / 160 / 176 / 192 / 200 / 207 / 208 / 256, production then
// (the 4-chunk kernel, 14 warps compiled in up to 128 rows) 1.88 / 2.28 / 2.16 / 2.45 / 2.50 /
// 2.53 / 2.60 / 3.13 / 4.00 / 2.67 / 3.07, "dw e4k8w7 early" 1.85 / 2.35 / 2.08 / 2.45 / 2.46 /
// 2.48 / 2.52 / 2.64 / 2.67 / 2.67 / 3.07 (three rounds, within 0.02 each).
struct Dec8Rows {
  bool fused;
  int64_t hidden, first, last;  // rows first .. last
};
constexpr Dec8Rows kDec8Rows[] = {{false, 8192, 1, 256},  {false, 7168, 96, 256}, {false, 6144, 192, 256},
                                  {true, 8192, 208, 224}, {true, 7168, 129, 256}, {true, 6144, 224, 256}};

bool dec8_rows(bool fused, int64_t hidden, int64_t rows) {
  for (const Dec8Rows& d : kDec8Rows) {
    if (d.fused == fused && d.hidden == hidden && rows >= d.first && rows <= d.last) return true;
  }
  return false;
}

// Vectors per lane tried in order, by rows: the first that fits (row_group_threads) runs.
// NOTE (H200, bf16, PDL on; benchmark/elementwise/tune_rmsnorm.cu, /work/.device/1 run):
// - decode, rows <= 256 (where rmsnorm_decode_kernel above does not apply): 4 vectors per
//   lane ("g v4 pre reg96"): H=4096 rmsnorm T=1/16/128
//   1.24/1.34/1.63 us and fused 1.35/1.46/1.81 (the earlier 2-vector, 256-thread shape
//   1.89/2.12/3.18 and 2.28/2.69/3.74 with its block barrier and late weight); 8 vectors
//   were 1.36/1.64/1.83, 16 vectors 1.62/2.13/2.43. 2 vectors ("g v2 b256", 1.25/1.39/1.62)
//   is the fallback where 4 does not fit.
// - rows > 256: 8 vectors per lane, 128 registers ("g v8 pre reg128"): H=4096
//   T=1024 rmsnorm 4.78 us (4 vectors 5.31, 16 vectors 5.21), fused 9.45; T=4096 17.15 us
//   (16 vectors 18.32); H=8192 T=4096 33.76 (16 vectors 35.11).
// - many rows: the sweep's "g v16 pre" (uncapped, 255 registers) won at T=32768 (H=4096
//   4171 GB/s vs 4125 for 8 vectors), but this kernel at 16 vectors reached only 3547
//   (rmsnorm) / 3940 (fused) there (/work/.device/2 run), so 8 vectors serve every T > 256.
// 6 and 12 vectors serve rows where 8 and 16 would leave a lane more than one vector short
// (bf16 H=2560, 3072, 5120 get 6 at mid and large T; 3072 and 6144 get 12 at large T), with
// the register budgets of 8 and 16; those sizes were not measured. 9 vectors (128 registers,
// no spills) where 8 and 6 do not fit: bf16 H=1152 and 2304 (Gemma 3 1B, Gemma 2 2B: 144 and
// 288 vectors, 16 and 32 lanes a row) had taken 2 or 4 vectors a lane with 1.5 or 3 of them
// used. NOTE (H100, bench_norm.py --models, us; the session-24 sweep before against after, on
// two machines, torch.compile of each run in brackets): plain H=2304 T=2048 / 16384 7.47 /
// 60.35 (8.27 / 61.81) -> 6.08 / 51.69 (8.23 / 61.12), 83 -> 96 % of copy at T=16384; fused
// H=2304 T=2048 14.99 -> 14.15 (T=16384 takes it too: 103.1 -> 103.0). H=1152 after: plain
// T=16384 93 % of copy, 1.26x torch.compile.
// NOTE (H200, bf16, PDL on): loading the row under an L2 evict_last policy (LoadPolicy::kKeepL2)
// speeds up the many-row plain op. benchmark/elementwise/tune_rmsnorm.cu, "g v8 pre keep" against
// the vector kernel as it was ("g v8 pre reg128") and the two-pass kernel ("2p t256 u1 h3"), us at
// T=16384/32768: H=4096 63.78/125.58 against 65.71/129.92 (two-pass 94.22/184.63); H=8192
// 125.49/248.71 against 130.32/258.40 (126.08/250.79); H=16384 T=16384 255.73 against 258.84
// (256.95). bench_norm.py, one machine, alternated twice against the two-pass kernel: rmsnorm
// H=4096 T=16384/32768 64.47/126.5-126.8 against 65.94/130.7; H=8192 126.6-126.8/249.9-250.0
// against 127.1/250.2 (torch.compile 127.1-127.4/250.5-250.6). The same loads in the fused op's
// vector kernel (2 vectors a lane up to 1024 vectors, 4 up to 2048) were slower in the bench
// than the two-pass kernel although the tune had them faster: fused H=4096 T=16384/32768
// 132.3/261.7-263.0 against 126.9/251.5, H=8192 278.4-284.7/563.2 against 256.3/509.3.
// Rows of 768 vectors (bf16 H=6144), where the vector kernel's 96-thread rows reached 95-96 %
// of copy and torch.compile 97-99 % (session 14, H200, .bundle/ab_env.py: the bench's timing,
// plain op, us at T=16384 / 32768; three machines): vector kernel 99.7-100.7 / 196.6-198.2;
// two-pass kernel, one chunk held in registers, t256 u3 98.2 / 194.3, t192 u4 98.1-98.8 /
// 194.1-195.4, t128 u6 98.9 / 195.6; the vector kernel at 6 a lane (128 threads) 98.4 / 194.6;
// torch.compile (a 512-thread two-pass kernel, the row in 8-byte pieces) 97.1-97.8 / 191.0-193.3.
// Shipped t256 u3 (h1: the evict_last loads), still 0.5-1 % behind torch.compile. Re-reading
// the row (t256 u3 h3, as torch.compile does) 99.7 / 197.1, and with one chunk per loop
// iteration (t256 u1, t512 u1) 246-270 us at T=32768: a lane needs its loads in flight at
// once. At 640 vectors (bf16 H=5120) no shape beat the vector kernel (6 a lane, 128 threads,
// plain loads: 171.0-172.9 at T=32768, 91-92 % of copy; torch.compile 174.1-176.0).
// Session 15 (H200, the same timing, T=32768, one machine, two alternations, us): the
// exact-row kernel (rmsnorm_exact_kernel: no bounds checks, no chunk loop) at 768 vectors,
// t256 c3 kRegs h1 188.8 / 188.9 against 196.3 / 193.1 for the two-pass kernel of the same
// shape and 191.3 / 191.9 for torch.compile (re-reading under h3: 193.5 / 189.1; another
// machine 190.0 against torch.compile 192.2); at 640 vectors, t128 c5 re-reading under h3
// 166.9 / 166.9 against 171.1 / 171.1 for the vector kernel and 173.7 / 174.6 for
// torch.compile (kRegs h1 167.4 / 167.6). No gain at 512, 896 or 1024 vectors (H=4096: 139.0
// at best against 125.9 for the vector kernel; H=7168, 8192: within 0.3 %), which keep the
// vector kernel. Shipped: the exact-row kernel at 640 (t128 c5 h3) and 768 (t256 c3 kRegs h1).
constexpr int kTwoPassPlainHint = 1;
constexpr int64_t kKeepRows = 16384;

template <typename T, bool kFused, bool kGemma>
cudaError_t launch_vec_for(const RmsNormParams<T>& p, const FastDivmod& rows_inner, int64_t hv,
                           cudaStream_t stream) {
  const int regime = p.rows <= 256 ? 0 : 1;  // decode, many rows
  // Decode rows of exactly 1024 or 2048 vectors (bf16/fp16 H=8192 and 16384; fp32 H=4096 and
  // 8192 only where the decode kernel does not take them): the group size compiled in; at 1024
  // 256 threads of 4 vectors a lane with the trigger by rows (kVec1024EarlyRows' NOTE, session
  // 33), at 2048 8 vectors a lane. Until session 33 1024 took 8 vectors a lane (128 threads)
  // too. NOTE
  // (H200, bf16, tune_rmsnorm.cu "prod", one machine, two alternations, us at
  // T=1/16/32/128/256): fused H=8192 1.92/2.03/2.04/2.90/6.16 before (4 vectors, group size at
  // run time), 1.90/1.95/1.97/2.72/5.36 compiled in, 1.82/1.94/1.99/2.48/5.43 also with the
  // late trigger; fused H=16384 T=32/128/256 3.02/5.93/10.97 before, 2.96/5.64/9.70 compiled
  // in, 3.26/6.26/9.57 with the late trigger (kept early there); plain H=16384 2.27/3.22/6.51
  // before, 2.16/3.07/4.92 compiled in. 8 vectors with the group size at run time were slower
  // than 4 (fused H=8192 2.03/2.24/2.30/2.76 at T=1/16/32/128, another machine where 4 vectors
  // gave 1.79/2.04/2.08/2.61). bench_norm.py, one H200, the trigger early / late alternated
  // twice (fused H=8192 T=1/16/128): 1.79/1.96/2.54 / 1.83/1.98/2.48. (For the norm + quant
  // decode kernel the bench contradicted the tune's late-trigger gain: RESULTS.md, session 12.)
  // The plain op from 16384 rows of 512 vectors or more: 8 vectors a lane, the row loaded under
  // an L2 evict_last policy (kKeepRows' NOTE). The fused op takes the two-pass kernel there.
  if constexpr (!kFused) {
    // 640 and 768 vectors (bf16 H=5120, 6144): the exact-row kernel instead (kKeepRows' NOTE).
    if (p.rows >= kKeepRows && hv == 640) {
      return launch_exact<T, 128, 5, false, kGemma, 3, false>(p, rows_inner, stream);
    }
    if (p.rows >= kKeepRows && hv == 768) {
      return launch_exact<T, 256, 3, false, kGemma, kTwoPassPlainHint, true>(p, rows_inner, stream);
    }
    if (p.rows >= kKeepRows && hv >= 512) {
      const int tpr = row_group_threads(hv, 8, 1, vec_max_threads(8));
      if (tpr > 0) {
        return launch_vec<T, 8, kFused, kGemma, 0, PdlTrigger::kEarly, LoadPolicy::kKeepL2>(p, rows_inner, tpr, stream);
      }
    }
  }
  if (regime == 0 && hv == 1024) {  // kVec1024EarlyRows' NOTE
    if (kFused && p.rows <= kVec1024MidRows) {
      return launch_vec<T, 4, kFused, kGemma, 256, PdlTrigger::kAfterLoads>(p, rows_inner, 256, stream);
    }
    return p.rows <= kVec1024EarlyRows
               ? launch_vec<T, 4, kFused, kGemma, 256, PdlTrigger::kEarly>(p, rows_inner, 256, stream)
               : launch_vec<T, 4, kFused, kGemma, 256, PdlTrigger::kLate>(p, rows_inner, 256, stream);
  }
  if (regime == 0 && hv == 2048) return launch_vec<T, 8, kFused, kGemma, 256>(p, rows_inner, 256, stream);
  static constexpr int kOrder[2][7] = {{4, 2, 8, 0, 0, 0, 0}, {8, 6, 9, 4, 12, 16, 2}};
  for (const int vpt : kOrder[regime]) {
    if (vpt == 0) break;  // end of the list
    const int tpr = row_group_threads(hv, vpt, 1, vec_max_threads(vpt));
    if (tpr == 0) continue;
    // Fewer than 4 lanes per row: 16-byte pieces of 32 rows per load (half-used sectors).
    if (tpr < 4 && vpt > 2) continue;
    switch (vpt) {
      case 2: return launch_vec<T, 2, kFused, kGemma>(p, rows_inner, tpr, stream);
      case 4: return launch_vec<T, 4, kFused, kGemma>(p, rows_inner, tpr, stream);
      case 6: return launch_vec<T, 6, kFused, kGemma>(p, rows_inner, tpr, stream);
      case 8: return launch_vec<T, 8, kFused, kGemma>(p, rows_inner, tpr, stream);
      case 9: return launch_vec<T, 9, kFused, kGemma>(p, rows_inner, tpr, stream);
      case 12: return launch_vec<T, 12, kFused, kGemma>(p, rows_inner, tpr, stream);
      default: return launch_vec<T, 16, kFused, kGemma>(p, rows_inner, tpr, stream);
    }
  }
  return cudaErrorNotSupported;  // unreachable for hv <= 4096: 2 vectors fit up to 2048, 8 beyond
}

// The two-pass kernel where it measured faster than the vector kernel: from 16384 rows, the
// fused op on rows of 512, 1024 or a multiple of 1024 16-byte vectors. (The plain op's gain
// below came from the L2 policy, and the vector kernel with the same policy is faster still:
// kKeepRows.)
// NOTE (H200, bf16, PDL on; benchmark/elementwise/tune_rmsnorm.cu "2p tN uU hK" against "prod",
// session 13, us at T=512/1024/2048/4096/16384/32768):
// - fused H=4096: prod 5.80/9.73/18.44/34.73/132.09/262.47; t256 u2 h1 5.70/10.52/18.53/33.86/
//   126.35/250.60 (4285 GB/s); t256 u2 h4 5.21/9.84/17.81/33.09/127.87/262.66.
// - fused H=8192: prod 9.51/18.48/35.01/67.63/263.60/523.37; t512 u1 h1 10.32/19.42/35.56/66.68/
//   255.58/507.74; t512 u1 h4 9.34/17.71/33.72/64.36/264.70/527.15.
// - fused H=16384, T=1024/4096/16384: prod 35.79/132.99/523.56; t1024 u1 h1 37.17/130.95/508.14;
//   t1024 u1 h4 34.62/129.39/524.10.
// - plain H=8192: prod 129.83/256.78 at T=16384/32768; t256 u1 h3 (the kernel torch.compile
//   generates) 126.30/249.45; below 16384 rows and at H=4096 the vector kernel is faster
//   (H=4096 T=32768: 130.02 against 148.86 for the best two-pass shape).
// Block shapes holding fewer or more vectors a thread were slower (fused H=4096 T=32768: t128
// u2 273 us, t1024 u1 361). bench_norm.py (one H200, the choices alternated twice): fused
// T=32768 H=4096 262.9 -> 251.1 us (4276 GB/s), H=8192 523.7 -> 508.5; T=16384 H=4096 132.4
// -> 126.7; plain H=8192 T=16384 / 32768 130.1 / 257.0 -> 127.0 / 250.2 (torch.compile 127.3 /
// 250.3). The h4 shapes' gains below 16384 rows did not carry over to the bench (fused
// H=4096 T=1024 9.67 -> 10.09, T=4096 34.74 -> 34.96), so below 16384 rows the vector kernel
// stays. Tried and slower (tune, same machine): the fused op's input (read once) loaded with an
// L2 evict_first policy ("h5": H=4096 T=32768 269.5 against 250.6 us), and with the residual
// also stored evict_last ("h6": 260.1). The residual stored evict_last with h1's loads was no
// different from h1 (H=4096 T=32768 250.31 against 250.54 us; H=8192 502.62 against 503.09).
// 1024-vector rows (session 14, two H200s, .bundle/ab_norm.py: the bench's CUDA-graph timing,
// fused H=8192 T=16384 / 32768, us): t512 u1 h1 256.6 / 509.5 and 255.5-255.9 / 507.4-531.7;
// t1024 u1 h1 (one chunk) re-reading the row 252.9 / 501.5; the same holding the row in
// registers (kRegs) 252.5 / 501.3 and 252.1-255.0 / 502.6-506.3 (up to 100.9 % of copy).
// Shipped: t1024 u1 h1 kRegs. At 512-vector rows (H=4096) the one-chunk shapes were no faster
// than t256 u2 re-reading the row (T=32768: kRegs t256 u2 252.4, t512 u1 252.8, against 252.0
// and 251.0 on the two machines); nor were stores under cache policies: the output stored
// evict_last 250.8-250.9 against 251.0, the residual stored evict_first 254.4-255.0; and with
// kRegs t256 u2, the first reads without a policy 266.3 or evict_first 268.6 (the evict_last
// reads keep the rows' lines in L2 for the in-place stores).
// Rows of 640 and 896 vectors (bf16 H=5120, 7168), which took the vector kernel, as one chunk
// of a block of hv threads in registers (session 14, H200, the same timing, us at T=16384 /
// 32768): H=5120 165.3 / 327.9 -> 158.5 / 314.1 (100.6 % of copy), H=7168 232.5 / 461.5 ->
// 225.1 / 447.4 (re-reading the row instead of kRegs: 227.4 / 453). At 768 vectors (bf16
// H=6144) a 768-thread block leaves room for two a SM (1536 threads), and t768 u1 kRegs was
// slower than the vector kernel (201.4 / 400.5 against 197.3 / 390.4); t256 u3 kRegs is faster
// (another machine: 195.6 / 387.0 -> 189.8 / 376.4; t384 u2 kRegs 189.9 / 376.6). 2048-vector
// rows (H=16384) were no faster as t1024 u2 kRegs (T=32768 1010.0 against 1010.3), so they keep
// t1024 u1 re-reading chunks. The plain op's vector kernel stays at these lengths: the one-chunk
// kernel (one load a thread) reached 60-70 % of copy at H=5120-7168, where the vector kernel
// reads 92 % (H=5120), 94-96 % (6144) and 101 % (7168).
// Session 15 (H200, the same timing, T=32768, one machine, two alternations, us): the
// exact-row kernel (rmsnorm_exact_kernel) in place of the two-pass kernel of the same shape:
// 1024 vectors (H=8192), t1024 c1 kRegs h1 500.7 / 500.3 against 505.7 / 507.7 (re-reading,
// h3 hints: 500.1-500.9); 512 (H=4096), t256 c2 kRegs h1 252.3 / 251.3, re-reading 259.1 /
// 259.4 against 250.3 / 250.4 for t256 u2 re-reading (T=16384: 126.6 against 126.4); 768
// (H=6144) 376.0-376.8 for every form against 376.4 / 376.5. Shipped at 1024 only.
// Session 16 (H200, tune_rmsnorm.cu, two runs, us at T=16384 / 32768): the output stored
// evict_first (hint 7), which made concat_mla_k 1.3 % faster, made these slower: fused H=4096
// t256 u2 127.1-127.3 / 251.6-251.9 -> 128.8-129.0 / 255.0-255.4, H=8192 (the exact-row kernel)
// 251.1-251.5 / 503.6-504.0 -> 254.4-254.8 / 511.4-512.0; the plain op's vector kernel with
// evict_last loads was no different with it (H=4096 / 7168 / 8192, within 0.2 %).
// Session 42 (H200, tune_rmsnorm.cu, three rounds, us at T=16384 / 32768): the output stored
// with an L2 evict_last policy (hint 8) read 126.30-126.38 / 250.28-250.46 against hint 1's
// 126.48-126.91 / 250.50-250.62 for the fused op's H=4096 (t256 u2), and 249.98-250.02 /
// 500.95-501.21 against 250.03-250.09 / 501.38-501.45 at H=8192 (the exact-row kernel); the
// residual stored evict_last as well (hint 9) gained nothing. 0.1 % is within the bench's run
// to run spread and far from the 0.4 % the T=32768 goal lacks (bench_norm.py read 4288 GB/s =
// 100.3 % of copy with hint 8), and evict_last lines of a prefill-sized output would crowd L2:
// production keeps hint 1.
constexpr int64_t kTwoPassRows = 16384;
constexpr int kTwoPassFusedHint = 1;

// The fused op from kTwoPassRows rows, on the row lengths measured (hv 16-byte vectors: 512,
// 640-1024 in steps of 128, multiples of 1024); cudaErrorNotSupported (nothing launched) on the
// others.
template <typename T, bool kGemma>
cudaError_t launch_twopass_for(const RmsNormParams<T>& p, const FastDivmod& rows_inner, int64_t hv,
                               cudaStream_t stream) {
  constexpr int kHint = kTwoPassFusedHint;
  if (p.rows < kTwoPassRows) return cudaErrorNotSupported;
  switch (hv) {
    case 512: return launch_twopass<T, 256, 2, true, kGemma, kHint>(p, rows_inner, stream);
    // One chunk, held in registers:
    case 640: return launch_twopass<T, 640, 1, true, kGemma, kHint, true>(p, rows_inner, stream);
    case 768: return launch_twopass<T, 256, 3, true, kGemma, kHint, true>(p, rows_inner, stream);
    case 896: return launch_twopass<T, 896, 1, true, kGemma, kHint, true>(p, rows_inner, stream);
    // The exact-row kernel of the same shape (its NOTE: kTwoPassRows'):
    case 1024: return launch_exact<T, 1024, 1, true, kGemma, kHint, true>(p, rows_inner, stream);
    default: break;
  }
  if (hv >= 2048 && hv % 1024 == 0) return launch_twopass<T, 1024, 1, true, kGemma, kHint>(p, rows_inner, stream);
  return cudaErrorNotSupported;
}

bool aligned16(const RowStrides& s, int kVec) { return s.outer % kVec == 0 && s.inner % kVec == 0; }

// Blocks per row of the decode kernel (1: one block, or the vector kernel beyond
// kDecodeMaxHidden). A cluster pays for itself only on long rows: tune_norm_quant.cu --norms 1
// ("rms-cN", H100, bf16, us; c1 = the kernel used without a cluster):
//   fused H=16384, T=1/4/8/16/17/32: c1 2.88/2.93/3.10/3.15/3.19/3.26, c4 2.46/2.51/2.52/2.76/
//     2.80/3.62, c8 2.14/2.10/2.14/2.59/2.62/3.74, c16 2.05/2.16/2.36/3.09/3.14/4.39
//   fused H=32768, T=1/4/8/16/32: c1 4.57/4.52/4.88/4.88/5.20, c8 2.68/2.64/2.72/3.75/6.30,
//     c16 2.27/2.40/2.91/4.18/5.84
//   plain H=16384, T=1/4/8/16: c1 2.27/2.30/2.40/2.42, c8 2.02/1.99/2.01/2.36
//   plain H=32768, T=1/4/8/16: c1 3.24/3.19/3.47/3.51, c8 2.33/2.36/2.49/3.36, c16 2.11/2.21/2.62/3.84
//   fused H=8192, T=1/4/16/32: c1 1.83/1.93/2.09/2.16, c4 2.10/2.12/2.25/2.62, c8 2.10/2.05/2.31/2.94
// (c2 was slower than c4 everywhere). Below 16384 one block per row, but for the fused op
// from 12288 (session 24, H100, tune_norm_quant.cu --norms 1, H=12288, T = 1 / 4 / 8 / 16 / 32,
// us): fused c1 (the vector kernel) 2.33 / 2.39 / 2.49 / 2.54 / 2.63, c4 1.94 / 1.97 / 1.94 /
// 2.04 / 2.71, c8 1.89 / 1.87 / 1.85 / 2.11 / 3.16; plain c1 1.84 / 1.88 / 1.94 / 1.96 / 2.07,
// c8 1.89 / 1.87 / 1.84 / 1.89 / 3.00 (within 0.1 us: the plain op keeps one block).
int decode_cluster_blocks(int64_t rows, int64_t hidden, bool fused) {
  if (fused && hidden >= 12288 && hidden < 16384 && rows <= 16) {
    return rows <= 8 && hidden % (8 * kDecodeRowElems) == 0 ? 8 : 4;
  }
  if (hidden < 16384 || rows > 16) return 1;
  return hidden >= 32768 && rows <= 4 ? 16 : 8;
}

// rmsnorm_decode_kernel at kK chunks a warp, one block a row, the PDL trigger early: with the
// block's warp count (block.x / 32) compiled in where it is one of kWs (row_group_sum's NOTE),
// else known at run time.
template <typename T, bool kFused, bool kGemma, int kK, int... kWs>
cudaError_t launch_decode_warps(const RmsNormParams<T>& p, const FastDivmod& rows_inner, dim3 grid, dim3 block,
                                cudaStream_t stream) {
  constexpr PdlTrigger kEarly = PdlTrigger::kEarly;
  cudaError_t err = cudaSuccess;
  const bool compiled =
      ((block.x == kWs * 32 &&
        (err = launch_kernel(rmsnorm_decode_kernel<T, kFused, kGemma, false, kEarly, kDecodeElems, kK, kWs>, grid,
                             block, 0, stream, p.enable_pdl, p, rows_inner),
         true)) ||
       ...);
  if (compiled) return err;
  return launch_kernel(rmsnorm_decode_kernel<T, kFused, kGemma, false, kEarly, kDecodeElems, kK>, grid, block, 0,
                       stream, p.enable_pdl, p, rows_inner);
}

// cs: blocks per row for the decode kernel, -1 for decode_cluster_blocks' choice (tune
// sweeps pass others; a cluster that does not apply falls back to the other kernels).
template <typename T, bool kFused, bool kGemma>
cudaError_t launch_variant(const RmsNormParams<T>& p, cudaStream_t stream, int cs = -1) {
  constexpr int kVec = kVec16<T>;
  const FastDivmod rows_inner(static_cast<uint32_t>(p.rows_inner));
  // The decode kernel's lanes load kDecodeElems elements at a time.
  auto decode_aligned = [](const void* ptr, const RowStrides& s) {
    constexpr int kBytes = kDecodeElems * sizeof(T);
    return rows_aligned(ptr, s.outer, sizeof(T), kBytes) && rows_aligned(ptr, s.inner, sizeof(T), kBytes);
  };
  const bool vec_ok = p.hidden % kVec == 0 && p.hidden / kVec <= 4096 && is_aligned16(p.out) &&
                      is_aligned16(p.input) && is_aligned16(p.weight) && aligned16(p.out_rows, kVec) &&
                      aligned16(p.input_rows, kVec) &&
                      (!kFused || (is_aligned16(p.residual) && aligned16(p.residual_rows, kVec)));
  const bool dec_aligned = decode_aligned(p.out, p.out_rows) && decode_aligned(p.input, p.input_rows) &&
                           decode_aligned(p.weight, RowStrides{0, 0}) &&
                           (!kFused || decode_aligned(p.residual, p.residual_rows));
  if constexpr (sizeof(T) == 2) {
    if (cs < 0 && dec_aligned && dec8_rows(kFused, p.hidden, p.rows)) {  // kDec8Rows' NOTE
      constexpr int kK8 = 8;
      const dim3 grid(static_cast<uint32_t>(p.rows));
      const dim3 block(static_cast<uint32_t>(p.hidden / (32 * kDecodeElems * kK8) * 32));
      // The warp count compiled in: 6 / 7 / 8 (kDec8Rows' rows of 6144 / 7168 / 8192).
      // row_group_sum's NOTE, session 37: e.g. H=7168 T=208 2.25 -> 2.13, fused H=7168 T=208
      // 2.92 -> 2.73 us.
      return launch_decode_warps<T, kFused, kGemma, kK8, 6, 7, 8>(p, rows_inner, grid, block, stream);
    }
  }
  // A warp's share of the row: 4 chunks of 128 elements, or 2 or 1 (kDecodeShortChunksMin).
  const int chunks = decode_chunks(p.hidden);
  if (p.rows <= 256 && chunks > 0 && dec_aligned) {
    if (cs < 0) cs = decode_cluster_blocks(p.rows, p.hidden, kFused);
    if (cs > 1 && chunks == kDecodeChunks && p.hidden % (int64_t{kDecodeRowElems} * cs) == 0) {
      constexpr auto kernel = rmsnorm_decode_kernel<T, kFused, kGemma, true>;
      const int threads = static_cast<int>(p.hidden / cs / kDecodeRowElems * 32);
      if (threads <= 1024 && cluster_launchable<kernel>(cs, threads)) {
        return launch_kernel_clustered(kernel, dim3(static_cast<uint32_t>(p.rows * cs)),
                                       dim3(static_cast<uint32_t>(threads)), 0, stream, p.enable_pdl, cs, p,
                                       rows_inner);
      }
    }
    if (p.hidden <= kDecodeMaxHidden[kFused]) {
      const dim3 grid(static_cast<uint32_t>(p.rows));
      const dim3 block(static_cast<uint32_t>(p.hidden / (32 * kDecodeElems * chunks) * 32));
      if (chunks == 1) return launch_decode_warps<T, kFused, kGemma, 1>(p, rows_inner, grid, block, stream);
      if (chunks == 2) return launch_decode_warps<T, kFused, kGemma, 2>(p, rows_inner, grid, block, stream);
      // 4 chunks a warp; the warp count compiled in for 16-bit rows of 8 and 14 warps (H = 4096,
      // 7168), as kDec8Rows' kernels, but for the fused op's rows of 7168 past kFused14MaxRows.
      // NOTE (session 37, H200, tune_rmsnorm.cu --streams 64, bf16, two rounds, us at T = 96 /
      // 128 / 144 / 160 / 176 / 192 / 207, run-time count ("dx e4k4 early") -> 14 warps compiled
      // in): fused H=7168 1.96 / 2.37 / 2.45 / 2.48 / 2.51 / 2.59 / 3.85-3.97 -> 1.89-1.90 / 2.28
      // / 3.24-3.26 / 3.42 / 3.46 / 2.62 / 3.39-3.45 (whatever slows 144-176 rows, registers 39 ->
      // 42 leave 3 blocks an SM either way); plain H=4096 1.40 / 1.53 / 1.60 / 1.62 / 1.66 / 1.72
      // / 1.77 -> 1.32 / 1.40 / 1.48 / 1.52 / 1.57 / 1.62 / 1.68, fused H=4096 1.57 / 1.81 / 1.79 /
      // 1.82 / 1.90 / 1.94 / 2.03 -> 1.48 / 1.77 / 1.72 / 1.74 / 1.82 / 1.86 / 1.96. (The fused
      // op's 16-bit rows of 7168 past 128 now take kDec8Rows' kernel before this.)
      constexpr int64_t kFused14MaxRows = 128;
      if constexpr (sizeof(T) == 2) {
        if (!kFused || p.rows <= kFused14MaxRows) {
          return launch_decode_warps<T, kFused, kGemma, kDecodeChunks, 8, 14>(p, rows_inner, grid, block, stream);
        }
        return launch_decode_warps<T, kFused, kGemma, kDecodeChunks, 8>(p, rows_inner, grid, block, stream);
      }
      return launch_decode_warps<T, kFused, kGemma, kDecodeChunks>(p, rows_inner, grid, block, stream);
    }
  }
  if (vec_ok) {
    if constexpr (kFused) {
      const cudaError_t e = launch_twopass_for<T, kGemma>(p, rows_inner, p.hidden / kVec, stream);
      if (e != cudaErrorNotSupported) return e;
    }
    const cudaError_t e = launch_vec_for<T, kFused, kGemma>(p, rows_inner, p.hidden / kVec, stream);
    if (e != cudaErrorNotSupported) return e;
  }
  if (scalar_warp_rows(p.rows, p.hidden)) {
    constexpr int kRowsPerBlock = kScalarWarpRowsBlock / 32;
    return launch_kernel(rmsnorm_scalar_kernel<T, kFused, kGemma, true>,
                         dim3(static_cast<uint32_t>(ceil_div<int64_t>(p.rows, kRowsPerBlock))),
                         dim3(kScalarWarpRowsBlock), 0, stream, p.enable_pdl, p, rows_inner);
  }
  return launch_kernel(rmsnorm_scalar_kernel<T, kFused, kGemma>, dim3(static_cast<uint32_t>(p.rows)),
                       dim3(static_cast<uint32_t>(scalar_row_threads(p.rows, p.hidden))), 0, stream, p.enable_pdl, p,
                       rows_inner);
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
