#include "api_call.h"

#include <algorithm>
#include <array>
#include <functional>
#include <iterator>
#include <string_view>
#include <utility>
#include <vector>

namespace tprobe::precheck {

namespace {

using json = nlohmann::ordered_json;

bool is_integer_tensor(const json &arg) {
  if (!arg.is_object() || arg.value("type", "") != "torch.Tensor") return false;
  const std::string dtype = arg.value("dtype", "");
  return dtype.find("int") != std::string::npos || dtype == "torch.uint8";
}

bool is_type(const json &arg, std::string_view type) {
  return arg.is_object() && arg.value("type", "") == type;
}

bool truthy(const json &arg) {
  return arg.is_object() && arg.contains("value") && arg["value"].is_boolean() && arg["value"].get<bool>();
}

// Python arguments bound to their parameter names: positionals in order, then keywords.
json bind_python(const json &forward, const std::vector<std::string_view> &params) {
  json bound = json::object();
  const json &args = forward.contains("input_args") ? forward["input_args"] : json::array();
  for (size_t i = 0; i < args.size() && i < params.size(); ++i) bound[std::string(params[i])] = args[i];
  if (forward.contains("input_kwargs") && forward["input_kwargs"].is_object())
    for (const auto &[key, value] : forward["input_kwargs"].items()) bound[key == "self" ? "input" : key] = value;
  return bound;
}

std::vector<std::string_view> words(std::string_view text) {
  std::vector<std::string_view> out;
  while (!text.empty()) {
    const auto space = text.find(' ');
    out.push_back(text.substr(0, space));
    if (space == std::string_view::npos) break;
    text.remove_prefix(space + 1);
  }
  return out;
}

// A Python signature rewritten as keyword arguments of an ATen operator.
struct python_form {
  std::string_view api;                        // msprobe's API name (after the prefix)
  std::function<bool(const json &)> applies;   // the forward entry is in Python's form
  std::string_view params;                     // the Python parameters, in order
  std::string_view op;                         // the operator ("aten::embedding")
  std::string_view mapping;                    // "aten_name:python_name" or "name" (same)
  std::string_view must_be_none = "";          // Python parameters the replay cannot honour
  std::string_view in_place_flag = "";         // a bool parameter that selects op + "_"
};

size_t positional_count(const json &forward) {
  return forward.contains("input_args") && forward["input_args"].is_array() ? forward["input_args"].size() : 0;
}

bool has_kwarg(const json &forward, std::string_view name) {
  return forward.contains("input_kwargs") && forward["input_kwargs"].is_object() &&
         forward["input_kwargs"].contains(std::string(name));
}

const json &arg_at(const json &forward, size_t i) {
  static const json none;
  if (!forward.contains("input_args") || !forward["input_args"].is_array() || i >= forward["input_args"].size())
    return none;
  return forward["input_args"][i];
}

// The Python form is recognised by what the ATen form cannot hold: a keyword only Python has, a
// bool where the operator takes a number, more positionals than the schema has.
bool kw_any(const json &f, std::initializer_list<std::string_view> names) {
  return std::any_of(names.begin(), names.end(), [&](std::string_view n) { return has_kwarg(f, n); });
}

const std::vector<python_form> &python_forms() {
  static const std::vector<python_form> forms = {
      {"embedding", [](const json &f) { return is_integer_tensor(arg_at(f, 0)) || has_kwarg(f, "weight"); },
       "input weight padding_idx max_norm norm_type scale_grad_by_freq sparse", "aten::embedding",
       "weight indices:input padding_idx scale_grad_by_freq sparse", "max_norm"},
      {"cross_entropy", [](const json &) { return true; },
       "input target weight size_average ignore_index reduce reduction label_smoothing", "aten::cross_entropy_loss",
       "self:input target weight reduction ignore_index label_smoothing", "size_average reduce"},
      {"nll_loss", [](const json &f) { return positional_count(f) > 5 || kw_any(f, {"size_average", "reduce", "input"}) ||
                                               is_type(arg_at(f, 4), "str") || is_type(arg_at(f, 3), "NoneType"); },
       "input target weight size_average ignore_index reduce reduction", "aten::nll_loss_nd",
       "self:input target weight reduction ignore_index", "size_average reduce"},
      {"mse_loss", [](const json &f) { return positional_count(f) > 3 || kw_any(f, {"size_average", "reduce", "input"}); },
       "input target size_average reduce reduction", "aten::mse_loss", "self:input target reduction", "size_average reduce"},
      {"l1_loss", [](const json &f) { return positional_count(f) > 3 || kw_any(f, {"size_average", "reduce", "input"}); },
       "input target size_average reduce reduction", "aten::l1_loss", "self:input target reduction", "size_average reduce"},
      {"smooth_l1_loss", [](const json &f) { return positional_count(f) > 4 || kw_any(f, {"size_average", "reduce", "input"}); },
       "input target size_average reduce reduction beta", "aten::smooth_l1_loss", "self:input target reduction beta",
       "size_average reduce"},
      {"binary_cross_entropy", [](const json &f) { return positional_count(f) > 4 || kw_any(f, {"size_average", "reduce", "input"}); },
       "input target weight size_average reduce reduction", "aten::binary_cross_entropy",
       "self:input target weight reduction", "size_average reduce"},
      {"binary_cross_entropy_with_logits",
       [](const json &f) { return positional_count(f) > 5 || kw_any(f, {"size_average", "reduce", "input"}) ||
                                  is_type(arg_at(f, 3), "NoneType"); },
       "input target weight size_average reduce reduction pos_weight", "aten::binary_cross_entropy_with_logits",
       "self:input target weight pos_weight reduction", "size_average reduce"},
      {"kl_div", [](const json &f) { return positional_count(f) > 4 || kw_any(f, {"size_average", "reduce", "input"}); },
       "input target size_average reduce reduction log_target", "aten::kl_div", "self:input target reduction log_target",
       "size_average reduce"},
      {"softmax", [](const json &f) { return kw_any(f, {"_stacklevel", "input"}) || is_type(arg_at(f, 2), "int"); },
       "input dim _stacklevel dtype", "aten::softmax", "self:input dim dtype"},
      {"log_softmax", [](const json &f) { return kw_any(f, {"_stacklevel", "input"}) || is_type(arg_at(f, 2), "int"); },
       "input dim _stacklevel dtype", "aten::log_softmax", "self:input dim dtype"},
      {"dropout", [](const json &f) { return positional_count(f) > 3 || kw_any(f, {"training", "inplace"}); },
       "input p training inplace", "aten::dropout", "input p train:training", "", "inplace"},
      {"relu", [](const json &) { return true; }, "input inplace", "aten::relu", "self:input", "", "inplace"},
      {"relu6", [](const json &) { return true; }, "input inplace", "aten::hardtanh", "self:input", "", ""},
      {"silu", [](const json &) { return true; }, "input inplace", "aten::silu", "self:input", "", "inplace"},
      {"mish", [](const json &) { return true; }, "input inplace", "aten::mish", "self:input", "", "inplace"},
      {"hardswish", [](const json &) { return true; }, "input inplace", "aten::hardswish", "self:input", "", "inplace"},
      {"hardsigmoid", [](const json &) { return true; }, "input inplace", "aten::hardsigmoid", "self:input", "", "inplace"},
      {"selu", [](const json &) { return true; }, "input inplace", "aten::selu", "self:input", "", "inplace"},
      {"celu", [](const json &f) { return is_type(arg_at(f, 2), "bool") || has_kwarg(f, "inplace"); },
       "input alpha inplace", "aten::celu", "self:input alpha", "", "inplace"},
      {"elu", [](const json &f) { return is_type(arg_at(f, 2), "bool") || has_kwarg(f, "inplace"); },
       "input alpha inplace", "aten::elu", "self:input alpha", "", "inplace"},
      {"leaky_relu", [](const json &f) { return is_type(arg_at(f, 2), "bool") || kw_any(f, {"inplace", "input"}); },
       "input negative_slope inplace", "aten::leaky_relu", "self:input negative_slope", "", "inplace"},
      {"hardtanh", [](const json &f) { return is_type(arg_at(f, 3), "bool") || kw_any(f, {"inplace", "input"}); },
       "input min_val max_val inplace", "aten::hardtanh", "self:input min_val max_val", "", "inplace"},
      {"threshold", [](const json &f) { return is_type(arg_at(f, 3), "bool") || kw_any(f, {"inplace", "input"}); },
       "input threshold value inplace", "aten::threshold", "self:input threshold value", "", "inplace"},
      {"batch_norm", [](const json &f) { return positional_count(f) < 9; },
       "input running_mean running_var weight bias training momentum eps", "aten::batch_norm",
       "input weight bias running_mean running_var training momentum eps"},
      {"instance_norm", [](const json &f) { return positional_count(f) < 9; },
       "input running_mean running_var weight bias use_input_stats momentum eps", "aten::instance_norm",
       "input weight bias running_mean running_var use_input_stats momentum eps"},
      {"max_pool1d", [](const json &f) { return positional_count(f) > 6 || has_kwarg(f, "return_indices"); },
       "input kernel_size stride padding dilation ceil_mode return_indices", "aten::max_pool1d",
       "self:input kernel_size stride padding dilation ceil_mode"},
      {"max_pool2d", [](const json &f) { return positional_count(f) > 6 || has_kwarg(f, "return_indices"); },
       "input kernel_size stride padding dilation ceil_mode return_indices", "aten::max_pool2d",
       "self:input kernel_size stride padding dilation ceil_mode"},
      {"max_pool3d", [](const json &f) { return positional_count(f) > 6 || has_kwarg(f, "return_indices"); },
       "input kernel_size stride padding dilation ceil_mode return_indices", "aten::max_pool3d",
       "self:input kernel_size stride padding dilation ceil_mode"},
      {"adaptive_max_pool2d", [](const json &f) { return positional_count(f) > 2 || has_kwarg(f, "return_indices"); },
       "input output_size return_indices", "aten::adaptive_max_pool2d", "self:input output_size"},
  };
  return forms;
}

// Tensor's Python operators → the operator and whether the operands swap (a reflected operator
// receives the tensor first: x.__rsub__(y) is y - x, which aten::rsub(x, y) computes itself).
struct dunder {
  std::string_view name, op;
  bool swap = false;
};
constexpr dunder dunders[] = {
    {"__add__", "aten::add"},       {"__radd__", "aten::add"},      {"__iadd__", "aten::add_"},
    {"__sub__", "aten::sub"},       {"__rsub__", "aten::rsub"},     {"__isub__", "aten::sub_"},
    {"__mul__", "aten::mul"},       {"__rmul__", "aten::mul"},      {"__imul__", "aten::mul_"},
    {"__truediv__", "aten::div"},   {"__div__", "aten::div"},       {"__itruediv__", "aten::div_"},
    {"__idiv__", "aten::div_"},     {"__matmul__", "aten::matmul"}, {"__rmatmul__", "aten::matmul", true},
    {"__pow__", "aten::pow"},       {"__rpow__", "aten::pow", true}, {"__ipow__", "aten::pow_"},
    {"__mod__", "aten::remainder"}, {"__floordiv__", "aten::floor_divide"},
    {"__neg__", "aten::neg"},       {"__abs__", "aten::abs"},       {"__invert__", "aten::bitwise_not"},
    {"__eq__", "aten::eq"},         {"__ne__", "aten::ne"},         {"__lt__", "aten::lt"},
    {"__le__", "aten::le"},         {"__gt__", "aten::gt"},         {"__ge__", "aten::ge"},
};

// APIs never replayed, with msprobe's reason or ours.
constexpr std::string_view random_apis[] = {
    "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "normal", "normal_",
    "bernoulli", "bernoulli_", "uniform_", "multinomial", "exponential_", "geometric_", "cauchy_",
    "log_normal_", "random_", "poisson", "rrelu", "rrelu_", "rrelu_with_noise", "native_dropout",
};
// msprobe's unsupported_api_list: their values are uninitialised memory.
constexpr std::string_view uninitialised_apis[] = {
    "to", "empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_with_format",
};
// In-place operators that change a tensor's shape or storage, or write through an index into a view:
// replayed on a copy they compute nothing the dump can be compared with.
constexpr std::string_view view_writing_apis[] = {
    "__setitem__", "set_", "resize_", "resize_as_", "as_strided_", "index_put_", "_index_put_impl_",
};
// msprobe's "no backward" and "unsupported backward" lists.
constexpr std::string_view no_backward_apis[] = {"repeat_interleave", "masked_select"};

template <size_t N>
bool listed(const std::string_view (&table)[N], std::string_view name) {
  return std::find(std::begin(table), std::end(table), name) != std::end(table);
}

normalized_call rewrite(const python_form &form, const json &forward) {
  normalized_call call;
  const auto params = words(form.params);
  const json bound = bind_python(forward, params);
  for (const auto name : words(form.must_be_none)) {
    const auto it = bound.find(std::string(name));
    if (it != bound.end() && !it->is_null()) {
      call.skip = "the argument " + std::string(name) + " of " + std::string(form.api) +
                  " is not replayed (it changes state or follows a legacy path); SKIP.";
      return call;
    }
  }
  call.op = form.op;
  if (!form.in_place_flag.empty()) {
    const auto it = bound.find(std::string(form.in_place_flag));
    if (it != bound.end() && truthy(*it)) {
      call.op += "_";
      call.in_place = true;
    }
  }
  call.args = json::array();
  call.kwargs = json::object();
  for (const auto item : words(form.mapping)) {
    const auto colon = item.find(':');
    const std::string aten(item.substr(0, colon));
    const std::string python(colon == std::string_view::npos ? item : item.substr(colon + 1));
    const auto it = bound.find(python);
    if (it != bound.end() && !it->is_null()) call.kwargs[aten] = *it;
  }
  if (form.api == "relu6") {  // F.relu6 is hardtanh(x, 0, 6)
    call.kwargs["min_val"] = {{"type", "int"}, {"value", 0}};
    call.kwargs["max_val"] = {{"type", "int"}, {"value", 6}};
  }
  if (form.api == "batch_norm" || form.api == "instance_norm")  // no default in the schema
    call.kwargs["cudnn_enabled"] = {{"type", "bool"}, {"value", true}};
  return call;
}

}  // namespace

std::optional<api_name_parts> api_name_split(std::string_view full_name) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    const auto dot = full_name.find('.', start);
    parts.push_back(full_name.substr(start, dot == std::string_view::npos ? std::string_view::npos : dot - start));
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  if (parts.size() == 3) return api_name_parts{std::string(parts[0]), std::string(parts[1]), std::string(parts[2])};
  if (parts.size() == 4)
    return api_name_parts{std::string(parts[0]), std::string(parts[1]) + "." + std::string(parts[2]),
                          std::string(parts[3])};
  return std::nullopt;
}

