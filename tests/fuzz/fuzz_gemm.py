# SPDX-License-Identifier: Apache-2.0
"""Fuzzers of the GEMM family (API.md 2.3): fp8_scaled_mm, int8_scaled_mm,
fp8_blockwise_scaled_mm, bmm_fp8, awq_dequantize, dsv3_router_gemm, dsv3_fused_a_gemm.

The shapes concentrate where the launchers change kernels:

* fp8 / int8_scaled_mm (csrc/gemm/sm90/scaled_mm_dispatch.cu): M at 8 / 16 / 32 / 48 / 64 /
  128 / 256 / 512 / 1024 / 2048 / 4096 and either side (small_m, decode, swap A/B, ping-pong,
  cooperative), N at 4096 / 8192 / 16384 (``wide_n``), K at 8192 (``deep_k``), the int8
  cooperative tile count against the SM count, K past 2^17 at decode M (small_m only); the
  CUTLASS 2.x path forced with SGL_KERNEL_SCALED_MM_BACKEND=sm8x (tiles by M 32 / 128 and the
  128-row tile count against the SM count); every sm90 configuration forced through
  SGL_KERNEL_SCALED_MM_CONFIG with cluster splits and scheduler swizzles. N off the tiles (a
  multiple of 8), K a multiple of 16, per-row or per-tensor scales as [X] or [X, 1], scales
  and bias misaligned (the binding's copies), strided and offset operands.
* fp8_blockwise_scaled_mm: M at 64 (ping-pong / cooperative) and 1024 (swizzle), M % 4
  (the padded TMA rows of scales_a), odd and even k-block counts, every scales layout the
  binding reads in place or copies, both configurations forced.
* bmm_fp8: batch, m, k, n (multiples of 16) around cuBLASLt's tile sizes, the three fp8 pairs,
  padded, offset (16-byte multiples, so cuBLASLt's alignment hint changes), head-major and
  batch-broadcast operands, ``out`` allocated or given at an offset.
* awq_dequantize: words per row around the block width (32..256), K % 4 (rows per thread),
  group sizes that cross a thread's rows, K past the grid's row chunks (the grid-stride loop),
  misaligned or odd-stride scales (the scalar path).
* dsv3_*: M 1..16 (8 / 9: the second accumulator row block), E = 256 / 384, fp32 and bf16
  router output, strided operands and outputs.

Every case checks against the references of ``tests/gemm`` with the tolerances of the GEMM
tests, checks that a second call gives bitwise the same output (API.md 1.2), that the inputs
(with the storage around them) are unchanged, and that given outputs are written only inside
their view. Outputs are prefilled with NaN: given outputs directly, op-allocated ones by
freeing a NaN-filled block of the same size just before the call (the caching allocator hands
it out again; best effort).
"""

from __future__ import annotations

import contextlib
import math
import os
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import torch

import sgl_kernel
from tests.fuzz.common import Case, Fuzzer, describe
from tests.gemm import ref_awq, ref_bmm_fp8, ref_dsv3, ref_gemm

FP8 = torch.float8_e4m3fn
OUT_DTYPES = (torch.bfloat16, torch.float16)

# Tuning variables of the scaled GEMMs (gemm_ops.cc); every case sets or clears them all.
_SMM_ENV = ("SGL_KERNEL_SCALED_MM_BACKEND", "SGL_KERNEL_SCALED_MM_CONFIG", "SGL_KERNEL_SCALED_MM_SPLITS",
            "SGL_KERNEL_SCALED_MM_SWIZZLE")
_BW_ENV = ("SGL_KERNEL_BLOCKWISE_MM_CONFIG", "SGL_KERNEL_BLOCKWISE_MM_SWIZZLE")


# ---------------------------------------------------------------------------------------
# Shared helpers


def _cc() -> int:
    major, minor = torch.cuda.get_device_capability()
    return 10 * major + minor


