# SPDX-License-Identifier: Apache-2.0
"""moe_align_block_size (API.md 2.4) on the GPU, against tests/moe/ref_moe_align.py.

Every output sits inside a buffer of guard entries holding POISON, and the outputs themselves
start out as POISON, so that a write outside an output, or a missing write, shows. A call is
checked for: num_tokens_post_pad; cumsum_buffer[0 : num_experts + 1] = the padded offsets
(moe.h's contract; API.md leaves it unspecified); experts_ids of every used block; the set of
flat indices of every bucket's segment, then their order (ascending: the kernel's documented
order, which also makes it deterministic); the padding (numel with pad_sorted_token_ids,
untouched POISON without) inside the segments and in the tail up to sorted_token_ids' end.
Shapes cover decode (one block) and prefill (a thread-block cluster on sm90+; the one-block
streaming path past 16384 entries without one, forced here through
SGL_KERNEL_MOE_ALIGN_CLUSTER=1), odd sizes at every path boundary, -1 ids (bucket 0), ids out
of range (dropped), int64 ids, block sizes from 1 to 256, up to 4096 buckets, CUDA-graph
replay, opcheck and the binding's checks.
"""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.helpers import raises_op_error
from tests.moe.ref_moe_align import (
    align_reference,
    api_buffer_sizes,
    moe_align_block_size_torch,
    sglang_buffer_sizes,
)

pytestmark = pytest.mark.gpu

OP = torch.ops.sgl_kernel.moe_align_block_size.default
OP_NAME = "moe_align_block_size"
POISON = -12345  # never a flat index, never numel
GUARD = 64
I32 = torch.int32
I64 = torch.int64
CLUSTER_ENV = "SGL_KERNEL_MOE_ALIGN_CLUSTER"


def routed_ids(T: int, k: int, E: int, gen, dtype=I32, drop: float = 0.0) -> torch.Tensor:
    """[T, k] ids as a router makes them: k distinct experts a token (top-k of random scores);
    a fraction ``drop`` of them -1 (experts of another rank under expert parallelism)."""
    if T == 0:
        return torch.empty(0, k, dtype=dtype, device="cuda")
    ids = torch.rand(T, E, device="cuda", generator=gen).topk(k, dim=1).indices
    if drop > 0:
        ids = torch.where(torch.rand(T, k, device="cuda", generator=gen) < drop, -1, ids)
    return ids.to(dtype).contiguous()


def uniform_ids(n: int, E: int, gen, dtype=I32) -> torch.Tensor:
    """[n, 1] ids uniform in [-1, E) (repeats allowed): any entry count."""
    return torch.randint(-1, E, (n, 1), device="cuda", generator=gen).to(dtype)


class Outs:
    """The four outputs, each a view inside a buffer of GUARD POISON entries on both sides,
    ``offsets[i]`` entries past the leading guard (unaligned starts), filled with POISON."""

    def __init__(self, sorted_len: int, eids_len: int, nb: int, offsets=(0, 0, 0, 0), cumsum_len=None):
        self._bufs = []
        self.sorted = self._guarded(sorted_len, offsets[0])
        self.eids = self._guarded(eids_len, offsets[1])
        self.ntpp = self._guarded(1, offsets[2])
        self.cumsum = self._guarded(nb + 1 if cumsum_len is None else cumsum_len, offsets[3])
        self.nb = nb

    def _guarded(self, length: int, offset: int) -> torch.Tensor:
        buf = torch.full((GUARD + offset + length + GUARD,), POISON, dtype=I32, device="cuda")
        start = GUARD + offset
        self._bufs.append((buf, start, start + length))
        return buf[start : start + length]

    def args(self):
        return self.sorted, self.eids, self.ntpp, self.cumsum

    def poison(self) -> None:
        for buf, _, _ in self._bufs:
            buf.fill_(POISON)

    def check_guards(self) -> None:
        for name, (buf, start, end) in zip(("sorted_token_ids", "experts_ids", "num_tokens_post_pad",
                                            "cumsum_buffer"), self._bufs):
            assert bool((buf[:start] == POISON).all()) and bool((buf[end:] == POISON).all()), (
                f"written outside {name}")

    def snapshot(self):
        return [buf.clone() for buf, _, _ in self._bufs]


