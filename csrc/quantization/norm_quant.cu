// SPDX-License-Identifier: Apache-2.0
// fused_rmsnorm_quant / fused_add_rmsnorm_quant: RMSNorm of a row (after the residual add),
// then one scale per group of the normalised row and its 8-bit codes, one pass over memory.
// The same kernels without the norm serve sgl_per_token_group_quant_8bit: the vector kernel
// for many plain or masked rows, the decode kernel for <= 256 plain rows where it applies
// (launch_row_group_quant, called by group_quant.cu).
//
// Vector path (hidden % kVec == 0, 16-byte aligned rows and weight, a group of at most 32
// vectors): a row group of `tpr` threads (threadIdx.x) owns a row and keeps it in registers
// as 32-bit words, kVpt 16-byte vectors per lane, vector lane + k * tpr (the RMSNorm kernel's
// layout, csrc/elementwise/norm.cu, and its loads: sgl_kernel/row_norm.cuh). A quantization
// group is then `vpg` consecutive lanes at one k: the launcher makes tpr a multiple of vpg, so
// every group lies wholly inside the row or wholly past its end. The lanes of a group split
// its kVpt maxima among themselves (group_max_split), so each lane divides once, not kVpt
// times. With a division per vector, y recomputed for the codes and the maximum taken on the
// bits, the kernel was bound by instruction issue (H200, bf16 H=4096 T=32768: 169 us; 129
// with all three changes).
// Otherwise a block per row, two passes (the second re-reads the row from L1/L2).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "quantization/quant.cuh"
#include "quantization/quantization.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/cluster.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/reduce.cuh"
#include "sgl_kernel/row_norm.cuh"
#include "sgl_kernel/runtime.h"
#include "sgl_kernel/scalar_rows.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"
#include "sgl_kernel/words.cuh"

namespace sgl_kernel::quantization {

namespace {

// Largest block the kernel may run with under a register cap (the SM has 64K registers).
constexpr int norm_quant_max_threads(int max_regs) { return max_regs <= 64 ? 1024 : 512; }

// kMaxRegs: __maxnreg__ of the instantiation (the launcher keeps tpr * rows per block within
// norm_quant_max_threads). vpg_log2: log2 of the vectors per quantization group.
// kNorm = false: no norm (y = x): the plain per-token-group quantization of contiguous rows.
template <typename T, QuantCode kCode, int kVpt, int kMaxRegs, bool kFused, bool kNorm = true>
__global__ void __launch_bounds__(norm_quant_max_threads(kMaxRegs)) __maxnreg__(kMaxRegs)
    norm_quant_vec_kernel(const RowQuantParams<T> p, const int vpg_log2) {
  constexpr int kVec = kVec16<T>;
  using Wd = Words<T>;
  constexpr int kPer = Wd::kPer;
  __shared__ __align__(16) float scratch[32];  // one partial sum per warp of the block

  const int lane = threadIdx.x;
  const int tpr = blockDim.x;
  const int hv = static_cast<int>(p.hidden / kVec);
  const int64_t row = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y;
  // (Not pdl_wait_prefetched: with it the many-row calls ran slower, fused_rmsnorm_quant bf16
  // T=32768 H=4096 154.9 us against 129.5; session 19. Decode rows take the decode kernel.)
  SGL_PDL_WAIT();
  // Early with the norm; at the end without it (the plain and masked group quant of many
  // rows measured slower with the early trigger). See sgl_kernel/arch.cuh.
  if constexpr (kNorm) SGL_PDL_LAUNCH_DEPENDENTS();
  // Rows past the end (and masked-out rows) still take part in the shuffles and the barrier,
  // except that a row group of whole warps leaves at once.
  bool row_valid = row < p.rows;
  uint32_t expert = 0, token = static_cast<uint32_t>(row);  // the scale's (e, m) coordinates
  if (!kNorm && p.masked_m != nullptr && row_valid) {
    const uint32_t tpe = static_cast<uint32_t>(p.tokens_per_expert);
    expert = static_cast<uint32_t>(row) / tpe;
    token = static_cast<uint32_t>(row) - expert * tpe;
    row_valid = static_cast<int32_t>(token) < p.masked_m[expert];
  }
  if (!row_valid && tpr >= 32) return;
  // The launcher picks tpr with (kVpt - 1) * tpr <= hv: only each lane's last vector may lie
  // past the row's end.
  const bool has_last = lane + (kVpt - 1) * tpr < hv;
  auto exists = [&](int k) { return row_valid && (k < kVpt - 1 || has_last); };
  auto col = [&](int k) { return (lane + k * tpr) * kVec; };
  const T* in = p.input + row * p.input_stride;
  T* res = kFused ? p.residual + row * p.residual_stride : nullptr;

  Word4 x[kVpt], w[kNorm ? kVpt : 1];
  float rstd = 1.0f;
  if constexpr (kNorm) {
    const float sum_sq = load_row_sum_sq<T, kVpt, kFused>(in, res, p.weight, x, w, exists, col);
    rstd = rsqrtf(row_group_sum(sum_sq, tpr, scratch) / static_cast<float>(p.hidden) + p.rms_eps);
  } else {
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      if (exists(k)) x[k] = load_vec<Word4>(in + col(k));
    }
  }

  // y = x * rstd * w in fp32 (not rounded; y = x without the norm), kept for the code pass.
  float y[kVpt][kVec];
  float amax[kVpt];
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    amax[k] = 0.0f;
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      float f[kPer];
      Wd::unpack(x[k][q], f);
      if constexpr (kNorm) {
        float g[kPer];
        Wd::unpack(w[kNorm ? k : 0][q], g);
#pragma unroll
        for (int e = 0; e < kPer; ++e) f[e] = f[e] * rstd * g[e];
      }
#pragma unroll
      for (int e = 0; e < kPer; ++e) {
        y[k][q * kPer + e] = f[e];
        amax[k] = max_abs_nan(amax[k], f[e]);
      }
    }
    // Past the row's end: 0 (such a lane shares no group with one inside the row).
    if (!exists(k)) amax[k] = 0.0f;
  }
  const int vpg = 1 << vpg_log2;
  const bool clamp = needs_clamp<kCode>(p.qmin, p.qmax);
  uint8_t* out_q = static_cast<uint8_t*>(p.output_q) + row * p.hidden;
  float inv[kVpt];
  // kVpt rounded up to a power of two (group_max_split's count; 9 -> 16, with maxima of 0).
  constexpr int kSplitK = kVpt <= 1 ? 1 : 1 << (32 - __builtin_clz(static_cast<unsigned>(kVpt - 1)));
  if (vpg >= kSplitK) {
    // One scale per lane: vpg / kSplitK lanes share each (group, k); the first stores it, and
    // every lane fetches the kVpt inverses it needs from the lanes that hold them (lanes whose
    // k is kVpt or more hold a padding maximum, and store nothing).
    float amax_k[kSplitK];
#pragma unroll
    for (int k = 0; k < kSplitK; ++k) amax_k[k] = k < kVpt ? amax[k < kVpt ? k : 0] : 0.0f;
    const int span = vpg / kSplitK;
    const int own = (lane / span) % kSplitK;
    const float s = scale_from_amax(__float_as_uint(group_max_split<kSplitK>(amax_k, vpg, lane)), p.eps, p.qmax);
    const bool store = (lane & (span - 1)) == 0 && own < kVpt && exists(own);
    const float used = store ? store_scale(p.scales, expert, token, (lane + own * tpr) >> vpg_log2, s)
                             : codes_scale(p.scales, s);
    const float mine = inverse_scale(used);
    if constexpr (kVpt == 1) {
      inv[0] = mine;
    } else {
      // Source lanes are warp lanes: a row group narrower than a warp starts mid-warp.
      const int warp_lane = static_cast<int>(threadIdx.y * blockDim.x + threadIdx.x) & 31;
      const int base = warp_lane & ~(vpg - 1);
#pragma unroll
      for (int k = 0; k < kVpt; ++k) inv[k] = __shfl_sync(0xffffffffu, mine, base + k * span);
    }
  } else {
    // Small groups (fewer lanes than vectors per lane): a reduction per k.
    for (int offset = 1; offset < vpg; offset <<= 1) {
#pragma unroll
      for (int k = 0; k < kVpt; ++k) amax[k] = max_abs_nan(amax[k], __shfl_xor_sync(0xffffffffu, amax[k], offset));
    }
    const bool leader = (lane & (vpg - 1)) == 0;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const float s = scale_from_amax(__float_as_uint(amax[k]), p.eps, p.qmax);
      const float used = leader && exists(k) ? store_scale(p.scales, expert, token, (lane + k * tpr) >> vpg_log2, s)
                                             : codes_scale(p.scales, s);
      inv[k] = inverse_scale(used);
    }
  }
#pragma unroll
  for (int k = 0; k < kVpt; ++k) {
    if (exists(k)) {
      *reinterpret_cast<Vec<uint8_t, kVec>*>(out_q + col(k)) = to_codes<kCode>(y[k], inv[k], p.qmin, p.qmax, clamp);
    }
  }
  if constexpr (!kNorm) SGL_PDL_LAUNCH_DEPENDENTS();
}

// Any row alignment and hidden size: a block per row (scalar_row_threads); pass 1 forms the
// sum of squares (and stores the residual), kScalarBatch elements a thread loaded before any is
// used; pass 2 gives each warp whole groups, a lane's elements of a group (group_size / 32, at
// most kScalarGroupElems) held in registers between the group's maximum and its codes.
constexpr int kScalarGroupElems = 8;  // group sizes up to 256 (the op's limit)

template <typename T, QuantCode kCode, bool kFused>
__global__ void __launch_bounds__(1024) norm_quant_scalar_kernel(const RowQuantParams<T> p) {
  __shared__ __align__(16) float scratch[32];
  const int64_t row = blockIdx.x;
  const T* in = p.input + row * p.input_stride;
  T* res = kFused ? p.residual + row * p.residual_stride : nullptr;
  uint8_t* out_q = static_cast<uint8_t*>(p.output_q) + row * p.hidden;
  SGL_PDL_WAIT();
  SGL_PDL_LAUNCH_DEPENDENTS();  // early: see sgl_kernel/arch.cuh
  const float sum_sq = block_reduce_sum(scalar_row_sum_sq<T, kFused>(in, res, p.hidden, threadIdx.x, blockDim.x), scratch);
  // The barriers inside block_reduce_sum also make this block's residual stores visible to pass 2.
  const float rstd = rsqrtf(sum_sq / static_cast<float>(p.hidden) + p.rms_eps);
  const T* src = kFused ? res : in;
  const int lane = threadIdx.x & 31;
  const int warps = blockDim.x >> 5;
  const int64_t groups = p.hidden / p.group_size;
  for (int64_t g = threadIdx.x >> 5; g < groups; g += warps) {
    const int64_t base = g * p.group_size;
    float y[kScalarGroupElems];
    uint32_t amax = 0;
#pragma unroll
    for (int k = 0; k < kScalarGroupElems; ++k) {
      const int e = lane + 32 * k;
      y[k] = e < p.group_size ? to_float(src[base + e]) * rstd * to_float(p.weight[base + e]) : 0.f;
      amax = max(amax, abs_bits(y[k]));
    }
    amax = group_max_bits<32>(amax);
    const float s = scale_from_amax(amax, p.eps, p.qmax);
    const float used = lane == 0 ? store_scale(p.scales, 0, row, g, s) : codes_scale(p.scales, s);
    const float inv = inverse_scale(used);
#pragma unroll
    for (int k = 0; k < kScalarGroupElems; ++k) {
      const int e = lane + 32 * k;
      if (e < p.group_size) out_q[base + e] = to_code<kCode>(y[k] * inv, p.qmin, p.qmax);
    }
  }
}

// Decode kernel (<= 256 rows, and the norm ops' many rows where decode_takes_many_rows says
// so; e4m3 codes without a clamp, groups of 128, fp32 scales in either layout (row- or column-major,
// any strides: kF32) or packed UE8M0 scales; rows
// of a multiple of 512 elements up to 16384 in a block, and of 256 or 128 up to 8192 or 4096
// with kK = 2 or 1 groups a warp): a block per row, warp w holding groups 4w .. 4w + 3 (kK =
// 4), four elements of each per lane. A group's maximum is then one warp-wide integer max
// (redux.sync on the bits of non-negative floats, NaN included), no shuffle tree; lane k < 4
// divides out group 4w + k's scale and the lanes fetch the inverses. Group width,
// clamp and scale layout are compile-time: in the general vector kernel below, those run-time
// choices cost ~0.3 us a call at T=1 (H200, bf16 H=4096: 1.64 us with all three fixed, 1.94
// with all three run-time; benchmark/quantization/tune_norm_quant.cu --diag 1). This kernel:
// 1.53 / 1.60 / 1.82 us at T=1 / 16 / 128 (general kernel 1.95 / 2.01 / 2.28).
enum class DecodeScales { kF32, kPackedUe8m0 };
constexpr int kDecodeGroup = 128;
constexpr int kDecodeGroupsPerLane = 4;
constexpr int kDecodeMaxThreads = 1024;
// 2 or 1 groups a warp (decode_groups_per_warp): rows of a multiple of 256 or 128 elements,
// not of 512 (bf16 H=896, 1152, 2304, 3840, 5376, MLP shards such as 1792 or 3456). The norm
// ops took the general vector kernel there (H100, bench_fused_norm_quant.py --models, T=16:
// rmsnorm_q 1.81-2.61 us against 1.41-1.47 at the multiples of 512 around them); the plain
// quant took the flat kernel of group_quant.cu, which it keeps below this length.
constexpr int64_t kDecodeFewGroupsMin = 768;

// kNorm = false: no norm (y = x, weight and residual unused): the plain per-token-group
// quantization of sgl_per_token_group_quant_8bit (launch_row_group_quant).
// kSplit > 1 (the plain norm op only, no cluster): kSplit blocks per row, each holding the
// whole row for the sum of squares but loading the weight and writing (codes, scales) only for
// its own 1/kSplit of the row's warps (decode_row_load's `owned`). Not the fused op: its
// residual is updated in place, and a block that stored its part of the sum could overwrite
// residual values that another block of the row has not read yet (measured: wrong rows in
// fused_add_rmsnorm at H=16384, 17-32 rows, with the same split in norm.cu).
// kCluster (sm90+, norm only; kSplit = 1): a cluster of blocks per row, block r holding the r-th
// slice of blockDim.x / 32 * 512 elements (whole groups); the sums of squares are added
// through distributed shared memory (cluster_reduce), so every block gets the same rstd.
// kTrig: the PDL trigger right after the wait, or (with the norm) once the loads are issued.
// Every launch takes the former since session 20 (below); the fused op took the latter. NOTE (H200,
// session 17: decode rows timed by tools/decode_rows.py, one dev build choosing the
// placement at run time, alternated twice; us at T = 1 / 16 / 32 / 64 / 128, right after the
// wait against after the loads): add_rmsnorm_q H=4096 1.65 / 1.78 / 1.81 / 1.86 / 2.06 against
// 1.63 / 1.73 / 1.79 / 1.83 / 2.06; add_rmsnorm_ue8m0 H=7168 2.12 / 2.25 / 2.28 / 2.37 / 2.66
// against 2.08 / 2.17 / 2.20 / 2.32 / 2.65. The plain op (another run, T = 1 / 16 / 128):
// rmsnorm_q_ue8m0 H=7168 1.45 / 1.61 / 2.17 against 1.57 / 1.71 / 2.19.
// Session 20 (H100, tune_norm_quant.cu "qd early" / "qd mid", the kernel with the prefetched
// wait of session 19, four runs in two calls, us at T = 1 / 16 / 64 / 128, after the loads
// against right after the wait): add H=4096 row-major 1.60-1.62 / 1.69 / 1.87 / 2.09-2.12
// against 1.59-1.60 / 1.68 / 1.85-1.86 / 2.06-2.08; add H=7168 2.00-2.01 / 2.08-2.10 / 2.26 /
// 2.59-2.61 against 1.99-2.01 / 2.07-2.08 / 2.24-2.25 / 2.54-2.57; packed UE8M0 add H=4096 2.16
// against 2.12-2.13 at T=128, H=7168 2.66-2.69 against 2.64-2.74. The fused op now triggers
// right after the wait as well.
// The scale step (session 20, H100, tune_norm_quant.cu "qx F": a copy of this kernel with its
// pieces switched; two runs a call, two calls). Without any scale work (wrong output, "qx 8")
// the kernel is 0.2-0.3 us faster at T = 1 / 16 / 128 than with it, and the warp maxima cost
// only 0.02 of that. Three changes, each exact, and together (as shipped) worth 0.03-0.1 us:
// the divisor's reciprocal formed before the wait and the scale as one remainder correction
// (scale_from_amax_recip: the same bits as __fdiv_rn), the UE8M0 inverse by exponent bits
// (inverse_pow2), and the row length as a float, qmax and the scale's address formed before the
// wait (the compiler had put the float conversion of hidden, qmax's constant load and the
// address arithmetic after it, on the path to the last store). Packed UE8M0 layout, us at
// T = 1 / 16 / 128, before ("qx 0") against shipped: plain H=4096 1.43 / 1.50 / 1.76 against
// 1.32 / 1.39 / 1.72; add H=4096 1.64 / 1.75 / 2.11 against 1.55 / 1.65 / 2.03; add H=7168 2.07
// / 2.15 / 2.63 against 1.99 / 2.08 / 2.60. Row-major (the same pieces, "qx 97"): plain H=4096
// 1.38 / 1.45 / 1.71 against 1.31 / 1.38 / 1.67, add H=4096 1.60 / 1.70 / 2.07 against 1.52 /
// 1.62 / 1.99. Every lane working out all four scales itself (no shuffles of the inverses) was
// 0.25-0.35 us slower in every form tried. Then the uniform test for a path without the steps'
// checks ("qx 227" / "qx 225" against "qx 99" / "qx 97", two runs): packed plain H=4096 1.32 /
// 1.38 / 1.75 -> 1.30 / 1.35 / 1.72, plain H=7168 (one block a row) 1.59 / 1.65 / 2.15 -> 1.55 /
// 1.60 / 2.11, add H=7168 2.01 / 2.05 / 2.65 -> 1.97 / 2.02 / 2.64; row-major plain H=4096 1.31
// / 1.37 / 1.68 -> 1.29 / 1.35 / 1.65.
// The low n bytes of v (n = 1..4) to dst .. dst + n - 1, as wide stores as dst's alignment
// allows (dst lies inside an int32 word, dst + n at most at its end).
__device__ __forceinline__ void store_word_bytes(uint8_t* dst, uint32_t v, int n) {
  if (n == 4) {
    *reinterpret_cast<uint32_t*>(dst) = v;
  } else if (n == 2 && reinterpret_cast<uintptr_t>(dst) % 2 == 0) {
    *reinterpret_cast<uint16_t*>(dst) = static_cast<uint16_t>(v);
  } else {
    for (int b = 0; b < n; ++b) dst[b] = static_cast<uint8_t>(v >> (8 * b));
  }
}

