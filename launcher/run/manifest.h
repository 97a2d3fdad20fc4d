// manifest.h: the pipeline manifest that `tprobe run` reads, parsed and validated whole before
// any process starts (style lesson 10).
//
// Schema (JSON; an unknown key at any level is an error):
//
//   {
//     "description": "per-tensor statistics, written as dump.json",   optional string
//     "capture": {"task": "tensor", "level": "L1", "dump_path": "./dump"},
//                                     optional; each key optional; handed to the command's capture
//                                     as TPROBE_TASK / TPROBE_LEVEL / TPROBE_DUMP_PATH
//     "tasks": ["statistics", "tensor", "structure"],
//                                     optional: the capture tasks (config.json "task") this pipeline
//                                     can do, each one of msprobe's and built by tprobe
//                                     (core/capture_config.h), no repeats, capture.task among them;
//                                     default [capture.task], else any built task. The launcher
//                                     refuses a --config (or TPROBE_CONFIG) asking for another
//                                     before anything starts, and hands them to the command as
//                                     TPROBE_PIPELINE_TASKS, so that its capture refuses it too
//     "runs": [                       optional: run the command once per entry, concurrently
//       {"name": "a", "args": ["--dtype", "float32"], "env": {"OMP_NUM_THREADS": "1"}},
//       {"name": "b", "args": ["--dtype", "bfloat16"]}
//     ],
//     "stages": [                     required, at least one
//       {"name": "stats", "stage": "stats", "inputs": ["capture"], "options": {"threads": 1}},
//       {"name": "writer", "stage": "writer", "inputs": ["stats"]},
//       {"name": "mine", "exec": "../bin/my-stage", "inputs": ["stats"], "options": {}}
//     ]
//   }
//
// A stage:
//   name     required, unique, [a-z0-9][a-z0-9_-]*, not "capture" (it names endpoint files)
//   stage    a verb: runs tprobe-<verb> from the directory holding tprobe-run
//   exec     or: the user's own binary obeying the stage CLI contract (stages/common/stage_main.h);
//            a relative path is taken relative to the manifest's directory, so a manifest works
//            from any working directory. Exactly one of stage/exec.
//   inputs   stage names and/or "capture" (the command's capture); optional, default []. Empty only
//            for a stage whose --describe says "input": false (a source).
//   options  object of the stage's options (its --describe table), optional, default {}.
//
// A run:
//   name     required, unique, [a-z0-9][a-z0-9_-]*: the command gets it as TPROBE_RUN_LABEL, and
//            its capture announces it in its session record (meta "label"), so that a stage reading
//            several runs (live compare) tells them apart
//   args     strings appended to the command line, optional
//   env      object of environment variables (names [A-Za-z_][A-Za-z0-9_]*, string values) set
//            for this run, optional
// Without "runs" the command runs once, unlabelled. Every run's capture feeds the same "capture"
// readers; the launcher sends `final` when the last run has exited.
//
// Graph checks (manifest_parse): unique names, every input names a stage or "capture", no stage
// reads itself, no cycle (the message names it), at least one stage reads "capture" (else the
// command's records would go nowhere). Stages nobody reads are sinks, which is fine.
//
// Stage checks (manifest_check_options, which needs each stage's --describe): inputs present iff
// the stage has an input, a stage that is read has an output, every option is in the stage's
// table and has its JSON kind: int and float → number, bool → true/false, string → string, list →
// array of strings or one string; then its value passes stage_option_check (stage_main.h), the
// check the binary itself makes: int, range, choices; and every required option is set.
//
// Every error is a usage_error whose message names the manifest file and the stage:
//   pipelines/x.json: stage "writer": input "stat" does not match any stage (known: capture, stats)
#pragma once

#include <cstddef>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/stage_main.h"

namespace tprobe {

// The input name that stands for the command's capture (not a stage).
inline constexpr std::string_view MANIFEST_CAPTURE = "capture";

struct manifest_capture {
  std::optional<std::string> task;       // → TPROBE_TASK
  std::optional<std::string> level;      // → TPROBE_LEVEL
  std::optional<std::string> dump_path;  // → TPROBE_DUMP_PATH
};

struct manifest_run {
  std::string name;                                       // → TPROBE_RUN_LABEL
  std::vector<std::string> args;                          // appended to the command
  std::vector<std::pair<std::string, std::string>> env;   // in file order
};

struct manifest_stage {
  std::string name;
  std::string verb;                  // "stage": runs tprobe-<verb>; "" when `exec` is set
  std::string exec;                  // "exec", resolved against the manifest's directory; or ""
  std::vector<std::string> inputs;   // as written: stage names and/or "capture"
  nlohmann::ordered_json options = nlohmann::ordered_json::object();  // as written

  // Filled by manifest_check_options():
  stage_description description;
  std::vector<std::string> option_args;  // `options` as command-line arguments

