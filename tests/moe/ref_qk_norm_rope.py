# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of fused_qk_norm_rope (API.md 2.4), shared by
tests/moe/test_qk_norm_rope.py and benchmark/moe/bench_qk_norm_rope.py.

``qkv`` is bf16 ``[T, (hq + hk + hv) * D]`` (q heads, then k heads, then v heads). For every q
and k head: ``y = x * rsqrt(mean(x^2) + eps) * w``, then RoPE on the first ``R`` elements of
``y`` with angle ``pos * f_i`` for pair ``i < R / 2`` (NeoX: pairs ``(i, i + R/2)``; else
``(2i, 2i + 1)``), rotated elements times ``attention_factor``. Forms:

* :func:`rope_freqs`: the kernel's frequency table, bit for bit: ``f_i`` evaluated in fp64 from
  the fp32-rounded parameters (``math.pow``, the YaRN blend in fp64), rounded once to fp32
  (csrc/moe/qk_norm_rope.cu computes the same table on the host with the same operations);
  :func:`rope_freqs` with ``fp64=True`` skips that rounding.
* :func:`qk_norm_rope_ref`: the result in fp64 for the q and k heads. ``exact=False`` (default)
  uses the kernel's angle, ``fp32(float(pos) * f_i)`` (fp32 table, fp32 product), and takes
  cos / sin of that angle in fp64: the only fp32 roundings the kernel makes that are larger
  than its final bf16 rounding at large positions (one ulp of an angle near 1e5 is 0.008 rad).
  ``exact=True``: the formula in fp64 throughout (fp64 ``f_i`` and angle); the kernel meets it
  within the bf16 tolerances only while ``pos * f_i`` is small (the tests use positions < 4096).
