// precheck_run.h: a pre-check run, the one library behind both front doors: tprobe-precheck
// (offline, a dump on disk: precheck_offline) and tprobe-precheck-live (the tensor stream) hand it
// API calls; it filters them (msprobe's white/black lists, resume, -f duplicates), replays each
// (replay.h), judges it (core/precheck/precheck_standard.h), writes msprobe's two CSV files
// (precheck_files.h) and, with -save_error_data, the tensors of APIs that did not pass.
//
//   precheck_run run(options, out_dir);          // opens (or resumes) the CSV files
//   if (run.wanted(name, forward))               // resume and -f; in file order, one thread
//     auto j = run.check(name, forward, backward, source);   // lists, replay, judge; thread-safe
//     run.write(j);                              // rows, counts, first failure; serialised by caller
//
// Counts and the first API that is not pass are kept for the summary line; an API that is not
// pass (warning or error, after tprobe's verdict: precheck_verdict.h) fails the run.
#pragma once

#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "precheck_files.h"
#include "precheck_standard.h"
#include "replay.h"

namespace tprobe {
struct stage_option_spec;     // stages/common/stage_main.h
class stage_option_values;
}  // namespace tprobe

namespace tprobe::precheck {

// msprobe's run_ut / acc_check config section (config.json "run_ut" or "acc_check").
struct precheck_lists {
  std::vector<std::string> white_list, black_list;
  std::string error_data_path = "./";
};
// The section of an msprobe config.json (-config); throws usage_error naming the file and field.
[[nodiscard]] precheck_lists precheck_lists_load(const std::string &config_path);

struct precheck_options {
  dialect standard = dialect::msprobe_8_3_3;
  std::string resume_csv;          // -csv_path: an accuracy_checking_result_<ts>.csv to append to
  bool save_error_data = false;    // -save_error_data
  bool filter_duplicates = false;  // -f
  precheck_lists lists;
  replay_options replay;
};

struct precheck_counts {
  size_t pass = 0, warning = 0, error = 0, skip = 0;
  std::optional<std::string> first_not_pass;  // "Functional.gelu.0 (Functional.gelu.0.forward.output.0: …)"
  [[nodiscard]] size_t total() const { return pass + warning + error + skip; }
  [[nodiscard]] bool failed() const { return error + warning > 0; }
};

// The options both front doors (tprobe-precheck, tprobe-precheck-live) take for a run, in their
// option tables: config, save-error-data, filter-duplicates, msprobe-version, seed; and the
// precheck_options they give (the config's lists loaded: usage_error naming it).
[[nodiscard]] const std::vector<stage_option_spec> &precheck_run_option_specs();
[[nodiscard]] precheck_options precheck_run_options_of(const stage_option_values &values);

// For a process that replays on several threads (both front doors call it first, before any
// thread starts): one glibc arena. With one arena per replay thread, each returned its freed
// tensors to the kernel and faulted them in again (resnet18 dump, -j 2: 2.6 s → 2.1 s wall).
void precheck_tune_allocator();

// The status that counts for an API: error > warning > pass, SKIP when nothing was compared.
[[nodiscard]] status api_status(const result_row &row);

class precheck_run {
 public:
  precheck_run(precheck_options options, const std::filesystem::path &out_dir);

  // Whether `full_name` is to be checked: not in the resumed file (which holds its rows already)
  // and not a duplicate of an earlier call (-f, msprobe's preprocess_forward_content: same API,
  // same arguments but Max/Min). Call in file order from one thread.
  [[nodiscard]] bool wanted(const std::string &full_name, const nlohmann::ordered_json &forward);
  // Replays and judges one API (thread-safe); an API the white/black lists exclude is msprobe's
  // SKIP row. Saves its tensors when -save_error_data and it is not pass.
  [[nodiscard]] api_judgement check(const std::string &full_name, const nlohmann::ordered_json &forward,
                                    const nlohmann::ordered_json *backward, tensor_source &source);
  // Writes the rows and counts them (not thread-safe: one writer).
  void write(const api_judgement &judgement);

  [[nodiscard]] const precheck_counts &counts() const { return counts_; }
  [[nodiscard]] const precheck_files &files() const { return files_; }
  [[nodiscard]] std::string error_data_dir() const;

 private:
  precheck_options options_;
  precheck_files files_;
  precheck_counts counts_;
  std::set<std::string> seen_;  // -f: keys of calls already checked
};

// ---- offline: a dump on disk --------------------------------------------------------------------

struct precheck_offline_options {
  std::string dump;               // dump.json, a rank folder or a step folder
  std::string output_dir = "./";  // one pair of CSV files; per rank folder under it for a step folder
  unsigned jobs = 1;              // -j: APIs replayed in parallel
  precheck_options run;
};

struct precheck_offline_report {
  struct rank_files {
    std::string dump_json, result_csv, details_csv;
  };
  std::vector<rank_files> files;
  precheck_counts counts;  // all ranks
};

// The dump.json files of `dump` (a file, a rank folder, or a step folder's rank folders); throws
// usage_error (none found, not a dump.json) or system_error.
[[nodiscard]] std::vector<std::string> precheck_dump_files(const std::string &dump);

// Runs the pre-check over a dump; `on_failure` is called (from the writing thread) for each API not pass
// that is an error, as soon as its row is written.
[[nodiscard]] precheck_offline_report precheck_offline(
    const precheck_offline_options &o, const std::function<void(const std::string &dump_json, const api_judgement &)> &on_failure = {});

}  // namespace tprobe::precheck
