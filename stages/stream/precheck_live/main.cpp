// tprobe-precheck-live: see precheck_live.h.
#include <fmt/format.h>

#include "precheck_live.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main(argc, argv, precheck_live_stage_description(), [](stage_main_context &c) {
    precheck::precheck_tune_allocator();
    precheck_live_options o;
    o.output_dir = c.values().text("output-dir");
    o.jobs = static_cast<unsigned>(c.values().integer("jobs"));
    o.max_buffer_bytes = static_cast<uint64_t>(c.values().integer("max-buffer-mib")) << 20;
    o.run = precheck::precheck_run_options_of(c.values());
    o.log = stdout;
    stage_io &io = c.start();
    const auto r = precheck_live_run(io, o);

    const auto &n = r.counts;
    fmt::print("tprobe-precheck-live: {} APIs: {} pass, {} warning, {} error, {} SKIP", n.total(), n.pass, n.warning,
               n.error, n.skip);
    for (const auto &f : r.folders) fmt::print("; {}", f.result_csv);
    fmt::print("\n");
    if (r.fell_behind > 0)
      fmt::print("tprobe-precheck-live: {} APIs not checked (fell behind: more than {} MiB of tensors waited for the "
                 "replay)\n", r.fell_behind, o.max_buffer_bytes >> 20);
    fmt::print(stderr, "tprobe-precheck-live: {} records, {} API calls, {} producers, {} truncated{}\n", r.records,
               r.apis, io.counts().producers, io.counts().truncated_producers, io.interrupted() ? ", interrupted" : "");
    return static_cast<int>(n.failed() ? EXIT_NEGATIVE : EXIT_OK);
  });
}
