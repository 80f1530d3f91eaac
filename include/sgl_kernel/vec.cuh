// SPDX-License-Identifier: Apache-2.0
// 16-byte vector loads/stores. Kernels take the vector path only when the launcher has
// checked alignment (is_aligned16 on every pointer and row pitch); tails and misaligned
// inputs go through the scalar path of the same kernel file.
#pragma once

#include <cstdint>
#include <type_traits>
#include <cuda_runtime.h>

namespace sgl_kernel {

// Elements of T in one 16-byte vector.
template <typename T>
inline constexpr int kVec16 = 16 / static_cast<int>(sizeof(T));

template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T data[N];
  __device__ __forceinline__ T& operator[](int i) { return data[i]; }
  __device__ __forceinline__ const T& operator[](int i) const { return data[i]; }
};

template <typename T>
using Vec16 = Vec<T, kVec16<T>>;

static_assert(sizeof(Vec<float, 4>) == 16, "Vec16 must be 16 bytes");

__host__ __device__ inline bool is_aligned16(const void* p) {
  return (reinterpret_cast<uintptr_t>(p) & 15u) == 0;
}

// Rows at `ptr` with a pitch of `stride_elems` elements of `elem_bytes` bytes all start on an
// `align_bytes` boundary (a power of two).
__host__ __device__ inline bool rows_aligned(const void* ptr, int64_t stride_elems, int elem_bytes, int align_bytes) {
  return (reinterpret_cast<uintptr_t>(ptr) & static_cast<uintptr_t>(align_bytes - 1)) == 0 &&
         (stride_elems * elem_bytes) % align_bytes == 0;
}
__host__ __device__ inline bool rows_aligned16(const void* ptr, int64_t stride_elems, int elem_bytes) {
  return rows_aligned(ptr, stride_elems, elem_bytes, 16);
}

// Cache policies of 16-byte accesses (PTX cache operators / eviction priorities).
enum class LoadPolicy {
  kDefault,     // ld.global: cached in L1 and L2 (data the block re-reads)
  kStream,      // ld.global.nc.L1::no_allocate: read once, read-only for the whole kernel
  kEvictFirst,  // ld.global.cs: read once, evict first from L1 and L2
  kPrefetch,    // ld.global.L2::256B: ask L2 to fetch the whole 256-byte block
  kStreamPrefetch,  // ld.global.nc.L1::no_allocate.L2::256B
  // Eviction priorities for data read twice by the same block (a first pass, then a re-read):
  kKeepL2,      // ld.global.L2::cache_hint, an L2 evict_last policy (read again soon)
  kDropL2,      // ld.global.L2::cache_hint, an L2 evict_first policy (the last read)
  kKeepL1L2,    // ld.global.L1::evict_last.L2::cache_hint, L2 evict_last
  kDropL1L2,    // ld.global.L1::evict_first.L2::cache_hint, L2 evict_first
  kKeepL1,      // ld.global.L1::evict_last
  kDropL1,      // ld.global.L1::evict_first
};

