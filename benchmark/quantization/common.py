# SPDX-License-Identifier: Apache-2.0
"""Plumbing shared by the quantization benchmarks (bench_per_token_quant.py,
bench_group_quant.py, bench_fused_norm_quant.py). The references are not here: they live in
tests/quantization/ref_quant.py, shared with the tests; this module only adapts them to the
ops' destination-passing calls and checks outputs against them.

* Every input set ends with a :class:`State`. A provider's first call (the one whose output
  the harness checks, made outside any graph) resets it: outputs refilled with a poison value,
  tensors that a provider updates in place restored from a copy taken at setup. Every provider
  is therefore checked on its own writes, starting from the same data.
* The torch baselines write the references' results into the same ``output_q`` /
  ``output_s`` as the op (:func:`store_scales`, :func:`store_masked`), so one check serves
  every provider and every provider moves its results to the same place.
"""

from __future__ import annotations

from typing import Callable, Dict, Optional, Sequence

import torch

from benchmark.harness import Bench, short_error
from tests.quantization.ref_quant import FP8, assert_codes_close, packed_padding_bytes, ue8m0_byte
from tests.tolerances import elementwise_tol

try:
    import sgl_kernel

    SGL_IMPORT_ERROR: Optional[str] = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    SGL_IMPORT_ERROR = short_error(exc)

# API.md 1.6: scales rtol 1e-3 against the fp32 reference.
SCALE_RTOL = 1e-3
# Paths whose quantised input is itself rounded to bf16/fp16 by the op (the fused SiLU): the
# kernel's silu(a) * b may land one ulp away from the reference's rounding, and one ulp of a
# group's maximum moves its scale by up to 2**-8 (0.4 %) in bf16.
ROUNDED_INPUT_SCALE_RTOL = 1e-2

FP8_POISON_BYTE = 0x7F  # an e4m3fn NaN
INT8_POISON = -128  # never produced: |x| <= amax gives codes in [-127, 127]
PACKED_POISON = -1  # four 0xFF bytes: UE8M0 255 decodes as NaN (ref_quant.read_scales)


# ---------------------------------------------------------------------------------------
# sgl_kernel functions


def sgl_op(name: str, dry_run: bool = False) -> Callable:
    """``sgl_kernel.<name>``; raises RuntimeError when the import failed or the function is
    missing. A dry run never calls a provider, so there a missing function gets a stand-in
    (the missing names are listed in the summary by :func:`note_missing`)."""
    fn = getattr(sgl_kernel, name, None) if sgl_kernel is not None else None
    if fn is not None:
        return fn
    why = (f"import sgl_kernel failed: {SGL_IMPORT_ERROR}" if sgl_kernel is None
           else f"sgl_kernel ({sgl_kernel.__file__}) has no {name}")
    if dry_run:

        def missing(*args, **kwargs):
            raise RuntimeError(why)

        return missing
    raise RuntimeError(why)


def note_missing(bench: Bench, names: Sequence[str]) -> None:
    """One summary note when sgl_kernel does not import or lacks some of ``names``."""
    if sgl_kernel is None:
        bench.notes.append(f"import sgl_kernel FAILED: {SGL_IMPORT_ERROR}")
        return
    missing = [n for n in dict.fromkeys(names) if not hasattr(sgl_kernel, n)]
    if missing:
        bench.notes.append(f"sgl_kernel ({sgl_kernel.__file__}) lacks {', '.join(missing)}: the rows "
                           f"that need them fail")


# ---------------------------------------------------------------------------------------
# Input sets


def poison_(t: torch.Tensor) -> None:
    """Refill an output so that what an op leaves unwritten is seen by the check."""
    if t.dtype == FP8:
        t.view(torch.uint8).fill_(FP8_POISON_BYTE)
    elif t.dtype == torch.int8:
        t.fill_(INT8_POISON)
    elif t.dtype == torch.int32:
        t.fill_(PACKED_POISON)
    else:
        t.fill_(float("nan"))


class State:
    """The last element of every input set (never passed to a provider's function).

    ``outputs`` are poisoned and ``inplace`` tensors restored from their copies at setup by
    :meth:`reset`, which a provider's first call runs. ``cache`` keeps this set's reference
    once computed: the inputs as set up never change, so every provider's check reuses it."""

    def __init__(self, outputs: Sequence[torch.Tensor] = (), inplace: Sequence[torch.Tensor] = ()):
        self.outputs = tuple(outputs)
        self.inplace = tuple((t, t.clone()) for t in inplace)
        self.cache: Dict[str, object] = {}

    def original(self, i: int) -> torch.Tensor:
        """The copy, taken at setup, of the i-th ``inplace`` tensor."""
        return self.inplace[i][1]

    def reset(self) -> None:
        for t in self.outputs:
            poison_(t)
        for t, saved in self.inplace:
            t.copy_(saved)


