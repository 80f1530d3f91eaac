// SPDX-License-Identifier: Apache-2.0
// Bindings of the MoE family (API.md 2.4): routing (topk_softmax, topk_sigmoid, moe_fused_gate,
// kimi_k2_moe_fused_gate), the block layout of the fused MoE GEMMs (moe_align_block_size) and the
// sum of a token's expert outputs (moe_sum, moe_sum_reduce). Checks, then the launchers of moe.h.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>
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
    if (debug && host_sync_allowed(stream)) {
      SGL_CHECK(flag.item<int32_t>() == 0, op, "topk_ids holds an expert id outside [-1, num_experts - 1 = ",
                num_experts - 1, ") (SGL_KERNEL_DEBUG=1)");
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

// ---------------------------------------------------------------------------------------
// prepare_moe_input

void prepare_moe_input(const at::Tensor& topk_ids, at::Tensor& expert_offsets,
                       const std::optional<at::Tensor>& blockscale_offsets, at::Tensor& problem_sizes1,
                       at::Tensor& problem_sizes2, at::Tensor& input_permutation, at::Tensor& output_permutation,
                       int64_t num_experts, int64_t n, int64_t k) {
  constexpr const char* op = "prepare_moe_input";
  check_cuda(op, "topk_ids", topk_ids);
  check_dtype(op, "topk_ids", topk_ids, {at::kInt});
  check_dim(op, "topk_ids", topk_ids, 2);
  check_contiguous(op, "topk_ids", topk_ids);
  SGL_CHECK(num_experts >= 1 && num_experts <= kMaxPrepareExperts, op, "num_experts must be in [1, ",
            kMaxPrepareExperts, "], got ", num_experts);
  SGL_CHECK(n >= 0 && n <= INT32_MAX / 2, op, "n must be in [0, 2^30), got ", n);
  SGL_CHECK(k >= 0 && k <= INT32_MAX, op, "k must be in [0, 2^31), got ", k);
  const int64_t numel = topk_ids.numel();
  SGL_CHECK(numel < (int64_t{1} << 31), op, "topk_ids has ", numel, " entries, more than int32 slots can address");
  SGL_CHECK(topk_ids.size(1) >= 1, op, "topk_ids.shape[1] (topk) must be >= 1, got shape ", topk_ids.sizes());
  check_int32_vector(op, "expert_offsets", expert_offsets, topk_ids);
  check_size(op, "expert_offsets", expert_offsets, 0, num_experts + 1, "num_experts + 1");
  if (blockscale_offsets.has_value()) {
    check_int32_vector(op, "blockscale_offsets", *blockscale_offsets, topk_ids);
    check_size(op, "blockscale_offsets", *blockscale_offsets, 0, num_experts + 1, "num_experts + 1");
    SGL_CHECK(numel + num_experts * 127 < (int64_t{1} << 31), op, "blockscale offsets of ", numel,
              " entries over ", num_experts, " experts may exceed int32");
  }
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"problem_sizes1", &problem_sizes1},
                                {"problem_sizes2", &problem_sizes2}}) {
    check_same_device(op, name, *t, "topk_ids", topk_ids);
    check_dtype(op, name, *t, {at::kInt});
    check_dim(op, name, *t, 2);
    check_contiguous(op, name, *t);
    check_size(op, name, *t, 0, num_experts, "num_experts");
    check_size(op, name, *t, 1, 3, "3");
  }
  check_int32_vector(op, "input_permutation", input_permutation, topk_ids);
  check_int32_vector(op, "output_permutation", output_permutation, topk_ids);
  check_size(op, "input_permutation", input_permutation, 0, numel, "topk_ids.numel()");
  check_size(op, "output_permutation", output_permutation, 0, numel, "topk_ids.numel()");
  // Large inputs keep per-chunk counts in output_permutation between launches.
  check_no_overlap(op, "output_permutation", output_permutation, "topk_ids", topk_ids);
  check_no_overlap(op, "input_permutation", input_permutation, "topk_ids", topk_ids);
  require_kernel(op, "moe", kArchs, topk_ids);

  const c10::cuda::CUDAGuard guard(topk_ids.device());
  const cudaStream_t stream = current_stream(topk_ids);
  if constexpr (kBuilt) {
    const bool debug = debug_mode();
    at::Tensor flag;
    if (debug) flag = at::zeros({1}, topk_ids.options());
    PrepareMoeInputParams p{};
    p.topk_ids = topk_ids.data_ptr<int32_t>();
    p.expert_offsets = expert_offsets.data_ptr<int32_t>();
    p.blockscale_offsets = blockscale_offsets.has_value() ? blockscale_offsets->data_ptr<int32_t>() : nullptr;
    p.problem_sizes1 = problem_sizes1.data_ptr<int32_t>();
    p.problem_sizes2 = problem_sizes2.data_ptr<int32_t>();
    p.input_permutation = input_permutation.data_ptr<int32_t>();
    p.output_permutation = output_permutation.data_ptr<int32_t>();
    p.bad_flag = debug ? flag.data_ptr<int32_t>() : nullptr;
    p.numel = numel;
    p.topk = static_cast<int>(topk_ids.size(1));
    p.num_experts = static_cast<int>(num_experts);
    p.n = static_cast<int>(n);
    p.k = static_cast<int>(k);
    p.enable_pdl = pdl_supported(topk_ids);
    check_launch(op, launch_prepare_moe_input(p, stream));
    if (debug && host_sync_allowed(stream)) {
      SGL_CHECK(flag.item<int32_t>() == 0, op, "topk_ids holds an expert id outside [0, num_experts = ",
                num_experts, ") (SGL_KERNEL_DEBUG=1; without it such entries are dropped)");
    }
  }
}

