// SPDX-License-Identifier: Apache-2.0
// Sweep of RoPE kernel variants (bf16, in place, 32 q / 8 k heads, D = R = 128, int64
// positions), standalone (no torch): the production launcher (csrc/elementwise/rope.cu,
// included below) is the baseline row, the rest are candidates and diagnostics. Every
// candidate's output is compared bitwise with production's (same fp32 math per element), and
// production's against an fp64 host reference.
//
//   nvcc -O3 -std=c++20 -arch=sm_90a --expt-relaxed-constexpr -Iinclude -Icsrc -o /tmp/tune_rope benchmark/elementwise/tune_rope.cu
//   /tmp/tune_rope [--T 1,16,128,4096,32768] [--only SUBSTR[,SUBSTR]] [--randpos 1] [--streams N]
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
// Session 15 (H200): "prod sN" = production's plan with N heads a lane; "wN" = var_kernel in
// blocks of N warps (GPT-J in the "co" layout), "csnc" = cos/sin through ld.global.nc, "cssh"
// = the warp loads the cos/sin row once and shuffles it out, "cocs diag" = NeoX with GPT-J's
// cos/sin access pattern (wrong values: timing only), "s2" = 2 heads a lane; "diag empty" =
// the kernel returns after the PDL wait (launch and block-scheduling floor), "diag nocs" /
// "noload" = constants instead of the cos/sin / head loads; "lean ..." = production's
// in-place path copied with switches (lean_kernel) and "pk" = production's kernel launched
// through the var path, which found what separated production from var_kernel (see rope.cu).
// Session 41: "tb wN" = production's kernel and layout on blocks of N warps (rope_kernel's
// kThreads), "rep N" = production captured again (whether one graph reads alike every time).
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

// The var_kernel's default block (production's block: RopePlan::block).
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;

constexpr int kHeadsFirst = 1, kU32 = 2, kEarly = 4, kCo = 8, kNoPos = 16, kOcc4 = 32, kNoCs = 64, kNoLoad = 128,
              kEmpty = 256, kT128 = 512, kCsShfl = 1024, kCsNc = 2048, kCoCs = 4096;

