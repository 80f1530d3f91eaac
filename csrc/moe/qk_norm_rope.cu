// SPDX-License-Identifier: Apache-2.0
// fused_qk_norm_rope (API.md 2.4; contract in moe.h): per-head RMSNorm, then RoPE (YaRN-aware),
// of the q and k heads of a packed bf16 qkv row, in place; the v heads are never touched.
//
// Layout: one warp per (token, chunk of kSteps consecutive q/k heads of that token); a head of
// D = head_dim elements is spread over the 32 lanes, lane l owning the kE = D / 32 contiguous
// elements [kE l, kE l + kE) as one 4-, 8- or 16-byte load (D = 64, 128, 256). kSteps = 1 for
// small calls (decode: a head a warp, as many warps as possible in flight), 4 or 8 for larger
// ones (the lane's cos/sin, the most expensive part of a head, computed once per kSteps heads;
// the NOTE at kBatch). R = rotary_dim is a multiple of 2 kE, so a lane's elements are all
// rotated or all passed through.
//
// Arithmetic (fp32, one rounding to bf16 at the end):
//   1. s = the lane's sum of x_e^2 in element order (fmaf), then summed over the warp by an xor
//      tree (offsets 16, 8, 4, 2, 1; a warp's heads reduced side by side);
//      r = rsqrtf(s * (1 / D) + eps) (1 / D is exact); y = (x * r) * w.
//   2. RoPE. Frequencies: f_i = base^(-2i / R) in fp64 (std::pow), and with factor != 1 (YaRN)
//      f_i = (f_i / factor) * ramp + f_i * (1 - ramp), ramp = clamp((i - low) / (high' - low),
//      0, 1), high' = high + 0.001 when |high - low| <= 1e-6, all in fp64 from the fp32
//      parameters, then rounded once to fp32. The launcher computes this table on the host (R / 2
//      values, cached for repeated parameters) and passes it as a __grid_constant__ kernel
//      argument: the angle a = fp32(float(pos) * f_i) is then reproducible bit for bit by a
//      reference (tests/moe/ref_qk_norm_rope.py), which matters because at positions ~1e5 one ulp
//      of f_i moves the angle by ~0.005 rad. cos/sin: sincosf (the accurate one, with its slow
//      path for |a| > 105615; __sinf's error grows with |a|; an fp64 quadrant reduction and the
//      MUFU measured slower on NeoX prefill, session 45). attention_factor is folded into them:
//      c = cos(a) * af, s = sin(a) * af (an fp32 rounding away from multiplying the rotated pair
//      by af; exact when af = 1).
//      Interleaved: pair (y_2m, y_2m+1) of the lane with frequency kE l / 2 + m:
//        (y0 c - y1 s, y0 s + y1 c).
//      NeoX: element j < R/2 pairs with j + R/2, which lies kE-aligned in lane l + R / (2 kE); the
//      partner's normalised value comes by __shfl_sync from an explicit source lane (R / (2 kE)
//      need not be a power of two), and each lane writes only its own elements:
//        first half y c - y_partner s, second half y c + y_partner s (frequency j mod R/2).
//   Elements past R keep y.
//
// Memory: each q/k element read and written once; the weights (2 D bf16) and the positions are
// L1/L2-resident. In place, so every load is a plain ld.global (no .nc), issued before any
// store. The vector path needs qkv's base and row pitch and both weights aligned to the lane's
// 2 kE bytes; otherwise (an offset view) the same kernel runs with element loads (kVec false).
// PDL: the small instance prefetches its head row, waits, and triggers once its loads are issued
// (PdlTrigger::kAfterLoads, as RoPE's in-place path, arch.cuh); the batched one waits plainly and
// triggers at its end (moe_sum.cu's large shape).
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <cuda_bf16.h>

#include "moe/moe.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/vec.cuh"
#include "sgl_kernel/words.cuh"

