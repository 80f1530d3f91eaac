// SPDX-License-Identifier: Apache-2.0
// bmm_fp8 through cuBLASLt: d[i] = (a[i] @ b[i]) * a_scale * b_scale for fp8 a, b (torch-free).
//
// cuBLASLt's fp8 GEMMs take only the "TN" form (its A transposed, its B not), in column-major
// terms. Our row-major d [m, n] is a column-major [n, m] matrix, so cuBLASLt computes
//   d^T [n, m] = op_T(lt_a) [n, k] * lt_b [k, m]
// with lt_a = our b (column-major [k, n]: a k x n column-major matrix with ld = ldb, transposed)
// and lt_b = our a (row-major [m, k]: a k x m column-major matrix with ld = lda, not transposed).
// Both operands have k as their contiguous (leading) dimension, which is what "TN" asks for.
#include <cstdint>

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "gemm/gemm.h"

namespace sgl_kernel::gemm {

namespace {

cudaDataType_t lt_fp8_type(Fp8Type t) { return t == Fp8Type::kE4M3 ? CUDA_R_8F_E4M3 : CUDA_R_8F_E5M2; }

cudaDataType_t lt_out_type(OutType t) { return t == OutType::kBF16 ? CUDA_R_16BF : CUDA_R_16F; }

// Largest power of two (at most 256, cuBLASLt's default assumption) dividing the start of every
// matrix of the batch: the base address and, when there is more than one matrix, the batch stride.
uint32_t alignment_bytes(const void* ptr, int64_t batch_stride_bytes, int64_t batch) {
  uint64_t bits = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(ptr)) | 256u;
  if (batch > 1) bits |= static_cast<uint64_t>(batch_stride_bytes);
  return static_cast<uint32_t>(bits & (~bits + 1));
}

// Records a failed cuBLASLt call in `st`; true when `s` is an error.
bool failed(cublasStatus_t s, const char* call, BmmFp8Status* st) {
  if (s == CUBLAS_STATUS_SUCCESS) return false;
  st->status = static_cast<int>(s);
  st->call = call;
  return true;
}

// A strided-batch column-major layout: `rows` x `cols`, leading dimension `ld`, `batch` matrices
// `stride` elements apart.
cublasStatus_t init_layout(cublasLtMatrixLayout_t layout, cudaDataType_t type, int64_t rows, int64_t cols, int64_t ld,
                           int64_t batch, int64_t stride) {
  cublasStatus_t s = cublasLtMatrixLayoutInit(layout, type, static_cast<uint64_t>(rows), static_cast<uint64_t>(cols), ld);
  const int32_t count = static_cast<int32_t>(batch);
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof(count));
  }
  if (s == CUBLAS_STATUS_SUCCESS) {
    s = cublasLtMatrixLayoutSetAttribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride));
  }
  return s;
}

}  // namespace

