// api_precision_compare.cpp: see api_precision_compare.h. Follows analyse_csv, get_api_status and
// the record_*_result functions of msprobe's compare/api_precision_compare.py, with the
// BenchmarkPrecisionCompare and UlpPrecisionCompare classes of precision_standard/.
#include "api_precision_compare.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <map>
#include <stdexcept>

#include <fmt/format.h>

#include "errors.h"
#include "precheck_metrics.h"

namespace tprobe::precheck {
namespace {

constexpr double nan_v = std::numeric_limits<double>::quiet_NaN();
constexpr std::string_view unsupported_message = "This data type does not support benchmark compare.";
constexpr std::string_view topk_message =
    "在npu上，topk的入参sorted=False时不生效，会返回有序tensor，而cpu上会返回无序tensor。 "
    "如果topk精度不达标，请检查是否是该原因导致的。";

namespace col {
constexpr const char *api_name = "API Name";
constexpr const char *device_dtype = "DEVICE Dtype";
constexpr const char *shape = "Shape";
constexpr const char *small_value = "小值域错误占比";
constexpr const char *rmse = "均方根误差";
constexpr const char *max_rel = "相对误差最大值";
constexpr const char *mean_rel = "相对误差平均值";
constexpr const char *eb = "误差均衡性";
constexpr const char *error_rate = "二进制一致错误率";
constexpr const char *inf_nan = "inf/nan错误率";
constexpr const char *rel_err_ratio = "相对误差错误率";
constexpr const char *abs_err_ratio = "绝对误差错误率";
constexpr const char *mean_ulp = "ULP误差平均值";
constexpr const char *ulp_proportion = "ULP误差大于阈值占比";
constexpr const char *thousandth = "双千指标";
constexpr const char *message = "Message";
}  // namespace col

// API_PRECISION_COMPARE_UNSUPPORT_LIST.
bool unsupported_dtype(const std::string &dtype) {
  return dtype == "torch.float64" || dtype == "torch.complex64" || dtype == "torch.complex128";
}

bool blank(const std::string &s) {
  // str.isspace() is false for "", but pandas reads an empty cell as NaN, which is not a dtype
  // either: both count as no dtype.
  return s.find_first_not_of(" \t\r\n\f\v") == std::string::npos;
}

// A per-row failure msprobe catches in analyse_csv: the row becomes a SKIP row carrying it.
struct row_error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// One side's row, cells by column name (pandas' row[column]).
class row_view {
 public:
  row_view(const std::vector<std::string> &row, const std::map<std::string, size_t> &columns)
      : row_(row), columns_(columns) {}
  [[nodiscard]] bool has(const std::string &column) const { return columns_.count(column) != 0; }
  [[nodiscard]] std::string operator[](const std::string &column) const {
    const auto it = columns_.find(column);
    if (it == columns_.end()) throw row_error(fmt::format("'{}'", column));
    return it->second < row_.size() ? row_[it->second] : std::string();
  }

