// The control path (endpoint.h "Control", record.h "control"): a stage tells a capture to stop or
// to capture less, through the endpoint the capture announces in its session record. Never
// blocks either side; a bad command is ignored, never fatal to the training.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "stage_io.h"
#include "tprobe_capture.h"
#include "test_support.h"

using namespace tprobe;

namespace {

using clock_type = std::chrono::steady_clock;

record command(const std::string &name, nlohmann::ordered_json extra = nlohmann::ordered_json::object()) {
  record r(record_kind::control);
  extra["command"] = name;
  extra["from"] = "test stage";
  r.header.meta = std::move(extra);
  return r;
}

// Waits (bounded) for the listener's thread to have queued `n` commands.
bool wait_pending(control_listener &l, const std::chrono::milliseconds deadline = std::chrono::milliseconds(5000)) {
  const auto t0 = clock_type::now();
  while (!l.pending()) {
    if (clock_type::now() - t0 > deadline) return false;
    std::this_thread::yield();
  }
  return true;
}

}  // namespace

TEST(Control, a_command_reaches_the_listener_in_order) {
  zmq::context_t ctx;
  control_listener listener(ctx, "");
  EXPECT_EQ(listener.endpoint().rfind("ipc://", 0), 0u) << listener.endpoint();
  EXPECT_FALSE(listener.pending());
  control_sender sender(ctx);
  EXPECT_TRUE(sender.send(listener.endpoint(), command("narrow", {{"level", "L0"}})));
  EXPECT_TRUE(sender.send(listener.endpoint(), command("stop", {{"reason", "enough"}})));
  std::vector<record> got;
  const auto t0 = clock_type::now();
  while (got.size() < 2 && clock_type::now() - t0 < std::chrono::seconds(5)) {
    if (wait_pending(listener))
      for (auto &r : listener.take()) got.push_back(std::move(r));
  }
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].header.meta["command"], "narrow");
  EXPECT_EQ(got[1].header.meta["command"], "stop");
  EXPECT_EQ(got[1].header.meta["reason"], "enough");
  EXPECT_FALSE(listener.pending());
}

TEST(Control, what_is_not_a_command_is_counted_and_ignored) {
  zmq::context_t ctx;
  control_listener listener(ctx, "");
  zmq::socket_t push(ctx, zmq::socket_type::push);
  push.connect(listener.endpoint());
  push.send(zmq::str_buffer("garbage"), zmq::send_flags::none);
  auto frames = record_encode(record(record_kind::step_end));
  push.send(frames[0], zmq::send_flags::none);
  control_sender sender(ctx);
  ASSERT_TRUE(sender.send(listener.endpoint(), command("stop")));
  ASSERT_TRUE(wait_pending(listener));
  const auto got = listener.take();
  ASSERT_EQ(got.size(), 1u);
  // Two connections are read fairly, not in send order: the command may overtake the garbage.
  const auto t0 = clock_type::now();
  while (listener.rejected() < 2 && clock_type::now() - t0 < std::chrono::seconds(5)) std::this_thread::yield();
  EXPECT_EQ(listener.rejected(), 2u);
  EXPECT_FALSE(listener.pending());
  EXPECT_THROW(sender.send(listener.endpoint(), record(record_kind::step_end)), usage_error);
  EXPECT_THROW(sender.send("not an endpoint://x", command("stop")), usage_error);
}

TEST(Control, sending_to_a_capture_that_is_gone_never_blocks) {
  test::temp_dir dir;
  zmq::context_t ctx;
  control_sender sender(ctx);
  const auto t0 = clock_type::now();
  int queued = 0;
  for (int i = 0; i < 5000; ++i) queued += sender.send(test::ipc_endpoint(dir, "nobody"), command("stop"));
  EXPECT_LT(std::chrono::duration<double>(clock_type::now() - t0).count(), 2.0);
  EXPECT_LT(queued, 5000);  // the queue of an unconnected socket fills; then sends are refused, not waited on
}

