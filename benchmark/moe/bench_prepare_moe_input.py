# SPDX-License-Identifier: Apache-2.0
"""Benchmark of prepare_moe_input (the grouped-GEMM layout of the CUTLASS MoE path: expert
offsets, problem sizes and the two permutations, once per MoE layer) against what an engine could
run without the kernel: ``prepare_moe_input_torch`` of tests/moe/ref_prepare_moe_input.py (a
scatter_add histogram, cumsums, a stable ``argsort`` of the experts, two scatters; no host sync,
so it runs in a CUDA graph), eager and under torch.compile(fullgraph=True).

    python benchmark/moe/bench_prepare_moe_input.py --out bench_out [--quick] [--no-compile]

Calls as SGLang's CUTLASS MoE makes them (int32 ids, k distinct experts a token from the top-k of
random scores; blockscale_offsets only on the FP4 path, timed once here):
  DeepSeek-V3 / R1   E=256 k=8   n=2048  k=7168    T = 1, 16, 128 (decode), 4096, 16384 (prefill)
  Mixtral-8x7B       E=8   k=2   n=14336 k=4096    T = 1, 16, 128, 4096, 16384
Bytes per call: the ids read (numel * 4), both permutations written (2 * numel * 4), the offsets
and problem sizes written.
Goals: T <= 128 at most 2 us in a CUDA graph (DESIGN.md's decode target; the kernel is one launch
there), and never slower than either baseline.

The kernel: one block (one launch) up to 4096 entries, three launches (per-chunk counts, a
one-block scan, per-chunk placement) above. Other implementations, not run here: SGLang's CUDA
kernels (compute_problem_sizes with global atomics per expert, compute_expert_offsets in one
thread, compute_arg_sorts with one block per expert scanning all of topk_ids: slots inside an
expert in no fixed order).
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
from tests.moe.ref_prepare_moe_input import prepare_moe_input_torch, prepare_reference  # noqa: E402

OP = "prepare_moe_input"
DECODE_T = (1, 16, 128)
# model -> (E, topk, n, k)
MODELS = {"dsv3": (256, 8, 2048, 7168), "mixtral": (8, 2, 14336, 4096)}

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def shapes(quick: bool):
    """(model, T, blockscale) in run order."""
    if quick:
        return [("dsv3", 1, 0), ("dsv3", 128, 0), ("dsv3", 4096, 0)]
    out = [("dsv3", t, 0) for t in (1, 16, 128, 4096, 16384)]
    out += [("dsv3", 128, 1)]
    out += [("mixtral", t, 0) for t in (1, 16, 128, 4096, 16384)]
    return out


def check(args, out) -> "str | None":
    """The written outputs against prepare_reference, exactly (int32; both implementations order
    each expert's slots by flat index)."""
    ids, offsets, ps1, ps2, inp, outp, E, n, k, bso = args
    ref = prepare_reference(ids, E, n, k)
    pairs = [("expert_offsets", offsets, ref.expert_offsets), ("problem_sizes1", ps1, ref.problem_sizes1),
             ("problem_sizes2", ps2, ref.problem_sizes2), ("input_permutation", inp, ref.input_permutation),
             ("output_permutation", outp, ref.output_permutation)]
    if bso is not None:
        pairs.append(("blockscale_offsets", bso, ref.blockscale_offsets))
    for name, got, want in pairs:
        if not torch.equal(got, want):
            return f"{name} differs from the reference"
    return None


def build(args: argparse.Namespace) -> Bench:
    Bench.selected_ops(args, (OP,))
    bench = Bench("prepare_moe_input", "prepare_moe_input vs a torch argsort-based layout (CUTLASS MoE input)",
                  plot_x="T")

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        return lambda *a: sgl_kernel.prepare_moe_input(*a)

    def eager(case):
        return prepare_moe_input_torch

    compiled = {}

    def compiled_fn(case):
        if "fn" not in compiled:
            # fullgraph: a graph break would raise instead of silently timing eager code.
            compiled["fn"] = torch.compile(prepare_moe_input_torch, dynamic=False, fullgraph=True)
        return compiled["fn"]

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", eager)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    for model, t, bs in shapes(args.quick):
        E, topk, n, k = MODELS[model]
        numel = t * topk
        nbytes = 4 * (numel + 2 * numel + (E + 1) * (2 if bs else 1) + 2 * 3 * E)

        def setup(t=t, E=E, topk=topk, n=n, k=k, bs=bs):
            ids = torch.rand(t, E, device="cuda").topk(topk, dim=1).indices.to(torch.int32)
            i32 = dict(dtype=torch.int32, device="cuda")
            bso = torch.empty(E + 1, **i32) if bs else None
            return (ids, torch.empty(E + 1, **i32), torch.empty(E, 3, **i32), torch.empty(E, 3, **i32),
                    torch.empty(t * topk, **i32), torch.empty(t * topk, **i32), E, n, k, bso)

        bench.add_case(OP, torch.int32, {"T": t, "E": E, "topk": topk, "bso": bs}, setup, nbytes, check=check)

    for c in bench.cases:
        if c.params["T"] in DECODE_T:
            bench.goal_max_us(OP, torch.int32, c.params, max_us=2.0)
    bench.goal_min_speedup(OP, "torch", 1.0)
    if not args.no_compile:
        bench.goal_min_speedup(OP, "torch.compile", 1.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
