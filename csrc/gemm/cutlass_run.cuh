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
// the shape), else the CUDA error of the launch. pdl: programmatic dependent launch, for 3.x
// kernels built with CUTLASS_ENABLE_GDC_FOR_SM90 (CMakeLists.txt), whose load warps wait for
// the previous kernel before their first global read (2.x kernels ignore it).
template <typename Gemm>
cudaError_t run_cutlass_gemm(const typename Gemm::Arguments& args, void* workspace, size_t* ws_bytes,
                             cudaStream_t stream, bool pdl = false) {
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
  cutlass::Status status;
  if constexpr (requires { gemm.run(stream, nullptr, pdl); }) {
    status = gemm.run(stream, nullptr, pdl);
  } else {
    status = gemm.run(stream);
  }
  if (status != cutlass::Status::kSuccess) {
    const cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : cudaErrorLaunchFailure;
  }
  return cudaGetLastError();
}

}  // namespace sgl_kernel::gemm
