// monitor.h: msprobe 8.3.3's training monitor (TrainerMon, 训练状态监控; docs/msprobe-compat.md §9) as far as
// it needs no tensor library: the monitor config and its validation, the tag grammar, the csv
// files' names and bytes, and the anomaly rules with their records and ordering.
//
// Where each piece runs: the framework capture (python/tprobe/monitor.py, capture/torch/monitor.cpp)
// reduces the tensors and hands one step's rows per csv prefix to the capture API
// (tprobe_capture_monitor), which carries them as a record (transport/monitor_record.h) to the
// tprobe-monitor stage; the stage writes the csv files with monitor_csv_*, runs the rules with
// monitor_anomaly_detector and writes anomaly.json with monitor_anomaly_data. The top-k command
// (msprobe's anomaly_processor) sorts with monitor_anomaly_top_k.
//
// msprobe's quirks are kept unless a line here says otherwise; the one deliberate difference is
// anomaly.json's key (monitor_anomaly_key): msprobe's `{tag}_step_{s}_call_{id}` lets a later
// anomalous op of the same tag and step overwrite an earlier one; tprobe's key names the op, so
// every (tag, op) that fired is kept. The values are msprobe's, so its sorter reads the file.
//
// Errors: usage_error (core/errors.h), one line naming the source and the field
// (`monitor.json: field "ndigits": ...`). Thread-safe: pure functions, except the detector,
// which is one object per writer.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tprobe {

// ---- The config (msprobe's validate_config, msprobe/core/monitor/utils.py, and set_config) ----

// MonitorConst.OP_LIST, in its order.
[[nodiscard]] const std::vector<std::string> &monitor_op_list();

// One alert rule as loaded by msprobe's AnomalyScanner.load_rules.
struct monitor_rule {
  enum class kind { turbulence, nan };
  kind k = kind::nan;
  std::optional<double> threshold;  // turbulence: always set; nan: optional

  [[nodiscard]] std::string_view name() const { return k == kind::turbulence ? "AnomalyTurbulence" : "AnomalyNan"; }
  // AnomalyTurbulence: |cur| > history * (1 + threshold) (upward only, as msprobe's);
  // AnomalyNan: isnan(cur) or (threshold given and |cur| > threshold).
  [[nodiscard]] bool apply(double cur, double history) const;
};

struct monitor_config {
  // The config as validated, msprobe's defaults filled in: ops expanded (shape and dtype
  // appended), int fields reset to their defaults where msprobe resets them, targets {"": {}}
  // when empty (and all_xy true then with xy_distribution), format "csv" where msprobe falls back
  // to it, every other key kept as given. What the capture and the stage read.
  nlohmann::ordered_json json;
  // The lines msprobe logs as warnings and goes on: invalid ops dropped, int fields reset, rules
  // skipped, an unknown format, ur_distribution without tensorboard, forward_only with
  // backward_only. The caller prints them.
  std::vector<std::string> warnings;

  std::vector<std::string> ops;  // e.g. {"min", "max", "norm", "shape", "dtype"}
  double eps = 1e-8;
  int ndigits = 6;                         // 0..20 (msprobe lets 0 through: rounding to units)
  int64_t step_count_per_record = 1;       // 1..1e6
  int64_t start_step = 0, step_interval = 1, collect_times = 100000000;
  std::string format = "csv";              // csv | tensorboard | api
  std::vector<monitor_rule> rules;         // alert.rules as loaded (in config order)
  bool alert_dump = false;                 // alert.dump: write anomaly.json
  bool squash_name = true;                 // 8.3.3's default
  bool dynamic_on = false;
  bool monitor_mbs_grad = false;
  std::vector<int64_t> module_ranks;       // empty: every rank
};

