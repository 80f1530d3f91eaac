# SPDX-License-Identifier: Apache-2.0
"""Small helpers of the sgl-kernel API (API.md section 1.1)."""

from __future__ import annotations

import functools
from typing import Dict, Optional, Tuple, Union

import torch

__all__ = [
    "is_arch_support_pdl",
    "is_hopper_or_later_arch",
    "get_cuda_stream",
    "_get_cache_buf",
    "_to_tensor_scalar_tuple",
]


@functools.lru_cache(maxsize=1)
def _sm90_or_newer() -> bool:
    if torch.version.cuda is None or not torch.cuda.is_available():
        return False
    return torch.cuda.get_device_capability()[0] >= 9


def _cached_constant(fn):
    """Expose the cache of ``_sm90_or_newer`` (``cache_clear``, ``cache_info``) on ``fn`` and
    mark ``fn`` constant for torch.compile: Dynamo calls it once while tracing and keeps the
    answer. (Dynamo traced through an ``lru_cache`` wrapper itself, warning once per call site,
    in every model that compiled an op with ``enable_pdl=None``.)"""
    fn.cache_clear = _sm90_or_newer.cache_clear
    fn.cache_info = _sm90_or_newer.cache_info
    return torch.compiler.assume_constant_result(fn)


@_cached_constant
def is_arch_support_pdl() -> bool:
    """Whether programmatic dependent launch is available: a CUDA device of sm90 or newer
    (cached)."""
    return _sm90_or_newer()


@_cached_constant
def is_hopper_or_later_arch() -> bool:
    """Whether the current CUDA device is Hopper (sm90) or newer (cached)."""
    return _sm90_or_newer()


def get_cuda_stream() -> int:
    """The raw ``cudaStream_t`` of ``torch.cuda.current_stream()``."""
    return torch.cuda.current_stream().cuda_stream


_cache_buf: Dict[Tuple[str, torch.device], torch.Tensor] = {}


def _get_cache_buf(name: str, bytes: int, device: torch.device) -> torch.Tensor:
    """A uint8 workspace of at least ``bytes`` bytes, cached per ``(name, device)``."""
    key = (name, torch.device(device))
    buf = _cache_buf.get(key)
    if buf is None or buf.numel() < bytes:
        buf = torch.empty(bytes, dtype=torch.uint8, device=device)
        _cache_buf[key] = buf
    return buf


def _to_tensor_scalar_tuple(x: Union[torch.Tensor, float, int]) -> Tuple[Optional[torch.Tensor], Union[float, int]]:
    """``(x, 0)`` for a tensor, ``(None, x)`` for a Python number."""
    if isinstance(x, torch.Tensor):
        return (x, 0)
    return (None, x)


def _resolve_pdl(enable_pdl: Optional[bool]) -> bool:
    """``enable_pdl=None`` means auto (API.md 1.2)."""
    return is_arch_support_pdl() if enable_pdl is None else bool(enable_pdl)


def _assert(cond: bool, msg: str) -> None:
    """AssertionError where sgl-kernel's wrapper asserts (API.md 1.4); survives ``python -O``."""
    if not cond:
        raise AssertionError(msg)
