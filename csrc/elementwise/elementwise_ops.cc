// SPDX-License-Identifier: Apache-2.0
// Bindings of the elementwise family: schemas, checks, dispatch to the launchers of
// elementwise.h.
#include <cmath>
#include <initializer_list>
#include <string>
#include <utility>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <ATen/ops/zeros.h>
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

// out = [a, b] along the last dim, rows addressed by the first two dims of out (a 3-D tensor).
void concat_rows(const char* op, const at::Tensor& out, const at::Tensor& a, RowStrides a_rows, const at::Tensor& b,
                 RowStrides b_rows) {
  if (out.numel() == 0) return;
  require_kernel(op, "elementwise", kArchs, out);
  const c10::cuda::CUDAGuard guard(out.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(out.get_device()).stream();
  ConcatRowsParams p{};
  p.out = out.data_ptr();
  p.a = a.data_ptr();
  p.b = b.data_ptr();
  p.out_rows = {out.stride(0), out.stride(1)};
  p.a_rows = a_rows;
  p.b_rows = b_rows;
  p.rows = out.size(0) * out.size(1);
  p.rows_inner = out.size(1);
  p.a_cols = a.size(-1);
  p.b_cols = b.size(-1);
  p.elem_bytes = static_cast<int>(out.element_size());
  p.enable_pdl = pdl_supported(out);
  if constexpr (kBuilt) check_launch(op, launch_concat_rows(p, stream));
}

void check_concat_operand(const char* op, const char* name, const at::Tensor& t, const char* ref_name,
                          const at::Tensor& ref) {
  check_same_device(op, name, t, ref_name, ref);
  check_same_dtype(op, name, t, ref_name, ref);
  check_dim(op, name, t, 3);
  check_last_dim_contiguous(op, name, t);
}

// k[:, :, :Dn] = k_nope; k[:, :, Dn:] = k_rope (broadcast over heads)
void concat_mla_k(at::Tensor& k, const at::Tensor& k_nope, const at::Tensor& k_rope) {
  const char* op = "concat_mla_k";
  check_cuda(op, "k", k);
  check_dtype(op, "k", k, {at::kBFloat16, at::kHalf, at::kFloat});
  check_dim(op, "k", k, 3);
  check_last_dim_contiguous(op, "k", k);
  check_concat_operand(op, "k_nope", k_nope, "k", k);
  check_concat_operand(op, "k_rope", k_rope, "k", k);
  check_size(op, "k_nope", k_nope, 0, k.size(0), "k.shape[0]");
  check_size(op, "k_nope", k_nope, 1, k.size(1), "k.shape[1]");
  check_size(op, "k_rope", k_rope, 0, k.size(0), "k.shape[0]");
  check_size(op, "k_rope", k_rope, 1, 1, "one rope head shared by all heads");
  check_size(op, "k", k, 2, k_nope.size(2) + k_rope.size(2), "k_nope.shape[2] + k_rope.shape[2]");
  concat_rows(op, k, k_nope, {k_nope.stride(0), k_nope.stride(1)}, k_rope, {k_rope.stride(0), 0});
}

// out = cat([a, b], dim=-1)
void concat_mla_absorb_q(const at::Tensor& a, const at::Tensor& b, at::Tensor& out) {
  const char* op = "concat_mla_absorb_q";
  check_cuda(op, "a", a);
  check_dtype(op, "a", a, {at::kBFloat16, at::kHalf, at::kFloat});
  check_dim(op, "a", a, 3);
  check_last_dim_contiguous(op, "a", a);
  check_concat_operand(op, "b", b, "a", a);
  check_concat_operand(op, "out", out, "a", a);
  check_leading_dims(op, "b", b, "a", a, 2);
  check_leading_dims(op, "out", out, "a", a, 2);
  check_size(op, "out", out, 2, a.size(2) + b.size(2), "a.shape[2] + b.shape[2]");
  concat_rows(op, out, a, {a.stride(0), a.stride(1)}, b, {b.stride(0), b.stride(1)});
}

// k_out[loc * mult + offset] = e4m3(clamp(k / k_scale, -448, 448)); same for v
void downcast_fp8(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_out, at::Tensor& v_out,
                  const at::Tensor& k_scale, const at::Tensor& v_scale, const at::Tensor& loc, int64_t mult,
                  int64_t offset) {
  const char* op = "downcast_fp8";
  check_cuda(op, "k", k);
  check_dtype(op, "k", k, {at::kBFloat16, at::kHalf});
  check_dim(op, "k", k, 3);
  check_contiguous(op, "k", k);
  check_same_device(op, "v", v, "k", k);
  check_same_dtype(op, "v", v, "k", k);
  check_same_shape(op, "v", v, "k", k);
  check_contiguous(op, "v", v);
  SGL_CHECK(k.size(2) % 8 == 0, op, "k.shape[2] (head dim) must be a multiple of 8, got ", k.size(2));
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"k_out", &k_out}, {"v_out", &v_out}}) {
    check_same_device(op, name, *t, "k", k);
    check_dtype(op, name, *t, {at::kFloat8_e4m3fn, at::kByte});
    check_dim(op, name, *t, 3);
    check_contiguous(op, name, *t);
    check_size(op, name, *t, 1, k.size(1), "k.shape[1]");
    check_size(op, name, *t, 2, k.size(2), "k.shape[2]");
  }
  check_same_shape(op, "v_out", v_out, "k_out", k_out);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"k_scale", &k_scale}, {"v_scale", &v_scale}}) {
    check_same_device(op, name, *t, "k", k);
    check_dtype(op, name, *t, {at::kFloat});
    SGL_CHECK(t->numel() == 1, op, name, " must have one element, got ", t->numel());
  }
  check_same_device(op, "loc", loc, "k", k);
  check_dtype(op, "loc", loc, {at::kLong});
  check_dim(op, "loc", loc, 1);
  check_contiguous(op, "loc", loc);
  check_size(op, "loc", loc, 0, k.size(0), "k.shape[0]");
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"k", &k}, {"v", &v}}) {
    SGL_CHECK(reinterpret_cast<uintptr_t>(t->data_ptr()) % 16 == 0, op, name, " must be 16-byte aligned");
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"k_out", &k_out}, {"v_out", &v_out}}) {
    SGL_CHECK(reinterpret_cast<uintptr_t>(t->data_ptr()) % 8 == 0, op, name, " must be 8-byte aligned");
  }
  if (k.numel() == 0) return;
  require_kernel(op, "elementwise", kArchs, k);
  const c10::cuda::CUDAGuard guard(k.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(k.get_device()).stream();
  at::Tensor flag;
  if (debug_mode()) flag = at::zeros({1}, k.options().dtype(at::kInt));
  if constexpr (kBuilt) {
    const cudaError_t err = dispatch_half(op, "k", k.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      DowncastFp8Params<T> p{};
      p.k = static_cast<const T*>(k.data_ptr());
      p.v = static_cast<const T*>(v.data_ptr());
      p.k_out = static_cast<uint8_t*>(k_out.data_ptr());
      p.v_out = static_cast<uint8_t*>(v_out.data_ptr());
      p.k_scale = k_scale.data_ptr<float>();
      p.v_scale = v_scale.data_ptr<float>();
      p.loc = loc.data_ptr<int64_t>();
      p.tokens = k.size(0);
      p.row = k.size(1) * k.size(2);
      p.slots = k_out.size(0);
      p.mult = mult;
      p.offset = offset;
      p.error_flag = flag.defined() ? flag.data_ptr<int>() : nullptr;
      p.enable_pdl = pdl_supported(k);
      return launch_downcast_fp8<T>(p, stream);
    });
    check_launch(op, err);
  }
  if (flag.defined()) {
    SGL_CHECK(flag.item<int>() == 0, op, "a slot loc * mult + offset is outside [0, ", k_out.size(0),
              ") (SGL_KERNEL_DEBUG=1)");
  }
}

