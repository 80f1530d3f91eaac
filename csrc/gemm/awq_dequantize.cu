// SPDX-License-Identifier: Apache-2.0
// awq_dequantize: out[k, n] = (w[k, n] - z[k / G, n]) * scales[k / G, n], with w and z the
// 4-bit fields of qweight [K, N / 8] and qzeros [K / G, N / 8] in AWQ order.
//
// Memory-bound (4 bytes read, 16 written per word), one int32 word -> one 16-byte store:
//   * A thread owns one column word and kRows (4) consecutive rows; it issues the kRows qweight
//     loads first, keeps the group's scales (16 bytes) and zeros (one word) in registers and
//     reloads them only when its rows cross a group boundary.
//   * AWQ order puts logical columns (2j, 2j + 1) in nibbles j and j + 4, i.e. in bits
//     [4j, 4j + 4) and [16 + 4j, 20 + 4j): (q >> 4j) & 0x000F000F holds both, one per 16-bit
//     half. OR-ing in the bits of 1024 (fp16 0x6400) or 128 (bf16 0x4300) makes that word the
//     pair (1024 + w) in fp16 / (128 + w) in bf16, exactly: no integer-to-float conversion.
//   * (1024 + w) - (1024 + z) = w - z is exact, and (w - z) * s has at most 15 (fp16) / 12
//     (bf16) significant bits before rounding, so the packed half2/bfloat162 multiply rounds the
//     exact product once, like the fp32 reference: the result is bit-exact.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "gemm/gemm.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::gemm {

namespace {

template <typename T>
struct AwqPacked;

template <>
struct AwqPacked<half> {
  using T2 = half2;
  static constexpr uint32_t kMagic = 0x64006400u;  // (1024, 1024) in fp16
};

template <>
struct AwqPacked<__nv_bfloat16> {
  using T2 = __nv_bfloat162;
  static constexpr uint32_t kMagic = 0x43004300u;  // (128, 128) in bf16
};

// The 8 values of a word as 4 pairs (logical columns 2j, 2j + 1), each offset by the magic.
template <typename T>
__device__ __forceinline__ void unpack_biased(uint32_t q, typename AwqPacked<T>::T2 (&out)[4]) {
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    const uint32_t bits = ((q >> (4 * j)) & 0x000F000Fu) | AwqPacked<T>::kMagic;
    out[j] = *reinterpret_cast<const typename AwqPacked<T>::T2*>(&bits);
  }
}

constexpr int kThreads = 256;

// block (bx, kThreads / bx): x over column words, y over chunks of kRows rows; the grid loops
// over row chunks when there are more than gridDim.y * blockDim.y of them.
template <typename T, int kRows, bool kVecScales>
__global__ void __launch_bounds__(kThreads) awq_dequantize_kernel(const AwqDequantParams p) {
  using T2 = typename AwqPacked<T>::T2;
  const int64_t word = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  SGL_PDL_WAIT();
  if (word >= p.words) return;
  const T* scales = static_cast<const T*>(p.scales);
  T* out = static_cast<T*>(p.out);
  const int64_t n = p.words * 8;

  for (int64_t row0 = (static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y) * kRows; row0 < p.k;
       row0 += static_cast<int64_t>(gridDim.y) * blockDim.y * kRows) {
    const int rows = p.k - row0 < kRows ? static_cast<int>(p.k - row0) : kRows;
    uint32_t q[kRows];
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (i < rows) {
        q[i] = load_vec<Vec<uint32_t, 1>, LoadPolicy::kStream>(p.qweight + (row0 + i) * p.qweight_stride + word)[0];
      }
    }
    int64_t group = row0 / p.group_size;
    int64_t next_group_row = (group + 1) * p.group_size;
    T2 zero[4];
    T2 scale[4];
    auto load_group = [&]() {
      unpack_biased<T>(static_cast<uint32_t>(p.qzeros[group * p.qzeros_stride + word]), zero);
      const T* s = scales + group * p.scales_stride + word * 8;
      if constexpr (kVecScales) {
        const Vec16<T> v = load16(s);
#pragma unroll
        for (int j = 0; j < 4; ++j) scale[j] = T2{v[2 * j], v[2 * j + 1]};
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) scale[j] = T2{s[2 * j], s[2 * j + 1]};
      }
    };
    load_group();
#pragma unroll
    for (int i = 0; i < kRows; ++i) {
      if (i < rows) {
        if (row0 + i == next_group_row) {
          ++group;
          next_group_row += p.group_size;
          load_group();
        }
        T2 w[4];
        unpack_biased<T>(q[i], w);
        Vec16<T> res;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const T2 v = __hmul2(__hsub2(w[j], zero[j]), scale[j]);
          res[2 * j] = v.x;
          res[2 * j + 1] = v.y;
        }
        store16(out + (row0 + i) * n + word * 8, res);
      }
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

template <typename T, int kRows>
cudaError_t launch_rows(const AwqDequantParams& p, cudaStream_t stream) {
  // x: enough threads for the words of a row (at least a warp), the rest of the 256 on rows.
  int bx = 32;
  while (bx < kThreads && bx < p.words) bx *= 2;
  const int by = kThreads / bx;
  const int64_t chunks = ceil_div<int64_t>(p.k, kRows);
  const dim3 grid(static_cast<uint32_t>(ceil_div<int64_t>(p.words, bx)),
                  static_cast<uint32_t>(std::min<int64_t>(ceil_div<int64_t>(chunks, by), 65535)));
  const dim3 block(bx, by);
  const bool vec = is_aligned16(p.scales) && p.scales_stride % 8 == 0;
  if (vec) return launch_kernel(awq_dequantize_kernel<T, kRows, true>, grid, block, 0, stream, p.enable_pdl, p);
  return launch_kernel(awq_dequantize_kernel<T, kRows, false>, grid, block, 0, stream, p.enable_pdl, p);
}

template <typename T>
cudaError_t launch_typed(const AwqDequantParams& p, cudaStream_t stream) {
  // NOTE: 4 rows per thread (H200, fp16/bf16 alike): 8192 x 28672 G=128 in 146 us = 4050 GB/s
  // (copy 4276), 4096 x 11008 3727 GB/s, 7168 x 2112 2.9 TB/s; 8 rows: 1-4% slower, 2 and 16
  // rows: 5-8% slower on the large shapes.
  return launch_rows<T, 4>(p, stream);
}

}  // namespace

cudaError_t launch_awq_dequantize(const AwqDequantParams& p, cudaStream_t stream) {
  if (p.k == 0 || p.words == 0) return cudaSuccess;
  if (p.k < 0 || p.words < 0 || p.group_size < 1 || p.words >= (int64_t{1} << 31) || !is_aligned16(p.out)) {
    return cudaErrorInvalidValue;
  }
  switch (p.dtype) {
    case OutType::kFP16:
      return launch_typed<half>(p, stream);
    case OutType::kBF16:
      return launch_typed<__nv_bfloat16>(p, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

}  // namespace sgl_kernel::gemm