// Where lane `mine` of warp `warp` stores row `row`'s scales in the decode layout (kK groups a
// warp): fp32, its own group warp * kK + mine (at the layout's strides: row-major or
// column-major); packed UE8M0, the warp's first byte,
// byte (warp * kK) % 4 of int32 word warp * kK / 4 (kK = 8: the first of the warp's two words).
template <DecodeScales kScales, int kK, typename T>
__device__ __forceinline__ void* decode_scale_at(const RowQuantParams<T>& p, int64_t row, int warp, int mine) {
  if constexpr (kScales == DecodeScales::kF32) {
    return static_cast<float*>(p.scales.ptr) + row * p.scales.stride_m + (warp * kK + mine) * p.scales.stride_g;
  } else {
    return reinterpret_cast<uint8_t*>(static_cast<uint32_t*>(p.scales.ptr) + row * p.scales.stride_m +
                                      (warp * kK / 4) * p.scales.stride_g) +
           (warp * kK) % 4;
  }
}

// The decode layout's quantization step for this lane's part of a row: y = f * rstd * w (y = f
// without the norm), the warp's kK group maxima (redux), the scales (lanes 0 .. kK - 1 store
// them at scale_at: this lane's group for fp32 scales, the warp's packed word
// otherwise) and the codes at out_q (the first element of the block's part of the row). qmax_r:
// qmax's reciprocal, q_ok = qmax_recip_ok(qmax) (both formed once by the caller). kv
// (warp-uniform): the warp's groups inside the row (f is 0 past them; nothing is stored for
// them, and a packed word's bytes for them are 0). col_warp >= 0: the codes go to the groups
// col_warp * kK .. of the row at out_q instead of the decode layout's (this warp's).
template <typename T, DecodeScales kScales, bool kNorm, int kK, int kElems>
__device__ __forceinline__ void decode_quantize(const RowQuantParams<T>& p, const float (&f)[kK][kElems], float rstd,
                                                const Vec<T, kElems> (&w)[kNorm ? kK : 1], int warp, float qmax,
                                                float qmax_r, bool q_ok, void* scale_at, uint8_t* out_q,
                                                int kv = kK, int col_warp = -1) {
  const int lane = threadIdx.x & 31;
  const int mine = lane & (kK - 1);
  float y[kK][kElems];
  uint32_t gmax[kK];
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    float amax = 0.f;
#pragma unroll
    for (int e = 0; e < kElems; ++e) {
      y[k][e] = kNorm ? f[k][e] * rstd * to_float(w[kNorm ? k : 0][e]) : f[k][e];
      amax = max_abs_nan(amax, y[k][e]);
    }
    // |y| and NaN are non-negative floats: their order is the unsigned order of their bits.
    gmax[k] = __reduce_max_sync(0xffffffffu, __float_as_uint(amax));
  }
  // Lane j works out the scale of group k = j % kK (one division and one reciprocal a lane,
  // not kK in sequence), stores it (lanes 0..kK-1), and the lanes fetch the kK inverses.
  uint32_t m = gmax[0];
#pragma unroll
  for (int k = 1; k < kK; ++k) m = mine == k ? gmax[k] : m;
  // The scale s, the scale the codes use, and its inverse. The maxima are warp-uniform (redux
  // results), so one uniform test sends the warp down a path without checks when all four lie
  // where each step is exact without them (amax_in_plain_range); else the checked steps.
  const uint32_t floor_bits = __float_as_uint(p.eps);
  float s, used, inv;
  if (amax_in_plain_range(gmax, floor_bits, q_ok)) {
    s = remainder_div(__uint_as_float(max(m, floor_bits)), qmax, qmax_r);
    plain_used_and_inverse<kScales == DecodeScales::kPackedUe8m0>(s, used, inv);
  } else {
    s = scale_from_amax_recip(m, p.eps, qmax, qmax_r, q_ok);
    used = kScales == DecodeScales::kF32 ? s : ue8m0_ceil(s);
    inv = kScales == DecodeScales::kF32 ? inverse_scale(used) : inverse_pow2(used);
  }
  auto store_codes = [&] {
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      const float inv_k = __shfl_sync(0xffffffffu, inv, k);
      const int col = col_warp < 0 ? decode_col<kElems, kK>(k) : decode_col<kElems, kK>(k, col_warp);
      if constexpr (kNorm) {
        // The codes as one word (e4m3_word): 28 fewer instructions in the decode kernel.
        // NOTE (session 40, H200, tune_norm_quant.cu --streams 64, bf16, six rounds, us at T = 1 /
        // 16 / 128): fused_rmsnorm_quant H=7168 row-major 1.30 / 1.34 / 1.95-1.96 -> 1.24-1.25 /
        // 1.29 / 1.92-1.93, packed 1.32-1.33 / 1.38-1.40 / 2.08-2.11 -> 1.28-1.29 / 1.37-1.38 /
        // 2.02-2.04; fused_add_rmsnorm_quant H=7168 row-major 1.72-1.73 / 1.76-1.77 / 2.22-2.24 ->
        // 1.63-1.64 / 1.68 / 2.16-2.17, packed 2.33-2.34 -> 2.27-2.29 at T=128; column-major
        // alike at T=128, 0.03-0.09 faster at T = 1 / 16; H=4096 0.01-0.06 faster. Many rows
        // (norm_quant_rows_kernel, three rounds): fused_rmsnorm_quant H=7168 T = 4096 / 32768
        // 28.7 / 207.7-209.0 -> 26.1-26.4 / 188.6-191.5 in every layout, H=4096 T=32768
        // 105.1-108.2 -> 101.8-105.3; the add op 0-2 % faster. The plain
        // group quant (kNorm false) keeps the bytes: with the word it read 0.02-0.19 faster up to
        // 64 rows but 0.1-0.2 slower at 128 in four layouts of six (H=7168 row-major 1.19-1.26
        // -> 1.38-1.40, column-major 1.42-1.43 -> 1.61-1.65; H=4096 column-major 1.08 -> 1.27),
        // faster in two (H=4096 row-major 1.20-1.22 -> 1.02-1.03, packed 1.12 -> 1.08).
        static_assert(kElems == 4, "a lane's codes of a group: one 32-bit word");
        if (k < kv) *reinterpret_cast<uint32_t*>(out_q + col) = e4m3_word(y[k], inv_k);
      } else {
        const Vec<uint8_t, kElems> codes = to_codes<QuantCode::kFp8>(y[k], inv_k, p.qmin, p.qmax, false);
        if (k < kv) *reinterpret_cast<Vec<uint8_t, kElems>*>(out_q + col) = codes;
      }
    }
  };
  if constexpr (kScales == DecodeScales::kF32) {
    if (lane < kv) *static_cast<float*>(scale_at) = s;
  } else {
    // A warp's four groups fill one int32 word (byte k = group warp * 4 + k): OR the lanes'
    // exponent bytes together and store the word once (byte stores from four lanes, as the
    // general kernel does, measured slower at T=128). With 2 or 1 groups a warp, lane 0 stores
    // the warp's kK bytes, and the row's last warp also the zeros of its word's unused bytes.
    const uint32_t byte = lane < kv ? (__float_as_uint(used) >> 23 & 0xffu) << (8 * (mine & 3)) : 0u;
    if constexpr (kK == 8) {
      // (The looping kernel's 8 groups a warp: two words, the warp's groups 0-3 and 4-7; with
      // at most 4 of them inside the row the second word lies past the row's words.)
      const uint32_t lo = __reduce_or_sync(0xffffffffu, mine < 4 ? byte : 0u);
      const uint32_t hi = __reduce_or_sync(0xffffffffu, mine < 4 ? 0u : byte);
      if (lane == 0) {
        static_cast<uint32_t*>(scale_at)[0] = lo;
        if (kv > 4) static_cast<uint32_t*>(scale_at)[p.scales.stride_g] = hi;
      }
      return store_codes();
    }
    const uint32_t word = __reduce_or_sync(0xffffffffu, byte);
    if (lane == 0) {
      if constexpr (kK == 4) {
        *static_cast<uint32_t*>(scale_at) = word;
      } else {
        const int off = (warp * kK) % 4;
        const bool last = static_cast<int64_t>(warp + 1) * (kK * kDecodeGroup) >= p.hidden;
        store_word_bytes(static_cast<uint8_t*>(scale_at), word, last ? 4 - off : kK);
      }
    }
  }
  store_codes();
}

template <typename T, bool kFused, DecodeScales kScales, bool kNorm = true, bool kCluster = false, int kSplit = 1,
          PdlTrigger kTrig = PdlTrigger::kEarly, int kK = kDecodeGroupsPerLane, bool kPieces = false, int kWarps = 0>
__global__ void __launch_bounds__(kDecodeMaxThreads) norm_quant_decode_kernel(const RowQuantParams<T> p) {
  constexpr int kElems = 4;  // elements of a group a lane holds: 8 bytes of 16-bit input, 16 of fp32
  using V = Vec<T, kElems>;
  static_assert(!kPieces || (!kNorm && !kCluster && kSplit == 1), "pieces: the plain quant (no row-wide sum)");
  static_assert(kK == 1 || kK == 2 || kK == 4 || kK == 8, "groups a warp: a power of two up to 8");
  static_assert(kK == kDecodeGroupsPerLane || (!kCluster && kSplit == 1),
                "2 or 1 groups a warp: one block a row, or pieces of the plain quant");
  static_assert(kNorm || !kCluster, "clusters share a row's sum of squares");
  static_assert((kNorm && !kCluster && !kFused) || kSplit == 1,
                "split rows: the norm only, without a cluster, and not the fused op (its in-place residual)");
  __shared__ __align__(16) float scratch[32];
  const int lane = threadIdx.x & 31;
  int64_t row = kPieces ? blockIdx.y : blockIdx.x / kSplit;
  // This block's warps [first, first + warps / kSplit) write (all of them without a split).
  const uint32_t slice = (blockDim.x >> 5) / kSplit, first = (blockIdx.x % kSplit) * slice;
  const bool owned = kSplit == 1 || ((threadIdx.x >> 5) >= first && (threadIdx.x >> 5) < first + slice);
  int rank = 0;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kCluster) {
    const int cs = static_cast<int>(cooperative_groups::this_cluster().num_blocks());
    row = blockIdx.x / cs;
    rank = static_cast<int>(blockIdx.x % cs);
  }
#elif defined(__CUDA_ARCH__)
  if constexpr (kCluster) __trap();  // no clusters below sm90: cluster_launchable refuses this code
#endif
  if constexpr (kPieces) {
    // Block x of the row's gridDim.x takes its x-th slice of blockDim.x / 32 warps; the last
    // slice's warps past the row's end leave at once (no block-wide step follows).
    rank = static_cast<int>(blockIdx.x);
    const int64_t warp_at = static_cast<int64_t>(rank) * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (warp_at * (kK * kDecodeGroup) >= p.hidden) return;
  }
  // This block's slice of the row (elements), and the wait with the lane's first input (and
  // weight) vector prefetched: the decode layout covers the row exactly.
  const int64_t part = static_cast<int64_t>(rank) * (blockDim.x >> 5) * (kK * kDecodeGroup);
  const T* in0 = p.input + row * p.input_stride + part + decode_col<kElems, kK>(0);
  // This block's warps are the row's warps rank * warps ... (one warp: kK groups, kK * 128 elements).
  const int warp = rank * static_cast<int>(blockDim.x >> 5) + static_cast<int>(threadIdx.x >> 5);
  const int mine = lane & (kK - 1);  // the group whose scale this lane works out (below)
  // Formed before the wait and held there (an empty asm after them): the row's
  // length as a float, qmax and its reciprocal, and where this lane's scale goes (fp32:
  // group warp * kK + mine; packed: the warp's int32 word).
  float hidden_f = static_cast<float>(p.hidden), qmax = p.qmax, qmax_r = __frcp_rn(p.qmax);
  // (Packed with kK < 4: the warp's bytes start at byte (warp * kK) % 4 of word warp * kK / 4.)
  void* scale_at = decode_scale_at<kScales, kK>(p, row, warp, mine);
  asm volatile("" : "+f"(hidden_f), "+f"(qmax), "+f"(qmax_r), "+l"(scale_at));
  const bool q_ok = qmax_recip_ok(qmax);
  if constexpr (kNorm) {
    pdl_wait_prefetched(in0, p.weight + part + decode_col<kElems, kK>(0));
  } else {
    pdl_wait_prefetched(in0);
  }
  static_assert(kTrig == PdlTrigger::kEarly || (kNorm && kTrig == PdlTrigger::kAfterLoads), "not measured");
  if constexpr (kTrig == PdlTrigger::kEarly) SGL_PDL_LAUNCH_DEPENDENTS();
  // Group warp * kK + k is this warp's chunk k (sgl_kernel/row_norm.cuh: 128-element chunks).
  static_assert(32 * kElems == kDecodeGroup, "a chunk of the decode layout is a group");
  float f[kK][kElems];  // the row in fp32 (fused: the rounded sum, which is stored)
  V w[kNorm ? kK : 1];
  float rstd = 1.f;
  if constexpr (kNorm) {
    float sum_sq = decode_row_load<T, kElems, kK, kFused, kTrig == PdlTrigger::kAfterLoads, kWarps>(
        p.input + row * p.input_stride + part, kFused ? p.residual + row * p.residual_stride + part : nullptr,
        p.weight + part, f, w, scratch, owned);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if constexpr (kCluster) {
      __shared__ float partial[kMaxClusterBlocks];  // cluster_reduce's table
      sum_sq = cluster_reduce(sum_sq, partial, [](float a, float b) { return a + b; });
    }
#endif
    rstd = rsqrtf(sum_sq / hidden_f + p.rms_eps);
  } else {
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      const V x = load_vec<V>(p.input + row * p.input_stride + part + decode_col<kElems, kK>(k));
#pragma unroll
      for (int e = 0; e < kElems; ++e) f[k][e] = to_float(x[e]);
    }
  }
  if (!owned) return;  // (whole warps: the rest has only warp-wide steps)

  decode_quantize<T, kScales, kNorm, kK, kElems>(p, f, rstd, w, warp, qmax, qmax_r, q_ok, scale_at,
                                                 static_cast<uint8_t*>(p.output_q) + row * p.hidden + part);
}

