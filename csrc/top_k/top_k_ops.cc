// SPDX-License-Identifier: Apache-2.0
// Bindings of the top_k family: schemas, checks, dispatch to the launcher of top_k.h.
#include <cstdint>
#include <optional>

#include <ATen/ops/zeros.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "sgl_kernel/check.h"
#include "sgl_kernel/runtime.h"
#include "top_k/top_k.h"

namespace sgl_kernel::top_k {

namespace {

constexpr bool kBuilt = SGL_KERNEL_HAS_TOP_K;
constexpr const char* kArchs = SGL_KERNEL_ARCHS_TOP_K;

// score, lengths, row_starts and the [B, 2048] output shared by the three ops.
void check_common(const char* op, const at::Tensor& score, const at::Tensor& lengths,
                  const std::optional<at::Tensor>& row_starts, const char* out_name, const at::Tensor& out) {
  check_cuda(op, "score", score);
  check_dtype(op, "score", score, {at::kFloat});
  check_dim(op, "score", score, 2);
  check_last_dim_contiguous(op, "score", score);
  SGL_CHECK(reinterpret_cast<uintptr_t>(score.data_ptr()) % 4 == 0, op, "score must be 4-byte aligned");
  const int64_t rows = score.size(0);
  check_same_device(op, "lengths", lengths, "score", score);
  check_dtype(op, "lengths", lengths, {at::kInt});
  check_dim(op, "lengths", lengths, 1);
  check_contiguous(op, "lengths", lengths);
  check_size(op, "lengths", lengths, 0, rows, "score.shape[0]");
  if (row_starts.has_value()) {
    check_same_device(op, "row_starts", *row_starts, "score", score);
    check_dtype(op, "row_starts", *row_starts, {at::kInt});
    check_dim(op, "row_starts", *row_starts, 1);
    check_size(op, "row_starts", *row_starts, 0, rows, "score.shape[0]");
  }
  check_same_device(op, out_name, out, "score", score);
  check_dtype(op, out_name, out, {at::kInt});
  check_dim(op, out_name, out, 2);
  check_size(op, out_name, out, 0, rows, "score.shape[0]");
  check_size(op, out_name, out, 1, kTopK, "top-k is fixed at 2048");
  check_contiguous(op, out_name, out);
  SGL_CHECK(rows <= INT32_MAX, op, "score.shape[0] must be at most 2^31 - 1 rows, got ", rows);
}

FastTopKParams common_params(const at::Tensor& score, const at::Tensor& lengths,
                             const std::optional<at::Tensor>& row_starts, at::Tensor& out) {
  FastTopKParams p{};
  p.score = score.data_ptr<float>();
  p.lengths = lengths.data_ptr<int32_t>();
  p.row_starts = row_starts.has_value() ? row_starts->data_ptr<int32_t>() : nullptr;
  p.row_starts_stride = row_starts.has_value() ? row_starts->stride(0) : 0;
  p.out = out.data_ptr<int32_t>();
  p.rows = score.size(0);
  p.cols = score.size(1);
  p.score_stride = score.stride(0);
  p.enable_pdl = pdl_supported(score);
  return p;
}

// Launch on the device of score; raises on a device with too little shared memory and, with
// SGL_KERNEL_DEBUG=1, on the out-of-contract index values the kernel met (it syncs then).
void run(const char* op, TopKOutput mode, FastTopKParams p, const at::Tensor& score) {
  if (p.rows == 0) return;
  require_kernel(op, "top_k", kArchs, score);
  const c10::cuda::CUDAGuard guard(score.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(score.get_device()).stream();
  FastTopKSmem smem{};
  check_launch(op, fast_topk_smem(score.get_device(), &smem));
  if (smem.bytes > smem.device_bytes) {
    cudaDeviceProp prop{};
    const bool have_name = cudaGetDeviceProperties(&prop, score.get_device()) == cudaSuccess;
    SGL_CHECK(false, op, "needs ", smem.min_bytes, " bytes of shared memory per block, but ",
              have_name ? prop.name : "the CUDA device", " (cuda:", score.get_device(), ", sm_",
              device_capability(score.get_device()), ") allows ", smem.device_bytes);
  }
  at::Tensor flag;
  if (debug_mode()) flag = at::zeros({1}, score.options().dtype(at::kInt));
  p.error_flag = flag.defined() ? flag.data_ptr<int>() : nullptr;
  if constexpr (kBuilt) check_launch(op, launch_fast_topk(mode, p, stream));
  if (flag.defined()) {
    const int bits = flag.item<int>();
    SGL_CHECK(!(bits & kBadWindow), op,
              "lengths / row_starts: a window row_starts[b] + [0, lengths[b]) lies outside [0, ", p.cols,
              ") (score.shape[1]) (SGL_KERNEL_DEBUG=1)");
    SGL_CHECK(!(bits & kBadRequest), op, "cu_seqlens_q: a row b lies in no request (cu_seqlens_q[r] <= b < "
              "cu_seqlens_q[r + 1]) (SGL_KERNEL_DEBUG=1)");
    SGL_CHECK(!(bits & kBadPage), op, "src_page_table: a selected position is >= src_page_table.shape[1] = ",
              p.page_cols, " (SGL_KERNEL_DEBUG=1)");
  }
}

// indices[b] = positions (relative to row_starts[b]) of the 2048 largest of score[b, s : s + n]
void fast_topk(const at::Tensor& score, at::Tensor& indices, const at::Tensor& lengths,
               const std::optional<at::Tensor>& row_starts) {
  const char* op = "fast_topk";
  check_common(op, score, lengths, row_starts, "indices", indices);
  run(op, TopKOutput::kIndices, common_params(score, lengths, row_starts, indices), score);
}

// dst_page_table[b, i] = src_page_table[r, idx[i]] (-1 stays -1), r = request of row b
void fast_topk_transform_fused(const at::Tensor& score, const at::Tensor& lengths, at::Tensor& dst_page_table,
                               const at::Tensor& src_page_table, const at::Tensor& cu_seqlens_q,
                               const std::optional<at::Tensor>& row_starts) {
  const char* op = "fast_topk_transform_fused";
  check_common(op, score, lengths, row_starts, "dst_page_table", dst_page_table);
  check_same_device(op, "cu_seqlens_q", cu_seqlens_q, "score", score);
  check_dtype(op, "cu_seqlens_q", cu_seqlens_q, {at::kInt});
  check_dim(op, "cu_seqlens_q", cu_seqlens_q, 1);
  check_contiguous(op, "cu_seqlens_q", cu_seqlens_q);
  SGL_CHECK(cu_seqlens_q.size(0) >= 1, op, "cu_seqlens_q must have R + 1 >= 1 elements, got 0");
  const int64_t requests = cu_seqlens_q.size(0) - 1;
  SGL_CHECK(requests <= score.size(0), op, "cu_seqlens_q must have at most score.shape[0] + 1 = ",
            score.size(0) + 1, " elements (R <= B requests), got ", cu_seqlens_q.size(0));
  check_same_device(op, "src_page_table", src_page_table, "score", score);
  check_dtype(op, "src_page_table", src_page_table, {at::kInt});
  check_dim(op, "src_page_table", src_page_table, 2);
  check_last_dim_contiguous(op, "src_page_table", src_page_table);
  check_size(op, "src_page_table", src_page_table, 0, requests, "cu_seqlens_q.shape[0] - 1 requests");
  FastTopKParams p = common_params(score, lengths, row_starts, dst_page_table);
  p.page_table = src_page_table.data_ptr<int32_t>();
  p.cu_seqlens_q = cu_seqlens_q.data_ptr<int32_t>();
  p.requests = requests;
  p.page_cols = src_page_table.size(1);
  p.page_stride = src_page_table.stride(0);
  // API.md 2.1.5: decode (no row_starts, one row per request) maps row b to request b.
  p.row_is_request = !row_starts.has_value() && requests == score.size(0);
  run(op, TopKOutput::kPageTable, p, score);
}

// topk_indices_ragged[b, i] = idx[i] + topk_indices_offset[b] where idx[i] >= 0, else -1
void fast_topk_transform_ragged_fused(const at::Tensor& score, const at::Tensor& lengths,
                                      at::Tensor& topk_indices_ragged, const at::Tensor& topk_indices_offset,
                                      const std::optional<at::Tensor>& row_starts) {
  const char* op = "fast_topk_transform_ragged_fused";
  check_common(op, score, lengths, row_starts, "topk_indices_ragged", topk_indices_ragged);
  check_same_device(op, "topk_indices_offset", topk_indices_offset, "score", score);
  check_dtype(op, "topk_indices_offset", topk_indices_offset, {at::kInt});
  check_dim(op, "topk_indices_offset", topk_indices_offset, 1);
  check_size(op, "topk_indices_offset", topk_indices_offset, 0, score.size(0), "score.shape[0]");
  FastTopKParams p = common_params(score, lengths, row_starts, topk_indices_ragged);
  p.offsets = topk_indices_offset.data_ptr<int32_t>();
  p.offsets_stride = topk_indices_offset.stride(0);
  run(op, TopKOutput::kRagged, p, score);
}

// One registration for CUDA and CPU tensors: for CPU tensors the checks raise the op's own
// "must be a CUDA tensor" message instead of the dispatcher's "could not run ... CPU".
void register_impls(torch::Library& m) {
  m.impl("fast_topk", &fast_topk);
  m.impl("fast_topk_transform_fused", &fast_topk_transform_fused);
  m.impl("fast_topk_transform_ragged_fused", &fast_topk_transform_ragged_fused);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  // indices[b] = positions (relative to row_starts[b]) of the 2048 largest of the window
  // score[b, row_starts[b] : row_starts[b] + lengths[b]]; 0..n-1 then -1 when n <= 2048
  m.def("fast_topk(Tensor score, Tensor! indices, Tensor lengths, Tensor? row_starts) -> ()");
  // fast_topk, then dst_page_table[b, i] = src_page_table[request of b, idx[i]] (-1 stays -1)
  m.def("fast_topk_transform_fused(Tensor score, Tensor lengths, Tensor! dst_page_table, "
        "Tensor src_page_table, Tensor cu_seqlens_q, Tensor? row_starts) -> ()");
  // fast_topk, then topk_indices_ragged[b, i] = idx[i] + topk_indices_offset[b] (-1 stays -1)
  m.def("fast_topk_transform_ragged_fused(Tensor score, Tensor lengths, Tensor! topk_indices_ragged, "
        "Tensor topk_indices_offset, Tensor? row_starts) -> ()");
}

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) { register_impls(m); }

TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) { register_impls(m); }

}  // namespace sgl_kernel::top_k
