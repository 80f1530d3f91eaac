// SPDX-License-Identifier: Apache-2.0
// sgl_per_token_group_quant_8bit (v1 and v2): per-token-group 8-bit quantization, optionally
// fused with silu_and_mul and with the masked (expert-parallel MoE) 3-D input.
//
// The masked input (with or without the fused SiLU) takes group_quant_masked_kernel below.
// Other calls without the fused SiLU go to norm_quant.cu (launch_row_group_quant) where its
// kernels apply: the row kernel above 256 rows, its decode kernel at <= 256 rows (g=128, fp8
// without a clamp, fp32 scales in either layout or packed UE8M0 scales) or its tile kernel at
// some of those rows (kGroupTileRows); the flat kernel below serves the rest.
//
// The input is one flat index space of 16-byte vectors; a group (group_size elements) is
// kVpg consecutive vectors, held by kVpg consecutive lanes of one warp, so its maximum is a
// few shuffles and no group straddles a warp or a row (hidden % group_size == 0). Each
// thread issues the loads of kUnroll vectors before it uses any.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "elementwise/activation.cuh"
#include "quantization/quant.cuh"
#include "quantization/quantization.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/runtime.h"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::quantization {

namespace {

constexpr int kThreads = 256;

// The masked kernel (group_quant_masked_kernel): up to kMaskedMaxExperts experts (a grid row
// each); kMaskedWaves times the blocks the GPU holds at once, shared out over the experts.
constexpr int64_t kMaskedMaxExperts = 65535;
constexpr int kMaskedWaves = 2;

// A thread's kUnroll vectors, shared by the flat kernel and the masked one below: a, b (b: the
// SiLU gate halves' partners); active[u]: vector u is inside the work (a group is wholly active
// or wholly inactive; every lane takes part in the shuffles); out_vec[u]: its index among the
// output's 16-byte vectors (< 2^32: the launchers' limit); row[u], col[u]: its row (in the
// kernel's numbering) and its index within the row.
template <typename T, int kUnroll, bool kSilu>
struct Loaded {
  Vec16<T> a[kUnroll];
  Vec16<T> b[kSilu ? kUnroll : 1];
  bool active[kUnroll];
  uint32_t row[kUnroll], col[kUnroll], out_vec[kUnroll];

  // Vector u is vector i of `total` (split into row and column by vec_per_row), output vector out.
  __device__ __forceinline__ void place(int u, uint32_t i, uint32_t total, const FastDivmod& vec_per_row,
                                        uint32_t out) {
    vec_per_row.divmod(i, row[u], col[u]);
    active[u] = i < total;
    out_vec[u] = out;
  }

