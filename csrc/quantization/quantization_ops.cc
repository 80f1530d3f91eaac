// SPDX-License-Identifier: Apache-2.0
// Bindings of the quantization family: schemas, checks, dispatch to the launchers of
// quantization.h. The schemas mark every written tensor (API.md 1.2), output_s included.
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "quantization/quantization.h"
#include "sgl_kernel/check.h"
#include "sgl_kernel/dispatch.h"

namespace sgl_kernel::quantization {

namespace {

constexpr bool kBuilt = SGL_KERNEL_HAS_QUANTIZATION;
constexpr const char* kArchs = SGL_KERNEL_ARCHS_QUANTIZATION;

constexpr float kFp8Max = 448.0f;
constexpr float kInt8Max = 127.0f;

cudaStream_t current_stream(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.get_device()).stream(); }

bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

void check_aligned16(const char* op, const char* name, const at::Tensor& t) {
  SGL_CHECK(aligned16(t), op, name, " must start at a 16-byte aligned address, got data_ptr % 16 = ",
            reinterpret_cast<uintptr_t>(t.data_ptr()) % 16, " (a view at an odd offset; pass a fresh tensor)");
}

// output_q of the group and norm ops: the code type follows its dtype.
QuantCode group_code(const char* op, const at::Tensor& output_q) {
  check_dtype(op, "output_q", output_q, {at::kFloat8_e4m3fn, at::kChar});
  return output_q.scalar_type() == at::kChar ? QuantCode::kInt8Trunc : QuantCode::kFp8;
}

void check_quant_range(const char* op, double eps, double qmin, double qmax) {
  SGL_CHECK(std::isfinite(eps) && eps >= 0, op, "eps must be a finite number >= 0, got ", eps);
  SGL_CHECK(std::isfinite(qmax) && qmax > 0, op, "fp8_max must be a finite positive number, got ", qmax);
  SGL_CHECK(std::isfinite(qmin) && qmin < qmax, op, "fp8_min must be finite and below fp8_max (", qmax, "), got ",
            qmin);
}

// The layout of output_s of a group op for `m` tokens and `groups` groups (the last two
// dims of output_s; a leading expert dim in masked mode), per API.md 2.2.
ScaleOut scale_layout(const char* op, const at::Tensor& output_s, const at::Tensor& ref, int64_t lead_dims, int64_t m,
                      int64_t groups, bool scale_ue8m0, bool allow_row_ue8m0) {
  check_same_device(op, "output_s", output_s, "input", ref);
  check_dtype(op, "output_s", output_s, {at::kFloat, at::kInt});
  check_dim(op, "output_s", output_s, lead_dims + 2);
  check_no_internal_overlap(op, "output_s", output_s);  // e.g. an expert stride of 0 in masked mode
  const bool packed = output_s.scalar_type() == at::kInt;
  const int64_t cols = packed ? (groups + 3) / 4 : groups;
  const int64_t d0 = lead_dims, d1 = lead_dims + 1;
  for (int64_t d = 0; d < lead_dims; ++d) {
    check_size(op, "output_s", output_s, d, ref.size(d), "the expert count of input");
  }
  check_size(op, "output_s", output_s, d0, m, "the token count of input");
  check_size(op, "output_s", output_s, d1, cols,
             packed ? "ceil(groups / 4) (packed UE8M0)" : "groups = hidden / group_size");
  const int64_t s0 = output_s.stride(d0), s1 = output_s.stride(d1);
  // API.md 2.2: column-major when stride(0) < stride(1). A size-1 dimension's stride is
  // arbitrary, so it is not checked; a single packed word per token is column-major.
  const bool column_major = s0 < s1 || (packed && cols == 1);
  ScaleOut so{};
  so.ptr = output_s.data_ptr();
  so.stride_e = lead_dims > 0 ? output_s.stride(0) : 0;
  so.groups = groups;
  if (column_major) {
    SGL_CHECK((s0 == 1 || m == 1) && (s1 >= m || cols == 1), op, "output_s in column-major layout must have stride(",
              d0, ") == 1 and stride(", d1, ") >= the token count ", m, ", got strides ", output_s.strides());
  } else {
    SGL_CHECK((s1 == 1 || cols == 1) && (s0 >= cols || m == 1), op, "output_s in row-major layout must have stride(",
              d1, ") == 1 and stride(", d0, ") >= ", cols, ", got strides ", output_s.strides());
  }
  so.stride_m = s0;
  so.stride_g = s1;
  if (packed) {
    SGL_CHECK(scale_ue8m0, op, "output_s of dtype torch.int32 holds packed UE8M0 scales and needs scale_ue8m0=True");
    SGL_CHECK(column_major, op, "output_s of dtype torch.int32 (packed UE8M0) must be column-major (stride(", d0,
              ") == 1), got strides ", output_s.strides());
    so.packed_ue8m0 = true;
    so.round_ue8m0 = true;
    so.codes_use_rounded = true;
  } else if (scale_ue8m0) {
    SGL_CHECK(!column_major, op,
              "output_s with scale_ue8m0 in column-major layout must be torch.int32 (packed UE8M0), got torch.float32");
    SGL_CHECK(allow_row_ue8m0, op,
              "output_s: row-major scales with scale_ue8m0=True need sgl_per_token_group_quant_8bit_v2 "
              "(enable_v2=True)");
    so.round_ue8m0 = true;
    so.codes_use_rounded = false;  // API.md 2.2: the rounded scale is stored, codes use the exact one
  }
  return so;
}

bool valid_group_size(int64_t g) { return g == 16 || g == 32 || g == 64 || g == 128; }

void group_quant_impl(const char* op, bool v2, const at::Tensor& input, at::Tensor& output_q, at::Tensor& output_s,
                      int64_t group_size, double eps, double fp8_min, double fp8_max, bool scale_ue8m0,
                      bool fuse_silu_and_mul, const std::optional<at::Tensor>& masked_m) {
  check_cuda(op, "input", input);
  if (v2) {
    check_dtype(op, "input", input, {at::kBFloat16, at::kHalf});
  } else {
    check_dtype(op, "input", input, {at::kBFloat16, at::kHalf, at::kFloat});
  }
  const bool masked = masked_m.has_value();
  const int64_t lead = masked ? 1 : 0;
  check_dim(op, "input", input, 2 + lead);
  const int64_t in_k = input.size(-1);
  SGL_CHECK(!fuse_silu_and_mul || in_k % 2 == 0, op, "input.shape[-1] must be even (2 * hidden) with ",
            "fuse_silu_and_mul, got ", in_k);
  const int64_t k = fuse_silu_and_mul ? in_k / 2 : in_k;
  SGL_CHECK(valid_group_size(group_size), op, "group_size must be 16, 32, 64 or 128, got ", group_size);
  SGL_CHECK(k % group_size == 0, op, "group_size must divide the hidden size ", k, ", got ", group_size);
  // launch_group_quant refuses more than 2^32 - 1025 16-byte vectors of output width (its flat
  // kernel's vector index is 32-bit), checked before it picks a kernel; an empty output never
  // reaches it.
  const int64_t rows = k == 0 ? 0 : input.numel() / in_k;
  const int64_t vec = 16 / static_cast<int64_t>(input.element_size());
  const int64_t vectors = rows * (k / vec);
  SGL_CHECK(vectors <= int64_t{0xffffffff} - 1024, op, "input must have at most ", int64_t{0xffffffff} - 1024,
            " 16-byte vectors (rows * hidden / ", vec, "), got ", vectors, " (", rows, " rows of hidden size ", k,
            ")");
  check_contiguous(op, "input", input);
  check_quant_range(op, eps, fp8_min, fp8_max);

  const QuantCode code = group_code(op, output_q);
  check_same_device(op, "output_q", output_q, "input", input);
  check_dim(op, "output_q", output_q, input.dim());
  check_leading_dims(op, "output_q", output_q, "input", input, input.dim() - 1);
  check_size(op, "output_q", output_q, -1, k, fuse_silu_and_mul ? "input.shape[-1] / 2" : "input.shape[-1]");
  check_contiguous(op, "output_q", output_q);
  const int64_t tokens = input.size(lead);
  const ScaleOut so = scale_layout(op, output_s, input, lead, tokens, k / group_size, scale_ue8m0, v2);
  int64_t experts = 1;
  if (masked) {
    const at::Tensor& mm = *masked_m;
    check_same_device(op, "masked_m", mm, "input", input);
    check_dtype(op, "masked_m", mm, {at::kInt});
    check_dim(op, "masked_m", mm, 1);
    check_size(op, "masked_m", mm, 0, input.size(0), "input.shape[0] (experts)");
    check_contiguous(op, "masked_m", mm);
    experts = input.size(0);
  }
  if (output_q.numel() == 0) return;
  check_aligned16(op, "input", input);
  check_aligned16(op, "output_q", output_q);
  require_kernel(op, "quantization", kArchs, input);

  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = current_stream(input);
  const bool pdl = pdl_supported(input);
  if constexpr (kBuilt) {
    const cudaError_t err = dispatch_float(op, "input", input.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      GroupQuantParams<T> p{};
      p.input = static_cast<const T*>(input.data_ptr());
      p.output_q = output_q.data_ptr();
      p.scales = so;
      p.masked_m = masked ? static_cast<const int32_t*>(masked_m->data_ptr()) : nullptr;
      p.rows = experts * tokens;
      p.tokens_per_expert = tokens;
      p.hidden = k;
      p.group_size = static_cast<int>(group_size);
      p.eps = static_cast<float>(eps);
      p.qmin = static_cast<float>(fp8_min);
      p.qmax = static_cast<float>(fp8_max);
      p.fuse_silu_and_mul = fuse_silu_and_mul;
      p.enable_pdl = pdl;
      return launch_group_quant<T>(code, p, stream);
    });
    check_launch(op, err);
  }
}

