// bench_pipeline.cpp: throughput and latency of the capture -> stats -> writer pipeline, in one
// process, reported against a memcpy bandwidth baseline measured in the same run.
//
//   tprobe-bench-pipeline [--records N] [--steps N] [--big-count N] [--big-mib N]
//                         [--lat-count N] [--memcpy-reps N] [--queue-mib N] [--keep]
//
// All links are ipc:// endpoints in a fresh temporary directory: the capture session creates its
// own ZeroMQ context, so inproc:// cannot reach the stages from it.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <dlpack/dlpack.h>
#include <zmq.hpp>

#include "stage_io.h"
#include "common/stage_main.h"
#include "stats/stats.h"
#include "tprobe_capture.h"
#include "writer/writer.h"

namespace {

using clock_type = std::chrono::steady_clock;

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// CPU seconds of the calling thread, or of the whole process: where the records/s rows spend
// their CPU (the stages here are threads, so the process's CPU less theirs is the capture's
// sender and ZeroMQ's I/O threads).
double cpu_seconds(clockid_t clock) {
  timespec ts{};
  clock_gettime(clock, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

struct args {
  long records = 50000;    // 1 KiB tensors through capture -> stats -> writer (was 2000 while long streams hung at
                           // their end: fixed, docs/performance-history.md "The end-of-stream fix")
  long steps = 100;
  long big_count = 200;    // large tensors through capture -> stats -> null sink
  long big_mib = 16;
  long lat_count = 20000;  // capture calls timed per size
  long memcpy_reps = 20;
  long queue_mib = 0;      // the capture's queue and shared-memory ring; 0: its default (256 MiB)
  bool keep = false;
};

args parse(int argc, char **argv) {
  args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto next = [&]() -> long {
      if (i + 1 >= argc) throw std::runtime_error("missing value after " + k);
      return std::stol(argv[++i]);
    };
    if (k == "--records") a.records = next();
    else if (k == "--steps") a.steps = next();
    else if (k == "--big-count") a.big_count = next();
    else if (k == "--big-mib") a.big_mib = next();
    else if (k == "--lat-count") a.lat_count = next();
    else if (k == "--memcpy-reps") a.memcpy_reps = next();
    else if (k == "--queue-mib") a.queue_mib = next();
    else if (k == "--keep") a.keep = true;
    else if (k == "-h" || k == "--help") {
      std::printf("usage: %s [--records N] [--steps N] [--big-count N] [--big-mib N] [--lat-count N] "
                  "[--memcpy-reps N] [--queue-mib N] [--keep]\n(a count of 0 leaves its rows out; --queue-mib: the "
                  "capture's queue and shared-memory ring, default 256)\n", argv[0]);
      std::exit(0);
    } else throw std::runtime_error("unknown argument " + k);
  }
  if (a.steps < 1) a.steps = 1;
  return a;
}

void check(int rc, const char *what) {
  if (rc == TPROBE_ERROR) throw std::runtime_error(std::string(what) + ": " + tprobe_last_error());
}

// 1. memcpy bandwidth, best of reps, 16 MiB.
double memcpy_gbps(size_t bytes, long reps) {
  std::vector<char> src(bytes), dst(bytes);
  std::memset(src.data(), 1, bytes);
  std::memset(dst.data(), 2, bytes);
  double best = 1e30;
  for (long r = 0; r < reps; ++r) {
    auto t0 = clock_type::now();
    std::memcpy(dst.data(), src.data(), bytes);
    double s = seconds_since(t0);
    best = std::min(best, s);
    asm volatile("" ::"r"(dst.data()) : "memory");
  }
  return bytes / best / 1e9;
}

// The same copy into each of 16 destinations in turn (256 MiB for 16 MiB): what a copy into a
// ring that cycles through memory larger than the cache costs (the source stays hot, as a
// tensor just computed is). Best of `rounds` passes over the destinations.
double memcpy_rotating_gbps(size_t bytes, long rounds) {
  constexpr int destinations = 16;
  std::vector<char> src(bytes);
  std::memset(src.data(), 1, bytes);
  std::vector<std::vector<char>> dst(destinations, std::vector<char>(bytes, 2));
  double best = 1e30;
  for (long r = 0; r < rounds; ++r) {
    auto t0 = clock_type::now();
    for (auto &d : dst) {
      std::memcpy(d.data(), src.data(), bytes);
      asm volatile("" ::"r"(d.data()) : "memory");
    }
    best = std::min(best, seconds_since(t0));
  }
  return static_cast<double>(bytes) * destinations / best / 1e9;
}

// --queue-mib, for every pipeline of the run (0: the capture's default).
size_t queue_bytes = 0;

struct pipeline_result {
  double seconds = 0;   // first capture to last stage exit
  double warmup_seconds = 0;  // the untimed first pass (run_pipeline's `warmup`), through its barrier
  uint64_t received = 0;  // records reaching the end (writer records or sink count)
  tprobe_session_counts counts{};
  std::vector<double> latencies_ns;  // per capture call, when asked for
  std::vector<double> step_ns;       // per step() call
  // CPU seconds: the capturing thread (capture calls, start/stop/step), each stage's thread,
  // and the whole process over the run (the rest is the sender and ZeroMQ's I/O threads).
  double cpu_capture = 0, cpu_stats = 0, cpu_sink = 0, cpu_process = 0;
};

// Runs capture -> stats -> (writer | null sink) with `n` tensors of `elems` float32 over `steps`.
// Each stage has a tap nobody watches, as the launcher and the direct pipeline give every stage.
// `tensor_task`: the config's task is "tensor" (every payload saved) rather than "statistics".
// `with_stats` false: capture -> writer, as pipelines/statistics.json runs it.
// `warmup`: that many tensors first, in a step of their own whose barrier returns before the clock
// starts: a session's first pass through fresh memory (the shared-memory ring, the stage's mapping
// of it) costs a page fault a page, once per session, and is reported on its own.
pipeline_result run_pipeline(const std::string &dir, bool writer, long n, size_t elems, long steps,
                             tprobe_stats_mode mode, bool time_calls, bool async_dump = false,
                             bool tensor_task = false, bool with_stats = true, long warmup = 0) {
  static int run_id = 0;
  ++run_id;
  const std::string stats_ep = "ipc://" + dir + "/stats" + std::to_string(run_id);
  const std::string sink_ep = "ipc://" + dir + "/sink" + std::to_string(run_id);
  const std::string dump = dir + "/dump" + std::to_string(run_id);
  const std::string config = dir + "/config" + std::to_string(run_id) + ".json";
  {
    std::ofstream f(config);
    const char *task = tensor_task ? "tensor" : "statistics";
    f << R"({"task":")" << task << R"(","dump_path":")" << dump << R"(","async_dump":)"
      << (async_dump ? "true" : "false") << R"(,"level":"L1",")" << task
      << R"(":{"scope":[],"list":[],"data_mode":["all"],"summary_mode":"statistics"}})";
  }

  zmq::context_t ctx;
  pipeline_result res;
  std::exception_ptr err_sink, err_stats;
  uint64_t sink_count = 0;

  std::promise<void> sink_ready, stats_ready;
  std::thread sink_thread([&] {
    try {
      tprobe::stage_io_options o;
      o.input = sink_ep;
      o.producers = 1;
      o.producer_name = writer ? "bench-writer" : "bench-sink";
      o.tap = "ipc://" + dir + "/sink-tap" + std::to_string(run_id);  // as tprobe run gives every stage
      tprobe::stage_io io(ctx, o);
      sink_ready.set_value();
      const double cpu0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
      struct at_exit {
        double cpu0;
        double &out;
        ~at_exit() { out = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - cpu0; }
      } account{cpu0, res.cpu_sink};
      if (writer) {
        tprobe::writer_stage_options wo;
        wo.dump_path = dump;
        auto r = tprobe::writer_run(io, wo);
        sink_count = r.records;
      } else {
        while (io.receive()) ++sink_count;
      }
    } catch (...) {
      err_sink = std::current_exception();
      try { sink_ready.set_value(); } catch (...) {}
    }
  });
  sink_ready.get_future().wait();
  if (err_sink) { sink_thread.join(); std::rethrow_exception(err_sink); }

  std::thread stats_thread([&] {
    if (!with_stats) {
      stats_ready.set_value();
      return;
    }
    try {
      tprobe::stage_io_options o;
      o.input = stats_ep;
      o.producers = 1;
      o.outputs = {sink_ep};
      o.producer_name = "bench-stats";
      o.tap = "ipc://" + dir + "/stats-tap" + std::to_string(run_id);
      tprobe::stage_io io(ctx, o);
      stats_ready.set_value();
      const double cpu0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
      tprobe::stats_run(io, tprobe::stats_stage_options{});
      res.cpu_stats = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - cpu0;
    } catch (const std::exception &e) {
      std::fprintf(stderr, "stats stage failed: %s\n", e.what());
      err_stats = std::current_exception();
      try { stats_ready.set_value(); } catch (...) {}
    } catch (...) {
      err_stats = std::current_exception();
      try { stats_ready.set_value(); } catch (...) {}
    }
  });
  stats_ready.get_future().wait();
  if (err_stats) { stats_thread.join(); sink_thread.join(); std::rethrow_exception(err_stats); }

  std::vector<float> data(elems);
  std::mt19937 rng(42);
  std::uniform_real_distribution<float> dist(-1.f, 1.f);
  for (auto &x : data) x = dist(rng);
  int64_t shape[1] = {static_cast<int64_t>(elems)};
  DLTensor t{};
  t.data = data.data();
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = shape;
  t.strides = nullptr;
  t.byte_offset = 0;

  tprobe_open_options opts = tprobe_open_options_default();
  const std::string ep = with_stats ? stats_ep : sink_ep;
  opts.endpoint = ep.c_str();
  opts.stats_mode = mode;
  opts.queue_bytes = queue_bytes;  // 0: the capture's default
  tprobe_session *s = nullptr;
  check(tprobe_session_open(config.c_str(), &opts, &s), "tprobe_session_open");

  if (time_calls) res.latencies_ns.reserve(n);
  const long per_step = (n + steps - 1) / steps;
  std::vector<std::string> names(per_step);
  for (long i = 0; i < per_step; ++i) names[i] = "Functional.relu." + std::to_string(i) + ".forward";

  if (warmup > 0) {
    const auto w0 = clock_type::now();
    check(tprobe_start(s), "tprobe_start");
    for (long i = 0; i < warmup; ++i) {
      const std::string name = "Functional.warmup." + std::to_string(i) + ".forward";
      check(tprobe_capture_tensor(s, name.c_str(), "output.0", &t, 0), "tprobe_capture_tensor");
    }
    check(tprobe_stop(s), "tprobe_stop");
    check(tprobe_step(s), "tprobe_step");
    res.warmup_seconds = seconds_since(w0);
  }

  auto t0 = clock_type::now();
  const double cpu_capture0 = cpu_seconds(CLOCK_THREAD_CPUTIME_ID);
  const double cpu_process0 = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID);
  long done = 0;
  for (long st = 0; st < steps && done < n; ++st) {
    check(tprobe_start(s), "tprobe_start");
    for (long i = 0; i < per_step && done < n; ++i, ++done) {
      if (time_calls) {
        // Training computes between two captures; without a gap the producer outruns the
        // pipeline and every call lands on a queue that only grows (fresh, page-faulting buffers),
        // which is a throughput test, not a latency one. The gap offers at most 1 GB/s.
        const auto gap = std::chrono::nanoseconds(std::max<long>(10000, static_cast<long>(elems * 4)));
        for (auto until = clock_type::now() + gap; clock_type::now() < until;) {
        }
        auto c0 = clock_type::now();
        int rc = tprobe_capture_tensor(s, names[i].c_str(), "output.0", &t, 0);
        auto c1 = clock_type::now();
        check(rc, "tprobe_capture_tensor");
        res.latencies_ns.push_back(std::chrono::duration<double, std::nano>(c1 - c0).count());
      } else {
        check(tprobe_capture_tensor(s, names[i].c_str(), "output.0", &t, 0), "tprobe_capture_tensor");
      }
    }
    check(tprobe_stop(s), "tprobe_stop");
    const auto s0 = clock_type::now();
    check(tprobe_step(s), "tprobe_step");
    res.step_ns.push_back(std::chrono::duration<double, std::nano>(clock_type::now() - s0).count());
  }
  tprobe_session_counts_get(s, &res.counts);
  check(tprobe_session_close(s), "tprobe_session_close");
  res.cpu_capture = cpu_seconds(CLOCK_THREAD_CPUTIME_ID) - cpu_capture0;
  stats_thread.join();
  sink_thread.join();
  res.seconds = seconds_since(t0);
  res.cpu_process = cpu_seconds(CLOCK_PROCESS_CPUTIME_ID) - cpu_process0;
  if (err_stats) std::rethrow_exception(err_stats);
  if (err_sink) std::rethrow_exception(err_sink);
  res.received = sink_count;
  return res;
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(p * (v.size() - 1) + 0.5);
  return v[std::min(i, v.size() - 1)];
}

