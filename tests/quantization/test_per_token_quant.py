# SPDX-License-Identifier: Apache-2.0
"""sgl_per_token_quant_fp8, sgl_per_token_quant_int8 and sgl_per_tensor_quant_fp8 (API.md 2.2)
against the exact references of ref_quant.py: scales bit for bit, codes value for value.

Outputs are poisoned before each call (fp8 codes 0x7F = NaN; int8 codes -128, which the
round-half-even int8 op never produces since |x / s| <= 127; scales NaN), so an unwritten
element fails the comparison.
"""

from __future__ import annotations

import importlib

import pytest
import torch

import sgl_kernel
from tests.helpers import one_row_view, opcheck_any_dtype, raises_op_error
from tests.quantization.ref_quant import (
    FP8,
    FP8_MAX,
    assert_codes_equal,
    assert_scales_equal,
    fp8_code_bytes,
    ieee_div,
    per_tensor_quant_fp8_ref,
    per_token_quant_fp8_ref,
    per_token_quant_int8_ref,
)

pytestmark = pytest.mark.gpu

PER_TOKEN_OPS = ("sgl_per_token_quant_fp8", "sgl_per_token_quant_int8")
PER_TENSOR = "sgl_per_tensor_quant_fp8"
DTYPES = (torch.float16, torch.bfloat16, torch.float32)
NAN = float("nan")
INF = float("inf")

TOKENS = (1, 7, 128, 4096, 16384)
HIDDENS = (128, 1536, 4096, 7168, 16384)
R_SHAPES = [(t, h) for t in (1, 7, 4096) for h in (128, 1536, 7168)]
# fp8 op: K % 4 == 0. 100 and 4100 are not multiples of 8 / 16 (the scalar path for 16-bit
# inputs); 40000 is a multiple of 16 but longer than one register-resident row; 300 rows:
# past 256, the scalar kernel's 256-thread cap; more than 1024 rows of at most 128: a warp a
# row, 8 rows a block (2053 rows: the last block has 3 spare warps).
FP8_ODD_SHAPES = [(1, 4), (5, 12), (7, 100), (33, 4100), (3, 40000), (300, 100), (2053, 100), (1500, 4)]
# int8 op: K % 8 == 0 (API.md), so the odd sizes are multiples of 8 but not of 16.
INT8_ODD_SHAPES = [(1, 8), (5, 24), (7, 104), (33, 4104), (3, 40000), (300, 104), (2053, 104), (1500, 8)]
# row_quant.cu's cluster kernel (sm90+: 8 blocks a row, up to 12 rows of 2048 16-byte vectors
# or 16 rows of 2049-4096; bf16 H=16384-32768, fp32 8192-16384): one and two vectors a
# thread, the row counts on either side of both limits, and rows just past the lengths (4097
# vectors; a length that is no multiple of the vector).
CLUSTER_SHAPES = [(1, 16384), (12, 16384), (13, 16384), (3, 24576), (16, 32768), (17, 32768), (2, 32776), (1, 16392)]

POISON_FP8 = 0x7F
POISON_INT8 = -128


def _op(name: str):
    return getattr(torch.ops.sgl_kernel, name).default


def _dt(d) -> str:
    return str(d).replace("torch.", "")


def _shape_ids(shapes):
    return ["x".join(map(str, s)) for s in shapes]


def _rand(shape, dtype, gen, lo: float = -2.0, hi: float = 2.0) -> torch.Tensor:
    """``randn`` times a random magnitude ``10**U(lo, hi)`` per row, so that scales vary."""
    x = torch.randn(shape, dtype=torch.float32, device="cuda", generator=gen)
    mag = torch.empty((*shape[:-1], 1), device="cuda").uniform_(lo, hi, generator=gen)
    return (x * torch.pow(10.0, mag)).to(dtype)


def _out_dtype(op: str) -> torch.dtype:
    return FP8 if op == "sgl_per_token_quant_fp8" else torch.int8


def _poisoned_q(shape, out_dtype) -> torch.Tensor:
    q = torch.empty(shape, dtype=out_dtype, device="cuda")
    q.view(torch.uint8).fill_(POISON_FP8 if out_dtype == FP8 else POISON_INT8 & 0xFF)
    return q


def _poisoned_s(m: int, s_shape: str) -> torch.Tensor:
    return torch.full((m, 1) if s_shape == "m1" else (m,), NAN, dtype=torch.float32, device="cuda")


def _ref_token(op: str, x: torch.Tensor):
    return per_token_quant_fp8_ref(x) if op == "sgl_per_token_quant_fp8" else per_token_quant_int8_ref(x)


