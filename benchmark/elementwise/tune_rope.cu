// SPDX-License-Identifier: Apache-2.0
// Sweep of RoPE kernel variants (bf16, in place, 32 q / 8 k heads, D = R = 128, int64
// positions), standalone (no torch): the production launcher (csrc/elementwise/rope.cu,
// included below) is the baseline row, the rest are candidates and diagnostics. Every
// candidate's output is compared bitwise with production's (same fp32 math per element), and
// production's against an fp64 host reference.
//
//   nvcc -O3 -std=c++20 -arch=sm_90a --expt-relaxed-constexpr -Iinclude -Icsrc -o /tmp/tune_rope benchmark/elementwise/tune_rope.cu
//   /tmp/tune_rope [--T 1,16,128,4096,32768] [--only SUBSTR[,SUBSTR]]
//
// Timing as benchmark/harness.py: median per-call time over R replays of a CUDA graph of N
// back-to-back launches; a call whose bytes fit four times in L2 reuses one buffer set
// ("hot"), larger calls rotate among K sets. GB/s = q + k bytes read and written.
//
// Variants: "prod" / "prod pdl" = launch_rope without / with PDL (the wrapper's default is
// PDL only with the fused KV write, API.md); "v ..." = var_kernel below with the production
// launch layout: "hf" = the head loads issued before the position load (they do not depend
// on it), "u32" = 32-bit warp/token arithmetic, "early" = PDL trigger right after the wait,
// "co" = GPT-J with lane-contiguous vectors (vector u and u + D/16 of a head: each load
// instruction of a warp reads contiguous 16-byte pieces); "stepsN" = N heads per lane (fewer
// warps, cos/sin loaded once per N heads); "diag nopos" = the position taken as token + 7
// without loading it (the check still passes: the test's positions are token + 7), which
// shows what the dependent position load costs; "occ4" = __launch_bounds__(256, 4) (at most 64
// registers: 4 blocks of 256 threads per SM instead of 3).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "../../csrc/elementwise/rope.cu"
#include "../tune_common.cuh"

namespace tune {

using namespace sgl_kernel;
using namespace sgl_kernel::elementwise;
using T = __nv_bfloat16;
using P = RopeParams<T>;

constexpr int kHeadsFirst = 1, kU32 = 2, kEarly = 4, kCo = 8, kNoPos = 16, kOcc4 = 32;

// In place, no KV write, R = D (every unit rotary): the production kernel's structure with
// the kFlags changes above.
template <bool kInterleave, int kFlags>
__global__ void __launch_bounds__(kThreads, (kFlags & kOcc4) != 0 ? 4 : 1) var_kernel(const P p, const RopeLayout l) {
  SGL_PDL_WAIT();
  if constexpr ((kFlags & kEarly) != 0) SGL_PDL_LAUNCH_DEPENDENTS();
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  int64_t token;
  int chunk;
  if constexpr ((kFlags & kU32) != 0) {
    const uint32_t warp = blockIdx.x * kWarps + threadIdx.x / kWarpSize;
    const uint32_t t32 = warp / static_cast<uint32_t>(l.chunks);
    token = t32;
    chunk = static_cast<int>(warp - t32 * static_cast<uint32_t>(l.chunks));
  } else {
    const int64_t warp = static_cast<int64_t>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / kWarpSize;
    token = warp / l.chunks;
    chunk = static_cast<int>(warp - token * l.chunks);
  }
  const int u = lane % l.units;
  const int slot = lane / l.units;
  if (token >= p.nnz || slot >= l.slots) return;
  constexpr bool kCoLayout = kInterleave && (kFlags & kCo) != 0;
  const int rot_half = p.rotary_dim / 2;
  const int off0 = kCoLayout ? 8 * u : (kInterleave ? kUnitElems * u : 8 * u);
  const int off1 = kCoLayout ? 8 * (u + l.units) : (kInterleave ? kUnitElems * u + 8 : rot_half + 8 * u);
  const int hq = p.num_q_heads;
  const int first_step = chunk * l.steps;

  auto head_ptr = [&](int h) -> T* {
    return h < hq ? p.q_rope + token * p.q_rope_stride_n + h * p.q_rope_stride_h
                  : p.k_rope + token * p.k_rope_stride_n + (h - hq) * p.k_rope_stride_h;
  };
  auto load_cs = [&](int64_t pos, float (&c)[8], float (&s)[8]) {
    const float* row = p.cos_sin_cache + pos * p.rotary_dim;
    const int a = kCoLayout ? 4 * u : 8 * u;
    const int b = kCoLayout ? 4 * (u + l.units) : 8 * u + 4;
    const Vec<float, 4> c0 = load_vec<Vec<float, 4>>(row + a);
    const Vec<float, 4> c1 = load_vec<Vec<float, 4>>(row + b);
    const Vec<float, 4> s0 = load_vec<Vec<float, 4>>(row + rot_half + a);
    const Vec<float, 4> s1 = load_vec<Vec<float, 4>>(row + rot_half + b);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      c[e] = c0[e];
      c[e + 4] = c1[e];
      s[e] = s0[e];
      s[e + 4] = s1[e];
    }
  };
  auto load_pos = [&]() -> int64_t {
    if constexpr ((kFlags & kNoPos) != 0) return token + 7;
    return static_cast<const int64_t*>(p.pos_ids)[token];
  };

