// test_support.h: what tests share: a hermetic temp dir, the binaries of this build (from
// TPROBE_BIN_DIR, which CMake sets: never a guessed path), and child processes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <sys/types.h>

#include <dlpack/dlpack.h>

#include "record.h"

namespace tprobe::test {

// A fresh directory under TPROBE_TEST_TMP (or /tmp), removed by the destructor.
class temp_dir {
 public:
  temp_dir();
  ~temp_dir();
  temp_dir(const temp_dir &) = delete;
  temp_dir &operator=(const temp_dir &) = delete;
  const std::string &path() const { return path_; }
  std::string operator/(const std::string &name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// $TPROBE_BIN_DIR/name; the test fails if the variable is unset.
std::string bin(const std::string &name);
std::string source_dir();

struct process_result {
  int status = -1;  // exit code, or 128 + signal
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs argv to completion with extra environment entries ("K=V").
process_result run_process(const std::vector<std::string> &argv, const std::vector<std::string> &env = {});

// A child process running in the background; its stdout/stderr go to files in `log_dir`.
class child_process {
 public:
  child_process(const std::vector<std::string> &argv, const std::string &log_dir,
                const std::vector<std::string> &env = {}, bool ready_fd = false);
  ~child_process();  // kills (SIGKILL) if still running
  // Blocks until the child wrote its readiness line (started with ready_fd): no sleeps.
  void wait_ready();
  int wait();  // exit code or 128 + signal
  // As wait(), or nullopt if it still runs after `seconds` (then it keeps running).
  std::optional<int> wait_for(double seconds);
  void kill(int signal);
  pid_t pid() const { return pid_; }
  std::string err() const;

 private:
  pid_t pid_ = -1;
  int ready_read_ = -1;
  std::string err_path_;
  int status_ = -1;
  bool reaped_ = false;
};

// A tensor record of `bytes` uint8 elements, all equal to i (mod 256), entry
// "Functional.relu.{i}.forward", slot output.0, seq i + 1: easy to check on arrival.
record numbered_record(uint64_t i, size_t bytes = 16);

// An entry record of `run` (entry "Torch.add.{seq}.forward", seq `seq`) whose meta names call
// stack `stack_id` (record.h section 5), with its lines when `lines` is given.
record stack_entry_record(const std::string &run, uint64_t seq, uint64_t stack_id,
                          const nlohmann::ordered_json *lines = nullptr);

// A 1-d float32 host tensor over `data`, `*shape` elements (both outlive the tensor).
DLTensor float_tensor(float *data, int64_t *shape);

// "ipc://DIR/name".
std::string ipc_endpoint(const temp_dir &dir, const std::string &name);

// A consumer in a child process: binds `endpoint` (stage_io, high-water mark 4), takes `take`
// data records, then stops reading for good and stays alive until killed. Returns once it is
// bound (a pipe, no sleeps). `name` is what its ack calls it.
pid_t stalling_consumer(const std::string &endpoint, int take, const std::string &name = "stalling consumer");

// The names of the files in `dir`, sorted.
std::vector<std::string> files_in(const std::string &dir);
// DIR/NAME of the first file in `dir` (sorted) whose name starts with `prefix` and ends with
// `ext`; "" when none does.
std::string find_file(const std::string &dir, const std::string &prefix, const std::string &ext);

// The first number after `prefix` in `text` (a stage's summary line); fails the test if absent.
uint64_t number_after(const std::string &text, const std::string &prefix);

std::string read_file(const std::string &path);
void write_file(const std::string &path, const std::string &content);

// The ids of this process's threads that would take `signal` (it is not blocked in them), from
// /proc/self/task/TID/status ("SigBlk:", a hex mask whose bit n-1 is signal n), sorted.
std::vector<std::string> threads_taking_signal(int signal);
// All this process's thread ids, sorted.
std::vector<std::string> thread_ids();

}  // namespace tprobe::test
