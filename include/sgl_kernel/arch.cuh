// SPDX-License-Identifier: Apache-2.0
// Architecture switches for device code.
#pragma once

// Programmatic dependent launch (PDL, sm90+). A kernel launched with the PDL attribute
// (launch.cuh, enable_pdl) may start while the previous kernel in the stream is still
// running: it must call SGL_PDL_WAIT() before it reads anything that kernel wrote, and
// calls SGL_PDL_LAUNCH_DEPENDENTS() once its own dependents may start launching. Without
// the attribute both are no-ops, and below sm90 they compile to nothing.
//
// Where to trigger: the dependents' griddepcontrol.wait waits for this whole grid to finish
// and flush whatever the trigger's position, so the position only decides how much of the
// next kernel's launch hides behind this one. Same-machine A/B on an H200 (session 8,
// benchmark/RESULTS.md; calls in a CUDA graph): triggering right after SGL_PDL_WAIT() made
// the decode calls (1-128 rows) of the norms, activations, norm + quant, flat group quant and
// per-tensor code kernels up to 19 % faster (gemma_rmsnorm T=1 1.53 -> 1.29 us, silu_and_mul
// T=1 I=14336 0.98 -> 0.79; geomean over the decode rows 0.95x; two 128-row shapes up to 6 %
// slower) and left large sizes unchanged, but made the per-token quant at 1024 rows
// 27 % slower and the plain / masked group quant of many rows 9-13 % slower. A second A/B:
// embedding_lookup and downcast_fp8 decode calls 9-24 % faster with it; store_kv_cache (32
// heads, 1-16 rows: +6-13 %), concat_mla_k (128 rows: +7 %) and the fp8 decode GEMMs (no
// gain, up to +5 %) were not. Those kernels keep the trigger at their end. A variant choosing
// at run time (grid <= %nsmid) cost registers and lost most of the gain.
// Session 16 (H200): RoPE's in-place path and the per-tensor one-pass kernel trigger early now
// (rope_pdl T=128 1.93 -> 1.70 us), RoPE's general path (the fused KV write) keeps it at its
// end (early was 0.09 us slower at T=16 and 128), and concat's tile kernel triggers early up to
// 256 blocks (the launcher picks the instance). Why it matters more than a fresh process
// suggests: once a process has run kernels on a second stream (torch's graph warm-up on a side
// stream does), a CUDA-graph kernel boundary without PDL costs about 0.18 us more (empty kernel
// 0.56 -> 0.74 us; RoPE T=16 1.60 -> 1.78), and so did RoPE's boundary with the trigger at its
// end in the torch process; the bench, and any serving engine, run in that state
// (tune_rope.cu --pollute reproduces it without torch; benchmark/RESULTS.md, session 16).
//
// Session 17 (H200; decode rows timed as benchmark/harness.py does, placements alternated twice
// on one machine, us at T = 1 / 16 / 128): a third placement, once the kernel's loads are
// issued and before their first use (PdlTrigger::kAfterLoads), beat right after the wait for
// silu_and_mul d=14336 (0.81 / 1.02 / 2.28 -> 0.76 / 0.98 / 2.11), RoPE's in-place path (1.22 /
// 1.38 / 1.70 -> 1.19 / 1.29 / 1.64), the per-tensor maximum kernel (T=128 2.41 -> 2.32) and
// the fused norm + quant decode kernel (add, UE8M0, H=7168: 2.12 / 2.25 / 2.66 -> 2.08 / 2.17 /
// 2.65). RMSNorm: after the loads for the fused decode kernel on rows of 7168 and the vector
// kernel on 1024-vector rows up to 64 rows; right after the wait stays for rows of 4096 and
// the plain op (0.1-0.3 us slower after the loads), and concat_mla_k keeps its placements.
// RoPE's general path keeps the end: after the loads it read 1.42 / 1.52 / 2.40 against 1.44 /
// 1.58 / 2.02 in bench_rope.py, though the same graphs outside the bench read alike at T=128
// (rope.cu's NOTE). Details in the kernels' NOTEs.
// Session 32: ptxas keeps the trigger (SASS PREEXIT) in program order among memory accesses but
// moves arithmetic across it, so "after the loads" can become "after the loaded data arrives"
// when the first use of that data is cheap enough to schedule early (load_row_sum_sq's NOTE,
// row_norm.cuh: 0.02-0.07 us). Check the SASS where a trigger's position matters.
// Session 33: the stand-alone tunes still rank a late trigger above where the bench's process
// does (norm.cu's 1024-vector rows: kVec1024EarlyRows' NOTE), even after a side-stream warm-up
// in the tune; decide placements in the bench's process.
// Session 34: what the bench's process has that the tunes lacked is streams. Once more than 9
// streams have run work (a torch process gets there by itself: every torch.cuda.Stream() hands
// out the next of a pool of 32), every CUDA-graph kernel reads slower, with or without PDL (an
// empty kernel 0.40 -> 0.58 us; rmsnorm bf16 H=8192 T=128 1.95 -> 2.05-2.07; RoPE without PDL
// T=16 1.57 -> 1.78), by amounts that depend on the kernel and its trigger, so rankings change.
// tune_common::extra_streams (the tunes' --streams 64) puts a tune in that state and reproduces
// the bench's decode rows; rank placements and shapes there (benchmark/RESULTS.md, session 34).
namespace sgl_kernel {
enum class PdlTrigger { kEarly, kAfterLoads, kLate };
}  // namespace sgl_kernel

