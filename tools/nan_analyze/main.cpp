// tprobe-nan-analyze: see nan_offline.h.
#include <algorithm>

#include <fmt/format.h>

#include "nan_offline.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main_guard("tprobe-nan-analyze", [&] {
    const auto &d = nan_analyze_stage_description();
    CLI::App app{d.summary, "tprobe-nan-analyze"};
    nan_offline_options o;
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    app.add_option("STEPDIR", o.step_dir, "a step folder holding rank folders (rank, rank0, rank1, …)")->required();
    stage_add_declared_options(app, d, values);
    stage_add_describe_option(app, d);
    stage_parse(app, argc, argv);
    stage_check_declared_options(d, values);
    o.output_dir = values.text("output");
    o.config_path = values.text("config");

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
  });
}
