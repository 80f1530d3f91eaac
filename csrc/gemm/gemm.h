// SPDX-License-Identifier: Apache-2.0
// Launchers of the GEMM family (torch-free seam between kernels and bindings).
//
// Layout convention of API.md 2.3: A is row-major [M, K] (lda elements between rows), B is
// column-major [K, N], i.e. a row-major weight W [N, K] (ldb elements between the rows of W),
// outputs are row-major [M, N] (ldd elements between rows).
#pragma once

#include <cstddef>
#include <cstdint>

#include <cuda_runtime.h>

namespace sgl_kernel::gemm {

enum class OutType { kBF16, kFP16 };

// ---------------------------------------------------------------------------------------
// fp8_scaled_mm / int8_scaled_mm (csrc/gemm/sm90/): out = (A @ B) * scales_a[m] * scales_b[n]
// (+ bias[n]); fp32 (fp8) or int32 (int8) accumulation, fp32 epilogue, one rounding.
struct ScaledMmParams {
  const void* a;         // e4m3 or int8 [M, K], row stride lda; 16-byte aligned, lda % 16 == 0
  const void* b;         // e4m3 or int8 W [N, K], row stride ldb; 16-byte aligned, ldb % 16 == 0
  const float* scales_a;  // [M]
  const float* scales_b;  // [N]
  const void* bias;       // [N] in the output type, or nullptr
  void* out;              // [M, N] row-major, row stride ldd (% 8 == 0); 16-byte aligned
  int64_t m, n, k;        // k % 16 == 0, n % 8 == 0
  int64_t lda, ldb, ldd;
  OutType out_type;
  int sm_count;           // multiprocessors of the device (for the split decisions)
  // Tuning only (0 / -1: the heuristic): a configuration name of scaled_mm_config_names()
  // and a split-K factor, from SGL_KERNEL_SCALED_MM_CONFIG / SGL_KERNEL_SCALED_MM_SPLITS.
  int config = -1;
  int splits = 0;
  int swizzle = 0;  // SGL_KERNEL_SCALED_MM_SWIZZLE: the persistent scheduler's max swizzle (1, 2, 4, 8)
  // Programmatic dependent launch (sm90: small_m, decode, swap A/B, and the CUTLASS kernels
  // whose grid leaves half the SMs free): they may start while the previous kernel in the
  // stream runs, and wait for it before any global read.
  bool enable_pdl = false;
};

// The configurations' names, "fp8_coop_128x256", ..., as one comma-separated string, and the
// index of `name` in it (-1: unknown). The index goes into ScaledMmParams::config.
const char* scaled_mm_config_names();
int scaled_mm_config_index(const char* name);

// Bytes of device workspace the launch with these parameters needs (0 for most shapes);
// the caller passes at least that many bytes, 16-byte aligned, to the launch.
size_t fp8_scaled_mm_workspace(const ScaledMmParams& p);
cudaError_t launch_fp8_scaled_mm_sm90(const ScaledMmParams& p, void* workspace, cudaStream_t stream);
size_t int8_scaled_mm_workspace(const ScaledMmParams& p);
cudaError_t launch_int8_scaled_mm_sm90(const ScaledMmParams& p, void* workspace, cudaStream_t stream);

// The same ops on GPUs without the sm90a kernels, CUTLASS 2.x mma.sync GEMMs with the same
// epilogue (csrc/gemm/scaled_mm_sm8x.cuh): fp8 on sm89+ (csrc/gemm/sm89/), int8 on sm80+
// (csrc/gemm/sm80/). No workspace; the tuning fields of ScaledMmParams are ignored.
cudaError_t launch_fp8_scaled_mm_sm89(const ScaledMmParams& p, cudaStream_t stream);
cudaError_t launch_int8_scaled_mm_sm80(const ScaledMmParams& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------
// fp8_blockwise_scaled_mm (csrc/gemm/sm90/): 1x128 activation blocks, 128x128 weight blocks.
//   out[m, n] = sum_kb (sum_{k in kb} A[m,k] B[k,n]) * scales_a[m, kb] * scales_b[kb, n / 128]
struct BlockwiseMmParams {
  const void* a;          // e4m3 [M, K], row stride lda
  const void* b;          // e4m3 W [N, K], row stride ldb
  const float* scales_a;  // element (m, kb) at scales_a[kb * sa_stride_k + m]  (M-major)
  const float* scales_b;  // element (kb, nb) at scales_b[nb * sb_stride_n + kb] (K-major)
  void* out;              // [M, N] row-major, row stride ldd
  int64_t m, n, k;        // k % 128 == 0, n % 128 == 0
  int64_t lda, ldb, ldd;
  int64_t sa_stride_k;    // >= M, and a multiple of 4 (16-byte TMA rows)
  int64_t sb_stride_n;    // >= K / 128
  OutType out_type;
  int sm_count;
  // Tuning only (-1 / 0: the heuristic): SGL_KERNEL_BLOCKWISE_MM_CONFIG picks 0 cooperative
  // 128x128, 1 ping-pong 64x128 (larger tiles would need 2 x 128 accumulator registers per
  // thread: the blockwise mainloop keeps a second, per-block accumulator);
  // SGL_KERNEL_BLOCKWISE_MM_SWIZZLE the
  // tile scheduler's swizzle.
  int config = -1;
  int swizzle = 0;
};
size_t fp8_blockwise_mm_workspace(const BlockwiseMmParams& p);
cudaError_t launch_fp8_blockwise_mm_sm90(const BlockwiseMmParams& p, void* workspace, cudaStream_t stream);

// ---------------------------------------------------------------------------------------
// fp8_blockwise_scaled_grouped_mm (csrc/gemm/sm90/blockwise_grouped_mm.cu): one CUTLASS grouped
// GEMM over E experts, each fp8_blockwise_scaled_mm's formula on its own rows:
//   out[o_e + i, n] = sum_kb (A[o_e + i, kb-block] . W_e[n, kb-block]) * sa[o_e + i, kb] * sb_e[n / 128, kb]
// for i < M_e, with (M_e, N, K) = problem_sizes[e] and o_e = expert_offsets[e], both read on
// the device. A first kernel (one thread an expert) fills the caller's pointer and layout
// scratch, and writes into `workspace` the experts' strides and a checked copy of the problem
// sizes: an expert whose entry is inconsistent (M_e < 0, o_e < 0, o_e + M_e > rows, or an N or
// K other than the tensors') gets M_e = 0 there, so the GEMM never reads or writes outside the
// tensors, and sets *bad_flag (in the workspace) for the debug check of the binding.
struct GroupedBlockwiseMmParams {
  const void* a;          // e4m3 [rows, K], row stride lda (elements)
  const void* b;          // e4m3: expert e's W_e [N, K] at b + e * b_stride_e, row stride ldb
  const float* scales_a;  // (row, kb) at scales_a[row * (K / 128) + kb]                  (packed, K-major)
  const float* scales_b;  // expert e's (nb, kb) at scales_b[e * sb_stride_e + nb * (K / 128) + kb]
  void* out;              // [rows, N] row-major, row stride ldd
  const int32_t* problem_sizes;   // [E, 3] = (M_e, N, K), device
  const int32_t* expert_offsets;  // [E], device
  // The caller's scratch (API.md): [E] pointers, and [E, 5] int32 per scale layout.
  void* a_ptrs;
  void* b_ptrs;
  void* out_ptrs;
  void* a_scales_ptrs;
  void* b_scales_ptrs;
  void* layout_sfa;
  void* layout_sfb;
  int64_t num_experts;    // E >= 1
  int64_t rows;           // a.shape[0]
  int64_t n, k;           // n % 128 == 0, k % 128 == 0
  int64_t lda, ldb, ldd;  // multiples of 16 (lda, ldb) and 8 (ldd) elements
  int64_t b_stride_e;     // a multiple of 16
  int64_t sb_stride_e;
  OutType out_type;
  int sm_count;
  // Tuning only (-1: the heuristic, by rows per expert): SGL_KERNEL_GROUPED_MM_CONFIG picks
  // 0 cooperative 128x128, 1 ping-pong 64x128 tiles; SGL_KERNEL_GROUPED_MM_SWIZZLE the tile
  // scheduler's swizzle (default 1).
  int config = -1;
  int swizzle = 0;
};
// Bytes of `workspace` the launch needs (CUTLASS's own, the strides, the checked sizes, the flag).
size_t fp8_blockwise_grouped_mm_workspace(const GroupedBlockwiseMmParams& p);
// Offset in `workspace` of the int32 flag set when some expert's entry was inconsistent.
size_t fp8_blockwise_grouped_mm_flag_offset(const GroupedBlockwiseMmParams& p);
cudaError_t launch_fp8_blockwise_grouped_mm_sm90(const GroupedBlockwiseMmParams& p, void* workspace,
                                                 cudaStream_t stream);

// ---------------------------------------------------------------------------------------
// awq_dequantize, dsv3_router_gemm, dsv3_fused_a_gemm (csrc/gemm/*.cu, sm80+)
// (declared below by their kernel files' owners)

// awq_dequantize (csrc/gemm/awq_dequantize.cu): with w, z the 4-bit fields of qweight, qzeros
// (logical column j of a word at bit offset 4 * {0, 4, 1, 5, 2, 6, 3, 7}[j]) and G = K / groups,
//   out[k, n] = (w[k, n] - z[k / G, n]) * scales[k / G, n]   in the dtype of scales.
struct AwqDequantParams {
  const int32_t* qweight;  // [K, N / 8], row stride qweight_stride
  const void* scales;      // fp16/bf16 [K / G, N], row stride scales_stride
  const int32_t* qzeros;   // [K / G, N / 8], row stride qzeros_stride
  void* out;               // [K, N] in the scales' dtype, contiguous, 16-byte aligned
  int64_t k;               // rows
  int64_t words;           // N / 8
  int64_t group_size;      // G >= 1
  int64_t qweight_stride, scales_stride, qzeros_stride;
  OutType dtype;           // of scales and out
  bool enable_pdl;         // programmatic dependent launch (sm90+)
};
cudaError_t launch_awq_dequantize(const AwqDequantParams& p, cudaStream_t stream);

// dsv3_router_gemm / dsv3_fused_a_gemm (csrc/gemm/dsv3_gemm.cu): out = A @ W^T, bf16 inputs,
// fp32 accumulation, 1 <= M <= 16 (a weight-streaming tensor-core kernel; sm90 builds split K
// over thread-block clusters).
struct Dsv3GemmParams {
  const void* a;    // bf16 [M, K], row stride lda (% 8 == 0); 16-byte aligned
  const void* b;    // bf16 W [N, K], row stride ldb (% 8 == 0); 16-byte aligned
  void* out;        // [M, N], row stride ldd; fp32 when out_fp32, else bf16
  int64_t m, n, k;  // 1 <= m <= 16, n % 8 == 0, k % 32 == 0
  int64_t lda, ldb, ldd;
  bool out_fp32;
  bool enable_pdl;  // programmatic dependent launch (sm90+)
};
// router: N = E in {256, 384}, K = 7168, fp32 or bf16 out (other N % 8 == 0 take a generic shape)
cudaError_t launch_dsv3_router_gemm(const Dsv3GemmParams& p, cudaStream_t stream);
// fused A projection: N = 2112, K = 7168, bf16 out (other N % 8 == 0 take a generic shape)
cudaError_t launch_dsv3_fused_a_gemm(const Dsv3GemmParams& p, cudaStream_t stream);

// ---------------------------------------------------------------------------------------
// bmm_fp8 (csrc/gemm/bmm_fp8.cc, cuBLASLt, sm89+): per batch i,
//   d[i] = (a[i] @ b[i]) * a_scale[0] * b_scale[0], fp32 accumulation, one rounding.
enum class Fp8Type { kE4M3, kE5M2 };

struct BmmFp8Params {
  const void* a;          // e4m3/e5m2 [batch, m, k], element (i, r, c) at a[i * stride_a + r * lda + c]
  const void* b;          // e4m3/e5m2 [batch, k, n] column-major per batch: (i, r, c) at b[i * stride_b + c * ldb + r]
  const float* a_scale;   // [1] on the device
  const float* b_scale;   // [1] on the device
  void* d;                // fp16/bf16 [batch, m, n], contiguous
  void* workspace;        // cuBLASLt workspace (its 256-byte aligned part is used)
  size_t workspace_bytes;
  void* cublaslt_handle;  // a cublasHandle_t / cublasLtHandle_t of the current device
  int64_t batch, m, n, k;  // k % 16 == 0, n % 16 == 0, all > 0
  int64_t lda, ldb;        // >= k, multiples of 16
  int64_t stride_a, stride_b;  // batch strides in elements, multiples of 16
  Fp8Type a_type, b_type;      // not both kE5M2
  OutType out_type;
};

// What a cuBLASLt call returned: `status` is the cublasStatus_t (0 = success) and `call`
// names the failing call (a string literal; nullptr on success).
struct BmmFp8Status {
  int status;
  const char* call;
};

// Runs the GEMM on `stream`: descriptors on the stack, the algorithm from cuBLASLt's heuristic
// (which caches its answers per problem), one cublasLtMatmul. Capturable in a CUDA graph.
BmmFp8Status launch_bmm_fp8(const BmmFp8Params& p, cudaStream_t stream);
// "CUBLAS_STATUS_NOT_SUPPORTED" and cuBLASLt's description of a status, for messages.
const char* bmm_fp8_status_name(int status);
const char* bmm_fp8_status_string(int status);

}  // namespace sgl_kernel::gemm
