// bench_crc.cpp: CRC-32 (summary_mode md5) throughput against one read pass over the same memory,
// measured in the same run: the goal is a checksum at memory speed (issue 16). Then statistics
// with and without CRC as the capture reads a large tensor: in parts, on the calling thread and
// the capture's helper (core/part_runner.h), against the calling thread alone; and statistics
// over data in L2, against a read pass over the same.
//
//   tprobe-bench-crc [--mib N] [--reps N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "part_runner.h"
#include "tensor_stats.h"

namespace {

using clock_type = std::chrono::steady_clock;

template <class F>
double best_gbps(size_t bytes, int reps, F &&f) {
  double best = 1e30;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = clock_type::now();
    f();
    best = std::min(best, std::chrono::duration<double>(clock_type::now() - t0).count());
  }
  return static_cast<double>(bytes) / best / 1e9;
}

}  // namespace

int main(int argc, char **argv) {
  size_t mib = 256;
  int reps = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--mib")) mib = std::strtoul(argv[i + 1], nullptr, 10);
    else if (!std::strcmp(argv[i], "--reps")) reps = std::atoi(argv[i + 1]);
  }
  const size_t bytes = mib << 20;
  std::vector<float> data(bytes / 4);
  for (size_t i = 0; i < data.size(); ++i) data[i] = static_cast<float>(i % 1000) * 0.001f;
  // The baseline: one vectorised read pass (integer sum: no floating-point order to keep).
  volatile uint64_t sink = 0;
  const auto *words = reinterpret_cast<const uint64_t *>(data.data());
  const double read = best_gbps(bytes, reps, [&] {
    uint64_t acc = 0;
    for (size_t i = 0; i < bytes / 8; ++i) acc += words[i];
    sink = acc;
  });
  uint32_t crc_fast = 0, crc_zlib = 0;
  const double fast = best_gbps(bytes, reps, [&] { crc_fast = tprobe::crc32_bytes(data.data(), bytes); });
  const double zlib = best_gbps(bytes, reps, [&] { crc_zlib = tprobe::crc32_bytes_zlib(data.data(), bytes); });
  tprobe::stats_options plain{}, with_crc{.high_precision = false, .crc32 = true};
  const double stats = best_gbps(bytes, reps, [&] {
    (void)tprobe::tensor_stats_compute(data.data(), tprobe::dtype::float32, data.size(), false, plain);
  });
  const double stats_crc = best_gbps(bytes, reps, [&] {
    (void)tprobe::tensor_stats_compute(data.data(), tprobe::dtype::float32, data.size(), false, with_crc);
  });
  // The same over 256 KiB that stay in L2, as the capture reads an operator's output just written:
  // there the pass is bound by its arithmetic (sums in float64), not by memory.
  const size_t cached = std::min<size_t>(bytes, 256 << 10), passes = bytes / cached;
  const double read_cached = best_gbps(cached * passes, reps, [&] {
    uint64_t acc = 0;
    for (size_t p = 0; p < passes; ++p)
      for (size_t i = 0; i < cached / 8; ++i) acc += words[i];
    sink = acc;
  });
  const double stats_cached = best_gbps(cached * passes, reps, [&] {
    for (size_t p = 0; p < passes; ++p)
      (void)tprobe::tensor_stats_compute(data.data(), tprobe::dtype::float32, cached / 4, false, plain);
  });
  tprobe::part_runner runner(2);
  tprobe::stats_options plain2{.runner = &runner}, with_crc2{.crc32 = true, .runner = &runner};
  const double stats2 = best_gbps(bytes, reps, [&] {
    (void)tprobe::tensor_stats_compute(data.data(), tprobe::dtype::float32, data.size(), false, plain2);
  });
  const double stats_crc2 = best_gbps(bytes, reps, [&] {
    (void)tprobe::tensor_stats_compute(data.data(), tprobe::dtype::float32, data.size(), false, with_crc2);
  });
  std::printf("tprobe CRC-32 benchmark (%zu MiB float32, best of %d)\n", mib, reps);
  std::printf("one read pass (u64 sum):    %6.2f GB/s  (baseline)\n", read);
  std::printf("crc32_bytes (tprobe):       %6.2f GB/s  = %.2fx the read pass  %s\n", fast, fast / read,
              crc_fast == crc_zlib ? "(equals zlib)" : "(DIFFERS FROM ZLIB)");
  std::printf("zlib crc32:                 %6.2f GB/s  = %.2fx the read pass\n", zlib, zlib / read);
  std::printf("statistics:                 %6.2f GB/s  = %.2fx the read pass\n", stats, stats / read);
  std::printf("statistics, 256 KiB in L2:  %6.2f GB/s  = %.2fx the read pass over them (%.2f GB/s)\n", stats_cached,
              stats_cached / read_cached, read_cached);
  std::printf("statistics + CRC (md5 mode): %5.2f GB/s  = %.2fx the statistics alone (goal: md5 costs little "
              "more than statistics)\n", stats_crc, stats / stats_crc);
  std::printf("statistics, caller + 1 helper thread (the capture's default): %6.2f GB/s = %.2fx one thread\n",
              stats2, stats2 / stats);
  std::printf("statistics + CRC, caller + 1 helper thread:                 %6.2f GB/s = %.2fx one thread "
              "(%llu of the parts read by the helper)\n", stats_crc2, stats_crc2 / stats_crc,
              static_cast<unsigned long long>(runner.parts_by_helpers()));
  (void)sink;
  return crc_fast == crc_zlib ? 0 : 1;
}
