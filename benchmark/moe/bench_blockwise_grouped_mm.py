# SPDX-License-Identifier: Apache-2.0
"""Benchmark of fp8_blockwise_scaled_grouped_mm (the expert GEMMs of a CUTLASS MoE layer in one
grouped launch, e4m3 inputs with DeepSeek-style 1x128 / 128x128 block scales, bf16 out) against
what an engine could run instead, in the same run and the same CUDA graphs:

  fp8mm_loop  a Python loop over the experts calling our fp8_blockwise_scaled_mm(a[rows], w[e].t(),
              scales_a[rows], scales_b[e]) once per expert with M_e > 0 (the host knows every M_e,
              which a real engine would have to sync for); each expert's scales_a in its own
              M-major buffer, the layout that op reads in place (no copy inside the timed call);
  bf16_gmm    torch._grouped_mm (CUTLASS bf16 grouped GEMM) of the dequantized inputs,
              a [R, K] @ w [E, K, N] (each expert column-major) with int32 cumulative offsets;
              skipped when this torch lacks it or it fails a small probe. Before torch 2.9 each
              expert's rows are padded to a multiple of 16 (zero rows), as that version needs.

    python benchmark/moe/bench_blockwise_grouped_mm.py --out bench_out [--quick] [--max-seconds S]

Shapes (E local experts, N, K, R rows in all; M_e = R / E each, or a skewed split):
  DeepSeek-V3 w13 (N, K) = (4096, 7168): E = 8 (EP 32) at R = 8 x {1, 4, 16, 64, 256}, E = 32 at
      R = 32 x {1, 16, 256}, and E = 32, R = 2048 skewed (M_e ~ 1 / rank over half the experts,
      the other 16 empty: sizes off multiples of 16, empty experts skipped);
  DeepSeek-V3 w2 (7168, 2048): E = 8 at R = 8 x {1, 16, 256}, E = 32 at R = 32 x {4, 256};
  Qwen3-30B-A3B w13 (1536, 2048): E = 128 at R = 128 x 8 x {1, 16}.
--quick: three of them. Every case rotates its inputs (the weights alone exceed L2), so each
call reads the weights from HBM as in a serving step.
TFLOP/s = 2 R N K / time. Bytes per call: a (R K), the weights of the experts with M_e > 0
(N K each), both scales (fp32), the output (2 R N), problem sizes and offsets.
Check (one call per shape and provider, before timing): ours against the fp8mm_loop output,
both baselines against an fp32 dequantize-then-matmul reference; loose: |err| <= rtol (|ref| +
rms(ref)), rtol 2e-2 (fp8 paths) / 3e-2 (bf16 inputs).
Goal: ours <= fp8mm_loop at every shape (PASS per row in the TFLOP/s table); the speedup over
bf16_gmm is reported, not a goal.
"""

from __future__ import annotations

import argparse
import math
import random
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

_ROOT = str(Path(__file__).resolve().parents[2])
if sys.path[0] != _ROOT:
    sys.path.insert(0, _ROOT)

import torch  # noqa: E402

from benchmark.harness import Bench, cli_main, log, short_error  # noqa: E402
from tests.gemm.ref_gemm import FP8  # noqa: E402

OP = "fp8_blockwise_scaled_grouped_mm"
OUT = torch.bfloat16
BLOCK = 128
LOOP = "fp8mm_loop"
GMM = "bf16_gmm"
RTOL_FP8 = 2e-2
RTOL_BF16 = 3e-2
# (N, K) of the expert layers
DSV3_W13 = (4096, 7168)
DSV3_W2 = (7168, 2048)
QWEN3_W13 = (1536, 2048)

try:
    import sgl_kernel

    _SGL_IMPORT_ERROR = None
except Exception as exc:  # reported per row and in the summary, the baselines still run
    sgl_kernel = None
    _SGL_IMPORT_ERROR = short_error(exc)


def _torch_at_least(major: int, minor: int) -> bool:
    m = re.match(r"(\d+)\.(\d+)", torch.__version__)
    return m is not None and (int(m.group(1)), int(m.group(2))) >= (major, minor)


# torch._grouped_mm's CUTLASS path reads a row-major 2D a at any group size from 2.9 on; older
# releases are given rows padded per expert to 16 (a device-side assert there would end the run).
GMM_PAD16 = not _torch_at_least(2, 9)


