// Manifest parsing and validation (launcher/run/manifest.h), in-process: stage descriptions are made
// by hand, so no binary runs except the few /bin/sh scripts of the --describe tests.
#include <sys/stat.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "errors.h"
#include "run/manifest.h"
#include "stats/stats.h"
#include "writer/writer.h"

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using tprobe::manifest;
using tprobe::stage_description;
using tprobe::usage_error;

const std::string PATH = "pipelines/x.json";

// The usage_error message `f` throws ("" when it throws none).
std::string error_of(const std::function<void()> &f) {
  try {
    f();
  } catch (const usage_error &e) {
    return e.what();
  }
  return "";
}

std::string parse_error(const std::string &text) {
  return error_of([&] { tprobe::manifest_parse(json::parse(text), PATH); });
}

// A manifest with the given stages and nothing else.
std::string with_stages(const std::string &stages) { return R"({"stages": [)" + stages + "]}"; }

const std::string STATS = R"({"name": "stats", "stage": "stats", "inputs": ["capture"]})";
const std::string WRITER = R"({"name": "writer", "stage": "writer", "inputs": ["stats"]})";

stage_description describe_as(const std::string &stage, std::vector<tprobe::stage_option_spec> options = {},
                              bool has_input = true, bool has_output = true) {
  stage_description d;
  d.stage = stage;
  d.summary = "test stage " + stage;
  d.has_input = has_input;
  d.has_output = has_output;
  d.options = std::move(options);
  return d;
}

// Every stage gets the description registered for its verb (default: input, output, no options).
tprobe::stage_describer describer(std::map<std::string, stage_description> by_verb = {}) {
  return [by_verb](const tprobe::manifest_stage &s) {
    auto it = by_verb.find(s.verb);
    return it != by_verb.end() ? it->second : describe_as(s.verb);
  };
}

const std::vector<tprobe::stage_option_spec> STATS_OPTIONS{
    {"threads", "int", "1", "worker threads"},
    {"max-abs", "float", "65504", "overflow bound"},
    {"lz4", "bool", "false", "compress payloads"},
    {"format", "string", "npy", "tensor file format"},
    {"only", "list", "", "entries to keep"},
};

std::string check_error(const std::string &text, std::map<std::string, stage_description> by_verb) {
  return error_of([&] {
    manifest m = tprobe::manifest_parse(json::parse(text), PATH);
    tprobe::manifest_check_options(m, describer(std::move(by_verb)));
  });
}

std::vector<std::string> args_of(const json &options) {
  return tprobe::stage_option_args(describe_as("stats", STATS_OPTIONS), options, "ctx");
}

std::string args_error(const json &options) {
  return error_of([&] { args_of(options); });
}

