// SPDX-License-Identifier: Apache-2.0
// A 16-byte vector held as four 32-bit words, and the conversions of one word to and from its
// fp32 elements. Kernels that keep whole rows in registers use it instead of Vec16<T>: a
// Vec16<__nv_bfloat16> copied element by element takes a register per element (twice the
// registers), which spills at the register caps those kernels run under.
#pragma once

#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "sgl_kernel/vec.cuh"

namespace sgl_kernel {

using Word4 = Vec<uint32_t, 4>;

// Words<T>::kPer elements of T per word. unpack: bf16 and fp16 -> fp32 are exact. pack: fp32
// -> T rounds to nearest even per element (as from_float), one cvt per word.
template <typename T>
struct Words;

template <>
struct Words<float> {
  static constexpr int kPer = 1;
  static __device__ __forceinline__ void unpack(uint32_t w, float* f) { f[0] = __uint_as_float(w); }
  static __device__ __forceinline__ uint32_t pack(const float* f) { return __float_as_uint(f[0]); }
};

template <>
struct Words<__nv_bfloat16> {
  static constexpr int kPer = 2;
  static __device__ __forceinline__ void unpack(uint32_t w, float* f) {
    f[0] = __uint_as_float(w << 16);
    f[1] = __uint_as_float(w & 0xffff0000u);
  }
  static __device__ __forceinline__ uint32_t pack(const float* f) {
    const __nv_bfloat162 h = __floats2bfloat162_rn(f[0], f[1]);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

template <>
struct Words<half> {
  static constexpr int kPer = 2;
  static __device__ __forceinline__ void unpack(uint32_t w, float* f) {
    const float2 v = __half22float2(*reinterpret_cast<const half2*>(&w));
    f[0] = v.x;
    f[1] = v.y;
  }
  static __device__ __forceinline__ uint32_t pack(const float* f) {
    const half2 h = __floats2half2_rn(f[0], f[1]);
    return *reinterpret_cast<const uint32_t*>(&h);
  }
};

}  // namespace sgl_kernel
