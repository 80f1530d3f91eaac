// SPDX-License-Identifier: Apache-2.0
// custom_relu and fused_add_relu: out = max(x (+ bias), 0), output contiguous.
//
// Contiguous input: one flat pass with 16-byte vectors and a scalar tail (the output is
// freshly allocated, so only the input's alignment and the bias period decide the path).
// Strided input: each thread maps its output index to the input offset through the
// merged sizes/strides.
#include <algorithm>

#include "project/project.h"
#include "project/strided.cuh"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::project {

namespace {

constexpr int kThreads = 256;

// max(x, 0) that keeps NaN (torch.relu propagates NaN).
__device__ __forceinline__ float relu(float x) { return x > 0.f || x != x ? x : 0.f; }

template <typename T, bool kHasBias>
__global__ void __launch_bounds__(kThreads)
    relu_vec_kernel(T* __restrict__ out,          // [numel]
                    const T* __restrict__ input,  // [numel], contiguous
                    const T* __restrict__ bias,   // [last_dim]
                    int64_t numel, int64_t last_dim_vec) {
  constexpr int kVec = kVec16<T>;
  const int64_t num_vec = numel / kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  for (int64_t i = tid; i < num_vec; i += stride) {
    const Vec16<T> x = load16_stream(input + i * kVec);
    Vec16<T> o;
    if constexpr (kHasBias) {
      const Vec16<T> b = load16(bias + (i % last_dim_vec) * kVec);
#pragma unroll
      for (int k = 0; k < kVec; ++k) o[k] = from_float<T>(relu(to_float(x[k]) + to_float(b[k])));
    } else {
#pragma unroll
      for (int k = 0; k < kVec; ++k) o[k] = from_float<T>(relu(to_float(x[k])));
    }
    store16(out + i * kVec, o);
  }
  // Scalar tail (< kVec elements; only without bias, whose period keeps numel % kVec == 0).
  if constexpr (!kHasBias) {
    const int64_t i = num_vec * kVec + tid;
    if (i < numel) out[i] = from_float<T>(relu(to_float(input[i])));
  }
}

// Any layout: contiguous-but-misaligned inputs (ndim == 0) and strided views.
template <typename T, bool kHasBias>
__global__ void __launch_bounds__(kThreads) relu_scalar_kernel(ReluParams<T> p) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x; i < p.numel; i += stride) {
    float v = to_float(p.input[strided_offset(p.layout, i)]);
    if constexpr (kHasBias) v += to_float(p.bias[i % p.last_dim]);
    p.out[i] = from_float<T>(relu(v));
  }
}

int64_t grid_for(int64_t work) {
  // NOTE: grid-stride loops, capped at 64 blocks of 256 threads per SM-equivalent of a
  // large GPU; more blocks only add scheduling overhead for a pass this light.
  return std::max<int64_t>(1, std::min<int64_t>(ceil_div<int64_t>(work, kThreads), 132 * 64));
}

template <typename T, bool kHasBias>
cudaError_t launch_typed(const ReluParams<T>& p, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  const bool vec_ok = p.layout.ndim == 0 && is_aligned16(p.out) && is_aligned16(p.input) &&
                      (!kHasBias || (p.last_dim % kVec == 0 && is_aligned16(p.bias)));
  if (vec_ok) {
    const int64_t num_vec = std::max<int64_t>(p.numel / kVec, 1);
    return launch_kernel(relu_vec_kernel<T, kHasBias>, dim3(static_cast<uint32_t>(grid_for(num_vec))),
                         dim3(kThreads), 0, stream, false, p.out, p.input, p.bias, p.numel,
                         p.last_dim / kVec);
  }
  return launch_kernel(relu_scalar_kernel<T, kHasBias>, dim3(static_cast<uint32_t>(grid_for(p.numel))),
                       dim3(kThreads), 0, stream, false, p);
}

}  // namespace

template <typename T>
cudaError_t launch_relu(const ReluParams<T>& params, cudaStream_t stream) {
  if (params.numel == 0) return cudaSuccess;
  return params.bias != nullptr ? launch_typed<T, true>(params, stream) : launch_typed<T, false>(params, stream);
}

template cudaError_t launch_relu<float>(const ReluParams<float>&, cudaStream_t);
template cudaError_t launch_relu<half>(const ReluParams<half>&, cudaStream_t);
template cudaError_t launch_relu<__nv_bfloat16>(const ReluParams<__nv_bfloat16>&, cudaStream_t);

}  // namespace sgl_kernel::project
