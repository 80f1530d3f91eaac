// SPDX-License-Identifier: Apache-2.0
// Launchers of the top_k family (torch-free seam between kernels and bindings).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace sgl_kernel::top_k {

// Every row selects exactly this many positions (DeepSeek V3.2 sparse-attention indexer).
constexpr int kTopK = 2048;

// What the kernel writes for a selected position `i` of row b (relative to the window start):
//   kIndices    i                                         (fast_topk)
//   kPageTable  src_page_table[r, i], r = request of row b (fast_topk_transform_fused)
//   kRagged     i + offsets[b]                            (fast_topk_transform_ragged_fused)
// and -1 in the slots after the first n of a row with n <= kTopK in every mode.
enum class TopKOutput { kIndices, kPageTable, kRagged };

// Bits of FastTopKParams::error_flag (SGL_KERNEL_DEBUG=1).
constexpr int kBadWindow = 1;   // row_starts[b] < 0, lengths[b] < 0 or row_starts[b] + lengths[b] > L
constexpr int kBadPage = 2;     // a selected position i >= src_page_table.shape[1]
constexpr int kBadRequest = 4;  // row b lies in no request of cu_seqlens_q

struct FastTopKParams {
  const float* score;           // [rows, cols], row stride score_stride, stride(1) == 1
  const int32_t* lengths;       // [rows], contiguous
  const int32_t* row_starts;    // [rows], stride row_starts_stride; nullptr: every window starts at 0
  int32_t* out;                 // [rows, kTopK], contiguous
  const int32_t* page_table;    // kPageTable: [requests, page_cols], row stride page_stride
  const int32_t* cu_seqlens_q;  // kPageTable: [requests + 1], contiguous
  const int32_t* offsets;       // kRagged: [rows], stride offsets_stride
  int64_t rows;
  int64_t cols;                 // L
  int64_t score_stride;
  int64_t row_starts_stride;
  int64_t requests;
  int64_t page_cols;
  int64_t page_stride;
  int64_t offsets_stride;
  bool row_is_request;          // kPageTable: row b reads page-table row b (no cu_seqlens_q search)
  int* error_flag;              // nullptr, or a device int that gets the kBad* bits (debug)
  bool enable_pdl;
};

// Dynamic shared memory of the kernel on one device: it keeps the candidates of the threshold
// bin (8 bytes each) in shared memory, as many as fit in `bytes` (sized so that two blocks
// share an SM), and needs at least `min_bytes`.
struct FastTopKSmem {
  int64_t bytes;         // what a launch on this device uses (>= min_bytes unless the device is too small)
  int64_t min_bytes;     // the least the kernel runs with
  int64_t device_bytes;  // the device's opt-in limit per block
  int capacity;          // candidates that fit in `bytes`
};

cudaError_t fast_topk_smem(int device, FastTopKSmem* out);

// Launches one block per row (few long rows on sm90+: a cluster of 2-8 blocks per row) on
// the current device. Returns cudaErrorInvalidConfiguration
// when the device has less shared memory than FastTopKSmem::min_bytes (the bindings check
// that first and raise a readable error).
cudaError_t launch_fast_topk(TopKOutput mode, const FastTopKParams& params, cudaStream_t stream);

}  // namespace sgl_kernel::top_k
