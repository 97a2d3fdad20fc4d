// tprobe-ckpt-compare: see ckpt_compare.h.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "ckpt_compare.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  ckpt_compare_options o;
  std::vector<std::string> paths, compare;
  stage_main_extras extras;
  extras.add_arguments = [&](CLI::App &app) {
    app.add_option("A B", paths, "the two checkpoints: torch.save files, folders of them, or Megatron-LM checkpoint folders")
        ->expected(0, 2);
    app.add_option("-c,--compare", compare, "the two checkpoints, as msprobe's config_check -c takes them")->expected(2);
  };
  return stage_main(argc, argv, ckpt_compare_stage_description(), [&](stage_main_context &c) {
    if (!compare.empty() && !paths.empty()) throw usage_error("give A B or -c A B, not both");
    if (!compare.empty()) paths = compare;
    if (paths.size() != 2) throw usage_error("two checkpoints are required: tprobe ckpt-compare A B -o OUT.json");
    o.a = paths[0];
    o.b = paths[1];
    o.output = c.values().text("output");
    o.threads = static_cast<int>(c.values().integer("threads"));

    const ckpt_compare_report r = ckpt_compare_run(o);
    for (const auto &w : r.warnings) fmt::print(stderr, "tprobe-ckpt-compare: warning: {}\n", w);
    for (const auto &line : ckpt_summary(r)) fmt::print("{}\n", line);
    // A measurement, not a verdict: differing checkpoints are the expected case, so exit 0.
    return static_cast<int>(EXIT_OK);
  }, extras);
}
