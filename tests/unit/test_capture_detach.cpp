// The capture's first promise: a pipeline that dies or stops reading never holds the training
// thread. The session detaches, counts what it could not deliver, and every call returns at once;
// stop/step/close report it. Also: entry names the writer could not use are refused up front, and
// a dump_path that cannot be used fails at open.
#include <algorithm>
#include <chrono>
#include <csignal>
#include <string>
#include <thread>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include "endpoint.h"
#include "tprobe_capture.h"
#include "test_support.h"

using namespace tprobe;

namespace {

using clock_type = std::chrono::steady_clock;

// A first stage that takes `take` records and then stops reading for good.
pid_t stalling_stage(const std::string &endpoint, int take) {
  return test::stalling_consumer(endpoint, take, "tprobe-stats");
}

std::string config_in(const test::temp_dir &dir, const std::string &dump_path, const std::string &extra = "") {
  const std::string path = dir / "config.json";
  test::write_file(path, R"({"task": "statistics", "level": "L1", "dump_path": ")" + dump_path + "\"" + extra + "}");
  return path;
}

struct capture_run {
  double longest_call_ms = 0;
  int skipped_after_detach = 0;
};

// Captures 64 KiB tensors (copied out: statistics computed by the stage) until `records` calls.
capture_run capture_many(tprobe_session *s, int records) {
  capture_run out;
  std::vector<float> data(16384, 1.0f);
  int64_t shape[] = {16384};
  DLTensor t = test::float_tensor(data.data(), shape);
  EXPECT_EQ(tprobe_start(s), TPROBE_OK) << tprobe_last_error();
  for (int i = 0; i < records; ++i) {
    const std::string entry = "Torch.add." + std::to_string(i) + ".forward";
    const auto t0 = clock_type::now();
    const int rc = tprobe_capture_tensor(s, entry.c_str(), "output.0", &t, 0);
    out.longest_call_ms =
        std::max(out.longest_call_ms, std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
    EXPECT_NE(rc, TPROBE_ERROR) << tprobe_last_error();
    tprobe_session_counts c{};
    tprobe_session_counts_get(s, &c);
    if (c.detached && rc == TPROBE_SKIPPED) ++out.skipped_after_detach;
  }
  return out;
}

void expect_detached_controls(tprobe_session *s) {
  EXPECT_EQ(tprobe_step(s), TPROBE_ERROR);
  EXPECT_NE(std::string(tprobe_last_error()).find("detached"), std::string::npos) << tprobe_last_error();
  tprobe_session_counts c{};
  tprobe_session_counts_get(s, &c);
  EXPECT_EQ(c.detached, 1);
  EXPECT_GT(c.undelivered, 0u);
  const auto t0 = clock_type::now();
  EXPECT_EQ(tprobe_session_close(s), TPROBE_ERROR);
  EXPECT_LT(std::chrono::duration<double>(clock_type::now() - t0).count(), 2.0);
}

}  // namespace

TEST(CaptureDetach, a_dead_first_stage_never_holds_the_training_thread) {
  test::temp_dir dir;
  const std::string ep = "ipc://" + dir.path() + "/stats.in";
  const pid_t stage = stalling_stage(ep, 50);
  const std::string config = config_in(dir, dir / "dump");
  tprobe_open_options o = tprobe_open_options_default();
  o.endpoint = ep.c_str();
  o.stats_mode = TPROBE_STATS_COPY;
  o.queue_bytes = 1 << 20;
  o.pipeline_timeout_ms = -1;  // only the stage's death can free the capture
  tprobe_session *s = nullptr;
  ASSERT_EQ(tprobe_session_open(config.c_str(), &o, &s), TPROBE_OK) << tprobe_last_error();
  std::thread killer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));  // fault injection point
    ::kill(stage, SIGKILL);
  });
  const capture_run run = capture_many(s, 3000);
  killer.join();
  ::waitpid(stage, nullptr, 0);
  EXPECT_LT(run.longest_call_ms, 1500.0);  // blocked from ~0 ms until the kill at 300 ms, then freed
  EXPECT_GT(run.skipped_after_detach, 0);
  expect_detached_controls(s);
}

