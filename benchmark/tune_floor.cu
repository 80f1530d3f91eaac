// SPDX-License-Identifier: Apache-2.0
// The data-movement floor of the decode rows that miss their 2 us goal: how long does a kernel
// take that moves exactly an op's bytes (the same tensors, sizes and read/write mix, in place
// where the op is) and does nothing else, timed as benchmark/harness.py times the op (a CUDA
// graph of 100 back-to-back calls, L2-hot, PDL on, the median per call)? Standalone (no torch):
//
//   nvcc -O3 -std=c++20 -arch=sm_90a -o /tmp/tune_floor benchmark/tune_floor.cu
//   /tmp/tune_floor [--T 1,16,128] [--streams 64] [--ops rmsnorm8192,...]
//
// Each op is a list of 16-byte-vector arrays of `vectors a row` x T rows: the inputs, and the
// outputs (an output may be an input's memory: in place). Every thread loads its vectors of
// every input, XORs them together (so each store depends on every load, as in the op), then
// stores that to its vectors of every output. Launch shapes, each with the PDL trigger early
// (after the wait), after the loads, late (after the stores) or without PDL ("nopdl": no wait,
// no trigger, no launch attribute):
//   "flat tN uU"   one flat grid over the largest array, N threads a block, U vectors a thread
//                  (the loads of all U before any store)
//   "row tN"       one block a row, N threads (each array's row split over them), a block
//                  barrier between the loads and the stores, as the norms' row-wide sum needs
//   "row tN +w"    (the norms) the block also loads a weight row (the first input's row
//                  length, one row shared by every block), as the norms do
// Each op's FLOOR line gives the fastest of each kind. These are not lower bounds: a shape
// outside this sweep can beat them (concat_mla_k's own kernel does, session 36). An empty
// kernel (one block of 32 threads) is the first row. --streams N: tune_common::extra_streams
// first (the bench's process state: benchmark/RESULTS.md, session 34).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "tune_common.cuh"

namespace {

constexpr int kMaxArrays = 4;

struct Arrays {
  const uint4* in[kMaxArrays];
  uint4* out[kMaxArrays];
  int64_t n_in[kMaxArrays];   // vectors of each input (rows x vectors a row)
  int64_t n_out[kMaxArrays];  // vectors of each output
  int row_in[kMaxArrays];     // vectors a row (row kernel)
  int row_out[kMaxArrays];
  int ins, outs;
  const uint4* weight;  // row kernel "+w": row_in[0] vectors, read by every block
};

__device__ __forceinline__ void xor_in(uint4& a, const uint4& b) {
  a.x ^= b.x;
  a.y ^= b.y;
  a.z ^= b.z;
  a.w ^= b.w;
}

// v[j] = the XOR of x[0][j] .. x[kN - 1][j].
template <int kN, int kJ>
__device__ __forceinline__ void combine(const uint4 (&x)[kN][kJ], uint4 (&v)[kJ]) {
#pragma unroll
  for (int j = 0; j < kJ; ++j) {
    v[j] = x[0][j];
#pragma unroll
    for (int k = 1; k < kN; ++k) xor_in(v[j], x[k][j]);
  }
}

// Where the dependents' launch is triggered: right after the wait, after the loads, after the
// stores (the trigger at the end), or no PDL at all (no wait, no trigger, no launch attribute).
enum class Trig { kEarly, kAfterLoads, kLate, kNone };
constexpr const char* kTrigName[] = {"early", "loads", "late", "nopdl"};

template <Trig kTrig>
__device__ __forceinline__ void at_start() {
  if constexpr (kTrig != Trig::kNone) asm volatile("griddepcontrol.wait;" ::: "memory");
  if constexpr (kTrig == Trig::kEarly) asm volatile("griddepcontrol.launch_dependents;" :::);
}

template <Trig kTrig, Trig kHere>
__device__ __forceinline__ void trigger_at() {
  if constexpr (kTrig == kHere) asm volatile("griddepcontrol.launch_dependents;" :::);
}

// kIns: the op's inputs (a.ins), at compile time: every load is issued before the first use of
// a loaded value (with a runtime count the XORs of input 0 came before the branch to input 1's
// loads, serialising two L2 round trips).
template <int kIns, int kU, Trig kTrig>
__global__ void __launch_bounds__(1024) flat_kernel(const Arrays a) {
  at_start<kTrig>();
  const int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x * kU + threadIdx.x;
  uint4 x[kIns][kU];
#pragma unroll
  for (int k = 0; k < kIns; ++k) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      x[k][u] = i < a.n_in[k] ? a.in[k][i] : make_uint4(0, 0, 0, 0);
    }
  }
  uint4 v[kU];
  combine(x, v);
  trigger_at<kTrig, Trig::kAfterLoads>();