// A stage that sends a command and exits at once (its context ends right after the send, before
// ZeroMQ has even connected) still delivers it: the capture would otherwise never hear of a stop
// sent near the end of a run. Also with the connection made ahead (connect()).
TEST(Control, a_command_sent_just_before_the_stage_exits_arrives) {
  zmq::context_t capture_ctx;
  control_listener listener(capture_ctx, "");
  for (const bool ahead : {false, true}) {
    SCOPED_TRACE(ahead ? "connected ahead" : "connected by send");
    {
      zmq::context_t stage_ctx;
      control_sender sender(stage_ctx);
      if (ahead) sender.connect(listener.endpoint());
      ASSERT_TRUE(sender.send(listener.endpoint(), command("stop", {{"reason", ahead ? "ahead" : "at send"}})));
    }  // the stage's context ends here
    ASSERT_TRUE(wait_pending(listener));
    const auto got = listener.take();
    ASSERT_EQ(got.size(), 1u);
    EXPECT_EQ(got[0].header.meta["reason"], ahead ? "ahead" : "at send");
  }
  zmq::context_t ctx;
  control_sender sender(ctx);
  EXPECT_THROW(sender.connect("not an endpoint://x"), usage_error);
}

namespace {

// A sink that reads the capture's session record, then sends it `cmd` (once) and keeps reading.
struct commanding_sink {
  std::string endpoint;
  std::thread thread;
  std::mutex mutex;
  std::condition_variable cv;
  bool sent = false;
  uint64_t tensors = 0;

  commanding_sink(zmq::context_t &ctx, const std::string &ep, record cmd, std::optional<record> then = {}) {
    std::atomic<bool> ready{false};
    thread = std::thread([&, ep, c = std::move(cmd), c2 = std::move(then)]() mutable {
      stage_io_options o;
      o.input = ep;
      o.producers = 1;
      o.producer_name = "commanding sink";
      stage_io io(ctx, o);
      endpoint = io.input_endpoint();
      ready = true;
      control_sender sender(ctx);
      while (auto r = io.receive()) {
        if (r->header.kind == record_kind::tensor) ++tensors;
        if (r->header.kind == record_kind::session) {
          const std::string control = r->header.meta.value("control", std::string{});
          EXPECT_FALSE(control.empty()) << "the session record announces no control endpoint";
          EXPECT_TRUE(sender.send(control, c));
          if (c2) EXPECT_TRUE(sender.send(control, *c2));
          std::lock_guard lock(mutex);
          sent = true;
          cv.notify_all();
        }
      }
    });
    while (!ready) std::this_thread::yield();
  }
  void wait_sent() {
    std::unique_lock lock(mutex);
    cv.wait(lock, [&] { return sent; });
  }
  ~commanding_sink() {
    if (thread.joinable()) thread.join();
  }
};

struct small_tensor {
  float data[4] = {1, 2, 3, 4};
  int64_t shape[1] = {4};
  DLTensor t = test::float_tensor(data, shape);
};

std::string config_in(const test::temp_dir &dir) {
  const std::string path = dir / "config.json";
  test::write_file(path, R"({"task": "statistics", "level": "mix", "dump_path": ")" + (dir / "dump") + "\"}");
  return path;
}

// Captures `entry` until the result is `want` (the command is applied at an operator boundary,
// once the listener's thread has it), for at most 5 s.
bool capture_until(tprobe_session *s, const std::string &entry, int want) {
  small_tensor x;
  const auto t0 = clock_type::now();
  for (int i = 0; clock_type::now() - t0 < std::chrono::seconds(5); ++i) {
    const std::string name = entry + "." + std::to_string(i) + ".forward";
    if (tprobe_capture_tensor(s, name.c_str(), "output.0", &x.t, 0) == want) return true;
  }
  return false;
}

// A capture session on `sink`, started, once the sink has sent its command(s); nullptr on failure.
tprobe_session *started_against(commanding_sink &sink, const test::temp_dir &dir) {
  tprobe_open_options o = tprobe_open_options_default();
  o.endpoint = sink.endpoint.c_str();
  tprobe_session *s = nullptr;
  if (tprobe_session_open(config_in(dir).c_str(), &o, &s) != TPROBE_OK || tprobe_start(s) != TPROBE_OK) {
    ADD_FAILURE() << tprobe_last_error();
    return nullptr;
  }
  sink.wait_sent();
  return s;
}

}  // namespace

