// SPDX-License-Identifier: Apache-2.0
// Bindings of the elementwise family: schemas, checks, dispatch to the launchers of
// elementwise.h.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
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
void check_in_place(const char* op, const char* name, const at::Tensor& out, const char* in_name,
                    const at::Tensor& in) {
  SGL_CHECK(out.data_ptr() != in.data_ptr() || out.strides() == in.strides(), op, name, " must either be ",
            in_name, " itself (same data pointer and strides) or another tensor, got the data pointer of ", in_name,
            " with strides ", out.strides(), " instead of ", in.strides());
}

// SGL_KERNEL_DEBUG=1 (API.md 1.4): an index outside [0, limit) raises instead of being skipped.
// Synchronizes; skipped while the stream is being captured into a CUDA graph.
bool debug_indices() {
  static const bool on = [] {
    const char* v = std::getenv("SGL_KERNEL_DEBUG");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return on;
}

void debug_check_indices(const char* op, const char* name, const at::Tensor& idx, int64_t limit, const char* what,
                         cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();
    return;
  }
  if (status != cudaStreamCaptureStatusNone) return;
  const at::Tensor bad = idx.lt(0).logical_or(idx.ge(limit));
  if (!bad.any().item<bool>()) return;
  const int64_t i = bad.nonzero().select(0, 0).select(0, 0).item<int64_t>();
  SGL_CHECK(false, op, name, "[", i, "] = ", idx.select(0, i).item<int64_t>(), " is outside [0, ", limit, ") (",
            what, "); SGL_KERNEL_DEBUG=1 turns this skipped index into an error");
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
  if (nnz == 0) return;
  require_kernel(op, "elementwise", kArchs, q);

  const c10::cuda::CUDAGuard guard(q.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(q.get_device()).stream();
  if (debug_indices()) {
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
    check_launch(op, err);
  }
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  // out = silu(input[..., :d]) * input[..., d:]
  m.def("silu_and_mul(Tensor! out, Tensor input) -> ()");
  // out = gelu(input[..., :d]) * input[..., d:] (exact erf GELU)
  m.def("gelu_and_mul(Tensor! out, Tensor input) -> ()");
  // out = gelu_tanh(input[..., :d]) * input[..., d:] (tanh approximation)
  m.def("gelu_tanh_and_mul(Tensor! out, Tensor input) -> ()");
  // q_rope, k_rope = RoPE(q, k) with float32 cos/sin rows cos_sin_cache[pos_ids] (q_rope/k_rope
  // may be q/k); with v given, also k_buffer[kv_cache_loc] = k_rope, v_buffer[kv_cache_loc] = v
  m.def(
      "apply_rope_pos_ids_cos_sin_cache(Tensor q, Tensor k, Tensor! q_rope, Tensor! k_rope, "
      "Tensor cos_sin_cache, Tensor pos_ids, bool interleave, bool enable_pdl, Tensor? v, "
      "Tensor!? k_buffer, Tensor!? v_buffer, Tensor? kv_cache_loc) -> ()");
}

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) {
  m.impl("silu_and_mul", &silu_and_mul);
  m.impl("gelu_and_mul", &gelu_and_mul);
  m.impl("gelu_tanh_and_mul", &gelu_tanh_and_mul);
  m.impl("apply_rope_pos_ids_cos_sin_cache", &apply_rope_pos_ids_cos_sin_cache);
}

// CPU tensors reach the same checks, which reject them with the op's own message instead
// of the dispatcher's "could not run ... with arguments from the CPU backend".
TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) {
  m.impl("silu_and_mul", &silu_and_mul);
  m.impl("gelu_and_mul", &gelu_and_mul);
  m.impl("gelu_tanh_and_mul", &gelu_tanh_and_mul);
  m.impl("apply_rope_pos_ids_cos_sin_cache", &apply_rope_pos_ids_cos_sin_cache);
}

}  // namespace sgl_kernel::elementwise