normalized_call normalize_call(std::string_view full_name, const json &forward) {
  normalized_call call;
  const auto parts = api_name_split(full_name);
  if (!parts) {
    call.skip = "API " + std::string(full_name) + " has no Type.api.N name; SKIP.";
    return call;
  }
  const std::string &prefix = parts->prefix;
  const std::string &api = parts->api;
  if (prefix == "Distributed" || prefix == "MindSpeed") {
    call.skip = "API " + std::string(full_name) + " not support for acc_check. SKIP.";
    return call;
  }
  if (prefix != "Functional" && prefix != "Tensor" && prefix != "Torch" && prefix != "Aten") {
    // msprobe's exec_api runs these prefixes only (NPU fused operators need their bench functions).
    call.skip = prefix == "NPU" ? "NPU fused operator " + api + " has no CPU reference in tprobe; SKIP."
                                : "Bench output is None, skip this test.";
    return call;
  }
  if (listed(random_apis, api)) {
    call.skip = api + " draws random numbers; its device run cannot be reproduced on the CPU. SKIP.";
    return call;
  }
  if (listed(uninitialised_apis, api)) {
    call.skip = "API " + api + " in black list or not in white list. SKIP.";
    return call;
  }
  if (listed(view_writing_apis, api)) {
    call.skip = api + " writes into a view or a storage; a replay on copies has nothing to compare. SKIP.";
    return call;
  }
  call.no_backward = listed(no_backward_apis, api);
  call.dropout = api.find("dropout") != std::string::npos;
  const bool has_dot = api.find('.') != std::string::npos;  // Torch.linalg.inv → aten::linalg_inv
  std::string op_name = api;
  if (has_dot) std::replace(op_name.begin(), op_name.end(), '.', '_');

  if (prefix == "Tensor" && api.size() > 4 && api.starts_with("__") && api.ends_with("__")) {
    const auto *d = std::find_if(std::begin(dunders), std::end(dunders), [&](const dunder &x) { return x.name == api; });
    if (d == std::end(dunders)) {
      call.skip = "Tensor." + api + " has no ATen operator tprobe replays; SKIP.";
      return call;
    }
    call.op = d->op;
    call.in_place = call.op.ends_with("_");
    call.args = forward.value("input_args", json::array());
    call.kwargs = forward.value("input_kwargs", json::object());
    if (d->swap && call.args.size() >= 2) std::swap(call.args[0], call.args[1]);
    return call;
  }
  if (prefix == "Functional" || prefix == "Torch") {
    for (const auto &form : python_forms()) {
      if (form.api == api && form.applies(forward)) {
        auto rewritten = rewrite(form, forward);
        rewritten.no_backward = call.no_backward;
        rewritten.dropout = call.dropout;
        return rewritten;
      }
    }
  }
  call.op = "aten::" + op_name;
  call.in_place = op_name.ends_with("_") && !op_name.ends_with("__");
  call.args = forward.value("input_args", json::array());
  call.kwargs = forward.value("input_kwargs", json::object());
  if (call.kwargs.contains("input") && !call.kwargs.contains("self")) {  // Python's name of `self`
    call.kwargs["self"] = call.kwargs["input"];
    call.kwargs.erase("input");
  }
  return call;
}

}  // namespace tprobe::precheck
