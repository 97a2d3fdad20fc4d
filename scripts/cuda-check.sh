#!/usr/bin/env bash
# The checks that need a GPU (issue 16 item 4; docs/performance.md "CUDA path"). On a machine with
# a CUDA GPU and a Python whose torch has CUDA (a pip torch 2.x), it
#   1. builds tprobe against that torch into build-cuda/ (the capture is compiled against torch 2.x
#      here, against Debian's 1.13 everywhere else);
#   2. runs the device-path tests on the GPU (tests/python/test_device_path.py CudaDevicePathTest:
#      the device path's dump against blocking per-tensor reads, under torch's sync guard; with
#      TPROBE_DEVICE_STATS=kernel, CudaKernelDevicePathTest; the same file's CPU tests run in ctest
#      everywhere) and the monitor's (test_monitor.py CudaMonitorTest);
#   3. runs bench/bench_torch.py --device cuda (CUDA_BENCH_ARGS, resnet18's statistics, md5 and
#      tensor rows by default), which prints the step ratios and the device path's own account,
#      and msprobe's ratio beside each row where .msprobe-src/ (msprobe's source tree) was carried;
#   4. runs the other Python tests against this torch on the CPU, beside step 2 (CUDA_SUITE=0 skips
#      them);
#   5. (first, after the build) pip installs the package from build-cuda/ into build-cuda/venv and
#      loads the installed capture with no PYTHONPATH.
# Each phase has a time limit (CUDA_*_SECONDS) so that one stuck phase cannot take the others'
# time on a lent machine. Needs what scripts/setup.sh installs except libtorch and the browser; on a
# machine without apt, run scripts/gpu-deps-fetch.sh here first, carry .devdeps/, and there
# `. scripts/gpu-deps-install.sh` before this script.
# Usage: scripts/cuda-check.sh [LOG_DIR]   (default build-cuda/logs; PYTHON, default python3;
#        CUDA_TESTS: the unittest names of phase 2, default test_device_path's CudaDevicePathTest and
#        CudaKernelDevicePathTest, and test_monitor's CudaMonitorTest (the monitor's device path);
#        - skips it)
set -uo pipefail
cd "$(dirname "$0")/.."
root=$PWD
logs=$(mkdir -p "${1:-build-cuda/logs}" && cd "${1:-build-cuda/logs}" && pwd)
python=${PYTHON:-python3}
build=$root/build-cuda
say() { echo "cuda-check: $*"; }
fatal() { say "fatal: $*"; exit 111; }

say "environment (env.log)"
{
  date -u; uname -a; nvidia-smi -L; nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem --format=csv
  "$python" -c 'import sys, torch; print(sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda,
    "available", torch.cuda.is_available(), torch.cuda.get_device_name(0) if torch.cuda.is_available() else "")'
  cmake --version | head -1; c++ --version | head -1; nproc; df -h "$root" | tail -1
} > "$logs/env.log" 2>&1
cat "$logs/env.log"

# torch's CMake package looks for the CUDA toolkit; its usual home may be off the PATH.
if ! command -v nvcc > /dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=$PATH:/usr/local/cuda/bin; fi
torch_dir=$("$python" -c 'import torch.utils; print(torch.utils.cmake_prefix_path)')/Torch || fatal "$python cannot import torch"
generator=() keep_going=(-k)
if command -v ninja > /dev/null; then generator=(-G Ninja) keep_going=(-k 0); fi
say "configuring build-cuda against $torch_dir (configure.log)"
timeout "${CUDA_CONFIGURE_SECONDS:-180}" cmake -S . -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DTorch_DIR="$torch_dir" -DTPROBE_BUILD_TESTS=OFF -DTPROBE_BUILD_BENCH=OFF > "$logs/configure.log" 2>&1 \
  || { tail -30 "$logs/configure.log"; fatal "unable to configure build-cuda: see configure.log"; }
say "building (build.log)"
# Keep going past an error: one run on a lent machine should show every error there is.
timeout "${CUDA_BUILD_SECONDS:-420}" cmake --build "$build" -j"$(nproc)" -- "${keep_going[@]}" > "$logs/build.log" 2>&1
status=$?
grep -E "error|Error" "$logs/build.log" | head -40
[ $status -eq 0 ] || fatal "unable to build build-cuda (status $status): see build.log"
[ -f "$build/lib/libtprobe_torch.so" ] || fatal "build-cuda has no libtprobe_torch.so: CMake did not find torch (configure.log)"

