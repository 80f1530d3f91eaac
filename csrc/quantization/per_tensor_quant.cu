// SPDX-License-Identifier: Apache-2.0
// sgl_per_tensor_quant_fp8: one fp32 scale for the whole tensor.
//
// Dynamic: scale[0] <- max(scale[0], max|x| / 448), compared as signed integers on the
// float's bits (for non-negative floats that is the float order, a negative start value loses
// to any scale, and a NaN wins); the codes use the new scale[0].
// - Small tensors (up to one 16-byte vector per thread of one 1024-thread block): one
//   kernel, the tensor kept in registers between the maximum and the codes.
// - Mid-size tensors (up to 8192 vectors, 128 KB; sm90+): the same in one thread-block
//   cluster of up to 16 blocks, the blocks' maxima exchanged through distributed shared
//   memory (without clusters: one block up to 2 vectors per thread, else as below).
// - Otherwise a reduction kernel folds the maximum into scale[0] with an integer atomicMax,
//   then the code kernel reads scale[0] after the PDL wait (its input loaded before it).
// The kernels walk the tensor as 16-byte vectors when input and output are aligned, with a
// scalar tail. A misaligned tensor (a view at an odd offset) takes the two-kernel path with
// kPeel: its first elements up to a 16-byte boundary of the input are peeled off, the input
// is read in 16-byte vectors from there, and the codes are stored byte by byte.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "quantization/quant.cuh"
#include "quantization/quantization.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/cluster.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/reduce.cuh"
#include "sgl_kernel/runtime.h"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::quantization {

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr float kFp8Max = 448.0f;

// Elements of `p` before its first 16-byte boundary (0 when aligned).
template <typename T>
__host__ __device__ __forceinline__ int peel_elems(const T* p) {
  return static_cast<int>((16 - reinterpret_cast<uintptr_t>(p) % 16) % 16 / sizeof(T));
}

// kPeel: the input's elements [0, peel_elems(input)) are read one by one, its 16-byte vectors
// num_vec from there, and the rest one by one (a misaligned tensor).
template <typename T, LoadPolicy kLoad = LoadPolicy::kStream, bool kPeel = false>
__global__ void __launch_bounds__(kThreads) tensor_amax_kernel(const TensorQuantParams<T> p, const int64_t num_vec) {
  constexpr int kVec = kVec16<T>;
  __shared__ uint32_t scratch[kThreads / 32];
  SGL_PDL_WAIT();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  uint32_t amax = 0;
  const int head = kPeel ? peel_elems(p.input) : 0;
  const T* vin = p.input + head;
  if (kPeel && tid < head) amax = abs_bits(to_float(p.input[tid]));
  for (int64_t i = tid; i < num_vec; i += stride * kUnroll) {
    Vec16<T> x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < num_vec) x[u] = load16<T, kLoad>(vin + (i + u * stride) * kVec);
    }
    // The code kernel may be scheduled now (once its loads are issued: sgl_kernel/arch.cuh;
    // T=128 H=4096 2.41 -> 2.32 us against right after the wait); it waits for this grid to
    // finish before it reads the scale.
    SGL_PDL_LAUNCH_DEPENDENTS();
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < num_vec) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) amax = max(amax, abs_bits(to_float(x[u][e])));
      }
    }
  }
  for (int64_t j = head + num_vec * kVec + tid; j < p.numel; j += stride) {
    amax = max(amax, abs_bits(to_float(p.input[j])));
  }

  amax = warp_reduce_max(amax);
  if ((threadIdx.x & 31) == 0) scratch[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll
    for (int w = 1; w < kThreads / 32; ++w) amax = max(amax, scratch[w]);
    const float s = __fdiv_rn(__uint_as_float(amax), kFp8Max);
    atomicMax(reinterpret_cast<int*>(p.scale), __float_as_int(s));
  }
}

// The codes `q` stored to `dst` in pieces of kPiece bytes (dst aligned to kPiece).
template <int kPiece, int N>
__device__ __forceinline__ void store_pieces(uint8_t* dst, const Vec<uint8_t, N>& q) {
  using Piece = Vec<uint8_t, kPiece>;
#pragma unroll
  for (int k = 0; k < N / kPiece; ++k) {
    reinterpret_cast<Piece*>(dst)[k] = reinterpret_cast<const Piece*>(&q)[k];
  }
}

