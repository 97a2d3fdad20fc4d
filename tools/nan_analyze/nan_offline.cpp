#include <fmt/format.h>

#include "capture_config.h"
#include "nan_offline.h"
#include "safe_path.h"

namespace tprobe {

const stage_description &nan_analyze_stage_description() {
  static const stage_description d{
      "nan-analyze",
      "name the operator and rank that produced the first NaN/Inf of a step folder (msprobe nan_analyze)",
      false,
      false,
      {
          {"output", "string", "./output", "folder for anomaly_analyze_{ns}.json", {}, {}, "-o"},
          {"config", "string", "",
           "msprobe config.json whose tprobe.nan_analyze section adds allow rules (default: the built-in rules)"},
      }};
  return d;
}

nan_offline_report nan_offline_run(const nan_offline_options &o) {
  nan_offline_report report;
  nan_rules rules = nan_rules_default();
  if (!o.config_path.empty()) {
    const capture_config cfg = config_load(o.config_path);
    rules = nan_rules_from_json(cfg.nan_analyze, fmt::format("{}: field \"tprobe.nan_analyze\"", o.config_path));
  }
  const std::vector<nan_rank> ranks = nan_load_step(o.step_dir, report.warnings, &report.errors);
  report.ranks = ranks.size();
  for (const auto &r : ranks) report.entries += r.entries.size();
  report.verdict = nan_analyze(ranks, rules);
  if (report.verdict) {
    const std::string dir = path_check_create(o.output_dir, "output path");
    safe_mkdirs(dir);
    report.file = nan_write_result(dir, nan_result_json(ranks, *report.verdict));
  }
  return report;
}

}  // namespace tprobe
