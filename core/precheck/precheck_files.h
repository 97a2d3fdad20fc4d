// precheck_files.h: the two CSV files of a pre-check run, in msprobe's layout
// (docs/msprobe-compat.md §7.9): accuracy_checking_result_{ts}.csv and accuracy_checking_details_{ts}.csv,
// UTF-8 with a BOM, CRLF line endings, csv quoting only where needed, " " for an empty cell,
// floats as "{:.14f}". Readers accept both of msprobe's float spellings ("%.14f" and numpy's str).
//
// A writer appends rows as APIs finish, so an interrupted run can be resumed (-csv_path): the
// header is written only when the file is new, and resume reads the API names already in the
// result file's first column. Not thread-safe: one writer per run (callers serialise).
#pragma once

#include <cstdio>
#include <filesystem>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <vector>

#include "precheck_standard.h"

namespace tprobe::precheck {

// "%Y%m%d%H%M%S" of the local time now.
[[nodiscard]] std::string timestamp_now();

// ---- cells and lines, as msprobe's write_csv (csv.writer, utf-8-sig) writes them ----

// "{:.14f}" ("nan", "inf", "-inf" for the non-finite, as Python formats them).
[[nodiscard]] std::string format_float_cell(double value);
// A cell read back as a number: nullopt when blank (empty or spaces: msprobe's " "); throws
// usage_error when it is not a number. Takes "%.14f", numpy's str ("2.021552e-07", "1.0") and
// Python's non-finite spellings ("nan", "inf", "-inf", "NaN", "Infinity").
[[nodiscard]] std::optional<double> parse_float_cell(std::string_view cell);
// One CSV line with CRLF; a cell is quoted only when it holds ',', '"', CR or LF (QUOTE_MINIMAL).
[[nodiscard]] std::string csv_line(const std::vector<std::string> &cells);
// Appends `rows` to `path`; a new or empty file first gets the UTF-8 BOM and `header`. One write
// per call, so rows from processes appending to the same file are not interleaved. Throws
// system_error.
void csv_append(const std::filesystem::path &path, const std::vector<std::string> &header,
                const std::vector<std::vector<std::string>> &rows);

// The headers of accuracy_checking_details_*.csv (23 columns) and accuracy_checking_result_*.csv.
[[nodiscard]] const std::vector<std::string> &detail_header();
[[nodiscard]] const std::vector<std::string> &result_header();
// A row's cells as written: empty metrics " ", floats "{:.14f}", status spelled for `d`; a
// result row has 3 cells, 4 (the message) when forward or backward is SKIP.
[[nodiscard]] std::vector<std::string> detail_cells(const detail_row &row, dialect d);
[[nodiscard]] std::vector<std::string> result_cells(const result_row &row, dialect d);

class precheck_files {
 public:
  // New files in out_dir named with `ts`; throws system_error when they cannot be created.
  precheck_files(const std::filesystem::path &out_dir, const std::string &ts, dialect d);
  // Resume: `result_csv` must be named accuracy_checking_result_<14 digits>.csv (usage_error
  // otherwise); its details file is the same name with "result" replaced by "details". Both are
  // appended to; done() lists the API names already in the result file.
  static precheck_files resume(const std::filesystem::path &result_csv, dialect d);

  void write(const api_judgement &judgement);  // result row + its details rows, flushed
  [[nodiscard]] const std::set<std::string> &done() const { return done_; }
  [[nodiscard]] const std::filesystem::path &result_path() const { return result_path_; }
  [[nodiscard]] const std::filesystem::path &details_path() const { return details_path_; }
  [[nodiscard]] const std::string &ts() const { return ts_; }
 private:
  precheck_files(std::filesystem::path result_path, std::filesystem::path details_path, std::string ts, dialect d);

  std::filesystem::path result_path_, details_path_;
  std::string ts_;
  dialect dialect_;
  std::set<std::string> done_;
};

// Rows of a details or result file, cells as written (" " for empty), BOM and CRLF removed,
// csv quoting undone (a quoted cell may hold line breaks). Throws system_error (cannot read) or
// usage_error (an empty file, or a quote left open: the message names the file).
struct csv_table {
  std::vector<std::string> header;
  std::vector<std::vector<std::string>> rows;
};
[[nodiscard]] csv_table read_csv_table(const std::filesystem::path &path);
// The same from text already read (`name` for messages).
[[nodiscard]] csv_table parse_csv_table(std::string_view text, const std::string &name);

}  // namespace tprobe::precheck
