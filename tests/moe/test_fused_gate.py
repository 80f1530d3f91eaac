# SPDX-License-Identifier: Apache-2.0
"""moe_fused_gate / kimi_k2_moe_fused_gate (API.md 2.4) on the GPU, against the fp64 reference of
tests/moe/ref_fused_gate.py.

Random inputs are checked with ``check_fused_gate``: on every row the ids are distinct experts
(plus the shared ids E + j) and the weights are those the ids give; on the rows whose
decisions are farther apart than the kernel's fp32 error ("robust", nearly all of them) the ids
must be the reference's exactly, in order. Tie tests build exact ties (lower index, lower group
wins); NaN tests check only that the ids stay valid and distinct. Outputs come from the
caching allocator after a block of the same size was filled with garbage, so an element the
kernel did not write fails the checks.
"""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.helpers import raises_op_error
from tests.moe.ref_fused_gate import (
    biased_grouped_topk_torch,
    check_fused_gate,
    fused_gate_ref,
    kimi_k2_gate_torch,
    nan_rows_ok,
)

pytestmark = pytest.mark.gpu

OP = torch.ops.sgl_kernel.moe_fused_gate.default
KIMI = torch.ops.sgl_kernel.kimi_k2_moe_fused_gate.default
BF16 = torch.bfloat16
DTYPES = (torch.float32, torch.float16, BF16)


def make_inputs(t: int, e: int, dtype, gen, x_scale: float = 2.0, bias_scale: float = 0.1):
    """Router logits ~ N(0, x_scale^2) and a bias in [-bias_scale, bias_scale), in ``dtype``."""
    x = (torch.randn(t, e, device="cuda", generator=gen) * x_scale).to(dtype)
    bias = ((torch.rand(e, device="cuda", generator=gen) * 2 - 1) * bias_scale).to(dtype)
    return x, bias


def poison_allocator(t: int, topk: int) -> None:
    """Leave blocks of the outputs' sizes full of garbage in the caching allocator: the op's
    fresh outputs most likely reuse them, so unwritten elements would show."""
    w = torch.full((t, topk), float("nan"), device="cuda")
    i = torch.full((t, topk), -7, dtype=torch.int32, device="cuda")
    del w, i


def run_gate(x, bias, ng, tg, topk, ns=0, factor=2.5, scale=False):
    poison_allocator(x.shape[0], topk)
    out = sgl_kernel.moe_fused_gate(x, bias, ng, tg, topk, ns, factor, scale)
    assert isinstance(out, (list, tuple)) and len(out) == 2
    torch.cuda.synchronize()
    return out[0], out[1]


def run_kimi(x, bias, topk, renorm=True, factor=2.827, scale=False):
    poison_allocator(x.shape[0], topk)
    out = sgl_kernel.kimi_k2_moe_fused_gate(x, bias, topk, renorm, factor, scale)
    assert isinstance(out, (list, tuple)) and len(out) == 2
    torch.cuda.synchronize()
    return out[0], out[1]


def check_gate(x, bias, ng, tg, topk, ns=0, factor=2.5, scale=False, min_robust=None):
    w, ids = run_gate(x, bias, ng, tg, topk, ns, factor, scale)
    ref = fused_gate_ref(x, bias, ng, tg, topk, ns, factor, True, scale)
    if min_robust is None:
        min_robust = 0.8 if x.shape[0] >= 100 else 0.0
    msg = check_fused_gate(w, ids, ref, ns, factor, True, scale, min_robust=min_robust)
    assert msg is None, msg
    return w, ids, ref


def check_kimi(x, bias, topk, renorm=True, factor=2.827, scale=False, min_robust=None):
    w, ids = run_kimi(x, bias, topk, renorm, factor, scale)
    ref = fused_gate_ref(x, bias, 1, 1, topk, 0, factor, renorm, scale)
    if min_robust is None:
        min_robust = 0.8 if x.shape[0] >= 100 else 0.0
    msg = check_fused_gate(w, ids, ref, 0, factor, renorm, scale, min_robust=min_robust)
    assert msg is None, msg
    return w, ids, ref


# ---------------------------------------------------------------------------------------
# Model configurations


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("t", [1, 7, 128, 1000])
@pytest.mark.parametrize("shared, scale", [(0, False), (1, True), (1, False)])
def test_deepseek_v3(dtype, t, shared, scale, gen):
    """DeepSeek-V3/R1: 256 experts, 8 groups, 4 kept, 8 routed (+1 fused shared), factor 2.5."""
    x, bias = make_inputs(t, 256, dtype, gen)
    check_gate(x, bias, 8, 4, 8 + shared, shared, 2.5, scale)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("t", [1, 5, 256, 1000])
