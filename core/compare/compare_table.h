// compare_table.h: from two flattened dumps to msprobe's result table: matching, the per-row
// columns, highlighting and the advisor (docs/msprobe-compat.md §4.4, §4.5, §4.7–§4.9, §4.11).
//
// Matching (compare_table_build):
//   auto      the default: calls aligned in execution order by family, direction and shapes, rows
//             paired by slot (compare_match.h); tolerates other names and inserted or missing calls.
//             Adds the column "Match" (name | aligned | unpaired) after msprobe's last column.
// msprobe's name matching (match = name, or any of mapping / fuzzy_match, which imply it; no Match
// column, so the table is msprobe's column for column):
//   exact     NPU name and shape string equal to the bench row's (a pandas merge: an NPU row with
//             several bench rows of that key gives one row each; bench-only rows are dropped);
//   mapping   NPU name replaced through the mapping (msprobe's data_mapping), shape not required;
//   fuzzy     msprobe's lock-step queue walk, names compared without their call count.
// Then the dtype gate: a pair stays matched only if the dtypes are equal or both are in {Float16,
// Float32, BFloat16} or both in {torch.float16, torch.float32, torch.bfloat16} (not with a mapping).
// Every NPU row appears in the table; an unmatched one has Bench Name "N/A" and
// "No bench data matched.".
//
// Rows are in NPU dump order (entries in file order, rows of an entry as compare_dump.h orders them).
// msprobe's fuzzy walk stops when the bench side runs out and silently drops the NPU rows it had not
// queued yet; here those rows are listed as unmatched, so nothing is dropped.
//
// In mode `all` the six metrics come from the tensors: the caller fills them per row with
// compare_table_set_real_data() (compare.h does it on a thread pool), before highlighting.
// Thread-safe: a table is owned by one thread, except that compare_table_set_real_data() may run
// concurrently for distinct rows.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "compare_cell.h"
#include "compare_dump.h"
#include "compare_match.h"
#include "compare_metrics.h"

namespace tprobe {

struct compare_table_options {
  compare_mode mode = compare_mode::all;
  compare_match match = compare_match::automatic;  // name when mapping or fuzzy_match is set
  bool fuzzy_match = false;
  bool stack_mode = false;  // add NPU_Stack_Info
  const std::unordered_map<std::string, std::string> *mapping = nullptr;  // data mapping, NPU name → bench name
  const stack_map *npu_stacks = nullptr;                                  // for stack_mode
};

enum class row_color : uint8_t { none, red, yellow };

struct compare_row {
  size_t npu = 0;               // index into the NPU dump's rows
  std::optional<size_t> bench;  // index into the bench dump's rows; empty = unmatched
  pair_how how = pair_how::unpaired;  // the Match column (auto matching)
  std::array<cell, 8> metrics;  // all: the 6 real-data metrics; summary: 4 diffs then 4 relative errors
  std::string result;           // all: Accuracy Reached or Not; summary, md5: Result
  std::string err_message;      // Err_message (not a column in md5 mode)
  bool req_grad_consistent = true;
  bool error = false;           // all: a tensor file could not be read, nothing was compared (error row)
  bool uninitialized = false;   // either side is uninitialized memory: shown, never compared or failed
  cell stack;                   // NPU_Stack_Info (stack mode)
  row_color color = row_color::none;
};

struct compare_table {
  compare_table_options options;
  const dump_file *npu = nullptr;
  const dump_file *bench = nullptr;
  bool cross_framework = false;  // a MindSpore dump against a PyTorch one: dtypes compared by class
  std::vector<compare_row> rows;
};

// Matches the rows and fills every column that does not need tensor data. The dumps must outlive
// the table. t.options.match is `name` afterwards when mapping or fuzzy_match was set.
[[nodiscard]] compare_table compare_table_build(const dump_file &npu, const dump_file &bench,
                                                const compare_table_options &options);

// Mode all: what row `i` gets from its tensors (compare.h decides which real_data_result applies).
void compare_table_set_real_data(compare_table &t, size_t i, const real_data_result &r);

// The column names of the table as written, and row i's cells in that order.
[[nodiscard]] std::vector<std::string> compare_table_columns(const compare_table &t);
[[nodiscard]] std::vector<cell> compare_table_row_cells(const compare_table &t, size_t i);

// Rows paired with the bench row of the same name, paired with another (alignment), unpaired.
struct compare_match_counts {
  size_t name = 0, aligned = 0, unpaired = 0;
};
[[nodiscard]] compare_match_counts compare_table_match_counts(const compare_table &t);

// msprobe's highlight (-hl): colours rows red/yellow and appends the reasons to Err_message.
// No-op in md5 mode and above 1,048,500 rows (msprobe's limit).
void compare_table_highlight(compare_table &t);
constexpr size_t compare_max_excel_rows = 1048500;

// Rows msprobe's advisor counts as failing: all: Accuracy "No"; summary: Result "Warning";
// md5: Result "Different". A compare with any exits 1.
[[nodiscard]] bool compare_row_failing(const compare_table &t, size_t i);

// Error rows: a tensor file of the row could not be read (mode all), so the row says nothing about
// the data. Not failing in msprobe's sense (its Accuracy is "None"), but a compare with any exits 1
// and the advisor names them: a pass is never reported about data that was not read.
[[nodiscard]] bool compare_row_error(const compare_table &t, size_t i);

struct advisor_result {
  std::string line = "NA";           // 0-based row index of the first failing row, else of the first error row
  std::string suspect_nodes = "NA";  // its NPU Name
  std::string advice;                // msprobe's expert advice text, then what was not compared
  size_t error_rows = 0;             // rows that could not be compared
  std::vector<std::string> unmatched_warnings;  // "The tensor name matches but the shape or dtype does not match: X"
};
// msprobe's advisor (the first failing row and its advice). Error rows are never "All data …
// meets the accuracy requirements": without a failing row the first error row is the suspect;
// either way the advice ends with "N rows could not be compared …" naming the first of them.
[[nodiscard]] advisor_result compare_table_advise(const compare_table &t);
// The advisor file's text: "Line: …\nSuspect Nodes: …\nExpert Advice: …\n".
[[nodiscard]] std::string advisor_text(const advisor_result &a);

// msprobe's advice for a failing row's NPU name (§4.11).
[[nodiscard]] std::string advisor_message(const std::string &npu_name);

}  // namespace tprobe