#pragma unroll
  for (int k = 0; k < kMaxArrays; ++k) {
    if (k >= a.outs) break;
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      if (i < a.n_out[k]) a.out[k][i] = v[u];
    }
  }
  trigger_at<kTrig, Trig::kLate>();
}

// One block a row: thread j takes vectors j, j + blockDim.x, ... of each array's row (at most
// kMaxPerThread of them), then a barrier, then the stores. kWeight ("+w"): the block also
// loads a weight row (the first input's row length, one row shared by every block), as the
// norms do.
constexpr int kMaxPerThread = 8;

template <int kIns, bool kWeight, Trig kTrig>
__global__ void __launch_bounds__(1024) row_kernel(const Arrays a) {
  at_start<kTrig>();
  const int64_t row = blockIdx.x;
  constexpr int kLoads = kIns + (kWeight ? 1 : 0);
  uint4 x[kLoads][kMaxPerThread];
#pragma unroll
  for (int k = 0; k < kLoads; ++k) {
    const int n = a.row_in[k < kIns ? k : 0];
    const uint4* src = k < kIns ? a.in[k] + row * n : a.weight;
#pragma unroll
    for (int j = 0; j < kMaxPerThread; ++j) {
      const int c = threadIdx.x + j * blockDim.x;
      x[k][j] = c < n ? src[c] : make_uint4(0, 0, 0, 0);
    }
  }
  uint4 v[kMaxPerThread];
  combine(x, v);
  trigger_at<kTrig, Trig::kAfterLoads>();
  __syncthreads();
#pragma unroll
  for (int k = 0; k < kMaxArrays; ++k) {
    if (k >= a.outs) break;
#pragma unroll
    for (int j = 0; j < kMaxPerThread; ++j) {
      const int c = threadIdx.x + j * blockDim.x;
      if (c < a.row_out[k]) a.out[k][row * a.row_out[k] + c] = v[j];
    }
  }
  trigger_at<kTrig, Trig::kLate>();
}

__global__ void empty_kernel() {}

// An op: bytes a row of each input and output; out_alias[k] >= 0: output k is input
// out_alias[k]'s memory (in place).
struct Op {
  std::string name;
  std::vector<int64_t> in_bytes, out_bytes;
  std::vector<int> out_alias;
  bool weight = false;  // a norm: "row +w" rows too
};

std::vector<Op> all_ops() {
  // bf16 unless said. Bytes a row (token).
  return {
      // rmsnorm H=8192: x in, out.
      {"rmsnorm8192", {16384}, {16384}, {-1}, true},
      // fused_add_rmsnorm H=8192: x and residual read, both written in place.
      {"fused_add8192", {16384, 16384}, {16384, 16384}, {0, 1}, true},
      // fused_rmsnorm_quant H=7168 g=128: x in; fp8 codes and 56 fp32 scales out.
      {"rmsnorm_q7168", {14336}, {7168, 224}, {-1, -1}, true},
      // fused_add_rmsnorm_quant H=7168: x and residual in; residual in place, codes, scales.
      {"add_rmsnorm_q7168", {14336, 14336}, {14336, 7168, 224}, {1, -1, -1}, true},
      // RoPE in place, 32 q / 8 k heads of 128, an fp32 cos/sin row (128 floats) a token read.
      {"rope_q32k8", {8192, 2048, 512}, {8192, 2048}, {0, 1}},
      // concat_mla_k: k_nope [128 heads, 128] and k_rope [64] in, k [128 heads, 192] out.
      {"concat_mla_k", {32768, 128}, {49152}, {-1}},
      // the per-tensor quant's one pass, H=4096: x in, codes out (its amax pass is extra).
      {"per_tensor4096", {8192}, {4096}, {-1}},
  };
}

struct Buffers {
  std::vector<void*> in, out;
  Arrays a{};
  int max_row_vectors = 0;
  int64_t max_vectors = 0;
};

