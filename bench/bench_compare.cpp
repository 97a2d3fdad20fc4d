// tprobe-bench-compare: throughput of the offline compare (tools/compare/compare.h) on a generated
// dump pair, against memcpy bandwidth measured in the same run.
//
//   tprobe-bench-compare [--mib-per-side N] [--tensor-mib N] [--threads N] [--memcpy-reps N] [--keep]
//
// Writes two tensor dumps (task "tensor", float32 .npy files, N MiB per side in tensors of
// --tensor-mib MiB; the bench side is the NPU side with small noise) into a mkdtemp folder under
// $TMPDIR (or /tmp), runs compare_run() on them as `tprobe compare` does (parse, match, memory-map
// and compare every pair on a thread pool, write xlsx/csv/json/advisor), and prints
//   GB/s = bytes of tensor data compared, both sides, per second of compare_run() wall time
// next to the memcpy GB/s of a 256 MiB buffer (bytes copied per second, best of --memcpy-reps).
// The files were just written, so they are in the page cache: this measures the compare, not the
// disk. The folder is deleted at the end unless --keep.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <thread>
#include <vector>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include "compare/compare.h"
#include "npy.h"
#include "safe_path.h"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t) { return std::chrono::duration<double>(clock_type::now() - t).count(); }

// CPU seconds (user, system) this process used so far, all threads.
std::pair<double, double> cpu_seconds() {
  rusage u{};
  ::getrusage(RUSAGE_SELF, &u);
  return {u.ru_utime.tv_sec + u.ru_utime.tv_usec * 1e-6, u.ru_stime.tv_sec + u.ru_stime.tv_usec * 1e-6};
}

double memcpy_gbps(size_t bytes, int reps) {
  std::vector<char> a(bytes, 1), b(bytes, 2);
  double best = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t = clock_type::now();
    std::memcpy(b.data(), a.data(), bytes);
    const double s = seconds_since(t);
    best = std::max(best, bytes / s / 1e9);
    a[static_cast<size_t>(r) % bytes] = b[bytes / 2];  // keep the copies observable
  }
  return best;
}

// Deterministic float32 noise (xorshift): fast enough that generation stays a fraction of the run.
void fill(std::vector<float> &v, uint64_t seed) {
  uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
  for (float &f : v) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    f = static_cast<float>(static_cast<int64_t>(x >> 40) - (1 << 23)) / static_cast<float>(1 << 22);
  }
}

void write_dump(const std::string &dir, size_t tensors, size_t elements, bool bench) {
  std::filesystem::create_directories(dir + "/dump_tensor_data");
  std::vector<float> data(elements);
  std::string json = R"({"task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir": null, "data": {)";
  for (size_t i = 0; i < tensors; ++i) {
    fill(data, i + 1);
    if (bench)
      for (size_t k = 0; k < elements; k += 7) data[k] *= 1.0001f;
    const std::string entry = fmt::format("Functional.linear.{}.forward", i);
    const std::string name = entry + ".output.0.npy";
    const std::vector<int64_t> shape{static_cast<int64_t>(elements / 1024), 1024};
    tprobe::npy_write(dir + "/dump_tensor_data/" + name, tprobe::dtype::float32, shape, std::as_bytes(std::span(data)));
    json += fmt::format(R"({}"{}": {{"input_args": [], "output": [{{"type": "torch.Tensor", "dtype": "torch.float32",
      "shape": [{}, 1024], "Max": 2.0, "Min": -2.0, "Mean": 0.0, "Norm": 1.0, "requires_grad": false,
      "data_name": "{}"}}]}})",
                        i ? ", " : "", entry, elements / 1024, name);
  }
  json += "}}";
  tprobe::atomic_write_file(dir + "/dump.json", json);
}

}  // namespace