def _run_token(op: str, x: torch.Tensor, s_shape: str = "m", how: str = "wrapper"):
    q = _poisoned_q(x.shape, _out_dtype(op))
    s = _poisoned_s(x.shape[0], s_shape)
    if how == "wrapper":
        assert getattr(sgl_kernel, op)(x, q, s) is None
    else:
        assert _op(op)(x, q, s) is None
    return q, s


def _check_token(op: str, x: torch.Tensor, q: torch.Tensor, s: torch.Tensor) -> None:
    ref_q, ref_s = _ref_token(op, x)
    assert_codes_equal(q, ref_q, "output_q")
    assert_scales_equal(s.reshape(-1), ref_s, "output_s")


# ---------------------------------------------------------------------------------------
# sgl_per_token_quant_fp8 / sgl_per_token_quant_int8


@pytest.mark.parametrize("hidden", HIDDENS)
@pytest.mark.parametrize("tokens", TOKENS)
def test_per_token_fp8_matrix(tokens, hidden, gen):
    """The issue's 25 shapes, bf16."""
    x = _rand((tokens, hidden), torch.bfloat16, gen)
    q, s = _run_token("sgl_per_token_quant_fp8", x)
    _check_token("sgl_per_token_quant_fp8", x, q, s)


@pytest.mark.parametrize("s_shape", ["m", "m1"])
@pytest.mark.parametrize("tokens, hidden", R_SHAPES + FP8_ODD_SHAPES + CLUSTER_SHAPES,
                         ids=_shape_ids(R_SHAPES + FP8_ODD_SHAPES + CLUSTER_SHAPES))
@pytest.mark.parametrize("dtype", DTYPES, ids=_dt)
def test_per_token_fp8(dtype, tokens, hidden, s_shape, gen):
    """fp16/bf16/fp32, output_s ``[M]`` or ``[M, 1]``, odd hidden sizes (multiples of 4)."""
    x = _rand((tokens, hidden), dtype, gen)
    q, s = _run_token("sgl_per_token_quant_fp8", x, s_shape)
    _check_token("sgl_per_token_quant_fp8", x, q, s)


@pytest.mark.parametrize("s_shape", ["m", "m1"])
@pytest.mark.parametrize("tokens, hidden", R_SHAPES + INT8_ODD_SHAPES + CLUSTER_SHAPES,
                         ids=_shape_ids(R_SHAPES + INT8_ODD_SHAPES + CLUSTER_SHAPES))
@pytest.mark.parametrize("dtype", DTYPES, ids=_dt)
def test_per_token_int8(dtype, tokens, hidden, s_shape, gen):
    x = _rand((tokens, hidden), dtype, gen)
    q, s = _run_token("sgl_per_token_quant_int8", x, s_shape)
    _check_token("sgl_per_token_quant_int8", x, q, s)


@pytest.mark.parametrize("dtype", DTYPES, ids=_dt)
def test_per_token_int8_round_half_even(dtype):
    """s = 127 / 127 = 1 exactly, so x / s hits the .5 ties: they round to even."""
    row = [127.0, 0.5, 1.5, 2.5, -0.5, -2.5, 3.5, -3.5, 126.5, -125.5, 4.25, -4.75, 0.0, 1.0, -127.0, 5.5]
    expected = [127, 0, 2, 2, 0, -2, 4, -4, 126, -126, 4, -5, 0, 1, -127, 6]
    x = torch.tensor([row, [v / 4 for v in row]], dtype=dtype, device="cuda")
    q, s = _run_token("sgl_per_token_quant_int8", x)
    assert s.tolist() == [1.0, 127.0 / 4 / 127]
    assert q[0].tolist() == expected
    _check_token("sgl_per_token_quant_int8", x, q, s)


