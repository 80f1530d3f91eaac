// SPDX-License-Identifier: Apache-2.0
// moe_sum / moe_sum_reduce (API.md 2.4): out[t, h] = scale * sum_{j < topk} input[t, j, h].
//
// Semantics, bit for bit: the sum starts from input[t, 0, h] (not from 0, so a sum of -0.0
// terms stays -0.0) and adds input[t, 1, h], ..., input[t, topk - 1, h] in that order in fp32
// (IEEE round-to-nearest, no reassociation, no fused multiply-add); moe_sum_reduce then
// multiplies the fp32 sum by scale (once, literally: 0 gives +-0, a NaN or infinite term or
// scale gives what IEEE says, e.g. inf * 0 = NaN); the result is rounded once to the output
// dtype (round to nearest even; fp32 output: no further rounding). moe_sum never multiplies.
// So an fp32 torch loop `acc = x[:, 0].float(); acc = acc + x[:, j].float() ...` followed by
// `(acc * scale).to(dtype)` gives the same bits. topk == 0 (an empty sum) writes scale * 0.
//
// A pure bandwidth kernel: it reads topk rows and writes one per token. The output is one
// flat index space of vectors of kBytes (16 when every base pointer, row pitch and the row
// size allow it; else the widest of 8, 4, 2 bytes that does, and at least one element), so
// any hidden size fills the grid evenly and small token counts spread over many blocks (the
// hidden dimension is split across blocks). Thread i owns output vector i: it issues all its
// topk loads (rows j = 0..topk-1 of its token, same columns) before it adds anything, then
// sums in order and stores. topk 1, 2, 4, 6, 8, 9, 10 (9: DeepSeek-V3's 8 and a fused shared
// expert; 10: Qwen3-Next) are compile-time on the 16-byte path; every other case runs the
// general kernel, which loads the rows in groups of kGroup (a group's loads all in flight).
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
namespace moe_sum_impl {

// Threads of one launch at most: thread indices stay 32-bit (FastDivmod); a larger call is cut
// into launches of whole tokens.
constexpr int64_t kMaxLaunchThreads = int64_t{1} << 31;
// Rows loaded together by the general kernel (runtime topk): 8 chunks of 16 bytes are 32
// registers; topk 3, 5 and 7 take one group, 11 to 16 two.
constexpr int kGroup = 8;
constexpr int kMaxThreads = 256;  // __launch_bounds__ of every instance
// NOTE: launch shapes chosen without a GPU (to be tuned). Calls of at most kSmallMaxThreads
// threads (decode: T = 128, H = 2048, bf16 is 32768 16-byte vectors) run 64-thread blocks, so
// that a few thousand vectors still spread over tens of SMs (each thread moves topk * 16
// bytes: one SM pulling a 256-thread block of topk 8 asks L2 for 32 KB), take the PDL wait
// with their first row's address prefetched (pdl_wait_prefetched) and trigger their dependents
// once their loads are issued (PdlTrigger::kAfterLoads, sgl_kernel/arch.cuh). Larger calls run
// 256-thread blocks with the trigger at the end: a trigger in every block of a grid of many
// short blocks cost embedding_lookup 15 % (embedding_lookup.cu's NOTE, session 22).
constexpr int64_t kSmallMaxThreads = 32768;
constexpr int kSmallThreads = 64;
constexpr int kLargeThreads = 256;

// The register type of one kBytes chunk: 32-bit words, or one 16-bit element.
template <int kBytes>
struct ChunkOf {
  using type = Vec<uint32_t, kBytes / 4>;
};
template <>
struct ChunkOf<2> {
  using type = uint16_t;
};
template <int kBytes>
using Chunk = typename ChunkOf<kBytes>::type;

// One plain ld.global of kBytes (not ld.global.nc: read-only loads may be hoisted above the PDL
// wait, tests/test_pdl_order.py).
template <int kBytes>
__device__ __forceinline__ Chunk<kBytes> load_chunk(const void* p) {
  if constexpr (kBytes == 2) {
    return *static_cast<const uint16_t*>(p);
  } else {
    return load_vec<Chunk<kBytes>, LoadPolicy::kDefault>(p);
  }
}

template <int kBytes>
__device__ __forceinline__ void store_chunk(void* p, const Chunk<kBytes>& v) {
  if constexpr (kBytes == 2) {
    *static_cast<uint16_t*>(p) = v;
  } else {
    store_vec(p, v);
  }
}

// Placed after a thread's loads: keeps ptxas from sinking any of them below the arithmetic on
// the first ones (it keeps memory accesses on their side of a fence, not arithmetic: the fence
// lands after the adds, before the store, as one MEMBAR.ALL.CTA once the loaded data is in).
// NOTE (sm_90a SASS, nvcc 13.0): without it the topk = 8 bf16 kernel of the large shape issued
// 3 loads, waited for the first two to add them, then issued the rest one or two at a time
// (32 registers; several memory round trips in a row per thread); with it the 8 loads go first
// (46 registers). __syncwarp() and fence.acquire.cta did not keep them; membar.cta
// (__threadfence_block) does, as the heavier MEMBAR.SC.CTA. The decode shape's PDL trigger
// after the loads has the same effect on sm90+.
__device__ __forceinline__ void loads_issued() { asm volatile("fence.acq_rel.cta;" ::: "memory"); }

// The kBytes / sizeof(T) elements of a chunk as fp32 (exact), and back (round to nearest even).
template <typename T, int kBytes>
__device__ __forceinline__ void unpack(const Chunk<kBytes>& c, float* f) {
  if constexpr (kBytes == 2) {
    static_assert(sizeof(T) == 2, "2-byte chunks hold one fp16/bf16 element");
    if constexpr (std::is_same_v<T, half>) {
      f[0] = __half2float(__ushort_as_half(c));
    } else {
      f[0] = __bfloat162float(__ushort_as_bfloat16(c));
    }
  } else {
#pragma unroll
    for (int w = 0; w < kBytes / 4; ++w) Words<T>::unpack(c[w], f + w * Words<T>::kPer);
  }
}

template <typename T, int kBytes>
__device__ __forceinline__ Chunk<kBytes> pack(const float* f) {
  Chunk<kBytes> c;
  if constexpr (kBytes == 2) {
    if constexpr (std::is_same_v<T, half>) {
      c = __half_as_ushort(__float2half_rn(f[0]));
    } else {
      c = __bfloat16_as_ushort(__float2bfloat16_rn(f[0]));
    }
  } else {
#pragma unroll
    for (int w = 0; w < kBytes / 4; ++w) c[w] = Words<T>::pack(f + w * Words<T>::kPer);
  }
  return c;
}

// acc (+)= the elements of chunk c, in fp32; `first`: acc = c (the sum starts from term 0).
template <typename T, int kBytes>
__device__ __forceinline__ void accumulate(float* acc, const Chunk<kBytes>& c, bool first) {
  constexpr int kElems = kBytes / static_cast<int>(sizeof(T));
  float f[kElems];
  unpack<T, kBytes>(c, f);
#pragma unroll
  for (int e = 0; e < kElems; ++e) acc[e] = first ? f[e] : acc[e] + f[e];
}

// Thread i (of `total` = tokens of this launch * cols) writes output vector c of token
// tok0 + t, (t, c) = divmod(i, cols), cols = hidden / kElems. kTopk > 0: exactly kTopk rows
// (p.topk == kTopk), all loaded at once. kTopk == 0: p.topk rows (any, 0 included) in groups of
// kGroup, predicated. kSmall: the decode launch shape (see kSmallMaxThreads).
// Threads past `total` compute the last vector again (no branch before the loads) and skip the
// store.
template <typename T, int kBytes, int kTopk, bool kSmall>
__global__ void __launch_bounds__(kMaxThreads)
    moe_sum_kernel(const MoeSumParams p,   // out: [num_tokens, hidden] pitch out_stride;
                                           // input: [num_tokens, topk, hidden] pitches
                                           // in_token_stride, in_k_stride (elements)
                   const FastDivmod cols,  // vectors per row, hidden / kElems
                   const uint32_t total,   // threads with a vector in this launch, >= 1
                   const int64_t tok0) {   // first token of this launch
  using C = Chunk<kBytes>;
  constexpr int kElems = kBytes / static_cast<int>(sizeof(T));
  constexpr int kLoads = kTopk > 0 ? kTopk : kGroup;
  const uint32_t raw = blockIdx.x * blockDim.x + threadIdx.x;  // < 2^31 + kMaxThreads
  const uint32_t i = min(raw, total - 1);
  uint32_t t, c;
  cols.divmod(i, t, c);
  const int64_t token = tok0 + t;
  const int64_t col = static_cast<int64_t>(c) * kElems;
  // [num_tokens, topk, hidden]: row j of this thread's token, from its column on
  const T* __restrict__ src = static_cast<const T*>(p.input) + token * p.in_token_stride + col;
  // [num_tokens, hidden]
  T* __restrict__ dst = static_cast<T*>(p.out) + token * p.out_stride + col;
  const int topk = kTopk > 0 ? kTopk : p.topk;

  if constexpr (kSmall) {
    pdl_wait_prefetched(src);  // before any input is read; src is a row this thread reads
  } else {
    SGL_PDL_WAIT();  // before any input is read
  }
  C x[kLoads];
#pragma unroll
  for (int u = 0; u < kLoads; ++u) {
    if (kTopk > 0 || u < topk) x[u] = load_chunk<kBytes>(src + u * p.in_k_stride);
  }
  if constexpr (kSmall) SGL_PDL_LAUNCH_DEPENDENTS();  // PdlTrigger::kAfterLoads
  loads_issued();

  float acc[kElems];
#pragma unroll
  for (int e = 0; e < kElems; ++e) acc[e] = 0.0f;  // the empty sum (topk == 0)
#pragma unroll
  for (int u = 0; u < kLoads; ++u) {
    if (kTopk > 0 || u < topk) accumulate<T, kBytes>(acc, x[u], u == 0);
  }
  if constexpr (kTopk == 0) {
    // topk > kGroup: the next groups, each with all its loads in flight before its adds.
    for (int j0 = kGroup; j0 < topk; j0 += kGroup) {
      const T* row = src + j0 * p.in_k_stride;
#pragma unroll
      for (int u = 0; u < kGroup; ++u) {
        if (j0 + u < topk) x[u] = load_chunk<kBytes>(row + u * p.in_k_stride);
      }
      loads_issued();
#pragma unroll
      for (int u = 0; u < kGroup; ++u) {
        if (j0 + u < topk) accumulate<T, kBytes>(acc, x[u], false);
      }
    }
  }
  if (p.apply_scale) {
#pragma unroll
    for (int e = 0; e < kElems; ++e) acc[e] *= p.scale;
  }
  if (raw < total) store_chunk<kBytes>(dst, pack<T, kBytes>(acc));
  if constexpr (!kSmall) SGL_PDL_LAUNCH_DEPENDENTS();  // at the end (kSmallMaxThreads' NOTE)
}

// All launches of one instance: token ranges of at most kMaxLaunchThreads threads.
template <typename T, int kBytes, int kTopk, bool kSmall>
cudaError_t launch_instance(const MoeSumParams& p, cudaStream_t stream) {
  constexpr int kElems = kBytes / static_cast<int>(sizeof(T));
  constexpr int kThreads = kSmall ? kSmallThreads : kLargeThreads;
  const int64_t cols = p.hidden / kElems;
  if (cols > kMaxLaunchThreads) return cudaErrorInvalidValue;  // rows of over 2^31 vectors
  const int64_t tokens_per_launch = kMaxLaunchThreads / cols;
  for (int64_t tok0 = 0; tok0 < p.num_tokens; tok0 += tokens_per_launch) {
    const int64_t total = std::min(tokens_per_launch, p.num_tokens - tok0) * cols;
    SGL_CUDA_TRY(launch_kernel(moe_sum_kernel<T, kBytes, kTopk, kSmall>,
                               dim3(static_cast<uint32_t>(ceil_div<int64_t>(total, kThreads))), dim3(kThreads), 0,
                               stream, p.enable_pdl, p, FastDivmod(static_cast<uint32_t>(cols)),
                               static_cast<uint32_t>(total), tok0));
  }
  return cudaSuccess;
}

template <typename T, int kBytes, bool kSmall>
cudaError_t launch_width(const MoeSumParams& p, cudaStream_t stream) {
  if constexpr (kBytes == 16) {
    return with_static_topk(p.topk, [&](auto topk) { return launch_instance<T, kBytes, topk, kSmall>(p, stream); });
  }
  return launch_instance<T, kBytes, 0, kSmall>(p, stream);
}

// The widest chunk (16, 8, 4, 2 or 1 bytes; less than an element only for a pointer that is
// not aligned to its element type, which torch never makes) that divides every base address,
// every row pitch in bytes that is used (a dimension of size 1 is never stepped along, so its
// stride, which torch leaves arbitrary, does not count) and the row size.
template <typename T>
int chunk_bytes(const MoeSumParams& p) {
  constexpr int64_t kElem = sizeof(T);
  const auto address = [](const void* ptr) { return static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr)); };
  return sgl_kernel::chunk_bytes({address(p.out), static_cast<uint64_t>(p.hidden * kElem),
                                  p.topk > 0 ? address(p.input) : 0,
                                  p.num_tokens > 1 ? static_cast<uint64_t>(p.out_stride * kElem) : 0,
                                  p.num_tokens > 1 && p.topk > 0 ? static_cast<uint64_t>(p.in_token_stride * kElem) : 0,
                                  p.topk > 1 ? static_cast<uint64_t>(p.in_k_stride * kElem) : 0});
}

