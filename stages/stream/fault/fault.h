// fault.h: the fault-injection stage (tprobe-fault), GStreamer's identity (drop-probability,
// error-after) for tprobe.
//
// Passes records through and, on a schedule drawn from --seed, does to them what a slow or broken
// stage or link would do:
//
//   --delay-ms D [--delay-prob P]  pause D ms before passing the record (a slow stage)
//   --drop-prob P                  drop it: downstream never sees it (reported in the summary)
//   --duplicate-prob P             pass it twice
//   --truncate-prob P              cut its payload frame short while the header still announces the
//                                  whole payload: the next stage rejects the record as malformed
//                                  (exit 100, its message names tprobe-fault as the producer)
//   --corrupt-prob P               --corrupt-part header: the header's shape no longer matches the
//                                  payload (its element count doubles): malformed downstream, as
//                                  above. --corrupt-part payload: one bit of the data flipped: the
//                                  record stays well-formed and its statistics are wrong (what a
//                                  CRC-32, summary_mode md5, catches)
//   --stall-after K                after K records stop reading and sending and stay alive until
//                                  SIGINT/SIGTERM (a hung stage); then end the stream with eos
//   --die-after K                  after K records die at once, as a crash would: no eos
//
// The probabilistic faults apply to the records of --kinds (default: tensor); truncate and corrupt
// only to records with a payload (put the stage before tprobe-stats, which drops payloads that are
// not saved). K counts the data records received, of every kind. Each fault draws from its own
// generator, seeded by (seed, fault), once per eligible record: the same input and seed give the
// same faults, and one fault's schedule does not change with another's probability.
//
// Example launch line:
//   tprobe-fault --input ipc:///tmp/run/fault.in --output ipc:///tmp/run/stats.in --drop-prob 0.01 --seed 7
// Example manifest stage:
//   {"name": "fault", "stage": "fault", "inputs": ["capture"], "options": {"die-after": 100}}
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "stage_io.h"
#include "stage_main.h"

namespace tprobe {

enum class fault_part : uint8_t { header, payload };
// Throws usage_error for a name other than "header" or "payload".
fault_part fault_part_parse(std::string_view name);

struct fault_stage_options {
  uint64_t seed = 1;
  double delay_ms = 0;          // 0 = no delays
  double delay_prob = 1;        // of an eligible record being delayed (when delay_ms > 0)
  double drop_prob = 0;
  double duplicate_prob = 0;
  double truncate_prob = 0;
  double corrupt_prob = 0;
  fault_part corrupt_part = fault_part::header;
  std::optional<uint64_t> stall_after;  // records before the stall; none = never
  std::optional<uint64_t> die_after;    // records before dying; none = never
  std::vector<record_kind> kinds{record_kind::tensor};  // records the probabilistic faults apply to
};

// How fault_run returned.
enum class fault_end : uint8_t {
  finished,  // end-of-stream (or a signal): eos sent downstream
  stalled,   // stalled, then a signal: eos sent downstream (best effort)
  die,       // --die-after reached: the outputs were NOT finished; the caller ends the process
};

struct fault_stage_result {
  uint64_t received = 0;    // data records received
  uint64_t sent = 0;        // records sent (duplicates included)
  uint64_t dropped = 0;
  uint64_t duplicated = 0;
  uint64_t truncated = 0;
  uint64_t corrupted = 0;
  uint64_t delayed = 0;
  fault_end end = fault_end::finished;
};

const stage_description &fault_stage_description();

// Checks probabilities (0…1) and the delay (≥ 0). Throws usage_error.
void fault_check(const fault_stage_options &options);

// Runs until end-of-stream, a signal, the stall (then until a signal) or --die-after. On
// fault_end::die it returns at once, outputs unfinished: main() then kills the process (SIGKILL),
// a test drops the stage_io. Throws framing_error on a malformed input record and system_error on a
// transport failure.
fault_stage_result fault_run(stage_io &io, const fault_stage_options &options);

}  // namespace tprobe