// Codes of vectors of kElems elements (16, 8 or 4 bytes; the tensor's elements [0, num_vec *
// kElems)), kUnroll vectors per thread; the rest (numel % kElems, or all of a misaligned
// tensor of at most kSmallThreads elements) by the first block, one element per thread.
// kLoad: the vectors' cache policy.
// kPreload (dynamic only: launched right after tensor_amax_kernel): the vectors are loaded
// before the PDL wait. The input is not written by the maximum kernel, and whatever wrote it
// before that has finished: this grid launches only once every block of the maximum kernel has
// passed its own wait (its trigger comes after it). Only the scale needs the wait.
// The dependents' trigger comes after the vector loads are issued, the scale load after it.
// NOTE (H200, session 17, bench_per_token_quant.py --no-compile, alternated twice, us at T =
// 1 / 16 / 128, bf16 H=4096): static 0.90 / 1.02 / 1.41 with the trigger and the scale load
// right after the wait, 0.86 / 0.96 / 1.15 so; dynamic (per_tensor_dyn_op, with this
// session's block counts) T=128 2.93 -> 2.42.
// kBlock: the block (kThreads in every production launch). NOTE (H200, session 41,
// tune_per_tensor.cu --streams 64 "cbN", dynamic, one vector a thread, two runs, us at T = 64 /
// 128 / 256 / 512, bf16 H=4096): 256 threads 2.05 / 2.20 / 2.64 / 3.45, 128 2.03 / 2.22 / 3.08 /
// 4.71, 512 2.00 / 2.20 / 2.66 / 3.34, 1024 2.13 / 2.23 / 2.90 / 3.89: kept.
// kPeel (16-byte vectors of a misaligned tensor): as the maximum kernel's kPeel, the vectors'
// codes stored in the widest pieces the output allows (it need not share the input's
// alignment), the peeled and the last elements by the first block.
template <typename T, int kElems, int kUnroll, LoadPolicy kLoad = LoadPolicy::kStream, bool kPreload = false,
          bool kPeel = false, int kBlock = kThreads>
__global__ void __launch_bounds__(kBlock) tensor_code_kernel(const TensorQuantParams<T> p, const int64_t num_vec) {
  using V = Vec<T, kElems>;
  if constexpr (!kPreload) SGL_PDL_WAIT();
  const int64_t base = static_cast<int64_t>(blockIdx.x) * (kBlock * kUnroll) + threadIdx.x;
  const int head = kPeel ? peel_elems(p.input) : 0;
  V x[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + u * kBlock;
    if (i < num_vec) x[u] = load_vec<V, kLoad>(p.input + head + i * kElems);
  }
  if constexpr (kPreload) SGL_PDL_WAIT();
  SGL_PDL_LAUNCH_DEPENDENTS();  // early: see sgl_kernel/arch.cuh
  const float inv = inverse_scale(*p.scale);
  if constexpr (kPeel) {
    uint8_t* out = p.output_q + head;
    // The widest store the output's alignment allows (the same for every vector: kElems
    // divides each vector's offset).
    const int align = static_cast<int>(reinterpret_cast<uintptr_t>(out) & (kElems - 1));
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t i = base + u * kBlock;
      if (i < num_vec) {
        const Vec<uint8_t, kElems> q = vec_codes<QuantCode::kFp8>(x[u], inv, -kFp8Max, kFp8Max, false);
        uint8_t* dst = out + i * kElems;
        if (align == 0) {
          store_pieces<kElems>(dst, q);
        } else if (align % 4 == 0) {
          store_pieces<4>(dst, q);
        } else if (align % 2 == 0) {
          store_pieces<2>(dst, q);
        } else {
          store_pieces<1>(dst, q);
        }
      }
    }
  } else {
    store_share_codes<QuantCode::kFp8>(x, p.output_q, base, kBlock, num_vec, inv, -kFp8Max, kFp8Max, false);
  }
  if (blockIdx.x == 0) {
    if (kPeel && threadIdx.x < head) {
      p.output_q[threadIdx.x] = to_code<QuantCode::kFp8>(to_float(p.input[threadIdx.x]) * inv, -kFp8Max, kFp8Max);
    }
    for (int64_t j = head + num_vec * kElems + threadIdx.x; j < p.numel; j += kBlock) {
      p.output_q[j] = to_code<QuantCode::kFp8>(to_float(p.input[j]) * inv, -kFp8Max, kFp8Max);
    }
  }
}

