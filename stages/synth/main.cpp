// tprobe-synth: see synth.h.
#include <cstdlib>

#include <fmt/format.h>

#include "synth.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-synth", [&] {
    const auto &description = synth_stage_description();
    auto doc = [&](std::string_view name) {
      for (const auto &o : description.options)
        if (o.name == name) return o.doc;
      throw std::logic_error(fmt::format("option {} is not in the stage description", name));
    };
    CLI::App app{description.summary, "tprobe-synth"};
    stage_common_args common;
    synth_stage_options options;
    std::vector<std::string> dtypes{"float32"};
    std::string pattern = "normal";
    stage_add_common_options(app, description, common);
    app.add_option("--records", options.records, doc("records"));
    app.add_option("--steps", options.steps, doc("steps"));
    app.add_option("--sizes", options.sizes, doc("sizes"))->delimiter(',');
    app.add_option("--dtypes", dtypes, doc("dtypes"))->delimiter(',');
    app.add_option("--pattern", pattern, doc("pattern"));
    app.add_option("--every", options.every, doc("every"));
    app.add_option("--rate", options.rate, doc("rate"));
    app.add_option("--seed", options.seed, doc("seed"));
    app.add_flag("--save", options.save, doc("save"));
    app.add_flag("--entry-records,!--no-entry-records", options.entry_records, doc("entry-records"));
    app.add_option("--task", options.task, doc("task"));
    app.add_option("--dump-path", options.dump_path, doc("dump-path"));
    app.add_option("--rank", options.rank, doc("rank"));
    stage_parse(app, argc, argv);
    options.dtypes = synth_parse_dtypes(dtypes);
    options.pattern = synth_pattern_parse(pattern);
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
