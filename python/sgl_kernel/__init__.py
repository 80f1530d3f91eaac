# SPDX-License-Identifier: Apache-2.0
"""sgl_kernel: CUDA kernels for LLM serving engines, drop-in for the sgl-kernel Python API.

Importing the package loads the compiled extension ``common_ops``, which registers every
op under ``torch.ops.sgl_kernel``; the family modules below wrap them. ``build_info()``
and ``python -m sgl_kernel`` describe the build and the current GPU.
"""

from sgl_kernel.version import __version__
from sgl_kernel import _loader

common_ops = _loader.load()

from sgl_kernel import utils  # noqa: E402
from sgl_kernel.utils import *  # noqa: E402,F401,F403
from sgl_kernel.quantization import *  # noqa: E402,F401,F403
from sgl_kernel.elementwise import *  # noqa: E402,F401,F403
from sgl_kernel.gemm import *  # noqa: E402,F401,F403
from sgl_kernel.moe import *  # noqa: E402,F401,F403
from sgl_kernel.attention import *  # noqa: E402,F401,F403
from sgl_kernel.project import *  # noqa: E402,F401,F403
from sgl_kernel.memory import *  # noqa: E402,F401,F403
from sgl_kernel.top_k import *  # noqa: E402,F401,F403
from sgl_kernel.allreduce import *  # noqa: E402,F401,F403
from sgl_kernel.info import build_info  # noqa: E402,F401
