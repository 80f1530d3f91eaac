#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Decode-row timings of the ops whose kernels take a PDL trigger placement (session 17):
silu_and_mul, rmsnorm, fused_add_rmsnorm, the fused norm + quant ops, concat_mla_k, RoPE
(with the KV write, with and without PDL) and the dynamic per-tensor quant, each at a few
token counts, timed as benchmark/harness.py times its "hot" rows (a CUDA graph of 100 calls
captured after a side-stream warm-up, the median replay / 100). One line per row:
"label<TAB>T<TAB>us".

    python3 tools/decode_rows.py OUT.tsv [1,16,128]     # sgl_kernel installed, a GPU
    python3 tools/decode_rows.py --summary A.tsv B.tsv   # the rows side by side

To compare two builds, alternate them (install A, run; install B, run; twice). The graphs are
the bench's, but bench_rope.py read rope_kv T=128 differently (csrc/elementwise/rope.cu's
NOTE): confirm a choice in the bench.
"""
import os
import statistics
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def summary(paths):
    data, order = {}, []
    for i, path in enumerate(paths):
        with open(path) as f:
            for line in f:
                label, t, us = line.rstrip("\n").split("\t")
                if (label, t) not in data:
                    data[label, t] = [""] * len(paths)
                    order.append((label, t))
                data[label, t][i] = us
    print("row | T | " + " | ".join(os.path.basename(p) for p in paths))
    for label, t in order:
        print(f"{label} | {t} | " + " | ".join(data[label, t]))


def cases():
    """(label, make): make(t) -> (fn, args) for one token count."""
    import torch

    import sgl_kernel
    from tests.quantization.ref_quant import alloc_scales

    bf16, fp8 = torch.bfloat16, torch.float8_e4m3fn

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=bf16)

    def silu(t, d=14336):
        return (lambda x, o: sgl_kernel.silu_and_mul(x, o)), (randn(t, 2 * d), randn(t, d))

    def rmsnorm(t, h):
        return (lambda x, w, o: sgl_kernel.rmsnorm(x, w, 1e-6, out=o)), (randn(t, h), randn(h), randn(t, h))

    def fused_add(t, h):
        return (lambda x, r, w: sgl_kernel.fused_add_rmsnorm(x, r, w, 1e-6)), (randn(t, h), randn(t, h), randn(h))

    def norm_quant(t, h, add, layout):
        ue8m0 = layout == "col_ue8m0"
        x, w = randn(t, h), randn(h)
        q = torch.empty(t, h, device="cuda", dtype=fp8)
        s = alloc_scales(t, h // 128, layout, "cuda")
        quant = (128, 1e-10, -448.0, 448.0, ue8m0)
        if add:
            return (lambda x, r, q, s, w: sgl_kernel.fused_add_rmsnorm_quant(x, r, q, s, w, *quant, rms_eps=1e-6)), (
                x, randn(t, h), q, s, w)
        return (lambda x, q, s, w: sgl_kernel.fused_rmsnorm_quant(x, q, s, w, *quant, rms_eps=1e-6)), (x, q, s, w)

    def concat(t):
        kv, latent = randn(t, 128, 256), randn(t, 576)
        k = torch.empty(t, 128, 192, device="cuda", dtype=bf16)
        return (lambda k, a, b: sgl_kernel.concat_mla_k(k, a, b)), (k, kv[..., :128], latent.view(t, 1, 576)[..., 512:])

    def rope(t, fused, pdl, d=128):
        max_pos = max(2 * t, 4096)
        pos = torch.randint(0, max_pos, (t,), device="cuda")
        q, k = randn(t, 32 * d), randn(t, 8 * d)
        inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device="cuda", dtype=torch.float32) / d))
        freqs = torch.outer(torch.arange(max_pos, device="cuda", dtype=torch.float32), inv)
        cache = torch.cat((freqs.cos(), freqs.sin()), dim=-1).contiguous()
        fn = sgl_kernel.apply_rope_with_cos_sin_cache_inplace
        if not fused:
            return (lambda pos, q, k, cache: fn(pos, q, k, d, cache, True, enable_pdl=pdl)), (pos, q, k, cache)
        v, k_buffer = randn(t, 8 * d), torch.zeros(2 * t, 8 * d, device="cuda", dtype=bf16)
        v_buffer, loc = torch.zeros_like(k_buffer), torch.randperm(2 * t, device="cuda")[:t]
        arg = sgl_kernel.FusedSetKVBufferArg

        def call(pos, q, k, cache, v, kb, vb, loc):
            fn(pos, q, k, d, cache, True, arg(v, kb, vb, None, None, loc))

        return call, (pos, q, k, cache, v, k_buffer, v_buffer, loc)

    def per_tensor(t, h=4096):
        x, q = randn(t, h), torch.empty(t, h, device="cuda", dtype=fp8)
        s = torch.zeros(1, device="cuda", dtype=torch.float32)
        return (lambda x, q, s: sgl_kernel.sgl_per_tensor_quant_fp8(x, q, s, False)), (x, q, s)

    out = [("silu_and_mul I=14336", silu)]
    out += [(f"rmsnorm H={h}", lambda t, h=h: rmsnorm(t, h)) for h in (4096, 8192)]
    out += [(f"fused_add_rmsnorm H={h}", lambda t, h=h: fused_add(t, h)) for h in (4096, 7168, 8192)]
    for name, add, h, layout in (("rmsnorm_q", False, 4096, "row"), ("add_rmsnorm_q", True, 4096, "row"),
                                 ("rmsnorm_q_ue8m0", False, 7168, "col_ue8m0"),
                                 ("add_rmsnorm_ue8m0", True, 7168, "col_ue8m0")):
        out.append((f"{name} H={h}", lambda t, h=h, add=add, layout=layout: norm_quant(t, h, add, layout)))
    out.append(("concat_mla_k", concat))
    out.append(("rope_kv", lambda t: rope(t, True, None)))
    out.append(("rope_pdl", lambda t: rope(t, False, True)))
    out.append(("rope (no pdl)", lambda t: rope(t, False, None)))
    out.append(("per_tensor_dyn_op", per_tensor))
    return out


def main(argv):
    if argv and argv[0] == "--summary":
        summary(argv[1:])
        return 0
    if not argv:
        print(__doc__)
        return 2
    sys.path.insert(0, ROOT)
    import torch

    from benchmark.harness import _capture, _time_replays

    torch.manual_seed(0)
    token_counts = [int(v) for v in argv[1].split(",")] if len(argv) > 1 else [1, 16, 128]
    with open(argv[0], "w") as out:
        for label, make in cases():
            for t in token_counts:
                fn, args = make(t)
                graph = _capture(fn, [args], 100)
                us = statistics.median(_time_replays(graph.replay, 50, 200.0)) * 1000 / 100
                del graph
                out.write(f"{label}\t{t}\t{us:.3f}\n")
                out.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
