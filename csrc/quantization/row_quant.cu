// SPDX-License-Identifier: Apache-2.0
// Per-token quantization kernels: sgl_per_token_quant_fp8 / sgl_per_token_quant_int8, one
// scale per row (the norm + group ops are in norm_quant.cu).
//
// Vector path (hidden % kVec == 0, 16-byte aligned rows): kThreadsPerRow threads own a row and
// keep it in registers (kVpt 16-byte vectors each, vector v at lane v % kThreadsPerRow), so the
// row is read once and its codes written once. Launch shapes follow the RMSNorm kernel
// (csrc/elementwise/norm.cu): a warp per row for many rows, more threads per row for
// decode-sized batches.
// Scalar path (any hidden, any alignment): a block per row, two passes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "quantization/quant.cuh"
#include "quantization/quantization.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/cluster.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/reduce.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/runtime.h"
#include "sgl_kernel/scalar_rows.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::quantization {

namespace {

// Rows per block: 256-thread blocks, or 128 with 8 or more vectors per thread (register-heavy).
template <int kThreadsPerRow, int kVpt>
constexpr int rows_per_block() {
  return std::max(1, (kVpt >= 8 ? 128 : 256) / kThreadsPerRow);
}

// Register budget per thread in the launch bounds: 168 with 8+ vectors per thread, 128 below
// (ptxas needs about 85 and 48 for bf16 rows).
template <int kBlock, int kVpt>
constexpr int min_blocks_per_sm() {
  return std::max(1, 65536 / (kBlock * (kVpt >= 8 ? 168 : 128)));
}

// Maximum (of float bits, abs_bits) over the kThreadsPerRow threads of one row (threadIdx.y
// selects the row; whole warps). The bits of |x| (and of NaN) order as unsigned integers, so a
// warp's maximum is one redux.sync instead of a five-step shuffle tree. Contains
// __syncthreads() when a row spans several warps: every thread of the block must call it, once
// per kernel (the scratch is not reused).
template <int kThreadsPerRow>
__device__ __forceinline__ uint32_t row_max_bits(uint32_t v, uint32_t* scratch) {
  static_assert(kThreadsPerRow % 32 == 0, "whole warps per row");
  v = __reduce_max_sync(0xffffffffu, v);
  if constexpr (kThreadsPerRow > 32) {
    constexpr int kWarps = kThreadsPerRow / 32;
    uint32_t* mine = scratch + threadIdx.y * kWarps;
    if ((threadIdx.x & 31) == 0) mine[threadIdx.x >> 5] = v;
    __syncthreads();
    // Every warp reduces the partials itself (a serial loop over 16-32 partials costs a
    // shared-memory round trip each).
    v = __reduce_max_sync(0xffffffffu, (threadIdx.x & 31) < kWarps ? mine[threadIdx.x & 31] : 0u);
  }
  return v;
}

template <typename T, QuantCode kCode, int kThreadsPerRow, int kVpt>
__global__ void __launch_bounds__(kThreadsPerRow * rows_per_block<kThreadsPerRow, kVpt>(),
                                  min_blocks_per_sm<kThreadsPerRow * rows_per_block<kThreadsPerRow, kVpt>(), kVpt>())
    row_quant_vec_kernel(const RowQuantParams<T> p) {
  constexpr int kVec = kVec16<T>;
  constexpr int kRowsPerBlock = rows_per_block<kThreadsPerRow, kVpt>();
  constexpr int kScratch = kRowsPerBlock * std::max(1, kThreadsPerRow / 32);
  __shared__ uint32_t scratch[kScratch];

  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.y;
  const bool row_valid = row < p.rows;
  const int64_t hidden_vec = p.hidden / kVec;
  uint8_t* out_q = static_cast<uint8_t*>(p.output_q) + row * p.hidden;

  SGL_PDL_WAIT();
  Vec16<T> x[kVpt];
  if (row_valid) {
    const T* in = p.input + row * p.input_stride;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t v = threadIdx.x + static_cast<int64_t>(k) * kThreadsPerRow;
      if (v < hidden_vec) x[k] = load16(in + v * kVec);
    }
  }
  uint32_t amax = 0;
  if (row_valid) {
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t v = threadIdx.x + static_cast<int64_t>(k) * kThreadsPerRow;
      if (v < hidden_vec) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) amax = max(amax, abs_bits(to_float(x[k][e])));
      }
    }
  }
  amax = row_max_bits<kThreadsPerRow>(amax, scratch);
  if (row_valid) {
    const float s = scale_from_amax(amax, p.eps, p.qmax);
    if (threadIdx.x == 0) store_scale(p.scales, 0, row, 0, s);
    const float inv = inverse_scale(s);
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t v = threadIdx.x + static_cast<int64_t>(k) * kThreadsPerRow;
      if (v < hidden_vec) {
        float y[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) y[e] = to_float(x[k][e]);
        *reinterpret_cast<Vec<uint32_t, kVec / 4>*>(out_q + v * kVec) =
            code_words<kCode>(y, inv, p.qmin, p.qmax, needs_clamp<kCode>(p.qmin, p.qmax));
      }
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

// Per-token ops, any hidden size and alignment: a block per row (scalar_row_threads), or a warp
// per row (kWarpRows: scalar_warp_rows, many rows of at most 128 elements), max pass then code
// pass, each thread loading kScalarBatch elements before it uses any (sgl_kernel/scalar_rows.cuh).
template <typename T, QuantCode kCode, bool kWarpRows = false>
__global__ void __launch_bounds__(1024) per_token_scalar_kernel(const RowQuantParams<T> p) {
  __shared__ uint32_t scratch[32];
  const ScalarRow<kWarpRows> at;
  const int64_t row = at.row, step = at.step;
  const T* in = p.input + row * p.input_stride;
  uint8_t* out_q = static_cast<uint8_t*>(p.output_q) + row * p.hidden;
  SGL_PDL_WAIT();
  if (kWarpRows && row >= p.rows) return;  // the last block's spare warps (whole warps)
  uint32_t amax = 0;
  for (int64_t j0 = at.tid; j0 < p.hidden; j0 += step * kScalarBatch) {
    float f[kScalarBatch];
    load_scalar_batch(in, j0, step, p.hidden, f);  // 0 past the row: no effect on the maximum
#pragma unroll
    for (int u = 0; u < kScalarBatch; ++u) amax = max(amax, abs_bits(f[u]));
  }
  // the row's maximum of the bits: the warp's (kWarpRows), else the block's
  amax = group_max_bits<32>(amax);
  if constexpr (!kWarpRows) {
    if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = amax;
    __syncthreads();
    amax = group_max_bits<32>((threadIdx.x & 31) < (blockDim.x >> 5) ? scratch[threadIdx.x & 31] : 0u);
  }
  const float s = scale_from_amax(amax, p.eps, p.qmax);
  if (at.tid == 0) store_scale(p.scales, 0, row, 0, s);
  const float inv = inverse_scale(s);
  for (int64_t j0 = at.tid; j0 < p.hidden; j0 += step * kScalarBatch) {
    float f[kScalarBatch];
    load_scalar_batch(in, j0, step, p.hidden, f);
#pragma unroll
    for (int u = 0; u < kScalarBatch; ++u) {
      const int64_t j = j0 + u * step;
      if (j < p.hidden) out_q[j] = to_code<kCode>(f[u] * inv, p.qmin, p.qmax);
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

// Few long rows (sm90+): a cluster of blocks per row (launch_variant). Block r of a row's
// cluster holds vectors r * blockDim.x + threadIdx.x + u * (cluster blocks * blockDim.x), u <
// kVpt, in registers; the blocks' maxima are combined through distributed shared memory
// (cluster_reduce), and each block codes its share with the row's scale.
constexpr int kClusterMaxThreads = 512;

template <typename T, QuantCode kCode, int kVpt>
__global__ void __launch_bounds__(kClusterMaxThreads) row_quant_cluster_kernel(const RowQuantParams<T> p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  __shared__ uint32_t warp_max[kClusterMaxThreads / 32];
  __shared__ uint32_t block_max[kMaxClusterBlocks];  // cluster_reduce's table
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int cs = static_cast<int>(cooperative_groups::this_cluster().num_blocks());
  const int64_t row = blockIdx.x / cs;
  const int64_t g = static_cast<int64_t>(blockIdx.x % cs) * blockDim.x + tid;
  const int64_t total = static_cast<int64_t>(cs) * blockDim.x;
  const int64_t hidden_vec = p.hidden / kVec16<T>;
  const T* in = p.input + row * p.input_stride;
  uint8_t* out_q = static_cast<uint8_t*>(p.output_q) + row * p.hidden;
  SGL_PDL_WAIT();
  Vec16<T> x[kVpt];
  load_share(x, in, g, total, hidden_vec);
  uint32_t amax = __reduce_max_sync(0xffffffffu, share_max_bits(x, g, total, hidden_vec, 0u));
  if (lane == 0) warp_max[tid >> 5] = amax;
  __syncthreads();
  amax = __reduce_max_sync(0xffffffffu, lane < static_cast<int>(blockDim.x >> 5) ? warp_max[lane] : 0u);
  amax = cluster_reduce(amax, block_max, [](uint32_t a, uint32_t b) { return max(a, b); });
  const float s = scale_from_amax(amax, p.eps, p.qmax);
  if (g == 0) store_scale(p.scales, 0, row, 0, s);
  store_share_codes<kCode>(x, out_q, g, total, hidden_vec, inverse_scale(s), p.qmin, p.qmax,
                           needs_clamp<kCode>(p.qmin, p.qmax));
  SGL_PDL_LAUNCH_DEPENDENTS();
#elif defined(__CUDA_ARCH__)
  __trap();  // no clusters below sm90: cluster_launchable refuses this code
#endif
}

template <typename T, QuantCode kCode, int kVpt>
cudaError_t launch_row_cluster(const RowQuantParams<T>& p, int cs, int threads, cudaStream_t stream) {
  return launch_kernel_clustered(row_quant_cluster_kernel<T, kCode, kVpt>,
                                 dim3(static_cast<uint32_t>(p.rows * cs)), dim3(static_cast<uint32_t>(threads)), 0,
                                 stream, p.enable_pdl, cs, p);
}

template <typename T, QuantCode kCode, int kThreadsPerRow, int kVpt>
cudaError_t launch_vec(const RowQuantParams<T>& p, cudaStream_t stream) {
  constexpr int kRowsPerBlock = rows_per_block<kThreadsPerRow, kVpt>();
  const dim3 grid(static_cast<uint32_t>(ceil_div<int64_t>(p.rows, kRowsPerBlock)));
  const dim3 block(kThreadsPerRow, kRowsPerBlock);
  return launch_kernel(row_quant_vec_kernel<T, kCode, kThreadsPerRow, kVpt>, grid, block, 0, stream,
                       p.enable_pdl, p);
}

// Returns cudaErrorNotSupported when no vector configuration fits.
template <typename T, QuantCode kCode>
cudaError_t launch_variant(const RowQuantParams<T>& p, cudaStream_t stream) {
  const int64_t v = p.hidden / kVec16<T>;  // 16-byte vectors per row
  // NOTE: launch shapes from the RMSNorm sweep (benchmark/elementwise/tune_rmsnorm.cu, H200):
  // 8 vectors per lane for many rows; decode-sized batches (<= 256 rows) use 2 vectors per
  // lane over more threads (up to 1024: H=16384 bf16 T=1 took 2.67 us with 512 x 8).
  if (p.rows > 256) {
    if (v <= 32) return launch_vec<T, kCode, 32, 1>(p, stream);
    if (v <= 128) return launch_vec<T, kCode, 32, 4>(p, stream);
    if (v <= 256) return launch_vec<T, kCode, 32, 8>(p, stream);
    if (v <= 512) return launch_vec<T, kCode, 64, 8>(p, stream);
    if (v <= 1024) return launch_vec<T, kCode, 128, 8>(p, stream);
    if (v <= 2048) return launch_vec<T, kCode, 256, 8>(p, stream);
    if (v <= 4096) return launch_vec<T, kCode, 512, 8>(p, stream);
  } else {
    // Few rows of 2048-4096 vectors (bf16 H=16384-32768; sm90+): a cluster of 8 blocks of 256
    // threads per row. tune_per_tensor.cu --op token (H100, bf16, us, against the one-block
    // row below): H=16384 T=1/8/9/16 1.79/1.85/1.95/2.25 (2.10/2.18/2.20/2.22); H=32768
    // T=1/8/9/16 2.00/2.07/2.17/2.39 (the 512 x 8 row kernel beyond 8 rows: 3.55/3.54);
    // H=8192 slower at every T (1.77 at best against 1.30-1.64).
    constexpr int kBlocks = 8, kThreads = 256;
    if (v >= 2048 && v <= 2 * kBlocks * kThreads && p.rows <= (v <= kBlocks * kThreads ? 12 : 16)) {
      if (v <= kBlocks * kThreads) {
        if (cluster_launchable<row_quant_cluster_kernel<T, kCode, 1>>(kBlocks, kThreads)) {
          return launch_row_cluster<T, kCode, 1>(p, kBlocks, kThreads, stream);
        }
      } else if (cluster_launchable<row_quant_cluster_kernel<T, kCode, 2>>(kBlocks, kThreads)) {
        return launch_row_cluster<T, kCode, 2>(p, kBlocks, kThreads, stream);
      }
    }
    if (v <= 64) return launch_vec<T, kCode, 32, 2>(p, stream);
    if (v <= 256) return launch_vec<T, kCode, 128, 2>(p, stream);
    if (v <= 1024) return launch_vec<T, kCode, 512, 2>(p, stream);
    if (v <= 2048) return launch_vec<T, kCode, 1024, 2>(p, stream);
    if (v <= 4096) return launch_vec<T, kCode, 512, 8>(p, stream);
  }
  return cudaErrorNotSupported;
}

template <typename T, QuantCode kCode>
cudaError_t launch_code(const RowQuantParams<T>& p, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  const bool vec_ok = p.hidden % kVec == 0 && rows_aligned16(p.input, p.input_stride, sizeof(T)) &&
                      rows_aligned16(p.output_q, p.hidden, 1);
  if (vec_ok) {
    const cudaError_t err = launch_variant<T, kCode>(p, stream);
    if (err != cudaErrorNotSupported) return err;
  }
  if (scalar_warp_rows(p.rows, p.hidden)) {
    constexpr int kRowsPerBlock = kScalarWarpRowsBlock / 32;
    return launch_kernel(per_token_scalar_kernel<T, kCode, true>,
                         dim3(static_cast<uint32_t>(ceil_div<int64_t>(p.rows, kRowsPerBlock))),
                         dim3(kScalarWarpRowsBlock), 0, stream, p.enable_pdl, p);
  }
  return launch_kernel(per_token_scalar_kernel<T, kCode>, dim3(static_cast<uint32_t>(p.rows)),
                       dim3(static_cast<uint32_t>(scalar_row_threads(p.rows, p.hidden))), 0, stream, p.enable_pdl, p);
}

}  // namespace

template <typename T>
cudaError_t launch_row_quant(QuantCode code, const RowQuantParams<T>& p, cudaStream_t stream) {
  if (p.rows == 0 || p.hidden == 0) return cudaSuccess;
  if (p.rows >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  switch (code) {
    case QuantCode::kFp8:
      return launch_code<T, QuantCode::kFp8>(p, stream);
    case QuantCode::kInt8RoundEven:
      return launch_code<T, QuantCode::kInt8RoundEven>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template cudaError_t launch_row_quant<float>(QuantCode, const RowQuantParams<float>&, cudaStream_t);
template cudaError_t launch_row_quant<half>(QuantCode, const RowQuantParams<half>&, cudaStream_t);
template cudaError_t launch_row_quant<__nv_bfloat16>(QuantCode, const RowQuantParams<__nv_bfloat16>&,
                                                     cudaStream_t);

}  // namespace sgl_kernel::quantization
