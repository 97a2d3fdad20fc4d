// tprobe-monitor: see monitor_stage.h.
#include <fmt/format.h>

#include "monitor_stage.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-monitor", [&] {
    const auto &d = monitor_stage_description();
    CLI::App app{d.summary, "tprobe-monitor"};
    stage_common_args common;
    monitor_stage_options o;
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_common_options(app, d, common);
    stage_add_declared_options(app, d, values);
    stage_parse(app, argc, argv);
    stage_check_declared_options(d, values);
    o.output_dir = values.text("output-dir");
    o.log = stderr;  // an alarm's line the moment it fires

    stage_install_signal_handlers();
    zmq::context_t ctx;
    stage_io io(ctx, common.io);
    stage_signal_ready(common.ready_fd);
    const auto r = monitor_stage_run(io, o);

    fmt::print(stderr, "tprobe-monitor: {} anomalies, {} rows in {} csv files, {} TensorBoard scalars, {} rank folders, "
               "{} records, {} producers, {} truncated{}\n", r.anomalies, r.rows, r.csv_paths.size(), r.scalars,
               r.rank_dirs.size(), r.records, io.counts().producers, io.counts().truncated_producers,
               io.interrupted() ? ", interrupted" : "");
    return static_cast<int>(EXIT_OK);
  });
}
