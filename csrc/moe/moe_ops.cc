// SPDX-License-Identifier: Apache-2.0
// Bindings of the MoE family (API.md 2.4): routing (topk_softmax, topk_sigmoid, moe_fused_gate,
// kimi_k2_moe_fused_gate), the block layout of the fused MoE GEMMs (moe_align_block_size) and the
// sum of a token's expert outputs (moe_sum, moe_sum_reduce). Checks, then the launchers of moe.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <vector>

#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "moe/moe.h"
#include "sgl_kernel/check.h"

namespace sgl_kernel::moe {

namespace {

constexpr bool kBuilt = SGL_KERNEL_HAS_MOE;
constexpr const char* kArchs = SGL_KERNEL_ARCHS_MOE;

Dtype float_dtype(const char* op, const char* name, const at::Tensor& t) {
  check_dtype(op, name, t, {at::kFloat, at::kHalf, at::kBFloat16});
  switch (t.scalar_type()) {
    case at::kHalf: return Dtype::kFloat16;
    case at::kBFloat16: return Dtype::kBFloat16;
    default: return Dtype::kFloat32;
  }
}

cudaStream_t current_stream(const at::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.get_device()).stream();
}

// ---------------------------------------------------------------------------------------
// topk_softmax / topk_sigmoid

void topk_gating(const char* op, at::Tensor& topk_weights, at::Tensor& topk_indices, const at::Tensor& gating,
                 bool renormalize, double softcap, const std::optional<at::Tensor>& bias, bool sigmoid) {
  check_cuda(op, "gating_output", gating);
  check_same_device(op, "topk_weights", topk_weights, "gating_output", gating);
  check_same_device(op, "topk_indices", topk_indices, "gating_output", gating);
  const Dtype dtype = float_dtype(op, "gating_output", gating);
  check_dtype(op, "topk_weights", topk_weights, {at::kFloat});
  check_dtype(op, "topk_indices", topk_indices, {at::kInt, at::kLong});
  check_dim(op, "gating_output", gating, 2);
  check_dim(op, "topk_weights", topk_weights, 2);
  check_dim(op, "topk_indices", topk_indices, 2);
  check_last_dim_contiguous(op, "gating_output", gating);
  check_last_dim_contiguous(op, "topk_weights", topk_weights);
  check_last_dim_contiguous(op, "topk_indices", topk_indices);
  const int64_t tokens = gating.size(0);
  const int64_t experts = gating.size(1);
  const int64_t k = topk_weights.size(1);
  check_size(op, "topk_weights", topk_weights, 0, tokens, "gating_output.shape[0]");
  check_same_shape(op, "topk_indices", topk_indices, "topk_weights", topk_weights);
  SGL_CHECK(experts >= 1 && experts <= kMaxGatingExperts, op, "gating_output.shape[1] (experts) must be in [1, ",
            kMaxGatingExperts, "], got ", experts);
  SGL_CHECK(k >= 1 && k <= experts && k <= kMaxGatingK, op, "k (topk_weights.shape[1]) must be in [1, min(",
            "gating_output.shape[1] = ", experts, ", ", kMaxGatingK, ")], got ", k);
  if (!sigmoid) {
    SGL_CHECK(std::isfinite(softcap) && softcap >= 0.0, op, "moe_softcapping must be finite and >= 0, got ",
              softcap);
  }
  if (bias.has_value()) {
    check_same_device(op, "correction_bias", *bias, "gating_output", gating);
    check_dtype(op, "correction_bias", *bias, {at::kFloat});
    check_dim(op, "correction_bias", *bias, 1);
    check_size(op, "correction_bias", *bias, 0, experts, "gating_output.shape[1]");
    check_contiguous(op, "correction_bias", *bias);
  }
  check_no_internal_overlap(op, "topk_weights", topk_weights);
  check_no_internal_overlap(op, "topk_indices", topk_indices);
  if (tokens == 0) return;
  require_kernel(op, "moe", kArchs, gating);

  const c10::cuda::CUDAGuard guard(gating.device());
  if constexpr (kBuilt) {
    TopkGatingParams p{};
    p.weights = topk_weights.data_ptr<float>();
    p.ids = topk_indices.data_ptr();
    p.gating = gating.data_ptr();
    p.bias = bias.has_value() ? bias->data_ptr<float>() : nullptr;
    p.num_tokens = tokens;
    p.gating_stride = gating.stride(0);
    p.weights_stride = topk_weights.stride(0);
    p.ids_stride = topk_indices.stride(0);
    p.num_experts = static_cast<int>(experts);
    p.k = static_cast<int>(k);
    p.softcap = sigmoid ? 0.0f : static_cast<float>(softcap);
    p.dtype = dtype;
    p.sigmoid = sigmoid;
    p.renormalize = renormalize;
    p.ids_int64 = topk_indices.scalar_type() == at::kLong;
    p.enable_pdl = pdl_supported(gating);
    check_launch(op, launch_topk_gating(p, current_stream(gating)));
  }
}

void topk_softmax(at::Tensor& topk_weights, at::Tensor& topk_indices, const at::Tensor& gating_output,
                  bool renormalize, double moe_softcapping, const std::optional<at::Tensor>& correction_bias) {
  topk_gating("topk_softmax", topk_weights, topk_indices, gating_output, renormalize, moe_softcapping,
              correction_bias, false);
}

void topk_sigmoid(at::Tensor& topk_weights, at::Tensor& topk_indices, const at::Tensor& gating_output,
                  bool renormalize, const std::optional<at::Tensor>& correction_bias) {
  topk_gating("topk_sigmoid", topk_weights, topk_indices, gating_output, renormalize, 0.0, correction_bias, true);
}

// ---------------------------------------------------------------------------------------
// moe_fused_gate / kimi_k2_moe_fused_gate

std::vector<at::Tensor> fused_gate(const char* op, const at::Tensor& input, const at::Tensor& bias, int64_t groups,
                                   int64_t topk_group, int64_t topk, int64_t num_shared, double factor,
                                   bool renormalize, bool scale_output) {
  check_cuda(op, "input", input);
  check_same_device(op, "bias", bias, "input", input);
  const Dtype dtype = float_dtype(op, "input", input);
  check_same_dtype(op, "bias", bias, "input", input);
  check_dim(op, "input", input, 2);
  check_dim(op, "bias", bias, 1);
  check_contiguous(op, "input", input);
  check_contiguous(op, "bias", bias);
  const int64_t tokens = input.size(0);
  const int64_t experts = input.size(1);
  check_size(op, "bias", bias, 0, experts, "input.shape[1]");
  SGL_CHECK(experts >= 1 && experts <= kMaxFusedGateExperts, op, "input.shape[1] (experts) must be in [1, ",
            kMaxFusedGateExperts, "], got ", experts);
  SGL_CHECK(num_shared >= 0, op, "num_fused_shared_experts must be >= 0, got ", num_shared);
  SGL_CHECK(topk >= 1 && topk <= kMaxFusedGateTopk, op, "topk must be in [1, ", kMaxFusedGateTopk, "], got ", topk);
  SGL_CHECK(topk > num_shared, op, "topk (", topk, ") must exceed num_fused_shared_experts (", num_shared,
            "): at least one routed expert is chosen");
  SGL_CHECK(groups >= 1 && experts % groups == 0, op, "num_expert_group must be >= 1 and divide the ", experts,
            " experts, got ", groups);
  SGL_CHECK(topk_group >= 1 && topk_group <= groups, op, "topk_group must be in [1, num_expert_group = ", groups,
            "], got ", topk_group);
  const int64_t per_group = experts / groups;
  SGL_CHECK(topk - num_shared <= topk_group * per_group, op, "topk - num_fused_shared_experts (",
            topk - num_shared, ") must not exceed the experts of topk_group groups (", topk_group * per_group, ")");
  const auto options = input.options();
  at::Tensor weights = at::empty({tokens, topk}, options.dtype(at::kFloat));
  at::Tensor ids = at::empty({tokens, topk}, options.dtype(at::kInt));
  if (tokens == 0) return {weights, ids};
  require_kernel(op, "moe", kArchs, input);

  const c10::cuda::CUDAGuard guard(input.device());
  if constexpr (kBuilt) {
    FusedGateParams p{};
    p.weights = weights.data_ptr<float>();
    p.ids = ids.data_ptr<int32_t>();
    p.input = input.data_ptr();
    p.bias = bias.data_ptr();
    p.num_tokens = tokens;
    p.num_experts = static_cast<int>(experts);
    p.num_groups = static_cast<int>(groups);
    p.topk_group = static_cast<int>(topk_group);
    p.topk = static_cast<int>(topk);
    p.num_shared = static_cast<int>(num_shared);
    p.routed_scaling_factor = static_cast<float>(factor);
    p.dtype = dtype;
    p.renormalize = renormalize;
    p.scale_output = scale_output;
    p.enable_pdl = pdl_supported(input);
    check_launch(op, launch_fused_gate(p, current_stream(input)));
  }
  return {weights, ids};
}

std::vector<at::Tensor> moe_fused_gate(const at::Tensor& input, const at::Tensor& bias, int64_t num_expert_group,
                                       int64_t topk_group, int64_t topk, int64_t num_fused_shared_experts,
                                       double routed_scaling_factor, bool apply_routed_scaling_factor_on_output) {
  constexpr const char* op = "moe_fused_gate";
  check_cuda(op, "input", input);
  check_dim(op, "input", input, 2);
  const int64_t experts = input.size(1);
  SGL_CHECK(experts > 0 && (experts & (experts - 1)) == 0, op,
            "input.shape[1] (the number of experts) must be a power of two, got shape ", input.sizes());
  // One group (no group step) may hold all the experts; real groups hold at most 32 (API.md 2.4).
  SGL_CHECK(num_expert_group >= 1 && experts % num_expert_group == 0 &&
                (num_expert_group == 1 || experts / num_expert_group <= 32),
            op, "num_expert_group must divide the ", experts, " experts into groups of at most 32 (or be 1), got ",
            num_expert_group);
  return fused_gate(op, input, bias, num_expert_group, topk_group, topk, num_fused_shared_experts,
                    routed_scaling_factor, true, apply_routed_scaling_factor_on_output);
}

std::vector<at::Tensor> kimi_k2_moe_fused_gate(const at::Tensor& input, const at::Tensor& bias, int64_t topk,
                                               bool renormalize, double routed_scaling_factor,
                                               bool apply_routed_scaling_factor_on_output) {
  return fused_gate("kimi_k2_moe_fused_gate", input, bias, 1, 1, topk, 0, routed_scaling_factor, renormalize,
                    apply_routed_scaling_factor_on_output);
}

// ---------------------------------------------------------------------------------------
// moe_align_block_size

void check_int32_vector(const char* op, const char* name, const at::Tensor& t, const at::Tensor& ref) {
  check_same_device(op, name, t, "topk_ids", ref);
  check_dtype(op, name, t, {at::kInt});
  check_dim(op, name, t, 1);
  check_contiguous(op, name, t);
}

void moe_align_block_size(const at::Tensor& topk_ids, int64_t num_experts, int64_t block_size,
                          at::Tensor& sorted_token_ids, at::Tensor& experts_ids, at::Tensor& num_tokens_post_pad,
                          at::Tensor& cumsum_buffer, bool pad_sorted_token_ids) {
  constexpr const char* op = "moe_align_block_size";
  check_cuda(op, "topk_ids", topk_ids);
  check_dtype(op, "topk_ids", topk_ids, {at::kInt, at::kLong});
  check_contiguous(op, "topk_ids", topk_ids);
  check_int32_vector(op, "sorted_token_ids", sorted_token_ids, topk_ids);
  check_int32_vector(op, "experts_ids", experts_ids, topk_ids);
  check_int32_vector(op, "num_tokens_post_pad", num_tokens_post_pad, topk_ids);
  check_int32_vector(op, "cumsum_buffer", cumsum_buffer, topk_ids);
  SGL_CHECK(num_experts >= 1 && num_experts <= kMaxAlignBuckets, op, "num_experts must be in [1, ",
            kMaxAlignBuckets, "] (the expert count + 1), got ", num_experts);
  SGL_CHECK(block_size >= 1 && block_size <= (1 << 20), op, "block_size must be in [1, 2^20], got ", block_size);
  const int64_t n = topk_ids.numel();
  // The padded total is at most n + min(n, num_experts) * (block_size - 1): only buckets with
  // entries get padding. SGLang sizes its decode buffers to exactly that when n < num_experts.
  const int64_t need = n + std::min(n, num_experts) * (block_size - 1);
  SGL_CHECK(need < (int64_t{1} << 31), op, "topk_ids has ", n, " entries, too many for int32 token ids (the padded ",
            "total may reach ", need, ")");
  SGL_CHECK(sorted_token_ids.numel() >= need, op, "sorted_token_ids must hold at least topk_ids.numel() + ",
            "min(topk_ids.numel(), num_experts) * (block_size - 1) = ", need, " entries, got ",
            sorted_token_ids.numel());
  const int64_t need_blocks = (need + block_size - 1) / block_size;
  SGL_CHECK(experts_ids.numel() >= need_blocks, op, "experts_ids must hold at least ceil(", need,
            " / block_size) = ", need_blocks, " entries, got ", experts_ids.numel());
  check_size(op, "num_tokens_post_pad", num_tokens_post_pad, 0, 1, "1");
  SGL_CHECK(cumsum_buffer.numel() >= num_experts + 1, op, "cumsum_buffer must hold at least num_experts + 1 = ",
            num_experts + 1, " entries, got ", cumsum_buffer.numel());
  require_kernel(op, "moe", kArchs, topk_ids);

  const c10::cuda::CUDAGuard guard(topk_ids.device());
  const cudaStream_t stream = current_stream(topk_ids);
  if constexpr (kBuilt) {
    const bool debug = debug_mode();
    at::Tensor flag;
    if (debug) flag = at::zeros({1}, topk_ids.options().dtype(at::kInt));
    MoeAlignParams p{};
    p.topk_ids = topk_ids.data_ptr();
    p.sorted_token_ids = sorted_token_ids.data_ptr<int32_t>();
    p.expert_ids = experts_ids.data_ptr<int32_t>();
    p.num_tokens_post_pad = num_tokens_post_pad.data_ptr<int32_t>();
    p.cumsum = cumsum_buffer.data_ptr<int32_t>();
    p.bad_flag = debug ? flag.data_ptr<int32_t>() : nullptr;
    p.numel = n;
    p.sorted_len = sorted_token_ids.numel();
    p.expert_ids_len = experts_ids.numel();
    p.num_buckets = static_cast<int>(num_experts);
    p.block_size = static_cast<int>(block_size);
    p.ids_int64 = topk_ids.scalar_type() == at::kLong;
    p.pad_sorted = pad_sorted_token_ids;
    p.enable_pdl = pdl_supported(topk_ids);
    check_launch(op, launch_moe_align(p, stream));
    if (debug) {
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(stream, &status) == cudaSuccess && status == cudaStreamCaptureStatusNone) {
        SGL_CHECK(flag.item<int32_t>() == 0, op, "topk_ids holds an expert id outside [-1, num_experts - 1 = ",
                  num_experts - 1, ") (SGL_KERNEL_DEBUG=1)");
      }
      cudaGetLastError();
    }
  }
}

