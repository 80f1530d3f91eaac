// SPDX-License-Identifier: Apache-2.0
// sgl_per_tensor_quant_fp8: one fp32 scale for the whole tensor.
//
// Dynamic: a reduction kernel folds max|x| / 448 into scale[0] with an integer atomicMax on
// the float's bits (for non-negative floats the signed-integer order is the float order, a
// negative start value loses to any scale, and a NaN wins), then the code kernel reads
// scale[0] after the PDL wait. Both kernels walk the tensor as 16-byte vectors when input and
// output are aligned, with a scalar tail.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "quantization/quant.cuh"
#include "quantization/quantization.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/reduce.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::quantization {

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr float kFp8Max = 448.0f;

template <typename T>
__global__ void __launch_bounds__(kThreads) tensor_amax_kernel(const TensorQuantParams<T> p, const int64_t num_vec) {
  constexpr int kVec = kVec16<T>;
  __shared__ uint32_t scratch[kThreads / 32];
  SGL_PDL_WAIT();
  // The code kernel may be scheduled now; it waits for this grid to finish before reading.
  SGL_PDL_LAUNCH_DEPENDENTS();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  uint32_t amax = 0;
  for (int64_t i = tid; i < num_vec; i += stride * kUnroll) {
    Vec16<T> x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < num_vec) x[u] = load16<T, LoadPolicy::kStream>(p.input + (i + u * stride) * kVec);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < num_vec) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) amax = max(amax, abs_bits(to_float(x[u][e])));
      }
    }
  }
  for (int64_t j = num_vec * kVec + tid; j < p.numel; j += stride) amax = max(amax, abs_bits(to_float(p.input[j])));

  amax = warp_reduce_max(amax);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll
    for (int w = 1; w < kThreads / 32; ++w) amax = max(amax, scratch[w]);
    const float s = __fdiv_rn(__uint_as_float(amax), kFp8Max);
    atomicMax(reinterpret_cast<int*>(p.scale), __float_as_int(s));
  }
}

template <typename T, int kCodeUnroll>
__global__ void __launch_bounds__(kThreads) tensor_code_kernel(const TensorQuantParams<T> p, const int64_t num_vec) {
  constexpr int kUnroll = kCodeUnroll;
  constexpr int kVec = kVec16<T>;
  SGL_PDL_WAIT();
  const float inv = inverse_scale(*p.scale);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * (kThreads * kUnroll) + threadIdx.x;
  Vec16<T> x[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < num_vec) x[u] = load16<T, LoadPolicy::kStream>(p.input + i * kVec);
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < num_vec) {
      float y[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) y[e] = to_float(x[u][e]);
      *reinterpret_cast<Vec<uint8_t, kVec>*>(p.output_q + i * kVec) =
          to_codes<QuantCode::kFp8>(y, inv, -kFp8Max, kFp8Max, false);
    }
  }
  // Scalar tail (and the whole tensor when misaligned): the first block's threads.
  if (blockIdx.x == 0) {
    for (int64_t j = num_vec * kVec + threadIdx.x; j < p.numel; j += kThreads) {
      p.output_q[j] = to_code<QuantCode::kFp8>(to_float(p.input[j]) * inv, -kFp8Max, kFp8Max);
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

}  // namespace

template <typename T>
cudaError_t launch_per_tensor_quant(const TensorQuantParams<T>& p, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  if (p.numel == 0) return cudaSuccess;
  const bool aligned = is_aligned16(p.input) && is_aligned16(p.output_q);
  const int64_t num_vec = aligned ? p.numel / kVec : 0;
  // NOTE: a misaligned tensor is coded by one block (rare: a view at an odd offset).
  if (p.dynamic) {
    int sms = 132;
    int device = 0;
    if (cudaGetDevice(&device) == cudaSuccess) {
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
    }
    // Enough blocks to fill the GPU (8 per SM), few enough that the atomics stay negligible.
    const int64_t want = std::max<int64_t>(1, ceil_div<int64_t>(std::max(num_vec, p.numel - num_vec * kVec),
                                                                 kThreads * kUnroll));
    const uint32_t blocks = static_cast<uint32_t>(std::min<int64_t>(want, int64_t{sms} * 8));
    SGL_CUDA_TRY(launch_kernel(tensor_amax_kernel<T>, dim3(blocks), dim3(kThreads), 0, stream, p.enable_pdl, p,
                               num_vec));
  }
  // NOTE: small tensors get one vector per thread, so that they spread over more SMs.
  if (num_vec < int64_t{132} * kThreads * kUnroll) {
    const int64_t blocks = std::max<int64_t>(1, ceil_div<int64_t>(num_vec, kThreads));
    return launch_kernel(tensor_code_kernel<T, 1>, dim3(static_cast<uint32_t>(blocks)), dim3(kThreads), 0, stream,
                         p.enable_pdl, p, num_vec);
  }
  const int64_t blocks = ceil_div<int64_t>(num_vec, kThreads * kUnroll);
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  return launch_kernel(tensor_code_kernel<T, kUnroll>, dim3(static_cast<uint32_t>(blocks)), dim3(kThreads), 0,
                       stream, p.enable_pdl, p, num_vec);
}

template cudaError_t launch_per_tensor_quant<float>(const TensorQuantParams<float>&, cudaStream_t);
template cudaError_t launch_per_tensor_quant<half>(const TensorQuantParams<half>&, cudaStream_t);
template cudaError_t launch_per_tensor_quant<__nv_bfloat16>(const TensorQuantParams<__nv_bfloat16>&, cudaStream_t);

}  // namespace sgl_kernel::quantization
