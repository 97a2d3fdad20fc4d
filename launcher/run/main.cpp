// tprobe-run: start a manifest's stages around a training command (launcher.h has the contract).
//
//   tprobe run pipelines/statistics.json -- python train.py
#include <algorithm>
#include <cstdio>
#include <cstring>

#include "common/stage_main.h"
#include "errors.h"
#include "run/launcher.h"

int main(int argc, char **argv) {
  return tprobe::stage_main_guard("tprobe", [&] {
    // Everything after the first "--" is the command, verbatim: its options are not ours to parse.
    char **split = std::find_if(argv + 1, argv + argc, [](const char *a) { return std::strcmp(a, "--") == 0; });
    tprobe::launcher_options options;
    for (char **a = split == argv + argc ? split : split + 1; a < argv + argc; ++a) options.command.emplace_back(*a);

    CLI::App app{"tprobe run MANIFEST [--config CONFIG.json] [--keep-run-dir] [-- COMMAND ARGS...]\n"
                 "Start a manifest's stages, run COMMAND with its capture connected to them, and end them all "
                 "cleanly.\nWithout a command, print the endpoints and wait for producers until Ctrl-C.",
                 "tprobe run"};
    app.add_option("manifest", options.manifest_path, "pipeline manifest, e.g. pipelines/statistics.json");
    app.add_option("--config", options.config_path, "capture config, passed to COMMAND as TPROBE_CONFIG");
    app.add_flag("--keep-run-dir", options.keep_run_dir, "keep the run directory (endpoints) at the end");
    app.add_option("--startup-timeout", options.startup_timeout_s, "seconds each stage has to report ready")
        ->check(CLI::Range(1, 86400))
        ->capture_default_str();
    bool describe = false;
    app.add_flag("--describe", describe, "print a description as JSON (for `tprobe --help`) and exit");
    app.footer("COMMAND gets TPROBE_ENDPOINT, TPROBE_RUN_DIR, TPROBE_CONFIG and the manifest's TPROBE_TASK, "
               "TPROBE_LEVEL, TPROBE_DUMP_PATH.\nExit: COMMAND's status (128+N if killed by signal N), "
               "111 if a stage failed, 100 for a bad manifest or command line.");
    try {
      app.parse(static_cast<int>(split - argv), argv);
    } catch (const CLI::Success &e) {
      return app.exit(e);
    } catch (const CLI::ParseError &e) {
      throw tprobe::usage_error(std::string(e.what()) + " (see tprobe run --help)");
    }

    if (describe) {
      std::puts(tprobe::stage_describe_json({"run", "start a manifest's stages around a command", false, false, {}})
                    .c_str());
      return 0;
    }
    if (options.manifest_path.empty()) throw tprobe::usage_error("missing MANIFEST (see tprobe run --help)");
    return tprobe::launcher_run(options);
  });
}