Buffers make(const Op& op, int64_t T) {
  Buffers b;
  b.a.ins = static_cast<int>(op.in_bytes.size());
  b.a.outs = static_cast<int>(op.out_bytes.size());
  for (size_t k = 0; k < op.in_bytes.size(); ++k) {
    void* p = nullptr;
    const int64_t n = T * op.in_bytes[k];
    CK(cudaMalloc(&p, std::max<int64_t>(n, 16)));
    CK(cudaMemset(p, 0, std::max<int64_t>(n, 16)));
    b.in.push_back(p);
    b.a.in[k] = static_cast<const uint4*>(p);
    b.a.row_in[k] = static_cast<int>((op.in_bytes[k] + 15) / 16);
    b.a.n_in[k] = T * op.in_bytes[k] / 16;
    b.max_row_vectors = std::max(b.max_row_vectors, b.a.row_in[k]);
    b.max_vectors = std::max(b.max_vectors, b.a.n_in[k]);
  }
  for (size_t k = 0; k < op.out_bytes.size(); ++k) {
    void* p = nullptr;
    const int64_t n = T * op.out_bytes[k];
    if (op.out_alias[k] >= 0) {
      p = b.in[op.out_alias[k]];
    } else {
      CK(cudaMalloc(&p, std::max<int64_t>(n, 16)));
      b.out.push_back(p);
    }
    b.a.out[k] = static_cast<uint4*>(p);
    b.a.row_out[k] = static_cast<int>((op.out_bytes[k] + 15) / 16);
    b.a.n_out[k] = T * op.out_bytes[k] / 16;
    b.max_row_vectors = std::max(b.max_row_vectors, b.a.row_out[k]);
    b.max_vectors = std::max(b.max_vectors, b.a.n_out[k]);
  }
  void* w = nullptr;
  CK(cudaMalloc(&w, op.in_bytes[0] + 16));
  CK(cudaMemset(w, 0, op.in_bytes[0] + 16));
  b.a.weight = static_cast<const uint4*>(w);
  b.in.push_back(w);
  return b;
}

void release(Buffers& b) {
  for (void* p : b.in) CK(cudaFree(p));
  for (void* p : b.out) CK(cudaFree(p));
}

template <typename Kernel>
cudaError_t launch(Kernel kernel, dim3 grid, dim3 block, bool pdl, cudaStream_t s, const Arrays& a) {
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t c = {};
  c.gridDim = grid;
  c.blockDim = block;
  c.stream = s;
  c.attrs = attr;
  c.numAttrs = pdl ? 1 : 0;
  return cudaLaunchKernelEx(&c, kernel, a);
}

struct Best {
  float us = 1e30f;
  std::string name;
  void add(const char* name_, float us_) {
    std::printf("    %-26s %6.2f us\n", name_, us_);
    if (us_ < us) {
      us = us_;
      name = name_;
    }
  }
};

template <int kIns, int kU, Trig kTrig>
void flat_row(const Buffers& b, int threads, cudaStream_t s, Best& best) {
  const int64_t per_block = int64_t{threads} * kU;
  const dim3 grid(static_cast<unsigned>(std::max<int64_t>(1, (b.max_vectors + per_block - 1) / per_block)));
  const float us = tune_common::graph_us(
      [&](int) { CK(launch(flat_kernel<kIns, kU, kTrig>, grid, dim3(threads), kTrig != Trig::kNone, s, b.a)); }, true, 1,
      s);
  char name[64];
  std::snprintf(name, sizeof(name), "flat t%d u%d %s (%u)", threads, kU, kTrigName[static_cast<int>(kTrig)], grid.x);
  best.add(name, us);
}

template <int kIns, int kU>
void flat_rows(const Buffers& b, cudaStream_t s, Best& best) {
  for (int threads : {128, 256, 512, 1024}) {
    flat_row<kIns, kU, Trig::kEarly>(b, threads, s, best);
    flat_row<kIns, kU, Trig::kAfterLoads>(b, threads, s, best);
    flat_row<kIns, kU, Trig::kLate>(b, threads, s, best);
    flat_row<kIns, kU, Trig::kNone>(b, threads, s, best);
  }
}

