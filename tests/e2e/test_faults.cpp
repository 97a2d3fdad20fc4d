// Fault injection under `tprobe run` with the real binaries: a stage killed (SIGKILL) or stopped
// (SIGSTOP) at a seeded random point while a capturing "training" (tprobe-example-producer) runs.
// What must hold every time:
//  - the training never blocks past the pipeline deadline (its longest capture call is measured)
//    and runs to its end;
//  - the launcher exits 111 and its message names the stage and what happened to it;
//  - every dump.json on disk parses, and every step the writer finished (every step folder but
//    the newest) holds all of that step's entries.
// And a full disk (a small tmpfs) gives a clear error and a valid partial dump.
// The Python direct mode has its own fault runs in tests/python/test_faults.py.
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "example_model.h"
#include "pyjson.h"
#include "test_support.h"

using namespace tprobe;
namespace fs = std::filesystem;

namespace {

constexpr int pipeline_timeout_ms = 2000;
constexpr int steps = 60;
constexpr int step_ms = 10;

std::string write_config(const test::temp_dir &dir, const std::string &task, const std::string &dump_path) {
  const std::string path = dir / "config.json";
  test::write_file(path, R"({"task": ")" + task + R"(", "level": "L1", "dump_path": ")" + dump_path +
                             R"(", "tprobe": {"pipeline_timeout_s": )" + std::to_string(pipeline_timeout_ms / 1000.0) +
                             "}}");
  return path;
}

std::vector<std::string> run_argv(const std::string &manifest, const std::string &config, int n_steps) {
  return {test::bin("tprobe"),
          "run",
          test::source_dir() + "/pipelines/" + manifest,
          "--config",
          config,
          "--",
          test::bin("tprobe-example-producer"),
          "--steps",
          std::to_string(n_steps),
          "--step-ms",
          std::to_string(step_ms),
          "--keep-going"};
}

// The whole of a /proc file, or nullopt when its process is gone: a process that exits while it
// is read makes the read fail with ESRCH, which libstdc++'s filebuf throws as an ios failure.
std::optional<std::string> proc_file(const fs::path &path) {
  try {
    std::ifstream f(path);
    if (!f) return std::nullopt;
    return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  } catch (const std::ios_base::failure &) {
    return std::nullopt;
  }
}

// The pid of the launcher's child running `program`, once it exists (stages start within a
// second or two; the deadline only bounds a broken run). Processes come and go while /proc is
// walked (the launcher runs each binary with --describe first): one that vanishes is skipped.
pid_t child_named(pid_t parent, const std::string &program) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (fs::directory_iterator it("/proc", ec), end; !ec && it != end; it.increment(ec)) {
      const std::string name = it->path().filename();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      const auto line = proc_file(it->path() / "stat");
      if (!line) continue;
      const auto open = line->find('('), close = line->rfind(')');
      if (open == std::string::npos || close == std::string::npos) continue;
      const std::string comm = line->substr(open + 1, close - open - 1);
      int ppid = 0;
      char state = 0;
      if (std::sscanf(line->c_str() + close + 2, "%c %d", &state, &ppid) != 2) continue;
      if (ppid != parent || program.compare(0, comm.size(), comm) != 0) continue;
      // The launcher also runs each binary with --describe before the run: not the stage.
      const auto cmdline = proc_file(it->path() / "cmdline");
      if (cmdline && cmdline->find("--ready-fd") != std::string::npos) return std::stoi(name);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return -1;
}

double longest_capture_call_ms(const std::string &log) {
  double longest = -1;
  const std::string key = "longest capture call ";
  for (size_t at = log.find(key); at != std::string::npos; at = log.find(key, at + 1))
    longest = std::max(longest, std::stod(log.substr(at + key.size())));
  return longest;
}

std::set<std::string> entries_of_step(int64_t step) {
  std::set<std::string> names;
  for (const auto &it : example::example_step(1, -1, step)) names.insert(it.entry);
  return names;
}

