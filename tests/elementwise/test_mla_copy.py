# SPDX-License-Identifier: Apache-2.0
"""copy_to_gpu_no_ce, downcast_fp8, concat_mla_k and concat_mla_absorb_q (API.md 2.1.4),
against the pure-torch references of ref_mla.py. These ops copy or cast, so every result is
compared bit for bit; outputs are poisoned first (NaN, or a byte the op never writes) so that
unwritten and wrongly written elements both fail.

GPU tests are marked ``gpu`` one by one: the bad-input cases that fail before any CUDA work
(a tensor on the host, a wrong dtype checked first) also run on a GPU-less host, through the
ops' CPU registrations.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

import pytest
import torch

import sgl_kernel
from tests.elementwise.ref_mla import (
    E4M3_MAX_BYTE,
    FP8_SENTINEL,
    concat_mla_absorb_q_ref,
    concat_mla_k_ref,
    downcast_fp8_expected,
    downcast_fp8_ref,
)
from tests.helpers import one_row_view, raises_op_error

gpu = pytest.mark.gpu

REPO_ROOT = Path(__file__).resolve().parents[2]
NAN = float("nan")
INF = float("inf")
HALF = (torch.bfloat16, torch.float16)
FP8 = torch.float8_e4m3fn
# DeepSeek-V3 MLA: 128 heads, nope head dim 128, rope head dim 64, latent 512
H_MLA, DN, DR, D_LATENT = 128, 128, 64, 512


def _debug_env() -> bool:
    """SGL_KERNEL_DEBUG is on in this process (out-of-range slots raise, ops synchronise)."""
    v = os.environ.get("SGL_KERNEL_DEBUG", "")
    return v != "" and v[0] != "0"


skip_if_debug = pytest.mark.skipif(
    _debug_env(), reason="SGL_KERNEL_DEBUG is set: out-of-range slots raise and downcast_fp8 synchronises"
)


def _op(name: str):
    return getattr(torch.ops.sgl_kernel, name).default


def _randn(shape, dtype, gen) -> torch.Tensor:
    return torch.randn(shape, dtype=dtype, device="cuda", generator=gen)


def _poisoned(shape, dtype) -> torch.Tensor:
    return torch.full(shape, NAN, dtype=dtype, device="cuda")


_INT_VIEW = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def _bits(t: torch.Tensor) -> torch.Tensor:
    """The same memory as integers of the element's size (any strides)."""
    return t.view(_INT_VIEW[t.element_size()])