// In place, no KV write, R = D (every unit rotary): the production kernel's structure with
// the kFlags changes above.
template <bool kInterleave, int kFlags, int kBW = 0>
__global__ void __launch_bounds__(kThreads, (kFlags & kOcc4) != 0 ? 4 : 1) var_kernel(const P p, const RopeLayout l) {
  SGL_PDL_WAIT();
  if constexpr ((kFlags & kEmpty) != 0) {
    SGL_PDL_LAUNCH_DEPENDENTS();
    return;
  }
  if constexpr ((kFlags & kEarly) != 0) SGL_PDL_LAUNCH_DEPENDENTS();
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  constexpr int kBlockWarps = kBW > 0 ? kBW : (kFlags & kT128) != 0 ? 4 : kWarps;
  int64_t token;
  int chunk;
  if constexpr ((kFlags & kU32) != 0) {
    const uint32_t warp = blockIdx.x * kBlockWarps + threadIdx.x / kWarpSize;
    const uint32_t t32 = warp / static_cast<uint32_t>(l.chunks);
    token = t32;
    chunk = static_cast<int>(warp - t32 * static_cast<uint32_t>(l.chunks));
  } else {
    const int64_t warp = static_cast<int64_t>(blockIdx.x) * kBlockWarps + static_cast<int>(threadIdx.x) / kWarpSize;
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
    if constexpr ((kFlags & kNoCs) != 0) {
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        c[e] = 1.0f - 1e-3f * float(e + (pos & 3));
        s[e] = 1e-3f * float(e + (pos & 3));
      }
      return;
    }
    const float* row = p.cos_sin_cache + pos * p.rotary_dim;
    if constexpr ((kFlags & kCsShfl) != 0) {
      // R = 128 only: the warp loads the whole 512-byte row once (lane l: floats 4l .. 4l + 3)
      // and each lane gathers its 8 cos and 8 sin values from four lanes.
      const Vec<float, 4> w = load_vec<Vec<float, 4>>(row + 4 * lane);
      const int src_c0 = kCoLayout ? u : 2 * u;
      const int src_c1 = kCoLayout ? u + 8 : 2 * u + 1;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        c[e] = __shfl_sync(0xffffffffu, w[e], src_c0);
        c[e + 4] = __shfl_sync(0xffffffffu, w[e], src_c1);
        s[e] = __shfl_sync(0xffffffffu, w[e], src_c0 + 16);
        s[e + 4] = __shfl_sync(0xffffffffu, w[e], src_c1 + 16);
      }
      return;
    }
    constexpr bool kCoPattern = kCoLayout || (kFlags & kCoCs) != 0;  // kCoCs: diagnostic, wrong values
    const int a = kCoPattern ? 4 * u : 8 * u;
    const int b = kCoPattern ? 4 * (u + l.units) : 8 * u + 4;
    auto ld = [](const float* q) {
      if constexpr ((kFlags & kCsNc) != 0) {
        const float4 v = __ldg(reinterpret_cast<const float4*>(q));
        Vec<float, 4> r;
        r[0] = v.x;
        r[1] = v.y;
        r[2] = v.z;
        r[3] = v.w;
        return r;
      } else {
        return load_vec<Vec<float, 4>>(q);
      }
    };
    const Vec<float, 4> c0 = ld(row + a);
    const Vec<float, 4> c1 = ld(row + b);
    const Vec<float, 4> s0 = ld(row + rot_half + a);
    const Vec<float, 4> s1 = ld(row + rot_half + b);
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
        if constexpr ((kFlags & kNoLoad) != 0) {
#pragma unroll
          for (int m = 0; m < 4; ++m) {
            x0[b][m] = Pair<T>::from_float2(make_float2(float(h), float(m)));
            x1[b][m] = Pair<T>::from_float2(make_float2(float(u), float(slot)));
          }
        } else {
          x0[b] = load_at<LoadPolicy::kDefault>(src, off0);
          x1[b] = load_at<LoadPolicy::kDefault>(src, off1);
        }
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

