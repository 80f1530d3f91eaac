// SPDX-License-Identifier: Apache-2.0
// copy_to_gpu_no_ce: host int32 values reach the GPU as kernel parameters, not through a
// copy-engine transfer (so under CUDA-graph capture the values at capture time are baked in).
#include "elementwise/elementwise.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/launch.cuh"

namespace sgl_kernel::elementwise {

namespace {

__global__ void copy_to_gpu_no_ce_kernel(const __grid_constant__ CopyNoCeParams p) {
  SGL_PDL_WAIT();
  for (int i = threadIdx.x; i < p.n; i += blockDim.x) p.output[i] = p.values[i];
  SGL_PDL_LAUNCH_DEPENDENTS();
}

}  // namespace

cudaError_t launch_copy_to_gpu_no_ce(const CopyNoCeParams& p, cudaStream_t stream) {
  if (p.n <= 0) return cudaSuccess;
  if (p.n > kCopyNoCeMax) return cudaErrorInvalidValue;
  const int threads = p.n < 256 ? ((p.n + 31) / 32) * 32 : 256;
  return launch_kernel(copy_to_gpu_no_ce_kernel, dim3(1), dim3(threads), 0, stream, false, p);
}

}  // namespace sgl_kernel::elementwise
