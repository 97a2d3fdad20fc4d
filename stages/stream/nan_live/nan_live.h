// nan_live.h: tprobe-nan-live, the stream front door of the NaN/Inf analysis of
// core/nan_analyze.h; the offline one is tools/nan_analyze/nan_offline.h.
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
// Errors: usage_error (bad rules), system_error (files), framing_error (records).
#pragma once

#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "stage_io.h"
#include "nan_analyze.h"
#include "stage_main.h"

namespace tprobe {

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
