// SPDX-License-Identifier: Apache-2.0
// lightning_attention_decode (API.md 2.5, legacy): one decode step of linear attention with
// exponential decay (MiniMax lightning attention). Per row r = b * heads + h (a batch entry's
// head), with the state S = past_kv[r] ([d, e], fp32):
//   ratio = expf(-slope[h])                                  (fp32, the accurate expf)
//   new_kv[r, i, j] = fmaf(k[r, i], v[r, j], ratio * past_kv[r, i, j])
//   output[r, j] = sum over i = 0..d-1 of q[r, i] * new_kv[r, i, j], rounded once to dtype.
// Arithmetic: q, k, v are converted to fp32 (exact for fp16 / bf16). ratio * past is rounded
// once, then k * v is added to it with one fused multiply-add, so new_kv is the fp32 value
// written (ratio 1, slope 0: past + k * v rounded once; ratio 0, a slope past ~104: k * v
// rounded once). The output sums the fp32 new_kv values just stored (the same bits), each
// term added with an fma into an fp32 accumulator: a thread sums its rows in increasing i, the
// row groups of a block are added in group order, and the blocks of a cluster in rank order;
// the order depends only on the shapes (and a forced cluster size), so equal calls give equal
// bits. NaN or inf in an input propagates as IEEE says.
//
// Design: a bandwidth kernel (each row reads and writes d * e fp32 of state; q, k, v and the
// output are 1/e and 1/d of that). A block of kThreads threads owns one row (or a slice of its d
// kv rows, below). Its threads form tg groups of tc threads; a column piece is 4 fp32 (16
// bytes, vector path) or one element (scalar path), and thread c of a group owns pieces c and
// c + tc of each pass of 2 tc pieces over the columns. Group g takes the kv rows g, g + tg,
// g + 2 tg, ... of the block's slice, so a warp's loads cover whole 256-byte halves of kv rows.
// A thread issues the loads of kBatch of its kv rows (both pieces, with their k and q elements)
// before any arithmetic, stores the new pieces, keeps 2 x 4 (or 2 x 1) partial outputs in
// registers, and the groups' partials are added in shared memory, in group order. MiniMax
// (d = e = 128): tc = 16, tg = 16, 8 kv rows a thread, all 16 of its 16-byte state loads in
// flight at once.
// Cluster split (tuning only: SGL_KERNEL_LIGHTNING_CLUSTER; sm90+, vector path, e <= 2048; the
// default up to session 46 for rows * 2 <= SMs, measured slower in session 47): a row is split
// over a cluster of cs = 2..8 blocks (block `rank` takes kv rows [rank * chunk, (rank + 1)
// * chunk)), to occupy more SMs with few rows; each block reduces its groups into shared
// memory, then the blocks add the cluster's partials through distributed shared memory in rank
// order, block `rank` writing the output columns rank * kThreads + t, stepping cs * kThreads.
// Vector path: e % 4 == 0, past_kv and new_kv 16-byte aligned, v and output aligned to 4
// elements (contiguous tensors at the allocator's base addresses are); otherwise (e % 4 != 0,
// a view at an odd offset) the scalar path: the same arithmetic, other groups (so the output
// may round differently in the last fp32 bit).
// Aliasing: new_kv may be past_kv itself: every element of the state is loaded, then stored,
// by one thread, and a thread stores a batch only after it has loaded it; state loads are plain
// ld.global (no read-only path), and nothing else is read after a store. No other overlap.
// PDL: the wait precedes every global access; grids that fit in one wave (the decode calls)
// trigger their dependents once their first batch of loads is issued (PdlTrigger::kAfterLoads),
// larger ones at the end, as merge_state.cu does.
// Offsets: rows * d * e may pass 2^31, so row offsets are 64-bit; offsets inside a row are
// 32-bit unsigned (d * e <= 2^32: the binding caps d and e at 65536, the launcher checks);
// rows are cut into launches of at most kMaxLaunchRows blocks.
#include <algorithm>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/attention.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/cluster.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/runtime.h"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::attention {

