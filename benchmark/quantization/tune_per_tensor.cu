// SPDX-License-Identifier: Apache-2.0
// Launch-shape sweep of the dynamic sgl_per_tensor_quant_fp8 (bf16 -> e4m3), standalone (no
// torch). Rows: "prod" (launch_per_tensor_quant as shipped), "two" (the maximum kernel, then
// the code kernel after the PDL wait), "block" (one block, where the tensor fits in 1024
// threads x 2 vectors), "cCtTvV" (the cluster kernel of csrc/quantization/per_tensor_quant.cu,
// included below: C blocks of T threads, V 16-byte vectors a thread), "twoB" (two with the
// maximum kernel on B blocks), "gBtTvV" (a cooperative-grid variant, below), and "zero+prod" (a
// memset of the scale, then prod: what a caller that zero-initialises output_s runs; "fill+prod"
// and "fill+two" zero it with a kernel launched without PDL, as torch.zeros does), "cbN" (two with
// the code kernel on blocks of N threads, session 41). Every
// row's codes and scale are compared bit for bit with "two" from a zeroed scale ('X' marks a
// failed check); the timed calls fold the same maximum again (the result does not change).
//
//   nvcc -O3 -std=c++20 -arch=sm_90a --expt-relaxed-constexpr -Iinclude -Icsrc \
//     -o /tmp/tune_per_tensor benchmark/quantization/tune_per_tensor.cu csrc/common/runtime.cc
//   /tmp/tune_per_tensor [--T 1,4,16,32,64,128,256,1024] [--H 4096] [--op tensor|token] [--streams N]
//
// --op token sweeps the per-token quant instead (see run_token).
//
// Timing: benchmark/harness.py's (tune_common::graph_us): the median per-call time over
// replays of a CUDA graph of 100 back-to-back launches (PDL on); every size here fits in L2.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <type_traits>
#include <vector>

#include "../../csrc/quantization/per_tensor_quant.cu"
#include "../../csrc/quantization/row_quant.cu"
#include "../tune_common.cuh"

namespace tune {

using namespace sgl_kernel;
using namespace sgl_kernel::quantization;
using T = __nv_bfloat16;
using P = TensorQuantParams<T>;
using Launch = std::function<cudaError_t(const P&, cudaStream_t)>;

// "gBtTvV": the one-pass cluster kernel's work on a cooperative grid of B blocks (every block resident):
// each block folds its maximum into scale[0] with the integer atomicMax, the grid
// synchronises (cooperative_groups grid sync), and every block codes its share (held in
// registers) with scale[0]. Not shipped: the grid barrier cost more than the kernel boundary
// of the two-kernel path (H100, bf16 H=4096: T=64 g128t256v1 2.79 us against 2.55; T=16
// 2.62 against 2.53).
template <typename T, int kVpt>
__global__ void __launch_bounds__(kVpt <= 4 ? kSmallThreads : kSmallThreads / 2)
    tensor_quant_grid_kernel(const TensorQuantParams<T> p, const int64_t num_vec) {
  constexpr int kVec = kVec16<T>;
  __shared__ uint32_t warp_max[kSmallThreads / 32];
  const int tid = threadIdx.x;
  const int lane = tid & 31;
  const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + tid;
  const int64_t total = static_cast<int64_t>(gridDim.x) * blockDim.x;
  SGL_PDL_WAIT();
  Vec16<T> x[kVpt];
  load_share<LoadPolicy::kStream>(x, p.input, g, total, num_vec);
  const int64_t tail = num_vec * kVec + g;
  const float tail_x = tail < p.numel ? to_float(p.input[tail]) : 0.0f;
  uint32_t amax = warp_reduce_max(share_max_bits(x, g, total, num_vec, abs_bits(tail_x)));
  if (lane == 0) warp_max[tid >> 5] = amax;
  __syncthreads();
  if (tid < 32) {
    amax = warp_reduce_max(lane < static_cast<int>(blockDim.x >> 5) ? warp_max[lane] : 0u);
    if (lane == 0) {
      atomicMax(reinterpret_cast<int*>(p.scale), __float_as_int(__fdiv_rn(__uint_as_float(amax), kFp8Max)));
    }
  }
  cooperative_groups::this_grid().sync();
  const float inv = inverse_scale(*reinterpret_cast<volatile float*>(p.scale));
  store_share_codes<QuantCode::kFp8>(x, p.output_q, g, total, num_vec, inv, -kFp8Max, kFp8Max, false);
  if (tail < p.numel) p.output_q[tail] = to_code<QuantCode::kFp8>(tail_x * inv, -kFp8Max, kFp8Max);
  SGL_PDL_LAUNCH_DEPENDENTS();
}

template <typename T, int kVpt>
cudaError_t launch_grid_quant(const TensorQuantParams<T>& p, int64_t num_vec, int blocks, int threads,
                              cudaStream_t stream) {
  cudaLaunchAttribute attrs[2];
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(blocks));
  config.blockDim = dim3(static_cast<unsigned>(threads));
  config.stream = stream;
  set_launch_attrs(config, attrs, 1, p.enable_pdl);
  attrs[config.numAttrs].id = cudaLaunchAttributeCooperative;
  attrs[config.numAttrs].val.cooperative = 1;
  ++config.numAttrs;
  return cudaLaunchKernelEx(&config, tensor_quant_grid_kernel<T, kVpt>, p, num_vec);
}

