// precheck_live.h: tprobe-precheck-live, the stream front door of msprobe's accuracy pre-check
// (run_ut / acc_check), the online pre-check msprobe dropped; the offline one is tprobe-precheck
// (tools/precheck/main.cpp). Both hand API calls to one library, precheck_run
// (tools/precheck/precheck_run.h): the same filters, replay, judgement and CSV rows.
//
// Example manifest (pipelines/precheck-live.json): capture → tprobe-stats → tprobe-writer and
// tprobe-precheck-live, at task "tensor" (with statistics only, inputs are drawn from Max/Min as
// msprobe's random mode does).
//
// Per (step, rank) of the stream, the records are assembled into the entries the writer puts in
// that folder's dump.json (core/dump_semantics.h: entry_skeleton_json, entry_slot_json, the leaves
// of stages/common/record_leaf.h, the session's data_mode), and each tensor's payload is copied
// into a CPU tensor that the replay reads by its data_name (a tensor_source in memory). An API
// call ("Functional.gelu.0") is handed to a pool of `jobs` replay threads (precheck_run::check)
// when it is complete:
//   - its backward entry has ended (a record of another entry of the same producer arrived), or
//   - its forward has ended and no output requires grad (no backward will come), or
//   - its step ended (step_end from its rank, or the end of the stream).
// A Distributed call waits for its step's end (the capture reads a collective's output late).
// Module entries, parameters_grad and debug saves are not API calls: not checked (as offline).
// precheck_run::wanted() is asked as each forward ends, in arrival order (-f duplicates), and
// rows are written in that order into OUT/step{S}/rank{R}/accuracy_checking_{result,details}_{ts}.csv
// ("rank" for a producer without rank, as the dump's folders), so a folder's files equal
// `tprobe precheck` over the dump.json the writer wrote for it.
//
// The training is never slowed: records are read and copied as they come, and nothing here waits
// for a replay. Payloads held (APIs being assembled, waiting or replayed) are bounded by
// max_buffer_bytes: a tensor that would pass it drops its whole API (its tensors freed, its later
// records ignored, no row), counted in result.fell_behind, so the check samples the calls when
// the replay cannot keep up. Replay threads run at nice +10, below the training.
//
// The first API not pass (error or warning, precheck_run's verdict) is printed on `log` as soon
// as its row is written, rows going in arrival order (so it is the first in the file, the line
// tprobe-precheck prints for the same dump):
//   tprobe-precheck-live: first API not pass: step 0 rank -1 Functional.gelu.0 (…output.0 error: …)
// and sent downstream as a value record with meta {"event": "first_api_not_pass", "step", "rank",
// "api", "line"} (at the next record received, or at the end). Counts as offline
// (precheck_counts::failed: any API not pass).
//
// Errors: framing_error (a malformed record), usage_error (bad options), system_error (files; an
// exception of a replay ends the run, as it ends tprobe-precheck, once the stream has ended).
#pragma once

#include <cstdint>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "precheck_run.h"
#include "stage_io.h"
#include "stage_main.h"

namespace tprobe {

struct precheck_live_options {
  std::string output_dir = "./output";  // OUT/step{S}/rank{R}/ per folder of the stream
  unsigned jobs = 1;                    // replay threads
  uint64_t max_buffer_bytes = 1024ull << 20;
  precheck::precheck_options run;       // standard, lists, -save_error_data, -f, seed
  std::FILE *log = nullptr;             // the first-not-pass line
  // Called once, from the thread that writes its row, with the first API not pass (after the line).
  std::function<void(int64_t step, int32_t rank, const precheck::api_judgement &)> on_first_not_pass;
};

struct precheck_live_folder {
  int64_t step = 0;
  int32_t rank = -1;
  std::string result_csv, details_csv;
};

struct precheck_live_result {
  uint64_t records = 0;
  uint64_t apis = 0;         // API calls seen (forward entries)
  uint64_t checked = 0;      // replayed and written
  uint64_t not_wanted = 0;   // excluded by precheck_run::wanted (-f duplicates)
  uint64_t fell_behind = 0;  // dropped whole because the buffer was full
  uint64_t late_records = 0; // records of a call already handed to the replay (not in its row)
  uint64_t refused = 0;      // records the writer refuses too (a path that clashes with the entry)
  uint64_t peak_buffer_bytes = 0;
  precheck::precheck_counts counts;  // over every folder; first_not_pass prefixed "step S rank R"
  std::optional<std::string> first_not_pass_line;  // the line printed
  std::vector<precheck_live_folder> folders;
};

const stage_description &precheck_live_stage_description();
// Runs until end-of-stream (or a signal), waits for every replay, writes the rows and finishes
// the outputs.
precheck_live_result precheck_live_run(stage_io &io, const precheck_live_options &options);

}  // namespace tprobe
