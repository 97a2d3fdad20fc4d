// tap.h: the live tap (tprobe tap ENDPOINT).
//
// Subscribes to a stage's lossy tap (--tap of any stage; `tprobe run` prints them) and prints one
// line per record as it flows: step, rank, entry, slot, dtype, shape and statistics. The tap never
// slows the pipeline: a tap that cannot keep up loses records, and the lines say how many (gaps in
// each producer's sequence numbers).
//
// An endpoint that nobody serves is an error (exit 111) after --connect-timeout ms, not a silent
// wait: ZeroMQ itself would retry forever. The tap ends at the stage's end-of-stream (every stage
// publishes one on its tap, a sink such as the writer when its input ends), or when the stage's
// connection closes without one (a line on stderr says so), so it never outlives its run.
//
// ENDPOINT may also be a run directory (RUN_DIR, which `tprobe run` prints): the taps are the
// sockets RUN_DIR/<stage>.tap; --stage picks one (needed when the run has several), --list prints
// them ("stats ipc://RUN_DIR/stats.tap", one per line) and exits.
//
// Example:
//   tprobe tap ipc:///tmp/tprobe-run-XXXX/stats.tap --count 20
//   tprobe tap /tmp/tprobe-run-XXXX --stage writer
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "endpoint.h"
#include "stage_main.h"

namespace tprobe {

struct tap_stage_options {
  std::string endpoint;
  uint64_t count = 0;      // stop after this many records (0 = until end-of-stream or Ctrl-C)
  bool json = false;       // one JSON object per line instead of text
  std::string filter;      // only records whose entry contains this
  int connect_timeout_ms = 5000;  // nobody serving the endpoint by then: exit 111
  std::string stage;       // with a run directory: the stage whose tap to watch
  bool list = false;       // with a run directory: print its taps and exit
};

struct tap_stage_result {
  uint64_t records = 0;  // records printed
  uint64_t missed = 0;   // records the tap lost (sequence gaps)
  bool ended = false;    // the stage's end-of-stream came
};

const stage_description &tap_stage_description();

// The taps of a run directory: (stage name, "ipc://DIR/<stage>.tap") for every socket named
// <stage>.tap in `dir`, sorted by stage name. Throws usage_error when `dir` holds none (not a
// run directory, or the run has ended and removed its sockets).
std::vector<std::pair<std::string, std::string>> tap_find_in_run_dir(const std::string &dir);

// The endpoint to watch for the command-line argument: an endpoint as given; a directory (a run
// directory) → the tap of `stage`, or its only tap. Throws usage_error naming the taps found when
// `stage` is not among them or is needed to choose.
std::string tap_resolve_target(const std::string &target, const std::string &stage);

// "step 0 rank 0 Functional.linear.0.forward output.0 float32 [2, 8] max=… min=… mean=… norm=…"
std::string tap_format_line(const record &r);
nlohmann::ordered_json tap_format_json(const record &r);

// Prints records from `tap` to `out` until eos, `count` records, a signal, or the stage going away
// (its connection closed: it ended, and its eos was lost on the lossy tap, or it died).
tap_stage_result tap_run(tap_subscriber &tap, const tap_stage_options &options, std::FILE *out);

}  // namespace tprobe
