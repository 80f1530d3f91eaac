// SPDX-License-Identifier: Apache-2.0
// store_kv_cache: k_cache[out_loc[i]] = k[i], v_cache[out_loc[i]] = v[i] (API.md 3.2).
//
// A byte copy of rows (any dtype). Each row is copied by a power-of-two group of threads
// (row_copy.cuh): with 16-byte chunks an 8 KB row (4096 bf16) takes 256 threads, a 128-byte
// row 4 threads and a block 64 such rows. The k and v chunks of a thread are loaded before
// its location is checked, so the location's load overlaps them. Locations outside
// [0, num_slots) are skipped: nothing is written for them.
#include <cstdint>

#include "project/project.h"
#include "project/row_copy.cuh"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/launch.cuh"

namespace sgl_kernel::project {

namespace {

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

}  // namespace

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

}  // namespace sgl_kernel::project
