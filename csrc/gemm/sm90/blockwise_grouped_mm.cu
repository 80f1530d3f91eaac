// SPDX-License-Identifier: Apache-2.0
// fp8_blockwise_scaled_grouped_mm on sm90a (gemm.h): a setup kernel that turns the experts'
// offsets into per-expert pointers, strides and scale layouts, then one CUTLASS 3.x grouped
// (pointer-array) GEMM with the FP8 blockwise-scaling mainloop: each 128-deep k-block's partial
// sums are promoted into the fp32 accumulator with scales_a[row, kb] * scales_b_e[n / 128, kb];
// the epilogue only rounds to the output type. Both scale tensors are read K-major (API.md).
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
#include <cutlass/gemm/group_array_problem_shape.hpp>
#include <cutlass/gemm/kernel/gemm_universal.hpp>
#include <cutlass/numeric_types.h>

#include "gemm/cutlass_run.cuh"
#include "gemm/gemm.h"

namespace sgl_kernel::gemm {

namespace {

using ProblemShape = cutlass::gemm::GroupProblemShape<cute::Shape<int, int, int>>;
using ProblemMNK = ProblemShape::UnderlyingProblemShape;

// 1 x 128 activation blocks and 128 x 128 weight blocks, both K-major.
using ScaleConfig =
    cutlass::detail::Sm90BlockwiseScaleConfig<1, 128, 128, cute::GMMA::Major::K, cute::GMMA::Major::K>;
using LayoutSFA = decltype(ScaleConfig::deduce_layoutSFA());
using LayoutSFB = decltype(ScaleConfig::deduce_layoutSFB());
// API.md gives each layout 5 int32 of scratch per expert: ((1, M), (128, Kb), L) and its two
// run-time strides.
static_assert(sizeof(LayoutSFA) == 5 * sizeof(int32_t) && sizeof(LayoutSFB) == 5 * sizeof(int32_t));

// The two tile configurations: cooperative 128 x 128 (two consumer warp groups on one tile)
// and ping-pong 64 x 128 (two consumer warp groups on alternate tiles, one's epilogue under
// the other's mainloop), for experts of few rows.
struct CoopConfig {
  using TileShape = cute::Shape<cute::_128, cute::_128, cute::_128>;
  using MainloopSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedCooperativeFP8Blockwise;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedCooperative;
};
struct PingpongConfig {
  using TileShape = cute::Shape<cute::_64, cute::_128, cute::_128>;
  using MainloopSchedule = cutlass::gemm::KernelPtrArrayTmaWarpSpecializedPingpongFP8Blockwise;
  using EpilogueSchedule = cutlass::epilogue::PtrArrayTmaWarpSpecializedPingpong;
};

template <typename ElementD_, typename Config>
struct GroupedKernel {
  using ElementAB = cutlass::float_e4m3_t;
  using ElementD = ElementD_;
  using TileShape = typename Config::TileShape;
  using ClusterShape = cute::Shape<cute::_1, cute::_1, cute::_1>;
  static constexpr int kAlignAB = 16;
  static constexpr int kAlignD = 8;

  using CollectiveEpilogue = typename cutlass::epilogue::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, TileShape, ClusterShape,
      cutlass::epilogue::collective::EpilogueTileAuto, float, float, void, cutlass::layout::RowMajor*, kAlignD,
      ElementD, cutlass::layout::RowMajor*, kAlignD, typename Config::EpilogueSchedule,
      cutlass::epilogue::fusion::LinearCombination<ElementD, float, void, float>>::CollectiveOp;

  using CollectiveMainloop = typename cutlass::gemm::collective::CollectiveBuilder<
      cutlass::arch::Sm90, cutlass::arch::OpClassTensorOp, ElementAB,
      cute::tuple<cutlass::layout::RowMajor*, LayoutSFA*>, kAlignAB, ElementAB,
      cute::tuple<cutlass::layout::ColumnMajor*, LayoutSFB*>, kAlignAB, float, TileShape, ClusterShape,
      cutlass::gemm::collective::StageCountAutoCarveout<static_cast<int>(
          sizeof(typename CollectiveEpilogue::SharedStorage))>,
      typename Config::MainloopSchedule>::CollectiveOp;

