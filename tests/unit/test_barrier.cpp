// Barriers (record.h "Barrier", endpoint.h): record_sender::sync returns only once the last stage
// of a chain has handled the barrier record and everything before it; never waits on a consumer
// that cannot answer, nor forever on one that died or stalled.
#include <atomic>
#include <chrono>
#include <csignal>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "stage_io.h"
#include "errors.h"
#include "test_support.h"

using namespace tprobe;

namespace {

std::string ipc(const test::temp_dir &dir, const std::string &name) { return test::ipc_endpoint(dir, name); }

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

record step_end(int64_t step) {
  record r(record_kind::step_end);
  r.header.step = step;
  return r;
}

// A sink that takes `handle_ms` to handle each step_end (writing a step's files, say) and counts
// what it has fully handled.
struct slow_sink {
  std::atomic<uint64_t> data_handled{0};
  std::atomic<int64_t> steps_handled{-1};
  std::string endpoint;
  std::thread thread;

  slow_sink(zmq::context_t &ctx, const std::string &ep, int producers, int handle_ms) {
    std::atomic<bool> ready{false};
    thread = std::thread([&, producers, handle_ms, ep] {
      stage_io_options o;
      o.input = ep;
      o.producers = producers;
      o.producer_name = "slow sink";
      stage_io io(ctx, o);
      endpoint = io.input_endpoint();
      ready = true;
      while (auto r = io.receive()) {
        if (r->header.kind == record_kind::step_end) {
          std::this_thread::sleep_for(std::chrono::milliseconds(handle_ms));  // the work a barrier waits for
          steps_handled = std::max<int64_t>(steps_handled.load(), r->header.step);
        } else {
          ++data_handled;
        }
      }
    });
    while (!ready) std::this_thread::yield();
  }
  ~slow_sink() {
    if (thread.joinable()) thread.join();
  }
};

// A forwarding stage (the statistics stage's shape): receive, pass on.
std::thread forwarder(zmq::context_t &ctx, const std::string &in, const std::string &out, std::string *bound) {
  std::atomic<bool> ready{false};
  std::thread t([&ctx, in, out, bound, &ready] {
    stage_io_options o;
    o.input = in;
    o.producers = 1;
    o.outputs = {out};
    o.producer_name = "forwarder";
    stage_io io(ctx, o);
    *bound = io.input_endpoint();
    ready = true;
    while (auto r = io.receive()) io.send(*r);
    io.finish();
  });
  while (!ready) std::this_thread::yield();
  return t;
}

}  // namespace

TEST(Barrier, returns_once_the_last_stage_of_a_chain_has_handled_it) {
  test::temp_dir dir;
  zmq::context_t ctx;
  slow_sink sink(ctx, ipc(dir, "sink.in"), 1, 150);
  std::string first;
  std::thread stage = forwarder(ctx, ipc(dir, "fwd.in"), sink.endpoint, &first);
  record_sender s(ctx, first, "capture");
  for (int64_t step = 0; step < 3; ++step) {
    for (uint64_t i = 0; i < 50; ++i) s.send(test::numbered_record(i, 256));
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_TRUE(s.sync(step_end(step)));
    // Everything before the barrier, and the barrier itself, handled by the sink: not merely sent.
    EXPECT_EQ(sink.steps_handled.load(), step);
    EXPECT_EQ(sink.data_handled.load(), static_cast<uint64_t>(50 * (step + 1)));
    EXPECT_GE(seconds_since(t0), 0.14);
  }
  s.finish(150, 0);
  stage.join();
}

TEST(Barrier, tokens_of_two_producers_into_one_stage_do_not_collide) {
  test::temp_dir dir;
  zmq::context_t ctx;
  slow_sink sink(ctx, ipc(dir, "sink.in"), 2, 20);
  record_sender a(ctx, sink.endpoint, "rank 0"), b(ctx, sink.endpoint, "rank 1");
  // Both senders number their first barrier 1: each must get its own answer.
  std::thread other([&] {
    for (int64_t step = 0; step < 5; ++step) EXPECT_TRUE(b.sync(step_end(step)));
  });
  for (int64_t step = 0; step < 5; ++step) EXPECT_TRUE(a.sync(step_end(step)));
  other.join();
  a.finish(0, 0);
  b.finish(0, 0);
}

TEST(Barrier, a_record_file_or_a_consumer_without_barriers_is_not_waited_for) {
  test::temp_dir dir;
  zmq::context_t ctx;
  record_sender file(ctx, dir.path() + "/stream.records", "capture");
  EXPECT_FALSE(file.sync(step_end(0)));
  file.finish(0, 0);

  // A consumer of protocol 1.0: it acks hello without "sync" and never answers a barrier.
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.bind(ipc(dir, "old.in"));
  const std::string ep = router.get(zmq::sockopt::last_endpoint);
  std::thread old_consumer([&] {
    zmq::message_t id, frame;
    (void)router.recv(id);
    (void)router.recv(frame);  // hello
    record_header ack = record_header_of(record_kind::ack);
    ack.meta = {{"name", "old consumer"}, {"host", "elsewhere"}, {"pid", 1}};
    router.send(id, zmq::send_flags::sndmore);
    router.send(record_header_encode(ack), zmq::send_flags::none);
  });
  record_sender s(ctx, ep, "capture", 1000, link_deadlines{.connect_timeout_ms = 5000, .stall_timeout_ms = 5000});
  old_consumer.join();
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(s.sync(step_end(0)));
  EXPECT_LT(seconds_since(t0), 1.0);
  s.abandon();
}

TEST(Barrier, a_consumer_that_stalls_or_dies_on_a_barrier_ends_the_wait) {
  test::temp_dir dir;
  {
    // Takes the barrier and never asks for more: the stall deadline ends the wait.
    const std::string ep = ipc(dir, "stalls.in");
    const pid_t consumer = test::stalling_consumer(ep, 1);
    zmq::context_t ctx;
    record_sender s(ctx, ep, "capture", 1000, link_deadlines{.connect_timeout_ms = 5000, .stall_timeout_ms = 400});
    const auto t0 = std::chrono::steady_clock::now();
    EXPECT_THROW(s.sync(step_end(0)), consumer_lost_error);
    EXPECT_GE(seconds_since(t0), 0.35);
    EXPECT_LT(seconds_since(t0), 3.0);
    ::kill(consumer, SIGKILL);
    ::waitpid(consumer, nullptr, 0);
  }
  {
    // Dies while handling it: noticed at the next look (a quarter second), not at the deadline.
    const std::string ep = ipc(dir, "dies.in");
    const pid_t consumer = test::stalling_consumer(ep, 1);
    zmq::context_t ctx;
    record_sender s(ctx, ep, "capture", 1000, link_deadlines{.connect_timeout_ms = 5000, .stall_timeout_ms = -1});
    std::thread killer([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));  // fault injection while waiting
      ::kill(consumer, SIGKILL);
    });
    const auto t0 = std::chrono::steady_clock::now();
    try {
      s.sync(step_end(0));
      ADD_FAILURE() << "sync returned on a dead consumer";
    } catch (const consumer_lost_error &e) {
      EXPECT_NE(std::string(e.what()).find("is gone"), std::string::npos) << e.what();
    }
    EXPECT_LT(seconds_since(t0), 2.0);
    killer.join();
    ::waitpid(consumer, nullptr, 0);
  }
}
