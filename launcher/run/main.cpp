// tprobe-run: start a manifest's stages around a training command (launcher.h has the contract).
//
//   tprobe run pipelines/statistics.json -- python train.py
#include <algorithm>
#include <cstring>

#include "common/stage_main.h"
#include "errors.h"
#include "run/launcher.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe", [&] {
    // Everything after the first "--" is the command, verbatim: its options are not ours to parse.
    char **split = std::find_if(argv + 1, argv + argc, [](const char *a) { return std::strcmp(a, "--") == 0; });
    launcher_options options;
    for (char **a = split == argv + argc ? split : split + 1; a < argv + argc; ++a) options.command.emplace_back(*a);

    const stage_description &d = launcher_description();  // parser, --help, --describe and checks
    CLI::App app{"tprobe run MANIFEST [--config CONFIG.json] [--keep-run-dir] [-- COMMAND ARGS...]\n"
                 "Start a manifest's stages, run COMMAND with its capture connected to them, and end them all "
                 "cleanly.\nWithout a command, print the endpoints and wait for producers until Ctrl-C.",
                 "tprobe run"};
    stage_option_values values;
    stage_add_declared_options(app, d, values);
    stage_add_describe_option(app, d);
    app.footer("COMMAND gets TPROBE_ENDPOINT, TPROBE_RUN_DIR, TPROBE_CONFIG and the manifest's TPROBE_TASK, "
               "TPROBE_LEVEL, TPROBE_DUMP_PATH.\nExit: COMMAND's status (128+N if killed by signal N), "
               "111 if a stage failed, 100 for a bad manifest or command line.");
    try {
      app.parse(static_cast<int>(split - argv), argv);
      stage_check_declared_options(d, values);
    } catch (const CLI::Success &e) {
      return app.exit(e);
    } catch (const CLI::ParseError &e) {
      throw usage_error(std::string(e.what()) + " (see tprobe run --help)");
    } catch (const usage_error &e) {
      throw usage_error(std::string(e.what()) + " (see tprobe run --help)");
    }
    launcher_options_read(values, options);
    return launcher_run(options);
  });
}
