// compare_output.h: the files one compare writes (docs/msprobe-compat.md §4.10, §4.11).
//
//   compare_result{suffix}_{ts}.xlsx   msprobe's table. Without highlighting one sheet "Sheet1"
//                                      (split into "part_0", "part_1", … past 1,048,500 rows) with a
//                                      bold header, as pandas writes it; with highlighting one sheet
//                                      "Sheet", red (FF0000) and yellow (FFFF00) rows filled whole,
//                                      non-numbers written as text and inf/-inf/nan as "inf\t" etc.
//   compare_result{suffix}_{ts}.csv    the same columns and rows, values as Python's str() prints them
//                                      (UTF-8, no byte-order mark, "\n" line ends, RFC 4180 quoting).
//   compare_result{suffix}_{ts}.json   the same table for programs (a report stage), see below.
//   advisor{suffix}_{ts}.txt           "Line: …\nSuspect Nodes: …\nExpert Advice: …\n".
//
// suffix is "" for one pair of dump.json files and "_rankN" (the NPU rank folder's name) for step
// folders; ts is the local time, %Y%m%d%H%M%S, followed by "_1", "_2", … when files of that name
// already exist (another compare in the same second): compare_output_claim() creates the names
// with O_EXCL, so concurrent compares into one folder never overwrite each other's files. Files are
// 0640, written to a temporary name and renamed over the claimed name, so a reader never sees half
// a file (a claimed name is an empty file until then).
//
// JSON form (indent 1; NaN / Infinity tokens as in dump.json):
//   {"format": "tprobe-compare", "version": 1, "mode": "all"|"summary"|"md5", "match": "auto"|"name",
//    "npu": "<npu dump.json>", "bench": "<bench dump.json>" (absolute paths; a live compare's run
//    labels as they are), "rank": "rank0"|null,
//    "columns": [...], "rows": [[cell, ...], ...],        cells: number, string, bool or null
//    "highlight": ["red"|"yellow"|null, ...] (only with highlighting),
//    "row_status": "ofeu…": one character per row: f failing (compare_row_failing), e error row,
//                  u unmatched (no bench row), o otherwise,
//    "failing_rows": N, "unmatched_rows": N, "error_rows": N (rows whose tensor files could not be read),
//    "paired_by_name": N, "paired_by_alignment": N (paired rows by how: compare_match.h),
//    "advisor": {"line": "12"|"NA", "suspect_nodes": "...", "expert_advice": "..."} | null}
#pragma once

#include <string>

#include "compare_table.h"

namespace tprobe {

struct compare_output_files {
  std::string xlsx, csv, json, advisor;
};

// The four paths under `dir` for `suffix` and `timestamp` (%Y%m%d%H%M%S).
[[nodiscard]] compare_output_files compare_output_names(const std::string &dir, const std::string &suffix,
                                                        const std::string &timestamp);
// The local time now as %Y%m%d%H%M%S.
[[nodiscard]] std::string compare_timestamp();

// Claims fresh names for one compare's files: compare_output_names(dir, suffix, timestamp), else
// with timestamp "{timestamp}_1", "_2", …: the first set none of whose files exists, each created
// empty with O_CREAT|O_EXCL|O_NOFOLLOW (mode 0640), so two processes never get the same set.
// `advisor` false: no advisor name (files.advisor is empty). Throws system_error if a file cannot
// be created (or 10,000 sets are taken).
[[nodiscard]] compare_output_files compare_output_claim(const std::string &dir, const std::string &suffix,
                                                        const std::string &timestamp, bool advisor);
// Removes the claimed files again (a compare that failed before writing them all).
void compare_output_release(const compare_output_files &files) noexcept;

// `highlighted`: the layout of msprobe's -hl workbook (the table was passed to
// compare_table_highlight()). Throws system_error when the file cannot be written.
void compare_write_xlsx(const compare_table &t, const std::string &path, bool highlighted);
void compare_write_csv(const compare_table &t, const std::string &path);
void compare_write_json(const compare_table &t, const std::string &path, const std::string &rank, bool highlighted,
                        const advisor_result *advisor);
void compare_write_advisor(const advisor_result &a, const std::string &path);

// One cell as the CSV shows it (Python's str(); "" for an empty cell), quoted as CSV needs and,
// for a text that a spreadsheet would take for a formula, escaped (spreadsheet_text).
[[nodiscard]] std::string compare_csv_field(const cell &c);
// A text cell as the xlsx and the CSV hold it: one that starts like a formula (formula_like,
// msprobe's blacklist: "=cmd", "-inf", "@x", "a;+b") gets a leading apostrophe, so that a
// spreadsheet shows it as text and never runs it. msprobe refuses the whole compare for such a
// string instead; tprobe escapes the cell and goes on (the JSON result keeps the text as it was).
[[nodiscard]] std::string spreadsheet_text(std::string s);

}  // namespace tprobe
