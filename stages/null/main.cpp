// tprobe-null: see null.h.
#include <fmt/format.h>

#include "null.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-null", [&] {
    const auto &description = null_stage_description();
    auto doc = [&](std::string_view name) {
      for (const auto &o : description.options)
        if (o.name == name) return o.doc;
      throw std::logic_error(fmt::format("option {} is not in the stage description", name));
    };
    CLI::App app{description.summary, "tprobe-null"};
    stage_common_args common;
    null_stage_options options;
    std::vector<std::string> delay_kinds;
    int64_t expect = -1;
    stage_add_common_options(app, description, common);
    app.add_option("--delay-us", options.delay_us, doc("delay-us"));
    app.add_option("--delay-every", options.delay_every, doc("delay-every"))->check(CLI::PositiveNumber);
    app.add_option("--delay-kinds", delay_kinds, doc("delay-kinds"))->delimiter(',');
    app.add_option("--expect", expect, doc("expect"))->check(CLI::Range(int64_t{-1}, INT64_MAX));
    stage_parse(app, argc, argv);
    options.delay_kinds = data_kinds_parse(delay_kinds, "--delay-kinds");
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
