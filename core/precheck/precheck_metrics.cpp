// precheck_metrics.cpp: see precheck_metrics.h. Each function names the msprobe function it
// follows; the dtype of every intermediate array is the one numpy 1.x gives it.
#include "precheck_metrics.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "half_float.h"

namespace tprobe::precheck {
namespace {

constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();

bool is_fp8(std::string_view dtype) {
  return dtype == "torch.float8_e4m3fn" || dtype == "torch.float8_e5m2" || dtype.find("hifloat8") != std::string_view::npos;
}

// numpy's result dtype of (device op bench).
np_float promoted(const float_view &a) { return np_promote(a.bench, a.device); }

double finfo_eps(np_float t) {
  switch (t) {
    case np_float::f16: return 0x1p-10;
    case np_float::f32: return 0x1p-23;
    case np_float::f64: return 0x1p-52;
  }
  return 0x1p-52;
}

double finfo_max(np_float t) {
  switch (t) {
    case np_float::f16: return 65504.0;
    case np_float::f32: return static_cast<double>(std::numeric_limits<float>::max());
    case np_float::f64: return std::numeric_limits<double>::max();
  }
  return std::numeric_limits<double>::max();
}

// np.log2 of an array of dtype t: float16 is computed in float32 and rounded back.
double np_log2(np_float t, double x) {
  if (t == np_float::f64) return std::log2(x);
  return np_round(t, static_cast<double>(std::log2(static_cast<float>(x))));
}

// Values of StandardConfig's dicts for fp16, bf16 and fp32 (also the default).
double by_dtype(std::string_view dtype, double fp16, double bf16, double fp32) {
  if (dtype == "torch.float16") return fp16;
  if (dtype == "torch.bfloat16") return bf16;
  return fp32;
}

// np.add.reduce's buffer: the elements its inner loop gets at a time.
constexpr size_t np_block = 8192;

// numpy's pairwise_sum (loops_utils.h.src): 8 accumulators up to 128 elements, halves (multiples
// of 8) above, in the accumulator type T.
template <typename T>
T pairwise_sum(const double *a, size_t n) {
  if (n < 8) {
    T res = 0;
    for (size_t i = 0; i < n; ++i) res += static_cast<T>(a[i]);
    return res;
  }
  if (n <= 128) {
    T r[8];
    for (size_t j = 0; j < 8; ++j) r[j] = static_cast<T>(a[j]);
    size_t i = 8;
    for (; i < n - (n % 8); i += 8)
      for (size_t j = 0; j < 8; ++j) r[j] += static_cast<T>(a[i + j]);
    T res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]));
    for (; i < n; ++i) res += static_cast<T>(a[i]);
    return res;
  }
  size_t n2 = n / 2;
  n2 -= n2 % 8;
  return pairwise_sum<T>(a, n2) + pairwise_sum<T>(a + n2, n - n2);
}

// np.add.reduce: the reduction iterator hands the inner loop blocks of its buffer size (8192
// elements), each summed pairwise, the block sums added in order.
template <typename T>
T np_sum(std::span<const double> v) {
  constexpr size_t block = np_block;
  T total = 0;
  for (size_t at = 0; at < v.size(); at += block) total += pairwise_sum<T>(v.data() + at, std::min(block, v.size() - at));
  return total;
}

// One element of abs_err_of (in the promoted dtype p) and of abs_bench_with_eps_of: the arrays'
// functions and the one-pass metrics share them, so both give the same numbers.
inline double abs_err_at(np_float p, double b, double d) { return std::fabs(np_round(p, d - b)); }
inline double abs_bench_eps_at(np_float bench, double eps, double b) { return np_round(bench, std::fabs(b) + eps); }

// np.max's running value: NaN once any element is NaN.
struct running_max {
  double m = -std::numeric_limits<double>::infinity();
  bool nan = false;
  void add(double x) {
    if (std::isnan(x)) nan = true;
    else m = std::max(m, x);
  }
  [[nodiscard]] double value() const { return nan ? nan_v : m; }
};

