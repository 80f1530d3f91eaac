# SPDX-License-Identifier: Apache-2.0
"""Randomized differential tests: every fuzzer of ``tests/fuzz`` on a fixed set of seeds
(fresh shapes, layouts and data per seed, the same ones every run). ``tools/fuzz_ops.py`` runs
the same fuzzers for as long as asked."""

from __future__ import annotations

import zlib

import pytest

from tests.fuzz.common import Case
from tests.fuzz.registry import all_fuzzers

CASES_PER_FUZZER = 12
FUZZERS = all_fuzzers()


@pytest.mark.gpu
@pytest.mark.parametrize("index", range(CASES_PER_FUZZER))
@pytest.mark.parametrize("name", sorted(FUZZERS))
def test_fuzz(name: str, index: int) -> None:
    import torch

    seed = zlib.crc32(name.encode()) * 1000 + index
    desc = FUZZERS[name](Case(seed))
    torch.cuda.synchronize()
    assert desc  # the fuzzer ran a case (a description names it)
