// SPDX-License-Identifier: Apache-2.0
// Launchers of the project family (ops that are not in sgl-kernel; API.md section 3).
#pragma once

#include <cstdint>
#include <initializer_list>

#include <cuda_runtime.h>

#include "sgl_kernel/chunk_bytes.h"

namespace sgl_kernel::project {

// Up to this many dimensions (after merging dimensions that are contiguous with each
// other) a strided input is read in place; beyond it the bindings make it contiguous.
constexpr int kMaxStridedDims = 8;

// Where the i-th element (logical row-major order) of a strided tensor lives: merged sizes
// and strides, outermost first (strided.cuh maps i to its offset). ndim == 0: contiguous.
struct StridedLayout {
  int ndim;
  int64_t sizes[kMaxStridedDims];
  int64_t strides[kMaxStridedDims];  // in elements
};

// out = max(input (+ bias[last index]), 0), computed in fp32 with one rounding.
template <typename T>
struct ReluParams {
  T* out;            // [numel], contiguous, logical order of input
  const T* input;    // any strides (see sizes/strides)
  const T* bias;     // [last_dim], contiguous; nullptr for plain relu
  int64_t numel;
  int64_t last_dim;  // input.shape[-1] (bias length); >= 1
  StridedLayout layout;  // of input; layout.ndim == 0 means input is contiguous
};

// T: float, half, __nv_bfloat16.
template <typename T>
cudaError_t launch_relu(const ReluParams<T>& params, cudaStream_t stream);

// store_kv_cache: k_cache[out_loc[i]] = k[i] and v_cache[out_loc[i]] = v[i], byte copies of
// one row each. Locations outside [0, num_slots) are skipped.
struct StoreKvCacheParams {
  void* k_cache;         // [num_slots, row_bytes], row pitch cache_stride
  void* v_cache;         // [num_slots, row_bytes], row pitch cache_stride
  const void* k;         // [n, row_bytes], row pitch src_stride
  const void* v;         // [n, row_bytes], row pitch src_stride
  const void* out_loc;   // [n], int32 or int64 (loc_int64)
  int64_t n;
  int64_t num_slots;
  int64_t row_bytes;     // a multiple of 128
  int64_t cache_stride;  // bytes
  int64_t src_stride;    // bytes
  bool loc_int64;
  bool enable_pdl;       // programmatic dependent launch (sm90+)
};

cudaError_t launch_store_kv_cache(const StoreKvCacheParams& params, cudaStream_t stream);

// embedding_lookup: out[i] = weight[indices[i] - vocab_start] when
// 0 <= indices[i] - vocab_start < num_valid, else a row of zeros (byte copies of one row).
struct EmbeddingLookupParams {
  void* out;              // [num_indices, row_bytes], contiguous
  const void* weight;     // [V, row_bytes], row pitch weight_stride
  const void* indices;    // num_indices values laid out as idx_layout; int32 or int64
  int64_t num_indices;
  int64_t row_bytes;      // D * element size
  int64_t weight_stride;  // bytes
  int64_t vocab_start;    // 0 for a plain gather
  int64_t num_valid;      // vocab_length, or V for a plain gather (<= V)
  bool indices_int64;
  bool enable_pdl;        // programmatic dependent launch (sm90+)
  StridedLayout idx_layout;
};

cudaError_t launch_embedding_lookup(const EmbeddingLookupParams& params, cudaStream_t stream);

// chunk_bytes (sgl_kernel/chunk_bytes.h): the chunk the row copies (store_kv_cache,
// embedding_lookup) move, shared by the launchers and the bindings' size checks.

// fast_compare_key (host code): the first i < n with x[i * x_stride] != y[i * y_stride], or n.
// T: int32_t, int64_t.
template <typename T>
int64_t common_prefix_length(const T* x, int64_t x_stride, const T* y, int64_t y_stride, int64_t n);

}  // namespace sgl_kernel::project
