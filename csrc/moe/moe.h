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

}  // namespace sgl_kernel::moe
