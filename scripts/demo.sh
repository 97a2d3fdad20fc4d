#!/usr/bin/env bash
# The main job on the example producer: dump 3 steps of 2 ranks through the statistics and the
# tensor pipelines into ./dump_path/{statistics,tensor}/step{S}/rank{R}/.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
for task in statistics tensor; do
  out="$PWD/dump_path/$task"
  rm -rf "$out"
  config=$(mktemp)
  sed "s|\"./dump_path\"|\"$out\"|" examples/config.json > "$config"
  echo "demo: tprobe run pipelines/$task.json (dump in $out)"
  build/bin/tprobe run "pipelines/$task.json" --config "$config" -- \
    build/bin/tprobe-example-producer --steps 3 --world-size 2
  rm -f "$config"
done
echo "demo: done; see dump_path/statistics/step0/rank0/dump.json"
