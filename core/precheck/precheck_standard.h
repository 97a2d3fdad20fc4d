// precheck_standard.h: msprobe's accuracy pre-check (精度预检) judgement of one replayed API, with
// no LibTorch in it: the bench (CPU, one precision higher) and the device output of each output and
// input gradient arrive as plain value arrays, and the rows of accuracy_checking_details_*.csv and
// accuracy_checking_result_*.csv come out (docs/msprobe-compat.md §7.7–§7.10).
//
// The replay (tools/precheck/replay.h, LibTorch) produces the arrays; the offline tool
// (tprobe-precheck), the live stage (tprobe-precheck-live) and the tests all judge through here,
// so both front doors write the same rows.
//
// Two dialects, as msprobe's versions differ (docs/msprobe-compat.md §1.2):
//   msprobe_8_3_3  per-API standards from api_precision_standard.yaml (absolute threshold, binary,
//                  ULP, thousandth, benchmark), Status spelled "Warning", NaN cosine is an error,
//                  an empty output is an error, int8 not comparable.
//   msprobe_head   every float output uses the benchmark standard, "warning", NaN cosine passes,
//                  an empty output is SKIP, int8 compared bit-exactly (quantization list: ≤ 1).
// The Status column is msprobe's legacy stage-1 verdict (§7.7.2) in both.
//
// Thread-safe: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace tprobe::precheck {

enum class dialect { msprobe_8_3_3, msprobe_head };

// "8.3.3" or "head"; throws usage_error naming the value otherwise.
[[nodiscard]] dialect dialect_parse(std::string_view text);

enum class status { pass, warning, error, skip };

// msprobe's spelling in the CSV: "pass", "warning" ("Warning" in 8.3.3), "error", "SKIP".
[[nodiscard]] std::string_view status_text(status s, dialect d);

// One tensor, as the judgement needs it. `dtype` is the torch spelling ("torch.float16",
// "torch.bfloat16", "torch.float32", "torch.float64", "torch.int64", "torch.bool", …). `values` holds
// every element in C order as double (exact for every float dtype and for integers below 2^53; a
// bool is 0/1). A bench tensor holds the higher-precision result; a device tensor the device's.
struct tensor_values {
  std::string dtype;
  std::vector<int64_t> shape;
  std::vector<double> values;
};

// A Python builtin output (bool, int, float, str), compared with ==. `type_name` is
// str(type(x)) ("<class 'int'>"), `text` its repr.
struct builtin_value {
  std::string type_name;
  std::string text;
};

// One output slot: a tensor, a builtin, or nothing (None: the bench produced no value → SKIP).
using output_value = std::variant<std::monostate, tensor_values, builtin_value>;

// One row of accuracy_checking_details_*.csv. An empty optional is written as msprobe's " ".
struct detail_row {
  std::string api_name;     // "Functional.linear.0.forward.output.0"
  std::string bench_dtype;  // "torch.float32"; " " when unknown
  std::string device_dtype;
  std::string shape;        // str(tuple): "(2, 4)", "(4,)", "()"
  std::optional<double> cosine, max_abs_err, ratio_hundredth, ratio_thousandth, ratio_ten_thousandth,
      binary_error_rate, error_balance, rmse, small_value_err_ratio, max_rel_error, mean_rel_error,
      inf_nan_error_ratio, rel_err_ratio, abs_err_ratio, ulp_max, ulp_mean, ulp_over_threshold;
  status verdict = status::pass;
  std::string message;
};

// One row of accuracy_checking_result_*.csv. backward is nullopt when the API had no backward
// (written " "). message is written only when forward or backward is SKIP.
struct result_row {
  std::string api_name;  // "Functional.linear.0"
  status forward = status::pass;
  std::optional<status> backward;
  std::string message;
};

// The bare API name msprobe's standard lists match: "Functional.linear.0" → "linear",
// "Torch.linalg.inv.0" → "linalg.inv", "Tensor.__add__.0" → "__add__". Empty for any other shape.
[[nodiscard]] std::string bare_api_name(std::string_view full_name);

// The standard §7.8.1 dispatches to: "benchmark", "absolute_threshold", "binary_consistency",
// "ulp_compare", "thousandth_threshold", "accumulative_error_compare".
// `in_dtype` is "torch.float32", or "torch.float8_e4m3fn" when the inputs were fp8.
[[nodiscard]] std::string_view standard_of(std::string_view bare_api, std::string_view out_dtype,
                                           std::string_view in_dtype, dialect d);

// [HEAD] config.yaml's quantization_api_list: int outputs of these pass iff max |a − b| ≤ 1.
[[nodiscard]] bool is_quantization_api(std::string_view bare_api);

// Judges one output slot: `row_name` is the details row's API Name, `bare_api` picks the standard.
// Dropout is not judged here (it writes no details row): see dropout_status.
// `fp8_input`: the API's inputs were fp8 (msprobe's is_fp8), which picks the absolute threshold.
[[nodiscard]] detail_row judge_output(std::string_view row_name, std::string_view bare_api,
                                      const output_value &bench, const output_value &device, dialect d,
                                      bool fp8_input = false);

// msprobe's _compare_dropout: pass iff |zeros(bench) − zeros(device)| / n < 0.1 (n ≥ 100).
[[nodiscard]] status dropout_status(const tensor_values &bench, const tensor_values &device);

// What one replay produced, for judge_api.
struct api_replay {
  std::string full_name;  // "Functional.linear.0"
  // Set when the API was not replayed: one SKIP row with this message, no backward row.
  std::optional<std::string> skip_reason;
  std::vector<output_value> forward_bench, forward_device;
  bool has_backward = false;            // the dump had a .backward entry for it
  std::optional<std::string> backward_skip;  // set: one backward SKIP row carrying it
  std::vector<output_value> backward_bench, backward_device;  // input gradients, args order
  bool fp8_input = false;  // the inputs were fp8 (see judge_output)
  // Set ("torch.bfloat16") when the device ran the API under autocast: its float inputs were cast
  // to this dtype, so its results (input gradients included) carry this dtype's rounding
  // (precheck_verdict.h rounds the trusted result to it).
  std::string autocast_dtype;
};

struct api_judgement {
  result_row result;
  std::vector<detail_row> details;
};

// The rows msprobe writes for one API (§7.7.1 structure rules, §7.9.2/§7.9.3 row shapes),
// including list-length and type mismatches (error rows) and dropout (status only).
// Where msprobe's code and its documented contract differ, the contract is kept:
//   - a direction's status is error when any output is error, else warning when any is warning
//     (msprobe's loop lets a later warning overwrite an earlier error);
//   - more bench outputs than device outputs give one error row "….output.0" (msprobe raises an
//     IndexError there, which its caller turns into a SKIP row).
[[nodiscard]] api_judgement judge_api(const api_replay &replay, dialect d);

}  // namespace tprobe::precheck