// A scratch directory: the one CMake gives each test, else GoogleTest's.
fs::path scratch_dir(const std::string &name) {
  const char *tmp = std::getenv("TPROBE_TEST_TMP");
  fs::path dir = fs::path(tmp && *tmp ? tmp : testing::TempDir()) / ("test_manifest-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

fs::path write_file(const fs::path &path, const std::string &text, bool executable) {
  std::ofstream(path) << text;
  fs::permissions(path, executable ? fs::perms::owner_all : fs::perms::owner_read | fs::perms::owner_write);
  return path;
}

// ---- structure ----

TEST(ManifestParse, FullManifest) {
  manifest m = tprobe::manifest_parse(json::parse(R"({
    "description": "statistics of every tensor",
    "capture": {"task": "tensor", "level": "L1", "dump_path": "./dump"},
    "stages": [
      {"name": "writer", "stage": "writer", "inputs": ["stats"], "options": {}},
      {"name": "stats", "stage": "stats", "inputs": ["capture"], "options": {"threads": 1}},
      {"name": "mine", "exec": "../bin/my-stage", "inputs": ["stats", "capture"]}
    ]})"),
                                      PATH);
  EXPECT_EQ(m.path, PATH);
  EXPECT_EQ(m.description, "statistics of every tensor");
  EXPECT_EQ(m.capture.task, "tensor");
  EXPECT_EQ(m.capture.level, "L1");
  EXPECT_EQ(m.capture.dump_path, "./dump");
  ASSERT_EQ(m.stages.size(), 3u);
  EXPECT_EQ(m.stages[0].name, "writer");
  EXPECT_EQ(m.stages[0].verb, "writer");
  EXPECT_EQ(m.stages[0].program(), "tprobe-writer");
  EXPECT_EQ(m.stages[1].options, json::parse(R"({"threads": 1})"));
  EXPECT_TRUE(m.stages[0].options.is_object());
  EXPECT_TRUE(m.stages[2].options.is_object());  // absent → {}
  // exec is relative to the manifest's directory, not to the working directory.
  EXPECT_EQ(m.stages[2].exec, "bin/my-stage");
  EXPECT_EQ(m.stages[2].program(), "bin/my-stage");
  EXPECT_EQ(tprobe::manifest_stage_binary(m.stages[2], "/opt/tprobe/bin"), "bin/my-stage");
  EXPECT_EQ(tprobe::manifest_stage_binary(m.stages[1], "/opt/tprobe/bin"), "/opt/tprobe/bin/tprobe-stats");

  EXPECT_EQ(m.capture_readers(), (std::vector<size_t>{1, 2}));
  EXPECT_EQ(m.consumers_of(1), (std::vector<size_t>{0, 2}));
  EXPECT_TRUE(m.consumers_of(0).empty());  // writer is a sink: fine
  // stats comes before both of its readers.
  ASSERT_EQ(m.topological_order.size(), 3u);
  EXPECT_EQ(m.topological_order.front(), 1u);
}

TEST(ManifestParse, MinimalManifest) {
  manifest m = tprobe::manifest_parse(json::parse(with_stages(STATS)), PATH);
  EXPECT_EQ(m.description, "");
  EXPECT_FALSE(m.capture.task);
  EXPECT_FALSE(m.capture.level);
  EXPECT_FALSE(m.capture.dump_path);
  ASSERT_EQ(m.stages.size(), 1u);
  EXPECT_TRUE(m.stages[0].reads_capture());
}

TEST(ManifestParse, AbsoluteExecIsKept) {
  manifest m = tprobe::manifest_parse(
      json::parse(with_stages(R"({"name": "mine", "exec": "/usr/local/bin/mine", "inputs": ["capture"]})")), PATH);
  EXPECT_EQ(m.stages[0].exec, "/usr/local/bin/mine");
}

TEST(ManifestParse, TopologicalOrderPutsProducersFirst) {
  manifest m = tprobe::manifest_parse(json::parse(with_stages(R"(
      {"name": "report", "stage": "report", "inputs": ["stats", "overflow"]},
      {"name": "overflow", "stage": "overflow-filter", "inputs": ["stats"]},
      {"name": "stats", "stage": "stats", "inputs": ["capture"]})")),
                                      PATH);
  auto position = [&](size_t stage) {
    return std::find(m.topological_order.begin(), m.topological_order.end(), stage) - m.topological_order.begin();
  };
  EXPECT_LT(position(2), position(1));
  EXPECT_LT(position(1), position(0));
  EXPECT_LT(position(2), position(0));
}

TEST(ManifestParse, WrongShapesAreUsageErrors) {
  EXPECT_EQ(parse_error("[]"), PATH + ": a manifest is a JSON object, got a list");
  EXPECT_EQ(parse_error("{}"), PATH + ": missing \"stages\"");
  EXPECT_EQ(parse_error(R"({"stages": []})"), PATH + ": \"stages\" must be a non-empty array of stages");
  EXPECT_EQ(parse_error(R"({"stages": {}})"), PATH + ": \"stages\" must be a non-empty array of stages");
  EXPECT_EQ(parse_error(R"({"description": 3, "stages": [)" + STATS + "]}"),
            PATH + ": \"description\" must be a string, got an integer");
  EXPECT_EQ(parse_error(with_stages("3")), PATH + ": stages[0]: must be an object, got an integer");
  EXPECT_EQ(parse_error(R"({"capture": "tensor", "stages": [)" + STATS + "]}"),
            PATH + ": capture: must be an object, got a string");
  EXPECT_EQ(parse_error(R"({"capture": {"task": 1}, "stages": [)" + STATS + "]}"),
            PATH + ": capture: \"task\" must be a non-empty string, got 1");
}

// "tasks": the capture tasks a pipeline can do (manifest.h); the launcher and the capture refuse a
// config asking for another, so the list itself must name tasks that exist and are built.
TEST(ManifestParse, TasksNameBuiltTasksAndIncludeTheCaptureTask) {
  auto with_tasks = [](const std::string &tasks, const std::string &capture = "") {
    return R"({)" + (capture.empty() ? "" : R"("capture": )" + capture + ", ") + R"("tasks": )" + tasks +
           R"(, "stages": [)" + STATS + "]}";
  };
  auto tasks_of = [](const std::string &text) { return tprobe::manifest_parse(json::parse(text), PATH).tasks; };
  EXPECT_EQ(tasks_of(with_tasks(R"(["statistics", "structure"])")), (std::vector<std::string>{"statistics", "structure"}));
  EXPECT_EQ(tasks_of(with_stages(STATS)), std::vector<std::string>{});  // any built task
  EXPECT_EQ(tasks_of(R"({"capture": {"task": "tensor"}, "stages": [)" + STATS + "]}"), std::vector<std::string>{"tensor"});
  EXPECT_EQ(parse_error(with_tasks("[]")), PATH + ": tasks: must be a non-empty array of task names, got a list");
  EXPECT_EQ(parse_error(with_tasks(R"("statistics")")),
            PATH + ": tasks: must be a non-empty array of task names, got a string");
  EXPECT_EQ(parse_error(with_tasks("[1]")), PATH + ": tasks: a task name must be a string, got 1");
  EXPECT_EQ(parse_error(with_tasks(R"(["statistic"])")),
            PATH + ": tasks: unknown task \"statistic\" (msprobe's tasks: tensor, statistics, overflow_check, "
                   "free_benchmark, run_ut, grad_probe, structure, exception_dump, monitor)");
  EXPECT_EQ(parse_error(with_tasks(R"(["exception_dump"])")),
            PATH + ": tasks: task \"exception_dump\" is not built in tprobe yet (built: statistics, tensor, "
                   "overflow_check, grad_probe, free_benchmark, structure, monitor)");
  EXPECT_EQ(parse_error(with_tasks(R"(["tensor", "tensor"])")), PATH + ": tasks: task \"tensor\" is listed twice");
  EXPECT_EQ(parse_error(with_tasks(R"(["statistics"])", R"({"task": "tensor"})")),
            PATH + ": capture: task \"tensor\" is not among its \"tasks\" (statistics)");
  EXPECT_EQ(parse_error(R"({"capture": {"task": "run_ut"}, "stages": [)" + STATS + "]}"),
            PATH + ": capture: task \"run_ut\" is not built in tprobe yet (built: statistics, tensor, overflow_check, "
                   "grad_probe, free_benchmark, structure, monitor)");
}

// The shipped manifests say which tasks they can do: the ones their stages serve.
TEST(ShippedPipelines, SayWhichTasksTheyDo) {
  const char *source = std::getenv("TPROBE_SOURCE_DIR");
  if (!source || !*source) GTEST_SKIP() << "TPROBE_SOURCE_DIR is not set (CMake sets it)";
  const std::string dir = std::string(source) + "/pipelines/";
  const std::map<std::string, std::vector<std::string>> expected{
      {"statistics.json", {"statistics", "tensor", "structure"}},
      {"tensor.json", {"tensor"}},
      {"overflow_check.json", {"overflow_check"}},
      {"grad_probe.json", {"grad_probe"}},
      {"free_benchmark.json", {"free_benchmark"}},
      {"monitor.json", {"monitor"}},
      {"gradsim-live.json", {"grad_probe"}},
      {"compare-live.json", {"tensor"}},
      {"nan-live.json", {"statistics", "tensor"}},
      {"precheck-live.json", {"tensor"}},
  };
  for (const auto &[name, tasks] : expected) EXPECT_EQ(tprobe::manifest_load(dir + name).tasks, tasks) << name;
}

TEST(ManifestParse, UnknownKeysAtEveryLevel) {
  EXPECT_EQ(parse_error(R"({"stage": [], "stages": [)" + STATS + "]}"),
            PATH + ": unknown key \"stage\" (known: description, capture, tasks, runs, stages)");
  EXPECT_EQ(parse_error(R"({"capture": {"task": "tensor", "mode": "x"}, "stages": [)" + STATS + "]}"),
            PATH + ": capture: unknown key \"mode\" (known: task, level, dump_path)");
  EXPECT_EQ(parse_error(with_stages(R"({"name": "stats", "stage": "stats", "input": ["capture"]})")),
            PATH + ": stage \"stats\": unknown key \"input\" (known: name, stage, exec, inputs, options)");
}

TEST(ManifestParse, StageFields) {
  EXPECT_EQ(parse_error(with_stages(R"({"stage": "stats", "inputs": ["capture"]})")),
            PATH + ": stages[0]: missing \"name\"");
  EXPECT_EQ(parse_error(with_stages(R"({"name": 1, "stage": "stats"})")),
            PATH + ": stages[0]: \"name\" must be a string, got an integer");
  EXPECT_EQ(parse_error(with_stages(R"({"name": "Stats", "stage": "stats"})")),
            PATH + ": stages[0]: name \"Stats\" must match [a-z0-9][a-z0-9_-]*");
  EXPECT_EQ(parse_error(with_stages(R"({"name": "_x", "stage": "stats"})")),
            PATH + ": stages[0]: name \"_x\" must match [a-z0-9][a-z0-9_-]*");
  EXPECT_EQ(parse_error(with_stages(R"({"name": "a/b", "stage": "stats"})")),
            PATH + ": stages[0]: name \"a/b\" must match [a-z0-9][a-z0-9_-]*");
  EXPECT_EQ(parse_error(with_stages(R"({"name": "capture", "stage": "stats"})")),
            PATH + ": stage \"capture\": the name \"capture\" is reserved for the command's capture");
  EXPECT_EQ(parse_error(with_stages(R"({"name": "s", "inputs": ["capture"]})")),
            PATH + ": stage \"s\": needs exactly one of \"stage\" (a tprobe stage) or \"exec\" (a binary)");
  EXPECT_EQ(parse_error(with_stages(R"({"name": "s", "stage": "stats", "exec": "/bin/x", "inputs": ["capture"]})")),
            PATH + ": stage \"s\": needs exactly one of \"stage\" (a tprobe stage) or \"exec\" (a binary)");
  EXPECT_EQ(parse_error(with_stages(R"({"name": "s", "stage": "../x", "inputs": ["capture"]})")),
            PATH + ": stage \"s\": stage \"../x\" is not a stage verb ([a-z0-9][a-z0-9-]*)");
  EXPECT_EQ(parse_error(with_stages(R"({"name": "s", "stage": "run", "inputs": ["capture"]})")),
            PATH + ": stage \"s\": \"run\" is the launcher, not a stage");
  EXPECT_EQ(parse_error(with_stages(R"({"name": "s", "exec": "", "inputs": ["capture"]})")),
            PATH + ": stage \"s\": \"exec\" must be a non-empty path");
  EXPECT_EQ(parse_error(with_stages(R"({"name": "s", "stage": "stats", "inputs": "capture"})")),
            PATH + ": stage \"s\": \"inputs\" must be an array of stage names, got a string");
  EXPECT_EQ(parse_error(with_stages(R"({"name": "s", "stage": "stats", "inputs": [1]})")),
            PATH + ": stage \"s\": \"inputs\" must hold stage names (strings), got an integer");
  EXPECT_EQ(parse_error(with_stages(R"({"name": "s", "stage": "stats", "inputs": ["capture"], "options": []})")),
            PATH + ": stage \"s\": \"options\" must be an object, got a list");
}

// ---- graph ----

TEST(ManifestRuns, ParsedInOrderWithArgsAndEnv) {
  const auto m = tprobe::manifest_parse(json::parse(R"({"runs": [
      {"name": "a", "args": ["--dtype", "float32"], "env": {"OMP_NUM_THREADS": "1", "X_2": ""}},
      {"name": "b"}], "stages": [)" + STATS + "]}"), PATH);
  ASSERT_EQ(m.runs.size(), 2u);
  EXPECT_EQ(m.runs[0].name, "a");
  EXPECT_EQ(m.runs[0].args, (std::vector<std::string>{"--dtype", "float32"}));
  ASSERT_EQ(m.runs[0].env.size(), 2u);
  EXPECT_EQ(m.runs[0].env[0], (std::pair<std::string, std::string>{"OMP_NUM_THREADS", "1"}));
  EXPECT_EQ(m.runs[1].name, "b");
  EXPECT_TRUE(m.runs[1].args.empty());
  EXPECT_TRUE(tprobe::manifest_parse(json::parse(with_stages(STATS)), PATH).runs.empty());
}

TEST(ManifestRuns, BadRunsAreNamed) {
  auto runs = [](const std::string &r) { return parse_error(R"({"runs": )" + r + R"(, "stages": [)" + STATS + "]}"); };
  EXPECT_EQ(runs("[]"), PATH + ": \"runs\" must be a non-empty array of runs, got a list");
  EXPECT_EQ(runs("{}"), PATH + ": \"runs\" must be a non-empty array of runs, got an object");
  EXPECT_EQ(runs("[1]"), PATH + ": runs[0]: must be an object, got an integer");
  EXPECT_EQ(runs(R"([{}])"), PATH + ": runs[0]: missing \"name\"");
  EXPECT_EQ(runs(R"([{"name": "A b"}])"), PATH + ": runs[0]: \"name\" must be a string matching [a-z0-9][a-z0-9_-]*, got \"A b\"");
  EXPECT_EQ(runs(R"([{"name": "a"}, {"name": "a"}])"), PATH + ": run \"a\": a run of that name exists already");
  EXPECT_EQ(runs(R"([{"name": "a", "arg": []}])"), PATH + ": run \"a\": unknown key \"arg\" (known: name, args, env)");
  EXPECT_EQ(runs(R"([{"name": "a", "args": "x"}])"), PATH + ": run \"a\": \"args\" must be an array of strings, got a string");
  EXPECT_EQ(runs(R"([{"name": "a", "args": [1]}])"), PATH + ": run \"a\": \"args\" must hold strings, got an integer");
  EXPECT_EQ(runs(R"([{"name": "a", "env": []}])"), PATH + ": run \"a\": \"env\" must be an object, got a list");
  EXPECT_EQ(runs(R"([{"name": "a", "env": {"1X": "v"}}])"), PATH + ": run \"a\": env name \"1X\" must match [A-Za-z_][A-Za-z0-9_]*");
  EXPECT_EQ(runs(R"([{"name": "a", "env": {"X": 1}}])"), PATH + ": run \"a\": env \"X\" must be a string, got an integer");
}

TEST(ManifestGraph, DuplicateNames) {
  EXPECT_EQ(parse_error(with_stages(STATS + "," + WRITER + "," + STATS)),
            PATH + ": stage \"stats\": name used twice (stages[0] and stages[2])");
}

TEST(ManifestGraph, UnknownInputNamesTheKnownOnes) {
  EXPECT_EQ(parse_error(with_stages(STATS + R"(, {"name": "writer", "stage": "writer", "inputs": ["stat"]})")),
            PATH + ": stage \"writer\": input \"stat\" does not match any stage (known: capture, stats)");
}

TEST(ManifestGraph, SelfInputAndRepeatedInput) {
  EXPECT_EQ(parse_error(with_stages(STATS + R"(, {"name": "loop", "stage": "tap", "inputs": ["stats", "loop"]})")),
            PATH + ": stage \"loop\": reads itself (input \"loop\")");
  EXPECT_EQ(parse_error(with_stages(R"({"name": "s", "stage": "stats", "inputs": ["capture", "capture"]})")),
            PATH + ": stage \"s\": input \"capture\" listed twice");
}

TEST(ManifestGraph, CycleIsNamed) {
  std::string two = parse_error(with_stages(STATS + R"(,
      {"name": "a", "stage": "tap", "inputs": ["stats", "b"]},
      {"name": "b", "stage": "tap", "inputs": ["a"]})"));
  EXPECT_NE(two.find(PATH + ": stage \""), std::string::npos) << two;
  EXPECT_TRUE(two.find("inputs form a cycle (data flows a -> b -> a)") != std::string::npos ||
              two.find("inputs form a cycle (data flows b -> a -> b)") != std::string::npos)
      << two;

  std::string three = parse_error(with_stages(R"(
      {"name": "a", "stage": "tap", "inputs": ["c"]},
      {"name": "b", "stage": "tap", "inputs": ["a"]},
      {"name": "c", "stage": "tap", "inputs": ["b"]},
      {"name": "stats", "stage": "stats", "inputs": ["capture", "c"]})"));
  // Data flows c → a → b → c; any rotation names the same cycle.
  EXPECT_TRUE(three.find("a -> b -> c -> a") != std::string::npos ||
              three.find("b -> c -> a -> b") != std::string::npos ||
              three.find("c -> a -> b -> c") != std::string::npos)
      << three;
  EXPECT_EQ(three.find("stats ->"), std::string::npos) << three;  // not part of the cycle
}

TEST(ManifestGraph, SomeStageMustReadCapture) {
  EXPECT_EQ(parse_error(with_stages(R"({"name": "synth", "stage": "synth"}, {"name": "s", "stage": "stats",
                                        "inputs": ["synth"]})")),
            PATH + ": no stage reads \"capture\", so the command's records would go nowhere "
                   "(add \"capture\" to a stage's \"inputs\")");
}

TEST(ManifestGraph, SinksAndSourcesAreFine) {
  EXPECT_EQ(parse_error(with_stages(STATS + "," + WRITER +
                                    R"(, {"name": "null", "stage": "null", "inputs": ["stats"]},
                                         {"name": "synth", "stage": "synth"},
                                         {"name": "w2", "stage": "writer", "inputs": ["synth", "capture"]})")),
            "");
}

// ---- loading ----

TEST(ManifestLoad, BareNamesAreFoundBesideTheBinaries) {
  fs::path dir = scratch_dir("locate");
  fs::create_directories(dir / "bin");
  fs::create_directories(dir / "pipelines");
  write_file(dir / "pipelines" / "statistics.json", "{}", false);
  const std::string bin = (dir / "bin").string(), shipped = (dir / "pipelines" / "statistics.json").string();
  unsetenv("TPROBE_PIPELINES");
  EXPECT_EQ(tprobe::manifest_locate("statistics.json", bin), shipped);
  EXPECT_EQ(tprobe::manifest_locate("statistics", bin), shipped);
  // A path is taken as it is; an unknown name is left for manifest_load to name.
  EXPECT_EQ(tprobe::manifest_locate("./statistics.json", bin), "./statistics.json");
  EXPECT_EQ(tprobe::manifest_locate("nosuch", bin), "nosuch");
  // $TPROBE_PIPELINES comes first.
  fs::create_directories(dir / "mine");
  write_file(dir / "mine" / "statistics.json", "{}", false);
  setenv("TPROBE_PIPELINES", (dir / "mine").c_str(), 1);
  EXPECT_EQ(tprobe::manifest_locate("statistics", bin), (dir / "mine" / "statistics.json").string());
  unsetenv("TPROBE_PIPELINES");
}

TEST(ManifestLoad, MissingFileAndBadJsonNameTheFile) {
  fs::path dir = scratch_dir("load");
  std::string missing = (dir / "missing.json").string();
  EXPECT_EQ(error_of([&] { tprobe::manifest_load(missing); }),
            "unable to open " + missing + ": No such file or directory");

  std::string broken = write_file(dir / "broken.json", "{\"stages\": [", false).string();
  std::string message = error_of([&] { tprobe::manifest_load(broken); });
  EXPECT_EQ(message.rfind(broken + ": not valid JSON: ", 0), 0u) << message;

  std::string unknown = write_file(dir / "unknown.json", R"({"stagez": []})", false).string();
  EXPECT_EQ(error_of([&] { tprobe::manifest_load(unknown); }),
            unknown + ": unknown key \"stagez\" (known: description, capture, tasks, runs, stages)");
}

// ---- options against the stage's description ----

TEST(ManifestOptions, TypedOptionsBecomeArguments) {
  EXPECT_EQ(args_of(json::parse(R"({"threads": 4, "max-abs": 1.5, "lz4": true, "format": "npy",
                                    "only": ["Functional.linear", "Module.conv1"]})")),
            (std::vector<std::string>{"--threads", "4", "--max-abs", "1.5", "--lz4=true", "--format", "npy",
                                      "--only", "Functional.linear", "--only", "Module.conv1"}));
  EXPECT_EQ(args_of(json::parse(R"({"lz4": false, "only": "Functional.linear"})")),
            (std::vector<std::string>{"--lz4=false", "--only", "Functional.linear"}));
  EXPECT_TRUE(args_of(json::parse(R"({"only": []})")).empty());
  EXPECT_TRUE(args_of(json::object()).empty());
}

TEST(ManifestOptions, NumbersKeepTheirValue) {
  // A float option takes an integer too; a float is printed so that it reads back the same.
  EXPECT_EQ(args_of(json::parse(R"({"max-abs": 65504})")), (std::vector<std::string>{"--max-abs", "65504"}));
  EXPECT_EQ(args_of(json::parse(R"({"max-abs": 0.1})")), (std::vector<std::string>{"--max-abs", "0.1"}));
  auto tiny = args_of(json::parse(R"({"max-abs": 1e-300})"));
  ASSERT_EQ(tiny.size(), 2u);
  EXPECT_EQ(std::stod(tiny[1]), 1e-300);
  // An integer the binary cannot hold is refused here, as the binary would (stage_option_check).
  EXPECT_EQ(args_error(json::parse(R"({"threads": 18446744073709551615})")),
            "ctx: option \"threads\" must be in [-9223372036854775808, 9223372036854775807], got 18446744073709551615");
}

TEST(ManifestOptions, ValuesThatLookLikeOptionsUseEquals) {
  EXPECT_EQ(args_of(json::parse(R"({"threads": -1})")), (std::vector<std::string>{"--threads=-1"}));
  EXPECT_EQ(args_of(json::parse(R"({"max-abs": -2.5})")), (std::vector<std::string>{"--max-abs=-2.5"}));
  EXPECT_EQ(args_of(json::parse(R"({"format": "--x"})")), (std::vector<std::string>{"--format=--x"}));
  EXPECT_EQ(args_of(json::parse(R"({"format": ""})")), (std::vector<std::string>{"--format", ""}));
  EXPECT_EQ(args_of(json::parse(R"({"only": ["a", "-b"]})")), (std::vector<std::string>{"--only", "a", "--only=-b"}));
}

TEST(ManifestOptions, WrongTypesAreNamed) {
  EXPECT_EQ(args_error(json::parse(R"({"threads": "4"})")), "ctx: option \"threads\" must be an integer, got \"4\"");
  EXPECT_EQ(args_error(json::parse(R"({"threads": 4.0})")), "ctx: option \"threads\" must be an integer, got \"4.0\"");
  EXPECT_EQ(args_error(json::parse(R"({"threads": true})")), "ctx: option \"threads\" must be an integer, got true");
  EXPECT_EQ(args_error(json::parse(R"({"max-abs": "1"})")), "ctx: option \"max-abs\" must be a number, got \"1\"");
  EXPECT_EQ(args_error(json::parse(R"({"lz4": 1})")), "ctx: option \"lz4\" must be true or false, got 1");
  EXPECT_EQ(args_error(json::parse(R"({"lz4": "true"})")), "ctx: option \"lz4\" must be true or false, got \"true\"");
  EXPECT_EQ(args_error(json::parse(R"({"format": 3})")), "ctx: option \"format\" must be a string, got 3");
  EXPECT_EQ(args_error(json::parse(R"({"format": null})")), "ctx: option \"format\" must be a string, got null");
  EXPECT_EQ(args_error(json::parse(R"({"only": ["a", 1]})")),
            "ctx: option \"only\" must be an array of strings or a string, got [\"a\",1]");
  EXPECT_EQ(args_error(json::parse(R"({"only": {"a": "b"}})")),
            "ctx: option \"only\" must be an array of strings or a string, got {\"a\":\"b\"}");
}

TEST(ManifestOptions, UnknownOptionListsTheTable) {
  EXPECT_EQ(args_error(json::parse(R"({"thread": 4})")),
            "ctx: unknown option \"thread\" (tprobe-stats options: threads, max-abs, lz4, format, only)");
  EXPECT_EQ(error_of([] { tprobe::stage_option_args(describe_as("writer"), json::parse(R"({"x": 1})"), "ctx"); }),
            "ctx: unknown option \"x\" (tprobe-writer has no options)");
}

TEST(ManifestOptions, CheckFillsOptionArgsAndDescriptions) {
  manifest m = tprobe::manifest_parse(json::parse(with_stages(
                                          R"({"name": "stats", "stage": "stats", "inputs": ["capture"],
                                              "options": {"threads": 2, "lz4": true}},)" +
                                          WRITER)),
                                      PATH);
  tprobe::manifest_check_options(m, describer({{"stats", describe_as("stats", STATS_OPTIONS)}}));
  EXPECT_EQ(m.stages[0].description.summary, "test stage stats");
  EXPECT_EQ(m.stages[0].option_args, (std::vector<std::string>{"--threads", "2", "--lz4=true"}));
  EXPECT_TRUE(m.stages[1].option_args.empty());
}

TEST(ManifestOptions, CheckErrorsNameFileAndStage) {
  EXPECT_EQ(check_error(with_stages(R"({"name": "stats", "stage": "stats", "inputs": ["capture"],
                                        "options": {"threads": "many"}})"),
                        {{"stats", describe_as("stats", STATS_OPTIONS)}}),
            PATH + ": stage \"stats\": option \"threads\" must be an integer, got \"many\"");
  EXPECT_EQ(check_error(with_stages(STATS + R"(, {"name": "w", "stage": "writer", "inputs": ["stats"],
                                                  "options": {"every": 3}})"),
                        {}),
            PATH + ": stage \"w\": unknown option \"every\" (tprobe-writer has no options)");
}

