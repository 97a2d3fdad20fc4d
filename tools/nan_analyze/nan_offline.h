// nan_offline.h: tprobe-nan-analyze, the offline front door of the NaN/Inf analysis of
// core/nan_analyze.h; the live one is stages/stream/nan_live/nan_live.h.
//
// Offline, tprobe-nan-analyze (`tprobe nan-analyze STEPDIR -o OUTDIR`): a step folder's rank
// folders (dump.json, stack.json, construct.json) are analysed at once:
//   tprobe nan-analyze ./dump/step0 -o ./output [--config config.json]
// prints one line on stdout ("tprobe-nan-analyze: first producer: rank 1 Torch.exp.0.forward (…)")
// and writes OUTDIR/anomaly_analyze_{ns}.json; exit 1 when a producer was found, 0 when none.
//
// Errors: usage_error (bad rules, no rank folders), system_error (files).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "nan_analyze.h"
#include "stage_main.h"

namespace tprobe {

struct nan_offline_options {
  std::string step_dir;
  std::string output_dir = "./output";
  std::string config_path;  // "" = default rules; else its tprobe.nan_analyze
};

struct nan_offline_report {
  std::optional<nan_verdict> verdict;
  std::string file;  // written result ("" when nothing was found)
  std::vector<std::string> warnings;
  size_t ranks = 0, entries = 0;
};

const stage_description &nan_analyze_stage_description();
nan_offline_report nan_offline_run(const nan_offline_options &o);

}  // namespace tprobe
