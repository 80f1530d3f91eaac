// SPDX-License-Identifier: Apache-2.0
// Launchers of the quantization family (torch-free seam between kernels and bindings).
//
// Every op computes, per token or per group of a token, amax = max(eps, max|x|) in fp32,
// scale = amax / qmax, optionally scale -> the smallest power of two >= scale (UE8M0), and
// codes q = clamp(x * (1 / scale), qmin, qmax) converted to e4m3 (round to nearest even,
// saturating) or int8 (truncation, or round half to even for the per-token int8 op). A scale
// of 0 gives codes 0. NaN propagates: a NaN in a group makes its scale NaN and its codes NaN
// (e4m3) or 0 (int8).
#pragma once

#include <cstdint>

#include <cuda_runtime.h>

namespace sgl_kernel::quantization {

// The code type and its rounding.
enum class QuantCode {
  kFp8,            // e4m3, round to nearest even, saturating to the clamp range
  kInt8Trunc,      // int8, truncation toward zero (group ops)
  kInt8RoundEven,  // int8, round half to even (sgl_per_token_quant_int8)
};

// Where the scale of (expert e, token m, group g) goes. fp32 layouts: element
// e * stride_e + m * stride_m + g * stride_g of a float array. Packed UE8M0: byte g % 4 of
// int32 element e * stride_e + m * stride_m + (g / 4) * stride_g, holding the biased exponent
// of the power-of-two scale; the unused trailing bytes of a token's last int32 are written 0.
struct ScaleOut {
  void* ptr;
  int64_t stride_e, stride_m, stride_g;  // in 4-byte elements
  int64_t groups;                        // G = hidden / group_size
  bool packed_ue8m0;                     // int32 words of four UE8M0 bytes
  bool round_ue8m0;                      // store the power-of-two scale
  bool codes_use_rounded;                // codes use the rounded scale (else the exact one)
};

// Per-token-group quantization of a contiguous [rows, hidden] input (or [rows, 2 * hidden]
// with fuse_silu_and_mul: x = silu(a) * b rounded to T, as silu_and_mul). Masked: rows are
// experts * tokens_per_expert; only token t < masked_m[e] of expert e is processed.
template <typename T>
struct GroupQuantParams {
  const T* input;          // [rows, hidden] or [rows, 2 * hidden]; 16-byte aligned
  void* output_q;          // [rows, hidden], int8 or e4m3; 16-byte aligned
  ScaleOut scales;
  const int32_t* masked_m;  // [experts] or nullptr
  int64_t rows;
  int64_t tokens_per_expert;  // masked: T of [E, T, K]; else rows
  int64_t hidden;
  int group_size;  // 16, 32, 64, 128 (<= 32 vectors of 16 bytes)
  float eps, qmin, qmax;
  bool fuse_silu_and_mul;
  bool enable_pdl;
};

// T: float (not with fuse_silu_and_mul), half, __nv_bfloat16. code: kFp8 or kInt8Trunc.
template <typename T>
cudaError_t launch_group_quant(QuantCode code, const GroupQuantParams<T>& params, cudaStream_t stream);

// Row-wise quantization. launch_row_quant: one scale per row (the per-token ops; group_size
// = 0, no eps floor, scales[m] at stride_m, weight and residual unused). launch_norm_quant:
// RMSNorm, then one scale per group of the normalised row (fused_rmsnorm_quant: y = x *
// rsqrt(mean(x^2) + rms_eps) * w in fp32, not rounded), with the residual add first
// (fused_add_rmsnorm_quant: residual <- residual + input, rounded to T, is what gets
// normalised).
template <typename T>
struct RowQuantParams {
  const T* input;     // [rows, hidden], row stride input_stride, last dim contiguous
  T* residual;        // [rows, hidden], row stride residual_stride; nullptr unless fused add
  const T* weight;    // [hidden] (norm ops)
  void* output_q;     // [rows, hidden] contiguous, int8 or e4m3
  ScaleOut scales;
  int64_t rows, hidden, input_stride, residual_stride;
  // launch_row_group_quant only (else nullptr / 0): the masked 3-D input, rows = experts *
  // tokens_per_expert, row t of expert e processed only when t < masked_m[e].
  const int32_t* masked_m;
  int64_t tokens_per_expert;
  int group_size;     // norm ops: a power of two 16..256 dividing hidden
  float rms_eps, eps, qmin, qmax;
  bool enable_pdl;
};

// T: float, half, __nv_bfloat16. launch_row_quant: code kFp8 or kInt8RoundEven;
// launch_norm_quant: kFp8 or kInt8Trunc. Returns cudaErrorInvalidValue for a configuration
// the bindings should have rejected.
template <typename T>
cudaError_t launch_row_quant(QuantCode code, const RowQuantParams<T>& params, cudaStream_t stream);
template <typename T>
cudaError_t launch_norm_quant(QuantCode code, const RowQuantParams<T>& params, cudaStream_t stream);

// Kernel-side only (launch_group_quant calls it): the plain (optionally masked) per-token-group
// quantization of contiguous rows on the kernels of launch_norm_quant, with weight and residual
// null: the row kernel above 256 rows, the decode kernel at <= 256 plain rows where it applies;
// cudaErrorNotSupported elsewhere (masked or int8 at <= 256 rows, unaligned rows, groups of
// more than 32 vectors, ...), and the caller falls back to its own kernel.
template <typename T>
cudaError_t launch_row_group_quant(QuantCode code, const RowQuantParams<T>& params, cudaStream_t stream);

// sgl_per_tensor_quant_fp8: with `dynamic`, scale[0] <- max(scale[0], max|x| / 448) (a
// reduction kernel with atomics on the float's bits), then q = e4m3(clamp(x / scale[0])).
template <typename T>
struct TensorQuantParams {
  const T* input;   // [numel], contiguous
  uint8_t* output_q;  // [numel] e4m3
  float* scale;     // [1]
  int64_t numel;
  bool dynamic;
  bool enable_pdl;
};

template <typename T>
cudaError_t launch_per_tensor_quant(const TensorQuantParams<T>& params, cudaStream_t stream);

}  // namespace sgl_kernel::quantization