def assert_bitwise_equal(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    shapes = tuple(actual.shape), tuple(expected.shape)
    assert shapes[0] == shapes[1], f"{what}: shape {shapes[0]}, expected {shapes[1]}"
    a, e = _bits(actual), _bits(expected)
    if torch.equal(a, e):
        return
    diff = a != e
    n = int(diff.sum())
    first = tuple(int(i) for i in diff.nonzero()[0])
    got, want = int(a[first]), int(e[first])
    if actual.dtype in (torch.float32, torch.float16, torch.bfloat16):
        got_s, want_s = f"{float(actual[first]):g}", f"{float(expected[first]):g}"
    else:
        got_s, want_s = f"0x{got & 0xFF:02x}", f"0x{want & 0xFF:02x}"
    raise AssertionError(
        f"{what}: {n} of {a.numel()} elements differ; first at {first}: got {got_s}, expected {want_s}"
    )


@pytest.fixture
def cpu_gen(request) -> torch.Generator:
    """A CPU generator seeded from the test id (host tensors of copy_to_gpu_no_ce)."""
    return torch.Generator().manual_seed(zlib.crc32(request.node.nodeid.encode()))


# =======================================================================================
# copy_to_gpu_no_ce

COPY = "copy_to_gpu_no_ce"
COPY_MAX = 1000


def _host_int32(n: int, cpu_gen: torch.Generator) -> torch.Tensor:
    """Random int32 over the full range, both extremes included."""
    x = torch.randint(-(2**31), 2**31, (n,), dtype=torch.int32, generator=cpu_gen)
    x[0] = -(2**31)
    if n > 1:
        x[-1] = 2**31 - 1
    return x


@gpu
@pytest.mark.parametrize("n", [32, 64, 72, 1, 1000])
def test_copy_to_gpu_no_ce(n, cpu_gen):
    src = _host_int32(n, cpu_gen)
    guard = 8
    buf = torch.full((n + guard,), -7, dtype=torch.int32, device="cuda")
    out = buf[:n]
    out.copy_(~src)  # differs from src in every element
    torch.cuda.synchronize()
    expected = src.clone()
    assert sgl_kernel.copy_to_gpu_no_ce(src, out) is None
    src.copy_(~src)  # the host values were read at call time: later changes do not matter
    torch.cuda.synchronize()
    assert_bitwise_equal(out.cpu(), expected, "output")
    assert (buf[n:] == -7).all(), "wrote past output"

    assert _op(COPY)(src, out) is None  # direct torch.ops call
    torch.cuda.synchronize()
    assert_bitwise_equal(out.cpu(), src, "output (torch.ops)")


@gpu
@pytest.mark.parametrize("n", [32, 72, 1000])
def test_copy_to_gpu_no_ce_cuda_graph(n, cpu_gen):
    """The values present at capture time are baked into the graph (API.md 2.1.4): a replay
    after the host tensor changed writes the capture-time values."""
    src = _host_int32(n, cpu_gen)
    at_capture = src.clone()
    out = torch.zeros(n, dtype=torch.int32, device="cuda")
    sgl_kernel.copy_to_gpu_no_ce(src, out)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sgl_kernel.copy_to_gpu_no_ce(src, out)
    for _ in range(2):
        src.copy_(_host_int32(n, cpu_gen))
        out.copy_(~at_capture)
        graph.replay()
        torch.cuda.synchronize()
        assert_bitwise_equal(out.cpu(), at_capture, "output after replay")
    sgl_kernel.copy_to_gpu_no_ce(src, out)  # a direct call reads the current host values
    torch.cuda.synchronize()
    assert_bitwise_equal(out.cpu(), src, "output after a direct call")


def _copy_case(kind: str):
    """(input, output, argument named by the error, message fragments)."""
    i32 = torch.int32
    cuda = "cuda"
    if kind == "input_on_cuda":
        return torch.zeros(32, dtype=i32, device=cuda), torch.zeros(32, dtype=i32, device=cuda), "input", ("CPU",)
    if kind == "input_int64":
        return torch.zeros(32, dtype=torch.int64), torch.zeros(32, dtype=i32), "input", ("torch.int64",)
    if kind == "input_2d":
        return torch.zeros(4, 8, dtype=i32), torch.zeros(32, dtype=i32), "input", ("1-D",)
    if kind == "input_non_contiguous":
        return torch.zeros(64, dtype=i32)[::2], torch.zeros(32, dtype=i32), "input", ("contiguous",)
    if kind == "output_on_cpu":
        return torch.zeros(32, dtype=i32), torch.zeros(32, dtype=i32), "output", ("CUDA",)
    if kind == "output_int64":
        return torch.zeros(32, dtype=i32), torch.zeros(32, dtype=torch.int64, device=cuda), "output", ("torch.int64",)
    if kind == "output_non_contiguous":
        return torch.zeros(32, dtype=i32), torch.zeros(64, dtype=i32, device=cuda)[::2], "output", ("contiguous",)
    if kind == "size_mismatch":
        return torch.zeros(32, dtype=i32), torch.zeros(64, dtype=i32, device=cuda), "output", ("must be 32",)
    if kind == "too_many":
        n = COPY_MAX + 1
        return torch.zeros(n, dtype=i32), torch.zeros(n, dtype=i32, device=cuda), "input", ("at most 1000", "1001")
    raise ValueError(kind)


_COPY_HOST_ONLY = ("input_int64", "input_2d", "input_non_contiguous", "output_on_cpu")
_COPY_NEEDS_GPU = ("input_on_cuda", "output_int64", "output_non_contiguous", "size_mismatch", "too_many")


@pytest.mark.parametrize(
    "kind", [*_COPY_HOST_ONLY, *(pytest.param(k, marks=gpu) for k in _COPY_NEEDS_GPU)]
)
def test_copy_to_gpu_no_ce_bad_inputs(kind):
    src, out, arg, fragments = _copy_case(kind)
    for fn in (sgl_kernel.copy_to_gpu_no_ce, _op(COPY)):
        with raises_op_error(COPY, arg, *fragments):
            fn(src, out)


# =======================================================================================
# downcast_fp8

DC = "downcast_fp8"


def _kv_values(shape, dtype, gen) -> torch.Tensor:
    """Random signs, magnitudes log-uniform over 2^-12 .. 2^10: divided by the scales of
    these tests they land on e4m3 zeros, subnormals, normals and the saturation range."""
    mag = torch.exp2(torch.empty(shape, device="cuda").uniform_(-12.0, 10.0, generator=gen))
    sign = torch.randint(0, 2, shape, device="cuda", generator=gen) * 2 - 1
    return (mag * sign).to(dtype)


def _scale(gen) -> torch.Tensor:
    """A one-element fp32 CUDA scale, not a power of two (the division rounds)."""
    return torch.empty(1, device="cuda").uniform_(0.1, 2.0, generator=gen)


def _fp8_cache(shape, out_dtype) -> torch.Tensor:
    """A KV-cache buffer (e4m3, or its uint8 storage view) filled with FP8_SENTINEL."""
    t = torch.full(shape, FP8_SENTINEL, dtype=torch.uint8, device="cuda")
    return t if out_dtype == torch.uint8 else t.view(out_dtype)


def _check_downcast(k, v, k_out, v_out, k_scale, v_scale, loc, mult, offset) -> None:
    """k_out / v_out (filled with FP8_SENTINEL before the call) against the reference."""
    for name, x, out, scale in (("k_out", k, k_out, k_scale), ("v_out", v, v_out, v_scale)):
        before = _fp8_cache(tuple(out.shape), torch.uint8)
        expected = downcast_fp8_expected(before, x, scale, loc, mult, offset)
        assert_bitwise_equal(out.view(torch.uint8), expected, name)


@gpu
@pytest.mark.parametrize("mult, offset", [(1, 0), (1, 3), (2, 0), (2, 3)])
@pytest.mark.parametrize("out_dtype", [FP8, torch.uint8], ids=["fp8", "uint8"])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("h", [1, 8])
@pytest.mark.parametrize("t", [1, 7, 300])
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_downcast_fp8(dtype, t, h, d, out_dtype, mult, offset, gen):
    k, v = _kv_values((t, h, d), dtype, gen), _kv_values((t, h, d), dtype, gen)
    k_scale, v_scale = _scale(gen), _scale(gen)
    entries = 2 * t + 5  # loc values come from [0, entries), without repeats
    loc = torch.randperm(entries, device="cuda", generator=gen)[:t]
    n = entries * mult + offset  # every slot loc * mult + offset is in [0, n)
    k_out, v_out = _fp8_cache((n, h, d), out_dtype), _fp8_cache((n, h, d), out_dtype)
    if (mult, offset) == (1, 0):
        ret = sgl_kernel.downcast_fp8(k, v, k_out, v_out, k_scale, v_scale, loc)  # the defaults
    else:
        ret = sgl_kernel.downcast_fp8(k, v, k_out, v_out, k_scale, v_scale, loc, mult=mult, offset=offset)
    assert ret is None
    assert k_out.dtype == out_dtype and v_out.dtype == out_dtype
    _check_downcast(k, v, k_out, v_out, k_scale, v_scale, loc, mult, offset)


@gpu
@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_downcast_fp8_saturates(dtype, gen):
    """|x / scale| > 448 (and +-inf) stores +-448 (0x7e / 0xfe), never NaN."""
    t, h, d = 6, 2, 64
    big = torch.tensor([449.0, 460.0, 500.0, 3.0e4, INF, 1000.0], device="cuda")
    k = big.view(t, 1, 1).expand(t, h, d).to(dtype).contiguous()  # k_scale 1: 449 .. inf
    v = (-0.5 * k.float()).to(dtype)  # v_scale 0.25: -898 .. -inf
    k_scale = torch.ones(1, device="cuda")
    v_scale = torch.full((1,), 0.25, device="cuda")
    loc = torch.randperm(t, device="cuda", generator=gen)
    k_out, v_out = _fp8_cache((t, h, d), FP8), _fp8_cache((t, h, d), FP8)
    sgl_kernel.downcast_fp8(k, v, k_out, v_out, k_scale, v_scale, loc)
    torch.cuda.synchronize()
    assert (k_out.view(torch.uint8) == E4M3_MAX_BYTE).all(), "k_out: not all +448"
    assert (v_out.view(torch.uint8) == (E4M3_MAX_BYTE | 0x80)).all(), "v_out: not all -448"
    _check_downcast(k, v, k_out, v_out, k_scale, v_scale, loc, 1, 0)
    # the reference agrees
    assert (downcast_fp8_ref(k, k_scale).view(torch.uint8) == E4M3_MAX_BYTE).all()


def _mixed_locs(n: int, mult: int, offset: int):
    """loc values whose slots loc * mult + offset are in range, exactly at the ends of
    [0, n), just past them, far past them (and negative); in-range slots do not repeat."""
    hi = (n - 1 - offset) // mult  # the last loc whose slot is in range
    lo = -((offset) // mult)  # the first loc whose slot is >= 0
    cands = [0, 1, 3, lo, lo - 1, hi, hi + 1, n, n + 100, -1, -(10**12), 10**12, hi - 1]
    locs, used = [], set()
    for c in cands:
        slot = c * mult + offset
        if 0 <= slot < n:
            if slot in used:
                continue
            used.add(slot)
        locs.append(c)
    return locs


@gpu
@skip_if_debug
@pytest.mark.parametrize("mult, offset", [(1, 0), (2, 3), (1, -2), (3, 1)])
def test_downcast_fp8_out_of_range_slots_skipped(mult, offset, gen):
    """API.md 1.4: a slot outside [0, N) is skipped; its token writes nothing."""
    n, h, d = 16, 2, 64
    locs = _mixed_locs(n, mult, offset)
    slots = [c * mult + offset for c in locs]
    assert any(s < 0 for s in slots) and any(s >= n for s in slots) and any(0 <= s < n for s in slots)
    t = len(locs)
    loc = torch.tensor(locs, dtype=torch.int64, device="cuda")
    k, v = _kv_values((t, h, d), torch.bfloat16, gen), _kv_values((t, h, d), torch.bfloat16, gen)
    k_scale, v_scale = _scale(gen), _scale(gen)
    k_out, v_out = _fp8_cache((n, h, d), FP8), _fp8_cache((n, h, d), FP8)
    sgl_kernel.downcast_fp8(k, v, k_out, v_out, k_scale, v_scale, loc, mult, offset)
    torch.cuda.synchronize()
    _check_downcast(k, v, k_out, v_out, k_scale, v_scale, loc, mult, offset)
    written = int((k_out.view(torch.uint8) != FP8_SENTINEL).any(dim=2).any(dim=1).sum())
    assert written == sum(0 <= s < n for s in slots)


_DEBUG_SCRIPT = r"""
import torch
import sgl_kernel
from tests.elementwise.ref_mla import downcast_fp8_expected

torch.manual_seed(0)
k = torch.randn(4, 2, 64, device="cuda", dtype=torch.bfloat16)
v = torch.randn_like(k)
k_out = torch.zeros(8, 2, 64, device="cuda", dtype=torch.uint8)
v_out = torch.zeros_like(k_out)
s = torch.full((1,), 0.05, device="cuda")
loc = torch.tensor([0, 2, 5, 7], device="cuda")
sgl_kernel.downcast_fp8(k, v, k_out, v_out, s, s, loc)  # every slot in range: no error
ok = torch.equal(k_out, downcast_fp8_expected(torch.zeros_like(k_out), k, s, loc, 1, 0))
ok = ok and torch.equal(v_out, downcast_fp8_expected(torch.zeros_like(v_out), v, s, loc, 1, 0))
print("IN_RANGE_OK", ok)
for locs, mult, offset in (([0, 8, 1, 2], 1, 0), ([0, 1, -1, 2], 1, 0), ([0, 1, 2, 3], 2, 3), ([1, 2, 3, 4], 1, -2)):
    try:
        sgl_kernel.downcast_fp8(k, v, k_out, v_out, s, s, torch.tensor(locs, device="cuda"), mult, offset)
    except RuntimeError as e:
        print("RAISED", str(e).splitlines()[0])
    else:
        print("NO_ERROR", locs, mult, offset)
torch.cuda.synchronize()
print("DONE")
"""


@gpu
def test_downcast_fp8_debug_mode_raises():
    """SGL_KERNEL_DEBUG=1 (read once per process in some builds, hence a subprocess): an
    out-of-range slot raises RuntimeError naming loc instead of being skipped, and the CUDA
    context stays usable."""
    env = dict(os.environ, SGL_KERNEL_DEBUG="1")
    proc = subprocess.run(
        [sys.executable, "-c", _DEBUG_SCRIPT], cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, f"subprocess failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}"
    lines = proc.stdout.splitlines()
    assert "IN_RANGE_OK True" in lines, proc.stdout
    assert not [line for line in lines if line.startswith("NO_ERROR")], proc.stdout
    raised = [line[len("RAISED ") :] for line in lines if line.startswith("RAISED ")]
    assert len(raised) == 4, proc.stdout
    prefix = f"sgl_kernel.{DC}: "
    for msg in raised:
        assert msg.startswith(prefix) and re.match(r"loc\b", msg[len(prefix) :]), f"does not name loc first: {msg}"
        assert "loc * mult + offset" in msg and "[0, 8)" in msg and "SGL_KERNEL_DEBUG" in msg, msg
    assert lines[-1] == "DONE", proc.stdout


@gpu
@pytest.mark.parametrize("out_dtype", [torch.uint8, FP8], ids=["uint8", "fp8"])
def test_downcast_fp8_opcheck(out_dtype, gen):
    t, h, d = 9, 4, 64
    k, v = _kv_values((t, h, d), torch.bfloat16, gen), _kv_values((t, h, d), torch.bfloat16, gen)
    loc = torch.randperm(2 * t, device="cuda", generator=gen)[:t]
    n = 2 * t * 2 + 3
    k_out, v_out = _fp8_cache((n, h, d), out_dtype), _fp8_cache((n, h, d), out_dtype)
    args = (k, v, k_out, v_out, _scale(gen), _scale(gen), loc, 2, 3)
    # test_schema compares arguments before/after with torch.allclose, which has no fp8
    # kernel; the uint8 view of the cache covers it.
    utils = (
        ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
        if out_dtype == torch.uint8
        else ("test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
    )
    torch.library.opcheck(_op(DC), args, test_utils=utils)


@gpu
@skip_if_debug
def test_downcast_fp8_cuda_graph(gen):
    """Capture once; new k, v, loc and scales written into the static tensors are used on replay."""
    t, h, d, mult, offset = 37, 8, 128, 2, 1
    entries = 2 * t
    n = entries * mult + offset
    k, v = _kv_values((t, h, d), torch.bfloat16, gen), _kv_values((t, h, d), torch.bfloat16, gen)
    k_scale, v_scale = _scale(gen), _scale(gen)
    loc = torch.randperm(entries, device="cuda", generator=gen)[:t]
    k_out, v_out = _fp8_cache((n, h, d), FP8), _fp8_cache((n, h, d), FP8)

    def step():
        sgl_kernel.downcast_fp8(k, v, k_out, v_out, k_scale, v_scale, loc, mult, offset)

    step()  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(2):
        k.copy_(_kv_values((t, h, d), torch.bfloat16, gen))
        v.copy_(_kv_values((t, h, d), torch.bfloat16, gen))
        k_scale.copy_(_scale(gen))
        v_scale.copy_(_scale(gen))
        loc.copy_(torch.randperm(entries, device="cuda", generator=gen)[:t])
        k_out.view(torch.uint8).fill_(FP8_SENTINEL)
        v_out.view(torch.uint8).fill_(FP8_SENTINEL)
        graph.replay()
        torch.cuda.synchronize()
        _check_downcast(k, v, k_out, v_out, k_scale, v_scale, loc, mult, offset)


def _dc_args(device: str = "cuda", t: int = 4, h: int = 2, d: int = 64, dtype=torch.bfloat16) -> dict:
    n = 2 * t
    return dict(
        k=torch.ones(t, h, d, dtype=dtype, device=device),
        v=torch.ones(t, h, d, dtype=dtype, device=device),
        k_out=torch.zeros(n, h, d, dtype=torch.uint8, device=device).view(FP8),
        v_out=torch.zeros(n, h, d, dtype=torch.uint8, device=device).view(FP8),
        k_scale=torch.ones(1, device=device),
        v_scale=torch.ones(1, device=device),
        loc=torch.arange(t, device=device),
        mult=1,
        offset=0,
    )


def _misaligned(shape, dtype) -> torch.Tensor:
    """Contiguous, starting one element past a 16-byte boundary."""
    numel = 1
    for s in shape:
        numel *= s
    t = torch.ones(numel + 1, dtype=dtype, device="cuda")[1:].view(shape)
    assert t.is_contiguous() and t.data_ptr() % 16 != 0
    return t


def _u8(*shape) -> torch.Tensor:
    return torch.zeros(*shape, dtype=torch.uint8, device="cuda")


# name -> (changes to the valid arguments, argument named by the error, message fragments)
_DC_BAD = {
    "k_fp32": (lambda a: a.update(k=a["k"].float(), v=a["v"].float()), "k", ("dtype", "torch.float32")),
    "v_dtype": (lambda a: a.update(v=a["v"].half()), "v", ("dtype", "same as k")),
    "k_2d": (lambda a: a.update(k=a["k"].flatten(1), v=a["v"].flatten(1)), "k", ("3-D",)),
    "head_dim_not_multiple_of_8": (
        lambda a: a.update(**{n: a[n][..., :60].contiguous() for n in ("k", "v", "k_out", "v_out")}),
        "k",
        ("multiple of 8", "60"),
    ),
    "k_non_contiguous": (
        lambda a: a.update(k=torch.ones(4, 2, 128, dtype=torch.bfloat16, device="cuda")[..., :64]),
        "k",
        ("contiguous",),
    ),
    "v_non_contiguous": (
        lambda a: a.update(v=torch.ones(2, 4, 64, dtype=torch.bfloat16, device="cuda").transpose(0, 1)),
        "v",
        ("contiguous",),
    ),
    "k_misaligned": (lambda a: a.update(k=_misaligned((4, 2, 64), torch.bfloat16)), "k", ("16-byte aligned",)),
    "v_misaligned": (lambda a: a.update(v=_misaligned((4, 2, 64), torch.bfloat16)), "v", ("16-byte aligned",)),
    "v_shape": (lambda a: a.update(v=torch.ones(5, 2, 64, dtype=torch.bfloat16, device="cuda")), "v", ("shape",)),
    "k_out_fp16": (
        lambda a: a.update(k_out=torch.zeros(8, 2, 64, dtype=torch.float16, device="cuda")),
        "k_out",
        ("dtype", "torch.float16"),
    ),
    "v_out_e5m2": (
        lambda a: a.update(v_out=torch.zeros(8, 2, 64, dtype=torch.uint8, device="cuda").view(torch.float8_e5m2)),
        "v_out",
        ("dtype",),
    ),
    "k_out_heads": (lambda a: a.update(k_out=_u8(8, 3, 64)), "k_out", ("shape[1]",)),
    "v_out_rows": (lambda a: a.update(v_out=_u8(9, 2, 64)), "v_out", ("shape of k_out",)),
    "k_out_on_cpu": (lambda a: a.update(k_out=torch.zeros(8, 2, 64, dtype=torch.uint8)), "k_out", ("device",)),
    "loc_int32": (lambda a: a.update(loc=a["loc"].int()), "loc", ("torch.int64", "torch.int32")),
    "loc_length": (lambda a: a.update(loc=torch.arange(5, device="cuda")), "loc", ("shape[0]",)),
    "k_scale_two_elements": (lambda a: a.update(k_scale=torch.ones(2, device="cuda")), "k_scale", ("one element", "2")),
    "v_scale_fp16": (
        lambda a: a.update(v_scale=torch.ones(1, dtype=torch.float16, device="cuda")),
        "v_scale",
        ("dtype",),
    ),
}


@gpu
@pytest.mark.parametrize("case", list(_DC_BAD))
def test_downcast_fp8_bad_inputs(case):
    change, arg, fragments = _DC_BAD[case]
    args = _dc_args()
    change(args)
    with raises_op_error(DC, arg, *fragments):
        sgl_kernel.downcast_fp8(**args)
    with raises_op_error(DC, arg, *fragments):
        _op(DC)(*args.values())


def test_downcast_fp8_host_tensors():
    """Runs without a GPU too: the CPU registration reaches the same first check."""
    args = _dc_args(device="cpu")
    with raises_op_error(DC, "k", "CUDA", "cpu"):
        sgl_kernel.downcast_fp8(**args)


# =======================================================================================
# concat_mla_k

CK = "concat_mla_k"
MLA_K_LAYOUTS = ("contiguous", "serving", "latent", "odd_strides")


def _mla_k_inputs(t: int, layout: str, dtype, gen, heads: int = H_MLA):
    """(k, k_nope, k_rope, k_buf, k_view): k is a NaN-poisoned view ``k_view(k_buf)`` of
    the allocation ``k_buf``; the inputs are random.

    contiguous: three fresh tensors.
    serving: as a DeepSeek serving engine passes them: k is ``[..., :192]`` of a
        ``[T, H, 256]`` buffer, k_nope is ``kv[..., :128]`` of the ``[T, H, 256]`` kv_b_proj
        output (``[k_nope | v]``), k_rope is ``[..., 64:]`` of a ``[T, 1, 128]`` tensor.
    latent: k_rope is the rope part of a ``[T, 576]`` latent row (``[kv_c | k_pe]``) viewed
        as ``[T, 1, 64]``; k contiguous; k_nope ``kv[..., :128]``.
    odd_strides: row strides that are not multiples of 8 elements (no 16-byte vectors): the
        element-wise path.
    """
    if layout == "contiguous":
        k_buf, k_view = _poisoned((t, heads, DN + DR), dtype), lambda b: b
        k_nope = _randn((t, heads, DN), dtype, gen)
        k_rope = _randn((t, 1, DR), dtype, gen)
    elif layout == "serving":
        k_buf, k_view = _poisoned((t, heads, 256), dtype), lambda b: b[..., : DN + DR]
        k_nope = _randn((t, heads, 256), dtype, gen)[..., :DN]
        k_rope = _randn((t, 1, 128), dtype, gen)[..., 64:]
    elif layout == "latent":
        k_buf, k_view = _poisoned((t, heads, DN + DR), dtype), lambda b: b
        k_nope = _randn((t, heads, 256), dtype, gen)[..., :DN]
        latent = _randn((t, D_LATENT + DR), dtype, gen)
        k_rope = latent.view(t, 1, D_LATENT + DR)[..., D_LATENT:]
    elif layout == "odd_strides":
        k_buf, k_view = _poisoned((t, heads + 1, DN + DR + 1), dtype), lambda b: b[:, :heads, : DN + DR]
        k_nope = _randn((t, heads, DN + 3), dtype, gen)[..., :DN]
        k_rope = _randn((t, 1, DR + 3), dtype, gen)[..., :DR]
    else:
        raise ValueError(layout)
    k = k_view(k_buf)
    assert k.shape == (t, heads, DN + DR) and k_nope.shape == (t, heads, DN) and k_rope.shape == (t, 1, DR)
    if layout != "contiguous":
        assert not (k.is_contiguous() and k_nope.is_contiguous() and k_rope.is_contiguous())
    if layout == "odd_strides" and t > 1:
        assert k.stride(1) % 8 and k_nope.stride(1) % 8 and k_rope.stride(0) % 8
    return k, k_nope, k_rope, k_buf, k_view


def _check_mla_k(k, k_nope, k_rope, k_buf, k_view) -> None:
    assert_bitwise_equal(k, concat_mla_k_ref(k_nope, k_rope), "k")
    outside = k_buf.clone()
    k_view(outside).zero_()
    assert int(outside.isnan().sum()) == k_buf.numel() - k.numel(), "wrote outside k"


@gpu
@pytest.mark.parametrize("layout", MLA_K_LAYOUTS)
@pytest.mark.parametrize("t", [1, 16, 1000])
def test_concat_mla_k(t, layout, gen):
    k, k_nope, k_rope, k_buf, k_view = _mla_k_inputs(t, layout, torch.bfloat16, gen)
    assert sgl_kernel.concat_mla_k(k, k_nope, k_rope) is None
    _check_mla_k(k, k_nope, k_rope, k_buf, k_view)


@gpu
@pytest.mark.parametrize("layout", ["contiguous", "serving", "odd_strides"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_concat_mla_k_other_dtypes(dtype, layout, gen):
    k, k_nope, k_rope, k_buf, k_view = _mla_k_inputs(16, layout, dtype, gen)
    assert _op(CK)(k, k_nope, k_rope) is None
    _check_mla_k(k, k_nope, k_rope, k_buf, k_view)


@gpu
@pytest.mark.parametrize("layout", ["contiguous", "serving"])
@pytest.mark.parametrize("heads", [16, 32])
def test_concat_mla_k_tensor_parallel_heads(heads, layout, gen):
    """Under tensor parallelism each GPU holds 128 / tp heads."""
    k, k_nope, k_rope, k_buf, k_view = _mla_k_inputs(33, layout, torch.bfloat16, gen, heads=heads)
    sgl_kernel.concat_mla_k(k, k_nope, k_rope)
    _check_mla_k(k, k_nope, k_rope, k_buf, k_view)


@gpu
@pytest.mark.parametrize("layout", ["contiguous", "serving"])
def test_concat_mla_k_opcheck(layout, gen):
    k, k_nope, k_rope, _, _ = _mla_k_inputs(16, layout, torch.bfloat16, gen)
    torch.library.opcheck(_op(CK), (k, k_nope, k_rope))


@gpu
@pytest.mark.parametrize("layout", ["serving", "odd_strides"])
def test_concat_mla_k_cuda_graph(layout, gen):
    t = 64
    k, k_nope, k_rope, k_buf, k_view = _mla_k_inputs(t, layout, torch.bfloat16, gen)
    sgl_kernel.concat_mla_k(k, k_nope, k_rope)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        sgl_kernel.concat_mla_k(k, k_nope, k_rope)
    for _ in range(2):
        k_nope.copy_(_randn(k_nope.shape, torch.bfloat16, gen))
        k_rope.copy_(_randn(k_rope.shape, torch.bfloat16, gen))
        k_buf.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        _check_mla_k(k, k_nope, k_rope, k_buf, k_view)


def _ck_args(device: str = "cuda", t: int = 4, dtype=torch.bfloat16) -> dict:
    return dict(
        k=torch.zeros(t, H_MLA, DN + DR, dtype=dtype, device=device),
        k_nope=torch.ones(t, H_MLA, DN, dtype=dtype, device=device),
        k_rope=torch.ones(t, 1, DR, dtype=dtype, device=device),
    )


def _bf16(*shape) -> torch.Tensor:
    return torch.ones(*shape, dtype=torch.bfloat16, device="cuda")


_CK_BAD = {
    "k_fp64": (lambda a: a.update({n: t.double() for n, t in a.items()}), "k", ("dtype", "torch.float64")),
    "k_int32": (lambda a: a.update({n: t.int() for n, t in a.items()}), "k", ("dtype", "torch.int32")),
    "k_nope_dtype": (lambda a: a.update(k_nope=a["k_nope"].half()), "k_nope", ("same as k", "torch.float16")),
    "k_rope_dtype": (lambda a: a.update(k_rope=a["k_rope"].float()), "k_rope", ("same as k", "torch.float32")),
    "k_2d": (lambda a: a.update(k=a["k"].flatten(1)), "k", ("3-D",)),
    "k_nope_4d": (lambda a: a.update(k_nope=a["k_nope"].unsqueeze(0)), "k_nope", ("3-D",)),
    "k_rope_2d": (lambda a: a.update(k_rope=a["k_rope"].flatten(1)), "k_rope", ("3-D",)),
    "k_last_dim": (lambda a: a.update(k=_bf16(4, H_MLA, 191)), "k", ("shape[2]", "192", "191")),
    "k_nope_last_dim": (lambda a: a.update(k_nope=_bf16(4, H_MLA, 120)), "k", ("shape[2]",)),
    "k_nope_tokens": (lambda a: a.update(k_nope=_bf16(5, H_MLA, DN)), "k_nope", ("shape[0]",)),
    "k_nope_heads": (lambda a: a.update(k_nope=_bf16(4, 64, DN)), "k_nope", ("shape[1]",)),
    "k_rope_tokens": (lambda a: a.update(k_rope=_bf16(5, 1, DR)), "k_rope", ("shape[0]",)),
    "k_rope_per_head": (lambda a: a.update(k_rope=_bf16(4, H_MLA, DR)), "k_rope", ("shape[1]", "must be 1")),
    "k_strided_last_dim": (lambda a: a.update(k=_bf16(4, H_MLA, 2 * (DN + DR))[..., ::2]), "k", ("stride(-1) == 1",)),
    "k_nope_strided_last_dim": (
        lambda a: a.update(k_nope=_bf16(4, H_MLA, 2 * DN)[..., ::2]),
        "k_nope",
        ("stride(-1) == 1",),
    ),
    "k_rope_strided_last_dim": (
        lambda a: a.update(k_rope=_bf16(4, 1, 2 * DR)[..., ::2]),
        "k_rope",
        ("stride(-1) == 1",),
    ),
    "k_rope_on_cpu": (lambda a: a.update(k_rope=a["k_rope"].cpu()), "k_rope", ("device",)),
}


@gpu
@pytest.mark.parametrize("case", list(_CK_BAD))
def test_concat_mla_k_bad_inputs(case):
    change, arg, fragments = _CK_BAD[case]
    args = _ck_args()
    change(args)
    for fn in (sgl_kernel.concat_mla_k, _op(CK)):
        with raises_op_error(CK, arg, *fragments):
            fn(**args)


def test_concat_mla_k_host_tensors():
    """Runs without a GPU too: the CPU registration reaches the same first check."""
    with raises_op_error(CK, "k", "CUDA", "cpu"):
        sgl_kernel.concat_mla_k(**_ck_args(device="cpu"))


# =======================================================================================
# concat_mla_absorb_q

AQ = "concat_mla_absorb_q"
ABSORB_LAYOUTS = ("contiguous", "serving", "sliced", "odd_strides")


def _absorb_inputs(t0: int, t1: int, layout: str, dtype, gen):
    """(a, b) of shapes [T0, T1, 512] and [T0, T1, 64].

    serving: as a DeepSeek serving engine passes them: a is the absorbed-query bmm output
        ``[T1, T0, 512]`` transposed to ``[T0, T1, 512]``; b is ``q[..., 128:]`` of the
        ``[T0, T1, 192]`` query.
    sliced: both slices of wider last dimensions.
    odd_strides: row strides that are not multiples of 8 elements (element-wise path).
    """
    if layout == "contiguous":
        a, b = _randn((t0, t1, D_LATENT), dtype, gen), _randn((t0, t1, DR), dtype, gen)
    elif layout == "serving":
        a = _randn((t1, t0, D_LATENT), dtype, gen).transpose(0, 1)
        b = _randn((t0, t1, DN + DR), dtype, gen)[..., DN:]
    elif layout == "sliced":
        a = _randn((t0, t1, D_LATENT + 128), dtype, gen)[..., 128:]
        b = _randn((t0, t1, 2 * DR), dtype, gen)[..., :DR]
    elif layout == "odd_strides":
        a = _randn((t0, t1, D_LATENT + 3), dtype, gen)[..., :D_LATENT]
        b = _randn((t0, t1, DR + 5), dtype, gen)[..., :DR]
    else:
        raise ValueError(layout)
    assert a.shape == (t0, t1, D_LATENT) and b.shape == (t0, t1, DR)
    return a, b


def _check_absorb(out, a, b) -> None:
    t0, t1 = a.shape[:2]
    assert out.shape == (t0, t1, D_LATENT + DR) and out.dtype == a.dtype and out.device == a.device
    assert_bitwise_equal(out, concat_mla_absorb_q_ref(a, b), "out")


@gpu
@pytest.mark.parametrize("layout", ABSORB_LAYOUTS)
@pytest.mark.parametrize("t1", [1, 16, 128])
@pytest.mark.parametrize("t0", [1, 16, 1024])
def test_concat_mla_absorb_q(t0, t1, layout, gen):
    a, b = _absorb_inputs(t0, t1, layout, torch.bfloat16, gen)
    out = sgl_kernel.concat_mla_absorb_q(a, b)
    assert isinstance(out, torch.Tensor) and out.is_contiguous()
    for x in (a, b):
        assert not torch._C._overlaps(out, x), "out aliases an input"
    _check_absorb(out, a, b)


@gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=str)
def test_concat_mla_absorb_q_other_dtypes(dtype, gen):
    a, b = _absorb_inputs(16, 128, "serving", dtype, gen)
    _check_absorb(sgl_kernel.concat_mla_absorb_q(a, b), a, b)


@gpu
@pytest.mark.parametrize("layout", ["contiguous", "serving"])
def test_concat_mla_absorb_q_strided_out(layout, gen):
    """torch.ops with a caller's ``out`` that is a view of a wider buffer: written in place,
    nothing outside it."""
    t0, t1 = 7, 16
    a, b = _absorb_inputs(t0, t1, layout, torch.bfloat16, gen)
    buf = _poisoned((t0, t1, D_LATENT + DR + 64), torch.bfloat16)
    out = buf[..., 64:]
    assert _op(AQ)(a, b, out) is None
    _check_absorb(out, a, b)
    assert buf[..., :64].isnan().all(), "wrote outside out"


@gpu
@pytest.mark.parametrize("layout", ["contiguous", "serving"])
def test_concat_mla_absorb_q_opcheck(layout, gen):
    a, b = _absorb_inputs(16, 16, layout, torch.bfloat16, gen)
    out = torch.empty(16, 16, D_LATENT + DR, dtype=torch.bfloat16, device="cuda")
    torch.library.opcheck(_op(AQ), (a, b, out))


@gpu
def test_concat_mla_absorb_q_cuda_graph(gen):
    """The wrapper inside the capture (out from the graph's pool); replay on new inputs."""
    a, b = _absorb_inputs(32, 128, "serving", torch.bfloat16, gen)
    sgl_kernel.concat_mla_absorb_q(a, b)  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = sgl_kernel.concat_mla_absorb_q(a, b)
    for _ in range(2):
        a.copy_(_randn(a.shape, torch.bfloat16, gen))
        b.copy_(_randn(b.shape, torch.bfloat16, gen))
        out.fill_(NAN)
        graph.replay()
        torch.cuda.synchronize()
        _check_absorb(out, a, b)


def _aq_args(device: str = "cuda", t0: int = 4, t1: int = 8, dtype=torch.bfloat16) -> dict:
    return dict(
        a=torch.ones(t0, t1, D_LATENT, dtype=dtype, device=device),
        b=torch.ones(t0, t1, DR, dtype=dtype, device=device),
        out=torch.empty(t0, t1, D_LATENT + DR, dtype=dtype, device=device),
    )


_AQ_BAD = {
    "a_int32": (lambda a: a.update({n: t.int() for n, t in a.items()}), "a", ("dtype", "torch.int32")),
    "b_dtype": (lambda a: a.update(b=a["b"].half()), "b", ("same as a", "torch.float16")),
    "a_2d": (lambda a: a.update(a=a["a"].flatten(1)), "a", ("3-D",)),
    "b_4d": (lambda a: a.update(b=a["b"].unsqueeze(0)), "b", ("3-D",)),
    "b_leading_dims": (lambda a: a.update(b=_bf16(4, 9, DR)), "b", ("leading dimensions",)),
    "a_strided_last_dim": (lambda a: a.update(a=_bf16(4, 8, 2 * D_LATENT)[..., ::2]), "a", ("stride(-1) == 1",)),
    "b_strided_last_dim": (lambda a: a.update(b=_bf16(4, 8, 2 * DR)[..., ::2]), "b", ("stride(-1) == 1",)),
    "b_on_cpu": (lambda a: a.update(b=a["b"].cpu()), "b", ("device",)),
}
# only reachable through torch.ops (the wrapper allocates out)
_AQ_BAD_OUT = {
    "out_last_dim": (lambda a: a.update(out=_bf16(4, 8, 575)), "out", ("shape[2]", "576")),
    "out_leading_dims": (lambda a: a.update(out=_bf16(8, 4, 576)), "out", ("leading dimensions",)),
    "out_dtype": (lambda a: a.update(out=a["out"].float()), "out", ("dtype", "same as a")),
    "out_strided_last_dim": (lambda a: a.update(out=_bf16(4, 8, 2 * 576)[..., ::2]), "out", ("stride(-1) == 1",)),
    "out_on_cpu": (lambda a: a.update(out=a["out"].cpu()), "out", ("device",)),
}


@gpu
@pytest.mark.parametrize("case", [*_AQ_BAD, *_AQ_BAD_OUT])
def test_concat_mla_absorb_q_bad_inputs(case):
    change, arg, fragments = {**_AQ_BAD, **_AQ_BAD_OUT}[case]
    args = _aq_args()
    change(args)
    with raises_op_error(AQ, arg, *fragments):
        _op(AQ)(args["a"], args["b"], args["out"])
    if case in _AQ_BAD:
        with raises_op_error(AQ, arg, *fragments):
            sgl_kernel.concat_mla_absorb_q(args["a"], args["b"])


def test_concat_mla_absorb_q_host_tensors():
    """Runs without a GPU too: the CPU registration reaches the same first check."""
    args = _aq_args(device="cpu")
    with raises_op_error(AQ, "a", "CUDA", "cpu"):
        sgl_kernel.concat_mla_absorb_q(args["a"], args["b"])
    with raises_op_error(AQ, "a", "CUDA", "cpu"):
        _op(AQ)(args["a"], args["b"], args["out"])


# =======================================================================================
# size limits: named before any launch. Zero-stride views give the sizes without the memory.


def _bcast(shape, dtype=torch.bfloat16, offset: int = 0) -> torch.Tensor:
    return one_row_view(shape, dtype, offset)


def _dc_huge(h: int, d: int) -> dict:
    """downcast_fp8 arguments for one token of h heads of d (k and v views of one row)."""
    return dict(
        k=_bcast((1, h, d)),
        v=_bcast((1, h, d)),
        k_out=_bcast((1, h, d), torch.uint8).view(FP8),
        v_out=_bcast((1, h, d), torch.uint8).view(FP8),
        k_scale=torch.ones(1, device="cuda"),
        v_scale=torch.ones(1, device="cuda"),
        loc=torch.zeros(1, dtype=torch.int64, device="cuda"),
        mult=1,
        offset=0,
    )


@gpu
@pytest.mark.parametrize("h, d", [(2**27, 128), (2**31 - 128, 8)], ids=["2^32", "2^32-256"])
def test_downcast_fp8_size_limit_messages(h, d):
    """k and v together of 2^32 - 256 16-byte vectors or more are refused."""
    vectors = 2 * h * d // 8
    with raises_op_error(DC, "k", "fewer than 2^32 - 256 16-byte vectors", f"got {vectors}"):
        _op(DC)(*_dc_huge(h, d).values())


@gpu
def test_downcast_fp8_size_limit_boundary():
    """2^32 - 258 vectors (the most an even count can be below the limit) pass it: the next
    check, contiguity, fails."""
    with raises_op_error(DC, "k", "contiguous"):
        _op(DC)(*_dc_huge(2**31 - 129, 8).values())


@gpu
def test_concat_mla_k_size_limit_messages():
    """2^32 rows (tokens * heads) or more are refused."""
    t = 2**25  # * 128 heads = 2^32 rows
    k = _bcast((t, H_MLA, DN + DR))
    k_nope, k_rope = _bcast((t, H_MLA, DN)), _bcast((t, 1, DR))
    with raises_op_error(CK, "k", "fewer than 2^32 rows", f"got {2**32}"):
        _op(CK)(k, k_nope, k_rope)


@gpu
@pytest.mark.parametrize("aligned", [True, False], ids=["vectors", "elements"])
def test_concat_mla_absorb_q_size_limit_messages(aligned):
    """The flat copy kernel takes at most (2^31 - 1) * 256 copy units in all: 16-byte vectors
    when every pointer and stride allows them, else elements."""
    t0, t1, w = 2**16, 2**15, 1024  # 2^31 rows of 2 * 1024 elements
    a, b = _bcast((t0, t1, w)), _bcast((t0, t1, w))
    out = _bcast((t0, t1, 2 * w), offset=0 if aligned else 1)
    cols = 2 * w // 8 if aligned else 2 * w
    unit = "16-byte vectors" if aligned else "elements"
    with raises_op_error(AQ, "out", f"at most {(2**31 - 1) * 256} copy units", f"{2**31} rows of {cols} {unit}"):
        _op(AQ)(a, b, out)


# =======================================================================================
# all four: empty inputs return without launching


@gpu
def test_empty_inputs():
    bf16 = torch.bfloat16
    out = torch.empty(0, dtype=torch.int32, device="cuda")
    sgl_kernel.copy_to_gpu_no_ce(torch.empty(0, dtype=torch.int32), out)

    k = torch.empty(0, 2, 64, dtype=bf16, device="cuda")
    k_out, v_out = _fp8_cache((4, 2, 64), FP8), _fp8_cache((4, 2, 64), FP8)
    scale = torch.ones(1, device="cuda")
    loc = torch.empty(0, dtype=torch.int64, device="cuda")
    sgl_kernel.downcast_fp8(k, k.clone(), k_out, v_out, scale, scale, loc)

    ck = torch.empty(0, H_MLA, DN + DR, dtype=bf16, device="cuda")
    ck_nope = torch.empty(0, H_MLA, DN, dtype=bf16, device="cuda")
    sgl_kernel.concat_mla_k(ck, ck_nope, torch.empty(0, 1, DR, dtype=bf16, device="cuda"))

    q = sgl_kernel.concat_mla_absorb_q(
        torch.empty(0, H_MLA, D_LATENT, dtype=bf16, device="cuda"), torch.empty(0, H_MLA, DR, dtype=bf16, device="cuda")
    )
    assert q.shape == (0, H_MLA, D_LATENT + DR)
    torch.cuda.synchronize()
    assert (k_out.view(torch.uint8) == FP8_SENTINEL).all() and (v_out.view(torch.uint8) == FP8_SENTINEL).all()


def test_fake_tensor_mode():
    """Runs without a GPU too: under FakeTensorMode (torch.compile's tracing) the wrappers
    run on fake CUDA tensors; concat_mla_absorb_q returns a fake contiguous result."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    bf16 = torch.bfloat16
    with FakeTensorMode():
        a = torch.empty(H_MLA, 5, D_LATENT, dtype=bf16, device="cuda").transpose(0, 1)
        b = torch.empty(5, H_MLA, DN + DR, dtype=bf16, device="cuda")[..., DN:]
        q = sgl_kernel.concat_mla_absorb_q(a, b)
        assert q.shape == (5, H_MLA, D_LATENT + DR) and q.dtype == bf16 and q.device.type == "cuda"
        assert q.is_contiguous()

        k = torch.empty(5, H_MLA, 256, dtype=bf16, device="cuda")[..., : DN + DR]
        k_nope = torch.empty(5, H_MLA, DN, dtype=bf16, device="cuda")
        k_rope = torch.empty(5, 1, DR, dtype=bf16, device="cuda")
        assert sgl_kernel.concat_mla_k(k, k_nope, k_rope) is None

        x = torch.empty(5, 8, 128, dtype=bf16, device="cuda")
        cache = torch.empty(16, 8, 128, dtype=FP8, device="cuda")
        scale = torch.ones(1, device="cuda")
        loc = torch.zeros(5, dtype=torch.int64, device="cuda")
        assert sgl_kernel.downcast_fp8(x, x, cache, cache.clone(), scale, scale, loc, 2, 1) is None

        out = torch.empty(32, dtype=torch.int32, device="cuda")
        assert sgl_kernel.copy_to_gpu_no_ce(torch.zeros(32, dtype=torch.int32), out) is None
