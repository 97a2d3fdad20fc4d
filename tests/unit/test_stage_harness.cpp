// Stages run in process through the stage harness (tests/support/stage_harness.h): stats_run,
// writer_run, tap_run and a stage-kit function fed from a list or from a record file that the C
// capture API (capture/tprobe_capture.h) wrote, with their outputs, barriers and files checked.
#include <atomic>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <thread>

#include <dlpack/dlpack.h>
#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "pyjson.h"
#include "stage_harness.h"
#include "stats/stats.h"
#include "tap/tap.h"
#include "test_support.h"
#include "tprobe_capture.h"
#include "kit/tprobe_stage.h"
#include "writer/writer.h"

using namespace tprobe;
using ::testing::HasSubstr;

namespace {

record session_record(const std::string &dump_path) {
  record r(record_kind::session);
  r.header.run = "run-1";
  r.header.meta = {{"task", "statistics"}, {"level", "L1"}, {"framework", "pytorch"}, {"dump_path", dump_path}};
  return r;
}

// A float32 tensor of `values` with its data (no statistics: a stage computes them).
record float_tensor(const std::string &entry, const std::string &slot, const std::vector<float> &values) {
  record r(record_kind::tensor);
  r.header.run = "run-1";
  r.header.entry = entry;
  r.header.slot = slot;
  r.header.type = dtype::float32;
  r.header.shape = {static_cast<int64_t>(values.size())};
  std::vector<std::byte> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.data(), bytes.size());
  r.set_payload(std::move(bytes));
  return r;
}

record step_end_barrier() {
  record r(record_kind::step_end);
  r.header.run = "run-1";
  r.header.meta = {{"barrier", 1}};  // the harness sends it as a barrier (record_sender::sync)
  return r;
}

double real(const stat_value &v) { return v.as_double(); }

// A capture session (statistics, L1, statistics in place) that records its stream into `file`
// (an endpoint without "://"); null, with the test failed, when it cannot open.
tprobe_session *recording_session(const test::temp_dir &dir, const std::string &file) {
  const std::string config = dir / "config.json";
  test::write_file(config, R"({"task": "statistics", "dump_path": ")" + dir.path() + R"(/dump", "level": "L1"})");
  tprobe_open_options options = tprobe_open_options_default();
  options.endpoint = file.c_str();
  options.stats_mode = TPROBE_STATS_AUTO;
  tprobe_session *session = nullptr;
  if (tprobe_session_open(config.c_str(), &options, &session) != TPROBE_OK) {
    ADD_FAILURE() << tprobe_last_error();
    return nullptr;
  }
  return session;
}

// One training step of a recording session: start, Functional.relu.0.forward (with `stack`) and
// its output `t`, stop, step.
void relu_step(tprobe_session *session, const DLTensor &t, const char *const *stack, size_t stack_len) {
  ASSERT_EQ(tprobe_start(session), TPROBE_OK) << tprobe_last_error();
  ASSERT_EQ(tprobe_entry_begin(session, "Functional.relu.0.forward", nullptr, stack, stack_len, 0), TPROBE_OK)
      << tprobe_last_error();
  ASSERT_EQ(tprobe_capture_tensor(session, "Functional.relu.0.forward", "output.0", &t, 0), TPROBE_OK)
      << tprobe_last_error();
  ASSERT_EQ(tprobe_stop(session), TPROBE_OK) << tprobe_last_error();
  ASSERT_EQ(tprobe_step(session), TPROBE_OK) << tprobe_last_error();
}

// Records are move-only (a payload frame is shared, not copied): a list is built by moving.
template <class... R>
std::vector<record> list_of(R &&...rs) {
  std::vector<record> v;
  (v.push_back(std::move(rs)), ...);
  return v;
}

}  // namespace

TEST(StageHarness, stats_run_fills_statistics_drops_unsaved_data_and_answers_the_barrier) {
  test::stage_harness h;
  const auto out = h.run([](stage_io &io) { stats_run(io, {}); },
                         list_of(session_record("/nonexistent"),
                                 float_tensor("Functional.relu.0.forward", "output.0", {3, -4}), step_end_barrier()));
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[0].header.kind, record_kind::session);
  const auto &t = out[1].header;
  ASSERT_TRUE(t.stats);
  EXPECT_EQ(real(t.stats->max), 3.0);
  EXPECT_EQ(real(t.stats->min), -4.0);
  EXPECT_EQ(real(t.stats->mean), -0.5);
  EXPECT_EQ(real(t.stats->norm), 5.0);
  EXPECT_FALSE(out[1].has_payload());  // not to be saved: numbers only downstream
  EXPECT_EQ(out[2].header.kind, record_kind::step_end);
  EXPECT_EQ(h.barriers(), std::vector<bool>{true});  // answered once the collector answered
  EXPECT_EQ(h.counts().received, 3u);
  EXPECT_EQ(h.counts().sent, 3u);
}

TEST(StageHarness, stats_run_keeps_saved_data) {
  test::stage_harness h;
  auto tensor = float_tensor("Functional.relu.0.forward", "output.0", {1, 2});
  tensor.header.flags |= RECORD_FLAG_SAVE;
  const auto out = h.run([](stage_io &io) { stats_run(io, {}); }, list_of(session_record("/x"), std::move(tensor)));
  ASSERT_EQ(out.size(), 2u);
  ASSERT_TRUE(out[1].has_payload());
  EXPECT_EQ(out[1].payload_bytes().size(), 8u);
}