// The plain per-token-group quant (no norm) of 16-bit rows of a multiple of 512 elements, g=128,
// in tiles of kTileRows rows x 4 groups: block (x, y) quantizes groups 4x .. 4x + 3 of rows
// kTileRows * y ..., warp w row kTileRows * y + w, in the decode kernel's step (decode_quantize:
// 4 elements of each of the warp's 4 groups a lane, one redux a group maximum). Against the
// decode kernel (a block a row), a row's groups spread over hidden / 512 blocks, so few rows
// still reach many SMs; and with kStage the block's scales meet in shared memory after the codes
// are stored, and its first warp stores them a column at a time, consecutive lanes consecutive
// rows: with column-major scales 8 rows of a column are one 32-byte sector, written once.
// Partial writes of one sector by several blocks (or warps) cost: tune_norm_quant.cu --spread
// (session 38; H200, --streams 64, bf16 H=7168 T=128, column-major scales with consecutive rows
// 1 / 2 / 8 slots apart, us): fused_rmsnorm_quant 2.10 / 1.99 / 1.96 (row-major 1.93), the plain
// group quant 1.39 / 1.33 / 1.26 (row-major 1.17-1.19), T=256 1.82 / 1.73 / 1.69. Where the tile
// kernel runs: kGroupTileRows.
constexpr int kTileRows = 8;
template <typename T, DecodeScales kScales, bool kStage>
__global__ void __launch_bounds__(kTileRows * 32) group_quant_tile_kernel(const RowQuantParams<T> p) {
  constexpr int kElems = 4, kK = kDecodeGroupsPerLane;
  using V = Vec<T, kElems>;
  // kStage: fp32 [group k][row w] (the scale's bits); packed [row w] (the warp's word).
  __shared__ uint32_t stage[kK * kTileRows];
  const int lane = threadIdx.x & 31, w = static_cast<int>(threadIdx.x >> 5);
  const int tile = static_cast<int>(blockIdx.x);
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kTileRows;
  const int64_t row = row0 + w;
  const bool valid = row < p.rows;  // warp-uniform
  if (!kStage && !valid) return;    // (no barrier without kStage)
  // A row past the end (kStage) runs the step on row0's data and stores nothing (kv = 0), so
  // that every warp reaches the barrier on one path.
  const int64_t at = valid ? row : row0;
  const T* in = p.input + at * p.input_stride + static_cast<int64_t>(tile) * (kK * kDecodeGroup) + lane * kElems;
  float qmax = p.qmax, qmax_r = __frcp_rn(p.qmax);
  const int staged = kScales == DecodeScales::kF32 ? (lane & (kK - 1)) * kTileRows + w : w;
  void* scale_at =
      kStage ? static_cast<void*>(&stage[staged]) : decode_scale_at<kScales, kK>(p, at, tile, lane & (kK - 1));
  asm volatile("" : "+f"(qmax), "+f"(qmax_r), "+l"(scale_at));
  const bool q_ok = qmax_recip_ok(qmax);
  pdl_wait_prefetched(in);
  SGL_PDL_LAUNCH_DEPENDENTS();
  float f[kK][kElems];
#pragma unroll
  for (int k = 0; k < kK; ++k) {
    const V x = load_vec<V>(in + k * kDecodeGroup);
#pragma unroll
    for (int e = 0; e < kElems; ++e) f[k][e] = to_float(x[e]);
  }
  const V no_weight[1] = {};
  decode_quantize<T, kScales, false, kK, kElems>(p, f, 1.f, no_weight, tile, qmax, qmax_r, q_ok, scale_at,
                                                 static_cast<uint8_t*>(p.output_q) + at * p.hidden, valid ? kK : 0,
                                                 tile);
  if constexpr (kStage) {
    // (The codes before the barrier: with them after it, tune_norm_quant.cu "gt tile" read
    // 0.1-0.2 us slower at 96-160 rows of 4096-6144 elements, faster only below 48 rows.)
    __syncthreads();
    constexpr int kCols = kScales == DecodeScales::kF32 ? kK : 1;
    if (threadIdx.x < kCols * kTileRows) {
      const int c = static_cast<int>(threadIdx.x) / kTileRows, i = static_cast<int>(threadIdx.x) % kTileRows;
      if (row0 + i < p.rows) {
        const int64_t col = kScales == DecodeScales::kF32 ? static_cast<int64_t>(tile) * kK + c : tile;
        static_cast<uint32_t*>(p.scales.ptr)[col * p.scales.stride_g + (row0 + i) * p.scales.stride_m] =
            stage[c * kTileRows + i];
      }
    }
  }
}

// Where the plain group quant takes the tile kernel (16-bit rows of a multiple of 512 elements
// from min_hidden to max_hidden, rows min_rows .. max_rows), by scale layout: kAny, or
// column-major only (fp32 and packed UE8M0: kColumns; one of them: kColF32, kPacked); kStage
// as the kernel's.
// NOTE (session 38, H200, tune_norm_quant.cu --op group --streams 64, bf16, two runs, the
// slower of the two, us at T = 1 / 8 / 16 / 32 / 48 / 64 / 96 / 128 / 160; "gt direct" = without
// kStage, "gt tile cf" = with it):
//   column-major fp32, 4096: prod 0.83 / 0.86 / 0.86 / 0.91 / 1.04 / 1.02 / 1.22 / 1.31 / 1.47,
//     direct 0.85 / 0.88 / 0.89 / 0.90 / 0.91 / 0.93 / 1.10 / 1.34 / 1.41, staged 0.92 / 0.95 /
//     0.97 / 0.99 / 1.02 / 1.07 / 1.18 / 1.21 / 1.27;
//   5120: prod 0.89 / 0.91 / 0.92 / 1.01 / 1.02 / 1.13 / 1.45 / 1.51 / 1.57, direct 0.86 / 0.88 /
//     0.89 / 0.91 / 0.92 / 1.01 / 1.21 / 1.41 / 1.42, staged - / - / - / 1.00 / 1.06 / 1.20 /
//     1.21 / 1.27 / 1.49;
//   6144: prod 0.91 / 0.93 / 0.94 / 1.17 / 1.14 / 1.27 / 1.51 / 1.47 / 1.64, direct 0.86 / 0.88 /
//     0.89 / 0.91 / 1.00 / 1.09 / 1.43 / 1.41 / 1.54, staged ... / 1.18 / 1.25 / 1.38 / 1.51;
//   7168: prod 1.03 / 1.06 / 1.08 / 1.19 / 1.29 / 1.29 / 1.42 / 1.39 / 1.65, direct 0.86 / 0.88 /
//     0.90 / 0.92 / 1.04 / 1.15 / 1.40 / 1.52 / 1.67;
//   8192: prod 1.08 / 1.12 / 1.14 / 1.20 / 1.27 / 1.31 / 1.48 / 1.45 / 1.63, direct 0.86 / 0.88 /
//     0.90 / 0.92 / 1.09 / 1.34 / 1.40 / 1.57 / 1.79;
//   packed UE8M0, 4096: prod 0.85 / 0.87 / 0.88 / 0.92 / 0.97 / 1.05 / 1.18 / 1.37 / 1.43, direct
//     ... / 0.92 / 0.93 / 0.95 / 1.15 / 1.36 / 1.39, staged ... / 1.06 / 1.08 / 1.11 / 1.33;
//     5120 T = 96 / 128: prod 1.34 / 1.25, staged 1.15 / 1.33; 6144 T = 64 / 96 / 128: prod 1.19
//     / 1.36 / 1.25, staged 1.06 / 1.31 / 1.41; 7168 and 8192 as column-major fp32 to 48 rows
//     (7168 T = 1 / 32 / 48: prod 1.09 / 1.29 / 1.26, direct 0.88 / 0.93 / 1.06);
//   row-major fp32, 5120-8192 to 32 rows: prod 0.90-0.94 / 0.91-0.96 / 1.04-1.11 / 1.08-1.15,
//     direct 0.86-0.90 / 0.86-0.92 / 0.86-0.92 / 0.87-0.93 (5120 / 6144 / 7168 / 8192); 4096 and
//     below, and past 32 rows, no faster than the decode kernel (4096 T=1: 0.85 against 0.83).
// Rows of 12288-18432 elements below 64 rows took group_quant.cu's flat kernel (the decode
// kernel serves them from 64 rows, and stays faster there); the same tune, two runs alike, us at
// T = 1 / 4 / 8 / 16 / 32 / 48 / 63, flat kernel / direct / staged:
//   12288 column-major fp32 1.03 / 1.09 / 1.13 / 1.14 / 1.53 / 1.74 / 1.70, 0.81 / 0.82 / 0.89 /
//     0.91 / 1.08 / 1.36 / 1.36, ... / 1.07 / 1.23 / 1.28;
//   16384 column-major fp32 1.05 / 1.11 / 1.11 / 1.18 / 1.51 / 1.72 / 2.21-2.27, 0.84 / 0.84 /
//     0.91 / 0.93 / 1.28 / 1.37 / 1.56, ... / 1.08 / 1.30 / 1.56;
//   16384 packed 1.11 / 1.17 / 1.23 / 1.52 / 1.72 / 1.99 / 2.13, 0.84 / 0.85 / 0.93 / 0.96 / 1.35 /
//     1.42 / 1.64, ... / 1.11 / 1.35 / 1.42;
//   18432 row-major 1.06 / 1.10 / 1.04 / 1.19 / 1.41 / 1.67 / 2.30, 0.83 / 0.83 / 0.90 / 0.97 /
//     1.32 / 1.46 / 1.60, ... / 1.24 / 1.50 / 1.60 (14336 alike).
// Session 39, the rest of the flat kernel's rows past 8192 elements (same tune, two runs alike,
// us, flat / direct / staged):
//   8704-11776, T = 1 / 8 / 32 / 48 / 63: column-major fp32 1.02-1.05 / 1.12-1.14 / 1.33-1.40 /
//     1.45-1.57 / 1.52-1.71, 0.81 / 0.88 / 0.94-1.07 / 1.09-1.33 / 1.28-1.35, 0.91-0.92 / 0.96 /
//     1.11-1.19 / 1.06-1.31 / 1.20-1.35; packed T = 32 / 48 / 63 1.53-1.63 / 1.66-1.76 /
//     1.71-1.98, 0.98-1.21 / 1.29-1.37 / 1.35-1.41, 1.03-1.06 / 1.07-1.29 / 1.26-1.33; row-major
//     as column-major;
//   19456-32768, T = 8 / 16 / 24 / 32 / 48 / 63 (64 and past: the decode kernel, as fast as the
//     tile kernel or faster): flat 1.04-1.32 / 1.22-1.72 / 1.27-2.01 / 1.43-2.28 / 1.94-2.75 /
//     2.32-3.92, direct 0.89-0.95 / 0.98-1.35 / 1.14-1.42 / 1.35-1.66 / 1.53-2.06 / 1.65-2.22,
//     staged 0.97-1.08 / 1.05-1.22 / 1.04-1.38 / 1.26-1.62 / 1.40-2.13 / 1.60-2.36. Staged
//     leads from 17 rows at 19456-24576 (to 63 rows packed, to 48 otherwise), and at 9-32 rows
//     of 28672-32768; e.g. packed 24576 T = 16 / 63 1.24 / 2.06 direct, 1.06 / 1.72-1.89 staged;
//     32768 column-major T = 48 / 63 1.87 / 2.06 direct, 2.13 / 2.26 staged;
//   36864-65536, T = 1 / 4 / 16 / 32 / 63: flat 1.07-1.17 / 1.03-1.32 / 1.40-2.24 / 2.30-3.96 /
//     4.48-5.93, direct 0.84-0.90 / 0.85-0.93 / 1.32-1.67 / 1.60-2.23 / 2.86-4.28, staged
//     0.97-1.19 / 1.01-1.23 / 1.23-1.52 / 1.59-2.38 / 3.02-4.40.
// Sizes between the measured ones take the nearer measured rule.
enum class TileLayouts { kAny, kColumns, kColF32, kPacked };
struct GroupTileRows {
  TileLayouts layouts;
  int64_t min_hidden, max_hidden, min_rows, max_rows;
  bool stage;
};
constexpr GroupTileRows kGroupTileRows[] = {
    {TileLayouts::kAny, 5120, 8192, 1, 32, false},       {TileLayouts::kColumns, 4096, 8192, 33, 48, false},
    {TileLayouts::kColumns, 4096, 7168, 49, 64, false},  {TileLayouts::kColF32, 4096, 6144, 65, 160, true},
    {TileLayouts::kPacked, 4096, 4096, 65, 160, true},   {TileLayouts::kPacked, 5120, 6144, 65, 96, true},
    {TileLayouts::kAny, 8704, 11776, 1, 32, false},      {TileLayouts::kAny, 8704, 11776, 33, 63, true},
    {TileLayouts::kAny, 12288, 18944, 1, 16, false},     {TileLayouts::kAny, 12288, 18944, 17, 63, true},
    {TileLayouts::kAny, 19456, 26624, 1, 16, false},     {TileLayouts::kAny, 19456, 26624, 17, 48, true},
    {TileLayouts::kPacked, 19456, 26624, 49, 63, true},  {TileLayouts::kAny, 19456, 26624, 49, 63, false},
    {TileLayouts::kAny, 27136, 34816, 1, 8, false},      {TileLayouts::kAny, 27136, 34816, 9, 32, true},
    {TileLayouts::kAny, 27136, 34816, 33, 63, false},    {TileLayouts::kAny, 35328, 65536, 1, 63, false}};

// The tile kernel where kGroupTileRows says so (16-bit rows of a multiple of 512 elements, g=128,
// fp8 codes without a clamp, fp32 scales or packed UE8M0, rows and output aligned as the decode
// kernel needs); cudaErrorNotSupported otherwise.
template <typename T>
cudaError_t launch_group_tile(const RowQuantParams<T>& p, cudaStream_t stream, int force = -1) {
  const bool f32 = !p.scales.packed_ue8m0 && !p.scales.round_ue8m0;
  const bool packed = p.scales.packed_ue8m0;
  if constexpr (sizeof(T) != 2) {
    return cudaErrorNotSupported;
  } else {
    if (p.weight != nullptr || p.residual != nullptr || p.masked_m != nullptr || p.group_size != kDecodeGroup ||
        needs_clamp<QuantCode::kFp8>(p.qmin, p.qmax) || (!f32 && !packed) || p.hidden % (4 * kDecodeGroup) != 0 ||
        !rows_aligned(p.input, p.input_stride, sizeof(T), 4 * sizeof(T)) ||
        reinterpret_cast<uintptr_t>(p.output_q) % 4 != 0) {
      return cudaErrorNotSupported;
    }
    int mode = force;  // 0: direct, 1: kStage (tune sweeps force one)
    if (mode < 0) {
      const bool columns = p.scales.stride_m == 1 && p.scales.stride_g >= p.rows && p.rows > 1;
      for (const GroupTileRows& r : kGroupTileRows) {
        const bool kind_ok = r.layouts == TileLayouts::kColumns || (r.layouts == TileLayouts::kColF32 && f32) ||
                             (r.layouts == TileLayouts::kPacked && packed);
        const bool layout_ok = r.layouts == TileLayouts::kAny || (columns && kind_ok);
        if (layout_ok && p.hidden >= r.min_hidden && p.hidden <= r.max_hidden && p.rows >= r.min_rows &&
            p.rows <= r.max_rows) {
          mode = r.stage ? 1 : 0;
          break;
        }
      }
      if (mode < 0) return cudaErrorNotSupported;
    }
    const int64_t row_tiles = (p.rows + kTileRows - 1) / kTileRows;
    if (row_tiles > 65535) return cudaErrorNotSupported;
    const dim3 grid(static_cast<uint32_t>(p.hidden / (4 * kDecodeGroup)), static_cast<uint32_t>(row_tiles));
    const dim3 block(kTileRows * 32);
    constexpr DecodeScales kF = DecodeScales::kF32, kP = DecodeScales::kPackedUe8m0;
    if (mode == 1) {
      return f32 ? launch_kernel(group_quant_tile_kernel<T, kF, true>, grid, block, 0, stream, p.enable_pdl, p)
                 : launch_kernel(group_quant_tile_kernel<T, kP, true>, grid, block, 0, stream, p.enable_pdl, p);
    }
    return f32 ? launch_kernel(group_quant_tile_kernel<T, kF, false>, grid, block, 0, stream, p.enable_pdl, p)
               : launch_kernel(group_quant_tile_kernel<T, kP, false>, grid, block, 0, stream, p.enable_pdl, p);
  }
}

// Many rows in the decode layout (session 27): the decode kernel's block shape and step, but
// each block loops over rows blockIdx.x, + gridDim.x, ... (a grid of as many blocks as the SMs
// hold at once), the next row's loads issued before this row's sum of squares and
// quantization: a row's load latency overlaps the previous row's barrier and stores, the
// weight is loaded once a block, and no block is launched per row. The partial sums alternate
// between two shared tables, so one barrier a row suffices (a warp writing row i + 2's partial
// has passed row i + 1's barrier, which every warp reaches only after reading row i's).
// Loads two rows ahead were slower (H200, tune_norm_quant.cu "qp k4 d2": plain op H=4096
// T=4096 21.98 us against 16.33).
constexpr int kRowsMaxThreads = 512;  // 128 registers: the fused op at 4 groups a warp spilled under 64