// np.mean of an array of dtype t fed one element at a time: np_sum's 8192-element blocks, each
// summed pairwise as it fills, so the sum is np_mean's over the whole array.
class running_mean {
 public:
  explicit running_mean(np_float t) : t_(t), block_(np_block) {}
  void add(double x) {
    block_[k_++] = x;
    ++count_;
    if (k_ == np_block) flush();
  }
  [[nodiscard]] size_t count() const { return count_; }
  [[nodiscard]] double value() {
    flush();
    if (count_ == 0) return nan_v;
    const double n = static_cast<double>(count_);
    if (t_ == np_float::f64) return sum_d_ / n;
    return np_round(t_, static_cast<double>(sum_f_) / n);
  }

 private:
  void flush();
  np_float t_;
  std::vector<double> block_;
  size_t k_ = 0, count_ = 0;
  double sum_d_ = 0;
  float sum_f_ = 0;
};

void running_mean::flush() {
  if (k_ == 0) return;
  if (t_ == np_float::f64) sum_d_ += pairwise_sum<double>(block_.data(), k_);
  else sum_f_ += pairwise_sum<float>(block_.data(), k_);
  k_ = 0;
}

// rel_err = abs_err / abs_bench_with_eps in the promoted dtype (BaseCompare._get_rel_err).
std::vector<double> rel_err_of(const float_view &a, const std::vector<double> &abs_err,
                               const std::vector<double> &abs_bench_eps) {
  const np_float p = np_promote(promoted(a), a.bench);
  std::vector<double> rel(abs_err.size());
  for (size_t i = 0; i < rel.size(); ++i) rel[i] = np_round(p, abs_err[i] / abs_bench_eps[i]);
  return rel;
}

// check_inf_nan_value (algorithm.py): the share of inf/nan elements whose clipped values differ
// by more than rtol (relative to |b| + eps) and are not both NaN.
double inf_nan_error_ratio(const float_view &a, const std::vector<char> &inf_nan, double rtol) {
  size_t count = 0, failing = 0;
  const bool bf16 = a.device_dtype == "torch.bfloat16";
  const double hi = bf16 ? 3.3895313892515355e38 : finfo_max(a.device);
  const double eps = bench_eps(a);
  const np_float p = np_promote(a.device, a.bench);
  for (size_t i = 0; i < inf_nan.size(); ++i) {
    if (!inf_nan[i]) continue;
    ++count;
    const double golden = np_round(a.device, a.b[i]);
    const double golden_clip = std::isnan(golden) ? golden : std::clamp(golden, -hi, hi);
    const double npu_clip = std::isnan(a.d[i]) ? a.d[i] : std::clamp(a.d[i], -hi, hi);
    const double ae = np_round(a.device, std::fabs(npu_clip - golden_clip));
    const double re = np_round(p, ae / np_round(a.bench, std::fabs(a.b[i]) + eps));
    const bool pass = re <= rtol || (std::isnan(a.d[i]) && std::isnan(golden_clip));
    if (!pass) ++failing;
  }
  return count == 0 ? 0.0 : static_cast<double>(failing) / static_cast<double>(count);
}

absolute_metrics absolute_like(const float_view &a, double rtol, double small_value, double atol) {
  // abs_err_of, abs_bench_with_eps_of, masks_of and rel_err_of per element, then
  // check_inf_nan_value, check_norm_value and check_small_value over them.
  const np_float p = promoted(a), rel_type = np_promote(p, a.bench);
  const double eps = bench_eps(a);
  size_t normal = 0, normal_failing = 0, small = 0, small_failing = 0;
  bool any_inf_nan = false;
  for (size_t i = 0; i < a.b.size(); ++i) {
    const double b = a.b[i], d = a.d[i];
    const bool finite = std::isfinite(d) && std::isfinite(np_round(a.device, b));
    if (!finite) {
      any_inf_nan = true;
      continue;
    }
    const double abs_err = abs_err_at(p, b, d);
    if (std::fabs(b) <= small_value) {
      ++small;
      small_failing += abs_err > atol ? 1 : 0;
    } else {
      ++normal;
      normal_failing += np_round(rel_type, abs_err / abs_bench_eps_at(a.bench, eps, b)) > rtol ? 1 : 0;
    }
  }
  absolute_metrics r;
  if (any_inf_nan) {
    std::vector<char> inf_nan(a.b.size());
    for (size_t i = 0; i < a.b.size(); ++i)
      inf_nan[i] = !(std::isfinite(a.d[i]) && std::isfinite(np_round(a.device, a.b[i])));
    r.inf_nan_error_ratio = inf_nan_error_ratio(a, inf_nan, rtol);
  }
  r.rel_err_ratio = normal == 0 ? 0.0 : static_cast<double>(normal_failing) / static_cast<double>(normal);
  r.abs_err_ratio = small == 0 ? 0.0 : static_cast<double>(small_failing) / static_cast<double>(small);
  return r;
}

