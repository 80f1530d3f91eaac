// SPDX-License-Identifier: Apache-2.0
// Bindings of the project family (API.md section 3).
#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "project/project.h"
#include "sgl_kernel/check.h"
#include "sgl_kernel/dispatch.h"

namespace sgl_kernel::project {

namespace {

constexpr bool kBuilt = SGL_KERNEL_HAS_PROJECT;
constexpr const char* kArchs = SGL_KERNEL_ARCHS_PROJECT;

// Merge dimensions that are contiguous with each other and drop size-1 dimensions;
// returns false when more than kMaxStridedDims remain.
template <typename T>
bool describe_layout(const at::Tensor& t, ReluParams<T>& p) {
  p.ndim = 0;
  if (t.is_contiguous()) return true;
  int64_t sizes[64], strides[64];
  int n = 0;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.size(i) == 1) continue;
    if (n > 0 && strides[n - 1] == t.stride(i) * t.size(i)) {
      sizes[n - 1] *= t.size(i);
      strides[n - 1] = t.stride(i);
    } else {
      sizes[n] = t.size(i);
      strides[n] = t.stride(i);
      ++n;
    }
  }
  if (n > kMaxStridedDims) return false;
  p.ndim = n;
  for (int i = 0; i < n; ++i) {
    p.sizes[i] = sizes[i];
    p.strides[i] = strides[i];
  }
  return true;
}

at::Tensor relu_impl(const char* op, const at::Tensor& input, const at::Tensor* bias) {
  check_cuda(op, "input", input);
  check_dtype(op, "input", input, {at::kBFloat16, at::kHalf, at::kFloat});
  if (bias != nullptr) {
    check_min_dim(op, "input", input, 1);
    check_same_device(op, "bias", *bias, "input", input);
    check_same_dtype(op, "bias", *bias, "input", input);
    check_dim(op, "bias", *bias, 1);
    check_size(op, "bias", *bias, 0, input.size(-1), "input.shape[-1]");
    check_contiguous(op, "bias", *bias);
  }
  at::Tensor out = at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
  if (out.numel() == 0) return out;
  require_kernel(op, "project", kArchs, input);

  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(input.get_device()).stream();
  if constexpr (kBuilt) {
    const cudaError_t err = dispatch_float(op, "input", input.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      ReluParams<T> p{};
      at::Tensor src = input;
      if (!describe_layout(src, p)) {
        src = input.contiguous();  // NOTE: > kMaxStridedDims irregular dims: rare, one extra copy
        p.ndim = 0;
      }
      p.out = static_cast<T*>(out.data_ptr());
      p.input = static_cast<const T*>(src.data_ptr());
      p.bias = bias != nullptr ? static_cast<const T*>(bias->data_ptr()) : nullptr;
      p.numel = out.numel();
      p.last_dim = input.dim() > 0 ? std::max<int64_t>(input.size(-1), 1) : 1;
      return launch_relu<T>(p, stream);
    });
    check_launch(op, err);
  }
  return out;
}

at::Tensor custom_relu(const at::Tensor& input) { return relu_impl("custom_relu", input, nullptr); }

at::Tensor fused_add_relu(const at::Tensor& input, const at::Tensor& bias) {
  return relu_impl("fused_add_relu", input, &bias);
}

// One registration for CUDA and CPU tensors: for CPU tensors the checks raise the op's own
// "must be a CUDA tensor" message instead of the dispatcher's "could not run ... CPU".
void register_impls(torch::Library& m) {
  m.impl("custom_relu", &custom_relu);
  m.impl("fused_add_relu", &fused_add_relu);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  // out = max(input, 0), a new contiguous tensor
  m.def("custom_relu(Tensor input) -> Tensor");
  // out = max(input + bias, 0), bias broadcast over the last dimension
  m.def("fused_add_relu(Tensor input, Tensor bias) -> Tensor");
}

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) { register_impls(m); }

TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) { register_impls(m); }

}  // namespace sgl_kernel::project