  bool reads_capture() const;
  // "tprobe-stats" for a verb, the exec path otherwise: what messages call the binary.
  std::string program() const;
};

struct manifest {
  std::string path;  // as given; prefixes every message
  std::string description;
  manifest_capture capture;
  // "tasks", or [capture.task] without it; empty: any task the capture builds.
  std::vector<std::string> tasks;
  std::vector<manifest_run> runs;  // empty: the command runs once, unlabelled
  std::vector<manifest_stage> stages;  // in file order
  // Indices into `stages`, every stage after the stages it reads (producers first). The launcher
  // starts stages in the reverse order, so that every consumer is bound before its producers.
  std::vector<size_t> topological_order;

  // Indices of the stages that list stages[i] among their inputs.
  std::vector<size_t> consumers_of(size_t i) const;
  // Indices of the stages that read "capture", in file order.
  std::vector<size_t> capture_readers() const;
};

// Structure and graph checks of a manifest document; `path` names it in messages. Resolves `exec`
// against the directory of `path`. Throws usage_error.
manifest manifest_parse(const nlohmann::ordered_json &doc, const std::string &path);

// Where `tprobe run NAME` finds its manifest: `name` itself when it is a file or holds a '/';
// otherwise the first file among $TPROBE_PIPELINES/NAME and BIN_DIR/../pipelines/NAME (a pip
// install's package, a build tree's link to pipelines/), each also tried with ".json" appended;
// `name` unchanged when none exists, so that manifest_load names it.
std::string manifest_locate(const std::string &name, const std::string &bin_dir);

// Reads `path` (a JSON file) and parses it. Throws usage_error when the file cannot be read, is
// not JSON, or fails manifest_parse.
manifest manifest_load(const std::string &path);

// How manifest_check_options learns a stage's options: in production it runs the binary with
// --describe (manifest_binary_describer); tests hand back a stage_description made by hand.
using stage_describer = std::function<stage_description(const manifest_stage &)>;

// Describes every stage, then checks inputs/outputs against the descriptions and converts each
// stage's options into option_args. Throws usage_error naming the file and the stage.
void manifest_check_options(manifest &m, const stage_describer &describe);

// Options (a JSON object) → arguments, typed against `d`'s table:
//   {"threads": 4, "lz4": true, "only": ["a", "b"]} → --threads 4 --lz4=true --only a --only b
// A value that starts with '-' is passed as --key=value so that no parser takes it for an option. `context` prefixes messages ("pipelines/x.json: stage \"stats\"").
// Throws usage_error for an unknown option, a value of the wrong JSON kind, one stage_option_check
// refuses (range, choices), or a required option left out.
std::vector<std::string> stage_option_args(const stage_description &d,
                                           const nlohmann::ordered_json &options,
                                           const std::string &context);

// The --describe JSON of stages/common/stage_main.h → stage_description. `program` names the
// binary in messages. Throws usage_error when the text is not such a JSON object, or when an
// option's default fails its own checks (stage_option_check: type, range, choices).
stage_description stage_description_parse(const std::string &text, const std::string &program);

// Path of the binary that runs a stage: <bin_dir>/tprobe-<verb>, or the resolved exec path.
std::string manifest_stage_binary(const manifest_stage &s, const std::string &bin_dir);

// Runs `binary --describe` (stdin /dev/null, stderr inherited) and parses what it prints.
// `env`: the binary's environment ("NAME=VALUE" entries), nullptr = this process's.
// Throws usage_error, naming `context` and `binary`, when the binary is missing or not
// executable, exits non-zero, or prints no valid description.
stage_description stage_describe_binary(const std::string &binary, const std::string &context,
                                        const std::vector<std::string> *env = nullptr);

// The production describer: stage_describe_binary(manifest_stage_binary(s, bin_dir), …, env);
// `env` must outlive it.
stage_describer manifest_binary_describer(const std::string &bin_dir, const std::vector<std::string> *env = nullptr);

// Endpoints the launcher allocates in its private run directory.
std::string manifest_input_endpoint(const std::string &run_dir, const std::string &stage_name);
std::string manifest_tap_endpoint(const std::string &run_dir, const std::string &stage_name);

// The full argv of stages[i] (after manifest_check_options), readiness on fd 3:
//   BINARY [--input ipc://RUN/<name>.in --producers N] [--output ipc://RUN/<consumer>.in …]
//          [--tap ipc://RUN/<name>.tap] --ready-fd 3 OPTIONS…
// --input/--producers only when the stage has an input; N = 0 when it reads "capture" (it waits
// for the launcher's `final`), else the number of stages it reads. --tap only when it has an output.
std::vector<std::string> manifest_stage_argv(const manifest &m, size_t i, const std::string &run_dir,
                                             const std::string &bin_dir);

}  // namespace tprobe
