// SPDX-License-Identifier: Apache-2.0
// Bindings of the GEMM family: schemas, checks, dispatch to the launchers of gemm.h.
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>
#include <tuple>
#include <utility>

#include <ATen/ops/empty.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <torch/library.h>

#include "gemm/gemm.h"
#include "sgl_kernel/check.h"
#include "sgl_kernel/runtime.h"

namespace sgl_kernel::gemm {

namespace {

constexpr bool kBuiltSm90 = SGL_KERNEL_HAS_GEMM_SM90;
constexpr const char* kArchsSm90 = SGL_KERNEL_ARCHS_GEMM_SM90;
constexpr bool kBuilt = SGL_KERNEL_HAS_GEMM;
constexpr bool kBuiltSm80 = SGL_KERNEL_HAS_GEMM_SM80;
constexpr const char* kArchsSm80 = SGL_KERNEL_ARCHS_GEMM_SM80;
constexpr bool kBuiltSm89 = SGL_KERNEL_HAS_GEMM_SM89;
constexpr const char* kArchsSm89 = SGL_KERNEL_ARCHS_GEMM_SM89;
constexpr const char* kArchs = SGL_KERNEL_ARCHS_GEMM;

cudaStream_t current_stream(const at::Tensor& t) { return c10::cuda::getCurrentCUDAStream(t.get_device()).stream(); }

bool aligned16(const at::Tensor& t) { return reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0; }

// The out_dtype argument of the scaled GEMMs.
OutType out_type_of(const char* op, at::ScalarType dtype) {
  SGL_CHECK(dtype == at::kBFloat16 || dtype == at::kHalf, op, "out_dtype must be torch.bfloat16 or torch.float16, got ",
            dtype);
  return dtype == at::kBFloat16 ? OutType::kBF16 : OutType::kFP16;
}

// mat_a [M, K] row-major and mat_b [K, N] column-major of 8-bit type `dtype` (API.md 2.3):
// the TMA loads need 16-byte aligned starts and row strides.
void check_ab(const char* op, const at::Tensor& a, const at::Tensor& b, at::ScalarType dtype) {
  check_cuda(op, "mat_a", a);
  check_dtype(op, "mat_a", a, {dtype});
  check_dim(op, "mat_a", a, 2);
  check_same_device(op, "mat_b", b, "mat_a", a);
  check_dtype(op, "mat_b", b, {dtype});
  check_dim(op, "mat_b", b, 2);
  const int64_t k = a.size(1);
  SGL_CHECK(b.size(0) == k, op, "mat_b.shape[0] must equal mat_a.shape[1] (K = ", k, "), got mat_b.shape ",
            b.sizes());
  SGL_CHECK(a.stride(1) == 1 || a.size(1) == 1, op, "mat_a must be row-major (stride(1) == 1), got strides ",
            a.strides());
  SGL_CHECK(b.stride(0) == 1 || b.size(0) == 1, op,
            "mat_b must be column-major (stride(0) == 1, the transpose view W.t() of a row-major weight W [N, K]), "
            "got strides ",
            b.strides());
  SGL_CHECK(k % 16 == 0 && k > 0, op, "mat_a.shape[1] (K) must be a positive multiple of 16, got ", k);
  SGL_CHECK(b.size(1) % 8 == 0, op, "mat_b.shape[1] (N) must be a multiple of 8, got ", b.size(1));
  SGL_CHECK(aligned16(a) && (a.size(0) <= 1 || a.stride(0) % 16 == 0), op,
            "mat_a must start at a 16-byte aligned address with a row stride that is a multiple of 16 elements, "
            "got data_ptr % 16 = ",
            reinterpret_cast<uintptr_t>(a.data_ptr()) % 16, ", stride(0) = ", a.stride(0));
  SGL_CHECK(aligned16(b) && (b.size(1) <= 1 || b.stride(1) % 16 == 0), op,
            "mat_b must start at a 16-byte aligned address with a column stride that is a multiple of 16 "
            "elements, got data_ptr % 16 = ",
            reinterpret_cast<uintptr_t>(b.data_ptr()) % 16, ", stride(1) = ", b.stride(1));
}

// The CUTLASS kernels take M, N and K as int (a larger one would be truncated) and round them
// up to whole tiles in int (the blockwise one also M to a multiple of 4): they stay within
// INT32_MAX / 2, the decode kernels' own limit (decode_common.cuh). Called where a kernel runs.
constexpr int64_t kMaxGemmDim = INT32_MAX / 2;

void check_cutlass_shape(const char* op, int64_t m, int64_t n, int64_t k) {
  SGL_CHECK(m <= kMaxGemmDim, op, "mat_a.shape[0] (M) must be at most ", kMaxGemmDim, ", got ", m);
  SGL_CHECK(n <= kMaxGemmDim, op, "mat_b.shape[1] (N) must be at most ", kMaxGemmDim, ", got ", n);
  SGL_CHECK(k <= kMaxGemmDim, op, "mat_a.shape[1] (K) must be at most ", kMaxGemmDim, ", got ", k);
}

// scales_a: M fp32 elements, scales_b: N (contiguous, [X] or [X, 1]); bias [N] of out_dtype.
void check_row_col_scales(const char* op, const at::Tensor& a, const at::Tensor& sa, const at::Tensor& sb,
                          const std::optional<at::Tensor>& bias, int64_t m, int64_t n, at::ScalarType out_dtype) {
  for (auto [name, t, count, what] : {std::tuple{"scales_a", &sa, m, "M = mat_a.shape[0]"},
                                      std::tuple{"scales_b", &sb, n, "N = mat_b.shape[1]"}}) {
    check_same_device(op, name, *t, "mat_a", a);
    check_dtype(op, name, *t, {at::kFloat});
    SGL_CHECK(t->dim() == 1 || (t->dim() == 2 && t->size(1) == 1), op, name, " must have shape [", count, "] or [",
              count, ", 1], got ", t->sizes());
    SGL_CHECK(t->numel() == count, op, name, " must have ", what, " elements (", count, "), got shape ", t->sizes());
    SGL_CHECK(t->is_contiguous(), op, name, " must be contiguous, got strides ", t->strides());
  }
  if (bias.has_value()) {
    check_same_device(op, "bias", *bias, "mat_a", a);
    check_dtype(op, "bias", *bias, {out_dtype});
    check_dim(op, "bias", *bias, 1);
    check_size(op, "bias", *bias, 0, n, "N = mat_b.shape[1]");
    check_contiguous(op, "bias", *bias);
  }
}

// Launch an sm90 GEMM: the workspace its configuration asks for comes from the caching
// allocator (graph-safe, no cudaMalloc on the hot path); a configuration CUTLASS rejects is
// reported with the problem shape.
template <typename Params>
void run_sm90(const char* op, const at::Tensor& mat_a, const Params& p, size_t (*workspace_fn)(const Params&),
              cudaError_t (*launch_fn)(const Params&, void*, cudaStream_t)) {
  const size_t ws_bytes = workspace_fn(p);
  at::Tensor ws;
  if (ws_bytes > 0) ws = at::empty({static_cast<int64_t>(ws_bytes)}, mat_a.options().dtype(at::kByte));
  const cudaError_t err = launch_fn(p, ws_bytes > 0 ? ws.data_ptr() : nullptr, current_stream(mat_a));
  SGL_CHECK(err != cudaErrorNotSupported, op, "mat_a: no kernel configuration implements M = ", p.m, ", N = ", p.n,
            ", K = ", p.k, " with these strides (CUTLASS can_implement failed)");
  check_launch(op, err);
}

// Tuning hooks (benchmark/gemm/tune_scaled_mm.py): SGL_KERNEL_SCALED_MM_CONFIG names a
// configuration (scaled_mm_config_names()), SGL_KERNEL_SCALED_MM_SPLITS a split-K factor,
// SGL_KERNEL_SCALED_MM_SWIZZLE the tile scheduler's swizzle.
// Unset: the heuristic. Read on every call so a tuning script can switch them.
void apply_tuning_env(const char* op, ScaledMmParams& p) {
  if constexpr (kBuiltSm90) {
    if (const char* name = std::getenv("SGL_KERNEL_SCALED_MM_CONFIG"); name != nullptr && *name != '\0') {
      p.config = scaled_mm_config_index(name);
      SGL_CHECK(p.config >= 0, op, "SGL_KERNEL_SCALED_MM_CONFIG=", name, " names no configuration; known: ",
                scaled_mm_config_names());
    }
    if (const char* s = std::getenv("SGL_KERNEL_SCALED_MM_SPLITS"); s != nullptr && *s != '\0') {
      p.splits = std::atoi(s);
    }
    if (const char* s = std::getenv("SGL_KERNEL_SCALED_MM_SWIZZLE"); s != nullptr && *s != '\0') {
      p.swizzle = std::atoi(s);
    }
  }
}

// Which kernels fp8_scaled_mm / int8_scaled_mm run: the sm90a CUTLASS 3.x ones where the build
// holds them for the GPU, else the CUTLASS 2.x mma.sync ones (fp8: sm89+, int8: sm80+).
// SGL_KERNEL_SCALED_MM_BACKEND=sm90|sm8x forces one (tests run the sm8x path on an H100).
bool use_sm90_kernels(const char* op, const at::Tensor& t) {
  const char* env = std::getenv("SGL_KERNEL_SCALED_MM_BACKEND");
  const std::string backend = env != nullptr ? env : "";
  if (backend == "sm90") return true;
  if (backend == "sm8x") return false;
  SGL_CHECK(backend.empty() || backend == "auto", op, "SGL_KERNEL_SCALED_MM_BACKEND must be auto, sm90 or sm8x, got '",
            backend, "'");
  return kBuiltSm90 && archs_cover(kArchsSm90, device_capability(t.get_device()));
}

at::Tensor scaled_mm(const char* op, bool fp8, const at::Tensor& mat_a, const at::Tensor& mat_b,
                     const at::Tensor& scales_a, const at::Tensor& scales_b, at::ScalarType out_dtype,
                     const std::optional<at::Tensor>& bias) {
  check_ab(op, mat_a, mat_b, fp8 ? at::kFloat8_e4m3fn : at::kChar);
  const OutType ot = out_type_of(op, out_dtype);
  const int64_t m = mat_a.size(0), n = mat_b.size(1), k = mat_a.size(1);
  if (m > 0 && n > 0) check_cutlass_shape(op, m, n, k);
  check_row_col_scales(op, mat_a, scales_a, scales_b, bias, m, n, out_dtype);
  at::Tensor out = at::empty({m, n}, mat_a.options().dtype(out_dtype));
  if (m == 0 || n == 0) return out;
  const bool sm90 = use_sm90_kernels(op, mat_a);
  if (sm90) {
    require_kernel(op, "gemm_sm90", kArchsSm90, mat_a);
  } else if (fp8) {
    const int cc = device_capability(mat_a.get_device());
    SGL_CHECK(cc >= 89, op, "needs a GPU with fp8 tensor cores (sm_89 or newer); cuda:", mat_a.get_device(),
              " is sm_", cc);
    require_kernel(op, "gemm_sm89", kArchsSm89, mat_a);
  } else {
    require_kernel(op, "gemm_sm80", kArchsSm80, mat_a);
  }
  const c10::cuda::CUDAGuard guard(mat_a.device());
  // The vector loads of the epilogues read scales_b in 16-byte and bias in 16-byte pieces.
  const at::Tensor sb = aligned16(scales_b) ? scales_b : scales_b.clone();
  at::Tensor bias16;
  if (bias.has_value()) bias16 = aligned16(*bias) ? *bias : bias->clone();
  ScaledMmParams p{};
  p.a = mat_a.data_ptr();
  p.b = mat_b.data_ptr();
  p.scales_a = scales_a.data_ptr<float>();
  p.scales_b = sb.data_ptr<float>();
  p.bias = bias16.defined() ? bias16.data_ptr() : nullptr;
  p.out = out.data_ptr();
  p.m = m;
  p.n = n;
  p.k = k;
  p.lda = m > 1 ? mat_a.stride(0) : k;
  p.ldb = n > 1 ? mat_b.stride(1) : k;
  p.ldd = n;
  p.out_type = ot;
  p.sm_count = device_sm_count(mat_a.get_device());
  if (sm90) {
    p.enable_pdl = pdl_supported(mat_a);
    apply_tuning_env(op, p);
    if constexpr (kBuiltSm90) {
      if (fp8) {
        run_sm90(op, mat_a, p, &fp8_scaled_mm_workspace, &launch_fp8_scaled_mm_sm90);
      } else {
        run_sm90(op, mat_a, p, &int8_scaled_mm_workspace, &launch_int8_scaled_mm_sm90);
      }
    }
    return out;
  }
  cudaError_t err = cudaErrorNotSupported;
  if (fp8) {
    if constexpr (kBuiltSm89) err = launch_fp8_scaled_mm_sm89(p, current_stream(mat_a));
  } else {
    if constexpr (kBuiltSm80) err = launch_int8_scaled_mm_sm80(p, current_stream(mat_a));
  }
  SGL_CHECK(err != cudaErrorNotSupported, op, "mat_a: no kernel configuration implements M = ", m, ", N = ", n,
            ", K = ", k, " with these strides (CUTLASS can_implement failed)");
  check_launch(op, err);
  return out;
}

// out = (mat_a @ mat_b) * scales_a[:, None] * scales_b[None, :] (+ bias), e4m3 inputs
at::Tensor fp8_scaled_mm(const at::Tensor& mat_a, const at::Tensor& mat_b, const at::Tensor& scales_a,
                         const at::Tensor& scales_b, at::ScalarType out_dtype, const std::optional<at::Tensor>& bias) {
  return scaled_mm("fp8_scaled_mm", true, mat_a, mat_b, scales_a, scales_b, out_dtype, bias);
}

// the same with int8 inputs and int32 accumulation
at::Tensor int8_scaled_mm(const at::Tensor& mat_a, const at::Tensor& mat_b, const at::Tensor& scales_a,
                          const at::Tensor& scales_b, at::ScalarType out_dtype,
                          const std::optional<at::Tensor>& bias) {
  return scaled_mm("int8_scaled_mm", false, mat_a, mat_b, scales_a, scales_b, out_dtype, bias);
}

Fp8Type fp8_type_of(const at::Tensor& t) {
  return t.scalar_type() == at::kFloat8_e4m3fn ? Fp8Type::kE4M3 : Fp8Type::kE5M2;
}

// The leading dimension (stride(ld_dim): A's row stride, ld_dim = 1; B's column stride,
// ld_dim = 2) and the batch stride of a batched fp8 operand [b, x, y] whose other matrix dimension
// is contiguous. Both must keep every row (column) start 16-byte aligned for cuBLASLt. The stride
// of a size-1 dimension is free (torch's contiguity rule), so the packed value replaces it.
void bmm_fp8_operand_strides(const char* op, const char* name, const at::Tensor& t, int ld_dim, int64_t k,
                             const char* layout, int64_t* ld, int64_t* batch_stride) {
  const int contig_dim = ld_dim == 1 ? 2 : 1;
  SGL_CHECK(t.stride(contig_dim) == 1 || t.size(contig_dim) <= 1, op, name, " must be ", layout, ", got shape ",
            t.sizes(), " with strides ", t.strides());
  *ld = t.size(ld_dim) > 1 ? t.stride(ld_dim) : k;
  SGL_CHECK(*ld >= k && *ld % 16 == 0, op, name, " must be ", layout, " with a stride(", ld_dim,
            ") that is >= k and a multiple of 16, got shape ", t.sizes(), " with strides ", t.strides());
  *batch_stride = t.size(0) > 1 ? t.stride(0) : t.size(ld_dim) * *ld;
  SGL_CHECK(*batch_stride % 16 == 0, op, name, ".stride(0) (the batch stride) must be a multiple of 16, got ",
            t.stride(0));
  SGL_CHECK(aligned16(t), op, name, " must start at a 16-byte aligned address, got data_ptr % 16 = ",
            reinterpret_cast<uintptr_t>(t.data_ptr()) % 16);
}

// D = (A @ B) * A_scale * B_scale per batch, through cuBLASLt (fp8 inputs, fp32 accumulation)
void bmm_fp8(const at::Tensor& A, const at::Tensor& B, const at::Tensor& D, const at::Tensor& A_scale,
             const at::Tensor& B_scale, const at::Tensor& workspace_buffer, int64_t cublas_handle) {
  constexpr const char* op = "bmm_fp8";
  check_cuda(op, "A", A);
  check_dtype(op, "A", A, {at::kFloat8_e4m3fn, at::kFloat8_e5m2});
  check_dim(op, "A", A, 3);
  check_same_device(op, "B", B, "A", A);
  check_dtype(op, "B", B, {at::kFloat8_e4m3fn, at::kFloat8_e5m2});
  SGL_CHECK(!(A.scalar_type() == at::kFloat8_e5m2 && B.scalar_type() == at::kFloat8_e5m2), op,
            "B must have dtype torch.float8_e4m3fn when A is torch.float8_e5m2 (cuBLASLt has no e5m2 x e5m2 "
            "GEMM), got ",
            dtype_name(B.scalar_type()));
  check_dim(op, "B", B, 3);
  const int64_t batch = A.size(0), m = A.size(1), k = A.size(2), n = B.size(2);
  check_size(op, "B", B, 0, batch, "A.shape[0], the batch");
  check_size(op, "B", B, 1, k, "A.shape[2], k");
  SGL_CHECK(k % 16 == 0, op, "A.shape[2] (k) must be a multiple of 16, got ", k);
  SGL_CHECK(n % 16 == 0, op, "B.shape[2] (n) must be a multiple of 16, got ", n);
  SGL_CHECK(batch <= INT32_MAX, op, "A.shape[0] (the batch) must be at most ", INT32_MAX, ", got ", batch);
  // An empty A or B is never read: its strides do not matter (D gets zeros when k == 0).
  const bool reads = batch > 0 && m > 0 && n > 0 && k > 0;
  int64_t lda = k, ldb = k, stride_a = m * k, stride_b = n * k;
  if (reads) {
    bmm_fp8_operand_strides(op, "A", A, 1, k, "row-major per batch ([b, m, k] with stride(2) == 1)", &lda,
                            &stride_a);
    bmm_fp8_operand_strides(op, "B", B, 2, k,
                            "column-major per batch ([b, k, n] with stride(1) == 1, e.g. W.transpose(-2, -1) of "
                            "a contiguous W [b, n, k])",
                            &ldb, &stride_b);
  }

  check_same_device(op, "D", D, "A", A);
  check_dtype(op, "D", D, {at::kBFloat16, at::kHalf});
  check_dim(op, "D", D, 3);
  check_size(op, "D", D, 0, batch, "A.shape[0], the batch");
  check_size(op, "D", D, 1, m, "A.shape[1], m");
  check_size(op, "D", D, 2, n, "B.shape[2], n");
  check_contiguous(op, "D", D);
  SGL_CHECK(aligned16(D), op, "D must start at a 16-byte aligned address, got data_ptr % 16 = ",
            reinterpret_cast<uintptr_t>(D.data_ptr()) % 16);

  for (auto [name, t] : {std::pair{"A_scale", &A_scale}, std::pair{"B_scale", &B_scale}}) {
    check_same_device(op, name, *t, "A", A);
    check_dtype(op, name, *t, {at::kFloat});
    SGL_CHECK(t->numel() == 1, op, name, " must hold exactly one element (a per-tensor scale), got shape ",
              t->sizes());
  }
  check_same_device(op, "workspace_buffer", workspace_buffer, "A", A);
  check_contiguous(op, "workspace_buffer", workspace_buffer);
  SGL_CHECK(cublas_handle != 0, op,
            "cublas_handle must be a cuBLAS handle of A's device (torch.cuda.current_blas_handle()), got 0");

  if (batch == 0 || m == 0 || n == 0) return;
  require_kernel(op, "gemm", kArchs, A);
  const int cc = device_capability(A.get_device());
  SGL_CHECK(cc >= 89, op, "needs an sm89 or newer GPU (fp8 tensor cores); A is on cuda:", A.get_device(),
            ", which is sm_", cc);
  const c10::cuda::CUDAGuard guard(A.device());
  if (k == 0) {
    D.zero_();
    return;
  }

  BmmFp8Params p{};
  p.a = A.data_ptr();
  p.b = B.data_ptr();
  p.a_scale = A_scale.data_ptr<float>();
  p.b_scale = B_scale.data_ptr<float>();
  p.d = D.data_ptr();
  p.workspace = workspace_buffer.data_ptr();
  p.workspace_bytes = static_cast<size_t>(workspace_buffer.numel()) * workspace_buffer.element_size();
  p.cublaslt_handle = reinterpret_cast<void*>(static_cast<intptr_t>(cublas_handle));
  p.batch = batch;
  p.m = m;
  p.n = n;
  p.k = k;
  p.lda = lda;
  p.ldb = ldb;
  p.stride_a = stride_a;
  p.stride_b = stride_b;
  p.a_type = fp8_type_of(A);
  p.b_type = fp8_type_of(B);
  p.out_type = D.scalar_type() == at::kBFloat16 ? OutType::kBF16 : OutType::kFP16;
  const BmmFp8Status st = launch_bmm_fp8(p, current_stream(A));
  SGL_CHECK(st.status == 0, op, st.call, " failed with ", bmm_fp8_status_name(st.status), " (",
            bmm_fp8_status_string(st.status), ") for batch=", batch, ", m=", m, ", n=", n, ", k=", k, ", A ",
            dtype_name(A.scalar_type()), ", B ", dtype_name(B.scalar_type()), ", D ", dtype_name(D.scalar_type()),
            " on sm_", cc);
}

// ---------------------------------------------------------------------------------------
// awq_dequantize, dsv3_router_gemm, dsv3_fused_a_gemm (awq_dequantize.cu, dsv3_gemm.cu)

constexpr int64_t kDsv3Hidden = 7168;   // K of both DeepSeek-V3 GEMMs
constexpr int64_t kDsv3FusedAN = 2112;  // q_a (1536) + kv_a (512) + rope key (64) columns

// out[k, n] = (w[k, n] - z[k / G, n]) * scales[k / G, n], AWQ nibble order, G = K / scales.shape[0]
at::Tensor awq_dequantize(const at::Tensor& qweight, const at::Tensor& scales, const at::Tensor& qzeros) {
  const char* op = "awq_dequantize";
  check_cuda(op, "qweight", qweight);
  check_dtype(op, "qweight", qweight, {at::kInt});
  check_dim(op, "qweight", qweight, 2);
  check_last_dim_contiguous(op, "qweight", qweight);
  check_same_device(op, "scales", scales, "qweight", qweight);
  check_dtype(op, "scales", scales, {at::kHalf, at::kBFloat16});
  check_dim(op, "scales", scales, 2);
  check_last_dim_contiguous(op, "scales", scales);
  check_same_device(op, "qzeros", qzeros, "qweight", qweight);
  check_dtype(op, "qzeros", qzeros, {at::kInt});
  check_dim(op, "qzeros", qzeros, 2);
  check_last_dim_contiguous(op, "qzeros", qzeros);
  const int64_t k = qweight.size(0), words = qweight.size(1), groups = scales.size(0);
  check_size(op, "scales", scales, 1, words * 8, "N = qweight.shape[1] * 8");
  SGL_CHECK(groups > 0 ? k % groups == 0 : k == 0, op,
            "scales.shape[0] (the number of groups K / G) must divide qweight.shape[0] (K = ", k, "), got ", groups);
  check_size(op, "qzeros", qzeros, 0, groups, "K / G = scales.shape[0]");
  check_size(op, "qzeros", qzeros, 1, words, "N / 8 = qweight.shape[1]");
  // launch_awq_dequantize refuses rows of 2^31 words or more; an empty output never reaches it.
  SGL_CHECK(k == 0 || words <= INT32_MAX, op, "qweight.shape[1] (N / 8) must be at most ", INT32_MAX, ", got ",
            words);
  at::Tensor out = at::empty({k, words * 8}, scales.options());
  if (k == 0 || words == 0) return out;
  require_kernel(op, "gemm", kArchs, qweight);
  const c10::cuda::CUDAGuard guard(qweight.device());
  AwqDequantParams p{};
  p.qweight = qweight.data_ptr<int32_t>();
  p.scales = scales.data_ptr();
  p.qzeros = qzeros.data_ptr<int32_t>();
  p.out = out.data_ptr();
  p.k = k;
  p.words = words;
  p.group_size = k / groups;
  // the row stride of a one-row tensor is never used (and may be anything)
  p.qweight_stride = k > 1 ? qweight.stride(0) : words;
  p.scales_stride = groups > 1 ? scales.stride(0) : words * 8;
  p.qzeros_stride = groups > 1 ? qzeros.stride(0) : words;
  p.dtype = scales.scalar_type() == at::kBFloat16 ? OutType::kBF16 : OutType::kFP16;
  p.enable_pdl = pdl_supported(qweight);
  if constexpr (kBuilt) check_launch(op, launch_awq_dequantize(p, current_stream(qweight)));
  return out;
}

// mat_a of both DeepSeek-V3 GEMMs: bf16 [M, 7168] row-major, 1 <= M <= 16, 16-byte aligned rows.
void check_dsv3_mat_a(const char* op, const at::Tensor& a) {
  check_cuda(op, "mat_a", a);
  check_dtype(op, "mat_a", a, {at::kBFloat16});
  check_dim(op, "mat_a", a, 2);
  SGL_CHECK(a.size(0) >= 1 && a.size(0) <= 16, op, "mat_a.shape[0] (M, tokens) must be between 1 and 16, got ",
            a.size(0));
  check_size(op, "mat_a", a, 1, kDsv3Hidden, "K, the DeepSeek-V3 hidden size");
  SGL_CHECK(a.stride(1) == 1, op, "mat_a must be row-major (stride(1) == 1), got strides ", a.strides());
  SGL_CHECK(aligned16(a) && (a.size(0) == 1 || a.stride(0) % 8 == 0), op,
            "mat_a must start at a 16-byte aligned address with a row stride that is a multiple of 8 elements, "
            "got data_ptr % 16 = ",
            reinterpret_cast<uintptr_t>(a.data_ptr()) % 16, ", stride(0) = ", a.stride(0));
}

// output [M, N] of dtype one of `dtypes`, last dimension contiguous.
void check_dsv3_output(const char* op, const at::Tensor& out, const at::Tensor& a, int64_t n, const char* n_what,
                       std::initializer_list<at::ScalarType> dtypes) {
  check_same_device(op, "output", out, "mat_a", a);
  check_dtype(op, "output", out, dtypes);
  check_dim(op, "output", out, 2);
  check_size(op, "output", out, 0, a.size(0), "M = mat_a.shape[0]");
  check_size(op, "output", out, 1, n, n_what);
  check_last_dim_contiguous(op, "output", out);
  check_no_internal_overlap(op, "output", out);
}

// output = mat_a @ W^T with W [N, K] row-major at `w` (row stride ldw)
void run_dsv3(const char* op, at::Tensor& output, const at::Tensor& a, const at::Tensor& w, int64_t n, int64_t ldw,
              cudaError_t (*launch)(const Dsv3GemmParams&, cudaStream_t)) {
  require_kernel(op, "gemm", kArchs, a);
  const c10::cuda::CUDAGuard guard(a.device());
  Dsv3GemmParams p{};
  p.a = a.data_ptr();
  p.b = w.data_ptr();
  p.out = output.data_ptr();
  p.m = a.size(0);
  p.n = n;
  p.k = a.size(1);
  p.lda = p.m > 1 ? a.stride(0) : p.k;
  p.ldb = ldw;
  p.ldd = p.m > 1 ? output.stride(0) : n;
  p.out_fp32 = output.scalar_type() == at::kFloat;
  p.enable_pdl = pdl_supported(a);
  if constexpr (kBuilt) check_launch(op, launch(p, current_stream(a)));
}

// output = mat_a @ mat_b.T: DeepSeek-V3 router logits, mat_b [E, 7168] row-major
void dsv3_router_gemm(at::Tensor& output, const at::Tensor& mat_a, const at::Tensor& mat_b) {
  const char* op = "dsv3_router_gemm";
  check_dsv3_mat_a(op, mat_a);
  check_same_device(op, "mat_b", mat_b, "mat_a", mat_a);
  check_dtype(op, "mat_b", mat_b, {at::kBFloat16});
  check_dim(op, "mat_b", mat_b, 2);
  const int64_t e = mat_b.size(0);
  SGL_CHECK(e == 256 || e == 384, op, "mat_b.shape[0] (E, experts) must be 256 or 384, got ", e);
  check_size(op, "mat_b", mat_b, 1, kDsv3Hidden, "K = mat_a.shape[1]");
  SGL_CHECK(mat_b.stride(1) == 1, op, "mat_b must be row-major [E, K] (stride(1) == 1), got strides ",
            mat_b.strides());
  SGL_CHECK(aligned16(mat_b) && mat_b.stride(0) % 8 == 0, op,
            "mat_b must start at a 16-byte aligned address with a row stride that is a multiple of 8 elements, "
            "got data_ptr % 16 = ",
            reinterpret_cast<uintptr_t>(mat_b.data_ptr()) % 16, ", stride(0) = ", mat_b.stride(0));
  check_dsv3_output(op, output, mat_a, e, "E = mat_b.shape[0]", {at::kFloat, at::kBFloat16});
  run_dsv3(op, output, mat_a, mat_b, e, mat_b.stride(0), &launch_dsv3_router_gemm);
}

// output = mat_a @ mat_b: DeepSeek-V3 fused q_a/kv_a projection, mat_b [7168, 2112] column-major
void dsv3_fused_a_gemm(at::Tensor& output, const at::Tensor& mat_a, const at::Tensor& mat_b) {
  const char* op = "dsv3_fused_a_gemm";
  check_dsv3_mat_a(op, mat_a);
  check_same_device(op, "mat_b", mat_b, "mat_a", mat_a);
  check_dtype(op, "mat_b", mat_b, {at::kBFloat16});
  check_dim(op, "mat_b", mat_b, 2);
  check_size(op, "mat_b", mat_b, 0, kDsv3Hidden, "K = mat_a.shape[1]");
  check_size(op, "mat_b", mat_b, 1, kDsv3FusedAN, "N, the fused q_a/kv_a projection width");
  SGL_CHECK(mat_b.stride(0) == 1, op,
            "mat_b must be column-major (stride(0) == 1, the transpose view W.t() of a row-major weight "
            "W [2112, 7168]), got strides ",
            mat_b.strides());
  SGL_CHECK(aligned16(mat_b) && mat_b.stride(1) % 8 == 0, op,
            "mat_b must start at a 16-byte aligned address with a column stride that is a multiple of 8 elements, "
            "got data_ptr % 16 = ",
            reinterpret_cast<uintptr_t>(mat_b.data_ptr()) % 16, ", stride(1) = ", mat_b.stride(1));
  check_dsv3_output(op, output, mat_a, kDsv3FusedAN, "N = mat_b.shape[1]", {at::kBFloat16});
  run_dsv3(op, output, mat_a, mat_b, kDsv3FusedAN, mat_b.stride(1), &launch_dsv3_fused_a_gemm);
}

// scales_a [M, K/128] as the kernel reads it: M-major, a 16-byte aligned start, the k-block
// stride a multiple of 4 floats, and M rounded up to 4 readable in every k-block (its TMA
// boxes). Other layouts are copied once into such a buffer.
at::Tensor blockwise_scales_a(const at::Tensor& sa, int64_t m, int64_t kb, int64_t* stride_k) {
  const int64_t m_pad = (m + 3) / 4 * 4;
  const bool m_major = sa.size(0) == 1 || sa.stride(0) == 1;
  const int64_t stride = kb == 1 ? m_pad : sa.stride(1);
  // The kernel's layout holds the stride as int32: a larger one takes the copy below.
  const bool rows_ok = stride % 4 == 0 && stride >= m_pad && stride <= INT32_MAX;
  // the padded tail of the last k-block must lie inside the tensor's storage
  const bool room = m == m_pad || static_cast<int64_t>(sa.storage_offset() + (kb - 1) * stride + m_pad) * 4 <=
                                      static_cast<int64_t>(sa.storage().nbytes());
  if (m_major && rows_ok && room && aligned16(sa)) {
    *stride_k = stride;
    return sa;
  }
  at::Tensor buf = at::empty({kb, m_pad}, sa.options());
  buf.narrow(1, 0, m).copy_(sa.t());
  *stride_k = m_pad;
  return buf.narrow(1, 0, m).t();
}

// scales_b [K/128, N/128] as the kernel reads it: K-major.
at::Tensor blockwise_scales_b(const at::Tensor& sb, int64_t kb, int64_t* stride_n) {
  // (A stride past int32, which the kernel's layout holds, takes the copy below.)
  if ((sb.size(0) == 1 || sb.stride(0) == 1) && (sb.size(1) == 1 || sb.stride(1) <= INT32_MAX)) {
    *stride_n = sb.size(1) == 1 ? kb : sb.stride(1);
    return sb;
  }
  at::Tensor buf = sb.t().contiguous().t();
  *stride_n = kb;
  return buf;
}

// out[m, n] = sum_kb (A[m, kb-block] . B[kb-block, n]) * scales_a[m, kb] * scales_b[kb, n / 128]
at::Tensor fp8_blockwise_scaled_mm(const at::Tensor& mat_a, const at::Tensor& mat_b, const at::Tensor& scales_a,
                                   const at::Tensor& scales_b, at::ScalarType out_dtype) {
  const char* op = "fp8_blockwise_scaled_mm";
  check_ab(op, mat_a, mat_b, at::kFloat8_e4m3fn);
  const OutType ot = out_type_of(op, out_dtype);
  const int64_t m = mat_a.size(0), n = mat_b.size(1), k = mat_a.size(1);
  SGL_CHECK(k % 128 == 0, op, "mat_a.shape[1] (K) must be a multiple of 128 (the block size), got ", k);
  SGL_CHECK(n % 128 == 0, op, "mat_b.shape[1] (N) must be a multiple of 128 (the block size), got ", n);
  if (m > 0) check_cutlass_shape(op, m, n, k);
  const int64_t kb = k / 128, nb = n / 128;
  check_same_device(op, "scales_a", scales_a, "mat_a", mat_a);
  check_dtype(op, "scales_a", scales_a, {at::kFloat});
  check_dim(op, "scales_a", scales_a, 2);
  SGL_CHECK(scales_a.size(0) == m && scales_a.size(1) == kb, op, "scales_a must have shape [M, K / 128] = [", m,
            ", ", kb, "], got ", scales_a.sizes());
  check_same_device(op, "scales_b", scales_b, "mat_a", mat_a);
  check_dtype(op, "scales_b", scales_b, {at::kFloat});
  check_dim(op, "scales_b", scales_b, 2);
  SGL_CHECK(scales_b.size(0) == kb && scales_b.size(1) == nb, op, "scales_b must have shape [K / 128, N / 128] = [",
            kb, ", ", nb, "], got ", scales_b.sizes());
  at::Tensor out = at::empty({m, n}, mat_a.options().dtype(out_dtype));
  if (m == 0) return out;
  require_kernel(op, "gemm_sm90", kArchsSm90, mat_a);
  const c10::cuda::CUDAGuard guard(mat_a.device());
  BlockwiseMmParams p{};
  const at::Tensor sa = blockwise_scales_a(scales_a, m, kb, &p.sa_stride_k);
  const at::Tensor sb = blockwise_scales_b(scales_b, kb, &p.sb_stride_n);
  p.a = mat_a.data_ptr();
  p.b = mat_b.data_ptr();
  p.scales_a = sa.data_ptr<float>();
  p.scales_b = sb.data_ptr<float>();
  p.out = out.data_ptr();
  p.m = m;
  p.n = n;
  p.k = k;
  p.lda = m > 1 ? mat_a.stride(0) : k;
  p.ldb = mat_b.stride(1);
  p.ldd = n;
  p.out_type = ot;
  p.sm_count = device_sm_count(mat_a.get_device());
  if (const char* c = std::getenv("SGL_KERNEL_BLOCKWISE_MM_CONFIG"); c != nullptr && *c != '\0') {
    p.config = std::atoi(c);
  }
  if (const char* z = std::getenv("SGL_KERNEL_BLOCKWISE_MM_SWIZZLE"); z != nullptr && *z != '\0') {
    p.swizzle = std::atoi(z);
  }
  if constexpr (kBuiltSm90) run_sm90(op, mat_a, p, &fp8_blockwise_mm_workspace, &launch_fp8_blockwise_mm_sm90);
  return out;
}

// ---------------------------------------------------------------------------------------
// fp8_blockwise_scaled_grouped_mm

// A scratch argument the op fills: `dtype`, contiguous, with `numel` elements.
void check_scratch(const char* op, const char* name, const at::Tensor& t, const at::Tensor& ref, at::ScalarType dtype,
                   int64_t numel, const char* what) {
  check_same_device(op, name, t, "a", ref);
  check_dtype(op, name, t, {dtype});
  check_contiguous(op, name, t);
  SGL_CHECK(t.numel() == numel, op, name, " must have ", what, " = ", numel, " elements, got shape ", t.sizes());
}

// For each expert e: output[o_e : o_e + M_e] = fp8_blockwise_scaled_mm(a[rows], b[e], scales_a[rows],
// scales_b[e]) with (M_e, N, K) = problem_sizes[e], o_e = expert_offsets[e] (API.md 2.4). The
// strides come from the tensors themselves; stride_a / stride_b / stride_c are checked for
// shape and dtype only. Rows of `output` no expert covers are not written.
void fp8_blockwise_scaled_grouped_mm(at::Tensor& output, at::Tensor& a_ptrs, at::Tensor& b_ptrs, at::Tensor& out_ptrs,
                                     at::Tensor& a_scales_ptrs, at::Tensor& b_scales_ptrs, const at::Tensor& a,
                                     const at::Tensor& b, const at::Tensor& scales_a, const at::Tensor& scales_b,
                                     const at::Tensor& stride_a, const at::Tensor& stride_b,
                                     const at::Tensor& stride_c, at::Tensor& layout_sfa, at::Tensor& layout_sfb,
                                     const at::Tensor& problem_sizes, const at::Tensor& expert_offsets,
                                     at::Tensor& workspace) {
  const char* op = "fp8_blockwise_scaled_grouped_mm";
  check_cuda(op, "a", a);
  check_dtype(op, "a", a, {at::kFloat8_e4m3fn});
  check_dim(op, "a", a, 2);
  check_same_device(op, "b", b, "a", a);
  check_dtype(op, "b", b, {at::kFloat8_e4m3fn});
  check_dim(op, "b", b, 3);
  const int64_t rows = a.size(0), k = a.size(1), num_experts = b.size(0), n = b.size(2);
  SGL_CHECK(b.size(1) == k, op, "b must have shape [E, K, N] with K = a.shape[1] = ", k, ", got ", b.sizes());
  SGL_CHECK(k > 0 && k % 128 == 0, op, "a.shape[1] (K) must be a positive multiple of 128 (the block size), got ", k);
  SGL_CHECK(n > 0 && n % 128 == 0, op, "b.shape[2] (N) must be a positive multiple of 128 (the block size), got ", n);
  SGL_CHECK(num_experts > 0, op, "b.shape[0] (E) must be at least 1, got ", num_experts);
  check_cutlass_shape(op, rows, n, k);
  // (the TMA loads: 16-byte aligned starts and strides, rows that do not overlap)
  SGL_CHECK((a.stride(1) == 1) && aligned16(a) && (rows <= 1 || (a.stride(0) % 16 == 0 && a.stride(0) >= k)), op,
            "a must be row-major, start 16-byte aligned and have a row stride >= K that is a multiple of 16, got "
            "strides ",
            a.strides());
  SGL_CHECK(b.stride(1) == 1 && aligned16(b) && b.stride(2) % 16 == 0 && b.stride(2) >= k &&
                (num_experts == 1 || b.stride(0) % 16 == 0),
            op,
            "b must be [E, K, N] with each expert column-major (the transpose view of a row-major [E, N, K] "
            "weight), start 16-byte aligned, and have N and E strides that are multiples of 16, got strides ",
            b.strides());

  check_same_device(op, "output", output, "a", a);
  check_dtype(op, "output", output, {at::kBFloat16, at::kHalf});
  check_dim(op, "output", output, 2);
  check_no_internal_overlap(op, "output", output);
  SGL_CHECK(output.size(0) == rows && output.size(1) == n, op, "output must have shape [a.shape[0], N] = [", rows,
            ", ", n, "], got ", output.sizes());
  SGL_CHECK(output.stride(1) == 1 && aligned16(output) && (rows <= 1 || output.stride(0) % 8 == 0), op,
            "output must be row-major, start 16-byte aligned and have a row stride that is a multiple of 8, got "
            "strides ",
            output.strides());

  const int64_t kb = k / 128, nb = n / 128;
  check_same_device(op, "scales_a", scales_a, "a", a);
  check_dtype(op, "scales_a", scales_a, {at::kFloat});
  check_dim(op, "scales_a", scales_a, 2);
  SGL_CHECK(scales_a.size(0) == rows && scales_a.size(1) == kb, op,
            "scales_a must have shape [a.shape[0], K / 128] = [", rows, ", ", kb, "], got ", scales_a.sizes());
  check_same_device(op, "scales_b", scales_b, "a", a);
  check_dtype(op, "scales_b", scales_b, {at::kFloat});
  check_dim(op, "scales_b", scales_b, 3);
  SGL_CHECK(scales_b.size(0) == num_experts && scales_b.size(1) == kb && scales_b.size(2) == nb, op,
            "scales_b must have shape [E, K / 128, N / 128] = [", num_experts, ", ", kb, ", ", nb, "], got ",
            scales_b.sizes());

  check_scratch(op, "problem_sizes", problem_sizes, a, at::kInt, num_experts * 3, "3 E");
  SGL_CHECK(problem_sizes.dim() == 2 && problem_sizes.size(1) == 3, op, "problem_sizes must have shape [E, 3], got ",
            problem_sizes.sizes());
  check_scratch(op, "expert_offsets", expert_offsets, a, at::kInt, num_experts, "E");
  for (auto [name, t] : {std::pair{"stride_a", &stride_a}, {"stride_b", &stride_b}, {"stride_c", &stride_c}}) {
    check_scratch(op, name, *t, a, at::kLong, num_experts, "E");
  }
  for (auto [name, t] : {std::pair{"a_ptrs", &a_ptrs}, {"b_ptrs", &b_ptrs}, {"out_ptrs", &out_ptrs},
                         {"a_scales_ptrs", &a_scales_ptrs}, {"b_scales_ptrs", &b_scales_ptrs}}) {
    check_scratch(op, name, *t, a, at::kLong, num_experts, "E");
  }
  for (auto [name, t] : {std::pair{"layout_sfa", &layout_sfa}, {"layout_sfb", &layout_sfb}}) {
    check_scratch(op, name, *t, a, at::kInt, num_experts * 5, "5 E");
  }
  check_same_device(op, "workspace", workspace, "a", a);
  check_dtype(op, "workspace", workspace, {at::kByte});
  check_contiguous(op, "workspace", workspace);
  for (auto [name, t] : {std::pair{"a", &a}, {"b", &b}, {"scales_a", &scales_a}, {"scales_b", &scales_b}}) {
    check_no_overlap(op, "output", output, name, *t);
  }
  if (rows == 0) return;
  require_kernel(op, "gemm_sm90", kArchsSm90, a);
  const c10::cuda::CUDAGuard guard(a.device());

  // CUTLASS's grouped mainloop reads each expert's scales packed K-major from its pointer
  // (rows of K / 128, and [N / 128, K / 128] per expert: the layouts it derives from the problem
  // size, not layout_sfa / layout_sfb). Other layouts are copied once into such buffers.
  const bool sa_packed = (kb == 1 || scales_a.stride(1) == 1) && (rows <= 1 || scales_a.stride(0) == kb);
  const at::Tensor sa = sa_packed ? scales_a : scales_a.contiguous();
  const bool sb_packed = (kb == 1 || scales_b.stride(1) == 1) && (nb == 1 || scales_b.stride(2) == kb);
  const at::Tensor sb = sb_packed ? scales_b : scales_b.transpose(1, 2).contiguous().transpose(1, 2);

  GroupedBlockwiseMmParams p{};
  p.a = a.data_ptr();
  p.b = b.data_ptr();
  p.scales_a = sa.data_ptr<float>();
  p.scales_b = sb.data_ptr<float>();
  p.out = output.data_ptr();
  p.problem_sizes = problem_sizes.data_ptr<int32_t>();
  p.expert_offsets = expert_offsets.data_ptr<int32_t>();
  p.a_ptrs = a_ptrs.data_ptr();
  p.b_ptrs = b_ptrs.data_ptr();
  p.out_ptrs = out_ptrs.data_ptr();
  p.a_scales_ptrs = a_scales_ptrs.data_ptr();
  p.b_scales_ptrs = b_scales_ptrs.data_ptr();
  p.layout_sfa = layout_sfa.data_ptr();
  p.layout_sfb = layout_sfb.data_ptr();
  p.num_experts = num_experts;
  p.rows = rows;
  p.n = n;
  p.k = k;
  p.lda = rows > 1 ? a.stride(0) : k;
  p.ldb = b.stride(2);
  p.ldd = rows > 1 ? output.stride(0) : n;
  p.b_stride_e = num_experts > 1 ? b.stride(0) : k * n;
  p.sb_stride_e = num_experts > 1 ? sb.stride(0) : nb * kb;
  p.out_type = output.scalar_type() == at::kBFloat16 ? OutType::kBF16 : OutType::kFP16;
  p.sm_count = device_sm_count(a.get_device());
  if (const char* c = std::getenv("SGL_KERNEL_GROUPED_MM_CONFIG"); c != nullptr && *c != '\0') {
    p.config = std::atoi(c);
  }
  if (const char* c = std::getenv("SGL_KERNEL_GROUPED_MM_SWIZZLE"); c != nullptr && *c != '\0') {
    p.swizzle = std::atoi(c);
  }
  if constexpr (kBuiltSm90) {
    // The caller's workspace when it is large enough (and aligned for CUTLASS's tensor maps),
    // else one from the caching allocator.
    const size_t need = fp8_blockwise_grouped_mm_workspace(p);
    at::Tensor ws = workspace;
    if (static_cast<size_t>(workspace.numel()) < need || reinterpret_cast<uintptr_t>(workspace.data_ptr()) % 128 != 0) {
      ws = at::empty({static_cast<int64_t>(need)}, a.options().dtype(at::kByte));
    }
    const cudaStream_t stream = current_stream(a);
    const cudaError_t err = launch_fp8_blockwise_grouped_mm_sm90(p, ws.data_ptr(), stream);
    SGL_CHECK(err != cudaErrorNotSupported, op, "no kernel configuration implements N = ", n, ", K = ", k,
              " with these strides (CUTLASS can_implement failed)");
    check_launch(op, err);
    if (debug_mode() && host_sync_allowed(stream)) {
      const int64_t flag_at = static_cast<int64_t>(fp8_blockwise_grouped_mm_flag_offset(p));
      SGL_CHECK(ws.narrow(0, flag_at, 4).view(at::kInt).item<int32_t>() == 0, op,
                "problem_sizes / expert_offsets hold an inconsistent entry (M_e < 0, o_e < 0, o_e + M_e > "
                "a.shape[0] = ",
                rows, ", or (N, K) != (", n, ", ", k, ")) (SGL_KERNEL_DEBUG=1; without it such experts are skipped)");
    }
  }
}

// [[misc ops: bindings]]

void register_impls(torch::Library& m) {
  m.impl("fp8_scaled_mm", &fp8_scaled_mm);
  m.impl("int8_scaled_mm", &int8_scaled_mm);
  m.impl("fp8_blockwise_scaled_mm", &fp8_blockwise_scaled_mm);
  m.impl("bmm_fp8", &bmm_fp8);
  m.impl("awq_dequantize", &awq_dequantize);
  m.impl("dsv3_router_gemm", &dsv3_router_gemm);
  m.impl("dsv3_fused_a_gemm", &dsv3_fused_a_gemm);
  m.impl("fp8_blockwise_scaled_grouped_mm", &fp8_blockwise_scaled_grouped_mm);
  // [[misc ops: register]]
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(sgl_kernel, m) {
  // out = (mat_a @ mat_b) * scales_a * scales_b (+ bias); mat_b column-major
  m.def("int8_scaled_mm(Tensor mat_a, Tensor mat_b, Tensor scales_a, Tensor scales_b, ScalarType out_dtype, "
        "Tensor? bias) -> Tensor");
  m.def("fp8_scaled_mm(Tensor mat_a, Tensor mat_b, Tensor scales_a, Tensor scales_b, ScalarType out_dtype, "
        "Tensor? bias) -> Tensor");
  // out = sum over 128-deep k-blocks of the block products times scales_a[m, kb] * scales_b[kb, n / 128]
  m.def("fp8_blockwise_scaled_mm(Tensor mat_a, Tensor mat_b, Tensor scales_a, Tensor scales_b, "
        "ScalarType out_dtype) -> Tensor");
  // D = (A @ B) * A_scale * B_scale per batch (cuBLASLt); B column-major per batch. The workspace is
  // written, so it is marked (API.md 1.2); inductor must keep the strides the caller gave.
  m.def("bmm_fp8(Tensor A, Tensor B, Tensor! D, Tensor A_scale, Tensor B_scale, Tensor! workspace_buffer, "
        "int cublas_handle) -> ()",
        {at::Tag::needs_fixed_stride_order});
  // out[k, n] = (w[k, n] - z[k / G, n]) * scales[k / G, n]: the 4-bit AWQ weight qweight [K, N / 8]
  // and zeros qzeros [K / G, N / 8] (AWQ nibble order), scales [K / G, N]; out in scales' dtype
  m.def("awq_dequantize(Tensor qweight, Tensor scales, Tensor qzeros) -> Tensor");
  // output = mat_a @ mat_b.T (DeepSeek-V3 router logits): mat_a [M <= 16, 7168], mat_b [E, 7168]
  m.def("dsv3_router_gemm(Tensor! output, Tensor mat_a, Tensor mat_b) -> ()");
  // output = mat_a @ mat_b (DeepSeek-V3 fused q_a/kv_a projection): mat_b [7168, 2112] column-major
  m.def("dsv3_fused_a_gemm(Tensor! output, Tensor mat_a, Tensor mat_b) -> ()");
  // output[o_e : o_e + M_e] = fp8_blockwise_scaled_mm of expert e's rows with b[e] (API.md 2.4); the
  // pointer and layout arrays and the workspace are scratch the op writes
  m.def("fp8_blockwise_scaled_grouped_mm(Tensor! output, Tensor! a_ptrs, Tensor! b_ptrs, Tensor! out_ptrs, "
        "Tensor! a_scales_ptrs, Tensor! b_scales_ptrs, Tensor a, Tensor b, Tensor scales_a, Tensor scales_b, "
        "Tensor stride_a, Tensor stride_b, Tensor stride_c, Tensor! layout_sfa, Tensor! layout_sfb, "
        "Tensor problem_sizes, Tensor expert_offsets, Tensor! workspace) -> ()");
  // [[misc ops: schemas]]
}

TORCH_LIBRARY_IMPL(sgl_kernel, CUDA, m) { register_impls(m); }

TORCH_LIBRARY_IMPL(sgl_kernel, CPU, m) { register_impls(m); }

}  // namespace sgl_kernel::gemm