// kPartial: the row ends inside the last warp's kK groups (G groups, G % kK != 0, on
// ceil(G / kK) warps). That warp loads its missing chunks from its first chunk's address
// (unconditional loads: with the loads under a branch the next row's were not issued ahead),
// and its steps give them f = 0 and store nothing for them.
template <typename T, bool kFused, DecodeScales kScales, int kK, bool kPartial = false>
__global__ void __launch_bounds__(kRowsMaxThreads) norm_quant_rows_kernel(const RowQuantParams<T> p) {
  constexpr int kElems = 4;
  using V = Vec<T, kElems>;
  __shared__ float partial[2][32];
  const int lane = threadIdx.x & 31;
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int mine = lane & (kK - 1);
  const int kv = kPartial ? min(kK, static_cast<int>(p.hidden / kDecodeGroup) - warp * kK) : kK;
  const int64_t stride = gridDim.x;
  const float hidden_f = static_cast<float>(p.hidden), qmax = p.qmax, qmax_r = __frcp_rn(p.qmax);
  const bool q_ok = qmax_recip_ok(qmax);
  T* const no_res = nullptr;
  // Chunk k's column (kPartial: the warp's first chunk for the missing ones).
  auto col = [&](int k) { return decode_col<kElems, kK>(kPartial && k >= kv ? 0 : k); };
  auto fetch = [&](int64_t r, V (&x)[kK], V (&res)[kFused ? kK : 1]) {
    V unused[kK];
    decode_row_fetch<T, kElems, kK, kFused>(p.input + r * p.input_stride,
                                            kFused ? p.residual + r * p.residual_stride : no_res, nullptr, false, x,
                                            res, unused, kPartial ? kv : kK);
  };
  SGL_PDL_WAIT();
  SGL_PDL_LAUNCH_DEPENDENTS();
  V w[kK];
#pragma unroll
  for (int k = 0; k < kK; ++k) w[k] = load_vec<V>(p.weight + col(k));
  int64_t row = blockIdx.x;  // < p.rows: the grid has at most p.rows blocks
  V x[kK], r[kFused ? kK : 1];
  fetch(row, x, r);
  for (int it = 0; row < p.rows; ++it, row += stride) {
    const bool more = row + stride < p.rows;
    V xn[kK], rn[kFused ? kK : 1];
    if (more) fetch(row + stride, xn, rn);
    float f[kK][kElems];
    const float sum_sq = row_group_sum(
        decode_row_sum<T, kElems, kK, kFused>(x, r, kFused ? p.residual + row * p.residual_stride : no_res, true, f, kv),
        static_cast<int>(blockDim.x), partial[it & 1]);
    const float rstd = rsqrtf(sum_sq / hidden_f + p.rms_eps);
    void* scale_at = decode_scale_at<kScales, kK>(p, row, warp, mine);
    decode_quantize<T, kScales, true, kK, kElems>(p, f, rstd, w, warp, qmax, qmax_r, q_ok, scale_at,
                                                  static_cast<uint8_t*>(p.output_q) + row * p.hidden, kv);
    if (!more) break;
#pragma unroll
    for (int k = 0; k < kK; ++k) {
      x[k] = xn[k];
      if constexpr (kFused) r[k] = rn[k];
    }
  }
}

// How many blocks of `threads` threads of `kernel` an SM holds at once, asked once and kept in
// `cached` (0: not yet asked). Every device of a process is taken to be of one architecture: on
// a mixed host a wrong count costs speed only (the looping kernels take any number of rows a
// block).
template <typename Kernel>
cudaError_t resident_blocks(Kernel kernel, int threads, std::atomic<int>& cached, int* fit) {
  *fit = cached.load(std::memory_order_relaxed);
  if (*fit == 0) {
    SGL_CUDA_TRY(cudaOccupancyMaxActiveBlocksPerMultiprocessor(fit, kernel, threads, 0));
    *fit = std::max(*fit, 1);
    cached.store(*fit, std::memory_order_relaxed);
  }
  return cudaSuccess;
}

// The looping kernel (norm_quant_rows_kernel) at gpw groups a warp (1, 2, 4 or 8, the last for
// the plain op only; at 4 and 8 the row may end inside the last warp's groups) for the norm ops' p,
// which meets the decode kernel's conditions on codes, group, scales and alignment
// (launch_norm_decode checks them), in a grid of as many blocks as the SMs of `device` (the
// current one) hold at once (at most p.rows); cudaErrorNotSupported where the row is not a
// whole number of groups, or takes more than kRowsMaxThreads threads.
template <typename T>
cudaError_t launch_norm_rows(const RowQuantParams<T>& p, cudaStream_t stream, int gpw, int device) {
  if constexpr (sizeof(T) != 2) {
    return cudaErrorNotSupported;  // (16-bit input only: rows_kernel_groups_per_warp)
  } else {
    const bool f32 = !p.scales.packed_ue8m0;
    const bool norm = p.weight != nullptr, fused = p.residual != nullptr;
    const int64_t groups = p.hidden / kDecodeGroup, warps = ceil_div<int64_t>(groups, gpw);
    const bool partial = groups % gpw != 0;
    const bool gpw_ok = gpw == 1 || gpw == 2 || gpw == 4 || gpw == 8;
    if (!norm || !gpw_ok || p.hidden % kDecodeGroup != 0 || (partial && gpw < 4) ||
        warps * 32 > kRowsMaxThreads) {
      return cudaErrorNotSupported;
    }
    const int threads = static_cast<int>(warps * 32);
    using K = void (*)(RowQuantParams<T>);
    constexpr DecodeScales kF32 = DecodeScales::kF32, kPacked = DecodeScales::kPackedUe8m0;
#define SGL_NQ_ROWS(FUSED, S, K8, K8P)                                                       \
  {norm_quant_rows_kernel<T, FUSED, S, 1>, norm_quant_rows_kernel<T, FUSED, S, 2>,            \
   norm_quant_rows_kernel<T, FUSED, S, 4>, norm_quant_rows_kernel<T, FUSED, S, 4, true>, K8, K8P}
    // [norm, fused][fp32, packed][gpw 1, 2, 4, 4 with the row ending inside the last warp,
    // 8, 8 so] (8 groups a warp for the plain op only: the fused op's were slower; the plain
    // group quant measured slower at every gpw: not built)
    static constexpr K kKernels[2][2][6] = {
        {SGL_NQ_ROWS(false, kF32, (norm_quant_rows_kernel<T, false, kF32, 8>),
                     (norm_quant_rows_kernel<T, false, kF32, 8, true>)),
         SGL_NQ_ROWS(false, kPacked, (norm_quant_rows_kernel<T, false, kPacked, 8>),
                     (norm_quant_rows_kernel<T, false, kPacked, 8, true>))},
        {SGL_NQ_ROWS(true, kF32, nullptr, nullptr), SGL_NQ_ROWS(true, kPacked, nullptr, nullptr)}};
#undef SGL_NQ_ROWS
    const int f = fused ? 1 : 0, l = f32 ? 0 : 1;
    const int gi = gpw == 1 ? 0 : gpw == 2 ? 1 : gpw == 4 ? (partial ? 3 : 2) : (partial ? 5 : 4);
    const K kernel = kKernels[f][l][gi];
    if (kernel == nullptr) return cudaErrorNotSupported;
    // Blocks an SM holds, per kernel and block size.
    static std::atomic<int> fits[2][2][6][kRowsMaxThreads / 32 + 1];
    int fit = 0;
    SGL_CUDA_TRY(resident_blocks(kernel, threads, fits[f][l][gi][warps], &fit));
    const int64_t blocks = std::min<int64_t>(p.rows, int64_t{fit} * device_sm_count(device));
    return launch_kernel(kernel, dim3(static_cast<uint32_t>(blocks)), dim3(static_cast<uint32_t>(threads)), 0, stream,
                         p.enable_pdl, p);
  }
}

// Many rows of kG groups of 128 elements, a warp a row (session 29): the norm ops in the vector
// layout (lane l's vector k is the row's 16-byte vector k * 32 + l, kV = ceil(kG / 2) vectors a
// lane), each warp looping over rows (warp w of block b takes rows b * warps + w, then +
// gridDim.x * warps, ...). Nothing is shared across warps: the sum of squares is a warp sum, so
// there is no block barrier. A group is 16 lanes at one k (lanes 0-15 hold group 2k, lanes 16-31
// group 2k + 1); with an odd kG, lanes 16-31 hold no group in the last slot (they load lanes
// 0-15's vectors there, unconditional loads, and leave them out of every step).
// group_max_split leaves the maximum of slot `own` on each lane of a half, so each lane works
// out one scale and the lanes fetch the kV inverses. kPrefetch: the next row's loads are issued
// before this row's steps (else at the end of them); kHoldW: the weight stays in registers
// for all of a warp's rows (else it is reloaded, from L1, for each row). kMaxRegs: its
// __maxnreg__ (production: 128, 16 warps an SM; the tune tries others).
constexpr int kWarpRowsMaxThreads = 256;

template <typename T, bool kFused, DecodeScales kScales, int kG, bool kPrefetch, bool kHoldW, int kMaxRegs>
__global__ void __launch_bounds__(kWarpRowsMaxThreads) __maxnreg__(kMaxRegs)
    norm_quant_warp_rows_kernel(const RowQuantParams<T> p) {
  using Wd = Words<T>;
  constexpr int kPer = Wd::kPer;
  constexpr int kVec = 4 * kPer;  // elements of a 16-byte vector
  constexpr int kV = (kG + 1) / 2;
  constexpr bool kHalfLast = kG % 2 != 0;  // lanes 16-31 hold nothing in slot kV - 1
  static_assert(kVec * 16 == kDecodeGroup, "16-bit input: a group is 16 lanes' vectors");
  static_assert(kV >= 2 && kV <= 16, "a row of 2 to 16 vectors a lane");
  constexpr int kSplitK = 1 << (32 - __builtin_clz(static_cast<unsigned>(kV - 1)));  // kV up to a power of two
  constexpr int kSpan = 16 / kSplitK;  // lanes of a half that end up holding the same slot
  // The next row's loads ahead (kPrefetch), except for sm_100+ under nvcc before 13.2: ptxas
  // 12.9.86, 13.0.88 and 13.1.115 crash (SIGSEGV) on the plain op's instances with them for
  // sm_100a and sm_120a, which broke the wheel's build for those archs, the GPU-less default
  // list included; ptxas 13.2.86 and 13.3.33 compile the same PTX (session 42; 12.9 read it
  // with its .version lowered to 8.8). Loads ahead from a clamped row, unconditional, crash
  // 13.0 too. There the warp loads each row after the previous one's stores (the fused op's
  // order); the grid is the same, so only the overlap is lost. sm_80 / 89 / 90a: unchanged.
  // PTX of those (an "X.Y+PTX" build JIT-compiled on a Blackwell GPU) keeps the loads ahead:
  // ptxas 12.9.86 and 13.0.88 compile the whole file's compute_90 PTX for sm_100 and sm_120
  // (session 43), so only PTX compiled for sm_100+ itself met the crash.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 1000 && \
    (__CUDACC_VER_MAJOR__ < 13 || (__CUDACC_VER_MAJOR__ == 13 && __CUDACC_VER_MINOR__ < 2))
  constexpr bool kAhead = false;
#else
  constexpr bool kAhead = kPrefetch;
#endif
  const int lane = threadIdx.x & 31;
  const int warps = static_cast<int>(blockDim.x >> 5);
  int64_t row = static_cast<int64_t>(blockIdx.x) * warps + (threadIdx.x >> 5);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * warps;
  const float hidden_f = static_cast<float>(p.hidden), qmax = p.qmax, qmax_r = __frcp_rn(p.qmax);
  const bool q_ok = qmax_recip_ok(qmax);
  const int own = (lane / kSpan) % kSplitK;
  const int group = 2 * own + (lane >> 4);
  SGL_PDL_WAIT();
  SGL_PDL_LAUNCH_DEPENDENTS();
  if (row >= p.rows) return;
  // Vector k's element offset (the last slot's lanes 16-31: lanes 0-15's), and whether it is
  // this lane's.
  auto at = [&](int k) { return (k * 32 + (kHalfLast && k == kV - 1 ? lane & 15 : lane)) * kVec; };
  auto live = [&](int k) { return !kHalfLast || k < kV - 1 || lane < 16; };
  auto fetch = [&](const T* src, Word4 (&v)[kV]) {
#pragma unroll
    for (int k = 0; k < kV; ++k) v[k] = load_vec<Word4>(src + at(k));
  };
  constexpr int kR = kFused ? kV : 1;
  auto fetch_row = [&](int64_t r, Word4 (&v)[kV], Word4 (&res)[kR]) {
    fetch(p.input + r * p.input_stride, v);
    if constexpr (kFused) fetch(p.residual + r * p.residual_stride, res);
  };
  Word4 x[kV], w[kV], r[kR];
  fetch_row(row, x, r);
  if constexpr (kHoldW) fetch(p.weight, w);
  while (true) {
    const int64_t next = row + stride;
    const bool more = next < p.rows;
    Word4 xn[kAhead ? kV : 1], rn[kAhead ? kR : 1];
    if constexpr (kAhead) {
      if (more) fetch_row(next, xn, rn);
    }
    if constexpr (!kHoldW) fetch(p.weight, w);
    // (Fused: x <- x + r rounded to T, stored into the residual.)
    float sum_sq = 0.f;
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      const float before = sum_sq;
      sum_sq = add_sum_sq<T, kFused>(x[k], r[kFused ? k : 0], sum_sq);
      if (!live(k)) sum_sq = before;
      if (kFused && live(k)) store_vec(p.residual + row * p.residual_stride + at(k), x[k]);
    }
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) sum_sq += __shfl_xor_sync(0xffffffffu, sum_sq, offset);
    const float rstd = rsqrtf(sum_sq / hidden_f + p.rms_eps);
    // The words pass an empty asm between the passes over them, so the compiler unpacks them
    // again instead of keeping every pass's fp32 values (kV * 8 registers each) live.
    auto opaque = [](Word4 (&v)[kV]) {
#pragma unroll
      for (int k = 0; k < kV; ++k) asm volatile("" : "+r"(v[k][0]), "+r"(v[k][1]), "+r"(v[k][2]), "+r"(v[k][3]));
    };
    opaque(x);
    // y = x * rstd * w (fp32, the decode kernel's order), formed again for the codes.
    auto norm_vec = [&](int k, float rstd, float (&y)[kVec]) {
#pragma unroll
      for (int q = 0; q < 4; ++q) {
        float f[kPer], g[kPer];
        Wd::unpack(x[k][q], f);
        Wd::unpack(w[k][q], g);
#pragma unroll
        for (int e = 0; e < kPer; ++e) y[q * kPer + e] = f[e] * rstd * g[e];
      }
    };
    float amax[kSplitK];
#pragma unroll
    for (int k = 0; k < kSplitK; ++k) {
      amax[k] = 0.f;
      if (k < kV) {
        float y[kVec];
        norm_vec(k < kV ? k : 0, rstd, y);
#pragma unroll
        for (int e = 0; e < kVec; ++e) amax[k] = max_abs_nan(amax[k], y[e]);
        if (!live(k)) amax[k] = 0.f;
      }
    }
    const float m = group_max_split<kSplitK>(amax, 16, lane);
    const float s = scale_from_amax_recip(__float_as_uint(m), p.eps, qmax, qmax_r, q_ok);
    const bool packed = kScales == DecodeScales::kPackedUe8m0;
    const float used = packed ? ue8m0_ceil(s) : s;
    const float inv = packed ? inverse_pow2(used) : inverse_scale(used);
    if constexpr (!packed) {
      if (group < kG && lane % kSpan == 0) {
        static_cast<float*>(p.scales.ptr)[row * p.scales.stride_m + group * p.scales.stride_g] = s;
      }
    } else {
      // Word j holds groups 4j .. 4j + 3: slots 2j and 2j + 1 of both halves. Lane 2j * kSpan
      // gathers them (the bytes of groups past the row are 0, the last word's unused bytes).
      uint32_t byte = group < kG ? (__float_as_uint(used) >> 23 & 0xffu) << (8 * (group & 3)) : 0u;
      byte |= __shfl_down_sync(0xffffffffu, byte, kSpan);
      byte |= __shfl_down_sync(0xffffffffu, byte, 16);
      if (lane < 16 && lane % (2 * kSpan) == 0 && own < kV) {
        static_cast<uint32_t*>(p.scales.ptr)[row * p.scales.stride_m + (own / 2) * p.scales.stride_g] = byte;
      }
    }
    uint8_t* out = static_cast<uint8_t*>(p.output_q) + row * p.hidden;
    float rstd_c = rstd;
    asm volatile("" : "+f"(rstd_c));
    opaque(x);
    opaque(w);
#pragma unroll
    for (int k = 0; k < kV; ++k) {
      float y[kVec];
      norm_vec(k, rstd_c, y);
      const float ik = __shfl_sync(0xffffffffu, inv, (lane & 16) + k * kSpan);
      const Vec<uint8_t, kVec> codes = to_codes<QuantCode::kFp8>(y, ik, p.qmin, p.qmax, false);
      if (live(k)) *reinterpret_cast<Vec<uint8_t, kVec>*>(out + at(k)) = codes;
    }
    if (!more) break;
    row = next;
    if constexpr (kAhead) {
#pragma unroll
      for (int k = 0; k < kV; ++k) {
        x[k] = xn[k];
        if constexpr (kFused) r[k] = rn[k];
      }
    } else {
      fetch_row(row, x, r);
    }
  }
}

// norm_quant_warp_rows_kernel for the norm ops' p (launch_norm_decode's conditions met) with rows
// of kG * 128 elements, `threads` a block; kPrefetch: a grid of as many blocks as the SMs of
// `device` hold at once (at most one a warp of rows), else a warp for every row.
template <typename T, bool kFused, DecodeScales kScales, int kG, bool kPrefetch, bool kHoldW, int kMaxRegs>
cudaError_t launch_warp_rows_v(const RowQuantParams<T>& p, cudaStream_t stream, int threads, int device) {
  constexpr auto kernel = norm_quant_warp_rows_kernel<T, kFused, kScales, kG, kPrefetch, kHoldW, kMaxRegs>;
  if (p.weight == nullptr || (p.residual != nullptr) != kFused || p.hidden != int64_t{kG} * 128 || threads % 32 != 0 ||
      threads < 32 || threads > kWarpRowsMaxThreads) {
    return cudaErrorNotSupported;
  }
  const int warps = threads / 32;
  int64_t blocks = ceil_div<int64_t>(p.rows, warps);
  if constexpr (kPrefetch) {
    static std::atomic<int> fits[kWarpRowsMaxThreads / 32 + 1];
    int fit = 0;
    SGL_CUDA_TRY(resident_blocks(kernel, threads, fits[warps], &fit));
    blocks = std::min<int64_t>(blocks, int64_t{fit} * device_sm_count(device));
  }
  return launch_kernel(kernel, dim3(static_cast<uint32_t>(blocks)), dim3(static_cast<uint32_t>(threads)), 0, stream,
                       p.enable_pdl, p);
}