// A payload larger than a part (stats_part_bytes) is read on --threads threads; the statistics
// are the same bit for bit with any number of them, and equal core's one-thread computation.
TEST(StageHarness, stats_run_reads_large_payloads_on_threads_with_the_same_statistics) {
  std::vector<float> values((size_t{5} << 20) / sizeof(float) + 77);  // 5 parts and a ragged end
  std::mt19937 rng(7);
  std::normal_distribution<float> dist(0.f, 1e4f);
  for (auto &v : values) v = dist(rng);
  values[123456] = std::numeric_limits<float>::infinity();
  auto reference = float_tensor("Functional.relu.0.forward", "output.0", values);
  reference.header.flags |= RECORD_FLAG_CRC32;
  const tensor_stats expected = tensor_stats_compute(reference.payload_bytes().data(), dtype::float32, values.size(),
                                                     false, stats_options{.crc32 = true});
  for (const unsigned threads : {1u, 2u, 3u}) {
    test::stage_harness h;
    auto tensor = float_tensor("Functional.relu.0.forward", "output.0", values);
    tensor.header.flags |= RECORD_FLAG_CRC32;
    stats_stage_options options;
    options.threads = threads;
    const auto out = h.run([&](stage_io &io) { EXPECT_EQ(stats_run(io, options).computed, 1u); },
                           list_of(session_record("/x"), std::move(tensor)));
    ASSERT_EQ(out.size(), 2u);
    ASSERT_TRUE(out[1].header.stats) << threads << " threads";
    EXPECT_EQ(*out[1].header.stats, expected) << threads << " threads";
    EXPECT_EQ(out[1].header.stats->inf_count, 1u);
  }
}

TEST(StageHarness, writer_run_answers_the_step_barrier_and_writes_the_dump) {
  test::temp_dir dir;
  test::stage_harness h(false);
  record entry(record_kind::entry);
  entry.header.run = "run-1";
  entry.header.entry = "Functional.relu.0.forward";
  entry.header.meta = {{"stack", nlohmann::ordered_json::array({"File \"a.py\", line 1, in f"})}};
  auto tensor = float_tensor("Functional.relu.0.forward", "output.0", {3, -4});
  tensor.header.stats = tensor_stats_compute(tensor.payload_bytes().data(), dtype::float32, 2, false, {});
  tensor.drop_payload();
  bool dump_at_barrier = false;  // the files exist when writer_run returns
  const std::string dump = dir.path() + "/dump/step0/rank/dump.json";
  const auto out = h.run(
      [&](stage_io &io) {
        writer_stage_options o;
        o.dump_path = dir.path() + "/dump";
        writer_run(io, o);
        dump_at_barrier = std::filesystem::exists(dump);
      },
      list_of(session_record(dir.path() + "/dump"), std::move(entry), std::move(tensor), step_end_barrier()));
  EXPECT_TRUE(out.empty());  // a sink
  EXPECT_EQ(h.barriers(), std::vector<bool>{true});
  ASSERT_TRUE(dump_at_barrier);
  const auto doc = pyjson_load_file(dump);
  const auto &leaf = doc["data"]["Functional.relu.0.forward"]["output"][0];
  EXPECT_EQ(leaf["Max"], 3.0);
  EXPECT_EQ(leaf["Norm"], 5.0);
  EXPECT_TRUE(std::filesystem::exists(dir.path() + "/dump/step0/rank/stack.json"));
}

TEST(StageHarness, writer_run_computes_statistics_no_stage_computed) {
  // tprobe-stats replaced by a stage that passes data on: the writer computes what is missing.
  test::temp_dir dir;
  test::stage_harness h(false);
  auto tensor = float_tensor("Functional.relu.0.forward", "output.0", {6, 8});
  h.run(
      [&](stage_io &io) {
        writer_stage_options o;
        o.dump_path = dir.path() + "/dump";
        EXPECT_EQ(writer_run(io, o).stats_computed, 1u);
      },
      list_of(session_record(dir.path() + "/dump"), std::move(tensor), step_end_barrier()));
  const auto doc = pyjson_load_file(dir.path() + "/dump/step0/rank/dump.json");
  EXPECT_EQ(doc["data"]["Functional.relu.0.forward"]["output"][0]["Norm"], 10.0);
}

