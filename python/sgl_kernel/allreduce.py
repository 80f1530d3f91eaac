# SPDX-License-Identifier: Apache-2.0
"""All-reduce family (API.md 2.6): single-node tensor-parallel all-reduce over CUDA IPC
(peer-mapped) buffers, for 2, 4, 6 or 8 ranks.

Every rank owns a *signal buffer* of ``meta_size() + max_size`` bytes (zeroed before
:func:`init_custom_ar`): its first ``meta_size()`` bytes (16 MiB + 6.5 KiB) hold the barrier
flags and the region into which peers push small messages; the rest is the scratch the
two-shot algorithm writes (up to ``ceil(bytes / world) + 16`` bytes per rank). Each rank maps every peer's signal buffer into its own address space and passes the
``world`` addresses to :func:`init_custom_ar`, which returns an opaque handle ``fa``. An
eager :func:`all_reduce` first copies ``inp`` into a *registered* staging buffer (one per
rank, registered on every rank with :func:`register_buffer`); under CUDA-graph capture the
input itself is recorded and, after capture, registered on every rank through
:func:`get_graph_buffer_ipc_meta` and :func:`register_graph_buffers`.

The seven functions are thin wrappers of the ``torch.ops.sgl_kernel`` ops. The module also
holds :class:`CustomAllreduce` (not part of the sgl-kernel API, so not in ``__all__``): the
communicator that does all of the above from a ``torch.distributed`` process group.

Environment variables, read by :func:`init_custom_ar` (set them before creating a handle):

- ``SGL_KERNEL_AR_TIMEOUT_MS`` (default 60000; 0 waits forever): how long a kernel block
  waits for a peer at a barrier (or for a peer's pushed data) before giving up. A timed-out
  handle is unusable: every later :func:`all_reduce` on it raises a ``RuntimeError`` that
  says "timed out". Dispose it; a new handle needs freshly zeroed signal buffers (peers may
  have left data in the old ones).
- ``SGL_KERNEL_AR_MAX_BLOCKS`` (default 64, 1..64): CUDA blocks per all-reduce kernel (at most;
  a message uses one block per 8 KiB, or per 8 KiB of its share at two-shot).
- ``SGL_KERNEL_AR_ALGO``: ``auto`` (default), ``push``, ``oneshot`` or ``twoshot``.

  - ``push``: every rank stores its input into each peer's header, where the data is its
    own arrival flag (no barrier): one trip over the links. Up to 4 MiB at 2 ranks,
    2 MiB at 4, 1365.25 KiB at 6, 1 MiB at 8 (larger messages take one-shot when forced).
    The 32-bit word 0xffffffff, a NaN in every dtype (two NaNs for fp16 / bf16), is summed
    as 0x7fffffff, another NaN: results are the same numbers as the other algorithms'.
  - ``oneshot``: a barrier, every rank reads the whole message from every peer, a barrier.
  - ``twoshot``: reduce-scatter then all-gather through the peers' scratch; each rank reads
    2 (W - 1) / W of the message instead of W - 1 times it.
  - ``auto``: push up to 4 MiB at 2 ranks, 1 MiB at 4, 341.25 KiB at 6 and 256 KiB at 8;
    above that one-shot at 2 ranks (or without full NVLink), two-shot at 4 ranks and from
    256 KiB at 6 and 8.
"""

from __future__ import annotations

import contextlib
import ctypes
import glob
import os
import site
from typing import Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

import torch

__all__ = [
    "init_custom_ar",
    "dispose",
    "all_reduce",
    "get_graph_buffer_ipc_meta",
    "register_buffer",
    "register_graph_buffers",
    "meta_size",
]

FAMILY = "allreduce"
# op name -> lowest arch with a kernel (API.md); 0: works without a GPU
OPS = {
    "init_custom_ar": 80,
    "dispose": 80,
    "all_reduce": 80,
    "get_graph_buffer_ipc_meta": 80,
    "register_buffer": 80,
    "register_graph_buffers": 80,
    "meta_size": 0,
}

# What all_reduce reduces.
_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# The scratch every caller gives init_custom_ar (API.md 2.6: "callers use 8 MiB").
RANK_DATA_BYTES = 8 << 20
_IPC_HANDLE_BYTES = 64  # sizeof(cudaIpcMemHandle_t)


# The bindings are compiled into every build (a build without kernels for the GPU raises at
# call time), so the ops resolve at import like every family's.
_init_custom_ar = torch.ops.sgl_kernel.init_custom_ar.default
_dispose = torch.ops.sgl_kernel.dispose.default
_all_reduce = torch.ops.sgl_kernel.all_reduce.default
_get_graph_buffer_ipc_meta = torch.ops.sgl_kernel.get_graph_buffer_ipc_meta.default
_register_buffer = torch.ops.sgl_kernel.register_buffer.default
_register_graph_buffers = torch.ops.sgl_kernel.register_graph_buffers.default
_meta_size = torch.ops.sgl_kernel.meta_size.default


# ---------------------------------------------------------------------------------------
# The API (thin wrappers, positional op calls)


