// compare_dump.h: reading one side of a compare: dump.json flattened into rows, and stack.json
// (docs/msprobe-compat.md §2.4–§2.8, §4.2, §4.3).
//
// Accepts what tprobe and msprobe write: the NaN / Infinity / -Infinity tokens, tensor files named
// by data_name (".npy" or ".pt"), both stack.json forms ({"0": [[names], [lines]], …} and the legacy
// {name: [lines]}), entries of every level (API, module, parameters_grad).
//
// Flattening follows msprobe's read_op / op_item_parse / gen_op_item: per entry, in file order, the
// sections input_args, input_kwargs, input, output, parameters (names .input/.input/.input/.output/
// .parameters), lists adding ".{i}", dicts ".{key}", a dict with a string "type" being a leaf, null a
// leaf of Nones; a leaf with data_name is named after its file (extension removed); rows of one entry
// ordered inputs, parameters, outputs, parameters_grad. Non-tensor leaves get msprobe's dtype/shape
// special cases (torch.Size, slice, ellipsis, src/dst, ProcessGroup, "<class 'int'>", …).
//
// Errors (usage_error, naming the file): not JSON, no 'task' or 'data', an entry that is not an
// object, a shape that is not a list or a requires_grad that is not a bool in an input/output,
// nesting deeper than 400. system_error when a file cannot be read. A name or string value that
// starts like a spreadsheet formula is read as it is (msprobe refuses the whole dump, §4.3): the
// writers escape the cell (spreadsheet_text, compare_output.h).
// Thread-safe: no shared state.
#pragma once

#include <array>
#include <cstddef>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "compare_cell.h"

namespace tprobe {

enum class compare_mode : uint8_t {
  all,      // task "tensor": real data compared
  summary,  // task "statistics": Max/Min/Mean/Norm compared
  md5,      // task "statistics" with "md5" (CRC-32) fields: checksums compared
};
// "all", "summary", "md5": msprobe's names of the modes.
[[nodiscard]] const char *compare_mode_name(compare_mode m);

// One row of a flattened dump: a tensor or a non-tensor argument of one entry.
struct dump_row {
  std::string name;              // op name: "Functional.relu.0.forward.input.0"
  std::string dtype;             // str(dtype): "torch.float32", "<class 'int'>", "None"
  std::string shape;             // str(shape): "[32, 16]", "[]", "None"
  std::array<cell, 4> stats;     // Max, Min, Mean, Norm as statistic_cell() shows them
  cell requires_grad;            // "True"/"False" text; empty where the leaf has none
  std::string md5;               // md5 field, msprobe's CRC-32 of str(value), or "N/A" for a null leaf
  std::string data_name = "-1";  // tensor file name in dump_tensor_data/, "-1" for none
  std::string state;             // input | output | parameters | parameters_grad
  size_t entry = 0;              // index into dump_file::entries (msprobe's api_origin_name)
  bool first_of_entry = false;   // the row that carries the entry's stack (NPU_Stack_Info)
  bool uninitialized = false;    // "uninitialized": true: memory nobody wrote, never compared as data
};

struct dump_file {
  std::string path;        // the dump.json as given
  std::string side;        // "NPU" or "bench", for messages
  std::string task;        // "tensor", "statistics", …
  std::string framework;   // "pytorch", "mindspore", or "" when absent
  bool has_md5 = false;    // msprobe's md5_find: some leaf directly in a top-level list has "md5"
  std::vector<std::string> entries;  // entry names in file order
  std::vector<dump_row> rows;
  std::string tensor_dir;  // sibling dump_tensor_data/ (where data_name files are read from)
};

// Reads and flattens `path` (a dump.json). `side` is "NPU" or "bench" (messages only).
[[nodiscard]] dump_file dump_load(const std::string &path, const std::string &side);
// Same, from parsed JSON (tests); `path` names the source in messages and locates dump_tensor_data/.
[[nodiscard]] dump_file dump_from_json(const nlohmann::ordered_json &doc, const std::string &path,
                                       const std::string &side);

// msprobe's get_dump_mode (§4.2): equal tasks; "tensor" → all; "statistics" → md5 if both sides have
// md5 fields, summary if neither. usage_error otherwise (naming both files).
[[nodiscard]] compare_mode dump_mode(const dump_file &npu, const dump_file &bench);

// stack.json as entry name → stack lines, from either form. usage_error for another shape.
using stack_map = std::unordered_map<std::string, std::vector<std::string>>;
[[nodiscard]] stack_map stack_load(const std::string &path);
[[nodiscard]] stack_map stack_from_json(const nlohmann::ordered_json &doc, const std::string &path);

// True if `s` would start a formula in a spreadsheet: msprobe's blacklist (spreadsheet_text)
// ^[＋－＝％＠+\-=%@]|;[＋－＝％＠+\-=%@]
[[nodiscard]] bool formula_like(std::string_view s);

}  // namespace tprobe
