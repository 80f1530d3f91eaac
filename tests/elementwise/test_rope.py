# SPDX-License-Identifier: Apache-2.0
"""apply_rope_with_cos_sin_cache_inplace and its op apply_rope_pos_ids_cos_sin_cache (API.md
2.1.3) on the GPU, against the fp32 reference of ref_rope.py with the shared tolerance table.
The GPU-less parts (schema, signatures, fakes, wrapper checks) are in tests/test_package.py."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from typing import Optional

import pytest
import torch

import sgl_kernel
from sgl_kernel import FusedSetKVBufferArg, apply_rope_with_cos_sin_cache_inplace
from tests.elementwise.ref_rope import expected_rope, rope_torch
from tests.helpers import fake_extent, one_row_view, raises_op_error
from tests.tolerances import elementwise_tol

pytestmark = pytest.mark.gpu

OP = "apply_rope_pos_ids_cos_sin_cache"
PY = "apply_rope_with_cos_sin_cache_inplace"
NAN = float("nan")
HEAD_SIZES = (64, 128, 256, 512)


def _op():
    return torch.ops.sgl_kernel.apply_rope_pos_ids_cos_sin_cache.default


def table_cache(max_pos: int, rotary_dim: int, base: float = 10000.0) -> torch.Tensor:
    """The usual RoPE table: cos | sin of pos * base^(-2i/R), fp32 ``[max_pos, R]``."""
    inv_freq = 1.0 / (base ** (torch.arange(0, rotary_dim, 2, dtype=torch.float32, device="cuda") / rotary_dim))
    freqs = torch.outer(torch.arange(max_pos, dtype=torch.float32, device="cuda"), inv_freq)
    return torch.cat((freqs.cos(), freqs.sin()), dim=-1).contiguous()


@dataclass
class Inputs:
    positions: torch.Tensor  # [nnz]
    query: torch.Tensor  # [nnz, hq * d] (or 3-D)
    key: torch.Tensor  # [nnz, hk * d] (or 3-D)
    value: torch.Tensor  # [nnz, hv * d] (or 3-D)
    cache: torch.Tensor  # [max_pos, r] fp32
    head_size: int

    @property
    def nnz(self) -> int:
        return self.query.shape[0]


def make_inputs(
    nnz: int,
    hq: int,
    hk: int,
    d: int,
    r: int,
    dtype: torch.dtype,
    gen: torch.Generator,
    *,
    layout: str = "qkv",
    hv: Optional[int] = None,
    max_pos: Optional[int] = None,
    random_cache: bool = True,
) -> Inputs:
    """Random q/k/v (never zeros) in one of these layouts:
    qkv: slices of one fused [nnz, (hq + hk + hv) * d] tensor (free token stride);
    separate: contiguous 2-D tensors; 3d: contiguous [nnz, H, d] tensors;
    padded: 2-D views of rows padded by 24 elements (token stride > H * d)."""
    hv = hk if hv is None else hv
    max_pos = max_pos or max(2 * nnz, 64)

    def randn(*shape):
        return torch.randn(*shape, dtype=dtype, device="cuda", generator=gen)

    if layout == "qkv":
        qkv = randn(nnz, (hq + hk + hv) * d)
        q, k, v = qkv.split([hq * d, hk * d, hv * d], dim=-1)
    elif layout == "separate":
        q, k, v = randn(nnz, hq * d), randn(nnz, hk * d), randn(nnz, hv * d)
    elif layout == "3d":
        q, k, v = randn(nnz, hq, d), randn(nnz, hk, d), randn(nnz, hv, d)
    elif layout == "padded":
        q, k, v = (randn(nnz, h * d + 24)[:, : h * d] for h in (hq, hk, hv))
    else:
        raise ValueError(layout)
    pos = torch.randint(0, max_pos, (nnz,), device="cuda", generator=gen)
    cache = torch.randn(max_pos, r, device="cuda", generator=gen) if random_cache else table_cache(max_pos, r)
    return Inputs(pos, q, k, v, cache, d)


def kv_buffers(x: Inputs, rows: int, gen: torch.Generator, v_rows: Optional[int] = None):
    """NaN-poisoned KV pools and distinct random cache locations."""
    k_buffer = torch.full((rows, x.key[0].numel()), NAN, dtype=x.key.dtype, device="cuda")
    v_buffer = torch.full((v_rows or rows, x.value[0].numel()), NAN, dtype=x.value.dtype, device="cuda")
    loc = torch.randperm(rows, device="cuda", generator=gen)[: x.nnz]
    return k_buffer, v_buffer, loc


def check_rope(x: Inputs, q_before: torch.Tensor, k_before: torch.Tensor, is_neox: bool, positions=None) -> None:
    """query/key (now rotated) against the reference computed from their values before."""
    pos = x.positions if positions is None else positions
    eq, ek = expected_rope(pos, q_before, k_before, x.head_size, x.cache, is_neox)
    tol = elementwise_tol(x.query.dtype)
    torch.testing.assert_close(x.query.float().reshape(eq.shape), eq, **tol)
    torch.testing.assert_close(x.key.float().reshape(ek.shape), ek, **tol)


def check_kv_write(x: Inputs, k_buffer, v_buffer, loc, written: torch.Tensor) -> None:
    """Rows loc[written] hold the rotated key / the value bitwise; every other row is NaN."""
    nnz = x.nnz
    key = x.key.reshape(nnz, -1)
    value = x.value.reshape(nnz, -1)
    for buf, src in ((k_buffer, key), (v_buffer, value)):
        rows = buf.shape[0]
        ok = written & (loc >= 0) & (loc < rows)
        assert torch.equal(buf[loc[ok]], src[ok]), "KV row differs from the (rotated) key / value"
        untouched = torch.ones(rows, dtype=torch.bool, device="cuda")
        untouched[loc[ok]] = False
        assert buf[untouched].isnan().all(), "a KV row outside cache_loc was written"


def run_and_check(x: Inputs, is_neox: bool, fused: bool, gen, **kw) -> None:
    q_before, k_before, v_before = x.query.clone(), x.key.clone(), x.value.clone()
    arg = None
    if fused:
        k_buffer, v_buffer, loc = kv_buffers(x, 2 * x.nnz + 7, gen)
        arg = FusedSetKVBufferArg(x.value, k_buffer, v_buffer, None, None, loc)
    assert apply_rope_with_cos_sin_cache_inplace(
        x.positions, x.query, x.key, x.head_size, x.cache, is_neox=is_neox, fused_set_kv_buffer_arg=arg, **kw
    ) is None
    check_rope(x, q_before, k_before, is_neox)
    assert torch.equal(x.value, v_before), "value was modified"
    if fused:
        check_kv_write(x, k_buffer, v_buffer, loc, torch.ones(x.nnz, dtype=torch.bool, device="cuda"))


# ---------------------------------------------------------------------------------------
# Correctness


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("nnz", [1, 7, 4096, 9000])
@pytest.mark.parametrize("rotary", ["full", "partial"])
@pytest.mark.parametrize("d", HEAD_SIZES)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_correctness(is_neox, d, rotary, nnz, dtype, gen):
    """GQA (8 q heads, 2 k heads), q/k/v slices of a fused qkv tensor, in place."""
    r = d if rotary == "full" else d // 2
    x = make_inputs(nnz, 8, 2, d, r, dtype, gen)
    run_and_check(x, is_neox, fused=False, gen=gen)


@pytest.mark.parametrize("nnz", [1023, 1024])
@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("fused", [False, True], ids=["inplace", "kv_write"])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_keep_tokens_limit(is_neox, fused, d, nnz, gen):
    """From 1024 tokens, heads of 128 or more load under an L2 evict_last policy (rope.cu,
    kKeepTokens): both sides of the limit, a head size on each side."""
    x = make_inputs(nnz, 8, 2, d, d, torch.bfloat16, gen)
    run_and_check(x, is_neox, fused=fused, gen=gen)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("nnz", [1, 4096])
@pytest.mark.parametrize("rotary", ["full", "partial"])
@pytest.mark.parametrize("d", HEAD_SIZES)
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_fused_kv_write(is_neox, d, rotary, nnz, dtype, gen):
    """k_buffer[cache_loc] = rotated key (pass-through part included), v_buffer[cache_loc] =
    value; no other row written."""
    r = d if rotary == "full" else d // 2
    x = make_inputs(nnz, 8, 2, d, r, dtype, gen)
    run_and_check(x, is_neox, fused=True, gen=gen)


@pytest.mark.parametrize("layout", ["qkv", "separate", "3d", "padded"])
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_layouts(layout, fused, is_neox, gen):
    x = make_inputs(300, 4, 2, 128, 128, torch.bfloat16, gen, layout=layout)
    run_and_check(x, is_neox, fused=fused, gen=gen)


@pytest.mark.parametrize("hq, hk, hv", [(1, 1, 1), (4, 4, 4), (5, 3, 3), (2, 4, 4), (7, 1, 2), (32, 8, 8), (64, 4, 4)])
@pytest.mark.parametrize("fused", [False, True])
def test_head_counts(hq, hk, hv, fused, gen):
    """MHA, GQA, more k than q heads, head counts that leave the last warp step partly
    empty, value heads != key heads."""
    x = make_inputs(513, hq, hk, 128, 64, torch.bfloat16, gen, hv=hv)
    run_and_check(x, True, fused=fused, gen=gen)


@pytest.mark.parametrize("d, r", [(16, 16), (48, 16), (80, 80), (96, 32), (128, 16), (192, 64), (512, 16)])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("fused", [False, True])
def test_other_head_and_rotary_sizes(d, r, is_neox, fused, gen):
    """Optional head sizes (multiples of 16 up to 512) and the smallest rotary dim."""
    x = make_inputs(77, 3, 2, d, r, torch.float16, gen)
    run_and_check(x, is_neox, fused=fused, gen=gen)


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_rope_table(is_neox, gen):
    """A real cos/sin table (positions up to 32k) rather than random values."""
    x = make_inputs(2048, 16, 4, 128, 128, torch.bfloat16, gen, max_pos=32768, random_cache=False)
    run_and_check(x, is_neox, fused=False, gen=gen)


@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("fused", [False, True])
def test_serving_shape(is_neox, fused, gen):
    """T = 32768 tokens, 32 q heads / 8 k heads, d = 128 (the goal shape of DESIGN.md 9)."""
    x = make_inputs(32768, 32, 8, 128, 128, torch.bfloat16, gen, max_pos=65536)
    run_and_check(x, is_neox, fused=fused, gen=gen)


@pytest.mark.parametrize("hq, hk, d, r", [(7, 1, 128, 64), (64, 8, 128, 128), (5, 3, 256, 256)])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("fused", [False, True])
def test_many_tokens_head_counts(hq, hk, d, r, is_neox, fused, gen):
    """From 16384 tokens on, a warp takes up to 8 heads a lane in several batches of loads:
    head counts whose steps do not split evenly, partial rotary, fused or not."""
    x = make_inputs(16500, hq, hk, d, r, torch.bfloat16, gen)
    run_and_check(x, is_neox, fused=fused, gen=gen)


@pytest.mark.parametrize("pos_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("how", ["wrapper", "op"])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_position_dtypes(pos_dtype, how, is_neox, gen):
    """int32 and int64 positions: the wrapper passes both to the op unconverted (int16 is
    converted with .long()); the op takes both."""
    x = make_inputs(1000, 8, 2, 128, 128, torch.float16, gen)
    x.positions = x.positions.to(pos_dtype)
    q_before, k_before = x.query.clone(), x.key.clone()
    if how == "wrapper":
        apply_rope_with_cos_sin_cache_inplace(x.positions, x.query, x.key, 128, x.cache, is_neox=is_neox)
    else:
        q3, k3 = x.query.view(1000, -1, 128), x.key.view(1000, -1, 128)
        _op()(q3, k3, q3, k3, x.cache, x.positions, not is_neox, False, None, None, None, None)
    check_rope(x, q_before, k_before, is_neox)


def test_position_int16_wrapper(gen):
    """Positions of another integer dtype are converted by the wrapper (.long()), as upstream's
    wrapper does; the op itself takes only int32 and int64."""
    x = make_inputs(100, 8, 2, 128, 128, torch.bfloat16, gen)
    x.positions = x.positions.to(torch.int16)
    q_before, k_before = x.query.clone(), x.key.clone()
    apply_rope_with_cos_sin_cache_inplace(x.positions, x.query, x.key, 128, x.cache)
    check_rope(x, q_before, k_before, True)


@pytest.mark.parametrize("pos_dtype", [torch.int32, torch.int64], ids=str)
def test_wrapper_launches_one_kernel(pos_dtype, gen):
    """The wrapper launches the RoPE kernel and nothing else for int32 and int64 positions
    (a cast of int32 positions would add a kernel: about 1.3 us in a CUDA graph at decode)."""
    x = make_inputs(16, 8, 2, 128, 128, torch.bfloat16, gen)
    x.positions = x.positions.to(pos_dtype)
    apply_rope_with_cos_sin_cache_inplace(x.positions, x.query, x.key, 128, x.cache)  # warm-up
    torch.cuda.synchronize()
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        apply_rope_with_cos_sin_cache_inplace(x.positions, x.query, x.key, 128, x.cache)
        torch.cuda.synchronize()
    kernels = [e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    assert len(kernels) == 1 and "rope" in kernels[0], kernels


@pytest.mark.parametrize("rotary", ["full", "partial"])
@pytest.mark.parametrize("which", ["both", "q", "k"])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
@pytest.mark.parametrize("fused", [False, True])
def test_out_of_place(rotary, which, is_neox, fused, gen):
    """q_rope / k_rope other tensors (NaN-poisoned): every element written, the pass-through
    part copied; q / k unchanged."""
    d, nnz = 128, 333
    r = d if rotary == "full" else 32
    x = make_inputs(nnz, 4, 2, d, r, torch.bfloat16, gen)
    q3, k3, v3 = (t.view(nnz, -1, d) for t in (x.query, x.key, x.value))
    q_before, k_before = x.query.clone(), x.key.clone()
    q_rope = torch.full_like(q3, NAN) if which in ("both", "q") else q3
    k_rope = torch.full_like(k3, NAN) if which in ("both", "k") else k3
    kv = (None, None, None, None)
    if fused:
        k_buffer, v_buffer, loc = kv_buffers(x, 2 * nnz, gen)
        kv = (v3, k_buffer.view(2 * nnz, -1, d), v_buffer.view(2 * nnz, -1, d), loc)
    _op()(q3, k3, q_rope, k_rope, x.cache, x.positions, not is_neox, False, *kv)
    eq, ek = expected_rope(x.positions, q_before, k_before, d, x.cache, is_neox)
    tol = elementwise_tol(torch.bfloat16)
    torch.testing.assert_close(q_rope.float(), eq, **tol)
    torch.testing.assert_close(k_rope.float(), ek, **tol)
    if which in ("both", "q"):
        assert torch.equal(x.query, q_before), "q was modified"
    if which in ("both", "k"):
        assert torch.equal(x.key, k_before), "k was modified"
    if fused:
        assert torch.equal(k_buffer[loc], k_rope.reshape(nnz, -1))
        assert torch.equal(v_buffer[loc], x.value)


# ---------------------------------------------------------------------------------------
# Out-of-range indices (API.md 1.4): skipped, never an illegal access


@pytest.mark.parametrize("pos_dtype", [torch.int32, torch.int64], ids=str)
@pytest.mark.parametrize("fused", [False, True])
def test_out_of_range_positions(pos_dtype, fused, gen):
    """A token whose position is outside [0, max_pos) is left untouched, and with the fused
    write its KV rows are not written."""
    nnz, d, max_pos = 64, 128, 100
    x = make_inputs(nnz, 8, 2, d, 64, torch.bfloat16, gen, max_pos=max_pos)
    pos = x.positions.clone()
    bad = [-1, max_pos, max_pos + 12345, -(2**31), 2**31 - 1]
    if pos_dtype == torch.int64:
        bad += [2**40, -(2**40)]
    pos[: len(bad)] = torch.tensor(bad, device="cuda")
    pos = pos.to(pos_dtype)
    q_before, k_before = x.query.clone(), x.key.clone()
    q3, k3 = x.query.view(nnz, -1, d), x.key.view(nnz, -1, d)
    kv = (None, None, None, None)
    if fused:
        rows = 2 * nnz
        k_buffer, v_buffer, loc = kv_buffers(x, rows, gen)
        kv = (x.value.view(nnz, -1, d), k_buffer.view(rows, -1, d), v_buffer.view(rows, -1, d), loc)
    _op()(q3, k3, q3, k3, x.cache, pos, False, False, *kv)
    check_rope(x, q_before, k_before, True, positions=pos)
    valid = (pos.long() >= 0) & (pos.long() < max_pos)
    assert torch.equal(x.query[~valid], q_before[~valid]) and torch.equal(x.key[~valid], k_before[~valid])
    if fused:
        check_kv_write(x, k_buffer, v_buffer, loc, valid)


def test_out_of_range_cache_loc(gen):
    """A cache location outside a buffer skips that buffer's row only; q and k are still
    rotated. k_buffer and v_buffer may have different row counts."""
    nnz, d = 64, 128
    x = make_inputs(nnz, 8, 2, d, 128, torch.bfloat16, gen)
    rows = 200
    k_buffer, v_buffer, loc = kv_buffers(x, rows, gen, v_rows=rows + 10)
    loc[:5] = torch.tensor([-1, rows, rows + 5, 2**40, -(2**40)], device="cuda")  # rows + 5: a v row only
    q_before, k_before = x.query.clone(), x.key.clone()
    arg = FusedSetKVBufferArg(x.value, k_buffer, v_buffer, None, None, loc)
    apply_rope_with_cos_sin_cache_inplace(x.positions, x.query, x.key, d, x.cache, fused_set_kv_buffer_arg=arg)
    check_rope(x, q_before, k_before, True)
    check_kv_write(x, k_buffer, v_buffer, loc, torch.ones(nnz, dtype=torch.bool, device="cuda"))
    assert torch.equal(v_buffer[rows + 5], x.value[2]), "v row inside v_buffer (outside k_buffer) not written"


def test_debug_env_raises(tmp_path):
    """SGL_KERNEL_DEBUG=1: an out-of-range position or cache location raises RuntimeError
    naming the op and the argument (API.md 1.4)."""
    code = (
        "import torch, sgl_kernel\n"
        "op = torch.ops.sgl_kernel.apply_rope_pos_ids_cos_sin_cache.default\n"
        "q = torch.randn(4, 2, 64, device='cuda', dtype=torch.bfloat16)\n"
        "k = torch.randn(4, 1, 64, device='cuda', dtype=torch.bfloat16)\n"
        "cache = torch.randn(10, 64, device='cuda')\n"
        "def expect(args, name):\n"
        "    try:\n"
        "        op(*args)\n"
        "    except RuntimeError as e:\n"
        "        msg = str(e)\n"
        "        assert msg.startswith('sgl_kernel.apply_rope_pos_ids_cos_sin_cache: ' + name), msg\n"
        "        return\n"
        "    raise SystemExit('no error for ' + name)\n"
        "pos = torch.tensor([0, 3, 10, 1], device='cuda')\n"
        "expect((q, k, q, k, cache, pos, False, False, None, None, None, None), 'pos_ids[2]')\n"
        "v = torch.randn(4, 1, 64, device='cuda', dtype=torch.bfloat16)\n"
        "kb = torch.zeros(8, 1, 64, device='cuda', dtype=torch.bfloat16)\n"
        "loc = torch.tensor([0, 1, 2, -1], device='cuda')\n"
        "pos = torch.tensor([0, 3, 9, 1], device='cuda')\n"
        "expect((q, k, q, k, cache, pos, False, False, v, kb, kb.clone(), loc), 'kv_cache_loc[3]')\n"
        "op(q, k, q, k, cache, pos, False, False, v, kb, kb.clone(), loc.abs())\n"
        "torch.cuda.synchronize()\n"
    )
    env = dict(os.environ, SGL_KERNEL_DEBUG="1")
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


# ---------------------------------------------------------------------------------------
# PDL, determinism, empty input, opcheck, CUDA graphs, torch.compile


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("is_neox", [True, False], ids=["neox", "gptj"])
def test_pdl_on_off_identical(fused, is_neox, gen):
    results = []
    base = make_inputs(2000, 8, 2, 128, 64, torch.bfloat16, gen)
    for enable_pdl in (None, True, False):
        x = Inputs(base.positions, base.query.clone(), base.key.clone(), base.value, base.cache, 128)
        arg = None
        if fused:
            k_buffer = torch.zeros(4096, 2 * 128, dtype=torch.bfloat16, device="cuda")
            v_buffer = torch.zeros_like(k_buffer)
            arg = FusedSetKVBufferArg(x.value, k_buffer, v_buffer, None, None, torch.arange(2000, device="cuda") * 2)
        apply_rope_with_cos_sin_cache_inplace(x.positions, x.query, x.key, 128, x.cache, is_neox, arg, enable_pdl)
        results.append((x.query, x.key) + ((arg.k_buffer, arg.v_buffer) if fused else ()))
    for other in results[1:]:
        for a, b in zip(results[0], other):
            assert torch.equal(a.view(torch.int16), b.view(torch.int16))  # bitwise


def test_deterministic(gen):
    base = make_inputs(4096, 32, 8, 128, 128, torch.bfloat16, gen)
    outs = []
    for _ in range(2):
        q, k = base.query.clone(), base.key.clone()
        apply_rope_with_cos_sin_cache_inplace(base.positions, q, k, 128, base.cache)
        outs.append((q, k))
    assert torch.equal(outs[0][0].view(torch.int16), outs[1][0].view(torch.int16))
    assert torch.equal(outs[0][1].view(torch.int16), outs[1][1].view(torch.int16))


@pytest.mark.parametrize("fused", [False, True])
def test_empty(fused):
    d = 128
    q = torch.empty(0, 4 * d, dtype=torch.bfloat16, device="cuda")
    k = torch.empty(0, 2 * d, dtype=torch.bfloat16, device="cuda")
    pos = torch.empty(0, dtype=torch.int64, device="cuda")
    cache = torch.randn(16, d, device="cuda")
    arg = None
    if fused:
        buf = torch.zeros(8, 2 * d, dtype=torch.bfloat16, device="cuda")
        arg = FusedSetKVBufferArg(torch.empty_like(k), buf, buf.clone(), None, None, pos.clone())
    apply_rope_with_cos_sin_cache_inplace(pos, q, k, d, cache, fused_set_kv_buffer_arg=arg)
    torch.cuda.synchronize()
    if fused:
        assert (arg.k_buffer == 0).all() and (arg.v_buffer == 0).all()


def test_empty_out_of_place_views():
    """The op out of place with no tokens: empty outputs share the empty inputs' data pointer
    (nothing is allocated) with other strides, which is not the aliasing the in-place check
    guards against (found by tests/fuzz: it used to raise "q_rope must either be q itself")."""
    d = 128
    q = torch.empty(0, 2, d, dtype=torch.bfloat16, device="cuda")
    k = torch.empty(0, 1, d, dtype=torch.bfloat16, device="cuda")
    q_rope = torch.empty(0, 2, 2 * d, dtype=torch.bfloat16, device="cuda")[..., :d]
    k_rope = torch.empty(0, 1, 3 * d, dtype=torch.bfloat16, device="cuda")[..., :d]
    assert q_rope.data_ptr() == q.data_ptr() and q_rope.stride() != q.stride()
    pos = torch.empty(0, dtype=torch.int32, device="cuda")
    cache = torch.randn(16, d, device="cuda")
    _op()(q, k, q_rope, k_rope, cache, pos, True, False, None, None, None, None)
    torch.cuda.synchronize()


@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("dtype, d, r", [(torch.bfloat16, 128, 128), (torch.float16, 64, 32)], ids=str)
def test_opcheck(fused, dtype, d, r, gen):
    """Out of place (q_rope, k_rope distinct), so that q and k are really read-only."""
    nnz = 16
    x = make_inputs(nnz, 4, 2, d, r, dtype, gen)
    q3, k3, v3 = (t.view(nnz, -1, d) for t in (x.query, x.key, x.value))
    kv = (None, None, None, None)
    if fused:
        k_buffer, v_buffer, loc = kv_buffers(x, 40, gen)
        kv = (v3, k_buffer.view(40, -1, d), v_buffer.view(40, -1, d), loc)
    args = (q3, k3, torch.empty_like(q3), torch.empty_like(k3), x.cache, x.positions, False, True, *kv)
    torch.library.opcheck(_op(), args)


@pytest.mark.parametrize("nnz", [1, 16, 128])
@pytest.mark.parametrize("fused", [False, True])
@pytest.mark.parametrize("enable_pdl", [None, True])
def test_cuda_graph(nnz, fused, enable_pdl, gen):
    """Capture the wrapper (in place) with static tensors, then replay on new data written
    into them."""
    d = 128
    x = make_inputs(nnz, 32, 8, d, d, torch.bfloat16, gen, max_pos=4096)
    qkv = torch.empty(nnz, 48 * d, dtype=torch.bfloat16, device="cuda")
    x.query, x.key, x.value = qkv.split([32 * d, 8 * d, 8 * d], dim=-1)
    rows = 4 * nnz
    k_buffer = torch.empty(rows, 8 * d, dtype=torch.bfloat16, device="cuda")
    v_buffer = torch.empty_like(k_buffer)
    loc = torch.zeros(nnz, dtype=torch.int64, device="cuda")
    arg = FusedSetKVBufferArg(x.value, k_buffer, v_buffer, None, None, loc) if fused else None

    def step():
        apply_rope_with_cos_sin_cache_inplace(x.positions, x.query, x.key, d, x.cache, True, arg, enable_pdl)

    qkv.normal_(generator=gen)
    step()  # warm-up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for _ in range(2):
        qkv.copy_(torch.randn(qkv.shape, dtype=qkv.dtype, device="cuda", generator=gen))
        x.positions.copy_(torch.randint(0, 4096, (nnz,), device="cuda", generator=gen))
        loc.copy_(torch.randperm(rows, device="cuda", generator=gen)[:nnz])
        k_buffer.fill_(NAN)
        v_buffer.fill_(NAN)
        q_before, k_before = x.query.clone(), x.key.clone()
        graph.replay()
        torch.cuda.synchronize()
        check_rope(x, q_before, k_before, True)
        if fused:
            check_kv_write(x, k_buffer, v_buffer, loc, torch.ones(nnz, dtype=torch.bool, device="cuda"))


@pytest.mark.parametrize("fused", [False, True])
def test_torch_compile(fused, gen):
    """The wrapper inside torch.compile(fullgraph=True) on slices of a fused qkv tensor."""
    nnz, d = 64, 128
    x = make_inputs(nnz, 8, 2, d, 64, torch.bfloat16, gen)
    rows = 2 * nnz
    k_buffer, v_buffer, loc = kv_buffers(x, rows, gen)

    def fn(pos, q, k, v, cache, k_buffer, v_buffer, loc):
        arg = FusedSetKVBufferArg(v, k_buffer, v_buffer, None, None, loc) if fused else None
        apply_rope_with_cos_sin_cache_inplace(pos, q, k, d, cache, False, arg)
        return q.sum(dim=-1)

    compiled = torch.compile(fn, fullgraph=True)
    q_before, k_before = x.query.clone(), x.key.clone()
    out = compiled(x.positions, x.query, x.key, x.value, x.cache, k_buffer, v_buffer, loc)
    check_rope(x, q_before, k_before, False)
    torch.testing.assert_close(out.float(), x.query.float().sum(dim=-1), rtol=1e-2, atol=1e-1)
    if fused:
        check_kv_write(x, k_buffer, v_buffer, loc, torch.ones(nnz, dtype=torch.bool, device="cuda"))


def test_matches_torch_baseline(gen):
    """The benchmark's torch baseline (rope_torch) and the op agree."""
    x = make_inputs(256, 8, 2, 128, 128, torch.bfloat16, gen)
    q, k = x.query.clone(), x.key.clone()
    rope_torch(x.positions, q, k, 128, x.cache, True)
    apply_rope_with_cos_sin_cache_inplace(x.positions, x.query, x.key, 128, x.cache, True)
    torch.testing.assert_close(x.query, q, **elementwise_tol(torch.bfloat16))
    torch.testing.assert_close(x.key, k, **elementwise_tol(torch.bfloat16))