  using GemmKernel =
      cutlass::gemm::kernel::GemmUniversal<ProblemShape, CollectiveMainloop, CollectiveEpilogue, void>;
  using Gemm = cutlass::gemm::device::GemmUniversalAdapter<GemmKernel>;
  using StrideA = typename GemmKernel::InternalStrideA;
  using StrideB = typename GemmKernel::InternalStrideB;
  using StrideD = typename GemmKernel::InternalStrideD;
};

// Every instance's strides are (leading dim, 1, 0): one layout of the workspace serves all.
using StrideA = GroupedKernel<cutlass::bfloat16_t, CoopConfig>::StrideA;
using StrideB = GroupedKernel<cutlass::bfloat16_t, CoopConfig>::StrideB;
using StrideD = GroupedKernel<cutlass::bfloat16_t, CoopConfig>::StrideD;
static_assert(std::is_same_v<StrideA, GroupedKernel<cutlass::half_t, PingpongConfig>::StrideA> &&
              std::is_same_v<StrideB, GroupedKernel<cutlass::half_t, PingpongConfig>::StrideB> &&
              std::is_same_v<StrideD, GroupedKernel<cutlass::half_t, PingpongConfig>::StrideD>);

constexpr size_t align_up(size_t x) { return (x + 127) / 128 * 128; }

// The workspace after CUTLASS's part: strides of A, B, D, the checked problem sizes, the flag.
struct WorkspaceLayout {
  size_t cutlass_bytes, stride_a, stride_b, stride_d, problems, flag, total;
  WorkspaceLayout(size_t cutlass, int64_t e) {
    const size_t n = static_cast<size_t>(e);
    cutlass_bytes = align_up(cutlass);
    stride_a = cutlass_bytes;
    stride_b = stride_a + align_up(n * sizeof(StrideA));
    stride_d = stride_b + align_up(n * sizeof(StrideB));
    problems = stride_d + align_up(n * sizeof(StrideD));
    flag = problems + align_up(n * sizeof(ProblemMNK));
    total = flag + 128;
  }
};

struct SetupArgs {
  GroupedBlockwiseMmParams p;
  int out_bytes;  // bytes of one output element
  StrideA* stride_a;
  StrideB* stride_b;
  StrideD* stride_d;
  ProblemMNK* problems;
  int32_t* bad_flag;
};

__device__ void setup_expert(const SetupArgs& s, int64_t e) {
  const GroupedBlockwiseMmParams& p = s.p;
  const int32_t m_e = p.problem_sizes[3 * e];
  const int32_t n_e = p.problem_sizes[3 * e + 1];
  const int32_t k_e = p.problem_sizes[3 * e + 2];
  const int64_t o_e = p.expert_offsets[e];
  const bool ok = m_e >= 0 && o_e >= 0 && o_e + m_e <= p.rows && n_e == p.n && k_e == p.k;
  if (!ok) atomicOr(s.bad_flag, 1);
  const int32_t m = ok ? m_e : 0;
  const int64_t first = ok ? o_e : 0;
  const int n = static_cast<int>(p.n), k = static_cast<int>(p.k);

  static_cast<const void**>(p.a_ptrs)[e] = static_cast<const uint8_t*>(p.a) + first * p.lda;
  static_cast<const void**>(p.b_ptrs)[e] = static_cast<const uint8_t*>(p.b) + e * p.b_stride_e;
  static_cast<void**>(p.out_ptrs)[e] = static_cast<uint8_t*>(p.out) + first * p.ldd * s.out_bytes;
  static_cast<const float**>(p.a_scales_ptrs)[e] = p.scales_a + first * (p.k / 128);
  static_cast<const float**>(p.b_scales_ptrs)[e] = p.scales_b + e * p.sb_stride_e;

  // The packed layouts for (m, N, K) (the grouped mainloop derives the same ones itself; the
  // caller's arrays are filled for API compatibility).
  static_cast<LayoutSFA*>(p.layout_sfa)[e] = ScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(m, n, k, 1));
  static_cast<LayoutSFB*>(p.layout_sfb)[e] = ScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(m, n, k, 1));

  StrideA da{};
  cute::get<0>(da) = p.lda;
  s.stride_a[e] = da;
  StrideB db{};
  cute::get<0>(db) = p.ldb;
  s.stride_b[e] = db;
  StrideD dd{};
  cute::get<0>(dd) = p.ldd;
  s.stride_d[e] = dd;
  s.problems[e] = ProblemMNK{m, n, k};
}

// One block; a thread an expert: the pointers of its rows, its strides, its scale layouts and
// its checked problem size.
__global__ void grouped_mm_setup_kernel(const __grid_constant__ SetupArgs s) {
  if (threadIdx.x == 0) *s.bad_flag = 0;
  __syncthreads();
  for (int64_t e = threadIdx.x; e < s.p.num_experts; e += blockDim.x) setup_expert(s, e);
}

