// tprobe-synth: see synth.h.
#include <cstdlib>

#include <fmt/format.h>

#include "synth.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-synth", [&] {
    const auto &description = synth_stage_description();
    CLI::App app{description.summary, "tprobe-synth"};
    stage_common_args common;
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_common_options(app, description, common);
    stage_add_declared_options(app, description, values);
    stage_parse(app, argc, argv);
    stage_check_declared_options(description, values);
    synth_stage_options options;
    options.records = static_cast<uint64_t>(values.integer("records"));
    options.steps = static_cast<uint64_t>(values.integer("steps"));
    options.sizes = synth_parse_sizes(values.items("sizes"));
    options.dtypes = synth_parse_dtypes(values.items("dtypes"));
    options.pattern = synth_pattern_parse(values.text("pattern"));
    options.every = static_cast<uint64_t>(values.integer("every"));
    options.rate = values.number("rate");
    options.seed = static_cast<uint64_t>(values.integer("seed"));
    options.save = values.flag("save");
    options.entry_records = values.flag("entry-records");
    options.task = values.text("task");
    options.dump_path = values.text("dump-path");
    options.rank = static_cast<int32_t>(values.integer("rank"));
    synth_apply_environment(options, common.io.outputs, [](const char *name) { return std::getenv(name); });
    synth_check(options);

    stage_install_signal_handlers();
    zmq::context_t ctx;
    stage_io io(ctx, common.io);
    stage_signal_ready(common.ready_fd);
    const auto r = synth_run(io, options);
    fmt::print(stderr,
               "tprobe-synth: sent {} records ({} tensors, {} with NaN/Inf, {} entries, {} steps, {:.1f} MB), "
               "tap dropped {}{}\n",
               r.records, r.tensors, r.special, r.entries, r.steps, r.payload_bytes / 1e6, io.counts().tap_dropped,
               r.interrupted ? ", interrupted" : "");
    return EXIT_OK;
  });
}
