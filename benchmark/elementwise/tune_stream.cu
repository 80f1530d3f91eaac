// SPDX-License-Identifier: Apache-2.0
// How fast can a kernel move memory with as many bytes written as read (fused_add_rmsnorm's
// mix: x and the residual read, both written back), against the device copy? Pure data
// movement, no arithmetic, standalone (no torch):
//
//   nvcc -O3 -std=c++20 -arch=sm_90a -Iinclude -o /tmp/tune_stream benchmark/elementwise/tune_stream.cu
//   /tmp/tune_stream [--mb 256] [--reps 20]
//
// Two sources of `mb` MiB each are copied to two destinations (4 x mb MiB moved per call, as
// fused_add_rmsnorm at T=32768 H=4096 with mb = 256), and one source of 2 x mb MiB to one
// destination. Variants:
//   "ldg uN"       16-byte ld.global / st.global, N vectors a thread, one pass over the grid
//   "ldg gs bN"    the same, grid-stride with N blocks an SM
//   "tma cK sS bN" persistent blocks (N an SM), one thread issuing 1-D bulk copies
//                  (cp.async.bulk) of K KiB through S shared-memory stages: global -> shared
//                  completes on an mbarrier, shared -> global in bulk groups
// GB/s = bytes read + written per second (median of --reps calls, each timed with events).
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../tune_common.cuh"

namespace {

using tune_common::median;

struct Job {
  const uint4* src[2];
  uint4* dst[2];
  int streams;     // 1 or 2
  int64_t n_vec;   // 16-byte vectors per stream
};

template <int kU>
__global__ void __launch_bounds__(256) ldg_kernel(const Job j) {
  const int64_t base = static_cast<int64_t>(blockIdx.x) * 256 * kU + threadIdx.x;
  uint4 v[2][kU];
  // f(stream, vector slot, index) over this thread's vectors: every load before any store.
  auto each = [&](auto f) {
#pragma unroll
    for (int s = 0; s < 2; ++s) {
      if (s >= j.streams) break;
#pragma unroll
      for (int u = 0; u < kU; ++u) {
        if (base + u * 256 < j.n_vec) f(s, u, base + u * 256);
      }
    }
  };
  each([&](int s, int u, int64_t i) { v[s][u] = j.src[s][i]; });
  each([&](int s, int u, int64_t i) { j.dst[s][i] = v[s][u]; });
}

__global__ void __launch_bounds__(256) ldg_gs_kernel(const Job j) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * 256 * 2;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * 512 + threadIdx.x; i < j.n_vec; i += stride) {
    uint4 v[2][2];
    const bool second = i + 256 < j.n_vec;
    for (int s = 0; s < j.streams; ++s) {
      v[s][0] = j.src[s][i];
      if (second) v[s][1] = j.src[s][i + 256];
    }
    for (int s = 0; s < j.streams; ++s) {
      j.dst[s][i] = v[s][0];
      if (second) j.dst[s][i + 256] = v[s][1];
    }
  }
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// Persistent bulk-copy kernel: block b takes chunks b, b + grid, ... of kChunk bytes per
// stream; one thread issues everything. Stage s holds chunk it (it % kStages == s) of every
// stream; its load completes on bar[s]; its stores form one bulk group.
template <int kChunk, int kStages>
__global__ void __launch_bounds__(32) tma_kernel(const Job j) {
  extern __shared__ __align__(128) unsigned char smem[];
  __shared__ __align__(8) uint64_t bar[kStages];
  if (threadIdx.x != 0) return;
  const int64_t bytes = j.n_vec * 16;
  const int64_t chunks = (bytes + kChunk - 1) / kChunk;
  const int64_t mine = chunks > blockIdx.x ? (chunks - blockIdx.x + gridDim.x - 1) / gridDim.x : 0;
  for (int s = 0; s < kStages; ++s) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(&bar[s])));
  }
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  auto chunk_bytes = [&](int64_t c) -> uint32_t {
    const int64_t left = bytes - c * kChunk;
    return static_cast<uint32_t>(left < kChunk ? left : kChunk);
  };
  auto issue_load = [&](int64_t it) {
    const int s = static_cast<int>(it % kStages);
    const int64_t c = blockIdx.x + it * gridDim.x;
    const uint32_t n = chunk_bytes(c);
    const uint32_t b = smem_addr(&bar[s]);
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(b), "r"(n * j.streams) : "memory");
    for (int k = 0; k < j.streams; ++k) {
      const uint32_t dst = smem_addr(smem + (s * 2 + k) * kChunk);
      const char* src = reinterpret_cast<const char*>(j.src[k]) + c * kChunk;
      asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(dst),
                   "l"(src), "r"(n), "r"(b)
                   : "memory");
    }
  };
  const int64_t pre = mine < kStages ? mine : kStages;
  for (int64_t it = 0; it < pre; ++it) issue_load(it);
  for (int64_t it = 0; it < mine; ++it) {
    const int s = static_cast<int>(it % kStages);
    const uint32_t parity = static_cast<uint32_t>((it / kStages) & 1);
    const uint32_t b = smem_addr(&bar[s]);
    uint32_t done = 0;
    while (!done) {
      asm volatile(
          "{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
          : "=r"(done)
          : "r"(b), "r"(parity)
          : "memory");
    }
    const int64_t c = blockIdx.x + it * gridDim.x;
    const uint32_t n = chunk_bytes(c);
    for (int k = 0; k < j.streams; ++k) {
      const uint32_t src = smem_addr(smem + (s * 2 + k) * kChunk);
      char* dst = reinterpret_cast<char*>(j.dst[k]) + c * kChunk;
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(src), "r"(n) : "memory");
    }
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    // Reload the stage of the previous chunk once its stores have read shared memory.
    if (it >= 1 && it - 1 + kStages < mine) {
      asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
      issue_load(it - 1 + kStages);
    }
  }
  asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}

