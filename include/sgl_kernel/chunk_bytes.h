// SPDX-License-Identifier: Apache-2.0
// The access width of the copy-like kernels (row copies, gathers, sums of rows): the widest of
// 16, 8, 4, 2 and 1 bytes that divides every value given (base addresses, row pitches in bytes,
// the row size in bytes). A value that does not constrain the access (the pitch of a dimension
// never stepped along, the address of a tensor never read) is passed as 0. Host code, torch-free:
// the launchers pick their vector width with it and the bindings' size checks agree with them.
#pragma once

#include <cstdint>
#include <initializer_list>

namespace sgl_kernel {

inline int chunk_bytes(std::initializer_list<uint64_t> values) {
  uint64_t bits = 16;
  for (uint64_t v : values) bits |= v;
  return static_cast<int>(bits & (~bits + 1));  // lowest set bit
}

}  // namespace sgl_kernel
