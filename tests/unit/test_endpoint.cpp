// Transport over real sockets, in-process: handshake, end-of-stream with several producers,
// the launcher's final, backpressure without loss, batches of small records, the lossy tap and
// its drop count, files.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "errors.h"
#include "link.h"
#include "stage_io.h"
#include "tensor_stats.h"
#include "test_support.h"
#include "tprobe_capture.h"

using namespace tprobe;

namespace {

record numbered(uint64_t i, size_t bytes = 16) { return test::numbered_record(i, bytes); }
std::string ipc(const test::temp_dir &dir, const std::string &name) { return test::ipc_endpoint(dir, name); }

}  // namespace

TEST(Endpoint, strings_are_checked) {
  EXPECT_NO_THROW(endpoint_check("ipc:///tmp/x"));
  EXPECT_NO_THROW(endpoint_check("tcp://127.0.0.1:*"));
  EXPECT_NO_THROW(endpoint_check("inproc://a"));
  EXPECT_NO_THROW(endpoint_check("./recording.tpr"));
  EXPECT_THROW(endpoint_check(""), usage_error);
  EXPECT_THROW(endpoint_check("udp://x:1"), usage_error);
  EXPECT_THROW(endpoint_check("tcp://localhost"), usage_error);
  EXPECT_THROW(endpoint_check("tcp://localhost:http"), usage_error);
  EXPECT_THROW(endpoint_check("ipc://"), usage_error);
  EXPECT_EQ(endpoint_bind_address("tcp://*:5555"), "tcp://127.0.0.1:5555");
  EXPECT_EQ(endpoint_bind_address("tcp://:*"), "tcp://127.0.0.1:*");
  EXPECT_EQ(endpoint_bind_address("tcp://0.0.0.0:5555"), "tcp://0.0.0.0:5555");
  std::string path;
  EXPECT_TRUE(endpoint_is_file("file:///a/b", &path));
  EXPECT_EQ(path, "/a/b");
  EXPECT_FALSE(endpoint_is_file("ipc:///a"));
}

TEST(Endpoint, one_producer_stream_ends_at_eos) {
  zmq::context_t ctx;
  stage_io_options in;
  in.input = "inproc://one";
  stage_io consumer(ctx, in);
  std::thread producer([&] {
    record_sender s(ctx, "inproc://one", "test producer");
    for (uint64_t i = 0; i < 100; ++i) s.send(numbered(i));
    s.finish(100, 0);
  });
  uint64_t n = 0;
  while (auto r = consumer.receive()) {
    EXPECT_EQ(r->header.seq, n + 1);  // in order
    EXPECT_EQ(r->payload_bytes().size(), 16u);
    ++n;
  }
  producer.join();
  EXPECT_EQ(n, 100u);
  EXPECT_EQ(consumer.counts().received, 100u);
  EXPECT_EQ(consumer.counts().producers, 1u);
  EXPECT_FALSE(consumer.interrupted());
}

TEST(Endpoint, tcp_binds_loopback_and_reports_its_port) {
  zmq::context_t ctx;
  stage_io_options in;
  in.input = "tcp://:*";
  stage_io consumer(ctx, in);
  const std::string ep = consumer.input_endpoint();
  EXPECT_EQ(ep.rfind("tcp://127.0.0.1:", 0), 0u) << ep;
  std::thread producer([&] {
    record_sender s(ctx, ep, "tcp producer");
    s.send(numbered(0));
    s.finish(1, 0);
  });
  int n = 0;
  while (consumer.receive()) ++n;
  producer.join();
  EXPECT_EQ(n, 1);
}

TEST(Endpoint, waits_for_every_registered_producer_until_final) {
  test::temp_dir dir;
  zmq::context_t ctx;
  stage_io_options in;
  in.input = ipc(dir, "in");
  in.producers = 0;  // as for a capture: open until final
  stage_io consumer(ctx, in);
  std::thread feeder([&] {
    // Two producers register first (the handshake returns only after the consumer saw hello).
    auto a = std::make_unique<record_sender>(ctx, in.input, "a");
    auto b = std::make_unique<record_sender>(ctx, in.input, "b");
    for (uint64_t i = 0; i < 50; ++i) a->send(numbered(i));
    a->finish(50, 0);
    // Final arrives while b has not finished: the stream must go on until b's eos.
    EXPECT_TRUE(endpoint_send_final(ctx, in.input));
    for (uint64_t i = 0; i < 50; ++i) b->send(numbered(i));
    b->finish(50, 3);
  });
  uint64_t n = 0;
  while (consumer.receive()) ++n;
  feeder.join();
  EXPECT_EQ(n, 100u);
  EXPECT_EQ(consumer.counts().producers, 2u);
  EXPECT_EQ(consumer.counts().upstream_dropped, 3u);
}

TEST(Endpoint, backpressure_is_lossless) {
  zmq::context_t ctx;
  stage_io_options in;
  in.input = "inproc://bp";
  in.high_water_mark = 4;
  stage_io consumer(ctx, in);
  constexpr uint64_t total = 2000;
  std::thread producer([&] {
    record_sender s(ctx, "inproc://bp", "fast producer", 4);
    for (uint64_t i = 0; i < total; ++i) s.send(numbered(i, 4096));
    s.finish(total, 0);
  });
  uint64_t n = 0;
  while (auto r = consumer.receive()) {
    if (n % 100 == 0) std::this_thread::yield();  // a slow consumer
    EXPECT_EQ(r->header.seq, n + 1);
    ++n;
  }
  producer.join();
  EXPECT_EQ(n, total);
}

