// null.h: the null sink stage (tprobe-null), GStreamer's fakesink for tprobe.
//
// Reads a stream to its end and counts it: records per kind, payload bytes, producers. Nothing is
// kept. --delay-us makes it a slow consumer (after every --delay-every-th record of the
// --delay-kinds kinds it stops reading for that long, so backpressure reaches the producers);
// --expect makes it an assertion: exit 1 when another number of data records arrived.
//
// Example launch line:
//   tprobe-null --input ipc:///tmp/run/null.in --expect 1204
// Example manifest stage:
//   {"name": "sink", "stage": "null", "inputs": ["stats"], "options": {"delay-us": 100000, "delay-kinds": "step_end"}}
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "stage_io.h"
#include "stage_main.h"

namespace tprobe {

// One counter per record kind, indexed by the enum value.
inline constexpr size_t NULL_KIND_SLOTS = static_cast<size_t>(record_kind::final) + 1;

struct null_stage_options {
  uint64_t delay_us = 0;               // pause after a chosen record; 0 = none
  uint64_t delay_every = 1;            // … after every N-th record of delay_kinds (≥ 1)
  std::vector<record_kind> delay_kinds;  // kinds that count for the delay; empty = every kind
  std::optional<uint64_t> expect;      // data records expected in all
};

struct null_stage_result {
  uint64_t records = 0;                                 // data records received
  std::array<uint64_t, NULL_KIND_SLOTS> by_kind{};    // indexed by record_kind
  uint64_t payload_bytes = 0;                           // payload frame bytes received
  uint64_t delays = 0;                                  // pauses made
  bool expectation_met = true;                          // false: --expect was given and missed
};

const stage_description &null_stage_description();

// "1204 records (1 session, 200 entry, 1000 tensor, 3 step_end), 0.1 MB": for the summary line.
std::string null_result_text(const null_stage_result &r);

// Reads until end-of-stream (or a signal). Throws framing_error on a malformed record and
// system_error on a transport failure.
null_stage_result null_run(stage_io &io, const null_stage_options &options);

}  // namespace tprobe
