// SPDX-License-Identifier: Apache-2.0
// Sweep of the row-concatenation kernels behind concat_mla_k and concat_mla_absorb_q,
// standalone (no torch): the production launcher (csrc/elementwise/concat.cu, included below)
// and candidate shapes of its tile kernel, against the kernel it replaced ("old", copied from
// git: one 16-byte vector per thread over a flattened index), which is the baseline row. Every
// variant's output buffer must equal old's byte for byte, gaps included: the output is poisoned
// (0xA5) before each run, so a variant that writes outside the rows, or misses a byte, differs.
// Old's own output is checked against a host copy loop where the output is at most 64 MB.
//
//   nvcc -O3 -std=c++20 -arch=sm_90a --expt-relaxed-constexpr -Iinclude -Icsrc -o /tmp/tune_concat benchmark/elementwise/tune_concat_mla.cu
//   /tmp/tune_concat    # estimated 10-20 s on an H200 (not yet run); exit status 1 on any mismatch
//
// Options: --no-pdl, --check-only, --streams N (tune_common::extra_streams first).
//
// Check cases: the bench layouts at every bench shape, plus concat_mla_k with 20 heads and a
// padded output (tail blocks, token boundaries inside a thread's rows), with k_rope given per
// head (no broadcast), with a misaligned k_rope (prod takes the scalar flat kernel) and in fp32
// (prod takes the vector flat kernel); concat_mla_absorb_q with T1 = 20 and a padded output.
// Data: random bits (every bf16 pattern, NaNs included: the op is a copy).
//
// Timing follows benchmark/harness.py, so the numbers line up with benchmark/RESULTS.md: the
// median per-call time over R replays of a CUDA graph of N back-to-back launches (PDL on unless
// --no-pdl, as the bindings launch on sm90). A call whose bytes fit four times in L2 reuses one
// input set ("hot"); larger calls rotate among K sets with K * bytes >= 4 * L2 ("rotK").
// Shapes and layouts as bench_mla_copy.py (DeepSeek-V3, bf16):
// - concat_mla_k: k [T, 128, 192] contiguous; k_nope = kv[..., :128] of kv [T, 128, 256];
//   k_rope = latent[:, 512:] of latent [T, 576], viewed [T, 1, 64]. T = 1 ... 16384.
// - concat_mla_absorb_q: a = [T1, T0, 512] transposed to [T0, T1, 512]; b = q[..., 128:] of
//   q [T0, T1, 192]; out [T0, T1, 576]; T1 = 128, T0 = 1 ... 4096.
// GB/s = (bytes read + written, as the bench counts them) / time.
//
// Variants: "old" = the previous kernel; "prod" = launch_concat_rows; "gG rR tN" = the tile
// kernel with G lanes per output row, R rows per thread, N-thread blocks; "nc" = read-only
// no-L1-allocate loads (else plain loads); "cs" = evict-first stores (else plain stores).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "elementwise/concat.cu"
#include "../tune_common.cuh"

// ---------------------------------------------------------------------------------------
// The previous kernel (csrc/elementwise/concat.cu before the rewrite), renamed.

