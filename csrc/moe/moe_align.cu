// SPDX-License-Identifier: Apache-2.0
// moe_align_block_size (API.md 2.4; contract in moe.h): a counting sort of the flat entries of
// topk_ids by bucket (expert id + 1), each bucket padded to a multiple of block_size, for the
// block-wise fused MoE GEMMs.
//
// One kernel launch, one block of kThreads threads or (sm90+, large calls) one thread-block
// cluster of up to 16 such blocks. Block r owns a contiguous chunk of the entries; warp w < R of
// it owns a contiguous piece of S entries of that chunk (S a multiple of 32), walked in rounds
// of 32 consecutive entries, one a lane. Shared memory holds a table of R rows of nb counters.
//   1. Count: every entry adds 1 to its bucket's counter in its warp's row (shared atomics;
//      counts do not depend on the order). Entries held in registers (up to kMaxItems a lane)
//      are read once; longer pieces are read again in step 4 ("streaming").
//   2. Each bucket's count of the block is the sum of its column; in a cluster the blocks read
//      each other's sums through distributed shared memory, so every block knows c_e and the
//      count of the blocks before it. A block-wide scan of ceil(c_e / block_size) gives the
//      padded offsets o_e (every block computes the same ones), and each row's counter becomes
//      the first output slot of that warp's entries of the bucket: o_e + the entries of the
//      bucket in earlier blocks and in earlier warps of this block.
//   3. expert_ids of every used block, the padding inside each bucket's segment and the tail
//      up to sorted_len (pad_sorted), cumsum and num_tokens_post_pad; spread over the blocks.
//   4. Place: per round, __match_any_sync groups the lanes of a bucket; a lane's slot is its
//      row counter + the lanes of its group below it; the group's lowest lane advances the
//      counter. No atomic decides a slot: the entries of a bucket come out in ascending flat
//      index order, on every path (one block or a cluster, registers or streaming), and the
//      same input gives the same bits. Order inside a bucket is the stable one.
// The ids are read with 4-byte (int32) or 8-byte (int64) loads, one entry a lane, so that each
// warp-wide load covers 32 consecutive entries in the round order the ranking needs (a
// 16-byte load would give a lane 4 consecutive entries, which breaks that order).
// Entries whose bucket falls outside [0, num_buckets) are counted nowhere and placed nowhere
// (and raise *bad_flag); every store is bounded by sorted_len / expert_ids_len, so no id value
// makes the kernel write outside its outputs. Positions are int32: the launcher refuses calls
// whose padded total could pass 2^31 - 1 (numel + min(numel, num_buckets) * (block_size - 1)).
//
// Without clusters (below sm90, a build of sm80 code running on sm90, or a partitioned GPU that
// cannot place one), every call runs on one block: correct at any size, but one SM reads the
// ids twice past kThreads * kMaxItems entries (see the NOTE at plan()).
// PDL: only shared memory is touched before SGL_PDL_WAIT(); the dependents are released once
// the ids' loads are issued (register path) or after the counting pass (streaming path). The
// scratch the kernel needs beyond cumsum lives in shared memory, so it allocates nothing and
// is CUDA-graph capturable.
#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <cstdlib>

#include <cooperative_groups.h>

#include "moe/moe.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/runtime.h"

