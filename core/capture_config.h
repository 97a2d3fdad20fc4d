// capture_config.h: msprobe's config.json for the capture, parsed, validated and turned into a filter.
//
// The file is msprobe's own (docs: docs/msprobe-compat.md §3), so an existing msprobe config works
// unchanged:
//
//     { "task": "statistics", "dump_path": "./dump_path", "rank": [], "step": [0, "2-4"],
//       "level": "L1", "statistics": {"scope": [], "list": ["linear"], "data_mode": ["forward"],
//                                      "summary_mode": "statistics"} }
//
// Differences from msprobe, all deliberate:
// - unknown keys (top level, and inside the section of the selected task) are rejected with a
//   message listing the allowed ones, where msprobe silently ignores them: typos must not turn
//   into a capture of everything;
// - every problem is one usage_error line naming the input and the field, e.g.
//       config.json: field "rank": element "5-3" is not a valid range (a <= b required)
//   Environment overrides name the variable instead: `TPROBE_LEVEL: "L3" is not one of ...`.
//
// All eight tasks are accepted and validated as msprobe does; the capture itself implements the
// statistics, tensor and structure semantics. Nothing here is thread-safe; parse once, then copy.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include <nlohmann/json.hpp>

#include "dump_semantics.h"

namespace tprobe {

// The effective configuration. Defaults are msprobe's.
struct capture_config {
  // tensor, statistics, overflow_check, free_benchmark, run_ut, grad_probe, structure,
  // exception_dump (MindSpore only in msprobe; accepted with level L2 and never captured).
  std::string task = "statistics";
  // Absolute and lexically normalised (no ".", "..", trailing "/"): the capture and the stages
  // may run in different working directories. Checked against msprobe's path rules (§3.2).
  std::string dump_path;
  // Expanded ("2-4" -> 2, 3, 4), sorted, deduplicated; empty = all ranks / all steps.
  std::vector<int64_t> rank, step;
  // L0 (modules), L1 (APIs), L2 (kernel), mix (both), debug. Task structure forces "mix"
  // unless L0 or mix is given, as msprobe does (it only warns).
  std::string level = "L1";
  bool enable_dataloader = false;
  bool async_dump = false;
  std::string precision = "low";  // "high": statistics in float32

  // From the section named by `task` (statistics, tensor; scope and list also free_benchmark).
  // scope: empty or exactly {start, end} entry names; free_benchmark's: any number of exact API
  // names (msprobe's ListScope).
  std::vector<std::string> scope;
  std::vector<std::string> list;         // substrings of entry names
  std::vector<std::string> tensor_list;  // statistics: these entries also get tensors saved
  std::vector<std::string> data_mode{"all"};
  std::string summary_mode = "statistics";  // statistics | md5 (md5 is a CRC-32, §2.6)
  std::string file_format = "npy";          // npy | bin (only effective for MindSpore L2)
  int64_t overflow_nums = 1;                // overflow_check: -1 (never stop) or > 0

  // tprobe's own section "tprobe" (msprobe ignores it): how long a capture waits on a pipeline
  // that stopped reading before it detaches (-1: forever), and whether the Python front door
  // raises (stop/step/close) or only warns once the capture has detached.
  double pipeline_timeout_s = 60;
  std::string on_pipeline_failure = "warn";  // warn | raise: the training goes on by default
  // tprobe.tensor_format: the format of the files in dump_tensor_data/: "npy" (NumPy, tprobe's
  // default) or "pt" (torch.save, msprobe's own for PyTorch, so msprobe's compare reads the dump).
  std::string tensor_format = "npy";
  // tprobe.nan_analyze: allow rules of the NaN/Inf analysis (core/nan_analyze.h,
  // nan_rules_from_json), validated here and passed to the stages in the session meta; null = the
  // built-in rules.
  nlohmann::ordered_json nan_analyze;
  // grad_probe: the task's section as validated, with msprobe's defaults filled in
  // ({"grad_level": "L1", "param_list": [], "bounds": [-1, 0, 1]}); read by core/grad_probe.h
  // (grad_probe_settings_from_json) in the capture and, through the session meta, in the stages.
  // Null for other tasks.
  nlohmann::ordered_json grad_probe;
  // free_benchmark: the task's section as validated by core/free_benchmark.h
  // (free_benchmark_settings_from_json, msprobe's rules), every field with its default filled in
  // (free_benchmark_settings_to_json); scope and list are also copied above. Null for other tasks.
  nlohmann::ordered_json free_benchmark;
  // monitor (tprobe_monitor_open, msprobe's TrainerMon): the monitor config as core/monitor.h
  // validated it (monitor_config::json: defaults filled, ops expanded), with "warnings" (the lines
  // msprobe logs and goes on) and "output_dir" (the dump_path). Null for other tasks.
  nlohmann::ordered_json monitor;