TEST(Endpoint, stage_forwards_to_every_output_and_passes_eos_on) {
  zmq::context_t ctx;
  stage_io_options sink_a, sink_b, mid;
  sink_a.input = "inproc://sink-a";
  sink_b.input = "inproc://sink-b";
  stage_io a(ctx, sink_a), b(ctx, sink_b);
  mid.input = "inproc://mid";
  mid.outputs = {"inproc://sink-a", "inproc://sink-b"};
  std::atomic<uint64_t> got_a{0}, got_b{0};
  std::thread ta([&] { while (a.receive()) ++got_a; });
  std::thread tb([&] { while (b.receive()) ++got_b; });
  stage_io middle(ctx, mid);
  std::thread producer([&] {
    record_sender s(ctx, "inproc://mid", "p");
    for (uint64_t i = 0; i < 10; ++i) s.send(numbered(i));
    s.finish(10, 0);
  });
  while (auto r = middle.receive()) middle.send(*r);
  middle.finish();
  producer.join();
  ta.join();
  tb.join();
  EXPECT_EQ(got_a.load(), 10u);
  EXPECT_EQ(got_b.load(), 10u);
}

// ---- lossless, checked (stage_io.h): the eos count and a numbered producer's seq ----

namespace {

// Runs `feed` as the producer of a sink on `input` and returns what the sink read, with the error
// that ended it ("" when none).
struct sink_run {
  uint64_t received = 0, lost = 0;
  std::string error;
};
sink_run sink_of(zmq::context_t &ctx, const std::string &input, const std::function<void()> &feed) {
  stage_io_options in;
  in.input = input;
  stage_io sink(ctx, in);
  std::thread producer(feed);
  sink_run out;
  try {
    while (sink.receive()) ++out.received;
  } catch (const system_error &e) {
    out.error = e.what();
  }
  producer.join();
  out.lost = sink.counts().lost;
  return out;
}

}  // namespace

TEST(Endpoint, records_an_eos_counts_that_never_came_end_a_sink_once_it_read_the_rest) {
  zmq::context_t ctx;
  // Not numbered: seq is whatever the records carry (a stage passes its producers' on), unchecked.
  const auto ten_records_said_to_be = [&](const std::string &endpoint, uint64_t said) {
    return sink_of(ctx, endpoint, [&ctx, endpoint, said] {
      record_sender s(ctx, endpoint, "lossy producer");
      for (uint64_t i = 0; i < 10; ++i) s.send(numbered(i * 7));
      s.finish(said, 0);
    });
  };
  const auto run = ten_records_said_to_be("inproc://lossy", 12);
  EXPECT_EQ(run.received, 10u);
  EXPECT_EQ(run.lost, 2u);
  EXPECT_NE(run.error.find("2 records that lossy producer (pid "), std::string::npos) << run.error;
  EXPECT_NE(run.error.find("never arrived on inproc://lossy"), std::string::npos) << run.error;
  EXPECT_EQ(run.error.find("seq"), std::string::npos) << run.error;  // no seq to name
  // The same stream with its count right ends quietly.
  const auto whole = ten_records_said_to_be("inproc://whole", 10);
  EXPECT_EQ(whole.received, 10u);
  EXPECT_EQ(whole.lost, 0u);
  EXPECT_EQ(whole.error, "");
}

TEST(Endpoint, a_numbered_producer_s_gap_names_the_first_record_that_never_came) {
  zmq::context_t ctx;
  const auto run = sink_of(ctx, "inproc://gap", [&] {
    record_sender s(ctx, "inproc://gap", "capture rank 0", 1000, {}, /*numbered=*/true);
    for (uint64_t i : {0, 1, 4, 5, 6}) s.send(numbered(i));  // seq 1 2 5 6 7: 3 and 4 lost
    s.finish(5, 0);  // its count agrees with what it sent: the gap alone tells
  });
  EXPECT_EQ(run.received, 5u);
  EXPECT_EQ(run.lost, 2u);
  EXPECT_NE(run.error.find("2 records that capture rank 0 (pid "), std::string::npos) << run.error;
  EXPECT_NE(run.error.find("(the first: seq 3)"), std::string::npos) << run.error;
}

TEST(Endpoint, a_numbered_producer_s_record_out_of_order_is_a_broken_stream) {
  zmq::context_t ctx;
  stage_io_options in;
  in.input = "inproc://disorder";
  stage_io sink(ctx, in);
  std::thread producer([&] {
    record_sender s(ctx, "inproc://disorder", "capture rank 3", 1000, {}, /*numbered=*/true);
    for (uint64_t i : {0, 2, 1}) s.send(numbered(i));
    s.finish(3, 0);
  });
  std::string error, lost;
  for (;;) {  // as the fault tests do: read on after the broken record, to its eos
    try {
      if (!sink.receive()) break;
    } catch (const framing_error &e) {
      error = e.what();
    } catch (const system_error &e) {
      lost = e.what();  // seq 2 was missing when seq 3 came
      break;
    }
  }
  producer.join();
  EXPECT_NE(error.find("capture rank 3 (pid "), std::string::npos) << error;
  EXPECT_NE(error.find("sent seq 2 after seq 3"), std::string::npos) << error;
  EXPECT_NE(lost.find("(the first: seq 2)"), std::string::npos) << lost;
}

