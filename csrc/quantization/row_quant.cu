// SPDX-License-Identifier: Apache-2.0
// Row-wise quantization kernels: sgl_per_token_quant_fp8 / sgl_per_token_quant_int8 (one
// scale per row) and fused_rmsnorm_quant / fused_add_rmsnorm_quant (RMSNorm, then one scale
// per group of the normalised row).
//
// Vector path (hidden % kVec == 0, 16-byte aligned rows): kThreadsPerRow threads own a row and
// keep it in registers (kVpt 16-byte vectors each, vector v at lane v % kThreadsPerRow), so the
// row is read once and its codes written once: per-token ops reduce the row's maximum, the
// norm ops reduce the sum of squares and then each group's maximum over the vpg consecutive
// lanes that hold the group. Launch shapes follow the RMSNorm kernel (csrc/elementwise/norm.cu):
// a warp per row for many rows, more threads per row for decode-sized batches.
// Scalar path (per-token ops only: any hidden, any alignment): a block per row, two passes.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "quantization/quant.cuh"
#include "quantization/quantization.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/reduce.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::quantization {

namespace {

// Rows per block: 256-thread blocks, or 128 with 8 or more vectors per thread (register-heavy).
template <int kThreadsPerRow, int kVpt>
constexpr int rows_per_block() {
  return std::max(1, (kVpt >= 8 ? 128 : 256) / kThreadsPerRow);
}

// NOTE: register budget per thread: 168 with 8+ vectors per thread (bf16 rows otherwise spill
// ~100 bytes: ptxas keeps the fp32 copies of the row), 128 below.
template <int kBlock, int kVpt>
constexpr int min_blocks_per_sm() {
  return std::max(1, 65536 / (kBlock * (kVpt >= 8 ? 168 : 128)));
}

struct SumOp {
  __device__ __forceinline__ float operator()(float a, float b) const { return a + b; }
};
struct MaxBitsOp {
  __device__ __forceinline__ uint32_t operator()(uint32_t a, uint32_t b) const { return max(a, b); }
};

// Reduce over the kThreadsPerRow threads of one row (threadIdx.y selects the row). Contains
// __syncthreads() when a row spans several warps: every thread of the block must call it,
// once per kernel (the scratch is not reused).
template <int kThreadsPerRow, typename V, typename Op>
__device__ __forceinline__ V row_reduce(V v, Op op, V* scratch) {
#pragma unroll
  for (int offset = std::min(kThreadsPerRow, 32) / 2; offset > 0; offset >>= 1) {
    v = op(v, __shfl_xor_sync(0xffffffffu, v, offset));
  }
  if constexpr (kThreadsPerRow > 32) {
    constexpr int kWarps = kThreadsPerRow / 32;
    V* mine = scratch + threadIdx.y * kWarps;
    if ((threadIdx.x & 31) == 0) mine[threadIdx.x >> 5] = v;
    __syncthreads();
    v = mine[0];
#pragma unroll
    for (int w = 1; w < kWarps; ++w) v = op(v, mine[w]);
  }
  return v;
}

// Maximum over `vpg` consecutive lanes (a power of two <= 32). NOTE: every shuffle runs on
// every lane and a select drops the ones beyond the group: a shuffle under a run-time branch
// costs a divergence-handling block per step.
__device__ __forceinline__ uint32_t lanes_max_bits(uint32_t v, int vpg) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1) {
    const uint32_t other = __shfl_xor_sync(0xffffffffu, v, offset);
    v = offset < vpg ? max(v, other) : v;
  }
  return v;
}

