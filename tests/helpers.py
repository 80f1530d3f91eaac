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
