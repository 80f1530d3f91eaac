# SPDX-License-Identifier: Apache-2.0
"""Load the compiled extension, or explain precisely why it cannot be loaded."""

from __future__ import annotations

import importlib
import os
import platform
from types import ModuleType

import torch

_ALLOW_MISMATCH_ENV = "SGL_KERNEL_ALLOW_TORCH_MISMATCH"


def _public(version: str) -> str:
    return version.split("+", 1)[0]


def _environment() -> str:
    """Installed torch/CUDA and the GPU, for error messages. Never raises."""
    lines = [
        f"  installed torch: {torch.__version__} (CUDA {torch.version.cuda or 'none: CPU-only build'})",
        f"  python: {platform.python_version()} on {platform.machine()}",
    ]
    try:
        if torch.cuda.is_available():
            major, minor = torch.cuda.get_device_capability()
            lines.append(f"  GPU: {torch.cuda.get_device_name()} (sm_{major}{minor})")
        else:
            lines.append("  GPU: none visible")
    except Exception as exc:  # pragma: no cover - broken driver setups
        lines.append(f"  GPU: unknown ({exc})")
    return "\n".join(lines)


def build_config() -> ModuleType:
    try:
        return importlib.import_module("sgl_kernel._build_config")
    except ImportError as exc:
        raise ImportError(
            "sgl_kernel: this package has not been built (no sgl_kernel/_build_config.py). "
            "Install it with `pip install --no-build-isolation .` from the source tree instead of "
            "importing the source directory.\n" + _environment()
        ) from exc


def load() -> ModuleType:
    cfg = build_config()
    built = (
        f"  built with torch {cfg.torch_version} (CUDA {cfg.torch_cuda_version}), "
        f"nvcc {cfg.cuda_version}, archs {', '.join(cfg.archs)}"
    )
    if _public(torch.__version__) != _public(cfg.torch_version) and not os.environ.get(_ALLOW_MISMATCH_ENV):
        raise ImportError(
            f"sgl_kernel {cfg.version} was compiled against torch {cfg.torch_version} and refuses to "
            f"load under torch {torch.__version__}: torch's C++ ABI differs between releases, and a "
            "mismatched extension can crash or compute garbage.\n"
            f"{built}\n{_environment()}\n"
            f"Fix: install torch=={_public(cfg.torch_version)}, or rebuild sgl_kernel against the "
            "installed torch (`pip install --no-build-isolation .`). "
            f"Set {_ALLOW_MISMATCH_ENV}=1 to load anyway, at your own risk."
        )
    try:
        return importlib.import_module("sgl_kernel.common_ops")
    except (ImportError, OSError) as exc:
        raise ImportError(
            f"sgl_kernel {cfg.version}: the compiled extension common_ops failed to load: {exc}\n"
            f"{built}\n{_environment()}\n"
            "Fix: make sure the installed torch and CUDA runtime match the build above; rebuild with "
            "`pip install --no-build-isolation .` against the installed torch if they do not."
        ) from exc
