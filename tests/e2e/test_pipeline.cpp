// End to end with the real binaries over ipc in a temp dir: the example producer through both
// shipped manifests, values checked against a float64 reference computed here, tensor files
// checked byte for byte; a stage killed mid-stream; a malformed record.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <signal.h>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zmq.hpp>

#include "endpoint.h"
#include "example_model.h"
#include "npy.h"
#include "pyjson.h"
#include "record.h"
#include "tensor_stats.h"
#include "test_support.h"

using namespace tprobe;
using json = nlohmann::ordered_json;
using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;

namespace {

std::string write_config(const test::temp_dir &dir, const std::string &task, const std::string &extra = "") {
  const std::string path = dir / "config.json";
  test::write_file(path, R"({"task": ")" + task + R"(", "dump_path": ")" + dir.path() + R"(/dump", "level": "L1")" +
                             extra + "}");
  return path;
}

// float64 reference of the float32 statistics, rounded to float32 as msprobe reports them.
void expect_float32_stats(const example::item &it, const json &leaf) {
  std::vector<float> v(it.data.size() / 4);
  std::memcpy(v.data(), it.data.data(), it.data.size());
  double mx = -INFINITY, mn = INFINITY, sum = 0, sq = 0;
  bool nan = false;
  for (float f : v) {
    nan |= std::isnan(f);
    mx = std::max<double>(mx, f);
    mn = std::min<double>(mn, f);
    sum += f;
    sq += double(f) * f;
  }
  const std::string where = it.entry + " " + it.slot;
  if (nan) {
    EXPECT_TRUE(std::isnan(leaf["Max"].get<double>())) << where;
    return;
  }
  EXPECT_EQ(leaf["Max"].get<double>(), double(float(mx))) << where;
  EXPECT_EQ(leaf["Min"].get<double>(), double(float(mn))) << where;
  EXPECT_NEAR(leaf["Mean"].get<double>(), sum / v.size(), 1e-6 * (1 + std::fabs(sum / v.size()))) << where;
  EXPECT_NEAR(leaf["Norm"].get<double>(), std::sqrt(sq), 1e-6 * std::sqrt(sq)) << where;
}

const json &leaf_of(const json &data, const example::item &it) {
  const json &e = data.at(it.entry);
  const auto dot = it.slot.find('.');
  const std::string first = it.slot.substr(0, dot), rest = it.slot.substr(dot + 1);
  const bool backward = it.entry.ends_with(".backward");
  if (first == "kwargs") return e.at("input_kwargs").at(rest);
  const std::string section = backward ? first : (first == "input" ? "input_args" : first);
  return e.at(section).at(std::stoul(rest));
}

void check_dump(const std::string &root, int steps, const std::vector<int> &ranks, bool tensors) {
  for (int step = 0; step < steps; ++step)
    for (int rank : ranks) {
      const std::string dir = root + "/step" + std::to_string(step) + (rank < 0 ? "/rank" : "/rank" + std::to_string(rank));
      SCOPED_TRACE(dir);
      const json doc = pyjson_load_file(dir + "/dump.json");
      EXPECT_EQ(doc["task"], tensors ? "tensor" : "statistics");
      EXPECT_EQ(doc["framework"], "pytorch");
      EXPECT_EQ(doc["dump_data_dir"].is_null(), !tensors);
      const json &data = doc["data"];
      const auto items = example::example_step(1, rank, step);
      size_t entries = 0;
      std::string last;
      for (const auto &it : items) {
        if (it.entry != last) ++entries, last = it.entry;
        const json &leaf = leaf_of(data, it);
        if (!it.is_tensor) {
          EXPECT_EQ(leaf, json::parse(it.json));
          continue;
        }
        EXPECT_EQ(leaf["shape"].get<std::vector<int64_t>>(), it.shape);
        EXPECT_EQ(leaf["requires_grad"].get<bool>(), it.requires_grad);
        if (it.type == example::element::float32) {
          expect_float32_stats(it, leaf);
        } else if (it.type == example::element::int64) {
          EXPECT_EQ(leaf["Max"], 423 + step + (it.slot == "output.0"));
        } else if (it.type == example::element::boolean) {
          EXPECT_TRUE(leaf["Mean"].is_null());
        }
        ASSERT_EQ(leaf.contains("data_name"), tensors);
        if (tensors && it.type != example::element::bfloat16) {
          const auto arr = npy_read(dir + "/dump_tensor_data/" + leaf["data_name"].get<std::string>());
          EXPECT_EQ(arr.shape, it.shape);
          ASSERT_EQ(arr.data.size(), it.data.size()) << it.entry << " " << it.slot;
          EXPECT_EQ(std::memcmp(arr.data.data(), it.data.data(), it.data.size()), 0) << it.entry << " " << it.slot;
        }
      }
      EXPECT_EQ(data.size(), entries);
      const json stack = pyjson_load_file(dir + "/stack.json");
      EXPECT_EQ(stack.at("0").at(0).size(), entries);  // one shared stack for every entry
      EXPECT_EQ(pyjson_load_file(dir + "/construct.json"), json::object());  // L1
    }
}

}  // namespace

