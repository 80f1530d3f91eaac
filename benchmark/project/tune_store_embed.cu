// SPDX-License-Identifier: Apache-2.0
// Sweep of store_kv_cache (k/v rows scattered into cache slots) and embedding_lookup (weight
// rows gathered by index), standalone (no torch): the production launchers
// (csrc/project/store_kv_cache.cu and embedding_lookup.cu, included below) and candidate launch
// shapes of their kernels, against the kernels they replaced ("old", from git: each row copied
// by a power-of-two group of up to 256 threads, row_copy.cuh's row_tiling), which are the
// baseline rows.
//
//   nvcc -O3 -std=c++20 -arch=sm_90a --expt-relaxed-constexpr -Iinclude -Icsrc -o /tmp/tune_se \
//     benchmark/project/tune_store_embed.cu csrc/common/runtime.cc
//   /tmp/tune_se    # estimated 20-40 s on an H200; exit status 1 on any mismatch
//
// Options: --op store|embed (default both), --no-pdl, --check-only, --streams N
// (tune_common::extra_streams first: the bench's process state), --short (embed: rows of 128 B
// to 4 KB instead of the bench's shapes: shuffle_rows' fp32 scale rows of 224 B, session 43).
//
// Check (every variant, before any timing): outputs byte for byte equal to old's, and old's
// equal to a naive byte-per-thread reference. Random bytes as data; every output buffer starts
// as the same random "poison" bytes with guard bytes before and after it, and the whole
// allocation is compared, so a byte written that old leaves untouched (out-of-range slots, row
// padding of a pitched cache, guards) fails too. store_kv_cache: distinct random slots with
// out-of-range ones (-1, num_slots, +-2^31/2^63 extremes), int64 and int32 locations, pitched k
// and caches, pointers misaligned to 8, 2 and 1 bytes (narrower chunk paths), n from 1 to 65536
// (both size classes of the launcher). embedding_lookup: plain gathers and vocab-parallel
// shards, indices out of range on both sides (and the int extremes), int64 and int32, strided
// index layouts (2 and 3 merged dims), pitched weights, rows of 132/194/200 bytes (4-, 2- and
// 8-byte chunks), T from 1 to 20000.
//
// Timing follows benchmark/harness.py, so the numbers line up with benchmark/RESULTS.md: the
// median per-call time over R replays of a CUDA graph of N back-to-back launches (PDL on unless
// --no-pdl, as the bindings launch on sm90). A call whose bytes fit four times in L2 reuses one
// input set ("hot"); larger calls rotate among K sets with K * bytes >= 4 * L2 ("rotK"). Shapes
// and byte counts as bench_store_kv_cache.py (bf16 [n, H, D] rows, caches of max(4n, 4096)
// slots shared by the sets, n distinct random int64 slots; bytes 4 * n * row) and
// bench_embedding_lookup.py (V = 128256 rows, int64 indices uniform over V; "tp" = the shard
// of rank 3 of 8, rows 48096..64127; bytes = out + rows read (expected) + 8 T).
//
// Variants. store: "old"; "prod" = launch_store_kv_cache (shape "kv t256"; before session 39
// "v1 t128 nc" up to 64 KB of k and v); "v1 t128 nc" = one 16-byte chunk of k or of v per
// thread, 128-thread blocks, read-only loads; "kv t256" = the same chunk of k and of v per
// thread (one location load for both), 256-thread blocks, plain loads; "kv t256 nc" = the same
// with read-only loads; "kv2 t256" = 2 chunks of k and 2 of v per thread (old's loads per
// thread on the flat grid).
// embed: "old"; "prod" = launch_embedding_lookup ("v1 t128 nc" up to 256 KB of output, "pc
// v2 t128" above; "v2 t256" before session 39); "v1 t128 nc" = one chunk per thread, 128-thread
// blocks, read-only weight loads; "v1 t128" = the same with plain loads (torch.compile's
// Triton kernel has this shape); "v2 t256" = 2 chunks of a row per thread, 256-thread blocks,
// plain loads; "v4 t256" = 4 chunks per thread (old's loads per thread on the flat grid).
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "project/embedding_lookup.cu"
#include "sgl_kernel/runtime.h"
#include "project/store_kv_cache.cu"
#include "../tune_common.cuh"

// ---------------------------------------------------------------------------------------
// The previous kernels (csrc/project/*.cu before the rewrite), in namespaces of their own.

