#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Find global loads that wait for another load's value without needing it (session 40).

A kernel that loads an index (a cache slot, a token position) and data whose address does not
depend on it means both round trips to overlap. ptxas may still sink the data loads below the
branch that checks the index when only that branch uses them: store_kv_cache's k/v loads sat
below its location check in every release before session 40 (csrc/project/row_copy.cuh,
store_chunk_if), volatile asm or not. This tool reads `cuobjdump -sass` output and reports, per
kernel, the first global load whose address depends on no loaded value but which comes after a
conditional branch or exit whose predicate does.

    nvcc -O3 -std=c++20 -arch=sm_90a --expt-relaxed-constexpr -Iinclude -Icsrc -cubin \\
        -o /tmp/x.cubin csrc/project/store_kv_cache.cu
    cuobjdump -sass /tmp/x.cubin > /tmp/x.sass      # (triton ships one: .../nvidia/bin/cuobjdump)
    python3 tools/sass_load_audit.py /tmp/x.sass [--all]

A linear scan (no control-flow graph): loops, division slow paths and designed orders are
reported too. Known and intended at session 40: rope_kernel (the heads after the position check,
measured faster in tune_rope.cu), loops over rows whose bounds or sums come from loaded values
(the norm, norm + quant and per-token kernels' many-row forms, tensor_code_kernel's tail),
fast_topk_kernel, and the all-reduce kernels' flag polling. --all prints every flagged
load, not only the first of each kernel.
"""

from __future__ import annotations

import re
import sys

INSN = re.compile(r"^\s*(?:/\*[0-9a-f]+\*/)?\s*(@!?U?P[T0-9]+\s+)?([A-Z][A-Z0-9_.]*)\s*(.*?)\s*;")
REG = re.compile(r"\b(U?R\d+|U?P\d)\b")
LOADS = ("LDG", "LD")
NO_DEST = ("STG", "ST", "STS", "STL", "BAR", "RED", "MEMBAR", "BSSY", "BSYNC", "WARPSYNC", "NOP")
SETP = ("ISETP", "FSETP", "DSETP", "HSETP2", "FCHK")


def regs_in(text: str) -> set[str]:
    return set(REG.findall(text))


def span(reg: str, n: int) -> set[str]:
    m = re.fullmatch(r"(U?R)(\d+)", reg)
    return {f"{m.group(1)}{int(m.group(2)) + k}" for k in range(n)} if m else {reg}


def load_width(op: str) -> int:
    return 4 if ".128" in op else 2 if ".64" in op else 1


def audit(body: list[str], report_all: bool) -> list[tuple[str, str]]:
    """(branch, load) pairs: `load` issued after `branch`, whose predicate depends on a loaded
    value, while the load's own address depends on none."""
    loaded: set[str] = set()  # registers and predicates that depend on a loaded value
    branch = None
    found = []
    for line in body:
        m = INSN.match(line)
        if not m:
            continue
        guard, op, rest = m.group(1), m.group(2), m.group(3)
        base = op.split(".")[0]
        ops = [o.strip() for o in rest.split(",")] if rest else []
        if base in ("BRA", "EXIT") and guard:
            if branch is None and guard.strip().lstrip("@!") in loaded:
                branch = f"{op} {rest}".strip() if base == "BRA" else "EXIT"
                branch = f"{guard.strip()} {branch}"
            continue
        if base in LOADS:
            address = {r for r in regs_in(",".join(ops[1:])) if r.startswith("R")}
            if branch is not None and not address & loaded:
                found.append((branch, f"{guard or ''}{op} {rest}".strip()))
                if not report_all:
                    return found
            loaded |= span(ops[0], load_width(op))
            continue
        if base in NO_DEST or not ops or not re.fullmatch(r"U?[RP][T0-9]+", ops[0]):
            continue
        dests = span(ops[0], 2 if ".WIDE" in op else 1)
        first_src = 1
        # A predicate right after the destination is a second output (a carry, a compare's pair).
        if len(ops) > 1 and re.fullmatch(r"U?P[T0-9]", ops[1]) and (base in SETP or base not in ("SEL", "FSEL")):
            dests.add(ops[1])
            first_src = 2
        sources = regs_in(",".join(ops[first_src:])) | (regs_in(guard) if guard else set())
        if sources & loaded and base != "FCHK":  # (FCHK: a division's rare slow path, not a check)
            loaded |= dests
        else:
            loaded -= dests
    return found


def main(argv: list[str]) -> int:
    report_all = "--all" in argv
    paths = [a for a in argv if a != "--all"]
    if not paths:
        print(__doc__)
        return 2
    flagged = 0
    for path in paths:
        name, body = None, []
        kernels = []
        with open(path) as f:
            for line in f:
                if "Function :" in line:
                    kernels.append((name, body))
                    name, body = line.split("Function :", 1)[1].strip(), []
                else:
                    body.append(line)
        kernels.append((name, body))
        for name, body in kernels:
            if name is None:
                continue
            found = audit(body, report_all)
            if found:
                flagged += 1
                print(f"{path}: {name}")
                for br, ld in found:
                    print(f"    after {br}\n    load  {ld}")
    print(f"{flagged} kernel(s) flagged", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