  nlohmann::ordered_json source;  // the document as given, before overrides
  std::string source_name;        // the input named in messages, e.g. the file's path

  // The effective config as a map, for dump headers and the stages: task, level, framework
  // ("pytorch"), dump_path, rank, step, precision, summary_mode, data_mode, scope, list,
  // tensor_list, async_dump, tensor_format (the writer reads it), nan_analyze (when set), grad_probe
  // (task grad_probe), free_benchmark (task free_benchmark), monitor (task monitor).
  [[nodiscard]] nlohmann::ordered_json session_meta() const;
};

// Parses and validates a config document. `source` names it in messages ("config.json").
// Throws usage_error on the first problem found.
[[nodiscard]] capture_config config_parse(const nlohmann::ordered_json &doc, const std::string &source);

// The dump_path can be used: it is a writable directory, or its nearest existing ancestor is one
// (the writer creates the rest). Checked when a capture opens, so that a bad path fails before
// the first step rather than killing the writer later. Throws usage_error naming the field.
void config_check_dump_path_usable(const capture_config &cfg);

// Reads and parses the file at `path` (named by its path in messages).
// Throws system_error when it cannot be opened or read ("unable to open PATH: No such file or
// directory"), usage_error for invalid JSON (with the line and column) or an invalid config.
[[nodiscard]] capture_config config_load(const std::string &path);

// One field of §3.3: null or a list of ints in [0, 1000000] and "a-b" strings (a <= b, both in
// range), expanded, sorted and deduplicated. `field` and `source` name it in messages.
[[nodiscard]] std::vector<int64_t> config_parse_rank_or_step(const nlohmann::ordered_json &value,
                                                             const std::string &field,
                                                             const std::string &source);

// The arguments of msprobe's PrecisionDebugger(task=, dump_path=, level=, step=).
struct config_overrides {
  std::optional<std::string> task, dump_path, level;
  std::optional<std::vector<int64_t>> step;
};

// Applies the overrides as msprobe does: they replace the file's values *before* validation, so
// the config is re-derived from `cfg.source` (a new task selects its own section; a level forced
// to "mix" by task structure is re-decided). Fields changed by hand since parsing are therefore
// not kept; a config with no `source` object is re-derived from its fields. Messages name
// "<source_name> (with overrides)". Throws usage_error; `cfg` is unchanged on error.
void config_apply_overrides(capture_config &cfg, const config_overrides &overrides);

// TPROBE_TASK, TPROBE_DUMP_PATH, TPROBE_LEVEL, set by the launcher from a manifest. Unset means
// no override; set but invalid (empty included) throws usage_error naming the variable.
[[nodiscard]] config_overrides config_overrides_from_env();

// Tasks. msprobe's eight of config.json are parsed and validated, and config_task_names() adds
// "monitor" (msprobe's TrainerMon: a session of tprobe_monitor_open, config_for_monitor; a
// config.json asking for it is refused, pointing to TrainerMon); the capture runs
// config_built_tasks() (statistics, tensor, overflow_check, grad_probe, free_benchmark,
// structure, monitor). A task not built is refused, never captured as another: run_ut replays a
// dump afterwards (tprobe precheck), exception_dump is MindSpore's.
[[nodiscard]] const std::vector<std::string> &config_task_names();
[[nodiscard]] const std::vector<std::string> &config_built_tasks();

// The config of a monitor session (tprobe_monitor_open): the monitor config at the path read and
// validated by core/monitor.h (monitor_config_read: usage_error `PATH: field "KEY": ...`, or
// system_error when it cannot be read), task "monitor", dump_path $MONITOR_OUTPUT_DIR (default
// ./monitor_output) made absolute under msprobe's path rule, `monitor` filled in; every other field
// its default (all ranks, all steps). group_json: tprobe_monitor_open's ({"pp_stage": int,
// "group_mates": [int, ...]}, "" for the defaults: pp_stage max(rank, 0), group_mates [it]), kept
// in `monitor` for tprobe-monitor's anomaly.json; usage_error naming the field when malformed.
[[nodiscard]] capture_config config_for_monitor(const std::string &monitor_config_path, const std::string &group_json = "",
                                                int rank = -1);

// The pipeline the capture feeds, as far as the capture knows it: `tprobe run` hands the command
// its manifest (TPROBE_PIPELINE) and the tasks the manifest can do (TPROBE_PIPELINE_TASKS,
// comma-separated: its "tasks", launcher/run/manifest.h). Empty tasks: no constraint.
struct config_pipeline {
  std::string manifest;
  std::vector<std::string> tasks;
};
// Reads TPROBE_PIPELINE and TPROBE_PIPELINE_TASKS; an unknown task name there throws usage_error
// naming the variable.
[[nodiscard]] config_pipeline config_pipeline_from_env();

// Whether `cfg` (overrides applied) can run: its task is built, and is one of the pipeline's.
// Throws usage_error, one line naming the config, the task and, for a mismatch, the manifest and
// the tasks it can do:
//   config.json: task "exception_dump" is not built in tprobe yet (built: statistics, tensor, …)
//   config.json: task "overflow_check" is not one that pipelines/statistics.json can do (its tasks: statistics, tensor, structure)
void config_check_task_runs(const capture_config &cfg, const config_pipeline &pipeline);

// The per-call decisions of the capture, taken before any tensor is copied. Construct one per
// capture session and call entry_enabled() for every entry in call order; call reset_step()
// when the step changes (call counts restart per step, so scope state does too).
class capture_filter {
 public:
  explicit capture_filter(const capture_config &cfg);

