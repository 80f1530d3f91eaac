// SPDX-License-Identifier: Apache-2.0
// topk_softmax / topk_sigmoid (API.md 2.4; contract in moe.h): the k experts of each token with
// the largest gate key, in descending key order, and their weights.
//
// Ranking. Every element gets a 32-bit order key (order_key): a larger number gets a larger
// key, -0 and +0 the same key, NaN the key 1 (below -inf, so a NaN never beats a number), and
// 0 marks a slot already taken or past the row's end. Ties (equal keys) go to the lower expert
// index, everywhere. What is keyed is the value whose order is the key's exact order:
//   softmax: z (after softcap and bias); p = softmax(z) is strictly increasing in z, so ranking
//            z gives the exact order of p, without the ties that rounding p to fp32 would
//            invent (p underflowing to 0, two z one ulp apart giving the same expf);
//   sigmoid without bias: the gate x itself (sigmoid is strictly increasing);
//   sigmoid with bias: p + bias in fp32 (p = sigmoid(x)), the contract's key.
// Weights: softmax p = expf(z - m) / s with m = the largest z that is a number (fmaxf
// semantics) and s = sum over the row of expf(z - m), all in fp32; a NaN or +inf z makes s NaN,
// so every weight of that row is NaN (torch.softmax does the same) while the ids are still the
// k best numbers. sigmoid: w = 1 / (1 + expf(-x)) (the bias is not part of the weight).
// renormalize: each weight is divided by the fp32 sum of the row's k weights (0 / 0 is NaN).
// A row whose keys are all NaN gets experts 0 .. k-1.
//
// Two paths, the same selection:
//   * num_experts <= 1024 (every MoE router of today): a group of kLanes lanes per row, the row
//     in registers (kPerLane elements a lane, 16- or 8-byte vector loads when the gate's
//     pointer, row pitch and row length allow it, scalar loads otherwise), several rows per
//     128-thread block. Up to 128 experts with k <= 8 (Mixtral, Qwen-MoE): sort and merge on
//     the unique 64-bit composite (key << 32 | 0xffffffff - expert), whose descending order is
//     the selection order: each lane sorts its slots (bitonic network) into a list of kList = 8
//     composites, then log2(kLanes) rounds exchange the list with the xor-partner lane
//     (shuffles) and keep the top kList of the two (bitonic merge), so that every lane ends with
//     the group's top list; lane g stores output slots g, g + kLanes, ... from it. No shared
//     memory, no serial dependence on k. Otherwise: k rounds of a group argmax on (key, expert):
//     redux.sync max / min for groups of 16 and 32 lanes, an xor-shuffle butterfly for smaller
//     groups, no exchange for one lane; the winning lane records (expert, value) in shared
//     memory, takes the slot and rescans its own kPerLane keys (a tree: the lower slot wins
//     ties). Both store the same weights (the same arithmetic and summation order), k / kLanes
//     a lane. (launch_rows_for_k's NOTE: where each path won.)
//   * larger rows (up to kMaxGatingExperts): a 512-thread block per row runs a radix select
//     over the unique 48-bit composite (key << 16 | 0xFFFF - expert), 8-bit digits from the
//     top, stopping as soon as every element of the chosen bin is needed; exactly k elements
//     pass, and their rank among themselves is their output slot. The keys are cached in
//     shared memory when the row fits (E * 4 bytes), else every pass recomputes them from the
//     gate (rank_value is not inlined, so each pass computes bitwise the same keys).
#include <cstdint>

#include <cuda_runtime.h>

#include "moe/moe.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/order_key.cuh"
#include "sgl_kernel/reduce.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::moe {

