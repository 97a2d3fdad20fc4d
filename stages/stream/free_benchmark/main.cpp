// tprobe-free-benchmark: see free_benchmark_stage.h.
#include <fmt/format.h>

#include "free_benchmark_stage.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-free-benchmark", [&] {
    const auto &d = free_benchmark_stage_description();
    CLI::App app{d.summary, "tprobe-free-benchmark"};
    stage_common_args common;
    free_benchmark_stage_options o;
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_common_options(app, d, common);
    stage_add_declared_options(app, d, values);
    stage_parse(app, argc, argv);
    stage_check_declared_options(d, values);
    o.dump_path = values.text("dump-path");
    o.log = stderr;  // a row's line the moment it arrives

    stage_install_signal_handlers();
    zmq::context_t ctx;
    stage_io io(ctx, common.io);
    stage_signal_ready(common.ready_fd);
    const auto r = free_benchmark_stage_run(io, o);

    fmt::print(stderr, "tprobe-free-benchmark: {} inconsistent API calls, {} free_benchmark.csv files ({} new), {} records, "
               "{} producers, {} truncated{}\n", r.rows, r.files, r.created, r.records, io.counts().producers,
               io.counts().truncated_producers, io.interrupted() ? ", interrupted" : "");
    return static_cast<int>(EXIT_OK);
  });
}
