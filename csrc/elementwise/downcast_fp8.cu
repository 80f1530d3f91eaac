// SPDX-License-Identifier: Apache-2.0
// downcast_fp8: scale fp16/bf16 K/V rows to e4m3 and scatter them into KV-cache slots
// loc[t] * mult + offset. One 16-byte input vector (8 halves) -> one 8-byte output vector per
// thread; a slot outside [0, slots) is skipped (SGL_KERNEL_DEBUG=1: the bindings raise first).
#include <cuda_fp8.h>

#include <cstdint>

#include "elementwise/elementwise.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::elementwise {

namespace {

constexpr int kThreads = 256;

__device__ __forceinline__ uint8_t to_e4m3(float x, float scale) {
  // x / scale with IEEE division; clamp to +-448 and round to nearest (saturating convert).
  const float q = fminf(fmaxf(__fdiv_rn(x, scale), -448.0f), 448.0f);
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3));
}

// Grid: x over 8-element chunks of all rows of k then v (2 * tokens * row / 8 chunks).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    downcast_fp8_kernel(const DowncastFp8Params<T> p, const FastDivmod chunks_per_row, const uint32_t total_chunks) {
  SGL_PDL_WAIT();
  const uint32_t i = blockIdx.x * kThreads + threadIdx.x;
  if (i < total_chunks) {
    const uint32_t per_tensor = total_chunks / 2;
    const bool is_v = i >= per_tensor;
    uint32_t t, c;
    chunks_per_row.divmod(is_v ? i - per_tensor : i, t, c);
    const int64_t slot = p.loc[t] * p.mult + p.offset;
    if (slot >= 0 && slot < p.slots) {
      const T* src = (is_v ? p.v : p.k) + static_cast<int64_t>(t) * p.row + static_cast<int64_t>(c) * 8;
      const float scale = is_v ? *p.v_scale : *p.k_scale;
      const Vec16<T> x = load16<T, LoadPolicy::kStream>(src);
      Vec<uint8_t, 8> q;
#pragma unroll
      for (int e = 0; e < 8; ++e) q[e] = to_e4m3(to_float(x[e]), scale);
      uint8_t* dst = (is_v ? p.v_out : p.k_out) + slot * p.row + static_cast<int64_t>(c) * 8;
      *reinterpret_cast<Vec<uint8_t, 8>*>(dst) = q;
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

}  // namespace

template <typename T>
cudaError_t launch_downcast_fp8(const DowncastFp8Params<T>& p, cudaStream_t stream) {
  if (p.tokens == 0 || p.row == 0) return cudaSuccess;
  if (p.row % 8 != 0) return cudaErrorInvalidValue;
  const int64_t total = 2 * p.tokens * (p.row / 8);
  if (total >= (int64_t{1} << 32) - kThreads) return cudaErrorInvalidValue;
  return launch_kernel(downcast_fp8_kernel<T>, dim3(static_cast<uint32_t>(ceil_div<int64_t>(total, kThreads))),
                       dim3(kThreads), 0, stream, p.enable_pdl, p, FastDivmod(static_cast<uint32_t>(p.row / 8)),
                       static_cast<uint32_t>(total));
}

template cudaError_t launch_downcast_fp8<half>(const DowncastFp8Params<half>&, cudaStream_t);
template cudaError_t launch_downcast_fp8<__nv_bfloat16>(const DowncastFp8Params<__nv_bfloat16>&, cudaStream_t);

}  // namespace sgl_kernel::elementwise
