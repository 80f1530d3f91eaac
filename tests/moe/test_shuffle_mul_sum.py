# SPDX-License-Identifier: Apache-2.0
"""apply_shuffle_mul_sum (API.md 2.4) on the GPU: ``output[i] = sum_j f[i, j] *
input[perm[i, j]]`` with ``perm`` / ``f`` the int32 permutation and the factors viewed as
``[m, topk]`` (factors None: ones); a permutation entry outside ``[0, input.shape[0])``
contributes nothing.

Every result is compared bit for bit with tests/moe/ref_shuffle_mul_sum.py's in-order fp32 sum
(the op's documented arithmetic, moe.h: fp32 products, summed in order of j without fused
multiply-add, rounded once; NaN wherever that is NaN) and, for finite data, with the fp64
reference under the API 1.6 tolerances. Outputs are poisoned (NaN) before each call and sit
inside guard elements that must stay untouched. Permutations: a random permutation of
``range(m * topk)`` (what prepare_moe_input's output_permutation is), repeats, -1 and other
out-of-range entries; inputs and outputs one element (or 4 / 8 bytes) off 16-byte alignment, so
that the kernel's 16-byte, narrower and one-element paths all run.
"""

from __future__ import annotations

import pytest
import torch

from tests.helpers import raises_op_error
from tests.moe.ref_shuffle_mul_sum import shuffle_mul_sum_inorder, shuffle_mul_sum_ref
from tests.tolerances import elementwise_tol

pytestmark = pytest.mark.gpu

OP = "apply_shuffle_mul_sum"
DTYPES = (torch.float16, torch.bfloat16)
BF16 = torch.bfloat16
NAN = float("nan")
GUARD = -7.75  # exact in both dtypes; what the guard elements around an output hold
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
FACTORS = ("none", "flat", "2d")


def _op():
    return torch.ops.sgl_kernel.apply_shuffle_mul_sum.default


def run(x: torch.Tensor, out: torch.Tensor, perm: torch.Tensor, factors) -> None:
    """Through the public wrapper (it returns None); resolved here, not at import, so that the
    file collects against a build without the op."""
    import sgl_kernel

    assert sgl_kernel.apply_shuffle_mul_sum(x, out, perm, factors) is None


def _values(shape, dtype, gen) -> torch.Tensor:
    """Random values spread over ~2^12 of magnitude (so that the order of an fp32 sum changes
    its rounding), finite in both dtypes."""
    x = torch.randn(shape, device="cuda", generator=gen)
    e = torch.randint(-6, 7, shape, device="cuda", generator=gen).float()
    return (x * torch.exp2(e)).to(dtype)


def make_factors(m: int, topk: int, dtype, gen, kind: str = "2d"):
    """Router-like weights (positive, a softmax over topk, some near 0), as ``[m * topk]``
    (flat), ``[m, topk]`` (2d) or None."""
    if kind == "none":
        return None
    w = torch.softmax(torch.randn((m, topk), device="cuda", generator=gen) * 2, dim=-1).to(dtype)
    return w.flatten() if kind == "flat" else w


def random_permutation(m: int, topk: int, gen) -> torch.Tensor:
    """A random permutation of range(m * topk), int32: prepare_moe_input's output_permutation
    (entry i = the GEMM row of flat entry i) for routing without dropped ids."""
    return torch.randperm(m * topk, device="cuda", generator=gen).to(torch.int32)


def permutation(kind: str, m: int, topk: int, rows: int, gen) -> torch.Tensor:
    """int32 ``[m * topk]`` of one kind: "perm" (a random permutation, rows == m * topk),
    "repeats" (uniform over [0, rows), rows repeat), "dropped" (a permutation with ~25 % of its
    entries replaced by -1, rows, rows + 7, INT32_MAX or INT32_MIN)."""
    n = m * topk
    if kind == "perm":
        assert rows == n
        return random_permutation(m, topk, gen)
    if kind == "repeats":
        return torch.randint(0, rows, (n,), device="cuda", generator=gen).to(torch.int32)
    assert kind == "dropped"
    p = torch.randperm(n, device="cuda", generator=gen) % max(rows, 1)
    bad = torch.tensor([-1, rows, rows + 7, INT32_MAX, INT32_MIN], device="cuda", dtype=torch.int64)
    pick = torch.randint(0, bad.numel(), (n,), device="cuda", generator=gen)
    drop = torch.rand((n,), device="cuda", generator=gen) < 0.25
    return torch.where(drop, bad[pick], p).to(torch.int32)


