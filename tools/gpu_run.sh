#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One full GPU-host run: build from the offline bundle (no network), the op self check, the
# test suite, and the benchmarks. Logs go to $OUT (default gpu_out/):
#   run.log    environment, build, python -m sgl_kernel, pytest
#   bench.tgz  every benchmark's CSV/JSON/PNG and log (one file: the device tool returns few)
# and each benchmark's summary is printed last.
# Usage: bash tools/gpu_run.sh [--no-build] [--no-tests] [--no-bench] [--quick]
#                              [--tests "PYTEST ARGS"] [--bench "SCRIPT ..."] [--max-seconds N]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
LOG="$OUT/run.log"
export PYTHONUNBUFFERED=1
build=1 tests=1 bench=1 quick="" test_args="tests/" benches="" max_s=120
while [ $# -gt 0 ]; do
  case "$1" in
    --no-build) build=0 ;;
    --no-tests) tests=0 ;;
    --no-bench) bench=0 ;;
    --quick) quick="--quick" ;;
    --tests) shift; test_args="$1" ;;
    --bench) shift; benches="$1" ;;
    --max-seconds) shift; max_s="$1" ;;
  esac
  shift
done

section() { echo; echo "=== $* ($(date +%T))"; }
{
  section environment
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv
  python3 -c "import torch, sys; print('python', sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda)"
  nvcc --version | tail -2
  cmake --version | head -1
  env | grep -E "^(CC|CXX|CUDAHOSTCXX|LIBRARY_PATH|LD_LIBRARY_PATH|LDFLAGS|CXXFLAGS|CUDA_HOME)=" || true

  if [ "$build" = 1 ]; then
    section "build from the offline bundle"
    python3 -m pip install -q --no-index --find-links .bundle/wheels scikit-build-core
    mkdir -p build
    t0=$(date +%s)
    if python3 -m pip install --no-build-isolation --no-deps -v . > build/gpu-build.txt 2>&1; then
      echo "build OK in $(( $(date +%s) - t0 )) s"
    else
      echo "BUILD FAILED after $(( $(date +%s) - t0 )) s"; tail -n 80 build/gpu-build.txt
    fi
    grep -E "^ *-- +[a-z].*: |\[[0-9]+/[0-9]+\]" build/gpu-build.txt
    so=$(python3 -c 'import glob, os, sgl_kernel; print(glob.glob(os.path.join(os.path.dirname(sgl_kernel.__file__), "common_ops*.so"))[0])')
    ls -la "$so"; ldd "$so" | grep -E "stdc|cudart|torch" || true
  fi

  section "python -m sgl_kernel"
  python3 -m sgl_kernel

  if [ "$tests" = 1 ]; then
    section "pytest $test_args"
    # shellcheck disable=SC2086
    timeout "${PYTEST_TIMEOUT:-300}" python3 -m pytest $test_args -q -rfE -p no:cacheprovider --durations=15
  fi
} 2>&1 | tee "$LOG"

if [ "$bench" = 1 ]; then
  bdir=$(mktemp -d)
  [ -n "$benches" ] || benches=$(ls benchmark/*/bench_*.py)
  for script in $benches; do
    name=$(basename "$script" .py)
    echo "=== $name ($(date +%T))"
    # shellcheck disable=SC2086
    python3 "$script" --out "$bdir/$name" --max-seconds "$max_s" $quick > "$bdir/$name.log" 2>&1
    echo "exit $?" >> "$bdir/$name.log"
    tar -C "$bdir" -czf "$OUT/bench.tgz" .  # after each: a run cut short keeps what finished
  done
  for log in "$bdir"/*.log; do
    echo; echo "##### $(basename "$log" .log)"
    sed -n '/=== SUMMARY/,$p' "$log" | grep -vE "^(outputs|wall time)" | cut -c1-400
  done
fi