namespace sgl_kernel::moe {

namespace {
namespace qk_norm_rope_impl {

constexpr int kWarpSize = 32;
constexpr unsigned kFullMask = 0xffffffffu;
// 4 warps a block, as rope.cu (its kBlock NOTE: fewer warps a block spread decode calls over
// more SMs, and no shape was faster with 8); not tuned here.
constexpr int kThreads = 128;
constexpr int kWarpsPerBlock = kThreads / kWarpSize;
// Heads a warp handles (kSteps): one up to kOneHeadMaxPairs (token, head) pairs, 4 up to
// kBatchMinHeads, kBatch above. A lane computes its kE (NeoX) or kE / 2 sincosf once for its
// kSteps heads, which have their loads in flight together. NOTE (H200, session 45, us in a
// CUDA graph, NeoX D = 128, 32 q + 8 k heads at T = 1 / 16 / 128 / 8192 / 32768, forced with
// SGL_KERNEL_QK_NORM_ROPE_HEADS): 1 head a warp 1.06 / 1.17 / 2.82 / 100.4 / 397.6; 2: 1.59 /
// 1.71 / 2.61 / 64.0 / 250.2; 4: 1.74 / 1.82 / 2.31 / 48.9 / 187.1; 8: 2.13 / 2.19 / 2.55 /
// 46.7 / 177.8 (64 q + 4 k heads ranked alike: T = 128 best at 4, 2.90 us; T = 8192 at 8).
constexpr int kBatch = 8;
constexpr int64_t kBatchMinHeads = 16384;
constexpr int64_t kOneHeadMaxPairs = 2048;

// f_i of pairs i < R / 2, fp32 (see the file comment); kPairs = D / 2 entries, R / 2 used.
template <int kPairs>
struct alignas(16) FreqTable {
  float f[kPairs];
};

// A lane's kE contiguous bf16 elements as kE / 2 32-bit words (element 2w in the low half).
template <int kE>
using Chunk = Vec<uint32_t, kE / 2>;

// The lane's kE elements at p: one vector load (kVec: p aligned to its size) or kE element loads.
template <int kE, bool kVec>
__device__ __forceinline__ Chunk<kE> load_chunk(const __nv_bfloat16* p) {
  if constexpr (kVec) {
    return load_vec<Chunk<kE>>(p);
  } else {
    const uint16_t* e = reinterpret_cast<const uint16_t*>(p);
    Chunk<kE> c;
#pragma unroll
    for (int w = 0; w < kE / 2; ++w) c[w] = uint32_t{e[2 * w]} | (uint32_t{e[2 * w + 1]} << 16);
    return c;
  }
}

template <int kE, bool kVec>
__device__ __forceinline__ void store_chunk(__nv_bfloat16* p, const Chunk<kE>& c) {
  if constexpr (kVec) {
    store_vec(p, c);
  } else {
    uint16_t* e = reinterpret_cast<uint16_t*>(p);
#pragma unroll
    for (int w = 0; w < kE / 2; ++w) {
      e[2 * w] = static_cast<uint16_t>(c[w] & 0xffffu);
      e[2 * w + 1] = static_cast<uint16_t>(c[w] >> 16);
    }
  }
}

template <int kE>
__device__ __forceinline__ void unpack_chunk(const Chunk<kE>& c, float (&f)[kE]) {
#pragma unroll
  for (int w = 0; w < kE / 2; ++w) Words<__nv_bfloat16>::unpack(c[w], f + 2 * w);
}

// Warp (token, chunk) of chunks.divisor chunks a token writes the q/k heads kSteps * chunk ..
// + kSteps - 1 (those < hq + hk) of its token. Heads < hq use q_weight, the others k_weight.
template <int kHeadDim, bool kNeox, int kSteps, bool kVec>
__global__ void __launch_bounds__(kThreads)
    qk_norm_rope_kernel(const QkNormRopeParams p,  // qkv: [num_tokens, pitch qkv_stride] bf16
                        const __grid_constant__ FreqTable<kHeadDim / 2> freq,
                        const FastDivmod chunks,      // chunks of heads per token
                        const uint32_t total_warps) {  // num_tokens * chunks.divisor
  constexpr int kE = kHeadDim / kWarpSize;  // elements a lane: 2, 4 or 8
  constexpr int kCs = kNeox ? kE : kE / 2;  // cos/sin values a lane
  // The frequency table into shared memory, once per block: the lanes of a warp read different
  // entries, and the constant bank that holds a kernel argument serves different addresses one
  // at a time. NOTE (H200, session 45): read from the argument, one head a warp at T = 128 with
  // 40 heads took 5.5 us (kD / 2 lane-varying loads a warp); a parameter, so before the wait.
  constexpr int kVec4 = kHeadDim / 8;  // float4s in the table (kHeadDim / 2 floats)
  __shared__ float4 table[kVec4];
  if (threadIdx.x < kVec4) table[threadIdx.x] = reinterpret_cast<const float4*>(freq.f)[threadIdx.x];
  __syncthreads();
  const float* f_table = reinterpret_cast<const float*>(table);
  const uint32_t warp = blockIdx.x * kWarpsPerBlock + threadIdx.x / kWarpSize;
  if (warp >= total_warps) return;  // whole warps only
  const int lane = static_cast<int>(threadIdx.x % kWarpSize);
  uint32_t token, chunk;
  chunks.divmod(warp, token, chunk);
  const int heads = p.num_heads_q + p.num_heads_k;
  const int head0 = static_cast<int>(chunk) * kSteps;
  const int col = lane * kE;
  // [num_tokens, qkv_stride]: this lane's elements of head head0 of the token
  __nv_bfloat16* row = static_cast<__nv_bfloat16*>(p.qkv) + static_cast<int64_t>(token) * p.qkv_stride +
                       static_cast<int64_t>(head0) * kHeadDim + col;
  const __nv_bfloat16* wq = static_cast<const __nv_bfloat16*>(p.q_weight) + col;  // [head_dim]
  const __nv_bfloat16* wk = static_cast<const __nv_bfloat16*>(p.k_weight) + col;  // [head_dim]

  if constexpr (kSteps == 1) {
    pdl_wait_prefetched(row);  // before any input is read; row is this lane's head slice
  } else {
    SGL_PDL_WAIT();  // before any input is read
  }
  const int32_t pos = p.position_ids[token];
  // One head: its weight only. Several: both, chosen per head word by word (choosing the whole
  // Vec with ?: put both copies in local memory).
  const Chunk<kE> wq_raw = load_chunk<kE, kVec>(kSteps == 1 && head0 >= p.num_heads_q ? wk : wq);
  Chunk<kE> wk_raw;
  if constexpr (kSteps > 1) wk_raw = load_chunk<kE, kVec>(wk);
  Chunk<kE> raw[kSteps] = {};  // a head past hq + hk stays 0 (summed, never stored)
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    if (kSteps == 1 || head0 + s < heads) raw[s] = load_chunk<kE, kVec>(row + s * kHeadDim);
  }
  if constexpr (kSteps == 1) SGL_PDL_LAUNCH_DEPENDENTS();  // PdlTrigger::kAfterLoads

