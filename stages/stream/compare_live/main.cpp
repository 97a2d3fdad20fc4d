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
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_common_options(app, d, common);
    stage_add_declared_options(app, d, values);
    stage_parse(app, argc, argv);
    stage_check_declared_options(d, values);
    o.npu = values.text("npu");
    o.bench = values.text("bench");
    o.output_dir = values.text("output-dir");
    o.highlight = values.flag("highlight");
    const int64_t max_buffer_mib = values.integer("max-buffer-mib");
    // The table (compare_live.cpp) declares no minimum: refused here until it says min 0.
    if (max_buffer_mib < 0) throw usage_error(fmt::format("--max-buffer-mib must be >= 0, got {}", max_buffer_mib));
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
