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
  return stage_main_guard("tprobe-api-precision-compare", [&] {
    const auto &d = api_precision_compare_stage_description();
    CLI::App app{d.summary, "tprobe-api-precision-compare"};
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_declared_options(app, d, values);
    stage_add_describe_option(app, d);
    std::vector<std::string> args(argv + 1, argv + argc);
    for (size_t i = 0; i + 1 < args.size(); ++i)  // msprobe's framework flag, before or after the verb
      if (args[i] == "-f") args[i] = "--framework";
    args = msprobe_args_translate(std::move(args), msprobe_flags, known_options_of(app), "tprobe api-precision-compare");
    std::vector<char *> translated{argv[0]};
    for (auto &a : args) translated.push_back(a.data());
    stage_parse(app, static_cast<int>(translated.size()), translated.data());
    stage_check_declared_options(d, values);
    const precision_offline_options o{values.text("npu"), values.text("gpu"), values.text("output"),
                                      values.text("msprobe-version")};

    const precision_offline_report r = precision_offline_run(o);
    for (const auto &w : r.result.warnings) fmt::print(stderr, "tprobe-api-precision-compare: warning: {}\n", w);
    fmt::print("tprobe-api-precision-compare: {}\n", precision_summary_line(r));
    fmt::print(stderr, "tprobe-api-precision-compare: {} and {}\n", r.files.result.string(), r.files.details.string());
    return static_cast<int>(r.errors ? EXIT_NEGATIVE : EXIT_OK);
  });
}
