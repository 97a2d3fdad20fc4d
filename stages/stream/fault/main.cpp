// tprobe-fault: see fault.h.
#include <csignal>

#include <fmt/format.h>

#include "fault.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-fault", [&] {
    const auto &description = fault_stage_description();
    CLI::App app{description.summary, "tprobe-fault"};
    stage_common_args common;
    fault_stage_options options;
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_common_options(app, description, common);
    stage_add_declared_options(app, description, values);
    stage_parse(app, argc, argv);
    stage_check_declared_options(description, values);
    options.seed = static_cast<uint64_t>(values.integer("seed"));
    options.delay_ms = values.number("delay-ms");
    options.delay_prob = values.number("delay-prob");
    options.drop_prob = values.number("drop-prob");
    options.duplicate_prob = values.number("duplicate-prob");
    options.truncate_prob = values.number("truncate-prob");
    options.corrupt_prob = values.number("corrupt-prob");
    const int64_t stall_after = values.integer("stall-after"), die_after = values.integer("die-after");
    std::vector<std::string> kinds;  // --kinds a,b as well as --kinds a --kinds b
    for (const auto &v : values.list("kinds"))
      for (size_t b = 0; b <= v.size();) {
        const size_t e = std::min(v.find(',', b), v.size());
        kinds.push_back(v.substr(b, e - b));
        b = e + 1;
      }
    options.corrupt_part = fault_part_parse(values.text("corrupt-part"));
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