template <typename K>
typename K::Gemm::Arguments gemm_arguments(const GroupedBlockwiseMmParams& p, const SetupArgs& s) {
  using ElementD = typename K::ElementD;
  using ElementAB = typename K::ElementAB;
  typename K::GemmKernel::MainloopArguments mainloop{
      static_cast<const ElementAB**>(p.a_ptrs),      s.stride_a,
      static_cast<const ElementAB**>(p.b_ptrs),      s.stride_b,
      static_cast<const float**>(p.a_scales_ptrs),   static_cast<LayoutSFA*>(p.layout_sfa),
      static_cast<const float**>(p.b_scales_ptrs),   static_cast<LayoutSFB*>(p.layout_sfb)};
  typename K::GemmKernel::EpilogueArguments epilogue{
      {}, nullptr, s.stride_d, static_cast<ElementD**>(p.out_ptrs), s.stride_d};
  epilogue.thread.alpha = 1.0f;
  epilogue.thread.beta = 0.0f;
  cutlass::KernelHardwareInfo hw{};
  hw.sm_count = p.sm_count;
  return typename K::Gemm::Arguments{cutlass::gemm::GemmUniversalMode::kGrouped,
                                     {static_cast<int>(p.num_experts), s.problems, nullptr},
                                     mainloop,
                                     epilogue,
                                     hw};
}

template <typename K>
size_t cutlass_workspace(const GroupedBlockwiseMmParams& p) {
  SetupArgs s{};
  s.p = p;
  return K::Gemm::get_workspace_size(gemm_arguments<K>(p, s));
}

// Ping-pong 64 x 128 tiles when the experts average at most 64 rows (decode), else
// cooperative 128 x 128; p.config 0 / 1 forces one (tuning).
bool use_pingpong(const GroupedBlockwiseMmParams& p) {
  if (p.config == 0 || p.config == 1) return p.config == 1;
  return p.rows <= 64 * p.num_experts;
}

// Calls f.template operator()<GroupedKernel<...>>() for the instance p runs.
template <typename F>
decltype(auto) with_kernel(const GroupedBlockwiseMmParams& p, F&& f) {
  const bool bf16 = p.out_type == OutType::kBF16;
  if (use_pingpong(p)) {
    return bf16 ? f.template operator()<GroupedKernel<cutlass::bfloat16_t, PingpongConfig>>()
                : f.template operator()<GroupedKernel<cutlass::half_t, PingpongConfig>>();
  }
  return bf16 ? f.template operator()<GroupedKernel<cutlass::bfloat16_t, CoopConfig>>()
              : f.template operator()<GroupedKernel<cutlass::half_t, CoopConfig>>();
}

WorkspaceLayout layout_of(const GroupedBlockwiseMmParams& p) {
  const size_t c = with_kernel(p, [&]<typename K>() { return cutlass_workspace<K>(p); });
  return WorkspaceLayout(c, p.num_experts);
}

template <typename K>
cudaError_t run(const GroupedBlockwiseMmParams& p, void* workspace, cudaStream_t stream) {
  using ElementD = typename K::ElementD;
  const WorkspaceLayout w = layout_of(p);
  uint8_t* ws = static_cast<uint8_t*>(workspace);
  SetupArgs s{};
  s.p = p;
  s.out_bytes = static_cast<int>(sizeof(ElementD));
  s.stride_a = reinterpret_cast<StrideA*>(ws + w.stride_a);
  s.stride_b = reinterpret_cast<StrideB*>(ws + w.stride_b);
  s.stride_d = reinterpret_cast<StrideD*>(ws + w.stride_d);
  s.problems = reinterpret_cast<ProblemMNK*>(ws + w.problems);
  s.bad_flag = reinterpret_cast<int32_t*>(ws + w.flag);
  grouped_mm_setup_kernel<<<1, 256, 0, stream>>>(s);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return run_cutlass_gemm<typename K::Gemm>(gemm_arguments<K>(p, s), ws, nullptr, stream);
}

}  // namespace

size_t fp8_blockwise_grouped_mm_workspace(const GroupedBlockwiseMmParams& p) { return layout_of(p).total; }

size_t fp8_blockwise_grouped_mm_flag_offset(const GroupedBlockwiseMmParams& p) { return layout_of(p).flag; }

cudaError_t launch_fp8_blockwise_grouped_mm_sm90(const GroupedBlockwiseMmParams& p, void* workspace,
                                                 cudaStream_t stream) {
  return with_kernel(p, [&]<typename K>() { return run<K>(p, workspace, stream); });
}

}  // namespace sgl_kernel::gemm
