# SPDX-License-Identifier: Apache-2.0
"""The all-reduce family (API.md 2.6) on one GPU, with W "ranks" (W = 2, 4, 6, 8) emulated in
one process (tests/allreduce/emulate.py): each rank has its own signal buffer, staging buffer,
rank_data, handle and stream, and every collective is issued on all W streams before anything
synchronises.

Covered: every dtype, sizes from 16 B to 4 MiB + 48 (64 MiB at W = 2), the push, one-shot
and two-shot algorithms forced and chosen automatically (a forced push past its capacity runs
one-shot), the push algorithm's edge words (0xffffffff, signed zeros) and its capacity, against the fp64 sum with the bound of
ref_allreduce.py and bitwise-equal results on all ranks; outputs poisoned with NaN; inputs
left unchanged; back-to-back calls without syncs (barrier flags reused), sizes, dtypes and
algorithms interleaved, two communicators used alternately; inputs already in the staging
buffer; CUDA graphs (recorded inputs registered with get_graph_buffer_ipc_meta /
register_graph_buffers, replayed several times; an input recorded twice; a buffer allocated
during capture; eager use of a registered graph input); every argument error of init_custom_ar
and all_reduce; a peer that never arrives (timeout) and a graph replayed without
registration, both of which leave the handle unusable but disposable.

torch.library.opcheck is not used: it re-runs the op on one rank, and a collective issued by
one rank alone waits for its peers. What its schema check stands for (inputs not written) is
checked in test_all_reduce.
"""

from __future__ import annotations

import time

import pytest
import torch

import sgl_kernel
from tests.allreduce.emulate import EmulatedGroup, emulation_env, numel_of, poisoned_like, random_inputs
from tests.allreduce.ref_allreduce import DTYPES, check_all_reduce
from tests.helpers import raises_op_error

pytestmark = pytest.mark.gpu

WORLDS = (2, 4, 6, 8)
ALGOS = ("auto", "push", "oneshot", "twoshot")
SIZES = [16, 48, 4096, 4112, (32 << 10) + 16, 256 << 10, 1 << 20, (4 << 20) + 48]
BIG = 64 << 20  # W = 2 only
MAX_SIZE = 8 << 20
CASES = [(w, n) for w in WORLDS for n in SIZES] + [(2, BIG)]
IPC_HANDLE_BYTES = 64

_DTYPE_IDS = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


def _assert_ok(inputs, outputs, what: str = "") -> None:
    msg = check_all_reduce(inputs, outputs)
    assert msg is None, f"{what}: {msg}" if what else msg


def _assert_group_works(group: EmulatedGroup, gen, dtype=torch.float32, nbytes: int = 4096) -> None:
    """A full collective on every rank gives the right sum: the handles are in step."""
    inputs = random_inputs(group.world, numel_of(nbytes, dtype), dtype, gen)
    outputs = poisoned_like(inputs)
    group.all_reduce(inputs, outputs)
    torch.cuda.synchronize()
    _assert_ok(inputs, outputs, "collective after the checks")


@pytest.fixture(scope="module")
def groups():
    """Emulated groups shared by a module's tests, one per (world, algorithm, max_size)."""
    cache = {}

    def get(world: int, algo: str = "auto", max_size: int = MAX_SIZE) -> EmulatedGroup:
        key = (world, algo, max_size)
        if key not in cache:
            cache[key] = EmulatedGroup(world, max_size, env=emulation_env(algo))
        return cache[key]

    yield get
    errors = []
    for group in cache.values():
        try:
            group.dispose()
        except Exception as exc:  # dispose every group before reporting
            errors.append(exc)
    if errors:
        raise errors[0]


# ---------------------------------------------------------------------------------------
# Correctness