TEST(StageHarness, writer_run_refuses_a_record_it_cannot_place_and_dumps_the_rest) {
  // A list index below 0 or past a million (the nulls before it would take the writer's memory), a
  // slot under a debug save's whole value, and a path that would turn a filled list into a dict:
  // each one refused record, named on stderr and in dump_error_info.log and counted; what came
  // before and after it is dumped (issue 60: `save({3000000: t})` ended the writer and the run's
  // later steps were not dumped).
  const auto placed = [](std::vector<record_path_element> path) {
    auto tensor = float_tensor("Functional.relu.1.forward", "output.0", {1});
    tensor.header.path = std::move(path);
    return tensor;
  };
  std::vector<std::pair<std::vector<record>, std::string>> cases;
  cases.emplace_back(list_of(placed({int64_t{-1}})), "list index -1 in its path is not in 0..1048576");
  cases.emplace_back(list_of(placed({int64_t{0}, std::string("k"), int64_t{1} << 40})), "list index 1099511627776");
  cases.emplace_back(list_of(float_tensor("x.0.debug", "debug", {1}), float_tensor("x.0.debug", "other.0", {2})),
                     "tensor record x.0.debug (rank -1, step 0) other.0: the entry holds a whole value");
  cases.emplace_back(list_of(float_tensor("Functional.relu.1.forward", "output.0", {1}), placed({std::string("k")})),
                     "its path goes through a list by key");
  for (auto &[records, message] : cases) {
    test::temp_dir dir;
    test::stage_harness h(false);
    const std::string file = dir.path() + "/records.tpr";
    record_file_writer writer(file);
    writer.write(session_record(dir.path() + "/dump"));
    writer.write(float_tensor("Functional.relu.0.forward", "output.0", {5}));
    for (const auto &r : records) writer.write(r);
    writer.write(float_tensor("Functional.relu.2.forward", "output.0", {7}));
    writer.close();
    writer_stage_result result;
    h.run_file(
        [&](stage_io &io) {
          writer_stage_options o;
          o.dump_path = dir.path() + "/dump";
          result = writer_run(io, o);
        },
        file);
    EXPECT_EQ(result.records_refused, 1u) << message;
    EXPECT_THAT(result.first_refusal, HasSubstr(message));
    const auto doc = pyjson_load_file(dir.path() + "/dump/step0/rank/dump.json");
    EXPECT_EQ(doc["data"]["Functional.relu.0.forward"]["output"][0]["Max"], 5.0);
    EXPECT_EQ(doc["data"]["Functional.relu.2.forward"]["output"][0]["Max"], 7.0) << message;
    std::ifstream log(dir.path() + "/dump/step0/rank/dump_error_info.log");
    std::string line;
    ASSERT_TRUE(std::getline(log, line)) << message;
    EXPECT_THAT(line, HasSubstr(message));
  }
}

// A step's folder is made off the writer's thread while the step's records are placed: a folder
// that cannot be made still fails the writer, naming it, at the step's end and on every later
// wait (the catch's last rewrite), and the folders before it are written.
TEST(StageHarness, writer_run_names_a_step_folder_it_cannot_make_and_keeps_the_steps_before) {
  test::temp_dir dir;
  const std::string dump = dir.path() + "/dump";
  std::filesystem::create_directories(dump);
  test::write_file(dump + "/step1", "a file where step 1's folder goes");
  test::stage_harness h(false);
  const std::string file = dir.path() + "/records.tpr";
  record_file_writer writer(file);
  writer.write(session_record(dump));
  writer.write(float_tensor("Functional.relu.0.forward", "output.0", {5}));
  writer.write(step_end_barrier());
  auto blocked = float_tensor("Functional.relu.0.forward", "output.0", {6});
  blocked.header.step = 1;
  writer.write(std::move(blocked));
  for (int i = 0; i < 100; ++i) {  // placed while the folder's job runs and fails
    auto more = float_tensor(fmt::format("Functional.relu.{}.forward", i + 1), "output.0", {7});
    more.header.step = 1;
    writer.write(std::move(more));
  }
  auto end = step_end_barrier();
  end.header.step = 1;
  writer.write(std::move(end));
  writer.close();
  try {
    h.run_file(
        [&](stage_io &io) {
          writer_stage_options o;
          o.dump_path = dump;
          writer_run(io, o);
        },
        file);
    ADD_FAILURE() << "the writer made no complaint about step 1's folder";
  } catch (const std::exception &e) {
    EXPECT_THAT(e.what(), HasSubstr(dump + "/step1: exists and is not a directory"));
  }
  EXPECT_EQ(test::read_file(dump + "/step1"), "a file where step 1's folder goes");
  const auto doc = pyjson_load_file(dump + "/step0/rank/dump.json");
  EXPECT_EQ(doc["data"]["Functional.relu.0.forward"]["output"][0]["Max"], 5.0);
}

// writer_run on a thread of this process, fed over a real socket at `endpoint`.
struct writer_on_thread {
  zmq::context_t ctx;
  std::string endpoint, error;  // the stage thread's, read once `ready`
  std::atomic<bool> ready{false};
  std::thread stage;

  writer_on_thread(const test::temp_dir &dir, const std::string &dump) {
    stage = std::thread([this, &dir, dump] {
      try {
        stage_io_options o;
        o.input = test::ipc_endpoint(dir, "writer.in");
        o.producers = 1;
        o.decode = writer_decode_options;
        stage_io io(ctx, o);
        endpoint = io.input_endpoint();
        ready = true;
        writer_stage_options w;
        w.dump_path = dump;
        writer_run(io, w);
      } catch (const std::exception &e) {
        error = e.what();
        ready = true;
      }
    });
    while (!ready) std::this_thread::yield();
  }
  ~writer_on_thread() { (void)finish(); }
  bool started() const { return !endpoint.empty(); }
  // Waits for the writer to return; what it threw, or "".
  std::string finish() {
    if (stage.joinable()) stage.join();
    return error;
  }
};

// The names in `folder`, with a temporary's pid and counter cut off (".dump.json.tmp.").
std::multiset<std::string> names_in(const std::string &folder) {
  std::multiset<std::string> names;
  for (const auto &e : std::filesystem::directory_iterator(folder)) {
    const std::string name = e.path().filename().string();
    const size_t tmp = name.find(".tmp.");
    names.insert(tmp == std::string::npos ? name : name.substr(0, tmp + 5));
  }
  return names;
}

const std::multiset<std::string> prepared_names{".dump.json.tmp.", ".stack.json.tmp.", ".construct.json.tmp."};
const std::multiset<std::string> written_names{"dump.json", "stack.json", "construct.json"};

