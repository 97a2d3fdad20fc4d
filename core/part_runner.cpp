// part_runner.cpp: see part_runner.h for the contract.
#include "part_runner.h"

#include <cstdio>
#include <cstdlib>

#include "quiet_thread.h"

namespace tprobe {

part_runner::part_runner(unsigned threads, std::chrono::microseconds linger) : linger_(linger) {
  // Quiet: a signal meant for the caller's thread must not land in a helper asleep between parts.
  for (unsigned i = 1; i < threads; ++i) helpers_.push_back(quiet_thread([this] { helper_loop(); }));
}

part_runner::~part_runner() {
  {
    std::lock_guard lock(mutex_);
    stopping_.store(true, std::memory_order_relaxed);
  }
  wake_.notify_all();
  for (auto &t : helpers_) t.join();
}

void part_runner::claim_parts(bool helper) {
  for (size_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < parts_;) {
    part_(context_, i);
    if (helper) by_helpers_.fetch_add(1, std::memory_order_relaxed);
    done_.fetch_add(1, std::memory_order_release);
  }
}

void part_runner::helper_loop() {
  uint64_t seen = 0;
  for (;;) {
    // Linger: a new run is seen here without a wake-up call on the caller's thread. Yielding lets
    // the stages and the capture's sender have this core whenever they want it.
    const auto until = std::chrono::steady_clock::now() + linger_;
    while (generation_.load(std::memory_order_acquire) == seen && !stopping_.load(std::memory_order_relaxed) &&
           std::chrono::steady_clock::now() < until)
      std::this_thread::yield();
    std::unique_lock lock(mutex_);
    if (!stopping_.load(std::memory_order_relaxed) && generation_.load(std::memory_order_relaxed) == seen)
      sleeps_.fetch_add(1, std::memory_order_relaxed);
    wake_.wait(lock, [&] { return stopping_.load(std::memory_order_relaxed) || generation_.load(std::memory_order_relaxed) != seen; });
    if (stopping_.load(std::memory_order_relaxed)) return;
    seen = generation_.load(std::memory_order_relaxed);
    if (!part_) continue;  // that run() has already finished
    joined_.fetch_add(1, std::memory_order_acq_rel);
    lock.unlock();
    claim_parts(true);
    joined_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void part_runner::run(size_t parts, void (*part)(void *, size_t), void *context) {
  if (helpers_.empty() || parts < 2) {
    for (size_t i = 0; i < parts; ++i) part(context, i);
    return;
  }
  {
    std::lock_guard lock(mutex_);
    part_ = part, context_ = context, parts_ = parts;
    next_.store(0, std::memory_order_relaxed);
    done_.store(0, std::memory_order_relaxed);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  claim_parts(false);
  // Only parts a helper claimed are left: each is one part's reading, already under way.
  while (done_.load(std::memory_order_acquire) < parts) std::this_thread::yield();
  {
    std::lock_guard lock(mutex_);
    part_ = nullptr, context_ = nullptr;
  }
  // A helper that joined before the job was cleared finds no part left (next_ >= parts) and leaves.
  while (joined_.load(std::memory_order_acquire) != 0) std::this_thread::yield();
}

unsigned part_runner_default_threads() { return std::thread::hardware_concurrency() >= 2 ? 2 : 1; }

namespace {

// Environment variable `name` read as a whole number from lo to hi: `unset` when it is unset or
// empty; anything else is named on stderr with what is used instead (`bad`, `instead`). Training
// goes on either way.
long env_number(const char *name, long lo, long hi, long unset, long bad, const char *instead) {
  const char *v = std::getenv(name);
  if (!v || !*v) return unset;
  char *end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end == '\0' && n >= lo && n <= hi) return n;
  std::fprintf(stderr, "tprobe: %s=\"%s\" is not a number from %ld to %ld; %s\n", name, v, lo, hi, instead);
  return bad;
}

}  // namespace

unsigned part_runner_threads_from_env() {
  // A bad value reads as the safe choice: the training thread alone.
  return static_cast<unsigned>(
      env_number("TPROBE_CAPTURE_THREADS", 1, 64, part_runner_default_threads(), 1, "reading with 1 thread"));
}

std::chrono::microseconds part_runner_linger_from_env() {
  // A bad value reads as the default, which the figures were measured with.
  static_assert(part_runner::default_linger.count() == 500, "the message below names the default");
  const long linger = part_runner::default_linger.count();
  return std::chrono::microseconds(env_number("TPROBE_CAPTURE_LINGER_US", 0, 1000000, linger, linger, "lingering 500 µs"));
}

}  // namespace tprobe
