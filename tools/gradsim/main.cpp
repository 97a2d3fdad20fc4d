// tprobe-gradsim: see gradsim.h.
#include <fmt/format.h>

#include "gradsim.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-gradsim", [&] {
    const auto &d = gradsim_stage_description();
    CLI::App app{d.summary, "tprobe-gradsim"};
    gradsim_offline_options o;
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    app.add_option("DIR1", o.dir1, "the first run's grad_probe dump_path (its rank{N}/ folders)")->required();
    app.add_option("DIR2", o.dir2, "the second run's")->required();
    stage_add_declared_options(app, d, values);
    stage_add_describe_option(app, d);
    stage_parse(app, argc, argv);
    stage_check_declared_options(d, values);
    o.output_dir = values.text("output");

    const auto ranks = gradsim_offline_run(o);
    size_t steps = 0;
    for (const auto &r : ranks) steps = std::max(steps, r.table.steps().size());
    const gradsim_rank *first = gradsim_earliest(ranks);
    if (first)
      fmt::print("tprobe-gradsim: {}\n", grad_suspect_line(*first->first, first->rank));
    else
      fmt::print("tprobe-gradsim: no suspect step ({} ranks, {} steps compared)\n", ranks.size(), steps);
    for (const auto &r : ranks)
      fmt::print(stderr, "tprobe-gradsim: rank {}: {} parameters, {} steps: {}\n", r.rank, r.table.params().size(),
                 r.table.steps().size(), r.files.front());
    return static_cast<int>(first ? EXIT_NEGATIVE : EXIT_OK);
  });
}
