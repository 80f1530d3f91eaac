// SPDX-License-Identifier: Apache-2.0
// embedding_lookup: out[i] = weight[indices[i] - vocab_start], or a row of zeros when the
// index falls outside the rows this weight holds (API.md 3.3).
//
// A byte copy of rows (the dtype only sets the row size). Each output row is written by a
// power-of-two group of threads (row_copy.cuh); indices may be strided (StridedLayout).
// An index outside [vocab_start, vocab_start + num_valid) reads nothing and writes zeros:
// the vocab-parallel contract, and the documented answer to an out-of-range index of a
// plain gather (num_valid = V).
#include <cstdint>

#include "project/project.h"
#include "project/row_copy.cuh"
#include "project/strided.cuh"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/launch.cuh"

namespace sgl_kernel::project {

namespace {

constexpr int kThreads = 256;
// Chunks per thread and row per pass (loads in flight per thread).
constexpr int kUnroll = 4;

template <int kBytes, typename TIdx>
__global__ void __launch_bounds__(kThreads)
    embedding_lookup_kernel(EmbeddingLookupParams p, int log2_threads_per_row) {
  using C = Chunk<kBytes>;
  SGL_PDL_WAIT();
  const int64_t threads_per_row = int64_t{1} << log2_threads_per_row;
  const int64_t rows_per_block = kThreads >> log2_threads_per_row;
  const int64_t lane = threadIdx.x & (threads_per_row - 1);
  const int64_t chunks = p.row_bytes / kBytes;
  const TIdx* __restrict__ indices = static_cast<const TIdx*>(p.indices);  // see idx_layout
  const int64_t row_step = static_cast<int64_t>(gridDim.x) * rows_per_block;
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * rows_per_block + (threadIdx.x >> log2_threads_per_row);
       row < p.num_indices; row += row_step) {
    const int64_t index = static_cast<int64_t>(indices[strided_offset(p.idx_layout, row)]);
    // index - vocab_start cannot overflow once index >= vocab_start >= 0.
    const bool valid = index >= p.vocab_start && index - p.vocab_start < p.num_valid;
    const int64_t src_offset = valid ? (index - p.vocab_start) * p.weight_stride : 0;
    const C* src = reinterpret_cast<const C*>(static_cast<const char*>(p.weight) + src_offset);
    C* dst = reinterpret_cast<C*>(static_cast<char*>(p.out) + row * p.row_bytes);
    for (int64_t c0 = lane; c0 < chunks; c0 += threads_per_row * kUnroll) {
      C a[kUnroll];
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * threads_per_row;
        a[u] = C{};
        if (valid && c < chunks) a[u] = src[c];
      }
#pragma unroll
      for (int u = 0; u < kUnroll; ++u) {
        const int64_t c = c0 + u * threads_per_row;
        if (c < chunks) dst[c] = a[u];
      }
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

}  // namespace

cudaError_t launch_embedding_lookup(const EmbeddingLookupParams& p, cudaStream_t stream) {
  if (p.num_indices == 0 || p.row_bytes == 0) return cudaSuccess;
  const int bytes = chunk_bytes({address(p.out), address(p.weight), static_cast<uint64_t>(p.weight_stride),
                                 static_cast<uint64_t>(p.row_bytes)});
  return dispatch_row_copy(bytes, p.indices_int64, [&](auto width, auto index) {
    constexpr int kBytes = decltype(width)::value;
    using TIdx = typename decltype(index)::type;
    const RowTiling t = row_tiling(p.num_indices, p.row_bytes / kBytes, kUnroll, kThreads);
    return launch_kernel(embedding_lookup_kernel<kBytes, TIdx>, t.grid, dim3(kThreads), 0, stream, p.enable_pdl, p,
                         t.log2_threads_per_row);
  });
}

}  // namespace sgl_kernel::project