namespace {
namespace gating {

constexpr uint32_t kTaken = 0;   // a taken slot, or one past the row's end
constexpr uint32_t kNanKey = 1;  // every NaN; below every number (-inf is 0x007FFFFF)
constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;

// Order-preserving map of an fp32 value to a uint32 key (see the file comment).
__device__ __forceinline__ uint32_t order_key(float v) { return float_order_key<kNanKey>(v); }

// The value of a key (k != kTaken); kNanKey gives a NaN, every other key its number.
__device__ __forceinline__ float key_value(uint32_t k) {
  if (k == kNanKey) return __uint_as_float(0x7fc00000u);
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

__device__ __forceinline__ float sigmoid(float x) { return __fdiv_rn(1.f, __fadd_rn(1.f, expf(-x))); }

// The ranked value of a gate x with bias b (0 when the call has none): see the file comment.
// Explicitly rounded operations: no contraction into FMAs that could differ between sites.
__device__ __forceinline__ float rank_value_inline(float x, float b, float softcap, bool use_sigmoid,
                                                   bool has_bias) {
  if (use_sigmoid) return has_bias ? __fadd_rn(sigmoid(x), b) : x;
  float z = x;
  if (softcap != 0.f) z = __fmul_rn(tanhf(__fdiv_rn(z, softcap)), softcap);
  return has_bias ? __fadd_rn(z, b) : z;
}

// The same, one compiled body: the block path recomputes keys in several passes and they must
// agree bit for bit.
__device__ __noinline__ float rank_value(float x, float b, float softcap, bool use_sigmoid, bool has_bias) {
  return rank_value_inline(x, b, softcap, use_sigmoid, has_bias);
}

// The weight of a selected expert before renormalization, from its value v: softmax z (the
// key's value), sigmoid x. m, s: the row's softmax maximum and sum.
__device__ __forceinline__ float selected_weight(float v, bool use_sigmoid, float m, float s) {
  return use_sigmoid ? sigmoid(v) : __fdiv_rn(expf(v - m), s);
}

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_gate(const T* ptr) {
  Vec<T, N> v;
  if constexpr (N == 1) {
    v.data[0] = *ptr;
  } else {
    v = load_vec<Vec<T, N>>(ptr);
  }
  return v;
}

__device__ __forceinline__ void store_id(const TopkGatingParams& p, int64_t offset, uint32_t expert) {
  if (p.ids_int64) {
    static_cast<int64_t*>(p.ids)[offset] = static_cast<int64_t>(expert);  // [num_tokens, k], pitch ids_stride
  } else {
    static_cast<int32_t*>(p.ids)[offset] = static_cast<int32_t>(expert);
  }
}

// ---------------------------------------------------------------------------------------------
// Rows in registers (num_experts <= 1024).

// A selected expert and its key, recorded by the lane that owned it.
struct Sel {
  uint32_t expert;
  uint32_t key;
};

// Max over the group's lanes (all lanes get it).
template <int kLanes>
__device__ __forceinline__ uint32_t group_max(uint32_t v, unsigned mask) {
  if constexpr (kLanes >= 16) {
    return __reduce_max_sync(mask, v);
  } else {
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) v = max(v, __shfl_xor_sync(mask, v, o));
    return v;
  }
}

// Sum over the group's lanes by an xor butterfly: every lane gets the same bits (each step adds
// the same two partial sums, in either order).
template <int kLanes>
__device__ __forceinline__ float group_sum(float v, unsigned mask) {
#pragma unroll
  for (int o = kLanes / 2; o > 0; o >>= 1) v += __shfl_xor_sync(mask, v, o);
  return v;
}

// The group's best (key, expert): largest key, lower expert on equal keys. Experts are unique
// among the lanes, so exactly one lane holds the winner.
template <int kLanes>
__device__ __forceinline__ void group_argmax(uint32_t key, uint32_t expert, unsigned mask, uint32_t& win_key,
                                             uint32_t& win_expert) {
  if constexpr (kLanes == 1) {
    win_key = key;
    win_expert = expert;
  } else if constexpr (kLanes >= 16) {
    win_key = __reduce_max_sync(mask, key);
    win_expert = __reduce_min_sync(mask, key == win_key ? expert : 0xffffffffu);
  } else {
#pragma unroll
    for (int o = kLanes / 2; o > 0; o >>= 1) {
      const uint32_t ok = __shfl_xor_sync(mask, key, o);
      const uint32_t oe = __shfl_xor_sync(mask, expert, o);
      if (ok > key || (ok == key && oe < expert)) {
        key = ok;
        expert = oe;
      }
    }
    win_key = key;
    win_expert = expert;
  }
}

// The lane's best slot: largest key, lowest slot on equal keys (slots ascend with the expert
// index), by a tree of adjacent pairs so that the left (lower) half always wins a tie.
template <int N>
__device__ __forceinline__ void lane_best(const uint32_t (&key)[N], uint32_t& best_key, int& best_slot) {
  uint32_t k[N];
  int s[N];
#pragma unroll
  for (int i = 0; i < N; ++i) {
    k[i] = key[i];
    s[i] = i;
  }
#pragma unroll
  for (int w = 1; w < N; w *= 2) {
#pragma unroll
    for (int i = 0; i + w < N; i += 2 * w) {
      const bool right = k[i + w] > k[i];
      k[i] = right ? k[i + w] : k[i];
      s[i] = right ? s[i + w] : s[i];
    }
  }
  best_key = k[0];
  best_slot = s[0];
}

// ---- Sort-and-merge selection (k <= kList) ----
// Every slot becomes a unique 64-bit composite (key << 32) | (0xffffffff - expert): a larger
// composite is a larger key, or the lower expert on an equal key, i.e. exactly the selection
// order. Slots past the row's end have key kTaken (0) and their own (unused) expert index, so
// they are unique too and below every element of the row; list padding is 0, below those.
__device__ __forceinline__ uint64_t slot_composite(uint32_t key, uint32_t expert) {
  return (static_cast<uint64_t>(key) << 32) | static_cast<uint64_t>(0xffffffffu - expert);
}

// Compare-exchange: a gets the larger, b the smaller.
__device__ __forceinline__ void cmp_swap(uint64_t& a, uint64_t& b) {
  const uint64_t hi = a > b ? a : b;
  const uint64_t lo = a > b ? b : a;
  a = hi;
  b = lo;
}

// Bitonic sort of v[kOff, kOff + N), descending (N a power of two).
template <int N, int kOff = 0, int M>
__device__ __forceinline__ void sort_desc(uint64_t (&v)[M]) {
  static_assert((N & (N - 1)) == 0 && kOff + N <= M, "sort size");
#pragma unroll
  for (int size = 2; size <= N; size *= 2) {
#pragma unroll
    for (int stride = size / 2; stride > 0; stride /= 2) {
#pragma unroll
      for (int i = 0; i < N; ++i) {
        const int j = i ^ stride;
        if (j > i) {
          if ((i & size) == 0) {
            cmp_swap(v[kOff + i], v[kOff + j]);  // descending run
          } else {
            cmp_swap(v[kOff + j], v[kOff + i]);  // ascending run (merged by the next size)
          }
        }
      }
    }
  }
}

// a = the N largest of a and b (both sorted descending; N a power of two), sorted descending:
// max(a[i], b[N-1-i]) holds the N largest as a bitonic sequence, a half cleaner sorts it. The
// composites are unique (0-padding aside), so every caller of a pair gets the same list.
template <int N>
__device__ __forceinline__ void merge_top(uint64_t (&a)[N], const uint64_t (&b)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) a[i] = a[i] > b[N - 1 - i] ? a[i] : b[N - 1 - i];
#pragma unroll
  for (int stride = N / 2; stride > 0; stride /= 2) {
#pragma unroll
    for (int i = 0; i < N; ++i) {
      if ((i & stride) == 0) cmp_swap(a[i], a[i + stride]);
    }
  }
}

// Lane g of a row's kLanes holds kChunks vectors of kVec elements: vector c * kLanes + g of the
// row, i.e. slot s = c * kVec + i is expert (c * kLanes + g) * kVec + i.
template <int kVec, int kLanes>
__device__ __forceinline__ uint32_t slot_expert(int slot, int g) {
  return static_cast<uint32_t>(((slot / kVec) * kLanes + g) * kVec + slot % kVec);
}

template <typename T, int kVec, int kLanes, int kPerLane, int kList, int kThreads>
__global__ void __launch_bounds__(kThreads) topk_gating_rows_kernel(const TopkGatingParams p, const int64_t row0) {
  static_assert(kPerLane % kVec == 0 && 32 % kLanes == 0 && kThreads % 32 == 0, "layout");
  constexpr int kChunks = kPerLane / kVec;
  constexpr int kRowsPerBlock = kThreads / kLanes;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Sel* __restrict__ sel_all = reinterpret_cast<Sel*>(smem_raw);  // [kRowsPerBlock, k]

  const int g = static_cast<int>(threadIdx.x) % kLanes;
  const int row_in_block = static_cast<int>(threadIdx.x) / kLanes;
  const int64_t row = row0 + static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + row_in_block;
  if (row >= p.num_tokens) return;  // the whole group: no lane of another row waits on it
  const unsigned group_bits = kLanes == 32 ? 0xffffffffu : ((1u << (kLanes & 31)) - 1u);
  const unsigned mask = group_bits << ((threadIdx.x & 31u) & ~static_cast<unsigned>(kLanes - 1));

  const int num_experts = p.num_experts;
  const int k = p.k;
  const bool use_sigmoid = p.sigmoid;
  const bool has_bias = p.bias != nullptr;
  const float softcap = use_sigmoid ? 0.f : p.softcap;
  const T* __restrict__ x_row = static_cast<const T*>(p.gating) + row * p.gating_stride;  // [num_experts]
  const float* __restrict__ bias = p.bias;                                                // [num_experts]

  bool valid[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) valid[c] = (c * kLanes + g) * kVec < num_experts;

  SGL_PDL_WAIT();  // before any input is read
  Vec<T, kVec> raw[kChunks];
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    if (valid[c]) raw[c] = load_gate<T, kVec>(x_row + (c * kLanes + g) * kVec);
  }
  float b[kPerLane];
#pragma unroll
  for (int s = 0; s < kPerLane; ++s) {
    b[s] = 0.f;
    if (has_bias && valid[s / kVec]) b[s] = bias[slot_expert<kVec, kLanes>(s, g)];
  }
  SGL_PDL_LAUNCH_DEPENDENTS();  // the loads are issued

