// SPDX-License-Identifier: Apache-2.0
// The CUTLASS configurations behind fp8_scaled_mm / int8_scaled_mm (sm90a), one translation
// unit each (scaled_mm_<type>_<config>.cu), and the dispatchers that pick among them
// (fp8_scaled_mm_sm90.cu, int8_scaled_mm_sm90.cu). CUTLASS-free, so the dispatchers compile
// in seconds.
//
// Every entry point: with ws_bytes != nullptr, store the workspace the launch needs and return;
// otherwise launch on `stream` with `workspace` (splits: the cluster split of K of the small_m
// and decode kernels, ignored by the CUTLASS configurations).
#pragma once

#include <cstddef>

#include <cuda_runtime.h>

#include "gemm/gemm.h"

namespace sgl_kernel::gemm::sm90 {

using ConfigFn = cudaError_t (*)(const ScaledMmParams& p, int splits, void* workspace, size_t* ws_bytes,
                                 cudaStream_t stream);

// fp8 (e4m3), fp32 accumulation with CUTLASS's fast accumulation (no periodic promotion).
// Persistent cooperative 128x256x128 tiles, 2x1 clusters: large M and N.
cudaError_t fp8_coop_128x256(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
// Persistent cooperative 128x128x128: mid M or narrow N.
cudaError_t fp8_coop_128x128(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
// Ping-pong 64x128x128: M in (64, 128].
cudaError_t fp8_pingpong_64x128(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
// Ping-pong 64x256x128 and cooperative 256x128x128 (1x2 clusters): large M.
cudaError_t fp8_pingpong_64x256(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
cudaError_t fp8_coop_256x128(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
// Ping-pong 128x128x128 in 2x1 clusters (prefill, N <= 8192) and cooperative 128x256x128 in
// 1x2 clusters (M ~ 1024 at N = 4096), from the session-7 sweeps.
cudaError_t fp8_pingpong_128x128(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
cudaError_t fp8_coop_128x256_c12(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
// Swap A/B: out^T tiles of 128 weight rows x 16/32/64 activation rows, M <= 128, on the
// persistent scheduler. (Session 4 had them on the stream-K scheduler for split-K; split-K
// never won a sweep, and this CUTLASS's stream-K scheduler does not compile with
// CUTLASS_ENABLE_GDC_FOR_SM90, which PDL needs.)
cudaError_t fp8_swap_128x16(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
cudaError_t fp8_swap_128x32(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
cudaError_t fp8_swap_128x64(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);

// int8, int32 accumulation.
cudaError_t int8_coop_128x256(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
cudaError_t int8_coop_128x128(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
cudaError_t int8_pingpong_64x128(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
cudaError_t int8_swap_128x32(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
cudaError_t int8_swap_128x64(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);

// Not CUTLASS (scaled_mm_small_m.cu): weight-streaming mma.sync kernels for decode M (<= 64;
// larger M is correct but re-reads W per 64 rows). No workspace. splits >= 2 (or, when the
// dispatcher passes 1, ScaledMmParams::splits >= 2): K split over clusters of that many CTAs
// (at most 8); otherwise the kernel's own choice.
cudaError_t fp8_small_m(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
cudaError_t int8_small_m(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
// Not CUTLASS (scaled_mm_decode.cu): TMA weight streaming into wgmma in the inputs' own 8-bit
// type, 64 or 128 weight rows x 8/16/32/64 tokens per CTA (larger M: more CTAs, each re-reading
// W). No workspace. splits >= 2: K split over clusters of that many CTAs (at most 8);
// otherwise the kernel's own choice (the largest split that runs in one wave).
cudaError_t fp8_decode_64(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
cudaError_t fp8_decode_128(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
cudaError_t int8_decode_64(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);
cudaError_t int8_decode_128(const ScaledMmParams&, int, void*, size_t*, cudaStream_t);

}  // namespace sgl_kernel::gemm::sm90
