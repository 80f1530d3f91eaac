# SPDX-License-Identifier: Apache-2.0
"""fast_topk_v2 (op fast_topk), fast_topk_transform_fused and fast_topk_transform_ragged_fused
(API.md 2.1.5) on the GPU, against the torch references of ref_topk.py under the acceptance
rule of API.md 1.6 (the same index set up to ties). The pure-torch ``fast_topk`` and the
wrapper checks that need no GPU are in tests/test_package.py."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import torch

import sgl_kernel
from tests.helpers import raises_op_error
from tests.top_k.ref_topk import TOPK, check_topk, page_table_ref, ragged_ref, topk_ref

pytestmark = pytest.mark.gpu

POISON = -7  # written into outputs before a call: any survivor is an unwritten slot


def _op(name: str):
    return getattr(torch.ops.sgl_kernel, name).default


def _i32(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32, device="cuda")


def _scores(rows: int, cols: int, gen, kind: str = "normal") -> torch.Tensor:
    shape = (rows, cols)
    if kind == "normal":
        return torch.randn(shape, device="cuda", generator=gen)
    if kind == "uniform":  # the threshold bin of pass 1 outgrows shared memory: re-read path
        return torch.rand(shape, device="cuda", generator=gen)
    if kind == "few_values":  # massive ties at the threshold
        return torch.randint(0, 5, shape, device="cuda", generator=gen).float()
    if kind == "equal":
        return torch.full(shape, 0.25, device="cuda")
    if kind == "narrow":  # one exponent, last mantissa bits decide
        return 3.0 + torch.randn(shape, device="cuda", generator=gen) * 1e-5
    if kind == "wide":  # every exponent, both signs
        mag = torch.exp2(torch.randint(-126, 127, shape, device="cuda", generator=gen).float())
        sign = torch.randint(0, 2, shape, device="cuda", generator=gen).float() * 2 - 1
        return mag * sign * (1 + torch.rand(shape, device="cuda", generator=gen))
    if kind == "specials":  # +-0, +-inf, denormals, NaN
        vals = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), 1e-45, -1e-45, float("nan"), 1.0],
                            device="cuda")
        return vals[torch.randint(0, vals.numel(), shape, device="cuda", generator=gen)]
    raise ValueError(kind)


def _random_windows(lengths, L: int, gen) -> torch.Tensor:
    """Random valid starts: 0 <= s <= L - n."""
    n = torch.as_tensor(lengths, dtype=torch.int64, device="cuda")
    room = (L - n + 1).clamp(min=1).float()
    return (torch.rand(n.shape, device="cuda", generator=gen) * room).long().clamp(max=L).to(torch.int32)


def _run_op(score, lengths, row_starts) -> torch.Tensor:
    out = torch.full((score.shape[0], TOPK), POISON, dtype=torch.int32, device="cuda")
    assert _op("fast_topk")(score, out, lengths, row_starts) is None
    return out


def _check(score, lengths, row_starts, out) -> None:
    msg = check_topk(score, lengths, row_starts, out)
    assert msg is None, msg


@pytest.fixture(params=["1", "2", "8"], ids=lambda v: f"cluster{v}")
def forced_cluster(request, monkeypatch):
    """Blocks per row forced through SGL_KERNEL_TOPK_CLUSTER (read at every launch): 1, or a
    cluster of 2 / 8 blocks sharing each row (sm90+; elsewhere the kernel runs 1 regardless).
    Without it only few long rows get a cluster."""
    monkeypatch.setenv("SGL_KERNEL_TOPK_CLUSTER", request.param)
    return int(request.param)


# ---------------------------------------------------------------------------------------
# fast_topk_v2: selection


MIXED_L = 70001  # odd: windows start at every alignment


@pytest.mark.usefixtures("forced_cluster")
@pytest.mark.parametrize("with_starts", [False, True], ids=["no-row-starts", "row-starts"])
@pytest.mark.parametrize("kind", ["normal", "uniform", "few_values", "narrow", "wide", "specials"])
def test_mixed_lengths(with_starts, kind, gen):
    L = MIXED_L
    lengths_list = [0, 1, 2047, 2048, 2049, 2050, 4097, 65536, L, 12345, 3, 40000]
    lengths = _i32(lengths_list)
    if not with_starts:
        # without row_starts every window starts at 0: n <= L
        row_starts = None
    else:
        row_starts = _random_windows(lengths_list, L, gen)
    score = _scores(len(lengths_list), L, gen, kind)
    out = sgl_kernel.fast_topk_v2(score, lengths, TOPK, row_starts)
    _check(score, lengths, row_starts, out)
    assert torch.equal(_run_op(score, lengths, row_starts), out)


SHAPES = [(1, 2049), (1, 4096), (3, 8191), (16, 32768), (4, 131072), (1, 262147), (128, 4096)]


@pytest.mark.parametrize("B, L", SHAPES, ids=[f"B{b}-L{l}" for b, l in SHAPES])
@pytest.mark.parametrize("kind", ["normal", "uniform"])
def test_full_rows(B, L, kind, gen):
    """Every window the whole row (decode with lengths = L)."""
    score = _scores(B, L, gen, kind)
    lengths = torch.full((B,), L, dtype=torch.int32, device="cuda")
    out = _run_op(score, lengths, None)
    _check(score, lengths, None, out)


@pytest.mark.parametrize("B, L", [(64, 32768), (256, 9000)])
def test_random_windows(B, L, gen):
    lengths = torch.randint(0, L + 1, (B,), device="cuda", generator=gen, dtype=torch.int32)
    row_starts = _random_windows(lengths, L, gen)
    score = _scores(B, L, gen)
    out = _run_op(score, lengths, row_starts)
    _check(score, lengths, row_starts, out)


@pytest.mark.parametrize("kind", ["normal", "uniform", "few_values", "specials"])
@pytest.mark.parametrize("B, L", [(1, 131072), (5, 33333), (16, 70001)])
def test_cluster_sizes_agree(kind, B, L, gen, monkeypatch):
    """The selection with ties broken by position is unique and written in ascending position
    order, so every number of blocks per row gives the same output, bit for bit; random
    windows put chunk boundaries everywhere, and the short windows leave some blocks of a
    cluster without a single group."""
    score = _scores(B, L, gen, kind)
    lengths = torch.randint(0, L + 1, (B,), device="cuda", generator=gen, dtype=torch.int32)
    lengths[0] = L
    row_starts = _random_windows(lengths, L, gen)
    outs = {}
    for cs in ("1", "2", "4", "8"):
        monkeypatch.setenv("SGL_KERNEL_TOPK_CLUSTER", cs)
        outs[cs] = _run_op(score, lengths, row_starts)
    _check(score, lengths, row_starts, outs["1"])
    for cs in ("2", "4", "8"):
        assert torch.equal(outs[cs], outs["1"]), f"{cs} blocks per row differ from 1"
    monkeypatch.delenv("SGL_KERNEL_TOPK_CLUSTER")
    assert torch.equal(_run_op(score, lengths, row_starts), outs["1"]), "the automatic choice differs"


def test_large_batch(gen):
    B, L = 1024, 4096
    score = _scores(B, L, gen)
    lengths = torch.randint(0, L + 1, (B,), device="cuda", generator=gen, dtype=torch.int32)
    out = sgl_kernel.fast_topk_v2(score, lengths, TOPK)
    _check(score, lengths, None, out)


@pytest.mark.usefixtures("forced_cluster")
def test_short_rows_exact():
    """n <= 2048: 0..n-1 then -1, without reading score."""
    score = torch.full((5, 3000), float("nan"), device="cuda")
    lengths = _i32([0, 1, 17, 2047, 2048])
    out = _run_op(score, lengths, _i32([5, 0, 100, 900, 952]))
    slot = torch.arange(TOPK, device="cuda")
    expected = torch.where(slot[None, :] < lengths[:, None], slot[None, :], -1).to(torch.int32)
    assert torch.equal(out, expected)


@pytest.mark.usefixtures("forced_cluster")
@pytest.mark.parametrize("n", [2049, 5000, 65536])
def test_all_equal_scores(n):
    """Ties resolve to the lowest positions (documented), deterministically."""
    score = torch.full((2, n + 10), -1.5, device="cuda")
    lengths = _i32([n, n])
    out = _run_op(score, lengths, _i32([0, 10]))
    expected = torch.arange(TOPK, device="cuda", dtype=torch.int32).expand(2, TOPK)
    assert torch.equal(out, expected)


@pytest.mark.usefixtures("forced_cluster")
def test_ties_at_threshold(gen):
    """Ties straddling the 2048th place: the chosen ties are the lowest positions."""
    L = 50000
    score = torch.randn(1, L, device="cuda", generator=gen) - 10  # all below the tie value
    tie_pos = torch.randperm(L, device="cuda", generator=gen)[:3000]
    top_pos = tie_pos[:1000]
    score[0, tie_pos] = 5.0
    score[0, top_pos] = 7.0 + torch.rand(1000, device="cuda", generator=gen)
    lengths = _i32([L])
    out = _run_op(score, lengths, None)
    _check(score, lengths, None, out)
    assert torch.equal(out[0].long().sort().values, topk_ref(score, lengths)[0].sort().values)


@pytest.mark.usefixtures("forced_cluster")
def test_nan_ranks_lowest(gen):
    L = 40000
    score = torch.randn(3, L, device="cuda", generator=gen)
    score[0, torch.rand(L, device="cuda", generator=gen) < 0.5] = float("nan")  # enough numbers left
    score[1, 100:] = float("nan")  # 100 numbers: all taken, then NaNs
    score[2] = float("nan")
    score[2, 7] = float("-inf")
    lengths = _i32([L, L, L])
    out = _run_op(score, lengths, None)
    _check(score, lengths, None, out)
    assert not torch.isnan(score[0][out[0].long()]).any(), "a NaN was selected over a number"
    assert set(range(100)) <= set(out[1].tolist())
    assert 7 in out[2].tolist(), "-inf must rank above NaN"


@pytest.mark.usefixtures("forced_cluster")
def test_negative_zero_ties_positive_zero():
    L = 5000
    score = torch.empty((1, L), device="cuda")
    score[0, ::2] = -0.0
    score[0, 1::2] = 0.0
    score[0, :2000:2] = -1.0  # 4000 zeros left; the lowest 2048 mix both signs from position 2000 on
    lengths = _i32([L])
    out = _run_op(score, lengths, None)
    _check(score, lengths, None, out)
    # the zeros tie: the lowest 2048 positions among them, whatever their sign
    zeros = (score[0] == 0).nonzero().flatten()[:TOPK]
    assert torch.equal(out[0].long().sort().values, zeros)


def test_deterministic(gen):
    B, L = 8, 65536
    score = _scores(B, L, gen, "few_values")
    lengths = torch.full((B,), L, dtype=torch.int32, device="cuda")
    first = _run_op(score, lengths, None)
    for _ in range(3):
        assert torch.equal(_run_op(score, lengths, None), first)


def test_output_ascending(gen):
    """Not part of the API (order unspecified), but what the kernel does: ascending positions."""
    score = _scores(4, 20000, gen)
    lengths = _i32([20000, 10000, 2049, 30])
    out = _run_op(score, lengths, None)
    long_rows = out[:3].long()
    assert bool((long_rows[:, 1:] > long_rows[:, :-1]).all())


@pytest.mark.usefixtures("forced_cluster")
@pytest.mark.parametrize("offset", [1, 2, 3])
def test_row_stride_and_misaligned_base(offset, gen):
    """score is a view: row stride != L, base not 16-byte aligned."""
    B, L = 6, 10000
    big = _scores(B, L + 7, gen)
    score = big[:, offset : offset + L]
    assert score.stride(1) == 1 and score.stride(0) == L + 7 and score.data_ptr() % 16 != 0
    lengths = _i32([L, L - 1, L - 2, 5000, 2049, 2048])
    row_starts = _i32([0, 1, 2, 3, 4, 5])
    out = _run_op(score, lengths, row_starts)
    _check(score, lengths, row_starts, out)


@pytest.mark.usefixtures("forced_cluster")
def test_strided_row_starts(gen):
    B, L = 4, 9000
    score = _scores(B, L, gen)
    lengths = _i32([5000, 2049, 8999, 100])
    starts_buf = _i32([1, -5, 3, -5, 0, -5, 7, -5])
    row_starts = starts_buf[::2]
    out = _run_op(score, lengths, row_starts)
    _check(score, lengths, row_starts, out)


@pytest.mark.usefixtures("forced_cluster")
def test_window_outside_score_is_clamped(gen):
    """Out of contract (s + n > L, s < 0, n < 0): no read outside score, the clamped window."""
    L = 6000
    score = _scores(5, L, gen)
    lengths = _i32([6000, 9000, 3000, -4, 2500])
    row_starts = _i32([100, 0, -50, 0, 5900])
    guard = torch.full((8, TOPK), POISON, dtype=torch.int32, device="cuda")
    out = guard[1:6]
    _op("fast_topk")(score, out, lengths, row_starts)
    torch.cuda.synchronize()
    _check(score, lengths, row_starts, out)
    assert bool((guard[0] == POISON).all()) and bool((guard[6:] == POISON).all()), "wrote outside indices"


def test_empty():
    score = torch.empty(0, 5000, device="cuda")
    lengths = torch.empty(0, dtype=torch.int32, device="cuda")
    out = sgl_kernel.fast_topk_v2(score, lengths, TOPK)
    assert out.shape == (0, TOPK) and out.dtype == torch.int32
    score = torch.empty(3, 0, device="cuda")
    out = _run_op(score, _i32([0, 0, 0]), None)
    assert bool((out == -1).all())


# ---------------------------------------------------------------------------------------
# Fused transforms


def _transform_case(gen, decode: bool):
    L = 40000
    if decode:  # one row per request, no row_starts
        lengths_list = [0, 1, 2048, 2049, 30000, L, 777]
        B = R = len(lengths_list)
        cu = torch.arange(R + 1, dtype=torch.int32, device="cuda")
        row_starts = None
    else:  # prefill: requests of several rows, an empty request, row_starts
        lengths_list = [5000, 2048, 2049, 30000, 100, 0, 2500, 39000]
        B = len(lengths_list)
        cu = _i32([0, 3, 3, 5, 8])
        R = cu.numel() - 1
        row_starts = _random_windows(lengths_list, L, gen)
    lengths = _i32(lengths_list)
    score = _scores(B, L, gen)
    # distinct page-table values per request, so a gathered value names its position
    table = torch.stack([torch.randperm(10 * L, device="cuda", generator=gen)[:L] for _ in range(R)])
    return score, lengths, row_starts, table.to(torch.int32), cu, decode


@pytest.mark.usefixtures("forced_cluster")
@pytest.mark.parametrize("decode", [True, False], ids=["decode", "prefill"])
def test_transform_fused(decode, gen):
    score, lengths, row_starts, table, cu, row_is_request = _transform_case(gen, decode)
    dst = sgl_kernel.fast_topk_transform_fused(score, lengths, table, cu, TOPK, row_starts)
    assert dst.shape == (score.shape[0], TOPK) and dst.dtype == torch.int32
    # against the torch reference: the page-table gather of the reference selection, compared
    # as sets per row (ties may resolve differently; random normal scores have none)
    expected = page_table_ref(topk_ref(score, lengths, row_starts), table, cu, row_is_request)
    assert torch.equal(dst.sort(dim=1).values, expected.sort(dim=1).values)
    # and exactly the gather of this kernel's own selection (deterministic)
    idx = sgl_kernel.fast_topk_v2(score, lengths, TOPK, row_starts)
    _check(score, lengths, row_starts, idx)
    assert torch.equal(dst, page_table_ref(idx, table, cu, row_is_request))
    # through the op with a poisoned output
    out = torch.full_like(dst, POISON)
    assert _op("fast_topk_transform_fused")(score, lengths, out, table, cu, row_starts) is None
    assert torch.equal(out, dst)


def test_transform_fused_ties(gen):
    """Many ties: the gathered set equals the gather of this kernel's own index set."""
    score = _scores(3, 30000, gen, "few_values")
    lengths = _i32([30000, 20000, 2049])
    cu = _i32([0, 1, 2, 3])
    table = torch.randint(0, 10**6, (3, 30000), device="cuda", generator=gen, dtype=torch.int32)
    dst = sgl_kernel.fast_topk_transform_fused(score, lengths, table, cu, TOPK)
    idx = sgl_kernel.fast_topk_v2(score, lengths, TOPK)
    _check(score, lengths, None, idx)
    assert torch.equal(dst, page_table_ref(idx, table, cu, True))