namespace sgl_kernel::moe {

namespace {
namespace align {

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kMaxRows = kWarps;  // warps that own entries (rows of the counter table)
constexpr int kMaxItems = 16;     // entries a lane holds in registers; longer pieces stream
constexpr int kBatch = 8;         // streaming: loads a lane has in flight
constexpr int kMaxCluster = 16;
// Buckets a thread owns in the per-bucket steps (bucket e = tid + j * kThreads).
constexpr int kBucketsPerThread = (kMaxAlignBuckets + kThreads - 1) / kThreads;
// Shared memory of a block at most: within the opt-in limit of every supported arch (sm86 /
// sm89 allow 99 KB a block). The counter table gets what the per-bucket arrays leave.
constexpr int64_t kSmemBudget = 96 * 1024;
constexpr int kScanInts = 32;
// Match key of a lane without a placeable entry: unique per lane, never a bucket.
constexpr uint32_t kNoBucket = 0x80000000u;

static_assert(kMaxAlignBuckets < (1 << 16), "buckets fit the match keys below kNoBucket");
static_assert(kBucketsPerThread * kThreads >= kMaxAlignBuckets, "every bucket has an owner thread");

struct AlignShape {
  int64_t warp_elems;  // S: entries a warp owns (a multiple of 32)
  int rows;            // R: warps of a block that own entries, 1..kMaxRows
  int cluster;         // blocks (the grid: one cluster when > 1)
};

// Shared memory (int32) of a block: rows[R][nb] | tot[nb] | cnt[nb] | ob[nb + 1] | scan[32].
__host__ __device__ constexpr int64_t smem_ints(int rows, int nb) {
  return static_cast<int64_t>(rows) * nb + 3 * static_cast<int64_t>(nb) + 1 + kScanInts;
}

// Bucket of flat entry value v (v + 1), or -1 when it falls outside [0, nb): compared in the
// id's own type, so no value (INT64_MAX included) overflows.
template <typename TId>
__device__ __forceinline__ int bucket_of(TId v, int nb) {
  return (v >= TId(-1) && v <= TId(nb - 2)) ? static_cast<int>(v) + 1 : -1;
}

// One round of the placement by a whole warp: lane entry `i` of bucket `b` (-1: none) gets
// slot row[b] + (lanes of bucket b below it); the lowest such lane advances row[b].
__device__ __forceinline__ void place_round(int* row,                    // [nb] shared: this warp's next slots
                                            int b, int i, int lane,
                                            int32_t* __restrict__ out,   // [sorted_len]
                                            int64_t sorted_len) {
  const uint32_t key = b >= 0 ? static_cast<uint32_t>(b) : (kNoBucket | static_cast<uint32_t>(lane));
  const uint32_t peers = __match_any_sync(0xffffffffu, key);
  int first = 0;
  if (b >= 0) first = row[b];
  __syncwarp();  // every lane of the group has read row[b] before it moves
  if (b >= 0) {
    const int below = __popc(peers & ((1u << lane) - 1u));
    if (below == 0) row[b] = first + __popc(peers);
    const int64_t pos = static_cast<int64_t>(first) + below;
    if (pos < sorted_len) out[pos] = i;
  }
  __syncwarp();  // the next round reads the advanced counters
}

// ptr[start, end) = v; 16-byte stores from the first 16-byte boundary; thread g of G.
__device__ __forceinline__ void fill_range(int32_t* __restrict__ ptr,  // [>= end], 4-byte aligned
                                           int64_t start, int64_t end, int32_t v, int64_t g, int64_t G) {
  if (start >= end) return;
  // int32 tensors are 4-byte aligned: 0-3 elements to the next 16-byte boundary
  const uintptr_t misalign = reinterpret_cast<uintptr_t>(ptr + start) & 15;
  const int64_t head = std::min<int64_t>(end - start, static_cast<int64_t>((16 - misalign) & 15) / 4);
  const int64_t vstart = start + head;
  const int64_t nvec = (end - vstart) / 4;
  const int64_t vend = vstart + 4 * nvec;
  if (g < head) ptr[start + g] = v;
  const int4 vv = make_int4(v, v, v, v);
  for (int64_t k = g; k < nvec; k += G) *reinterpret_cast<int4*>(ptr + vstart + 4 * k) = vv;
  if (g < end - vend) ptr[vend + g] = v;
}

// kItems > 0: a lane holds its kItems entries in registers (S = 32 * kItems); 0: streaming.
template <typename TId, int kItems>
__global__ void __launch_bounds__(kThreads, 1) moe_align_kernel(const MoeAlignParams p, const AlignShape s) {
  extern __shared__ int smem[];
  const int nb = p.num_buckets;
  const int R = s.rows;
  int* rows = smem;         // [R][nb]: per-warp counts, then per-warp next slots
  int* tot = rows + R * nb;  // [nb]: this block's count of each bucket (read by the cluster)
  int* cnt = tot + nb;      // [nb]: c_e of the whole call
  int* ob = cnt + nb;       // [nb + 1]: o_e / block_size; ob[nb] = padded total / block_size
  int* scan = ob + nb + 1;  // [kScanInts]
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int warp = tid >> 5;
  const int rank = blockIdx.x;  // the grid is one cluster (or one block)
  const bool clustered = s.cluster > 1;
  const int bs = p.block_size;
  const int n = static_cast<int>(p.numel);

  const TId* __restrict__ ids = static_cast<const TId*>(p.topk_ids);  // [numel]
  int32_t* __restrict__ sorted_ids = p.sorted_token_ids;               // [sorted_len]
  int32_t* __restrict__ expert_ids = p.expert_ids;                     // [expert_ids_len]

  // This warp's entries [ws, we); warp-uniform.
  const int64_t wstart = (static_cast<int64_t>(rank) * R + warp) * s.warp_elems;
  const int ws = static_cast<int>(std::min<int64_t>(wstart, n));
  const int we = static_cast<int>(std::min<int64_t>(wstart + s.warp_elems, n));
  const bool owner = warp < R && ws < we;
  int* row = rows + (warp < R ? warp : 0) * nb;

  for (int k = tid; k < R * nb; k += kThreads) rows[k] = 0;  // shared memory only: before the wait
  SGL_PDL_WAIT();  // before any global read or write

  // 1. Count.
  int held[kItems > 0 ? kItems : 1];  // buckets of the lane's entries (-1: none or dropped)
  bool bad = false;
  if constexpr (kItems > 0) {
    TId v[kItems];
    if (owner) {  // issued before the barrier that publishes the zeroed table
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int i = ws + k * 32 + lane;
        if (i < we) v[k] = ids[i];
      }
    }
    SGL_PDL_LAUNCH_DEPENDENTS();  // loads issued
    __syncthreads();
    if (owner) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) {
        const int i = ws + k * 32 + lane;
        int b = -1;
        if (i < we) {
          b = bucket_of(v[k], nb);
          bad |= b < 0;
        }
        held[k] = b;
        if (b >= 0) atomicAdd(&row[b], 1);
      }
    }
  } else {
    __syncthreads();
    if (owner) {
      for (int64_t base = ws; base < we; base += 32 * kBatch) {
        TId v[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int64_t i = base + u * 32 + lane;
          if (i < we) v[u] = ids[i];
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int64_t i = base + u * 32 + lane;
          if (i < we) {
            const int b = bucket_of(v[u], nb);
            bad |= b < 0;
            if (b >= 0) atomicAdd(&row[b], 1);
          }
        }
      }
    }
    SGL_PDL_LAUNCH_DEPENDENTS();
  }
  if (owner && p.bad_flag != nullptr && __any_sync(0xffffffffu, bad) && lane == 0) *p.bad_flag = 1;
  __syncthreads();

