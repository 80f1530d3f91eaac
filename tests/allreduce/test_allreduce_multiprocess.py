# SPDX-License-Identifier: Apache-2.0
"""CustomAllreduce (sgl_kernel.allreduce) across real processes: one process per rank, started
with torch.multiprocessing (spawn), CUDA IPC between them.

- One GPU per process, NCCL process group (world sizes 2, 4 and 8, each skipped without
  enough GPUs): every dtype, 16 B to 64 MiB (auto's push, one-shot and two-shot), eager and
  inside CUDA graphs (captured in ``CustomAllreduce.capture()``, including a buffer allocated
  during capture), repeated calls into a given ``out``, 40 push calls queued back to back, two
  communicators used alternately, and the fallbacks to NCCL (too large, unsupported dtype,
  non-contiguous, after close). Reference: ``torch.distributed.all_reduce`` of an fp64 copy
  (and of the magnitudes, for the bound of ref_allreduce.py); results all-gathered and
  compared bitwise across ranks. A fallback's result must equal torch.distributed.all_reduce's
  on a copy, bit for bit.
- Two processes sharing one GPU (gloo process group; runs with a single GPU): a few calls up to
  1 MiB, eager and in a graph, against a reference every rank regenerates from the per-rank
  seeds. The two processes' kernels time-slice the GPU, so each call is slow.
- 6 and 8 processes on 3 and 4 GPUs, two a GPU (gloo, as above): every algorithm forced and
  auto, eager and in a graph; the 6- and 8-rank kernels across real processes where no 6- or
  8-GPU machine is at hand (not NVLink timings).

A child's exception fails the test with the child's traceback; a hang fails it after a timeout
(the children are then terminated).
"""

from __future__ import annotations

import os
import time

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from sgl_kernel.allreduce import CustomAllreduce, _scoped_env
from tests.allreduce.emulate import numel_of, stop_processes
from tests.allreduce.ref_allreduce import DTYPES, check_bitwise_equal, check_sum, reference

pytestmark = pytest.mark.gpu

MP_SIZES = [16, 48, 4096, 4112, (32 << 10) + 16, 256 << 10, 1 << 20, (2 << 20) + 16, (4 << 20) - 16, (4 << 20) + 48,
            16 << 20, 64 << 20]
MP_MAX_SIZE = 64 << 20
GRAPH_CASES = [(torch.bfloat16, 4096), (torch.float16, (256 << 10) + 16), (torch.float32, (4 << 20) + 48)]
# Unsafe CUDA calls are refused in the capturing thread (where the all_reduce op runs), not in
# the process group's background threads (NCCL's watchdog queries events at any time).
CAPTURE_MODE = "thread_local"


# ---------------------------------------------------------------------------------------
# Process plumbing


def _child(rank, world, init_file, backend, gpus, env, body, args):
    os.environ.update(env)
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    device = torch.device("cuda", rank % gpus if gpus else rank)
    torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        body(rank, world, device, *args)
        torch.cuda.synchronize()
    finally:
        dist.destroy_process_group()


def _spawn(body, world: int, tmp_path, *, backend: str = "nccl", gpus: int = 0, env=None, args=(),
           timeout_s: float = 300.0) -> None:
    """Run ``body(rank, world, device, *args)`` in ``world`` spawned processes, rank r on
    cuda:r (``gpus`` 0) or cuda:(r % gpus); re-raise a child's failure; fail the test when they
    have not all finished within ``timeout_s``."""
    ctx = mp.start_processes(
        _child,
        args=(world, str(tmp_path / "pg_init"), backend, gpus, dict(env or {}), body, tuple(args)),
        nprocs=world,
        join=False,
        start_method="spawn",
    )
    deadline = time.monotonic() + timeout_s
    try:
        while not ctx.join(timeout=5.0, grace_period=10.0):
            if time.monotonic() > deadline:
                pytest.fail(f"{body.__name__}: the {world} processes did not finish within {timeout_s:.0f} s (hang?)")
    finally:
        stop_processes(ctx.processes)


def _need_gpus(n: int) -> None:
    count = torch.cuda.device_count()
    if count < n:
        pytest.skip(f"needs {n} GPUs, {count} visible")
    for a in range(n):
        for b in range(n):
            if a != b and not torch.cuda.can_device_access_peer(a, b):
                pytest.skip(f"needs peer-to-peer access between the GPUs (cuda:{a} cannot access cuda:{b})")


