// SPDX-License-Identifier: Apache-2.0
// Launchers of the gated activations (kernels in activation.cuh).
#include <algorithm>
#include <cstdint>

#include "elementwise/activation.cuh"
#include "sgl_kernel/launch.cuh"

namespace sgl_kernel::elementwise {

namespace {

constexpr int kThreads = 256;  // the scalar kernel and the vector kernel below 16 MB of output

// Launch the vector kernel with kBytes per load if d and the pointers allow it; returns false
// (nothing launched) otherwise.
template <typename T, Activation kAct, int kBytes, int kUnroll, LoadPolicy kLoad, int kBlock = kThreads>
bool try_launch_vec(const ActAndMulParams<T>& p, cudaStream_t stream, cudaError_t& err) {
  constexpr int kElems = kBytes / static_cast<int>(sizeof(T));
  const auto aligned = [](const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % kBytes == 0; };
  const int64_t total_vec = p.rows * p.d / kElems;
  if (p.d % kElems != 0 || !aligned(p.out) || !aligned(p.input) ||
      total_vec >= (int64_t{1} << 32) - kBlock * kUnroll) {
    return false;
  }
  const FastDivmod d_vec(static_cast<uint32_t>(p.d / kElems));
  const dim3 grid(static_cast<uint32_t>(ceil_div<int64_t>(total_vec, kBlock * kUnroll)));
  // One vector a thread: the wait with the address before it (kPin, activation.cuh).
  constexpr bool kPin = kUnroll == 1;
  err = launch_kernel(act_and_mul_vec_kernel<T, kAct, kBlock, kElems, kUnroll, kLoad, kPin>, grid, dim3(kBlock), 0,
                      stream, p.enable_pdl, p.out, p.input, d_vec, static_cast<uint32_t>(total_vec));
  return true;
}

template <typename T, Activation kAct>
cudaError_t launch_typed(const ActAndMulParams<T>& p, cudaStream_t stream) {
  const int64_t total = p.rows * p.d;
  if (total == 0) return cudaSuccess;
  const int64_t out_bytes = total * static_cast<int64_t>(sizeof(T));
  cudaError_t err = cudaSuccess;
  // NOTE: launch shapes from the H200 sweep of benchmark/elementwise/tune_act_and_mul.cu
  // (PDL on, decode shapes L2-hot, prefill shapes from HBM):
  //   out < 64 KB   4-byte loads: most threads, T=1 d=14336 0.88 us (16-byte loads 1.23 us)
  //   out < 1.5 MB  8-byte loads: T=16 d=14336 1.27 us (16-byte 1.39 us)
  //   out < 16 MB   16-byte loads: T=128 d=14336 2.85 us
  //   (the sweep of an older kernel with read-only loads; one vector a thread since session 19:
  //   plain loads, kPin, activation.cuh's NOTE)
  //   larger        16-byte plain loads, 2 vectors per thread; silu on 512 threads (session 18, six
  //                 rounds on two machines, GB/s at 32768 x 14336 / 16384 x 14336 / 32768 x 4096:
  //                 4385-4396 / 4336-4360 / 4278-4288; 256 threads 4322-4352 / 4303-4318 /
  //                 4227-4253; torch.compile's kernel, 128 threads one vector each,
  //                 4353-4363 / 4313-4325 / 4246-4263; read-only loads ~4050-4180; copy 4265)
  //                 gelu / gelu_tanh keep 256 threads: their 512-thread instances take 52
  //                 registers, 2 blocks an SM, and ran 5 % behind torch.compile (bf16
  //                 gelu_tanh T=32768 d=14336 700.5 against 662.9 us).
  using LP = LoadPolicy;
  if (out_bytes >= (int64_t{16} << 20)) {
    constexpr int kLargeBlock = kAct == Activation::kSilu ? 512 : kThreads;
    if (try_launch_vec<T, kAct, 16, 2, LP::kDefault, kLargeBlock>(p, stream, err)) return err;
  } else if (out_bytes >= (int64_t{3} << 19)) {
    if (try_launch_vec<T, kAct, 16, 1, LP::kDefault>(p, stream, err)) return err;
  }
  // Mid-small outputs, and the fallbacks when d or the pointers are not 16-byte aligned.
  if (out_bytes >= (int64_t{64} << 10)) {
    if (try_launch_vec<T, kAct, 8, 1, LP::kDefault>(p, stream, err)) return err;
  }
  if (try_launch_vec<T, kAct, 4, 1, LP::kDefault>(p, stream, err)) return err;
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