// Where the norm ops' many rows take the warp-rows kernel (session 29): rows of `hidden`
// elements (kV = hidden / 256 vectors a lane) from min_rows rows, in 128-thread blocks under 128
// registers, the next row's loads issued ahead (prefetch: a grid of as many blocks as the SMs
// hold) or not (a warp for every row: the plain op's 2304, which spilled with them ahead, and
// the fused op, whose loads ahead are twice the registers). H200, tune_norm_quant.cu "wr p1 h1
// r128 b128" (prefetch) / "wr p0 h1 r128 b128" against what ran before (the looping, vector or
// decode kernel), bf16, row-major scales, us at T = 300 / 512 / 1024 / 2048 / 4096 / 16384:
// - plain 1024: 1.61 / 1.75 / 2.19 / 2.97 / 5.95 / 16.09 against 1.52 / 1.62 / - / 3.49 / 6.49 /
//   18.78; 1280: 1.73 / 1.91 / 2.38 / 4.66 / 6.87 / 19.04 against 2.03 / 1.93 / - / 4.97 / 8.39 /
//   26.46; 1536: 1.86 / 2.02 / 2.59 / 5.17 / 7.69 / 21.62 against 1.57 / 1.81 / 2.81 / 5.58 / 9.15
//   / 29.13; 1792: 2.01 / 2.18 / 2.82 / 5.81 / 8.75 / 24.94 against 2.60 / 2.75 / - / 6.09 / 10.10
//   / 32.28 ("-": what ran was not timed at that count; at 1024 rows of 1024 on the H100 it was
//   2.89 against 2.22); 2048: 2.21 / 2.39 / 3.10 / 6.40 / 9.71 / 28.42 against 1.80 /
//   2.04 / 3.21 / 6.29 / 10.42 / 34.19; 2304 (no prefetch): 2.81 / 3.03 / 5.02 / 7.37 / 11.83 /
//   38.25 against 2.48 / 2.56 / 4.80 / 8.22 / 13.39 / 43.04. Packed UE8M0 alike (2304 T = 1024 /
//   4096 / 16384: 5.04 / 11.95 / 38.76 against 5.25 / 13.70 / 44.57).
// - fused (no prefetch), T = 300 / 1024 / 4096 / 16384: 1024 1.73 / 2.54 / 9.55 / 30.61 against
//   1.84 / 3.40 / 10.47 / 32.49; 1280 1.94 / 3.00 / 11.93 / 37.99 against 2.16 / 3.13 / 12.21 /
//   38.88; 1536 2.10 / 3.36 / 13.44 / 44.96 against 2.16 / 3.49 / 13.67 / 45.78; 1792 2.31 / 3.71
//   / 15.24 / 51.55 against 2.86 / 4.05 / 16.35 / 53.15. At 2048 and 2304 it lost or tied below
//   16384 rows (2048 T=4096 16.91 against 16.69; 2304 19.67 against 18.71).
// From 2560 elements (10-16 vectors a lane) it lost to the looping kernel at every count, with
// loads ahead or not, under 128 or 168 registers (plain 3072 T=4096 14.50 against 13.29).
// H100 (the same tune, what ran before against this kernel, us at T = 300 / 512 / 1024 / 2048 /
// 4096 / 16384): every length gained or tied as on the H200 (plain 1792 2.66 / 2.79 / 3.46 / 6.83
// / 11.04 / 35.16 against 2.10 / 2.27 / 2.90 / 6.84 / 10.55 / 34.79; plain 2304 T = 2048 / 4096 /
// 16384 9.32 / 15.01 / 46.02 against 8.50 / 13.30 / 41.44; fused 1280 2.28 / - / 3.17 / - / 15.08
// / 52.24 against 2.07 / - / 3.14 / - / 14.80 / 51.41) but the plain op's 2048 past 4096 rows
// (T=16384 39.40 against the vector kernel's 38.06): on parts under kFastMemory it runs there
// only at 4096 rows (max_rows_slow).
// Session 29, rows of 7 and 9 groups (the last slot half used), us at T = 300 / 512 / 1024 / 2048
// / 4096 / 16384 against what ran (the looping kernel at 1 group a warp up to 1024 / 512 rows,
// then the vector kernel): H200 plain 896 1.62 / 1.77 / 2.16 / 3.01 / 5.92 / 16.38 against 1.82
// / 1.72 / 2.57 / 3.35 / 6.00 / 17.48, plain 1152 1.79 / 1.93 / 2.40 / 4.61 / 6.92 / 19.47
// against 1.90 / 1.98 / 2.76 / 4.78 / 8.12 / 23.39; fused (T = 300 / 1024 / 4096 / 16384) 896
// 1.73 / 2.54 / 9.53 / 28.06 against 2.05 / 3.05 / 9.47 / 28.71, 1152 1.89 / 2.98 / 11.81 /
// 35.61 against 2.20 / 3.38 / 11.97 / 36.31. H100 alike (plain 1152 1.84 / 2.00 / 2.46 / - / 7.64
// / 22.73 against 1.94 / 2.03 / 2.83 / - / 8.96 / 25.60); the fused op's 896 lost 1 % at 4096
// rows on both (H100 11.43 against 11.28): up to 2048 rows there. In bench_fused_norm_quant.py
// --models (H200) the plain op's 896 at 4096 rows, L2-hot there, read 4.90 us against the vector
// kernel's 4.69 (1152: 5.77 against 6.29): 896 up to 2048 rows as well.
struct WarpRowsRange {
  int64_t hidden, min_rows;
  bool fused;
  int64_t max_rows_slow = INT64_MAX;  // the bound on parts under kFastMemory
  int64_t max_rows = INT64_MAX;
};
constexpr WarpRowsRange kWarpRows[] = {
    {896, 257, false, INT64_MAX, 2048}, {1024, 1024, false}, {1152, 257, false}, {1280, 257, false},
    {1536, 1024, false}, {1792, 257, false}, {2048, 4096, false, 4096}, {2304, 2048, false},
    {896, 257, true, INT64_MAX, 2048},  {1024, 257, true},   {1152, 257, true},  {1280, 257, true},
    {1536, 257, true},  {1792, 257, true}};

// The warp-rows kernel's production shape for rows of kG groups (128 threads a block, 128
// registers, the weight held): the plain op with the loads ahead but at 2304 elements (kG = 18,
// where they spilled), the fused op (kG up to 14) without them.
template <typename T, int kG>
cudaError_t launch_warp_rows_g(const RowQuantParams<T>& p, cudaStream_t stream, int device) {
  constexpr DecodeScales kF32 = DecodeScales::kF32, kPacked = DecodeScales::kPackedUe8m0;
  constexpr int kThreads = 128;
  const bool f32 = !p.scales.packed_ue8m0;
  if (p.residual != nullptr) {
    if constexpr (kG <= 14) {
      return f32 ? launch_warp_rows_v<T, true, kF32, kG, false, true, 128>(p, stream, kThreads, device)
                 : launch_warp_rows_v<T, true, kPacked, kG, false, true, 128>(p, stream, kThreads, device);
    } else {
      return cudaErrorNotSupported;
    }
  }
  constexpr bool kAhead = kG != 18;
  return f32 ? launch_warp_rows_v<T, false, kF32, kG, kAhead, true, 128>(p, stream, kThreads, device)
             : launch_warp_rows_v<T, false, kPacked, kG, kAhead, true, 128>(p, stream, kThreads, device);
}

// The warp-rows kernel where kWarpRows takes p (launch_norm_decode's conditions met; fast_memory:
// the device's peak DRAM bandwidth is at least kFastMemory); cudaErrorNotSupported elsewhere.
template <typename T>
cudaError_t launch_norm_warp_rows(const RowQuantParams<T>& p, cudaStream_t stream, int device, bool fast_memory) {
  if constexpr (sizeof(T) != 2) {
    return cudaErrorNotSupported;
  } else {
    const bool fused = p.residual != nullptr;
    if (!rows_aligned16(p.input, p.input_stride, sizeof(T)) || !is_aligned16(p.weight) ||
        !rows_aligned16(p.output_q, p.hidden, 1) || (fused && !rows_aligned16(p.residual, p.residual_stride, sizeof(T)))) {
      return cudaErrorNotSupported;
    }
    bool taken = false;
    for (const WarpRowsRange& r : kWarpRows) {
      const int64_t max_rows = fast_memory ? r.max_rows : std::min(r.max_rows, r.max_rows_slow);
      if (r.hidden == p.hidden && r.fused == fused && p.rows >= r.min_rows && p.rows <= max_rows) taken = true;
    }
    if (!taken) return cudaErrorNotSupported;
    switch (p.hidden / 128) {
      case 7:
        return launch_warp_rows_g<T, 7>(p, stream, device);
      case 8:
        return launch_warp_rows_g<T, 8>(p, stream, device);
      case 9:
        return launch_warp_rows_g<T, 9>(p, stream, device);
      case 10:
        return launch_warp_rows_g<T, 10>(p, stream, device);
      case 12:
        return launch_warp_rows_g<T, 12>(p, stream, device);
      case 14:
        return launch_warp_rows_g<T, 14>(p, stream, device);
      case 16:
        return launch_warp_rows_g<T, 16>(p, stream, device);
      case 18:
        return launch_warp_rows_g<T, 18>(p, stream, device);
      default:
        return cudaErrorNotSupported;
    }
  }
}

// Blocks per row of the norm + quant decode kernel (1: one block; it takes at most 16384
// elements a block). tune_norm_quant.cu --norms 1 ("q-cN", H100, bf16, g=128, row-major
// scales, us):
//   fused H=16384, T=1/4/8/16/32: c1 3.66/3.76/3.88/3.94/4.03, c4 2.39/2.41/2.42/2.56/3.17,
//     c8 2.34/2.30/2.34/2.59/3.39, c16 2.31/2.36/2.52/3.10/4.88
//   fused H=32768, T=1/4/8/16/32: c4 3.24/3.25/3.25/3.50/4.83, c8 2.53/2.55/2.60/3.23/4.53
//   plain H=16384, T=1/4/8/16: c1 2.87/2.90/2.96/2.99, c4 2.23/2.27/2.26/2.36, c8 2.21/2.19/2.20/2.39
//   plain H=32768, T=1/4/8/16: c4 2.85/2.86/2.89/3.04, c8 2.33/2.34/2.40/2.93
// (packed UE8M0 scales alike; c2 slower than c4 everywhere). Rows over 32 not measured.
// Session 25 (H100, the same tune, fused H=12288, T = 1 / 16 / 32 / 64 / 128): c1 2.42 / 2.55 /
// 2.63 / 2.80 / 3.34, c4 2.08 / 2.19 / 2.59 / 3.56 / 5.20, c8 2.05 / 2.26 / 2.96 / 4.32 / 6.82;
// fused H=8192: c1 1.95 / 2.05 / 2.11, c4 1.99 / 2.07 / 2.28 (kept at one block). So the fused
// op's rows from 12288 elements take 4 blocks up to 16 rows (the plain op splits them instead,
// norm_decode_split).
int norm_decode_cluster_blocks(int64_t rows, int64_t hidden, bool fused) {
  if (fused && hidden >= 12288 && hidden < 16384) return rows <= 16 ? 4 : 1;
  if (hidden < 16384 || rows > 32) return 1;
  return rows <= 8 || hidden >= 32768 ? 8 : 4;
}

template <typename T, bool kFused, DecodeScales kScales>
cudaError_t launch_norm_decode_cluster(const RowQuantParams<T>& p, int cs, int threads, cudaStream_t stream) {
  constexpr auto kernel = norm_quant_decode_kernel<T, kFused, kScales, true, true>;
  if (!cluster_launchable<kernel>(cs, threads)) return cudaErrorNotSupported;
  return launch_kernel_clustered(kernel, dim3(static_cast<uint32_t>(p.rows * cs)), dim3(static_cast<uint32_t>(threads)),
                                 0, stream, p.enable_pdl, cs, p);
}

// Blocks per row without a cluster (split rows, see the kernel) for the plain norm op, for a
// row of `warps` warps. tune_norm_quant.cu --norms 1 ("q-sN", H100, bf16, g=128, row-major
// scales, us at T=1/16/32/128; s1 = no split):
//   plain H=8192: s1 1.73/1.83/1.89/2.25, s2 1.52/1.63/1.73/2.33, s4 1.46/1.61/1.71/3.19
//   plain H=7168: s1 1.69/1.79/1.83/2.12, s2 1.50/1.59/1.68/2.19
// Packed UE8M0 scales, H=7168 T=1/16: 1.78/1.88 -> 1.58/1.67. (The fused op would gain
// 0.1-0.2 us the same way, add H=8192 s4 1.90/2.04/2.18 against 2.08/2.24/2.30, but cannot
// split: see the kernel.)
// Session 20 (H100, the same rows after this session's scale-step changes, two runs): plain
// H=4096 (8 warps) T = 1 / 16 / 32 / 64 / 128, s1 / s2: packed UE8M0 1.25-1.26 / 1.32 / 1.43-1.44
// / 1.55 / 1.74-1.75 against 1.19-1.20 / 1.28 / 1.52-1.53 / 1.60 / 1.82-1.83; row-major 1.26 /
// 1.33 / 1.36 / 1.47 / 1.62-1.63 against 1.19 / 1.26 / 1.37 / 1.53 / 1.75. So 8-warp rows split
// in two up to 16 rows (10 and 12 warps were not measured and keep one block).
int norm_decode_split(int64_t rows, int64_t warps) {
  if (warps == 8) return rows <= 16 ? 2 : 1;
  if (warps < 14 || rows > 32) return 1;
  if (warps % 4 == 0 && rows <= 16) return 4;
  return warps % 2 == 0 ? 2 : 1;
}

// The norm ops' decode kernel at 4 groups a warp, one block a row or kSplit (plain op), with the
// warp count compiled in (row_group_sum<kTpr>: no shuffles after its barrier) for 16-bit rows of
// 8 warps (H=4096) and of 14 (H=7168) with packed UE8M0 scales or, fp32 scales, the plain op's
// unsplit rows. NOTE (session 37, H200, tune_norm_quant.cu --streams 64, bf16, three rounds, us
// at T = 1 / 16 / 64 / 128, run-time warp count -> compiled in): H=4096 rmsnorm_q row-major 1.20
// / 1.24 / 1.40 / 1.62 -> 1.20 / 1.24 / 1.31 / 1.53-1.55, add 1.38 / 1.44 / 1.54 / 1.81 -> 1.30 /
// 1.35 / 1.46 / 1.73, packed and column-major alike; H=7168 packed rmsnorm_q 1.33 / 1.40 / 1.74 /
// 2.09 -> 1.31 / 1.38 / 1.69 / 2.08, add 1.75 / 1.79 / 1.98 / 2.38 -> 1.69 / 1.74 / 1.93 / 2.33;
// H=7168 row-major rmsnorm_q 1.30 / 1.33 / 1.69 / 2.01 -> 1.31 / 1.37 / 1.64 / 1.95 (T=16 is
// split), add 1.72 / 1.76 / 1.91 / 2.23 -> 1.73 / 1.81 / 1.96 / 2.21 and column-major add 1.72 /
// 1.77 / 2.03 / 2.45 -> 1.73 / 1.81 / 2.11 / 2.46: those keep the run-time count. Past 128 rows
// (us at T = 144 / 160 / 176 / 192 / 207 / 224 / 256): H=4096 0.05-0.17 faster in every layout
// and op (rmsnorm_q row-major 1.74 / 1.77 / 1.79 / 1.83 / 1.87 / 1.94 / 2.06 -> 1.60 / 1.63 /
// 1.66 / 1.70 / 1.73 / 1.78 / 1.90); H=7168 packed plain 2.39 / 2.40 / 2.42 / 2.46 / 2.51 / 2.63
// / 2.87 -> 2.33 / 2.32 / 2.39 / 2.45 / 2.50 / 2.57 / 2.72, but packed add 2.93 / 2.97 / 2.95 /
// 2.99 / 3.04 / 3.13 / 3.34 -> 2.93 / 2.95 / 2.97 / 3.03 / 3.08 / 3.15 / 3.32, so the fused op's
// 14-warp rows keep the run-time count past kFused14MaxRows.
constexpr int64_t kFused14MaxRows = 128;
template <typename T, bool kFused, DecodeScales kScales, int kSplit = 1>
cudaError_t launch_norm_decode_warps(const RowQuantParams<T>& p, dim3 grid, dim3 block, cudaStream_t stream) {
  constexpr PdlTrigger kEarly = PdlTrigger::kEarly;
  constexpr int kK = kDecodeGroupsPerLane;
  if constexpr (sizeof(T) == 2) {
    if (block.x == 8 * 32) {
      return launch_kernel(norm_quant_decode_kernel<T, kFused, kScales, true, false, kSplit, kEarly, kK, false, 8>,
                           grid, block, 0, stream, p.enable_pdl, p);
    }
    constexpr bool k14 = kScales == DecodeScales::kPackedUe8m0 || (!kFused && kSplit == 1);
    if (k14 && block.x == 14 * 32 && (!kFused || p.rows <= kFused14MaxRows)) {
      return launch_kernel(norm_quant_decode_kernel<T, kFused, kScales, true, false, kSplit, kEarly, kK, false, 14>,
                           grid, block, 0, stream, p.enable_pdl, p);
    }
  }
  return launch_kernel(norm_quant_decode_kernel<T, kFused, kScales, true, false, kSplit>, grid, block, 0, stream,
                       p.enable_pdl, p);
}