// msprobe's validate_config on a parsed document, plus set_config's fallbacks. Every key msprobe
// reads is checked: what msprobe refuses is a usage_error `{source}: field "{key}": {problem}`;
// what msprobe replaces with a default (start_step, step_interval, collect_times,
// monitor_mbs_grad, ops) becomes a warning. The flags msprobe reads without checking (all_xy,
// forward_only, backward_only, mv_distribution, mg_direction, stack_info) must be booleans here.
// Unknown keys are kept and ignored, as msprobe does.
[[nodiscard]] monitor_config monitor_config_from_json(const nlohmann::ordered_json &doc, const std::string &source);
// Reads and validates a monitor config file (Python's json: NaN allowed). usage_error for a file
// that does not parse, system_error when it cannot be read.
[[nodiscard]] monitor_config monitor_config_read(const std::string &path);

// ---- Tags and names (msprobe's module_metric.py and module_hook.py) ----

// get_summary_writer_tag_name: "{name}/rank{rank}/{suffix}", or "{name}/{suffix}" without a rank.
[[nodiscard]] std::string monitor_tag(std::string_view name, std::string_view suffix, std::optional<int64_t> rank);
// squash_param_name: group 1 of the first of ^.*\.(layers?\..*), ^.*\.(embeddings?\..*),
// ^.*\.(final.*), ^.*\.(output.*), ^.*\.(norm.*) that matches; else the name unchanged.
// "module.language_model.encoder.layers.0.mlp.w" -> "layers.0.mlp.w".
[[nodiscard]] std::string monitor_squash_name(std::string_view name);
// The csv's view of a tag: tag.split('/')[0] ("0:fc.input:0"), then split(':').
[[nodiscard]] std::string monitor_tag_name(std::string_view tag);
[[nodiscard]] std::vector<std::string> monitor_name_split(std::string_view name);

// ---- The rows of one step and one csv prefix (what a monitor record carries) ----

// One statistic as msprobe's writer holds it after .item(): a float, or an int (nans computed on
// the CPU, where msprobe does not stack it into a float tensor). NaN for msprobe's NaN (a
// non-tensor, a RuntimeError in the op, id of a tensor with dimensions).
struct monitor_number {
  double value = 0;
  bool integer = false;  // value holds an integer (written "3", not "3.0", unless its column has a float)
};

struct monitor_row {
  std::string tag;                     // "0:fc.input:0/rank0/actv"
  std::vector<monitor_number> values;  // one per op except shape and dtype, in ops order
  // The tensor's shape and dtype ("torch.float16"); nullopt: a non-tensor, written "nan".
  std::optional<std::vector<int64_t>> shape;
  std::optional<std::string> dtype;
  // msprobe's call_id of the tag: its place in the step's hook-firing order (forward
  // activations, backward, grad hooks, optimizer); -1 unknown. anomaly.json's call_id.
  int64_t call_id = -1;
};

struct monitor_rows {
  int64_t step = 0;               // the monitor step (optimizer steps from start_iteration)
  std::vector<std::string> ops;   // the csv's op columns, in order (shape and dtype among them)
  bool micro_step = false;        // the csv has a micro_step column (monitor_prefix_has_micro_step)
  std::vector<monitor_row> rows;
};

// {"step": S, "ops": [...], "micro_step": b, "rows": [{"tag", "values", "shape", "dtype",
// "call_id"}]}; values are JSON integers where `integer`, floats (NaN as a float NaN) otherwise; a
// non-tensor's shape and dtype are null; call_id is written when it is not -1 (optional on read).
[[nodiscard]] nlohmann::ordered_json monitor_rows_to_json(const monitor_rows &rows);
// The inverse, checking everything: ops known (monitor_op_list), each row's values one per op
// except shape and dtype, numbers or null (NaN). usage_error naming `what` and the field.
[[nodiscard]] monitor_rows monitor_rows_from_json(const nlohmann::ordered_json &j, const std::string &what);

// ---- The csv files (msprobe's CSVWriterWithAD, pytorch/monitor/data_writers.py) ----