@pytest.mark.parametrize("dtype", DTYPES, ids=_DTYPE_IDS.get)
@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("world, nbytes", CASES, ids=[f"W{w}-{n}B" for w, n in CASES])
def test_all_reduce(world, nbytes, algo, dtype, groups, gen):
    group = groups(world, algo, BIG if nbytes > MAX_SIZE else MAX_SIZE)
    inputs = random_inputs(world, numel_of(nbytes, dtype), dtype, gen)
    before = [x.clone() for x in inputs]
    outputs = poisoned_like(inputs)
    group.all_reduce(inputs, outputs)
    torch.cuda.synchronize()
    _assert_ok(inputs, outputs)
    for r, (x, b) in enumerate(zip(inputs, before)):
        assert torch.equal(x.view(torch.uint8), b.view(torch.uint8)), f"rank {r}: inp was written"


@pytest.mark.parametrize("shape", [(3, 5, 16), (1, 4096), (7, 1, 8), (2, 3, 4, 8)])
def test_any_shape(shape, groups, gen):
    """inp and out of any (same) shape: the op sees the flat bytes."""
    group = groups(4)
    inputs = random_inputs(4, 0, torch.float16, gen, shape=shape)
    outputs = poisoned_like(inputs)
    group.all_reduce(inputs, outputs)
    torch.cuda.synchronize()
    assert all(o.shape == shape for o in outputs)
    _assert_ok(inputs, outputs)


@pytest.mark.parametrize("world", WORLDS)
def test_input_in_staging_buffer(world, groups, gen):
    """inp is the registered staging buffer itself: read in place with reg_buffer == 0, and
    with reg_buffer == inp's own address (the copy is skipped)."""
    group = groups(world)
    n = numel_of(256 << 10, torch.bfloat16)
    views = [group.staging[r][: 2 * n].view(torch.bfloat16) for r in range(world)]
    for v in views:
        v.copy_(torch.randn(n, device="cuda", generator=gen))
    inputs = [v.clone() for v in views]
    outputs = poisoned_like(views)
    group.all_reduce(views, outputs, staging=False)
    torch.cuda.synchronize()
    _assert_ok(inputs, outputs, "reg_buffer == 0")
    outputs = poisoned_like(views)
    group.all_reduce(views, outputs)
    torch.cuda.synchronize()
    _assert_ok(inputs, outputs, "reg_buffer == inp")


@pytest.mark.parametrize("world", WORLDS)
def test_back_to_back_calls(world, groups, gen):
    """50 calls with fresh data, queued without a sync between them: every call reuses the
    barrier flags of the one before."""
    group = groups(world)
    _queue_then_check(world, [(group, (4112, 256 << 10)[i % 2], torch.bfloat16) for i in range(50)], gen)


def _queue_then_check(world, plan, gen):
    """Queue one all-reduce of fresh random data per (group, nbytes, dtype) of `plan` with no
    sync between them, then check every output."""
    calls = []
    for group, nbytes, dtype in plan:
        inputs = random_inputs(world, numel_of(nbytes, dtype), dtype, gen)
        outputs = poisoned_like(inputs)
        group.all_reduce(inputs, outputs)
        calls.append((inputs, outputs))
    torch.cuda.synchronize()
    for i, (inputs, outputs) in enumerate(calls):
        _assert_ok(inputs, outputs, f"call {i}")


# Both sides of auto's switches: push up to 256 KiB - 1 MiB (by W), one-shot / two-shot at
# 256 KiB - 1 MiB at W >= 4.
MIXED_SIZES = [16, (4 << 20) + 48, 4096, 1 << 20, 48, 512 << 10, (256 << 10) - 16, 4112, (2 << 20) + 16,
               (512 << 10) + 16, (256 << 10) + 16, (1 << 20) + 16]


