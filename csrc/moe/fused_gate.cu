// SPDX-License-Identifier: Apache-2.0
// moe_fused_gate / kimi_k2_moe_fused_gate (API.md 2.4): DeepSeek-V3's grouped sigmoid routing and
// Kimi-K2's single-group variant, one warp per token.
//
// Per token t (moe.h has the contract): s = sigmoid(input[t]) in fp32, b = s + bias (bias
// converted exactly to fp32). Groups (num_groups > 1 and topk_group < num_groups; otherwise
// every expert stays in the running): group score = the sum of the two largest b of its G =
// num_experts / num_groups experts, or that expert's b when G == 1; the topk_group best groups
// are kept (ties -> lower group). Then kr = topk - num_shared rounds each pick the kept expert
// of largest b (ties -> lower expert index), so ids[t, 0..kr) come in descending b order;
// weights are s, S = their sum, shared experts j < num_shared get id num_experts + j and
// weight S / routed_scaling_factor, renormalize divides every weight by S, scale_output
// multiplies every weight by routed_scaling_factor. The factor is used as given (a 0 factor
// gives inf / NaN weights as IEEE arithmetic says; S == 0 with renormalize gives NaN).
//
// Numbers: s = 1 / (1 + 2^(-x log2 e)) with the hardware exp2 (flushing results below 2^-126
// to 0) and reciprocal: a few ulp of fp32, and 0 for s below ~1e-38 (x < ~-87). Selection
// compares the fp32 b exactly (an order-preserving 32-bit key, no rounding), so equal inputs
// tie exactly and the lower index wins; a group score is one fp32 add of its two largest b.
//
// NaN / inf: a NaN b ranks below every number, -inf included, so a NaN expert is chosen only
// when fewer than kr numbers remain in the kept groups; the ids are always kr distinct experts
// of the kept groups (the binding guarantees kr <= topk_group * G). In group scores a NaN b
// counts as -inf; a score that is NaN (+inf + -inf) ranks below every number. With NaN input
// the weights may be NaN (S is NaN once one chosen s is); the ids stay valid and distinct.
// Inputs +inf / -inf give s = 1 / s = 0 exactly.
//
// Layout: lane l of the token's warp holds experts [l V, l V + V) (V = kV, 32 V >= num_experts),
// loaded in 8- or 16-byte pieces when the row pitch and both pointers allow it (else element
// loads with bounds); the lane keeps their b as keys in registers and writes their s to the
// warp's shared-memory row. Experts past num_experts are NaN inputs: their key ties only with
// NaN experts, and the lower index (a real expert) wins those ties. Expert index order is
// (lane, slot) order, so a selection round is: a redux.sync max of the lanes' best keys, a
// ballot of the lanes holding it, and the lowest such lane (the owner) takes its best. Each
// lane caches the best two of its remaining experts (a tree of contiguous runs: ties keep the
// lower slot); the owner moves its second up, or rescans its experts (chosen ones masked) when
// its second was already used, so most rounds cost a redux, a ballot and a few selects.
// Groups (power-of-two G; chunks of 8 experts): G >= 8 (kChunk): a top-2 per chunk, merged over
// the group's chunks inside the lane, then over the group's lanes by a shuffle butterfly when
// a group spans lanes; G <= 4 (kElement): a butterfly inside the chunk. Group selection runs
// topk_group rounds of an argmax over the lane's group keys, the redux and the ballot; the
// lanes of the winning group see its first lane as the owner. kNone (one group, or every group
// kept) skips all of it. Launch: 4 warps (tokens) a block, grid-stride past 2^31 - 1 blocks;
// the kernel waits for the previous kernel (PDL) before its loads and lets the next one launch
// once they are issued.
#include <cstdint>

#include "moe/moe.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/order_key.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"
#include "sgl_kernel/words.cuh"