  // Loads vector u: plain, input vector out_vec[u]; with the fused SiLU, vector col[u] of input
  // row `input_row`'s gate half into a and its partner in the up half into b (rows of 2 * hidden).
  template <LoadPolicy kLoad>
  __device__ __forceinline__ void load(const GroupQuantParams<T>& p, int u, int64_t input_row) {
    constexpr int kVec = kVec16<T>;
    if constexpr (kSilu) {
      const T* x = p.input + input_row * 2 * p.hidden + static_cast<int64_t>(col[u]) * kVec;
      a[u] = load16<T, kLoad>(x);
      b[u] = load16<T, kLoad>(x + p.hidden);
    } else {
      a[u] = load16<T, kLoad>(p.input + static_cast<int64_t>(out_vec[u]) * kVec);
    }
  }
};

// The steps after the loads, in phases over all u (values and maxima, shuffles, scales,
// stores), so that the latency chains of the kUnroll vectors overlap (see row_quant.cu). at(u,
// e, t): the expert and token of vector u's row (the scale's coordinates).
template <typename T, QuantCode kCode, int kVpg, int kUnroll, bool kSilu, typename At>
__device__ __forceinline__ void quantize_loaded(const GroupQuantParams<T>& p, const Loaded<T, kUnroll, kSilu>& v,
                                                At at) {
  constexpr int kVec = kVec16<T>;
  const auto& a = v.a;
  const auto& b = v.b;
  const auto& active = v.active;
  const auto& out_vec = v.out_vec;
  const auto& col = v.col;
  auto value = [&](int u, int e) {
    if constexpr (kSilu) {
      // Rounded to T exactly as silu_and_mul stores it.
      return to_float(from_float<T>(elementwise::activate<elementwise::Activation::kSilu>(to_float(a[u][e])) *
                                    to_float(b[u][kSilu ? e : 0])));
    } else {
      return to_float(a[u][e]);
    }
  };
  float y[kUnroll][kVec];
  uint32_t amax[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    amax[u] = 0;
#pragma unroll
    for (int e = 0; e < kVec; ++e) {
      y[u][e] = value(u, e);
      amax[u] = max(amax[u], abs_bits(y[u][e]));
    }
    if (!active[u]) amax[u] = 0;
  }
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) amax[u] = group_max_bits<kVpg>(amax[u]);
  float scale[kUnroll], inv[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    scale[u] = scale_from_amax(amax[u], p.eps, p.qmax);
    inv[u] = inverse_scale(codes_scale(p.scales, scale[u]));
  }
  const bool clamp = needs_clamp<kCode>(p.qmin, p.qmax);
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    if (active[u]) {
      const Vec<uint8_t, kVec> q = to_codes<kCode>(y[u], inv[u], p.qmin, p.qmax, clamp);
      uint8_t* out = static_cast<uint8_t*>(p.output_q) + static_cast<int64_t>(out_vec[u]) * kVec;
      *reinterpret_cast<Vec<uint8_t, kVec>*>(out) = q;
    }
  }
  // Packed UE8M0 with whole words per row (groups % 4 == 0) and two groups a warp: the warp's
  // groups are 2j and 2j + 1 of one row (warps start at multiples of 32 vectors, rows at
  // multiples of 16 * groups), one half of a word, stored with one 16-bit store instead of two
  // byte stores (rmsnorm_q_ue8m0 T=128 H=7168 paid 0.5 us for byte stores: norm_quant.cu).
  if (kVpg == 16 && p.scales.packed_ue8m0 && p.scales.groups % 4 == 0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t exp = __float_as_uint(ue8m0_ceil(scale[u])) >> 23 & 0xffu;
      const uint32_t upper = __shfl_down_sync(0xffffffffu, exp, 16);
      if ((threadIdx.x & 31) == 0 && active[u]) {
        uint32_t e, t;
        at(u, e, t);
        const uint32_t g = col[u] / kVpg;  // even
        int32_t* word = static_cast<int32_t*>(p.scales.ptr) + e * p.scales.stride_e + t * p.scales.stride_m +
                        (g >> 2) * p.scales.stride_g;
        reinterpret_cast<uint16_t*>(word)[(g >> 1) & 1] = static_cast<uint16_t>(exp | upper << 8);
      }
    }
  } else if ((threadIdx.x & 31) % kVpg == 0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (active[u]) {
        uint32_t e, t;
        at(u, e, t);
        store_scale(p.scales, e, t, col[u] / kVpg, scale[u]);
      }
    }
  }
}

// kPin (one vector a thread, plain loads): the thread's first input address is formed before
// the PDL wait and prefetched (pdl_wait_prefetched, sgl_kernel/arch.cuh), so the parameter
// loads and the index arithmetic are done when the wait returns.
template <typename T, QuantCode kCode, int kVpg, int kUnroll, bool kSilu, bool kMasked, LoadPolicy kLoad,
          bool kPin = false>
__global__ void __launch_bounds__(kThreads)
    group_quant_kernel(const GroupQuantParams<T> p,
                       const FastDivmod vec_per_row,   // hidden / kVec
                       const FastDivmod tokens,        // tokens_per_expert (masked)
                       const uint32_t total_vec) {     // rows * hidden / kVec
  constexpr int kVec = kVec16<T>;
  static_assert(!kPin || (kUnroll == 1 && kLoad == LoadPolicy::kDefault), "read-only loads may cross the wait");
  const uint32_t base = blockIdx.x * (kThreads * kUnroll) + threadIdx.x;
  const int64_t hidden = p.hidden;
  if constexpr (kPin) {
    uint32_t row, col;
    vec_per_row.divmod(base, row, col);
    const int64_t first = kSilu ? static_cast<int64_t>(row) * 2 * hidden + static_cast<int64_t>(col) * kVec
                                : static_cast<int64_t>(base) * kVec;
    pdl_wait_prefetched(base < total_vec ? p.input + first : p.input);
  } else {
    SGL_PDL_WAIT();
  }
  SGL_PDL_LAUNCH_DEPENDENTS();  // early: see sgl_kernel/arch.cuh

  Loaded<T, kUnroll, kSilu> v;
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint32_t i = base + u * kThreads;
    v.place(u, i, total_vec, vec_per_row, i);
    if constexpr (kMasked) {
      if (v.active[u]) {
        uint32_t e, t;
        tokens.divmod(v.row[u], e, t);
        v.active[u] = static_cast<int32_t>(t) < p.masked_m[e];
      }
    }
    if (v.active[u]) v.template load<kLoad>(p, u, v.row[u]);
  }
  quantize_loaded<T, kCode, kVpg, kUnroll, kSilu>(p, v, [&](int u, uint32_t& e, uint32_t& t) {
    e = 0;
    t = v.row[u];
    if constexpr (kMasked) tokens.divmod(v.row[u], e, t);
  });
}

