# SPDX-License-Identifier: Apache-2.0
"""topk_softmax / topk_sigmoid (API.md 2.4) on the GPU, against the fp64 reference of
tests/moe/ref_topk_gating.py.

``check_topk`` takes fp32 rounding into account: where the op's expert at an output slot differs
from the reference's, the two ranked values must be a near tie (never an exact one: exact ties
go to the lower index), and the weights are compared with the reference weights of the experts
the op chose. Random bf16/fp16 rows hold exact duplicates, so the lower-index rule is exercised
by the plain value tests too; dedicated tests cover constant rows, signed zeros, NaN and inf.

Both kernel paths run: rows of up to 1024 experts in registers (a group of 1-32 lanes a row),
larger rows a block each (radix select; keys cached in shared memory up to ~56k experts on an
H100, recomputed from the gate beyond). Outputs are poisoned (NaN weights, -1 ids) before each
call so that an unwritten slot fails.
"""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.helpers import raises_op_error
from tests.moe.ref_topk_gating import check_topk

pytestmark = pytest.mark.gpu

OPS = {
    "topk_softmax": torch.ops.sgl_kernel.topk_softmax.default,
    "topk_sigmoid": torch.ops.sgl_kernel.topk_sigmoid.default,
}
BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
DTYPES = (FP32, FP16, BF16)
ID_POISON = -1
W_GUARD = 7.25
ID_GUARD = 12345


def make_gating(t: int, e: int, dtype, gen, scale: float = 2.0) -> torch.Tensor:
    return (torch.randn(t, e, device="cuda", generator=gen) * scale).to(dtype)


def make_bias(e: int, gen, scale: float = 0.3) -> torch.Tensor:
    return torch.randn(e, device="cuda", generator=gen) * scale


def outputs(t: int, k: int, ids_dtype=torch.int32):
    w = torch.full((t, k), float("nan"), dtype=torch.float32, device="cuda")
    ids = torch.full((t, k), ID_POISON, dtype=ids_dtype, device="cuda")
    return w, ids


def call(op: str, w, ids, gating, renormalize=False, softcap=0.0, bias=None) -> None:
    """Through the public wrapper (sgl_kernel.<op>)."""
    if op == "topk_softmax":
        sgl_kernel.topk_softmax(w, ids, gating, renormalize=renormalize, moe_softcapping=softcap,
                                correction_bias=bias)
    else:
        assert softcap == 0.0
        sgl_kernel.topk_sigmoid(w, ids, gating, renormalize=renormalize, correction_bias=bias)


def run_and_check(op, gating, k, renormalize=False, softcap=0.0, bias=None, ids_dtype=torch.int32):
    w, ids = outputs(gating.shape[0], k, ids_dtype)
    call(op, w, ids, gating, renormalize, softcap, bias)
    torch.cuda.synchronize()
    msg = check_topk(w, ids, gating, op, renormalize, softcap, bias)
    assert msg is None, msg
    return w, ids


# ---------------------------------------------------------------------------------------
# Values

SHAPES = [  # (T, E, k)
    (1, 1, 1), (3, 2, 2), (11, 3, 2), (1, 8, 2), (7, 8, 8), (129, 8, 2),  # one lane a row
    (19, 10, 3), (5, 16, 4), (6, 17, 17), (33, 60, 4), (64, 64, 6),          # 2-8 lanes
    (17, 100, 7), (5, 128, 8), (300, 256, 8), (3, 257, 9), (17, 384, 10),    # 16-32 lanes
    (64, 512, 8), (9, 1000, 128), (4, 1024, 32),
    (33, 64, 12), (40, 128, 16), (9, 512, 16), (5, 1024, 16), (7, 1000, 9), (3, 16, 16),  # 16-entry lists
    (2, 1025, 5), (3, 4096, 64), (1, 5000, 1), (2, 65536, 128),               # a block a row
]
VARIANTS = ["plain", "renorm", "bias_renorm", "bias"]


