// SPDX-License-Identifier: Apache-2.0
// sgl_per_tensor_quant_fp8: one fp32 scale for the whole tensor.
//
// Dynamic: scale[0] <- max(scale[0], max|x| / 448), compared as signed integers on the
// float's bits (for non-negative floats that is the float order, a negative start value loses
// to any scale, and a NaN wins); the codes use the new scale[0].
// - Small tensors (sm90, up to kClusterVpt vectors per thread of one 8-block cluster): one
//   kernel. Each thread keeps its vectors in registers, the cluster combines the block maxima
//   through distributed shared memory, and each block codes its own vectors.
// - Otherwise a reduction kernel folds the maximum into scale[0] with an integer atomicMax,
//   then the code kernel reads scale[0] after the PDL wait.
// The kernels walk the tensor as 16-byte vectors when input and output are aligned, with a
// scalar tail.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cooperative_groups.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

#include "quantization/quant.cuh"
#include "quantization/quantization.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/reduce.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::quantization {

namespace {

constexpr int kThreads = 256;
constexpr int kUnroll = 4;
constexpr float kFp8Max = 448.0f;

template <typename T>
__global__ void __launch_bounds__(kThreads) tensor_amax_kernel(const TensorQuantParams<T> p, const int64_t num_vec) {
  constexpr int kVec = kVec16<T>;
  __shared__ uint32_t scratch[kThreads / 32];
  SGL_PDL_WAIT();
  // The code kernel may be scheduled now; it waits for this grid to finish before reading.
  SGL_PDL_LAUNCH_DEPENDENTS();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  uint32_t amax = 0;
  for (int64_t i = tid; i < num_vec; i += stride * kUnroll) {
    Vec16<T> x[kUnroll];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < num_vec) x[u] = load16<T, LoadPolicy::kStream>(p.input + (i + u * stride) * kVec);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (i + u * stride < num_vec) {
#pragma unroll
        for (int e = 0; e < kVec; ++e) amax = max(amax, abs_bits(to_float(x[u][e])));
      }
    }
  }
  for (int64_t j = num_vec * kVec + tid; j < p.numel; j += stride) amax = max(amax, abs_bits(to_float(p.input[j])));

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