void sgl_per_token_group_quant_8bit(const at::Tensor& input, at::Tensor& output_q, at::Tensor& output_s,
                                    int64_t group_size, double eps, double fp8_min, double fp8_max,
                                    bool scale_ue8m0) {
  group_quant_impl("sgl_per_token_group_quant_8bit", false, input, output_q, output_s, group_size, eps, fp8_min,
                   fp8_max, scale_ue8m0, false, std::nullopt);
}

void sgl_per_token_group_quant_8bit_v2(const at::Tensor& input, at::Tensor& output_q, at::Tensor& output_s,
                                       int64_t group_size, double eps, double fp8_min, double fp8_max,
                                       bool scale_ue8m0, bool fuse_silu_and_mul,
                                       const std::optional<at::Tensor>& masked_m) {
  group_quant_impl("sgl_per_token_group_quant_8bit_v2", true, input, output_q, output_s, group_size, eps, fp8_min,
                   fp8_max, scale_ue8m0, fuse_silu_and_mul, masked_m);
}

// launch_row_quant and launch_norm_quant refuse 2^31 rows or more (2-D input); an empty input
// never reaches them.
void check_row_limit(const char* op, const at::Tensor& input) {
  SGL_CHECK(input.numel() == 0 || input.size(0) <= INT32_MAX, op, "input.shape[0] (rows) must be at most ",
            INT32_MAX, ", got ", input.size(0));
}

