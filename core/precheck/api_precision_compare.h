// api_precision_compare.h: msprobe's stage-2 pre-check verdict (docs/msprobe-compat.md §7.11,
// compare/api_precision_compare.py): two accuracy_checking_details_*.csv files, one from the
// device under test ("NPU") and one from a trusted device ("GPU"), each against its CPU bench, are
// judged row by row by the ratio of NPU error to GPU error, then per API.
//
// Dialects (precheck_standard.h): msprobe_8_3_3 dispatches per API from the yaml lists with single
// benchmark thresholds and raises on a blank metric cell (a SKIP row); msprobe_head judges every
// float row by the benchmark standard with the L0/L1/L2 thresholds of its API, and reads a blank
// benchmark or ULP cell as 0.
//
// Where msprobe aborts the whole run (a GPU file with two rows of one name) this throws
// usage_error; per-row problems (a blank or non-numeric cell) are SKIP rows, as msprobe writes
// them. Thread-safe: pure functions, except the writer.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "precheck_files.h"
#include "precheck_standard.h"

namespace tprobe::precheck {

// to_required_columns(): the 14 columns both files must have.
[[nodiscard]] const std::vector<std::string> &precision_required_columns();
// Throws usage_error "<name>: missing column <column>" naming the first missing column.
void check_precision_columns(const csv_table &table, const std::string &name);

// One row of api_precision_compare_details_{ts}.csv. Empty optionals and empty strings are
// written as msprobe's " "; compare_message is written as it is (empty stays empty).
struct precision_detail {
  std::string api_name;
  std::optional<double> small_value_err_ratio;
  std::string small_value_err_status;
  std::optional<double> rmse_ratio;
  std::string rmse_status;
  std::optional<double> max_rel_err_ratio;
  std::string max_rel_err_status;
  std::optional<double> mean_rel_err_ratio;
  std::string mean_rel_err_status;
  std::optional<double> eb_ratio;
  std::string eb_status;
  std::optional<double> inf_nan_error_ratio;
  std::string inf_nan_error_ratio_status;
  std::optional<double> rel_err_ratio;
  std::string rel_err_ratio_status;
  std::optional<double> abs_err_ratio;
  std::string abs_err_ratio_status;
  std::optional<double> error_rate;
  std::string error_rate_status;
  std::optional<double> mean_ulp_err, ulp_err_proportion, ulp_err_proportion_ratio;
  std::string ulp_err_status;
  std::optional<double> rel_err_thousandth;
  std::string rel_err_thousandth_status;
  std::string compare_result;     // "pass", "error", "SKIP"
  std::string compare_algorithm;  // "标杆比对法", "ULP误差比对法", "二进制一致法", "绝对阈值法", "双千指标法", "累积误差比对法"
  std::string compare_message;
};

// One row of api_precision_compare_result_{ts}.csv: always 4 cells. Statuses are "pass",
// "error", "SKIP", or " " for a direction with no rows.
struct precision_result_row {
  std::string api_name;  // "Functional.linear.0"
  std::string forward, backward;
  std::string message;
};

struct precision_compare_result {
  std::vector<precision_detail> details;
  std::vector<precision_result_row> results;
  std::vector<std::string> warnings;  // NPU rows with no GPU row (no output row, as msprobe)
};

// analyse_csv over two tables already checked by check_precision_columns. Rows of one API must
// be consecutive in the NPU file (msprobe emits an API's result when the name changes).
[[nodiscard]] precision_compare_result api_precision_compare(const csv_table &npu, const csv_table &gpu, dialect d);

// The two output files' headers and cells.
[[nodiscard]] const std::vector<std::string> &precision_detail_header();  // 28 columns
[[nodiscard]] const std::vector<std::string> &precision_result_header();  // 4 columns
[[nodiscard]] std::vector<std::string> precision_detail_cells(const precision_detail &row);
[[nodiscard]] std::vector<std::string> precision_result_cells(const precision_result_row &row);

// Writes api_precision_compare_result_{ts}.csv and api_precision_compare_details_{ts}.csv into
// out_dir (created if missing; files of the same name are replaced). Throws system_error.
struct precision_compare_paths {
  std::filesystem::path result, details;
};
precision_compare_paths write_precision_compare(const precision_compare_result &r,
                                                const std::filesystem::path &out_dir, const std::string &ts);

}  // namespace tprobe::precheck
