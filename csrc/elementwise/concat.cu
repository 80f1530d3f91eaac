// SPDX-License-Identifier: Apache-2.0
// Row concatenation along the last dimension (concat_mla_k, concat_mla_absorb_q): a pure copy,
// out_row = [a_row, b_row], rows addressed with two levels (RowStrides). Two kernels:
// - tile: the row shapes of the two ops when every pointer, stride and size is a multiple of
//   16 bytes, with the row width known at compile time (in 16-byte vectors, a + b: 16 + 8 for
//   concat_mla_k in fp16/bf16, 128 + 64 elements; 64 + 8 for concat_mla_absorb_q, 512 + 64).
//   kG threads share a row, lane l copying its columns l, l + kG, ...; a thread copies kRows
//   rows and issues every load before its first store. concat_mla_k's k_rope row, shared by
//   all heads of a token, goes through L1 and is loaded once for the rows of a thread that
//   share it.
// - flat: every other shape, alignment and element size, and concat_mla_absorb_q past the
//   decode sizes (measured faster there, NOTE below): one flattened index over all copy units
//   of the output (16-byte vectors where possible, else single elements), one per thread.
// Past the decode sizes the loads of both take an L2 evict_last policy, and the tile's stores
// (concat_mla_k) an evict_first one (NOTE below).
#include <cstdint>

#include "elementwise/elementwise.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::elementwise {

namespace {

using V16 = Vec<uint32_t, 4>;  // one 16-byte copy unit

// Rows of a tile launch stay below this, so that the row index of a thread never wraps in
// 32 bits (the largest block covers kMaxTileSpan rows).
constexpr uint32_t kMaxTileSpan = 4096;
constexpr int64_t kTileMaxRows = int64_t{0xffffffff} - kMaxTileSpan;

RowStrides scaled(const RowStrides& s, int64_t factor) { return {s.outer / factor, s.inner / factor}; }

// ---------------------------------------------------------------------------------------
// tile

// kA, kB: 16-byte vectors of an a row and a b row. kG threads per row; kRows rows per thread;
// kLoad: policy of the a loads (and of the b loads unless kBcastB); kStore: policy of the
// stores; kBcastB: b rows are shared by many rows (concat_mla_k: inner stride 0), so b loads go
// through L1 (__ldg) and a thread loads a b row once for all its rows that read it.
// Grid: x over blocks of kSpan = (kThreads / kG) * kRows consecutive rows; thread t of block x
// copies rows x * kSpan + j * (kThreads / kG) + t / kG for j < kRows, columns t % kG + m * kG.
// Rows past the last one read the last row again (clamped addresses) and store nothing.
// kEarlyPdl: the dependents launch right after the wait, else after the stores (launch_tile).
template <int kA, int kB, int kG, int kRows, int kThreads, LoadPolicy kLoad, StorePolicy kStore, bool kBcastB,
          bool kEarlyPdl>
__global__ void __launch_bounds__(kThreads)
    concat_tile_kernel(V16* __restrict__ out,        // [rows, kA + kB] (row strides out_rows)
                       const V16* __restrict__ a,    // [rows, kA] (row strides a_rows)
                       const V16* __restrict__ b,    // [rows, kB] (row strides b_rows, inner 0: broadcast)
                       const RowStrides out_rows, const RowStrides a_rows, const RowStrides b_rows,
                       const FastDivmod rows_inner, const uint32_t rows) {
  constexpr int kCols = kA + kB;
  constexpr int kPerRow = (kCols + kG - 1) / kG;  // columns of a row per lane
  constexpr int kSlots = kThreads / kG;           // rows of a block per j
  static_assert(kThreads % kG == 0, "whole rows per block");
  static_assert(kSlots * kRows <= static_cast<int>(kMaxTileSpan), "kTileMaxRows assumes kMaxTileSpan");
  const int lane = static_cast<int>(threadIdx.x % kG);  // unsigned: the compiler knows 0 <= lane < kG
  const uint32_t row0 = blockIdx.x * static_cast<uint32_t>(kSlots * kRows) + threadIdx.x / kG;

  int64_t out_off[kRows], a_off[kRows], b_off[kRows];
  bool store_row[kRows];
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    const uint32_t r = row0 + static_cast<uint32_t>(j * kSlots);
    store_row[j] = r < rows;
    uint32_t outer, inner;
    rows_inner.divmod(min(r, rows - 1), outer, inner);
    out_off[j] = outer * out_rows.outer + inner * out_rows.inner;
    a_off[j] = outer * a_rows.outer + inner * a_rows.inner;
    b_off[j] = outer * b_rows.outer + inner * b_rows.inner - kA;  // indexed by the output column
  }

