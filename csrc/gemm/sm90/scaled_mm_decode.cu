// SPDX-License-Identifier: Apache-2.0
// fp8_scaled_mm / int8_scaled_mm for decode M (sm90a, no CUTLASS): weights streamed by TMA
// into shared memory and multiplied there by warpgroup MMAs (wgmma) in their own 8-bit type,
//   out[m, n] = (sum_k A[m, k] W[n, k]) * scales_b[n] * scales_a[m] + bias[n]
// with fp32 (e4m3) or int32 (int8) accumulation and the epilogue of the other configurations:
// fmaf(acc * scales_b[n], scales_a[m], bias[n]), one rounding.
//
// Swapped operands: the weight rows are the wgmma's M, the tokens (8, 16, 32 or 64 of them: kNT)
// its N, so the e4m3 bytes go to the tensor cores as they are (the mma.sync kernel of
// scaled_mm_small_m.cu converts every weight and activation to f16 first, sm90 having no e4m3
// mma.sync), and the activations are read once per CTA instead of once per warp.
//   * A CTA owns 64 kWG weight rows (kWG consumer warpgroups of 64) and a range of K in 128-byte
//     tiles, fed by one producer warp. Each stage holds one tile of the weights [64 kWG x 128]
//     and of the activations [kNT x 128], both written by TMA with the 128-byte swizzle the
//     GMMA descriptors name; kStages tiles are in flight (about 100 KiB: two CTAs per SM).
//     Stage s has a "full" barrier (TMA bytes landed) and an "empty" one (every consumer warp
//     has finished the wgmmas that read it; a warp arrives one tile late, after wait_group 1,
//     so one wgmma group stays in flight).
//   * K and the weight rows are padded by TMA's out-of-bounds zero fill (K % 128, N % 64, and
//     tokens >= M), so no load carries a predicate; outputs past N or M are not stored.
//   * A cluster of cs CTAs (1..8) splits K when the row groups alone would not fill the SMs:
//     the largest split whose clusters still run in one wave (the occupancy API counts them).
//     The partial sums meet in shared memory (over the consumed weight stages) and are added
//     across the cluster through distributed shared memory in cluster-rank order: the results
//     are deterministic.
//   * M > kNT takes more CTAs along grid.y, each re-reading the weights (correct, not fast;
//     the dispatcher sends such M elsewhere).
#include <cooperative_groups.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "gemm/gemm.h"
#include "gemm/sm90/decode_common.cuh"
#include "gemm/sm90/scaled_mm_configs.h"
#include "gemm/sm90/wgmma8.cuh"
#include "sgl_kernel/arch.cuh"