namespace {
namespace lightning_decode_impl {

constexpr int kThreads = 256;  // every instance's block size; at most 128 registers (2 blocks an SM)
// Column pieces a thread owns (pieces c and c + tc of a pass) and kv rows it holds at once: 8 x 2
// x 16 bytes of state in flight per thread, 64 registers, with 8 q and 8 k elements (16 rows of
// one piece would need 16 of each, and spilled under the 128-register cap). A MiniMax row (d =
// e = 128: tc = 16, tg = 16) is a single batch.
constexpr int kPieces = 2;
constexpr int kBatch = 8;
constexpr int64_t kMaxLaunchRows = int64_t{1} << 30;  // rows of one launch
constexpr int kMaxCluster = 8;                        // portable cluster sizes only
// One block per row (cluster_blocks: measured in session 47). NOTE (not measured): the trigger
// after the first loads for grids of at most kSmallBlocksPerSm blocks an SM, at the end for
// larger grids.
constexpr int kSmallBlocksPerSm = 2;

// Threads of a block: tg groups of tc threads, each thread owning kPieces column pieces a pass.
struct Layout {
  int tc;    // threads across the columns of one pass: min(ceil(cols / kPieces), kThreads)
  int tg;    // row groups: kThreads / tc (threads from tc * tg on idle)
  int cols;  // column pieces of a kv row: e / kW
};

// A Vec<T, N> of 4, 8 or 16 bytes in one instruction, or a single element (N = 1).
template <typename V>
__device__ __forceinline__ V load_piece(const void* p) {
  if constexpr (sizeof(V) >= 4) {
    return load_vec<V>(p);
  } else {
    return *static_cast<const V*>(p);
  }
}
template <typename V>
__device__ __forceinline__ void store_piece(void* p, const V& v) {
  if constexpr (sizeof(V) >= 4) {
    store_vec(p, v);
  } else {
    *static_cast<V*>(p) = v;
  }
}

// Block `blockIdx.x` handles row row0 + blockIdx.x (kCluster: row row0 + blockIdx.x / cs, the
// kv-row slice of its cluster rank); head0 = row0 % heads. See the file comment.
template <typename T, bool kVec, bool kCluster, bool kSmall>
__global__ void __launch_bounds__(kThreads, 2)
    lightning_decode_kernel(const LightningDecodeParams p,  // q, k: [rows, d]; v, output: [rows, e];
                                                            // past_kv, new_kv: [rows, d, e]; slope: [heads]
                            const Layout lay, const int64_t row0, const uint32_t head0) {
  constexpr int kW = kVec ? 4 : 1;
  using KvPiece = Vec<float, kW>;
  using TPiece = Vec<T, kW>;
  __shared__ __align__(16) float red[kThreads * kPieces * kW];  // [tg, pass columns] partial outputs

  uint32_t local = blockIdx.x, rank = 0, cs = 1;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kCluster) {
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cs = cluster.num_blocks();
    rank = cluster.block_rank();
    local = blockIdx.x / cs;
  }
#elif defined(__CUDA_ARCH__)
  if constexpr (kCluster) __trap();  // no clusters below sm90: cluster_launchable refuses this code
#endif
  const int64_t row = row0 + local;
  const uint32_t head = (head0 + local) % static_cast<uint32_t>(p.heads);
  const int d = p.d, e = p.e;
  const int64_t state = row * d * e;
  const float* past = p.past_kv + state;  // [d, e] of this row
  float* next = p.new_kv + state;         // [d, e] of this row (may be `past`)
  const T* q = static_cast<const T*>(p.q) + row * d;
  const T* k = static_cast<const T*>(p.k) + row * d;
  const T* v = static_cast<const T*>(p.v) + row * e;
  T* out = static_cast<T*>(p.output) + row * e;

  const int t = threadIdx.x;
  const int g = t / lay.tc;
  const int c = t - g * lay.tc;
  const bool active = g < lay.tg;
  // This block's kv rows [i_begin, i_end): all d of them, or its cluster rank's slice.
  const int chunk = (d + static_cast<int>(cs) - 1) / static_cast<int>(cs);
  const int i_begin = min(d, static_cast<int>(rank) * chunk);
  const int i_end = min(d, i_begin + chunk);

  if constexpr (kSmall) {
    pdl_wait_prefetched(past, p.slope + head);  // before any input is read
  } else {
    SGL_PDL_WAIT();  // before any input is read
  }
  const float ratio = expf(-p.slope[head]);
  [[maybe_unused]] bool trigger = kSmall;  // the trigger is still to be given (kSmall: after the first loads)