class GuardedOut:
    """A contiguous ``[m, k]`` output ``offset`` elements past a 16-byte boundary, inside a flat
    buffer of GUARD elements; the output itself is poisoned with NaN."""

    def __init__(self, m: int, k: int, dtype, offset: int = 0, guard: int = 64):
        start = guard + offset
        self.buf = torch.full((start + m * k + guard,), GUARD, dtype=dtype, device="cuda")
        self.out = self.buf[start : start + m * k].view(m, k)
        self.out.fill_(NAN)
        self.start, self.stop = start, start + m * k

    def check_guards(self) -> None:
        kept = torch.cat([self.buf[: self.start], self.buf[self.stop :]])
        assert bool((kept == GUARD).all()), f"{int((kept != GUARD).sum())} elements outside the output changed"


def make_input(rows: int, k: int, dtype, gen, offset: int = 0) -> torch.Tensor:
    """Contiguous ``[rows, k]`` random values, ``offset`` elements past an aligned start."""
    flat = _values((rows * k + offset,), dtype, gen)
    x = flat[offset:].view(rows, k)
    assert x.is_contiguous()
    return x


def assert_same_bits(got: torch.Tensor, want: torch.Tensor) -> None:
    """Bitwise equality, NaN wherever ``want`` is NaN (payloads are not part of the contract)."""
    assert got.shape == want.shape and got.dtype == want.dtype
    nan = torch.isnan(want)
    assert torch.equal(torch.isnan(got), nan), (
        f"{int((torch.isnan(got) != nan).sum())} NaN positions differ (a NaN where the sum is not, or not where it is)"
    )
    bad = (got.contiguous().view(torch.int16) != want.contiguous().view(torch.int16)) & ~nan
    if bool(bad.any()):
        where = bad.nonzero()[:3].tolist()
        raise AssertionError(f"{int(bad.sum())} of {got.numel()} elements differ from the in-order fp32 sum; "
                             f"first at {where}: got {got[bad][:3].tolist()}, expected {want[bad][:3].tolist()}")


def check(out: torch.Tensor, x: torch.Tensor, perm: torch.Tensor, factors) -> None:
    torch.cuda.synchronize()
    m = out.shape[0]
    assert_same_bits(out, shuffle_mul_sum_inorder(x, perm, factors, m))
    if bool(torch.isfinite(x).all()) and (factors is None or bool(torch.isfinite(factors).all())):
        torch.testing.assert_close(out.double(), shuffle_mul_sum_ref(x, perm, factors, m), **elementwise_tol(x.dtype))


def case(m: int, topk: int, k: int, dtype, gen, perm_kind: str = "perm", factor_kind: str = "2d",
         rows: int | None = None, in_offset: int = 0, out_offset: int = 0) -> None:
    """One call on fresh data: build, run, compare, check the guards."""
    rows = m * topk if rows is None else rows
    x = make_input(rows, k, dtype, gen, in_offset)
    perm = permutation(perm_kind, m, topk, rows, gen)
    f = make_factors(m, topk, dtype, gen, factor_kind)
    g = GuardedOut(m, k, dtype, out_offset)
    run(x, g.out, perm, f)
    check(g.out, x, perm, f)
    g.check_guards()


# ---------------------------------------------------------------------------------------
# Values


@pytest.mark.parametrize("m, k", [(1, 1), (2, 7), (3, 100), (5, 136), (1, 7168), (4, 4100)])
@pytest.mark.parametrize("topk", [1, 2, 3, 4, 6, 8, 9, 10, 17])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_values(dtype, topk, m, k, gen):
    """topk 1..17 (the compile-time topk of the 16-byte path and the general kernel, one group
    and three), hidden sizes from 1 up (1, 7: one element a vector; 100, 4100: 8-byte vectors)."""
    case(m, topk, k, dtype, gen, "perm", "2d")


