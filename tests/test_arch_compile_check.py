# SPDX-License-Identifier: Apache-2.0
"""tools/arch_compile_check.py's pieces (no GPU, no compiler): the families read from
CMakeLists.txt, the family of a source by its path, and the retargeted nvcc command."""

from __future__ import annotations

import importlib.util
import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _tool():
    spec = importlib.util.spec_from_file_location("arch_compile_check", os.path.join(ROOT, "tools",
                                                                                     "arch_compile_check.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


tool = _tool()
FAMS = tool.families(os.path.join(ROOT, "CMakeLists.txt"))


def test_families_match_cmakelists():
    # CMakeLists.txt's declarations (DESIGN.md 4): sm80+ families, sm89+ fp8 GEMMs, sm90a-only CUTLASS 3.x.
    assert FAMS["elementwise"] == (80, [])
    assert FAMS["quantization"] == (80, [])
    assert FAMS["gemm_sm89"] == (89, [])
    assert FAMS["gemm_sm90"] == (None, ["90a"])
    assert set(FAMS) >= {"elementwise", "project", "top_k", "quantization", "gemm", "gemm_sm80", "allreduce"}


@pytest.mark.parametrize("rel, fam", [("quantization/norm_quant.cu", "quantization"), ("gemm/sm90/x.cu", "gemm_sm90"),
                                      ("gemm/sm89/y.cu", "gemm_sm89"), ("gemm/dsv3_gemm.cu", "gemm"),
                                      ("elementwise/sub/z.cu", "elementwise")])
def test_family_of(rel, fam):
    assert tool.family_of(rel, FAMS) == fam


def test_family_of_unknown_directory():
    with pytest.raises(SystemExit):
        tool.family_of("nowhere/a.cu", FAMS)


@pytest.mark.parametrize("fam, arch, ok", [("elementwise", "80", True), ("elementwise", "120a", True),
                                           ("elementwise", "75", False), ("gemm_sm90", "90a", True),
                                           ("gemm_sm90", "100a", False), ("gemm_sm90", "90", False),
                                           ("gemm_sm89", "80", False), ("gemm_sm89", "100a", True)])
def test_supports(fam, arch, ok):
    assert tool.supports(FAMS[fam], arch) is ok


def test_retarget_swaps_gencode_output_and_depfile():
    """One arch, device code only (-cubin: the host half of a .cu compiles alike for every arch
    and the build already compiled it), no dependency file."""
    argv = ["/usr/local/cuda/bin/nvcc", "-DX=\"a,b\"", "-MD", "-MT", "obj.o", "-MF", "obj.o.d", "-O3",
            "-gencode=arch=compute_90a,code=sm_90a", "--generate-code=arch=compute_80,code=sm_80", "-gencode",
            "arch=compute_89,code=sm_89", "-x", "cu", "-c", "/src/csrc/a.cu", "-o", "obj.o"]
    out = tool.retarget(argv, "100a", "/tmp/a.o")
    assert out == ["/usr/local/cuda/bin/nvcc", "-DX=\"a,b\"", "-O3", "-x", "cu", "-cubin", "/src/csrc/a.cu",
                   "-arch=sm_100a", "-o", "/tmp/a.o"]
