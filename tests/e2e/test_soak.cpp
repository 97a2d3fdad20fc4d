// Soak: a million records through tprobe-synth → tprobe-stats → {tprobe-writer, tprobe-null}, with
// tprobe-null as a slow consumer (it stops reading for 0.2 s after every step_end, so backpressure
// stops the whole pipeline ten times) and a deliberately slow subscriber on stats' lossy tap.
//
// Checked: nothing is lost on the main path (null's count and the writer's equal what synth sent,
// and the dump.json files hold every tensor), and stats' tap drop counter is exact: it equals the
// records stats published while this subscriber was subscribed minus those it received.
//
// Why the tap count can be exact, and what the test does for it (stages/common/stage_io.cpp,
// publish_tap: an XPUB with ZMQ_XPUB_NODROP, sends with ZMQ_DONTWAIT):
//  - a record is counted as dropped exactly when the subscriber's pipe is at its high-water mark
//    (EAGAIN); otherwise it is queued, and a queued record reaches the subscriber unless the
//    socket closes first;
//  - records published before the subscription reached stats match no subscriber: they are
//    neither counted nor delivered. The first record received is the first one published after
//    that (the pipe is empty then, so it cannot have been dropped), and synth numbers its records
//    (seq 1…N, which stats keeps): the subscriber's window is [first seq received, N];
//  - stats closes its tap with linger 0 when it exits, so records still queued then are lost
//    without being counted. The subscriber therefore reads until the eos that stats publishes on
//    its tap after its outputs acknowledged theirs: that eos, queued behind every earlier record,
//    proves they all arrived. It could itself be refused if the pipe were full at that moment, so
//    the subscriber reads at full speed through the second half of the stream, and null's pause
//    after the last step_end (which holds stats' eos acknowledgement, hence its tap eos) gives it
//    0.2 s to catch up with at most a few thousand queued headers. If the eos still does not come,
//    the test fails saying so rather than comparing counts that cannot be exact.
#include <chrono>
#include <thread>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zmq.hpp>

#include "endpoint.h"
#include "pyjson.h"
#include "synth/synth.h"
#include "tensor_stats.h"
#include "test_support.h"

using namespace tprobe;
using json = nlohmann::ordered_json;

namespace {

using test::number_after;

}  // namespace