template <int kIns, bool kWeight, Trig kTrig>
void row_row(const Buffers& b, int64_t T, int threads, cudaStream_t s, Best& best) {
  const float us = tune_common::graph_us(
      [&](int) {
        CK(launch(row_kernel<kIns, kWeight, kTrig>, dim3(static_cast<unsigned>(T)), dim3(threads), kTrig != Trig::kNone, s,
                  b.a));
      },
      true, 1, s);
  char name[64];
  std::snprintf(name, sizeof(name), "row t%d%s %s", threads, kWeight ? " +w" : "", kTrigName[static_cast<int>(kTrig)]);
  best.add(name, us);
}

template <int kIns>
void sweep(const Buffers& b, int64_t T, bool weight, cudaStream_t s, Best& flat, Best& row, Best& row_w) {
  flat_rows<kIns, 1>(b, s, flat);
  flat_rows<kIns, 2>(b, s, flat);
  flat_rows<kIns, 4>(b, s, flat);
  for (int threads : {128, 256, 512, 1024}) {
    if (int64_t{threads} * kMaxPerThread < b.max_row_vectors) continue;
    if (threads > 2 * b.max_row_vectors && threads > 128) continue;
    row_row<kIns, false, Trig::kEarly>(b, T, threads, s, row);
    row_row<kIns, false, Trig::kAfterLoads>(b, T, threads, s, row);
    row_row<kIns, false, Trig::kLate>(b, T, threads, s, row);
    if (!weight) continue;
    row_row<kIns, true, Trig::kEarly>(b, T, threads, s, row_w);
    row_row<kIns, true, Trig::kAfterLoads>(b, T, threads, s, row_w);
    row_row<kIns, true, Trig::kLate>(b, T, threads, s, row_w);
  }
}

void run_op(const Op& op, int64_t T, bool weight, cudaStream_t s) {
  Buffers b = make(op, T);
  int64_t bytes = 0;
  for (int64_t x : op.in_bytes) bytes += x * T;
  for (int64_t x : op.out_bytes) bytes += x * T;
  std::printf("%s T=%lld (%.2f MB moved a call)\n", op.name.c_str(), (long long)T, bytes / 1e6);
  std::snprintf(tune_common::g_ctx, sizeof(tune_common::g_ctx), "%s T=%lld", op.name.c_str(), (long long)T);
  Best flat, row, row_w;
  switch (b.a.ins) {
    case 1: sweep<1>(b, T, weight, s, flat, row, row_w); break;
    case 2: sweep<2>(b, T, weight, s, flat, row, row_w); break;
    case 3: sweep<3>(b, T, weight, s, flat, row, row_w); break;
    default: std::printf("  (1-3 inputs only)\n"); std::exit(1);
  }
  std::printf("  FLOOR %s T=%lld: flat %.2f (%s), row %.2f (%s)", op.name.c_str(), (long long)T, flat.us,
              flat.name.c_str(), row.us, row.name.c_str());
  if (weight) std::printf(", row +w %.2f (%s)", row_w.us, row_w.name.c_str());
  std::printf("\n");
  release(b);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<int64_t> Ts = {1, 16, 128};
  int streams = 0;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--T")) Ts = tune_common::parse_list(argv[i + 1]);
    if (!std::strcmp(argv[i], "--streams")) streams = std::atoi(argv[i + 1]);
    if (!std::strcmp(argv[i], "--ops")) only = std::string(",") + argv[i + 1] + ",";
  }
  tune_common::print_device();
  cudaStream_t s;
  CK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  tune_common::extra_streams(s, streams);
  tune_common::copy_gbps(s);
  for (bool pdl : {true, false}) {
    const float us = tune_common::graph_us(
        [&](int) {
          cudaLaunchAttribute attr[1];
          attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
          attr[0].val.programmaticStreamSerializationAllowed = 1;
          cudaLaunchConfig_t c = {};
          c.gridDim = dim3(1);
          c.blockDim = dim3(32);
          c.stream = s;
          c.attrs = attr;
          c.numAttrs = pdl ? 1 : 0;
          CK(cudaLaunchKernelEx(&c, empty_kernel));
        },
        true, 1, s);
    std::printf("empty kernel %s: %.2f us\n", pdl ? "pdl" : "nopdl", us);
  }
  for (const Op& op : all_ops()) {
    if (!only.empty() && only.find("," + op.name + ",") == std::string::npos) continue;
    for (int64_t T : Ts) run_op(op, T, op.weight, s);
  }
  return 0;
}