__global__ void zero_kernel(float* p) { *p = 0.0f; }

struct Variant {
  std::string name;
  Launch run;
};

// kGrid = false: "cCtTvV", the one-pass kernel in a cluster of C blocks (launch_cluster_quant);
// true: "gBtTvV", on a cooperative grid of B blocks (launch_grid_quant).
template <int kVpt, bool kGrid>
void add_shape(std::vector<Variant>& v, int64_t num_vec, int blocks, int threads) {
  char name[32];
  std::snprintf(name, sizeof(name), "%c%dt%dv%d", kGrid ? 'g' : 'c', blocks, threads, kVpt);
  v.push_back({name, [=](const P& p, cudaStream_t s) {
                 if constexpr (kGrid) {
                   return launch_grid_quant<T, kVpt>(p, num_vec, blocks, threads, s);
                 } else {
                   return launch_cluster_quant<T, kVpt>(p, num_vec, blocks, threads, s);
                 }
               }});
}

std::vector<Variant> variants(int64_t numel) {
  const int64_t num_vec = numel / kVec16<T>;
  std::vector<Variant> v;
  v.push_back({"prod", [](const P& p, cudaStream_t s) { return launch_per_tensor_quant<T>(p, s); }});
  // Session 16: both kernels of the two-kernel path with plain loads (production: the maximum's
  // ld.global.nc.L1::no_allocate, the codes' from 132 * 1024 vectors plain).
  v.push_back({"two plain", [=](const P& p, cudaStream_t s) {
                 const cudaError_t e = launch_amax<T, LoadPolicy::kDefault>(p, p.numel / kVec16<T>, s);
                 return e != cudaSuccess ? e : launch_code_kernel<T, kVec16<T>, 4, LoadPolicy::kDefault>(p, p.numel / kVec16<T>, s);
               }});
  v.push_back({"two nc", [=](const P& p, cudaStream_t s) {
                 const cudaError_t e = launch_amax<T, LoadPolicy::kStream>(p, p.numel / kVec16<T>, s);
                 return e != cudaSuccess ? e : launch_code_kernel<T, kVec16<T>, 4, LoadPolicy::kStream>(p, p.numel / kVec16<T>, s);
               }});
  v.push_back({"two", [=](const P& p, cudaStream_t s) {
                 const cudaError_t e = launch_amax(p, num_vec, s);
                 return e != cudaSuccess ? e : launch_codes(p, num_vec, s);
               }});
  if (num_vec <= int64_t{kSmallThreads} * kSmallVpt) {
    v.push_back({"block", [=](const P& p, cudaStream_t s) {
                   return launch_kernel(tensor_quant_onepass_kernel<T, kSmallVpt, false>, dim3(1), dim3(kSmallThreads), 0, s,
                                        p.enable_pdl, p, num_vec);
                 }});
  }
  for (int cs : {2, 4, 8, 16}) {
    for (int threads : {256, 512, 1024}) {
      const int64_t per = int64_t{cs} * threads;
      const int64_t vpt = ceil_div<int64_t>(num_vec, per);
      // the fewest vectors a thread that cover the tensor, and only where half would not
      if (vpt > 8 || (vpt == 1 && num_vec * 2 <= per)) continue;
      const int v2 = vpt <= 1 ? 1 : vpt <= 2 ? 2 : vpt <= 4 ? 4 : 8;
      if (v2 == 8 && threads > kSmallThreads / 2) continue;  // the kernel's launch bound
      if (!(v2 == 1 ? cluster_launchable<tensor_quant_onepass_kernel<T, 1, true>>(cs, threads)
                    : v2 == 2 ? cluster_launchable<tensor_quant_onepass_kernel<T, 2, true>>(cs, threads)
                              : v2 == 4 ? cluster_launchable<tensor_quant_onepass_kernel<T, 4, true>>(cs, threads) : cluster_launchable<tensor_quant_onepass_kernel<T, 8, true>>(cs, threads))) {
        std::printf("  (c%dt%d does not fit)\n", cs, threads);
        continue;
      }
      if (v2 == 1) add_shape<1, false>(v, num_vec, cs, threads);
      if (v2 == 2) add_shape<2, false>(v, num_vec, cs, threads);
      if (v2 == 4) add_shape<4, false>(v, num_vec, cs, threads);
      if (v2 == 8) add_shape<8, false>(v, num_vec, cs, threads);
    }
  }
  // Session 41: the two-kernel path with the code kernel's one vector a thread on blocks of N
  // threads ("cbN"; production: 256), the maximum kernel as production's.
  if (num_vec > kSmallThreads * kSmallVpt && num_vec <= kOneVecCodes) {
    auto add_cb = [&](auto block) {
      constexpr int kB = decltype(block)::value;
      v.push_back({"cb" + std::to_string(kB), [=](const P& p, cudaStream_t s) {
                     const cudaError_t e = launch_amax(p, num_vec, s);
                     return e != cudaSuccess ? e
                                             : launch_code_kernel<T, kVec16<T>, 1, LoadPolicy::kStream, false, kB>(
                                                   p, num_vec, s);
                   }});
    };
    add_cb(std::integral_constant<int, 128>{});
    add_cb(std::integral_constant<int, 256>{});
    add_cb(std::integral_constant<int, 512>{});
    add_cb(std::integral_constant<int, 1024>{});
  }
  // The two-kernel path with the maximum kernel on B blocks ("twoB").
  for (int blocks : {32, 64, 128, 256, 512}) {
    if (int64_t{blocks} * 256 > num_vec * 2) continue;
    v.push_back({"two" + std::to_string(blocks), [=](const P& p, cudaStream_t s) {
                   const cudaError_t e = launch_amax(p, num_vec, s, blocks);
                   return e != cudaSuccess ? e : launch_codes(p, num_vec, s);
                 }});
  }
  // Session 17 (the code kernel loads its vectors before the PDL wait): "xB pl|nc uU" = the
  // maximum kernel on B blocks (0: production's count) and the code kernel with U vectors a
  // thread, both with plain (pl) or ld.global.nc.L1::no_allocate (nc) loads.
  for (int blocks : {0, 32, 64, 128, 256, 512}) {
    if (int64_t{blocks} * 256 > num_vec * 2) continue;
    for (int plain = 0; plain < 2; ++plain) {
      for (int unroll : {1, 4}) {
        const std::string name = "x" + std::to_string(blocks) + (plain ? " pl u" : " nc u") + std::to_string(unroll);
        v.push_back({name, [=](const P& p, cudaStream_t s) {
                       const cudaError_t e = plain ? launch_amax<T, LoadPolicy::kDefault>(p, num_vec, s, blocks)
                                                   : launch_amax<T, LoadPolicy::kStream>(p, num_vec, s, blocks);
                       if (e != cudaSuccess) return e;
                       if (plain) {
                         return unroll == 1 ? launch_code_kernel<T, kVec16<T>, 1, LoadPolicy::kDefault>(p, num_vec, s)
                                            : launch_code_kernel<T, kVec16<T>, 4, LoadPolicy::kDefault>(p, num_vec, s);
                       }
                       return unroll == 1 ? launch_code_kernel<T, kVec16<T>, 1, LoadPolicy::kStream>(p, num_vec, s)
                                          : launch_code_kernel<T, kVec16<T>, 4, LoadPolicy::kStream>(p, num_vec, s);
                     }});
      }
    }
  }
  // Cooperative grids of up to one block per SM.
  for (int threads : {256, 512, 1024}) {
    for (int vpt : {1, 2, 4}) {
      const int64_t blocks = ceil_div<int64_t>(num_vec, int64_t{threads} * vpt);
      if (blocks > 132 || blocks < 2) continue;
      if (vpt > 1 && blocks * 2 <= 132 && ceil_div<int64_t>(num_vec, int64_t{threads} * (vpt / 2)) <= 132) continue;
      if (vpt == 1) add_shape<1, true>(v, num_vec, int(blocks), threads);
      if (vpt == 2) add_shape<2, true>(v, num_vec, int(blocks), threads);
      if (vpt == 4) add_shape<4, true>(v, num_vec, int(blocks), threads);
    }
  }
  return v;
}

