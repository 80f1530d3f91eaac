# SPDX-License-Identifier: Apache-2.0
"""Benchmark of topk_softmax / topk_sigmoid (MoE routers: the top-k experts of each token and
their weights) against what an engine runs without the kernel, SGLang's torch fallback
(``fused_topk_torch_native``): ``torch.softmax(x.float(), -1).topk(k)`` (sigmoid: ``topk`` of
``sigmoid(x) + bias``, weights gathered from ``sigmoid(x)``), then ``w / w.sum(-1)`` when the
model renormalizes; eager and torch.compile.

    python benchmark/moe/bench_topk_gating.py --out bench_out [--quick] [--no-compile]

Routers (E experts, k per token, renormalize, bias), bf16 router logits:
  Mixtral-8x7B            softmax E=8   k=2  renormalize
  Qwen1.5-MoE / Qwen2-MoE softmax E=60  k=4
  Qwen3-MoE (30B, 235B)   softmax E=128 k=8  renormalize
  Qwen3-Next-80B          softmax E=512 k=10 renormalize
  sigmoid + bias at DeepSeek-V3's size (E=256 k=8, renormalize; without its expert groups,
  which moe_fused_gate handles)
T = 1, 16, 128 tokens (decode, in a CUDA graph) and 4096 / 8192 / 16384 (prefill); a row's
shape names T, E and k (the router above fixes renormalize and the bias). Each row is a
random permutation of E distinct values (exact in bf16), so torch.topk's unspecified tie order
cannot fail the check. Bytes per call: the logits read (T E) plus the weights and int32 ids
written (T k 8), plus the bias (E 4).
Goals: T <= 128 at most 2 us in a CUDA graph, and never slower than either baseline.
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
from tests.moe.ref_topk_gating import check_topk, topk_gating_torch  # noqa: E402

OPS = ("topk_softmax", "topk_sigmoid")
BF16 = torch.bfloat16
DECODE_T = (1, 16, 128)
# router -> (op, E, k, renormalize, bias)
ROUTERS = {
    "mixtral": ("topk_softmax", 8, 2, True, False),
    "qwen2_moe": ("topk_softmax", 60, 4, False, False),
    "qwen3_moe": ("topk_softmax", 128, 8, True, False),
    "qwen3_next": ("topk_softmax", 512, 10, True, False),
    "sigmoid_bias_256": ("topk_sigmoid", 256, 8, True, True),
}

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def shapes(quick: bool):
    """(router, T) in run order."""
    if quick:
        return [("qwen3_moe", 1), ("qwen3_moe", 128), ("qwen3_moe", 16384)]
    out = [("mixtral", t) for t in (1, 128, 16384)]
    out += [("qwen3_moe", t) for t in (1, 16, 128, 16384)]
    out += [("sigmoid_bias_256", t) for t in (1, 128, 16384)]
    out += [("qwen2_moe", 4096), ("qwen3_next", 8192)]
    return out


def router_of(op: str, e: int):
    """(renormalize, bias) of the router with this op and E."""
    for r_op, r_e, _k, renorm, with_bias in ROUTERS.values():
        if (r_op, r_e) == (op, e):
            return renorm, with_bias
    raise KeyError((op, e))


def distinct_rows(t: int, e: int, dtype) -> torch.Tensor:
    """[t, e]: each row a random permutation of (j - e / 2) / 16, j < e (distinct, exact in bf16
    for e <= 512: at most 8 significant bits)."""
    perm = torch.argsort(torch.rand(t, e, device="cuda"), dim=-1)
    return ((perm - e // 2).float() / 16).to(dtype)


def build(args: argparse.Namespace) -> Bench:
    ops = Bench.selected_ops(args, OPS)
    bench = Bench("topk_gating", "topk_softmax / topk_sigmoid vs softmax().topk() (MoE routers)", plot_x="T")

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        renorm = router_of(case.op, case.params["E"])[0]
        if case.op == "topk_softmax":
            def fn(g, w, ids, bias):
                sgl_kernel.topk_softmax(w, ids, g, renorm, 0.0, bias)
                return w, ids
        else:
            def fn(g, w, ids, bias):
                sgl_kernel.topk_sigmoid(w, ids, g, renorm, bias)
                return w, ids
        return fn

    def eager(case):
        k, renorm, op = case.params["k"], router_of(case.op, case.params["E"])[0], case.op
        return lambda g, w, ids, bias: topk_gating_torch(g, k, op, renorm, bias)

    compiled = {}

    def compiled_fn(case):
        k, renorm, op = case.params["k"], router_of(case.op, case.params["E"])[0], case.op
        key = (op, k, renorm)
        if key not in compiled:
            # fullgraph: a graph break would raise instead of silently timing eager code.
            compiled[key] = torch.compile(lambda g, bias: topk_gating_torch(g, k, op, renorm, bias),
                                          dynamic=False, fullgraph=True)
        fn = compiled[key]
        return lambda g, w, ids, bias: fn(g, bias)

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", eager)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    planned = []
    for router, t in shapes(args.quick):
        op, e, k, renorm, with_bias = ROUTERS[router]
        if op not in ops:
            continue
        dtype = BF16
        elt = torch.empty((), dtype=dtype).element_size()
        nbytes = t * e * elt + t * k * (4 + 4) + (e * 4 if with_bias else 0)

        def setup(t=t, e=e, k=k, dtype=dtype, with_bias=with_bias):
            g = distinct_rows(t, e, dtype)
            w = torch.empty(t, k, dtype=torch.float32, device="cuda")
            ids = torch.empty(t, k, dtype=torch.int32, device="cuda")
            bias = torch.randn(e, device="cuda") * 0.3 if with_bias else None
            return g, w, ids, bias

        def check(args_, out, op=op, renorm=renorm) -> "str | None":
            g, _w, _ids, bias = args_
            if not (isinstance(out, tuple) and len(out) == 2):
                return f"returned {type(out).__name__}, not (weights, ids)"
            return check_topk(out[0], out[1], g, op, renorm, 0.0, bias)

        params = {"T": t, "E": e, "k": k}
        bench.add_case(op, dtype, params, setup, nbytes, check=check)
        planned.append((op, dtype, params))

    for op, dtype, params in planned:
        if params["T"] in DECODE_T:
            bench.goal_max_us(op, dtype, params, max_us=2.0)
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
