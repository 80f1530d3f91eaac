// SPDX-License-Identifier: Apache-2.0
// downcast_fp8: scale fp16/bf16 K/V rows to e4m3 and scatter them into KV-cache slots
// loc[t] * mult + offset. A thread converts one 16-byte column chunk (8 halves -> 8 e4m3
// bytes) of k, of v, or of both, in kRows consecutive tokens; it issues every load (loc, the
// scales, all its vectors) before it uses any, so a token's loc and its data arrive together.
// The quotient x / scale is __fdiv_rn's, computed from one reciprocal per thread (scaled_e4m3).
// A slot outside [0, slots) is skipped (SGL_KERNEL_DEBUG=1: the bindings raise first).
#include <cuda_fp8.h>

#include <cstdint>
#include <type_traits>

#include "elementwise/elementwise.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::elementwise {

namespace {

// Largest block of any shape below (the launcher's size check leaves room for its rounding).
constexpr int kMaxThreads = 256;

// The scales where the reciprocal division below equals __fdiv_rn; others take __fdiv_rn.
constexpr float kFastDivMinScale = 0x1p-64f;
constexpr float kFastDivMaxScale = 0x1p64f;

struct ScaleDiv {
  float s;    // the scale
  float r;    // RN(1 / s)
  float lim;  // 512 * s (exact): inputs are clamped to +-lim, which encodes as +-448
};

__device__ __forceinline__ ScaleDiv make_scale_div(float s) { return {s, __frcp_rn(s), 512.0f * s}; }

__device__ __forceinline__ bool fast_div_ok(float s) { return s >= kFastDivMinScale && s <= kFastDivMaxScale; }

// x / s, clamped to +-448 (the conversion below then saturates to the e4m3 code of
// clamp(__fdiv_rn(x, s), -448, 448), the formula of API.md).
// NOTE: the fast path is bit-exact with that formula for every input value (NaN, +-inf,
// subnormals, -0 included) when s is in [2^-64, 2^64]:
//  - quotient: q0 = RN(x r), t = RN(q0 s - x) (exact), q = RN(q0 - t r) equals RN(x / s) for
//    every fp32 significand of s and every 11-bit significand of x, which covers all fp16 and
//    bf16 values: 2^33 pairs checked exhaustively on the host, no mismatch (the same check with
//    q = q0 finds 2.3e9 mismatches). Scaling x or s by powers of two scales every step exactly
//    as long as r, q0, t and q stay normal floats, which holds for quotients in [2^-11, 2^9]
//    when s is in range; for quotients below 2^-11 both results stay below 2^-10, the e4m3
//    zero threshold, and copysign keeps __fdiv_rn's sign (also for -0).
//  - clamp first: |x| >= 512 s encodes as +-448 either way; an inf becomes +-512 s (old: +-inf
//    clamped to +-448), a NaN becomes -512 s (old: fmaxf(NaN, -448) = -448), so no NaN or
//    overflow reaches the quotient and the later +-448 clamp is left to the saturating
//    conversion (quotients in (448, 512] encode as 448 like the clamped value).
//  - whole pipeline: every fp16 and bf16 bit pattern x 612 scales in range (random, edges, 0.05,
//    0.07) against the old formula on the host, with PTX min/max NaN rules: no mismatch;
//    tune_downcast_fp8.cu checks the kernels against the old one bitwise on the GPU.
// Cost per element: 2 FMNMX + FMUL + 2 FFMA + LOP3 against __fdiv_rn's FFMA chain with a
// slow-path check, plus the old clamp.
template <bool kFast>
__device__ __forceinline__ float scaled_e4m3(float x, const ScaleDiv& d) {
  if constexpr (kFast) {
    const float c = fminf(fmaxf(x, -d.lim), d.lim);
    const float q0 = __fmul_rn(c, d.r);
    const float t = __fmaf_rn(q0, d.s, -c);
    return copysignf(__fmaf_rn(-t, d.r, q0), c);
  } else {
    return fminf(fmaxf(__fdiv_rn(x, d.s), -448.0f), 448.0f);
  }
}

// 8 inputs -> 8 e4m3 bytes, element e in byte e (round to nearest, saturating).
template <bool kFast, typename T>
__device__ __forceinline__ uint2 to_e4m3x8(const Vec16<T>& x, const ScaleDiv& d) {
  uint32_t w[2];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    uint32_t pair[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
      const int e = 4 * h + 2 * k;
      const float2 f = make_float2(scaled_e4m3<kFast>(to_float(x[e]), d), scaled_e4m3<kFast>(to_float(x[e + 1]), d));
      pair[k] = __nv_cvt_float2_to_fp8x2(f, __NV_SATFINITE, __NV_E4M3);  // x[e] in the low byte
    }
    w[h] = pair[0] | (pair[1] << 16);
  }
  return make_uint2(w[0], w[1]);
}

