# SPDX-License-Identifier: Apache-2.0
"""Benchmark of apply_rope_with_cos_sin_cache_inplace (RoPE with an fp32 cos/sin cache, in
place, optionally with the fused KV-cache write) against torch eager and torch.compile of
the shared reference (tests/elementwise/ref_rope.py: rope_torch), and FlashInfer's
apply_rope_with_cos_sin_cache_inplace when flashinfer is importable.

    python benchmark/elementwise/bench_rope.py --out bench_out [--quick | --models] [--ops OP ...] [--no-compile]

Ops (labels): rope (NeoX), rope_gptj (GPT-J, interleaved), rope_kv (NeoX with the fused
KV-cache write), rope_pdl (NeoX with enable_pdl=True: the wrapper's default turns PDL on
only with the fused KV write, API.md; an engine that captures decode steps in a CUDA graph
opts in, as rope_kv gets by default). Every case: 32 q heads, 8 k heads (8 v heads with the KV write), q, k and v
separate contiguous tensors, positions int64 and in range.

Bytes per call: q and k read and written (2 * T * (32 + 8) * D * elt); with the KV write also
v read, k_buffer and v_buffer rows written (+ 3 * T * 8 * D * elt). The positions and the
cos/sin rows (T * R * 4 bytes, 2.5 % more at D = R = 128) are not counted: the goal of
DESIGN.md 9 is in GB/s of q + k traffic. The summary checks that goal and the decode goals.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# The repo root first on the path: `benchmark.harness` and the shared references in `tests/`.
_ROOT = str(Path(__file__).resolve().parents[2])
if sys.path[0] != _ROOT:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402

from benchmark.harness import Bench, cli_main, short_error  # noqa: E402
from benchmark.models import rope_layouts  # noqa: E402
from tests.elementwise.ref_rope import expected_rope, rope_torch  # noqa: E402
from tests.tolerances import elementwise_tol  # noqa: E402

OPS = ("rope", "rope_gptj", "rope_kv", "rope_pdl")
HQ, HK = 32, 8  # Llama-3-8B-like GQA
MODEL_T_ROPE = (16, 4096)  # --models

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)

try:
    from flashinfer.rope import apply_rope_with_cos_sin_cache_inplace as _flashinfer_rope
except Exception:  # optional baseline
    _flashinfer_rope = None


def shapes(quick: bool, models: bool = False):
    """(op, dtype, T, D, R) in run order: the goal shapes (rope bf16 D = R = 128) first.
    ``models``: (op, dtype, T, D, R, HQ, HK), the NeoX op at the head layouts one rank of a
    TP 1 / TP 8 engine sees (benchmark/models.py)."""
    bf16 = torch.bfloat16
    if models:
        return [("rope", bf16, t, d, r, hq, hk) for hq, hk, d, r in rope_layouts() if (hq, hk, d) != (HQ, HK, 128)
                for t in MODEL_T_ROPE]
    if quick:
        return [
            ("rope", bf16, 1, 128, 128),  # decode: L2-hot in a graph
            ("rope", bf16, 32768, 128, 128),  # the goal shape
            ("rope_kv", bf16, 128, 128, 128),
            ("rope_gptj", bf16, 4096, 128, 128),  # rotated input sets
        ]
    out = [("rope", bf16, t, 128, 128) for t in (1, 16, 128, 1024, 4096, 32768)]
    out += [("rope_kv", bf16, t, 128, 128) for t in (1, 16, 128, 4096, 32768)]
    out += [("rope_gptj", bf16, t, 128, 128) for t in (1, 16, 128, 4096, 32768)]
    out += [("rope_pdl", bf16, t, 128, 128) for t in (1, 16, 128)]
    out += [
        ("rope", bf16, 4096, 128, 64),  # partial rotary
        ("rope", bf16, 4096, 64, 64),
        ("rope", bf16, 4096, 256, 256),
        ("rope", torch.float16, 4096, 128, 128),
    ]
    return out


def case_bytes(op: str, t: int, d: int, elt: int, hq: int = HQ, hk: int = HK) -> int:
    qk = 2 * t * (hq + hk) * d * elt
    return qk + (3 * t * hk * d * elt if op == "rope_kv" else 0)


def make_setup(op: str, dtype: torch.dtype, t: int, d: int, r: int, hq: int = HQ, hk: int = HK):
    fused = op == "rope_kv"
    max_pos = max(2 * t, 4096)

    def setup():
        pos = torch.randint(0, max_pos, (t,), device="cuda")
        q = torch.randn(t, hq * d, device="cuda", dtype=dtype)
        k = torch.randn(t, hk * d, device="cuda", dtype=dtype)
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, r, 2, device="cuda", dtype=torch.float32) / r))
        freqs = torch.outer(torch.arange(max_pos, device="cuda", dtype=torch.float32), inv_freq)
        cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1).contiguous()
        if not fused:
            return (pos, q, k, cache)
        v = torch.randn(t, hk * d, device="cuda", dtype=dtype)
        rows = 2 * t
        k_buffer = torch.zeros(rows, hk * d, device="cuda", dtype=dtype)
        v_buffer = torch.zeros_like(k_buffer)
        loc = torch.randperm(rows, device="cuda")[:t]
        return (pos, q, k, cache, v, k_buffer, v_buffer, loc)

    return setup


def with_snapshot(fn):
    """The call is in place: the first call (the harness checks its output) returns copies
    of query and key taken just before it, for the check; later calls return fn's result."""
    state = {"first": True}

    def call(*args):
        if state["first"]:
            state["first"] = False
            before = (args[1].clone(), args[2].clone())
            fn(*args)
            return before
        return fn(*args)

    return call