// The csv prefixes msprobe writes: actv actv_grad grad_reduced grad_unreduced exp_avg exp_avg_sq
// param_origin param_updated other.
[[nodiscard]] const std::vector<std::string> &monitor_csv_prefixes();
// Whether the prefix's csv has a micro_step column: actv, actv_grad, and grad_unreduced with
// monitor_mbs_grad.
[[nodiscard]] bool monitor_prefix_has_micro_step(std::string_view prefix, bool monitor_mbs_grad);
// The steps one file holds: start = (step // k)·k, end = start + k − 1.
[[nodiscard]] std::pair<int64_t, int64_t> monitor_csv_step_range(int64_t step, int64_t step_count_per_record);
// "{prefix}_{start}-{end}.csv".
[[nodiscard]] std::string monitor_csv_file_name(std::string_view prefix, int64_t step, int64_t step_count_per_record);
// The header line written when the file is created: "vpp_stage,name,step[,micro_step],{ops}\n".
[[nodiscard]] std::string monitor_csv_header(const std::vector<std::string> &ops, bool micro_step);
// The lines msprobe appends for one step of one prefix: each row is name.split(':') + the values
// in ops order, with the step inserted at index 2 (list.insert), through
//   pd.DataFrame(rows).round(ndigits).fillna("nan").to_csv(header=False, index=False)
// i.e. column types inferred over all these rows as pandas infers them (a column of ints stays
// int; ints with a float or a NaN become floats, "3.0"), float columns rounded as numpy rounds
// (rint(x·10^n)/10^n), floats written as repr, NaN as "nan", shapes "[2, 3]" (quoted: it has a
// comma), csv quoting as Python's csv (QUOTE_MINIMAL), '\n' line ends.
[[nodiscard]] std::string monitor_csv_lines(const monitor_rows &rows, int ndigits);

// ---- stack_info.csv (msprobe's write_stack_info) ----

// One hooked module's call stack: msprobe's module_fwd_hook_context_by_module order.
struct monitor_stack {
  std::string module_name;  // "0:fc" (vpp prefix, squashed as the tags)
  std::string stack;        // analyze_api_call_stack's text
};
// [["0:fc", "File ..."], ...] both ways; usage_error naming `what` when an item is not a pair of
// strings.
[[nodiscard]] nlohmann::ordered_json monitor_stack_info_to_json(const std::vector<monitor_stack> &stacks);
[[nodiscard]] std::vector<monitor_stack> monitor_stack_info_from_json(const nlohmann::ordered_json &j, const std::string &what);
// The file msprobe writes once per rank folder (pd.DataFrame(columns=[header, rows...]).to_csv):
// "module_name,stack_info\n" then one line a module, quoted as Python's csv, '\n' line ends.
[[nodiscard]] std::string monitor_stack_info_csv(const std::vector<monitor_stack> &stacks);

// numpy's round(x, n) for float64 (np.around): rint(x * 10^n) / 10^n, half to even; n >= 0.
[[nodiscard]] double monitor_round(double x, int ndigits);

// ---- Anomaly rules (msprobe's BaseWriterWithAD.add_scalar, core/monitor/anomaly_processor.py) ----

// msprobe's AnomalyScanner.scan: the first rule whose apply() is true, or nullptr.
[[nodiscard]] const monitor_rule *monitor_scan(const std::vector<monitor_rule> &rules, double history, double cur);

// One fired rule that msprobe reports (prints, and dumps with alert.dump).
struct monitor_anomaly {
  std::string tag;  // "0:fc.weight/rank0/post_grad"
  std::string op;   // "norm"
  std::string rule; // "AnomalyTurbulence"
  int64_t step = 0;
  monitor_number value, history;
  // "Rule {rule} reports anomaly signal in ('{tag}', '{op}') at step {step}, current value {v},
  // history mean {h}." (v and h as Python prints them: repr of a float, an int as an int).
  [[nodiscard]] std::string message() const;
};

// The EMA state of one (tag, op).
struct monitor_ema {
  monitor_number avg;  // an int until the first update, as msprobe's abs(int)
  int64_t count = 0;
};

