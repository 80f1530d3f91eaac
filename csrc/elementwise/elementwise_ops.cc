// SPDX-License-Identifier: Apache-2.0
// Bindings of the elementwise family: schemas, checks, dispatch to the launchers of
// elementwise.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <utility>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <ATen/ops/add.h>
#include <ATen/ops/mul.h>
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
  // launch_rmsnorm refuses 2^31 rows or more (norm.cu); an empty input never reaches it.
  const int64_t rows = input.numel() == 0 ? 0 : input.numel() / input.size(-1);
  SGL_CHECK(rows <= INT32_MAX, op, "input must have at most ", INT32_MAX,
            " rows (the product of all dimensions but the last), got ", rows, " (shape ", input.sizes(), ")");
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
  check_no_internal_overlap(op, out_name, out);  // (the fused ops: out is input)
  if (residual != nullptr) check_no_internal_overlap(op, "residual", *residual);
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

// The sizes launch_concat_rows takes (out non-empty): fewer than 2^32 rows and, for its flat
// kernel, rows of at most 2^32 - 1 copy units (a 32-bit divisor) and at most 2^31 - 1 blocks of
// 256 units over the whole output. The tile kernel's rows (24 or 72 vectors, fewer than 2^32
// rows) are inside both flat limits, so the limits hold whichever kernel runs.
void check_concat_size(const char* op, const char* out_name, const ConcatRowsParams& p) {
  SGL_CHECK(p.rows < (int64_t{1} << 32), op, out_name, " must have fewer than 2^32 rows (", out_name, ".shape[0] * ",
            out_name, ".shape[1]), got ", p.rows);
  int64_t f = 1;  // (without the family built, require_kernel refuses the call right after)
  if constexpr (kBuilt) f = concat_copy_unit_elems(p);
  const int64_t cols = (p.a_cols + p.b_cols) / f;
  const char* unit = f == 1 ? "elements (the tensors are not all 16-byte aligned)" : "16-byte vectors";
  SGL_CHECK(cols <= int64_t{0xffffffff}, op, out_name, ".shape[2] must be at most 4294967295 copy units, got ", cols,
            " ", unit);
  const uint64_t units = static_cast<uint64_t>(p.rows) * static_cast<uint64_t>(cols);
  constexpr uint64_t kMaxUnits = uint64_t{INT32_MAX} * 256;
  SGL_CHECK(units <= kMaxUnits, op, out_name, " must have at most ", kMaxUnits,
            " copy units in all (2^31 - 1 blocks of 256), got ", p.rows, " rows of ", cols, " ", unit);
}

// out = [a, b] along the last dim, rows addressed by the first two dims of out (a 3-D tensor).
void concat_rows(const char* op, const char* out_name, const at::Tensor& out, const at::Tensor& a,
                 RowStrides a_rows, const at::Tensor& b, RowStrides b_rows) {
  if (out.numel() == 0) return;
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
  check_concat_size(op, out_name, p);
  check_no_internal_overlap(op, out_name, out);
  require_kernel(op, "elementwise", kArchs, out);
  const c10::cuda::CUDAGuard guard(out.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(out.get_device()).stream();
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
  concat_rows(op, "k", k, k_nope, {k_nope.stride(0), k_nope.stride(1)}, k_rope, {k_rope.stride(0), 0});
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
  concat_rows(op, "out", out, a, {a.stride(0), a.stride(1)}, b, {b.stride(0), b.stride(1)});
}

// k_out[loc * mult + offset] = e4m3(clamp(k / k_scale, -448, 448)); same for v
void downcast_fp8(const at::Tensor& k, const at::Tensor& v, at::Tensor& k_out, at::Tensor& v_out,
                  const at::Tensor& k_scale, const at::Tensor& v_scale, const at::Tensor& loc, int64_t mult,
                  int64_t offset) {
  const char* op = "downcast_fp8";
  check_cuda(op, "k", k);
  check_dtype(op, "k", k, {at::kBFloat16, at::kHalf});
  check_dim(op, "k", k, 3);
  check_same_device(op, "v", v, "k", k);
  check_same_dtype(op, "v", v, "k", k);
  check_same_shape(op, "v", v, "k", k);
  SGL_CHECK(k.size(2) % 8 == 0, op, "k.shape[2] (head dim) must be a multiple of 8, got ", k.size(2));
  // launch_downcast_fp8 refuses 2^32 - 256 or more 16-byte vectors in k and v together (its
  // thread index is 32-bit); an empty k never reaches it.
  const int64_t vectors = k.numel() == 0 ? 0 : 2 * k.size(0) * (k.size(1) * k.size(2) / 8);
  SGL_CHECK(vectors < (int64_t{1} << 32) - 256, op, "k must have fewer than 2^32 - 256 16-byte vectors in k and v ",
            "together (2 * k.numel() / 8), got ", vectors, " (shape ", k.sizes(), ")");
  check_contiguous(op, "k", k);
  check_contiguous(op, "v", v);
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
  if (debug_mode()) {
    debug_check_indices(op, "loc", at::add(at::mul(loc, mult), offset), k_out.size(0),
                        "k_out/v_out rows, as loc * mult + offset",
                        stream);
  }
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
      p.enable_pdl = pdl_supported(k);
      return launch_downcast_fp8<T>(p, stream);
    });
    check_launch(op, err);
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