TEST(ManifestOptions, InputsMustMatchTheDescription) {
  // A stage with an input needs inputs; a source takes none; a sink cannot be read.
  EXPECT_EQ(check_error(with_stages(STATS + R"(, {"name": "w", "stage": "writer"})"), {}),
            PATH + ": stage \"w\": \"inputs\" is empty, but tprobe-writer reads an input");
  EXPECT_EQ(check_error(with_stages(STATS + R"(, {"name": "synth", "stage": "synth", "inputs": ["stats"]})"),
                        {{"synth", describe_as("synth", {}, false, true)}}),
            PATH + ": stage \"synth\": tprobe-synth takes no input, but \"inputs\" lists stats");
  EXPECT_EQ(check_error(with_stages(R"({"name": "stats", "stage": "null", "inputs": ["capture"]},
                                       {"name": "w", "stage": "writer", "inputs": ["stats"]})"),
                        {{"null", describe_as("null", {}, true, false)}}),
            PATH + ": stage \"stats\": tprobe-null has no output, but stage \"w\" reads it");
  EXPECT_EQ(check_error(with_stages(STATS + R"(, {"name": "synth", "stage": "synth"})"),
                        {{"synth", describe_as("synth", {}, false, true)}}),
            "");
}

// ---- argv of a stage ----