def _sm_count() -> int:
    return torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _dim(case: Case, points: Sequence[int], mult: int, hi: int, p_point: float = 0.6) -> int:
    """A multiple of ``mult`` in [mult, hi]: next to one of ``points`` (one ``mult`` either
    side) with probability ``p_point``, else log-uniform."""
    if case.coin(p_point):
        v = case.choice(points) + mult * case.rng.randint(-1, 1)
    else:
        v = mult * case.log_int(1, max(1, hi // mult))
    top = max(mult, hi - hi % mult)
    return min(max(mult, v - v % mult), top)


def _fit(sizes: Dict[str, int], mults: Dict[str, int], order: Sequence[str],
         budgets: Sequence[Tuple[Tuple[str, ...], int]]) -> Dict[str, int]:
    """``sizes`` lowered, dimension by dimension in ``order``, until the product of each
    budget's dimensions is within its limit (a dimension stays a positive multiple of its
    ``mults``; a zero stays zero)."""
    s = dict(sizes)
    for name in order:
        for names, limit in budgets:
            if name not in names:
                continue
            other = math.prod(max(s[o], 1) for o in names if o != name)
            cap = limit // other
            cap -= cap % mults[name]
            s[name] = min(s[name], max(mults[name], cap))
    return s


def _filled(numel: int, dtype: torch.dtype, device) -> torch.Tensor:
    """A flat tensor of markers: NaN for floating types (0x7F bytes for the fp8 types, their
    NaN), 0x7F for int8, -1 for wider integers."""
    if dtype.itemsize == 1:
        return torch.full((numel,), 0x7F, dtype=torch.uint8, device=device).view(dtype)
    if dtype.is_floating_point:
        return torch.full((numel,), float("nan"), dtype=dtype, device=device)
    return torch.full((numel,), -1, dtype=dtype, device=device)


def _embed(t: torch.Tensor, strides: Sequence[int], offset: int = 0, slack: int = 0) -> torch.Tensor:
    """A copy of ``t`` with the given (non-overlapping) strides, ``offset`` elements into a
    storage of its own that ends ``slack`` elements after the last element of the view; every
    other element of the storage is a marker (``_filled``)."""
    span = 1 + sum((size - 1) * st for size, st in zip(t.shape, strides)) if t.numel() else 0
    base = _filled(offset + span + slack, t.dtype, t.device)
    view = base.as_strided(tuple(t.shape), tuple(strides), offset)
    view.copy_(t)
    return view


def _rows(t: torch.Tensor, offset: int = 0, pad: int = 0, slack: int = 0) -> torch.Tensor:
    """A 2-D ``t`` with rows ``t.shape[1] + pad`` elements apart, ``offset`` elements in."""
    return _embed(t, (t.shape[1] + pad, 1), offset, slack)


def _vec(t: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """A contiguous ``t`` (any rank) at ``offset`` elements into a marker-filled storage."""
    strides, acc = [], 1
    for size in reversed(t.shape):
        strides.append(acc)
        acc *= max(size, 1)
    return _embed(t, tuple(reversed(strides)), offset)


def _poisoned(shape: Sequence[int], strides: Sequence[int], offset: int, dtype: torch.dtype) -> torch.Tensor:
    """An output view of ``shape`` with ``strides`` into a NaN-filled storage."""
    zeros = torch.zeros(tuple(shape), dtype=dtype, device="cuda")
    view = _embed(zeros, strides, offset)
    view.fill_(float("nan"))
    return view


def _storage_bytes(t: torch.Tensor) -> torch.Tensor:
    return torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage())


def _snapshot(**tensors: Optional[torch.Tensor]) -> List[Tuple[str, torch.Tensor, torch.Tensor]]:
    """The bytes of each tensor's whole storage, to check that the op left them alone."""
    return [(name, t, _storage_bytes(t).clone()) for name, t in tensors.items() if t is not None]


def _assert_unchanged(snap: List[Tuple[str, torch.Tensor, torch.Tensor]]) -> None:
    for name, t, old in snap:
        now = _storage_bytes(t)
        if not torch.equal(now, old):
            n = int((now != old).sum())
            raise AssertionError(f"input {name} (or the storage around its view) changed: {n} bytes differ")


def _assert_only_view_written(view: torch.Tensor) -> None:
    """Every element of the view's storage outside the view is still NaN."""
    base = torch.empty(0, dtype=view.dtype, device=view.device).set_(view.untyped_storage())
    rest = base.clone()
    rest.as_strided(tuple(view.shape), view.stride(), view.storage_offset()).fill_(float("nan"))
    if not torch.isnan(rest).all():
        raise AssertionError(f"{int((~torch.isnan(rest)).sum())} elements written outside the output view")


def _bits(t: torch.Tensor) -> torch.Tensor:
    """``t`` as integers of its width, for bitwise comparisons (NaN included)."""
    return t.contiguous().view({1: torch.uint8, 2: torch.int16, 4: torch.int32}[t.element_size()])


def _assert_same_bits(first: torch.Tensor, second: torch.Tensor) -> None:
    if not torch.equal(_bits(first), _bits(second)):
        n = int((_bits(first) != _bits(second)).sum())
        raise AssertionError(f"not deterministic: a second call differs in {n} of {first.numel()} elements")


def _poison_next_alloc(nbytes: int) -> None:
    """Free a block of ``nbytes`` 0xFF bytes (NaN in fp16, bf16 and fp32) just before an op
    allocates its output of that size: the caching allocator hands the same block out again,
    so an element the op leaves unwritten reads NaN (best effort)."""
    if nbytes > 0:
        torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(0xFF)


@contextlib.contextmanager
def _env(values: Dict[str, Optional[str]]):
    """Environment variables set (None: removed) for the duration, then restored."""
    old = {k: os.environ.get(k) for k in values}
    try:
        for k, v in values.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        yield
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def _run(desc: str, body: Callable[[], None]) -> str:
    """Run a case's checks; any failure becomes an AssertionError that names the case."""
    try:
        body()
    except AssertionError as e:
        raise AssertionError(f"{desc}: {e}") from None
    except Exception as e:  # noqa: BLE001 - an op error on an accepted input is a failure too
        raise AssertionError(f"{desc}: {type(e).__name__}: {e}") from e
    return desc


def _env_desc(env: Dict[str, Optional[str]]) -> str:
    set_vars = [f"{k.removeprefix('SGL_KERNEL_')}={v}" for k, v in env.items() if v is not None]
    return " [" + " ".join(set_vars) + "]" if set_vars else ""


# ---------------------------------------------------------------------------------------
# fp8_scaled_mm / int8_scaled_mm

# M where the sm90 heuristic or the sm8x tiles change (decode classes 8 / 16 / 32 / 48 / 64,
# swap A/B up to 128, ping-pong up to 256 / 512, prefill classes at 1024 / 2048 / 4096).
_SMM_M = (1, 2, 8, 9, 16, 17, 32, 33, 48, 49, 64, 65, 128, 129, 256, 257, 512, 513, 1024, 1025, 2048, 2049,
          4096, 4097, 8192)
# N: the 4096 / 8192 limits of small_m and swap A/B, wide_n at 16384, and tile edges.
_SMM_N = (8, 16, 24, 64, 128, 136, 256, 264, 1024, 4096, 6144, 8192, 16384)
# K: one tile, deep_k at 8192, and layer depths.
_SMM_K = (16, 32, 48, 64, 128, 144, 512, 4096, 8192, 14336, 16384, 28672)
# K of the fp8 wgmma paths stays within what the tests measured the accumulation error on
# (ref_gemm.ACC_TOL: K up to 28672); deeper K only where the small_m kernel runs.
_SMM_MAX_K = 28672

_CONFIG_NAMES: List[str] = []


def _config_names() -> List[str]:
    """The sm90 configuration names (the op's own list), asked once."""
    if not _CONFIG_NAMES:
        with _env({k: None for k in _SMM_ENV}):
            _CONFIG_NAMES.extend(ref_gemm.scaled_mm_config_names())
    return _CONFIG_NAMES


def _scaled_mm_shape(case: Case, kind: str, mode: str, sm90: bool) -> Tuple[int, int, int, str]:
    """(M, N, K, regime) for one case."""
    e = case.max_elems
    budgets = ((("m", "k"), 2 * e), (("n", "k"), 2 * e), (("m", "n"), 8 * e), (("m", "n", "k"), 512 * e))
    mults = {"m": 1, "n": 8, "k": 16}
    r = case.rng.random()
    sms = _sm_count()
    if r < 0.02:
        regime = "empty"
        m, n, k = 0, _dim(case, _SMM_N, 8, 4096), _dim(case, _SMM_K, 16, 4096)
    elif r < 0.10 and mode != "config":
        # K past 2^17 at decode M: only the small_m kernel (any N <= 8192) on sm90, or sm8x.
        regime = "deep_k"
        m = case.near((1, 8, 9, 16), 1, 16) if case.coin() else case.rng.randint(1, 16)
        k = 16 * case.near((1 << 13, 1 << 14), 1, 1 << 14, spread=2) if case.coin(0.7) else \
            16 * case.rng.randint((1 << 13) + 1, 1 << 14)
        k = min(k, max(16, (2 * e // m) // 16 * 16))
        n = 8 * case.rng.randint(1, max(1, min(8, 2 * e // (8 * k))))
        return m, n, k, regime
    elif r < 0.18 and mode == "auto" and sm90:
        # deep_k (K >= 8192) at N <= 4096 and 16 < M <= 48 (fp8) / 64 (int8): the TMA + wgmma
        # decode kernel, and the swap / ping-pong kernels either side of its M range.
        regime = "decode"
        m = case.near((16, 17, 32, 33, 48, 49, 64, 65), 1, 80) if case.coin(0.7) else case.rng.randint(17, 64)
        k = case.choice((8192, 8192 + 16, 14336)) if case.coin(0.5) else 16 * case.rng.randint(512, 1792)
        n = _dim(case, (8, 64, 128, 256, 264, 512, 1024, 4096), 8, 4096)
    elif r < 0.30 and (mode == "sm8x" or not sm90 or (kind == "int8" and mode == "auto")):
        # Tile count against the SM count: int8 sm90 cooperative 128x128 / 128x256 for
        # 256 < M < 1024 (256-wide tiles), sm8x 64x128 / large tiles for M > 128.
        regime = "tiles"
        tile_n = 128 if (kind == "fp8" and (mode == "sm8x" or not sm90)) else 256
        mt = case.rng.randint(3, 8) if (mode == "auto" and sm90) else case.rng.randint(2, 12)
        m = 128 * (mt - 1) + case.rng.randint(1, 128)
        if mode == "auto" and sm90:
            m = min(m, 1023)
        nt = max(1, (sms - 1) // mt + case.rng.randint(0, 1))
        n = tile_n * (nt - 1) + 8 * case.rng.randint(1, tile_n // 8)
        k = _dim(case, _SMM_K, 16, _SMM_MAX_K)
    else:
        regime = "grid"
        hi_m = 1024 if mode == "config" else 8192
        m = case.rows(hi_m, points=tuple(p for p in _SMM_M if p <= hi_m))
        n = _dim(case, _SMM_N, 8, 16384)
        k = _dim(case, _SMM_K, 16, _SMM_MAX_K)
    s = _fit({"m": m, "n": n, "k": k}, mults, ("k", "n", "m"), budgets)
    return s["m"], s["n"], s["k"], regime


def _scales(case: Case, count: int, per_tensor: bool, as_column: bool, divide: float) -> torch.Tensor:
    """``count`` fp32 scales (random per element, or one value repeated), [count] or
    [count, 1]."""
    if per_tensor:
        v = ref_gemm.random_scales(1, case.gen) / divide
        s = v.expand(count).clone()
    else:
        s = ref_gemm.random_scales(count, case.gen) / divide
    return s.reshape(count, 1) if as_column else s


def _scaled_mm_case(case: Case, kind: str) -> str:
    name = f"{kind}_scaled_mm"
    cc = _cc()
    need = 89 if kind == "fp8" else 80
    if cc < need:
        return f"skip {name}: sm_{cc} has no kernel (needs sm_{need})"
    sm90 = cc == 90
    r = case.rng.random()
    mode = "config" if sm90 and r < 0.2 else "sm8x" if sm90 and r < 0.35 else "auto"
    m, n, k, regime = _scaled_mm_shape(case, kind, mode, sm90)

    env: Dict[str, Optional[str]] = {v: None for v in _SMM_ENV}
    if mode == "sm8x":
        env["SGL_KERNEL_SCALED_MM_BACKEND"] = "sm8x"
    elif mode == "config":
        env["SGL_KERNEL_SCALED_MM_CONFIG"] = case.choice([c for c in _config_names() if c.startswith(kind + "_")])
        env["SGL_KERNEL_SCALED_MM_SPLITS"] = case.choice((None, "0", "1", "2", "3", "4", "8"))
        env["SGL_KERNEL_SCALED_MM_SWIZZLE"] = case.choice((None, "1", "2", "4", "8"))

    out_dtype = case.choice(OUT_DTYPES)
    with_bias = case.coin()
    gen = case.gen
    if kind == "fp8":
        a0, w0 = ref_gemm.random_fp8((m, k), gen), ref_gemm.random_fp8((n, k), gen)
        divide = 1.0
    else:
        a0, w0 = ref_gemm.random_int8((m, k), gen), ref_gemm.random_int8((n, k), gen)
        divide = 127.0  # int8 codes reach +-128: keep fp16 outputs finite, as the tests do
    sa_tensor, sb_tensor = case.coin(0.25), case.coin(0.25)
    sa0 = _scales(case, m, sa_tensor, case.coin(0.3), divide)
    sb0 = _scales(case, n, sb_tensor, case.coin(0.3), divide)
    bias0 = case.randn((n,), out_dtype, scale=4.0) if with_bias else None

    # Layouts: 16-byte aligned operands with row strides of 16-element multiples (the API's
    # requirement), scales and bias at any element offset (the binding copies misaligned
    # scales_b / bias; scales_a is read at any alignment).
    def operand(t: torch.Tensor) -> torch.Tensor:
        if case.coin(0.5):
            return t.clone()
        if t.shape[0] == 1 and case.coin(0.3):  # one row: its stride is never used
            return _rows(t, 16 * case.rng.randint(0, 2), case.rng.randint(1, 15))
        return _rows(t, 16 * case.rng.randint(0, 4), 16 * case.rng.randint(0, 3))

    def small(t: Optional[torch.Tensor], most: int) -> Optional[torch.Tensor]:
        if t is None or case.coin(0.6):
            return t
        return _vec(t, case.rng.randint(1, most))

    a = operand(a0)
    b = operand(w0).t()
    sa, sb, bias = small(sa0, 3), small(sb0, 3), small(bias0, 7)
    op = sgl_kernel.fp8_scaled_mm if kind == "fp8" else sgl_kernel.int8_scaled_mm

    desc = (f"{name} M={m} N={n} K={k} out={_dtype_name(out_dtype)} bias={with_bias} "
            f"scales_a={'tensor' if sa_tensor else 'row'}:{describe(sa)} "
            f"scales_b={'tensor' if sb_tensor else 'row'}:{describe(sb)} mat_a={describe(a)} mat_b={describe(b)}"
            f"{' bias=' + describe(bias) if bias is not None else ''} regime={regime} backend={mode}{_env_desc(env)}")

    def body() -> None:
        snap = _snapshot(mat_a=a, mat_b=b, scales_a=sa, scales_b=sb, bias=bias)
        with _env(env):
            _poison_next_alloc(m * n * 2)
            out = op(a, b, sa, sb, out_dtype, bias)
            again = op(a, b, sa, sb, out_dtype, bias)
        assert out.shape == (m, n) and out.is_contiguous(), f"output {describe(out)}"
        ref = ref_gemm.scaled_mm_ref(a, b, sa, sb, bias)
        bound = ref_gemm.abs_matmul_bound(a, b, sa, sb)
        ref_gemm.assert_scaled_mm_close(out, ref, bound, out_dtype, kind)
        _assert_same_bits(out, again)
        _assert_unchanged(snap)

    return _run(desc, body)


def fuzz_fp8_scaled_mm(case: Case) -> str:
    return _scaled_mm_case(case, "fp8")


def fuzz_int8_scaled_mm(case: Case) -> str:
    return _scaled_mm_case(case, "int8")


# ---------------------------------------------------------------------------------------
# fp8_blockwise_scaled_mm

_BW_M = (1, 2, 3, 4, 5, 7, 8, 63, 64, 65, 127, 128, 129, 1023, 1024, 1025)
_BW_NB = (1, 2, 3, 8, 9, 12, 56, 57)  # N / 128
_BW_KB = (1, 2, 3, 4, 5, 12, 13, 56)  # K / 128


def _blockwise_scales_a(case: Case, vals: torch.Tensor) -> Tuple[torch.Tensor, str]:
    """scales_a [M, K / 128] in one of the layouts the binding reads in place (M-major, k-block
    stride a multiple of 4 and >= M rounded up to 4, room for the padded tail, 16-byte aligned)
    or copies (any other)."""
    m, kb = vals.shape
    m_pad = (m + 3) // 4 * 4
    style = case.choice(("m_major", "m_major_pad4", "m_major_tight", "m_major_odd", "row_major"))
    if style == "m_major":  # the transpose of a contiguous [K / 128, M]
        t = _embed(vals, (1, m), 0)
    elif style == "m_major_pad4":  # in place: aligned, stride % 4 == 0, room for the tail
        t = _embed(vals, (1, m_pad + 4 * case.rng.randint(0, 3)), 4 * case.rng.randint(0, 3), slack=m_pad - m)
    elif style == "m_major_tight":  # stride m_pad, storage ends at the last valid element
        t = _embed(vals, (1, m_pad), 4 * case.rng.randint(0, 2))
    elif style == "m_major_odd":  # stride not a multiple of 4, or a misaligned start
        if case.coin():
            t = _embed(vals, (1, m_pad + case.rng.randint(1, 3)), 0)
        else:
            t = _embed(vals, (1, m_pad), case.rng.randint(1, 3), slack=m_pad - m)
    else:
        t = _embed(vals, (kb, 1), case.rng.randint(0, 3))
    return t, style


def _blockwise_scales_b(case: Case, vals: torch.Tensor) -> Tuple[torch.Tensor, str]:
    """scales_b [K / 128, N / 128]: K-major (read in place) or row-major (copied)."""
    kb, nb = vals.shape
    style = case.choice(("k_major", "k_major_pad", "row_major"))
    offset = case.rng.randint(0, 3) if case.coin(0.4) else 0
    if style == "k_major":
        t = _embed(vals, (1, kb), offset)
    elif style == "k_major_pad":
        t = _embed(vals, (1, kb + case.rng.randint(1, 5)), offset)
    else:
        t = _embed(vals, (nb, 1), offset)
    return t, style


def fuzz_fp8_blockwise_scaled_mm(case: Case) -> str:
    cc = _cc()
    if cc != 90:
        return f"skip fp8_blockwise_scaled_mm: sm_{cc} has no kernel (sm90a only in this build)"
    e = case.max_elems
    m = case.rows(4096, points=_BW_M)
    n = 128 * (case.near(_BW_NB, 1, 256) if case.coin(0.6) else case.log_int(1, 256))
    k = 128 * (case.near(_BW_KB, 1, 128) if case.coin(0.6) else case.log_int(1, 128))
    budgets = ((("m", "k"), 2 * e), (("n", "k"), 2 * e), (("m", "n"), 2 * e), (("m", "n", "k"), 512 * e))
    s = _fit({"m": m, "n": n, "k": k}, {"m": 1, "n": 128, "k": 128}, ("k", "n", "m"), budgets)
    m, n, k = s["m"], s["n"], s["k"]
    kb, nb = k // 128, n // 128
    out_dtype = case.choice(OUT_DTYPES)

    env: Dict[str, Optional[str]] = {v: None for v in _BW_ENV}
    if case.coin(0.3):
        env["SGL_KERNEL_BLOCKWISE_MM_CONFIG"] = case.choice(("0", "1"))
    if case.coin(0.3):
        env["SGL_KERNEL_BLOCKWISE_MM_SWIZZLE"] = case.choice(("1", "2", "4", "8"))

    a0 = ref_gemm.random_fp8((m, k), case.gen)
    w0 = ref_gemm.random_fp8((n, k), case.gen)

    def operand(t: torch.Tensor) -> torch.Tensor:
        if case.coin(0.5):
            return t.clone()
        return _rows(t, 16 * case.rng.randint(0, 4), 16 * case.rng.randint(0, 3))

    a = operand(a0)
    b = operand(w0).t()
    sa, sa_style = _blockwise_scales_a(case, case.rand((m, kb), lo=0.25, hi=1.75))
    sb, sb_style = _blockwise_scales_b(case, case.rand((kb, nb), lo=0.25, hi=1.75))

    desc = (f"fp8_blockwise_scaled_mm M={m} N={n} K={k} out={_dtype_name(out_dtype)} mat_a={describe(a)} "
            f"mat_b={describe(b)} scales_a={sa_style}:{describe(sa)} scales_b={sb_style}:{describe(sb)}"
            f"{_env_desc(env)}")

    def body() -> None:
        from tests.gemm.test_blockwise_mm import blockwise_ref

        snap = _snapshot(mat_a=a, mat_b=b, scales_a=sa, scales_b=sb)
        with _env(env):
            _poison_next_alloc(m * n * 2)
            out = sgl_kernel.fp8_blockwise_scaled_mm(a, b, sa, sb, out_dtype)
            again = sgl_kernel.fp8_blockwise_scaled_mm(a, b, sa, sb, out_dtype)
        assert out.shape == (m, n) and out.dtype == out_dtype and out.is_contiguous(), f"output {describe(out)}"
        # test_blockwise_mm._check: u |ref| + BLOCKWISE_ACC_TOL sum_kb |A_kb| |B_kb| sa sb + 1e-6
        ref, bound = blockwise_ref(a, b, sa, sb)
        assert torch.isfinite(out).all(), f"{int((~torch.isfinite(out)).sum())} non-finite output elements"
        err = (out.float() - ref).abs()
        allowed = ref_gemm.OUT_ROUNDING[out_dtype] * ref.abs() + ref_gemm.BLOCKWISE_ACC_TOL * bound + 1e-6
        bad = err > allowed
        if bad.any():
            idx = tuple(bad.nonzero()[0].tolist())
            raise AssertionError(f"{int(bad.sum())} of {out.numel()} out of tolerance, worst err/allowed "
                                 f"{float((err / allowed).max()):.2f}; first at {list(idx)}: out "
                                 f"{float(out[idx])} ref {float(ref[idx])}")
        _assert_same_bits(out, again)
        _assert_unchanged(snap)

    return _run(desc, body)


# ---------------------------------------------------------------------------------------
# bmm_fp8

_BMM_B = (1, 2, 3, 4, 8, 16, 32, 128)
_BMM_M = (1, 2, 15, 16, 17, 31, 32, 33, 48, 64, 65, 127, 128, 129, 256, 1024, 1025)
_BMM_KN = (16, 32, 48, 64, 128, 144, 256, 512, 528, 1024, 4096)


def _bmm_a(case: Case, vals: torch.Tensor) -> Tuple[torch.Tensor, str]:
    """A [b, m, k] row-major per batch: dense, padded rows / batches at a 16-byte offset,
    head-major (the transpose of a [m, b, k] tensor), or one matrix broadcast over the batch."""
    b, m, k = vals.shape
    style = case.choice(("dense", "padded", "heads", "broadcast") if b > 1 else ("dense", "padded"))
    lda = k + 16 * case.rng.randint(0, 3)
    offset = 16 * case.rng.randint(0, 5) if case.coin(0.5) else 0
    if style == "dense":
        return vals.clone(), style
    if style == "padded":
        return _embed(vals, (m * lda + 16 * case.rng.randint(0, 3), lda, 1), offset), style
    if style == "heads":
        return _embed(vals, (lda, b * lda, 1), offset), style
    one = _embed(vals[:1], (m * lda, lda, 1), offset)
    return one.expand(b, m, k), style


def _bmm_b(case: Case, vals: torch.Tensor) -> Tuple[torch.Tensor, str]:
    """B [b, k, n] column-major per batch (vals: the contiguous W [b, n, k]): the transpose of W,
    of a padded W at a 16-byte offset, of a head-major W [n, b, k], or of one W broadcast."""
    b, n, k = vals.shape
    style = case.choice(("dense", "padded", "heads", "broadcast") if b > 1 else ("dense", "padded"))
    ldb = k + 16 * case.rng.randint(0, 3)
    offset = 16 * case.rng.randint(0, 5) if case.coin(0.5) else 0
    if style == "dense":
        w = vals.clone()
    elif style == "padded":
        w = _embed(vals, (n * ldb + 16 * case.rng.randint(0, 3), ldb, 1), offset)
    elif style == "heads":
        w = _embed(vals, (ldb, b * ldb, 1), offset)
    else:
        w = _embed(vals[:1], (n * ldb, ldb, 1), offset).expand(b, n, k)
    return w.transpose(-2, -1), style


def fuzz_bmm_fp8(case: Case) -> str:
    cc = _cc()
    if cc < 89:
        return f"skip bmm_fp8: sm_{cc} has no fp8 tensor cores (needs sm_89)"
    e = case.max_elems
    bsz = case.near(_BMM_B, 1, 128) if case.coin(0.6) else case.log_int(1, 128)
    m = case.rows(4096, points=_BMM_M)
    k = _dim(case, _BMM_KN, 16, 8192)
    n = _dim(case, _BMM_KN, 16, 8192)
    budgets = ((("b", "m", "k"), 2 * e), (("b", "n", "k"), 2 * e), (("b", "m", "n"), 2 * e),
               (("b", "m", "n", "k"), 512 * e))
    s = _fit({"b": bsz, "m": m, "n": n, "k": k}, {"b": 1, "m": 1, "n": 16, "k": 16}, ("k", "b", "n", "m"), budgets)
    bsz, m, n, k = s["b"], s["m"], s["n"], s["k"]
    a_dtype, b_dtype = case.choice(ref_bmm_fp8.FP8_PAIRS)
    out_dtype = case.choice(OUT_DTYPES)

    A, a_style = _bmm_a(case, ref_bmm_fp8.random_fp8((bsz, m, k), a_dtype, case.gen))
    B, b_style = _bmm_b(case, ref_bmm_fp8.random_fp8((bsz, n, k), b_dtype, case.gen))
    sa = ref_bmm_fp8.random_scale(case.gen)
    sb = ref_bmm_fp8.random_scale(case.gen)
    if case.coin(0.3):
        sa = sa.reshape(())
    if case.coin(0.3):
        sb = sb.reshape(())
    out_style = case.choice(("alloc", "given", "given_offset"))
    out_offset = 8 * case.rng.randint(1, 4) if out_style == "given_offset" else 0

    desc = (f"bmm_fp8 b={bsz} m={m} k={k} n={n} A={a_style}:{describe(A)} B={b_style}:{describe(B)} "
            f"A_scale={list(sa.shape)} B_scale={list(sb.shape)} dtype={_dtype_name(out_dtype)} out={out_style}"
            f"{f'+{out_offset}' if out_offset else ''}")

    def body() -> None:
        snap = _snapshot(A=A, B=B, A_scale=sa, B_scale=sb)
        outs = []
        for _ in range(2):
            if out_style == "alloc":
                _poison_next_alloc(bsz * m * n * 2)
                out = sgl_kernel.bmm_fp8(A, B, sa, sb, out_dtype)
            else:
                given = _poisoned((bsz, m, n), (m * n, n, 1), out_offset, out_dtype)
                out = sgl_kernel.bmm_fp8(A, B, sa, sb, out_dtype, out=given)
                assert out is given, "the given out was not returned"
                _assert_only_view_written(given)
            outs.append(out)
        out = outs[0]
        assert out.shape == (bsz, m, n) and out.dtype == out_dtype and out.is_contiguous(), f"out {describe(out)}"
        ref_bmm_fp8.assert_bmm_fp8_close(out, ref_bmm_fp8.bmm_fp8_ref(A, B, sa, sb),
                                         ref_bmm_fp8.bmm_fp8_bound(A, B, sa, sb))
        _assert_same_bits(out, outs[1])
        _assert_unchanged(snap)

    return _run(desc, body)


# ---------------------------------------------------------------------------------------
# awq_dequantize

# Words per row (N / 8) around the kernel's block width (32..256 threads along a row).
_AWQ_WORDS = (1, 2, 7, 8, 31, 32, 33, 63, 64, 65, 127, 128, 129, 255, 256, 257, 264, 1376)
# K around the 4 rows of a thread.
_AWQ_K = (1, 2, 3, 4, 5, 7, 8, 9, 100, 127, 128, 129, 1023, 1024, 1025, 4096)
# Row chunks past the grid's 65535 (4 rows a thread, 8 rows of threads a block when N / 8 <= 32).
_AWQ_GRID_ROWS = 65535 * 8 * 4


def _divisors(x: int) -> List[int]:
    small = [d for d in range(1, math.isqrt(x) + 1) if x % d == 0]
    return sorted(set(small + [x // d for d in small]))


def fuzz_awq_dequantize(case: Case) -> str:
    cc = _cc()
    if cc < 80:
        return f"skip awq_dequantize: sm_{cc} (needs sm_80)"
    e = case.max_elems
    dtype = case.choice((torch.float16, torch.bfloat16))
    regime = "grid"
    if case.coin(0.04) and 8 * (_AWQ_GRID_ROWS + 1) <= 4 * e:
        # More row chunks than the grid holds: the kernel's grid-stride loop over rows.
        regime = "grid_stride"
        words = 1
        k = case.rng.randint(_AWQ_GRID_ROWS + 1, min(_AWQ_GRID_ROWS + 4096, 4 * e // 8))
        g = case.choice([d for d in _divisors(k) if d >= 32] or [k])
    else:
        words = case.near(_AWQ_WORDS, 1, 4096) if case.coin(0.6) else case.log_int(1, 4096)
        words = max(1, min(words, e // 8))
        if case.coin(0.5):  # the usual group sizes
            g = case.choice((32, 64, 128)) if case.coin(0.8) else case.choice((1, 2, 3, 5, 10, 102))
            groups = case.log_int(1, 512)
            groups = max(1, min(groups, e // (8 * words * g)))
            k = g * groups
        else:  # K first, any divisor as the group size (boundaries inside a thread's rows)
            k = case.near(_AWQ_K, 1, 1 << 16) if case.coin(0.6) else case.log_int(1, 1 << 14)
            k = max(1, min(k, e // (8 * words)))
            g = case.choice(_divisors(k))
    n = 8 * words
    qweight0, scales0, qzeros0 = ref_awq.random_awq(k, n, g, dtype, case.gen)

    def words_layout(t: torch.Tensor) -> torch.Tensor:
        if case.coin(0.5):
            return t.clone()
        return _rows(t, case.rng.randint(0, 3), case.rng.randint(0, 5))

    qweight, qzeros = words_layout(qweight0), words_layout(qzeros0)
    scale_style = case.choice(("dense", "vector", "scalar"))
    if scale_style == "dense":
        scales = scales0.clone()
    elif scale_style == "vector":  # 16-byte aligned rows: the vector path
        scales = _rows(scales0, 8 * case.rng.randint(0, 3), 8 * case.rng.randint(0, 3))
    else:  # a misaligned start, or a row stride off the 8-element grid: the scalar path
        offset = case.rng.randint(1, 7) if case.coin() else 0
        scales = _rows(scales0, offset, case.rng.randint(0 if offset else 1, 7))

    desc = (f"awq_dequantize K={k} N={n} G={g} dtype={_dtype_name(dtype)} qweight={describe(qweight)} "
            f"scales={scale_style}:{describe(scales)} qzeros={describe(qzeros)} regime={regime}")

    def body() -> None:
        snap = _snapshot(qweight=qweight, scales=scales, qzeros=qzeros)
        _poison_next_alloc(k * n * 2)
        out = sgl_kernel.awq_dequantize(qweight, scales, qzeros)
        again = sgl_kernel.awq_dequantize(qweight, scales, qzeros)
        assert out.shape == (k, n) and out.dtype == dtype and out.is_contiguous(), f"output {describe(out)}"
        ref = ref_awq.awq_dequantize_ref(qweight, scales, qzeros)
        if not torch.equal(out, ref):  # test_awq_dequantize: bit-exact, torch.equal
            bad = (out != ref) | torch.isnan(out)
            idx = tuple(bad.nonzero()[0].tolist())
            raise AssertionError(f"{int(bad.sum())} of {out.numel()} elements differ from the reference "
                                 f"(bit-exact expected); first at {list(idx)}: out {float(out[idx])} "
                                 f"ref {float(ref[idx])}")
        _assert_same_bits(out, again)
        _assert_unchanged(snap)

    return _run(desc, body)


# ---------------------------------------------------------------------------------------
# dsv3_router_gemm / dsv3_fused_a_gemm


def _dsv3_m(case: Case) -> int:
    """1..16, often next to 8 / 9 (one or two 8-row accumulator blocks) or at the ends."""
    return case.near((1, 8, 9, 16), 1, 16) if case.coin(0.6) else case.rng.randint(1, 16)


def _dsv3_rows(case: Case, t: torch.Tensor) -> torch.Tensor:
    """A bf16 [R, 7168] operand: 16-byte aligned start, row stride a multiple of 8."""
    if case.coin(0.5):
        return t.clone()
    return _rows(t, 8 * case.rng.randint(0, 4), 8 * case.rng.randint(0, 8))


def _dsv3_output(case: Case, m: int, n: int, dtype: torch.dtype) -> Tuple[torch.Tensor, str]:
    """A NaN-filled [m, n] output: contiguous, or with padded rows at any element offset
    (the binding asks only for a contiguous last dimension)."""
    if case.coin(0.5):
        return _poisoned((m, n), (n, 1), 0, dtype), "dense"
    return _poisoned((m, n), (n + case.rng.randint(0, 40), 1), case.rng.randint(0, 7), dtype), "strided"


def _dsv3_check(out: torch.Tensor, ref: torch.Tensor) -> None:
    msg = ref_dsv3.dsv3_mismatch(out, ref)
    if msg is not None:
        raise AssertionError(msg)


def _router_op():
    return torch.ops.sgl_kernel.dsv3_router_gemm.default


def _fused_a_op():
    return torch.ops.sgl_kernel.dsv3_fused_a_gemm.default


def fuzz_dsv3_router_gemm(case: Case) -> str:
    cc = _cc()
    if cc < 80:
        return f"skip dsv3_router_gemm: sm_{cc} (needs sm_80)"
    m = _dsv3_m(case)
    e = case.choice(ref_dsv3.EXPERTS)
    out_dtype = case.choice((torch.float32, torch.bfloat16))
    a = _dsv3_rows(case, ref_dsv3.random_activations(m, case.gen))
    w = _dsv3_rows(case, ref_dsv3.random_weight(e, case.gen))
    call = case.choice(("wrapper", "wrapper_default", "op")) if out_dtype == torch.bfloat16 else \
        case.choice(("wrapper", "op"))
    out_style = ""
    given = None
    if call == "op":
        given, out_style = _dsv3_output(case, m, e, out_dtype)

    desc = (f"dsv3_router_gemm M={m} E={e} out_dtype={_dtype_name(out_dtype)} hidden_states={describe(a)} "
            f"router_weights={describe(w)} call={call}"
            f"{' output=' + out_style + ':' + describe(given) if given is not None else ''}")

    def body() -> None:
        snap = _snapshot(hidden_states=a, router_weights=w)
        outs = []
        for i in range(2):
            if call == "op":
                out = given if i == 0 else _poisoned(given.shape, given.stride(), given.storage_offset(), out_dtype)
                assert _router_op()(out, a, w) is None
                _assert_only_view_written(out)
            else:
                _poison_next_alloc(m * e * out_dtype.itemsize)
                if call == "wrapper_default":
                    out = sgl_kernel.dsv3_router_gemm(a, w)
                else:
                    out = sgl_kernel.dsv3_router_gemm(a, w, out_dtype)
                assert out.shape == (m, e) and out.dtype == out_dtype, f"output {describe(out)}"
            outs.append(out)
        _dsv3_check(outs[0], ref_dsv3.dsv3_ref(a, w))
        _assert_same_bits(outs[0], outs[1])
        _assert_unchanged(snap)

    return _run(desc, body)


def fuzz_dsv3_fused_a_gemm(case: Case) -> str:
    cc = _cc()
    if cc < 80:
        return f"skip dsv3_fused_a_gemm: sm_{cc} (needs sm_80)"
    m = _dsv3_m(case)
    n = ref_dsv3.FUSED_A_N
    a = _dsv3_rows(case, ref_dsv3.random_activations(m, case.gen))
    w = _dsv3_rows(case, ref_dsv3.random_weight(n, case.gen))  # W [2112, 7168]; mat_b = W.t()
    b = w.t()
    call = case.choice(("wrapper", "wrapper_given", "op"))
    given = None
    out_style = ""
    if call != "wrapper":
        given, out_style = _dsv3_output(case, m, n, torch.bfloat16)

    desc = (f"dsv3_fused_a_gemm M={m} mat_a={describe(a)} mat_b={describe(b)} call={call}"
            f"{' output=' + out_style + ':' + describe(given) if given is not None else ''}")

    def body() -> None:
        snap = _snapshot(mat_a=a, mat_b=b)
        outs = []
        for i in range(2):
            out = None
            if given is not None:
                out = given if i == 0 else _poisoned(given.shape, given.stride(), given.storage_offset(),
                                                     torch.bfloat16)
            if call == "op":
                assert _fused_a_op()(out, a, b) is None
            elif call == "wrapper_given":
                assert sgl_kernel.dsv3_fused_a_gemm(a, b, out) is out, "the given output was not returned"
            else:
                _poison_next_alloc(m * n * 2)
                out = sgl_kernel.dsv3_fused_a_gemm(a, b)
            assert out.shape == (m, n) and out.dtype == torch.bfloat16, f"output {describe(out)}"
            if given is not None:
                _assert_only_view_written(out)
            outs.append(out)
        _dsv3_check(outs[0], ref_dsv3.dsv3_ref(a, w))
        _assert_same_bits(outs[0], outs[1])
        _assert_unchanged(snap)

    return _run(desc, body)


FUZZERS: Dict[str, Fuzzer] = {
    "gemm.fp8_scaled_mm": fuzz_fp8_scaled_mm,
    "gemm.int8_scaled_mm": fuzz_int8_scaled_mm,
    "gemm.fp8_blockwise_scaled_mm": fuzz_fp8_blockwise_scaled_mm,
    "gemm.bmm_fp8": fuzz_bmm_fp8,
    "gemm.awq_dequantize": fuzz_awq_dequantize,
    "gemm.dsv3_router_gemm": fuzz_dsv3_router_gemm,
    "gemm.dsv3_fused_a_gemm": fuzz_dsv3_fused_a_gemm,
}
