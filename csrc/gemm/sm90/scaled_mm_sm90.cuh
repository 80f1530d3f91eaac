// SPDX-License-Identifier: Apache-2.0
// CUTLASS 3.x warp-specialized sm90a GEMM with the per-row / per-column scale and bias
// epilogue of fp8_scaled_mm and int8_scaled_mm:
//   out[m, n] = acc[m, n] * scales_b[n] * scales_a[m] + bias[n]    (fp32, one rounding)
// One instantiation per (tile, cluster, schedule, output type); each configuration's
// translation unit includes this header and instantiates its kernels (gemm.h: the launchers;
// scaled_mm_configs.h: the per-configuration entry points the dispatcher picks from).
//
// Swap A/B (small M): the kernel computes out^T [N, M] = W [N, K] . A^T, so the weight rows
// fill the 128-row tiles and the few activation rows the narrow tile N; out^T column-major
// is out row-major. scales_b and bias then vary along the kernel's rows, scales_a along its
// columns. The arithmetic is the same expression in both orientations.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/sm90_callbacks_tma_warpspecialized.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/gemm/kernel/tile_scheduler.hpp>
#include <cutlass/numeric_types.h>
#include <cutlass/util/packed_stride.hpp>

#include "gemm/gemm.h"
#include "gemm/cutlass_run.cuh"
#include "gemm/sm90/scaled_mm_configs.h"

namespace sgl_kernel::gemm::sm90 {

template <typename ElementAB_, typename ElementD_, typename TileShape_, typename ClusterShape_,
          typename MainloopSchedule_, typename EpilogueSchedule_, bool kSwapAB_>
struct ScaledMmKernel {
  using ElementAB = ElementAB_;
  using ElementD = ElementD_;
  using TileShape = TileShape_;
  using ClusterShape = ClusterShape_;
  static constexpr bool kSwapAB = kSwapAB_;
  static constexpr bool kInt8 = std::is_same_v<ElementAB, int8_t>;
  using ElementAcc = std::conditional_t<kInt8, int32_t, float>;
  using LayoutD = std::conditional_t<kSwapAB, cutlass::layout::ColumnMajor, cutlass::layout::RowMajor>;
  static constexpr int kAlignAB = 16;  // 16 bytes of 8-bit elements
  static constexpr int kAlignD = 8;    // 16 bytes of 16-bit elements

  // A vector along the kernel's rows (one value per row m) or columns (per column n).
  template <typename T, int kAlign>
  using PerRow = cutlass::epilogue::fusion::Sm90ColBroadcast<0, TileShape, T, float, cute::Stride<cute::_1, cute::_0, cute::_0>,
                                                             kAlign>;
  template <typename T, int kAlign>
  using PerCol = cutlass::epilogue::fusion::Sm90RowBroadcast<0, TileShape, T, float, cute::Stride<cute::_0, cute::_1, cute::_0>,
                                                             kAlign>;
  // scales_b and bias follow the weights' N; scales_a the activations' M (any M: alignment 1).
  using ScaleB = std::conditional_t<kSwapAB, PerRow<float, 4>, PerCol<float, 4>>;
  using ScaleA = std::conditional_t<kSwapAB, PerCol<float, 1>, PerRow<float, 1>>;
  using Bias = std::conditional_t<kSwapAB, PerRow<ElementD, 8>, PerCol<ElementD, 8>>;