@pytest.mark.parametrize("variant", VARIANTS)
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "T{}-E{}-k{}".format(*s))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("op", list(OPS))
def test_values(op, dtype, shape, variant, gen):
    t, e, k = shape
    gating = make_gating(t, e, dtype, gen)
    bias = make_bias(e, gen) if "bias" in variant else None
    run_and_check(op, gating, k, renormalize="renorm" in variant, bias=bias)


@pytest.mark.parametrize("softcap", [1.0, 30.0])
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("e, k", [(8, 2), (60, 4), (256, 8), (2048, 16)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_softcap(dtype, e, k, with_bias, softcap, gen):
    """tanh soft cap before the bias and the softmax; logits on the cap's scale (fp32 tanh
    saturates for the largest: those become ties, which the checker accepts as near ties)."""
    gating = make_gating(37, e, dtype, gen, scale=softcap)
    bias = make_bias(e, gen) if with_bias else None
    run_and_check("topk_softmax", gating, k, renormalize=True, softcap=softcap, bias=bias)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("t, e, k, dtype", [
    (16384, 256, 8, BF16),   # prefill of a 256-expert router
    (20000, 8, 2, BF16),     # Mixtral, one lane a row: 157 blocks of 128 rows
    (4097, 128, 8, FP32),
    (8192, 60, 4, FP16),     # Qwen1.5-MoE: 8-byte vectors (120-byte rows)
    (3000, 384, 8, BF16),
    (600, 2048, 8, BF16),    # many rows on the block path
])
def test_many_tokens(op, t, e, k, dtype, gen):
    gating = make_gating(t, e, dtype, gen)
    bias = make_bias(e, gen) if op == "topk_sigmoid" else None
    run_and_check(op, gating, k, renormalize=True, bias=bias)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("e, k", [(8, 2), (64, 8), (256, 8), (3000, 20)])
def test_ids_int64(op, e, k, gen):
    gating = make_gating(45, e, BF16, gen)
    _, ids = run_and_check(op, gating, k, renormalize=True, ids_dtype=torch.int64)
    assert ids.dtype == torch.int64


def test_softmax_underflow_ranked_by_logit(gen):
    """Logits 100 apart make most p underflow to 0 in fp32; the experts still come in logit
    order (the exact order of p), not as lower-index ties of zeros."""
    t, e, k = 64, 256, 16
    x = torch.randn(t, e, device="cuda", generator=gen) * 100
    w, ids = run_and_check("topk_softmax", x, k)
    expected = x.double().argsort(dim=-1, descending=True)[:, :k]
    assert torch.equal(ids.long(), expected)
    assert bool((w[:, -1] == 0).any()), "the test meant some weights to underflow"


@pytest.mark.parametrize("with_bias", [False, True])
def test_sigmoid_saturated_ranked_by_gate(with_bias, gen):
    """Gates of 20 and more: sigmoid is 1.0 in fp32 for all of them; without a bias the experts
    still come in gate order (the exact order of p). With a bias the key is p + bias in fp32:
    then the bias decides."""
    t, e, k = 32, 128, 8
    x = 20 + torch.rand(t, e, device="cuda", generator=gen) * 20
    bias = make_bias(e, gen) if with_bias else None
    w, ids = run_and_check("topk_sigmoid", x, k, bias=bias)
    if not with_bias:
        assert torch.equal(ids.long(), x.double().argsort(dim=-1, descending=True)[:, :k])
    else:
        assert torch.equal(ids.long(), bias.double().argsort(descending=True)[:k].expand(t, k))
    assert bool((w == 1.0).all())


# ---------------------------------------------------------------------------------------
# Ties, NaN, inf


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("e", [1, 5, 8, 64, 256, 1000, 3000])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_constant_rows(op, dtype, e, gen):
    """Every key equal: experts 0 .. k-1 in order; softmax weights 1 / E."""
    t = 9
    k = min(e, 7)
    gating = torch.full((t, e), 0.75, dtype=dtype, device="cuda")
    w, ids = run_and_check(op, gating, k)
    assert torch.equal(ids.long(), torch.arange(k, device="cuda").expand(t, k))
    expected = 1.0 / e if op == "topk_softmax" else float(torch.sigmoid(torch.tensor(0.75)))
    torch.testing.assert_close(w, torch.full_like(w, expected), rtol=1e-6, atol=0)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("e", [16, 60, 256, 777, 5000])
@pytest.mark.parametrize("with_bias", [False, True])
def test_many_ties(op, e, with_bias, gen):
    """Small integers: most keys tie; each tie must go to the lower index (the checker allows a
    difference from the reference only between unequal keys). A bias that repeats four values
    keeps ties under the bias too."""
    t, k = 40, min(e, 12)
    gating = torch.randint(-3, 4, (t, e), device="cuda", generator=gen).to(BF16)
    bias = None
    if with_bias:
        bias = torch.tensor([0.0, 0.5, -0.25, 0.5], device="cuda").repeat(e // 4 + 1)[:e].contiguous()
    run_and_check(op, gating, k, renormalize=True, bias=bias)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("e", [8, 256, 2000])
def test_signed_zero_ties(op, e, gen):
    """-0.0 and +0.0 are equal keys: the lower index comes first, whichever zero it holds."""
    t = 4
    gating = -1 - torch.rand(t, e, device="cuda", generator=gen)
    gating[:, 2] = -0.0
    gating[:, 5] = 0.0
    gating[1, 2], gating[1, 5] = 0.0, -0.0
    _, ids = run_and_check(op, gating, 2)
    assert torch.equal(ids.long(), torch.tensor([[2, 5]] * t, device="cuda"))


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("e", [8, 64, 256, 1024, 3000])
@pytest.mark.parametrize("dtype", [FP32, BF16], ids=str)
def test_nan(op, dtype, e, gen):
    """A NaN gate ranks below every number: chosen only when fewer than k numbers are left (a
    row of NaN gives experts 0 .. k-1). Softmax: a NaN in the row makes every weight NaN (as
    torch.softmax does); sigmoid: the numbers keep their weights."""
    t, k = 8, min(e, 6)
    gating = make_gating(t, e, dtype, gen)
    nan = float("nan")
    gating[0, :] = nan                      # all NaN
    gating[1, e // 2] = nan                 # one NaN
    gating[2, :: 3] = nan                   # a third
    gating[3, : e - min(e, 3)] = nan        # only three numbers (or fewer) left, at the end
    gating[4, 0] = nan                      # NaN where a large gate would be
    gating[5, :] = float("-inf")
    gating[5, 1] = nan                      # -inf beats NaN
    w, ids = run_and_check(op, gating, k)
    ids = ids.long()
    assert torch.equal(ids[0], torch.arange(k, device="cuda"))
    numbers = min(e, 3)
    if k <= numbers:
        assert bool((ids[3] >= e - numbers).all())
    else:
        assert set(ids[3, :numbers].tolist()) == set(range(e - numbers, e))
    # A row takes exactly max(0, k - numbers) NaN-gated experts, the numbers first.
    numbers_per_row = (~torch.isnan(gating)).sum(-1)
    chosen_nan = torch.isnan(gating.gather(1, ids))
    for r in range(t):
        want = max(0, k - int(numbers_per_row[r]))
        assert int(chosen_nan[r].sum()) == want, f"row {r}: {int(chosen_nan[r].sum())} NaN gates chosen, not {want}"
        assert not bool(chosen_nan[r, : k - want].any()), f"row {r}: a NaN gate before a number"
    if op == "topk_softmax":
        assert bool(torch.isnan(w[:5]).all())


@pytest.mark.parametrize("e", [8, 256, 3000])
def test_nan_bias(e, gen):
    """A NaN bias makes that expert's key NaN: never chosen while numbers are left."""
    t, k = 16, 4
    gating = make_gating(t, e, FP32, gen)
    bias = make_bias(e, gen)
    bias[::2] = float("nan")
    gating[:, ::2] += 100  # the NaN-biased experts would win otherwise
    _, ids = run_and_check("topk_sigmoid", gating, k, bias=bias)
    assert bool((ids % 2 == 1).all())


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("e", [8, 128, 2048])
def test_inf(op, e, gen):
    """+inf gates come first (lower index first among them); a softmax row with +inf or all -inf
    has NaN weights (as torch.softmax); sigmoid weights are 1 and 0."""
    t, k = 4, 3
    gating = make_gating(t, e, FP32, gen)
    inf = float("inf")
    gating[0, [e - 1, 1]] = inf
    gating[1, :] = -inf
    gating[2, :] = -inf
    gating[2, e - 2] = 0.5
    gating[3, 0] = -inf
    w, ids = run_and_check(op, gating, k)
    assert ids[0, :2].tolist() == [1, e - 1]
    assert ids[1].tolist() == [0, 1, 2]
    assert ids[2].tolist() == [e - 2, 0, 1]
    if op == "topk_sigmoid":
        assert w[0, :2].tolist() == [1.0, 1.0] and w[1].tolist() == [0.0, 0.0, 0.0]
    else:
        assert bool(torch.isnan(w[:2]).all())
        assert w[2].tolist() == [1.0, 0.0, 0.0]


def test_renormalize_zero_sum(gen):
    """sigmoid of -inf is 0: renormalizing k zeros divides 0 by 0 (NaN), as the reference."""
    gating = torch.full((2, 16), float("-inf"), device="cuda")
    w, ids = run_and_check("topk_sigmoid", gating, 4, renormalize=True)
    assert bool(torch.isnan(w).all())


# ---------------------------------------------------------------------------------------
# Layouts: row pitches, misaligned gates, guarded outputs


def guarded(t: int, k: int, pad: int, ids_dtype):
    """Outputs [t, k] with a row pitch of k + pad inside buffers with a guard row above and
    below; the guard holds W_GUARD / ID_GUARD, the outputs are poisoned."""
    wbuf = torch.full((t + 2, k + pad), W_GUARD, dtype=torch.float32, device="cuda")
    ibuf = torch.full((t + 2, k + pad), ID_GUARD, dtype=ids_dtype, device="cuda")
    w, ids = wbuf[1 : t + 1, :k], ibuf[1 : t + 1, :k]
    w.fill_(float("nan"))
    ids.fill_(ID_POISON)
    return w, ids, wbuf, ibuf


def check_guards(w, ids, wbuf, ibuf) -> None:
    t, k = w.shape
    wmask = torch.ones_like(wbuf, dtype=torch.bool)
    wmask[1 : t + 1, :k] = False
    assert bool((wbuf[wmask] == W_GUARD).all()), "wrote outside topk_weights"
    assert bool((ibuf[wmask] == ID_GUARD).all()), "wrote outside topk_ids"


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("layout", ["contiguous", "pitch8", "pitch1", "offset1", "offset2"])
@pytest.mark.parametrize("e, k", [(8, 2), (60, 4), (256, 8), (500, 10), (1536, 9)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_layouts(op, dtype, e, k, layout, gen):
    """Gate rows with a pitch (E + 8: vectors stay aligned for 16-bit gates; E + 1: scalar
    loads) or starting 1 or 2 elements into their allocation (narrower vectors); outputs with a
    pitch of k + 3 between guard rows."""
    t = 67
    pitch = e + {"pitch8": 8, "pitch1": 1}.get(layout, 0)
    offset = {"offset1": 1, "offset2": 2}.get(layout, 0)
    base = make_gating(t * pitch + offset, 1, dtype, gen).view(-1)
    gating = base[offset:].as_strided((t, e), (pitch, 1))
    w, ids, wbuf, ibuf = guarded(t, k, 3, torch.int64 if layout == "offset1" else torch.int32)
    bias = make_bias(e, gen) if op == "topk_sigmoid" else None
    call(op, w, ids, gating, True, 0.0, bias)
    torch.cuda.synchronize()
    msg = check_topk(w, ids, gating, op, True, 0.0, bias)
    assert msg is None, msg
    check_guards(w, ids, wbuf, ibuf)


@pytest.mark.parametrize("op", list(OPS))
def test_through_torch_ops(op, gen):
    """The op with its schema's argument order (the wrapper is bypassed)."""
    t, e, k = 33, 128, 6
    gating = make_gating(t, e, BF16, gen)
    bias = make_bias(e, gen)
    w, ids = outputs(t, k)
    if op == "topk_softmax":
        OPS[op](w, ids, gating, True, 0.0, bias)
    else:
        OPS[op](w, ids, gating, True, bias)
    torch.cuda.synchronize()
    assert check_topk(w, ids, gating, op, True, 0.0, bias) is None


# ---------------------------------------------------------------------------------------
# Empty input, CUDA graphs, opcheck, determinism


@pytest.mark.parametrize("op", list(OPS))
def test_empty(op):
    gating = torch.empty(0, 64, dtype=BF16, device="cuda")
    w, ids = outputs(0, 4)
    call(op, w, ids, gating)
    torch.cuda.synchronize()


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("t, e, k", [(1, 8, 2), (16, 128, 8), (128, 256, 8), (4, 4096, 16)])
def test_cuda_graph(op, t, e, k, gen):
    gating = make_gating(t, e, BF16, gen)
    bias = make_bias(e, gen)
    w, ids = outputs(t, k)
    call(op, w, ids, gating, True, 0.0, bias)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call(op, w, ids, gating, True, 0.0, bias)
    for _ in range(3):
        gating.copy_(make_gating(t, e, BF16, gen))
        bias.copy_(make_bias(e, gen))
        w.fill_(float("nan"))
        ids.fill_(ID_POISON)
        graph.replay()
        torch.cuda.synchronize()
        msg = check_topk(w, ids, gating, op, True, 0.0, bias)
        assert msg is None, msg


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("e", [64, 2048])
def test_opcheck(op, with_bias, e, gen):
    t, k = 17, 4
    gating = make_gating(t, e, BF16, gen)
    bias = make_bias(e, gen) if with_bias else None
    w, ids = outputs(t, k)
    args = (w, ids, gating, True, 5.0, bias) if op == "topk_softmax" else (w, ids, gating, True, bias)
    torch.library.opcheck(OPS[op], args)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("e, k", [(60, 4), (256, 8), (3000, 32), (65536, 64)])
def test_deterministic(op, e, k, gen):
    t = 50
    gating = make_gating(t, e, BF16, gen)
    bias = make_bias(e, gen)
    a = outputs(t, k)
    b = outputs(t, k)
    call(op, *a, gating, True, 0.0, bias)
    call(op, *b, gating, True, 0.0, bias)
    torch.cuda.synchronize()
    assert torch.equal(a[0].view(torch.int32), b[0].view(torch.int32)) and torch.equal(a[1], b[1])


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops: the C++ checks protect direct callers too)


def _args(**changes):
    c = dict(device="cuda")
    args = {
        "topk_weights": torch.empty(6, 2, dtype=torch.float32, **c),
        "topk_indices": torch.empty(6, 2, dtype=torch.int32, **c),
        "gating_output": torch.randn(6, 16, **c).to(BF16),
        "correction_bias": torch.zeros(16, **c),
        "moe_softcapping": 0.0,
    }
    for key, fn in changes.items():
        args[key] = fn(args[key])
    return args


BAD = [
    ("gating-cpu", dict(gating_output=lambda t: t.cpu()), "gating_output", ["CUDA tensor"]),
    ("weights-cpu", dict(topk_weights=lambda t: t.cpu()), "topk_weights", ["device"]),
    ("ids-cpu", dict(topk_indices=lambda t: t.cpu()), "topk_indices", ["device"]),
    ("gating-int", dict(gating_output=lambda t: t.int()), "gating_output", ["dtype", "torch.int32"]),
    ("gating-fp64", dict(gating_output=lambda t: t.double()), "gating_output", ["dtype", "torch.float64"]),
    ("weights-fp16", dict(topk_weights=lambda t: t.half()), "topk_weights", ["dtype", "torch.float16"]),
    ("ids-int16", dict(topk_indices=lambda t: t.short()), "topk_indices", ["dtype", "torch.int16"]),
    ("ids-float", dict(topk_indices=lambda t: t.float()), "topk_indices", ["dtype"]),
    ("gating-1d", dict(gating_output=lambda t: t[0]), "gating_output", ["2-D"]),
    ("gating-3d", dict(gating_output=lambda t: t.view(6, 2, 8)), "gating_output", ["2-D"]),
    ("weights-1d", dict(topk_weights=lambda t: t.view(-1)), "topk_weights", ["2-D"]),
    ("gating-transposed", dict(gating_output=lambda t: torch.randn(16, 6, device="cuda").to(BF16).t()),
     "gating_output", ["contiguous"]),
    ("weights-rows", dict(topk_weights=lambda t: torch.empty(7, 2, device="cuda")), "topk_weights",
     ["gating_output.shape[0]"]),
    ("ids-shape", dict(topk_indices=lambda t: torch.empty(6, 3, dtype=torch.int32, device="cuda")), "topk_indices",
     ["topk_weights"]),
    ("k-above-E", dict(topk_weights=lambda t: torch.empty(6, 17, device="cuda"),
                       topk_indices=lambda t: torch.empty(6, 17, dtype=torch.int32, device="cuda")), "k",
     ["topk_weights.shape[1]"]),
    ("k-zero", dict(topk_weights=lambda t: torch.empty(6, 0, device="cuda"),
                    topk_indices=lambda t: torch.empty(6, 0, dtype=torch.int32, device="cuda")), "k", []),
    ("k-above-128", dict(gating_output=lambda t: torch.randn(6, 300, device="cuda"),
                         correction_bias=lambda t: torch.zeros(300, device="cuda"),
                         topk_weights=lambda t: torch.empty(6, 129, device="cuda"),
                         topk_indices=lambda t: torch.empty(6, 129, dtype=torch.int32, device="cuda")), "k",
     ["128"]),
    ("E-above-65536", dict(gating_output=lambda t: torch.empty(1, 65537, device="cuda"),
                           correction_bias=lambda t: torch.zeros(65537, device="cuda"),
                           topk_weights=lambda t: torch.empty(1, 2, device="cuda"),
                           topk_indices=lambda t: torch.empty(1, 2, dtype=torch.int32, device="cuda")),
     "gating_output", ["65536"]),
    ("weights-overlap", dict(topk_weights=lambda t: torch.empty(1, 2, device="cuda").expand(6, 2)), "topk_weights",
     ["share memory"]),
    ("bias-bf16", dict(correction_bias=lambda t: t.to(BF16)), "correction_bias", ["dtype"]),
    ("bias-size", dict(correction_bias=lambda t: torch.zeros(15, device="cuda")), "correction_bias",
     ["gating_output.shape[1]"]),
    ("bias-2d", dict(correction_bias=lambda t: t.view(2, 8)), "correction_bias", ["1-D"]),
    ("bias-strided", dict(correction_bias=lambda t: torch.zeros(32, device="cuda")[::2]), "correction_bias",
     ["contiguous"]),
    ("bias-cpu", dict(correction_bias=lambda t: t.cpu()), "correction_bias", ["device"]),
]
SOFTCAP_BAD = [-1.0, float("nan"), float("inf")]


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("changes, arg, fragments", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input(op, changes, arg, fragments):
    a = _args(**changes)
    with raises_op_error(op, arg, *fragments):
        if op == "topk_softmax":
            OPS[op](a["topk_weights"], a["topk_indices"], a["gating_output"], False, a["moe_softcapping"],
                    a["correction_bias"])
        else:
            OPS[op](a["topk_weights"], a["topk_indices"], a["gating_output"], False, a["correction_bias"])


@pytest.mark.parametrize("softcap", SOFTCAP_BAD)
def test_bad_softcap(softcap):
    a = _args()
    with raises_op_error("topk_softmax", "moe_softcapping"):
        OPS["topk_softmax"](a["topk_weights"], a["topk_indices"], a["gating_output"], False, softcap, None)
