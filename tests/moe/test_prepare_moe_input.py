# SPDX-License-Identifier: Apache-2.0
"""prepare_moe_input (API.md 2.4; contract in csrc/moe/moe.h) on the GPU, against
tests/moe/ref_prepare_moe_input.py.

Every output is an int32 tensor, compared exactly with the reference: expert_offsets,
blockscale_offsets (when passed; untouched when not), problem_sizes1 / 2, input_permutation
(the -1 tail included) and output_permutation (-1 for dropped ids), with the slots inside an
expert in ascending flat-index order (the kernel's documented, deterministic order). Each output
sits inside a buffer of guard entries, and the outputs themselves start as POISON, so a write
outside an output, or a missing write, shows. Shapes cover decode (one launch, one block), the
one-block path with sub-chunks (many experts), the three-launch path past 4096 entries, odd sizes
at every boundary, T = 0, E = 1, up to 4096 experts, skewed and out-of-range ids (-1, E, int32
extremes), large n / k values, CUDA-graph replay, opcheck and the binding's checks.
"""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.helpers import raises_op_error
from tests.moe.ref_prepare_moe_input import prepare_moe_input_torch, prepare_reference

pytestmark = pytest.mark.gpu

OP_NAME = "prepare_moe_input"
POISON = -12345  # never a slot, a token or -1
GUARD = 64
I32 = torch.int32
N_DEF, K_DEF = 7168, 2048  # DeepSeek-V3: hidden 7168, moe_intermediate 2048
MAX_EXPERTS = 4096
SINGLE_MAX = 4096  # entries: one launch up to here, three past it (when numel >= 2 E)


def _op():
    # resolved at call time: the module must collect where the op is not built yet
    return torch.ops.sgl_kernel.prepare_moe_input.default


def routed_ids(T: int, k: int, E: int, gen, drop: float = 0.0) -> torch.Tensor:
    """[T, k] int32 ids as a router makes them: k distinct experts a token (top-k of random
    scores); a fraction ``drop`` of them -1 (experts of another rank under expert parallelism)."""
    if T == 0:
        return torch.empty(0, k, dtype=I32, device="cuda")
    ids = torch.rand(T, E, device="cuda", generator=gen).topk(k, dim=1).indices
    if drop > 0:
        ids = torch.where(torch.rand(T, k, device="cuda", generator=gen) < drop, -1, ids)
    return ids.to(I32).contiguous()