  // 2. Counts, offsets and each row's first slots.
  int before[kBucketsPerThread];  // entries of bucket e in the cluster's earlier blocks
#pragma unroll
  for (int j = 0; j < kBucketsPerThread; ++j) {
    const int e = tid + j * kThreads;
    before[j] = 0;
    if (e < nb) {
      int t = 0;
      for (int w = 0; w < R; ++w) t += rows[w * nb + e];
      (clustered ? tot : cnt)[e] = t;
    }
  }
  if (clustered) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();  // every block's tot[] written
#pragma unroll
    for (int j = 0; j < kBucketsPerThread; ++j) {
      const int e = tid + j * kThreads;
      if (e < nb) {
        int all = 0;
        for (int q = 0; q < s.cluster; ++q) {
          if (q == rank) before[j] = all;
          all += *cluster.map_shared_rank(tot + e, q);
        }
        cnt[e] = all;
      }
    }
    cluster.barrier_arrive();  // done reading the other blocks (the wait is at the end)
#else
    __trap();  // no clusters below sm90: the launcher never asks for one there
#endif
  }
  __syncthreads();

  {  // block-wide exclusive scan of ceil(c_e / bs) over e: thread t owns buckets [e0, e1)
    const int per = (nb + kThreads - 1) / kThreads;
    const int e0 = std::min(tid * per, nb);
    const int e1 = std::min(e0 + per, nb);
    int local = 0;
    for (int e = e0; e < e1; ++e) local += (cnt[e] + bs - 1) / bs;
    int x = local;
#pragma unroll
    for (int off = 1; off < 32; off *= 2) {
      const int y = __shfl_up_sync(0xffffffffu, x, off);
      if (lane >= off) x += y;
    }
    if (lane == 31) scan[warp] = x;
    __syncthreads();
    if (warp == 0) {
      int w = scan[lane];
#pragma unroll
      for (int off = 1; off < 32; off *= 2) {
        const int y = __shfl_up_sync(0xffffffffu, w, off);
        if (lane >= off) w += y;
      }
      scan[lane] = w;
    }
    __syncthreads();
    int at = x - local + (warp > 0 ? scan[warp - 1] : 0);
    for (int e = e0; e < e1; ++e) {
      ob[e] = at;
      at += (cnt[e] + bs - 1) / bs;
    }
    if (tid == kThreads - 1) ob[nb] = at;
  }
  __syncthreads();