@pytest.mark.parametrize("world", WORLDS)
def test_interleaved_sizes_dtypes_algorithms(world, gen):
    """Four handles per rank (auto, oneshot, twoshot, push) on the ranks' shared streams;
    sizes across auto's switches, every dtype, the staging copy and in-place registered
    inputs, interleaved over four rounds without syncs."""
    base = EmulatedGroup(world, MAX_SIZE, env=emulation_env("auto"))
    others = []
    try:
        for algo in ("oneshot", "twoshot", "push"):
            others.append(EmulatedGroup(world, MAX_SIZE, env=emulation_env(algo), streams=base.streams))
        comms = [base] + others
        calls = []
        for rnd in range(4):
            for i, nbytes in enumerate(MIXED_SIZES):
                # over the rounds every size meets every handle set and (nearly) every dtype
                g = (i + rnd) % 4
                dtype = DTYPES[(i + 2 * rnd) % 3]
                group = comms[g]
                inputs = random_inputs(world, numel_of(nbytes, dtype), dtype, gen)
                outputs = poisoned_like(inputs)
                in_place = i % 4 == 3  # inp already in the staging buffer, reg_buffer == 0
                if in_place:
                    views = [group.staging[r][:nbytes].view(dtype) for r in range(world)]
                    for v, x in zip(views, inputs):
                        v.copy_(x)  # ordered after the previous collective (EmulatedGroup.run)
                    group.all_reduce(views, outputs, staging=False)
                else:
                    group.all_reduce(inputs, outputs)
                what = f"round {rnd}, {nbytes} B {dtype} on handle set {g}{' (in place)' if in_place else ''}"
                calls.append((what, inputs, outputs))
        torch.cuda.synchronize()
        for what, inputs, outputs in calls:
            _assert_ok(inputs, outputs, what)
    finally:
        for group in others + [base]:
            group.dispose()


@pytest.mark.parametrize("world", WORLDS)
def test_two_communicators(world, gen):
    """Two independent handle sets (two communicators of the same ranks) used alternately on
    the ranks' streams."""
    a = EmulatedGroup(world, 2 << 20, env=emulation_env())
    b = None
    try:
        b = EmulatedGroup(world, 2 << 20, env=emulation_env(), streams=a.streams)
        plan = [((a, b)[i % 2], ((32 << 10) + 16, 1 << 20, 4096)[i % 3], torch.float16) for i in range(20)]
        _queue_then_check(world, plan, gen)
    finally:
        if b is not None:
            b.dispose()
        a.dispose()


def test_empty_is_noop(groups, gen):
    """An empty tensor returns at once (nothing is launched, so one rank alone may call it)
    and leaves the handles in step."""
    group = groups(2)
    x = torch.empty(0, device="cuda")
    out = torch.empty(0, device="cuda")
    sgl_kernel.all_reduce(group.handles[0], x, out, group.staging_ptr(0), group.max_size)
    sgl_kernel.all_reduce(group.handles[0], x, out, 0, 0)
    torch.cuda.synchronize()
    _assert_group_works(group, gen)


# ---------------------------------------------------------------------------------------
# The push algorithm's encoding and capacity


def _push_capacity(world: int) -> int:
    """Largest push message at ``world`` ranks (custom_ar.h push_capacity): the header is the
    push region, a whole number of MiB, plus the flags (under 1 MiB)."""
    region = sgl_kernel.meta_size() >> 20 << 20
    return region // (2 * world) // 256 * 256


@pytest.mark.parametrize("dtype", DTYPES, ids=_DTYPE_IDS.get)
@pytest.mark.parametrize("world", (2, 4))
def test_push_edge_words(world, dtype, gen):
    """The push encoding loses nothing: the 32-bit word 0xffffffff (a NaN pattern in every
    dtype) still sums to NaN, zeros of both signs and all-zero words arrive as numbers, and
    the other elements of the same packs are exact; repeated calls (the region zeroed after
    each) stay in step."""
    with EmulatedGroup(world, 1 << 20, env=emulation_env("push")) as group:
        for rep in range(3):
            n = numel_of(4096, dtype)
            inputs = random_inputs(world, n, dtype, gen)
            words = [x.view(torch.int32) for x in inputs]
            words[0][0] = -1            # 0xffffffff: NaN (fp32) / two NaNs (fp16, bf16)
            for w in words:
                w[8:16] = 0  # all-zero words
                w[16:24] = torch.iinfo(torch.int32).min  # 0x80000000: -0.0 (fp32), +0 and -0 (fp16, bf16)
            outputs = poisoned_like(inputs)
            group.all_reduce(inputs, outputs)
            torch.cuda.synchronize()
            ref = sum(x.double() for x in inputs)
            for r, out in enumerate(outputs):
                nan = torch.isnan(out)
                per_word = 4 // out.element_size()
                assert bool(nan[:per_word].all()), f"rank {r}: the 0xffffffff word lost its NaN"
                assert not bool(nan[~torch.isnan(ref)].any()), f"rank {r}: NaN outside the 0xffffffff word"
                assert bool((out[8 * per_word: 24 * per_word] == 0).all()), f"rank {r}: zero words did not sum to zero"
                assert torch.equal(outputs[0].view(torch.uint8), out.view(torch.uint8)), f"rank {r} differs from rank 0"
            rest = ~torch.isnan(ref)
            _assert_ok([x[rest] for x in inputs], [o[rest] for o in outputs], f"rep {rep}, the other elements")


