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

// Rows of a tensor whose leading dimensions collapse into at most two levels: row r sits at
// (r / rows_inner) * outer + (r % rows_inner) * inner elements from the base pointer.
struct RowStrides {
  int64_t outer;
  int64_t inner;
};

// RMSNorm over the last dimension, plain (out = norm(input)) or fused with the residual add
// (residual += input; input = norm(residual)), with weight w or (1 + w) (Gemma).
template <typename T>
struct RmsNormParams {
  T* out;               // [rows, hidden]: rmsnorm output, or `input` itself when fused
  const T* input;       // [rows, hidden]
  T* residual;          // [rows, hidden]; fused only (nullptr otherwise)
  const T* weight;      // [hidden], contiguous
  RowStrides out_rows, input_rows, residual_rows;
  int64_t rows;
  int64_t rows_inner;   // >= 1
  int64_t hidden;
  float eps;
  bool gemma;           // weight -> 1 + weight
  bool enable_pdl;
};

// T: float, half, __nv_bfloat16.
template <typename T>
cudaError_t launch_rmsnorm(const RmsNormParams<T>& params, cudaStream_t stream);

}  // namespace sgl_kernel::elementwise
