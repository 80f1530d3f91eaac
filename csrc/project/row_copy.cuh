// SPDX-License-Identifier: Apache-2.0
// Building blocks of the row gathers/scatters (store_kv_cache.cu, embedding_lookup.cu):
// a row is a byte string copied in chunks of kBytes (16 when every pointer, row pitch and
// the row size allow it, else the widest of 8, 4, 2, 1 that does), each row by a
// power-of-two group of threads of a block, several rows per block when rows are short.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include <cuda_runtime.h>

#include "project/project.h"  // chunk_bytes
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::project {

// The register type of one kBytes-wide load or store.
template <int kBytes>
using Chunk = std::conditional_t<
    kBytes == 16, uint4,
    std::conditional_t<kBytes == 8, uint2,
                       std::conditional_t<kBytes == 4, uint32_t, std::conditional_t<kBytes == 2, uint16_t, uint8_t>>>>;

// One kBytes store: kDefault st.global, kStream st.global.cs (written once, evict first; 4, 8
// and 16 bytes, narrower chunks store plainly).
template <int kBytes, StorePolicy kStore>
__device__ __forceinline__ void store_chunk(Chunk<kBytes>* p, const Chunk<kBytes>& v) {
  static_assert(kStore == StorePolicy::kDefault || kStore == StorePolicy::kStream, "kDefault or kStream");
  if constexpr (kStore == StorePolicy::kDefault || kBytes < 4) {
    *p = v;
  } else if constexpr (kBytes == 16) {
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
                 : "memory");
  } else if constexpr (kBytes == 8) {
    asm volatile("st.global.cs.v2.u32 [%0], {%1, %2};" ::"l"(p), "r"(v.x), "r"(v.y) : "memory");
  } else {
    asm volatile("st.global.cs.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
  }
}

// store_chunk when `pred` holds, as one predicated st.global: no branch for ptxas to sink the
// chunk's load below. With `if (pred) store_chunk(...)` it does: ptxas 13.0 moved store_kv_cache's
// loads (volatile asm, used only by stores under the location check) below that check, so each
// thread waited out its location's round trip before it asked for its data (sm_90a SASS,
// session 40).
template <int kBytes, StorePolicy kStore>
__device__ __forceinline__ void store_chunk_if(bool pred, Chunk<kBytes>* p, const Chunk<kBytes>& v) {
  static_assert(kStore == StorePolicy::kDefault || kStore == StorePolicy::kStream, "kDefault or kStream");
  constexpr bool kCs = kStore == StorePolicy::kStream;
  const uint32_t q = pred ? 1u : 0u;
#define SGL_ST_IF(OP, ...) \
  "{\n .reg .pred q;\n setp.ne.b32 q, %0, 0;\n @q " OP " [%1], " __VA_ARGS__ ";\n}"
  if constexpr (kBytes == 16) {
    if constexpr (kCs) {
      asm volatile(SGL_ST_IF("st.global.cs.v4.u32", "{%2, %3, %4, %5}")::"r"(q), "l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                   "r"(v.w)
                   : "memory");
    } else {
      asm volatile(SGL_ST_IF("st.global.v4.u32", "{%2, %3, %4, %5}")::"r"(q), "l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
                   "r"(v.w)
                   : "memory");
    }
  } else if constexpr (kBytes == 8) {
    if constexpr (kCs) {
      asm volatile(SGL_ST_IF("st.global.cs.v2.u32", "{%2, %3}")::"r"(q), "l"(p), "r"(v.x), "r"(v.y) : "memory");
    } else {
      asm volatile(SGL_ST_IF("st.global.v2.u32", "{%2, %3}")::"r"(q), "l"(p), "r"(v.x), "r"(v.y) : "memory");
    }
  } else if constexpr (kBytes == 4) {
    if constexpr (kCs) {
      asm volatile(SGL_ST_IF("st.global.cs.u32", "%2")::"r"(q), "l"(p), "r"(v) : "memory");
    } else {
      asm volatile(SGL_ST_IF("st.global.u32", "%2")::"r"(q), "l"(p), "r"(v) : "memory");
    }
  } else if constexpr (kBytes == 2) {  // narrower chunks store plainly, as store_chunk
    asm volatile(SGL_ST_IF("st.global.u16", "%2")::"r"(q), "l"(p), "h"(static_cast<uint16_t>(v)) : "memory");
  } else {
    asm volatile(SGL_ST_IF("st.global.u8", "%2")::"r"(q), "l"(p), "h"(static_cast<uint16_t>(v)) : "memory");
  }
#undef SGL_ST_IF
}

inline uint64_t address(const void* p) { return reinterpret_cast<uintptr_t>(p); }

template <typename T>
struct IndexType {
  using type = T;
};

// f(std::integral_constant<int, kBytes>{}, IndexType<TIdx>{}) for the chunk width and the
// index type (int64_t or int32_t) chosen at run time.
template <typename F>
cudaError_t dispatch_row_copy(int bytes, bool index_int64, F&& f) {
  const auto with_width = [&](auto width) {
    return index_int64 ? f(width, IndexType<int64_t>{}) : f(width, IndexType<int32_t>{});
  };
  switch (bytes) {
    case 16: return with_width(std::integral_constant<int, 16>{});
    case 8: return with_width(std::integral_constant<int, 8>{});
    case 4: return with_width(std::integral_constant<int, 4>{});
    case 2: return with_width(std::integral_constant<int, 2>{});
    case 1: return with_width(std::integral_constant<int, 1>{});
  }
  return cudaErrorInvalidValue;
}

// Launch shape of a row copy: blocks of kThreads threads; each row is handled by
// 2^log2_threads_per_row threads (the largest power of two that gives every thread at
// least `unroll` chunks of the row, at most kThreads), so a block covers
// kThreads >> log2_threads_per_row rows.
struct RowTiling {
  int log2_threads_per_row;
  dim3 grid;
};

inline RowTiling row_tiling(int64_t rows, int64_t chunks_per_row, int unroll, int threads) {
  RowTiling t{0, dim3(1)};
  while ((int64_t{2} << t.log2_threads_per_row) <= threads &&
         (int64_t{2} << t.log2_threads_per_row) * unroll <= chunks_per_row) {
    ++t.log2_threads_per_row;
  }
  const int64_t rows_per_block = threads >> t.log2_threads_per_row;
  // Rows beyond 2^31 - 1 blocks are covered by the kernels' grid-stride loop.
  const int64_t blocks = ceil_div<int64_t>(rows, rows_per_block);
  t.grid = dim3(static_cast<uint32_t>(blocks < INT32_MAX ? blocks : INT32_MAX));
  return t;
}

}  // namespace sgl_kernel::project
