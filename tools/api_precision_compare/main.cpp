// tprobe-api-precision-compare: see precision_offline.h.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/msprobe_cli.h"
#include "precision_offline.h"

namespace {

// msprobe's spellings (msprobe_cli.h): `msprobe -f pytorch api_precision_compare -npu A -gpu B -o OUT`.
constexpr tprobe::msprobe_flag msprobe_flags[] = {
    {"-npu", "--npu", true, "", ""},
    {"--npu_csv_path", "--npu", true, "", ""},
    {"-gpu", "--gpu", true, "", ""},
    {"--gpu_csv_path", "--gpu", true, "", ""},
    {"--out_path", "--output", true, "", ""},
    {"--framework", "", true, "", "pytorch"},
};

}  // namespace

int main(int argc, char **argv) {
  using namespace tprobe;
  stage_main_extras extras;
  extras.translate = [](std::vector<std::string> args, const CLI::App &app) {
    for (size_t i = 0; i + 1 < args.size(); ++i)  // msprobe's framework flag, before or after the verb
      if (args[i] == "-f") args[i] = "--framework";
    return msprobe_args_translate(std::move(args), msprobe_flags, known_options_of(app), "tprobe api-precision-compare");
  };
  return stage_main(argc, argv, api_precision_compare_stage_description(), [](stage_main_context &c) {
    const precision_offline_options o{c.values().text("npu"), c.values().text("gpu"), c.values().text("output"),
                                      c.values().text("msprobe-version")};
    const precision_offline_report r = precision_offline_run(o);
    for (const auto &w : r.result.warnings) fmt::print(stderr, "tprobe-api-precision-compare: warning: {}\n", w);
    fmt::print("tprobe-api-precision-compare: {}\n", precision_summary_line(r));
    fmt::print(stderr, "tprobe-api-precision-compare: {} and {}\n", r.files.result.string(), r.files.details.string());
    return static_cast<int>(r.errors ? EXIT_NEGATIVE : EXIT_OK);
  }, extras);
}