// The plain norm op's decode kernel with `split` blocks per row (1, 2 or 4; 4 groups a warp).
template <typename T, DecodeScales kScales>
cudaError_t launch_norm_decode_split(const RowQuantParams<T>& p, int split, dim3 grid, dim3 block, cudaStream_t stream) {
  if (split == 4) return launch_kernel(norm_quant_decode_kernel<T, false, kScales, true, false, 4>, grid, block, 0,
                                       stream, p.enable_pdl, p);
  if (split == 2) return launch_norm_decode_warps<T, false, kScales, 2>(p, grid, block, stream);
  return launch_norm_decode_warps<T, false, kScales, 1>(p, grid, block, stream);
}

// The decode kernel without a cluster or a split at gpw groups a warp (4, 2 or 1); kPieces:
// the plain quant's rows of more than 32 warps, grid (pieces, rows).
template <typename T, bool kFused, bool kNorm, DecodeScales kScales, bool kPieces = false>
cudaError_t launch_decode_gpw(const RowQuantParams<T>& p, int gpw, dim3 grid, dim3 block, cudaStream_t stream) {
  constexpr PdlTrigger kEarly = PdlTrigger::kEarly;
  switch (gpw) {
    case 1:
      return launch_kernel(norm_quant_decode_kernel<T, kFused, kScales, kNorm, false, 1, kEarly, 1, kPieces>, grid,
                           block, 0, stream, p.enable_pdl, p);
    case 2:
      return launch_kernel(norm_quant_decode_kernel<T, kFused, kScales, kNorm, false, 1, kEarly, 2, kPieces>, grid,
                           block, 0, stream, p.enable_pdl, p);
    default:
      return launch_kernel(norm_quant_decode_kernel<T, kFused, kScales, kNorm, false, 1, kEarly, 4, kPieces>, grid,
                           block, 0, stream, p.enable_pdl, p);
  }
}

// Groups a warp of the decode kernel for a row of `hidden` elements (a multiple of 128): 4
// where the row is a multiple of 512 elements, else 2 or 1 (a multiple of 256 or of 128 only),
// for the plain quant from kDecodeFewGroupsMin elements (shorter rows: 4, which then does not
// apply, and the flat kernel of group_quant.cu runs). Rows of 2 or 1 groups a warp hold at most
// 8192 or 4096 elements in a block.
inline int decode_groups_per_warp(int64_t hidden, bool norm) {
  if (hidden % (4 * kDecodeGroup) == 0 || (!norm && hidden < kDecodeFewGroupsMin)) return kDecodeGroupsPerLane;
  return hidden % (2 * kDecodeGroup) == 0 ? 2 : 1;
}

// The plain quant's (no norm) 16-bit rows of a multiple of 512 elements at 129-256 rows with
// fp32 scales: fewer groups a warp, so more warps a row (up to 32), where the decode kernel at 4
// groups a warp leaves an SM with 1-2 blocks of 5-16 warps. Rows [min_rows, max_rows] of `hidden`
// elements take `gpw` groups a warp.
// NOTE (session 35, H200, tune_norm_quant.cu --op group --streams 64, the bench's process
// state; bf16, row-major fp32 scales, two runs alike; us, 4 groups a warp against the row's
// choice):
//   2560 k2, T = 128 / 160 / 192: 0.96-0.99 / 1.07 / 1.12-1.13 against 0.90-0.91 / 0.95 / 0.97-0.98
//   3072 k2, T = 128 / 160 / 192: 1.01 / 1.13 / 1.28-1.29 against 0.96 / 1.02 / 1.08;
//        k1, T = 224 / 256: 1.33 / 1.31-1.32 against 1.10-1.11 / 1.13-1.14
//   4096 k1, T = 224 / 256: 1.44-1.45 / 1.49-1.50 against 1.26-1.27 / 1.30
//   6144 k2, T = 192 / 224 / 256: 1.61 / 1.86 / 1.91-1.92 against 1.46 / 1.48 / 1.52
//   7168 k2, T = 152 / 160 / 192 / 224 / 256: 1.72-1.73 / 1.74-1.76 / 1.76-1.77 / 2.04 / 2.09
//        against 1.53-1.55 / 1.55 / 1.57 / 1.61 / 1.65
//   8192 k2, T = 224 / 256: 1.92-2.03 / 1.92-1.94 against 1.73-1.74 / 1.77-1.78
// Column-major fp32 scales alike (7168 k2 T = 160 / 224 / 256: 1.76 / 2.04 / 2.11 against 1.64 /
// 1.72 / 1.81; 4096 k1 T = 224 / 256: 1.54 / 1.56 against 1.39 / 1.46). In a fresh process
// (fewer than 10 streams used: benchmark/RESULTS.md session 34) the same rows read within
// -0.09..+0.05 us of 4 groups a warp (4096 k1 T=224: 1.30 against 1.21; 7168 k2 T=160: 1.54
// against 1.48); rows where that loss exceeded half the gain above were left out (7168 at
// 136-144, 6144 at 144-176, 4096 at 192, 5120 everywhere; 193-223 rows of 4096 were not
// measured). Packed UE8M0 scales keep 4 groups a warp: 2 were slower at 128-192 rows (7168
// T=160: 1.91 against 1.57) and at 4096, 5120 and 8192, faster only at 6144 and 7168 from 224
// rows (7168 T = 224 / 256: 2.01 / 2.16 against 2.16 / 2.26; one run, not taken).
struct PlainQuantGpwRows {
  int64_t hidden;
  int gpw;
  int64_t min_rows, max_rows;
};
constexpr PlainQuantGpwRows kPlainQuantGpwRows[] = {{2560, 2, 128, 192}, {3072, 2, 128, 192}, {3072, 1, 193, 256},
                                                    {4096, 1, 224, 256}, {6144, 2, 192, 256}, {7168, 2, 152, 256},
                                                    {8192, 2, 224, 256}};

// Groups a warp of the plain quant's decode kernel (<= 256 rows) for 16-bit rows with fp32
// scales: kPlainQuantGpwRows' choice, else decode_groups_per_warp's.
inline int plain_quant_groups_per_warp(int64_t rows, int64_t hidden) {
  for (const PlainQuantGpwRows& r : kPlainQuantGpwRows) {
    if (r.hidden == hidden && rows >= r.min_rows && rows <= r.max_rows) return r.gpw;
  }
  return decode_groups_per_warp(hidden, false);
}

// One vector-path configuration: vectors a lane, register cap, threads a block, and the
// fewest rows it is tried at.
struct NormQuantShape {
  int vpt, max_regs, block_threads;
  int64_t min_rows = 0;
  bool exact = false;  // only where vpt vectors on the row group's lanes cover the row exactly
  int64_t max_rows = INT64_MAX;
  int unless_vpt = 0;  // if > 0: only where that many vectors a lane (64 registers) do not fit
  int max_tpr = 1024;  // only on at most this many lanes a row
};

// Shapes tried in order, by rows: the first whose threads per row fit runs.
// NOTE (H200, bf16 g=128, benchmark/quantization/tune_norm_quant.cu): decode (<= 256 rows that
// the decode kernel above does not take: other group sizes, a clamp, column-major fp32 scales,
// int8 codes, other hidden sizes): 2 vectors a lane (fused_rmsnorm_quant H=4096 T=1/16/128 1.90/1.97/2.23 us; 1 vector 1.91/1.99/
// 2.25, 4 vectors 2.07/2.16/2.41; H=7168 2.36/2.43/2.71, 1 vector 2.49/2.56/2.91). Many rows:
// 8 vectors a lane under 128 registers in 128-thread blocks (H=4096 T=32768 125.8 us, 4
// vectors / 256-thread blocks 128.6; fused add 229.4 against 229.0; H=7168 238.7 / 241.3);
// the 4-vector shape was up to 2 % faster at T=1024-4096 for H=4096.
constexpr NormQuantShape kDecodeShapes[] = {{2, 64, 128}, {1, 64, 128}, {4, 64, 128}, {8, 128, 128}};
// The plain op also takes 9 vectors a lane from 2048 rows, for rows of 144 / 288 / 576
// vectors (bf16 H=1152 / 2304 / 4608: 9 x 16 / 32 / 64 lanes), which took 2 or 4 vectors on
// 96 lanes or more, a lane's last vector often past the row's end. Session 25 (H100,
// tune_norm_quant.cu "v9r128b128" against the shape that ran, us at T = 1024 / 4096 / 16384):
// H=1152 4.02 / 9.39 / 25.56 against 2.90 / 11.80 / 39.96, H=2304 6.23 / 15.00 / 45.83 against
// 5.52 / 15.49 / 52.04, H=4608 9.46 / 25.85 / 88.25 against 9.28 / 28.67 / 102.77; at T=512
// 1.3-1.7x slower (a lane's 9 vectors in sequence, too few lanes in flight). Exact fits only:
// H=6656 (832 vectors, 9 on 96 lanes) took 41.48 / 150.80 us at T = 4096 / 16384 against
// 34.32 / 126.82 for 4 a lane (and the decode kernel takes it now). The fused op
// gained at most 3 % (H=1152) and lost 1 % at H=4608: not taken; nor the plain group quant
// (8-20 % slower).
// 5 vectors a lane where neither 8 nor 4 fit (a lane's last vector past the row's end): rows of
// 80 / 144 / 160 / 272 vectors (bf16 H=640 / 1152 / 1280 / 2176 at g=128) took 2 vectors on
// 64 / 96 / 96 / 160 lanes, most lanes' second vector past the end; 5 on 16 / 32 / 32 / 64 lanes
// leave at most one vector a lane idle. Session 26 (H100, tune_norm_quant.cu "v5r128b128"
// against the shape that ran, us):
// - plain op, T = 1024 / 2048 / 4096 / 16384: H=640 2.33 / 2.82 / 5.49 / 15.53 against 2.40 /
//   3.26 / 7.15 / 22.93; H=1280 2.85 / 5.50 / 9.13 / 27.79 against 2.90 / 6.75 / 11.81 / 39.61;
//   H=2176 5.30 / 9.14 / 15.50 / 51.92 against 6.41 / 11.46 / 20.63 / 73.23. H=1152 (where 9
//   fit exactly), T = 1024 / 2048 / 4096 / 8192 / 16384: 2.82 / 5.30 / 8.91 / 15.33 / 27.29
//   against 2.87 (2 vectors) / 6.16 / 9.34 / 15.03 / 25.38 (9 vectors): 5 up to 8191 rows
//   there, ahead of 9 (which keeps 2304 / 4608, where 4 fit). At T=512 2.36 against 2.31.
// - fused op, T = 1024 / 4096 / 16384: H=640 2.76 / 8.91 / 27.87 against 2.87 / 9.51 / 29.73,
//   H=1152 3.45 / 14.36 / 47.34 against 3.52 / 15.39 / 51.52, H=1280 3.57 / 15.41 / 52.29
//   against 3.57 / 16.05 / 55.15, H=2176 8.21 / 24.68 / 86.87 against 8.92 / 26.57 / 95.50; at
//   T=512 up to 5 % slower (H=2176 3.50 against 3.32): from 1024 rows for both norm ops.
// - plain group quant, T = 512 / 1024 / 2048 / 8192 / 32768: H=640 1.79 / 1.93 / 2.35 / 7.80 /
//   23.26 against 1.67 / 2.11 / 2.91 / 8.86 / 29.50, H=1152 1.90 / 2.28 / 4.65 / 11.78 / 39.86
//   against 2.10 / 2.85 / 4.87 / 12.93 / 45.55, H=1280 1.91 / 2.33 / 4.86 / 12.83 / 43.96
//   against 2.09 / 2.85 / 4.90 / 13.44 / 47.65, H=2176 2.21 / 4.48 / 7.12 / 20.08 / 73.07
//   against 2.18 / 4.49 / 6.95 / 21.57 / 80.19: at every row count.
// Other group sizes and fp32 input take the same shapes where they fit; only bf16 at g=128 was
// measured.
constexpr NormQuantShape kManyRowShapes[] = {
    {8, 128, 128}, {4, 64, 256}, {5, 128, 128, 1024}, {2, 64, 256}, {1, 64, 256}};
// The plain op also takes 6 vectors a lane from 2048 rows where they cover the row exactly on
// at most 32 lanes (bf16 H=1536: 6 x 32 lanes, where 4 ran on 64 lanes, a quarter of the
// vectors past the row's end; 768 and fp32 768 / 384 alike, not measured). Session 26 (H100,
// tune, T = 2048 / 4096 / 16384): 6.00 / 10.03 / 31.50 against 6.28 / 10.47 / 32.38. At H=3072
// (6 on 64 lanes, where 4 on 96 cover it exactly) 6 were slower (T=2048 10.56 against 10.13).
// The fused op at 1536: 18.11 against 17.83 at T=4096, not taken.
constexpr NormQuantShape kManyRowPlainShapes[] = {
    {8, 128, 128},       {5, 128, 128, 1024, false, 8191, 4}, {9, 128, 128, 2048, true},
    {6, 128, 128, 2048, true, INT64_MAX, 0, 32}, {4, 64, 256}, {5, 128, 128, 1024}, {2, 64, 256}, {1, 64, 256}};
// The plain group quant (no norm), rows > 256: 4 vectors a lane, 128-thread blocks (H=4096
// T=32768 97.7 us against 110.3 for the flat kernel of group_quant.cu, T=4096 14.3 / 15.9,
// T=1024 5.31 / 5.54; H=7168 T=32768 170.5 / 191.2). The flat kernel stays faster below
// (T=1: 1.07 us against 1.33 for the best row shape).
constexpr NormQuantShape kGroupShapes[] = {{4, 64, 128}, {8, 128, 128}, {5, 128, 128}, {2, 64, 128}, {1, 64, 128}};

// The first of `shapes` that takes rows of hv 16-byte vectors (vpg a quantization group) at
// `rows` rows: its index, with its threads per row in *tpr; -1 if none does.
template <size_t kShapes>
int pick_shape(const NormQuantShape (&shapes)[kShapes], int64_t rows, int64_t hv, int vpg, int* tpr) {
  for (size_t i = 0; i < kShapes; ++i) {
    const NormQuantShape& s = shapes[i];
    if (rows < s.min_rows || rows > s.max_rows) continue;
    if (s.unless_vpt > 0 && row_group_threads(hv, s.unless_vpt, vpg, norm_quant_max_threads(64)) != 0) continue;
    // A quantization group (vpg lanes at one k) must not straddle row groups: tpr >= vpg.
    *tpr = row_group_threads(hv, s.vpt, vpg, norm_quant_max_threads(s.max_regs));
    if (*tpr == 0 || *tpr > s.max_tpr || (s.exact && int64_t{*tpr} * s.vpt != hv)) continue;
    return static_cast<int>(i);
  }
  return -1;
}