# ---------------------------------------------------------------------------------------
# Bad inputs through torch.ops (the C++ checks protect direct callers too)


def _valid_args(fused: bool = True, d: int = 128, nnz: int = 8):
    q = torch.randn(nnz, 4, d, dtype=torch.bfloat16, device="cuda")
    k = torch.randn(nnz, 2, d, dtype=torch.bfloat16, device="cuda")
    v = torch.randn(nnz, 2, d, dtype=torch.bfloat16, device="cuda")
    cache = torch.randn(32, d, device="cuda")
    pos = torch.randint(0, 32, (nnz,), device="cuda")
    kb = torch.zeros(16, 2, d, dtype=torch.bfloat16, device="cuda")
    vb = torch.zeros(16, 2, d, dtype=torch.bfloat16, device="cuda")
    loc = torch.arange(nnz, device="cuda")
    args = dict(q=q, k=k, q_rope=q, k_rope=k, cos_sin_cache=cache, pos_ids=pos, interleave=False, enable_pdl=False,
                v=v, k_buffer=kb, v_buffer=vb, kv_cache_loc=loc)
    if not fused:
        args.update(v=None, k_buffer=None, v_buffer=None, kv_cache_loc=None)
    return args


def _call(args: dict) -> None:
    _op()(*args.values())


