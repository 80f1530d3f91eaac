// SPDX-License-Identifier: Apache-2.0
// dsv3_router_gemm and dsv3_fused_a_gemm: out[m, n] = sum_k A[m, k] * W[n, k] for a few rows
// (M <= 16) of bf16 activations A [M, K] and a row-major bf16 weight W [N, K] (the router's
// [E, K]; the fused-A projection's column-major mat_b [K, N] is that same W), fp32 accumulation.
//
// Both are bound by reading W once (K = 7168: 3.7 / 5.5 MB for E = 256 / 384, 30 MB for
// N = 2112), so the kernel is a weight stream feeding bf16 tensor-core MMAs (m16n8k16):
//   * A warp owns kNT n-tiles of 8 weight rows and a K slice. Each step covers 32 k: lane
//     (g = lane / 4, t = lane % 4) loads the 16 bytes W[n0 + g, k + 8t .. k + 8t + 8) of each
//     tile (kStages steps in flight, in registers) and the 16 bytes A[g, same k] and
//     A[g + 8, same k] (rows >= M are zeros, not loaded). Summing over k in any order is the
//     same sum, so these 8 k form two m16n8k16 MMAs as they are: the lane's MMA k slots
//     {2t, 2t+1, 2t+8, 2t+9} stand for the actual k {8t..8t+3} in the first MMA and
//     {8t+4..8t+7} in the second, for the A and the B fragment alike. Each weight byte is
//     read once, with 16-byte loads, for all M rows.
//   * A CTA holds kWarpsN x kWarpsK warps: kWarpsN column groups (the CTA's kCols = 8 kNT
//     kWarpsN weight rows) times kWarpsK contiguous slices of the CTA's K range; the slices'
//     partial sums meet in shared memory.
//   * kCluster > 1 (sm90 thread-block clusters): the kCluster CTAs of a cluster split K and
//     their partial sums are reduced through distributed shared memory, so that N / kCols
//     column groups still fill the GPU without a second kernel or atomics.
// The partial sums are added in a fixed order (cluster rank, then K slice): results are
// deterministic. With PDL (sm90) the kernel waits for the previous grid before reading A or W.
//
// NOTE (H200, CUDA graph of back-to-back calls, weights rotated out of L2, PDL on): a plain
// streaming read of 30 MB takes 8.6 us at best there; the fused A GEMM takes 10.3 (M = 1) to
// 11.1 (M = 16) us, cuBLAS 13.2 - 13.4 (0.4 us more without PDL). Router E = 256: 2.8 / 3.9 us
// (M = 1 / 16), cuBLAS 7.8 / 8.8; a plain read of its 3.7 MB takes 1.7 - 2.1 us, an empty
// cluster kernel 0.85. Tried and dropped
// (all slower there): a cp.async shared-memory pipeline reading 512 contiguous bytes of a row
// per warp instruction, a bulk L2 prefetch of each CTA's weight block, warps interleaving over
// K, 2 CTAs per SM, weight loads without the 256-byte L2 fetch hint (fused: 13.5 us).
#include <cuda_bf16.h>
#include <cooperative_groups.h>

#include <cstdint>

#include "gemm/gemm.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/mma.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::gemm {