  // `rank` -1 means not distributed; it counts as rank 0 (a single card is rank 0 for msprobe).
  [[nodiscard]] bool rank_enabled(int rank) const;
  [[nodiscard]] bool step_enabled(int64_t step) const;  // empty step list = every step
  // step > max(step list): msprobe stops the service; the capture can stop hooking.
  [[nodiscard]] bool past_last_step(int64_t step) const;

  // Whether the entry ("Functional.linear.0.forward", "Module.fc.Linear.backward.0") is
  // captured: inside the scope range and matching `list`. Stateful; call once per entry, in call
  // order. The range starts at the entry named scope[0] and ends after the one named scope[1]
  // (exact names); a backward entry is also in range when its forward was, and a
  // parameters_grad entry when a forward of its module was. `list`: any element is a substring.
  [[nodiscard]] bool entry_enabled(std::string_view entry);
  // What entry_enabled(entry) would answer if called now, with no state changed: lets a caller
  // skip work an excluded entry does not need (the PyTorch capture's call stack) before it
  // announces the entry.
  [[nodiscard]] bool entry_wanted(std::string_view entry) const;
  // Levels L0 and mix: construct.json lists every entry the capture announces, those the scope or
  // list exclude too (msprobe's update_construct runs before its filters).
  [[nodiscard]] bool structured() const { return structured_; }
  // False when neither scope nor list is set: every entry is captured.
  [[nodiscard]] bool selects_entries() const { return !scope_.empty() || !list_.empty(); }

  // data_mode, as data_mode_filter (core/dump_semantics.h) decides it: the direction from the
  // entry name, the io kind from the slot's first segment; parameters follow the forward
  // direction, parameters_grad entries the direction axis only (msprobe's hook manager). An entry
  // or slot whose kind cannot be told is not filtered on that axis.
  [[nodiscard]] bool slot_enabled(std::string_view entry, std::string_view slot) const;

  // Whether real tensors of this entry are written: task tensor always; task statistics when the
  // name contains an element of tensor_list (ignored at level debug, as msprobe does).
  [[nodiscard]] bool save_tensor(std::string_view entry) const;
  [[nodiscard]] bool want_crc32() const { return crc32_; }  // summary_mode md5

  // A module's forward begins (its pre-hook, before anything inside it runs) and ends (after its
  // own entry was announced), msprobe's begin_module / end_module: a scope range whose first end
  // is a module starts when that module begins, so what runs inside it is in range; and at level
  // mix, while a module whose name contains an element of `list` runs, everything inside it is
  // captured (and later the backward of what was), as msprobe's MixRangeScope does.
  void module_begin(std::string_view forward_entry);
  void module_end(std::string_view forward_entry);

  void reset_step();

 private:
  [[nodiscard]] bool in_scope_range(std::string_view entry);
  [[nodiscard]] bool in_list(std::string_view entry) const;
  [[nodiscard]] bool in_list_module_or_its_backward(std::string_view entry) const;

  std::vector<int64_t> ranks_, steps_;
  std::vector<std::string> scope_, list_, tensor_list_;
  bool save_all_tensors_ = false;
  bool crc32_ = false;
  data_mode_filter data_mode_;
  bool in_scope_ = false;
  std::unordered_set<std::string> forwards_in_scope_;  // "X.0.forward", "Module.a.B.forward.0"
  std::unordered_set<std::string> modules_in_scope_;   // "Module.a.B", for parameters_grad
  bool mix_ = false, structured_ = false;
  std::vector<std::string> list_modules_running_;      // mix: running modules that match `list`
  std::unordered_set<std::string> forwards_in_list_;   // forwards captured for running inside one
};

}  // namespace tprobe
