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
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    std::vector<std::string> positional;
    stage_add_common_options(app, d, common);
    app.get_option("--input")->required(false);  // offline (result files named) or a manifest's stage
    app.add_option("RESULT", positional, "result folders or files (offline; without --input)");
    stage_add_declared_options(app, d, values);
    stage_parse(app, argc, argv);
    stage_check_declared_options(d, values);
    o.output = values.text("output");
    o.title = values.text("title");
    o.results = positional;
    for (const auto &r : values.list("results")) o.results.push_back(r);

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