def _misaligned(shape, dtype=torch.bfloat16):
    n = 1
    for s in shape:
        n *= s
    t = torch.randn(n + 1, dtype=dtype, device="cuda")[1:].view(*shape)
    assert t.data_ptr() % 16 != 0
    return t


BAD_CASES = {
    # name: (changes, argument named, fragments)
    "q_fp32": (lambda a: a.update(q=a["q"].float(), q_rope=a["q"].float()), "q", ["dtype", "torch.float32"]),
    "q_2d": (lambda a: a.update(q=a["q"].flatten(1), q_rope=a["q"].flatten(1)), "q", ["3-D"]),
    "q_last_dim_strided": (lambda a: a.update(q=torch.randn(8, 4, 256, dtype=torch.bfloat16, device="cuda")[..., ::2],
                                              q_rope=None), "q", ["contiguous", "stride"]),
    "head_size_72": (lambda a: a.update(**{n: a[n][..., :72].contiguous() for n in ("q", "k", "q_rope", "k_rope")},
                                        cos_sin_cache=a["cos_sin_cache"][:, :64].contiguous()), "q", ["head_size", "72"]),
    "head_size_528": (lambda a: a.update(q=torch.randn(8, 4, 528, dtype=torch.bfloat16, device="cuda")),
                      "q", ["head_size", "528"]),
    "k_dtype": (lambda a: a.update(k=a["k"].half(), k_rope=a["k"].half()), "k", ["dtype"]),
    "k_tokens": (lambda a: a.update(k=a["k"][:7], k_rope=a["k"][:7]), "k", ["shape[0]"]),
    "k_head_size": (lambda a: a.update(k=a["k"][..., :64], k_rope=a["k"][..., :64]), "k", ["shape[2]"]),
    "q_rope_shape": (lambda a: a.update(q_rope=a["q"][:, :3]), "q_rope", []),
    "q_rope_strides": (lambda a: a.update(q_rope=a["q"].as_strided((8, 4, 128), (256, 128, 1))), "q_rope",
                       ["itself"]),
    "q_misaligned": (lambda a: a.update(q=_misaligned((8, 4, 128)), q_rope=None), "q", ["16-byte aligned"]),
    "k_rope_misaligned": (lambda a: a.update(k_rope=_misaligned((8, 2, 128))), "k_rope", ["16-byte aligned"]),
    "cache_fp16": (lambda a: a.update(cos_sin_cache=a["cos_sin_cache"].half()), "cos_sin_cache", ["dtype"]),
    "cache_cpu": (lambda a: a.update(cos_sin_cache=a["cos_sin_cache"].cpu()), "cos_sin_cache", ["device"]),
    "cache_1d": (lambda a: a.update(cos_sin_cache=a["cos_sin_cache"].flatten()), "cos_sin_cache", ["2-D"]),
    "cache_strided": (lambda a: a.update(cos_sin_cache=a["cos_sin_cache"][::2]), "cos_sin_cache", ["contiguous"]),
    "rotary_24": (lambda a: a.update(cos_sin_cache=a["cos_sin_cache"][:, :24].contiguous()), "cos_sin_cache",
                  ["rotary_dim", "24"]),
    "rotary_above_head_size": (lambda a: a.update(cos_sin_cache=torch.randn(32, 144, device="cuda")),
                               "cos_sin_cache", ["rotary_dim", "144"]),
    "pos_float": (lambda a: a.update(pos_ids=a["pos_ids"].float()), "pos_ids", ["dtype"]),
    "pos_length": (lambda a: a.update(pos_ids=a["pos_ids"][:5]), "pos_ids", ["shape[0]"]),
    "pos_2d": (lambda a: a.update(pos_ids=a["pos_ids"][:, None]), "pos_ids", ["1-D"]),
    "k_buffer_missing": (lambda a: a.update(k_buffer=None), "k_buffer", ["must be given"]),
    "v_missing": (lambda a: a.update(v=None), "v", ["must be given"]),
    "loc_missing": (lambda a: a.update(kv_cache_loc=None), "kv_cache_loc", ["must be given"]),
    "loc_int32": (lambda a: a.update(kv_cache_loc=a["kv_cache_loc"].int()), "kv_cache_loc", ["dtype", "torch.int64"]),
    "loc_length": (lambda a: a.update(kv_cache_loc=a["kv_cache_loc"][:3]), "kv_cache_loc", ["shape[0]"]),
    "v_dtype": (lambda a: a.update(v=a["v"].half()), "v", ["dtype"]),
    "v_tokens": (lambda a: a.update(v=a["v"][:4]), "v", ["shape[0]"]),
    "k_buffer_heads": (lambda a: a.update(k_buffer=torch.zeros(16, 3, 128, dtype=torch.bfloat16, device="cuda")),
                       "k_buffer", ["shape[1]"]),
    "v_buffer_dtype": (lambda a: a.update(v_buffer=a["v_buffer"].half()), "v_buffer", ["dtype"]),
    "v_buffer_misaligned": (lambda a: a.update(v_buffer=_misaligned((16, 2, 128))), "v_buffer", ["16-byte aligned"]),
}