  // Passes over the columns, tc * kPieces pieces each; the thread owns pieces c0 + c + m * tc.
  for (int c0 = 0; c0 < lay.cols; c0 += lay.tc * kPieces) {
    bool has[kPieces];   // the piece exists (the thread's group is a real one, the column is in e)
    uint32_t j[kPieces];  // its first element column
    float vf[kPieces][kW], acc[kPieces][kW];
#pragma unroll
    for (int m = 0; m < kPieces; ++m) {
      const int col = c0 + c + m * lay.tc;
      has[m] = active && col < lay.cols;
      j[m] = static_cast<uint32_t>(col) * kW;
#pragma unroll
      for (int w = 0; w < kW; ++w) vf[m][w] = acc[m][w] = 0.0f;
      if (has[m]) {
        const TPiece vv = load_piece<TPiece>(v + j[m]);
#pragma unroll
        for (int w = 0; w < kW; ++w) vf[m][w] = to_float(vv[w]);
      }
    }
    // A thread without pieces or rows (idle, past the columns, a group beyond the slice) runs
    // one batch with every access predicated off, so that it still gives the trigger.
    int i = has[0] ? i_begin + g : i_end;
    do {
      // q and k stay in T until they are used: a conversion next to its load would wait for it.
      KvPiece x[kBatch][kPieces];
      T kt[kBatch], qt[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int ii = i + b * lay.tg;  // < 2^17: d <= 65536, kBatch * tg <= 2048
        if (ii < i_end) {
          const uint32_t off = static_cast<uint32_t>(ii) * static_cast<uint32_t>(e);  // < d * e <= 2^32
#pragma unroll
          for (int m = 0; m < kPieces; ++m) {
            if (has[m]) x[b][m] = load_piece<KvPiece>(past + (off + j[m]));
          }
          kt[b] = k[ii];
          qt[b] = q[ii];
        }
      }
      if constexpr (kSmall) {
        if (trigger) SGL_PDL_LAUNCH_DEPENDENTS();  // PdlTrigger::kAfterLoads
        trigger = false;
      }
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int ii = i + b * lay.tg;
        if (ii < i_end) {
          const uint32_t off = static_cast<uint32_t>(ii) * static_cast<uint32_t>(e);
          const float kf = to_float(kt[b]), qf = to_float(qt[b]);
#pragma unroll
          for (int m = 0; m < kPieces; ++m) {
            if (has[m]) {
              KvPiece y;
#pragma unroll
              for (int w = 0; w < kW; ++w) {
                y[w] = fmaf(kf, vf[m][w], ratio * x[b][m][w]);
                acc[m][w] = fmaf(qf, y[w], acc[m][w]);
              }
              store_piece(next + (off + j[m]), y);
            }
          }
        }
      }
      i += kBatch * lay.tg;
    } while (i < i_end);

    // The groups' partial sums of this pass's columns ([tg, width] in red), added in group order.
    const int width = min(lay.tc * kPieces, lay.cols - c0) * kW;  // element columns of this pass
#pragma unroll
    for (int m = 0; m < kPieces; ++m) {
      if (has[m]) {
        KvPiece a;
#pragma unroll
        for (int w = 0; w < kW; ++w) a[w] = acc[m][w];
        *reinterpret_cast<KvPiece*>(&red[g * width + (c + m * lay.tc) * kW]) = a;
      }
    }
    __syncthreads();
    for (int jj = t; jj < width; jj += kThreads) {
      float s = red[jj];
      for (int gg = 1; gg < lay.tg; ++gg) s += red[gg * width + jj];
      if constexpr (kCluster) {
        red[jj] = s;  // for the cluster below; red[jj] (group 0) is read only by this thread, above
      } else {
        out[static_cast<int64_t>(c0) * kW + jj] = from_float<T>(s);
      }
    }
    __syncthreads();  // red is written again by the next pass
  }

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kCluster) {
    // One pass (e <= kThreads * kPieces * kW): red[0, e) holds this block's sums over its kv rows.
    const cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
    cluster.sync();  // every block's partials are complete and visible
    for (int j = static_cast<int>(rank) * kThreads + t; j < e; j += static_cast<int>(cs) * kThreads) {
      float s = *cluster.map_shared_rank(&red[j], 0);
      for (uint32_t r = 1; r < cs; ++r) s += *cluster.map_shared_rank(&red[j], r);
      out[j] = from_float<T>(s);
    }
    cluster.sync();  // the other blocks are done reading this block's partials
  }
#endif
  if constexpr (!kSmall) SGL_PDL_LAUNCH_DEPENDENTS();  // at the end (kSmallBlocksPerSm's NOTE)
}

