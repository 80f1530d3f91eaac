// SPDX-License-Identifier: Apache-2.0
// Sweep of downcast_fp8 (fp16/bf16 K/V rows -> e4m3 KV-cache slots), standalone (no torch): the
// production launcher (csrc/elementwise/downcast_fp8.cu, included below) and candidate shapes of
// its kernel, against the kernel it replaced ("old", copied from git: one vector per thread, loc
// read before the data, __fdiv_rn), which is the baseline row. Every variant's k_out and v_out
// must equal old's byte for byte (every row, written or skipped) on data holding every fp16/bf16
// bit pattern (NaN, inf, subnormals, -0), values at and a few ulps around every e4m3 rounding
// boundary times the scale, values beyond +-448 * scale and plain random values; loc is a random
// permutation with some out-of-range slots; scales both inside the fast-division range and
// outside it (the __fdiv_rn fallback), k_scale != v_scale, mult/offset other than 1/0.
//
//   nvcc -O3 -std=c++20 -arch=sm_90a --expt-relaxed-constexpr -Iinclude -Icsrc -o /tmp/tune_downcast benchmark/elementwise/tune_downcast_fp8.cu
//   /tmp/tune_downcast    # estimated 10-20 s on an H200; exit status 1 on any mismatch
//
// Options: --T 1,16,128 (default 1,16,128,4096,32768), --no-pdl, --check-only.
//
// Timing follows benchmark/harness.py, so the numbers line up with benchmark/RESULTS.md: the
// median per-call time over R replays of a CUDA graph of N back-to-back launches (PDL on unless
// --no-pdl, as the bindings launch on sm90). A call whose bytes fit four times in L2 reuses one
// input set ("hot"); larger calls rotate among K sets with K * bytes >= 4 * L2 ("rotK"). Shapes
// as bench_mla_copy.py: H=8, D=128, k_out/v_out of 2T rows, loc = T distinct random slots,
// mult 1, offset 0; timing data uniform in +-1.2 * 448 * scale. GB/s = (k, v, loc, scales read
// + k_out, v_out written) / time.
//
// Variants: "old" = the previous kernel; "prod" = launch_downcast_fp8 (shape "v1 t128 nc" up to
// 2^18 vectors, i.e. T <= 1024 here, "kv t256" above); "v1 t128 nc" = one vector per thread,
// 128-thread blocks, read-only loads (prod's decode shape, here at every T); "kv t256 nc" = k
// and v of one chunk per thread, 256-thread blocks, read-only loads (prod's large shape uses
// plain loads); "kv2 t256" = k and v of 2 tokens per thread (4 vectors, plain loads); "prod
// fdiv" = prod's shapes with __fdiv_rn for every element (what the division change alone buys).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "elementwise/downcast_fp8.cu"
#include "../tune_common.cuh"

// ---------------------------------------------------------------------------------------
// The previous kernel (csrc/elementwise/downcast_fp8.cu before the rewrite), renamed.

namespace old_downcast {

using namespace sgl_kernel;
using sgl_kernel::elementwise::DowncastFp8Params;

constexpr int kThreads = 256;

__device__ __forceinline__ uint8_t to_e4m3(float x, float scale) {
  // x / scale with IEEE division; clamp to +-448 and round to nearest (saturating convert).
  const float q = fminf(fmaxf(__fdiv_rn(x, scale), -448.0f), 448.0f);
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(q, __NV_SATFINITE, __NV_E4M3));
}

