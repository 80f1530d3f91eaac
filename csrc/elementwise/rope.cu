// SPDX-License-Identifier: Apache-2.0
// RoPE with a float32 cos/sin cache (apply_rope_pos_ids_cos_sin_cache), with the optional
// fused write of the rotated key and of the value into a KV cache.
//
// Memory bound: every element of q and k is read and written once, and the cos/sin row of a
// token is shared by all its heads. A head of D elements is cut into D / 16 units of two
// 16-byte vectors x0, x1 (8 fp16/bf16 elements each); with R the rotary dimension:
//
//   rotary unit u < R / 16, NeoX    x0 = x[8u, 8u + 8),   x1 = x[R/2 + 8u, R/2 + 8u + 8)
//                                   pair e < 8: (x0[e], x1[e]), frequency j = 8u + e
//   rotary unit u < R / 16, GPT-J   x0 = x[16u, 16u + 8), x1 = x[16u + 8, 16u + 16)
//                                   pairs (x[2j], x[2j + 1]), frequencies j = 8u .. 8u + 7
//   pass unit u >= R / 16           x0 = x[16u, 16u + 8), x1 = x[16u + 8, 16u + 16), unchanged
//
// Both styles need cos/sin[8u, 8u + 8) for unit u. A warp works on one token: lane = slot *
// units + u, so a lane keeps one unit index for every head it visits and loads its 16 cos/sin
// values once per token. The heads of the token (q, then k, then v when the KV write is fused)
// are visited in steps of `slots` heads; a warp covers `steps` of them, and a token gets
// `chunks` warps (more warps per token when there are few tokens, so decode shapes still
// spread over many SMs).
#include <algorithm>
#include <cstdint>

#include "elementwise/elementwise.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::elementwise {

namespace {

constexpr int kWarpSize = 32;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarpSize;
constexpr int kUnitElems = 16;  // two 16-byte vectors of fp16/bf16
// Heads a lane loads before it computes: 2 * kBatch 16-byte loads in flight per lane. With 4,
// ptxas (13.0, sm_90a) gives the kernel 100 registers: 16 resident warps per SM, 128 loads in
// flight per SM. Not yet tuned on a GPU.
constexpr int kBatch = 4;
// Warps to aim for when there are few tokens (a token then gets several warps): about four
// waves of 132 SMs x 16 warps. Not yet tuned on a GPU.
constexpr int64_t kTargetWarps = 8192;

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
template <typename T>
__device__ __forceinline__ V<T> load_at(const T* row, int e) {
  return load16(reinterpret_cast<const typename Pair<T>::type*>(row + e));
}
template <typename T>
__device__ __forceinline__ void store_at(T* row, int e, const V<T>& x) {
  store16(reinterpret_cast<typename Pair<T>::type*>(row + e), x);
}

// q/q_rope and k/k_rope may be the same memory: no __restrict__ on them. Every element is
// read and then written by the same thread, so in place is safe.
template <typename T, bool kInterleave, typename TPos>
__global__ void __launch_bounds__(kThreads) rope_kernel(const RopeParams<T> p, const RopeLayout l) {
  static_assert(sizeof(T) == 2 && 2 * kVec16<T> == kUnitElems, "fp16/bf16: a unit is two 16-byte vectors");
  SGL_PDL_WAIT();
  const int lane = static_cast<int>(threadIdx.x) % kWarpSize;
  const int64_t warp = static_cast<int64_t>(blockIdx.x) * kWarps + static_cast<int>(threadIdx.x) / kWarpSize;
  const int64_t token = warp / l.chunks;
  const int chunk = static_cast<int>(warp - token * l.chunks);
  const int u = lane % l.units;
  const int slot = lane / l.units;
  if (token >= p.nnz || slot >= l.slots) return;

  // API.md 1.4: a position outside the cache skips the token (nothing written).
  const int64_t pos = static_cast<int64_t>(static_cast<const TPos*>(p.pos_ids)[token]);
  if (pos < 0 || pos >= p.max_pos) return;

  const bool rot = u < l.rot_units;
  const int rot_half = p.rotary_dim / 2;
  float c[8], s[8];
  if (rot) {
    const float* row = p.cos_sin_cache + pos * p.rotary_dim + 8 * u;  // [R/2 cos | R/2 sin]
    const Vec<float, 4> c0 = load_vec<Vec<float, 4>>(row);
    const Vec<float, 4> c1 = load_vec<Vec<float, 4>>(row + 4);
    const Vec<float, 4> s0 = load_vec<Vec<float, 4>>(row + rot_half);
    const Vec<float, 4> s1 = load_vec<Vec<float, 4>>(row + rot_half + 4);
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      c[e] = c0[e];
      c[e + 4] = c1[e];
      s[e] = s0[e];
      s[e + 4] = s1[e];
    }
  } else {
#pragma unroll
    for (int e = 0; e < 8; ++e) c[e] = s[e] = 0.f;
  }

  // The fused KV write; a cache location outside a buffer skips that buffer's row.
  bool write_kb = false, write_vb = false;
  int64_t loc = 0;
  if (p.v != nullptr) {
    loc = p.kv_cache_loc[token];
    write_kb = loc >= 0 && loc < p.k_buffer_rows;
    write_vb = loc >= 0 && loc < p.v_buffer_rows;
  }

  // Element offsets of x0 and x1 inside a head.
  const int off0 = (rot && !kInterleave) ? 8 * u : kUnitElems * u;
  const int off1 = (rot && !kInterleave) ? rot_half + 8 * u : kUnitElems * u + 8;
  const int hq = p.num_q_heads;
  const int hqk = hq + p.num_k_heads;
  const int first_step = chunk * l.steps;

