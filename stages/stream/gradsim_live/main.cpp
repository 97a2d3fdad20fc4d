// tprobe-gradsim-live: see gradsim_live.h.
#include <fmt/format.h>

#include "gradsim_live.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-gradsim-live", [&] {
    const auto &d = gradsim_live_stage_description();
    CLI::App app{d.summary, "tprobe-gradsim-live"};
    stage_common_args common;
    gradsim_live_options o;
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_common_options(app, d, common);
    stage_add_declared_options(app, d, values);
    stage_parse(app, argc, argv);
    stage_check_declared_options(d, values);
    o.a = values.text("a");
    o.b = values.text("b");
    o.output_dir = values.text("output-dir");
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
