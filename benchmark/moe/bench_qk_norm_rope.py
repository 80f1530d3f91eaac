# SPDX-License-Identifier: Apache-2.0
"""Benchmark of fused_qk_norm_rope (per-head RMSNorm, then RoPE, of the q and k heads of a
packed bf16 qkv, in place) against what an engine would write instead
(tests/moe/ref_qk_norm_rope.py: qk_norm_rope_torch, Qwen3's q_norm / k_norm then RoPE from a
precomputed fp32 cos/sin cache), eager and torch.compile.

    python benchmark/moe/bench_qk_norm_rope.py --out bench_out [--quick] [--ops OP ...] [--no-compile]

Ops (labels): qk_norm_rope (NeoX, R = D, base 1e6, no YaRN: Qwen3), qk_norm_rope_yarn (NeoX
with YaRN factor 4 and its attention factor), qk_norm_rope_gptj (interleaved pairs).
Head layouts: Qwen3-8B / 32B-like (32 q, 8 k, 8 v heads, D = 128) and Qwen3-235B-A22B-like at
TP 1 (64 q, 4 k, 4 v); T = 1, 16, 128 (decode, in a CUDA graph) and 8192, 32768 (prefill).
Bytes per call: the q and k heads read and written (2 T (hq + hk) D * 2) plus the positions
(4 T); the v heads are not touched, the weights and the baselines' cos/sin rows are not counted.
Goals: T <= 128 at most 2 us, prefill >= 3800 GB/s (90 % of an H200's device copy, scaled by
the copy measured in the run; DESIGN.md 9's RoPE goal), never slower than either baseline.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if sys.path[0] != _ROOT:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402

from benchmark.harness import Bench, cli_main, short_error  # noqa: E402
from tests.moe.ref_qk_norm_rope import (  # noqa: E402
    cos_sin_cache,
    qk_norm_rope_ref,
    qk_norm_rope_torch,
    yarn_low_high,
)

OPS = ("qk_norm_rope", "qk_norm_rope_yarn", "qk_norm_rope_gptj")
BF16 = torch.bfloat16
D = 128
EPS = 1e-6
BASE = 1e6  # Qwen3's rope_theta
DECODE_T = (1, 16, 128)
PREFILL_GBPS = 3800.0
MAX_POS = 40960  # positions drawn below this (Qwen3's max_position_embeddings); the cache's rows

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def rope_params(op: str):
    """(is_neox, factor, low, high, attention_factor) of an op label."""
    if op == "qk_norm_rope_yarn":
        low, high = yarn_low_high(D, BASE, 32768)
        return True, 4.0, low, high, 1.0 + 0.1 * 1.3862943611  # mscale = 0.1 ln(4) + 1
    return op != "qk_norm_rope_gptj", 1.0, 0.0, 0.0, 1.0


def shapes(quick: bool):
    """(op, T, hq, hk, hv) in run order."""
    if quick:
        return [("qk_norm_rope", 1, 32, 8, 8), ("qk_norm_rope", 128, 32, 8, 8),
                ("qk_norm_rope", 8192, 32, 8, 8)]
    out = [("qk_norm_rope", t, 32, 8, 8) for t in (1, 16, 128, 8192, 32768)]
    out += [("qk_norm_rope", t, 64, 4, 4) for t in (1, 16, 128, 8192, 32768)]
    out += [("qk_norm_rope_yarn", t, 32, 8, 8) for t in (16, 8192)]
    out += [("qk_norm_rope_gptj", t, 32, 8, 8) for t in (16, 8192)]
    return out


def case_bytes(t: int, hq: int, hk: int) -> int:
    return 2 * t * (hq + hk) * D * 2 + 4 * t


def make_setup(op: str, t: int, hq: int, hk: int, hv: int):
    is_neox, factor, low, high, af = rope_params(op)

    def setup():
        qkv = torch.randn(t, (hq + hk + hv) * D, device="cuda").to(BF16)
        wq = (1.0 + 0.1 * torch.randn(D, device="cuda")).to(BF16)
        wk = (1.0 + 0.1 * torch.randn(D, device="cuda")).to(BF16)
        pos = torch.randint(0, MAX_POS, (t,), device="cuda", dtype=torch.int32)
        cache = cos_sin_cache(MAX_POS, D, BASE, factor, low, high, af)
        return qkv, wq, wk, pos, cache

    return setup


def with_snapshot(fn):
    """The call is in place: the first call (the harness checks its output) returns a copy of
    qkv taken just before it, for the check; later calls return fn's result."""
    state = {"first": True}

    def call(*args):
        if state["first"]:
            state["first"] = False
            before = args[0].clone()
            fn(*args)
            return before
        return fn(*args)

    return call