@pytest.mark.parametrize("op", PER_TOKEN_OPS)
@pytest.mark.parametrize("dtype", DTYPES, ids=_dt)
@pytest.mark.parametrize("hidden", [256, 104])
def test_per_token_special_values(op, dtype, hidden, gen):
    """A zero row: scale 0, codes 0 (no eps floor). A NaN row: scale NaN, codes NaN (fp8) / 0
    (int8). An inf row: scale inf, the inf element's code NaN / 0, the others 0. Other rows
    unaffected."""
    x = _rand((8, hidden), dtype, gen, lo=-1.0, hi=1.0)
    x[1] = 0
    x[2, 7] = NAN
    x[3, hidden - 1] = INF
    x[4, 0] = -INF
    x[5, 3] = -NAN
    x[5, 4] = INF
    q, s = _run_token(op, x)
    _check_token(op, x, q, s)
    fp8 = _out_dtype(op) == FP8
    qf = q.float()

    def bad(codes) -> bool:
        return bool(torch.isnan(codes).all()) if fp8 else bool((codes == 0).all())

    assert float(s[1]) == 0.0 and bool((qf[1] == 0).all())
    assert bool(torch.isnan(s[2])) and bad(qf[2])
    assert bool(torch.isnan(s[5])) and bad(qf[5])
    assert float(s[3]) == INF and bad(qf[3, hidden - 1 :]) and bool((qf[3, : hidden - 1] == 0).all())
    assert float(s[4]) == INF and bad(qf[4, :1]) and bool((qf[4, 1:] == 0).all())
    assert bool(torch.isfinite(s[[0, 6, 7]]).all()) and bool((s[[0, 6, 7]] > 0).all())


@pytest.mark.parametrize("op", PER_TOKEN_OPS)
@pytest.mark.parametrize("hidden", [4096, 104])
def test_per_token_large_fp16(op, hidden, gen):
    """fp16 up to 65504: codes saturate, never inf / NaN."""
    x = (torch.randn((33, hidden), device="cuda", generator=gen) * 1e4).clamp(-65504, 65504)
    x[:, 0] = 60000.0
    x[1, 5] = -65504.0
    x[2] = 65504.0
    x = x.half()
    q, s = _run_token(op, x)
    _check_token(op, x, q, s)
    assert bool(torch.isfinite(s).all())
    if op == "sgl_per_token_quant_fp8":
        assert not bool((fp8_code_bytes(q) == 0x7F).any())
        assert float(q.float().abs().max()) == 448.0
    else:
        assert int(q.abs().max()) == 127


@pytest.mark.parametrize("op", PER_TOKEN_OPS)
@pytest.mark.parametrize("hidden", [4096, 16384, 104])
def test_per_token_one_row_any_stride(op, hidden, gen):
    """One row whose row stride is odd (a view of a wider buffer at an aligned start): the
    stride of a single row is not used (the binding passes the row length), so the row takes
    the kernels its own alignment allows; codes and scale exact."""
    wide = _rand((2, hidden + 3), torch.bfloat16, gen)
    x = wide[:1, :hidden]
    assert x.stride(0) % 2 == 1 and x.data_ptr() % 16 == 0
    q, s = _run_token(op, x, how="op")
    _check_token(op, x, q, s)


@pytest.mark.parametrize("op", PER_TOKEN_OPS)
def test_per_token_deterministic(op, gen):
    x = _rand((4096, 7168), torch.bfloat16, gen)
    (q1, s1), (q2, s2) = _run_token(op, x, how="op"), _run_token(op, x, how="op")
    assert torch.equal(q1.view(torch.uint8), q2.view(torch.uint8))
    assert torch.equal(s1.view(torch.int32), s2.view(torch.int32))


@pytest.mark.parametrize("op", PER_TOKEN_OPS)
def test_per_token_empty(op):
    x = torch.empty((0, 128), dtype=torch.bfloat16, device="cuda")
    q = torch.empty((0, 128), dtype=_out_dtype(op), device="cuda")
    s = torch.empty((0,), dtype=torch.float32, device="cuda")
    assert getattr(sgl_kernel, op)(x, q, s) is None
    assert _op(op)(x, q, s) is None
    torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------
# sgl_per_tensor_quant_fp8

PT_SHAPES = R_SHAPES + [(4097,), (3, 5, 33), (1, 1), (2, 3, 4, 129)]
MODES = ("dynamic", "dynamic_preset_larger", "dynamic_preset_smaller", "static", "static_saturating")


def _initial_scale(mode: str, x: torch.Tensor) -> torch.Tensor:
    """The output_s the caller passes: 0 (dynamic), or a value relative to amax / 448."""
    dyn = float(x.float().abs().amax()) / FP8_MAX
    factor = {
        "dynamic": 0.0,
        "dynamic_preset_larger": 3.0,
        "dynamic_preset_smaller": 0.25,
        "static": 1.7,
        "static_saturating": 0.125,  # most large values clamp to +-448
    }[mode]
    return torch.tensor([dyn * factor], dtype=torch.float32, device="cuda")


def _run_tensor(x: torch.Tensor, s_in: torch.Tensor, is_static: bool, how: str = "wrapper"):
    q = torch.empty(x.shape, dtype=FP8, device="cuda")
    q.view(torch.uint8).fill_(POISON_FP8)
    s = s_in.clone()
    if how == "wrapper":
        assert sgl_kernel.sgl_per_tensor_quant_fp8(x, q, s, is_static) is None
    else:
        assert _op(PER_TENSOR)(x, q, s, is_static) is None
    return q, s