TEST(Control, a_stage_stops_the_capture_and_training_goes_on) {
  test::temp_dir dir;
  zmq::context_t ctx;
  commanding_sink sink(ctx, test::ipc_endpoint(dir, "sink.in"),
                       command("stop", {{"reason", "overflow_nums reached"}}));
  tprobe_session *s = started_against(sink, dir);
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(capture_until(s, "Torch.add", TPROBE_SKIPPED));
  small_tensor x;
  EXPECT_EQ(tprobe_capture_tensor(s, "Torch.mul.0.forward", "output.0", &x.t, 0), TPROBE_SKIPPED);
  EXPECT_EQ(tprobe_step(s), TPROBE_OK);  // stopped, not failed: step and close still succeed
  EXPECT_EQ(tprobe_capture_tensor(s, "Torch.mul.0.forward", "output.0", &x.t, 0), TPROBE_SKIPPED);
  EXPECT_EQ(tprobe_session_close(s), TPROBE_OK) << tprobe_last_error();
}

TEST(Control, a_stage_narrows_the_capture_to_a_list_and_a_level) {
  test::temp_dir dir;
  zmq::context_t ctx;
  commanding_sink sink(ctx, test::ipc_endpoint(dir, "sink.in"),
                       command("narrow", {{"list", {"keep"}}, {"level", "L1"}}));
  tprobe_session *s = started_against(sink, dir);
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(capture_until(s, "Torch.drop", TPROBE_SKIPPED));
  small_tensor x;
  EXPECT_EQ(tprobe_capture_tensor(s, "Torch.keep.0.forward", "output.0", &x.t, 0), TPROBE_OK);
  EXPECT_EQ(tprobe_capture_tensor(s, "Module.keep.Linear.forward.0", "output.0", &x.t, 0), TPROBE_SKIPPED);
  EXPECT_EQ(tprobe_session_close(s), TPROBE_OK) << tprobe_last_error();
}

TEST(Control, a_narrowing_to_later_steps_skips_this_one) {
  test::temp_dir dir;
  zmq::context_t ctx;
  commanding_sink sink(ctx, test::ipc_endpoint(dir, "sink.in"), command("narrow", {{"step", {"2-3"}}}));
  tprobe_session *s = started_against(sink, dir);
  ASSERT_NE(s, nullptr);
  EXPECT_TRUE(capture_until(s, "Torch.add", TPROBE_SKIPPED));  // step 0: not in 2-3
  ASSERT_EQ(tprobe_step(s), TPROBE_OK);
  ASSERT_EQ(tprobe_step(s), TPROBE_OK);  // step 2
  small_tensor x;
  EXPECT_EQ(tprobe_capture_tensor(s, "Torch.add.0.forward", "output.0", &x.t, 0), TPROBE_OK);
  EXPECT_EQ(tprobe_session_close(s), TPROBE_OK) << tprobe_last_error();
}

TEST(Control, a_bad_command_is_ignored_and_the_capture_goes_on) {
  test::temp_dir dir;
  zmq::context_t ctx;
  // The bad command, then a good one: once the good one shows, the bad one was handled before it.
  commanding_sink sink(ctx, test::ipc_endpoint(dir, "sink.in"), command("narrow", {{"level", "L7"}}),
                       command("narrow", {{"list", {"keep"}}}));
  tprobe_session *s = started_against(sink, dir);
  ASSERT_NE(s, nullptr);
  testing::internal::CaptureStderr();
  EXPECT_TRUE(capture_until(s, "Torch.drop", TPROBE_SKIPPED));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("ignored a control command from test stage: level: expected"), std::string::npos) << err;
  small_tensor x;
  // The bad level changed nothing: modules and operators that match the list are still captured.
  EXPECT_EQ(tprobe_capture_tensor(s, "Module.keep.Linear.forward.0", "output.0", &x.t, 0), TPROBE_OK);
  EXPECT_EQ(tprobe_capture_tensor(s, "Torch.keep.0.forward", "output.0", &x.t, 0), TPROBE_OK);
  EXPECT_EQ(tprobe_session_close(s), TPROBE_OK) << tprobe_last_error();
}

// The coarse clock the stages ask once a record (stage_io.h) is steady_clock's time, at most a
// kernel tick behind (a tick is 10 ms at the slowest HZ), and never goes back.
TEST(StageClock, coarse_time_is_the_steady_clock_a_tick_behind_at_most) {
  auto last = tprobe::coarse_steady_now();
  for (int i = 0; i < 2000; ++i) {
    const auto before = std::chrono::steady_clock::now();
    const auto coarse = tprobe::coarse_steady_now();
    const auto after = std::chrono::steady_clock::now();
    EXPECT_LE(coarse, after);
    EXPECT_GE(coarse, before - std::chrono::milliseconds(10));
    EXPECT_GE(coarse, last);
    last = coarse;
  }
}
