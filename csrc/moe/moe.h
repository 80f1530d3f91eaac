// SPDX-License-Identifier: Apache-2.0
// Launchers of the MoE family (API.md section 2.4): expert routing (top-k of softmax / sigmoid
// gates, DeepSeek's grouped gate), the token -> expert block layout of the fused MoE GEMMs, and
// the sum of each token's expert outputs. Torch-free: the bindings (moe_ops.cc) check the
// tensors and fill these structs; the kernels trust them.
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace sgl_kernel::moe {

// Element type of a gate / hidden-state tensor.
enum class Dtype : int { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

// Size limits the bindings enforce (a clear error beyond them) and the kernels may rely on.
constexpr int kMaxGatingExperts = 65536;  // topk_softmax / topk_sigmoid: num_experts
constexpr int kMaxGatingK = 128;          // topk_softmax / topk_sigmoid: k
constexpr int kMaxFusedGateExperts = 1024;  // moe_fused_gate / kimi_k2_moe_fused_gate
constexpr int kMaxFusedGateTopk = 32;
constexpr int kMaxAlignBuckets = 4096;    // moe_align_block_size: num_experts (E + 1)

// ---------------------------------------------------------------------------------------------
// topk_softmax / topk_sigmoid (topk_gating.cu). Per token t (row of gating):
//   softmax: z = gating[t] in fp32; z = tanh(z / softcap) * softcap when softcap != 0;
//            z += bias when bias; p = softmax(z); key = p.
//   sigmoid: p = sigmoid(gating[t]) in fp32; key = p + bias (bias optional).
// The k experts with the largest key (ties -> lower expert index; NaN keys rank below every
// number) are written in descending key order: ids[t, j] = expert, weights[t, j] = p[expert];
// with renormalize every weight of the row is divided by the sum of the row's k weights.
struct TopkGatingParams {
  float* weights;        // [num_tokens, k], row pitch weights_stride (elements)
  void* ids;             // [num_tokens, k], int32 or int64 (ids_int64), row pitch ids_stride
  const void* gating;    // [num_tokens, num_experts], dtype, row pitch gating_stride (elements)
  const float* bias;     // [num_experts] contiguous, or nullptr
  int64_t num_tokens;
  int64_t gating_stride;
  int64_t weights_stride;
  int64_t ids_stride;
  int num_experts;       // >= 1
  int k;                 // 1 <= k <= num_experts
  float softcap;         // softmax only; 0 = off
  Dtype dtype;
  bool sigmoid;          // false: softmax
  bool renormalize;
  bool ids_int64;
  bool enable_pdl;       // programmatic dependent launch (sm90+)
};

cudaError_t launch_topk_gating(const TopkGatingParams& params, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// moe_fused_gate / kimi_k2_moe_fused_gate (fused_gate.cu). Per token t:
//   s = sigmoid(input[t]) (fp32), b = s + bias (bias rounded in its dtype, added in fp32).
//   num_groups > 1: the experts form num_groups contiguous groups; group score = sum of the two
//   largest b of the group; the topk_group best groups are kept (ties -> lower group); the
//   others' experts are out. kr = topk - num_shared experts are chosen among the kept ones by b
//   (ties -> lower index), in descending b order; w = s of the chosen; S = sum of w.
//   For j < num_shared: ids[t, kr + j] = num_experts + j, w = S / routed_scaling_factor.
//   renormalize: every w /= S (moe_fused_gate always; kimi by its flag).
//   scale_output: every w *= routed_scaling_factor.
struct FusedGateParams {
  float* weights;        // [num_tokens, topk], contiguous
  int32_t* ids;          // [num_tokens, topk], contiguous
  const void* input;     // [num_tokens, num_experts], dtype, contiguous
  const void* bias;      // [num_experts], dtype, contiguous
  int64_t num_tokens;
  int num_experts;       // moe_fused_gate: a power of two; kimi: 384
  int num_groups;        // >= 1, divides num_experts, num_experts / num_groups <= 32 when > 1
  int topk_group;        // 1 <= topk_group <= num_groups
  int topk;              // kr + num_shared, kr >= 1, kr <= experts of topk_group groups
  int num_shared;        // fused shared experts (ids num_experts + j)
  float routed_scaling_factor;
  Dtype dtype;
  bool renormalize;
  bool scale_output;
  bool enable_pdl;
};

cudaError_t launch_fused_gate(const FusedGateParams& params, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// moe_align_block_size (moe_align.cu). Flat entry i of topk_ids (numel entries) goes to bucket
// e = topk_ids[i] + 1; entries whose bucket is outside [0, num_buckets) are dropped (placed
// nowhere; *bad_flag is set to 1 when bad_flag != nullptr). c_e = entries of bucket e,
// c'_e = ceil(c_e / block_size) * block_size, o_e = sum_{e' < e} c'_e'.
// Writes: num_tokens_post_pad[0] = sum c'_e; sorted_token_ids[o_e : o_e + c_e] = the flat
// indices of bucket e (their order inside a bucket: see moe_align.cu); expert_ids[j] =
// e - 1 for every block j of bucket e (j < num_tokens_post_pad / block_size); with pad_sorted
// every other entry of sorted_token_ids[0 : sorted_len] is set to numel. cumsum (>= num_buckets
// + 1 int32) is scratch, left holding o_e (cumsum[num_buckets] = the padded total).
// A total that would not fit sorted_len (or its blocks expert_ids_len) is written only up to
// those lengths (never past them); the binding sizes them so that it always fits.
struct MoeAlignParams {
  const void* topk_ids;        // [numel], int32 or int64 (ids_int64), contiguous
  int32_t* sorted_token_ids;   // [sorted_len]
  int32_t* expert_ids;         // [expert_ids_len]
  int32_t* num_tokens_post_pad;  // [1]
  int32_t* cumsum;             // [>= num_buckets + 1], scratch
  int32_t* bad_flag;           // nullptr, or 1 int32 (zeroed by the caller) set on a dropped entry
  int64_t numel;               // < 2^31
  int64_t sorted_len;
  int64_t expert_ids_len;
  int num_buckets;             // the API's num_experts (= E + 1), >= 1
  int block_size;              // >= 1
  bool ids_int64;
  bool pad_sorted;
  bool enable_pdl;
};

cudaError_t launch_moe_align(const MoeAlignParams& params, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// moe_sum / moe_sum_reduce (moe_sum.cu): out[t, h] = scale * sum_{j < topk} input[t, j, h],
// summed in fp32 in order j = 0, 1, ..., rounded once (scale == 1 for moe_sum: no multiply).
struct MoeSumParams {
  void* out;                   // [num_tokens, hidden], row pitch out_stride (elements)
  const void* input;           // [num_tokens, topk, hidden], strides (elements) below
  int64_t num_tokens;
  int64_t hidden;
  int64_t in_token_stride;
  int64_t in_k_stride;
  int64_t out_stride;
  int topk;                    // >= 1
  float scale;
  bool apply_scale;            // false: moe_sum (no multiply)
  Dtype dtype;                 // input and out
  bool enable_pdl;
};

cudaError_t launch_moe_sum(const MoeSumParams& params, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// prepare_moe_input (prepare_moe_input.cu): the grouped-GEMM layout of the CUTLASS MoE path.
// Flat entry i (< numel = tokens * topk) of topk_ids has expert e = topk_ids[i]; entries with e
// outside [0, num_experts) are dropped (counted nowhere, output_permutation[i] = -1, *bad_flag
// = 1 when bad_flag != nullptr). c_e = kept entries of expert e. Writes:
//   expert_offsets[0..E] = [0, cumsum(c)]; blockscale_offsets (when not nullptr) [0..E] =
//   [0, cumsum(round_up(c_e, 128))]; problem_sizes1[e] = (c_e, 2n, k); problem_sizes2[e] =
//   (c_e, k, n) (rows of 3 int32, contiguous);
//   each kept entry i gets slot q = expert_offsets[e] + (number of kept entries i' < i with the
//   same expert), i.e. ascending flat index inside an expert (deterministic):
//   input_permutation[q] = i / topk, output_permutation[i] = q;
//   input_permutation[q] = -1 for the slots q in [expert_offsets[E], numel) that dropped
//   entries leave unused.
struct PrepareMoeInputParams {
  const int32_t* topk_ids;       // [numel], contiguous
  int32_t* expert_offsets;       // [num_experts + 1]
  int32_t* blockscale_offsets;   // [num_experts + 1], or nullptr
  int32_t* problem_sizes1;       // [num_experts, 3], contiguous
  int32_t* problem_sizes2;       // [num_experts, 3], contiguous
  int32_t* input_permutation;    // [numel]
  int32_t* output_permutation;   // [numel]
  int32_t* bad_flag;             // nullptr, or 1 int32 (zeroed by the caller) set on a dropped entry
  int64_t numel;                 // tokens * topk, < 2^31 (may be 0: only the offsets and sizes)
  int topk;                      // >= 1
  int num_experts;               // 1 <= num_experts <= kMaxPrepareExperts
  int n;                         // problem_sizes values
  int k;
  bool enable_pdl;
};

constexpr int kMaxPrepareExperts = 4096;

cudaError_t launch_prepare_moe_input(const PrepareMoeInputParams& params, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// apply_shuffle_mul_sum (shuffle_mul_sum.cu): for token i < m and column h < hidden,
//   out[i, h] = sum_{j < topk} f_j * input[permutation[i * topk + j], h],
// f_j = factors[i * topk + j] (in the output dtype, widened to fp32) or 1 when factors is
// nullptr; the products are summed in fp32 in order j = 0, 1, ... and rounded once to the output
// dtype. A permutation entry outside [0, input_rows) contributes nothing (the -1 that
// prepare_moe_input writes for a dropped expert id); with no entry left the output is +0 (a sum
// of -0 terms stays -0). Rows are shorter than 4 GiB (hidden * sizeof(T) <= UINT32_MAX).
struct ShuffleMulSumParams {
  void* out;                     // [m, hidden], contiguous
  const void* input;             // [input_rows, hidden], contiguous
  const int32_t* permutation;    // [m * topk]
  const void* factors;           // [m * topk], dtype of out, or nullptr
  int64_t m;
  int64_t input_rows;
  int64_t hidden;
  int topk;                      // >= 1
  Dtype dtype;                   // kFloat16 or kBFloat16 (input, out and factors)
  bool enable_pdl;
};

cudaError_t launch_shuffle_mul_sum(const ShuffleMulSumParams& params, cudaStream_t stream);

// ---------------------------------------------------------------------------------------------
// fused_qk_norm_rope (qk_norm_rope.cu), in place on bf16 qkv [num_tokens, (hq + hk + hv) *
// head_dim] (row pitch qkv_stride elements; q heads, then k heads, then v heads). For every q
// head and k head of every token (v heads untouched):
//   1. RMSNorm over the head: x <- x * rsqrt(mean(x^2) + eps) * w (w = q_weight or k_weight,
//      bf16 [head_dim]), in fp32;
//   2. RoPE on the first rotary_dim elements: pair i < rotary_dim / 2 is (i, i + rotary_dim / 2)
//      when is_neox, else (2i, 2i + 1); angle = pos * f_i with pos = position_ids[token],
//      f_i = base^(-2i / rotary_dim), and when factor != 1 (YaRN) ramp = clamp((i - low) /
//      (high - low), 0, 1) (high += 0.001 when |high - low| <= 1e-6), f_i <- (f_i / factor) *
//      ramp + f_i * (1 - ramp); (x0, x1) <- (x0 cos - x1 sin, x0 sin + x1 cos) * attention_factor.
//      Elements past rotary_dim keep the normed value.
//   Rounded once to bf16 at the end.
struct QkNormRopeParams {
  void* qkv;                     // bf16
  const void* q_weight;          // bf16 [head_dim]
  const void* k_weight;          // bf16 [head_dim]
  const int32_t* position_ids;   // [num_tokens]
  int64_t num_tokens;
  int64_t qkv_stride;            // elements between tokens (>= (hq + hk + hv) * head_dim)
  int num_heads_q;               // >= 0
  int num_heads_k;               // >= 0
  int num_heads_v;               // >= 0
  int head_dim;                  // 64, 128 or 256
  int rotary_dim;                // even, 0 < rotary_dim <= head_dim, a multiple of 2 * head_dim / 32
  float eps;
  float base;
  float factor;
  float low;
  float high;
  float attention_factor;
  bool is_neox;
  bool enable_pdl;
};

cudaError_t launch_qk_norm_rope(const QkNormRopeParams& params, cudaStream_t stream);

}  // namespace sgl_kernel::moe
