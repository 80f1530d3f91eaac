# SPDX-License-Identifier: Apache-2.0
"""fp8_scaled_mm and int8_scaled_mm (API.md 2.3) against the fp32 reference of ref_gemm.py
on random 8-bit data: every M class the dispatcher distinguishes (decode kernels, swap A/B, ping-pong,
cooperative), the Llama-3 / Qwen3 layer shapes, both output types, with and without bias,
strided mat_a, every forced configuration, CUDA-graph replay, opcheck, and the shape, layout
and dtype errors.

The `backend` fixture runs the shape tests twice on an sm90 GPU: with the dispatcher's own
choice (the sm90a kernels) and with SGL_KERNEL_SCALED_MM_BACKEND=sm8x, the CUTLASS 2.x kernels
that A100/L40/4090-class GPUs run (mma.sync runs on sm90 too). On other GPUs the dispatcher
already picks those, and the forced run is skipped.

Tolerance (ref_gemm.assert_scaled_mm_close), per element:
``|out - ref| <= u * |ref| + c * (|A| @ |B|) * sa * sb``, u = 2^-8 (bf16) / 2^-11 (fp16) for
the output rounding, c = 2^-9 (fp8 fast accumulation) / 2^-22 (int8, exact accumulation).
"""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.gemm.ref_gemm import (
    LLAMA3_70B_NK,
    LLAMA3_8B_NK,
    QWEN3_NK,
    abs_matmul_bound,
    assert_scaled_mm_close,
    random_fp8,
    random_int8,
    random_scales,
    scaled_mm_config_names,
    scaled_mm_ref,
)
from tests.helpers import opcheck_any_dtype, raises_op_error

pytestmark = pytest.mark.gpu

OUT_DTYPES = (torch.bfloat16, torch.float16)
MS = (1, 7, 16, 64, 128, 1024, 4096, 8192)
NK = sorted(set(LLAMA3_8B_NK + LLAMA3_70B_NK + QWEN3_NK))
# M x (N, K) up to 2^36 multiply-adds per case keeps the fp32 reference and the run short;
# the largest layers are covered at every M below that.
CASES = [(m, n, k) for m in MS for (n, k) in NK if m * n * k <= 2**36]
# Sizes off the tile grid: N a multiple of 8 only, K of 16 only, M odd.
ODD = [(1, 8, 16), (3, 24, 48), (5, 40, 4112), (33, 136, 272), (65, 264, 528), (130, 520, 1040),
       (257, 1032, 2064), (1000, 1048, 4096), (2049, 3080, 1552)]
KINDS = ("fp8", "int8")


def _cc() -> int:
    major, minor = torch.cuda.get_device_capability()
    return 10 * major + minor


def _sm90() -> bool:
    return _cc() == 90


@pytest.fixture(autouse=True)
def _need_kernels():
    if _cc() < 80:
        pytest.skip("int8_scaled_mm needs sm80+, fp8_scaled_mm sm89+")


@pytest.fixture(params=("auto", "sm8x"))
def backend(request, monkeypatch):
    if request.param == "sm8x":
        if not _sm90():
            pytest.skip("the dispatcher already runs the sm8x kernels on this GPU (the auto run)")
        monkeypatch.setenv("SGL_KERNEL_SCALED_MM_BACKEND", "sm8x")
    return request.param


def _inputs(kind, m, n, k, gen, bias_dtype=None):
    if kind == "fp8" and _cc() < 89:
        pytest.skip("fp8_scaled_mm needs fp8 tensor cores (sm89+)")
    if kind == "fp8":
        a, w = random_fp8((m, k), gen), random_fp8((n, k), gen)
    else:
        a, w = random_int8((m, k), gen), random_int8((n, k), gen)
    sa, sb = random_scales(m, gen), random_scales(n, gen)
    if kind == "int8":  # int8 codes reach +-128 (fp8 codes here stay within ~+-4): keep fp16 finite
        sa, sb = sa / 127, sb / 127
    bias = None
    if bias_dtype is not None:
        bias = (torch.randn(n, device="cuda", generator=gen) * 4).to(bias_dtype)
    return a, w.t(), sa, sb, bias


def _op(kind):
    return sgl_kernel.fp8_scaled_mm if kind == "fp8" else sgl_kernel.int8_scaled_mm


def _check(kind, a, b, sa, sb, bias, out_dtype):
    out = _op(kind)(a, b, sa, sb, out_dtype, bias)
    assert out.shape == (a.shape[0], b.shape[1]) and out.is_contiguous()
    ref = scaled_mm_ref(a, b, sa, sb, bias)
    assert_scaled_mm_close(out, ref, abs_matmul_bound(a, b, sa, sb), out_dtype, kind)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("m,n,k", CASES)
