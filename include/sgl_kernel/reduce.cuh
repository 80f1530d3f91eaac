// SPDX-License-Identifier: Apache-2.0
// Warp and block reductions (fp32 accumulators).
#pragma once

#include <cuda_runtime.h>

namespace sgl_kernel {

template <typename T>
__device__ __forceinline__ T warp_reduce_sum(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

template <typename T>
__device__ __forceinline__ T warp_reduce_max(T v) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) v = max(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the whole block; every thread gets the result. `scratch` holds >= 32 floats of
// shared memory; blockDim.x must be a multiple of 32. Contains __syncthreads().
__device__ __forceinline__ float block_reduce_sum(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  v = warp_reduce_sum(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < num_warps ? scratch[lane] : 0.f;
  v = warp_reduce_sum(v);
  __syncthreads();  // scratch may be reused right after
  return v;
}

// Max over the whole block; same contract as block_reduce_sum.
__device__ __forceinline__ float block_reduce_max(float v, float* scratch) {
  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int num_warps = blockDim.x >> 5;
  v = warp_reduce_max(v);
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  v = lane < num_warps ? scratch[lane] : -INFINITY;
  v = warp_reduce_max(v);
  __syncthreads();
  return v;
}

}  // namespace sgl_kernel
