// SPDX-License-Identifier: Apache-2.0
// RoPE with a float32 cos/sin cache (apply_rope_pos_ids_cos_sin_cache), with the optional
// fused write of the rotated key and of the value into a KV cache.
//
// Memory bound: every element of q and k is read and written once, and the cos/sin row of a
// token is shared by all its heads. A lane handles two 16-byte vectors x0, x1 (8 fp16/bf16
// elements each) of a head, its "unit" u; with R the rotary dimension and U the units a head
// is cut into (R / 16 in place without the KV write, else D / 16):
//
//   NeoX, rotary unit u < R / 16   x0 = x[8u, 8u + 8),   x1 = x[R/2 + 8u, R/2 + 8u + 8)
//                                  pair e < 8: (x0[e], x1[e]), frequency j = 8u + e
//   NeoX, pass unit u >= R / 16    x0 = x[16u, 16u + 8), x1 = x[16u + 8, 16u + 16), unchanged
//   GPT-J                          x0 = vector u, x1 = vector u + U (vector v = x[8v, 8v + 8)),
//                                  pairs (x[2j], x[2j + 1]), frequencies 4v .. 4v + 3 of
//                                  vector v, rotary when v < R / 8, else unchanged
//
// so that the lanes of a warp read contiguous 16-byte pieces in both styles (GPT-J with x0 =
// x[16u, 16u + 8), x1 = x[16u + 8, 16u + 16) read half of each 32-byte sector per load:
// 4.40 -> 2.51 us at T=128 and 47.0 -> 32.4 us at T=4096 on an H100, tune_rope.cu). A warp
// works on one token: lane = slot * units + u, so a lane keeps one unit for every head it
// visits and loads its 16 cos/sin values once per batch of kBatch heads (once per token below
// kLongTokens tokens). The heads of the token (q, then k,
// then v when the KV write is fused) are visited in steps of `slots` heads; a warp covers
// `steps` of them, and a token gets `chunks` warps (more warps per token when there are few
// tokens, so decode shapes still spread over many SMs).
#include <algorithm>
#include <cstdint>

#include "elementwise/elementwise.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::elementwise {

