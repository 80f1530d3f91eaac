// SPDX-License-Identifier: Apache-2.0
// The check vocabulary of the bindings layer (csrc/<family>/<family>_ops.cc). Every failed
// check raises RuntimeError with a message that starts with "sgl_kernel.<op>: " and names
// the argument, the requirement and the actual value (API.md section 1.4).
//
// Host-only and torch-dependent: never include this from a .cu file.
#pragma once

#include <initializer_list>
#include <string>

#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <cuda_runtime.h>

namespace sgl_kernel {

// "torch.bfloat16", as Python prints dtypes.
std::string dtype_name(at::ScalarType t);

#define SGL_CHECK(cond, op, ...) TORCH_CHECK((cond), "sgl_kernel.", (op), ": ", __VA_ARGS__)

// The argument is a CUDA tensor.
void check_cuda(const char* op, const char* name, const at::Tensor& t);
// The argument is on the same device as `ref` (both named in the message).
void check_same_device(const char* op, const char* name, const at::Tensor& t, const char* ref_name,
                       const at::Tensor& ref);
// The argument's dtype is one of `allowed`.
void check_dtype(const char* op, const char* name, const at::Tensor& t,
                 std::initializer_list<at::ScalarType> allowed);
// The argument has the dtype of `ref`.
void check_same_dtype(const char* op, const char* name, const at::Tensor& t, const char* ref_name,
                      const at::Tensor& ref);
void check_dim(const char* op, const char* name, const at::Tensor& t, int64_t dim);
void check_min_dim(const char* op, const char* name, const at::Tensor& t, int64_t min_dim);
void check_contiguous(const char* op, const char* name, const at::Tensor& t);
void check_last_dim_contiguous(const char* op, const char* name, const at::Tensor& t);
// A tensor the op writes has no two elements at one address (torch's internal-overlap test:
// a dimension of size > 1 with stride 0, as from expand()); such a tensor would be written by
// several threads at once. Overlaps torch cannot decide cheaply are not refused (as torch's
// in-place ops do).
void check_no_internal_overlap(const char* op, const char* name, const at::Tensor& t);
// The written tensor `t` shares no memory with `other`, which the op reads while it writes `t`
// (torch's get_overlap_status; overlaps it cannot decide cheaply are not refused).
void check_no_overlap(const char* op, const char* name, const at::Tensor& t, const char* other_name,
                      const at::Tensor& other);
// t.size(dim) == expected; `what` explains the expectation, e.g. "input.shape[-1] / 2".
void check_size(const char* op, const char* name, const at::Tensor& t, int64_t dim, int64_t expected,
                const char* what);
// t.shape == ref.shape.
void check_same_shape(const char* op, const char* name, const at::Tensor& t, const char* ref_name,
                      const at::Tensor& ref);
// t.shape[:dim] == ref.shape[:dim] for the leading `dims` dimensions.
void check_leading_dims(const char* op, const char* name, const at::Tensor& t, const char* ref_name,
                        const at::Tensor& ref, int64_t dims);

// The family's kernels exist for the GPU that holds `t`: raises a RuntimeError naming the
// op, the GPU and its arch, the archs the build holds, and how to rebuild. `archs` is the
// family's SGL_KERNEL_ARCHS_<FAMILY> (empty when the family was not built).
void require_kernel(const char* op, const char* family, const char* archs, const at::Tensor& t);

// Whether a kernel launched for the device of `t` may use programmatic dependent launch.
bool pdl_supported(const at::Tensor& t);

// SGL_KERNEL_DEBUG=1: index values read on the device (positions, cache slots) are validated
// and a bad one raises instead of being skipped (API.md 1.4; the op may synchronise).
bool debug_mode();

// Whether the op may synchronise `stream` from the host (debug mode's checks): false while the
// stream is being captured into a CUDA graph, and when the query fails (its error is cleared).
bool host_sync_allowed(cudaStream_t stream);

// For debug_mode(): raise if any value of the index tensor `idx` (any shape, int32/int64) lies
// outside [0, limit), naming the first one (`what` says what the index addresses).
// Synchronises; does nothing while `stream` is being captured into a CUDA graph.
void debug_check_indices(const char* op, const char* name, const at::Tensor& idx, int64_t limit, const char* what,
                         cudaStream_t stream);

// Raise if a launcher returned an error.
void check_launch(const char* op, cudaError_t err);

}  // namespace sgl_kernel
