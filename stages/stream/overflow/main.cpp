// tprobe-overflow: see overflow.h.
#include <fmt/format.h>

#include "overflow.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main(argc, argv, overflow_stage_description(), [](stage_main_context &c) {
    overflow_stage_options options;
    options.overflow_nums = c.values().integer("overflow-nums");
    control_sender control(c.zmq());
    stage_io &io = c.start();
    const auto result = overflow_run(io, control, options);

    const auto &counts = io.counts();
    fmt::print(stderr,
               "tprobe-overflow: {} records, {} calls judged, {} overflowed and passed on, {} records dropped past "
               "overflow_nums, {} captures stopped, {} producers, {} truncated{}\n",
               result.records, result.calls, result.overflow_calls, result.dropped_after_limit, result.stops_sent,
               counts.producers, counts.truncated_producers, io.interrupted() ? ", interrupted" : "");
    return static_cast<int>(EXIT_OK);
  });
}