def run(ids: torch.Tensor, nb: int, bs: int, pad: bool, sizes=None, offsets=(0, 0, 0, 0), wrapper=False,
        cumsum_len=None) -> Outs:
    """One call on fresh poisoned outputs; sizes = (sorted_len, experts_len), API.md's bound by default."""
    sorted_len, eids_len = sizes or api_buffer_sizes(ids.numel(), nb, bs)
    outs = Outs(sorted_len, eids_len, nb, offsets, cumsum_len)
    fn = sgl_kernel.moe_align_block_size if wrapper else OP
    fn(ids, nb, bs, *outs.args(), pad)
    return outs


def check(outs: Outs, ids: torch.Tensor, nb: int, bs: int, pad: bool, ref=None) -> None:
    torch.cuda.synchronize()
    ref = ref if ref is not None else align_reference(ids, nb, bs)
    n, total = ids.numel(), ref.total
    outs.check_guards()
    got_total = int(outs.ntpp.item())
    assert got_total == total, f"num_tokens_post_pad {got_total}, expected {total}"
    cum = outs.cumsum[: nb + 1].long()
    if not torch.equal(cum, ref.offsets):
        bad = (cum != ref.offsets).nonzero().flatten()[:5].tolist()
        raise AssertionError(f"cumsum_buffer differs at {bad}: {cum[bad].tolist()} vs {ref.offsets[bad].tolist()}")
    nblk = total // bs
    got_e = outs.eids[:nblk]
    if not torch.equal(got_e, ref.block_experts):
        bad = (got_e != ref.block_experts).nonzero().flatten()[:5].tolist()
        raise AssertionError(f"experts_ids differ at blocks {bad}: {got_e[bad].tolist()} vs "
                             f"{ref.block_experts[bad].tolist()}")
    s = outs.sorted
    assert s.numel() >= total
    used = s[:total]
    real = ~ref.pad_mask
    # the set of each bucket's segment: (bucket of the position, index) pairs, order aside
    seg = torch.repeat_interleave(torch.arange(nb, device="cuda"), ref.offsets[1:] - ref.offsets[:-1])
    got_keys = torch.sort(seg[real] * (n + 1) + used[real].long()).values
    ref_keys = torch.sort(seg[real] * (n + 1) + ref.sorted_ids[real].long()).values
    if not torch.equal(got_keys, ref_keys):
        bad = (got_keys != ref_keys).nonzero().flatten()[:3].tolist()
        pairs = [[divmod(int(k), n + 1) for k in keys[bad]] for keys in (got_keys, ref_keys)]
        raise AssertionError(f"bucket contents differ: (bucket, index) {pairs[0]} vs {pairs[1]}")
    # the order inside a bucket: ascending flat index
    if not torch.equal(used[real], ref.sorted_ids[real]):
        bad = (used != ref.sorted_ids).logical_and(real).nonzero().flatten()[:5].tolist()
        raise AssertionError(f"order inside a bucket not ascending at positions {bad}")
    fill = n if pad else POISON
    pads_ok = bool((used[ref.pad_mask] == fill).all()) and bool((s[total:] == fill).all())
    assert pads_ok, f"padding must be {'numel' if pad else 'untouched'} ({fill})"


def call_and_check(ids, nb, bs, pad, **kw) -> Outs:
    outs = run(ids, nb, bs, pad, **kw)
    check(outs, ids, nb, bs, pad)
    return outs


# ---------------------------------------------------------------------------------------
# Values

# (E, topk): Mixtral-8x7B, DeepSeek-V2-Lite, Qwen3-MoE, DeepSeek-V3, Kimi-K2, 512 experts
MODELS = [(8, 2), (64, 6), (128, 8), (256, 8), (384, 8), (512, 8)]


@pytest.mark.parametrize("bs", [16, 64])
@pytest.mark.parametrize("T", [1, 16, 128, 1000, 4096])
@pytest.mark.parametrize("E, k", MODELS, ids=[f"E{e}k{k}" for e, k in MODELS])
def test_model_shapes(E, k, T, bs, gen):
    ids = routed_ids(T, k, E, gen)
    call_and_check(ids, E + 1, bs, True)


@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("bs", [1, 2, 3, 7, 32, 100, 128, 256])
def test_block_sizes(bs, pad, gen):
    ids = routed_ids(97, 4, 60, gen, drop=0.1)
    call_and_check(ids, 61, bs, pad)