  // RoPE setup of this lane: cos/sin (attention_factor folded in) and the NeoX partner lane.
  const int rot_dim = p.rotary_dim;
  const bool rotated = col < rot_dim;
  const int half = rot_dim / 2;
  const bool first_half = col < half;
  const int lane_off = half / kE;  // lanes between the two elements of a NeoX pair
  const int src_lane = !kNeox || !rotated ? lane : (first_half ? lane + lane_off : lane - lane_off);
  float cs[kCs], sn[kCs];
  if (rotated) {
    // NeoX: frequency j mod R/2 of element j; interleaved: pair index j / 2.
    const int i0 = kNeox ? (first_half ? col : col - half) : col / 2;
    const float fpos = static_cast<float>(pos);
    const float af = p.attention_factor;
#pragma unroll
    for (int e = 0; e < kCs; ++e) {
      const float angle = fpos * f_table[i0 + e];
      float sv, cv;
      sincosf(angle, &sv, &cv);
      cs[e] = cv * af;
      sn[e] = (kNeox && first_half ? -sv : sv) * af;
    }
  }

  // The heads' sums of squares first, reduced over the warp together (kSteps shuffles in flight
  // a step instead of one head's chain of 5 after another's).
  const float inv_dim = 1.0f / static_cast<float>(kHeadDim);
  float ss[kSteps];
#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    float x[kE];
    unpack_chunk<kE>(raw[s], x);
    ss[s] = 0.0f;
#pragma unroll
    for (int e = 0; e < kE; ++e) ss[s] = fmaf(x[e], x[e], ss[s]);
  }
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset >>= 1) {
#pragma unroll
    for (int s = 0; s < kSteps; ++s) ss[s] += __shfl_xor_sync(kFullMask, ss[s], offset);
  }

#pragma unroll
  for (int s = 0; s < kSteps; ++s) {
    if (kSteps > 1 && head0 + s >= heads) break;  // warp-uniform
    float x[kE], w[kE];
    unpack_chunk<kE>(raw[s], x);
    Chunk<kE> w_raw = wq_raw;
    if constexpr (kSteps > 1) {
      const bool is_q = head0 + s < p.num_heads_q;
#pragma unroll
      for (int wd = 0; wd < kE / 2; ++wd) w_raw[wd] = is_q ? wq_raw[wd] : wk_raw[wd];
    }
    unpack_chunk<kE>(w_raw, w);
    const float r = rsqrtf(ss[s] * inv_dim + p.eps);
    float y[kE];
#pragma unroll
    for (int e = 0; e < kE; ++e) y[e] = x[e] * r * w[e];
    if constexpr (kNeox) {
      float yp[kE];
#pragma unroll
      for (int e = 0; e < kE; ++e) yp[e] = __shfl_sync(kFullMask, y[e], src_lane);
      if (rotated) {
#pragma unroll
        for (int e = 0; e < kE; ++e) y[e] = y[e] * cs[e] + yp[e] * sn[e];
      }
    } else if (rotated) {
#pragma unroll
      for (int m = 0; m < kE / 2; ++m) {
        const float a = y[2 * m], b = y[2 * m + 1];
        y[2 * m] = a * cs[m] - b * sn[m];
        y[2 * m + 1] = a * sn[m] + b * cs[m];
      }
    }
    Chunk<kE> out;
#pragma unroll
    for (int wd = 0; wd < kE / 2; ++wd) out[wd] = Words<__nv_bfloat16>::pack(y + 2 * wd);
    store_chunk<kE, kVec>(row + s * kHeadDim, out);
  }
  if constexpr (kSteps > 1) SGL_PDL_LAUNCH_DEPENDENTS();  // at the end (the large shape)
}