// Blocks per row: 1. The session-47 sweep (RESULTS.md, tune_lightning_decode.py) found one block
// a row as fast as or faster than a cluster of 2 or 4 at every shape from 16 rows up (by up to
// 28 %), and 8 rows only 5 % faster on 4. forced > 0 (tuning): that many, a power of two up to
// kMaxCluster as far as every block keeps at least tg kv rows.
int cluster_blocks(int d, int tg, int forced) {
  int cs = 1;
  while (cs < kMaxCluster && 2 * cs <= forced && d >= 2 * cs * tg) cs *= 2;
  return cs;
}

template <typename T, bool kVec, bool kCluster, bool kSmall>
cudaError_t launch_instance(const LightningDecodeParams& p, const Layout& lay, int cs, cudaStream_t stream) {
  constexpr auto kernel = lightning_decode_kernel<T, kVec, kCluster, kSmall>;
  const int64_t rows = p.batch * p.heads;
  for (int64_t row0 = 0; row0 < rows; row0 += kMaxLaunchRows) {
    const int64_t n = std::min(kMaxLaunchRows, rows - row0);
    const dim3 grid(static_cast<uint32_t>(n * cs));
    const auto head0 = static_cast<uint32_t>(row0 % p.heads);
    if constexpr (kCluster) {
      SGL_CUDA_TRY(launch_kernel_clustered(kernel, grid, dim3(kThreads), 0, stream, p.enable_pdl, cs, p, lay, row0,
                                           head0));
    } else {
      SGL_CUDA_TRY(launch_kernel(kernel, grid, dim3(kThreads), 0, stream, p.enable_pdl, p, lay, row0, head0));
    }
  }
  return cudaSuccess;
}

template <typename T, bool kVec>
cudaError_t launch_path(const LightningDecodeParams& p, cudaStream_t stream) {
  constexpr int kW = kVec ? 4 : 1;
  Layout lay{};
  lay.cols = p.e / kW;
  lay.tc = std::min((lay.cols + kPieces - 1) / kPieces, kThreads);
  lay.tg = kThreads / lay.tc;
  const int64_t rows = p.batch * p.heads;
  int device = 0;
  SGL_CUDA_TRY(cudaGetDevice(&device));
  const int sms = device_sm_count(device);
  if constexpr (kVec) {
    // The cluster's reduction reads the partials of one pass: e <= kThreads * kPieces * kW.
    const int cs = lay.cols <= kThreads * kPieces ? cluster_blocks(p.d, lay.tg, p.cluster) : 1;
    if (cs > 1 && cluster_launchable<lightning_decode_kernel<T, true, true, true>>(cs, kThreads)) {
      return launch_instance<T, true, true, true>(p, lay, cs, stream);
    }
  }
  if (rows <= int64_t{kSmallBlocksPerSm} * sms) return launch_instance<T, kVec, false, true>(p, lay, 1, stream);
  return launch_instance<T, kVec, false, false>(p, lay, 1, stream);
}

template <typename T>
cudaError_t launch_dtype(const LightningDecodeParams& p, cudaStream_t stream) {
  constexpr int kTBytes = 4 * static_cast<int>(sizeof(T));  // a piece of v / output
  const bool vec = p.e % 4 == 0 && is_aligned16(p.past_kv) && is_aligned16(p.new_kv) &&
                   rows_aligned(p.v, p.e, sizeof(T), kTBytes) && rows_aligned(p.output, p.e, sizeof(T), kTBytes);
  return vec ? launch_path<T, true>(p, stream) : launch_path<T, false>(p, stream);
}

}  // namespace lightning_decode_impl
}  // namespace

cudaError_t launch_lightning_attention_decode(const LightningDecodeParams& p, cudaStream_t stream) {
  if (p.batch < 0 || p.heads < 1 || p.d < 1 || p.e < 1) return cudaErrorInvalidValue;
  if (static_cast<int64_t>(p.d) * p.e > (int64_t{1} << 32)) return cudaErrorInvalidValue;  // 32-bit row offsets
  if (p.batch == 0) return cudaSuccess;
  if (p.q == nullptr || p.k == nullptr || p.v == nullptr || p.past_kv == nullptr || p.slope == nullptr ||
      p.output == nullptr || p.new_kv == nullptr) {
    return cudaErrorInvalidValue;
  }
  switch (p.dtype) {
    case Dtype::kFloat32: return lightning_decode_impl::launch_dtype<float>(p, stream);
    case Dtype::kFloat16: return lightning_decode_impl::launch_dtype<half>(p, stream);
    case Dtype::kBFloat16: return lightning_decode_impl::launch_dtype<__nv_bfloat16>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sgl_kernel::attention