# Entry counts at the path boundaries: one entry a thread (<= 1024), registers up to 16 a lane
# on one block (16384), clusters past 4096 (sm90+), 16 a lane in a 16-block cluster (262144),
# streaming beyond.
SIZES = [1, 31, 32, 33, 1023, 1024, 1025, 4095, 4096, 4097, 8193, 16384, 16385, 65537, 262144, 262145, 1_000_003]


@pytest.mark.parametrize("cluster", [None, "1", "2"])
@pytest.mark.parametrize("n", SIZES)
def test_sizes(n, cluster, gen, monkeypatch):
    """Every launch path (SGL_KERNEL_MOE_ALIGN_CLUSTER caps the cluster: 1 = one block)."""
    if cluster is not None:
        monkeypatch.setenv(CLUSTER_ENV, cluster)
    ids = uniform_ids(n, 256, gen)
    call_and_check(ids, 257, 32, n % 2 == 1)


@pytest.mark.parametrize("n", [1, 1000, 20000, 131072, 300000])
def test_int64_ids(n, gen):
    """int64 ids, among them values whose low 32 bits are a valid id (2^32 - 1 would read as -1,
    2^32 + 5 as 5, if the kernel narrowed them first): dropped."""
    E = 128
    ids = uniform_ids(n, E, gen, I64)
    bad = torch.tensor([2**32 - 1, 2**32 + 5, -(2**32) + 3, 2**40, 2**63 - 1, -(2**63), E, -2], dtype=I64,
                       device="cuda")
    where = torch.randint(0, n, (min(n, 64),), device="cuda", generator=gen)
    ids.view(-1)[where] = bad.repeat(8)[: where.numel()]
    for pad in (False, True):
        call_and_check(ids, E + 1, 64, pad)


@pytest.mark.parametrize("dtype", [I32, I64], ids=str)
@pytest.mark.parametrize("pad", [False, True])
@pytest.mark.parametrize("n", [5, 4100, 70000])
def test_out_of_range_dropped(n, pad, dtype, gen):
    """Ids outside [-1, E) are placed nowhere and counted nowhere; -1 is bucket 0 (expert id -1
    for its blocks). Outputs start at unaligned offsets (the padding's 16-byte stores)."""
    E = 32
    hi = 2**31 - 1 if dtype == I32 else 2**62
    lo = -(2**31) if dtype == I32 else -(2**62)
    ids = uniform_ids(n, E, gen, dtype)
    special = torch.tensor([-1, -2, E, E + 7, hi, lo, E - 1, 0], dtype=dtype, device="cuda")
    pick = torch.randint(0, special.numel(), (n,), device="cuda", generator=gen)
    use = torch.rand(n, device="cuda", generator=gen) < 0.3
    ids = torch.where(use[:, None], special[pick][:, None], ids).contiguous()
    call_and_check(ids, E + 1, 16, pad, offsets=(1, 3, 2, 1))
    call_and_check(ids, E + 1, 16, pad, offsets=(2, 0, 0, 3), wrapper=True)


@pytest.mark.parametrize("kind", ["one_expert", "all_minus_one", "all_out_of_range", "half_one_expert"])
@pytest.mark.parametrize("n", [7, 1024, 20000, 300000])
def test_skewed(kind, n, gen):
    """Whole warps on one bucket (match groups of 32), nothing placed, one huge bucket."""
    E = 64
    if kind == "one_expert":
        ids = torch.full((n, 1), 3, dtype=I32, device="cuda")
    elif kind == "all_minus_one":
        ids = torch.full((n, 1), -1, dtype=I32, device="cuda")
    elif kind == "all_out_of_range":
        ids = torch.full((n, 1), E, dtype=I32, device="cuda")
    else:
        ids = uniform_ids(n, E, gen)
        ids[::2] = 0
    for pad in (False, True):
        call_and_check(ids, E + 1, 64, pad)


@pytest.mark.parametrize("bs", [16, 64])
@pytest.mark.parametrize("T", [1, 2, 16, 32])
def test_sglang_decode_buffers(T, bs, gen):
    """SGLang sizes sorted_token_ids numel * block_size (and experts_ids its blocks) when
    numel < num_experts (E + 1): DeepSeek-V3 decode with T <= 32 (numel <= 256 < 257). That is
    below API.md's numel + num_experts * (block_size - 1), and always enough for the total."""
    E, k = 256, 8
    ids = routed_ids(T, k, E, gen, drop=0.2)
    sizes = sglang_buffer_sizes(ids.numel(), E + 1, bs)
    call_and_check(ids, E + 1, bs, True, sizes=sizes, cumsum_len=E + 2)