def test_transform_page_table_view(gen):
    """src_page_table with a row stride (a view of a wider table); P < n gives -1 past P."""
    score = _scores(2, 9000, gen)
    lengths = _i32([9000, 3000])
    wide = torch.randint(0, 10**6, (2, 9000), device="cuda", generator=gen, dtype=torch.int32)
    table = wide[:, :5000]  # P = 5000 < n = 9000: positions >= P have no page
    assert table.stride(0) == 9000
    cu = _i32([0, 1, 2])
    dst = sgl_kernel.fast_topk_transform_fused(score, lengths, table, cu, TOPK)
    idx = sgl_kernel.fast_topk_v2(score, lengths, TOPK)
    assert torch.equal(dst, page_table_ref(idx, table, cu, True))
    assert bool((dst[0] == -1).any()), "expected positions past P"


def test_transform_row_without_request(gen):
    """Out of contract (cu_seqlens_q[R] < B): uncovered rows get -1, nothing is read."""
    score = _scores(4, 5000, gen)
    lengths = _i32([5000, 100, 5000, 3000])
    cu = _i32([0, 2, 3])  # row 3 lies in no request
    table = torch.randint(0, 10**6, (2, 5000), device="cuda", generator=gen, dtype=torch.int32)
    row_starts = _i32([0, 0, 0, 0])
    dst = sgl_kernel.fast_topk_transform_fused(score, lengths, table, cu, TOPK, row_starts)
    idx = sgl_kernel.fast_topk_v2(score, lengths, TOPK, row_starts)
    assert torch.equal(dst, page_table_ref(idx, table, cu, False))
    assert bool((dst[3] == -1).all())