@pytest.mark.parametrize("renorm, scale", [(True, False), (True, True), (False, False), (False, True)])
def test_kimi_k2(dtype, t, renorm, scale, gen):
    """Kimi-K2: 384 experts, one group, 8 experts, factor 2.827."""
    x, bias = make_inputs(t, 384, dtype, gen)
    check_kimi(x, bias, 8, renorm, 2.827, scale)


def _group_configs():
    out = []
    for e in (64, 128, 256, 512):
        for ng in (1, 2, 4, 8, 16):
            if e // ng > 32 and ng > 1:
                continue
            g = e // ng
            for tg in sorted({1, max(1, ng // 2), ng}):
                for topk in (1, 6, 8):
                    if topk <= tg * g:
                        out.append((e, ng, tg, topk))
    return out


@pytest.mark.parametrize("e, ng, tg, topk", _group_configs())
def test_group_layouts(e, ng, tg, topk, gen):
    """E in {64, 128, 256, 512}, 1..16 groups of at most 32 experts, several kept-group counts."""
    x, bias = make_inputs(333, e, BF16, gen)
    check_gate(x, bias, ng, tg, topk, 0, 2.5, True)


@pytest.mark.parametrize("dtype", [torch.float32, BF16], ids=str)
@pytest.mark.parametrize("e, ng", [(64, 64), (64, 32), (64, 16), (256, 128), (512, 256), (1024, 512), (1024, 64)])
def test_small_groups(dtype, e, ng, gen):
    """Groups of 1, 2 and 4 experts (a group of one scores its single b) and 1024 experts."""
    g = e // ng
    tg = max(1, ng // 4)
    topk = min(8, tg * g)
    x, bias = make_inputs(300, e, dtype, gen)
    check_gate(x, bias, ng, tg, topk, 0, 2.5, False)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, BF16], ids=str)
@pytest.mark.parametrize("e", [1, 3, 8, 100, 130, 257, 384, 500, 512, 777, 1024])
def test_kimi_any_experts(dtype, e, gen):
    """The one-group op with any E up to 1024: partial lanes (E not a multiple of the lane run),
    element loads where a row is not a multiple of 16 bytes."""
    topk = min(8, e)
    x, bias = make_inputs(200, e, dtype, gen)
    check_kimi(x, bias, topk, True, 1.0, False)


@pytest.mark.parametrize("e, ng, tg, topk, shared", [
    (256, 8, 4, 32, 0),    # topk at its limit
    (256, 8, 1, 32, 0),    # every expert of the kept group
    (256, 8, 4, 32, 31),   # one routed expert, 31 shared
    (64, 2, 1, 32, 0),     # the whole kept group of 32
    (8, 1, 1, 8, 0),       # topk == E
    (16, 2, 1, 9, 1),      # every expert of the kept group + one shared
    (1024, 32, 16, 32, 2),
])
def test_topk_limits(e, ng, tg, topk, shared, gen):
    x, bias = make_inputs(257, e, BF16, gen)
    check_gate(x, bias, ng, tg, topk, shared, 2.5, True, min_robust=0.6)


@pytest.mark.parametrize("t", [16384])
def test_large(t, gen):
    """Prefill sizes: DeepSeek-V3 and Kimi-K2 at 16384 tokens."""
    x, bias = make_inputs(t, 256, BF16, gen)
    check_gate(x, bias, 8, 4, 9, 1, 2.5, True)
    x, bias = make_inputs(t, 384, BF16, gen)
    check_kimi(x, bias, 8, True, 2.827, True)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_misaligned(dtype, gen):
    """input and bias one element past a 16-byte boundary: the element-load path."""
    t = 300

    def shifted(a: torch.Tensor) -> torch.Tensor:
        buf = torch.empty(a.numel() + 1, dtype=a.dtype, device="cuda")
        out = buf[1:].view(a.shape)
        out.copy_(a)
        assert out.is_contiguous() and out.data_ptr() % 16 != 0
        return out

    x, bias = make_inputs(t, 256, dtype, gen)
    check_gate(shifted(x), shifted(bias), 8, 4, 8, 0, 2.5, False)
    x, bias = make_inputs(t, 384, dtype, gen)
    check_kimi(shifted(x), shifted(bias), 8)


# ---------------------------------------------------------------------------------------
# Ties, factors, NaN


@pytest.mark.parametrize("e, ng, tg, topk, shared", [(256, 8, 4, 9, 1), (384, 1, 1, 8, 0), (64, 16, 3, 8, 0),
                                                     (512, 16, 2, 32, 0)])
def test_all_equal(e, ng, tg, topk, shared):
    """Every b equal: the lowest groups and, in them, the lowest indices, in index order."""
    x = torch.full((5, e), 0.25, device="cuda")
    bias = torch.full((e,), -0.5, device="cuda")
    if ng == 1:
        w, ids = run_kimi(x, bias, topk, True, 2.5, False)
    else:
        w, ids = run_gate(x, bias, ng, tg, topk, shared, 2.5, False)
    kr = topk - shared
    expected = list(range(kr)) + [e + j for j in range(shared)]
    assert ids.tolist() == [expected] * 5
    ref = fused_gate_ref(x, bias, ng, tg, topk, shared, 2.5, True, False)
    assert check_fused_gate(w, ids, ref, shared, 2.5, True, False, min_robust=1.0) is None


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("e, ng, tg", [(256, 8, 4), (384, 1, 1), (128, 64, 8)])
def test_expert_ties_lower_index(dtype, e, ng, tg, gen):
    """Pairs of experts with equal logits and equal bias tie exactly: the lower index comes
    first, the pair side by side in the output."""
    t = 200
    x, bias = make_inputs(t, e, dtype, gen)
    # experts 2k + 1 copy expert 2k (bias too): every row is full of exact ties
    x[:, 1::2] = x[:, 0::2]
    bias[1::2] = bias[0::2]
    if ng == 1:
        w, ids, ref = check_kimi(x, bias, 8, min_robust=0.9)
    else:
        w, ids, ref = check_gate(x, bias, ng, tg, 8, 0, 2.5, False, min_robust=0.9)
    pairs = ids.long().view(-1, 4, 2)
    assert bool((pairs[..., 1] == pairs[..., 0] + 1).all()), "a tied pair out of (lower, higher) order"
    assert bool((pairs[..., 0] % 2 == 0).all())


@pytest.mark.parametrize("e, ng, tg", [(256, 8, 1), (256, 8, 3), (256, 16, 5), (128, 4, 2), (64, 16, 8)])
def test_group_ties_lower_group(e, ng, tg, gen):
    """Two groups with identical values (a < b) tie exactly at the kept-group boundary: a is
    kept, b dropped. Rows: tg - 1 groups of uniformly high b (the best group scores), then the
    tied pair, whose first expert has the row's largest b (so it is always chosen), then low
    groups."""
    t = 64
    g = e // ng
    x = torch.randn(t, ng, g, device="cuda", generator=gen) * 0.3 - 3.0
    bias = torch.zeros(e, device="cuda")
    perm = torch.randperm(ng, device="cuda", generator=gen).tolist()
    a, b = sorted(perm[tg - 1 : tg + 1])
    for hi in perm[: tg - 1]:
        x[:, hi] += 5.0  # s ~ 0.88 everywhere: top-2 sum ~ 1.76
    x[:, a] += 1.0
    x[:, a, 0] = 6.0  # top-2 sum ~ 1.0 + 0.2: below the high groups, above the low ones
    x[:, b] = x[:, a]
    x = x.view(t, e)
    w, ids = run_gate(x, bias, ng, tg, 8, 0, 2.5, False)
    assert bool((ids[:, 0] == a * g).all()), f"the tied lower group {a} was not kept: {ids[:2].tolist()}"
    assert not bool(((ids.long() // g) == b).any()), f"group {b} kept over the tied lower group {a}"
    ref = fused_gate_ref(x, bias, ng, tg, 8, 0, 2.5, True, False)
    assert check_fused_gate(w, ids, ref, 0, 2.5, True, False, min_robust=0.9) is None


@pytest.mark.parametrize("shared", [1, 2])
@pytest.mark.parametrize("scale", [False, True])
def test_factor_zero_literal(shared, scale, gen):
    """routed_scaling_factor = 0 (the API default) is used as given: shared weights S / 0 = inf
    (then inf * 0 = NaN when scaled), routed weights s / S (then 0)."""
    x, bias = make_inputs(50, 256, BF16, gen)
    topk = 8 + shared
    w, ids = run_gate(x, bias, 8, 4, topk, shared, 0.0, scale)
    ref = fused_gate_ref(x, bias, 8, 4, topk, shared, 0.0, True, scale)
    assert check_fused_gate(w, ids, ref, shared, 0.0, True, scale, min_robust=0.0) is None
    if scale:
        assert bool(torch.isnan(w[:, 8:]).all()) and bool((w[:, :8] == 0).all())
    else:
        assert bool(torch.isinf(w[:, 8:]).all()) and bool(torch.isfinite(w[:, :8]).all())
    # the wrapper's default factor is 0 too
    out = sgl_kernel.moe_fused_gate(x, bias, 8, 4, topk, shared)
    assert bool(torch.isinf(out[0][:, 8:]).all())
    # Kimi: weights * 0
    w, _ = run_kimi(x[:, :256], bias, 8, True, 0.0, True)
    assert bool((w == 0).all())


@pytest.mark.parametrize("factor", [1.0, 2.5])
def test_shared_weights(factor, gen):
    """A fused shared expert weighs S / factor before the renormalisation: 1 / factor after it,
    exactly 1 (to rounding) once scaled back."""
    x, bias = make_inputs(100, 256, torch.float32, gen)
    w, ids = run_gate(x, bias, 8, 4, 10, 2, factor, False)
    torch.testing.assert_close(w[:, 8:], torch.full_like(w[:, 8:], 1.0 / factor), rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(w[:, :8].sum(1), torch.ones(100, device="cuda"), rtol=1e-5, atol=1e-6)
    w, ids = run_gate(x, bias, 8, 4, 10, 2, factor, True)
    torch.testing.assert_close(w[:, 8:], torch.ones_like(w[:, 8:]), rtol=1e-6, atol=1e-7)
    assert (ids[:, 8:] == torch.tensor([256, 257], dtype=torch.int32, device="cuda")).all()


@pytest.mark.parametrize("frac", [0.05, 0.5, 0.97, 1.0])
@pytest.mark.parametrize("e, ng, tg, topk, shared", [(256, 8, 4, 9, 1), (384, 1, 1, 8, 0), (64, 64, 8, 8, 0),
                                                     (1000, 1, 1, 32, 0)])
def test_nan_inf(frac, e, ng, tg, topk, shared, gen):
    """NaN / +-inf logits and biases: the ids stay kr distinct experts (a NaN b is chosen only
    when fewer numbers are left); rows without NaN are still exact."""
    t = 300
    x, bias = make_inputs(t, e, torch.float32, gen)
    nan_rows = torch.arange(t, device="cuda") % 3 == 0
    nan_mask = (torch.rand(t, e, device="cuda", generator=gen) < frac) & nan_rows[:, None]
    x[nan_mask] = float("nan")
    x[torch.rand(t, e, device="cuda", generator=gen) < 0.02] = float("inf")
    x[torch.rand(t, e, device="cuda", generator=gen) < 0.02] = float("-inf")
    kr = topk - shared
    if ng == 1:
        w, ids = run_kimi(x, bias, topk, True, 2.5, False)
    else:
        w, ids = run_gate(x, bias, ng, tg, topk, shared, 2.5, False)
    msg = nan_rows_ok(w, ids, e, kr, shared)
    assert msg is None, msg
    clean = ~torch.isnan(x).any(1)
    ref = fused_gate_ref(x[clean], bias, ng, tg, topk, shared, 2.5, True, False)
    msg = check_fused_gate(w[clean], ids[clean], ref, shared, 2.5, True, False, min_robust=0.5)
    assert msg is None, msg
    # a NaN bias entry: that expert ranks last in every row
    bias2 = bias.clone()
    bias2[0] = float("nan")
    x2 = make_inputs(100, e, torch.float32, gen)[0]
    x2[:, 0] = 30.0
    w, ids = run_kimi(x2, bias2, topk, True, 2.5, False) if ng == 1 else run_gate(x2, bias2, ng, tg, topk, shared)
    assert nan_rows_ok(w, ids, e, kr, shared) is None
    assert not bool((ids[:, :kr] == 0).any()), "a NaN b chosen over numbers"


def test_inf_bias_and_extreme_logits(gen):
    """+inf bias forces an expert first; logits of +-1e30 give s = 1 and 0 exactly."""
    x, bias = make_inputs(64, 256, torch.float32, gen)
    bias[77] = float("inf")
    x[:, 5] = 1e30
    x[:, 6] = -1e30
    w, ids = run_gate(x, bias, 8, 4, 8, 0, 2.5, False)
    assert bool((ids[:, 0] == 77).all())
    ref = fused_gate_ref(x, bias, 8, 4, 8, 0, 2.5, True, False)
    assert check_fused_gate(w, ids, ref, min_robust=0.0) is None


# ---------------------------------------------------------------------------------------
# Determinism, CUDA graphs, opcheck, baselines


def test_deterministic(gen):
    x, bias = make_inputs(1000, 256, BF16, gen)
    a = sgl_kernel.moe_fused_gate(x, bias, 8, 4, 9, 1, 2.5, True)
    b = sgl_kernel.moe_fused_gate(x, bias, 8, 4, 9, 1, 2.5, True)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("t", [1, 128, 4096])
def test_cuda_graph(t, gen):
    x, bias = make_inputs(t, 256, BF16, gen)
    xk, bk = make_inputs(t, 384, BF16, gen)

    def step():
        return (sgl_kernel.moe_fused_gate(x, bias, 8, 4, 9, 1, 2.5, True),
                sgl_kernel.kimi_k2_moe_fused_gate(xk, bk, 8, True, 2.827, False))

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        (w, ids), (wk, idsk) = step()
    for _ in range(3):
        x.copy_(make_inputs(t, 256, BF16, gen)[0])
        xk.copy_(make_inputs(t, 384, BF16, gen)[0])
        for o in (w, wk):
            o.fill_(float("nan"))
        for o in (ids, idsk):
            o.fill_(-1)
        graph.replay()
        torch.cuda.synchronize()
        ref = fused_gate_ref(x, bias, 8, 4, 9, 1, 2.5, True, True)
        assert check_fused_gate(w, ids, ref, 1, 2.5, True, True, min_robust=0.0) is None
        ref = fused_gate_ref(xk, bk, 1, 1, 8, 0, 2.827, True, False)
        assert check_fused_gate(wk, idsk, ref, 0, 2.827, True, False, min_robust=0.0) is None


@pytest.mark.parametrize("dtype", [torch.float32, BF16], ids=str)
def test_opcheck(dtype, gen):
    x, bias = make_inputs(37, 256, dtype, gen)
    torch.library.opcheck(OP, (x, bias, 8, 4, 9, 1, 2.5, True))
    xk, bk = make_inputs(37, 384, dtype, gen)
    torch.library.opcheck(KIMI, (xk, bk, 8, True, 2.827, False))


def test_empty():
    x = torch.empty(0, 256, dtype=BF16, device="cuda")
    bias = torch.zeros(256, dtype=BF16, device="cuda")
    w, ids = sgl_kernel.moe_fused_gate(x, bias, 8, 4, 9, 1, 2.5, True)
    assert w.shape == (0, 9) and ids.shape == (0, 9) and w.dtype == torch.float32 and ids.dtype == torch.int32
    w, ids = sgl_kernel.kimi_k2_moe_fused_gate(torch.empty(0, 384, device="cuda"), torch.zeros(384, device="cuda"), 8)
    assert w.shape == (0, 8)


def test_torch_baselines_agree(gen):
    """The bench's engine-style baselines give the reference's ids on robust rows."""
    x, bias = make_inputs(500, 256, torch.float32, gen)
    w, ids = biased_grouped_topk_torch(x, bias, 9, True, 8, 4, 1, 2.5, True)
    ref = fused_gate_ref(x, bias, 8, 4, 9, 1, 2.5, True, True)
    assert check_fused_gate(w, ids, ref, 1, 2.5, True, True, rtol=1e-4, atol=1e-5, ties_exact=False) is None
    x, bias = make_inputs(500, 384, torch.float32, gen)
    w, ids = kimi_k2_gate_torch(x, bias, 8, True, 2.827, True)
    ref = fused_gate_ref(x, bias, 1, 1, 8, 0, 2.827, True, True)
    assert check_fused_gate(w, ids, ref, 0, 2.827, True, True, rtol=1e-4, atol=1e-5, ties_exact=False) is None


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops: the C++ checks protect direct callers too)


def _gate_args(**changes):
    args = {
        "input": torch.randn(4, 256, device="cuda").to(BF16),
        "bias": torch.zeros(256, dtype=BF16, device="cuda"),
        "num_expert_group": 8,
        "topk_group": 4,
        "topk": 9,
        "num_fused_shared_experts": 1,
    }
    for key, fn in changes.items():
        args[key] = fn(args[key])
    return args


BAD_GATE = [
    ("input-cpu", dict(input=lambda t: t.cpu()), "input", ["CUDA tensor"]),
    ("bias-cpu", dict(bias=lambda t: t.cpu()), "bias", ["device"]),
    ("input-int", dict(input=lambda t: t.to(torch.int32)), "input", ["dtype", "torch.int32"]),
    ("input-fp8", dict(input=lambda t: t.to(torch.float8_e4m3fn)), "input", ["dtype"]),
    ("bias-dtype", dict(bias=lambda t: t.float()), "bias", ["dtype", "same as input"]),
    ("input-1d", dict(input=lambda t: t[0]), "input", ["2-D"]),
    ("bias-2d", dict(bias=lambda t: t.view(1, 256)), "bias", ["1-D"]),
    ("bias-len", dict(bias=lambda t: torch.zeros(128, dtype=BF16, device="cuda")), "bias", ["256"]),
    ("input-noncontig", dict(input=lambda t: torch.randn(256, 4, device="cuda").to(BF16).t()), "input",
     ["contiguous"]),
    ("experts-not-pow2", dict(input=lambda t: torch.randn(4, 96, device="cuda").to(BF16),
                              bias=lambda t: torch.zeros(96, dtype=BF16, device="cuda"),
                              num_expert_group=lambda n: 3, topk_group=lambda n: 2), "input",
     ["power of two"]),
    ("experts-2048", dict(input=lambda t: torch.randn(4, 2048, device="cuda").to(BF16),
                          bias=lambda t: torch.zeros(2048, dtype=BF16, device="cuda"),
                          num_expert_group=lambda n: 64), "input", ["1024"]),
    ("groups-not-dividing", dict(num_expert_group=lambda n: 3), "num_expert_group", ["256"]),
    ("groups-of-64", dict(num_expert_group=lambda n: 4), "num_expert_group", ["32"]),
    ("topk-group-big", dict(topk_group=lambda n: 9), "topk_group", ["9"]),
    ("topk-group-0", dict(topk_group=lambda n: 0), "topk_group", ["0"]),
    ("topk-33", dict(topk=lambda n: 33), "topk", ["32"]),
    ("topk-0", dict(topk=lambda n: 0, num_fused_shared_experts=lambda n: 0), "topk", ["0"]),
    ("shared-negative", dict(num_fused_shared_experts=lambda n: -1), "num_fused_shared_experts", ["-1"]),
    ("shared-all", dict(num_fused_shared_experts=lambda n: 9), "topk", ["num_fused_shared_experts"]),
]


@pytest.mark.parametrize("changes, arg, fragments", [b[1:] for b in BAD_GATE], ids=[b[0] for b in BAD_GATE])
def test_bad_input(changes, arg, fragments):
    a = _gate_args(**changes)
    with raises_op_error("moe_fused_gate", arg, *fragments):
        OP(a["input"], a["bias"], a["num_expert_group"], a["topk_group"], a["topk"], a["num_fused_shared_experts"],
           2.5, False)


def test_bad_input_more_routed_than_kept():
    """kr = 9 experts from one kept group of 8."""
    x = torch.randn(4, 64, device="cuda").to(BF16)
    bias = torch.zeros(64, dtype=BF16, device="cuda")
    with raises_op_error("moe_fused_gate", "topk", "experts of topk_group groups"):
        OP(x, bias, 8, 1, 9, 0, 2.5, False)


@pytest.mark.parametrize("name, x, topk, arg, fragment", [
    ("experts-2000", (4, 2000), 8, "input", "1024"),
    ("topk-over-experts", (4, 16), 17, "topk", "16"),
    ("topk-33", (4, 384), 33, "topk", "32"),
    ("topk-0", (4, 384), 0, "topk", "0"),
])
def test_bad_input_kimi(name, x, topk, arg, fragment):
    inp = torch.randn(*x, device="cuda").to(BF16)
    bias = torch.zeros(x[1], dtype=BF16, device="cuda")
    with raises_op_error("kimi_k2_moe_fused_gate", arg, fragment):
        KIMI(inp, bias, topk, True, 1.0, False)


def test_bad_input_kimi_tensors():
    inp = torch.randn(4, 384, device="cuda").to(BF16)
    bias = torch.zeros(384, dtype=BF16, device="cuda")
    with raises_op_error("kimi_k2_moe_fused_gate", "input", "CUDA tensor"):
        KIMI(inp.cpu(), bias, 8, True, 1.0, False)
    with raises_op_error("kimi_k2_moe_fused_gate", "bias", "dtype"):
        KIMI(inp, bias.float(), 8, True, 1.0, False)
    with raises_op_error("kimi_k2_moe_fused_gate", "bias", "384"):
        KIMI(inp, bias[:100], 8, True, 1.0, False)


