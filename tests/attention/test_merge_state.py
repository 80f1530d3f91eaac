# SPDX-License-Identifier: Apache-2.0
"""merge_state / merge_state_v2 (API.md 2.5) on the GPU: two partial attention states
``(v_a, s_a)``, ``(v_b, s_b)`` (``v`` ``[T, H, D]``, ``s`` ``[T, H]`` fp32 LSE; base 2 for
merge_state, natural for merge_state_v2) merged into the state over the union of their keys.

Results are compared with tests/attention/ref_merge_state.py's fp64 reference under the API 1.6
tolerances (NaN wherever the reference is NaN, infinities equal), and bit for bit where the
contract fixes the value: one empty state (LSE -inf; v2 also +inf) gives exactly the other
state's ``v`` and ``s``; two empty states give ``v = 0``, ``s = -inf``; a state whose weight
underflows to 0 likewise. Outputs given to the op are poisoned (NaN) and sit inside guard
elements that must stay untouched; the wrapper's own allocations are poisoned through the
caching allocator. Inputs whose base pointers are off 16-byte alignment (contiguous views at an
odd offset) run the kernel's one-element path.
"""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.attention.ref_merge_state import merge_state_ref
from tests.helpers import raises_op_error
from tests.tolerances import elementwise_tol

pytestmark = pytest.mark.gpu

OPS = ("merge_state", "merge_state_v2")
NATURAL = {"merge_state": False, "merge_state_v2": True}
FP16, BF16, FP32 = torch.float16, torch.bfloat16, torch.float32
DTYPES = {"merge_state": (FP16, BF16), "merge_state_v2": (FP16, BF16, FP32)}
OP_DTYPES = [(op, d) for op in OPS for d in DTYPES[op]]
OP_DTYPE_IDS = [f"{op}-{str(d).removeprefix('torch.')}" for op, d in OP_DTYPES]
INF, NAN = float("inf"), float("nan")
GUARD = -7.75  # exact in every dtype; what the guard elements around an output hold


def _wrapper(op: str):
    return getattr(sgl_kernel, op)


def _op(op: str):
    return getattr(torch.ops.sgl_kernel, op).default


def make_states(t: int, h: int, d: int, dtype, gen, offset: int = 0):
    """Two random states. ``v`` normal values; ``s`` a per-row level (|s| up to ~40) plus a
    difference between the states that is mostly within a few units, in ~5 % of the rows 0
    (equal weights) and in ~5 % of the rows +-300 (one weight underflows to 0 in fp32).
    ``offset`` > 0: each ``v`` is a contiguous view ``offset`` elements into its storage."""
    def v():
        n = t * h * d
        flat = torch.randn(n + offset, device="cuda", generator=gen).to(dtype)
        return flat[offset:].view(t, h, d)

    level = torch.randn(t, h, device="cuda", generator=gen) * 12.0
    diff = torch.randn(t, h, device="cuda", generator=gen) * 4.0
    pick = torch.rand(t, h, device="cuda", generator=gen)
    diff = torch.where(pick < 0.05, torch.zeros_like(diff), diff)
    diff = torch.where(pick > 0.95, torch.sign(diff) * 300.0, diff)
    return v(), level + diff / 2, v(), level - diff / 2


class Guarded:
    """A contiguous output of ``shape`` inside a flat buffer of GUARD elements (64 each side,
    so a 16-byte aligned start stays aligned); the output itself is poisoned with NaN."""

    def __init__(self, shape, dtype, guard: int = 64):
        n = 1
        for s in shape:
            n *= s
        self.n, self.guard = n, guard
        self.buf = torch.full((guard + n + guard,), GUARD, dtype=dtype, device="cuda")
        self.out = self.buf[guard : guard + n].view(shape)
        self.out.fill_(NAN)

    def check_guards(self) -> None:
        kept = torch.cat([self.buf[: self.guard], self.buf[self.guard + self.n :]])
        assert bool((kept == GUARD).all()), f"{int((kept != GUARD).sum())} guard elements changed"