* :func:`qk_norm_rope_torch`: what an engine would write instead (the bench's baselines):
  per-head RMSNorm in fp32 rounded to bf16 before the weight (as Qwen3's RMSNorm), then RoPE in
  fp32 from a precomputed cos/sin cache (:func:`cos_sin_cache`), written back in place.
"""

from __future__ import annotations

import math
from typing import Optional, Tuple

import torch


def f32(x: float) -> float:
    """``x`` rounded to fp32 (what the binding does to every float argument)."""
    return float(torch.tensor(float(x), dtype=torch.float32).item())


def rope_freqs(rotary_dim: int, base: float, factor: float = 1.0, low: float = 0.0, high: float = 0.0,
               fp64: bool = False, device="cpu") -> torch.Tensor:
    """``f_i`` for ``i < rotary_dim / 2``: ``base^(-2i / R)``, and with ``factor != 1`` (YaRN)
    ``f_i / factor * ramp + f_i * (1 - ramp)``, ``ramp = clamp((i - low) / (high - low), 0, 1)``
    (``high += 0.001`` when ``|high - low| <= 1e-6``). fp64 arithmetic on fp32-rounded
    parameters; returned as fp32 (the kernel's table) or, with ``fp64``, unrounded."""
    base, factor, low, high = f32(base), f32(factor), f32(low), f32(high)
    if abs(high - low) <= 1e-6:
        high += 0.001
    out = []
    for i in range(rotary_dim // 2):
        f = math.pow(base, -2.0 * i / rotary_dim)
        if factor != 1.0:
            ramp = min(max((i - low) / (high - low), 0.0), 1.0)
            f = f / factor * ramp + f * (1.0 - ramp)
        out.append(f)
    t = torch.tensor(out, dtype=torch.float64)
    return (t if fp64 else t.to(torch.float32)).to(device)


def yarn_low_high(rotary_dim: int, base: float, original_max_position: int, beta_fast: float = 32.0,
                  beta_slow: float = 1.0) -> Tuple[float, float]:
    """YaRN's correction range (the pair indices where the ramp runs), as the serving engines
    compute ``low`` / ``high`` from a model config."""

    def dim_of(rotations: float) -> float:
        return rotary_dim * math.log(original_max_position / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(dim_of(beta_fast)), 0)
    high = min(math.ceil(dim_of(beta_slow)), rotary_dim - 1)
    return float(low), float(high)


def _angles(positions: torch.Tensor, freqs: torch.Tensor, exact: bool) -> torch.Tensor:
    """``[T, R/2]`` fp64 angles: fp32 ``float(pos) * f`` (the kernel's) or fp64 throughout."""
    if exact:
        return positions.double()[:, None] * freqs.double()[None, :]
    return (positions.float()[:, None] * freqs.float()[None, :]).double()


def _rotate(y: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, is_neox: bool) -> torch.Tensor:
    """RoPE of the rotary part ``y`` ``[..., R]`` with ``cos`` / ``sin`` ``[..., R/2]``."""
    if is_neox:
        a, b = y.chunk(2, dim=-1)
        return torch.cat((a * cos - b * sin, a * sin + b * cos), dim=-1)
    a, b = y[..., 0::2], y[..., 1::2]
    return torch.stack((a * cos - b * sin, a * sin + b * cos), dim=-1).flatten(-2)


def qk_norm_rope_ref(qkv: torch.Tensor, num_heads_q: int, num_heads_k: int, head_dim: int, eps: float,
                     q_weight: torch.Tensor, k_weight: torch.Tensor, base: float, is_neox: bool,
                     position_ids: torch.Tensor, factor: float, low: float, high: float, attention_factor: float,
                     rotary_dim: Optional[int] = None, exact: bool = False) -> torch.Tensor:
    """fp64 ``[T, hq + hk, D]``: the q and k heads after the op (see the module docstring for
    ``exact``). ``qkv`` is read, not modified."""
    t = qkv.shape[0]
    d = head_dim
    r = d if rotary_dim is None else rotary_dim
    h = num_heads_q + num_heads_k
    x = qkv[:, : h * d].double().reshape(t, h, d)
    w = torch.cat((q_weight.double().expand(num_heads_q, d), k_weight.double().expand(num_heads_k, d)))
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + f32(eps)) * w
    freqs = rope_freqs(r, base, factor, low, high, fp64=exact, device=qkv.device)
    ang = _angles(position_ids, freqs, exact)[:, None, :]  # [T, 1, R/2]
    af = f32(attention_factor)
    rot = _rotate(y[..., :r], ang.cos(), ang.sin(), is_neox) * af
    return torch.cat((rot, y[..., r:]), dim=-1)


def cos_sin_cache(max_position: int, rotary_dim: int, base: float, factor: float = 1.0, low: float = 0.0,
                  high: float = 0.0, attention_factor: float = 1.0, device="cuda") -> torch.Tensor:
    """An engine's fp32 ``[max_position, R]`` cache (cos | sin, times attention_factor, YaRN's
    mscale), built once at model load."""
    inv_freq = rope_freqs(rotary_dim, base, factor, low, high, device=device)
    ang = torch.arange(max_position, device=device, dtype=torch.float32)[:, None] * inv_freq[None, :]
    return torch.cat((ang.cos() * attention_factor, ang.sin() * attention_factor), dim=-1).contiguous()


def qk_norm_rope_torch(qkv: torch.Tensor, num_heads_q: int, num_heads_k: int, head_dim: int, eps: float,
                       q_weight: torch.Tensor, k_weight: torch.Tensor, is_neox: bool, position_ids: torch.Tensor,
                       cache: torch.Tensor) -> None:
    """What an engine runs instead, in place on ``qkv``: Qwen3-style q_norm / k_norm (fp32
    variance, ``x.to(bf16) * weight``), then RoPE in fp32 with the cos/sin ``cache``
    (``[max_position, R]``, see :func:`cos_sin_cache`), rounded to bf16 and copied back."""
    t = qkv.shape[0]
    d = head_dim
    r = cache.shape[1]
    hq, hk = num_heads_q, num_heads_k
    dtype = qkv.dtype

    def norm(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
        return w * xf.to(dtype)

    q = norm(qkv[:, : hq * d].view(t, hq, d), q_weight)
    k = norm(qkv[:, hq * d : (hq + hk) * d].view(t, hk, d), k_weight)
    cos, sin = cache[position_ids.long()].unsqueeze(1).chunk(2, dim=-1)  # [T, 1, R/2] each

    def rope(x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        rot = _rotate(xf[..., :r], cos, sin, is_neox)
        return torch.cat((rot, xf[..., r:]), dim=-1).to(dtype)

    qkv[:, : hq * d].view(t, hq, d).copy_(rope(q))
    qkv[:, hq * d : (hq + hk) * d].view(t, hk, d).copy_(rope(k))
