# SPDX-License-Identifier: Apache-2.0
"""Compile every kernel source of a configured build for other GPU archs, without linking.

A wheel built for one arch (CI builds 9.0a) says nothing about the others: in session 42 the
portable default list (8.0;8.9;9.0a;10.0a;12.0a, what a GPU-less host builds) failed because
ptxas 13.0 crashed on one kernel for sm_100a and sm_120a. This tool reruns the build's own nvcc
command of each ``csrc/**/*.cu`` with the gencode flags swapped for one arch at a time, keeping
only the archs the source's family supports (the rules of ``sgl_declare_family`` in
CMakeLists.txt, applied by path as cmake/arch.cmake does), and writes the objects to a scratch
directory (device code only: ``-cubin``, no host compile). The ``.cu`` files include no torch
headers (DESIGN.md 2), so this costs less than one build of those files per arch; the bindings
are not recompiled.

    python tools/arch_compile_check.py --archs 100a,80 [--build-dir build/<tag>] [--jobs 2]

Exit status 1 when any compile fails (a compiler crash included), with the file, the arch and
the end of the compiler's output.
"""

import argparse
import concurrent.futures
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def families(cmakelists: str) -> dict:
    """{family: (min arch number or None, allowed arch tokens)} from sgl_declare_family calls."""
    text = open(cmakelists).read()
    out = {}
    for name, args in re.findall(r"^\s*sgl_declare_family\((\w+)\s+([^)]*)\)", text, re.M):
        words = args.split()
        if words[:1] == ["MIN"]:
            out[name] = (int(words[1]), [])
        elif words[:1] == ["ARCHS"]:
            out[name] = (None, words[1:])
        else:
            raise SystemExit(f"arch_compile_check: cannot read sgl_declare_family({name} {args})")
    if not out:
        raise SystemExit(f"arch_compile_check: no sgl_declare_family() in {cmakelists}")
    return out


def family_of(rel: str, fams: dict) -> str:
    """csrc-relative path -> family, as sgl_apply_family_archs assigns it."""
    parts = rel.split("/")
    fam = parts[0]
    if len(parts) > 2 and f"{parts[0]}_{parts[1]}" in fams:
        fam = f"{parts[0]}_{parts[1]}"
    if fam not in fams:
        raise SystemExit(f"arch_compile_check: csrc/{rel} is in no declared family")
    return fam


def supports(fam: tuple, arch: str) -> bool:
    min_num, allowed = fam
    num = int(re.match(r"\d+", arch).group(0))
    return (min_num is not None and num >= min_num) or arch in allowed


def source_root(build_dir: str) -> str:
    """The source tree a build directory was configured from (CMakeCache.txt)."""
    with open(os.path.join(build_dir, "CMakeCache.txt")) as f:
        for line in f:
            if line.startswith("CMAKE_HOME_DIRECTORY:"):
                return line.split("=", 1)[1].strip()
    raise SystemExit(f"arch_compile_check: no CMAKE_HOME_DIRECTORY in {build_dir}/CMakeCache.txt")


def cu_commands(build_dir: str) -> list:
    """[(source path, nvcc argv)] of the build's .cu objects, from `ninja -t commands`."""
    out = subprocess.run(["ninja", "-C", build_dir, "-t", "commands"], check=True, capture_output=True,
                         text=True).stdout
    cmds = []
    for line in out.splitlines():
        argv = shlex.split(line)
        if argv and os.path.basename(argv[0]) == "ccache":  # the compiler launcher, when used
            argv = argv[1:]
        if not argv or not os.path.basename(argv[0]).startswith("nvcc") or "-c" not in argv:
            continue
        src = argv[argv.index("-c") + 1]
        if src.endswith(".cu"):
            cmds.append((src, argv))
    return cmds


def retarget(argv: list, arch: str, obj: str) -> list:
    """argv without its gencode, output and dependency-file flags, for `arch` into `obj`: the
    device code only (-cubin: cicc and ptxas for that arch, no host compile; the host half of a
    .cu file compiles alike for every arch, and the build already compiled it). Session 45: the
    CUTLASS 2.x GEMM files took 30.6 -> 18.5 s each for sm_80, the whole check ~10 % less."""
    out, skip = [], 0
    for i, a in enumerate(argv):
        if skip:
            skip -= 1
            continue
        if a.startswith("-gencode=") or a.startswith("--generate-code="):
            continue
        if a in ("-gencode", "--generate-code", "-o", "-MF", "-MT"):
            skip = 1
            continue
        if a in ("-MD", "-MMD"):
            continue
        out.append("-cubin" if a == "-c" else a)
    return out + [f"-arch=sm_{arch}", "-o", obj]


def run_one(job):
    """(source, arch, argv, cwd) -> (source, arch, exit status, seconds, the output's end)."""
    rel, arch, argv, cwd = job
    t0 = time.time()
    p = subprocess.run(argv, capture_output=True, text=True, cwd=cwd)
    return rel, arch, p.returncode, time.time() - t0, (p.stdout + p.stderr)[-3000:]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--archs", required=True, help="comma-separated: 80, 89, 90a, 100a, 120a, ...")
    ap.add_argument("--build-dir", help="a configured build directory (default: the one build/*/build.ninja)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    ap.add_argument("--only", default="", help="substring of the csrc-relative paths to compile")
    args = ap.parse_args()
    build_dir = args.build_dir
    if build_dir is None:
        found = sorted(glob.glob(os.path.join(ROOT, "build", "*", "build.ninja")))
        if len(found) != 1:
            raise SystemExit(f"arch_compile_check: pass --build-dir (found {len(found)} build/*/build.ninja)")
        build_dir = os.path.dirname(found[0])
    archs = [a.strip().lower().replace(".", "") for a in args.archs.split(",") if a.strip()]
    root = source_root(build_dir)
    fams = families(os.path.join(root, "CMakeLists.txt"))
    scratch = tempfile.mkdtemp(prefix="arch_check_")
    jobs = []
    csrc = os.path.join(root, "csrc")
    for src, argv in cu_commands(build_dir):
        rel = os.path.relpath(os.path.realpath(os.path.join(build_dir, src)), os.path.realpath(csrc))
        if rel.startswith("..") or args.only not in rel:
            continue
        fam = family_of(rel, fams)
        for arch in archs:
            if supports(fams[fam], arch):
                obj = os.path.join(scratch, f"{rel.replace('/', '_')}.{arch}.o")
                jobs.append((rel, arch, retarget(argv, arch, obj), build_dir))
    if not jobs:
        raise SystemExit("arch_compile_check: nothing to compile")
    print(f"arch_compile_check: {len(jobs)} compiles ({', '.join(archs)}) with {args.jobs} jobs", flush=True)
    t0 = time.time()
    failed = []
    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        for rel, arch, rc, secs, log in ex.map(run_one, jobs):
            status = "ok" if rc == 0 else (f"CRASH (signal {-rc if rc < 0 else rc - 128})" if rc < 0 or rc > 128
                                             else f"FAILED (exit {rc})")
            print(f"  {status:<20} sm_{arch:<5} {secs:6.1f} s  csrc/{rel}", flush=True)
            if rc != 0:
                failed.append((rel, arch, log))
    for rel, arch, log in failed:
        print(f"\n==== csrc/{rel} for sm_{arch}:\n{log}")
    print(f"arch_compile_check: {len(jobs) - len(failed)} of {len(jobs)} compiled in {time.time() - t0:.0f} s")
    subprocess.run(["rm", "-rf", scratch])
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