namespace sgl_kernel::moe {

namespace {
namespace fused_gate {

constexpr int kWarps = 4;  // tokens per block (a warp each)
constexpr int kThreads = kWarps * 32;
constexpr int64_t kMaxBlocks = (int64_t{1} << 31) - 1;  // grid.x; more tokens loop (grid-stride)
constexpr unsigned kFull = 0xffffffffu;
// Keys: larger b <-> larger key. kOut marks an expert or group out of the running (chosen or
// in a dropped group); a NaN's key is kNanKey; every number's key is >= 0x007fffff.
constexpr uint32_t kOut = 0;
constexpr uint32_t kNanKey = 1;

enum class Groups { kNone, kChunk, kElement };

// Order-preserving key of a float (sgl_kernel/order_key.cuh): -inf < ... < +inf map to
// increasing unsigned keys; NaN maps to kNanKey.
__device__ __forceinline__ uint32_t order_key(float f) { return float_order_key<kNanKey>(f); }

// 1 / (1 + 2^(-x log2 e)): ex2.approx.ftz (one MUFU; results below 2^-126 flush to 0, which
// changes 1 + e by nothing) and the approximate reciprocal (0 for e >= 2^126).
__device__ __forceinline__ float sigmoid(float x) {
  float e;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.4426950408889634f));
  return __fdividef(1.0f, 1.0f + e);
}

// (a1 >= a2) <- the two largest of {a1, a2, b1, b2} given b1 >= b2 (no NaN).
__device__ __forceinline__ void merge_top2(float& a1, float& a2, float b1, float b2) {
  const float lo = fminf(a1, b1);
  a1 = fmaxf(a1, b1);
  a2 = fmaxf(lo, fmaxf(a2, b2));
}

// The largest key of k[0..kN) and its payload; a tie keeps the lower position (the tree joins
// contiguous ranges, the left one wins ties).
template <int kN>
__device__ __forceinline__ void argmax_tree(const uint32_t (&k)[kN], const uint32_t (&v)[kN], uint32_t& best,
                                            uint32_t& payload) {
  uint32_t bk[kN], bv[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    bk[j] = k[j];
    bv[j] = v[j];
  }
#pragma unroll
  for (int stride = 1; stride < kN; stride *= 2) {
#pragma unroll
    for (int j = 0; j + stride < kN; j += 2 * stride) {
      const bool right = bk[j + stride] > bk[j];
      bk[j] = right ? bk[j + stride] : bk[j];
      bv[j] = right ? bv[j + stride] : bv[j];
    }
  }
  best = bk[0];
  payload = bv[0];
}

// The two largest keys of a run of positions and their positions, in (key descending,
// position ascending) order; k2 = kOut when the run has one position.
struct Top2 {
  uint32_t k1, s1, k2, s2;
};

// Top2 of the runs a (lower positions) and b (the positions right after a's).
__device__ __forceinline__ Top2 merge_top2_keys(const Top2& a, const Top2& b) {
  const bool right = b.k1 > a.k1;  // a's first wins ties
  // the second: the better of the loser's first and the winner's second, a's on ties
  const uint32_t xk = right ? a.k1 : a.k2, xs = right ? a.s1 : a.s2;
  const uint32_t yk = right ? b.k2 : b.k1, ys = right ? b.s2 : b.s1;
  const bool y = yk > xk;
  return {right ? b.k1 : a.k1, right ? b.s1 : a.s1, y ? yk : xk, y ? ys : xs};
}

// Top2 of k[0..kN): a tree of contiguous runs.
template <int kN>
__device__ __forceinline__ Top2 top2_tree(const uint32_t (&k)[kN]) {
  Top2 t[kN];
#pragma unroll
  for (int j = 0; j < kN; ++j) t[j] = {k[j], static_cast<uint32_t>(j), kOut, static_cast<uint32_t>(j)};
#pragma unroll
  for (int stride = 1; stride < kN; stride *= 2) {
#pragma unroll
    for (int j = 0; j + stride < kN; j += 2 * stride) t[j] = merge_top2_keys(t[j], t[j + stride]);
  }
  return t[0];
}

// Bytes of each vector load of a lane's kV elements: the largest of 16 / 8 / 4 dividing them.
template <typename T, int kV>
inline constexpr int kPiece = (kV * sizeof(T)) % 16 == 0 ? 16 : (kV * sizeof(T)) % 8 == 0 ? 8 : 4;

// The kV elements at p (aligned to kPiece<T, kV> bytes) as fp32.
template <typename T, int kV>
__device__ __forceinline__ void load_run(const T* p, float (&f)[kV]) {
  constexpr int kBytes = kV * static_cast<int>(sizeof(T));
  constexpr int kP = kPiece<T, kV>;
  constexpr int kWords = kP / 4;
  constexpr int kPer = Words<T>::kPer;
#pragma unroll
  for (int piece = 0; piece < kBytes / kP; ++piece) {
    const auto v = load_vec<Vec<uint32_t, kWords>>(reinterpret_cast<const char*>(p) + piece * kP);
#pragma unroll
    for (int w = 0; w < kWords; ++w) Words<T>::unpack(v[w], f + (piece * kWords + w) * kPer);
  }
}

// One warp a token (grid-stride over tokens). kr = topk - num_shared; log2_group = log2(G)
// (kChunk, kElement); vec: the row pitch and both pointers are kPiece-aligned.
template <typename T, int kV, Groups kGroups>
__global__ void __launch_bounds__(kThreads)
    fused_gate_kernel(const FusedGateParams p, const int kr, const int log2_group, const bool vec) {
  constexpr int kC = kV / 8;  // group layouts: chunks of 8 experts a lane
  static_assert(kV % 4 == 0 && kV <= 32, "lane runs of 4..32 experts, s stored as float4");
  static_assert(kGroups == Groups::kNone || (kV % 8 == 0 && (kC & (kC - 1)) == 0), "whole chunks of 8");
  __shared__ alignas(16) float s_smem[kWarps][32 * kV];  // each warp: s of its current token
  __shared__ uint32_t sel_smem[kWarps][32];              // each warp: ids of its current token
  __shared__ float sel_w_smem[kWarps][32];               // each warp: their s

  const int lane = static_cast<int>(threadIdx.x & 31);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const unsigned lanes_below = (1u << lane) - 1u;
  const int e0 = lane * kV;  // the lane's first expert
  float* s_row = s_smem[warp];
  uint32_t* sel_row = sel_smem[warp];
  float* sel_w = sel_w_smem[warp];
  const int num_experts = p.num_experts;
  const T* input = static_cast<const T*>(p.input);  // [num_tokens, num_experts]
  const T* bias = static_cast<const T*>(p.bias);    // [num_experts]
  float* weights = p.weights;                        // [num_tokens, topk]
  int32_t* ids = p.ids;                              // [num_tokens, topk]

  SGL_PDL_WAIT();  // before any input is read
  for (int64_t t = static_cast<int64_t>(blockIdx.x) * kWarps + warp; t < p.num_tokens;
       t += static_cast<int64_t>(gridDim.x) * kWarps) {
    const T* row = input + t * num_experts;
    float x[kV], bb[kV];
    if (vec && e0 + kV <= num_experts) {
      load_run<T, kV>(row + e0, x);
      load_run<T, kV>(bias + e0, bb);
    } else {
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        const bool in = e0 + j < num_experts;
        x[j] = in ? to_float(row[e0 + j]) : __int_as_float(0x7fffffff);  // padding: NaN
        bb[j] = in ? to_float(bias[e0 + j]) : 0.f;
      }
    }
    SGL_PDL_LAUNCH_DEPENDENTS();  // after the loads are issued: see sgl_kernel/arch.cuh

    // b as keys and (for group scores) as values with NaN -> -inf; s to shared memory.
    uint32_t key[kV];
    float bg[kV];
#pragma unroll
    for (int j = 0; j < kV; j += 4) {
      float s[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        s[i] = sigmoid(x[j + i]);
        const float b = s[i] + bb[j + i];
        key[j + i] = order_key(b);
        bg[j + i] = fmaxf(b, -INFINITY);  // fmaxf(NaN, -inf) = -inf
      }
      store_vec(s_row + e0 + j, Vec<float, 4>{{s[0], s[1], s[2], s[3]}});
    }

    if constexpr (kGroups == Groups::kChunk) {
      // G >= 8: chunk q (experts [8 q, 8 q + 8), lane q / kC) lies in group q >> cpg_log2. A
      // group of at most kC chunks lies inside a lane; a larger one covers 1 << lanes_log2
      // whole lanes (aligned). Every chunk ends holding its group's two largest b.
      constexpr int kCLog2 = kC == 1 ? 0 : kC == 2 ? 1 : 2;
      const int cpg_log2 = log2_group - 3;
      const int lanes_log2 = cpg_log2 > kCLog2 ? cpg_log2 - kCLog2 : 0;
      float m1[kC], m2[kC];
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        float a1[4], a2[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          a1[i] = fmaxf(bg[8 * c + 2 * i], bg[8 * c + 2 * i + 1]);
          a2[i] = fminf(bg[8 * c + 2 * i], bg[8 * c + 2 * i + 1]);
        }
        merge_top2(a1[0], a2[0], a1[1], a2[1]);
        merge_top2(a1[2], a2[2], a1[3], a2[3]);
        merge_top2(a1[0], a2[0], a1[2], a2[2]);
        m1[c] = a1[0];
        m2[c] = a2[0];
      }
#pragma unroll
      for (int d = 1; d < kC; d <<= 1) {
        if ((d >> cpg_log2) == 0) {  // d < chunks per group: c and c ^ d share a group
          float n1[kC], n2[kC];
#pragma unroll
          for (int c = 0; c < kC; ++c) {
            n1[c] = m1[c];
            n2[c] = m2[c];
            merge_top2(n1[c], n2[c], m1[c ^ d], m2[c ^ d]);
          }
#pragma unroll
          for (int c = 0; c < kC; ++c) {
            m1[c] = n1[c];
            m2[c] = n2[c];
          }
        }
      }
      if (lanes_log2 > 0) {  // the lane is one group: merge over the group's lanes
        float a1 = m1[0], a2 = m2[0];
        for (int off = 1; off < (1 << lanes_log2); off <<= 1) {
          const float o1 = __shfl_xor_sync(kFull, a1, off);
          const float o2 = __shfl_xor_sync(kFull, a2, off);
          merge_top2(a1, a2, o1, o2);
        }
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          m1[c] = a1;
          m2[c] = a2;
        }
      }
      uint32_t gkey[kC], gid[kC];
#pragma unroll
      for (int c = 0; c < kC; ++c) {
        const int q = lane * kC + c;
        gkey[c] = 8 * q < num_experts ? order_key(m1[c] + m2[c]) : kOut;  // padding groups never win
        gid[c] = static_cast<uint32_t>(q >> cpg_log2);
      }
      const int group_lane0 = lane & ~((1 << lanes_log2) - 1);  // the first lane of the lane's group
      uint32_t kept = 0;  // bit c: chunk c's group is kept
      for (int r = 0; r < p.topk_group; ++r) {
        uint32_t best, best_gid;
        argmax_tree(gkey, gid, best, best_gid);  // c ascending = group ascending
        const uint32_t top = __reduce_max_sync(kFull, best);
        const int owner = __ffs(__ballot_sync(kFull, best == top)) - 1;  // lowest lane = lowest group
        // The winner is the owner's best group: a group spanning lanes sees its first lane win,
        // a group inside a lane is the owner's best_gid.
        const bool won = owner == group_lane0;
#pragma unroll
        for (int c = 0; c < kC; ++c) {
          const bool hit = won && gid[c] == best_gid;
          gkey[c] = hit ? kOut : gkey[c];
          kept |= hit ? (1u << c) : 0u;
        }
      }
#pragma unroll
      for (int c = 0; c < kC; ++c) {
#pragma unroll
        for (int i = 0; i < 8; ++i) key[8 * c + i] = ((kept >> c) & 1u) != 0 ? key[8 * c + i] : kOut;
      }
    } else if constexpr (kGroups == Groups::kElement) {
      // G in {1, 2, 4}: a group is G aligned experts of one lane; a butterfly inside the lane
      // leaves every element holding its group's two largest b.
      const int group = 1 << log2_group;
      float m1[kV], m2[kV];
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        m1[j] = bg[j];
        m2[j] = -INFINITY;
      }
