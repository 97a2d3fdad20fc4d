#!/usr/bin/env bash
# The main job: install and build (scripts/setup.sh), then dump real PyTorch training runs of the
# examples and compare a float32 run against a bfloat16 run. Everything lands in ./dump_path/ and
# ./output/:
#   dump_path/resnet18_fp32/       resnet18, statistics L1, direct mode (PrecisionDebugger starts
#                                  its own pipeline)
#   dump_path/resnet18_fp32_run/   the same run through `tprobe run pipelines/statistics.json`
#   dump_path/resnet18_bf16/       resnet18, statistics L1, bfloat16 autocast
#   dump_path/transformer_fp32/    transformer encoder, task tensor (statistics and .npy files)
#   dump_path/transformer_bf16/    the same in bfloat16 autocast
#   dump_path/producer/{statistics,tensor}/   the C example producer (2 ranks) through both pipelines
#   output/compare_resnet18/       tprobe compare: bf16 (as NPU) against fp32 (as bench), statistics
#   output/compare_transformer/    the same on the tensor dumps (real-data metrics)
#   output/compare_live/           live compare, no dump: pipelines/compare-live.json runs the
#                                  transformer twice (float32, bfloat16) into tprobe-compare-live
#   dump_path/transformer_mix_{fp32,bf16}/, output/compare_transformer_mix/
#                                  the transformer at level mix (modules and operators), compared:
#                                  its construct.json gives the report its module tree
#   output/precheck_transformer_bf16/  tprobe precheck of the bf16 transformer's tensor dump (msprobe's
#                                  run_ut, no reference run): accuracy_checking_{result,details}_{ts}.csv
#   output/report.html             tprobe report over every result above: open it first
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh

root=$PWD
python=/usr/bin/python3  # Debian's Python, where python3-torch is installed
export PYTHONPATH="$root/python${PYTHONPATH:+:$PYTHONPATH}"
unset TPROBE_ENDPOINT TPROBE_CONFIG  # direct mode unless `tprobe run` sets them
steps=2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# config NAME OUT: examples/configs/NAME.json with dump_path set to OUT, written to $tmp.
config() {
  "$python" - "$root/examples/configs/$1.json" "$2" "$tmp/$1-$(basename "$2").json" <<'EOF'
import json, sys
doc = json.load(open(sys.argv[1]))
doc["dump_path"] = sys.argv[2]
json.dump(doc, open(sys.argv[3], "w"), indent=1)
print(sys.argv[3])
EOF
}

# train EXAMPLE CONFIG OUT [ARGS...]: one example run, direct mode, dump in OUT.
train() {
  local example=$1 name=$2 out=$3
  shift 3
  rm -rf "$out"
  echo "demo: examples/train_$example.py --config examples/configs/$name.json${*:+ $*} (dump in $out)"
  "$python" "examples/train_$example.py" --steps "$steps" --config "$(config "$name" "$out")" "$@"
}

# compare NAME NPU_STEP BENCH_STEP: tprobe compare; exit status 1 (differences found) is expected.
compare() {
  local out="$root/output/compare_$1"
  rm -rf "$out"
  echo "demo: tprobe compare $2 $3 -o $out"
  local status=0
  build/bin/tprobe compare "$2" "$3" -o "$out" --highlight || status=$?
  case $status in
    0) echo "demo: compare $1: no differences beyond the thresholds" ;;
    1) echo "demo: compare $1: differences found (expected for bfloat16 against float32)" ;;
    *) echo "demo: compare $1 failed with status $status" >&2; return "$status" ;;
  esac
}

dp="$root/dump_path"
train resnet18 statistics_L1 "$dp/resnet18_fp32"
train resnet18 statistics_L1 "$dp/resnet18_bf16" --dtype bfloat16

out="$dp/resnet18_fp32_run"
rm -rf "$out"
cfg=$(config statistics_L1 "$out")
echo "demo: tprobe run pipelines/statistics.json -- examples/train_resnet18.py (dump in $out)"
build/bin/tprobe run pipelines/statistics.json --config "$cfg" -- \
  "$python" examples/train_resnet18.py --steps "$steps" --config "$cfg"

train transformer tensor "$dp/transformer_fp32"
train transformer tensor "$dp/transformer_bf16" --dtype bfloat16
train transformer statistics_mix "$dp/transformer_mix_fp32"
train transformer statistics_mix "$dp/transformer_mix_bf16" --dtype bfloat16