// output[:] = input[:] through kernel parameters (no copy engine)
void copy_to_gpu_no_ce(const at::Tensor& input, at::Tensor& output) {
  const char* op = "copy_to_gpu_no_ce";
  SGL_CHECK(input.device().is_cpu(), op, "input must be a CPU tensor, got device ", input.device().str());
  check_dtype(op, "input", input, {at::kInt});
  check_dim(op, "input", input, 1);
  check_contiguous(op, "input", input);
  check_cuda(op, "output", output);
  check_dtype(op, "output", output, {at::kInt});
  check_dim(op, "output", output, 1);
  check_contiguous(op, "output", output);
  check_size(op, "output", output, 0, input.size(0), "input.shape[0]");
  SGL_CHECK(input.numel() <= kCopyNoCeMax, op, "input must have at most ", kCopyNoCeMax, " elements, got ",
            input.numel());
  if (input.numel() == 0) return;
  require_kernel(op, "elementwise", kArchs, output);
  const c10::cuda::CUDAGuard guard(output.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(output.get_device()).stream();
  CopyNoCeParams p{};
  p.output = output.data_ptr<int32_t>();
  p.n = static_cast<int32_t>(input.numel());
  const int32_t* src = input.data_ptr<int32_t>();
  for (int32_t i = 0; i < p.n; ++i) p.values[i] = src[i];
  if constexpr (kBuilt) check_launch(op, launch_copy_to_gpu_no_ce(p, stream));
}

// One registration for CUDA and CPU tensors: for CPU tensors the checks raise the op's own
// "must be a CUDA tensor" message instead of the dispatcher's "could not run ... CPU".
void register_impls(torch::Library& m) {
  m.impl("copy_to_gpu_no_ce", &copy_to_gpu_no_ce);
  m.impl("downcast_fp8", &downcast_fp8);
  m.impl("concat_mla_k", &concat_mla_k);
  m.impl("concat_mla_absorb_q", &concat_mla_absorb_q);
  m.impl("rmsnorm", &rmsnorm);
  m.impl("fused_add_rmsnorm", &fused_add_rmsnorm);
  m.impl("gemma_rmsnorm", &gemma_rmsnorm);
  m.impl("gemma_fused_add_rmsnorm", &gemma_fused_add_rmsnorm);
  m.impl("silu_and_mul", &silu_and_mul);
  m.impl("gelu_and_mul", &gelu_and_mul);
  m.impl("gelu_tanh_and_mul", &gelu_tanh_and_mul);
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

  // output[:] = input[:], CPU int32 values passed as kernel parameters
  m.def("copy_to_gpu_no_ce(Tensor input, Tensor! output) -> ()");
  // k_out[loc * mult + offset] = e4m3(k / k_scale), same for v
  m.def("downcast_fp8(Tensor k, Tensor v, Tensor! k_out, Tensor! v_out, Tensor k_scale, Tensor v_scale, "
        "Tensor loc, int mult, int offset) -> ()");
  // k = cat([k_nope, k_rope broadcast over heads], dim=-1)
  m.def("concat_mla_k(Tensor! k, Tensor k_nope, Tensor k_rope) -> ()");
  // out = cat([a, b], dim=-1)
  m.def("concat_mla_absorb_q(Tensor a, Tensor b, Tensor! out) -> ()");
}

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) { register_impls(m); }

TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) { register_impls(m); }

}  // namespace sgl_kernel::elementwise