#pragma unroll
      for (int d = 1; d < 4; d <<= 1) {
        if (d < group) {
          float n1[kV], n2[kV];
#pragma unroll
          for (int j = 0; j < kV; ++j) {
            n1[j] = m1[j];
            n2[j] = m2[j];
            merge_top2(n1[j], n2[j], m1[j ^ d], m2[j ^ d]);
          }
#pragma unroll
          for (int j = 0; j < kV; ++j) {
            m1[j] = n1[j];
            m2[j] = n2[j];
          }
        }
      }
      uint32_t gkey[kV], slot[kV];
#pragma unroll
      for (int j = 0; j < kV; ++j) {
        gkey[j] = e0 + j < num_experts ? order_key(group == 1 ? m1[j] : m1[j] + m2[j]) : kOut;
        slot[j] = static_cast<uint32_t>(j);
      }
      uint32_t kept = 0;  // bit j: expert j's group is kept
      for (int r = 0; r < p.topk_group; ++r) {
        uint32_t best, best_slot;
        argmax_tree(gkey, slot, best, best_slot);  // slot ascending = group ascending
        const uint32_t top = __reduce_max_sync(kFull, best);
        const unsigned tied = __ballot_sync(kFull, best == top);  // every lane votes
        const bool owner = best == top && (tied & lanes_below) == 0;
        const uint32_t best_gid = (static_cast<uint32_t>(e0) + best_slot) >> log2_group;
#pragma unroll
        for (int j = 0; j < kV; ++j) {
          const bool hit = owner && ((static_cast<uint32_t>(e0 + j) >> log2_group) == best_gid);
          gkey[j] = hit ? kOut : gkey[j];
          kept |= hit ? (1u << j) : 0u;
        }
      }
