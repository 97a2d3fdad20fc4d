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
  return stage_main_guard("tprobe-monitor-anomaly", [&] {
    const auto &d = monitor_anomaly_stage_description();
    CLI::App app{d.summary, "tprobe-monitor-anomaly"};
    stage_option_values values;  // from the option table: parser, --describe, --help and ranges agree
    stage_add_declared_options(app, d, values);
    stage_add_describe_option(app, d);
    std::vector<std::string> args(argv + 1, argv + argc);
    args = msprobe_args_translate(std::move(args), msprobe_flags, known_options_of(app), "tprobe monitor-anomaly");
    std::vector<char *> translated{argv[0]};
    for (auto &a : args) translated.push_back(a.data());
    stage_parse(app, static_cast<int>(translated.size()), translated.data());
    stage_check_declared_options(d, values);
    const monitor_anomaly_options o{values.text("data-path"), values.text("out-path"), values.integer("topk"),
                                    values.text("step")};

    const monitor_anomaly_result r = monitor_anomaly_run(o);
    for (const auto &w : r.warnings) fmt::print(stderr, "tprobe-monitor-anomaly: warning: value skipped: {}\n", w);
    fmt::print("tprobe-monitor-anomaly: Top {} anomalies are listed as follows:\n", o.top_k);
    for (size_t i = 0; i < r.top.size(); ++i) fmt::print("tprobe-monitor-anomaly: {}: {}\n", i, r.top[i].second.message);
    fmt::print("tprobe-monitor-anomaly: {} anomalies in {} anomaly.json files; {}\n", r.anomalies, r.files.size(), r.output);
    return static_cast<int>(EXIT_OK);
  });
}