@pytest.mark.parametrize("case", sorted(BAD_CASES))
def test_bad_input(case):
    change, arg, fragments = BAD_CASES[case]
    args = _valid_args()
    change(args)
    if args["q_rope"] is None:
        args["q_rope"] = args["q"]
    with raises_op_error(OP, arg, *fragments):
        _call(args)


def _huge_args(nnz: int, hq: int, hk: int, d: int = 512, q_offset: int = 0, dense_out: bool = False) -> dict:
    """Arguments for nnz tokens of hq + hk heads of d, out of place, without the KV write:
    every token and head of q, k, q_rope and k_rope is one row of memory (zero strides).
    dense_out: q_rope and k_rope claim dense memory instead (fake_extent, fp16), for the checks
    after the binding's refusal of written tensors whose elements share memory."""
    dtype = torch.float16 if dense_out else torch.bfloat16
    q, q_rope = one_row_view((nnz, hq, d), dtype, q_offset), one_row_view((nnz, hq, d), dtype)
    k, k_rope = one_row_view((nnz, hk, d), dtype), one_row_view((nnz, hk, d), dtype)
    if dense_out:
        q_rope, k_rope = fake_extent((nnz, hq, d), dtype), fake_extent((nnz, hk, d), dtype)
    return dict(q=q, k=k, q_rope=q_rope, k_rope=k_rope,
                cos_sin_cache=torch.zeros(4, d, device="cuda"), pos_ids=torch.zeros(nnz, dtype=torch.int64, device="cuda"),
                interleave=False, enable_pdl=False, v=None, k_buffer=None, v_buffer=None, kv_cache_loc=None)


