// tprobe-example-producer: a stand-in for a training process. It captures a few steps of a small
// network's tensors through the public capture API (tprobe_capture.hpp), as each of `--world-size`
// ranks, so that a pipeline has something real to dump:
//
//   tprobe run pipelines/statistics.json --config examples/config.json --
//       build/bin/tprobe-example-producer --steps 3 --world-size 2
// (one command line)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <thread>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "example_model.h"
#include "tprobe_capture.hpp"

namespace {

struct run_options {
  std::string config, endpoint;
  int64_t steps = 3;
  uint64_t seed = 1;
  int step_ms = 0;          // simulated compute per step
  bool keep_going = false;  // a failed stop/step/close is reported and training goes on
};

using clock_type = std::chrono::steady_clock;

// Times one capture call; the longest is reported at exit, so that a test can tell that no call
// held the "training" longer than the pipeline deadline.
struct call_timer {
  double longest_ms = 0;
  template <typename F>
  void operator()(F &&f) {
    const auto t0 = clock_type::now();
    f();
    longest_ms = std::max(longest_ms, std::chrono::duration<double, std::milli>(clock_type::now() - t0).count());
  }
};

int run_rank(const run_options &o, int rank) {
  using namespace tprobe;
  tprobe_open_options options = tprobe_open_options_default();
  options.rank = rank;
  if (!o.endpoint.empty()) options.endpoint = o.endpoint.c_str();
  call_timer timed;
  std::optional<capture_session> opened;
  try {
    timed([&] { opened.emplace(o.config, options); });
  } catch (const std::exception &e) {
    if (!o.keep_going) throw;
    // The pipeline was gone before this rank connected: train without it, as a script would.
    std::fprintf(stderr, "tprobe-example-producer: open failed, training without capture: %s\n", e.what());
    for (int64_t step = 0; step < o.steps; ++step) std::this_thread::sleep_for(std::chrono::milliseconds(o.step_ms));
    std::fprintf(stderr, "tprobe-example-producer: rank %d: %lld steps, longest capture call %.1f ms\n", rank,
                 static_cast<long long>(o.steps), timed.longest_ms);
    return 0;
  }
  capture_session &session = *opened;
  int failures = 0;
  // What a training script does with a failing debugger call when it wants to go on: say so.
  auto control = [&](const char *what, auto &&call) {
    try {
      timed(call);
    } catch (const std::exception &e) {
      if (!o.keep_going) throw;
      if (failures++ == 0) std::fprintf(stderr, "tprobe-example-producer: %s failed, going on: %s\n", what, e.what());
    }
  };
  const int64_t steps = o.steps;
  const uint64_t seed = o.seed;
  for (int64_t step = 0; step < steps; ++step) {
    if (o.step_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(o.step_ms));
    control("start", [&] { session.start(); });
    std::string current;
    for (auto &it : example::example_step(seed, rank, step)) {
      if (it.entry != current) {
        current = it.entry;
        const std::vector<std::string> stack{
            "File examples/producer.cpp, line 40, in run_rank, \n session.capture(it.entry, it.slot, tensor)",
            "File examples/producer.cpp, line 75, in main, \n return run_rank(config, endpoint, rank, steps, seed)"};
        timed([&] { session.entry_begin(it.entry, nullptr, stack, 0); });
      }
      if (!it.is_tensor) {
        timed([&] { session.capture_value(it.entry, it.slot, it.json); });
        continue;
      }
      DLTensor tensor{};
      tensor.data = it.data.data();
      tensor.device = {kDLCPU, 0};
      tensor.ndim = static_cast<int>(it.shape.size());
      tensor.dtype = {example::element_dl_code(it.type), example::element_bits(it.type), 1};
      tensor.shape = it.shape.data();
      timed([&] { session.capture(it.entry, it.slot, tensor, it.requires_grad); });
    }
    control("stop", [&] { session.stop(); });
    control("step", [&] { session.step(); });
  }
  control("close", [&] { session.close(); });
  std::fprintf(stderr, "tprobe-example-producer: rank %d: %lld steps, longest capture call %.1f ms\n", rank,
               static_cast<long long>(steps), timed.longest_ms);
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  CLI::App app{"emit a few steps of example tensors through the tprobe capture API", "tprobe-example-producer"};
  run_options o;
  int world_size = 1;
  app.add_option("--config", o.config, "msprobe config.json (default: $TPROBE_CONFIG)");
  app.add_option("--endpoint", o.endpoint, "pipeline endpoint (default: $TPROBE_ENDPOINT)");
  app.add_option("--steps", o.steps, "steps to run")->check(CLI::NonNegativeNumber);
  app.add_option("--world-size", world_size, "ranks, each a process; 1 = not distributed")->check(CLI::PositiveNumber);
  app.add_option("--seed", o.seed, "seed of the example values");
  app.add_option("--step-ms", o.step_ms, "simulated compute per step, in ms")->check(CLI::NonNegativeNumber);
  app.add_flag("--keep-going", o.keep_going, "report a failed stop/step/close once and go on (as training would)");
  CLI11_PARSE(app, argc, argv);

  try {
    if (world_size == 1) return run_rank(o, -1);
    std::vector<pid_t> children;
    for (int rank = 0; rank < world_size; ++rank) {
      const pid_t pid = fork();
      if (pid < 0) {
        std::perror("tprobe-example-producer: fatal: unable to fork");
        return 111;
      }
      if (pid == 0) {
        try {
          _exit(run_rank(o, rank));
        } catch (const std::exception &e) {
          std::fprintf(stderr, "tprobe-example-producer: fatal: rank %d: %s\n", rank, e.what());
          _exit(111);
        }
      }
      children.push_back(pid);
    }
    int failed = 0;
    for (pid_t pid : children) {
      int status = 0;
      waitpid(pid, &status, 0);
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 111;
    }
    return failed;
  } catch (const std::exception &e) {
    std::fprintf(stderr, "tprobe-example-producer: fatal: %s\n", e.what());
    return 111;
  }
}