@pytest.mark.parametrize("factor_kind", FACTORS)
@pytest.mark.parametrize("perm_kind", ["perm", "repeats", "dropped"])
@pytest.mark.parametrize("topk, k", [(8, 2048), (2, 130), (5, 7), (11, 264)])
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_permutations_and_factors(dtype, topk, k, perm_kind, factor_kind, gen):
    """Every permutation kind with factors None, ``[m * topk]`` and ``[m, topk]`` (same memory)."""
    case(9, topk, k, dtype, gen, perm_kind, factor_kind)


def test_factor_shapes_agree(gen):
    """``[m * topk]`` and ``[m, topk]`` factors are the same memory: the same bits."""
    m, topk, k = 33, 8, 512
    x = make_input(m * topk, k, BF16, gen)
    perm = random_permutation(m, topk, gen)
    f = make_factors(m, topk, BF16, gen, "2d")
    a = torch.full((m, k), NAN, dtype=BF16, device="cuda")
    b = torch.full((m, k), NAN, dtype=BF16, device="cuda")
    run(x, a, perm, f)
    run(x, b, perm, f.flatten())
    check(a, x, perm, f)
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


def test_ones_factor_is_no_factor(gen):
    """factors None is all ones: the same bits as explicit ones (1 * x is exact)."""
    m, topk, k = 17, 8, 1024
    x = make_input(m * topk, k, torch.float16, gen)
    perm = random_permutation(m, topk, gen)
    a = torch.full((m, k), NAN, dtype=torch.float16, device="cuda")
    b = torch.full((m, k), NAN, dtype=torch.float16, device="cuda")
    run(x, a, perm, None)
    run(x, b, perm, torch.ones(m * topk, dtype=torch.float16, device="cuda"))
    check(a, x, perm, None)
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


# (m, topk, K): DeepSeek-V3 (8, 7168), Qwen3-30B-A3B (8, 2048), Qwen3-235B (8, 4096), Mixtral
# (2, 4096); m = 128 / 129 at K = 2048 straddle the launcher's decode/large switch (32768 16-byte
# vectors); 9: DeepSeek-V3 with a fused shared expert.
MODEL_SHAPES = [(1, 8, 7168), (16, 8, 7168), (128, 8, 2048), (129, 8, 2048), (128, 8, 4096), (128, 2, 4096),
                (64, 9, 7168), (300, 6, 2048), (2048, 8, 7168), (16384, 8, 2048), (16384, 2, 4096)]


@pytest.mark.parametrize("m, topk, k", MODEL_SHAPES)
def test_model_shapes(m, topk, k, gen):
    case(m, topk, k, BF16, gen, "perm", "2d")


@pytest.mark.parametrize("m, topk, k", [(16, 8, 2048), (4096, 2, 4096)])
def test_model_shapes_fp16(m, topk, k, gen):
    case(m, topk, k, torch.float16, gen, "perm", "flat")


def test_fp32_sum_order(gen):
    """The products are summed in order j = 0, 1, ...: the op matches the in-order sum bit for
    bit on data where another order (reversed) rounds differently: terms of magnitude 1 and
    2^25 (2^25 + 1 rounds back to 2^25 in fp32), so cancellations keep or lose the small ones."""
    m, topk, k = 64, 8, 512
    shape = (m * topk, k)
    mant = 1 + torch.randint(0, 128, shape, device="cuda", generator=gen).float() / 128
    big = torch.rand(shape, device="cuda", generator=gen) < 0.5
    sign = torch.where(torch.rand(shape, device="cuda", generator=gen) < 0.5, -1.0, 1.0)
    x = (sign * mant * torch.where(big, 2.0**25, 1.0)).to(BF16)
    perm = random_permutation(m, topk, gen)
    f = torch.where(torch.rand((m, topk), device="cuda", generator=gen) < 0.5, 1.0, 0.5).to(BF16)
    out = torch.full((m, k), NAN, dtype=BF16, device="cuda")
    run(x, out, perm, f)
    torch.cuda.synchronize()
    # Bits only: with cancellations of 2^25 an fp64 comparison would test the data, not the op.
    assert_same_bits(out, shuffle_mul_sum_inorder(x, perm, f, m))
    reversed_sum = shuffle_mul_sum_inorder(x, perm.view(m, topk).flip(1).flatten(), f.flip(1), m)
    assert not torch.equal(out, reversed_sum), "data too tame: the order of the sum does not show"


