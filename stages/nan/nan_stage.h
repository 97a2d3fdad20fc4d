// nan_stage.h: the two front doors of the NaN/Inf analysis of core/nan_analyze.h.
//
// Offline, tprobe-nan-analyze (`tprobe nan-analyze STEPDIR -o OUTDIR`): a step folder's rank
// folders (dump.json, stack.json, construct.json) are analysed at once:
//   tprobe nan-analyze ./dump/step0 -o ./output [--config config.json]
// prints one line on stdout ("tprobe-nan-analyze: first producer: rank 1 Torch.exp.0.forward (…)")
// and writes OUTDIR/anomaly_analyze_{ns}.json; exit 1 when a producer was found, 0 when none.
//
// Live, tprobe-nan-live (pipelines/nan-live.json): the records of every rank of one job, after
// tprobe-stats, are assembled per (step, rank) into the same entry objects the writer puts in
// dump.json (slot_locate, tensor_leaf_json of core/dump_semantics.h; an entry record's stack and
// parent), and a step is analysed by nan_analyze() as soon as every rank of the job has sent its
// step_end (the cross-rank order needs all of them), or at the end of the stream. The first
// verdict is printed at once (options.log), written as anomaly_analyze_{ns}.json, sent downstream
// as a value record with meta {"event": "first_producer", "step", "rank", "entry", "line", "file"}
// and handed to options.on_verdict; then the stage keeps reading (later steps are analysed and
// counted, not printed). A tensor record whose meta has "uninitialized": true is such a leaf.
// Rules: options.rules, else the session's config (its tprobe.nan_analyze, carried in the session
// record's meta "nan_analyze"), else nan_rules_default().
//
// Ranks of a job: a session record's rank (-1 → 0, as msprobe's "rank" folder). A rank whose
// session had not arrived when the others ended a step is not waited for at that step.
//
// Errors: usage_error (bad rules, no rank folders), system_error (files), framing_error (records).
#pragma once

#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "endpoint.h"
#include "nan_analyze.h"
#include "stage_main.h"

namespace tprobe {

// ---- offline ----

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

// ---- live ----

struct nan_live_verdict {
  int64_t step = 0;
  nan_verdict verdict;
  std::string line;  // nan_answer_line()
  std::string file;  // "" when no output_dir
  std::vector<std::string> controls;  // the control endpoints of the job's captures (session records)
};

struct nan_live_options {
  std::string output_dir;           // anomaly_analyze_{ns}.json of the first verdict; "" = none
  std::optional<nan_rules> rules;   // nullopt: the session's config, else the defaults
  std::FILE *log = nullptr;         // the first-producer line ("tprobe-nan-live: step S: first producer: …")
  // Called once, with the first verdict, the moment it is decided (after the line and the file).
  // The hook for acting on it, e.g. a control path that stops the capture; the stage itself only
  // reports.
  std::function<void(const nan_live_verdict &)> on_verdict;
};

struct nan_live_result {
  uint64_t records = 0, entries = 0;
  uint64_t steps_analysed = 0, steps_with_producer = 0;
  std::optional<nan_live_verdict> first;
};

const stage_description &nan_live_stage_description();
nan_live_result nan_live_run(stage_io &io, const nan_live_options &o);

}  // namespace tprobe
