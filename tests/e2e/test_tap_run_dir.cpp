// `tprobe tap RUN_DIR`: the taps of a running pipeline are found from its run directory (what
// `tprobe run` prints when ready), every stage's, the writer's included; --stage picks one while
// the run goes on, --list names them, and an ambiguous or unknown choice is a usage error.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "test_support.h"

using namespace tprobe;
using ::testing::HasSubstr;

namespace {

std::string write_config(const test::temp_dir &dir) {
  const std::string path = dir / "config.json";
  test::write_file(path, R"({"task": "statistics", "dump_path": ")" + dir.path() + R"(/dump", "level": "L1"})");
  return path;
}

// Runs `script` (sh) as the command of pipelines/testing/stats-writer.json (two stages, so two
// taps); `$TAP` is `tprobe tap`.
test::process_result run_with(const test::temp_dir &dir, const std::string &script) {
  return test::run_process({test::bin("tprobe"), "run", test::source_dir() + "/pipelines/testing/stats-writer.json", "--config",
                            write_config(dir), "--", "/bin/sh", "-c", script},
                           {"TAP=" + test::bin("tprobe") + " tap", "PRODUCER=" + test::bin("tprobe-example-producer"),
                            "OUT=" + dir.path()});
}

}  // namespace

TEST(tap_run_dir, lists_every_stage_tap_the_writer_included) {
  test::temp_dir dir;
  const auto r = run_with(dir, "$TAP \"$TPROBE_RUN_DIR\" --list");
  ASSERT_EQ(r.status, 0) << r.err;
  // The run directory's sockets, as the launcher's ready line names them.
  const size_t at = r.err.find("tprobe: ready; run dir ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string run_dir = r.err.substr(at + 23, r.err.find(';', at + 23) - at - 23);
  EXPECT_EQ(r.out, "stats ipc://" + run_dir + "/stats.tap\nwriter ipc://" + run_dir + "/writer.tap\n");
}

TEST(tap_run_dir, several_taps_need_a_stage_and_an_unknown_stage_is_named) {
  test::temp_dir dir;
  const auto r = run_with(dir,
                          "$TAP \"$TPROBE_RUN_DIR\"; echo \"no stage: $?\"; "
                          "$TAP \"$TPROBE_RUN_DIR\" --stage nosuch; echo \"unknown: $?\"");
  ASSERT_EQ(r.status, 0) << r.err;
  EXPECT_THAT(r.out, HasSubstr("no stage: 100"));
  EXPECT_THAT(r.out, HasSubstr("unknown: 100"));
  EXPECT_THAT(r.err, HasSubstr("has 2 taps: choose one with --stage (stats, writer)"));
  EXPECT_THAT(r.err, HasSubstr("has no tap of stage \"nosuch\" (taps: stats, writer)"));
}

TEST(tap_run_dir, watches_a_stage_while_the_run_goes_on) {
  test::temp_dir dir;
  // The tap connects first (tprobe tap returns from its connect only once connected), then the
  // producer streams until the tap has seen three tensors of the writer, which consumes them.
  const auto r = run_with(dir,
                          "$TAP \"$TPROBE_RUN_DIR\" --stage writer --count 3 --filter . > \"$OUT/tap.txt\" & T=$!; "
                          "$PRODUCER --steps 1000000 --step-ms 1 & P=$!; wait $T; S=$?; kill $P; wait $P; exit $S");
  EXPECT_EQ(r.status, 0) << r.err;
  const std::string lines = test::read_file(dir / "tap.txt");
  EXPECT_EQ(std::count(lines.begin(), lines.end(), '\n'), 3) << lines;
  EXPECT_THAT(lines, HasSubstr(" max="));
}

TEST(tap_run_dir, a_directory_without_taps_is_a_usage_error) {
  test::temp_dir dir;
  const auto r = test::run_process({test::bin("tprobe"), "tap", dir.path()});
  EXPECT_EQ(r.status, 100);
  EXPECT_THAT(r.err, HasSubstr("no taps (<stage>.tap sockets) in it"));
  const auto list = test::run_process({test::bin("tprobe"), "tap", "ipc:///tmp/x.tap", "--list"});
  EXPECT_EQ(list.status, 100);
  EXPECT_THAT(list.err, HasSubstr("--list needs a run directory"));
}