TEST(Pipeline, statistics_manifest_two_ranks) {
  test::temp_dir dir;
  const auto r = test::run_process({test::bin("tprobe"), "run", test::source_dir() + "/pipelines/statistics.json",
                                    "--config", write_config(dir, "statistics"), "--",
                                    test::bin("tprobe-example-producer"), "--steps", "2", "--world-size", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  check_dump(dir / "dump", 2, {0, 1}, false);
}

TEST(Pipeline, tensor_manifest_writes_the_bytes_sent) {
  test::temp_dir dir;
  const auto r = test::run_process({test::bin("tprobe"), "run", test::source_dir() + "/pipelines/tensor.json",
                                    "--config", write_config(dir, "statistics"), "--",
                                    test::bin("tprobe-example-producer"), "--steps", "2"});
  ASSERT_EQ(r.status, 0) << r.err;
  check_dump(dir / "dump", 2, {-1}, true);
  // bfloat16 is stored as float32, exactly.
  const auto items = example::example_step(1, -1, 0);
  for (const auto &it : items) {
    if (it.type != example::element::bfloat16) continue;
    const auto arr = npy_read(dir.path() + "/dump/step0/rank/dump_tensor_data/" + it.entry + "." + it.slot + ".npy");
    EXPECT_EQ(arr.descr, "<f4");
    for (size_t i = 0; i < arr.data.size() / 4; ++i) {
      uint16_t b;
      std::memcpy(&b, it.data.data() + 2 * i, 2);
      float f;
      std::memcpy(&f, arr.data.data() + 4 * i, 4);
      EXPECT_EQ(f, bfloat16_to_float(b));
    }
  }
}

TEST(Pipeline, md5_mode_writes_crc32) {
  test::temp_dir dir;
  const auto r = test::run_process(
      {test::bin("tprobe"), "run", test::source_dir() + "/pipelines/statistics.json", "--config",
       write_config(dir, "statistics", R"(, "statistics": {"summary_mode": "md5"})"), "--",
       test::bin("tprobe-example-producer"), "--steps", "1"});
  ASSERT_EQ(r.status, 0) << r.err;
  const json doc = pyjson_load_file(dir.path() + "/dump/step0/rank/dump.json");
  const auto items = example::example_step(1, -1, 0);
  for (const auto &it : items) {
    if (!it.is_tensor) continue;
    const json &leaf = leaf_of(doc["data"], it);
    char expected[9];
    std::snprintf(expected, sizeof expected, "%08x", crc32_bytes(it.data.data(), it.data.size()));
    EXPECT_EQ(leaf["md5"], expected) << it.entry << " " << it.slot;
  }
}

TEST(Pipeline, killed_stage_leaves_a_valid_dump) {
  test::temp_dir dir;
  const std::string writer_in = "ipc://" + dir.path() + "/writer.in", stats_in = "ipc://" + dir.path() + "/stats.in";
  const std::string stats_tap = "ipc://" + dir.path() + "/stats.tap";
  test::child_process writer({test::bin("tprobe-writer"), "--input", writer_in, "--flush-interval", "0.05"},
                             dir.path(), {}, true);
  writer.wait_ready();
  test::child_process stats({test::bin("tprobe-stats"), "--input", stats_in, "--output", writer_in, "--tap",
                             stats_tap},
                            dir.path(), {}, true);
  stats.wait_ready();
  zmq::context_t ctx;
  tap_subscriber tap(ctx, stats_tap);
  test::child_process producer({test::bin("tprobe-example-producer"), "--steps", "100000", "--endpoint", stats_in,
                                "--config", write_config(dir, "statistics")},
                               dir.path());
  // The stats stage's tap shows what it has passed on. A record of step 4 means the step_end of
  // steps 0-3 went before it (a stream is ordered), even if the lossy tap dropped those.
  bool past_step3 = false;
  while (!past_step3) {
    auto r = tap.receive(60000);
    ASSERT_TRUE(r) << "no record of step 4 on the stats tap within 60 s\n" << stats.err() << writer.err();
    past_step3 = r->header.step >= 4;
  }
  stats.kill(SIGKILL);
  EXPECT_EQ(stats.wait(), 128 + SIGKILL);
  // The writer notices that its only producer died (pid gone, silent), counts the stream as
  // truncated, writes everything it received and exits by itself.
  EXPECT_EQ(writer.wait(), 0) << writer.err();
  EXPECT_THAT(writer.err(), HasSubstr("without end-of-stream"));
  producer.kill(SIGKILL);
  producer.wait();
  // Every dump.json that exists parses and holds whole entries; steps 0-3 are all there.
  size_t folders = 0;
  for (const auto &e : std::filesystem::directory_iterator(dir.path() + "/dump")) {
    const std::string path = e.path().string() + "/rank/dump.json";
    if (!std::filesystem::exists(path)) continue;
    ++folders;
    const json doc = pyjson_load_file(path);
    EXPECT_TRUE(doc["data"].is_object());
  }
  EXPECT_GE(folders, 4u);
  for (int step = 0; step < 4; ++step)
    EXPECT_TRUE(std::filesystem::exists(dir.path() + "/dump/step" + std::to_string(step) + "/rank/dump.json")) << step;
}

TEST(Pipeline, launcher_names_the_stage_that_died) {
  test::temp_dir dir;
  const std::string manifest = dir / "m.json";
  test::write_file(manifest, R"({"stages": [
    {"name": "stats", "stage": "stats", "inputs": ["capture"]},
    {"name": "writer", "stage": "writer", "inputs": ["stats"], "options": {"dump-path": "/proc/forbidden"}}]})");
  const auto r = test::run_process({test::bin("tprobe"), "run", manifest, "--config", write_config(dir, "statistics"),
                                    "--", test::bin("tprobe-example-producer"), "--steps", "1"});
  EXPECT_NE(r.status, 0);
  EXPECT_NE(r.err.find("\"writer\""), std::string::npos) << r.err;
}

