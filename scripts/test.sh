#!/usr/bin/env bash
# Sets everything up (scripts/setup.sh) and runs every test: unit tests, then end-to-end tests
# that run the real binaries over real sockets.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
echo "test: running ctest"
cd build
ctest --output-on-failure -j"$(nproc)" --timeout 900
