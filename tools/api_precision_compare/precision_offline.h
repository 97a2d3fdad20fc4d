// precision_offline.h: tprobe-api-precision-compare, msprobe's api_precision_compare
// (docs/msprobe-compat.md §7.11) as an offline tool over two accuracy_checking_details_*.csv files:
//
//   tprobe api-precision-compare -npu NPU.csv -gpu GPU.csv -o OUT [--msprobe-version 8.3.3|head]
//   tprobe -f pytorch api_precision_compare --npu_csv_path NPU.csv --gpu_csv_path GPU.csv --out_path OUT
//
// It writes OUT/api_precision_compare_result_{ts}.csv and OUT/api_precision_compare_details_{ts}.csv
// (core/precheck/api_precision_compare.h) and prints one line: the count of APIs by verdict and
// the first API that did not pass. Exit 1 when an API is error, 0 otherwise; 100 for a bad input
// (a file without msprobe's required columns, not a .csv, two GPU rows of one name, an unknown
// version); 111 when a file cannot be read or written.
//
// The default version is 8.3.3, the msprobe release users run: its per-API standards (ULP,
// absolute threshold, …). "head" judges every float row by the benchmark ratios.
#pragma once

#include <filesystem>
#include <string>

#include "api_precision_compare.h"
#include "stage_main.h"

namespace tprobe {

struct precision_offline_options {
  std::string npu_csv, gpu_csv;
  std::string output_dir = "./";
  std::string version = "8.3.3";
};

struct precision_offline_report {
  precheck::precision_compare_result result;
  precheck::precision_compare_paths files;
  size_t passed = 0, errors = 0, others = 0;        // APIs: both directions pass (or " "), any error, the rest
  const precheck::precision_result_row *first_not_pass = nullptr;  // into result.results
};

const stage_description &api_precision_compare_stage_description();
// Reads, judges and writes; throws usage_error / system_error as the header says.
precision_offline_report precision_offline_run(const precision_offline_options &o);
// "4 APIs: 2 pass, 2 error, 0 other; first not pass: Functional.linear.0 (forward error, backward error)"
std::string precision_summary_line(const precision_offline_report &r);

}  // namespace tprobe
