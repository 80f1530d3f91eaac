#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Write an offline bundle: everything a build of sgl_kernel needs that a bare CUDA host
(python3, a CUDA torch, nvcc, CMake >= 3.26, ninja) does not have.

    python3 tools/offline_bundle.py [--out .bundle] [--with-build-tools]

Contents of the bundle directory:
  wheels/   the build backend (scikit-build-core and its dependencies); with
            --with-build-tools also cmake and ninja wheels for manylinux x86_64
  deps/     <name>-<version>.tar.gz for CUTLASS and FlashInfer (cmake/deps.json): only the
            header trees the build uses (CUTLASS include/ + tools/util/include/, FlashInfer
            include/ + the CCCL it needs), not the whole wheels
  MANIFEST.json   file sizes and sha256
  README.txt      the two commands that build from it

On the host with no network, from the source tree with the bundle at .bundle (the default
place CMake looks; elsewhere set SGL_KERNEL_DEPS_DIR):
    python3 -m pip install --no-index --find-links .bundle/wheels scikit-build-core
    python3 -m pip install --no-build-isolation --no-deps -v .
Sources of the dependencies, in order: an installed pip package of the pinned version,
a pinned wheel in --wheel-dir, the package index.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import deps  # noqa: E402  (tools/deps.py)

MAX_BUNDLE_MB = 60
# The build backend and what it imports (pure-Python wheels). tomli and exceptiongroup are
# only needed below Python 3.11; they are tiny, so they are always included.
BACKEND_WHEELS = ["scikit-build-core>=1.1,<2", "pathspec", "packaging", "tomli", "exceptiongroup",
                  "typing-extensions"]
BUILD_TOOL_WHEELS = ["cmake>=3.26", "ninja"]
MANYLINUX = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64"]

README = """sgl_kernel offline bundle (written by tools/offline_bundle.py)

From the sgl_kernel source tree, with this directory at .bundle (or SGL_KERNEL_DEPS_DIR
pointing at it), on a host with python3, a CUDA torch, nvcc, CMake >= 3.26 and ninja:

    python3 -m pip install --no-index --find-links .bundle/wheels scikit-build-core
    python3 -m pip install --no-build-isolation --no-deps -v .

The configure summary then reports CUTLASS and FlashInfer "from local archive".
"""


def pip_download(reqs: list[str], dest: str, platforms: list[str] | None, python_version: str) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "-d", dest, "--python-version", python_version,
           "--implementation", "cp"]
    for p in platforms or []:
        cmd += ["--platform", p]
    cmd += reqs
    subprocess.run(cmd, check=True)


def dep_source(name: str, wheel_dir: str | None, tmp: str) -> tuple[str, str]:
    """(kind, path): an installed package directory, or a wheel/archive file."""
    installed = deps.locate_installed(name)
    if installed:
        return "dir", installed
    for d in [wheel_dir] if wheel_dir else []:
        found = deps.find_archive(name, d)
        if found:
            return "archive", found
    found = deps.download(name, os.path.join(tmp, "wheels"))
    if not found:
        sys.exit(f"offline_bundle: cannot obtain {name}: not installed, not in --wheel-dir, "
                 "and the package index download failed")
    return "archive", found


def write_dep_archive(name: str, kind: str, src: str, out_dir: str, tmp: str) -> str:
    d = deps.dep(name)
    if kind == "dir":
        root = src
    else:
        root = deps.extract(name, src, os.path.join(tmp, f"{name}-tree"))
    target = os.path.join(out_dir, deps.bundle_archive_name(name))
    with tarfile.open(target, "w:gz", compresslevel=9) as tar:
        for keep in d["keep"]:
            tar.add(os.path.join(root, keep), arcname=keep,
                    filter=lambda ti: None if ti.name.endswith((".pyc", "__pycache__")) else ti)
    return target


def sha256(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=".bundle", help="bundle directory (default: .bundle)")
    ap.add_argument("--with-build-tools", action="store_true",
                    help="also bundle cmake and ninja wheels (manylinux x86_64)")
    ap.add_argument("--python-version", default="3.12",
                    help="target Python for the build-tool wheels (default 3.12)")
    ap.add_argument("--wheel-dir", default=None,
                    help="a directory holding the pinned nvidia-cutlass / flashinfer-python wheels")
    args = ap.parse_args()

    out = os.path.abspath(args.out)
    if os.path.exists(out):
        shutil.rmtree(out)
    wheels = os.path.join(out, "wheels")
    deps_dir = os.path.join(out, "deps")
    os.makedirs(wheels)
    os.makedirs(deps_dir)

    with tempfile.TemporaryDirectory(prefix="sgl-bundle-") as tmp:
        print("bundle: build backend wheels")
        pip_download(BACKEND_WHEELS, wheels, ["any"], args.python_version)
        if args.with_build_tools:
            print("bundle: cmake and ninja wheels")
            pip_download(BUILD_TOOL_WHEELS, wheels, MANYLINUX, args.python_version)
        for name in deps.load_deps():
            kind, src = dep_source(name, args.wheel_dir, tmp)
            path = write_dep_archive(name, kind, src, deps_dir, tmp)
            print(f"bundle: {name} {deps.dep(name)['version']} from {src} -> {os.path.relpath(path, out)}")

    with open(os.path.join(out, "README.txt"), "w") as f:
        f.write(README)
    files = {}
    total = 0
    for dirpath, _, names in os.walk(out):
        for n in sorted(names):
            p = os.path.join(dirpath, n)
            size = os.path.getsize(p)
            total += size
            files[os.path.relpath(p, out)] = {"bytes": size, "sha256": sha256(p)}
    manifest = {"deps": deps.load_deps(), "files": files, "total_bytes": total}
    with open(os.path.join(out, "MANIFEST.json"), "w") as f:
        json.dump(manifest, f, indent=2)
    for rel, info in sorted(files.items()):
        print(f"  {info['bytes'] / 1e6:8.2f} MB  {rel}")
    print(f"bundle: {out}: {total / 1e6:.1f} MB in {len(files)} files")
    if total > MAX_BUNDLE_MB * 1e6:
        print(f"bundle: larger than {MAX_BUNDLE_MB} MB", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