template <typename T, int kElems, int kUnroll, LoadPolicy kLoad = LoadPolicy::kStream, bool kPeel = false,
          int kBlock = kThreads>
cudaError_t launch_code_kernel(const TensorQuantParams<T>& p, int64_t num_vec, cudaStream_t stream) {
  const int64_t blocks = std::max<int64_t>(1, ceil_div<int64_t>(num_vec, kBlock * kUnroll));
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<uint32_t>(blocks));
  if (p.dynamic) {
    return launch_kernel(tensor_code_kernel<T, kElems, kUnroll, kLoad, true, kPeel, kBlock>, grid, dim3(kBlock), 0,
                         stream, p.enable_pdl, p, num_vec);
  }
  return launch_kernel(tensor_code_kernel<T, kElems, kUnroll, kLoad, false, kPeel, kBlock>, grid, dim3(kBlock), 0,
                       stream, p.enable_pdl, p, num_vec);
}

constexpr int kSmallThreads = 1024;
constexpr int kSmallVpt = 2;  // most vectors a thread holds (16 KB of bf16)

// Dynamic per-tensor quantization in one launch, the tensor read once and held in registers
// between the maximum and the codes, by
// - kCluster = false: one block (small tensors);
// - kCluster = true (sm90+): one thread-block cluster of up to 16 blocks (mid-size tensors),
//   the blocks' maxima exchanged through distributed shared memory (cluster_reduce: one
//   cluster barrier). It replaces the two-kernel path (maximum with an atomic, then the codes
//   after the PDL wait), whose second kernel waits for the first grid to finish and flush.
// Global thread g = blockIdx.x * blockDim.x + threadIdx.x holds vectors g + u * (blocks *
// blockDim.x), u < kVpt; the tail (numel % kVec elements, or all of a misaligned tensor) goes
// to the first global threads, one element each.
// NOTE (tune_per_tensor.cu, H100, bf16 H=4096 in a CUDA graph, us): T=1 one block 1.19, a
// 2-block cluster 1.65, the two-kernel path 2.35; cluster sizes at launch_per_tensor_quant.
template <typename T, int kVpt, bool kCluster>
__global__ void __launch_bounds__(kVpt <= 4 ? kSmallThreads : kSmallThreads / 2)
    tensor_quant_onepass_kernel(const TensorQuantParams<T> p, const int64_t num_vec) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  if constexpr (kCluster) __trap();  // no clusters below sm90: cluster_launchable refuses this code
#endif
  constexpr int kVec = kVec16<T>;
  __shared__ uint32_t warp_max[kSmallThreads / 32];
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + tid;  // one cluster: rank = blockIdx.x
  const int64_t total = static_cast<int64_t>(gridDim.x) * blockDim.x;
  SGL_PDL_WAIT();
  // Early (at most 16 blocks). NOTE (H200, session 16, bench_per_token_quant.py --no-compile,
  // alternated A B A B, us at T = 1 / 16): per_tensor_dyn_op 1.27 / 2.06 with the trigger at the
  // end, 1.11 / 1.86 right after the wait.
  SGL_PDL_LAUNCH_DEPENDENTS();
  // Read by every block before the cluster barrier; block 0 writes it only after.
  const int start_bits = __float_as_int(*p.scale);
  Vec16<T> x[kVpt];
  load_share<LoadPolicy::kStream>(x, p.input, g, total, num_vec);
  const int64_t tail = num_vec * kVec + g;
  const float tail_x = tail < p.numel ? to_float(p.input[tail]) : 0.0f;
  uint32_t amax = share_max_bits(x, g, total, num_vec, abs_bits(tail_x));
  amax = __reduce_max_sync(0xffffffffu, amax);
  if (lane == 0) warp_max[tid >> 5] = amax;
  __syncthreads();
  // Every warp reduces the partials (not a serial loop over 32 of them).
  amax = __reduce_max_sync(0xffffffffu, lane < static_cast<int>(blockDim.x >> 5) ? warp_max[lane] : 0u);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  if constexpr (kCluster) {
    __shared__ uint32_t block_max[kMaxClusterBlocks];  // cluster_reduce's table
    amax = cluster_reduce(amax, block_max, [](uint32_t a, uint32_t b) { return max(a, b); });
  }