// A rerun into a dump path an earlier run wrote: a step folder's old files go as the step's first
// record arrives, not when the step ends, where replacing them would add their unlinking to the
// training thread's wait on the step's barrier (docs/performance.md); the step then writes its own.
// Its temporaries are made then too, for the same reason (prepared_file).
// Fed by a record_sender rather than the harness, to look at the folder between two barriers.
TEST(StageHarness, writer_run_drops_an_earlier_runs_step_files_and_prepares_the_new_ones_when_the_step_begins) {
  test::temp_dir dir;
  const std::string dump = dir.path() + "/dump", folder = dump + "/step0/rank", later = dump + "/step1/rank";
  for (const auto &f : {folder, later}) {
    std::filesystem::create_directories(f);
    for (const char *name : {"dump.json", "stack.json", "construct.json"}) test::write_file(f + "/" + name, "{\"old\": 1}");
  }
  writer_on_thread writer(dir, dump);
  ASSERT_TRUE(writer.started()) << "the writer did not start: " << writer.finish();
  try {
    record_sender sender(writer.ctx, writer.endpoint, "capture");
    sender.send(session_record(dump));
    sender.send(float_tensor("Functional.relu.0.forward", "output.0", {1, 2}));  // step 0's first record
    // The barrier of a step that has no folder: answered once everything before it was handled.
    record no_folder(record_kind::step_end);
    no_folder.header.run = "run-1";
    no_folder.header.step = 7;
    EXPECT_TRUE(sender.sync(std::move(no_folder)));
    for (const char *name : {"dump.json", "stack.json", "construct.json"}) {
      EXPECT_FALSE(std::filesystem::exists(folder + "/" + name)) << name << " of step 0 is still there";
      EXPECT_EQ(test::read_file(later + "/" + name), "{\"old\": 1}") << name << " of step 1, which nothing wrote to";
    }
    EXPECT_EQ(names_in(folder), prepared_names);
    for (const auto &e : std::filesystem::directory_iterator(folder))
      EXPECT_EQ(std::filesystem::file_size(e.path()), 0u) << e.path();
    EXPECT_TRUE(sender.sync(step_end_barrier()));
    EXPECT_EQ(names_in(folder), written_names);  // the barrier answered: the files, no temporary
    sender.finish(2, 0);
  } catch (const std::exception &e) {
    ADD_FAILURE() << "sending to the writer: " << e.what();
  }
  ASSERT_EQ(writer.finish(), "");
  const auto doc = pyjson_load_file(folder + "/dump.json");
  EXPECT_FALSE(doc.contains("old"));
  EXPECT_EQ(doc["data"]["Functional.relu.0.forward"]["output"][0]["Max"], 2.0);
  EXPECT_EQ(test::read_file(folder + "/construct.json"), "{}");
  EXPECT_EQ(pyjson_load_file(folder + "/stack.json"), nlohmann::ordered_json::object());
}

// Each prepared temporary holds two descriptors: a writer fed by many ranks at once prepares for
// 16 folders, and the others write as before.
TEST(StageHarness, writer_run_prepares_temporaries_for_at_most_16_folders_at_once) {
  test::temp_dir dir;
  const std::string dump = dir.path() + "/dump";
  writer_on_thread writer(dir, dump);
  ASSERT_TRUE(writer.started()) << "the writer did not start: " << writer.finish();
  constexpr int ranks = 20;
  try {
    record_sender sender(writer.ctx, writer.endpoint, "capture");
    sender.send(session_record(dump));
    for (int rank = 0; rank < ranks; ++rank) {
      auto r = float_tensor("Functional.relu.0.forward", "output.0", {1, static_cast<float>(rank)});
      r.header.rank = rank;
      sender.send(std::move(r));
    }
    record no_folder(record_kind::step_end);  // answered once every record before it was handled
    no_folder.header.run = "run-1";
    no_folder.header.step = 7;
    EXPECT_TRUE(sender.sync(std::move(no_folder)));
    int prepared = 0, unprepared = 0;
    for (int rank = 0; rank < ranks; ++rank) {
      auto names = names_in(fmt::format("{}/step0/rank{}", dump, rank));
      for (const auto &written : written_names) names.erase(written);  // by a timed rewrite, if one came
      if (names == prepared_names) ++prepared;
      else if (names.empty()) ++unprepared;
      else ADD_FAILURE() << "rank " << rank << " holds " << fmt::format("{}", fmt::join(names, ", "));
    }
    EXPECT_EQ(prepared, 16);
    EXPECT_EQ(unprepared, ranks - 16);
    sender.finish(ranks + 2, 0);
  } catch (const std::exception &e) {
    ADD_FAILURE() << "sending to the writer: " << e.what();
  }
  ASSERT_EQ(writer.finish(), "");
  for (int rank = 0; rank < ranks; ++rank) {
    const std::string folder = fmt::format("{}/step0/rank{}", dump, rank);
    EXPECT_EQ(names_in(folder), written_names) << folder;
    EXPECT_EQ(pyjson_load_file(folder + "/dump.json")["data"]["Functional.relu.0.forward"]["output"][0]["Max"],
              static_cast<double>(std::max(rank, 1)));
  }
}

TEST(StageHarness, tap_run_prints_what_the_tap_publishes) {
  test::stage_harness h;
  auto tensor = float_tensor("Functional.relu.0.forward", "output.0", {3, -4});
  tensor.header.stats = tensor_stats_compute(tensor.payload_bytes().data(), dtype::float32, 2, false, {});
  tensor.drop_payload();
  tensor.header.seq = 1;
  tap_stage_result result;
  std::string text;
  test::tap_feed(h.context(), list_of(std::move(tensor)), [&](const std::string &endpoint) {
    tap_subscriber tap(h.context(), endpoint);
    text = test::capture_file_output([&](std::FILE *f) { result = tap_run(tap, tap_stage_options{}, f); });
  });
  EXPECT_EQ(result.records, 1u);
  EXPECT_EQ(result.missed, 0u);
  EXPECT_THAT(text, HasSubstr("step 0 rank -1 Functional.relu.0.forward output.0 float32 [2] max=3 min=-4 "
                              "mean=-0.5 norm=5"));
}

