// SPDX-License-Identifier: Apache-2.0
// apply_shuffle_mul_sum (API.md 2.4; contract in moe.h): out[i, h] = sum_{j < topk} f_j *
// input[permutation[i * topk + j], h], f_j = factors[i * topk + j] (1 without factors): the
// weighted sum of each token's expert outputs, gathered from the grouped GEMM's expert order.
//
// Semantics, bit for bit: every term is the fp32 product f_j * x_j of the factor and the input
// element, both widened exactly to fp32 (one IEEE multiply, __fmul_rn); the sum starts from the
// first contributing term (so a sum of -0.0 products stays -0.0) and adds the others in order
// j = 0, 1, ... in fp32 (__fadd_rn: no fused multiply-add, no reassociation); the result is
// rounded once to the output dtype (nearest even). A permutation entry outside [0, input_rows)
// (the -1 of a dropped expert id) contributes nothing, whatever its factor (a NaN factor of a
// dropped entry is not read into the sum); with no entry left the output is +0. So an fp32
// torch loop `acc = -0.0; acc = where(valid_j, acc + f_j.float() * x_j.float(), acc) ...;
// where(any valid, acc, 0).to(dtype)` gives the same bits (tests/moe/ref_shuffle_mul_sum.py).
// Branch-free form used here: the sum starts at -0.0 (the identity of IEEE addition) and a
// dropped entry adds 1 * -0.0 = -0.0, which leaves every value as it was; an all-dropped sum is
// then -0.0 and is replaced by +0 at the end.
//
// A bandwidth kernel, laid out as moe_sum.cu's: the output is one flat index space of vectors
// of kBytes (16 when the base pointers and the row size allow it; else the widest of 8, 4, 2
// bytes that does), thread i owns output vector i of token t. It loads the token's topk
// permutation entries and factors (the threads of a token share those addresses: L1 serves
// them), then issues all topk gathered-row loads (same columns of the topk source rows) before
// it adds anything, then sums in order and stores. topk 1, 2, 4, 6, 8, 9, 10 are compile-time
// on the 16-byte path; every other case runs the general kernel, which takes the entries in
// groups of kGroup (a group's loads all in flight). Calls of up to kSmallMaxThreads vectors run
// 64-thread blocks that prefetch their permutation row before the PDL wait and trigger their
// dependents once their row loads are issued; larger calls run 256-thread blocks that trigger at
// the end (the placements of moe_sum.cu, untuned for this kernel).
// Piece and loads_issued below restate moe_sum.cu's Chunk, load_chunk, store_chunk, unpack, pack
// and loads_issued (file-local there): candidates for one shared header used by both files.
#include <algorithm>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "moe/moe.h"
#include "moe/row_sum_dispatch.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/chunk_bytes.h"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"
#include "sgl_kernel/words.cuh"

namespace sgl_kernel::moe {

namespace {
namespace shuffle_mul_sum_impl {

// Threads of one launch at most (32-bit thread indices for FastDivmod); more: launches of whole
// tokens.
constexpr int64_t kMaxLaunchThreads = int64_t{1} << 31;
constexpr int kGroup = 8;  // entries loaded together by the general kernel (runtime topk)
constexpr int kMaxThreads = 256;
constexpr int64_t kSmallMaxThreads = 32768;  // decode launch shape up to this many vectors
constexpr int kSmallThreads = 64;
constexpr int kLargeThreads = 256;

// kBytes of one row in registers: kBytes / 4 32-bit words, or one 16-bit element (kBytes 2),
// with the element conversions of T (fp16 / bf16).
template <typename T, int kBytes>
struct Piece {
  static constexpr int kElems = kBytes / static_cast<int>(sizeof(T));
  static constexpr int kWords = kBytes / 4;
  using Bits = std::conditional_t<kBytes == 2, uint16_t, Vec<uint32_t, (kWords > 0 ? kWords : 1)>>;