def _check_tensor(x, s_in, is_static, q, s) -> None:
    ref_q, ref_s = per_tensor_quant_fp8_ref(x, s_in, is_static)
    assert_codes_equal(q, ref_q, "output_q")
    assert_scales_equal(s, ref_s, "output_s")
    if is_static:
        assert torch.equal(s.view(torch.int32), s_in.view(torch.int32)), "static: output_s was written"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("shape", PT_SHAPES, ids=_shape_ids(PT_SHAPES))
@pytest.mark.parametrize("dtype", DTYPES, ids=_dt)
def test_per_tensor(dtype, shape, mode, gen):
    """Dynamic: ``s = max(output_s, amax / 448)`` (a preset larger value is kept, a smaller one
    replaced); static: output_s read only (also a scale small enough to saturate)."""
    x = _rand(shape, dtype, gen)
    s_in = _initial_scale(mode, x)
    is_static = mode.startswith("static")
    q, s = _run_tensor(x, s_in, is_static)
    _check_tensor(x, s_in, is_static, q, s)
    if mode == "dynamic_preset_larger":
        assert torch.equal(s, s_in), "a preset scale above amax / 448 must be kept"
    elif mode.startswith("dynamic"):
        assert torch.equal(s, ieee_div(x.float().abs().amax(), FP8_MAX).reshape(1))
    if mode == "static_saturating":
        assert float(q.float().abs().max()) == 448.0  # the amax element is 8x past the range


def test_per_tensor_large():
    """A large tensor: the maximum is found across many blocks (one planted element)."""
    x = torch.zeros((16384, 4096), dtype=torch.bfloat16, device="cuda")
    x[12345, 4001] = -3.0
    x[7, 7] = 2.0
    s_in = torch.zeros(1, dtype=torch.float32, device="cuda")
    q, s = _run_tensor(x, s_in, False)
    _check_tensor(x, s_in, False, q, s)
    assert float(s) == float(ieee_div(torch.tensor(3.0), FP8_MAX))
    assert float(q[12345, 4001].float()) == -448.0


@pytest.mark.parametrize("is_static", [False, True])
def test_per_tensor_plain_load_path(is_static, gen):
    """From 256 MiB of input the maximum and code kernels read with plain loads
    (per_tensor_quant.cu, kPlainLoadBytes): random data just past the threshold, with a scalar
    tail (numel % 8 == 1)."""
    x = _rand((16385, 8193), torch.bfloat16, gen)
    assert x.numel() * 2 >= 256 << 20 and x.numel() % 8 == 1
    s_in = _initial_scale("static" if is_static else "dynamic", x)
    q, s = _run_tensor(x, s_in, is_static)
    _check_tensor(x, s_in, is_static, q, s)


