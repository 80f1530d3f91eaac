// SPDX-License-Identifier: Apache-2.0
// An order-preserving map of fp32 values to uint32 keys, for selections (top-k, argmax) that
// compare, sort or radix-select integers instead of floats: for numbers a and b,
// a < b <=> float_order_key(a) < float_order_key(b), -0.0 and +0.0 get one key (they compare
// equal), and every NaN gets the key kNanKey. Numbers map to keys >= 0x007FFFFF (-inf's key),
// so any kNanKey below that ranks NaN under every number and leaves the keys below kNanKey
// free as markers (the MoE routers keep 0 for "taken"; fast_topk uses 0 for NaN itself).
#pragma once

#include <cstdint>

namespace sgl_kernel {

template <uint32_t kNanKey>
__device__ __forceinline__ uint32_t float_order_key(float v) {
  static_assert(kNanKey < 0x007FFFFFu, "the NaN key must rank below -inf");
  uint32_t u = __float_as_uint(v);
  if ((u & 0x7fffffffu) > 0x7f800000u) return kNanKey;
  if (u == 0x80000000u) u = 0u;  // -0 -> +0
  // negative: flip every bit (larger magnitude -> smaller key); positive: set the sign bit
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

}  // namespace sgl_kernel
