// SPDX-License-Identifier: Apache-2.0
// fast_topk and its fused transforms: the kTopK (2048) largest fp32 scores of each row's window
// score[b, s : s + n], one block (or one cluster of blocks, below) per row.
//
// Rows with n <= 2048 write 0..n-1, then -1. Longer rows run a radix select on the
// order-preserving uint32 key of each score (order_key: NaN gets key 0, below -inf; -0.0 ranks
// as +0.0), most significant digit first, in three passes of 11, 11 and 10 bits. A pass
// histograms, in shared memory, the digit of the elements whose higher bits equal the key
// prefix fixed so far, then fixes the digit of the bin that holds the 2048th largest element;
// the selection stops early once every element left in that bin is needed.
//   - Pass 1 reads the window from global memory.
//   - If the chosen bin of pass 1 holds at most `capacity` elements (the common case), one
//     more read of the window copies them (key, position) into shared memory and the later
//     passes run there; otherwise the later passes re-read the window.
//   - The final read writes every element above the threshold and the lowest-position
//     elements equal to it: exactly 2048, in ascending position order. Warp w owns a fixed
//     contiguous chunk of the window; per-warp counts (from the candidates, or from a counting
//     read) give each warp its first output slot, and ballots order the lanes. No atomics
//     decide an output slot, so the same inputs give the same outputs.
// Every position read from memory (lengths, row_starts, cu_seqlens_q, page-table columns) is
// bounds-checked: a window is clamped to [0, L), an out-of-range page-table column gives -1.
//
// Few long rows (sm90+): a cluster of up to 8 blocks shares a row. Block r of the cluster
// owns warp chunks r * kWarps ... r * kWarps + kWarps - 1 of the window; every histogram is
// summed over the cluster's blocks through distributed shared memory before the digit is
// chosen (each block chooses the same one), and a block's first output slot adds the counts
// of the blocks before it. One block per row already fills the GPU past ~one row per SM.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>

#include <cooperative_groups.h>

#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/order_key.cuh"
#include "sgl_kernel/reduce.cuh"
#include "sgl_kernel/runtime.h"
#include "sgl_kernel/vec.cuh"
#include "top_k/top_k.h"

namespace sgl_kernel::top_k {

namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 2048;                   // 11-bit digits
constexpr int kBinsPerThread = kBins / kThreads;
constexpr int kUnroll = 4;                    // 16-byte loads in flight per lane
constexpr int kMinCapacity = kTopK;           // candidates: the least shared memory we run with
// Radix passes, most significant digit first: key bits [21, 32), [10, 21), [0, 10).
constexpr int kPasses = 3;
__host__ __device__ constexpr int pass_shift(int pass) { return pass == 0 ? 21 : pass == 1 ? 10 : 0; }
__host__ __device__ constexpr int pass_bits(int pass) { return pass == kPasses - 1 ? 10 : 11; }
static_assert(pass_shift(0) + pass_bits(0) == 32 && pass_shift(1) + pass_bits(1) == pass_shift(0) &&
                  pass_shift(2) + pass_bits(2) == pass_shift(1) && pass_shift(2) == 0 && pass_bits(0) <= 11,
              "the passes cover the 32 key bits, high to low, with at most kBins bins");

static_assert(kBins % kThreads == 0, "bins split evenly over the threads");
static_assert(kWarps <= 32, "one lane per warp chunk in the slot sums");

// Block state in shared memory, followed by the candidate arrays (key[capacity], pos[capacity]).
struct Shared {
  int hist[kBins];
  int warp_sums[kWarps];   // block scan scratch
  int warp_above[kWarps];  // per warp chunk: elements above the threshold
  int warp_tie[kWarps];    // per warp chunk: elements equal to the threshold
  uint32_t prefix;         // key bits fixed so far (only bits inside `mask`)
  uint32_t mask;           // which key bits are fixed: a run of high bits
  int k_rem;               // elements still to take among those matching (prefix, mask)
  int bin_count;           // elements matching (prefix, mask)
  int n_cand;              // candidates copied to shared memory
  int request;             // kPageTable: page-table row of this block's row, -1 if none
};

// The blocks that share a row (a thread-block cluster on sm90+; a single block otherwise).
struct RowGroup {
  int rank;  // this block's rank in the cluster
  int size;  // blocks per row (1, 2, 4 or 8)
};

__device__ __forceinline__ RowGroup row_group() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const cooperative_groups::cluster_group c = cooperative_groups::this_cluster();
  return {static_cast<int>(c.block_rank()), static_cast<int>(c.num_blocks())};
#else
  return {0, 1};
#endif
}