TEST(Endpoint, a_stage_passes_what_was_lost_on_as_dropped_then_fails) {
  zmq::context_t ctx;
  stage_io_options sink_options, mid;
  sink_options.input = "inproc://after-loss";
  stage_io sink(ctx, sink_options);
  uint64_t got = 0;
  std::thread sink_thread([&] { while (sink.receive()) ++got; });
  mid.input = "inproc://loss-mid";
  mid.outputs = {sink_options.input};
  stage_io middle(ctx, mid);
  std::thread producer([&] {
    record_sender s(ctx, mid.input, "capture rank 1", 1000, {}, /*numbered=*/true);
    for (uint64_t i : {0, 1, 2, 6}) s.send(numbered(i));  // seq 4, 5 and 6 lost
    s.finish(4, 1);
  });
  while (auto r = middle.receive()) middle.send(*r);
  EXPECT_EQ(middle.counts().lost, 3u);
  std::string error;
  try {
    middle.finish();  // eos first: the sink ends, told what is missing
  } catch (const system_error &e) {
    error = e.what();
  }
  producer.join();
  sink_thread.join();
  EXPECT_NE(error.find("3 records that capture rank 1 (pid "), std::string::npos) << error;
  EXPECT_NE(error.find("(the first: seq 4)"), std::string::npos) << error;
  EXPECT_EQ(got, 4u);
  EXPECT_EQ(sink.counts().lost, 0u);  // the middle stage sent what it said it sent
  EXPECT_EQ(sink.counts().upstream_dropped, 4u);  // 1 its producer dropped, 3 lost on the way
}

TEST(Endpoint, a_recording_shorter_than_its_eos_says_is_lost_records) {
  test::temp_dir dir;
  zmq::context_t ctx;
  const std::string file = dir / "short.tpr";
  {
    record_sender s(ctx, file, "recorder");
    for (uint64_t i = 0; i < 3; ++i) s.send(numbered(i));
    s.finish(4, 0);
  }
  stage_io_options in;
  in.input = file;
  stage_io reader(ctx, in);
  uint64_t n = 0;
  std::string error;
  try {
    while (reader.receive()) ++n;
  } catch (const system_error &e) {
    error = e.what();
  }
  EXPECT_EQ(n, 3u);
  EXPECT_NE(error.find("1 record that the recording sent never arrived on " + file), std::string::npos) << error;
}

namespace {

// A consumer written against the wire format alone: acks hello (offering batches or not), takes
// every message until eos, acks eos. Returns the records of each message, message by message.
std::vector<std::vector<record>> raw_consumer(zmq::socket_t &router, bool offers_batches,
                                              bool offers_stack_refs = false) {
  std::vector<std::vector<record>> messages;
  auto answer = [&](zmq::message_t &id, bool batch) {
    record_header ack = record_header_of(record_kind::ack);
    ack.meta = endpoint_peer_meta("raw consumer");
    if (batch) ack.meta["batch"] = true;
    if (batch && offers_stack_refs) ack.meta["stack_refs"] = true;
    router.send(id, zmq::send_flags::sndmore);
    router.send(record_header_encode(ack), zmq::send_flags::none);
  };
  for (;;) {
    zmq::message_t id, m;
    (void)router.recv(id);
    std::vector<zmq::message_t> frames;
    do {
      (void)router.recv(m);
      frames.push_back(std::move(m));
    } while (frames.back().more());
    std::vector<record> records;
    if (frames.size() == 1 && record_frame_is_batch(frames[0])) records = record_batch_decode(frames[0]);
    else records.push_back(record_decode(frames));
    const auto kind = records.front().header.kind;
    if (kind == record_kind::hello) {
      answer(id, offers_batches);
      continue;
    }
    if (kind == record_kind::eos) {
      answer(id, false);
      return messages;
    }
    messages.push_back(std::move(records));
  }
}

}  // namespace

TEST(Endpoint, small_records_travel_in_batches_to_a_consumer_that_offers_them) {
  test::temp_dir dir;
  for (bool offers : {true, false}) {
    SCOPED_TRACE(offers ? "offers batches" : "protocol 1.2: no batches");
    zmq::context_t ctx;
    zmq::socket_t router(ctx, zmq::socket_type::router);
    router.bind(ipc(dir, offers ? "batch.in" : "single.in"));
    const std::string ep = router.get(zmq::sockopt::last_endpoint);
    std::vector<std::vector<record>> messages;
    std::thread consumer([&] { messages = raw_consumer(router, offers); });
    constexpr uint64_t total = 500;
    {
      record_sender s(ctx, ep, "producer");
      for (uint64_t i = 0; i < total; ++i) s.send(numbered(i, i % 50 == 0 ? 20000 : 1024));
      s.finish(total, 0);
    }
    consumer.join();
    uint64_t n = 0;
    for (const auto &records : messages) {
      for (const auto &r : records) {
        EXPECT_EQ(r.header.seq, n + 1);  // in order, across batches and the large records between them
        const size_t bytes = n % 50 == 0 ? 20000 : 1024;
        ASSERT_EQ(r.payload_bytes().size(), bytes);
        EXPECT_EQ(r.payload_bytes()[bytes - 1], static_cast<std::byte>(n & 0xff));
        ++n;
      }
      if (records.size() > 1) EXPECT_LE(records.size(), RECORD_BATCH_BYTES / 1024 + 1);
    }
    EXPECT_EQ(n, total);
    if (offers) EXPECT_LT(messages.size(), total / 10);  // ~30 records a message, large ones alone
    else EXPECT_EQ(messages.size(), total);
  }
}