@pytest.mark.parametrize("world", (2, 4, 8))
def test_push_capacity(world, gen):
    """Forced push at its capacity, one pack past it (one-shot), and back: all correct."""
    cap = _push_capacity(world)
    with EmulatedGroup(world, cap + (1 << 20), env=emulation_env("push")) as group:
        plan = [(group, n, torch.bfloat16) for n in (cap, cap + 16, 16, cap - 16, cap + 16, cap)]
        _queue_then_check(world, plan, gen)


@pytest.mark.parametrize("world", (2, 4))
def test_push_out_is_inp(world, gen):
    """Eager calls with out == inp (through the staging buffer): push reads each pack before
    it stores the sum there; one-shot sizes copy to the staging buffer first."""
    with EmulatedGroup(world, 4 << 20, env=emulation_env()) as group:
        for nbytes in (4096, 64 << 10, 2 << 20):
            inputs = random_inputs(world, numel_of(nbytes, torch.float16), torch.float16, gen)
            originals = [x.clone() for x in inputs]
            group.all_reduce(inputs, inputs)
            torch.cuda.synchronize()
            _assert_ok(originals, inputs, f"{nbytes} B in place")


# ---------------------------------------------------------------------------------------
# CUDA graphs


def _fill(tensors, gen) -> None:
    for t in tensors:
        t.copy_(torch.randn(t.shape, device="cuda", generator=gen))


def _check_meta(handles, offsets, count: int) -> None:
    for r, (h, o) in enumerate(zip(handles, offsets)):
        assert len(o) == count, f"rank {r}: {len(o)} recorded buffers, expected {count}"
        assert len(h) == IPC_HANDLE_BYTES * count, f"rank {r}: {len(h)} handle bytes for {count} buffers"
        assert all(isinstance(b, int) and 0 <= b <= 255 for b in h), f"rank {r}: handle bytes not in 0..255"
        assert all(isinstance(x, int) and x >= 0 for x in o), f"rank {r}: negative offset"


GRAPH_CASES = [(torch.bfloat16, 4096), (torch.float16, (1 << 20) + 16), (torch.float32, (4 << 20) + 48)]


@pytest.mark.parametrize("algo", ALGOS)
@pytest.mark.parametrize("world", WORLDS)
def test_cuda_graph(world, algo, gen):
    """Per rank, one graph of three all_reduce calls on fresh unregistered inputs (reg_buffer
    == 0); after capture the recorded buffers are exchanged and registered; refilled inputs,
    poisoned outputs, three replays."""
    with EmulatedGroup(world, MAX_SIZE, env=emulation_env(algo)) as group:
        _assert_group_works(group, gen)  # warm-up: kernels loaded before capture
        xs = [[torch.empty(numel_of(n, dt), dtype=dt, device="cuda") for _ in range(world)] for dt, n in GRAPH_CASES]
        outs = [[torch.empty_like(x) for x in case] for case in xs]

        def body(r: int) -> None:
            for c in range(len(GRAPH_CASES)):
                sgl_kernel.all_reduce(group.handles[r], xs[c][r], outs[c][r], 0, 0)

        graphs = group.capture(body)
        handles, offsets = group.register_graph_buffers()
        _check_meta(handles, offsets, len(GRAPH_CASES))
        for rep in range(3):
            for c in range(len(GRAPH_CASES)):
                _fill(xs[c], gen)
                for o in outs[c]:
                    o.fill_(float("nan"))
            group.replay(graphs)
            torch.cuda.synchronize()
            for c, (dt, n) in enumerate(GRAPH_CASES):
                _assert_ok(xs[c], outs[c], f"replay {rep}, {n} B {dt}")


