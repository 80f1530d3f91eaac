// SPDX-License-Identifier: Apache-2.0
// A consumer mainloop for CUTLASS's sm90 FP8 blockwise GEMM (KernelTmaWarpSpecialized*FP8
// Blockwise schedules) that overlaps the promotion of one k-tile's partial sums with the
// tensor-core work of the next.
//
// CUTLASS's own mainloop, per 128-deep k-tile: issue the tile's wgmmas into a temporary
// accumulator, wait for all of them, then promote (acc += tmp * scale_a[row] * scale_b) while
// the tensor cores of that warpgroup sit idle. Here the warpgroup keeps two temporaries: the
// wgmmas of tile k go into one while the FFMAs of tile k - 1 drain the other
// (wgmma.wait_group 1 instead of 0), so the promotion hides behind the MMAs.
//
// Cost: a second temporary, one more accumulator-sized register array per thread (64 fp32 at
// a 128x128 cooperative tile: 3 x 64 against CUTLASS's 232-register budget for consumers).
// Everything else (smem layouts, the producer, the scale copies, the pipeline contract with
// mma_tail) is the CUTLASS collective's: this struct derives from it and replaces mma() only.
// Requirements, checked at compile time: one k-tile per scale block along K
// (ScaleGranularityK == tile K) and a single B scale per tile (ScaleGranularityN >= tile N).
#pragma once

#include <cute/tensor.hpp>
#include <cutlass/cutlass.h>
#include <cutlass/gemm/collective/collective_mma.hpp>

namespace sgl_kernel::gemm::sm90 {

template <class Base>
struct OverlappedBlockwiseMainloop : Base {
  using typename Base::ElementBlockScale;
  using typename Base::MainloopPipeline;
  using typename Base::Params;
  using typename Base::PipelineState;
  using typename Base::SmemLayoutA;
  using typename Base::SmemLayoutB;
  using typename Base::SmemLayoutSFA;
  using typename Base::SmemLayoutSFB;
  using typename Base::TensorStorage;
  using typename Base::TiledMma;
  using typename Base::TileShape;

  static_assert(Base::ScaleGranularityK == cute::size<2>(TileShape{}),
                "one promotion per k-tile: scale granularity along K must equal the tile's K");
  static_assert(Base::ScaleNsPerTile == 1, "one B scale per tile (scale granularity N >= tile N)");

