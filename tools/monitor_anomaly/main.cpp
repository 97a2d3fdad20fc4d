// tprobe-monitor-anomaly: see monitor_anomaly.h.
#include <string>
#include <vector>

#include <fmt/format.h>

#include "common/msprobe_cli.h"
#include "monitor_anomaly.h"

namespace {

// msprobe's long spellings (anomaly_processor's argparse): --data_path, --out_path.
constexpr tprobe::msprobe_flag msprobe_flags[] = {
    {"--data_path", "--data-path", true, "", ""},
    {"--out_path", "--out-path", true, "", ""},
};

}  // namespace

int main(int argc, char **argv) {
  using namespace tprobe;
  stage_main_extras extras;
  extras.translate = [](std::vector<std::string> args, const CLI::App &app) {
    return msprobe_args_translate(std::move(args), msprobe_flags, known_options_of(app), "tprobe monitor-anomaly");
  };
  return stage_main(argc, argv, monitor_anomaly_stage_description(), [](stage_main_context &c) {
    const monitor_anomaly_options o{c.values().text("data-path"), c.values().text("out-path"),
                                    c.values().integer("topk"), c.values().text("step")};
    const monitor_anomaly_result r = monitor_anomaly_run(o);
    for (const auto &w : r.warnings) fmt::print(stderr, "tprobe-monitor-anomaly: warning: value skipped: {}\n", w);
    fmt::print("tprobe-monitor-anomaly: Top {} anomalies are listed as follows:\n", o.top_k);
    for (size_t i = 0; i < r.top.size(); ++i) fmt::print("tprobe-monitor-anomaly: {}: {}\n", i, r.top[i].second.message);
    fmt::print("tprobe-monitor-anomaly: {} anomalies in {} anomaly.json files; {}\n", r.anomalies, r.files.size(), r.output);
    return static_cast<int>(EXIT_OK);
  }, extras);
}
