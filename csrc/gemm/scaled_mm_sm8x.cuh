// SPDX-License-Identifier: Apache-2.0
// CUTLASS 2.x (mma.sync) GEMM with the per-row / per-column scale and bias epilogue of
// fp8_scaled_mm and int8_scaled_mm, for GPUs without the sm90a kernels (A100/A10/L4/L40/4090,
// and Blackwell builds that lack 9.0a):
//   out[m, n] = scales_a[m] * (acc[m, n] * scales_b[n]) + bias[n]    (fp32, one rounding)
// The same expression, in the same order, as the sm90a epilogue (sm90/scaled_mm_sm90.cuh).
//
// The epilogue is a CUTLASS 2.x epilogue visitor tree: the accumulator fragment, a row
// broadcast of scales_b, a column broadcast of scales_a, and a row broadcast of bias whose
// null pointer reads as zeros, so one kernel serves both "with bias" and "without bias".
//
// int8 (csrc/gemm/sm80/, sm80+): s8 x s8 -> s32 with saturating mma.sync m16n8k32.
// fp8  (csrc/gemm/sm89/, sm89+): e4m3 x e4m3 -> f32 mma.sync m16n8k32, with CUTLASS's staged
// accumulation (partial sums promoted to fp32 registers every mainloop stage).
//
// Each configuration's translation unit instantiates ScaledMmSm8x for both output types;
// scaled_mm_sm8x_configs.h declares those entry points and the tile heuristic.
#pragma once

#include <cstdint>
#include <type_traits>

#include <cuda_runtime.h>

// visitors.hpp uses names (GemmCoord, NumericArrayConverter) it does not include: keep it last.
#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/functional.h>
#include <cutlass/gemm/device/gemm_universal_adapter.h>
#include <cutlass/gemm_coord.h>
#include <cutlass/gemm/kernel/default_gemm_universal_with_visitor.h>
#include <cutlass/gemm/threadblock/threadblock_swizzle.h>
#include <cutlass/numeric_conversion.h>
#include <cutlass/numeric_types.h>
// clang-format off
#include <cutlass/epilogue/threadblock/fusion/visitors.hpp>
// clang-format on

#include "gemm/cutlass_run.cuh"
#include "gemm/gemm.h"

namespace sgl_kernel::gemm::sm8x {

template <typename ElementAB, typename ElementD, typename ArchTag, typename TileShape, typename WarpShape, int kStages>
struct ScaledMmSm8x {
  static constexpr bool kInt8 = std::is_same_v<ElementAB, int8_t>;
  using ElementAcc = std::conditional_t<kInt8, int32_t, float>;
  using MathOp = std::conditional_t<kInt8, cutlass::arch::OpMultiplyAddSaturate, cutlass::arch::OpMultiplyAdd>;
  using InstructionShape = cutlass::gemm::GemmShape<16, 8, 32>;
  static constexpr int kAlignAB = 16;  // 16 bytes of 8-bit elements (K % 16 == 0, API.md 2.3)
  static constexpr int kAlignD = 8;    // 16 bytes of 16-bit outputs (N % 8 == 0)
  static constexpr int kEpilogueStages = 1;
  static constexpr auto kRound = cutlass::FloatRoundStyle::round_to_nearest;

  using ThreadMap =
      cutlass::epilogue::threadblock::OutputTileThreadLayout<TileShape, WarpShape, ElementD, kAlignD, kEpilogueStages>;

  // Leaves: the accumulators, scales_b[n], scales_a[m], bias[n] (nullptr: zeros).
  using Acc = cutlass::epilogue::threadblock::VisitorAccFetch;
  using ScaleB =
      cutlass::epilogue::threadblock::VisitorRowBroadcast<ThreadMap, float, cute::Stride<cute::_0, cute::_1, cute::_0>>;
  using ScaleA =
      cutlass::epilogue::threadblock::VisitorColBroadcast<ThreadMap, float, cute::Stride<cute::_1, cute::_0, cute::_0>>;
  using Bias =
      cutlass::epilogue::threadblock::VisitorRowBroadcast<ThreadMap, ElementD, cute::Stride<cute::_0, cute::_1, cute::_0>>;

