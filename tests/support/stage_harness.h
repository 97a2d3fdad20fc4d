// stage_harness.h: run a stage function in process, as GStreamer's GstHarness does for an element:
// feed it records from a list or a record file, collect what it emits, look at its counts. The
// stage gets a real stage_io on inproc endpoints (the same protocol as between processes: hello/ack,
// barriers, eos), so what passes here passes between processes too; no ports, no child processes,
// no sleeps.
//
//   test::stage_harness h;
//   auto out = h.run([](stage_io &io) { stats_run(io, {}); }, {session, tensor, step_end});
//   EXPECT_TRUE(out[1].header.stats);
//
// Contracts: run() returns once the stage function returned and its end-of-stream arrived; an
// exception thrown by the stage (or by the collecting side) is rethrown by run(). Input records
// whose meta has a `barrier` key are sent as barriers (record_sender::sync): barriers() says, per
// such record, whether the stage (and what it passed them to) answered. A stage that never reads
// makes run() fail after the send deadline (10 s) instead of hanging (and sets the process-wide
// stop flag, request_stop(), so that the stage ends: later runs in that test process end at once).
#pragma once

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "stage_io.h"
#include "record.h"

namespace tprobe::test {

class stage_harness {
 public:
  // has_output = false: the stage is a sink (no --output); `extra` sets its other stage_io options
  // (tap, high_water_mark, …); input, producers and outputs are the harness's.
  explicit stage_harness(bool has_output = true, stage_io_options extra = {});

  // Feeds `input` to `stage` and returns every data record it emitted, in order.
  std::vector<record> run(const std::function<void(stage_io &)> &stage, const std::vector<record> &input);
  // The same with the records of a record file as input (the stage reads the file itself).
  std::vector<record> run_file(const std::function<void(stage_io &)> &stage, const std::string &path);

  // The feeding producer says numbered in its hello (as a capture does): the records' seq, as
  // the input gives them, is checked by the stage's stage_io.
  void set_numbered_producer(bool numbered) { numbered_ = numbered; }

  zmq::context_t &context() { return ctx_; }
  // The stage's stage_io counts after the last run.
  const stage_io_counts &counts() const { return counts_; }
  // Per barrier record of the last run's input: true when it was answered.
  const std::vector<bool> &barriers() const { return barriers_; }

 private:
  std::vector<record> run_with(const std::function<void(stage_io &)> &stage, const std::vector<record> *input,
                               const std::string &file);
  zmq::context_t ctx_;
  bool has_output_;
  bool numbered_ = false;
  stage_io_options extra_;
  stage_io_counts counts_;
  std::vector<bool> barriers_;
};

// A deep copy of a record (its frames encoded and decoded again).
record record_copy(const record &r);

// Feeds `records` to a tap reader as a stage's tap would publish them: binds an XPUB at an inproc
// endpoint, calls `reader(endpoint)` on a thread of its own (it connects a tap_subscriber there),
// publishes once the reader has subscribed (nothing is lost to a late subscription), then an eos.
// Returns after the reader returned; rethrows its exception.
void tap_feed(zmq::context_t &ctx, const std::vector<record> &records,
              const std::function<void(const std::string &endpoint)> &reader);

// Text written to a FILE* by `body` (tap_run prints to one).
std::string capture_file_output(const std::function<void(std::FILE *)> &body);

}  // namespace tprobe::test
