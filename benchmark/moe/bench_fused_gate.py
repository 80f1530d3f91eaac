# SPDX-License-Identifier: Apache-2.0
"""Benchmark of moe_fused_gate and kimi_k2_moe_fused_gate (MoE routing) against the routing an
engine runs without them: SGLang's ``biased_grouped_topk`` written in torch (sigmoid, group
view, ``topk(2)`` sum, group ``topk``, ``masked_fill``, ``topk``, ``gather``, renormalise),
eager and torch.compile.

    python benchmark/moe/bench_fused_gate.py --out bench_out [--quick] [--no-compile]

Shapes of real models: ``moe_fused_gate_dsv3`` is DeepSeek-V3/R1 (256 experts in 8 groups of 32,
4 groups kept, 8 routed experts + 1 fused shared expert, routed_scaling_factor 2.5);
``kimi_k2_moe_fused_gate`` is Kimi-K2 (384 experts, one group, 8 experts, renormalised,
factor 2.827). Router logits and bias in fp32 (what the fp32 router GEMMs of both models give),
plus DeepSeek in bf16 (the torch baselines compute in fp32 for it, as an engine must to route
correctly). T = 1 / 16 / 128 tokens (decode, CUDA graph) and 1024 / 16384 (prefill).
Bytes per call: the logits and the bias read, fp32 weights and int32 ids written.
Goals: T <= 128 at most 2 us per call; at least 1.0x both baselines at every shape.
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
from tests.moe.ref_fused_gate import (  # noqa: E402
    biased_grouped_topk_torch,
    check_fused_gate,
    fused_gate_ref,
    kimi_k2_gate_torch,
)

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)

# op -> routing configuration
OPS = {
    "moe_fused_gate_dsv3": dict(experts=256, groups=8, topk_group=4, topk=9, shared=1, factor=2.5, renorm=True,
                                scale=False),
    "kimi_k2_moe_fused_gate": dict(experts=384, groups=1, topk_group=1, topk=8, shared=0, factor=2.827,
                                   renorm=True, scale=False),
}
DECODE_T = (1, 16, 128)


def shapes(quick: bool):
    """(op, dtype, T) in run order."""
    f32, bf16 = torch.float32, torch.bfloat16
    if quick:
        return [("moe_fused_gate_dsv3", f32, 1), ("moe_fused_gate_dsv3", f32, 16384),
                ("kimi_k2_moe_fused_gate", f32, 128)]
    out = [(op, f32, t) for op in OPS for t in DECODE_T + (1024, 16384)]
    out += [("moe_fused_gate_dsv3", bf16, t) for t in (1, 128, 16384)]
    return out


def ours_fn(op: str):
    c = OPS[op]
    if op == "kimi_k2_moe_fused_gate":
        return lambda x, bias: sgl_kernel.kimi_k2_moe_fused_gate(x, bias, c["topk"], c["renorm"], c["factor"],
                                                                 c["scale"])
    return lambda x, bias: sgl_kernel.moe_fused_gate(x, bias, c["groups"], c["topk_group"], c["topk"], c["shared"],
                                                     c["factor"], c["scale"])


def torch_fn(op: str):
    """The engine's torch routing, in fp32 (a no-op cast for fp32 logits)."""
    c = OPS[op]
    if op == "kimi_k2_moe_fused_gate":
        def kimi(x, bias):
            return kimi_k2_gate_torch(x.float(), bias.float(), c["topk"], c["renorm"], c["factor"], c["scale"])
        return kimi

    def dsv3(x, bias):
        return biased_grouped_topk_torch(x.float(), bias.float(), c["topk"], c["renorm"], c["groups"], c["topk_group"],
                                         c["shared"], c["factor"], c["scale"])
    return dsv3


def make_check(op: str):
    c = OPS[op]

    def check(args, out) -> "str | None":
        x, bias = args
        if not isinstance(out, (list, tuple)) or len(out) != 2:
            return f"returned {type(out).__name__}, expected [weights, ids]"
        ref = fused_gate_ref(x, bias, c["groups"], c["topk_group"], c["topk"], c["shared"], c["factor"], c["renorm"],
                             c["scale"])
        # torch.topk breaks exact ties its own way: ids compared on tie-free robust rows only
        return check_fused_gate(out[0], out[1], ref, c["shared"], c["factor"], c["renorm"], c["scale"],
                                min_robust=0.0, rtol=1e-4, atol=1e-5, ties_exact=False)

    return check


def build(args: argparse.Namespace) -> Bench:
    ops = Bench.selected_ops(args, tuple(OPS))
    bench = Bench("fused_gate", "moe_fused_gate / kimi_k2_moe_fused_gate vs SGLang's torch routing", plot_x="T")

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        return ours_fn(case.op)

    def eager(case):
        return torch_fn(case.op)

    compiled = {}

    def compiled_fn(case):
        if case.op not in compiled:
            # fullgraph: a graph break would raise instead of silently timing eager code.
            compiled[case.op] = torch.compile(torch_fn(case.op), dynamic=False, fullgraph=True)
        return compiled[case.op]

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", eager)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    planned = []
    for op, dtype, t in shapes(args.quick):
        if op not in ops:
            continue
        c = OPS[op]
        e = c["experts"]
        elt = torch.empty((), dtype=dtype).element_size()
        nbytes = t * e * elt + e * elt + t * c["topk"] * (4 + 4)

        def setup(t=t, e=e, dtype=dtype):
            x = (torch.randn(t, e, device="cuda") * 2).to(dtype)
            bias = ((torch.rand(e, device="cuda") * 2 - 1) * 0.1).to(dtype)
            return x, bias

        params = {"T": t, "E": e, "topk": c["topk"]}
        bench.add_case(op, dtype, params, setup, nbytes, check=make_check(op))
        planned.append((op, dtype, params))

    for op, dtype, params in planned:
        if params["T"] in DECODE_T:
            bench.goal_max_us(op, dtype, params, max_us=2.0)
    for op in dict.fromkeys(p[0] for p in planned):
        bench.goal_min_speedup(op, "torch", 1.0)
        if not args.no_compile:
            bench.goal_min_speedup(op, "torch.compile", 1.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