def init_custom_ar(ipc_tensors: List[int], rank_data: torch.Tensor, rank: int, full_nvlink: bool) -> int:
    r"""Create a custom all-reduce handle for rank ``rank`` of a group of ``len(ipc_tensors)``.

    Parameters
    ----------
    ipc_tensors : List[int]
        One device address per rank: ``ipc_tensors[r]`` is rank ``r``'s signal buffer of
        ``meta_size() + max_size`` bytes as mapped in this process (this rank's own buffer
        at ``ipc_tensors[rank]``), zeroed before the call. ``max_size`` must be at least the
        byte size of the largest :func:`all_reduce` input. World size
        ``len(ipc_tensors)`` must be 2, 4, 6 or 8.
    rank_data : torch.Tensor
        Contiguous CUDA uint8 scratch (callers use 8 MiB: 131072 tables of 64 bytes) for
        the device-side pointer tables of registered buffers and recorded graph inputs. Written by later calls; keep it
        alive until :func:`dispose`.
    rank : int
        This rank, in ``[0, world)``.
    full_nvlink : bool
        Whether all GPUs of the group are connected pairwise by NVLink. ``False`` is only
        valid with world size 2.

    Returns
    -------
    int
        An opaque non-zero handle ``fa``. Release it with :func:`dispose`.

    Notes
    -----
    Reads ``SGL_KERNEL_AR_TIMEOUT_MS``, ``SGL_KERNEL_AR_MAX_BLOCKS`` and
    ``SGL_KERNEL_AR_ALGO`` (module docstring). Every violation above raises
    ``RuntimeError`` starting with ``sgl_kernel.init_custom_ar: ``. Arch: sm80+, with
    peer-to-peer access between all GPUs of the group (NVLink or PCIe P2P).
    """
    return _init_custom_ar(ipc_tensors, rank_data, rank, full_nvlink)


def dispose(fa: int) -> None:
    r"""Release handle ``fa`` and every IPC mapping it opened (graph buffers of peers).

    Works on a handle made unusable by a timeout or an unregistered graph buffer. The
    signal, staging and ``rank_data`` buffers belong to the caller, who frees them after
    this call (once no kernel using them is in flight).
    """
    _dispose(fa)


def all_reduce(fa: int, inp: torch.Tensor, out: torch.Tensor, reg_buffer: int, reg_buffer_sz_bytes: int) -> None:
    r"""``out = sum over ranks of inp``, elementwise, on every rank of handle ``fa``'s group.

    Every rank makes the same calls in the same order, with identical sizes; the kernels of
    all ranks wait for each other, so the calls of all ranks must be able to run at the same
    time. Calls on one handle must be stream-ordered (one stream, or graphs replayed in
    order).

    Parameters
    ----------
    fa : int
        A handle from :func:`init_custom_ar`.
    inp : torch.Tensor
        Any shape, fp32/fp16/bf16, CUDA, contiguous, byte size a multiple of 16 and at most
        the group's ``max_size``. Not written.
    out : torch.Tensor
        Same shape (number of elements) and dtype as ``inp``, contiguous. Written. Must not
        alias ``inp`` when ``reg_buffer == 0``.
    reg_buffer : int
        Address (as mapped here) of this rank's copy of a buffer registered with
        :func:`register_buffer`: ``inp`` is first copied into it (the eager path). ``0``:
        ``inp`` itself must be registered, or it is recorded while a CUDA graph is being
        captured (the graph path; see :func:`get_graph_buffer_ipc_meta`).
    reg_buffer_sz_bytes : int
        Size of ``reg_buffer`` in bytes, at least ``inp``'s (ignored when ``reg_buffer == 0``).

    Notes
    -----
    Summation in fp32 in the fixed order rank 0, 1, ..., W-1, rounded once to the output
    dtype: every rank gets bitwise-identical results. Empty tensors are a no-op.

    Errors (``RuntimeError`` starting with ``sgl_kernel.all_reduce: ``): a tensor that is not
    CUDA, not contiguous, of another dtype, or whose byte size is not a multiple of 16;
    ``out`` of another dtype or number of elements, or aliasing ``inp`` with
    ``reg_buffer == 0``; ``reg_buffer`` not registered or smaller than ``inp``; an
    unregistered ``inp`` with ``reg_buffer == 0`` outside graph capture ("not a registered
    buffer"); an unknown or disposed handle. A kernel that waited longer than
    ``SGL_KERNEL_AR_TIMEOUT_MS`` for a peer, or a replayed graph whose recorded input was
    never registered with :func:`register_graph_buffers`, leaves the handle unusable: the
    next call raises (a message containing "timed out" or "register_graph_buffers"), and so
    does every later one; :func:`dispose` still works.

    Arch: sm80+. CUDA-graph capturable (with ``reg_buffer == 0``).
    """
    _all_reduce(fa, inp, out, reg_buffer, reg_buffer_sz_bytes)


def get_graph_buffer_ipc_meta(fa: int) -> Tuple[List[int], List[int]]:
    r"""The buffers recorded while CUDA graphs were captured with ``reg_buffer == 0``.

    Returns
    -------
    Tuple[List[int], List[int]]
        ``(handles, offsets)``: the 64-byte ``cudaIpcMemHandle_t`` of each recorded buffer's
        allocation, concatenated in recording order as byte values (ints 0..255,
        ``64 * len(offsets)`` of them), and each buffer's byte offset from the base of its
        allocation. All-gather both over the group and pass them to
        :func:`register_graph_buffers` on every rank.
    """
    handles, offsets = _get_graph_buffer_ipc_meta(fa)
    return list(handles), list(offsets)