TEST(ManifestArgv, EndpointsProducersAndOptions) {
  manifest m = tprobe::manifest_parse(json::parse(with_stages(R"(
      {"name": "stats", "stage": "stats", "inputs": ["capture"], "options": {"threads": 2}},
      {"name": "writer", "stage": "writer", "inputs": ["stats"]},
      {"name": "report", "stage": "report", "inputs": ["stats", "writer"]},
      {"name": "sink", "exec": "/opt/x/my-sink", "inputs": ["capture", "report"]},
      {"name": "synth", "stage": "synth"})")),
                                      PATH);
  tprobe::manifest_check_options(m, describer({{"stats", describe_as("stats", STATS_OPTIONS)},
                                               {"synth", describe_as("synth", {}, false, true)},
                                               {"", describe_as("my-sink", {}, true, false)}}));
  const std::string run = "/tmp/tprobe-run.abc";
  const std::string bin = "/opt/tprobe/bin";
  EXPECT_EQ(tprobe::manifest_stage_argv(m, 0, run, bin),
            (std::vector<std::string>{"/opt/tprobe/bin/tprobe-stats", "--input", "ipc:///tmp/tprobe-run.abc/stats.in",
                                      "--producers", "0", "--output", "ipc:///tmp/tprobe-run.abc/writer.in",
                                      "--output", "ipc:///tmp/tprobe-run.abc/report.in", "--tap",
                                      "ipc:///tmp/tprobe-run.abc/stats.tap", "--ready-fd", "3", "--threads", "2"}));
  EXPECT_EQ(tprobe::manifest_stage_argv(m, 1, run, bin),
            (std::vector<std::string>{"/opt/tprobe/bin/tprobe-writer", "--input", "ipc:///tmp/tprobe-run.abc/writer.in",
                                      "--producers", "1", "--output", "ipc:///tmp/tprobe-run.abc/report.in", "--tap",
                                      "ipc:///tmp/tprobe-run.abc/writer.tap", "--ready-fd", "3"}));
  // Two stage inputs: two producers.
  EXPECT_EQ(tprobe::manifest_stage_argv(m, 2, run, bin),
            (std::vector<std::string>{"/opt/tprobe/bin/tprobe-report", "--input", "ipc:///tmp/tprobe-run.abc/report.in",
                                      "--producers", "2", "--output", "ipc:///tmp/tprobe-run.abc/sink.in", "--tap",
                                      "ipc:///tmp/tprobe-run.abc/report.tap", "--ready-fd", "3"}));
  // Reads capture (and a stage): waits for `final`, so 0; a sink has a tap too (what it consumes).
  EXPECT_EQ(tprobe::manifest_stage_argv(m, 3, run, bin),
            (std::vector<std::string>{"/opt/x/my-sink", "--input", "ipc:///tmp/tprobe-run.abc/sink.in", "--producers",
                                      "0", "--tap", "ipc:///tmp/tprobe-run.abc/sink.tap", "--ready-fd", "3"}));
  // A source: no input, no consumer.
  EXPECT_EQ(tprobe::manifest_stage_argv(m, 4, run, bin),
            (std::vector<std::string>{"/opt/tprobe/bin/tprobe-synth", "--tap", "ipc:///tmp/tprobe-run.abc/synth.tap",
                                      "--ready-fd", "3"}));
}

TEST(ManifestOptions, RangesFromTheDescribeTableAreChecked) {
  // The writer's own table, through its --describe JSON, as the launcher sees it.
  const stage_description writer =
      tprobe::stage_description_parse(tprobe::stage_describe_json(tprobe::writer_stage_description()), "tprobe-writer");
  const std::string message =
      error_of([&] { tprobe::stage_option_args(writer, json::parse(R"({"flush-interval": -1})"), "ctx"); });
  EXPECT_EQ(message, "ctx: option \"flush-interval\" must be in [0.001, 86400], got -1");
  EXPECT_EQ(tprobe::stage_option_args(writer, json::parse(R"({"flush-interval": 0.5})"), "ctx"),
            (std::vector<std::string>{"--flush-interval", "0.5"}));
}

TEST(ManifestOptions, CommonOptionsAreInEveryShippedTable) {
  // docs/stages/common-options.md's example: {"hwm": 100}.
  const stage_description stats =
      tprobe::stage_description_parse(tprobe::stage_describe_json(tprobe::stats_stage_description()), "tprobe-stats");
  EXPECT_EQ(tprobe::stage_option_args(stats, json::parse(R"({"hwm": 100, "tap-payload": true})"), "ctx"),
            (std::vector<std::string>{"--hwm", "100", "--tap-payload=true"}));
  EXPECT_NE(error_of([&] { tprobe::stage_option_args(stats, json::parse(R"({"hwm": 0})"), "ctx"); }).find("must be in"),
            std::string::npos);
}

// Choices and required, declared in a stage's --describe, are checked by the same function the
// binary uses (stage_option_check): a bad choice or a missing required option stops the manifest.
TEST(ManifestOptions, ChoicesAndRequiredFromTheDescribeTableAreChecked) {
  const stage_description d = tprobe::stage_description_parse(
      R"({"stage": "mine", "options": [
            {"name": "match", "type": "string", "default": "auto", "choices": ["auto", "name"]},
            {"name": "api", "type": "string", "required": true}]})",
      "tprobe-mine");
  ASSERT_EQ(d.options.size(), 2u);
  EXPECT_EQ(d.options[0].choices, (std::vector<std::string>{"auto", "name"}));
  EXPECT_FALSE(d.options[0].required);
  EXPECT_TRUE(d.options[1].required);
  EXPECT_EQ(tprobe::stage_option_args(d, json::parse(R"({"match": "name", "api": "a.0"})"), "ctx"),
            (std::vector<std::string>{"--match", "name", "--api", "a.0"}));
  EXPECT_EQ(error_of([&] { tprobe::stage_option_args(d, json::parse(R"({"match": "fuzzy", "api": "a.0"})"), "ctx"); }),
            "ctx: option \"match\" must be one of auto, name, got \"fuzzy\"");
  EXPECT_EQ(error_of([&] { tprobe::stage_option_args(d, json::parse(R"({"match": "name"})"), "ctx"); }),
            "ctx: option \"api\" is required");
  // Through manifest_check_options: the file and the stage are named, nothing has started.
  EXPECT_EQ(check_error(with_stages(STATS + R"(, {"name": "m", "exec": "/opt/mine", "inputs": ["stats"],
                                                  "options": {"match": "loose", "api": "x"}})"),
                        {{"", d}}),
            PATH + ": stage \"m\": option \"match\" must be one of auto, name, got \"loose\"");
  // A table whose default is not among its own choices is refused as it is described.
  EXPECT_EQ(error_of([] {
              tprobe::stage_description_parse(
                  R"({"stage": "x", "options": [{"name": "m", "type": "string", "default": "a", "choices": ["b"]}]})",
                  "tprobe-x");
            }),
            "tprobe-x --describe: option \"m\" default must be one of b, got \"a\"");
  EXPECT_EQ(error_of([] {
              tprobe::stage_description_parse(R"({"stage": "x", "options": [{"name": "m", "type": "string", "choices": "b"}]})",
                                              "tprobe-x");
            }),
            "tprobe-x --describe: options[0]: \"choices\" must be an array of strings");
}