// Every dump.json parses; every step folder but the newest holds the step's entries.
void check_dump(const std::string &dump_path, const std::string &context) {
  if (!fs::exists(dump_path)) return;
  int newest = -1;
  for (const auto &e : fs::directory_iterator(dump_path))
    if (e.path().filename().string().rfind("step", 0) == 0)
      newest = std::max(newest, std::stoi(e.path().filename().string().substr(4)));
  for (const auto &e : fs::directory_iterator(dump_path)) {
    const std::string name = e.path().filename();
    if (name.rfind("step", 0) != 0) continue;
    const int step = std::stoi(name.substr(4));
    const fs::path dump_json = e.path() / "rank" / "dump.json";
    if (!fs::exists(dump_json)) {
      EXPECT_EQ(step, newest) << context << ": finished step " << step << " has no dump.json";
      continue;
    }
    nlohmann::ordered_json doc;  // msprobe's dump.json holds Python's NaN and Infinity
    ASSERT_NO_THROW(doc = pyjson_parse(test::read_file(dump_json), dump_json)) << context << ": " << dump_json;
    if (step == newest) continue;
    std::set<std::string> have;
    for (const auto &[k, v] : doc.at("data").items()) have.insert(k);
    EXPECT_EQ(have, entries_of_step(step)) << context << ": step " << step;
  }
}

}  // namespace

TEST(Faults, killed_or_stopped_stages_under_tprobe_run) {
  std::mt19937 random(20261125);  // seeded: a failure names its run, and reruns the same way
  const int runs = 40;
  int landed = 0;
  for (int run = 0; run < runs; ++run) {
    const std::string stage = random() % 2 ? "writer" : "stats";
    const int signal = random() % 2 ? SIGKILL : SIGSTOP;
    const int delay_ms = static_cast<int>(random() % 500);
    const std::string context = "run " + std::to_string(run) + ": " + (signal == SIGKILL ? "SIGKILL" : "SIGSTOP") +
                                " of " + stage + " after " + std::to_string(delay_ms) + " ms";
    SCOPED_TRACE(context);
    test::temp_dir dir;
    const std::string config = write_config(dir, "statistics", dir / "dump");
    const auto t0 = std::chrono::steady_clock::now();
    // The shipped statistics pipeline is the writer alone; the one with tprobe-stats between.
    const std::string manifest = stage == "stats" ? "testing/stats-writer.json" : "statistics.json";
    test::child_process launcher(run_argv(manifest, config, steps), dir.path());
    const pid_t victim = child_named(launcher.pid(), "tprobe-" + stage);
    ASSERT_GT(victim, 0) << "no tprobe-" << stage << " under the launcher";
    // Faults during start-up stop the run before training (tested with the start-up deadline);
    // these land while it trains: from the launcher's ready line on.
    for (int i = 0; i < 2000 && launcher.err().find("tprobe: ready;") == std::string::npos; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));  // the fault's point in time
    ::kill(victim, signal);
    const auto status = launcher.wait_for(60);
    if (!status) launcher.kill(SIGKILL);
    ASSERT_TRUE(status) << "the run did not end within 60 s:\n" << launcher.err();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    const std::string log = launcher.err();
    // The training ran to its end and was never held past the deadline.
    EXPECT_NE(log.find("rank -1: " + std::to_string(steps) + " steps"), std::string::npos) << log;
    const double longest = longest_capture_call_ms(log);
    EXPECT_GE(longest, 0) << log;
    EXPECT_LT(longest, pipeline_timeout_ms + 1500) << log;
    EXPECT_LT(seconds, 30) << log;
    if (*status == 0) {
      // The fault came after the run had ended (the stage was already gone): nothing to report.
      EXPECT_EQ(log.find("fatal"), std::string::npos) << log;
    } else {
      ++landed;
      EXPECT_EQ(*status, 111) << log;
      const std::string named = "stage \"" + stage + "\" (tprobe-" + stage + ") ";
      const std::string what = signal == SIGKILL ? "was killed by signal 9" : "was stopped by signal 19";
      EXPECT_NE(log.find("tprobe: fatal: " + named + what), std::string::npos) << log;
    }
    check_dump(dir / "dump", context);
  }
  EXPECT_GE(landed, runs * 3 / 4) << "most faults must land while the training runs";
  std::printf("faults: %d runs under tprobe run, %d faults landed during training\n", runs, landed);
}

