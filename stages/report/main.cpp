// tprobe-report: see report.h.
#include <fmt/format.h>

#include "report.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-report", [&] {
    const auto &d = report_stage_description();
    CLI::App app{d.summary, "tprobe-report"};
    stage_common_args common;
    report_options o;
    stage_add_common_options(app, d, common);
    app.get_option("--input")->required(false);  // offline (result files named) or a manifest's stage
    app.add_option("RESULT", o.results, "result folders or files (offline; without --input)");
    app.add_option("-o,--output", o.output, d.options[0].doc);
    app.add_option("--results", o.results, d.options[1].doc);
    app.add_option("--title", o.title, d.options[2].doc);
    stage_parse(app, argc, argv);

    report_result r;
    if (common.io.input.empty()) {
      r = report_run(o);
    } else {  // a manifest's stage: the end of its input stream is the cue to render
      stage_install_signal_handlers();
      zmq::context_t ctx;
      stage_io io(ctx, common.io);
      stage_signal_ready(common.ready_fd);
      r = report_run_stream(io, o);
    }
    for (const auto &w : r.model.warnings) fmt::print(stderr, "tprobe-report: warning: {}\n", w);
    for (const auto &line : r.summary) fmt::print("{}\n", line);
    fmt::print(stderr, "tprobe-report: wrote {} ({:.1f} kB)\n", r.file, r.bytes / 1e3);
    return static_cast<int>(r.model.negative() ? EXIT_NEGATIVE : EXIT_OK);
  });
}
