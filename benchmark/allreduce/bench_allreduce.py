# SPDX-License-Identifier: Apache-2.0
"""Benchmark of the custom all-reduce (sgl_kernel.allreduce.CustomAllreduce) against NCCL
(torch.distributed.all_reduce), bf16, one process per GPU.

    python benchmark/allreduce/bench_allreduce.py --out bench_out [--world N] [--algos] [--quick]
    python benchmark/allreduce/bench_allreduce.py --emulate 4 --out bench_out   # one GPU, smoke run
    python benchmark/allreduce/bench_allreduce.py --dry-run --out /tmp/b         # no GPU: the plumbing

Sizes: 4 KiB to 64 MiB (powers of two, plus 24 KiB, 96 KiB, 384 KiB, 1.5 MiB, 6 MiB, 24 MiB).
Per size and provider, 20 back-to-back all-reduces of one tensor are captured in one CUDA graph
(the custom path inside ``CustomAllreduce.capture()``, reading its input in place; NCCL in place
on a zero tensor), the graph is replayed R times between CUDA events, and the time is the median
replay / 20, the slowest rank's. Bus bandwidth = bytes * 2 * (W - 1) / W / time (the NCCL-tests
convention). The summary gives the crossover: the smallest size from which NCCL is faster at
every larger size. ``--algos`` adds rows with the algorithm forced (SGL_KERNEL_AR_ALGO=push /
oneshot / twoshot; a forced push above its capacity, 4 MiB at 2 ranks and 2 MiB at 4, runs
one-shot). Every custom row is checked once, eagerly, against the fp64 sum (tests/allreduce/
ref_allreduce.py).

``--world`` defaults to every visible GPU (at most 8; the largest of 2, 4, 6, 8 that fits).
With fewer than two GPUs, or with ``--emulate W``, the W ranks run in one process on one GPU
(tests/allreduce/emulate.py): those latencies are NOT NVLink figures (the ranks share one GPU's
SMs and memory) and there is no NCCL baseline; it is a smoke test of the benchmark and the
kernels. NCCL_NVLS_ENABLE=0 is set for the children unless already set. Rank 0 prints the table
and writes ``allreduce.csv`` / ``allreduce.json`` (``allreduce_emulated.*`` when emulated) and a
PNG into ``--out``.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Dict, List, Optional

# The repo root first on the path: `benchmark.harness` and the shared references in `tests/`.
_ROOT = str(Path(__file__).resolve().parents[2])
if sys.path[0] != _ROOT:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402

from benchmark.harness import import_pyplot, log, short_error  # noqa: E402

DTYPE = torch.bfloat16
CALLS_PER_GRAPH = 20
PROVIDERS_CUSTOM = ("custom", "custom-push", "custom-oneshot", "custom-twoshot")
NAME = "allreduce"


def sizes(quick: bool) -> List[int]:
    if quick:
        return [4 << 10, 64 << 10, 1 << 20, 16 << 20]
    pow2 = [1 << k for k in range(12, 27)]  # 4 KiB .. 64 MiB
    extra = [24 << 10, 96 << 10, 384 << 10, 3 << 19, 6 << 20, 24 << 20]
    return sorted(pow2 + extra)


def fmt_size(n: int) -> str:
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift:
            v = n / (1 << shift)
            return f"{v:g} {unit}"
    return f"{n} B"


def busbw_gbps(nbytes: int, world: int, us: Optional[float]) -> Optional[float]:
    if not us:
        return None
    return nbytes * 2 * (world - 1) / world / (us * 1e-6) / 1e9


def _median_us(events, calls: int) -> float:
    return statistics.median(s.elapsed_time(e) for s, e in events) * 1e3 / calls


# ---------------------------------------------------------------------------------------
# Timing (one process per GPU)


def _capture(fn, calls: int):
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for _ in range(calls):
            fn()
    return graph


def _time_graph(graph, reps: int) -> float:
    graph.replay()  # untimed: the ranks line up
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return _median_us(events, CALLS_PER_GRAPH)


def _time_eager(fn, reps: int) -> float:
    fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        for _ in range(CALLS_PER_GRAPH):
            fn()
        end.record()
    torch.cuda.synchronize()
    return _median_us(events, CALLS_PER_GRAPH)


def _worker(rank: int, world: int, init_file: str, opts: Dict) -> None:
    import torch.distributed as dist

    from sgl_kernel.allreduce import CustomAllreduce, _scoped_env
    from tests.allreduce.ref_allreduce import check_sum

    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method=f"file://{init_file}", rank=rank, world_size=world)
    comms: Dict[str, CustomAllreduce] = {}
    keep = []  # graphs and buffers registered with the communicators live as long as they do
    try:
        max_bytes = max(opts["sizes"])
        full_nvlink = opts["full_nvlink"]
        algos = {"custom": None}
        if opts["algos"]:
            algos.update({"custom-push": "push", "custom-oneshot": "oneshot", "custom-twoshot": "twoshot"})
        for name, algo in algos.items():
            env = {"SGL_KERNEL_AR_ALGO": algo} if algo else {}
            with _scoped_env(env):
                comms[name] = CustomAllreduce(max_size=max_bytes, full_nvlink=full_nvlink, nccl_above_bytes=max_bytes)
        disabled = {n: c.reason for n, c in comms.items() if c.disabled}
        if disabled:
            if rank == 0:
                log(f"error: CustomAllreduce disabled: {disabled} (with NVLink-connected GPUs but no pynvml, "
                    f"pass --full-nvlink yes)")
            raise SystemExit(3)

        numel = max_bytes // 2
        gen = torch.Generator(device="cuda").manual_seed(rank)
        inp = torch.randn(numel, device="cuda", generator=gen).to(DTYPE)
        out = torch.empty_like(inp)
        zeros = torch.zeros_like(inp)  # NCCL in place: the sum of zeros stays zero
        keep += [inp, out]
        dist.all_reduce(zeros[:1024])  # NCCL communicators up before any capture
        torch.cuda.synchronize()

        rows: List[Dict] = []
        t0 = time.perf_counter()
        log_meta = {}
        if rank == 0:
            props = torch.cuda.get_device_properties(rank)
            log_meta = {"device": props.name, "sms": props.multi_processor_count}
            log(f"=== bench {NAME}: custom all-reduce vs NCCL, {world} ranks on {world} GPUs ({props.name}), bf16; "
                f"full_nvlink={comms['custom'].full_nvlink}; CUDA graph of {CALLS_PER_GRAPH} calls x {opts['reps']} "
                f"replays, median, slowest rank")
        for nbytes in opts["sizes"]:
            go = [time.perf_counter() - t0 < opts["max_seconds"]]
            dist.broadcast_object_list(go, src=0)
            if not go[0]:
                if rank == 0:
                    log(f"{fmt_size(nbytes)}: skipped (past --max-seconds)")
                    rows.append({"bytes": nbytes, "provider": "all", "error": "skipped: past --max-seconds"})
                continue
            n = nbytes // 2
            x, y, z = inp[:n], out[:n], zeros[:n]
            ref = x.to(torch.float64)
            mag = ref.abs()
            dist.all_reduce(ref)
            dist.all_reduce(mag)
            mine: Dict[str, Dict] = {}
            for name, comm in comms.items():
                row = {"mode": "graph", "check": "", "error": ""}
                try:
                    res = comm.all_reduce(x)  # eager, through the staging buffer
                    torch.cuda.synchronize()
                    row["check"] = check_sum(res, ref, mag, world) or "ok"
                    with comm.capture():
                        graph = _capture(lambda: comm.all_reduce(x, y), CALLS_PER_GRAPH)
                    keep.append(graph)
                    row["time_us"] = _time_graph(graph, opts["reps"])
                except Exception as exc:
                    row["error"] = short_error(exc)
                mine[name] = row
            row = {"mode": "graph", "check": "", "error": ""}
            try:
                graph = _capture(lambda: dist.all_reduce(z), CALLS_PER_GRAPH)
                row["time_us"] = _time_graph(graph, opts["reps"])
                del graph
            except Exception as exc:  # NCCL capture unavailable: eager timing, launch overhead included
                try:
                    torch.cuda.synchronize()
                    row["time_us"] = _time_eager(lambda: dist.all_reduce(z), opts["reps"])
                    row["mode"] = "eager"
                    row["note"] = f"graph capture failed: {short_error(exc)}"
                except Exception as exc2:
                    row["error"] = short_error(exc2)
            mine["nccl"] = row
            torch.cuda.synchronize()
            everyone = [None] * world
            dist.all_gather_object(everyone, mine)
            if rank == 0:
                for name in mine:
                    per_rank = [e[name] for e in everyone]
                    times = [r.get("time_us") for r in per_rank]
                    merged = dict(mine[name])
                    merged["error"] = next((r["error"] for r in per_rank if r.get("error")), "")
                    merged["check"] = next((r["check"] for r in per_rank if r.get("check") not in ("", "ok")),
                                           mine[name].get("check", ""))
                    merged["time_us"] = max(times) if all(t is not None for t in times) else None
                    rows.append({"bytes": nbytes, "provider": name, **merged})
                _progress(nbytes, rows, world)
        if rank == 0:
            report(rows, world, opts, emulated=False, meta=log_meta)
    finally:
        for comm in comms.values():
            comm.close()
        keep.clear()
        dist.destroy_process_group()


def _progress(nbytes: int, rows: List[Dict], world: int) -> None:
    parts = []
    for r in rows:
        if r["bytes"] == nbytes:
            t = r.get("time_us")
            parts.append(f"{r['provider']} {t:.2f} us" if t else f"{r['provider']} ERR")
    log(f"{fmt_size(nbytes):>9}: " + " | ".join(parts))


def run_multi_process(world: int, opts: Dict) -> int:
    import torch.multiprocessing as mp

    timeout = opts["max_seconds"] + 300.0  # start-up and communicator set-up on top
    with tempfile.TemporaryDirectory() as tmp:
        ctx = mp.start_processes(_worker, args=(world, os.path.join(tmp, "pg_init"), opts), nprocs=world,
                                 join=False, start_method="spawn")
        deadline = time.monotonic() + timeout
        try:
            while not ctx.join(timeout=5.0, grace_period=10.0):
                if time.monotonic() > deadline:
                    log(f"error: the {world} benchmark processes did not finish within {timeout:.0f} s")
                    return 1
        except Exception as exc:
            log(f"error: a benchmark process failed: {exc}")
            return 1
        finally:
            from tests.allreduce.emulate import stop_processes

            stop_processes(ctx.processes)
    return 0


# ---------------------------------------------------------------------------------------
# Single-process emulation (one GPU)


def run_emulated(world: int, opts: Dict) -> int:
    from sgl_kernel.allreduce import all_reduce
    from tests.allreduce.emulate import EmulatedGroup, emulation_env, poisoned_like
    from tests.allreduce.ref_allreduce import check_all_reduce

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    blocks = os.environ.get("SGL_KERNEL_AR_MAX_BLOCKS") or str(max(1, min(36, props.multi_processor_count // world)))
    log(f"=== bench {NAME} (EMULATED): {world} ranks in one process on ONE GPU ({props.name}), bf16, "
        f"{blocks} blocks per rank. These latencies are NOT NVLink figures: the ranks share one GPU's SMs "
        f"and memory. No NCCL baseline.")
    max_bytes = max(opts["sizes"])
    algos = {"custom": "auto"}
    if opts["algos"]:
        algos.update({"custom-push": "push", "custom-oneshot": "oneshot", "custom-twoshot": "twoshot"})
    groups = {}
    keep = []
    rows: List[Dict] = []
    t0 = time.perf_counter()
    try:
        streams = None
        for name, algo in algos.items():
            groups[name] = EmulatedGroup(world, max_bytes, env=emulation_env(algo, max_blocks=int(blocks)),
                                         streams=streams)
            streams = groups[name].streams  # the ranks' streams, shared by the handle sets
        gen = torch.Generator(device="cuda").manual_seed(0)
        inputs = [torch.randn(max_bytes // 2, device="cuda", generator=gen).to(DTYPE) for _ in range(world)]
        outputs = [torch.empty_like(x) for x in inputs]
        keep += [inputs, outputs]
        for nbytes in opts["sizes"]:
            if time.perf_counter() - t0 > opts["max_seconds"]:
                log(f"{fmt_size(nbytes)}: skipped (past --max-seconds)")
                rows.append({"bytes": nbytes, "provider": "all", "error": "skipped: past --max-seconds"})
                continue
            n = nbytes // 2
            xs = [x[:n] for x in inputs]
            ys = [y[:n] for y in outputs]
            for name, group in groups.items():
                row = {"bytes": nbytes, "provider": name, "mode": "graph", "check": "", "error": ""}
                try:
                    res = poisoned_like(xs)
                    group.all_reduce(xs, res)  # eager, through the staging buffers
                    torch.cuda.synchronize()
                    row["check"] = check_all_reduce(xs, res) or "ok"
                    def body(r: int, g=group) -> None:
                        for _ in range(CALLS_PER_GRAPH):
                            all_reduce(g.handles[r], xs[r], ys[r], 0, 0)

                    graphs = group.capture(body)
                    group.register_graph_buffers()
                    keep.append(graphs)
                    group.replay(graphs)
                    torch.cuda.synchronize()
                    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                              for _ in range(opts["reps"])]
                    for start, end in events:
                        start.record()
                        group.replay(graphs)
                        end.record()
                    torch.cuda.synchronize()
                    row["time_us"] = _median_us(events, CALLS_PER_GRAPH)
                except Exception as exc:
                    row["error"] = short_error(exc)
                rows.append(row)
            _progress(nbytes, rows, world)
        report(rows, world, opts, emulated=True, meta={"device": props.name, "sms": props.multi_processor_count,
                                                        "blocks_per_rank": int(blocks)})
    finally:
        for group in groups.values():
            group.dispose()
        keep.clear()
    return 0


# ---------------------------------------------------------------------------------------
# Report (rank 0)


def crossover(rows: List[Dict], custom: str = "custom") -> Optional[int]:
    """The smallest size from which NCCL is faster than ``custom`` at every larger measured
    size; None if the custom path is faster at the largest one (or nothing was measured)."""
    pairs = []
    for nbytes in sorted({r["bytes"] for r in rows}):
        c = next((r.get("time_us") for r in rows if r["bytes"] == nbytes and r["provider"] == custom), None)
        n = next((r.get("time_us") for r in rows if r["bytes"] == nbytes and r["provider"] == "nccl"), None)
        if c and n:
            pairs.append((nbytes, n < c))
    result = None
    for nbytes, nccl_faster in reversed(pairs):
        if not nccl_faster:
            break
        result = nbytes
    return result


def report(rows: List[Dict], world: int, opts: Dict, emulated: bool, meta: Dict) -> None:
    for r in rows:
        r["world"] = world
        r["emulated"] = emulated
        r["busbw_gbps"] = busbw_gbps(r["bytes"], world, r.get("time_us"))
    providers = [p for p in PROVIDERS_CUSTOM + ("nccl",) if any(r["provider"] == p for r in rows)]
    by = {(r["bytes"], r["provider"]): r for r in rows}
    for (nbytes, prov), r in by.items():
        if prov.startswith("custom"):
            n = by.get((nbytes, "nccl"), {}).get("time_us")
            r["nccl_over_custom"] = n / r["time_us"] if n and r.get("time_us") else None

    label = "EMULATED on one GPU (not NVLink figures)" if emulated else f"{world} GPUs"
    log("")
    log(f"=== {NAME}: bf16, {world} ranks, {label}; time per call (us), median of {opts['reps']} replays of a "
        f"{CALLS_PER_GRAPH}-call CUDA graph; busbw = bytes*2*(W-1)/W/time; NCCL/custom > 1: custom faster")
    head = f"{'size':>10}"
    for p in providers:
        head += f"{p + ' us':>18}"
    head += f"{'NCCL/custom':>13}{'custom GB/s':>13}{'NCCL GB/s':>11}"
    log(head)
    for nbytes in sorted({r["bytes"] for r in rows}):
        line = f"{fmt_size(nbytes):>10}"
        for p in providers:
            r = by.get((nbytes, p))
            t = r.get("time_us") if r else None
            if r and r.get("check") not in (None, "", "ok"):
                flag = "!"
            elif r and r.get("mode") == "eager":
                flag = "e"
            else:
                flag = ""
            cell = f"{t:.2f}" if t else ("ERR" if r else "-")
            line += f"{cell + flag:>18}"
        c = by.get((nbytes, "custom"), {})
        n = by.get((nbytes, "nccl"), {})
        ratio, c_bw, n_bw = c.get("nccl_over_custom"), c.get("busbw_gbps"), n.get("busbw_gbps")
        line += f"{f'{ratio:.2f}x' if ratio else '-':>13}"
        line += f"{f'{c_bw:.1f}' if c_bw else '-':>13}"
        line += f"{f'{n_bw:.1f}' if n_bw else '-':>11}"
        log(line)
    log("('!' = output check failed, 'e' = timed without a CUDA graph, ERR = see errors below)")
    for r in rows:
        if r.get("error"):
            log(f"  error {fmt_size(r['bytes'])} / {r['provider']}: {r['error']}")
        if r.get("check") not in (None, "", "ok"):
            log(f"  CHECK {fmt_size(r['bytes'])} / {r['provider']}: {r['check']}")
        if r.get("note"):
            log(f"  note {fmt_size(r['bytes'])} / {r['provider']}: {r['note']}")
    x = crossover(rows) if not emulated else None
    if not emulated:
        if x is None:
            log("crossover: none — the custom all-reduce is faster than NCCL at the largest size measured")
        else:
            log(f"crossover: NCCL is faster from {fmt_size(x)} up (at every larger size measured)")
    checks = [r for r in rows if r.get("check")]
    bad = [r for r in checks if r["check"] != "ok"]
    log(f"output checks: {len(checks) - len(bad)} ok, {len(bad)} failed (vs the fp64 sum, tests/allreduce/ref_allreduce.py)")

    out_dir = Path(opts["out"])
    out_dir.mkdir(parents=True, exist_ok=True)
    name = NAME + ("_emulated" if emulated else "")
    columns = ["bytes", "provider", "world", "emulated", "mode", "time_us", "busbw_gbps", "nccl_over_custom", "check",
               "error", "note"]
    with open(out_dir / f"{name}.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns, extrasaction="ignore", restval="")
        w.writeheader()
        w.writerows(rows)
    doc = {
        "meta": {
            "bench": name, "world": world, "emulated": emulated, "dtype": "bf16", "calls_per_graph": CALLS_PER_GRAPH,
            "reps": opts["reps"], "python": platform.python_version(), "torch": torch.__version__,
            "argv": sys.argv, "crossover_bytes": x, "nccl_nvls_enable": os.environ.get("NCCL_NVLS_ENABLE"),
            "timing": "median over R replays of a CUDA graph of 20 calls, per call, slowest rank", **meta,
        },
        "rows": rows,
    }
    with open(out_dir / f"{name}.json", "w") as f:
        json.dump(doc, f, indent=1)
    files = [f"{name}.csv", f"{name}.json"]
    if _plot(rows, providers, out_dir / f"{name}.png", f"{NAME}: {world} ranks, {label}"):
        files.append(f"{name}.png")
    log(f"outputs in {out_dir}/: {', '.join(files)}")


def _plot(rows, providers, path: Path, title: str) -> bool:
    plt = import_pyplot()
    if plt is None:
        return False
    try:
        fig, (ax_t, ax_b) = plt.subplots(1, 2, figsize=(13, 5))
        for p in providers:
            pts = sorted((r["bytes"], r["time_us"], r["busbw_gbps"]) for r in rows
                         if r["provider"] == p and r.get("time_us"))
            if not pts:
                continue
            ax_t.plot([q[0] for q in pts], [q[1] for q in pts], marker="o", label=p)
            ax_b.plot([q[0] for q in pts], [q[2] for q in pts], marker="o", label=p)
        for a, ylabel in ((ax_t, "time per call (us)"), (ax_b, "bus bandwidth (GB/s)")):
            a.set_xscale("log", base=2)
            a.set_yscale("log")
            a.set_xlabel("message size (bytes)")
            a.set_ylabel(ylabel)
            a.grid(True, which="both", alpha=0.3)
            a.legend(fontsize=8)
        fig.suptitle(title, fontsize=10)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)
        return True
    except Exception as exc:
        log(f"warning: plot failed: {short_error(exc)}")
        return False


def run_dry(world: int, opts: Dict, emulated: bool) -> int:
    """No GPU: made-up timings through the same report, to test the script's plumbing."""
    rnd = random.Random(0)
    rows = []
    providers = ["custom"] + (["custom-push", "custom-oneshot", "custom-twoshot"] if opts["algos"] else [])
    if not emulated:
        providers.append("nccl")
    for nbytes in opts["sizes"]:
        for p in providers:
            base = 6.0 + nbytes / (200e9 if p.startswith("custom") else 300e9) * 1e6
            if p == "nccl":
                base += 10.0
            rows.append({"bytes": nbytes, "provider": p, "mode": "graph", "check": "" if p == "nccl" else "ok", "error": "",
                         "time_us": base * (1 + 0.05 * rnd.random())})
    log(f"=== bench {NAME}: DRY RUN (fake timings), world {world}{' (emulated)' if emulated else ''}")
    report(rows, world, opts, emulated=emulated, meta={"device": "dry run (fake timings)"})
    return 0


