#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Show the process state that makes CUDA-graph kernel boundaries ~0.18 us slower (session 16,
benchmark/RESULTS.md): a graph of 100 RoPE calls (NeoX, 32 q / 8 k heads, D = R = 128, bf16,
no PDL) is timed as benchmark/harness.py times it, then again after one action, each action in
a fresh process. On an H200 the first graph of a process read 1.60 us a call at T=16; after a
torch-style warm-up on a side stream (three calls between event waits) every graph read 1.78.

    python3 tools/graph_state_probe.py [T] [ACTION ...]

Actions: none, one_call_new_stream, warmup_new_stream, capture, two_captures,
capture_with_warmup, empty_cache. Without ACTION every action runs, each in its own process.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys

ACTIONS = ("none", "one_call_new_stream", "warmup_new_stream", "capture", "two_captures", "capture_with_warmup",
           "empty_cache")


def run(t: int, action: str) -> None:
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir))
    import torch

    import sgl_kernel

    hq, hk, d = 32, 8, 128

    from benchmark.harness import _capture, _time_replays

    def capture(fn, calls=100, warm=True):
        if warm:  # the harness's capture: three warm-up calls on a side stream, ordered by events
            return _capture(fn, [()], calls)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g, capture_error_mode="thread_local"):
            for _ in range(calls):
                fn()
        return g

    def measure(g, calls=100, reps=40, warm_ms=100.0) -> float:  # the harness's timing
        return statistics.median(ms * 1e3 / calls for ms in _time_replays(g.replay, reps, warm_ms))

    pos = torch.randint(0, 4096, (t,), device="cuda")
    q = torch.randn(t, hq * d, device="cuda", dtype=torch.bfloat16)
    k = torch.randn(t, hk * d, device="cuda", dtype=torch.bfloat16)
    inv = 1.0 / (10000.0 ** (torch.arange(0, d, 2, device="cuda", dtype=torch.float32) / d))
    fr = torch.outer(torch.arange(4096, device="cuda", dtype=torch.float32), inv)
    cache = torch.cat((fr.cos(), fr.sin()), dim=-1).contiguous()

    def fn():
        sgl_kernel.apply_rope_with_cos_sin_cache_inplace(pos, q, k, d, cache, True)

    g1 = capture(fn)
    before = measure(g1)
    keep = []
    if action == "one_call_new_stream" or action == "warmup_new_stream":
        s2, cur = torch.cuda.Stream(), torch.cuda.current_stream()
        s2.wait_stream(cur)
        with torch.cuda.stream(s2):
            for _ in range(1 if action == "one_call_new_stream" else 3):
                fn()
        cur.wait_stream(s2)
        torch.cuda.synchronize()
    elif action in ("capture", "two_captures"):
        keep += [capture(fn, warm=False) for _ in range(1 if action == "capture" else 2)]
    elif action == "capture_with_warmup":
        keep.append(capture(fn))
    elif action == "empty_cache":
        torch.cuda.empty_cache()
    print(f"T={t} {action:22s} first graph {before:.3f} us a call, after the action {measure(g1):.3f}", flush=True)


def main() -> None:
    t = int(sys.argv[1]) if len(sys.argv) > 1 else 16
    actions = sys.argv[2:]
    if len(actions) == 1:
        run(t, actions[0])
        return
    for action in actions or ACTIONS:  # each in a fresh process: the state does not go away
        subprocess.run([sys.executable, __file__, str(t), action], check=True)


if __name__ == "__main__":
    main()
