// precheck_standard.cpp: see precheck_standard.h. The flow of each function follows msprobe's
// Comparator (compare/compare.py) and StandardRegistry (precision_standard/standard_register.py);
// the numbers come from precheck_metrics.
#include "precheck_standard.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>

#include <fmt/format.h>

#include "errors.h"
#include "precheck_metrics.h"

namespace tprobe::precheck {
namespace {

// compare/api_precision_standard.yaml [both]: the bare API names of each list.
constexpr std::array<std::string_view, 30> absolute_threshold_apis = {
    "mul", "mul_", "__mul__", "__imul__", "__rmul__", "add", "add_", "__add__", "__iadd__", "__radd__",
    "div", "div_", "__div__", "__idiv__", "divide", "divide_", "leaky_relu", "leaky_relu_", "prelu", "reciprocal",
    "reciprocal_", "rsqrt", "rsqrt_", "square", "square_", "sub", "sub_", "rsub", "__isub__", "__sub__"};
constexpr std::array<std::string_view, 63> binary_consistency_apis = {
    "abs", "abs_", "absolute", "absolute_", "argmin", "bitwise_and", "bitwise_and_", "broadcast_to", "ceil",
    "ceil_", "equal", "fill_", "flatten", "floor", "floor_", "gather", "greater", "greater_", "greater_equal",
    "greater_equal_", "histc", "isfinite", "isnan", "less", "less_", "less_equal", "less_equal_", "logical_and",
    "logical_and_", "logical_not", "logical_not_", "logical_or", "logical_or_", "masked_fill", "masked_fill_",
    "max_pool3d", "maximum", "minimum", "neg", "neg_", "nonzero", "not_equal", "not_equal_", "one_hot", "pad",
    "relu", "reshape", "round", "round_", "select", "sign", "sign_", "sort", "tile", "topk", "transpose",
    "transpose_", "tril", "tril_", "triu", "triu_", "type_as"};
constexpr std::array<std::string_view, 17> ulp_apis = {
    "__matmul__", "addbmm", "addbmm_", "addmm", "addmm_", "baddbmm", "baddbmm_", "bilinear", "bmm",
    "chain_matmul", "hspmm", "linear", "matmul", "mm", "mv", "smm", "sspaddmm"};
constexpr std::array<std::string_view, 2> thousandth_apis = {"conv1d", "conv2d"};
constexpr std::array<std::string_view, 1> accumulative_apis = {"test_api"};

// [HEAD] config.yaml quantization_api_list.
constexpr std::array<std::string_view, 3> quantization_apis = {"npu_rms_norm_dynamic_quant", "npu_dynamic_quant",
                                                               "npu_quant_lightning_indexer"};

// BINARY_COMPARE_UNSUPPORT_LIST (compare_utils.py): the float and complex dtypes.
constexpr std::array<std::string_view, 8> binary_unsupported = {
    "torch.float16", "torch.bfloat16", "torch.float32", "torch.float8_e4m3fn", "torch.float8_e5m2",
    "torch.float64", "torch.complex64", "torch.complex128"};
// BENCHMARK_COMPARE_SUPPORT_LIST: the dtypes that get new-standard metrics in stage 1.
constexpr std::array<std::string_view, 5> new_standard_dtypes = {"torch.float16", "torch.bfloat16", "torch.float32",
                                                                 "torch.float8_e4m3fn", "torch.float8_e5m2"};

template <size_t N>
bool contains(const std::array<std::string_view, N> &list, std::string_view x) {
  return std::find(list.begin(), list.end(), x) != list.end();
}

bool is_fp8_or_hif8(std::string_view dtype) {
  return dtype == "torch.float8_e4m3fn" || dtype == "torch.float8_e5m2" || dtype.find("hifloat8") != std::string_view::npos;
}

// numpy's dtype name of a torch tensor after msprobe's `.to(float32)` for bf16 devices and `.numpy()`.
std::string numpy_name(std::string_view torch_dtype, bool device_bf16) {
  if (device_bf16 || torch_dtype == "torch.bfloat16") return "float32";
  if (is_fp8_or_hif8(torch_dtype)) return "float32";
  if (torch_dtype.substr(0, 6) == "torch.") return std::string(torch_dtype.substr(6));
  return std::string(torch_dtype);
}

enum class dtype_class { floating, boolean, integer, other };

// check_dtype_comparable's classes: Const.FLOAT_TYPE, BOOL_TYPE, INT_TYPE ([HEAD] adds int8).
dtype_class class_of(const std::string &np_name, dialect d) {
  if (np_name == "float16" || np_name == "float32" || np_name == "float64") return dtype_class::floating;
  if (np_name == "bool" || np_name == "uint8") return dtype_class::boolean;
  if (np_name == "int32" || np_name == "int64" || (np_name == "int8" && d == dialect::msprobe_head))
    return dtype_class::integer;
  return dtype_class::other;
}

// str(tuple(shape)): "()", "(4,)", "(2, 4)".
std::string shape_text(const std::vector<int64_t> &shape) {
  if (shape.size() == 1) return fmt::format("({},)", shape[0]);
  return fmt::format("({})", fmt::join(shape, ", "));
}

// str(torch.Size): "torch.Size([2, 4])".
std::string torch_size_text(const std::vector<int64_t> &shape) {
  return fmt::format("torch.Size([{}])", fmt::join(shape, ", "));
}

detail_row blank_row(std::string_view row_name) {
  detail_row r;
  r.api_name = std::string(row_name);
  r.bench_dtype.assign(1, ' ');  // (one assignment each: g++ 12 warns falsely on a chained one)
  r.device_dtype.assign(1, ' ');
  r.shape.assign(1, ' ');
  return r;
}

detail_row with(detail_row r, status s, std::string message) {
  r.verdict = s;
  r.message = std::move(message);
  return r;
}

// Step A: the dispatched standard's metrics into the row (Comparator._perform_comparison).
void new_standard_metrics(detail_row &r, std::string_view standard, const float_view &a,
                          const legacy_metrics &legacy) {
  if (standard == "benchmark") {
    const benchmark_metrics m = benchmark_metrics_of(a);
    r.small_value_err_ratio = m.small_value_err_ratio;
    r.max_rel_error = m.max_rel_error;
    r.mean_rel_error = m.mean_rel_error;
    r.rmse = m.rmse;
    r.error_balance = m.eb;
  } else if (standard == "absolute_threshold" || standard == "accumulative_error_compare") {
    const bool accumulative = standard == "accumulative_error_compare";
    const absolute_metrics m = accumulative ? accumulative_error_metrics_of(a) : absolute_threshold_metrics_of(a);
    r.inf_nan_error_ratio = m.inf_nan_error_ratio;
    r.rel_err_ratio = m.rel_err_ratio;
    r.abs_err_ratio = m.abs_err_ratio;
    if (accumulative) r.error_balance = m.eb;
  } else if (standard == "binary_consistency") {
    r.binary_error_rate = binary_error_rate(a.b, a.d);
  } else if (standard == "ulp_compare") {
    const ulp_metrics m = ulp_metrics_of(a);
    r.ulp_max = m.max_ulp_error;
    r.ulp_mean = m.mean_ulp_error;
    r.ulp_over_threshold = m.ulp_error_proportion;
  } else if (standard == "thousandth_threshold") {
    r.ratio_thousandth = legacy.thousandth.ratio;
  }
}

// Comparator._compare_float_tensor: Step A (new-standard metrics), then Step B (the legacy verdict,
// which is the Status).
detail_row judge_float(detail_row r, std::string_view bare_api, const tensor_values &bench,
                       const tensor_values &device, dialect d, bool fp8_input) {
  const std::string &dtype = device.dtype;
  const bool bf16 = dtype == "torch.bfloat16";
  // The values are read in place (float_view): outputs of tens of MB are common, a copy costs.
  float_view a;
  a.device_dtype = dtype;
  a.device = *np_float_of(dtype);
  a.bench = bf16 ? np_float::f32 : np_float_of(bench.dtype).value_or(np_float::f32);
  a.b = bench.values;
  a.d = device.values;
  std::vector<double> bench_f32;
  if (bf16) {
    bench_f32.reserve(bench.values.size());
    for (const double x : bench.values) bench_f32.push_back(np_round(np_float::f32, x));  // bench.to(float32)
    a.b = bench_f32;
  }
  const legacy_metrics legacy = legacy_metrics_of(a);

  std::string message;
  if (contains(new_standard_dtypes, dtype)) {
    const std::string_view in_dtype = fp8_input ? "torch.float8_e4m3fn" : "torch.float32";
    new_standard_metrics(r, standard_of(bare_api, dtype, in_dtype, d), a, legacy);
  } else {
    message += fmt::format("The data type {} is not supported for new precision standard.", dtype);
  }

  const cosine_result cos = cosine_sim(a.b, a.d, d == dialect::msprobe_head);
  r.cosine = cos.value;
  message += cos.message + "\n";
  if (!cos.ok)
    return with(r, status::error,
                message + "Cosine similarity is less than 0.99, consider as error, skip other check and set to SPACE.\n");

  const double max_abs = legacy.max_abs_err;
  r.max_abs_err = max_abs;
  if (max_abs < 0.001)
    return with(r, status::pass,
                message + "Max abs error is less than 0.001, consider as pass, skip other check and set to SPACE.\n");

  const bool half = dtype == "torch.float16" || bf16;
  if (half) {
    const ratio_result &hundred = legacy.hundredth;
    r.ratio_hundredth = hundred.ratio;
    if (!hundred.ok)
      return with(r, status::error,
                  message + "Relative error is greater than 0.01, consider as error, skip other check and set to SPACE.\n");
  }
  const ratio_result &thousand = legacy.thousandth;
  r.ratio_thousandth = thousand.ratio;
  if (half) {
    if (thousand.ok)
      return with(r, status::pass,
                  message + "Relative error is less than 0.001, consider as pass, skip other check and set to SPACE.\n");
    return with(r, status::warning,
                message + "Relative error is greater than 0.001, consider as warning, skip other check and set to SPACE.\n");
  }
  const ratio_result &ten_thousand = legacy.ten_thousandth;
  r.ratio_ten_thousandth = ten_thousand.ratio;
  if (dtype == "torch.float32" || dtype == "torch.float64") {
    if (!thousand.ok)
      return with(r, status::error,
                  message + "Relative error is greater than 0.001, consider as error, skip other check and set to SPACE.\n");
    if (!ten_thousand.ok)
      return with(r, status::warning,
                  message + "Relative error is greater than 0.0001, consider as warning, skip other check and set to SPACE.\n");
    message += "Relative error is less than 0.0001, consider as pass.\n";
  }
  return with(r, status::pass, message);
}

// Comparator._compare_torch_tensor.
detail_row judge_tensor(std::string_view row_name, std::string_view bare_api, const tensor_values &bench,
                        const tensor_values &device, dialect d, bool fp8_input) {
  detail_row r = blank_row(row_name);
  r.bench_dtype = bench.dtype;
  r.device_dtype = device.dtype;
  r.shape = shape_text(device.shape);
  if (bench.shape != device.shape)
    return with(r, status::error,
                fmt::format("The shape of bench{} and npu{} not equal.", torch_size_text(bench.shape),
                            torch_size_text(device.shape)));
  const bool bf16 = device.dtype == "torch.bfloat16";
  const std::string b_np = numpy_name(bench.dtype, bf16), d_np = numpy_name(device.dtype, bf16);
  const dtype_class b_class = class_of(b_np, d), d_class = class_of(d_np, d);
  if (b_class == dtype_class::other || b_class != d_class)
    return with(r, status::error,
                fmt::format("Bench out dtype is {} but npu output dtype is {}, cannot compare.", b_np, d_np));
  if (bench.values.empty())
    return with(r, d == dialect::msprobe_head ? status::skip : status::error, "There is not bench calculation result.");
  if (bench.values.size() != device.values.size())
    throw usage_error(fmt::format("{}: {} bench values but {} device values for shape {}", row_name,
                                  bench.values.size(), device.values.size(), r.shape));
  if (b_class != dtype_class::floating) {
    if (d == dialect::msprobe_head && is_quantization_api(bare_api)) {
      // _compare_quantization_tensor: max |a − b| ≤ 1.
      double max_abs = 0;
      for (size_t i = 0; i < bench.values.size(); ++i)
        max_abs = std::max(max_abs, std::fabs(device.values[i] - bench.values[i]));
      r.max_abs_err = max_abs;
      if (max_abs <= 1)
        return with(r, status::pass,
                    fmt::format("Quantization type: Max abs error is {:.2f}, less than or equal to 1, consider as pass.\n", max_abs));
      return with(r, status::error,
                  fmt::format("Quantization type: Max abs error is {:.2f}, greater than 1, consider as error.\n", max_abs));
    }
    const double rate = binary_error_rate(bench.values, device.values);
    r.binary_error_rate = rate;
    const status s = rate == 0 ? status::pass : status::error;
    if (d == dialect::msprobe_head)
      return with(r, s, fmt::format("Current {} data, only perform binary comparison.", b_np));
    return with(r, s, fmt::format("Compare algorithm is not supported for {} data. Only judged by Error Rate.\n", b_np));
  }
  return judge_float(std::move(r), bare_api, bench, device, d, fp8_input);
}

// Python's `==` on two builtins given as (type name, repr).
bool builtin_equal(const builtin_value &b, const builtin_value &n) {
  const auto numeric = [](const builtin_value &v) {
    return v.type_name == "<class 'int'>" || v.type_name == "<class 'float'>" || v.type_name == "<class 'bool'>";
  };
  if (numeric(b) && numeric(n)) {
    const auto value = [](const builtin_value &v) {
      if (v.text == "True") return 1.0;
      if (v.text == "False") return 0.0;
      return std::strtod(v.text.c_str(), nullptr);
    };
    return value(b) == value(n);  // nan != nan, 0.0 == -0.0, 1 == 1.0 == True
  }
  return b.type_name == n.type_name && b.text == n.text;
}

// isinstance(bench, type(device)): the same type, or a bool bench against an int device.
bool same_builtin_type(const builtin_value &b, const builtin_value &n) {
  return b.type_name == n.type_name || (b.type_name == "<class 'bool'>" && n.type_name == "<class 'int'>");
}

// The rows and status of one direction (Comparator._compare_core_wrapper).
status judge_direction(const std::string &prefix, std::string_view bare_api, const std::vector<output_value> &bench,
                       const std::vector<output_value> &device, dialect d, bool fp8_input,
                       std::vector<detail_row> &rows) {
  if (bench.size() > device.size()) {
    rows.push_back(with(blank_row(prefix + "0"), status::error, "bench and npu output structure is different."));
    return status::error;
  }
  bool any_error = false, any_warning = false;
  for (size_t i = 0; i < bench.size(); ++i) {
    rows.push_back(judge_output(prefix + std::to_string(i), bare_api, bench[i], device[i], d, fp8_input));
    any_error = any_error || rows.back().verdict == status::error;
    any_warning = any_warning || rows.back().verdict == status::warning;
  }
  return any_error ? status::error : any_warning ? status::warning : status::pass;
}

const tensor_values *first_tensor(const std::vector<output_value> &v) {
  return v.empty() ? nullptr : std::get_if<tensor_values>(&v.front());
}

}  // namespace

dialect dialect_parse(std::string_view text) {
  if (text == "8.3.3") return dialect::msprobe_8_3_3;
  if (text == "head" || text == "HEAD") return dialect::msprobe_head;
  throw usage_error(fmt::format("unknown msprobe version \"{}\": give 8.3.3 or head", text));
}

std::string_view status_text(status s, dialect d) {
  switch (s) {
    case status::pass: return "pass";
    case status::warning: return d == dialect::msprobe_8_3_3 ? "Warning" : "warning";
    case status::error: return "error";
    case status::skip: return "SKIP";
  }
  return "error";
}

std::string bare_api_name(std::string_view full_name) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (;;) {
    const size_t dot = full_name.find('.', start);
    parts.push_back(full_name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  if (parts.size() == 3) return std::string(parts[1]);
  if (parts.size() == 4) return fmt::format("{}.{}", parts[1], parts[2]);
  return {};
}

std::string_view standard_of(std::string_view bare_api, std::string_view out_dtype, std::string_view in_dtype,
                             dialect d) {
  if (is_fp8_or_hif8(out_dtype)) return "ulp_compare";
  if (is_fp8_or_hif8(in_dtype)) return "absolute_threshold";
  if (d == dialect::msprobe_head && (out_dtype == "torch.float16" || out_dtype == "torch.bfloat16" ||
                                     out_dtype == "torch.float32" || out_dtype == "torch.float64"))
    return "benchmark";
  if (!contains(binary_unsupported, out_dtype)) return "binary_consistency";
  if (contains(absolute_threshold_apis, bare_api)) return "absolute_threshold";
  if (contains(binary_consistency_apis, bare_api)) return "binary_consistency";
  if (contains(ulp_apis, bare_api)) return "ulp_compare";
  if (contains(thousandth_apis, bare_api)) return "thousandth_threshold";
  if (contains(accumulative_apis, bare_api)) return "accumulative_error_compare";
  return "benchmark";
}

bool is_quantization_api(std::string_view bare_api) { return contains(quantization_apis, bare_api); }

detail_row judge_output(std::string_view row_name, std::string_view bare_api, const output_value &bench,
                        const output_value &device, dialect d, bool fp8_input) {
  const bool bench_none = std::holds_alternative<std::monostate>(bench);
  if (bench.index() != device.index() ||
      (std::holds_alternative<builtin_value>(bench) &&
       !same_builtin_type(std::get<builtin_value>(bench), std::get<builtin_value>(device))))
    return with(blank_row(row_name), status::error, "bench and npu output type is different.");
  if (bench_none) return with(blank_row(row_name), status::skip, "Bench output is None, skip this test.");
  if (const auto *b = std::get_if<builtin_value>(&bench)) {
    const auto &n = std::get<builtin_value>(device);
    detail_row r = blank_row(row_name);
    r.bench_dtype = b->type_name;
    r.device_dtype = n.type_name;
    if (!builtin_equal(*b, n)) return with(r, status::error, "");
    r.binary_error_rate = 0;
    return with(r, status::pass, "");
  }
  return judge_tensor(row_name, bare_api, std::get<tensor_values>(bench), std::get<tensor_values>(device), d,
                      fp8_input);
}

status dropout_status(const tensor_values &bench, const tensor_values &device) {
  const size_t n = bench.values.size();
  if (n < 100) return status::pass;
  const auto zeros = [](const std::vector<double> &v) {
    return static_cast<double>(std::count(v.begin(), v.end(), 0.0));
  };
  return std::fabs(zeros(bench.values) - zeros(device.values)) / static_cast<double>(n) < 0.1 ? status::pass
                                                                                              : status::error;
}

api_judgement judge_api(const api_replay &replay, dialect d) {
  api_judgement j;
  j.result.api_name = replay.full_name;
  const std::string bare = bare_api_name(replay.full_name);
  std::optional<std::string> skip = replay.skip_reason;
  if (!skip && bare.empty()) skip = fmt::format("API {} not support for acc_check. SKIP.", replay.full_name);
  if (skip) {  // record_skip_info: one forward row, SKIP both ways, the message on the result row
    j.details.push_back(with(blank_row(replay.full_name + ".forward.output.0"), status::skip, *skip));
    j.result.forward = status::skip;
    j.result.backward = status::skip;
    j.result.message = *skip;
    return j;
  }
  const bool dropout = replay.full_name.find("dropout") != std::string::npos;
  const tensor_values *fb = first_tensor(replay.forward_bench), *fd = first_tensor(replay.forward_device);
  if (dropout && fb && fd) {
    j.result.forward = dropout_status(*fb, *fd);  // no details row: msprobe writes none for dropout
  } else {
    j.result.forward = judge_direction(replay.full_name + ".forward.output.", bare, replay.forward_bench,
                                       replay.forward_device, d, replay.fp8_input, j.details);
  }
  if (replay.backward_skip) {
    j.details.push_back(with(blank_row(replay.full_name + ".backward.output.0"), status::skip, *replay.backward_skip));
    j.result.backward = status::skip;
    j.result.message = *replay.backward_skip;
  } else if (replay.has_backward && !replay.backward_bench.empty() && !replay.backward_device.empty()) {
    const tensor_values *gb = first_tensor(replay.backward_bench), *gd = first_tensor(replay.backward_device);
    if (dropout && gb && gd)
      j.result.backward = dropout_status(*gb, *gd);
    else
      j.result.backward = judge_direction(replay.full_name + ".backward.output.", bare, replay.backward_bench,
                                          replay.backward_device, d, replay.fp8_input, j.details);
  }
  return j;
}

}  // namespace tprobe::precheck
