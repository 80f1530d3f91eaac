// SPDX-License-Identifier: Apache-2.0
// Bindings of the elementwise family: schemas, checks, dispatch to the launchers of
// elementwise.h.
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>

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

// Leading dimensions (all but the last) of a tensor as at most two levels of rows.
struct RowLayout {
  int64_t rows = 1;
  int64_t rows_inner = 1;
};

// Collapse dims [begin, end) of t into one level; false if their strides do not allow it.
bool collapse_dims(const at::Tensor& t, int64_t begin, int64_t end, int64_t& stride) {
  stride = 0;
  int64_t prev = -1;
  for (int64_t i = begin; i < end; ++i) {
    if (t.size(i) == 1) continue;
    if (prev >= 0 && t.stride(prev) != t.stride(i) * t.size(i)) return false;
    prev = i;
    stride = t.stride(i);
  }
  return true;
}

// Split point of the leading dims that every tensor in `ts` can be addressed with (tensors
// share the shape); fills their RowStrides. Raises when no split works.
RowLayout row_layout(const char* op, std::initializer_list<std::pair<const char*, const at::Tensor*>> ts,
                     std::initializer_list<RowStrides*> strides) {
  const at::Tensor& first = *ts.begin()->second;
  const int64_t lead = first.dim() - 1;
  RowLayout layout;
  for (int64_t i = 0; i < lead; ++i) layout.rows *= first.size(i);
  for (int64_t split = 0; split <= std::max<int64_t>(lead - 1, 0); ++split) {
    bool ok = true;
    auto out = strides.begin();
    for (const auto& [name, t] : ts) {
      RowStrides& s = **out++;
      ok = ok && collapse_dims(*t, 0, split, s.outer) && collapse_dims(*t, split, lead, s.inner);
    }
    if (ok) {
      for (int64_t i = split; i < lead; ++i) layout.rows_inner *= first.size(i);
      return layout;
    }
  }
  std::string names;
  for (const auto& [name, t] : ts) names += std::string(names.empty() ? "" : ", ") + name;
  SGL_CHECK(false, op, "the leading dimensions of ", names,
            " must collapse into at most two strided levels of rows; got strides ", first.strides(),
            " (make the tensors contiguous)");
}

// out = rmsnorm(input) (residual == nullptr), or residual += input; input = rmsnorm(residual).
void rmsnorm_impl(const char* op, at::Tensor& out, const at::Tensor& input, at::Tensor* residual,
                  const at::Tensor& weight, double eps, bool enable_pdl, bool gemma) {
  const char* out_name = residual != nullptr ? "input" : "output";
  check_cuda(op, "input", input);
  check_dtype(op, "input", input, {at::kBFloat16, at::kHalf, at::kFloat});
  check_min_dim(op, "input", input, 1);
  check_last_dim_contiguous(op, "input", input);
  check_same_device(op, "weight", weight, "input", input);
  check_same_dtype(op, "weight", weight, "input", input);
  check_dim(op, "weight", weight, 1);
  check_size(op, "weight", weight, 0, input.size(-1), "input.shape[-1]");
  check_contiguous(op, "weight", weight);
  if (residual != nullptr) {
    check_same_device(op, "residual", *residual, "input", input);
    check_same_dtype(op, "residual", *residual, "input", input);
    check_same_shape(op, "residual", *residual, "input", input);
    check_last_dim_contiguous(op, "residual", *residual);
  } else {
    check_same_device(op, out_name, out, "input", input);
    check_same_dtype(op, out_name, out, "input", input);
    check_same_shape(op, out_name, out, "input", input);
    check_last_dim_contiguous(op, out_name, out);
  }
  SGL_CHECK(std::isfinite(eps) && eps >= 0, op, "eps must be a finite number >= 0, got ", eps);
  if (input.numel() == 0) return;
  require_kernel(op, "elementwise", kArchs, input);

  RowStrides out_rows{}, input_rows{}, residual_rows{};
  RowLayout layout;
  if (residual != nullptr) {
    layout = row_layout(op, {{"input", &input}, {"residual", residual}}, {&input_rows, &residual_rows});
    out_rows = input_rows;
  } else {
    layout = row_layout(op, {{"input", &input}, {out_name, &out}}, {&input_rows, &out_rows});
  }

  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(input.get_device()).stream();
  const bool pdl = enable_pdl && pdl_supported(input);
  if constexpr (kBuilt) {
    const cudaError_t err = dispatch_float(op, "input", input.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      RmsNormParams<T> p{};
      p.input = static_cast<const T*>(input.data_ptr());
      p.out = residual != nullptr ? static_cast<T*>(input.data_ptr()) : static_cast<T*>(out.data_ptr());
      p.residual = residual != nullptr ? static_cast<T*>(residual->data_ptr()) : nullptr;
      p.weight = static_cast<const T*>(weight.data_ptr());
      p.out_rows = out_rows;
      p.input_rows = input_rows;
      p.residual_rows = residual_rows;
      p.rows = layout.rows;
      p.rows_inner = layout.rows_inner;
      p.hidden = input.size(-1);
      p.eps = static_cast<float>(eps);
      p.gemma = gemma;
      p.enable_pdl = pdl;
      return launch_rmsnorm<T>(p, stream);
    });
    check_launch(op, err);
  }
}