// Work of one thread: kTensors 1 (the grid's first half does k, the second half v) or 2 (k and
// v of the same chunk, one loc load for both), kRows consecutive tokens; kFastDiv false keeps
// __fdiv_rn for every element (tune_downcast_fp8.cu measures what the fast path buys).
// Grid: x over threads; thread i takes column chunk c of row group g (kRows tokens from
// g * kRows) for (g, c) = divmod(i', chunks_per_row), with i' = i (kTensors 2) or i' = i
// minus the k half (kTensors 1, i >= half: v). Rows past the last token load the last token
// again (loads stay unconditional) and store nothing.
template <typename T, int kTensors, int kRows, int kThreads, LoadPolicy kLoad, bool kFastDiv>
__global__ void __launch_bounds__(kThreads)
    downcast_fp8_kernel(const DowncastFp8Params<T> p, const FastDivmod chunks_per_row, const uint32_t half,
                        const uint32_t total_threads) {
  static_assert(kTensors == 1 || kTensors == 2, "one tensor or both per thread");
  static_assert(kThreads <= kMaxThreads, "the launcher's size check assumes kMaxThreads");
  const uint32_t i = blockIdx.x * kThreads + threadIdx.x;
  const bool active = i < total_threads;
  const bool is_v = kTensors == 1 && i >= half;
  uint32_t g, c;
  chunks_per_row.divmod(is_v ? i - half : i, g, c);
  const uint32_t t0 = g * kRows;
  const uint32_t last = static_cast<uint32_t>(p.tokens - 1);
  const int64_t col = static_cast<int64_t>(c) * 8;

  SGL_PDL_WAIT();  // before any input is read
  SGL_PDL_LAUNCH_DEPENDENTS();  // early: see sgl_kernel/arch.cuh
  if (active) {
    const T* src0 = kTensors == 2 ? p.k : (is_v ? p.v : p.k);
    int64_t loc[kRows];
    Vec16<T> x[kTensors][kRows];
#pragma unroll
    for (int j = 0; j < kRows; ++j) {
      const uint32_t t = j == 0 ? t0 : min(t0 + j, last);
      loc[j] = __ldg(p.loc + t);
      const int64_t off = static_cast<int64_t>(t) * p.row + col;
      x[0][j] = load16<T, kLoad>(src0 + off);
      if constexpr (kTensors == 2) x[1][j] = load16<T, kLoad>(p.v + off);
    }
    float s[kTensors];
    s[0] = __ldg(kTensors == 2 ? p.k_scale : (is_v ? p.v_scale : p.k_scale));
    if constexpr (kTensors == 2) s[1] = __ldg(p.v_scale);

    uint8_t* dst0 = kTensors == 2 ? p.k_out : (is_v ? p.v_out : p.k_out);
    const auto store_rows = [&](auto fast) {
      ScaleDiv d[kTensors];
#pragma unroll
      for (int m = 0; m < kTensors; ++m) d[m] = make_scale_div(s[m]);
#pragma unroll
      for (int j = 0; j < kRows; ++j) {
        const int64_t slot = loc[j] * p.mult + p.offset;
        if ((j == 0 || t0 + j <= last) && slot >= 0 && slot < p.slots) {
          const int64_t off = slot * p.row + col;
          *reinterpret_cast<uint2*>(dst0 + off) = to_e4m3x8<decltype(fast)::value>(x[0][j], d[0]);
          if constexpr (kTensors == 2) {
            *reinterpret_cast<uint2*>(p.v_out + off) = to_e4m3x8<decltype(fast)::value>(x[1][j], d[1]);
          }
        }
      }
    };
    bool fast = kFastDiv && fast_div_ok(s[0]);
    if constexpr (kTensors == 2) fast = fast && fast_div_ok(s[1]);
    // Uniform over the grid (one scale per tensor): no divergence.
    if (fast) {
      store_rows(std::true_type{});
    } else {
      store_rows(std::false_type{});
    }
  }
}

