# SPDX-License-Identifier: Apache-2.0
"""Benchmark of store_kv_cache (set_kv_buffer_kernel) against PyTorch indexing
(``k_cache[loc] = k; v_cache[loc] = v``, eager and torch.compile).

    python benchmark/project/bench_store_kv_cache.py --out bench_out [--quick | --models] [--no-compile]

Layout: separate contiguous k and v caches of [slots, H, D] (one layer of an MHA token pool),
k and v [n, H, D], n distinct random locations. The cache pool is shared by the rotated
input sets (it is written, not read); k, v and the locations are fresh per set.
Bytes per call: k and v read + written once each, 4 * n * H * D * elt (the locations'
8 * n bytes are not counted). Goals (API issue): 8192 x 4096 bf16 >= 3500 GB/s (H200),
n = 1..128 <= 2 us in a CUDA graph, and faster than both baselines at every shape.
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
from benchmark.models import kv_layouts  # noqa: E402
from tests.project.ref_store_kv_cache import store_kv_cache_torch  # noqa: E402

OPS = ("store_kv_cache",)
MODEL_N_KV = (16, 8192)  # --models

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def shapes(quick: bool, models: bool = False):
    """(n, H, D) in run order: the acceptance shapes (H = 32, D = 128: 8 KB bf16 rows) first.
    ``models``: the KV rows one rank of a TP 1 / TP 8 engine writes (benchmark/models.py) that
    the default list lacks."""
    if models:
        return [(n, h, d) for h, d in kv_layouts() if (h, d) not in ((32, 128), (8, 128), (1, 576))
                for n in MODEL_N_KV]
    if quick:
        return [(1, 32, 128), (128, 32, 128), (8192, 32, 128), (1024, 8, 128)]
    out = [(n, 32, 128) for n in (1, 16, 128, 1024, 8192, 32768)]
    out += [(n, 8, 128) for n in (1, 128, 8192)]  # GQA: 2 KB rows
    out += [(n, 1, 576) for n in (1, 8192)]  # MLA-sized rows (1152 bytes)
    return out


def check(args, out) -> "str | None":
    """The stored rows equal k and v bit for bit (the op is a byte copy)."""
    k_cache, v_cache, loc, k, v = args
    if out is not None:
        return f"returned {type(out).__name__}, expected None"
    idx = loc.long()
    for name, cache, src in (("k", k_cache, k), ("v", v_cache, v)):
        got = cache[idx].reshape(src.shape)
        if not torch.equal(got.view(torch.int16), src.view(torch.int16)):
            return f"{name} rows differ from the stored cache rows"
    return None


def build(args: argparse.Namespace) -> Bench:
    Bench.selected_ops(args, OPS)
    bench = Bench("store_kv_cache", "set_kv_buffer_kernel vs PyTorch indexing (eager, torch.compile)", plot_x="n")

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        return sgl_kernel.set_kv_buffer_kernel

    compiled = []

    def compiled_fn(case):
        if not compiled:
            # fullgraph: a graph break would raise instead of silently timing eager code.
            compiled.append(torch.compile(store_kv_cache_torch, dynamic=False, fullgraph=True))
        return compiled[0]

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", lambda case: store_kv_cache_torch)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    dtype = torch.bfloat16
    elt = torch.empty((), dtype=dtype).element_size()
    for n, heads, dim in shapes(args.quick, args.models):
        slots = max(4 * n, 4096)
        pool = {}

        def setup(n=n, heads=heads, dim=dim, slots=slots, pool=pool):
            if not pool:  # one pool per case, shared by the rotated sets
                pool["k"] = torch.randn(slots, heads, dim, device="cuda", dtype=dtype)
                pool["v"] = torch.randn(slots, heads, dim, device="cuda", dtype=dtype)
            loc = torch.randperm(slots, device="cuda")[:n]
            k = torch.randn(n, heads, dim, device="cuda", dtype=dtype)
            v = torch.randn(n, heads, dim, device="cuda", dtype=dtype)
            return pool["k"], pool["v"], loc, k, v

        bench.add_case("store_kv_cache", dtype, {"n": n, "H": heads, "D": dim}, setup, 4 * n * heads * dim * elt,
                       check=check)

    planned = {(c.params["n"], c.params["H"], c.params["D"]) for c in bench.cases}
    if (8192, 32, 128) in planned:
        bench.goal_gbps("store_kv_cache", dtype, {"n": 8192, "H": 32, "D": 128}, h200_gbps=3500)
    for n in (1, 16, 128):
        if (n, 32, 128) in planned:
            bench.goal_max_us("store_kv_cache", dtype, {"n": n, "H": 32, "D": 128}, max_us=2.0)
    bench.goal_min_speedup("store_kv_cache", "torch", 1.0)
    if not args.no_compile:
        bench.goal_min_speedup("store_kv_cache", "torch.compile", 1.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv, models=True)


if __name__ == "__main__":
    sys.exit(main())