// msprobe's per-writer anomaly state. add() is add_scalar for one (tag, op):
//   shape/dtype (and any op with no rules configured): nothing;
//   state = {avg: |v|, count: 0} the first time; hist = avg; avg = 0.99·hist + 0.01·|v|; count += 1;
//   the first rule that applies decides; AnomalyTurbulence on an op other than norm and mean is
//   dropped silently (later rules not tried).
// One difference: op "id" with a NaN value (msprobe's None for a tensor with dimensions, where
// msprobe's abs(None) raises) is skipped.
class monitor_anomaly_detector {
 public:
  explicit monitor_anomaly_detector(std::vector<monitor_rule> rules) : rules_(std::move(rules)) {}
  [[nodiscard]] std::optional<monitor_anomaly> add(const std::string &tag, const std::string &op, monitor_number v,
                                                   int64_t step);
  // Every row of `rows` in msprobe's order (rows, then ops); the anomalies found, in that order.
  [[nodiscard]] std::vector<monitor_anomaly> add_rows(const monitor_rows &rows);
  // The state of (tag, op), or nullptr before its first value.
  [[nodiscard]] const monitor_ema *state(const std::string &tag, const std::string &op) const;
  [[nodiscard]] const std::vector<monitor_rule> &rules() const { return rules_; }

 private:
  std::vector<monitor_rule> rules_;
  std::unordered_map<std::string, monitor_ema> ema_;  // key: tag + '\n' + op
};

// msprobe's train stage of a tag, from its last '/' segment: actv 0; actv_grad, pre_grad,
// post_grad, acc_grad 1; exp_avg, exp_avg_sq 2; anything else -1.
[[nodiscard]] int monitor_train_stage(std::string_view tag_name);

// msprobe's GradAnomalyData (anomaly.json's values).
struct monitor_anomaly_data {
  int64_t rank = 0, step = 0, micro_step = 0, pp_stage = 0, vpp_stage = 0, call_id = 0;
  std::string tag_name;
  std::string message;
  std::vector<int64_t> group_mates;
  // msprobe's to_dict: rank, step, micro_step, pp_stage, vpp_stage, call_id, tag_name, message,
  // group_mates, in that order.
  [[nodiscard]] nlohmann::ordered_json to_json() const;
};

// AnomalyDataFactory.create: micro_step 0, vpp_stage the int before the first ':' of the tag's
// name (0 when there is none or it is no integer), call_id as given (-1: unknown).
[[nodiscard]] monitor_anomaly_data monitor_anomaly_data_make(const monitor_anomaly &a, int64_t rank, int64_t pp_stage,
                                                             std::vector<int64_t> group_mates, int64_t call_id = -1);
// One anomaly.json value, as msprobe's loader reads it (GradAnomalyData(**values)): missing keys
// take the dataclass defaults; nullopt (with `why`) where msprobe's loader skips it with a warning
// (an unknown key, a value of the wrong type).
[[nodiscard]] std::optional<monitor_anomaly_data> monitor_anomaly_data_from_json(const nlohmann::ordered_json &j,
                                                                                 std::string *why = nullptr);

// anomaly.json's key: "{tag}_{op}_step_{step}_call_{call_id}". msprobe's is
// "{tag}_step_{step}_call_{call_id}", without the op (a later op of the same tag overwrites an
// earlier one); msprobe's sorter reads only the values, so it reads tprobe's files.
[[nodiscard]] std::string monitor_anomaly_key(std::string_view tag, std::string_view op, int64_t step, int64_t call_id);
// msprobe's own key, for reference and tests.
[[nodiscard]] std::string monitor_anomaly_key_msprobe(std::string_view tag, int64_t step, int64_t call_id);

// GradAnomalyData.__lt__: (step, micro_step, train_stage, vpp, pp, call_id) lexicographically,
// with vpp and pp negated when a's train stage is not forward (0).
[[nodiscard]] bool monitor_anomaly_less(const monitor_anomaly_data &a, const monitor_anomaly_data &b);
// AnomalyAnalyse.get_range_top_k: those whose step is in `steps` (all when empty), sorted stably
// by monitor_anomaly_less, the first k (Python's sorted / heapq.nsmallest).
[[nodiscard]] std::vector<monitor_anomaly_data> monitor_anomaly_top_k(std::vector<monitor_anomaly_data> anomalies,
                                                                      size_t k, const std::vector<int64_t> &steps);

// Python's repr(str) (single quotes unless the text has ' and no "), for the messages.
[[nodiscard]] std::string monitor_py_str_repr(std::string_view s);

}  // namespace tprobe
