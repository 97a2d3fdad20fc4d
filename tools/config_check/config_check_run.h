// config_check_run.h: tprobe-config-check, msprobe's config_check (docs/stages/config-check.md).
//
//   tprobe config-check pack [SCRIPT.sh|CONFIG.yaml …] [-o PACK.zip]     (msprobe: config_check -d …)
//   tprobe config-check compare BENCH.zip CMP.zip [-o DIR]              (msprobe: config_check -c …)
//
// pack: the static pack of msprobe's ConfigChecker(shell_path=…): env (this process's environment as
// json.dumps(os.environ, indent=4)), pip ("Name=version" lines of importlib.metadata.distributions()
// in the Python `python` names, run once), hyperparameters/hyperparameters_static.json (shell
// scripts and yaml files, core/config_check.h; yaml loaded by that Python's yaml.safe_load).
// compare: both packs unzipped into DIR/bench and DIR/cmp, the rules of core/config_check.h,
// DIR/result.xlsx (summary, then one sheet per checker) and one line per difference on stdout.
//
// Exit codes (main): compare 1 when a checker says error, else 0 (warnings too); 100 for a bad pack
// or arguments, 111 for I/O.
#pragma once

#include <string>
#include <vector>

#include "config_check.h"
#include "stage_main.h"

namespace tprobe {

const stage_description &config_check_stage_description();

// msprobe's spellings, before the parse: "-d …" → "pack …", "-c A B" → "compare A B" (the verb moved
// first), "-f pytorch" dropped (msprobe_cli.h; another framework is refused).
std::vector<std::string> config_check_translate(std::vector<std::string> args, const CLI::App &app);

// Writes DIR/bench, DIR/cmp, DIR/result.xlsx; returns the sheets (summary lines: config_check_summary).
std::vector<config_sheet> config_check_compare_run(const std::string &bench_zip, const std::string &cmp_zip,
                                                   const std::string &dir);
// The terminal summary: one line per checker, then one per difference, indented.
std::vector<std::string> config_check_summary(const std::vector<config_sheet> &sheets);
// DIR/result.xlsx's writer, msprobe's sheets: "summary" (filename, pass_check) then `sheets`.
void config_check_write_xlsx(const std::vector<config_sheet> &sheets, const std::string &path);

// Writes the static pack to `zip` from `files` (.sh and .yaml); `python` lists the packages.
// Returns the entry names written.
std::vector<std::string> config_check_pack_run(const std::vector<std::string> &files, const std::string &zip,
                                               const std::string &python);

}  // namespace tprobe
