// tprobe-null: see null.h.
#include <fmt/format.h>

#include "null.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-null", [&] {
    const auto &description = null_stage_description();
    CLI::App app{description.summary, "tprobe-null"};
    stage_common_args common;
    null_stage_options options;
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_common_options(app, description, common);
    stage_add_declared_options(app, description, values);
    stage_parse(app, argc, argv);
    stage_check_declared_options(description, values);
    options.delay_us = static_cast<uint64_t>(values.integer("delay-us"));
    options.delay_every = static_cast<uint64_t>(values.integer("delay-every"));
    std::vector<std::string> delay_kinds;  // --delay-kinds a,b as well as --delay-kinds a --delay-kinds b
    for (const auto &v : values.list("delay-kinds"))
      for (size_t b = 0; b <= v.size();) {
        const size_t e = std::min(v.find(',', b), v.size());
        delay_kinds.push_back(v.substr(b, e - b));
        b = e + 1;
      }
    options.delay_kinds = data_kinds_parse(delay_kinds, "--delay-kinds");
    const int64_t expect = values.integer("expect");
    if (expect >= 0) options.expect = static_cast<uint64_t>(expect);

    stage_install_signal_handlers();
    zmq::context_t ctx;
    stage_io io(ctx, common.io);
    stage_signal_ready(common.ready_fd);
    const auto r = null_run(io, options);

    const auto &counts = io.counts();
    fmt::print(stderr, "tprobe-null: {}, {} producers, {} truncated, upstream dropped {}{}\n", null_result_text(r),
               counts.producers, counts.truncated_producers, counts.upstream_dropped,
               io.interrupted() ? ", interrupted" : "");
    if (r.expectation_met) return EXIT_OK;
    fmt::print(stderr, "tprobe-null: expected {} records, got {}\n", *options.expect, r.records);
    return EXIT_NEGATIVE;
  });
}
