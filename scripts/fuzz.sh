#!/usr/bin/env bash
# Fuzzes tprobe's parsers (docs/reliability.md, "Fuzzing"): installs clang and libFuzzer if missing
# (Debian 12, idempotent), builds the libFuzzer targets of tests/fuzz with ASan and UBSan into
# build-fuzz/, and runs each target for FUZZ_SECONDS on a scratch copy of its seed corpus
# (tests/fuzz/corpus/<target>/ plus tests/fuzz/regressions/<target>/; the checked-in folders are
# never written). Works from any directory.
#
# Environment:
#   FUZZ_SECONDS   seconds per target (default 30)
#   FUZZ_TARGETS   targets to run (default: "record manifest config dump_json npy")
#   FUZZ_JOBS      build jobs (default: nproc)
#   FUZZ_WORK      scratch folder, emptied first (default: build-fuzz/fuzz-work); reproducers stay
#                  there after the run
#
# Exit status: 0 when no target found anything, 1 when one crashed, leaked, hung past 10 s or went
# over 2 GB (each reproducer path is printed with the command that replays it), other non-zero
# when the setup or the build failed.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

seconds="${FUZZ_SECONDS:-30}"
targets="${FUZZ_TARGETS:-record manifest config dump_json npy}"
jobs="${FUZZ_JOBS:-$(nproc)}"
build="$root/build-fuzz"
work="${FUZZ_WORK:-$build/fuzz-work}"

# clang and its libFuzzer runtime, plus what CMake needs to configure tprobe (the list of
# scripts/setup.sh without g++ and LibTorch, which a fuzz build does not use).
packages=(
  clang libclang-rt-dev cmake make pkg-config
  libzmq3-dev cppzmq-dev libmsgpack-cxx-dev libmsgpuck-dev nlohmann-json3-dev liblz4-dev libfmt-dev
  libcli11-dev zlib1g-dev libxlsxwriter-dev libdlpack-dev libsqlite3-dev
)
. "$root/scripts/apt-ensure.sh"
apt_ensure fuzz "${packages[@]}"

echo "fuzz: configuring and building the fuzz targets in build-fuzz/ (clang, ASan, UBSan)"
cmake -S "$root" -B "$build" -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTPROBE_BUILD_FUZZ=ON -DTPROBE_BUILD_TESTS=OFF -DTPROBE_BUILD_BENCH=OFF >/dev/null
cmake --build "$build" --target tprobe_fuzz -j"$jobs"

rm -rf "$work"
mkdir -p "$work"
echo "fuzz: running each target for ${seconds} s in $work"
summary=()
findings=()
for t in $targets; do
  bin="$build/bin/fuzz_$t"
  [ -x "$bin" ] || { echo "fuzz: no target $t (known: record manifest config dump_json npy)" >&2; exit 2; }
  corpus="$work/$t/corpus"
  artifacts="$work/$t/findings"
  mkdir -p "$corpus" "$artifacts"
  cp -r "$root/tests/fuzz/corpus/$t/." "$corpus/"
  [ -d "$root/tests/fuzz/regressions/$t" ] && cp -r "$root/tests/fuzz/regressions/$t/." "$corpus/"
  dict=()
  [ -f "$root/tests/fuzz/dict/$t.dict" ] && dict=(-dict="$root/tests/fuzz/dict/$t.dict")
  echo "fuzz: $t: $bin ${dict[*]} $corpus"
  start=$(date +%s)
  rc=0
  # libFuzzer stops at its first finding and saves the input under -artifact_prefix; the log
  # keeps the sanitizer report.
  ASAN_OPTIONS="${ASAN_OPTIONS:-}:detect_leaks=1" UBSAN_OPTIONS="${UBSAN_OPTIONS:-}:print_stacktrace=1" \
    "$bin" -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -print_final_stats=1 \
    -artifact_prefix="$artifacts/" "${dict[@]}" "$corpus" >"$work/$t/log" 2>&1 || rc=$?
  elapsed=$(( $(date +%s) - start ))
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/$t/log" | tail -1)
  found=$(find "$artifacts" -type f \( -name 'crash-*' -o -name 'leak-*' -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  count=0
  [ -n "$found" ] && count=$(printf '%s\n' "$found" | wc -l)
  if [ "$count" -eq 0 ] && [ "$rc" -ne 0 ]; then
    # A finding libFuzzer could not save, or a failure to start: report the log, not success.
    echo "fuzz: $t: exited with status $rc and saved no input; log: $work/$t/log" >&2
    tail -20 "$work/$t/log" >&2
    findings+=("$t: exit status $rc, see $work/$t/log")
    count=1
  fi
  while IFS= read -r f; do
    [ -n "$f" ] || continue
    echo "fuzz: $t: FOUND $f (replay: $bin $f; report: $work/$t/log)" >&2
    findings+=("$t: $f")
  done <<<"$found"
  summary+=("fuzz: $t: ${execs:-0} execs in ${elapsed} s, ${count} crashes")
done

printf '%s\n' "${summary[@]}"
if [ ${#findings[@]} -gt 0 ]; then
  echo "fuzz: ${#findings[@]} finding(s); add each input to tests/fuzz/regressions/<target>/ with its fix:" >&2
  printf '  %s\n' "${findings[@]}" >&2
  exit 1
fi