# ---------------------------------------------------------------------------------------
# Checks inside a child (NCCL group)


def _input(rank: int, seed: int, nbytes: int, dtype: torch.dtype, device) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(1_000_003 * seed + rank)
    return torch.randn(numel_of(nbytes, dtype), device=device, generator=gen).to(dtype)


def _check_with_dist(rank: int, world: int, x: torch.Tensor, out: torch.Tensor, what: str) -> None:
    """``out`` against the fp64 sum of every rank's ``x`` (torch.distributed.all_reduce of fp64
    copies) and bitwise equal on all ranks. Collective."""
    ref = x.to(torch.float64)
    mag = ref.abs()
    dist.all_reduce(ref)
    dist.all_reduce(mag)
    msg = check_sum(out, ref, mag, world)
    gathered = [torch.empty_like(out) for _ in range(world)]
    dist.all_gather(gathered, out.contiguous())
    assert msg is None, f"rank {rank}, {what}: {msg}"
    msg = check_bitwise_equal(gathered)
    assert msg is None, f"rank {rank}, {what}: {msg}"


def _check_fallback(rank: int, x: torch.Tensor, out: torch.Tensor, what: str) -> None:
    """A fallback result is torch.distributed.all_reduce's own: bitwise equal to it on a copy
    of ``x`` (NCCL adds fp16 / bf16 in their own precision, in its own order, so the custom
    path's bound does not apply). Collective."""
    ref = x.contiguous().clone()
    dist.all_reduce(ref)
    assert torch.equal(out.contiguous().view(torch.uint8), ref.view(torch.uint8)), (
        f"rank {rank}, {what}: differs from torch.distributed.all_reduce")


def _body_multi_gpu(rank: int, world: int, device, full_nvlink) -> None:
    comm = CustomAllreduce(max_size=MP_MAX_SIZE, full_nvlink=full_nvlink)
    small = None
    keep = []
    try:
        assert not comm.disabled, f"rank {rank}: CustomAllreduce disabled: {comm.reason}"
        assert comm.world_size == world and comm.rank == rank and comm.device == device

        # Eager: every dtype and size; the input is not written.
        seed = 0
        for dtype in DTYPES:
            for nbytes in MP_SIZES:
                seed += 1
                x = _input(rank, seed, nbytes, dtype, device)
                before = x.clone()
                assert comm.should_custom_ar(x)
                out = comm.all_reduce(x)
                assert out.shape == x.shape and out.dtype == dtype
                _check_with_dist(rank, world, x, out, f"eager {nbytes} B {dtype}")
                assert torch.equal(x, before), f"rank {rank}: inp written ({nbytes} B {dtype})"
                del x, before, out

        # Repeated calls into a given out, sizes changing call to call, checked after each.
        buf = torch.empty(4 << 20, dtype=torch.bfloat16, device=device)
        for i in range(30):
            nbytes = (4096, (1 << 20) + 16, 48, (8 << 20) - 16)[i % 4]
            x = _input(rank, 1000 + i, nbytes, torch.bfloat16, device)
            out = buf[: x.numel()]
            out.fill_(float("nan"))
            assert comm.all_reduce(x, out) is out
            _check_with_dist(rank, world, x, out, f"repeated call {i}")

        # Back-to-back calls of push sizes with no check between them: a peer may run one
        # call ahead, into the other slot of this rank's push region.
        queued = []
        for i in range(40):
            x = _input(rank, 3000 + i, (4096, 48, (64 << 10) + 16, 16)[i % 4], torch.float16, device)
            queued.append((x, comm.all_reduce(x)))
        for i, (x, out) in enumerate(queued):
            _check_with_dist(rank, world, x, out, f"back-to-back call {i}")
        del queued

        # CUDA graphs: capture inside comm.capture(); a chain whose middle buffer is allocated
        # during capture; three replays on fresh data. Graphs and the buffers they read stay
        # alive while they may be replayed.
        for dtype, nbytes in GRAPH_CASES:
            x = torch.empty(numel_of(nbytes, dtype), dtype=dtype, device=device)
            graph = torch.cuda.CUDAGraph()
            with comm.capture():
                with torch.cuda.graph(graph, capture_error_mode=CAPTURE_MODE):
                    y = comm.all_reduce(x)
                    z = comm.all_reduce(y)
            for rep in range(3):
                x.copy_(_input(rank, 5000 + rep, nbytes, dtype, device))
                y.fill_(float("nan"))
                z.fill_(float("nan"))
                graph.replay()
                _check_with_dist(rank, world, x, y, f"graph replay {rep}, {nbytes} B {dtype}")
                _check_with_dist(rank, world, y, z, f"graph replay {rep} (chained), {nbytes} B {dtype}")
            keep.append((graph, x, y, z))

        # Two communicators used alternately.
        small = CustomAllreduce(max_size=1 << 20, full_nvlink=full_nvlink)
        assert not small.disabled, f"rank {rank}: second communicator disabled: {small.reason}"
        for i in range(12):
            c = (comm, small)[i % 2]
            x = _input(rank, 7000 + i, ((32 << 10) + 16, 1 << 20, 4096)[i % 3], torch.float16, device)
            _check_with_dist(rank, world, x, c.all_reduce(x), f"alternating communicators, call {i}")

        # Fallbacks to torch.distributed (NCCL): too large for `small`, fp64, non-contiguous.
        x = _input(rank, 9000, 2 << 20, torch.float32, device)
        assert not small.should_custom_ar(x)
        _check_fallback(rank, x, small.all_reduce(x), "fallback: larger than max_size")
        x = _input(rank, 9001, 4096, torch.float32, device).double()
        assert not comm.should_custom_ar(x)
        _check_fallback(rank, x, comm.all_reduce(x), "fallback: fp64")
        x = _input(rank, 9002, 64 << 10, torch.bfloat16, device).view(128, 256).t()
        assert not comm.should_custom_ar(x)
        _check_fallback(rank, x, comm.all_reduce(x), "fallback: non-contiguous")
        small.close()
        x = _input(rank, 9003, 4096, torch.bfloat16, device)
        assert small.disabled and not small.should_custom_ar(x)
        _check_fallback(rank, x, small.all_reduce(x), "fallback: after close")
    finally:
        if small is not None:
            small.close()
        comm.close()
        keep.clear()