TEST(Pipeline, malformed_record_stops_the_stage_with_a_clear_error) {
  test::temp_dir dir;
  const std::string in = "ipc://" + dir.path() + "/stats.in";
  test::child_process stats({test::bin("tprobe-stats"), "--input", in}, dir.path(), {}, true);
  stats.wait_ready();
  zmq::context_t ctx;
  zmq::socket_t raw(ctx, zmq::socket_type::dealer);
  raw.set(zmq::sockopt::linger, 1000);
  raw.connect(in);
  raw.send(zmq::str_buffer("TP\x01\x00not msgpack at all"), zmq::send_flags::none);
  EXPECT_EQ(stats.wait(), 100);
  EXPECT_NE(stats.err().find("tprobe-stats: fatal: malformed record"), std::string::npos) << stats.err();
}

TEST(Pipeline, stages_do_not_inherit_the_launchers_fds) {
  test::temp_dir dir;
  // An fd the launcher inherits from its parent (as from a shell), far above what ZeroMQ opens.
  constexpr int inherited = 200;
  const int fd = ::open("/dev/null", O_RDONLY);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::dup2(fd, inherited), inherited);
  ::close(fd);
  // The command lists its own fds and those of its siblings, the stages (same parent).
  const std::string script = dir / "list-fds.sh";
  test::write_file(script,
                   "cd \"$1\"\n"
                   "ls /proc/$$/fd > command.fds\n"
                   ": > stages.fds\n"
                   "for d in /proc/[0-9]*; do\n"
                   "  [ \"$d\" = /proc/$$ ] && continue\n"
                   "  p=$(cut -d' ' -f4 $d/stat 2>/dev/null)\n"
                   "  [ \"$p\" = \"$PPID\" ] && ls $d/fd >> stages.fds && echo stage >> stages.count\n"
                   "done\n"
                   "true\n");
  const auto r = test::run_process({test::bin("tprobe"), "run", test::source_dir() + "/pipelines/testing/stats-writer.json",
                                    "--config", write_config(dir, "statistics"), "--", "/bin/sh", script, dir.path()});
  ::close(inherited);
  ASSERT_EQ(r.status, 0) << r.err;
  auto lines = [](const std::string &text) {
    std::vector<std::string> v;
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) v.push_back(l);
    return v;
  };
  EXPECT_EQ(lines(test::read_file(dir / "stages.count")).size(), 2u);  // stats and writer
  EXPECT_THAT(lines(test::read_file(dir / "stages.fds")), Not(Contains(std::to_string(inherited))));
  EXPECT_THAT(lines(test::read_file(dir / "command.fds")), Contains(std::to_string(inherited)));
}