 private:
  const std::vector<std::string> &row_;
  const std::map<std::string, size_t> &columns_;
};

// convert_str_to_float; `blank_is_zero` is [HEAD]'s BasePrecisionCompare._get_and_convert_value.
double cell_value(const row_view &row, const std::string &column, bool blank_is_zero = false) {
  const std::string cell = row[column];
  if (cell.empty()) return nan_v;  // pandas reads an empty cell as NaN
  std::optional<double> v;
  try {
    v = parse_float_cell(cell);
  } catch (const usage_error &) {
    throw row_error("ERROR: Input data cannot be converted to float");
  }
  if (!v) {
    if (blank_is_zero) return 0.0;
    throw row_error("ERROR: Input data is an empty string");
  }
  return *v;
}

bool inf_or_nan(double x) { return std::isnan(x) || std::isinf(x); }

// check_inf_or_nan (compare_utils.py): the ratio is NaN; consistent iff both are the same inf or
// both NaN.
struct ratio_value {
  double ratio = nan_v;
  bool consistent = true;
  std::string message;
};
ratio_value inf_nan_ratio(double x, double y, const std::string &column) {
  ratio_value r;
  const bool same = (std::isinf(x) || std::isinf(y)) ? (std::isinf(x) && std::isinf(y) && x == y)
                                                     : (std::isnan(x) && std::isnan(y));
  r.consistent = same;
  r.message = column + (same ? "同为同号inf或nan\n" : "inf或nan不一致\n");
  return r;
}

// calc_ratio (algorithm.py).
double calc_ratio(double x, double y, const std::string &dtype) {
  return std::fabs(x) / std::max(std::fabs(y), minimum_err(dtype));
}

ratio_value ratio_of(double npu, double gpu, const std::string &column, const std::string &dtype) {
  if (inf_or_nan(npu) || inf_or_nan(gpu)) return inf_nan_ratio(npu, gpu, column);
  ratio_value r;
  r.ratio = calc_ratio(npu, gpu, dtype);
  return r;
}

// The benchmark ratio thresholds: [8.3.3] get_benchmark_threshold; [HEAD]
// get_benchmark_ratio_threshold, three levels by API for rmse, max_rel and mean_rel.
struct benchmark_thresholds {
  double small_value = 2, rmse = 2, max_rel = 10, mean_rel = 2, eb = 2;
};
benchmark_thresholds thresholds_for(const std::string &api, dialect d) {
  benchmark_thresholds t;
  if (d != dialect::msprobe_head) return t;
  static constexpr std::array<std::string_view, 5> l1 = {"embedding", "npu_fusion_attention_grad",
                                                         "npu_fusion_attention", "scatter_", "scatter_add_"};
  static constexpr std::array<std::string_view, 13> l2 = {
      "addmm", "npu_cross_entropy_loss", "npu_cross_entropy_loss_backward", "GELU", "layer_norm", "matmul", "mm",
      "index", "one_hot", "sum", "npu_rms_norm", "npu_rms_norm_backward", "nonzero"};
  if (std::find(l2.begin(), l2.end(), api) != l2.end()) {
    t.rmse = 1.2, t.max_rel = 2.0, t.mean_rel = 1.2;
  } else if (std::find(l1.begin(), l1.end(), api) != l1.end()) {
    t.rmse = 1.5, t.max_rel = 5.0, t.mean_rel = 1.5;
  }
  return t;
}

std::string metric_status(const ratio_value &r, double threshold) {
  if (!r.consistent) return "error";
  if (inf_or_nan(r.ratio)) return "pass";
  return r.ratio > threshold ? "error" : "pass";
}

// record_benchmark_compare_result.
std::string benchmark_result(const row_view &npu, const row_view &gpu, const std::string &api, dialect d,
                             precision_detail &c) {
  const std::string dtype = npu[col::device_dtype];
  const bool zero_blank = d == dialect::msprobe_head;
  const auto ratio = [&](const char *column) {
    const double n = cell_value(npu, column, zero_blank);
    const double g = cell_value(gpu, column, zero_blank);
    return ratio_of(n, g, column, dtype);
  };
  const ratio_value sv = ratio(col::small_value), rmse = ratio(col::rmse), max_rel = ratio(col::max_rel),
                    mean_rel = ratio(col::mean_rel), eb = ratio(col::eb);
  const benchmark_thresholds t = thresholds_for(api, d);
  c.small_value_err_ratio = sv.ratio;
  c.rmse_ratio = rmse.ratio;
  c.max_rel_err_ratio = max_rel.ratio;
  c.mean_rel_err_ratio = mean_rel.ratio;
  c.eb_ratio = eb.ratio;
  c.small_value_err_status = metric_status(sv, t.small_value);
  c.rmse_status = metric_status(rmse, t.rmse);
  c.max_rel_err_status = metric_status(max_rel, t.max_rel);
  c.mean_rel_err_status = metric_status(mean_rel, t.mean_rel);
  c.eb_status = metric_status(eb, t.eb);  // shown, never counted
  const std::array<const std::string *, 4> counted = {&c.small_value_err_status, &c.rmse_status,
                                                      &c.max_rel_err_status, &c.mean_rel_err_status};
  const bool error = std::any_of(counted.begin(), counted.end(), [](const std::string *s) { return *s == "error"; });
  c.compare_result = error ? "error" : "pass";
  c.compare_algorithm = "标杆比对法";
  c.compare_message = sv.message + rmse.message + max_rel.message + mean_rel.message + eb.message;
  if (c.small_value_err_status == "error") c.compare_message += "ERROR: 小值域错误比值超过阈值\n";
  if (c.rmse_status == "error") c.compare_message += "ERROR: 均方根误差比值超过阈值\n";
  if (c.max_rel_err_status == "error") c.compare_message += "ERROR: 相对误差最大值比值超过阈值\n";
  if (c.mean_rel_err_status == "error") c.compare_message += "ERROR: 相对误差平均值比值超过阈值\n";
  return c.compare_result;
}

bool is_fp8_dtype(const std::string &dtype) {
  return dtype == "torch.float8_e4m3fn" || dtype == "torch.float8_e5m2" || dtype.find("hifloat8") != std::string::npos;
}

// record_ulp_compare_result (UlpPrecisionCompare).
std::string ulp_result(const row_view &npu, const row_view &gpu, dialect d, precision_detail &c) {
  const std::string dtype = npu[col::device_dtype];
  const bool zero_blank = d == dialect::msprobe_head;
  bool consistent = true;
  std::string message;
  double npu_proportion = 0, mean_ulp = nan_v;
  std::optional<double> proportion_ratio;
  if (is_fp8_dtype(dtype)) {
    npu_proportion = cell_value(npu, col::ulp_proportion, zero_blank);
  } else {
    const double n_mean = cell_value(npu, col::mean_ulp, zero_blank), g_mean = cell_value(gpu, col::mean_ulp, zero_blank);
    mean_ulp = n_mean;
    c.mean_ulp_err = n_mean;
    if (inf_or_nan(n_mean) || inf_or_nan(g_mean)) {
      const ratio_value r = inf_nan_ratio(n_mean, g_mean, col::mean_ulp);
      consistent = r.consistent;
      message += r.message;
    }
    npu_proportion = cell_value(npu, col::ulp_proportion, zero_blank);
    const double g_proportion = cell_value(gpu, col::ulp_proportion, zero_blank);
    const ratio_value r = ratio_of(npu_proportion, g_proportion, col::ulp_proportion, dtype);
    consistent = consistent && r.consistent;
    message += r.message;
    proportion_ratio = r.ratio;
    c.ulp_err_proportion_ratio = r.ratio;
  }
  c.ulp_err_proportion = npu_proportion;
  c.compare_algorithm = "ULP误差比对法";
  if (!consistent) {  // msprobe leaves the ULP status cell blank here
    c.compare_result = "error";
    c.compare_message = message + "ERROR: ULP误差不满足标准\n";
    return c.compare_result;
  }
  const double ratio = proportion_ratio.value_or(nan_v);
  bool pass = false;
  if (is_fp8_dtype(dtype))
    pass = npu_proportion < 0.001;
  else if (dtype == "torch.float32")
    pass = mean_ulp < 64 || npu_proportion < 0.05 || ratio < 1;
  else
    pass = npu_proportion < 0.001 || ratio < 1;
  c.ulp_err_status = c.compare_result = pass ? "pass" : "error";
  c.compare_message = message + (pass ? "" : "ERROR: ULP误差不满足标准\n");
  return c.compare_result;
}

// get_absolute_threshold_result: all three on the NPU value only.
struct absolute_result {
  double inf_nan, rel, abs;
  bool pass;
};
absolute_result absolute_of(const row_view &npu) {
  absolute_result r{cell_value(npu, col::inf_nan), cell_value(npu, col::rel_err_ratio),
                    cell_value(npu, col::abs_err_ratio), false};
  r.pass = r.inf_nan == 0 && r.rel == 0 && r.abs == 0;
  return r;
}

void fill_absolute(const absolute_result &a, precision_detail &c) {
  c.inf_nan_error_ratio = a.inf_nan;
  c.inf_nan_error_ratio_status = a.inf_nan == 0 ? "pass" : "error";
  c.rel_err_ratio = a.rel;
  c.rel_err_ratio_status = a.rel == 0 ? "pass" : "error";
  c.abs_err_ratio = a.abs;
  c.abs_err_ratio_status = a.abs == 0 ? "pass" : "error";
}

std::string absolute_threshold_result(const row_view &npu, precision_detail &c) {
  const absolute_result a = absolute_of(npu);
  fill_absolute(a, c);
  c.compare_result = a.pass ? "pass" : "error";
  c.compare_algorithm = "绝对阈值法";
  c.compare_message.clear();  // these three messages end with no newline in msprobe
  if (c.inf_nan_error_ratio_status == "error") c.compare_message += "ERROR: inf/nan错误率超过阈值";
  if (c.rel_err_ratio_status == "error") c.compare_message += "ERROR: 相对误差错误率超过阈值";
  if (c.abs_err_ratio_status == "error") c.compare_message += "ERROR: 绝对误差错误率超过阈值";
  return c.compare_result;
}

std::string accumulative_result(const row_view &npu, precision_detail &c) {
  const absolute_result a = absolute_of(npu);
  const double eb = cell_value(npu, col::eb);
  const bool eb_pass = eb <= accumulative_error_eb_threshold(npu[col::device_dtype]);
  fill_absolute(a, c);
  c.eb_ratio = eb;
  c.eb_status = eb_pass ? "pass" : "error";
  c.compare_result = a.pass && eb_pass ? "pass" : "error";
  c.compare_algorithm = "累积误差比对法";
  std::vector<std::string> parts;
  if (c.inf_nan_error_ratio_status == "error") parts.emplace_back("ERROR: inf/nan错误率超过阈值\n");
  if (c.rel_err_ratio_status == "error") parts.emplace_back("ERROR: 相对误差错误率超过阈值\n");
  if (c.abs_err_ratio_status == "error") parts.emplace_back("ERROR: 绝对误差错误率超过阈值\n");
  if (!eb_pass) parts.emplace_back("ERROR: 误差均衡性超过阈值\n");
  c.compare_message = fmt::format("{}", fmt::join(parts, "\n"));  // "\n".join, as msprobe
  return c.compare_result;
}

std::string binary_result(const row_view &npu, precision_detail &c) {
  const double rate = cell_value(npu, col::error_rate);
  c.error_rate = rate;
  c.error_rate_status = c.compare_result = rate == 0 ? "pass" : "error";
  c.compare_algorithm = "二进制一致法";
  c.compare_message = rate == 0 ? "" : "ERROR: 二进制一致错误率超过阈值\n";
  return c.compare_result;
}

std::string thousandth_result(const row_view &npu, precision_detail &c) {
  const double v = cell_value(npu, col::thousandth);
  c.rel_err_thousandth = v;
  c.rel_err_thousandth_status = c.compare_result = v >= 0.999 ? "pass" : "error";
  c.compare_algorithm = "双千指标法";
  c.compare_message = v >= 0.999 ? "" : "ERROR: 双千指标不达标\n";
  return c.compare_result;
}

// get_api_status.
std::string api_status(const row_view &npu, const row_view &gpu, const std::string &api, dialect d,
                       precision_detail &c) {
  const std::string dtype = npu[col::device_dtype];
  const bool zero_shape = npu.has(col::shape) && npu[col::shape] == "(0,)";
  if (blank(dtype) || unsupported_dtype(dtype) || zero_shape) {
    c.compare_result = "SKIP";
    c.compare_message = npu.has(col::message) ? npu[col::message] : "";
    return "SKIP";
  }
  // get_in_dtype: a filled 相对误差错误率 means an absolute-threshold row, read as fp8 input.
  const std::string in_dtype = blank(npu[col::rel_err_ratio]) ? "torch.float32" : "torch.float8_e4m3fn";
  const std::string_view standard = standard_of(api, dtype, in_dtype, d);
  if (standard == "absolute_threshold") return absolute_threshold_result(npu, c);
  if (standard == "binary_consistency") return binary_result(npu, c);
  if (standard == "ulp_compare") return ulp_result(npu, gpu, d, c);
  if (standard == "thousandth_threshold") return thousandth_result(npu, c);
  if (standard == "accumulative_error_compare") return accumulative_result(npu, c);
  return benchmark_result(npu, gpu, api, d, c);
}

// get_api_checker_result.
std::string checker_result(const std::vector<std::string> &statuses) {
  if (statuses.empty()) return " ";
  if (std::all_of(statuses.begin(), statuses.end(), [](const std::string &s) { return s == "SKIP"; })) return "SKIP";
  for (const char *s : {"error", "warning", "Warning"})
    if (std::find(statuses.begin(), statuses.end(), s) != statuses.end()) return s;
  return "pass";
}

// extract_detailed_api_segments: (bare api, full api, direction) of a 6- or 7-segment row name.
struct name_parts {
  std::string api, full, direction;
};
name_parts detailed_segments(const std::string &name) {
  std::vector<std::string> p;
  size_t start = 0;
  for (;;) {
    const size_t dot = name.find('.', start);
    p.push_back(name.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (p.size() == 6) return {p[1], p[0] + "." + p[1] + "." + p[2], p[3]};
  if (p.size() == 7) return {p[1] + "." + p[2], p[0] + "." + p[1] + "." + p[2] + "." + p[3], p[4]};
  return {};
}

std::map<std::string, size_t> column_index(const csv_table &t) {
  std::map<std::string, size_t> m;
  for (size_t i = 0; i < t.header.size(); ++i) m.emplace(t.header[i], i);  // the first of a name
  return m;
}

std::string opt_cell(const std::optional<double> &v) { return v ? format_float_cell(*v) : " "; }
std::string text_cell(const std::string &s) { return s.empty() ? " " : s; }

}  // namespace

const std::vector<std::string> &precision_required_columns() {
  static const std::vector<std::string> c = {col::api_name, col::device_dtype, col::small_value, col::rmse,
                                             col::max_rel,  col::mean_rel,     col::eb,          col::error_rate,
                                             col::inf_nan,  col::rel_err_ratio, col::abs_err_ratio, col::mean_ulp,
                                             col::ulp_proportion, col::thousandth};
  return c;
}

void check_precision_columns(const csv_table &table, const std::string &name) {
  for (const auto &c : precision_required_columns())
    if (std::find(table.header.begin(), table.header.end(), c) == table.header.end())
      throw usage_error(fmt::format("{}: missing column {} (not an accuracy_checking_details CSV?)", name, c));
}

precision_compare_result api_precision_compare(const csv_table &npu, const csv_table &gpu, dialect d) {
  precision_compare_result out;
  const auto npu_cols = column_index(npu), gpu_cols = column_index(gpu);
  // GPU rows by API Name (pandas' gpu_data[gpu_data["API Name"] == name]).
  std::map<std::string, std::vector<size_t>> gpu_rows;
  const size_t gpu_name = gpu_cols.at(col::api_name);
  for (size_t i = 0; i < gpu.rows.size(); ++i)
    gpu_rows[gpu_name < gpu.rows[i].size() ? gpu.rows[i][gpu_name] : std::string()].push_back(i);

  std::vector<std::string> forward, backward;
  std::optional<std::string> last_api;
  std::string last_dtype, last_skip_message;
  const auto emit = [&] {  // the result row of the API that just ended
    if (unsupported_dtype(last_dtype)) {
      out.results.push_back({*last_api, "SKIP", "SKIP", std::string(unsupported_message)});
    } else {
      precision_result_row r{*last_api, checker_result(forward), checker_result(backward), ""};
      if (r.forward == "error" && bare_api_name(*last_api) == "topk") r.message += topk_message;
      if (r.forward == "SKIP") r.message += last_skip_message;
      out.results.push_back(std::move(r));
      last_skip_message.clear();
    }
    forward.clear();
    backward.clear();
  };

  for (const auto &raw : npu.rows) {
    const row_view row(raw, npu_cols);
    const std::string name = row[col::api_name];
    const name_parts parts = detailed_segments(name);
    precision_detail c;
    c.api_name = name;
    if (parts.full.empty()) {
      c.compare_result = "SKIP";
      c.compare_message = fmt::format("The API name {} is invalid.", name);
      out.results.push_back({name, "SKIP", "SKIP", c.compare_message});
      out.details.push_back(std::move(c));
      continue;
    }
    const auto match = gpu_rows.find(name);
    if (match == gpu_rows.end()) {
      out.warnings.push_back(fmt::format("This API : {} does not exist in the GPU data.", name));
      continue;
    }
    if (match->second.size() > 1)
      throw usage_error(fmt::format("This API : {} has multiple records in the GPU data.", name));
    const row_view gpu_row(gpu.rows[match->second.front()], gpu_cols);
    std::string status;
    try {
      status = api_status(row, gpu_row, parts.api, d, c);
    } catch (const row_error &e) {
      precision_detail skip;
      skip.api_name = name;
      skip.compare_result = "SKIP";
      skip.compare_message = e.what();
      out.results.push_back({name, "SKIP", "SKIP", e.what()});
      out.details.push_back(std::move(skip));
      continue;
    }
    out.details.push_back(std::move(c));

    if (last_api && parts.full != *last_api) emit();
    const std::string dtype = row[col::device_dtype];
    last_api = parts.full;
    last_dtype = dtype;
    if (unsupported_dtype(dtype)) continue;
    if (parts.direction == "forward") {
      forward.push_back(status);
      last_skip_message = status == "SKIP" && npu_cols.count(col::message) ? row[col::message] : "";
    } else if (parts.direction == "backward") {
      backward.push_back(status);
    } else {
      out.warnings.push_back(fmt::format("Invalid direction status: {}", parts.direction));
    }
  }
  if (last_api) emit();
  return out;
}

const std::vector<std::string> &precision_detail_header() {
  static const std::vector<std::string> h = {
      "API Name", "小值域错误比值", "小值域判定结果", "均方根误差比值", "均方根误差判定结果", "相对误差最大值比值",
      "相对误差最大值判定结果", "相对误差平均值比值", "相对误差平均值判定结果", "误差均衡性比值", "误差均衡性判定结果",
      "inf/nan错误率", "inf/nan判定结果", "相对误差错误率", "相对误差判定结果", "绝对误差错误率", "绝对误差判定结果",
      "二进制一致错误率", "二进制一致错误率判定结果", "ULP误差平均值", "ULP误差大于阈值占比",
      "ULP误差大于阈值占比比值", "ULP误差判定结果", "双千指标", "双千指标判定结果", "比对结果", "比对算法", "Message"};
  return h;
}

const std::vector<std::string> &precision_result_header() {
  static const std::vector<std::string> h = {"API Name", "Forward Test Success", "Backward Test Success", "Message"};
  return h;
}

std::vector<std::string> precision_detail_cells(const precision_detail &r) {
  return {r.api_name,
          opt_cell(r.small_value_err_ratio),
          text_cell(r.small_value_err_status),
          opt_cell(r.rmse_ratio),
          text_cell(r.rmse_status),
          opt_cell(r.max_rel_err_ratio),
          text_cell(r.max_rel_err_status),
          opt_cell(r.mean_rel_err_ratio),
          text_cell(r.mean_rel_err_status),
          opt_cell(r.eb_ratio),
          text_cell(r.eb_status),
          opt_cell(r.inf_nan_error_ratio),
          text_cell(r.inf_nan_error_ratio_status),
          opt_cell(r.rel_err_ratio),
          text_cell(r.rel_err_ratio_status),
          opt_cell(r.abs_err_ratio),
          text_cell(r.abs_err_ratio_status),
          opt_cell(r.error_rate),
          text_cell(r.error_rate_status),
          opt_cell(r.mean_ulp_err),
          opt_cell(r.ulp_err_proportion),
          opt_cell(r.ulp_err_proportion_ratio),
          text_cell(r.ulp_err_status),
          opt_cell(r.rel_err_thousandth),
          text_cell(r.rel_err_thousandth_status),
          text_cell(r.compare_result),
          text_cell(r.compare_algorithm),
          r.compare_message};
}

std::vector<std::string> precision_result_cells(const precision_result_row &r) {
  return {r.api_name, text_cell(r.forward), text_cell(r.backward), r.message};
}

precision_compare_paths write_precision_compare(const precision_compare_result &r,
                                                const std::filesystem::path &out_dir, const std::string &ts) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw system_error(fmt::format("unable to create {}: {}", out_dir.string(), ec.message()));
  precision_compare_paths p{out_dir / ("api_precision_compare_result_" + ts + ".csv"),
                            out_dir / ("api_precision_compare_details_" + ts + ".csv")};
  for (const auto &path : {p.result, p.details}) {
    std::filesystem::remove(path, ec);
    if (ec) throw system_error(fmt::format("unable to replace {}: {}", path.string(), ec.message()));
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto &row : r.results) rows.push_back(precision_result_cells(row));
  csv_append(p.result, precision_result_header(), rows);
  rows.clear();
  for (const auto &row : r.details) rows.push_back(precision_detail_cells(row));
  csv_append(p.details, precision_detail_header(), rows);
  return p;
}

}  // namespace tprobe::precheck
