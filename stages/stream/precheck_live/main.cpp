// tprobe-precheck-live: see precheck_live.h.
#include <fmt/format.h>

#include "precheck_live.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-precheck-live", [&] {
    precheck::precheck_tune_allocator();
    const auto &d = precheck_live_stage_description();
    CLI::App app{d.summary, "tprobe-precheck-live"};
    stage_common_args common;
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_common_options(app, d, common);
    stage_add_declared_options(app, d, values);
    stage_parse(app, argc, argv);
    stage_check_declared_options(d, values);
    precheck_live_options o;
    o.output_dir = values.text("output-dir");
    o.jobs = static_cast<unsigned>(values.integer("jobs"));
    o.max_buffer_bytes = static_cast<uint64_t>(values.integer("max-buffer-mib")) << 20;
    o.run = precheck::precheck_run_options_of(values);
    o.log = stdout;

    stage_install_signal_handlers();
    zmq::context_t ctx;
    stage_io io(ctx, common.io);
    stage_signal_ready(common.ready_fd);
    const auto r = precheck_live_run(io, o);

    const auto &c = r.counts;
    fmt::print("tprobe-precheck-live: {} APIs: {} pass, {} warning, {} error, {} SKIP", c.total(), c.pass, c.warning,
               c.error, c.skip);
    for (const auto &f : r.folders) fmt::print("; {}", f.result_csv);
    fmt::print("\n");
    if (r.fell_behind > 0)
      fmt::print("tprobe-precheck-live: {} APIs not checked (fell behind: more than {} MiB of tensors waited for the "
                 "replay)\n", r.fell_behind, o.max_buffer_bytes >> 20);
    fmt::print(stderr, "tprobe-precheck-live: {} records, {} API calls, {} producers, {} truncated{}\n", r.records,
               r.apis, io.counts().producers, io.counts().truncated_producers, io.interrupted() ? ", interrupted" : "");
    return static_cast<int>(c.failed() ? EXIT_NEGATIVE : EXIT_OK);
  });
}
