// tprobe-overflow's library (stages/stream/overflow/overflow.h) in-process: which calls pass, when a call
// is complete (nesting), counting and the stop it sends to the capture's control endpoint.
#include <atomic>
#include <chrono>
#include <cmath>
#include <thread>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "stage_io.h"
#include "overflow/overflow.h"
#include "test_support.h"

using namespace tprobe;

namespace {

record_header tensor(const std::string &entry, const std::string &slot, double max) {
  record r(record_kind::tensor);
  r.header.run = "run";
  r.header.rank = 0;
  r.header.entry = entry;
  r.header.slot = slot;
  r.header.type = dtype::float32;
  r.header.shape = {2};
  tensor_stats s;
  s.max = stat_value::of_real(max);
  s.min = stat_value::of_real(0.0);
  s.mean = stat_value::of_real(0.0);
  s.norm = stat_value::of_real(0.0);
  r.header.stats = s;
  return r.header;
}

record_header entry(const std::string &name) {
  record r(record_kind::entry);
  r.header.run = "run";
  r.header.rank = 0;
  r.header.entry = name;
  r.header.meta = {{"parent", nullptr}};
  return r.header;
}

constexpr double inf = INFINITY;

struct result_of_run {
  std::vector<std::string> passed;  // "entry slot" of the tensor records that came out, in order
  std::vector<std::string> entries;  // entry records that came out: "name" or "name data:false"
  overflow_stage_result stage;
  std::vector<record> commands;
};

// Sends `records` through tprobe-overflow's library into a collecting sink.
result_of_run run_filter(const std::vector<record_header> &records, int64_t overflow_nums, bool with_control = true) {
  test::temp_dir dir;
  zmq::context_t ctx;
  control_listener listener(ctx, "");
  result_of_run out;
  std::atomic<bool> sink_ready{false}, stage_ready{false};
  std::string sink_ep, stage_ep;
  std::thread sink([&] {
    stage_io_options o;
    o.input = test::ipc_endpoint(dir, "sink.in");
    o.producer_name = "sink";
    stage_io io(ctx, o);
    sink_ep = io.input_endpoint();
    sink_ready = true;
    while (auto r = io.receive()) {
      if (r->header.kind == record_kind::tensor) out.passed.push_back(r->header.entry + " " + r->header.slot);
      if (r->header.kind == record_kind::entry)
        out.entries.push_back(r->header.entry + (r->header.meta.value("data", true) ? "" : " data:false"));
    }
  });
  while (!sink_ready) std::this_thread::yield();
  std::thread stage([&] {
    stage_io_options o;
    o.input = test::ipc_endpoint(dir, "overflow.in");
    o.outputs = {sink_ep};
    o.producer_name = "tprobe-overflow";
    stage_io io(ctx, o);
    stage_ep = io.input_endpoint();
    stage_ready = true;
    control_sender control(ctx);
    out.stage = overflow_run(io, control, overflow_stage_options{.overflow_nums = overflow_nums});
  });
  while (!stage_ready) std::this_thread::yield();
  record_sender capture(ctx, stage_ep, "capture");
  record session(record_kind::session);
  session.header.run = "run";
  session.header.rank = 0;
  session.header.meta = {{"task", "overflow_check"}, {"overflow_nums", 99}};
  if (with_control) session.header.meta["control"] = listener.endpoint();
  capture.send(session);
  for (const auto &h : records) capture.send(record(h));
  record end(record_kind::step_end);
  end.header.run = "run";
  end.header.rank = 0;
  EXPECT_TRUE(capture.sync(std::move(end)));  // everything judged and delivered
  capture.finish(records.size() + 2, 0);
  stage.join();
  sink.join();
  const auto t0 = std::chrono::steady_clock::now();
  if (out.stage.stops_sent)
    while (!listener.pending() && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(5))
      std::this_thread::yield();
  out.commands = listener.take();
  return out;
}

}  // namespace

TEST(Overflow, only_calls_with_nan_or_inf_pass_with_all_their_tensors) {
  const auto out = run_filter(
      {
          tensor("Torch.add.0.forward", "input.0", 1), tensor("Torch.add.0.forward", "output.0", 2),
          tensor("Torch.pow.0.forward", "input.0", 2), tensor("Torch.pow.0.forward", "output.0", inf),
          tensor("Torch.mul.0.forward", "input.0", inf), tensor("Torch.mul.0.forward", "output.0", NAN),
          tensor("Torch.abs.0.forward", "input.0", 1), tensor("Torch.abs.0.forward", "output.0", 1),
      },
      -1);
  EXPECT_EQ(out.passed, (std::vector<std::string>{"Torch.pow.0.forward input.0", "Torch.pow.0.forward output.0",
                                                  "Torch.mul.0.forward input.0", "Torch.mul.0.forward output.0"}));
  EXPECT_EQ(out.stage.calls, 4u);
  EXPECT_EQ(out.stage.overflow_calls, 2u);
  EXPECT_EQ(out.stage.stops_sent, 0u);
}

