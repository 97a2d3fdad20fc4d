// tprobe-fault: see fault.h.
#include <csignal>

#include <fmt/format.h>

#include "fault.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main(argc, argv, fault_stage_description(), [](stage_main_context &c) {
    const auto &values = c.values();
    fault_stage_options options;
    options.seed = static_cast<uint64_t>(values.integer("seed"));
    options.delay_ms = values.number("delay-ms");
    options.delay_prob = values.number("delay-prob");
    options.drop_prob = values.number("drop-prob");
    options.duplicate_prob = values.number("duplicate-prob");
    options.truncate_prob = values.number("truncate-prob");
    options.corrupt_prob = values.number("corrupt-prob");
    const int64_t stall_after = values.integer("stall-after"), die_after = values.integer("die-after");
    options.corrupt_part = fault_part_parse(values.text("corrupt-part"));  // one of the table's choices
    options.kinds = data_kinds_parse(values.items("kinds"), "--kinds");    // --kinds a,b or --kinds a --kinds b
    if (stall_after >= 0) options.stall_after = static_cast<uint64_t>(stall_after);
    if (die_after >= 0) options.die_after = static_cast<uint64_t>(die_after);
    fault_check(options);

    const auto r = fault_run(c.start(), options);
    fmt::print(stderr,
               "tprobe-fault: {} records in, {} out: dropped {}, duplicated {}, truncated {}, corrupted {}, "
               "delayed {}{}\n",
               r.received, r.sent, r.dropped, r.duplicated, r.truncated, r.corrupted, r.delayed,
               r.end == fault_end::stalled ? "; stalled until a signal" : "");
    if (r.end == fault_end::die) {
      fmt::print(stderr, "tprobe-fault: dying after {} records (--die-after): SIGKILL, no end-of-stream\n", r.received);
      std::raise(SIGKILL);
    }
    return static_cast<int>(EXIT_OK);
  });
}