namespace {

record stack_entry(uint64_t n, uint64_t id, const nlohmann::ordered_json *lines,
                   const std::string &run = "stack-link-run") {
  return test::stack_entry_record(run, n, id, lines);
}

// A capture session of task statistics sending to `endpoint`, started.
tprobe_session *started_statistics_session(const test::temp_dir &dir, const std::string &endpoint,
                                           const std::string &task = "statistics") {
  const std::string config = dir / "config.json";
  test::write_file(config, R"({"task": ")" + task + R"(", "level": "L1", "dump_path": ")" + (dir / "dump") + "\"}");
  tprobe_open_options o = tprobe_open_options_default();
  o.endpoint = endpoint.c_str();
  tprobe_session *s = nullptr;
  if (tprobe_session_open(config.c_str(), &o, &s) != TPROBE_OK || tprobe_start(s) != TPROBE_OK) return nullptr;
  return s;
}

// A statistics session whose records go to a sink in this process, which keeps the statistics
// of every tensor record; capture(content) captures `tensor` as the output of a new entry under
// that content name (tprobe_capture_tensor_content). finish() stops and closes the session and
// returns the statistics in arrival order.
struct content_capture {
  test::temp_dir dir;
  zmq::context_t ctx;
  stage_io_options sink_options;
  std::unique_ptr<stage_io> sink;
  std::vector<tensor_stats> seen;
  std::thread sink_thread;
  tprobe_session *session = nullptr;
  int entries = 0;

  content_capture() {
    sink_options.input = ipc(dir, "content-sink.in");
    sink = std::make_unique<stage_io>(ctx, sink_options);
    // Reading before the session opens: the session waits for its consumer's answer.
    sink_thread = std::thread([this] {
      try {
        while (auto r = sink->receive())
          if (r->header.kind == record_kind::tensor && r->header.stats) seen.push_back(*r->header.stats);
      } catch (const zmq::error_t &) {  // the context shut down: no session ever came
      }
    });
    session = started_statistics_session(dir, sink_options.input);
  }
  ~content_capture() {
    if (session) {
      (void)finish();  // the session's end of stream ends the sink's thread
    } else if (sink_thread.joinable()) {
      ctx.shutdown();
      sink_thread.join();
    }
  }
  int capture(const DLTensor &tensor, uint64_t content) {
    const std::string name = "Functional.op." + std::to_string(entries++) + ".forward";
    return tprobe_capture_tensor_content(session, name.c_str(), "output.0", &tensor, 0, content);
  }
  uint64_t reused() const {
    tprobe_session_counts counts{};
    EXPECT_EQ(tprobe_session_counts_get(session, &counts), TPROBE_OK);
    return counts.stats_reused;
  }
  uint64_t bytes_read() const {
    tprobe_session_counts counts{};
    EXPECT_EQ(tprobe_session_counts_get(session, &counts), TPROBE_OK);
    return counts.stats_bytes_read;
  }
  std::vector<tensor_stats> finish() {
    EXPECT_EQ(tprobe_stop(session), TPROBE_OK);
    EXPECT_EQ(tprobe_session_close(session), TPROBE_OK);
    session = nullptr;
    sink_thread.join();
    return seen;
  }
};

}  // namespace

TEST(Endpoint, call_stacks_travel_once_per_id_to_a_consumer_that_takes_references) {
  // The capture's way: ids only, the lines in the book (record.h section 5).
  const nlohmann::ordered_json a = {"File a.py, line 1, in f"}, b = {"File b.py, line 2, in g"};
  stack_book_define("stack-link-run", 1, a);
  stack_book_define("stack-link-run", 2, b);
  test::temp_dir dir;
  for (bool offers : {true, false}) {
    SCOPED_TRACE(offers ? "offers stack_refs" : "protocol 1.3: lines with every entry");
    zmq::context_t ctx;
    zmq::socket_t router(ctx, zmq::socket_type::router);
    router.bind(ipc(dir, offers ? "refs.in" : "lines.in"));
    const std::string ep = router.get(zmq::sockopt::last_endpoint);
    std::vector<std::vector<record>> messages;
    std::thread consumer([&] { messages = raw_consumer(router, true, offers); });
    const uint64_t ids[] = {1, 1, 2, 1, 2};
    {
      record_sender s(ctx, ep, "producer");
      for (uint64_t n = 0; n < 5; ++n) s.send(stack_entry(n, ids[n], nullptr));
      s.finish(5, 0);
    }
    consumer.join();
    std::vector<record> got;
    for (auto &m : messages)
      for (auto &r : m) got.push_back(std::move(r));
    ASSERT_EQ(got.size(), 5u);
    for (uint64_t n = 0; n < 5; ++n) {
      const bool first_of_its_id = n == 0 || n == 2;
      const bool has_lines = got[n].header.meta.contains("stack");
      EXPECT_EQ(has_lines, !offers || first_of_its_id) << n;
      if (has_lines) EXPECT_EQ(got[n].header.meta["stack"], ids[n] == 1 ? a : b) << n;
      EXPECT_EQ(got[n].header.meta["stack_id"], ids[n]) << n;
    }
  }
}

