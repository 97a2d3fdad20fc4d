// monitor_record.h: the record that carries one step's rows of one csv prefix of task monitor
// (msprobe's TrainerMon, core/monitor.h), from the capture (tprobe_capture_monitor,
// tprobe_capture.h) to tprobe-monitor.
//
// A tensor record (transport/record.h) with
//   entry   "monitor"
//   slot    the csv prefix: actv actv_grad grad_reduced grad_unreduced exp_avg exp_avg_sq
//           param_origin param_updated other
//   step    the monitor step (optimizer steps from start_iteration); rank the producer's
//   dtype   uint8, shape [0], no payload
//   meta    {"monitor": monitor_rows_to_json(rows)}: {"step", "ops", "micro_step", "rows": [{"tag",
//           "values", "shape", "dtype"}]}
// and, once per session (msprobe's stack_info.csv, the first collected step), one record with
//   slot    "stack_info"; meta {"stack_info": [["0:fc", "File ..."], ...]} (module, call stack)
// So any stage can pass it on, tap it or record it to a file like any tensor record; only
// tprobe-monitor (and the report) read its meaning.
#pragma once

#include <string>
#include <string_view>

#include "monitor.h"
#include "record.h"

namespace tprobe {

inline constexpr std::string_view monitor_record_entry = "monitor";
inline constexpr std::string_view monitor_stack_info_slot = "stack_info";

// Fills `h` (kind, entry, slot = prefix, step = rows.step, dtype, shape, meta) from the rows.
// usage_error for a prefix that is not one of monitor_csv_prefixes().
[[nodiscard]] record monitor_record_make(record_header h, const std::string &prefix, const monitor_rows &rows);

// The stack_info record of monitor step `step`.
[[nodiscard]] record monitor_stack_record_make(record_header h, int64_t step, const std::vector<monitor_stack> &stacks);

[[nodiscard]] inline bool monitor_record_is(const record &r) {
  return r.header.kind == record_kind::tensor && r.header.entry == monitor_record_entry;
}

struct monitor_record_view {
  std::string prefix;  // the record's slot
  monitor_rows rows;   // rows.step == the record's step (no rows for "stack_info")
  std::vector<monitor_stack> stack_info;  // prefix "stack_info" only
};

// Reads a record made by monitor_record_make or monitor_stack_record_make. Throws framing_error when it is not one or its meta
// does not hold rows of a known prefix (the message describes the record).
[[nodiscard]] monitor_record_view monitor_record_read(const record &r);

}  // namespace tprobe