// Codes of vectors of kElems elements (16, 8 or 4 bytes; the tensor's elements [0, num_vec *
// kElems)), kUnroll vectors per thread; the rest (numel % kElems, or all of a misaligned
// tensor) by the first block, one element per thread.
template <typename T, int kElems, int kUnroll>
__global__ void __launch_bounds__(kThreads) tensor_code_kernel(const TensorQuantParams<T> p, const int64_t num_vec) {
  using V = Vec<T, kElems>;
  SGL_PDL_WAIT();
  const float inv = inverse_scale(*p.scale);
  const int64_t base = static_cast<int64_t>(blockIdx.x) * (kThreads * kUnroll) + threadIdx.x;
  V x[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < num_vec) x[u] = load_vec<V, LoadPolicy::kStream>(p.input + i * kElems);
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const int64_t i = base + u * kThreads;
    if (i < num_vec) {
      float y[kElems];
#pragma unroll
      for (int e = 0; e < kElems; ++e) y[e] = to_float(x[u][e]);
      *reinterpret_cast<Vec<uint8_t, kElems>*>(p.output_q + i * kElems) =
          to_codes<QuantCode::kFp8>(y, inv, -kFp8Max, kFp8Max, false);
    }
  }
  if (blockIdx.x == 0) {
    for (int64_t j = num_vec * kElems + threadIdx.x; j < p.numel; j += kThreads) {
      p.output_q[j] = to_code<QuantCode::kFp8>(to_float(p.input[j]) * inv, -kFp8Max, kFp8Max);
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

template <typename T, int kElems, int kUnroll>
cudaError_t launch_code_kernel(const TensorQuantParams<T>& p, int64_t num_vec, cudaStream_t stream) {
  const int64_t blocks = std::max<int64_t>(1, ceil_div<int64_t>(num_vec, kThreads * kUnroll));
  if (blocks > 0x7fffffff) return cudaErrorInvalidValue;
  return launch_kernel(tensor_code_kernel<T, kElems, kUnroll>, dim3(static_cast<uint32_t>(blocks)), dim3(kThreads), 0,
                       stream, p.enable_pdl, p, num_vec);
}

constexpr int kClusterBlocks = 8;      // portable cluster size
constexpr int kClusterThreads = 512;   // per block: 128 registers a thread fit the SM
constexpr int kClusterVpt = 8;         // most vectors a thread holds

// Dynamic per-tensor quantization of a small tensor by one cluster (the whole grid): max pass
// and code pass in one launch, the tensor read once. Vector v of the tensor is held by thread
// v % (grid threads), slot v / (grid threads); the tail (numel % kVec elements) by the first
// threads, one element each.
template <typename T, int kVpt>
__global__ void __launch_bounds__(kClusterThreads)
    tensor_quant_cluster_kernel(const TensorQuantParams<T> p, const int64_t num_vec) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  constexpr int kVec = kVec16<T>;
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ uint32_t warp_max[kClusterThreads / 32];
  __shared__ uint32_t block_max;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * kClusterThreads;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * kClusterThreads + threadIdx.x;
  SGL_PDL_WAIT();
  // Read before the cluster's first barrier; block 0 writes the new value after the second.
  const int start_bits = __float_as_int(*p.scale);
  Vec16<T> x[kVpt];
#pragma unroll
  for (int u = 0; u < kVpt; ++u) {
    if (tid + u * threads < num_vec) x[u] = load16<T, LoadPolicy::kStream>(p.input + (tid + u * threads) * kVec);
  }
  const int64_t tail = num_vec * kVec + tid;
  const float tail_x = tail < p.numel ? to_float(p.input[tail]) : 0.0f;
  uint32_t amax = abs_bits(tail_x);
#pragma unroll
  for (int u = 0; u < kVpt; ++u) {
    if (tid + u * threads < num_vec) {
#pragma unroll
      for (int e = 0; e < kVec; ++e) amax = max(amax, abs_bits(to_float(x[u][e])));
    }
  }
  amax = warp_reduce_max(amax);
  if ((threadIdx.x & 31) == 0) warp_max[threadIdx.x >> 5] = amax;
  __syncthreads();
  if (threadIdx.x == 0) {
#pragma unroll
    for (int w = 1; w < kClusterThreads / 32; ++w) amax = max(amax, warp_max[w]);
    block_max = amax;
  }
  cluster.sync();  // every block's maximum is in its shared memory
  amax = 0;
  for (unsigned r = 0; r < cluster.num_blocks(); ++r) amax = max(amax, *cluster.map_shared_rank(&block_max, r));
  const float s = __int_as_float(max(start_bits, __float_as_int(__fdiv_rn(__uint_as_float(amax), kFp8Max))));
  cluster.sync();  // no block leaves (and frees its shared memory) while another reads it
  if (tid == 0) *p.scale = s;
  const float inv = inverse_scale(s);
#pragma unroll
  for (int u = 0; u < kVpt; ++u) {
    const int64_t i = tid + u * threads;
    if (i < num_vec) {
      float y[kVec];
#pragma unroll
      for (int e = 0; e < kVec; ++e) y[e] = to_float(x[u][e]);
      *reinterpret_cast<Vec<uint8_t, kVec>*>(p.output_q + i * kVec) =
          to_codes<QuantCode::kFp8>(y, inv, -kFp8Max, kFp8Max, false);
    }
  }
  if (tail < p.numel) p.output_q[tail] = to_code<QuantCode::kFp8>(tail_x * inv, -kFp8Max, kFp8Max);
  SGL_PDL_LAUNCH_DEPENDENTS();
#endif
}

template <typename T, int kVpt>
cudaError_t launch_cluster(const TensorQuantParams<T>& p, int64_t num_vec, cudaStream_t stream) {
  cudaLaunchAttribute attrs[2];
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = kClusterBlocks;
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(kClusterBlocks);
  config.blockDim = dim3(kClusterThreads);
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = 1;
  if (p.enable_pdl) {
    attrs[1].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[1].val.programmaticStreamSerializationAllowed = 1;
    config.numAttrs = 2;
  }
  return cudaLaunchKernelEx(&config, tensor_quant_cluster_kernel<T, kVpt>, p, num_vec);
}

// Multiprocessor count and compute capability major of a device, queried once per device.
struct DeviceInfo {
  int sms, major;
};
DeviceInfo device_info() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cache[kMaxDevices];  // sms << 8 | major; 0 = not yet queried
  int device = 0;
  DeviceInfo info{132, 0};
  if (cudaGetDevice(&device) != cudaSuccess) return info;
  if (device >= 0 && device < kMaxDevices) {
    const int v = cache[device].load(std::memory_order_relaxed);
    if (v != 0) return {v >> 8, v & 0xff};
  }
  cudaDeviceGetAttribute(&info.sms, cudaDevAttrMultiProcessorCount, device);
  cudaDeviceGetAttribute(&info.major, cudaDevAttrComputeCapabilityMajor, device);
  if (device >= 0 && device < kMaxDevices) cache[device].store(info.sms << 8 | info.major, std::memory_order_relaxed);
  return info;
}

}  // namespace