@pytest.mark.usefixtures("forced_cluster")
@pytest.mark.parametrize("with_starts", [False, True], ids=["no-row-starts", "row-starts"])
def test_transform_ragged(with_starts, gen):
    L = 50000
    lengths_list = [0, 1, 2048, 2049, 30000, L, 4000]
    lengths = _i32(lengths_list)
    row_starts = _random_windows(lengths_list, L, gen) if with_starts else None
    score = _scores(len(lengths_list), L, gen)
    offset = torch.randint(0, 10**7, (len(lengths_list),), device="cuda", generator=gen, dtype=torch.int32)
    out = sgl_kernel.fast_topk_transform_ragged_fused(score, lengths, offset, TOPK, row_starts)
    expected = ragged_ref(topk_ref(score, lengths, row_starts), offset)
    assert torch.equal(out.sort(dim=1).values, expected.sort(dim=1).values)
    idx = sgl_kernel.fast_topk_v2(score, lengths, TOPK, row_starts)
    assert torch.equal(out, ragged_ref(idx, offset))
    strided = torch.stack([offset, offset], dim=1)[:, 0]  # stride 2
    res = torch.full_like(out, POISON)
    _op("fast_topk_transform_ragged_fused")(score, lengths, res, strided, row_starts)
    assert torch.equal(res, out)