def check(op: str, v_a, s_a, v_b, s_b, v_out, s_out) -> None:
    torch.cuda.synchronize()
    want_v, want_s = merge_state_ref(v_a, s_a, v_b, s_b, NATURAL[op])
    assert v_out.shape == v_a.shape and v_out.dtype == v_a.dtype
    assert s_out.shape == s_a.shape and s_out.dtype == FP32
    for name, got, want in (("v_merged", v_out, want_v), ("s_merged", s_out, want_s)):
        nan = torch.isnan(want)
        bad = torch.isnan(got) != nan
        assert not bool(bad.any()), (
            f"{name}: {int(bad.sum())} NaN positions differ (first at {bad.nonzero()[:3].tolist()})")
    torch.testing.assert_close(v_out.double(), want_v, equal_nan=True, **elementwise_tol(v_a.dtype))
    torch.testing.assert_close(s_out.double(), want_s, equal_nan=True, **elementwise_tol(FP32))


def run_out(op: str, v_a, s_a, v_b, s_b, v_out, s_out) -> None:
    """Through the wrapper with the outputs given: it returns them."""
    ret = _wrapper(op)(v_a, s_a, v_b, s_b, v_out, s_out)
    assert isinstance(ret, tuple) and len(ret) == 2
    assert ret[0].data_ptr() == v_out.data_ptr() and ret[1].data_ptr() == s_out.data_ptr()


def run_guarded(op: str, v_a, s_a, v_b, s_b):
    gv = Guarded(v_a.shape, v_a.dtype)
    gs = Guarded(s_a.shape, FP32)
    run_out(op, v_a, s_a, v_b, s_b, gv.out, gs.out)
    check(op, v_a, s_a, v_b, s_b, gv.out, gs.out)
    gv.check_guards()
    gs.check_guards()
    return gv.out, gs.out


# ---------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("d", [8, 64, 128, 256, 72])
@pytest.mark.parametrize("h", [1, 8, 32])
@pytest.mark.parametrize("t", [1, 7, 128, 4099])
@pytest.mark.parametrize("op, dtype", OP_DTYPES, ids=OP_DTYPE_IDS)
def test_values(op, dtype, t, h, d, gen):
    """Every head size (one vector a row up to 32 / 64; 72: nine 16-bit vectors), one head to
    32, decode to prefill token counts (T H D of 16-bit data from 8 to 33.6 M elements: the
    launcher's decode and large launch shapes)."""
    run_guarded(op, *make_states(t, h, d, dtype, gen))


@pytest.mark.parametrize("op, dtype", OP_DTYPES, ids=OP_DTYPE_IDS)
def test_wrapper_allocates(op, dtype, gen):
    """v_merged / s_merged None: the wrapper allocates ``empty_like(v_a)`` and an fp32
    ``[T, H]`` (memory the caching allocator hands out after NaN lived there) and returns them."""
    t, h, d = 37, 8, 128
    v_a, s_a, v_b, s_b = make_states(t, h, d, dtype, gen)
    poison = [torch.full_like(v_a, NAN), torch.full_like(s_a, NAN)]
    del poison
    v, s = _wrapper(op)(v_a, s_a, v_b, s_b)
    check(op, v_a, s_a, v_b, s_b, v, s)
    assert v.is_contiguous() and s.is_contiguous()
    assert v.data_ptr() not in (v_a.data_ptr(), v_b.data_ptr())