// ---------------------------------------------------------------------------------------
// moe_sum / moe_sum_reduce

void moe_sum_impl(const char* op, const at::Tensor& input, at::Tensor& output, bool apply_scale, double scale) {
  check_cuda(op, "input", input);
  check_same_device(op, "output", output, "input", input);
  const Dtype dtype = float_dtype(op, "input", input);
  check_same_dtype(op, "output", output, "input", input);
  check_dim(op, "input", input, 3);
  check_dim(op, "output", output, 2);
  check_last_dim_contiguous(op, "input", input);
  check_last_dim_contiguous(op, "output", output);
  check_size(op, "output", output, 0, input.size(0), "input.shape[0]");
  check_size(op, "output", output, 1, input.size(2), "input.shape[2]");
  check_no_internal_overlap(op, "output", output);
  SGL_CHECK(input.size(1) >= 1, op, "input.shape[1] (topk) must be >= 1, got shape ", input.sizes());
  SGL_CHECK(input.size(1) <= (1 << 16), op, "input.shape[1] (topk) must be at most 65536, got ", input.size(1));
  if (output.numel() == 0) return;
  require_kernel(op, "moe", kArchs, input);

  const c10::cuda::CUDAGuard guard(input.device());
  if constexpr (kBuilt) {
    MoeSumParams p{};
    p.out = output.data_ptr();
    p.input = input.data_ptr();
    p.num_tokens = input.size(0);
    p.hidden = input.size(2);
    p.in_token_stride = input.stride(0);
    p.in_k_stride = input.stride(1);
    p.out_stride = output.stride(0);
    p.topk = static_cast<int>(input.size(1));
    p.scale = static_cast<float>(scale);
    p.apply_scale = apply_scale;
    p.dtype = dtype;
    p.enable_pdl = pdl_supported(input);
    check_launch(op, launch_moe_sum(p, current_stream(input)));
  }
}

