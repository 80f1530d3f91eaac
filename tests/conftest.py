# SPDX-License-Identifier: Apache-2.0
"""Test-suite wiring: GPU tests (marked ``gpu``) skip with a reason on hosts without CUDA.

Mark a whole module with ``pytestmark = pytest.mark.gpu`` (or a single test with
``@pytest.mark.gpu``). Module-level code of a GPU test file must not touch CUDA: it is
collected on GPU-less hosts too.
"""

from __future__ import annotations

import zlib

import pytest
import torch

HAS_GPU = torch.cuda.is_available()
NO_GPU_REASON = "needs a CUDA GPU: torch.cuda.is_available() is False on this host"


def pytest_configure(config: pytest.Config) -> None:
    # Also declared in pyproject.toml; repeating it keeps `pytest tests/...` from another
    # rootdir free of unknown-marker warnings.
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped without one)")


def pytest_collection_modifyitems(config: pytest.Config, items) -> None:
    if HAS_GPU:
        return
    skip = pytest.mark.skip(reason=NO_GPU_REASON)
    for item in items:
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)


@pytest.fixture
def gen(request) -> torch.Generator:
    """A CUDA generator seeded from the test id: fresh data per case, reproducible per case."""
    seed = zlib.crc32(request.node.nodeid.encode())
    return torch.Generator(device="cuda").manual_seed(seed)
