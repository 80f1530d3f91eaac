# SPDX-License-Identifier: Apache-2.0
"""fused_qk_norm_rope (API.md 2.4) on the GPU: per-head RMSNorm, then RoPE (YaRN-aware), of the
q and k heads of a packed bf16 ``qkv``, in place.

Every result is compared with tests/moe/ref_qk_norm_rope.py's fp64 reference that uses the
kernel's fp32 frequency table and fp32 angle (so positions up to 2^31 stay exact to test), under
the API 1.6 bf16 tolerances and under a tight bound (half a bf16 ulp plus fp32 noise: the result
is the fp64 value rounded once); at positions below 4096 also with the pure fp64 formula. qkv
sits in a buffer of random guard values, with a row pitch or an offset in some cases: everything
but the q and k heads (the v heads, the pitch padding, the guards) must come back bit-identical,
and the q/k heads are checked element by element, so an unwritten element fails too (its old
value is far from the reference).
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import raises_op_error
from tests.moe.ref_qk_norm_rope import qk_norm_rope_ref, yarn_low_high
from tests.tolerances import elementwise_tol

pytestmark = pytest.mark.gpu

OP = "fused_qk_norm_rope"
BF16 = torch.bfloat16
GUARD = 48  # guard elements before and after qkv's extent
EPS = 1e-6
BASE = 10000.0
NO_YARN = dict(factor=1.0, low=0.0, high=0.0, attention_factor=1.0)


def _op():
    return getattr(torch.ops.sgl_kernel, OP).default


def _wrapper():
    import sgl_kernel

    return getattr(sgl_kernel, OP)


def rotary_dims(d: int):
    """R = D, D / 2, the smallest allowed (2 D / 32: a NeoX pair one lane apart) and D - 2 D / 32
    (a NeoX pair 15 lanes apart: not a power of two, no xor shuffle reaches it)."""
    step = 2 * d // 32
    return [d, d // 2, step, d - step]


class Qkv:
    """``[t, (hq + hk + hv) * d]`` bf16 random values (per-head scales 2^-6 .. 2^6), row pitch
    width + pitch_extra, ``offset`` elements past a 256-byte aligned start, inside a buffer of
    random guard values. ``before`` keeps a copy of the whole buffer."""

    def __init__(self, t, hq, hk, hv, d, gen, pitch_extra=0, offset=0):
        self.t, self.hq, self.hk, self.hv, self.d = t, hq, hk, hv, d
        width = (hq + hk + hv) * d
        self.width = width
        pitch = width + pitch_extra
        start = GUARD + offset
        n = start + max(t - 1, 0) * pitch + width + GUARD
        self.buf = torch.randn(n, device="cuda", generator=gen).to(BF16)
        self.qkv = self.buf.as_strided((t, width), (pitch, 1), start)
        heads = hq + hk + hv
        if t > 0 and heads > 0:
            scale = torch.exp2(torch.randint(-6, 7, (t, heads, 1), device="cuda", generator=gen).float())
            vals = torch.randn(t, heads, d, device="cuda", generator=gen) * scale
            self.qkv.copy_(vals.view(t, width).to(BF16))
        self.before = self.buf.clone()
        self.qkv_before = self.qkv.clone()
        # positions of the q/k elements in buf
        rows = start + torch.arange(t, device="cuda")[:, None] * pitch
        cols = torch.arange((hq + hk) * d, device="cuda")[None, :]
        self.written = torch.zeros(n, dtype=torch.bool, device="cuda")
        self.written[(rows + cols).flatten()] = True

    def check_outside(self):
        same = self.buf.view(torch.int16) == self.before.view(torch.int16)
        changed = ~same & ~self.written
        assert not bool(changed.any()), f"{int(changed.sum())} elements outside the q/k heads changed"


def weights(d, gen):
    """(q_weight, k_weight): bf16 [d] around 1 (signs included), distinct."""
    wq = (torch.randn(d, device="cuda", generator=gen) * 0.5 + 1.0).to(BF16)
    wk = (torch.randn(d, device="cuda", generator=gen) * 0.5 - 0.25).to(BF16)
    return wq, wk


def positions(t, max_pos, gen):
    return torch.randint(0, max_pos, (t,), device="cuda", dtype=torch.int32, generator=gen)


def run(q: Qkv, wq, wk, pos, is_neox, rotary_dim=None, eps=EPS, base=BASE, yarn=NO_YARN):
    """Through the public wrapper (it returns None)."""
    args = (q.qkv, q.hq, q.hk, q.hv, q.d, eps, wq, wk, base, is_neox, pos, yarn["factor"], yarn["low"],
            yarn["high"], yarn["attention_factor"])
    if rotary_dim is None:
        assert _wrapper()(*args) is None
    else:
        assert _wrapper()(*args, rotary_dim=rotary_dim) is None


def check(q: Qkv, wq, wk, pos, is_neox, rotary_dim=None, eps=EPS, base=BASE, yarn=NO_YARN, exact=None):
    """q/k heads vs the reference (kernel's angle; also the fp64 formula when ``exact`` or, by
    default, when every position is below 4096), everything else unchanged."""
    torch.cuda.synchronize()
    t, h, d = q.t, q.hq + q.hk, q.d
    got = q.qkv[:, : h * d].view(t, h, d).double()
    ref_args = (q.qkv_before, q.hq, q.hk, d, eps, wq, wk, base, is_neox, pos, yarn["factor"], yarn["low"],
                yarn["high"], yarn["attention_factor"], rotary_dim)
    ref = qk_norm_rope_ref(*ref_args)
    assert bool(torch.isfinite(got).all()), f"{int((~torch.isfinite(got)).sum())} non-finite results"
    torch.testing.assert_close(got, ref, **elementwise_tol(BF16))
    # One rounding of the fp64 value: at most half a bf16 ulp (2^-8 relative) plus fp32 noise,
    # the latter relative to the head's largest value (rotations cancel).
    head_max = ref.abs().amax(-1, keepdim=True)
    err = (got - ref).abs()
    bound = (2.0**-8 + 2.0**-14) * ref.abs() + 2.0**-16 * head_max
    bad = err > bound
    if bool(bad.any()):
        i = bad.nonzero()[0].tolist()
        raise AssertionError(f"{int(bad.sum())} elements beyond one bf16 rounding; first at {i}: got "
                             f"{float(got[tuple(i)])}, reference {float(ref[tuple(i)])}")
    if exact is None:
        exact = t == 0 or int(pos.abs().max()) < 4096
    if exact:
        ref64 = qk_norm_rope_ref(*ref_args, exact=True)
        torch.testing.assert_close(got, ref64, **elementwise_tol(BF16))
    q.check_outside()


# ---------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("hq, hk, hv", [(32, 8, 8), (4, 1, 1)])
@pytest.mark.parametrize("t", [1, 5, 257])
@pytest.mark.parametrize("rot", range(4), ids=["R=D", "R=D/2", "R=min", "R=D-min"])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "interleaved"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_values(d, is_neox, rot, t, hq, hk, hv, gen):
    """Every head size, both pair styles, full / half / smallest / odd-offset rotary parts, decode
    and small prefill calls (one head a warp)."""
    r = rotary_dims(d)[rot]
    q = Qkv(t, hq, hk, hv, d, gen)
    wq, wk = weights(d, gen)
    pos = positions(t, 4096, gen)
    run(q, wq, wk, pos, is_neox, r)
    check(q, wq, wk, pos, is_neox, r)


@pytest.mark.parametrize("t, hq, hk, hv", [
    (512, 32, 8, 8),    # 20480 (token, head) pairs: the batched instance, whole chunks
    (4096, 5, 2, 1),    # 7 heads: a partial last chunk, a chunk across the q/k boundary
    (2048, 64, 4, 4),   # Qwen3-235B-like at TP 1
    (409, 32, 8, 8),    # 16360 pairs: just below the switch to the batched instance
    (410, 32, 8, 8),    # 16400: just above
])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "interleaved"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_many_heads(d, is_neox, t, hq, hk, hv, gen):
    """Calls large enough for several heads a warp."""
    r = rotary_dims(d)[3] if t == 4096 else d
    q = Qkv(t, hq, hk, hv, d, gen)
    wq, wk = weights(d, gen)
    pos = positions(t, 1 << 17, gen)
    run(q, wq, wk, pos, is_neox, r)
    check(q, wq, wk, pos, is_neox, r)


@pytest.mark.parametrize("hq, hk, hv", [(32, 8, 8), (3, 5, 7), (1, 0, 1)])
@pytest.mark.parametrize("heads_per_warp", ["1", "2", "4", "8"])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "interleaved"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_heads_per_warp(d, is_neox, heads_per_warp, hq, hk, hv, gen, monkeypatch):
    """Every vector-path instance (SGL_KERNEL_QK_NORM_ROPE_HEADS forces the q/k heads a warp
    handles), with head counts that leave the last warp of a token partly idle."""
    monkeypatch.setenv("SGL_KERNEL_QK_NORM_ROPE_HEADS", heads_per_warp)
    for t in (1, 37):
        q = Qkv(t, hq, hk, hv, d, gen)
        wq, wk = weights(d, gen)
        pos = positions(t, 1 << 17, gen)
        r = rotary_dims(d)[t % 4]
        run(q, wq, wk, pos, is_neox, r)
        check(q, wq, wk, pos, is_neox, r)


@pytest.mark.parametrize("hq, hk, hv", [(0, 8, 8), (32, 0, 8), (32, 8, 0), (1, 1, 0), (3, 5, 7)])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "interleaved"])
def test_head_counts(is_neox, hq, hk, hv, gen):
    """No q heads (k only), no k heads, no v heads, odd counts."""
    for t in (1, 600):
        q = Qkv(t, hq, hk, hv, 128, gen)
        wq, wk = weights(128, gen)
        pos = positions(t, 4096, gen)
        run(q, wq, wk, pos, is_neox, 64)
        check(q, wq, wk, pos, is_neox, 64)


# ---------------------------------------------------------------------------------------
# YaRN, attention_factor, eps, large positions


def _yarn_cases():
    low, high = yarn_low_high(128, 1e6, 32768)
    return {
        "factor40": dict(factor=40.0, low=low, high=high, attention_factor=1.0),
        "factor40-mscale": dict(factor=40.0, low=low, high=high, attention_factor=1.0 + 0.1 * 3.6888794541),
        "factor4-wide": dict(factor=4.0, low=2.0, high=50.0, attention_factor=1.25),
        "low==high": dict(factor=8.0, low=20.0, high=20.0, attention_factor=1.0),
        "high-low=5e-7": dict(factor=8.0, low=0.5, high=0.5000005, attention_factor=1.0),
        "high<low": dict(factor=2.0, low=40.0, high=10.0, attention_factor=1.0),
        "factor<1": dict(factor=0.5, low=4.0, high=30.0, attention_factor=0.75),
        "factor1-ignores-low-high": dict(factor=1.0, low=7.0, high=7.0, attention_factor=1.0),
        "attention-only": dict(factor=1.0, low=0.0, high=0.0, attention_factor=0.5),
        "attention-negative": dict(factor=1.0, low=0.0, high=0.0, attention_factor=-1.5),
    }


@pytest.mark.parametrize("name", list(_yarn_cases()))
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "interleaved"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_yarn(d, is_neox, name, gen):
    """YaRN's frequency blend (both sides of the ramp, low == high, a 5e-7 gap, high < low,
    factor < 1; factor 1 ignores low / high) and attention_factor (rotated elements only)."""
    yarn = _yarn_cases()[name]
    r = d // 2 if d == 256 else d
    for t, max_pos in ((7, 4096), (300, 1 << 17)):
        q = Qkv(t, 32, 8, 8, d, gen)
        wq, wk = weights(d, gen)
        pos = positions(t, max_pos, gen)
        run(q, wq, wk, pos, is_neox, r, base=1e6, yarn=yarn)
        check(q, wq, wk, pos, is_neox, r, base=1e6, yarn=yarn)


def test_factor_one_ignores_low_high(gen):
    """factor == 1: low and high play no part (same bits as low = high = 0)."""
    q1 = Qkv(33, 8, 2, 2, 128, gen)
    q2 = Qkv(33, 8, 2, 2, 128, gen)
    q2.qkv.copy_(q1.qkv)
    wq, wk = weights(128, gen)
    pos = positions(33, 1 << 16, gen)
    run(q1, wq, wk, pos, True, yarn=NO_YARN)
    run(q2, wq, wk, pos, True, yarn=dict(factor=1.0, low=3.0, high=9.0, attention_factor=1.0))
    torch.cuda.synchronize()
    assert torch.equal(q1.qkv.view(torch.int16), q2.qkv.view(torch.int16))


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "interleaved"])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_large_positions(d, is_neox, gen):
    """Positions up to 1e5 (angles where one fp32 ulp is 0.008 rad: the reference uses the
    kernel's fp32 angle) and far beyond: 2^24 + 1 (not an fp32), 2^30, int32 max and negative
    ones (sincosf's slow path)."""
    t = 64
    q = Qkv(t, 8, 2, 2, d, gen)
    wq, wk = weights(d, gen)
    pos = positions(t, 100001, gen)
    pos[:8] = torch.tensor([100000, 99999, (1 << 24) + 1, 1 << 30, 2**31 - 1, -1, -(1 << 20), 0],
                           dtype=torch.int32, device="cuda")
    run(q, wq, wk, pos, is_neox)
    check(q, wq, wk, pos, is_neox, exact=False)


@pytest.mark.parametrize("eps", [0.0, 1e-6, 1e-2, 10.0])
def test_eps(eps, gen):
    """eps inside the root (a large eps shrinks small heads); eps = 0 on non-zero heads."""
    q = Qkv(40, 8, 2, 2, 128, gen)
    wq, wk = weights(128, gen)
    pos = positions(40, 4096, gen)
    run(q, wq, wk, pos, True, eps=eps)
    check(q, wq, wk, pos, True, eps=eps)


def test_zero_head(gen):
    """An all-zero head with eps > 0 stays zero (0 * rsqrt(eps))."""
    q = Qkv(3, 4, 2, 1, 128, gen)
    q.qkv[:, 128:256].zero_()
    q.qkv_before.copy_(q.qkv)
    q.before.copy_(q.buf)
    wq, wk = weights(128, gen)
    pos = positions(3, 4096, gen)
    run(q, wq, wk, pos, False)
    check(q, wq, wk, pos, False)
    assert bool((q.qkv[:, 128:256] == 0).all())


@pytest.mark.parametrize("base", [10000.0, 1e6, 500000.0, 2.5])
def test_bases(base, gen):
    q = Qkv(17, 16, 4, 4, 128, gen)
    wq, wk = weights(128, gen)
    pos = positions(17, 4096, gen)
    run(q, wq, wk, pos, True, base=base)
    check(q, wq, wk, pos, True, base=base)


# ---------------------------------------------------------------------------------------
# Layouts: row pitch, offset views (the element-load path), misaligned weights


@pytest.mark.parametrize("pitch_extra, offset", [(0, 0), (24, 0), (8, 0), (0, 1), (0, 2), (0, 4), (3, 0), (16, 8)])
@pytest.mark.parametrize("t", [1, 5, 2000])
@pytest.mark.parametrize("d", [64, 128, 256])
def test_layouts(d, t, pitch_extra, offset, gen):
    """A row pitch (slice of a wider tensor) and offset views: whatever breaks the lane's vector
    alignment moves the call to element loads, same results; the pitch padding is untouched
    (T = 2000: the batched instance where aligned)."""
    q = Qkv(t, 8, 2, 2, d, gen, pitch_extra=pitch_extra, offset=offset)
    wq, wk = weights(d, gen)
    pos = positions(t, 4096, gen)
    for is_neox in (True, False):
        run(q, wq, wk, pos, is_neox)
        check(q, wq, wk, pos, is_neox)
        q.qkv_before.copy_(q.qkv)
        q.before.copy_(q.buf)


@pytest.mark.parametrize("which", ["q", "k"])
def test_misaligned_weights(which, gen):
    d = 128
    q = Qkv(9, 8, 2, 2, d, gen)
    wq, wk = weights(d, gen)
    shifted = torch.empty(d + 1, dtype=BF16, device="cuda")[1:]
    shifted.copy_(wq if which == "q" else wk)
    if which == "q":
        wq = shifted
    else:
        wk = shifted
    pos = positions(9, 4096, gen)
    run(q, wq, wk, pos, True)
    check(q, wq, wk, pos, True)


def test_rotary_dim_default(gen):
    """rotary_dim None (the wrapper omits it; the op's default) is head_dim."""
    a = Qkv(11, 8, 2, 2, 256, gen)
    b = Qkv(11, 8, 2, 2, 256, gen)
    b.qkv.copy_(a.qkv)
    wq, wk = weights(256, gen)
    pos = positions(11, 4096, gen)
    c_args = (a.qkv.clone(), 8, 2, 2, 256, EPS, wq, wk, BASE, False, pos, 1.0, 0.0, 0.0, 1.0)
    run(a, wq, wk, pos, False)
    run(b, wq, wk, pos, False, rotary_dim=256)
    _op()(*c_args)  # the schema's default
    torch.cuda.synchronize()
    assert torch.equal(a.qkv.view(torch.int16), b.qkv.view(torch.int16))
    assert torch.equal(a.qkv.view(torch.int16), c_args[0].view(torch.int16))


def test_empty(gen):
    """No tokens, or no q/k heads: nothing to do, nothing touched, no error."""
    wq, wk = weights(128, gen)
    q = Qkv(0, 8, 2, 2, 128, gen)
    run(q, wq, wk, torch.empty(0, dtype=torch.int32, device="cuda"), True)
    q2 = Qkv(4, 0, 0, 3, 128, gen)
    run(q2, wq, wk, positions(4, 100, gen), True)
    torch.cuda.synchronize()
    q.check_outside()
    q2.check_outside()


def test_deterministic(gen):
    a = Qkv(1000, 32, 8, 8, 128, gen)
    b = Qkv(1000, 32, 8, 8, 128, gen)
    b.qkv.copy_(a.qkv)
    wq, wk = weights(128, gen)
    pos = positions(1000, 1 << 16, gen)
    run(a, wq, wk, pos, True)
    run(b, wq, wk, pos, True)
    torch.cuda.synchronize()
    assert torch.equal(a.qkv.view(torch.int16), b.qkv.view(torch.int16))


# ---------------------------------------------------------------------------------------
# opcheck, CUDA graphs


@pytest.mark.parametrize("rotary_dim", [None, 64])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "interleaved"])
def test_opcheck(is_neox, rotary_dim, gen):
    q = Qkv(5, 4, 2, 2, 128, gen)
    wq, wk = weights(128, gen)
    pos = positions(5, 4096, gen)
    low, high = yarn_low_high(128, 1e6, 32768)
    args = (q.qkv, 4, 2, 2, 128, EPS, wq, wk, 1e6, is_neox, pos, 4.0, low, high, 1.1)
    if rotary_dim is not None:
        args = args + (rotary_dim,)
    torch.library.opcheck(_op(), args)