  uint32_t key[kPerLane];
  float z[kPerLane];  // the ranked values (softmax: z, for the sum)
  uint32_t local_max = kTaken;
#pragma unroll
  for (int s = 0; s < kPerLane; ++s) {
    const float x = valid[s / kVec] ? to_float(raw[s / kVec][s % kVec]) : 0.f;
    z[s] = rank_value_inline(x, b[s], softcap, use_sigmoid, has_bias);
    key[s] = valid[s / kVec] ? order_key(z[s]) : kTaken;
    local_max = max(local_max, key[s]);
  }

  float m = 0.f, sum = 1.f;
  // softmax: m = fmaxf semantics: the largest number (NaN keys are below every number); NaN only
  // if all are. NOTE: on the sort path this runs for sigmoid too (its weights ignore m and sum):
  // without a branch around it, the scheduler interleaves these reductions with the sort.
  if (kList > 0 || !use_sigmoid) {
    m = key_value(group_max<kLanes>(local_max, mask));
    float part = 0.f;
#pragma unroll
    for (int s = 0; s < kPerLane; ++s) {
      if (valid[s / kVec]) part += expf(z[s] - m);
    }
    sum = group_sum<kLanes>(part, mask);
  }

  if constexpr (kList > 0) {
    // k <= kList: every lane builds its own top kList, sorted; xor-partner lanes exchange and
    // merge theirs (log2(kLanes) rounds), after which every lane holds the group's top kList.
    constexpr int L = kList;
    uint64_t v[kPerLane];
#pragma unroll
    for (int s = 0; s < kPerLane; ++s) v[s] = slot_composite(key[s], slot_expert<kVec, kLanes>(s, g));
    uint64_t top[L];
    if constexpr (kPerLane <= L) {
      sort_desc<kPerLane>(v);
#pragma unroll
      for (int i = 0; i < L; ++i) top[i] = i < kPerLane ? v[i] : uint64_t{0};
    } else {
#pragma unroll
      for (int i = 0; i < L; ++i) top[i] = v[i];
      sort_desc<L>(top);
#pragma unroll
      for (int c = 1; c < kPerLane / L; ++c) {
        uint64_t t[L];
#pragma unroll
        for (int i = 0; i < L; ++i) t[i] = v[c * L + i];
        sort_desc<L>(t);
        merge_top(top, t);
      }
    }
#pragma unroll
    for (int o = 1; o < kLanes; o <<= 1) {
      uint64_t other[L];
#pragma unroll
      for (int i = 0; i < L; ++i) other[i] = __shfl_xor_sync(mask, top[i], o);
      merge_top(top, other);
    }

    // Lane g: output slots j = g, g + kLanes, ... < k, from the list (same weight arithmetic and
    // summation order as the round loop below).
    constexpr int kOut = (L + kLanes - 1) / kLanes;
    float w[kOut];
    uint32_t ex[kOut];
    float part = 0.f;
#pragma unroll
    for (int r = 0; r < kOut; ++r) {
      const int j = r * kLanes + g;
      uint64_t c = top[0];
#pragma unroll
      for (int i = 1; i < L; ++i) c = i == j ? top[i] : c;
      ex[r] = 0xffffffffu - static_cast<uint32_t>(c);
      w[r] = 0.f;
      if (j < k) {
        const float v = use_sigmoid && has_bias ? to_float(x_row[ex[r]]) : key_value(static_cast<uint32_t>(c >> 32));
        w[r] = selected_weight(v, use_sigmoid, m, sum);
        part += w[r];
      }
    }
    float total = 1.f;
    if (p.renormalize) total = group_sum<kLanes>(part, mask);
    float* __restrict__ w_row = p.weights + row * p.weights_stride;  // [k]
    const int64_t id_row = row * p.ids_stride;
#pragma unroll
    for (int r = 0; r < kOut; ++r) {
      const int j = r * kLanes + g;
      if (j < k) {
        w_row[j] = p.renormalize ? __fdiv_rn(w[r], total) : w[r];
        store_id(p, id_row + j, ex[r]);
      }
    }
  } else {
    // k > kList: k rounds of a group argmax.
    Sel* __restrict__ sel = sel_all + static_cast<int64_t>(row_in_block) * k;  // [k]
    uint32_t best_key;
    int best_slot;
    lane_best(key, best_key, best_slot);
    for (int r = 0; r < k; ++r) {
      const uint32_t expert = slot_expert<kVec, kLanes>(best_slot, g);
      uint32_t win_key, win_expert;
      group_argmax<kLanes>(best_key, expert, mask, win_key, win_expert);
      if (expert == win_expert) {  // this lane owns the winner: record it, take it, rescan
        sel[r] = Sel{win_expert, win_key};
#pragma unroll
        for (int s = 0; s < kPerLane; ++s) {
          if (s == best_slot) key[s] = kTaken;
        }
        lane_best(key, best_key, best_slot);
      }
    }
    __syncwarp(mask);

    // Lane g: output slots g, g + kLanes, ...; the weight's source is the key's value, except for
    // sigmoid with bias (key p + bias): the gate, read again (an L1 hit: this warp just loaded it).
    float total = 1.f;
    if (p.renormalize) {
      float part = 0.f;
      for (int j = g; j < k; j += kLanes) {
        const Sel e = sel[j];
        const float v = use_sigmoid && has_bias ? to_float(x_row[e.expert]) : key_value(e.key);
        part += selected_weight(v, use_sigmoid, m, sum);
      }
      total = group_sum<kLanes>(part, mask);
    }
    float* __restrict__ w_row = p.weights + row * p.weights_stride;  // [k]
    const int64_t id_row = row * p.ids_stride;
    for (int j = g; j < k; j += kLanes) {
      const Sel e = sel[j];
      const float v = use_sigmoid && has_bias ? to_float(x_row[e.expert]) : key_value(e.key);
      float w = selected_weight(v, use_sigmoid, m, sum);
      if (p.renormalize) w = __fdiv_rn(w, total);
      w_row[j] = w;
      store_id(p, id_row + j, e.expert);
    }
  }
}

