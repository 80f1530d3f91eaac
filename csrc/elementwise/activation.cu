// SPDX-License-Identifier: Apache-2.0
// Launchers of the gated activations (kernels in activation.cuh).
#include <algorithm>
#include <cstdint>

#include "elementwise/activation.cuh"
#include "sgl_kernel/launch.cuh"

namespace sgl_kernel::elementwise {

namespace {

// Launch the vector kernel with kBytes per load if d and the pointers allow it; returns false
// (nothing launched) otherwise.
template <typename T, Activation kAct, int kThreads, int kBytes, int kUnroll>
bool try_launch_vec(const ActAndMulParams<T>& p, cudaStream_t stream, cudaError_t& err) {
  constexpr int kElems = kBytes / static_cast<int>(sizeof(T));
  static_assert(kElems >= 1, "vector narrower than one element");
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % kBytes == 0; };
  const int64_t total_vec = p.rows * p.d / kElems;
  if (p.d % kElems != 0 || !aligned(p.out) || !aligned(p.input) ||
      total_vec >= (int64_t{1} << 32) - kThreads * kUnroll) {
    return false;
  }
  const FastDivmod d_vec(static_cast<uint32_t>(p.d / kElems));
  const dim3 grid(static_cast<uint32_t>(ceil_div<int64_t>(total_vec, kThreads * kUnroll)));
  if (p.rows * 2 * p.d < (int64_t{1} << 32)) {
    err = launch_kernel(act_and_mul_vec_kernel<T, kAct, kThreads, kElems, kUnroll, true>, grid, dim3(kThreads), 0,
                        stream, p.enable_pdl, p.out, p.input, d_vec, static_cast<uint32_t>(total_vec));
  } else {
    err = launch_kernel(act_and_mul_vec_kernel<T, kAct, kThreads, kElems, kUnroll, false>, grid, dim3(kThreads), 0,
                        stream, p.enable_pdl, p.out, p.input, d_vec, static_cast<uint32_t>(total_vec));
  }
  return true;
}

template <typename T, Activation kAct>
cudaError_t launch_typed(const ActAndMulParams<T>& p, cudaStream_t stream) {
  const int64_t total = p.rows * p.d;
  if (total == 0) return cudaSuccess;
  cudaError_t err = cudaSuccess;
  // NOTE: launch shapes from the H200 sweep of benchmark/elementwise/tune_act_and_mul.cu:
  // large outputs: 16-byte loads, two vectors per thread (more bytes in flight);
  // mid: one vector per thread; decode-sized: 8-byte loads over twice the threads.
  if (total >= (int64_t{1} << 23)) {
    if (try_launch_vec<T, kAct, 256, 16, 2>(p, stream, err)) return err;
  } else if (total >= (int64_t{1} << 18)) {
    if (try_launch_vec<T, kAct, 256, 16, 1>(p, stream, err)) return err;
  } else {
    if (try_launch_vec<T, kAct, 128, 8, 1>(p, stream, err)) return err;
  }
  // Narrower vectors for d or pointers that are not 16-byte aligned.
  if (try_launch_vec<T, kAct, 256, 8, 1>(p, stream, err)) return err;
  if (try_launch_vec<T, kAct, 256, 4, 1>(p, stream, err)) return err;
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>(ceil_div<int64_t>(total, kThreads), int64_t{1} << 20);
  return launch_kernel(act_and_mul_scalar_kernel<T, kAct, kThreads>, dim3(static_cast<uint32_t>(blocks)),
                       dim3(kThreads), 0, stream, p.enable_pdl, p.out, p.input, p.d, total);
}

}  // namespace

template <typename T>
cudaError_t launch_act_and_mul(Activation act, const ActAndMulParams<T>& params, cudaStream_t stream) {
  switch (act) {
    case Activation::kSilu: return launch_typed<T, Activation::kSilu>(params, stream);
    case Activation::kGelu: return launch_typed<T, Activation::kGelu>(params, stream);
    case Activation::kGeluTanh: return launch_typed<T, Activation::kGeluTanh>(params, stream);
  }
  return cudaErrorInvalidValue;
}

template cudaError_t launch_act_and_mul<float>(Activation, const ActAndMulParams<float>&, cudaStream_t);
template cudaError_t launch_act_and_mul<half>(Activation, const ActAndMulParams<half>&, cudaStream_t);
template cudaError_t launch_act_and_mul<__nv_bfloat16>(Activation, const ActAndMulParams<__nv_bfloat16>&,
                                                       cudaStream_t);

}  // namespace sgl_kernel::elementwise
