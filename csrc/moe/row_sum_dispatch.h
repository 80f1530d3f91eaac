// SPDX-License-Identifier: Apache-2.0
// The row counts (topk) that the sums of expert rows (moe_sum.cu, shuffle_mul_sum.cu) compile as
// constants on their 16-byte path: 1, 2, 4, 6, 8 (the common top-k), 9 (DeepSeek-V3's 8 and a
// fused shared expert) and 10 (Qwen3-Next). Host code, torch-free.
#pragma once

#include <type_traits>

namespace sgl_kernel::moe {

// f(std::integral_constant<int, topk>{}) for a compiled-in topk, else f(std::integral_constant<int,
// 0>{}) (the kernels' runtime-topk instance).
template <typename F>
auto with_static_topk(int topk, F&& f) {
  switch (topk) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 6: return f(std::integral_constant<int, 6>{});
    case 8: return f(std::integral_constant<int, 8>{});
    case 9: return f(std::integral_constant<int, 9>{});
    case 10: return f(std::integral_constant<int, 10>{});
    default: return f(std::integral_constant<int, 0>{});
  }
}

}  // namespace sgl_kernel::moe