#pragma unroll
      for (int j = 0; j < kV; ++j) key[j] = ((kept >> j) & 1u) != 0 ? key[j] : kOut;
    }

    // kr rounds. Each lane keeps the best two of its experts still in the running (cache; the
    // second is unknown once the first was taken: stale). Round r: the largest first of the
    // warp (redux), its lowest lane (ballot) is the owner; the owner writes the expert and its
    // s (an entry of s_row it wrote itself) to slot r, marks it picked, and moves its second up,
    // or, when that is stale, rescans its experts (picked ones masked) for a new best two.
    Top2 cache = top2_tree(key);
    uint32_t picked = 0;  // bit j: expert j of the lane was chosen
    bool stale = false;
    for (int r = 0; r < kr; ++r) {
      const uint32_t top = __reduce_max_sync(kFull, cache.k1);
      const unsigned tied = __ballot_sync(kFull, cache.k1 == top);  // every lane votes
      if (cache.k1 == top && (tied & lanes_below) == 0) {          // the owner: the lowest tied lane
        const uint32_t e = static_cast<uint32_t>(e0) + cache.s1;
        sel_row[r] = e;
        sel_w[r] = s_row[e];
        picked |= 1u << cache.s1;
        if (stale) {
          uint32_t rest[kV];
#pragma unroll
          for (int j = 0; j < kV; ++j) rest[j] = ((picked >> j) & 1u) != 0 ? kOut : key[j];
          cache = top2_tree(rest);
        } else {
          cache.k1 = cache.k2;
          cache.s1 = cache.s2;
        }
        stale = !stale;
      }
    }

    __syncwarp();  // sel_row and sel_w written by the owners above
    // S in round order, the same sum in every lane (broadcast reads)
    float sum = 0.f;
    for (int r = 0; r < kr; ++r) sum += sel_w[r];
    // id < num_experts by construction (kr <= the kept experts)
    uint32_t id = 0;
    float w = 0.f;
    if (lane < kr) {
      id = sel_row[lane];
      w = sel_w[lane];
    }
    if (lane < p.topk) {
      if (lane >= kr) {  // fused shared expert lane - kr
        id = static_cast<uint32_t>(num_experts + (lane - kr));
        w = sum / p.routed_scaling_factor;
      }
      if (p.renormalize) w = w / sum;
      if (p.scale_output) w = w * p.routed_scaling_factor;
      const int64_t out = t * p.topk + lane;
      weights[out] = w;
      ids[out] = static_cast<int32_t>(id);
    }
    __syncwarp();  // s_row, sel_row and sel_w are rewritten by the warp's next token
  }
}