  // acc * scales_b, then scales_a * that + bias, rounded once to the output type.
  using AccTimesScaleB = cutlass::epilogue::threadblock::Sm80EVT<
      cutlass::epilogue::threadblock::VisitorCompute<cutlass::multiplies, float, float, kRound>, Acc, ScaleB>;
  using Scaled = cutlass::epilogue::threadblock::Sm80EVT<
      cutlass::epilogue::threadblock::VisitorCompute<cutlass::homogeneous_multiply_add, ElementD, float, kRound>,
      ScaleA, AccTimesScaleB, Bias>;
  using StrideD = cute::Stride<int64_t, cute::_1, cute::_0>;
  using Callbacks = cutlass::epilogue::threadblock::Sm80EVT<
      cutlass::epilogue::threadblock::VisitorAuxStore<ThreadMap, ElementD, kRound, StrideD>, Scaled>;

  using Kernel = typename cutlass::gemm::kernel::DefaultGemmWithVisitor<
      ElementAB, cutlass::layout::RowMajor, cutlass::ComplexTransform::kNone, kAlignAB,     //
      ElementAB, cutlass::layout::ColumnMajor, cutlass::ComplexTransform::kNone, kAlignAB,  //
      ElementD, cutlass::layout::RowMajor, kAlignD,                                         //
      ElementAcc, float, cutlass::arch::OpClassTensorOp, ArchTag, TileShape, WarpShape, InstructionShape,
      Callbacks, cutlass::gemm::threadblock::GemmIdentityThreadblockSwizzle<8>, kStages, MathOp,
      kEpilogueStages>::GemmKernel;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<Kernel>;

  // cudaErrorNotSupported when CUTLASS rejects the problem (the binding names the shape).
  static cudaError_t run(const ScaledMmParams& p, cudaStream_t stream) {
    const auto* bias = static_cast<const ElementD*>(p.bias);
    typename Callbacks::Arguments epilogue{
        // Scaled: (scales_a, acc * scales_b, bias, fma)
        {{p.scales_a, 0.f, {}},
         // AccTimesScaleB: (acc, scales_b, multiply)
         {{}, {p.scales_b, 0.f, {}}, {}},
         {bias, ElementD(0.f), {}},
         {}},
        // the store
        {static_cast<ElementD*>(p.out), StrideD{p.ldd, cute::_1{}, cute::_0{}}}};
    const cutlass::gemm::GemmCoord problem(static_cast<int>(p.m), static_cast<int>(p.n), static_cast<int>(p.k));
    typename Gemm::Arguments args(cutlass::gemm::GemmUniversalMode::kGemm, problem, /*batch_count=*/1, epilogue,
                                  p.a, p.b, /*ptr_C=*/nullptr, /*ptr_D=*/nullptr,
                                  /*batch strides A, B, C, D=*/int64_t{0}, int64_t{0}, int64_t{0}, int64_t{0},
                                  /*lda=*/int64_t{p.lda}, /*ldb=*/int64_t{p.ldb}, /*ldc=*/int64_t{0},
                                  /*ldd=*/int64_t{0});
    // No workspace: serial split-K is off (the visitor epilogue does not support it).
    return run_cutlass_gemm<Gemm>(args, nullptr, nullptr, stream);
  }
};

// Both output types of one configuration.
template <typename ElementAB, typename ArchTag, typename TileShape, typename WarpShape, int kStages>
cudaError_t run_out_types(const ScaledMmParams& p, cudaStream_t stream) {
  if (p.out_type == OutType::kBF16) {
    return ScaledMmSm8x<ElementAB, cutlass::bfloat16_t, ArchTag, TileShape, WarpShape, kStages>::run(p, stream);
  }
  return ScaledMmSm8x<ElementAB, cutlass::half_t, ArchTag, TileShape, WarpShape, kStages>::run(p, stream);
}

}  // namespace sgl_kernel::gemm::sm8x
