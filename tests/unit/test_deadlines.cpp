// Deadlines of the transport (endpoint.h): a producer never waits forever on a consumer that is
// gone, stalled or not there at all, and a sink's tap shows what it consumes. In a file of their
// own: test_endpoint's request_stop() test leaves the process-wide stop flag set.
#include <atomic>
#include <chrono>
#include <csignal>
#include <optional>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "stage_io.h"
#include "errors.h"
#include "test_support.h"

using namespace tprobe;

namespace {

record numbered(uint64_t i, size_t bytes = 16) { return test::numbered_record(i, bytes); }
std::string ipc(const test::temp_dir &dir, const std::string &name) { return test::ipc_endpoint(dir, name); }

}  // namespace

// ---- deadlines: a producer never waits forever on a consumer that is gone or stalled ----

namespace {

pid_t stalling_consumer(const std::string &endpoint, int take) { return test::stalling_consumer(endpoint, take); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace

TEST(Deadlines, blocked_send_gives_up_at_once_when_the_consumer_dies) {
  test::temp_dir dir;
  const std::string ep = ipc(dir, "dies.in");
  const pid_t consumer = stalling_consumer(ep, 1);
  zmq::context_t ctx;
  record_sender s(ctx, ep, "test producer", 4, link_deadlines{.connect_timeout_ms = 5000, .stall_timeout_ms = -1});
  std::thread killer([&] {
    // Fault injection: the consumer dies while the producer is blocked on it.
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::kill(consumer, SIGKILL);
  });
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (uint64_t i = 0;; ++i) s.send(numbered(i, 4096));  // blocks at the HWM, then must throw
  } catch (const consumer_lost_error &e) {
    EXPECT_NE(std::string(e.what()).find("stalling consumer (pid " + std::to_string(consumer) + ") is gone"),
              std::string::npos)
        << e.what();
  }
  killer.join();
  ::waitpid(consumer, nullptr, 0);
  EXPECT_LT(seconds_since(t0), 3.0);  // no stall deadline is set: only the consumer's death ended the wait
  s.abandon();
}

TEST(Deadlines, blocked_send_gives_up_after_the_stall_deadline) {
  test::temp_dir dir;
  const std::string ep = ipc(dir, "stalls.in");
  const pid_t consumer = stalling_consumer(ep, 2);
  zmq::context_t ctx;
  record_sender s(ctx, ep, "test producer", 4, link_deadlines{.connect_timeout_ms = 5000, .stall_timeout_ms = 400});
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(
      {
        for (uint64_t i = 0;; ++i) s.send(numbered(i, 4096));
      },
      consumer_lost_error);
  const double waited = seconds_since(t0);
  EXPECT_GE(waited, 0.4);
  EXPECT_LT(waited, 3.0);
  s.abandon();
  ::kill(consumer, SIGKILL);
  ::waitpid(consumer, nullptr, 0);
}

TEST(Deadlines, eos_is_not_waited_for_past_the_deadline) {
  test::temp_dir dir;
  const std::string ep = ipc(dir, "no-eos.in");
  const pid_t consumer = stalling_consumer(ep, 1);
  zmq::context_t ctx;
  record_sender s(ctx, ep, "test producer", 4, link_deadlines{.connect_timeout_ms = 5000, .stall_timeout_ms = 400});
  s.send(numbered(0));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW(s.finish(1, 0), consumer_lost_error);
  EXPECT_LT(seconds_since(t0), 3.0);
  ::kill(consumer, SIGKILL);
  ::waitpid(consumer, nullptr, 0);
}

TEST(Deadlines, the_watched_process_ending_ends_the_wait) {
  test::temp_dir dir;
  const std::string ep = ipc(dir, "watched.in");
  const pid_t consumer = stalling_consumer(ep, 1);
  const pid_t launcher = ::fork();  // stands for the launcher: it exits, and stays a zombie
  if (launcher == 0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    ::_exit(0);
  }
  zmq::context_t ctx;
  record_sender s(ctx, ep, "test producer", 4,
                  link_deadlines{.connect_timeout_ms = 5000, .stall_timeout_ms = -1, .watch_pid = launcher});
  const auto t0 = std::chrono::steady_clock::now();
  try {
    for (uint64_t i = 0;; ++i) s.send(numbered(i, 4096));
  } catch (const consumer_lost_error &e) {
    EXPECT_NE(std::string(e.what()).find("launcher (pid " + std::to_string(launcher) + ") is gone"), std::string::npos)
        << e.what();
  }
  EXPECT_LT(seconds_since(t0), 3.0);
  EXPECT_TRUE(process_is_gone(launcher));  // a zombie counts as gone
  ::waitpid(launcher, nullptr, 0);
  ::kill(consumer, SIGKILL);
  ::waitpid(consumer, nullptr, 0);
  s.abandon();
}

TEST(Deadlines, a_tap_nobody_serves_is_an_error_not_a_wait) {
  zmq::context_t ctx;
  for (const std::string ep : {"ipc:///tmp/nonexistent-tprobe-test.tap", "tcp://127.0.0.1:1"}) {
    const auto t0 = std::chrono::steady_clock::now();
    try {
      tap_subscriber sub(ctx, ep, 300);
      ADD_FAILURE() << ep << ": no error";
    } catch (const system_error &e) {
      EXPECT_NE(std::string(e.what()).find("unable to connect to " + ep), std::string::npos) << e.what();
    }
    EXPECT_LT(seconds_since(t0), 3.0) << ep;
  }
}

TEST(Tap, a_sink_taps_what_it_consumes) {
  zmq::context_t ctx;
  stage_io_options in;
  in.input = "inproc://sink";
  in.tap = "inproc://sink.tap";
  stage_io sink(ctx, in);  // no outputs: a sink, like the writer
  tap_subscriber sub(ctx, sink.tap_endpoint());
  // The subscription reaches the XPUB asynchronously: records go until the tap shows one.
  std::atomic<bool> seen_one{false};
  std::thread producer([&] {
    record_sender s(ctx, "inproc://sink", "test producer", 4);
    for (uint64_t i = 0; !seen_one; ++i) s.send(numbered(i));
    s.finish(0, 0);
  });
  std::optional<record> seen;
  while (!seen) {
    ASSERT_TRUE(sink.receive());
    seen = sub.receive(10);
  }
  seen_one = true;
  while (sink.receive()) {
  }
  producer.join();
  EXPECT_EQ(seen->header.kind, record_kind::tensor);
  EXPECT_FALSE(seen->has_payload());  // headers only unless --tap-payload
  EXPECT_EQ(seen->header.slot, "output.0");
}
