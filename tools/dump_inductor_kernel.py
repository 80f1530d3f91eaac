#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Print the Triton source and the memory instructions of the PTX that torch.compile
generates for a reference function, to compare a baseline kernel with ours.

    python3 tools/dump_inductor_kernel.py silu_and_mul 32768 14336
"""

from __future__ import annotations

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

op, t, d = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
x = torch.randn(t, 2 * d, device="cuda", dtype=torch.bfloat16)
fn = torch.compile(lambda a: act_and_mul_torch(op, a), dynamic=False)
fn(x)
torch.cuda.synchronize()
for path in glob.glob(os.path.join(cache, "inductor", "**", "*.py"), recursive=True):
    src = open(path).read()
    if "@triton.jit" in src:
        start = src.find("@triton_heuristics")
        print(f"--- {path}\n{src[start:start + 2500]}")
for path in glob.glob(os.path.join(cache, "triton", "**", "*.ptx"), recursive=True):
    ptx = open(path).read()
    print(f"--- {os.path.basename(path)}")
    for line in ptx.splitlines():
        if re.search(r"\b(ld|st)\.global|\.maxntid|\.reqntid|div|mul\.hi", line):
            print("   ", line.strip())