def test_products_rounded_before_the_add(gen):
    """bf16 products below fp32's normal range round on their own (fp32 subnormals): a fused
    multiply-add would round once and differ. Tiny factors times tiny inputs, summed bit for bit."""
    m, topk, k = 32, 4, 256
    x = (torch.rand((m * topk, k), device="cuda", generator=gen) + 0.5) * 2.0**-60
    x = (x * torch.where(torch.rand_like(x) < 0.5, -1.0, 1.0)).to(BF16)
    f = ((torch.rand((m, topk), device="cuda", generator=gen) + 0.5) * 2.0**-70).to(BF16)
    perm = random_permutation(m, topk, gen)
    out = torch.full((m, k), NAN, dtype=BF16, device="cuda")
    run(x, out, perm, f)
    torch.cuda.synchronize()
    assert_same_bits(out, shuffle_mul_sum_inorder(x, perm, f, m))


# ---------------------------------------------------------------------------------------
# Dropped entries, rows, special values


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_dropped_entries_contribute_nothing(dtype, gen):
    """An entry outside [0, R) adds nothing, whatever its factor (NaN, inf) and whatever the row
    it would name holds; a token with every entry dropped gets +0; one whose only valid entry is
    -0 gets -0 (the sum starts from the first contributing term)."""
    m, topk, k = 6, 4, 264
    rows = m * topk
    x = make_input(rows, k, dtype, gen)
    perm = random_permutation(m, topk, gen).view(m, topk)
    f = make_factors(m, topk, dtype, gen, "2d").clone()
    x[perm[2, 0].long()] = -0.0  # token 2: its only valid entry is -0.0 * positive factor
    perm[0] = -1  # every entry dropped: +0
    f[0] = NAN
    perm[1, 1:] = torch.tensor([rows, INT32_MAX, INT32_MIN], dtype=torch.int32, device="cuda")
    f[1, 1:] = float("inf")
    perm[2, 1:] = -1
    f[2, 1:] = NAN
    perm[3, ::2] = -1  # half dropped
    perm, f = perm.flatten(), f.flatten()
    g = GuardedOut(m, k, dtype)
    run(x, g.out, perm, f)
    torch.cuda.synchronize()
    assert_same_bits(g.out, shuffle_mul_sum_inorder(x, perm, f, m))
    g.check_guards()
    assert bool((g.out[0] == 0).all()) and not bool(torch.signbit(g.out[0]).any())
    assert bool((g.out[2] == 0).all()) and bool(torch.signbit(g.out[2]).all())
    assert bool(torch.isfinite(g.out[1]).all())
    torch.testing.assert_close(g.out.double(), shuffle_mul_sum_ref(x, perm, f, m), **elementwise_tol(dtype))


def test_all_dropped_and_empty_input(gen):
    """Every entry dropped gives +0 everywhere; so does an input of no rows (nothing is read)."""
    m, topk, k = 5, 8, 256
    x = make_input(m * topk, k, BF16, gen)
    perm = torch.full((m * topk,), -1, dtype=torch.int32, device="cuda")
    g = GuardedOut(m, k, BF16)
    run(x, g.out, perm, make_factors(m, topk, BF16, gen, "flat"))
    torch.cuda.synchronize()
    assert bool((g.out == 0).all()) and not bool(torch.signbit(g.out).any())
    g.check_guards()
    empty = torch.empty((0, k), dtype=BF16, device="cuda")
    perm = torch.randint(-3, 3, (m * topk,), dtype=torch.int32, device="cuda", generator=gen)
    g = GuardedOut(m, k, BF16)
    run(empty, g.out, perm, None)
    torch.cuda.synchronize()
    assert bool((g.out == 0).all()) and not bool(torch.signbit(g.out).any())
    g.check_guards()


