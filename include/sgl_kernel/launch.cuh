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

// Launch `kernel` on `stream`; with `pdl` the kernel may overlap the previous one in the
// stream (it must call SGL_PDL_WAIT() before reading its inputs, arch.cuh).
template <typename... KernelArgs, typename... Args>
cudaError_t launch_kernel(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem_bytes,
                          cudaStream_t stream, bool pdl, Args&&... args) {
  if (grid.x == 0 || grid.y == 0 || grid.z == 0) return cudaSuccess;
  if (grid.y > 65535u || grid.z > 65535u || block.x * block.y * block.z > 1024u) {
    return cudaErrorInvalidConfiguration;
  }
  if (smem_bytes > 48u * 1024u) {
    SGL_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                      static_cast<int>(smem_bytes)));
  }
  cudaLaunchAttribute attrs[1];
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = 0;
  if (pdl) {
    attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[0].val.programmaticStreamSerializationAllowed = 1;
    config.numAttrs = 1;
  }
  return cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...);
}

}  // namespace sgl_kernel
