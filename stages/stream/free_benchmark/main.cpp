// tprobe-free-benchmark: see free_benchmark_stage.h.
#include <fmt/format.h>

#include "free_benchmark_stage.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main(argc, argv, free_benchmark_stage_description(), [](stage_main_context &c) {
    free_benchmark_stage_options o;
    o.dump_path = c.values().text("dump-path");
    o.log = stderr;  // a row's line the moment it arrives
    stage_io &io = c.start();
    const auto r = free_benchmark_stage_run(io, o);

    fmt::print(stderr, "tprobe-free-benchmark: {} inconsistent API calls, {} free_benchmark.csv files ({} new), {} records, "
               "{} producers, {} truncated{}\n", r.rows, r.files, r.created, r.records, io.counts().producers,
               io.counts().truncated_producers, io.interrupted() ? ", interrupted" : "");
    return static_cast<int>(EXIT_OK);
  });
}
