# SPDX-License-Identifier: Apache-2.0
"""No kernel touches global memory before its PDL wait (a check of the built machine code).

A kernel launched with programmatic dependent launch may start while the previous kernel in
the stream still writes its inputs; griddepcontrol.wait (SGL_PDL_WAIT, pdl_wait_prefetched;
SASS ``ACQBULK``) holds it until that kernel has finished. The compiler may move read-only
(``ld.global.nc``) loads across the wait: in session 19 a kernel whose address was computed
before the wait had its loads scheduled above it, which reads stale data with nothing in the
source to show it. This test dumps the SASS of common_ops and checks, for every kernel of ours
with a wait, that no global load, store or atomic comes before the wait in the listing, apart
from the kernels below that load before it by design. Runs without a GPU; needs cuobjdump (the CUDA
toolkit's or the one triton ships), skipped without it.

The second check (session 40): the kernels that scatter rows to locations they load
(store_kv_cache, downcast_fp8) issue their data loads before the location check, so the two
round trips overlap. ptxas had sunk store_kv_cache's loads below that check while the source
said otherwise; tools/sass_load_audit.py finds such loads in the listing.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

import sgl_kernel

# Kernels allowed a global access before the wait, with the reason.
ALLOWED = {
    # per_tensor_quant.cu, kPreload: the code kernel of the dynamic two-kernel path loads its
    # input before the wait; the maximum kernel before it does not write the input, and this
    # grid launches only after every block of that kernel has passed its own wait.
    # (Template arguments <..., LoadPolicy, kPreload, kPeel, kBlock>: kPreload true, either
    # kPeel, any block.)
    r"tensor_code_kernel.*LoadPolicyE[0-9]+ELb1ELb[01]ELi[0-9]+EEEv": "kPreload",
}

# CUTLASS's kernels (the GEMMs) branch by warp role before their wait, so the listing's order
# is not program order there; the linear check below applies to straight-line prologues only.
_CUTLASS = "_ZN7cutlass"

_MEMORY = re.compile(r"^(@!?U?P[0-9T]+\s+)?(LDG|STG|LD|ST|ATOMG|ATOM|RED|REDG)(\.|\s)")


def _cuobjdump() -> str | None:
    found = shutil.which("cuobjdump")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and os.path.exists(os.path.join(root, "bin", "cuobjdump")):
            return os.path.join(root, "bin", "cuobjdump")
    try:
        import triton

        path = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
        return path if os.path.exists(path) else None
    except ImportError:
        return None


def _kernels(sass: str):
    """(mangled name, [instruction text]) for every function of a cuobjdump -sass listing."""
    for chunk in re.split(r"\n\s+Function : ", sass)[1:]:
        name = chunk.split("\n", 1)[0].strip()
        body = []
        for line in chunk.split("\n"):
            m = re.match(r"\s+/\*[0-9a-f]{4,}\*/\s+(.*?);", line)
            if m:
                body.append(m.group(1).strip())
        yield name, body


@functools.lru_cache(maxsize=1)
def _listing() -> str:
    """cuobjdump -sass of common_ops (once per session)."""
    tool = _cuobjdump()
    if tool is None:
        pytest.skip("cuobjdump not found (CUDA toolkit or triton)")
    out = subprocess.run([tool, "-sass", sgl_kernel.common_ops.__file__], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_no_global_access_before_the_pdl_wait():
    lib = sgl_kernel.common_ops.__file__
    with_wait, offenders = 0, []
    for name, body in _kernels(_listing()):
        waits = [i for i, ins in enumerate(body) if ins.startswith("ACQBULK")]
        if not waits or name.startswith(_CUTLASS):
            continue
        with_wait += 1
        early = [ins for ins in body[: waits[0]] if _MEMORY.match(ins)]
        if early and not any(re.search(p, name) for p in ALLOWED):
            offenders.append(f"{name}: {early[:3]}")
    # The library has hundreds of PDL kernels; finding none means the listing was not parsed.
    assert with_wait >= 100, f"only {with_wait} kernels with a wait found in {lib}"
    assert not offenders, "global memory access before the PDL wait:\n" + "\n".join(offenders[:20])


def _load_audit():
    path = Path(__file__).resolve().parents[1] / "tools" / "sass_load_audit.py"
    spec = importlib.util.spec_from_file_location("sass_load_audit", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# The location-scatter kernels: data loads ahead of the location check.
_SCATTER = re.compile(r"store_kv_cache_kernel|downcast_fp8_kernel")


def test_scatter_loads_ahead_of_the_location_check():
    audit = _load_audit().audit
    checked, offenders = 0, []
    for name, body in _kernels(_listing()):
        if not _SCATTER.search(name):
            continue
        checked += 1
        found = audit([ins + " ;" for ins in body], False)
        if found:
            offenders.append(f"{name}: after {found[0][0]}: {found[0][1]}")
    # store_kv_cache: 5 chunk widths x 2 location types; downcast_fp8: 2 shapes x 2 dtypes.
    assert checked >= 14, f"only {checked} scatter kernels found"
    assert not offenders, "data loads behind the location check:\n" + "\n".join(offenders[:10])


# Trimmed sm_90a listings of store_kv_cache_kernel (16-byte chunks, int64 locations): session 39's,
# whose k/v loads ptxas had sunk below the location check, and session 40's predicated stores.
_SUNK = """
        /*0250*/                   LDG.E.64.CONSTANT R2, desc[UR10][R2.64] ;
        /*0260*/                   IMAD.WIDE.U32 R6, R11, UR4, R6 ;
        /*0320*/                   ISETP.GE.U32.AND P0, PT, R2, UR6, PT ;
        /*0330*/                   ISETP.GE.AND.EX P0, PT, R3, UR7, PT, P0 ;
        /*0340*/                   ISETP.LT.OR P0, PT, R3, RZ, P0 ;
        /*0350*/               @P0 BRA 0x420 ;
        /*0360*/                   IMAD.WIDE.U32 R4, R0, 0x10, R6 ;
        /*0390*/                   LDG.E.128 R4, desc[UR4][R4.64] ;
        /*03d0*/                   STG.E.128 desc[UR6][R2.64], R4 ;
        /*0400*/                   EXIT ;
