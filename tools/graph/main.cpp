// tprobe-graph: see graph_run.h.
#include <fmt/format.h>

#include "common/msprobe_cli.h"
#include "graph_run.h"

namespace {

// msprobe's spellings (msprobe_cli.h): `msprobe -f pytorch graph -i input.json -o OUT [-fm] [-lm MAP]`.
constexpr tprobe::msprobe_flag msprobe_flags[] = {
    {"-fm", "--fuzzy-match"},
    {"--fuzzy_match", "--fuzzy-match"},
    {"-lm", "--layer-mapping", true},
    {"--layer_mapping", "--layer-mapping", true},
    {"--output_path", "--output", true},
    {"--framework", "", true, "", "pytorch"},
    {"-oc", "", false, "the overflow check of graph nodes"},
    {"--overflow_check", "", false, "the overflow check of graph nodes"},
    {"--rank_size", "", true, "the parallel merge of graphs (--rank_size/--tp/--pp/--vpp/--order)"},
    {"--tp", "", true, "the parallel merge of graphs (--rank_size/--tp/--pp/--vpp/--order)"},
    {"--pp", "", true, "the parallel merge of graphs (--rank_size/--tp/--pp/--vpp/--order)"},
    {"--vpp", "", true, "the parallel merge of graphs (--rank_size/--tp/--pp/--vpp/--order)"},
    {"--order", "", true, "the parallel merge of graphs (--rank_size/--tp/--pp/--vpp/--order)"},
};

}  // namespace

int main(int argc, char **argv) {
  using namespace tprobe;
  graph_run_options o;
  std::string input_json;
  stage_main_extras extras;
  extras.add_arguments = [&](CLI::App &app) {
    app.add_option("NPU", o.npu_path, "the run to draw (a rank, ranks or steps folder of an L0 or mix dump)");
    app.add_option("BENCH", o.bench_path, "the run to compare it with, the same kind of folder");
    app.add_option("-i,--input_path", input_json, "msprobe's input.json ({\"npu_path\", \"bench_path\"}) in place of NPU BENCH");
  };
  extras.translate = [](std::vector<std::string> args, const CLI::App &app) {
    for (size_t i = 0; i + 1 < args.size(); ++i)  // "-f pytorch" is the framework, any other -f the fuzzy match
      if (args[i] == "-f" && (args[i + 1] == "pytorch" || args[i + 1] == "mindspore")) args[i] = "--framework";
    return msprobe_args_translate(std::move(args), msprobe_flags, known_options_of(app), "tprobe graph");
  };
  return stage_main(argc, argv, graph_stage_description(), [&](stage_main_context &c) {
    if (!input_json.empty()) {
      if (!o.npu_path.empty()) throw usage_error("give NPU [BENCH], or -i input.json, not both");
      const auto in = msprobe_graph_input_load(input_json);
      o.npu_path = in.npu_path;
      o.bench_path = in.bench_path;
    }
    if (o.npu_path.empty()) throw usage_error("NPU is required (or msprobe's -i input.json)");
    o.output_dir = c.values().text("output");
    o.fuzzy = c.values().flag("fuzzy-match");
    o.layer_mapping = c.values().text("layer-mapping");
    o.rule = c.values().text("rule") == "levels" ? graph_rule::levels : graph_rule::msprobe_833;
    o.threads = static_cast<unsigned>(c.values().integer("threads"));

    const graph_run_report r = graph_run(o);
    for (const auto &w : r.warnings) fmt::print(stderr, "tprobe-graph: warning: {}\n", w);
    size_t nodes = 0;
    for (const auto &rank : r.ranks) nodes += rank.nodes;
    fmt::print("tprobe-graph: {} ({} graph{}, {} nodes{}) in {}\n", r.task, r.ranks.size(), r.ranks.size() == 1 ? "" : "s",
               nodes, r.linked ? fmt::format(", {} communication nodes linked across ranks", r.linked) : "", r.db_path);
    if (o.bench_path.empty()) return static_cast<int>(EXIT_OK);
    for (const auto &rank : r.ranks) {
      const auto &cr = rank.compare;
      const std::string where = fmt::format("step {} rank {}", rank.step, rank.rank);
      if (cr.first_error_node.empty())
        fmt::print("tprobe-graph: {}: no node where the runs part ({} matched, {} unmatched)\n", where, cr.matched, cr.unmatched);
      else
        fmt::print("tprobe-graph: {}: the runs part first at {} ({} matched, {} unmatched)\n", where, cr.first_error_node,
                   cr.matched, cr.unmatched);
      if (cr.unreadable) fmt::print(stderr, "tprobe-graph: {}: {} tensor files could not be read\n", where, cr.unreadable);
    }
    return static_cast<int>(r.failing_ranks() ? EXIT_NEGATIVE : EXIT_OK);
  }, extras);
}