TEST(Endpoint, a_stage_that_drops_the_defining_entry_still_sends_the_lines_on) {
  // The producer defines id 7 in its first record only (the lines come from the wire, not from
  // this process's book); the middle stage drops that record. Its output must carry the lines
  // with the first reference it passes on.
  const nlohmann::ordered_json lines = {"File m.py, line 7, in step"};
  test::temp_dir dir;
  zmq::context_t ctx;
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.bind(ipc(dir, "after-middle.in"));
  const std::string sink = router.get(zmq::sockopt::last_endpoint);
  std::vector<std::vector<record>> messages;
  std::thread consumer([&] { messages = raw_consumer(router, true, true); });
  stage_io_options mid;
  mid.input = ipc(dir, "middle.in");
  mid.outputs = {sink};
  stage_io middle(ctx, mid);
  std::thread producer([&] {
    record_sender s(ctx, mid.input, "p");
    s.send(stack_entry(0, 7, &lines, "stack-drop-run"));
    for (uint64_t n = 1; n < 4; ++n) s.send(stack_entry(n, 7, nullptr, "stack-drop-run"));
    s.finish(4, 0);
  });
  while (auto r = middle.receive()) {
    EXPECT_EQ(r->header.meta.contains("stack"), r->header.seq == 0) << "the producer's link defines it once";
    if (r->header.seq != 0) middle.send(*r);
  }
  middle.finish();
  producer.join();
  consumer.join();
  std::vector<record> got;
  for (auto &m : messages)
    for (auto &r : m) got.push_back(std::move(r));
  ASSERT_EQ(got.size(), 3u);
  EXPECT_EQ(got[0].header.meta["stack"], lines);
  EXPECT_FALSE(got[1].header.meta.contains("stack"));
  EXPECT_FALSE(got[2].header.meta.contains("stack"));
}

TEST(Endpoint, a_batch_goes_when_a_record_joins_it_late) {
  // A slow producer (a stage that takes long per record while its input is never empty): the
  // second record, sent after the batch's age limit, sends the batch, without a flush().
  test::temp_dir dir;
  zmq::context_t ctx;
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.bind(ipc(dir, "late.in"));
  const std::string ep = router.get(zmq::sockopt::last_endpoint);
  std::thread answer_hello([&] {
    zmq::message_t id, hello;
    (void)router.recv(id);
    (void)router.recv(hello);
    record_header ack = record_header_of(record_kind::ack);
    ack.meta = endpoint_peer_meta("raw consumer");
    ack.meta["batch"] = true;
    router.send(id, zmq::send_flags::sndmore);
    router.send(record_header_encode(ack), zmq::send_flags::none);
  });
  record_sender s(ctx, ep, "slow producer");
  answer_hello.join();
  s.send(numbered(0));
  std::this_thread::sleep_for(std::chrono::milliseconds(2 * RECORD_BATCH_MAX_AGE_MS));  // the slow work
  s.send(numbered(1));
  router.set(zmq::sockopt::rcvtimeo, 10000);
  zmq::message_t id, frame;
  ASSERT_TRUE(router.recv(id));
  ASSERT_TRUE(router.recv(frame));
  ASSERT_TRUE(record_frame_is_batch(frame));
  const auto records = record_batch_decode(frame);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[1].header.seq, 2u);
  s.abandon();
}

TEST(Endpoint, a_stage_sends_what_it_holds_in_a_batch_before_it_waits_for_input) {
  // producer -> middle (stage_io, forwards) -> sink. The producer sends a few records and flushes,
  // then waits, without ending its stream, until the sink has them all: the middle stage must not
  // hold them in a batch while its own input is quiet.
  zmq::context_t ctx;
  stage_io_options sink_options, mid_options;
  sink_options.input = "inproc://flush-sink";
  stage_io sink(ctx, sink_options);
  mid_options.input = "inproc://flush-mid";
  mid_options.outputs = {"inproc://flush-sink"};
  std::mutex mutex;
  std::condition_variable arrived;
  uint64_t got = 0;
  std::thread sink_thread([&] {
    while (sink.receive()) {
      std::lock_guard lock(mutex);
      ++got;
      arrived.notify_all();
    }
  });
  stage_io middle(ctx, mid_options);
  std::thread middle_thread([&] {
    while (auto r = middle.receive()) middle.send(*r);
    middle.finish();
  });
  record_sender s(ctx, "inproc://flush-mid", "p");
  for (uint64_t i = 0; i < 5; ++i) s.send(numbered(i));
  s.flush();
  {
    std::unique_lock lock(mutex);
    EXPECT_TRUE(arrived.wait_for(lock, std::chrono::seconds(10), [&] { return got == 5; })) << got << " arrived";
  }
  s.finish(5, 0);
  middle_thread.join();
  sink_thread.join();
  EXPECT_EQ(got, 5u);
}

