// SPDX-License-Identifier: Apache-2.0
// Launchers of the project family (ops that are not in sgl-kernel; API.md section 3).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace sgl_kernel::project {

// Up to this many dimensions (after merging dimensions that are contiguous with each
// other) a strided input is read in place; beyond it the bindings make it contiguous.
constexpr int kMaxStridedDims = 8;

// out = max(input (+ bias[last index]), 0), computed in fp32 with one rounding.
template <typename T>
struct ReluParams {
  T* out;            // [numel], contiguous, logical order of input
  const T* input;    // any strides (see sizes/strides)
  const T* bias;     // [last_dim], contiguous; nullptr for plain relu
  int64_t numel;
  int64_t last_dim;  // input.shape[-1] (bias length); >= 1
  // Input layout, outermost first; ndim == 0 means input is contiguous.
  int ndim;
  int64_t sizes[kMaxStridedDims];
  int64_t strides[kMaxStridedDims];  // in elements
};

// T: float, half, __nv_bfloat16.
template <typename T>
cudaError_t launch_relu(const ReluParams<T>& params, cudaStream_t stream);

}  // namespace sgl_kernel::project
