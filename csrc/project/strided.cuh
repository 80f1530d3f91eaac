// SPDX-License-Identifier: Apache-2.0
// Device side of StridedLayout (project.h): element i of a strided tensor, in logical
// row-major order, to its offset in elements.
#pragma once

#include <cstdint>

#include "project/project.h"

namespace sgl_kernel::project {

__device__ __forceinline__ int64_t strided_offset(const StridedLayout& layout, int64_t i) {
  if (layout.ndim == 0) return i;
  int64_t offset = 0;
  int64_t rest = i;
#pragma unroll
  for (int k = kMaxStridedDims - 1; k >= 0; --k) {
    if (k < layout.ndim) {
      const int64_t q = rest / layout.sizes[k];
      offset += (rest - q * layout.sizes[k]) * layout.strides[k];
      rest = q;
    }
  }
  return offset;
}

}  // namespace sgl_kernel::project