// calc_ulp_err_fp8 (algorithm.py), in float64.
std::vector<double> ulp_err_fp8(const float_view &a) {
  std::vector<double> ulp(a.b.size());
  for (size_t i = 0; i < ulp.size(); ++i) {
    const double x = a.b[i], hi = a.d[i];
    double ex = std::log2(std::fabs(x) + 0x1p-1000);
    if (ex < -22) ex = -22;
    const double exponent = std::floor(ex);
    const double eabs = std::fabs(exponent);
    const int wm = eabs <= 3 ? 3 : eabs <= 7 ? 2 : eabs <= 15 ? 1 : 0;
    if (wm > 0) {
      ulp[i] = std::fabs((hi - x) * std::exp2(-exponent + wm));
    } else {
      const double s_ex = ex * (x >= 0 ? 1 : -1);
      const double s_eh = std::log2(std::fabs(hi) + 0x1p-1000) * (hi >= 0 ? 1 : -1);
      ulp[i] = std::fabs(s_eh - s_ex);
    }
  }
  return ulp;
}

}  // namespace

np_float np_promote(np_float a, np_float b) { return static_cast<int>(a) >= static_cast<int>(b) ? a : b; }

double np_round(np_float t, double x) {
  switch (t) {
    case np_float::f16:
      return static_cast<double>(float16_to_float(float_to_float16(static_cast<float>(x))));
    case np_float::f32: return static_cast<double>(static_cast<float>(x));
    case np_float::f64: return x;
  }
  return x;
}

std::optional<np_float> np_float_of(std::string_view dtype) {
  if (dtype == "torch.float16") return np_float::f16;
  if (dtype == "torch.bfloat16" || dtype == "torch.float32") return np_float::f32;
  if (dtype == "torch.float64") return np_float::f64;
  if (is_fp8(dtype)) return np_float::f32;  // msprobe decodes fp8 to float32 arrays
  return std::nullopt;
}

double bench_eps(const float_view &a) {
  return a.device_dtype == "torch.bfloat16" ? 0x1p-8 : finfo_eps(a.bench);
}

std::vector<double> abs_err_of(const float_view &a) {
  const np_float p = promoted(a);
  std::vector<double> e(a.b.size());
  for (size_t i = 0; i < e.size(); ++i) e[i] = abs_err_at(p, a.b[i], a.d[i]);
  return e;
}

std::vector<double> abs_bench_with_eps_of(const float_view &a) {
  const double eps = bench_eps(a);
  std::vector<double> e(a.b.size());
  for (size_t i = 0; i < e.size(); ++i) e[i] = abs_bench_eps_at(a.bench, eps, a.b[i]);
  return e;
}

std::vector<double> rel_err_origin_of(const float_view &a, const std::vector<double> &abs_err,
                                      const std::vector<double> &abs_bench_eps) {
  return rel_err_of(a, abs_err, abs_bench_eps);  // |x| is exact: the same array
}

