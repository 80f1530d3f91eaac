// SPDX-License-Identifier: Apache-2.0
// merge_state / merge_state_v2 (API.md 2.5): merge two partial attention states (v, s) of the
// same queries over disjoint key sets into the state over their union. Per row r (token, head):
//   a = s_a[r], b = s_b[r]; v2 only: +inf is read as -inf (an empty state);
//   m = max(a, b); alpha = E(a - m), beta = E(b - m), E = 2^x (merge_state) or e^x (v2);
//   v_merged[r, :] = (alpha v_a[r, :] + beta v_b[r, :]) / (alpha + beta) in fp32, rounded once;
//   s_merged[r] = m + L(alpha + beta), L = log2 (merge_state) or ln (v2).
//
// Arithmetic: one of alpha, beta is E(0) = 1 exactly, so alpha + beta is in [1, 2] and never
// divides by 0. The row's weights are wa = alpha / (alpha + beta), wb = beta / (alpha + beta);
// each element is va * wa + vb * wb (an fma and a multiply). e^x is exp2f(x * log2(e)) on the
// difference x = a - m (exact, or one rounding), ln is log2f * ln(2); exp2f / log2f are the
// accurate (not fast-math) forms. So one empty state (its s = -inf) gives alpha or beta = 0 and
// the other 1: wa, wb are 0 and 1, and v_merged is the other state's v element for element
// (a finite v of the empty state times 0 adds a zero; a non-finite one gives NaN, as the
// formula says; the sign of a zero result is not kept), s_merged its s exactly.
// Special rows, decided per row before any arithmetic: a = b = -inf (both empty, where the
// formula would give 0 / 0) writes v_merged = 0 and s_merged = -inf. NaN in s_a or s_b makes the
// whole row NaN (v and s); NaN in a v element makes that element NaN. In merge_state (base 2)
// +inf is a number: +inf - +inf = NaN, as the formula says.
//
// A pure bandwidth kernel over the flat space of [num_rows, head_dim] split in vectors of 16
// bytes (8 fp16 / bf16 or 4 fp32 elements; head_dim % 8 == 0 makes a row a whole number of
// them): thread i owns vector i, (row, col) = divmod(i, vectors per row), so any head_dim
// (8..256, 72 included) fills the grid evenly and small calls spread over many blocks. A thread
// issues its four loads (s_a[row], s_b[row], its vector of v_a and of v_b) before it computes
// anything; the threads of one row read the same two s words (one sector for the warp; the row
// weights are computed again by each thread, a few instructions), and the row's first thread
// writes s_merged. When a base pointer is not 16-byte aligned (a contiguous view with an odd
// offset) the same kernel runs with one element a thread instead (and with no v at all for
// head_dim == 0, where only s_merged is written). Rows are cut into launches of at most 2^31
// threads (32-bit thread indices, FastDivmod); offsets are 64-bit.
// Aliasing: v_merged may be v_a or v_b itself (each element is read, then written, by one
// thread); s_merged must not share memory with s_a or s_b (the row's other threads, in other
// blocks, may read s after its first thread has written s_merged).
#include <algorithm>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "attention/attention.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"
#include "sgl_kernel/words.cuh"