@pytest.mark.parametrize("s_dtype", [FP16, BF16], ids=str)
@pytest.mark.parametrize("op", OPS)
def test_lse_other_dtypes(op, s_dtype, gen):
    """s_a / s_b given as fp16 / bf16: the wrapper converts them with ``.to(torch.float32)``,
    so the result is the one of the fp32 values, bit for bit; s_merged is fp32."""
    t, h, d = 16, 8, 64
    v_a, s_a, v_b, s_b = make_states(t, h, d, BF16, gen)
    s_a, s_b = s_a.to(s_dtype), s_b.to(s_dtype)
    v, s = _wrapper(op)(v_a, s_a, v_b, s_b)
    v32, s32 = _wrapper(op)(v_a, s_a.float(), v_b, s_b.float())
    assert s.dtype == FP32
    check(op, v_a, s_a.float(), v_b, s_b.float(), v, s)
    assert torch.equal(v.view(torch.int16), v32.view(torch.int16)) and torch.equal(s, s32)
    # Only s_merged given (v_merged allocated), and the other way round.
    s_out = torch.full((t, h), NAN, device="cuda")
    v1, s1 = _wrapper(op)(v_a, s_a, v_b, s_b, None, s_out)
    assert s1.data_ptr() == s_out.data_ptr()
    v_out = torch.full_like(v_a, NAN)
    v2, s2 = _wrapper(op)(v_a, s_a, v_b, s_b, v_out, None)
    assert v2.data_ptr() == v_out.data_ptr()
    torch.cuda.synchronize()
    for got_v, got_s in ((v1, s1), (v2, s2)):
        assert torch.equal(got_v, v) and torch.equal(got_s, s)


# ---------------------------------------------------------------------------------------
# Empty states, far-apart states, special values


def _empty_rows_case(op, dtype, gen, empty_a, empty_b):
    """Rows 0::4 with state a empty, 1::4 with b empty, 2::4 with both, 3::4 with neither;
    ``empty_a`` / ``empty_b``: the LSE values that mean empty (v2 also +inf)."""
    t, h, d = 24, 4, 136 if dtype == FP32 else 72
    v_a, s_a, v_b, s_b = make_states(t, h, d, dtype, gen)
    s_a[0::4] = empty_a
    s_b[1::4] = empty_b
    s_a[2::4] = empty_a
    s_b[2::4] = empty_b
    v, s = run_guarded(op, v_a, s_a, v_b, s_b)
    assert torch.equal(v[0::4], v_b[0::4]), "a empty: v_merged must be v_b exactly"
    assert torch.equal(s[0::4], s_b[0::4]), "a empty: s_merged must be s_b exactly"
    assert torch.equal(v[1::4], v_a[1::4]), "b empty: v_merged must be v_a exactly"
    assert torch.equal(s[1::4], s_a[1::4]), "b empty: s_merged must be s_a exactly"
    assert bool((v[2::4] == 0).all()), "both empty: v_merged must be 0"
    assert bool((s[2::4] == -INF).all()), "both empty: s_merged must be -inf"
    assert bool(torch.isfinite(v[3::4]).all()) and bool(torch.isfinite(s[3::4]).all())


@pytest.mark.parametrize("op, dtype", OP_DTYPES, ids=OP_DTYPE_IDS)
def test_empty_states(op, dtype, gen):
    _empty_rows_case(op, dtype, gen, -INF, -INF)


@pytest.mark.parametrize("empty_a, empty_b", [(INF, INF), (INF, -INF), (-INF, INF)])
@pytest.mark.parametrize("dtype", DTYPES["merge_state_v2"], ids=str)
def test_v2_plus_inf_is_empty(dtype, empty_a, empty_b, gen):
    """merge_state_v2 reads an LSE of +inf as -inf (an empty state), in any combination."""
    _empty_rows_case("merge_state_v2", dtype, gen, empty_a, empty_b)


@pytest.mark.parametrize("misaligned", [False, True])
@pytest.mark.parametrize("op, dtype", OP_DTYPES, ids=OP_DTYPE_IDS)
def test_far_apart(op, dtype, misaligned, gen):
    """States 1000 units apart: the lower weight underflows to 0 and the higher is 1, so the
    merge is the dominant state exactly (v and s), on the vector and the one-element paths."""
    t, h, d = 9, 8, 128
    v_a, s_a, v_b, s_b = make_states(t, h, d, dtype, gen, offset=1 if misaligned else 0)
    sign = torch.where(torch.rand(t, h, device="cuda", generator=gen) < 0.5, -1.0, 1.0)
    s_b = s_a + sign * 1000.0
    v, s = run_guarded(op, v_a, s_a, v_b, s_b)
    a_wins = (sign < 0)[..., None].expand_as(v)
    assert torch.equal(v, torch.where(a_wins, v_a, v_b))
    assert torch.equal(s, torch.where(sign < 0, s_a, s_b))


