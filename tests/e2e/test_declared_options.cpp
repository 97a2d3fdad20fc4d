// Options declared once: a stage's option table drives its parser, --describe and --help; the
// launcher checks a manifest's values and the table's own defaults against it before anything
// starts, and the binary refuses the same values when run by hand.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

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

TEST(declared_options, launcher_refuses_a_negative_flush_interval_before_starting) {
  test::temp_dir dir;
  const auto r = test::run_process({test::bin("tprobe"), "run", write_manifest(dir, R"({"flush-interval": -1})"), "--",
                                    "/bin/sh", "-c", "echo command ran"});
  EXPECT_EQ(r.status, 100);
  EXPECT_THAT(r.err, HasSubstr("option \"flush-interval\" must be in [0.001, 86400.0], got -1"));
  EXPECT_THAT(r.out, ::testing::Not(HasSubstr("command ran")));
}

TEST(declared_options, binaries_refuse_what_their_table_refuses) {
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

TEST(declared_options, help_and_describe_come_from_the_same_table) {
  const auto help = test::run_process({test::bin("tprobe-writer"), "--help"});
  EXPECT_EQ(help.status, 0);
  EXPECT_THAT(help.out, HasSubstr("--flush-interval"));
  EXPECT_THAT(help.out, HasSubstr("seconds between atomic rewrites of dump.json while records arrive (in [0.001, 86400])"));
  const auto describe = test::run_process({test::bin("tprobe-writer"), "--describe"});
  EXPECT_EQ(describe.status, 0);
  EXPECT_THAT(describe.out, HasSubstr("\"name\": \"flush-interval\""));
}

TEST(declared_options, launcher_refuses_a_stage_whose_default_is_outside_its_own_range) {
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
  EXPECT_THAT(r.err, HasSubstr("option \"limit\" has default \"-5\", outside its own range [0.0, inf]"));
}
