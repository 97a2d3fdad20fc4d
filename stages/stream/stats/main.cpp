// tprobe-stats: see stats.h.
#include <fmt/format.h>

#include "stats.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main(argc, argv, stats_stage_description(), [](stage_main_context &c) {
    stats_stage_options options;
    options.keep_payload = c.values().flag("keep-payload");
    options.recompute = c.values().flag("recompute");
    options.threads = static_cast<unsigned>(c.values().integer("threads"));
    stage_io &io = c.start();
    const auto result = stats_run(io, options);

    const auto &counts = io.counts();
    fmt::print(stderr,
               "tprobe-stats: {} records ({} tensors, {} computed, {:.1f} MB read; {} passed in whole batches), "
               "{} producers, {} truncated, tap dropped {}{}\n",
               result.records, result.tensors, result.computed, result.payload_bytes / 1e6, counts.passed_unchanged,
               counts.producers,
               counts.truncated_producers, counts.tap_dropped, io.interrupted() ? ", interrupted" : "");
    return static_cast<int>(EXIT_OK);
  });
}
