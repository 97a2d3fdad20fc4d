// The test stages as real binaries under `tprobe run`, with the example manifests of
// pipelines/testing/: synth → stats → writer gives a dump holding every record synth sent (checked
// against the records rebuilt here from the same options); synth as the command of a shipped
// manifest; fault's announced drops; a stage dying (the launcher names it), a malformed record
// (the next stage names its producer), a stall held until a signal; null's expectation.
#include <cmath>
#include <filesystem>
#include <optional>
#include <regex>
#include <thread>

#include <signal.h>
#include <sys/wait.h>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zmq.hpp>

#include "stage_io.h"
#include "npy.h"
#include "pyjson.h"
#include "synth/synth.h"
#include "tensor_stats.h"
#include "test_support.h"

using namespace tprobe;
using json = nlohmann::ordered_json;
using ::testing::HasSubstr;

namespace {

json load_example(const std::string &name) { return pyjson_load_file(test::source_dir() + "/pipelines/testing/" + name); }

std::string write_manifest(const test::temp_dir &dir, const json &manifest) {
  const std::string path = dir / "manifest.json";
  test::write_file(path, manifest.dump(2));
  return path;
}

using test::number_after;

void expect_stat(const json &leaf, const stat_value &v, const std::string &where) {
  switch (v.k) {
    case stat_value::kind::null: EXPECT_TRUE(leaf.is_null()) << where << " " << leaf; return;
    case stat_value::kind::boolean: EXPECT_EQ(leaf, v.boolean) << where; return;
    case stat_value::kind::integer: EXPECT_EQ(leaf, v.integer) << where; return;
    case stat_value::kind::real:
      if (std::isnan(v.real)) {
        EXPECT_TRUE(std::isnan(leaf.get<double>())) << where << " " << leaf;
      } else {
        EXPECT_EQ(leaf.get<double>(), v.real) << where;
      }
      return;
  }
}

// Every tensor synth sent is in its step's dump.json, with the statistics of its bytes.
void check_synth_dump(const std::string &root, const synth_stage_options &o, bool tensors) {
  uint64_t leaves = 0;
  for (uint64_t step = 0; step < o.steps; ++step) {
    const std::string dir = root + "/step" + std::to_string(step) + "/rank";
    SCOPED_TRACE(dir);
    const json doc = pyjson_load_file(dir + "/dump.json");
    EXPECT_EQ(doc["task"], tensors ? "tensor" : "statistics");
    const json &data = doc["data"];
    const uint64_t begin = synth_step_begin(o, step), end = synth_step_begin(o, step + 1);
    EXPECT_EQ(data.size(), (end - begin + 1) / 2);
    for (uint64_t t = begin; t < end; ++t) {
      const record r = synth_tensor(o, t, static_cast<int64_t>(step), t - begin);
      const auto &h = r.header;
      const std::string where = h.entry + " " + h.slot;
      const json &e = data.at(h.entry);
      const json &leaf = h.slot == "input.0" ? e.at("input_args").at(0) : e.at("output").at(0);
      const auto b = r.payload_bytes();
      const auto s = tensor_stats_compute(b.data(), h.type, h.element_count(), false, {});
      EXPECT_EQ(leaf["dtype"], dtype_framework_name(h.type, "pytorch")) << where;
      EXPECT_EQ(leaf["shape"], json(h.shape)) << where;
      expect_stat(leaf["Max"], s.max, where + " Max");
      expect_stat(leaf["Min"], s.min, where + " Min");
      expect_stat(leaf["Mean"], s.mean, where + " Mean");
      expect_stat(leaf["Norm"], s.norm, where + " Norm");
      if (tensors && h.type != dtype::bfloat16) {
        const auto arr = npy_read(dir + "/dump_tensor_data/" + leaf["data_name"].get<std::string>());
        EXPECT_EQ(arr.data.size(), b.size()) << where;
        EXPECT_TRUE(std::equal(b.begin(), b.end(), arr.data.begin(), arr.data.end())) << where;
      }
      ++leaves;
    }
    if (o.entry_records) {
      EXPECT_EQ(pyjson_load_file(dir + "/stack.json").at("0").at(0).size(), data.size());  // one shared stack
    }
  }
  EXPECT_EQ(leaves, o.records);
}

}  // namespace

