# SPDX-License-Identifier: Apache-2.0
"""fp8_blockwise_scaled_grouped_mm (API.md 2.4; contract in python/sgl_kernel/moe.py) on sm90a:
for each expert e with ``(M_e, N, K) = problem_sizes[e]`` and ``o = expert_offsets[e]``,
``output[o:o+M_e, n] = sum_kb (a[o:o+M_e, kb] . W_e[n, kb]) * scales_a[o+i, kb] * SB[e, n // 128, kb]``
with ``b = W.transpose(1, 2)`` and ``scales_b = SB.transpose(1, 2)``.

The reference is fp64, per expert, from the dequantized fp8 values: each 128-deep k-block of the
expert's rows times its ``scales_a`` entry, each 128 x 128 block of ``W_e`` times its ``SB`` entry
(fp8 times fp32 is exact in fp64, so this equals scaling each k-block's partial product). The
tolerance is the one of tests/gemm/test_blockwise_mm.py (tests/gemm/ref_gemm.py): per element
``|out - ref| <= u |ref| + BLOCKWISE_ACC_TOL * sum_kb |A_kb| |B_kb| sa sb + 1e-6``, u = half an
ulp of the output type.

The output lives inside a NaN-filled buffer with guard rows above and below (and padding columns
where its row stride exceeds N): every element no consistent expert covers (gaps between experts,
rows after the last one, empty experts, skipped entries) must still be NaN after the call.
Covered: bf16 / fp16 outputs; E from 1 to 300; N up to 4096, K up to 7168; M_e of 0, 1, 3, 17,
128, 300, 2048 and random; experts in permuted order with gaps; row-strided a / output / scales_a;
the scratch pointers the op writes; inconsistent entries (skipped; a RuntimeError with
SGL_KERNEL_DEBUG=1); small and misaligned workspaces; CUDA-graph replay with new data and new
sizes; opcheck; the binding's argument checks.
"""

from __future__ import annotations

import pytest
import torch

from tests.gemm.ref_gemm import BLOCKWISE_ACC_TOL, FP8, OUT_ROUNDING, random_fp8
from tests.helpers import opcheck_any_dtype, raises_op_error

pytestmark = pytest.mark.gpu

OP = "fp8_blockwise_scaled_grouped_mm"
DTYPES = (torch.bfloat16, torch.float16)
BF16 = torch.bfloat16
NAN = float("nan")
POISON = -12345  # what the scratch holds before a call: never a pointer or a layout entry
G = 2  # guard rows above and below the output, inside its NaN buffer
WORKSPACE_BYTES = 1 << 20
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
PTR_NAMES = ("a_ptrs", "b_ptrs", "out_ptrs", "a_scales_ptrs", "b_scales_ptrs")
M_CHOICES = (0, 1, 3, 17, 128, 300)


@pytest.fixture(autouse=True)
def _need_sm90():
    if torch.cuda.get_device_capability() != (9, 0):
        pytest.skip("fp8_blockwise_scaled_grouped_mm has sm90a kernels only")


def _op():
    # resolved at call time: the module must collect where the op is not built yet
    import sgl_kernel  # noqa: F401  (loads the library that defines torch.ops.sgl_kernel)

    return torch.ops.sgl_kernel.fp8_blockwise_scaled_grouped_mm.default


def _randint(lo: int, hi: int, n: int, gen) -> list:
    return torch.randint(lo, hi, (n,), device="cuda", generator=gen).tolist()


def _scales(shape, gen, kind: str) -> torch.Tensor:
    """Positive fp32 scales: uniform in [0.5, 1.5) or log-uniform in [1/4, 4)."""
    u = torch.rand(shape, device="cuda", generator=gen)
    return u + 0.5 if kind == "uniform" else torch.exp2(u * 4 - 2)


def draw_ms(dist: str, e: int, gen) -> list:
    """Rows per expert: "mixed" picks from M_CHOICES (each value once when E >= 6), "uniform" from
    [0, 256]. At least one expert has rows."""
    if dist == "mixed":
        ms = [M_CHOICES[i] for i in _randint(0, len(M_CHOICES), e, gen)]
        first = torch.randperm(len(M_CHOICES), device="cuda", generator=gen).tolist()[:e]
        ms[: len(first)] = [M_CHOICES[i] for i in first]
    else:
        assert dist == "uniform"
        ms = _randint(0, 257, e, gen)
    if sum(ms) == 0:
        ms[0] = 17
    return ms