// kNorm: one scale per group (else per row); kRms: the group path normalises first.
template <typename T, QuantCode kCode, int kThreadsPerRow, int kVpt, bool kNorm, bool kRms, bool kFused>
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
    const T* res = kFused ? p.residual + row * p.residual_stride : nullptr;
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t v = threadIdx.x + static_cast<int64_t>(k) * kThreadsPerRow;
      if (v < hidden_vec) {
        x[k] = load16(in + v * kVec);
        if constexpr (kFused) {
          const Vec16<T> r = load16(res + v * kVec);
#pragma unroll
          for (int e = 0; e < kVec; ++e) x[k][e] = from_float<T>(to_float(x[k][e]) + to_float(r[e]));
        }
      }
    }
  }

  // NOTE: the weight is loaded with the row, before any store: a weight load issued after a
  // store (which may alias it) waits its full latency, and that chain cost the RMSNorm kernel
  // up to 2x (tune_rmsnorm.cu: "pre" against "chain").
  constexpr bool kPreloadWeight = kRms;
  Vec16<T> w[kPreloadWeight ? kVpt : 1];  // unused without the norm
  if constexpr (kPreloadWeight) {
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      const int64_t v = threadIdx.x + static_cast<int64_t>(k) * kThreadsPerRow;
      if (v < hidden_vec) w[k] = load16(p.weight + v * kVec);
    }
  }
  if constexpr (!kNorm) {
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
    amax = row_reduce<kThreadsPerRow>(amax, MaxBitsOp{}, scratch);
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
          *reinterpret_cast<Vec<uint8_t, kVec>*>(out_q + v * kVec) = to_codes<kCode>(y, inv, p.qmin, p.qmax, needs_clamp<kCode>(p.qmin, p.qmax));
        }
      }
    }
  } else {
    float sum_sq = 0.f;
    if (kRms && row_valid) {
#pragma unroll
      for (int k = 0; k < kVpt; ++k) {
        const int64_t v = threadIdx.x + static_cast<int64_t>(k) * kThreadsPerRow;
        if (v < hidden_vec) {
#pragma unroll
          for (int e = 0; e < kVec; ++e) {
            const float f = to_float(x[k][e]);
            sum_sq += f * f;
          }
        }
      }
    }
    float r = 1.0f;
    if constexpr (kRms) {
      sum_sq = row_reduce<kThreadsPerRow>(sum_sq, SumOp{}, reinterpret_cast<float*>(scratch));
      r = rsqrtf(sum_sq / static_cast<float>(p.hidden) + p.rms_eps);
    }
    const int vpg = p.group_size / kVec;  // a power of two: groups index with shifts
    const int vpg_shift = __ffs(vpg) - 1;
    T* res = kFused && row_valid ? p.residual + row * p.residual_stride : nullptr;
    const bool leader = ((threadIdx.x & 31) & (vpg - 1)) == 0;
    // NOTE: in phases over all k (maxima, shuffles, scales, stores) rather than one k at a
    // time: per-k stores and the leader's branch split the loop into blocks that the compiler
    // cannot overlap, which left each k's shuffle/divide latency exposed.
    auto active = [&](int k) { return row_valid && threadIdx.x + static_cast<int64_t>(k) * kThreadsPerRow < hidden_vec; };
    auto yval = [&](int k, int e) {
      return kRms ? to_float(x[k][e]) * r * to_float(w[kRms ? k : 0][e]) : to_float(x[k][e]);
    };
    uint32_t amax[kVpt];
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      amax[k] = 0;
      if (active(k)) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) amax[k] = max(amax[k], abs_bits(yval(k, e)));
      }
    }
    // A group lies in vpg consecutive lanes of one warp at the same k: wholly inside the row or
    // wholly outside it (hidden_vec is a multiple of vpg), so inactive lanes contribute 0.
#pragma unroll
    for (int k = 0; k < kVpt; ++k) amax[k] = lanes_max_bits(amax[k], vpg);
    float scale[kVpt], inv[kVpt];
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      scale[k] = scale_from_amax(amax[k], p.eps, p.qmax);
      inv[k] = inverse_scale(codes_scale(p.scales, scale[k]));
    }
    const bool clamp = needs_clamp<kCode>(p.qmin, p.qmax);
