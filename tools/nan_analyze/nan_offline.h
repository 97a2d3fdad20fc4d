// nan_offline.h: tprobe-nan-analyze, the offline front door of the NaN/Inf analysis of
// core/nan_analyze.h; the live one is stages/stream/nan_live/nan_live.h.
//
// Offline, tprobe-nan-analyze (`tprobe nan-analyze STEPDIR -o OUTDIR`): a step folder's rank
// folders (dump.json, stack.json, construct.json) are analysed at once:
//   tprobe nan-analyze ./dump/step0 -o ./output [--config config.json]
// prints one line on stdout ("tprobe-nan-analyze: first producer: rank 1 Torch.exp.0.forward (…)")
// and writes OUTDIR/anomaly_analyze_{ns}.json; exit 1 when a producer was found, 0 when none.
//
// A rank folder whose dump.json (or stack.json, construct.json) cannot be read or is not valid is
// left out and reported in `errors` (one line each, naming the file); the other ranks are
// analysed, and the tool exits 111 (a file not read) or 100 (an invalid one), never 0 or 1: a
// verdict without that rank's data is no answer about the step (a producer there would come first).
//
// Errors: usage_error (bad rules, no rank folders), system_error (STEPDIR, the result file).
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
  std::vector<nan_rank_error> errors;  // rank folders left out
  size_t ranks = 0, entries = 0;       // read and analysed
};

const stage_description &nan_analyze_stage_description();
nan_offline_report nan_offline_run(const nan_offline_options &o);

}  // namespace tprobe