  // A plain ld.global / st.global (not ld.global.nc: tests/test_pdl_order.py).
  static __device__ __forceinline__ Bits load(const T* p) {
    if constexpr (kBytes == 2) {
      return *reinterpret_cast<const uint16_t*>(p);
    } else {
      return load_vec<Bits, LoadPolicy::kDefault>(p);
    }
  }
  static __device__ __forceinline__ void store(T* p, const Bits& b) {
    if constexpr (kBytes == 2) {
      *reinterpret_cast<uint16_t*>(p) = b;
    } else {
      store_vec(p, b);
    }
  }
  // Every element -0.0 (sign bit only).
  static __device__ __forceinline__ Bits neg_zero() {
    Bits b;
    if constexpr (kBytes == 2) {
      b = 0x8000u;
    } else {
#pragma unroll
      for (int w = 0; w < kWords; ++w) b[w] = 0x80008000u;
    }
    return b;
  }
  // acc[e] = acc[e] + f * x[e] in fp32, two roundings (no fma).
  static __device__ __forceinline__ void mul_add(float* acc, const Bits& b, float f) {
    float x[kElems];
    if constexpr (kBytes == 2) {
      x[0] = to_float(*reinterpret_cast<const T*>(&b));
    } else {
#pragma unroll
      for (int w = 0; w < kWords; ++w) Words<T>::unpack(b[w], x + w * Words<T>::kPer);
    }
#pragma unroll
    for (int e = 0; e < kElems; ++e) acc[e] = __fadd_rn(acc[e], __fmul_rn(f, x[e]));
  }
  static __device__ __forceinline__ Bits pack(const float* acc) {
    Bits b;
    if constexpr (kBytes == 2) {
      const T v = from_float<T>(acc[0]);
      b = *reinterpret_cast<const uint16_t*>(&v);
    } else {
#pragma unroll
      for (int w = 0; w < kWords; ++w) b[w] = Words<T>::pack(acc + w * Words<T>::kPer);
    }
    return b;
  }
};

// After a group's row loads: keeps ptxas from sinking any of them below the arithmetic on the
// first ones (moe_sum.cu's loads_issued and its NOTE: one MEMBAR.ALL.CTA once the data is in).
__device__ __forceinline__ void loads_issued() { asm volatile("fence.acq_rel.cta;" ::: "memory"); }

// Thread i (of `total` = tokens of this launch * cols) writes output vector c of token
// tok0 + t, (t, c) = divmod(i, cols), cols = hidden / kElems. kTopk > 0: exactly kTopk entries
// (p.topk == kTopk), all loaded at once; kTopk == 0: p.topk entries in groups of kGroup (the
// slots of the last group past topk load nothing and add -0.0). kSmall: the decode launch shape.
// Threads past `total` compute the last vector again (no branch before the loads) and skip the
// store.
template <typename T, int kBytes, int kTopk, bool kSmall>
__global__ void __launch_bounds__(kMaxThreads)
    shuffle_mul_sum_kernel(const ShuffleMulSumParams p,  // out [m, hidden], input [input_rows, hidden],
                                                         // permutation / factors [m * topk]
                           const FastDivmod cols,        // vectors per row, hidden / kElems
                           const uint32_t total,         // threads with a vector in this launch, >= 1
                           const int64_t tok0) {         // first token of this launch
  using P = Piece<T, kBytes>;
  using Bits = typename P::Bits;
  constexpr int kElems = P::kElems;
  constexpr int kLoads = kTopk > 0 ? kTopk : kGroup;
  const uint32_t raw = blockIdx.x * blockDim.x + threadIdx.x;  // < 2^31 + kMaxThreads
  const uint32_t i = min(raw, total - 1);
  uint32_t t, c;
  cols.divmod(i, t, c);
  const int64_t token = tok0 + t;
  const int64_t col = static_cast<int64_t>(c) * kElems;
  const int topk = kTopk > 0 ? kTopk : p.topk;
  const int32_t* perm = p.permutation + token * topk;  // [topk]: this token's entries
  const T* fac = static_cast<const T*>(p.factors);     // [m * topk] or nullptr
  const bool has_factors = fac != nullptr;
  if (has_factors) fac += token * topk;                 // [topk]
  // [input_rows, hidden] from column col, in bytes. A 32-bit row test and one IMAD.WIDE.U32 an
  // address: entries are int32 (rows past 2^31 are never named), rows below 2^32 bytes (launcher).
  const char* src = static_cast<const char*>(p.input) + col * static_cast<int64_t>(sizeof(T));
  const uint32_t rows = static_cast<uint32_t>(min(p.input_rows, int64_t{1} << 31));
  const uint32_t row_bytes = cols.divisor * kBytes;
  T* dst = static_cast<T*>(p.out) + token * p.hidden + col;  // [m, hidden]

  if constexpr (kSmall) {
    pdl_wait_prefetched(perm);  // before any global read; perm is this thread's entries
  } else {
    SGL_PDL_WAIT();  // before any global read
  }

  float acc[kElems];
#pragma unroll
  for (int e = 0; e < kElems; ++e) acc[e] = -0.0f;  // the identity of the sum (file comment)
  bool any = false;
  // kTopk > 0: one pass. Else groups of kGroup entries, each with its loads in flight first.
  for (int j0 = 0; j0 < topk; j0 += kLoads) {
    int32_t idx[kLoads];
    float f[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const bool live = kTopk > 0 || j0 + u < topk;
      idx[u] = live ? perm[j0 + u] : -1;
      f[u] = live && has_factors ? to_float(fac[j0 + u]) : 1.0f;
    }
    Bits x[kLoads];
#pragma unroll
    for (int u = 0; u < kLoads; ++u) {
      const bool valid = static_cast<uint32_t>(idx[u]) < rows;  // -1 and other negatives fail
      x[u] = P::neg_zero();
      const uint64_t offset = static_cast<uint64_t>(static_cast<uint32_t>(idx[u])) * row_bytes;
      if (valid) x[u] = P::load(reinterpret_cast<const T*>(src + offset));
      f[u] = valid ? f[u] : 1.0f;  // a dropped entry adds 1 * -0.0
      any = any || valid;
    }
    if constexpr (kSmall) {
      if (j0 == 0) SGL_PDL_LAUNCH_DEPENDENTS();  // PdlTrigger::kAfterLoads (first group)
    }
    loads_issued();
    // Entries past topk (general kernel) hold idx -1: they add 1 * -0.0 too, no branch.
#pragma unroll
    for (int u = 0; u < kLoads; ++u) P::mul_add(acc, x[u], f[u]);
  }
  if (!any) {
#pragma unroll
    for (int e = 0; e < kElems; ++e) acc[e] = 0.0f;  // no contributing entry: +0
  }
  if (raw < total) P::store(dst, P::pack(acc));
  if constexpr (!kSmall) SGL_PDL_LAUNCH_DEPENDENTS();  // at the end (moe_sum.cu's kSmallMaxThreads NOTE)
}

// All launches of one instance: token ranges of at most kMaxLaunchThreads threads.
template <typename T, int kBytes, int kTopk, bool kSmall>
cudaError_t launch_instance(const ShuffleMulSumParams& p, cudaStream_t stream) {
  constexpr int kElems = Piece<T, kBytes>::kElems;
  constexpr int kThreads = kSmall ? kSmallThreads : kLargeThreads;
  const int64_t cols = p.hidden / kElems;
  const int64_t row_bytes = p.hidden * static_cast<int64_t>(sizeof(T));
  if (cols > kMaxLaunchThreads || row_bytes > UINT32_MAX) return cudaErrorInvalidValue;  // rows of 4 GiB
  const int64_t tokens_per_launch = kMaxLaunchThreads / cols;
  const FastDivmod div(static_cast<uint32_t>(cols));
  for (int64_t tok0 = 0; tok0 < p.m; tok0 += tokens_per_launch) {
    const int64_t total = std::min(tokens_per_launch, p.m - tok0) * cols;
    const dim3 grid(static_cast<uint32_t>(ceil_div<int64_t>(total, kThreads)));
    SGL_CUDA_TRY(launch_kernel(shuffle_mul_sum_kernel<T, kBytes, kTopk, kSmall>, grid, dim3(kThreads), 0, stream,
                               p.enable_pdl, p, div, static_cast<uint32_t>(total), tok0));
  }
  return cudaSuccess;
}

template <typename T, int kBytes, bool kSmall>
cudaError_t launch_width(const ShuffleMulSumParams& p, cudaStream_t stream) {
  if constexpr (kBytes == 16) {
    return with_static_topk(p.topk, [&](auto topk) { return launch_instance<T, kBytes, topk, kSmall>(p, stream); });
  }
  return launch_instance<T, kBytes, 0, kSmall>(p, stream);
}

// The widest chunk (16, 8, 4, 2 bytes; 1 only for a pointer not aligned to its element type)
// that divides both base addresses and the row size, which is also the row pitch of input and
// out (both contiguous). An input of no rows is never read: its address does not count.
template <typename T>
int chunk_bytes(const ShuffleMulSumParams& p) {
  const auto address = [](const void* ptr) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr)); };
  return sgl_kernel::chunk_bytes({address(p.out), static_cast<uint64_t>(p.hidden * static_cast<int64_t>(sizeof(T))),
                                  p.input_rows > 0 ? address(p.input) : 0});
}