TEST(Endpoint, a_capture_sends_its_batch_once_its_queue_is_empty) {
  // The training captures three small tensors and then computes for a while: the records must
  // reach the stage now, not wait in a batch for the next capture, stop() or close().
  test::temp_dir dir;
  zmq::context_t ctx;
  stage_io_options sink_options;
  sink_options.input = ipc(dir, "capture-sink.in");
  stage_io sink(ctx, sink_options);
  std::mutex mutex;
  std::condition_variable arrived;
  uint64_t tensors = 0;
  std::thread sink_thread([&] {
    while (auto r = sink.receive()) {
      std::lock_guard lock(mutex);
      tensors += r->header.kind == record_kind::tensor;
      arrived.notify_all();
    }
  });
  tprobe_session *s = started_statistics_session(dir, sink_options.input);
  ASSERT_NE(s, nullptr) << tprobe_last_error();
  float data[4] = {1, 2, 3, 4};
  int64_t shape[1] = {4};
  DLTensor t = test::float_tensor(data, shape);
  for (int i = 0; i < 3; ++i) {
    const std::string name = "Functional.relu." + std::to_string(i) + ".forward";
    ASSERT_EQ(tprobe_capture_tensor(s, name.c_str(), "output.0", &t, 0), TPROBE_OK);
  }
  {
    std::unique_lock lock(mutex);
    EXPECT_TRUE(arrived.wait_for(lock, std::chrono::seconds(10), [&] { return tensors == 3; }))
        << tensors << " tensors arrived before stop()";
  }
  EXPECT_EQ(tprobe_stop(s), TPROBE_OK);
  EXPECT_EQ(tprobe_session_close(s), TPROBE_OK);
  sink_thread.join();
  EXPECT_EQ(tensors, 3u);
}

TEST(Endpoint, a_capture_keeps_its_batch_across_naps_while_records_keep_coming) {
  // A training thread that captures a small tensor every ~100 µs (an operator's compute between
  // captures) keeps its sender napping (1 ms): the sender must not send a batch per nap but let
  // it fill until its age limit (RECORD_BATCH_MAX_AGE_MS) or its size, for each batch wakes three
  // threads of two processes. A quiet spell (this thread descheduled for half a nap or more)
  // rightly sends the batch, so each one the test sees allows one message more.
  test::temp_dir dir;
  zmq::context_t ctx;
  zmq::socket_t router(ctx, zmq::socket_type::router);
  router.bind(ipc(dir, "naps.in"));
  const std::string ep = router.get(zmq::sockopt::last_endpoint);
  std::vector<std::vector<record>> messages;
  std::thread consumer([&] { messages = raw_consumer(router, true, true); });
  tprobe_session *s = started_statistics_session(dir, ep);
  ASSERT_NE(s, nullptr) << tprobe_last_error();
  float data[4] = {1, 2, 3, 4};
  int64_t shape[1] = {4};
  DLTensor t = test::float_tensor(data, shape);
  constexpr int captures = 1500;
  using clock_type = std::chrono::steady_clock;
  const auto first = clock_type::now();
  auto last = first;
  size_t quiet_spells = 0;
  for (int i = 0; i < captures; ++i) {
    const auto now = clock_type::now();
    quiet_spells += now - last >= std::chrono::microseconds(500);
    last = now;
    const std::string name = "Functional.relu." + std::to_string(i) + ".forward";
    ASSERT_EQ(tprobe_capture_tensor(s, name.c_str(), "output.0", &t, 0), TPROBE_OK);
    const auto until = clock_type::now() + std::chrono::microseconds(100);
    while (clock_type::now() < until) {
    }
  }
  const auto elapsed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(clock_type::now() - first).count();
  EXPECT_EQ(tprobe_stop(s), TPROBE_OK);
  EXPECT_EQ(tprobe_session_close(s), TPROBE_OK);
  consumer.join();
  size_t tensors = 0, tensor_messages = 0;
  for (const auto &records : messages) {
    const auto n = static_cast<size_t>(std::count_if(records.begin(), records.end(), [](const record &r) {
      return r.header.kind == record_kind::tensor;
    }));
    tensors += n;
    tensor_messages += n > 0;
  }
  EXPECT_EQ(tensors, static_cast<size_t>(captures));
  // A batch per nap would be ~elapsed_ms messages; by age, at most ~elapsed_ms / 5.
  EXPECT_LE(tensor_messages, static_cast<size_t>(elapsed_ms / (RECORD_BATCH_MAX_AGE_MS - 1)) + quiet_spells + 4)
      << tensors << " tensors in " << elapsed_ms << " ms, " << quiet_spells << " quiet spells";
}

