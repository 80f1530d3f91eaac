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

// Concatenate two row sources along the last dimension: out_row = [a_row, b_row]. Rows are
// addressed with two levels (RowStrides, rows_inner); a zero stride broadcasts (concat_mla_k's
// k_rope over heads). Sizes and strides in elements of `elem_bytes` bytes.
struct ConcatRowsParams {
  void* out;        // [rows, a_cols + b_cols]
  const void* a;    // [rows, a_cols]
  const void* b;    // [rows, b_cols]
  RowStrides out_rows, a_rows, b_rows;
  int64_t rows;
  int64_t rows_inner;  // >= 1
  int64_t a_cols, b_cols;
  int elem_bytes;      // 1, 2, 4 or 8
  bool enable_pdl;
};

cudaError_t launch_concat_rows(const ConcatRowsParams& params, cudaStream_t stream);
// Elements per copy unit of launch_concat_rows: 16 / elem_bytes when every pointer, row stride
// and column count allows 16-byte units, else 1 (host code; the bindings' size checks).
int64_t concat_copy_unit_elems(const ConcatRowsParams& params);

// out[loc[t] * mult + offset] = e4m3(clamp(x[t] / scale, -448, 448)) for k and v.
template <typename T>
struct DowncastFp8Params {
  const T* k;              // [tokens, row], contiguous
  const T* v;              // [tokens, row]
  uint8_t* k_out;          // [slots, row] e4m3
  uint8_t* v_out;          // [slots, row]
  const float* k_scale;    // [1]
  const float* v_scale;    // [1]
  const int64_t* loc;      // [tokens]
  int64_t tokens, row, slots;
  int64_t mult, offset;
  bool enable_pdl;
};

template <typename T>
cudaError_t launch_downcast_fp8(const DowncastFp8Params<T>& params, cudaStream_t stream);

// output[i] = values[i] for i < n (values passed by value: no copy engine involved).
constexpr int kCopyNoCeMax = 1000;  // keeps the parameter block under the classic 4 KB
struct CopyNoCeParams {
  int32_t* output;  // [n]
  int32_t n;
  int32_t values[kCopyNoCeMax];
};

cudaError_t launch_copy_to_gpu_no_ce(const CopyNoCeParams& params, cudaStream_t stream);

// RoPE with a float32 cos/sin cache, in place or out of place, with the optional fused write
// of the rotated key and of the value into a KV cache (apply_rope_pos_ids_cos_sin_cache).
// Strides are in elements; the last dimension of every [rows, heads, head_size] tensor is
// contiguous, and the launcher expects every tensor pointer and stride 16-byte aligned
// (the bindings check it). Per token i with p = pos_ids[i] (skipped, nothing written, when
// p is outside [0, max_pos)):
//   q_rope[i] = rope(q[i]), k_rope[i] = rope(k[i]) and, when v != nullptr and
//   l = kv_cache_loc[i] is a row of the buffer, k_buffer[l] = k_rope[i], v_buffer[l] = v[i].
template <typename T>
struct RopeParams {
  const T* q;                   // [nnz, num_q_heads, head_size]
  const T* k;                   // [nnz, num_k_heads, head_size]
  T* q_rope;                    // [nnz, num_q_heads, head_size]; may be q itself
  T* k_rope;                    // [nnz, num_k_heads, head_size]; may be k itself
  const float* cos_sin_cache;   // [max_pos, rotary_dim], contiguous: cos | sin halves
  const void* pos_ids;          // [nnz], int32 or int64 (pos_ids_int64)
  const T* v;                   // [nnz, num_v_heads, head_size]; nullptr: no KV write
  T* k_buffer;                  // [k_buffer_rows, num_k_heads, head_size]
  T* v_buffer;                  // [v_buffer_rows, num_v_heads, head_size]
  const int64_t* kv_cache_loc;  // [nnz]
  int64_t q_stride_n, q_stride_h;
  int64_t k_stride_n, k_stride_h;
  int64_t q_rope_stride_n, q_rope_stride_h;
  int64_t k_rope_stride_n, k_rope_stride_h;
  int64_t v_stride_n, v_stride_h;
  int64_t k_buffer_stride_n, k_buffer_stride_h;
  int64_t v_buffer_stride_n, v_buffer_stride_h;
  int64_t nnz;
  int64_t max_pos;
  int64_t k_buffer_rows, v_buffer_rows;
  int num_q_heads, num_k_heads, num_v_heads;
  int head_size;                // multiple of 16, at most 512
  int rotary_dim;               // multiple of 16, at most head_size
  bool pos_ids_int64;
  bool interleave;              // GPT-J pairs (2j, 2j + 1); false: NeoX halves (j, j + R/2)
  bool enable_pdl;              // programmatic dependent launch (sm90+)
};

// T: half, __nv_bfloat16.
template <typename T>
cudaError_t launch_rope(const RopeParams<T>& params, cudaStream_t stream);

}  // namespace sgl_kernel::elementwise