// ---- --describe ----

TEST(StageDescription, ParsesTheDescribeJson) {
  stage_description d = tprobe::stage_description_parse(
      R"({"stage": "stats", "summary": "statistics", "input": true, "output": false, "future": 1,
          "options": [{"name": "threads", "type": "int", "default": "1", "doc": "threads"},
                      {"name": "only", "type": "list"}]})",
      "tprobe-stats");
  EXPECT_EQ(d.stage, "stats");
  EXPECT_EQ(d.summary, "statistics");
  EXPECT_TRUE(d.has_input);
  EXPECT_FALSE(d.has_output);
  ASSERT_EQ(d.options.size(), 2u);
  EXPECT_EQ(d.options[0].name, "threads");
  EXPECT_EQ(d.options[0].type, "int");
  EXPECT_EQ(d.options[0].default_value, "1");
  EXPECT_EQ(d.options[1].type, "list");
  EXPECT_EQ(d.options[1].default_value, "");

  stage_description minimal = tprobe::stage_description_parse(R"({"stage": "null"})", "tprobe-null");
  EXPECT_TRUE(minimal.has_input);
  EXPECT_TRUE(minimal.has_output);
  EXPECT_TRUE(minimal.options.empty());
}

TEST(StageDescription, RejectsWhatIsNotADescription) {
  auto parse = [](const std::string &text) {
    return error_of([&] { tprobe::stage_description_parse(text, "tprobe-x"); });
  };
  EXPECT_EQ(parse("usage: tprobe-x").rfind("tprobe-x --describe did not print JSON: ", 0), 0u);
  EXPECT_EQ(parse("[]"), "tprobe-x --describe printed a list, not an object");
  EXPECT_EQ(parse("{}"), "tprobe-x --describe: missing \"stage\"");
  EXPECT_EQ(parse(R"({"stage": "x", "input": "yes"})"), "tprobe-x --describe: \"input\" must be true or false");
  EXPECT_EQ(parse(R"({"stage": "x", "options": [{"name": "n"}]})"),
            "tprobe-x --describe: options[0]: missing \"type\"");
  EXPECT_EQ(parse(R"({"stage": "x", "options": [{"name": "n", "type": "double"}]})"),
            "tprobe-x --describe: option \"n\" has unknown type \"double\"");
}

