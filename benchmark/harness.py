# SPDX-License-Identifier: Apache-2.0
"""The shared benchmark harness (DESIGN.md section 8).

A bench script registers providers (ours and the baselines) and cases (op, dtype, shape
parameters, a setup factory that returns the call's arguments, and the bytes one call must
move), then calls :meth:`Bench.main`. The harness times every provider on every case the
same way, in the same run, and writes a table on stdout, a CSV, a JSON and one PNG per op.

How a call is timed (every provider, every case):

* Warm-up: three calls (the first one compiles a ``torch.compile`` provider; its wall time
  is reported as compile time), then one output is checked against the bench's reference.
* A CUDA graph captures N back-to-back calls; the graph is replayed untimed for ~200 ms (so
  that every provider is timed at the clock the GPU settles at under its load, not at the
  boost clock of an idle one), then R times, each replay between two CUDA events; the
  reported time is the median replay time / N. The graph takes
  launch overhead out of the numbers, which matters for decode shapes (DESIGN.md 9: "T=1..128
  in a CUDA graph <= 2 us") and is harmless for the large ones.
* L2: a case whose bytes fit four times into L2 is timed hot ("hot": the same inputs every
  call, as in a decode step whose input a GEMM has just written). Any larger case rotates
  among K input sets with K * bytes >= 4 * L2 ("rotK": each call reads inputs that the K-1
  calls before it have pushed out of L2). Rotation, not an L2 flush, because a flush leaves
  L2 full of dirty lines whose write-back would be charged to the timed kernel.
* If the capture fails for a provider, it is timed the same way without the graph ("eager",
  launch overhead included) and the row says so.

GB/s counts the case's explicit byte count (bytes read + bytes written, once each) over the
median time. The device-copy bandwidth is measured once per run; GB/s goals, written as H200
figures (copy 4220 GB/s), are scaled by measured_copy / 4220.

Failures never stop the run: a provider that fails on a case gets an error in its row and
the run goes on; a CUDA error that poisons the context stops the measurements, and the
outputs are still written. CSV/JSON are rewritten after every case, so a run killed by a
time limit leaves its results so far.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import signal
import statistics
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch

REPO_ROOT = Path(__file__).resolve().parents[1]

H200_COPY_GBPS = 4220.0  # DESIGN.md 9: the device copy that the GB/s goals were set against
DEFAULT_L2_BYTES = 50 * 1024 * 1024

DTYPE_NAMES = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float8_e4m3fn: "fp8e4m3",
    torch.int8: "int8",
}


def dtype_name(dtype: torch.dtype) -> str:
    return DTYPE_NAMES.get(dtype, str(dtype).replace("torch.", ""))


def short_error(exc: BaseException, limit: int = 240) -> str:
    """One line: the exception type and the first line of its message."""
    msg = str(exc).strip().splitlines()
    text = f"{type(exc).__name__}: {msg[0] if msg else ''}"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def log(msg: str = "") -> None:
    print(msg, flush=True)


def configure_dynamo(limit: int = 1024) -> List[str]:
    """Let torch._dynamo keep one compiled graph per static shape (it recompiles per shape
    with ``dynamic=False``), and make it raise instead of silently running eager code when a
    limit is hit. Returns the settings that were applied."""
    applied = []
    try:
        import torch._dynamo.config as cfg
    except Exception as exc:  # pragma: no cover
        return [f"torch._dynamo.config unavailable: {short_error(exc)}"]
    for name, value in (
        ("recompile_limit", limit),
        ("cache_size_limit", limit),
        ("accumulated_recompile_limit", 4 * limit),
        ("accumulated_cache_size_limit", 4 * limit),
        ("fail_on_recompile_limit_hit", True),
    ):
        if hasattr(cfg, name):
            try:
                setattr(cfg, name, value)
                applied.append(f"{name}={value}")
            except Exception as exc:  # a deprecated alias may refuse; the other name covers it
                applied.append(f"{name}: not set ({short_error(exc, 80)})")
    return applied


# ---------------------------------------------------------------------------------------
# Declarations


@dataclass
class Case:
    """One shape of one op. ``setup()`` returns the positional arguments of one call (fresh
    random tensors on the GPU); ``nbytes`` is what one call must move (read + written)."""

    op: str
    dtype: torch.dtype
    params: Dict[str, int]
    setup: Callable[[], Tuple[Any, ...]]
    nbytes: int
    check: Optional[Callable[[Tuple[Any, ...], Any], Optional[str]]] = None
    flops: int = 0  # for compute-bound ops: TFLOP/s is reported beside GB/s

    @property
    def dtype_name(self) -> str:
        return dtype_name(self.dtype)

    @property
    def shape(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.params.items())

    @property
    def label(self) -> str:
        return f"{self.op} {self.dtype_name} {self.shape}"


@dataclass
class Provider:
    """``factory(case)`` returns the callable to time (called as ``fn(*case.setup())``).
    ``ours`` marks sgl_kernel (ratios are baseline_time / ours); ``compiled`` marks a
    provider whose first call compiles (skipped by --no-compile; compile time reported);
    ``applies(case)``, when given, limits the provider to some cases (the others get a
    "does not apply" skip row instead of an error)."""

    name: str
    factory: Callable[[Case], Callable[..., Any]]
    ours: bool = False
    compiled: bool = False
    applies: Optional[Callable[[Case], bool]] = None


@dataclass
class Result:
    op: str
    dtype: str
    shape: str
    params: Dict[str, int]
    provider: str
    nbytes: int
    flops: int = 0
    mode: str = ""  # hot / rotK / eager-... ; how it was timed
    sets: int = 0
    calls: int = 0  # calls per graph replay
    reps: int = 0  # timed replays
    time_us: Optional[float] = None  # median per call
    min_us: Optional[float] = None
    p10_us: Optional[float] = None
    p90_us: Optional[float] = None
    gbps: Optional[float] = None
    tflops: Optional[float] = None
    frac_copy: Optional[float] = None
    speedup: Dict[str, Optional[float]] = field(default_factory=dict)  # ours rows: baseline / ours
    compile_s: Optional[float] = None
    check: str = ""
    error: str = ""
    note: str = ""


@dataclass
class GoalResult:
    status: str  # PASS / FAIL / N/A
    text: str


# ---------------------------------------------------------------------------------------
# Timing primitives (CUDA)


def measure_copy_gbps(nbytes: int = 2 << 30, reps: int = 20) -> Tuple[float, int]:
    """Device-to-device copy bandwidth, bytes read + bytes written, median of ``reps``."""
    n = nbytes
    while True:
        try:
            src = torch.empty(n, dtype=torch.uint8, device="cuda")
            dst = torch.empty_like(src)
            break
        except torch.cuda.OutOfMemoryError:
            if n <= 256 << 20:
                raise
            n //= 2
    src.random_(0, 256)
    for _ in range(10):  # also brings the clocks up before anything else is timed
        dst.copy_(src)
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        dst.copy_(src)
        end.record()
    torch.cuda.synchronize()
    ms = statistics.median(s.elapsed_time(e) for s, e in events)
    del src, dst
    torch.cuda.empty_cache()
    return 2 * n / (ms * 1e-3) / 1e9, n


def _capture(fn: Callable, sets: Sequence[Tuple], calls: int) -> "torch.cuda.CUDAGraph":
    # Warm-up on a side stream, as torch.cuda.graph's documentation asks.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for i in range(3):
            fn(*sets[i % len(sets)])
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for i in range(calls):
            fn(*sets[i % len(sets)])  # outputs are dropped: their memory is reused in the pool
    return graph


def _time_replays(replay: Callable[[], None], reps: int, warm_ms: float = 0.0) -> List[float]:
    """Milliseconds of each of ``reps`` back-to-back replays, by CUDA events, after untimed
    replays that keep the GPU busy for about ``warm_ms`` (at least one)."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    replay()
    end.record()
    torch.cuda.synchronize()
    first_ms = max(start.elapsed_time(end), 1e-3)
    for _ in range(min(10000, math.ceil(warm_ms / first_ms) - 1)):
        replay()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        replay()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in events]