# ---------------------------------------------------------------------------------------
# opcheck and CUDA graphs


def _opcheck_inputs(gen):
    L = 9000
    score = _scores(5, L, gen)
    lengths = _i32([9000, 2049, 100, 5000, 0])
    row_starts = _i32([0, 10, 3, 4000, 0])
    return score, lengths, row_starts


def test_opcheck_fast_topk(gen):
    score, lengths, row_starts = _opcheck_inputs(gen)
    out = torch.empty(5, TOPK, dtype=torch.int32, device="cuda")
    torch.library.opcheck(_op("fast_topk"), (score, out, lengths, row_starts))
    torch.library.opcheck(_op("fast_topk"), (score, out, lengths, None))


def test_opcheck_transform_fused(gen):
    score, lengths, row_starts = _opcheck_inputs(gen)
    table = torch.randint(0, 10**6, (2, 9000), device="cuda", generator=gen, dtype=torch.int32)
    cu = _i32([0, 2, 5])
    dst = torch.empty(5, TOPK, dtype=torch.int32, device="cuda")
    torch.library.opcheck(_op("fast_topk_transform_fused"), (score, lengths, dst, table, cu, row_starts))


def test_opcheck_transform_ragged(gen):
    score, lengths, row_starts = _opcheck_inputs(gen)
    offset = _i32([0, 100, 200, 300, 400])
    out = torch.empty(5, TOPK, dtype=torch.int32, device="cuda")
    torch.library.opcheck(_op("fast_topk_transform_ragged_fused"), (score, lengths, out, offset, row_starts))