// Per-token ops (one scale per row, no eps floor).
void per_token_impl(const char* op, QuantCode code, const at::Tensor& input, at::Tensor& output_q,
                    at::Tensor& output_s) {
  check_cuda(op, "input", input);
  check_dtype(op, "input", input, {at::kBFloat16, at::kHalf, at::kFloat});
  check_dim(op, "input", input, 2);
  check_last_dim_contiguous(op, "input", input);
  SGL_CHECK(input.size(1) % 4 == 0, op, "input.shape[-1] must be a multiple of 4, got ", input.size(1));
  check_row_limit(op, input);
  check_same_device(op, "output_q", output_q, "input", input);
  if (code == QuantCode::kFp8) {
    check_dtype(op, "output_q", output_q, {at::kFloat8_e4m3fn});
  } else {
    check_dtype(op, "output_q", output_q, {at::kChar});
  }
  check_same_shape(op, "output_q", output_q, "input", input);
  check_contiguous(op, "output_q", output_q);
  check_same_device(op, "output_s", output_s, "input", input);
  check_dtype(op, "output_s", output_s, {at::kFloat});
  SGL_CHECK(output_s.numel() == input.size(0), op, "output_s must have ", input.size(0),
            " elements (one per row of input), got shape ", output_s.sizes());
  check_contiguous(op, "output_s", output_s);
  if (input.numel() == 0) return;
  require_kernel(op, "quantization", kArchs, input);

  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = current_stream(input);
  const bool pdl = pdl_supported(input);
  if constexpr (kBuilt) {
    const cudaError_t err = dispatch_float(op, "input", input.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      RowQuantParams<T> p{};
      p.input = static_cast<const T*>(input.data_ptr());
      p.output_q = output_q.data_ptr();
      p.scales.ptr = output_s.data_ptr();
      p.scales.stride_m = 1;
      p.scales.groups = 1;
      p.rows = input.size(0);
      p.hidden = input.size(1);
      // A single row's stride is irrelevant (and may be anything, e.g. an odd one that would
      // send it to the scalar kernel): use the hidden size, as norm_quant_impl does.
      p.input_stride = input.size(0) <= 1 ? input.size(1) : input.stride(0);
      p.group_size = 0;
      p.eps = 0.0f;
      p.qmax = code == QuantCode::kFp8 ? kFp8Max : kInt8Max;
      p.qmin = code == QuantCode::kFp8 ? -kFp8Max : -128.0f;
      p.enable_pdl = pdl;
      return launch_row_quant<T>(code, p, stream);
    });
    check_launch(op, err);
  }
}

