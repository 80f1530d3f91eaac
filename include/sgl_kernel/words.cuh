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
// -> T rounds to nearest even per element (as from_float), one cvt per word. add: the
// elementwise sum of two words rounded to T, bit for bit pack(unpack(a) + unpack(b)) (fp32 holds
// at least 2p + 2 bits of a p-bit type, so rounding the fp32 sum again to T is the same as
// rounding the exact sum once, subnormals included), in one packed instruction for 16-bit types.
// NOTE (H200, session 32): the fused norms' residual sum (row_norm.cuh) unpacked both words,
// added in fp32 and packed back: 5 instructions a pair where add is 1, in kernels whose rows
// sit in the registers of one warp per scheduler, so nothing hid them. tools/decode_rows.py,
// HEAD's headers against these, alternated twice on one machine, us at T = 1 / 16 / 128, bf16:
// fused_add_rmsnorm H=4096 1.28 / 1.40 / 1.79 -> 1.21 / 1.29 / 1.74; H=7168 1.61 / 1.76 / 2.28
// -> 1.49-1.51 / 1.63 / 2.18; H=8192 1.56 / 1.74-1.75 / 2.49 -> 1.55-1.57 / 1.74 / 2.42-2.46;
// add_rmsnorm_q H=4096 1.44 / 1.55 / 1.91 -> 1.34 / 1.45 / 1.84; add_rmsnorm_ue8m0 H=7168
// 1.91 / 1.99 / 2.56 -> 1.72 / 1.81 / 2.37. The plain ops did not move.
template <typename T>
struct Words;

template <>
struct Words<float> {
  static constexpr int kPer = 1;
  static __device__ __forceinline__ void unpack(uint32_t w, float* f) { f[0] = __uint_as_float(w); }
  static __device__ __forceinline__ uint32_t pack(const float* f) { return __float_as_uint(f[0]); }
  static __device__ __forceinline__ uint32_t add(uint32_t a, uint32_t b) {
    return __float_as_uint(__uint_as_float(a) + __uint_as_float(b));
  }
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
  static __device__ __forceinline__ uint32_t add(uint32_t a, uint32_t b) {
    uint32_t d;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm("add.rn.bf16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(0x3f803f80u), "r"(b));  // a * 1 + b: one rounding
#else
    float f[2], g[2];
    unpack(a, f);
    unpack(b, g);
    f[0] += g[0];
    f[1] += g[1];
    d = pack(f);
#endif
    return d;
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
  static __device__ __forceinline__ uint32_t add(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
  }
};

}  // namespace sgl_kernel