TEST(CaptureDetach, a_stalled_stage_holds_it_no_longer_than_the_deadline) {
  test::temp_dir dir;
  const std::string ep = "ipc://" + dir.path() + "/stats.in";
  const pid_t stage = stalling_stage(ep, 50);
  // The deadline comes from the config's own section.
  const std::string config = config_in(dir, dir / "dump", R"(, "tprobe": {"pipeline_timeout_s": 0.5})");
  tprobe_open_options o = tprobe_open_options_default();
  o.endpoint = ep.c_str();
  o.stats_mode = TPROBE_STATS_COPY;
  o.queue_bytes = 1 << 20;
  tprobe_session *s = nullptr;
  ASSERT_EQ(tprobe_session_open(config.c_str(), &o, &s), TPROBE_OK) << tprobe_last_error();
  const auto t0 = clock_type::now();
  const capture_run run = capture_many(s, 3000);
  EXPECT_LT(std::chrono::duration<double>(clock_type::now() - t0).count(), 3.0);
  EXPECT_GE(run.longest_call_ms, 400.0);  // it did wait: lossless while the stage might recover
  EXPECT_LT(run.longest_call_ms, 2000.0);
  expect_detached_controls(s);
  ::kill(stage, SIGKILL);
  ::waitpid(stage, nullptr, 0);
}