// A 64-bit L2 cache policy covering every access that names it (createpolicy, fraction 1).
// Not volatile: the compiler may hoist and share it between loads.
template <bool kEvictLast>
__device__ __forceinline__ uint64_t l2_policy() {
  uint64_t pol;
  if constexpr (kEvictLast) {
    asm("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(pol));
  } else {
    asm("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(pol));
  }
  return pol;
}
enum class StorePolicy {
  kDefault,     // st.global (write-back; the next kernel usually reads it from L2)
  kStream,      // st.global.cs: written once, evict first
  kKeepL2,      // st.global.L2::cache_hint, an L2 evict_last policy (read again soon)
};

template <typename T, LoadPolicy kPolicy = LoadPolicy::kDefault>
__device__ __forceinline__ Vec16<T> load16(const T* p) {
  Vec16<T> v;
  if constexpr (kPolicy == LoadPolicy::kDefault) {
    // Through uint4: a Vec16 of a type with its own copy assignment (half2, __nv_bfloat162)
    // is otherwise copied member by member, as four 4-byte loads.
    *reinterpret_cast<uint4*>(&v) = *reinterpret_cast<const uint4*>(p);
  } else {
    uint4 r;
    if constexpr (kPolicy == LoadPolicy::kStream) {
      asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                   : "l"(p));
    } else if constexpr (kPolicy == LoadPolicy::kEvictFirst) {
      asm volatile("ld.global.cs.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                   : "l"(p));
    } else if constexpr (kPolicy == LoadPolicy::kPrefetch) {
      asm volatile("ld.global.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                   : "l"(p));
    } else if constexpr (kPolicy == LoadPolicy::kKeepL2 || kPolicy == LoadPolicy::kDropL2) {
      asm volatile("ld.global.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                   : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                   : "l"(p), "l"(l2_policy<kPolicy == LoadPolicy::kKeepL2>()));
    } else if constexpr (kPolicy == LoadPolicy::kKeepL1L2) {
      asm volatile("ld.global.L1::evict_last.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                   : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                   : "l"(p), "l"(l2_policy<true>()));
    } else if constexpr (kPolicy == LoadPolicy::kDropL1L2) {
      asm volatile("ld.global.L1::evict_first.L2::cache_hint.v4.u32 {%0, %1, %2, %3}, [%4], %5;"
                   : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                   : "l"(p), "l"(l2_policy<false>()));
    } else if constexpr (kPolicy == LoadPolicy::kKeepL1) {
      asm volatile("ld.global.L1::evict_last.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                   : "l"(p));
    } else if constexpr (kPolicy == LoadPolicy::kDropL1) {
      asm volatile("ld.global.L1::evict_first.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                   : "l"(p));
    } else {
      asm volatile("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
                   : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                   : "l"(p));
    }
    *reinterpret_cast<uint4*>(&v) = r;
  }
  return v;
}

// Loads of 4, 8 or 16 bytes (a Vec<T, N> of that size) with a cache policy; 4- and 8-byte
// loads support kDefault and kStream.
template <typename V, LoadPolicy kPolicy = LoadPolicy::kDefault>
__device__ __forceinline__ V load_vec(const void* p) {
  static_assert(sizeof(V) == 4 || sizeof(V) == 8 || sizeof(V) == 16, "4-, 8- or 16-byte vectors");
  V v;
  if constexpr (kPolicy == LoadPolicy::kDefault) {
    // Through a plain word of the vector's size (see load16).
    using W = std::conditional_t<sizeof(V) == 16, uint4, std::conditional_t<sizeof(V) == 8, uint2, uint32_t>>;
    *reinterpret_cast<W*>(&v) = *reinterpret_cast<const W*>(p);
  } else if constexpr (sizeof(V) == 16) {
    using T = std::remove_cv_t<std::remove_reference_t<decltype(v.data[0])>>;
    v = load16<T, kPolicy>(reinterpret_cast<const T*>(p));
  } else {
    static_assert(kPolicy == LoadPolicy::kStream, "4/8-byte loads: kDefault or kStream");
    if constexpr (sizeof(V) == 8) {
      uint2 r;
      asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
      *reinterpret_cast<uint2*>(&v) = r;
    } else {
      uint32_t r;
      asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r) : "l"(p));
      *reinterpret_cast<uint32_t*>(&v) = r;
    }
  }
  return v;
}

// Store of a 4-, 8- or 16-byte vector as one instruction (through a plain word of its size,
// as load_vec: a struct copy may be split into member stores).
template <typename V>
__device__ __forceinline__ void store_vec(void* p, const V& v) {
  static_assert(sizeof(V) == 4 || sizeof(V) == 8 || sizeof(V) == 16, "4-, 8- or 16-byte vectors");
  using W = std::conditional_t<sizeof(V) == 16, uint4, std::conditional_t<sizeof(V) == 8, uint2, uint32_t>>;
  *reinterpret_cast<W*>(p) = *reinterpret_cast<const W*>(&v);
}

// 16-byte load of data read exactly once, that no thread of the same kernel writes.
template <typename T>
__device__ __forceinline__ Vec16<T> load16_stream(const T* p) {
  return load16<T, LoadPolicy::kStream>(p);
}

template <typename T, StorePolicy kPolicy = StorePolicy::kDefault>
__device__ __forceinline__ void store16(T* p, const Vec16<T>& v) {
  if constexpr (kPolicy == StorePolicy::kDefault) {
    *reinterpret_cast<uint4*>(p) = *reinterpret_cast<const uint4*>(&v);  // one 16-byte store (see load16)
  } else if constexpr (kPolicy == StorePolicy::kKeepL2) {
    const uint4 r = *reinterpret_cast<const uint4*>(&v);
    asm volatile("st.global.L2::cache_hint.v4.u32 [%0], {%1, %2, %3, %4}, %5;" ::"l"(p), "r"(r.x), "r"(r.y), "r"(r.z),
                 "r"(r.w), "l"(l2_policy<true>())
                 : "memory");
  } else {
    const uint4 r = *reinterpret_cast<const uint4*>(&v);
    asm volatile("st.global.cs.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(r.x), "r"(r.y), "r"(r.z),
                 "r"(r.w)
                 : "memory");
  }
}

}  // namespace sgl_kernel
