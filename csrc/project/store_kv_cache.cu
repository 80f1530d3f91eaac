// SPDX-License-Identifier: Apache-2.0
// store_kv_cache: k_cache[out_loc[i]] = k[i], v_cache[out_loc[i]] = v[i] (API.md 3.2).
//
// A byte copy of rows (any dtype) in chunks of kBytes (16 when every pointer, row pitch and the
// row size allow it, else the widest of 8, 4, 2, 1 that does; row_copy.cuh). The grid is flat
// over chunk columns: a thread copies column c of one row, of k or of v (kTensors 1: the grid's
// first half does k, the second half v) or of both (kTensors 2, one location load for the two).
// The source address does not depend on the location, so a thread issues all its loads (the
// location and its chunks) before it uses any. Locations outside [0, num_slots) are skipped:
// nothing is written for them.
#include <algorithm>
#include <cstdint>

#include "project/project.h"
#include "project/row_copy.cuh"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::project {

namespace {
namespace store_kv {  // (a name of its own: tune_store_embed.cu includes this file with embedding_lookup.cu)

// Threads of one launch at most: thread indices stay 32-bit (FastDivmod); a larger call is cut
// into launches of whole rows.
constexpr int64_t kMaxLaunchThreads = int64_t{1} << 31;

// One kBytes chunk, with ld.global (kDefault) or ld.global.nc.L1::no_allocate (kStream: k and
// v are read once and never written by the kernel; API.md 1.2, inputs and outputs do not
// overlap). Volatile asm, and stored through store_chunk_if (row_copy.cuh), so that they stay
// ahead of the location check: with the stores under a branch, ptxas sinks the loads below it
// (they are only used there), and each thread then waits for its location before it even asks
// for its data (every release before session 40 did so).
template <int kBytes, LoadPolicy kLoad>
__device__ __forceinline__ Chunk<kBytes> load_chunk(const Chunk<kBytes>* p) {
  static_assert(kLoad == LoadPolicy::kDefault || kLoad == LoadPolicy::kStream, "kDefault or kStream");
  constexpr bool kNc = kLoad == LoadPolicy::kStream;
  Chunk<kBytes> r;
  if constexpr (kBytes == 16) {
    if constexpr (kNc) {
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                   : "l"(p));
    } else {
      asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w) : "l"(p));
    }
  } else if constexpr (kBytes == 8) {
    if constexpr (kNc) {
      asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    } else {
      asm volatile("ld.global.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    }
  } else if constexpr (kBytes == 4) {
    if constexpr (kNc) {
      asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r) : "l"(p));
    } else {
      asm volatile("ld.global.u32 %0, [%1];" : "=r"(r) : "l"(p));
    }
  } else {
    uint16_t h;  // 1 and 2 bytes through a 16-bit register
    if constexpr (kBytes == 2 && kNc) {
      asm volatile("ld.global.nc.L1::no_allocate.u16 %0, [%1];" : "=h"(h) : "l"(p));
    } else if constexpr (kBytes == 2) {
      asm volatile("ld.global.u16 %0, [%1];" : "=h"(h) : "l"(p));
    } else if constexpr (kNc) {
      asm volatile("ld.global.nc.L1::no_allocate.u8 %0, [%1];" : "=h"(h) : "l"(p));
    } else {
      asm volatile("ld.global.u8 %0, [%1];" : "=h"(h) : "l"(p));
    }
    r = static_cast<Chunk<kBytes>>(h);
  }
  return r;
}

// Thread i (of `total`) copies kVpt chunks c + u * cols (u < kVpt, those < chunks) of row
// row0 + g, (g, c) = divmod(i', cols), with i' = i (kTensors 2: k and v) or i' = i minus the k
// half (kTensors 1, i >= half: v). cols = ceil(chunks / kVpt) threads cover a row.
template <int kBytes, typename TLoc, int kTensors, int kVpt, int kThreads, LoadPolicy kLoad,
          StorePolicy kStore = StorePolicy::kDefault>
