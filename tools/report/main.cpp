// tprobe-report: see report.h.
#include <fmt/format.h>

#include "report.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  std::vector<std::string> positional;
  stage_main_extras extras;
  extras.add_arguments = [&](CLI::App &app) {
    app.get_option("--input")->required(false);  // offline (result files named) or a manifest's stage
    app.add_option("RESULT", positional, "result folders or files (offline; without --input)");
  };
  return stage_main(argc, argv, report_stage_description(), [&](stage_main_context &c) {
    report_options o;
    o.output = c.values().text("output");
    o.title = c.values().text("title");
    o.results = positional;
    for (const auto &r : c.values().list("results")) o.results.push_back(r);
    // A manifest's stage reads its input: the end of that stream is the cue to render.
    const report_result r = c.io_options().input.empty() ? report_run(o) : report_run_stream(c.start(), o);
    for (const auto &w : r.model.warnings) fmt::print(stderr, "tprobe-report: warning: {}\n", w);
    for (const auto &line : r.summary) fmt::print("{}\n", line);
    fmt::print(stderr, "tprobe-report: wrote {} ({:.1f} kB)\n", r.file, r.bytes / 1e3);
    return static_cast<int>(r.model.negative() ? EXIT_NEGATIVE : EXIT_OK);
  }, extras);
}