void rmsnorm(at::Tensor& output, const at::Tensor& input, const at::Tensor& weight, double eps, bool enable_pdl) {
  rmsnorm_impl("rmsnorm", output, input, nullptr, weight, eps, enable_pdl, false);
}

void gemma_rmsnorm(at::Tensor& output, const at::Tensor& input, const at::Tensor& weight, double eps,
                   bool enable_pdl) {
  rmsnorm_impl("gemma_rmsnorm", output, input, nullptr, weight, eps, enable_pdl, true);
}

void fused_add_rmsnorm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps,
                       bool enable_pdl) {
  rmsnorm_impl("fused_add_rmsnorm", input, input, &residual, weight, eps, enable_pdl, false);
}

void gemma_fused_add_rmsnorm(at::Tensor& input, at::Tensor& residual, const at::Tensor& weight, double eps,
                             bool enable_pdl) {
  rmsnorm_impl("gemma_fused_add_rmsnorm", input, input, &residual, weight, eps, enable_pdl, true);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  // output = input * rsqrt(mean(input^2) + eps) * weight, per row
  m.def("rmsnorm(Tensor! output, Tensor input, Tensor weight, float eps, bool enable_pdl) -> ()");
  // residual += input; input = rmsnorm(residual), both in place
  m.def("fused_add_rmsnorm(Tensor! input, Tensor! residual, Tensor weight, float eps, bool enable_pdl) -> ()");
  // rmsnorm with (1 + weight)
  m.def("gemma_rmsnorm(Tensor! output, Tensor input, Tensor weight, float eps, bool enable_pdl) -> ()");
  // fused_add_rmsnorm with (1 + weight)
  m.def("gemma_fused_add_rmsnorm(Tensor! input, Tensor! residual, Tensor weight, float eps, bool enable_pdl) -> ()");

  // out = silu(input[..., :d]) * input[..., d:]
  m.def("silu_and_mul(Tensor! out, Tensor input) -> ()");
  // out = gelu(input[..., :d]) * input[..., d:] (exact erf GELU)
  m.def("gelu_and_mul(Tensor! out, Tensor input) -> ()");
  // out = gelu_tanh(input[..., :d]) * input[..., d:] (tanh approximation)
  m.def("gelu_tanh_and_mul(Tensor! out, Tensor input) -> ()");
}

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) {
  m.impl("rmsnorm", &rmsnorm);
  m.impl("fused_add_rmsnorm", &fused_add_rmsnorm);
  m.impl("gemma_rmsnorm", &gemma_rmsnorm);
  m.impl("gemma_fused_add_rmsnorm", &gemma_fused_add_rmsnorm);
  m.impl("silu_and_mul", &silu_and_mul);
  m.impl("gelu_and_mul", &gelu_and_mul);
  m.impl("gelu_tanh_and_mul", &gelu_tanh_and_mul);
}

// CPU tensors reach the same checks, which reject them with the op's own message instead
// of the dispatcher's "could not run ... with arguments from the CPU backend".
TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) {
  m.impl("rmsnorm", &rmsnorm);
  m.impl("fused_add_rmsnorm", &fused_add_rmsnorm);
  m.impl("gemma_rmsnorm", &gemma_rmsnorm);
  m.impl("gemma_fused_add_rmsnorm", &gemma_fused_add_rmsnorm);
  m.impl("silu_and_mul", &silu_and_mul);
  m.impl("gelu_and_mul", &gelu_and_mul);
  m.impl("gelu_tanh_and_mul", &gelu_tanh_and_mul);
}

}  // namespace sgl_kernel::elementwise