def test_size_limit_messages():
    """Refused before any kernel runs, with the limit named: more than 2^30 - 1 heads (the
    launcher counts them in int32; a binding check), and a grid of 2^32 - 4 warps or more (a
    32-bit warp index; the launcher's plan refuses it, the binding names it). 16 tokens of
    2^30 - 1 heads of 512 take 4 heads a warp: 16 * 2^28 = 2^32 warps."""
    heads = 2**30 - 1
    with raises_op_error(OP, "q", "(the heads) must be at most 1073741823", f"got {heads + 1}"):
        _call(_huge_args(16, 2**29, 2**29))
    with raises_op_error(OP, "q", "below 2^32 - 4 warps", f"16 tokens of {heads} heads of 512 elements"):
        _call(_huge_args(16, 2**29, 2**29 - 1, dense_out=True))
    with raises_op_error(OP, "q_rope", "share memory", "stride 0"):
        _call(_huge_args(16, 2**29, 2**29 - 1))


def test_size_limit_boundary():
    """2^30 - 1 heads of one token pass both limits: the next check, alignment, fails."""
    with raises_op_error(OP, "q", "16-byte aligned"):
        _call(_huge_args(1, 2**29, 2**29 - 1, q_offset=1))


def test_q_on_cpu():
    args = _valid_args(fused=False)
    args.update(q=args["q"].cpu(), q_rope=args["q"].cpu())
    with raises_op_error(OP, "q", "CUDA tensor"):
        _call(args)