void moe_sum(const at::Tensor& input, at::Tensor& output) { moe_sum_impl("moe_sum", input, output, false, 1.0); }

void moe_sum_reduce(const at::Tensor& input, at::Tensor& output, double routed_scaling_factor) {
  moe_sum_impl("moe_sum_reduce", input, output, true, routed_scaling_factor);
}

// CUDA and CPU: CPU tensors get the op's own "must be a CUDA tensor" message.
void register_impls(torch::Library& m) {
  m.impl("topk_softmax", &topk_softmax);
  m.impl("topk_sigmoid", &topk_sigmoid);
  m.impl("moe_fused_gate", &moe_fused_gate);
  m.impl("kimi_k2_moe_fused_gate", &kimi_k2_moe_fused_gate);
  m.impl("moe_align_block_size", &moe_align_block_size);
  m.impl("moe_sum", &moe_sum);
  m.impl("moe_sum_reduce", &moe_sum_reduce);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  // top-k experts of softmax(gating) per token: weights and ids written
  m.def("topk_softmax(Tensor! topk_weights, Tensor! topk_indices, Tensor gating_output, bool renormalize, "
        "float moe_softcapping, Tensor? correction_bias) -> ()");
  // top-k experts of sigmoid(gating) (+ bias for the selection) per token
  m.def("topk_sigmoid(Tensor! topk_weights, Tensor! topk_indices, Tensor gating_output, bool renormalize, "
        "Tensor? correction_bias) -> ()");
  // DeepSeek-V3 grouped routing: [weights fp32 [T, topk], ids int32 [T, topk]]
  m.def("moe_fused_gate(Tensor input, Tensor bias, int num_expert_group, int topk_group, int topk, "
        "int num_fused_shared_experts, float routed_scaling_factor, bool apply_routed_scaling_factor_on_output) "
        "-> Tensor[]");
  // Kimi-K2 single-group routing: [weights fp32 [T, topk], ids int32 [T, topk]]
  m.def("kimi_k2_moe_fused_gate(Tensor input, Tensor bias, int topk, bool renormalize, "
        "float routed_scaling_factor, bool apply_routed_scaling_factor_on_output) -> Tensor[]");
  // token -> expert blocks of block_size rows for the fused MoE GEMMs (all four outputs written)
  m.def("moe_align_block_size(Tensor topk_ids, int num_experts, int block_size, Tensor! sorted_token_ids, "
        "Tensor! experts_ids, Tensor! num_tokens_post_pad, Tensor! cumsum_buffer, bool pad_sorted_token_ids) -> ()");
  // output[t] = sum_j input[t, j]
  m.def("moe_sum(Tensor input, Tensor! output) -> ()");
  // output[t] = routed_scaling_factor * sum_j input[t, j] (sgl-kernel's op; written output marked)
  m.def("moe_sum_reduce(Tensor input, Tensor! output, float routed_scaling_factor) -> ()");
}

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) { register_impls(m); }

TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) { register_impls(m); }

}  // namespace sgl_kernel::moe
