// tprobe-null: see null.h.
#include <fmt/format.h>

#include "null.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main(argc, argv, null_stage_description(), [](stage_main_context &c) {
    null_stage_options options;
    options.delay_us = static_cast<uint64_t>(c.values().integer("delay-us"));
    options.delay_every = static_cast<uint64_t>(c.values().integer("delay-every"));
    // --delay-kinds a,b as well as --delay-kinds a --delay-kinds b
    options.delay_kinds = data_kinds_parse(c.values().items("delay-kinds"), "--delay-kinds");
    const int64_t expect = c.values().integer("expect");
    if (expect >= 0) options.expect = static_cast<uint64_t>(expect);
    stage_io &io = c.start();
    const auto r = null_run(io, options);

    const auto &counts = io.counts();
    fmt::print(stderr, "tprobe-null: {}, {} producers, {} truncated, upstream dropped {}{}\n", null_result_text(r),
               counts.producers, counts.truncated_producers, counts.upstream_dropped,
               io.interrupted() ? ", interrupted" : "");
    if (r.expectation_met) return static_cast<int>(EXIT_OK);
    fmt::print(stderr, "tprobe-null: expected {} records, got {}\n", *options.expect, r.records);
    return static_cast<int>(EXIT_NEGATIVE);
  });
}