def make_check(op: str, dtype: torch.dtype, d: int):
    """query/key after the first call vs the fp32 reference of their values before it (the
    shared tolerance table); with the KV write, the cache rows hold the rotated key and v."""
    tol = elementwise_tol(dtype)
    is_neox = op != "rope_gptj"

    def check(args, out) -> "str | None":
        if not (isinstance(out, tuple) and len(out) == 2):
            return f"internal: expected the (query, key) snapshot, got {type(out).__name__}"
        pos, q, k, cache = args[:4]
        eq, ek = expected_rope(pos, out[0], out[1], d, cache, is_neox)
        for name, got, ref in (("query", q, eq), ("key", k, ek)):
            g = got.float().reshape(ref.shape)
            if not torch.isfinite(g).all():
                return f"non-finite values in {name}"
            err = (g - ref).abs()
            bad = int((err > tol["atol"] + tol["rtol"] * ref.abs()).sum())
            if bad:
                return f"{name}: {bad} of {g.numel()} elements out of tolerance {tol}, max abs err {float(err.max()):.3g}"
        if op == "rope_kv":
            v, k_buffer, v_buffer, loc = args[4:]
            if not torch.equal(k_buffer[loc], k) or not torch.equal(v_buffer[loc], v):
                return "KV cache rows differ from the rotated key / the value"
        return None

    return check


def build(args: argparse.Namespace) -> Bench:
    ops = Bench.selected_ops(args, OPS)
    bench = Bench("rope", f"RoPE (fp32 cos/sin cache, {HQ} q / {HK} k heads, in place) vs torch eager and torch.compile",
                  plot_x="T")

    def params_of(case):
        return case.params["D"], case.op != "rope_gptj", case.op == "rope_kv"

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        d, is_neox, fused = params_of(case)
        fn = sgl_kernel.apply_rope_with_cos_sin_cache_inplace
        if case.op == "rope_pdl":
            return with_snapshot(lambda pos, q, k, cache: fn(pos, q, k, d, cache, is_neox, enable_pdl=True))
        if not fused:
            return with_snapshot(lambda pos, q, k, cache: fn(pos, q, k, d, cache, is_neox))
        arg_type = sgl_kernel.FusedSetKVBufferArg

        def fused_call(pos, q, k, cache, v, k_buffer, v_buffer, loc):
            fn(pos, q, k, d, cache, is_neox, arg_type(v, k_buffer, v_buffer, None, None, loc))

        return with_snapshot(fused_call)

    def torch_fn(case):
        d, is_neox, _ = params_of(case)

        def fn(pos, q, k, cache, *kv):
            rope_torch(pos, q, k, d, cache, is_neox, *kv)

        return fn

    def eager(case):
        return with_snapshot(torch_fn(case))

    def compiled_fn(case):
        # fullgraph: a graph break would raise instead of silently timing eager code; one
        # compile per shape (dynamic=False), as an engine with static decode shapes would.
        return with_snapshot(torch.compile(torch_fn(case), dynamic=False, fullgraph=True))

    def flashinfer(case):
        if _flashinfer_rope is None:
            raise RuntimeError("flashinfer is not importable")
        d, is_neox, fused = params_of(case)

        def fn(pos, q, k, cache, *kv):
            _flashinfer_rope(pos, q, k, d, cache, is_neox)
            if fused:  # what an engine does without the fused write: rope, then index_put
                v, k_buffer, v_buffer, loc = kv
                k_buffer[loc] = k
                v_buffer[loc] = v

        return with_snapshot(fn)

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", eager)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if _flashinfer_rope is not None:
        # JIT-compiled on first use: counted like a compiled provider (skipped by --no-compile)
        bench.add_provider("flashinfer", flashinfer, compiled=True)
    else:
        bench.notes.append("flashinfer not importable: no FlashInfer baseline (DESIGN.md 9 lists its H200 figure)")
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    for op, dtype, t, d, r, *heads in shapes(args.quick, args.models):
        if op not in ops:
            continue
        elt = torch.empty((), dtype=dtype).element_size()
        hq, hk = heads or (HQ, HK)
        params = {"T": t, "D": d, "R": r} if not heads else {"T": t, "D": d, "R": r, "HQ": hq, "HK": hk}
        bench.add_case(op, dtype, params, make_setup(op, dtype, t, d, r, hq, hk),
                       case_bytes(op, t, d, elt, hq, hk), check=make_check(op, dtype, d))

    # Goals of DESIGN.md 9 for the shapes in this run.
    planned = {(c.op, c.dtype, c.params["T"], c.params["D"], c.params["R"]) for c in bench.cases}
    bf16 = torch.bfloat16
    if ("rope", bf16, 32768, 128, 128) in planned:
        bench.goal_gbps("rope", bf16, {"T": 32768, "D": 128, "R": 128}, h200_gbps=3800)
    if not args.no_compile:
        for op in ("rope", "rope_kv"):
            if op in ops:
                bench.goal_min_speedup(op, "torch.compile", 1.0)
    for op in OPS:
        for t in (1, 16, 128):
            if (op, bf16, t, 128, 128) in planned:
                bench.goal_max_us(op, bf16, {"T": t, "D": 128, "R": 128}, max_us=2.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv, models=True)


if __name__ == "__main__":
    sys.exit(main())
