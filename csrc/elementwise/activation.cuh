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
    // NOTE: the approximate division (2 ulp, as torch.compile's Triton code uses) instead of
    // IEEE x / y: the IEEE sequence made silu the slowest activation at L2-resident sizes
    // (T=128 I=14336: 3.03 us vs gelu_tanh's 2.91 us). For x < -87, 1 + exp(-x) is inf and
    // the result is -0.
    // NOTE (H200, tune_act_and_mul.cu, T=128 d=14336 L2-hot in a graph, us): this form 2.19-2.26;
    // the same bytes with no arithmetic (read both halves, write their sum) 1.97-2.07, reads
    // alone 1.93: the call sits within 0.2 us of the L2 floor. Forms with fewer multi-function
    // unit ops: 0.5x(1 + tanh.approx(x/2)) 1.97-2.06 but up to 30 fp16 steps off and no
    // relative accuracy for x << 0 (1 + tanh cancels); ex2 + a Newton reciprocal 2.20 (the
    // FMA pipe then limits); ex2.approx.f16x2 on pairs + rcp 3.04 (conversions). Not taken.
    // Session 18 (H200, the same sweep with the trigger after the loads, us at T = 1 / 16 /
    // 128): this form 0.87 / 0.99 / 2.10-2.12, the floor 0.75 / 0.89 / 1.83-1.88, tanh.approx
    // 0.87 / 0.94 / 1.98-2.07, four values sharing one rcp.approx (5 multi-function ops per
    // 4 values instead of 8, as accurate) 0.90 / 1.05 / 2.08: the arithmetic costs ~0.25 us
    // at T=128 and no accurate form found removes it. Not taken either.
    return __fdividef(x, 1.0f + __expf(-x));
  } else if constexpr (kAct == Activation::kGelu) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  } else {
    // sqrt(2/pi) * (x + 0.044715 x^3)
    const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
  }
}

// Vector path: d % kVecElems == 0, pointers aligned to the vector, rows * d / kVecElems < 2^32
// vectors. Thread t of block b handles vectors b * kThreads * kUnroll + u * kThreads + t
// (u < kUnroll); all loads are issued before the first use, so each thread keeps
// 2 * kUnroll loads in flight. Narrow vectors (4 or 8 bytes) spread decode-sized inputs over
// more threads and blocks. The PDL trigger goes once the loads are issued (sgl_kernel/arch.cuh).
// NOTE (H200, session 17: silu_and_mul bf16 d=14336 timed by tools/decode_rows.py, one dev
// build choosing the placement at run time, alternated twice; us at T = 1 / 16 / 32 / 64 /
// 128): right after the wait 0.81 / 1.02 / 1.38 / 1.91 / 2.28, after the loads 0.76 / 0.98 /
// 1.18 / 1.62 / 2.11, at the end 0.81 / 1.04 / 1.34 / 1.77 / 2.28.
template <typename T, Activation kAct, int kThreads, int kVecElems, int kUnroll, LoadPolicy kLoad>
__global__ void __launch_bounds__(kThreads)
    act_and_mul_vec_kernel(T* __restrict__ out,          // [rows, d]
                           const T* __restrict__ input,  // [rows, 2 * d]
                           FastDivmod d_vec,             // vectors per row (d / kVecElems)
                           uint32_t total_vec) {         // rows * d_vec
  using V = Vec<T, kVecElems>;
  SGL_PDL_WAIT();
  const uint32_t base = blockIdx.x * (kThreads * kUnroll) + threadIdx.x;
  const int64_t half = static_cast<int64_t>(d_vec.divisor) * kVecElems;  // d
  V a[kUnroll], b[kUnroll];
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
  SGL_PDL_LAUNCH_DEPENDENTS();  // PdlTrigger::kAfterLoads
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint32_t i = base + u * kThreads;
    if (i < total_vec) {
      V o;
#pragma unroll
      for (int k = 0; k < kVecElems; ++k) {
        o[k] = from_float<T>(activate<kAct>(to_float(a[u][k])) * to_float(b[u][k]));
      }
      *reinterpret_cast<V*>(out + static_cast<int64_t>(i) * kVecElems) = o;
    }
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