void sgl_per_token_quant_fp8(const at::Tensor& input, at::Tensor& output_q, at::Tensor& output_s) {
  per_token_impl("sgl_per_token_quant_fp8", QuantCode::kFp8, input, output_q, output_s);
}

void sgl_per_token_quant_int8(const at::Tensor& input, at::Tensor& output_q, at::Tensor& output_s) {
  per_token_impl("sgl_per_token_quant_int8", QuantCode::kInt8RoundEven, input, output_q, output_s);
}

void sgl_per_tensor_quant_fp8(const at::Tensor& input, at::Tensor& output_q, at::Tensor& output_s, bool is_static) {
  const char* op = "sgl_per_tensor_quant_fp8";
  check_cuda(op, "input", input);
  check_dtype(op, "input", input, {at::kBFloat16, at::kHalf, at::kFloat});
  check_contiguous(op, "input", input);
  check_same_device(op, "output_q", output_q, "input", input);
  check_dtype(op, "output_q", output_q, {at::kFloat8_e4m3fn});
  check_same_shape(op, "output_q", output_q, "input", input);
  check_contiguous(op, "output_q", output_q);
  check_same_device(op, "output_s", output_s, "input", input);
  check_dtype(op, "output_s", output_s, {at::kFloat});
  SGL_CHECK(output_s.numel() == 1, op, "output_s must have exactly 1 element, got shape ", output_s.sizes());
  if (input.numel() == 0) return;
  require_kernel(op, "quantization", kArchs, input);

  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = current_stream(input);
  const bool pdl = pdl_supported(input);
  if constexpr (kBuilt) {
    const cudaError_t err = dispatch_float(op, "input", input.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      TensorQuantParams<T> p{};
      p.input = static_cast<const T*>(input.data_ptr());
      p.output_q = static_cast<uint8_t*>(output_q.data_ptr());
      p.scale = static_cast<float*>(output_s.data_ptr());
      p.numel = input.numel();
      p.dynamic = !is_static;
      p.enable_pdl = pdl;
      return launch_per_tensor_quant<T>(p, stream);
    });
    check_launch(op, err);
  }
}