// Grid: x over 8-element chunks of all rows of k then v (2 * tokens * row / 8 chunks).
template <typename T>
__global__ void __launch_bounds__(kThreads)
    downcast_fp8_kernel(const DowncastFp8Params<T> p, const FastDivmod chunks_per_row, const uint32_t total_chunks) {
  SGL_PDL_WAIT();
  const uint32_t i = blockIdx.x * kThreads + threadIdx.x;
  if (i < total_chunks) {
    const uint32_t per_tensor = total_chunks / 2;
    const bool is_v = i >= per_tensor;
    uint32_t t, c;
    chunks_per_row.divmod(is_v ? i - per_tensor : i, t, c);
    const int64_t slot = p.loc[t] * p.mult + p.offset;
    if (slot >= 0 && slot < p.slots) {
      const T* src = (is_v ? p.v : p.k) + static_cast<int64_t>(t) * p.row + static_cast<int64_t>(c) * 8;
      const float scale = is_v ? *p.v_scale : *p.k_scale;
      const Vec16<T> x = load16<T, LoadPolicy::kStream>(src);
      Vec<uint8_t, 8> q;
#pragma unroll
      for (int e = 0; e < 8; ++e) q[e] = to_e4m3(to_float(x[e]), scale);
      uint8_t* dst = (is_v ? p.v_out : p.k_out) + slot * p.row + static_cast<int64_t>(c) * 8;
      *reinterpret_cast<Vec<uint8_t, 8>*>(dst) = q;
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

template <typename T>
cudaError_t launch_downcast_fp8(const DowncastFp8Params<T>& p, cudaStream_t stream) {
  if (p.tokens == 0 || p.row == 0) return cudaSuccess;
  if (p.row % 8 != 0) return cudaErrorInvalidValue;
  const int64_t total = 2 * p.tokens * (p.row / 8);
  if (total >= (int64_t{1} << 32) - kThreads) return cudaErrorInvalidValue;
  return launch_kernel(downcast_fp8_kernel<T>, dim3(static_cast<uint32_t>(ceil_div<int64_t>(total, kThreads))),
                       dim3(kThreads), 0, stream, p.enable_pdl, p, FastDivmod(static_cast<uint32_t>(p.row / 8)),
                       static_cast<uint32_t>(total));
}

}  // namespace old_downcast

namespace tune {

using namespace sgl_kernel;
using namespace sgl_kernel::elementwise;
using LP = LoadPolicy;
using BF16 = __nv_bfloat16;

using tune_common::g_ctx;  // what was running, for CK's error message
using tune_common::median;
using tune_common::parse_list;

constexpr int64_t kHeads = 8, kHeadDim = 128, kRow = kHeads * kHeadDim;

// ---------------------------------------------------------------------------------------
// Variants

template <typename T>
using LaunchFn = cudaError_t (*)(const DowncastFp8Params<T>&, cudaStream_t);

// Production's shape choice with __fdiv_rn for every element.
template <typename T>
cudaError_t launch_prod_fdiv(const DowncastFp8Params<T>& p, cudaStream_t stream) {
  const int64_t total = 2 * p.tokens * (p.row / 8);
  if (total <= kSmallMaxVectors) return launch_shape<T, 1, 1, 128, LP::kStream, false>(p, stream);
  return launch_shape<T, 2, 1, 256, LP::kDefault, false>(p, stream);
}

struct Variant {
  const char* name;
  LaunchFn<BF16> bf16;
  LaunchFn<half> fp16;
  template <typename T>
  LaunchFn<T> get() const {
    if constexpr (std::is_same_v<T, half>) {
      return fp16;
    } else {
      return bf16;
    }
  }
};

// launch_shape<T, tensors per thread, tokens per thread, threads per block, load policy>
#define SHAPE(...) &launch_shape<BF16, __VA_ARGS__>, &launch_shape<half, __VA_ARGS__>

static const Variant kVariants[] = {
    {"old", &old_downcast::launch_downcast_fp8<BF16>, &old_downcast::launch_downcast_fp8<half>},
    {"prod", &launch_downcast_fp8<BF16>, &launch_downcast_fp8<half>},
    {"v1 t128 nc", SHAPE(1, 1, 128, LP::kStream)},
    {"kv t256 nc", SHAPE(2, 1, 256, LP::kStream)},
    {"kv2 t256", SHAPE(2, 2, 256, LP::kDefault)},
    {"prod fdiv", &launch_prod_fdiv<BF16>, &launch_prod_fdiv<half>},
};
constexpr int kNumVariants = sizeof(kVariants) / sizeof(kVariants[0]);

// ---------------------------------------------------------------------------------------
// Data

__host__ __device__ inline uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

template <typename T>
__device__ inline uint16_t bits_of(float f) {  // round to nearest even
  if constexpr (std::is_same_v<T, half>) {
    return __half_as_ushort(__float2half_rn(f));
  } else {
    return __bfloat16_as_ushort(__float2bfloat16_rn(f));
  }
}

__device__ inline float e4m3_value(int code) {
  __nv_fp8_e4m3 v;
  v.__x = static_cast<__nv_fp8_storage_t>(code);
  return static_cast<float>(v);
}

// Check data, [rows, row] of T as raw bits. Rows with (t & 1) == parity hold the bit patterns
// ((t / 2) * row + col) mod 2^16, so every pattern appears once rows >= 2^17 / row (T >= 128 here);
// the other rows mix, per element: 1/2 a value near an e4m3 rounding boundary times the scale
// (the midpoint between two neighbouring codes, 2^-10 (the zero threshold) and 464 (the
// saturation threshold) included, rounded to T, then moved by -3..+3 ulps), 1/8 a value beyond
// +-448 * scale (up to ~1000x), 3/8 uniform in +-600 * scale.
template <typename T>
__global__ void fill_check_kernel(uint16_t* x, int64_t rows, int64_t row, float scale, int parity, uint32_t seed) {
  const int64_t n = rows * row;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t t = e / row, col = e % row;
    uint16_t bits;
    if ((t & 1) == parity) {
      bits = static_cast<uint16_t>((t / 2) * row + col);
    } else {
      const uint32_t h = hash32(static_cast<uint32_t>(e) * 2654435761u ^ seed);
      const uint16_t sign = (h >> 31) ? 0x8000u : 0u;
      const uint32_t kind = h & 7u;
      if (kind < 4) {
        const int i = static_cast<int>((h >> 3) % 128u);  // midpoint between codes i and i + 1
        const float m = i < 126 ? 0.5f * (e4m3_value(i) + e4m3_value(i + 1)) : (i == 126 ? 464.0f : 448.0f);
        const int d = static_cast<int>((h >> 10) % 7u) - 3;
        const int b = static_cast<int>(bits_of<T>(fabsf(m * scale))) + d;
        bits = static_cast<uint16_t>(std::max(b, 0)) | sign;
      } else if (kind < 5) {
        const float v = 448.0f * fabsf(scale) * (1.0f + static_cast<float>((h >> 8) & 0xffffu) / 64.0f);
        bits = bits_of<T>(v) | sign;
      } else {
        const float u = static_cast<float>((h >> 8) & 0xffffffu) * (1.0f / 16777216.0f);
        bits = bits_of<T>((2.0f * u - 1.0f) * 600.0f * fabsf(scale));
      }
    }
    x[e] = bits;
  }
}

// Timing data: uniform in +-1.2 * 448 * scale (no special values: old's __fdiv_rn would take
// its slow path on subnormals, which real K/V rarely hold).
template <typename T>
__global__ void fill_time_kernel(uint16_t* x, int64_t n, float scale, uint32_t seed) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const uint32_t h = hash32(static_cast<uint32_t>(e) ^ seed);
    const float u = static_cast<float>(h & 0xffffffu) * (1.0f / 16777216.0f);
    x[e] = bits_of<T>((2.0f * u - 1.0f) * 1.2f * 448.0f * scale);
  }
}

