// SPDX-License-Identifier: Apache-2.0
// embedding_lookup: out[i] = weight[indices[i] - vocab_start], or a row of zeros when the
// index falls outside the rows this weight holds (API.md 3.3).
//
// A byte copy of rows (the dtype only sets the row size) in chunks of kBytes (16 when every
// pointer, row pitch and the row size allow it; row_copy.cuh). Calls of up to 256 KB: a grid
// flat over chunk columns, a thread writing kVpt chunks of one output row; larger calls: a
// block a piece of a row (embedding_piece_kernel) for rows of 4 KB (256 chunks) or more, the
// flat grid for shorter rows, and 32 rows a warp (embedding_warp_rows_kernel) for many rows of
// at most 16 chunks (session 43, shuffle_rows' scale rows). A thread loads the row's index
// (indices may be strided: StridedLayout), then issues all its weight loads together, then stores.
// An index outside [vocab_start, vocab_start + num_valid) reads nothing and writes zeros:
// the vocab-parallel contract, and the documented answer to an out-of-range index of a
// plain gather (num_valid = V).
#include <algorithm>
#include <cstdint>

#include "project/project.h"
#include "project/row_copy.cuh"
#include "project/strided.cuh"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::project {

namespace {
namespace embedding {  // (a name of its own: tune_store_embed.cu includes this file with store_kv_cache.cu)

// Threads of one launch at most: thread indices stay 32-bit (FastDivmod); a larger call is cut
// into launches of whole rows.
constexpr int64_t kMaxLaunchThreads = int64_t{1} << 31;
constexpr int64_t kMaxLaunchBlocks = (int64_t{1} << 31) - 1;  // a grid's x dimension

// One kBytes chunk; LoadPolicy::kStream reads it with ld.global.nc.L1::no_allocate (the weight
// is read-only here: API.md 1.2, inputs and outputs do not overlap).
template <int kBytes, LoadPolicy kLoad>
__device__ __forceinline__ Chunk<kBytes> load_chunk(const Chunk<kBytes>* p) {
  if constexpr (kLoad == LoadPolicy::kDefault) {
    return *p;
  } else if constexpr (kBytes >= 4) {
    // 16 bytes: any policy of load16; 4 and 8 bytes: ld.global.nc for every policy but kDefault.
    constexpr LoadPolicy kPolicy = kBytes == 16 ? kLoad : LoadPolicy::kStream;
    const auto v = load_vec<Vec<uint32_t, kBytes / 4>, kPolicy>(p);
    if constexpr (kBytes == 16) {
      return make_uint4(v[0], v[1], v[2], v[3]);
    } else if constexpr (kBytes == 8) {
      return make_uint2(v[0], v[1]);
    } else {
      return v[0];
    }
  } else {
    return __ldg(p);  // 1 and 2 bytes: ld.global.nc
  }
}

// Output row `row`'s source: its index (through idx_layout; ld.global.nc unless kIdxPlain)
// checked against [vocab_start, vocab_start + num_valid), and the weight row it names (the
// first row for an index outside it: never read then, the row is zeros).
struct SourceRow {
  const char* base;
  bool valid;
};
template <typename TIdx, bool kIdxPlain = false>
__device__ __forceinline__ SourceRow source_row(const EmbeddingLookupParams& p, int64_t row) {
  const TIdx* __restrict__ indices = static_cast<const TIdx*>(p.indices);  // see idx_layout
  const TIdx* idx_at = indices + strided_offset(p.idx_layout, row);
  const int64_t index = static_cast<int64_t>(kIdxPlain ? *idx_at : __ldg(idx_at));
  // index - vocab_start cannot overflow once index >= vocab_start >= 0.
  const bool valid = index >= p.vocab_start && index - p.vocab_start < p.num_valid;
  const int64_t src_offset = valid ? (index - p.vocab_start) * p.weight_stride : 0;
  // [V, row_bytes] rows, pitch weight_stride
  return {static_cast<const char*>(p.weight) + src_offset, valid};
}

// Thread i (of `total`) writes chunks c + u * cols (u < kVpt, those < chunks) of output row
// row0 + g, (g, c) = divmod(i, cols); cols = ceil(chunks / kVpt) threads cover a row.
// kPdl (tune only): bit 0 the PDL wait, bit 1 the early trigger, bit 2 a trigger after the
// stores (a kernel without the wait may not be launched with PDL). kIdxPlain (tune only): the
// index through ld.global instead of ld.global.nc.
template <int kBytes, typename TIdx, int kVpt, int kThreads, LoadPolicy kLoad,
          StorePolicy kStore = StorePolicy::kDefault, int kPdl = 3, bool kIdxPlain = false>
__global__ void __launch_bounds__(kThreads)
    embedding_lookup_kernel(const EmbeddingLookupParams p, const FastDivmod cols, const uint32_t chunks,
                            const uint32_t total, const int64_t row0) {
  using C = Chunk<kBytes>;
  const uint32_t i = blockIdx.x * kThreads + threadIdx.x;
  uint32_t g, c;
  cols.divmod(i, g, c);
  const int64_t row = row0 + g;
  // [num_indices, row_bytes]
  C* __restrict__ dst = reinterpret_cast<C*>(static_cast<char*>(p.out) + row * p.row_bytes);

  if constexpr ((kPdl & 1) != 0) SGL_PDL_WAIT();  // before any input is read
  if constexpr ((kPdl & 2) != 0) SGL_PDL_LAUNCH_DEPENDENTS();  // early: see sgl_kernel/arch.cuh
  if (i < total) {
    const SourceRow s = source_row<TIdx, kIdxPlain>(p, row);
    const bool valid = s.valid;
    const C* __restrict__ src = reinterpret_cast<const C*>(s.base);
    C x[kVpt];
#pragma unroll
    for (int u = 0; u < kVpt; ++u) {
      const uint32_t cc = c + u * cols.divisor;
      x[u] = C{};
      if (valid && (u == 0 || cc < chunks)) x[u] = load_chunk<kBytes, kLoad>(src + cc);
    }
#pragma unroll
    for (int u = 0; u < kVpt; ++u) {
      const uint32_t cc = c + u * cols.divisor;
      if (u == 0 || cc < chunks) store_chunk<kBytes, kStore>(dst + cc, x[u]);
    }
  }
  if constexpr ((kPdl & 4) != 0) SGL_PDL_LAUNCH_DEPENDENTS();
}

// One launch shape: kVpt chunks per thread, kThreads per block, kLoad for the weight, kStore for
// the output. Several launches when the call needs more than kMaxLaunchThreads threads.
template <int kBytes, typename TIdx, int kVpt, int kThreads, LoadPolicy kLoad,
          StorePolicy kStore = StorePolicy::kDefault, int kPdl = 3, bool kIdxPlain = false>
cudaError_t launch_shape(const EmbeddingLookupParams& p, cudaStream_t stream) {
  const int64_t chunks = p.row_bytes / kBytes;
  const int64_t cols = ceil_div<int64_t>(chunks, kVpt);
  // Rows of over 2^31 chunks (>= 2 GiB) are refused (the previous kernel took them).
  if (chunks > kMaxLaunchThreads) return cudaErrorInvalidValue;
  const int64_t rows_per_launch = kMaxLaunchThreads / cols;
  for (int64_t row0 = 0; row0 < p.num_indices; row0 += rows_per_launch) {
    const int64_t total = std::min(rows_per_launch, p.num_indices - row0) * cols;
    SGL_CUDA_TRY(launch_kernel(embedding_lookup_kernel<kBytes, TIdx, kVpt, kThreads, kLoad, kStore, kPdl, kIdxPlain>,
                               dim3(static_cast<uint32_t>(ceil_div<int64_t>(total, kThreads))), dim3(kThreads), 0,
                               stream, p.enable_pdl, p, FastDivmod(static_cast<uint32_t>(cols)),
                               static_cast<uint32_t>(chunks), static_cast<uint32_t>(total), row0));
  }
  return cudaSuccess;
}

// The large calls' walk (session 39), the one torch.compile's Triton gather takes: block b
// copies piece b % P of output row b / P, where a piece is kVpt * kThreads consecutive chunks
// (thread t: chunks t + u * kThreads of it) and P = ceil(chunks / (kVpt * kThreads)); the
// row's index is the same for the whole block. kPdl (tune only) as embedding_lookup_kernel's.
template <int kBytes, typename TIdx, int kVpt, int kThreads, int kPdl = 3>
__global__ void __launch_bounds__(kThreads)
    embedding_piece_kernel(const EmbeddingLookupParams p, const FastDivmod pieces, const uint32_t chunks,
                           const int64_t row0) {
  using C = Chunk<kBytes>;
  uint32_t g, piece;
  pieces.divmod(blockIdx.x, g, piece);
  const int64_t row = row0 + g;
  // [num_indices, row_bytes]
  C* __restrict__ dst = reinterpret_cast<C*>(static_cast<char*>(p.out) + row * p.row_bytes);
  // c0 + (kVpt - 1) * kThreads < chunks + kVpt * kThreads <= 2^31 + 2^16: no wrap
  const uint32_t c0 = piece * (kVpt * kThreads) + threadIdx.x;

  if constexpr ((kPdl & 1) != 0) SGL_PDL_WAIT();  // before any input is read
  if constexpr ((kPdl & 2) != 0) SGL_PDL_LAUNCH_DEPENDENTS();  // early: see sgl_kernel/arch.cuh
  const SourceRow s = source_row<TIdx>(p, row);
  const bool valid = s.valid;
  const C* __restrict__ src = reinterpret_cast<const C*>(s.base);
  C x[kVpt];
#pragma unroll
  for (int u = 0; u < kVpt; ++u) {
    const uint32_t cc = c0 + u * kThreads;
    x[u] = C{};
    if (valid && cc < chunks) x[u] = load_chunk<kBytes, LoadPolicy::kDefault>(src + cc);
  }
#pragma unroll
  for (int u = 0; u < kVpt; ++u) {
    const uint32_t cc = c0 + u * kThreads;
    if (cc < chunks) store_chunk<kBytes, StorePolicy::kDefault>(dst + cc, x[u]);
  }
  if constexpr ((kPdl & 4) != 0) SGL_PDL_LAUNCH_DEPENDENTS();
}

// Pieces of kVpt * kThreads chunks; several launches when the call needs more than 2^31 - 1
// blocks.
template <int kBytes, typename TIdx, int kVpt, int kThreads, int kPdl = 3>
cudaError_t launch_pieces(const EmbeddingLookupParams& p, cudaStream_t stream) {
  const int64_t chunks = p.row_bytes / kBytes;
  if (chunks > kMaxLaunchThreads) return cudaErrorInvalidValue;  // as launch_shape
  const int64_t pieces = ceil_div<int64_t>(chunks, int64_t{kVpt} * kThreads);
  const int64_t rows_per_launch = kMaxLaunchBlocks / pieces;
  for (int64_t row0 = 0; row0 < p.num_indices; row0 += rows_per_launch) {
    const int64_t blocks = std::min(rows_per_launch, p.num_indices - row0) * pieces;
    SGL_CUDA_TRY(launch_kernel(embedding_piece_kernel<kBytes, TIdx, kVpt, kThreads, kPdl>,
                               dim3(static_cast<uint32_t>(blocks)), dim3(kThreads), 0, stream, p.enable_pdl, p,
                               FastDivmod(static_cast<uint32_t>(pieces)), static_cast<uint32_t>(chunks), row0));
  }
  return cudaSuccess;
}

// Rows of at most kMaxChunks chunks (session 43: shuffle_rows' fp32 scale rows of 224 bytes): a
// warp copies 32 consecutive output rows. Lane l loads the index of the warp's row l (one load
// instruction for the 32 rows), then takes items j = l + 32 k of the warp's n * chunks output
// chunks in output order: chunk j % chunks of row j / chunks, whose source comes from the lane
// that loaded that row's index (shuffles). A lane issues all its loads before its stores.
// kPdl as embedding_lookup_kernel's.
template <int kBytes, typename TIdx, int kMaxChunks, int kThreads, int kPdl = 3>
__global__ void __launch_bounds__(kThreads)
    embedding_warp_rows_kernel(const EmbeddingLookupParams p, const FastDivmod chunks, const int64_t row0,
                               const int64_t rows) {
  using C = Chunk<kBytes>;
  static_assert(kThreads % 32 == 0, "whole warps");
  const int lane = static_cast<int>(threadIdx.x & 31);
  // the warp's first row; warp-uniform, so a warp past the end leaves as a whole
  const int64_t first = row0 + ((static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) >> 5) * 32;
  const int64_t end = row0 + rows;

  if constexpr ((kPdl & 1) != 0) SGL_PDL_WAIT();  // before any input is read
  if constexpr ((kPdl & 2) != 0) SGL_PDL_LAUNCH_DEPENDENTS();  // early: see sgl_kernel/arch.cuh
  if (first < end) {
    const uint32_t n = static_cast<uint32_t>(end - first < 32 ? end - first : 32);
    SourceRow s{static_cast<const char*>(p.weight), false};
    if (static_cast<uint32_t>(lane) < n) s = source_row<TIdx>(p, first + lane);
    const uint32_t total = n * chunks.divisor;  // <= 32 * kMaxChunks
    // [num_indices, row_bytes]: the warp's rows are one contiguous run of output chunks
    C* __restrict__ dst = reinterpret_cast<C*>(static_cast<char*>(p.out) + first * p.row_bytes);
    const auto base = reinterpret_cast<uintptr_t>(s.base);
    C x[kMaxChunks];
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      const uint32_t j = static_cast<uint32_t>(lane + 32 * k);
      uint32_t r, c;
      chunks.divmod(j, r, c);
      // every lane takes part in the shuffles; r >= 32 only where j >= total (unused)
      const auto src = static_cast<uintptr_t>(__shfl_sync(0xffffffffu, static_cast<unsigned long long>(base),
                                                          static_cast<int>(r & 31)));
      const bool valid = __shfl_sync(0xffffffffu, static_cast<int>(s.valid), static_cast<int>(r & 31)) != 0;
      x[k] = C{};
      if (j < total && valid) x[k] = load_chunk<kBytes, LoadPolicy::kDefault>(reinterpret_cast<const C*>(src) + c);
    }
#pragma unroll
    for (int k = 0; k < kMaxChunks; ++k) {
      const uint32_t j = static_cast<uint32_t>(lane + 32 * k);
      if (j < total) store_chunk<kBytes, StorePolicy::kDefault>(dst + j, x[k]);
    }
  }
  if constexpr ((kPdl & 4) != 0) SGL_PDL_LAUNCH_DEPENDENTS();
}

// Rows of at most kMaxChunks chunks, 32 a warp; several launches past a grid's 2^31 - 1 blocks.
template <int kBytes, typename TIdx, int kMaxChunks, int kThreads, int kPdl = 3>
cudaError_t launch_warp_rows(const EmbeddingLookupParams& p, cudaStream_t stream) {
  const int64_t chunks = p.row_bytes / kBytes;
  if (chunks < 1 || chunks > kMaxChunks) return cudaErrorInvalidValue;
  constexpr int64_t kRowsPerBlock = kThreads;  // 32 rows a warp
  const int64_t rows_per_launch = kMaxLaunchBlocks * kRowsPerBlock;
  for (int64_t row0 = 0; row0 < p.num_indices; row0 += rows_per_launch) {
    const int64_t rows = std::min(rows_per_launch, p.num_indices - row0);
    SGL_CUDA_TRY(launch_kernel(embedding_warp_rows_kernel<kBytes, TIdx, kMaxChunks, kThreads, kPdl>,
                               dim3(static_cast<uint32_t>(ceil_div<int64_t>(rows, kRowsPerBlock))), dim3(kThreads), 0,
                               stream, p.enable_pdl, p, FastDivmod(static_cast<uint32_t>(chunks)), row0, rows));
  }
  return cudaSuccess;
}

// NOTE (H200, PDL on; benchmark/project/tune_store_embed.cu, us against the previous kernel,
// which gave each row a group of up to 256 threads with 4 chunks each): 2 chunks per thread,
// 256-thread blocks, plain loads ("v2 t256") won from 1 MB of output up: bf16 D=4096 T=128/
// 1024/32768 1.25/6.01/135.1 (previous 1.48/6.29/134.1); one chunk per thread, 128-thread
// blocks, read-only loads, is best for the smallest gathers (fp16 T=1 D=8192 0.96 against
// 1.34 and 1.01; bf16 T=16 1.04 against 1.42 and 1.05) but 1.58 at T=128: it serves up to
// 256 KB of output.
// NOTE (H200, session 22, same tune, bf16 T=32768 D=4096, us): prod 134.1; output stored
// evict_first 136.1; weight loaded evict_first or read-only 143.5; torch.compile's launch shape
// (one chunk a thread, 128 threads) 159.7 with the early PDL trigger and 138.9 without it: a
// trigger in every block of a grid of short blocks costs, prod's shape does not notice it
// (134.1-134.9 with it at the end or without). Triton's kernel of that shape reads 131.6 in
// bench_embedding_lookup.py; the cause of that 1.7 % was not found.
// NOTE (H200, session 39): most of it is the walk. Triton gathers in a Python probe (CUDA
// graphs, bf16 T=32768 D=4096): pieces of 4 KB on 128 threads 132.3 us, 2 KB / 128 132.7,
// 4 KB / 256 133.4, a whole 8 KB row on 256 threads (production's walk) 136.3; production
// 135.4. The same tune with --streams 64, two runs alike, production's 2 chunks a thread on
// 256 threads against embedding_piece_kernel with 4 KB pieces on 128 threads ("pc v2 t128"):
// bf16 D=4096 T = 1024 / 8192 / 32768 5.97-5.98 / 35.06-35.07 / 134.56 against 5.96 / 34.40 /
// 131.02-131.04; fp16 T=8192 D=8192 67.03-67.04 / 66.57; fp32 T=8192 D=2048 35.02-35.03 /
// 34.24-34.25; the vocab-parallel shard T=8192 / 32768 21.28 / 79.92 against 21.20-21.21 /
// 80.31-80.38. Without the early trigger (p1) or with it after the stores (p5): the same at
// the large calls, 0.1-0.2 us slower at the small ones. Pieces of 2 KB on 128 threads (one
// chunk a thread, Triton's own shape) still read 159.7 here (140.2 without the early
// trigger) against Triton's 132.7: why one chunk a thread costs this kernel more was not found.
// Calls above kSmallMaxBytes take it, for rows of at least kPieceMinChunks chunks.
constexpr int64_t kSmallMaxBytes = int64_t{256} << 10;
// NOTE (H200, session 43): a block a piece leaves threads idle in a row shorter than one piece
// (2 chunks x 128 threads): shuffle_rows' fp32 scale rows of 224 B (14 chunks) used 7 threads of
// 128, and 8192 / 32768 of them took 10.6 / 40.1 us against torch.compile's 1.86 / 3.74
// (bench_shuffle_rows.py). Shorter rows take the flat grid of 2 chunks a thread on 256 threads
// (several rows a block), production's large-call shape before session 39.
constexpr int64_t kPieceMinChunks = 256;
// NOTE (H200, session 43, tune_store_embed.cu --op embed --short --streams 64, us): rows of at
// most 16 chunks, 32 a warp (embedding_warp_rows_kernel, "wr16 tT") against the flat grid ("v2
// t256"): fp32 rows of 56 (224 B) at T = 8192 / 32768 / 131072: t256 2.45 / 3.31 / 14.39,
// t128 2.02 / 3.44 / 15.02, flat 1.65 / 4.40 / 14.92 (v4 t256 1.59 / 3.68 / 15.07); bf16 rows
// of 64 at T = 8192 / 131072: t256 1.91 / 7.94, flat 1.28 / 7.92. With few rows a warp's 32
// rows leave too few warps; from kWarpRowsMinRows rows on it takes them.
constexpr int kWarpRowsMaxChunks = 16;
constexpr int64_t kWarpRowsMinRows = 32768;

}  // namespace embedding
}  // namespace

