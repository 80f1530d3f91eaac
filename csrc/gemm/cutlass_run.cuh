// SPDX-License-Identifier: Apache-2.0
// One CUTLASS GEMM launch through GemmUniversalAdapter (3.x kernels of sm90/ and 2.x kernels
// of scaled_mm_sm8x.cuh alike).
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include <cutlass/cutlass.h>

namespace sgl_kernel::gemm {

// With ws_bytes != nullptr, only store the workspace `args` needs. Otherwise launch on
// `stream`: cudaErrorNotSupported when can_implement rejects the arguments (the binding names
// the shape), else the CUDA error of the launch.
template <typename Gemm>
cudaError_t run_cutlass_gemm(const typename Gemm::Arguments& args, void* workspace, size_t* ws_bytes,
                             cudaStream_t stream) {
  if (ws_bytes != nullptr) {
    *ws_bytes = Gemm::get_workspace_size(args);
    return cudaSuccess;
  }
  Gemm gemm;
  if (gemm.can_implement(args) != cutlass::Status::kSuccess) return cudaErrorNotSupported;
  if (gemm.initialize(args, workspace, stream) != cutlass::Status::kSuccess) {
    const cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : cudaErrorUnknown;
  }
  if (gemm.run(stream) != cutlass::Status::kSuccess) {
    const cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : cudaErrorLaunchFailure;
  }
  return cudaGetLastError();
}

}  // namespace sgl_kernel::gemm
