// stats.h: the statistics stage (tprobe-stats).
//
// Reads tensor records, computes what is not yet known (Max, Min, Mean, Norm, NaN and Inf counts,
// and the CRC-32 when the record carries RECORD_FLAG_CRC32), and passes every record on. A tensor
// whose data is not to be saved (no RECORD_FLAG_SAVE) leaves without its payload, so downstream
// stages receive only numbers; --keep-payload keeps every payload (for a stage such as a live
// compare that needs the data).
//
// Example launch line:
//   tprobe-stats --input ipc:///tmp/run/stats.in --output ipc:///tmp/run/writer.in
// Example manifest stage:
//   {"name": "stats", "stage": "stats", "inputs": ["capture"]}
#pragma once

#include <cstdint>

#include "stage_io.h"
#include "stage_main.h"
#include "tensor_stats.h"

namespace tprobe {

struct stats_stage_options {
  bool keep_payload = false;  // pass payloads on even when not saved
  bool recompute = false;     // recompute statistics that arrived already computed
  // Threads reading a payload larger than stats_part_bytes, in parts (part_runner.h): the stage's
  // own and threads - 1 helpers. 0: part_runner_default_threads().
  unsigned threads = 0;
};

struct stats_stage_result {
  uint64_t records = 0;        // records passed on
  uint64_t tensors = 0;        // tensor records seen
  uint64_t computed = 0;       // tensors whose statistics this stage computed
  uint64_t payload_bytes = 0;  // bytes of tensor data read
  uint64_t payloads_dropped = 0;  // payloads not passed on (numbers only downstream)
};

const stage_description &stats_stage_description();

// Runs until end-of-stream (or a signal), then finishes the outputs. Throws framing_error on a
// malformed record and system_error on a transport failure.
stats_stage_result stats_run(stage_io &io, const stats_stage_options &options);

// True when stats_run would pass a record so glanced at on exactly as it came: not a session
// (the stage reads its precision); a tensor only without a payload, or with complete statistics
// (the CRC-32 included when asked for), no --recompute, and a payload that stays (saved, or
// --keep-payload).
bool stats_leaves_unchanged(const record_glance &g, const stats_stage_options &options);

// The per-record work is record_fill_missing_stats (stages/common/record_leaf.h), the writer's and
// precheck-live's too.

}  // namespace tprobe
