// SPDX-License-Identifier: Apache-2.0
// Architecture switches for device code.
#pragma once

// Programmatic dependent launch (PDL, sm90+). A kernel launched with the PDL attribute
// (launch.cuh, enable_pdl) may start while the previous kernel in the stream is still
// running: it must call SGL_PDL_WAIT() before it reads anything that kernel wrote, and
// calls SGL_PDL_LAUNCH_DEPENDENTS() once its own dependents may start launching. Without
// the attribute both are no-ops, and below sm90 they compile to nothing.
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