TEST(StageHarness, kit_function_filters_and_a_dropped_barrier_is_still_answered) {
  stage_kit kit;
  kit.description = {"big-only", "passes tensors whose norm is above --limit", true, true,
                     {{"limit", "float", "4", "norm limit", 0.0}}};
  kit.on_record = [](record &&r, stage_context &ctx) {
    if (r.header.kind == record_kind::step_end) return;  // drops the barrier record
    if (r.header.kind == record_kind::tensor && !(r.header.stats->norm.as_double() > ctx.options().number("limit")))
      return;
    ctx.emit(std::move(r));
  };
  stage_option_values options;
  CLI::App app;
  stage_add_declared_options(app, kit.description, options);
  app.parse(std::vector<std::string>{"--limit=4.5"});
  stage_check_declared_options(kit.description, options);
  test::stage_harness h;
  // Statistics as the capture computes them in place: norm 5 passes, norm 3 does not.
  auto big = float_tensor("Functional.relu.0.forward", "output.0", {3, -4});
  big.header.stats = tensor_stats_compute(big.payload_bytes().data(), dtype::float32, 2, false, {});
  auto small = float_tensor("Functional.relu.1.forward", "output.0", {0, 3});
  small.header.stats = tensor_stats_compute(small.payload_bytes().data(), dtype::float32, 2, false, {});
  const auto out = h.run([&](stage_io &io) { EXPECT_EQ(stage_kit_run(io, kit, options, h.context()), 0); },
                         list_of(session_record("/x"), std::move(big), std::move(small), step_end_barrier()));
  ASSERT_EQ(out.size(), 2u);
  EXPECT_EQ(out[1].header.entry, "Functional.relu.0.forward");
  EXPECT_EQ(h.barriers(), std::vector<bool>{true});
}

TEST(StageHarness, declared_options_check_types_and_ranges) {
  const stage_description d{"x", "", true, true,
                            {{"flush-interval", "float", "2", "seconds", 0.0, 3600.0}, {"n", "int", "1", "count", 1.0}}};
  for (const auto &[args, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{"--flush-interval=-1"}, "--flush-interval must be in [0, 3600], got -1"},
           {{"--n=0"}, "--n must be in [1, inf], got 0"},
           {{"--n=1.5"}, "--n must be an integer, got \"1.5\""},
           {{"--flush-interval=abc"}, "--flush-interval must be a number, got \"abc\""}}) {
    stage_option_values v;
    CLI::App app;
    stage_add_declared_options(app, d, v);
    app.parse(std::vector<std::string>(args));
    try {
      stage_check_declared_options(d, v);
      ADD_FAILURE() << "accepted " << args.front();
    } catch (const usage_error &e) {
      EXPECT_EQ(std::string(e.what()), message);
    }
  }
  stage_option_values v;
  CLI::App app;
  stage_add_declared_options(app, d, v);
  app.parse(std::vector<std::string>{});
  stage_check_declared_options(d, v);
  EXPECT_EQ(v.number("flush-interval"), 2.0);
  EXPECT_EQ(v.integer("n"), 1);
  EXPECT_FALSE(v.given("n"));
}

TEST(StageHarness, capture_api_record_file_through_stats_in_process) {
  // The C API writes a record file (an endpoint without "://"); stats_run reads it in process.
  test::temp_dir dir;
  const std::string file = dir / "stream.tpr";
  tprobe_session *session = recording_session(dir, file);
  ASSERT_NE(session, nullptr);
  float values[3] = {1, -2, 2};
  int64_t shape[1] = {3};
  ASSERT_NO_FATAL_FAILURE(relu_step(session, test::float_tensor(values, shape), nullptr, 0));
  ASSERT_EQ(tprobe_session_close(session), TPROBE_OK) << tprobe_last_error();

  test::stage_harness h;
  const auto out = h.run_file([](stage_io &io) { stats_run(io, {}); }, file);
  const record *tensor = nullptr;
  for (const auto &r : out)
    if (r.header.kind == record_kind::tensor) tensor = &r;
  ASSERT_NE(tensor, nullptr);
  EXPECT_EQ(tensor->header.entry, "Functional.relu.0.forward");
  ASSERT_TRUE(tensor->header.stats);
  EXPECT_EQ(real(tensor->header.stats->norm), 3.0);
  EXPECT_EQ(out.front().header.kind, record_kind::session);
  EXPECT_EQ(out.back().header.kind, record_kind::step_end);
}