#pragma unroll
  for (int j = 0; j < kBucketsPerThread; ++j) {
    const int e = tid + j * kThreads;
    if (e < nb) {
      int next = ob[e] * bs + before[j];
      for (int w = 0; w < R; ++w) {
        const int c = rows[w * nb + e];
        rows[w * nb + e] = next;
        next += c;
      }
    }
  }

  // 3. expert_ids, padding, cumsum, num_tokens_post_pad (no slot of step 4 is touched).
  const int64_t sorted_len = p.sorted_len;
  const int32_t fill = static_cast<int32_t>(n);
  for (int e = rank * kWarps + warp; e < nb; e += s.cluster * kWarps) {  // a warp a bucket
    const int64_t b0 = ob[e];
    const int64_t b1 = ob[e + 1];
    for (int64_t j = b0 + lane; j < std::min(b1, p.expert_ids_len); j += 32) expert_ids[j] = e - 1;
    if (p.pad_sorted) {
      const int64_t q1 = std::min(b1 * bs, sorted_len);
      for (int64_t q = b0 * bs + cnt[e] + lane; q < q1; q += 32) sorted_ids[q] = fill;
    }
  }
  const int64_t total = static_cast<int64_t>(ob[nb]) * bs;
  if (p.pad_sorted) {
    fill_range(sorted_ids, total, sorted_len, fill, static_cast<int64_t>(rank) * kThreads + tid,
               static_cast<int64_t>(s.cluster) * kThreads);
  }
  if (rank == 0) {
    for (int e = tid; e <= nb; e += kThreads) p.cumsum[e] = ob[e] * bs;
    if (tid == 0) p.num_tokens_post_pad[0] = static_cast<int32_t>(total);
  }
  __syncthreads();  // every row's first slots written

  // 4. Place.
  if (owner) {
    if constexpr (kItems > 0) {
#pragma unroll
      for (int k = 0; k < kItems; ++k) place_round(row, held[k], ws + k * 32 + lane, lane, sorted_ids, sorted_len);
    } else {
      for (int64_t base = ws; base < we; base += 32 * kBatch) {
        TId v[kBatch];
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int64_t i = base + u * 32 + lane;
          if (i < we) v[u] = ids[i];
        }
#pragma unroll
        for (int u = 0; u < kBatch; ++u) {
          const int64_t i = base + u * 32 + lane;
          const int b = i < we ? bucket_of(v[u], nb) : -1;
          place_round(row, b, static_cast<int>(i), lane, sorted_ids, sorted_len);
        }
      }
    }
  }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if (clustered) cooperative_groups::this_cluster().barrier_wait();  // no block leaves while read
#endif
}

// ---------------------------------------------------------------------------------------------
// Host side.

// Rows of counters that fit the shared-memory budget beside the per-bucket arrays.
int max_rows(int nb) {
  const int64_t free_ints = kSmemBudget / 4 - smem_ints(0, nb);
  return static_cast<int>(std::clamp<int64_t>(free_ints / nb, 1, kMaxRows));
}

int pow2_ceil(int64_t x) {
  int v = 1;
  while (v < x && v < (1 << 30)) v *= 2;
  return v;
}