namespace {

constexpr int kWarpSize = 32;
// Threads per block. NOTE (H200, benchmark/elementwise/tune_rope.cu "prod b128" / "prod b256",
// NeoX, no PDL, us at T = 1 / 16 / 128 / 1024 / 4096 / 16384 / 32768): 128 threads 1.72 /
// 1.87 / 2.35 / 7.78 / 24.07 / 85.31 / 165.8, 256 threads 1.95 / 2.06 / 2.54 / 7.92 / 24.73 /
// 87.16 / 168.6 (before the lean in-place path; GPT-J alike). Fewer warps a block spread a
// decode call over more SMs; no shape was faster with 256.
// Session 41 (H200, tune_rope.cu --streams 64 "tb wN": rope_kernel's kThreads = 32 N with
// plan_rope's layout, two runs a call, two calls; us): without PDL no other block was faster at
// T = 128 / 160 / 192 / 256 (NeoX 4 warps 2.13-2.18 / 2.24-2.26 / 2.32-2.35 / 2.55-2.62; 5 warps
// 2.11-2.13 / 2.33-2.34 / 2.35-2.38 / 2.54-2.56; 10 warps, one 40-head token a block, 2.18-2.20
// / 2.32-2.35 / 2.47-2.48 / 2.57-2.58; 1, 8 and 20 warps slower). With PDL the block size moves
// the time by up to 0.5 us with no order to it (2 warps T = 128 / 160 / 256 1.86 / 1.64 / 1.94
// against 4 warps' 1.63-1.79 / 2.15-2.30 / 2.43-2.46), and one graph of this kernel reads alike
// within a process but 0.05-0.15 us apart between processes at T = 128-160: not taken.
constexpr int kBlock = 128;
constexpr int kUnitElems = 16;  // two 16-byte vectors of fp16/bf16
// Heads a lane loads before it computes: 2 * kBatch 16-byte loads in flight per lane (ptxas
// 13.0, sm_90a, __launch_bounds__(kBlock, 1): 92-96 registers in place, 110-114 general).
constexpr int kBatch = 4;
// Warps to aim for when there are few tokens (a token then gets several warps). NOTE (H200,
// tune_rope.cu "prod sN": N heads a lane, NeoX, no PDL, us at T = 128 / 256 / 512 / 1024 /
// 2048, before the lean in-place path): s1 2.08 / 2.43 / 3.93 / 7.86 / 14.37, s2 2.15 / 2.51 /
// 3.17 / 7.64 / 13.06, s4 2.38 / 2.59 / 3.42 / 7.58 / 13.41; with it, at T = 64 / 128 / 256 /
// 512: s1 1.74 / 1.96 / 2.48 / 3.94, s2 1.75 / 1.96 / 2.34 / 3.16, s3 1.88 / 2.00 / 2.33 /
// 3.15, s4 2.01 / 2.06 / 2.42 / 3.17 (random positions: the same to 0.01 us). 1280 takes s1
// to 128 tokens, s2 at 256, s4 from 512 (the cap, kBatch; but see kTwoStepWarps); the 8192 of
// before (set when the heads still moved in 4-byte pieces) kept s1 to 512 tokens.
constexpr int64_t kTargetWarps = 1280;
// Up to this many warps, two heads a lane rather than the kBatch that kTargetWarps gives from
// 512 tokens. NOTE (H200, tune_rope.cu "prod sN", NeoX, no PDL, us at T = 512 / 1024 / 4096):
// s2 3.12 / 7.26 / 24.78, s3 3.17 / 7.25 / 23.82, s4 3.14 / 7.65 / 23.17 (2048 tokens, before
// the lean path: s2 13.06, s4 13.41). With 40 heads, 2 heads a lane to 2048 tokens (10240
// warps). s4 at 1024 tokens is 3072 warps, just above the 2640 that fit at once (96 registers):
// a second, nearly empty wave.
constexpr int64_t kTwoStepWarps = 10240;
// Many tokens: see plan_rope.
constexpr int64_t kLongTokens = 16384;
constexpr int kLongSteps = 8;
// From this many tokens (heads of 128 or more) the heads are loaded under an L2 evict_last
// policy: see plan_rope.
constexpr int64_t kKeepTokens = 1024;

// How the launcher cut the work; the same for every warp.
struct RopeLayout {
  int units;        // units per head the lanes cover: D / 16, or R / 16 when no pass unit is needed
  int rot_units;    // R / 16
  int slots;        // heads per warp step: kWarpSize / units
  int steps;        // warp steps per warp (heads per lane)
  int chunks;       // warps per token
  int total_heads;  // num_q_heads + num_k_heads (+ num_v_heads with the KV write)
  bool q_pass;      // q_rope is not q: copy the pass units of q
  bool k_pass;      // k_rope is not k: copy the pass units of k
  // Divisions by units and chunks, set by set_grid: on the critical path of a decode call
  // (one warp of a few hundred instructions an SM), the integer divisions they replace cost
  // about 40 instructions with two MUFU.RCP round trips before the position load.
  FastDivmod by_units, by_chunks;
};

// Two fp16/bf16 elements, converted to and from fp32 with one instruction each way.
template <typename T>
struct Pair;
template <>
struct Pair<half> {
  using type = half2;
  static __device__ __forceinline__ float2 to_float2(half2 x) { return __half22float2(x); }
  static __device__ __forceinline__ half2 from_float2(float2 x) { return __float22half2_rn(x); }
};
template <>
struct Pair<__nv_bfloat16> {
  using type = __nv_bfloat162;
  static __device__ __forceinline__ float2 to_float2(__nv_bfloat162 x) { return __bfloat1622float2(x); }
  static __device__ __forceinline__ __nv_bfloat162 from_float2(float2 x) { return __float22bfloat162_rn(x); }
};

// A 16-byte vector of 8 fp16/bf16 elements, as 4 pairs: element 2m + i is .x / .y of pair m.
template <typename T>
using V = Vec16<typename Pair<T>::type>;

// NeoX: pairs (x0[e], x1[e]) with frequency e of the unit.
template <typename T>
__device__ __forceinline__ void rotate_halves(V<T>& x0, V<T>& x1, const float (&c)[8], const float (&s)[8]) {
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const float2 a = Pair<T>::to_float2(x0[m]);
    const float2 b = Pair<T>::to_float2(x1[m]);
    const float c0 = c[2 * m], c1 = c[2 * m + 1], s0 = s[2 * m], s1 = s[2 * m + 1];
    x0[m] = Pair<T>::from_float2(make_float2(a.x * c0 - b.x * s0, a.y * c1 - b.y * s1));
    x1[m] = Pair<T>::from_float2(make_float2(b.x * c0 + a.x * s0, b.y * c1 + a.y * s1));
  }
}

