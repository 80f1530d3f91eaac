// SPDX-License-Identifier: Apache-2.0
// Launchers of the elementwise family (torch-free seam between kernels and bindings).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace sgl_kernel::elementwise {

enum class Activation { kSilu, kGelu, kGeluTanh };

// out = act(input[..., :d]) * input[..., d:], row by row.
template <typename T>
struct ActAndMulParams {
  T* out;           // [rows, d], contiguous
  const T* input;   // [rows, 2 * d], contiguous
  int64_t rows;
  int64_t d;
  bool enable_pdl;  // programmatic dependent launch (sm90+)
};

// T: float, half, __nv_bfloat16.
template <typename T>
cudaError_t launch_act_and_mul(Activation act, const ActAndMulParams<T>& params, cudaStream_t stream);

}  // namespace sgl_kernel::elementwise
