// compare_live.h: the live compare stage (tprobe-compare-live): two capture streams of the same
// script (run A and run B, e.g. float32 and bfloat16) are compared while they run, with the metrics
// of the offline compare (core/compare/compare_metrics.h), and the same result files at the end.
//
// Example manifest (pipelines/compare-live.json):
//   {"runs": [{"name": "a", "args": ["--dtype", "float32"]}, {"name": "b", "args": ["--dtype", "bfloat16"]}],
//    "capture": {"task": "tensor"},
//    "stages": [{"name": "compare", "stage": "compare-live", "inputs": ["capture"]}]}
// Example launch line:
//   tprobe-compare-live --input ipc:///tmp/run/compare.in --producers 2 --output-dir ./output
//
// Producers are told apart by their session record's meta "label" (tprobe run sets it from the
// run's name; a session without one is known by its run id). Tensor records are aligned by
// (step, rank, entry, slot) as they arrive, whatever the interleaving of the two streams:
//   both payloads present     compare_real_data()  (msprobe mode all: Cosine, MaxAbsErr, …, Accuracy)
//   otherwise                 compare_summary() on the statistics (header.stats, or computed here
//                             from the payload with tensor_stats_compute)
// A pair fails as msprobe's advisor counts it: Accuracy "No" (real data) or Warning (statistics).
// The first failing pair is reported the moment it is known: one line on `options.log` and a value
// record sent downstream with meta {"event": "first_divergence", …}.
//
// Memory. A record waits (with its payload) until its partner arrives. Waiting payloads are bounded
// by max_buffer_bytes: past it, the payloads of the oldest waiting records are dropped (their
// statistics are kept) and their pairs are compared by statistics only; such rows are counted in
// compare_live_result::stats_only_rows and say so in Err_message. Matched pairs keep only their
// table row (names, statistics, metrics), never tensor data.
//
// At the end of the stream (eos from every producer, or a signal) every (step, rank) group is
// written as msprobe's result files with compare_output.h: compare_result{suffix}_{ts}.xlsx/.csv/.json
// and advisor{suffix}_{ts}.txt, suffix "_step{S}" when several steps were seen, then "_rank{R}"
// for ranks >= 0. The table is built by compare_table_build() (name + shape matching, the dtype
// gate, NPU rows in arrival order), so a live table equals the offline table of the same dumps.
// Records seen on one side only are unmatched: NPU-side ones are table rows ("No bench data
// matched."), bench-side ones are dropped from the table as msprobe drops them; both are counted
// and listed in the result. Non-tensor (value) records are rows too, flattened as the offline
// compare flattens their dump.json leaf (no metrics: 'unsupported', as msprobe).
//
// Errors: framing_error for a malformed record, usage_error for a third run label when none was
// chosen, system_error for transport and file failures.
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "stage_io.h"
#include "stage_main.h"

namespace tprobe {

struct compare_live_options {
  std::string npu;         // run label compared as NPU; "" = "a" if such a run exists, else the first seen
  std::string bench;       // run label compared as bench; "" = the other label
  std::string output_dir;  // result files; "" = write none
  uint64_t max_buffer_bytes = 1024ull << 20;  // payload bytes of records waiting for their partner
  bool highlight = false;                     // msprobe's -hl colouring in the xlsx
  std::FILE *log = nullptr;                   // first-divergence and warning lines (nullptr: none)
};

struct compare_live_divergence {
  int64_t step = 0;
  int32_t rank = -1;
  std::string entry, slot;
  std::string cosine, max_abs_err;  // as the csv prints them ("0.948683298051", "unsupported")
  std::string accuracy;             // "No", or "Warning" for a pair compared by statistics
  bool by_statistics = false;
};

struct compare_live_result {
  std::string npu_label, bench_label;
  uint64_t records = 0;          // records received
  uint64_t tensors = 0;          // tensor records aligned
  uint64_t pairs = 0;            // pairs compared live
  uint64_t real_data_pairs = 0;  // of which on tensor data
  uint64_t stats_only_rows = 0;  // of which by statistics because a payload was dropped (buffer full)
  uint64_t failing = 0;          // failing rows of the written tables (exit 1 when > 0)
  uint64_t live_failing = 0;     // failing pairs seen live
  uint64_t rows = 0;             // rows of the written tables
  uint64_t unmatched = 0;        // records seen on one side only (both sides counted)
  std::vector<std::string> unmatched_names;  // "step 0 rank -1 Functional.x.0.forward.output.0 (only in a)"
  uint64_t ignored = 0;          // records of a third label, duplicates
  uint64_t peak_buffer_bytes = 0;
  std::optional<compare_live_divergence> first_divergence;
  std::vector<std::string> files;  // every file written
};

const stage_description &compare_live_stage_description();

// Runs until end-of-stream (or a signal), writes the result files, sends its records downstream
// and finishes the outputs.
compare_live_result compare_live_run(stage_io &io, const compare_live_options &options);

}  // namespace tprobe