@pytest.mark.parametrize("rows", [1, 3, 1000])
def test_input_rows_other_than_m_topk(rows, gen):
    """R need not be m * topk: fewer rows (entries repeat; those >= R are dropped) or more."""
    m, topk, k = 37, 8, 136
    x = make_input(rows, k, BF16, gen)
    perm = torch.randint(-2, rows + 2, (m * topk,), dtype=torch.int32, device="cuda", generator=gen)
    f = make_factors(m, topk, BF16, gen, "2d")
    g = GuardedOut(m, k, BF16)
    run(x, g.out, perm, f)
    check(g.out, x, perm, f)
    g.check_guards()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_special_values(dtype, gen):
    """inf, -inf, NaN, signed zeros and sums past the dtype's range in the input and the
    factors, bit for bit (inf * 0 = NaN; an fp32 sum beyond the dtype's range rounds to inf)."""
    m, topk, k = 16, 4, 320
    x = make_input(m * topk, k, dtype, gen)
    big = torch.finfo(dtype).max
    specials = torch.tensor([float("inf"), -float("inf"), NAN, 0.0, -0.0, big, -big], device="cuda").to(dtype)
    pick = torch.randint(0, specials.numel(), x.shape, device="cuda", generator=gen)
    x = torch.where(torch.rand(x.shape, device="cuda", generator=gen) < 0.1, specials[pick], x)
    perm = random_permutation(m, topk, gen).view(m, topk)
    rows = perm.long()
    f = make_factors(m, topk, dtype, gen, "2d").clone()
    fpick = torch.randint(0, specials.numel(), f.shape, device="cuda", generator=gen)
    f = torch.where(torch.rand(f.shape, device="cuda", generator=gen) < 0.15, specials[fpick], f)
    x[rows[0]] = big  # token 0: overflowing sums (finite in fp32, inf in the dtype)
    f[0] = 1.0
    x[rows[1]] = -0.0  # token 1: -0 * positive factors, summed: -0
    f[1] = 0.5
    x[rows[2, 0]] = 0.0  # token 2: +0 + -0 + ... = +0
    x[rows[2, 1:]] = -0.0
    f[2] = 0.25
    x[rows[3]] = 1.0  # token 3: inf factor * 0 = NaN
    x[rows[3, 1]] = 0.0
    f[3, 1] = float("inf")
    perm, f = perm.flatten(), f.flatten()
    g = GuardedOut(m, k, dtype)
    run(x, g.out, perm, f)
    check(g.out, x, perm, f)
    g.check_guards()
    out = g.out
    assert bool(torch.isinf(out[0]).all())
    assert bool(torch.signbit(out[1]).all()) and bool((out[1] == 0).all())
    assert not bool(torch.signbit(out[2]).any()) and bool((out[2] == 0).all())
    assert bool(torch.isnan(out[3]).all())


# ---------------------------------------------------------------------------------------
# Alignment: the 16-, 8-, 4- and 2-byte paths


@pytest.mark.parametrize("out_offset", [0, 1, 4])
@pytest.mark.parametrize("in_offset", [0, 1, 2, 4])
@pytest.mark.parametrize("topk, k", [(8, 256), (3, 130), (8, 7)])
def test_alignment(topk, k, in_offset, out_offset, gen):
    """Input / output one element (2 bytes), 4 or 8 bytes off 16-byte alignment, hidden sizes
    whose rows are not 16-byte multiples: narrower vectors, the same bits."""
    case(7, topk, k, BF16, gen, "dropped", "flat", in_offset=in_offset, out_offset=out_offset)


# ---------------------------------------------------------------------------------------
# Sizes: empty calls, offsets past 4 GiB, more than 2^31 output vectors


def test_empty(gen):
    """No tokens (and an empty permutation), or no hidden elements: nothing to do, no error."""
    x = make_input(8, 64, BF16, gen)
    run(x, torch.empty((0, 64), dtype=BF16, device="cuda"), torch.empty((0,), dtype=torch.int32, device="cuda"),
        None)
    x0 = torch.empty((8, 0), dtype=BF16, device="cuda")
    perm = random_permutation(4, 2, gen)
    run(x0, torch.empty((4, 0), dtype=BF16, device="cuda"), perm, make_factors(4, 2, BF16, gen))
    torch.cuda.synchronize()


