// config_check.h: msprobe's config_check (训练前配置检查, msprobe 8.3.3 core/config_check/): the
// rules that compare two training environments' packs, and the pieces of the static pack.
//
// A pack is a zip archive whose entries msprobe names (docs/stages/config-check.md):
//   env                                          json of os.environ
//   pip                                          "Name=version" lines
//   hyperparameters/hyperparameters_static.json  from shell scripts and yaml files
//   hyperparameters/hyperparameters_dynamic.json Megatron's args (made by the dynamic pack only)
//   weights/step{s}/rank{r}/weight.json          {name: {max, min, mean, norm}}
//   dataset/step{s}/rank{r}/dataset.json         {"args": …, "kwargs": …} of those features
//   random/rank{r}.json                          {op: [{count, stack: [frame, …]}]}
// config_check_compare gives one sheet per checker whose entry both packs hold, in msprobe's order
// (env, pip, dataset, weights, hyperparameters, random), with msprobe's columns, rows and verdicts, quirks
// included (the env sheet's bench_* columns hold the cmp pack's values, as msprobe's
// compare_env_data swaps its arguments). Rows that msprobe leaves in hash or directory order
// (weights, dataset) are sorted by step, rank, then name; random's ops by name.
//
// Errors: usage_error for a bad pack ("PACK: entry E: why"), system_error for I/O. Thread-safe:
// pure functions of their arguments.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tprobe {

// A zip's files: entry name → bytes (directory entries left out).
using config_pack = std::map<std::string, std::string>;

// The members of the zip `path`, stored or DEFLATE-compressed (Python's zipfile), each checked
// against its CRC-32. A name that is absolute or holds ".." is a bad pack (it would leave the
// folder config_pack_extract writes).
[[nodiscard]] config_pack config_pack_read(const std::string &path);
// Writes `entries` in order as a zip of DEFLATE members (as msprobe's create_file_in_zip does),
// dated 1980-01-01 as zipfile.ZipInfo dates them. Replaces `path`.
void config_pack_write(const std::string &path, const std::vector<std::pair<std::string, std::string>> &entries);
// Writes every file of `pack` under the folder `dir` (created), as msprobe's extract_zip.
void config_pack_extract(const config_pack &pack, const std::string &dir);

// One result sheet: pandas' cells (null = empty, bool, number, string), msprobe's columns.
struct config_sheet {
  std::string name;        // env, pip, dataset, weights, hyperparameters, random
  std::vector<std::string> header;
  std::vector<std::vector<nlohmann::ordered_json>> rows;
  std::string pass_check;  // pass | warning | error
};

// msprobe's process_pass_check: any "error" → error; else any "warning" → warning; else pass.
[[nodiscard]] std::string config_pass_check(const std::vector<std::string> &levels);

// env (env_args_checker.py): only resource/env.yaml's variables, NPU or GPU name by whether any
// variable name holds "ASCEND", a missing variable taking its default; a different value is error,
// a variable of one device kind only is warning.
[[nodiscard]] config_sheet config_check_env(const nlohmann::ordered_json &bench, const nlohmann::ordered_json &cmp);
// pip (pip_checker.py): dependency.yaml's packages and `fmk` ("pytorch": msprobe's -f value, which it
// looks up as a package name); a different version (or one side without it) is error.
[[nodiscard]] config_sheet config_check_pip(std::string_view bench, std::string_view cmp, const std::string &fmk);
// The rows of one hyperparameters file (hyperparameter_checker.py compare_param).
[[nodiscard]] std::vector<std::vector<nlohmann::ordered_json>> config_check_hyperparameter_rows(
    const nlohmann::ordered_json &bench, nlohmann::ordered_json cmp, const std::string &file_name);
// msprobe's _fuzzy_match_parameter: `name` against `available` (refined names, in order): the same
// name ("pure name"), resource/hyperparameter.yaml's aliases ("mapping"), or the best difflib ratio
// above 0.8 ("similarity:R"). {"", ""} when none.
[[nodiscard]] std::pair<std::string, std::string> config_hyperparameter_match(const std::string &name,
                                                                            const std::vector<std::string> &available);
// difflib.SequenceMatcher(None, a, b).ratio() (no junk; the autojunk heuristic for ≥ 200 chars too).
[[nodiscard]] double difflib_ratio(std::string_view a, std::string_view b);

// random (random_checker.py): per rank and op, each bench stack against the first cmp stack that
// matches it (config_stack_match), counts equal → check_result True; unmatched stacks on either
// side → "no match stack", False. Any False is error.
[[nodiscard]] config_sheet config_check_random(const config_pack &bench, const config_pack &cmp,
                                               const std::string &bench_name, const std::string &cmp_name);
// msprobe's stack_match: same depth, and every frame's score ≥ 0.8, the score being the mean of the
// file names' match (basename, 1 or 0), the function names' match and difflib's ratio of the code lines
// (frames "File PATH, line N, in FUNC, CODE").
[[nodiscard]] bool config_stack_match(const std::vector<std::string> &stack1, const std::vector<std::string> &stack2);

// All sheets of the packs, as above.
[[nodiscard]] std::vector<config_sheet> config_check_compare(const config_pack &bench, const config_pack &cmp,
                                                             const std::string &bench_name, const std::string &cmp_name,
                                                             const std::string &fmk = "pytorch");

// The static pack's hyperparameters (utils/hyperparameter_parser.py). A shell script: the first
// msrun/torchrun/`python -m torch.distributed.launch` command, its $X_ARGS="…" blocks expanded, each
// --key [value] (a $VAR value resolved from the script's last VAR=…; no value → true).
[[nodiscard]] nlohmann::ordered_json config_hyperparameters_from_shell(std::string_view script);
// A yaml document (as JSON): nested keys joined with ".", lists of scalars (or lists) kept whole,
// other lists by index, null and non-scalar leaves left out; added into `out` (msprobe's YamlParser
// keeps one dict across the files of a pack).
void config_hyperparameters_from_yaml(const nlohmann::ordered_json &doc, nlohmann::ordered_json &out);
// msprobe's update_dict: a key already there with another value becomes
// {"description": "duplicate_value", "values": [old, new]}.
void config_update_dict(nlohmann::ordered_json &ori, const nlohmann::ordered_json &add);

}  // namespace tprobe
