# SPDX-License-Identifier: Apache-2.0
"""Memory ops of the sgl-kernel API: set_kv_buffer_kernel (API.md 3.2), built on the
project family's store_kv_cache kernel, and weak_ref_tensor (API.md section 4's list; host
code, no kernel)."""

from __future__ import annotations

from typing import Any, Callable, Dict

import torch

__all__ = ["set_kv_buffer_kernel", "weak_ref_tensor"]

FAMILY = "project"
# op name -> lowest arch with a kernel (API.md)
OPS = {"store_kv_cache": 80, "weak_ref_tensor": 80}

_store_kv_cache = torch.ops.sgl_kernel.store_kv_cache.default
_weak_ref_tensor = torch.ops.sgl_kernel.weak_ref_tensor.default


@torch.library.register_fake("sgl_kernel::weak_ref_tensor")
def _weak_ref_tensor_fake(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.new_empty_strided(tensor.shape, tensor.stride())

# In the op's message when SGL_KERNEL_DEBUG=1 found an out-of-range location: the wrapper
# re-raises that error instead of falling back, since PyTorch indexing with the same
# location would wrap a negative one or hit a device-side assert.
_DEBUG_MARKER = "(SGL_KERNEL_DEBUG=1)"


def set_kv_buffer_kernel(
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    loc: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    fallback: bool = False,
) -> None:
    r"""Store rows into a KV cache: ``k_cache[loc[i]] = k[i]``, ``v_cache[loc[i]] = v[i]``.

    Calls the ``store_kv_cache`` op; when it raises ``RuntimeError`` (an unsupported input:
    a row size that is not a multiple of 128 bytes, CPU tensors, a layout it does not take),
    or when ``fallback=True``, does ``k_cache[loc] = k; v_cache[loc] = v`` with PyTorch
    indexing instead.

    The op copies bytes (any dtype). Duplicate locations: one of the writes wins. A location
    outside ``[0, k_cache.shape[0])`` is skipped (its row is not written; nothing outside the
    caches is touched); with ``SGL_KERNEL_DEBUG=1`` it raises ``RuntimeError`` instead, which
    this wrapper passes on rather than falling back (the op syncs then, and skips the check
    while a CUDA graph is being captured).

    Parameters
    ----------
    k_cache, v_cache : torch.Tensor
        ``[N, ...]``, viewable as ``[N, row]``: elements inside a row contiguous, the row
        stride free (e.g. the two halves of a ``[N, 2, H, D]`` pool). Same dtype, sizes and
        strides. Written.
    loc : torch.Tensor
        ``[n]``, int32 or int64, contiguous.
    k, v : torch.Tensor
        ``[n, ...]`` with rows of the caches' row size, same dtype as the caches; rows
        contiguous, row stride free; same sizes and strides.
    fallback : bool
        Use PyTorch indexing without trying the op.

    Notes
    -----
    Arch: sm80+; row size in bytes a multiple of 128. On sm90+ the kernel uses programmatic
    dependent launch. CUDA-graph capturable.
    """
    if not fallback:
        try:
            _store_kv_cache(k_cache, v_cache, loc, k, v)
            return
        except RuntimeError as exc:
            if _DEBUG_MARKER in str(exc):
                raise
    k_cache[loc] = k
    v_cache[loc] = v


def weak_ref_tensor(tensor: Any) -> Any:
    r"""A tensor over ``tensor``'s memory that does not keep that memory alive.

    The result has the same data pointer, sizes, strides, dtype and device as ``tensor``
    (writes through either are seen by the other), but its storage is not an owner: once every
    owning reference to the memory is gone, the memory goes back to the caching allocator
    (and may be reused) even while the result is alive. CUDA-graph runners use it to keep the
    addresses of captured outputs without holding their memory. Anything other than a
    ``torch.Tensor`` is returned unchanged.

    Parameters
    ----------
    tensor : torch.Tensor or any
        A strided CUDA tensor of any dtype, shape, strides and storage offset (not quantized,
        no lazy conjugate or negation bit); other objects pass through.

    Returns
    -------
    torch.Tensor or any
        The non-owning tensor, or ``tensor`` itself.

    Notes
    -----
    Reading or writing the result after the memory's owners are gone is a use after free,
    as with any raw pointer. The op schema (``weak_ref_tensor(Tensor tensor) -> Tensor``, as
    sgl-kernel's) does not declare that the result aliases the input, so ``torch.compile``
    and ``opcheck`` treat it as a new tensor. No kernel runs; no GPU synchronization.
    """
    if isinstance(tensor, torch.Tensor):
        return _weak_ref_tensor(tensor)
    return tensor


def self_checks() -> Dict[str, Callable[[], None]]:
    def check_store_kv_cache() -> None:
        pool = torch.randn(64, 2, 8, 128, device="cuda", dtype=torch.bfloat16)
        k_cache, v_cache = pool[:, 0], pool[:, 1]
        expected = pool.clone()
        loc = torch.randperm(64, device="cuda")[:13]
        k = torch.randn(13, 8, 128, device="cuda", dtype=torch.bfloat16)
        v = torch.randn(13, 8, 128, device="cuda", dtype=torch.bfloat16)
        set_kv_buffer_kernel(k_cache, v_cache, loc, k, v)
        expected[loc, 0] = k
        expected[loc, 1] = v
        torch.testing.assert_close(pool, expected, rtol=0, atol=0)

    def check_weak_ref_tensor() -> None:
        x = torch.randn(8, 33, device="cuda")[:, 1:]
        w = weak_ref_tensor(x)
        if (w.data_ptr(), w.shape, w.stride(), w.dtype) != (x.data_ptr(), x.shape, x.stride(), x.dtype):
            raise AssertionError("weak_ref_tensor: not a view of the same memory")
        w.fill_(3.0)
        torch.testing.assert_close(x, torch.full_like(x, 3.0), rtol=0, atol=0)

    return {"store_kv_cache": check_store_kv_cache, "weak_ref_tensor": check_weak_ref_tensor}