TEST(Overflow, a_clean_calls_entry_goes_on_without_its_data_until_the_stop) {
  // msprobe's stack.json and construct.json list every call up to the stop, dumped or not.
  const auto out = run_filter(
      {
          entry("Torch.add.0.forward"), tensor("Torch.add.0.forward", "output.0", 2),
          entry("Torch.exp.0.forward"), tensor("Torch.exp.0.forward", "output.0", inf),
          entry("Torch.abs.0.forward"), tensor("Torch.abs.0.forward", "output.0", 1),
          entry("Torch.mul.0.forward"), tensor("Torch.mul.0.forward", "output.0", inf),
          entry("Torch.sub.0.forward"), tensor("Torch.sub.0.forward", "output.0", 1),  // after the stop
      },
      2);
  EXPECT_EQ(out.entries, (std::vector<std::string>{"Torch.add.0.forward data:false", "Torch.exp.0.forward",
                                                   "Torch.abs.0.forward data:false", "Torch.mul.0.forward"}));
  EXPECT_EQ(out.passed, (std::vector<std::string>{"Torch.exp.0.forward output.0", "Torch.mul.0.forward output.0"}));
}

TEST(Overflow, an_enclosing_call_is_judged_once_its_outputs_came) {
  // A module around an operator: its inputs are clean, its output overflows after the inner call.
  const auto out = run_filter(
      {
          tensor("Module.fc.Linear.forward.0", "input.0", 1),
          tensor("Torch.exp.0.forward", "input.0", 1),
          tensor("Torch.exp.0.forward", "output.0", inf),
          tensor("Module.fc.Linear.forward.0", "output.0", inf),
          tensor("Module.fc.Linear.backward.0", "input.0", 1),  // backward: judged on its own
          tensor("Module.fc.Linear.backward.0", "output.0", 1),
      },
      -1);
  EXPECT_EQ(out.passed, (std::vector<std::string>{"Torch.exp.0.forward input.0", "Torch.exp.0.forward output.0",
                                                  "Module.fc.Linear.forward.0 input.0",
                                                  "Module.fc.Linear.forward.0 output.0"}));
}

TEST(Overflow, overflow_nums_passes_that_many_calls_and_stops_the_capture) {
  const auto out = run_filter(
      {
          tensor("Torch.pow.0.forward", "output.0", inf),
          tensor("Torch.pow.0.backward", "output.0", inf),  // counts on its own
          tensor("Torch.mul.0.forward", "output.0", inf),
          tensor("Torch.sub.0.forward", "output.0", inf),
      },
      2);
  EXPECT_EQ(out.passed, (std::vector<std::string>{"Torch.pow.0.forward output.0", "Torch.pow.0.backward output.0"}));
  EXPECT_EQ(out.stage.overflow_calls, 2u);
  EXPECT_EQ(out.stage.stops_sent, 1u);
  EXPECT_EQ(out.stage.dropped_after_limit, 2u);
  ASSERT_EQ(out.commands.size(), 1u);
  EXPECT_EQ(out.commands[0].header.meta["command"], "stop");
  EXPECT_EQ(out.commands[0].header.meta["from"], "tprobe-overflow");
}

TEST(Overflow, the_limit_comes_from_the_session_when_not_given) {
  std::vector<record_header> records;
  for (int i = 0; i < 120; ++i) records.push_back(tensor(fmt::format("Torch.exp.{}.forward", i), "output.0", inf));
  const auto out = run_filter(records, 0);  // the session says 99
  EXPECT_EQ(out.stage.overflow_calls, 99u);
  EXPECT_EQ(out.passed.size(), 99u);
}

TEST(Overflow, tensors_without_statistics_never_count) {
  record_header unknown = tensor("Torch.empty.0.forward", "output.0", inf);
  unknown.stats.reset();  // uninitialised memory or a foreign dtype: nothing to judge
  const auto out = run_filter({unknown}, -1, false);
  EXPECT_TRUE(out.passed.empty());
}