def register_buffer(fa: int, fake_ipc_ptrs: List[int]) -> None:
    r"""Register one buffer present on all ranks: ``fake_ipc_ptrs[r]`` is rank ``r``'s copy
    as mapped in this process (this rank's own at ``fake_ipc_ptrs[rank]``).

    Used for the eager staging buffer that :func:`all_reduce` copies ``inp`` into when its
    ``reg_buffer`` is this rank's address. Writes the pointer table into ``rank_data``.
    """
    _register_buffer(fa, fake_ipc_ptrs)


def register_graph_buffers(fa: int, handles: List[List[int]], offsets: List[List[int]]) -> None:
    r"""Register the buffers recorded during graph capture, on every rank.

    Parameters
    ----------
    fa : int
        The handle the graphs were captured with.
    handles, offsets : List[List[int]]
        ``handles[r]``, ``offsets[r]``: rank ``r``'s :func:`get_graph_buffer_ipc_meta`
        output, for every rank ``r`` (all-gathered). Opens the peers' allocations (kept open
        until :func:`dispose`); handles this process produced itself map to the local
        pointer, so all "ranks" may also live in one process.

    Notes
    -----
    After this call a recorded input is also a registered buffer for eager calls with
    ``reg_buffer == 0`` (the latest registration of an address wins). Every capture records
    its inputs afresh, even at an address registered before, so a graph never uses another
    graph's pointer table; a graph must not outlive the buffers it reads (as any graph).
    """
    _register_graph_buffers(fa, handles, offsets)


def meta_size() -> int:
    r"""Size in bytes of the per-rank signal header (a positive multiple of 256).

    A rank's signal buffer is ``meta_size() + max_size`` bytes. Works without a GPU.
    """
    return int(_meta_size())


# ---------------------------------------------------------------------------------------
# The CUDA runtime through ctypes: cudaMalloc'ed buffers and their IPC handles.


class _IpcMemHandle(ctypes.Structure):
    _fields_ = [("reserved", ctypes.c_char * _IPC_HANDLE_BYTES)]


_CUDA_IPC_MEM_LAZY_ENABLE_PEER_ACCESS = 1

_CUDART_FUNCTIONS = {
    "cudaGetErrorString": (ctypes.c_char_p, [ctypes.c_int]),
    "cudaGetDevice": (ctypes.c_int, [ctypes.POINTER(ctypes.c_int)]),
    "cudaSetDevice": (ctypes.c_int, [ctypes.c_int]),
    "cudaDeviceSynchronize": (ctypes.c_int, []),
    "cudaMalloc": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]),
    "cudaFree": (ctypes.c_int, [ctypes.c_void_p]),
    "cudaMemset": (ctypes.c_int, [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]),
    "cudaIpcGetMemHandle": (ctypes.c_int, [ctypes.POINTER(_IpcMemHandle), ctypes.c_void_p]),
    "cudaIpcOpenMemHandle": (ctypes.c_int, [ctypes.POINTER(ctypes.c_void_p), _IpcMemHandle, ctypes.c_uint]),
    "cudaIpcCloseMemHandle": (ctypes.c_int, [ctypes.c_void_p]),
}


def _cudart_candidates() -> List[str]:
    """Names and paths to try, in order: the sonames (already loaded by torch, or on the
    loader path), then the copies shipped in torch/lib and in the nvidia pip packages."""
    names = ["libcudart.so.13", "libcudart.so.12"]
    torch_dir = os.path.dirname(torch.__file__)
    roots = [os.path.dirname(torch_dir)]
    try:
        roots += site.getsitepackages()
    except AttributeError:  # some virtualenv flavours
        pass
    dirs = [os.path.join(torch_dir, "lib")]
    for root in dict.fromkeys(roots):
        dirs += [os.path.join(root, "nvidia", "cu13", "lib"), os.path.join(root, "nvidia", "cuda_runtime", "lib")]
    for d in dirs:
        names += sorted(glob.glob(os.path.join(d, "libcudart.so*")), reverse=True)
    return list(dict.fromkeys(names))


class _CudaRT:
    """The few CUDA runtime calls CustomAllreduce needs; each return code is checked."""

    def __init__(self) -> None:
        tried = []
        lib = None
        for name in _cudart_candidates():
            try:
                lib = ctypes.CDLL(name)
                break
            except OSError as exc:
                tried.append(f"{name} ({exc})")
        if lib is None:
            raise RuntimeError("sgl_kernel.CustomAllreduce: cannot load the CUDA runtime; tried " + "; ".join(tried))
        self.path = name
        self._lib = lib
        self._fn = {}
        for fname, (restype, argtypes) in _CUDART_FUNCTIONS.items():
            fn = getattr(lib, fname)
            fn.restype = restype
            fn.argtypes = argtypes
            self._fn[fname] = fn

    def error_string(self, code: int) -> str:
        msg = self._fn["cudaGetErrorString"](code)
        return msg.decode(errors="replace") if msg else f"unknown CUDA error {code}"

    def _call(self, fname: str, *args) -> None:
        code = self._fn[fname](*args)
        if code != 0:
            raise RuntimeError(f"sgl_kernel.CustomAllreduce: {fname} failed: {self.error_string(code)} (error {code})")

    def get_device(self) -> int:
        dev = ctypes.c_int(-1)
        self._call("cudaGetDevice", ctypes.byref(dev))
        return dev.value

    def set_device(self, index: int) -> None:
        self._call("cudaSetDevice", index)

    def synchronize(self) -> None:
        self._call("cudaDeviceSynchronize")

    def malloc(self, nbytes: int) -> int:
        ptr = ctypes.c_void_p()
        self._call("cudaMalloc", ctypes.byref(ptr), nbytes)
        return int(ptr.value)

    def free(self, ptr: int) -> None:
        self._call("cudaFree", ctypes.c_void_p(ptr))

    def memset(self, ptr: int, value: int, nbytes: int) -> None:
        self._call("cudaMemset", ctypes.c_void_p(ptr), value, nbytes)

    def ipc_get_mem_handle(self, ptr: int) -> bytes:
        handle = _IpcMemHandle()
        self._call("cudaIpcGetMemHandle", ctypes.byref(handle), ctypes.c_void_p(ptr))
        return bytes(handle)

    def ipc_open_mem_handle(self, handle: bytes) -> int:
        ptr = ctypes.c_void_p()
        h = _IpcMemHandle.from_buffer_copy(handle)
        self._call("cudaIpcOpenMemHandle", ctypes.byref(ptr), h, _CUDA_IPC_MEM_LAZY_ENABLE_PEER_ACCESS)
        return int(ptr.value)

    def ipc_close_mem_handle(self, ptr: int) -> None:
        self._call("cudaIpcCloseMemHandle", ctypes.c_void_p(ptr))


