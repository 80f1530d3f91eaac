// SPDX-License-Identifier: Apache-2.0
// The CUTLASS 3.x pointer-array grouped GEMM behind fp8_blockwise_scaled_grouped_mm (sm90a), with
// the FP8 blockwise-scaling mainloop: each 128-deep k-block's partial sums are promoted into the
// fp32 accumulator with scales_a[row, kb] * scales_b_e[n / 128, kb]; the epilogue only rounds to
// the output type. Both scale tensors are read K-major (API.md). Included by one translation
// unit per tile configuration.
#pragma once

#include <cstddef>
#include <type_traits>

#include <cuda_runtime.h>

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/epilogue/collective/collective_builder.hpp>
#include <cutlass/epilogue/fusion/operations.hpp>
#include <cutlass/gemm/collective/collective_builder.hpp>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm/dispatch_policy.hpp>
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/numeric_types.h>

#include "gemm/cutlass_run.cuh"
#include "gemm/gemm.h"
#include "gemm/sm90/blockwise_grouped_configs.h"
#include "gemm/sm90/blockwise_overlap_mainloop.cuh"

namespace sgl_kernel::gemm::sm90 {

// The mainloop is CUTLASS's grouped FP8 blockwise collective with its consumer loop replaced by
// the one of blockwise_overlap_mainloop.cuh: the promotion of k-tile k - 1 runs under the wgmmas
// of k-tile k (the grouped collective's mma() has the single-GEMM one's contract: the same
// arguments, stage releases and mma_tail). Session 47 sweep (RESULTS.md): 0-3 % faster than
// CUTLASS's loop at every shape, 10 % at skewed experts.
template <typename ElementD_, typename TileShape_, typename MainloopSchedule_, typename EpilogueSchedule_>
struct GroupedKernel {
  using ElementAB = cutlass::float_e4m3_t;
  using ElementD = ElementD_;
  using TileShape = TileShape_;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  using ProblemShape = cutlass::gemm::GroupProblemShape<GroupedProblemMNK>;
  static constexpr int kAlignAB = 16;
  static constexpr int kAlignD = 8;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor*, kAlignD,
      ElementD, cutlass::layout::RowMajor*, kAlignD, EpilogueSchedule_,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;

  using CutlassMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB,
      cute::tuple<cutlass::layout::RowMajor*, GroupedLayoutSFA*>, kAlignAB, ElementAB,
      cute::tuple<cutlass::layout::ColumnMajor*, GroupedLayoutSFB*>, kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      MainloopSchedule_>::CollectiveOp;
  using CollectiveMainloop = OverlappedBlockwiseMainloop<CutlassMainloop>;

  using GemmKernel =
      cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue, void>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  static_assert(std::is_same_v<typename GemmKernel::InternalStrideA, GroupedStrideA> &&
                    std::is_same_v<typename GemmKernel::InternalStrideB, GroupedStrideB> &&
                    std::is_same_v<typename GemmKernel::InternalStrideD, GroupedStrideD>,
                "the setup kernel writes the strides as blockwise_grouped_configs.h declares them");

  static typename Gemm::Arguments arguments(const GroupedBlockwiseMmParams& p, const GroupedDeviceArrays& d) {
    typename GemmKernel::MainloopArguments mainloop{
        static_cast<const ElementAB**>(p.a_ptrs),    d.stride_a,
        static_cast<const ElementAB**>(p.b_ptrs),    d.stride_b,
        static_cast<const float**>(p.a_scales_ptrs), static_cast<GroupedLayoutSFA*>(p.layout_sfa),
        static_cast<const float**>(p.b_scales_ptrs), static_cast<GroupedLayoutSFB*>(p.layout_sfb)};
    typename GemmKernel::EpilogueArguments epilogue{
        {}, nullptr, d.stride_d, static_cast<ElementD**>(p.out_ptrs), d.stride_d};
    epilogue.thread.alpha = 1.0f;
    epilogue.thread.beta = 0.0f;
    cutlass::KernelHardwareInfo hw{};
    hw.sm_count = p.sm_count;
    typename Gemm::Arguments args{cutlass::gemm::GemmUniversalMode::kGrouped,
                                  {static_cast<int>(p.num_experts), d.problems, nullptr},
                                  mainloop,
                                  epilogue,
                                  hw};
    args.scheduler.max_swizzle_size = p.swizzle > 0 ? p.swizzle : 1;
    return args;
  }

  static cudaError_t run(const GroupedBlockwiseMmParams& p, const GroupedDeviceArrays& d, void* workspace,
                         size_t* cutlass_bytes, cudaStream_t stream) {
    return run_cutlass_gemm<Gemm>(arguments(p, d), workspace, cutlass_bytes, stream);
  }
};

// The configuration's instance for p's output type.
template <template <typename ElementD> class KernelOf>
cudaError_t run_grouped_out_types(const GroupedBlockwiseMmParams& p, const GroupedDeviceArrays& d, void* workspace,
                                  size_t* cutlass_bytes, cudaStream_t stream) {
  if (p.out_type == OutType::kBF16) return KernelOf<cutlass::bfloat16_t>::run(p, d, workspace, cutlass_bytes, stream);
  return KernelOf<cutlass::half_t>::run(p, d, workspace, cutlass_bytes, stream);
}

}  // namespace sgl_kernel::gemm::sm90
