// tprobe-gradsim-live: see gradsim_live.h.
#include <fmt/format.h>

#include "gradsim_live.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main(argc, argv, gradsim_live_stage_description(), [](stage_main_context &c) {
    gradsim_live_options o;
    o.a = c.values().text("a");
    o.b = c.values().text("b");
    o.output_dir = c.values().text("output-dir");
    o.log = stdout;
    stage_io &io = c.start();
    const auto r = gradsim_live_run(io, o);

    for (const auto &w : r.warnings) fmt::print(stderr, "tprobe-gradsim-live: warning: {}\n", w);
    const gradsim_rank *first = gradsim_earliest(r.ranks);
    fmt::print(stderr, "tprobe-gradsim-live: {} gradients, {} pairs, {} unmatched, {} ranks, {} records{}{}\n",
               r.gradients, r.pairs, r.unmatched, r.ranks.size(), r.records,
               first && !first->files.empty() ? ": " + first->files.front() : "", io.interrupted() ? ", interrupted" : "");
    if (!r.first_line && first)  // judged only at the end (a step some run never ended)
      fmt::print("tprobe-gradsim-live: {}\n", grad_suspect_line(*first->first, first->rank));
    return static_cast<int>(first ? EXIT_NEGATIVE : EXIT_OK);
  });
}