@pytest.mark.parametrize("world", [2, 4, 8])
def test_custom_allreduce_multi_gpu(world, tmp_path):
    _need_gpus(world)
    # Correctness does not depend on NVLink (only auto's algorithm choice does): at world 2
    # CustomAllreduce detects it; above 2, where detection may be unavailable, it is asserted.
    full_nvlink = None if world == 2 else True
    _spawn(_body_multi_gpu, world, tmp_path, env={"SGL_KERNEL_AR_TIMEOUT_MS": "30000"}, args=(full_nvlink,),
           timeout_s=420.0)


# ---------------------------------------------------------------------------------------
# Two processes on one GPU (gloo)

SHARED_CASES = [
    (torch.float32, 4096),
    (torch.bfloat16, 48),
    (torch.float16, (256 << 10) + 16),
    (torch.bfloat16, 1 << 20),
    (torch.float32, 16),
    (torch.float16, 4112),
]


def _cpu_input(rank: int, case: int, nbytes: int, dtype: torch.dtype) -> torch.Tensor:
    gen = torch.Generator().manual_seed(7919 * case + rank)
    return torch.randn(numel_of(nbytes, dtype), generator=gen).to(dtype)


def _check_shared(rank: int, world: int, case: int, out: torch.Tensor, what: str) -> None:
    """Against the sum of every rank's regenerated input; bitwise equal across ranks (gloo,
    on the bytes)."""
    inputs = [_cpu_input(r, case, out.numel() * out.element_size(), out.dtype) for r in range(world)]
    out_cpu = out.cpu()
    ref, mag = reference(inputs)
    msg = check_sum(out_cpu, ref, mag, world)
    mine = out_cpu.view(torch.uint8)
    gathered = [torch.empty_like(mine) for _ in range(world)]
    dist.all_gather(gathered, mine)
    assert msg is None, f"rank {rank}, {what}: {msg}"
    msg = check_bitwise_equal(gathered)
    assert msg is None, f"rank {rank}, {what}: {msg}"