// Barrier of every thread of the row's blocks, with their shared-memory writes visible to each
// other (a block barrier when the row has one block).
__device__ __forceinline__ void row_sync(const RowGroup& g) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (g.size > 1) {
    cooperative_groups::this_cluster().sync();
    return;
  }
#endif
  __syncthreads();
}

// `p` (in this block's shared memory) at the same offset in block `rank` of the row.
template <typename T>
__device__ __forceinline__ T* row_peer(T* p, const RowGroup& g, int rank) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (g.size > 1) return cooperative_groups::this_cluster().map_shared_rank(p, rank);
#endif
  return p;
}

// Order-preserving key: a > b (as floats, NaN lowest) <=> order_key(a) > order_key(b); NaN
// gets 0, below every number (sgl_kernel/order_key.cuh).
__device__ __forceinline__ uint32_t order_key(float v) { return float_order_key<0u>(v); }

// The clamped window of one row, cut into 4-element groups that start at 16-byte boundaries:
// group g holds positions 4 g - head ... 4 g - head + 3 (those in [0, n)).
// Warps are numbered over the row: block r's warp i is warp r * kWarps + i.
struct Window {
  const float* x;           // score[b] + s
  int64_t n;                // elements, kTopK < n <= INT32_MAX
  int64_t head;             // x - head is 16-byte aligned (0..3)
  int64_t groups;           // ceil((n + head) / 4)
  int64_t groups_per_warp;  // warp w owns groups [w * groups_per_warp, (w + 1) * groups_per_warp)
  int64_t first_warp;       // this block's first warp
};

// This block's warp (0 .. kWarps-1) that owns position `pos` of the window (other blocks' warps
// give values outside that range).
__device__ __forceinline__ int64_t owner_warp(const Window& w, int64_t pos) {
  return ((pos + w.head) >> 2) / w.groups_per_warp - w.first_warp;
}

// Calls f(v[4], g, valid) for every group of the calling warp's chunk, in ascending group
// order: in call u of an iteration lane l holds group base + 32 u + l, so each call of a warp
// covers 32 consecutive groups. `valid` has bit e set when v[e] is inside the window (positions outside
// are never read). Every lane makes the same calls (valid = 0 past the end): f may use warp
// collectives.
template <typename F>
__device__ __forceinline__ void sweep(const Window& w, F&& f) {
  const int lane = threadIdx.x & 31;
  const int64_t begin = (w.first_warp + static_cast<int64_t>(threadIdx.x >> 5)) * w.groups_per_warp;
  const int64_t end = min(w.groups, begin + w.groups_per_warp);
  for (int64_t base = begin; base < end; base += 32 * kUnroll) {
    float v[kUnroll][4];
    uint32_t valid[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t g = base + u * 32 + lane;
      const int64_t i0 = 4 * g - w.head;
      valid[u] = 0;
#pragma unroll
      for (int e = 0; e < 4; ++e) v[u][e] = 0.f;
      if (g < end) {
        if (i0 >= 0 && i0 + 4 <= w.n) {
          const Vec<float, 4> q = load16(w.x + i0);  // 16-byte aligned: x + i0 = (x - head) + 4 g
#pragma unroll
          for (int e = 0; e < 4; ++e) v[u][e] = q[e];
          valid[u] = 0xfu;
        } else {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            if (i0 + e >= 0 && i0 + e < w.n) {
              v[u][e] = w.x[i0 + e];
              valid[u] |= 1u << e;
            }
          }
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) f(v[u], base + u * 32 + lane, valid[u]);
  }
}

// Set flags of the calling warp's call (4 per lane, position order: lane, then e): how many
// lie before this lane's first element, and how many in all.
__device__ __forceinline__ void warp_count(const bool (&flag)[4], uint32_t lanes_before, int& before, int& total) {
  before = 0;
  total = 0;
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    const uint32_t ballot = __ballot_sync(0xffffffffu, flag[e]);
    before += __popc(ballot & lanes_before);
    total += __popc(ballot);
  }
}