def test_wrapper_errors():
    """The wrapper's own checks (API.md 2.1.3): ValueError for a non-fp32 cache,
    AssertionError for k_scale / v_scale / a non-int64 cache_loc."""
    a = _valid_args()
    q, k, pos = a["q"].flatten(1), a["k"].flatten(1), a["pos_ids"]
    with pytest.raises(ValueError, match="cos_sin_cache"):
        apply_rope_with_cos_sin_cache_inplace(pos, q, k, 128, a["cos_sin_cache"].half())
    kb, vb, v, loc = a["k_buffer"].flatten(1), a["v_buffer"].flatten(1), a["v"].flatten(1), a["kv_cache_loc"]
    for arg, match in (
        (FusedSetKVBufferArg(v, kb, vb, 1.0, None, loc), "k_scale"),
        (FusedSetKVBufferArg(v, kb, vb, None, 0.5, loc), "v_scale"),
        (FusedSetKVBufferArg(v, kb, vb, None, None, loc.int()), "cache_loc"),
    ):
        with pytest.raises(AssertionError, match=match):
            apply_rope_with_cos_sin_cache_inplace(pos, q, k, 128, a["cos_sin_cache"], fused_set_kv_buffer_arg=arg)
    # the op's own checks surface through the wrapper as RuntimeError
    with raises_op_error(OP, "cos_sin_cache", "rotary_dim"):
        apply_rope_with_cos_sin_cache_inplace(pos, q, k, 128, a["cos_sin_cache"][:, :24].contiguous())


def test_self_check():
    sgl_kernel.elementwise.self_checks()[OP]()
