// tprobe-tap: see tap.h. A client of a stage's tap, not a stage: its table has neither input nor
// output, so stage_main gives it --describe and its options but not the stream's.
#include <filesystem>

#include <fmt/format.h>

#include "tap.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  tap_stage_options options;
  stage_main_extras extras;
  extras.add_arguments = [&](CLI::App &app) {
    app.add_option("endpoint", options.endpoint,
                   "a stage's tap endpoint, or a run directory (tprobe run prints both)")->required();
  };
  return stage_main(argc, argv, tap_stage_description(), [&](stage_main_context &c) {
    options.count = static_cast<uint64_t>(c.values().integer("count"));
    options.json = c.values().flag("json");
    options.filter = c.values().text("filter");
    options.connect_timeout_ms = static_cast<int>(c.values().integer("connect-timeout"));
    options.stage = c.values().text("stage");
    options.list = c.values().flag("list");

    if (options.list) {
      std::error_code e;
      if (!std::filesystem::is_directory(options.endpoint, e))
        throw usage_error("--list needs a run directory, not an endpoint");
      for (const auto &[name, endpoint] : tap_find_in_run_dir(options.endpoint)) fmt::print("{} {}\n", name, endpoint);
      return static_cast<int>(EXIT_OK);
    }
    options.endpoint = tap_resolve_target(options.endpoint, options.stage);
    tap_subscriber tap(c.zmq(), options.endpoint, options.connect_timeout_ms);
    const auto result = tap_run(tap, options, stdout);
    if (result.missed) fmt::print(stderr, "tprobe-tap: {} records missed (the tap is lossy)\n", result.missed);
    if (!result.ended && tap.publisher_gone())
      fmt::print(stderr, "tprobe-tap: {} closed without an end-of-stream on its tap (the stage ended and the tap "
                         "lost it, or the stage died)\n", options.endpoint);
    return static_cast<int>(EXIT_OK);
  }, extras);
}