def test_torch_compile(gen):
    score, lengths, row_starts = _opcheck_inputs(gen)
    fn = torch.compile(lambda s, n, r: sgl_kernel.fast_topk_v2(s, n, TOPK, r), fullgraph=True)
    out = fn(score, lengths, row_starts)
    assert torch.equal(out, sgl_kernel.fast_topk_v2(score, lengths, TOPK, row_starts))


@pytest.mark.usefixtures("forced_cluster")
@pytest.mark.parametrize("op", ["fast_topk_v2", "fast_topk_transform_fused", "fast_topk_transform_ragged_fused"])
def test_cuda_graph(op, gen):
    """Capture with static inputs, then replay on new scores, lengths and starts."""
    B, L = 16, 40000
    score = _scores(B, L, gen)
    lengths = torch.full((B,), L // 2, dtype=torch.int32, device="cuda")
    row_starts = torch.zeros(B, dtype=torch.int32, device="cuda")
    table = torch.stack([torch.randperm(L, device="cuda", generator=gen) for _ in range(B)]).to(torch.int32)
    cu = torch.arange(B + 1, dtype=torch.int32, device="cuda")
    offset = torch.randint(0, 10**6, (B,), device="cuda", generator=gen, dtype=torch.int32)

    def step():
        if op == "fast_topk_v2":
            return sgl_kernel.fast_topk_v2(score, lengths, TOPK, row_starts)
        if op == "fast_topk_transform_fused":
            return sgl_kernel.fast_topk_transform_fused(score, lengths, table, cu, TOPK, row_starts)
        return sgl_kernel.fast_topk_transform_ragged_fused(score, lengths, offset, TOPK, row_starts)

    def expected():
        idx = topk_ref(score, lengths, row_starts)
        if op == "fast_topk_transform_fused":
            return page_table_ref(idx, table, cu, False)
        if op == "fast_topk_transform_ragged_fused":
            return ragged_ref(idx, offset)
        return idx.to(torch.int32)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for _ in range(3):
        score.copy_(_scores(B, L, gen))
        lengths.copy_(torch.randint(0, L // 2, (B,), device="cuda", generator=gen, dtype=torch.int32))
        row_starts.copy_(torch.randint(0, L // 2, (B,), device="cuda", generator=gen, dtype=torch.int32))
        out.fill_(POISON)
        graph.replay()
        torch.cuda.synchronize()
        # normal scores: no ties, so the sets are exact
        assert torch.equal(out.sort(dim=1).values, expected().sort(dim=1).values)


# ---------------------------------------------------------------------------------------
# SGL_KERNEL_DEBUG=1: out-of-contract index values raise (in a fresh process: the switch is
# read once)

_DEBUG_SCRIPT = """
import torch, sgl_kernel
score = torch.randn(2, 5000, device="cuda")
lengths = torch.tensor([5000, 100], dtype=torch.int32, device="cuda")
case = {case!r}
try:
    if case == "window":
        sgl_kernel.fast_topk_v2(score, lengths, 2048, torch.tensor([1, 0], dtype=torch.int32, device="cuda"))
    elif case == "page":
        table = torch.zeros(2, 3000, dtype=torch.int32, device="cuda")
        cu = torch.tensor([0, 1, 2], dtype=torch.int32, device="cuda")
        sgl_kernel.fast_topk_transform_fused(score, lengths, table, cu, 2048)
    elif case == "request":
        table = torch.zeros(1, 5000, dtype=torch.int32, device="cuda")
        cu = torch.tensor([0, 1], dtype=torch.int32, device="cuda")
        starts = torch.zeros(2, dtype=torch.int32, device="cuda")
        sgl_kernel.fast_topk_transform_fused(score, lengths, table, cu, 2048, starts)
    else:
        sgl_kernel.fast_topk_v2(score, lengths, 2048)
except RuntimeError as exc:
    print("RAISED", str(exc).splitlines()[0])
else:
    print("OK")
"""


@pytest.mark.parametrize(
    "case, expected",
    [
        ("window", "RAISED sgl_kernel.fast_topk: lengths / row_starts"),
        ("page", "RAISED sgl_kernel.fast_topk_transform_fused: src_page_table"),
        ("request", "RAISED sgl_kernel.fast_topk_transform_fused: cu_seqlens_q"),
        ("valid", "OK"),
    ],
)
def test_debug_mode(case, expected, tmp_path):
    # From an empty directory: the installed package is imported, as in the CLI tests.
    env = dict(os.environ, SGL_KERNEL_DEBUG="1")
    proc = subprocess.run([sys.executable, "-c", _DEBUG_SCRIPT.format(case=case)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.strip().splitlines()[-1].startswith(expected), proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops: the C++ checks protect direct callers too)


def _valid(B: int = 3, L: int = 5000):
    score = torch.randn(B, L, device="cuda")
    lengths = torch.full((B,), L, dtype=torch.int32, device="cuda")
    out = torch.empty(B, TOPK, dtype=torch.int32, device="cuda")
    return score, lengths, out


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64], ids=str)
def test_bad_score_dtype(dtype):
    score, lengths, out = _valid()
    with raises_op_error("fast_topk", "score", "dtype", "torch.float32", str(dtype)):
        _op("fast_topk")(score.to(dtype), out, lengths, None)
    with raises_op_error("fast_topk", "score", "dtype"):
        sgl_kernel.fast_topk_v2(score.to(dtype), lengths, TOPK)
    with raises_op_error("fast_topk_transform_ragged_fused", "score", "dtype"):
        sgl_kernel.fast_topk_transform_ragged_fused(score.to(dtype), lengths, lengths, TOPK)


def test_bad_score_rank():
    score, lengths, out = _valid()
    with raises_op_error("fast_topk", "score", "2-D"):
        _op("fast_topk")(score[None], out, lengths, None)
    with pytest.raises(AssertionError, match="fast_topk_v2"):
        sgl_kernel.fast_topk_v2(score[None], lengths, TOPK)
    with pytest.raises(AssertionError, match="fast_topk_v2"):
        sgl_kernel.fast_topk_v2(score[0], lengths, TOPK)
    with raises_op_error("fast_topk_transform_fused", "score", "2-D"):
        sgl_kernel.fast_topk_transform_fused(score[0], lengths, torch.zeros(3, 10, dtype=torch.int32, device="cuda"),
                                             torch.arange(4, dtype=torch.int32, device="cuda"), TOPK)


def test_bad_score_stride():
    _, lengths, out = _valid()
    score = torch.randn(5000, 3, device="cuda").t()
    assert score.stride(1) != 1
    with raises_op_error("fast_topk", "score", "stride(-1) == 1"):
        _op("fast_topk")(score, out, lengths, None)
    with raises_op_error("fast_topk", "score", "stride(-1) == 1"):
        sgl_kernel.fast_topk_v2(score, lengths, TOPK)


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32], ids=str)
def test_bad_lengths(dtype):
    score, lengths, out = _valid()
    with raises_op_error("fast_topk", "lengths", "dtype", "torch.int32"):
        _op("fast_topk")(score, out, lengths.to(dtype), None)
    with raises_op_error("fast_topk", "lengths", "score.shape[0]"):
        _op("fast_topk")(score, out, lengths[:2], None)
    with raises_op_error("fast_topk", "lengths", "contiguous"):
        _op("fast_topk")(score, out, torch.stack([lengths, lengths], 1)[:, 0], None)
    with raises_op_error("fast_topk", "lengths", "device"):  # on the host
        _op("fast_topk")(score, out, lengths.cpu(), None)


def test_bad_row_starts():
    score, lengths, out = _valid()
    with raises_op_error("fast_topk", "row_starts", "dtype", "torch.int32"):
        _op("fast_topk")(score, out, lengths, lengths.long())
    with raises_op_error("fast_topk", "row_starts", "score.shape[0]"):
        _op("fast_topk")(score, out, lengths, lengths[:1])
    with raises_op_error("fast_topk", "row_starts", "1-D"):
        _op("fast_topk")(score, out, lengths, lengths[None])


@pytest.mark.parametrize("shape", [(3, 1024), (3, 2049), (2, TOPK), (3, TOPK, 1), (3 * TOPK,)])
def test_bad_indices_shape(shape):
    score, lengths, _ = _valid()
    out = torch.empty(shape, dtype=torch.int32, device="cuda")
    with raises_op_error("fast_topk", "indices"):
        _op("fast_topk")(score, out, lengths, None)


def test_bad_indices_dtype_and_layout():
    score, lengths, _ = _valid()
    with raises_op_error("fast_topk", "indices", "dtype", "torch.int32"):
        _op("fast_topk")(score, torch.empty(3, TOPK, dtype=torch.int64, device="cuda"), lengths, None)
    with raises_op_error("fast_topk", "indices", "contiguous"):
        _op("fast_topk")(score, torch.empty(TOPK, 3, dtype=torch.int32, device="cuda").t(), lengths, None)
    with raises_op_error("fast_topk", "indices", "device"):
        _op("fast_topk")(score, torch.empty(3, TOPK, dtype=torch.int32), lengths, None)


@pytest.mark.parametrize("topk", [1024, 2047, 4096, 1])
def test_wrapper_topk_must_be_2048(topk):
    score, lengths, _ = _valid()
    table = torch.zeros(3, 5000, dtype=torch.int32, device="cuda")
    cu = torch.arange(4, dtype=torch.int32, device="cuda")
    with pytest.raises(AssertionError, match="fast_topk_v2.*topk"):
        sgl_kernel.fast_topk_v2(score, lengths, topk)
    with pytest.raises(AssertionError, match="fast_topk_transform_fused.*topk"):
        sgl_kernel.fast_topk_transform_fused(score, lengths, table, cu, topk)
    with pytest.raises(AssertionError, match="fast_topk_transform_ragged_fused.*topk"):
        sgl_kernel.fast_topk_transform_ragged_fused(score, lengths, lengths, topk)


def test_bad_transform_inputs():
    op = "fast_topk_transform_fused"
    score, lengths, dst = _valid()
    table = torch.zeros(3, 5000, dtype=torch.int32, device="cuda")
    cu = torch.arange(4, dtype=torch.int32, device="cuda")
    fn = _op(op)
    with raises_op_error(op, "src_page_table", "dtype"):
        fn(score, lengths, dst, table.long(), cu, None)
    with raises_op_error(op, "src_page_table", "cu_seqlens_q.shape[0] - 1"):
        fn(score, lengths, dst, table[:2], cu, None)
    with raises_op_error(op, "src_page_table", "stride(-1) == 1"):
        fn(score, lengths, dst, torch.zeros(5000, 3, dtype=torch.int32, device="cuda").t(), cu, None)
    with raises_op_error(op, "cu_seqlens_q", "dtype"):
        fn(score, lengths, dst, table, cu.long(), None)
    with raises_op_error(op, "cu_seqlens_q", "at most"):
        fn(score, lengths, dst, torch.zeros(4, 5000, dtype=torch.int32, device="cuda"),
           torch.arange(5, dtype=torch.int32, device="cuda"), None)
    with raises_op_error(op, "cu_seqlens_q"):
        fn(score, lengths, dst, table, torch.empty(0, dtype=torch.int32, device="cuda"), None)
    with raises_op_error(op, "dst_page_table", "2048"):
        fn(score, lengths, torch.empty(3, 1024, dtype=torch.int32, device="cuda"), table, cu, None)


def test_bad_ragged_inputs():
    op = "fast_topk_transform_ragged_fused"
    score, lengths, out = _valid()
    fn = _op(op)
    with raises_op_error(op, "topk_indices_offset", "dtype"):
        fn(score, lengths, out, lengths.long(), None)
    with raises_op_error(op, "topk_indices_offset", "score.shape[0]"):
        fn(score, lengths, out, lengths[:2], None)
    with raises_op_error(op, "topk_indices_ragged", "dtype"):
        fn(score, lengths, out.float(), lengths, None)
