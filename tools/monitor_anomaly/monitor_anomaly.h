// monitor_anomaly.h: tprobe-monitor-anomaly, msprobe's anomaly sorter
// (`python3 -m msprobe.core.monitor.anomaly_processor -d DIR [-o OUT] [-k 8] [-s "[steps]"]`,
// docs/msprobe-compat.md §9.8) over the anomaly.json files that tprobe-monitor (or msprobe's TrainerMon)
// writes under {output_dir}/anomaly_detected/:
//
//   tprobe monitor-anomaly -d monitor_output/anomaly_detected [-o OUT] [-k 8] [-s "[2, 3]"]
//   (msprobe's spellings --data_path, --out_path, --topk, --step too)
//
// It reads the anomaly.json of every sub-folder of DIR (msprobe reads every one, not only rank*/;
// here in the order of the number after "rank", then the name, so that ties keep one order),
// each value as msprobe's GradAnomalyData(**values) (core/monitor.h monitor_anomaly_data_from_json:
// a value msprobe would skip is skipped with a warning naming the file and key), keeps those whose
// step is in the -s list (all for "[]"), and the k smallest by msprobe's order (step, micro_step,
// train stage, vpp and pp — larger first outside the forward —, call_id; monitor_anomaly_top_k,
// stable as Python's sorted). It writes OUT/anomaly_analyse.json (OUT defaults to DIR; indent 1, as
// msprobe's save_json) and prints msprobe's listing:
//   tprobe-monitor-anomaly: Top 8 anomalies are listed as follows:
//   tprobe-monitor-anomaly: 0: Rule AnomalyTurbulence reports anomaly signal in (…) at step 2, …
// One difference: each kept anomaly keeps the key it had in its anomaly.json. msprobe re-keys them
// "{tag}_step_{s}_call_{id}", which merges the anomalies of one tag and step on different ops
// (tprobe's anomaly.json keeps each (tag, op), monitor_anomaly_key).
//
// Exit 0 (also with anomalies: it sorts, it does not judge); 100 for a DIR or OUT that is not a
// folder, a -s that is not a list of integers, -k < 1, or an anomaly.json that is not JSON or not an
// object; 111 when a file cannot be read or written.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "monitor.h"
#include "stage_main.h"

namespace tprobe {

struct monitor_anomaly_options {
  std::string data_path;     // the anomaly_detected folder
  std::string out_path;      // "" = data_path
  int64_t top_k = 8;
  std::string steps = "[]";  // a Python list of step numbers
};

struct monitor_anomaly_result {
  std::vector<std::string> files;     // anomaly.json files read
  size_t anomalies = 0;               // values read (before the step filter)
  std::vector<std::string> warnings;  // values skipped: "FILE: KEY: why"
  std::vector<std::pair<std::string, monitor_anomaly_data>> top;  // key and value, in order
  std::string output;                 // anomaly_analyse.json written
};

const stage_description &monitor_anomaly_stage_description();

// msprobe's -s: a Python list literal of integers ("[]", "[1, 2]"). usage_error otherwise.
[[nodiscard]] std::vector<int64_t> monitor_anomaly_steps_parse(const std::string &text);

// Reads, sorts, writes (above). Throws usage_error / system_error as the header says.
[[nodiscard]] monitor_anomaly_result monitor_anomaly_run(const monitor_anomaly_options &o);

}  // namespace tprobe
