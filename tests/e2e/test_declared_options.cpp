// Options declared once: a stage's option table drives its parser, --describe and --help; the
// launcher checks a manifest's values and the table's own defaults against it before anything
// starts, and the binary refuses the same values when run by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <map>

#include <nlohmann/json.hpp>

#include "test_support.h"

using namespace tprobe;
using ::testing::HasSubstr;

namespace {

std::string write_manifest(const test::temp_dir &dir, const std::string &writer_options,
                           const std::string &extra_stage = "") {
  const std::string path = dir / "manifest.json";
  test::write_file(path, R"({"stages": [{"name": "stats", "stage": "stats", "inputs": ["capture"]},
    {"name": "writer", "stage": "writer", "inputs": ["stats"], "options": )" + writer_options + "}" + extra_stage +
                             "]}");
  return path;
}

}  // namespace

TEST(DeclaredOptions, launcher_refuses_a_negative_flush_interval_before_starting) {
  test::temp_dir dir;
  const auto r = test::run_process({test::bin("tprobe"), "run", write_manifest(dir, R"({"flush-interval": -1})"), "--",
                                    "/bin/sh", "-c", "echo command ran"});
  EXPECT_EQ(r.status, 100);
  EXPECT_THAT(r.err, HasSubstr("option \"flush-interval\" must be in [0.001, 86400], got -1"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("command ran")));
}

TEST(DeclaredOptions, binaries_refuse_what_their_table_refuses) {
  for (const auto &[argv, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{test::bin("tprobe-writer"), "--input", "ipc:///tmp/x", "--flush-interval", "-1"},
            "tprobe-writer: fatal: --flush-interval must be in [0.001, 86400], got -1"},
           {{test::bin("tprobe-writer"), "--input", "ipc:///tmp/x", "--flush-interval", "soon"},
            "tprobe-writer: fatal: --flush-interval must be a number, got \"soon\""},
           {{test::bin("tprobe-overflow"), "--input", "ipc:///tmp/x", "--overflow-nums", "-2"},
            "tprobe-overflow: fatal: --overflow-nums must be in [-1, inf], got -2"},
           {{test::bin("tprobe-tap"), "ipc:///tmp/x", "--count", "-3"}, "tprobe-tap: fatal: --count must be in [0, inf], got -3"},
           {{test::bin("tprobe-tap"), "ipc:///tmp/x", "--connect-timeout", "0"},
            "tprobe-tap: fatal: --connect-timeout must be in [1, 3600000], got 0"}}) {
    const auto r = test::run_process(argv);
    EXPECT_EQ(r.status, 100) << argv.front();
    EXPECT_THAT(r.err, HasSubstr(message));
  }
}