// Differing bytes of a and b (n a multiple of 16) and the first differing byte index.
struct CmpResult {
  unsigned long long ndiff;
  unsigned long long first;
};

__global__ void compare_kernel(const uint4* a, const uint4* b, size_t n16, CmpResult* out) {
  unsigned long long nd = 0, first = ~0ull;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n16; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 x = a[i], y = b[i];
    const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t ne = __vcmpne4(xs[k], ys[k]);
      if (ne) {
        nd += __popc(ne) / 8;
        first = min(first, static_cast<unsigned long long>(i * 16 + k * 4 + __ffs(ne) / 8));
      }
    }
  }
  if (nd) {
    atomicAdd(&out->ndiff, nd);
    atomicMin(&out->first, first);
  }
}

static CmpResult* g_cmp = nullptr;

static CmpResult compare(const uint8_t* a, const uint8_t* b, size_t n, cudaStream_t s) {
  const CmpResult zero{0, ~0ull};
  CK(cudaMemcpyAsync(g_cmp, &zero, sizeof(CmpResult), cudaMemcpyHostToDevice, s));
  compare_kernel<<<1024, 256, 0, s>>>(reinterpret_cast<const uint4*>(a), reinterpret_cast<const uint4*>(b), n / 16,
                                      g_cmp);
  CK(cudaGetLastError());
  CmpResult r;
  CK(cudaMemcpyAsync(&r, g_cmp, sizeof(CmpResult), cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  return r;
}

// T distinct slots of [0, 2T) in random order; with `holes`, every 61st token from token 30 on
// gets a slot outside [0, 2T) (skipped by every kernel; T=1 and T=16 keep every token).
static std::vector<int64_t> make_loc(int64_t t, uint32_t seed, bool holes) {
  std::vector<int64_t> all(2 * t);
  std::iota(all.begin(), all.end(), 0);
  std::mt19937 rng(seed);
  std::shuffle(all.begin(), all.end(), rng);
  all.resize(t);
  if (holes) {
    for (int64_t i = 30; i < t; i += 61) all[i] = (i / 61) % 2 ? -1 - i % 3 : 2 * t + i % 5;
  }
  return all;
}

struct Options {
  std::vector<int64_t> ts{1, 16, 128, 4096, 32768};
  bool pdl = true, check_only = false;
};

// One input set: k, v [t, row]; k_out, v_out [2t, row]; loc [t]; scales [1] each.
template <typename T>
struct Set {
  T *k = nullptr, *v = nullptr;
  uint8_t *k_out = nullptr, *v_out = nullptr;
  int64_t* loc = nullptr;
  float* scales = nullptr;  // k_scale, v_scale
  int64_t t = 0;

  void alloc(int64_t tokens) {
    t = tokens;
    CK(cudaMalloc(&k, t * kRow * sizeof(T)));
    CK(cudaMalloc(&v, t * kRow * sizeof(T)));
    CK(cudaMalloc(&k_out, 2 * t * kRow));
    CK(cudaMalloc(&v_out, 2 * t * kRow));
    CK(cudaMalloc(&loc, t * sizeof(int64_t)));
    CK(cudaMalloc(&scales, 2 * sizeof(float)));
  }
  void free_all() {
    CK(cudaFree(k));
    CK(cudaFree(v));
    CK(cudaFree(k_out));
    CK(cudaFree(v_out));
    CK(cudaFree(loc));
    CK(cudaFree(scales));
  }
  DowncastFp8Params<T> params(int64_t mult, int64_t offset, bool pdl) const {
    DowncastFp8Params<T> p{};
    p.k = k;
    p.v = v;
    p.k_out = k_out;
    p.v_out = v_out;
    p.k_scale = scales;
    p.v_scale = scales + 1;
    p.loc = loc;
    p.tokens = t;
    p.row = kRow;
    p.slots = 2 * t;
    p.mult = mult;
    p.offset = offset;
    p.enable_pdl = pdl;
    return p;
  }
};

// ---------------------------------------------------------------------------------------
// Bitwise check against old

template <typename T>
static int check_dtype(const char* dname, const Options& opt, cudaStream_t s) {
  struct ScalePair {
    float k, v;
  };
  // Fast division (both in [2^-64, 2^64]) first, then pairs that take the __fdiv_rn fallback for
  // at least one tensor (below/above the range, negative, zero, NaN, subnormal).
  const ScalePair pairs[] = {{0.05f, 0.05f},         {0.07f, 0.07f},          {0.05f, 0.07f},
                             {0x1p-64f, 0x1p64f},     {1.0f, 0x1.fffffep-1f},  {0x1.fffffep-65f, 0x1p70f},
                             {0.05f, 0x1p70f},        {-0.05f, 0.0f},          {NAN, 3e-39f}};
  int failures = 0;
  uint8_t *ref_k = nullptr, *ref_v = nullptr;
  for (const int64_t t : opt.ts) {
    Set<T> set;
    set.alloc(t);
    CK(cudaMalloc(&ref_k, 2 * t * kRow));
    CK(cudaMalloc(&ref_v, 2 * t * kRow));
    const std::vector<int64_t> loc = make_loc(t, 1234u + static_cast<uint32_t>(t), true);
    CK(cudaMemcpyAsync(set.loc, loc.data(), t * sizeof(int64_t), cudaMemcpyHostToDevice, s));
    unsigned long long bytes_checked = 0;
    for (const ScalePair& sp : pairs) {
      struct MultOffset {
        int64_t mult, offset;
      };
      const MultOffset mos[] = {{1, 0}, {2, -1}};
      CK(cudaMemcpyAsync(set.scales, &sp, 2 * sizeof(float), cudaMemcpyHostToDevice, s));
      fill_check_kernel<T><<<1024, 256, 0, s>>>(reinterpret_cast<uint16_t*>(set.k), t, kRow, sp.k, 0,
                                                0x9e3779b9u ^ static_cast<uint32_t>(t));
      fill_check_kernel<T><<<1024, 256, 0, s>>>(reinterpret_cast<uint16_t*>(set.v), t, kRow, sp.v, 1,
                                                0x85ebca6bu ^ static_cast<uint32_t>(t));
      CK(cudaGetLastError());
      for (const MultOffset& mo : mos) {
        if (mo.mult != 1 && t != 128) continue;  // mult/offset once, at T=128
        const DowncastFp8Params<T> p = set.params(mo.mult, mo.offset, opt.pdl);
        for (int vi = 0; vi < kNumVariants; ++vi) {
          const Variant& var = kVariants[vi];
          std::snprintf(g_ctx, sizeof(g_ctx), "check %s T=%lld %s scales %a %a", dname, (long long)t, var.name, sp.k,
                        sp.v);
          CK(cudaMemsetAsync(set.k_out, 0xA5, 2 * t * kRow, s));
          CK(cudaMemsetAsync(set.v_out, 0xA5, 2 * t * kRow, s));
          CK(var.get<T>()(p, s));
          CK(cudaGetLastError());
          if (vi == 0) {
            CK(cudaMemcpyAsync(ref_k, set.k_out, 2 * t * kRow, cudaMemcpyDeviceToDevice, s));
            CK(cudaMemcpyAsync(ref_v, set.v_out, 2 * t * kRow, cudaMemcpyDeviceToDevice, s));
            continue;
          }
          for (int m = 0; m < 2; ++m) {
            const CmpResult r = compare(m ? set.v_out : set.k_out, m ? ref_v : ref_k, 2 * t * kRow, s);
            bytes_checked += 2 * t * kRow;
            if (r.ndiff) {
              ++failures;
              uint8_t got = 0, want = 0;
              CK(cudaMemcpy(&got, (m ? set.v_out : set.k_out) + r.first, 1, cudaMemcpyDeviceToHost));
              CK(cudaMemcpy(&want, (m ? ref_v : ref_k) + r.first, 1, cudaMemcpyDeviceToHost));
              std::printf("MISMATCH %s T=%lld %s %s scales (%a, %a) mult %lld offset %lld: %llu bytes differ, first at "
                          "slot %llu col %llu: %02x (old %02x)\n",
                          dname, (long long)t, var.name, m ? "v_out" : "k_out", sp.k, sp.v, (long long)mo.mult,
                          (long long)mo.offset, r.ndiff, r.first / kRow, r.first % kRow, got, want);
            }
          }
        }
      }
    }
    std::printf("check %s T=%-6lld %d variants x %zu scale pairs: %s (%.1f MB compared)\n", dname, (long long)t,
                kNumVariants - 1, sizeof(pairs) / sizeof(pairs[0]), failures ? "FAILURES so far" : "bitwise equal to old",
                bytes_checked / 1e6);
    set.free_all();
    CK(cudaFree(ref_k));
    CK(cudaFree(ref_v));
  }
  return failures;
}

// ---------------------------------------------------------------------------------------
// Timing

template <typename T>
static void time_dtype(const char* dname, const Options& opt, cudaStream_t s, int l2_bytes) {
  const float scales[] = {0.05f, 0.07f};
  const int nt = static_cast<int>(opt.ts.size());
  // [scale][variant][T]
  std::vector<float> us(2 * kNumVariants * nt, 0.f), gbps(2 * kNumVariants * nt, 0.f);
  std::vector<std::string> modes(nt);
  for (int ti = 0; ti < nt; ++ti) {
    const int64_t t = opt.ts[ti];
    const double bytes = 2.0 * t * kRow * sizeof(T) + t * 8.0 + 8.0 + 2.0 * t * kRow;
    const bool hot = bytes * 4 <= l2_bytes;
    const int nsets = hot ? 1 : static_cast<int>(std::min<double>(64.0, std::ceil(4.0 * l2_bytes / bytes)));
    modes[ti] = hot ? "hot" : "rot" + std::to_string(nsets);
    const int calls = hot ? 100 : nsets * std::max(1, 40 / nsets);
    const int reps = 15;
    std::vector<Set<T>> sets(nsets);
    for (int si = 0; si < nsets; ++si) {
      sets[si].alloc(t);
      const std::vector<int64_t> loc = make_loc(t, 777u * (si + 1) + static_cast<uint32_t>(t), false);
      CK(cudaMemcpyAsync(sets[si].loc, loc.data(), t * sizeof(int64_t), cudaMemcpyHostToDevice, s));
      CK(cudaMemsetAsync(sets[si].k_out, 0, 2 * t * kRow, s));
      CK(cudaMemsetAsync(sets[si].v_out, 0, 2 * t * kRow, s));
    }
    for (int sc = 0; sc < 2; ++sc) {
      const float pair[2] = {scales[sc], scales[sc]};
      for (int si = 0; si < nsets; ++si) {
        CK(cudaMemcpyAsync(sets[si].scales, pair, sizeof(pair), cudaMemcpyHostToDevice, s));
        fill_time_kernel<T><<<1024, 256, 0, s>>>(reinterpret_cast<uint16_t*>(sets[si].k), t * kRow, scales[sc], 11u + si);
        fill_time_kernel<T><<<1024, 256, 0, s>>>(reinterpret_cast<uint16_t*>(sets[si].v), t * kRow, scales[sc], 97u + si);
        CK(cudaGetLastError());
      }
      for (int vi = 0; vi < kNumVariants; ++vi) {
        const Variant& var = kVariants[vi];
        std::snprintf(g_ctx, sizeof(g_ctx), "time %s T=%lld %s scale %g", dname, (long long)t, var.name, scales[sc]);
        const LaunchFn<T> fn = var.get<T>();
        CK(fn(sets[0].params(1, 0, opt.pdl), s));  // warm-up, outside the graph
        CK(cudaStreamSynchronize(s));
        const float per_call_us = tune_common::graph_replay_us(
            [&](int c) { CK(fn(sets[c % nsets].params(1, 0, opt.pdl), s)); }, calls, reps, s);
        const size_t idx = (static_cast<size_t>(sc) * kNumVariants + vi) * nt + ti;
        us[idx] = per_call_us;
        gbps[idx] = static_cast<float>(bytes / (per_call_us * 1e-6) / 1e9);
      }
    }
    for (Set<T>& st : sets) st.free_all();
  }

  for (int sc = 0; sc < 2; ++sc) {
    std::printf("\n%s, H=%lld D=%lld, scale %g, PDL %s: us per call (GB/s) [x old]\n", dname, (long long)kHeads,
                (long long)kHeadDim, scales[sc], opt.pdl ? "on" : "off");
    std::printf("%-12s", "variant");
    for (int ti = 0; ti < nt; ++ti) {
      const std::string h = "T=" + std::to_string(opt.ts[ti]) + " " + modes[ti];
      std::printf(" %26s", h.c_str());
    }
    std::printf("\n");
    for (int vi = 0; vi < kNumVariants; ++vi) {
      std::printf("%-12s", kVariants[vi].name);
      for (int ti = 0; ti < nt; ++ti) {
        const size_t idx = (static_cast<size_t>(sc) * kNumVariants + vi) * nt + ti;
        const size_t old_idx = (static_cast<size_t>(sc) * kNumVariants) * nt + ti;
        std::printf("  %8.2f (%5.0f) [%5.2fx]", us[idx], gbps[idx], us[old_idx] / us[idx]);
      }
      std::printf("\n");
    }
  }
}

int main_impl(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--T" && i + 1 < argc) {
      opt.ts = parse_list(argv[++i]);
    } else if (a == "--no-pdl") {
      opt.pdl = false;
    } else if (a == "--check-only") {
      opt.check_only = true;
    } else {
      std::printf("unknown argument %s (see the header comment of tune_downcast_fp8.cu)\n", a.c_str());
      return 2;
    }
  }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int l2 = tune_common::print_device();
  CK(cudaMalloc(&g_cmp, sizeof(CmpResult)));

  int failures = check_dtype<BF16>("bf16", opt, s);
  failures += check_dtype<half>("fp16", opt, s);
  std::printf("%s\n", failures ? "CHECK FAILED: some variant differs from old (see MISMATCH lines)"
                               : "check: every variant bitwise equal to old");
  if (!opt.check_only) {
    tune_common::copy_gbps(s);  // for reference
    time_dtype<BF16>("bf16", opt, s, l2);
    time_dtype<half>("fp16", opt, s, l2);
  }
  CK(cudaFree(g_cmp));
  CK(cudaStreamDestroy(s));
  return failures ? 1 : 0;
}

}  // namespace tune

int main(int argc, char** argv) { return tune::main_impl(argc, argv); }
