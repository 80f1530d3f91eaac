// SPDX-License-Identifier: Apache-2.0
// Pieces shared by the standalone launch-shape sweeps (benchmark/*/tune_*.cu, no torch): the
// checked CUDA call with a context string, the median, list parsing, the device line, the
// device-copy bandwidth that the sweeps print for reference, the CUDA-graph timing of
// benchmark/harness.py (graph_us) and the hash fill of bf16 test data (fill_bf16_kernel).
// Header-only, so each sweep still builds with one nvcc command.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace tune_common {

// What was running, for the error message of CK (snprintf into it before each step).
inline char g_ctx[256] = "setup";

}  // namespace tune_common

#define CK(x)                                                                                                   \
  do {                                                                                                          \
    cudaError_t e_ = (x);                                                                                       \
    if (e_ != cudaSuccess) {                                                                                    \
      std::printf("CUDA error %s at %s:%d (%s)\n", cudaGetErrorString(e_), __FILE__, __LINE__,                \
                  ::tune_common::g_ctx);                                                                        \
      std::exit(1);                                                                                             \
    }                                                                                                           \
  } while (0)

namespace tune_common {

template <typename F>
inline F median(std::vector<F> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// "1,16,128" -> {1, 16, 128}
inline std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  for (const char* q = s; *q;) {
    v.push_back(std::strtoll(q, const_cast<char**>(&q), 10));
    while (*q == ',' || *q == ' ') ++q;
  }
  return v;
}

// Prints "<name>, <SMs> SMs, L2 <MiB> MiB" and returns the L2 size in bytes.
inline int print_device() {
  int dev = 0, l2 = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
  cudaDeviceProp prop;
  CK(cudaGetDeviceProperties(&prop, dev));
  std::printf("%s, %d SMs, L2 %d MiB\n", prop.name, prop.multiProcessorCount, l2 >> 20);
  return l2;
}

// Device-to-device copy of 1 GiB, bytes read + written per second (median of 6 after 2 warm-up
// copies), printed as "device copy: N GB/s" and returned.
inline double copy_gbps(cudaStream_t s) {
  const size_t n = size_t(1) << 30;
  void *a, *b;
  CK(cudaMalloc(&a, n));
  CK(cudaMalloc(&b, n));
  CK(cudaMemsetAsync(a, 1, n, s));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  std::vector<float> ts;
  for (int i = 0; i < 8; ++i) {
    CK(cudaEventRecord(e0, s));
    CK(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    if (i >= 2) ts.push_back(ms);
  }
  const double gbps = 2.0 * n / (median(ts) * 1e-3) / 1e9;
  std::printf("device copy: %.0f GB/s\n", gbps);
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  CK(cudaFree(a));
  CK(cudaFree(b));
  return gbps;
}

// Replay the timed graphs on the legacy default stream instead of the capture stream (as
// benchmark/harness.py does: torch replays on its current stream, the legacy stream unless a
// caller picked another). Set by a tune's --legacy.
inline bool g_replay_legacy = false;

// call(i) for i < calls captured in one CUDA graph on `s`, replayed once untimed, then `reps`
// times between two events: the median replay time per call, in microseconds.
template <typename Call>
inline float graph_replay_us(Call&& call, int calls, int reps, cudaStream_t capture_stream) {
  const cudaStream_t s = g_replay_legacy ? cudaStreamLegacy : capture_stream;
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  cudaGraph_t g;
  cudaGraphExec_t ge;
  CK(cudaStreamBeginCapture(capture_stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) call(i);
  CK(cudaStreamEndCapture(capture_stream, &g));
  CK(cudaGraphInstantiate(&ge, g, 0));
  CK(cudaGraphLaunch(ge, s));
  CK(cudaStreamSynchronize(s));
  std::vector<float> ts;
  for (int i = 0; i < reps; ++i) {
    CK(cudaEventRecord(e0, s));
    CK(cudaGraphLaunch(ge, s));
    CK(cudaEventRecord(e1, s));
    CK(cudaEventSynchronize(e1));
    float ms = 0.f;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    ts.push_back(ms * 1e3f / calls);
  }
  CK(cudaGraphExecDestroy(ge));
  CK(cudaGraphDestroy(g));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  return median(ts);
}

// benchmark/harness.py's timing of one call: call(i) (i = 0, 1, ...: the call picks its
// buffer set) is estimated eagerly, then captured `calls` times in a CUDA graph (100 when
// hot, else enough for ~2 ms, a multiple of nsets), and the median replay time over 8-40
// replays is returned per call, in microseconds.
template <typename Call>
inline float graph_us(Call&& call, bool hot, int nsets, cudaStream_t s) {
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  for (int i = 0; i < 3; ++i) call(i);
  CK(cudaStreamSynchronize(s));
  CK(cudaEventRecord(e0, s));
  for (int i = 0; i < 3; ++i) call(i);
  CK(cudaEventRecord(e1, s));
  CK(cudaEventSynchronize(e1));
  float est_ms = 0.f;
  CK(cudaEventElapsedTime(&est_ms, e0, e1));
  CK(cudaEventDestroy(e0));
  CK(cudaEventDestroy(e1));
  est_ms = std::max(est_ms / 3, 1e-3f);
  int calls = 100;
  if (!hot) {
    calls = std::min(100, std::max(2, int(std::ceil(2.0f / est_ms))));
    calls = (calls + nsets - 1) / nsets * nsets;
  }
  const int reps = std::min(40, std::max(8, int(40.0f / (calls * est_ms))));
  return graph_replay_us(call, calls, reps, s);
}

// Puts the process in the state a torch process is in once it has captured graphs after a
// warm-up on a side stream (benchmark/RESULTS.md, session 16): n empty kernels on a second
// non-blocking stream, ordered by events both ways with `s`. From then on a CUDA-graph kernel
// boundary without PDL costs about 0.18 us more on an H200 (tune_rope.cu), for the rest of the
// process; benchmark/harness.py and every serving engine time in that state. It does not
// explain everything: the norm rows of 128 tokens with PDL (late trigger included) read
// 0.1 us below the bench with or without it (session 33); extra_streams below does (session 34).
// n = 0 does nothing.
__global__ void pollute_empty_kernel() {}

// launch(i, side) for i < n on `side`, ordered after the work on `s` and before whatever `s`
// runs next by events both ways (as torch's graph warm-up on a side stream), then `s`
// synchronized.
template <typename Launch>
inline void on_side_stream(cudaStream_t s, cudaStream_t side, int n, Launch&& launch) {
  cudaEvent_t ev;
  CK(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming));
  CK(cudaEventRecord(ev, s));
  CK(cudaStreamWaitEvent(side, ev, 0));
  for (int i = 0; i < n; ++i) launch(i, side);
  CK(cudaGetLastError());
  CK(cudaEventRecord(ev, side));
  CK(cudaStreamWaitEvent(s, ev, 0));
  CK(cudaStreamSynchronize(s));
  CK(cudaEventDestroy(ev));
}

// pollute with launch(s2) (one kernel on the second stream) in place of the empty kernel.
template <typename Launch>
inline void pollute_with(cudaStream_t s, int n, Launch&& launch, const char* what) {
  if (n <= 0) return;
  cudaStream_t s2;
  CK(cudaStreamCreateWithFlags(&s2, cudaStreamNonBlocking));
  on_side_stream(s, s2, n, [&](int, cudaStream_t st) { launch(st); });
  CK(cudaStreamDestroy(s2));
  std::printf("  (polluted: %d %s launches on a second stream, as after torch's graph warm-up)\n", n, what);
}

inline void pollute(cudaStream_t s, int n) {
  pollute_with(s, n, [](cudaStream_t s2) { pollute_empty_kernel<<<1, 32, 0, s2>>>(); }, "empty");
}

// n more non-blocking streams, each running one empty kernel ordered after `s`; kept to the end
// of the process. n < 0: -n streams created, nothing run on them. n = 0 does nothing.
// A torch process gets there by itself: every torch.cuda.Stream() hands out the next of a pool
// of 32 (benchmark/harness.py's _capture takes a new one per graph). Once more than 9 streams
// have run work (16 and 64 tested; created and unused ones do not count), every CUDA-graph
// kernel in this process reads as in the bench (H200, session 34): an empty kernel 0.40 -> 0.58
// us, rmsnorm bf16 H=8192 T=128 1.95 -> 2.05-2.07 with its early trigger, RoPE without PDL T=16
// 1.57 -> 1.78. CUDA_DEVICE_MAX_CONNECTIONS (1, 2, 8, 32: 0.03 us at most) and the legacy
// default stream (nothing) do not undo it. Rank decode-row variants in this state (--streams 64).
inline void extra_streams(cudaStream_t s, int n) {
  const int count = n < 0 ? -n : n;
  for (int i = 0; i < count; ++i) {
    cudaStream_t x;
    CK(cudaStreamCreateWithFlags(&x, cudaStreamNonBlocking));
    if (n > 0) on_side_stream(s, x, 1, [](int, cudaStream_t st) { pollute_empty_kernel<<<1, 32, 0, st>>>(); });
  }
  if (n != 0) std::printf("  (%d more streams, %s)\n", count, n > 0 ? "one empty kernel each" : "unused");
}

// bf16 data from a hash of (index, seed): element i = lo + span * u, u in [0, 1) in steps of
// 2^-16 (a grid-stride loop: any grid fills any n).
__global__ void fill_bf16_kernel(__nv_bfloat16* p, size_t n, uint32_t seed, float lo, float span) {
  for (size_t i = blockIdx.x * size_t(blockDim.x) + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t h = uint32_t(i) * 2654435761u ^ seed ^ uint32_t(i >> 32) * 40503u;
    h ^= h >> 13;
    h *= 0x5bd1e995u;
    h ^= h >> 15;
    p[i] = __float2bfloat16(lo + span * float(h & 0xffff) / 65536.0f);
  }
}

}  // namespace tune_common