@pytest.mark.parametrize("T", [1, 100, 5000])
@pytest.mark.parametrize("E", [1023, 2047, 4095])
def test_many_buckets(E, T, gen):
    """Up to kMaxAlignBuckets (4096) buckets: fewer counter rows fit shared memory."""
    ids = routed_ids(T, 8, E, gen, drop=0.05)
    call_and_check(ids, E + 1, 16, True)


def test_one_bucket(gen):
    """num_experts = 1: only -1 ids are placed (bucket 0), everything else is dropped."""
    ids = torch.randint(-2, 2, (3000, 1), device="cuda", generator=gen).to(I32)
    call_and_check(ids, 1, 16, True)


def test_spare_capacity(gen):
    """Larger outputs than needed: the tail up to sorted_token_ids' end is padding."""
    ids = routed_ids(50, 8, 64, gen)
    sorted_len, eids_len = api_buffer_sizes(ids.numel(), 65, 16)
    call_and_check(ids, 65, 16, True, sizes=(sorted_len + 1001, eids_len + 70), cumsum_len=70)


def test_empty(gen):
    """No entries: num_tokens_post_pad 0, offsets 0, every sorted entry padding (numel = 0)."""
    ids = torch.empty(0, 8, dtype=I32, device="cuda")
    for pad in (False, True):
        call_and_check(ids, 257, 16, pad)


@pytest.mark.parametrize("n", [5000, 131072, 300000])
def test_cluster_sizes_agree(n, gen, monkeypatch):
    """Every cluster cap (1 = one block) gives the same bits."""
    ids = uniform_ids(n, 256, gen)
    results = []
    for cap in ("1", "2", "4", "8", "16"):
        monkeypatch.setenv(CLUSTER_ENV, cap)
        outs = run(ids, 257, 64, True)
        torch.cuda.synchronize()
        results.append(outs.snapshot())
    monkeypatch.delenv(CLUSTER_ENV)
    check(outs, ids, 257, 64, True)
    for other in results[:-1]:
        assert all(torch.equal(a, b) for a, b in zip(other, results[-1]))


@pytest.mark.parametrize("T", [1, 128, 16384])
def test_matches_torch_baseline(T, gen):
    """The bench's baseline (the engine-style torch version) writes the same outputs."""
    E, k, bs = 256, 8, 64
    ids = routed_ids(T, k, E, gen, drop=0.1)
    sizes = sglang_buffer_sizes(ids.numel(), E + 1, bs)
    ours = run(ids, E + 1, bs, True, sizes=sizes)
    theirs = Outs(*sizes, E + 1)
    moe_align_block_size_torch(ids, E + 1, bs, *theirs.args(), True)
    torch.cuda.synchronize()
    assert all(torch.equal(a, b) for a, b in zip(ours.snapshot(), theirs.snapshot()))


# ---------------------------------------------------------------------------------------
# Determinism, CUDA graphs, opcheck


@pytest.mark.parametrize("n", [1024, 131072, 300000])
def test_deterministic(n, gen):
    ids = uniform_ids(n, 128, gen)
    ids[: n // 3] = 5  # one heavy bucket: many match groups of 32
    a = run(ids, 129, 16, True)
    b = run(ids, 129, 16, True)
    torch.cuda.synchronize()
    assert all(torch.equal(x, y) for x, y in zip(a.snapshot(), b.snapshot()))


@pytest.mark.parametrize("T, bs", [(1, 16), (128, 16), (16384, 64)])
def test_cuda_graph(T, bs, gen):
    E, k = 256, 8
    nb = E + 1
    ids = routed_ids(T, k, E, gen)
    outs = Outs(*api_buffer_sizes(ids.numel(), nb, bs), nb)

    def step():
        sgl_kernel.moe_align_block_size(ids, nb, bs, *outs.args(), True)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for drop in (0.0, 0.3, 0.9):
        ids.copy_(routed_ids(T, k, E, gen, drop=drop))
        outs.poison()
        graph.replay()
        check(outs, ids, nb, bs, True)


@pytest.mark.parametrize("dtype", [I32, I64], ids=str)
@pytest.mark.parametrize("pad", [False, True])
def test_opcheck(pad, dtype, gen):
    E, bs = 64, 16
    ids = routed_ids(37, 6, E, gen, dtype=dtype, drop=0.1)
    sorted_len, eids_len = api_buffer_sizes(ids.numel(), E + 1, bs)
    args = (ids, E + 1, bs, torch.full((sorted_len,), POISON, dtype=I32, device="cuda"),
            torch.full((eids_len,), POISON, dtype=I32, device="cuda"), torch.zeros(1, dtype=I32, device="cuda"),
            torch.zeros(E + 2, dtype=I32, device="cuda"), pad)
    torch.library.opcheck(OP, args)


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops: the C++ checks protect direct callers too)


