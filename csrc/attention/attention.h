// SPDX-License-Identifier: Apache-2.0
// Launchers of the attention family (API.md section 2.5): merging partial attention states.
// Torch-free: the bindings (attention_ops.cc) check the tensors and fill these structs; the
// kernels trust them.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace sgl_kernel::attention {

// Element type of a value tensor.
enum class Dtype : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

constexpr int kMaxMergeHeadDim = 256;

// ---------------------------------------------------------------------------------------------
// merge_state / merge_state_v2 (merge_state.cu). For token t, head h (row r = t * num_heads + h):
//   a = s_a[r], b = s_b[r] (fp32); natural (v2): an input of +inf is read as -inf (empty state).
//   m = max(a, b); alpha = E(a - m), beta = E(b - m) with E = 2^x (merge_state) or e^x (v2);
//   v_merged[r, :] = (alpha * v_a[r, :] + beta * v_b[r, :]) / (alpha + beta) in fp32, rounded
//   once to dtype; s_merged[r] = m + L(alpha + beta) with L = log2 (merge_state) or ln (v2).
//   When both states are empty (a = b = -inf): v_merged[r, :] = 0 and s_merged[r] = -inf.
//   NaN in an input propagates to that row's outputs.
// Every tensor is contiguous; offsets are 64-bit (num_rows * head_dim may exceed 2^32).
struct MergeStateParams {
  void* v_merged;                // [num_rows, head_dim], dtype
  float* s_merged;               // [num_rows]
  const void* v_a;               // [num_rows, head_dim], dtype
  const float* s_a;              // [num_rows]
  const void* v_b;               // [num_rows, head_dim], dtype
  const float* s_b;              // [num_rows]
  int64_t num_rows;              // tokens * heads
  int head_dim;                  // a multiple of 8, <= kMaxMergeHeadDim
  Dtype dtype;                   // merge_state: fp16 / bf16; v2 also fp32
  bool natural;                  // true: merge_state_v2 (e, ln); false: merge_state (2, log2)
  bool enable_pdl;
};

cudaError_t launch_merge_state(const MergeStateParams& params, cudaStream_t stream);

}  // namespace sgl_kernel::attention