// ---------------------------------------------------------------------------------------
// apply_shuffle_mul_sum

void apply_shuffle_mul_sum(const at::Tensor& input, at::Tensor& output, const at::Tensor& permutation,
                           const std::optional<at::Tensor>& factors) {
  constexpr const char* op = "apply_shuffle_mul_sum";
  check_cuda(op, "input", input);
  check_same_device(op, "output", output, "input", input);
  check_same_device(op, "permutation", permutation, "input", input);
  check_dtype(op, "input", input, {at::kHalf, at::kBFloat16});
  check_same_dtype(op, "output", output, "input", input);
  check_dim(op, "input", input, 2);
  check_dim(op, "output", output, 2);
  check_contiguous(op, "input", input);
  check_contiguous(op, "output", output);
  check_size(op, "output", output, 1, input.size(1), "input.shape[1]");
  check_no_internal_overlap(op, "output", output);
  check_dtype(op, "permutation", permutation, {at::kInt});
  check_dim(op, "permutation", permutation, 1);
  check_contiguous(op, "permutation", permutation);
  check_no_overlap(op, "output", output, "input", input);
  check_no_overlap(op, "output", output, "permutation", permutation);
  SGL_CHECK(input.size(1) * input.element_size() <= UINT32_MAX, op, "input.shape[1] (", input.size(1),
            ") makes rows of 4 GiB or more; not supported");
  const int64_t m = output.size(0);
  const int64_t entries = permutation.numel();
  SGL_CHECK(m == 0 ? entries == 0 : (entries >= m && entries % m == 0), op, "permutation.numel() (", entries,
            ") must be a positive multiple of output.shape[0] (", m, "): m * topk");
  const int64_t topk = m == 0 ? 1 : entries / m;
  SGL_CHECK(topk <= (1 << 16), op, "topk = permutation.numel() / output.shape[0] must be at most 65536, got ", topk);
  if (factors.has_value()) {
    check_same_device(op, "factors", *factors, "input", input);
    check_same_dtype(op, "factors", *factors, "output", output);
    check_contiguous(op, "factors", *factors);
    SGL_CHECK(factors->numel() == entries && (factors->dim() == 1 || (factors->dim() == 2 && factors->size(0) == m)),
              op, "factors must have shape [m * topk] = [", entries, "] or [m, topk] = [", m, ", ", topk,
              "], got ", factors->sizes());
    check_no_overlap(op, "output", output, "factors", *factors);
  }
  if (output.numel() == 0) return;
  require_kernel(op, "moe", kArchs, input);

  const c10::cuda::CUDAGuard guard(input.device());
  if constexpr (kBuilt) {
    ShuffleMulSumParams p{};
    p.out = output.data_ptr();
    p.input = input.data_ptr();
    p.permutation = permutation.data_ptr<int32_t>();
    p.factors = factors.has_value() ? factors->data_ptr() : nullptr;
    p.m = m;
    p.input_rows = input.size(0);
    p.hidden = input.size(1);
    p.topk = static_cast<int>(topk);
    p.dtype = input.scalar_type() == at::kHalf ? Dtype::kFloat16 : Dtype::kBFloat16;
    p.enable_pdl = pdl_supported(input);
    check_launch(op, launch_shuffle_mul_sum(p, current_stream(input)));
  }
}

// ---------------------------------------------------------------------------------------
// fused_qk_norm_rope

