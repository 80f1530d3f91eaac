// SPDX-License-Identifier: Apache-2.0
// Bindings of the project family (API.md section 3).
#include <algorithm>
#include <cstdint>
#include <cstdlib>

#include <ATen/ops/empty.h>
#include <ATen/ops/from_blob.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "project/project.h"
#include "sgl_kernel/check.h"
#include "sgl_kernel/dispatch.h"

namespace sgl_kernel::project {

namespace {

constexpr bool kBuilt = SGL_KERNEL_HAS_PROJECT;
constexpr const char* kArchs = SGL_KERNEL_ARCHS_PROJECT;

// Merge dimensions that are contiguous with each other and drop size-1 dimensions;
// returns false when more than kMaxStridedDims remain.
bool describe_layout(const at::Tensor& t, StridedLayout& layout) {
  layout.ndim = 0;
  if (t.is_contiguous()) return true;
  int n = 0;
  for (int64_t i = 0; i < t.dim(); ++i) {
    if (t.size(i) == 1) continue;
    if (n > 0 && layout.strides[n - 1] == t.stride(i) * t.size(i)) {
      layout.sizes[n - 1] *= t.size(i);
      layout.strides[n - 1] = t.stride(i);
    } else {
      if (n == kMaxStridedDims) {
        layout.ndim = 0;
        return false;
      }
      layout.sizes[n] = t.size(i);
      layout.strides[n] = t.stride(i);
      ++n;
    }
  }
  layout.ndim = n;
  return true;
}

at::Tensor relu_impl(const char* op, const at::Tensor& input, const at::Tensor* bias) {
  check_cuda(op, "input", input);
  check_dtype(op, "input", input, {at::kBFloat16, at::kHalf, at::kFloat});
  if (bias != nullptr) {
    check_min_dim(op, "input", input, 1);
    check_same_device(op, "bias", *bias, "input", input);
    check_same_dtype(op, "bias", *bias, "input", input);
    check_dim(op, "bias", *bias, 1);
    check_size(op, "bias", *bias, 0, input.size(-1), "input.shape[-1]");
    check_contiguous(op, "bias", *bias);
  }
  at::Tensor out = at::empty(input.sizes(), input.options().memory_format(at::MemoryFormat::Contiguous));
  if (out.numel() == 0) return out;
  require_kernel(op, "project", kArchs, input);

  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(input.get_device()).stream();
  if constexpr (kBuilt) {
    const cudaError_t err = dispatch_float(op, "input", input.scalar_type(), [&](auto tag) {
      using T = typename decltype(tag)::type;
      ReluParams<T> p{};
      at::Tensor src = input;
      if (!describe_layout(src, p.layout)) {
        src = input.contiguous();  // NOTE: > kMaxStridedDims irregular dims: rare, one extra copy
      }
      p.out = static_cast<T*>(out.data_ptr());
      p.input = static_cast<const T*>(src.data_ptr());
      p.bias = bias != nullptr ? static_cast<const T*>(bias->data_ptr()) : nullptr;
      p.numel = out.numel();
      p.last_dim = input.dim() > 0 ? std::max<int64_t>(input.size(-1), 1) : 1;
      return launch_relu<T>(p, stream);
    });
    check_launch(op, err);
  }
  return out;
}

at::Tensor custom_relu(const at::Tensor& input) { return relu_impl("custom_relu", input, nullptr); }

at::Tensor fused_add_relu(const at::Tensor& input, const at::Tensor& bias) {
  return relu_impl("fused_add_relu", input, &bias);
}

// ---------------------------------------------------------------------------------------
// Row gathers and scatters: store_kv_cache, embedding_lookup

// Elements inside a row (dimensions 1..) are contiguous; the row stride (dimension 0) is free.
void check_rows_contiguous(const char* op, const char* name, const at::Tensor& t) {
  int64_t expected = 1;
  bool ok = true;
  for (int64_t i = t.dim() - 1; i >= 1; --i) {
    if (t.size(i) == 0) return;  // empty rows: no layout to check
    if (t.size(i) != 1 && t.stride(i) != expected) ok = false;
    expected *= t.size(i);
  }
  SGL_CHECK(ok, op, name,
            " must have contiguous rows (dimensions 1.. contiguous; the stride of dimension 0 is free), "
            "got shape ", t.sizes(), " with strides ", t.strides());
}

void check_same_layout(const char* op, const char* name, const at::Tensor& t, const char* ref_name,
                       const at::Tensor& ref) {
  SGL_CHECK(t.sizes() == ref.sizes() && t.strides() == ref.strides(), op, name, " must have the shape and strides of ",
            ref_name, " (shape ", ref.sizes(), ", strides ", ref.strides(), "), got shape ", t.sizes(), ", strides ",
            t.strides());
}

// The row copies (store_kv_cache.cu, embedding_lookup.cu) refuse rows of more than 2^31 chunks.
void check_row_chunks(const char* op, const char* name, int64_t row_bytes, int64_t chunk) {
  SGL_CHECK(row_bytes / chunk <= (int64_t{1} << 31), op, name, " rows must be at most 2^31 copy chunks of ", chunk,
            " bytes (the widest of 16, 8, 4, 2, 1 bytes dividing every data pointer, row stride and the row size), ",
            "got rows of ", row_bytes, " bytes = ", row_bytes / chunk, " chunks");
}

uint64_t address_of(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()); }

int64_t row_numel(const at::Tensor& t) {
  int64_t n = 1;
  for (int64_t i = 1; i < t.dim(); ++i) n *= t.size(i);
  return n;
}

// k_cache[out_loc[i]] = k[i], v_cache[out_loc[i]] = v[i]
void store_kv_cache(at::Tensor& k_cache, at::Tensor& v_cache, const at::Tensor& out_loc, const at::Tensor& k,
                    const at::Tensor& v) {
  constexpr const char* op = "store_kv_cache";
  check_cuda(op, "k_cache", k_cache);
  check_same_device(op, "v_cache", v_cache, "k_cache", k_cache);
  check_same_device(op, "out_loc", out_loc, "k_cache", k_cache);
  check_same_device(op, "k", k, "k_cache", k_cache);
  check_same_device(op, "v", v, "k_cache", k_cache);
  check_dtype(op, "out_loc", out_loc, {at::kInt, at::kLong});
  check_dim(op, "out_loc", out_loc, 1);
  check_contiguous(op, "out_loc", out_loc);
  check_min_dim(op, "k_cache", k_cache, 1);
  check_same_dtype(op, "v_cache", v_cache, "k_cache", k_cache);
  check_same_layout(op, "v_cache", v_cache, "k_cache", k_cache);
  check_rows_contiguous(op, "k_cache", k_cache);
  check_no_internal_overlap(op, "k_cache", k_cache);
  check_no_internal_overlap(op, "v_cache", v_cache);
  check_min_dim(op, "k", k, 1);
  check_size(op, "k", k, 0, out_loc.size(0), "out_loc.shape[0]");
  check_same_dtype(op, "k", k, "k_cache", k_cache);
  check_same_dtype(op, "v", v, "k_cache", k_cache);
  check_same_layout(op, "v", v, "k", k);
  check_rows_contiguous(op, "k", k);
  const int64_t row = row_numel(k_cache);
  SGL_CHECK(row_numel(k) == row, op, "k must have rows of ", row, " elements like k_cache (k_cache.shape[1:] = ",
            k_cache.sizes().slice(1), "), got k.shape[1:] = ", k.sizes().slice(1));
  const int64_t elt = static_cast<int64_t>(k_cache.element_size());
  const int64_t row_bytes = row * elt;
  SGL_CHECK(row_bytes % 128 == 0, op, "k_cache rows must be a multiple of 128 bytes, got ", row_bytes,
            " bytes (shape[1:] = ", k_cache.sizes().slice(1), " of ", dtype_name(k_cache.scalar_type()), ")");
  if (out_loc.numel() > 0 && row_bytes > 0) {
    check_row_chunks(op, "k_cache", row_bytes,
                     chunk_bytes({address_of(k_cache), address_of(v_cache), address_of(k), address_of(v),
                                       static_cast<uint64_t>(k_cache.stride(0) * elt),
                                       static_cast<uint64_t>(k.stride(0) * elt), static_cast<uint64_t>(row_bytes)}));
  }
  if (out_loc.numel() == 0 || row_bytes == 0) return;
  require_kernel(op, "project", kArchs, k_cache);

  const c10::cuda::CUDAGuard guard(k_cache.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(k_cache.get_device()).stream();
  if (debug_mode()) debug_check_indices(op, "out_loc", out_loc, k_cache.size(0), "k_cache.shape[0]", stream);
  if constexpr (kBuilt) {
    StoreKvCacheParams p{};
    p.k_cache = k_cache.data_ptr();
    p.v_cache = v_cache.data_ptr();
    p.k = k.data_ptr();
    p.v = v.data_ptr();
    p.out_loc = out_loc.data_ptr();
    p.n = out_loc.size(0);
    p.num_slots = k_cache.size(0);
    p.row_bytes = row_bytes;
    p.cache_stride = k_cache.stride(0) * elt;
    p.src_stride = k.stride(0) * elt;
    p.loc_int64 = out_loc.scalar_type() == at::kLong;
    p.enable_pdl = pdl_supported(k_cache);
    check_launch(op, launch_store_kv_cache(p, stream));
  }
}

// The row-chunk limit of a gather of weight's rows into out (embedding_lookup, shuffle_rows).
void check_gather_chunks(const char* op, const char* name, const at::Tensor& out, const at::Tensor& weight) {
  if (out.numel() == 0) return;
  const int64_t elt = static_cast<int64_t>(weight.element_size());
  const int64_t row_bytes = weight.size(1) * elt;
  check_row_chunks(op, name, row_bytes,
                   chunk_bytes({address_of(out), address_of(weight), static_cast<uint64_t>(weight.stride(0) * elt),
                                static_cast<uint64_t>(row_bytes)}));
}

// out[i] = weight[indices[i] - vocab_start] for 0 <= indices[i] - vocab_start < num_valid, else
// a zero row: launch_embedding_lookup on checked tensors (weight [V, D] with a contiguous last
// dimension, out contiguous with indices.numel() rows of D).
void launch_row_gather(const char* op, at::Tensor& out, const at::Tensor& weight, const at::Tensor& indices,
                       int64_t vocab_start, int64_t num_valid, cudaStream_t stream) {
  if constexpr (kBuilt) {
    EmbeddingLookupParams p{};
    at::Tensor idx = indices;
    if (!describe_layout(idx, p.idx_layout)) {
      idx = indices.contiguous();  // NOTE: > kMaxStridedDims irregular dims: rare, one extra copy
    }
    const int64_t elt = static_cast<int64_t>(weight.element_size());
    p.out = out.data_ptr();
    p.weight = weight.data_ptr();
    p.indices = idx.data_ptr();
    p.num_indices = indices.numel();
    p.row_bytes = weight.size(1) * elt;
    p.weight_stride = weight.stride(0) * elt;
    p.vocab_start = vocab_start;
    p.num_valid = num_valid;
    p.indices_int64 = indices.scalar_type() == at::kLong;
    p.enable_pdl = pdl_supported(weight);
    check_launch(op, launch_embedding_lookup(p, stream));
  }
}

// out[...] = weight[indices[...] - vocab_start], zero rows outside the shard
void embedding_lookup(at::Tensor& out, const at::Tensor& weight, const at::Tensor& indices, int64_t vocab_start,
                      int64_t vocab_length) {
  constexpr const char* op = "embedding_lookup";
  check_cuda(op, "weight", weight);
  check_same_device(op, "indices", indices, "weight", weight);
  check_same_device(op, "out", out, "weight", weight);
  check_dtype(op, "weight", weight, {at::kBFloat16, at::kHalf, at::kFloat});
  check_dtype(op, "indices", indices, {at::kInt, at::kLong});
  check_same_dtype(op, "out", out, "weight", weight);
  check_dim(op, "weight", weight, 2);
  check_last_dim_contiguous(op, "weight", weight);
  check_dim(op, "out", out, indices.dim() + 1);
  check_leading_dims(op, "out", out, "indices", indices, indices.dim());
  check_size(op, "out", out, -1, weight.size(1), "weight.shape[1]");
  check_gather_chunks(op, "weight", out, weight);
  check_contiguous(op, "out", out);
  const int64_t vocab = weight.size(0);
  if (vocab_length < 0) {
    SGL_CHECK(vocab_start == 0, op, "vocab_start must be 0 for a plain gather (vocab_length < 0), got ",
              vocab_start);
  } else {
    SGL_CHECK(vocab_start >= 0, op, "vocab_start must be >= 0, got ", vocab_start);
    SGL_CHECK(vocab_length > 0 && vocab_length <= vocab, op, "vocab_length must be in [1, ", vocab,
              "] (weight.shape[0]), or negative for a plain gather, got ", vocab_length);
  }
  if (out.numel() == 0) return;
  require_kernel(op, "project", kArchs, weight);

  const c10::cuda::CUDAGuard guard(weight.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(weight.get_device()).stream();
  if (vocab_length < 0 && debug_mode()) {
    debug_check_indices(op, "indices", indices, vocab, "weight.shape[0]", stream);
  }
  launch_row_gather(op, out, weight, indices, vocab_length < 0 ? 0 : vocab_start,
                    vocab_length < 0 ? vocab : vocab_length, stream);
}

// output[i] = input[dst2src_map[i]]: sgl-kernel's shuffle_rows (API.md 2.3, exported by the gemm
// module), the row gather of embedding_lookup.cu for any dtype; a map entry outside
// [0, input.shape[0]) gives a row of zeros.
void shuffle_rows(const at::Tensor& input, const at::Tensor& dst2src_map, at::Tensor& output) {
  constexpr const char* op = "shuffle_rows";
  check_cuda(op, "input", input);
  check_same_device(op, "dst2src_map", dst2src_map, "input", input);
  check_same_device(op, "output", output, "input", input);
  check_dtype(op, "dst2src_map", dst2src_map, {at::kInt, at::kLong});
  check_same_dtype(op, "output", output, "input", input);
  check_dim(op, "input", input, 2);
  check_dim(op, "dst2src_map", dst2src_map, 1);
  check_dim(op, "output", output, 2);
  check_last_dim_contiguous(op, "input", input);
  check_size(op, "output", output, 0, dst2src_map.size(0), "dst2src_map.shape[0]");
  check_size(op, "output", output, 1, input.size(1), "input.shape[1]");
  check_contiguous(op, "output", output);
  check_gather_chunks(op, "input", output, input);
  if (output.numel() == 0) return;
  require_kernel(op, "project", kArchs, input);

  const c10::cuda::CUDAGuard guard(input.device());
  const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(input.get_device()).stream();
  if (debug_mode()) debug_check_indices(op, "dst2src_map", dst2src_map, input.size(0), "input.shape[0]", stream);
  launch_row_gather(op, output, input, dst2src_map, 0, input.size(0), stream);
}

// ---------------------------------------------------------------------------------------
// fast_compare_key (CPU)

void check_cpu(const char* op, const char* name, const at::Tensor& t) {
  SGL_CHECK(t.is_cpu(), op, name, " must be a CPU tensor, got device ", t.device().str());
}

// Length of the common prefix of x and y. Registered for CPU and, to reject CUDA tensors with
// this op's own message, for CUDA.
int64_t fast_compare_key(const at::Tensor& x, const at::Tensor& y) {
  constexpr const char* op = "fast_compare_key";
  check_cpu(op, "x", x);
  check_cpu(op, "y", y);
  check_dim(op, "x", x, 1);
  check_dim(op, "y", y, 1);
  check_dtype(op, "x", x, {at::kInt, at::kLong});
  check_same_dtype(op, "y", y, "x", x);
  const int64_t n = std::min(x.size(0), y.size(0));
  if (n == 0) return 0;
  if (x.scalar_type() == at::kInt) {
    return common_prefix_length(x.const_data_ptr<int32_t>(), x.stride(0), y.const_data_ptr<int32_t>(), y.stride(0), n);
  }
  return common_prefix_length(x.const_data_ptr<int64_t>(), x.stride(0), y.const_data_ptr<int64_t>(), y.stride(0), n);
}

// ---------------------------------------------------------------------------------------
// weak_ref_tensor (host code, no kernel)

// A tensor over tensor's memory (same data pointer, sizes, strides, dtype and device) that
// does not own it: its storage has no deleter and holds no reference to tensor's, so the
// memory is freed (back to the caching allocator) when the last owner goes, whatever views
// of this result remain. For CUDA-graph runners that keep a captured output's address without
// keeping the output alive.
at::Tensor weak_ref_tensor(const at::Tensor& tensor) {
  constexpr const char* op = "weak_ref_tensor";
  check_cuda(op, "tensor", tensor);
  SGL_CHECK(!tensor.is_quantized(), op, "tensor must not be a quantized tensor");
  // The conjugate / negation bits are not part of the memory: a result without them would
  // read other values. (Registered for the Conjugate and Negative keys too, below: PyTorch's
  // fallback for those keys would otherwise hand this op a resolved temporary copy, and the
  // result would point at freed memory.)
  SGL_CHECK(!tensor.is_conj() && !tensor.is_neg(), op,
            "tensor has a lazy conjugate or negation bit (call resolve_conj() / resolve_neg() first)");
  // target_device: the device is known, so no pointer query (an empty tensor's pointer may
  // be null).
  return at::for_blob(tensor.data_ptr(), tensor.sizes())
      .strides(tensor.strides())
      .options(tensor.options().requires_grad(false))
      .target_device(tensor.device())
      .make_tensor();
}

// One registration for CUDA and CPU tensors: for CPU tensors the checks raise the op's own
// "must be a CUDA tensor" message instead of the dispatcher's "could not run ... CPU".
void register_impls(torch::Library& m) {
  m.impl("custom_relu", &custom_relu);
  m.impl("fused_add_relu", &fused_add_relu);
  m.impl("store_kv_cache", &store_kv_cache);
  m.impl("embedding_lookup", &embedding_lookup);
  m.impl("shuffle_rows", &shuffle_rows);
  // A CPU op: CUDA tensors get its own "must be a CPU tensor" message.
  m.impl("fast_compare_key", &fast_compare_key);
  m.impl("weak_ref_tensor", &weak_ref_tensor);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  // out = max(input, 0), a new contiguous tensor
  m.def("custom_relu(Tensor input) -> Tensor");
  // out = max(input + bias, 0), bias broadcast over the last dimension
  m.def("fused_add_relu(Tensor input, Tensor bias) -> Tensor");
  // k_cache[out_loc[i]] = k[i], v_cache[out_loc[i]] = v[i] (sgl-kernel's op; written caches marked)
  m.def("store_kv_cache(Tensor! k_cache, Tensor! v_cache, Tensor out_loc, Tensor k, Tensor v) -> ()");
  // out = weight[indices - vocab_start], zero rows outside [vocab_start, vocab_start + vocab_length)
  m.def("embedding_lookup(Tensor! out, Tensor weight, Tensor indices, int vocab_start, int vocab_length) -> ()");
  // output[i] = input[dst2src_map[i]] (sgl-kernel's op, exported by sgl_kernel.gemm; written output marked)
  m.def("shuffle_rows(Tensor input, Tensor dst2src_map, Tensor! output) -> ()");
  // length of the common prefix of two 1-D CPU int tensors
  m.def("fast_compare_key(Tensor x, Tensor y) -> int");
  // a non-owning tensor over tensor's memory (sgl-kernel's op; the schema does not mark the alias)
  m.def("weak_ref_tensor(Tensor tensor) -> Tensor");
}

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) { register_impls(m); }

TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) { register_impls(m); }

// Tensors with a lazy conjugate / negation bit reach weak_ref_tensor itself (which refuses
// them) instead of PyTorch's fallback for these keys, which would materialize a copy.
TORCH_LIBRARY_IMPL(sgl_kernel, Conjugate, m) { m.impl("weak_ref_tensor", &weak_ref_tensor); }

TORCH_LIBRARY_IMPL(sgl_kernel, Negative, m) { m.impl("weak_ref_tensor", &weak_ref_tensor); }

}  // namespace sgl_kernel::project