template <typename T>
cudaError_t launch_per_tensor_quant(const TensorQuantParams<T>& p, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  if (p.numel == 0) return cudaSuccess;
  const bool aligned = is_aligned16(p.input) && is_aligned16(p.output_q);
  const int64_t num_vec = aligned ? p.numel / kVec : 0;
  // NOTE: a misaligned tensor is coded by one block (rare: a view at an odd offset).
  if (p.dynamic) {
    const DeviceInfo dev = device_info();
    const int64_t per_thread = ceil_div<int64_t>(num_vec, kClusterBlocks * kClusterThreads);
    if (dev.major >= 9 && p.numel - num_vec * kVec <= kClusterBlocks * kClusterThreads && per_thread <= kClusterVpt) {
      if (per_thread <= 1) return launch_cluster<T, 1>(p, num_vec, stream);
      if (per_thread <= 2) return launch_cluster<T, 2>(p, num_vec, stream);
      if (per_thread <= 4) return launch_cluster<T, 4>(p, num_vec, stream);
      return launch_cluster<T, kClusterVpt>(p, num_vec, stream);
    }
    const int sms = dev.sms;
    // Enough blocks to fill the GPU (8 per SM), few enough that the atomics stay negligible.
    const int64_t want = std::max<int64_t>(1, ceil_div<int64_t>(std::max(num_vec, p.numel - num_vec * kVec),
                                                                 kThreads * kUnroll));
    const uint32_t blocks = static_cast<uint32_t>(std::min<int64_t>(want, int64_t{sms} * 8));
    SGL_CUDA_TRY(launch_kernel(tensor_amax_kernel<T>, dim3(blocks), dim3(kThreads), 0, stream, p.enable_pdl, p,
                               num_vec));
  }
  // NOTE: small tensors get one vector per thread, so that they spread over more SMs; below 64
  // KB of input, 4-byte vectors (16-bit types) or 8-byte ones (fp32) over more threads (as
  // the activations' decode shapes, activation.cu).
  if (num_vec < int64_t{132} * kThreads * kUnroll) {
    constexpr int kNarrow = 2;  // elements: a 4-byte vector (8 bytes for fp32)
    const bool narrow_ok = reinterpret_cast<uintptr_t>(p.input) % (kNarrow * sizeof(T)) == 0 &&
                           reinterpret_cast<uintptr_t>(p.output_q) % kNarrow == 0;
    if (p.numel * static_cast<int64_t>(sizeof(T)) < (int64_t{64} << 10) && narrow_ok) {
      return launch_code_kernel<T, kNarrow, 1>(p, p.numel / kNarrow, stream);
    }
    return launch_code_kernel<T, kVec, 1>(p, num_vec, stream);
  }
  return launch_code_kernel<T, kVec, kUnroll>(p, num_vec, stream);
}

template cudaError_t launch_per_tensor_quant<float>(const TensorQuantParams<float>&, cudaStream_t);
template cudaError_t launch_per_tensor_quant<half>(const TensorQuantParams<half>&, cudaStream_t);
template cudaError_t launch_per_tensor_quant<__nv_bfloat16>(const TensorQuantParams<__nv_bfloat16>&, cudaStream_t);

}  // namespace sgl_kernel::quantization
