# Sourced on a lent GPU machine without apt or network (docs/performance.md "What to measure on a
# GPU"): unpacks the Debian 12 packages that scripts/gpu-deps-fetch.sh put in .devdeps/ into
# /opt/dd and points CMake, pkg-config and the loader at them, for scripts/cuda-check.sh.
# Usage: . scripts/gpu-deps-install.sh   (in the repository root; .devdeps/ carried there)
_here=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.devdeps" && pwd) || return 111
dd=/opt/dd
if [ ! -f $dd/.done ]; then
  mkdir -p $dd/extra $dd/fallback
  for f in "$_here"/*.deb; do dpkg -x "$f" $dd; done
  for f in "$_here"/fallback/*.deb; do dpkg -x "$f" $dd/fallback; done
  find $dd -name '*.pc' -exec sed -i "s|=/usr|=$dd/usr|g" {} +
  # Its Requires.private (krb5, sodium, pgm, norm, bsd) serve static linking only and are not carried.
  sed -i '/^Requires.private/d' $dd/usr/lib/x86_64-linux-gnu/pkgconfig/libzmq.pc
  # Development links whose library the image has (or the fallback holds).
  for l in $dd/usr/lib/x86_64-linux-gnu/*.so; do
    [ -e "$l" ] && continue
    name=$(basename "$l")
    sys=$(ldconfig -p | awk -v n="^$name[.]" '$1 ~ n && /x86-64/ {print $NF; exit}')
    [ -n "$sys" ] || sys=$(ls $dd/fallback/lib/x86_64-linux-gnu/$name.* $dd/fallback/usr/lib/x86_64-linux-gnu/$name.* 2>/dev/null | head -1)
    echo "gpu-deps-install: $name -> $sys"; ln -sf "$sys" "$l"
  done
  touch $dd/.done
fi
export CMAKE_PREFIX_PATH=$dd/usr${CMAKE_PREFIX_PATH:+:$CMAKE_PREFIX_PATH}
export PKG_CONFIG_PATH=$dd/usr/lib/x86_64-linux-gnu/pkgconfig:$dd/usr/share/pkgconfig
export LD_LIBRARY_PATH=$dd/usr/lib/x86_64-linux-gnu:$dd/extra${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
command -v pkg-config > /dev/null || export PATH=$PATH:$dd/usr/bin
# Runtime libraries the image lacks: only those, from the fallback, so the image's own stay first.
for pass in 1 2 3; do for so in $dd/usr/lib/x86_64-linux-gnu/libzmq.so.5 $dd/usr/lib/x86_64-linux-gnu/libxlsxwriter.so.4; do
  for miss in $(ldd "$so" | awk '/not found/ {print $1}'); do
    f=$(ls $dd/fallback/lib/x86_64-linux-gnu/$miss $dd/fallback/usr/lib/x86_64-linux-gnu/$miss 2>/dev/null | head -1)
    echo "gpu-deps-install: $miss from the fallback: $f"; [ -n "$f" ] && ln -sf "$f" $dd/extra/$miss
  done
done; done
for so in $dd/usr/lib/x86_64-linux-gnu/libzmq.so.5 $dd/usr/lib/x86_64-linux-gnu/libxlsxwriter.so.4; do
  ldd "$so" | grep "not found" && echo "gpu-deps-install: still missing for $so"
done
echo "gpu-deps-install: ready (pkg-config $(command -v pkg-config))"
