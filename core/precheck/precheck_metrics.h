// precheck_metrics.h: the numbers of msprobe's accuracy pre-check (docs/msprobe-compat.md §7.7.2, §7.8.2,
// §7.8.3), computed the way numpy computes them in msprobe's compare/algorithm.py and
// precision_standard/*.py.
//
// Why numpy's arithmetic and not plain double: msprobe's arrays keep their dtypes, so a float16
// device output minus a float32 bench is a float32 array, |b| + eps is rounded to the bench dtype,
// and a float32 exp2(133) overflows to inf. Thresholds (rel_err < 0.001, ulp > 1) decide on those
// rounded values, so every element-wise step here is rounded to the dtype numpy's promotion gives
// it (np_round). Reductions (mean) add in double and round once, which differs from numpy's
// pairwise float32 sums by a few float32 ulps only.
//
// Arrays are doubles holding values exactly representable in their numpy dtype, read through
// spans (float_view) so that a caller's values are never copied; masks are std::vector<char> (0/1).
// The metrics of a standard are taken in one pass with no array as large as the input (numpy's
// block-wise pairwise sums fed from a one-block buffer: the same sums): outputs of tens of MB are
// the pre-check's common case, and temporaries that size cost more than the arithmetic.
// Thread-safe: pure functions.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tprobe::precheck {

// The numpy float dtypes a compared array can have (bfloat16 outputs are converted to float32
// before any metric, as msprobe does).
enum class np_float { f16, f32, f64 };

[[nodiscard]] np_float np_promote(np_float a, np_float b);
// x rounded to t (overflow → ±inf), as numpy stores the result of an operation in t.
[[nodiscard]] double np_round(np_float t, double x);
// numpy's dtype of a float tensor of torch dtype `dtype` after msprobe's bf16 → float32 step;
// nullopt for non-float dtypes.
[[nodiscard]] std::optional<np_float> np_float_of(std::string_view torch_dtype);

// One compared float pair as msprobe holds it after _compare_torch_tensor's preparation.
struct float_arrays {
  np_float bench = np_float::f32, device = np_float::f32;
  std::vector<double> b, d;
  std::string device_dtype;  // the device's torch dtype before the bf16 → float32 step
};

// The same pair without owning the values (what the metrics read); a float_arrays converts to it.
struct float_view {
  np_float bench = np_float::f32, device = np_float::f32;
  std::span<const double> b, d;
  std::string_view device_dtype;
  float_view() = default;
  float_view(const float_arrays &a) : bench(a.bench), device(a.device), b(a.b), d(a.d), device_dtype(a.device_dtype) {}  // NOLINT
};

// ---- compare/algorithm.py ----------------------------------------------------------------------

// finfo(bench).eps, or 2^-8 when the device dtype is bfloat16 (CompareConst.BFLOAT16_EPS).
[[nodiscard]] double bench_eps(const float_view &a);
[[nodiscard]] std::vector<double> abs_err_of(const float_view &a);             // |d − b|
[[nodiscard]] std::vector<double> abs_bench_with_eps_of(const float_view &a);  // |b| + eps
// |abs_err / abs_bench_with_eps| (get_rel_err_origin).
[[nodiscard]] std::vector<double> rel_err_origin_of(const float_view &a, const std::vector<double> &abs_err,
                                                    const std::vector<double> &abs_bench_eps);

// cosine_sim: value nullopt is msprobe's " ". nan_passes: [HEAD] a NaN cosine is ok.
struct cosine_result {
  std::optional<double> value;
  bool ok = false;
  std::string message;
};
[[nodiscard]] cosine_result cosine_sim(std::span<const double> bench, std::span<const double> device,
                                       bool nan_passes);
[[nodiscard]] inline cosine_result cosine_sim(const std::vector<double> &bench, const std::vector<double> &device,
                                              bool nan_passes) {
  return cosine_sim(std::span<const double>(bench), std::span<const double>(device), nan_passes);
}

// get_rel_err_ratio: count(rel < t) / n (1 when empty), ok iff ratio > 1 − t.
struct ratio_result {
  double ratio = 1;
  bool ok = true;
};
[[nodiscard]] ratio_result rel_err_ratio(const std::vector<double> &rel, double threshold);