// The masked 3-D input ([E, T, H], token t of expert e processed only when t < masked_m[e]):
// a block row per expert (blockIdx.y), whose gridDim.x blocks step through that expert's first
// min(masked_m[e], T) rows in chunks of kThreads * kUnroll vectors. The flat kernel below
// launches a block for every chunk of all E * T rows and leaves the unused ones idle: in an
// expert-parallel decode step (DeepEP's low-latency layout, T the room for every rank's tokens
// and a few of them used) nearly all of its blocks do nothing. The block's first vector (inside
// the tensor whatever masked_m says) is prefetched before the PDL wait.
// NOTE (session 35, H200, bf16 g=128, column-major fp32 scales, a torch process, us; the
// masked kernel at 1 / 2 / 4 times the resident blocks shared over the experts, kUnroll 1 / 2,
// against the flat kernel (SiLU) or the row kernel (plain, more than 256 rows):
//   SiLU E=32 T=1024 H=2048, at most 32 / 128 rows used: 61.03 / 61.56 -> w2 u1 4.16 / 7.53
//        (w1 u1 3.42 / 8.34, w2 u2 5.10 / 8.03); E=8 T=4096 H=2048, the bench's dense counts
//        73.70 -> 53.53 (w4 u1 51.00); E=4 T=64 1.92 -> 1.97
//   plain E=32 T=1024 H=7168, at most 32 / 128: 22.80 / 28.31 -> w2 u2 5.39 / 12.30 (w2 u1 5.31
//        / 13.25, w4 u2 6.92 / 12.23); the bench's dense counts E=8 T=256 / E=8 T=4096 / E=32
//        T=1024: 7.29 / 87.56 / 91.74 -> 7.89 / 87.39 / 100.77 (w4 u2 8.43 / 85.93 / 91.05);
//        E=8 T=16 2.14 (flat kernel) -> u1 1.85
// A grid balanced over the used rows instead (every block scanning masked_m for the running
// count of chunks, then taking every gridDim.x-th chunk of all experts) read 0.7-0.8 us slower
// at decode sizes (E=8 T=16 2.61-2.76) and no faster on the dense counts (94.1 at E=32 T=1024).
template <typename T, QuantCode kCode, int kVpg, int kUnroll, bool kSilu>
__global__ void __launch_bounds__(kThreads)
    group_quant_masked_kernel(const GroupQuantParams<T> p, const FastDivmod vec_per_row) {
  constexpr int kVec = kVec16<T>;
  constexpr uint32_t kChunk = kThreads * kUnroll;
  const uint32_t e = blockIdx.y, vpr = vec_per_row.divisor;
  const int64_t hidden = p.hidden;
  const int64_t first_row = static_cast<int64_t>(e) * p.tokens_per_expert;
  {
    uint32_t t0, c0;
    vec_per_row.divmod(blockIdx.x * kChunk + threadIdx.x, t0, c0);
    const int64_t row0 = first_row + min(static_cast<int64_t>(t0), p.tokens_per_expert - 1);
    pdl_wait_prefetched(p.input + row0 * (kSilu ? 2 : 1) * hidden + static_cast<int64_t>(c0) * kVec);
  }
  SGL_PDL_LAUNCH_DEPENDENTS();  // early: see sgl_kernel/arch.cuh
  const int32_t m = p.masked_m[e];
  const uint32_t rows_e = static_cast<uint32_t>(min(max(m, 0), static_cast<int32_t>(p.tokens_per_expert)));
  const uint32_t total = rows_e * vpr;  // < 2^32: at most the flat kernel's total_vec
  for (uint32_t start = blockIdx.x * kChunk; start < total; start += gridDim.x * kChunk) {
    Loaded<T, kUnroll, kSilu> v;  // (rows: the expert's tokens)
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const uint32_t i = start + u * kThreads + threadIdx.x;
      v.place(u, i, total, vec_per_row, static_cast<uint32_t>(first_row) * vpr + i);  // < total_vec
      if (v.active[u]) v.template load<LoadPolicy::kDefault>(p, u, first_row + v.row[u]);
    }
    quantize_loaded<T, kCode, kVpg, kUnroll, kSilu>(p, v, [&](int u, uint32_t& ex, uint32_t& t) {
      ex = e;
      t = v.row[u];
    });
  }
}

