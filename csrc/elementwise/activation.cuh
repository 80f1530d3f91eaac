// SPDX-License-Identifier: Apache-2.0
// Kernels of the gated activations (silu/gelu/gelu_tanh_and_mul). Launched by
// activation.cu; also instantiated with other launch shapes and cache policies by
// benchmark/elementwise/tune_act_and_mul.cu, which picks the production configuration.
//
// out[r, j] = act(x[r, j]) * x[r, d + j]; memory bound (read 2d, write d per row), so the
// kernel's only job is to keep enough 16-byte loads in flight. The rows are flattened into
// one index space of 16-byte vectors, so any d fills the grid evenly, with no per-row
// blocks idling when d is not a multiple of the block size.
#pragma once

#include <cstdint>

#include "elementwise/elementwise.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::elementwise {

template <Activation kAct>
__device__ __forceinline__ float activate(float x) {
  if constexpr (kAct == Activation::kSilu) {
    // x / (1 + 2^(-x log2 e)) with ex2.approx.ftz and rcp.approx.ftz: the approximate division
    // (2 ulp, as torch.compile's Triton code uses) instead of IEEE x / y, which made silu the
    // slowest activation at L2-resident sizes (T=128 I=14336: 3.03 us vs gelu_tanh's 2.91 us).
    // Bit for bit the former __fdividef(x, 1.0f + __expf(-x)) for every fp32 x (all 2^32
    // checked on an H200 by tune_act_and_mul.cu): __expf's non-ftz ex2 adds a scaling
    // sequence (3 instructions) that only changes results below 2^-126, which the 1 + e
    // absorbs. For x < -87, 1 + e is inf and the result is -0.
    // NOTE (H200, tune_act_and_mul.cu, T=128 d=14336 L2-hot in a graph of PDL calls, us):
    // the same bytes with no arithmetic (read both halves, write their sum) 1.83-1.88; this
    // form 2.00-2.06 ("sv2 ftz", "silu4 trig after loads") against 2.08-2.14 with __expf
    // ("silu0 trig after loads"; session 19). Forms with fewer
    // multi-function-unit ops (ex2, rcp, tanh: 16 results a clock an SM, 2 a value here):
    // 0.5x(1 + tanh.approx(x/2)) reaches the floor but is up to 30 fp16 steps off and has no
    // relative accuracy for x << 0 (1 + tanh cancels); ex2 + a Newton reciprocal 2.19-2.20;
    // ex2.approx.f16x2 on pairs + rcp 3.4; two or four values sharing one rcp.approx (with a
    // branch for products past 1e37) 2.38-2.41 / 2.14-2.16. Not taken.
    float e;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(e) : "f"(x * -1.4426950408889634f));
    float r;
    asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(1.0f + e));
    return x * r;
  } else if constexpr (kAct == Activation::kGelu) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  } else {
    // sqrt(2/pi) * (x + 0.044715 x^3)
    const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
  }
}

// Vector path: d % kVecElems == 0, pointers aligned to the vector, rows * d / kVecElems < 2^32
// vectors (less one block's worth). Thread t of block b handles vectors
// b * kThreads * kUnroll + u * kThreads + t (u < kUnroll); all loads are issued before the first
// use, so each thread keeps 2 * kUnroll loads in flight. Narrow vectors (4 or 8 bytes) spread
// decode-sized inputs over more threads and blocks. The PDL trigger goes once the loads are
// issued (sgl_kernel/arch.cuh).
// One vector a thread (kUnroll = 1): threads past the end load the last vector again and skip
// the store, no branch before the loads. kPin (one vector a thread, plain loads): the PDL wait
// with the thread's address computed before it (pdl_wait_prefetched, sgl_kernel/arch.cuh); the
// launcher uses it for every one-vector instance.
// NOTE (H200, session 19, tune_act_and_mul.cu, silu, us at T = 1 / 16 / 32 / 64 / 128 for
// d=14336, then T = 1 / 16 / 128 for d=4096; rounds on one machine): 16-byte vectors, session
// 18's kernel (loads behind the bounds check, read-only) 0.86-0.88 / 0.98-1.00 / 1.19-1.21 /
// 1.54-1.57 / 2.08-2.14; the last vector reloaded instead (no branch), read-only loads 0.86 /
// 0.98 / 1.50-1.52 / 1.86-1.88 / 2.43-2.44 (1.10 / 1.42 / 1.92 from T=32 in another build: it
// hinges on where the compiler puts the parameter loads around the wait); no bounds check at
// all 0.79-0.80 / 0.92-0.93 / 1.10 / 1.41-1.42 / 1.91; reloaded with kPin 0.76 / 0.88 / 1.10
// / 1.36-1.37 / 1.93, 0.74 / 0.80 / 1.14. 8-byte: read-only 0.73-0.75 / 0.93-0.94 / 1.17 /
// 1.61-1.63 / 2.85, 0.70-0.71 / 0.78-0.79 / 1.18-1.19; kPin 0.71 / 0.84 / 1.05 / 1.63 /
// 2.86-2.87, 0.67 / 0.76-0.77 / 1.11-1.12. 4-byte: read-only 0.72-0.75 / 1.05 at d=14336,
// 0.68 / 0.80-0.81 / 1.94-1.95; kPin 0.74 / 1.05-1.07, 0.68-0.69 / 0.80-0.81 / 1.94-1.96. With
// kPin and read-only (.nc) loads the compiler moved the loads above the wait too (invalid:
// tests/test_pdl_order.py), hence plain loads.
// NOTE (H200, session 17: silu_and_mul bf16 d=14336 timed by tools/decode_rows.py, one dev
// build choosing the placement at run time, alternated twice; us at T = 1 / 16 / 32 / 64 /
// 128): right after the wait 0.81 / 1.02 / 1.38 / 1.91 / 2.28, after the loads 0.76 / 0.98 /
// 1.18 / 1.62 / 2.11, at the end 0.81 / 1.04 / 1.34 / 1.77 / 2.28.
template <typename T, Activation kAct, int kThreads, int kVecElems, int kUnroll, LoadPolicy kLoad,
          bool kPin = false>
