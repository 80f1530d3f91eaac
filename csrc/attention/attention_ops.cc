// SPDX-License-Identifier: Apache-2.0
// Bindings of the attention family (API.md 2.5): merge_state and merge_state_v2 (merging two
// partial attention outputs by their log-sum-exp), lightning_attention_decode. Checks, then the
// launchers of attention.h.
#include <cstdint>
#include <cstdlib>
#include <utility>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "attention/attention.h"
#include "sgl_kernel/check.h"

namespace sgl_kernel::attention {

namespace {

constexpr bool kBuilt = SGL_KERNEL_HAS_ATTENTION;
constexpr const char* kArchs = SGL_KERNEL_ARCHS_ATTENTION;

void merge_state_impl(const char* op, bool natural, const at::Tensor& v_a, const at::Tensor& s_a,
                      const at::Tensor& v_b, const at::Tensor& s_b, at::Tensor& v_merged, at::Tensor& s_merged) {
  check_cuda(op, "v_a", v_a);
  if (natural) {
    check_dtype(op, "v_a", v_a, {at::kHalf, at::kBFloat16, at::kFloat});
  } else {
    check_dtype(op, "v_a", v_a, {at::kHalf, at::kBFloat16});
  }
  check_dim(op, "v_a", v_a, 3);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"v_b", &v_b}, {"v_merged", &v_merged}}) {
    check_same_device(op, name, *t, "v_a", v_a);
    check_same_dtype(op, name, *t, "v_a", v_a);
    check_same_shape(op, name, *t, "v_a", v_a);
  }
  for (const auto& [name, t] :
       {std::pair<const char*, const at::Tensor*>{"s_a", &s_a}, {"s_b", &s_b}, {"s_merged", &s_merged}}) {
    check_same_device(op, name, *t, "v_a", v_a);
    check_dtype(op, name, *t, {at::kFloat});
    check_dim(op, name, *t, 2);
    check_leading_dims(op, name, *t, "v_a", v_a, 2);
    check_contiguous(op, name, *t);
  }
  check_contiguous(op, "v_a", v_a);
  check_contiguous(op, "v_b", v_b);
  check_contiguous(op, "v_merged", v_merged);
  const int64_t head_dim = v_a.size(2);
  SGL_CHECK(head_dim % 8 == 0 && head_dim >= 8 && head_dim <= kMaxMergeHeadDim, op,
            "v_a.shape[2] (head_dim) must be a positive multiple of 8 and at most ", kMaxMergeHeadDim, ", got ",
            head_dim);
  check_no_internal_overlap(op, "v_merged", v_merged);
  check_no_internal_overlap(op, "s_merged", s_merged);
  // v_merged may be v_a or v_b (each element is read before it is written, by one thread), but
  // a row's s is read by every thread of the row while one of them writes s_merged.
  check_no_overlap(op, "s_merged", s_merged, "s_a", s_a);
  check_no_overlap(op, "s_merged", s_merged, "s_b", s_b);
  const int64_t rows = v_a.size(0) * v_a.size(1);
  if (rows == 0) return;
  require_kernel(op, "attention", kArchs, v_a);

  const c10::cuda::CUDAGuard guard(v_a.device());
  if constexpr (kBuilt) {
    MergeStateParams p{};
    p.v_merged = v_merged.data_ptr();
    p.s_merged = s_merged.data_ptr<float>();
    p.v_a = v_a.data_ptr();
    p.s_a = s_a.data_ptr<float>();
    p.v_b = v_b.data_ptr();
    p.s_b = s_b.data_ptr<float>();
    p.num_rows = rows;
    p.head_dim = static_cast<int>(head_dim);
    p.dtype = v_a.scalar_type() == at::kHalf       ? Dtype::kFloat16
              : v_a.scalar_type() == at::kBFloat16 ? Dtype::kBFloat16
                                                   : Dtype::kFloat32;
    p.natural = natural;
    p.enable_pdl = pdl_supported(v_a);
    check_launch(op, launch_merge_state(p, c10::cuda::getCurrentCUDAStream(v_a.get_device()).stream()));
  }
}

void merge_state(const at::Tensor& v_a, const at::Tensor& s_a, const at::Tensor& v_b, const at::Tensor& s_b,
                 at::Tensor& v_merged, at::Tensor& s_merged) {
  merge_state_impl("merge_state", false, v_a, s_a, v_b, s_b, v_merged, s_merged);
}

void merge_state_v2(const at::Tensor& v_a, const at::Tensor& s_a, const at::Tensor& v_b, const at::Tensor& s_b,
                    at::Tensor& v_merged, at::Tensor& s_merged) {
  merge_state_impl("merge_state_v2", true, v_a, s_a, v_b, s_b, v_merged, s_merged);
}

