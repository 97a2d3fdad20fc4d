// `tprobe tap RUN_DIR`: the taps of a running pipeline are found from its run directory (what
// `tprobe run` prints when ready), every stage's, the writer's included; --stage picks one while
// the run goes on, --list names them, and an ambiguous or unknown choice is a usage error; a sink's
// tap (the writer's) ends with the stream.
#include <csignal>

#include <chrono>
#include <filesystem>
#include <thread>

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

TEST(TapRunDir, lists_every_stage_tap_the_writer_included) {
  test::temp_dir dir;
  const auto r = run_with(dir, "$TAP \"$TPROBE_RUN_DIR\" --list");
  ASSERT_EQ(r.status, 0) << r.err;
  // The run directory's sockets, as the launcher's ready line names them.
  const size_t at = r.err.find("tprobe: ready; run dir ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const std::string run_dir = r.err.substr(at + 23, r.err.find(';', at + 23) - at - 23);
  EXPECT_EQ(r.out, "stats ipc://" + run_dir + "/stats.tap\nwriter ipc://" + run_dir + "/writer.tap\n");
}

TEST(TapRunDir, several_taps_need_a_stage_and_an_unknown_stage_is_named) {
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

TEST(TapRunDir, watches_a_stage_while_the_run_goes_on) {
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

TEST(TapRunDir, a_directory_without_taps_is_a_usage_error) {
  test::temp_dir dir;
  const auto r = test::run_process({test::bin("tprobe"), "tap", dir.path()});
  EXPECT_EQ(r.status, 100);
  EXPECT_THAT(r.err, HasSubstr("no taps (<stage>.tap sockets) in it"));
  const auto list = test::run_process({test::bin("tprobe"), "tap", "ipc:///tmp/x.tap", "--list"});
  EXPECT_EQ(list.status, 100);
  EXPECT_THAT(list.err, HasSubstr("--list needs a run directory"));
}

// The README's own example: `tprobe tap` on the writer's tap (a sink: its tap shows what it
// consumes). The writer has no output to send an end-of-stream on, so its tap never said the
// stream ended, and the tap waited forever after the run. Now it ends with the stream.
TEST(TapRunDir, a_sinks_tap_ends_at_the_end_of_the_stream) {
  test::temp_dir dir;
  // The command waits for the test's "go" (the tap is connected by then), then trains.
  test::child_process launcher(
      {test::bin("tprobe"), "run", test::source_dir() + "/pipelines/statistics.json", "--config", write_config(dir),
       "--", "/bin/sh", "-c",
       "i=0; while [ ! -e \"$OUT/go\" ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done; "
       "$PRODUCER --steps 50 --step-ms 5"},
      dir.path(), {"PRODUCER=" + test::bin("tprobe-example-producer"), "OUT=" + dir.path()});
  std::string err;
  for (int i = 0; i < 4000 && (err = launcher.err()).find("tprobe: ready; run dir ") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const size_t at = err.find("tprobe: ready; run dir ");
  ASSERT_NE(at, std::string::npos) << err;
  const std::string run_dir = err.substr(at + 23, err.find(';', at + 23) - at - 23);
  // `tprobe tap` returns from its connect only once connected (no sleep needed before "go").
  test::child_process tap({"/bin/sh", "-c", "exec \"$TAP\" tap \"$RUN_DIR\" > \"$OUT/tap.txt\""}, dir.path(),
                          {"TAP=" + test::bin("tprobe"), "RUN_DIR=" + run_dir, "OUT=" + dir.path()});
  for (int i = 0; i < 4000 && !std::filesystem::exists(dir / "tap.txt"); ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  test::write_file(dir / "go", "");
  const auto status = launcher.wait_for(60);
  ASSERT_TRUE(status) << launcher.err();
  EXPECT_EQ(*status, 0) << launcher.err();
  // The writer's end-of-stream reached the tap: it ends now, not never.
  const auto tap_status = tap.wait_for(10);
  if (!tap_status) tap.kill(SIGKILL);
  ASSERT_TRUE(tap_status) << "tprobe tap still waits after the run ended";
  EXPECT_EQ(*tap_status, 0) << tap.err();
  EXPECT_THAT(test::read_file(dir / "tap.txt"), HasSubstr(" max="));  // it did watch the stream
}