// A payload larger than the whole queue budget waits for the queue to empty, no longer. Records
// without payload (values here; statistics in place in a real run) free no bytes when sent, so
// the sender must let the waiting call in when it takes the queue, or the call waits forever. Run
// in a child with a deadline: a hang is a failure, not a stuck test.
TEST(CaptureDetach, a_payload_larger_than_the_queue_waits_only_for_the_queue_to_empty) {
  test::temp_dir dir;
  const std::string config_path = dir / "config.json";
  test::write_file(config_path, R"({"task": "tensor", "level": "L1", "dump_path": ")" + (dir / "dump") + "\"}");
  const std::string file = dir / "records.tpr";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    tprobe_open_options o = tprobe_open_options_default();
    o.endpoint = file.c_str();  // a record file: the sender is never held up by a reader
    o.queue_bytes = 1 << 20;
    tprobe_session *s = nullptr;
    if (tprobe_session_open(config_path.c_str(), &o, &s) != TPROBE_OK || tprobe_start(s) != TPROBE_OK) ::_exit(2);
    std::vector<float> big((2u << 20) / sizeof(float), 1.0f);  // 2 MiB: twice the budget
    int64_t shape[] = {static_cast<int64_t>(big.size())};
    const DLTensor t = test::float_tensor(big.data(), shape);
    for (int round = 0; round < 20; ++round) {
      for (int i = 0; i < 2000; ++i) {
        const std::string entry = "Torch.size." + std::to_string(round * 2000 + i) + ".forward";
        if (tprobe_capture_value(s, entry.c_str(), "output.0", R"({"type": "int", "value": 3})") != TPROBE_OK)
          ::_exit(3);
      }
      const std::string entry = "Torch.add." + std::to_string(round) + ".forward";
      if (tprobe_capture_tensor(s, entry.c_str(), "output.0", &t, 0) != TPROBE_OK) ::_exit(4);
    }
    ::_exit(tprobe_session_close(s) == TPROBE_OK ? 0 : 5);
  }
  int status = 0;
  const auto deadline = clock_type::now() + std::chrono::seconds(30);
  while (::waitpid(child, &status, WNOHANG) == 0) {
    if (clock_type::now() > deadline) {
      ::kill(child, SIGKILL);
      ::waitpid(child, &status, 0);
      FAIL() << "the capture did not finish in 30 s: a call waits for queue space that never comes";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // polling a child's exit, not a wait between processes
  }
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// Ctrl-C and a scheduler's SIGTERM are the training's: every thread the capture starts (its
// sender, its part reader, ZeroMQ's) blocks them, so the training thread gets them and a blocking
// call there is interrupted at once.
TEST(CaptureDetach, the_capture_s_threads_take_no_signals) {
  test::temp_dir dir;
  const std::string config = config_in(dir, dir / "dump");
  const auto before = test::thread_ids();
  tprobe_open_options o = tprobe_open_options_default();
  const std::string file = dir / "records.tpr";
  o.endpoint = file.c_str();
  tprobe_session *s = nullptr;
  ASSERT_EQ(tprobe_session_open(config.c_str(), &o, &s), TPROBE_OK) << tprobe_last_error();
  std::vector<float> data((size_t{4} << 20) / sizeof(float), 1.0f);  // large: read in parts
  int64_t shape[] = {static_cast<int64_t>(data.size())};
  const DLTensor t = test::float_tensor(data.data(), shape);
  ASSERT_EQ(tprobe_start(s), TPROBE_OK);
  ASSERT_EQ(tprobe_capture_tensor(s, "Torch.add.0.forward", "output.0", &t, 0), TPROBE_OK) << tprobe_last_error();
  const auto after = test::thread_ids();
  EXPECT_GT(after.size(), before.size());  // a sender at least
  for (const int sig : {SIGINT, SIGTERM}) {
    const auto taking = test::threads_taking_signal(sig);
    for (const auto &tid : after) {
      if (std::binary_search(before.begin(), before.end(), tid)) continue;
      EXPECT_FALSE(std::binary_search(taking.begin(), taking.end(), tid)) << "capture thread " << tid << ", signal " << sig;
    }
  }
  EXPECT_EQ(tprobe_session_close(s), TPROBE_OK) << tprobe_last_error();
}

TEST(CaptureDetach, names_the_writer_cannot_use_are_refused_at_the_call) {
  for (const char *bad : {"a/b", "/abs", "a b", ""}) EXPECT_EQ(tprobe_entry_name_check(bad), TPROBE_ERROR) << bad;
  EXPECT_EQ(tprobe_entry_name_check(std::string(300, 'x').c_str()), TPROBE_ERROR);
  EXPECT_NE(std::string(tprobe_last_error()).find("at most 200"), std::string::npos) << tprobe_last_error();
  EXPECT_EQ(tprobe_entry_name_check("my_tensor_grad.0.debug"), TPROBE_OK);

  test::temp_dir dir;
  const std::string config = config_in(dir, dir / "dump");
  tprobe_open_options o = tprobe_open_options_default();
  const std::string file = dir / "records.tpr";
  o.endpoint = file.c_str();  // a record file: no pipeline needed
  tprobe_session *s = nullptr;
  ASSERT_EQ(tprobe_session_open(config.c_str(), &o, &s), TPROBE_OK) << tprobe_last_error();
  ASSERT_EQ(tprobe_start(s), TPROBE_OK);
  EXPECT_EQ(tprobe_entry_begin(s, "a/b.0.debug", nullptr, nullptr, 0, -1), TPROBE_ERROR);
  EXPECT_NE(std::string(tprobe_last_error()).find("entry name \"a/b.0.debug\""), std::string::npos)
      << tprobe_last_error();
  EXPECT_EQ(tprobe_entry_begin(s, "good.0.debug", nullptr, nullptr, 0, -1), TPROBE_OK);
  EXPECT_EQ(tprobe_session_close(s), TPROBE_OK) << tprobe_last_error();
}

TEST(CaptureDetach, a_dump_path_that_cannot_be_used_fails_at_open) {
  test::temp_dir dir;
  test::write_file(dir / "a_file", "x");
  const std::vector<std::pair<std::string, std::string>> cases{
      {dir / "a_file", "exists and is not a directory"},
      {dir / "a_file/sub", "is not a directory"},
      {"/sys/tprobe-dump-test", "cannot be created in /sys"},  // refused even to root
  };
  for (const auto &[path, message] : cases) {
    const std::string config = config_in(dir, path);
    EXPECT_EQ(tprobe_config_check(config.c_str()), nullptr) << path;
    EXPECT_NE(std::string(tprobe_last_error()).find(message), std::string::npos) << tprobe_last_error();
    EXPECT_NE(std::string(tprobe_last_error()).find("field \"dump_path\""), std::string::npos) << tprobe_last_error();
    tprobe_open_options o = tprobe_open_options_default();
    const std::string file = dir / "records.tpr";
    o.endpoint = file.c_str();
    tprobe_session *s = nullptr;
    EXPECT_EQ(tprobe_session_open(config.c_str(), &o, &s), TPROBE_ERROR) << path;
  }
  const std::string good = config_in(dir, dir / "new/deeper/dump");
  EXPECT_NE(tprobe_config_check(good.c_str()), nullptr) << tprobe_last_error();
}