TEST(StageHarness, a_recording_replayed_by_the_writer_keeps_stacks_sent_once_across_steps) {
  // The capture sends a call stack's lines once and its id after that (record.h section 5), also
  // into a record file. A writer replaying the file in another process (where no session defined
  // the id) must find the lines of a stack first seen in an earlier step.
  test::temp_dir dir;
  const std::string file = dir / "stream.tpr";
  tprobe_session *session = recording_session(dir, file);
  ASSERT_NE(session, nullptr);
  const char *stack[] = {"File \"train.py\", line 7, in step, \n loss = model(x)"};
  float values[2] = {1, -2};
  int64_t shape[1] = {2};
  const DLTensor t = test::float_tensor(values, shape);
  for (int step = 0; step < 2; ++step) ASSERT_NO_FATAL_FAILURE(relu_step(session, t, stack, 1));
  ASSERT_EQ(tprobe_session_close(session), TPROBE_OK) << tprobe_last_error();

  const auto run = test::run_process({test::bin("tprobe-writer"), "--input", file, "--dump-path", dir / "dump"});
  ASSERT_EQ(run.status, 0) << run.err;
  for (const char *step : {"step0", "step1"}) {
    const auto stacks = pyjson_load_file(dir.path() + "/dump/" + step + "/rank/stack.json");
    ASSERT_EQ(stacks.size(), 1u) << step;
    EXPECT_EQ(stacks["0"][0], nlohmann::ordered_json::array({"Functional.relu.0.forward"})) << step;
    EXPECT_EQ(stacks["0"][1], nlohmann::ordered_json::array({stack[0]})) << step;
  }
}

namespace {

// One mix step as the PyTorch capture sends it, for a task and data_mode: a module without
// parameters (Dropout) with an operator inside it, its backward, and a parameter gradient.
std::vector<record> mix_step(const std::string &dump_path, const std::string &task, nlohmann::ordered_json data_mode) {
  std::vector<record> in;
  record s = session_record(dump_path);
  s.header.meta["task"] = task;
  s.header.meta["level"] = "mix";
  s.header.meta["data_mode"] = std::move(data_mode);
  in.push_back(std::move(s));
  const auto entry = [&](const std::string &name, nlohmann::ordered_json meta) {
    record e(record_kind::entry);
    e.header.run = "run-1";
    e.header.entry = name;
    e.header.meta = std::move(meta);
    in.push_back(std::move(e));
  };
  const auto tensor = [&](const std::string &name, const std::string &slot) {
    record t = float_tensor(name, slot, {1, -2});
    t.header.stats = tensor_stats_compute(t.payload_bytes().data(), dtype::float32, 2, false, {});
    t.drop_payload();
    in.push_back(std::move(t));
  };
  const std::string drop = "Module.drop.Dropout.forward.0", relu = "Functional.relu.0.forward";
  entry(relu, {{"parent", drop}, {"stack", {"File train.py, line 3, in forward"}}});
  tensor(relu, "input.0");
  tensor(relu, "output.0");
  entry(drop, {{"parent", nullptr}, {"is_recompute", false}, {"stack", {"File train.py, line 9, in step"}}});
  tensor(drop, "input.0");
  tensor(drop, "output.0");
  entry("Functional.relu.0.backward", {{"parent", "Module.drop.Dropout.backward.0"}});
  tensor("Functional.relu.0.backward", "input.0");
  entry("Module.drop.Dropout.backward.0", {{"parent", nullptr}});
  tensor("Module.drop.Dropout.backward.0", "input.0");
  entry("Module.fc.Linear.parameters_grad.0", nlohmann::ordered_json::object());
  tensor("Module.fc.Linear.parameters_grad.0", "weight");
  // What the scope or list filters left out: a node of construct.json only (record.h 1.5).
  entry("Functional.gelu.0.forward", {{"parent", drop}, {"skipped", true}});
  // A call whose values are not dumped (a clean call under overflow_check): its node and its
  // stack, no entry (record.h 1.6).
  entry("Functional.exp.0.forward", {{"parent", drop}, {"data", false}, {"stack", {"File train.py, line 5, in forward"}}});
  in.push_back(step_end_barrier());
  return in;
}

struct written_step {
  nlohmann::ordered_json dump, construct, stack;
  std::vector<std::string> entries() const {
    std::vector<std::string> names;
    for (const auto &[name, value] : dump["data"].items()) names.push_back(name);
    return names;
  }
};

written_step write_mix_step(const std::string &task, nlohmann::ordered_json data_mode) {
  test::temp_dir dir;
  test::stage_harness h(false);
  const std::string dump = dir.path() + "/dump";
  h.run(
      [&](stage_io &io) {
        writer_stage_options o;
        o.dump_path = dump;
        writer_run(io, o);
      },
      mix_step(dump, task, std::move(data_mode)));
  return {pyjson_load_file(dump + "/step0/rank/dump.json"), pyjson_load_file(dump + "/step0/rank/construct.json"),
          pyjson_load_file(dump + "/step0/rank/stack.json")};
}

}  // namespace

