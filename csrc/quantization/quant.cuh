// SPDX-License-Identifier: Apache-2.0
// Device helpers shared by the quantization kernels: the absolute maximum, the scale and its
// UE8M0 rounding, the code conversions, and the scale store for every layout.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

#include "quantization/quantization.h"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::quantization {

// NOTE: |x| is maximised on its bit pattern as an unsigned integer. For non-negative floats
// the integer order is the float order, and a NaN (0x7fc00000 and up) beats +inf, so a NaN
// propagates into the scale where fmaxf would silently drop it.
__device__ __forceinline__ uint32_t abs_bits(float x) { return __float_as_uint(x) & 0x7fffffffu; }

// Maximum over `lanes` consecutive lanes (a power of two <= 32, aligned groups); every lane
// of the warp must call it.
template <int kLanes>
__device__ __forceinline__ uint32_t group_max_bits(uint32_t v) {
#pragma unroll
  for (int offset = kLanes / 2; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// max(m, |v|) that propagates NaN (PTX max.NaN; fmaxf would drop it): one FMNMX with the
// |v| operand modifier. m is non-negative or NaN, so its bits order as abs_bits does.
__device__ __forceinline__ float max_abs_nan(float m, float v) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(m), "f"(fabsf(v)));
  return r;
}

// Group maxima of K values per lane (vector k of each lane), a group being `vpg` consecutive
// lanes (powers of two, K <= vpg <= 32). Instead of K separate reductions (K * log2(vpg)
// shuffles), the lanes split the work: each exchange halves the values a lane holds, the
// upper lanes of the pair keeping the upper half. Afterwards v[0] is the group maximum of
// vector k = (lane / (vpg / K)) % K (vpg / K lanes hold each), after K - 1 + log2(vpg / K)
// shuffles. Every lane of the warp must call it.
template <int K>
__device__ __forceinline__ float group_max_split(float (&v)[K], int vpg, int lane) {
  const int span = vpg / K;  // lanes that end up holding the same k
#pragma unroll
  for (int half = K / 2; half >= 1; half /= 2) {
    const int offset = span * half;
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int i = 0; i < half; ++i) {
      const float send = upper ? v[i] : v[i + half];
      const float keep = upper ? v[i + half] : v[i];
      v[i] = max_abs_nan(keep, __shfl_xor_sync(0xffffffffu, send, offset));
    }
  }
  for (int offset = span / 2; offset >= 1; offset /= 2) {
    v[0] = max_abs_nan(v[0], __shfl_xor_sync(0xffffffffu, v[0], offset));
  }
  return v[0];
}

// Smallest power of two >= s (s >= 0); inf and NaN pass through, 0 stays 0.
__device__ __forceinline__ float ue8m0_ceil(float s) {
  const uint32_t b = __float_as_uint(s);
  const uint32_t exp = (b >> 23) & 0xffu;
  const uint32_t man = b & 0x7fffffu;
  if (exp == 0xffu) return s;
  if (exp == 0) {  // zero or subnormal: m * 2^-149 -> 2^(ceil(log2 m) - 149)
    if (man == 0) return s;
    const uint32_t k = 32 - __clz(man - 1);
    return __uint_as_float(k >= 23 ? (1u << 23) : (1u << k));
  }
  return __uint_as_float((exp + (man != 0 ? 1u : 0u)) << 23);  // 2^128 -> +inf bits
}

// The scale of a token or group from its absolute maximum (as bits): max(eps, amax) / qmax,
// IEEE division, so it equals the fp32 reference bit for bit.
__device__ __forceinline__ float scale_from_amax(uint32_t amax_bits, float eps, float qmax) {
  const uint32_t floor_bits = __float_as_uint(eps);  // eps >= 0
  return __fdiv_rn(__uint_as_float(max(amax_bits, floor_bits)), qmax);
}

// 1 / scale with IEEE rounding; 0 for a zero scale (an all-zero row quantises to 0).
__device__ __forceinline__ float inverse_scale(float s) { return s == 0.0f ? 0.0f : __frcp_rn(s); }