#endif
  const float s = __int_as_float(max(start_bits, __float_as_int(__fdiv_rn(__uint_as_float(amax), kFp8Max))));
  if (g == 0) *p.scale = s;
  const float inv = inverse_scale(s);
  store_share_codes<QuantCode::kFp8>(x, p.output_q, g, total, num_vec, inv, -kFp8Max, kFp8Max, false);
  if (tail < p.numel) p.output_q[tail] = to_code<QuantCode::kFp8>(tail_x * inv, -kFp8Max, kFp8Max);
}

// The current device's multiprocessor count (cached per device by runtime.cc).
int sm_count() {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 132;
  return device_sm_count(device);
}

// The two-kernel path (dynamic) up to this many vectors: the maximum kernel on kFewVecBlocks
// blocks (session 34, below; two vectors a thread and at least 64 blocks before), the code
// kernel one vector a thread. Past it, kUnroll vectors a thread in both, the codes with plain
// loads (the maximum keeps ld.global.nc below kPlainLoadBytes). NOTE (H200, session 17,
// tune_per_tensor.cu "xB pl|nc uU", bf16 H=4096, us at T = 32 / 64 / 128 / 256 / 1024 / 4096,
// the code kernel loading before its PDL wait):
// before (the maximum on num_vec / 1024 blocks, the codes one vector a thread below 132 * 1024
// vectors, ld.global.nc below 256 MiB) 2.08 / 2.29 / 2.62 / 3.16 / 6.11 / 20.5; maximum on 64 /
// 64 / 128 blocks, codes one vector a thread: 1.96 / 2.15 / 2.36 (on 32 / 128 / 256 blocks:
// 2.01 / 2.13 / 2.42); past it, codes with plain loads and kUnroll vectors: T = 256 / 1024 /
// 4096 2.73 / 4.98 / 17.4 (ld.global.nc: 2.99 / 6.11 / 20.1; one vector a thread at T = 256:
// 3.18). The maximum kernel with plain loads too: 2.74 / 5.00 / 17.2, and at H=7168 T=4096
// 37.6 against 35.8.
// Session 34 (H200, tune_per_tensor.cu --streams 64: the state of a torch process that has used
// more than 9 streams, where the bench's numbers are reproduced; RESULTS.md), three rounds, us
// at T = 32 / 64 / 96 / 128: the maximum on 64 blocks ("two64") 1.99-2.00 / 2.03-2.04 / 2.11-2.12 /
// 2.28-2.29 against production's 64 / 64 / 96 / 128 blocks 2.00-2.01 / 2.03-2.04 / 2.12-2.14 /
// 2.36-2.38. So up to kFewVec items the maximum runs on kFewVecBlocks blocks (one block per
// kThreads items below 64 such blocks' worth); before, 65-128 blocks from 32768 items. (Without
// the many streams 64 and 128 blocks read the same at T=128: 2.60-2.61.)
constexpr int64_t kFewVec = 65536;  // 1 MiB of bf16
constexpr int kFewVecBlocks = 64;
// The dynamic code kernel takes one vector a thread (ld.global.nc) up to this many vectors, past
// kFewVec too. NOTE (H200, session 34, tune_per_tensor.cu --streams 64, two rounds, bf16 H=4096,
// us at T = 192 / 256 / 384 / 512 / 1024 / 2048): production then (kUnroll vectors a thread,
// plain loads, past kFewVec) 2.73-2.75 / 3.02 / 3.42-3.43 / 3.92 / 5.29-5.32 / 8.30, one vector a
// thread ("x0 nc u1") 2.42-2.43 / 2.75 / 3.16 / 3.42-3.43 / 5.76 / 9.33. (Session 17, without
// the many streams, had read T=256 the other way round: 3.18 against 2.73.)
constexpr int64_t kOneVecCodes = 4 * kFewVec;  // 4 MiB of bf16