TEST(DeclaredOptions, help_and_describe_come_from_the_same_table) {
  const auto help = test::run_process({test::bin("tprobe-writer"), "--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_THAT(help.out, HasSubstr("--flush-interval"));
  EXPECT_THAT(help.out, HasSubstr("seconds between atomic rewrites of dump.json while records arrive (in [0.001, 86400])"));
  const auto describe = test::run_process({test::bin("tprobe-writer"), "--describe"});
  EXPECT_EQ(describe.status, 0);
  EXPECT_THAT(describe.out, HasSubstr("\"name\": \"flush-interval\""));
}

TEST(DeclaredOptions, launcher_refuses_a_stage_whose_default_is_outside_its_own_range) {
  test::temp_dir dir;
  const std::string stage = dir / "mine.sh";
  test::write_file(stage, "#!/bin/sh\n"
                          "echo '{\"stage\": \"mine\", \"input\": true, \"output\": false, \"options\": "
                          "[{\"name\": \"limit\", \"type\": \"int\", \"default\": \"-5\", \"min\": 0}]}'\n");
  ASSERT_EQ(::chmod(stage.c_str(), 0755), 0);
  const auto r = test::run_process(
      {test::bin("tprobe"), "run",
       write_manifest(dir, "{}", R"(, {"name": "mine", "exec": ")" + stage + R"(", "inputs": ["stats"]})"), "--",
       "/bin/true"});
  EXPECT_EQ(r.status, 100);
  EXPECT_THAT(r.err, HasSubstr("option \"limit\" default must be in [0, inf], got -5"));
}

// Every binary, stage or offline tool, reads its options from its table: whatever --describe
// declares, --help lists with its default (and the binary parses: an option --help shows that the
// parser lacked would fail the bad-value test below).
TEST(DeclaredOptions, every_binary_helps_with_its_whole_table) {
  for (const std::string stage : {"stats", "writer", "overflow", "tap", "compare-live", "nan-live", "null", "fault",
                                  "synth", "keygen", "compare", "gradsim", "gradsim-live", "report", "grad-probe",
                                  "nan-analyze", "free-benchmark", "monitor", "monitor-anomaly"}) {
    const std::string binary = test::bin("tprobe-" + stage);
    const auto describe = test::run_process({binary, "--describe"});
    ASSERT_EQ(describe.status, 0) << stage << describe.err;
    const auto table = nlohmann::json::parse(describe.out);
    EXPECT_EQ(table["stage"], stage);
    const auto help = test::run_process({binary, "--help"});
    ASSERT_EQ(help.status, 0) << stage << help.err;
    for (const auto &o : table["options"]) {
      const std::string name = o["name"], type = o["type"], value = o["default"];
      EXPECT_THAT(help.out, HasSubstr("--" + name)) << stage;
      if (value.empty() || type == "bool") continue;  // a flag shows no value; "" is no default
      EXPECT_THAT(help.out, HasSubstr("=" + value)) << stage << " --" << name;
    }
  }
}

// The mains converted last: a bad value is refused by the parser with exit 100 and one line that
// names the option, before any file is read or socket bound.
TEST(DeclaredOptions, offline_tools_and_sources_refuse_what_their_table_refuses) {
  test::temp_dir dir;
  const std::string out = dir / "out";
  for (const auto &[argv, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{test::bin("tprobe-synth"), "--records", "-1"}, "tprobe-synth: fatal: --records must be in [0, inf], got -1"},
           {{test::bin("tprobe-synth"), "--steps", "0"}, "tprobe-synth: fatal: --steps must be in [1, inf], got 0"},
           {{test::bin("tprobe-synth"), "--rate", "fast"}, "tprobe-synth: fatal: --rate must be a number, got \"fast\""},
           {{test::bin("tprobe-synth"), "--sizes", "4,x"}, "tprobe-synth: fatal: --sizes must be element counts, got \"x\""},
           {{test::bin("tprobe-synth"), "--rank", "-2"}, "tprobe-synth: fatal: --rank must be in [-1, 2147483647], got -2"},
           {{test::bin("tprobe-keygen"), "--bits"}, "tprobe-keygen: fatal: The following argument was not expected: --bits"},
           {{test::bin("tprobe-compare"), "a", "b", "-o", out, "--threads", "-2"},
            "tprobe-compare: fatal: --threads must be in [0, 4096], got -2"},
           {{test::bin("tprobe-compare"), "a", "b", "-o", out, "--match", "loose"},
            "tprobe-compare: fatal: --match must be one of auto, name, got \"loose\""},
           {{test::bin("tprobe-compare"), "a", "b"}, "tprobe-compare: fatal: --output is required"},
           {{test::bin("tprobe-gradsim"), "a", "b", "-o"}, "tprobe-gradsim: fatal: --output: 1 required TEXT missing"},
           {{test::bin("tprobe-gradsim-live"), "--input", "ipc:///tmp/x", "--output-dir"},
            "tprobe-gradsim-live: fatal: --output-dir: 1 required TEXT missing"},
           {{test::bin("tprobe-report"), "r", "--title"}, "tprobe-report: fatal: --title: 1 required TEXT missing"},
           {{test::bin("tprobe-grad-probe"), "--input", "ipc:///tmp/x", "--dump-path"},
            "tprobe-grad-probe: fatal: --dump-path: 1 required TEXT missing"},
           {{test::bin("tprobe-free-benchmark"), "--input", "ipc:///tmp/x", "--dump-path"},
            "tprobe-free-benchmark: fatal: --dump-path: 1 required TEXT missing"},
           {{test::bin("tprobe-monitor"), "--input", "ipc:///tmp/x", "--output-dir"},
            "tprobe-monitor: fatal: --output-dir: 1 required TEXT missing"},
           {{test::bin("tprobe-monitor-anomaly"), "-d", "x", "-k", "0"},
            "tprobe-monitor-anomaly: fatal: --topk must be in [1, inf], got 0"},
           {{test::bin("tprobe-nan-analyze"), "step0", "--config"},
            "tprobe-nan-analyze: fatal: --config: 1 required TEXT missing"}}) {
    const auto r = test::run_process(argv);
    EXPECT_EQ(r.status, 100) << argv.front() << r.err;
    EXPECT_EQ(r.err, message + "\n");
  }
  EXPECT_FALSE(std::filesystem::exists(out));  // refused before compare made its folder
}

// A flag on by default is turned off by --no-<name> as well as by --name=false.
TEST(DeclaredOptions, a_flag_on_by_default_has_its_no_form) {
  for (const std::string off : {"--no-entry-records", "--entry-records=false"}) {
    test::temp_dir dir;
    const std::string file = dir / "records.bin";
    const auto r = test::run_process({test::bin("tprobe-synth"), "--records", "4", off, "--output", file});
    ASSERT_EQ(r.status, 0) << r.err;
    EXPECT_THAT(r.err, HasSubstr(" 0 entries")) << off;
  }
  test::temp_dir dir;
  const auto on = test::run_process({test::bin("tprobe-synth"), "--records", "4", "--output", dir / "records.bin"});
  ASSERT_EQ(on.status, 0) << on.err;
  EXPECT_THAT(on.err, HasSubstr(" 2 entries"));
}

// Choices (an enum) and required options: the binary refuses a value off the list with exit 100 and
// one line, the launcher refuses the same value in a manifest before anything starts, with the
// same check (stage_option_check).
TEST(DeclaredOptions, choices_and_required_are_refused_by_binary_and_launcher) {
  for (const auto &[argv, message] : std::vector<std::pair<std::vector<std::string>, std::string>>{
           {{test::bin("tprobe-fault"), "--input", "ipc:///tmp/x", "--corrupt-part", "middle"},
            "tprobe-fault: fatal: --corrupt-part must be one of header, payload, got \"middle\""},
           {{test::bin("tprobe-synth"), "--pattern", "nans"},
            "tprobe-synth: fatal: --pattern must be one of normal, nan, inf, neginf, mixed, got \"nans\""},
           {{test::bin("tprobe-repro"), "dump.json"}, "tprobe-repro: fatal: --api is required"},
           {{test::bin("tprobe-compare-live"), "--input", "ipc:///tmp/x", "--max-buffer-mib", "-1"},
            "tprobe-compare-live: fatal: --max-buffer-mib must be in [0, inf], got -1"}}) {
    const auto r = test::run_process(argv);
    EXPECT_EQ(r.status, 100) << argv.front() << r.err;
    EXPECT_EQ(r.err, message + "\n");
  }
  test::temp_dir dir;
  const std::string path = dir / "manifest.json";
  test::write_file(path, R"({"stages": [{"name": "fault", "stage": "fault", "inputs": ["capture"],
    "options": {"corrupt-part": "middle"}}, {"name": "writer", "stage": "writer", "inputs": ["fault"]}]})");
  const auto r = test::run_process({test::bin("tprobe"), "run", path, "--", "/bin/sh", "-c", "echo command ran"});
  EXPECT_EQ(r.status, 100);
  EXPECT_THAT(r.err, HasSubstr(": stage \"fault\": option \"corrupt-part\" must be one of header, payload, got \"middle\""));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("command ran")));
  const auto describe = test::run_process({test::bin("tprobe-fault"), "--describe"});
  ASSERT_EQ(describe.status, 0);
  bool described = false;
  const auto table = nlohmann::json::parse(describe.out);
  for (const auto &o : table["options"]) {
    if (o["name"] != "corrupt-part") continue;
    EXPECT_EQ(o["choices"], nlohmann::json::parse(R"(["header", "payload"])"));
    described = true;
  }
  EXPECT_TRUE(described);
}