def test_cuda_graph_buffer_allocated_during_capture(gen):
    """A chain y = all_reduce(x); out = all_reduce(y) where y comes from the graph's private
    pool: a recorded buffer that exists only inside the graph."""
    world = 4
    with EmulatedGroup(world, MAX_SIZE, env=emulation_env()) as group:
        _assert_group_works(group, gen)
        n = numel_of(64 << 10, torch.float32)
        xs = [torch.empty(n, device="cuda") for _ in range(world)]
        outs = [torch.empty_like(x) for x in xs]
        ys = [None] * world

        def body(r: int) -> None:
            ys[r] = torch.empty_like(xs[r])
            sgl_kernel.all_reduce(group.handles[r], xs[r], ys[r], 0, 0)
            sgl_kernel.all_reduce(group.handles[r], ys[r], outs[r], 0, 0)

        graphs = group.capture(body)
        handles, offsets = group.register_graph_buffers()
        _check_meta(handles, offsets, 2)
        for rep in range(2):
            _fill(xs, gen)
            for o in outs:
                o.fill_(float("nan"))
            group.replay(graphs)
            torch.cuda.synchronize()
            _assert_ok(xs, ys, f"replay {rep}, first all_reduce")
            _assert_ok(ys, outs, f"replay {rep}, second all_reduce")


def test_cuda_graph_input_recorded_twice(gen):
    """One input reduced twice in one graph (into two outputs)."""
    world = 2
    with EmulatedGroup(world, MAX_SIZE, env=emulation_env()) as group:
        _assert_group_works(group, gen)
        xs = [torch.empty(8192, dtype=torch.bfloat16, device="cuda") for _ in range(world)]
        out_a = [torch.empty_like(x) for x in xs]
        out_b = [torch.empty_like(x) for x in xs]

        def body(r: int) -> None:
            sgl_kernel.all_reduce(group.handles[r], xs[r], out_a[r], 0, 0)
            sgl_kernel.all_reduce(group.handles[r], xs[r], out_b[r], 0, 0)

        graphs = group.capture(body)
        handles, offsets = group.register_graph_buffers()
        counts = {len(o) for o in offsets}
        assert len(counts) == 1 and counts <= {1, 2}, f"recorded buffers per rank: {[len(o) for o in offsets]}"
        _check_meta(handles, offsets, counts.pop())
        for rep in range(3):
            _fill(xs, gen)
            for o in out_a + out_b:
                o.fill_(float("nan"))
            group.replay(graphs)
            torch.cuda.synchronize()
            _assert_ok(xs, out_a, f"replay {rep}, first")
            _assert_ok(xs, out_b, f"replay {rep}, second")
            assert torch.equal(out_a[0].view(torch.uint8), out_b[0].view(torch.uint8))


@pytest.mark.parametrize("world", [2, 4])
def test_graph_input_is_registered_after_registration(world, gen):
    """After register_graph_buffers a recorded input is a registered buffer: an eager call with
    reg_buffer == 0 reads it in place; the graph still replays afterwards."""
    with EmulatedGroup(world, MAX_SIZE, env=emulation_env()) as group:
        _assert_group_works(group, gen)
        xs = [torch.empty(4096, device="cuda") for _ in range(world)]
        outs = [torch.empty_like(x) for x in xs]
        graphs = group.capture(lambda r: sgl_kernel.all_reduce(group.handles[r], xs[r], outs[r], 0, 0))
        group.register_graph_buffers()
        for what in ("eager", "replay", "eager again"):
            _fill(xs, gen)
            for o in outs:
                o.fill_(float("nan"))
            if what == "replay":
                group.replay(graphs)
            else:
                group.all_reduce(xs, outs, staging=False)
            torch.cuda.synchronize()
            _assert_ok(xs, outs, what)


