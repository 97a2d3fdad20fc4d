// compare_tensor.h: the compare's files: a tensor file loaded for comparison (.npy mapped, .pt through
// the optional LibTorch reader, tools/compare/compare_pt.h), the real-data columns of a table on a
// thread pool, and a data-mapping file. Shared by the front doors that compare tensors: tools/compare
// (tprobe compare) and tools/graph (tprobe graph on tensor dumps).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "compare_metrics.h"
#include "errors.h"
#include "compare_table.h"

namespace tprobe {

// A tensor file mapped or loaded into memory; `operand` stays valid while the object lives.
struct loaded_tensor {
  tensor_operand operand;
  std::shared_ptr<const void> owner;
};

// Reads one .pt file; throws system_error (cannot open) or usage_error (not a tensor file).
using compare_pt_reader = loaded_tensor (*)(const std::string &path);

// A .pt file and no LibTorch reader: fatal for a whole compare, not one error row.
struct compare_pt_unsupported : usage_error {
  using usage_error::usage_error;
};

// .npy files are memory-mapped (any fixed-size little-endian numeric descr; Fortran order is
// reordered). .pt files are read by the reader installed with compare_set_pt_reader() or, when none
// is, by lib/libtprobe_compare_pt.so beside the executable's bin/ folder (built where LibTorch is
// found; loaded on the first .pt file only, so LibTorch costs nothing to .npy compares). Without
// either: usage_error "PATH: .pt tensors need LibTorch…".
// Throws system_error when the file cannot be opened, usage_error when it is malformed.
[[nodiscard]] loaded_tensor compare_load_tensor(const std::string &path);
void compare_set_pt_reader(compare_pt_reader reader);

// Mode all: the real-data columns of every row of `t`, on `threads` threads. Adds the bytes compared
// to *bytes and one warning per tensor file that could not be read (its row becomes an error row).
void compare_fill_real_data(compare_table &t, unsigned threads, uint64_t *bytes, std::vector<std::string> *warnings);

// A data mapping file: flat YAML ("npu name: bench name" per line, '#' comments, optional quotes)
// or a JSON object of strings. usage_error for anything else.
[[nodiscard]] std::unordered_map<std::string, std::string> compare_load_mapping(const std::string &path);

}  // namespace tprobe