// Whether the decode kernel also takes more than 256 rows of 16-bit input, rows of a multiple
// of 512 elements up to 8192 (one block a row, 1 to 16 warps): up to 512 rows at every such
// length, and the fused op's rows from 2560 elements at any count (where the looping kernel,
// rows_kernel_groups_per_warp, does not take them first). Until session 27 also the plain op's
// 5120 and 6656 at any count (where the vector kernel ran 4 vectors a lane on 160 / 208 lanes):
// the looping kernel's now.
// Session 26 (H100, tune_norm_quant.cu "qd many k4" against the vector kernel's shape, us):
// - Just past 256 rows the vector kernel's shapes were up to 1.8x slower: plain op at T = 300 /
//   512, H=512 1.34 / 1.36 against 2.36 / 2.38, H=1024 1.71 / 2.04 against 2.67 / 2.76, H=2048
//   1.88 / 2.06 against 2.75 / 2.90, H=4096 (T=512) 4.56 against 5.32, H=7168 5.12 / 6.98
//   against 6.18 / 7.07; fused op H=512 1.65 against 2.67 (T=300), H=2048 2.45 / 2.69 against
//   3.26 / 3.52. At 1024 rows the decode kernel lost at 512-1536 (up to 14 %) and 7168, tied at
//   2560-3072 and won at 3584-4096 (plain op, 5-7 %): 512 rows is the bound for all.
// - The fused op from 2560 elements, T = 1024 / 4096 / 16384 / 32768: H=2560 8.50 / 27.00 / 98.93
//   / 197.48 against 9.26 / 28.95 / 101.40 / 198.64, H=3072 9.33 / 31.22 / 118.38 / 235.60 against
//   10.47 / 33.47 / 120.55 / 237.61, H=3584 10.43 / 36.11 / 138.47 / 274.25 against 11.68 / 37.78
//   / 140.35 / 276.15 (packed UE8M0 alike). At 2048 it lost from T=16384 (84.84 against 81.20),
//   at 1536 at T=32768 (134.92 against 119.89).
// Session 25 (the same tune, T = 1024 / 4096 / 16384 / 32768): fused H=4096 11.49 / 40.66 /
// 153.7 / 312.4 against 12.90 / 42.58 / 159.1 / 314.8; H=5120 14.03 / 50.55 / 196.3 / 391.0
// against 16.77 / 53.26 / 198.9 / 393.1; H=7168 19.36 / 70.01 / 273.8 / 542.9 against 20.55 /
// 71.56 / 275.7 / 548.4. The plain op lost from T=4096 at 4096 and at 7168 (up to 19 %), 2048
// and 1536; it gained at 5120 (14-18 %, where the vector kernel runs 4 vectors on 160 lanes):
// T = 1024 / 4096 / 16384, H=5120 7.98 / 24.79 / 91.44 against 9.70 / 29.83 / 107.48, H=6656
// 10.19 / 32.45 / 121.67 against 11.17 / 34.32 / 126.82. In bench_fused_norm_quant.py --models
// (H100, T=4096) the fused op gained 2-6 % from 4608 to 8192 and lost 0.7 % at 12288 (24 warps
// a block): up to 8192 elements. fp32 input (16-byte loads in the decode kernel too) was not
// measured and keeps the vector kernel.
// The plain group quant (no norm) takes it at more rows still, at every length it takes at 256
// rows up to 8192 (4, 2 or 1 groups a warp: decode_groups_per_warp): from 1536 elements at any
// count, from 1024 up to 4096 rows, below that up to 1024. Session 26 (H100, tune_norm_quant.cu
// --op group "qd many", bf16, row-major scales, against the vector kernel, us at T = 1024 /
// 2048 / 4096 / 8192 / 32768): H=1536 1.60 / 4.02 / 7.00 / 14.00 / 51.67 against 2.45 / 5.24 /
// 8.17 / 14.55 / 51.77; H=2048 3.22 / 4.88 / 9.25 / 18.23 / 68.35 against 4.18 / 6.56 / 10.49 /
// 19.03 / 68.80; H=2304 (2 groups a warp) 3.24 / 5.61 / 10.16 / 19.63 / 75.23 against 4.47 / 6.67
// / 11.35 / 20.89 / 76.81; H=4096 4.84 / 9.20 / 18.11 / 34.75 / 134.11 against 6.57 / 10.48 /
// 19.03 / 35.59 / 134.71; H=7168 8.26 / 16.01 / 30.55 / 59.64 / 233.78 against 9.50 / 16.97 /
// 31.59 / 60.49 / 234.39 (2560, 3072, 5120 and 8192 alike; packed UE8M0 scales alike). H=1024
// 1.67 / 3.13 / 5.50 / 10.44 / 40.16 against 2.08 / 4.15 / 6.55 / 10.42 / 35.45 and H=1152 (1
// group a warp) 1.76 / 3.76 / 6.43 / 11.65 / 43.65 against 2.29 / 4.66 / 7.44 / 11.76 / 39.93:
// up to 4096 rows. H=768 1.68 / 2.94 / 5.39 against 1.96 / 2.46 / 5.24: up to 1024 (shorter rows,
// not measured, up to 512 as for the norm ops). Rows of more than 32 warps (4224: 33 warps of
// one group, which take the kernel in pieces at 256 rows) keep the vector kernel. Just past 256
// rows (T = 257 / 512): H=1024 1.31 / 1.15 against 1.65 / 1.78, H=4096 1.40 / 3.27 against 2.10 /
// 4.21, H=7168 1.78 / 4.39 against 2.94 / 6.10. The same A/B on an H200 (T = 512 / 1024 / 4096 /
// 32768): from 1536 elements 1.04-1.59x (H=4096 2.23 / 3.97 / 12.87 / 94.26 against 2.66 / 5.38
// / 14.37 / 97.64); H=1152 1.03x and H=1024 0.98x at 4096 rows (5.47 against 5.35), H=1024 0.65x
// and H=768 0.55x at 32768 (excluded).
constexpr int64_t kDecodeAnyLengthRows = 512;

// Session 28 (H200, tune_norm_quant.cu "v8r128b128" against "prod", bf16, us at T = 8192 /
// 16384 / 32768): the fused op at 7168 ran 1.5-3 % faster in the vector kernel (8 vectors a lane,
// 128-thread blocks) from 8192 rows, 101.83 / 199.44 / 395.42 against the decode kernel's
// 103.44 / 204.06 / 406.62 (packed UE8M0 T = 16384: 200.74 against 204.49); on the H100 the
// decode kernel was the faster one there (session 25: T=32768 542.9 against 548.4), so only on
// parts of at least kFastMemory.
constexpr int64_t kFusedVector7168Rows = 8192;

inline bool decode_takes_many_rows(int64_t rows, int64_t hidden, bool norm, bool fused, size_t elt_bytes,
                                   bool fast_memory) {
  if (elt_bytes != 2 || hidden > 8192) return false;
  if (!norm) {
    // One block a row (rows of more pieces were not measured at these counts).
    if (hidden / (decode_groups_per_warp(hidden, false) * kDecodeGroup) > 32) return false;
    return hidden >= 1536 || rows <= (hidden >= 1024 ? 4096 : hidden >= 768 ? 1024 : kDecodeAnyLengthRows);
  }
  if (hidden % (4 * kDecodeGroup) != 0) return false;
  if (fused && hidden == 7168 && rows >= kFusedVector7168Rows && fast_memory) return false;
  return rows <= kDecodeAnyLengthRows || (fused && hidden >= 2560);
}

// Groups a warp of the looping kernel (norm_quant_rows_kernel) for the norm ops' rows of
// 16-bit input where it runs (launch_norm_decode's conditions met, and the warp-rows kernel,
// kWarpRows, not taking them first), 0 elsewhere:
// - plain op, rows of a multiple of 512 elements: 2560-8192 from 513 rows (from 257 at
//   6144-8192), 1536-2048 from 513 up to 4096 rows (4 groups a warp); other lengths: 2304 (2
//   groups a warp) from 257 up to 1024 rows; 3840 and 5376 at 4 groups a warp, the last warp
//   holding the row's 2 remaining groups (kPartial), from 257 rows up to 1023 / 511, then at 8
//   (kPartial: 6 / 2 remaining groups) at any count;
// - fused op (H200; on parts of less peak bandwidth see kFastMemory): 2560 from 513 rows at 4
//   groups a warp; at 2 (its in-place residual makes a row twice the loads; 4 groups a warp
//   were slower there) 2048 from 513, 2304 and 3840 from 257, all up to 4096 rows; 5376 at 4
//   (kPartial) from 257 up to 4096.
// (The measurements below include the lengths the warp-rows kernel has taken since.)
// Session 27 (H200, tune_norm_quant.cu "qp k4 d1" / "qp k2 d1" / "qp k1 d1" against "prod", bf16,
// row-major scales, us at T = 512 / 768 / 1024 / 4096 / 16384; packed UE8M0 alike at 2560, 4096,
// 7168):
// - plain H=2560 2.40 / 3.60 / 4.67 / 12.09 / 41.22 against 2.21 / 4.15 / 5.31 / 15.31 / 52.40;
//   H=3072 2.62 / 5.02 / 5.17 / 13.57 / 46.95 against 2.54 / 5.44 / 5.64 / 16.17 / 55.58; H=4096
//   3.11 / 5.87 / 6.01 / 16.33 / 58.13 against 2.91 / 6.40 / 6.72 / 19.41 / 66.17; H=5120 5.42 /
//   5.92 / 7.61 / 20.85 / 75.58 against 5.19 / 6.47 / 8.17 / 26.26 / 96.89; H=6144 5.18 / 6.62 /
//   8.01 / 24.54 / 90.72 against 5.58 / 9.12 / 10.24 / 31.72 / 115.31; H=7168 5.79 / 7.43 / 8.98 /
//   28.10 / 103.76 against 6.32 / 8.91 / 10.56 / 33.44 / 121.83; H=8192 6.13 / 7.87 / 9.68 /
//   30.65 / 114.27 against 6.81 / 9.55 / 11.28 / 35.11 / 129.06 (3584 alike). H=1536 1.99 / 2.77
//   / 2.81 / 9.08 / 30.38 against 1.70 / 3.11 / 3.12 / 9.14 / 29.01; H=2048 2.21 / 3.12 / 3.18 /
//   10.35 / 35.37 against 2.02 / 3.39 / 3.52 / 10.70 / 34.14.
// - plain, other lengths (T = 512 / 1024 / 4096 / 16384): H=896 k1 1.74 / 2.58 / 8.24 / 28.65
//   against 2.59 / 2.71 / 6.04 / 17.63; H=1152 k1 1.97 / 3.05 / 9.93 against 2.26 / 2.76 / 8.15;
//   H=2304 k2 2.55 / 4.78 / 13.66 / 49.68 against 2.87 / 5.04 / 13.35 / 42.92. Slower: H=1280 k2
//   from 1024 rows (2.89 against 2.78), H=3840 k2 (3.98 against 3.60 at T=512).
// - fused H=2560 (k4), T = 512 / 1024 / 4096 / 16384: 3.02 / 7.05 / 20.96 / 75.25 against 2.88 /
//   7.19 / 21.83 / 81.13. k2: H=1536 2.33 / 3.53 / 13.90 / 48.85 against 2.07 / 3.89 / 14.05 /
//   45.89; H=2048 2.73 / 4.21 / 16.81 / 60.68 against 2.60 / 4.30 / 18.20 / 60.59; H=2304 3.00 /
//   6.16 / 18.82 / 67.73 against 3.47 / 6.15 / 18.83 / 68.10 (another run: 70.03 against 68.20 at
//   16384); H=1280 2.10 / 3.15 / 12.28 / 42.87 against 2.66 / 3.43 / 12.68 / 38.89; H=3840 4.21 /
//   9.12 / 30.15 / 111.84 against 4.37 / 10.21 / 30.91 / 109.80. k1: H=896 2.00 / 3.12 against
//   2.79 / 3.04, H=1152 2.27 / 3.74 against 2.62 / 3.36. At 3072, 4096 and 7168 it was 1-15 %
//   slower (H=4096 k2 31.85 against 30.25 at T=4096).
// - 4 groups a warp with the row ending inside the last warp (kPartial), T = 512 / 1024 / 4096
//   / 16384: plain H=5376 5.29 / 8.61 / 27.94 / 104.15 against 5.58 / 9.57 / 29.77 / 108.56
//   (packed UE8M0 T = 1024 / 4096: 8.92 / 29.12 against 10.01 / 31.39); plain H=3840 3.16 / 6.33
//   / 18.87 / 69.17 against 3.62 / 6.53 / 18.96 / 64.32; fused H=5376 7.74 / 12.70 / 41.96 /
//   157.92 against 7.93 / 14.60 / 41.98 / 152.04. At 2304 it tied the 2-group kernel (plain
//   T=4096 13.50 against 13.41), and at 896 / 1152 / 1280 it lost to 1 or 2 groups a warp (up to
//   25 %). Its first form loaded the missing chunks under a branch and was 20-40 % slower
//   (plain 2304 T=4096 17.17): the next row's loads were then not issued ahead. Plain H=1280 k2
//   at T=512: 1.92 against 2.29.
// - The plain group quant (no norm, so no barrier to hide): 5-20 % slower than the decode
//   kernel at 1536-7168 (H=4096 T=4096 13.92 against 12.87): not taken.
// fp32 input (16-byte loads) was not measured and keeps the other kernels.
// H100 (3.35 TB/s peak; the same tune, session 27): the fused op lost where the H200 gained at
// 2560 (T = 1024 / 4096 / 16384: 8.62 / 28.70 / 108.48 against the decode kernel's 8.47 / 27.04
// / 99.43) and at 5376 from 4096 rows (60.78 against 55.84; T=1024 16.49 against 17.51). So on
// parts under kFastMemory bytes per second the fused op's 2560 keeps the decode kernel and its
// 5376 takes the looping kernel up to 1024 rows. The H100's other rows of this kernel gained or
// tied: plain 2560 / 4096 / 7168 T=4096 14.35 / 19.85 / 33.38 against the vector kernel's best
// 16.32 / 20.55 / 35.61; fused 1536 / 2304 (2 groups a warp) T=1024 3.56 / 7.58 against 3.87 /
// 8.51; plain 2048 T=4096 12.18 against 12.00 (v8r128b128), within 1.5 %.
constexpr double kFastMemory = 4e12;

struct RowsKernelRange {
  int64_t hidden;
  int gpw;
  int64_t min_rows, max_rows;
  int64_t max_rows_slow = INT64_MAX;  // the bound on parts under kFastMemory (0: not there)
};
// (Since session 29 the warp-rows kernel, kWarpRows, takes the plain op's 896, 1152 and 1280
// and the fused op's 896, 1152, 1280 and 1536 from 257 rows, where these tables had the looping
// kernel.) The plain op's 3840 from 1024 rows and 5376 from 512 at 8 groups a warp, the last warp
// holding the row's 6 / 2 remaining groups (session 29, H200, "qp k8 d1" against "qp k4 d1" /
// what ran, us at T = 300 / 512 / 1024 / 2048 / 4096 / 16384): 3840 3.02 / 3.21 / 5.99 / 9.46 /
// 16.58 / 57.90 against 3.03 / 3.13 / 6.29 / 10.79 / 19.04 / 64.31; 5376 4.14 / 5.14 / 8.18 /
// 14.36 / 26.47 / 97.31 against 3.46 / 5.32 / 8.57 / 15.22 / 27.88 / 104.50 (packed UE8M0 alike:
// 3840 T=4096 17.47 against 19.75, 5376 28.25 against 29.13).
constexpr RowsKernelRange kRowsPlainOther[] = {{2304, 2, 257, 1024},           {3840, 4, 257, 1023},
                                               {3840, 8, 1024, INT64_MAX},     {5376, 4, 257, 511},
                                               {5376, 8, 512, INT64_MAX}};
constexpr RowsKernelRange kRowsFused[] = {{2048, 2, 513, 4096},         {2304, 2, 257, 4096},
                                          {2560, 4, 513, INT64_MAX, 0}, {3840, 2, 257, 4096},
                                          {5376, 4, 257, 4096, 1024}};

// The plain op at 8 groups a warp (session 28): the row's barrier joins half the warps, and a
// warp's per-row steps (group maxima, scales) cover twice the elements. H200, tune_norm_quant.cu
// "qp k8 d1" against "qp k4 d1" (what ran), bf16, row-major scales, us at T = 300 / 1024 / 4096 /
// 16384 / 32768:
//   3072: 2.58 / 5.04 / 13.26 / 45.12 / 87.89 against 2.53 / 5.33 / 13.85 / 47.07 / 91.87
//   4096: 2.85 / 5.95 / 15.85 / 54.15 / 105.45 against 3.04 / 6.21 / 16.52 / 59.13 / 115.62
//   5120: 3.27 / 6.97 / 19.24 / 67.52 / 131.85 against 3.00 / 7.74 / 21.03 / 76.06 / 150.24
//   6144: 3.17 / 8.39 / 22.88 / 83.33 / 164.64 against 3.34 / 8.18 / 24.58 / 90.20 / 177.83
//   8192: 5.20 / 9.43 / 29.57 / 108.12 / 213.93 against 5.32 / 9.88 / 30.97 / 115.16 / 227.73
// (packed UE8M0 4096, T = 1024 / 4096 / 32768: 5.98 / 16.09 / 108.36 against 6.25 / 16.85 /
// 117.76). At 7168 (7 warps of 8 groups, 3 blocks an SM) it tied (T=32768 205.86 against
// 207.41; packed 212.12 against 211.03): 4 groups a warp there. (Below 3072 a row is less than
// 3 such warps; 2560 is not a multiple of 1024.) The fused op at 8 groups a warp (123
// registers) was slower at 4096 and 8192 (T=32768 242.88 / 472.48 against the decode kernel's
// 233.33 / 451.52) and is not built. Diagnosis (the same tune, "qz k4 dN", plain 4096 / 7168,
// T=32768): without the row barrier (each warp's own sum, wrong output) 4 groups a warp ran
// 101.0 / 178.5 against 115.3 / 204.2, so the barrier cost 12 %; without the weight 109.9 /
// 195.7. Neither a split barrier (mbarrier arrive one row ahead, wait a row later: 143.1 /
// 244.8, at 72 registers) nor rows staged in shared memory by cp.async (2-4 buffers: 119.8-124.4
// at 4096) recovered it.
// At T = 768 / 2048 (the same tune, a second run): 3072 4.79 / 7.73 against 5.17 / 8.18, 4096
// 5.64 / 9.15 against 6.02 / 9.66, 5120 6.89 / 11.23 against 6.07 / 12.01, 6144 6.66 / 13.11
// against 6.76 / 13.69 (at 1024: 8.42 against 8.15). So 3072 and 4096 from 513 rows (the decode
// kernel's bound), 5120 from 1024, 6144 from 2048, 8192 from 257.
// H100 (the same tune, us at T = 512 / 1024 / 4096 / 32768, k8 against k4): 4096 6.53 / 19.51 /
// 146.77 at T = 1024 / 4096 / 32768 against 6.90 / 19.82 / 150.46, 8192 11.09 / 37.16 / 288.81
// against 11.30 / 37.47 / 293.43; but 3072 108.19 against 106.48 at T=32768 (5.58 against 5.76 at
// 1024, a tie at 4096), 5120 24.70 / 194.71 against 24.53 / 182.94 at T = 4096 / 32768 (7.87
// against 8.53 at 1024) and 6144 227.64 against 212.18 at T=32768 (28.90 against 29.44 at
// 4096). So on parts under kFastMemory 3072 and 6144 take it up to 4096 rows, 5120 up to 2048.
constexpr RowsKernelRange kRowsPlainK8[] = {
    {3072, 8, 513, INT64_MAX, 4096}, {4096, 8, 513, INT64_MAX},        {5120, 8, 1024, INT64_MAX, 2048},
    {6144, 8, 2048, INT64_MAX, 4096}, {8192, 8, 257, INT64_MAX}};