template <typename T, int kVec, int kLanes, int kPerLane, int kList>
cudaError_t launch_rows(const TopkGatingParams& p, cudaStream_t stream) {
  constexpr int kThreads = 128;
  constexpr int kRowsPerBlock = kThreads / kLanes;
  const size_t smem = kList > 0 ? 0 : static_cast<size_t>(kRowsPerBlock) * p.k * sizeof(Sel);
  const int64_t rows_per_launch = kMaxGridX * kRowsPerBlock;
  for (int64_t row0 = 0; row0 < p.num_tokens; row0 += rows_per_launch) {
    const int64_t rows = p.num_tokens - row0 < rows_per_launch ? p.num_tokens - row0 : rows_per_launch;
    SGL_CUDA_TRY(launch_kernel(topk_gating_rows_kernel<T, kVec, kLanes, kPerLane, kList, kThreads>,
                               dim3(static_cast<uint32_t>(ceil_div<int64_t>(rows, kRowsPerBlock))), dim3(kThreads),
                               smem, stream, p.enable_pdl, p, row0));
  }
  return cudaSuccess;
}

// Lanes per row and elements per lane by row length: 8 elements a lane up to 256 experts (one
// 16-byte load of a 16-bit gate), then 16 and 32 on a whole warp; the round loop (kList = 0).
template <typename T, int kVec>
cudaError_t launch_rows_rounds(const TopkGatingParams& p, cudaStream_t stream) {
  const int e = p.num_experts;
  if (e <= 8) return launch_rows<T, kVec, 1, 8, 0>(p, stream);
  if (e <= 16) return launch_rows<T, kVec, 2, 8, 0>(p, stream);
  if (e <= 32) return launch_rows<T, kVec, 4, 8, 0>(p, stream);
  if (e <= 64) return launch_rows<T, kVec, 8, 8, 0>(p, stream);
  if (e <= 128) return launch_rows<T, kVec, 16, 8, 0>(p, stream);
  if (e <= 256) return launch_rows<T, kVec, 32, 8, 0>(p, stream);
  if (e <= 512) return launch_rows<T, kVec, 32, 16, 0>(p, stream);
  return launch_rows<T, kVec, 32, 32, 0>(p, stream);
}