  // Before any input is read; the prefetch: an a vector of the thread's first row.
  pdl_wait_prefetched(a + (a_off[0] + (lane < kA ? lane : 0)));
  if constexpr (kEarlyPdl) SGL_PDL_LAUNCH_DEPENDENTS();
  V16 v[kRows][kPerRow];
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    // Only with kBcastB: row j reads the b row of row 0 (the same token's k_rope).
    const bool b_reused = kBcastB && j > 0 && b_off[j] == b_off[0];
#pragma unroll
    for (int m = 0; m < kPerRow; ++m) {
      const int c = lane + m * kG;
      if (kCols % kG == 0 || c < kCols) {
        if constexpr (kBcastB) {
          if (c < kA) {
            v[j][m] = load_vec<V16, kLoad>(a + (a_off[j] + c));
          } else if (b_reused) {
            v[j][m] = v[0][m];
          } else {
            const uint4 x = __ldg(reinterpret_cast<const uint4*>(b + (b_off[j] + c)));
            v[j][m] = *reinterpret_cast<const V16*>(&x);
          }
        } else {  // one load from a selected address (a column whose source depends on the lane)
          v[j][m] = load_vec<V16, kLoad>(c < kA ? a + (a_off[j] + c) : b + (b_off[j] + c));
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kRows; ++j) {
    if (store_row[j]) {
#pragma unroll
      for (int m = 0; m < kPerRow; ++m) {
        const int c = lane + m * kG;
        if (kCols % kG == 0 || c < kCols) {
          store16<uint32_t, kStore>(reinterpret_cast<uint32_t*>(out + (out_off[j] + c)), v[j][m]);
        }
      }
    }
  }
  if constexpr (!kEarlyPdl) SGL_PDL_LAUNCH_DEPENDENTS();
}

// Whether the tile kernel can copy p as kA + kB vectors per row.
bool tile_fits(const ConcatRowsParams& p, int64_t a_vecs, int64_t b_vecs);

// The PDL trigger right after the wait up to kEarlyPdlBlocks blocks, after the stores beyond.
// NOTE (H200, session 16, bench_mla_copy.py --no-compile, the trigger after the stores (A)
// against right after the wait (B), alternated A B A B, us): concat_mla_k T = 1 / 16 / 128
// (8 / 128 / 1024 blocks) 0.74 / 0.92 / 2.21 -> 0.68 / 0.85 / 2.37; concat_mla_absorb_q T0 = 1 /
// 16 (16 / 256 blocks) 1.00 / 1.42 -> 0.82 / 1.38.
constexpr int64_t kEarlyPdlBlocks = 256;

template <int kA, int kB, int kG, int kRows, int kThreads, LoadPolicy kLoad, StorePolicy kStore, bool kBcastB>
cudaError_t launch_tile(const ConcatRowsParams& p, cudaStream_t stream) {
  if (p.rows == 0) return cudaSuccess;
  if (!tile_fits(p, kA, kB)) return cudaErrorInvalidValue;
  const int64_t f = 16 / p.elem_bytes;  // elements per vector
  constexpr int64_t kSpan = (kThreads / kG) * kRows;
  const int64_t blocks = ceil_div<int64_t>(p.rows, kSpan);
  const auto kernel = blocks <= kEarlyPdlBlocks
                          ? concat_tile_kernel<kA, kB, kG, kRows, kThreads, kLoad, kStore, kBcastB, true>
                          : concat_tile_kernel<kA, kB, kG, kRows, kThreads, kLoad, kStore, kBcastB, false>;
  return launch_kernel(kernel, dim3(static_cast<uint32_t>(blocks)), dim3(kThreads), 0, stream, p.enable_pdl,
                       static_cast<V16*>(p.out), static_cast<const V16*>(p.a), static_cast<const V16*>(p.b),
                       scaled(p.out_rows, f), scaled(p.a_rows, f), scaled(p.b_rows, f),
                       FastDivmod(static_cast<uint32_t>(p.rows_inner)), static_cast<uint32_t>(p.rows));
}

// The two ops' row shapes (fp16/bf16), by launch shape <kG, kRows, kThreads, kLoad, kStore>.
template <int kG, int kRows, int kThreads, LoadPolicy kLoad, StorePolicy kStore = StorePolicy::kDefault>
cudaError_t launch_mla_k_tile(const ConcatRowsParams& p, cudaStream_t stream) {
  return launch_tile<16, 8, kG, kRows, kThreads, kLoad, kStore, true>(p, stream);
}

template <int kG, int kRows, int kThreads, LoadPolicy kLoad, StorePolicy kStore = StorePolicy::kDefault>
cudaError_t launch_absorb_q_tile(const ConcatRowsParams& p, cudaStream_t stream) {
  return launch_tile<64, 8, kG, kRows, kThreads, kLoad, kStore, false>(p, stream);
}

// ---------------------------------------------------------------------------------------
// flat

constexpr int kFlatThreads = 256;

// U: the copy unit (uint4 for 16-byte vectors, or the element type's size). All sizes and
// strides below are in units of U. kLoad / kStore: the cache policies (16-byte units only).
template <typename U, LoadPolicy kLoad = LoadPolicy::kDefault, StorePolicy kStore = StorePolicy::kDefault>
__global__ void __launch_bounds__(kFlatThreads)
    concat_flat_kernel(U* __restrict__ out,      // [rows, a_cols + b_cols] (row strides out_rows)
                       const U* __restrict__ a,  // [rows, a_cols] (row strides a_rows)
                       const U* __restrict__ b,  // [rows, cols - a_cols] (row strides b_rows)
                       RowStrides out_rows, RowStrides a_rows, RowStrides b_rows, FastDivmod rows_inner,
                       FastDivmod cols, uint32_t a_cols, uint64_t total) {
  SGL_PDL_WAIT();
  const uint64_t i = static_cast<uint64_t>(blockIdx.x) * kFlatThreads + threadIdx.x;
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
    U* dst = out + outer * out_rows.outer + inner * out_rows.inner + col;
    if constexpr (kLoad == LoadPolicy::kDefault && kStore == StorePolicy::kDefault) {
      *dst = *src;
    } else {
      static_assert(sizeof(U) == 16, "cache policies on 16-byte units");
      store16<uint32_t, kStore>(reinterpret_cast<uint32_t*>(dst), load_vec<V16, kLoad>(src));
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

template <typename U, LoadPolicy kLoad = LoadPolicy::kDefault, StorePolicy kStore = StorePolicy::kDefault>
cudaError_t launch_flat(const ConcatRowsParams& p, cudaStream_t stream) {
  const int64_t f = static_cast<int64_t>(sizeof(U)) / p.elem_bytes;  // elements per unit
  const int64_t a_cols = p.a_cols / f, b_cols = p.b_cols / f, cols = a_cols + b_cols;
  const uint64_t total = static_cast<uint64_t>(p.rows) * static_cast<uint64_t>(cols);
  const uint64_t blocks = (total + kFlatThreads - 1) / kFlatThreads;
  // cols and a_cols go to the kernel as 32-bit values.
  if (cols > int64_t{0xffffffff} || blocks >= (uint64_t{1} << 31)) return cudaErrorInvalidValue;
  return launch_kernel(concat_flat_kernel<U, kLoad, kStore>, dim3(static_cast<uint32_t>(blocks)), dim3(kFlatThreads), 0, stream,
                       p.enable_pdl, static_cast<U*>(p.out), static_cast<const U*>(p.a), static_cast<const U*>(p.b),
                       scaled(p.out_rows, f), scaled(p.a_rows, f), scaled(p.b_rows, f),
                       FastDivmod(static_cast<uint32_t>(p.rows_inner)), FastDivmod(static_cast<uint32_t>(cols)),
                       static_cast<uint32_t>(a_cols), total);
}

// ---------------------------------------------------------------------------------------
// dispatch

bool divisible(const RowStrides& s, int64_t f) { return s.outer % f == 0 && s.inner % f == 0; }

bool valid_elem_bytes(int e) { return e == 1 || e == 2 || e == 4 || e == 8; }

// 16-byte copy units: every pointer 16-byte aligned, every row stride and column count a
// multiple of 16 bytes.
bool vec_ok(const ConcatRowsParams& p) {
  const int64_t f = 16 / p.elem_bytes;
  return is_aligned16(p.out) && is_aligned16(p.a) && is_aligned16(p.b) && p.a_cols % f == 0 && p.b_cols % f == 0 &&
         divisible(p.out_rows, f) && divisible(p.a_rows, f) && divisible(p.b_rows, f);
}

bool tile_fits(const ConcatRowsParams& p, int64_t a_vecs, int64_t b_vecs) {
  if (!valid_elem_bytes(p.elem_bytes) || p.rows_inner < 1 || p.rows_inner > 0xffffffffll || p.rows < 0 ||
      p.rows > kTileMaxRows || !vec_ok(p)) {
    return false;
  }
  const int64_t f = 16 / p.elem_bytes;
  return p.a_cols == a_vecs * f && p.b_cols == b_vecs * f;
}

// NOTE (H200, bf16, PDL on; benchmark/elementwise/tune_concat_mla.cu, us against the previous
// flat kernel; decode shapes are those up to kDecodeMaxVectors output vectors, 16 MiB written:
// concat_mla_k T <= 341, concat_mla_absorb_q T0 * T1 <= 14563):
// - concat_mla_k: 8 lanes per 24-vector row (2 k_nope vectors and 1 k_rope vector each); 128-
//   thread blocks with read-only loads for decode (T=1/16/128 0.74/0.92/2.21, flat 0.90/1.05/
//   2.79), 256-thread blocks with plain loads above (T=16384 333.4, flat 336.6; replaced in
//   session 16, below). 16 lanes per row: 3.35 at T=128.
// - concat_mla_absorb_q: 24 lanes per 72-vector row (3 vectors each), 192-thread blocks with
//   read-only loads for decode (T0=1/16 0.83/1.33, flat 0.91/1.56). From HBM the flat kernel
//   stays (T0=4096 292.7 against 296.6 for the tile with plain loads; every tile variant swept
//   was 1-5 % slower there).
// Session 16 (H200, the same sweep, up to five runs): above the decode shapes the loads take
// an L2 evict_last policy, as torch.compile's kernels load (one 16-byte vector a thread over
// the flat output, 1024-element blocks of 4 warps), which read 1-3 % faster than ours in
// bench_mla_copy.py. concat_mla_k T = 1024 / 4096 / 16384: 256-thread tile, plain loads 22.23 /
// 82.8-84.8 / 333.2-333.7 us; 128-thread tile, evict_last loads 21.76-21.83 / 82.8-83.1 /
// 326.9-327.6, and with evict_first stores too (shipped) 21.58-21.64 / 81.9-82.1 / 322.8-323.8
// (256 threads with the loads alone 21.79-21.80 / 83.0-83.1 / 327.5-327.9; L2::256B prefetching
// loads 21.52-21.61 / 81.7-82.0 / 328.0-329.2; the flat kernel with the loads 22.3 / 85.0 /
// 335.5). concat_mla_absorb_q T0 = 128 / 1024 / 4096 (the flat kernel): 10.69 / 72.59-72.69 /
// 293.1-293.3 -> 10.41 / 72.3-72.4 / 283.8-283.9 with evict_last loads (tile shapes with them:
// 73.5-74.6 at T0 = 1024; evict_first stores added to the flat kernel's loads: 72.25-72.29 /
// 283.8-284.3, no different). The decode shapes keep their read-only loads (the 128-thread tile
// with evict_last loads read 2.20-2.26 us at T = 128 against 2.17-2.18).
// Session 41 (H200, tune_concat_mla.cu --streams 64, two calls of two runs, us at T0 = 1 / 16):
// concat_mla_absorb_q's tile with plain loads and evict_first stores ("g24 r1 t192 cs") 0.80-0.81
// / 1.33 against the read-only loads' 0.82-0.84 / 1.38-1.40; read-only loads with evict_first
// stores 0.83-0.84 / 1.34. Not shipped: a decode call's output is the query the attention
// kernel reads next, and evict_first makes it the first to leave L2, a cost that a bench of the
// op alone cannot see (the many-row shapes' evict_first stores write outputs too large for L2).
// concat_mla_k's tile gained nothing from evict_first stores (T = 1 / 16 / 128 0.75-0.76 / 0.89
// / 2.20-2.21 against 0.74-0.75 / 0.89-0.90 / 2.16-2.20), nor from larger blocks (T=128: 256 /
// 512 / 1024 threads 2.20 / 2.95 / 2.35 against 128's 2.16-2.20).
constexpr int64_t kDecodeMaxVectors = int64_t{1} << 20;

}  // namespace

int64_t concat_copy_unit_elems(const ConcatRowsParams& p) {
  return valid_elem_bytes(p.elem_bytes) && vec_ok(p) ? 16 / p.elem_bytes : 1;
}

cudaError_t launch_concat_rows(const ConcatRowsParams& p, cudaStream_t stream) {
  if (p.rows == 0 || p.a_cols + p.b_cols == 0) return cudaSuccess;
  if (p.rows >= (int64_t{1} << 32) || p.rows_inner < 1) return cudaErrorInvalidValue;
  if (!valid_elem_bytes(p.elem_bytes)) return cudaErrorInvalidValue;
  if (!vec_ok(p)) {
    switch (p.elem_bytes) {
      case 1: return launch_flat<uint8_t>(p, stream);
      case 2: return launch_flat<uint16_t>(p, stream);
      case 4: return launch_flat<uint32_t>(p, stream);
      default: return launch_flat<uint64_t>(p, stream);
    }
  }
  using LP = LoadPolicy;
  const int64_t f = 16 / p.elem_bytes;
  const int64_t out_vecs = p.rows * ((p.a_cols + p.b_cols) / f);
  const bool decode = out_vecs <= kDecodeMaxVectors;
  if (tile_fits(p, 16, 8)) {
    return decode ? launch_mla_k_tile<8, 1, 128, LP::kStream>(p, stream)
                  : launch_mla_k_tile<8, 1, 128, LP::kKeepL2, StorePolicy::kStream>(p, stream);
  }
  if (decode && tile_fits(p, 64, 8)) return launch_absorb_q_tile<24, 1, 192, LP::kStream>(p, stream);
  return launch_flat<uint4, LP::kKeepL2>(p, stream);
}

}  // namespace sgl_kernel::elementwise
