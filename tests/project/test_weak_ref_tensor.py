# SPDX-License-Identifier: Apache-2.0
"""weak_ref_tensor (sgl-kernel's memory helper) on the GPU: the result is a view of the same
memory that does not own it.

Checked on fresh random data: the same address, sizes, strides, dtype and device for every
dtype and layout; bitwise-equal contents; writes through either tensor seen by the other; the
memory goes back to the caching allocator when the owner is deleted while the weak tensor
lives (and stays while an ordinary view lives); a CUDA graph's output read through a weak
reference after replays; bad inputs. CPU rejection, pass-through of non-tensors and the fake
implementation are in test_package.py.
"""

from __future__ import annotations

import pytest
import torch

import sgl_kernel
from tests.helpers import raises_op_error

pytestmark = pytest.mark.gpu

OP = torch.ops.sgl_kernel.weak_ref_tensor.default
DTYPES = (torch.float32, torch.float16, torch.bfloat16, torch.float64, torch.float8_e4m3fn, torch.int8,
          torch.uint8, torch.int32, torch.int64, torch.bool, torch.complex64)


def _random(shape, dtype, gen) -> torch.Tensor:
    if dtype == torch.bool:
        return torch.randint(0, 2, shape, device="cuda", generator=gen).bool()
    if dtype.is_floating_point and dtype.itemsize == 1:
        return torch.randn(shape, device="cuda", generator=gen).to(dtype)
    if dtype.is_floating_point or dtype.is_complex:
        return torch.randn(shape, device="cuda", dtype=dtype, generator=gen)
    info = torch.iinfo(dtype)
    return torch.randint(info.min, info.max, shape, device="cuda", dtype=dtype, generator=gen)


def _as_bytes(t: torch.Tensor) -> torch.Tensor:
    """The elements' bytes, [numel, itemsize] (comparable whatever the dtype, NaN included)."""
    c = t.contiguous()
    if c.dim() == 0:
        c = c.reshape(1)
    return c.view(torch.uint8).reshape(c.numel(), t.element_size())


def _layouts(dtype, gen):
    base = _random((6, 40, 33), dtype, gen)
    return {
        "contiguous": base,
        "offset_slice": base[2:, 3:, 1:],
        "transposed": base.transpose(0, 2),
        "strided_step": base[::2, :, ::3],
        "expanded": base[:, :1, :].expand(6, 7, 33),
        "scalar": base[1, 2, 3],
        "empty": base[:, :0],
        "one_dim": base.reshape(-1)[5:1000],
    }


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("layout", ["contiguous", "offset_slice", "transposed", "strided_step", "expanded",
                                    "scalar", "empty", "one_dim"])
def test_same_memory(dtype, layout):
    gen = torch.Generator(device="cuda").manual_seed(hash((str(dtype), layout)) % 2**31)
    x = _layouts(dtype, gen)[layout]
    for w in (sgl_kernel.weak_ref_tensor(x), OP(x)):
        assert w.data_ptr() == x.data_ptr()
        assert w.shape == x.shape and w.stride() == x.stride()
        assert w.dtype == x.dtype and w.device == x.device
        assert not w.requires_grad
        assert torch.equal(_as_bytes(w), _as_bytes(x))
        # The result's storage starts at the input's first element.
        assert w.storage_offset() == 0


@pytest.mark.parametrize("layout", ["offset_slice", "transposed", "strided_step", "one_dim"])
def test_writes_seen_both_ways(layout):
    gen = torch.Generator(device="cuda").manual_seed(7)
    x = _layouts(torch.float32, gen)[layout]
    w = sgl_kernel.weak_ref_tensor(x)
    new = torch.randn(x.shape, device="cuda", generator=gen)
    w.copy_(new)
    assert torch.equal(x, new)
    newer = torch.randn(x.shape, device="cuda", generator=gen)
    x.copy_(newer)
    assert torch.equal(w, newer)
    # Elements outside the view are untouched: the base's other elements keep their values.
    base = x._base if x._base is not None else x
    assert torch.isfinite(base).all()


def test_does_not_keep_memory_alive():
    torch.cuda.synchronize()
    nbytes = 64 << 20
    x = torch.empty(nbytes // 4, device="cuda", dtype=torch.float32)
    w = sgl_kernel.weak_ref_tensor(x)
    with_owner = torch.cuda.memory_allocated()
    del x
    after = torch.cuda.memory_allocated()
    assert with_owner - after >= nbytes, "the weak reference kept the memory allocated"
    assert w.numel() == nbytes // 4  # still a valid Python object (its memory is not to be read)

    # An ordinary view does keep it: the measurement above can tell the two apart.
    y = torch.empty(nbytes // 4, device="cuda", dtype=torch.float32)
    v = y.view(-1)
    with_owner = torch.cuda.memory_allocated()
    del y
    assert torch.cuda.memory_allocated() == with_owner
    del v


def test_weak_tensor_reads_cuda_graph_output():
    gen = torch.Generator(device="cuda").manual_seed(3)
    static_in = torch.randn(257, 129, device="cuda", generator=gen)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        static_out = static_in * 2 + 1  # warm-up
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = static_in * 2 + 1
    out_ref = sgl_kernel.weak_ref_tensor(static_out)
    assert out_ref.data_ptr() == static_out.data_ptr()
    for _ in range(3):
        new = torch.randn(static_in.shape, device="cuda", generator=gen)
        static_in.copy_(new)
        graph.replay()
        torch.cuda.synchronize()
        torch.testing.assert_close(out_ref, new * 2 + 1, rtol=0, atol=0)


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_second_device():
    x = torch.randn(33, 17, device="cuda:1")[1:]
    w = sgl_kernel.weak_ref_tensor(x)
    assert w.device == x.device and w.data_ptr() == x.data_ptr() and torch.equal(w, x)


def test_bad_inputs():
    x = torch.randn(8, 8, device="cuda")
    # No kernel for sparse layouts (the dispatcher's own error).
    with pytest.raises(NotImplementedError):
        OP(x.to_sparse())
    z = torch.randn(8, 8, device="cuda", dtype=torch.complex64)
    with raises_op_error("weak_ref_tensor", "tensor", "conjugate"):
        OP(z.conj())
    with raises_op_error("weak_ref_tensor", "tensor", "negation"):
        OP(torch._neg_view(x))
    for t in (z.conj(), torch._neg_view(x)):
        with pytest.raises(RuntimeError, match="lazy conjugate or negation"):
            sgl_kernel.weak_ref_tensor(t)
    # Once resolved, the same values work.
    w = OP(z.conj().resolve_conj())
    assert torch.equal(w, z.conj())