TEST(Endpoint, a_saved_tensor_arrives_with_its_statistics_taken_in_the_copy) {
  // Task "tensor": the payload leaves, and the statistics dump.json needs are taken in the copy's
  // pass (stats_options::copy_to), so the statistics stage has nothing left to read. Small and
  // large (streaming stores, parts on the capture's helper), through the socket and shared
  // memory; a strided view is gathered and left to the stage, as before.
  test::temp_dir dir;
  zmq::context_t ctx;
  stage_io_options sink_options;
  sink_options.input = ipc(dir, "saved-sink.in");
  stage_io sink(ctx, sink_options);
  struct seen {
    std::string entry;
    std::optional<tensor_stats> stats;
    std::vector<std::byte> payload;
  };
  std::vector<seen> got;
  std::thread sink_thread([&] {
    while (auto r = sink.receive())
      if (r->header.kind == record_kind::tensor) {
        auto bytes = r->payload_bytes();
        got.push_back({r->header.entry, r->header.stats, {bytes.begin(), bytes.end()}});
      }
  });
  tprobe_session *s = started_statistics_session(dir, sink_options.input, "tensor");
  ASSERT_NE(s, nullptr) << tprobe_last_error();
  std::vector<std::vector<float>> inputs;
  for (size_t count : {size_t{4}, size_t{70000}, (size_t{3} << 20) / 4 + 9}) {
    std::vector<float> v(count);
    for (size_t i = 0; i < count; ++i) v[i] = std::sin(static_cast<float>(i)) * 3.0f;
    inputs.push_back(std::move(v));
  }
  for (size_t i = 0; i < inputs.size(); ++i) {
    int64_t shape[1] = {static_cast<int64_t>(inputs[i].size())};
    DLTensor t = test::float_tensor(inputs[i].data(), shape);
    const std::string name = "Functional.relu." + std::to_string(i) + ".forward";
    ASSERT_EQ(tprobe_capture_tensor(s, name.c_str(), "output.0", &t, 0), TPROBE_OK) << tprobe_last_error();
  }
  int64_t square[2] = {2, 2}, transposed[2] = {1, 2};
  DLTensor view = test::float_tensor(inputs[0].data(), square);
  view.ndim = 2;
  view.strides = transposed;
  ASSERT_EQ(tprobe_capture_tensor(s, "Functional.relu.3.forward", "output.0", &view, 0), TPROBE_OK);
  EXPECT_EQ(tprobe_stop(s), TPROBE_OK);
  EXPECT_EQ(tprobe_session_close(s), TPROBE_OK);
  sink_thread.join();
  ASSERT_EQ(got.size(), 4u);
  for (size_t i = 0; i < inputs.size(); ++i) {
    SCOPED_TRACE(got[i].entry);
    const auto &v = inputs[i];
    ASSERT_TRUE(got[i].stats.has_value()) << "statistics left to the stage";
    EXPECT_EQ(*got[i].stats, tensor_stats_compute(v.data(), dtype::float32, v.size(), false, {}));
    ASSERT_EQ(got[i].payload.size(), v.size() * 4);
    EXPECT_EQ(std::memcmp(got[i].payload.data(), v.data(), v.size() * 4), 0);
  }
  EXPECT_FALSE(got[3].stats.has_value()) << "a strided view's statistics are the stage's";
  const float gathered[4] = {inputs[0][0], inputs[0][2], inputs[0][1], inputs[0][3]};
  ASSERT_EQ(got[3].payload.size(), 16u);
  EXPECT_EQ(std::memcmp(got[3].payload.data(), gathered, 16), 0);
}

TEST(Endpoint, a_named_content_is_read_once) {
  // tprobe_capture_tensor_content: the same content name at the same address, dtype
  // and element count reuses the statistics read before (a view of another shape too); any other
  // name, count or no name at all reads the data.
  // The data is changed behind a repeated name on purpose: the reused Max shows it was not read.
  content_capture c;
  ASSERT_NE(c.session, nullptr) << tprobe_last_error();
  float data[4] = {1, 2, 3, 4};
  int64_t shape[1] = {4};
  DLTensor t = test::float_tensor(data, shape);
  ASSERT_EQ(c.capture(t, 7), TPROBE_OK);  // read: 4
  data[3] = 9;
  ASSERT_EQ(c.capture(t, 7), TPROBE_OK);  // reused: 4
  ASSERT_EQ(c.capture(t, 8), TPROBE_OK);  // another name, read: 9
  int64_t square[2] = {2, 2};
  t.shape = square;
  t.ndim = 2;
  ASSERT_EQ(c.capture(t, 8), TPROBE_OK);  // a view of the same bytes, reused: 9
  t.shape = shape;
  t.ndim = 1;
  data[3] = 5;
  ASSERT_EQ(c.capture(t, 0), TPROBE_OK);  // no name, read: 5
  ASSERT_EQ(c.capture(t, 0), TPROBE_OK);  // read: 5
  shape[0] = 3;
  ASSERT_EQ(c.capture(t, 8), TPROBE_OK);  // another shape, read: 3
  EXPECT_EQ(c.reused(), 2u);
  EXPECT_EQ(c.bytes_read(), 4u * 16 + 12) << "five reads of 4 floats and one of 3; the reused read nothing";
  std::vector<double> maxima;
  for (const auto &st : c.finish()) maxima.push_back(st.max.real);
  EXPECT_EQ(maxima, (std::vector<double>{4, 4, 9, 9, 5, 5, 3}));
}

TEST(Endpoint, a_named_strided_view_is_read_once_per_layout) {
  // A transposed view under a content name reuses the statistics of the same view (address,
  // dtype, shape, strides) read before; the contiguous tensor of the same name, the same bytes
  // under other strides, and another name read the data. The data is changed behind a repeated
  // name on purpose: a stale Mean shows it was not read; the sums' order shows in none of these.
  content_capture c;
  ASSERT_NE(c.session, nullptr) << tprobe_last_error();
  float data[6] = {1, 2, 3, 4, 5, 6};  // a 2x3 matrix, viewed as its 3x2 transpose
  int64_t shape[2] = {3, 2}, strides[2] = {1, 3};
  DLTensor t = test::float_tensor(data, shape);
  t.ndim = 2;
  t.strides = strides;
  ASSERT_EQ(c.capture(t, 7), TPROBE_OK);  // read: mean 3.5
  data[5] = 12;
  ASSERT_EQ(c.capture(t, 7), TPROBE_OK);  // the same view, reused: 3.5
  int64_t base_shape[2] = {2, 3};
  t.shape = base_shape;
  t.strides = nullptr;
  ASSERT_EQ(c.capture(t, 7), TPROBE_OK);  // the contiguous tensor of that name, read: 4.5
  t.shape = shape;
  t.strides = strides;
  ASSERT_EQ(c.capture(t, 7), TPROBE_OK);  // the view again, still reused: 3.5
  int64_t other_shape[2] = {2, 2}, other_strides[2] = {1, 3};  // another view of the same bytes
  t.shape = other_shape;
  t.strides = other_strides;
  ASSERT_EQ(c.capture(t, 7), TPROBE_OK);  // read: (1 + 4 + 2 + 5) / 4 = 3
  t.shape = shape;
  t.strides = strides;
  ASSERT_EQ(c.capture(t, 8), TPROBE_OK);  // another name, read: 4.5
  ASSERT_EQ(c.capture(t, 0), TPROBE_OK);  // no name, read: 4.5
  EXPECT_EQ(c.reused(), 2u);
  EXPECT_EQ(c.bytes_read(), 4u * 24 + 16) << "four reads of 6 floats and one of 4; the reused read nothing";
  std::vector<double> means;
  for (const auto &st : c.finish()) means.push_back(st.mean.real);
  EXPECT_EQ(means, (std::vector<double>{3.5, 3.5, 4.5, 3.5, 3, 4.5, 4.5}));
}