template <typename T, int kV, Groups kGroups>
cudaError_t launch_shape(const FusedGateParams& p, int kr, int log2_group, cudaStream_t stream) {
  constexpr uintptr_t kP = kPiece<T, kV>;
  const bool vec = (static_cast<uintptr_t>(p.num_experts) * sizeof(T)) % kP == 0 &&
                   reinterpret_cast<uintptr_t>(p.input) % kP == 0 && reinterpret_cast<uintptr_t>(p.bias) % kP == 0;
  int64_t blocks = ceil_div<int64_t>(p.num_tokens, kWarps);
  blocks = blocks < kMaxBlocks ? blocks : kMaxBlocks;
  return launch_kernel(fused_gate_kernel<T, kV, kGroups>, dim3(static_cast<uint32_t>(blocks)), dim3(kThreads), 0,
                       stream, p.enable_pdl, p, kr, log2_group, vec);
}

// Experts a lane holds: the fewest that cover num_experts (multiples of 8 for the group
// layouts; 12 for Kimi-K2's 384).
template <typename T>
cudaError_t launch_type(const FusedGateParams& p, Groups groups, int kr, int log2_group, cudaStream_t stream) {
  const int e = p.num_experts;
  switch (groups) {
    case Groups::kNone:
      if (e <= 128) return launch_shape<T, 4, Groups::kNone>(p, kr, 0, stream);
      if (e <= 256) return launch_shape<T, 8, Groups::kNone>(p, kr, 0, stream);
      if (e <= 384) return launch_shape<T, 12, Groups::kNone>(p, kr, 0, stream);
      if (e <= 512) return launch_shape<T, 16, Groups::kNone>(p, kr, 0, stream);
      return launch_shape<T, 32, Groups::kNone>(p, kr, 0, stream);
    case Groups::kChunk:
      if (e <= 256) return launch_shape<T, 8, Groups::kChunk>(p, kr, log2_group, stream);
      if (e <= 512) return launch_shape<T, 16, Groups::kChunk>(p, kr, log2_group, stream);
      return launch_shape<T, 32, Groups::kChunk>(p, kr, log2_group, stream);
    default:
      if (e <= 256) return launch_shape<T, 8, Groups::kElement>(p, kr, log2_group, stream);
      if (e <= 512) return launch_shape<T, 16, Groups::kElement>(p, kr, log2_group, stream);
      return launch_shape<T, 32, Groups::kElement>(p, kr, log2_group, stream);
  }
}

}  // namespace fused_gate
}  // namespace

