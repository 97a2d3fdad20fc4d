// The test stages in-process: tprobe-synth's stream (shape, determinism, NaN/Inf patterns, pacing,
// environment), tprobe-null's counts and expectation, tprobe-fault's faults. Stages run their
// *_run() functions on threads of this process over inproc:// sockets of one context (readiness
// is the hello/ack handshake, no sleeps), or over record files where a stage must end abruptly.
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <filesystem>
#include <map>
#include <optional>
#include <thread>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "stage_io.h"
#include "errors.h"
#include "fault/fault.h"
#include "null/null.h"
#include "synth/synth.h"
#include "tensor_stats.h"
#include "test_support.h"

using namespace tprobe;
using ::testing::HasSubstr;

namespace {

// A stage on its own thread with its own stage_io (constructed there: the constructor's
// handshake waits for the consumer, which the calling thread serves).
class stage_thread {
 public:
  template <typename Body>
  stage_thread(zmq::context_t &ctx, stage_io_options options, Body body)
      : thread_([this, &ctx, options = std::move(options), body = std::move(body)] {
          try {
            stage_io io(ctx, options);
            body(io);
          } catch (...) {
            error_ = std::current_exception();
          }
        }) {}
  ~stage_thread() {
    if (thread_.joinable()) thread_.join();
  }
  void join() {
    thread_.join();
    if (error_) std::rethrow_exception(error_);
  }

 private:
  std::exception_ptr error_;
  std::thread thread_;
};

stage_io_options output_to(const std::string &endpoint, const std::string &name) {
  stage_io_options o;
  o.outputs = {endpoint};
  o.producer_name = name;
  return o;
}

stage_io_options input_from(const std::string &endpoint, const std::string &name) {
  stage_io_options o;
  o.input = endpoint;
  o.producer_name = name;
  return o;
}

// Every record synth sends, received by this thread.
std::vector<record> collect(const synth_stage_options &options, synth_stage_result *sent = nullptr) {
  zmq::context_t ctx;
  stage_io sink(ctx, input_from("inproc://sink", "test sink"));
  synth_stage_result result;
  stage_thread synth(ctx, output_to("inproc://sink", "tprobe-synth"), [&](stage_io &io) { result = synth_run(io, options); });
  std::vector<record> out;
  while (auto r = sink.receive()) out.push_back(std::move(*r));
  synth.join();
  if (sent) *sent = result;
  return out;
}

struct chain_result {
  synth_stage_result synth;
  fault_stage_result fault;
  null_stage_result null;
};

// synth → fault → null over inproc.
chain_result run_chain(const synth_stage_options &so, const fault_stage_options &fo) {
  zmq::context_t ctx;
  chain_result r;
  stage_io sink(ctx, input_from("inproc://null", "tprobe-null"));
  stage_thread fault(ctx,
                     [] {
                       auto o = input_from("inproc://fault", "tprobe-fault");
                       o.outputs = {"inproc://null"};
                       return o;
                     }(),
                     [&](stage_io &io) { r.fault = fault_run(io, fo); });
  stage_thread synth(ctx, output_to("inproc://fault", "tprobe-synth"), [&](stage_io &io) { r.synth = synth_run(io, so); });
  r.null = null_run(sink, {});
  synth.join();
  fault.join();
  return r;
}

std::vector<std::byte> bytes_of(const record &r) {
  auto b = r.payload_bytes();
  return {b.begin(), b.end()};
}

tensor_stats stats_of(const record &r) {
  const auto b = r.payload_bytes();
  return tensor_stats_compute(b.data(), r.header.type, r.header.element_count(), r.header.shape.empty(), {});
}

}  // namespace

// ---- synth ----

