#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Locate, extract and download the header dependencies pinned in cmake/deps.json.

Used by cmake/deps.cmake (each sub-command prints one path, or nothing, on stdout) and by
tools/offline_bundle.py. Standard library only: it runs in bare build environments.

  deps.py locate   NAME           dir of an installed pip package holding NAME's headers
  deps.py find     NAME DIR       a bundle archive or pip wheel of NAME inside DIR
  deps.py extract  NAME ARCHIVE DEST   unpack the kept subtrees of ARCHIVE into DEST
  deps.py download NAME DIR       pip-download NAME's wheel (no deps) into DIR
"""

from __future__ import annotations

import glob
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from importlib import metadata

HERE = os.path.dirname(os.path.abspath(__file__))
DEPS_JSON = os.path.join(HERE, os.pardir, "cmake", "deps.json")


def load_deps() -> dict:
    with open(DEPS_JSON) as f:
        return json.load(f)


def dep(name: str) -> dict:
    deps = load_deps()
    if name not in deps:
        sys.exit(f"deps.py: unknown dependency {name!r} (known: {', '.join(deps)})")
    return deps[name]


def bundle_archive_name(name: str) -> str:
    return f"{name}-{dep(name)['version']}.tar.gz"


def wheel_glob(name: str) -> str:
    d = dep(name)
    return f"{d['pypi_name'].replace('-', '_')}-{d['pypi_version']}-*.whl"


def locate_installed(name: str) -> str | None:
    """Installed pip package of the pinned version -> directory laid out like the repo."""
    d = dep(name)
    try:
        version = metadata.version(d["pypi_name"])
    except metadata.PackageNotFoundError:
        return None
    if version != d["pypi_version"]:
        print(f"deps.py: installed {d['pypi_name']} {version} is not the pinned "
              f"{d['pypi_version']}; not used", file=sys.stderr)
        return None
    top, _, rest = d["wheel_root"].partition("/")
    spec = importlib.util.find_spec(top)  # finds the package without importing it
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        root = os.path.join(loc, rest) if rest else loc
        if all(os.path.isdir(os.path.join(root, k)) for k in d["keep"]):
            return os.path.abspath(root)
    return None


def find_archive(name: str, directory: str) -> str | None:
    """A bundle archive (preferred) or the pip wheel of NAME in DIRECTORY or its deps/, wheels/."""
    for sub in ("deps", "", "wheels"):
        base = os.path.join(directory, sub)
        cand = os.path.join(base, bundle_archive_name(name))
        if os.path.isfile(cand):
            return os.path.abspath(cand)
        wheels = sorted(glob.glob(os.path.join(base, wheel_glob(name))))
        if wheels:
            return os.path.abspath(wheels[-1])
    return None


def _kept(rel: str, keep: list[str]) -> bool:
    return any(rel == k or rel.startswith(k + "/") for k in keep)


def extract(name: str, archive: str, dest: str) -> str:
    """Unpack the kept subtrees of ARCHIVE (bundle .tar.gz or pip wheel) into DEST."""
    d = dep(name)
    stamp = os.path.join(dest, ".sgl_dep_stamp")
    stamp_text = f"{name} {d['version']} {os.path.basename(archive)}\n"
    if os.path.isfile(stamp) and open(stamp).read() == stamp_text:
        return dest
    parent = os.path.dirname(os.path.abspath(dest))
    os.makedirs(parent, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{name}-", dir=parent)
    try:
        if archive.endswith(".whl"):
            prefix = d["wheel_root"].rstrip("/") + "/"
            with zipfile.ZipFile(archive) as z:
                for info in z.infolist():
                    if info.is_dir() or not info.filename.startswith(prefix):
                        continue
                    rel = info.filename[len(prefix):]
                    if not _kept(rel, d["keep"]):
                        continue
                    out = os.path.join(tmp, rel)
                    os.makedirs(os.path.dirname(out), exist_ok=True)
                    with z.open(info) as src, open(out, "wb") as dst:
                        shutil.copyfileobj(src, dst)
        else:
            with tarfile.open(archive) as t:
                members = [m for m in t.getmembers()
                           if (m.isfile() or m.isdir()) and _kept(m.name.lstrip("./"), d["keep"])]
                if hasattr(tarfile, "data_filter"):
                    t.extractall(tmp, members=members, filter="data")
                else:
                    t.extractall(tmp, members=members)
        missing = [k for k in d["keep"] if not os.path.isdir(os.path.join(tmp, k))]
        if missing:
            sys.exit(f"deps.py: {archive} lacks {', '.join(missing)} for {name}")
        with open(os.path.join(tmp, ".sgl_dep_stamp"), "w") as f:
            f.write(stamp_text)
        if os.path.exists(dest):
            shutil.rmtree(dest)
        os.replace(tmp, dest)
    finally:
        if os.path.exists(tmp):
            shutil.rmtree(tmp, ignore_errors=True)
    return dest


def _download_with_pip(d: dict, directory: str, timeout: int) -> bool:
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "-q", "-d", directory,
           f"{d['pypi_name']}=={d['pypi_version']}"]
    try:
        subprocess.run(cmd, check=True, timeout=timeout, stdout=sys.stderr)
        return True
    except (subprocess.SubprocessError, OSError) as exc:
        print(f"deps.py: pip download of {d['pypi_name']} failed: {exc}", file=sys.stderr)
        return False


def _download_with_urllib(name: str, d: dict, directory: str, timeout: int) -> bool:
    """PEP 691 JSON simple index (build environments of uv and others have no pip)."""
    import fnmatch
    import hashlib
    import urllib.request

    index = os.environ.get("PIP_INDEX_URL") or os.environ.get("UV_INDEX_URL") or "https://pypi.org/simple"
    url = f"{index.rstrip('/')}/{d['pypi_name']}/"
    try:
        req = urllib.request.Request(url, headers={"Accept": "application/vnd.pypi.simple.v1+json"})
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            files = json.load(resp).get("files", [])
        pattern = wheel_glob(name)
        matches = [f for f in files if fnmatch.fnmatch(f["filename"], pattern)]
        if not matches:
            print(f"deps.py: no {pattern} at {url}", file=sys.stderr)
            return False
        entry = matches[0]
        target = os.path.join(directory, entry["filename"])
        with urllib.request.urlopen(entry["url"], timeout=timeout) as resp:
            data = resp.read()
        want = entry.get("hashes", {}).get("sha256")
        if want and hashlib.sha256(data).hexdigest() != want:
            print(f"deps.py: sha256 mismatch for {entry['filename']}", file=sys.stderr)
            return False
        with open(target + ".part", "wb") as f:
            f.write(data)
        os.replace(target + ".part", target)
        return True
    except Exception as exc:  # network errors of every kind: report, fall through to git
        print(f"deps.py: download of {d['pypi_name']} from {url} failed: {exc}", file=sys.stderr)
        return False


def download(name: str, directory: str, timeout: int = 300) -> str | None:
    """Download the pinned wheel (no dependencies) from the package index: with pip when
    this interpreter has it, else straight from the index's JSON simple API."""
    d = dep(name)
    os.makedirs(directory, exist_ok=True)
    found = find_archive(name, directory)
    if found:
        return found
    have_pip = importlib.util.find_spec("pip") is not None
    if not (have_pip and _download_with_pip(d, directory, timeout)):
        _download_with_urllib(name, d, directory, timeout)
    return find_archive(name, directory)


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    cmd, name, *rest = argv
    if cmd == "locate":
        out = locate_installed(name)
    elif cmd == "find":
        out = find_archive(name, rest[0])
    elif cmd == "extract":
        out = extract(name, rest[0], rest[1])
    elif cmd == "download":
        out = download(name, rest[0])
    else:
        print(__doc__, file=sys.stderr)
        return 2
    if out:
        print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
