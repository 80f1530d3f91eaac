# SPDX-License-Identifier: Apache-2.0
"""lightning_attention_decode (API.md 2.5, legacy) on the GPU: one decode step of linear
attention with exponential decay. Per batch ``b`` and head ``h``: ``ratio = exp(-slope[h])``,
``new_kv[b, h] = ratio * past_kv[b, h] + outer(k[b, h, 0], v[b, h, 0])`` (fp32) and
``output[b, h, 0] = q[b, h, 0] @ new_kv[b, h]``, summed in fp32 and rounded once to the dtype of q.

Results are compared with the fp64 reference of tests/attention/ref_lightning_decode.py (also
used by benchmark/attention/bench_lightning_decode.py) under error bounds of the fp32 arithmetic:
``new_kv`` within 1e-6 of ``|ratio * past| + |k v|`` elementwise (a few fp32 ulps: expf's error,
the rounding of ``ratio * past`` and of the fused add), ``output`` within 1e-5 of
``sum_i |q_i| (|ratio * past_ij| + |k_i v_j|)`` (an fp32 sum of d <= 160 terms; (d + 4) 2^-24 of
it for longer rows) plus the final rounding to fp16 / bf16. Bit for bit where the kernel's arithmetic fixes the value
(attention.h / lightning_decode.cu: ``new = fmaf(k, v, ratio * past)``): slope 0 (ratio 1) gives
``past + k v`` rounded once, a slope past ~104 (ratio 0) gives ``k v`` rounded once, and equal
calls give equal bits (in place or not). Outputs are poisoned (NaN) and sit inside guard
elements that must stay untouched. Views at an odd element offset run the scalar path.
"""

from __future__ import annotations

import pytest
import torch

from tests.attention.ref_lightning_decode import BF16, FP16, FP32, check_results
from tests.helpers import raises_op_error

pytestmark = pytest.mark.gpu

OP = "lightning_attention_decode"
DTYPES = (FP32, FP16, BF16)
NAN, INF = float("nan"), float("inf")
GUARD = -7.75  # exact in every dtype; what the guard elements around an output hold
# (b, h, d, e): MiniMax decode (h = 64, d = e = 128), odd sizes, e % 4 != 0 (the scalar path),
# one element, a large batch.
SHAPES = [(1, 64, 128, 128), (3, 8, 64, 96), (2, 4, 128, 130), (1, 1, 1, 1), (5, 3, 17, 7), (64, 64, 128, 128)]
SHAPE_IDS = ["x".join(map(str, s)) for s in SHAPES]


def _op():
    return torch.ops.sgl_kernel.lightning_attention_decode.default


def run(q, k, v, past_kv, slope, output, new_kv) -> None:
    """Through the public wrapper (it returns None); resolved here, not at import, so that the
    file collects against a build without the op."""
    import sgl_kernel

    assert sgl_kernel.lightning_attention_decode(q, k, v, past_kv, slope, output, new_kv) is None


def check(q, k, v, past_kv, slope, output, new_kv) -> None:
    torch.cuda.synchronize()
    msg = check_results(q, k, v, past_kv, slope, output, new_kv)
    assert msg is None, msg


# ---------------------------------------------------------------------------------------
# Inputs and guarded outputs


def make_inputs(b, h, d, e, dtype, gen, slope=None):
    """Random ``(q, k, v, past_kv, slope)``: normal q, k, v in ``dtype``; a state whose elements
    span ~2^6 of magnitude; decay rates uniform in [0, 2) (MiniMax's lie in (0, 1)) as
    ``[h, 1, 1]`` fp32 unless given."""
    c = dict(device="cuda")
    q = torch.randn(b, h, 1, d, generator=gen, **c).to(dtype)
    k = torch.randn(b, h, 1, d, generator=gen, **c).to(dtype)
    v = torch.randn(b, h, 1, e, generator=gen, **c).to(dtype)
    scale = torch.exp2(torch.randint(-3, 4, (b, h, d, e), generator=gen, **c).float())
    past_kv = torch.randn(b, h, d, e, generator=gen, **c) * scale
    if slope is None:
        slope = torch.rand(h, 1, 1, generator=gen, **c) * 2
    return q, k, v, past_kv, slope