// The frequency table of p (file comment), recomputed only when the parameters change: an
// engine calls the op with the same ones in every layer, and R / 2 std::pow cost ~1-3 us of host
// time per call.
template <int kPairs>
const FreqTable<kPairs>& freq_table(const QkNormRopeParams& p) {
  struct Cache {
    float key[4];
    int rotary_dim = -1;
    FreqTable<kPairs> table;
  };
  thread_local Cache cache;
  const float key[4] = {p.base, p.factor, p.low, p.high};
  if (cache.rotary_dim == p.rotary_dim && std::memcmp(cache.key, key, sizeof(key)) == 0) return cache.table;
  const double base = p.base, factor = p.factor, low = p.low;
  double high = p.high;
  if (std::fabs(high - low) <= 1e-6) high += 0.001;
  for (int i = 0; i < kPairs; ++i) {
    double f = 0.0;
    if (2 * i < p.rotary_dim) {
      f = std::pow(base, -2.0 * i / p.rotary_dim);
      if (p.factor != 1.0f) {
        const double ramp = std::fmin(std::fmax((i - low) / (high - low), 0.0), 1.0);
        f = f / factor * ramp + f * (1.0 - ramp);
      }
    }
    cache.table.f[i] = static_cast<float>(f);
  }
  std::memcpy(cache.key, key, sizeof(key));
  cache.rotary_dim = p.rotary_dim;
  return cache.table;
}

template <int kHeadDim, bool kNeox, int kSteps, bool kVec>
cudaError_t launch_instance(const QkNormRopeParams& p, int64_t chunks, cudaStream_t stream) {
  const int64_t warps = p.num_tokens * chunks;
  if (warps > int64_t{0xffffffff}) return cudaErrorInvalidValue;  // more q/k heads than any qkv holds
  const FreqTable<kHeadDim / 2>& freq = freq_table<kHeadDim / 2>(p);
  const uint32_t blocks = static_cast<uint32_t>(ceil_div<int64_t>(warps, kWarpsPerBlock));
  SGL_CUDA_TRY(launch_kernel(qk_norm_rope_kernel<kHeadDim, kNeox, kSteps, kVec>, dim3(blocks), dim3(kThreads), 0,
                             stream, p.enable_pdl, p, freq, FastDivmod(static_cast<uint32_t>(chunks)),
                             static_cast<uint32_t>(warps)));
  return cudaGetLastError();
}

