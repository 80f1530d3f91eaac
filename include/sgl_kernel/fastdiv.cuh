// SPDX-License-Identifier: Apache-2.0
// Unsigned 32-bit division by a run-time constant with a multiply-high (Granlund &
// Montgomery): flattened elementwise kernels split a linear index into (row, column)
// with it instead of a ~20-instruction integer division.
#pragma once

#include <cstdint>

namespace sgl_kernel {

struct FastDivmod {
  uint32_t divisor = 1;
  uint32_t multiplier = 0;
  uint32_t shift = 0;

  FastDivmod() = default;

  // divisor >= 1. Valid for every dividend in [0, 2^32).
  __host__ explicit FastDivmod(uint32_t d) : divisor(d) {
    // shift = ceil(log2(d)); multiplier = floor(2^32 * (2^shift - d) / d) + 1
    shift = 0;
    while ((uint64_t{1} << shift) < d) ++shift;
    const uint64_t one = 1;
    multiplier = static_cast<uint32_t>(((one << 32) * ((one << shift) - d)) / d + 1);
  }

  __host__ __device__ __forceinline__ uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t t = __umulhi(n, multiplier);
#else
    const uint32_t t = static_cast<uint32_t>((uint64_t{n} * multiplier) >> 32);
#endif
    // (t + n) >> shift without overflowing 32 bits
    return static_cast<uint32_t>((uint64_t{t} + n) >> shift);
  }

  __host__ __device__ __forceinline__ void divmod(uint32_t n, uint32_t& q, uint32_t& r) const {
    q = div(n);
    r = n - q * divisor;
  }
};

}  // namespace sgl_kernel
