// SPDX-License-Identifier: Apache-2.0
// fast_compare_key (API.md 3.4): length of the common prefix of two token sequences, host
// code. Contiguous inputs compare 64-element blocks with memcmp (vectorised by the C
// library) before the element scan that finds the first difference.
#include <cstdint>
#include <cstring>

#include "project/project.h"

namespace sgl_kernel::project {

template <typename T>
int64_t common_prefix_length(const T* x, int64_t x_stride, const T* y, int64_t y_stride, int64_t n) {
  int64_t i = 0;
  if (x_stride == 1 && y_stride == 1) {
    constexpr int64_t kBlock = 64;
    while (i + kBlock <= n && std::memcmp(x + i, y + i, kBlock * sizeof(T)) == 0) i += kBlock;
    while (i < n && x[i] == y[i]) ++i;
    return i;
  }
  while (i < n && x[i * x_stride] == y[i * y_stride]) ++i;
  return i;
}

template int64_t common_prefix_length<int32_t>(const int32_t*, int64_t, const int32_t*, int64_t, int64_t);
template int64_t common_prefix_length<int64_t>(const int64_t*, int64_t, const int64_t*, int64_t, int64_t);

}  // namespace sgl_kernel::project