# ---------------------------------------------------------------------------------------


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="bench_out", help="output directory (default: bench_out/)")
    parser.add_argument("--world", type=int, default=None,
                        help="ranks = GPUs (2, 4, 6 or 8; default: every visible GPU, at most 8)")
    parser.add_argument("--emulate", type=int, default=None, metavar="W",
                        help="run W ranks in one process on one GPU (not NVLink figures; no NCCL baseline)")
    parser.add_argument("--algos", action="store_true", help="also time the one-shot and two-shot algorithms forced")
    parser.add_argument("--full-nvlink", choices=("auto", "yes", "no"), default="auto",
                        help="CustomAllreduce's full_nvlink: auto = detect with NVML (pynvml), else as given")
    parser.add_argument("--quick", action="store_true", help="four sizes only: a smoke run")
    parser.add_argument("--reps", type=int, default=50, help="timed graph replays per size and provider")
    parser.add_argument("--max-seconds", type=float, default=480.0,
                        help="safety deadline: past it the remaining sizes are skipped (default 480)")
    parser.add_argument("--dry-run", action="store_true", help="no GPU: fake timings, to exercise the outputs")
    args = parser.parse_args(argv)

    opts = {
        "out": args.out, "sizes": sizes(args.quick), "algos": args.algos, "reps": max(1, args.reps),
        "max_seconds": args.max_seconds,
        "full_nvlink": {"auto": None, "yes": True, "no": False}[args.full_nvlink],
    }
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")  # inherited by the spawned ranks
    for w in (args.world, args.emulate):
        if w is not None and w not in (2, 4, 6, 8):
            parser.error(f"world size must be 2, 4, 6 or 8, got {w}")

    if args.dry_run:
        return run_dry(args.emulate or args.world or 8, opts, emulated=args.emulate is not None)
    if not torch.cuda.is_available():
        log("error: no CUDA device visible (torch.cuda.is_available() is False); run on a GPU host, or use "
            "--dry-run to exercise the script without one")
        return 2
    if args.emulate is not None:
        return run_emulated(args.emulate, opts)
    count = min(torch.cuda.device_count(), 8)
    if args.world is None:
        fits = [w for w in (2, 4, 6, 8) if w <= count]
        if not fits:
            log(f"note: {count} GPU visible; the multi-GPU benchmark needs >= 2. Running the single-GPU emulation "
                f"with 2 ranks instead (a smoke test: NOT NVLink figures).")
            return run_emulated(2, opts)
        world = fits[-1]
    else:
        world = args.world
        if world > count:
            log(f"error: --world {world} needs {world} GPUs, {count} visible")
            return 2
    return run_multi_process(world, opts)


if __name__ == "__main__":
    sys.exit(main())
