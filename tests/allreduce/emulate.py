# SPDX-License-Identifier: Apache-2.0
"""Single-process emulation of an all-reduce group: W "ranks" in one process on one GPU
(``sgl_kernel.allreduce._EmulatedGroup``), plus the input helpers the tests and the benchmark
share.

The ranks' kernels wait for each other at barriers, so every rank's call of one collective is
issued, each on its rank's own stream, before anything synchronises, and all W kernels must be
resident on the GPU at once: the emulation caps the blocks per kernel
(``SGL_KERNEL_AR_MAX_BLOCKS``) so that W x blocks fit. Timings measured this way are not NVLink
figures (the ranks share one GPU's SMs and memory).
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import torch

from sgl_kernel.allreduce import _EmulatedGroup as EmulatedGroup  # noqa: F401 (re-exported)
from sgl_kernel.allreduce import _scoped_env as scoped_env  # noqa: F401 (re-exported)

# Blocks per kernel in the emulation: 8 ranks x 16 blocks fit on any sm80+ data-centre GPU.
EMULATION_BLOCKS = 16
# A hung collective becomes an error after this long instead of a hung test.
EMULATION_TIMEOUT_MS = 20000


def emulation_env(algo: Optional[str] = None, timeout_ms: int = EMULATION_TIMEOUT_MS,
                  max_blocks: int = EMULATION_BLOCKS) -> Dict[str, Optional[str]]:
    """The environment init_custom_ar reads, for an emulated group (``algo`` None: unset)."""
    return {
        "SGL_KERNEL_AR_TIMEOUT_MS": str(timeout_ms),
        "SGL_KERNEL_AR_MAX_BLOCKS": str(max_blocks),
        "SGL_KERNEL_AR_ALGO": algo,
    }


def numel_of(nbytes: int, dtype: torch.dtype) -> int:
    size = torch.empty((), dtype=dtype).element_size()
    assert nbytes % size == 0, (nbytes, dtype)
    return nbytes // size


def random_inputs(world: int, numel: int, dtype: torch.dtype, gen: torch.Generator,
                  shape: Optional[Sequence[int]] = None) -> List[torch.Tensor]:
    """Fresh standard-normal inputs, one per rank (different on every rank)."""
    shape = (numel,) if shape is None else tuple(shape)
    return [torch.randn(shape, device=gen.device, generator=gen).to(dtype) for _ in range(world)]


def poisoned_like(tensors: Sequence[torch.Tensor]) -> List[torch.Tensor]:
    """NaN-filled outputs: an element the kernel does not write fails the check."""
    return [torch.full_like(t, float("nan")) for t in tensors]


def stop_processes(processes) -> None:
    """Terminate spawned processes that are still running (then kill the stubborn ones), so a
    failed or hung multi-process run leaves nothing behind."""
    for p in processes:
        if p.is_alive():
            p.terminate()
    for p in processes:
        p.join(10)
        if p.is_alive():
            p.kill()
            p.join()
