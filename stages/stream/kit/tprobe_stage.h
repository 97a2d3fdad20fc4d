// tprobe_stage.h: the C++ stage kit. A stage is a function from records to records; the kit does
// the rest of the stage protocol (docs/stage-protocol.md): the command line tprobe run passes
// (--input, --producers, --output, --tap, --ready-fd, the common options), the stage's own options
// declared once in its table (parser, --describe, --help; types, ranges, choices and required
// checked: stage_option_spec), sockets, hello/ack, barriers (answered once the outputs answered
// theirs: stage_io), end-of-stream, SIGINT/SIGTERM, the tap, counters, the summary line and the
// exit codes.
//
//   int main(int argc, char **argv) {
//     tprobe::stage_kit kit;
//     kit.description = {"my-stage", "what it does", true, true,
//                        {{"limit", "float", "10", "norm above which …", 0.0}}};
//     kit.on_record = [](tprobe::record &&r, tprobe::stage_context &ctx) {
//       if (…) ctx.emit(std::move(r));        // pass it on (or not: a filter)
//     };
//     return tprobe::stage_kit_main(argc, argv, kit);
//   }
//
// Contracts:
//  - on_record is called for every data record (session, tensor, value, entry, flush, step_end),
//    in arrival order, on one thread. Records it does not emit are dropped. Emitting the record
//    that carried a barrier passes the barrier on; the kit answers it upstream once the function
//    returned and every output answered (a dropped barrier is answered at once).
//  - on_finish (optional) runs at the end of the stream, before end-of-stream goes downstream; it
//    may emit too. It is not called after a signal.
//  - Exceptions: usage_error / framing_error → exit 100, system_error → 111, with one line
//    "<stage>: fatal: …". on_record may return a negative answer through ctx.set_exit_code(1).
//  - Statistics: a tensor record carries stats when the capture or tprobe-stats computed them;
//    a stage that replaces tprobe-stats passes payloads on and the writer computes what is missing.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include <nlohmann/json.hpp>

#include "stage_io.h"
#include "record.h"
#include "stage_main.h"

namespace tprobe {

class stage_context {
 public:
  stage_context(stage_io &io, const stage_description &d, const stage_option_values &options, zmq::context_t &ctx);

  // Sends `r` to every output and the tap (blocking at the high-water mark: lossless).
  void emit(record r);
  // The stage's own options, by name, as declared in its table (defaults applied, ranges checked).
  const stage_option_values &options() const { return options_; }
  // The session meta of `run` (the capture's effective config), or nullptr before its session.
  const nlohmann::json *session(const std::string &run) const;
  // Commands the capture of `run` through the control endpoint its session announced
  // (docs/wire-format.md, "Control"): meta = {command, from: the stage, reason, extra…}. Never
  // blocks; false when there is no such capture or the command could not be queued.
  bool control(const std::string &run, const std::string &command, const std::string &reason,
               const nlohmann::json &extra = nlohmann::json::object());
  const stage_io_counts &counts() const { return io_.counts(); }
  const std::string &name() const { return description_.stage; }
  void set_exit_code(int code) { exit_code_ = code; }
  int exit_code() const { return exit_code_; }
  uint64_t emitted() const { return emitted_; }

  // The kit's own bookkeeping, before on_record sees the record.
  void observe(const record &r);

 private:
  stage_io &io_;
  const stage_description &description_;
  const stage_option_values &options_;
  zmq::context_t &ctx_;
  std::unique_ptr<control_sender> control_;
  std::map<std::string, nlohmann::json> sessions_;
  int exit_code_ = 0;
  uint64_t emitted_ = 0;
};

struct stage_kit {
  stage_description description;  // stage name, summary, input/output, option table
  std::function<void(record &&, stage_context &)> on_record;
  std::function<void(stage_context &)> on_finish;  // optional
};

// Runs the kit over an existing stage_io until end-of-stream (or a signal), then finishes the
// outputs; returns the exit code the stage set (0 unless set_exit_code). Used by
// stage_kit_main and by in-process tests (tests/support harness).
int stage_kit_run(stage_io &io, const stage_kit &kit, const stage_option_values &options, zmq::context_t &ctx);

// The whole process, through stage_main() (stage_main.h) like every tprobe stage: parse the
// command line from the kit's table (--describe, --help; types, ranges, choices and required
// checked), bind and connect, signal readiness, run, print the summary line on stderr
// ("<stage>: N records received, …"); returns the exit code for main(). The program is named
// description.stage, without tprobe-'s prefix, in its messages, --help and hello.
int stage_kit_main(int argc, char **argv, const stage_kit &kit);

}  // namespace tprobe