class Guarded:
    """A contiguous tensor of ``shape`` inside a flat buffer of GUARD elements (``guard`` each
    side; ``offset`` extra elements in front move its start off 16-byte alignment), filled with
    ``fill`` (NaN: poison, or the given tensor's values)."""

    def __init__(self, shape, dtype, guard: int = 64, offset: int = 0, fill=None):
        n = 1
        for s in shape:
            n *= s
        self.start, self.n = guard + offset, n
        self.buf = torch.full((self.start + n + guard,), GUARD, dtype=dtype, device="cuda")
        self.t = self.buf[self.start : self.start + n].view(shape)
        if fill is None:
            self.t.fill_(NAN)
        else:
            self.t.copy_(fill)

    def check_guards(self) -> None:
        kept = torch.cat([self.buf[: self.start], self.buf[self.start + self.n :]])
        changed = int((kept != GUARD).sum())
        assert changed == 0, f"{changed} guard elements changed"


def run_guarded(q, k, v, past_kv, slope):
    """The op into guarded, poisoned output and new_kv; checked; returns them."""
    b, h, d, e = past_kv.shape
    g_out = Guarded(v.shape, q.dtype)
    g_kv = Guarded((b, h, d, e), FP32)
    run(q, k, v, past_kv, slope, g_out.t, g_kv.t)
    check(q, k, v, past_kv, slope, g_out.t, g_kv.t)
    g_out.check_guards()
    g_kv.check_guards()
    return g_out.t, g_kv.t


# ---------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("shape", SHAPES, ids=SHAPE_IDS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_values(dtype, shape, gen):
    inputs = make_inputs(*shape, dtype, gen)
    past = inputs[3].clone()
    run_guarded(*inputs)
    assert torch.equal(inputs[3], past), "past_kv changed (new_kv is a separate tensor)"