TEST(Endpoint, tap_without_reader_never_blocks_and_slow_reader_drops_are_counted) {
  test::temp_dir dir;
  zmq::context_t ctx;
  stage_io_options opts;
  opts.input = "inproc://tap-in";
  opts.tap = ipc(dir, "tap");
  opts.high_water_mark = 8;
  stage_io io(ctx, opts);
  tap_subscriber sub(ctx, io.tap_endpoint());
  // The subscription travels asynchronously: send until the tap sees one record (protocol: the
  // tap shows what flows, from whenever it joined).
  uint64_t sent = 0;
  for (;; ++sent) {
    io.send(numbered(sent));
    if (sub.receive(10)) break;
    ASSERT_LT(sent, 10000u) << "subscriber never joined";
  }
  // Now flood without reading: the main path must not block, drops must be counted.
  for (uint64_t i = 0; i < 5000; ++i) io.send(numbered(sent + 1 + i));
  EXPECT_GT(io.counts().tap_dropped, 0u);
  EXPECT_EQ(io.counts().sent, sent + 1 + 5000);
}

TEST(Endpoint, file_output_then_file_input_is_the_same_stream) {
  test::temp_dir dir;
  zmq::context_t ctx;
  const std::string file = dir / "rec.tpr";
  {
    stage_io_options out;
    out.outputs = {file};
    stage_io writer(ctx, out);
    for (uint64_t i = 0; i < 5; ++i) writer.send(numbered(i, 100));
    writer.finish();
  }
  stage_io_options in;
  in.input = file;
  stage_io reader(ctx, in);
  uint64_t n = 0;
  while (auto r = reader.receive()) {
    EXPECT_EQ(r->header.seq, n + 1);
    EXPECT_EQ(static_cast<uint8_t>(r->payload_bytes()[0]), n);
    ++n;
  }
  EXPECT_EQ(n, 5u);
  EXPECT_EQ(reader.counts().truncated_producers, 0u);
}

TEST(Endpoint, malformed_record_names_its_producer) {
  zmq::context_t ctx;
  stage_io_options in;
  in.input = "inproc://bad";
  stage_io consumer(ctx, in);
  // A raw DEALER sends garbage instead of hello.
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.connect("inproc://bad");
  raw.send(zmq::str_buffer("garbage"), zmq::send_flags::none);
  try {
    while (consumer.receive()) {
    }
    FAIL() << "accepted a malformed record";
  } catch (const framing_error &e) {
    EXPECT_NE(std::string(e.what()).find("malformed record"), std::string::npos) << e.what();
  }
}

TEST(Endpoint, handshake_times_out_without_a_consumer) {
  test::temp_dir dir;
  zmq::context_t ctx;
  EXPECT_THROW(record_sender(ctx, ipc(dir, "nobody"), "lonely", 10, link_deadlines{.connect_timeout_ms = 200}), system_error);
}

TEST(Endpoint, crashed_producer_is_counted_not_awaited) {
  test::temp_dir dir;
  zmq::context_t ctx;
  stage_io_options in;
  in.input = ipc(dir, "in");
  stage_io consumer(ctx, in);
  // A child process says hello, sends two records and dies without eos.
  const pid_t pid = fork();
  if (pid == 0) {
    zmq::context_t child_ctx;
    record_sender s(child_ctx, in.input, "doomed");
    s.send(numbered(0));
    s.send(numbered(1));
    _exit(0);  // no eos; the context is not terminated, but the socket dies with the process
  }
  // Reap it at once: a zombie still answers kill(pid, 0).
  std::thread reaper([pid] {
    int status = 0;
    waitpid(pid, &status, 0);
  });
  uint64_t n = 0;
  while (consumer.receive()) ++n;
  reaper.join();
  EXPECT_EQ(consumer.counts().truncated_producers, 1u);
  EXPECT_LE(n, 2u);
}

TEST(Endpoint, request_stop_ends_receive) {
  zmq::context_t ctx;
  stage_io_options in;
  in.input = "inproc://stop";
  stage_io consumer(ctx, in);
  std::thread stopper([] { request_stop(); });
  stopper.join();
  EXPECT_FALSE(consumer.receive().has_value());
  EXPECT_TRUE(consumer.interrupted());
}