TEST(Pipeline, manifest_runs_start_the_command_once_per_run) {
  test::temp_dir dir;
  // Two runs of one command into one writer, told apart by their dump paths (env) and arguments.
  const std::string manifest = dir / "two-runs.json";
  test::write_file(manifest, R"({"runs": [
      {"name": "a", "args": ["--steps", "1"], "env": {"TPROBE_DUMP_PATH": ")" + dir.path() + R"(/dump-a"}},
      {"name": "b", "args": ["--steps", "2"], "env": {"TPROBE_DUMP_PATH": ")" + dir.path() + R"(/dump-b"}}],
    "stages": [
      {"name": "stats", "stage": "stats", "inputs": ["capture"]},
      {"name": "writer", "stage": "writer", "inputs": ["stats"]}]})");
  const auto r = test::run_process({test::bin("tprobe"), "run", manifest, "--config", write_config(dir, "statistics"),
                                    "--", test::bin("tprobe-example-producer")});
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr("commands a exited with status 0, b exited with status 0")) << r.err;
  check_dump(dir / "dump-a", 1, {-1}, false);
  check_dump(dir / "dump-b", 2, {-1}, false);
  EXPECT_FALSE(std::filesystem::exists(dir / "dump-a/step1"));
  EXPECT_FALSE(std::filesystem::exists(dir / "dump"));
}

TEST(Pipeline, a_failing_run_decides_the_exit_status) {
  test::temp_dir dir;
  const std::string manifest = dir / "two-runs.json";
  test::write_file(manifest, R"({"runs": [{"name": "ok", "args": ["0"]}, {"name": "bad", "args": ["3"]}],
    "stages": [{"name": "stats", "stage": "stats", "inputs": ["capture"]}]})");
  const auto r = test::run_process({test::bin("tprobe"), "run", manifest, "--", "/bin/sh", "-c",
                                    "test \"$TPROBE_RUN_LABEL\" = ok -o \"$TPROBE_RUN_LABEL\" = bad && exit $0"});
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_THAT(r.err, HasSubstr("ok exited with status 0, bad exited with status 3")) << r.err;
}

TEST(Pipeline, level_debug_writes_debug_json) {
  test::temp_dir dir;
  const std::string config = dir / "config.json";
  test::write_file(config, R"({"task": "statistics", "dump_path": ")" + dir.path() + R"(/dump", "level": "debug"})");
  const auto r = test::run_process({test::bin("tprobe"), "run", test::source_dir() + "/pipelines/statistics.json",
                                    "--config", config, "--", test::bin("tprobe-example-producer"), "--steps", "1"});
  ASSERT_EQ(r.status, 0) << r.err;
  const std::string folder = dir / "dump/step0/rank";
  EXPECT_FALSE(std::filesystem::exists(folder + "/dump.json"));
  const json doc = pyjson_load_file(folder + "/debug.json");
  EXPECT_EQ(doc["level"], "debug");
  EXPECT_FALSE(doc["data"].empty());
}

// ---- deadlines and early checks of the launcher (issue 11) ----

namespace {

// A stage binary of one's own (a manifest's "exec") that describes itself as a sink and then
// does `body` (shell) instead of serving its input.
std::string shell_stage(const test::temp_dir &dir, const std::string &name, const std::string &body) {
  const std::string path = dir / name;
  test::write_file(path, "#!/bin/sh\n"
                         "if [ \"$1\" = --describe ]; then\n"
                         "  echo '{\"stage\": \"" + name + "\", \"input\": true, \"output\": false}'\n"
                         "  exit 0\n"
                         "fi\n" + body + "\n");
  ::chmod(path.c_str(), 0755);
  return path;
}

}  // namespace

TEST(Pipeline, a_stage_that_never_reports_ready_fails_the_start_up) {
  test::temp_dir dir;
  const std::string mine = shell_stage(dir, "mine", "exec sleep 600");
  const std::string manifest = dir / "m.json";
  test::write_file(manifest, R"({"stages": [{"name": "mine", "exec": ")" + mine + R"(", "inputs": ["capture"]}]})");
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = test::run_process({test::bin("tprobe"), "run", manifest, "--startup-timeout", "1", "--", "/bin/true"});
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20);
  EXPECT_EQ(r.status, 111) << r.err;
  EXPECT_THAT(r.err, HasSubstr("tprobe: fatal: stage \"mine\" (" + mine + ") did not report ready within 1 s"));
}

TEST(Pipeline, a_consumer_that_is_ready_but_never_answers_is_named) {
  test::temp_dir dir;
  // Says it is ready, binds nothing, never answers: its producer cannot connect.
  const std::string mine = shell_stage(dir, "mine", "echo ready >&3\nexec sleep 600");
  const std::string manifest = dir / "m.json";
  test::write_file(manifest, R"({"stages": [
    {"name": "stats", "stage": "stats", "inputs": ["capture"]},
    {"name": "mine", "exec": ")" + mine + R"(", "inputs": ["stats"]}]})");
  const auto r = test::run_process({test::bin("tprobe"), "run", manifest, "--startup-timeout", "2", "--", "/bin/true"});
  EXPECT_EQ(r.status, 111) << r.err;
  EXPECT_THAT(r.err, HasSubstr("stage \"stats\" (tprobe-stats) did not report ready within 2 s (it first connects to "
                               "\"mine\")"));
}