// Exclusive prefix sum over the block (thread order). Contains __syncthreads().
__device__ __forceinline__ int block_exclusive_sum(int v, int* warp_sums) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  int incl = v;
#pragma unroll
  for (int o = 1; o < 32; o <<= 1) {
    const int t = __shfl_up_sync(0xffffffffu, incl, o);
    if (lane >= o) incl += t;
  }
  if (lane == 31) warp_sums[warp] = incl;
  __syncthreads();
  int before = 0;
  for (int i = 0; i < warp; ++i) before += warp_sums[i];
  __syncthreads();  // warp_sums may be reused right after
  return before + incl - v;
}

// After the histogram of the digit at [shift, shift + bits): fix the digit d whose bin holds the
// k_rem-th largest element, i.e. (count above d) < k_rem <= (count above d) + hist[d], and move
// the prefix down to it. The total of the histogram is >= k_rem, so exactly one bin qualifies.
// With several blocks per row the histogram is the sum of theirs (the caller synced the row),
// added in rank order, so every block fixes the same digit.
__device__ void select_digit(Shared& sh, int shift, int bits, const RowGroup& g) {
  const int nbins = 1 << bits;
  const int k = sh.k_rem;  // read before the scan's barrier; written after it
  // Thread t holds bins nbins-1-4t ... nbins-4-4t: the scan runs from the highest bin down.
  int c[kBinsPerThread];
  int sum = 0;
#pragma unroll
  for (int j = 0; j < kBinsPerThread; ++j) {
    const int p = threadIdx.x * kBinsPerThread + j;
    c[j] = 0;
    if (p < nbins) {
      for (int q = 0; q < g.size; ++q) c[j] += row_peer(sh.hist, g, q)[nbins - 1 - p];
    }
    sum += c[j];
  }
  int above = block_exclusive_sum(sum, sh.warp_sums);
#pragma unroll
  for (int j = 0; j < kBinsPerThread; ++j) {
    const int p = threadIdx.x * kBinsPerThread + j;
    if (p < nbins && above < k && k <= above + c[j]) {
      const uint32_t digit = static_cast<uint32_t>(nbins - 1 - p);
      sh.prefix |= digit << shift;
      sh.mask |= static_cast<uint32_t>(nbins - 1) << shift;
      sh.k_rem = k - above;
      sh.bin_count = c[j];
    }
    above += c[j];
  }
  __syncthreads();
}

// One radix pass over the keys that for_each_key(f) hands to f. Returns true when the
// selection is complete: every element matching the new prefix is taken.
template <typename ForEachKey>
__device__ bool radix_pass(Shared& sh, int shift, int bits, const RowGroup& g, ForEachKey&& for_each_key) {
  for (int i = threadIdx.x; i < kBins; i += kThreads) sh.hist[i] = 0;
  __syncthreads();  // also publishes prefix / mask / k_rem of the previous step
  const uint32_t prefix = sh.prefix;
  const uint32_t mask = sh.mask;
  const uint32_t digit_mask = (1u << bits) - 1u;
  for_each_key([&](uint32_t key) {
    if ((key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & digit_mask], 1);
  });
  row_sync(g);  // every block's histogram complete
  select_digit(sh, shift, bits, g);
  const bool done = sh.bin_count == sh.k_rem;
  if (g.size > 1) row_sync(g);  // the other blocks are done reading this histogram
  return done;
}

// The value written for selected position `pos` (>= 0) of the block's row.
template <TopKOutput kMode>
struct Emit {
  const int32_t* page_row;  // kPageTable: page-table row of the request, nullptr if none
  int64_t page_cols;
  int32_t offset;           // kRagged
  int* error_flag;