def cuda_context_ok() -> bool:
    try:
        torch.cuda.synchronize()
        torch.empty(1, device="cuda").add_(1)
        torch.cuda.synchronize()
        return True
    except Exception:
        return False


# ---------------------------------------------------------------------------------------
# The bench


class Bench:
    # timing policy
    TARGET_REPLAY_MS = 2.0  # rotated cases: N calls per graph so that a replay takes ~2 ms
    MAX_CALLS = 100  # calls per graph (hot cases always use this many)
    MIN_CALLS = 2
    BUDGET_MS = 150.0  # GPU time per (case, provider) spent in timed replays
    MIN_REPS, MAX_REPS = 10, 100
    # Untimed replays before the timed ones. Under sustained fp8 GEMM load an H200 sits at its
    # 700 W power cap, 1300-1560 MHz instead of the 1980 MHz a burst starts at (nvidia-smi,
    # session 7). Without this warm-up the first provider of a case was timed partly at the
    # higher clock and the next ones at the lower one (our M = 512, N = 28672 fp8 GEMM: 89 us
    # at p10, 109 us at the median; cuBLAS right after it 99-100 us).
    WARM_MS = 200.0
    MAX_SETS = 64
    MAX_ROTATION_BYTES = 4 << 30

    def __init__(self, name: str, description: str = "", plot_x: Optional[str] = None):
        self.name = name
        self.description = description
        self.plot_x = plot_x  # the shape parameter on the x axis of the plots (log2 scale)
        self.providers: List[Provider] = []
        self.cases: List[Case] = []
        self.results: List[Result] = []
        self.goals: List[Callable[[], GoalResult]] = []
        self.notes: List[str] = []  # printed in the summary
        self.args: Optional[argparse.Namespace] = None
        self.copy_gbps: Optional[float] = None
        self.copy_measured = False
        self.l2_bytes = DEFAULT_L2_BYTES
        self.device_name = "none"
        self.compile_s_total = 0.0
        self.compile_count = 0
        self.t_start = time.perf_counter()
        self.estimate_s = 0.0
        self.broken: Optional[str] = None
        self.compile_disabled_reason: Optional[str] = None
        self.meta: Dict[str, Any] = {}

    # -- declarations -------------------------------------------------------------------

    def add_provider(self, name: str, factory: Callable[[Case], Callable], ours: bool = False, compiled: bool = False,
                     applies: Optional[Callable[[Case], bool]] = None) -> None:
        self.providers.append(Provider(name, factory, ours, compiled, applies))

    def add_case(
        self,
        op: str,
        dtype: torch.dtype,
        params: Dict[str, int],
        setup: Callable[[], Tuple[Any, ...]],
        nbytes: int,
        check: Optional[Callable[[Tuple[Any, ...], Any], Optional[str]]] = None,
        flops: int = 0,
    ) -> None:
        self.cases.append(Case(op, dtype, dict(params), setup, int(nbytes), check, int(flops)))

    def add_goal(self, fn: Callable[[], GoalResult]) -> None:
        """``fn`` runs after the measurements (see the goal_* helpers)."""
        self.goals.append(fn)

    @staticmethod
    def add_args(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--out", default="bench_out", help="output directory (default: bench_out/)")
        parser.add_argument("--quick", action="store_true", help="a few shapes only: a smoke run")
        parser.add_argument("--no-compile", action="store_true", help="skip the torch.compile baseline")
        parser.add_argument(
            "--ops", nargs="+", default=None, metavar="OP", help="only these ops (space- or comma-separated)"
        )
        parser.add_argument(
            "--max-seconds",
            type=float,
            default=480.0,
            help="safety deadline: past 60%% of it, compiled baselines are skipped; past it, the "
            "remaining cases are skipped (default 480)",
        )
        parser.add_argument(
            "--dry-run",
            action="store_true",
            help="no GPU: fake timings, to exercise the script's plumbing and outputs",
        )
        parser.add_argument(
            "--models",
            action="store_true",
            help="the sizes of widely served models (benchmark/models.py) instead of the default "
            "shapes; scripts without such a list refuse it",
        )

    @staticmethod
    def selected_ops(args: argparse.Namespace, known: Sequence[str]) -> List[str]:
        if not args.ops:
            return list(known)
        ops = [o for item in args.ops for o in item.split(",") if o]
        unknown = [o for o in ops if o not in known]
        if unknown:
            raise SystemExit(f"error: unknown op(s) {unknown}; choose from {list(known)}")
        return ops

    @property
    def ours(self) -> Optional[Provider]:
        return next((p for p in self.providers if p.ours), None)

    @property
    def baselines(self) -> List[Provider]:
        return [p for p in self.providers if not p.ours]

    def elapsed(self) -> float:
        return time.perf_counter() - self.t_start

    # -- run --------------------------------------------------------------------------

    def main(self, args: argparse.Namespace) -> int:
        """Run every case, then write the outputs and print the table and the summary."""
        self.args = args
        if args.no_compile:
            self.providers = [p for p in self.providers if not p.compiled]
        self.out_dir = Path(args.out)
        try:
            self.out_dir.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            log(f"error: cannot create the output directory {self.out_dir}: {exc}")
            return 2

        def on_term(signum, frame):  # a time limit: still write what we have
            raise KeyboardInterrupt(f"signal {signum}")

        try:
            signal.signal(signal.SIGTERM, on_term)
        except Exception:
            pass

        if not args.dry_run and not torch.cuda.is_available():
            log("error: no CUDA device visible (torch.cuda.is_available() is False); "
                "run on a GPU host, or use --dry-run to exercise the script without one")
            return 2

        interrupted = None
        try:
            self._header()
            with torch.no_grad():
                for i, case in enumerate(self.cases):
                    self._run_case(i, case)
                    self._write_data()
        except KeyboardInterrupt as exc:
            interrupted = f"interrupted ({exc or 'KeyboardInterrupt'}) after {self.elapsed():.0f} s"
            log(f"\n*** {interrupted}: writing the results so far")
            self.notes.append(interrupted)
        except Exception as exc:  # a bug in the harness itself: report, keep the results
            import traceback

            traceback.print_exc()
            self.notes.append(f"harness error: {short_error(exc)}")
        try:  # a second SIGTERM must not cut the summary short
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        except Exception:
            pass
        self._write_data()
        self._plots()
        self._print_table()
        self._print_summary()
        return 1 if (self.broken or interrupted) else 0

    def _header(self) -> None:
        a = self.args
        log(f"=== bench {self.name}: {self.description}")
        if a.dry_run:
            self.device_name = "dry run (fake timings)"
            self.copy_gbps = 3000.0
            self.l2_bytes = DEFAULT_L2_BYTES
        else:
            props = torch.cuda.get_device_properties(0)
            self.device_name = props.name
            self.l2_bytes = int(getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES)
            log(f"device: {props.name}, sm_{props.major}{props.minor}, {props.multi_processor_count} SMs, "
                f"L2 {self.l2_bytes / 2**20:.0f} MiB, {props.total_memory / 2**30:.0f} GiB")
        versions = f"python {platform.python_version()}, torch {torch.__version__}"
        try:
            import triton  # noqa: F401

            versions += f", triton {triton.__version__}"
        except Exception:
            versions += ", triton: not importable"
        log(versions)
        self.meta.update(
            bench=self.name,
            device=self.device_name,
            l2_bytes=self.l2_bytes,
            python=platform.python_version(),
            torch=torch.__version__,
            argv=sys.argv,
        )
        if not a.dry_run:
            try:
                self.copy_gbps, n = measure_copy_gbps()
                self.copy_measured = True
                log(f"device copy: {self.copy_gbps:.0f} GB/s (read + write, {n / 2**30:.1f} GiB tensors, median of 20); "
                    f"GB/s goals are H200 figures at {H200_COPY_GBPS:.0f}: scaled by {self.scale:.3f}")
            except Exception as exc:
                self.copy_gbps = H200_COPY_GBPS
                self.notes.append(f"copy bandwidth NOT measured ({short_error(exc)}): goals unscaled")
                log(f"warning: copy bandwidth measurement failed ({short_error(exc)}); goals left unscaled")
                if not cuda_context_ok():
                    self.broken = "CUDA context unusable after the copy measurement"
        self.meta.update(copy_gbps=self.copy_gbps, copy_measured=self.copy_measured)
        n_meas = len(self.cases) * len(self.providers)
        n_comp = len(self.cases) * sum(p.compiled for p in self.providers)
        self.estimate_s = 10 + 0.3 * n_meas + (15 + 4.0 * n_comp if n_comp else 0)
        log(f"plan: {len(self.cases)} cases x {len(self.providers)} providers "
            f"({', '.join(p.name for p in self.providers)}); {n_comp} torch.compile shapes; "
            f"estimated runtime ~{self.estimate_s:.0f} s (0.3 s per measurement, ~4 s per compiled shape "
            f"+ ~15 s for the first); deadline {a.max_seconds:.0f} s")
        log("timing: median of R graph replays of N calls, per call; 'hot' = same inputs (fits L2), "
            "'rotK' = K input sets rotated (K x bytes >= 4 x L2)")

    @property
    def scale(self) -> float:
        return (self.copy_gbps or H200_COPY_GBPS) / H200_COPY_GBPS

    def _run_case(self, index: int, case: Case) -> None:
        a = self.args
        rows = [Result(case.op, case.dtype_name, case.shape, dict(case.params), p.name, case.nbytes, case.flops)
                for p in self.providers]
        self.results.extend(rows)
        prefix = f"[{index + 1:2d}/{len(self.cases)}] {case.label}"
        if self.broken:
            for r in rows:
                r.error = f"skipped: {self.broken}"
            return
        if self.elapsed() > a.max_seconds:
            for r in rows:
                r.error = "skipped: past --max-seconds"
            if "past --max-seconds" not in " ".join(self.notes):
                self.notes.append(f"deadline --max-seconds={a.max_seconds:.0f} reached: later cases skipped")
            log(f"{prefix}: skipped (past --max-seconds)")
            return
        if self.compile_disabled_reason is None and self.elapsed() > 0.6 * a.max_seconds:
            self.compile_disabled_reason = f"past 60% of --max-seconds ({0.6 * a.max_seconds:.0f} s)"
            self.notes.append(f"compiled baselines skipped from case {index + 1} on: {self.compile_disabled_reason}")

        hot = case.nbytes * 4 <= self.l2_bytes
        nsets = 1 if hot else max(1, min(self.MAX_SETS, math.ceil(4 * self.l2_bytes / case.nbytes),
                                         self.MAX_ROTATION_BYTES // case.nbytes))
        sets: List[Tuple] = []
        if not a.dry_run:
            try:
                for _ in range(nsets):
                    sets.append(tuple(case.setup()))
                torch.cuda.synchronize()
            except Exception as exc:
                sets = []
                for r in rows:
                    r.error = f"setup failed: {short_error(exc)}"
                log(f"{prefix}: setup FAILED: {short_error(exc)}")
                self._after_error()
                return

        try:
            self._run_providers(case, rows, sets, hot, nsets)
        finally:  # also when interrupted: keep the ratios of what was measured
            sets = []
            self._speedups(rows)
        if not a.dry_run and not self.broken:
            torch.cuda.empty_cache()

        parts = []
        for r in rows:
            if r.time_us is not None:
                parts.append(f"{r.provider} {r.time_us:.2f} us" + (f" (compile {r.compile_s:.1f} s)" if r.compile_s else ""))
            else:
                parts.append(f"{r.provider} -")
        mode = rows[0].mode if rows else ""
        log(f"{prefix} {mode}: " + " | ".join(parts) + f"  [t={self.elapsed():.0f} s]")

    def _run_providers(self, case: Case, rows: List[Result], sets: List[Tuple], hot: bool, nsets: int) -> None:
        a = self.args
        for provider, row in zip(self.providers, rows):
            row.mode = "hot" if hot else f"rot{nsets}"
            row.sets = nsets
            if provider.compiled and self.compile_disabled_reason:
                row.error = f"skipped: {self.compile_disabled_reason}"
                continue
            if provider.applies is not None and not provider.applies(case):
                row.error = f"skipped: {provider.name} does not apply to {case.op}"
                continue
            try:
                fn = provider.factory(case)
                if a.dry_run:
                    self._fake_measure(case, provider, row)
                else:
                    self._measure(case, provider, fn, sets, hot, row)
            except Exception as exc:
                row.error = short_error(exc)
                log(f"  {case.label} / {provider.name}: FAILED: {row.error}")
                if self._after_error():
                    break
            finally:
                fn = None
            if row.check and not row.check.startswith("ok"):
                log(f"  {case.label} / {provider.name}: CHECK: {row.check}")
        for row in rows:
            if self.broken and row.time_us is None and not row.error:
                row.error = f"skipped: {self.broken}"

    def _after_error(self) -> bool:
        """After an exception: is the CUDA context still usable? Marks the run broken if not."""
        if self.args.dry_run:
            return False
        if cuda_context_ok():
            return False
        self.broken = "CUDA context unusable after an error (sticky CUDA error); measurements stopped"
        log(f"*** {self.broken}")
        self.notes.append(self.broken)
        return True

    def _measure(self, case: Case, provider: Provider, fn: Callable, sets: List[Tuple], hot: bool, row: Result) -> None:
        nsets = len(sets)
        # Warm-up; the first call compiles a torch.compile provider.
        t0 = time.perf_counter()
        try:
            out = fn(*sets[0])
            torch.cuda.synchronize()
        finally:
            first_s = time.perf_counter() - t0
            if provider.compiled:  # a failed compile's time counts too
                row.compile_s = first_s
                self.compile_s_total += first_s
                self.compile_count += 1
        if case.check is not None:
            try:
                msg = case.check(sets[0], out)
                row.check = "ok" if msg is None else f"MISMATCH: {msg}"
            except Exception as exc:
                row.check = f"check failed: {short_error(exc)}"
        del out
        for i in range(2):
            fn(*sets[(i + 1) % nsets])
        torch.cuda.synchronize()

        # Rough per-call time (launch overhead included) to size the graph and the repetitions.
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(3):
            fn(*sets[i % nsets])
        end.record()
        torch.cuda.synchronize()
        est_ms = max(start.elapsed_time(end) / 3, 1e-3)

        if hot:
            calls = self.MAX_CALLS
        else:
            calls = min(self.MAX_CALLS, max(self.MIN_CALLS, math.ceil(self.TARGET_REPLAY_MS / est_ms)))
            calls = math.ceil(calls / nsets) * nsets
        reps = int(min(self.MAX_REPS, max(self.MIN_REPS, self.BUDGET_MS / (calls * est_ms))))

        graph = None
        try:
            graph = _capture(fn, sets, calls)
            replay = graph.replay
        except Exception as exc:
            graph = None
            if not cuda_context_ok():
                raise
            row.note = f"graph capture failed ({short_error(exc, 160)}); timed without a graph"
            row.mode = "eager-" + row.mode
            log(f"  {case.label} / {provider.name}: {row.note}")

            def replay() -> None:
                for i in range(calls):
                    fn(*sets[i % nsets])

        try:
            times_ms = _time_replays(replay, reps, self.WARM_MS)
        finally:
            del graph
        per_call_us = sorted(t * 1e3 / calls for t in times_ms)
        row.calls, row.reps = calls, reps
        row.time_us = statistics.median(per_call_us)
        row.min_us = per_call_us[0]
        row.p10_us = per_call_us[int(0.1 * (len(per_call_us) - 1))]
        row.p90_us = per_call_us[int(0.9 * (len(per_call_us) - 1))]
        self._derive(row)

    def _fake_measure(self, case: Case, provider: Provider, row: Result) -> None:
        """--dry-run: deterministic made-up numbers in a plausible range."""
        h = zlib.crc32(f"{case.label}/{provider.name}".encode()) % 1000 / 1000.0
        factor = 1.0 if provider.ours else (1.02 + 0.1 * h if provider.compiled else 3.0 + h)
        if provider.compiled and h < 0.3:
            factor = 0.95  # make some compiled rows win, to exercise the FAIL paths
        gbps = 0.95 * self.copy_gbps / factor
        row.time_us = 1.5 * factor + case.nbytes / (gbps * 1e9) * 1e6
        row.min_us, row.p10_us, row.p90_us = 0.98 * row.time_us, 0.99 * row.time_us, 1.02 * row.time_us
        row.calls, row.reps = (100, 50)
        if provider.compiled:
            row.compile_s = 3.0 + 2 * h
            self.compile_s_total += row.compile_s
            self.compile_count += 1
        row.check = "ok (dry run: not checked)"
        self._derive(row)

    def _derive(self, row: Result) -> None:
        if row.time_us and row.time_us > 0:
            row.gbps = row.nbytes / (row.time_us * 1e-6) / 1e9
            if self.copy_gbps:
                row.frac_copy = row.gbps / self.copy_gbps
            if row.flops:
                row.tflops = row.flops / (row.time_us * 1e-6) / 1e12

    def _speedups(self, rows: List[Result]) -> None:
        ours = next((r for r, p in zip(rows, self.providers) if p.ours), None)
        if ours is None:
            return
        for r, p in zip(rows, self.providers):
            if p.ours:
                continue
            ok = ours.time_us and r.time_us
            ours.speedup[p.name] = (r.time_us / ours.time_us) if ok else None

    # -- lookups and goals --------------------------------------------------------------

    def find(self, op: str, dtype: torch.dtype, params: Dict[str, int], provider: Optional[str] = None) -> Optional[Result]:
        provider = provider or (self.ours.name if self.ours else None)
        d = dtype_name(dtype)
        for r in self.results:
            if r.op == op and r.dtype == d and r.params == params and r.provider == provider:
                return r
        return None

    def goal_gbps(self, op: str, dtype: torch.dtype, params: Dict[str, int], h200_gbps: float) -> None:
        """Ours reaches ``h200_gbps`` scaled by measured_copy / 4220."""

        def fn() -> GoalResult:
            label = f"{op} {dtype_name(dtype)} {' '.join(f'{k}={v}' for k, v in params.items())}"
            goal = h200_gbps * self.scale
            r = self.find(op, dtype, params)
            if r is None or r.gbps is None:
                why = "not run" if r is None else (r.error or "no time")
                return GoalResult("N/A", f"{label}: >= {goal:.0f} GB/s ({h200_gbps:.0f} x {self.scale:.3f}): {why}")
            status = "PASS" if r.gbps >= goal else "FAIL"
            return GoalResult(status, f"{label}: {r.gbps:.0f} GB/s = {100 * r.frac_copy:.1f}% of copy; goal >= {goal:.0f} "
                                      f"({h200_gbps:.0f} x {self.scale:.3f})")

        self.add_goal(fn)

    def goal_max_us(self, op: str, dtype: torch.dtype, params: Dict[str, int], max_us: float) -> None:
        """Ours takes at most ``max_us`` per call (decode shapes: inside a CUDA graph)."""

        def fn() -> GoalResult:
            label = f"{op} {dtype_name(dtype)} {' '.join(f'{k}={v}' for k, v in params.items())}"
            r = self.find(op, dtype, params)
            if r is None or r.time_us is None:
                why = "not run" if r is None else (r.error or "no time")
                return GoalResult("N/A", f"{label}: <= {max_us:g} us: {why}")
            status = "PASS" if r.time_us <= max_us else "FAIL"
            how = "in a CUDA graph" if not r.mode.startswith("eager") else "NOT in a graph"
            return GoalResult(status, f"{label}: {r.time_us:.2f} us {how} ({r.mode}); goal <= {max_us:g} us")

        self.add_goal(fn)

    def goal_min_speedup(self, op: str, baseline: str, min_ratio: float = 1.0, min_t: int = 0) -> None:
        """Ours is at least ``min_ratio`` x faster than ``baseline`` on every case of ``op``
        (with ``min_t``: every case whose ``T`` parameter is at least ``min_t``)."""

        def fn() -> GoalResult:
            ours = self.ours.name if self.ours else None
            rows = [r for r in self.results if r.op == op and r.provider == ours and r.params.get("T", 0) >= min_t]
            where = f" at T >= {min_t}" if min_t else ""
            pairs = [(r, r.speedup.get(baseline)) for r in rows]
            have = [(r, s) for r, s in pairs if s is not None]
            missing = len(pairs) - len(have)
            if not have:
                return GoalResult("N/A", f"{op} vs {baseline}{where}: >= {min_ratio:g}x at every shape: no pair measured")
            worst_r, worst = min(have, key=lambda t: t[1])
            misses = [f"{r.dtype} {r.shape} {s:.2f}x" for r, s in have if s < min_ratio]
            status = "PASS" if not misses else "FAIL"
            text = (f"{op} vs {baseline}{where}: min {worst:.2f}x ({worst_r.dtype} {worst_r.shape}) over {len(have)} shapes; "
                    f"goal >= {min_ratio:g}x at every shape")
            if misses:
                text += f"; misses: {', '.join(misses)}"
            if missing:
                text += f"; {missing} shape(s) without a pair"
                if status == "PASS":
                    status = "N/A"
            return GoalResult(status, text)

        self.add_goal(fn)

    # -- outputs ------------------------------------------------------------------------

    def _baseline_names(self) -> List[str]:
        return [p.name for p in self.baselines]

    def _row_dict(self, r: Result) -> Dict[str, Any]:
        d: Dict[str, Any] = {
            "bench": self.name, "op": r.op, "dtype": r.dtype, "shape": r.shape, **r.params,
            "provider": r.provider, "mode": r.mode, "sets": r.sets, "calls_per_graph": r.calls,
            "reps": r.reps, "bytes": r.nbytes,
            "time_us": _round(r.time_us, 4), "min_us": _round(r.min_us, 4), "p10_us": _round(r.p10_us, 4),
            "p90_us": _round(r.p90_us, 4), "gbps": _round(r.gbps, 1), "frac_copy": _round(r.frac_copy, 4),
        }
        if r.flops:
            d.update(flops=r.flops, tflops=_round(r.tflops, 2))
        for b in self._baseline_names():
            d[f"speedup_vs_{b}"] = _round(r.speedup.get(b), 4)
        d.update(compile_s=_round(r.compile_s, 2), check=r.check, error=r.error, note=r.note)
        return d

    def _write_data(self) -> None:
        try:
            rows = [self._row_dict(r) for r in self.results]
            columns: List[str] = []
            for row in rows:
                for k in row:
                    if k not in columns:
                        columns.append(k)
            csv_path = self.out_dir / f"{self.name}.csv"
            tmp = csv_path.with_suffix(".csv.tmp")
            with open(tmp, "w", newline="") as f:
                w = csv.DictWriter(f, fieldnames=columns, restval="")
                w.writeheader()
                w.writerows(rows)
            os.replace(tmp, csv_path)
            meta = dict(self.meta)
            meta.update(
                wall_s=round(self.elapsed(), 1),
                estimate_s=round(self.estimate_s, 1),
                compile_s_total=round(self.compile_s_total, 1),
                compile_count=self.compile_count,
                h200_copy_gbps=H200_COPY_GBPS,
                goal_scale=round(self.scale, 4),
                notes=self.notes,
                timing=("median over R CUDA-graph replays of N calls, per call; hot = same inputs every "
                        "call (bytes*4 <= L2); rotK = K input sets rotated (K*bytes >= 4*L2)"),
            )
            doc = {"meta": meta, "rows": rows, "goals": getattr(self, "_goal_results", [])}
            json_path = self.out_dir / f"{self.name}.json"
            tmp = json_path.with_suffix(".json.tmp")
            with open(tmp, "w") as f:
                json.dump(doc, f, indent=1)
            os.replace(tmp, json_path)
        except Exception as exc:
            log(f"warning: could not write CSV/JSON: {short_error(exc)}")

    def _plots(self) -> None:
        plt = import_pyplot()
        if plt is None:
            return
        self.plot_files: List[str] = []
        ops = list(dict.fromkeys(r.op for r in self.results))
        colors = {p.name: f"C{i}" for i, p in enumerate(self.providers)}
        markers = "os^Dvx*P"
        styles = ["-", "--", ":", "-."]
        for op in ops:
            try:
                rows = [r for r in self.results if r.op == op and r.gbps]
                if not rows:
                    log(f"warning: no plot for {op}: no timed rows")
                    continue
                x_key = self.plot_x

                def group(r: Result) -> str:
                    rest = " ".join(f"{k}={v}" for k, v in r.params.items() if k != x_key)
                    return f"{r.dtype} {rest}".strip()

                groups = list(dict.fromkeys(group(r) for r in rows))
                # left: GB/s (the brief of DESIGN.md 8); right: time per call (decode goals are in us)
                fig, (ax, ax_t) = plt.subplots(1, 2, figsize=(14, 5.5))
                for gi, g in enumerate(groups):
                    for p in self.providers:
                        pts = sorted((r.params.get(x_key, 0), r.gbps, r.time_us) for r in rows
                                     if r.provider == p.name and group(r) == g)
                        if not pts:
                            continue
                        style = dict(color=colors[p.name], linestyle=styles[gi % len(styles)],
                                     marker=markers[gi % len(markers)])
                        xs = [pt[0] for pt in pts]
                        ax.plot(xs, [pt[1] for pt in pts], label=f"{p.name}, {g}", **style)
                        ax_t.plot(xs, [pt[2] for pt in pts], label=f"{p.name}, {g}", **style)
                if self.copy_gbps:
                    ax.axhline(self.copy_gbps, color="grey", linestyle=":", linewidth=1,
                               label=f"device copy {self.copy_gbps:.0f} GB/s")
                for a_ in (ax, ax_t):
                    if x_key:
                        a_.set_xscale("log", base=2)
                        a_.set_xlabel(x_key)
                    a_.set_yscale("log")
                    a_.grid(True, which="both", alpha=0.3)
                ax.set_ylabel("GB/s (bytes read + written)")
                ax_t.set_ylabel("time per call (us)")
                ax.legend(fontsize=7, loc="lower right")
                fig.suptitle(f"{op} on {self.device_name}: CUDA-graph timing, median; small shapes L2-hot, "
                             f"large ones rotate inputs", fontsize=10)
                fig.tight_layout()
                path = self.out_dir / f"{self.name}_{op}.png"
                fig.savefig(path, dpi=110)
                plt.close(fig)
                self.plot_files.append(path.name)
            except Exception as exc:
                log(f"warning: plot for {op} failed: {short_error(exc)}")

    def _print_table(self) -> None:
        ours = self.ours
        provs = ([ours] if ours else []) + self.baselines
        head = f"{'op':<18}{'dtype':<6}{'shape':<17}{'mode':<7}"
        for p in provs:
            head += f"{p.name[:13] + ' us':>17}"
        head += f"{'GB/s':>7}{'%copy':>6}"
        for b in self.baselines:
            head += f"{'x' + b.name[:10]:>12}"
        log("")
        log(f"=== {self.name}: per-call time, ours' GB/s and fraction of copy; xBASE = BASE time / ours (>1: we are faster)")
        log(head)
        by_case: Dict[Tuple[str, str, str], Dict[str, Result]] = {}
        for r in self.results:
            by_case.setdefault((r.op, r.dtype, r.shape), {})[r.provider] = r
        for (op, dt, shape), rs in by_case.items():
            any_r = next(iter(rs.values()))
            line = f"{op[:17]:<18}{dt:<6}{shape[:16]:<17}{any_r.mode[:6]:<7}"
            for p in provs:
                r = rs.get(p.name)
                if r is None or r.time_us is None:
                    cell = "skip" if r is not None and r.error.startswith("skipped") else "ERR"
                    line += f"{cell:>17}"
                else:
                    flag = "!" if (r.check and not r.check.startswith("ok")) else ""
                    line += f"{_fmt_us(r.time_us) + flag:>17}"
            r0 = rs.get(ours.name) if ours else None
            line += f"{r0.gbps:>7.0f}" if r0 and r0.gbps else f"{'-':>7}"
            line += f"{100 * r0.frac_copy:>5.0f}%" if r0 and r0.frac_copy else f"{'-':>6}"
            for b in self.baselines:
                s = r0.speedup.get(b.name) if r0 else None
                line += f"{s:>11.2f}x" if s is not None else f"{'-':>12}"
            log(line)
        log("('!' = output check failed; ERR = see the errors in the summary and the CSV)")

    def _print_summary(self) -> None:
        a = self.args
        log("")
        log(f"=== SUMMARY {self.name} on {self.device_name} (torch {torch.__version__})")
        if self.copy_measured:
            log(f"device copy {self.copy_gbps:.0f} GB/s -> GB/s goals x {self.scale:.3f} (H200 reference {H200_COPY_GBPS:.0f})")
        elif not a.dry_run:
            log("device copy NOT measured: GB/s goals unscaled")
        if any(p.compiled for p in self.providers):
            avg = self.compile_s_total / self.compile_count if self.compile_count else 0.0
            log(f"torch.compile: {self.compile_count} shapes compiled in {self.compile_s_total:.1f} s "
                f"(first call of each, {avg:.1f} s avg)")
        errors = [r for r in self.results if r.error and not r.error.startswith("skipped")]
        skipped = [r for r in self.results if r.error.startswith("skipped")]
        if errors:
            log(f"ERRORS: {len(errors)} measurement(s) failed, e.g.:")
            seen = set()
            for r in errors:
                if r.error in seen or len(seen) >= 4:
                    continue
                seen.add(r.error)
                log(f"  {r.op} {r.dtype} {r.shape} / {r.provider}: {r.error}")
        if skipped:
            log(f"skipped: {len(skipped)} measurement(s) ({skipped[0].error})")
        bad = [r for r in self.results if r.check and not r.check.startswith("ok")]
        if bad:
            log(f"OUTPUT CHECK FAILED: {len(bad)} measurement(s), e.g. {bad[0].op} {bad[0].dtype} {bad[0].shape} / "
                f"{bad[0].provider}: {bad[0].check}")
        elif not a.dry_run:
            checked = sum(1 for r in self.results if r.check == "ok")
            log(f"output checks: {checked} ok (vs the fp32 reference, tests/tolerances.py)")
        eager = [r for r in self.results if r.mode.startswith("eager")]
        if eager:
            log(f"graph capture failed for {len(eager)} measurement(s) (timed without a graph), e.g. "
                f"{eager[0].op} {eager[0].shape} / {eager[0].provider}")
        for n in self.notes:
            log(f"note: {n}")
        results = []
        for g in self.goals:
            try:
                results.append(g())
            except Exception as exc:
                results.append(GoalResult("N/A", f"goal evaluation failed: {short_error(exc)}"))
        self._goal_results = [{"status": g.status, "text": g.text} for g in results]
        if results:
            n_pass = sum(g.status == "PASS" for g in results)
            n_fail = sum(g.status == "FAIL" for g in results)
            log(f"goals (DESIGN.md 9): {n_pass} PASS, {n_fail} FAIL, {len(results) - n_pass - n_fail} N/A")
            for g in results:
                log(f"  {g.status:<4} {g.text}")
        self._write_data()  # again, with the goal results in the JSON
        files = [f"{self.name}.csv", f"{self.name}.json"] + list(getattr(self, "plot_files", []))
        log(f"wall time {self.elapsed():.0f} s (estimated {self.estimate_s:.0f} s); outputs in {self.out_dir}/: {', '.join(files)}")


def _round(x: Optional[float], nd: int) -> Optional[float]:
    return None if x is None else round(float(x), nd)


def _fmt_us(us: float) -> str:
    return f"{us:.2f}" if us < 100 else f"{us:.1f}" if us < 10000 else f"{us:.0f}"


def import_pyplot():
    """matplotlib.pyplot on the Agg backend, or None (with a warning) when it cannot load."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as exc:
        log(f"warning: no plots (matplotlib: {short_error(exc)})")
        return None
    return plt


def cli_main(build: "Callable[[argparse.Namespace], Bench]", description: str, argv=None, models: bool = False) -> int:
    """The command line every bench_<op>.py shares: parse the harness options, let `build`
    register cases and providers, raise dynamo's recompile limits when compiling, run.
    ``models``: the script has a ``--models`` shape list (else the flag is an error)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    Bench.add_args(parser)
    args = parser.parse_args(argv)
    if args.models and not models:
        parser.error("--models: this bench has no model-size list (benchmark/models.py)")
    if args.models and args.quick:
        parser.error("--models and --quick are two different shape lists: pick one")
    bench = build(args)
    if not args.no_compile:
        log("torch._dynamo: " + ", ".join(configure_dynamo()))
    return bench.main(args)