// GPT-J: adjacent pairs (x[2m], x[2m + 1]) of one vector, with frequencies first + m.
template <typename T>
__device__ __forceinline__ void rotate_pairs(V<T>& x, const float (&c)[8], const float (&s)[8], int first) {
#pragma unroll
  for (int m = 0; m < 4; ++m) {
    const float2 a = Pair<T>::to_float2(x[m]);
    const float cm = c[first + m], sm = s[first + m];
    x[m] = Pair<T>::from_float2(make_float2(a.x * cm - a.y * sm, a.y * cm + a.x * sm));
  }
}

// 16-byte load / store of the vector at element `e` of a row (e a multiple of 8).
template <LoadPolicy kLoad, typename T>
__device__ __forceinline__ V<T> load_at(const T* row, int e) {
  return load16<typename Pair<T>::type, kLoad>(reinterpret_cast<const typename Pair<T>::type*>(row + e));
}
template <typename T>
__device__ __forceinline__ void store_at(T* row, int e, const V<T>& x) {
  store16(reinterpret_cast<typename Pair<T>::type*>(row + e), x);
}

// Four cos/sin values through the read-only data path (ld.global.nc: the cache is an input no
// thread writes). NOTE (H200, benchmark/elementwise/tune_rope.cu "w4" against "w4 csnc", us at
// T=1 / 16 / 128, NeoX without PDL, measured while the heads still moved in 4-byte pieces):
// 1.59 / 1.68 / 2.44 with plain loads, 1.59 / 1.68 / 2.36.
__device__ __forceinline__ float4 load_cs4(const float* p) { return __ldg(reinterpret_cast<const float4*>(p)); }

// The cos/sin values of a lane (c[e], s[e]: frequency of x0's pair e for NeoX; GPT-J:
// c[0..3] for the pairs of x0, c[4..7] for those of x1), left unset where not rotary.
template <bool kInterleave>
__device__ __forceinline__ void load_cos_sin(const float* row, int rot_half, int a, int b, bool rot0, bool rot1,
                                             float (&c)[8], float (&s)[8]) {
  // NeoX: a = 8u, b = 8u + 4 (one rotary flag); GPT-J: a = 4 * (vector of x0), b = 4 * (vector of x1).
  if (rot0) {
    const float4 c0 = load_cs4(row + a);
    const float4 s0 = load_cs4(row + rot_half + a);
    c[0] = c0.x, c[1] = c0.y, c[2] = c0.z, c[3] = c0.w;
    s[0] = s0.x, s[1] = s0.y, s[2] = s0.z, s[3] = s0.w;
  }
  if (rot1) {
    const float4 c1 = load_cs4(row + b);
    const float4 s1 = load_cs4(row + rot_half + b);
    c[4] = c1.x, c[5] = c1.y, c[6] = c1.z, c[7] = c1.w;
    s[4] = s1.x, s[5] = s1.y, s[6] = s1.z, s[7] = s1.w;
  }
}