// The selection: sort and merge of 8-entry lists for up to 128 experts and k <= 8, the round
// loop otherwise.
// NOTE (H200, bench_topk_gating.py, bf16, us, round loop -> sort and merge, same kernels
// otherwise): E=128 k=8 T = 1 / 16 / 128 / 16384 3.57 / 4.84 / 4.90 / 16.41 -> 2.47 / 2.51 /
// 2.58 / 16.48; E=8 k=2 T = 1 / 128 / 16384 1.91 / 2.28 / 2.39 -> 1.94 / 1.99 / 2.09; E=60 k=4
// T=4096 3.17 -> 3.18. Not taken: a whole warp a row, E=256 sigmoid k=8 T = 1 / 128 / 16384
// 3.02 / 3.11 / 25.70 -> 3.00 / 3.11 / 38.59 (the merge's five rounds cost more than they save),
// and 16-entry lists, E=512 k=10 T=8192 24.20 -> 45.69.
template <typename T, int kVec>
cudaError_t launch_rows_for_k(const TopkGatingParams& p, cudaStream_t stream) {
  const int e = p.num_experts;
  if (p.k <= 8 && e <= 128) {
    if (e <= 8) return launch_rows<T, kVec, 1, 8, 8>(p, stream);
    if (e <= 16) return launch_rows<T, kVec, 2, 8, 8>(p, stream);
    if (e <= 32) return launch_rows<T, kVec, 4, 8, 8>(p, stream);
    if (e <= 64) return launch_rows<T, kVec, 8, 8, 8>(p, stream);
    return launch_rows<T, kVec, 16, 8, 8>(p, stream);
  }
  return launch_rows_rounds<T, kVec>(p, stream);
}
constexpr int kRowsMaxExperts = 1024;

