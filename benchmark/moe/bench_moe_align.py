# SPDX-License-Identifier: Apache-2.0
"""Benchmark of moe_align_block_size (the token -> expert block layout that SGLang's fused-MoE
Triton GEMMs read, once per MoE layer) against what an engine could run without the kernel:
``moe_align_block_size_torch`` of tests/moe/ref_moe_align.py (an index_add histogram, cumsums,
a stable ``torch.sort`` of the buckets, a scatter, ``searchsorted`` for the block experts; no
host sync, so it runs in a CUDA graph), eager and under torch.compile(fullgraph=True).

    python benchmark/moe/bench_moe_align.py --out bench_out [--quick] [--no-compile]

Calls as SGLang makes them (python/sglang/srt/layers/moe/fused_moe_triton/moe_align_block_size.py):
num_experts = E + 1 buckets (bucket 0: ids -1), pad_sorted_token_ids=True, sorted_token_ids of
numel * block_size entries when numel < E + 1 and numel + (E + 1) * (block_size - 1) otherwise,
experts_ids of its blocks, cumsum_buffer of E + 2. Routers as the models route (int32 ids, k
distinct experts a token from the top-k of random scores):
  DeepSeek-V3 / R1   E=256 k=8   T = 1, 16, 128 (decode) and 1024, 4096, 16384 (prefill)
  Mixtral-8x7B       E=8   k=2   T = 4096
  Qwen3-MoE          E=128 k=8   T = 16384
  Kimi-K2            E=384 k=8   T = 16
block_size 16 for decode (T <= 128) and 64 for prefill, the fused-MoE configs' usual BLOCK_SIZE_M.
Bytes per call: the ids read (numel * 4), sorted_token_ids written whole (padding included),
experts_ids (all of it: an upper bound, only the used blocks are written), cumsum and
num_tokens_post_pad.
Goals: T <= 128 at most 2 us in a CUDA graph, and never slower than either baseline.
A fourth column, "one block", times the same kernel held to one block (SGL_KERNEL_MOE_ALIGN_CLUSTER=1)
where the launcher would use a thread-block cluster (past 4096 entries, sm90+): a tuning aid for
that threshold, without a goal.

Other implementations, not run here: SGLang's CUDA kernel counts in one block (a shared-memory
histogram and a scan) and places the entries with a second multi-block kernel through global
atomics on the offsets (order inside an expert unspecified); SGLang's older Triton version runs
four programs-per-expert stages (a per-program histogram into an [E + 1, E] table, a cumsum
over programs, a one-program cumsum over experts, the placement).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

_ROOT = str(Path(__file__).resolve().parents[2])
if sys.path[0] != _ROOT:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402

from benchmark.harness import Bench, cli_main, short_error  # noqa: E402
from tests.moe.ref_moe_align import align_reference, moe_align_block_size_torch, sglang_buffer_sizes  # noqa: E402

OP = "moe_align_block_size"
CLUSTER_ENV = "SGL_KERNEL_MOE_ALIGN_CLUSTER"
ONE_BLOCK_MAX = 4096  # entries; past it (sm90+) the kernel runs on a thread-block cluster
DECODE_T = (1, 16, 128)
# model -> (E, k)
MODELS = {"dsv3": (256, 8), "mixtral": (8, 2), "qwen3_moe": (128, 8), "kimi_k2": (384, 8)}

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def block_size_for(t: int) -> int:
    return 16 if t <= 128 else 64


def shapes(quick: bool):
    """(model, T) in run order."""
    if quick:
        return [("dsv3", 1), ("dsv3", 128), ("dsv3", 4096)]
    out = [("dsv3", t) for t in (1, 16, 128, 1024, 4096, 16384)]
    out += [("mixtral", 4096), ("qwen3_moe", 16384), ("kimi_k2", 16)]
    return out


def check(args, out) -> "str | None":
    """The written outputs against align_reference (both implementations order each expert's
    entries by flat index, so the comparison is exact)."""
    ids, nb, bs, sorted_ids, experts_ids, post_pad, cumsum, pad = args
    ref = align_reference(ids, nb, bs)
    n, total = ids.numel(), ref.total
    if int(post_pad.item()) != total:
        return f"num_tokens_post_pad {int(post_pad.item())}, expected {total}"
    if not torch.equal(cumsum[: nb + 1].long(), ref.offsets):
        return "cumsum_buffer differs from the padded offsets"
    if not torch.equal(experts_ids[: total // bs], ref.block_experts):
        return "experts_ids differ"
    if not torch.equal(sorted_ids[:total], ref.sorted_ids):
        return "sorted_token_ids[:num_tokens_post_pad] differ"
    if pad and not bool((sorted_ids[total:] == n).all()):
        return "the tail of sorted_token_ids is not padding (numel)"
    return None


def build(args: argparse.Namespace) -> Bench:
    Bench.selected_ops(args, (OP,))
    bench = Bench("moe_align", "moe_align_block_size vs a torch sort-based layout (fused-MoE input)", plot_x="T")

    def ours(case):
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")
        return lambda *a: sgl_kernel.moe_align_block_size(*a)

    def eager(case):
        return moe_align_block_size_torch

    compiled = {}

    def compiled_fn(case):
        if "fn" not in compiled:
            # fullgraph: a graph break would raise instead of silently timing eager code.
            compiled["fn"] = torch.compile(moe_align_block_size_torch, dynamic=False, fullgraph=True)
        return compiled["fn"]

    def one_block(case):
        # The same kernel held to one block (the launcher reads the variable at every call, so at
        # graph capture): whether the cluster pays at this size. No goal is set against it.
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")

        def fn(*a):
            old = os.environ.get(CLUSTER_ENV)
            os.environ[CLUSTER_ENV] = "1"
            try:
                sgl_kernel.moe_align_block_size(*a)
            finally:
                if old is None:
                    del os.environ[CLUSTER_ENV]
                else:
                    os.environ[CLUSTER_ENV] = old

        return fn

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider("torch", eager)
    bench.add_provider("torch.compile", compiled_fn, compiled=True)
    bench.add_provider("one block", one_block, applies=lambda c: c.params["T"] * c.params["k"] > ONE_BLOCK_MAX)
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    for model, t in shapes(args.quick):
        E, k = MODELS[model]
        nb, bs, n = E + 1, block_size_for(t), t * k
        sorted_len, experts_len = sglang_buffer_sizes(n, nb, bs)
        nbytes = 4 * (n + sorted_len + experts_len + (nb + 1) + 1)

        def setup(t=t, E=E, k=k, nb=nb, bs=bs, sorted_len=sorted_len, experts_len=experts_len):
            ids = torch.rand(t, E, device="cuda").topk(k, dim=1).indices.to(torch.int32)
            i32 = dict(dtype=torch.int32, device="cuda")
            return (ids, nb, bs, torch.empty(sorted_len, **i32), torch.empty(experts_len, **i32),
                    torch.empty(1, **i32), torch.empty(nb + 1, **i32), True)

        bench.add_case(OP, torch.int32, {"T": t, "E": E, "k": k, "bs": bs}, setup, nbytes, check=check)

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