  __device__ __forceinline__ int32_t operator()(int32_t pos) const {
    if constexpr (kMode == TopKOutput::kIndices) {
      return pos;
    } else if constexpr (kMode == TopKOutput::kRagged) {
      return static_cast<int32_t>(static_cast<uint32_t>(pos) + static_cast<uint32_t>(offset));
    } else {
      if (page_row != nullptr && pos < page_cols) return page_row[pos];
      if (page_row != nullptr && error_flag != nullptr) atomicOr(error_flag, kBadPage);
      return -1;
    }
  }
};

// Page-table row of row b: the r with cu_seqlens_q[r] <= b < cu_seqlens_q[r + 1] (the last such
// r, so empty requests are skipped), or -1.
__device__ int64_t find_request(const FastTopKParams& p, int64_t b) {
  if (p.row_is_request) return b < p.requests ? b : -1;
  const int32_t* cu = p.cu_seqlens_q;
  if (p.requests <= 0 || cu[0] > b) return -1;
  int64_t lo = 0, hi = p.requests;  // cu[lo] <= b; answer in [lo, hi)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (cu[mid] <= b) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return b < cu[lo + 1] ? lo : -1;
}

template <TopKOutput kMode>
__global__ void __launch_bounds__(kThreads, 2) fast_topk_kernel(const FastTopKParams p, const int capacity) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  Shared& sh = *reinterpret_cast<Shared*>(smem_raw);
  uint32_t* cand_key = reinterpret_cast<uint32_t*>(smem_raw + sizeof(Shared));  // [capacity]
  int32_t* cand_pos = reinterpret_cast<int32_t*>(cand_key + capacity);        // [capacity]

  const RowGroup group = row_group();
  const int64_t b = blockIdx.x / group.size;
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  int32_t* out = p.out + b * kTopK;

  SGL_PDL_WAIT();
  // The window, clamped to [0, L) (a window outside it breaks the API contract).
  int64_t s = p.row_starts != nullptr ? p.row_starts[b * p.row_starts_stride] : 0;
  int64_t n = p.lengths[b];
  if (s < 0 || n < 0 || s + n > p.cols) {
    if (p.error_flag != nullptr && threadIdx.x == 0) atomicOr(p.error_flag, kBadWindow);
    s = min(max(s, int64_t{0}), p.cols);
    n = min(max(n, int64_t{0}), p.cols - s);
  }

  Emit<kMode> emit{nullptr, 0, 0, p.error_flag};
  if constexpr (kMode == TopKOutput::kPageTable) {
    if (threadIdx.x == 0) {
      const int64_t r = find_request(p, b);
      sh.request = static_cast<int>(r);
      if (r < 0 && p.error_flag != nullptr) atomicOr(p.error_flag, kBadRequest);
    }
    __syncthreads();
    if (sh.request >= 0) emit.page_row = p.page_table + sh.request * p.page_stride;
    emit.page_cols = p.page_cols;
  } else if constexpr (kMode == TopKOutput::kRagged) {
    emit.offset = p.offsets[b * p.offsets_stride];
  }

  if (n <= kTopK) {  // the same for every block of the row: none reaches a row barrier
    for (int i = group.rank * kThreads + threadIdx.x; i < kTopK; i += group.size * kThreads) {
      out[i] = i < n ? emit(i) : -1;
    }
    SGL_PDL_LAUNCH_DEPENDENTS();
    return;
  }

  Window w;
  w.x = p.score + b * p.score_stride + s;
  w.n = n;
  w.head = static_cast<int64_t>((reinterpret_cast<uintptr_t>(w.x) >> 2) & 3u);
  w.groups = (n + w.head + 3) >> 2;
  w.groups_per_warp = (w.groups + kWarps * group.size - 1) / (kWarps * group.size);
  w.first_warp = static_cast<int64_t>(group.rank) * kWarps;

  if (threadIdx.x == 0) {
    sh.prefix = 0;
    sh.mask = 0;
    sh.k_rem = kTopK;
    sh.n_cand = 0;
  }
  if (threadIdx.x < kWarps) {
    sh.warp_above[threadIdx.x] = 0;
    sh.warp_tie[threadIdx.x] = 0;
  }

  const auto window_keys = [&](auto&& f) {
    sweep(w, [&](const float(&v)[4], int64_t, uint32_t valid) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (valid >> e & 1u) f(order_key(v[e]));
      }
    });
  };
  bool done = radix_pass(sh, pass_shift(0), pass_bits(0), group, window_keys);
  if (!done && sh.bin_count <= capacity) {
    // Copy the bin of pass 1 to shared memory; count, per warp chunk, what lies above it.
    const uint32_t prefix = sh.prefix;
    const uint32_t mask = sh.mask;
    int above = 0;
    sweep(w, [&](const float(&v)[4], int64_t g, uint32_t valid) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (!(valid >> e & 1u)) continue;
        const uint32_t key = order_key(v[e]);
        const uint32_t masked = key & mask;
        if (masked > prefix) {
          ++above;
        } else if (masked == prefix) {
          const int slot = atomicAdd(&sh.n_cand, 1);
          if (slot < capacity) {
            cand_key[slot] = key;
            cand_pos[slot] = static_cast<int32_t>(4 * g - w.head + e);
          }
        }
      }
    });
    above = warp_reduce_sum(above);
    if (lane == 0) sh.warp_above[warp] = above;
    __syncthreads();
    const int n_cand = min(sh.n_cand, capacity);
    const auto cand_keys = [&](auto&& f) {
      for (int i = threadIdx.x; i < n_cand; i += kThreads) f(cand_key[i]);
    };
    for (int pass = 1; pass < kPasses && !done; ++pass) {
      done = radix_pass(sh, pass_shift(pass), pass_bits(pass), group, cand_keys);
    }
    // Candidates above / equal to the threshold, per owning warp chunk.
    const uint32_t t_prefix = sh.prefix;
    const uint32_t t_mask = sh.mask;
    for (int i = threadIdx.x; i < n_cand; i += kThreads) {
      const uint32_t masked = cand_key[i] & t_mask;
      if (masked >= t_prefix) {
        const int64_t owner = owner_warp(w, cand_pos[i]);
        if (owner >= 0 && owner < kWarps) atomicAdd(masked > t_prefix ? &sh.warp_above[owner] : &sh.warp_tie[owner], 1);
      }
    }
  } else {
    for (int pass = 1; pass < kPasses && !done; ++pass) {
      done = radix_pass(sh, pass_shift(pass), pass_bits(pass), group, window_keys);
    }
    const uint32_t prefix = sh.prefix;
    const uint32_t mask = sh.mask;
    int above = 0, tie = 0;
    sweep(w, [&](const float(&v)[4], int64_t, uint32_t valid) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (!(valid >> e & 1u)) continue;
        const uint32_t masked = order_key(v[e]) & mask;
        above += masked > prefix;
        tie += masked == prefix;
      }
    });
    above = warp_reduce_sum(above);
    tie = warp_reduce_sum(tie);
    if (lane == 0) {
      sh.warp_above[warp] = above;
      sh.warp_tie[warp] = tie;
    }
  }
  row_sync(group);

  // Write: everything above the threshold, and the first k_tie elements equal to it, in
  // position order. This warp's first slot is the number of elements above the threshold in
  // the chunks before it (every chunk of the blocks before this one, then this block's) plus
  // the ties among them, capped at k_tie.
  const uint32_t prefix = sh.prefix;
  const uint32_t mask = sh.mask;
  const int k_tie = sh.k_rem;
  int above_before = 0, ties_before = 0;
  if (lane < kWarps) {
    // lane l: chunk l of every earlier block (independent loads), and of this block if before us
    for (int q = 0; q < group.rank; ++q) {
      above_before += row_peer(sh.warp_above, group, q)[lane];
      ties_before += row_peer(sh.warp_tie, group, q)[lane];
    }
    if (lane < warp) {
      above_before += sh.warp_above[lane];
      ties_before += sh.warp_tie[lane];
    }
  }
  above_before = warp_reduce_sum(above_before);
  ties_before = warp_reduce_sum(ties_before);
  int slot = above_before + min(ties_before, k_tie);
  int tie_rank = ties_before;
  if (group.size > 1) row_sync(group);  // no block leaves while another reads its counts
  const uint32_t lanes_before = (1u << lane) - 1u;
  sweep(w, [&](const float(&v)[4], int64_t g, uint32_t valid) {
    bool above[4], tie[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const uint32_t masked = order_key(v[e]) & mask;
      const bool in = valid >> e & 1u;
      above[e] = in && masked > prefix;
      tie[e] = in && masked == prefix;
    }
    int ties_before, ties_total;
    warp_count(tie, lanes_before, ties_before, ties_total);
    bool take[4];
    int rank = tie_rank + ties_before;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      take[e] = above[e] || (tie[e] && rank < k_tie);
      rank += tie[e];
    }
    int taken_before, taken_total;
    warp_count(take, lanes_before, taken_before, taken_total);
    int dst = slot + taken_before;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      if (take[e]) {
        if (dst < kTopK) out[dst] = emit(static_cast<int32_t>(4 * g - w.head + e));
        ++dst;
      }
    }
    slot += taken_total;
    tie_rank += ties_total;
  });
  SGL_PDL_LAUNCH_DEPENDENTS();
}

}  // namespace