for task in statistics tensor; do
  out="$dp/producer/$task"
  rm -rf "$out"
  cfg=$(config statistics_L1 "$out")
  echo "demo: tprobe run pipelines/$task.json -- tprobe-example-producer (dump in $out)"
  build/bin/tprobe run "pipelines/$task.json" --config "$cfg" -- \
    build/bin/tprobe-example-producer --steps 3 --world-size 2
done

compare resnet18 "$dp/resnet18_bf16/step0" "$dp/resnet18_fp32/step0"
compare transformer "$dp/transformer_bf16/step0" "$dp/transformer_fp32/step0"
compare transformer_mix "$dp/transformer_mix_bf16/step0" "$dp/transformer_mix_fp32/step0"

# Pre-check (msprobe's run_ut) of the bfloat16 transformer's tensor dump, no reference run: every
# API replayed on the CPU one precision higher; exit 1 would name a kernel worse than bf16 rounding.
out="$root/output/precheck_transformer_bf16"
rm -rf "$out"
echo "demo: tprobe precheck $dp/transformer_bf16/step0/rank -o $out -j $(nproc)"
status=0
build/bin/tprobe precheck "$dp/transformer_bf16/step0/rank" -o "$out" -j "$(nproc)" || status=$?
case $status in
  0) echo "demo: precheck: every API replayed passes msprobe's standards" ;;
  1) echo "demo: precheck: an API is not pass (see the report)" ;;
  *) echo "demo: precheck failed with status $status" >&2; exit "$status" ;;
esac

# Live: pipelines/compare-live.json with its result folder set, bfloat16 (run b) as NPU.
out="$root/output/compare_live"
rm -rf "$out"
"$python" - "$root/pipelines/compare-live.json" "$out" "$tmp/compare-live.json" <<'EOF'
import json, sys
manifest = json.load(open(sys.argv[1]))
for stage in manifest["stages"]:
    if stage["stage"] == "compare-live":
        stage["options"].update({"output-dir": sys.argv[2], "npu": "b", "bench": "a"})
json.dump(manifest, open(sys.argv[3], "w"), indent=1)
EOF
cfg=$(config tensor "$tmp/unused")
echo "demo: tprobe run pipelines/compare-live.json -- examples/train_transformer.py (float32 and bfloat16, results in $out)"
status=0
build/bin/tprobe run "$tmp/compare-live.json" --config "$cfg" -- \
  "$python" examples/train_transformer.py --steps "$steps" --config "$cfg" || status=$?
case $status in
  0) echo "demo: compare live: no differences beyond the thresholds" ;;
  1) echo "demo: compare live: differences found (expected for bfloat16 against float32)" ;;
  *) echo "demo: compare live failed with status $status" >&2; exit "$status" ;;
esac

echo "demo: done. Dumps (step{N}/rank/dump.json, stack.json, construct.json; dump_tensor_data/ for tensor):"
for d in resnet18_fp32 resnet18_fp32_run resnet18_bf16 transformer_fp32 transformer_bf16 transformer_mix_fp32 transformer_mix_bf16 producer/statistics producer/tensor; do
  echo "  dump_path/$d/"
done
echo "Compare results (bfloat16 as NPU, float32 as bench):"
for d in output/compare_resnet18 output/compare_transformer output/compare_transformer_mix output/compare_live; do
  for f in "$d"/*; do echo "  $f"; done
done

# The report: every result above on one page, and its verdicts in a few lines (exit 1: differences
# found, as expected for bfloat16 against float32).
echo "demo: tprobe report output/compare_* output/precheck_transformer_bf16 -o output/report.html"
status=0
build/bin/tprobe report output/compare_resnet18 output/compare_transformer output/compare_transformer_mix \
  output/compare_live output/precheck_transformer_bf16 -o "$root/output/report.html" --title "tprobe demo: bfloat16 against float32" || status=$?
case $status in
  0|1) ;;
  *) echo "demo: tprobe report failed with status $status" >&2; exit "$status" ;;
esac
echo "demo: every compare above pits a float32 run against the same run in bfloat16, so a FAIL verdict is"
echo "demo: the expected answer (exit 1 from compare is a mismatch found, not an error): the rows show where bf16 departs"
echo "demo: open this first: $root/output/report.html"