TEST(StageDescription, DescribeBinary) {
  fs::path dir = scratch_dir("describe");
  std::string missing = (dir / "tprobe-missing").string();
  EXPECT_EQ(error_of([&] { tprobe::stage_describe_binary(missing, "stage \"m\""); }),
            "stage \"m\": unable to execute " + missing + ": No such file or directory");
  std::string plain = write_file(dir / "plain", "#!/bin/sh\n", false).string();
  EXPECT_EQ(error_of([&] { tprobe::stage_describe_binary(plain, "stage \"p\""); }),
            "stage \"p\": unable to execute " + plain + ": Permission denied");

  std::string good = write_file(dir / "good",
                                "#!/bin/sh\n[ \"$1\" = --describe ] || exit 9\n"
                                "echo '{\"stage\": \"good\", \"summary\": \"ok\", \"input\": false}'\n",
                                true)
                         .string();
  stage_description d = tprobe::stage_describe_binary(good, "stage \"g\"");
  EXPECT_EQ(d.stage, "good");
  EXPECT_FALSE(d.has_input);

  std::string failing = write_file(dir / "failing", "#!/bin/sh\nexit 3\n", true).string();
  EXPECT_EQ(error_of([&] { tprobe::stage_describe_binary(failing, "stage \"f\""); }),
            "stage \"f\": " + failing + " --describe exited with status 3");
  std::string chatty = write_file(dir / "chatty", "#!/bin/sh\necho hello\n", true).string();
  EXPECT_EQ(error_of([&] { tprobe::stage_describe_binary(chatty, "stage \"c\""); })
                .rfind("stage \"c\": " + chatty + " --describe did not print JSON: ", 0),
            0u);

  // The production describer runs tprobe-<verb> from the bin dir.
  write_file(dir / "tprobe-good", "#!/bin/sh\necho '{\"stage\": \"good\"}'\n", true);
  manifest m = tprobe::manifest_parse(json::parse(with_stages(R"({"name": "g", "stage": "good", "inputs": ["capture"]},
                                                                 {"name": "h", "stage": "nope", "inputs": ["g"]})")),
                                      PATH);
  EXPECT_EQ(error_of([&] { tprobe::manifest_check_options(m, tprobe::manifest_binary_describer(dir.string())); }),
            "stage \"h\": unable to execute " + (dir / "tprobe-nope").string() + ": No such file or directory");
}

// ---- shipped manifests ----

TEST(ShippedPipelines, ParseAndCheck) {
  const char *source = std::getenv("TPROBE_SOURCE_DIR");
  if (!source || !*source) GTEST_SKIP() << "TPROBE_SOURCE_DIR is not set (CMake sets it)";
  size_t count = 0;
  for (const auto &entry : fs::directory_iterator(fs::path(source) / "pipelines")) {
    if (entry.path().extension() != ".json") continue;
    SCOPED_TRACE(entry.path().string());
    manifest m = tprobe::manifest_load(entry.path().string());
    EXPECT_FALSE(m.description.empty());
    // Every stage is a shipped verb (no exec paths in shipped manifests); descriptions made by hand.
    for (const auto &s : m.stages) EXPECT_FALSE(s.verb.empty());
    EXPECT_NO_THROW(tprobe::manifest_check_options(m, describer()));
    ++count;
  }
  EXPECT_GE(count, 2u);
}

}  // namespace