def place(ms, order, gaps: bool, gen):
    """Offsets of experts stacked in ``order`` ("sorted", "reversed", "permuted" or a list of
    expert ids), 0-3 unused rows before each one when ``gaps``; returns (offsets, rows used)."""
    e = len(ms)
    if order == "sorted":
        seq = list(range(e))
    elif order == "reversed":
        seq = list(range(e - 1, -1, -1))
    elif order == "permuted":
        seq = torch.randperm(e, device="cuda", generator=gen).tolist()
    else:
        seq = list(order)
    assert sorted(seq) == list(range(e))
    skip = _randint(0, 4, e, gen) if gaps else [0] * e
    offsets, pos = [0] * e, 0
    for i, x in enumerate(seq):
        pos += skip[i]
        offsets[x] = pos
        pos += ms[x]
    return offsets, pos


def expert_ref(a_rows, sa_rows, w_e, sb_e):
    """fp64 ``(a . sa) @ (W_e . SB_e)^T`` over the dequantized blocks, and the accumulation-error
    scale ``|a . sa| @ |W_e . SB_e|^T``. a_rows [M, K] e4m3, sa_rows [M, K/128], w_e [N, K] e4m3,
    sb_e [N/128, K/128]."""
    x = a_rows.float().double() * sa_rows.double().repeat_interleave(128, dim=1)
    y = w_e.float().double() * sb_e.double().repeat_interleave(128, dim=0).repeat_interleave(128, dim=1)
    return x @ y.T, x.abs() @ y.abs().T


def assert_blockwise_close(got, ref, bound, dtype, what: str) -> None:
    assert bool(torch.isfinite(got).all()), f"{what}: {int((~torch.isfinite(got)).sum())} non-finite (unwritten?)"
    err = (got.double() - ref).abs()
    allowed = OUT_ROUNDING[dtype] * ref.abs() + BLOCKWISE_ACC_TOL * bound + 1e-6
    bad = err > allowed
    if bool(bad.any()):
        idx = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(
            f"{what}: {int(bad.sum())} of {got.numel()} elements out of tolerance (worst err/allowed "
            f"{float((err / allowed).max()):.2f}); first at {idx}: got {float(got[idx])}, "
            f"expected {float(ref[idx])}, allowed {float(allowed[idx])}"
        )