// fused_rmsnorm_quant (residual == nullptr) / fused_add_rmsnorm_quant.
void norm_quant_impl(const char* op, const at::Tensor& input, at::Tensor* residual, at::Tensor& output_q,
                     at::Tensor& output_s, const at::Tensor& weight, int64_t group_size, double rms_eps,
                     double quant_eps, double fp8_min, double fp8_max, bool scale_ue8m0, bool enable_pdl) {
  check_cuda(op, "input", input);
  check_dtype(op, "input", input, {at::kBFloat16, at::kHalf, at::kFloat});
  check_dim(op, "input", input, 2);
  check_last_dim_contiguous(op, "input", input);
  const int64_t hidden = input.size(1);
  const int64_t elem = input.element_size();
  check_row_limit(op, input);
  if (residual != nullptr) {
    check_same_device(op, "residual", *residual, "input", input);
    check_same_dtype(op, "residual", *residual, "input", input);
    check_same_shape(op, "residual", *residual, "input", input);
    check_last_dim_contiguous(op, "residual", *residual);
  }
  check_same_device(op, "weight", weight, "input", input);
  check_same_dtype(op, "weight", weight, "input", input);
  check_dim(op, "weight", weight, 1);
  check_size(op, "weight", weight, 0, hidden, "input.shape[-1]");
  check_contiguous(op, "weight", weight);
  const int64_t max_group = elem == 4 ? 128 : 256;
  SGL_CHECK(group_size >= 16 && group_size <= max_group && (group_size & (group_size - 1)) == 0, op,
            "group_size must be a power of two from 16 to ", max_group, " for ", dtype_name(input.scalar_type()),
            " input, got ", group_size);
  SGL_CHECK(hidden % group_size == 0, op, "group_size must divide the hidden size ", hidden, ", got ", group_size);
  SGL_CHECK(std::isfinite(rms_eps) && rms_eps >= 0, op, "rms_eps must be a finite number >= 0, got ", rms_eps);
  check_quant_range(op, quant_eps, fp8_min, fp8_max);
  const QuantCode code = group_code(op, output_q);
  check_same_device(op, "output_q", output_q, "input", input);
  check_same_shape(op, "output_q", output_q, "input", input);
  check_contiguous(op, "output_q", output_q);
  const ScaleOut so = scale_layout(op, output_s, input, 0, input.size(0), hidden / group_size, scale_ue8m0, false);
  if (residual != nullptr) check_no_internal_overlap(op, "residual", *residual);  // updated in place
  if (input.numel() == 0) return;
  require_kernel(op, "quantization", kArchs, input);

  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = current_stream(input);
  const bool pdl = enable_pdl && pdl_supported(input);
  if constexpr (kBuilt) {
    const cudaError_t err = dispatch_float(op, "input", input.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      RowQuantParams<T> p{};
      p.input = static_cast<const T*>(input.data_ptr());
      p.residual = residual != nullptr ? static_cast<T*>(residual->data_ptr()) : nullptr;
      p.weight = static_cast<const T*>(weight.data_ptr());
      p.output_q = output_q.data_ptr();
      p.scales = so;
      p.rows = input.size(0);
      p.hidden = hidden;
      // A single row's stride is irrelevant (and may be anything): use the hidden size.
      p.input_stride = input.size(0) <= 1 ? hidden : input.stride(0);
      p.residual_stride = residual == nullptr ? 0 : (residual->size(0) <= 1 ? hidden : residual->stride(0));
      p.group_size = static_cast<int>(group_size);
      p.rms_eps = static_cast<float>(rms_eps);
      p.eps = static_cast<float>(quant_eps);
      p.qmin = static_cast<float>(fp8_min);
      p.qmax = static_cast<float>(fp8_max);
      p.enable_pdl = pdl;
      return launch_norm_quant<T>(code, p, stream);
    });
    check_launch(op, err);
  }
}