// SGL_KERNEL_QK_NORM_ROPE_HEADS=1|2|4|8 forces the q/k heads a warp handles on the vector path
// (tests: every instance; tuning); anything else, or unset, leaves the choice to the size.
int env_heads_per_warp() {
  const char* e = std::getenv("SGL_KERNEL_QK_NORM_ROPE_HEADS");
  if (e == nullptr || *e == '\0') return 0;
  const int v = std::atoi(e);
  return (v == 1 || v == 2 || v == 4 || v == 8) ? v : 0;
}

template <int kHeadDim, bool kNeox>
cudaError_t launch_dim(const QkNormRopeParams& p, cudaStream_t stream) {
  constexpr int kBytes = kHeadDim / kWarpSize * 2;  // a lane's slice of a head
  const int64_t heads = int64_t{p.num_heads_q} + p.num_heads_k;
  const bool vec = rows_aligned(p.qkv, p.num_tokens > 1 ? p.qkv_stride : 0, 2, kBytes) &&
                   rows_aligned(p.q_weight, 0, 2, kBytes) && rows_aligned(p.k_weight, 0, 2, kBytes);
  if (!vec) return launch_instance<kHeadDim, kNeox, 1, false>(p, heads, stream);  // offset views
  int steps = env_heads_per_warp();
  if (steps == 0) {
    const int64_t pairs = p.num_tokens * heads;
    steps = pairs <= kOneHeadMaxPairs ? 1 : pairs < kBatchMinHeads ? 4 : kBatch;
  }
  switch (steps) {
    case 1: return launch_instance<kHeadDim, kNeox, 1, true>(p, heads, stream);
    case 2: return launch_instance<kHeadDim, kNeox, 2, true>(p, ceil_div<int64_t>(heads, 2), stream);
    case 4: return launch_instance<kHeadDim, kNeox, 4, true>(p, ceil_div<int64_t>(heads, 4), stream);
    default: return launch_instance<kHeadDim, kNeox, 8, true>(p, ceil_div<int64_t>(heads, 8), stream);
  }
}

template <int kHeadDim>
cudaError_t launch_neox(const QkNormRopeParams& p, cudaStream_t stream) {
  return p.is_neox ? launch_dim<kHeadDim, true>(p, stream) : launch_dim<kHeadDim, false>(p, stream);
}

}  // namespace qk_norm_rope_impl
}  // namespace

cudaError_t launch_qk_norm_rope(const QkNormRopeParams& p, cudaStream_t stream) {
  using namespace qk_norm_rope_impl;
  if (p.num_tokens < 0 || p.num_heads_q < 0 || p.num_heads_k < 0 || p.num_heads_v < 0) return cudaErrorInvalidValue;
  if (p.head_dim != 64 && p.head_dim != 128 && p.head_dim != 256) return cudaErrorInvalidValue;
  const int step = 2 * p.head_dim / kWarpSize;
  if (p.rotary_dim <= 0 || p.rotary_dim > p.head_dim || p.rotary_dim % step != 0) return cudaErrorInvalidValue;
  const int64_t width = (int64_t{p.num_heads_q} + p.num_heads_k + p.num_heads_v) * p.head_dim;
  if (p.num_tokens > 1 && p.qkv_stride < width) return cudaErrorInvalidValue;
  if (p.num_tokens == 0 || p.num_heads_q + p.num_heads_k == 0) return cudaSuccess;
  if (p.qkv == nullptr || p.q_weight == nullptr || p.k_weight == nullptr || p.position_ids == nullptr) {
    return cudaErrorInvalidValue;
  }
  switch (p.head_dim) {
    case 64: return launch_neox<64>(p, stream);
    case 128: return launch_neox<128>(p, stream);
    default: return launch_neox<256>(p, stream);
  }
}

}  // namespace sgl_kernel::moe
