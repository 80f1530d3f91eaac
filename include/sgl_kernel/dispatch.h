// SPDX-License-Identifier: Apache-2.0
// dtype dispatch of the bindings layer: maps at::ScalarType to the CUDA type the launchers
// are instantiated for and calls `f(TypeTag<T>{})`. Host-only, torch-dependent.
//
//   return dispatch_float(kOp, "input", input.scalar_type(), [&](auto tag) {
//     using T = typename decltype(tag)::type;
//     return launch_foo<T>(params<T>(...), stream);
//   });
#pragma once

#include <utility>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "sgl_kernel/check.h"

namespace sgl_kernel {

template <typename T>
struct TypeTag {
  using type = T;
};

// fp32, fp16, bf16.
template <typename F>
decltype(auto) dispatch_float(const char* op, const char* name, at::ScalarType t, F&& f) {
  switch (t) {
    case at::ScalarType::Float:
      return std::forward<F>(f)(TypeTag<float>{});
    case at::ScalarType::Half:
      return std::forward<F>(f)(TypeTag<half>{});
    case at::ScalarType::BFloat16:
      return std::forward<F>(f)(TypeTag<__nv_bfloat16>{});
    default:
      TORCH_CHECK(false, "sgl_kernel.", op, ": ", name,
                  " must have dtype torch.float32, torch.float16 or torch.bfloat16, got ",
                  dtype_name(t));
  }
}

// fp16, bf16 only.
template <typename F>
decltype(auto) dispatch_half(const char* op, const char* name, at::ScalarType t, F&& f) {
  switch (t) {
    case at::ScalarType::Half:
      return std::forward<F>(f)(TypeTag<half>{});
    case at::ScalarType::BFloat16:
      return std::forward<F>(f)(TypeTag<__nv_bfloat16>{});
    default:
      TORCH_CHECK(false, "sgl_kernel.", op, ": ", name,
                  " must have dtype torch.float16 or torch.bfloat16, got ", dtype_name(t));
  }
}

}  // namespace sgl_kernel
