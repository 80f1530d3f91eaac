# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of the copy / cast / MLA-concat ops (API.md 2.1.4), shared by
tests/elementwise/test_mla_copy.py and benchmark/elementwise/bench_mla_copy.py.

``*_ref`` functions return new tensors (what the op must produce); ``*_torch`` functions
write in place like the ops do, and are what an engine without the kernels runs (and what the
benchmark's torch eager / torch.compile baselines time).

fp8 notes: CUDA torch has no ``index`` (gather), ``eq`` or ``sub`` kernels for
``torch.float8_e4m3fn``; compare and gather fp8 tensors through ``.view(torch.uint8)``.
"""

from __future__ import annotations

from typing import Tuple

import torch

E4M3_MAX = 448.0  # largest finite torch.float8_e4m3fn
E4M3_MAX_BYTE = 0x7E  # +448; 0xFE is -448
# Never produced by downcast_fp8 (0x7F / 0xFF are the e4m3fn NaNs; the op saturates): fill
# k_out / v_out with it to see which rows the op wrote.
FP8_SENTINEL = 0x7F


# ---------------------------------------------------------------------------------------
# copy_to_gpu_no_ce


def copy_to_gpu_no_ce_ref(input: torch.Tensor) -> torch.Tensor:
    """``output[:] = input[:]``: the host values themselves."""
    return input.clone()


# ---------------------------------------------------------------------------------------
# downcast_fp8


def downcast_fp8_ref(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """``e4m3(clamp(x / scale, -448, 448))`` in fp32, round to nearest even, as a
    ``torch.float8_e4m3fn`` tensor of the shape of ``x``.

    ``scale`` must be a tensor on the device of ``x`` (a one-element CUDA tensor divides
    exactly; torch replaces division by a CPU scalar with multiplication by its reciprocal,
    which can round differently)."""
    return (x.float() / scale.float()).clamp(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)


def downcast_fp8_slots(loc: torch.Tensor, mult: int, offset: int) -> torch.Tensor:
    """The cache row of each token: ``loc * mult + offset`` (int64)."""
    return loc.to(torch.int64) * mult + offset


def downcast_fp8_expected(
    out_before: torch.Tensor, x: torch.Tensor, scale: torch.Tensor, loc: torch.Tensor, mult: int, offset: int
) -> torch.Tensor:
    """What ``k_out`` (or ``v_out``) must hold after the op, as uint8 bytes: ``out_before``
    (``[N, H, D]``, fp8 or uint8) with row ``loc[t] * mult + offset`` replaced by the
    quantised ``x[t]`` for every slot inside ``[0, N)``; out-of-range slots are skipped.
    ``loc`` must not repeat a slot. Synchronises (boolean mask)."""
    expected = out_before.view(torch.uint8).clone()
    slots = downcast_fp8_slots(loc, mult, offset)
    valid = (slots >= 0) & (slots < expected.shape[0])
    q = downcast_fp8_ref(x, scale).view(torch.uint8)
    expected[slots[valid]] = q[valid]
    return expected


def downcast_fp8_torch(
    k: torch.Tensor,
    v: torch.Tensor,
    k_out: torch.Tensor,
    v_out: torch.Tensor,
    k_scale: torch.Tensor,
    v_scale: torch.Tensor,
    loc: torch.Tensor,
    mult: int = 1,
    offset: int = 0,
) -> None:
    """In-place torch version (every slot must be in range: no masking, so that it stays
    sync-free, graph-capturable and compiles to one scatter)."""
    slots = loc * mult + offset
    for x, out, scale in ((k, k_out, k_scale), (v, v_out, v_scale)):
        q = downcast_fp8_ref(x, scale)
        if out.dtype != q.dtype:  # a uint8 view of the cache
            q = q.view(out.dtype)
        out[slots] = q


def fp8_code_distance(a: torch.Tensor, b: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """Per element: the distance between two e4m3fn codes (uint8 bytes or fp8 tensors) in
    representable steps, and whether the signs differ on two non-zero values (API.md 1.6:
    8-bit quantisation criterion). +0 and -0 are the same point."""
    a = a.view(torch.uint8).to(torch.int32)
    b = b.view(torch.uint8).to(torch.int32)
    mag_a, mag_b = a & 0x7F, b & 0x7F
    ord_a = torch.where(a >= 0x80, -mag_a, mag_a)
    ord_b = torch.where(b >= 0x80, -mag_b, mag_b)
    sign_flip = ((a ^ b) >= 0x80) & (mag_a > 0) & (mag_b > 0)
    return (ord_a - ord_b).abs(), sign_flip


# ---------------------------------------------------------------------------------------
# concat_mla_k / concat_mla_absorb_q


def concat_mla_k_ref(k_nope: torch.Tensor, k_rope: torch.Tensor) -> torch.Tensor:
    """``cat([k_nope, k_rope broadcast over the heads of k_nope], -1)``: ``[T, H, Dn + Dr]``."""
    return torch.cat([k_nope, k_rope.expand(-1, k_nope.shape[1], -1)], dim=-1)


def concat_mla_k_torch(k: torch.Tensor, k_nope: torch.Tensor, k_rope: torch.Tensor) -> None:
    """In place, as a serving engine does without the kernel: two slice assignments."""
    dn = k_nope.shape[-1]
    k[..., :dn] = k_nope
    k[..., dn:] = k_rope


def concat_mla_absorb_q_ref(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``cat([a, b], -1)``: a new contiguous ``[T0, T1, Da + Db]`` tensor."""
    return torch.cat([a, b], dim=-1)
