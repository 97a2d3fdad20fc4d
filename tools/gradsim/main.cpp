// tprobe-gradsim: see gradsim.h.
#include <fmt/format.h>

#include "gradsim.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  gradsim_offline_options o;
  stage_main_extras extras;
  extras.add_arguments = [&](CLI::App &app) {
    app.add_option("DIR1", o.dir1, "the first run's grad_probe dump_path (its rank{N}/ folders)")->required();
    app.add_option("DIR2", o.dir2, "the second run's")->required();
  };
  return stage_main(argc, argv, gradsim_stage_description(), [&](stage_main_context &c) {
    o.output_dir = c.values().text("output");
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
  }, extras);
}
