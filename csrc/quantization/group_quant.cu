// SPDX-License-Identifier: Apache-2.0
// sgl_per_token_group_quant_8bit (v1 and v2): per-token-group 8-bit quantization, optionally
// fused with silu_and_mul and with the masked (expert-parallel MoE) 3-D input.
//
// Calls without the fused SiLU go to norm_quant.cu (launch_row_group_quant) where its kernels
// apply: the row kernel above 256 rows (plain or masked), its decode kernel at <= 256 plain
// rows (g=128, fp8 without a clamp, fp32 scales in either layout or packed UE8M0 scales); the
// kernel below serves the rest.
//
// The input is one flat index space of 16-byte vectors; a group (group_size elements) is
// kVpg consecutive vectors, held by kVpg consecutive lanes of one warp, so its maximum is a
// few shuffles and no group straddles a warp or a row (hidden % group_size == 0). Each
// thread issues the loads of kUnroll vectors before it uses any.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "elementwise/activation.cuh"
#include "quantization/quant.cuh"
#include "quantization/quantization.h"
#include "sgl_kernel/arch.cuh"
#include "sgl_kernel/fastdiv.cuh"
#include "sgl_kernel/launch.cuh"
#include "sgl_kernel/types.cuh"
#include "sgl_kernel/vec.cuh"

namespace sgl_kernel::quantization {

namespace {

constexpr int kThreads = 256;

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

  Vec16<T> a[kUnroll];
  Vec16<T> b[kSilu ? kUnroll : 1];
  bool active[kUnroll];
  uint32_t rows[kUnroll], cols[kUnroll];
#pragma unroll
  for (int u = 0; u < kUnroll; ++u) {
    const uint32_t i = base + u * kThreads;
    vec_per_row.divmod(i, rows[u], cols[u]);
    active[u] = i < total_vec;
    if constexpr (kMasked) {
      if (active[u]) {
        uint32_t e, t;
        tokens.divmod(rows[u], e, t);
        active[u] = static_cast<int32_t>(t) < p.masked_m[e];
      }
    }
    if (active[u]) {
      if constexpr (kSilu) {
        const T* x = p.input + static_cast<int64_t>(rows[u]) * 2 * hidden + static_cast<int64_t>(cols[u]) * kVec;
        a[u] = load16<T, kLoad>(x);
        b[u] = load16<T, kLoad>(x + hidden);
      } else {
        a[u] = load16<T, kLoad>(p.input + static_cast<int64_t>(i) * kVec);
      }
    }
  }

  // In phases over all u (values and maxima, shuffles, scales, stores), so that the latency
  // chains of the kUnroll vectors overlap (see row_quant.cu).
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
    // Every lane takes part in the shuffles; a group is wholly active or wholly inactive.
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
      const uint32_t i = base + u * kThreads;
      const Vec<uint8_t, kVec> q = to_codes<kCode>(y[u], inv[u], p.qmin, p.qmax, clamp);
      *reinterpret_cast<Vec<uint8_t, kVec>*>(static_cast<uint8_t*>(p.output_q) + static_cast<int64_t>(i) * kVec) = q;
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
        uint32_t e = 0, t = rows[u];
        if constexpr (kMasked) tokens.divmod(rows[u], e, t);
        const uint32_t g = cols[u] / kVpg;  // even
        int32_t* word = static_cast<int32_t*>(p.scales.ptr) + e * p.scales.stride_e + t * p.scales.stride_m +
                        (g >> 2) * p.scales.stride_g;
        reinterpret_cast<uint16_t*>(word)[(g >> 1) & 1] = static_cast<uint16_t>(exp | upper << 8);
      }
    }
  } else if ((threadIdx.x & 31) % kVpg == 0) {
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      if (active[u]) {
        uint32_t e = 0, t = rows[u];
        if constexpr (kMasked) tokens.divmod(rows[u], e, t);
        store_scale(p.scales, e, t, cols[u] / kVpg, scale[u]);
      }
    }
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

template <typename T, QuantCode kCode, int kVpg, bool kSilu, bool kMasked>
cudaError_t launch_shape(const GroupQuantParams<T>& p, uint32_t total_vec, cudaStream_t stream) {
  constexpr int kVec = kVec16<T>;
  const FastDivmod vec_per_row(static_cast<uint32_t>(p.hidden / kVec));
  const FastDivmod tokens(static_cast<uint32_t>(kMasked ? p.tokens_per_expert : 1));
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
  if (!p.fuse_silu_and_mul) {
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