@pytest.mark.parametrize("op, dtype", OP_DTYPES, ids=OP_DTYPE_IDS)
def test_special_lse(op, dtype, gen):
    """LSE values drawn from {-inf, +inf, NaN, finite} in every combination: NaN in either
    makes the whole row NaN (v and s), v2's +inf is empty, merge_state's +inf follows the
    formula (+inf - +inf: NaN); everything as the reference says."""
    t, h, d = 64, 8, 64
    v_a, s_a, v_b, s_b = make_states(t, h, d, dtype, gen)
    specials = torch.tensor([-INF, INF, NAN], device="cuda")
    for s in (s_a, s_b):
        pick = torch.randint(0, 3, (t, h), device="cuda", generator=gen)
        where = torch.rand((t, h), device="cuda", generator=gen) < 0.5
        s.copy_(torch.where(where, specials[pick], s))
    s_a[0, :] = NAN
    s_b[1, :] = NAN
    _, s = run_guarded(op, v_a, s_a, v_b, s_b)
    assert bool(torch.isnan(s[:2]).all())


@pytest.mark.parametrize("op, dtype", OP_DTYPES, ids=OP_DTYPE_IDS)
def test_special_values(op, dtype, gen):
    """NaN and infinities in v: a NaN element gives a NaN element (only there, with both states
    non-empty); inf blends as the formula says; the largest finite values do not overflow
    (the blend is a convex combination in fp32)."""
    t, h, d = 16, 4, 64
    v_a, s_a, v_b, s_b = make_states(t, h, d, dtype, gen)
    s_b = s_a + torch.randn(t, h, device="cuda", generator=gen)  # no weight underflows
    # fp32: not the largest value itself, whose blend may round past it in fp32 (a weight sum
    # of 1 + 1 ulp); a 16-bit maximum has room to spare in fp32.
    big = torch.finfo(dtype).max if dtype != FP32 else 1e38
    v_a[0, :, 3] = NAN
    v_b[1, :, 5] = INF
    v_a[2] = big
    v_b[2] = big
    v, _ = run_guarded(op, v_a, s_a, v_b, s_b)
    assert int(torch.isnan(v).sum()) == h
    assert bool(torch.isnan(v[0, :, 3]).all())
    assert bool((v[1, :, 5] == INF).all())
    assert bool(torch.isfinite(v[2]).all())


# ---------------------------------------------------------------------------------------
# Layouts and sizes