namespace old_concat {

using namespace sgl_kernel;
using sgl_kernel::elementwise::ConcatRowsParams;
using sgl_kernel::elementwise::RowStrides;

constexpr int kThreads = 256;

// U: the copy unit (uint4 for 16-byte vectors, or the element type's size). All sizes and
// strides below are in units of U.
template <typename U>
__global__ void __launch_bounds__(kThreads)
    concat_rows_kernel(U* __restrict__ out, const U* __restrict__ a, const U* __restrict__ b,
                       RowStrides out_rows, RowStrides a_rows, RowStrides b_rows, FastDivmod rows_inner,
                       FastDivmod cols, uint32_t a_cols, uint64_t total) {
  SGL_PDL_WAIT();
  const uint64_t i = static_cast<uint64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (i < total) {
    uint64_t row;
    uint32_t col;
    if (total <= 0xffffffffull) {
      uint32_t r32;
      cols.divmod(static_cast<uint32_t>(i), r32, col);
      row = r32;
    } else {
      row = i / cols.divisor;
      col = static_cast<uint32_t>(i - row * cols.divisor);
    }
    uint32_t outer, inner;
    rows_inner.divmod(static_cast<uint32_t>(row), outer, inner);
    const U* src = col < a_cols ? a + outer * a_rows.outer + inner * a_rows.inner + col
                                : b + outer * b_rows.outer + inner * b_rows.inner + (col - a_cols);
    out[outer * out_rows.outer + inner * out_rows.inner + col] = *src;
  }
  SGL_PDL_LAUNCH_DEPENDENTS();
}

inline RowStrides scaled(const RowStrides& s, int64_t factor) { return {s.outer / factor, s.inner / factor}; }

template <typename U>
cudaError_t launch_unit(const ConcatRowsParams& p, cudaStream_t stream) {
  const int64_t f = static_cast<int64_t>(sizeof(U)) / p.elem_bytes;
  const int64_t a_cols = p.a_cols / f, b_cols = p.b_cols / f, cols = a_cols + b_cols;
  const uint64_t total = static_cast<uint64_t>(p.rows) * static_cast<uint64_t>(cols);
  const uint64_t blocks = (total + kThreads - 1) / kThreads;
  if (blocks >= (uint64_t{1} << 31)) return cudaErrorInvalidValue;
  return launch_kernel(concat_rows_kernel<U>, dim3(static_cast<uint32_t>(blocks)), dim3(kThreads), 0, stream,
                       p.enable_pdl, static_cast<U*>(p.out), static_cast<const U*>(p.a), static_cast<const U*>(p.b),
                       scaled(p.out_rows, f), scaled(p.a_rows, f), scaled(p.b_rows, f),
                       FastDivmod(static_cast<uint32_t>(p.rows_inner)), FastDivmod(static_cast<uint32_t>(cols)),
                       static_cast<uint32_t>(a_cols), total);
}

inline bool divisible(const RowStrides& s, int64_t f) { return s.outer % f == 0 && s.inner % f == 0; }

cudaError_t launch_concat_rows(const ConcatRowsParams& p, cudaStream_t stream) {
  if (p.rows == 0 || p.a_cols + p.b_cols == 0) return cudaSuccess;
  if (p.rows >= (int64_t{1} << 32) || p.rows_inner < 1) return cudaErrorInvalidValue;
  const int64_t f = 16 / p.elem_bytes;
  const bool vec_ok = is_aligned16(p.out) && is_aligned16(p.a) && is_aligned16(p.b) && p.a_cols % f == 0 &&
                      p.b_cols % f == 0 && divisible(p.out_rows, f) && divisible(p.a_rows, f) &&
                      divisible(p.b_rows, f);
  if (vec_ok) return launch_unit<uint4>(p, stream);
  switch (p.elem_bytes) {
    case 1: return launch_unit<uint8_t>(p, stream);
    case 2: return launch_unit<uint16_t>(p, stream);
    case 4: return launch_unit<uint32_t>(p, stream);
    case 8: return launch_unit<uint64_t>(p, stream);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace old_concat

namespace tune {

using namespace sgl_kernel;
using namespace sgl_kernel::elementwise;
using LP = LoadPolicy;
using SP = StorePolicy;

using tune_common::g_ctx;  // what was running, for CK's error message
using tune_common::median;
using tune_common::parse_list;

constexpr int64_t kHeads = 128, kDn = 128, kDr = 64, kDv = 128, kLatent = 512;
constexpr uint8_t kPoison = 0xA5;

// ---------------------------------------------------------------------------------------
// Variants

using LaunchFn = cudaError_t (*)(const ConcatRowsParams&, cudaStream_t);

enum Op { kMlaK = 0, kAbsorbQ = 1 };
static const char* const kOpNames[] = {"concat_mla_k", "concat_mla_absorb_q"};

struct Variant {
  const char* name;
  LaunchFn fn;
  int a_vecs, b_vecs;  // the tile shape the variant needs (0: any shape)
  bool applies(const ConcatRowsParams& p) const { return a_vecs == 0 || tile_fits(p, a_vecs, b_vecs); }
};

// The flat kernel with a load policy on 16-byte units; production's launcher where those do
// not apply (misaligned or odd-sized rows).
template <LP kLoad, SP kStore = SP::kDefault>
cudaError_t launch_flat_policy(const ConcatRowsParams& p, cudaStream_t stream) {
  return vec_ok(p) ? launch_flat<uint4, kLoad, kStore>(p, stream) : launch_concat_rows(p, stream);
}

static const Variant kMlaKVariants[] = {
    {"old", &old_concat::launch_concat_rows, 0, 0},
    {"prod", &launch_concat_rows, 0, 0},
    {"g8 r1 t128 nc", &launch_mla_k_tile<8, 1, 128, LP::kStream>, 16, 8},
    {"g16 r1 t128 nc", &launch_mla_k_tile<16, 1, 128, LP::kStream>, 16, 8},
    {"g8 r2 t256", &launch_mla_k_tile<8, 2, 256, LP::kDefault>, 16, 8},
    {"g8 r1 t256 cs", &launch_mla_k_tile<8, 1, 256, LP::kDefault, SP::kStream>, 16, 8},
    // Session 16: L2 evict_last loads, as torch.compile's kernels load (it reads 1.0-2.5 % faster
    // at T >= 1024: one 16-byte vector a thread over the flat output, XBLOCK 1024, 4 warps).
    {"g8 r1 t256 keep", &launch_mla_k_tile<8, 1, 256, LP::kKeepL2>, 16, 8},
    {"g8 r1 t256 keepL1", &launch_mla_k_tile<8, 1, 256, LP::kKeepL1L2>, 16, 8},
    {"g8 r2 t256 keep", &launch_mla_k_tile<8, 2, 256, LP::kKeepL2>, 16, 8},
    {"g8 r1 t128 keep", &launch_mla_k_tile<8, 1, 128, LP::kKeepL2>, 16, 8},
    {"flat keep", &launch_flat_policy<LP::kKeepL2>, 0, 0},
    {"flat keepL1", &launch_flat_policy<LP::kKeepL1L2>, 0, 0},
    {"g8 r1 t128 keep cs", &launch_mla_k_tile<8, 1, 128, LP::kKeepL2, SP::kStream>, 16, 8},
    {"g8 r1 t128 pf", &launch_mla_k_tile<8, 1, 128, LP::kPrefetch>, 16, 8},
    {"flat keep cs", &launch_flat_policy<LP::kKeepL2, SP::kStream>, 0, 0},
    // Session 41: fewer, larger blocks at the decode shapes (T=128: 1024 blocks of 128 threads).
    {"g8 r1 t256 nc", &launch_mla_k_tile<8, 1, 256, LP::kStream>, 16, 8},
    {"g8 r1 t512 nc", &launch_mla_k_tile<8, 1, 512, LP::kStream>, 16, 8},
    {"g8 r1 t1024 nc", &launch_mla_k_tile<8, 1, 1024, LP::kStream>, 16, 8},
    {"g8 r1 t128 nc cs", &launch_mla_k_tile<8, 1, 128, LP::kStream, SP::kStream>, 16, 8},
};
static const Variant kAbsorbQVariants[] = {
    {"old", &old_concat::launch_concat_rows, 0, 0},
    {"prod", &launch_concat_rows, 0, 0},
    {"g24 r1 t192 nc", &launch_absorb_q_tile<24, 1, 192, LP::kStream>, 64, 8},
    {"g8 r1 t256", &launch_absorb_q_tile<8, 1, 256, LP::kDefault>, 64, 8},
    {"g24 r2 t192", &launch_absorb_q_tile<24, 2, 192, LP::kDefault>, 64, 8},
    {"g24 r1 t192 cs", &launch_absorb_q_tile<24, 1, 192, LP::kDefault, SP::kStream>, 64, 8},
    {"g24 r1 t192 keep", &launch_absorb_q_tile<24, 1, 192, LP::kKeepL2>, 64, 8},
    {"g24 r1 t192 keepL1", &launch_absorb_q_tile<24, 1, 192, LP::kKeepL1L2>, 64, 8},
    {"g8 r1 t256 keep", &launch_absorb_q_tile<8, 1, 256, LP::kKeepL2>, 64, 8},
    {"g24 r2 t192 keep", &launch_absorb_q_tile<24, 2, 192, LP::kKeepL2>, 64, 8},
    {"flat keep", &launch_flat_policy<LP::kKeepL2>, 0, 0},
    {"flat keepL1", &launch_flat_policy<LP::kKeepL1L2>, 0, 0},
    {"g24 r1 t192 keep cs", &launch_absorb_q_tile<24, 1, 192, LP::kKeepL2, SP::kStream>, 64, 8},
    {"g24 r1 t192 pf", &launch_absorb_q_tile<24, 1, 192, LP::kPrefetch>, 64, 8},
    {"flat keep cs", &launch_flat_policy<LP::kKeepL2, SP::kStream>, 0, 0},
    {"g24 r1 t96 nc", &launch_absorb_q_tile<24, 1, 96, LP::kStream>, 64, 8},
    {"g24 r1 t384 nc", &launch_absorb_q_tile<24, 1, 384, LP::kStream>, 64, 8},
    {"g24 r1 t768 nc", &launch_absorb_q_tile<24, 1, 768, LP::kStream>, 64, 8},
    {"g24 r1 t192 nc cs", &launch_absorb_q_tile<24, 1, 192, LP::kStream, SP::kStream>, 64, 8},
};
constexpr int kNumVariants = sizeof(kMlaKVariants) / sizeof(kMlaKVariants[0]);
static_assert(kNumVariants == sizeof(kAbsorbQVariants) / sizeof(kAbsorbQVariants[0]), "one table width");

static const Variant* variants(Op op) { return op == kMlaK ? kMlaKVariants : kAbsorbQVariants; }

// ---------------------------------------------------------------------------------------
// Layouts and buffers

// Rows r = o * inner + i (o < outer, i < inner); tensor X's row r starts at element
// X_off + o * X_s.outer + i * X_s.inner of its allocation.
struct Layout {
  std::string name;
  int64_t outer = 0, inner = 0;
  int64_t a_cols = 0, b_cols = 0;
  int elem = 2;
  RowStrides out_s{}, a_s{}, b_s{};
  int64_t out_off = 0, a_off = 0, b_off = 0;
  int64_t rows() const { return outer * inner; }
};

static int64_t extent_bytes(const Layout& l, const RowStrides& s, int64_t off, int64_t cols) {
  const int64_t elems = off + (l.outer - 1) * s.outer + (l.inner - 1) * s.inner + cols;
  return (elems * l.elem + 255) / 256 * 256;
}

// concat_mla_k as bench_mla_copy.py passes it: k [T, H, 192]; kv [T, H, 256]; latent [T, 576].
static Layout mla_k_layout(int64_t t, int64_t heads = kHeads) {
  Layout l;
  l.name = "T=" + std::to_string(t);
  l.outer = t;
  l.inner = heads;
  l.a_cols = kDn;
  l.b_cols = kDr;
  l.out_s = {heads * (kDn + kDr), kDn + kDr};
  l.a_s = {heads * (kDn + kDv), kDn + kDv};
  l.b_s = {kLatent + kDr, 0};
  l.b_off = kLatent;
  return l;
}

// concat_mla_absorb_q as bench_mla_copy.py passes it: a = [T1, T0, 512].transpose(0, 1);
// b = q[..., 128:] of q [T0, T1, 192]; out [T0, T1, 576].
static Layout absorb_q_layout(int64_t t0, int64_t t1 = kHeads) {
  Layout l;
  l.name = "T0=" + std::to_string(t0);
  l.outer = t0;
  l.inner = t1;
  l.a_cols = kLatent;
  l.b_cols = kDr;
  l.out_s = {t1 * (kLatent + kDr), kLatent + kDr};
  l.a_s = {kLatent, t0 * kLatent};
  l.b_s = {t1 * (kDn + kDr), kDn + kDr};
  l.b_off = kDn;
  return l;
}

// Bytes per call as bench_mla_copy.py counts them.
static double bench_bytes(Op op, int64_t t) {
  if (op == kMlaK) return 2.0 * (t * kHeads * kDn + t * kDr + t * kHeads * (kDn + kDr));
  return 2.0 * 2.0 * t * kHeads * (kLatent + kDr);
}

__host__ __device__ inline uint32_t hash32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x7feb352du;
  x ^= x >> 15;
  x *= 0x846ca68bu;
  x ^= x >> 16;
  return x;
}

__global__ void fill_kernel(uint32_t* p, size_t n_words, uint32_t seed) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n_words; i += size_t(gridDim.x) * blockDim.x) {
    p[i] = hash32(static_cast<uint32_t>(i) * 2654435761u ^ hash32(static_cast<uint32_t>(i >> 32) ^ seed));
  }
}

struct Buffers {
  uint8_t *out = nullptr, *a = nullptr, *b = nullptr;
  size_t out_bytes = 0, a_bytes = 0, b_bytes = 0;