namespace {

namespace cg = cooperative_groups;

constexpr int kStepK = 32;  // k per warp step: 4 lanes x 8 consecutive k of one weight row


template <LoadPolicy kPolicy>
__device__ __forceinline__ uint4 load_weight16(const __nv_bfloat16* p) {
  const Vec16<__nv_bfloat16> v = load16<__nv_bfloat16, kPolicy>(p);
  return *reinterpret_cast<const uint4*>(&v);
}

__device__ __forceinline__ uint4 load_act16(const __nv_bfloat16* p) {
  // Re-read by the other warps (and CTAs) of the same K slice: cached in L1.
  return *reinterpret_cast<const uint4*>(p);
}

__device__ __forceinline__ void store_out(float* out, float v) { *out = v; }
__device__ __forceinline__ void store_out(__nv_bfloat16* out, float v) { *out = __float2bfloat16_rn(v); }

// The launch shape of one kernel instantiation.
//   kNT       n-tiles (8 weight rows each) per warp
//   kWarpsN   warps side by side over columns; kWarpsK warps over the CTA's K range
//   kStages   K steps of loads in flight per warp (registers)
//   kCluster  CTAs of a cluster splitting K (sm90); 1: the CTA does the whole K
//   kLoad     cache policy of the weight loads
template <int kNT_, int kWarpsN_, int kWarpsK_, int kStages_, int kCluster_, LoadPolicy kLoad_>
struct SkinnyShape {
  static constexpr int kNT = kNT_, kWarpsN = kWarpsN_, kWarpsK = kWarpsK_, kStages = kStages_;
  static constexpr int kCluster = kCluster_;
  static constexpr LoadPolicy kLoad = kLoad_;
  static constexpr int kThreads = 32 * kWarpsN * kWarpsK;
  static constexpr int kCols = 8 * kNT * kWarpsN;  // weight rows (output columns) of one CTA
};

// grid.x = (N / kCols) * kCluster, block = kThreads; requires N % kCols == 0, K % 32 == 0,
// M <= 16 (<= 8 unless kM16), 16-byte aligned A and W rows.
template <typename S, bool kM16, typename TOut>
__global__ void __launch_bounds__(S::kThreads)
    skinny_gemm_kernel(const __nv_bfloat16* __restrict__ a,  // [M, K], row stride lda
                       const __nv_bfloat16* __restrict__ w,  // [N, K], row stride ldw
                       TOut* __restrict__ out,               // [M, N], row stride ldd
                       const int m, const int k, const int64_t lda, const int64_t ldw, const int64_t ldd) {
  constexpr int kNT = S::kNT, kWarpsN = S::kWarpsN, kWarpsK = S::kWarpsK, kStages = S::kStages;
  constexpr int kCluster = S::kCluster, kCols = S::kCols, kThreads = S::kThreads;
  constexpr int kRows = kM16 ? 16 : 8;  // accumulator rows that can hold a result
  constexpr int kARegs = kM16 ? 2 : 1;  // 16-byte A loads per step: rows g and g + 8
  // Partial sums of each K slice of this CTA: [kWarpsK][kRows][kCols].
  __shared__ float partial[kWarpsK * kRows * kCols];

  const int lane = threadIdx.x & 31;
  const int warp = threadIdx.x >> 5;
  const int wn = warp % kWarpsN;
  const int wk = warp / kWarpsN;
  const int g = lane >> 2;  // MMA group: the weight row of a tile, the A row
  const int t = lane & 3;   // thread in group: which 8 of the step's 32 k
  const int group = blockIdx.x / kCluster;
  const int rank = blockIdx.x % kCluster;  // == the cluster's block rank (cluster dims (kCluster, 1, 1))

  // The CTA's K range, then this warp's slice of it, in steps of 32 k.
  const int total_steps = k / kStepK;
  const int cta_begin = total_steps * rank / kCluster;
  const int cta_steps = total_steps * (rank + 1) / kCluster - cta_begin;
  const int first = cta_begin + cta_steps * wk / kWarpsK;
  const int steps = cta_begin + cta_steps * (wk + 1) / kWarpsK - first;
  const int64_t k0 = static_cast<int64_t>(first) * kStepK + 8 * t;

  const int n_warp = group * kCols + wn * kNT * 8;
  const __nv_bfloat16* w_ptr = w + static_cast<int64_t>(n_warp + g) * ldw + k0;
  const int64_t w_tile = 8 * ldw;  // next n-tile: 8 rows down
  const __nv_bfloat16* a_ptr[kARegs];
  bool a_ok[kARegs];
#pragma unroll
  for (int r = 0; r < kARegs; ++r) {
    a_ok[r] = g + 8 * r < m;
    a_ptr[r] = a + static_cast<int64_t>(a_ok[r] ? g + 8 * r : 0) * lda + k0;
  }

  float acc[kNT][4];
#pragma unroll
  for (int i = 0; i < kNT; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;

  SGL_PDL_WAIT();
  uint4 wv[kStages][kNT];
  uint4 av[kStages][kARegs];
  auto load_step = [&](const int slot, const int step) {
    const int64_t off = static_cast<int64_t>(step) * kStepK;
#pragma unroll
    for (int i = 0; i < kNT; ++i) wv[slot][i] = load_weight16<S::kLoad>(w_ptr + i * w_tile + off);
#pragma unroll
    for (int r = 0; r < kARegs; ++r) av[slot][r] = a_ok[r] ? load_act16(a_ptr[r] + off) : make_uint4(0, 0, 0, 0);
  };

  // Register pipeline: slot s holds steps s, s + kStages, ...; the loads of a step are issued
  // kStages steps before its MMAs.
#pragma unroll
  for (int s = 0; s < kStages; ++s) {
    if (s < steps) load_step(s, s);
  }
#pragma unroll 1
  for (int s0 = 0; s0 < steps; s0 += kStages) {
#pragma unroll
    for (int s = 0; s < kStages; ++s) {
      if (s0 + s < steps) {
        const uint4 lo = av[s][0];
        const uint4 hi = kM16 ? av[s][kARegs - 1] : make_uint4(0, 0, 0, 0);
#pragma unroll
        for (int i = 0; i < kNT; ++i) {
          mma_m16n8k16_bf16(acc[i], lo.x, hi.x, lo.y, hi.y, wv[s][i].x, wv[s][i].y);
          mma_m16n8k16_bf16(acc[i], lo.z, hi.z, lo.w, hi.w, wv[s][i].z, wv[s][i].w);
        }
        if (s0 + s + kStages < steps) load_step(s, s0 + s + kStages);
      }
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();

  // Accumulator (i, 0..1): row g, columns 2t, 2t + 1 of tile i; (i, 2..3): row g + 8.
  float* mine = partial + wk * kRows * kCols;
#pragma unroll
  for (int i = 0; i < kNT; ++i) {
    const int c = wn * kNT * 8 + i * 8 + 2 * t;
    *reinterpret_cast<float2*>(mine + g * kCols + c) = make_float2(acc[i][0], acc[i][1]);
    if constexpr (kM16) *reinterpret_cast<float2*>(mine + (g + 8) * kCols + c) = make_float2(acc[i][2], acc[i][3]);
  }

  // The CTA's sum over its K slices, in place in slice 0 (fixed order: deterministic).
  __syncthreads();
  if constexpr (kWarpsK > 1) {
    for (int e = threadIdx.x; e < m * kCols; e += kThreads) {
      float sum = partial[e];
#pragma unroll
      for (int j = 1; j < kWarpsK; ++j) sum += partial[j * kRows * kCols + e];
      partial[e] = sum;
    }
  }

  if constexpr (kCluster > 1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    // The cluster's CTAs share the reduction of the [M, kCols] block over their K ranges.
    for (int e = rank * kThreads + static_cast<int>(threadIdx.x); e < m * kCols; e += kCluster * kThreads) {
      float sum = 0.f;
#pragma unroll
      for (int q = 0; q < kCluster; ++q) sum += cluster.map_shared_rank(partial, q)[e];
      store_out(out + (e / kCols) * ldd + group * kCols + e % kCols, sum);
    }
    cluster.sync();  // the other CTAs are done reading this CTA's shared memory
#else
    __trap();  // the launcher runs cluster kernels only from sm90 code
#endif
  } else {
    if constexpr (kWarpsK > 1) __syncthreads();
    for (int e = threadIdx.x; e < m * kCols; e += kThreads) {
      store_out(out + (e / kCols) * ldd + group * kCols + e % kCols, partial[e]);
    }
  }
}

template <typename S, bool kM16, typename TOut>
cudaError_t launch_skinny(const Dsv3GemmParams& p, cudaStream_t stream) {
  if (p.n % S::kCols != 0 || p.k % kStepK != 0 || p.m > (kM16 ? 16 : 8)) return cudaErrorInvalidValue;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<uint32_t>(p.n / S::kCols * S::kCluster));
  config.blockDim = dim3(S::kThreads);
  config.dynamicSmemBytes = 0;
  config.stream = stream;
  cudaLaunchAttribute attrs[2];
  config.attrs = attrs;
  config.numAttrs = 0;
  if constexpr (S::kCluster > 1) {
    attrs[config.numAttrs].id = cudaLaunchAttributeClusterDimension;
    attrs[config.numAttrs].val.clusterDim.x = S::kCluster;
    attrs[config.numAttrs].val.clusterDim.y = 1;
    attrs[config.numAttrs].val.clusterDim.z = 1;
    ++config.numAttrs;
  }
  if (p.enable_pdl) {
    attrs[config.numAttrs].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[config.numAttrs].val.programmaticStreamSerializationAllowed = 1;
    ++config.numAttrs;
  }
  return cudaLaunchKernelEx(&config, skinny_gemm_kernel<S, kM16, TOut>, static_cast<const __nv_bfloat16*>(p.a),
                            static_cast<const __nv_bfloat16*>(p.b), static_cast<TOut*>(p.out),
                            static_cast<int>(p.m), static_cast<int>(p.k), p.lda, p.ldb, p.ldd);
}

// Whether the kernel image the current device runs was compiled from sm90+ code, i.e. has the
// cluster reduction (a build that reaches sm90 through compute_80 PTX has not). Cached per
// device.
template <typename Kernel>
bool clusters_usable(Kernel kernel) {
  static int8_t state[64] = {};  // 0 unknown, 1 yes, -1 no
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64) {
    (void)cudaGetLastError();
    return false;
  }
  if (state[device] == 0) {
    cudaFuncAttributes attr{};
    const bool ok = cudaFuncGetAttributes(&attr, kernel) == cudaSuccess && attr.ptxVersion >= 90;
    (void)cudaGetLastError();
    state[device] = ok ? 1 : -1;
  }
  return state[device] > 0;
}

// Production shapes (see the NOTEs in the launchers).
// E = 256: one n-tile per CTA for M <= 8 (256 CTAs), two for M > 8 (128 CTAs: each A row is
// read by half as many CTAs).
template <bool kM16>
using RouterShape256 = SkinnyShape<kM16 ? 2 : 1, 1, 7, 4, 8, LoadPolicy::kDefault>;
using RouterShape384 = SkinnyShape<3, 1, 7, 4, 8, LoadPolicy::kDefault>;
using RouterShapeFlat = SkinnyShape<1, 1, 16, 7, 1, LoadPolicy::kStreamPrefetch>;  // any N % 8 == 0
using FusedShape = SkinnyShape<2, 1, 16, 4, 1, LoadPolicy::kStreamPrefetch>;

template <bool kM16, typename TOut>
cudaError_t launch_router(const Dsv3GemmParams& p, cudaStream_t stream) {
  // NOTE: sm90, a cluster of 8 CTAs over K, each CTA 7 warps of 4 steps of 32 k, all in flight
  // at once (4 warps of 7 steps with 4 in flight: 4.0 instead of 3.0 us at M = 1). E = 256:
  // 32 (M <= 8) or 16 column groups (2.8 - 3.2 / 3.8 us at M = 1 - 8 / 16 on the H200; cuBLAS
  // 8.1 - 8.9); E = 384: 16 column groups of 24 (3.9 / 4.4 us at M = 1 / 16; cuBLAS 9.2 / 9.6).
  // Without clusters (sm80, or sm90 reached through compute_80 PTX): one 16-warp CTA per 8
  // experts (6.1 us at M = 1 on the H200).
  using Shape256 = RouterShape256<kM16>;
  if (p.n == 256 && clusters_usable(skinny_gemm_kernel<Shape256, kM16, TOut>)) {
    return launch_skinny<Shape256, kM16, TOut>(p, stream);
  }
  if (p.n == 384 && clusters_usable(skinny_gemm_kernel<RouterShape384, kM16, TOut>)) {
    return launch_skinny<RouterShape384, kM16, TOut>(p, stream);
  }
  return launch_skinny<RouterShapeFlat, kM16, TOut>(p, stream);
}

template <bool kM16>
cudaError_t launch_fused_a(const Dsv3GemmParams& p, cudaStream_t stream) {
  // NOTE: 2112 / 16 = 132 CTAs (one per H100/H200 SM) of 16 weight rows over the whole K,
  // 16 warps of 14 steps each. Per SM, 16 warps matter more than the pipeline depth (2 to 8
  // stages: the same time; 8 warps with 8 stages: 13.7 us instead of 10.7).
  if (p.n % FusedShape::kCols == 0) return launch_skinny<FusedShape, kM16, __nv_bfloat16>(p, stream);
  return launch_skinny<RouterShapeFlat, kM16, __nv_bfloat16>(p, stream);
}

bool valid(const Dsv3GemmParams& p) {
  return p.m >= 1 && p.m <= 16 && p.n > 0 && p.n % 8 == 0 && p.k > 0 && p.k % kStepK == 0 &&
         p.k <= (int64_t{1} << 30) && p.n <= (int64_t{1} << 24) && is_aligned16(p.a) && is_aligned16(p.b) &&
         p.lda % 8 == 0 && p.ldb % 8 == 0;
}

}  // namespace

cudaError_t launch_dsv3_router_gemm(const Dsv3GemmParams& p, cudaStream_t stream) {
  if (!valid(p)) return cudaErrorInvalidValue;
  if (p.out_fp32) {
    return p.m > 8 ? launch_router<true, float>(p, stream) : launch_router<false, float>(p, stream);
  }
  return p.m > 8 ? launch_router<true, __nv_bfloat16>(p, stream) : launch_router<false, __nv_bfloat16>(p, stream);
}

cudaError_t launch_dsv3_fused_a_gemm(const Dsv3GemmParams& p, cudaStream_t stream) {
  if (!valid(p) || p.out_fp32) return cudaErrorInvalidValue;
  return p.m > 8 ? launch_fused_a<true>(p, stream) : launch_fused_a<false>(p, stream);
}

}  // namespace sgl_kernel::gemm
