// SPDX-License-Identifier: Apache-2.0
// Bindings of the attention family (API.md 2.5): merge_state and merge_state_v2 (merging two
// partial attention outputs by their log-sum-exp). Checks, then the launcher of attention.h.
#include <cstdint>
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

// CUDA and CPU: CPU tensors get the op's own "must be a CUDA tensor" message.
void register_impls(torch::Library& m) {
  m.impl("merge_state", &merge_state);
  m.impl("merge_state_v2", &merge_state_v2);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  // merge two partial attention states (value, base-2 log-sum-exp)
  m.def("merge_state(Tensor v_a, Tensor s_a, Tensor v_b, Tensor s_b, Tensor! v_merged, Tensor! s_merged) -> ()");
  // the same with natural log-sum-exp; an input LSE of +inf is an empty state
  m.def("merge_state_v2(Tensor v_a, Tensor s_a, Tensor v_b, Tensor s_b, Tensor! v_merged, Tensor! s_merged) -> ()");
}

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) { register_impls(m); }

TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) { register_impls(m); }

}  // namespace sgl_kernel::attention