// Checked against msprobe 8.3.3's own dumps of one model at each of these settings.
TEST(StageHarness, writer_run_writes_what_msprobe_writes_for_each_task_and_data_mode) {
  using ::testing::ElementsAre;
  const auto all = write_mix_step("statistics", {"all"});
  EXPECT_THAT(all.entries(), ElementsAre("Functional.relu.0.forward", "Module.drop.Dropout.forward.0",
                                         "Functional.relu.0.backward", "Module.drop.Dropout.backward.0",
                                         "Module.fc.Linear.parameters_grad.0"));
  // A module without parameters has "parameters": {} (analyze_forward adds the section to every
  // module), before is_recompute; an operator has none.
  const auto &module = all.dump["data"]["Module.drop.Dropout.forward.0"];
  std::vector<std::string> keys;
  for (const auto &[k, v] : module.items()) keys.push_back(k);
  EXPECT_THAT(keys, ElementsAre("input_args", "input_kwargs", "output", "parameters", "is_recompute"));
  EXPECT_EQ(module["parameters"], nlohmann::ordered_json::object());
  EXPECT_FALSE(all.dump["data"]["Functional.relu.0.forward"].contains("parameters"));
  // construct.json: every node but the parameter gradients.
  const nlohmann::ordered_json tree = {{"Functional.relu.0.forward", "Module.drop.Dropout.forward.0"},
                                       {"Module.drop.Dropout.forward.0", nullptr},
                                       {"Functional.relu.0.backward", "Module.drop.Dropout.backward.0"},
                                       {"Module.drop.Dropout.backward.0", nullptr},
                                       {"Functional.gelu.0.forward", "Module.drop.Dropout.forward.0"},
                                       {"Functional.exp.0.forward", "Module.drop.Dropout.forward.0"}};
  EXPECT_EQ(all.construct, tree);
  std::vector<std::string> stacked;
  for (const auto &[id, group] : all.stack.items())
    for (const auto &name : group[0]) stacked.push_back(name.get<std::string>());
  EXPECT_THAT(stacked, ElementsAre("Functional.relu.0.forward", "Module.drop.Dropout.forward.0",
                                   "Functional.exp.0.forward"));

  // data_mode backward: the forward entries leave dump.json, and stay in the tree and the stacks.
  const auto backward = write_mix_step("statistics", {"backward"});
  EXPECT_THAT(backward.entries(), ElementsAre("Functional.relu.0.backward", "Module.drop.Dropout.backward.0",
                                              "Module.fc.Linear.parameters_grad.0"));
  EXPECT_EQ(backward.construct, tree);
  EXPECT_EQ(backward.stack, all.stack);
  EXPECT_EQ(backward.stack.size(), 3u);

  // data_mode forward: no backward entry and no parameter gradient (msprobe registers no hook).
  const auto forward = write_mix_step("statistics", {"forward"});
  EXPECT_THAT(forward.entries(), ElementsAre("Functional.relu.0.forward", "Module.drop.Dropout.forward.0"));
  EXPECT_EQ(forward.construct, tree);

  // Task structure: dump.json's data is {}; the tree and the stacks are written.
  const auto structure = write_mix_step("structure", {"all"});
  EXPECT_EQ(structure.dump["data"], nlohmann::ordered_json::object());
  EXPECT_EQ(structure.dump["task"], "structure");
  EXPECT_EQ(structure.construct, tree);
  EXPECT_EQ(structure.stack, all.stack);
}

// An overflow_check step without an overflow reaches the writer as its calls' entries marked
// data: false: msprobe 8.3.3 writes its folder all the same, with "data": {}, the stacks of its
// calls and an empty dump_tensor_data/.
TEST(StageHarness, writer_run_writes_the_folder_of_a_step_that_saved_no_tensor) {
  test::temp_dir dir;
  test::stage_harness h(false);
  const std::string dump = dir.path() + "/dump";
  std::vector<record> in;
  record s = session_record(dump);
  s.header.meta["task"] = "overflow_check";
  in.push_back(std::move(s));
  record e(record_kind::entry);
  e.header.run = "run-1";
  e.header.entry = "Torch.exp.0.forward";
  e.header.meta = {{"parent", nullptr}, {"data", false}, {"stack", {"File train.py, line 5, in forward"}}};
  in.push_back(std::move(e));
  in.push_back(step_end_barrier());
  h.run(
      [&](stage_io &io) {
        writer_stage_options o;
        o.dump_path = dump;
        writer_run(io, o);
      },
      std::move(in));
  const std::string folder = dump + "/step0/rank";
  EXPECT_EQ(pyjson_load_file(folder + "/dump.json")["data"], nlohmann::ordered_json::object());
  EXPECT_EQ(pyjson_load_file(folder + "/stack.json")["0"][0], nlohmann::ordered_json::array({"Torch.exp.0.forward"}));
  EXPECT_TRUE(std::filesystem::is_directory(folder + "/dump_tensor_data"));
}

// ---- whole batches passed on unchanged (stage_io::pass_unchanged, record.h section 4) ----

namespace {

// A step as a capture computing statistics in place sends it: a session, an entry defining a
// stack, then `tensors` tensors with statistics and no data (the first `with_data` of them
// carrying data and no statistics instead), their entries referring to the stack by id, values,
// a flush and a step end. Enough records for several batches.
std::vector<record> step_of_numbers(size_t tensors, size_t with_data) {
  std::vector<record> in;
  in.push_back(session_record("/nonexistent"));
  const nlohmann::ordered_json lines = {"File train.py, line 3, in step", "File train.py, line 9, in main"};
  in.push_back(test::stack_entry_record("run-1", 1, 77, &lines));
  for (size_t i = 0; i < tensors; ++i) {
    const std::string entry = fmt::format("Functional.relu.{}.forward", i);
    if (i % 50 == 0) {
      record e = test::stack_entry_record("run-1", i + 2, 77, nullptr);
      e.header.entry = entry;
      in.push_back(std::move(e));
    }
    record t = float_tensor(entry, "output.0", {1, -2, static_cast<float>(i)});
    if (i >= with_data) {
      t.drop_payload();
      t.header.stats = tensor_stats{};
      t.header.stats->max = stat_value::of_real(double(i));
    }
    in.push_back(std::move(t));
    record v(record_kind::value);
    v.header.run = "run-1";
    v.header.entry = entry;
    v.header.slot = "kwargs.inplace";
    v.header.meta = {{"type", "bool"}, {"value", false}};
    in.push_back(std::move(v));
  }
  in.push_back(record(record_kind::flush));
  in.push_back(record(record_kind::step_end));
  return in;
}

// What the consumer sees of a record: its header as encoded, an entry's stack as its lines.
std::string seen(const record &r) {
  record_header h = r.header;
  h.seq = 0;  // each hop numbers what it sends
  if (const auto *lines = record_stack_lines(r.header)) h.meta["stack"] = *lines;
  const auto frame = record_header_encode(h);
  return std::string(static_cast<const char *>(frame.data()), frame.size()) + (r.has_payload() ? "+data" : "");
}

}  // namespace

