// compare_metrics.h: the columns msprobe computes for one NPU/bench pair, independent of how the
// pair was found or read (docs/msprobe-compat.md §4.6–§4.8).
//
// Offline compare (compare.h) reads two dumps and calls these per matched row; a live compare
// that aligns records as they stream in calls the same functions, so both give the same numbers.
//
//   tensors    compare_real_data(npu, bench)          Cosine, EucDist, MaxAbsErr, MaxRelativeErr,
//                                                     One/Five Thousandth(s) Err Ratio, Err_message,
//                                                     Accuracy Reached or Not     (mode ALL)
//   statistics compare_summary(npu_stats, bench_stats) Max/Min/Mean/L2norm diff, their relative
//                                                     errors and the Warning flag  (mode SUMMARY)
//   checksums  compare_md5(npu, bench)                 pass / Different            (mode MD5)
//
// Values are msprobe's: metrics rounded by format_value (12 decimals; Cosine above 0.9999 re-rounded
// to 6), EucDist unrounded, the strings 'unsupported', 'Nan', 'N/A', 'shape unmatched' where msprobe
// puts them, relative errors of statistics as "<repr(float)>%". The relative error of tensors is
// computed in the loaded dtype (float16 arithmetic for float16 files, as NumPy does), everything
// else in float64; sums run in float64 in a different order than NumPy's BLAS, so EucDist (which
// msprobe prints unrounded) may differ from msprobe's in the last digits.
//
// One pass over both tensors computes every metric; nothing allocates for contiguous C-order data.
// Thread-safe: pure functions.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "compare_cell.h"
#include "dtype.h"
#include "tensor_stats.h"

namespace tprobe {

// A tensor as loaded: contiguous, C order, little-endian, dtype_size(type) bytes per element.
// bfloat16 is compared as float32 (msprobe converts bf16 to float32 when it loads a tensor);
// complex tensors by their real parts (NumPy's astype(float)).
struct tensor_operand {
  dtype type = dtype::float32;
  std::vector<int64_t> shape;  // [] = 0-d
  std::span<const std::byte> data;

  [[nodiscard]] size_t element_count() const;
};

// Column order of the six real-data metrics.
enum real_metric : size_t {
  METRIC_COSINE = 0,
  METRIC_EUC_DIST = 1,
  METRIC_MAX_ABS_ERR = 2,
  METRIC_MAX_RELATIVE_ERR = 3,
  METRIC_ONE_THOUSANDTH = 4,
  METRIC_FIVE_THOUSANDTHS = 5,
};

struct real_data_result {
  std::array<cell, 6> metrics;  // see real_metric
  std::string err_message;      // what the checks and metrics append to Err_message, msprobe's wording
  std::string accuracy;         // "Yes", "No", "None" or "Unmatched" (check_accuracy)
  // A tensor file of the pair could not be read: nothing was compared, so the row must not pass
  // silently (an error row: counted apart from failing rows, and the compare exits 1).
  bool error = false;
};

// Why a row has no tensors to compare (msprobe's step 1, §4.6).
enum class real_data_missing {
  npu_no_file,      // NPU data_name '-1'      → 'unsupported', "NPU does not have data file."
  bench_no_file,    // bench data_name '-1'    → 'unsupported', "Bench does not have data file."
  bench_unmatched,  // no bench row            → 'unsupported', "Bench api/module unmatched."
  read_failed,      // file missing or failed  → 'unsupported', "Dump file: DETAIL not found or read failed."  (error)
  unreadable,       // not convertible         → 'unsupported', "Data is unreadable."                          (error)
};
[[nodiscard]] real_data_result real_data_unavailable(real_data_missing why, const std::string &detail = {});

// A tensor file that could not be used, as the offline compare found it.
struct tensor_read_error {
  std::string side;    // "NPU" or "bench"
  std::string path;    // the file
  std::string reason;  // one line, without the path: "is a symbolic link; refusing to follow it"
  bool read = false;   // read, but not comparable: a dtype with no metric path, a shape other than
                       // dump.json's (msprobe's "Data is unreadable."); false: not read at all
};
// msprobe's row for it (all six 'unsupported', Accuracy "None", "Dump file: PATH not found or read
// failed." or "Data is unreadable.") with the side, file and reason appended to Err_message:
//   "Dump file: P not found or read failed. Cannot read bench tensor: truncated data: …"
// and `error` set.
[[nodiscard]] real_data_result real_data_read_error(const tensor_read_error &e);

// msprobe's checks and metrics for two loaded tensors, in its order: empty NPU tensor, 0-d NPU
// tensor (only MaxAbsErr and MaxRelativeErr), shapes that differ, inf/nan at different positions
// (all six 'N/A', Accuracy "No"; at the same positions they count as 0), dtypes that differ (a
// message, computed anyway), then the six metrics.
[[nodiscard]] real_data_result compare_real_data(const tensor_operand &npu, const tensor_operand &bench);

// msprobe's check_accuracy(cos, max_abs_err): "Unmatched", "None", "No" or "Yes".
[[nodiscard]] std::string check_accuracy(const cell &cosine, const cell &max_abs_err);

// A statistic as the table shows it (msprobe's set_summary): a number, "Nan" for NaN, "True"/
// "False" for bools, "None" for null, or other text.
[[nodiscard]] cell statistic_cell(const nlohmann::ordered_json &value);
[[nodiscard]] cell statistic_cell(const stat_value &value);

struct summary_result {
  std::array<cell, 4> diff;          // Max diff, Min diff, Mean diff, L2norm diff
  std::array<cell, 4> relative_err;  // MaxRelativeErr, MinRelativeErr, MeanRelativeErr, NormRelativeErr
  bool warning = false;              // any |diff| / (|max(npu, bench)| + 1e-10) > 0.5
};

// Statistics of a matched pair, in the order Max, Min, Mean, Norm (cells as statistic_cell gives).
[[nodiscard]] summary_result compare_summary(const std::array<cell, 4> &npu, const std::array<cell, 4> &bench);

// msprobe's MD5 Result: "pass" when equal, else "Different" (unmatched rows are "N/A", decided by
// the caller).
[[nodiscard]] std::string compare_md5(const std::string &npu, const std::string &bench);

}  // namespace tprobe