// scale_from_amax with the divisor's reciprocal formed ahead (a kernel can form it before its
// PDL wait): r = __frcp_rn(qmax); q_ok = qmax_recip_ok(qmax). In the ranges guarded below
// (no over- or underflow in the steps) q0 = amax * r and one remainder correction
// q0 + (amax - qmax * q0) * r give the correctly rounded quotient, the same bits as
// __fdiv_rn; outside them, and for inf / NaN, this calls __fdiv_rn. Checked on every fp32
// dividend at 11 divisors (448, 1000, 240, 57344, 127, 512, 449, 3, 1, 0.1, 65504):
// benchmark/quantization/tune_norm_quant.cu --check-div, 0 differ (H100, session 20).
__device__ __forceinline__ bool qmax_recip_ok(float qmax) {
  const uint32_t e = __float_as_uint(qmax) >> 23;  // qmax > 0: its biased exponent
  return e >= 127 - 20 && e <= 127 + 20;
}
// a / b from r = __frcp_rn(b): exact in the ranges scale_from_amax_recip guards.
__device__ __forceinline__ float remainder_div(float a, float b, float r) {
  const float q0 = a * r;
  return fmaf(fmaf(-b, q0, a), r, q0);
}
__device__ __forceinline__ float scale_from_amax_recip(uint32_t amax_bits, float eps, float qmax, float r, bool q_ok) {
  const uint32_t a = max(amax_bits, __float_as_uint(eps));
  const uint32_t e = a >> 23;  // a >= 0 (NaN: 255)
  if (q_ok && e >= 27 && e <= 233) return remainder_div(__uint_as_float(a), qmax, r);
  return __fdiv_rn(__uint_as_float(a), qmax);
}

// __frcp_rn(s) by rcp.approx and one Newton step, for positive normal s with biased exponents
// 7..220 only (equal there: tune_norm_quant.cu --check-div, every such s, H100, session 20).
__device__ __forceinline__ float rcp_refined(float s) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(s));
  return fmaf(y, fmaf(-s, y, 1.0f), y);
}

// The unchecked steps' range (norm_quant.cu's decode kernel): every group maximum (bits,
// floored at eps) with a biased exponent in 27..200 and qmax_recip_ok, so each scale has an
// exponent in 7..220, where remainder_div, rcp_refined and ue8m0_exp_normal are exact.
template <int K>
__device__ __forceinline__ bool amax_in_plain_range(const uint32_t (&amax_bits)[K], uint32_t floor_bits, bool q_ok) {
  bool ok = q_ok;
#pragma unroll
  for (int k = 0; k < K; ++k) {
    const uint32_t e = max(amax_bits[k], floor_bits) >> 23;
    ok = ok && e >= 27 && e <= 200;
  }
  return ok;
}

// The biased exponent of ue8m0_ceil(s) for a normal s below 2^127 (its power of two is
// e << 23 as bits, and the inverse of that (254 - e) << 23).
__device__ __forceinline__ uint32_t ue8m0_exp_normal(float s) {
  const uint32_t b = __float_as_uint(s);
  return (b >> 23) + ((b & 0x7fffffu) != 0 ? 1u : 0u);
}

// On the unchecked path (a scale s whose biased exponent is in 7..220, amax_in_plain_range):
// the scale the codes use (s, or its UE8M0 ceiling) and that scale's inverse.
template <bool kUe8m0>
__device__ __forceinline__ void plain_used_and_inverse(float s, float& used, float& inv) {
  if constexpr (kUe8m0) {
    const uint32_t e = ue8m0_exp_normal(s);
    used = __uint_as_float(e << 23);
    inv = __uint_as_float((254u - e) << 23);
  } else {
    used = s;
    inv = rcp_refined(s);
  }
}

// inverse_scale of a power of two (UE8M0 scales: ue8m0_ceil's results) by its exponent bits;
// 0, the extremes, inf and NaN through inverse_scale. Equal to inverse_scale on all 256
// exponents (tune_norm_quant.cu --check-div).
__device__ __forceinline__ float inverse_pow2(float s) {
  const uint32_t e = __float_as_uint(s) >> 23;
  return e >= 1 && e <= 253 ? __uint_as_float((254u - e) << 23) : inverse_scale(s);
}

