// tprobe-compare: see compare.h.
#include <fmt/format.h>

#include "common/msprobe_cli.h"
#include "compare.h"

namespace {

// msprobe's spellings of compare's flags (docs/msprobe-compat.md §4.1; msprobe_cli.h). msprobe's "-f"
// is its fuzzy match, as tprobe's; "-f pytorch" (the framework, msprobe's first argument) is taken
// where it stands before or after the verb.
constexpr tprobe::msprobe_flag msprobe_flags[] = {
    {"-hl", "--highlight"},
    {"-fm", "--fuzzy-match"},
    {"--fuzzy_match", "--fuzzy-match"},
    {"--stack_mode", "--stack-mode"},
    {"--compare_only", "--compare-only"},
    {"--output_path", "--output", true},
    {"-dm", "--mapping", true},
    {"--data_mapping", "--mapping", true},
    {"--framework", "", true, "", "pytorch"},
    {"-da", "", false, "the first-diff-node analysis"},
    {"--diff_analyze", "", false, "the first-diff-node analysis"},
    {"-cm", "", false, "MindSpore's cell mapping"},
    {"--cell_mapping", "", false, "MindSpore's cell mapping"},
    {"-am", "", false, "MindSpore's API mapping"},
    {"--api_mapping", "", false, "MindSpore's API mapping"},
    {"-lm", "", false, "MindSpore's layer mapping"},
    {"--layer_mapping", "", false, "MindSpore's layer mapping"},
};

}  // namespace

int main(int argc, char **argv) {
  using namespace tprobe;
  compare_options o;
  std::string input_json;
  stage_main_extras extras;
  extras.add_arguments = [&](CLI::App &app) {
    app.add_option("NPU", o.npu_path, "NPU side: a dump.json, or a step folder of rank folders");
    app.add_option("BENCH", o.bench_path, "bench side, the same kind as NPU");
    app.add_option("-i,--input_path", input_json,
                   "msprobe's compare.json ({\"npu_path\", \"bench_path\", \"stack_path\"}) in place of NPU BENCH");
  };
  extras.translate = [](std::vector<std::string> args, const CLI::App &app) {
    for (size_t i = 0; i + 1 < args.size(); ++i)  // "-f pytorch" is the framework, any other -f the fuzzy match
      if (args[i] == "-f" && (args[i + 1] == "pytorch" || args[i + 1] == "mindspore")) args[i] = "--framework";
    return msprobe_args_translate(std::move(args), msprobe_flags, known_options_of(app), "tprobe compare");
  };
  return stage_main(argc, argv, compare_stage_description(), [&](stage_main_context &c) {
    if (!input_json.empty()) {
      if (!o.npu_path.empty())
        throw usage_error("give NPU and BENCH, or -i compare.json, not both");
      const auto in = msprobe_compare_input_load(input_json);
      o.npu_path = in.npu_path;
      o.bench_path = in.bench_path;
      o.stack_path = in.stack_path;
    } else if (o.bench_path.empty()) {
      throw usage_error("NPU and BENCH are required (or msprobe's -i compare.json)");
    }
    o.output_dir = c.values().text("output");
    o.fuzzy_match = c.values().flag("fuzzy-match");
    o.stack_mode = c.values().flag("stack-mode");
    o.highlight = c.values().flag("highlight");
    o.mapping_path = c.values().text("mapping");
    o.advisor = !c.values().flag("compare-only");
    o.threads = static_cast<unsigned>(c.values().integer("threads"));
    o.match = c.values().text("match") == "name" ? compare_match::name : compare_match::automatic;  // auto | name

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
  }, extras);
}