// fast_memory: the device's peak DRAM bandwidth is at least kFastMemory.
inline int rows_kernel_groups_per_warp(int64_t rows, int64_t hidden, bool fused, size_t elt_bytes, bool fast_memory) {
  if (elt_bytes != 2 || rows <= 256 || hidden > 8192) return 0;
  auto find = [&](const auto& table) {
    for (const RowsKernelRange& r : table) {
      const int64_t max_rows = fast_memory ? r.max_rows : std::min(r.max_rows, r.max_rows_slow);
      if (r.hidden == hidden && rows >= r.min_rows && rows <= max_rows) return r.gpw;
    }
    return 0;
  };
  if (!fused && hidden % (4 * kDecodeGroup) == 0) {
    if (const int gpw = find(kRowsPlainK8); gpw > 0) return gpw;
    const bool many = rows > kDecodeAnyLengthRows;
    return hidden >= 6144 || (hidden >= 2560 && many) || (hidden >= 1536 && many && rows <= 4096) ? 4 : 0;
  }
  return fused ? find(kRowsFused) : find(kRowsPlainOther);
}

// The decode kernel when it applies (see above; fp8 codes only, which the callers check;
// without a weight: kNorm = false); cudaErrorNotSupported otherwise. cs: blocks per row in a
// cluster for the norm ops, -1 for norm_decode_cluster_blocks' choice; split: blocks per row
// without a cluster for the plain norm op, -1 for norm_decode_split's (tune sweeps pass
// others; the fused op and the plain quant take no split; clusters and splits need 4 groups a
// warp).
template <typename T>
cudaError_t launch_norm_decode(const RowQuantParams<T>& p, cudaStream_t stream, int cs = -1, int split = -1) {
  constexpr int kVecBytes = 4 * sizeof(T);  // a lane's loads: 4 elements
  // fp32 scales at any strides (row- or column-major) or packed UE8M0 (not fp32 rounded to UE8M0).
  const bool f32 = !p.scales.packed_ue8m0 && !p.scales.round_ue8m0;
  const bool norm = p.weight != nullptr;
  const int gpw = !norm && f32 && sizeof(T) == 2 && p.rows <= 256 ? plain_quant_groups_per_warp(p.rows, p.hidden)
                                                                  : decode_groups_per_warp(p.hidden, norm);
  const int64_t per_warp = int64_t{kDecodeGroup} * gpw;
  auto aligned = [](const void* ptr, int64_t stride) { return rows_aligned(ptr, stride, sizeof(T), kVecBytes); };
  const bool fused = p.residual != nullptr;
  if (p.group_size != kDecodeGroup || needs_clamp<QuantCode::kFp8>(p.qmin, p.qmax) ||
      (!f32 && !p.scales.packed_ue8m0) || !aligned(p.input, p.input_stride) || (norm && !aligned(p.weight, 0)) ||
      (p.residual != nullptr && !aligned(p.residual, p.residual_stride)) ||
      reinterpret_cast<uintptr_t>(p.output_q) % 4 != 0) {
    return cudaErrorNotSupported;
  }
  bool fast_memory = false;  // (asked only where a rule depends on it)
  if (norm && p.rows > 256) {
    int device = 0;
    SGL_CUDA_TRY(cudaGetDevice(&device));
    fast_memory = device_memory_bandwidth(device) >= kFastMemory;
    if (const cudaError_t err = launch_norm_warp_rows<T>(p, stream, device, fast_memory); err != cudaErrorNotSupported) {
      return err;
    }
    const int rows_gpw = rows_kernel_groups_per_warp(p.rows, p.hidden, fused, sizeof(T), fast_memory);
    if (rows_gpw > 0) {
      const cudaError_t err = launch_norm_rows<T>(p, stream, rows_gpw, device);
      if (err != cudaErrorNotSupported) return err;
    }
  }
  if ((p.rows > 256 && !decode_takes_many_rows(p.rows, p.hidden, norm, fused, sizeof(T), fast_memory)) ||
      p.hidden % per_warp != 0) {
    return cudaErrorNotSupported;
  }
  constexpr DecodeScales kF32 = DecodeScales::kF32, kPacked = DecodeScales::kPackedUe8m0;
  if (norm && gpw == kDecodeGroupsPerLane) {
    if (cs < 0) cs = norm_decode_cluster_blocks(p.rows, p.hidden, fused);
    if (cs > 1 && p.hidden % (per_warp * cs) == 0 && p.hidden / cs / per_warp * 32 <= kDecodeMaxThreads) {
      const int threads = static_cast<int>(p.hidden / cs / per_warp * 32);
      const cudaError_t err = f32 ? (fused ? launch_norm_decode_cluster<T, true, kF32>(p, cs, threads, stream)
                                           : launch_norm_decode_cluster<T, false, kF32>(p, cs, threads, stream))
                                  : (fused ? launch_norm_decode_cluster<T, true, kPacked>(p, cs, threads, stream)
                                           : launch_norm_decode_cluster<T, false, kPacked>(p, cs, threads, stream));
      if (err != cudaErrorNotSupported) return err;
    }
  }
  const int64_t warps = p.hidden / per_warp;
  if (warps * 32 > kDecodeMaxThreads) {
    // The plain quant's rows of more than 32 warps: pieces of at most 32 warps, a block each.
    if (norm) return cudaErrorNotSupported;
    const int64_t pieces = (warps * 32 + kDecodeMaxThreads - 1) / kDecodeMaxThreads;
    const dim3 grid(static_cast<uint32_t>(pieces), static_cast<uint32_t>(p.rows));
    const dim3 block(static_cast<uint32_t>((warps + pieces - 1) / pieces * 32));
    return f32 ? launch_decode_gpw<T, false, false, kF32, true>(p, gpw, grid, block, stream)
               : launch_decode_gpw<T, false, false, kPacked, true>(p, gpw, grid, block, stream);
  }
  if (split < 0) split = norm_decode_split(p.rows, warps);
  if (!norm || fused || gpw != kDecodeGroupsPerLane || (split != 2 && split != 4) || warps % split != 0) split = 1;
  const dim3 grid(static_cast<uint32_t>(p.rows * split)), block(static_cast<uint32_t>(warps * 32));
  if (!norm) {
    return f32 ? launch_decode_gpw<T, false, false, kF32>(p, gpw, grid, block, stream)
               : launch_decode_gpw<T, false, false, kPacked>(p, gpw, grid, block, stream);
  }
  if (fused && gpw == kDecodeGroupsPerLane) {
    return f32 ? launch_norm_decode_warps<T, true, kF32>(p, grid, block, stream)
               : launch_norm_decode_warps<T, true, kPacked>(p, grid, block, stream);
  }
  if (fused) {
    return f32 ? launch_decode_gpw<T, true, true, kF32>(p, gpw, grid, block, stream)
               : launch_decode_gpw<T, true, true, kPacked>(p, gpw, grid, block, stream);
  }
  if (gpw != kDecodeGroupsPerLane) {
    return f32 ? launch_decode_gpw<T, false, true, kF32>(p, gpw, grid, block, stream)
               : launch_decode_gpw<T, false, true, kPacked>(p, gpw, grid, block, stream);
  }
  return f32 ? launch_norm_decode_split<T, kF32>(p, split, grid, block, stream)
             : launch_norm_decode_split<T, kPacked>(p, split, grid, block, stream);
}

template <typename T, QuantCode kCode, int kVpt, int kMaxRegs, bool kFused, bool kNorm = true>
cudaError_t launch_norm_vec(const RowQuantParams<T>& p, int tpr, int block_threads, int vpg_log2,
                            cudaStream_t stream) {
  const int groups = std::max(1, block_threads / tpr);
  const dim3 grid(static_cast<uint32_t>(ceil_div<int64_t>(p.rows, groups)));
  const dim3 block(static_cast<uint32_t>(tpr), static_cast<uint32_t>(groups));
  return launch_kernel(norm_quant_vec_kernel<T, kCode, kVpt, kMaxRegs, kFused, kNorm>, grid, block, 0, stream,
                       p.enable_pdl, p, vpg_log2);
}

template <typename T, QuantCode kCode, bool kFused, bool kNorm>
cudaError_t launch_norm_shape(const RowQuantParams<T>& p, const NormQuantShape& s, int tpr, int vpg_log2,
                              cudaStream_t stream) {
#define SGL_NQ_CASE(VPT, REGS)                                                                       \
  if (s.vpt == VPT && s.max_regs == REGS) {                                                         \
    return launch_norm_vec<T, kCode, VPT, REGS, kFused, kNorm>(p, tpr, s.block_threads, vpg_log2, stream); \
  }
  SGL_NQ_CASE(1, 64)
  SGL_NQ_CASE(2, 64)
  SGL_NQ_CASE(4, 64)
  SGL_NQ_CASE(5, 128)
  SGL_NQ_CASE(6, 128)
  SGL_NQ_CASE(8, 128)
  SGL_NQ_CASE(9, 128)
#undef SGL_NQ_CASE
  return cudaErrorNotSupported;
}

template <typename T, QuantCode kCode, bool kFused, bool kNorm, size_t kShapes>
cudaError_t launch_shapes(const RowQuantParams<T>& p, int hv, int vpg, const NormQuantShape (&shapes)[kShapes],
                          cudaStream_t stream) {
  int tpr = 0;
  const int i = pick_shape(shapes, p.rows, hv, vpg, &tpr);
  if (i < 0) return cudaErrorNotSupported;
  const int vpg_log2 = __builtin_ctz(static_cast<unsigned>(vpg));
  return launch_norm_shape<T, kCode, kFused, kNorm>(p, shapes[i], tpr, vpg_log2, stream);
}

template <typename T, QuantCode kCode>
cudaError_t launch_norm_code(const RowQuantParams<T>& p, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  const bool fused = p.residual != nullptr;
  if (p.group_size < 1 || p.hidden % p.group_size != 0) return cudaErrorInvalidValue;
  const bool vec_ok = p.hidden % kVec == 0 && p.hidden / kVec <= 8192 && p.group_size % kVec == 0 &&
                      p.group_size / kVec <= 32 && rows_aligned16(p.input, p.input_stride, sizeof(T)) &&
                      rows_aligned16(p.output_q, p.hidden, 1) && is_aligned16(p.weight) &&
                      (!fused || rows_aligned16(p.residual, p.residual_stride, sizeof(T)));
  if constexpr (kCode == QuantCode::kFp8) {
    const cudaError_t err = launch_norm_decode<T>(p, stream);
    if (err != cudaErrorNotSupported) return err;
  }
  if (vec_ok) {
    const int hv = static_cast<int>(p.hidden / kVec);
    const int vpg = p.group_size / kVec;
    const bool decode = p.rows <= 256;
    const cudaError_t err =
        fused ? (decode ? launch_shapes<T, kCode, true, true>(p, hv, vpg, kDecodeShapes, stream)
                        : launch_shapes<T, kCode, true, true>(p, hv, vpg, kManyRowShapes, stream))
              : (decode ? launch_shapes<T, kCode, false, true>(p, hv, vpg, kDecodeShapes, stream)
                        : launch_shapes<T, kCode, false, true>(p, hv, vpg, kManyRowPlainShapes, stream));
    if (err != cudaErrorNotSupported) return err;
  }
  const dim3 grid(static_cast<uint32_t>(p.rows)), block(static_cast<uint32_t>(scalar_row_threads(p.rows, p.hidden)));
  return fused ? launch_kernel(norm_quant_scalar_kernel<T, kCode, true>, grid, block, 0, stream, p.enable_pdl, p)
               : launch_kernel(norm_quant_scalar_kernel<T, kCode, false>, grid, block, 0, stream, p.enable_pdl, p);
}

}  // namespace

template <typename T>
cudaError_t launch_norm_quant(QuantCode code, const RowQuantParams<T>& p, cudaStream_t stream) {
  if (p.rows == 0 || p.hidden == 0) return cudaSuccess;
  if (p.rows >= (int64_t{1} << 31) || p.weight == nullptr) return cudaErrorInvalidValue;
  switch (code) {
    case QuantCode::kFp8:
      return launch_norm_code<T, QuantCode::kFp8>(p, stream);
    case QuantCode::kInt8Trunc:
      return launch_norm_code<T, QuantCode::kInt8Trunc>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template <typename T>
cudaError_t launch_row_group_quant(QuantCode code, const RowQuantParams<T>& p, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  if (p.weight != nullptr || p.residual != nullptr) return cudaErrorNotSupported;
  // Decode sizes (<= 256 rows): the decode kernel without the norm where it applies (plain
  // rows, g=128, fp8 without a clamp, fp32 scales in either layout or packed UE8M0), else the caller's
  // flat kernel.
  // NOTE (H200, bf16, bench_group_quant.py): gq_fp8_g128 H=4096 T=1/16/128 0.93/1.06/1.18 us
  // (flat kernel: 0.99 at T=1), gq_ue8m0_g128 H=7168 T=128 1.55 (flat 2.06); H=7168 T=1 1.25
  // against the flat kernel's 1.10 (one SM reads the whole row). Crossover on an H100
  // (tune_norm_quant.cu --op group, row-major scales, decode / flat us): H=4096 and 7168
  // tie (+-0.05) up to T=2 and the decode kernel wins from T=4 (T=64: 1.21/1.38,
  // 1.35/1.58); H=16384 (a 1024-thread block per row) loses up to T=32 (T=1 1.59/1.23,
  // T=32 1.66/1.60) and wins from T=64 (1.77/2.15). So rows of more than 8192 elements go
  // to the flat kernel below 64 rows (since session 38 / 39 16-bit multiples of 512 up to
  // 65536 elements take the tile kernel there).
  // Rows of more than 32 warps (above 16384 elements at 4 groups a warp, above 4096 at 1: 4224)
  // take the kernel in pieces of at most 32 warps
  // (launch_norm_decode); before, the flat kernel: H100,
  // bench_group_quant.py --models, gq_fp8_g128 T=128 H=18944 3.70 us (H=12288, one block a
  // row: 1.61).
  // More than 256 rows: the decode kernel where decode_takes_many_rows says so, else the
  // vector kernel below.
  const bool tile_ok = p.masked_m == nullptr && code == QuantCode::kFp8;
  const bool decode_ok = tile_ok && !(p.hidden > 8192 && p.rows < 64);
  if (p.rows <= 256 && tile_ok) {
    // The tile kernel first where it applies (kGroupTileRows; rows of more than 8192 elements
    // below 64 rows included).
    if (const cudaError_t err = launch_group_tile<T>(p, stream); err != cudaErrorNotSupported) return err;
  }
  if (p.rows <= 256) return decode_ok ? launch_norm_decode<T>(p, stream) : cudaErrorNotSupported;
  if (decode_ok) {
    const cudaError_t err = launch_norm_decode<T>(p, stream);
    if (err != cudaErrorNotSupported) return err;
  }
  if (p.group_size < kVec || p.group_size % kVec != 0 || p.group_size / kVec > 32 || p.hidden % p.group_size != 0 ||
      p.hidden / kVec > 8192 || !rows_aligned16(p.input, p.input_stride, sizeof(T)) ||
      !rows_aligned16(p.output_q, p.hidden, 1)) {
    return cudaErrorNotSupported;
  }
  const int hv = static_cast<int>(p.hidden / kVec);
  const int vpg = p.group_size / kVec;
  switch (code) {
    case QuantCode::kFp8:
      return launch_shapes<T, QuantCode::kFp8, false, false>(p, hv, vpg, kGroupShapes, stream);
    case QuantCode::kInt8Trunc:
      return launch_shapes<T, QuantCode::kInt8Trunc, false, false>(p, hv, vpg, kGroupShapes, stream);
    default:
      return cudaErrorNotSupported;
  }
}

template cudaError_t launch_row_group_quant<float>(QuantCode, const RowQuantParams<float>&, cudaStream_t);
template cudaError_t launch_row_group_quant<half>(QuantCode, const RowQuantParams<half>&, cudaStream_t);
template cudaError_t launch_row_group_quant<__nv_bfloat16>(QuantCode, const RowQuantParams<__nv_bfloat16>&,
                                                           cudaStream_t);
template cudaError_t launch_norm_quant<float>(QuantCode, const RowQuantParams<float>&, cudaStream_t);
template cudaError_t launch_norm_quant<half>(QuantCode, const RowQuantParams<half>&, cudaStream_t);
template cudaError_t launch_norm_quant<__nv_bfloat16>(QuantCode, const RowQuantParams<__nv_bfloat16>&,
                                                      cudaStream_t);

}  // namespace sgl_kernel::quantization
