// compare.h: the offline compare stage (tprobe-compare): two dumps in, msprobe's result files out
// (docs/msprobe-compat.md §4).
//
//   tprobe compare NPU BENCH -o OUTDIR [--match auto|name] [--fuzzy-match] [--stack-mode] [--highlight]
//                  [--mapping FILE]
//
// NPU and BENCH are both dump.json files (compared into compare_result_{ts}.*) or both step folders
// (step0/ holding rank0/, rank1/, … or rank/): ranks are sorted by number and paired by position,
// each pair compared into compare_result_rank{N}_{ts}.* (§4.12). The mode comes from the dumps'
// task (§4.2): tensor → real data, statistics → Max/Min/Mean/Norm, statistics with md5 → checksums.
//
// The pipeline per pair: dump_load (compare_dump.h, both sides in parallel) → compare_table_build
// (matching, compare_table.h) → in mode all, the tensors of every matched row are memory-mapped and
// compared on a pool of std::threads, one pass per pair (compare_metrics.h) → highlight (--highlight)
// → advisor → xlsx, csv, json and advisor files (compare_output.h).
//
// Results: a report per pair; compare_report::failing_rows() > 0 means a row did not reach the
// accuracy criteria, error_rows() > 0 that a row could not be compared (the binary exits 1 for
// either). Errors: usage_error for bad arguments and bad dumps (exit 100), system_error for files
// that cannot be read or written (exit 111). In a step-folder compare a rank whose dump is invalid
// is reported in `errors` and the other ranks are still compared.
// A tensor file that cannot be used (missing, not a regular file, a symbolic link, malformed or
// truncated, a dtype without a metric path, a shape other than dump.json's) does not stop the
// compare: its row becomes an error row (msprobe's 'unsupported' metrics and Accuracy "None", the
// side, file and reason in Err_message), counted in compare_pair_report::errors, named by the
// advisor, and `warnings` carries the reason. A pass is never reported about data not read.
// Thread-safe: compare_run() may run concurrently with itself (no global state besides the .pt hook).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "compare_metrics.h"
#include "compare_output.h"
#include "compare_table.h"
#include "compare_tensor.h"
#include "stage_main.h"

namespace tprobe {

struct compare_options {
  std::string npu_path;    // dump.json or step folder
  std::string bench_path;  // same kind as npu_path
  std::string output_dir;  // created (0750) if missing
  compare_match match = compare_match::automatic;  // how rows are paired (compare_match.h)
  bool fuzzy_match = false;
  bool stack_mode = false;   // NPU_Stack_Info from the NPU side's stack.json (must exist)
  std::string stack_path;    // with stack_mode, this stack.json instead (msprobe's compare.json
                             // stack_path; a dump.json pair only)
  bool highlight = false;
  std::string mapping_path;  // "" = none; flat YAML "npu name: bench name" lines, or a JSON object
  bool advisor = true;       // write advisor*.txt
  unsigned threads = 0;      // 0 = every hardware thread
};

struct compare_pair_report {
  std::string rank;  // "" for a dump.json pair, else the NPU rank folder ("rank0")
  std::string npu_path, bench_path;
  compare_mode mode = compare_mode::all;
  size_t rows = 0, failing = 0, unmatched = 0;
  compare_match match = compare_match::automatic;  // how the rows were paired
  size_t paired_by_name = 0, aligned = 0;          // paired rows: same name, another name (alignment)
  size_t errors = 0;           // error rows: a tensor file could not be read
  std::string first_error;     // "line 3, NAME: Err_message" of the first error row
  compare_output_files files;  // empty when no row was found (nothing written)
  advisor_result advisor;
  uint64_t tensor_bytes = 0;   // bytes of tensor data compared, both sides
  double seconds = 0;          // wall time of this pair
};

struct compare_report {
  std::vector<compare_pair_report> pairs;
  std::vector<std::string> warnings;  // skipped ranks, unreadable tensor files, advisor notes
  std::vector<std::string> errors;    // ranks not compared because their dump is invalid
  [[nodiscard]] size_t failing_rows() const;
  [[nodiscard]] size_t error_rows() const;
};

const stage_description &compare_stage_description();

[[nodiscard]] compare_report compare_run(const compare_options &options);

// The building blocks tests and the benchmark use too (tensor files, the real-data fill, mapping
// files) are the compare library's: compare_tensor.h.

}  // namespace tprobe