  for (int i0 = 0; i0 < l.steps; i0 += kBatch) {
    V<T> x0[kBatch], x1[kBatch];
    bool active[kBatch];
    float c[8], s[8];
    int64_t pos = 0;
    if constexpr ((kFlags & kHeadsFirst) == 0) {
      pos = load_pos();
      if (pos < 0 || pos >= p.max_pos) return;
      load_cs(pos, c, s);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int h = (first_step + i0 + b) * l.slots + slot;
      active[b] = i0 + b < l.steps && h < l.total_heads;
      if (active[b]) {
        const T* src = head_ptr(h);
        x0[b] = load_at(src, off0);
        x1[b] = load_at(src, off1);
      }
    }
    if constexpr ((kFlags & kHeadsFirst) != 0) {
      pos = load_pos();
      if (pos < 0 || pos >= p.max_pos) return;
      load_cs(pos, c, s);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (!active[b]) continue;
      if constexpr (kInterleave) {
        rotate_pairs<T>(x0[b], c, s, 0);
        rotate_pairs<T>(x1[b], c, s, 4);
      } else {
        rotate_halves<T>(x0[b], x1[b], c, s);
      }
      T* dst = head_ptr((first_step + i0 + b) * l.slots + slot);
      store_at(dst, off0, x0[b]);
      store_at(dst, off1, x1[b]);
    }
  }
  if constexpr ((kFlags & kEarly) == 0) SGL_PDL_LAUNCH_DEPENDENTS();
}

// Production's layout for an in-place call, with at most `max_steps` heads per lane when > 0
// (more warps), or exactly `force_steps` when > 0.
RopeLayout layout_for(const P& p, int force_steps) {
  RopeLayout l{};
  l.rot_units = p.rotary_dim / kUnitElems;
  l.units = l.rot_units;
  l.slots = kWarpSize / l.units;
  l.total_heads = p.num_q_heads + p.num_k_heads;
  const int all_steps = ceil_div(l.total_heads, l.slots);
  const int64_t want = std::clamp<int64_t>(ceil_div<int64_t>(kTargetWarps, p.nnz), 1, all_steps);
  l.steps = force_steps > 0 ? force_steps : ceil_div(all_steps, static_cast<int>(want));
  l.chunks = ceil_div(all_steps, l.steps);
  return l;
}

template <bool kInterleave, int kFlags>
cudaError_t launch_var(const P& p, int force_steps, cudaStream_t s) {
  const RopeLayout l = layout_for(p, force_steps);
  const auto blocks = static_cast<uint32_t>(ceil_div<int64_t>(p.nnz * l.chunks, kWarps));
  return launch_kernel(var_kernel<kInterleave, kFlags>, dim3(blocks), dim3(kThreads), 0, s, p.enable_pdl, p, l);
}

struct Variant {
  std::string name;
  bool gptj;
  bool pdl;
  std::function<cudaError_t(const P&, cudaStream_t)> fn;
};