# Sizes at the launchers' limits. Dynamic: one block does both passes up to 1024 vectors of 16
# bytes (elements per vector: 8 for 16-bit types, 4 for fp32); on sm90+ one cluster of 2-16
# blocks of 256 threads up to 8192 vectors (one vector a thread up to 4096, then two); two
# kernels beyond (without clusters from 2048 vectors on); the two-kernel path's maximum runs on
# 64 blocks from 16384 to 65536 vectors (kFewVec; "few_mid": 40001, up to 3 vectors a thread)
# and changes its block counts, vectors a thread and loads past 65536; the dynamic code kernel
# takes one vector a thread up to 262144 (kOneVecCodes), more beyond. Both modes:
# below 64 KB of input the code kernel uses 2-element vectors. "tail": numel % vector != 0
# (scalar tail); "misaligned": the input starts one element past a 16-byte boundary (one
# block, element by element, up to 1024 elements; beyond, the peeled two-kernel path: 16-byte
# vectors of the input from its first 16-byte boundary, the codes stored in pieces as wide as
# the output's alignment then allows, here single bytes); "misaligned_pairs": two elements past
# it (the codes in 2-byte pieces).
def _small_numel(dtype) -> int:
    return 1024 * 2 * (16 // torch.empty((), dtype=dtype).element_size())


SIZE_CASES = ["cap", "cap+vec", "cap-1", "small+tail", "narrow_max", "misaligned", "misaligned_big", "block_max",
              "cluster_min", "cluster_v2", "cluster+tail", "cluster_max", "cluster_max+vec", "few_mid", "few_max",
              "few_max+tail", "one_vec_max", "one_vec_max+vec", "misaligned_many", "misaligned_grid",
              "misaligned_pairs"]


@pytest.mark.parametrize("case", SIZE_CASES)
@pytest.mark.parametrize("where", ["first", "last"])
@pytest.mark.parametrize("mode", ["dynamic", "static"])
@pytest.mark.parametrize("dtype", DTYPES, ids=_dt)
def test_per_tensor_sizes(dtype, mode, where, case, gen):
    """Scale and codes at the size limits of each path; the maximum is planted at the first or
    the last element (the tail, where there is one)."""
    elt = torch.empty((), dtype=dtype).element_size()
    cap = _small_numel(dtype)
    vec = 16 // elt
    numel, offset = {
        "cap": (cap, 0),
        "cap+vec": (cap + vec, 0),
        "cap-1": (cap - 1, 0),
        "small+tail": (3 * vec + 3, 0),
        "narrow_max": ((64 << 10) // elt - 1, 0),
        "misaligned": (1024, 1),
        "misaligned_big": (1025, 1),
        "block_max": (1024 * vec, 0),
        "cluster_min": (1025 * vec, 0),
        "cluster_v2": (4097 * vec, 0),
        "cluster+tail": (5000 * vec + 3, 0),
        "cluster_max": (8192 * vec, 0),
        "cluster_max+vec": (8193 * vec, 0),
        "few_mid": (40001 * vec, 0),
        "few_max": (65536 * vec, 0),
        "few_max+tail": (65537 * vec + 3, 0),
        "one_vec_max": (262144 * vec, 0),
        "one_vec_max+vec": (262145 * vec, 0),
        "misaligned_many": (70001, 1),
        "misaligned_grid": ((1 << 20) + 5, 1),
        "misaligned_pairs": (300001, 2),
    }[case]
    base = _rand((numel + offset,), dtype, gen, lo=0.0, hi=0.0).clamp_(-4.0, 4.0)
    x = base[offset:]
    x[0 if where == "first" else -1] = -7.5
    is_static = mode == "static"
    s_in = ieee_div(torch.tensor([7.5], device="cuda"), FP8_MAX) if is_static else torch.zeros(1, device="cuda")
    q, s = _run_tensor(x, s_in, is_static)
    _check_tensor(x, s_in, is_static, q, s)
    assert float(s) == float(ieee_div(torch.tensor(7.5), FP8_MAX))
    assert float(q[0 if where == "first" else -1].float()) == -448.0


@pytest.mark.parametrize("q_offset", [1, 2, 4, 8])
@pytest.mark.parametrize("mode", ["dynamic", "static"])
@pytest.mark.parametrize("dtype", DTYPES, ids=_dt)
def test_per_tensor_misaligned_output(dtype, mode, q_offset, gen):
    """The codes written into a view that starts 1, 2, 4 or 8 bytes past a 16-byte boundary
    (an aligned input; the codes are stored in pieces of that many bytes): every code and the
    scale as the reference, the bytes around the view untouched."""
    numel = 200003
    x = _rand((numel,), dtype, gen)
    is_static = mode == "static"
    s_in = ieee_div(x.abs().max().float().reshape(1), FP8_MAX) * 1.25 if is_static else torch.zeros(1, device="cuda")
    buf = torch.empty(numel + 32, dtype=FP8, device="cuda")
    buf.view(torch.uint8).fill_(POISON_FP8)
    q = buf[q_offset:q_offset + numel]
    s = s_in.clone()
    assert sgl_kernel.sgl_per_tensor_quant_fp8(x, q, s, is_static) is None
    _check_tensor(x, s_in, is_static, q, s)
    around = torch.cat((buf[:q_offset], buf[q_offset + numel:])).view(torch.uint8)
    assert bool((around == POISON_FP8).all()), "bytes outside the output view were written"


@pytest.mark.parametrize("dtype", DTYPES, ids=_dt)
@pytest.mark.parametrize("case", ["nan", "inf", "zeros"])
def test_per_tensor_special_values(dtype, case, gen):
    """Dynamic: a NaN makes the scale NaN and every code NaN; an inf makes the scale inf, its own
    code NaN and the others 0; an all-zero tensor gives scale 0 and codes 0."""
    x = _rand((33, 256), dtype, gen)
    if case == "nan":
        x[5, 17] = NAN
    elif case == "inf":
        x[5, 17] = -INF
    else:
        x.zero_()
    s_in = torch.zeros(1, dtype=torch.float32, device="cuda")
    q, s = _run_tensor(x, s_in, False)
    _check_tensor(x, s_in, False, q, s)
    qf = q.float()
    if case == "nan":
        assert bool(torch.isnan(s).all()) and bool(torch.isnan(qf).all())
    elif case == "inf":
        assert float(s) == INF and bool(torch.isnan(qf[5, 17]))
        qf[5, 17] = 0
        assert bool((qf == 0).all())
    else:
        assert float(s) == 0.0 and bool((qf == 0).all())


def test_per_tensor_empty():
    x = torch.empty((0, 128), dtype=torch.bfloat16, device="cuda")
    q = torch.empty((0, 128), dtype=FP8, device="cuda")
    s = torch.zeros(1, dtype=torch.float32, device="cuda")
    for is_static in (False, True):
        assert sgl_kernel.sgl_per_tensor_quant_fp8(x, q, s, is_static) is None
        assert _op(PER_TENSOR)(x, q, s, is_static) is None
    torch.cuda.synchronize()


# ---------------------------------------------------------------------------------------
# Exports, opcheck, CUDA graphs


def test_exports():
    gemm = importlib.import_module("sgl_kernel.gemm")
    for name in PER_TOKEN_OPS + (PER_TENSOR,):
        assert getattr(gemm, name) is getattr(sgl_kernel, name), name


@pytest.mark.parametrize("op", PER_TOKEN_OPS)
def test_opcheck_per_token(op, gen):
    dtype, shape = (torch.bfloat16, (8, 256)) if op == "sgl_per_token_quant_fp8" else (torch.float32, (3, 104))
    x = _rand(shape, dtype, gen)
    q = torch.empty(shape, dtype=_out_dtype(op), device="cuda")
    s = torch.empty((shape[0], 1), dtype=torch.float32, device="cuda")
    opcheck_any_dtype(_op(op), (x, q, s))


@pytest.mark.parametrize("is_static", [False, True])
def test_opcheck_per_tensor(is_static, gen):
    dtype, shape = (torch.bfloat16, (8, 256)) if is_static else (torch.float32, (3, 5, 33))
    x = _rand(shape, dtype, gen)
    q = torch.empty(shape, dtype=FP8, device="cuda")
    s = torch.full((1,), 0.01 if is_static else 0.0, dtype=torch.float32, device="cuda")
    opcheck_any_dtype(_op(PER_TENSOR), (x, q, s, is_static))


@pytest.mark.parametrize("how", ["wrapper", "op"])
@pytest.mark.parametrize("op", PER_TOKEN_OPS)
@pytest.mark.parametrize("hidden", [4096, 104])
def test_cuda_graph_per_token(op, hidden, how, gen):
    """Capture once, replay on new data copied into the static input (outputs re-poisoned)."""
    shape = (64, hidden)
    x = _rand(shape, torch.bfloat16, gen)
    q = torch.empty(shape, dtype=_out_dtype(op), device="cuda")
    s = torch.empty(64, dtype=torch.float32, device="cuda")
    fn = getattr(sgl_kernel, op) if how == "wrapper" else _op(op)

    fn(x, q, s)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn(x, q, s)
    for _ in range(2):
        x.copy_(_rand(shape, torch.bfloat16, gen))
        q.view(torch.uint8).fill_(POISON_FP8 if q.dtype == FP8 else POISON_INT8 & 0xFF)
        s.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        _check_token(op, x, q, s)


@pytest.mark.parametrize("how", ["wrapper", "op"])
@pytest.mark.parametrize("is_static", [False, True])
def test_cuda_graph_per_tensor(is_static, how, gen):
    """Dynamic: the graph zeroes output_s, then quantises; static: the scale is read at replay
    time (a new value written into output_s between replays is used)."""
    shape = (64, 4096)
    x = _rand(shape, torch.bfloat16, gen)
    q = torch.empty(shape, dtype=FP8, device="cuda")
    s = torch.zeros(1, dtype=torch.float32, device="cuda")
    fn = sgl_kernel.sgl_per_tensor_quant_fp8 if how == "wrapper" else _op(PER_TENSOR)

    def step():
        if not is_static:
            s.zero_()
        fn(x, q, s, is_static)

    s.fill_(0.5)
    step()  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(2):
        x.copy_(_rand(shape, torch.bfloat16, gen))
        s_in = _initial_scale("static", x) if is_static else torch.zeros(1, dtype=torch.float32, device="cuda")
        s.copy_(s_in)
        q.view(torch.uint8).fill_(POISON_FP8)
        graph.replay()
        torch.cuda.synchronize()
        _check_tensor(x, s_in, is_static, q, s)


# ---------------------------------------------------------------------------------------
# Bad inputs, through torch.ops and the wrappers


def _bad_token_case(op: str, kind: str):
    """``(x, q, s, argument named, fragments)``."""
    out = _out_dtype(op)
    x = torch.randn((4, 256), device="cuda").to(torch.bfloat16)
    q = torch.empty((4, 256), dtype=out, device="cuda")
    s = torch.empty((4,), dtype=torch.float32, device="cuda")
    frags = ()
    if kind == "cpu_input":
        x, arg = x.cpu(), "input"
    elif kind == "input_dtype":
        x, arg, frags = x.double(), "input", ("torch.float64",)
    elif kind == "input_3d":
        x, q, arg = x.view(2, 2, 256), q.view(2, 2, 256), "input"
    elif kind == "input_last_stride":
        x, arg = torch.randn((4, 512), device="cuda").to(torch.bfloat16)[:, ::2], "input"
    elif kind == "hidden_not_multiple_of_4":
        x = torch.randn((4, 102), device="cuda").to(torch.bfloat16)
        q, arg = torch.empty((4, 102), dtype=out, device="cuda"), "input"
    elif kind == "output_q_bf16":
        q, arg, frags = torch.empty_like(x), "output_q", ("torch.bfloat16",)
    elif kind == "output_q_other_8bit":
        q, arg = torch.empty(x.shape, dtype=torch.int8 if out == FP8 else FP8, device="cuda"), "output_q"
    elif kind == "output_q_shape":
        q, arg = torch.empty((5, 256), dtype=out, device="cuda"), "output_q"
    elif kind == "output_s_fp16":
        s, arg = torch.empty((4,), dtype=torch.float16, device="cuda"), "output_s"
    elif kind == "output_s_numel":
        s, arg = torch.empty((5,), dtype=torch.float32, device="cuda"), "output_s"
    elif kind == "output_s_non_contiguous":
        s, arg = torch.empty((4, 2), dtype=torch.float32, device="cuda")[:, 0], "output_s"
    else:
        raise ValueError(kind)
    return x, q, s, arg, frags


TOKEN_BAD = [
    "cpu_input",
    "input_dtype",
    "input_3d",
    "input_last_stride",
    "hidden_not_multiple_of_4",
    "output_q_bf16",
    "output_q_other_8bit",
    "output_q_shape",
    "output_s_fp16",
    "output_s_numel",
    "output_s_non_contiguous",
]


@pytest.mark.parametrize("kind", TOKEN_BAD)
@pytest.mark.parametrize("op", PER_TOKEN_OPS)
def test_bad_inputs_per_token(op, kind):
    x, q, s, arg, frags = _bad_token_case(op, kind)
    with raises_op_error(op, arg, *frags):
        _op(op)(x, q, s)
    with raises_op_error(op, arg, *frags):
        getattr(sgl_kernel, op)(x, q, s)


def _huge_token_args(op: str, rows: int, hidden: int = 16):
    """input, output_q, output_s of ``rows`` rows, each one row of memory (zero strides)."""
    x = one_row_view((rows, hidden), torch.bfloat16)
    q = one_row_view((rows, hidden), torch.int8 if op.endswith("int8") else FP8)
    return x, q, torch.empty_strided((rows,), (0,), dtype=torch.float32, device="cuda")


@pytest.mark.parametrize("op", PER_TOKEN_OPS)
def test_size_limit_messages(op):
    """2^31 rows or more are refused before any launch, with the limit named."""
    with raises_op_error(op, "input", f"(rows) must be at most {2**31 - 1}", f"got {2**31}"):
        _op(op)(*_huge_token_args(op, 2**31))


@pytest.mark.parametrize("op", PER_TOKEN_OPS)
def test_size_limit_boundary(op):
    """2^31 - 1 rows pass the row limit: the next check, output_q's contiguity, fails."""
    with raises_op_error(op, "output_q", "contiguous"):
        _op(op)(*_huge_token_args(op, 2**31 - 1))


def _bad_tensor_case(kind: str):
    x = torch.randn((4, 256), device="cuda").to(torch.bfloat16)
    q = torch.empty((4, 256), dtype=FP8, device="cuda")
    s = torch.zeros((1,), dtype=torch.float32, device="cuda")
    frags = ()
    if kind == "cpu_input":
        x, arg = x.cpu(), "input"
    elif kind == "input_dtype":
        x, arg, frags = x.double(), "input", ("torch.float64",)
    elif kind == "input_non_contiguous":
        x, arg = torch.randn((4, 512), device="cuda").to(torch.bfloat16)[:, :256], "input"
    elif kind == "output_q_bf16":
        q, arg, frags = torch.empty_like(x), "output_q", ("torch.bfloat16",)
    elif kind == "output_q_int8":
        q, arg = torch.empty(x.shape, dtype=torch.int8, device="cuda"), "output_q"
    elif kind == "output_q_shape":
        q, arg = torch.empty((4, 255), dtype=FP8, device="cuda"), "output_q"
    elif kind == "output_s_fp16":
        s, arg = torch.zeros((1,), dtype=torch.float16, device="cuda"), "output_s"
    elif kind == "output_s_numel":
        s, arg = torch.zeros((2,), dtype=torch.float32, device="cuda"), "output_s"
    else:
        raise ValueError(kind)
    return x, q, s, arg, frags


TENSOR_BAD = [
    "cpu_input",
    "input_dtype",
    "input_non_contiguous",
    "output_q_bf16",
    "output_q_int8",
    "output_q_shape",
    "output_s_fp16",
    "output_s_numel",
]


@pytest.mark.parametrize("is_static", [False, True])
@pytest.mark.parametrize("kind", TENSOR_BAD)
def test_bad_inputs_per_tensor(kind, is_static):
    x, q, s, arg, frags = _bad_tensor_case(kind)
    with raises_op_error(PER_TENSOR, arg, *frags):
        _op(PER_TENSOR)(x, q, s, is_static)
    with raises_op_error(PER_TENSOR, arg, *frags):
        sgl_kernel.sgl_per_tensor_quant_fp8(x, q, s, is_static)


# The cluster launchers (sgl_kernel/cluster.cuh) query the device on their first call per
# shape (cudaFuncGetAttributes, cudaFuncSetAttribute, cudaOccupancyMaxActiveClusters). That
# first call may come inside torch.cuda.graph's capture (global mode), where an unsafe runtime
# call would invalidate the capture. A fresh interpreter, so no earlier call warmed the cache:
# each cluster path is first called under capture, and the replay must match an eager call.
_FIRST_CALL_IN_CAPTURE = r"""
import torch
import sgl_kernel

torch.manual_seed(0)
bf16, fp8 = torch.bfloat16, torch.float8_e4m3fn
xt = torch.randn(4, 4096, device="cuda", dtype=bf16)        # per-tensor: 2048 vectors, a cluster of 8
xr = torch.randn(2, 16384, device="cuda", dtype=bf16)       # per-token: 8 blocks a row
xn = torch.randn(3, 16384, device="cuda", dtype=bf16)       # rmsnorm / norm + quant: clusters at 16384
w = torch.rand(16384, device="cuda", dtype=bf16) + 0.5
xf = torch.randn(4, 12288, device="cuda", dtype=bf16)       # fused_add_rmsnorm: a cluster of 8 from 12288
rf = torch.randn(4, 12288, device="cuda", dtype=bf16)
wf = torch.rand(12288, device="cuda", dtype=bf16) + 0.5


def run(outs):
    qt, st, qr, sr, yn, qn, sn, xa, ra = outs
    sgl_kernel.sgl_per_tensor_quant_fp8(xt, qt, st, False)
    sgl_kernel.sgl_per_token_quant_fp8(xr, qr, sr)
    sgl_kernel.rmsnorm(xn, w, 1e-6, out=yn)
    sgl_kernel.fused_rmsnorm_quant(xn, qn, sn, w, 128, 1e-10, -448.0, 448.0, False)
    sgl_kernel.fused_add_rmsnorm(xa, ra, wf, 1e-6)  # in place, on copies of xf, rf


def alloc():
    return (torch.empty_like(xt, dtype=fp8), torch.zeros(1, device="cuda"), torch.empty_like(xr, dtype=fp8),
            torch.empty(2, 1, device="cuda"), torch.empty_like(xn), torch.empty_like(xn, dtype=fp8),
            torch.empty(3, 128, device="cuda"), xf.clone(), rf.clone())


graph_outs = alloc()
torch.cuda.synchronize()
g = torch.cuda.CUDAGraph()
with torch.cuda.graph(g):
    run(graph_outs)
graph_outs[1].zero_()
g.replay()
eager_outs = alloc()
run(eager_outs)
torch.cuda.synchronize()
for a, b in zip(graph_outs, eager_outs):
    assert torch.equal(a.view(torch.uint8), b.view(torch.uint8)), "graph replay differs from the eager call"
print("OK")
"""


def test_cluster_paths_first_call_in_graph_capture():
    import os
    import subprocess
    import sys

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.run(
        [sys.executable, "-c", _FIRST_CALL_IN_CAPTURE], cwd=root, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"subprocess failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    assert proc.stdout.splitlines()[-1] == "OK", proc.stdout