// Per-call memcpy latency of `bytes` (same timer as the capture calls), into `destinations`
// buffers in turn: 1 is a copy between two cache-hot buffers; many (8 MiB in all) is the copy
// a capture makes, into a buffer that then leaves the thread and is cold when it comes back.
std::vector<double> memcpy_latencies(size_t bytes, long n, size_t destinations) {
  std::vector<char> src(bytes, 1);
  std::vector<std::vector<char>> dst(destinations, std::vector<char>(bytes, 2));
  std::vector<double> lat;
  lat.reserve(n);
  for (long i = 0; i < n; ++i) {
    char *d = dst[static_cast<size_t>(i) % destinations].data();
    auto c0 = clock_type::now();
    std::memcpy(d, src.data(), bytes);
    asm volatile("" ::"r"(d) : "memory");
    auto c1 = clock_type::now();
    lat.push_back(std::chrono::duration<double, std::nano>(c1 - c0).count());
  }
  return lat;
}

}  // namespace

int main(int argc, char **argv) try {
  tprobe::stage_tune_allocator();  // the stage threads here stand for stage processes
  const args a = parse(argc, argv);
  queue_bytes = static_cast<size_t>(a.queue_mib) << 20;
  // $TMPDIR, as mkdtemp(1) reads it: a tmpfs there keeps the file system's metadata costs (see
  // docs/performance.md, "A deleted dump slows the next file creations") out of the figures.
  const char *tmpdir = std::getenv("TMPDIR");
  std::string tmpl = std::string(tmpdir && *tmpdir ? tmpdir : "/tmp") + "/tprobe-bench-XXXXXX";
  if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed in " + tmpl);
  const std::string dir = tmpl;
  auto total0 = clock_type::now();

  std::printf("tprobe pipeline benchmark (tmp dir %s, %u hardware threads)\n", dir.c_str(),
              std::thread::hardware_concurrency());

  // 1. baseline
  const size_t mc_bytes = 16u << 20;
  const double mc = memcpy_gbps(mc_bytes, a.memcpy_reps);
  std::printf("memcpy GB/s (16 MiB, best of %ld): %.2f\n", a.memcpy_reps, mc);
  const double mc_rotating = memcpy_rotating_gbps(mc_bytes, 3);
  std::printf("memcpy GB/s (16 MiB into 16 rotating buffers, 256 MiB, best of 3): %.2f\n", mc_rotating);
  std::fflush(stdout);

  // 2. records/s, 1 KiB float32, capture -> stats -> writer: as a capture sends them by default
  // (statistics in place, numbers only: tprobe-stats passes whole batches on), and with the
  // statistics left to the stage (COPY: every record decoded, computed and re-encoded there).
  if (a.records > 0) {
    constexpr double goal = 300000;  // issue 16 item 3 (an earlier issue's 200k)
    // The third run: capture -> writer, the shipped statistics pipeline (pipelines/statistics.json).
    // Every run but the last waits at each step() for the writer's files (the step barrier, the
    // default); the last is the first without it (async_dump), so that the two say how much of a
    // row is the pipeline's throughput and how much the barrier's round trip at each step's end.
    struct records_run {
      tprobe_stats_mode mode;
      bool with_stats;
      bool async_dump;
      const char *what;
    };
    for (const auto &[mode, with_stats, async_dump, what] :
         {records_run{TPROBE_STATS_AUTO, true, false, "capture->stats->writer, statistics in place"},
          records_run{TPROBE_STATS_COPY, true, false, "capture->stats->writer, statistics in the stage"},
          records_run{TPROBE_STATS_AUTO, false, false, "capture->writer as pipelines/statistics.json, statistics in place"},
          records_run{TPROBE_STATS_AUTO, true, true,
                      "capture->stats->writer, statistics in place, async_dump: no step barrier"}}) {
      auto r = run_pipeline(dir, true, a.records, 256, a.steps, mode, false, async_dump, false, with_stats);
      const double rps = a.records / r.seconds;
      std::printf("records/s (1 KiB, %s): %.0f  (goal >= %.0f) %s  "
                  "[%ld tensors, %ld steps, %.3f s, writer records %llu, capture waits %llu]\n",
                  what, rps, goal,
                  rps >= goal ? "MET" : "NOT MET", a.records, a.steps, r.seconds,
                  static_cast<unsigned long long>(r.received), static_cast<unsigned long long>(r.counts.waits));
      // Which thread bounds the row: on 2 cores the busiest one, or the sum over 2.
      const double us = 1e6 / static_cast<double>(a.records);
      std::printf("  CPU us a record: capture thread %.2f, stats %.2f, writer %.2f, sender and ZeroMQ I/O %.2f; "
                  "all %.2f (%.2f cores busy); step() p50 %.3f ms, all of them %.0f%% of the run\n",
                  r.cpu_capture * us, r.cpu_stats * us, r.cpu_sink * us,
                  (r.cpu_process - r.cpu_capture - r.cpu_stats - r.cpu_sink) * us, r.cpu_process * us,
                  r.cpu_process / r.seconds, percentile(r.step_ns, 0.5) / 1e6,
                  100 * std::accumulate(r.step_ns.begin(), r.step_ns.end(), 0.0) / 1e9 / r.seconds);
      std::fflush(stdout);
    }
  }

  // 3. GB/s, large float32, capture -> stats -> null sink: statistics left to the stage (COPY)
  // with the payloads through shared memory (transport/shm.h, the default on one host) and over
  // the ipc socket (TPROBE_SHM=off) for comparison; a tensor task's saved payloads (statistics
  // taken in the copy's pass, through shared memory); and nothing leaving (AUTO: in place).
  const size_t big_elems = static_cast<size_t>(a.big_mib) * (1u << 20) / 4;
  for (int variant = 0; variant < (a.big_count > 0 ? 4 : 0); ++variant) {
    const auto mode = variant < 3 ? TPROBE_STATS_COPY : TPROBE_STATS_AUTO;
    const bool tensor_task = variant == 2;
    if (variant == 1) setenv("TPROBE_SHM", "off", 1);
    const long steps = std::min<long>(a.steps, std::max<long>(1, a.big_count / 10));
    // The timed tensors run through memory already touched: twice round the ring (the capture
    // writes it, the stage reads it through its own mapping), as a training run's second step
    // and later do. That first pass is a per-session cost, printed on its own line.
    const size_t ring_bytes = queue_bytes ? queue_bytes : size_t{256} << 20;
    const long warmup = mode == TPROBE_STATS_COPY ? static_cast<long>(2 * ring_bytes / (big_elems * 4) + 2) : 0;
    auto r = run_pipeline(dir, false, a.big_count, big_elems, steps, mode, false, false, tensor_task, true, warmup);
    if (variant == 1) unsetenv("TPROBE_SHM");
    const double gbps = static_cast<double>(a.big_count) * big_elems * 4 / r.seconds / 1e9;
    const double ratio = gbps / mc;
    static const char *const copy_variants[] = {"COPY, shared memory", "COPY, ipc socket",
                                                "tensor task, saved, shared memory"};
    if (mode == TPROBE_STATS_COPY)
      std::printf("GB/s (%ld MiB, capture->stats, %s): %.2f  = %.2fx memcpy  (goal >= 0.5x) %s; "
                  "%.2fx the rotating copy  [%ld tensors, %.3f s, sink records %llu, by reference %.0f%%, "
                  "ring gave up %llu]\n",
                  a.big_mib, copy_variants[variant], gbps, ratio,
                  ratio >= 0.5 ? "MET" : "NOT MET", gbps / mc_rotating, a.big_count, r.seconds,
                  static_cast<unsigned long long>(r.received),
                  r.counts.bytes ? 100.0 * static_cast<double>(r.counts.shared_bytes) / r.counts.bytes : 0.0,
                  static_cast<unsigned long long>(r.counts.shared_gave_up));
    if (warmup > 0)
      std::printf("  untimed before it: the first %ld tensors (twice the %zu MiB queue and ring: memory each "
                  "process touches here for the first time): %.3f s = %.2f GB/s\n",
                  warmup, ring_bytes >> 20, r.warmup_seconds,
                  static_cast<double>(warmup) * big_elems * 4 / r.warmup_seconds / 1e9);
    else
      std::printf("GB/s (%ld MiB, capture->stats, AUTO in-place): %.2f  = %.2fx memcpy  (goal >= 0.5x) %s  "
                  "[%ld tensors, %.3f s, sink records %llu]\n",
                  a.big_mib, gbps, ratio, ratio >= 0.5 ? "MET" : "NOT MET", a.big_count, r.seconds,
                  static_cast<unsigned long long>(r.received));
    std::fflush(stdout);
  }

  // 4. capture-call latency, COPY mode, producer thread
  for (size_t bytes : {size_t{1024}, size_t{64 * 1024}}) {
    if (a.lat_count <= 0) break;
    const long n = bytes > 1024 ? std::max<long>(1, a.lat_count / 4) : a.lat_count;
    auto r = run_pipeline(dir, false, n, bytes / 4, std::min<long>(a.steps, n), TPROBE_STATS_COPY, true);
    auto hot = memcpy_latencies(bytes, n, 1);
    auto cold = memcpy_latencies(bytes, n, std::max<size_t>(1, (size_t{8} << 20) / bytes));
    const double p50 = percentile(r.latencies_ns, 0.5) / 1e3, p99 = percentile(r.latencies_ns, 0.99) / 1e3;
    const double hot50 = percentile(hot, 0.5) / 1e3, cold50 = percentile(cold, 0.5) / 1e3;
    const double over = p50 - cold50;
    std::printf("capture latency (%zu KiB, COPY): p50 %.2f us  p99 %.2f us  memcpy p50 %.2f us into rotating "
                "buffers, %.2f us hot  (goal: p50 within 2 us of the copy: +%.2f us) %s  [%ld calls, capture "
                "waits %llu]\n",
                bytes / 1024, p50, p99, cold50, hot50, over, over <= 2.0 ? "MET" : "NOT MET", n,
                static_cast<unsigned long long>(r.counts.waits));
    std::fflush(stdout);
  }

  // 5. what the step barrier costs: step() returns once the writer has written the step's files
  // (issue 12), against async_dump, whose step() only queues the step's end. Per step: 100
  // entries of 1 KiB, the dump.json of a small model.
  {
    const long steps = std::max<long>(20, a.steps / 2), per_step = 100;
    auto sync = run_pipeline(dir, true, steps * per_step, 256, steps, TPROBE_STATS_COPY, false, false);
    auto async = run_pipeline(dir, true, steps * per_step, 256, steps, TPROBE_STATS_COPY, false, true);
    const double sync50 = percentile(sync.step_ns, 0.5) / 1e6, async50 = percentile(async.step_ns, 0.5) / 1e6;
    std::printf("step() with barrier: p50 %.2f ms  p99 %.2f ms; async_dump: p50 %.3f ms  (+%.2f ms per step, "
                "%ld entries per step; whole run %.3f s vs %.3f s = %.2fx)\n",
                sync50, percentile(sync.step_ns, 0.99) / 1e6, async50, sync50 - async50, per_step, sync.seconds,
                async.seconds, sync.seconds / async.seconds);
    std::fflush(stdout);
  }

  std::printf("total wall time: %.1f s\n", seconds_since(total0));
  if (!a.keep) std::filesystem::remove_all(dir);
  return 0;
} catch (const std::exception &e) {
  std::fprintf(stderr, "tprobe-bench-pipeline: %s\n", e.what());
  return 1;
}