float bf(T x) { return __bfloat162float(x); }

}  // namespace tune

int main(int argc, char** argv) {
  using namespace tune;
  std::vector<int64_t> Ts = {1, 16, 128, 4096, 32768};
  std::vector<std::string> only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--T") {
      Ts.clear();
      for (char* t = std::strtok(argv[i + 1], ","); t; t = std::strtok(nullptr, ",")) Ts.push_back(std::atoll(t));
    } else if (a == "--only") {
      for (char* t = std::strtok(argv[i + 1], ","); t; t = std::strtok(nullptr, ",")) only.emplace_back(t);
    }
  }
  constexpr int HQ = 32, HK = 8, D = 128, R = 128;
  constexpr int64_t kMaxPos = 40000;
  std::vector<Variant> vars;
  for (int gptj = 0; gptj < 2; ++gptj) {
    const std::string st = gptj ? "gptj " : "neox ";
    for (int pdl = 0; pdl < 2; ++pdl) {
      vars.push_back({st + (pdl ? "prod pdl" : "prod"), bool(gptj), bool(pdl),
                      [](const P& p, cudaStream_t s) { return launch_rope<T>(p, s); }});
    }
    for (int st_ : {4, 5, 8, 10}) {
      vars.push_back({st + "prod s" + std::to_string(st_), bool(gptj), false, [gptj, st_](const P& p, cudaStream_t s) {
                        const RopeLayout l = layout_for(p, st_);
                        const auto g = static_cast<uint32_t>(ceil_div<int64_t>(p.nnz * l.chunks, kWarps));
                        return gptj ? launch_typed<T, true, int64_t>(p, l, false, g, s)
                                    : launch_typed<T, false, int64_t>(p, l, false, g, s);
                      }});
    }
#define ADD(NAME, PDL, FLAGS, STEPS)                                                                    \
  vars.push_back({st + NAME, bool(gptj), PDL, [gptj](const P& p, cudaStream_t s) {                    \
                    return gptj ? launch_var<true, FLAGS>(p, STEPS, s) : launch_var<false, FLAGS>(p, STEPS, s); \
                  }})
    ADD("v", true, 0, 0);
    ADD("v hf", true, kHeadsFirst, 0);
    ADD("v u32", true, kU32, 0);
    ADD("v hf u32", true, kHeadsFirst | kU32, 0);
    ADD("v hf u32 early", true, kHeadsFirst | kU32 | kEarly, 0);
    ADD("v hf u32 nopdl", false, kHeadsFirst | kU32, 0);
    ADD("v hf u32 steps2", true, kHeadsFirst | kU32, 2);
    ADD("v hf u32 steps4", true, kHeadsFirst | kU32, 4);
    ADD("diag nopos", true, kU32 | kNoPos, 0);
    ADD("v u32 steps4 occ4", false, kU32 | kOcc4, 4);
    ADD("v hf u32 steps4 occ4", false, kHeadsFirst | kU32 | kOcc4, 4);
    ADD("v hf u32 steps4 nopdl", false, kHeadsFirst | kU32, 4);
    if (gptj) {
      ADD("v co", true, kCo, 0);
      ADD("v co hf u32", true, kCo | kHeadsFirst | kU32, 0);
      ADD("v co hf u32 nopdl", false, kCo | kHeadsFirst | kU32, 0);
    }
#undef ADD
  }
  auto selected = [&](const Variant& v) {
    if (v.name.find("prod") != std::string::npos || only.empty()) return true;
    for (const auto& o : only)
      if (v.name.find(o) != std::string::npos) return true;
    return false;
  };

  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const int l2 = tune_common::print_device();
  // Copies on the kernels' stream, waited for: a plain cudaMemcpy between device buffers can
  // return before it is done and does not order against a non-blocking stream.
  auto copy = [&](void* dst, const void* src, size_t bytes) {
    CK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, s));
    CK(cudaStreamSynchronize(s));
  };

  // cos/sin cache: cos | sin halves per position, as the model's rotary embedding builds it.
  std::vector<float> h_cache(kMaxPos * R);
  for (int64_t pos = 0; pos < kMaxPos; ++pos) {
    for (int j = 0; j < R / 2; ++j) {
      const double inv = std::pow(10000.0, -2.0 * j / R);
      h_cache[pos * R + j] = float(std::cos(pos * inv));
      h_cache[pos * R + R / 2 + j] = float(std::sin(pos * inv));
    }
  }
  float* d_cache;
  CK(cudaMalloc(&d_cache, h_cache.size() * sizeof(float)));
  copy(d_cache, h_cache.data(), h_cache.size() * sizeof(float));

  std::printf("%-26s", "variant \\ T (us, GB/s)");
  for (int64_t t : Ts) std::printf(" %18ld", long(t));
  std::printf("\n");
  std::vector<std::vector<std::string>> cells(vars.size(), std::vector<std::string>(Ts.size(), "-"));

  for (size_t ti = 0; ti < Ts.size(); ++ti) {
    const int64_t Tn = Ts[ti];
    const int64_t q_elems = Tn * HQ * D, k_elems = Tn * HK * D;
    const double nbytes = 2.0 * double(q_elems + k_elems) * sizeof(T);
    const bool hot = 4 * nbytes <= l2;
    const int nsets = hot ? 1 : int(std::min<double>(16, std::ceil(4.0 * l2 / nbytes)));
    std::vector<T> h_q(q_elems), h_k(k_elems);
    std::vector<int64_t> h_pos(Tn);
    uint64_t rng = 0x9e3779b97f4a7c15ull + Tn;
    auto rnd = [&]() {
      rng ^= rng << 13;
      rng ^= rng >> 7;
      rng ^= rng << 17;
      return float(double(rng >> 11) / double(1ull << 53) * 2.0 - 1.0);
    };
    for (auto& x : h_q) x = __float2bfloat16(rnd());
    for (auto& x : h_k) x = __float2bfloat16(rnd());
    for (int64_t t = 0; t < Tn; ++t) h_pos[t] = t + 7;  // the nopos diagnostic assumes this
    T *q0, *k0, *qb, *kb;
    int64_t* d_pos;
    CK(cudaMalloc(&q0, q_elems * sizeof(T)));
    CK(cudaMalloc(&k0, k_elems * sizeof(T)));
    CK(cudaMalloc(&qb, nsets * q_elems * sizeof(T)));
    CK(cudaMalloc(&kb, nsets * k_elems * sizeof(T)));
    CK(cudaMalloc(&d_pos, Tn * sizeof(int64_t)));
    copy(q0, h_q.data(), q_elems * sizeof(T));
    copy(k0, h_k.data(), k_elems * sizeof(T));
    copy(d_pos, h_pos.data(), Tn * sizeof(int64_t));
    for (int i = 0; i < nsets; ++i) {
      copy(qb + i * q_elems, q0, q_elems * sizeof(T));
      copy(kb + i * k_elems, k0, k_elems * sizeof(T));
    }
    auto params = [&](int set, bool gptj, bool pdl) {
      P p{};
      p.q = p.q_rope = qb + set * q_elems;
      p.k = p.k_rope = kb + set * k_elems;
      p.cos_sin_cache = d_cache;
      p.pos_ids = d_pos;
      p.q_stride_n = p.q_rope_stride_n = HQ * D;
      p.q_stride_h = p.q_rope_stride_h = D;
      p.k_stride_n = p.k_rope_stride_n = HK * D;
      p.k_stride_h = p.k_rope_stride_h = D;
      p.nnz = Tn;
      p.max_pos = kMaxPos;
      p.num_q_heads = HQ;
      p.num_k_heads = HK;
      p.head_size = D;
      p.rotary_dim = R;
      p.pos_ids_int64 = true;
      p.interleave = gptj;
      p.enable_pdl = pdl;
      return p;
    };
    // References: production from fresh inputs (set 0), checked against fp64 on every element.
    std::vector<T> prod_q[2], prod_k[2];
    for (int gptj = 0; gptj < 2; ++gptj) {
      CK(launch_rope<T>(params(0, gptj, false), s));
      CK(cudaStreamSynchronize(s));
      prod_q[gptj].resize(q_elems);
      prod_k[gptj].resize(k_elems);
      copy(prod_q[gptj].data(), qb, q_elems * sizeof(T));
      copy(prod_k[gptj].data(), kb, k_elems * sizeof(T));
      copy(qb, q0, q_elems * sizeof(T));
      copy(kb, k0, k_elems * sizeof(T));
      double worst = 0;
      int64_t nbad = 0;
      for (int which = 0; which < 2; ++which) {
        const std::vector<T>& in = which ? h_k : h_q;
        const std::vector<T>& out = which ? prod_k[gptj] : prod_q[gptj];
        const int heads = which ? HK : HQ;
        for (int64_t t = 0; t < Tn; ++t) {
          for (int h = 0; h < heads; ++h) {
            const int64_t base = (t * heads + h) * D;
            for (int j = 0; j < R / 2; ++j) {
              const int i0 = gptj ? 2 * j : j, i1 = gptj ? 2 * j + 1 : j + R / 2;
              const double c = h_cache[h_pos[t] * R + j], sn = h_cache[h_pos[t] * R + R / 2 + j];
              const double a = bf(in[base + i0]), b = bf(in[base + i1]);
              const double e = std::max(std::fabs(bf(out[base + i0]) - (a * c - b * sn)),
                                        std::fabs(bf(out[base + i1]) - (b * c + a * sn)));
              if (e > 1.6e-2 && nbad++ < 5) {
                std::printf("  bad %s t=%ld h=%d j=%d: got %g %g want %g %g (in %g %g)\n", which ? "k" : "q", long(t), h,
                            j, bf(out[base + i0]), bf(out[base + i1]), a * c - b * sn, b * c + a * sn, a, b);
              }
              worst = std::max(worst, e);
            }
          }
        }
      }
      if (worst > 1.6e-2) {
        std::printf("PROD CHECK FAILED %s T=%ld: max abs err %.3g, %ld bad pairs\n", gptj ? "gptj" : "neox", long(Tn),
                    worst, long(nbad));
      }
    }
    for (size_t vi = 0; vi < vars.size(); ++vi) {
      const Variant& v = vars[vi];
      if (!selected(v)) continue;
      copy(qb, q0, q_elems * sizeof(T));
      copy(kb, k0, k_elems * sizeof(T));
      CK(v.fn(params(0, v.gptj, v.pdl), s));
      CK(cudaStreamSynchronize(s));
      std::vector<T> oq(q_elems), ok(k_elems);
      copy(oq.data(), qb, q_elems * sizeof(T));
      copy(ok.data(), kb, k_elems * sizeof(T));
      copy(qb, q0, q_elems * sizeof(T));
      copy(kb, k0, k_elems * sizeof(T));
      const bool ok_all = std::memcmp(oq.data(), prod_q[v.gptj].data(), q_elems * sizeof(T)) == 0 &&
                          std::memcmp(ok.data(), prod_k[v.gptj].data(), k_elems * sizeof(T)) == 0;
      auto call = [&](int i) { CK(v.fn(params(i % nsets, v.gptj, v.pdl), s)); };
      const float us = tune_common::graph_us(call, hot, nsets, s);
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%s%7.2f %6.0f", ok_all ? " " : "X", us, nbytes / (us * 1e-6) / 1e9);
      cells[vi][ti] = buf;
      std::printf("  T=%ld %-24s %s\n", long(Tn), v.name.c_str(), buf);
      std::fflush(stdout);
    }
    CK(cudaFree(q0));
    CK(cudaFree(k0));
    CK(cudaFree(qb));
    CK(cudaFree(kb));
    CK(cudaFree(d_pos));
  }
  for (size_t vi = 0; vi < vars.size(); ++vi) {
    if (!selected(vars[vi])) continue;
    std::printf("%-26s", vars[vi].name.c_str());
    for (size_t ti = 0; ti < Ts.size(); ++ti) std::printf(" %18s", cells[vi][ti].c_str());
    std::printf("\n");
  }
  std::printf("(X = output differs from production's)\n");
  return 0;
}