class Case:
    """The tensors of one call, on fresh random data.

    ``a`` is a ``[R, K]`` view at column ``a_col`` of a ``[R, K + a_pad]`` e4m3 tensor; ``b`` the
    transpose of a contiguous ``[E, N, K]`` weight ``w``; ``scales_b`` the transpose of a contiguous
    ``[E, N/128, K/128]`` ``sb_nk``; ``sa`` a ``[R, K/128]`` view at column ``sa_col`` of a
    ``[R, K/128 + sa_pad]`` tensor; ``out`` the ``[R, N]`` view of a NaN buffer of ``R + 2 G`` rows
    and ``N + out_pad`` columns (G guard rows on each side). The scratch starts as POISON.
    ``sizes`` / ``offsets`` are the host copies of problem_sizes / expert_offsets; ``valid`` the
    experts whose entries are consistent."""

    def __init__(self, e, n, k, ms, dtype, gen, *, order="sorted", gaps=False, tail=0, rows=None, a_pad=0,
                 a_col=0, out_pad=0, sa_pad=0, sa_col=0, sb_n_major=False, scales="log"):
        assert len(ms) == e and a_col + k <= k + a_pad and sa_col <= sa_pad
        self.e, self.n, self.k, self.kb, self.dtype, self.scale_kind = e, n, k, k // 128, dtype, scales
        offsets, used = place(ms, order, gaps, gen)
        self.rows = used + tail if rows is None else rows
        assert self.rows >= used
        self.sizes = [[m, n, k] for m in ms]
        self.offsets = offsets
        self.valid = set(range(e))
        self.a_base = random_fp8((self.rows, k + a_pad), gen)
        self.a = self.a_base[:, a_col : a_col + k]
        self.w = random_fp8((e, n, k), gen)
        self.b = self.w.transpose(1, 2)
        self.sb_nk = _scales((e, n // 128, self.kb), gen, scales)
        self.scales_b = self.sb_nk.transpose(1, 2)
        if sb_n_major:  # a contiguous [E, K/128, N/128] (the op copies it K-major; refill() does not reach it)
            self.scales_b = self.scales_b.contiguous()
        self.sa_base = _scales((self.rows, self.kb + sa_pad), gen, scales)
        self.sa = self.sa_base[:, sa_col : sa_col + self.kb]
        self.out_buf = torch.full((self.rows + 2 * G, n + out_pad), NAN, dtype=dtype, device="cuda")
        self.out = self.out_buf[G : G + self.rows, :n]
        i64 = dict(dtype=torch.int64, device="cuda")
        self.ptrs = {name: torch.full((e,), POISON, **i64) for name in PTR_NAMES}
        self.layout_sfa = torch.full((e, 5), POISON, dtype=torch.int32, device="cuda")
        self.layout_sfb = torch.full((e, 5), POISON, dtype=torch.int32, device="cuda")
        self.stride_a, self.stride_b = torch.full((e,), k, **i64), torch.full((e,), k, **i64)
        self.stride_c = torch.full((e,), n, **i64)
        self.problem_sizes = torch.empty((e, 3), dtype=torch.int32, device="cuda")
        self.expert_offsets = torch.empty((e,), dtype=torch.int32, device="cuda")
        self.workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device="cuda")
        self.upload()

    def upload(self) -> None:
        """Copy ``sizes`` / ``offsets`` into the device tensors (in place: a graph sees them)."""
        self.problem_sizes.copy_(torch.tensor(self.sizes, dtype=torch.int32))
        self.expert_offsets.copy_(torch.tensor(self.offsets, dtype=torch.int32))

    def relayout(self, ms, gen, order="permuted", gaps=True) -> None:
        """New rows per expert and offsets within the same R."""
        self.offsets, used = place(ms, order, gaps, gen)
        assert used <= self.rows
        self.sizes = [[m, self.n, self.k] for m in ms]
        self.valid = set(range(self.e))
        self.upload()

    def refill(self, gen) -> None:
        """New values in a, w, scales_a and scales_b, written into the same tensors."""
        self.a_base.copy_(random_fp8(self.a_base.shape, gen))
        self.w.copy_(random_fp8(self.w.shape, gen))
        self.sb_nk.copy_(_scales(self.sb_nk.shape, gen, self.scale_kind))
        self.sa_base.copy_(_scales(self.sa_base.shape, gen, self.scale_kind))

    def make_inconsistent(self, e: int, kind: str) -> None:
        """Spoil expert ``e``'s entry in one way the contract names; it is then skipped."""
        m, n, k = self.sizes[e]
        o = self.offsets[e]
        if kind == "m<0":
            self.sizes[e][0] = -5
        elif kind == "m=INT32_MIN":
            self.sizes[e][0] = INT32_MIN
        elif kind == "o<0":
            self.offsets[e] = -1
        elif kind == "o>R":
            self.offsets[e] = self.rows + 7
        elif kind == "o+m>R":
            self.sizes[e][0] = self.rows - o + 1  # covers every row after o, and one more
        elif kind == "m=INT32_MAX":
            self.sizes[e][0] = INT32_MAX
        elif kind == "n":
            self.sizes[e][1] = n + 128
        elif kind == "k":
            self.sizes[e][2] = k - 128 if k > 128 else k + 128
        else:
            raise AssertionError(kind)
        self.valid.discard(e)
        self.upload()

    def args(self, workspace=None) -> tuple:
        p = self.ptrs
        return (self.out, p["a_ptrs"], p["b_ptrs"], p["out_ptrs"], p["a_scales_ptrs"], p["b_scales_ptrs"], self.a,
                self.b, self.sa, self.scales_b, self.stride_a, self.stride_b, self.stride_c, self.layout_sfa,
                self.layout_sfb, self.problem_sizes, self.expert_offsets,
                self.workspace if workspace is None else workspace)

    def run(self, workspace=None) -> None:
        """Through the public wrapper (it returns None); resolved here, not at import."""
        import sgl_kernel

        assert sgl_kernel.fp8_blockwise_scaled_grouped_mm(*self.args(workspace)) is None

    def check(self) -> None:
        """Every consistent expert's rows against the fp64 reference; everything else in the
        output's buffer (uncovered rows, guard rows, padding columns) still NaN."""
        torch.cuda.synchronize()
        covered = torch.zeros(self.rows + 2 * G, dtype=torch.bool, device="cuda")
        for e in sorted(self.valid):
            m, o = self.sizes[e][0], self.offsets[e]
            if m == 0:
                continue
            ref, bound = expert_ref(self.a[o : o + m], self.sa[o : o + m], self.w[e], self.sb_nk[e])
            assert_blockwise_close(self.out[o : o + m], ref, bound, self.dtype, f"expert {e} (M {m}, first row {o})")
            covered[G + o : G + o + m] = True
        kept = torch.cat([self.out_buf[~covered].flatten(), self.out_buf[covered][:, self.n :].flatten()])
        assert bool(torch.isnan(kept).all()), (
            f"{int((~torch.isnan(kept)).sum())} output elements no consistent expert covers were written"
        )


# ---------------------------------------------------------------------------------------
# Values


SHAPES = [(1, 128, 128), (4, 256, 512), (8, 512, 1024), (16, 384, 7168), (64, 256, 256), (2, 4096, 7168),
          (4, 4096, 7168)]


def _shape_id(s) -> str:
    return "E{}-N{}-K{}".format(*s)


@pytest.mark.parametrize("dist", ["mixed", "uniform"])
@pytest.mark.parametrize("e, n, k", SHAPES, ids=[_shape_id(s) for s in SHAPES])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_values(dtype, e, n, k, dist, gen):
    """Random rows per expert, unused rows between experts and after the last one. "mixed":
    sorted order, log-uniform scales; "uniform": permuted order, scales in [0.5, 1.5)."""
    order, scales = ("sorted", "log") if dist == "mixed" else ("permuted", "uniform")
    c = Case(e, n, k, draw_ms(dist, e, gen), dtype, gen, order=order, gaps=True, tail=3, scales=scales)
    c.run()
    c.check()


EDGE_MS = [[1], [3], [17], [0, 5], [0, 0, 0, 1], [1, 3, 17, 128, 300, 0], [15, 16, 17, 31, 33, 127, 129],
           [300, 0, 0, 0, 0, 0, 0, 1]]


@pytest.mark.parametrize("gaps", [False, True])
@pytest.mark.parametrize("ms", EDGE_MS, ids=lambda ms: "-".join(map(str, ms)))
def test_edge_row_counts(ms, gaps, gen):
    """M_e of 0, 1, 3 and around multiples of 16; K = 384 (an odd number of k-blocks)."""
    dtype = DTYPES[EDGE_MS.index(ms) % 2]
    c = Case(len(ms), 256, 384, ms, dtype, gen, gaps=gaps, tail=2 if gaps else 0)
    c.run()
    c.check()


LARGE = [(2, 4096, 7168, (2048, 3)), (8, 512, 1024, (0, 2048, 1, 17, 300, 0, 128, 3))]


@pytest.mark.parametrize("e, n, k, ms", LARGE, ids=[_shape_id(s) for s in LARGE])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_large_expert(dtype, e, n, k, ms, gen):
    c = Case(e, n, k, list(ms), dtype, gen, order="permuted", gaps=True, tail=5)
    c.run()
    c.check()


def test_many_experts(gen):
    """More experts than the setup kernel has threads (256)."""
    e = 300
    c = Case(e, 128, 256, _randint(0, 9, e, gen), BF16, gen, order="permuted", gaps=True, tail=1)
    c.run()
    c.check()


ORDER_SHAPES = [(8, 256, 512), (16, 384, 7168), (64, 256, 256)]


@pytest.mark.parametrize("order", ["permuted", "reversed"])
@pytest.mark.parametrize("e, n, k", ORDER_SHAPES, ids=[_shape_id(s) for s in ORDER_SHAPES])
def test_expert_order(e, n, k, order, gen):
    """expert_offsets not increasing: the experts' row ranges in another order, with gaps."""
    c = Case(e, n, k, draw_ms("mixed", e, gen), BF16, gen, order=order, gaps=True, tail=4)
    if order == "reversed":
        nonempty = [c.offsets[x] for x in range(e) if c.sizes[x][0] > 0]
        assert len(nonempty) >= 2 and nonempty == sorted(nonempty, reverse=True)
    c.run()
    c.check()


def test_empty_experts_anywhere(gen):
    """An expert with no rows may start anywhere in [0, R]: at 0, at R, inside another expert's
    rows. It writes nothing."""
    c = Case(6, 256, 256, [50, 0, 30, 0, 0, 7], BF16, gen, gaps=True, tail=3)
    c.offsets[1] = c.offsets[0] + 10
    c.offsets[3] = 0
    c.offsets[4] = c.rows
    c.upload()
    c.run()
    c.check()


@pytest.mark.parametrize("tail", [0, 6])
def test_all_experts_empty(tail, gen):
    """Every M_e = 0: nothing is written (tail 0: an output of no rows)."""
    c = Case(4, 256, 256, [0, 0, 0, 0], BF16, gen, tail=tail)
    c.run()
    c.check()


# ---------------------------------------------------------------------------------------
# Layouts and scratch


LAYOUTS = {
    "a-row-stride": dict(a_pad=16),
    "a-column-slice": dict(a_pad=48, a_col=32),
    "out-row-stride": dict(out_pad=8),
    "out-wide": dict(out_pad=136),
    "scales_a-slice": dict(sa_pad=3, sa_col=1),
    "scales_a-padded": dict(sa_pad=4),
    "scales_b-n-major": dict(sb_n_major=True),
    "all": dict(a_pad=144, a_col=16, out_pad=24, sa_pad=5, sa_col=2),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_strided_layouts(dtype, layout, gen):
    """a with a row stride above K (a column slice of a wider tensor), output with a row stride
    above N (its padding columns must stay NaN), scales_a a column slice of a wider tensor,
    scales_b N-major in each expert (the last two are copied into packed K-major buffers)."""
    e, n, k = 6, 384, 1024
    kw = LAYOUTS[layout]
    c = Case(e, n, k, draw_ms("mixed", e, gen), dtype, gen, order="permuted", gaps=True, tail=2, **kw)
    assert c.a.stride() == (k + kw.get("a_pad", 0), 1)
    assert c.out.stride() == (n + kw.get("out_pad", 0), 1)
    assert c.sa.stride() == (k // 128 + kw.get("sa_pad", 0), 1)
    c.run()
    c.check()


def _expected_pointers(c: Case) -> dict:
    offs, es = c.offsets, range(c.e)
    return {
        "a_ptrs": [c.a.data_ptr() + o * c.a.stride(0) for o in offs],
        "b_ptrs": [c.b.data_ptr() + x * c.b.stride(0) for x in es],
        "out_ptrs": [c.out.data_ptr() + o * c.out.stride(0) * c.out.element_size() for o in offs],
        "a_scales_ptrs": [c.sa.data_ptr() + o * c.sa.stride(0) * 4 for o in offs],
        "b_scales_ptrs": [c.scales_b.data_ptr() + x * c.scales_b.stride(0) * 4 for x in es],
    }


def _check_pointers(c: Case) -> None:
    for name, want in _expected_pointers(c).items():
        got = c.ptrs[name].tolist()
        assert got == want, f"{name}: got {[hex(p) for p in got]}, expected {[hex(p) for p in want]}"
    for name, t in (("layout_sfa", c.layout_sfa), ("layout_sfb", c.layout_sfb)):
        assert bool((t != POISON).all()), f"{name} was not filled for every expert: {t.tolist()}"


@pytest.mark.parametrize("layout", ["plain", "all"])
def test_scratch_pointers(layout, gen):
    """The op fills a_ptrs[e] = a + o_e rows, b_ptrs[e] = b + e experts, out_ptrs[e] = output +
    o_e rows, a_scales_ptrs[e] = scales_a + o_e rows, b_scales_ptrs[e] = scales_b + e experts
    (byte addresses), for every consistent expert, empty ones included; and again, with the new
    offsets, on the next call. ("all" keeps scales_a packed: a scales_a in another layout is
    copied into a packed buffer first, and a_scales_ptrs then point into that copy.)"""
    kw = {key: v for key, v in LAYOUTS["all"].items() if not key.startswith("sa_")} if layout == "all" else {}
    c = Case(6, 256, 512, [5, 0, 33, 17, 1, 64], torch.float16, gen, order="permuted", gaps=True, tail=2, **kw)
    c.run()
    c.check()
    _check_pointers(c)
    c.relayout([0, 40, 3, 0, 18, 2], gen)
    for t in c.ptrs.values():
        t.fill_(POISON)
    c.out_buf.fill_(NAN)
    c.run()
    c.check()
    _check_pointers(c)


# ---------------------------------------------------------------------------------------
# Inconsistent entries


BAD_KINDS = ("m<0", "m=INT32_MIN", "o<0", "o>R", "o+m>R", "m=INT32_MAX", "n", "k")


def _inconsistent_case(gen, dtype=BF16) -> Case:
    # expert 1 owns 20 rows of its own between expert 0 and expert 2: once its entry is spoiled
    # they are covered by nobody
    return Case(6, 256, 512, [33, 20, 0, 17, 64, 5], dtype, gen, gaps=True, tail=4)


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_inconsistent_entry_skipped(kind, gen):
    """An expert with M_e < 0, o_e < 0, o_e > R, o_e + M_e > R, or N / K other than the tensors'
    writes nothing (its rows keep NaN, nothing outside the output changes); the others are right."""
    c = _inconsistent_case(gen)
    c.make_inconsistent(1, kind)
    c.run()
    c.check()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_inconsistent_entries_together(dtype, gen):
    """Several spoiled experts in one call, in permuted order; two consistent ones among them."""
    ms = [40, 20, 0, 17, 20, 3, 20, 20, 20, 9]
    c = Case(len(ms), 256, 512, ms, dtype, gen, order="permuted", gaps=True, tail=3)
    for e, kind in ((1, "m<0"), (4, "n"), (6, "k"), (7, "o<0"), (8, "o+m>R"), (2, "o>R")):
        c.make_inconsistent(e, kind)
    c.run()
    c.check()


@pytest.mark.parametrize("kind", BAD_KINDS)
def test_inconsistent_entry_raises_in_debug(kind, gen, monkeypatch):
    monkeypatch.setenv("SGL_KERNEL_DEBUG", "1")
    c = _inconsistent_case(gen)
    c.make_inconsistent(1, kind)
    with raises_op_error(OP, "problem_sizes", "inconsistent"):
        c.run()
        torch.cuda.synchronize()


def test_debug_accepts_consistent_entries(gen, monkeypatch):
    """SGL_KERNEL_DEBUG=1 raises for nothing consistent: empty experts, one starting at R,
    permuted offsets with gaps."""
    monkeypatch.setenv("SGL_KERNEL_DEBUG", "1")
    c = Case(7, 256, 512, [0, 17, 3, 0, 128, 1, 0], BF16, gen, order="permuted", gaps=True, tail=2)
    c.offsets[6] = c.rows
    c.upload()
    c.run()
    c.check()


# ---------------------------------------------------------------------------------------
# Workspace, CUDA graphs, opcheck


def test_workspace(gen):
    """A workspace too small (16 bytes, none) or misaligned (one byte into a large one) is
    replaced inside the op: the same bits as with a large aligned one."""
    c = Case(8, 512, 1024, draw_ms("mixed", 8, gen), BF16, gen, order="permuted", gaps=True, tail=3)
    big = torch.empty(WORKSPACE_BYTES + 1, dtype=torch.uint8, device="cuda")
    outs = []
    for ws in (big[:WORKSPACE_BYTES], torch.empty(16, dtype=torch.uint8, device="cuda"), big[1:],
               torch.empty(0, dtype=torch.uint8, device="cuda")):
        c.out_buf.fill_(NAN)
        c.run(workspace=ws)
        c.check()
        outs.append(c.out.clone())
    for i, o in enumerate(outs[1:], 1):
        assert torch.equal(o.view(torch.int16), outs[0].view(torch.int16)), f"workspace {i}: other bits"


def test_scale_layouts_same_bits(gen):
    """scales_a M-major (the transpose of a contiguous [K/128, R]) and scales_b N-major in each
    expert (a contiguous [E, K/128, N/128]) are copied into the packed layouts: the same bits
    as the packed call."""
    c = Case(6, 384, 1024, draw_ms("mixed", 6, gen), BF16, gen, order="permuted", gaps=True, tail=2)
    c.run()
    c.check()
    want = c.out.clone()
    c.sa = c.sa.t().contiguous().t()
    c.scales_b = c.scales_b.contiguous()
    assert c.sa.stride(0) == 1 and c.scales_b.stride(2) == 1
    c.out_buf.fill_(NAN)
    c.run()
    c.check()
    assert torch.equal(c.out.view(torch.int16), want.view(torch.int16)), "other bits with copied scales"


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_cuda_graph(dtype, gen):
    """One captured call; replays read the tensors' current contents: new a, b, scales, and new
    problem sizes and offsets (in permuted order) each time."""
    e, n, k, rows = 8, 512, 1024, 900
    c = Case(e, n, k, _randint(0, 101, e, gen), dtype, gen, gaps=True, rows=rows)
    c.run()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        c.run()
    for _ in range(3):
        c.relayout(_randint(0, 101, e, gen), gen)
        c.refill(gen)
        c.out_buf.fill_(NAN)
        graph.replay()
        c.check()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck(dtype, gen):
    c = Case(3, 256, 256, [5, 0, 17], dtype, gen, gaps=True, tail=2)
    args = list(c.args())
    args[0] = torch.full_like(c.out, NAN)  # a tensor of its own rather than a view into the guard buffer
    opcheck_any_dtype(_op(), tuple(args))


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops: the C++ checks protect direct callers too)


ARG_NAMES = ("output", "a_ptrs", "b_ptrs", "out_ptrs", "a_scales_ptrs", "b_scales_ptrs", "a", "b", "scales_a",
             "scales_b", "stride_a", "stride_b", "stride_c", "layout_sfa", "layout_sfb", "problem_sizes",
             "expert_offsets", "workspace")


def _args(n: int = 256, k: int = 256, **changes) -> dict:
    e, rows = 2, 32
    c = dict(device="cuda")
    i64 = dict(dtype=torch.int64, **c)
    args = {
        "output": torch.empty(rows, n, dtype=BF16, **c),
        **{name: torch.empty(e, **i64) for name in PTR_NAMES},
        "a": torch.randn(rows, k, **c).to(FP8),
        "b": torch.randn(e, n, k, **c).to(FP8).transpose(1, 2),
        "scales_a": torch.ones(rows, k // 128, **c),
        "scales_b": torch.ones(e, n // 128, k // 128, **c).transpose(1, 2),
        "stride_a": torch.full((e,), k, **i64),
        "stride_b": torch.full((e,), k, **i64),
        "stride_c": torch.full((e,), n, **i64),
        "layout_sfa": torch.empty(e, 5, dtype=torch.int32, **c),
        "layout_sfb": torch.empty(e, 5, dtype=torch.int32, **c),
        "problem_sizes": torch.tensor([[16, n, k], [16, n, k]], dtype=torch.int32, **c),
        "expert_offsets": torch.tensor([0, 16], dtype=torch.int32, **c),
        "workspace": torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, **c),
    }
    for key, fn in changes.items():
        args[key] = fn(args[key])
    return args


def _call(args: dict) -> None:
    _op()(*(args[name] for name in ARG_NAMES))


def _misaligned_a(t):
    flat = torch.empty(t.numel() + 16, dtype=FP8, device="cuda")
    return flat[1 : 1 + t.numel()].view(t.shape)


def _cuda(shape, dtype=torch.float32):
    return torch.ones(shape, device="cuda").to(dtype)


# (id, _args keywords, arg the message names first, fragments of its first line)
BAD = [
    ("a-cpu", dict(a=lambda t: t.cpu()), "a", ["CUDA tensor"]),
    ("b-cpu", dict(b=lambda t: t.cpu()), "b", ["device"]),
    ("output-cpu", dict(output=lambda t: t.cpu()), "output", ["device"]),
    ("scales_b-cpu", dict(scales_b=lambda t: t.cpu()), "scales_b", ["device"]),
    ("problem_sizes-cpu", dict(problem_sizes=lambda t: t.cpu()), "problem_sizes", ["device"]),
    ("expert_offsets-cpu", dict(expert_offsets=lambda t: t.cpu()), "expert_offsets", ["device"]),
    ("workspace-cpu", dict(workspace=lambda t: t.cpu()), "workspace", ["device"]),
    ("a-int8", dict(a=lambda t: t.view(torch.int8)), "a", ["dtype"]),
    ("a-bf16", dict(a=lambda t: t.to(BF16)), "a", ["dtype"]),
    ("b-e5m2", dict(b=lambda t: t.view(torch.float8_e5m2)), "b", ["dtype"]),
    ("k-not-128", dict(k=192), "a", ["(K)", "multiple of 128"]),
    ("n-not-128", dict(n=192), "b", ["(N)", "multiple of 128"]),
    ("b-row-major", dict(b=lambda t: t.contiguous()), "b", ["column-major"]),
    ("b-k-mismatch", dict(b=lambda t: torch.randn(2, 256, 384, device="cuda").to(FP8).transpose(1, 2)), "b",
     ["shape"]),
    ("a-misaligned", dict(a=_misaligned_a), "a", ["16-byte aligned"]),
    ("a-row-stride", dict(a=lambda t: torch.randn(32, 264, device="cuda").to(FP8)[:, :256]), "a",
     ["multiple of 16"]),
    ("a-rows-overlap", dict(a=lambda t: torch.randn(33, 128, device="cuda").to(FP8).view(-1)[: 32 * 128 + 128]
                            .as_strided((32, 256), (128, 1))), "a", ["stride >= K"]),
    ("output-fp32", dict(output=lambda t: t.float()), "output", ["dtype"]),
    ("output-rows", dict(output=lambda t: torch.empty(33, 256, dtype=BF16, device="cuda")), "output", ["shape"]),
    ("output-row-stride", dict(output=lambda t: torch.empty(32, 260, dtype=BF16, device="cuda")[:, :256]), "output",
     ["multiple of 8"]),
    ("scales_a-shape", dict(scales_a=lambda t: _cuda((32, 3))), "scales_a", ["shape"]),
    ("scales_a-fp64", dict(scales_a=lambda t: t.double()), "scales_a", ["dtype"]),
    ("scales_b-shape", dict(scales_b=lambda t: _cuda((2, 3, 2)).transpose(1, 2)), "scales_b", ["shape"]),
    ("scales_b-experts", dict(scales_b=lambda t: _cuda((3, 2, 2)).transpose(1, 2)), "scales_b", ["shape"]),
    ("problem_sizes-e-by-4", dict(problem_sizes=lambda t: _cuda((2, 4), torch.int32)), "problem_sizes", ["3 E"]),
    ("problem_sizes-flat", dict(problem_sizes=lambda t: t.view(-1)), "problem_sizes", ["[E, 3]"]),
    ("problem_sizes-3-by-2", dict(problem_sizes=lambda t: t.view(3, 2)), "problem_sizes", ["[E, 3]"]),
    ("problem_sizes-int64", dict(problem_sizes=lambda t: t.long()), "problem_sizes", ["dtype"]),
    ("expert_offsets-size", dict(expert_offsets=lambda t: _cuda(3, torch.int32)), "expert_offsets", ["E = 2"]),
    ("expert_offsets-int64", dict(expert_offsets=lambda t: t.long()), "expert_offsets", ["dtype"]),
    ("stride_c-int32", dict(stride_c=lambda t: t.int()), "stride_c", ["dtype"]),
    ("stride_a-size", dict(stride_a=lambda t: t[:1]), "stride_a", ["E = 2"]),
    ("a_ptrs-size", dict(a_ptrs=lambda t: _cuda(3, torch.int64)), "a_ptrs", ["E = 2"]),
    ("b_scales_ptrs-int32", dict(b_scales_ptrs=lambda t: t.int()), "b_scales_ptrs", ["dtype"]),
    ("out_ptrs-strided", dict(out_ptrs=lambda t: _cuda(4, torch.int64)[::2]), "out_ptrs", ["contiguous"]),
    ("layout_sfa-numel", dict(layout_sfa=lambda t: _cuda((2, 4), torch.int32)), "layout_sfa", ["5 E"]),
    ("layout_sfb-int64", dict(layout_sfb=lambda t: t.long()), "layout_sfb", ["dtype"]),
    ("workspace-int32", dict(workspace=lambda t: t.view(torch.int32)), "workspace", ["dtype"]),
]


@pytest.mark.parametrize("kw, arg, fragments", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input(kw, arg, fragments):
    with raises_op_error(OP, arg, *fragments):
        _call(_args(**kw))


def test_all_on_cpu_refused():
    a = {name: t.cpu() for name, t in _args().items()}
    with raises_op_error(OP, "a", "CUDA tensor"):
        _call(a)


@pytest.mark.parametrize("other", ["a", "scales_a", "scales_b"])
def test_output_sharing_an_input_refused(other):
    """output may not share memory with what the op reads: here views of output's own memory
    with the dtype and shape of a ([32, 256] e4m3 = output's bytes at N = 128), scales_a or
    scales_b."""
    args = _args(n=128, k=256)
    out = args["output"]
    if other == "a":
        args["a"] = out.view(FP8)
    elif other == "scales_a":
        # dense (a strided view of output's memory is copied before the kernel reads it)
        args["scales_a"] = out.view(-1).view(torch.float32)[:64].view(32, 2)
    else:
        args["scales_b"] = out.view(-1).view(torch.float32)[:4].view(2, 1, 2).transpose(1, 2)
    assert args[other].shape == _args(n=128, k=256)[other].shape
    with raises_op_error(OP, "output", "share memory", other):
        _call(args)