// The largest cluster (16, 8, 4 or 2 blocks; 1 = none) that kKernel runs on the current device
// with kThreads threads and kSmemBudget bytes of shared memory a block (the most any call asks),
// as partitioned when first asked (MPS, green contexts). Cached per device and kernel.
template <auto kKernel>
int cluster_limit(int device) {
  constexpr int kMaxDevices = 64;
  static std::atomic<int8_t> known[kMaxDevices];  // 0: not asked; else the size
  const bool cacheable = device >= 0 && device < kMaxDevices;
  if (cacheable) {
    const int8_t k = known[device].load(std::memory_order_relaxed);
    if (k != 0) return k;
  }
  int result = 1;
  // The cluster code exists only in sm90+ machine code (not in, say, sm80 PTX that the driver
  // compiled for this GPU): the arch of the code that runs, and of the PTX it came from.
  cudaFuncAttributes fa{};
  if (device_capability(device) >= 90 && cudaFuncGetAttributes(&fa, kKernel) == cudaSuccess &&
      std::min(fa.binaryVersion, fa.ptxVersion) >= 90 &&
      cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSmemBudget)) ==
          cudaSuccess) {
    for (int cs = kMaxCluster; cs >= 2; cs /= 2) {
      if (cs > 8 && cudaFuncSetAttribute(kKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) != cudaSuccess) {
        (void)cudaGetLastError();
        continue;
      }
      cudaLaunchConfig_t config = {};
      cudaLaunchAttribute attrs[2];
      config.gridDim = dim3(static_cast<unsigned>(cs));
      config.blockDim = dim3(kThreads);
      config.dynamicSmemBytes = static_cast<size_t>(kSmemBudget);
      set_launch_attrs(config, attrs, cs, false);
      int clusters = 0;
      if (cudaOccupancyMaxActiveClusters(&clusters, kKernel, &config) == cudaSuccess && clusters > 0) {
        result = cs;
        break;
      }
      (void)cudaGetLastError();
    }
  } else {
    (void)cudaGetLastError();
  }
  if (cacheable) known[device].store(static_cast<int8_t>(result), std::memory_order_relaxed);
  return result;
}

// NOTE (untuned: no GPU when written): one block up to kOneBlockElems entries (decode: one
// entry a thread up to 1024, no cluster launch, whose cost per_tensor_quant.cu measured at
// ~0.45 us); past it the smallest power-of-two cluster giving each block at most
// kOneBlockElems entries, up to the device's limit. 16 blocks of 1024 threads hold 16 entries a
// lane in registers: 262144 entries (T = 32768, topk 8) before the streaming path. Without
// clusters one block streams every call past 16384 entries.
constexpr int64_t kOneBlockElems = 4096;

struct Plan {
  AlignShape shape;
  int items;  // kItems of the kernel (0: streaming)
};

Plan plan(int64_t n, int nb, int cluster_max) {
  const int r_cap = max_rows(nb);
  int cs = 1;
  if (cluster_max > 1 && n > kOneBlockElems) {
    cs = std::min(cluster_max, pow2_ceil((n + kOneBlockElems - 1) / kOneBlockElems));
  }
  const int64_t per_block = std::max<int64_t>(1, (n + cs - 1) / cs);
  int rows = static_cast<int>(std::clamp<int64_t>((per_block + 31) / 32, 1, r_cap));
  const int64_t per_lane = (per_block + 32 * rows - 1) / (32 * rows);
  Plan out{};
  if (per_lane <= kMaxItems) {
    out.items = pow2_ceil(per_lane);
    out.shape.warp_elems = 32 * out.items;
  } else {
    out.items = 0;
    out.shape.warp_elems = 32 * per_lane;
  }
  rows = static_cast<int>(std::clamp<int64_t>((per_block + out.shape.warp_elems - 1) / out.shape.warp_elems, 1, r_cap));
  out.shape.rows = rows;
  const int64_t block_elems = rows * out.shape.warp_elems;
  out.shape.cluster = static_cast<int>(std::max<int64_t>(1, (n + block_elems - 1) / block_elems));
  return out;
}

