// SPDX-License-Identifier: Apache-2.0
// Launch-shape and cache-policy sweep of the silu_and_mul vector kernel (activation.cuh),
// standalone (no torch), to choose the production configuration in activation.cu (the NOTE
// in its launch_typed quotes the H200 numbers of this sweep).
//
//   nvcc -O3 -std=c++20 -gencode=arch=compute_90a,code=sm_90a -Iinclude -Icsrc \
//        benchmark/elementwise/tune_act_and_mul.cu -o /tmp/tune && /tmp/tune
//
// Prints GB/s (input read + output write) per variant at prefill shapes (inputs rotated so
// nothing is served from L2) and per-launch time inside a CUDA graph at decode shapes.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "elementwise/activation.cuh"
#include "sgl_kernel/launch.cuh"

using namespace sgl_kernel;
using namespace sgl_kernel::elementwise;
using T = __nv_bfloat16;

#define CK(x)                                                                                  \
  do {                                                                                         \
    cudaError_t e_ = (x);                                                                      \
    if (e_ != cudaSuccess) {                                                                   \
      std::printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e_), __FILE__, __LINE__);    \
      std::exit(1);                                                                            \
    }                                                                                          \
  } while (0)

__global__ void fill_kernel(T* p, size_t n, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = __float2bfloat16((h & 0xffff) / 8192.0f - 4.0f);
  }
}

using KernelFn = void (*)(T*, const T*, FastDivmod, uint32_t);

struct Variant {
  const char* name;
  KernelFn fn;
  int threads;
  int unroll;
  int vec_elems = 8;
};

#define VARIANT(TH, VE, UN, LD, NAME) \
  Variant { NAME, act_and_mul_vec_kernel<T, Activation::kSilu, TH, VE, UN, LD>, TH, UN, VE }

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

static int g_num_sms = 132;

static void launch(const Variant& v, T* out, const T* in, int64_t rows, int64_t d, cudaStream_t s,
                   bool pdl = false) {
  const int64_t total_vec = rows * d / v.vec_elems;
  const dim3 grid(uint32_t((total_vec + v.threads * v.unroll - 1) / (v.threads * v.unroll)));
  CK(launch_kernel(v.fn, grid, dim3(v.threads), 0, s, pdl, out, in, FastDivmod(uint32_t(d / v.vec_elems)),
                   uint32_t(total_vec)));
}