template <typename T, QuantCode kCode, int kVpg, bool kSilu, bool kMasked, int kUnroll, LoadPolicy kLoad,
          bool kPin = false>
cudaError_t launch_unroll(const GroupQuantParams<T>& p, uint32_t total_vec, const FastDivmod& vec_per_row,
                          const FastDivmod& tokens, cudaStream_t stream) {
  const dim3 grid(ceil_div<uint32_t>(total_vec, kThreads * kUnroll));
  return launch_kernel(group_quant_kernel<T, kCode, kVpg, kUnroll, kSilu, kMasked, kLoad, kPin>, grid,
                       dim3(kThreads), 0, stream, p.enable_pdl, p, vec_per_row, tokens, total_vec);
}

// The masked kernel's launch: gridDim.x = blocks_per_expert (<= 0: kMaskedWaves times the
// blocks the GPU holds at once, shared out over the experts; at most the chunks of T rows),
// gridDim.y = the experts (cudaErrorNotSupported past kMaskedMaxExperts).
template <typename T, QuantCode kCode, int kVpg, bool kSilu, int kUnroll>
cudaError_t launch_masked(const GroupQuantParams<T>& p, int64_t blocks_per_expert, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  const int64_t experts = p.rows / p.tokens_per_expert;
  if (experts > kMaskedMaxExperts) return cudaErrorNotSupported;
  const uint32_t vpr = static_cast<uint32_t>(p.hidden / kVec);
  const int64_t chunks = ceil_div<int64_t>(p.tokens_per_expert * vpr, kThreads * kUnroll);
  if (blocks_per_expert <= 0) {
    int device = 0;
    SGL_CUDA_TRY(cudaGetDevice(&device));
    const int64_t resident = int64_t{device_sm_count(device)} * (2048 / kThreads);
    blocks_per_expert = ceil_div<int64_t>(kMaskedWaves * resident, experts);
  }
  const dim3 grid(static_cast<uint32_t>(std::min(chunks, blocks_per_expert)), static_cast<uint32_t>(experts));
  return launch_kernel(group_quant_masked_kernel<T, kCode, kVpg, kUnroll, kSilu>, grid, dim3(kThreads), 0, stream,
                       p.enable_pdl, p, FastDivmod(vpr));
}

template <typename T, QuantCode kCode, int kVpg, bool kSilu, bool kMasked>
cudaError_t launch_shape(const GroupQuantParams<T>& p, uint32_t total_vec, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  const FastDivmod vec_per_row(static_cast<uint32_t>(p.hidden / kVec));
  const FastDivmod tokens(static_cast<uint32_t>(kMasked ? p.tokens_per_expert : 1));
  if constexpr (kMasked) {
    const cudaError_t err = !kSilu && total_vec >= 132u * kThreads * 4
                                ? launch_masked<T, kCode, kVpg, kSilu, 2>(p, 0, stream)
                                : launch_masked<T, kCode, kVpg, kSilu, 1>(p, 0, stream);
    if (err != cudaErrorNotSupported) return err;
  }
  // NOTE (H200, bf16 g=128 fp8, T=32768): 2 vectors per thread with plain loads 3677 GB/s
  // (H=4096) and 4044 with the fused SiLU; 4 with ld.global.nc 3711 but 3234 with SiLU; 4 plain
  // 3463. Decode-sized inputs use one vector per thread, to spread over more SMs.
  if (total_vec >= 132u * kThreads * 4) {
    return launch_unroll<T, kCode, kVpg, kSilu, kMasked, 2, LoadPolicy::kDefault>(p, total_vec, vec_per_row, tokens,
                                                                                stream);
  }
  return launch_unroll<T, kCode, kVpg, kSilu, kMasked, 1, LoadPolicy::kDefault, true>(p, total_vec, vec_per_row,
                                                                                    tokens, stream);
}

