# SPDX-License-Identifier: Apache-2.0
"""In-tree dynamic-metadata provider: pin the wheel's torch requirement.

The extension links against one torch's C++ ABI, so the wheel's runtime requirement is
``torch==<the version this build compiled against>`` (the local label such as ``+cu130``
is dropped; ``torch==2.11.0`` matches ``2.11.0+cu130``). The package also refuses at
import time to load under another torch (python/sgl_kernel/_loader.py).
"""

from __future__ import annotations

from importlib import metadata
from typing import Any, Mapping


def build_torch_version() -> str:
    try:
        full = metadata.version("torch")
    except metadata.PackageNotFoundError as exc:  # pragma: no cover - build env always has torch
        raise RuntimeError(
            "sgl-kernel: torch must be installed in the build environment "
            "(it is a build requirement; with --no-build-isolation install it first)"
        ) from exc
    return full.split("+", 1)[0]


class Provider:
    @staticmethod
    def dynamic_metadata(settings: Mapping[str, Any], project: Mapping[str, Any]) -> dict:
        field = settings.get("field", "dependencies")
        if field != "dependencies":
            raise RuntimeError("torch_pin only provides 'dependencies'")
        return {"dependencies": [f"torch=={build_torch_version()}"]}

    @staticmethod
    def get_requires_for_dynamic_metadata(settings: Mapping[str, Any]) -> list:
        return ["torch>=2.11"]