def test_capture_rerecords_a_registered_address(gen):
    """A second capture whose rank-0 input sits at an address graph A registered, while the
    peers use new buffers: the capture records it afresh, so graph B reads the peers' new
    buffers (reusing A's pointer table would sum the peers' old buffers)."""
    world = 2
    with EmulatedGroup(world, MAX_SIZE, env=emulation_env()) as group:
        _assert_group_works(group, gen)
        xs = [torch.empty(4096, device="cuda") for _ in range(world)]
        zs = [xs[0]] + [torch.empty_like(xs[0]) for _ in range(1, world)]
        outs_a = [torch.empty_like(x) for x in xs]
        outs_b = [torch.empty_like(x) for x in xs]
        graphs_a = group.capture(lambda r: sgl_kernel.all_reduce(group.handles[r], xs[r], outs_a[r], 0, 0))
        group.register_graph_buffers()
        graphs_b = group.capture(lambda r: sgl_kernel.all_reduce(group.handles[r], zs[r], outs_b[r], 0, 0))
        handles, offsets = group.register_graph_buffers()
        _check_meta(handles, offsets, 1)
        for rep in range(2):
            _fill(xs + zs[1:], gen)
            for o in outs_a + outs_b:
                o.fill_(float("nan"))
            group.replay(graphs_b)
            torch.cuda.synchronize()
            _assert_ok(zs, outs_b, f"graph B, replay {rep}")
            group.replay(graphs_a)
            torch.cuda.synchronize()
            _assert_ok(xs, outs_a, f"graph A, replay {rep}")


# ---------------------------------------------------------------------------------------
# A handle made unusable by the device: a missing peer, an unregistered graph input


def test_timeout_poisons_the_handle(gen):
    """Only rank 0 calls: its kernel gives up after SGL_KERNEL_AR_TIMEOUT_MS instead of
    hanging; every later call on that handle raises "timed out"; dispose still works."""
    group = EmulatedGroup(2, 1 << 20, env=emulation_env(timeout_ms=300))
    try:
        inputs = random_inputs(2, 1024, torch.float32, gen)
        outputs = poisoned_like(inputs)
        start = time.monotonic()
        group.all_reduce(inputs, outputs, ranks=[0])
        torch.cuda.synchronize()
        elapsed = time.monotonic() - start
        assert elapsed < 10.0, f"a 300 ms timeout took {elapsed:.1f} s to return"
        for attempt in range(2):  # the next call, and every one after it
            with pytest.raises(RuntimeError, match="timed out") as info:
                sgl_kernel.all_reduce(group.handles[0], inputs[0], outputs[0], group.staging_ptr(0), group.max_size)
            assert str(info.value).startswith("sgl_kernel.all_reduce: "), str(info.value)
        with pytest.raises(RuntimeError, match="timed out"):
            sgl_kernel.all_reduce(group.handles[0], torch.empty(0, device="cuda"), torch.empty(0, device="cuda"), 0, 0)
    finally:
        group.dispose()


def test_unregistered_graph_buffer_poisons_the_handle(gen):
    """A graph replayed before register_graph_buffers: the kernel computes nothing and flags
    it; the next call on the handle raises naming register_graph_buffers; dispose works."""
    group = EmulatedGroup(2, 1 << 20, env=emulation_env(timeout_ms=2000))
    try:
        _assert_group_works(group, gen)
        xs = [torch.randn(4096, device="cuda", generator=gen) for _ in range(2)]
        outs = [torch.empty_like(x) for x in xs]
        graphs = group.capture(lambda r: sgl_kernel.all_reduce(group.handles[r], xs[r], outs[r], 0, 0))
        start = time.monotonic()
        group.replay(graphs, ranks=[0])  # no registration; rank 1 does not even replay
        torch.cuda.synchronize()
        assert time.monotonic() - start < 10.0
        with pytest.raises(RuntimeError, match="register_graph_buffers") as info:
            sgl_kernel.all_reduce(group.handles[0], xs[0], outs[0], group.staging_ptr(0), group.max_size)
        assert str(info.value).startswith("sgl_kernel.all_reduce: "), str(info.value)
    finally:
        group.dispose()