TEST(Synth, sends_a_session_then_entries_tensors_and_step_ends) {
  synth_stage_options o;
  o.records = 7;
  o.steps = 2;
  o.sizes = {3, 5};
  o.dtypes = {dtype::float32, dtype::bfloat16, dtype::int64};
  o.dump_path = "/tmp/synth-dump";
  o.rank = 2;
  o.task = "tensor";
  synth_stage_result sent;
  const auto got = collect(o, &sent);

  ASSERT_EQ(got.size(), synth_total_records(o));
  EXPECT_EQ(sent.records, got.size());
  EXPECT_EQ(sent.tensors, 7u);
  EXPECT_EQ(sent.steps, 2u);
  // Steps get records [0, 3) and [3, 7): two entries in step 0 (3 tensors), two in step 1.
  EXPECT_EQ(sent.entries, 4u);
  const auto &session = got.front().header;
  EXPECT_EQ(session.kind, record_kind::session);
  EXPECT_EQ(session.meta["task"], "tensor");
  EXPECT_EQ(session.meta["dump_path"], "/tmp/synth-dump");
  EXPECT_EQ(session.meta["rank"], 2);
  EXPECT_EQ(session.meta["producer"], "tprobe-synth");

  std::vector<std::string> shape;  // kind (and slot) sequence
  uint64_t t = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const auto &h = got[i].header;
    EXPECT_EQ(h.seq, i + 1) << i;  // one producer sequence, no gaps
    EXPECT_EQ(h.rank, 2);
    shape.push_back(std::string(record_kind_name(h.kind)) + (h.slot.empty() ? "" : " " + h.slot));
    if (h.kind != record_kind::tensor) continue;
    const int64_t step = t < 3 ? 0 : 1;
    const auto expected = synth_tensor(o, t, step, t - (step == 0 ? 0 : 3));
    EXPECT_EQ(h.step, step);
    EXPECT_EQ(h.entry, expected.header.entry);
    EXPECT_EQ(h.type, o.dtypes[t % 3]);
    EXPECT_EQ(h.shape, std::vector<int64_t>{static_cast<int64_t>(o.sizes[t % 2])});
    EXPECT_TRUE(h.flags & RECORD_FLAG_SAVE);  // task tensor
    EXPECT_EQ(bytes_of(got[i]), bytes_of(expected)) << t;
    ++t;
  }
  EXPECT_EQ(shape, (std::vector<std::string>{"session", "entry", "tensor input.0", "tensor output.0", "entry",
                                             "tensor input.0", "step_end", "entry", "tensor input.0",
                                             "tensor output.0", "entry", "tensor input.0", "tensor output.0",
                                             "step_end"}));
  EXPECT_EQ(got[1].header.entry, "Torch.add.0.forward");
  EXPECT_EQ(got[4].header.entry, "Torch.add.1.forward");
  EXPECT_EQ(got[6].header.step, 0);
  EXPECT_EQ(got.back().header.step, 1);
}

TEST(Synth, data_comes_from_the_seed) {
  synth_stage_options a, b;
  a.dtypes = b.dtypes = {dtype::float64, dtype::float16, dtype::complex64, dtype::uint8, dtype::boolean};
  b.seed = 2;
  for (uint64_t t = 0; t < 10; ++t) {
    EXPECT_EQ(bytes_of(synth_tensor(a, t, 0, t)), bytes_of(synth_tensor(a, t, 0, t))) << t;
    EXPECT_NE(bytes_of(synth_tensor(a, t, 0, t)), bytes_of(synth_tensor(b, t, 0, t))) << t;
    EXPECT_NE(bytes_of(synth_tensor(a, t, 0, t)), bytes_of(synth_tensor(a, t + 10, 0, t))) << t;
  }
  // Finite data of every type without a pattern; bool is 0 or 1.
  for (uint64_t t = 0; t < 5; ++t) {
    const auto s = stats_of(synth_tensor(a, t, 0, t));
    EXPECT_EQ(s.nan_count + s.inf_count, 0u) << t;
  }
  for (auto v : bytes_of(synth_tensor(a, 4, 0, 4))) EXPECT_LE(static_cast<unsigned>(v), 1u);
}