TEST(TestStages, synth_stats_writer_manifest_dumps_every_record) {
  test::temp_dir dir;
  json manifest = load_example("synth-stats-writer.json");
  synth_stage_options o;
  o.records = 301;
  o.steps = 3;
  o.sizes = {1, 5, 32};
  o.dtypes = {dtype::float32, dtype::bfloat16, dtype::int64, dtype::boolean, dtype::float64};
  o.pattern = synth_pattern::mixed;
  o.every = 7;
  o.seed = 42;
  o.dump_path = dir / "dump";
  json &synth = manifest["stages"][0];
  ASSERT_EQ(synth["stage"], "synth");
  synth["options"] = {{"records", o.records},       {"steps", o.steps},       {"sizes", {"1", "5", "32"}},
                      {"dtypes", "float32,bfloat16,int64,bool,float64"},  {"pattern", "mixed"},
                      {"every", o.every},           {"seed", o.seed},         {"dump-path", o.dump_path}};
  const auto r = test::run_process({test::bin("tprobe"), "run", write_manifest(dir, manifest), "--", "/bin/true"});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(number_after(r.err, "tprobe-synth: sent "), synth_total_records(o)) << r.err;
  EXPECT_EQ(number_after(r.err, "tprobe-writer: "), synth_total_records(o)) << r.err;
  check_synth_dump(dir / "dump", o, false);
}

// In place of a training script: synth takes the endpoint and the task from the launcher.
TEST(TestStages, synth_as_the_command_of_a_shipped_manifest) {
  test::temp_dir dir;
  synth_stage_options o;
  o.records = 40;
  o.steps = 2;
  o.sizes = {3, 8};
  o.dtypes = {dtype::float32, dtype::int32, dtype::bfloat16};
  o.task = "tensor";  // from pipelines/tensor.json's capture section, through TPROBE_TASK
  const auto r = test::run_process({test::bin("tprobe"), "run", test::source_dir() + "/pipelines/tensor.json", "--",
                                    test::bin("tprobe-synth"), "--records", "40", "--steps", "2", "--sizes", "3,8",
                                    "--dtypes", "float32,int32,bfloat16", "--dump-path", dir / "dump"});
  ASSERT_EQ(r.status, 0) << r.err;
  check_synth_dump(dir / "dump", o, true);
}

TEST(TestStages, fault_drops_what_it_announces) {
  const auto r = test::run_process({test::bin("tprobe"), "run", test::source_dir() + "/pipelines/testing/fault-stats-null.json",
                                    "--", test::bin("tprobe-synth"), "--records", "3000", "--steps", "3"});
  ASSERT_EQ(r.status, 0) << r.err;
  const uint64_t sent = number_after(r.err, "tprobe-synth: sent ");
  const uint64_t dropped = number_after(r.err, "out: dropped ");
  EXPECT_EQ(number_after(r.err, "tprobe-fault: "), sent) << r.err;
  EXPECT_GT(dropped, 5u) << r.err;  // 1 % of 3000 tensors, seeded
  EXPECT_EQ(number_after(r.err, "tprobe-null: "), sent - dropped) << r.err;
}

TEST(TestStages, a_stage_that_dies_makes_the_launcher_fail_naming_it) {
  test::temp_dir dir;
  const json manifest = {{"stages",
                          {{{"name", "fault"}, {"stage", "fault"}, {"inputs", {"capture"}}, {"options", {{"die-after", 25}}}},
                           {{"name", "stats"}, {"stage", "stats"}, {"inputs", {"fault"}}},
                           {{"name", "sink"}, {"stage", "null"}, {"inputs", {"stats"}}}}}};
  const auto r = test::run_process({test::bin("tprobe"), "run", write_manifest(dir, manifest), "--",
                                    test::bin("tprobe-synth"), "--records", "100000"});
  EXPECT_EQ(r.status, 111) << r.err;
  EXPECT_THAT(r.err, HasSubstr("tprobe-fault: dying after 25 records"));
  EXPECT_THAT(r.err, HasSubstr("tprobe: fatal: stage \"fault\" (tprobe-fault) was killed by signal 9"));
}