  for (int i0 = 0; i0 < l.steps; i0 += kBatch) {
    V<T> x0[kBatch], x1[kBatch];
    bool active[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int h = (first_step + i0 + b) * l.slots + slot;
      const T* src = nullptr;
      if (i0 + b < l.steps && h < l.total_heads) {
        if (h < hq) {
          if (rot || l.q_pass) src = p.q + token * p.q_stride_n + h * p.q_stride_h;
        } else if (h < hqk) {
          if (rot || l.k_pass || write_kb) src = p.k + token * p.k_stride_n + (h - hq) * p.k_stride_h;
        } else if (write_vb) {
          src = p.v + token * p.v_stride_n + (h - hqk) * p.v_stride_h;
        }
      }
      active[b] = src != nullptr;
      if (active[b]) {
        x0[b] = load_at(src, off0);
        x1[b] = load_at(src, off1);
      }
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      if (!active[b]) continue;
      const int h = (first_step + i0 + b) * l.slots + slot;
      if (h < hqk && rot) {
        if constexpr (kInterleave) {
          rotate_pairs<T>(x0[b], c, s, 0);
          rotate_pairs<T>(x1[b], c, s, 4);
        } else {
          rotate_halves<T>(x0[b], x1[b], c, s);
        }
      }
      if (h < hq) {
        T* dst = p.q_rope + token * p.q_rope_stride_n + h * p.q_rope_stride_h;
        store_at(dst, off0, x0[b]);
        store_at(dst, off1, x1[b]);
      } else if (h < hqk) {
        const int kh = h - hq;
        if (rot || l.k_pass) {
          T* dst = p.k_rope + token * p.k_rope_stride_n + kh * p.k_rope_stride_h;
          store_at(dst, off0, x0[b]);
          store_at(dst, off1, x1[b]);
        }
        if (write_kb) {
          T* dst = p.k_buffer + loc * p.k_buffer_stride_n + kh * p.k_buffer_stride_h;
          store_at(dst, off0, x0[b]);
          store_at(dst, off1, x1[b]);
        }
      } else {
        T* dst = p.v_buffer + loc * p.v_buffer_stride_n + (h - hqk) * p.v_buffer_stride_h;
        store_at(dst, off0, x0[b]);
        store_at(dst, off1, x1[b]);
      }
    }
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

template <typename T, bool kInterleave, typename TPos>
cudaError_t launch_typed(const RopeParams<T>& p, const RopeLayout& l, uint32_t blocks, cudaStream_t stream) {
  return launch_kernel(rope_kernel<T, kInterleave, TPos>, dim3(blocks), dim3(kThreads), 0, stream, p.enable_pdl,
                       p, l);
}

}  // namespace

template <typename T>
cudaError_t launch_rope(const RopeParams<T>& p, cudaStream_t stream) {
  const int d = p.head_size, r = p.rotary_dim;
  if (d % kUnitElems != 0 || d < kUnitElems || d > kWarpSize * kUnitElems || r % kUnitElems != 0 ||
      r < kUnitElems || r > d || p.nnz < 0) {
    return cudaErrorInvalidValue;
  }
  const bool fused = p.v != nullptr;
  RopeLayout l{};
  // In place (the wrapper's call): the pass units of q and k are left alone.
  l.q_pass = !(p.q_rope == p.q && p.q_rope_stride_n == p.q_stride_n && p.q_rope_stride_h == p.q_stride_h);
  l.k_pass = !(p.k_rope == p.k && p.k_rope_stride_n == p.k_stride_n && p.k_rope_stride_h == p.k_stride_h);
  l.rot_units = r / kUnitElems;
  l.units = (l.q_pass || l.k_pass || fused) ? d / kUnitElems : l.rot_units;
  l.slots = kWarpSize / l.units;
  l.total_heads = p.num_q_heads + p.num_k_heads + (fused ? p.num_v_heads : 0);
  if (p.nnz == 0 || l.total_heads == 0) return cudaSuccess;
  const int all_steps = ceil_div(l.total_heads, l.slots);
  // Warps per token: one (every head, cos/sin loaded once) when there are enough tokens to
  // fill the GPU, else enough to reach kTargetWarps warps.
  const int64_t want = std::clamp<int64_t>(ceil_div<int64_t>(kTargetWarps, p.nnz), 1, all_steps);
  l.steps = ceil_div(all_steps, static_cast<int>(want));
  l.chunks = ceil_div(all_steps, l.steps);
  const int64_t blocks = ceil_div<int64_t>(p.nnz * l.chunks, kWarps);
  if (blocks > int64_t{0x7fffffff}) return cudaErrorInvalidConfiguration;
  const auto grid = static_cast<uint32_t>(blocks);
  if (p.interleave) {
    return p.pos_ids_int64 ? launch_typed<T, true, int64_t>(p, l, grid, stream)
                           : launch_typed<T, true, int32_t>(p, l, grid, stream);
  }
  return p.pos_ids_int64 ? launch_typed<T, false, int64_t>(p, l, grid, stream)
                         : launch_typed<T, false, int32_t>(p, l, grid, stream);
}

template cudaError_t launch_rope<half>(const RopeParams<half>&, cudaStream_t);
template cudaError_t launch_rope<__nv_bfloat16>(const RopeParams<__nv_bfloat16>&, cudaStream_t);

}  // namespace sgl_kernel::elementwise