// ---------------------------------------------------------------------------------------
// RoPE

constexpr const char* kRopeOp = "apply_rope_pos_ids_cos_sin_cache";

// [rows, heads, head_size] with a contiguous last dimension, 16-byte aligned data pointer and
// row/head strides (the kernel moves 16-byte vectors).
void check_rope_operand(const char* op, const char* name, const at::Tensor& t, const char* ref_name,
                        const at::Tensor& ref) {
  check_same_device(op, name, t, ref_name, ref);
  check_same_dtype(op, name, t, ref_name, ref);
  check_dim(op, name, t, 3);
  check_last_dim_contiguous(op, name, t);
}

void check_aligned_16(const char* op, const char* name, const at::Tensor& t) {
  const int64_t elem = static_cast<int64_t>(t.element_size());
  bool ok = reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  for (int64_t d = 0; d + 1 < t.dim(); ++d) ok = ok && (t.size(d) <= 1 || (t.stride(d) * elem) % 16 == 0);
  SGL_CHECK(ok, op, name, " must be 16-byte aligned (data pointer and the strides of every dimension but the "
            "last a multiple of 16 bytes), got data pointer % 16 = ", reinterpret_cast<uintptr_t>(t.data_ptr()) % 16,
            ", strides ", t.strides(), " (element size ", elem, ")");
}

// `out` is either `in` itself (same data pointer and strides: computed in place) or another
// tensor; the same data pointer with other strides would read elements another thread writes.
// Empty tensors touch no memory (and may share a data pointer whatever their strides).
void check_in_place(const char* op, const char* name, const at::Tensor& out, const char* in_name,
                    const at::Tensor& in) {
  SGL_CHECK(out.numel() == 0 || out.data_ptr() != in.data_ptr() || out.strides() == in.strides(), op, name,
            " must either be ", in_name, " itself (same data pointer and strides) or another tensor, got the data "
            "pointer of ", in_name, " with strides ", out.strides(), " instead of ", in.strides());
}