TEST(StageHarness, stats_run_passes_batches_of_finished_records_on_whole_and_the_consumer_sees_the_same) {
  const auto in = step_of_numbers(3000, 0);
  test::stage_harness h;
  stats_stage_result result;
  const auto out = h.run([&](stage_io &io) { result = stats_run(io, {}); }, in);
  ASSERT_EQ(out.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) ASSERT_EQ(seen(out[i]), seen(in[i])) << "record " << i;
  // The first batch holds the session and the stack's lines: decoded. The others pass whole.
  EXPECT_GT(h.counts().passed_unchanged, in.size() / 2);
  EXPECT_LT(h.counts().passed_unchanged, in.size());
  EXPECT_EQ(h.counts().received, in.size());
  EXPECT_EQ(h.counts().sent, in.size());
  EXPECT_EQ(result.records, in.size());
  EXPECT_EQ(result.tensors, 3000u);
  EXPECT_EQ(result.computed, 0u);
}

TEST(StageHarness, a_record_missing_from_a_batch_passed_whole_is_named_by_its_seq) {
  // A capture's records numbered 1, 2, 3, …, one of them lost before the statistics stage, in
  // the middle of a batch that the stage passes on undecoded: its glance reads seq.
  auto in = step_of_numbers(3000, 0);
  for (size_t i = 0; i < in.size(); ++i) in[i].header.seq = i + 1;
  in.erase(in.begin() + 4000);
  test::stage_harness h;
  h.set_numbered_producer(true);
  std::string error;
  try {
    (void)h.run([&](stage_io &io) { stats_run(io, {}); }, in);
  } catch (const system_error &e) {
    error = e.what();
  }
  EXPECT_NE(error.find("1 record that stage-harness (pid "), std::string::npos) << error;
  EXPECT_NE(error.find("(the first: seq 4001)"), std::string::npos) << error;
  // Whole, the same stream passes, most of it undecoded.
  auto whole = step_of_numbers(3000, 0);
  for (size_t i = 0; i < whole.size(); ++i) whole[i].header.seq = i + 1;
  test::stage_harness again;
  again.set_numbered_producer(true);
  EXPECT_EQ(again.run([&](stage_io &io) { stats_run(io, {}); }, whole).size(), whole.size());
  EXPECT_GT(again.counts().passed_unchanged, whole.size() / 2);
  EXPECT_EQ(again.counts().lost, 0u);
}

TEST(StageHarness, stats_run_decodes_a_batch_with_work_in_it_and_passes_the_rest) {
  const auto in = step_of_numbers(3000, 40);  // the first 40 tensors bring data, not statistics
  test::stage_harness h;
  stats_stage_result result;
  const auto out = h.run([&](stage_io &io) { result = stats_run(io, {}); }, in);
  ASSERT_EQ(out.size(), in.size());
  size_t computed = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].header.kind == record_kind::tensor && in[i].has_payload()) {
      ASSERT_TRUE(out[i].header.stats) << i;
      EXPECT_FALSE(out[i].has_payload()) << i;  // not to be saved: numbers only downstream
      ++computed;
      continue;
    }
    ASSERT_EQ(seen(out[i]), seen(in[i])) << "record " << i;
  }
  EXPECT_EQ(computed, 40u);
  EXPECT_EQ(result.computed, 40u);
  EXPECT_GT(h.counts().passed_unchanged, in.size() / 2);
  // --recompute leaves nothing unchanged that carries data; without data a record still passes.
  test::stage_harness again;
  (void)again.run([&](stage_io &io) { result = stats_run(io, {.recompute = true}); }, step_of_numbers(3000, 3000));
  EXPECT_EQ(result.computed, 3000u);
  EXPECT_EQ(again.counts().passed_unchanged, 0u);
}

TEST(StageHarness, stats_leaves_unchanged_only_what_it_would_not_touch) {
  record_glance g;
  g.kind = record_kind::session;
  EXPECT_FALSE(stats_leaves_unchanged(g, {}));  // its precision is read
  for (auto kind : {record_kind::value, record_kind::entry, record_kind::flush, record_kind::step_end}) {
    g.kind = kind;
    EXPECT_TRUE(stats_leaves_unchanged(g, {})) << record_kind_name(kind);
  }
  g = {};
  EXPECT_TRUE(stats_leaves_unchanged(g, {}));  // no data: nothing to compute or drop
  g.has_payload = true;
  EXPECT_FALSE(stats_leaves_unchanged(g, {}));  // to compute
  g.has_stats = true;
  EXPECT_FALSE(stats_leaves_unchanged(g, {}));  // data not to be saved: dropped
  EXPECT_TRUE(stats_leaves_unchanged(g, {.keep_payload = true}));
  g.flags = RECORD_FLAG_SAVE;
  EXPECT_TRUE(stats_leaves_unchanged(g, {}));
  EXPECT_FALSE(stats_leaves_unchanged(g, {.recompute = true}));
  g.flags |= RECORD_FLAG_CRC32;
  EXPECT_FALSE(stats_leaves_unchanged(g, {}));  // the CRC-32 is still to compute
  g.has_crc32 = true;
  EXPECT_TRUE(stats_leaves_unchanged(g, {}));
}