// kThreads: the block (kBlock in every production launch; other sizes: tune_rope.cu's "tb").
// q/q_rope and k/k_rope may be the same memory: no __restrict__ on them. Every element is
// read and then written by the same thread, so in place is safe.
//
// kGeneral = false: the wrapper's call in place (q_rope == q, k_rope == k) with every lane unit
// rotary (units == rot_units): a lean path without the pass / source-selection branches runs, with
// the KV write when kKv (the fused call at R = D; without kKv, no v). Measured on an H100 in a CUDA
// graph (benchmark/elementwise/tune_rope.cu, 32 q / 8 k heads, D = R = 128, PDL on): T = 1/16/128
// 1.82/1.93/2.39 us with every branch kept and 64-bit warp arithmetic, 1.64/1.69/2.09 without
// (1.99/2.04/2.50 with PDL off, the wrapper's default); session 15 (H200) took it further, see the
// notes in the lean path and RopePlan.
// PDL trigger: in the lean path once a batch's head loads are issued (PdlTrigger::kAfterLoads; from
// kLongTokens tokens again for each batch, which changes nothing), at the end in the general path.
// NOTE (H200, session 16, bench_rope.py --no-compile, the trigger at the end (A) against right
// after the wait (B), alternated A B A B, us at T = 1 / 16 / 128): rope_pdl (the lean path) 1.40 /
// 1.50 / 1.93 -> 1.20 / 1.39 / 1.70; rope_kv (then the general path, PDL by default; since session
// 18 the lean path with kKv) 1.43 / 1.56 / 2.03 -> 1.44 / 1.65 / 2.12. Session 17 (H200, alternated
// twice on one machine): after the loads, rope_pdl 1.22 / 1.38 / 1.70 -> 1.19 / 1.29 / 1.64
// (against right after the wait, tools/decode_rows.py); rope_kv after the loads against at the end
// read 1.42 / 1.52-1.56 / 2.40 against 1.44 / 1.58 / 2.02-2.03 in bench_rope.py, while the same
// graphs built by tools/decode_rows.py read 1.47 / 1.58 / 2.12 against 1.62 / 1.76 / 2.13: the
// bench decides.
// Without PDL (the wrapper's default without the KV write) the trigger does nothing.
// Below kLongTokens tokens the launcher caps steps at kBatch and the loop over batches below
// runs once; from there on a warp may take up to kLongSteps heads in several batches.
// kKeep: the heads are loaded under an L2 evict_last policy (plan_rope: many tokens).
// kKv (with kGeneral = false): the in-place path also writes the KV cache (the wrapper's fused
// call with R = D: RopePlan::kv); the heads after q and k are v's, copied to v_buffer. Its PDL
// trigger is at the end. NOTE (H200, session 18, bench_rope.py --no-compile rope_kv (32 q / 8 k
// / 8 v heads, D = R = 128), three wheels on one machine, alternated twice, us at T = 1 / 16 /
// 128 / 4096 / 32768): the general path (before) 1.47 / 1.58 / 2.03-2.05 / 31.25-31.27 /
// 225.3-225.4; this path with the trigger after the loads 1.34 / 1.53 / 2.00-2.01 / 30.33-30.35 /
// 218.5-218.7, at the end 1.39 / 1.54 / 1.91-1.94 / 30.36-30.37 / 218.5-218.7 (shipped).
// kPin (the in-place path launched with PDL, without kKeep): the token's position
// address is formed and prefetched before the PDL wait (pdl_wait_prefetched, sgl_kernel/
// arch.cuh), so the parameter loads and the index arithmetic are done when the wait returns.
// NOTE (H100, session 21, bench_rope.py --no-compile, the pin in every instance (A) against
// none (B), alternated A B A B, us at T = 1 / 16 / 128): with PDL, rope_kv 1.38-1.39 / 1.49-1.50 /
// 1.95-1.96 against 1.41 / 1.52-1.53 / 2.06-2.07, rope_pdl 1.16-1.17 / 1.30-1.31 / 1.67-1.71
// against 1.25 / 1.31 / 1.74; without PDL (the wrapper's default without the KV write) slower:
// rope 1.53 / 1.82-1.83 / 2.45 against 1.52 / 1.80-1.81 / 2.25-2.26, rope_gptj 2.37-2.43 against
// 2.20-2.21 at T=128. From 4096 tokens within 0.5 % either way.
template <typename T, bool kInterleave, typename TPos, bool kGeneral, bool kKeep, bool kKv = false, bool kPin = false,
          int kThreads = kBlock>
