# SPDX-License-Identifier: Apache-2.0
"""Benchmark of embedding_lookup against PyTorch (``F.embedding`` = ``weight[indices]``, and the
masked vocab-parallel form of VocabParallelEmbedding), eager and torch.compile.

    python benchmark/project/bench_embedding_lookup.py --out bench_out [--quick | --models] [--no-compile]

Weight: a Llama-3 sized table (V = 128256, D = 4096) shared by the rotated input sets; the
indices (int64, random over the vocabulary) are fresh per set. The vocab-parallel op
(``embedding_lookup_tp``) is the shard of rank 3 of 8 (rows 48096..64127, 16032 rows):
about 1/8 of the indices fall in the shard, the other rows are zeros.
Bytes per call: the output written, plus the weight rows read (every row for a plain
gather; the expected in-shard fraction for a shard), plus the indices.
Goals (API issue): 8192 x 4096 bf16 plain gather >= 3500 GB/s (H200), T = 1..128 <= 2 us
in a CUDA graph, and faster than both baselines at every shape.
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
from benchmark.models import hidden_sizes  # noqa: E402
from tests.project.ref_embedding_lookup import embedding_lookup_ref, embedding_lookup_torch  # noqa: E402

OPS = ("embedding_lookup", "embedding_lookup_tp")
MODEL_T_EMBED = (16, 8192)  # --models
VOCAB, TP, RANK = 128256, 8, 3
SHARD = VOCAB // TP  # 16032
VOCAB_RANGE = {"embedding_lookup": None, "embedding_lookup_tp": (RANK * SHARD, SHARD)}

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def shapes(quick: bool, models: bool = False):
    """(op, dtype, T, D) in run order: the acceptance shapes (plain, bf16, D = 4096) first.
    ``models``: the plain gather at the hidden sizes of benchmark/models.py (D = hidden) that
    the default list lacks."""
    bf16 = torch.bfloat16
    if models:
        return [("embedding_lookup", bf16, t, d) for d in hidden_sizes(skip=(4096, 8192)) for t in MODEL_T_EMBED]
    if quick:
        return [
            ("embedding_lookup", bf16, 1, 4096),
            ("embedding_lookup", bf16, 8192, 4096),
            ("embedding_lookup_tp", bf16, 128, 4096),
            ("embedding_lookup_tp", bf16, 8192, 4096),
        ]
    out = [("embedding_lookup", bf16, t, 4096) for t in (1, 16, 128, 1024, 8192, 32768)]
    out += [("embedding_lookup_tp", bf16, t, 4096) for t in (1, 16, 128, 1024, 8192, 32768)]
    out += [("embedding_lookup", torch.float16, t, 8192) for t in (1, 8192)]
    out += [("embedding_lookup", torch.float32, t, 2048) for t in (1, 8192)]
    return out


def make_check(vocab_range):
    def check(args, out) -> "str | None":
        weight, indices = args
        if not isinstance(out, torch.Tensor):
            return f"returned {type(out).__name__}, not a tensor"
        expected = embedding_lookup_ref(weight, indices, vocab_range)
        if out.shape != expected.shape or out.dtype != expected.dtype:
            return f"output {tuple(out.shape)} {out.dtype}, expected {tuple(expected.shape)} {expected.dtype}"
        if not torch.equal(out, expected):
            return f"{int((out != expected).any(-1).sum())} of {indices.numel()} rows differ (a gather is exact)"
        return None

    return check


def build(args: argparse.Namespace) -> Bench:
    ops = Bench.selected_ops(args, OPS)
    bench = Bench("embedding_lookup", "embedding_lookup vs F.embedding / masked vocab-parallel torch", plot_x="T")

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        vocab_range = VOCAB_RANGE[case.op]
        return lambda weight, indices: sgl_kernel.embedding_lookup(weight, indices, vocab_range=vocab_range)

    def eager(case):
        vocab_range = VOCAB_RANGE[case.op]
        return lambda weight, indices: embedding_lookup_torch(weight, indices, vocab_range)

    compiled = {}

    def compiled_fn(case):
        if case.op not in compiled:
            vocab_range = VOCAB_RANGE[case.op]

            def fn(weight, indices):
                return embedding_lookup_torch(weight, indices, vocab_range)

            # fullgraph: a graph break would raise instead of silently timing eager code.
            compiled[case.op] = torch.compile(fn, dynamic=False, fullgraph=True)
        return compiled[case.op]

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", eager)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    weights = {}  # (dtype, D) -> the table, shared by every case and rotated set that uses it
    for op, dtype, t, d in shapes(args.quick, args.models):
        if op not in ops:
            continue
        vocab_range = VOCAB_RANGE[op]
        rows = VOCAB if vocab_range is None else SHARD
        elt = torch.empty((), dtype=dtype).element_size()
        read_fraction = 1.0 if vocab_range is None else SHARD / VOCAB
        nbytes = t * d * elt + int(t * read_fraction) * d * elt + t * 8

        def setup(t=t, d=d, dtype=dtype, rows=rows):
            key = (dtype, d, rows)
            if key not in weights:
                weights.clear()  # keep one table alive at a time
                weights[key] = torch.randn(rows, d, device="cuda", dtype=dtype)
            return weights[key], torch.randint(0, VOCAB, (t,), device="cuda")

        bench.add_case(op, dtype, {"T": t, "D": d}, setup, nbytes, check=make_check(vocab_range))

    planned = {(c.op, c.dtype, c.params["T"], c.params["D"]) for c in bench.cases}
    bf16 = torch.bfloat16
    if ("embedding_lookup", bf16, 8192, 4096) in planned:
        bench.goal_gbps("embedding_lookup", bf16, {"T": 8192, "D": 4096}, h200_gbps=3500)
    for op in ops:
        for t in (1, 16, 128):
            if (op, bf16, t, 4096) in planned:
                bench.goal_max_us(op, bf16, {"T": t, "D": 4096}, max_us=2.0)
        bench.goal_min_speedup(op, "torch", 1.0)
        if not args.no_compile:
            bench.goal_min_speedup(op, "torch.compile", 1.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv, models=True)


if __name__ == "__main__":
    sys.exit(main())