  using AccTimesScaleB = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiplies, float, float, cutlass::FloatRoundStyle::round_to_nearest>,
      ScaleB, cutlass::epilogue::fusion::Sm90AccFetch>;
  using Epilogue = cutlass::epilogue::fusion::Sm90EVT<
      cutlass::epilogue::fusion::Sm90Compute<cutlass::multiply_add, ElementD, float,
                                             cutlass::FloatRoundStyle::round_to_nearest>,
      ScaleA, AccTimesScaleB, Bias>;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, ElementAcc, float, void, LayoutD, kAlignD, ElementD, LayoutD,
      kAlignD, EpilogueSchedule_, Epilogue>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB, cutlass::layout::RowMajor, kAlignAB, ElementAB,
      cutlass::layout::ColumnMajor, kAlignAB, ElementAcc, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      MainloopSchedule_>::CollectiveOp;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                          CollectiveEpilogue, void>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  static typename Gemm::Arguments arguments(const ScaledMmParams& p) {
    using StrideA = typename GemmKernel::StrideA;
    using StrideB = typename GemmKernel::StrideB;
    using StrideD = typename GemmKernel::StrideD;
    const int gm = static_cast<int>(kSwapAB ? p.n : p.m);
    const int gn = static_cast<int>(kSwapAB ? p.m : p.n);
    const int gk = static_cast<int>(p.k);
    StrideA stride_a = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(gm, gk, 1));
    StrideB stride_b = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(gn, gk, 1));
    cute::get<0>(stride_a) = kSwapAB ? p.ldb : p.lda;
    cute::get<0>(stride_b) = kSwapAB ? p.lda : p.ldb;
    StrideD stride_d = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(gm, gn, 1));
    if constexpr (kSwapAB) {
      cute::get<1>(stride_d) = p.ldd;
    } else {
      cute::get<0>(stride_d) = p.ldd;
    }
    const auto* a = static_cast<const ElementAB*>(kSwapAB ? p.b : p.a);
    const auto* b = static_cast<const ElementAB*>(kSwapAB ? p.a : p.b);
    auto* d = static_cast<ElementD*>(p.out);
    const auto* bias = static_cast<const ElementD*>(p.bias);

    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                  {gm, gn, gk, 1},
                                  {a, stride_a, b, stride_b},
                                  {{}, nullptr, stride_d, d, stride_d}};
    // Children first, then the node's own arguments (Sm90EVT).
    args.epilogue.thread = {
        {p.scales_a},                     // ScaleA
        {{p.scales_b}, {}, {}},           // acc * scales_b
        {bias},                           // bias (nullptr reads as 0)
        {}};                              // multiply_add
    args.hw_info.sm_count = p.sm_count;
    // Tiles visited in groups of `swizzle` along the rasterized dimension (L2 reuse).
    args.scheduler.max_swizzle_size = p.swizzle > 0 ? p.swizzle : 1;
    return args;
  }

  // Whether to launch with PDL (the load warps wait for the previous kernel:
  // CUTLASS_ENABLE_GDC_FOR_SM90): the swap A/B (decode) kernels, and the others when their tiles
  // leave half the SMs free for the next call's CTAs. On an H200, PDL took fp8 M = 64 / 128,
  // N = K = 4096 (swap) from 9.15 / 9.07 to 8.11 / 8.26 us and int8 M = 64 / 128 (ping-pong,
  // 32 / 64 tiles) from 9.83 / 9.76 to 8.34 / 8.58; on grids that fill the SMs the next call's
  // CTAs crowd the persistent ones (int8 M = 256, N = 4096, K = 14336, 128 tiles: 28.2 -> 32.9;
  // M = 128, N = 28672: 39.1 -> 42.8 us).
  static bool use_pdl(const ScaledMmParams& p) {
    if (!p.enable_pdl) return false;
    if constexpr (kSwapAB) return true;
    const int64_t tm = cute::size<0>(TileShape{}), tn = cute::size<1>(TileShape{});
    const int64_t tiles = ((p.m + tm - 1) / tm) * ((p.n + tn - 1) / tn);
    return 2 * tiles <= p.sm_count;
  }

  // ws_bytes != nullptr: only report the workspace size.
  static cudaError_t run(const ScaledMmParams& p, int /*splits: none*/, void* workspace, size_t* ws_bytes,
                         cudaStream_t stream) {
    return run_cutlass_gemm<Gemm>(arguments(p), workspace, ws_bytes, stream, use_pdl(p));
  }
};

// Both output types of one configuration.
template <template <typename ElementD> class KernelOf>
cudaError_t run_out_types(const ScaledMmParams& p, int splits, void* workspace, size_t* ws_bytes,
                          cudaStream_t stream) {
  if (p.out_type == OutType::kBF16) {
    return KernelOf<cutlass::bfloat16_t>::run(p, splits, workspace, ws_bytes, stream);
  }
  return KernelOf<cutlass::half_t>::run(p, splits, workspace, ws_bytes, stream);
}

}  // namespace sgl_kernel::gemm::sm90
