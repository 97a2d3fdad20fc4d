// part_runner.h: helper threads for reading a large tensor's parts (tensor_stats.h,
// parallel_runner). The capture's: the training thread is blocked in the capture while a tensor is
// read, so its cores are idle then; the helpers use one of them to halve that wait. tprobe-stats':
// while the stage reads a large payload the capture usually waits for ring space (the stage is
// the slower), so a second reader uses the core the capture leaves idle. The parts' results are
// combined in part order, so the statistics are the same bit for bit with any number of threads.
//
// Contract:
// - run() returns once every part has run exactly once. The calling thread claims parts too, so
//   run() never waits for a helper to start: with no helper awake (or none at all) it reads every
//   part itself. It waits only for parts a helper has already claimed (each stats_part_bytes).
// - A helper never touches a job after run() has returned.
// - One run() at a time (the session's mutex). After a run a helper lingers for `linger`, yielding
//   its core to any thread that wants it, and only then sleeps on a condition variable: a helper
//   asleep is woken by a futex call on the caller's thread (tens of µs on a VM: an IPI), which the
//   large tensors of a model's forward and backward passes, coming one after another, would pay
//   each time. A lingering helper joins within a yield and costs the caller nothing.
// - Helpers run with every signal blocked (quiet_thread.h): signals go to the threads that expect
//   them.
// - The destructor stops and joins the helpers. A forked child has no helpers, but run() never
//   needs them (see the first point).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>
#include <vector>

#include "tensor_stats.h"

namespace tprobe {

class part_runner final : public parallel_runner {
 public:
  // `threads` readers in all, this one included: threads - 1 helpers (none for 0 or 1).
  // How long a helper polls for the next run before it sleeps (see the contract).
  static constexpr std::chrono::microseconds default_linger{500};
  explicit part_runner(unsigned threads, std::chrono::microseconds linger = default_linger);
  ~part_runner() override;
  part_runner(const part_runner &) = delete;
  part_runner &operator=(const part_runner &) = delete;

  void run(size_t parts, void (*part)(void *, size_t), void *context) override;
  unsigned helpers() const { return static_cast<unsigned>(helpers_.size()); }
  // Parts read by helpers so far (the rest were read by run()'s caller).
  uint64_t parts_by_helpers() const { return by_helpers_.load(std::memory_order_relaxed); }
  // Times a helper went to sleep after lingering (each costs the next run() a wake-up call).
  uint64_t helper_sleeps() const { return sleeps_.load(std::memory_order_relaxed); }

 private:
  void helper_loop();
  void claim_parts(bool helper);

  std::mutex mutex_;
  std::condition_variable wake_;
  const std::chrono::microseconds linger_;
  std::atomic<bool> stopping_{false};
  // One per run() with helpers; written under mutex_, polled without it by a lingering helper.
  std::atomic<uint64_t> generation_{0};
  // The job of the current run(): set and cleared under mutex_, read by a helper that joined it.
  void (*part_)(void *, size_t) = nullptr;
  void *context_ = nullptr;
  size_t parts_ = 0;
  std::atomic<size_t> next_{0};     // the next unclaimed part
  std::atomic<size_t> done_{0};     // parts finished
  std::atomic<unsigned> joined_{0};  // helpers inside the current job
  std::atomic<uint64_t> by_helpers_{0};
  std::atomic<uint64_t> sleeps_{0};
  std::vector<std::thread> helpers_;
};

// 2 where the machine has two cores or more, else 1.
unsigned part_runner_default_threads();

// TPROBE_CAPTURE_THREADS (1 turns the helpers off), else part_runner_default_threads(). A value
// that is not a number from 1 to 64 is named on stderr and read as 1.
unsigned part_runner_threads_from_env();

// TPROBE_CAPTURE_LINGER_US (0 to 1000000; 0: helpers sleep as soon as a run is done), else
// part_runner::default_linger. Anything else is named on stderr and read as the default.
std::chrono::microseconds part_runner_linger_from_env();

}  // namespace tprobe
