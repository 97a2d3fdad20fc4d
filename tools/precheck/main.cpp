// tprobe-precheck: msprobe's accuracy pre-check (run_ut / acc_check) of one dump; see precheck_run.h.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/msprobe_cli.h"
#include "precheck_run.h"
#include "stage_main.h"

namespace {

const tprobe::stage_description &description() {
  static const tprobe::stage_description d = [] {
    tprobe::stage_description d{
        "precheck",
        "replay every API of a dump on the CPU one precision higher and judge it by msprobe's standards (run_ut)",
        false,
        false,
        {
            {"output", "string", "./", "folder for accuracy_checking_{result,details}_{ts}.csv", {}, {}, "-o"},
            {"jobs", "int", "1", "APIs replayed in parallel (one core each)", 1, 1024, "-j"},
            {"resume", "string", "", "an accuracy_checking_result_{ts}.csv to append to, skipping the APIs it holds"},
        }};
    const auto &shared = tprobe::precheck::precheck_run_option_specs();
    d.options.insert(d.options.end(), shared.begin(), shared.end());
    return d;
  }();
  return d;
}

// msprobe's spellings of `msprobe -f pytorch run_ut` / `msprobe acc_check`.
constexpr tprobe::msprobe_flag msprobe_flags[] = {
    {"-api_info", "--api-info", true, "", ""},
    {"--api_info_file", "--api-info", true, "", ""},
    {"--out_path", "--output", true, "", ""},
    {"-save_error_data", "--save-error-data", false, "", ""},
    {"--save_error_data", "--save-error-data", false, "", ""},
    {"-csv_path", "--resume", true, "", ""},
    {"--result_csv_path", "--resume", true, "", ""},
    {"-f", "--filter-duplicates", false, "", ""},
    {"--filter_api", "--filter-duplicates", false, "", ""},
    {"-config", "--config", true, "", ""},
    {"--config_path", "--config", true, "", ""},
    {"--jit_compile", "", false, "NPU compile mode; tprobe replays on the CPU", ""},
    {"-d", "", true, "tprobe replays on the CPU and judges the device outputs the dump holds; no device is used", ""},
    {"--device", "", true, "tprobe replays on the CPU and judges the device outputs the dump holds; no device is used", ""},
};

}  // namespace

int main(int argc, char **argv) {
  using namespace tprobe;
  precheck::precheck_offline_options o;
  std::string api_info;
  stage_main_extras extras;
  extras.add_arguments = [&](CLI::App &app) {
    app.add_option("DUMP", o.dump, "dump.json, a rank folder or a step folder");
    app.add_option("--api-info", api_info, "the dump.json, as msprobe's -api_info takes it");
  };
  extras.translate = [](std::vector<std::string> args, const CLI::App &app) {
    return msprobe_args_translate(std::move(args), msprobe_flags, known_options_of(app), "tprobe precheck");
  };
  return stage_main(argc, argv, description(), [&](stage_main_context &c) {
    precheck::precheck_tune_allocator();
    if (!api_info.empty() && !o.dump.empty()) throw usage_error("give DUMP or -api_info DUMP, not both");
    if (!api_info.empty()) o.dump = api_info;
    if (o.dump.empty()) throw usage_error("DUMP is required (a dump.json, rank folder or step folder; or -api_info)");
    o.output_dir = c.values().text("output");
    o.jobs = static_cast<unsigned>(c.values().integer("jobs"));
    o.run = precheck::precheck_run_options_of(c.values());
    o.run.resume_csv = c.values().text("resume");
    const auto report = precheck::precheck_offline(o);
    const auto &n = report.counts;
    if (n.first_not_pass) fmt::print("tprobe-precheck: first API not pass: {}\n", *n.first_not_pass);
    fmt::print("tprobe-precheck: {} APIs: {} pass, {} warning, {} error, {} SKIP", n.total(), n.pass, n.warning,
               n.error, n.skip);
    for (const auto &f : report.files) fmt::print("; {}", f.result_csv);
    fmt::print("\n");
    return static_cast<int>(n.failed() ? EXIT_NEGATIVE : EXIT_OK);
  }, extras);
}