namespace sgl_kernel::gemm::sm90 {

namespace {

namespace cg = cooperative_groups;

constexpr int kTileK = 128;           // K bytes per stage: one 128-byte swizzled row
constexpr int kMaxCluster = 8;       // portable cluster size
constexpr int kSmemBudget = 104 << 10;  // tiles per CTA: two CTAs per SM (228 KiB)

// Shared memory of a CTA with kWG consumer warpgroups and kNT tokens, from a 1024-byte aligned
// base (the swizzle atom).
template <int kNT, int kWG>
struct DecodeLayout {
  static constexpr int kRows = 64 * kWG;  // weight rows per CTA
  static constexpr int kThreads = 128 * kWG + 32;
  static constexpr int kWBytes = kRows * kTileK;
  static constexpr int kABytes = kNT * kTileK;
  static constexpr int kStageBytes = kWBytes + kABytes;
  static constexpr int kStages = kSmemBudget / kStageBytes < 16 ? kSmemBudget / kStageBytes : 16;
  static constexpr int kW = 0;                           // weights of stage s: kW + s * kWBytes
  static constexpr int kA = kStages * kWBytes;           // activations of stage s: kA + s * kABytes
  static constexpr int kFull = kA + kStages * kABytes;   // mbarriers: full[kStages], empty[kStages]
  static constexpr int kEmpty = kFull + 8 * kStages;
  static constexpr int kDynamic = kEmpty + 8 * kStages + 1024;  // + slack to align the base
  // Partial sums [kNT tokens][kRowStride] over the weight stages once the mainloop is done; a
  // stride of 4 mod 32 words puts a warp's fragment stores (rows g, tokens 2t) in 32 banks.
  static constexpr int kRowStride = kRows + 4;
  static_assert(kStages >= 2, "a pipeline");
  static_assert(kNT * kRowStride * 4 <= kStages * kWBytes, "partial sums fit over the weight stages");
};

struct DecodeArgs {
  DecodeOut o;
  int k_tiles;  // ceil(K / 128)
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(const uint32_t bar, const uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(const uint32_t bar, const uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_arrive(const uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}

__device__ __forceinline__ void mbar_wait(const uint32_t bar, const uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "WAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// A 2-D TMA tile load of (x = K byte offset, y = row) into this CTA's shared memory at dst.
__device__ __forceinline__ void tma_load_2d(const uint32_t dst, const CUtensorMap* map, const uint32_t bar, const int x,
                                            const int y) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(bar), "r"(x), "r"(y)
      : "memory");
}

// grid = (ceil(N / kRows) * cs, ceil(M / kNT)), block = kThreads, clusters of (cs, 1, 1).
template <bool kInt8, int kNT, int kWG, typename TOut>
__global__ void __launch_bounds__(DecodeLayout<kNT, kWG>::kThreads, 1)
    scaled_mm_decode_kernel(const __grid_constant__ CUtensorMap map_w, const __grid_constant__ CUtensorMap map_a,
                            const DecodeArgs p) {
  using L = DecodeLayout<kNT, kWG>;
  using Acc = std::conditional_t<kInt8, int32_t, float>;
  using Mma = Wgmma8<kNT, Acc>;
  constexpr int kRows = L::kRows;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* smem = smem_raw + ((1024 - (smem_addr(smem_raw) & 1023)) & 1023);
  const uint32_t base = smem_addr(smem);

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid >> 5;
  const int lane = tid & 31;
  const cg::cluster_group cluster = cg::this_cluster();
  const int cs = static_cast<int>(cluster.num_blocks());
  const int rank = static_cast<int>(cluster.block_rank());
  const int row0 = static_cast<int>(blockIdx.x / cs) * kRows;
  const int m0 = static_cast<int>(blockIdx.y) * kNT;
  // This CTA's K tiles [t0, t0 + nk).
  const int t0 = static_cast<int>(static_cast<int64_t>(p.k_tiles) * rank / cs);
  const int nk = static_cast<int>(static_cast<int64_t>(p.k_tiles) * (rank + 1) / cs) - t0;

  auto full = [&](int s) { return base + L::kFull + 8 * s; };
  auto empty = [&](int s) { return base + L::kEmpty + 8 * s; };
  auto w_tile = [&](int s) { return base + L::kW + s * L::kWBytes; };
  auto a_tile = [&](int s) { return base + L::kA + s * L::kABytes; };

  if (tid == 0) {
    for (int s = 0; s < L::kStages; ++s) {
      mbar_init(full(s), 1);
      mbar_init(empty(s), 4 * kWG);  // one arrival per consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  SGL_PDL_WAIT();  // launched with PDL: the previous kernel's outputs (our inputs) are complete

  Acc acc[Mma::kRegs];
#pragma unroll
  for (int i = 0; i < Mma::kRegs; ++i) acc[i] = Acc(0);

  if (warp == 4 * kWG) {
    // Producer: refill stage s once its previous tile's readers are done.
    if (lane == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_w)) : "memory");
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&map_a)) : "memory");
#pragma unroll 1
      for (int i = 0; i < nk; ++i) {
        const int s = i % L::kStages;
        if (i >= L::kStages) mbar_wait(empty(s), static_cast<uint32_t>(i / L::kStages - 1) & 1);
        mbar_expect_tx(full(s), L::kStageBytes);  // TMA counts whole boxes, zero fill included
        tma_load_2d(w_tile(s), &map_w, full(s), (t0 + i) * kTileK, row0);
        tma_load_2d(a_tile(s), &map_a, full(s), (t0 + i) * kTileK, m0);
      }
    }
  } else {
    const uint32_t w_off = static_cast<uint32_t>(warp >> 2) * 64 * kTileK;  // this warpgroup's 64 rows
#pragma unroll 1
    for (int i = 0; i < nk; ++i) {
      const int s = i % L::kStages;
      mbar_wait(full(s), static_cast<uint32_t>(i / L::kStages) & 1);
      wgmma_fence();
#pragma unroll
      for (int kk = 0; kk < kTileK / 32; ++kk) {
        Mma::run(acc, gmma_desc_sw128(w_tile(s) + w_off + 32 * kk), gmma_desc_sw128(a_tile(s) + 32 * kk));
      }
      wgmma_commit();
      wgmma_wait<1>();  // tile i - 1's wgmmas are done: release its stage
      if (i > 0 && lane == 0) mbar_arrive(empty((i - 1) % L::kStages));
    }
    wgmma_wait<0>();
  }
  __syncthreads();  // every tile consumed: the weight stages are free for the partial sums
  SGL_PDL_LAUNCH_DEPENDENTS();  // the next kernel may start its prologue (it waits for our end)

