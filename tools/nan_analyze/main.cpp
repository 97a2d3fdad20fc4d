// tprobe-nan-analyze: see nan_offline.h.
#include <algorithm>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/msprobe_cli.h"
#include "nan_offline.h"

namespace {

// msprobe's spellings (msprobe_cli.h): `msprobe -f pytorch nan_analyze -i STEPDIR -o OUT`.
constexpr tprobe::msprobe_flag msprobe_flags[] = {
    {"--output_path", "--output", true},
    {"--framework", "", true, "", "pytorch"},
};

}  // namespace

int main(int argc, char **argv) {
  using namespace tprobe;
  nan_offline_options o;
  std::string input_path;
  stage_main_extras extras;
  extras.add_arguments = [&](CLI::App &app) {
    app.add_option("STEPDIR", o.step_dir, "a step folder holding rank folders (rank, rank0, rank1, …)");
    app.add_option("-i,--input_path", input_path, "the step folder, as msprobe's nan_analyze takes it");
  };
  extras.translate = [](std::vector<std::string> args, const CLI::App &app) {
    for (size_t i = 0; i + 1 < args.size(); ++i)  // msprobe's framework flag, before or after the verb
      if (args[i] == "-f") args[i] = "--framework";
    return msprobe_args_translate(std::move(args), msprobe_flags, known_options_of(app), "tprobe nan-analyze");
  };
  return stage_main(argc, argv, nan_analyze_stage_description(), [&](stage_main_context &c) {
    if (!input_path.empty() && !o.step_dir.empty()) throw usage_error("give STEPDIR or -i STEPDIR, not both");
    if (!input_path.empty()) o.step_dir = input_path;
    if (o.step_dir.empty()) throw usage_error("STEPDIR is required (or msprobe's -i STEPDIR)");
    o.output_dir = c.values().text("output");
    o.config_path = c.values().text("config");

    const nan_offline_report r = nan_offline_run(o);
    for (const auto &w : r.warnings) fmt::print(stderr, "tprobe-nan-analyze: warning: {}\n", w);
    for (const auto &e : r.errors)
      fmt::print(stderr, "tprobe-nan-analyze: error: rank {} not analysed: {}\n", e.rank, e.message);
    const std::string not_read =
        r.errors.empty() ? "" : fmt::format("; {} rank folder{} not read", r.errors.size(), r.errors.size() == 1 ? "" : "s");
    if (!r.verdict) {
      fmt::print("tprobe-nan-analyze: no NaN/Inf producer in {} ({} ranks, {} entries{})\n", o.step_dir, r.ranks,
                 r.entries, not_read);
    } else {
      fmt::print("tprobe-nan-analyze: {}\n", nan_answer_line(*r.verdict));
      fmt::print(stderr, "tprobe-nan-analyze: {} producers, {} calls with a non-finite output, {} explained by allow rules; "
                 "{}\n", r.verdict->producers.size(), r.verdict->anomalous, r.verdict->allowed, r.file);
    }
    // A rank left out is no pass and no answer: its data could hold the first producer.
    if (!r.errors.empty()) {
      fmt::print(stderr, "tprobe-nan-analyze: {} of {} rank folders could not be analysed; the answer covers the others only\n",
                 r.errors.size(), r.errors.size() + r.ranks);
      const bool unreadable = std::any_of(r.errors.begin(), r.errors.end(), [](const auto &e) { return e.system; });
      return static_cast<int>(unreadable ? EXIT_SYSTEM : EXIT_USAGE);
    }
    return static_cast<int>(r.verdict ? EXIT_NEGATIVE : EXIT_OK);
  }, extras);
}