// clamp(y, lo, hi) that keeps NaN (fminf/fmaxf would replace it).
__device__ __forceinline__ float clamp_keep_nan(float y, float lo, float hi) {
  return y < lo ? lo : (y > hi ? hi : y);
}

// Code of one already-scaled value.
template <QuantCode kCode>
__device__ __forceinline__ uint8_t to_code(float y, float lo, float hi) {
  y = clamp_keep_nan(y, lo, hi);
  if constexpr (kCode == QuantCode::kFp8) {
    return static_cast<uint8_t>(__nv_cvt_float_to_fp8(y, __NV_SATFINITE, __NV_E4M3));
  } else {
    // NaN converts to 0 (PTX cvt.rzi / cvt.rni); the clamp range may exceed int8's.
    const int i = kCode == QuantCode::kInt8Trunc ? __float2int_rz(y) : __float2int_rn(y);
    return static_cast<uint8_t>(static_cast<int8_t>(min(max(i, -128), 127)));
  }
}

// Whether the clamp to [lo, hi] can change a code: not when the range covers the code type's
// own (the e4m3 conversion saturates to +-448 and keeps NaN; the int8 path clamps the integer).
template <QuantCode kCode>
__host__ __device__ __forceinline__ bool needs_clamp(float lo, float hi) {
  return kCode == QuantCode::kFp8 ? !(lo <= -448.0f && hi >= 448.0f) : !(lo <= -128.0f && hi >= 127.0f);
}

// Codes of N values (N even): e4m3 pairs go through the two-wide conversion. `clamp` is
// needs_clamp(lo, hi) (uniform across the kernel): without it the compares are skipped.
template <QuantCode kCode, bool kClamp, int N>
__device__ __forceinline__ Vec<uint8_t, N> to_codes_impl(const float (&y)[N], float inv, float lo, float hi) {
  Vec<uint8_t, N> q;
  if constexpr (kCode == QuantCode::kFp8) {
#pragma unroll
    for (int e = 0; e < N; e += 2) {
      float2 pair = make_float2(y[e] * inv, y[e + 1] * inv);
      if constexpr (kClamp) pair = make_float2(clamp_keep_nan(pair.x, lo, hi), clamp_keep_nan(pair.y, lo, hi));
      const __nv_fp8x2_storage_t two = __nv_cvt_float2_to_fp8x2(pair, __NV_SATFINITE, __NV_E4M3);
      q[e] = static_cast<uint8_t>(two & 0xffu);
      q[e + 1] = static_cast<uint8_t>(two >> 8);
    }
  } else {
#pragma unroll
    for (int e = 0; e < N; ++e) {
      // to_code clamps; with the default range the integer clamp alone gives the same code.
      if constexpr (kClamp) {
        q[e] = to_code<kCode>(y[e] * inv, lo, hi);
      } else {
        const float v = y[e] * inv;
        const int i = kCode == QuantCode::kInt8Trunc ? __float2int_rz(v) : __float2int_rn(v);
        q[e] = static_cast<uint8_t>(static_cast<int8_t>(min(max(i, -128), 127)));
      }
    }
  }
  return q;
}