struct Variant {
  std::string name;
  std::function<void(const Job&, cudaStream_t)> run;
};

}  // namespace

int main(int argc, char** argv) {
  int64_t mb = 256;
  int reps = 20;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mb")) mb = std::atoll(argv[i + 1]);
    if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  }
  tune_common::print_device();
  cudaStream_t st;
  CK(cudaStreamCreate(&st));
  int sms = 0;
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const double copy = tune_common::copy_gbps(st);
  const size_t bytes = static_cast<size_t>(mb) << 20;
  char *src, *dst;
  CK(cudaMalloc(&src, 2 * bytes));
  CK(cudaMalloc(&dst, 2 * bytes));
  CK(cudaMemsetAsync(src, 3, 2 * bytes, st));

  std::vector<Variant> vars;
  auto add_ldg = [&](const char* name, auto kernel, int u) {
    vars.push_back({name, [kernel, u](const Job& j, cudaStream_t s) {
                      const int64_t blocks = (j.n_vec + 256 * u - 1) / (256 * u);
                      kernel<<<static_cast<unsigned>(blocks), 256, 0, s>>>(j);
                    }});
  };
  add_ldg("ldg u1", ldg_kernel<1>, 1);
  add_ldg("ldg u2", ldg_kernel<2>, 2);
  add_ldg("ldg u4", ldg_kernel<4>, 4);
  for (int b : {4, 8}) {
    vars.push_back({"ldg gs b" + std::to_string(b), [b, sms](const Job& j, cudaStream_t s) {
                      ldg_gs_kernel<<<sms * b, 256, 0, s>>>(j);
                    }});
  }
  auto add_tma = [&](auto kernel, int chunk_kb, int stages, int per_sm) {
    const int smem = 2 * stages * chunk_kb * 1024;
    CK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    vars.push_back({"tma c" + std::to_string(chunk_kb) + " s" + std::to_string(stages) + " b" + std::to_string(per_sm),
                    [kernel, smem, per_sm, sms](const Job& j, cudaStream_t s) {
                      kernel<<<sms * per_sm, 32, smem, s>>>(j);
                    }});
  };
  add_tma(tma_kernel<8192, 4>, 8, 4, 2);
  add_tma(tma_kernel<8192, 4>, 8, 4, 3);
  add_tma(tma_kernel<16384, 3>, 16, 3, 2);
  add_tma(tma_kernel<16384, 2>, 16, 2, 3);
  add_tma(tma_kernel<32768, 3>, 32, 3, 1);
  add_tma(tma_kernel<4096, 8>, 4, 8, 2);
  add_tma(tma_kernel<4096, 8>, 4, 8, 3);

  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::printf("device copy %.0f GB/s; %lld MiB a stream\n", copy, static_cast<long long>(mb));
  std::printf("%-18s | %10s %8s %6s | %10s %8s %6s\n", "variant", "2in2out us", "GB/s", "%copy", "1in1out us", "GB/s",
              "%copy");
  for (int round = 0; round < 2; ++round) {
    for (const Variant& v : vars) {
      double us[2];
      for (int mode = 0; mode < 2; ++mode) {
        Job j{};
        j.streams = mode == 0 ? 2 : 1;
        j.n_vec = static_cast<int64_t>((mode == 0 ? bytes : 2 * bytes) / 16);
        j.src[0] = reinterpret_cast<const uint4*>(src);
        j.src[1] = reinterpret_cast<const uint4*>(src + bytes);
        j.dst[0] = reinterpret_cast<uint4*>(dst);
        j.dst[1] = reinterpret_cast<uint4*>(dst + bytes);
        CK(cudaMemsetAsync(dst, 0, 2 * bytes, st));
        v.run(j, st);
        CK(cudaStreamSynchronize(st));
        CK(cudaGetLastError());
        // Check a few spots: every destination byte was copied (source bytes are 3).
        unsigned char probe[3];
        for (int k = 0; k < 3; ++k) {
          const size_t at = k == 0 ? 0 : k == 1 ? bytes + 12345 * 16 : 2 * bytes - 1;
          CK(cudaMemcpy(&probe[k], dst + at, 1, cudaMemcpyDeviceToHost));
        }
        const bool ok = probe[0] == 3 && probe[1] == 3 && probe[2] == 3;
        std::vector<float> ts;
        for (int r = 0; r < reps; ++r) {
          CK(cudaEventRecord(e0, st));
          v.run(j, st);
          CK(cudaEventRecord(e1, st));
          CK(cudaEventSynchronize(e1));
          float ms = 0;
          CK(cudaEventElapsedTime(&ms, e0, e1));
          ts.push_back(ms * 1000.0f);
        }
        us[mode] = ok ? median(ts) : -1.0;
      }
      const double moved = 4.0 * bytes;
      std::printf("%-18s | %10.1f %8.0f %5.1f%% | %10.1f %8.0f %5.1f%%\n", v.name.c_str(), us[0], moved / us[0] / 1e3,
                  100.0 * moved / us[0] / 1e3 / copy, us[1], moved / us[1] / 1e3, 100.0 * moved / us[1] / 1e3 / copy);
    }
  }
  return 0;
}