// Dynamic: the maximum folded into scale[0] by an atomic; then the codes (below).
template <typename T, LoadPolicy kLoad = LoadPolicy::kStream, bool kPeel = false>
cudaError_t launch_amax(const TensorQuantParams<T>& p, int64_t num_vec, cudaStream_t stream, int force_blocks = 0) {
  constexpr int kVec = kVec16<T>;
  const int sms = sm_count();
  // Enough blocks to fill the GPU (at most 8 per SM), few enough that the atomics stay
  // negligible; a thread's items (vectors, or tail elements of a misaligned tensor).
  const int64_t items = kPeel ? num_vec : std::max(num_vec, p.numel - num_vec * kVec);
  int64_t want = ceil_div<int64_t>(items, kThreads * kUnroll);
  if (items <= kFewVec) want = std::min<int64_t>(kFewVecBlocks, ceil_div<int64_t>(items, kThreads));
  const uint32_t blocks = force_blocks > 0 ? force_blocks
                                           : static_cast<uint32_t>(std::clamp<int64_t>(want, 1, int64_t{sms} * 8));
  return launch_kernel(tensor_amax_kernel<T, kLoad, kPeel>, dim3(blocks), dim3(kThreads), 0, stream, p.enable_pdl, p,
                       num_vec);
}

// Tensors of at least this many input bytes are read with plain loads (ld.global) instead of
// ld.global.nc.L1::no_allocate by the static code kernel (the dynamic path: kFewVec). NOTE
// (H200, session 16, benchmark/quantization/tune_per_tensor.cu, the same buffers every call,
// us): static codes bf16 H=4096 T=32768 100.7-100.9 -> 91.8-92.1 (4386 GB/s, 104 % of copy),
// H=7168 T=32768 177.1 -> 162.1. Smaller tensors were mixed (static H=4096 T=1024 / 4096
// 3.26 / 12.1 -> 2.51 / 11.75, but H=7168 T=4096 20.1 -> 21.3) and keep the nc loads.
constexpr int64_t kPlainLoadBytes = int64_t{256} << 20;

template <typename T>
bool plain_loads(const TensorQuantParams<T>& p) {
  return p.numel * static_cast<int64_t>(sizeof(T)) >= kPlainLoadBytes;
}

// The codes with the scale in scale[0] (dynamic: right after launch_amax).
template <typename T>
cudaError_t launch_codes(const TensorQuantParams<T>& p, int64_t num_vec, cudaStream_t stream) {
  // NOTE: small tensors get one vector per thread, so that they spread over more SMs; below 64
  // KB of input, 4-byte vectors (16-bit types) or 8-byte ones (fp32) over more threads (as
  // the activations' decode shapes, activation.cu).
  if (p.dynamic ? num_vec <= kOneVecCodes : num_vec < int64_t{132} * kThreads * kUnroll) {
    constexpr int kNarrow = 2;  // elements: a 4-byte vector (8 bytes for fp32)
    const bool narrow_ok = reinterpret_cast<uintptr_t>(p.input) % (kNarrow * sizeof(T)) == 0 &&
                           reinterpret_cast<uintptr_t>(p.output_q) % kNarrow == 0;
    if (p.numel * static_cast<int64_t>(sizeof(T)) < (int64_t{64} << 10) && narrow_ok) {
      return launch_code_kernel<T, kNarrow, 1>(p, p.numel / kNarrow, stream);
    }
    return launch_code_kernel<T, kVec16<T>, 1>(p, num_vec, stream);
  }
  if (p.dynamic || plain_loads(p)) {
    return launch_code_kernel<T, kVec16<T>, kUnroll, LoadPolicy::kDefault>(p, num_vec, stream);
  }
  return launch_code_kernel<T, kVec16<T>, kUnroll>(p, num_vec, stream);
}

template <typename T, int kVpt>
cudaError_t launch_cluster_quant(const TensorQuantParams<T>& p, int64_t num_vec, int cs, int threads,
                                 cudaStream_t stream) {
  return launch_kernel_clustered(tensor_quant_onepass_kernel<T, kVpt, true>, dim3(static_cast<uint32_t>(cs)),
                                 dim3(static_cast<uint32_t>(threads)), 0, stream, p.enable_pdl, cs, p, num_vec);
}

// The cluster for a mid-size tensor of num_vec vectors (kSmallThreads < num_vec <=
// kClusterMaxVec): 2-16 blocks of 256 threads, one vector a thread, then two. From
// tune_per_tensor.cu (H100, bf16 H=4096, us; against the one-block kernel with two vectors a
// thread and the two-kernel path): T=4 c8t256v1 1.67 (1.92 / 2.48), T=8 c16t256v1 1.82
// (- / 2.47), T=16 c16t256v2 2.02 (- / 2.53). T=32 c16t256v4 2.34 against 2.39 for the
// two-kernel path on 64 blocks: not taken, and T=64 c16t512v4 2.93 against 2.55: the 16 SMs of
// one cluster read the tensor slower than the whole GPU does. Blocks of 512 or 1024 threads
// were as fast or slower; a cooperative grid's grid-wide barrier cost more than the kernel
// boundary (T=64 g128t256v1 2.79).
constexpr int kClusterThreads = 256;
constexpr int64_t kClusterMaxVec = int64_t{kMaxClusterBlocks} * kClusterThreads * 2;