def test_layer_shapes(kind, m, n, k, gen, backend):
    # alternate the output type and the bias over the cases instead of multiplying them
    i = CASES.index((m, n, k))
    out_dtype = OUT_DTYPES[i % 2]
    bias_dtype = out_dtype if (i // 2) % 2 else None
    _check(kind, *_inputs(kind, m, n, k, gen, bias_dtype), out_dtype)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("out_dtype", OUT_DTYPES)
@pytest.mark.parametrize("with_bias", (False, True))
@pytest.mark.parametrize("m,n,k", ODD)
def test_odd_sizes(kind, out_dtype, with_bias, m, n, k, gen, backend):
    _check(kind, *_inputs(kind, m, n, k, gen, out_dtype if with_bias else None), out_dtype)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("m", (1, 16, 48, 100, 300))
def test_strided_mat_a_and_scale_shapes(kind, m, gen, backend):
    """mat_a a column slice of a wider matrix (row stride != K), scales as [X, 1]."""
    n, k = 512, 1024
    a_wide, b, sa, sb, bias = _inputs(kind, m, n, k + 256, gen, torch.bfloat16)
    a = a_wide[:, 128:128 + k]
    b = b[:k]  # b is W.t() of W [n, k + 256]: its first k rows are a column-major [k, n] view
    assert a.stride(0) == k + 256 and b.stride(0) == 1
    _check(kind, a, b, sa.reshape(m, 1), sb.reshape(n, 1), bias, torch.bfloat16)


@pytest.mark.parametrize("kind", KINDS)
def test_every_configuration(kind, gen, monkeypatch):
    """Every CUTLASS configuration, forced through the tuning variable, on shapes that give
    each one partial tiles in both directions, with and without a forced split (the cluster
    split of K of the small_m / decode kernels; the CUTLASS ones ignore it)."""
    if not _sm90():
        pytest.skip("the forced configurations are the sm90a ones")
    names = [c for c in scaled_mm_config_names() if c.startswith(kind + "_")]
    assert names, "no configurations listed"
    for name in names:
        for m, n, k, splits in ((1, 264, 4096, 0), (37, 1032, 2064, 3), (200, 520, 384, 1), (300, 4104, 4096, 0)):
            monkeypatch.setenv("SGL_KERNEL_SCALED_MM_CONFIG", name)
            monkeypatch.setenv("SGL_KERNEL_SCALED_MM_SPLITS", str(splits))
            try:
                _check(kind, *_inputs(kind, m, n, k, gen, torch.float16), torch.float16)
            except AssertionError as e:
                raise AssertionError(f"{name} m={m} n={n} k={k} splits={splits}: {e}") from None


@pytest.mark.parametrize("kind", KINDS)
def test_special_values(kind, gen, backend):
    """Zero rows/columns give exactly the bias; negative scales flip signs."""
    m, n, k = 48, 256, 512
    a, b, sa, sb, bias = _inputs(kind, m, n, k, gen, torch.bfloat16)
    a.view(torch.uint8)[5] = 0  # +0 in e4m3 and int8
    sa[7] = -sa[7]
    out = _op(kind)(a, b, sa, sb, torch.bfloat16, bias)
    assert torch.equal(out[5], bias)
    ref = scaled_mm_ref(a, b, sa, sb, bias)
    assert_scaled_mm_close(out, ref, abs_matmul_bound(a, b, sa, sb), torch.bfloat16, kind)


@pytest.mark.parametrize("kind", KINDS)
def test_empty_m(kind, gen, backend):
    a, b, sa, sb, _ = _inputs(kind, 1, 64, 128, gen)
    out = _op(kind)(a[:0], b, sa[:0], sb, torch.bfloat16)
    assert out.shape == (0, 64)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("m", (4, 200))
def test_cuda_graph(kind, m, gen, backend):
    n, k = 1024, 2048
    a, b, sa, sb, bias = _inputs(kind, m, n, k, gen, torch.bfloat16)
    op = _op(kind)
    op(a, b, sa, sb, torch.bfloat16, bias)  # warm up outside the capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = op(a, b, sa, sb, torch.bfloat16, bias)
    fresh = _inputs(kind, m, n, k, gen, torch.bfloat16)
    for dst, src in zip((a, b, sa, sb, bias), fresh):
        dst.copy_(src)
    out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    assert_scaled_mm_close(out, scaled_mm_ref(a, b, sa, sb, bias), abs_matmul_bound(a, b, sa, sb), torch.bfloat16,
                           kind)


@pytest.mark.parametrize("kind", KINDS)
def test_opcheck(kind, gen, backend):
    a, b, sa, sb, bias = _inputs(kind, 24, 128, 256, gen, torch.float16)
    op = torch.ops.sgl_kernel.fp8_scaled_mm.default if kind == "fp8" else torch.ops.sgl_kernel.int8_scaled_mm.default
    opcheck_any_dtype(op, (a, b, sa, sb, torch.float16, bias))
    opcheck_any_dtype(op, (a, b, sa, sb, torch.bfloat16, None))


@pytest.mark.parametrize("kind", KINDS)
def test_torch_compile(kind, gen):
    a, b, sa, sb, bias = _inputs(kind, 24, 128, 256, gen, torch.bfloat16)
    op = _op(kind)
    fn = torch.compile(lambda *x: op(*x, torch.bfloat16, bias) * 2, fullgraph=True)
    torch.testing.assert_close(fn(a, b, sa, sb), op(a, b, sa, sb, torch.bfloat16, bias) * 2, rtol=0, atol=0)


@pytest.mark.parametrize("kind", KINDS)
def test_bad_inputs(kind, gen):
    name = f"{kind}_scaled_mm"
    op = _op(kind)
    a, b, sa, sb, bias = _inputs(kind, 32, 64, 128, gen, torch.bfloat16)
    bf = torch.bfloat16
    with raises_op_error(name, "mat_a", "CUDA"):
        op(a.cpu(), b, sa, sb, bf)
    with raises_op_error(name, "mat_a", "dtype"):
        op(a.to(torch.float16), b, sa, sb, bf)
    with raises_op_error(name, "mat_b", "column-major"):
        op(a, b.contiguous(), sa, sb, bf)
    with raises_op_error(name, "mat_b", "mat_b.shape[0]"):
        op(a, b[:112], sa, sb, bf)
    with raises_op_error(name, "mat_a", "(K)", "multiple of 16"):
        a2, b2, *_ = _inputs(kind, 32, 64, 120, gen)
        op(a2, b2, sa, sb, bf)
    with raises_op_error(name, "mat_b", "(N)", "multiple of 8"):
        a3, b3, _, sb3, _ = _inputs(kind, 32, 60, 128, gen)
        op(a3, b3, sa, sb3, bf)
    with raises_op_error(name, "scales_a", "M = mat_a.shape[0]"):
        op(a, b, sa[:31], sb, bf)
    with raises_op_error(name, "scales_b"):
        op(a, b, sa, sb.reshape(2, 32), bf)
    with raises_op_error(name, "scales_a", "dtype"):
        op(a, b, sa.double(), sb, bf)
    with raises_op_error(name, "out_dtype"):
        op(a, b, sa, sb, torch.float32)
    with raises_op_error(name, "bias", "dtype"):
        op(a, b, sa, sb, torch.float16, bias)
    with raises_op_error(name, "bias"):
        op(a, b, sa, sb, bf, bias[:32])
    with raises_op_error(name, "mat_a", "16-byte"):
        wide = _inputs(kind, 32, 64, 136, gen)[0]
        op(wide[:, 8:], b, sa, sb, bf)


def _huge_mm_args(kind: str, m: int, n: int, k: int = 16):
    """mat_a [m, k] and mat_b [k, n] (column-major) with zero strides on M and N, scales of one
    element: large sizes without the memory (scales_a is checked after M, N and K)."""
    dtype = torch.float8_e4m3fn if kind == "fp8" else torch.int8
    a = torch.empty_strided((m, k), (0, 1), dtype=dtype, device="cuda")
    b = torch.empty_strided((k, n), (1, 0), dtype=dtype, device="cuda")
    one = torch.ones(1, device="cuda")
    return a, b, one, one


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("dim, arg", [("M", "mat_a"), ("N", "mat_b")])
def test_size_limit_messages(kind, dim, arg):
    """An M or N past INT32_MAX / 2 (CUTLASS takes the problem shape as int and rounds it up to
    whole tiles) is refused before any allocation or launch. K has no such test: mat_a's rows
    are dense (stride(1) == 1), so a K of 2^30 takes 1 GiB for mat_a and as much for mat_b."""
    name = f"{kind}_scaled_mm"
    m, n = (2**30, 8) if dim == "M" else (1, 2**30)
    with raises_op_error(name, arg, f"({dim}) must be at most {2**30 - 1}", f"got {2**30}"):
        getattr(torch.ops.sgl_kernel, name).default(*_huge_mm_args(kind, m, n), torch.bfloat16, None)


@pytest.mark.parametrize("kind", KINDS)
def test_size_limit_boundary(kind):
    """M = INT32_MAX / 2 passes the shape limit: scales_a (one element) is the next check to fail."""
    name = f"{kind}_scaled_mm"
    with raises_op_error(name, "scales_a", "M = mat_a.shape[0]"):
        getattr(torch.ops.sgl_kernel, name).default(*_huge_mm_args(kind, 2**30 - 1, 8), torch.bfloat16, None)


@pytest.mark.parametrize("kind", KINDS)
def test_sm8x_tiles_at_their_boundaries(kind, gen, monkeypatch):
    """The CUTLASS 2.x path's three tiles around the M where its heuristic switches (32, 128,
    and the 128-row tiles once they fill the SMs), with partial tiles in N and K."""
    if not _sm90():
        pytest.skip("on this GPU the auto runs of the other tests cover the sm8x tiles")
    monkeypatch.setenv("SGL_KERNEL_SCALED_MM_BACKEND", "sm8x")
    for m, n, k in ((32, 4104, 1040), (33, 1032, 4096), (128, 264, 272), (129, 8200, 528), (2000, 6152, 1552)):
        for out_dtype in OUT_DTYPES:
            try:
                _check(kind, *_inputs(kind, m, n, k, gen, out_dtype), out_dtype)
            except AssertionError as e:
                raise AssertionError(f"m={m} n={n} k={k} {out_dtype}: {e}") from None


@pytest.mark.parametrize("kind", KINDS)
def test_backend_variable(kind, gen, monkeypatch):
    """Both forced paths agree with each other, and a bad value names the variable."""
    a, b, sa, sb, bias = _inputs(kind, 64, 512, 1024, gen, torch.float16)
    outs = {}
    for value in ("sm8x",) + (("sm90",) if _sm90() else ()):
        monkeypatch.setenv("SGL_KERNEL_SCALED_MM_BACKEND", value)
        outs[value] = _op(kind)(a, b, sa, sb, torch.float16, bias)
        assert_scaled_mm_close(outs[value], scaled_mm_ref(a, b, sa, sb, bias), abs_matmul_bound(a, b, sa, sb),
                               torch.float16, kind)
    if kind == "int8" and len(outs) == 2:  # exact int32 sums and the same fp32 epilogue
        torch.testing.assert_close(outs["sm8x"], outs["sm90"], rtol=0, atol=0)
    monkeypatch.setenv("SGL_KERNEL_SCALED_MM_BACKEND", "sm70")
    with raises_op_error(f"{kind}_scaled_mm", "SGL_KERNEL_SCALED_MM_BACKEND", "sm70"):
        _op(kind)(a, b, sa, sb, torch.float16, bias)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("rows", (64, 128))
@pytest.mark.parametrize("m", (1, 5, 8, 9, 16, 17, 31, 32, 33, 63, 64))
def test_decode_kernel(kind, rows, m, gen, monkeypatch):
    """The TMA + wgmma decode kernels (64 or 128 weight rows per CTA), forced, at every token
    count class (8 / 16 / 32 / 64 and the counts either side), with N off the row groups, K off
    the 128-byte tiles, strided mat_a, cluster splits from none to 8, and bitwise-equal results
    on a second call."""
    if not _sm90():
        pytest.skip("an sm90a kernel")
    monkeypatch.setenv("SGL_KERNEL_SCALED_MM_CONFIG", f"{kind}_decode_{rows}")
    for (n, k, splits) in ((4096, 4096, 0), (72, 144, 0), (1032, 2064, 3), (8, 16, 2), (264, 4112, 8), (520, 768, 1)):
        monkeypatch.setenv("SGL_KERNEL_SCALED_MM_SPLITS", str(splits))
        out_dtype = OUT_DTYPES[(m + n) % 2]
        a_wide, b, sa, sb, bias = _inputs(kind, m, n, k + 32, gen, out_dtype if splits % 2 == 0 else None)
        a, b = a_wide[:, 16:16 + k], b[:k]
        try:
            _check(kind, a, b, sa, sb, bias, out_dtype)
            first = _op(kind)(a, b, sa, sb, out_dtype, bias)
            assert torch.equal(first, _op(kind)(a, b, sa, sb, out_dtype, bias)), "not deterministic"
        except AssertionError as e:
            raise AssertionError(f"m={m} n={n} k={k} splits={splits}: {e}") from None


@pytest.mark.parametrize("m", (1, 16, 32))
@pytest.mark.parametrize("n,k", ((8, 2**17), (64, 2**17 + 16), (4104, 2**17)))
def test_int8_decode_shapes_past_the_decode_kernels_k(m, n, k, gen, backend):
    """int8 decode shapes with K >= 2^17, which the mma.sync and TMA decode kernels refuse: the
    heuristic sends them to a CUTLASS kernel (it used to pick small_m for M <= 16, N <= 8192,
    and the call failed with "no kernel configuration implements")."""
    out_dtype = OUT_DTYPES[(m + n) % 2]
    _check("int8", *_inputs("int8", m, n, k, gen), out_dtype)
