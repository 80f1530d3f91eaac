# SPDX-License-Identifier: Apache-2.0
"""Assertion helpers shared by the test files."""

from __future__ import annotations

import contextlib
import re

import pytest


@contextlib.contextmanager
def raises_op_error(op: str, arg: str, *fragments: str, exc: type = RuntimeError):
    """Expect ``exc`` whose message follows API.md 1.4: it starts with ``sgl_kernel.<op>: ``
    and then names the offending argument ``arg`` (``arg``, ``arg.shape[...]``, ...); every
    string of ``fragments`` appears in the message's first line."""
    with pytest.raises(exc) as info:
        yield info
    msg = str(info.value)
    prefix = f"sgl_kernel.{op}: "
    assert msg.startswith(prefix), f"message does not start with {prefix!r}: {msg!r}"
    first = msg.splitlines()[0]
    rest = first[len(prefix):]
    assert re.match(rf"{re.escape(arg)}\b", rest), f"message does not name {arg!r} first: {first!r}"
    for fragment in fragments:
        assert fragment in first, f"{fragment!r} not in message {first!r}"


def opcheck_any_dtype(op, args) -> None:
    """``torch.library.opcheck`` that also works with fp8 arguments.

    opcheck's ``test_schema`` step compares tensors with arithmetic that torch does not
    implement for ``float8_e4m3fn`` on CUDA ("mul_cuda not implemented"), so with an fp8
    argument that step is replaced by the check it stands for: the op runs on copies, and
    every argument the schema does not mark as written must come back bitwise unchanged."""
    import torch

    has_fp8 = any(
        isinstance(a, torch.Tensor) and a.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) for a in args
    )
    if not has_fp8:
        torch.library.opcheck(op, args)
        return
    torch.library.opcheck(op, args, test_utils=("test_autograd_registration", "test_faketensor",
                                                 "test_aot_dispatch_dynamic"))
    copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    before = [a.clone() if isinstance(a, torch.Tensor) else a for a in copies]
    op(*copies)
    for arg, old, new in zip(op._schema.arguments, before, copies):
        written = arg.alias_info is not None and arg.alias_info.is_write
        if isinstance(new, torch.Tensor) and not written:
            same = torch.equal(old.contiguous().view(torch.uint8), new.contiguous().view(torch.uint8))
            assert same, f"{op}: argument {arg.name} is not marked written (Tensor!) but changed"


def one_row_view(shape, dtype, offset: int = 0):
    """A CUDA tensor of ``shape`` whose dimensions but the last have stride 0, ``offset``
    elements into its storage: one row of memory standing for a shape too large to allocate,
    for size checks that must refuse it before any kernel runs (a kernel launched on it would
    read and write that one row over and over)."""
    import torch

    assert len(shape) >= 2, "the last dimension is real memory: a 1-D view would not be one row"
    base = torch.empty(shape[-1] + offset, dtype=dtype, device="cuda")
    return base.as_strided(shape, (0,) * (len(shape) - 1) + (1,), offset)


_CUDA_ARRAY_TYPESTR = {"uint8": "|u1", "int32": "<i4", "float16": "<f2", "float32": "<f4"}


class _FakeExtent:
    """A ``__cuda_array_interface__`` over a small allocation that claims a larger shape."""

    def __init__(self, backing, shape, typestr: str, offset_bytes: int):
        self._backing = backing  # kept alive by the tensor torch builds (it holds this object)
        self.__cuda_array_interface__ = {
            "shape": tuple(shape),
            "typestr": typestr,
            "data": (backing.data_ptr() + offset_bytes, False),
            "strides": None,  # C-contiguous
            "version": 2,
        }


def fake_extent(shape, dtype, offset_bytes: int = 0):
    """A contiguous CUDA tensor of ``shape`` (uint8, int32, float16 or float32) whose memory is
    a 4 KiB allocation, ``offset_bytes`` past its start: torch wraps a
    ``__cuda_array_interface__`` without checking its extent. For size checks on a dimension
    that must be dense (where a zero stride would fail an earlier check). A kernel launched on
    it would touch memory that is not there: use it only for calls that a host-side check
    refuses, and where the launcher would refuse the shape too without that check."""
    import torch

    pytest.importorskip("numpy", reason="torch reads __cuda_array_interface__ through numpy")
    backing = torch.empty(4096, dtype=torch.uint8, device="cuda")
    typestr = _CUDA_ARRAY_TYPESTR[str(dtype).removeprefix("torch.")]
    # The device named: torch.as_tensor then keeps the tensor where it is (no copy, which would
    # read the memory that is not there).
    t = torch.as_tensor(_FakeExtent(backing, shape, typestr, offset_bytes), device=backing.device)
    assert t.shape == tuple(shape) and t.dtype == dtype and t.is_contiguous()
    assert t.data_ptr() == backing.data_ptr() + offset_bytes
    return t


def random_bit_pairs(shape, dtype, gen):
    """Two CUDA tensors of a 16-bit dtype holding uniformly random bit patterns (every exponent,
    subnormals, both infinities, NaNs); in half the positions the second one takes the first's
    exponent, so that sums of like magnitude (rounding ties, cancellation) are common too."""
    import torch

    exp_mask = {torch.bfloat16: 0x7F80, torch.float16: 0x7C00}[dtype]
    a, b = (torch.randint(0, 2**16, shape, dtype=torch.int32, device="cuda", generator=gen) for _ in range(2))
    like = torch.randint(0, 2, shape, dtype=torch.bool, device="cuda", generator=gen)
    b = torch.where(like, (b & ~exp_mask) | (a & exp_mask), b)
    return tuple(((t ^ 0x8000) - 0x8000).to(torch.int16).view(dtype) for t in (a, b))


def assert_rounded_sum_bits(got, a, b) -> None:
    """``got`` holds ``a + b`` computed in fp32 and rounded once to its dtype, bit for bit;
    a NaN wherever that is NaN (the payload is not part of the contract)."""
    import torch

    ref = (a.float() + b.float()).to(got.dtype)
    nan = torch.isnan(ref)
    assert torch.equal(torch.isnan(got), nan), "a NaN where the sum is not, or a number where it is NaN"
    ints = {2: torch.int16, 4: torch.int32}[got.element_size()]
    bad = (got.contiguous().view(ints) != ref.view(ints)) & ~nan
    assert not bool(bad.any()), (
        f"{int(bad.sum())} sums differ; first: {a[bad][:3].tolist()} + {b[bad][:3].tolist()} -> "
        f"{got[bad][:3].tolist()}, expected {ref[bad][:3].tolist()}"
    )
