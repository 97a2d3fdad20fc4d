// compare_match.h: pairing the rows of two dumps whose names or call sequences differ (tprobe
// compare --match auto, the default; docs/stages/compare.md "Matching").
//
// msprobe pairs rows by name and shape (compare_table.h, --match name). Names carry a per-API call
// counter, so one operator recorded by only one side (tprobe sees Torch.zeros inside a GRU, msprobe
// does not) or named differently (msprobe "Tensor.transpose" for x.transpose(), tprobe
// "Torch.transpose" for aten::transpose; msprobe "Functional.cross_entropy", tprobe
// "Functional.cross_entropy_loss") leaves rows unpaired or, worse, pairs every later call of that API
// with the wrong one. compare_match_auto() pairs calls instead of names:
//
//   1. Entries (API calls, module calls, parameter gradients) are parsed into direction (forward,
//      backward, parameters_grad), family and a shape signature. The family of an API call is its
//      API name without namespace prefix (Tensor/Torch/Functional/Aten/VF/NPU all alike), with
//      Python's operator methods and ATen's internal names folded through the alias table
//      compare_api_family() (compare_match.cpp, the one place it lives: __add__ → add, __iadd__ →
//      add_, cross_entropy_loss → cross_entropy, slice/select/index → getitem, …). A module's family
//      is its path and class; Distributed calls keep their own namespace.
//   2. Forward entries of both dumps, in execution order (dump.json key order), are aligned with a
//      banded dynamic programme (weighted LCS): two entries may pair only with the same direction
//      and family; the score of a pair rises with equal input / output / parameter signatures
//      (multisets of dtype class and shape, so the order of slots does not matter) and, least, with
//      an equal name. The band follows the alignment's frontier (w cells either side), so time and
//      memory are O(n·w) and an inserted or missing run shifts nothing after it; runs up to w
//      entries long on the shorter side (w ≥ 128) are bridged.
//   3. Backward and parameters_grad entries are aligned the same way among themselves, a pair whose
//      forwards were paired in step 2 scoring highest (the backward order of two tools may differ).
//   4. Rows of a paired forward entry pair by argument name first where one side passed it by
//      keyword (msprobe's "….input.reduction"): the other side's positional "….input.3" is named by
//      ATen's schema (compare_positional_name), whatever the two values; tensors need an equal
//      shape and dtype class. The rest pair in order by state (input, parameters, output,
//      parameters_grad), dtype class and shape (backward outputs in another order pair by shape),
//      non-tensor values (msprobe's "<class 'int'>" rows) preferring an equal value. Rows whose
//      shapes differ stay unpaired.
// Every NPU row appears once, in NPU order. compare_table_build() applies msprobe's dtype gate
// afterwards as for name matching.
// Thread-safe: no shared state.
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "compare_dump.h"

namespace tprobe {

// How rows are paired: `automatic` (the default) as above; `name` msprobe's name matching (exact,
// --fuzzy-match or --mapping, compare_table.h).
enum class compare_match : uint8_t { automatic, name };
// "auto", "name".
[[nodiscard]] const char *compare_match_name(compare_match m);

// How one row was paired: the Match column of an automatic compare.
enum class pair_how : uint8_t {
  name,      // with the bench row of the same name
  aligned,   // with a bench row of another name (alias, other counter), by alignment
  unpaired,  // no bench row
};
[[nodiscard]] const char *pair_how_name(pair_how h);  // "name", "aligned", "unpaired"

struct row_pair {
  size_t npu = 0;
  std::optional<size_t> bench;
};

// Pairs as described above: one element per NPU row, in NPU row order.
[[nodiscard]] std::vector<row_pair> compare_match_auto(const dump_file &npu, const dump_file &bench);

// The family an API name belongs to (the alias table): "__iadd__" → "add_", "cross_entropy_loss" →
// "cross_entropy", "select" → "getitem"; a name not in the table is its own family.
[[nodiscard]] std::string compare_api_family(std::string_view api);

// The name of positional argument k of ATen operator `api` (no overload: "cross_entropy_loss", 3 →
// "reduction"), from torch's schemas (aten_arguments.inc, written by scripts/gen_aten_arguments.py);
// "" where the table has no such operator or position, or the overloads disagree on the name.
[[nodiscard]] std::string compare_positional_name(std::string_view api, size_t k);

// Band half-width of the alignment for sequences of n and m entries (≥ 128, ≤ 1024; memory about
// max(n, m)·(2w+1) bytes).
[[nodiscard]] size_t compare_match_band(size_t n, size_t m);

}  // namespace tprobe
