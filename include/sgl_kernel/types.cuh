// SPDX-License-Identifier: Apache-2.0
// fp32 <-> storage-type conversions for the floating types the kernels support.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace sgl_kernel {

template <typename T>
struct FloatConvert;

template <>
struct FloatConvert<float> {
  static __device__ __forceinline__ float to_float(float x) { return x; }
  static __device__ __forceinline__ float from_float(float x) { return x; }
};

template <>
struct FloatConvert<half> {
  static __device__ __forceinline__ float to_float(half x) { return __half2float(x); }
  static __device__ __forceinline__ half from_float(float x) { return __float2half_rn(x); }
};

template <>
struct FloatConvert<__nv_bfloat16> {
  static __device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float x) { return __float2bfloat16_rn(x); }
};

template <typename T>
__device__ __forceinline__ float to_float(T x) {
  return FloatConvert<T>::to_float(x);
}

template <typename T>
__device__ __forceinline__ T from_float(float x) {
  return FloatConvert<T>::from_float(x);
}

}  // namespace sgl_kernel
