// tprobe-fault: see fault.h.
#include <csignal>

#include <fmt/format.h>

#include "fault.h"
#include "null/null.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-fault", [&] {
    const auto &description = fault_stage_description();
    auto doc = [&](std::string_view name) {
      for (const auto &o : description.options)
        if (o.name == name) return o.doc;
      throw std::logic_error(fmt::format("option {} is not in the stage description", name));
    };
    CLI::App app{description.summary, "tprobe-fault"};
    stage_common_args common;
    fault_stage_options options;
    std::string corrupt_part = "header";
    std::vector<std::string> kinds{"tensor"};
    int64_t stall_after = -1, die_after = -1;
    stage_add_common_options(app, description, common);
    app.add_option("--seed", options.seed, doc("seed"));
    app.add_option("--delay-ms", options.delay_ms, doc("delay-ms"));
    app.add_option("--delay-prob", options.delay_prob, doc("delay-prob"));
    app.add_option("--drop-prob", options.drop_prob, doc("drop-prob"));
    app.add_option("--duplicate-prob", options.duplicate_prob, doc("duplicate-prob"));
    app.add_option("--truncate-prob", options.truncate_prob, doc("truncate-prob"));
    app.add_option("--corrupt-prob", options.corrupt_prob, doc("corrupt-prob"));
    app.add_option("--corrupt-part", corrupt_part, doc("corrupt-part"));
    app.add_option("--stall-after", stall_after, doc("stall-after"))->check(CLI::Range(int64_t{-1}, INT64_MAX));
    app.add_option("--die-after", die_after, doc("die-after"))->check(CLI::Range(int64_t{-1}, INT64_MAX));
    app.add_option("--kinds", kinds, doc("kinds"))->delimiter(',');
    stage_parse(app, argc, argv);
    options.corrupt_part = fault_part_parse(corrupt_part);
    options.kinds = data_kinds_parse(kinds, "--kinds");
    if (stall_after >= 0) options.stall_after = static_cast<uint64_t>(stall_after);
    if (die_after >= 0) options.die_after = static_cast<uint64_t>(die_after);
    fault_check(options);

    stage_install_signal_handlers();
    zmq::context_t ctx;
    stage_io io(ctx, common.io);
    stage_signal_ready(common.ready_fd);
    const auto r = fault_run(io, options);
    fmt::print(stderr,
               "tprobe-fault: {} records in, {} out: dropped {}, duplicated {}, truncated {}, corrupted {}, "
               "delayed {}{}\n",
               r.received, r.sent, r.dropped, r.duplicated, r.truncated, r.corrupted, r.delayed,
               r.end == fault_end::stalled ? "; stalled until a signal" : "");
    if (r.end == fault_end::die) {
      fmt::print(stderr, "tprobe-fault: dying after {} records (--die-after): SIGKILL, no end-of-stream\n", r.received);
      std::raise(SIGKILL);
    }
    return EXIT_OK;
  });
}
