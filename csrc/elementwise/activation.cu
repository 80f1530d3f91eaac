// SPDX-License-Identifier: Apache-2.0
// Gated activations: silu_and_mul, gelu_and_mul, gelu_tanh_and_mul.
//
// out[r, j] = act(x[r, j]) * x[r, d + j]; memory bound (read 2d, write d per row), so the
// kernel's only job is to keep enough 16-byte loads in flight. The rows are flattened into
// one index space of 16-byte vectors, so any d fills the grid evenly without per-row
// blocks that idle when d is not a multiple of the block size.
#include <cmath>

#include "elementwise/elementwise.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::elementwise {

namespace {

template <Activation kAct>
__device__ __forceinline__ float activate(float x) {
  if constexpr (kAct == Activation::kSilu) {
    return x / (1.0f + __expf(-x));
  } else if constexpr (kAct == Activation::kGelu) {
    return 0.5f * x * (1.0f + erff(x * 0.70710678118654752f));
  } else {
    // sqrt(2/pi) * (x + 0.044715 x^3)
    const float inner = 0.79788456080286536f * (x + 0.044715f * x * x * x);
    return 0.5f * x * (1.0f + tanhf(inner));
  }
}

constexpr int kThreads = 256;

// Vector path: d % kVec == 0 and 16-byte aligned tensors. Thread t of block b handles the
// vectors b * kThreads * kUnroll + u * kThreads + t, u < kUnroll: all loads are issued
// before the first use so each thread keeps 2 * kUnroll 16-byte loads in flight.
template <typename T, Activation kAct, int kUnroll>
__global__ void __launch_bounds__(kThreads)
    act_and_mul_vec_kernel(T* __restrict__ out,          // [rows, d]
                           const T* __restrict__ input,  // [rows, 2 * d]
                           FastDivmod d_vec,             // vectors per row (d / kVec)
                           uint32_t total_vec) {         // rows * d_vec (< 2^32)
  constexpr int kVec = kVec16<T>;
  SGL_PDL_WAIT();
  const uint32_t base = blockIdx.x * (kThreads * kUnroll) + threadIdx.x;
  Vec16<T> a[kUnroll], b[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint32_t i = base + u * kThreads;
    if (i < total_vec) {
      uint32_t row, col;
      d_vec.divmod(i, row, col);
      const T* x = input + (static_cast<int64_t>(row) * d_vec.divisor * 2 + col) * kVec;
      a[u] = load16_stream(x);
      b[u] = load16_stream(x + static_cast<int64_t>(d_vec.divisor) * kVec);
    }
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint32_t i = base + u * kThreads;
    if (i < total_vec) {
      Vec16<T> o;
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        o[k] = from_float<T>(activate<kAct>(to_float(a[u][k])) * to_float(b[u][k]));
      }
      store16(out + static_cast<int64_t>(i) * kVec, o);
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

// Scalar path: any d, any alignment, any size (64-bit indices).
template <typename T, Activation kAct>
__global__ void __launch_bounds__(kThreads)
    act_and_mul_scalar_kernel(T* __restrict__ out,          // [rows, d]
                              const T* __restrict__ input,  // [rows, 2 * d]
                              int64_t d, int64_t total) {   // total = rows * d
  SGL_PDL_WAIT();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < total; i += stride) {
    const int64_t row = i / d;
    const int64_t col = i - row * d;
    const T* x = input + row * 2 * d + col;
    out[i] = from_float<T>(activate<kAct>(to_float(x[0])) * to_float(x[d]));
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

template <typename T, Activation kAct>
cudaError_t launch_typed(const ActAndMulParams<T>& p, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  const int64_t total = p.rows * p.d;
  if (total == 0) return cudaSuccess;
  const int64_t total_vec = total / kVec;
  const bool vec_ok = p.d % kVec == 0 && is_aligned16(p.out) && is_aligned16(p.input) &&
                      total_vec < (int64_t{1} << 32) - kThreads * 4;
  if (vec_ok) {
    const FastDivmod d_vec(static_cast<uint32_t>(p.d / kVec));
    // NOTE: two vectors per thread: the biggest shapes then run ~2 loads of a and b in
    // flight per thread; small shapes keep one so more blocks share the work.
    if (total_vec >= int64_t{1} << 20) {
      constexpr int kUnroll = 2;
      const dim3 grid(static_cast<uint32_t>(ceil_div<int64_t>(total_vec, kThreads * kUnroll)));
      return launch_kernel(act_and_mul_vec_kernel<T, kAct, kUnroll>, grid, dim3(kThreads), 0, stream,
                           p.enable_pdl, p.out, p.input, d_vec, static_cast<uint32_t>(total_vec));
    }
    const dim3 grid(static_cast<uint32_t>(ceil_div<int64_t>(total_vec, kThreads)));
    return launch_kernel(act_and_mul_vec_kernel<T, kAct, 1>, grid, dim3(kThreads), 0, stream,
                         p.enable_pdl, p.out, p.input, d_vec, static_cast<uint32_t>(total_vec));
  }
  const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(total, kThreads), int64_t{1} << 20);
  return launch_kernel(act_and_mul_scalar_kernel<T, kAct>, dim3(static_cast<uint32_t>(blocks)),
                       dim3(kThreads), 0, stream, p.enable_pdl, p.out, p.input, p.d, total);
}

}  // namespace

template <typename T>
cudaError_t launch_act_and_mul(Activation act, const ActAndMulParams<T>& params, cudaStream_t stream) {
  switch (act) {
    case Activation::kSilu: return launch_typed<T, Activation::kSilu>(params, stream);
    case Activation::kGelu: return launch_typed<T, Activation::kGelu>(params, stream);
    case Activation::kGeluTanh: return launch_typed<T, Activation::kGeluTanh>(params, stream);
  }
  return cudaErrorInvalidValue;
}

template cudaError_t launch_act_and_mul<float>(Activation, const ActAndMulParams<float>&, cudaStream_t);
template cudaError_t launch_act_and_mul<half>(Activation, const ActAndMulParams<half>&, cudaStream_t);
template cudaError_t launch_act_and_mul<__nv_bfloat16>(Activation, const ActAndMulParams<__nv_bfloat16>&,
                                                       cudaStream_t);

}  // namespace sgl_kernel::elementwise