// Sizes are checked again here (cudaErrorInvalidValue): the kernel's registers, its
// shared-memory rows and its rounds rely on them. When groups are selected (num_groups > 1 and
// topk_group < num_groups), G = num_experts / num_groups must be a power of two (the API's
// num_experts is one; the binding also caps G at 32).
cudaError_t launch_fused_gate(const FusedGateParams& p, cudaStream_t stream) {
  using namespace fused_gate;
  const int e = p.num_experts;
  const int kr = p.topk - p.num_shared;
  if (p.num_tokens < 0 || e < 1 || e > kMaxFusedGateExperts || p.topk < 1 || p.topk > kMaxFusedGateTopk ||
      p.num_shared < 0 || kr < 1 || p.num_groups < 1 || e % p.num_groups != 0 || p.topk_group < 1 ||
      p.topk_group > p.num_groups || kr > p.topk_group * (e / p.num_groups)) {
    return cudaErrorInvalidValue;
  }
  if (p.num_tokens == 0) return cudaSuccess;
  if (p.weights == nullptr || p.ids == nullptr || p.input == nullptr || p.bias == nullptr) {
    return cudaErrorInvalidValue;
  }
  Groups groups = Groups::kNone;
  int log2_group = 0;
  if (p.num_groups > 1 && p.topk_group < p.num_groups) {
    const int g = e / p.num_groups;
    if ((g & (g - 1)) != 0) return cudaErrorInvalidValue;
    while ((1 << log2_group) < g) ++log2_group;
    groups = g >= 8 ? Groups::kChunk : Groups::kElement;
  }
  switch (p.dtype) {
    case Dtype::kFloat32: return launch_type<float>(p, groups, kr, log2_group, stream);
    case Dtype::kFloat16: return launch_type<half>(p, groups, kr, log2_group, stream);
    case Dtype::kBFloat16: return launch_type<__nv_bfloat16>(p, groups, kr, log2_group, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sgl_kernel::moe
