// tprobe-compare: see compare.h.
#include <fmt/format.h>

#include "compare.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-compare", [&] {
    const auto &d = compare_stage_description();
    CLI::App app{d.summary, "tprobe-compare"};
    compare_options o;
    bool compare_only = false;
    app.add_option("NPU", o.npu_path, "NPU side: a dump.json, or a step folder of rank folders")->required();
    app.add_option("BENCH", o.bench_path, "bench side, the same kind as NPU")->required();
    app.add_option("-o,--output", o.output_dir, d.options[0].doc)->required();
    app.add_flag("-f,--fuzzy-match", o.fuzzy_match, d.options[1].doc);
    app.add_flag("-s,--stack-mode", o.stack_mode, d.options[2].doc);
    app.add_flag("--highlight", o.highlight, d.options[3].doc);
    app.add_option("--mapping", o.mapping_path, d.options[4].doc);
    app.add_flag("-c,--compare-only", compare_only, d.options[5].doc);
    app.add_option("--threads", o.threads, d.options[6].doc)->check(CLI::NonNegativeNumber);
    std::string match = d.options[7].default_value;
    app.add_option("--match", match, d.options[7].doc)->check(CLI::IsMember({"auto", "name"}));
    app.add_flag_callback("--describe", [&d] { fmt::print("{}\n", stage_describe_json(d)); throw CLI::Success(); },
                          "Print this stage's option table as JSON");
    stage_parse(app, argc, argv);
    o.advisor = !compare_only;
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