TEST(Soak, a_million_records_with_a_slow_consumer_lose_nothing_and_the_tap_counts_its_drops) {
  test::temp_dir dir;
  auto ipc = [&](const std::string &name) { return "ipc://" + dir.path() + "/" + name; };
  synth_stage_options o;
  o.records = 1000000;
  o.steps = 10;
  o.sizes = {4};
  o.entry_records = false;
  o.dump_path = dir / "dump";
  const uint64_t total = synth_total_records(o);  // 1 session + 10^6 tensors + 10 step_end

  test::child_process writer({test::bin("tprobe-writer"), "--input", ipc("writer.in")}, dir.path(), {}, true);
  writer.wait_ready();
  test::child_process null({test::bin("tprobe-null"), "--input", ipc("null.in"), "--delay-us", "200000",
                            "--delay-kinds", "step_end", "--expect", std::to_string(total)},
                           dir.path(), {}, true);
  null.wait_ready();
  test::child_process stats({test::bin("tprobe-stats"), "--input", ipc("stats.in"), "--output", ipc("writer.in"),
                             "--output", ipc("null.in"), "--tap", ipc("stats.tap")},
                            dir.path(), {}, true);
  stats.wait_ready();
  zmq::context_t ctx;
  tap_subscriber tap(ctx, ipc("stats.tap"));
  const auto start = std::chrono::steady_clock::now();
  test::child_process synth({test::bin("tprobe-synth"), "--output", ipc("stats.in"), "--records",
                             std::to_string(o.records), "--steps", std::to_string(o.steps), "--sizes", "4",
                             "--no-entry-records", "--dump-path", o.dump_path},
                            dir.path());

  uint64_t received = 0, first_seq = 0, last_seq = 0, gaps = 0, pauses = 0, next_pause = 1;
  bool eos = false;
  while (!eos) {
    auto r = tap.receive(60000);
    if (!r) {
      ADD_FAILURE() << "nothing on stats' tap for 60 s and no eos: the counts cannot be compared exactly\n"
                    << stats.err();
      break;
    }
    if (r->header.kind == record_kind::eos) {
      eos = true;
      break;
    }
    const uint64_t seq = r->header.seq;
    ASSERT_GT(seq, last_seq) << "the tap delivered records out of order";
    if (!first_seq) first_seq = seq;
    else if (seq != last_seq + 1) ++gaps;
    last_seq = seq;
    ++received;
    // A slow subscriber on purpose (load, not synchronisation): while it does not read, stats goes
    // on publishing and its tap must drop and count. In the first half only, and until drops were
    // seen at least twice; the second half is read at full speed (see the top of the file).
    if (seq >= next_pause && seq < total / 2 && (gaps < 2 || pauses < 2)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      ++pauses;
      next_pause = seq + total / 20;
    }
  }
  EXPECT_EQ(synth.wait(), 0) << synth.err();
  EXPECT_EQ(stats.wait(), 0) << stats.err();
  EXPECT_EQ(null.wait(), 0) << null.err();
  EXPECT_EQ(writer.wait(), 0) << writer.err();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

  // The main path lost nothing.
  EXPECT_EQ(number_after(synth.err(), "tprobe-synth: sent "), total) << synth.err();
  EXPECT_EQ(number_after(stats.err(), "tprobe-stats: "), total) << stats.err();
  EXPECT_EQ(number_after(null.err(), "tprobe-null: "), total) << null.err();
  EXPECT_EQ(number_after(null.err(), " records (1 session, "), o.records) << null.err();
  EXPECT_EQ(number_after(writer.err(), "tprobe-writer: "), total) << writer.err();

  // The tap's drop counter is exact over the subscriber's window.
  const uint64_t tap_dropped = number_after(stats.err(), "tap dropped ");
  ASSERT_TRUE(eos);
  ASSERT_GE(first_seq, 1u);
  const uint64_t published_to_us = total - first_seq + 1;
  EXPECT_EQ(tap_dropped, published_to_us - received)
      << "first seq " << first_seq << ", received " << received << ", gaps " << gaps;
  EXPECT_GT(tap_dropped, 0u) << "the slow subscriber caused no drops: the check above proved nothing";
  std::printf("soak: %llu records in %.1f s; tap: subscribed from seq %llu, received %llu, dropped %llu (stats says "
              "%llu), %llu gaps, %llu pauses\n",
              static_cast<unsigned long long>(total), seconds, static_cast<unsigned long long>(first_seq),
              static_cast<unsigned long long>(received),
              static_cast<unsigned long long>(published_to_us - received),
              static_cast<unsigned long long>(tap_dropped), static_cast<unsigned long long>(gaps),
              static_cast<unsigned long long>(pauses));

  // The dump holds every tensor; the first and last of each step with synth's statistics.
  uint64_t leaves = 0;
  for (uint64_t step = 0; step < o.steps; ++step) {
    const std::string path = dir.path() + "/dump/step" + std::to_string(step) + "/rank/dump.json";
    const json doc = pyjson_load_file(path);
    const json &data = doc.at("data");
    for (const auto &[name, entry] : data.items()) leaves += entry.at("input_args").size() + entry.at("output").size();
    const uint64_t begin = synth_step_begin(o, step), end = synth_step_begin(o, step + 1);
    for (uint64_t t : {begin, end - 1}) {
      const record r = synth_tensor(o, t, static_cast<int64_t>(step), t - begin);
      const auto b = r.payload_bytes();
      const auto s = tensor_stats_compute(b.data(), r.header.type, r.header.element_count(), false, {});
      const json &e = data.at(r.header.entry);
      const json &leaf = r.header.slot == "input.0" ? e.at("input_args").at(0) : e.at("output").at(0);
      EXPECT_EQ(leaf.at("Max").get<double>(), s.max.real) << path << " " << r.header.entry;
      EXPECT_EQ(leaf.at("Norm").get<double>(), s.norm.real) << path << " " << r.header.entry;
    }
  }
  EXPECT_EQ(leaves, o.records);
}