// np.max (NaN if any element is NaN); arrays are never empty here.
[[nodiscard]] double np_max(std::span<const double> v);
[[nodiscard]] inline double np_max(const std::vector<double> &v) { return np_max(std::span<const double>(v)); }
// np.mean of an array of dtype t (0 elements: NaN).
[[nodiscard]] double np_mean(std::span<const double> v, np_float t);
[[nodiscard]] inline double np_mean(const std::vector<double> &v, np_float t) { return np_mean(std::span<const double>(v), t); }

// get_rmse: sqrt(mean(where(mask, 0, abs_err)^2) · (n / (n − count(mask) + 1e-4) + 1e-4)).
[[nodiscard]] double rmse_of(const std::vector<double> &abs_err, const std::vector<char> &mask, np_float t);
// get_error_balance: |count(d − b.astype(d) > 0) − count(… < 0)| / n.
[[nodiscard]] double error_balance_of(const float_view &a);
// get_small_value_err_ratio: count(small & greater) / count(small), 0 when no small value.
[[nodiscard]] double small_value_err_ratio_of(const std::vector<char> &small, const std::vector<char> &greater);
// check_norm_value: count(normal & rel > rtol) / count(normal), 0 when no normal value.
[[nodiscard]] double norm_value_err_ratio(const std::vector<char> &normal, const std::vector<double> &rel, double rtol);
// get_max_rel_err / get_mean_rel_err over rel_err where −1 marks excluded elements.
[[nodiscard]] double max_rel_err_of(const std::vector<double> &rel);
[[nodiscard]] double mean_rel_err_of(const std::vector<double> &rel, np_float t);
// compare_bool_tensor's error rate: count(b != d) / n.
[[nodiscard]] double binary_error_rate(std::span<const double> b, std::span<const double> d);
[[nodiscard]] inline double binary_error_rate(const std::vector<double> &b, const std::vector<double> &d) {
  return binary_error_rate(std::span<const double>(b), std::span<const double>(d));
}
// ULP errors per element (get_ulp_err) for a float16/bfloat16/float32 device dtype.
[[nodiscard]] std::vector<double> ulp_err_of(const float_view &a);

// ---- StandardConfig (precision_standard/standard_config.py), keyed by the device torch dtype ----

[[nodiscard]] double small_value_bound(std::string_view dtype, std::string_view standard);
[[nodiscard]] double small_value_atol(std::string_view dtype, std::string_view standard);
[[nodiscard]] double rtol_of(std::string_view dtype);
[[nodiscard]] double accumulative_error_bound(std::string_view dtype);
[[nodiscard]] double minimum_err(std::string_view dtype);  // _minmum_err: ratio floor (§7.11)
[[nodiscard]] double accumulative_error_eb_threshold(std::string_view dtype);

// ---- the standards' metrics (precision_standard/*.py _compute_metrics) --------------------------

struct benchmark_metrics {
  double small_value_err_ratio = 0, max_rel_error = 0, mean_rel_error = 0, rmse = 0, eb = 0;
};
[[nodiscard]] benchmark_metrics benchmark_metrics_of(const float_view &a);

struct absolute_metrics {
  double inf_nan_error_ratio = 0, rel_err_ratio = 0, abs_err_ratio = 0;
  double eb = 0;  // accumulative only
};
[[nodiscard]] absolute_metrics absolute_threshold_metrics_of(const float_view &a);
[[nodiscard]] absolute_metrics accumulative_error_metrics_of(const float_view &a);

struct ulp_metrics {
  double max_ulp_error = 0, mean_ulp_error = 0, ulp_error_proportion = 0;
};
[[nodiscard]] ulp_metrics ulp_metrics_of(const float_view &a);

// ---- the legacy verdict's numbers (Comparator._compare_float_tensor, Step B) ---------------------

// max(abs_err) and get_rel_err_ratio of rel_err_origin at 0.01, 0.001 and 0.0001, in one pass.
struct legacy_metrics {
  double max_abs_err = 0;
  ratio_result hundredth, thousandth, ten_thousandth;
};
[[nodiscard]] legacy_metrics legacy_metrics_of(const float_view &a);

}  // namespace tprobe::precheck