def uniform_ids(n: int, E: int, gen, topk: int = 1, lo: int = 0) -> torch.Tensor:
    """[n / topk, topk] ids uniform in [lo, E) (repeats allowed): any entry count."""
    return torch.randint(lo, E, (n // topk, topk), device="cuda", generator=gen).to(I32)


class Outs:
    """The outputs, each a view inside a buffer of GUARD POISON entries on both sides, ``shift``
    entries past the leading guard (unaligned starts), filled with POISON."""

    NAMES = ("expert_offsets", "blockscale_offsets", "problem_sizes1", "problem_sizes2", "input_permutation",
             "output_permutation")

    def __init__(self, numel: int, E: int, blockscale: bool = True, shift: int = 0):
        self._bufs = {}
        self.expert_offsets = self._guarded("expert_offsets", (E + 1,), shift)
        self.blockscale_offsets = self._guarded("blockscale_offsets", (E + 1,), shift) if blockscale else None
        self.problem_sizes1 = self._guarded("problem_sizes1", (E, 3), shift)
        self.problem_sizes2 = self._guarded("problem_sizes2", (E, 3), shift)
        self.input_permutation = self._guarded("input_permutation", (numel,), shift)
        self.output_permutation = self._guarded("output_permutation", (numel,), shift)

    def _guarded(self, name: str, shape, shift: int) -> torch.Tensor:
        length = 1
        for s in shape:
            length *= s
        buf = torch.full((GUARD + shift + length + GUARD,), POISON, dtype=I32, device="cuda")
        start = GUARD + shift
        self._bufs[name] = (buf, start, start + length)
        return buf[start : start + length].view(shape)

    def poison(self) -> None:
        for buf, _, _ in self._bufs.values():
            buf.fill_(POISON)

    def check_guards(self) -> None:
        for name, (buf, start, end) in self._bufs.items():
            assert bool((buf[:start] == POISON).all()) and bool((buf[end:] == POISON).all()), f"written outside {name}"

    def snapshot(self):
        return [buf.clone() for buf, _, _ in self._bufs.values()]


def call(ids: torch.Tensor, E: int, outs: Outs, n: int = N_DEF, k: int = K_DEF, wrapper: bool = True) -> None:
    if wrapper:
        sgl_kernel.prepare_moe_input(ids, outs.expert_offsets, outs.problem_sizes1, outs.problem_sizes2,
                                     outs.input_permutation, outs.output_permutation, E, n, k,
                                     blockscale_offsets=outs.blockscale_offsets)
    else:
        _op()(ids, outs.expert_offsets, outs.blockscale_offsets, outs.problem_sizes1, outs.problem_sizes2,
              outs.input_permutation, outs.output_permutation, E, n, k)


def _first_diff(got: torch.Tensor, want: torch.Tensor, name: str) -> str:
    bad = (got.reshape(-1) != want.reshape(-1)).nonzero().flatten()[:5].tolist()
    return (f"{name} differs at flat positions {bad}: got {got.reshape(-1)[bad].tolist()}, "
            f"expected {want.reshape(-1)[bad].tolist()}")


def check(outs: Outs, ids: torch.Tensor, E: int, n: int = N_DEF, k: int = K_DEF, ref=None) -> None:
    torch.cuda.synchronize()
    ref = ref if ref is not None else prepare_reference(ids, E, n, k)
    outs.check_guards()
    pairs = [("expert_offsets", outs.expert_offsets, ref.expert_offsets),
             ("problem_sizes1", outs.problem_sizes1, ref.problem_sizes1),
             ("problem_sizes2", outs.problem_sizes2, ref.problem_sizes2),
             ("output_permutation", outs.output_permutation, ref.output_permutation),
             ("input_permutation", outs.input_permutation, ref.input_permutation)]
    if outs.blockscale_offsets is not None:
        pairs.insert(1, ("blockscale_offsets", outs.blockscale_offsets, ref.blockscale_offsets))
    for name, got, want in pairs:
        if not torch.equal(got, want):
            if name == "input_permutation":
                # a wrong set (not only a wrong order) points at the ranking; say which
                total = int(ref.expert_offsets[-1])
                same_set = torch.equal(torch.sort(got[:total]).values, torch.sort(want[:total]).values)
                name += " (same tokens, other order)" if same_set else ""
            raise AssertionError(_first_diff(got, want, name))


def call_and_check(ids, E, n=N_DEF, k=K_DEF, blockscale=True, shift=0, wrapper=True) -> Outs:
    outs = Outs(ids.numel(), E, blockscale, shift)
    call(ids, E, outs, n, k, wrapper)
    check(outs, ids, E, n, k)
    return outs


# ---------------------------------------------------------------------------------------
# Values

# (E, topk): DeepSeek-V3, Qwen3-MoE, DeepSeek-V2-Lite, Mixtral-8x7B
MODELS = [(256, 8), (128, 8), (64, 6), (8, 2)]


@pytest.mark.parametrize("blockscale", [False, True], ids=["nobs", "bs"])
@pytest.mark.parametrize("T", [1, 16, 128, 1000, 4096])
@pytest.mark.parametrize("E, k", MODELS, ids=[f"E{e}k{k}" for e, k in MODELS])
def test_model_shapes(E, k, T, blockscale, gen):
    ids = routed_ids(T, k, E, gen)
    call_and_check(ids, E, blockscale=blockscale)


@pytest.mark.parametrize("T", [2048, 16384])
@pytest.mark.parametrize("E, k", [(256, 8), (8, 2)], ids=["E256k8", "E8k2"])
def test_prefill(E, k, T, gen):
    """Large T (three launches), with ids dropped by expert parallelism."""
    ids = routed_ids(T, k, E, gen, drop=0.25)
    call_and_check(ids, E)


# Entry counts at the path boundaries: one entry a thread up to 1024, registers up to 16 a lane on
# one block, three launches past 4096 (chunks of ~2048), a chunk that needs two sub-chunks.
SIZES = [1, 31, 32, 33, 1023, 1024, 1025, 2049, 4095, 4096, 4097, 6143, 8193, 65537, 131072, 262145, 1_000_003]


@pytest.mark.parametrize("n", SIZES)
def test_sizes(n, gen):
    E = 256
    ids = uniform_ids(n, E + 8, gen, lo=-8)  # ~6 % dropped (-8..-1 and E..E+7)
    call_and_check(ids, E, blockscale=n % 2 == 1)


@pytest.mark.parametrize("topk", [1, 3, 8, 10])
def test_topk_values(topk, gen):
    """input_permutation holds i // topk for any topk (the kernel's fast division)."""
    for T in (5, 700, 3001):
        ids = uniform_ids(T * topk, 96, gen, topk=topk)
        call_and_check(ids, 96)


@pytest.mark.parametrize("T", [1, 100, 700, 1100, 5000])
@pytest.mark.parametrize("E", [1000, 2047, MAX_EXPERTS])
def test_many_experts(E, T, gen):
    """Up to kMaxPrepareExperts: fewer counter rows fit shared memory, the one-block kernel ranks
    in sub-chunks (numel past its rows' capacity but below 2 E), chunks hold at least E entries."""
    ids = routed_ids(T, 8, E, gen, drop=0.05)
    call_and_check(ids, E)


@pytest.mark.parametrize("n", [1, 1000, 5000, 70000])
def test_one_expert_total(n, gen):
    """E = 1: id 0 kept, every other id dropped."""
    ids = torch.randint(-2, 3, (n, 1), device="cuda", generator=gen).to(I32)
    call_and_check(ids, 1)


@pytest.mark.parametrize("kind", ["one_expert", "all_minus_one", "all_E", "half_one_expert", "two_experts"])
@pytest.mark.parametrize("n", [7, 1024, 20000, 300000])
def test_skewed(kind, n, gen):
    """Whole warps on one expert (match groups of 32), nothing kept (the whole input_permutation is
    the -1 tail), one huge expert, many experts with no entry."""
    E = 64
    if kind == "one_expert":
        ids = torch.full((n, 1), 3, dtype=I32, device="cuda")
    elif kind == "all_minus_one":
        ids = torch.full((n, 1), -1, dtype=I32, device="cuda")
    elif kind == "all_E":
        ids = torch.full((n, 1), E, dtype=I32, device="cuda")
    elif kind == "two_experts":
        ids = torch.randint(0, 2, (n, 1), device="cuda", generator=gen).to(I32) * (E - 1)
    else:
        ids = uniform_ids(n, E, gen)
        ids[::2] = 0
    call_and_check(ids, E)


@pytest.mark.parametrize("n", [5, 1000, 4100, 70000])
def test_out_of_range_dropped(n, gen):
    """Ids outside [0, E) (int32 extremes included) are counted nowhere, get output_permutation -1
    and leave input_permutation's tail at -1. Outputs start at unaligned offsets."""
    E = 32
    ids = uniform_ids(n, E, gen)
    special = torch.tensor([-1, -2, E, E + 7, 2**31 - 1, -(2**31), E - 1, 0], dtype=I32, device="cuda")
    pick = torch.randint(0, special.numel(), (n,), device="cuda", generator=gen)
    use = torch.rand(n, device="cuda", generator=gen) < 0.3
    ids = torch.where(use[:, None], special[pick][:, None], ids).contiguous()
    call_and_check(ids, E, shift=1)
    call_and_check(ids, E, shift=3, wrapper=False)


@pytest.mark.parametrize("n, k", [(0, 0), (1, 1), (4096, 7168), (2**30 - 1, 2**31 - 1)])
def test_problem_size_values(n, k, gen):
    """Any n, k with 2n in int32 land in the problem sizes unchanged."""
    ids = routed_ids(33, 8, 128, gen)
    call_and_check(ids, 128, n=n, k=k)


@pytest.mark.parametrize("blockscale", [False, True], ids=["nobs", "bs"])
@pytest.mark.parametrize("E", [1, 8, 256, MAX_EXPERTS])
def test_empty(E, blockscale):
    """T = 0: no entries, but the offsets (all 0) and problem sizes ((0, 2n, k), (0, k, n)) are
    written."""
    ids = torch.empty(0, 8, dtype=I32, device="cuda")
    call_and_check(ids, E, blockscale=blockscale)


def test_blockscale_off_untouched(gen):
    """Without blockscale_offsets nothing else changes (and nothing is written in its place)."""
    ids = routed_ids(300, 8, 256, gen, drop=0.1)
    a = call_and_check(ids, 256, blockscale=False)
    b = call_and_check(ids, 256, blockscale=True)
    for name in ("expert_offsets", "input_permutation", "output_permutation"):
        assert torch.equal(getattr(a, name), getattr(b, name))


@pytest.mark.parametrize("T", [1, 128, 16384])
def test_matches_torch_baseline(T, gen):
    """The bench's baseline (the engine-style torch version) writes the same outputs."""
    E, k = 256, 8
    ids = routed_ids(T, k, E, gen, drop=0.1)
    ours = call_and_check(ids, E)
    theirs = Outs(ids.numel(), E)
    prepare_moe_input_torch(ids, theirs.expert_offsets, theirs.problem_sizes1, theirs.problem_sizes2,
                            theirs.input_permutation, theirs.output_permutation, E, N_DEF, K_DEF,
                            blockscale_offsets=theirs.blockscale_offsets)
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(ours.snapshot(), theirs.snapshot()))


# ---------------------------------------------------------------------------------------
# Determinism, CUDA graphs, opcheck


@pytest.mark.parametrize("n", [1024, 3000, 131072, 300000])
def test_deterministic(n, gen):
    E = 128
    ids = uniform_ids(n, E, gen)
    ids[: n // 3] = 5  # one heavy expert: many match groups of 32
    a = Outs(n, E)
    b = Outs(n, E)
    call(ids, E, a)
    call(ids, E, b)
    torch.cuda.synchronize()
    assert all(torch.equal(x, y) for x, y in zip(a.snapshot(), b.snapshot()))


@pytest.mark.parametrize("T", [1, 128, 16384])
def test_cuda_graph(T, gen):
    """Captured once, replayed on new ids (more and more dropped) into poisoned outputs."""
    E, k = 256, 8
    ids = routed_ids(T, k, E, gen)
    outs = Outs(ids.numel(), E)
    call(ids, E, outs)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call(ids, E, outs)
    for drop in (0.0, 0.3, 1.0):
        ids.copy_(routed_ids(T, k, E, gen, drop=drop))
        outs.poison()
        graph.replay()
        check(outs, ids, E)


@pytest.mark.parametrize("blockscale", [False, True], ids=["nobs", "bs"])
@pytest.mark.parametrize("T", [37, 1000])
def test_opcheck(T, blockscale, gen):
    E = 64
    ids = routed_ids(T, 6, E, gen, drop=0.1)
    numel = ids.numel()

    def full(*shape):
        return torch.full(shape, POISON, dtype=I32, device="cuda")

    args = (ids, full(E + 1), full(E + 1) if blockscale else None, full(E, 3), full(E, 3), full(numel), full(numel),
            E, N_DEF, K_DEF)
    torch.library.opcheck(_op(), args)


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops: the C++ checks protect direct callers too)


def _args(**changes):
    c = dict(dtype=I32, device="cuda")
    T, topk, E = 10, 2, 16
    args = {
        "topk_ids": torch.randint(0, E, (T, topk), **c),
        "expert_offsets": torch.empty(E + 1, **c),
        "blockscale_offsets": torch.empty(E + 1, **c),
        "problem_sizes1": torch.empty(E, 3, **c),
        "problem_sizes2": torch.empty(E, 3, **c),
        "input_permutation": torch.empty(T * topk, **c),
        "output_permutation": torch.empty(T * topk, **c),
        "num_experts": E,
        "n": 64,
        "k": 32,
    }
    for key, fn in changes.items():
        args[key] = fn(args[key])
    return args


def _i32(*shape):
    return torch.empty(shape, dtype=I32, device="cuda")


# NOTE for the binding: each case names the argument its message should name first (API.md 1.4).
BAD = [
    ("ids-cpu", dict(topk_ids=lambda t: t.cpu()), "topk_ids", ["CUDA"]),
    ("ids-int64", dict(topk_ids=lambda t: t.long()), "topk_ids", ["dtype", "torch.int64"]),
    ("ids-float", dict(topk_ids=lambda t: t.float()), "topk_ids", ["dtype", "torch.float32"]),
    ("ids-strided", dict(topk_ids=lambda t: t.t()), "topk_ids", ["contiguous"]),
    ("offsets-int64", dict(expert_offsets=lambda t: t.long()), "expert_offsets", ["dtype"]),
    ("offsets-short", dict(expert_offsets=lambda t: t[:16]), "expert_offsets", []),
    ("offsets-long", dict(expert_offsets=lambda t: _i32(18)), "expert_offsets", []),
    ("blockscale-short", dict(blockscale_offsets=lambda t: t[:16]), "blockscale_offsets", []),
    ("blockscale-int64", dict(blockscale_offsets=lambda t: t.long()), "blockscale_offsets", ["dtype"]),
    ("sizes1-shape", dict(problem_sizes1=lambda t: _i32(16, 2)), "problem_sizes1", []),
    ("sizes1-rows", dict(problem_sizes1=lambda t: _i32(15, 3)), "problem_sizes1", []),
    ("sizes2-int64", dict(problem_sizes2=lambda t: t.long()), "problem_sizes2", ["dtype"]),
    ("sizes2-strided", dict(problem_sizes2=lambda t: _i32(3, 16).t()), "problem_sizes2", ["contiguous"]),
    ("input-perm-short", dict(input_permutation=lambda t: t[:19]), "input_permutation", []),
    ("output-perm-long", dict(output_permutation=lambda t: _i32(21)), "output_permutation", []),
    ("output-perm-cpu", dict(output_permutation=lambda t: t.cpu()), "output_permutation", []),
    ("experts-0", dict(num_experts=lambda v: 0), "num_experts", []),
    ("experts-4097", dict(num_experts=lambda v: 4097), "num_experts", ["4096"]),
    ("n-negative", dict(n=lambda v: -1), "n", []),
    ("n-2n-overflow", dict(n=lambda v: 2**30), "n", []),
    ("k-too-large", dict(k=lambda v: 2**31), "k", []),
]


@pytest.mark.parametrize("changes, arg, fragments", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input(changes, arg, fragments):
    a = _args(**changes)
    with raises_op_error(OP_NAME, arg, *fragments):
        _op()(a["topk_ids"], a["expert_offsets"], a["blockscale_offsets"], a["problem_sizes1"], a["problem_sizes2"],
              a["input_permutation"], a["output_permutation"], a["num_experts"], a["n"], a["k"])


def test_num_experts_mismatch():
    """num_experts must match the outputs' sizes: the offsets (E + 1) and problem sizes (E rows)
    sized for 16 experts, num_experts 15 or 17; the message names one of those arguments."""
    for E in (15, 17):
        a = _args(num_experts=lambda v, E=E: E)
        names = r"(expert_offsets|num_experts|problem_sizes1)"
        with pytest.raises(RuntimeError, match=rf"^sgl_kernel\.{OP_NAME}: {names}"):
            _op()(a["topk_ids"], a["expert_offsets"], a["blockscale_offsets"], a["problem_sizes1"],
                  a["problem_sizes2"], a["input_permutation"], a["output_permutation"], a["num_experts"], a["n"],
                  a["k"])


def test_debug_raises(monkeypatch, gen):
    """SGL_KERNEL_DEBUG=1: an id outside [0, E) raises (the op synchronises); without it the id
    is dropped silently."""
    monkeypatch.setenv("SGL_KERNEL_DEBUG", "1")
    E = 16
    for bad in (E, -2, 2**31 - 1):
        ids = torch.tensor([[3, bad], [1, 0]], dtype=I32, device="cuda")
        with raises_op_error(OP_NAME, "topk_ids", "outside"):
            call(ids, E, Outs(ids.numel(), E))
    ids = routed_ids(9, 2, E, gen)
    call_and_check(ids, E)
    monkeypatch.setenv("SGL_KERNEL_DEBUG", "0")
    ids = torch.tensor([[3, E]], dtype=I32, device="cuda")
    call_and_check(ids, E)


@pytest.mark.parametrize("which", ["output_permutation", "input_permutation"])
def test_permutation_sharing_topk_ids_refused(which):
    """A permutation written over topk_ids' memory is refused by name (the large-input path keeps
    per-chunk counts in output_permutation between launches while topk_ids is still read)."""
    a = _args()
    a[which] = a["topk_ids"].view(-1)
    with raises_op_error(OP_NAME, which, "share memory", "topk_ids"):
        _op()(a["topk_ids"], a["expert_offsets"], a["blockscale_offsets"], a["problem_sizes1"], a["problem_sizes2"],
              a["input_permutation"], a["output_permutation"], a["num_experts"], a["n"], a["k"])