// ---------------------------------------------------------------------------------------------
// A block per row (num_experts > 1024): radix select.

constexpr int kBlockThreads = 512;
constexpr int kBatch = 8;          // elements a thread loads before it computes their keys
constexpr uint32_t kNoDigit = 0xffffffffu;

// Dynamic shared memory of topk_gating_block_kernel, then the key cache (uint32[E]) if used.
struct BlockShared {
  uint32_t hist[256];
  uint64_t comp[kMaxGatingK];     // selected composites, in arrival order
  float w_sorted[kMaxGatingK];    // by output slot
  uint32_t e_sorted[kMaxGatingK];
  float scratch[32];
  uint32_t bin, above, count, taken;  // resolve_digit's answer; the gather's slot counter
};

// One count per distinct digit of the warp (kNoDigit: none); every lane of the warp calls it.
__device__ __forceinline__ void hist_add(uint32_t* hist, uint32_t digit) {
  const unsigned peers = __match_any_sync(0xffffffffu, digit);
  const int lane = static_cast<int>(threadIdx.x & 31u);
  if (digit != kNoDigit && __ffs(peers) - 1 == lane) atomicAdd(&hist[digit], static_cast<uint32_t>(__popc(peers)));
}

// Warp 0: the bin b holding the need-th largest of the histogram (bins counted from 255 down),
// the count above it and its own count.
__device__ __forceinline__ void resolve_digit(BlockShared& sh, uint32_t need) {
  const int lane = static_cast<int>(threadIdx.x & 31u);
  uint32_t c[8];
  uint32_t local = 0;
#pragma unroll
  for (int j = 0; j < 8; ++j) {
    c[j] = sh.hist[255 - 8 * lane - j];
    local += c[j];
  }
  uint32_t incl = local;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const uint32_t t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  const uint32_t excl = incl - local;
  if (excl < need && need <= incl) {  // exactly one lane: the counts add up to >= need
    uint32_t run = excl;
    bool found = false;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (!found && run + c[j] >= need) {
        found = true;
        sh.bin = static_cast<uint32_t>(255 - 8 * lane - j);
        sh.above = run;
        sh.count = c[j];
      }
      run += c[j];
    }
  }
}

__device__ __forceinline__ uint32_t block_max_u32(uint32_t v, float* scratch) {
  uint32_t* s = reinterpret_cast<uint32_t*>(scratch);
  const int lane = static_cast<int>(threadIdx.x & 31u);
  const int warp = static_cast<int>(threadIdx.x >> 5);
  v = __reduce_max_sync(0xffffffffu, v);
  if (lane == 0) s[warp] = v;
  __syncthreads();
  v = lane < static_cast<int>(blockDim.x >> 5) ? s[lane] : 0u;
  v = __reduce_max_sync(0xffffffffu, v);
  __syncthreads();
  return v;
}

// Keys of the elements e = base + j * kBlockThreads + threadIdx.x (kTaken past the row's end):
// from the cache, or computed from the gate (and stored in the cache when `fill`).
template <typename T>
__device__ __forceinline__ void batch_keys(const TopkGatingParams& p, const T* x_row, uint32_t* cache, bool from_cache,
                                           bool fill, int base, uint32_t (&keys)[kBatch]) {
  const int num_experts = p.num_experts;
  if (from_cache) {
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int e = base + j * kBlockThreads + static_cast<int>(threadIdx.x);
      keys[j] = e < num_experts ? cache[e] : kTaken;
    }
    return;
  }
  const bool use_sigmoid = p.sigmoid;
  const bool has_bias = p.bias != nullptr;
  const float softcap = use_sigmoid ? 0.f : p.softcap;
  T raw[kBatch];
  float b[kBatch];