int main() {
  using LP = LoadPolicy;
  using SP = StorePolicy;
  // The four production shapes of activation.cu first, then alternatives.
  const std::vector<Variant> variants = {
      VARIANT(256, 8, 2, LP::kDefault, "large: t256 16B u2"),
      VARIANT(256, 8, 1, LP::kStream, "mid: t256 16B u1 nc"),
      VARIANT(256, 4, 1, LP::kStream, "mid-small: t256 8B u1 nc"),
      VARIANT(256, 2, 1, LP::kStream, "small: t256 4B u1 nc"),
      VARIANT(256, 8, 1, LP::kDefault, "t256 16B u1"),
      VARIANT(128, 8, 1, LP::kDefault, "t128 16B u1"),
      VARIANT(128, 8, 1, LP::kStream, "t128 16B u1 nc"),
      VARIANT(256, 8, 2, LP::kStream, "t256 16B u2 nc"),
      VARIANT(256, 4, 2, LP::kDefault, "t256 8B u2"),
  };
  cudaStream_t s;
  CK(cudaStreamCreate(&s));
  CK(cudaDeviceGetAttribute(&g_num_sms, cudaDevAttrMultiProcessorCount, 0));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));

  // Copy bandwidth for reference (bytes read + written).
  {
    const size_t n = size_t(1) << 31;
    void *a, *b;
    CK(cudaMalloc(&a, n));
    CK(cudaMalloc(&b, n));
    CK(cudaMemsetAsync(a, 1, n, s));
    std::vector<float> ts;
    for (int i = 0; i < 12; ++i) {
      CK(cudaEventRecord(e0, s));
      CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s));
      CK(cudaEventRecord(e1, s));
      CK(cudaEventSynchronize(e1));
      float ms;
      CK(cudaEventElapsedTime(&ms, e0, e1));
      if (i >= 2) ts.push_back(ms);
    }
    std::printf("device copy: %.0f GB/s\n", 2.0 * n / (median(ts) * 1e-3) / 1e9);
    CK(cudaFree(a));
    CK(cudaFree(b));
  }

  struct Shape {
    int64_t rows, d;
  };
  const std::vector<Shape> shapes = {{32768, 14336}, {16384, 14336}, {4096, 14336}, {1024, 14336}, {32768, 4096}, {1024, 4096}};
  // Rotate among enough buffer sets to exceed the L2 (60 MB) by far.
  const size_t budget = size_t(6) << 30;
  T* pool;
  CK(cudaMalloc(&pool, budget));
  fill_kernel<<<4096, 256, 0, s>>>(pool, budget / sizeof(T), 1234u);
  CK(cudaGetLastError());

  std::printf("\n%-30s", "variant \\ (rows x d) GB/s");
  for (const Shape& sh : shapes) std::printf(" %7ldx%-6ld", long(sh.rows), long(sh.d));
  std::printf("\n");
  for (const Variant& v : variants) {
    std::printf("%-30s", v.name);
    for (const Shape& sh : shapes) {
      const size_t in_elems = size_t(sh.rows) * 2 * sh.d, out_elems = size_t(sh.rows) * sh.d;
      const size_t set_bytes = (in_elems + out_elems) * sizeof(T);
      const int nsets = int(std::max<size_t>(1, std::min<size_t>(budget / set_bytes, 16)));
      std::vector<float> ts;
      const int iters = 30;
      for (int i = 0; i < iters + 3; ++i) {
        T* in = pool + size_t(i % nsets) * (in_elems + out_elems);
        T* out = in + in_elems;
        CK(cudaEventRecord(e0, s));
        launch(v, out, in, sh.rows, sh.d, s);
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 3) ts.push_back(ms);
      }
      std::printf(" %14.0f", double(set_bytes) / (median(ts) * 1e-3) / 1e9);
    }
    std::printf("\n");
  }

  // Correctness across variants: all must produce bit-identical outputs.
  {
    const int64_t rows = 1000, d = 14336;
    const size_t in_elems = size_t(rows) * 2 * d, out_elems = size_t(rows) * d;
    std::vector<uint16_t> ref(out_elems), got(out_elems);
    T* out = pool + in_elems;
    for (size_t k = 0; k < variants.size(); ++k) {
      CK(cudaMemsetAsync(out, 0xff, out_elems * sizeof(T), s));
      launch(variants[k], out, pool, rows, d, s);
      CK(cudaMemcpyAsync(k == 0 ? ref.data() : got.data(), out, out_elems * sizeof(T), cudaMemcpyDeviceToHost, s));
      CK(cudaStreamSynchronize(s));
      if (k > 0 && got != ref) std::printf("MISMATCH: %s differs from %s\n", variants[k].name, variants[0].name);
    }
    std::printf("variants agree bitwise: checked %zu variants\n", variants.size());
  }

  // Decode shapes: per-launch time inside a CUDA graph of 100 launches.
  std::printf("\n%-30s %8s %8s %8s %8s %8s %8s  (us per launch in a graph with PDL, hot; d=14336 then d=4096)\n", "variant",
              "T=1", "T=16", "T=128", "T=1", "T=16", "T=128");
  for (const Variant& v : variants) {
    std::printf("%-30s", v.name);
    for (int64_t dd : {14336, 4096})
    for (int64_t rows : {1, 16, 128}) {
      cudaGraph_t g;
      cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      for (int i = 0; i < 100; ++i) launch(v, pool + size_t(rows) * 2 * dd, pool, rows, dd, s, true);
      CK(cudaStreamEndCapture(s, &g));
      CK(cudaGraphInstantiate(&ge, g, 0));
      std::vector<float> ts;
      for (int i = 0; i < 8; ++i) {
        CK(cudaEventRecord(e0, s));
        CK(cudaGraphLaunch(ge, s));
        CK(cudaEventRecord(e1, s));
        CK(cudaEventSynchronize(e1));
        float ms;
        CK(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 2) ts.push_back(ms);
      }
      std::printf(" %8.2f", median(ts) * 1e3 / 100);
      CK(cudaGraphExecDestroy(ge));
      CK(cudaGraphDestroy(g));
    }
    std::printf("\n");
  }
  CK(cudaFree(pool));
  return 0;
}
