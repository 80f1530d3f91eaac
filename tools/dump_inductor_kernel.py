#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Print the Triton source, the launch configuration it was autotuned to and the memory
instructions of the PTX that torch.compile generates for a reference function, to compare a
baseline kernel with ours; with --time, also time the compiled function and sgl_kernel's op
on the same shape (CUDA events, rotating among enough input sets to defeat the L2).

    python3 tools/dump_inductor_kernel.py silu_and_mul 32768 14336
    python3 tools/dump_inductor_kernel.py rmsnorm 32768 8192 --time
    python3 tools/dump_inductor_kernel.py fused_add_rmsnorm 32768 4096 --time
    python3 tools/dump_inductor_kernel.py rmsnorm 32768 6144 --save /tmp/inductor  # then nvdisasm the .cubin

Ops: silu_and_mul, gelu_and_mul, gelu_tanh_and_mul (T, d), the RMSNorm family of
tests/elementwise/ref_norm.py (T, H), embedding_lookup (T indices into a 128256-row table of
width d, as bench_embedding_lookup.py) and store_kv_cache (T rows of d elements into a pool of
4T slots, as bench_store_kv_cache.py with heads x dim = d); bf16.
"""

from __future__ import annotations

import argparse
import gc
import glob
import os
import re
import sys
import tempfile

cache = tempfile.mkdtemp(prefix="sgl-inductor-")
os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

import torch  # noqa: E402

from tests.elementwise.ref_activation import act_and_mul_torch  # noqa: E402
from tests.elementwise.ref_norm import OPS as NORM_OPS  # noqa: E402
from tests.elementwise.ref_norm import fused_add_rmsnorm_torch_, rmsnorm_torch  # noqa: E402
from tests.project.ref_embedding_lookup import embedding_lookup_torch  # noqa: E402
from tests.project.ref_store_kv_cache import store_kv_cache_torch  # noqa: E402

EPS = 1e-6


def make(op: str, t: int, d: int):
    """(reference function, argument maker, our op or None, bytes moved per call)."""
    bf16 = torch.bfloat16
    if op in NORM_OPS:
        fused, gemma = NORM_OPS[op]
        if fused:

            def ref(x, r, w):
                fused_add_rmsnorm_torch_(x, r, w, EPS, gemma)

            def args():
                return (torch.randn(t, d, device="cuda", dtype=bf16), torch.randn(t, d, device="cuda", dtype=bf16),
                        torch.randn(d, device="cuda", dtype=bf16))

            nbytes = 4 * t * d * 2 + d * 2
        else:

            def ref(x, w):
                return rmsnorm_torch(x, w, EPS, gemma)

            def args():
                return (torch.randn(t, d, device="cuda", dtype=bf16), torch.randn(d, device="cuda", dtype=bf16))

            nbytes = 2 * t * d * 2 + d * 2

        def ours(*a):
            import sgl_kernel

            fn = getattr(sgl_kernel, op)
            if fused:
                return fn(a[0], a[1], a[2], EPS, enable_pdl=False)
            return fn(a[0], a[1], EPS, enable_pdl=False)

        return ref, args, ours, nbytes

    if op == "embedding_lookup":
        vocab = 128256
        table = torch.randn(vocab, d, device="cuda", dtype=bf16)  # shared by every set, as the bench does

        def ref(w, idx):
            return embedding_lookup_torch(w, idx)

        def args():
            return (table, torch.randint(0, vocab, (t,), device="cuda"))

        def ours(w, idx):
            import sgl_kernel

            return sgl_kernel.embedding_lookup(w, idx)

        return ref, args, ours, 2 * t * d * 2 + 8 * t

    if op == "store_kv_cache":
        slots = 4 * t
        pool = (torch.randn(slots, d, device="cuda", dtype=bf16), torch.randn(slots, d, device="cuda", dtype=bf16))

        def ref(kc, vc, loc, k, v):
            store_kv_cache_torch(kc, vc, loc, k, v)

        def args():
            return (*pool, torch.randperm(slots, device="cuda")[:t], torch.randn(t, d, device="cuda", dtype=bf16),
                    torch.randn(t, d, device="cuda", dtype=bf16))

        def ours(kc, vc, loc, k, v):
            import sgl_kernel

            sgl_kernel.set_kv_buffer_kernel(kc, vc, loc, k, v)

        return ref, args, ours, 4 * t * d * 2

    def ref(a):
        return act_and_mul_torch(op, a)

    def args():
        return (torch.randn(t, 2 * d, device="cuda", dtype=bf16),)

    def ours(a):
        import sgl_kernel

        return getattr(sgl_kernel, op)(a)

    return ref, args, ours, t * d * 2 * 3


def time_us(fn, sets, reps: int = 30) -> float:
    """Median per-call time over `reps` rounds of one call on each set (eager launches)."""
    for s in sets:
        fn(*s)
    torch.cuda.synchronize()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        e0.record()
        for s in sets:
            fn(*s)
        e1.record()
        e1.synchronize()
        ts.append(e0.elapsed_time(e1) * 1e3 / len(sets))
    ts.sort()
    return ts[len(ts) // 2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("op")
    ap.add_argument("t", type=int)
    ap.add_argument("d", type=int)
    ap.add_argument("--time", action="store_true", help="time torch.compile and sgl_kernel on this shape")
    ap.add_argument("--save", metavar="DIR",
                    help="copy the cubin and PTX of every compiled Triton kernel into DIR, to disassemble")
    a = ap.parse_args()
    ref, make_args, ours, nbytes = make(a.op, a.t, a.d)
    fn = torch.compile(ref, dynamic=False, fullgraph=True)
    first = make_args()
    fn(*first)
    torch.cuda.synchronize()
    for path in glob.glob(os.path.join(cache, "inductor", "**", "*.py"), recursive=True):
        src = open(path).read()
        if "@triton.jit" in src:
            start = src.find("@triton_heuristics")
            print(f"--- {path}\n{src[start:start + 3500]}")
    # The configuration each autotuned kernel settled on (launchers left after autotuning).
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner

        for obj in gc.get_objects():
            try:
                found = isinstance(obj, CachingAutotuner)
            except ReferenceError:  # a dead weak proxy
                continue
            if found:
                name = getattr(getattr(obj, "fn", None), "__name__", "?")
                print(f"--- autotuned {name}: {[str(l.config) for l in getattr(obj, 'launchers', [])]}")
    except Exception as exc:  # an internal API: report, do not fail
        print(f"--- (autotune config not found: {exc})")
    for path in glob.glob(os.path.join(cache, "triton", "**", "*.ptx"), recursive=True):
        ptx = open(path).read()
        print(f"--- {os.path.basename(path)}")
        for line in ptx.splitlines():
            if re.search(r"\b(ld|st)\.global|\.maxntid|\.reqntid|div|mul\.hi|bar\.sync|shfl", line):
                print("   ", line.strip())
    if a.save:
        import shutil

        os.makedirs(a.save, exist_ok=True)
        for path in glob.glob(os.path.join(cache, "triton", "**", "*.*"), recursive=True):
            if path.endswith((".cubin", ".ptx")):
                # The cache directory is a hash: keep it in the name, kernels of two configs share a name.
                tag = os.path.basename(os.path.dirname(path))[:8]
                shutil.copy(path, os.path.join(a.save, f"{tag}_{os.path.basename(path)}"))
        print(f"--- Triton cubin and PTX copied to {a.save}")
    if a.time:
        l2 = torch.cuda.get_device_properties(0).L2_cache_size
        per_set = sum(x.numel() * x.element_size() for x in first)
        sets = [first] + [make_args() for _ in range(max(0, -(-4 * l2 // per_set) - 1))]
        for name, f in (("torch.compile", fn), ("sgl_kernel", ours), ("torch.compile", fn), ("sgl_kernel", ours)):
            us = time_us(f, sets)
            print(f"time {name:14s} {a.op} T={a.t} H={a.d}: {us:8.2f} us  {nbytes / us / 1e3:7.0f} GB/s "
                  f"({len(sets)} sets)")


if __name__ == "__main__":
    main()