#pragma unroll
  for (int j = 0; j < kBatch; ++j) {
    const int e = base + j * kBlockThreads + static_cast<int>(threadIdx.x);
    b[j] = 0.f;
    if (e < num_experts) {
      raw[j] = x_row[e];
      if (has_bias) b[j] = p.bias[e];
    }
  }
#pragma unroll
  for (int j = 0; j < kBatch; ++j) {
    const int e = base + j * kBlockThreads + static_cast<int>(threadIdx.x);
    keys[j] = kTaken;
    if (e < num_experts) {
      keys[j] = order_key(rank_value(to_float(raw[j]), b[j], softcap, use_sigmoid, has_bias));
      if (fill) cache[e] = keys[j];
    }
  }
}

__device__ __forceinline__ uint64_t composite(uint32_t key, int e) {
  return (static_cast<uint64_t>(key) << 16) | static_cast<uint64_t>(0xffffu - static_cast<uint32_t>(e));
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads)
    topk_gating_block_kernel(const TopkGatingParams p, const int64_t row0, const bool cached) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  BlockShared& sh = *reinterpret_cast<BlockShared*>(smem_raw);
  uint32_t* __restrict__ cache = reinterpret_cast<uint32_t*>(smem_raw + sizeof(BlockShared));  // [E] if cached

  const int64_t row = row0 + blockIdx.x;
  const int num_experts = p.num_experts;
  const int k = p.k;
  const int tid = static_cast<int>(threadIdx.x);
  const bool use_sigmoid = p.sigmoid;
  const T* __restrict__ x_row = static_cast<const T*>(p.gating) + row * p.gating_stride;  // [num_experts]

  uint32_t need = static_cast<uint32_t>(k);  // elements still to take among those matching prefix
  uint64_t prefix = 0;                       // the composite's digits fixed so far
  int shift = 48;                            // bit position of the last fixed digit
  bool done = false;
  bool have_sum = use_sigmoid;
  float m = 0.f, sum = 1.f;

  SGL_PDL_WAIT();  // before any input is read
  for (int pass = 0;; ++pass) {
    const bool hist_pass = !done;
    const bool sum_pass = pass > 0 && !have_sum;  // needs m, known after pass 0
    if (!hist_pass && !sum_pass) break;
    if (hist_pass) {
      if (tid < 256) sh.hist[tid] = 0;
      __syncthreads();
    }
    const int dshift = shift - 8;  // the digit of this pass: composite bits [dshift, dshift + 8)
    uint32_t local_max = kTaken;
    float part = 0.f;
    for (int base = 0; base < num_experts; base += kBatch * kBlockThreads) {
      uint32_t keys[kBatch];
      batch_keys<T>(p, x_row, cache, cached && pass > 0, cached && pass == 0, base, keys);
#pragma unroll
      for (int j = 0; j < kBatch; ++j) {
        const int e = base + j * kBlockThreads + tid;
        const bool valid = e < num_experts;
        local_max = max(local_max, keys[j]);
        if (sum_pass && valid) part += expf(key_value(keys[j]) - m);
        if (hist_pass) {
          const uint64_t c = composite(keys[j], e);
          const bool match = valid && (c >> shift) == prefix;  // shift 48: every composite (< 2^48)
          hist_add(sh.hist, match ? static_cast<uint32_t>((c >> dshift) & 0xffu) : kNoDigit);
        }
      }
    }
    if (pass == 0) {
      SGL_PDL_LAUNCH_DEPENDENTS();  // the row has been read once
      if (!use_sigmoid) m = key_value(block_max_u32(local_max, sh.scratch));
    }
    if (sum_pass) {
      sum = block_reduce_sum(part, sh.scratch);
      have_sum = true;
    }
    if (hist_pass) {
      __syncthreads();
      if (tid < 32) resolve_digit(sh, need);
      __syncthreads();
      const uint32_t bin = sh.bin, above = sh.above, count = sh.count;
      need -= above;
      prefix = (prefix << 8) | bin;
      shift = dshift;
      done = count == need || shift == 0;  // at the last digit the composites are unique: count == 1
      __syncthreads();  // sh.bin etc. are rewritten by the next resolve
    }
  }

  // Exactly k composites have (c >> shift) >= prefix.
  if (tid == 0) sh.taken = 0;
  __syncthreads();
  for (int base = 0; base < num_experts; base += kBatch * kBlockThreads) {
    uint32_t keys[kBatch];
    batch_keys<T>(p, x_row, cache, cached, false, base, keys);
#pragma unroll
    for (int j = 0; j < kBatch; ++j) {
      const int e = base + j * kBlockThreads + tid;
      const uint64_t c = composite(keys[j], e);
      if (e < num_experts && (c >> shift) >= prefix) {
        const uint32_t slot = atomicAdd(&sh.taken, 1u);
        if (slot < static_cast<uint32_t>(k)) sh.comp[slot] = c;
      }
    }
  }
  __syncthreads();
  if (tid < k) {
    const uint64_t c = sh.comp[tid];
    int rank = 0;
    for (int i = 0; i < k; ++i) rank += sh.comp[i] > c ? 1 : 0;
    const uint32_t expert = 0xffffu - static_cast<uint32_t>(c & 0xffffu);
    const uint32_t key = static_cast<uint32_t>(c >> 16);
    // sigmoid with bias: the key is p + bias; the weight needs the gate itself.
    const float v = use_sigmoid && p.bias != nullptr ? to_float(x_row[expert]) : key_value(key);
    sh.w_sorted[rank] = selected_weight(v, use_sigmoid, m, sum);
    sh.e_sorted[rank] = expert;
  }
  __syncthreads();
  const float w = tid < k ? sh.w_sorted[tid] : 0.f;
  float total = 1.f;
  if (p.renormalize) total = block_reduce_sum(w, sh.scratch);  // in slot order: deterministic
  if (tid < k) {
    p.weights[row * p.weights_stride + tid] = p.renormalize ? __fdiv_rn(w, total) : w;  // [num_tokens, k]
    store_id(p, row * p.ids_stride + tid, sh.e_sorted[tid]);
  }
}

