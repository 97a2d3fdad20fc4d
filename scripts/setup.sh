#!/usr/bin/env bash
# Installs what tprobe needs on a fresh Debian 12 machine (idempotent), then configures and builds
# it into build/. Run as root (or with sudo rights for apt-get).
set -euo pipefail
cd "$(dirname "$0")/.."

packages=(
  g++ cmake make pkg-config
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libmsgpuck-dev nlohmann-json3-dev liblz4-dev libfmt-dev
  libcli11-dev zlib1g-dev libisal-dev libxlsxwriter-dev libdlpack-dev libgtest-dev libgmock-dev
  # the graph compare's vis.db (msprobe's SQLite file), and sqlite3 to look into one
  libsqlite3-dev sqlite3
  libtorch-dev python3-torch python3-torchvision python3-numpy
  # pip install . (setup.py drives CMake; no package index needed) and its test's venv
  python3-pip python3-setuptools python3-wheel python3-venv
  # stages written in Python (python/tprobe/stage.py, docs/stage-protocol.md)
  python3-zmq python3-msgpack
  # the report page's browser test and benchmark: headless chromium driven through selenium
  chromium chromium-driver python3-selenium
)
. scripts/apt-ensure.sh
apt_ensure setup "${packages[@]}"

echo "setup: configuring and building tprobe in build/"
cmake -S . -B build -DCMAKE_BUILD_TYPE=Release
cmake --build build -j"$(nproc)"
echo "setup: done; binaries are in build/bin/"