def shapes(quick: bool) -> List[Tuple[int, int, int, int, int]]:
    """(E, N, K, R, skew) in run order."""
    if quick:
        return [(8, *DSV3_W13, 8, 0), (32, *DSV3_W13, 2048, 1), (128, *QWEN3_W13, 1024, 0)]
    out = [(8, *DSV3_W13, 8 * f, 0) for f in (1, 4, 16, 64, 256)]
    out += [(32, *DSV3_W13, 32 * f, 0) for f in (1, 16, 256)]
    out += [(32, *DSV3_W13, 2048, 1)]
    out += [(8, *DSV3_W2, 8 * f, 0) for f in (1, 16, 256)]
    out += [(32, *DSV3_W2, 32 * f, 0) for f in (4, 256)]
    out += [(128, *QWEN3_W13, 128 * 8 * f, 0) for f in (1, 16)]
    return out


def split_rows(r: int, e: int, skew: int) -> List[int]:
    """M_e of each expert, summing to ``r``. Balanced: r / e each (the remainder to the first
    experts). Skewed: proportional to 1 / rank over the first half of a fixed shuffle of the
    experts, the other half empty, the rounding remainder to the largest."""
    if not skew:
        return [r // e + (1 if i < r % e else 0) for i in range(e)]
    order = list(range(e))
    random.Random(e * 1000 + r).shuffle(order)
    busy = max(1, e // 2)
    weights = [1.0 / (rank + 1) for rank in range(busy)]
    total = sum(weights)
    ms = [0] * e
    for rank in range(busy):
        ms[order[rank]] = int(r * weights[rank] / total)
    ms[order[0]] += r - sum(ms)
    return ms


def _cum(ms: List[int]) -> List[int]:
    """Exclusive prefix sums: the first row of each expert."""
    out, acc = [], 0
    for m in ms:
        out.append(acc)
        acc += m
    return out


def case_bytes(ms: List[int], n: int, k: int) -> int:
    r, active = sum(ms), sum(1 for m in ms if m > 0)
    kb, nb = k // BLOCK, n // BLOCK
    return r * k + active * n * k + 4 * (r * kb + active * nb * kb) + 2 * r * n + 4 * 4 * len(ms)


# ---------------------------------------------------------------------------------------
# Inputs of one call (all providers)


@dataclass
class GroupedInputs:
    ms: List[int]
    offsets: List[int]
    n: int
    k: int
    a: torch.Tensor  # [R, K] e4m3
    w: torch.Tensor  # [E, N, K] e4m3, contiguous (b = w.transpose(1, 2))
    sa: torch.Tensor  # [R, K / 128] fp32, contiguous
    sb: torch.Tensor  # [E, N / 128, K / 128] fp32, contiguous (scales_b = sb.transpose(1, 2))
    output: torch.Tensor  # [R, N] bf16, NaN before the first call
    op_args: Tuple[torch.Tensor, ...]  # the op's 18 arguments, output first
    loop_args: List[Tuple[torch.Tensor, ...]]  # per expert with M_e > 0: (a_e, b_e, sa_e, sb_e)
    gmm_a: Optional[torch.Tensor] = None  # bf16 [R or R_pad, K], dequantized
    gmm_b: Optional[torch.Tensor] = None  # bf16 [E, K, N], dequantized, each expert column-major
    gmm_offs: Optional[torch.Tensor] = None  # int32 [E], cumulative row ends
    gmm_rows: Optional[torch.Tensor] = None  # padded layout: the row of gmm_a holding each row of a
    cache: Dict[str, Any] = field(default_factory=dict)  # references, computed once per input set


def _dequant_a(a: torch.Tensor, sa: torch.Tensor) -> torch.Tensor:
    r, k = a.shape
    return (a.float().view(r, k // BLOCK, BLOCK) * sa.view(r, k // BLOCK, 1)).view(r, k)


def _dequant_w(w_e: torch.Tensor, sb_e: torch.Tensor) -> torch.Tensor:
    """fp32 [N, K] of one expert's e4m3 weight times its 128x128 block scales [N/128, K/128]."""
    n, k = w_e.shape
    nb, kb = n // BLOCK, k // BLOCK
    return (w_e.float().view(nb, BLOCK, kb, BLOCK) * sb_e.view(nb, 1, kb, 1)).view(n, k)


def make_inputs(ms: List[int], n: int, k: int, with_gmm: bool) -> GroupedInputs:
    e, r = len(ms), sum(ms)
    kb, nb = k // BLOCK, n // BLOCK
    dev = "cuda"
    i32, i64 = dict(dtype=torch.int32, device=dev), dict(dtype=torch.int64, device=dev)
    offsets = _cum(ms)
    a = torch.randn(r, k, device=dev).to(FP8)
    w = torch.empty(e, n, k, dtype=FP8, device=dev)
    for i in range(e):  # one expert at a time: a [N, K] fp32 temporary instead of [E, N, K]
        w[i] = torch.randn(n, k, device=dev).to(FP8)
    # positive scales over two octaves: a swapped or misindexed scale shows in the check
    sa = torch.rand(r, kb, device=dev) * 1.5 + 0.25
    sb = torch.rand(e, nb, kb, device=dev) * 1.5 + 0.25
    output = torch.full((r, n), float("nan"), dtype=OUT, device=dev)
    ptrs = [torch.empty(e, **i64) for _ in range(5)]  # a, b, out, a_scales, b_scales
    problem_sizes = torch.tensor([[m, n, k] for m in ms], **i32)
    expert_offsets = torch.tensor(offsets, **i32)
    op_args = (output, *ptrs, a, w.transpose(1, 2), sa, sb.transpose(1, 2),
               torch.full((e,), k, **i64), torch.full((e,), k, **i64), torch.full((e,), n, **i64),
               torch.empty(e, 5, **i32), torch.empty(e, 5, **i32), problem_sizes, expert_offsets,
               torch.empty(1 << 20, dtype=torch.uint8, device=dev))

    loop_args = []
    for i, (o, m) in enumerate(zip(offsets, ms)):
        if m == 0:
            continue
        # M-major scales with a 16-byte aligned start and a k-block stride of M rounded up to 4:
        # what fp8_blockwise_scaled_mm reads in place
        m_pad = (m + 3) // 4 * 4
        buf = torch.zeros(kb, m_pad, device=dev)
        buf[:, :m] = sa[o:o + m].t()
        loop_args.append((a[o:o + m], w[i].t(), buf[:, :m].t(), sb[i].t()))

    inp = GroupedInputs(ms, offsets, n, k, a, w, sa, sb, output, op_args, loop_args)
    if with_gmm:
        a_deq = _dequant_a(a, sa).to(torch.bfloat16)
        w_bf = torch.empty(e, n, k, dtype=torch.bfloat16, device=dev)
        for i in range(e):
            w_bf[i] = _dequant_w(w[i], sb[i]).to(torch.bfloat16)
        inp.gmm_b = w_bf.transpose(1, 2)
        if GMM_PAD16:
            rows_pad = [(m + 15) // 16 * 16 for m in ms]
            starts = _cum(rows_pad)
            idx = torch.cat([torch.arange(s, s + m, device=dev) for s, m in zip(starts, ms)])
            inp.gmm_a = torch.zeros(sum(rows_pad), k, dtype=torch.bfloat16, device=dev)
            inp.gmm_a[idx] = a_deq
            inp.gmm_rows = idx
            ends = [s + p for s, p in zip(starts, rows_pad)]
        else:
            inp.gmm_a = a_deq
            ends = [o + m for o, m in zip(offsets, ms)]
        inp.gmm_offs = torch.tensor(ends, **i32)
    return inp


# ---------------------------------------------------------------------------------------
# Providers


def run_ours(inp: GroupedInputs) -> torch.Tensor:
    sgl_kernel.moe.fp8_blockwise_scaled_grouped_mm(*inp.op_args)
    return inp.output


def run_loop(inp: GroupedInputs) -> List[torch.Tensor]:
    mm = sgl_kernel.gemm.fp8_blockwise_scaled_mm
    return [mm(a_e, b_e, sa_e, sb_e, OUT) for a_e, b_e, sa_e, sb_e in inp.loop_args]


def run_gmm(inp: GroupedInputs) -> Tuple[str, torch.Tensor]:
    # tagged: its output has R_pad rows in the padded layout
    return GMM, torch._grouped_mm(inp.gmm_a, inp.gmm_b, offs=inp.gmm_offs, out_dtype=OUT)


_GMM_STATUS: Dict[str, Tuple[bool, str]] = {}


def gmm_status() -> Tuple[bool, str]:
    """(usable, why not): torch._grouped_mm exists and gets a small two-expert product right
    (aligned sizes, so no version can hit a device-side assert here). Needs the GPU; once."""
    if "s" in _GMM_STATUS:
        return _GMM_STATUS["s"]
    if not hasattr(torch, "_grouped_mm"):
        status = (False, f"torch {torch.__version__} has no torch._grouped_mm")
    else:
        try:
            a = torch.randn(32, 256, device="cuda").to(torch.bfloat16)
            w = torch.randn(2, 128, 256, device="cuda").to(torch.bfloat16)
            offs = torch.tensor([16, 32], dtype=torch.int32, device="cuda")
            got = torch._grouped_mm(a, w.transpose(1, 2), offs=offs, out_dtype=OUT).float()
            want = torch.cat([a[:16].float() @ w[0].float().t(), a[16:].float() @ w[1].float().t()])
            ok = got.shape == want.shape and bool(((got - want).abs() <= 0.05 * (want.abs() + 1)).all())
            status = (True, "") if ok else (False, "torch._grouped_mm gave a wrong result on a probe")
        except Exception as exc:
            status = (False, f"torch._grouped_mm failed on a probe: {short_error(exc, 160)}")
    _GMM_STATUS["s"] = status
    return status


# ---------------------------------------------------------------------------------------
# Checks


def _no_tf32_matmul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    prev = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return x @ y
    finally:
        torch.backends.cuda.matmul.allow_tf32 = prev


def reference(inp: GroupedInputs) -> torch.Tensor:
    """fp32 [R, N]: each expert's dequantized rows times its dequantized weight (no TF32);
    computed once per input set."""
    if "ref" not in inp.cache:
        a_deq = _dequant_a(inp.a, inp.sa)
        ref = torch.zeros(inp.a.shape[0], inp.n, device=inp.a.device)
        for i, (o, m) in enumerate(zip(inp.offsets, inp.ms)):
            if m:
                ref[o:o + m] = _no_tf32_matmul(a_deq[o:o + m], _dequant_w(inp.w[i], inp.sb[i]).t())
        inp.cache["ref"] = ref
    return inp.cache["ref"]


def loop_output(inp: GroupedInputs, parts: Optional[List[torch.Tensor]] = None) -> torch.Tensor:
    """[R, N] of the per-expert loop (baseline a), its pieces stacked in expert order."""
    if parts is None:
        if "loop" in inp.cache:
            return inp.cache["loop"]
        parts = run_loop(inp)
    out = torch.cat(parts) if parts else inp.output.new_empty(0, inp.n)
    inp.cache["loop"] = out
    return out


def compare(got: torch.Tensor, want: torch.Tensor, rtol: float, what: str) -> Optional[str]:
    """None when every element is within rtol * (|want| + rms(want)), else a one-line reason."""
    if got.shape != want.shape:
        return f"output shape {tuple(got.shape)}, expected {tuple(want.shape)}"
    g, w = got.float(), want.float()
    bad_nf = int((~torch.isfinite(g)).sum())
    if bad_nf:
        return f"{bad_nf} of {g.numel()} elements non-finite (rows not written?)"
    rms = float(w.pow(2).mean().sqrt()) if w.numel() else 0.0
    err = (g - w).abs()
    bad = int((err > rtol * (w.abs() + rms)).sum())
    if bad:
        return (f"{bad} of {g.numel()} elements off {what} by more than {rtol:g} (|ref| + rms); "
                f"max err / rms {float(err.max()) / max(rms, 1e-30):.3g}")
    return None


def check(args, out) -> Optional[str]:
    inp = args[0]
    if isinstance(out, tuple) and out and out[0] == GMM:
        y = out[1]
        if inp.gmm_rows is not None:
            y = y[inp.gmm_rows]
        return compare(y, reference(inp), RTOL_BF16, "the fp32 reference")
    if isinstance(out, list):  # the per-expert loop
        return compare(loop_output(inp, out), reference(inp), RTOL_FP8, "the fp32 reference")
    if isinstance(out, torch.Tensor):  # ours, against the loop's output
        if out.dtype != OUT:
            return f"output dtype {out.dtype}, expected {OUT}"
        return compare(out, loop_output(inp), RTOL_FP8, f"the {LOOP} output")
    return f"returned {type(out).__name__}"


# ---------------------------------------------------------------------------------------
# The bench: the harness's table, then one with every provider's TFLOP/s and the goal per row


class GroupedMmBench(Bench):
    def _print_table(self) -> None:
        super()._print_table()
        ours = self.ours
        if ours is None:
            return
        provs = [ours] + self.baselines
        by_case: Dict[str, Dict[str, Any]] = {}
        for r in self.results:
            by_case.setdefault(r.shape, {})[r.provider] = r
        head = f"{'shape':<36}{'M_e min..max (empty)':>21}"
        for p in provs:
            head += f"{p.name[:12] + ' TF/s':>18}"
        head += f"{'GB/s':>7}{'x' + LOOP:>12}{'x' + GMM:>10}  ours <= " + LOOP
        log("")
        log(f"=== {self.name}: TFLOP/s = 2 R N K / time of each provider, ours' GB/s, speedups (BASE time / ours)")
        log(head)
        logs: Dict[str, List[float]] = {b.name: [] for b in self.baselines}
        for shape, rs in by_case.items():
            r0 = rs.get(ours.name)
            any_r = next(iter(rs.values()))
            p = any_r.params
            ms = split_rows(p["R"], p["E"], p["skew"])
            busy = [m for m in ms if m]
            dist = f"{min(busy) if busy else 0}..{max(ms)} ({len(ms) - len(busy)})"
            line = f"{shape[:35]:<36}{dist:>21}"
            for prov in provs:
                r = rs.get(prov.name)
                line += f"{r.tflops:>18.1f}" if r is not None and r.tflops else f"{'-':>18}"
            line += f"{r0.gbps:>7.0f}" if r0 is not None and r0.gbps else f"{'-':>7}"
            for name, width in ((LOOP, 12), (GMM, 10)):
                s = r0.speedup.get(name) if r0 is not None else None
                line += f"{s:>{width - 1}.2f}x" if s else f"{'-':>{width}}"
                if s and name in logs:
                    logs[name].append(math.log(s))
            s = r0.speedup.get(LOOP) if r0 is not None else None
            line += "  " + ("-" if not s else ("PASS" if s >= 1.0 else "FAIL"))
            log(line)
        for name, vals in logs.items():
            if vals:
                log(f"speedup vs {name}: geometric mean {math.exp(sum(vals) / len(vals)):.2f}x over {len(vals)} "
                    f"shapes (min {math.exp(min(vals)):.2f}x, max {math.exp(max(vals)):.2f}x)")


def build(args: argparse.Namespace) -> Bench:
    ops = Bench.selected_ops(args, (OP,))
    bench = GroupedMmBench("blockwise_grouped_mm",
                           f"{OP} vs a per-expert fp8_blockwise_scaled_mm loop and torch._grouped_mm (bf16)",
                           plot_x="R")

    def need_sgl():
        if sgl_kernel is None:
            raise RuntimeError(f"import sgl_kernel failed: {_SGL_IMPORT_ERROR}")

    def ours(case):
        need_sgl()
        if not args.dry_run and not hasattr(getattr(sgl_kernel, "moe", None), OP):
            raise RuntimeError(f"this sgl_kernel build has no sgl_kernel.moe.{OP}")
        return run_ours

    def loop(case):
        need_sgl()
        return run_loop

    gmm_noted = []

    def gmm_applies(case) -> bool:
        if args.dry_run:
            return hasattr(torch, "_grouped_mm")
        ok, why = gmm_status()
        if not ok and not gmm_noted:
            gmm_noted.append(why)
            bench.notes.append(f"{GMM} skipped: {why}")
        return ok

    bench.add_provider("sgl_kernel", ours, ours=True)
    bench.add_provider(LOOP, loop)
    bench.add_provider(GMM, lambda case: run_gmm, applies=gmm_applies)
    bench.notes.append(f"{LOOP}: sgl_kernel.gemm.fp8_blockwise_scaled_mm once per expert with M_e > 0, in the "
                       f"same graph (M-major scales_a per expert, read in place); {GMM}: torch._grouped_mm on "
                       f"dequantized bf16 inputs, rows " + ("padded per expert to 16" if GMM_PAD16 else "unpadded")
                       + f" (torch {torch.__version__})")
    if _SGL_IMPORT_ERROR:
        bench.notes.append(f"import sgl_kernel FAILED: {_SGL_IMPORT_ERROR}")

    if OP in ops:
        for e, n, k, r, skew in shapes(args.quick):
            ms = split_rows(r, e, skew)

            def setup(ms=ms, n=n, k=k):
                with_gmm = gmm_status()[0]
                return (make_inputs(ms, n, k, with_gmm),)

            params = {"R": r, "E": e, "N": n, "K": k, "skew": skew}
            bench.add_case(OP, FP8, params, setup, case_bytes(ms, n, k), check=check, flops=2 * r * n * k)
        bench.goal_min_speedup(OP, LOOP, 1.0)
    return bench


def main(argv=None) -> int:
    return cli_main(build, __doc__, argv)


if __name__ == "__main__":
    sys.exit(main())