template <typename T>
cudaError_t launch_block(const TopkGatingParams& p, cudaStream_t stream) {
  int device = 0, optin = 0;
  SGL_CUDA_TRY(cudaGetDevice(&device));
  SGL_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const size_t base = sizeof(BlockShared);
  const size_t with_cache = base + static_cast<size_t>(p.num_experts) * sizeof(uint32_t);
  // NOTE: the static shared memory of block_max_u32 / block_reduce_sum is none (BlockShared
  // holds their scratch); 1 KiB of slack for the runtime's reserved bytes.
  const bool cached = with_cache + 1024 <= static_cast<size_t>(optin);
  const size_t smem = cached ? with_cache : base;
  for (int64_t row0 = 0; row0 < p.num_tokens; row0 += kMaxGridX) {
    const int64_t rows = p.num_tokens - row0 < kMaxGridX ? p.num_tokens - row0 : kMaxGridX;
    SGL_CUDA_TRY(launch_kernel(topk_gating_block_kernel<T>, dim3(static_cast<uint32_t>(rows)), dim3(kBlockThreads),
                               smem, stream, p.enable_pdl, p, row0, cached));
  }
  return cudaSuccess;
}

// Widest vector (16 or 8 bytes) that the gate's pointer, row pitch and row length all allow.
int vector_bytes(const TopkGatingParams& p, int elt) {
  const auto addr = reinterpret_cast<uintptr_t>(p.gating);
  const int64_t pitch = p.gating_stride * elt;
  const int64_t row = static_cast<int64_t>(p.num_experts) * elt;
  for (int w : {16, 8}) {
    if (addr % w == 0 && (p.num_tokens == 1 || pitch % w == 0) && row % w == 0) return w;
  }
  return elt;
}

template <typename T>
cudaError_t launch_typed(const TopkGatingParams& p, cudaStream_t stream) {
  if (p.num_experts > kRowsMaxExperts) return launch_block<T>(p, stream);
  constexpr int kElt = static_cast<int>(sizeof(T));
  switch (vector_bytes(p, kElt)) {
    case 16:
      return launch_rows_for_k<T, 16 / kElt>(p, stream);
    case 8:
      return launch_rows_for_k<T, 8 / kElt>(p, stream);
    default:
      return launch_rows_for_k<T, 1>(p, stream);
  }
}

}  // namespace gating
}  // namespace

cudaError_t launch_topk_gating(const TopkGatingParams& p, cudaStream_t stream) {
  if (p.num_tokens <= 0) return cudaSuccess;
  if (p.num_experts < 1 || p.num_experts > kMaxGatingExperts || p.k < 1 || p.k > kMaxGatingK ||
      p.k > p.num_experts || p.gating == nullptr || p.weights == nullptr || p.ids == nullptr) {
    return cudaErrorInvalidValue;
  }
  switch (p.dtype) {
    case Dtype::kFloat32:
      return gating::launch_typed<float>(p, stream);
    case Dtype::kFloat16:
      return gating::launch_typed<half>(p, stream);
    case Dtype::kBFloat16:
      return gating::launch_typed<__nv_bfloat16>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sgl_kernel::moe
