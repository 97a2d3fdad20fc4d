#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs every test: unit tests, end-to-end tests that run
# the real binaries over real sockets (fault injection included), the Python tests with real
# PyTorch, then each fuzz target for a bounded time (scripts/fuzz.sh; FUZZ_SECONDS, 30 by default).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
# clang compiles the statistics kernel to PTX in a test (tests/cmake/test_segment_kernel_ptx.cmake).
. scripts/apt-ensure.sh
apt_ensure test clang
echo "test: running ctest"
(cd build && ctest --output-on-failure -j"$(nproc)" --timeout 900 | tee ctest.log)
echo "test: fuzzing each parser for ${FUZZ_SECONDS:-30} s (scripts/fuzz.sh)"
scripts/fuzz.sh
# ctest's verdict again, last, where a reader (and CI) looks for it.
echo "test: ctest said:"
grep -E "tests passed|tests failed" build/ctest.log | tail -1
