# SPDX-License-Identifier: Apache-2.0
"""The all-reduce family (API.md 2.6) without a GPU: meta_size, the module surface, the
argument checks that need no CUDA tensor, the trivial fake of the mutating op, and
CustomAllreduce on a one-process gloo group (disabled, falls back to torch.distributed).
Schemas and Python signatures are in tests/test_package.py."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist
from torch._subclasses.fake_tensor import FakeTensorMode

import sgl_kernel
from sgl_kernel import allreduce
from tests.helpers import raises_op_error

API_NAMES = [
    "init_custom_ar",
    "dispose",
    "all_reduce",
    "get_graph_buffer_ipc_meta",
    "register_buffer",
    "register_graph_buffers",
    "meta_size",
]


# ---------------------------------------------------------------------------------------
# meta_size


def test_meta_size_positive_multiple_of_256():
    size = sgl_kernel.meta_size()
    assert isinstance(size, int)
    assert size > 0 and size % 256 == 0, size
    assert torch.ops.sgl_kernel.meta_size.default() == size


def test_meta_size_stable():
    assert len({sgl_kernel.meta_size() for _ in range(5)}) == 1


# ---------------------------------------------------------------------------------------
# Module surface


def test_all_names():
    assert sorted(allreduce.__all__) == sorted(API_NAMES)
    namespace: dict = {}
    exec("from sgl_kernel.allreduce import *", namespace)  # noqa: S102
    assert sorted(k for k in namespace if not k.startswith("__")) == sorted(API_NAMES)
    for name in API_NAMES:
        assert getattr(sgl_kernel, name) is getattr(allreduce, name)


def test_mscclpp_is_out_of_scope():
    """API.md 2.6: the mscclpp all-reduce is neither registered nor exported."""
    for name in ("mscclpp_generate_unique_id", "mscclpp_init_context", "mscclpp_allreduce"):
        assert not hasattr(allreduce, name), name
        assert not hasattr(sgl_kernel, name), name
        assert f"sgl_kernel::{name}" not in torch._C._dispatch_get_all_op_names(), name


def test_family_tables():
    assert allreduce.FAMILY == "allreduce"
    assert set(allreduce.OPS) == set(API_NAMES)
    assert allreduce.OPS["meta_size"] == 0  # works without a GPU
    assert all(v == 80 for k, v in allreduce.OPS.items() if k != "meta_size")
    assert set(allreduce.self_checks()) <= set(allreduce.OPS)


def test_custom_allreduce_is_not_exported():
    """CustomAllreduce is a project addition: in the module, not in the sgl-kernel surface."""
    assert "CustomAllreduce" not in allreduce.__all__
    assert not hasattr(sgl_kernel, "CustomAllreduce")
    assert callable(allreduce.CustomAllreduce.all_reduce)


# ---------------------------------------------------------------------------------------
# Argument checks that need no CUDA tensor (the rest are in test_allreduce_single_gpu.py)


def test_init_custom_ar_cpu_rank_data():
    rank_data = torch.empty(8 << 20, dtype=torch.uint8)
    with raises_op_error("init_custom_ar", "rank_data", "CUDA tensor"):
        sgl_kernel.init_custom_ar([1 << 20, 2 << 20], rank_data, 0, True)
    with raises_op_error("init_custom_ar", "rank_data", "CUDA tensor"):
        torch.ops.sgl_kernel.init_custom_ar.default([1 << 20, 2 << 20], rank_data, 0, True)


def test_init_custom_ar_bad_world_size_without_gpu():
    """Without a CUDA rank_data the first violation reported may be rank_data: the message
    still starts with the op's prefix (the exact world-size message is checked on a GPU)."""
    with pytest.raises(RuntimeError, match=r"^sgl_kernel\.init_custom_ar: "):
        sgl_kernel.init_custom_ar([1 << 20, 2 << 20, 3 << 20], torch.empty(1 << 20, dtype=torch.uint8), 0, True)


