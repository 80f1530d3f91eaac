// SPDX-License-Identifier: Apache-2.0
// Launchers of the attention family (API.md section 2.5): merging partial attention states, the
// linear-attention decode step.
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

// ---------------------------------------------------------------------------------------------
// lightning_attention_decode (lightning_decode.cu): one decode step of linear attention with
// exponential decay (MiniMax). For each (batch b, head h), row r = b * heads + h:
//   ratio = expf(-slope[h]) (fp32, accurate expf);
//   new_kv[r, i, j] = ratio * past_kv[r, i, j] + k[r, i] * v[r, j]   (fp32, i < d, j < e)
//   output[r, j] = sum_i q[r, i] * new_kv[r, i, j], accumulated in fp32, rounded once to dtype.
// q, k, v are read as fp32 (converted from dtype). new_kv may be past_kv itself (the same
// tensor: each element is read before it is written, by the thread that writes it), never a
// partial overlap. Every tensor is contiguous; offsets are 64-bit.
struct LightningDecodeParams {
  const void* q;         // [rows, d], dtype
  const void* k;         // [rows, d], dtype
  const void* v;         // [rows, e], dtype
  const float* past_kv;  // [rows, d, e]
  const float* slope;    // [heads]
  void* output;          // [rows, e], dtype
  float* new_kv;         // [rows, d, e]
  int64_t batch;         // >= 1
  int heads;             // >= 1
  int d;                 // >= 1
  int e;                 // >= 1
  Dtype dtype;           // fp32, fp16 or bf16 (q, k, v and output)
  bool enable_pdl;
  // Tuning only (0: the launcher's rule): SGL_KERNEL_LIGHTNING_CLUSTER forces the blocks a row
  // (1, 2, 4 or 8; capped where the rule's per-block kv rows or the cluster launch do not allow).
  int cluster = 0;
};

cudaError_t launch_lightning_attention_decode(const LightningDecodeParams& params, cudaStream_t stream);

}  // namespace sgl_kernel::attention