_cudart_instance: Optional[_CudaRT] = None


def _cudart() -> _CudaRT:
    global _cudart_instance
    if _cudart_instance is None:
        _cudart_instance = _CudaRT()
    return _cudart_instance


def _detect_full_nvlink(uuids: Sequence[str]) -> Tuple[bool, str]:
    """Whether every pair of distinct GPUs (by UUID) is NVLink-connected, asked of NVML through
    pynvml, and why not. False when pynvml is not importable or NVML cannot answer."""
    try:
        import pynvml
    except ImportError:
        return False, "pynvml is not importable, so NVLink cannot be detected"

    def handle_of(uuid: str):
        name = uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}"
        try:
            return pynvml.nvmlDeviceGetHandleByUUID(name)
        except (TypeError, ctypes.ArgumentError):  # older pynvml: bytes only
            return pynvml.nvmlDeviceGetHandleByUUID(name.encode())

    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return False, f"NVML did not initialise ({_short(exc)})"
    try:
        distinct = list(dict.fromkeys(uuids))
        handles = [handle_of(u) for u in distinct]
        for i in range(len(handles)):
            for j in range(i + 1, len(handles)):
                status = pynvml.nvmlDeviceGetP2PStatus(handles[i], handles[j], pynvml.NVML_P2P_CAPS_INDEX_NVLINK)
                if status != pynvml.NVML_P2P_STATUS_OK:
                    return False, f"NVML reports no NVLink between GPUs {distinct[i]} and {distinct[j]}"
        return True, ""
    except Exception as exc:
        return False, f"NVML could not tell ({_short(exc)})"
    finally:
        try:
            pynvml.nvmlShutdown()
        except Exception:
            pass