TEST(Synth, patterns_put_nan_and_inf_into_every_kth_floating_tensor) {
  synth_stage_options o;
  o.records = 30;
  o.dtypes = {dtype::float32, dtype::int64, dtype::bfloat16, dtype::float16, dtype::complex128};
  o.sizes = {1, 2, 8};
  o.every = 4;
  for (auto pattern : {synth_pattern::nan, synth_pattern::inf, synth_pattern::neginf, synth_pattern::mixed}) {
    o.pattern = pattern;
    for (uint64_t t = 0; t < o.records; ++t) {
      const auto r = synth_tensor(o, t, 0, t);
      const auto s = stats_of(r);
      const bool chosen = (t + 1) % 4 == 0 && r.header.type != dtype::int64;
      SCOPED_TRACE(fmt::format("{} record {} {} [{}]", synth_pattern_name(pattern), t, dtype_name(r.header.type),
                               r.header.element_count()));
      EXPECT_EQ(synth_is_special(o, t), chosen);
      if (!chosen) {
        EXPECT_EQ(s.nan_count + s.inf_count, 0u);
        continue;
      }
      const uint64_t n = r.header.element_count();
      switch (pattern) {
        case synth_pattern::nan: EXPECT_EQ(s.nan_count, 1u); break;
        case synth_pattern::inf:
          EXPECT_EQ(s.inf_count, 1u);
          if (!dtype_is_complex(r.header.type)) {
            EXPECT_EQ(s.max.as_double(), INFINITY);
          }
          break;
        case synth_pattern::neginf:
          EXPECT_EQ(s.inf_count, 1u);
          if (!dtype_is_complex(r.header.type)) {
            EXPECT_EQ(s.min.as_double(), -INFINITY);
          }
          break;
        default:  // mixed: as much of NaN, +Inf, -Inf as fits
          EXPECT_EQ(s.nan_count, 1u);
          EXPECT_EQ(s.inf_count, std::min<uint64_t>(n, 3) - 1);
          break;
      }
    }
  }
}

TEST(Synth, rate_paces_the_records) {
  synth_stage_options o;
  o.records = 18;  // + session + 9 entries + step_end = 29 records: the last leaves after 28 / rate
  o.rate = 1000;
  const auto start = std::chrono::steady_clock::now();
  const auto got = collect(o);
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(got.size(), 29u);
  EXPECT_GE(took, std::chrono::milliseconds(28));
}

TEST(Synth, takes_what_a_capture_takes_from_tprobe_run) {
  const std::map<std::string, std::string> env{{"TPROBE_ENDPOINT", "ipc:///r/a.in,ipc:///r/b.in"},
                                               {"TPROBE_TASK", "tensor"},
                                               {"TPROBE_DUMP_PATH", "/d/x/../dump"},
                                               {"TPROBE_RUN_LABEL", "fp32"}};
  auto lookup = [&](const char *name) -> const char * {
    auto it = env.find(name);
    return it == env.end() ? nullptr : it->second.c_str();
  };
  synth_stage_options o;
  std::vector<std::string> outputs;
  synth_apply_environment(o, outputs, lookup);
  EXPECT_EQ(outputs, (std::vector<std::string>{"ipc:///r/a.in", "ipc:///r/b.in"}));
  EXPECT_EQ(o.task, "tensor");
  EXPECT_EQ(o.dump_path, "/d/dump");
  EXPECT_EQ(o.label, "fp32");

  // Options win over the environment; outside `tprobe run` the defaults apply.
  synth_stage_options given;
  given.task = "statistics";
  given.dump_path = "/given";
  std::vector<std::string> given_outputs{"ipc:///mine"};
  synth_apply_environment(given, given_outputs, lookup);
  EXPECT_EQ(given_outputs, std::vector<std::string>{"ipc:///mine"});
  EXPECT_EQ(given.task, "statistics");
  EXPECT_EQ(given.dump_path, "/given");

  synth_stage_options bare;
  std::vector<std::string> none;
  synth_apply_environment(bare, none, [](const char *) -> const char * { return nullptr; });
  EXPECT_TRUE(none.empty());
  EXPECT_EQ(bare.task, "statistics");
  EXPECT_EQ(bare.dump_path, (std::filesystem::current_path() / "dump").string());
}

TEST(Synth, rejects_bad_options_with_usage_errors) {
  EXPECT_THROW(synth_pattern_parse("nans"), usage_error);
  EXPECT_EQ(synth_pattern_parse("mixed"), synth_pattern::mixed);
  EXPECT_THROW(synth_parse_dtypes({"float32", "float8"}), usage_error);
  EXPECT_EQ(synth_parse_dtypes({"bool", "bfloat16"}), (std::vector<dtype>{dtype::boolean, dtype::bfloat16}));
  auto bad = [](auto change) {
    synth_stage_options o;
    change(o);
    return o;
  };
  EXPECT_THROW(synth_check(bad([](auto &o) { o.steps = 0; })), usage_error);
  EXPECT_THROW(synth_check(bad([](auto &o) { o.every = 0; })), usage_error);
  EXPECT_THROW(synth_check(bad([](auto &o) { o.rate = -1; })), usage_error);
  EXPECT_THROW(synth_check(bad([](auto &o) { o.sizes.clear(); })), usage_error);
  EXPECT_THROW(synth_check(bad([](auto &o) { o.task = "overflow_check"; })), usage_error);
  EXPECT_NO_THROW(synth_check(synth_stage_options{}));
}