__global__ void __launch_bounds__(kThreads)
    store_kv_cache_kernel(const StoreKvCacheParams p, const FastDivmod cols, const uint32_t chunks,
                          const uint32_t half, const uint32_t total, const int64_t row0) {
  static_assert(kTensors == 1 || kTensors == 2, "one tensor or both per thread");
  using C = Chunk<kBytes>;
  const uint32_t i = blockIdx.x * kThreads + threadIdx.x;
  const bool is_v = kTensors == 1 && i >= half;
  uint32_t g, c;
  cols.divmod(is_v ? i - half : i, g, c);
  const int64_t row = row0 + g;
  const int64_t src_offset = row * p.src_stride;

  SGL_PDL_WAIT();  // before any input is read
  if (i < total) {
    const TLoc* __restrict__ out_loc = static_cast<const TLoc*>(p.out_loc);  // [n]
    const int64_t slot = static_cast<int64_t>(__ldg(out_loc + row));
    const C* src[kTensors];  // [n, row_bytes] rows, pitch src_stride
    src[0] = reinterpret_cast<const C*>(static_cast<const char*>(is_v ? p.v : p.k) + src_offset);
    if constexpr (kTensors == 2) src[1] = reinterpret_cast<const C*>(static_cast<const char*>(p.v) + src_offset);
    C x[kTensors][kVpt] = {};  // (chunks past the row: never stored)
#pragma unroll
    for (int u = 0; u < kVpt; ++u) {
      const uint32_t cc = c + u * cols.divisor;
      if (u == 0 || cc < chunks) {
#pragma unroll
        for (int m = 0; m < kTensors; ++m) x[m][u] = load_chunk<kBytes, kLoad>(src[m] + cc);
      }
    }
    // Predicated stores, not a branch (store_chunk_if): the loads above stay ahead of this check.
    const bool in_range = slot >= 0 && slot < p.num_slots;
    const int64_t dst_offset = in_range ? slot * p.cache_stride : 0;
    C* dst[kTensors];  // [num_slots, row_bytes] rows, pitch cache_stride
    dst[0] = reinterpret_cast<C*>(static_cast<char*>(is_v ? p.v_cache : p.k_cache) + dst_offset);
    if constexpr (kTensors == 2) dst[1] = reinterpret_cast<C*>(static_cast<char*>(p.v_cache) + dst_offset);
#pragma unroll
    for (int u = 0; u < kVpt; ++u) {
      const uint32_t cc = c + u * cols.divisor;
      const bool live = in_range && (u == 0 || cc < chunks);
#pragma unroll
      for (int m = 0; m < kTensors; ++m) store_chunk_if<kBytes, kStore>(live, dst[m] + cc, x[m][u]);
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

// One launch shape: kTensors tensors and kVpt chunks per thread, kThreads per block, kLoad for
// k and v, kStore for the caches. Several launches when the call needs more than kMaxLaunchThreads threads.
template <int kBytes, typename TLoc, int kTensors, int kVpt, int kThreads, LoadPolicy kLoad,
          StorePolicy kStore = StorePolicy::kDefault>
cudaError_t launch_shape(const StoreKvCacheParams& p, cudaStream_t stream) {
  const int64_t chunks = p.row_bytes / kBytes;
  const int64_t cols = ceil_div<int64_t>(chunks, kVpt);
  const int64_t threads_per_row = cols * (3 - kTensors);
  // Rows of over 2^31 chunks (>= 2 GiB) are refused (the previous kernel took them).
  if (chunks > kMaxLaunchThreads || threads_per_row > kMaxLaunchThreads) return cudaErrorInvalidValue;
  const int64_t rows_per_launch = kMaxLaunchThreads / threads_per_row;
  for (int64_t row0 = 0; row0 < p.n; row0 += rows_per_launch) {
    const int64_t rows = std::min(rows_per_launch, p.n - row0);
    const int64_t half = rows * cols;
    const int64_t total = rows * threads_per_row;
    SGL_CUDA_TRY(launch_kernel(store_kv_cache_kernel<kBytes, TLoc, kTensors, kVpt, kThreads, kLoad, kStore>,
                               dim3(static_cast<uint32_t>(ceil_div<int64_t>(total, kThreads))), dim3(kThreads), 0,
                               stream, p.enable_pdl, p, FastDivmod(static_cast<uint32_t>(cols)),
                               static_cast<uint32_t>(chunks), static_cast<uint32_t>(half),
                               static_cast<uint32_t>(total), row0));
  }
  return cudaSuccess;
}

// NOTE (H200, bf16, PDL on; benchmark/project/tune_store_embed.cu, us against the previous
// kernel, which gave each row a group of up to 256 threads with 2 chunks of k and 2 of v):
// k and v of one chunk per thread (one location load for both), 256-thread blocks, plain loads
// ("kv t256") won or tied everywhere but the tiniest calls: H=32 D=128 n=1/16/128 0.94/1.02/
// 1.50 (previous 1.24/1.30/1.65), n=32768 272.8 (279.5); H=8 n=128 1.05 (1.35). One chunk per
// thread in 128-thread blocks with read-only loads ("v1 t128 nc") was 0.91-0.95 at n=1 but 1.13
// at n=16 and 2.24 at n=128 H=32, so it served calls of up to 64 KB of k and v until session 39.
// Session 39, the same tune with --streams 64 (the bench process's state, session 34), two runs
// alike: "v1 t128 nc" / "kv t256" at n=1 H=32 D=128 1.09 / 1.05, n=1 H=8 D=128 1.11 / 0.85,
// n=1 H=1 D=576 1.08 / 0.82; so every call takes "kv t256" now. Resident blocks looping over the
// items ("loop kv"): 0.77-0.80 at those n=1 calls and 1.45-1.49 at n=128 H=32, but 74.5 / 289 at
// n=8192 / 32768 H=32 (kv t256 69.4 / 271): not taken.
// Session 40: the loads ahead of the location check (store_chunk_if; until then ptxas sank them
// below it). bench_store_kv_cache.py --no-compile, H200, before / after, A B A B on one machine,
// us: H=32 D=128 n = 1 / 16 / 128 / 1024 0.93 / 1.01 / 1.51-1.56 / 9.36-9.41 -> 0.78 / 0.84-0.85 /
// 1.34-1.36 / 8.91-8.93; n=1 H=8 0.84 -> 0.70-0.71, n=1 H=1 D=576 0.81-0.83 -> 0.67-0.68,
// n=8192 H=8 17.96-18.02 -> 17.53-17.62, n=8192 D=576 10.72-10.77 -> 10.19-10.26; n=8192 and
// 32768 H=32 within 0.3 %. The loop variants are now slower at every size (tune_store_embed.cu).

}  // namespace store_kv
}  // namespace

cudaError_t launch_store_kv_cache(const StoreKvCacheParams& p, cudaStream_t stream) {
  if (p.n == 0 || p.row_bytes == 0) return cudaSuccess;
  const int bytes = chunk_bytes({address(p.k_cache), address(p.v_cache), address(p.k), address(p.v),
                                 static_cast<uint64_t>(p.cache_stride), static_cast<uint64_t>(p.src_stride),
                                 static_cast<uint64_t>(p.row_bytes)});
  return dispatch_row_copy(bytes, p.loc_int64, [&](auto width, auto index) {
    constexpr int kBytes = decltype(width)::value;
    using TLoc = typename decltype(index)::type;
    return store_kv::launch_shape<kBytes, TLoc, 2, 1, 256, LoadPolicy::kDefault>(p, stream);
  });
}

}  // namespace sgl_kernel::project
