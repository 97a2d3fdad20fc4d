#include "compare_metrics.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "compare_kernel.h"
#include "pyjson.h"

namespace tprobe {

namespace {

constexpr double float_epsilon = DBL_EPSILON;  // np.finfo(float).eps
constexpr double quiet_nan = std::numeric_limits<double>::quiet_NaN();

const char *const msg_empty = "This is empty data, can not compare.";
const char *const msg_zero_dim =
    "This is type of 0-d tensor, can not calculate 'Cosine', 'EucDist', 'One Thousandth Err Ratio' and "
    "'Five Thousandths Err Ratio'. ";
const char *const msg_shape = "Shape of NPU and bench tensor do not match. Skipped.";
const char *const msg_inf_nan = "The position of inf or nan in NPU and bench Tensor do not match.";
const char *const msg_dtype = "Dtype of NPU and bench tensor do not match.";
const char *const msg_length_one = "This is a 1-d tensor of length 1.";
const char *const msg_cos_zero_npu = "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data.";
const char *const msg_cos_zero_bench = "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data.";
const char *const msg_cos_nan = "Cannot compare by Cosine Similarity, the dump data has NaN.";
const char *const msg_max_abs_nan = "Cannot compare by MaxAbsError, the data contains nan/inf/-inf in dump data.";
const char *const msg_max_rel_nan =
    "Cannot compare by MaxRelativeError, the data contains nan/inf/-inf in dump data.";

cell text(const char *s) { return cell::of_text(s); }

real_data_result all_metrics(const cell &value, std::string message) {
  real_data_result r;
  r.metrics.fill(value);
  r.err_message = std::move(message);
  r.accuracy = check_accuracy(r.metrics[METRIC_COSINE], r.metrics[METRIC_MAX_ABS_ERR]);
  return r;
}

// The dtype msprobe sees after loading: bf16 tensors are converted to float32.
dtype loaded_dtype(dtype t) { return t == dtype::bfloat16 ? dtype::float32 : t; }

bool same_shape(const tensor_operand &a, const tensor_operand &b) { return a.shape == b.shape; }

template <typename T>
T load_as(const std::byte *p) {
  T v;
  std::memcpy(&v, p, sizeof v);
  return v;
}

// The element as a double (complex: the real part, as astype(float) does).
double element_double(const tensor_operand &t, size_t i) {
  const std::byte *p = t.data.data() + i * dtype_size(t.type);
  switch (t.type) {
    case dtype::float64: return load_as<double>(p);
    case dtype::float32: return load_as<float>(p);
    case dtype::float16: return float16_to_float(load_as<uint16_t>(p));
    case dtype::bfloat16: return bfloat16_to_float(load_as<uint16_t>(p));
    case dtype::int8: return load_as<int8_t>(p);
    case dtype::int16: return load_as<int16_t>(p);
    case dtype::int32: return load_as<int32_t>(p);
    case dtype::int64: return static_cast<double>(load_as<int64_t>(p));
    case dtype::uint8: return load_as<uint8_t>(p);
    case dtype::boolean: return load_as<uint8_t>(p) != 0 ? 1.0 : 0.0;
    case dtype::complex64: return load_as<float>(p);
    case dtype::complex128: return load_as<double>(p);
  }
  return quiet_nan;
}

bool is_integer_dtype(dtype t) {
  return t == dtype::int8 || t == dtype::int16 || t == dtype::int32 || t == dtype::int64 || t == dtype::uint8;
}

int64_t element_int(const tensor_operand &t) {
  const std::byte *p = t.data.data();
  switch (t.type) {
    case dtype::int8: return load_as<int8_t>(p);
    case dtype::int16: return load_as<int16_t>(p);
    case dtype::int32: return load_as<int32_t>(p);
    case dtype::int64: return load_as<int64_t>(p);
    case dtype::uint8: return load_as<uint8_t>(p);
    default: return 0;
  }
}

// |n - b| of two 0-d tensors as NumPy computes it: in the integer type (wrapping) for two integers
// of one type, in the promoted float type otherwise (bool is cast to float64 first).
double zero_dim_abs_diff(const tensor_operand &npu, const tensor_operand &bench) {
  if (npu.type == bench.type && is_integer_dtype(npu.type)) {
    const int64_t a = element_int(npu), b = element_int(bench);
    const auto wrapped = static_cast<int64_t>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
    switch (npu.type) {
      case dtype::int8: {
        const auto d = static_cast<int8_t>(wrapped);
        return static_cast<int8_t>(d < 0 ? -d : d);
      }
      case dtype::int16: {
        const auto d = static_cast<int16_t>(wrapped);
        return static_cast<int16_t>(d < 0 ? -d : d);
      }
      case dtype::int32: {
        const auto d = static_cast<int32_t>(wrapped);
        return static_cast<int32_t>(d < 0 ? static_cast<int32_t>(0u - static_cast<uint32_t>(d)) : d);
      }
      case dtype::uint8: return static_cast<uint8_t>(wrapped);
      default: {
        const int64_t d = wrapped;
        return static_cast<double>(d < 0 ? static_cast<int64_t>(0ull - static_cast<uint64_t>(d)) : d);
      }
    }
  }
  const kernel_precision pn = kernel_precision_of(npu.type), pb = kernel_precision_of(bench.type);
  const double n = element_double(npu, 0), b = element_double(bench, 0);
  if (pn == kernel_precision::other || pb == kernel_precision::other) return std::fabs(n - b);
  const kernel_precision pt = std::max(pn, pb);
  if (pt == kernel_precision::f16) return std::fabs(round_half(static_cast<float>(n) - static_cast<float>(b)));
  if (pt == kernel_precision::f32) return std::fabs(static_cast<float>(n) - static_cast<float>(b));
  return std::fabs(n - b);
}

cell metric_or_nan(double v, const char *nan_message, std::string &message) {
  if (std::isnan(v)) {
    message += nan_message;
    return text("Nan");
  }
  return cell::of_real(format_value(v));
}

real_data_result zero_dim_compare(const tensor_operand &npu, const tensor_operand &bench, std::string message) {
  real_data_result r;
  const cell unsupported = text("unsupported");
  r.metrics[METRIC_COSINE] = unsupported;
  r.metrics[METRIC_EUC_DIST] = unsupported;
  r.metrics[METRIC_ONE_THOUSANDTH] = unsupported;
  r.metrics[METRIC_FIVE_THOUSANDTHS] = unsupported;
  const double max_abs = zero_dim_abs_diff(npu, bench);
  const double rel = relative_error_scalar(kernel_precision_of(npu.type), kernel_precision_of(bench.type),
                                           element_double(npu, 0), element_double(bench, 0));
  r.metrics[METRIC_MAX_ABS_ERR] = metric_or_nan(max_abs, msg_max_abs_nan, message);
  r.metrics[METRIC_MAX_RELATIVE_ERR] = metric_or_nan(rel, msg_max_rel_nan, message);
  r.err_message = std::move(message);
  r.accuracy = check_accuracy(r.metrics[METRIC_COSINE], r.metrics[METRIC_MAX_ABS_ERR]);
  return r;
}

}  // namespace

size_t tensor_operand::element_count() const {
  size_t n = 1;
  for (const int64_t d : shape) n *= static_cast<size_t>(std::max<int64_t>(d, 0));
  return n;
}

real_data_result real_data_unavailable(real_data_missing why, const std::string &detail) {
  const auto message = [&]() -> std::string {
    switch (why) {
      case real_data_missing::npu_no_file: return "NPU does not have data file.";
      case real_data_missing::bench_no_file: return "Bench does not have data file.";
      case real_data_missing::bench_unmatched: return "Bench api/module unmatched.";
      case real_data_missing::read_failed: return "Dump file: " + detail + " not found or read failed.";
      case real_data_missing::unreadable: return "Data is unreadable.";
    }
    return {};
  };
  real_data_result r = all_metrics(text("unsupported"), message());
  r.error = why == real_data_missing::read_failed || why == real_data_missing::unreadable;
  return r;
}

real_data_result real_data_read_error(const tensor_read_error &e) {
  real_data_result r =
      real_data_unavailable(e.read ? real_data_missing::unreadable : real_data_missing::read_failed, e.path);
  // One line, so the table cell and the advisor stay one line whatever the reason says.
  std::string reason = e.reason;
  std::replace_if(reason.begin(), reason.end(), [](char c) { return c == '\n' || c == '\r'; }, ' ');
  while (!reason.empty() && reason.back() == '.') reason.pop_back();
  r.err_message += e.read ? fmt::format(" Cannot read {} tensor {}: {}.", e.side, e.path, reason)
                           : fmt::format(" Cannot read {} tensor: {}.", e.side, reason);
  return r;
}

real_data_result compare_real_data(const tensor_operand &npu, const tensor_operand &bench) {
  const size_t count = npu.element_count();
  if (count == 0) return all_metrics(text("unsupported"), msg_empty);
  if (npu.shape.empty()) {
    // msprobe returns before its shape check here; a 0-d NPU tensor against a bench tensor of another
    // shape would make NumPy raise, so that case is reported as a shape mismatch instead.
    if (!bench.shape.empty()) return all_metrics(text("shape unmatched"), msg_shape);
    return zero_dim_compare(npu, bench, msg_zero_dim);
  }
  if (!same_shape(npu, bench)) return all_metrics(text("shape unmatched"), msg_shape);

  const kernel_sums s = compare_kernel_run(npu.type, npu.data.data(), bench.type, bench.data.data(), count);
  if (s.nonfinite_mismatch) return all_metrics(text("N/A"), msg_inf_nan);

  std::string message;
  if (loaded_dtype(npu.type) != loaded_dtype(bench.type)) message += msg_dtype;

  real_data_result r;
  // Cosine
  if (count == 1) {
    r.metrics[METRIC_COSINE] = text("unsupported");
    message += msg_length_one;
  } else {
    const double a_norm = std::sqrt(s.npu_sumsq), b_norm = std::sqrt(s.bench_sumsq);
    if (a_norm <= float_epsilon && b_norm <= float_epsilon) {
      r.metrics[METRIC_COSINE] = cell::of_real(1.0);
    } else if (a_norm <= float_epsilon) {
      r.metrics[METRIC_COSINE] = text("Nan");
      message += msg_cos_zero_npu;
    } else if (b_norm <= float_epsilon) {
      r.metrics[METRIC_COSINE] = text("Nan");
      message += msg_cos_zero_bench;
    } else {
      const double cos = s.dot / (a_norm * b_norm);
      if (std::isnan(cos)) {
        r.metrics[METRIC_COSINE] = text("Nan");
        message += msg_cos_nan;
      } else {
        double v = format_value(cos);
        if (v > 0.9999) v = py_round(v, 6);
        r.metrics[METRIC_COSINE] = cell::of_real(v);
      }
    }
  }
  r.metrics[METRIC_EUC_DIST] = cell::of_real(std::sqrt(s.diff_sumsq));
  r.metrics[METRIC_MAX_ABS_ERR] = metric_or_nan(s.max_abs_nan ? quiet_nan : s.max_abs, msg_max_abs_nan, message);
  r.metrics[METRIC_MAX_RELATIVE_ERR] = metric_or_nan(s.rel_nan ? quiet_nan : s.max_rel, msg_max_rel_nan, message);
  const auto total = static_cast<double>(count);
  r.metrics[METRIC_ONE_THOUSANDTH] = cell::of_real(format_value(static_cast<double>(s.below_thousandth) / total));
  r.metrics[METRIC_FIVE_THOUSANDTHS] =
      cell::of_real(format_value(static_cast<double>(s.below_five_thousandths) / total));
  r.err_message = std::move(message);
  r.accuracy = check_accuracy(r.metrics[METRIC_COSINE], r.metrics[METRIC_MAX_ABS_ERR]);
  return r;
}

std::string check_accuracy(const cell &cosine, const cell &max_abs_err) {
  if (cosine.is_text("shape unmatched")) return "Unmatched";
  if (cosine.is_text("None") || max_abs_err.is_text("None")) return "None";
  if (cosine.is_text("N/A") || max_abs_err.is_text("N/A")) return "No";
  // Python float(): a number, or text such as 'Nan' (→ nan); anything else raises → "None".
  const auto as_float = [](const cell &c) -> std::optional<double> {
    if (c.is_number()) return c.number();
    if (c.k == cell::kind::boolean) return c.boolean ? 1.0 : 0.0;
    if (c.k == cell::kind::text) return py_float_parse(c.text);
    return std::nullopt;
  };
  const auto cos = as_float(cosine), err = as_float(max_abs_err);
  if (!cos || !err) return "None";
  if (*cos < 0.99 && *err > 0.001) return "No";
  if (*cos < 0.9 || *err > 1) return "No";
  return "Yes";
}

namespace {

bool is_nan_text(std::string_view s) {
  if (s.size() != 3) return false;
  return (s[0] == 'n' || s[0] == 'N') && (s[1] == 'a' || s[1] == 'A') && (s[2] == 'n' || s[2] == 'N');
}

}  // namespace

cell statistic_cell(const nlohmann::ordered_json &value) {
  using t = nlohmann::ordered_json::value_t;
  switch (value.type()) {
    case t::number_integer: return cell::of_int(value.get<int64_t>());
    case t::number_unsigned: {
      const auto u = value.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return cell::of_int(static_cast<int64_t>(u));
      return cell::of_real(static_cast<double>(u));
    }
    case t::number_float: {
      const double d = value.get<double>();
      return std::isnan(d) ? cell::of_text("Nan") : cell::of_real(d);
    }
    case t::boolean: return cell::of_text(value.get<bool>() ? "True" : "False");
    case t::null: return cell::of_text("None");
    case t::string: {
      const auto &s = value.get_ref<const std::string &>();
      return is_nan_text(s) ? cell::of_text("Nan") : cell::of_text(s);
    }
    default: return cell::of_text(py_str(value));
  }
}

cell statistic_cell(const stat_value &value) {
  switch (value.k) {
    case stat_value::kind::null: return cell::of_text("None");
    case stat_value::kind::boolean: return cell::of_text(value.boolean ? "True" : "False");
    case stat_value::kind::integer: return cell::of_int(value.integer);
    case stat_value::kind::real: return std::isnan(value.real) ? cell::of_text("Nan") : cell::of_real(value.real);
  }
  return cell::of_text("None");
}

summary_result compare_summary(const std::array<cell, 4> &npu, const std::array<cell, 4> &bench) {
  // msprobe's CalcStatsDiff.calc_summary_diff: a statistic takes part when both sides are numbers
  // (pandas.to_numeric of their text) or the text 'nan'.
  const auto usable = [](const cell &c) {
    return !std::isnan(cell_to_numeric(c)) || (c.k == cell::kind::text && is_nan_text(c.text));
  };
  summary_result r;
  for (size_t i = 0; i < 4; ++i) {
    if (!usable(npu[i]) || !usable(bench[i])) {
      r.diff[i] = r.relative_err[i] = cell::of_text("N/A");
      continue;
    }
    const double n = cell_to_numeric(npu[i]), b = cell_to_numeric(bench[i]);
    const double diff = n - b;
    if (std::isnan(diff)) {
      r.diff[i] = r.relative_err[i] = cell::of_text("Nan");
      continue;
    }
    r.diff[i] = cell::of_real(diff);
    if (b == 0)
      r.relative_err[i] = cell::of_text("N/A");
    else
      r.relative_err[i] = cell::of_text(py_float_repr(std::fabs(diff / b * 100)) + "%");
    // np.maximum propagates NaN, and a NaN comparison is false: no warning then.
    const double larger = std::isnan(n) || std::isnan(b) ? quiet_nan : std::max(n, b);
    if (std::fabs(diff) / (std::fabs(larger) + 1e-10) > 0.5) r.warning = true;
  }
  return r;
}

std::string compare_md5(const std::string &npu, const std::string &bench) { return npu == bench ? "pass" : "Different"; }

}  // namespace tprobe
