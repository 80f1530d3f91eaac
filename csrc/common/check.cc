// SPDX-License-Identifier: Apache-2.0
// Definitions of the bindings' check vocabulary (include/sgl_kernel/check.h).
#include "sgl_kernel/check.h"

#include <ATen/MemoryOverlap.h>
#include <ATen/ops/any.h>
#include <ATen/ops/argmax.h>
#include <ATen/ops/ge.h>
#include <ATen/ops/logical_or.h>
#include <ATen/ops/lt.h>

#include <cstdlib>
#include <sstream>

#include "sgl_kernel/runtime.h"

namespace sgl_kernel {

std::string dtype_name(at::ScalarType t) {
  switch (t) {
    case at::ScalarType::Float: return "torch.float32";
    case at::ScalarType::Double: return "torch.float64";
    case at::ScalarType::Half: return "torch.float16";
    case at::ScalarType::BFloat16: return "torch.bfloat16";
    case at::ScalarType::Float8_e4m3fn: return "torch.float8_e4m3fn";
    case at::ScalarType::Float8_e5m2: return "torch.float8_e5m2";
    case at::ScalarType::Char: return "torch.int8";
    case at::ScalarType::Byte: return "torch.uint8";
    case at::ScalarType::Short: return "torch.int16";
    case at::ScalarType::Int: return "torch.int32";
    case at::ScalarType::Long: return "torch.int64";
    case at::ScalarType::Bool: return "torch.bool";
    default: return std::string("torch.") + c10::toString(t);
  }
}

namespace {
std::string shape_str(const at::Tensor& t) {
  std::ostringstream os;
  os << "[";
  for (int64_t i = 0; i < t.dim(); ++i) os << (i ? ", " : "") << t.size(i);
  os << "]";
  return os.str();
}
}  // namespace

void check_cuda(const char* op, const char* name, const at::Tensor& t) {
  SGL_CHECK(t.is_cuda(), op, name, " must be a CUDA tensor, got device ", t.device().str());
}

void check_same_device(const char* op, const char* name, const at::Tensor& t, const char* ref_name,
                       const at::Tensor& ref) {
  SGL_CHECK(t.device() == ref.device(), op, name, " must be on the device of ", ref_name, " (",
            ref.device().str(), "), got ", t.device().str());
}

void check_dtype(const char* op, const char* name, const at::Tensor& t,
                 std::initializer_list<at::ScalarType> allowed) {
  for (at::ScalarType a : allowed) {
    if (t.scalar_type() == a) return;
  }
  std::string list;
  size_t i = 0;
  for (at::ScalarType a : allowed) {
    if (i > 0) list += (i + 1 == allowed.size()) ? " or " : ", ";
    list += dtype_name(a);
    ++i;
  }
  SGL_CHECK(false, op, name, " must have dtype ", list, ", got ", dtype_name(t.scalar_type()));
}

void check_same_dtype(const char* op, const char* name, const at::Tensor& t, const char* ref_name,
                      const at::Tensor& ref) {
  SGL_CHECK(t.scalar_type() == ref.scalar_type(), op, name, " must have dtype ",
            dtype_name(ref.scalar_type()), " (same as ", ref_name, "), got ",
            dtype_name(t.scalar_type()));
}

void check_dim(const char* op, const char* name, const at::Tensor& t, int64_t dim) {
  SGL_CHECK(t.dim() == dim, op, name, " must be ", dim, "-D, got ", t.dim(), "-D tensor of shape ",
            shape_str(t));
}

void check_min_dim(const char* op, const char* name, const at::Tensor& t, int64_t min_dim) {
  SGL_CHECK(t.dim() >= min_dim, op, name, " must have at least ", min_dim, " dimension(s), got shape ",
            shape_str(t));
}

void check_contiguous(const char* op, const char* name, const at::Tensor& t) {
  SGL_CHECK(t.is_contiguous(), op, name, " must be contiguous, got shape ", shape_str(t),
            " with strides ", t.strides());
}

void check_last_dim_contiguous(const char* op, const char* name, const at::Tensor& t) {
  SGL_CHECK(t.dim() == 0 || t.stride(-1) == 1 || t.size(-1) <= 1, op, name,
            " must have a contiguous last dimension (stride(-1) == 1), got strides ", t.strides());
}

void check_no_internal_overlap(const char* op, const char* name, const at::Tensor& t) {
  SGL_CHECK(at::has_internal_overlap(t) != at::MemOverlap::Yes, op, name,
            " is written by the op but has elements that share memory (a dimension of size > 1 with stride 0), "
            "got shape ", t.sizes(), ", strides ", t.strides(), "; pass a tensor with its own memory (clone())");
}

void check_no_overlap(const char* op, const char* name, const at::Tensor& t, const char* other_name,
                      const at::Tensor& other) {
  const at::MemOverlapStatus status = at::get_overlap_status(t, other);
  SGL_CHECK(status != at::MemOverlapStatus::Full && status != at::MemOverlapStatus::Partial, op, name,
            " must not share memory with ", other_name, " (the op writes ", name, " while it reads ", other_name,
            "); pass separate tensors");
}

void check_size(const char* op, const char* name, const at::Tensor& t, int64_t dim, int64_t expected,
                const char* what) {
  const int64_t d = dim < 0 ? dim + t.dim() : dim;
  SGL_CHECK(d >= 0 && d < t.dim(), op, name, " must have a dimension ", dim, ", got shape ",
            shape_str(t));
  SGL_CHECK(t.size(d) == expected, op, name, ".shape[", dim, "] must be ", expected, " (", what,
            "), got ", t.size(d), " (shape ", shape_str(t), ")");
}

void check_same_shape(const char* op, const char* name, const at::Tensor& t, const char* ref_name,
                      const at::Tensor& ref) {
  SGL_CHECK(t.sizes() == ref.sizes(), op, name, " must have the shape of ", ref_name, " ", shape_str(ref),
            ", got ", shape_str(t));
}

void check_leading_dims(const char* op, const char* name, const at::Tensor& t, const char* ref_name,
                        const at::Tensor& ref, int64_t dims) {
  bool ok = t.dim() >= dims && ref.dim() >= dims;
  for (int64_t i = 0; ok && i < dims; ++i) ok = t.size(i) == ref.size(i);
  SGL_CHECK(ok, op, name, " must have the leading dimensions of ", ref_name, " ", shape_str(ref),
            ", got shape ", shape_str(t));
}

void require_kernel(const char* op, const char* family, const char* archs, const at::Tensor& t) {
  const int device = t.get_device();
  int cc = 0;
  try {
    cc = device_capability(device);
  } catch (const std::exception& e) {
    SGL_CHECK(false, op, e.what());
  }
  const std::string list(archs);
  if (archs_cover(list, cc)) return;
  const int major = cc / 10, minor = cc % 10;
  cudaDeviceProp prop{};
  const bool have_name = cudaGetDeviceProperties(&prop, device) == cudaSuccess;
  const bool arch_specific = cc == 90 || (cc >= 100 && cc <= 103) || cc == 120 || cc == 121;
  SGL_CHECK(false, op, "no kernel for this GPU: ", have_name ? prop.name : "CUDA device",
            " (cuda:", device, ", sm_", cc, ") is not covered by this build's ", family,
            " family, which holds ", format_archs(list),
            list.empty() ? " (the family was not compiled: none of the requested archs support it)"
                         : "",
            ". Rebuild for this GPU: SGL_KERNEL_CUDA_ARCHS=\"", major, ".", minor,
            arch_specific ? "a" : "", "\" pip install --no-build-isolation . "
            "(or leave SGL_KERNEL_CUDA_ARCHS unset to build for the visible GPU).");
}

bool pdl_supported(const at::Tensor& t) {
  // SGL_KERNEL_DISABLE_PDL=1 turns programmatic dependent launch off everywhere (debugging,
  // A/B timing); read once.
  static const bool disabled = [] {
    const char* v = std::getenv("SGL_KERNEL_DISABLE_PDL");
    return v != nullptr && v[0] != '\0' && v[0] != '0';
  }();
  return !disabled && device_capability(t.get_device()) >= 90;
}

bool debug_mode() {
  // Read at every call (one getenv), so tests and users can switch it at run time.
  const char* v = std::getenv("SGL_KERNEL_DEBUG");
  return v != nullptr && v[0] != '\0' && v[0] != '0';
}

bool host_sync_allowed(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  if (cudaStreamIsCapturing(stream, &status) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return status == cudaStreamCaptureStatusNone;
}

void debug_check_indices(const char* op, const char* name, const at::Tensor& idx, int64_t limit, const char* what,
                         cudaStream_t stream) {
  if (!host_sync_allowed(stream)) return;  // no sync inside a graph capture
  const at::Tensor flat = idx.reshape({-1}).to(at::kLong);  // int64 compares: limit may not fit int32
  const at::Tensor bad = flat.lt(0).logical_or(flat.ge(limit));
  if (!bad.any().item<bool>()) return;
  const int64_t pos = bad.to(at::kByte).argmax().item<int64_t>();
  SGL_CHECK(false, op, name, idx.dim() == 1 ? "" : ".flatten()", "[", pos, "] = ", flat[pos].item<int64_t>(),
            " is out of range [0, ", limit, ") (", what, ") (SGL_KERNEL_DEBUG=1)");
}

void check_launch(const char* op, cudaError_t err) {
  if (err == cudaSuccess) return;
  cudaGetLastError();  // a launch error is not sticky: clear it for the next op
  SGL_CHECK(false, op, "CUDA error during launch: ", cudaGetErrorName(err), " (",
            cudaGetErrorString(err), ")");
}

}  // namespace sgl_kernel