// ---- null ----

TEST(Null, counts_every_kind_and_checks_the_expectation) {
  synth_stage_options o;
  o.records = 10;
  o.steps = 3;
  o.sizes = {4};
  zmq::context_t ctx;
  stage_io sink(ctx, input_from("inproc://null", "tprobe-null"));
  stage_thread synth(ctx, output_to("inproc://null", "tprobe-synth"), [&](stage_io &io) { synth_run(io, o); });
  null_stage_options n;
  n.delay_us = 1;  // pauses after step_end records only
  n.delay_kinds = {record_kind::step_end};
  n.expect = synth_total_records(o) + 1;
  const auto r = null_run(sink, n);
  synth.join();
  EXPECT_EQ(r.records, synth_total_records(o));
  EXPECT_EQ(r.by_kind[static_cast<size_t>(record_kind::session)], 1u);
  EXPECT_EQ(r.by_kind[static_cast<size_t>(record_kind::tensor)], 10u);
  EXPECT_EQ(r.by_kind[static_cast<size_t>(record_kind::step_end)], 3u);
  EXPECT_EQ(r.by_kind[static_cast<size_t>(record_kind::entry)], r.records - 14);
  EXPECT_EQ(r.payload_bytes, 10u * 4 * 4);
  EXPECT_EQ(r.delays, 3u);
  EXPECT_FALSE(r.expectation_met);  // one more was expected
  EXPECT_THAT(null_result_text(r), HasSubstr(fmt::format("{} records (1 session, ", r.records)));
  EXPECT_THROW(data_kinds_parse({"tensor", "eos"}, "--delay-kinds"), usage_error);
}

// ---- fault ----

TEST(Fault, drops_are_seeded_and_counted) {
  synth_stage_options so;
  so.records = 400;
  so.steps = 2;
  fault_stage_options fo;
  fo.drop_prob = 0.25;
  fo.seed = 9;
  const auto a = run_chain(so, fo);
  EXPECT_EQ(a.fault.received, synth_total_records(so));
  EXPECT_GT(a.fault.dropped, 50u);
  EXPECT_LT(a.fault.dropped, 150u);
  EXPECT_EQ(a.null.records, a.synth.records - a.fault.dropped);
  // Only tensors are eligible by default: every other record arrives.
  EXPECT_EQ(a.null.by_kind[static_cast<size_t>(record_kind::tensor)], 400 - a.fault.dropped);
  EXPECT_EQ(a.null.by_kind[static_cast<size_t>(record_kind::step_end)], 2u);
  // The same seed drops the same records; another seed others.
  EXPECT_EQ(run_chain(so, fo).fault.dropped, a.fault.dropped);
  fo.seed = 10;
  EXPECT_NE(run_chain(so, fo).fault.dropped, a.fault.dropped);
}

TEST(Fault, duplicates_and_delays_pass_everything) {
  synth_stage_options so;
  so.records = 100;
  fault_stage_options fo;
  fo.duplicate_prob = 0.5;
  fo.delay_ms = 0.01;
  fo.delay_prob = 0.1;
  fo.kinds = {record_kind::tensor, record_kind::entry};
  const auto r = run_chain(so, fo);
  EXPECT_GT(r.fault.duplicated, 0u);
  EXPECT_GT(r.fault.delayed, 0u);
  EXPECT_EQ(r.null.records, r.synth.records + r.fault.duplicated);
  EXPECT_EQ(r.fault.sent, r.null.records);
}