template <typename T, bool kSmall>
cudaError_t launch_shape(const MoeSumParams& p, cudaStream_t stream) {
  switch (chunk_bytes<T>(p)) {
    case 16: return launch_width<T, 16, kSmall>(p, stream);
    case 8: return launch_width<T, 8, kSmall>(p, stream);
    case 4: return launch_width<T, 4, kSmall>(p, stream);
    case 2:
      if constexpr (sizeof(T) == 2) return launch_width<T, 2, kSmall>(p, stream);
      break;
    default: break;
  }
  return cudaErrorMisalignedAddress;  // a pointer or pitch not aligned to the element size
}

template <typename T>
cudaError_t launch_typed(const MoeSumParams& p, cudaStream_t stream) {
  const int64_t elems = std::max<int64_t>(chunk_bytes<T>(p) / static_cast<int64_t>(sizeof(T)), 1);
  const int64_t threads = p.num_tokens * (p.hidden / elems);
  // topk == 0: no input row exists to prefetch before the wait (the large shape's plain wait).
  if (threads <= kSmallMaxThreads && p.topk > 0) return launch_shape<T, true>(p, stream);
  return launch_shape<T, false>(p, stream);
}

}  // namespace moe_sum_impl
}  // namespace

cudaError_t launch_moe_sum(const MoeSumParams& p, cudaStream_t stream) {
  if (p.num_tokens < 0 || p.hidden < 0 || p.topk < 0) return cudaErrorInvalidValue;
  if (p.num_tokens == 0 || p.hidden == 0) return cudaSuccess;
  if (p.out == nullptr || (p.topk > 0 && p.input == nullptr)) return cudaErrorInvalidValue;
  switch (p.dtype) {
    case Dtype::kFloat32: return moe_sum_impl::launch_typed<float>(p, stream);
    case Dtype::kFloat16: return moe_sum_impl::launch_typed<half>(p, stream);
    case Dtype::kBFloat16: return moe_sum_impl::launch_typed<__nv_bfloat16>(p, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sgl_kernel::moe
