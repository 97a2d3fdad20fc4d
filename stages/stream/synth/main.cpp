// tprobe-synth: see synth.h.
#include <cstdlib>

#include <fmt/format.h>

#include "synth.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main(argc, argv, synth_stage_description(), [](stage_main_context &c) {
    const auto &values = c.values();
    synth_stage_options options;
    options.records = static_cast<uint64_t>(values.integer("records"));
    options.steps = static_cast<uint64_t>(values.integer("steps"));
    options.sizes = synth_parse_sizes(values.items("sizes"));
    options.dtypes = synth_parse_dtypes(values.items("dtypes"));
    options.pattern = synth_pattern_parse(values.text("pattern"));  // one of the table's choices
    options.every = static_cast<uint64_t>(values.integer("every"));
    options.rate = values.number("rate");
    options.seed = static_cast<uint64_t>(values.integer("seed"));
    options.save = values.flag("save");
    options.entry_records = values.flag("entry-records");
    options.task = values.text("task");
    options.dump_path = values.text("dump-path");
    options.rank = static_cast<int32_t>(values.integer("rank"));
    synth_apply_environment(options, c.io_options().outputs, [](const char *name) { return std::getenv(name); });
    synth_check(options);

    stage_io &io = c.start();
    const auto r = synth_run(io, options);
    fmt::print(stderr,
               "tprobe-synth: sent {} records ({} tensors, {} with NaN/Inf, {} entries, {} steps, {:.1f} MB), "
               "tap dropped {}{}\n",
               r.records, r.tensors, r.special, r.entries, r.steps, r.payload_bytes / 1e6, io.counts().tap_dropped,
               r.interrupted ? ", interrupted" : "");
    return static_cast<int>(EXIT_OK);
  });
}