@pytest.mark.parametrize("t, hq, hk, hv, d", [(1, 32, 8, 8, 128), (16, 64, 4, 4, 128), (128, 32, 8, 8, 256),
                                              (1024, 32, 8, 8, 64)])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "interleaved"])
def test_cuda_graph(is_neox, t, hq, hk, hv, d, gen):
    """Captured once, replayed with new qkv values and positions."""
    q = Qkv(t, hq, hk, hv, d, gen)
    wq, wk = weights(d, gen)
    pos = positions(t, 1 << 16, gen)
    yarn = dict(factor=4.0, low=8.0, high=40.0, attention_factor=1.1)

    def step():
        run(q, wq, wk, pos, is_neox, base=1e6, yarn=yarn)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(3):
        fresh = Qkv(t, hq, hk, hv, d, gen)
        q.buf.copy_(fresh.buf)
        q.before.copy_(fresh.buf)
        q.qkv_before.copy_(q.qkv)
        pos.copy_(positions(t, 1 << 16, gen))
        graph.replay()
        check(q, wq, wk, pos, is_neox, base=1e6, yarn=yarn)


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops: the C++ checks protect direct callers too)


def _args(**changes):
    c = dict(device="cuda")
    d = 128
    args = {
        "qkv": torch.randn(4, (8 + 2 + 2) * d, **c).to(BF16),
        "num_heads_q": 8, "num_heads_k": 2, "num_heads_v": 2, "head_dim": d, "eps": EPS,
        "q_weight": torch.ones(d, dtype=BF16, **c), "k_weight": torch.ones(d, dtype=BF16, **c),
        "base": BASE, "is_neox": True, "position_ids": torch.arange(4, dtype=torch.int32, **c),
        "factor": 1.0, "low": 0.0, "high": 0.0, "attention_factor": 1.0, "rotary_dim": None,
    }
    for key, fn in changes.items():
        args[key] = fn(args[key])
    return tuple(args.values())