cosine_result cosine_sim(std::span<const double> bench, std::span<const double> device, bool nan_passes) {
  cosine_result r;
  if (bench.size() != device.size()) {
    r.value = -1;
    r.message = "Shape of device and bench outputs don't match. device: (" + std::to_string(device.size()) +
                ",), bench: (" + std::to_string(bench.size()) + ",).";
    return r;
  }
  if (device.size() == 1) {
    r.ok = true;
    r.message = "All the data in device dump data is scalar. Please refer to other compare algorithms.";
    return r;
  }
  double n_max = 0, b_max = 0;
  for (double x : device) n_max = std::isnan(x) || std::isnan(n_max) ? nan_v : std::max(n_max, std::fabs(x));
  for (double x : bench) b_max = std::isnan(x) || std::isnan(b_max) ? nan_v : std::max(b_max, std::fabs(x));
  constexpr double eps = std::numeric_limits<double>::epsilon();
  if (n_max <= eps && b_max <= eps) {
    r.ok = true;
    r.message = "All the data in device and bench outputs are zero.";
    return r;
  }
  if (n_max <= eps) {
    r.message = "All the data is zero in device dump data.";
    return r;
  }
  if (b_max <= eps) {
    r.message = "All the data is zero in bench dump data.";
    return r;
  }
  double dot = 0, nn = 0, bb = 0;
  for (size_t i = 0; i < device.size(); ++i) {
    const double n = device[i] / n_max, b = bench[i] / b_max;
    dot += n * b;
    nn += n * n;
    bb += b * b;
  }
  const double cos = dot / (std::sqrt(nn) * std::sqrt(bb));
  if (std::isnan(cos)) {
    r.value = cos;
    r.message = "Dump data has NaN when comparing with Cosine Similarity.";
    r.ok = nan_passes;
    return r;
  }
  r.value = std::clamp(cos, -1.0, 1.0);
  r.ok = *r.value > 0.99;
  return r;
}

ratio_result rel_err_ratio(const std::vector<double> &rel, double threshold) {
  ratio_result r;
  if (!rel.empty()) {
    size_t below = 0;
    for (double x : rel) below += x < threshold ? 1 : 0;
    r.ratio = static_cast<double>(below) / static_cast<double>(rel.size());
  }
  r.ok = r.ratio > 1 - threshold;
  return r;
}

double np_max(std::span<const double> v) {
  double m = -std::numeric_limits<double>::infinity();
  for (double x : v) {
    if (std::isnan(x)) return nan_v;
    m = std::max(m, x);
  }
  return m;
}

double np_mean(std::span<const double> v, np_float t) {
  if (v.empty()) return nan_v;
  const double n = static_cast<double>(v.size());
  // numpy's _mean: the sum in the array's dtype (float16: in float32), then dtype(sum / count)
  // with the division in float64.
  if (t == np_float::f64) return np_sum<double>(v) / n;
  return np_round(t, static_cast<double>(np_sum<float>(v)) / n);
}

double rmse_of(const std::vector<double> &abs_err, const std::vector<char> &mask, np_float t) {
  std::vector<double> sq(abs_err.size());
  size_t masked = 0;
  for (size_t i = 0; i < sq.size(); ++i) {
    const double x = mask[i] ? 0.0 : abs_err[i];
    masked += mask[i] ? 1 : 0;
    sq[i] = np_round(t, x * x);
  }
  const double n = static_cast<double>(abs_err.size());
  const double mse = np_mean(sq, t) * (n / (n - static_cast<double>(masked) + 0.0001) + 0.0001);
  return std::sqrt(mse);
}

double error_balance_of(const float_view &a) {
  int64_t larger = 0, smaller = 0;
  for (size_t i = 0; i < a.b.size(); ++i) {
    const double diff = np_round(a.device, a.d[i] - np_round(a.device, a.b[i]));
    larger += diff > 0 ? 1 : 0;
    smaller += diff < 0 ? 1 : 0;
  }
  return a.b.empty() ? 0.0 : static_cast<double>(std::llabs(larger - smaller)) / static_cast<double>(a.b.size());
}

double small_value_err_ratio_of(const std::vector<char> &small, const std::vector<char> &greater) {
  size_t count = 0, failing = 0;
  for (size_t i = 0; i < small.size(); ++i) {
    count += small[i] ? 1 : 0;
    failing += small[i] && greater[i] ? 1 : 0;
  }
  return count == 0 ? 0.0 : static_cast<double>(failing) / static_cast<double>(count);
}

double norm_value_err_ratio(const std::vector<char> &normal, const std::vector<double> &rel, double rtol) {
  size_t count = 0, failing = 0;
  for (size_t i = 0; i < normal.size(); ++i) {
    count += normal[i] ? 1 : 0;
    failing += normal[i] && rel[i] > rtol ? 1 : 0;
  }
  return count == 0 ? 0.0 : static_cast<double>(failing) / static_cast<double>(count);
}