namespace old_store_kv {

using namespace sgl_kernel;
using namespace sgl_kernel::project;

constexpr int kThreads = 256;
// Chunks per thread and row per pass; with k and v that is 4 loads in flight per thread.
constexpr int kUnroll = 2;

template <int kBytes, typename TLoc>
__global__ void __launch_bounds__(kThreads) store_kv_cache_kernel(StoreKvCacheParams p, int log2_threads_per_row) {
  using C = Chunk<kBytes>;
  SGL_PDL_WAIT();
  const int64_t threads_per_row = int64_t{1} << log2_threads_per_row;
  const int64_t rows_per_block = kThreads >> log2_threads_per_row;
  const int64_t lane = threadIdx.x & (threads_per_row - 1);
  const int64_t chunks = p.row_bytes / kBytes;
  const TLoc* __restrict__ out_loc = static_cast<const TLoc*>(p.out_loc);  // [n]
  const int64_t row_step = static_cast<int64_t>(gridDim.x) * rows_per_block;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + (threadIdx.x >> log2_threads_per_row);
       row < p.n; row += row_step) {
    const int64_t slot = static_cast<int64_t>(out_loc[row]);
    const bool in_range = slot >= 0 && slot < p.num_slots;
    const C* k = reinterpret_cast<const C*>(static_cast<const char*>(p.k) + row * p.src_stride);
    const C* v = reinterpret_cast<const C*>(static_cast<const char*>(p.v) + row * p.src_stride);
    // Only dereferenced when in_range.
    const int64_t dst_offset = in_range ? slot * p.cache_stride : 0;
    C* k_dst = reinterpret_cast<C*>(static_cast<char*>(p.k_cache) + dst_offset);
    C* v_dst = reinterpret_cast<C*>(static_cast<char*>(p.v_cache) + dst_offset);
    for (int64_t c0 = lane; c0 < chunks; c0 += threads_per_row * kUnroll) {
      C a[kUnroll], b[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * threads_per_row;
        if (c < chunks) {
          a[u] = k[c];
          b[u] = v[c];
        }
      }
      if (in_range) {
#pragma unroll
        for (int u = 0; u < kUnroll; ++u) {
          const int64_t c = c0 + u * threads_per_row;
          if (c < chunks) {
            k_dst[c] = a[u];
            v_dst[c] = b[u];
          }
        }
      }
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

cudaError_t launch_store_kv_cache(const StoreKvCacheParams& p, cudaStream_t stream) {
  if (p.n == 0 || p.row_bytes == 0) return cudaSuccess;
  const int bytes = chunk_bytes({address(p.k_cache), address(p.v_cache), address(p.k), address(p.v),
                                 static_cast<uint64_t>(p.cache_stride), static_cast<uint64_t>(p.src_stride),
                                 static_cast<uint64_t>(p.row_bytes)});
  return dispatch_row_copy(bytes, p.loc_int64, [&](auto width, auto index) {
    constexpr int kBytes = decltype(width)::value;
    using TIdx = typename decltype(index)::type;
    const RowTiling t = row_tiling(p.n, p.row_bytes / kBytes, kUnroll, kThreads);
    return launch_kernel(store_kv_cache_kernel<kBytes, TIdx>, t.grid, dim3(kThreads), 0, stream, p.enable_pdl, p,
                         t.log2_threads_per_row);
  });
}

}  // namespace old_store_kv

namespace old_embedding {

using namespace sgl_kernel;
using namespace sgl_kernel::project;

constexpr int kThreads = 256;
// Chunks per thread and row per pass (loads in flight per thread).
constexpr int kUnroll = 4;

template <int kBytes, typename TIdx>
__global__ void __launch_bounds__(kThreads)
    embedding_lookup_kernel(EmbeddingLookupParams p, int log2_threads_per_row) {
  using C = Chunk<kBytes>;
  SGL_PDL_WAIT();
  const int64_t threads_per_row = int64_t{1} << log2_threads_per_row;
  const int64_t rows_per_block = kThreads >> log2_threads_per_row;
  const int64_t lane = threadIdx.x & (threads_per_row - 1);
  const int64_t chunks = p.row_bytes / kBytes;
  const TIdx* __restrict__ indices = static_cast<const TIdx*>(p.indices);  // see idx_layout
  const int64_t row_step = static_cast<int64_t>(gridDim.x) * rows_per_block;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + (threadIdx.x >> log2_threads_per_row);
       row < p.num_indices; row += row_step) {
    const int64_t index = static_cast<int64_t>(indices[strided_offset(p.idx_layout, row)]);
    // index - vocab_start cannot overflow once index >= vocab_start >= 0.
    const bool valid = index >= p.vocab_start && index - p.vocab_start < p.num_valid;
    const int64_t src_offset = valid ? (index - p.vocab_start) * p.weight_stride : 0;
    const C* src = reinterpret_cast<const C*>(static_cast<const char*>(p.weight) + src_offset);
    C* dst = reinterpret_cast<C*>(static_cast<char*>(p.out) + row * p.row_bytes);
    for (int64_t c0 = lane; c0 < chunks; c0 += threads_per_row * kUnroll) {
      C a[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * threads_per_row;
        a[u] = C{};
        if (valid && c < chunks) a[u] = src[c];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * threads_per_row;
        if (c < chunks) dst[c] = a[u];
      }
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

cudaError_t launch_embedding_lookup(const EmbeddingLookupParams& p, cudaStream_t stream) {
  if (p.num_indices == 0 || p.row_bytes == 0) return cudaSuccess;
  const int bytes = chunk_bytes({address(p.out), address(p.weight), static_cast<uint64_t>(p.weight_stride),
                                 static_cast<uint64_t>(p.row_bytes)});
  return dispatch_row_copy(bytes, p.indices_int64, [&](auto width, auto index) {
    constexpr int kBytes = decltype(width)::value;
    using TIdx = typename decltype(index)::type;
    const RowTiling t = row_tiling(p.num_indices, p.row_bytes / kBytes, kUnroll, kThreads);
    return launch_kernel(embedding_lookup_kernel<kBytes, TIdx>, t.grid, dim3(kThreads), 0, stream, p.enable_pdl, p,
                         t.log2_threads_per_row);
  });
}

}  // namespace old_embedding

namespace tune {

using namespace sgl_kernel;
using namespace sgl_kernel::project;
using LP = LoadPolicy;
using SP = StorePolicy;

using tune_common::g_ctx;  // what was running, for CK's error message
using tune_common::median;
using tune_common::parse_list;

// ---------------------------------------------------------------------------------------
// Variants: production kernels at one launch shape for every call (the width and index type
// dispatched as the production launcher does).

using StoreFn = cudaError_t (*)(const StoreKvCacheParams&, cudaStream_t);
using EmbedFn = cudaError_t (*)(const EmbeddingLookupParams&, cudaStream_t);

// The production launchers' dispatch of a call: nothing to do for an empty one, else f(width,
// index) with the chunk width and the index type as integral_constant / type tags.
template <typename F>
cudaError_t with_store_width(const StoreKvCacheParams& p, F&& f) {
  if (p.n == 0 || p.row_bytes == 0) return cudaSuccess;
  const int bytes = chunk_bytes({address(p.k_cache), address(p.v_cache), address(p.k), address(p.v),
                                 static_cast<uint64_t>(p.cache_stride), static_cast<uint64_t>(p.src_stride),
                                 static_cast<uint64_t>(p.row_bytes)});
  return dispatch_row_copy(bytes, p.loc_int64, f);
}

template <typename F>
cudaError_t with_embed_width(const EmbeddingLookupParams& p, F&& f) {
  if (p.num_indices == 0 || p.row_bytes == 0) return cudaSuccess;
  const int bytes = chunk_bytes({address(p.out), address(p.weight), static_cast<uint64_t>(p.weight_stride),
                                 static_cast<uint64_t>(p.row_bytes)});
  return dispatch_row_copy(bytes, p.indices_int64, f);
}

template <int kTensors, int kVpt, int kThreads, LP kLoad, SP kStore = SP::kDefault>
cudaError_t store_shape(const StoreKvCacheParams& p, cudaStream_t stream) {
  return with_store_width(p, [&](auto width, auto index) {
    return store_kv::launch_shape<decltype(width)::value, typename decltype(index)::type, kTensors, kVpt, kThreads,
                                  kLoad, kStore>(p, stream);
  });
}

template <int kVpt, int kThreads, LP kLoad, SP kStore = SP::kDefault, int kPdl = 3, bool kIdxPlain = false>
cudaError_t embed_shape(const EmbeddingLookupParams& p, cudaStream_t stream) {
  return with_embed_width(p, [&](auto width, auto index) {
    return embedding::launch_shape<decltype(width)::value, typename decltype(index)::type, kVpt, kThreads, kLoad,
                                   kStore, kPdl, kIdxPlain>(p, stream);
  });
}

// Session 39: a grid of resident blocks looping over the flat grid's items ("loop vV tT bB":
// V chunks an item, T threads a block, B blocks an SM), each thread issuing the next item's
// index and weight loads before it stores the current item: no block turnover, and a
// thread's loads of item i + 1 in flight while item i's stores go out. The same items, bytes and
// zero rows as embedding_lookup_kernel.
template <int kBytes, typename TIdx, int kVpt, int kThreads>
__global__ void __launch_bounds__(kThreads)
    embed_loop_kernel(const EmbeddingLookupParams p, const FastDivmod cols, const uint32_t chunks,
                      const uint32_t total, const int64_t row0) {
  using C = Chunk<kBytes>;
  const uint32_t stride = gridDim.x * kThreads;
  uint32_t i = blockIdx.x * kThreads + threadIdx.x;
  SGL_PDL_WAIT();
  SGL_PDL_LAUNCH_DEPENDENTS();
  if (i >= total) return;
  const TIdx* __restrict__ indices = static_cast<const TIdx*>(p.indices);
  auto fetch = [&](uint32_t item, C (&x)[kVpt], C*& dst, uint32_t& c) {
    uint32_t g;
    cols.divmod(item, g, c);
    const int64_t row = row0 + g;
    dst = reinterpret_cast<C*>(static_cast<char*>(p.out) + row * p.row_bytes);
    const int64_t index = static_cast<int64_t>(__ldg(indices + strided_offset(p.idx_layout, row)));
    const bool valid = index >= p.vocab_start && index - p.vocab_start < p.num_valid;
    const int64_t src_offset = valid ? (index - p.vocab_start) * p.weight_stride : 0;
    const C* __restrict__ src = reinterpret_cast<const C*>(static_cast<const char*>(p.weight) + src_offset);
#pragma unroll
    for (int u = 0; u < kVpt; ++u) {
      const uint32_t cc = c + u * cols.divisor;
      x[u] = C{};
      if (valid && (u == 0 || cc < chunks)) x[u] = embedding::load_chunk<kBytes, LoadPolicy::kDefault>(src + cc);
    }
  };
  C x[kVpt];
  C* dst;
  uint32_t c;
  fetch(i, x, dst, c);
  for (;;) {
    const uint32_t next = i + stride;  // total + stride < 2^32: total <= 2^31, stride < 2^31
    const bool more = next < total;
    C y[kVpt];
    C* dst_next = dst;
    uint32_t c_next = c;
    if (more) fetch(next, y, dst_next, c_next);
#pragma unroll
    for (int u = 0; u < kVpt; ++u) {
      const uint32_t cc = c + u * cols.divisor;
      if (u == 0 || cc < chunks) store_chunk<kBytes, StorePolicy::kDefault>(dst + cc, x[u]);
    }
    if (!more) break;
#pragma unroll
    for (int u = 0; u < kVpt; ++u) x[u] = y[u];
    dst = dst_next, c = c_next, i = next;
  }
}

// The same resident-block loop for store_kv_cache ("loop kv tT bB"): a chunk of k and of v a
// thread an item (store_kv_cache_kernel's kTensors 2, kVpt 1), the next item's location and
// chunks loaded before the current item is stored.
template <int kBytes, typename TLoc, int kThreads>
__global__ void __launch_bounds__(kThreads)
    store_loop_kernel(const StoreKvCacheParams p, const FastDivmod cols, const uint32_t total, const int64_t row0) {
  using C = Chunk<kBytes>;
  const uint32_t stride = gridDim.x * kThreads;
  uint32_t i = blockIdx.x * kThreads + threadIdx.x;
  SGL_PDL_WAIT();
  if (i < total) {
    const TLoc* __restrict__ out_loc = static_cast<const TLoc*>(p.out_loc);
    auto fetch = [&](uint32_t item, C (&x)[2], int64_t& slot, int64_t& dst_offset) {
      uint32_t g, c;
      cols.divmod(item, g, c);
      const int64_t row = row0 + g;
      slot = static_cast<int64_t>(__ldg(out_loc + row));
      const int64_t src_offset = row * p.src_stride + int64_t{c} * kBytes;
      x[0] = store_kv::load_chunk<kBytes, LoadPolicy::kDefault>(
          reinterpret_cast<const C*>(static_cast<const char*>(p.k) + src_offset));
      x[1] = store_kv::load_chunk<kBytes, LoadPolicy::kDefault>(
          reinterpret_cast<const C*>(static_cast<const char*>(p.v) + src_offset));
      dst_offset = int64_t{c} * kBytes;
    };
    C x[2];
    int64_t slot, off;
    fetch(i, x, slot, off);
    for (;;) {
      const uint32_t next = i + stride;
      const bool more = next < total;
      C y[2];
      int64_t slot_next = 0, off_next = 0;
      if (more) fetch(next, y, slot_next, off_next);
      if (slot >= 0 && slot < p.num_slots) {
        const int64_t d = slot * p.cache_stride + off;
        store_chunk<kBytes, StorePolicy::kDefault>(reinterpret_cast<C*>(static_cast<char*>(p.k_cache) + d), x[0]);
        store_chunk<kBytes, StorePolicy::kDefault>(reinterpret_cast<C*>(static_cast<char*>(p.v_cache) + d), x[1]);
      }
      if (!more) break;
      x[0] = y[0], x[1] = y[1];
      slot = slot_next, off = off_next, i = next;
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

// Session 39: production's embedding_piece_kernel (the large calls since session 39) at other
// piece shapes ("pc vV tT pN": V chunks a thread, T threads, pN as the kernels' kPdl).
template <int kVpt, int kThreads, int kPdl>
cudaError_t embed_piece(const EmbeddingLookupParams& p, cudaStream_t stream) {
  return with_embed_width(p, [&](auto width, auto index) {
    return embedding::launch_pieces<decltype(width)::value, typename decltype(index)::type, kVpt, kThreads, kPdl>(
        p, stream);
  });
}

// Session 43: production's embedding_warp_rows_kernel (32 rows a warp) at other block sizes
// ("wrK tT": rows of at most K chunks, T threads); rows longer than K chunks take production's
// launcher, so the check's long rows run too.
template <int kMaxChunks, int kThreads>
cudaError_t embed_warp_rows(const EmbeddingLookupParams& p, cudaStream_t stream) {
  return with_embed_width(p, [&](auto width, auto index) {
    constexpr int kBytes = decltype(width)::value;
    if (p.row_bytes / kBytes > kMaxChunks) return launch_embedding_lookup(p, stream);
    return embedding::launch_warp_rows<kBytes, typename decltype(index)::type, kMaxChunks, kThreads>(p, stream);
  });
}

// Multiprocessors of the current device (sgl_kernel/runtime.h, cached there).
static int sm_count() {
  int dev = 0;
  CK(cudaGetDevice(&dev));
  return device_sm_count(dev);
}

template <int kThreads, int kBlocksPerSm>
cudaError_t store_loop(const StoreKvCacheParams& p, cudaStream_t stream) {
  return with_store_width(p, [&](auto width, auto index) {
    constexpr int kBytes = decltype(width)::value;
    using TLoc = typename decltype(index)::type;
    const int64_t cols = p.row_bytes / kBytes;
    if (cols > store_kv::kMaxLaunchThreads) return cudaErrorInvalidValue;
    const int64_t rows_per_launch = store_kv::kMaxLaunchThreads / cols;
    for (int64_t row0 = 0; row0 < p.n; row0 += rows_per_launch) {
      const int64_t total = std::min(rows_per_launch, p.n - row0) * cols;
      const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(total, kThreads), int64_t{sm_count()} * kBlocksPerSm);
      SGL_CUDA_TRY(launch_kernel(store_loop_kernel<kBytes, TLoc, kThreads>, dim3(static_cast<uint32_t>(blocks)),
                                 dim3(kThreads), 0, stream, p.enable_pdl, p, FastDivmod(static_cast<uint32_t>(cols)),
                                 static_cast<uint32_t>(total), row0));
    }
    return cudaSuccess;
  });
}

template <int kVpt, int kThreads, int kBlocksPerSm>
cudaError_t embed_loop(const EmbeddingLookupParams& p, cudaStream_t stream) {
  return with_embed_width(p, [&](auto width, auto index) {
    constexpr int kBytes = decltype(width)::value;
    using TIdx = typename decltype(index)::type;
    const int64_t chunks = p.row_bytes / kBytes;
    const int64_t cols = ceil_div<int64_t>(chunks, kVpt);
    if (chunks > embedding::kMaxLaunchThreads) return cudaErrorInvalidValue;
    const int64_t rows_per_launch = embedding::kMaxLaunchThreads / cols;
    for (int64_t row0 = 0; row0 < p.num_indices; row0 += rows_per_launch) {
      const int64_t total = std::min(rows_per_launch, p.num_indices - row0) * cols;
      const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(total, kThreads), int64_t{sm_count()} * kBlocksPerSm);
      SGL_CUDA_TRY(launch_kernel(embed_loop_kernel<kBytes, TIdx, kVpt, kThreads>, dim3(static_cast<uint32_t>(blocks)),
                                 dim3(kThreads), 0, stream, p.enable_pdl, p, FastDivmod(static_cast<uint32_t>(cols)),
                                 static_cast<uint32_t>(chunks), static_cast<uint32_t>(total), row0));
    }
    return cudaSuccess;
  });
}

template <typename Fn>
struct Variant {
  const char* name;
  Fn fn;
};

static const Variant<StoreFn> kStoreVariants[] = {
    {"old", &old_store_kv::launch_store_kv_cache},
    {"prod", &launch_store_kv_cache},
    {"v1 t128 nc", &store_shape<1, 1, 128, LP::kStream>},
    {"kv t256", &store_shape<2, 1, 256, LP::kDefault>},
    {"kv t256 nc", &store_shape<2, 1, 256, LP::kStream>},
    {"kv2 t256", &store_shape<2, 2, 256, LP::kDefault>},
    // Session 22: the caches stored evict_first (st.global.cs), other block sizes.
    {"kv t256 cs", &store_shape<2, 1, 256, LP::kDefault, SP::kStream>},
    {"kv t512", &store_shape<2, 1, 512, LP::kDefault>},
    {"kv t128", &store_shape<2, 1, 128, LP::kDefault>},
    {"kv2 t128", &store_shape<2, 2, 128, LP::kDefault>},
    // Session 39: resident blocks looping over the items (store_loop_kernel).
    {"loop kv t256 b8", &store_loop<256, 8>},
    {"loop kv t256 b4", &store_loop<256, 4>},
    {"loop kv t512 b4", &store_loop<512, 4>},
    {"loop kv t128 b16", &store_loop<128, 16>},
};
static const Variant<EmbedFn> kEmbedVariants[] = {
    {"old", &old_embedding::launch_embedding_lookup},
    {"prod", &launch_embedding_lookup},
    {"v1 t128 nc", &embed_shape<1, 128, LP::kStream>},
    {"v1 t128", &embed_shape<1, 128, LP::kDefault>},
    {"v2 t256", &embed_shape<2, 256, LP::kDefault>},
    {"v4 t256", &embed_shape<4, 256, LP::kDefault>},
    // Session 22: the output stored evict_first (st.global.cs), the weight loaded evict_first
    // (ld.global.cs) or read-only, other block sizes.
    {"v2 t256 cs", &embed_shape<2, 256, LP::kDefault, SP::kStream>},
    {"v2 t256 ef", &embed_shape<2, 256, LP::kEvictFirst>},
    {"v2 t256 nc", &embed_shape<2, 256, LP::kStream>},
    {"v1 t128 cs", &embed_shape<1, 128, LP::kDefault, SP::kStream>},
    {"v1 t256", &embed_shape<1, 256, LP::kDefault>},
    {"v2 t128", &embed_shape<2, 128, LP::kDefault>},
    {"v2 t512", &embed_shape<2, 512, LP::kDefault>},
    {"v4 t128", &embed_shape<4, 128, LP::kDefault>},
    // Without the PDL wait and/or the trigger ("pN": N = 1 wait only, 2 trigger only, 0 neither,
    // 5 wait and a trigger after the stores; N = 0 and 2 only with --no-pdl, as a kernel without
    // the wait may not be launched with PDL).
    {"v1 t128 p0", &embed_shape<1, 128, LP::kDefault, SP::kDefault, 0>},
    {"v1 t128 p1", &embed_shape<1, 128, LP::kDefault, SP::kDefault, 1>},
    {"v2 t256 p0", &embed_shape<2, 256, LP::kDefault, SP::kDefault, 0>},
    {"v2 t256 p1", &embed_shape<2, 256, LP::kDefault, SP::kDefault, 1>},
    {"v2 t256 p2", &embed_shape<2, 256, LP::kDefault, SP::kDefault, 2>},
    {"v2 t256 p5", &embed_shape<2, 256, LP::kDefault, SP::kDefault, 5>},
    {"v1 t128 p5", &embed_shape<1, 128, LP::kDefault, SP::kDefault, 5>},
    // The index through ld.global ("ip") instead of ld.global.nc.
    {"v2 t256 ip", &embed_shape<2, 256, LP::kDefault, SP::kDefault, 3, true>},
    {"v2 t256 p1 ip", &embed_shape<2, 256, LP::kDefault, SP::kDefault, 1, true>},
    {"v1 t128 p1 ip", &embed_shape<1, 128, LP::kDefault, SP::kDefault, 1, true>},
    // Session 39: resident blocks looping over the items (embed_loop_kernel).
    {"loop v2 t256 b8", &embed_loop<2, 256, 8>},
    {"loop v2 t256 b4", &embed_loop<2, 256, 4>},
    {"loop v1 t256 b8", &embed_loop<1, 256, 8>},
    {"loop v2 t512 b2", &embed_loop<2, 512, 2>},
    {"loop v4 t256 b4", &embed_loop<4, 256, 4>},
    {"loop v1 t128 b16", &embed_loop<1, 128, 16>},
    // Session 39: Triton's walk (embed_piece_kernel).
    {"pc v2 t128", &embed_piece<2, 128, 3>},
    {"pc v1 t128", &embed_piece<1, 128, 3>},
    {"pc v1 t256", &embed_piece<1, 256, 3>},
    {"pc v2 t256", &embed_piece<2, 256, 3>},
    {"pc v4 t128", &embed_piece<4, 128, 3>},
    {"pc v2 t128 p1", &embed_piece<2, 128, 1>},
    {"pc v1 t128 p1", &embed_piece<1, 128, 1>},
    {"pc v2 t128 p5", &embed_piece<2, 128, 5>},
    {"pc v2 t128 p0", &embed_piece<2, 128, 0>},
    {"pc v1 t128 p0", &embed_piece<1, 128, 0>},
    // Session 43: 32 rows a warp for rows of at most 16 / 32 chunks (shorter rows only).
    {"wr16 t64", &embed_warp_rows<16, 64>},
    {"wr16 t128", &embed_warp_rows<16, 128>},
    {"wr16 t256", &embed_warp_rows<16, 256>},
    {"wr32 t128", &embed_warp_rows<32, 128>},
};
constexpr int kNumStore = sizeof(kStoreVariants) / sizeof(kStoreVariants[0]);
constexpr int kNumEmbed = sizeof(kEmbedVariants) / sizeof(kEmbedVariants[0]);

// ---------------------------------------------------------------------------------------
// Device helpers: random bytes, naive references, byte comparison

__host__ __device__ inline uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

__global__ void fill_random_kernel(uint8_t* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    p[i] = static_cast<uint8_t>(hash32(static_cast<uint32_t>(i) ^ hash32(seed + static_cast<uint32_t>(i >> 32))));
  }
}

static void fill_random(void* p, size_t n, uint32_t seed, cudaStream_t s) {
  fill_random_kernel<<<1024, 256, 0, s>>>(static_cast<uint8_t*>(p), n, seed);
  CK(cudaGetLastError());
}

// One byte per thread (grid-stride): cache[loc[i]] = k[i] (both tensors) when in range.
template <typename TLoc>
__global__ void ref_store_kernel(StoreKvCacheParams p) {
  const int64_t total = p.n * p.row_bytes;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / p.row_bytes, b = e % p.row_bytes;
    const int64_t slot = static_cast<int64_t>(static_cast<const TLoc*>(p.out_loc)[row]);
    if (slot < 0 || slot >= p.num_slots) continue;
    static_cast<uint8_t*>(p.k_cache)[slot * p.cache_stride + b] =
        static_cast<const uint8_t*>(p.k)[row * p.src_stride + b];
    static_cast<uint8_t*>(p.v_cache)[slot * p.cache_stride + b] =
        static_cast<const uint8_t*>(p.v)[row * p.src_stride + b];
  }
}

// Logical element i of a StridedLayout, computed on the host side of the contract (sizes and
// strides outermost first), independently of strided.cuh.
__host__ __device__ inline int64_t layout_offset(const StridedLayout& l, int64_t i) {
  if (l.ndim == 0) return i;
  int64_t off = 0;
  for (int k = l.ndim - 1; k >= 0; --k) {
    off += (i % l.sizes[k]) * l.strides[k];
    i /= l.sizes[k];
  }
  return off;
}

template <typename TIdx>
__global__ void ref_embed_kernel(EmbeddingLookupParams p) {
  const int64_t total = p.num_indices * p.row_bytes;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < total; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t row = e / p.row_bytes, b = e % p.row_bytes;
    const int64_t index =
        static_cast<int64_t>(static_cast<const TIdx*>(p.indices)[layout_offset(p.idx_layout, row)]);
    uint8_t x = 0;
    if (index >= p.vocab_start && index - p.vocab_start < p.num_valid) {
      x = static_cast<const uint8_t*>(p.weight)[(index - p.vocab_start) * p.weight_stride + b];
    }
    static_cast<uint8_t*>(p.out)[row * p.row_bytes + b] = x;
  }
}

struct CmpResult {
  unsigned long long ndiff;
  unsigned long long first;
};

__global__ void compare_kernel(const uint8_t* a, const uint8_t* b, size_t n, CmpResult* out) {
  unsigned long long nd = 0, first = ~0ull;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    if (a[i] != b[i]) {
      ++nd;
      first = min(first, static_cast<unsigned long long>(i));
    }
  }
  if (nd) {
    atomicAdd(&out->ndiff, nd);
    atomicMin(&out->first, first);
  }
}

static CmpResult* g_cmp = nullptr;

static CmpResult compare(const void* a, const void* b, size_t n, cudaStream_t s) {
  const CmpResult zero{0, ~0ull};
  CK(cudaMemcpyAsync(g_cmp, &zero, sizeof(CmpResult), cudaMemcpyHostToDevice, s));
  compare_kernel<<<1024, 256, 0, s>>>(static_cast<const uint8_t*>(a), static_cast<const uint8_t*>(b), n, g_cmp);
  CK(cudaGetLastError());
  CmpResult r;
  CK(cudaMemcpyAsync(&r, g_cmp, sizeof(CmpResult), cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  return r;
}

// A device allocation of `bytes` plus guards: `lead` bytes before the data (also the
// misalignment under test) and kGuard after it.
constexpr size_t kGuard = 4096;

struct Buf {
  uint8_t* raw = nullptr;
  size_t size = 0;   // whole allocation
  size_t lead = 0;
  void alloc(size_t bytes, size_t lead_bytes) {
    lead = lead_bytes;
    size = lead + bytes + kGuard;
    CK(cudaMalloc(&raw, size));
  }
  void* data() const { return raw + lead; }
  void release() {
    if (raw) CK(cudaFree(raw));
    raw = nullptr;
  }
};

template <typename T>
static void upload(Buf& b, const std::vector<T>& v, size_t lead, cudaStream_t s) {
  b.alloc(v.size() * sizeof(T), lead);
  CK(cudaMemsetAsync(b.raw, 0, b.size, s));
  CK(cudaMemcpyAsync(b.data(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice, s));
  CK(cudaStreamSynchronize(s));  // v is about to go away
}

struct Options {
  bool store = true, embed = true, pdl = true, check_only = false;
  bool short_rows = false;  // --short: embed shapes of short rows (shuffle_rows' scales) instead
  int streams = 0;  // --streams N
};

// ---------------------------------------------------------------------------------------
// store_kv_cache check

struct StoreCase {
  int64_t n, row_bytes;
  int64_t cache_pad, src_pad;  // row pitch minus row_bytes (caches, k/v)
  size_t misalign;             // byte offset of every pointer from a 256-byte boundary
  bool loc32;
};

// n distinct random slots of [0, slots) with every 37th (from 5 on) out of range.
template <typename TLoc>
static std::vector<TLoc> make_store_loc(int64_t n, int64_t slots, uint32_t seed) {
  std::vector<int64_t> all(slots);
  std::iota(all.begin(), all.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  std::vector<TLoc> loc(n);
  const TLoc bad[] = {TLoc(-1), static_cast<TLoc>(slots), static_cast<TLoc>(slots + 1000),
                      std::numeric_limits<TLoc>::min(), std::numeric_limits<TLoc>::max()};
  for (int64_t i = 0; i < n; ++i) {
    loc[i] = (i % 37 == 5) ? bad[(i / 37) % 5] : static_cast<TLoc>(all[i]);
  }
  return loc;
}

static int check_store(const Options& opt, cudaStream_t s) {
  const StoreCase cases[] = {
      {1, 8192, 0, 0, 0, false},     {16, 8192, 0, 0, 0, false},   {128, 2048, 0, 0, 0, false},
      {128, 8192, 0, 0, 0, true},    {1000, 1152, 0, 0, 0, true},  {1024, 8192, 0, 0, 0, false},
      {8192, 2048, 0, 0, 0, false},  {65536, 128, 0, 0, 0, true},  {300, 1024, 128, 64, 0, false},
      {3000, 1152, 384, 0, 0, true}, {200, 512, 8, 24, 8, false},  {50, 256, 2, 6, 2, true},
      {40, 128, 1, 3, 1, false},     {5, 384, 0, 0, 0, true},
  };
  int failures = 0;
  for (const StoreCase& sc : cases) {
    const int64_t slots = std::max<int64_t>(4 * sc.n, 4096);
    const int64_t cache_pitch = sc.row_bytes + sc.cache_pad, src_pitch = sc.row_bytes + sc.src_pad;
    Buf kc, vc, k, v, loc, ref_k, ref_v, old_k, old_v;
    kc.alloc(slots * cache_pitch, sc.misalign);
    vc.alloc(slots * cache_pitch, sc.misalign);
    k.alloc(sc.n * src_pitch, sc.misalign);
    v.alloc(sc.n * src_pitch, sc.misalign);
    const uint32_t seed = static_cast<uint32_t>(sc.n * 131 + sc.row_bytes);
    fill_random(k.raw, k.size, seed ^ 0x1111u, s);
    fill_random(v.raw, v.size, seed ^ 0x2222u, s);
    if (sc.loc32) {
      upload(loc, make_store_loc<int32_t>(sc.n, slots, seed), 0, s);
    } else {
      upload(loc, make_store_loc<int64_t>(sc.n, slots, seed), 0, s);
    }
    for (Buf* b : {&ref_k, &ref_v, &old_k, &old_v}) CK(cudaMalloc(&b->raw, kc.size));

    StoreKvCacheParams p{};
    p.k_cache = kc.data();
    p.v_cache = vc.data();
    p.k = k.data();
    p.v = v.data();
    p.out_loc = loc.data();
    p.n = sc.n;
    p.num_slots = slots;
    p.row_bytes = sc.row_bytes;
    p.cache_stride = cache_pitch;
    p.src_stride = src_pitch;
    p.loc_int64 = !sc.loc32;
    p.enable_pdl = opt.pdl;
    const auto poison = [&]() {
      fill_random(kc.raw, kc.size, seed ^ 0xA5A5u, s);
      fill_random(vc.raw, vc.size, seed ^ 0x5A5Au, s);
    };
    const int chunk = chunk_bytes({address(p.k_cache), address(p.v_cache), address(p.k), address(p.v),
                                   static_cast<uint64_t>(p.cache_stride), static_cast<uint64_t>(p.src_stride),
                                   static_cast<uint64_t>(p.row_bytes)});
    char label[160];
    std::snprintf(label, sizeof(label), "store n=%lld row=%lld pitch=%lld/%lld chunk=%d loc%s", (long long)sc.n,
                  (long long)sc.row_bytes, (long long)cache_pitch, (long long)src_pitch, chunk,
                  sc.loc32 ? "32" : "64");

    // Naive reference, then old against it.
    std::snprintf(g_ctx, sizeof(g_ctx), "%s naive", label);
    poison();
    if (sc.loc32) {
      ref_store_kernel<int32_t><<<1024, 256, 0, s>>>(p);
    } else {
      ref_store_kernel<int64_t><<<1024, 256, 0, s>>>(p);
    }
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(ref_k.raw, kc.raw, kc.size, cudaMemcpyDeviceToDevice, s));
    CK(cudaMemcpyAsync(ref_v.raw, vc.raw, vc.size, cudaMemcpyDeviceToDevice, s));
    int case_failures = 0;
    for (int vi = 0; vi < kNumStore; ++vi) {
      std::snprintf(g_ctx, sizeof(g_ctx), "%s %s", label, kStoreVariants[vi].name);
      poison();
      CK(kStoreVariants[vi].fn(p, s));
      CK(cudaGetLastError());
      for (int m = 0; m < 2; ++m) {
        const Buf& got = m ? vc : kc;
        const Buf& want = vi == 0 ? (m ? ref_v : ref_k) : (m ? old_v : old_k);
        const CmpResult r = compare(got.raw, want.raw, got.size, s);
        if (r.ndiff) {
          ++case_failures;
          uint8_t g = 0, w = 0;
          CK(cudaMemcpy(&g, got.raw + r.first, 1, cudaMemcpyDeviceToHost));
          CK(cudaMemcpy(&w, want.raw + r.first, 1, cudaMemcpyDeviceToHost));
          const long long at = static_cast<long long>(r.first) - static_cast<long long>(got.lead);
          std::printf("MISMATCH %s %s %s: %llu bytes differ from %s, first at data byte %lld (slot %lld, byte %lld): "
                      "%02x (want %02x)\n",
                      label, kStoreVariants[vi].name, m ? "v_cache" : "k_cache", r.ndiff, vi == 0 ? "naive" : "old",
                      at, at >= 0 ? at / cache_pitch : -1, at >= 0 ? at % cache_pitch : at, g, w);
        }
      }
      if (vi == 0) {
        CK(cudaMemcpyAsync(old_k.raw, kc.raw, kc.size, cudaMemcpyDeviceToDevice, s));
        CK(cudaMemcpyAsync(old_v.raw, vc.raw, vc.size, cudaMemcpyDeviceToDevice, s));
      }
    }
    CK(cudaStreamSynchronize(s));
    std::printf("check %-62s %s\n", label, case_failures ? "MISMATCH" : "old == naive, every variant == old");
    failures += case_failures;
    for (Buf* b : {&kc, &vc, &k, &v, &loc, &ref_k, &ref_v, &old_k, &old_v}) b->release();
  }
  return failures;
}

// ---------------------------------------------------------------------------------------
// embedding_lookup check

struct EmbedCase {
  int64_t t, row_bytes, rows;  // rows: weight rows
  int64_t weight_pad;          // weight pitch minus row_bytes
  int64_t vocab_start, num_valid;  // num_valid < 0: plain gather (0, rows)
  size_t misalign;             // of weight and out
  bool idx32;
  int layout;                  // 0 contiguous, 2: [t/2, 2] of a [t/2, 3] buffer, 3: a permuted 3-d view
};

// The index layout of a case and the number of elements its buffer needs.
static StridedLayout make_layout(const EmbedCase& ec, int64_t* buffer_elems) {
  StridedLayout l{};
  if (ec.layout == 2) {
    l.ndim = 2;
    l.sizes[0] = ec.t / 2, l.sizes[1] = 2;
    l.strides[0] = 3, l.strides[1] = 1;
    *buffer_elems = ec.t / 2 * 3;
  } else if (ec.layout == 3) {  // logical [a, b, c] over a [a, c + 1, b] buffer, transposed
    const int64_t a = 100, b = 20, c = ec.t / 2000;
    l.ndim = 3;
    l.sizes[0] = a, l.sizes[1] = b, l.sizes[2] = c;
    l.strides[0] = (c + 1) * b, l.strides[1] = 1, l.strides[2] = b;
    *buffer_elems = a * (c + 1) * b;
  } else {
    l.ndim = 0;
    *buffer_elems = ec.t;
  }
  return l;
}

template <typename TIdx>
static std::vector<TIdx> make_indices(const EmbedCase& ec, const StridedLayout& l, int64_t buffer_elems,
                                      uint32_t seed) {
  const int64_t start = ec.num_valid < 0 ? 0 : ec.vocab_start;
  const int64_t valid = ec.num_valid < 0 ? ec.rows : ec.num_valid;
  // Uniform over a range a little wider than [0, start + valid) on both sides.
  const int64_t lo = -3, hi = start + valid + std::max<int64_t>(3, valid / 8);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int64_t> dist(lo, hi - 1);
  std::vector<TIdx> buf(buffer_elems, static_cast<TIdx>(-7));  // holes of the strided buffer
  const TIdx edges[] = {TIdx(-1), static_cast<TIdx>(start - 1), static_cast<TIdx>(start),
                        static_cast<TIdx>(start + valid - 1), static_cast<TIdx>(start + valid),
                        std::numeric_limits<TIdx>::min(), std::numeric_limits<TIdx>::max()};
  for (int64_t i = 0; i < ec.t; ++i) {
    const TIdx x = (i % 29 == 3) ? edges[(i / 29) % 7] : static_cast<TIdx>(dist(rng));
    buf[layout_offset(l, i)] = x;
  }
  return buf;
}

static int check_embed(const Options& opt, cudaStream_t s) {
  const EmbedCase cases[] = {
      {1, 8192, 5000, 0, 0, -1, 0, false, 0},        {16, 16384, 3000, 0, 0, -1, 0, false, 0},
      {128, 8192, 1000, 0, 1000, 800, 0, false, 0},   {1024, 8192, 5000, 0, 0, -1, 0, true, 0},
      {5000, 8192, 4000, 0, 0, -1, 0, false, 0},      {600, 8192, 2000, 0, 48096, 2000, 0, false, 2},
      {4096, 4096, 3000, 4096, 500, 2500, 0, true, 2}, {333, 200, 700, 16, 0, -1, 8, true, 0},
      {257, 194, 900, 0, 0, -1, 2, false, 0},         {129, 132, 400, 4, 10, 300, 4, true, 0},
      {20000, 256, 1000, 0, 0, -1, 0, false, 3},      {2, 12288, 50, 0, 0, -1, 0, true, 0},
  };
  int failures = 0;
  for (const EmbedCase& ec : cases) {
    const int64_t pitch = ec.row_bytes + ec.weight_pad;
    int64_t buffer_elems = 0;
    const StridedLayout layout = make_layout(ec, &buffer_elems);
    const uint32_t seed = static_cast<uint32_t>(ec.t * 7919 + ec.row_bytes);
    Buf w, out, idx, ref, old;
    w.alloc(ec.rows * pitch, ec.misalign);
    out.alloc(ec.t * ec.row_bytes, ec.misalign);
    fill_random(w.raw, w.size, seed ^ 0x3333u, s);
    if (ec.idx32) {
      upload(idx, make_indices<int32_t>(ec, layout, buffer_elems, seed), 0, s);
    } else {
      upload(idx, make_indices<int64_t>(ec, layout, buffer_elems, seed), 0, s);
    }
    CK(cudaMalloc(&ref.raw, out.size));
    CK(cudaMalloc(&old.raw, out.size));

    EmbeddingLookupParams p{};
    p.out = out.data();
    p.weight = w.data();
    p.indices = idx.data();
    p.num_indices = ec.t;
    p.row_bytes = ec.row_bytes;
    p.weight_stride = pitch;
    p.vocab_start = ec.num_valid < 0 ? 0 : ec.vocab_start;
    p.num_valid = ec.num_valid < 0 ? ec.rows : ec.num_valid;
    p.indices_int64 = !ec.idx32;
    p.enable_pdl = opt.pdl;
    p.idx_layout = layout;
    const int chunk = chunk_bytes({address(p.out), address(p.weight), static_cast<uint64_t>(p.weight_stride),
                                   static_cast<uint64_t>(p.row_bytes)});
    char label[160];
    std::snprintf(label, sizeof(label), "embed T=%lld row=%lld pitch=%lld chunk=%d idx%s dims=%d range=%lld+%lld",
                  (long long)ec.t, (long long)ec.row_bytes, (long long)pitch, chunk, ec.idx32 ? "32" : "64",
                  layout.ndim, (long long)p.vocab_start, (long long)p.num_valid);

    std::snprintf(g_ctx, sizeof(g_ctx), "%s naive", label);
    fill_random(out.raw, out.size, seed ^ 0xA5A5u, s);
    if (ec.idx32) {
      ref_embed_kernel<int32_t><<<1024, 256, 0, s>>>(p);
    } else {
      ref_embed_kernel<int64_t><<<1024, 256, 0, s>>>(p);
    }
    CK(cudaGetLastError());
    CK(cudaMemcpyAsync(ref.raw, out.raw, out.size, cudaMemcpyDeviceToDevice, s));
    int case_failures = 0;
    for (int vi = 0; vi < kNumEmbed; ++vi) {
      std::snprintf(g_ctx, sizeof(g_ctx), "%s %s", label, kEmbedVariants[vi].name);
      fill_random(out.raw, out.size, seed ^ 0xA5A5u, s);
      CK(kEmbedVariants[vi].fn(p, s));
      CK(cudaGetLastError());
      const Buf& want = vi == 0 ? ref : old;
      const CmpResult r = compare(out.raw, want.raw, out.size, s);
      if (r.ndiff) {
        ++case_failures;
        uint8_t g = 0, x = 0;
        CK(cudaMemcpy(&g, out.raw + r.first, 1, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(&x, want.raw + r.first, 1, cudaMemcpyDeviceToHost));
        const long long at = static_cast<long long>(r.first) - static_cast<long long>(out.lead);
        std::printf("MISMATCH %s %s: %llu bytes differ from %s, first at data byte %lld (row %lld, byte %lld): %02x "
                    "(want %02x)\n",
                    label, kEmbedVariants[vi].name, r.ndiff, vi == 0 ? "naive" : "old", at,
                    at >= 0 ? at / ec.row_bytes : -1, at >= 0 ? at % ec.row_bytes : at, g, x);
      }
      if (vi == 0) CK(cudaMemcpyAsync(old.raw, out.raw, out.size, cudaMemcpyDeviceToDevice, s));
    }
    CK(cudaStreamSynchronize(s));
    std::printf("check %-62s %s\n", label, case_failures ? "MISMATCH" : "old == naive, every variant == old");
    failures += case_failures;
    for (Buf* b : {&w, &out, &idx, &ref, &old}) b->release();
  }
  return failures;
}

// ---------------------------------------------------------------------------------------
// Timing

struct Timer {
  cudaStream_t s;
  int l2;
  cudaEvent_t e0, e1;

  // Per-call median (us) of `fn(set)` over a graph of `calls` launches rotating over `nsets`.
  template <typename F>
  float time_graph(F&& launch_set, int nsets, int calls, int reps) {
    CK(launch_set(0));  // warm-up, outside the graph
    CK(cudaStreamSynchronize(s));
    return tune_common::graph_replay_us([&](int c) { CK(launch_set(c % nsets)); }, calls, reps, s);
  }

  // As harness.py: hot (one set) when bytes * 4 <= L2, else K sets with K * bytes >= 4 * L2.
  int sets_for(double bytes) const {
    if (bytes * 4 <= l2) return 1;
    const double k = std::min({64.0, std::ceil(4.0 * l2 / bytes), std::floor(4.0 * (1ull << 30) / bytes)});
    return std::max(1, static_cast<int>(k));
  }

  // Calls per graph and replays: hot 100 calls; rotated ~2 ms per replay (a multiple of the
  // sets); replays for ~60 ms, 10..100.
  template <typename F>
  void plan(F&& launch_set, int nsets, bool hot, int* calls, int* reps) {
    CK(launch_set(0));
    CK(cudaStreamSynchronize(s));
    CK(cudaEventRecord(e0, s));
    for (int i = 0; i < 3; ++i) CK(launch_set(i % nsets));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    const double est_ms = std::max(ms / 3.0, 1e-3);
    if (hot) {
      *calls = 100;
    } else {
      *calls = static_cast<int>(std::min(100.0, std::max(2.0, std::ceil(2.0 / est_ms))));
      *calls = (*calls + nsets - 1) / nsets * nsets;
    }
    *reps = static_cast<int>(std::min(100.0, std::max(10.0, 60.0 / (*calls * est_ms))));
  }
};

static void print_table(const char* title, const std::vector<std::string>& cols, const std::vector<const char*>& names,
                        const std::vector<float>& us, const std::vector<double>& bytes) {
  const size_t nc = cols.size();
  std::printf("\n%s: us per call (GB/s) [old us / us]\n%-12s", title, "variant");
  for (const std::string& c : cols) std::printf(" %25s", c.c_str());
  std::printf("\n");
  for (size_t vi = 0; vi < names.size(); ++vi) {
    std::printf("%-12s", names[vi]);
    for (size_t ci = 0; ci < nc; ++ci) {
      const float t = us[vi * nc + ci];
      std::printf("  %7.2f (%5.0f) [%5.2fx]", t, bytes[ci] / (t * 1e-6) / 1e9, us[ci] / t);
    }
    std::printf("\n");
  }
}

static void time_store(const Options& opt, Timer& tm) {
  struct Shape {
    int64_t n, h, d;
  };
  const Shape shapes[] = {{1, 32, 128},    {16, 32, 128}, {128, 32, 128}, {1024, 32, 128},
                          {8192, 32, 128}, {32768, 32, 128}, {1, 8, 128}, {128, 8, 128},
                          {8192, 8, 128},  {1, 1, 576},    {8192, 1, 576}};
  const int ns = sizeof(shapes) / sizeof(shapes[0]);
  std::vector<float> us(kNumStore * ns);
  std::vector<double> bytes(ns);
  std::vector<std::string> cols(ns);
  for (int si = 0; si < ns; ++si) {
    const Shape sh = shapes[si];
    const int64_t row = sh.h * sh.d * 2;  // bf16
    const int64_t slots = std::max<int64_t>(4 * sh.n, 4096);
    bytes[si] = 4.0 * sh.n * row;
    const int nsets = tm.sets_for(bytes[si]);
    cols[si] = "n=" + std::to_string(sh.n) + " H=" + std::to_string(sh.h) + " D=" + std::to_string(sh.d) + " " +
               (bytes[si] * 4 <= tm.l2 ? std::string("hot") : "rot" + std::to_string(nsets));
    void *kc, *vc;
    CK(cudaMalloc(&kc, slots * row));
    CK(cudaMalloc(&vc, slots * row));
    CK(cudaMemsetAsync(kc, 0, slots * row, tm.s));
    CK(cudaMemsetAsync(vc, 0, slots * row, tm.s));
    std::vector<StoreKvCacheParams> ps(nsets);
    std::vector<void*> owned;
    for (int k = 0; k < nsets; ++k) {
      void *kk, *vv, *loc;
      CK(cudaMalloc(&kk, sh.n * row));
      CK(cudaMalloc(&vv, sh.n * row));
      CK(cudaMalloc(&loc, sh.n * sizeof(int64_t)));
      fill_random(kk, sh.n * row, 11u + k, tm.s);
      fill_random(vv, sh.n * row, 97u + k, tm.s);
      std::vector<int64_t> all(slots);
      std::iota(all.begin(), all.end(), 0);
      std::mt19937 rng(1234u + k);
      std::shuffle(all.begin(), all.end(), rng);
      CK(cudaMemcpyAsync(loc, all.data(), sh.n * sizeof(int64_t), cudaMemcpyHostToDevice, tm.s));
      CK(cudaStreamSynchronize(tm.s));
      owned.insert(owned.end(), {kk, vv, loc});
      StoreKvCacheParams& p = ps[k];
      p = StoreKvCacheParams{};
      p.k_cache = kc, p.v_cache = vc, p.k = kk, p.v = vv, p.out_loc = loc;
      p.n = sh.n, p.num_slots = slots, p.row_bytes = row, p.cache_stride = row, p.src_stride = row;
      p.loc_int64 = true, p.enable_pdl = opt.pdl;
    }
    int calls = 0, reps = 0;
    tm.plan([&](int k) { return kStoreVariants[0].fn(ps[k], tm.s); }, nsets, bytes[si] * 4 <= tm.l2, &calls, &reps);
    for (int vi = 0; vi < kNumStore; ++vi) {
      std::snprintf(g_ctx, sizeof(g_ctx), "time store %s %s", cols[si].c_str(), kStoreVariants[vi].name);
      us[vi * ns + si] = tm.time_graph([&](int k) { return kStoreVariants[vi].fn(ps[k], tm.s); }, nsets, calls, reps);
    }
    for (void* q : owned) CK(cudaFree(q));
    CK(cudaFree(kc));
    CK(cudaFree(vc));
    std::printf("timed store %s (%d calls x %d replays)\n", cols[si].c_str(), calls, reps);
  }
  std::vector<const char*> names;
  for (const auto& v : kStoreVariants) names.push_back(v.name);
  std::printf("\nstore_kv_cache bf16, PDL %s", opt.pdl ? "on" : "off");
  // Two tables of at most 6 shapes each, to keep the lines readable.
  for (int part = 0; part < 2; ++part) {
    const int lo = part ? 6 : 0, hi = part ? ns : 6;
    std::vector<std::string> c(cols.begin() + lo, cols.begin() + hi);
    std::vector<double> b(bytes.begin() + lo, bytes.begin() + hi);
    std::vector<float> u;
    for (int vi = 0; vi < kNumStore; ++vi) u.insert(u.end(), us.begin() + vi * ns + lo, us.begin() + vi * ns + hi);
    print_table(part ? "store_kv_cache (2/2)" : "store_kv_cache (1/2)", c, names, u, b);
  }
}

// A variant without the PDL wait ("p0", "p2") may not be launched with PDL: skipped then.
static bool pdl_safe(const char* name) { return !std::strstr(name, " p0") && !std::strstr(name, " p2"); }

static void time_embed(const Options& opt, Timer& tm) {
  constexpr int64_t kVocab = 128256, kShard = kVocab / 8, kShardStart = 3 * kShard;
  struct Shape {
    bool tp;
    const char* dtype;
    int elt;
    int64_t t, d;
  };
  std::vector<Shape> shapes;
  if (opt.short_rows) {  // rows of 128 B to 4 KB (16 to 256 chunks), many of them
    for (int64_t t : {1024, 8192, 32768, 131072}) shapes.push_back({false, "fp32", 4, t, 56});
    for (int64_t t : {8192, 131072}) shapes.push_back({false, "bf16", 2, t, 64});
    for (int64_t t : {8192, 32768}) shapes.push_back({false, "fp32", 4, t, 112});
    for (int64_t t : {8192, 32768}) shapes.push_back({false, "bf16", 2, t, 1024});
    for (int64_t t : {8192, 32768}) shapes.push_back({false, "bf16", 2, t, 1536});
    for (int64_t t : {8192, 32768}) shapes.push_back({false, "bf16", 2, t, 2048});
  } else {
    for (int64_t t : {1, 16, 128, 1024, 8192, 32768}) shapes.push_back({false, "bf16", 2, t, 4096});
    for (int64_t t : {1, 16, 128, 1024, 8192, 32768}) shapes.push_back({true, "bf16", 2, t, 4096});
    for (int64_t t : {1, 8192}) shapes.push_back({false, "fp16", 2, t, 8192});
    for (int64_t t : {1, 8192}) shapes.push_back({false, "fp32", 4, t, 2048});
  }
  const int ns = static_cast<int>(shapes.size());
  std::vector<float> us(kNumEmbed * ns);
  std::vector<double> bytes(ns);
  std::vector<std::string> cols(ns);
  void* weight = nullptr;
  int64_t weight_rows = 0, weight_row = 0;
  for (int si = 0; si < ns; ++si) {
    const Shape sh = shapes[si];
    const int64_t row = sh.d * sh.elt;
    const int64_t rows = sh.tp ? kShard : kVocab;
    if (rows != weight_rows || row != weight_row) {  // one table alive at a time
      if (weight) CK(cudaFree(weight));
      CK(cudaMalloc(&weight, rows * row));
      fill_random(weight, rows * row, 555u, tm.s);
      weight_rows = rows, weight_row = row;
    }
    const double frac = sh.tp ? static_cast<double>(kShard) / kVocab : 1.0;
    bytes[si] = static_cast<double>(sh.t * row) + std::floor(sh.t * frac) * row + 8.0 * sh.t;
    const int nsets = tm.sets_for(bytes[si]);
    const bool hot = bytes[si] * 4 <= tm.l2;
    cols[si] = std::string(sh.tp ? "tp " : "") + sh.dtype + " T=" + std::to_string(sh.t) + " D=" +
               std::to_string(sh.d) + " " + (hot ? std::string("hot") : "rot" + std::to_string(nsets));
    std::vector<EmbeddingLookupParams> ps(nsets);
    std::vector<void*> owned;
    for (int k = 0; k < nsets; ++k) {
      void *out, *idx;
      CK(cudaMalloc(&out, sh.t * row));
      CK(cudaMalloc(&idx, sh.t * sizeof(int64_t)));
      std::mt19937_64 rng(4321u + k + si * 64);
      std::uniform_int_distribution<int64_t> dist(0, kVocab - 1);
      std::vector<int64_t> h(sh.t);
      for (int64_t& x : h) x = dist(rng);
      CK(cudaMemcpyAsync(idx, h.data(), sh.t * sizeof(int64_t), cudaMemcpyHostToDevice, tm.s));
      CK(cudaStreamSynchronize(tm.s));
      owned.insert(owned.end(), {out, idx});
      EmbeddingLookupParams& p = ps[k];
      p = EmbeddingLookupParams{};
      p.out = out, p.weight = weight, p.indices = idx;
      p.num_indices = sh.t, p.row_bytes = row, p.weight_stride = row;
      p.vocab_start = sh.tp ? kShardStart : 0, p.num_valid = sh.tp ? kShard : kVocab;
      p.indices_int64 = true, p.enable_pdl = opt.pdl;
      p.idx_layout.ndim = 0;
    }
    int calls = 0, reps = 0;
    tm.plan([&](int k) { return kEmbedVariants[0].fn(ps[k], tm.s); }, nsets, hot, &calls, &reps);
    for (int vi = 0; vi < kNumEmbed; ++vi) {
      if (opt.pdl && !pdl_safe(kEmbedVariants[vi].name)) {
        us[vi * ns + si] = NAN;
        continue;
      }
      std::snprintf(g_ctx, sizeof(g_ctx), "time embed %s %s", cols[si].c_str(), kEmbedVariants[vi].name);
      us[vi * ns + si] = tm.time_graph([&](int k) { return kEmbedVariants[vi].fn(ps[k], tm.s); }, nsets, calls, reps);
    }
    for (void* q : owned) CK(cudaFree(q));
    std::printf("timed embed %s (%d calls x %d replays)\n", cols[si].c_str(), calls, reps);
  }
  if (weight) CK(cudaFree(weight));
  std::vector<const char*> names;
  for (const auto& v : kEmbedVariants) names.push_back(v.name);
  std::printf("\nembedding_lookup, PDL %s", opt.pdl ? "on" : "off");
  for (int lo = 0; lo < ns; lo += 6) {
    const int hi = std::min(ns, lo + 6);
    std::vector<std::string> c(cols.begin() + lo, cols.begin() + hi);
    std::vector<double> b(bytes.begin() + lo, bytes.begin() + hi);
    std::vector<float> u;
    for (int vi = 0; vi < kNumEmbed; ++vi) u.insert(u.end(), us.begin() + vi * ns + lo, us.begin() + vi * ns + hi);
    const std::string title =
        "embedding_lookup (" + std::to_string(lo / 6 + 1) + "/" + std::to_string((ns + 5) / 6) + ")";
    print_table(title.c_str(), c, names, u, b);
  }
}

int main_impl(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--op" && i + 1 < argc) {
      const std::string op = argv[++i];
      opt.store = op == "store";
      opt.embed = op == "embed";
      if (!opt.store && !opt.embed) {
        std::printf("--op store or --op embed\n");
        return 2;
      }
    } else if (a == "--no-pdl") {
      opt.pdl = false;
    } else if (a == "--check-only") {
      opt.check_only = true;
    } else if (a == "--short") {
      opt.short_rows = true;
    } else if (a == "--streams" && i + 1 < argc) {
      opt.streams = std::atoi(argv[++i]);
    } else {
      std::printf("unknown argument %s (see the header comment of tune_store_embed.cu)\n", a.c_str());
      return 2;
    }
  }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  tune_common::extra_streams(s, opt.streams);
  int dev = 0, l2 = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("%s, %d SMs, L2 %d MiB, PDL %s\n", prop.name, prop.multiProcessorCount, l2 >> 20,
              opt.pdl ? "on" : "off");
  CK(cudaMalloc(&g_cmp, sizeof(CmpResult)));

  int failures = 0;
  if (opt.store) failures += check_store(opt, s);
  if (opt.embed) failures += check_embed(opt, s);
  std::printf("%s\n", failures ? "CHECK FAILED: some variant differs (see MISMATCH lines)"
                               : "check: old == naive reference, every variant bitwise equal to old");
  if (!opt.check_only) {
    Timer tm{s, l2, nullptr, nullptr};
    CK(cudaEventCreate(&tm.e0));
    CK(cudaEventCreate(&tm.e1));
    tune_common::copy_gbps(s);  // for reference
    if (opt.store) time_store(opt, tm);
    if (opt.embed) time_embed(opt, tm);
    CK(cudaEventDestroy(tm.e0));
    CK(cudaEventDestroy(tm.e1));
    std::printf("\n%s\n", failures ? "CHECK FAILED (timings above are of mismatching kernels)" : "check passed");
  }
  CK(cudaFree(g_cmp));
  CK(cudaStreamDestroy(s));
  return failures ? 1 : 0;
}

}  // namespace tune

int main(int argc, char** argv) { return tune::main_impl(argc, argv); }
