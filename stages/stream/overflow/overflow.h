// overflow.h: the overflow filter stage (tprobe-overflow), msprobe's task overflow_check.
//
// Passes on only the calls that overflowed: a call whose tensors (a forward call's inputs and
// outputs together, each backward or parameters_grad entry on its own) have NaN or ±Inf in Max or
// Min, as msprobe's INF/NAN mode decides (docs/msprobe-compat.md §5.1), with every record of that call (its
// entry record, tensors with their data, values). The statistics that decide it arrive computed
// (by the capture in place, or by tprobe-stats before this stage); a call's records are held only
// until its verdict is known: when a record of another call arrives after the call's outputs, or
// at the producer's step_end, flush or end of stream. Calls the writer marks as not data
// (uninitialised memory, tensors without statistics) never count as overflow.
//
// After overflow_nums overflowing calls of a producer (a capture: one rank of one run; -1: never),
// the stage passes nothing more of that producer's calls, sends the capture a `stop` on its control
// endpoint (record.h "control"), and says once on stderr
//   tprobe-overflow: rank 0: reached the preset overflow times, current overflow times: 1
// Control records (session, step_end, flush) always pass, so files are finished and step()
// barriers answered.
//
// Example manifest stage (pipelines/overflow_check.json):
//   {"name": "overflow", "stage": "overflow", "inputs": ["stats"]}
#pragma once

#include <cstdint>

#include "stage_io.h"
#include "stage_main.h"

namespace tprobe {

struct overflow_stage_options {
  // Overflowing calls to pass per producer before stopping it; 0 = the producer's config
  // (overflow_check.overflow_nums, msprobe's default 1); -1 = never stop.
  int64_t overflow_nums = 0;
};

struct overflow_stage_result {
  uint64_t records = 0;        // records received
  uint64_t calls = 0;          // calls judged
  uint64_t overflow_calls = 0; // calls passed on (they overflowed)
  uint64_t dropped_after_limit = 0;  // records of producers past their overflow_nums
  uint64_t stops_sent = 0;     // captures told to stop
};

const stage_description &overflow_stage_description();

// Runs until end-of-stream (or a signal), then finishes the outputs. `control` sends the stops
// (the same context as `io`).
overflow_stage_result overflow_run(stage_io &io, control_sender &control, const overflow_stage_options &options);

// The verdict on one tensor record: NaN or ±Inf in Max or Min (or counted among its elements).
bool overflow_tensor_is_anomalous(const record_header &h);

}  // namespace tprobe