cudaError_t launch_embedding_lookup(const EmbeddingLookupParams& p, cudaStream_t stream) {
  if (p.num_indices == 0 || p.row_bytes == 0) return cudaSuccess;
  const int bytes = chunk_bytes({address(p.out), address(p.weight), static_cast<uint64_t>(p.weight_stride),
                                 static_cast<uint64_t>(p.row_bytes)});
  return dispatch_row_copy(bytes, p.indices_int64, [&](auto width, auto index) {
    constexpr int kBytes = decltype(width)::value;
    using TIdx = typename decltype(index)::type;
    if (p.num_indices * p.row_bytes <= embedding::kSmallMaxBytes) {
      return embedding::launch_shape<kBytes, TIdx, 1, 128, LoadPolicy::kStream>(p, stream);
    }
    if (p.row_bytes / kBytes <= embedding::kWarpRowsMaxChunks && p.num_indices >= embedding::kWarpRowsMinRows) {
      return embedding::launch_warp_rows<kBytes, TIdx, embedding::kWarpRowsMaxChunks, 256>(p, stream);
    }
    if (p.row_bytes / kBytes < embedding::kPieceMinChunks) {
      return embedding::launch_shape<kBytes, TIdx, 2, 256, LoadPolicy::kDefault>(p, stream);
    }
    return embedding::launch_pieces<kBytes, TIdx, 2, 128>(p, stream);
  });
}

}  // namespace sgl_kernel::project