def test_row_offsets_past_4gib(gen):
    """Rows more than 4 GiB into the input (64-bit offsets): 40000 rows of 65536 bf16."""
    rows, k, m, topk = 40000, 65536, 4, 2
    free, _ = torch.cuda.mem_get_info()
    if free < (12 << 30):
        pytest.skip(f"needs ~12 GiB of free GPU memory, {free >> 30} GiB free")
    x = torch.empty((rows, k), dtype=BF16, device="cuda")
    x.normal_(generator=gen)
    perm = torch.tensor([rows - 1, 0, 32767, 32768, 39999, 20000, 35000, 1], dtype=torch.int32, device="cuda")
    f = make_factors(m, topk, BF16, gen, "2d")
    out = torch.full((m, k), NAN, dtype=BF16, device="cuda")
    run(x, out, perm, f)
    check(out, x, perm, f)
    del x
    torch.cuda.empty_cache()


def test_over_2_31_vectors(gen):
    """More than 2^31 output vectors (fp16, K = 1: one element a vector): the launcher cuts the
    call into launches of whole tokens; the second one starts at token 2^31."""
    m, rows = (1 << 31) + 4099, 1 << 20  # topk 1
    free, _ = torch.cuda.mem_get_info()
    if free < (24 << 30):
        pytest.skip(f"needs ~24 GiB of free GPU memory, {free >> 30} GiB free")
    x = make_input(rows, 1, torch.float16, gen)
    perm = torch.randint(-1, rows, (m,), dtype=torch.int32, device="cuda", generator=gen)
    out = torch.empty((m, 1), dtype=torch.float16, device="cuda")
    out.fill_(NAN)
    run(x, out, perm, None)
    torch.cuda.synchronize()
    step = 1 << 28
    for start in range(0, m, step):
        stop = min(m, start + step)
        assert_same_bits(out[start:stop], shuffle_mul_sum_inorder(x, perm[start:stop], None, stop - start))
    del out, perm
    torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------
# opcheck, CUDA graphs, determinism


@pytest.mark.parametrize("factor_kind", FACTORS)
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_opcheck(dtype, factor_kind, gen):
    m, topk, k = 5, 4, 136
    x = make_input(m * topk, k, dtype, gen)
    out = torch.empty((m, k), dtype=dtype, device="cuda")
    args = (x, out, permutation("dropped", m, topk, m * topk, gen), make_factors(m, topk, dtype, gen, factor_kind))
    torch.library.opcheck(_op(), args)


@pytest.mark.parametrize("dtype, m, topk, k", [
    (BF16, 1, 8, 7168),           # decode shape, 16-byte vectors
    (BF16, 512, 2, 4096),         # large shape
    (torch.float16, 3, 5, 7),     # one element a vector, general kernel
    (BF16, 64, 9, 2048),
])
def test_cuda_graph(dtype, m, topk, k, gen):
    """Replays read the tensors' current contents: new input, permutation and factors each time."""
    rows = m * topk
    x = make_input(rows, k, dtype, gen)
    perm = permutation("dropped", m, topk, rows, gen)
    f = make_factors(m, topk, dtype, gen, "2d")
    out = torch.full((m, k), NAN, dtype=dtype, device="cuda")

    def step():
        run(x, out, perm, f)

    step()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for kind in ("perm", "repeats", "dropped"):
        x.copy_(make_input(rows, k, dtype, gen))
        perm.copy_(permutation(kind, m, topk, rows, gen))
        f.copy_(make_factors(m, topk, dtype, gen, "2d"))
        out.fill_(NAN)
        graph.replay()
        check(out, x, perm, f)


def test_deterministic(gen):
    m, topk, k = 1000, 8, 2048
    x = make_input(m * topk, k, BF16, gen)
    perm = random_permutation(m, topk, gen)
    f = make_factors(m, topk, BF16, gen, "2d")
    a = torch.empty((m, k), dtype=BF16, device="cuda")
    b = torch.empty_like(a)
    run(x, a, perm, f)
    run(x, b, perm, f)
    torch.cuda.synchronize()
    assert torch.equal(a.view(torch.int16), b.view(torch.int16))


# ---------------------------------------------------------------------------------------
# Bad inputs (through torch.ops: the C++ checks protect direct callers too)


def _args(**changes):
    m, topk, k = 4, 2, 64
    c = dict(device="cuda")
    args = {
        "input": torch.randn(m * topk, k, **c).to(BF16),
        "output": torch.empty(m, k, dtype=BF16, **c),
        "permutation": torch.arange(m * topk, dtype=torch.int32, **c),
        "factors": torch.rand(m, topk, **c).to(BF16),
    }
    for key, fn in changes.items():
        args[key] = fn(args[key])
    return args