cudaError_t fast_topk_smem(int device, FastTopKSmem* out) {
  int optin = 0, per_sm = 0, reserved = 0;
  SGL_CUDA_TRY(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  SGL_CUDA_TRY(cudaDeviceGetAttribute(&per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  SGL_CUDA_TRY(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device));
  constexpr int64_t kFixed = (sizeof(Shared) + 15) / 16 * 16;
  constexpr int64_t kPerCandidate = sizeof(uint32_t) + sizeof(int32_t);
  // NOTE: two blocks per SM (the kernel's launch bounds): 2 x (113 KiB + 1 KiB reserved) on
  // sm90/sm100 (228 KiB per SM) gives ~13k candidates; sm80 (164 KiB) ~9k; sm86/89/120 ~5k.
  const int64_t two_per_sm = static_cast<int64_t>(per_sm) / 2 - reserved;
  out->min_bytes = kFixed + kMinCapacity * kPerCandidate;
  out->device_bytes = optin;
  out->bytes = std::max(out->min_bytes, std::min<int64_t>(optin, two_per_sm)) / 16 * 16;
  out->capacity = static_cast<int>((out->bytes - kFixed) / kPerCandidate);
  return cudaSuccess;
}

// Blocks per row. One, unless the rows are few and long (sm90+): a cluster of 2, 4 or 8
// blocks, doubled while each block keeps >= kMinChunk positions of an L-long row (8 blocks:
// >= 2 kMinChunk) and the grid stays within one block per SM (4 or 8 blocks: half the SMs).
// From an H200 sweep of B x L in {1, 4, 16, 32, 64} x {8192 ... 131072}, normal scores, us:
//   B = 1:  L = 16384 cs1 20.8 / cs2 16.3; L = 32768 cs2 23.2 / cs4 20.5; L = 65536 cs4 26.9 /
//           cs8 29.6; L = 131072 cs1 107.0 / cs4 39.2 / cs8 35.7 (torch.topk 69.9)
//   B = 16: L = 131072 cs4 42.4 / cs8 59.1 (128 blocks in clusters of 8 place badly)
//   B = 64: L = 131072 cs1 109.7 / cs2 81.6 / cs4 97.7
// SGL_KERNEL_TOPK_CLUSTER=1|2|4|8 forces a size (tests).
constexpr int64_t kMinChunk = 8192;

template <TopKOutput kMode>
int blocks_per_row(const FastTopKParams& p, int device, int64_t smem_bytes) {
  if (device_capability(device) < 90) return 1;  // cached per device (runtime.cc)
  // The kernel's cluster code exists only in sm90+ machine code (not in, say, sm80 PTX that the
  // driver compiled for this GPU): ask which one runs.
  static const int binary_version = [] {
    cudaFuncAttributes fa{};
    if (cudaFuncGetAttributes(&fa, fast_topk_kernel<kMode>) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return fa.binaryVersion;
  }();
  if (binary_version < 90) return 1;
  int cs = 0;
  if (const char* e = std::getenv("SGL_KERNEL_TOPK_CLUSTER"); e != nullptr && *e != '\0') {
    const int v = std::atoi(e);
    if (v == 1 || v == 2 || v == 4 || v == 8) cs = v;
  }
  if (cs == 0) {
    const int sms = device_sm_count(device);
    cs = 1;
    while (cs < 8) {
      const int next = 2 * cs;
      if (p.cols / next < (next == 8 ? 2 * kMinChunk : kMinChunk)) break;
      if (p.rows * next > (next == 2 ? sms : sms / 2)) break;
      cs = next;
    }
  }
  // A cluster must fit on the device (as partitioned when first asked: MPS, green contexts):
  // shrink until the occupancy query places at least one. Answers cached per device and size.
  constexpr int kMaxDevices = 64;
  static std::atomic<int8_t> fits[kMaxDevices][3];  // cs = 2, 4, 8: 0 unknown, 1 fits, 2 does not
  while (cs > 1) {
    const int slot = cs == 2 ? 0 : cs == 4 ? 1 : 2;
    if (device >= 0 && device < kMaxDevices) {
      const int8_t known = fits[device][slot].load(std::memory_order_relaxed);
      if (known == 1) break;
      if (known == 2) {
        cs /= 2;
        continue;
      }
    }
    cudaLaunchConfig_t config = {};
    cudaLaunchAttribute attrs[2];
    config.gridDim = dim3(static_cast<unsigned>(cs));
    config.blockDim = dim3(kThreads);
    config.dynamicSmemBytes = static_cast<size_t>(smem_bytes);
    set_launch_attrs(config, attrs, cs, false);
    int clusters = 0;
    // the query judges the launch's shared memory against the kernel's opt-in limit
    const bool ok = cudaFuncSetAttribute(fast_topk_kernel<kMode>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(smem_bytes)) == cudaSuccess &&
                    cudaOccupancyMaxActiveClusters(&clusters, fast_topk_kernel<kMode>, &config) == cudaSuccess &&
                    clusters > 0;
    if (!ok) (void)cudaGetLastError();
    if (device >= 0 && device < kMaxDevices) fits[device][slot].store(ok ? 1 : 2, std::memory_order_relaxed);
    if (ok) break;
    cs /= 2;
  }
  return cs;
}

template <TopKOutput kMode>
cudaError_t launch_mode(const FastTopKParams& p, const FastTopKSmem& smem, int device, cudaStream_t stream) {
  auto* kernel = fast_topk_kernel<kMode>;
  // The largest shared-memory carveout, so that two blocks of smem.bytes fit on an SM.
  SGL_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout,
                                    cudaSharedmemCarveoutMaxShared));
  const int cs = blocks_per_row<kMode>(p, device, smem.bytes);
  if (p.rows * cs > INT32_MAX) return cudaErrorInvalidValue;
  return launch_kernel_clustered(kernel, dim3(static_cast<uint32_t>(p.rows * cs)), dim3(kThreads),
                                 static_cast<size_t>(smem.bytes), stream, p.enable_pdl, cs, p, smem.capacity);
}

cudaError_t launch_fast_topk(TopKOutput mode, const FastTopKParams& p, cudaStream_t stream) {
  if (p.rows <= 0) return cudaSuccess;
  if (p.rows > INT32_MAX) return cudaErrorInvalidValue;
  int device = 0;
  SGL_CUDA_TRY(cudaGetDevice(&device));
  FastTopKSmem smem{};
  SGL_CUDA_TRY(fast_topk_smem(device, &smem));
  if (smem.bytes > smem.device_bytes) return cudaErrorInvalidConfiguration;
  switch (mode) {
    case TopKOutput::kIndices:
      return launch_mode<TopKOutput::kIndices>(p, smem, device, stream);
    case TopKOutput::kPageTable:
      return launch_mode<TopKOutput::kPageTable>(p, smem, device, stream);
    case TopKOutput::kRagged:
      return launch_mode<TopKOutput::kRagged>(p, smem, device, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sgl_kernel::top_k
