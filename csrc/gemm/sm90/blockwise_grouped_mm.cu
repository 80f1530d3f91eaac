// SPDX-License-Identifier: Apache-2.0
// fp8_blockwise_scaled_grouped_mm on sm90a (gemm.h): a setup kernel that turns the experts'
// offsets into per-expert pointers, strides and scale layouts, then one CUTLASS 3.x grouped
// (pointer-array) GEMM with the FP8 blockwise-scaling mainloop, in the tile configuration this
// dispatcher picks (blockwise_grouped_configs.h; one translation unit each, so they build in
// parallel).
#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

#include "gemm/gemm.h"
#include "gemm/sm90/blockwise_grouped_configs.h"

namespace sgl_kernel::gemm {

namespace {

using sm90::GroupedDeviceArrays;
using sm90::GroupedLayoutSFA;
using sm90::GroupedLayoutSFB;
using sm90::GroupedProblemMNK;
using sm90::GroupedScaleConfig;
using sm90::GroupedStrideA;
using sm90::GroupedStrideB;
using sm90::GroupedStrideD;

constexpr size_t align_up(size_t x) { return (x + 127) / 128 * 128; }

// The workspace after CUTLASS's part: strides of A, B, D, the checked problem sizes, the flag.
struct WorkspaceLayout {
  size_t cutlass_bytes, stride_a, stride_b, stride_d, problems, flag, total;
  WorkspaceLayout(size_t cutlass, int64_t e) {
    const size_t n = static_cast<size_t>(e);
    cutlass_bytes = align_up(cutlass);
    stride_a = cutlass_bytes;
    stride_b = stride_a + align_up(n * sizeof(GroupedStrideA));
    stride_d = stride_b + align_up(n * sizeof(GroupedStrideB));
    problems = stride_d + align_up(n * sizeof(GroupedStrideD));
    flag = problems + align_up(n * sizeof(GroupedProblemMNK));
    total = flag + 128;
  }
};

struct SetupArgs {
  GroupedBlockwiseMmParams p;
  int out_bytes;  // bytes of one output element
  GroupedDeviceArrays d;
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
  static_cast<GroupedLayoutSFA*>(p.layout_sfa)[e] =
      GroupedScaleConfig::tile_atom_to_shape_SFA(cute::make_shape(m, n, k, 1));
  static_cast<GroupedLayoutSFB*>(p.layout_sfb)[e] =
      GroupedScaleConfig::tile_atom_to_shape_SFB(cute::make_shape(m, n, k, 1));

  GroupedStrideA da{};
  cute::get<0>(da) = p.lda;
  s.d.stride_a[e] = da;
  GroupedStrideB db{};
  cute::get<0>(db) = p.ldb;
  s.d.stride_b[e] = db;
  GroupedStrideD dd{};
  cute::get<0>(dd) = p.ldd;
  s.d.stride_d[e] = dd;
  s.d.problems[e] = GroupedProblemMNK{m, n, k};
}

// One block; a thread an expert: the pointers of its rows, its strides, its scale layouts and
// its checked problem size.
__global__ void grouped_mm_setup_kernel(const __grid_constant__ SetupArgs s) {
  if (threadIdx.x == 0) *s.bad_flag = 0;
  __syncthreads();
  for (int64_t e = threadIdx.x; e < s.p.num_experts; e += blockDim.x) setup_expert(s, e);
}

// Ping-pong 64 x 128 tiles when the experts average at most 64 rows (decode, and skewed
// experts at 64 on average), else cooperative 128 x 128 (session 46 and 47 sweeps,
// tune_blockwise_grouped_mm.py); p.config 0 / 1 forces one (tuning).
sm90::GroupedConfigFn pick(const GroupedBlockwiseMmParams& p) {
  if (p.config == 0) return &sm90::grouped_coop_128x128;
  if (p.config == 1) return &sm90::grouped_pingpong_64x128;
  return p.rows <= 64 * p.num_experts ? &sm90::grouped_pingpong_64x128 : &sm90::grouped_coop_128x128;
}

WorkspaceLayout layout_of(const GroupedBlockwiseMmParams& p) {
  size_t bytes = 0;
  if (pick(p)(p, GroupedDeviceArrays{}, nullptr, &bytes, nullptr) != cudaSuccess) bytes = 0;
  return WorkspaceLayout(bytes, p.num_experts);
}

}  // namespace

size_t fp8_blockwise_grouped_mm_workspace(const GroupedBlockwiseMmParams& p) { return layout_of(p).total; }

size_t fp8_blockwise_grouped_mm_flag_offset(const GroupedBlockwiseMmParams& p) { return layout_of(p).flag; }

cudaError_t launch_fp8_blockwise_grouped_mm_sm90(const GroupedBlockwiseMmParams& p, void* workspace,
                                                 cudaStream_t stream) {
  const WorkspaceLayout w = layout_of(p);
  uint8_t* ws = static_cast<uint8_t*>(workspace);
  SetupArgs s{};
  s.p = p;
  s.out_bytes = 2;  // bf16 or fp16 (OutType)
  s.d.stride_a = reinterpret_cast<GroupedStrideA*>(ws + w.stride_a);
  s.d.stride_b = reinterpret_cast<GroupedStrideB*>(ws + w.stride_b);
  s.d.stride_d = reinterpret_cast<GroupedStrideD*>(ws + w.stride_d);
  s.d.problems = reinterpret_cast<GroupedProblemMNK*>(ws + w.problems);
  s.bad_flag = reinterpret_cast<int32_t*>(ws + w.flag);
  grouped_mm_setup_kernel<<<1, 256, 0, stream>>>(s);
  const cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) return err;
  return pick(p)(p, s.d, ws, nullptr, stream);
}

}  // namespace sgl_kernel::gemm