@pytest.mark.parametrize("cluster", ["2", "4", "8"])
@pytest.mark.parametrize("shape", [(1, 64, 128, 128), (3, 8, 64, 96), (1, 2, 512, 256)],
                         ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", [FP32, BF16], ids=str)
def test_cluster_split(dtype, shape, cluster, gen, monkeypatch):
    """A row's kv rows split over a thread-block cluster (sm90+), the partial outputs added
    through distributed shared memory: not the default since session 47, forced here through the
    tuning variable (capped where blocks would keep fewer kv rows than row groups)."""
    monkeypatch.setenv("SGL_KERNEL_LIGHTNING_CLUSTER", cluster)
    inputs = make_inputs(*shape, dtype, gen)
    run_guarded(*inputs)


@pytest.mark.parametrize("shape", [(1, 64, 128, 128), (3, 8, 64, 96), (2, 4, 128, 130), (5, 3, 17, 7),
                                   (64, 64, 128, 128)], ids=lambda s: "x".join(map(str, s)))
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_in_place(dtype, shape, gen):
    """new_kv = past_kv (the same tensor): the state is updated where it lies, with the same
    bits as into a separate tensor."""
    q, k, v, past_kv, slope = make_inputs(*shape, dtype, gen)
    sep_out, sep_kv = run_guarded(q, k, v, past_kv, slope)
    state = Guarded(past_kv.shape, FP32, fill=past_kv)
    out = Guarded(v.shape, dtype)
    run(q, k, v, state.t, slope, out.t, state.t)
    torch.cuda.synchronize()
    state.check_guards()
    out.check_guards()
    assert torch.equal(state.t, sep_kv), "in-place new_kv differs from the separate call's"
    assert torch.equal(out.t, sep_out), "in-place output differs from the separate call's"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_slope_extremes(dtype, gen):
    """Decay rates 0 (ratio 1: new_kv = past + k v rounded once), tiny, moderate, large (ratio
    down to an fp32 subnormal) and past ~104 or +inf (ratio 0: new_kv = k v rounded once)."""
    slopes = [0.0, 1e-3, 0.5, 20.0, 90.0, 102.0, 1000.0, INF]
    b, h, d, e = 3, len(slopes), 64, 128
    slope = torch.tensor(slopes, device="cuda").reshape(h, 1, 1)
    q, k, v, past_kv, _ = make_inputs(b, h, d, e, dtype, gen, slope=slope)
    _, new_kv = run_guarded(q, k, v, past_kv, slope)
    kv64 = k.double().transpose(-1, -2) * v.double()  # exact: products of <= 24-bit significands
    one = slope.flatten() == 0
    want_one = (past_kv[:, one].double() + kv64[:, one]).float()
    assert torch.equal(new_kv[:, one], want_one), "slope 0: new_kv must be past + k v rounded once"
    zero = slope.flatten() >= 1000
    want_zero = k[:, zero].float().transpose(-1, -2) * v[:, zero].float()
    assert torch.equal(new_kv[:, zero], want_zero), "ratio 0: new_kv must be k v rounded once"


@pytest.mark.parametrize("which", ["past_kv", "new_kv", "v", "output", "all"])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_misaligned(dtype, which, gen):
    """Contiguous tensors starting one element off 16-byte alignment (e % 4 == 0): the scalar
    path, same values within the bounds."""
    b, h, d, e = 2, 8, 128, 128
    q, k, v, past_kv, slope = make_inputs(b, h, d, e, dtype, gen)
    off = {name: 1 if which in (name, "all") else 0 for name in ("past_kv", "new_kv", "v", "output")}
    past = Guarded(past_kv.shape, FP32, offset=off["past_kv"], fill=past_kv)
    vv = Guarded(v.shape, dtype, offset=off["v"], fill=v)
    out = Guarded(v.shape, dtype, offset=off["output"])
    new = Guarded(past_kv.shape, FP32, offset=off["new_kv"])
    run(q, k, vv.t, past.t, slope, out.t, new.t)
    check(q, k, v, past_kv, slope, out.t, new.t)
    for g in (past, vv, out, new):
        g.check_guards()


@pytest.mark.parametrize("b, h, d, e", [(1, 2, 3, 65536), (2, 1, 65536, 4), (1, 1, 300, 1000), (1, 3, 40, 2050),
                                        (1, 1, 2, 2052), (40, 8, 16, 13), (2, 64, 128, 128)],
                         ids=lambda x: str(x))
def test_more_shapes(b, h, d, e, gen):
    """Rows of many columns (several passes of the block over e; 2050: also the scalar path),
    many kv rows (65536 a row: many batches a thread), the scalar path over more rows than
    one wave of blocks, and MiniMax rows one block each in one wave (no cluster on an H200)."""
    run_guarded(*make_inputs(b, h, d, e, BF16, gen))


def test_empty():
    """b = 0 or h = 0: nothing to do, no error."""
    for b, h in ((0, 4), (3, 0)):
        q = torch.empty(b, h, 1, 16, dtype=BF16, device="cuda")
        v = torch.empty(b, h, 1, 32, dtype=BF16, device="cuda")
        past = torch.empty(b, h, 16, 32, device="cuda")
        slope = torch.empty(h, 1, 1, device="cuda")
        run(q, q.clone(), v, past, slope, torch.empty_like(v), torch.empty_like(past))
    torch.cuda.synchronize()


def test_deterministic(gen):
    q, k, v, past_kv, slope = make_inputs(16, 64, 128, 128, BF16, gen)
    first = (torch.empty_like(v), torch.empty_like(past_kv))
    second = (torch.full_like(v, NAN), torch.full_like(past_kv, NAN))
    run(q, k, v, past_kv, slope, *first)
    run(q, k, v, past_kv, slope, *second)
    torch.cuda.synchronize()
    assert torch.equal(first[0], second[0]) and torch.equal(first[1], second[1])


def test_offsets_past_2_31(gen):
    """More than 2^31 state elements (b = 8200, h = 16, d = e = 128: 8.6 GB a tensor): 64-bit row
    offsets; checked in slices against the reference."""
    b, h, d, e = 8200, 16, 128, 128
    free, _ = torch.cuda.mem_get_info()
    if free < (24 << 30):
        pytest.skip(f"needs ~24 GiB of free GPU memory, {free >> 30} GiB free")
    q = torch.randn(b, h, 1, d, device="cuda", generator=gen).to(BF16)
    k = torch.randn(b, h, 1, d, device="cuda", generator=gen).to(BF16)
    v = torch.randn(b, h, 1, e, device="cuda", generator=gen).to(BF16)
    past = torch.empty((b, h, d, e), device="cuda").normal_(generator=gen)
    slope = torch.rand(h, 1, 1, device="cuda", generator=gen)
    out = torch.full_like(v, NAN)
    new = torch.full_like(past, NAN)
    run(q, k, v, past, slope, out, new)
    step = 64
    for start in (0, b // 2 - step, b - step):
        sl = slice(start, start + step)
        check(q[sl], k[sl], v[sl], past[sl], slope, out[sl], new[sl])
    del past, new
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------
# opcheck, CUDA graphs


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck(dtype, gen):
    q, k, v, past_kv, slope = make_inputs(2, 4, 32, 64, dtype, gen)
    torch.library.opcheck(_op(), (q, k, v, past_kv, slope, torch.empty_like(v), torch.empty_like(past_kv)))


@pytest.mark.parametrize("b, h", [(1, 64), (2, 8), (32, 64)])
def test_cuda_graph(b, h, gen):
    """Captured once (decode shapes: a cluster per row on sm90, one wave, many waves), replayed
    on new data."""
    d = e = 128
    q, k, v, past_kv, slope = make_inputs(b, h, d, e, BF16, gen)
    out, new = torch.empty_like(v), torch.empty_like(past_kv)

    def step():
        run(q, k, v, past_kv, slope, out, new)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(3):
        for dst, src in zip((q, k, v, past_kv, slope), make_inputs(b, h, d, e, BF16, gen)):
            dst.copy_(src)
        out.fill_(NAN)
        new.fill_(NAN)
        graph.replay()
        check(q, k, v, past_kv, slope, out, new)


def test_cuda_graph_in_place(gen):
    """The decode loop: one graph updating the state in place, replayed step after step with
    new q, k, v; each step checked against the state it started from."""
    b, h, d, e = 4, 64, 128, 128
    q, k, v, state, slope = make_inputs(b, h, d, e, FP16, gen)
    out = torch.empty_like(v)

    def step():
        run(q, k, v, state, slope, out, state)

    before = state.clone()
    step()
    check(q, k, v, before, slope, out, state)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(4):
        for dst, src in zip((q, k, v), make_inputs(b, h, d, e, FP16, gen)[:3]):
            dst.copy_(src)
        before = state.clone()
        out.fill_(NAN)
        graph.replay()
        check(q, k, v, before, slope, out, state)


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops: the C++ checks protect direct callers too)


def _args(dtype=BF16, **changes):
    """Valid arguments (b, h, d, e = 2, 4, 32, 64) with ``changes`` applied (name -> fn(tensor))."""
    c = dict(device="cuda")
    b, h, d, e = 2, 4, 32, 64
    args = {
        "q": torch.randn(b, h, 1, d, **c).to(dtype),
        "k": torch.randn(b, h, 1, d, **c).to(dtype),
        "v": torch.randn(b, h, 1, e, **c).to(dtype),
        "past_kv": torch.randn(b, h, d, e, **c),
        "slope": torch.rand(h, 1, 1, **c),
        "output": torch.empty(b, h, 1, e, dtype=dtype, **c),
        "new_kv": torch.empty(b, h, d, e, **c),
    }
    for key, fn in changes.items():
        args[key] = fn(args[key])
    return args


def _swap_bh(x):
    """The same shape, not contiguous (batch and head dimensions swapped in memory)."""
    return x.transpose(0, 1).contiguous().transpose(0, 1)


BAD = [
    ("q-cpu", dict(q=lambda x: x.cpu()), "q", ["CUDA"]),
    ("past_kv-cpu", dict(past_kv=lambda x: x.cpu()), "past_kv", ["device"]),
    ("slope-cpu", dict(slope=lambda x: x.cpu()), "slope", ["device"]),
    ("q-int32", dict(q=lambda x: x.to(torch.int32)), "q", ["dtype"]),
    ("q-fp64", dict(q=lambda x: x.double()), "q", ["dtype"]),
    ("k-dtype", dict(k=lambda x: x.half()), "k", ["dtype"]),
    ("v-dtype", dict(v=lambda x: x.float()), "v", ["dtype"]),
    ("output-dtype", dict(output=lambda x: x.float()), "output", ["dtype"]),
    ("past_kv-bf16", dict(past_kv=lambda x: x.to(BF16)), "past_kv", ["dtype"]),
    ("new_kv-fp16", dict(new_kv=lambda x: x.half()), "new_kv", ["dtype"]),
    ("slope-bf16", dict(slope=lambda x: x.to(BF16)), "slope", ["dtype"]),
    ("q-3d", dict(q=lambda x: x[:, :, 0]), "q", []),
    ("q-two-steps", dict(q=lambda x: torch.cat([x, x], dim=2)), "q", []),
    ("k-shape", dict(k=lambda x: x[..., :16]), "k", []),
    ("v-batch", dict(v=lambda x: x[:1]), "v", []),
    ("output-shape", dict(output=lambda x: x[..., :32]), "output", []),
    ("past_kv-d", dict(past_kv=lambda x: x[:, :, :16]), "past_kv", []),
    ("new_kv-e", dict(new_kv=lambda x: torch.empty(*x.shape[:3], 65, device=x.device)), "new_kv", []),
    ("slope-numel", dict(slope=lambda x: torch.rand(5, 1, 1, device=x.device)), "slope", []),
    ("q-noncontiguous", dict(q=_swap_bh), "q", ["contiguous"]),
    ("output-noncontiguous", dict(output=_swap_bh), "output", ["contiguous"]),
    ("past_kv-noncontiguous", dict(past_kv=lambda x: x.transpose(-1, -2).contiguous().transpose(-1, -2)),
     "past_kv", ["contiguous"]),
    ("new_kv-noncontiguous", dict(new_kv=_swap_bh), "new_kv", ["contiguous"]),
    ("slope-strided", dict(slope=lambda x: torch.rand(8, device=x.device)[::2]), "slope", ["contiguous"]),
]


@pytest.mark.parametrize("changes, arg, fragments", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input(changes, arg, fragments):
    a = _args(**changes)
    with raises_op_error(OP, arg, *fragments):
        _op()(*a.values())


def test_all_cpu():
    a = {name: t.cpu() for name, t in _args().items()}
    with raises_op_error(OP, "q", "CUDA"):
        _op()(*a.values())


def test_new_kv_partial_overlap_refused():
    """new_kv may be past_kv itself, but not a view that shares only part of its memory (threads
    would read state that other threads have already overwritten)."""
    a = _args()
    shape, n = a["past_kv"].shape, a["past_kv"].numel()
    buf = torch.randn(2 * n, device="cuda")
    a["past_kv"] = buf[:n].view(shape)
    a["new_kv"] = buf[n // 2 : n // 2 + n].view(shape)  # contiguous, half of it inside past_kv
    with raises_op_error(OP, "new_kv", "share memory", "past_kv"):
        _op()(*a.values())


def test_output_aliasing_refused():
    a = _args()
    a["output"] = a["v"]
    with raises_op_error(OP, "output", "share memory", "v"):
        _op()(*a.values())


def test_size_limit():
    """e > 65536 is refused before any launch (the kernel's in-row offsets are 32-bit)."""
    a = _args()
    b, h = 2, 4
    a["v"] = torch.randn(b, h, 1, 65537, device="cuda").to(BF16)
    a["output"] = torch.empty_like(a["v"])
    a["q"] = a["q"][..., :1].contiguous()
    a["k"] = a["k"][..., :1].contiguous()
    a["past_kv"] = torch.randn(b, h, 1, 65537, device="cuda")
    a["new_kv"] = torch.empty_like(a["past_kv"])
    with raises_op_error(OP, "d", "65536"):
        _op()(*a.values())