  // Accumulator 4j + {0, 1}: row 16 w + g, tokens 8j + 2t + {0, 1}; 4j + {2, 3}: row + 8.
  Acc* partial = reinterpret_cast<Acc*>(smem + L::kW);
  if (warp < 4 * kWG) {
    const int r = 16 * warp + (lane >> 2);  // warp w of warpgroup h: rows 64 h + 16 w + g
    const int t = lane & 3;
#pragma unroll
    for (int j = 0; j < kNT / 8; ++j) {
      const int tok = 8 * j + 2 * t;
      partial[tok * L::kRowStride + r] = acc[4 * j];
      partial[(tok + 1) * L::kRowStride + r] = acc[4 * j + 1];
      partial[tok * L::kRowStride + r + 8] = acc[4 * j + 2];
      partial[(tok + 1) * L::kRowStride + r + 8] = acc[4 * j + 3];
    }
  }
  if (cs > 1) {
    cluster.sync();
  } else {
    __syncthreads();
  }

  // Each CTA of the cluster finishes a share of the [tokens, kRows] block.
  store_cluster_sums<Acc, TOut, 1, kNT, kRows, L::kRowStride, L::kThreads>(partial, cs, rank, p.o, m0, row0);
  if (cs > 1) cluster.sync();  // the cluster's CTAs are done reading this one's partial sums
}

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// cuTensorMapEncodeTiled from the driver (the extension links cudart only); nullptr if absent.
EncodeTiledFn encode_tiled() {
  static const EncodeTiledFn fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess) {
      return static_cast<EncodeTiledFn>(nullptr);
    }
    return reinterpret_cast<EncodeTiledFn>(f);
  }();
  return fn;
}

// The TMA map of a row-major 8-bit matrix [rows, k] (row stride ld bytes, 16-byte multiple)
// read in boxes of box_rows x 128 bytes with the 128-byte swizzle; out of bounds reads zeros.
bool make_map(CUtensorMap* map, const void* ptr, int64_t k, int64_t rows, int64_t ld, int box_rows) {
  const EncodeTiledFn encode = encode_tiled();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(kTileK), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem_strides[2] = {1, 1};
  return encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(ptr), dims, strides, box, elem_strides,
                CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE) == CUDA_SUCCESS;
}

// Clusters of cs CTAs of `kernel` that can be resident at once on the current device (0 when
// the occupancy API cannot say), cached per device and cluster size.
template <typename Kernel>
int active_clusters(Kernel kernel, int threads, int smem, int cs) {
  constexpr int kDevices = 64;
  static int cache[kDevices][kMaxCluster + 1] = {};  // 0: not asked yet; -1: unknown
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) device = kDevices;
  int* slot = device < kDevices ? &cache[device][cs] : nullptr;
  if (slot != nullptr && *slot != 0) return *slot > 0 ? *slot : 0;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<uint32_t>(cs), 1, 1);
  config.blockDim = dim3(static_cast<uint32_t>(threads), 1, 1);
  config.dynamicSmemBytes = static_cast<size_t>(smem);
  cudaLaunchAttribute attrs[2];
  set_launch_attrs(config, attrs, cs, false);
  int n = 0;
  if (cudaOccupancyMaxActiveClusters(&n, kernel, &config) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  if (slot != nullptr) *slot = n > 0 ? n : -1;
  return n;
}