template <typename T, int kTensors, int kRows, int kThreads, LoadPolicy kLoad, bool kFastDiv = true>
cudaError_t launch_shape(const DowncastFp8Params<T>& p, cudaStream_t stream) {
  const int64_t chunks_per_row = p.row / 8;
  const int64_t per_tensor = ceil_div<int64_t>(p.tokens, kRows) * chunks_per_row;
  const int64_t threads = per_tensor * (3 - kTensors);  // 2 halves, or one for both
  return launch_kernel(downcast_fp8_kernel<T, kTensors, kRows, kThreads, kLoad, kFastDiv>,
                       dim3(static_cast<uint32_t>(ceil_div<int64_t>(threads, kThreads))),
                       dim3(kThreads), 0, stream, p.enable_pdl, p,
                       FastDivmod(static_cast<uint32_t>(chunks_per_row)), static_cast<uint32_t>(per_tensor),
                       static_cast<uint32_t>(threads));
}

// NOTE (H200, bf16 H=8 D=128, PDL on; benchmark/elementwise/tune_downcast_fp8.cu, us, against
// the previous kernel: one vector per thread, loc read before the data, __fdiv_rn):
// - up to 2^18 16-byte vectors: one vector per thread, 128-thread blocks, read-only loads:
//   T=1/16/128 0.87/0.93/1.24 (previous 1.20/1.27/1.45). k and v of a chunk per thread was
//   0.98/1.04/1.13; two tokens per thread 0.97/1.30/1.40.
// - larger: k and v of one chunk per thread (one loc load and divmod for both), 256-thread
//   blocks, plain loads: T=4096 7.57, T=32768 48.8 (4134 GB/s; previous 10.1 / 69.1; the same
//   with read-only loads 8.0 / 52.9, one vector per thread 11.2 / 80.3).
// - the reciprocal division against __fdiv_rn in the same shapes: 0.87 against 1.12 at T=1,
//   48.8 against 53.0 at T=32768.
constexpr int64_t kSmallMaxVectors = int64_t{1} << 18;

}  // namespace

template <typename T>
cudaError_t launch_downcast_fp8(const DowncastFp8Params<T>& p, cudaStream_t stream) {
  if (p.tokens == 0 || p.row == 0) return cudaSuccess;
  if (p.row % 8 != 0) return cudaErrorInvalidValue;
  const int64_t total = 2 * p.tokens * (p.row / 8);  // 16-byte vectors of k and v
  if (total >= (int64_t{1} << 32) - kMaxThreads) return cudaErrorInvalidValue;
  if (total <= kSmallMaxVectors) return launch_shape<T, 1, 1, 128, LoadPolicy::kStream>(p, stream);
  return launch_shape<T, 2, 1, 256, LoadPolicy::kDefault>(p, stream);
}

template cudaError_t launch_downcast_fp8<half>(const DowncastFp8Params<half>&, cudaStream_t);
template cudaError_t launch_downcast_fp8<__nv_bfloat16>(const DowncastFp8Params<__nv_bfloat16>&, cudaStream_t);

}  // namespace sgl_kernel::elementwise