__global__ void __launch_bounds__(kThreads)
    act_and_mul_vec_kernel(T* __restrict__ out,          // [rows, d]
                           const T* __restrict__ input,  // [rows, 2 * d]
                           FastDivmod d_vec,             // vectors per row (d / kVecElems)
                           uint32_t total_vec) {         // rows * d_vec, >= 1
  using V = Vec<T, kVecElems>;
  static_assert(kUnroll == 1 || !kPin, "kPin: one vector a thread");
  static_assert(!kPin || kLoad == LoadPolicy::kDefault, "kPin: read-only loads would move above the wait");
  const uint32_t base = blockIdx.x * (kThreads * kUnroll) + threadIdx.x;
  const int64_t half = static_cast<int64_t>(d_vec.divisor) * kVecElems;  // d
  V a[kUnroll], b[kUnroll];
  if constexpr (kUnroll == 1) {
    // No branch before the loads (the NOTE above).
    const uint32_t i = min(base, total_vec - 1);
    uint32_t row, col;
    d_vec.divmod(i, row, col);
    const T* x = input + static_cast<int64_t>(row) * 2 * half + static_cast<int64_t>(col) * kVecElems;
    if constexpr (kPin) {
      pdl_wait_prefetched(x);
    } else {
      SGL_PDL_WAIT();
    }
    a[0] = load_vec<V, kLoad>(x);
    b[0] = load_vec<V, kLoad>(x + half);
  } else {
    SGL_PDL_WAIT();
    // The large path (more than 16 MB of output): loads behind the bounds check. The branch-free
    // form ran ~1 % slower there (silu bf16 T=32768 d=14336 642.5 us against 636.5, session 19).
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t i = base + u * kThreads;
      if (i < total_vec) {
        uint32_t row, col;
        d_vec.divmod(i, row, col);
        const T* x = input + static_cast<int64_t>(row) * 2 * half + static_cast<int64_t>(col) * kVecElems;
        a[u] = load_vec<V, kLoad>(x);
        b[u] = load_vec<V, kLoad>(x + half);
      }
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();  // PdlTrigger::kAfterLoads
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint32_t i = base + u * kThreads;
    if (kUnroll > 1 && i >= total_vec) continue;  // (kUnroll = 1: the value is computed anyway)
    V o;
#pragma unroll
    for (int k = 0; k < kVecElems; ++k) {
      o[k] = from_float<T>(activate<kAct>(to_float(a[u][k])) * to_float(b[u][k]));
    }
    if (i < total_vec) *reinterpret_cast<V*>(out + static_cast<int64_t>(i) * kVecElems) = o;
  }
}

// Scalar path: any d, any alignment, any size (64-bit indices, grid-stride loop).
template <typename T, Activation kAct, int kThreads>
__global__ void __launch_bounds__(kThreads)
    act_and_mul_scalar_kernel(T* __restrict__ out,          // [rows, d]
                              const T* __restrict__ input,  // [rows, 2 * d]
                              int64_t d, int64_t total) {   // total = rows * d
  SGL_PDL_WAIT();
  SGL_PDL_LAUNCH_DEPENDENTS();  // early: see sgl_kernel/arch.cuh
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total; i += stride) {
    const int64_t row = i / d;
    const int64_t col = i - row * d;
    const T* x = input + row * 2 * d + col;
    out[i] = from_float<T>(activate<kAct>(to_float(x[0])) * to_float(x[d]));
  }
}

}  // namespace sgl_kernel::elementwise
