// SPDX-License-Identifier: Apache-2.0
// One launch helper for every kernel: PDL attribute on request, launch configuration
// checked, the launch's cudaError_t returned to the caller (the bindings turn it into a
// RuntimeError naming the op).
#pragma once

#include <cstdint>
#include <utility>

#include <cuda_runtime.h>

namespace sgl_kernel {

template <typename T>
__host__ __device__ constexpr T ceil_div(T a, T b) {
  return (a + b - 1) / b;
}

// Propagate a failed CUDA call out of a launcher.
#define SGL_CUDA_TRY(expr)                     \
  do {                                         \
    const cudaError_t sgl_err_ = (expr);       \
    if (sgl_err_ != cudaSuccess) return sgl_err_; \
  } while (0)

// Launch attributes of `config`: clusters of (cs, 1, 1) blocks when cs > 1 (sm90+), and
// programmatic dependent launch when pdl (the kernel then calls SGL_PDL_WAIT() before it reads
// any input); attrs must outlive the launch (or occupancy query).
inline void set_launch_attrs(cudaLaunchConfig_t& config, cudaLaunchAttribute (&attrs)[2], int cs, bool pdl) {
  config.attrs = attrs;
  config.numAttrs = 0;
  if (cs > 1) {
    cudaLaunchAttribute& a = attrs[config.numAttrs++];
    a.id = cudaLaunchAttributeClusterDimension;
    a.val.clusterDim.x = static_cast<unsigned>(cs);
    a.val.clusterDim.y = 1;
    a.val.clusterDim.z = 1;
  }
  if (pdl) {
    cudaLaunchAttribute& a = attrs[config.numAttrs++];
    a.id = cudaLaunchAttributeProgrammaticStreamSerialization;
    a.val.programmaticStreamSerializationAllowed = 1;
  }
}

// Launch `kernel` on `stream`; with `pdl` the kernel may overlap the previous one in the
// stream (it must call SGL_PDL_WAIT() before reading its inputs, arch.cuh); with
// cluster_x > 1 (sm90+) in thread-block clusters of (cluster_x, 1, 1), grid.x a multiple of it.
template <typename... KernelArgs, typename... Args>
cudaError_t launch_kernel_clustered(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes,
                                    cudaStream_t stream, bool pdl, int cluster_x, Args&&... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
  if (grid.y > 65535u || grid.z > 65535u || block.x * block.y * block.z > 1024u || cluster_x < 1 ||
      grid.x % static_cast<unsigned>(cluster_x) != 0) {
    return cudaErrorInvalidConfiguration;
  }
  if (smem_bytes > 48u * 1024u) {
    SGL_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem_bytes)));
  }
  cudaLaunchAttribute attrs[2];
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  set_launch_attrs(config, attrs, cluster_x, pdl);
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

template <typename... KernelArgs, typename... Args>
cudaError_t launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes,
                          cudaStream_t stream, bool pdl, Args&&... args) {
  return launch_kernel_clustered(kernel, grid, block, smem_bytes, stream, pdl, 1, std::forward<Args>(args)...);
}

}  // namespace sgl_kernel
