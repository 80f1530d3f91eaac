# SPDX-License-Identifier: Apache-2.0
"""Benchmark of fast_topk_v2 (op fast_topk, the 2048 largest of each row) against what an engine
runs without it: torch.topk on the window-masked scores plus the index fix-ups (topk_torch of
tests/top_k/ref_topk.py), eager and under torch.compile.

    python benchmark/top_k/bench_fast_topk.py --out bench_out [--quick] [--no-compile]

Shapes: B in {1, 16, 128, 1024} rows x L in {4096, 32768, 131072}, every window the whole row
(decode with lengths = L), fp32 normal scores. Bytes per call: the scores read (B * L * 4), the
lengths read and the indices written (B * 2048 * 4). Every call is timed in a CUDA graph (the
harness), so the B <= 128 decode shapes carry no launch overhead. The summary checks: at every
shape at least 1.0x the best baseline, and the decode shapes timed in a graph.
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

from benchmark.harness import Bench, GoalResult, cli_main, short_error  # noqa: E402
from tests.top_k.ref_topk import TOPK, check_topk, topk_torch  # noqa: E402

OP = "fast_topk"

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def shapes(quick: bool):
    """(B, L) in run order: the decode shapes first, the largest last."""
    if quick:
        return [(1, 131072), (128, 32768), (1024, 4096)]
    return [(b, l) for b in (1, 16, 128, 1024) for l in (4096, 32768, 131072)]


def check(args, out) -> "str | None":
    score, lengths = args
    if not isinstance(out, torch.Tensor):
        return f"returned {type(out).__name__}, not a tensor"
    return check_topk(score, lengths, None, out)


def goal_best_baseline(bench: Bench) -> None:
    """At every shape, ours is at least as fast as the fastest baseline of that shape."""

    def fn() -> GoalResult:
        ours = bench.ours.name
        rows = [r for r in bench.results if r.op == OP and r.provider == ours]
        worst, misses, missing = None, [], 0
        for r in rows:
            ratios = [s for s in r.speedup.values() if s is not None]
            if len(ratios) < len(bench.baselines):
                missing += 1  # a baseline not measured (failed, or skipped past the deadline)
            if not ratios:
                continue
            best = min(ratios)  # the fastest baseline gives the smallest ratio
            if worst is None or best < worst[1]:
                worst = (r, best)
            if best < 1.0:
                misses.append(f"{r.shape} {best:.2f}x")
        if worst is None:
            return GoalResult("N/A", f"{OP}: >= 1.0x the best baseline at every shape: no pair measured")
        text = (f"{OP} vs the best baseline: min {worst[1]:.2f}x ({worst[0].shape}) over {len(rows)} shapes; "
                f"goal >= 1.0x at every shape")
        status = "FAIL" if misses else ("N/A" if missing else "PASS")
        if misses:
            text += f"; misses: {', '.join(misses)}"
        if missing:
            text += f"; {missing} shape(s) lack a baseline measurement (see the table)"
        return GoalResult(status, text)

    bench.add_goal(fn)


def goal_decode_in_graph(bench: Bench) -> None:
    """The B <= 128 shapes of ours were timed inside a CUDA graph (capture succeeded)."""

    def fn() -> GoalResult:
        rows = [r for r in bench.results if r.op == OP and r.provider == bench.ours.name and r.params["B"] <= 128]
        timed = [r for r in rows if r.time_us is not None]
        if not timed:
            return GoalResult("N/A", f"{OP} B <= 128 in a CUDA graph: nothing timed")
        eager = [r.shape for r in timed if r.mode.startswith("eager")]
        status = "FAIL" if eager else "PASS"
        text = f"{OP} B <= 128 timed in a CUDA graph: {len(timed) - len(eager)} of {len(timed)} shapes"
        if eager:
            text += f"; graph capture failed for {', '.join(eager)}"
        return GoalResult(status, text)

    bench.add_goal(fn)


def build(args: argparse.Namespace) -> Bench:
    bench = Bench("fast_topk", "top-2048 per row vs torch.topk (+ index fix-ups), eager and torch.compile",
                  plot_x="L")

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        return lambda score, lengths: sgl_kernel.fast_topk_v2(score, lengths, TOPK)

    def eager(case):
        return lambda score, lengths: topk_torch(score, lengths)

    compiled = {}

    def compiled_fn(case):
        if "fn" not in compiled:
            # fullgraph: a graph break would raise instead of silently timing eager code.
            compiled["fn"] = torch.compile(lambda score, lengths: topk_torch(score, lengths), dynamic=False,
                                           fullgraph=True)
        return compiled["fn"]

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", eager)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    for b, l in shapes(args.quick):
        nbytes = b * l * 4 + b * 4 + b * TOPK * 4

        def setup(b=b, l=l):
            score = torch.randn(b, l, device="cuda")
            lengths = torch.full((b,), l, dtype=torch.int32, device="cuda")
            return score, lengths

        bench.add_case(OP, torch.float32, {"B": b, "L": l}, setup, nbytes, check=check)

    goal_best_baseline(bench)
    goal_decode_in_graph(bench)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