  template <class FrgTensorC>
  CUTLASS_DEVICE void mma(MainloopPipeline pipeline, PipelineState smem_pipe_read, FrgTensorC& accum,
                          int k_tile_count, int thread_idx, TensorStorage& shared_tensors, Params const&) {
    using namespace cute;
    static_assert(is_rmem<FrgTensorC>::value, "the accumulator lives in registers");
    constexpr int kWarpGroupThreads = cutlass::NumThreadsPerWarpGroup;

    Tensor sA = make_tensor(make_smem_ptr(shared_tensors.smem_A.data()), SmemLayoutA{});  // (BLK_M, BLK_K, PIPE)
    Tensor sB = make_tensor(make_smem_ptr(shared_tensors.smem_B.data()), SmemLayoutB{});  // (BLK_N, BLK_K, PIPE)
    // The scales seen as (BLK_M, BLK_N, (scale k-blocks, PIPE)) tensors, broadcast (stride 0)
    // along the dimension they do not depend on, so that partition_C hands each thread the
    // scale of every accumulator element it owns.
    Tensor sSFA = make_tensor(
        make_smem_ptr(shared_tensors.smem_SFA.data()),
        make_layout(make_shape(get<0>(shape(SmemLayoutSFA{})), get<1>(TileShape{}),
                               make_shape(get<1>(shape(SmemLayoutSFA{})), get<2>(shape(SmemLayoutSFA{})))),
                    make_stride(get<0>(stride(SmemLayoutSFA{})), _0{},
                                make_stride(get<1>(stride(SmemLayoutSFA{})), get<2>(stride(SmemLayoutSFA{}))))));
    Tensor sSFB = make_tensor(
        make_smem_ptr(shared_tensors.smem_SFB.data()),
        make_layout(make_shape(get<0>(TileShape{}), get<0>(shape(SmemLayoutSFB{})),
                               make_shape(get<1>(shape(SmemLayoutSFB{})), get<2>(shape(SmemLayoutSFB{})))),
                    make_stride(_0{}, get<0>(stride(SmemLayoutSFB{})),
                                make_stride(get<1>(stride(SmemLayoutSFB{})), get<2>(stride(SmemLayoutSFB{}))))));

    constexpr int kWarpGroups = size(TiledMma{}) / kWarpGroupThreads;
    const Layout wg_layout = make_layout(Int<kWarpGroups>{}, Int<kWarpGroupThreads>{});
    const int wg = __shfl_sync(0xffffffffu, thread_idx / kWarpGroupThreads, 0);
    TiledMma tiled_mma;
    auto wg_mma = tiled_mma.get_slice(wg_layout(wg));
    auto thr_mma = tiled_mma.get_slice(thread_idx);

    Tensor tCsSFA = thr_mma.partition_C(sSFA);  // (MMA, MMA_M, MMA_N, (k-blocks, PIPE))
    Tensor tCsSFB = thr_mma.partition_C(sSFB);
    Tensor tCrA = wg_mma.make_fragment_A(wg_mma.partition_A(sA));  // smem descriptors
    Tensor tCrB = wg_mma.make_fragment_B(wg_mma.partition_B(sB));
    constexpr int kKBlocks = size<2>(tCrA);  // wgmma k-steps per tile

    // Two temporaries (tile parity) and the combined per-element scale of each.
    Tensor tmp0 = make_fragment_like(accum);
    Tensor tmp1 = make_fragment_like(accum);
    Tensor sf0 = make_tensor_like<ElementBlockScale>(tCsSFA(_, _, _, _0{}));
    Tensor sf1 = make_tensor_like<ElementBlockScale>(tCsSFA(_, _, _, _0{}));
    Tensor sfb = make_tensor_like<ElementBlockScale>(tCsSFB(_, _, _, _0{}));

    PipelineState smem_pipe_release = smem_pipe_read;

    // Waits for the next stage, reads its scales into sf, and issues its wgmmas into tmp.
    auto issue = [&](auto& tmp, auto& sf) {
      pipeline.consumer_wait(smem_pipe_read, pipeline.consumer_try_wait(smem_pipe_read));
      const int stage = smem_pipe_read.index();
      copy(tCsSFA(_, _, _, make_coord(_0{}, stage)), sf);
      copy(tCsSFB(_, _, _, make_coord(_0{}, stage)), sfb);
      tiled_mma.accumulate_ = GMMA::ScaleOut::Zero;
      warpgroup_fence_operand(tmp);
      warpgroup_arrive();
      CUTLASS_PRAGMA_UNROLL
      for (int kb = 0; kb < kKBlocks; ++kb) {
        cute::gemm(tiled_mma, tCrA(_, _, kb, stage), tCrB(_, _, kb, stage), tmp);
        tiled_mma.accumulate_ = GMMA::ScaleOut::One;
      }
      warpgroup_commit_batch();
      warpgroup_fence_operand(tmp);
      // The row scales times the tile's single B scale (unique values only).
      const ElementBlockScale b = sfb(_0{});
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(filter_zeros(sf)); ++i) filter_zeros(sf)(i) = filter_zeros(sf)(i) * b;
      ++smem_pipe_read;
    };
    // acc += tmp * sf, once tmp's wgmmas are complete.
    auto promote = [&](auto& tmp, auto& sf) {
      warpgroup_fence_operand(tmp);
      CUTLASS_PRAGMA_UNROLL
      for (int i = 0; i < size(accum); ++i) accum(i) += tmp(i) * sf(i);
    };
    // Issue the next tile into `next`, then retire the previous one held in `prev`: its stage
    // goes back to the producer and its sums into the accumulator, under the new wgmmas.
    auto step = [&](auto& next, auto& sf_next, auto& prev, auto& sf_prev) {
      issue(next, sf_next);
      warpgroup_wait<1>();
      pipeline.consumer_release(smem_pipe_release);
      ++smem_pipe_release;
      promote(prev, sf_prev);
    };

    // Zeroed before the first wgmma: a register written while a wgmma that names it is in
    // flight makes ptxas wait for that wgmma (C7517), which would undo the overlap.
    clear(accum);
    clear(tmp0);
    clear(tmp1);
    warpgroup_fence_operand(accum);
    issue(tmp0, sf0);
    int left = k_tile_count - 1;
    CUTLASS_PRAGMA_NO_UNROLL
    for (; left >= 2; left -= 2) {
      step(tmp1, sf1, tmp0, sf0);
      step(tmp0, sf0, tmp1, sf1);
    }
    // The last tile's stage is released by mma_tail (the CUTLASS collective's contract).
    if (left == 1) {
      step(tmp1, sf1, tmp0, sf0);
      warpgroup_wait<0>();
      promote(tmp1, sf1);
    } else {
      warpgroup_wait<0>();
      promote(tmp0, sf0);
    }
    warpgroup_fence_operand(accum);
  }
};

}  // namespace sgl_kernel::gemm::sm90