// q_rope, k_rope = rope(q), rope(k) with cos/sin rows cos_sin_cache[pos_ids]; with v given,
// also k_buffer[kv_cache_loc] = k_rope and v_buffer[kv_cache_loc] = v.
void apply_rope_pos_ids_cos_sin_cache(const at::Tensor& q, const at::Tensor& k, at::Tensor& q_rope,
                                      at::Tensor& k_rope, const at::Tensor& cos_sin_cache,
                                      const at::Tensor& pos_ids, bool interleave, bool enable_pdl,
                                      const std::optional<at::Tensor>& v, const std::optional<at::Tensor>& k_buffer,
                                      const std::optional<at::Tensor>& v_buffer,
                                      const std::optional<at::Tensor>& kv_cache_loc) {
  const char* op = kRopeOp;
  check_cuda(op, "q", q);
  check_dtype(op, "q", q, {at::kBFloat16, at::kHalf});
  check_dim(op, "q", q, 3);
  check_last_dim_contiguous(op, "q", q);
  const int64_t nnz = q.size(0);
  const int64_t head_size = q.size(2);
  SGL_CHECK(head_size % 16 == 0 && head_size >= 16 && head_size <= 512, op,
            "q.shape[2] (head_size) must be a multiple of 16 in [16, 512], got ", head_size);
  check_rope_operand(op, "k", k, "q", q);
  check_size(op, "k", k, 0, nnz, "q.shape[0], tokens");
  check_size(op, "k", k, 2, head_size, "q.shape[2], head_size");
  check_rope_operand(op, "q_rope", q_rope, "q", q);
  check_leading_dims(op, "q_rope", q_rope, "q", q, 3);
  check_rope_operand(op, "k_rope", k_rope, "k", k);
  check_leading_dims(op, "k_rope", k_rope, "k", k, 3);

  check_same_device(op, "cos_sin_cache", cos_sin_cache, "q", q);
  check_dtype(op, "cos_sin_cache", cos_sin_cache, {at::kFloat});
  check_dim(op, "cos_sin_cache", cos_sin_cache, 2);
  check_contiguous(op, "cos_sin_cache", cos_sin_cache);
  const int64_t rotary_dim = cos_sin_cache.size(1);
  SGL_CHECK(rotary_dim % 16 == 0 && rotary_dim >= 16 && rotary_dim <= head_size, op,
            "cos_sin_cache.shape[1] (rotary_dim) must be a multiple of 16 in [16, head_size = ", head_size,
            "], got ", rotary_dim);
  SGL_CHECK(reinterpret_cast<uintptr_t>(cos_sin_cache.data_ptr()) % 16 == 0, op,
            "cos_sin_cache must be 16-byte aligned, got data pointer % 16 = ",
            reinterpret_cast<uintptr_t>(cos_sin_cache.data_ptr()) % 16);

  check_same_device(op, "pos_ids", pos_ids, "q", q);
  check_dtype(op, "pos_ids", pos_ids, {at::kLong, at::kInt});
  check_dim(op, "pos_ids", pos_ids, 1);
  check_size(op, "pos_ids", pos_ids, 0, nnz, "q.shape[0], tokens");
  check_contiguous(op, "pos_ids", pos_ids);

  // The fused KV-cache write takes all four optional tensors or none.
  const bool fused = v.has_value() || k_buffer.has_value() || v_buffer.has_value() || kv_cache_loc.has_value();
  if (fused) {
    const char* missing = !v.has_value()              ? "v"
                          : !k_buffer.has_value()     ? "k_buffer"
                          : !v_buffer.has_value()     ? "v_buffer"
                          : !kv_cache_loc.has_value() ? "kv_cache_loc"
                                                      : nullptr;
    SGL_CHECK(missing == nullptr, op, missing,
              " must be given: the fused KV-cache write takes v, k_buffer, v_buffer and kv_cache_loc together, got None");
    check_rope_operand(op, "v", *v, "k", k);
    check_size(op, "v", *v, 0, nnz, "q.shape[0], tokens");
    check_size(op, "v", *v, 2, head_size, "q.shape[2], head_size");
    check_rope_operand(op, "k_buffer", *k_buffer, "k", k);
    check_size(op, "k_buffer", *k_buffer, 1, k.size(1), "k.shape[1], key heads");
    check_size(op, "k_buffer", *k_buffer, 2, head_size, "q.shape[2], head_size");
    check_rope_operand(op, "v_buffer", *v_buffer, "v", *v);
    check_size(op, "v_buffer", *v_buffer, 1, v->size(1), "v.shape[1], value heads");
    check_size(op, "v_buffer", *v_buffer, 2, head_size, "q.shape[2], head_size");
    check_same_device(op, "kv_cache_loc", *kv_cache_loc, "q", q);
    check_dtype(op, "kv_cache_loc", *kv_cache_loc, {at::kLong});
    check_dim(op, "kv_cache_loc", *kv_cache_loc, 1);
    check_size(op, "kv_cache_loc", *kv_cache_loc, 0, nnz, "q.shape[0], tokens");
    check_contiguous(op, "kv_cache_loc", *kv_cache_loc);
  }
  // The launcher and the kernel count heads in int32, with room for the rounding up to whole
  // warps of heads.
  const int64_t heads = q.size(1) + k.size(1) + (fused ? v->size(1) : 0);
  SGL_CHECK(heads <= INT32_MAX / 2, op, "q.shape[1] + k.shape[1]", fused ? " + v.shape[1]" : "",
            " (the heads) must be at most ", INT32_MAX / 2, ", got ", heads);

  check_aligned_16(op, "q", q);
  check_aligned_16(op, "k", k);
  check_aligned_16(op, "q_rope", q_rope);
  check_aligned_16(op, "k_rope", k_rope);
  if (fused) {
    check_aligned_16(op, "v", *v);
    check_aligned_16(op, "k_buffer", *k_buffer);
    check_aligned_16(op, "v_buffer", *v_buffer);
  }
  check_in_place(op, "q_rope", q_rope, "q", q);
  check_in_place(op, "k_rope", k_rope, "k", k);
  check_no_internal_overlap(op, "q_rope", q_rope);
  check_no_internal_overlap(op, "k_rope", k_rope);
  if (fused) {
    check_no_internal_overlap(op, "k_buffer", *k_buffer);
    check_no_internal_overlap(op, "v_buffer", *v_buffer);
  }
  if (nnz == 0) return;
  require_kernel(op, "elementwise", kArchs, q);

  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.get_device()).stream();
  if (debug_mode()) {
    debug_check_indices(op, "pos_ids", pos_ids, cos_sin_cache.size(0), "cos_sin_cache rows", stream);
    if (fused) {
      debug_check_indices(op, "kv_cache_loc", *kv_cache_loc, std::min(k_buffer->size(0), v_buffer->size(0)),
                          "k_buffer / v_buffer rows", stream);
    }
  }
  const bool pdl = enable_pdl && pdl_supported(q);
  if constexpr (kBuilt) {
    const cudaError_t err = dispatch_half(op, "q", q.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      RopeParams<T> p{};
      p.q = static_cast<const T*>(q.data_ptr());
      p.k = static_cast<const T*>(k.data_ptr());
      p.q_rope = static_cast<T*>(q_rope.data_ptr());
      p.k_rope = static_cast<T*>(k_rope.data_ptr());
      p.cos_sin_cache = static_cast<const float*>(cos_sin_cache.data_ptr());
      p.pos_ids = pos_ids.data_ptr();
      p.q_stride_n = q.stride(0);
      p.q_stride_h = q.stride(1);
      p.k_stride_n = k.stride(0);
      p.k_stride_h = k.stride(1);
      p.q_rope_stride_n = q_rope.stride(0);
      p.q_rope_stride_h = q_rope.stride(1);
      p.k_rope_stride_n = k_rope.stride(0);
      p.k_rope_stride_h = k_rope.stride(1);
      if (fused) {
        p.v = static_cast<const T*>(v->data_ptr());
        p.k_buffer = static_cast<T*>(k_buffer->data_ptr());
        p.v_buffer = static_cast<T*>(v_buffer->data_ptr());
        p.kv_cache_loc = static_cast<const int64_t*>(kv_cache_loc->data_ptr());
        p.v_stride_n = v->stride(0);
        p.v_stride_h = v->stride(1);
        p.k_buffer_stride_n = k_buffer->stride(0);
        p.k_buffer_stride_h = k_buffer->stride(1);
        p.v_buffer_stride_n = v_buffer->stride(0);
        p.v_buffer_stride_h = v_buffer->stride(1);
        p.k_buffer_rows = k_buffer->size(0);
        p.v_buffer_rows = v_buffer->size(0);
        p.num_v_heads = static_cast<int>(v->size(1));
      }
      p.nnz = nnz;
      p.max_pos = cos_sin_cache.size(0);
      p.num_q_heads = static_cast<int>(q.size(1));
      p.num_k_heads = static_cast<int>(k.size(1));
      p.head_size = static_cast<int>(head_size);
      p.rotary_dim = static_cast<int>(rotary_dim);
      p.pos_ids_int64 = pos_ids.scalar_type() == at::kLong;
      p.interleave = interleave;
      p.enable_pdl = pdl;
      return launch_rope<T>(p, stream);
    });
    // launch_rope's only cudaErrorInvalidConfiguration: its grid of warps (a 32-bit warp index,
    // sized by rope.cu's plan from the tokens, heads and head size) would reach 2^32 - 4 warps.
    // Nothing was launched.
    SGL_CHECK(err != cudaErrorInvalidConfiguration, op, "q.shape[0] (tokens) times the warps per token must stay ",
              "below 2^32 - 4 warps, got ", nnz, " tokens of ", heads, " heads of ", head_size, " elements");
    check_launch(op, err);
  }
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
  m.impl("apply_rope_pos_ids_cos_sin_cache", &apply_rope_pos_ids_cos_sin_cache);
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

  // q_rope, k_rope = RoPE(q, k) with float32 cos/sin rows cos_sin_cache[pos_ids] (q_rope/k_rope
  // may be q/k); with v given, also k_buffer[kv_cache_loc] = k_rope, v_buffer[kv_cache_loc] = v
  m.def(
      "apply_rope_pos_ids_cos_sin_cache(Tensor q, Tensor k, Tensor! q_rope, Tensor! k_rope, "
      "Tensor cos_sin_cache, Tensor pos_ids, bool interleave, bool enable_pdl, Tensor? v, "
      "Tensor!? k_buffer, Tensor!? v_buffer, Tensor? kv_cache_loc) -> ()");
}

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) { register_impls(m); }

TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) { register_impls(m); }

}  // namespace sgl_kernel::elementwise