__global__ void __launch_bounds__(kThreads, 1) rope_kernel(const RopeParams<T> p, const RopeLayout l) {
  static_assert(!(kGeneral && kKv), "kKv is a variant of the in-place path");
  static_assert(!(kGeneral && kPin), "kPin: the in-place path only");
  constexpr LoadPolicy kLoad = kKeep ? LoadPolicy::kKeepL2 : LoadPolicy::kDefault;
  static_assert(sizeof(T) == 2 && 2 * kVec16<T> == kUnitElems, "fp16/bf16: a unit is two 16-byte vectors");
  if constexpr (!kPin) SGL_PDL_WAIT();
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  // 32-bit: the launcher keeps nnz * chunks below 2^32.
  const uint32_t warp = blockIdx.x * (kThreads / kWarpSize) + threadIdx.x / kWarpSize;
  uint32_t token32, chunk32, slot32, u32;
  l.by_chunks.divmod(warp, token32, chunk32);
  l.by_units.divmod(static_cast<uint32_t>(lane), slot32, u32);
  const int64_t token = token32;
  const int chunk = static_cast<int>(chunk32), u = static_cast<int>(u32), slot = static_cast<int>(slot32);
  const TPos* pos_at = nullptr;  // kPin: the token's position
  if constexpr (kPin) {
    pos_at = static_cast<const TPos*>(p.pos_ids) + (token < p.nnz ? token : 0);
    pdl_wait_prefetched(pos_at);
  }
  if (token >= p.nnz || slot >= l.slots) return;

  const int rot_half = p.rotary_dim / 2;
  // x0 / x1 element offsets in a head and whether each is rotary. NeoX: the unit's two halves
  // (pass units: 16 consecutive elements). GPT-J: vectors u and u + units, so that a warp's
  // loads read contiguous 16-byte pieces; vector v is rotary when v < R / 8.
  int off0, off1;
  bool rot0, rot1;
  if constexpr (kInterleave) {
    off0 = 8 * u;
    off1 = 8 * (u + l.units);
    rot0 = !kGeneral || 8 * u < p.rotary_dim;
    rot1 = !kGeneral || 8 * (u + l.units) < p.rotary_dim;
  } else {
    rot0 = rot1 = !kGeneral || u < l.rot_units;
    off0 = rot0 ? 8 * u : kUnitElems * u;
    off1 = rot0 ? rot_half + 8 * u : kUnitElems * u + 8;
  }
  // The token's position and the lane's cos/sin values; false: API.md 1.4, a position outside
  // the cache skips the token (nothing written).
  float c[8], s[8];
  auto load_position = [&]() -> bool {
    const int64_t pos = static_cast<int64_t>(kPin ? *pos_at : static_cast<const TPos*>(p.pos_ids)[token]);
    if (pos < 0 || pos >= p.max_pos) return false;
    const float* cs_row = p.cos_sin_cache + pos * p.rotary_dim;  // [R/2 cos | R/2 sin]
    if constexpr (kInterleave) {
      load_cos_sin<true>(cs_row, rot_half, off0 / 2, off1 / 2, rot0, rot1, c, s);
    } else {
      load_cos_sin<false>(cs_row, rot_half, 8 * u, 8 * u + 4, rot0, rot0, c, s);
    }
    return true;
  };
  const int hq = p.num_q_heads;
  const int hqk = hq + p.num_k_heads;
  const int first_step = chunk * l.steps;
  // The fused KV write (kKv, or the general path with v): the token's cache row, loaded before
  // the position (independent of it); a location outside a buffer skips that buffer's row.
  bool write_kb = false, write_vb = false;
  int64_t loc = 0;
  if (kKv || (kGeneral && p.v != nullptr)) {
    loc = p.kv_cache_loc[token];
    write_kb = loc >= 0 && loc < p.k_buffer_rows;
    write_vb = loc >= 0 && loc < p.v_buffer_rows;
  }

  if constexpr (!kGeneral) {
    // In place, every unit rotary: head h of the token is read and written at one address, and
    // a lane's only condition is whether its head exists (the general path's per-head source
    // selection and null checks are gone; on their own they were worth 0.01-0.06 us).
    auto head = [&](int h) -> T* {  // q_rope / k_rope: q / k themselves here
      return h < hq ? p.q_rope + token * p.q_rope_stride_n + h * p.q_rope_stride_h
                    : p.k_rope + token * p.k_rope_stride_n + (h - hq) * p.k_rope_stride_h;
    };
    // kKv: heads from hqk on are v's.
    auto source = [&](int h) -> const T* {
      if constexpr (kKv) {
        if (h >= hqk) return p.v + token * p.v_stride_n + (h - hqk) * p.v_stride_h;
      }
      return head(h);
    };
    for (int i0 = 0; i0 < l.steps; i0 += kBatch) {
      // The position and cos/sin are loaded in the loop, again for each batch (from kLongTokens
      // tokens a warp may take two): so placed, ptxas computes the head addresses before the
      // position load instead of after its check. NOTE (H200, benchmark/elementwise/
      // tune_rope.cu "lean ...", NeoX, no PDL, us at T = 1 / 16 / 128 / 2048): 1.69 / 1.84 /
      // 2.09 / 13.41 loaded once before the loop, 1.49 / 1.62 / 1.95 / 13.09 in it,
      // 1.50 / 1.59 / 1.96 / 12.84 in it with __launch_bounds__(kBlock, 1) (shipped). The
      // heads loaded before the position check read 1.53 / 1.65 / 2.00 / 12.84.
      if (!load_position()) return;
      V<T> x0[kBatch], x1[kBatch];
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int h = (first_step + i0 + b) * l.slots + slot;
        if (i0 + b < l.steps && h < l.total_heads) {
          const T* src = source(h);
          x0[b] = load_at<kLoad>(src, off0);
          x1[b] = load_at<kLoad>(src, off1);
        }
      }
      if constexpr (!kKv) SGL_PDL_LAUNCH_DEPENDENTS();  // once the loads are issued (kGeneral's NOTE)
#pragma unroll
      for (int b = 0; b < kBatch; ++b) {
        const int h = (first_step + i0 + b) * l.slots + slot;
        if (i0 + b < l.steps && h < l.total_heads) {
          if (!kKv || h < hqk) {
            if constexpr (kInterleave) {
              rotate_pairs<T>(x0[b], c, s, 0);
              rotate_pairs<T>(x1[b], c, s, 4);
            } else {
              rotate_halves<T>(x0[b], x1[b], c, s);
            }
            T* dst = head(h);
            store_at(dst, off0, x0[b]);
            store_at(dst, off1, x1[b]);
          }
          if constexpr (kKv) {
            T* row = nullptr;
            if (h >= hqk) {
              if (write_vb) row = p.v_buffer + loc * p.v_buffer_stride_n + (h - hqk) * p.v_buffer_stride_h;
            } else if (h >= hq && write_kb) {
              row = p.k_buffer + loc * p.k_buffer_stride_n + (h - hq) * p.k_buffer_stride_h;
            }
            if (row != nullptr) {
              store_at(row, off0, x0[b]);
              store_at(row, off1, x1[b]);
            }
          }
        }
      }
    }
    if constexpr (kKv) SGL_PDL_LAUNCH_DEPENDENTS();  // at the end (kKv's NOTE)
    return;
  }

  // rot0 is true whenever rot1 is: "the lane rotates something".
  const bool rot = rot0;

  const bool q_pass = kGeneral && l.q_pass;
  const bool k_pass = kGeneral && l.k_pass;

  for (int i0 = 0; i0 < l.steps; i0 += kBatch) {
    if (!load_position()) return;  // in the loop, as the in-place path above
    V<T> x0[kBatch], x1[kBatch];
    bool active[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int h = (first_step + i0 + b) * l.slots + slot;
      const T* src = nullptr;
      if (i0 + b < l.steps && h < l.total_heads) {
        if (h < hq) {
          if (rot || q_pass) src = p.q + token * p.q_stride_n + h * p.q_stride_h;
        } else if (h < hqk) {
          if (rot || k_pass || write_kb) src = p.k + token * p.k_stride_n + (h - hq) * p.k_stride_h;
        } else if (write_vb) {
          src = p.v + token * p.v_stride_n + (h - hqk) * p.v_stride_h;
        }
      }
      active[b] = src != nullptr;
      if (active[b]) {
        x0[b] = load_at<kLoad>(src, off0);
        x1[b] = load_at<kLoad>(src, off1);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (!active[b]) continue;
      const int h = (first_step + i0 + b) * l.slots + slot;
      if (h < hqk) {
        if constexpr (kInterleave) {
          if (rot0) rotate_pairs<T>(x0[b], c, s, 0);
          if (rot1) rotate_pairs<T>(x1[b], c, s, 4);
        } else if (rot0) {
          rotate_halves<T>(x0[b], x1[b], c, s);
        }
      }
      if (h < hq) {
        T* dst = p.q_rope + token * p.q_rope_stride_n + h * p.q_rope_stride_h;
        store_at(dst, off0, x0[b]);
        store_at(dst, off1, x1[b]);
      } else if (h < hqk) {
        const int kh = h - hq;
        if (rot || k_pass) {
          T* dst = p.k_rope + token * p.k_rope_stride_n + kh * p.k_rope_stride_h;
          store_at(dst, off0, x0[b]);
          store_at(dst, off1, x1[b]);
        }
        if (write_kb) {
          T* dst = p.k_buffer + loc * p.k_buffer_stride_n + kh * p.k_buffer_stride_h;
          store_at(dst, off0, x0[b]);
          store_at(dst, off1, x1[b]);
        }
      } else if (kGeneral) {
        T* dst = p.v_buffer + loc * p.v_buffer_stride_n + (h - hqk) * p.v_buffer_stride_h;
        store_at(dst, off0, x0[b]);
        store_at(dst, off1, x1[b]);
      }
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

// How launch_rope runs a call: the layout, the grid and the kernel instance.
struct RopePlan {
  RopeLayout l;
  uint32_t grid;  // blocks of kBlock threads
  bool general;   // rope_kernel's kGeneral
  bool keep;      // rope_kernel's kKeep
  bool kv;        // rope_kernel's kKv (general is false)
};

template <typename T, bool kInterleave, typename TPos, bool kKeep>
cudaError_t launch_planned(const RopeParams<T>& p, const RopePlan& plan, cudaStream_t stream) {
  // kPin with PDL where kKeep is off (its instances stay as they were); see rope_kernel's NOTE.
  const bool pin = p.enable_pdl && !kKeep;
  if (plan.kv) {
    return pin ? launch_kernel(rope_kernel<T, kInterleave, TPos, false, false, true, true>, dim3(plan.grid),
                               dim3(kBlock), 0, stream, p.enable_pdl, p, plan.l)
               : launch_kernel(rope_kernel<T, kInterleave, TPos, false, kKeep, true>, dim3(plan.grid), dim3(kBlock),
                               0, stream, p.enable_pdl, p, plan.l);
  }
  if (plan.general) {
    return launch_kernel(rope_kernel<T, kInterleave, TPos, true, kKeep>, dim3(plan.grid), dim3(kBlock), 0, stream,
                         p.enable_pdl, p, plan.l);
  }
  return pin ? launch_kernel(rope_kernel<T, kInterleave, TPos, false, false, false, true>, dim3(plan.grid),
                             dim3(kBlock), 0, stream, p.enable_pdl, p, plan.l)
             : launch_kernel(rope_kernel<T, kInterleave, TPos, false, kKeep>, dim3(plan.grid), dim3(kBlock), 0,
                             stream, p.enable_pdl, p, plan.l);
}

template <typename T, bool kInterleave, typename TPos>
cudaError_t launch_planned(const RopeParams<T>& p, const RopePlan& plan, cudaStream_t stream) {
  return plan.keep ? launch_planned<T, kInterleave, TPos, true>(p, plan, stream)
                   : launch_planned<T, kInterleave, TPos, false>(p, plan, stream);
}

// Sets the grid and the layout's divisors from plan.l.chunks (call it again after changing the
// steps); false when the grid's warp index would not fit 32 bits.
bool set_grid(RopePlan& plan, int64_t nnz) {
  // The kernel's warp index is 32-bit: 2^32 warps would be 4e9 tokens at one warp each.
  const int64_t warps = nnz * plan.l.chunks;
  constexpr int kBlockWarps = kBlock / kWarpSize;
  if (warps + kBlockWarps > int64_t{0xffffffff}) return false;
  plan.grid = static_cast<uint32_t>(ceil_div<int64_t>(warps, kBlockWarps));
  plan.l.by_units = FastDivmod(static_cast<uint32_t>(plan.l.units));
  plan.l.by_chunks = FastDivmod(static_cast<uint32_t>(plan.l.chunks));
  return true;
}

// The layout, grid and kernel instance of a call. cudaSuccess with plan.grid == 0: nothing to do.
template <typename T>
cudaError_t plan_rope(const RopeParams<T>& p, RopePlan& plan) {
  plan = RopePlan{};
  const int d = p.head_size, r = p.rotary_dim;
  if (d % kUnitElems != 0 || d < kUnitElems || d > kWarpSize * kUnitElems || r % kUnitElems != 0 ||
      r < kUnitElems || r > d || p.nnz < 0) {
    return cudaErrorInvalidValue;
  }
  const bool fused = p.v != nullptr;
  RopeLayout& l = plan.l;
  // In place (the wrapper's call): the pass units of q and k are left alone.
  l.q_pass = !(p.q_rope == p.q && p.q_rope_stride_n == p.q_stride_n && p.q_rope_stride_h == p.q_stride_h);
  l.k_pass = !(p.k_rope == p.k && p.k_rope_stride_n == p.k_stride_n && p.k_rope_stride_h == p.k_stride_h);
  l.rot_units = r / kUnitElems;
  l.units = (l.q_pass || l.k_pass || fused) ? d / kUnitElems : l.rot_units;
  l.slots = kWarpSize / l.units;
  l.total_heads = p.num_q_heads + p.num_k_heads + (fused ? p.num_v_heads : 0);
  if (p.nnz == 0 || l.total_heads == 0) return cudaSuccess;
  const int all_steps = ceil_div(l.total_heads, l.slots);
  // Warps per token: as few as kBatch steps allow when there are enough tokens to fill the
  // GPU, else enough to reach kTargetWarps warps. At most kBatch steps a warp (one batch of
  // loads) below kLongTokens tokens: at 9000 tokens (40 heads of 128, 10 steps) 4 steps a
  // warp took 66.9 us against 69.6 for all 10 in one warp (H100, tune_rope.cu "prod s4").
  // From kLongTokens tokens on, a warp takes up to kLongSteps heads a lane, the token's steps
  // split evenly (40 heads: 2 warps of 5 steps). NOTE (H200, tune_rope.cu "prod sN", NeoX, us
  // at T=4096 / 8192 / 16384 / 32768): s4 25.10 / 47.18 / 90.59 / 177.12, s5 25.61 / 47.12 /
  // 88.99 / 173.28, s8 25.35 / 46.46 / 89.03 / 173.40, s10 29.04 / 48.17 / 90.13 / 173.85
  // (GPT-J within 0.2 us of these). The H100 of session 10 had s4 ahead of s10 at 32768
  // tokens (233.2 against 239.8 us); s5 was not measured there.
  const int64_t want = std::clamp<int64_t>(ceil_div<int64_t>(kTargetWarps, p.nnz), 1, all_steps);
  if (p.nnz >= kLongTokens) {
    l.steps = ceil_div(all_steps, ceil_div(all_steps, kLongSteps));
  } else {
    l.steps = std::min(kBatch, ceil_div(all_steps, static_cast<int>(want)));
    // Two heads a lane while that keeps the grid within kTwoStepWarps warps (kTwoStepWarps'
    // NOTE).
    if (l.steps > 2 && p.nnz * ceil_div(all_steps, 2) <= kTwoStepWarps) l.steps = 2;
  }
  l.chunks = ceil_div(all_steps, l.steps);
  // In place with the KV write and every unit rotary (the wrapper's fused call at R = D): the
  // in-place path with the KV write (kKv) instead of the general path.
  plan.kv = fused && !l.q_pass && !l.k_pass && r == d;
  plan.general = (l.q_pass || l.k_pass || fused) && !plan.kv;
  // The heads under an L2 evict_last policy from kKeepTokens tokens, heads of 128 or more.
  // NOTE (H200, bench_rope.py --no-compile, one machine, alternated twice, us, plain loads ->
  // evict_last everywhere): NeoX 32 q / 8 k heads, D = R = 128, T = 1024 / 4096 / 32768
  // 9.28 / 25.40 / 173.5 -> 9.04 / 25.10 / 168.7 (3868 -> 3977 GB/s); GPT-J 32768 173.5 ->
  // 168.7; with the KV write 223.5 -> 219.3; R = 64 T = 4096 19.52 -> 19.05; D = 256 46.5 both;
  // but D = 64 T = 4096 18.84 -> 19.77, and the decode rows slower at T = 1 / 16 (NeoX 1.91 /
  // 2.26 -> 2.13 / 2.42; with PDL 1.61 -> 1.87 at T = 1).
  const bool keep = p.nnz >= kKeepTokens && d >= 128;
  plan.keep = keep;
  return set_grid(plan, p.nnz) ? cudaSuccess : cudaErrorInvalidConfiguration;
}

template <typename T>
cudaError_t launch_plan(const RopeParams<T>& p, const RopePlan& plan, cudaStream_t stream) {
  if (plan.grid == 0) return cudaSuccess;
  if (p.interleave) {
    return p.pos_ids_int64 ? launch_planned<T, true, int64_t>(p, plan, stream)
                           : launch_planned<T, true, int32_t>(p, plan, stream);
  }
  return p.pos_ids_int64 ? launch_planned<T, false, int64_t>(p, plan, stream)
                         : launch_planned<T, false, int32_t>(p, plan, stream);
}

}  // namespace

template <typename T>
cudaError_t launch_rope(const RopeParams<T>& p, cudaStream_t stream) {
  RopePlan plan;
  const cudaError_t e = plan_rope(p, plan);
  return e != cudaSuccess ? e : launch_plan(p, plan, stream);
}

template cudaError_t launch_rope<half>(const RopeParams<half>&, cudaStream_t);
template cudaError_t launch_rope<__nv_bfloat16>(const RopeParams<__nv_bfloat16>&, cudaStream_t);

}  // namespace sgl_kernel::elementwise
