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