@pytest.mark.parametrize("which", ["v_a", "v_b", "v_merged", "all"])
@pytest.mark.parametrize("op, dtype", OP_DTYPES, ids=OP_DTYPE_IDS)
def test_misaligned(op, dtype, which, gen):
    """Contiguous tensors whose data starts off a 16-byte boundary (a view at an odd element
    offset, or 8 bytes in) run the kernel's one-element path with the same results."""
    t, h, d = 5, 8, 72
    v_a, s_a, v_b, s_b = make_states(t, h, d, dtype, gen)
    for offset in (1, 8 // v_a.element_size()):
        def shifted(x):
            buf = torch.empty(x.numel() + offset, dtype=x.dtype, device="cuda")
            view = buf[offset:].view(x.shape)
            view.copy_(x)
            return view

        a = shifted(v_a) if which in ("v_a", "all") else v_a
        b = shifted(v_b) if which in ("v_b", "all") else v_b
        if which in ("v_merged", "all"):
            buf = torch.full((v_a.numel() + offset,), NAN, dtype=dtype, device="cuda")
            v_out = buf[offset:].view(v_a.shape)
        else:
            v_out = torch.full_like(v_a, NAN)
        s_out = torch.full((t, h), NAN, device="cuda")
        run_out(op, a, s_a, b, s_b, v_out, s_out)
        check(op, a, s_a, b, s_b, v_out, s_out)


@pytest.mark.parametrize("op", OPS)
def test_empty(op):
    """No tokens (or no heads): nothing to do, no error, empty results of the right shapes."""
    for t, h in ((0, 8), (4, 0)):
        v_a = torch.empty(t, h, 128, dtype=BF16, device="cuda")
        s_a = torch.empty(t, h, device="cuda")
        v, s = _wrapper(op)(v_a, s_a, v_a.clone(), s_a.clone())
        assert v.shape == (t, h, 128) and s.shape == (t, h) and s.dtype == FP32
        v_out, s_out = torch.empty_like(v_a), torch.empty_like(s_a)
        run_out(op, v_a, s_a, v_a.clone(), s_a.clone(), v_out, s_out)
    torch.cuda.synchronize()


def test_offsets_past_2_31(gen):
    """More than 2^31 elements a tensor (fp16, H = 32, D = 128): element offsets past 2^31
    (and byte offsets past 2^32) are 64-bit; checked in slices against the reference."""
    h, d = 32, 128
    t = ((1 << 31) + (1 << 22)) // (h * d)
    free, _ = torch.cuda.mem_get_info()
    if free < (20 << 30):
        pytest.skip(f"needs ~20 GiB of free GPU memory, {free >> 30} GiB free")
    v_a = torch.empty((t, h, d), dtype=FP16, device="cuda").normal_(generator=gen)
    v_b = torch.empty_like(v_a).normal_(generator=gen)
    s_a = torch.randn(t, h, device="cuda", generator=gen) * 4
    s_b = torch.randn(t, h, device="cuda", generator=gen) * 4
    v = torch.empty_like(v_a).fill_(NAN)
    s = torch.full((t, h), NAN, device="cuda")
    run_out("merge_state_v2", v_a, s_a, v_b, s_b, v, s)
    step = 1 << 12  # tokens a slice (16 M elements)
    for start in (0, t // 2 - step, t - step):
        sl = slice(max(start, 0), max(start, 0) + step)
        check("merge_state_v2", v_a[sl], s_a[sl], v_b[sl], s_b[sl], v[sl], s[sl])
    assert not bool(torch.isnan(v[-1]).any())
    del v_a, v_b, v
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------
# opcheck, CUDA graphs


@pytest.mark.parametrize("op, dtype", OP_DTYPES, ids=OP_DTYPE_IDS)
def test_opcheck(op, dtype, gen):
    v_a, s_a, v_b, s_b = make_states(5, 4, 72, dtype, gen)
    v_out, s_out = torch.empty_like(v_a), torch.empty_like(s_a)
    torch.library.opcheck(_op(op), (v_a, s_a, v_b, s_b, v_out, s_out))


@pytest.mark.parametrize("t, h, d", [(1, 32, 128), (128, 32, 128), (3000, 16, 256)])
@pytest.mark.parametrize("op", OPS)
def test_cuda_graph(op, t, h, d, gen):
    """Captured once (decode and large launch shapes), replayed on new data."""
    v_a, s_a, v_b, s_b = make_states(t, h, d, BF16, gen)
    v_out, s_out = torch.empty_like(v_a), torch.empty_like(s_a)

    def step():
        run_out(op, v_a, s_a, v_b, s_b, v_out, s_out)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(3):
        for dst, src in zip((v_a, s_a, v_b, s_b), make_states(t, h, d, BF16, gen)):
            dst.copy_(src)
        v_out.fill_(NAN)
        s_out.fill_(NAN)
        graph.replay()
        check(op, v_a, s_a, v_b, s_b, v_out, s_out)


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops: the C++ checks protect direct callers too)


def _args(dtype=BF16, **changes):
    c = dict(device="cuda")
    t, h, d = 4, 8, 64
    args = {
        "v_a": torch.randn(t, h, d, **c).to(dtype),
        "s_a": torch.randn(t, h, **c),
        "v_b": torch.randn(t, h, d, **c).to(dtype),
        "s_b": torch.randn(t, h, **c),
        "v_merged": torch.empty(t, h, d, dtype=dtype, **c),
        "s_merged": torch.empty(t, h, **c),
    }
    for key, fn in changes.items():
        args[key] = fn(args[key])
    return args


def _with_d(d):
    return lambda x: torch.empty(*x.shape[:2], d, dtype=x.dtype, device=x.device)


BAD = [
    ("v_a-cpu", dict(v_a=lambda x: x.cpu()), "v_a", []),
    ("s_b-cpu", dict(s_b=lambda x: x.cpu()), "s_b", []),
    ("v_a-int32", dict(v_a=lambda x: x.to(torch.int32)), "v_a", ["dtype"]),
    ("v_b-dtype", dict(v_b=lambda x: x.half()), "v_b", ["dtype"]),
    ("v_merged-dtype", dict(v_merged=lambda x: x.half()), "v_merged", ["dtype"]),
    ("s_a-bf16", dict(s_a=lambda x: x.to(BF16)), "s_a", ["dtype"]),
    ("s_merged-fp16", dict(s_merged=lambda x: x.half()), "s_merged", ["dtype"]),
    ("v_a-2d", dict(v_a=lambda x: x.flatten(1)), "v_a", []),
    ("v_a-noncontiguous", dict(v_a=lambda x: x.transpose(0, 1).contiguous().transpose(0, 1)), "v_a",
     ["contiguous"]),
    ("v_merged-strided", dict(v_merged=lambda x: torch.empty(4, 8, 128, dtype=x.dtype, device=x.device)[..., ::2]),
     "v_merged", []),
    ("v_merged-expanded", dict(v_merged=lambda x: x[:1].expand(x.shape)), "v_merged", []),
    ("s_a-noncontiguous", dict(s_a=lambda x: torch.randn(8, 4, device="cuda").t()), "s_a", []),
    ("v_b-shape", dict(v_b=lambda x: x[:3]), "v_b", []),
    ("s_a-shape", dict(s_a=lambda x: x[:, :7]), "s_a", []),
    ("s_b-1d", dict(s_b=lambda x: x.flatten()), "s_b", []),
    ("v_merged-shape", dict(v_merged=lambda x: x[:, :7]), "v_merged", []),
    ("s_merged-shape", dict(s_merged=lambda x: x[:3]), "s_merged", []),
]
# head_dim not a multiple of 8, or over 256 (all three v tensors changed alike).
BAD_D = [("d-12", 12), ("d-260", 260), ("d-264", 264)]


@pytest.mark.parametrize("changes, arg, fragments", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
@pytest.mark.parametrize("op", OPS)
def test_bad_input(op, changes, arg, fragments):
    a = _args(**changes)
    with raises_op_error(op, arg, *fragments):
        _op(op)(*a.values())


@pytest.mark.parametrize("d", [d for _, d in BAD_D], ids=[name for name, _ in BAD_D])
@pytest.mark.parametrize("op", OPS)
def test_bad_head_dim(op, d):
    a = _args(v_a=_with_d(d), v_b=_with_d(d), v_merged=_with_d(d))
    with raises_op_error(op, "v_a"):
        _op(op)(*a.values())


def test_merge_state_refuses_fp32():
    """merge_state (base 2) takes fp16 / bf16 values only; merge_state_v2 also fp32."""
    a = _args(dtype=FP32)
    with raises_op_error("merge_state", "v_a", "dtype"):
        _op("merge_state")(*a.values())
    _op("merge_state_v2")(*a.values())
    torch.cuda.synchronize()


@pytest.mark.parametrize("which", ["s_a", "s_b"])
@pytest.mark.parametrize("op", OPS)
def test_s_merged_aliasing_refused(op, which):
    """s_merged may not share memory with s_a or s_b (every thread of a row reads them while one
    writes s_merged); v_merged may be v_a (each element is read, then written, by one thread)."""
    a = _args()
    a["s_merged"] = a[which]
    with raises_op_error(op, "s_merged", "share memory", which):
        _op(op)(*a.values())
    a = _args()
    ref_v, ref_s = a["v_a"].clone(), torch.empty_like(a["s_a"])
    _op(op)(a["v_a"], a["s_a"], a["v_b"], a["s_b"], ref_v, ref_s)
    _op(op)(a["v_a"], a["s_a"], a["v_b"], a["s_b"], a["v_a"], a["s_merged"])
    assert torch.equal(a["v_a"], ref_v) and torch.equal(a["s_merged"], ref_s)