// new_kv[b, h] = exp(-slope[h]) * past_kv[b, h] + outer(k[b, h], v[b, h]); output[b, h] =
// q[b, h] . new_kv[b, h] (API.md 2.5, legacy). new_kv may be past_kv itself.
void lightning_attention_decode(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                const at::Tensor& past_kv, const at::Tensor& slope, at::Tensor& output,
                                at::Tensor& new_kv) {
  const char* op = "lightning_attention_decode";
  check_cuda(op, "q", q);
  check_dtype(op, "q", q, {at::kFloat, at::kHalf, at::kBFloat16});
  check_dim(op, "q", q, 4);
  SGL_CHECK(q.size(2) == 1, op, "q must have shape [b, h, 1, d] (one decode step), got ", q.sizes());
  const int64_t b = q.size(0), h = q.size(1), d = q.size(3);
  check_same_device(op, "k", k, "q", q);
  check_same_dtype(op, "k", k, "q", q);
  check_same_shape(op, "k", k, "q", q);
  check_same_device(op, "v", v, "q", q);
  check_same_dtype(op, "v", v, "q", q);
  check_dim(op, "v", v, 4);
  SGL_CHECK(v.size(0) == b && v.size(1) == h && v.size(2) == 1, op, "v must have shape [b, h, 1, e] with [b, h] = [",
            b, ", ", h, "], got ", v.sizes());
  const int64_t e = v.size(3);
  check_same_device(op, "output", output, "q", q);
  check_same_dtype(op, "output", output, "q", q);
  check_same_shape(op, "output", output, "v", v);
  for (const auto& [name, t] : {std::pair<const char*, const at::Tensor*>{"past_kv", &past_kv}, {"new_kv", &new_kv}}) {
    check_same_device(op, name, *t, "q", q);
    check_dtype(op, name, *t, {at::kFloat});
    check_dim(op, name, *t, 4);
    SGL_CHECK(t->size(0) == b && t->size(1) == h && t->size(2) == d && t->size(3) == e, op, name,
              " must have shape [b, h, d, e] = [", b, ", ", h, ", ", d, ", ", e, "], got ", t->sizes());
    check_contiguous(op, name, *t);
  }
  check_same_device(op, "slope", slope, "q", q);
  check_dtype(op, "slope", slope, {at::kFloat});
  SGL_CHECK(slope.numel() == h, op, "slope must have h = ", h, " elements ([h, 1, 1]), got shape ", slope.sizes());
  check_contiguous(op, "slope", slope);
  for (const auto& [name, t] :
       {std::pair<const char*, const at::Tensor*>{"q", &q}, {"k", &k}, {"v", &v}, {"output", &output}}) {
    check_contiguous(op, name, *t);
  }
  SGL_CHECK(d <= 65536 && e <= 65536 && h <= INT32_MAX, op, "d and e must be at most 65536 and h below 2^31, got d = ",
            d, ", e = ", e, ", h = ", h);
  // new_kv may be past_kv itself (an in-place update); any other sharing is refused.
  const bool in_place = new_kv.data_ptr() == past_kv.data_ptr();
  if (!in_place) check_no_overlap(op, "new_kv", new_kv, "past_kv", past_kv);
  for (const auto& [name, t] :
       {std::pair<const char*, const at::Tensor*>{"q", &q}, {"k", &k}, {"v", &v}, {"slope", &slope}}) {
    check_no_overlap(op, "new_kv", new_kv, name, *t);
    check_no_overlap(op, "output", output, name, *t);
  }
  check_no_overlap(op, "output", output, "past_kv", past_kv);
  check_no_overlap(op, "output", output, "new_kv", new_kv);
  SGL_CHECK(d >= 1 && e >= 1, op, "d (q.shape[3]) and e (v.shape[3]) must be at least 1, got d = ", d, ", e = ", e);
  if (b * h == 0) return;
  require_kernel(op, "attention", kArchs, q);

  const c10::cuda::CUDAGuard guard(q.device());
  if constexpr (kBuilt) {
    LightningDecodeParams p{};
    p.q = q.data_ptr();
    p.k = k.data_ptr();
    p.v = v.data_ptr();
    p.past_kv = past_kv.data_ptr<float>();
    p.slope = slope.data_ptr<float>();
    p.output = output.data_ptr();
    p.new_kv = new_kv.data_ptr<float>();
    p.batch = b;
    p.heads = static_cast<int>(h);
    p.d = static_cast<int>(d);
    p.e = static_cast<int>(e);
    p.dtype = q.scalar_type() == at::kHalf       ? Dtype::kFloat16
              : q.scalar_type() == at::kBFloat16 ? Dtype::kBFloat16
                                                 : Dtype::kFloat32;
    p.enable_pdl = pdl_supported(q);
    if (const char* c = std::getenv("SGL_KERNEL_LIGHTNING_CLUSTER"); c != nullptr && *c != '\0') {
      p.cluster = std::atoi(c);
    }
    check_launch(op, launch_lightning_attention_decode(p, c10::cuda::getCurrentCUDAStream(q.get_device()).stream()));
  }
}

// CUDA and CPU: CPU tensors get the op's own "must be a CUDA tensor" message.
void register_impls(torch::Library& m) {
  m.impl("merge_state", &merge_state);
  m.impl("merge_state_v2", &merge_state_v2);
  m.impl("lightning_attention_decode", &lightning_attention_decode);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  // merge two partial attention states (value, base-2 log-sum-exp)
  m.def("merge_state(Tensor v_a, Tensor s_a, Tensor v_b, Tensor s_b, Tensor! v_merged, Tensor! s_merged) -> ()");
  // the same with natural log-sum-exp; an input LSE of +inf is an empty state
  m.def("merge_state_v2(Tensor v_a, Tensor s_a, Tensor v_b, Tensor s_b, Tensor! v_merged, Tensor! s_merged) -> ()");
  // one decode step of linear attention with exponential decay (MiniMax; legacy)
  m.def("lightning_attention_decode(Tensor q, Tensor k, Tensor v, Tensor past_kv, Tensor slope, Tensor! output, "
        "Tensor! new_kv) -> ()");
}

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) { register_impls(m); }

TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) { register_impls(m); }

}  // namespace sgl_kernel::attention