# ---------------------------------------------------------------------------------------
# Argument errors: raised on the host before anything is launched, so one rank alone may
# make the bad call; the group still works afterwards.


@pytest.fixture
def pair():
    group = EmulatedGroup(2, 1 << 20, env=emulation_env(timeout_ms=5000))
    try:
        yield group
    finally:
        group.dispose()


def _x(n: int = 1024, dtype=torch.float32) -> torch.Tensor:
    return torch.randn(n, device="cuda").to(dtype)


# name -> (call(group), argument named first or None, fragments of the message)
BAD_CALLS = {
    "inp_cpu": (lambda g: (_x().cpu(), _x(), g.staging_ptr(0), g.max_size), "inp", ("CUDA tensor",)),
    "out_cpu": (lambda g: (_x(), _x().cpu(), g.staging_ptr(0), g.max_size), "out", ("device",)),
    "inp_int32": (lambda g: (_x().int(), _x().int(), g.staging_ptr(0), g.max_size), "inp", ("dtype",)),
    "inp_fp64": (lambda g: (_x().double(), _x().double(), g.staging_ptr(0), g.max_size), "inp", ("dtype",)),
    "out_dtype": (lambda g: (_x(), _x(1024, torch.float16), g.staging_ptr(0), g.max_size), "out", ("dtype",)),
    "out_numel": (lambda g: (_x(), _x(512), g.staging_ptr(0), g.max_size), "out", ("shape",)),
    "inp_not_contiguous": (lambda g: (_x(2048).view(64, 32).t(), _x(2048).view(32, 64), g.staging_ptr(0), g.max_size),
                           "inp", ("contiguous",)),
    "out_not_contiguous": (lambda g: (_x(2048).view(32, 64), _x(2048).view(64, 32).t(), g.staging_ptr(0), g.max_size),
                           "out", ("contiguous",)),
    "bytes_fp32_12": (lambda g: (_x(3), _x(3), g.staging_ptr(0), g.max_size), "inp", ("16",)),
    "bytes_bf16_24": (lambda g: (_x(12, torch.bfloat16), _x(12, torch.bfloat16), g.staging_ptr(0), g.max_size), "inp",
                      ("16",)),
    "bytes_fp16_1000": (lambda g: (_x(500, torch.float16), _x(500, torch.float16), 0, 0), "inp", ("16",)),
    "reg_buffer_unregistered": (lambda g: (_x(), _x(), _x().data_ptr(), g.max_size), "reg_buffer", ("registered",)),
    "reg_buffer_too_small": (lambda g: (_x(), _x(), g.staging_ptr(0), 4096 - 16), None, ("reg_buffer_sz_bytes",)),
    "inp_unregistered": (lambda g: (_x(), _x(), 0, 0), None, ("registered buffer", "inp")),
    "out_aliases_inp": (lambda g: (g.staging[0][:4096].view(torch.float32),) * 2 + (0, 0), "out", ()),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_all_reduce_bad_arguments(case, pair, gen):
    make, arg, fragments = BAD_CALLS[case]
    args = make(pair)
    if arg is None:
        with pytest.raises(RuntimeError) as info:
            sgl_kernel.all_reduce(pair.handles[0], *args)
        msg = str(info.value)
        assert msg.startswith("sgl_kernel.all_reduce: "), msg
        for f in fragments:
            assert f in msg, f"{f!r} not in {msg!r}"
    else:
        with raises_op_error("all_reduce", arg, *fragments):
            sgl_kernel.all_reduce(pair.handles[0], *args)
    torch.cuda.synchronize()
    _assert_group_works(pair, gen)


@pytest.mark.parametrize("fa", [0, -5, 10 ** 12])
def test_all_reduce_unknown_handle(fa):
    x = _x()
    with raises_op_error("all_reduce", "fa", "unknown or disposed handle"):
        sgl_kernel.all_reduce(fa, x, torch.empty_like(x), 0, 0)


def test_disposed_handles(gen):
    group = EmulatedGroup(2, 1 << 20, env=emulation_env())
    _assert_group_works(group, gen)
    handles = list(group.handles)
    group.dispose()
    x = _x()
    for fa in handles:
        with raises_op_error("all_reduce", "fa", "unknown or disposed handle"):
            sgl_kernel.all_reduce(fa, x, torch.empty_like(x), 0, 0)
        for op, args in (("dispose", ()), ("get_graph_buffer_ipc_meta", ()), ("register_buffer", ([1 << 20] * 2,)),
                         ("register_graph_buffers", ([[], []], [[], []]))):
            with pytest.raises(RuntimeError, match=rf"^sgl_kernel\.{op}: .*disposed handle"):
                getattr(sgl_kernel, op)(fa, *args)


def _signals(world: int):
    bufs = [torch.zeros(sgl_kernel.meta_size() + (1 << 20), dtype=torch.uint8, device="cuda") for _ in range(world)]
    torch.cuda.synchronize()
    return bufs, [b.data_ptr() for b in bufs]


def _rank_data(nbytes: int = 1 << 20) -> torch.Tensor:
    return torch.empty(nbytes, dtype=torch.uint8, device="cuda")


@pytest.mark.parametrize("world", [1, 3, 5, 7, 9, 16])
def test_init_bad_world_size(world):
    bufs, ptrs = _signals(world)
    with raises_op_error("init_custom_ar", "ipc_tensors"):
        sgl_kernel.init_custom_ar(ptrs, _rank_data(), 0, True)


@pytest.mark.parametrize("world, rank", [(2, 2), (2, -1), (4, 4), (8, 100)])
def test_init_bad_rank(world, rank):
    bufs, ptrs = _signals(world)
    with raises_op_error("init_custom_ar", "rank"):
        sgl_kernel.init_custom_ar(ptrs, _rank_data(), rank, True)


@pytest.mark.parametrize("world", [4, 6, 8])
def test_init_full_nvlink_false_needs_two_ranks(world):
    bufs, ptrs = _signals(world)
    with raises_op_error("init_custom_ar", "full_nvlink"):
        sgl_kernel.init_custom_ar(ptrs, _rank_data(), 0, False)


def test_init_full_nvlink_false_two_ranks(gen):
    """full_nvlink=False is valid with two ranks (PCIe peer-to-peer)."""
    with EmulatedGroup(2, 1 << 20, full_nvlink=False, env=emulation_env()) as group:
        _assert_group_works(group, gen, torch.bfloat16, (512 << 10) + 16)


@pytest.mark.parametrize(
    "make, fragment",
    [
        (lambda: torch.empty(1 << 18, dtype=torch.float32, device="cuda"), "dtype"),
        (lambda: _rank_data(2 << 20)[::2], "contiguous"),
        (lambda: _rank_data(16), ""),
    ],
    ids=["fp32", "strided", "16-bytes"],
)
def test_init_bad_rank_data(make, fragment):
    bufs, ptrs = _signals(2)
    with raises_op_error("init_custom_ar", "rank_data", *([fragment] if fragment else [])):
        sgl_kernel.init_custom_ar(ptrs, make(), 0, True)


@pytest.mark.parametrize(
    "name, value",
    [("SGL_KERNEL_AR_ALGO", "threeshot"), ("SGL_KERNEL_AR_MAX_BLOCKS", "0"), ("SGL_KERNEL_AR_MAX_BLOCKS", "65"),
     ("SGL_KERNEL_AR_TIMEOUT_MS", "soon")],
)
def test_init_bad_environment(name, value, monkeypatch):
    """The environment variables are read (and validated) when a handle is created."""
    bufs, ptrs = _signals(2)
    monkeypatch.setenv(name, value)
    with pytest.raises(RuntimeError, match=name) as info:
        sgl_kernel.init_custom_ar(ptrs, _rank_data(), 0, True)
    assert str(info.value).startswith("sgl_kernel.init_custom_ar: "), str(info.value)