  void alloc(const Layout& l, uint32_t seed, cudaStream_t s) {
    out_bytes = extent_bytes(l, l.out_s, l.out_off, l.a_cols + l.b_cols);
    a_bytes = extent_bytes(l, l.a_s, l.a_off, l.a_cols);
    b_bytes = extent_bytes(l, l.b_s, l.b_off, l.b_cols);
    CK(cudaMalloc(&out, out_bytes));
    CK(cudaMalloc(&a, a_bytes));
    CK(cudaMalloc(&b, b_bytes));
    fill_kernel<<<1024, 256, 0, s>>>(reinterpret_cast<uint32_t*>(a), a_bytes / 4, seed);
    fill_kernel<<<1024, 256, 0, s>>>(reinterpret_cast<uint32_t*>(b), b_bytes / 4, seed ^ 0x5bd1e995u);
    CK(cudaGetLastError());
    CK(cudaMemsetAsync(out, kPoison, out_bytes, s));
  }
  void free_all() {
    CK(cudaFree(out));
    CK(cudaFree(a));
    CK(cudaFree(b));
    out = a = b = nullptr;
  }
  ConcatRowsParams params(const Layout& l, bool pdl) const {
    ConcatRowsParams p{};
    p.out = out + l.out_off * l.elem;
    p.a = a + l.a_off * l.elem;
    p.b = b + l.b_off * l.elem;
    p.out_rows = l.out_s;
    p.a_rows = l.a_s;
    p.b_rows = l.b_s;
    p.rows = l.rows();
    p.rows_inner = l.inner;
    p.a_cols = l.a_cols;
    p.b_cols = l.b_cols;
    p.elem_bytes = l.elem;
    p.enable_pdl = pdl;
    return p;
  }
};

// ---------------------------------------------------------------------------------------
// Comparison

struct CmpResult {
  unsigned long long ndiff;
  unsigned long long first;
};

__global__ void compare_kernel(const uint4* a, const uint4* b, size_t n16, CmpResult* out) {
  unsigned long long nd = 0, first = ~0ull;
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n16; i += size_t(gridDim.x) * blockDim.x) {
    const uint4 x = a[i], y = b[i];
    const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      const uint32_t ne = __vcmpne4(xs[k], ys[k]);
      if (ne) {
        nd += __popc(ne) / 8;
        first = min(first, static_cast<unsigned long long>(i * 16 + k * 4 + (__ffs(ne) - 1) / 8));
      }
    }
  }
  if (nd) {
    atomicAdd(&out->ndiff, nd);
    atomicMin(&out->first, first);
  }
}

