// repro.h: `tprobe repro DUMP --api NAME -o DIR`, msprobe's single-API script generator
// (单算子API自动生成脚本, op_generate; docs/msprobe-compat.md §7.12) on tprobe's pre-check pieces.
//
// For one API call of a dump (Functional.linear.0) it writes into DIR:
//   * the tensor files the call needs, copied from the dump's dump_tensor_data/ (names kept): the
//     forward inputs, the dumped outputs, the dumped gradient of output 0 and the dumped input
//     gradients, where the dump holds them;
//   * repro_<NAME>.py, a standalone script (torch and numpy only) whose first lines say how to run
//     it. It calls the ATen operator that normalize_call (core/precheck/api_call.h) names, with the
//     arguments in the operator's schema order, exactly as the LibTorch replay of tprobe-precheck
//     does (torch.ops.aten.<op>: the overload packet resolves the overload on torch 1.13 and 2.x).
//     Tensors are the dumped ones or, for a statistics dump, drawn from Max/Min as msprobe's
//     gen_random_tensor draws them (seed 1234). It runs the bench (CPU, float dtypes one step
//     up), the CPU in the dumped dtypes and CUDA/NPU when present, the backward from the dumped
//     output gradient, and prints per output cosine, max abs/rel error, RMSE, small-value error
//     ratio, error balance and msprobe's legacy status for each side and for the dumped output.
//
// The dump's tensors are never changed. Thread-safe: no shared state.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tprobe {

struct repro_options {
  std::string dump;        // dump.json, a rank folder, or a step folder holding one rank folder
  std::string api;         // "Functional.linear.0" (".forward" / ".backward" accepted)
  std::string output_dir;  // created if missing; files of the same names are replaced
};

struct repro_report {
  std::string dump_json;                  // the dump.json read
  std::string api;                        // NAME without ".forward"/".backward"
  std::string op;                         // "aten::linear"
  std::string script;                     // DIR/repro_<NAME>.py
  std::vector<std::string> tensor_files;  // copied into DIR (names only), in the script's order
  size_t random_tensors = 0;              // tensors drawn from statistics (random mode): inputs, output grad
  bool backward = false;                  // the script replays a backward
};

// The dump.json of DUMP: the file itself, DUMP/dump.json, or the dump.json of the one rank folder
// of a step folder. usage_error when there is none or a step folder holds several ranks.
[[nodiscard]] std::string repro_dump_json(const std::string &dump);

// The script for one call, from the dump's entries (pure: no file is touched). `forward` is the
// .forward entry, `backward` its .backward entry or null; `with_data` says whether the dump's
// tensor files are present (dump_data_dir set): where it is false every tensor is drawn from its
// statistics. Fills report.op, report.tensor_files, report.random_tensors and report.backward.
// Throws usage_error: an API the pre-check never replays (its reason), an argument the script
// cannot write (a dtype it does not know, a data_name that is not a file name).
[[nodiscard]] std::string repro_script_text(const std::string &api, const nlohmann::ordered_json &forward,
                                            const nlohmann::ordered_json &backward, bool with_data,
                                            const std::string &dump_json, repro_report &report);

// Writes DIR's files. Throws usage_error (no dump.json, no API NAME in it, an API never replayed:
// "Functional.dropout.0 is not reproduced: <reason>") and system_error (a tensor file named by the
// dump that cannot be read, DIR that cannot be written).
[[nodiscard]] repro_report repro_write(const repro_options &options);

}  // namespace tprobe