int main(int argc, char **argv) {
  CLI::App app{"offline compare throughput on a generated dump pair", "tprobe-bench-compare"};
  size_t mib_per_side = 1024, tensor_mib = 16;
  unsigned threads = 0;
  int memcpy_reps = 10;
  bool keep = false;
  app.add_option("--mib-per-side", mib_per_side, "MiB of tensors per side")->capture_default_str();
  app.add_option("--tensor-mib", tensor_mib, "MiB per tensor")->capture_default_str();
  app.add_option("--threads", threads, "compare threads; 0 = every hardware thread")->capture_default_str();
  app.add_option("--memcpy-reps", memcpy_reps, "memcpy repetitions (best is kept)")->capture_default_str();
  app.add_flag("--keep", keep, "keep the generated dumps");
  CLI11_PARSE(app, argc, argv);

  const char *tmp = std::getenv("TMPDIR");
  std::string root = std::string(tmp && *tmp ? tmp : "/tmp") + "/tprobe-bench-compare.XXXXXX";
  if (!::mkdtemp(root.data())) {
    std::perror("mkdtemp");
    return 111;
  }
  const size_t elements = tensor_mib * 1024 * 1024 / sizeof(float);
  const size_t tensors = std::max<size_t>(1, mib_per_side / tensor_mib);
  const unsigned hw = std::max(1u, std::thread::hardware_concurrency());
  fmt::print("tprobe compare benchmark (dir {}, {} hardware threads)\n", root, hw);
  const double copy = memcpy_gbps(256u << 20, memcpy_reps);
  fmt::print("memcpy GB/s (256 MiB, best of {}): {:.2f}\n", memcpy_reps, copy);

  int status = 0;
  try {
    auto t = clock_type::now();
    write_dump(root + "/npu", tensors, elements, false);
    write_dump(root + "/bench", tensors, elements, true);
    const double both_gb = 2.0 * tensors * elements * sizeof(float) / 1e9;
    ::sync();  // write the dirty pages back now, so writeback does not run during the timed compares
    fmt::print("generated: 2 x {} float32 tensors of {} MiB = {:.2f} GB of tensor data in {:.1f} s\n", tensors, tensor_mib,
               both_gb, seconds_since(t));

    // All threads, then one (for scale), then all threads again (the machine may be shared: the
    // figures of both runs are printed).
    const unsigned all = threads == 0 ? hw : threads;
    std::vector<unsigned> runs{all};
    if (all != 1) runs.insert(runs.end(), {1u, all});
    for (const unsigned n : runs) {
      tprobe::compare_options o;
      o.npu_path = root + "/npu/dump.json";
      o.bench_path = root + "/bench/dump.json";
      o.output_dir = root + fmt::format("/out{}", n);
      o.threads = n;
      const auto cpu0 = cpu_seconds();
      t = clock_type::now();
      const auto report = tprobe::compare_run(o);
      const double s = seconds_since(t);
      const auto cpu1 = cpu_seconds();
      const double user = cpu1.first - cpu0.first, sys = cpu1.second - cpu0.second;
      const auto &p = report.pairs.at(0);
      const double gbps = p.tensor_bytes / s / 1e9;
      fmt::print("GB/s compared ({} thread{}, both sides, whole compare_run): {:.2f} = {:.3f}x memcpy  "
                 "(goal >= 1 GB/s on 2 cores) {}  [{:.2f} GB in {:.2f} s, {} rows, {} failing]\n",
                 n, n == 1 ? "" : "s", gbps, gbps / copy, gbps >= 1.0 ? "MET" : "NOT MET", p.tensor_bytes / 1e9, s,
                 p.rows, p.failing);
      // On a shared machine the wall time includes waiting for a core; the CPU time does not.
      fmt::print("  cpu: user {:.2f} s + sys {:.2f} s = {:.2f} GB per CPU-second; with {} idle core{}: {:.2f} GB/s\n",
                 user, sys, p.tensor_bytes / 1e9 / (user + sys), n, n == 1 ? "" : "s",
                 p.tensor_bytes / 1e9 / ((user + sys) / n));
    }
  } catch (const std::exception &e) {
    fmt::print(stderr, "tprobe-bench-compare: fatal: {}\n", e.what());
    status = 111;
  }
  if (!keep) std::filesystem::remove_all(root);
  return status;
}
