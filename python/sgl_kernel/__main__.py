# SPDX-License-Identifier: Apache-2.0
"""``python -m sgl_kernel [--json]``: describe the build and check every op on this GPU.

Exits 0 unless the package itself fails to import; failing ops are reported, not fatal.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sgl_kernel", description=__doc__)
    parser.add_argument("--json", action="store_true", help="print build_info() as JSON and exit")
    parser.add_argument("--no-check", action="store_true", help="skip the per-op check on the GPU")
    args = parser.parse_args(argv)

    try:
        import torch

        import sgl_kernel
        from sgl_kernel import info
    except ImportError as exc:
        print(f"sgl_kernel failed to import:\n{exc}", file=sys.stderr)
        return 1

    data = sgl_kernel.build_info()
    if args.json:
        print(json.dumps(data, indent=2))
        return 0

    print(f"sgl_kernel {data['version']} (sgl-kernel API {data['compat_version']})")
    print(f"  torch       : built {data['torch_version']}, running {data['torch_runtime_version']}")
    print(f"  CUDA (nvcc) : {data['cuda_version']}")
    print(f"  archs       : {', '.join(data['arch_list'])}")
    for fam, archs in data["family_archs"].items():
        print(f"  family {fam:<12}: {', '.join(archs) if archs else 'not compiled'}")
    for name, dep in data["deps"].items():
        print(f"  {name:<11} : {dep['version']} ({dep['origin']})")
    dev = data["device"]
    if dev is None:
        print("  device      : no CUDA GPU visible")
    else:
        print(f"  device      : {dev['name']} (sm_{dev['capability'][0]}{dev['capability'][1]})")

    checks = {}
    for mod in info.family_modules():
        checks.update(mod.self_checks())

    print(f"\nops ({len(data['ops'])} registered):")
    counts = {"PASS": 0, "FAIL": 0, "SKIP": 0}
    for op, available in sorted(data["ops"].items()):
        if dev is None or args.no_check:
            status, detail = "SKIP", "no GPU" if dev is None else "--no-check"
        elif not available:
            status, detail = "SKIP", "no kernel for this GPU in this build"
        elif op not in checks:
            status, detail = "SKIP", "no self check"
        else:
            start = time.perf_counter()
            try:
                checks[op]()
                torch.cuda.synchronize()
                status, detail = "PASS", f"{(time.perf_counter() - start) * 1e3:.1f} ms"
            except Exception as exc:  # report and go on
                status = "FAIL"
                detail = "".join(traceback.format_exception_only(type(exc), exc)).strip().splitlines()[0]
        counts[status] += 1
        print(f"  {status:<4} {op:<34} {detail}")
    print(f"\n{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
