// SPDX-License-Identifier: Apache-2.0
// All-reduce kernels over peer-mapped buffers (protocol: custom_ar.h).
//
// one-shot: every rank reads the whole message from every rank and sums it (ranks in the
//           order 0..W-1, so every rank computes the same bits). Latency-optimal: one
//           barrier before the reads, one after.
// two-shot: rank r sums only partition r of the message (reduce-scatter) into its scratch,
//           then every rank gathers partition p from rank p's scratch (all-gather). Each
//           rank reads 2 (W - 1) / W of the message from peers instead of (W - 1).
// push:     every rank stores its input into every peer's header (push region) and sums
//           what the peers stored into its own; the data is its own flag (custom_ar.h), so
//           a call costs one one-way trip over the links instead of two barriers and a read.
//
// Block b handles the same pack indices in both stages and on every rank, so per-block
// barriers are enough: the data block b reads after a barrier was written by the blocks b
// of the peers before they arrived at it.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "allreduce/custom_ar.h"

namespace sgl_kernel::allreduce {

namespace {

__device__ __forceinline__ void store_flag(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ uint32_t load_flag(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ uint64_t global_timer_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__device__ __forceinline__ void report(const LaunchArgs& a, uint32_t kind, int peer, int barrier) {
  const uint32_t code = kind | (static_cast<uint32_t>(a.rank) << 8) | (static_cast<uint32_t>(peer) << 16) |
                        (static_cast<uint32_t>(barrier) << 24);
  // First writer wins is not needed: any one report poisons the handle.
  *reinterpret_cast<volatile uint32_t*>(a.error) = code;
  __threadfence_system();
}

// Block-wide barrier across the W ranks (see custom_ar.h). Thread p < W signals peer p and
// waits for peer p. Returns false on every thread of the block if any wait timed out.
// `peer_signal` is thread p's a.peers[p] (kernel parameters indexed by thread would go
// through a local copy).
template <int W>
__device__ __forceinline__ bool barrier(const LaunchArgs& a, Signal* peer_signal, int which, uint32_t epoch) {
  __syncthreads();  // this block's earlier reads/writes happen before the flag store
  int timed_out = 0;
  if (threadIdx.x < W) {
    const int peer = threadIdx.x;
    store_flag(&peer_signal->flags[which][blockIdx.x][a.rank], epoch);
    const uint32_t* mine = &a.self->flags[which][blockIdx.x][peer];
    if (load_flag(mine) != epoch) {
      const uint64_t t0 = global_timer_ns();
      uint32_t spins = 0;
      while (load_flag(mine) != epoch) {
        if (a.timeout_ns != 0 && (++spins & 255u) == 0 && global_timer_ns() - t0 > a.timeout_ns) {
          report(a, kErrTimeout, peer, which);
          timed_out = 1;
          break;
        }
      }
    }
  }
  return __syncthreads_or(timed_out) == 0;
}

// 16 bytes of T <-> fp32 accumulators.
template <typename T>
struct Pack;

template <>
struct Pack<float> {
  static constexpr int N = 4;
  static __device__ __forceinline__ void add(float (&acc)[N], const uint4& v, bool first) {
    const float* f = reinterpret_cast<const float*>(&v);
#pragma unroll
    for (int i = 0; i < N; ++i) acc[i] = first ? f[i] : acc[i] + f[i];
  }
  static __device__ __forceinline__ uint4 pack(const float (&acc)[N]) {
    uint4 v;
    float* f = reinterpret_cast<float*>(&v);
#pragma unroll
    for (int i = 0; i < N; ++i) f[i] = acc[i];
    return v;
  }
};

// fp16 and bf16: 8 values as 4 pairs, through the pair conversions of cuda_fp16.h / cuda_bf16.h.
__device__ __forceinline__ float2 pair_to_float2(const __half2 v) { return __half22float2(v); }
__device__ __forceinline__ float2 pair_to_float2(const __nv_bfloat162 v) { return __bfloat1622float2(v); }
template <typename T2>
__device__ __forceinline__ T2 float2_to_pair(float a, float b);
template <>
__device__ __forceinline__ __half2 float2_to_pair<__half2>(float a, float b) { return __floats2half2_rn(a, b); }
template <>
__device__ __forceinline__ __nv_bfloat162 float2_to_pair<__nv_bfloat162>(float a, float b) {
  return __floats2bfloat162_rn(a, b);
}

template <typename T2>
struct PackOfPairs {
  static constexpr int N = 8;
  static __device__ __forceinline__ void add(float (&acc)[N], const uint4& v, bool first) {
    const T2* h = reinterpret_cast<const T2*>(&v);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) {
      const float2 f = pair_to_float2(h[i]);
      acc[2 * i] = first ? f.x : acc[2 * i] + f.x;
      acc[2 * i + 1] = first ? f.y : acc[2 * i + 1] + f.y;
    }
  }
  static __device__ __forceinline__ uint4 pack(const float (&acc)[N]) {
    uint4 v;
    T2* h = reinterpret_cast<T2*>(&v);
#pragma unroll
    for (int i = 0; i < N / 2; ++i) h[i] = float2_to_pair<T2>(acc[2 * i], acc[2 * i + 1]);
    return v;
  }
};

template <>
struct Pack<half> : PackOfPairs<__half2> {};

template <>
struct Pack<__nv_bfloat16> : PackOfPairs<__nv_bfloat162> {};

// Loads from peer memory bypass L1 (ld.global.cg): nothing read here is worth keeping, and
// the scratch read in the second stage was written by peers during this kernel.
__device__ __forceinline__ uint4 load_peer(const uint4* p) { return __ldcg(p); }

// Sum of pack i over the W ranks' buffers, in rank order.
template <typename T, int W>
__device__ __forceinline__ uint4 reduce_pack(const uint4* const (&src)[W], int64_t i) {
  uint4 v[W];
#pragma unroll
  for (int r = 0; r < W; ++r) v[r] = load_peer(src[r] + i);
  float acc[Pack<T>::N];
#pragma unroll
  for (int r = 0; r < W; ++r) Pack<T>::add(acc, v[r], r == 0);
  return Pack<T>::pack(acc);
}

// Per-block call number; the registered-input check shared by both kernels. Returns 0 when
// the block must not run (inputs never registered: reported, and no peer is touched).
template <int W>
__device__ __forceinline__ uint32_t begin_call(const LaunchArgs& a, const uint4* (&src)[W]) {
  __shared__ uint32_t s_epoch;
  bool registered = true;
#pragma unroll
  for (int r = 0; r < W; ++r) {
    src[r] = static_cast<const uint4*>(a.inputs->ptr[r]);
    registered = registered && src[r] != nullptr;
  }
  if (!registered) {
    if (threadIdx.x == 0) report(a, kErrUnregistered, 0, 0);
    return 0;
  }
  if (threadIdx.x == 0) {
    uint32_t e = a.self->epoch[blockIdx.x] + 1;
    if (e == 0) e = 1;  // 0 is the zeroed-slot value; never wait for it
    s_epoch = e;
  }
  __syncthreads();
  return s_epoch;
}

// a.peers[threadIdx.x] for the W signalling threads, by unrolled selects.
template <int W>
__device__ __forceinline__ Signal* my_peer_signal(const LaunchArgs& a) {
  Signal* s = nullptr;
#pragma unroll
  for (int p = 0; p < W; ++p) {
    if (threadIdx.x == p) s = a.peers[p];
  }
  return s;
}

template <int W>
__device__ __forceinline__ void end_call(const LaunchArgs& a, uint32_t epoch) {
  if (threadIdx.x == 0) a.self->epoch[blockIdx.x] = epoch;
}

template <typename T, int W>
__global__ void __launch_bounds__(kThreads) one_shot_kernel(const LaunchArgs a) {
  const uint4* src[W];
  const uint32_t epoch = begin_call<W>(a, src);
  if (epoch == 0) return;
  Signal* const peer = my_peer_signal<W>(a);
  if (!barrier<W>(a, peer, kStart, epoch)) return;
  uint4* out = static_cast<uint4*>(a.out);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < a.packs; i += stride) {
    out[i] = reduce_pack<T, W>(src, i);
  }
  // Peers may overwrite their input buffers once every rank has finished reading them.
  if (!barrier<W>(a, peer, kEnd, epoch)) return;
  end_call<W>(a, epoch);
}

template <typename T, int W>
__global__ void __launch_bounds__(kThreads) two_shot_kernel(const LaunchArgs a) {
  const uint4* src[W];
  const uint32_t epoch = begin_call<W>(a, src);
  if (epoch == 0) return;
  Signal* const peer = my_peer_signal<W>(a);
  if (!barrier<W>(a, peer, kStart, epoch)) return;
  const int64_t part = (a.packs + W - 1) / W;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  uint4* scratch = reinterpret_cast<uint4*>(reinterpret_cast<char*>(a.self) + kMetaSize);
  // Stage 1: partition `rank`, summed over the ranks, into this rank's scratch.
  const int64_t base = static_cast<int64_t>(a.rank) * part;
  for (int64_t i = first; i < part && base + i < a.packs; i += stride) {
    scratch[i] = reduce_pack<T, W>(src, base + i);
  }
  if (!barrier<W>(a, peer, kMid, epoch)) return;
  // Stage 2: partition p from rank p's scratch.
  uint4* out = static_cast<uint4*>(a.out);
  const uint4* parts[W];
#pragma unroll
  for (int p = 0; p < W; ++p) {
    parts[p] = reinterpret_cast<const uint4*>(reinterpret_cast<const char*>(a.peers[p]) + kMetaSize);
  }
  for (int64_t i = first; i < part; i += stride) {
    uint4 v[W];
#pragma unroll
    for (int p = 0; p < W; ++p) {
      if (p * part + i < a.packs) v[p] = load_peer(parts[p] + i);
    }
#pragma unroll
    for (int p = 0; p < W; ++p) {
      if (p * part + i < a.packs) out[p * part + i] = v[p];
    }
  }
  // Peers may start the next call (and overwrite their scratch) once every rank has read it.
  if (!barrier<W>(a, peer, kEnd, epoch)) return;
  end_call<W>(a, epoch);
}

// ---------------------------------------------------------------------------------------
// push (custom_ar.h, "Push protocol")

// What every rank sums for a word: itself, except 0xffffffff -> 0x7fffffff (NaNs both).
__device__ __forceinline__ uint32_t push_remap(uint32_t w) { return w == 0xffffffffu ? 0x7fffffffu : w; }

__device__ __forceinline__ uint4 push_remap(const uint4& v) {
  return make_uint4(push_remap(v.x), push_remap(v.y), push_remap(v.z), push_remap(v.w));
}

// The stored form: never 0 (the empty value). Decoding is the bitwise NOT.
__device__ __forceinline__ uint4 push_encode(const uint4& v) {
  const uint4 r = push_remap(v);
  return make_uint4(~r.x, ~r.y, ~r.z, ~r.w);
}

__device__ __forceinline__ void store_volatile(uint4* p, const uint4& v) {
  asm volatile("st.volatile.global.v4.u32 [%0], {%1, %2, %3, %4};" ::"l"(p), "r"(v.x), "r"(v.y), "r"(v.z),
               "r"(v.w)
               : "memory");
}

__device__ __forceinline__ uint4 load_volatile(const uint4* p) {
  uint4 v;
  asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}

__device__ __forceinline__ bool push_arrived(const uint4& v) { return v.x != 0 && v.y != 0 && v.z != 0 && v.w != 0; }

// Wait until the pack at `p` (this rank's push region) holds a peer's data; decode it and
// zero the pack. False (reported) after the timeout.
__device__ __forceinline__ bool push_receive(const LaunchArgs& a, uint4* p, int peer, uint4& out) {
  uint4 v = load_volatile(p);
  if (!push_arrived(v)) {
    const uint64_t t0 = global_timer_ns();
    uint32_t spins = 0;
    do {
      if (a.timeout_ns != 0 && (++spins & 255u) == 0 && global_timer_ns() - t0 > a.timeout_ns) {
        report(a, kErrTimeout, peer, kPushWait);
        return false;
      }
      v = load_volatile(p);
    } while (!push_arrived(v));
  }
  *p = make_uint4(0, 0, 0, 0);
  out = make_uint4(~v.x, ~v.y, ~v.z, ~v.w);
  return true;
}

template <typename T, int W>
__global__ void __launch_bounds__(kThreads) push_kernel(const LaunchArgs a) {
  __shared__ uint32_t s_call;
  const uint4* in = static_cast<const uint4*>(a.in);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // The first pack's load is issued before anything waits.
  const uint4 v0 = first < a.packs ? __ldg(in + first) : make_uint4(0, 0, 0, 0);
  // The registration check of the other algorithms, for one contract: a graph replayed
  // before its inputs were registered computes nothing and poisons the handle.
  const bool registered = a.inputs->ptr[0] != nullptr;
  if (threadIdx.x == 0) s_call = a.self->push_calls;
  __syncthreads();
  if (!registered) {
    if (threadIdx.x == 0) report(a, kErrUnregistered, 0, 0);
    return;
  }
  constexpr int64_t region = push_capacity(W) / 16;  // packs per (slot, source)
  const int64_t slot = (s_call & 1u) * W;
  // Push: pack i of this rank's input to source `rank` of every peer's current slot.
  for (int64_t i = first; i < a.packs; i += stride) {
    const uint4 v = push_encode(i == first ? v0 : __ldg(in + i));
#pragma unroll
    for (int p = 0; p < W; ++p) {
      if (p == a.rank) continue;
      uint4* dst = reinterpret_cast<uint4*>(reinterpret_cast<char*>(a.peers[p]) + kSignalBytes);
      store_volatile(dst + (slot + a.rank) * region + i, v);
    }
  }
  // Receive and sum, in rank order.
  uint4* mine = reinterpret_cast<uint4*>(reinterpret_cast<char*>(a.self) + kSignalBytes) + slot * region;
  uint4* out = static_cast<uint4*>(a.out);
  bool ok = true;
  for (int64_t i = first; ok && i < a.packs; i += stride) {
    uint4 v[W];
#pragma unroll
    for (int p = 0; p < W; ++p) {
      if (p == a.rank) {
        v[p] = push_remap(i == first ? v0 : __ldg(in + i));
      } else if (ok) {
        ok = push_receive(a, mine + p * region + i, p, v[p]);
      }
    }
    if (!ok) break;
    float acc[Pack<T>::N];
#pragma unroll
    for (int p = 0; p < W; ++p) Pack<T>::add(acc, v[p], p == 0);
    out[i] = Pack<T>::pack(acc);
  }
  // The last block to finish counts the call (the next call's kernel starts after this one).
  __syncthreads();
  if (threadIdx.x == 0) {
    const uint32_t done = atomicAdd(&a.self->push_done, 1u);
    if (done == gridDim.x - 1) {
      a.self->push_done = 0;
      a.self->push_calls = s_call + 1;
    }
  }
}

template <typename T, int W>
cudaError_t launch_typed(const LaunchArgs& a, cudaStream_t stream) {
  if (a.algo == Algo::kTwoShot) {
    two_shot_kernel<T, W><<<a.blocks, kThreads, 0, stream>>>(a);
  } else if (a.algo == Algo::kPush) {
    push_kernel<T, W><<<a.blocks, kThreads, 0, stream>>>(a);
  } else {
    one_shot_kernel<T, W><<<a.blocks, kThreads, 0, stream>>>(a);
  }
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_world(const LaunchArgs& a, cudaStream_t stream) {
  switch (a.world) {
    case 2: return launch_typed<T, 2>(a, stream);
    case 4: return launch_typed<T, 4>(a, stream);
    case 6: return launch_typed<T, 6>(a, stream);
    case 8: return launch_typed<T, 8>(a, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

cudaError_t launch_all_reduce(const LaunchArgs& args, cudaStream_t stream) {
  if (args.packs == 0) return cudaSuccess;
  if (args.blocks < 1 || args.blocks > kMaxBlocks) return cudaErrorInvalidConfiguration;
  switch (args.dtype) {
    case Dtype::kFloat32: return launch_world<float>(args, stream);
    case Dtype::kFloat16: return launch_world<half>(args, stream);
    case Dtype::kBFloat16: return launch_world<__nv_bfloat16>(args, stream);
  }
  return cudaErrorInvalidValue;
}

}  // namespace sgl_kernel::allreduce
