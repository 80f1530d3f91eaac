// SPDX-License-Identifier: Apache-2.0
// Launch-shape and cache-policy sweep of the silu_and_mul vector kernel (activation.cuh),
// standalone (no torch), to choose the production configuration in activation.cu (the NOTE
// in its launch_typed quotes the H200 numbers of this sweep).
//
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Icsrc \
//        benchmark/elementwise/tune_act_and_mul.cu -o /tmp/tune && /tmp/tune [--rounds N] [--streams N]
//
// Prints GB/s (input read + output write) per variant at prefill shapes (inputs rotated so
// nothing is served from L2) and per-launch time inside a CUDA graph at decode shapes; with
// --rounds N each section runs N times over its variants. Besides the launch shapes: "siluN"
// rows, other formulations of silu (silu_pair / silu_quad below; their accuracy against fp64
// is printed too; "trig after loads" rows place the PDL trigger as production does), "floor"
// rows, kernels that move the same bytes with no arithmetic (the NOTE in activation.cuh quotes
// both), and gelu / gelu_tanh launch shapes at the prefill sizes (activation.cu's NOTE).
// "sv2" rows (session 19): the vector kernel restructured (no branch before the loads, ex2 /
// rcp with .ftz, value order, no bounds check, shared reciprocals); the ones that
// compute production's silu are checked bitwise against it, and production's silu against
// the .ftz form on all 2^32 fp32 inputs. --decode-only skips the prefill section.
#include <algorithm>
#include <cstdio>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "elementwise/activation.cuh"
#include "sgl_kernel/launch.cuh"
#include "../tune_common.cuh"

using namespace sgl_kernel;
using namespace sgl_kernel::elementwise;
using T = __nv_bfloat16;

using KernelFn = void (*)(T*, const T*, FastDivmod, uint32_t);

// Vector i of the output: its two input vectors (gate half a, up half b), read-only loads.
__device__ __forceinline__ void load_halves(const T* input, const FastDivmod& d_vec, uint32_t i, Vec<T, 8>& a,
                                            Vec<T, 8>& b) {
  const int64_t half = static_cast<int64_t>(d_vec.divisor) * 8;
  uint32_t row, col;
  d_vec.divmod(i, row, col);
  const T* x = input + static_cast<int64_t>(row) * 2 * half + static_cast<int64_t>(col) * 8;
  a = load_vec<Vec<T, 8>, LoadPolicy::kStream>(x);
  b = load_vec<Vec<T, 8>, LoadPolicy::kStream>(x + half);
}

// Memory floors with the vector kernel's indexing (16-byte vectors, one per thread): kMode 0
// reads both halves and writes a + b (the same bytes as silu_and_mul, no transcendental),
// 1 reads both halves and writes only where the sum is a NaN (reads alone), 2 writes a
// constant (writes alone).
// The PDL trigger: right after the wait, or once the loads are issued (kAfterLoads, as
// production's vector kernel).
template <int kThreads, int kMode, bool kAfterLoads = false>
__global__ void __launch_bounds__(kThreads) floor_kernel(T* __restrict__ out, const T* __restrict__ input,
                                                         FastDivmod d_vec, uint32_t total_vec) {
  using V = Vec<T, 8>;
  SGL_PDL_WAIT();
  if constexpr (!kAfterLoads) SGL_PDL_LAUNCH_DEPENDENTS();
  const uint32_t i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= total_vec) {
    if constexpr (kAfterLoads) SGL_PDL_LAUNCH_DEPENDENTS();
    return;
  }
  V o;
  if constexpr (kMode == 2) {
    if constexpr (kAfterLoads) SGL_PDL_LAUNCH_DEPENDENTS();
#pragma unroll
    for (int k = 0; k < 8; ++k) o[k] = from_float<T>(1.0f);
    *reinterpret_cast<V*>(out + static_cast<int64_t>(i) * 8) = o;
    return;
  } else {
    V a, b;
    load_halves(input, d_vec, i, a, b);
    if constexpr (kAfterLoads) SGL_PDL_LAUNCH_DEPENDENTS();
    float acc = 0.f;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      o[k] = from_float<T>(to_float(a[k]) + to_float(b[k]));
      acc += to_float(o[k]);
    }
    if (kMode == 0 || acc != acc) *reinterpret_cast<V*>(out + static_cast<int64_t>(i) * 8) = o;
  }
}

struct Variant {
  const char* name;
  KernelFn fn;
  int threads;
  int unroll;
  int vec_elems = 8;
};

#define VARIANT(TH, VE, UN, LD, NAME) \
  Variant { NAME, act_and_mul_vec_kernel<T, Activation::kSilu, TH, VE, UN, LD>, TH, UN, VE }
// Production's one-vector-a-thread kernel with kPin (plain loads; activation.cuh).
#define VARIANT_PIN(VE, NAME) \
  Variant { NAME, act_and_mul_vec_kernel<T, Activation::kSilu, 256, VE, 1, LoadPolicy::kDefault, true>, 256, 1, VE }