def test_all_reduce_cpu_inp():
    x = torch.ones(64)
    with raises_op_error("all_reduce", "inp", "CUDA tensor"):
        sgl_kernel.all_reduce(1, x, torch.empty_like(x), 0, 0)
    with raises_op_error("all_reduce", "inp", "CUDA tensor"):
        torch.ops.sgl_kernel.all_reduce.default(1, x, torch.empty_like(x), 0, 0)


@pytest.mark.parametrize("fa", [0, 123456789, -1])
def test_unknown_handle(fa):
    """Handle bookkeeping needs no GPU: an unknown handle is refused by every op that takes one."""
    for op, args in (
        ("dispose", (fa,)),
        ("get_graph_buffer_ipc_meta", (fa,)),
        ("register_buffer", (fa, [1 << 20, 2 << 20])),
        ("register_graph_buffers", (fa, [[], []], [[], []])),
    ):
        with pytest.raises(RuntimeError, match=rf"^sgl_kernel\.{op}: .*disposed handle"):
            getattr(sgl_kernel, op)(*args)


def test_fake_all_reduce():
    """The mutating op gets PyTorch's trivial fake under FakeTensorMode (DESIGN.md 7)."""
    with FakeTensorMode():
        x = torch.empty(1024, dtype=torch.bfloat16, device="cuda")
        out = torch.empty_like(x)
        assert torch.ops.sgl_kernel.all_reduce.default(1, x, out, 0, 0) is None


# ---------------------------------------------------------------------------------------
# CustomAllreduce on a one-process gloo group


@pytest.fixture
def gloo_world_1(tmp_path):
    if not dist.is_available():
        pytest.skip("torch.distributed is not available in this torch build")
    if dist.is_initialized():
        pytest.skip("a default process group already exists in this process")
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        yield dist.group.WORLD
    finally:
        dist.destroy_process_group()


def test_custom_allreduce_world_1_is_disabled(gloo_world_1):
    comm = allreduce.CustomAllreduce(gloo_world_1)
    try:
        assert comm.disabled
        assert "world size 1" in comm.reason, comm.reason
        assert comm.world_size == 1 and comm.rank == 0
        assert comm.max_size == 8 << 20 and comm.nccl_above_bytes == 8 << 20
        x = torch.randn(4, 8)
        assert not comm.should_custom_ar(x)
        # The fallback: torch.distributed.all_reduce (gloo) of a copy; the input is untouched.
        before = x.clone()
        y = comm.all_reduce(x)
        assert y is not x and torch.equal(y, before) and torch.equal(x, before)
        out = torch.empty(4, 8)
        assert comm.all_reduce(x, out) is out and torch.equal(out, before)
        # A non-contiguous input also falls back (to a contiguous copy).
        z = comm.all_reduce(x.t())
        assert torch.equal(z, before.t()) and z.is_contiguous()
    finally:
        comm.close()
    comm.close()  # idempotent
    assert comm.disabled


def test_custom_allreduce_default_group(gloo_world_1):
    comm = allreduce.CustomAllreduce(max_size=1 << 20, nccl_above_bytes=4096)
    assert comm.disabled and comm.max_size == 1 << 20 and comm.nccl_above_bytes == 4096
    assert "CustomAllreduce(" in repr(comm)
    del comm  # __del__ closes it


@pytest.mark.parametrize("max_size", [0, -16, 100])
def test_custom_allreduce_bad_max_size(gloo_world_1, max_size):
    with pytest.raises(ValueError, match="max_size"):
        allreduce.CustomAllreduce(gloo_world_1, max_size=max_size)


def test_custom_allreduce_needs_torch_distributed():
    if dist.is_available() and dist.is_initialized():
        pytest.skip("a default process group exists in this process")
    with pytest.raises(RuntimeError, match="torch.distributed is not initialized"):
        allreduce.CustomAllreduce()
