// tprobe-compare-live: see compare_live.h.
#include <fmt/format.h>

#include "compare_live.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main(argc, argv, compare_live_stage_description(), [](stage_main_context &c) {
    compare_live_options o;
    o.npu = c.values().text("npu");
    o.bench = c.values().text("bench");
    o.output_dir = c.values().text("output-dir");
    o.highlight = c.values().flag("highlight");
    const int64_t max_buffer_mib = c.values().integer("max-buffer-mib");  // >= 0: the table's range
    o.max_buffer_bytes = static_cast<uint64_t>(max_buffer_mib) << 20;
    o.log = stderr;
    stage_io &io = c.start();
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
