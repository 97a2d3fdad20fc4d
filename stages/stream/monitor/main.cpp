// tprobe-monitor: see monitor_stage.h.
#include <fmt/format.h>

#include "monitor_stage.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main(argc, argv, monitor_stage_description(), [](stage_main_context &c) {
    monitor_stage_options o;
    o.output_dir = c.values().text("output-dir");
    o.log = stderr;  // an alarm's line the moment it fires
    stage_io &io = c.start();
    const auto r = monitor_stage_run(io, o);

    fmt::print(stderr, "tprobe-monitor: {} anomalies, {} rows in {} csv files, {} TensorBoard scalars, {} rank folders, "
               "{} records, {} producers, {} truncated{}\n", r.anomalies, r.rows, r.csv_paths.size(), r.scalars,
               r.rank_dirs.size(), r.records, io.counts().producers, io.counts().truncated_producers,
               io.interrupted() ? ", interrupted" : "");
    return static_cast<int>(EXIT_OK);
  });
}
