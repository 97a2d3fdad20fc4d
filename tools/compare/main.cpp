// tprobe-compare: see compare.h.
#include <fmt/format.h>

#include "compare.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-compare", [&] {
    const auto &d = compare_stage_description();
    CLI::App app{d.summary, "tprobe-compare"};
    compare_options o;
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    app.add_option("NPU", o.npu_path, "NPU side: a dump.json, or a step folder of rank folders")->required();
    app.add_option("BENCH", o.bench_path, "bench side, the same kind as NPU")->required();
    stage_add_declared_options(app, d, values);
    app.get_option("--output")->required();  // a table default cannot say "no default": the parser does
    stage_add_describe_option(app, d);
    stage_parse(app, argc, argv);
    stage_check_declared_options(d, values);
    o.output_dir = values.text("output");
    o.fuzzy_match = values.flag("fuzzy-match");
    o.stack_mode = values.flag("stack-mode");
    o.highlight = values.flag("highlight");
    o.mapping_path = values.text("mapping");
    o.advisor = !values.flag("compare-only");
    o.threads = static_cast<unsigned>(values.integer("threads"));
    const std::string &match = values.text("match");
    if (match != "auto" && match != "name") throw usage_error(fmt::format("--match must be auto or name, got \"{}\"", match));
    o.match = match == "name" ? compare_match::name : compare_match::automatic;

    const compare_report report = compare_run(o);
    for (const auto &w : report.warnings) fmt::print(stderr, "tprobe-compare: warning: {}\n", w);
    for (const auto &p : report.pairs) {
      if (p.files.xlsx.empty()) continue;
      const std::string rank = p.rank.empty() ? "" : p.rank + ": ";
      fmt::print(stderr, "tprobe-compare: {}{} rows ({} failing, {} unmatched, {} not compared), {} paired by name, "
                 "{} aligned (match {}), mode {}, {:.1f} MB of tensors in {:.2f} s: {}\n",
                 rank, p.rows, p.failing, p.unmatched, p.errors, p.paired_by_name, p.aligned,
                 compare_match_name(p.match), compare_mode_name(p.mode), p.tensor_bytes / 1e6, p.seconds, p.files.xlsx);
      if (p.errors > 0)
        fmt::print(stderr, "tprobe-compare: {}{} {} could not be compared (tensor files not read); first: {}\n", rank,
                   p.errors, p.errors == 1 ? "row" : "rows", p.first_error);
    }
    for (const auto &e : report.errors) fmt::print(stderr, "tprobe-compare: error: {}\n", e);
    if (!report.errors.empty()) return static_cast<int>(EXIT_USAGE);
    // Rows that could not be compared are no pass: the answer is negative until they are.
    const bool negative = report.failing_rows() > 0 || report.error_rows() > 0;
    return static_cast<int>(negative ? EXIT_NEGATIVE : EXIT_OK);
  });
}
