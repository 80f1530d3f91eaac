// SPDX-License-Identifier: Apache-2.0
// Row concatenation along the last dimension (concat_mla_k, concat_mla_absorb_q): a pure copy.
// Every output row is split into 16-byte vectors (or single elements when a stride or size
// does not allow vectors); one flattened index space over all of them, one vector per thread.
#include <cstdint>

#include "elementwise/elementwise.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::elementwise {

namespace {

constexpr int kThreads = 256;

// U: the copy unit (uint4 for 16-byte vectors, or the element type's size). All sizes and
// strides below are in units of U.
template <typename U>
__global__ void __launch_bounds__(kThreads)
    concat_rows_kernel(U* __restrict__ out, const U* __restrict__ a, const U* __restrict__ b,
                       RowStrides out_rows, RowStrides a_rows, RowStrides b_rows, FastDivmod rows_inner,
                       FastDivmod cols, uint32_t a_cols, uint64_t total) {
  SGL_PDL_WAIT();
  const uint64_t i = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < total) {
    // The launcher guarantees rows < 2^32; the common case total < 2^32 divides in 32 bits.
    uint64_t row;
    uint32_t col;
    if (total <= 0xffffffffull) {
      uint32_t r32;
      cols.divmod(static_cast<uint32_t>(i), r32, col);
      row = r32;
    } else {
      row = i / cols.divisor;
      col = static_cast<uint32_t>(i - row * cols.divisor);
    }
    uint32_t outer, inner;
    rows_inner.divmod(static_cast<uint32_t>(row), outer, inner);
    const U* src = col < a_cols ? a + outer * a_rows.outer + inner * a_rows.inner + col
                                : b + outer * b_rows.outer + inner * b_rows.inner + (col - a_cols);
    out[outer * out_rows.outer + inner * out_rows.inner + col] = *src;
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

RowStrides scaled(const RowStrides& s, int64_t factor) { return {s.outer / factor, s.inner / factor}; }

template <typename U>
cudaError_t launch_unit(const ConcatRowsParams& p, cudaStream_t stream) {
  const int64_t f = static_cast<int64_t>(sizeof(U)) / p.elem_bytes;  // elements per unit
  const int64_t a_cols = p.a_cols / f, b_cols = p.b_cols / f, cols = a_cols + b_cols;
  const uint64_t total = static_cast<uint64_t>(p.rows) * static_cast<uint64_t>(cols);
  const uint64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks >= (uint64_t{1} << 31)) return cudaErrorInvalidValue;
  return launch_kernel(concat_rows_kernel<U>, dim3(static_cast<uint32_t>(blocks)), dim3(kThreads), 0, stream,
                       p.enable_pdl, static_cast<U*>(p.out), static_cast<const U*>(p.a), static_cast<const U*>(p.b),
                       scaled(p.out_rows, f), scaled(p.a_rows, f), scaled(p.b_rows, f),
                       FastDivmod(static_cast<uint32_t>(p.rows_inner)), FastDivmod(static_cast<uint32_t>(cols)),
                       static_cast<uint32_t>(a_cols), total);
}

bool divisible(const RowStrides& s, int64_t f) { return s.outer % f == 0 && s.inner % f == 0; }

}  // namespace

cudaError_t launch_concat_rows(const ConcatRowsParams& p, cudaStream_t stream) {
  if (p.rows == 0 || p.a_cols + p.b_cols == 0) return cudaSuccess;
  if (p.rows >= (int64_t{1} << 32) || p.rows_inner < 1) return cudaErrorInvalidValue;
  const int64_t f = 16 / p.elem_bytes;
  const bool vec_ok = is_aligned16(p.out) && is_aligned16(p.a) && is_aligned16(p.b) && p.a_cols % f == 0 &&
                      p.b_cols % f == 0 && divisible(p.out_rows, f) && divisible(p.a_rows, f) &&
                      divisible(p.b_rows, f);
  if (vec_ok) return launch_unit<uint4>(p, stream);
  switch (p.elem_bytes) {
    case 1: return launch_unit<uint8_t>(p, stream);
    case 2: return launch_unit<uint16_t>(p, stream);
    case 4: return launch_unit<uint32_t>(p, stream);
    case 8: return launch_unit<uint64_t>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace sgl_kernel::elementwise
