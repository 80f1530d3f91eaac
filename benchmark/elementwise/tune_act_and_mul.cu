// SPDX-License-Identifier: Apache-2.0
// Launch-shape and cache-policy sweep of the silu_and_mul vector kernel (activation.cuh),
// standalone (no torch), to choose the production configuration in activation.cu.
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

// Experimental shapes of the same computation (not in the library unless they win).
// Persistent grid-stride loop: a fixed grid of SMs * blocks-per-SM, each thread walks the
// vectors with a stride of the whole grid.
template <int kThreads, LoadPolicy kLoad>
__global__ void __launch_bounds__(kThreads)
    persistent_kernel(T* __restrict__ out, const T* __restrict__ input, FastDivmod d_vec, uint32_t total_vec) {
  constexpr int kVec = kVec16<T>;
  for (uint32_t i = blockIdx.x * kThreads + threadIdx.x; i < total_vec; i += gridDim.x * kThreads) {
    uint32_t row, col;
    d_vec.divmod(i, row, col);
    const T* x = input + (static_cast<int64_t>(row) * d_vec.divisor * 2 + col) * kVec;
    const Vec16<T> a = load16<T, kLoad>(x);
    const Vec16<T> b = load16<T, kLoad>(x + static_cast<int64_t>(d_vec.divisor) * kVec);
    Vec16<T> o;
#pragma unroll
    for (int k = 0; k < kVec; ++k) o[k] = from_float<T>(activate<Activation::kSilu>(to_float(a[k])) * to_float(b[k]));
    store16(out + static_cast<int64_t>(i) * kVec, o);
  }
}

// 32-bit offsets (valid while rows * 2d < 2^31 elements), one vector per thread.
template <int kThreads, LoadPolicy kLoad>
__global__ void __launch_bounds__(kThreads)
    idx32_kernel(T* __restrict__ out, const T* __restrict__ input, FastDivmod d_vec, uint32_t total_vec) {
  constexpr int kVec = kVec16<T>;
  const uint32_t i = blockIdx.x * kThreads + threadIdx.x;
  if (i >= total_vec) return;
  uint32_t row, col;
  d_vec.divmod(i, row, col);
  const uint32_t off = (row * d_vec.divisor * 2 + col) * kVec;
  const Vec16<T> a = load16<T, kLoad>(input + off);
  const Vec16<T> b = load16<T, kLoad>(input + off + d_vec.divisor * kVec);
  Vec16<T> o;
#pragma unroll
  for (int k = 0; k < kVec; ++k) o[k] = from_float<T>(activate<Activation::kSilu>(to_float(a[k])) * to_float(b[k]));
  store16(out + i * kVec, o);
}

using KernelFn = void (*)(T*, const T*, FastDivmod, uint32_t);

struct Variant {
  const char* name;
  KernelFn fn;
  int threads;
  int unroll;
  int persistent_blocks_per_sm = 0;  // > 0: fixed grid of SMs * this
};

#define VARIANT(TH, UN, LD, ST, NAME) \
  Variant { NAME, act_and_mul_vec_kernel<T, Activation::kSilu, TH, UN, LD, ST>, TH, UN }

static float median(std::vector<float> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

static int g_num_sms = 132;

static void launch(const Variant& v, T* out, const T* in, int64_t rows, int64_t d, cudaStream_t s) {
  const int64_t total_vec = rows * d / 8;
  dim3 grid(uint32_t((total_vec + v.threads * v.unroll - 1) / (v.threads * v.unroll)));
  if (v.persistent_blocks_per_sm > 0) {
    grid.x = std::min<uint32_t>(grid.x, uint32_t(g_num_sms * v.persistent_blocks_per_sm));
  }
  CK(launch_kernel(v.fn, grid, dim3(v.threads), 0, s, false, out, in, FastDivmod(uint32_t(d / 8)),
                   uint32_t(total_vec)));
}

int main() {
  using LP = LoadPolicy;
  using SP = StorePolicy;
  const std::vector<Variant> variants = {
      VARIANT(256, 1, LP::kStream, SP::kDefault, "t256 u1 ld.nc.noalloc"),
      VARIANT(256, 2, LP::kDefault, SP::kDefault, "t256 u2 ld"),
      VARIANT(256, 1, LP::kDefault, SP::kDefault, "t256 u1 ld"),
      VARIANT(128, 1, LP::kDefault, SP::kDefault, "t128 u1 ld"),
      VARIANT(256, 1, LP::kPrefetch, SP::kDefault, "t256 u1 ld.L2::256B"),
      VARIANT(128, 1, LP::kPrefetch, SP::kDefault, "t128 u1 ld.L2::256B"),
      VARIANT(256, 2, LP::kPrefetch, SP::kDefault, "t256 u2 ld.L2::256B"),
      VARIANT(256, 1, LP::kStreamPrefetch, SP::kDefault, "t256 u1 ld.nc.noalloc.L2::256B"),
      VARIANT(128, 1, LP::kStreamPrefetch, SP::kDefault, "t128 u1 ld.nc.noalloc.L2::256B"),
      VARIANT(256, 2, LP::kStreamPrefetch, SP::kDefault, "t256 u2 ld.nc.noalloc.L2::256B"),
      VARIANT(256, 1, LP::kStreamPrefetch, SP::kStream, "t256 u1 ld.nc.L2::256B st.cs"),
      Variant{"idx32 t128 ld.L2::256B", idx32_kernel<128, LP::kPrefetch>, 128, 1},
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
  const std::vector<Shape> shapes = {{32768, 14336}, {16384, 14336}, {4096, 14336}, {1024, 14336}, {32768, 4096}, {4096, 4096}};
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
  std::printf("\n%-30s %8s %8s %8s   (us per launch in a graph, d=14336)\n", "variant", "T=1", "T=16", "T=128");
  for (const Variant& v : variants) {
    std::printf("%-30s", v.name);
    for (int64_t rows : {1, 16, 128}) {
      cudaGraph_t g;
      cudaGraphExec_t ge;
      CK(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
      for (int i = 0; i < 100; ++i) launch(v, pool + size_t(rows) * 2 * 14336 * (i % 4 + 1), pool, rows, 14336, s);
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