BAD = [
    ("input-cpu", dict(input=lambda t: t.cpu()), "input", ["CUDA tensor"]),
    ("output-cpu", dict(output=lambda t: t.cpu()), "output", ["device"]),
    ("permutation-cpu", dict(permutation=lambda t: t.cpu()), "permutation", ["device"]),
    ("factors-cpu", dict(factors=lambda t: t.cpu()), "factors", ["device"]),
    ("input-fp32", dict(input=lambda t: t.float()), "input", ["dtype"]),
    ("input-int32", dict(input=lambda t: t.to(torch.int32)), "input", ["dtype"]),
    ("output-dtype", dict(output=lambda t: t.half()), "output", ["dtype", "same as input"]),
    ("factors-dtype", dict(factors=lambda t: t.float()), "factors", ["dtype", "same as output"]),
    ("factors-fp16", dict(factors=lambda t: t.half()), "factors", ["dtype"]),
    ("factors-size", dict(factors=lambda t: t.flatten()[:-1]), "factors", ["shape"]),
    ("factors-long", dict(factors=lambda t: torch.cat([t.flatten(), t.flatten()[:1]])), "factors", ["shape"]),
    ("factors-transposed-shape", dict(factors=lambda t: t.t().contiguous()), "factors", ["shape"]),
    ("factors-3d", dict(factors=lambda t: t.view(4, 2, 1)), "factors", ["shape"]),
    ("factors-strided", dict(factors=lambda t: torch.rand(2, 4, device="cuda").to(BF16).t()), "factors",
     ["contiguous"]),
    ("permutation-int64", dict(permutation=lambda t: t.long()), "permutation", ["dtype"]),
    ("permutation-float", dict(permutation=lambda t: t.float()), "permutation", ["dtype"]),
    ("permutation-2d", dict(permutation=lambda t: t.view(4, 2)), "permutation", ["1-D"]),
    ("permutation-not-multiple", dict(permutation=lambda t: torch.arange(7, dtype=torch.int32, device="cuda")),
     "permutation", ["multiple"]),
    ("permutation-short", dict(permutation=lambda t: t[:2]), "permutation", ["multiple"]),
    ("permutation-strided", dict(permutation=lambda t: torch.arange(16, dtype=torch.int32, device="cuda")[::2]),
     "permutation", ["contiguous"]),
    ("input-1d", dict(input=lambda t: t.flatten()), "input", ["2-D"]),
    ("output-3d", dict(output=lambda t: t.view(4, 1, 64)), "output", ["2-D"]),
    ("output-hidden", dict(output=lambda t: torch.empty(4, 65, dtype=BF16, device="cuda")), "output",
     ["input.shape[1]"]),
    ("input-strided", dict(input=lambda t: torch.randn(64, 8, device="cuda").to(BF16).t()), "input",
     ["contiguous"]),
    ("input-row-pitch", dict(input=lambda t: torch.randn(8, 72, device="cuda").to(BF16)[:, :64]), "input",
     ["contiguous"]),
    ("output-strided", dict(output=lambda t: torch.empty(64, 4, dtype=BF16, device="cuda").t()), "output",
     ["contiguous"]),
]


@pytest.mark.parametrize("changes, arg, fragments", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_bad_input(changes, arg, fragments):
    a = _args(**changes)
    with raises_op_error(OP, arg, *fragments):
        _op()(a["input"], a["output"], a["permutation"], a["factors"])


@pytest.mark.parametrize("other", ["input", "permutation", "factors"])
def test_output_sharing_an_input_refused(other):
    """output may not share memory with what the op reads while it writes output: another
    token's rows, the permutation or the factors."""
    a = _args()
    out = a["output"]
    if other == "input":
        a["output"] = a["input"][: out.shape[0]]
    elif other == "permutation":
        a["permutation"] = out.view(-1).view(torch.int32)[: a["permutation"].numel()]
    else:
        a["factors"] = out.view(-1)[: a["factors"].numel()].view(a["factors"].shape)
    with raises_op_error(OP, "output", "share memory", other):
        _op()(a["input"], a["output"], a["permutation"], a["factors"])