def _short(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"


# ---------------------------------------------------------------------------------------
# CustomAllreduce: the communicator


class CustomAllreduce:
    r"""Custom all-reduce for the ranks of a ``torch.distributed`` process group, one GPU
    (or a share of one) per rank, with a ``torch.distributed.all_reduce`` fallback.

    Construction is collective (every rank of ``group`` constructs it, in the same order
    as its other collectives). Each rank ``cudaMalloc``\ s a zeroed signal buffer of
    ``meta_size() + max_size`` bytes and a staging buffer of ``max_size`` bytes, exchanges
    their CUDA IPC handles over the group (``all_gather_object``), opens the peers' buffers
    and creates the handle (:func:`init_custom_ar` with an 8 MiB ``rank_data``, then
    :func:`register_buffer` with the staging buffers). Every step's outcome is exchanged, so
    either every rank enables the custom path or none does.

    Parameters
    ----------
    group : Optional[torch.distributed.ProcessGroup]
        The group (default: the default group). Its backend only carries the setup
        exchanges and the fallback all-reduce: NCCL, or gloo for ranks on one host.
    device : int, str or torch.device, optional
        This rank's CUDA device (default: the current one).
    max_size : int
        Largest message in bytes for the custom path (default 8 MiB); a positive multiple
        of 16.
    full_nvlink : Optional[bool]
        Whether the GPUs are NVLink-connected pairwise. ``None``: ask NVML (pynvml) for
        every pair of distinct GPUs, False when it cannot tell. World sizes above 2 need it.
    nccl_above_bytes : Optional[int]
        Messages larger than this go to ``torch.distributed`` even when they fit
        ``max_size`` (``None``: ``max_size``).

    Attributes
    ----------
    disabled : bool
        True when the custom path is off (then :meth:`all_reduce` always falls back).
    reason : str
        Why it is disabled ("" when enabled).
    world_size, rank : int
        Of ``group``.
    max_size, nccl_above_bytes : int
    full_nvlink : Optional[bool]
        What was passed to :func:`init_custom_ar` (``None`` when never reached).
    device : Optional[torch.device]

    Notes
    -----
    Disabled when the world size is not 2, 4, 6 or 8 (world size 1 included), when the
    world size is above 2 without full NVLink, or when any rank fails a setup step (no CUDA,
    a GPU below sm80, the CUDA runtime not loadable, a failed allocation or IPC call); the
    reason names the rank and the error. The CUDA runtime is loaded from ``libcudart.so.13``,
    ``libcudart.so.12``, torch's ``lib`` directory or the ``nvidia`` pip packages. Ranks
    may share a GPU (IPC between processes on one device is allowed).

    CUDA graphs: capture inside :meth:`capture`, which registers the inputs recorded during
    capture on exit::

        comm = CustomAllreduce(max_size=8 << 20)
        with comm.capture():
            with torch.cuda.graph(graph):
                y = comm.all_reduce(x)
        graph.replay()

    The environment variables of :func:`init_custom_ar` apply (set them before
    construction). :meth:`close` releases everything; it is also called on garbage
    collection.
    """

    def __init__(
        self,
        group=None,
        device: Union[int, str, torch.device, None] = None,
        max_size: int = 8 << 20,
        full_nvlink: Optional[bool] = None,
        nccl_above_bytes: Optional[int] = None,
    ) -> None:
        # Every attribute close() and __del__ read exists before anything can raise.
        self.disabled = True
        self.reason = ""
        self.full_nvlink: Optional[bool] = None
        self.device: Optional[torch.device] = None
        self._fa = 0
        self._own_ptrs: List[int] = []
        self._peer_ptrs: List[int] = []
        self._signal_ptr = 0
        self._staging_ptr = 0
        self._rank_data: Optional[torch.Tensor] = None
        self._closed = False
        self.group = group
        self.world_size, self.rank = 0, -1
        self.max_size = self.nccl_above_bytes = 0

        import torch.distributed as dist

        if not dist.is_available() or not dist.is_initialized():
            raise RuntimeError("sgl_kernel.CustomAllreduce: torch.distributed is not initialized "
                               "(call torch.distributed.init_process_group first)")
        max_size = int(max_size)
        if max_size <= 0 or max_size % 16:
            raise ValueError(f"sgl_kernel.CustomAllreduce: max_size must be a positive multiple of 16, got {max_size}")
        self._dist = dist
        self.group = group if group is not None else dist.group.WORLD
        self.world_size = dist.get_world_size(self.group)
        self.rank = dist.get_rank(self.group)
        self.max_size = max_size
        self.nccl_above_bytes = max_size if nccl_above_bytes is None else int(nccl_above_bytes)

        if self.world_size not in (2, 4, 6, 8):
            self.reason = f"world size {self.world_size} is not supported (custom all-reduce needs 2, 4, 6 or 8 ranks)"
            return
        self._setup(device, full_nvlink)

    # -- setup ----------------------------------------------------------------------------

    def _gather(self, obj) -> list:
        out = [None] * self.world_size
        self._dist.all_gather_object(out, obj, group=self.group)
        return out

    @contextlib.contextmanager
    def _on_device(self) -> Iterator[None]:
        """torch's and the runtime's current device set to ours, restored after."""
        rt = _cudart()
        prev = rt.get_device()
        with torch.cuda.device(self.device):
            rt.set_device(self.device.index)
            try:
                yield
            finally:
                rt.set_device(prev)

    def _disable(self, reason: str) -> None:
        self.reason = reason
        self.disabled = True
        try:
            self._release()
        except Exception as exc:  # the reason says what matters; keep the cleanup error too
            self.reason += f" (and cleanup failed: {_short(exc)})"

    def _first_error(self, errors: list) -> Optional[str]:
        for r, err in enumerate(errors):
            if err:
                return f"rank {r}: {err}"
        return None

    def _setup(self, device, full_nvlink: Optional[bool]) -> None:
        # 1. Local: the device, our two buffers and their IPC handles.
        err, info = None, None
        try:
            if not torch.cuda.is_available():
                raise RuntimeError("no CUDA device is available")
            dev = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
            if dev.type != "cuda":
                raise ValueError(f"device must be a CUDA device, got {dev}")
            if dev.index is None:
                dev = torch.device("cuda", torch.cuda.current_device())
            self.device = dev
            cc = torch.cuda.get_device_capability(dev)
            if cc < (8, 0):
                raise RuntimeError(f"needs sm80 or newer, {torch.cuda.get_device_name(dev)} is sm_{cc[0]}{cc[1]}")
            signal_bytes = meta_size() + self.max_size
            rt = _cudart()
            with self._on_device():
                self._signal_ptr = rt.malloc(signal_bytes)
                self._own_ptrs.append(self._signal_ptr)
                self._staging_ptr = rt.malloc(self.max_size)
                self._own_ptrs.append(self._staging_ptr)
                rt.memset(self._signal_ptr, 0, signal_bytes)
                rt.synchronize()  # zeroed before any peer can see it
                uuid = getattr(torch.cuda.get_device_properties(dev), "uuid", None)  # for NVLink detection
                info = (
                    rt.ipc_get_mem_handle(self._signal_ptr),
                    rt.ipc_get_mem_handle(self._staging_ptr),
                    "" if uuid is None else str(uuid),
                )
        except Exception as exc:
            err = _short(exc)
        gathered = self._with_device_for_collective(lambda: self._gather((err, info)))
        failed = self._first_error([e for e, _ in gathered])
        if failed:
            self._disable(f"setup failed on {failed}")
            return

        # 2. NVLink: given, or detected on every rank (all must agree).
        why = "full_nvlink=False was passed"
        if full_nvlink is None:
            local = _detect_full_nvlink([i[2] for _, i in gathered])
            answers = self._with_device_for_collective(lambda: self._gather(local))
            full = all(ok for ok, _ in answers)
            why = next((f"rank {r}: {w}" for r, (ok, w) in enumerate(answers) if not ok), "")
            why += "; pass full_nvlink=True if the GPUs are NVLink-connected"
        else:
            full = bool(full_nvlink)
        self.full_nvlink = full
        if self.world_size > 2 and not full:
            self._disable(f"world size {self.world_size} needs full NVLink between all GPUs: {why}")
            return

        # 3. Open the peers' buffers, create the handle, register the staging buffers.
        err = None
        try:
            rt = _cudart()
            signal_ptrs, staging_ptrs = [], []
            with self._on_device():
                for r, (_, (sig_handle, staging_handle, _)) in enumerate(gathered):
                    if r == self.rank:  # a process cannot open its own handle: use the pointer
                        signal_ptrs.append(self._signal_ptr)
                        staging_ptrs.append(self._staging_ptr)
                        continue
                    for handle, ptrs in ((sig_handle, signal_ptrs), (staging_handle, staging_ptrs)):
                        ptr = rt.ipc_open_mem_handle(handle)
                        self._peer_ptrs.append(ptr)
                        ptrs.append(ptr)
                self._rank_data = torch.empty(RANK_DATA_BYTES, dtype=torch.uint8, device=self.device)
                self._fa = _init_custom_ar(signal_ptrs, self._rank_data, self.rank, full)
                _register_buffer(self._fa, staging_ptrs)
        except Exception as exc:
            err = _short(exc)
        failed = self._first_error(self._with_device_for_collective(lambda: self._gather(err)))
        if failed:
            self._disable(f"setup failed on {failed}")
            return
        self.disabled = False

    def _with_device_for_collective(self, fn: Callable[[], list]) -> list:
        # NCCL's all_gather_object stages its tensors on the current device: make it ours.
        if self.device is not None:
            with torch.cuda.device(self.device):
                return fn()
        return fn()

    # -- use ------------------------------------------------------------------------------

    def should_custom_ar(self, inp: torch.Tensor) -> bool:
        """Whether :meth:`all_reduce` takes the custom path for ``inp``: enabled, on this
        rank's device, fp32/fp16/bf16, contiguous, byte size a multiple of 16, at most
        ``max_size`` and at most ``nccl_above_bytes``."""
        if self.disabled or not isinstance(inp, torch.Tensor):
            return False
        if inp.device != self.device or inp.dtype not in _DTYPES or not inp.is_contiguous():
            return False
        nbytes = inp.numel() * inp.element_size()
        return nbytes % 16 == 0 and nbytes <= self.max_size and nbytes <= self.nccl_above_bytes

    def all_reduce(self, inp: torch.Tensor, out: Optional[torch.Tensor] = None) -> torch.Tensor:
        """Sum of ``inp`` over the ranks of the group, every rank calling it in the same order.

        The custom path when :meth:`should_custom_ar` (eager: through this rank's staging
        buffer; while the current stream captures a CUDA graph: ``inp`` is recorded, see
        :meth:`capture`), else ``torch.distributed.all_reduce`` on a contiguous clone.

        Parameters
        ----------
        inp : torch.Tensor
            Not written.
        out : Optional[torch.Tensor]
            Written and returned when given (same shape and dtype as ``inp``; contiguous on
            the custom path); else a new tensor is returned.
        """
        if not self.should_custom_ar(inp):
            return self._fallback(inp, out)
        if out is None:
            out = torch.empty_like(inp)
        if torch.cuda.current_device() == self.device.index:
            capturing = torch.cuda.is_current_stream_capturing()
        else:
            with torch.cuda.device(self.device):
                capturing = torch.cuda.is_current_stream_capturing()
        if capturing:
            _all_reduce(self._fa, inp, out, 0, 0)
        else:
            _all_reduce(self._fa, inp, out, self._staging_ptr, self.max_size)
        return out

    def _fallback(self, inp: torch.Tensor, out: Optional[torch.Tensor]) -> torch.Tensor:
        res = inp.clone(memory_format=torch.contiguous_format)
        self._dist.all_reduce(res, group=self.group)
        if out is None:
            return res
        out.copy_(res)
        return out

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        """Wrap CUDA-graph capture (``torch.cuda.graph``) in this context. On a normal exit it
        all-gathers :func:`get_graph_buffer_ipc_meta` over the group and calls
        :func:`register_graph_buffers`, so the recorded inputs are registered on every rank
        before any replay. Collective; a no-op when disabled.

        Each capture records its inputs afresh; a graph must not outlive the tensors it
        reads (as any CUDA graph)."""
        yield
        if self.disabled:
            return
        handles, offsets = get_graph_buffer_ipc_meta(self._fa)
        metas = self._with_device_for_collective(lambda: self._gather((handles, offsets)))
        if any(o for _, o in metas):
            register_graph_buffers(self._fa, [h for h, _ in metas], [o for _, o in metas])

    # -- teardown -------------------------------------------------------------------------

    def _release(self) -> None:
        """Dispose the handle, close the peers' mappings, free our buffers; raise the first
        error after trying everything."""
        errors: List[BaseException] = []
        if not (self._fa or self._peer_ptrs or self._own_ptrs):
            self._rank_data = None
            return
        try:
            torch.cuda.synchronize(self.device)  # nothing in flight uses what is freed below
        except Exception as exc:
            errors.append(exc)
        if self._fa:
            fa, self._fa = self._fa, 0
            try:
                _dispose(fa)
            except Exception as exc:
                errors.append(exc)
        try:
            rt = _cudart()
            with self._on_device():
                while self._peer_ptrs:
                    try:
                        rt.ipc_close_mem_handle(self._peer_ptrs.pop())
                    except Exception as exc:
                        errors.append(exc)
                while self._own_ptrs:
                    try:
                        rt.free(self._own_ptrs.pop())
                    except Exception as exc:
                        errors.append(exc)
        except Exception as exc:
            errors.append(exc)
        self._signal_ptr = self._staging_ptr = 0
        self._rank_data = None
        if errors:
            raise errors[0]

    def close(self) -> None:
        """Dispose the handle, close the IPC mappings of the peers' buffers and free this
        rank's buffers. Idempotent; not collective. Afterwards :meth:`all_reduce` falls back
        to ``torch.distributed``."""
        if self._closed:
            return
        self._closed = True
        self.disabled = True
        if not self.reason:
            self.reason = "closed"
        self._release()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # interpreter shutdown, CUDA already torn down: nothing to do
            pass

    def __repr__(self) -> str:
        state = f"disabled: {self.reason}" if self.disabled else f"enabled, full_nvlink={self.full_nvlink}"
        return (f"CustomAllreduce(rank={self.rank}, world_size={self.world_size}, max_size={self.max_size}, "
                f"device={self.device}, {state})")


# ---------------------------------------------------------------------------------------
# Single-process emulation: a test, self-check and benchmark helper (not public)


@contextlib.contextmanager
def _scoped_env(env: Optional[Dict[str, Optional[str]]]) -> Iterator[None]:
    """Set (None: unset) environment variables for the duration of the block."""
    saved = {k: os.environ.get(k) for k in (env or {})}
    try:
        for k, v in (env or {}).items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = str(v)
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class _EmulatedGroup:
    """``world`` ranks of one all-reduce group inside this process, all on one GPU.

    Each rank ``r`` gets a zeroed signal buffer, a staging buffer, a ``rank_data`` tensor, a
    handle ``handles[r]`` (staging buffers registered) and a CUDA stream ``streams[r]``. The
    ranks' kernels wait for each other, so a collective call must be issued for every rank,
    each on its own stream, before anything waits: :meth:`run` does that. ``world`` ranks of
    ``SGL_KERNEL_AR_MAX_BLOCKS`` blocks each must fit on the GPU at once (pass a small value
    in ``env``); latencies measured here are not NVLink figures.

    ``env`` is applied only while the handles are created (init_custom_ar reads it).
    ``streams`` (one per rank) lets two groups share the ranks' streams, as two communicators
    of one process would.
    """

    def __init__(
        self,
        world: int,
        max_size: int = 8 << 20,
        *,
        full_nvlink: bool = True,
        rank_data_bytes: int = 1 << 20,
        env: Optional[Dict[str, Optional[str]]] = None,
        device: Union[int, str, torch.device, None] = None,
        streams: Optional[Sequence["torch.cuda.Stream"]] = None,
    ) -> None:
        self.world = world
        self.max_size = max_size
        self.device = torch.device("cuda", torch.cuda.current_device()) if device is None else torch.device(device)
        self.handles: List[int] = []
        kw = dict(dtype=torch.uint8, device=self.device)
        self.signals = [torch.zeros(meta_size() + max_size, **kw) for _ in range(world)]
        self.staging = [torch.empty(max_size, **kw) for _ in range(world)]
        self.rank_data = [torch.empty(rank_data_bytes, **kw) for _ in range(world)]
        self.streams = list(streams) if streams is not None else [torch.cuda.Stream(self.device) for _ in range(world)]
        torch.cuda.synchronize(self.device)
        signal_ptrs = [t.data_ptr() for t in self.signals]
        try:
            with _scoped_env(env):
                for r in range(world):
                    self.handles.append(init_custom_ar(signal_ptrs, self.rank_data[r], r, full_nvlink))
            for h in self.handles:
                register_buffer(h, [t.data_ptr() for t in self.staging])
        except BaseException:
            self.dispose()
            raise

    def staging_ptr(self, rank: int) -> int:
        return self.staging[rank].data_ptr()

    def run(self, fn: Callable[[int], None], ranks: Optional[Sequence[int]] = None) -> None:
        """``fn(r)`` on ``streams[r]`` for each rank (default: all), every call issued before
        any wait; the current stream then waits for all of them."""
        ranks = range(self.world) if ranks is None else ranks
        current = torch.cuda.current_stream(self.device)
        for r in ranks:
            self.streams[r].wait_stream(current)
        for r in ranks:
            with torch.cuda.stream(self.streams[r]):
                fn(r)
        for r in ranks:
            current.wait_stream(self.streams[r])

    def all_reduce(
        self,
        inputs: Sequence[torch.Tensor],
        outputs: Sequence[torch.Tensor],
        *,
        staging: bool = True,
        ranks: Optional[Sequence[int]] = None,
    ) -> None:
        """One collective: rank ``r`` reduces ``inputs[r]`` into ``outputs[r]``, through its
        staging buffer (the eager path), or with ``staging=False`` through ``reg_buffer == 0``
        (the inputs are registered buffers, or a graph is being captured)."""
        if staging:
            self.run(lambda r: all_reduce(self.handles[r], inputs[r], outputs[r], self.staging_ptr(r),
                                          self.max_size), ranks)
        else:
            self.run(lambda r: all_reduce(self.handles[r], inputs[r], outputs[r], 0, 0), ranks)

    def capture(self, fn: Callable[[int], None]) -> List["torch.cuda.CUDAGraph"]:
        """One CUDA graph per rank: ``fn(r)`` captured on ``streams[r]``."""
        graphs = []
        for r in range(self.world):
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=self.streams[r]):
                fn(r)
            graphs.append(graph)
        return graphs

    def register_graph_buffers(self) -> Tuple[List[List[int]], List[List[int]]]:
        """Exchange every rank's recorded buffers and register them on every rank (what
        CustomAllreduce.capture does over a process group). Returns (handles, offsets)."""
        metas = [get_graph_buffer_ipc_meta(h) for h in self.handles]
        handles = [m[0] for m in metas]
        offsets = [m[1] for m in metas]
        for h in self.handles:
            register_graph_buffers(h, handles, offsets)
        return handles, offsets

    def replay(self, graphs: Sequence["torch.cuda.CUDAGraph"], ranks: Optional[Sequence[int]] = None) -> None:
        self.run(lambda r: graphs[r].replay(), ranks)

    def dispose(self) -> None:
        """Dispose every handle (after the device is idle); raise the first error."""
        errors = []
        try:
            torch.cuda.synchronize(self.device)
        except Exception as exc:
            errors.append(exc)
        while self.handles:
            try:
                dispose(self.handles.pop())
            except Exception as exc:
                errors.append(exc)
        if errors:
            raise errors[0]

    def __enter__(self) -> "_EmulatedGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.dispose()


