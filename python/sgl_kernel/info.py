# SPDX-License-Identifier: Apache-2.0
"""build_info(): what this build holds and what runs on the current GPU (API.md 3.5)."""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import Dict, List, Optional, Tuple

import torch

from sgl_kernel import _loader
from sgl_kernel.version import __version__

__all__ = ["build_info"]

# sgl-kernel release whose Python API this build matches.
COMPAT_VERSION = "0.3.21"

# Every family name build_info reports (API.md 3.5 and section 4).
ALL_FAMILIES = (
    "elementwise", "quantization", "gemm", "moe", "attention", "allreduce", "project", "top_k",
    "sampling", "speculative", "kvcacheio", "grammar", "hadamard", "mamba", "marlin", "fp4",
)

# Python modules that wrap a compiled family; each defines FAMILY, OPS (op -> minimum
# arch as 10 * major + minor, 0 for CPU ops) and self_checks(), and optionally OP_FAMILIES
# (op -> the arch-specific parts of the family holding its kernels, e.g. ("gemm_sm90",
# "gemm_sm89"): the op has a kernel where any of them covers the device).
FAMILY_MODULES = (
    "sgl_kernel.elementwise",
    "sgl_kernel.quantization",
    "sgl_kernel.project",
    "sgl_kernel.memory",
    "sgl_kernel.top_k",
    "sgl_kernel.gemm",
    "sgl_kernel.moe",
    "sgl_kernel.attention",
    "sgl_kernel.allreduce",
)


def family_modules() -> List[ModuleType]:
    return [importlib.import_module(m) for m in FAMILY_MODULES]


def archs_cover(archs: List[str], cc: int) -> bool:
    """Python twin of sgl_kernel::archs_cover (csrc/common/runtime.cc)."""
    for a in archs:
        ptx = a.endswith("+ptx")
        a = a[: -len("+ptx")] if ptx else a
        suffix = a[-1] if a[-1] in "af" else ""
        target = int(a.rstrip("af"))
        if suffix == "a":  # sm_90a / compute_90a: that exact arch only
            if cc == target:
                return True
        elif ptx and not suffix:  # plain PTX: any later arch
            if cc >= target:
                return True
        elif cc // 10 == target // 10 and cc >= target:  # SASS, and 'f' family targets
            return True
    return False


def _arch_names(archs: List[str]) -> List[str]:
    out: List[str] = []
    for a in archs:
        if a.endswith("+ptx"):
            base = a[: -len("+ptx")]
            out += [f"sm_{base}", f"compute_{base}"]
        else:
            out.append(f"sm_{a}")
    return out


def registered_ops() -> List[str]:
    return sorted(
        name.split("::", 1)[1]
        for name in torch._C._dispatch_get_all_op_names()
        if name.startswith("sgl_kernel::")
    )


def _device() -> Optional[Dict]:
    try:
        if not torch.cuda.is_available():
            return None
        major, minor = torch.cuda.get_device_capability()
        return {"name": torch.cuda.get_device_name(), "capability": [major, minor]}
    except Exception:
        return None


def build_info() -> dict:
    """Describe this build and the current GPU. Works without a GPU; never raises because
    a kernel is missing.

    Returns
    -------
    dict
        JSON-serialisable: ``version``, ``compat_version``, ``torch_version`` (compiled
        against), ``torch_runtime_version``, ``cuda_version`` (nvcc), ``arch_list``,
        ``families`` (family -> compiled in), ``device`` (``{"name", "capability"}`` or
        ``None``), ``ops`` (op -> a kernel exists for the current device), plus
        ``family_archs`` and ``deps`` (where CUTLASS and FlashInfer came from).
    """
    cfg = _loader.build_config()
    family_archs: Dict[str, List[str]] = {f: list(a) for f, a in cfg.family_archs.items()}
    device = _device()
    cc = device["capability"][0] * 10 + device["capability"][1] if device else None

    op_family: Dict[str, Tuple[str, ...]] = {}
    op_min: Dict[str, int] = {}
    for mod in family_modules():
        for op, min_arch in mod.OPS.items():
            op_family[op] = tuple(getattr(mod, "OP_FAMILIES", {}).get(op, (mod.FAMILY,)))
            op_min[op] = min_arch

    ops: Dict[str, bool] = {}
    for op in registered_ops():
        fam = op_family.get(op)
        if fam is not None and op_min.get(op, 80) == 0:
            ops[op] = True  # CPU op
        elif cc is None or fam is None:
            ops[op] = False if cc is None else archs_cover(cfg.archs, cc)
        else:
            ops[op] = cc >= op_min[op] and any(archs_cover(family_archs.get(f, []), cc) for f in fam)

    return {
        "version": __version__,
        "compat_version": COMPAT_VERSION,
        "torch_version": cfg.torch_version,
        "torch_runtime_version": torch.__version__,
        "cuda_version": cfg.cuda_version,
        "arch_list": _arch_names(cfg.archs),
        "families": {f: bool(family_archs.get(f)) for f in ALL_FAMILIES},
        "family_archs": {f: _arch_names(a) for f, a in family_archs.items()},
        "device": device,
        "ops": ops,
        "deps": {name: {"version": v, "origin": o} for name, (v, o) in cfg.deps.items()},
    }