template <typename TId, int kItems>
cudaError_t launch_items(const MoeAlignParams& p, const AlignShape& shape, cudaStream_t stream) {
  const auto kernel = moe_align_kernel<TId, kItems>;
  const size_t smem = static_cast<size_t>(4 * smem_ints(shape.rows, p.num_buckets));
  if (shape.cluster > 1) {
    return launch_kernel_clustered(kernel, dim3(static_cast<unsigned>(shape.cluster)), dim3(kThreads), smem, stream,
                                   p.enable_pdl, shape.cluster, p, shape);
  }
  return launch_kernel(kernel, dim3(1), dim3(kThreads), smem, stream, p.enable_pdl, p, shape);
}

// cluster_limit of the kernel instance that takes `items` (its first call per device also sets
// that instance's shared-memory and non-portable-cluster attributes).
template <typename TId>
int instance_cluster_limit(int items, int device) {
  switch (items) {
    case 1: return cluster_limit<moe_align_kernel<TId, 1>>(device);
    case 2: return cluster_limit<moe_align_kernel<TId, 2>>(device);
    case 4: return cluster_limit<moe_align_kernel<TId, 4>>(device);
    case 8: return cluster_limit<moe_align_kernel<TId, 8>>(device);
    case 16: return cluster_limit<moe_align_kernel<TId, 16>>(device);
    default: return cluster_limit<moe_align_kernel<TId, 0>>(device);
  }
}

// SGL_KERNEL_MOE_ALIGN_CLUSTER=1|2|4|8|16 caps the cluster size (tests: 1 runs every call on one
// block, streaming past 16384 entries); the device's limit still applies.
int env_cluster_cap() {
  const char* e = std::getenv("SGL_KERNEL_MOE_ALIGN_CLUSTER");
  if (e == nullptr || *e == '\0') return kMaxCluster;
  const int v = std::atoi(e);
  return (v == 1 || v == 2 || v == 4 || v == 8 || v == 16) ? v : kMaxCluster;
}

template <typename TId>
cudaError_t launch_typed(const MoeAlignParams& p, cudaStream_t stream) {
  Plan pl = plan(p.numel, p.num_buckets, 1);
  if (p.numel > kOneBlockElems) {
    int device = 0;
    SGL_CUDA_TRY(cudaGetDevice(&device));
    const int cap = env_cluster_cap();
    // The widest register instance answers first (the instances share threads and shared memory);
    // the chosen one is asked too, and a refusal falls back to one block.
    if (cap > 1) {
      pl = plan(p.numel, p.num_buckets, std::min(cap, instance_cluster_limit<TId>(kMaxItems, device)));
      if (pl.shape.cluster > 1 && instance_cluster_limit<TId>(pl.items, device) < pl.shape.cluster) {
        pl = plan(p.numel, p.num_buckets, 1);
      }
    }
  }
  switch (pl.items) {
    case 1: return launch_items<TId, 1>(p, pl.shape, stream);
    case 2: return launch_items<TId, 2>(p, pl.shape, stream);
    case 4: return launch_items<TId, 4>(p, pl.shape, stream);
    case 8: return launch_items<TId, 8>(p, pl.shape, stream);
    case 16: return launch_items<TId, 16>(p, pl.shape, stream);
    default: return launch_items<TId, 0>(p, pl.shape, stream);
  }
}

}  // namespace align
}  // namespace

cudaError_t launch_moe_align(const MoeAlignParams& p, cudaStream_t stream) {
  if (p.numel < 0 || p.numel > INT32_MAX || p.num_buckets < 1 || p.num_buckets > kMaxAlignBuckets ||
      p.block_size < 1 || p.sorted_len < 0 || p.expert_ids_len < 0) {
    return cudaErrorInvalidValue;
  }
  // Every position (padded total included) must fit int32: num_tokens_post_pad is int32.
  const int64_t bound = p.numel + std::min<int64_t>(p.numel, p.num_buckets) * (p.block_size - 1);
  if (bound > INT32_MAX) return cudaErrorInvalidValue;
  // numel == 0 still launches: num_tokens_post_pad = 0, cumsum = 0, the padding (if asked).
  return p.ids_int64 ? align::launch_typed<int64_t>(p, stream) : align::launch_typed<int32_t>(p, stream);
}

}  // namespace sgl_kernel::moe