"""
_AHEAD = """
        /*0250*/                   LDG.E.64.CONSTANT R2, desc[UR4][R2.64] ;
        /*0260*/                   IMAD.WIDE.U32 R4, R0, 0x10, R6 ;
        /*0270*/                   LDG.E.128 R4, desc[UR4][R4.64] ;
        /*0280*/                   ISETP.GE.U32.AND P0, PT, R2, UR6, PT ;
        /*0290*/                   ISETP.GE.AND.EX P0, PT, R3, UR7, PT, P0 ;
        /*02a0*/                   ISETP.LT.OR P0, PT, R3, RZ, P0 ;
        /*02b0*/               @P0 STG.E.128 desc[UR4][R2.64], R4 ;
        /*02c0*/                   EXIT ;
"""
# A load whose address comes from the location (a gather) is not a sunk load.
_GATHER = """
        /*0250*/                   LDG.E.64.CONSTANT R2, desc[UR4][R2.64] ;
        /*0260*/                   ISETP.GE.U32.AND P0, PT, R2, UR6, PT ;
        /*0270*/               @P0 EXIT ;
        /*0280*/                   LEA R4, P1, R2, UR8, 0x4 ;
        /*0290*/                   LDG.E.128 R8, desc[UR4][R4.64] ;
        /*02a0*/                   STG.E.128 desc[UR6][R6.64], R8 ;
"""


def test_load_audit_on_known_listings():
    """The audit (no module or GPU needed) flags the sunk load and nothing in the other two."""
    audit = _load_audit().audit
    found = audit(_SUNK.splitlines(), False)
    assert found == [("@P0 BRA 0x420", "LDG.E.128 R4, desc[UR4][R4.64]")]
    assert audit(_AHEAD.splitlines(), True) == []
    assert audit(_GATHER.splitlines(), True) == []