TEST(Pipeline, tap_on_an_endpoint_nobody_serves_exits_111) {
  for (const std::string ep : {"ipc:///tmp/nonexistent.tap", "tcp://127.0.0.1:1"}) {
    const auto t0 = std::chrono::steady_clock::now();
    const auto r = test::run_process({test::bin("tprobe"), "tap", ep, "--connect-timeout", "500"});
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10) << ep;
    EXPECT_EQ(r.status, 111) << ep << r.err;
    EXPECT_THAT(r.err, HasSubstr("tprobe-tap: fatal: unable to connect to " + ep + ": nothing answered within 500 ms"));
  }
}

TEST(Pipeline, run_validates_the_config_before_anything_starts) {
  test::temp_dir dir;
  test::write_file(dir / "a_file", "x");
  const std::vector<std::pair<std::string, std::string>> cases{
      {R"({"task": "statistics", "dump_path": ")" + dir.path() + R"(/a_file"})", "exists and is not a directory"},
      {R"({"task": "statistics", "dump_path": "./d", "levle": "L1"})", "field \"levle\": unknown key"},
      {R"({"task": "statistics", "dump_path": "./d", "tprobe": {"pipeline_timeout_s": -5}})",
       "field \"tprobe.pipeline_timeout_s\""},
  };
  for (const auto &[text, message] : cases) {
    test::write_file(dir / "config.json", text);
    const auto r = test::run_process({test::bin("tprobe"), "run", test::source_dir() + "/pipelines/statistics.json",
                                      "--config", dir / "config.json", "--", "/bin/true"});
    EXPECT_EQ(r.status, 100) << r.err;
    EXPECT_THAT(r.err, HasSubstr(message));
    EXPECT_THAT(r.err, Not(HasSubstr("ready")));  // nothing started
  }
}