namespace sgl_kernel::attention {

namespace {
namespace merge_state_impl {

constexpr int64_t kMaxLaunchThreads = int64_t{1} << 31;
constexpr int kMaxThreads = 256;  // __launch_bounds__ of every instance
// NOTE: launch shapes chosen without a GPU (to be tuned), as moe_sum.cu's: calls of at most
// kSmallMaxThreads threads (decode: T = 128, H = 32, D = 128 bf16 is 8192 vectors) run 64-thread
// blocks, take the PDL wait with their v rows prefetched and trigger their dependents once their
// loads are issued; larger calls run 256-thread blocks with the plain wait and the trigger at
// the end.
constexpr int64_t kSmallMaxThreads = 32768;
constexpr int kSmallThreads = 64;
constexpr int kLargeThreads = 256;

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// What one thread moves of a v row: a 16-byte vector (four words of Words<T>) or one element.
template <typename T, bool kVec>
struct Piece;

template <typename T>
struct Piece<T, true> {
  static constexpr int kElems = kVec16<T>;
  using Reg = Word4;
  // A plain ld.global (not .nc: read-only loads may be hoisted above the PDL wait).
  static __device__ __forceinline__ Reg load(const T* p) { return load_vec<Reg>(p); }
  static __device__ __forceinline__ void store(T* p, const Reg& r) { store_vec(p, r); }
  static __device__ __forceinline__ void unpack(const Reg& r, float* f) {
#pragma unroll
    for (int w = 0; w < 4; ++w) Words<T>::unpack(r[w], f + w * Words<T>::kPer);
  }
  static __device__ __forceinline__ Reg pack(const float* f) {
    Reg r;
#pragma unroll
    for (int w = 0; w < 4; ++w) r[w] = Words<T>::pack(f + w * Words<T>::kPer);
    return r;
  }
};

template <typename T>
struct Piece<T, false> {
  static constexpr int kElems = 1;
  using Reg = T;
  static __device__ __forceinline__ Reg load(const T* p) { return *p; }
  static __device__ __forceinline__ void store(T* p, const Reg& r) { *p = r; }
  static __device__ __forceinline__ void unpack(const Reg& r, float* f) { f[0] = to_float(r); }
  static __device__ __forceinline__ Reg pack(const float* f) { return from_float<T>(f[0]); }
};

// The row's weights of v_a and v_b and its merged LSE, from the two LSEs (see the file comment).
struct RowWeights {
  float wa, wb, s;
};

template <bool kNatural>
__device__ __forceinline__ RowWeights row_weights(float a, float b) {
  constexpr float kInf = __builtin_huge_valf();
  if constexpr (kNatural) {
    a = a == kInf ? -kInf : a;
    b = b == kInf ? -kInf : b;
  }
  if (a == -kInf && b == -kInf) return {0.0f, 0.0f, -kInf};  // both empty: v = 0
  // fmaxf drops a NaN operand, but then a - m or b - m is NaN, and so is the whole row.
  const float m = fmaxf(a, b);
  float da = a - m, db = b - m;
  if constexpr (kNatural) {
    da *= kLog2e;
    db *= kLog2e;
  }
  const float alpha = exp2f(da), beta = exp2f(db);
  const float sum = alpha + beta;  // in [1, 2] (or NaN)
  const float inv = 1.0f / sum;
  float l = log2f(sum);
  if constexpr (kNatural) l *= kLn2;
  return {alpha * inv, beta * inv, m + l};
}

// Thread i (of `total` = rows of this launch * vectors per row) writes vector c of row
// row0 + r, (r, c) = divmod(i, cols). Threads past `total` compute the last vector again (no
// branch before the loads) and skip the stores.
template <typename T, bool kVec, bool kNatural, bool kSmall>
__global__ void __launch_bounds__(kMaxThreads)
    merge_state_kernel(const MergeStateParams p,  // v_*: [num_rows, head_dim]; s_*: [num_rows]
                       const FastDivmod cols,     // pieces per row, head_dim / kElems
                       const uint32_t total,      // threads with a piece in this launch, >= 1
                       const int64_t row0) {      // first row of this launch
  using P = Piece<T, kVec>;
  const uint32_t raw = blockIdx.x * blockDim.x + threadIdx.x;  // < 2^31 + kMaxThreads
  const uint32_t i = min(raw, total - 1);
  uint32_t r, c;
  cols.divmod(i, r, c);
  const int64_t row = row0 + r;
  const int64_t off = row * p.head_dim + static_cast<int64_t>(c) * P::kElems;
  const T* va_ptr = static_cast<const T*>(p.v_a) + off;  // [num_rows, head_dim]
  const T* vb_ptr = static_cast<const T*>(p.v_b) + off;  // [num_rows, head_dim]

  if constexpr (kSmall) {
    pdl_wait_prefetched(va_ptr, vb_ptr);  // before any input is read
  } else {
    SGL_PDL_WAIT();  // before any input is read
  }
  const float a = p.s_a[row];
  const float b = p.s_b[row];
  // head_dim == 0 (one element a thread, cols = 1): no v to read or write, s_merged only.
  const bool has_v = kVec || p.head_dim > 0;
  typename P::Reg xa{}, xb{};
  if (has_v) {
    xa = P::load(va_ptr);
    xb = P::load(vb_ptr);
  }
  if constexpr (kSmall) SGL_PDL_LAUNCH_DEPENDENTS();  // PdlTrigger::kAfterLoads

  const RowWeights w = row_weights<kNatural>(a, b);
  float fa[P::kElems], fb[P::kElems];
  P::unpack(xa, fa);
  P::unpack(xb, fb);
#pragma unroll
  for (int e = 0; e < P::kElems; ++e) fa[e] = fa[e] * w.wa + fb[e] * w.wb;
  if (raw < total) {
    if (has_v) P::store(static_cast<T*>(p.v_merged) + off, P::pack(fa));
    if (c == 0) p.s_merged[row] = w.s;
  }
  if constexpr (!kSmall) SGL_PDL_LAUNCH_DEPENDENTS();  // at the end (kSmallMaxThreads' NOTE)
}

template <typename T, bool kVec, bool kNatural, bool kSmall>
cudaError_t launch_instance(const MergeStateParams& p, cudaStream_t stream) {
  constexpr int kThreads = kSmall ? kSmallThreads : kLargeThreads;
  const int64_t cols = std::max<int64_t>(p.head_dim / Piece<T, kVec>::kElems, 1);  // 1: head_dim == 0
  const int64_t rows_per_launch = kMaxLaunchThreads / cols;
  for (int64_t row0 = 0; row0 < p.num_rows; row0 += rows_per_launch) {
    const int64_t total = std::min(rows_per_launch, p.num_rows - row0) * cols;
    const auto blocks = static_cast<uint32_t>(ceil_div<int64_t>(total, kThreads));
    SGL_CUDA_TRY(launch_kernel(merge_state_kernel<T, kVec, kNatural, kSmall>, dim3(blocks), dim3(kThreads), 0,
                               stream, p.enable_pdl, p, FastDivmod(static_cast<uint32_t>(cols)),
                               static_cast<uint32_t>(total), row0));
  }
  return cudaSuccess;
}

template <typename T, bool kNatural>
cudaError_t launch_typed(const MergeStateParams& p, cudaStream_t stream) {
  // Rows are whole 16-byte vectors (head_dim % 8 == 0); the base pointers decide the path.
  const bool vec =
      p.head_dim > 0 && is_aligned16(p.v_a) && is_aligned16(p.v_b) && is_aligned16(p.v_merged);
  if (!vec) return launch_instance<T, false, kNatural, false>(p, stream);
  if (p.num_rows * (p.head_dim / kVec16<T>) <= kSmallMaxThreads) {
    return launch_instance<T, true, kNatural, true>(p, stream);
  }
  return launch_instance<T, true, kNatural, false>(p, stream);
}

template <typename T>
cudaError_t launch_dtype(const MergeStateParams& p, cudaStream_t stream) {
  return p.natural ? launch_typed<T, true>(p, stream) : launch_typed<T, false>(p, stream);
}

}  // namespace merge_state_impl
}  // namespace

cudaError_t launch_merge_state(const MergeStateParams& p, cudaStream_t stream) {
  if (p.num_rows < 0 || p.head_dim < 0 || p.head_dim > kMaxMergeHeadDim || p.head_dim % 8 != 0) {
    return cudaErrorInvalidValue;
  }
  if (p.num_rows == 0) return cudaSuccess;
  if (p.s_merged == nullptr || p.s_a == nullptr || p.s_b == nullptr) return cudaErrorInvalidValue;
  // head_dim == 0: the v tensors are empty (their pointers may be null) and only s is merged.
  if (p.head_dim > 0 && (p.v_merged == nullptr || p.v_a == nullptr || p.v_b == nullptr)) {
    return cudaErrorInvalidValue;
  }
  switch (p.dtype) {
    case Dtype::kFloat32: return merge_state_impl::launch_dtype<float>(p, stream);
    case Dtype::kFloat16: return merge_state_impl::launch_dtype<half>(p, stream);
    case Dtype::kBFloat16: return merge_state_impl::launch_dtype<__nv_bfloat16>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sgl_kernel::attention
