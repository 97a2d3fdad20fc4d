// tprobe-nan-live: see nan_live.h.
#include <fmt/format.h>

#include "nan_live.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-nan-live", [&] {
    const auto &d = nan_live_stage_description();
    CLI::App app{d.summary, "tprobe-nan-live"};
    stage_common_args common;
    nan_live_options o;
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_common_options(app, d, common);
    stage_add_declared_options(app, d, values);
    stage_parse(app, argc, argv);
    stage_check_declared_options(d, values);
    o.output_dir = values.text("output-dir");
    const bool stop_capture = values.flag("stop-capture");
    o.log = stdout;

    stage_install_signal_handlers();
    zmq::context_t ctx;
    stage_io io(ctx, common.io);
    control_sender control(ctx);
    if (stop_capture)
      o.on_verdict = [&](const nan_live_verdict &v) {  // the control path of docs/wire-format.md
        record stop(record_kind::control);
        stop.header.meta = {{"command", "stop"}, {"from", "tprobe-nan-live"}, {"reason", v.line}};
        for (const auto &ep : v.controls) (void)control.send(ep, stop);
      };
    stage_signal_ready(common.ready_fd);
    const auto r = nan_live_run(io, o);

    fmt::print(stderr, "tprobe-nan-live: {} steps analysed, {} with a NaN/Inf producer, {} records, {} entries{}{}\n",
               r.steps_analysed, r.steps_with_producer, r.records, r.entries,
               r.first && !r.first->file.empty() ? ": " + r.first->file : "", io.interrupted() ? ", interrupted" : "");
    return static_cast<int>(r.first ? EXIT_NEGATIVE : EXIT_OK);
  });
}