// One shape's buffers: the filled input, and codes and scales (ns of them) for the variant
// under test and for the reference.
struct Buffers {
  T* x;
  uint8_t *q, *q_ref;
  float *s, *s_ref;
  int64_t n, ns;
  std::vector<uint8_t> hq_ref;  // the reference, once computed (reference_done)
  std::vector<float> hs_ref;

  Buffers(int64_t n_, int64_t ns_, uint32_t seed, cudaStream_t st) : n(n_), ns(ns_) {
    CK(cudaMalloc(&x, n * sizeof(T)));
    CK(cudaMalloc(&q, n));
    CK(cudaMalloc(&q_ref, n));
    CK(cudaMalloc(&s, ns * 4));
    CK(cudaMalloc(&s_ref, ns * 4));
    tune_common::fill_bf16_kernel<<<256, 256, 0, st>>>(x, n, seed, -3.0f, 6.0f);
    CK(cudaGetLastError());
  }
  ~Buffers() {
    CK(cudaFree(x));
    CK(cudaFree(q));
    CK(cudaFree(q_ref));
    CK(cudaFree(s));
    CK(cudaFree(s_ref));
  }
  // Copies the reference's codes and scales to the host (after the reference ran on st).
  void reference_done(cudaStream_t st) {
    hq_ref.resize(n);
    hs_ref.resize(ns);
    CK(cudaMemcpyAsync(hq_ref.data(), q_ref, n, cudaMemcpyDeviceToHost, st));
    CK(cudaMemcpyAsync(hs_ref.data(), s_ref, ns * 4, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
  }
  // Runs `run` once from poisoned codes and scales set to `scale_byte` bytes, compares codes and
  // scales with the reference bit for bit, then times it; prints "name us" and 'X' on a failed
  // check.
  template <typename Run>
  void check_and_time(const std::string& name, int scale_byte, Run&& run, cudaStream_t st) {
    CK(cudaMemsetAsync(s, scale_byte, ns * 4, st));
    CK(cudaMemsetAsync(q, 0xff, n, st));
    CK(run());
    std::vector<uint8_t> hq(n);
    std::vector<float> hs(ns);
    CK(cudaMemcpyAsync(hq.data(), q, n, cudaMemcpyDeviceToHost, st));
    CK(cudaMemcpyAsync(hs.data(), s, ns * 4, cudaMemcpyDeviceToHost, st));
    CK(cudaStreamSynchronize(st));
    const bool ok = std::memcmp(hq.data(), hq_ref.data(), n) == 0 && std::memcmp(hs.data(), hs_ref.data(), ns * 4) == 0;
    const float us = tune_common::graph_us([&](int) { CK(run()); }, true, 1, st);
    std::printf("  %-12s %7.2f us %c\n", name.c_str(), us, ok ? ' ' : 'X');
  }
};

// --op static (session 16): the static per-tensor quant (a given scale: the code kernel alone)
// at T rows of H, from DRAM at the bench's large sizes. Rows: "prod" (launch_per_tensor_quant;
// also the check reference), "uU LOAD": the code kernel with U 16-byte vectors a thread and
// loads under LOAD (nc = ld.global.nc.L1::no_allocate, production's; plain; keep = an L2
// evict_last policy; keepL1 = L1 + L2 evict_last).
void run_static(const std::vector<int64_t>& Ts, const std::vector<int64_t>& Hs, cudaStream_t s) {
  constexpr int kV = kVec16<T>;
  using LP = LoadPolicy;
  const std::vector<Variant> vs = {
      {"prod", [](const P& p, cudaStream_t st) { return launch_per_tensor_quant<T>(p, st); }},
      {"u4 plain", [](const P& p, cudaStream_t st) { return launch_code_kernel<T, kV, 4, LP::kDefault>(p, p.numel / kV, st); }},
      {"u4 keep", [](const P& p, cudaStream_t st) { return launch_code_kernel<T, kV, 4, LP::kKeepL2>(p, p.numel / kV, st); }},
      {"u4 keepL1", [](const P& p, cudaStream_t st) { return launch_code_kernel<T, kV, 4, LP::kKeepL1L2>(p, p.numel / kV, st); }},
      {"u2 nc", [](const P& p, cudaStream_t st) { return launch_code_kernel<T, kV, 2, LP::kStream>(p, p.numel / kV, st); }},
      {"u2 keep", [](const P& p, cudaStream_t st) { return launch_code_kernel<T, kV, 2, LP::kKeepL2>(p, p.numel / kV, st); }},
      {"u8 nc", [](const P& p, cudaStream_t st) { return launch_code_kernel<T, kV, 8, LP::kStream>(p, p.numel / kV, st); }},
      {"u8 keep", [](const P& p, cudaStream_t st) { return launch_code_kernel<T, kV, 8, LP::kKeepL2>(p, p.numel / kV, st); }},
      {"u1 keep", [](const P& p, cudaStream_t st) { return launch_code_kernel<T, kV, 1, LP::kKeepL2>(p, p.numel / kV, st); }},
  };
  for (int64_t H : Hs) {
    for (int64_t Tn : Ts) {
      const int64_t n = Tn * H;
      Buffers b(n, 1, uint32_t(Tn * 7919 + H), s);
      const P p{b.x, b.q, b.s, n, false, true};
      const P pref{b.x, b.q_ref, b.s_ref, n, false, true};
      CK(cudaMemsetAsync(b.s_ref, 0x3c, 4, s));  // scale 0x3c3c3c3c = 0.0115
      CK(launch_per_tensor_quant<T>(pref, s));
      b.reference_done(s);
      std::printf("T=%lld H=%lld static (%.1f MB read + written)\n", (long long)Tn, (long long)H, n * 3.0 / 1e6);
      for (const Variant& v : vs) {
        std::snprintf(tune_common::g_ctx, sizeof(tune_common::g_ctx), "%s T=%lld", v.name.c_str(), (long long)Tn);
        b.check_and_time(v.name, 0x3c, [&] { return v.run(p, s); }, s);
      }
    }
  }
}

// --op token: sgl_per_token_quant_fp8 (row-major fp32 scales [T]) at T rows of H. Rows:
// "prod" (launch_row_quant as shipped; also the check reference), "cCtTvV" (launch_row_cluster:
// a cluster of C blocks of T threads per row, V vectors a thread).
using RP = RowQuantParams<T>;
using RowLaunch = std::function<cudaError_t(const RP&, cudaStream_t)>;
struct RowVariant {
  std::string name;
  RowLaunch run;
};

template <int kVpt>
void add_row_cluster(std::vector<RowVariant>& v, int cs, int threads) {
  char name[32];
  std::snprintf(name, sizeof(name), "c%dt%dv%d", cs, threads, kVpt);
  v.push_back({name, [=](const RP& p, cudaStream_t s) {
                 return launch_row_cluster<T, QuantCode::kFp8, kVpt>(p, cs, threads, s);
               }});
}

std::vector<RowVariant> row_variants(int64_t rows, int64_t hidden) {
  const int64_t hv = hidden / kVec16<T>;
  std::vector<RowVariant> v;
  v.push_back({"prod", [](const RP& p, cudaStream_t s) { return launch_row_quant<T>(QuantCode::kFp8, p, s); }});
  for (int cs : {2, 4, 8, 16}) {
    if (rows * cs > 264) continue;
    for (int threads : {128, 256, 512}) {
      const int64_t vpt = ceil_div<int64_t>(hv, int64_t{cs} * threads);
      if (vpt > 4 || (vpt == 1 && hv * 2 <= int64_t{cs} * threads)) continue;
      const int v2 = vpt <= 1 ? 1 : vpt <= 2 ? 2 : 4;
      const bool ok = v2 == 1   ? cluster_launchable<row_quant_cluster_kernel<T, QuantCode::kFp8, 1>>(cs, threads)
                      : v2 == 2 ? cluster_launchable<row_quant_cluster_kernel<T, QuantCode::kFp8, 2>>(cs, threads)
                                : cluster_launchable<row_quant_cluster_kernel<T, QuantCode::kFp8, 4>>(cs, threads);
      if (!ok) continue;
      if (v2 == 1) add_row_cluster<1>(v, cs, threads);
      if (v2 == 2) add_row_cluster<2>(v, cs, threads);
      if (v2 == 4) add_row_cluster<4>(v, cs, threads);
    }
  }
  return v;
}

void run_token(const std::vector<int64_t>& Ts, const std::vector<int64_t>& Hs, cudaStream_t s) {
  for (int64_t H : Hs) {
    for (int64_t Tn : Ts) {
      Buffers b(Tn * H, Tn, uint32_t(Tn * 7919 + H), s);
      auto params = [&](uint8_t* qq, float* ss) {
        RP p{};
        p.input = b.x;
        p.output_q = qq;
        p.scales.ptr = ss;
        p.scales.stride_m = 1;
        p.scales.groups = 1;
        p.rows = Tn;
        p.hidden = H;
        p.input_stride = H;
        p.eps = 0.0f;
        p.qmax = kFp8Max;
        p.qmin = -kFp8Max;
        p.enable_pdl = true;
        return p;
      };
      const RP p = params(b.q, b.s);
      CK(launch_row_quant<T>(QuantCode::kFp8, params(b.q_ref, b.s_ref), s));
      b.reference_done(s);
      std::printf("per-token T=%lld H=%lld\n", (long long)Tn, (long long)H);
      for (const RowVariant& v : row_variants(Tn, H)) {
        std::snprintf(tune_common::g_ctx, sizeof(tune_common::g_ctx), "token %s T=%lld", v.name.c_str(), (long long)Tn);
        b.check_and_time(v.name, 0xff, [&] { return v.run(p, s); }, s);
      }
    }
  }
}

}  // namespace tune

int main(int argc, char** argv) {
  using namespace tune;
  std::vector<int64_t> Ts = {1, 4, 16, 32, 64, 128, 256, 1024}, Hs = {4096};
  bool token = false, static_op = false;
  int streams = 0;  // --streams N: tune_common::extra_streams first (a torch process's stream pools)
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--streams")) streams = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--T")) Ts = tune_common::parse_list(argv[i + 1]);
    if (!std::strcmp(argv[i], "--H")) Hs = tune_common::parse_list(argv[i + 1]);
    if (!std::strcmp(argv[i], "--op")) {
      token = !std::strcmp(argv[i + 1], "token");
      static_op = !std::strcmp(argv[i + 1], "static");
    }
  }
  tune_common::print_device();
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  tune_common::extra_streams(s, streams);
  tune_common::copy_gbps(s);
  if (token) {
    run_token(Ts, Hs, s);
    return 0;
  }
  if (static_op) {
    run_static(Ts, Hs, s);
    return 0;
  }
  for (int64_t H : Hs) {
    for (int64_t Tn : Ts) {
      const int64_t n = Tn * H;
      Buffers b(n, 1, uint32_t(Tn * 7919 + H), s);
      const P p{b.x, b.q, b.s, n, true, true};
      CK(cudaMemsetAsync(b.s_ref, 0, 4, s));
      const P pref{b.x, b.q_ref, b.s_ref, n, true, true};
      CK(launch_amax(pref, n / kVec16<T>, s));
      CK(launch_codes(pref, n / kVec16<T>, s));
      b.reference_done(s);
      std::printf("T=%lld H=%lld (scale %.6g)\n", (long long)Tn, (long long)H, b.hs_ref[0]);
      float* sc = b.s;
      std::vector<Variant> vs = variants(n);
      vs.push_back({"zero+prod", [sc](const P& pp, cudaStream_t st) {
                      const cudaError_t e = cudaMemsetAsync(sc, 0, 4, st);
                      return e != cudaSuccess ? e : launch_per_tensor_quant<T>(pp, st);
                    }});
      // A caller's torch.zeros: a one-thread kernel without PDL writes the zero.
      vs.push_back({"fill+prod", [sc](const P& pp, cudaStream_t st) {
                      zero_kernel<<<1, 1, 0, st>>>(sc);
                      return launch_per_tensor_quant<T>(pp, st);
                    }});
      vs.push_back({"fill+two", [sc](const P& pp, cudaStream_t st) {
                      zero_kernel<<<1, 1, 0, st>>>(sc);
                      const cudaError_t e = launch_amax(pp, pp.numel / kVec16<T>, st);
                      return e != cudaSuccess ? e : launch_codes(pp, pp.numel / kVec16<T>, st);
                    }});
      for (const Variant& v : vs) {
        std::snprintf(tune_common::g_ctx, sizeof(tune_common::g_ctx), "%s T=%lld", v.name.c_str(), (long long)Tn);
        b.check_and_time(v.name, 0, [&] { return v.run(p, s); }, s);
      }
    }
  }
  return 0;
}
