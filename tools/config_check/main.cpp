// tprobe-config-check: see config_check_run.h.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "config_check_run.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  std::vector<std::string> words;  // VERB then its files
  stage_main_extras extras;
  extras.add_arguments = [&](CLI::App &app) {
    app.add_option("VERB FILES", words, "pack [SCRIPT.sh|CONFIG.yaml …], or compare BENCH.zip CMP.zip");
  };
  extras.translate = [](std::vector<std::string> args, const CLI::App &app) { return config_check_translate(std::move(args), app); };
  return stage_main(argc, argv, config_check_stage_description(), [&](stage_main_context &c) {
    const std::string verb = words.empty() ? "" : words[0];
    const std::vector<std::string> files(words.begin() + (words.empty() ? 0 : 1), words.end());
    const std::string output = c.values().text("output");
    if (verb == "pack") {
      const std::string zip = output.empty() ? "./config_check_pack.zip" : output;
      const auto entries = config_check_pack_run(files, zip, c.values().text("python"));
      fmt::print("config_check pack {}: {}\n", zip, fmt::join(entries, ", "));
      return static_cast<int>(EXIT_OK);
    }
    if (verb != "compare") throw usage_error("give a verb: pack [SCRIPT.sh|CONFIG.yaml …] or compare BENCH.zip CMP.zip");
    if (files.size() != 2) throw usage_error("compare takes two packs: compare BENCH.zip CMP.zip [-o DIR]");
    const std::string dir = output.empty() ? "./config_check_result" : output;
    const auto sheets = config_check_compare_run(files[0], files[1], dir);
    for (const auto &line : config_check_summary(sheets)) fmt::print("{}\n", line);
    fmt::print("config checking result save to {}/result.xlsx\n", dir);
    bool error = false;
    for (const auto &s : sheets) error = error || s.pass_check == "error";
    return static_cast<int>(error ? EXIT_NEGATIVE : EXIT_OK);
  }, extras);
}