double max_rel_err_of(const std::vector<double> &rel) {
  const double m = np_max(rel);
  return m >= 0 ? m : 0.0;  // NaN >= 0 is false: 0, as msprobe
}

double mean_rel_err_of(const std::vector<double> &rel, np_float t) {
  std::vector<double> kept;
  for (double x : rel)
    if (x >= 0) kept.push_back(x);
  return kept.empty() ? 0.0 : np_mean(kept, t);
}

double binary_error_rate(std::span<const double> b, std::span<const double> d) {
  size_t diff = 0;
  for (size_t i = 0; i < b.size(); ++i) diff += b[i] != d[i] ? 1 : 0;  // NaN != NaN counts
  return b.empty() ? nan_v : static_cast<double>(diff) / static_cast<double>(b.size());
}

std::vector<double> ulp_err_of(const float_view &a) {
  if (is_fp8(a.device_dtype)) return ulp_err_fp8(a);
  // ULP_PARAMETERS: min_eb / exponent_num per device dtype.
  const bool fp16 = a.device_dtype == "torch.float16", fp32 = a.device_dtype == "torch.float32";
  const double min_eb = fp16 ? -14 : -126;
  const double exponent_num = fp16 ? 10 : fp32 ? 23 : 7;
  const np_float t = fp32 ? np_float::f64 : np_float::f32;  // calc_ulp_err's data_type
  const np_float diff_type = np_promote(t, a.bench);
  std::vector<double> ulp(a.b.size());
  for (size_t i = 0; i < ulp.size(); ++i) {
    const double abs_b = std::fabs(a.b[i]);
    double eb = abs_b == 0 ? 0.0 : std::floor(np_log2(a.bench, abs_b));
    eb = std::max(eb, min_eb);
    // np.exp2(-eb + exponent_num) in eb's dtype (the bench's): a float32 2^133 is inf.
    const double scale = np_round(t, np_round(a.bench, std::exp2(np_round(a.bench, -eb + exponent_num))));
    const double diff = np_round(t, np_round(diff_type, np_round(t, a.d[i]) - a.b[i]));
    ulp[i] = std::fabs(np_round(t, diff * scale));
  }
  return ulp;
}

double small_value_bound(std::string_view dtype, std::string_view standard) {
  if (standard == "accumulative_error_compare") return 1;  // _special_samll_value
  return by_dtype(dtype, 0x1p-10, 0x1p-10, 0x1p-20);
}

double small_value_atol(std::string_view dtype, std::string_view standard) {
  if (standard == "absolute_threshold") return by_dtype(dtype, 0x1p-16, 1e-16, 0x1p-30);
  return by_dtype(dtype, 1e-16, 1e-16, 0x1p-30);  // _benchmark_small_value_atol, also the default
}

double rtol_of(std::string_view dtype) { return by_dtype(dtype, 0x1p-10, 0x1p-8, 0x1p-20); }
double accumulative_error_bound(std::string_view dtype) { return by_dtype(dtype, 0x1p-8, 0x1p-7, 0x1p-11); }
double minimum_err(std::string_view dtype) { return by_dtype(dtype, 0x1p-11, 0x1p-8, 0x1p-14); }
double accumulative_error_eb_threshold(std::string_view dtype) { return by_dtype(dtype, 0x1p-20, 0x1p-7, 0x1p-14); }