// gelu (erf) and gelu_tanh, 16-byte plain loads (prefill rows only)
#define GELU_VARIANT(ACT, TH, UN, NAME) \
  Variant { NAME, act_and_mul_vec_kernel<T, Activation::ACT, TH, 8, UN, LoadPolicy::kDefault>, TH, UN, 8 }
#define GELU_ROWS(ACT, TAG)                                                                              \
  GELU_VARIANT(ACT, 256, 2, TAG ": t256 16B u2"), GELU_VARIANT(ACT, 512, 2, TAG ": t512 16B u2"),        \
      GELU_VARIANT(ACT, 256, 1, TAG ": t256 16B u1"), GELU_VARIANT(ACT, 128, 1, TAG ": t128 16B u1"),    \
      GELU_VARIANT(ACT, 128, 2, TAG ": t128 16B u2"), GELU_VARIANT(ACT, 512, 1, TAG ": t512 16B u1")

// silu formulations (one 16-byte vector per thread, read-only loads: the "mid" shape). The
// multi-function unit (ex2, rcp, tanh: 16 results per clock per SM) runs 2 ops per element in
// the production form; these spend fewer:
//   0 production: x / (1 + 2^(-x log2 e)) with __expf and __fdividef (2 MUFU)
//   1 0.5 x (1 + tanh.approx(x / 2)) (1 MUFU; loses relative accuracy for x << 0)
//   2 ex2 in fp32, the reciprocal by two Newton steps from an integer guess (1 MUFU)
//   4 as 0 with ex2.approx and rcp.approx directly (no __fdividef range handling)
//   3 ex2.approx.f16x2 on pairs, then rcp.approx (1.5 MUFU; 2^(-x log2 e) overflows fp16 for
//     x < -11.1: the result is then -0)
__device__ __forceinline__ float tanh_approx(float x) {
  float y;
  asm("tanh.approx.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float ex2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_approx(float x) {
  float y;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
__device__ __forceinline__ float rcp_newton(float y) {  // y >= 1, finite
  float r = __int_as_float(0x7EF311C3 - __float_as_int(y));
  r = fmaf(r, fmaf(-y, r, 1.0f), r);
  r = fmaf(r, fmaf(-y, r, 1.0f), r);
  return r;
}
template <int kMode>
__device__ __forceinline__ void silu_pair(float x0, float x1, float& y0, float& y1) {
  constexpr float kLog2e = 1.4426950408889634f;
  if constexpr (kMode == 0) {
    y0 = __fdividef(x0, 1.0f + __expf(-x0));
    y1 = __fdividef(x1, 1.0f + __expf(-x1));
  } else if constexpr (kMode == 1) {
    const float h0 = 0.5f * x0, h1 = 0.5f * x1;
    y0 = fmaf(h0, tanh_approx(h0), h0);
    y1 = fmaf(h1, tanh_approx(h1), h1);
  } else if constexpr (kMode == 2) {
    y0 = x0 * rcp_newton(1.0f + ex2_approx(fminf(-x0 * kLog2e, 126.0f)));
    y1 = x1 * rcp_newton(1.0f + ex2_approx(fminf(-x1 * kLog2e, 126.0f)));
  } else if constexpr (kMode == 4) {
    y0 = x0 * rcp_approx(1.0f + ex2_approx(-x0 * kLog2e));
    y1 = x1 * rcp_approx(1.0f + ex2_approx(-x1 * kLog2e));
  } else {
    const __half2 t = __floats2half2_rn(-x0 * kLog2e, -x1 * kLog2e);
    uint32_t e;
    asm("ex2.approx.f16x2 %0, %1;" : "=r"(e) : "r"(*reinterpret_cast<const uint32_t*>(&t)));
    const __half2 eh = *reinterpret_cast<const __half2*>(&e);
    y0 = x0 * __frcp_rn(1.0f + __low2float(eh));
    y1 = x1 * __frcp_rn(1.0f + __high2float(eh));
  }
}
// Mode 6: four values with one reciprocal between them. 1 / d_j for the denominators
// d_j = 1 + e^-x_j comes from r = 1 / (d0 d1 d2 d3) and products of the others
// (1 / d0 = r (d2 d3) d1): 5 multi-function-unit ops per 4 values instead of 8. The product
// must stay below 1e37 so that its reciprocal is normal (rcp.approx.ftz flushes below
// 2^-126); past that (x < ~-21 on average) and for inf / NaN, one by one.
__device__ __forceinline__ void silu4_shared_rcp(const float (&x)[4], float (&y)[4]) {
  constexpr float kLog2e = 1.4426950408889634f;
  float d[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) d[j] = 1.0f + ex2_approx(-x[j] * kLog2e);
  const float p01 = d[0] * d[1], p23 = d[2] * d[3], p = p01 * p23;
  if (__builtin_expect(p < 1e37f, 1)) {  // false for inf and NaN
    const float r = rcp_approx(p);
    const float r01 = r * p23, r23 = r * p01;
    y[0] = x[0] * (r01 * d[1]);
    y[1] = x[1] * (r01 * d[0]);
    y[2] = x[2] * (r23 * d[3]);
    y[3] = x[3] * (r23 * d[2]);
  } else {
#pragma unroll
    for (int j = 0; j < 4; ++j) y[j] = __fdividef(x[j], d[j]);
  }
}
// Four values at a time: modes 0-4 as two pairs, mode 6 above.
template <int kMode>
__device__ __forceinline__ void silu_quad(const float (&x)[4], float (&y)[4]) {
  if constexpr (kMode == 6) {
    silu4_shared_rcp(x, y);
  } else {
    silu_pair<kMode>(x[0], x[1], y[0], y[1]);
    silu_pair<kMode>(x[2], x[3], y[2], y[3]);
  }
}
// kAfterLoads: the PDL trigger once the loads are issued, as production's vector kernel.
template <int kMode, bool kAfterLoads = false>
__global__ void __launch_bounds__(256) silu_mode_kernel(T* __restrict__ out, const T* __restrict__ input,
                                                        FastDivmod d_vec, uint32_t total_vec) {
  using V = Vec<T, 8>;
  SGL_PDL_WAIT();
  if constexpr (!kAfterLoads) SGL_PDL_LAUNCH_DEPENDENTS();
  const uint32_t i = blockIdx.x * 256 + threadIdx.x;
  if (i >= total_vec) {
    if constexpr (kAfterLoads) SGL_PDL_LAUNCH_DEPENDENTS();
    return;
  }
  V a, b;
  load_halves(input, d_vec, i, a, b);
  if constexpr (kAfterLoads) SGL_PDL_LAUNCH_DEPENDENTS();
  V o;
#pragma unroll
  for (int k = 0; k < 8; k += 4) {
    float x[4], y[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) x[j] = to_float(a[k + j]);
    silu_quad<kMode>(x, y);
#pragma unroll
    for (int j = 0; j < 4; ++j) o[k + j] = from_float<T>(y[j] * to_float(b[k + j]));
  }
  *reinterpret_cast<V*>(out + static_cast<int64_t>(i) * 8) = o;
}
// silu_ftz: production's formula with ex2.approx.ftz and rcp.approx.ftz directly, bitwise
// equal to __fdividef(x, 1 + __expf(-x)) (__expf's fix-ups only change results below 2^-126,
// which 1 + e absorbs; checked on all 2^32 inputs below).
__device__ __forceinline__ float silu_ftz(float x) {
  return x * rcp_approx(1.0f + ex2_approx(x * -1.4426950408889634f));
}
// The vector kernel restructured (session 19): one 16-byte vector a thread, 256 threads,
// read-only loads, trigger after the loads, all 8 values of the vector widened first:
//   kOrder 0: value by value (silu, times up); 1: the 8 silu values first, then the 8
//     products; 2: up's vector loaded before gate's.
//   kExact: no bounds check (the grid covers total_vec exactly; T=128 d=14336 does); off:
//     threads past the end leave at once (a branch); kClamp: no branch, threads past the end
//     load the last vector and skip the store. (Where the compiler put the kernel parameters'
//     constant loads relative to the wait differed between these, and the timings with it.)
//   kPin: the thread's gate address prefetched before the wait (pdl_wait_prefetched). With
//     the read-only (.nc) loads the compiler then moved the loads above the wait as well
//     (invalid: they may read what the previous kernel is still writing; T=128 timed 1.68 us
//     so, session 19), hence only with kPlain: plain ld.global loads, which stay after it.
//   kMath 1: silu_ftz (production's bits); 3: a + b (the floor); 4: two values sharing one
//     rcp.approx (1.5 multi-function ops a value); 5: four values sharing one (1.25, mode 6's
//     form).
__device__ __forceinline__ void silu2_shared_rcp(float x0, float x1, float& y0, float& y1) {
  constexpr float kL = -1.4426950408889634f;
  const float d0 = 1.0f + ex2_approx(x0 * kL), d1 = 1.0f + ex2_approx(x1 * kL);
  const float p = d0 * d1;
  if (__builtin_expect(p < 1e37f, 1)) {
    const float r = rcp_approx(p);
    y0 = x0 * (r * d1);
    y1 = x1 * (r * d0);
  } else {
    y0 = x0 * rcp_approx(d0);
    y1 = x1 * rcp_approx(d1);
  }
}
template <int kMath, int kOrder, bool kExact, bool kClamp = false, bool kPin = false, bool kPlain = false>
__global__ void __launch_bounds__(256) silu_sv2_kernel(T* __restrict__ out, const T* __restrict__ input,
                                                       FastDivmod d_vec, uint32_t total_vec) {
  const uint32_t i = blockIdx.x * 256 + threadIdx.x;
  const uint32_t ic = kClamp ? min(i, total_vec - 1) : i;
  const int64_t half = static_cast<int64_t>(d_vec.divisor) * 8;
  uint32_t row, col;
  d_vec.divmod(ic, row, col);
  const T* x = input + static_cast<int64_t>(row) * 2 * half + static_cast<int64_t>(col) * 8;
  if constexpr (kPin) {
    static_assert(kExact || kClamp, "the prefetched address must be valid");
    static_assert(kPlain, "read-only loads move above the wait (the note above)");
    pdl_wait_prefetched(x);  // kPin: the address computed before the wait (sgl_kernel/arch.cuh)
  } else {
    SGL_PDL_WAIT();
  }
  if (!kExact && !kClamp && i >= total_vec) {
    SGL_PDL_LAUNCH_DEPENDENTS();
    return;
  }
  uint4 a, b;
  if constexpr (kPlain) {  // plain ld.global (ordered after the wait like any load)
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a.x), "=r"(a.y), "=r"(a.z), "=r"(a.w) : "l"(x) : "memory");
    asm volatile("ld.global.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(b.x), "=r"(b.y), "=r"(b.z), "=r"(b.w) : "l"(x + half) : "memory");
  } else if constexpr (kOrder == 2) {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(b.x), "=r"(b.y), "=r"(b.z), "=r"(b.w) : "l"(x + half));
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a.x), "=r"(a.y), "=r"(a.z), "=r"(a.w) : "l"(x));
  } else {
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a.x), "=r"(a.y), "=r"(a.z), "=r"(a.w) : "l"(x));
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(b.x), "=r"(b.y), "=r"(b.z), "=r"(b.w) : "l"(x + half));
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
  const uint32_t aw[4] = {a.x, a.y, a.z, a.w}, bw[4] = {b.x, b.y, b.z, b.w};
  float xa[8], yb[8], o[8];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __nv_bfloat162 av = *reinterpret_cast<const __nv_bfloat162*>(&aw[j]);
    xa[2 * j] = __low2float(av);
    xa[2 * j + 1] = __high2float(av);
  }
  auto load_b = [&] {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const __nv_bfloat162 bv = *reinterpret_cast<const __nv_bfloat162*>(&bw[j]);
      yb[2 * j] = __low2float(bv);
      yb[2 * j + 1] = __high2float(bv);
    }
  };
  if constexpr (kMath == 1) {
    if constexpr (kOrder == 1) {
      float sx[8];
#pragma unroll
      for (int k = 0; k < 8; ++k) sx[k] = silu_ftz(xa[k]);
      load_b();
#pragma unroll
      for (int k = 0; k < 8; ++k) o[k] = sx[k] * yb[k];
    } else {
      load_b();
#pragma unroll
      for (int k = 0; k < 8; ++k) o[k] = silu_ftz(xa[k]) * yb[k];
    }
  } else if constexpr (kMath == 3) {  // no arithmetic: the floor
    load_b();
#pragma unroll
    for (int k = 0; k < 8; ++k) o[k] = xa[k] + yb[k];
  } else if constexpr (kMath == 4) {
    float sx[8];
#pragma unroll
    for (int k = 0; k < 8; k += 2) silu2_shared_rcp(xa[k], xa[k + 1], sx[k], sx[k + 1]);
    load_b();
#pragma unroll
    for (int k = 0; k < 8; ++k) o[k] = sx[k] * yb[k];
  } else {
    float sx[8];
#pragma unroll
    for (int k = 0; k < 8; k += 4) {
      const float xs[4] = {xa[k], xa[k + 1], xa[k + 2], xa[k + 3]};
      float ys[4];
      silu4_shared_rcp(xs, ys);
#pragma unroll
      for (int q = 0; q < 4; ++q) sx[k + q] = ys[q];
    }
    load_b();
#pragma unroll
    for (int k = 0; k < 8; ++k) o[k] = sx[k] * yb[k];
  }
  uint32_t ow[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(o[2 * j], o[2 * j + 1]);
    ow[j] = *reinterpret_cast<const uint32_t*>(&v);
  }
  if (!kClamp || i < total_vec)
    *reinterpret_cast<uint4*>(out + static_cast<int64_t>(i) * 8) = make_uint4(ow[0], ow[1], ow[2], ow[3]);
}
// Every fp32 bit pattern: production's silu against silu_ftz; counts the patterns whose
// results differ (both NaN counts as equal).
__global__ void silu_ftz_exhaustive_kernel(unsigned long long* mismatches) {
  unsigned long long local = 0;
  for (uint64_t k = uint64_t(blockIdx.x) * blockDim.x + threadIdx.x; k < (uint64_t(1) << 32);
       k += uint64_t(gridDim.x) * blockDim.x) {
    const float x = __uint_as_float(uint32_t(k));
    const float p = activate<Activation::kSilu>(x), q = silu_ftz(x);
    if (__float_as_uint(p) != __float_as_uint(q) && !(p != p && q != q)) ++local;
  }
  if (local) atomicAdd(mismatches, local);
}
// Accuracy of a formulation: silu of n points in fp32 (n a multiple of 4).
template <int kMode>
__global__ void silu_points_kernel(const float* x, float* y, int n) {
  const int i = 4 * (blockIdx.x * blockDim.x + threadIdx.x);
  if (i + 3 < n) {
    const float xs[4] = {x[i], x[i + 1], x[i + 2], x[i + 3]};
    float ys[4];
    silu_quad<kMode>(xs, ys);
#pragma unroll
    for (int j = 0; j < 4; ++j) y[i + j] = ys[j];
  }
}

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

