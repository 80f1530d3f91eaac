// SPDX-License-Identifier: Apache-2.0
// Bindings of the allreduce family (API.md 2.6): tensor checks, then the handle state of
// comm.h. Ops with only integer arguments are registered from their C++ type (API.md marks
// their schemas "inferred": arguments _0, _1, ...) as catch-all kernels, since no tensor
// picks a dispatch key for them.
#include <cstdint>
#include <stdexcept>
#include <tuple>
#include <vector>

#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "allreduce/comm.h"
#include "sgl_kernel/check.h"

namespace sgl_kernel::allreduce {

namespace {

constexpr const char* kArchs = SGL_KERNEL_ARCHS_ALLREDUCE;

// Comm reports errors as std::runtime_error with the op already named.
template <typename F>
auto guarded(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const std::runtime_error& e) {
    TORCH_CHECK(false, e.what());
  }
}

int64_t init_custom_ar(const std::vector<int64_t>& ipc_tensors, const at::Tensor& rank_data, int64_t rank,
                       bool full_nvlink) {
  const char* op = "init_custom_ar";
  check_cuda(op, "rank_data", rank_data);
  check_dtype(op, "rank_data", rank_data, {at::kByte});
  check_contiguous(op, "rank_data", rank_data);
  require_kernel(op, "allreduce", kArchs, rank_data);
  SGL_CHECK(rank >= 0 && rank < static_cast<int64_t>(ipc_tensors.size()), op, "rank must be in [0, ",
            ipc_tensors.size(), ") (len(ipc_tensors)), got ", rank);
  const c10::cuda::CUDAGuard guard(rank_data.device());
  return guarded([&] {
    return create_comm(rank_data.get_device(), ipc_tensors, rank_data.data_ptr(), rank_data.nbytes(),
                       static_cast<int>(rank), full_nvlink);
  });
}

void dispose(int64_t fa) {
  guarded([&] {
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(lookup_comm("dispose", fa).device()));
    destroy_comm(fa);
  });
}

void all_reduce(int64_t fa, const at::Tensor& inp, at::Tensor& out, int64_t reg_buffer, int64_t reg_buffer_sz_bytes) {
  const char* op = "all_reduce";
  check_cuda(op, "inp", inp);
  check_dtype(op, "inp", inp, {at::kFloat, at::kHalf, at::kBFloat16});
  check_same_device(op, "out", out, "inp", inp);
  check_same_dtype(op, "out", out, "inp", inp);
  check_same_shape(op, "out", out, "inp", inp);
  check_contiguous(op, "inp", inp);
  check_contiguous(op, "out", out);
  const int64_t bytes = static_cast<int64_t>(inp.nbytes());
  SGL_CHECK(bytes % 16 == 0, op, "inp must hold a multiple of 16 bytes, got ", bytes, " (", inp.numel(),
            " elements of ", dtype_name(inp.scalar_type()), ")");
  SGL_CHECK(reinterpret_cast<uintptr_t>(inp.data_ptr()) % 16 == 0, op, "inp must be 16-byte aligned");
  SGL_CHECK(reinterpret_cast<uintptr_t>(out.data_ptr()) % 16 == 0, op, "out must be 16-byte aligned");
  require_kernel(op, "allreduce", kArchs, inp);
  SGL_CHECK(reg_buffer_sz_bytes >= 0, op, "reg_buffer_sz_bytes must be >= 0, got ", reg_buffer_sz_bytes);
  guarded([&] {
    Comm& comm = lookup_comm(op, fa);
    SGL_CHECK(comm.device() == inp.get_device(), op, "inp is on cuda:", inp.get_device(),
              " but the handle was created on cuda:", comm.device());
    const c10::cuda::CUDAGuard guard(inp.device());
    const cudaStream_t stream = c10::cuda::getCurrentCUDAStream(inp.get_device()).stream();
    const Dtype dt = inp.scalar_type() == at::kFloat  ? Dtype::kFloat32
                     : inp.scalar_type() == at::kHalf ? Dtype::kFloat16
                                                      : Dtype::kBFloat16;
    comm.all_reduce(stream, dt, inp.data_ptr(), out.data_ptr(), bytes, reinterpret_cast<void*>(reg_buffer),
                    reg_buffer_sz_bytes);
  });
}

std::tuple<std::vector<int64_t>, std::vector<int64_t>> get_graph_buffer_ipc_meta(int64_t fa) {
  return guarded([&] {
    Comm& comm = lookup_comm("get_graph_buffer_ipc_meta", fa);
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(comm.device()));
    auto [handles, offsets] = comm.graph_buffer_ipc_meta();
    return std::make_tuple(std::move(handles), std::move(offsets));
  });
}

void register_buffer(int64_t fa, std::vector<int64_t> fake_ipc_ptrs) {
  guarded([&] {
    Comm& comm = lookup_comm("register_buffer", fa);
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(comm.device()));
    comm.register_buffer(fake_ipc_ptrs);
  });
}

void register_graph_buffers(int64_t fa, std::vector<std::vector<int64_t>> handles,
                            std::vector<std::vector<int64_t>> offsets) {
  guarded([&] {
    Comm& comm = lookup_comm("register_graph_buffers", fa);
    const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(comm.device()));
    comm.register_graph_buffers(handles, offsets);
  });
}

int64_t meta_size() { return kMetaSize; }

void register_impls(torch::Library& m) {
  m.impl("init_custom_ar", &init_custom_ar);
  m.impl("all_reduce", &all_reduce);
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  // handle for rank `rank` of len(ipc_tensors) ranks whose signal buffers are ipc_tensors
  m.def("init_custom_ar(int[] ipc_tensors, Tensor rank_data, int rank, bool full_nvlink) -> int");
  m.def("dispose", &dispose);
  // out = sum over ranks of inp (copied into reg_buffer first when reg_buffer != 0)
  m.def("all_reduce(int fa, Tensor inp, Tensor! out, int reg_buffer, int reg_buffer_sz_bytes) -> ()");
  m.def("get_graph_buffer_ipc_meta", &get_graph_buffer_ipc_meta);
  m.def("register_buffer", &register_buffer);
  m.def("register_graph_buffers", &register_graph_buffers);
  m.def("meta_size", &meta_size);
}

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) { register_impls(m); }

// CPU tensors reach the checks and get the op's own "must be a CUDA tensor" message.
TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) { register_impls(m); }

}  // namespace sgl_kernel::allreduce