TEST(TestStages, a_malformed_record_stops_the_next_stage_naming_its_producer) {
  for (const char *fault : {"corrupt-prob", "truncate-prob"}) {
    SCOPED_TRACE(fault);
    test::temp_dir dir;
    const json manifest = {{"stages",
                            {{{"name", "fault"}, {"stage", "fault"}, {"inputs", {"capture"}}, {"options", {{fault, 1}}}},
                             {{"name", "stats"}, {"stage", "stats"}, {"inputs", {"fault"}}}}}};
    const auto r = test::run_process({test::bin("tprobe"), "run", write_manifest(dir, manifest), "--",
                                      test::bin("tprobe-synth"), "--records", "10"});
    EXPECT_EQ(r.status, 111) << r.err;
    EXPECT_THAT(r.err, HasSubstr("tprobe-stats: fatal: malformed record from tprobe-fault (pid "));
    EXPECT_THAT(r.err, HasSubstr(std::string(fault) == "truncate-prob" ? "(truncated?)" : "does not match float32"));
    EXPECT_THAT(r.err, HasSubstr("tprobe: fatal: stage \"stats\" (tprobe-stats) exited with status 100"));
  }
}

// A stalled stage passes K records, then neither reads nor sends, and stays alive until a signal;
// SIGTERM ends its stream with eos, and its exit, 143 (128 + SIGTERM), says the stream was cut
// short. The consumer here is this test (a stage_io), so it knows when K records went through.
TEST(TestStages, a_stalled_stage_holds_the_stream_until_a_signal) {
  test::temp_dir dir;
  const std::string fault_in = "ipc://" + dir.path() + "/fault.in", sink_in = "ipc://" + dir.path() + "/sink.in";
  zmq::context_t ctx;
  stage_io_options sink_options;
  sink_options.input = sink_in;
  stage_io sink(ctx, sink_options);
  test::child_process fault({test::bin("tprobe-fault"), "--input", fault_in, "--output", sink_in, "--stall-after", "20"},
                            dir.path(), {}, true);
  // fault is ready once this thread answered its hello (in receive()); synth starts after that.
  std::optional<test::child_process> synth;
  std::string start_error;
  std::thread starter([&] {
    try {
      fault.wait_ready();
      synth.emplace(std::vector<std::string>{test::bin("tprobe-synth"), "--output", fault_in, "--records", "5000"},
                    dir.path());
    } catch (const std::exception &e) {
      start_error = e.what();
    }
  });
  uint64_t received = 0;
  while (received < 20 && sink.receive()) ++received;
  starter.join();
  ASSERT_EQ(start_error, "");
  ASSERT_EQ(received, 20u) << fault.err();
  // synth has thousands more to send, but nothing comes and fault stays alive.
  int status = 0;
  EXPECT_EQ(::waitpid(fault.pid(), &status, WNOHANG), 0) << fault.err();
  fault.kill(SIGTERM);
  while (sink.receive()) ++received;  // ends at fault's eos
  EXPECT_EQ(received, 20u);
  EXPECT_EQ(fault.wait(), 128 + SIGTERM) << fault.err();
  EXPECT_THAT(fault.err(), HasSubstr("tprobe-fault: 20 records in, 20 out"));
  EXPECT_THAT(fault.err(), HasSubstr("stalled until a signal"));
  synth->kill(SIGKILL);
}

TEST(TestStages, null_expectation_is_a_negative_answer) {
  test::temp_dir dir;
  const json manifest = {{"stages",
                          {{{"name", "stats"}, {"stage", "stats"}, {"inputs", {"capture"}}},
                           {{"name", "sink"}, {"stage", "null"}, {"inputs", {"stats"}}, {"options", {{"expect", 3}}}}}}};
  const auto r = test::run_process({test::bin("tprobe"), "run", write_manifest(dir, manifest), "--",
                                    test::bin("tprobe-synth"), "--records", "10", "--no-entry-records"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_THAT(r.err, HasSubstr("tprobe-null: expected 3 records, got 12"));
}