// The codes of N values (N a multiple of 4) as N / 4 32-bit words, byte e % 4 of word e / 4
// the code of y[e]: to_codes's bytes, built as words for 32-bit and wider stores (e4m3: two pair
// conversions a word; int8: one byte permutation a pair). A Vec<uint8_t, N> is taken apart
// byte by byte and put back together by ptxas, 4-5 instructions a word (session 40).
// NOTE (session 40, H200, bench_per_token_quant.py --no-compile, store_share_codes and the
// per-token vector kernel on words, us before / after, the after run twice): per_token_fp8
// H=4096 T = 1 / 16 / 128 / 1024 / 4096 1.28 / 1.34 / 1.54 / 3.84 / 14.36 -> 1.21-1.22 / 1.27 /
// 1.46-1.47 / 3.19-3.21 / 13.76, H=7168 T=128 1.83 -> 1.75; per_token_int8 T=128 1.77 -> 1.73;
// per_tensor_dyn_op T = 1 / 128 1.11 / 2.28 -> 1.03 / 2.21; T=32768 rows within 0.6 %. The
// norm + quant ops' vector and warp-a-row kernels keep the bytes (tune_norm_quant.cu: H=2048
// T=8192 16.0 -> 15.5 but T=32768 52.8 -> 55.1 with words; H=4096 and 7168 alike).
template <QuantCode kCode, bool kClamp, int N>
__device__ __forceinline__ Vec<uint32_t, N / 4> code_words_impl(const float (&y)[N], float inv, float lo, float hi) {
  static_assert(N % 4 == 0, "whole words");
  Vec<uint32_t, N / 4> w;
#pragma unroll
  for (int j = 0; j < N / 4; ++j) {
    float v[4];
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      v[e] = y[4 * j + e] * inv;
      if constexpr (kClamp) v[e] = clamp_keep_nan(v[e], lo, hi);
    }
    if constexpr (kCode == QuantCode::kFp8) {
      const uint32_t a = __nv_cvt_float2_to_fp8x2(make_float2(v[0], v[1]), __NV_SATFINITE, __NV_E4M3);
      const uint32_t b = __nv_cvt_float2_to_fp8x2(make_float2(v[2], v[3]), __NV_SATFINITE, __NV_E4M3);
      w[j] = a | b << 16;
    } else {
      int i[4];  // as to_code: NaN converts to 0, then the int8 range
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        i[e] = min(max(kCode == QuantCode::kInt8Trunc ? __float2int_rz(v[e]) : __float2int_rn(v[e]), -128), 127);
      }
      // Low bytes: (i0, i1) and (i2, i3) side by side, then the two pairs.
      w[j] = __byte_perm(__byte_perm(i[0], i[1], 0x0040), __byte_perm(i[2], i[3], 0x0040), 0x5410);
    }
  }
  return w;
}

template <QuantCode kCode, int N>
__device__ __forceinline__ Vec<uint32_t, N / 4> code_words(const float (&y)[N], float inv, float lo, float hi,
                                                           bool clamp = true) {
  return clamp ? code_words_impl<kCode, true>(y, inv, lo, hi) : code_words_impl<kCode, false>(y, inv, lo, hi);
}

// The e4m3 codes of four values (y * inv, no clamp: to_codes<kFp8> with clamp false) as one
// 32-bit word, byte e the code of y[e], for a 32-bit store (norm_quant.cu's decode step). Its
// own body, not code_words_impl's: written through that, ptxas schedules norm_quant.cu's
// many-row kernels differently (same counts), and this form is the one measured.
__device__ __forceinline__ uint32_t e4m3_word(const float (&y)[4], float inv) {
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(y[0] * inv, y[1] * inv), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(y[2] * inv, y[3] * inv), __NV_SATFINITE, __NV_E4M3);
  return lo | hi << 16;
}

template <QuantCode kCode, int N>
__device__ __forceinline__ Vec<uint8_t, N> to_codes(const float (&y)[N], float inv, float lo, float hi,
                                                    bool clamp = true) {
  return clamp ? to_codes_impl<kCode, true>(y, inv, lo, hi) : to_codes_impl<kCode, false>(y, inv, lo, hi);
}

// A thread's share of a row or tensor held in registers (the one-pass kernels: maximum, then
// codes, the input read once): vectors i = first + u * stride, u < kVpt, of the 16-byte
// vectors [0, count) of `src`; slots past `count` are left unset and skipped by the two
// functions after this one.
template <LoadPolicy kPolicy = LoadPolicy::kDefault, typename T, int kVpt>
__device__ __forceinline__ void load_share(Vec16<T> (&x)[kVpt], const T* src, int64_t first, int64_t stride,
                                           int64_t count) {
#pragma unroll
  for (int u = 0; u < kVpt; ++u) {
    if (first + u * stride < count) x[u] = load16<T, kPolicy>(src + (first + u * stride) * kVec16<T>);
  }
}

