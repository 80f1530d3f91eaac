#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Link diagnostics of the installed common_ops module: size, NEEDED libraries, std:: symbols it
# defines itself (a private libstdc++ shows up here), the link line, and a backtrace of an op
# error path under cuda-gdb when one is available.
so=$(python3 -c 'import glob, os, sgl_kernel; print(glob.glob(os.path.join(os.path.dirname(sgl_kernel.__file__), "common_ops*.so"))[0])')
ls -la "$so"
readelf -d "$so" | grep -E "NEEDED|RUNPATH|RPATH"
echo "std:: symbols defined in the module: $(nm -DC --defined-only "$so" | grep -c ' std::')"
nm -DC --defined-only "$so" | grep ' std::' | head -5
grep -h -A6 "^build common_ops" build/*/build.ninja | grep -E "LINK_LIBRARIES|LINK_FLAGS|LINK_PATH" | cut -c1-1500
for c in /opt/gcc/bin/g++ /usr/bin/g++-13 g++; do echo "$c: $($c -print-file-name=libstdc++.so) $($c -print-file-name=libstdc++.a)"; done
if command -v cuda-gdb > /dev/null; then
  cuda-gdb -batch -ex run -ex bt --args python3 -c "import torch, sgl_kernel; torch.ops.sgl_kernel.silu_and_mul.default(torch.empty(4, 16, device='cuda'), torch.ones(4, 33, device='cuda'))" 2>&1 | grep -E "^#|signal|Error" | head -25
fi
