# SPDX-License-Identifier: Apache-2.0
"""Shared pieces of the randomized differential tests (``tests/fuzz``).

A *fuzzer* is a function ``fuzz(case: Case) -> str``: it draws an op's arguments from
``case.rng`` (shapes, dtypes, flags, layouts), runs the op on fresh random data, checks the
result against the fp32/fp64 references of ``tests/*/ref_*.py`` and returns a one-line
description of what it ran. A wrong result raises ``AssertionError`` (whose message names the
case); an argument combination the API refuses must not be drawn (the fuzzers test results,
the message tests live with each op's tests).

The shapes concentrate on the launchers' path boundaries (a vector more or less, 256/257
rows, powers of two, odd lengths, misaligned starts), where a kernel choice changes, because
that is where a missing tail or a wrong index shows. Every draw is bounded by
``case.max_elems`` so a case runs in milliseconds.
"""

from __future__ import annotations

import contextlib
import os
import random
from dataclasses import dataclass, field
from typing import Callable, Iterator, Optional, Sequence, Tuple

import torch

# Element budget of one case (per tensor the op reads), the driver can raise it.
DEFAULT_MAX_ELEMS = 1 << 22


@dataclass
class Case:
    """One fuzz case: a Python RNG for the draws and a CUDA generator (seeded from it) for
    the data."""

    seed: int
    max_elems: int = DEFAULT_MAX_ELEMS
    rng: random.Random = field(init=False)
    gen: torch.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)
        self.gen = torch.Generator(device="cuda").manual_seed(self.rng.getrandbits(63))

    # -- draws -------------------------------------------------------------------------

    def choice(self, seq: Sequence):
        return seq[self.rng.randrange(len(seq))]

    def coin(self, p: float = 0.5) -> bool:
        return self.rng.random() < p

    def log_int(self, lo: int, hi: int) -> int:
        """An integer in [lo, hi], log-uniform (small values as likely as large ones)."""
        lo = max(lo, 1)
        if hi <= lo:
            return lo
        import math

        v = int(round(math.exp(self.rng.uniform(math.log(lo), math.log(hi + 1)))))
        return min(max(v, lo), hi)

    def near(self, points: Sequence[int], lo: int = 1, hi: int = 1 << 30, spread: int = 1) -> int:
        """One of ``points`` moved by at most ``spread`` (clamped to [lo, hi])."""
        v = self.choice(points) + self.rng.randint(-spread, spread)
        return min(max(v, lo), hi)

    def rows(self, max_rows: int, points: Sequence[int] = (1, 2, 7, 16, 128, 256, 257, 1024, 1025)) -> int:
        """A row count: half the time next to a path boundary, else log-uniform."""
        if self.coin():
            return self.near(points, 1, max_rows)
        return self.log_int(1, max_rows)

    def hidden(self, max_hidden: int, multiple: int = 1,
               points: Sequence[int] = (8, 64, 111, 128, 256, 512, 768, 1024, 1152, 2048, 2304, 3840, 4096, 5376, 7168,
                                        8192, 16384, 18944)) -> int:
        """A row length, a multiple of ``multiple``: a third next to a common size, a third a
        common size exactly, a third log-uniform. The common sizes include rows of a multiple
        of 128 or 256 elements but not of 512 (Gemma's 1152 / 2304 / 3840 / 5376, MLP widths 768
        and 18944), which take kernels of their own in norm.cu and norm_quant.cu."""
        r = self.rng.random()
        if r < 1 / 3:
            v = self.choice(points) + multiple * self.rng.randint(-2, 2)
        elif r < 2 / 3:
            v = self.choice(points)
        else:
            v = self.log_int(1, max_hidden)
        v = max(multiple, (v // multiple) * multiple)
        return min(v, max(multiple, (max_hidden // multiple) * multiple))

    def fit_rows(self, rows: int, per_row: int) -> int:
        """``rows`` lowered so that rows * per_row stays within the element budget."""
        return max(1, min(rows, self.max_elems // max(per_row, 1)))

    # -- data ----------------------------------------------------------------------------

    def randn(self, shape, dtype: torch.dtype, scale: float = 1.0) -> torch.Tensor:
        x = torch.randn(tuple(shape), dtype=torch.float32, device="cuda", generator=self.gen)
        return (x * scale).to(dtype)

    def rand(self, shape, dtype: torch.dtype = torch.float32, lo: float = 0.0, hi: float = 1.0) -> torch.Tensor:
        x = torch.rand(tuple(shape), dtype=torch.float32, device="cuda", generator=self.gen)
        return (lo + (hi - lo) * x).to(dtype)

    def randperm(self, n: int, k: int) -> torch.Tensor:
        """``k`` distinct int64 indices in [0, n), on the GPU."""
        return torch.randperm(n, device="cuda", generator=self.gen)[:k]

    def place(self, t: torch.Tensor, offset: int = 0, row_pad: int = 0) -> torch.Tensor:
        """A copy of ``t`` (values equal) in another layout: ``offset`` elements into a larger
        storage and, for ``row_pad`` > 0, rows ``row_pad`` elements apart beyond the last
        dimension (a strided view; the last dimension stays dense). The padding is filled
        with NaN (floats) or a marker so a read past a row shows."""
        if offset == 0 and row_pad == 0:
            return t.clone()
        last = t.shape[-1] if t.dim() else 1
        rows = t.numel() // max(last, 1) if t.dim() else 1
        stride_row = last + row_pad
        fill = float("nan") if t.dtype.is_floating_point else -1
        base = torch.full((offset + rows * stride_row + 1,), fill, dtype=t.dtype, device=t.device)
        if t.dim() <= 1:
            view = base.as_strided(t.shape, (1,) * t.dim(), offset)
        else:  # dense strides of the shape with its last dim widened to the padded row
            view = base.as_strided(t.shape, dense_strides((*t.shape[:-1], stride_row)), offset)
        view.copy_(t)
        return view


def dense_strides(shape: Sequence[int]) -> Tuple[int, ...]:
    """The strides of a contiguous tensor of ``shape`` (size-0/1 dims counted as 1)."""
    out, acc = [], 1
    for n in reversed(shape):
        out.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(out))


def describe(t: torch.Tensor) -> str:
    """Shape, dtype and layout of ``t`` in a few characters (for case descriptions)."""
    dt = str(t.dtype).removeprefix("torch.")
    extra = ""
    if t.storage_offset():
        extra += f"+{t.storage_offset()}"
    if not t.is_contiguous():
        extra += f" stride={tuple(t.stride())}"
    return f"{dt}{list(t.shape)}{extra}"


Fuzzer = Callable[[Case], str]


def debug_mode() -> bool:
    """SGL_KERNEL_DEBUG is on: out-of-range index values raise instead of being skipped, so the
    fuzzers draw none."""
    v = os.environ.get("SGL_KERNEL_DEBUG", "")
    return v != "" and v[0] != "0"


@contextlib.contextmanager
def env(name: str, value: Optional[str]) -> Iterator[None]:
    """``os.environ[name] = value`` inside the block (nothing when ``value`` is None)."""
    if value is None:
        yield
        return
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
