// SPDX-License-Identifier: Apache-2.0
// CUTLASS 3.x sm90a GEMM with DeepSeek-style block scales (fp8_blockwise_scaled_mm):
// A [M, K] with one fp32 scale per 1x128 block (scales_a, M-major), W [N, K] with one per
// 128x128 block (scales_b, K-major). The mainloop promotes each 128-deep k-block's partial sums
// into the fp32 accumulator with scales_a[m, kb] * scales_b[kb, n / 128] (CUTLASS's FP8
// blockwise schedules; with kOverlap, our consumer loop that hides the promotion behind the next
// k-block's wgmmas); the epilogue only rounds to the output type.
#pragma once

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/detail/blockwise_scale_layout.hpp>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/numeric_types.h>
#include <cutlass/util/packed_stride.hpp>

#include "gemm/gemm.h"
#include "gemm/cutlass_run.cuh"
#include "gemm/sm90/blockwise_overlap_mainloop.cuh"

namespace sgl_kernel::gemm::sm90 {

// kOverlap: CUTLASS's mainloop collective with its consumer loop replaced by the one of
// blockwise_overlap_mainloop.cuh (promotion of k-tile k - 1 under the wgmmas of k-tile k).
template <typename ElementD_, typename TileShape_, typename ClusterShape_, typename MainloopSchedule_,
          typename EpilogueSchedule_, bool kOverlap = false>
struct BlockwiseMmKernel {
  using ElementAB = cutlass::float_e4m3_t;
  using ElementD = ElementD_;
  using TileShape = TileShape_;
  using ClusterShape = ClusterShape_;
  static constexpr int kAlignAB = 16;
  static constexpr int kAlignD = 8;

  // scales_a: granularity 1 x 128 along (M, K), M-major; scales_b: 128 x 128 along (N, K),
  // K-major (API.md 2.3 layouts).
  using ScaleConfig = cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, cute::GMMA::Major::MN,
                                                                 cute::GMMA::Major::K>;
  using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
  using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor, kAlignD,
      ElementD, cutlass::layout::RowMajor, kAlignD, EpilogueSchedule_,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;

  using CutlassMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB,
      cute::tuple<cutlass::layout::RowMajor, LayoutSFA>, kAlignAB, ElementAB,
      cute::tuple<cutlass::layout::ColumnMajor, LayoutSFB>, kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      MainloopSchedule_>::CollectiveOp;
  using CollectiveMainloop =
      std::conditional_t<kOverlap, OverlappedBlockwiseMainloop<CutlassMainloop>, CutlassMainloop>;

  using GemmKernel = cutlass::gemm::kernel::GemmUniversal<cute::Shape<int, int, int, int>, CollectiveMainloop,
                                                          CollectiveEpilogue, void>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;

  static typename Gemm::Arguments arguments(const BlockwiseMmParams& p) {
    using StrideA = typename GemmKernel::StrideA;
    using StrideB = typename GemmKernel::StrideB;
    using StrideD = typename GemmKernel::StrideD;
    const int m = static_cast<int>(p.m), n = static_cast<int>(p.n), k = static_cast<int>(p.k);
    StrideA stride_a = cutlass::make_cute_packed_stride(StrideA{}, cute::make_shape(m, k, 1));
    StrideB stride_b = cutlass::make_cute_packed_stride(StrideB{}, cute::make_shape(n, k, 1));
    cute::get<0>(stride_a) = p.lda;
    cute::get<0>(stride_b) = p.ldb;
    StrideD stride_d = cutlass::make_cute_packed_stride(StrideD{}, cute::make_shape(m, n, 1));
    cute::get<0>(stride_d) = p.ldd;

    // Scale layouts: the packed ones for (M, N, K), with the caller's leading strides. The TMA
    // load of scales_a needs its contiguous extent in 16-byte units: M rounded up to 4 (the
    // binding guarantees the buffer covers it; the rows past M are never stored).
    const int m_pad = (m + 3) / 4 * 4;
    LayoutSFA layout_sfa = ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(m_pad, n, k, 1));
    LayoutSFB layout_sfb = ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(m, n, k, 1));
    {
      auto sa = layout_sfa.stride();
      cute::get<1, 1>(sa) = static_cast<int32_t>(p.sa_stride_k);  // (m, kb) at kb * stride + m
      layout_sfa = cute::make_layout(layout_sfa.shape(), sa);
      auto sb = layout_sfb.stride();
      cute::get<0, 1>(sb) = static_cast<int32_t>(p.sb_stride_n);  // (nb, kb) at nb * stride + kb
      layout_sfb = cute::make_layout(layout_sfb.shape(), sb);
    }

    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGemm,
                                  {m, n, k, 1},
                                  {static_cast<const ElementAB*>(p.a), stride_a, static_cast<const ElementAB*>(p.b),
                                   stride_b, p.scales_a, layout_sfa, p.scales_b, layout_sfb},
                                  {{}, nullptr, stride_d, static_cast<ElementD*>(p.out), stride_d}};
    args.epilogue.thread.alpha = 1.0f;
    args.epilogue.thread.beta = 0.0f;
    args.hw_info.sm_count = p.sm_count;
    args.scheduler.max_swizzle_size = p.swizzle > 0 ? p.swizzle : 1;
    return args;
  }

  static cudaError_t run(const BlockwiseMmParams& p, void* workspace, size_t* ws_bytes, cudaStream_t stream) {
    return run_cutlass_gemm<Gemm>(arguments(p), workspace, ws_bytes, stream);
  }
};

template <template <typename ElementD> class KernelOf>
cudaError_t run_blockwise_out_types(const BlockwiseMmParams& p, void* workspace, size_t* ws_bytes,
                                    cudaStream_t stream) {
  if (p.out_type == OutType::kBF16) return KernelOf<cutlass::bfloat16_t>::run(p, workspace, ws_bytes, stream);
  return KernelOf<cutlass::half_t>::run(p, workspace, ws_bytes, stream);
}

}  // namespace sgl_kernel::gemm::sm90
