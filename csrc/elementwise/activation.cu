// SPDX-License-Identifier: Apache-2.0
// Launchers of the gated activations (kernels in activation.cuh).
#include <algorithm>

#include "elementwise/activation.cuh"
#include "sgl_kernel/launch.cuh"

namespace sgl_kernel::elementwise {

namespace {

constexpr int kThreads = 256;

template <typename T, Activation kAct>
cudaError_t launch_typed(const ActAndMulParams<T>& p, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  const int64_t total = p.rows * p.d;
  if (total == 0) return cudaSuccess;
  const int64_t total_vec = total / kVec;
  const bool vec_ok = p.d % kVec == 0 && is_aligned16(p.out) && is_aligned16(p.input) &&
                      total_vec < (int64_t{1} << 32) - kThreads * 4;
  if (vec_ok) {
    const FastDivmod d_vec(static_cast<uint32_t>(p.d / kVec));
    // NOTE: two vectors per thread once the grid is large; small shapes keep one so the
    // work spreads over more blocks (decode latency).
    if (total_vec >= int64_t{1} << 20) {
      constexpr int kUnroll = 2;
      const dim3 grid(static_cast<uint32_t>(ceil_div<int64_t>(total_vec, kThreads * kUnroll)));
      return launch_kernel(act_and_mul_vec_kernel<T, kAct, kThreads, kUnroll>, grid, dim3(kThreads), 0, stream,
                           p.enable_pdl, p.out, p.input, d_vec, static_cast<uint32_t>(total_vec));
    }
    const dim3 grid(static_cast<uint32_t>(ceil_div<int64_t>(total_vec, kThreads)));
    return launch_kernel(act_and_mul_vec_kernel<T, kAct, kThreads, 1>, grid, dim3(kThreads), 0, stream,
                         p.enable_pdl, p.out, p.input, d_vec, static_cast<uint32_t>(total_vec));
  }
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