template <typename T, QuantCode kCode, int kVpg>
cudaError_t launch_mode(const GroupQuantParams<T>& p, uint32_t total_vec, cudaStream_t stream) {
  const bool masked = p.masked_m != nullptr;
  if constexpr (sizeof(T) == 2) {
    if (p.fuse_silu_and_mul) {
      return masked ? launch_shape<T, kCode, kVpg, true, true>(p, total_vec, stream)
                    : launch_shape<T, kCode, kVpg, true, false>(p, total_vec, stream);
    }
  } else {
    if (p.fuse_silu_and_mul) return cudaErrorInvalidValue;
  }
  return masked ? launch_shape<T, kCode, kVpg, false, true>(p, total_vec, stream)
                : launch_shape<T, kCode, kVpg, false, false>(p, total_vec, stream);
}

template <typename T, QuantCode kCode>
cudaError_t launch_code(const GroupQuantParams<T>& p, uint32_t total_vec, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  switch (p.group_size / kVec) {
    case 2:
      if constexpr (kVec == 8) return launch_mode<T, kCode, 2>(p, total_vec, stream);
      break;
    case 4:
      return launch_mode<T, kCode, 4>(p, total_vec, stream);
    case 8:
      return launch_mode<T, kCode, 8>(p, total_vec, stream);
    case 16:
      return launch_mode<T, kCode, 16>(p, total_vec, stream);
    case 32:
      if constexpr (kVec == 4) return launch_mode<T, kCode, 32>(p, total_vec, stream);
      break;
    default:
      break;
  }
  return cudaErrorInvalidValue;
}

}  // namespace

template <typename T>
cudaError_t launch_group_quant(QuantCode code, const GroupQuantParams<T>& p, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  if (p.rows == 0 || p.hidden == 0) return cudaSuccess;
  if (p.group_size % kVec != 0 || p.hidden % p.group_size != 0) return cudaErrorInvalidValue;
  if (!is_aligned16(p.input) || !is_aligned16(p.output_q)) return cudaErrorInvalidValue;
  const int64_t total = p.rows * (p.hidden / kVec);
  if (total > int64_t{0xffffffff} - 4 * kThreads) return cudaErrorInvalidValue;
  const uint32_t total_vec = static_cast<uint32_t>(total);
  // The masked input (up to kMaskedMaxExperts experts): the masked kernel, with or without the
  // fused SiLU.
  const bool masked_kernel = p.masked_m != nullptr && p.rows / p.tokens_per_expert <= kMaskedMaxExperts;
  if (!p.fuse_silu_and_mul && !masked_kernel) {
    // Many rows: the row kernel (norm_quant.cu) holds a row per thread group and forms one
    // scale per lane instead of one per vector; masked-out rows leave at once. Decode sizes:
    // its decode kernel (one redux.sync per group maximum, compile-time layout).
    RowQuantParams<T> rp{};
    rp.input = p.input;
    rp.output_q = p.output_q;
    rp.scales = p.scales;
    rp.rows = p.rows;
    rp.hidden = p.hidden;
    rp.input_stride = p.hidden;
    rp.masked_m = p.masked_m;
    rp.tokens_per_expert = p.tokens_per_expert;
    rp.group_size = p.group_size;
    rp.eps = p.eps;
    rp.qmin = p.qmin;
    rp.qmax = p.qmax;
    rp.enable_pdl = p.enable_pdl;
    const cudaError_t err = launch_row_group_quant<T>(code, rp, stream);
    if (err != cudaErrorNotSupported) return err;
  }
  switch (code) {
    case QuantCode::kFp8:
      return launch_code<T, QuantCode::kFp8>(p, total_vec, stream);
    case QuantCode::kInt8Trunc:
      return launch_code<T, QuantCode::kInt8Trunc>(p, total_vec, stream);
    default:
      return cudaErrorInvalidValue;
  }
}

template cudaError_t launch_group_quant<float>(QuantCode, const GroupQuantParams<float>&, cudaStream_t);
template cudaError_t launch_group_quant<half>(QuantCode, const GroupQuantParams<half>&, cudaStream_t);
template cudaError_t launch_group_quant<__nv_bfloat16>(QuantCode, const GroupQuantParams<__nv_bfloat16>&,
                                                       cudaStream_t);

}  // namespace sgl_kernel::quantization
