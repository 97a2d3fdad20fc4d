#!/usr/bin/env bash
# Downloads, on a Debian 12 machine, the build dependencies scripts/cuda-check.sh needs on a lent GPU
# machine that has no apt repository and no network (docs/performance.md "What to measure on a
# GPU"): the packages of scripts/setup.sh that such a machine lacks, as .deb files in .devdeps/
# (git ignores it; name it in the device tool's carry), plus, in .devdeps/fallback/, runtime
# libraries that scripts/gpu-deps-install.sh uses only where the machine has none of its own.
# Idempotent: apt-get download skips nothing, so an existing .devdeps/ is left as it is.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=.devdeps
if [ -f $dir/.complete ]; then echo "gpu-deps-fetch: $dir/ is already complete"; exit 0; fi
mkdir -p $dir/fallback
# Headers, CMake packages and libraries of the build (libmsgpack-cxx-dev 4.x needs Boost's headers).
packages=(libzmq3-dev libzmq5 libsodium23 libpgm-5.3-0 libnorm1 cppzmq-dev libmsgpack-cxx-dev
  libboost1.74-dev libboost-dev libmsgpuck-dev nlohmann-json3-dev libfmt-dev libfmt9 libcli11-dev
  libisal-dev libisal2 libdlpack-dev libxlsxwriter-dev libxlsxwriter4 libminizip1 zlib1g-dev liblz4-dev
  libsqlite3-dev libsqlite3-0
  pkgconf pkgconf-bin libpkgconf3)
fallback=(libbsd0 libmd0 libgssapi-krb5-2 libkrb5-3 libk5crypto3 libkrb5support0 libcom-err2
  libkeyutils1 liblz4-1 zlib1g)
echo "gpu-deps-fetch: apt-get download ${#packages[@]} packages into $dir/, ${#fallback[@]} into $dir/fallback/"
# apt-get download writes into the current directory as the _apt user where it can; as root into
# a directory _apt cannot write it warns and downloads anyway.
(cd $dir && apt-get download "${packages[@]}")
(cd $dir/fallback && apt-get download "${fallback[@]}")
touch $dir/.complete
echo "gpu-deps-fetch: done, $(du -sh $dir | cut -f1) in $dir/"