def reset_first(fn: Callable) -> Callable:
    """A provider's callable, called as ``(*args, state)``: the first call resets ``state``
    (outside any graph: the harness makes it before capturing), every call runs
    ``fn(*args)`` and returns what it returns."""
    pending = [True]

    def call(*args):
        *fn_args, state = args
        if pending[0]:
            pending[0] = False
            state.reset()
        return fn(*fn_args)

    return call


def elt_size(dtype: torch.dtype) -> int:
    return torch.empty((), dtype=dtype).element_size()


def scale_bytes(rows: int, groups: int, layout: str) -> int:
    """Bytes of the scales that ``rows`` tokens write in ``layout`` (ref_quant.LAYOUTS): fp32
    per group, or one int32 per four groups when packed UE8M0 (the padding rows of a
    column-major buffer are not written)."""
    return rows * ((groups + 3) // 4 if layout == "col_ue8m0" else groups) * 4


# ---------------------------------------------------------------------------------------
# Torch baselines: the references' results stored where the op stores its own


def pack_ue8m0(scale_pow2: torch.Tensor) -> torch.Tensor:
    """fp32 power-of-two scales ``[..., M, G]`` -> int32 ``[..., M, ceil(G/4)]`` whose byte
    ``g % 4`` (little endian) of element ``g // 4`` is the biased exponent, the unused bytes 0."""
    b = ue8m0_byte(scale_pow2).to(torch.int64)
    pad = (-b.shape[-1]) % 4
    if pad:
        b = torch.nn.functional.pad(b, (0, pad))
    b = b.reshape(*b.shape[:-1], -1, 4)
    word = b[..., 0] | (b[..., 1] << 8) | (b[..., 2] << 16) | (b[..., 3] << 24)
    return torch.where(word >= 2**31, word - 2**32, word).to(torch.int32)


def store_scales(output_s: torch.Tensor, scale: torch.Tensor) -> None:
    """Write logical fp32 scales ``[..., M, G]`` into ``output_s`` in its layout (its strides
    carry row- or column-major; int32 means packed UE8M0)."""
    if output_s.dtype == torch.int32:
        output_s.copy_(pack_ue8m0(scale))
    else:
        output_s.copy_(scale)


def store_masked(output_q: torch.Tensor, output_s: torch.Tensor, q: torch.Tensor, scale: torch.Tensor,
                 masked_m: torch.Tensor) -> None:
    """Masked mode without data-dependent shapes (what a torch caller writes, and what
    torch.compile and CUDA graphs accept): the whole ``[E, T, K]`` was quantised; rows
    ``t < masked_m[e]`` take the new values, the others keep theirs. (The 8-bit codes go
    through fp32 for ``torch.where``: exact, NaN stays NaN.)"""
    keep = torch.arange(output_q.shape[-2], device=masked_m.device) < masked_m.unsqueeze(-1)  # [E, T]
    keep = keep.unsqueeze(-1)
    output_q.copy_(torch.where(keep, q.float(), output_q.float()).to(output_q.dtype))
    new_s = pack_ue8m0(scale) if output_s.dtype == torch.int32 else scale
    output_s.copy_(torch.where(keep, new_s, output_s))


# ---------------------------------------------------------------------------------------
# Output checks (None when the output matches)


def _rows(t: torch.Tensor, rows: torch.Tensor) -> torch.Tensor:
    """``t[rows]`` for a boolean row mask over the leading dims (fp8 through a uint8 view)."""
    if t.dtype == FP8:
        return t.view(torch.uint8)[rows].view(FP8)
    return t[rows]


def _poisoned_codes(q: torch.Tensor) -> torch.Tensor:
    return torch.isnan(q.float()) if q.dtype == FP8 else q == INT8_POISON


def check_quant(q: torch.Tensor, scales: torch.Tensor, q_ref: torch.Tensor, s_ref: torch.Tensor,
                rtol: float = SCALE_RTOL, rows: Optional[torch.Tensor] = None,
                pow2: bool = False) -> Optional[str]:
    """Codes and logical fp32 scales (``ref_quant.read_scales`` of ``output_s``) against the
    reference with the 8-bit criterion of API.md 1.6; ``rows``: compare those rows only.
    ``pow2`` (UE8M0 scales): an exact scale within an ulp or so of a power of two rounds up to
    it or to the next one depending on the reduction order (the normalised value differs in
    its last bits), so up to max(2, 1/1000) of the scales may be a factor 2 off; their groups'
    codes are left out of the comparison (they follow the other scale)."""
    if rows is not None:
        q, q_ref, scales, s_ref = _rows(q, rows), _rows(q_ref, rows), scales[rows], s_ref[rows]
    unwritten = int((_poisoned_codes(q) & ~_poisoned_codes(q_ref)).sum())
    if unwritten:
        return f"{unwritten} of {q.numel()} codes unwritten (still the poison value)"
    s, s_ref = scales.float(), s_ref.float()
    bad_s = int((~torch.isfinite(s) & torch.isfinite(s_ref)).sum())
    if bad_s:
        return f"{bad_s} of {s.numel()} scales unwritten or not finite"
    rel = (s - s_ref).abs() / s_ref.abs().clamp_min(torch.finfo(torch.float32).tiny)
    off = rel > rtol
    if pow2:
        flipped = off & ((s == 2 * s_ref) | (2 * s == s_ref))
        if int(flipped.sum()) <= max(2, s.numel() // 1000):
            off = off & ~flipped
            if bool(flipped.any()) and s.dim() == 2 and q.dim() == 2 and q.shape[-1] % s.shape[-1] == 0:
                keep = (~flipped).repeat_interleave(q.shape[-1] // s.shape[-1], dim=-1)
                q, q_ref = q[keep], q_ref[keep]
    n_rel = int(off.sum())
    if n_rel:
        return f"{n_rel} of {s.numel()} scales off by more than rtol {rtol:g} (max rel err {float(rel.max()):.3g})"
    try:
        assert_codes_close(q, q_ref)
    except AssertionError as exc:
        return f"codes: {exc}"
    return None


def check_untouched(q: torch.Tensor, scales: torch.Tensor, rows: torch.Tensor) -> Optional[str]:
    """Masked mode: the rows outside ``rows`` must still hold the poison (API.md: left untouched)."""
    skip = ~rows
    n_q = int((~_poisoned_codes(_rows(q, skip))).sum())
    n_s = int((~torch.isnan(scales[skip].float())).sum())
    if n_q or n_s:
        return f"masked-out rows written: {n_q} codes, {n_s} scales"
    return None


def check_padding(output_s: torch.Tensor, groups: int) -> Optional[str]:
    """Packed UE8M0: the unused trailing bytes are written 0 (API.md 2.2)."""
    if output_s.dtype != torch.int32 or groups % 4 == 0:
        return None
    n = int((packed_padding_bytes(output_s, groups) != 0).sum())
    return f"{n} unused bytes of the packed scales not 0" if n else None


def check_close(name: str, actual: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> Optional[str]:
    """An elementwise op's output against its fp32 reference with the shared tolerance table
    (bf16/fp16 outputs against the reference rounded the same way)."""
    tol = elementwise_tol(dtype)
    expected = ref.to(dtype).float()
    a = actual.float()
    if not torch.isfinite(a).all():
        return f"non-finite values in {name}"
    err = (a - expected).abs()
    bad = int((err > tol["atol"] + tol["rtol"] * expected.abs()).sum())
    if bad:
        return f"{name}: {bad} of {a.numel()} elements out of tolerance {tol}, max abs err {float(err.max()):.3g}"
    return None


def compile_reference(fn: Callable, rounded_intermediate: bool = False) -> Callable:
    """The torch.compile baseline: one compile per static shape (dynamic=False, as an engine
    with static shapes would), fullgraph (a graph break raises instead of silently timing
    eager code). ``rounded_intermediate``: the reference rounds an intermediate to bf16/fp16
    (silu(a) * b, the new residual) and quantises the rounded values, as the op does;
    Inductor elides such a downcast-upcast pair inside a fused kernel unless
    ``emulate_precision_casts`` is on, and its codes then miss the API.md 1.6 criterion
    (seen: 1.1-3.0 % of the codes one step off). The flag keeps the rounding; it is set only
    for these references, so the other baselines compile with Inductor's defaults."""
    options = {"emulate_precision_casts": True} if rounded_intermediate else None
    return torch.compile(fn, dynamic=False, fullgraph=True, options=options)


def cached(state: State, key: str, make: Callable[[], object]):
    """``state.cache[key]``, computed by ``make()`` the first time."""
    if key not in state.cache:
        state.cache[key] = make()
    return state.cache[key]


def add_providers(
    bench: Bench,
    ours: Callable[[str], Callable],
    reference: Callable[[str], Callable],
    wrap: Callable[[str, Callable], Callable],
    rounded_intermediate: Callable[[str], bool] = lambda op: False,
    two_kernel: Optional[Callable[[str], Callable]] = None,
    two_kernel_applies: Optional[Callable[[str], bool]] = None,
) -> None:
    """The providers every quantization bench times, in this order: ``sgl_kernel``, ``torch``
    (the reference), ``torch.compile`` (the reference compiled once per op; see
    :func:`compile_reference`), and optionally ``two-kernel`` (the sequence a fused op
    replaces; only for the ops ``two_kernel_applies`` accepts). Each callable builds the call
    for an op name; ``wrap(op, fn)`` adapts it to the harness (e.g. :func:`reset_first`)."""
    compiled: Dict[str, Callable] = {}

    def compiled_fn(case):
        if case.op not in compiled:
            compiled[case.op] = compile_reference(reference(case.op), rounded_intermediate(case.op))
        return wrap(case.op, compiled[case.op])

    bench.add_provider("sgl_kernel", lambda case: wrap(case.op, ours(case.op)), ours=True)
    bench.add_provider("torch", lambda case: wrap(case.op, reference(case.op)))
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if two_kernel is not None:
        applies = None if two_kernel_applies is None else (lambda case: two_kernel_applies(case.op))
        bench.add_provider("two-kernel", lambda case: wrap(case.op, two_kernel(case.op)), applies=applies)
