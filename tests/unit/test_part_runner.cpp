// The capture's helper threads (core/part_runner.h) and the statistics of a large tensor read
// in parts (core/tensor_stats.h, parallel_runner): every part runs once, run() never depends on a
// helper, and the statistics do not depend on which threads read the parts.
#include "part_runner.h"

#include <gtest/gtest.h>

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstring>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "tensor_stats.h"
#include "test_support.h"

namespace tprobe {
namespace {

struct counting_job {
  std::vector<std::atomic<int>> runs;
  std::chrono::microseconds each{0};
  explicit counting_job(size_t parts) : runs(parts) {}
  static void part(void *context, size_t i) {
    auto &job = *static_cast<counting_job *>(context);
    job.runs[i].fetch_add(1);
    if (job.each.count()) std::this_thread::sleep_for(job.each);
  }
};

TEST(PartRunner, EveryPartRunsExactlyOnce) {
  std::mt19937 gen(7);
  for (unsigned threads : {1u, 2u, 4u}) {
    part_runner runner(threads);
    EXPECT_EQ(runner.helpers(), threads - 1);
    for (int round = 0; round < 2000; ++round) {
      const size_t parts = gen() % 70;
      counting_job job(parts);
      runner.run(parts, counting_job::part, &job);
      for (size_t i = 0; i < parts; ++i) ASSERT_EQ(job.runs[i].load(), 1) << threads << " threads, part " << i;
    }
  }
}

TEST(PartRunner, HelpersTakeAShareOfSlowParts) {
  part_runner runner(2);
  counting_job job(100);
  job.each = std::chrono::milliseconds(2);
  runner.run(100, counting_job::part, &job);
  for (auto &r : job.runs) ASSERT_EQ(r.load(), 1);
  // 200 ms of parts: the helper, woken at the start, reads some of them even on a loaded machine.
  EXPECT_GT(runner.parts_by_helpers(), 0u);
}

// Runs that follow one another within the linger find the helper awake: no run pays for a wake-up
// call, and the helper still reads parts. A helper that lingers leaves at once when the runner is
// destroyed, however long its linger.
TEST(PartRunner, ALingeringHelperNeedsNoWakeUpAndLeavesAtOnce) {
  const auto start = std::chrono::steady_clock::now();
  {
    part_runner runner(2, std::chrono::seconds(20));
    for (int round = 0; round < 20; ++round) {
      counting_job job(8);
      job.each = std::chrono::microseconds(500);
      runner.run(8, counting_job::part, &job);
      for (auto &r : job.runs) ASSERT_EQ(r.load(), 1);
      std::this_thread::sleep_for(std::chrono::milliseconds(5));  // a gap between tensors, well within the linger
    }
    EXPECT_EQ(runner.helper_sleeps(), 0u);
    EXPECT_GT(runner.parts_by_helpers(), 0u);
  }
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(10));
}

// Without a linger the helper sleeps between runs (the cost the linger saves), and still helps.
TEST(PartRunner, WithoutALingerTheHelperSleepsBetweenRuns) {
  part_runner runner(2, std::chrono::microseconds(0));
  for (int round = 0; round < 5; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    counting_job job(8);
    job.each = std::chrono::milliseconds(2);
    runner.run(8, counting_job::part, &job);
    for (auto &r : job.runs) ASSERT_EQ(r.load(), 1);
  }
  EXPECT_GT(runner.helper_sleeps(), 0u);
  EXPECT_GT(runner.parts_by_helpers(), 0u);
}

// A signal meant for the caller's thread (a stage's main thread, the training process's) must not
// land in a helper asleep between parts: helpers block them all (quiet_thread.h), and their
// creator's mask is as it was.
TEST(PartRunner, HelpersTakeNoSignalsAndLeaveTheCallersMaskAlone) {
  const auto before = test::thread_ids();
  part_runner runner(3);
  const auto after = test::thread_ids();
  ASSERT_EQ(after.size(), before.size() + 2);
  for (const int sig : {SIGINT, SIGTERM}) {
    const auto taking = test::threads_taking_signal(sig);
    for (const auto &tid : after) {
      if (std::binary_search(before.begin(), before.end(), tid)) continue;
      EXPECT_FALSE(std::binary_search(taking.begin(), taking.end(), tid)) << "helper " << tid << ", signal " << sig;
    }
  }
  sigset_t mine;
  pthread_sigmask(SIG_SETMASK, nullptr, &mine);
  EXPECT_EQ(sigismember(&mine, SIGTERM), 0);
  EXPECT_EQ(sigismember(&mine, SIGINT), 0);
}

// A helper that never gets a core (here: none at all) is never waited for.
TEST(PartRunner, NoHelperMeansTheCallerReadsEverything) {
  part_runner runner(1);
  counting_job job(10);
  runner.run(10, counting_job::part, &job);
  EXPECT_EQ(runner.parts_by_helpers(), 0u);
  for (auto &r : job.runs) EXPECT_EQ(r.load(), 1);
}

TEST(PartRunner, LingerFromTheEnvironment) {
  ::unsetenv("TPROBE_CAPTURE_LINGER_US");
  EXPECT_EQ(part_runner_linger_from_env(), part_runner::default_linger);
  ::setenv("TPROBE_CAPTURE_LINGER_US", "0", 1);
  EXPECT_EQ(part_runner_linger_from_env(), std::chrono::microseconds(0));
  ::setenv("TPROBE_CAPTURE_LINGER_US", "2000", 1);
  EXPECT_EQ(part_runner_linger_from_env(), std::chrono::microseconds(2000));
  for (const char *bad : {"-1", "soon", "5ms", "2000000"}) {
    ::setenv("TPROBE_CAPTURE_LINGER_US", bad, 1);
    testing::internal::CaptureStderr();
    EXPECT_EQ(part_runner_linger_from_env(), part_runner::default_linger) << bad;
    EXPECT_NE(testing::internal::GetCapturedStderr().find(std::string("TPROBE_CAPTURE_LINGER_US=\"") + bad + "\" is not a number"),
              std::string::npos) << bad;
  }
  ::unsetenv("TPROBE_CAPTURE_LINGER_US");
}

TEST(PartRunner, ThreadsFromTheEnvironment) {
  ::setenv("TPROBE_CAPTURE_THREADS", "1", 1);
  EXPECT_EQ(part_runner_threads_from_env(), 1u);
  ::setenv("TPROBE_CAPTURE_THREADS", "3", 1);
  EXPECT_EQ(part_runner_threads_from_env(), 3u);
  ::setenv("TPROBE_CAPTURE_THREADS", "nonsense", 1);
  testing::internal::CaptureStderr();
  EXPECT_EQ(part_runner_threads_from_env(), 1u);
  EXPECT_NE(testing::internal::GetCapturedStderr().find("TPROBE_CAPTURE_THREADS=\"nonsense\" is not a number"),
            std::string::npos);
  ::setenv("TPROBE_CAPTURE_THREADS", "2x", 1);
  EXPECT_EQ(part_runner_threads_from_env(), 1u);
  ::unsetenv("TPROBE_CAPTURE_THREADS");
  EXPECT_GE(part_runner_threads_from_env(), 1u);
}

// Runs the parts backwards on this thread: any order must give the same statistics.
class backwards_runner final : public parallel_runner {
 public:
  size_t runs = 0, parts = 0;
  void run(size_t n, void (*part)(void *, size_t), void *context) override {
    ++runs, parts += n;
    for (size_t i = n; i-- > 0;) part(context, i);
  }
};

// Random elements of type T (finite for floating types); half types as bits through `to_bits`.
template <class T>
std::vector<unsigned char> random_bytes_of(size_t count, uint32_t seed, uint16_t (*to_bits)(float) = nullptr) {
  std::mt19937_64 gen(seed);
  std::vector<unsigned char> bytes(count * sizeof(T));
  for (size_t i = 0; i < count; ++i) {
    T v;
    if (to_bits) {
      v = static_cast<T>(to_bits(static_cast<float>(std::normal_distribution<double>(1.0, 30.0)(gen))));
    } else if constexpr (std::is_floating_point_v<T>) {
      v = static_cast<T>(std::normal_distribution<double>(1.0, 30.0)(gen));
    } else {
      v = static_cast<T>(gen());
    }
    std::memcpy(bytes.data() + i * sizeof(T), &v, sizeof(T));
  }
  return bytes;
}

void expect_same_whoever_reads(const std::vector<unsigned char> &bytes, dtype t, const char *what) {
  const size_t count = bytes.size() / dtype_size(t);
  part_runner two(2), four(4);
  backwards_runner backwards;
  for (bool crc : {false, true}) {
    const tensor_stats alone = tensor_stats_compute(bytes.data(), t, count, false, {.crc32 = crc});
    for (parallel_runner *r : std::initializer_list<parallel_runner *>{&two, &four, &backwards}) {
      const tensor_stats s = tensor_stats_compute(bytes.data(), t, count, false, {.crc32 = crc, .runner = r});
      EXPECT_EQ(s, alone) << what << (crc ? " with CRC" : "");
      // Copied in the same pass (a saved tensor's payload), each part by its reader, to a
      // destination that is not 16-byte aligned: the same numbers and every byte.
      std::vector<unsigned char> copy(bytes.size() + 3, 0xa5);
      const tensor_stats c =
          tensor_stats_compute(bytes.data(), t, count, false, {.crc32 = crc, .runner = r, .copy_to = copy.data() + 3});
      EXPECT_EQ(c, alone) << what << (crc ? " with CRC" : "") << ", copied";
      EXPECT_TRUE(std::equal(bytes.begin(), bytes.end(), copy.begin() + 3)) << what << ": copy differs";
      EXPECT_EQ(copy[0], 0xa5) << what << ": wrote before the destination";
    }
    if (crc) {
      EXPECT_EQ(alone.crc32, crc32_bytes_zlib(bytes.data(), bytes.size())) << what;
    }
  }
  EXPECT_GT(backwards.parts, backwards.runs) << what << ": not read in parts";
}

TEST(PartedStatistics, SameResultWhateverThreadsReadTheParts) {
  // 3.3 MiB: four parts, the last one short; for float32 also 70 MiB: parts grow past 64 of them.
  const size_t bytes = (size_t{33} << 20) / 10;
  expect_same_whoever_reads(random_bytes_of<float>(bytes / 4, 1), dtype::float32, "float32");
  expect_same_whoever_reads(random_bytes_of<double>(bytes / 8, 2), dtype::float64, "float64");
  expect_same_whoever_reads(random_bytes_of<uint16_t>(bytes / 2, 3, float_to_float16), dtype::float16, "float16");
  expect_same_whoever_reads(random_bytes_of<uint16_t>(bytes / 2, 4, float_to_bfloat16), dtype::bfloat16, "bfloat16");
  expect_same_whoever_reads(random_bytes_of<int8_t>(bytes, 5), dtype::int8, "int8");
  expect_same_whoever_reads(random_bytes_of<int32_t>(bytes / 4, 6), dtype::int32, "int32");
  expect_same_whoever_reads(random_bytes_of<int64_t>(bytes / 8, 7), dtype::int64, "int64");
  expect_same_whoever_reads(random_bytes_of<uint8_t>(bytes, 8), dtype::uint8, "uint8");
  expect_same_whoever_reads(random_bytes_of<float>((size_t{70} << 20) / 4 + 5, 9), dtype::float32, "70 MiB float32");
}

// The parts' results combine into the whole tensor's: extremes, counts and sums each sit in a
// different part.
TEST(PartedStatistics, PartsCombineIntoTheWhole) {
  const size_t count = (size_t{5} << 20) / 4;  // five parts of float32
  std::vector<float> v(count, 1.0f);
  v[10] = -7.0f;                    // part 0: the minimum
  v[(1 << 18) + 3] = 9.0f;          // part 1: the maximum
  v[(3 << 18) + 1] = INFINITY;      // part 3: an Inf
  v[count - 1] = -INFINITY;         // part 4: another
  part_runner two(2);
  const tensor_stats s = tensor_stats_compute(v.data(), dtype::float32, count, false, {.runner = &two});
  EXPECT_EQ(s.inf_count, 2u);
  EXPECT_EQ(s.nan_count, 0u);
  EXPECT_EQ(s.max.real, INFINITY);
  EXPECT_EQ(s.min.real, -INFINITY);
  v[(3 << 18) + 1] = 1.0f, v[count - 1] = 1.0f;
  v[(2 << 18) + 5] = NAN;           // part 2: a NaN makes all four NaN
  const tensor_stats n = tensor_stats_compute(v.data(), dtype::float32, count, false, {.runner = &two});
  EXPECT_EQ(n.nan_count, 1u);
  EXPECT_TRUE(std::isnan(n.max.real) && std::isnan(n.mean.real));
  v[(2 << 18) + 5] = 1.0f;
  const tensor_stats f = tensor_stats_compute(v.data(), dtype::float32, count, false, {.runner = &two});
  EXPECT_EQ(f.max.real, 9.0);
  EXPECT_EQ(f.min.real, -7.0);
  const double sum = static_cast<double>(count - 2) + 9.0 - 7.0;
  EXPECT_EQ(f.mean.real, static_cast<double>(static_cast<float>(sum / count)));
}

}  // namespace
}  // namespace tprobe