# pip install . (issue 67 item 5) from the tree just built, into a venv that sees this Python's
# torch; the installed package must load its capture and find its binaries with no PYTHONPATH.
say "pip install . into build-cuda/venv (pip.log)"
{
  rm -rf "$build/venv" && "$python" -m venv --system-site-packages "$build/venv" &&
  env -u PYTHONPATH TPROBE_CMAKE_BUILD_DIR="$build" PIP_NO_INDEX=1 \
    "$build/venv/bin/pip" install --no-build-isolation "$root" &&
  (cd "$build" && env -u PYTHONPATH "$build/venv/bin/python" -c \
    'import tprobe._native as n; n.load(); print("installed:", n._library_path, n.bin_dir())')
} > "$logs/pip.log" 2>&1 || { failed_pip=1; say "pip install failed: see pip.log"; }
tail -2 "$logs/pip.log"

export PYTHONPATH=$root/python:$root/tests/python${PYTHONPATH:+:$PYTHONPATH}
export TPROBE_TORCH_LIBRARY=$build/lib/libtprobe_torch.so TPROBE_BIN_DIR=$build/bin TPROBE_PIPELINES=$root/pipelines
export TPROBE_TEST_TMP=$build/test-tmp PYTHONDONTWRITEBYTECODE=1 PYTHONUNBUFFERED=1
failed=${failed_pip:-0}

# Phase 4 runs beside phase 2 (it uses the CPUs, the tests the GPU), so that one lent call holds
# both; it is waited for before the benchmark, whose timings it would disturb.
suite_pid=
if [ "${CUDA_SUITE:-1}" = 1 ]; then
  say "the Python tests against this torch, CPU, beside the GPU tests (suite.log)"
  # The browser test needs chromium and the stage kit pyzmq: run where those are.
  tests=$(cd tests/python && ls test_*.py | sed 's/\.py$//' | grep -v -e test_report_browser -e test_stage_kit -e test_device_path)
  (cd tests/python && printf '%s\n' $tests | CUDA_VISIBLE_DEVICES= timeout "${CUDA_SUITE_SECONDS:-300}" \
     xargs -P "$(( $(nproc) / 2 > 1 ? $(nproc) / 2 : 1 ))" -I{} \
     sh -c '"$0" -m unittest {} > "$1/suite-{}.txt" 2>&1 && echo "PASS {}" || echo "FAIL {}"' "$python" "$build") \
     > "$logs/suite.log" 2>&1 &
  suite_pid=$!
fi

say "device-path tests on the GPU (test.log)"
read -r -a gpu_tests <<< "${CUDA_TESTS:-test_device_path.CudaDevicePathTest test_device_path.CudaKernelDevicePathTest test_monitor.CudaMonitorTest}"
if [ "${gpu_tests[*]}" = - ]; then
  say "skipped (CUDA_TESTS=-)"
else
  (cd tests/python && timeout "${CUDA_TEST_SECONDS:-240}" "$python" -m unittest -v "${gpu_tests[@]}") > "$logs/test.log" 2>&1 \
    || failed=1
  tail -25 "$logs/test.log"
fi

if [ -n "$suite_pid" ]; then
  wait "$suite_pid" || failed=1
  for f in "$build"/suite-*.txt; do echo "=== $f"; tail -40 "$f"; done >> "$logs/suite.log"
  grep -E "^(PASS|FAIL) " "$logs/suite.log"
fi

# msprobe 8.3.3 beside tprobe in every bench row (issue 67 item 1): its source tree as
# /tmp/msprobe-src holds it, copied into .msprobe-src/ and carried with the call.
against=()
if [ -d "$root/.msprobe-src/debug/accuracy_tools/msprobe" ]; then
  export PYTHONPATH=$PYTHONPATH:$root/.msprobe-src/debug/accuracy_tools:$root/.msprobe-src/deps
  against=(--against msprobe)
fi
say "benchmark (bench.log)${against:+, against msprobe}"
read -r -a bench_args <<< "${CUDA_BENCH_ARGS:---model resnet18 --configs control,statistics_L1,statistics_L1_kernel,md5,tensor --rounds 4}"
timeout "${CUDA_BENCH_SECONDS:-300}" "$python" bench/bench_torch.py --device cuda "${against[@]}" "${bench_args[@]}" > "$logs/bench.log" 2>&1 \
  || failed=1
cat "$logs/bench.log"

say "done (status $failed)"
exit $failed