def _qkv_of(heads, d, t=4):
    return lambda _: torch.randn(t, heads * d, device="cuda").to(BF16)


BAD = [
    ("head_dim-96", dict(head_dim=lambda _: 96, qkv=_qkv_of(12, 96), q_weight=lambda _: torch.ones(
        96, dtype=BF16, device="cuda"), k_weight=lambda _: torch.ones(96, dtype=BF16, device="cuda")), "head_dim"),
    ("head_dim-32", dict(head_dim=lambda _: 32, qkv=_qkv_of(12, 32)), "head_dim"),
    ("rotary-odd", dict(rotary_dim=lambda _: 63), "rotary_dim"),
    ("rotary-not-multiple", dict(rotary_dim=lambda _: 12), "rotary_dim"),  # D = 128: multiples of 8
    ("rotary-over-head-dim", dict(rotary_dim=lambda _: 136), "rotary_dim"),
    ("rotary-zero", dict(rotary_dim=lambda _: 0), "rotary_dim"),
    ("rotary-negative", dict(rotary_dim=lambda _: -8), "rotary_dim"),
    ("qkv-fp16", dict(qkv=lambda t: t.half()), "qkv"),
    ("qkv-fp32", dict(qkv=lambda t: t.float()), "qkv"),
    ("qkv-width", dict(qkv=_qkv_of(13, 128)), "qkv"),
    ("qkv-width-heads", dict(num_heads_v=lambda _: 3), "qkv"),
    ("qkv-1d", dict(qkv=lambda t: t.flatten()), "qkv"),
    ("qkv-3d", dict(qkv=lambda t: t.view(4, 12, 128)), "qkv"),
    ("qkv-cpu", dict(qkv=lambda t: t.cpu()), "qkv"),
    ("qkv-last-dim-strided", dict(qkv=lambda t: torch.randn(12 * 128, 4, device="cuda").to(BF16).t()), "qkv"),
    ("position_ids-int64", dict(position_ids=lambda p: p.long()), "position_ids"),
    ("position_ids-fp32", dict(position_ids=lambda p: p.float()), "position_ids"),
    ("position_ids-len", dict(position_ids=lambda p: torch.arange(5, dtype=torch.int32, device="cuda")),
     "position_ids"),
    ("position_ids-2d", dict(position_ids=lambda p: p.view(4, 1)), "position_ids"),
    ("q_weight-fp32", dict(q_weight=lambda w: w.float()), "q_weight"),
    ("q_weight-len", dict(q_weight=lambda w: torch.ones(64, dtype=BF16, device="cuda")), "q_weight"),
    ("k_weight-fp16", dict(k_weight=lambda w: w.half()), "k_weight"),
    ("k_weight-2d", dict(k_weight=lambda w: w.view(1, 128)), "k_weight"),
    ("k_weight-strided", dict(k_weight=lambda w: torch.ones(256, dtype=BF16, device="cuda")[::2]), "k_weight"),
]


@pytest.mark.parametrize("changes, arg", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input(changes, arg):
    args = _args(**changes)
    with raises_op_error(OP, arg):
        _op()(*args)


def test_negative_heads():
    args = list(_args())
    args[1] = -1
    with raises_op_error(OP, "num_heads_q"):
        _op()(*args)
