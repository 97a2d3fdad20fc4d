// tprobe-gradsim-live: see gradsim.h.
#include <fmt/format.h>

#include "gradsim.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-gradsim-live", [&] {
    const auto &d = gradsim_live_stage_description();
    CLI::App app{d.summary, "tprobe-gradsim-live"};
    stage_common_args common;
    gradsim_live_options o;
    o.output_dir = "./output";
    stage_add_common_options(app, d, common);
    app.add_option("--a", o.a, d.options[0].doc);
    app.add_option("--b", o.b, d.options[1].doc);
    app.add_option("--output-dir", o.output_dir, d.options[2].doc);
    stage_parse(app, argc, argv);
    o.log = stdout;

    stage_install_signal_handlers();
    zmq::context_t ctx;
    stage_io io(ctx, common.io);
    stage_signal_ready(common.ready_fd);
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