BmmFp8Status launch_bmm_fp8(const BmmFp8Params& p, cudaStream_t stream) {
  BmmFp8Status st{static_cast<int>(CUBLAS_STATUS_SUCCESS), nullptr};
  auto handle = static_cast<cublasLtHandle_t>(p.cublaslt_handle);

  // Operation: fp32 compute and scale type, lt_a transposed, per-tensor scales read on the device.
  // Lt's A is our b, so its A scale is b_scale (the product is the same either way).
  cublasLtMatmulDescOpaque_t op_storage;
  cublasLtMatmulDesc_t op = &op_storage;
  const int32_t trans_a = CUBLAS_OP_T, trans_b = CUBLAS_OP_N;
  const void* lt_a_scale = p.b_scale;
  const void* lt_b_scale = p.a_scale;
  if (failed(cublasLtMatmulDescInit(op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescInit", &st) ||
      failed(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_a, sizeof(trans_a)),
             "cublasLtMatmulDescSetAttribute(TRANSA)", &st) ||
      failed(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_b, sizeof(trans_b)),
             "cublasLtMatmulDescSetAttribute(TRANSB)", &st) ||
      failed(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &lt_a_scale, sizeof(lt_a_scale)),
             "cublasLtMatmulDescSetAttribute(A_SCALE_POINTER)", &st) ||
      failed(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &lt_b_scale, sizeof(lt_b_scale)),
             "cublasLtMatmulDescSetAttribute(B_SCALE_POINTER)", &st)) {
    return st;
  }

  // Layouts (column-major, see the top of this file). C is D (beta = 0: never read).
  cublasLtMatrixLayoutOpaque_t lt_a_storage, lt_b_storage, lt_d_storage;
  cublasLtMatrixLayout_t lt_a = &lt_a_storage, lt_b = &lt_b_storage, lt_d = &lt_d_storage;
  if (failed(init_layout(lt_a, lt_fp8_type(p.b_type), p.k, p.n, p.ldb, p.batch, p.stride_b),
             "cublasLtMatrixLayoutInit(B)", &st) ||
      failed(init_layout(lt_b, lt_fp8_type(p.a_type), p.k, p.m, p.lda, p.batch, p.stride_a),
             "cublasLtMatrixLayoutInit(A)", &st) ||
      failed(init_layout(lt_d, lt_out_type(p.out_type), p.n, p.m, p.n, p.batch, p.m * p.n),
             "cublasLtMatrixLayoutInit(D)", &st)) {
    return st;
  }

  // cuBLASLt wants its workspace 256-byte aligned; a torch allocation always is, a view may not be.
  auto ws_addr = reinterpret_cast<uintptr_t>(p.workspace);
  const uintptr_t ws_pad = (256 - ws_addr % 256) % 256;
  void* workspace = p.workspace_bytes > ws_pad ? reinterpret_cast<void*>(ws_addr + ws_pad) : nullptr;
  const uint64_t ws_bytes = p.workspace_bytes > ws_pad ? (p.workspace_bytes - ws_pad) & ~uint64_t{255} : 0;

  const int64_t out_size = 2;  // fp16 / bf16
  const uint32_t align_a = alignment_bytes(p.b, p.stride_b, p.batch);  // Lt's A is our b
  const uint32_t align_b = alignment_bytes(p.a, p.stride_a, p.batch);
  const uint32_t align_d = alignment_bytes(p.d, p.m * p.n * out_size, p.batch);

  // NOTE: the heuristic runs on every call. cuBLASLt caches its answers per problem itself
  // (the first query of a new problem took ~450 us on an H200, later ones are cheap): a launch
  // costs ~8-10 us of host time with or without an algorithm cache of ours (measured, cuBLAS 13).
  cublasLtMatmulPreferenceOpaque_t pref_storage;
  cublasLtMatmulPreference_t pref = &pref_storage;
  if (failed(cublasLtMatmulPreferenceInit(pref), "cublasLtMatmulPreferenceInit", &st) ||
      failed(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes,
                                                  sizeof(ws_bytes)),
             "cublasLtMatmulPreferenceSetAttribute(MAX_WORKSPACE_BYTES)", &st) ||
      failed(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                                  sizeof(align_a)),
             "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_A_BYTES)", &st) ||
      failed(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                                  sizeof(align_b)),
             "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_B_BYTES)", &st) ||
      failed(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_d,
                                                  sizeof(align_d)),
             "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_C_BYTES)", &st) ||
      failed(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                                  sizeof(align_d)),
             "cublasLtMatmulPreferenceSetAttribute(MIN_ALIGNMENT_D_BYTES)", &st)) {
    return st;
  }
  cublasLtMatmulHeuristicResult_t result{};
  int count = 0;
  if (failed(cublasLtMatmulAlgoGetHeuristic(handle, op, lt_a, lt_b, lt_d, lt_d, pref, 1, &result, &count),
             "cublasLtMatmulAlgoGetHeuristic", &st)) {
    return st;
  }
  if (count < 1 || result.state != CUBLAS_STATUS_SUCCESS) {
    st.status = static_cast<int>(count < 1 ? CUBLAS_STATUS_NOT_SUPPORTED : result.state);
    st.call = "cublasLtMatmulAlgoGetHeuristic (no algorithm for this problem)";
    return st;
  }

  const float alpha = 1.0f, beta = 0.0f;
  failed(cublasLtMatmul(handle, op, &alpha, /*A=*/p.b, lt_a, /*B=*/p.a, lt_b, &beta, /*C=*/p.d, lt_d, /*D=*/p.d, lt_d,
                        &result.algo, workspace, ws_bytes, stream),
         "cublasLtMatmul", &st);
  return st;
}

const char* bmm_fp8_status_name(int status) { return cublasLtGetStatusName(static_cast<cublasStatus_t>(status)); }

const char* bmm_fp8_status_string(int status) {
  return cublasLtGetStatusString(static_cast<cublasStatus_t>(status));
}

}  // namespace sgl_kernel::gemm
