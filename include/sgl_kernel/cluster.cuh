// SPDX-License-Identifier: Apache-2.0
// Thread-block clusters (sm90+) for decode kernels that spread one reduction (a row's sum of
// squares or maximum, a whole tensor's maximum) over several blocks: the host-side check that
// a kernel runs in clusters of a given shape on the current device, and the device-side
// exchange of the blocks' partial results through distributed shared memory.
#pragma once

#include <atomic>
#include <cstdint>

#include <cuda_runtime.h>

#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/runtime.h"

#if defined(__CUDACC__)
#include <cooperative_groups.h>
#endif

namespace sgl_kernel {

inline constexpr int kMaxClusterBlocks = 16;

// Whether kKernel (a __global__ function) can run in clusters of `cs` blocks (2, 4, 8 or 16) of
// `threads` threads (a multiple of 32), without dynamic shared memory, on the current device:
// code compiled for sm90+ (not, say, sm80 PTX that the driver compiled for this GPU) and a cluster
// that the occupancy query places (MPS or green-context partitions may be smaller). Clusters
// of more than 8 blocks are opted into here, before the first launch. Answers are cached per
// device (the first 16) and shape.
template <auto kKernel>
bool cluster_launchable(int cs, int threads) {
  if (cs < 2 || cs > kMaxClusterBlocks || (cs & (cs - 1)) != 0 || threads < 32 || threads > 1024 || threads % 32 != 0) return false;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    (void)cudaGetLastError();
    return false;
  }
  if (device_capability(device) < 90) return false;
  // The code that runs must have been compiled for sm90+ (its cluster code exists only there):
  // the machine code's arch and, for PTX the driver compiled for this GPU (an "8.0+PTX" build
  // on an H100 reports binaryVersion 90), the PTX arch it came from.
  static const int compiled_for = [] {
    cudaFuncAttributes fa{};
    if (cudaFuncGetAttributes(&fa, kKernel) != cudaSuccess) {
      (void)cudaGetLastError();
      return 0;
    }
    return fa.binaryVersion < fa.ptxVersion ? fa.binaryVersion : fa.ptxVersion;
  }();
  if (compiled_for < 90) return false;
  constexpr int kCachedDevices = 16;
  static std::atomic<int8_t> known[kCachedDevices][kMaxClusterBlocks][32];  // 0 unknown, 1 fits, 2 not
  std::atomic<int8_t>* slot = device < kCachedDevices ? &known[device][cs - 1][threads / 32 - 1] : nullptr;
  if (slot != nullptr) {
    const int8_t k = slot->load(std::memory_order_relaxed);
    if (k != 0) return k == 1;
  }
  cudaLaunchConfig_t config = {};
  cudaLaunchAttribute attrs[2];
  config.gridDim = dim3(static_cast<unsigned>(cs));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  set_launch_attrs(config, attrs, cs, false);
  int clusters = 0;
  const bool ok =
      (cs <= 8 || cudaFuncSetAttribute(kKernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1) == cudaSuccess) &&
      cudaOccupancyMaxActiveClusters(&clusters, kKernel, &config) == cudaSuccess && clusters > 0;
  if (!ok) (void)cudaGetLastError();
  if (slot != nullptr) slot->store(ok ? 1 : 2, std::memory_order_relaxed);
  return ok;
}

#if defined(__CUDACC__)
// The cluster-wide reduction of the blocks' values `v` (valid in every lane of warp 0 of a
// one-dimensional block; a cluster of a power of two of blocks), combined by every warp with
// the same shuffle tree, so that every thread of every block gets the same result bit for bit.
// `table`: kMaxClusterBlocks entries of this block's shared memory, not otherwise used. Every
// thread of every block of the cluster must call it, once per kernel; after its cluster
// barrier no block touches another's shared memory, so blocks may exit as they finish. sm90+
// only (the caller compiles it out below sm90).
template <typename V, typename Op>
__device__ __forceinline__ V cluster_reduce(V v, V* table, Op op) {
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  const unsigned rank = cluster.block_rank();
  const unsigned blocks = cluster.num_blocks();
  // Lane b of warp 0 writes this block's value into block b's table.
  if (threadIdx.x < blocks) *cluster.map_shared_rank(&table[rank], threadIdx.x) = v;
  cluster.sync();  // release / acquire at cluster scope: every table is complete
  // Each aligned group of `blocks` lanes reduces the table (lane l holds entry l % blocks).
  V r = table[threadIdx.x & (blocks - 1)];
  for (unsigned offset = blocks / 2; offset > 0; offset /= 2) r = op(r, __shfl_xor_sync(0xffffffffu, r, offset));
  return r;
}
#endif

}  // namespace sgl_kernel