benchmark_metrics benchmark_metrics_of(const float_view &a) {
  // abs_err_of, abs_bench_with_eps_of, masks_of, get_rel_err and error_balance_of per element;
  // get_rmse's squares and get_mean_rel_err's kept errors summed as numpy sums their arrays.
  const double small_value = small_value_bound(a.device_dtype, "benchmark");
  const double atol = small_value_atol(a.device_dtype, "benchmark");
  const np_float p = promoted(a), rel_type = np_promote(p, a.bench);
  const double eps = bench_eps(a);
  size_t small = 0, small_greater = 0, excluded = 0;
  int64_t larger = 0, smaller = 0;
  running_mean squares(p), kept(rel_type);
  running_max max_rel;
  for (size_t i = 0; i < a.b.size(); ++i) {
    const double b = a.b[i], d = a.d[i];
    const double abs_err = abs_err_at(p, b, d);
    const double b_device = np_round(a.device, b);
    const bool finite = std::isfinite(d) && std::isfinite(b_device);
    const bool is_small = finite && std::fabs(b) <= small_value;
    const bool is_excluded = is_small || !finite;
    small += is_small ? 1 : 0;
    small_greater += is_small && abs_err > atol ? 1 : 0;
    excluded += is_excluded ? 1 : 0;
    const double x = is_excluded ? 0.0 : abs_err;
    squares.add(np_round(p, x * x));
    const double rel = is_excluded ? -1.0 : np_round(rel_type, abs_err / abs_bench_eps_at(a.bench, eps, b));
    max_rel.add(rel);
    if (rel >= 0) kept.add(rel);
    const double diff = np_round(a.device, d - b_device);
    larger += diff > 0 ? 1 : 0;
    smaller += diff < 0 ? 1 : 0;
  }
  const double n = static_cast<double>(a.b.size());
  benchmark_metrics r;
  r.small_value_err_ratio = small == 0 ? 0.0 : static_cast<double>(small_greater) / static_cast<double>(small);
  r.rmse = std::sqrt(squares.value() * (n / (n - static_cast<double>(excluded) + 0.0001) + 0.0001));
  r.eb = a.b.empty() ? 0.0 : static_cast<double>(std::llabs(larger - smaller)) / n;
  const double m = max_rel.value();
  r.max_rel_error = m >= 0 ? m : 0.0;  // max_rel_err_of
  r.mean_rel_error = kept.count() == 0 ? 0.0 : kept.value();
  return r;
}

absolute_metrics absolute_threshold_metrics_of(const float_view &a) {
  return absolute_like(a, rtol_of(a.device_dtype), small_value_bound(a.device_dtype, "absolute_threshold"),
                       small_value_atol(a.device_dtype, "absolute_threshold"));
}

absolute_metrics accumulative_error_metrics_of(const float_view &a) {
  const double bound = accumulative_error_bound(a.device_dtype);
  absolute_metrics r = absolute_like(a, bound, small_value_bound(a.device_dtype, "accumulative_error_compare"), bound);
  r.eb = error_balance_of(a);
  return r;
}

ulp_metrics ulp_metrics_of(const float_view &a) {
  const auto ulp = ulp_err_of(a);
  const np_float t = a.device_dtype == "torch.float32" || is_fp8(a.device_dtype) ? np_float::f64 : np_float::f32;
  const double threshold = a.device_dtype == "torch.float32" ? 32 : 1;  // ULP_FLOAT32/FLOAT16_THRESHOLD
  ulp_metrics r;
  r.max_ulp_error = np_max(ulp);
  r.mean_ulp_error = np_mean(ulp, t);
  size_t over = 0;
  for (double x : ulp) over += x > threshold ? 1 : 0;
  r.ulp_error_proportion = static_cast<double>(over) / static_cast<double>(ulp.size());
  return r;
}

legacy_metrics legacy_metrics_of(const float_view &a) {
  // abs_err_of, rel_err_origin_of per element; np_max and rel_err_ratio's counts over them.
  const np_float p = promoted(a), rel_type = np_promote(p, a.bench);
  const double eps = bench_eps(a);
  running_max max_abs;
  size_t below[3] = {0, 0, 0};
  constexpr double thresholds[3] = {0.01, 0.001, 0.0001};
  for (size_t i = 0; i < a.b.size(); ++i) {
    const double abs_err = abs_err_at(p, a.b[i], a.d[i]);
    max_abs.add(abs_err);
    const double rel = np_round(rel_type, abs_err / abs_bench_eps_at(a.bench, eps, a.b[i]));
    for (size_t k = 0; k < 3; ++k) below[k] += rel < thresholds[k] ? 1 : 0;
  }
  legacy_metrics r;
  r.max_abs_err = max_abs.value();
  ratio_result *ratios[3] = {&r.hundredth, &r.thousandth, &r.ten_thousandth};
  for (size_t k = 0; k < 3; ++k) {
    if (!a.b.empty()) ratios[k]->ratio = static_cast<double>(below[k]) / static_cast<double>(a.b.size());
    ratios[k]->ok = ratios[k]->ratio > 1 - thresholds[k];
  }
  return r;
}

}  // namespace tprobe::precheck
