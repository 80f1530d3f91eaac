#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Print the Triton kernels torch.compile generates for the concat ops' references at the
bench's large layouts (bench_mla_copy.py: concat_mla_k into a contiguous k from a strided
k_nope and a broadcast k_rope; concat_mla_absorb_q from a transposed a and a sliced b): the
kernel source, the autotuned config, and the memory instructions of the PTX (copied to OUT_DIR
with the cubins, for nvdisasm).

    python3 tools/dump_inductor_concat.py OUT_DIR [T]     # T = tokens (default 4096)

Session 16 read its loads from here: one 16-byte vector a thread over the flat output, blocks
of 1024 elements on 4 warps, eviction_policy='evict_last' on the loads (benchmark/RESULTS.md).
"""

from __future__ import annotations

import collections
import glob
import os
import re
import shutil
import sys
import tempfile

cache = tempfile.mkdtemp(prefix="sgl-inductor-")
os.environ["TRITON_CACHE_DIR"] = os.path.join(cache, "triton")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(cache, "inductor")
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))

import torch  # noqa: E402

from tests.elementwise.ref_mla import concat_mla_absorb_q_ref, concat_mla_k_torch  # noqa: E402


def main() -> None:
    out_dir = sys.argv[1]
    t = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
    os.makedirs(out_dir, exist_ok=True)
    bf16 = torch.bfloat16
    kv = torch.randn(t, 128, 256, device="cuda", dtype=bf16)  # kv_b_proj output [k_nope | v]
    latent = torch.randn(t, 576, device="cuda", dtype=bf16)  # [kv_c | k_pe]
    k = torch.empty(t, 128, 192, device="cuda", dtype=bf16)
    torch.compile(concat_mla_k_torch, dynamic=False, fullgraph=True)(k, kv[..., :128], latent[:, 512:].view(t, 1, 64))
    a = torch.randn(128, t, 512, device="cuda", dtype=bf16).transpose(0, 1)
    q = torch.randn(t, 128, 192, device="cuda", dtype=bf16)
    torch.compile(concat_mla_absorb_q_ref, dynamic=False, fullgraph=True)(a, q[..., 128:])
    torch.cuda.synchronize()
    seen = set()
    for path in sorted(glob.glob(os.path.join(cache, "inductor", "**", "*.py"), recursive=True)):
        src = open(path).read()
        m = re.search(r"@triton_heuristics[\s\S]*?\n(def triton_\w+\([\s\S]*?)(?:\n\n\n|\Z)", src)
        if "@triton.jit" not in src or not m or m.group(1) in seen:
            continue
        seen.add(m.group(1))
        print("=" * 20, os.path.basename(path))
        print(m.group(1))
    for path in sorted(glob.glob(os.path.join(cache, "**", "*.best_config"), recursive=True)):
        print("best config:", open(path).read().strip())
    for ext in ("ptx", "cubin"):
        for path in sorted(glob.glob(os.path.join(cache, "triton", "**", f"*.{ext}"), recursive=True)):
            shutil.copy(path, out_dir)
            if ext == "ptx":
                ops = re.findall(r"^\s*(?:@%p\d+\s+)?((?:ld|st)\.global[\w.:]*)", open(path).read(), re.M)
                print(os.path.basename(path), dict(collections.Counter(ops)))


if __name__ == "__main__":
    main()