// max(amax, the abs_bits of every element of the share).
template <typename T, int kVpt>
__device__ __forceinline__ uint32_t share_max_bits(const Vec16<T> (&x)[kVpt], int64_t first, int64_t stride,
                                                   int64_t count, uint32_t amax) {
#pragma unroll
  for (int u = 0; u < kVpt; ++u) {
    if (first + u * stride < count) {
#pragma unroll
      for (int e = 0; e < kVec16<T>; ++e) amax = max(amax, abs_bits(to_float(x[u][e])));
    }
  }
  return amax;
}

// The codes of one vector (x * inv).
template <QuantCode kCode, typename T, int kVec>
__device__ __forceinline__ Vec<uint8_t, kVec> vec_codes(const Vec<T, kVec>& x, float inv, float lo, float hi,
                                                        bool clamp) {
  float y[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) y[e] = to_float(x[e]);
  return to_codes<kCode>(y, inv, lo, hi, clamp);
}

// vec_codes as 32-bit words (code_words; kVec a multiple of 4).
template <QuantCode kCode, typename T, int kVec>
__device__ __forceinline__ Vec<uint32_t, kVec / 4> vec_code_words(const Vec<T, kVec>& x, float inv, float lo, float hi,
                                                                  bool clamp) {
  float y[kVec];
#pragma unroll
  for (int e = 0; e < kVec; ++e) y[e] = to_float(x[e]);
  return code_words<kCode>(y, inv, lo, hi, clamp);
}

// The share's codes (x * inv) into dst (one byte an element, vector i at dst + i * kVec; the
// vectors are 16-byte ones, or narrower where a caller loads them so).
template <QuantCode kCode, typename T, int kVec, int kVpt>
__device__ __forceinline__ void store_share_codes(const Vec<T, kVec> (&x)[kVpt], uint8_t* dst, int64_t first,
                                                  int64_t stride, int64_t count, float inv, float lo, float hi,
                                                  bool clamp) {
#pragma unroll
  for (int u = 0; u < kVpt; ++u) {
    const int64_t i = first + u * stride;
    if (i >= count) continue;
    if constexpr (kVec % 4 == 0) {
      *reinterpret_cast<Vec<uint32_t, kVec / 4>*>(dst + i * kVec) = vec_code_words<kCode>(x[u], inv, lo, hi, clamp);
    } else {
      *reinterpret_cast<Vec<uint8_t, kVec>*>(dst + i * kVec) = vec_codes<kCode>(x[u], inv, lo, hi, clamp);
    }
  }
}

// The scale the codes use, for a lane that does not store it (see store_scale).
__device__ __forceinline__ float codes_scale(const ScaleOut& so, float s) {
  return so.round_ue8m0 && so.codes_use_rounded ? ue8m0_ceil(s) : s;
}

// Store the scale of (e, m, g). `s` is the exact scale; returns the scale the codes use.
__device__ __forceinline__ float store_scale(const ScaleOut& so, int64_t e, int64_t m, int64_t g, float s) {
  const float rounded = so.round_ue8m0 ? ue8m0_ceil(s) : s;
  const int64_t base = e * so.stride_e + m * so.stride_m;
  if (so.packed_ue8m0) {
    uint8_t* word = reinterpret_cast<uint8_t*>(static_cast<int32_t*>(so.ptr) + base + (g >> 2) * so.stride_g);
    const uint32_t exp = (__float_as_uint(rounded) >> 23) & 0xffu;
    word[g & 3] = static_cast<uint8_t>(exp);
    if (g == so.groups - 1) {
      for (int64_t b = (g & 3) + 1; b < 4; ++b) word[b] = 0;
    }
  } else {
    static_cast<float*>(so.ptr)[base + g * so.stride_g] = rounded;
  }
  return so.codes_use_rounded ? rounded : s;
}

}  // namespace sgl_kernel::quantization