def _check_shared_graph(comm, rank: int, world: int, device, first_case: int, dtype: torch.dtype, nbytes: int) -> None:
    """One all_reduce captured in a CUDA graph (inside ``comm.capture()``), replayed twice on
    the regenerated inputs of cases ``first_case`` and ``first_case + 1`` into a poisoned
    output, each checked with :func:`_check_shared`."""
    x = torch.empty(numel_of(nbytes, dtype), dtype=dtype, device=device)
    graph = torch.cuda.CUDAGraph()
    with comm.capture():
        with torch.cuda.graph(graph, capture_error_mode=CAPTURE_MODE):
            y = comm.all_reduce(x)
    for rep in range(2):
        x.copy_(_cpu_input(rank, first_case + rep, nbytes, dtype))
        y.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        _check_shared(rank, world, first_case + rep, y, f"graph replay {rep}")


def _body_shared_gpu(rank: int, world: int, device) -> None:
    # gloo cannot reduce CUDA tensors: nothing may fall back
    comm = CustomAllreduce(max_size=1 << 20, nccl_above_bytes=1 << 40)
    try:
        assert not comm.disabled, f"rank {rank}: CustomAllreduce disabled: {comm.reason}"
        for case, (dtype, nbytes) in enumerate(SHARED_CASES):
            x = _cpu_input(rank, case, nbytes, dtype).to(device)
            assert comm.should_custom_ar(x)
            _check_shared(rank, world, case, comm.all_reduce(x), f"eager {nbytes} B {dtype}")

        _check_shared_graph(comm, rank, world, device, len(SHARED_CASES), torch.bfloat16, (64 << 10) + 16)
    finally:
        comm.close()


def test_two_processes_one_gpu(tmp_path):
    """Two ranks on cuda:0 in two processes (CUDA IPC within one device)."""
    if torch.cuda.device_count() < 1:
        pytest.skip("needs a GPU")
    _spawn(_body_shared_gpu, 2, tmp_path, backend="gloo", gpus=1,
           env={"SGL_KERNEL_AR_TIMEOUT_MS": "60000"}, timeout_s=300.0)


# ---------------------------------------------------------------------------------------
# 6 and 8 ranks on half as many GPUs (gloo): the 6- and 8-rank kernels across processes

OVERSUBSCRIBED_CASES = [
    (torch.bfloat16, 4096),
    (torch.float32, 48),
    (torch.float16, (256 << 10) + 16),
    (torch.bfloat16, (1 << 20) + 48),
]


def _body_oversubscribed(rank: int, world: int, device) -> None:
    """Every algorithm (auto, push, one-shot, two-shot) on push, one-shot and two-shot sizes,
    eager and in a graph. Two ranks share each GPU, so their kernels time-slice: slow, but
    it is the 6- and 8-rank flag, push and scratch layout across real processes."""
    comms = {}
    try:
        for algo in ("auto", "push", "oneshot", "twoshot"):
            with _scoped_env({"SGL_KERNEL_AR_ALGO": algo}):
                comms[algo] = CustomAllreduce(max_size=2 << 20, full_nvlink=True, nccl_above_bytes=1 << 40)
            assert not comms[algo].disabled, f"rank {rank}: {algo} disabled: {comms[algo].reason}"
        case = 0
        for algo, comm in comms.items():
            for dtype, nbytes in OVERSUBSCRIBED_CASES:
                case += 1
                x = _cpu_input(rank, case, nbytes, dtype).to(device)
                _check_shared(rank, world, case, comm.all_reduce(x), f"{algo}, eager {nbytes} B {dtype}")
        _check_shared_graph(comms["auto"], rank, world, device, case + 1, torch.float16, (512 << 10) + 16)
    finally:
        for comm in comms.values():
            comm.close()


@pytest.mark.parametrize("world", [6, 8])
def test_ranks_sharing_gpus(world, tmp_path):
    """``world`` ranks in ``world`` processes on ``world / 2`` GPUs, two ranks a GPU."""
    _need_gpus(world // 2)
    _spawn(_body_oversubscribed, world, tmp_path, backend="gloo", gpus=world // 2,
           env={"SGL_KERNEL_AR_TIMEOUT_MS": "60000"}, timeout_s=300.0)