void fused_rmsnorm_quant(at::Tensor& input, at::Tensor& output_q, at::Tensor& output_s, const at::Tensor& weight,
                         int64_t group_size, double rms_eps, double quant_eps, double fp8_min, double fp8_max,
                         bool scale_ue8m0, bool enable_pdl) {
  norm_quant_impl("fused_rmsnorm_quant", input, nullptr, output_q, output_s, weight, group_size, rms_eps, quant_eps,
                  fp8_min, fp8_max, scale_ue8m0, enable_pdl);
}

void fused_add_rmsnorm_quant(at::Tensor& input, at::Tensor& residual, at::Tensor& output_q, at::Tensor& output_s,
                             const at::Tensor& weight, int64_t group_size, double rms_eps, double quant_eps,
                             double fp8_min, double fp8_max, bool scale_ue8m0, bool enable_pdl) {
  norm_quant_impl("fused_add_rmsnorm_quant", input, &residual, output_q, output_s, weight, group_size, rms_eps,
                  quant_eps, fp8_min, fp8_max, scale_ue8m0, enable_pdl);
}

void register_impls(torch::Library& m) {
  m.impl("sgl_per_token_quant_fp8", &sgl_per_token_quant_fp8);
  m.impl("sgl_per_token_quant_int8", &sgl_per_token_quant_int8);
  m.impl("sgl_per_tensor_quant_fp8", &sgl_per_tensor_quant_fp8);
  m.impl("sgl_per_token_group_quant_8bit", &sgl_per_token_group_quant_8bit);
  m.impl("sgl_per_token_group_quant_8bit_v2", &sgl_per_token_group_quant_8bit_v2);
  m.impl("fused_rmsnorm_quant", &fused_rmsnorm_quant);
  m.impl("fused_add_rmsnorm_quant", &fused_add_rmsnorm_quant);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  // Row-wise dynamic fp8: output_s[m] = max|x[m]| / 448.
  m.def("sgl_per_token_quant_fp8(Tensor input, Tensor! output_q, Tensor! output_s) -> ()");
  // Row-wise int8 (legacy): output_s[m] = max|x[m]| / 127, codes rounded half to even.
  m.def("sgl_per_token_quant_int8(Tensor input, Tensor! output_q, Tensor! output_s) -> ()");
  // One fp8 scale for the tensor: computed (dynamic) or read (static).
  m.def("sgl_per_tensor_quant_fp8(Tensor input, Tensor! output_q, Tensor! output_s, bool is_static) -> ()");
  // Per-token-group 8-bit (fp8 or int8 by output_q's dtype), every scale layout.
  m.def(
      "sgl_per_token_group_quant_8bit(Tensor input, Tensor! output_q, Tensor! output_s, int group_size, float eps, "
      "float fp8_min, float fp8_max, bool scale_ue8m0) -> ()");
  // The same plus the fused SiLU-and-mul input and the masked 3-D (expert) input.
  m.def(
      "sgl_per_token_group_quant_8bit_v2(Tensor input, Tensor! output_q, Tensor! output_s, int group_size, "
      "float eps, float fp8_min, float fp8_max, bool scale_ue8m0, bool fuse_silu_and_mul, Tensor? masked_m) -> ()");
  // RMSNorm then per-token-group quantization, one pass.
  m.def(
      "fused_rmsnorm_quant(Tensor! input, Tensor! output_q, Tensor! output_s, Tensor weight, int group_size, "
      "float rms_eps, float quant_eps, float fp8_min, float fp8_max, bool scale_ue8m0, bool enable_pdl) -> ()");
  // residual += input, then RMSNorm of residual and per-token-group quantization, one pass.
  m.def(
      "fused_add_rmsnorm_quant(Tensor! input, Tensor! residual, Tensor! output_q, Tensor! output_s, "
      "Tensor weight, int group_size, float rms_eps, float quant_eps, float fp8_min, float fp8_max, "
      "bool scale_ue8m0, bool enable_pdl) -> ()");
}

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) { register_impls(m); }

TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) { register_impls(m); }

}  // namespace sgl_kernel::quantization