#pragma unroll
    for (int k = 0; k < kVpt; ++k) {
      if (active(k)) {
        const int64_t v = threadIdx.x + static_cast<int64_t>(k) * kThreadsPerRow;
        if constexpr (kFused) store16(res + v * kVec, x[k]);
        float y[kVec];
#pragma unroll
        for (int e = 0; e < kVec; ++e) y[e] = yval(k, e);
        *reinterpret_cast<Vec<uint8_t, kVec>*>(out_q + v * kVec) = to_codes<kCode>(y, inv[k], p.qmin, p.qmax, clamp);
      }
    }
    if (leader) {
#pragma unroll
      for (int k = 0; k < kVpt; ++k) {
        if (active(k)) {
          const int64_t v = threadIdx.x + static_cast<int64_t>(k) * kThreadsPerRow;
          store_scale(p.scales, 0, row, v >> vpg_shift, scale[k]);
        }
      }
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

// Per-token ops, any hidden size and alignment: a block per row, max pass then code pass.
template <typename T, QuantCode kCode>
__global__ void __launch_bounds__(256) per_token_scalar_kernel(const RowQuantParams<T> p) {
  __shared__ uint32_t scratch[32];
  const int64_t row = blockIdx.x;
  const T* in = p.input + row * p.input_stride;
  uint8_t* out_q = static_cast<uint8_t*>(p.output_q) + row * p.hidden;
  SGL_PDL_WAIT();
  uint32_t amax = 0;
  for (int64_t j = threadIdx.x; j < p.hidden; j += blockDim.x) amax = max(amax, abs_bits(to_float(in[j])));
  // block maximum of the bits
  amax = row_reduce<32>(amax, MaxBitsOp{}, scratch);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = amax;
  __syncthreads();
  amax = scratch[0];
  for (int w = 1; w < static_cast<int>(blockDim.x >> 5); ++w) amax = max(amax, scratch[w]);
  const float s = scale_from_amax(amax, p.eps, p.qmax);
  if (threadIdx.x == 0) store_scale(p.scales, 0, row, 0, s);
  const float inv = inverse_scale(s);
  for (int64_t j = threadIdx.x; j < p.hidden; j += blockDim.x) out_q[j] = to_code<kCode>(to_float(in[j]) * inv, p.qmin, p.qmax);
  SGL_PDL_LAUNCH_DEPENDENTS();
}

// Norm ops, any row alignment and hidden size: a block per row; pass 1 forms the sum of squares
// (and stores the residual), pass 2 gives each warp whole groups (gs / 32 elements per lane).
template <typename T, QuantCode kCode, bool kFused>
__global__ void __launch_bounds__(256) norm_quant_scalar_kernel(const RowQuantParams<T> p) {
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x;
  const T* in = p.input + row * p.input_stride;
  T* res = kFused ? p.residual + row * p.residual_stride : nullptr;
  uint8_t* out_q = static_cast<uint8_t*>(p.output_q) + row * p.hidden;
  SGL_PDL_WAIT();
  float sum_sq = 0.f;
  for (int64_t j = threadIdx.x; j < p.hidden; j += blockDim.x) {
    float f = to_float(in[j]);
    if constexpr (kFused) {
      const T s = from_float<T>(f + to_float(res[j]));
      res[j] = s;
      f = to_float(s);
    }
    sum_sq += f * f;
  }
  // The barrier inside also makes this block's residual stores visible to pass 2.
  sum_sq = block_reduce_sum(sum_sq, scratch);
  const float r = rsqrtf(sum_sq / static_cast<float>(p.hidden) + p.rms_eps);
  const T* src = kFused ? res : in;
  const int lane = threadIdx.x & 31;
  const int warps = blockDim.x >> 5;
  const int64_t groups = p.hidden / p.group_size;
  for (int64_t g = threadIdx.x >> 5; g < groups; g += warps) {
    const int64_t base = g * p.group_size;
    uint32_t amax = 0;
    for (int e = lane; e < p.group_size; e += 32) {
      amax = max(amax, abs_bits(to_float(src[base + e]) * r * to_float(p.weight[base + e])));
    }
    amax = group_max_bits<32>(amax);
    const float s = scale_from_amax(amax, p.eps, p.qmax);
    const float used = lane == 0 ? store_scale(p.scales, 0, row, g, s) : codes_scale(p.scales, s);
    const float inv = inverse_scale(used);
    for (int e = lane; e < p.group_size; e += 32) {
      const float y = to_float(src[base + e]) * r * to_float(p.weight[base + e]);
      out_q[base + e] = to_code<kCode>(y * inv, p.qmin, p.qmax);
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

template <typename T, QuantCode kCode, int kThreadsPerRow, int kVpt, bool kNorm, bool kRms, bool kFused>
cudaError_t launch_vec(const RowQuantParams<T>& p, cudaStream_t stream) {
  constexpr int kRowsPerBlock = rows_per_block<kThreadsPerRow, kVpt>();
  const dim3 grid(static_cast<uint32_t>(ceil_div<int64_t>(p.rows, kRowsPerBlock)));
  const dim3 block(kThreadsPerRow, kRowsPerBlock);
  return launch_kernel(row_quant_vec_kernel<T, kCode, kThreadsPerRow, kVpt, kNorm, kRms, kFused>, grid, block, 0, stream,
                       p.enable_pdl, p);
}

// Returns cudaErrorNotSupported when no vector configuration fits.
template <typename T, QuantCode kCode, bool kNorm, bool kRms, bool kFused>
cudaError_t launch_variant(const RowQuantParams<T>& p, cudaStream_t stream) {
  const int64_t v = p.hidden / kVec16<T>;  // 16-byte vectors per row
  // NOTE: launch shapes from the RMSNorm sweep (benchmark/elementwise/tune_rmsnorm.cu, H200):
  // with the weight preloaded, 8 vectors per lane under a 128-register cap was within 1-2 % of
  // the best shape from T=1024 to T=32768 (H=4096: 4.78 us at T=1024, 4125 GB/s at T=32768);
  // decode-sized batches (<= 256 rows) use 2 vectors per lane over more threads (4 vectors per
  // lane, the RMSNorm sweep's decode winner, measured slower here: fused_rmsnorm_quant H=4096
  // T=1 3.32 us against 1.90).
  // NOTE (H200, fused_rmsnorm_quant bf16 g=128, rows > 256): 4 vectors per lane beat 8 and 2
  // (H=4096 T=32768: 293 / 360 / 316 us; T=1024: 8.3 / 13.6 / 10.5 us). The norm ops still
  // trail rmsnorm + group quant (239 us at T=32768): see benchmark/RESULTS.md.
  if (kRms && p.rows > 256) {
    if (v <= 128) return launch_vec<T, kCode, 32, 4, kNorm, kRms, kFused>(p, stream);
    if (v <= 256) return launch_vec<T, kCode, 64, 4, kNorm, kRms, kFused>(p, stream);
    if (v <= 512) return launch_vec<T, kCode, 128, 4, kNorm, kRms, kFused>(p, stream);
    if (v <= 1024) return launch_vec<T, kCode, 256, 4, kNorm, kRms, kFused>(p, stream);
  }
  if (p.rows > 256) {
    if (v <= 32) return launch_vec<T, kCode, 32, 1, kNorm, kRms, kFused>(p, stream);
    if (v <= 128) return launch_vec<T, kCode, 32, 4, kNorm, kRms, kFused>(p, stream);
    if (v <= 256) return launch_vec<T, kCode, 32, 8, kNorm, kRms, kFused>(p, stream);
    if (v <= 512) return launch_vec<T, kCode, 64, 8, kNorm, kRms, kFused>(p, stream);
    if (v <= 1024) return launch_vec<T, kCode, 128, 8, kNorm, kRms, kFused>(p, stream);
    if (v <= 2048) return launch_vec<T, kCode, 256, 8, kNorm, kRms, kFused>(p, stream);
    if (v <= 4096) return launch_vec<T, kCode, 512, 8, kNorm, kRms, kFused>(p, stream);
  } else {
    if (v <= 64) return launch_vec<T, kCode, 32, 2, kNorm, kRms, kFused>(p, stream);
    if (v <= 256) return launch_vec<T, kCode, 128, 2, kNorm, kRms, kFused>(p, stream);
    if (v <= 1024) return launch_vec<T, kCode, 512, 2, kNorm, kRms, kFused>(p, stream);
    if (v <= 4096) return launch_vec<T, kCode, 512, 8, kNorm, kRms, kFused>(p, stream);
  }
  return cudaErrorNotSupported;
}

bool aligned_rows(const void* ptr, int64_t stride_elems, int elem_bytes) {
  return is_aligned16(ptr) && (stride_elems * elem_bytes) % 16 == 0;
}

template <typename T, QuantCode kCode>
cudaError_t launch_code(const RowQuantParams<T>& p, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  // e4m3 codes serve both kinds of op; truncated int8 only the norm ops (group semantics),
  // rounded int8 only sgl_per_token_quant_int8.
  constexpr bool kNormCode = kCode != QuantCode::kInt8RoundEven;
  constexpr bool kTokenCode = kCode != QuantCode::kInt8Trunc;
  const bool norm = p.weight != nullptr;
  const bool fused = p.residual != nullptr;
  const bool vec_ok = p.hidden % kVec == 0 && aligned_rows(p.input, p.input_stride, sizeof(T)) &&
                      aligned_rows(p.output_q, p.hidden, 1) && (!norm || is_aligned16(p.weight)) &&
                      (!fused || aligned_rows(p.residual, p.residual_stride, sizeof(T)));
  if (norm) {
    if constexpr (kNormCode) {
      if (p.group_size < 1 || p.hidden % p.group_size != 0) return cudaErrorInvalidValue;
      if (vec_ok && p.group_size % kVec == 0 && p.group_size / kVec <= 32) {
        const cudaError_t err = fused ? launch_variant<T, kCode, true, true, true>(p, stream)
                                      : launch_variant<T, kCode, true, true, false>(p, stream);
        if (err != cudaErrorNotSupported) return err;
      }
      const dim3 grid(static_cast<uint32_t>(p.rows));
      return fused ? launch_kernel(norm_quant_scalar_kernel<T, kCode, true>, grid, dim3(256), 0, stream, p.enable_pdl, p)
                   : launch_kernel(norm_quant_scalar_kernel<T, kCode, false>, grid, dim3(256), 0, stream,
                                   p.enable_pdl, p);
    }
    return cudaErrorInvalidValue;
  }
  if constexpr (kTokenCode) {
    if (vec_ok) {
      const cudaError_t err = launch_variant<T, kCode, false, false, false>(p, stream);
      if (err != cudaErrorNotSupported) return err;
    }
    return launch_kernel(per_token_scalar_kernel<T, kCode>, dim3(static_cast<uint32_t>(p.rows)), dim3(256), 0,
                         stream, p.enable_pdl, p);
  }
  return cudaErrorInvalidValue;
}

}  // namespace

template <typename T>
cudaError_t launch_row_quant(QuantCode code, const RowQuantParams<T>& p, cudaStream_t stream) {
  if (p.rows == 0 || p.hidden == 0) return cudaSuccess;
  if (p.rows >= (int64_t{1} << 31)) return cudaErrorInvalidValue;
  switch (code) {
    case QuantCode::kFp8:
      return launch_code<T, QuantCode::kFp8>(p, stream);
    case QuantCode::kInt8Trunc:
      return launch_code<T, QuantCode::kInt8Trunc>(p, stream);
    case QuantCode::kInt8RoundEven:
      return launch_code<T, QuantCode::kInt8RoundEven>(p, stream);
  }
  return cudaErrorInvalidValue;
}

template cudaError_t launch_row_quant<float>(QuantCode, const RowQuantParams<float>&, cudaStream_t);
template cudaError_t launch_row_quant<half>(QuantCode, const RowQuantParams<half>&, cudaStream_t);
template cudaError_t launch_row_quant<__nv_bfloat16>(QuantCode, const RowQuantParams<__nv_bfloat16>&,
                                                     cudaStream_t);

}  // namespace sgl_kernel::quantization
