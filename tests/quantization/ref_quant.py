# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of the quantization family (API.md 2.2), shared by tests and
benchmarks.

The formulas are the kernels' formulas, step for step in fp32, so scales compare bit for bit:

* ``amax = max(eps, max|x|)`` per token or group; ``scale = amax / qmax`` (IEEE division).
* UE8M0: the smallest power of two >= scale, computed exactly from the float's bits
  (``2**ceil(log2(s))`` in fp32 is not exact for every ``s``).
* codes: ``q = clamp(x * (1 / scale), qmin, qmax)`` (API.md: "computing x * (1/scale) is
  acceptable"), then e4m3 round-to-nearest-even, int8 truncation toward zero (group ops) or
  int8 round-half-even (``sgl_per_token_quant_int8``).
* A NaN anywhere in a group makes its scale NaN and its codes NaN (fp8) / 0 (int8); an inf
  makes the scale inf, the inf elements' codes NaN (fp8) / 0 (int8) and the finite ones 0.
  Torch's ``amax`` propagates NaN the way the kernels' bitwise maximum does.

Scale layouts (``output_s`` of the group ops), see :func:`alloc_scales`:
``"row"`` fp32 ``[M, G]`` contiguous; ``"col"`` fp32 ``[M, G]`` with strides ``(1, Mp)``;
``"col_ue8m0"`` int32 ``[M, ceil(G/4)]`` with strides ``(1, Mp)``, byte ``g % 4`` of element
``[m, g // 4]`` holding ``log2(scale) + 127``.
"""

from __future__ import annotations

from typing import Optional, Tuple

import torch

FP8 = torch.float8_e4m3fn
FP8_MAX = 448.0
INT8_MIN, INT8_MAX = -128.0, 127.0
EPS = 1e-10

LAYOUTS = ("row", "col", "col_ue8m0")


def ieee_div(a: torch.Tensor, b: float) -> torch.Tensor:
    """``a / b`` rounded once (IEEE). NOTE: ``tensor / python_float`` on CUDA multiplies by the
    host-computed reciprocal, which differs from the division in the last bit for some ``a``."""
    return a / torch.full_like(a, b)


def qrange(out_dtype: torch.dtype) -> Tuple[float, float]:
    """``(qmin, qmax)`` that callers pass as ``(fp8_min, fp8_max)`` for this output dtype."""
    return (-FP8_MAX, FP8_MAX) if out_dtype == FP8 else (INT8_MIN, INT8_MAX)


def ue8m0_round(scale: torch.Tensor) -> torch.Tensor:
    """Smallest power of two >= ``scale`` (fp32, > 0), exactly; inf and NaN pass through."""
    s = scale.float()
    mant, exp = torch.frexp(s)  # s = mant * 2**exp, mant in [0.5, 1)
    exp = torch.where(mant == 0.5, exp - 1, exp)
    pow2 = torch.ldexp(torch.ones_like(s), exp)
    return torch.where(torch.isfinite(s), pow2, s)


def ue8m0_byte(scale_pow2: torch.Tensor) -> torch.Tensor:
    """Biased exponent (``log2 + 127``) of fp32 powers of two, as int32 in [0, 255]."""
    return (scale_pow2.float().contiguous().view(torch.int32) >> 23) & 0xFF


def _codes(y: torch.Tensor, qmin: float, qmax: float, out_dtype: torch.dtype, rounding: str) -> torch.Tensor:
    """fp32 ``y`` (already scaled) -> codes of ``out_dtype``; NaN stays NaN for fp8, 0 for int8."""
    y = torch.clamp(y, qmin, qmax)  # NaN passes through
    if out_dtype == FP8:
        return y.to(FP8)
    nan = torch.isnan(y)
    y = torch.where(nan, torch.zeros_like(y), y)
    y = torch.round(y) if rounding == "half_even" else torch.trunc(y)
    return y.to(torch.int8)


def _inv(scale: torch.Tensor) -> torch.Tensor:
    """``1 / scale`` in fp32, 0 where the scale is 0 (an all-zero row quantises to 0)."""
    return torch.where(scale == 0, torch.zeros_like(scale), 1.0 / scale)


def group_quant_ref(
    x: torch.Tensor,
    group_size: int,
    eps: float = EPS,
    out_dtype: torch.dtype = FP8,
    scale_ue8m0: bool = False,
    ue8m0_codes_use_rounded: bool = True,
    qmin: Optional[float] = None,
    qmax: Optional[float] = None,
) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per-token-group quantization of ``x[..., K]`` (any float dtype; computed in fp32).

    Returns ``(q, scale)``: ``q`` has ``x``'s shape and ``out_dtype``; ``scale`` is the fp32
    ``[..., K / group_size]`` the op stores (the power of two with ``scale_ue8m0``). With
    ``scale_ue8m0`` and ``ue8m0_codes_use_rounded=False`` (row-major scales of the v2 op) the
    codes use the unrounded scale while the rounded one is stored.
    """
    dflt_min, dflt_max = qrange(out_dtype)
    qmin = dflt_min if qmin is None else qmin
    qmax = dflt_max if qmax is None else qmax
    *lead, k = x.shape
    assert k % group_size == 0
    xg = x.float().reshape(*lead, k // group_size, group_size)
    amax = xg.abs().amax(-1)
    amax = torch.where(torch.isnan(amax), amax, torch.clamp(amax, min=eps))
    scale = ieee_div(amax, qmax)
    stored = scale
    used = scale
    if scale_ue8m0:
        stored = ue8m0_round(scale)
        used = stored if ue8m0_codes_use_rounded else scale
    q = _codes(xg * _inv(used).unsqueeze(-1), qmin, qmax, out_dtype, "trunc")
    return q.reshape(x.shape), stored


def per_token_quant_fp8_ref(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``sgl_per_token_quant_fp8``: ``s = max|x| / 448`` per row (no eps floor), codes
    ``e4m3(clamp(x * (1/s)))``, 0 for an all-zero row. Returns ``(q [M, K], s [M])``."""
    xf = x.float()
    s = ieee_div(xf.abs().amax(-1), FP8_MAX)
    q = _codes(xf * _inv(s).unsqueeze(-1), -FP8_MAX, FP8_MAX, FP8, "")
    return q, s


def per_token_quant_int8_ref(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``sgl_per_token_quant_int8``: ``s = max|x| / 127`` per row, codes
    ``round_half_even(clamp(x * (1/s), -128, 127))``. Returns ``(q [M, K], s [M])``."""
    xf = x.float()
    s = ieee_div(xf.abs().amax(-1), INT8_MAX)
    q = _codes(xf * _inv(s).unsqueeze(-1), INT8_MIN, INT8_MAX, torch.int8, "half_even")
    return q, s


def per_tensor_quant_fp8_ref(
    x: torch.Tensor, scale_in: torch.Tensor, is_static: bool
) -> Tuple[torch.Tensor, torch.Tensor]:
    """``sgl_per_tensor_quant_fp8``. Dynamic: ``s = max(scale_in, max|x| / 448)``; static:
    ``s = scale_in``. Codes ``e4m3(clamp(x * (1/s)))``. Returns ``(q, s [1])``."""
    xf = x.float()
    s = scale_in.float().reshape(1)
    if not is_static:
        s = torch.maximum(s, ieee_div(xf.abs().amax(), FP8_MAX).reshape(1))
    q = _codes(xf * _inv(s), -FP8_MAX, FP8_MAX, FP8, "")
    return q, s


def rmsnorm_fp32(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    """fp32 ``x * rsqrt(mean(x**2) + eps) * w`` over the last dim, not rounded."""
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()


def fused_rmsnorm_quant_ref(
    x: torch.Tensor,
    w: torch.Tensor,
    group_size: int,
    rms_eps: float,
    quant_eps: float,
    out_dtype: torch.dtype,
    scale_ue8m0: bool,
    residual: Optional[torch.Tensor] = None,
) -> Tuple[torch.Tensor, torch.Tensor, Optional[torch.Tensor]]:
    """``fused_rmsnorm_quant`` (``residual=None``) / ``fused_add_rmsnorm_quant``: returns
    ``(q, scale, new_residual)``; ``new_residual = (x + residual)`` rounded to ``x.dtype``, and
    the norm is taken of it. ``y`` is quantised unrounded, as :func:`group_quant_ref`."""
    new_residual = None
    src = x
    if residual is not None:
        new_residual = (x.float() + residual.float()).to(x.dtype)
        src = new_residual
    y = rmsnorm_fp32(src, w, rms_eps)
    q, s = group_quant_ref(y, group_size, quant_eps, out_dtype, scale_ue8m0)
    return q, s, new_residual


def silu_and_mul_fp32(x: torch.Tensor) -> torch.Tensor:
    """``silu(x[..., :K]) * x[..., K:]`` in fp32 (not rounded)."""
    k = x.shape[-1] // 2
    a, b = x[..., :k].float(), x[..., k:].float()
    return a * torch.sigmoid(a) * b


# ----- scale layouts ---------------------------------------------------------------------------


def padded_m(m: int) -> int:
    """``Mp``: M rounded up to a multiple of 4 (the TMA-aligned column-major pitch)."""
    return (m + 3) // 4 * 4


def alloc_scales(m: int, groups: int, layout: str, device, lead: Tuple[int, ...] = ()) -> torch.Tensor:
    """``output_s`` of a group op in ``layout`` ("row", "col", "col_ue8m0") for ``m`` tokens and
    ``groups`` groups, with optional leading (expert) dims; filled with NaN / -1 bytes so
    unwritten entries show."""
    if layout == "row":
        return torch.full((*lead, m, groups), float("nan"), dtype=torch.float32, device=device)
    mp = padded_m(m)
    if layout == "col":
        buf = torch.full((*lead, groups, mp), float("nan"), dtype=torch.float32, device=device)
    elif layout == "col_ue8m0":
        buf = torch.full((*lead, (groups + 3) // 4, mp), -1, dtype=torch.int32, device=device)
    else:
        raise ValueError(layout)
    return buf.transpose(-1, -2)[..., :m, :]


def _dense(t: torch.Tensor) -> torch.Tensor:
    """A copy with the default strides. ``contiguous()`` is not enough before viewing int32 as
    bytes: a tensor whose non-unit dims are contiguous keeps an arbitrary stride on size-1
    dims (a ``[1, 1]`` column-major ``output_s`` has strides ``(1, Mp)``)."""
    return t.clone(memory_format=torch.contiguous_format)


def read_scales(output_s: torch.Tensor, groups: int) -> torch.Tensor:
    """Logical fp32 ``[..., M, G]`` scales from ``output_s`` in any of the layouts (UE8M0 bytes
    are decoded to ``2 ** (byte - 127)``; byte 255 reads as NaN)."""
    if output_s.dtype == torch.float32:
        return output_s.clone()
    *lead, m, g4 = output_s.shape
    b = _dense(output_s).view(torch.uint8).reshape(*lead, m, g4 * 4)[..., :groups].to(torch.int32)
    s = torch.ldexp(torch.ones_like(b, dtype=torch.float32), b - 127)
    return torch.where(b == 255, torch.full_like(s, float("nan")), s)


def packed_padding_bytes(output_s: torch.Tensor, groups: int) -> torch.Tensor:
    """The unused trailing bytes of a packed UE8M0 ``output_s`` (API.md: written 0)."""
    *lead, m, g4 = output_s.shape
    return _dense(output_s).view(torch.uint8).reshape(*lead, m, g4 * 4)[..., groups:]


# ----- code comparison (API.md 1.6) --------------------------------------------------------------


def code_distance(a: torch.Tensor, b: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """``(distance, sign_flip)`` between two code tensors of one dtype (fp8 e4m3 or int8): the
    number of representable steps between them, and where they have opposite nonzero signs."""
    if a.dtype == torch.int8:
        ai, bi = a.to(torch.int32), b.to(torch.int32)
        return (ai - bi).abs(), (ai * bi) < 0
    ua = a.view(torch.uint8).to(torch.int32)
    ub = b.view(torch.uint8).to(torch.int32)
    # sign-magnitude -> a monotonic integer line (e4m3 magnitudes are ordered like integers)
    la = torch.where(ua >= 128, -(ua - 128), ua)
    lb = torch.where(ub >= 128, -(ub - 128), ub)
    flip = (la * lb) < 0
    return (la - lb).abs(), flip


def assert_codes_close(q: torch.Tensor, q_ref: torch.Tensor, max_one_step_frac: float = 0.005) -> None:
    """API.md 1.6 for 8-bit codes: no sign flips, no difference of 2 or more codes, at most
    ``max_one_step_frac`` of the elements one code apart. NaN codes must match NaN codes."""
    assert q.shape == q_ref.shape and q.dtype == q_ref.dtype, (q.shape, q.dtype, q_ref.shape, q_ref.dtype)
    if q.dtype != torch.int8:
        nan, nan_ref = torch.isnan(q.float()), torch.isnan(q_ref.float())
        assert torch.equal(nan, nan_ref), f"NaN codes differ at {int((nan != nan_ref).sum())} elements"
        keep = ~nan
        # Boolean indexing has no fp8 CUDA kernel: select the bytes, then view them as codes.
        q, q_ref = q.view(torch.uint8)[keep].view(q.dtype), q_ref.view(torch.uint8)[keep].view(q.dtype)
    dist, flip = code_distance(q, q_ref)
    assert not bool(flip.any()), f"{int(flip.sum())} sign flips"
    worst = int(dist.max()) if dist.numel() else 0
    assert worst <= 1, f"codes differ by up to {worst} steps ({int((dist >= 2).sum())} elements >= 2)"
    frac = float((dist == 1).float().mean()) if dist.numel() else 0.0
    assert frac <= max_one_step_frac, f"{frac:.4%} of codes one step apart (limit {max_one_step_frac:.2%})"


# ----- codes from a given scale, scale bytes, exact comparison (added for the op tests) -------


def quantize_with_scale(
    x: torch.Tensor,
    scale: torch.Tensor,
    group_size: int,
    out_dtype: torch.dtype = FP8,
    qmin: Optional[float] = None,
    qmax: Optional[float] = None,
) -> torch.Tensor:
    """Codes of ``x[..., K]`` (fp32 math) with the per-group scale ``scale[..., K / group_size]``
    that the codes use: ``clamp(x * (1 / scale))``, e4m3 or int8 truncation, as
    :func:`group_quant_ref` (which equals this with its own scale)."""
    dflt_min, dflt_max = qrange(out_dtype)
    qmin = dflt_min if qmin is None else qmin
    qmax = dflt_max if qmax is None else qmax
    *lead, k = x.shape
    xg = x.float().reshape(*lead, k // group_size, group_size)
    q = _codes(xg * _inv(scale.float()).unsqueeze(-1), qmin, qmax, out_dtype, "trunc")
    return q.reshape(x.shape)


def packed_scale_bytes(output_s: torch.Tensor, groups: int) -> torch.Tensor:
    """The UE8M0 bytes of a packed int32 ``output_s`` as int32 ``[..., M, groups]`` (raw, not
    decoded: 255 for a NaN or inf scale). Compare with ``ue8m0_byte(reference scale)``."""
    *lead, m, g4 = output_s.shape
    return _dense(output_s).view(torch.uint8).reshape(*lead, m, g4 * 4)[..., :groups].to(torch.int32)


def scale_padding_untouched(output_s: torch.Tensor, m: int) -> bool:
    """Whether the pad rows ``m .. Mp`` of a column-major ``output_s`` made by
    :func:`alloc_scales` (they lie outside the view) still hold the poison. True for the
    row-major layout, which has no pad rows."""
    base = output_s._base
    if base is None or output_s.stride(-2) != 1:
        return True
    pad = base[..., m:]
    if pad.numel() == 0:
        return True
    if pad.dtype == torch.float32:
        return bool(pad.isnan().all())
    return bool((pad == -1).all())


def fp8_code_bytes(q: torch.Tensor) -> torch.Tensor:
    """e4m3 codes as uint8 with every NaN as 0x7F and -0 as 0, so that equal values compare
    equal (a kernel's NaN may carry either sign)."""
    u = q.view(torch.uint8)
    u = u.masked_fill((u & 0x7F) == 0x7F, 0x7F)
    return u.masked_fill(u == 0x80, 0)


def assert_codes_equal(q: torch.Tensor, q_ref: torch.Tensor, what: str = "codes") -> None:
    """Codes equal value for value (the non-fused ops, whose references are exact): int8 exactly,
    e4m3 with NaN == NaN and -0 == 0."""
    assert q.shape == q_ref.shape and q.dtype == q_ref.dtype, (q.shape, q.dtype, q_ref.shape, q_ref.dtype)
    if q.dtype == torch.int8:
        a, b = q, q_ref
    else:
        a, b = fp8_code_bytes(q), fp8_code_bytes(q_ref)
    bad = a != b
    n = int(bad.sum())
    if n:
        idx = tuple(bad.nonzero()[0].tolist())
        got, exp = float(q[idx].float()), float(q_ref[idx].float())
        raise AssertionError(f"{what}: {n} of {q.numel()} differ; first at {idx}: got {got}, expected {exp}")


def assert_scales_equal(s: torch.Tensor, s_ref: torch.Tensor, what: str = "scales") -> None:
    """fp32 scales bit for bit (NaN == NaN, inf == inf); shapes must match."""
    torch.testing.assert_close(s.float(), s_ref.float(), rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{what}: {m}")


def assert_dequant_within_bound(q: torch.Tensor, scale: torch.Tensor, y: torch.Tensor, group_size: int) -> None:
    """``q * scale`` against the fp32 values ``y`` that were quantised (finite, not clamped by
    a range narrower than the scale's): e4m3 within half a step (``2**-4 * |y|``, plus
    ``scale * 2**-9`` for the subnormals); int8 truncation within one scale. A 1e-3 relative
    slack covers a kernel's ``y`` differing from this one in the last fp32 bits."""
    *lead, k = y.shape
    yg = y.float().reshape(*lead, k // group_size, group_size)
    s = scale.float().unsqueeze(-1)
    err = (q.float().reshape(yg.shape) * s - yg).abs()
    if q.dtype == torch.int8:
        bound = s * (1 + 1e-3)
    else:
        bound = 2.0**-4 * yg.abs() * (1 + 1e-3) + s * 2.0**-9
    bad = ~(err <= bound)
    n = int(bad.sum())
    if n:
        idx = tuple(bad.nonzero()[0].tolist())
        raise AssertionError(
            f"dequantised error above the {q.dtype} bound at {n} elements; first at {idx}: "
            f"y={float(yg[idx])}, q*s={float(q.float().reshape(yg.shape)[idx] * s[idx[:-1]])}"
        )
