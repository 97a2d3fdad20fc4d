// tprobe-tap: see tap.h.
#include <filesystem>

#include <fmt/format.h>

#include "tap.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-tap", [&] {
    const auto &description = tap_stage_description();
    CLI::App app{description.summary, "tprobe-tap"};
    tap_stage_options options;
    app.add_option("endpoint", options.endpoint,
                   "a stage's tap endpoint, or a run directory (tprobe run prints both)")->required();
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_declared_options(app, description, values);
    app.add_flag_callback(
        "--describe", [&] { fmt::print("{}\n", stage_describe_json(description)); throw CLI::Success(); },
        "Print this stage's option table as JSON");
    stage_parse(app, argc, argv);
    stage_check_declared_options(description, values);
    options.count = static_cast<uint64_t>(values.integer("count"));
    options.json = values.flag("json");
    options.filter = values.text("filter");
    options.connect_timeout_ms = static_cast<int>(values.integer("connect-timeout"));
    options.stage = values.text("stage");
    options.list = values.flag("list");

    if (options.list) {
      std::error_code e;
      if (!std::filesystem::is_directory(options.endpoint, e))
        throw usage_error("--list needs a run directory, not an endpoint");
      for (const auto &[name, endpoint] : tap_find_in_run_dir(options.endpoint)) fmt::print("{} {}\n", name, endpoint);
      return EXIT_OK;
    }
    options.endpoint = tap_resolve_target(options.endpoint, options.stage);

    stage_install_signal_handlers();
    zmq::context_t ctx;
    tap_subscriber tap(ctx, options.endpoint, options.connect_timeout_ms);
    const auto result = tap_run(tap, options, stdout);
    if (result.missed) fmt::print(stderr, "tprobe-tap: {} records missed (the tap is lossy)\n", result.missed);
    if (!result.ended && tap.publisher_gone())
      fmt::print(stderr, "tprobe-tap: {} closed without an end-of-stream on its tap (the stage ended and the tap "
                         "lost it, or the stage died)\n", options.endpoint);
    return EXIT_OK;
  });
}
