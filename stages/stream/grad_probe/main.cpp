// tprobe-grad-probe: see grad_probe_stage.h.
#include <fmt/format.h>

#include "grad_probe_stage.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-grad-probe", [&] {
    const auto &d = grad_probe_stage_description();
    CLI::App app{d.summary, "tprobe-grad-probe"};
    stage_common_args common;
    grad_probe_stage_options o;
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_common_options(app, d, common);
    stage_add_declared_options(app, d, values);
    stage_parse(app, argc, argv);
    stage_check_declared_options(d, values);
    o.dump_path = values.text("dump-path");

    stage_install_signal_handlers();
    zmq::context_t ctx;
    stage_io io(ctx, common.io);
    stage_signal_ready(common.ready_fd);
    const auto r = grad_probe_stage_run(io, o);

    fmt::print(stderr, "tprobe-grad-probe: {} gradients, {} grad_summary csv files, {} direction files, {} records, "
               "{} producers, {} truncated{}\n", r.gradients, r.csv_files, r.npy_files, r.records,
               io.counts().producers, io.counts().truncated_producers, io.interrupted() ? ", interrupted" : "");
    return static_cast<int>(EXIT_OK);
  });
}