// Truncated and header-corrupted records reach the next stage as malformed records that name
// tprobe-fault as their producer. The consumer goes on reading after each error, so the stream
// still ends with eos (a stage would exit 100 at the first).
TEST(Fault, truncated_and_corrupted_records_are_malformed_downstream) {
  for (const bool truncate : {true, false}) {
    SCOPED_TRACE(truncate ? "truncate" : "corrupt header");
    synth_stage_options so;
    so.records = 20;
    fault_stage_options fo;
    (truncate ? fo.truncate_prob : fo.corrupt_prob) = 1;
    zmq::context_t ctx;
    stage_io sink(ctx, input_from("inproc://next", "next stage"));
    fault_stage_result fr;
    stage_thread fault(ctx,
                       [] {
                         auto o = input_from("inproc://fault", "tprobe-fault");
                         o.outputs = {"inproc://next"};
                         return o;
                       }(),
                       [&](stage_io &io) { fr = fault_run(io, fo); });
    stage_thread synth(ctx, output_to("inproc://fault", "tprobe-synth"), [&](stage_io &io) { synth_run(io, so); });
    uint64_t good = 0, malformed = 0;
    std::string first_error;
    for (;;) {
      try {
        if (!sink.receive()) break;
        ++good;
      } catch (const framing_error &e) {
        if (!malformed++) first_error = e.what();
      }
    }
    synth.join();
    fault.join();
    EXPECT_EQ(malformed, 20u);
    EXPECT_EQ(good, synth_total_records(so) - 20);
    EXPECT_EQ(truncate ? fr.truncated : fr.corrupted, 20u);
    EXPECT_THAT(first_error, HasSubstr("malformed record from tprobe-fault (pid "));
    EXPECT_THAT(first_error, HasSubstr(truncate ? "(truncated?)" : "does not match float32"));
  }
}

TEST(Fault, corrupted_payloads_differ_by_one_bit) {
  synth_stage_options so;
  so.records = 50;
  so.sizes = {1, 7, 64};
  fault_stage_options fo;
  fo.corrupt_prob = 0.5;
  fo.corrupt_part = fault_part::payload;
  zmq::context_t ctx;
  stage_io sink(ctx, input_from("inproc://next", "next stage"));
  fault_stage_result fr;
  stage_thread fault(ctx,
                     [] {
                       auto o = input_from("inproc://fault", "tprobe-fault");
                       o.outputs = {"inproc://next"};
                       return o;
                     }(),
                     [&](stage_io &io) { fr = fault_run(io, fo); });
  stage_thread synth(ctx, output_to("inproc://fault", "tprobe-synth"), [&](stage_io &io) { synth_run(io, so); });
  uint64_t t = 0, changed = 0;
  while (auto r = sink.receive()) {
    if (r->header.kind != record_kind::tensor) continue;
    const auto sent = bytes_of(synth_tensor(so, t, 0, t));
    const auto got = bytes_of(*r);
    ASSERT_EQ(got.size(), sent.size());
    int bits = 0;
    for (size_t i = 0; i < got.size(); ++i) bits += __builtin_popcount(static_cast<unsigned>(got[i] ^ sent[i]));
    EXPECT_LE(bits, 1) << t;
    changed += bits;
    ++t;
  }
  synth.join();
  fault.join();
  EXPECT_EQ(t, 50u);
  EXPECT_EQ(changed, fr.corrupted);
  EXPECT_GT(changed, 10u);
}

// --die-after: fault_run returns after K records without finishing its outputs (main() then
// SIGKILLs the process). Over record files, so that nothing waits for the eos that never comes.
TEST(Fault, die_after_leaves_the_stream_without_eos) {
  test::temp_dir dir;
  zmq::context_t ctx;
  synth_stage_options so;
  so.records = 30;
  {
    stage_io out(ctx, output_to(dir / "synth.tpr", "tprobe-synth"));
    synth_run(out, so);
  }
  fault_stage_options fo;
  fo.die_after = 7;
  fo.drop_prob = 0.5;  // dropped records count towards K too
  fault_stage_result fr;
  {
    auto o = input_from(dir / "synth.tpr", "tprobe-fault");
    o.outputs = {dir / "fault.tpr"};
    stage_io io(ctx, o);
    fr = fault_run(io, fo);
  }
  EXPECT_EQ(fr.end, fault_end::die);
  EXPECT_EQ(fr.received, 7u);
  stage_io reader(ctx, input_from(dir / "fault.tpr", "reader"));
  uint64_t n = 0;
  while (reader.receive()) ++n;
  EXPECT_EQ(n, 7 - fr.dropped);
  EXPECT_EQ(reader.counts().truncated_producers, 1u);  // the recording ends without eos
}

TEST(Fault, rejects_bad_options_with_usage_errors) {
  fault_stage_options o;
  o.drop_prob = 1.5;
  EXPECT_THROW(fault_check(o), usage_error);
  o.drop_prob = 0;
  o.delay_ms = -1;
  EXPECT_THROW(fault_check(o), usage_error);
  EXPECT_THROW(fault_part_parse("trailer"), usage_error);
  EXPECT_EQ(fault_part_parse("payload"), fault_part::payload);
}
