# SPDX-License-Identifier: Apache-2.0
"""Every fuzzer of ``tests/fuzz``, by name (``family.op``)."""

from __future__ import annotations

import importlib
from typing import Dict

from tests.fuzz.common import Fuzzer

# Modules that define FUZZERS: Dict[str, Fuzzer].
MODULES = ("fuzz_elementwise", "fuzz_quant", "fuzz_copy_topk", "fuzz_gemm", "fuzz_moe")


def all_fuzzers() -> Dict[str, Fuzzer]:
    out: Dict[str, Fuzzer] = {}
    for mod in MODULES:
        m = importlib.import_module(f"tests.fuzz.{mod}")
        for name, fn in m.FUZZERS.items():
            assert name not in out, f"fuzzer {name} defined twice"
            out[name] = fn
    return out