def make_check(op: str, hq: int, hk: int):
    """q/k heads after the first call vs the fp64 reference of qkv before it. The bound allows
    three bf16 roundings (the engine form rounds after the norm, after the weight and after the
    rotation): |err| <= 2^-6 |ref| + 2^-7 * the head's largest |ref|. tests/moe/test_qk_norm_rope.py
    holds the op to one rounding."""
    is_neox, factor, low, high, af = rope_params(op)

    def check(args, out) -> "str | None":
        qkv, wq, wk, pos, _cache = args
        if not isinstance(out, torch.Tensor):
            return f"internal: expected the qkv snapshot, got {type(out).__name__}"
        t, h = qkv.shape[0], hq + hk
        ref = qk_norm_rope_ref(out, hq, hk, D, EPS, wq, wk, BASE, is_neox, pos, factor, low, high, af)
        got = qkv[:, : h * D].double().view(t, h, D)
        if not torch.isfinite(got).all():
            return "non-finite values in the q/k heads"
        if not torch.equal(qkv[:, h * D :].view(torch.int16), out[:, h * D :].view(torch.int16)):
            return "the v heads changed"
        err = (got - ref).abs()
        bad = int((err > 2.0**-6 * ref.abs() + 2.0**-7 * ref.abs().amax(-1, keepdim=True)).sum())
        if bad:
            return f"{bad} of {got.numel()} elements beyond three bf16 roundings, max abs err {float(err.max()):.3g}"
        return None

    return check


def build(args: argparse.Namespace) -> Bench:
    ops = Bench.selected_ops(args, OPS)
    bench = Bench("qk_norm_rope", "fused_qk_norm_rope vs q_norm / k_norm + cos/sin-cache RoPE in torch", plot_x="T")

    def heads(case):
        return case.params["HQ"], case.params["HK"], case.params["HV"]

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        hq, hk, hv = heads(case)
        is_neox, factor, low, high, af = rope_params(case.op)

        def call(qkv, wq, wk, pos, cache):
            sgl_kernel.fused_qk_norm_rope(qkv, hq, hk, hv, D, EPS, wq, wk, BASE, is_neox, pos, factor, low, high, af)

        return with_snapshot(call)

    def torch_fn(case):
        hq, hk, _ = heads(case)
        is_neox = rope_params(case.op)[0]

        def fn(qkv, wq, wk, pos, cache):
            qk_norm_rope_torch(qkv, hq, hk, D, EPS, wq, wk, is_neox, pos, cache)

        return fn

    def eager(case):
        return with_snapshot(torch_fn(case))

    def compiled_fn(case):
        # fullgraph: a graph break would raise instead of silently timing eager code; one
        # compile per shape (dynamic=False), as an engine with static decode shapes would.
        return with_snapshot(torch.compile(torch_fn(case), dynamic=False, fullgraph=True))

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", eager)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    planned = []
    for op, t, hq, hk, hv in shapes(args.quick):
        if op not in ops:
            continue
        params = {"T": t, "HQ": hq, "HK": hk, "HV": hv}
        bench.add_case(op, BF16, params, make_setup(op, t, hq, hk, hv), case_bytes(t, hq, hk),
                       check=make_check(op, hq, hk))
        planned.append((op, params))

    for op, params in planned:
        if params["T"] in DECODE_T:
            bench.goal_max_us(op, BF16, params, max_us=2.0)
        elif params["T"] >= 8192:
            bench.goal_gbps(op, BF16, params, h200_gbps=PREFILL_GBPS)
    for op in ops:
        if any(p[0] == op for p in planned):
            bench.goal_min_speedup(op, "torch", 1.0)
            if not args.no_compile:
                bench.goal_min_speedup(op, "torch.compile", 1.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