template <bool kInt8, int kNT, int kWG, typename TOut>
cudaError_t launch_nt(const ScaledMmParams& p, int splits, cudaStream_t stream) {
  using L = DecodeLayout<kNT, kWG>;
  CUtensorMap map_w, map_a;
  if (!make_map(&map_w, p.b, p.k, p.n, p.ldb, L::kRows) || !make_map(&map_a, p.a, p.k, p.m, p.lda, kNT)) {
    return cudaErrorNotSupported;
  }
  const int64_t groups = (p.n + L::kRows - 1) / L::kRows;
  const int64_t chunks = (p.m + kNT - 1) / kNT;
  const int k_tiles = static_cast<int>((p.k + kTileK - 1) / kTileK);
  if (groups > INT32_MAX / kMaxCluster || chunks > 65535) return cudaErrorNotSupported;

  auto* kernel = scaled_mm_decode_kernel<kInt8, kNT, kWG, TOut>;
  cudaError_t err = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, L::kDynamic);
  if (err != cudaSuccess) return err;

  int cs = 1;
  if (splits >= 2) {
    cs = std::min(splits, kMaxCluster);
  } else {
    // The largest split (each CTA keeping >= 2 K tiles) whose clusters all fit in one wave.
    for (int c = 2; c <= kMaxCluster && 2 * c <= k_tiles; ++c) {
      if (groups * chunks <= active_clusters(kernel, L::kThreads, L::kDynamic, c)) cs = c;
    }
  }
  cs = std::max(1, std::min(cs, k_tiles));

  const DecodeArgs args{DecodeOut::of(p), k_tiles};

  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<uint32_t>(groups * cs), static_cast<uint32_t>(chunks), 1);
  config.blockDim = dim3(L::kThreads, 1, 1);
  config.dynamicSmemBytes = L::kDynamic;
  config.stream = stream;
  cudaLaunchAttribute attrs[2];
  set_launch_attrs(config, attrs, cs, p.enable_pdl);
  err = cudaLaunchKernelEx(&config, kernel, map_w, map_a, args);
  return err != cudaSuccess ? err : cudaGetLastError();
}

template <bool kInt8, int kWG, typename TOut>
cudaError_t run_tokens(const ScaledMmParams& p, int splits, cudaStream_t stream) {
  if (p.m <= 8) return launch_nt<kInt8, 8, kWG, TOut>(p, splits, stream);
  if (p.m <= 16) return launch_nt<kInt8, 16, kWG, TOut>(p, splits, stream);
  if (p.m <= 32) return launch_nt<kInt8, 32, kWG, TOut>(p, splits, stream);
  return launch_nt<kInt8, 64, kWG, TOut>(p, splits, stream);
}

template <bool kInt8, int kWG>
cudaError_t run_decode(const ScaledMmParams& p, int splits, size_t* ws_bytes, cudaStream_t stream) {
  if (ws_bytes != nullptr) {
    *ws_bytes = 0;
    return cudaSuccess;
  }
  if (!decode_shape_ok(p, kInt8)) return cudaErrorNotSupported;
  if (p.m == 0 || p.n == 0) return cudaSuccess;
  return p.out_type == OutType::kBF16 ? run_tokens<kInt8, kWG, __nv_bfloat16>(p, splits, stream)
                                      : run_tokens<kInt8, kWG, __half>(p, splits, stream);
}

}  // namespace

cudaError_t fp8_decode_64(const ScaledMmParams& p, int splits, void*, size_t* ws_bytes, cudaStream_t stream) {
  return run_decode<false, 1>(p, splits, ws_bytes, stream);
}
cudaError_t fp8_decode_128(const ScaledMmParams& p, int splits, void*, size_t* ws_bytes, cudaStream_t stream) {
  return run_decode<false, 2>(p, splits, ws_bytes, stream);
}
cudaError_t int8_decode_64(const ScaledMmParams& p, int splits, void*, size_t* ws_bytes, cudaStream_t stream) {
  return run_decode<true, 1>(p, splits, ws_bytes, stream);
}
cudaError_t int8_decode_128(const ScaledMmParams& p, int splits, void*, size_t* ws_bytes, cudaStream_t stream) {
  return run_decode<true, 2>(p, splits, ws_bytes, stream);
}

}  // namespace sgl_kernel::gemm::sm90