// Config and manifest agree (issue 60 item 5): a task the manifest cannot do, or one tprobe does
// not build, is refused in one line naming the config, the task and (for a mismatch) the manifest
// and its tasks, exit 100, before the command starts: never a statistics dump in its place.
TEST(Pipeline, run_refuses_a_task_the_manifest_cannot_do_before_the_command_starts) {
  test::temp_dir dir;
  const std::string statistics = test::source_dir() + "/pipelines/statistics.json";
  test::write_file(dir / "config.json", "{}");
  const std::string config = std::filesystem::canonical(dir / "config.json");  // as the launcher names it
  struct refusal {
    std::string task, section, manifest, message, level = "L1";
  };
  const std::vector<refusal> cases{
      {"overflow_check", R"("overflow_check": {"overflow_nums": 1})", statistics,
       config + ": task \"overflow_check\" is not one that " + statistics +
           " can do (its tasks: statistics, tensor, structure)"},
      {"grad_probe", R"("grad_probe": {"grad_level": "L1"})", statistics,
       config + ": task \"grad_probe\" is not one that " + statistics + " can do"},
      {"statistics", R"("statistics": {})", test::source_dir() + "/pipelines/overflow_check.json",
       config + ": task \"statistics\" is not one that " + test::source_dir() +
           "/pipelines/overflow_check.json can do (its tasks: overflow_check)"},
      {"free_benchmark", R"("free_benchmark": {"fuzz_level": "L1"})", statistics,
       config + ": task \"free_benchmark\" is not one that " + statistics + " can do"},
      // MindSpore's task (level L2 there): the one msprobe task tprobe does not build.
      {"exception_dump", R"("exception_dump": {})", statistics,
       config + ": task \"exception_dump\" is not built in tprobe yet (built: statistics, tensor, overflow_check, "
                "grad_probe, free_benchmark, structure, monitor)",
       "L2"},
      {"run_ut", R"("run_ut": {"white_list": []})", statistics,
       config + ": task \"run_ut\" replays a dump, it captures nothing: dump with task \"tensor\" (or \"statistics\") "
                "at level L1, then run `tprobe precheck DUMP -config " + config + "`"},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE(c.task + " under " + c.manifest);
    test::write_file(config, R"({"task": ")" + c.task + R"(", "dump_path": ")" + dir.path() + R"(/dump", "level": ")" +
                                 c.level + R"(", )" + c.section + "}");
    const std::string ran = dir / "command-ran";
    for (const bool from_env : {false, true}) {
      std::vector<std::string> argv{test::bin("tprobe"), "run", c.manifest};
      if (!from_env) argv.insert(argv.end(), {"--config", config});
      argv.insert(argv.end(), {"--", "/bin/sh", "-c", "touch " + ran});
      const auto r = test::run_process(argv, from_env ? std::vector<std::string>{"TPROBE_CONFIG=" + config}
                                                      : std::vector<std::string>{});
      EXPECT_EQ(r.status, 100) << r.err;
      EXPECT_THAT(r.err, HasSubstr("tprobe: fatal: " + std::string(from_env ? "TPROBE_CONFIG: " : "") + c.message));
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;  // one line
      EXPECT_FALSE(std::filesystem::exists(ran)) << "the command ran";
      EXPECT_FALSE(std::filesystem::exists(dir / "dump")) << "something was dumped";
    }
  }
  // The manifest's own capture.task decides where it overrides the config (tensor.json: tensor).
  test::write_file(config, R"({"task": "overflow_check", "dump_path": ")" + dir.path() + R"(/dump"})");
  const auto r = test::run_process({test::bin("tprobe"), "run", test::source_dir() + "/pipelines/tensor.json", "--config",
                                    config, "--", "/bin/sh", "-c", "echo $TPROBE_PIPELINE_TASKS"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(r.out, "tensor\n");
}

// The capture checks its task against the pipeline too, for a config the launcher does not see
// (a training script's own PrecisionDebugger(config_path=…), or a producer given another file).
TEST(Pipeline, the_capture_refuses_a_task_its_pipeline_cannot_do) {
  test::temp_dir dir;
  const std::string config = dir / "config.json";
  test::write_file(config, R"({"task": "overflow_check", "dump_path": ")" + dir.path() + R"(/dump"})");
  const std::string statistics = test::source_dir() + "/pipelines/statistics.json";
  const auto r = test::run_process({test::bin("tprobe"), "run", statistics, "--", test::bin("tprobe-example-producer"),
                                    "--config", config, "--steps", "2"});
  EXPECT_NE(r.status, 0) << r.err;
  EXPECT_THAT(r.err, HasSubstr(config + ": task \"overflow_check\" is not one that " + statistics + " can do"));
  EXPECT_FALSE(std::filesystem::exists(dir / "dump")) << r.err;
}

// `kill -INT` to the launcher alone (a scheduler, a script; not a terminal's Ctrl-C, which reaches
// the command itself) is forwarded to the command, as docs/stages/run.md says; its exit then ends
// the run the clean way.
TEST(Pipeline, sigint_to_the_launcher_alone_is_forwarded_to_the_command) {
  test::temp_dir dir;
  const auto t0 = std::chrono::steady_clock::now();
  const auto r = test::run_process(
      {test::bin("tprobe"), "run", test::source_dir() + "/pipelines/statistics.json", "--config",
       write_config(dir, "statistics"), "--", "/bin/sh", "-c",
       "trap 'echo got SIGINT; kill $S; exit 0' INT; sleep 20 & S=$!; kill -INT $TPROBE_LAUNCHER_PID; wait $S; "
       "echo no SIGINT; exit 7"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_THAT(r.out, HasSubstr("got SIGINT"));
  EXPECT_THAT(r.err, HasSubstr("tprobe: interrupted: SIGINT forwarded to the command"));
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 15);
}

TEST(Pipeline, run_prints_the_run_dir_and_taps_when_ready) {
  test::temp_dir dir;
  // The command runs after the ready line and finds the writer's tap bound (every stage has one).
  const auto r = test::run_process({test::bin("tprobe"), "run", test::source_dir() + "/pipelines/statistics.json",
                                    "--config", write_config(dir, "statistics"), "--", "/bin/sh", "-c",
                                    "test -S \"$TPROBE_RUN_DIR/writer.tap\" && echo writer tap bound"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("writer tap bound"));
  EXPECT_THAT(r.err, HasSubstr("tprobe: ready; run dir /"));
  EXPECT_THAT(r.err, HasSubstr("/writer.tap"));
  EXPECT_LT(r.err.find("tprobe: ready;"), r.err.find("tprobe: done"));
}

// tprobe-stats passes whole batches of records the capture finished (statistics in place) on
// undecoded (stage_io::pass_unchanged): the same dump as the writer alone writes from the same
// records, over real sockets between the real binaries.
TEST(Pipeline, stats_passing_whole_batches_writes_the_dump_the_writer_alone_writes) {
  std::map<std::string, std::string> dumps;
  for (const bool through_stats : {true, false}) {
    SCOPED_TRACE(through_stats ? "through tprobe-stats" : "writer alone");
    test::temp_dir dir;
    const std::string writer_in = "ipc://" + dir.path() + "/writer.in", stats_in = "ipc://" + dir.path() + "/stats.in";
    test::child_process writer({test::bin("tprobe-writer"), "--input", writer_in}, dir.path(), {}, true);
    writer.wait_ready();
    std::unique_ptr<test::child_process> stats;
    if (through_stats) {
      stats = std::make_unique<test::child_process>(
          std::vector<std::string>{test::bin("tprobe-stats"), "--input", stats_in, "--output", writer_in}, dir.path(),
          std::vector<std::string>{}, true);
      stats->wait_ready();
    }
    test::child_process producer({test::bin("tprobe-example-producer"), "--steps", "60", "--endpoint",
                                  through_stats ? stats_in : writer_in, "--config", write_config(dir, "statistics")},
                                 dir.path());
    ASSERT_EQ(producer.wait(), 0);
    if (stats) {
      ASSERT_EQ(stats->wait(), 0) << stats->err();
      const std::string err = stats->err();
      const auto passed = err.find(" passed in whole batches");
      ASSERT_NE(passed, std::string::npos) << err;
      const auto count_at = err.rfind(' ', passed - 1) + 1;
      EXPECT_GT(std::stoull(err.substr(count_at, passed - count_at)), 0u) << err;
    }
    ASSERT_EQ(writer.wait(), 0) << writer.err();
    check_dump(dir.path() + "/dump", 60, {-1}, false);
    std::string all;
    for (int step = 0; step < 60; ++step)
      for (const char *file : {"dump.json", "stack.json", "construct.json"})
        all += test::read_file(dir.path() + "/dump/step" + std::to_string(step) + "/rank/" + file);
    dumps[through_stats ? "stats" : "writer"] = all;
  }
  EXPECT_FALSE(dumps["stats"].empty());
  EXPECT_EQ(dumps["stats"], dumps["writer"]);
}

// ---- the writer's dump path: one writer at a time, an earlier run's folders named, tap drops ----

namespace {

// tprobe-synth → tprobe-writer over ipc: `steps` steps of `records` small tensors as rank `rank`
// into `dump` (the session record's dump_path). Returns the writer's stderr.
std::string synth_into(const test::temp_dir &dir, const std::string &dump, int steps, int rank, int records = 8) {
  const std::string in = "ipc://" + dir.path() + "/w" + std::to_string(steps) + "_" + std::to_string(rank) + ".in";
  test::child_process writer({test::bin("tprobe-writer"), "--input", in}, dir.path(), {}, true);
  writer.wait_ready();
  test::child_process synth({test::bin("tprobe-synth"), "--output", in, "--records", std::to_string(records), "--steps",
                             std::to_string(steps), "--rank", std::to_string(rank), "--dump-path", dump},
                            dir.path());
  EXPECT_EQ(synth.wait(), 0) << synth.err();
  EXPECT_EQ(writer.wait(), 0) << writer.err();
  return writer.err();
}

}  // namespace

// A dump path's rank folders have one writer at a time: a second run writing the same ranks into
// it at once is refused with one line naming the first; the ranks of one job, each with a
// pipeline of its own, share it.
TEST(Pipeline, a_second_writer_into_the_same_rank_folders_is_refused_naming_the_first) {
  test::temp_dir dir;
  const std::string dump = dir / "dump", in = "ipc://" + dir.path() + "/first.in";
  test::child_process first({test::bin("tprobe-writer"), "--input", in}, dir.path(), {}, true);
  first.wait_ready();
  zmq::context_t ctx;
  record_sender sender(ctx, in, "test");
  record session(record_kind::session);
  session.header.run = "first";
  session.header.meta = {{"task", "statistics"}, {"level", "L1"}, {"framework", "pytorch"}, {"dump_path", dump}};
  sender.send(session);
  record tensor(record_kind::tensor);
  tensor.header.run = "first";
  tensor.header.rank = 0;
  tensor.header.entry = "Functional.relu.0.forward";
  tensor.header.slot = "output.0";
  tensor.header.type = dtype::float32;
  tensor.header.shape = {1};
  tensor.set_payload(std::vector<std::byte>(4));
  sender.send(tensor);
  record handled(record_kind::step_end);  // answered once the records before it were handled
  handled.header.run = "first";
  handled.header.step = 9;
  ASSERT_TRUE(sender.sync(std::move(handled)));

  // Rank 0 again, from a second run: refused at its first record for that rank.
  const auto second = [&](int rank) {
    const std::string second_in = "ipc://" + dir.path() + "/second" + std::to_string(rank) + ".in";
    auto writer = std::make_unique<test::child_process>(
        std::vector<std::string>{test::bin("tprobe-writer"), "--input", second_in}, dir.path(), std::vector<std::string>{},
        true);
    writer->wait_ready();
    test::child_process synth({test::bin("tprobe-synth"), "--output", second_in, "--records", "4", "--rank",
                               std::to_string(rank), "--dump-path", dump},
                              dir.path());
    const auto status = writer->wait_for(60);
    (void)synth.wait();  // when its consumer went away the producer gives up: not ours to check
    return std::make_pair(status, writer->err());
  };
  const auto [status, err] = second(0);
  ASSERT_TRUE(status) << "a second writer into rank 0's folders runs on";
  EXPECT_EQ(*status, 111) << err;
  EXPECT_THAT(err, HasSubstr(fmt::format("tprobe-writer: fatal: unable to lock dump path {} for its rank0 folders: "
                                         "tprobe-writer pid {} is writing them ({}/.tprobe-writer.lock)",
                                         dump, first.pid(), dump)));
  EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err;
  EXPECT_FALSE(std::filesystem::exists(dump + "/step0/rank0/dump.json")) << "the refused writer wrote rank 0";

  // Rank 1 beside it: another rank of the same job, welcome.
  const auto [other_status, other_err] = second(1);
  ASSERT_TRUE(other_status);
  EXPECT_EQ(*other_status, 0) << other_err;
  EXPECT_TRUE(std::filesystem::exists(dump + "/step0/rank1/dump.json"));

  // The lock lasts as long as the first writer: gone with it (the file too), rank 0 free again.
  sender.finish(3, 0);
  EXPECT_EQ(first.wait(), 0) << first.err();
  EXPECT_FALSE(std::filesystem::exists(dump + "/.tprobe-writer.lock"));
  const auto [again_status, again_err] = second(0);
  ASSERT_TRUE(again_status);
  EXPECT_EQ(*again_status, 0) << again_err;
}

// A rerun into the same dump path with fewer steps leaves the earlier run's later steps in place:
// the writer names them in one warning line, so that they are not taken for this run's. Another
// rank's folders are not its business (another pipeline of the same job may write them).
TEST(Pipeline, a_rerun_names_the_step_folders_an_earlier_run_left) {
  test::temp_dir dir;
  const std::string dump = dir / "dump";
  const std::string first = synth_into(dir, dump, 4, 0);
  EXPECT_THAT(first, Not(HasSubstr("earlier run"))) << first;
  const std::string again = synth_into(dir, dump, 4, 0);
  EXPECT_THAT(again, Not(HasSubstr("earlier run"))) << "the same run again overwrote every folder:\n" << again;
  const std::string other_rank = synth_into(dir, dump, 1, 1);
  EXPECT_THAT(other_rank, Not(HasSubstr("earlier run"))) << other_rank;
  const std::string rerun = synth_into(dir, dump, 2, 0);
  EXPECT_THAT(rerun, HasSubstr(fmt::format("tprobe-writer: warning: 2 folders of this run's ranks in the dump path are an "
                                           "earlier run's, not this run's: {0}/step2/rank0, {0}/step3/rank0 (move them away",
                                           dump)))
      << rerun;
  EXPECT_TRUE(std::filesystem::exists(dump + "/step3/rank0/dump.json"));  // named, not removed
}

// The tap is lossy on purpose; what it could not take is counted in the writer's summary line, as
// in every other stage's.
TEST(Pipeline, the_writers_summary_counts_its_tap_drops) {
  test::temp_dir dir;
  const std::string in = "ipc://" + dir.path() + "/writer.in", tap = "ipc://" + dir.path() + "/writer.tap";
  test::child_process writer({test::bin("tprobe-writer"), "--input", in, "--tap", tap}, dir.path(), {}, true);
  writer.wait_ready();
  zmq::context_t ctx;
  tap_subscriber subscriber(ctx, tap);
  constexpr int records = 20000;
  test::child_process synth({test::bin("tprobe-synth"), "--output", in, "--records", std::to_string(records), "--steps",
                             "2", "--sizes", "4", "--no-entry-records", "--dump-path", dir / "dump"},
                            dir.path());
  // One record proves the subscription reached the writer; then this subscriber reads no more, so
  // its queues fill (a few thousand headers) and the writer must drop the rest of the stream.
  ASSERT_TRUE(subscriber.receive(60000)) << "nothing on the writer's tap";
  EXPECT_EQ(synth.wait(), 0) << synth.err();
  ASSERT_EQ(writer.wait(), 0) << writer.err();
  const uint64_t dropped = test::number_after(writer.err(), ", tap dropped ");
  EXPECT_GT(dropped, 0u) << writer.err();
  EXPECT_LT(dropped, static_cast<uint64_t>(records) + 3) << writer.err();  // + session, 2 step_end
  EXPECT_EQ(test::number_after(writer.err(), "tprobe-writer: "), static_cast<uint64_t>(records) + 3) << writer.err();
}