void fused_qk_norm_rope(at::Tensor& qkv, int64_t num_heads_q, int64_t num_heads_k, int64_t num_heads_v,
                        int64_t head_dim, double eps, const at::Tensor& q_weight, const at::Tensor& k_weight,
                        double base, bool is_neox, const at::Tensor& position_ids, double factor, double low,
                        double high, double attention_factor, std::optional<int64_t> rotary_dim) {
  constexpr const char* op = "fused_qk_norm_rope";
  check_cuda(op, "qkv", qkv);
  check_dtype(op, "qkv", qkv, {at::kBFloat16});
  check_dim(op, "qkv", qkv, 2);
  check_last_dim_contiguous(op, "qkv", qkv);
  check_no_internal_overlap(op, "qkv", qkv);
  SGL_CHECK(head_dim == 64 || head_dim == 128 || head_dim == 256, op, "head_dim must be 64, 128 or 256, got ",
            head_dim);
  SGL_CHECK(num_heads_q >= 0 && num_heads_k >= 0 && num_heads_v >= 0 && num_heads_q <= (1 << 20) &&
                num_heads_k <= (1 << 20) && num_heads_v <= (1 << 20),
            op, "num_heads_q, num_heads_k and num_heads_v must be in [0, 2^20], got ", num_heads_q, ", ",
            num_heads_k, ", ", num_heads_v);
  const int64_t width = (num_heads_q + num_heads_k + num_heads_v) * head_dim;
  check_size(op, "qkv", qkv, 1, width, "(num_heads_q + num_heads_k + num_heads_v) * head_dim");
  const int64_t rdim = rotary_dim.value_or(head_dim);
  const int64_t step = 2 * head_dim / 32;
  SGL_CHECK(rdim > 0 && rdim <= head_dim && rdim % step == 0, op, "rotary_dim must be a positive multiple of ",
            "2 * head_dim / 32 = ", step, " and at most head_dim = ", head_dim, ", got ", rdim);
  for (const auto& [name, w] : {std::pair<const char*, const at::Tensor*>{"q_weight", &q_weight},
                                {"k_weight", &k_weight}}) {
    check_same_device(op, name, *w, "qkv", qkv);
    check_dtype(op, name, *w, {at::kBFloat16});
    check_dim(op, name, *w, 1);
    check_size(op, name, *w, 0, head_dim, "head_dim");
    check_contiguous(op, name, *w);
  }
  check_same_device(op, "position_ids", position_ids, "qkv", qkv);
  check_dtype(op, "position_ids", position_ids, {at::kInt});
  check_dim(op, "position_ids", position_ids, 1);
  check_contiguous(op, "position_ids", position_ids);
  check_size(op, "position_ids", position_ids, 0, qkv.size(0), "qkv.shape[0]");
  SGL_CHECK(std::isfinite(eps) && eps >= 0.0, op, "eps must be finite and >= 0, got ", eps);
  SGL_CHECK(std::isfinite(base) && base > 0.0, op, "base must be finite and > 0, got ", base);
  SGL_CHECK(std::isfinite(factor) && factor > 0.0, op, "factor must be finite and > 0, got ", factor);
  SGL_CHECK(std::isfinite(low) && std::isfinite(high), op, "low and high must be finite, got ", low, ", ", high);
  SGL_CHECK(std::isfinite(attention_factor), op, "attention_factor must be finite, got ", attention_factor);
  if (qkv.size(0) == 0 || num_heads_q + num_heads_k == 0) return;
  require_kernel(op, "moe", kArchs, qkv);

  const c10::cuda::CUDAGuard guard(qkv.device());
  if constexpr (kBuilt) {
    QkNormRopeParams p{};
    p.qkv = qkv.data_ptr();
    p.q_weight = q_weight.data_ptr();
    p.k_weight = k_weight.data_ptr();
    p.position_ids = position_ids.data_ptr<int32_t>();
    p.num_tokens = qkv.size(0);
    p.qkv_stride = qkv.stride(0);
    p.num_heads_q = static_cast<int>(num_heads_q);
    p.num_heads_k = static_cast<int>(num_heads_k);
    p.num_heads_v = static_cast<int>(num_heads_v);
    p.head_dim = static_cast<int>(head_dim);
    p.rotary_dim = static_cast<int>(rdim);
    p.eps = static_cast<float>(eps);
    p.base = static_cast<float>(base);
    p.factor = static_cast<float>(factor);
    p.low = static_cast<float>(low);
    p.high = static_cast<float>(high);
    p.attention_factor = static_cast<float>(attention_factor);
    p.is_neox = is_neox;
    p.enable_pdl = pdl_supported(qkv);
    check_launch(op, launch_qk_norm_rope(p, current_stream(qkv)));
  }
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
  m.impl("prepare_moe_input", &prepare_moe_input);
  m.impl("apply_shuffle_mul_sum", &apply_shuffle_mul_sum);
  m.impl("fused_qk_norm_rope", &fused_qk_norm_rope);
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
  // grouped-GEMM layout of the CUTLASS MoE path (sgl-kernel's op; written arguments marked)
  m.def("prepare_moe_input(Tensor topk_ids, Tensor! expert_offsets, Tensor!? blockscale_offsets, "
        "Tensor! problem_sizes1, Tensor! problem_sizes2, Tensor! input_permutation, Tensor! output_permutation, "
        "int num_experts, int n, int k) -> ()");
  // output[i] = sum_j factors[i * topk + j] * input[permutation[i * topk + j]] (written output marked)
  m.def("apply_shuffle_mul_sum(Tensor input, Tensor! output, Tensor permutation, Tensor? factors) -> ()");
  // per-head RMSNorm, then RoPE (YaRN-aware), of the q and k heads of a packed qkv, in place
  m.def("fused_qk_norm_rope(Tensor! qkv, int num_heads_q, int num_heads_k, int num_heads_v, int head_dim, "
        "float eps, Tensor q_weight, Tensor k_weight, float base, bool is_neox, Tensor position_ids, "
        "float factor, float low, float high, float attention_factor, int? rotary_dim=None) -> ()");
}

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) { register_impls(m); }

TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) { register_impls(m); }

}  // namespace sgl_kernel::moe