# ---------------------------------------------------------------------------------------
# One-shot self checks for `python -m sgl_kernel`: a 2-rank group emulated on this GPU.

_SELF_CHECK_ENV = {"SGL_KERNEL_AR_TIMEOUT_MS": "10000", "SGL_KERNEL_AR_MAX_BLOCKS": "16"}


def _check_sum(inputs: Sequence[torch.Tensor], outputs: Sequence[torch.Tensor]) -> None:
    ref = sum(x.double() for x in inputs)
    scale = sum(x.double().abs() for x in inputs)
    rel = {torch.float32: 1e-6, torch.float16: 2 ** -10, torch.bfloat16: 2 ** -7}[outputs[0].dtype]
    for r, out in enumerate(outputs):
        if not bool(((out.double() - ref).abs() <= rel * scale + 1e-30).all()):
            raise AssertionError(f"rank {r}: all_reduce result differs from the fp64 sum")
        if not torch.equal(out.view(torch.uint8), outputs[0].view(torch.uint8)):
            raise AssertionError(f"rank {r}: result not bitwise equal to rank 0's")


def _check_eager() -> None:
    gen = torch.Generator(device="cuda").manual_seed(0)
    with _EmulatedGroup(2, 2 << 20, env=_SELF_CHECK_ENV) as group:
        for dtype in (torch.bfloat16, torch.float32):
            for nbytes in (4096, (1 << 20) + 16):
                n = nbytes // torch.tensor([], dtype=dtype).element_size()
                inputs = [torch.randn(n, device="cuda", generator=gen).to(dtype) for _ in range(2)]
                outputs = [torch.full_like(x, float("nan")) for x in inputs]
                group.all_reduce(inputs, outputs)
                torch.cuda.synchronize()
                _check_sum(inputs, outputs)


