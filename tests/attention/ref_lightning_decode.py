# SPDX-License-Identifier: Apache-2.0
"""Pure-torch references of lightning_attention_decode (API.md 2.5, legacy), shared by
tests/attention/test_lightning_decode.py and benchmark/attention/bench_lightning_decode.py:

* :func:`lightning_decode_ref`: the op's value in fp64 with the scales of its fp32 rounding
  errors;
* :func:`lightning_decode_torch`: what an engine writes instead (the bench's baseline);
* :func:`check_results`: an op's outputs against the reference under the error bounds of
  test_lightning_decode.py's docstring.
"""

from __future__ import annotations

import torch

FP32, FP16, BF16 = torch.float32, torch.float16, torch.bfloat16

# Error bounds (test_lightning_decode.py's docstring): new_kv relative to |ratio past| + |k v|, output relative to
# sum_i |q_i| (|ratio past_ij| + |k_i v_j|); the rounding of the output to its dtype on top.
KV_RTOL = 1e-6
OUT_RTOL = 1e-5
ROUNDING = {FP32: 0.0, FP16: 2.0**-11, BF16: 2.0**-8}  # unit roundoff of the output dtype
TINY = {FP32: 1e-37, FP16: 2.0**-24, BF16: 1e-37}  # subnormal spacing (fp16) or a negligible floor


def lightning_decode_ref(q, k, v, past_kv, slope):
    """The op's value in fp64: ``(output, new_kv, output_bound, kv_bound)``, with output
    ``[b, h, 1, e]`` and new_kv ``[b, h, d, e]``; the bounds are ``sum_i |q_i| kv_bound_ij``
    and ``|ratio past_ij| + |k_i v_j|``, the scales of the fp32 rounding errors."""
    f64 = torch.float64
    h = q.shape[1]
    ratio = torch.exp(-slope.to(f64).reshape(1, h, 1, 1))
    decayed = ratio * past_kv.to(f64)
    kv = k.to(f64).transpose(-1, -2) * v.to(f64)  # [b, h, d, 1] * [b, h, 1, e]: the outer products
    new_kv = decayed + kv
    kv_bound = decayed.abs() + kv.abs()
    output = torch.matmul(q.to(f64), new_kv)
    output_bound = torch.matmul(q.to(f64).abs(), kv_bound)
    return output, new_kv, output_bound, kv_bound


def lightning_decode_torch(q, k, v, past_kv, slope):
    """What an engine writes instead (the benchmark's baseline): the formula in fp32 torch ops,
    the output rounded to q's dtype. Returns ``(output, new_kv)``."""
    ratio = torch.exp(-slope.reshape(1, q.shape[1], 1, 1).float())
    new_kv = ratio * past_kv + k.float().transpose(-1, -2) * v.float()
    output = torch.matmul(q.float(), new_kv)
    return output.to(q.dtype), new_kv


def within(got: torch.Tensor, want: torch.Tensor, tol: torch.Tensor) -> "str | None":
    """None when every ``|got - want| <= tol`` (NaN anywhere fails), else a one-line report."""
    err = (got.to(torch.float64) - want).abs()
    bad = ~(err <= tol)
    if not bool(bad.any()):
        return None
    first = bad.nonzero()[0].tolist()
    at = tuple(first)
    return (f"{int(bad.sum())} of {bad.numel()} elements off, first at {at}: got {got[at].item()!r}, "
            f"want {want[at].item()!r}, tolerance {tol[at].item():.3g}")


def check_results(q, k, v, past_kv, slope, output, new_kv) -> "str | None":
    """Compare ``output`` and ``new_kv`` with the fp64 reference of the inputs (past_kv: the state
    before the call); None or a one-line report."""
    want_out, want_kv, out_bound, kv_bound = lightning_decode_ref(q, k, v, past_kv, slope)
    if output.shape != want_out.shape or output.dtype != q.dtype:
        return f"output {tuple(output.shape)} {output.dtype}, expected {tuple(want_out.shape)} {q.dtype}"
    if new_kv.shape != want_kv.shape or new_kv.dtype != FP32:
        return f"new_kv {tuple(new_kv.shape)} {new_kv.dtype}, expected {tuple(want_kv.shape)} torch.float32"
    msg = within(new_kv, want_kv, KV_RTOL * kv_bound + TINY[FP32])
    if msg:
        return f"new_kv: {msg}"
    u = ROUNDING[q.dtype]
    # An fp32 sum of d terms errs by at most ~(d - 1) 2^-24 of the sum of their magnitudes (and
    # each new_kv term by a few ulps): within OUT_RTOL up to d ~ 160, wider for longer rows.
    rtol = max(OUT_RTOL, (q.shape[-1] + 4) * 2.0**-24)
    tol = rtol * (1 + u) * out_bound + u * want_out.abs() + TINY[q.dtype]
    msg = within(output, want_out, tol)
    return f"output: {msg}" if msg else None