template <typename T, bool kSmall>
cudaError_t launch_shape(const ShuffleMulSumParams& p, cudaStream_t stream) {
  switch (chunk_bytes<T>(p)) {
    case 16: return launch_width<T, 16, kSmall>(p, stream);
    case 8: return launch_width<T, 8, kSmall>(p, stream);
    case 4: return launch_width<T, 4, kSmall>(p, stream);
    case 2: return launch_width<T, 2, kSmall>(p, stream);
    default: break;
  }
  return cudaErrorMisalignedAddress;  // a pointer not aligned to the element size
}

template <typename T>
cudaError_t launch_typed(const ShuffleMulSumParams& p, cudaStream_t stream) {
  const int64_t elems = std::max<int64_t>(chunk_bytes<T>(p) / static_cast<int64_t>(sizeof(T)), 1);
  if (p.m * (p.hidden / elems) <= kSmallMaxThreads) return launch_shape<T, true>(p, stream);
  return launch_shape<T, false>(p, stream);
}

}  // namespace shuffle_mul_sum_impl
}  // namespace

cudaError_t launch_shuffle_mul_sum(const ShuffleMulSumParams& p, cudaStream_t stream) {
  if (p.m < 0 || p.hidden < 0 || p.input_rows < 0 || p.topk < 1) return cudaErrorInvalidValue;
  if (p.m == 0 || p.hidden == 0) return cudaSuccess;
  if (p.out == nullptr || p.permutation == nullptr || (p.input_rows > 0 && p.input == nullptr)) {
    return cudaErrorInvalidValue;
  }
  switch (p.dtype) {
    case Dtype::kFloat16: return shuffle_mul_sum_impl::launch_typed<half>(p, stream);
    case Dtype::kBFloat16: return shuffle_mul_sum_impl::launch_typed<__nv_bfloat16>(p, stream);
    default: break;
  }
  return cudaErrorInvalidValue;  // fp32 is not part of the op
}

}  // namespace sgl_kernel::moe