static CmpResult* g_cmp = nullptr;

// n: a multiple of 16 (every allocation is a multiple of 256 bytes).
static CmpResult compare(const uint8_t* a, const uint8_t* b, size_t n, cudaStream_t s) {
  const CmpResult zero{0, ~0ull};
  CK(cudaMemcpyAsync(g_cmp, &zero, sizeof(CmpResult), cudaMemcpyHostToDevice, s));
  compare_kernel<<<1024, 256, 0, s>>>(reinterpret_cast<const uint4*>(a), reinterpret_cast<const uint4*>(b), n / 16,
                                      g_cmp);
  CK(cudaGetLastError());
  CmpResult r;
  CK(cudaMemcpyAsync(&r, g_cmp, sizeof(CmpResult), cudaMemcpyDeviceToHost, s));
  CK(cudaStreamSynchronize(s));
  return r;
}

// Old's output against a host copy loop (poisoned buffer, rows copied): differing bytes.
static size_t host_check(const Layout& l, const Buffers& buf, const uint8_t* got_dev) {
  std::vector<uint8_t> a(buf.a_bytes), b(buf.b_bytes), want(buf.out_bytes, kPoison), got(buf.out_bytes);
  CK(cudaMemcpy(a.data(), buf.a, buf.a_bytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(b.data(), buf.b, buf.b_bytes, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(got.data(), got_dev, buf.out_bytes, cudaMemcpyDeviceToHost));
  const int64_t e = l.elem;
  for (int64_t o = 0; o < l.outer; ++o) {
    for (int64_t i = 0; i < l.inner; ++i) {
      uint8_t* dst = want.data() + (l.out_off + o * l.out_s.outer + i * l.out_s.inner) * e;
      std::memcpy(dst, a.data() + (l.a_off + o * l.a_s.outer + i * l.a_s.inner) * e, l.a_cols * e);
      std::memcpy(dst + l.a_cols * e, b.data() + (l.b_off + o * l.b_s.outer + i * l.b_s.inner) * e, l.b_cols * e);
    }
  }
  size_t bad = 0;
  for (size_t k = 0; k < want.size(); ++k) bad += want[k] != got[k];
  return bad;
}

// ---------------------------------------------------------------------------------------
// Bitwise check against old

struct Options {
  bool pdl = true, check_only = false;
  int streams = 0;  // --streams N: tune_common::extra_streams first (a torch process's stream pools)
};

static int check_layout(Op op, const Layout& l, const Options& opt, cudaStream_t s) {
  int failures = 0;
  Buffers buf;
  buf.alloc(l, 0x9e3779b9u ^ static_cast<uint32_t>(l.rows()), s);
  uint8_t* ref = nullptr;
  CK(cudaMalloc(&ref, buf.out_bytes));
  const ConcatRowsParams p = buf.params(l, opt.pdl);
  const Variant* vs = variants(op);
  int checked = 0;
  for (int vi = 0; vi < kNumVariants; ++vi) {
    const Variant& var = vs[vi];
    if (!var.applies(p)) continue;
    std::snprintf(g_ctx, sizeof(g_ctx), "check %s %s %s", kOpNames[op], l.name.c_str(), var.name);
    CK(cudaMemsetAsync(buf.out, kPoison, buf.out_bytes, s));
    CK(var.fn(p, s));
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s));
    if (vi == 0) {
      CK(cudaMemcpyAsync(ref, buf.out, buf.out_bytes, cudaMemcpyDeviceToDevice, s));
      if (buf.out_bytes <= (size_t{64} << 20)) {
        const size_t bad = host_check(l, buf, buf.out);
        if (bad) {
          ++failures;
          std::printf("MISMATCH %s %s: old differs from the host copy in %zu bytes\n", kOpNames[op], l.name.c_str(),
                      bad);
        }
      }
      continue;
    }
    ++checked;
    const CmpResult r = compare(buf.out, ref, buf.out_bytes, s);
    if (r.ndiff) {
      ++failures;
      uint8_t got = 0, want = 0;
      CK(cudaMemcpy(&got, buf.out + r.first, 1, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(&want, ref + r.first, 1, cudaMemcpyDeviceToHost));
      std::printf("MISMATCH %s %s %s: %llu bytes differ, first at byte %llu of the output buffer: %02x (old %02x)\n",
                  kOpNames[op], l.name.c_str(), var.name, r.ndiff, r.first, got, want);
    }
  }
  std::printf("check %-20s %-28s %d variants: %s (%.1f MB each)\n", kOpNames[op], l.name.c_str(), checked,
              failures ? "MISMATCH" : "bytewise equal to old", buf.out_bytes / 1e6);
  CK(cudaFree(ref));
  buf.free_all();
  return failures;
}

static int check_all(const Options& opt, cudaStream_t s) {
  int failures = 0;
  for (const int64_t t : {1, 16, 128, 1024, 4096, 16384}) failures += check_layout(kMlaK, mla_k_layout(t), opt, s);
  {  // 20 heads, padded output rows and tokens: tail blocks, tokens changing inside a thread's rows
    Layout l = mla_k_layout(7, 20);
    l.name = "T=7 H=20 padded out";
    l.out_s = {20 * 200 + 8, 200};
    l.out_off = 8;
    failures += check_layout(kMlaK, l, opt, s);
  }
  {  // k_rope per head: no broadcast
    Layout l = mla_k_layout(3);
    l.name = "T=3 k_rope per head";
    l.b_s = {kHeads * kDr, kDr};
    l.b_off = 0;
    failures += check_layout(kMlaK, l, opt, s);
  }
  {  // misaligned k_rope: prod takes the scalar flat kernel
    Layout l = mla_k_layout(5);
    l.name = "T=5 k_rope misaligned";
    l.b_off = kLatent + 1;
    failures += check_layout(kMlaK, l, opt, s);
  }
  {  // fp32: 32 + 16 vectors per row, prod takes the vector flat kernel
    Layout l = mla_k_layout(3);
    l.name = "T=3 fp32";
    l.elem = 4;
    failures += check_layout(kMlaK, l, opt, s);
  }
  for (const int64_t t0 : {1, 16, 128, 1024, 4096}) failures += check_layout(kAbsorbQ, absorb_q_layout(t0), opt, s);
  {  // T1 = 20, padded output rows and tokens: tail blocks
    Layout l = absorb_q_layout(9, 20);
    l.name = "T0=9 T1=20 padded out";
    l.out_s = {20 * 584 + 16, 584};
    l.out_off = 8;
    failures += check_layout(kAbsorbQ, l, opt, s);
  }
  return failures;
}

// ---------------------------------------------------------------------------------------
// Timing

static void time_op(Op op, const std::vector<int64_t>& ts, const Options& opt, cudaStream_t s, int l2_bytes) {
  const int nt = static_cast<int>(ts.size());
  std::vector<float> us(kNumVariants * nt, 0.f), gbps(kNumVariants * nt, 0.f);
  std::vector<std::string> modes(nt);
  const Variant* vs = variants(op);
  for (int ti = 0; ti < nt; ++ti) {
    const int64_t t = ts[ti];
    const Layout l = op == kMlaK ? mla_k_layout(t) : absorb_q_layout(t);
    const double bytes = bench_bytes(op, t);
    const bool hot = bytes * 4 <= l2_bytes;
    const int nsets = hot ? 1
                          : static_cast<int>(std::max(1.0, std::min({64.0, std::ceil(4.0 * l2_bytes / bytes),
                                                                     std::floor(4294967296.0 / bytes)})));
    modes[ti] = hot ? "hot" : "rot" + std::to_string(nsets);
    // ~2 ms per replay for rotated sets (at ~4 TB/s), 100 calls for hot ones.
    const double est_us = 1.0 + bytes / 4e6;
    int calls = hot ? 100 : static_cast<int>(std::min(100.0, std::max(2.0, std::ceil(2000.0 / est_us))));
    calls = (calls + nsets - 1) / nsets * nsets;
    const int reps = 15;
    std::vector<Buffers> sets(nsets);
    for (int si = 0; si < nsets; ++si) sets[si].alloc(l, 17u + si, s);
    for (int vi = 0; vi < kNumVariants; ++vi) {
      const Variant& var = vs[vi];
      std::snprintf(g_ctx, sizeof(g_ctx), "time %s %s %s", kOpNames[op], l.name.c_str(), var.name);
      CK(var.fn(sets[0].params(l, opt.pdl), s));  // warm-up, outside the graph
      CK(cudaStreamSynchronize(s));
      const float per_call_us = tune_common::graph_replay_us(
          [&](int c) { CK(var.fn(sets[c % nsets].params(l, opt.pdl), s)); }, calls, reps, s);
      us[vi * nt + ti] = per_call_us;
      gbps[vi * nt + ti] = static_cast<float>(bytes / (per_call_us * 1e-6) / 1e9);
    }
    for (Buffers& b : sets) b.free_all();
  }

  std::printf("\n%s bf16 (%s), PDL %s: us per call (GB/s) [x old]\n", kOpNames[op],
              op == kMlaK ? "H=128 Dn=128 Dr=64" : "T1=128, 512 + 64", opt.pdl ? "on" : "off");
  std::printf("%-16s", "variant");
  for (int ti = 0; ti < nt; ++ti) {
    const std::string h = std::string(op == kMlaK ? "T=" : "T0=") + std::to_string(ts[ti]) + " " + modes[ti];
    std::printf(" %26s", h.c_str());
  }
  std::printf("\n");
  for (int vi = 0; vi < kNumVariants; ++vi) {
    std::printf("%-16s", vs[vi].name);
    for (int ti = 0; ti < nt; ++ti) {
      const int idx = vi * nt + ti;
      std::printf("  %8.2f (%5.0f) [%5.2fx]", us[idx], gbps[idx], us[ti] / us[idx]);
    }
    std::printf("\n");
  }
}

int main_impl(int argc, char** argv) {
  Options opt;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--no-pdl") {
      opt.pdl = false;
    } else if (a == "--check-only") {
      opt.check_only = true;
    } else if (a == "--streams" && i + 1 < argc) {
      opt.streams = std::atoi(argv[++i]);
    } else {
      std::printf("unknown argument %s (see the header comment of tune_concat_mla.cu)\n", a.c_str());
      return 2;
    }
  }
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  tune_common::extra_streams(s, opt.streams);
  const int l2 = tune_common::print_device();
  CK(cudaMalloc(&g_cmp, sizeof(CmpResult)));

  const int failures = check_all(opt, s);
  std::printf("%s\n", failures ? "CHECK FAILED: see the MISMATCH lines" : "check: every variant bytewise equal to old");
  if (!opt.check_only) {
    tune_common::copy_gbps(s);  // for reference
    time_op(kMlaK, {1, 16, 128, 1024, 4096, 16384}, opt, s, l2);
    time_op(kAbsorbQ, {1, 16, 128, 1024, 4096}, opt, s, l2);
  }
  CK(cudaFree(g_cmp));
  CK(cudaStreamDestroy(s));
  return failures ? 1 : 0;
}

}  // namespace tune

int main(int argc, char** argv) { return tune::main_impl(argc, argv); }