// Production's in-place (kGeneral = false) path, NeoX, copied with switches that turn it into
// var_kernel step by step, to find what separates the two at decode sizes: kLbVar =
// __launch_bounds__(256, 1) as var_kernel; kInLoop = position and cos/sin loaded inside the
// batch loop; kCsOrder = cos/sin loads in var_kernel's order (c0, c1, s0, s1); kDiv = u, slot,
// token and chunk by integer division instead of FastDivmod.
constexpr int kLbVar = 1, kInLoop = 2, kCsOrder = 4, kDiv = 8, kEarlyHeads = 16;
RopeLayout layout_for(const P& p, int force_steps);
template <int kSw>
__global__ void __launch_bounds__(128, (kSw & kLbVar) != 0 ? 1 : 0) lean_kernel(const P p, const RopeLayout l) {
  SGL_PDL_WAIT();
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const uint32_t warp = blockIdx.x * 4 + threadIdx.x / kWarpSize;
  uint32_t token32, chunk32, slot32, u32;
  if constexpr ((kSw & kDiv) != 0) {
    token32 = warp / static_cast<uint32_t>(l.chunks);
    chunk32 = warp - token32 * static_cast<uint32_t>(l.chunks);
    u32 = static_cast<uint32_t>(lane % l.units);
    slot32 = static_cast<uint32_t>(lane / l.units);
  } else {
    l.by_chunks.divmod(warp, token32, chunk32);
    l.by_units.divmod(static_cast<uint32_t>(lane), slot32, u32);
  }
  const int64_t token = token32;
  const int chunk = static_cast<int>(chunk32), u = static_cast<int>(u32), slot = static_cast<int>(slot32);
  if (token >= p.nnz || slot >= l.slots) return;
  const int rot_half = p.rotary_dim / 2;
  const int off0 = 8 * u, off1 = rot_half + 8 * u;
  float c[8], s[8];
  auto load_pos_cs = [&]() -> bool {
    const int64_t pos = static_cast<const int64_t*>(p.pos_ids)[token];
    if (pos < 0 || pos >= p.max_pos) return false;
    const float* row = p.cos_sin_cache + pos * p.rotary_dim;
    if constexpr ((kSw & kCsOrder) != 0) {
      const float4 c0 = load_cs4(row + 8 * u), c1 = load_cs4(row + 8 * u + 4);
      const float4 s0 = load_cs4(row + rot_half + 8 * u), s1 = load_cs4(row + rot_half + 8 * u + 4);
      c[0] = c0.x, c[1] = c0.y, c[2] = c0.z, c[3] = c0.w, c[4] = c1.x, c[5] = c1.y, c[6] = c1.z, c[7] = c1.w;
      s[0] = s0.x, s[1] = s0.y, s[2] = s0.z, s[3] = s0.w, s[4] = s1.x, s[5] = s1.y, s[6] = s1.z, s[7] = s1.w;
    } else {
      load_cos_sin<false>(row, rot_half, 8 * u, 8 * u + 4, true, true, c, s);
    }
    return true;
  };
  const int hq = p.num_q_heads;
  const int first_step = chunk * l.steps;
  auto head = [&](int h) -> T* {
    return h < hq ? p.q_rope + token * p.q_rope_stride_n + h * p.q_rope_stride_h
                  : p.k_rope + token * p.k_rope_stride_n + (h - hq) * p.k_rope_stride_h;
  };
  // A batch of up to kBatch heads a lane (steps i0 ...): loaded, then rotated and stored.
  auto load_batch = [&](int i0, V<T> (&x0)[kBatch], V<T> (&x1)[kBatch]) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int h = (first_step + i0 + b) * l.slots + slot;
      if (i0 + b < l.steps && h < l.total_heads) {
        const T* src = head(h);
        x0[b] = load_at<LoadPolicy::kDefault>(src, off0);
        x1[b] = load_at<LoadPolicy::kDefault>(src, off1);
      }
    }
  };
  auto rotate_store_batch = [&](int i0, V<T> (&x0)[kBatch], V<T> (&x1)[kBatch]) {
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int h = (first_step + i0 + b) * l.slots + slot;
      if (i0 + b < l.steps && h < l.total_heads) {
        rotate_halves<T>(x0[b], x1[b], c, s);
        T* dst = head(h);
        store_at(dst, off0, x0[b]);
        store_at(dst, off1, x1[b]);
      }
    }
  };
  if constexpr ((kSw & kEarlyHeads) != 0) {
    // The position load first, then the first batch of heads (independent of it), then the
    // position check and the cos/sin loads that depend on it.
    const int64_t pos = static_cast<const int64_t*>(p.pos_ids)[token];
    V<T> x0[kBatch], x1[kBatch];
    for (int i0 = 0; i0 < l.steps; i0 += kBatch) {
      load_batch(i0, x0, x1);
      if (i0 == 0) {
        if (pos < 0 || pos >= p.max_pos) return;
        const float* row = p.cos_sin_cache + pos * p.rotary_dim;
        load_cos_sin<false>(row, rot_half, 8 * u, 8 * u + 4, true, true, c, s);
      }
      rotate_store_batch(i0, x0, x1);
    }
    SGL_PDL_LAUNCH_DEPENDENTS();
    return;
  }
  if constexpr ((kSw & kInLoop) == 0) {
    if (!load_pos_cs()) return;
  }
  for (int i0 = 0; i0 < l.steps; i0 += kBatch) {
    if constexpr ((kSw & kInLoop) != 0) {
      if (!load_pos_cs()) return;
    }
    V<T> x0[kBatch], x1[kBatch];
    load_batch(i0, x0, x1);
    rotate_store_batch(i0, x0, x1);
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

template <int kSw>
cudaError_t launch_lean(const P& p, cudaStream_t s) {
  RopeLayout l = layout_for(p, 0);
  l.by_units = FastDivmod(static_cast<uint32_t>(l.units));
  l.by_chunks = FastDivmod(static_cast<uint32_t>(l.chunks));
  const auto blocks = static_cast<uint32_t>(ceil_div<int64_t>(p.nnz * l.chunks, 4));
  return launch_kernel(lean_kernel<kSw>, dim3(blocks), dim3(128), 0, s, p.enable_pdl, p, l);
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

template <bool kInterleave, int kFlags, int kBW = 0>
cudaError_t launch_var(const P& p, int force_steps, cudaStream_t s) {
  const RopeLayout l = layout_for(p, force_steps);
  constexpr int kBlockWarps = kBW > 0 ? kBW : (kFlags & kT128) != 0 ? 4 : kWarps;
  const auto blocks = static_cast<uint32_t>(ceil_div<int64_t>(p.nnz * l.chunks, kBlockWarps));
  return launch_kernel(var_kernel<kInterleave, kFlags, kBW>, dim3(blocks), dim3(kBlockWarps * kWarpSize), 0, s,
                       p.enable_pdl, p, l);
}

// Session 41: production's in-place kernel (plan_rope's layout and instance) on blocks of kW
// warps instead of kBlock / 32 ("tb wN"); at 10 warps a block a 40-head token at one head a
// lane is one block, so T=128 runs 128 blocks of 10 warps instead of 320 of 4.
template <bool kInterleave, bool kPin, int kW>
cudaError_t launch_tb(const P& p, cudaStream_t s) {
  RopePlan plan;
  const cudaError_t e = plan_rope(p, plan);
  if (e != cudaSuccess || plan.grid == 0) return e;
  if (plan.general || plan.kv || plan.keep) return cudaErrorInvalidConfiguration;  // the lean in-place path only
  const auto blocks = static_cast<uint32_t>(ceil_div<int64_t>(p.nnz * plan.l.chunks, kW));
  return launch_kernel(rope_kernel<T, kInterleave, int64_t, false, false, false, kPin, kW * kWarpSize>, dim3(blocks),
                       dim3(kW * kWarpSize), 0, s, p.enable_pdl, p, plan.l);
}

// Session 42: production's in-place kernel and grid launched with the programmatic-serialization
// attribute present but 0 (no PDL: the launch waits for the previous kernel as without the
// attribute), "attr pdl0": whether the no-PDL boundary's extra cost in a process that has used
// many streams (tune_common::extra_streams) depends on how the launch is described.
template <bool kInterleave>
cudaError_t launch_attr0(const P& p, cudaStream_t s) {
  RopePlan plan;
  const cudaError_t e = plan_rope(p, plan);
  if (e != cudaSuccess || plan.grid == 0) return e;
  if (plan.general || plan.kv || plan.keep) return cudaErrorInvalidConfiguration;  // the lean in-place path only
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 0;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<uint32_t>(plan.grid));
  cfg.blockDim = dim3(kBlock);
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  return cudaLaunchKernelEx(&cfg, rope_kernel<T, kInterleave, int64_t, false, false, false, false>, p, plan.l);
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
  bool rand_pos = false;
  // --pollute N: before each T's measurements, N calls of production (NeoX, no PDL) on a second
  // non-blocking stream, ordered by events both ways, as torch's graph warm-up does on a side
  // stream (--pollute-kernel empty: an empty kernel instead). Session 16: in a torch process,
  // graphs replayed after such a warm-up read ~0.17 us a call slower at T=16 / 128.
  int pollute = 0;
  std::string pollute_kernel = "prod";
  int streams = 0;  // --streams N: tune_common::extra_streams first (a torch process's stream pools)
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--T") {
      Ts.clear();
      for (char* t = std::strtok(argv[i + 1], ","); t; t = std::strtok(nullptr, ",")) Ts.push_back(std::atoll(t));
    } else if (a == "--randpos") {
      rand_pos = std::atoi(argv[i + 1]) != 0;
    } else if (a == "--pollute") {
      pollute = std::atoi(argv[i + 1]);
    } else if (a == "--streams") {
      streams = std::atoi(argv[i + 1]);
    } else if (a == "--pollute-kernel") {
      pollute_kernel = argv[i + 1];
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
    // Session 41: production again, captured anew each time ("rep N" / "rep N pdl"): whether one
    // kernel and grid times alike from one captured graph to the next.
    for (int rep = 1; rep <= 4; ++rep) {
      for (int pdl = 0; pdl < 2; ++pdl) {
        vars.push_back({st + "rep " + std::to_string(rep) + (pdl ? " pdl" : ""), bool(gptj), bool(pdl),
                        [](const P& p, cudaStream_t s) { return launch_rope<T>(p, s); }});
      }
    }
    for (int st_ : {1, 2, 3, 4, 5, 8, 10}) {
      vars.push_back({st + "prod s" + std::to_string(st_), bool(gptj), false, [st_](const P& p, cudaStream_t s) {
                        RopePlan plan;
                        CK(plan_rope(p, plan));
                        plan.l.steps = st_;
                        plan.l.chunks = ceil_div(ceil_div(plan.l.total_heads, plan.l.slots), st_);
                        if (!set_grid(plan, p.nnz)) return cudaErrorInvalidConfiguration;
                        return launch_plan(p, plan, s);
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
    ADD("v u32 t128", true, kU32 | kT128, 0);
    ADD("v u32 t128 nopdl", false, kU32 | kT128, 0);
    ADD("v u32 nopdl", false, kU32, 0);
    ADD("diag empty", true, kEmpty, 0);
    ADD("diag empty nopdl", false, kEmpty, 0);
    ADD("diag nocs", true, kU32 | kNoCs, 0);
    ADD("diag nopos nocs", true, kU32 | kNoPos | kNoCs, 0);
    ADD("diag noload", true, kU32 | kNoLoad, 0);
    ADD("diag noload nocs nopos", true, kU32 | kNoLoad | kNoCs | kNoPos, 0);
    ADD("diag nopos nocs nopdl", false, kU32 | kNoPos | kNoCs, 0);
    if (gptj) {
      ADD("v co", true, kCo, 0);
      ADD("v co hf u32", true, kCo | kHeadsFirst | kU32, 0);
      ADD("v co hf u32 nopdl", false, kCo | kHeadsFirst | kU32, 0);
    }
#define ADDW(NAME, PDL, FLAGS, BW)                                                                                 \
  vars.push_back({st + NAME, bool(gptj), PDL, [gptj](const P& p, cudaStream_t s) {                                 \
                    return gptj ? launch_var<true, FLAGS | kCo, BW>(p, 0, s) : launch_var<false, FLAGS, BW>(p, 0, s); \
                  }})
    ADDW("w4", true, kU32, 4);
    ADDW("w8", true, kU32, 8);
    ADDW("w4 cssh", true, kU32 | kCsShfl, 4);
    ADDW("w4 csnc", true, kU32 | kCsNc, 4);
    ADDW("w4 hf cssh", true, kU32 | kHeadsFirst | kCsShfl, 4);
    ADDW("w4 nopdl", false, kU32, 4);
    ADDW("w4 cssh nopdl", false, kU32 | kCsShfl, 4);
    ADDW("w4 csnc nopdl", false, kU32 | kCsNc, 4);
    ADDW("w4 hf cssh nopdl", false, kU32 | kHeadsFirst | kCsShfl, 4);
    ADDW("w4 hf nopdl", false, kU32 | kHeadsFirst, 4);
    ADDW("w8 cssh", true, kU32 | kCsShfl, 8);
    ADDW("w8 cssh nopdl", false, kU32 | kCsShfl, 8);
    ADDW("w4 empty nopdl", false, kEmpty, 4);
    ADDW("w4 cocs diag", true, kU32 | kCoCs, 4);
    ADDW("w4 cocs diag nopdl", false, kU32 | kCoCs, 4);
    ADDW("w4 csnc cocs diag nopdl", false, kU32 | kCoCs | kCsNc, 4);
    vars.push_back({st + "w4 s2", bool(gptj), true, [gptj](const P& p, cudaStream_t s) {
                      return gptj ? launch_var<true, kU32 | kCo, 4>(p, 2, s) : launch_var<false, kU32, 4>(p, 2, s);
                    }});
    vars.push_back({st + "w4 s2 nopdl", bool(gptj), false, [gptj](const P& p, cudaStream_t s) {
                      return gptj ? launch_var<true, kU32 | kCo, 4>(p, 2, s) : launch_var<false, kU32, 4>(p, 2, s);
                    }});
#undef ADDW
#undef ADD
    if (!gptj) {
#define LEAN(NAME, SW) \
  vars.push_back({st + NAME, false, false, [](const P& p, cudaStream_t s) { return launch_lean<SW>(p, s); }})
      LEAN("lean", 0);
      LEAN("lean lb", kLbVar);
      LEAN("lean loop", kInLoop);
      LEAN("lean order", kCsOrder);
      LEAN("lean div", kDiv);
      LEAN("lean all", kLbVar | kInLoop | kCsOrder | kDiv);
      LEAN("lean loop lb", kLbVar | kInLoop);
      LEAN("lean early", kEarlyHeads);
      LEAN("lean early lb", kEarlyHeads | kLbVar);
#undef LEAN
    }
#define TB(W)                                                                                          \
  vars.push_back({st + "tb w" #W, bool(gptj), false, [gptj](const P& p, cudaStream_t s) {             \
                    return gptj ? launch_tb<true, false, W>(p, s) : launch_tb<false, false, W>(p, s); \
                  }});                                                                                 \
  vars.push_back({st + "tb w" #W " pdl", bool(gptj), true, [gptj](const P& p, cudaStream_t s) {       \
                    return gptj ? launch_tb<true, true, W>(p, s) : launch_tb<false, true, W>(p, s);   \
                  }})
    vars.push_back({st + "attr pdl0", bool(gptj), false, [gptj](const P& p, cudaStream_t s) {
                      return gptj ? launch_attr0<true>(p, s) : launch_attr0<false>(p, s);
                    }});
    TB(1);
    TB(2);
    TB(3);
    TB(4);
    TB(5);
    TB(8);
    TB(10);
    TB(20);
#undef TB
    // Production's kernel launched as the var kernels are (their layout, one launch helper):
    // tells the kernel's cost from the launcher's.
    for (int pdl = 0; pdl < 2; ++pdl) {
      vars.push_back({st + (pdl ? "pk pdl" : "pk"), bool(gptj), bool(pdl), [gptj](const P& p, cudaStream_t s) {
                        RopeLayout l = layout_for(p, 0);
                        l.by_units = FastDivmod(static_cast<uint32_t>(l.units));
                        l.by_chunks = FastDivmod(static_cast<uint32_t>(l.chunks));
                        const auto blocks = static_cast<uint32_t>(ceil_div<int64_t>(p.nnz * l.chunks, 4));
                        return gptj ? launch_kernel(rope_kernel<T, true, int64_t, false, false>, dim3(blocks),
                                                    dim3(kBlock), 0, s, p.enable_pdl, p, l)
                                    : launch_kernel(rope_kernel<T, false, int64_t, false, false>, dim3(blocks),
                                                    dim3(kBlock), 0, s, p.enable_pdl, p, l);
                      }});
    }
  }
  auto selected = [&](const Variant& v) {
    if (v.name.find("prod") != std::string::npos || only.empty()) return true;
    for (const auto& o : only)
      if (v.name.find(o) != std::string::npos) return true;
    return false;
  };

  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  tune_common::extra_streams(s, streams);
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
    // The nopos diagnostic assumes t + 7; --randpos 1: random positions below 4096, as
    // bench_rope.py draws them.
    for (int64_t t = 0; t < Tn; ++t) {
      h_pos[t] = rand_pos ? static_cast<int64_t>((rnd() + 1.0f) * 2047.5f) : t + 7;
    }
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
    if (pollute_kernel == "empty") {
      tune_common::pollute(s, pollute);
    } else {
      tune_common::pollute_with(s, pollute, [&](cudaStream_t s2) { CK(launch_rope<T>(params(0, false, false), s2)); },
                                "prod");
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