// tprobe run describes its own command line from the table its parser is built from.
TEST(DeclaredOptions, tprobe_run_describes_its_real_options) {
  const auto r = test::run_process({test::bin("tprobe"), "run", "--describe"});
  ASSERT_EQ(r.status, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["stage"], "run");
  EXPECT_EQ(j["input"], false);
  EXPECT_EQ(j["output"], false);
  std::map<std::string, nlohmann::json> by_name;
  for (const auto &o : j["options"]) by_name[o["name"].get<std::string>()] = o;
  ASSERT_EQ(by_name.size(), 4u) << r.out;
  EXPECT_EQ(by_name["manifest"]["required"], true);
  EXPECT_EQ(by_name["manifest"]["positional"], true);
  EXPECT_EQ(by_name["config"]["type"], "string");
  EXPECT_EQ(by_name["keep-run-dir"]["type"], "bool");
  EXPECT_EQ(by_name["startup-timeout"]["type"], "int");
  EXPECT_EQ(by_name["startup-timeout"]["default"], "60");
  EXPECT_EQ(by_name["startup-timeout"]["min"], 1);
  EXPECT_EQ(by_name["startup-timeout"]["max"], 86400);
  // ... and the parser checks what the table says.
  const auto bad = test::run_process({test::bin("tprobe"), "run", "m.json", "--startup-timeout", "0"});
  EXPECT_EQ(bad.status, 100);
  EXPECT_THAT(bad.err, HasSubstr("tprobe: fatal: --startup-timeout must be in [1, 86400], got 0 (see tprobe run --help)"));
  const auto missing = test::run_process({test::bin("tprobe"), "run"});
  EXPECT_EQ(missing.status, 100);
  EXPECT_THAT(missing.err, HasSubstr("tprobe: fatal: MANIFEST is required (see tprobe run --help)"));
  const auto help = test::run_process({test::bin("tprobe"), "run", "--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_THAT(help.out, HasSubstr("seconds each stage has to report ready (in [1, 86400])"));
}
