// tprobe-example-producer: a stand-in for a training process. It captures a few steps of a small
// network's tensors through the public capture API (tprobe_capture.hpp), as each of `--world-size`
// ranks, so that a pipeline has something real to dump:
//
//   tprobe run pipelines/statistics.json --config examples/config.json --
//       build/bin/tprobe-example-producer --steps 3 --world-size 2
// (one command line)
#include <cstdio>
#include <string>
#include <vector>

#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include "example_model.h"
#include "tprobe_capture.hpp"

namespace {

int run_rank(const std::string &config, const std::string &endpoint, int rank, int64_t steps, uint64_t seed) {
  using namespace tprobe;
  tprobe_open_options options = tprobe_open_options_default();
  options.rank = rank;
  if (!endpoint.empty()) options.endpoint = endpoint.c_str();
  capture_session session(config, options);
  for (int64_t step = 0; step < steps; ++step) {
    session.start();
    std::string current;
    for (auto &it : example::example_step(seed, rank, step)) {
      if (it.entry != current) {
        current = it.entry;
        const std::vector<std::string> stack{
            "File examples/producer.cpp, line 40, in run_rank, \n session.capture(it.entry, it.slot, tensor)",
            "File examples/producer.cpp, line 75, in main, \n return run_rank(config, endpoint, rank, steps, seed)"};
        session.entry_begin(it.entry, nullptr, stack, 0);
      }
      if (!it.is_tensor) {
        session.capture_value(it.entry, it.slot, it.json);
        continue;
      }
      DLTensor tensor{};
      tensor.data = it.data.data();
      tensor.device = {kDLCPU, 0};
      tensor.ndim = static_cast<int>(it.shape.size());
      tensor.dtype = {example::element_dl_code(it.type), example::element_bits(it.type), 1};
      tensor.shape = it.shape.data();
      session.capture(it.entry, it.slot, tensor, it.requires_grad);
    }
    session.stop();
    session.step();
  }
  session.close();
  return 0;
}

}  // namespace

int main(int argc, char **argv) {
  CLI::App app{"emit a few steps of example tensors through the tprobe capture API", "tprobe-example-producer"};
  std::string config, endpoint;
  int64_t steps = 3;
  int world_size = 1;
  uint64_t seed = 1;
  app.add_option("--config", config, "msprobe config.json (default: $TPROBE_CONFIG)");
  app.add_option("--endpoint", endpoint, "pipeline endpoint (default: $TPROBE_ENDPOINT)");
  app.add_option("--steps", steps, "steps to run")->check(CLI::NonNegativeNumber);
  app.add_option("--world-size", world_size, "ranks, each a process; 1 = not distributed")->check(CLI::PositiveNumber);
  app.add_option("--seed", seed, "seed of the example values");
  CLI11_PARSE(app, argc, argv);

  try {
    if (world_size == 1) return run_rank(config, endpoint, -1, steps, seed);
    std::vector<pid_t> children;
    for (int rank = 0; rank < world_size; ++rank) {
      const pid_t pid = fork();
      if (pid < 0) {
        std::perror("tprobe-example-producer: fatal: unable to fork");
        return 111;
      }
      if (pid == 0) {
        try {
          _exit(run_rank(config, endpoint, rank, steps, seed));
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
