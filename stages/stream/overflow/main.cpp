// tprobe-overflow: see overflow.h.
#include <fmt/format.h>

#include "overflow.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-overflow", [&] {
    const auto &description = overflow_stage_description();
    CLI::App app{description.summary, "tprobe-overflow"};
    stage_common_args common;
    overflow_stage_options options;
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_common_options(app, description, common);
    stage_add_declared_options(app, description, values);
    stage_parse(app, argc, argv);
    stage_check_declared_options(description, values);
    options.overflow_nums = values.integer("overflow-nums");

    stage_install_signal_handlers();
    zmq::context_t ctx;
    stage_io io(ctx, common.io);
    control_sender control(ctx);
    stage_signal_ready(common.ready_fd);
    const auto result = overflow_run(io, control, options);

    const auto &counts = io.counts();
    fmt::print(stderr,
               "tprobe-overflow: {} records, {} calls judged, {} overflowed and passed on, {} records dropped past "
               "overflow_nums, {} captures stopped, {} producers, {} truncated{}\n",
               result.records, result.calls, result.overflow_calls, result.dropped_after_limit, result.stops_sent,
               counts.producers, counts.truncated_producers, io.interrupted() ? ", interrupted" : "");
    return EXIT_OK;
  });
}
