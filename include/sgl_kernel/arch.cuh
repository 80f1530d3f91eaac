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
