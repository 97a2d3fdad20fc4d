// tprobe-stats: see stats.h.
#include <fmt/format.h>

#include "stats.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-stats", [&] {
    const auto &description = stats_stage_description();
    CLI::App app{description.summary, "tprobe-stats"};
    stage_common_args common;
    stats_stage_options options;
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_common_options(app, description, common);
    stage_add_declared_options(app, description, values);
    stage_parse(app, argc, argv);
    stage_check_declared_options(description, values);
    options.keep_payload = values.flag("keep-payload");
    options.recompute = values.flag("recompute");
    options.threads = static_cast<unsigned>(values.integer("threads"));

    stage_install_signal_handlers();
    zmq::context_t ctx;
    stage_io io(ctx, common.io);
    stage_signal_ready(common.ready_fd);
    const auto result = stats_run(io, options);

    const auto &counts = io.counts();
    fmt::print(stderr,
               "tprobe-stats: {} records ({} tensors, {} computed, {:.1f} MB read; {} passed in whole batches), "
               "{} producers, {} truncated, tap dropped {}{}\n",
               result.records, result.tensors, result.computed, result.payload_bytes / 1e6, counts.passed_unchanged,
               counts.producers,
               counts.truncated_producers, counts.tap_dropped, io.interrupted() ? ", interrupted" : "");
    return EXIT_OK;
  });
}