#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
#define SGL_PDL_WAIT() asm volatile("griddepcontrol.wait;" ::: "memory")
#define SGL_PDL_LAUNCH_DEPENDENTS() asm volatile("griddepcontrol.launch_dependents;" :::)
#else
#define SGL_PDL_WAIT() \
  do {                 \
  } while (0)
#define SGL_PDL_LAUNCH_DEPENDENTS() \
  do {                              \
  } while (0)
#endif

namespace sgl_kernel {

// The PDL wait, with the given addresses (and the kernel parameters they come from) in
// registers before it: one L2 prefetch of each pointer, then SGL_PDL_WAIT().
// Why: the compiler places loads of kernel parameters (LDC) and address arithmetic where it
// likes, and put many of them after griddepcontrol.wait, so the first global load waited for
// them after the wait returned. A prefetch is a memory instruction, issued in program order
// before the wait, so whatever its address needs is computed before it. It moves no data into
// registers, so it may run before the previous kernel has finished: its writes go to L2,
// where the prefetch looks. Each pointer must be a valid global address (a row this thread
// reads, or a tensor's base); without PDL the prefetches are a few extra instructions.
// Read-only (ld.global.nc) loads must not follow it: the compiler moved such loads above the
// wait once their address was ready (tests/test_pdl_order.py checks every kernel's SASS).
// NOTE (H200, session 19, tune_rmsnorm.cu "prod", the decode-layout rmsnorm kernel with the
// thread's first input and weight vectors prefetched, alternated twice, us at T = 1 / 16 /
// 128): H=4096 1.18-1.19 / 1.26-1.27 / 1.55-1.56 -> 1.07 / 1.14 / 1.53; H=8192 1.44-1.46 /
// 1.55-1.56 / 2.05-2.06 -> 1.31-1.32 / 1.42 / 1.93-1.94. Used where measured faster (decode
// RMSNorm and norm + quant kernels, concat tiles, the one-vector activation kernel; session 21:
// group_quant.cu's one-vector instance, RoPE's in-place path with PDL). It lost
// in the many-row RMSNorm and norm + quant vector kernels (rmsnorm T=32768 H=4096 4247 -> 3332
// GB/s) and in the per-tensor quant kernels (per_tensor_dyn_op T=128 2.34 -> 5.52 us), which
// keep SGL_PDL_WAIT() (benchmark/RESULTS.md, session 19), and in RoPE launched without PDL
// (T=128 2.26 -> 2.45 us, session 21) and in the per-token quant kernel's decode instances
// (0.01-0.06 us slower, session 21).
__device__ __forceinline__ void prefetch_l2(const void* ptr) {
  asm volatile("prefetch.global.L2 [%0];" ::"l"(ptr));
}
template <typename... Ptrs>
__device__ __forceinline__ void pdl_wait_prefetched(const Ptrs*... ptrs) {
#if defined(__CUDA_ARCH__) && (__CUDA_ARCH__ >= 900)
  (prefetch_l2(ptrs), ...);
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

}  // namespace sgl_kernel