def _check_graph() -> None:
    gen = torch.Generator(device="cuda").manual_seed(1)
    with _EmulatedGroup(2, 1 << 20, env=_SELF_CHECK_ENV) as group:
        inputs = [torch.empty(5000, device="cuda", dtype=torch.float16) for _ in range(2)]
        outputs = [torch.empty_like(x) for x in inputs]
        graphs = group.capture(lambda r: all_reduce(group.handles[r], inputs[r], outputs[r], 0, 0))
        group.register_graph_buffers()
        for _ in range(2):
            for x, y in zip(inputs, outputs):
                x.copy_(torch.randn(x.shape, device="cuda", generator=gen))
                y.fill_(float("nan"))
            group.replay(graphs)
            torch.cuda.synchronize()
            _check_sum(inputs, outputs)


def _check_lifecycle() -> None:
    group = _EmulatedGroup(2, 1 << 20, env=_SELF_CHECK_ENV)
    fa = group.handles[0]
    group.dispose()
    x = torch.zeros(64, device="cuda")
    try:
        all_reduce(fa, x, torch.empty_like(x), 0, 0)
    except RuntimeError as exc:
        if "unknown or disposed handle" not in str(exc):
            raise
    else:
        raise AssertionError("all_reduce on a disposed handle did not raise")


def _check_meta_size() -> None:
    size = meta_size()
    if size <= 0 or size % 256:
        raise AssertionError(f"meta_size() = {size}, not a positive multiple of 256")


def self_checks() -> Dict[str, Callable[[], None]]:
    return {
        "init_custom_ar": _check_lifecycle,
        "register_buffer": _check_eager,
        "all_reduce": _check_eager,
        "dispose": _check_lifecycle,
        "get_graph_buffer_ipc_meta": _check_graph,
        "register_graph_buffers": _check_graph,
        "meta_size": _check_meta_size,
    }
