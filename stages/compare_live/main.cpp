// tprobe-compare-live: see compare_live.h.
#include <fmt/format.h>

#include "compare_live.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-compare-live", [&] {
    const auto &d = compare_live_stage_description();
    CLI::App app{d.summary, "tprobe-compare-live"};
    stage_common_args common;
    compare_live_options o;
    o.output_dir = "./output";
    int64_t max_buffer_mib = 1024;
    stage_add_common_options(app, d, common);
    app.add_option("--npu", o.npu, d.options[0].doc);
    app.add_option("--bench", o.bench, d.options[1].doc);
    app.add_option("--output-dir", o.output_dir, d.options[2].doc);
    app.add_option("--max-buffer-mib", max_buffer_mib, d.options[3].doc)->check(CLI::NonNegativeNumber);
    app.add_flag("--highlight", o.highlight, d.options[4].doc);
    stage_parse(app, argc, argv);
    o.max_buffer_bytes = static_cast<uint64_t>(max_buffer_mib) << 20;
    o.log = stderr;

    stage_install_signal_handlers();
    zmq::context_t ctx;
    stage_io io(ctx, common.io);
    stage_signal_ready(common.ready_fd);
    const auto r = compare_live_run(io, o);

    for (size_t i = 0; i < r.unmatched_names.size() && i < 10; ++i)
      fmt::print(stderr, "tprobe-compare-live: unmatched: {}\n", r.unmatched_names[i]);
    fmt::print(stderr,
               "tprobe-compare-live: {} vs {}: {} rows, {} failing, {} unmatched, {} pairs ({} on tensor data, {} by "
               "statistics after the {} MiB buffer filled), {} records, {} producers, {} truncated{}{}\n",
               r.npu_label, r.bench_label, r.rows, r.failing, r.unmatched, r.pairs, r.real_data_pairs,
               r.stats_only_rows, max_buffer_mib, r.records, io.counts().producers, io.counts().truncated_producers,
               r.files.empty() ? "" : ": " + r.files.front(), io.interrupted() ? ", interrupted" : "");
    return static_cast<int>(r.failing > 0 || r.live_failing > 0 ? EXIT_NEGATIVE : EXIT_OK);
  });
}