def _args(**changes):
    c = dict(device="cuda")
    n, nb, bs = 20, 17, 4
    sorted_len, eids_len = api_buffer_sizes(n, nb, bs)
    args = {
        "topk_ids": torch.randint(-1, nb - 1, (10, 2), dtype=I32, **c),
        "num_experts": nb,
        "block_size": bs,
        "sorted_token_ids": torch.empty(sorted_len, dtype=I32, **c),
        "experts_ids": torch.empty(eids_len, dtype=I32, **c),
        "num_tokens_post_pad": torch.empty(1, dtype=I32, **c),
        "cumsum_buffer": torch.empty(nb + 1, dtype=I32, **c),
    }
    for key, fn in changes.items():
        args[key] = fn(args[key])
    return args


BAD = [
    ("ids-cpu", dict(topk_ids=lambda t: t.cpu()), "topk_ids", ["CUDA tensor"]),
    ("ids-float", dict(topk_ids=lambda t: t.float()), "topk_ids", ["dtype", "torch.float32"]),
    ("ids-int16", dict(topk_ids=lambda t: t.short()), "topk_ids", ["dtype", "torch.int16"]),
    ("ids-strided", dict(topk_ids=lambda t: t.t()), "topk_ids", ["contiguous"]),
    ("sorted-cpu", dict(sorted_token_ids=lambda t: t.cpu()), "sorted_token_ids", ["device"]),
    ("sorted-int64", dict(sorted_token_ids=lambda t: t.long()), "sorted_token_ids", ["dtype"]),
    ("sorted-2d", dict(sorted_token_ids=lambda t: torch.empty(8, 10, dtype=I32, device="cuda")), "sorted_token_ids",
     ["1-D"]),
    ("sorted-short", dict(sorted_token_ids=lambda t: t[:20]), "sorted_token_ids", ["at least"]),
    ("experts-int64", dict(experts_ids=lambda t: t.long()), "experts_ids", ["dtype"]),
    ("experts-short", dict(experts_ids=lambda t: t[:3]), "experts_ids", ["at least"]),
    ("post-pad-2", dict(num_tokens_post_pad=lambda t: torch.empty(2, dtype=I32, device="cuda")),
     "num_tokens_post_pad", []),
    ("cumsum-short", dict(cumsum_buffer=lambda t: t[:17]), "cumsum_buffer", ["at least"]),
    ("experts-0", dict(num_experts=lambda v: 0), "num_experts", []),
    ("experts-4097", dict(num_experts=lambda v: 4097), "num_experts", ["4096"]),
    ("block-0", dict(block_size=lambda v: 0), "block_size", []),
]


@pytest.mark.parametrize("changes, arg, fragments", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input(changes, arg, fragments):
    a = _args(**changes)
    with raises_op_error(OP_NAME, arg, *fragments):
        OP(a["topk_ids"], a["num_experts"], a["block_size"], a["sorted_token_ids"], a["experts_ids"],
           a["num_tokens_post_pad"], a["cumsum_buffer"], True)


def test_debug_raises(monkeypatch, gen):
    """SGL_KERNEL_DEBUG=1: an id outside [-1, E) raises (the op synchronises); -1 does not."""
    monkeypatch.setenv("SGL_KERNEL_DEBUG", "1")
    E = 16
    for bad in (E, -2, 2**31 - 1):
        ids = torch.tensor([[3, bad], [-1, 0]], dtype=I32, device="cuda")
        with raises_op_error(OP_NAME, "topk_ids", "outside"):
            run(ids, E + 1, 4, True)
    ids = routed_ids(9, 2, E, gen, drop=0.3)
    call_and_check(ids, E + 1, 4, True)
    monkeypatch.setenv("SGL_KERNEL_DEBUG", "0")
    ids = torch.tensor([[3, E]], dtype=I32, device="cuda")
    call_and_check(ids, E + 1, 4, True)
