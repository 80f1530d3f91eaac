// SPDX-License-Identifier: Apache-2.0
// Bindings of the elementwise family: schemas, checks, dispatch to the launchers of
// elementwise.h.
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "elementwise/elementwise.h"
#include "sgl_kernel/check.h"
#include "sgl_kernel/dispatch.h"

namespace sgl_kernel::elementwise {

namespace {

constexpr bool kBuilt = SGL_KERNEL_HAS_ELEMENTWISE;
constexpr const char* kArchs = SGL_KERNEL_ARCHS_ELEMENTWISE;

// out = act(input[..., :d]) * input[..., d:]
void act_and_mul(const char* op, Activation act, at::Tensor& out, const at::Tensor& input) {
  check_cuda(op, "input", input);
  check_same_device(op, "out", out, "input", input);
  check_dtype(op, "input", input, {at::kBFloat16, at::kHalf, at::kFloat});
  check_same_dtype(op, "out", out, "input", input);
  check_min_dim(op, "input", input, 1);
  SGL_CHECK(input.size(-1) % 2 == 0, op, "input.shape[-1] must be even (2 * d), got ", input.size(-1));
  check_dim(op, "out", out, input.dim());
  check_leading_dims(op, "out", out, "input", input, input.dim() - 1);
  check_size(op, "out", out, -1, input.size(-1) / 2, "input.shape[-1] / 2");
  check_contiguous(op, "input", input);
  check_contiguous(op, "out", out);
  if (out.numel() == 0) return;
  require_kernel(op, "elementwise", kArchs, input);

  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(input.get_device()).stream();
  const int64_t d = out.size(-1);
  const int64_t rows = out.numel() / d;
  const bool pdl = pdl_supported(input);
  if constexpr (kBuilt) {
    const cudaError_t err = dispatch_float(op, "input", input.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      const ActAndMulParams<T> p{static_cast<T*>(out.data_ptr()), static_cast<const T*>(input.data_ptr()),
                                 rows, d, pdl};
      return launch_act_and_mul<T>(act, p, stream);
    });
    check_launch(op, err);
  }
}

void silu_and_mul(at::Tensor& out, const at::Tensor& input) {
  act_and_mul("silu_and_mul", Activation::kSilu, out, input);
}

void gelu_and_mul(at::Tensor& out, const at::Tensor& input) {
  act_and_mul("gelu_and_mul", Activation::kGelu, out, input);
}

void gelu_tanh_and_mul(at::Tensor& out, const at::Tensor& input) {
  act_and_mul("gelu_tanh_and_mul", Activation::kGeluTanh, out, input);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  // out = silu(input[..., :d]) * input[..., d:]
  m.def("silu_and_mul(Tensor! out, Tensor input) -> ()");
  // out = gelu(input[..., :d]) * input[..., d:] (exact erf GELU)
  m.def("gelu_and_mul(Tensor! out, Tensor input) -> ()");
  // out = gelu_tanh(input[..., :d]) * input[..., d:] (tanh approximation)
  m.def("gelu_tanh_and_mul(Tensor! out, Tensor input) -> ()");
}

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) {
  m.impl("silu_and_mul", &silu_and_mul);
  m.impl("gelu_and_mul", &gelu_and_mul);
  m.impl("gelu_tanh_and_mul", &gelu_tanh_and_mul);
}

// CPU tensors reach the same checks, which reject them with the op's own message instead
// of the dispatcher's "could not run ... with arguments from the CPU backend".
TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) {
  m.impl("silu_and_mul", &silu_and_mul);
  m.impl("gelu_and_mul", &gelu_and_mul);
  m.impl("gelu_tanh_and_mul", &gelu_tanh_and_mul);
}

}  // namespace sgl_kernel::elementwise