static int g_num_sms = 132;

static void launch(const Variant& v, T* out, const T* in, int64_t rows, int64_t d, cudaStream_t s,
                   bool pdl = false) {
  const int64_t total_vec = rows * d / v.vec_elems;
  const dim3 grid(uint32_t((total_vec + v.threads * v.unroll - 1) / (v.threads * v.unroll)));
  CK(launch_kernel(v.fn, grid, dim3(v.threads), 0, s, pdl, out, in, FastDivmod(uint32_t(d / v.vec_elems)),
                   uint32_t(total_vec)));
}

int main(int argc, char** argv) {
  using LP = LoadPolicy;
  // --rounds N: each timing section runs N times over all its variants (alternated, so a
  // clock drift shows as a round-to-round difference rather than a variant difference).
  int rounds = 1;
  for (int a = 1; a + 1 < argc; ++a)
    if (std::string(argv[a]) == "--rounds") rounds = std::max(1, std::atoi(argv[a + 1]));
  bool decode_only = false;  // --decode-only: skip the prefill GB/s section
  for (int a = 1; a < argc; ++a)
    if (std::string(argv[a]) == "--decode-only") decode_only = true;
  int streams = 0;  // --streams N: tune_common::extra_streams first (the bench's process state)
  for (int a = 1; a + 1 < argc; ++a)
    if (std::string(argv[a]) == "--streams") streams = std::atoi(argv[a + 1]);
  // The four launch shapes of activation.cu first (the one-vector ones as before session 19,
  // read-only loads without kPin; production's kPin instances are the "x.. pin" rows at the
  // end), then alternatives; every variant of this list computes production's silu (the
  // bitwise agreement check below).
  const std::vector<Variant> variants = {
      VARIANT(512, 8, 2, LP::kDefault, "large: t512 16B u2"),
      VARIANT(256, 8, 1, LP::kStream, "mid: t256 16B u1 nc"),
      VARIANT(256, 4, 1, LP::kStream, "mid-small: t256 8B u1 nc"),
      VARIANT(256, 2, 1, LP::kStream, "small: t256 4B u1 nc"),
      VARIANT(256, 8, 1, LP::kDefault, "t256 16B u1"),
      VARIANT(128, 8, 1, LP::kDefault, "t128 16B u1"),
      VARIANT(128, 8, 1, LP::kStream, "t128 16B u1 nc"),
      VARIANT(256, 8, 2, LP::kStream, "t256 16B u2 nc"),
      VARIANT(256, 4, 2, LP::kDefault, "t256 8B u2"),
      VARIANT(512, 8, 1, LP::kStream, "t512 16B u1 nc"),
      VARIANT(128, 8, 2, LP::kStream, "t128 16B u2 nc"),
      VARIANT(1024, 8, 1, LP::kStream, "t1024 16B u1 nc"),
      VARIANT(256, 8, 4, LP::kStream, "t256 16B u4 nc"),
      VARIANT(128, 8, 4, LP::kStream, "t128 16B u4 nc"),
      VARIANT(512, 8, 2, LP::kStream, "t512 16B u2 nc"),
      VARIANT(256, 8, 1, LP::kStreamPrefetch, "t256 16B u1 nc L2::256B"),
      VARIANT(128, 8, 2, LP::kDefault, "t128 16B u2"),
      VARIANT(256, 8, 2, LP::kDefault, "t256 16B u2"),
      VARIANT(1024, 8, 2, LP::kDefault, "t1024 16B u2"),
      VARIANT(512, 8, 1, LP::kDefault, "t512 16B u1"),
      VARIANT(512, 8, 4, LP::kDefault, "t512 16B u4"),
      VARIANT(1024, 8, 1, LP::kDefault, "t1024 16B u1"),
      VARIANT(256, 8, 4, LP::kDefault, "t256 16B u4"),
      VARIANT(256, 8, 2, LP::kEvictFirst, "t256 16B u2 ld.cs"),
      VARIANT(256, 8, 2, LP::kPrefetch, "t256 16B u2 ld.L2::256B"),
      VARIANT_PIN(8, "x16 pin (production)"),
      VARIANT_PIN(4, "x8 pin (production)"),
      VARIANT_PIN(2, "x4 pin (production)"),
  };
  const size_t n_agree = variants.size();
  // Other silu formulations and the floors (they compute something else).
  const std::vector<Variant> others = {
      Variant{"silu1 tanh.approx", silu_mode_kernel<1>, 256, 1, 8},
      Variant{"silu2 ex2 + newton rcp", silu_mode_kernel<2>, 256, 1, 8},
      Variant{"silu3 ex2.f16x2 + rcp", silu_mode_kernel<3>, 256, 1, 8},
      Variant{"silu0 (mid, as a mode)", silu_mode_kernel<0>, 256, 1, 8},
      Variant{"silu4 ex2 + rcp.approx", silu_mode_kernel<4>, 256, 1, 8},
      Variant{"silu0 trig after loads", silu_mode_kernel<0, true>, 256, 1, 8},
      Variant{"silu6 rcp/4, trig after loads", silu_mode_kernel<6, true>, 256, 1, 8},
      Variant{"sv2 ftz", silu_sv2_kernel<1, 0, false>, 256, 1, 8},
      Variant{"sv2 ftz gate first", silu_sv2_kernel<1, 1, false>, 256, 1, 8},
      Variant{"sv2 ftz up loaded first", silu_sv2_kernel<1, 2, false>, 256, 1, 8},
      Variant{"sv2 ftz exact", silu_sv2_kernel<1, 0, true>, 256, 1, 8},
      Variant{"sv2 ftz clamp", silu_sv2_kernel<1, 0, false, true>, 256, 1, 8},
      Variant{"sv2 ftz gate first clamp", silu_sv2_kernel<1, 1, false, true>, 256, 1, 8},
      Variant{"sv2 ftz exact plain", silu_sv2_kernel<1, 0, true, false, false, true>, 256, 1, 8},
      Variant{"sv2 ftz exact pin plain", silu_sv2_kernel<1, 0, true, false, true, true>, 256, 1, 8},
      Variant{"sv2 ftz clamp pin plain", silu_sv2_kernel<1, 0, false, true, true, true>, 256, 1, 8},
      Variant{"sv2 floor exact pin plain", silu_sv2_kernel<3, 0, true, false, true, true>, 256, 1, 8},
      Variant{"sv2 floor", silu_sv2_kernel<3, 0, false>, 256, 1, 8},
      Variant{"sv2 floor exact", silu_sv2_kernel<3, 0, true>, 256, 1, 8},
      Variant{"sv2 floor clamp", silu_sv2_kernel<3, 0, false, true>, 256, 1, 8},
      Variant{"sv2 rcp/2", silu_sv2_kernel<4, 0, false>, 256, 1, 8},
      Variant{"sv2 rcp/4", silu_sv2_kernel<5, 0, false>, 256, 1, 8},
      Variant{"silu4 trig after loads", silu_mode_kernel<4, true>, 256, 1, 8},
      Variant{"floor: read 2 + write 1", floor_kernel<256, 0>, 256, 1, 8},
      Variant{"floor: reads only", floor_kernel<256, 1>, 256, 1, 8},
      Variant{"floor: writes only", floor_kernel<256, 2>, 256, 1, 8},
      Variant{"floor: read 2 + write 1, trig after loads", floor_kernel<256, 0, true>, 256, 1, 8},
      Variant{"floor: reads only, trig after loads", floor_kernel<256, 1, true>, 256, 1, 8},
  };
  // Prefill timing: 16-byte variants with plain or streaming loads, and the floor.
  std::vector<Variant> prefill;
  for (const Variant& v : variants)
    if (v.vec_elems == 8) prefill.push_back(v);
  for (const Variant& v : others)
    if (std::string(v.name) == "floor: read 2 + write 1") prefill.push_back(v);
  // gelu and gelu_tanh (production: 256 threads, 2 vectors a thread).
  for (const Variant& v : std::vector<Variant>{GELU_ROWS(kGeluTanh, "gelu_tanh"), GELU_ROWS(kGelu, "gelu")})
    prefill.push_back(v);
  // Decode timing: everything.
  std::vector<Variant> decode = variants;
  decode.insert(decode.end(), others.begin(), others.end());
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  tune_common::extra_streams(s, streams);
  CK(cudaDeviceGetAttribute(&g_num_sms, cudaDevAttrMultiProcessorCount, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  // Copy bandwidth for reference (bytes read + written).
  {
    const size_t n = size_t(1) << 31;
    void *a, *b;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    CK(cudaMemsetAsync(a, 1, n, s));
    std::vector<float> ts;
    for (int i = 0; i < 12; ++i) {
      CK(cudaEventRecord(e0, s));
      CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s));
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (i >= 2) ts.push_back(ms);
    }
    std::printf("device copy: %.0f GB/s\n", 2.0 * n / (median(ts) * 1e-3) / 1e9);
    CK(cudaFree(a));
    CK(cudaFree(b));
  }

  struct Shape {
    int64_t rows, d;
  };
  const std::vector<Shape> shapes = {{32768, 14336}, {16384, 14336}, {4096, 14336}, {1024, 14336}, {32768, 4096}, {1024, 4096}};
  // Rotate among enough buffer sets to exceed the L2 (60 MB) by far.
  const size_t budget = size_t(6) << 30;
  T* pool;
  CK(cudaMalloc(&pool, budget));
  tune_common::fill_bf16_kernel<<<4096, 256, 0, s>>>(pool, budget / sizeof(T), 1234u, -4.0f, 8.0f);
  CK(cudaGetLastError());

  for (int round = 0; round < (decode_only ? 0 : rounds); ++round) {
  std::printf("\n%-30s", round == 0 ? "variant \\ (rows x d) GB/s" : "(next round)");
  for (const Shape& sh : shapes) std::printf(" %7ldx%-6ld", long(sh.rows), long(sh.d));
  std::printf("\n");
  for (const Variant& v : prefill) {
    std::printf("%-30s", v.name);
    for (const Shape& sh : shapes) {
      const size_t in_elems = size_t(sh.rows) * 2 * sh.d, out_elems = size_t(sh.rows) * sh.d;
      const size_t set_bytes = (in_elems + out_elems) * sizeof(T);
      const int nsets = int(std::max<size_t>(1, std::min<size_t>(budget / set_bytes, 16)));
      std::vector<float> ts;
      const int iters = 30;
      for (int i = 0; i < iters + 3; ++i) {
        T* in = pool + size_t(i % nsets) * (in_elems + out_elems);
        T* out = in + in_elems;
        CK(cudaEventRecord(e0, s));
        launch(v, out, in, sh.rows, sh.d, s);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 3) ts.push_back(ms);
      }
      std::printf(" %14.0f", double(set_bytes) / (median(ts) * 1e-3) / 1e9);
    }
    std::printf("\n");
  }
  }

  // Correctness across variants: all must produce bit-identical outputs.
  {
    const int64_t rows = 1000, d = 14336;
    const size_t in_elems = size_t(rows) * 2 * d, out_elems = size_t(rows) * d;
    std::vector<uint16_t> ref(out_elems), got(out_elems);
    T* out = pool + in_elems;
    for (size_t k = 0; k < n_agree; ++k) {
      CK(cudaMemsetAsync(out, 0xff, out_elems * sizeof(T), s));
      launch(variants[k], out, pool, rows, d, s);
      CK(cudaMemcpyAsync(k == 0 ? ref.data() : got.data(), out, out_elems * sizeof(T), cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
      if (k > 0 && got != ref) std::printf("MISMATCH: %s differs from %s\n", variants[k].name, variants[0].name);
    }
    std::printf("variants agree bitwise: checked %zu variants\n", n_agree);
    // The restructured kernels that compute production's silu (kMath 0 and 1).
    for (const Variant& v : others) {
      const std::string name = v.name;
      const bool candidate = name.rfind("sv", 0) == 0 || name.rfind("silu4", 0) == 0;
      if (!candidate || name.find("tanh") != std::string::npos || name.find("floor") != std::string::npos ||
          name.find("rcp/") != std::string::npos)
        continue;
      CK(cudaMemsetAsync(out, 0xff, out_elems * sizeof(T), s));
      launch(v, out, pool, rows, d, s);
      CK(cudaMemcpyAsync(got.data(), out, out_elems * sizeof(T), cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
      std::printf("%s: %s production bitwise\n", v.name, got == ref ? "equals" : "DIFFERS FROM");
    }
    unsigned long long* mm;
    CK(cudaMalloc(&mm, sizeof(unsigned long long)));
    CK(cudaMemset(mm, 0, sizeof(unsigned long long)));
    silu_ftz_exhaustive_kernel<<<g_num_sms * 8, 256>>>(mm);
    unsigned long long h_mm = 0;
    CK(cudaMemcpy(&h_mm, mm, sizeof(h_mm), cudaMemcpyDeviceToHost));
    CK(cudaFree(mm));
    std::printf("silu_ftz against production's silu, all 2^32 fp32 inputs: %llu differ\n", h_mm);
  }

  // Accuracy of the silu formulations against fp64 on x in [-120, 120] (plus +-inf, NaN):
  // the largest relative error where |silu| > 1e-30, the largest absolute error, and the
  // largest error in bf16 / fp16 steps after rounding both to the type.
  {
    std::vector<float> xs;
    for (int i = 0; i < (1 << 20); ++i) xs.push_back(-120.0f + 240.0f * i / float(1 << 20));
    for (int i = 0; i < 4096; ++i) xs.push_back(-8.0f + 16.0f * i / 4096.0f + 1e-3f);
    const int sp = int(xs.size());  // the special values
    xs.push_back(-INFINITY);
    xs.push_back(INFINITY);
    xs.push_back(NAN);
    xs.push_back(0.0f);
    // Each special value beside finite ones in a quad (mode 6 shares a reciprocal in quads).
    for (float sv : {-INFINITY, INFINITY, NAN}) {
      xs.push_back(1.5f);
      xs.push_back(sv);
      xs.push_back(-2.0f);
      xs.push_back(30.0f);
    }
    while (xs.size() % 4) xs.push_back(1.0f);
    const int n = int(xs.size());
    float *dx, *dy;
    CK(cudaMalloc(&dx, n * 4));
    CK(cudaMalloc(&dy, n * 4));
    CK(cudaMemcpy(dx, xs.data(), n * 4, cudaMemcpyHostToDevice));
    std::vector<float> ys(n);
    using PointsFn = void (*)(const float*, float*, int);
    const int modes[6] = {0, 1, 2, 3, 4, 6};
    const PointsFn fns[6] = {silu_points_kernel<0>, silu_points_kernel<1>, silu_points_kernel<2>, silu_points_kernel<3>,
                             silu_points_kernel<4>, silu_points_kernel<6>};
    auto bf16_of = [](float f) { return double(__bfloat162float(__float2bfloat16_rn(f))); };
    auto fp16_of = [](float f) { return double(__half2float(__float2half_rn(f))); };
    for (int m = 0; m < 6; ++m) {
      fns[m]<<<(n / 4 + 255) / 256, 256>>>(dx, dy, n);
      CK(cudaMemcpy(ys.data(), dy, n * 4, cudaMemcpyDeviceToHost));
      double max_rel = 0, max_abs = 0, rel_at = 0, bf_steps = 0, h_steps = 0;
      for (int i = 0; i < sp; ++i) {
        const double x = xs[i], ref = x / (1.0 + std::exp(-x));
        const double err = std::fabs(double(ys[i]) - ref);
        if (std::fabs(ref) > 1e-30 && err / std::fabs(ref) > max_rel) {
          max_rel = err / std::fabs(ref);
          rel_at = x;
        }
        max_abs = std::max(max_abs, err);
        const double rb = bf16_of(float(ref)), gb = bf16_of(ys[i]);
        const double ub = std::max(std::fabs(rb) * std::ldexp(1.0, -8), 1e-38);
        bf_steps = std::max(bf_steps, std::fabs(gb - rb) / ub);
        if (std::fabs(ref) < 6e4) {
          const double rh = fp16_of(float(ref)), gh = fp16_of(ys[i]);
          const double uh = std::max(std::fabs(rh) * std::ldexp(1.0, -11), std::ldexp(1.0, -24));
          h_steps = std::max(h_steps, std::fabs(gh - rh) / uh);
        }
      }
      std::printf("silu mode %d: max rel %.2e (x = %.3f), max abs %.2e, bf16 steps %.1f, fp16 steps %.1f; "
                  "silu(-inf, inf, nan, 0) = %g %g %g %g; beside 1.5, -2, 30: %g %g %g, %g %g %g, %g %g %g\n",
                  modes[m], max_rel, rel_at, max_abs, bf_steps, h_steps, ys[sp], ys[sp + 1], ys[sp + 2], ys[sp + 3],
                  ys[sp + 5], ys[sp + 4], ys[sp + 6], ys[sp + 9], ys[sp + 8], ys[sp + 10], ys[sp + 13], ys[sp + 12],
                  ys[sp + 14]);
    }
    CK(cudaFree(dx));
    CK(cudaFree(dy));
  }

  // Decode shapes: per-launch time inside a CUDA graph of 100 launches.
  for (int round = 0; round < rounds; ++round) {
  std::printf("\n%-30s %8s %8s %8s %8s %8s %8s %8s %8s  (us per launch in a graph with PDL, hot; d=14336 then d=4096)\n",
              "variant", "T=1", "T=16", "T=32", "T=64", "T=128", "T=1", "T=16", "T=128");
  for (const Variant& v : decode) {
    std::printf("%-30s", v.name);
    for (int64_t dd : {14336, 4096})
    for (int64_t rows : {1, 16, 32, 64, 128}) {
      if (dd == 4096 && (rows == 32 || rows == 64)) continue;
      cudaGraph_t g;
      cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      for (int i = 0; i < 100; ++i) launch(v, pool + size_t(rows) * 2 * dd, pool, rows, dd, s, true);
      CK(cudaStreamEndCapture(s, &g));
      CK(cudaGraphInstantiate(&ge, g, 0));
      std::vector<float> ts;
      for (int i = 0; i < 8; ++i) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 2) ts.push_back(ms);
      }
      std::printf(" %8.2f", median(ts) * 1e3 / 100);
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(g));
    }
    std::printf("\n");
  }
  }
  CK(cudaFree(pool));
  return 0;
}