struct ClusterShape {
  int blocks, vpt;
};

ClusterShape cluster_shape(int64_t num_vec) {
  int cs = 2;
  while (cs < kMaxClusterBlocks && int64_t{cs} * kClusterThreads < num_vec) cs *= 2;
  return {cs, num_vec <= int64_t{cs} * kClusterThreads ? 1 : 2};
}

}  // namespace

template <typename T>
cudaError_t launch_per_tensor_quant(const TensorQuantParams<T>& p, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  if (p.numel == 0) return cudaSuccess;
  const bool aligned = is_aligned16(p.input) && is_aligned16(p.output_q);
  const int64_t num_vec = aligned ? p.numel / kVec : 0;
  // A misaligned tensor past the one-block kernels (up to 1024 elements): the peeled kernels,
  // 16-byte vectors of the input from its first 16-byte boundary (kPeel).
  const int head = peel_elems(p.input);
  const int64_t peel_vec = std::max<int64_t>(0, p.numel - head) / kVec;
  const bool peel = !aligned && p.numel > kSmallThreads;
  if (p.dynamic) {
    const int64_t tail = p.numel - num_vec * kVec;
    const int64_t per_thread = ceil_div<int64_t>(num_vec, kSmallThreads);
    // Just enough threads (whole warps) of one block for the tail and a vector each.
    if (tail <= kSmallThreads && per_thread <= 1) {
      const int64_t want = std::max(num_vec, tail);
      const dim3 block(static_cast<uint32_t>(std::max<int64_t>(32, ceil_div<int64_t>(want, 32) * 32)));
      return launch_kernel(tensor_quant_onepass_kernel<T, 1, false>, dim3(1), block, 0, stream, p.enable_pdl, p, num_vec);
    }
    // Mid-size tensors (16-128 KB of 16-byte vectors; the tail is then < kVec elements): one
    // cluster (cluster_shape), where the device runs clusters.
    if (num_vec > kSmallThreads && num_vec <= kClusterMaxVec) {
      const ClusterShape c = cluster_shape(num_vec);
      if (c.vpt == 1 && cluster_launchable<tensor_quant_onepass_kernel<T, 1, true>>(c.blocks, kClusterThreads)) {
        return launch_cluster_quant<T, 1>(p, num_vec, c.blocks, kClusterThreads, stream);
      }
      if (c.vpt == 2 && cluster_launchable<tensor_quant_onepass_kernel<T, 2, true>>(c.blocks, kClusterThreads)) {
        return launch_cluster_quant<T, 2>(p, num_vec, c.blocks, kClusterThreads, stream);
      }
    }
    if (peel) {
      SGL_CUDA_TRY((launch_amax<T, LoadPolicy::kStream, true>(p, peel_vec, stream)));
    } else if (tail <= kSmallThreads && per_thread <= kSmallVpt) {
      return launch_kernel(tensor_quant_onepass_kernel<T, kSmallVpt, false>, dim3(1), dim3(kSmallThreads), 0, stream,
                           p.enable_pdl, p, num_vec);
    } else {
      SGL_CUDA_TRY((plain_loads(p) ? launch_amax<T, LoadPolicy::kDefault>(p, num_vec, stream)
                                   : launch_amax(p, num_vec, stream)));
    }
  }
  if (peel) return launch_code_kernel<T, kVec, kUnroll, LoadPolicy::kDefault, true>(p, peel_vec, stream);
  return launch_codes(p, num_vec, stream);
}

template cudaError_t launch_per_tensor_quant<float>(const TensorQuantParams<float>&, cudaStream_t);
template cudaError_t launch_per_tensor_quant<half>(const TensorQuantParams<half>&, cudaStream_t);
template cudaError_t launch_per_tensor_quant<__nv_bfloat16>(const TensorQuantParams<__nv_bfloat16>&, cudaStream_t);

}  // namespace sgl_kernel::quantization