TEST(Faults, a_full_disk_is_a_clear_error_and_a_valid_partial_dump) {
  test::temp_dir dir;
  const std::string disk = dir / "disk";
  fs::create_directories(disk);
  if (::mount("tmpfs", disk.c_str(), "tmpfs", 0, "size=256k") != 0)
    GTEST_SKIP() << "cannot mount a tmpfs here (needs root): " << std::strerror(errno);
  struct unmount {
    std::string path;
    ~unmount() { ::umount2(path.c_str(), MNT_DETACH); }
  } unmount_at_end{disk};
  const std::string config = write_config(dir, "tensor", disk + "/dump");
  test::child_process launcher(run_argv("tensor.json", config, 40), dir.path());
  const auto status = launcher.wait_for(120);
  if (!status) launcher.kill(SIGKILL);
  ASSERT_TRUE(status);
  const std::string log = launcher.err();
  EXPECT_EQ(*status, 111) << log;
  EXPECT_NE(log.find("tprobe-writer: fatal: unable to"), std::string::npos) << log;
  EXPECT_NE(log.find("No space left on device"), std::string::npos) << log;
  EXPECT_NE(log.find("tprobe: fatal: stage \"writer\" (tprobe-writer) exited with status 111"), std::string::npos)
      << log;
  EXPECT_NE(log.find("rank -1: 40 steps"), std::string::npos) << log;  // the training went on
  check_dump(disk + "/dump", "full disk");
}

// A stage ended by SIGTERM or SIGINT from outside the launcher (a user, a scheduler) before its
// end-of-stream finishes its files on the signal, so its status alone once said "ok": the run
// reported "2 stages finished" and exit 0 over a dump that lacks the rest of the training. Now
// the stage exits 128+N (stage_main.h) and the launcher fails the run naming it, while the
// training goes on to its end as for any failed stage.
TEST(Faults, a_stage_ended_by_a_signal_before_its_end_of_stream_fails_the_run) {
  for (const std::string stage : {"writer", "stats"}) {
    for (const int signal : {SIGTERM, SIGINT}) {
      const std::string context = std::string(signal == SIGTERM ? "SIGTERM" : "SIGINT") + " to " + stage;
      SCOPED_TRACE(context);
      test::temp_dir dir;
      const std::string config = write_config(dir, "statistics", dir / "dump");
      const std::string manifest = stage == "stats" ? "testing/stats-writer.json" : "statistics.json";
      // Long enough that the signal lands while it trains (the launcher's ready line comes first).
      test::child_process launcher(run_argv(manifest, config, 300), dir.path());
      const pid_t victim = child_named(launcher.pid(), "tprobe-" + stage);
      ASSERT_GT(victim, 0) << "no tprobe-" << stage << " under the launcher";
      for (int i = 0; i < 2000 && launcher.err().find("tprobe: ready;") == std::string::npos; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      ::kill(victim, signal);
      const auto status = launcher.wait_for(60);
      if (!status) launcher.kill(SIGKILL);
      ASSERT_TRUE(status) << "the run did not end within 60 s:\n" << launcher.err();
      const std::string log = launcher.err();
      EXPECT_EQ(*status, 111) << log;
      const std::string line = "tprobe: fatal: stage \"" + stage + "\" (tprobe-" + stage + ") ended on signal " +
                               std::to_string(signal) + " (" + strsignal(signal) + ") before its end-of-stream";
      EXPECT_NE(log.find(line), std::string::npos) << log;
      EXPECT_EQ(log.find("stages finished"), std::string::npos) << log;
      EXPECT_NE(log.find("rank -1: 300 steps"), std::string::npos) << log;  // the training went on
      check_dump(dir / "dump", context);
    }
  }
}
