// monitor_stage.h: tprobe-monitor, the stage that writes msprobe 8.3.3's training-monitor files
// (TrainerMon, 训练状态监控; docs/msprobe-compat.md §9.7, §9.8) from the capture's monitor records
// (transport/monitor_record.h: one record per csv prefix and monitor step, the numbers already
// reduced in the training process; core/monitor.h owns the semantics: csv bytes, rules, keys).
//
// Per producer rank R (0 when not distributed), from its session record on:
//   {output_dir}/{%b%d_%H-%M-%S}-rank{R}-{uuid8}/          the rank folder (0750), made at the session
//       {prefix}_{start}-{end}.csv                        format csv: the header once, when the file
//                                                         is created (0640), then each record's rows
//                                                         appended (one write), in arrival order
//       events.out.tfevents.{seconds}.{hostname}          format tensorboard: one event file, made at
//                                                         the session; a scalar "{tag}_{op}" per row
//                                                         and op but shape and dtype
//   {output_dir}/anomaly_detected/rank{R}/anomaly.json     alert.dump: reset to {} at the session (as
//                                                         msprobe's init_detected_json), then every
//                                                         anomaly merged in (indent 1) after the record
//                                                         that raised it, i.e. by the end of its step
// format api writes neither the folder nor the files (msprobe's BaseWriterWithAD); the rules and
// anomaly.json still run. output_dir is the session meta's "output_dir" (at its top level or in its
// "monitor" object; else its dump_path: the capture's $MONITOR_OUTPUT_DIR) unless --output-dir is
// given; the rank folder is the session meta's "rank_dir" when the capture named one. The monitor config is the session meta's "monitor"
// (validated by the capture, re-read with monitor_config_from_json): ops, ndigits,
// step_count_per_record, format, alert, module_ranks, append_output.
//
// The folder's timestamp is Asia/Shanghai time (UTC+8, no daylight saving since 1991), whatever
// the host's zone, as msprobe writes it (pytz): msprobe's csv2tb and append_output read these names.
// append_output ["Dec03_21-34-40", "Dec03_21-34-41"] (distributed producers, as msprobe): the
// rank's existing folder whose timestamp lies in that range is written into instead of a new one.
//
// Anomalies: each record's rows go through the rank's monitor_anomaly_detector (msprobe's EMA and
// first-rule-wins, rows then ops), and each alarm is printed on `log` the moment it fires:
//   tprobe-monitor: Rule AnomalyTurbulence reports anomaly signal in ('0:fc.weight/rank0/post_grad', 'norm') at step 2, current value 6.708204, history mean 2.236068.
// anomaly.json's values are msprobe's GradAnomalyData (core/monitor.h); its key names the op too
// (monitor_anomaly_key), so every (tag, op) that fired is kept. call_id is the row's (monitor_row::call_id,
// the capture's hook order; -1 unknown); pp_stage and group_mates the session meta's
// "pp_stage" and "group_mates" (top level or in "monitor"; default: R and [R]).
//
// Every record is passed on (io.send), so the stage can be tapped, chained or recorded.
//
// Example manifest (pipelines/monitor.json):
//   {"capture": {"task": "monitor"}, "stages": [{"name": "monitor", "stage": "monitor", "inputs": ["capture"]}]}
// Example launch line:
//   tprobe-monitor --input ipc:///tmp/run/monitor.in --producers 1
//
// Errors: framing_error for a malformed monitor record; usage_error for a monitor record before its
// session, a session without a valid "monitor" config, an output_dir msprobe would refuse
// (core/safe_path.h), a link or a foreign file where a csv goes; system_error for files.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "stage_io.h"
#include "stage_main.h"

namespace tprobe {

struct monitor_stage_options {
  std::string output_dir;    // "" = each session's output_dir
  std::FILE *log = nullptr;  // one line per alarm as it fires (nullptr: none)
};

struct monitor_stage_result {
  uint64_t records = 0;    // records received
  uint64_t monitor_records = 0, rows = 0;
  uint64_t anomalies = 0;  // alarms fired
  uint64_t scalars = 0;    // TensorBoard scalars written
  std::vector<std::string> rank_dirs;      // made or reused, in session order
  std::vector<std::string> csv_paths;      // every csv written to, in the order of its first rows
  std::vector<std::string> event_files;    // TensorBoard event files
  std::vector<std::string> anomaly_files;  // anomaly.json files
};

const stage_description &monitor_stage_description();
monitor_stage_result monitor_stage_run(stage_io &io, const monitor_stage_options &o);

// The rank folder's name: "{%b%d_%H-%M-%S}-rank{R}-{id8}" with the time `unix_seconds` in
// Asia/Shanghai (UTC+8) and English month abbreviations ("Dec06_21-05-09-rank0-1a2b3c4d").
[[nodiscard]] std::string monitor_rank_dir_name(int64_t unix_seconds, int64_t rank, const std::string &id8);

// Appends `lines` to the csv at `path` in one write, after `header` when the file is new or empty.
// Returns true when it created the file (0640). usage_error for a link, a non-regular or an
// others-writable file; system_error for I/O.
bool monitor_csv_append(const std::string &path, const std::string &header, const std::string &lines);

}  // namespace tprobe
