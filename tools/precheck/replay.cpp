#include "replay.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <unordered_map>
#include <utility>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Dispatch.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <caffe2/serialize/inline_container.h>
#include <fmt/format.h>
#include <torch/csrc/jit/serialization/import_read.h>

#include "api_call.h"
#include "errors.h"
#include "npy.h"

namespace tprobe::precheck {

namespace {

using json = nlohmann::ordered_json;

// ---- dtypes -----------------------------------------------------------------------------------

constexpr std::pair<std::string_view, at::ScalarType> torch_dtypes[] = {
    {"torch.float16", at::kHalf},   {"torch.bfloat16", at::kBFloat16}, {"torch.float32", at::kFloat},
    {"torch.float64", at::kDouble}, {"torch.int8", at::kChar},         {"torch.int16", at::kShort},
    {"torch.int32", at::kInt},      {"torch.int64", at::kLong},        {"torch.uint8", at::kByte},
    {"torch.bool", at::kBool},      {"torch.complex64", at::kComplexFloat},
    {"torch.complex128", at::kComplexDouble}, {"torch.half", at::kHalf}, {"torch.float", at::kFloat},
    {"torch.double", at::kDouble},  {"torch.long", at::kLong},         {"torch.int", at::kInt},
};

std::optional<at::ScalarType> scalar_type_of(std::string_view name) {
  for (const auto &[text, type] : torch_dtypes)
    if (text == name) return type;
  return std::nullopt;
}

std::string dtype_text(at::ScalarType type) {
  for (const auto &[text, t] : torch_dtypes)
    if (t == type) return std::string(text);
  return "torch." + std::string(c10::toString(type));
}

bool raisable(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16 || t == at::kFloat; }

// msprobe's PRECISION_MAPPING.
at::ScalarType raised(at::ScalarType t) { return t == at::kFloat ? at::kDouble : at::kFloat; }

std::string first_line(const char *what) {
  std::string s = what;
  return s.substr(0, s.find('\n'));
}

// ---- the dumped arguments as values -----------------------------------------------------------

// One argument of the normalised call, with its tensor materialised.
struct arg_value {
  enum class kind { none, tensor, integer, real, boolean, text, list, dtype, other } k = kind::none;
  at::Tensor tensor;          // kind::tensor: CPU, the dumped dtype
  bool requires_grad = false;
  int grad_slot = -1;         // position among the forward's positional tensors (backward pairing)
  int64_t i = 0;
  double d = 0;
  bool b = false;
  std::string s;              // text, or the type name of `other`
  at::ScalarType dtype = at::kFloat;
  std::vector<arg_value> items;
};

// Draws a tensor from its statistics as msprobe's gen_random_tensor does (docs/msprobe-compat.md §7.6.1).
at::Tensor random_tensor(const json &entry, at::ScalarType type, const std::vector<int64_t> &shape, at::Generator &gen) {
  auto number = [&](const char *key) -> double {
    if (!entry.contains(key) || entry[key].is_null()) return std::numeric_limits<double>::quiet_NaN();
    const json &v = entry[key];
    if (v.is_boolean()) return v.get<bool>() ? 1 : 0;
    if (v.is_number()) return v.get<double>();
    if (v.is_string()) {  // "inf", "-inf", "nan" of older writers
      const std::string s = v.get<std::string>();
      if (s == "inf" || s == "Infinity") return std::numeric_limits<double>::infinity();
      if (s == "-inf" || s == "-Infinity") return -std::numeric_limits<double>::infinity();
      return std::numeric_limits<double>::quiet_NaN();
    }
    return std::numeric_limits<double>::quiet_NaN();
  };
  double high_origin = number("Max"), low_origin = number("Min");
  double high = entry.contains("Max_except_inf_nan") ? number("Max_except_inf_nan") : high_origin;
  double low = entry.contains("Min_except_inf_nan") ? number("Min_except_inf_nan") : low_origin;
  const bool empty = std::find(shape.begin(), shape.end(), 0) != shape.end();
  if (empty) low = high = low_origin = high_origin = 0;
  const auto options = at::TensorOptions().dtype(type);
  at::Tensor t;
  if (at::isFloatingType(type)) {
    if (std::isnan(high)) return at::full(shape, std::numeric_limits<double>::quiet_NaN(), options);
    if (std::isinf(high)) {
      t = at::full(shape, high, options);
      if (t.numel() > 0) t.view(-1)[-1] = low;
      return t;
    }
    const double finfo_max = type == at::kHalf ? 65504.0 : type == at::kBFloat16 ? 3.3895313892515355e38
                             : type == at::kFloat ? std::numeric_limits<float>::max() : std::numeric_limits<double>::max();
    auto finite = [&](double v) { return std::isinf(v) ? (v > 0 ? finfo_max : -finfo_max) : v; };
    const double low_s = std::isnan(low) ? 0 : finite(low), high_s = finite(high);
    t = at::rand(shape, gen, options.dtype(at::kDouble)).mul_(high_s - low_s).add_(low_s).to(type);
  } else if (type == at::kBool) {
    const int64_t lo = std::isnan(low) ? 0 : static_cast<int64_t>(low), hi = std::isnan(high) ? 1 : static_cast<int64_t>(high);
    t = at::randint(lo, hi + 1, shape, gen, at::TensorOptions().dtype(at::kLong)).gt(0);
  } else {
    const int64_t lo = std::isnan(low) ? 0 : static_cast<int64_t>(low), hi = std::isnan(high) ? lo : static_cast<int64_t>(high);
    t = at::randint(lo, hi + 1, shape, gen, options);
  }
  if (t.numel() == 0) return t;
  auto flat = t.view(-1);
  if (std::isnan(high_origin)) {
    if (t.numel() <= 2) {
      flat[0] = std::numeric_limits<double>::quiet_NaN();
    } else {
      if (!std::isnan(low)) flat[0] = low;
      flat[1] = std::numeric_limits<double>::quiet_NaN();
    }
    if (!std::isnan(high)) flat[-1] = high;
  } else {
    if (!std::isnan(low)) flat[0] = low;  // the extremes are always present
    flat[-1] = high;
    if (std::isinf(high_origin)) flat[-1] = high_origin;
    if (std::isinf(low_origin)) flat[0] = low_origin;
  }
  return t;
}

struct materialise_context {
  tensor_source &source;
  at::Generator generator;
  bool allow_random;
  bool random_used = false;
};

// The tensor of an entry: its data, or (random mode) drawn from its statistics.
at::Tensor tensor_of(const json &entry, materialise_context &ctx) {
  // Memory no operator had written (docs/pytorch.md "Uninitialized memory"): no data, no
  // statistics. replay_api lets it through only where it is overwritten; zeros stand for it there.
  if (entry.value("uninitialized", false)) {
    std::vector<int64_t> dims;
    if (entry.contains("shape") && entry["shape"].is_array())
      for (const auto &d : entry["shape"]) dims.push_back(d.get<int64_t>());
    const auto t = scalar_type_of(entry.value("dtype", ""));
    if (!t) throw usage_error("dtype " + entry.value("dtype", std::string("(none)")) + " is not replayed");
    return at::zeros(dims, at::TensorOptions().dtype(*t));
  }
  const auto type = scalar_type_of(entry.value("dtype", ""));
  if (!type) throw usage_error("dtype " + entry.value("dtype", std::string("(none)")) + " is not replayed");
  std::vector<int64_t> shape;
  if (entry.contains("shape") && entry["shape"].is_array())
    for (const auto &d : entry["shape"]) shape.push_back(d.get<int64_t>());
  if (auto loaded = ctx.source.load(entry)) {
    if (loaded->sizes().vec() != shape)
      throw usage_error(fmt::format("{}: shape {} but dump.json says {}", entry.value("data_name", std::string()),
                                    fmt::join(loaded->sizes().vec(), "x"), fmt::join(shape, "x")));
    return *loaded;
  }
  if (!ctx.allow_random) throw usage_error("the dump holds no data for a tensor and random mode is off");
  ctx.random_used = true;
  return random_tensor(entry, *type, shape, ctx.generator);
}

arg_value materialise(const json &entry, materialise_context &ctx) {
  arg_value v;
  if (entry.is_null()) return v;
  if (entry.is_array()) {
    v.k = arg_value::kind::list;
    for (const auto &item : entry) v.items.push_back(materialise(item, ctx));
    return v;
  }
  if (!entry.is_object()) {
    v.k = arg_value::kind::other;
    v.s = entry.type_name();
    return v;
  }
  const std::string type = entry.value("type", "");
  if (type == "torch.Tensor" || type == "torch.nn.parameter.Parameter") {
    v.k = arg_value::kind::tensor;
    v.tensor = tensor_of(entry, ctx);
    v.requires_grad = entry.value("requires_grad", false) && at::isFloatingType(v.tensor.scalar_type());
    v.grad_slot = entry.value("__tprobe_slot", -1);
    return v;
  }
  const json value = entry.contains("value") ? entry["value"] : json();
  if (type == "torch.dtype") {
    const auto t = scalar_type_of(value.is_string() ? value.get<std::string>() : "");
    if (!t) {
      v.k = arg_value::kind::other;
      v.s = "torch.dtype " + value.dump();
      return v;
    }
    v.k = arg_value::kind::dtype;
    v.dtype = *t;
    return v;
  }
  if (type == "torch.device" || type == "torch.memory_format" || type == "torch.layout") return v;  // defaults
  if (type == "torch.Size" || (value.is_array() && (type == "list" || type == "tuple"))) {
    v.k = arg_value::kind::list;
    for (const auto &item : value) {
      arg_value e;
      if (item.is_number_integer()) {
        e.k = arg_value::kind::integer;
        e.i = item.get<int64_t>();
      }
      v.items.push_back(e);
    }
    return v;
  }
  if (value.is_boolean()) {
    v.k = arg_value::kind::boolean;
    v.b = value.get<bool>();
  } else if (value.is_number_integer()) {
    v.k = arg_value::kind::integer;
    v.i = value.get<int64_t>();
    v.d = static_cast<double>(v.i);
  } else if (value.is_number()) {
    v.k = arg_value::kind::real;
    v.d = value.get<double>();
  } else if (value.is_string() && (type == "float" || type.starts_with("float"))) {  // NaN/Infinity as text
    v.k = arg_value::kind::real;
    const std::string s = value.get<std::string>();
    v.d = s.find("nan") != std::string::npos || s == "NaN" ? std::numeric_limits<double>::quiet_NaN()
          : s.starts_with("-") ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  } else if (value.is_string()) {
    v.k = arg_value::kind::text;
    v.s = value.get<std::string>();
  } else {
    v.k = arg_value::kind::other;
    v.s = type.empty() ? entry.dump() : type;
  }
  return v;
}

void flatten_entries(const json &entry, std::vector<const json *> &out) {
  if (entry.is_array()) {
    for (const auto &e : entry) flatten_entries(e, out);
  } else {
    out.push_back(&entry);
  }
}

// Numbers the positional tensors of the forward entry in order (msprobe's backward compares
// [t.grad for t in args], kwargs excluded), so the grads pair with the dump's backward outputs
// whatever order normalize_call gives the arguments.
int tag_tensor_slots(json &entry, int next) {
  if (entry.is_array()) {
    for (auto &item : entry) next = tag_tensor_slots(item, next);
  } else if (entry.is_object() && entry.contains("type") &&
             (entry["type"] == "torch.Tensor" || entry["type"] == "torch.nn.parameter.Parameter")) {
    entry["__tprobe_slot"] = next++;
  }
  return next;
}

// For each positional tensor (in tag_tensor_slots' order), the input_args position it sits in.
std::vector<size_t> tensor_arg_positions(const json &input_args) {
  std::vector<size_t> positions;
  for (size_t i = 0; i < input_args.size(); ++i) {
    json copy = input_args[i];
    const int count = tag_tensor_slots(copy, 0);
    positions.insert(positions.end(), static_cast<size_t>(count), i);
  }
  return positions;
}

// The dumped input gradients, one per positional tensor. msprobe dumps one per tensor argument;
// tprobe one per argument up to the last tensor (layer_norm: [input, None for normalized_shape,
// weight, bias]): a list as long as the tensors is read in tensor order, any other by position.
std::vector<const json *> dumped_input_grads(const json &backward_output, const json &input_args) {
  static const json none;
  std::vector<const json *> flat;
  flatten_entries(backward_output, flat);
  const auto positions = tensor_arg_positions(input_args);
  if (flat.size() == positions.size() || !backward_output.is_array()) return flat;
  // By position; a list argument (torch.einsum's operands, torch.cat's tensors) has its gradients
  // in a list at its position, the k-th for its k-th tensor.
  std::vector<const json *> by_position, here;
  size_t current = std::numeric_limits<size_t>::max(), k = 0;
  for (const size_t p : positions) {
    if (p != current) {
      here.clear();
      if (p < backward_output.size()) flatten_entries(backward_output[p], here);
      current = p;
      k = 0;
    }
    by_position.push_back(k < here.size() ? here[k] : &none);
    ++k;
  }
  return by_position;
}

// ---- binding to a schema ----------------------------------------------------------------------

enum class side { bench, device };

struct bind_context {
  side s;
  at::ScalarType bench_float = at::kDouble;  // what low float tensors become on the bench
  std::vector<std::pair<int, at::Tensor>> *grad_leaves = nullptr;  // (slot, leaf)
  bool probe = false;  // only whether the arguments fit the schema: tensors are passed as they are
};

struct bind_failure {
  std::string why;
};

c10::TypePtr unwrap_symint(const c10::TypePtr &t) {
  if (t->kind() == c10::TypeKind::SymIntType) return c10::IntType::get();
  return t;
}

at::Tensor prepared_tensor(const arg_value &v, bind_context &ctx) {
  if (ctx.probe) return v.tensor;  // a probe converts nothing: the copies would be thrown away
  at::Tensor t = v.tensor;
  if (ctx.s == side::bench && raisable(t.scalar_type())) t = t.to(ctx.bench_float);
  else t = t.clone();
  if (v.requires_grad) {
    at::Tensor leaf = t.detach().requires_grad_(true);
    if (ctx.grad_leaves && v.grad_slot >= 0) ctx.grad_leaves->emplace_back(v.grad_slot, leaf);
    return leaf.clone();  // not a leaf: in-place operators may write it, as msprobe's x*1
  }
  return t;
}

int64_t reduction_value(const std::string &s) {
  if (s == "none") return 0;
  if (s == "mean") return 1;
  if (s == "sum") return 2;
  throw bind_failure{"reduction \"" + s + "\""};
}

c10::IValue convert(const arg_value &v, const c10::TypePtr &type_in, const c10::Argument &arg, bind_context &ctx);

c10::IValue convert_list(const arg_value &v, const c10::ListTypePtr &list, const c10::Argument &arg, bind_context &ctx) {
  const auto element = unwrap_symint(list->getElementType());
  const auto kind = element->kind();
  if (kind == c10::TypeKind::IntType) {
    std::vector<int64_t> out;
    if (v.k == arg_value::kind::integer) {  // stride=1 for int[2]
      out.assign(arg.N() ? static_cast<size_t>(*arg.N()) : 1, v.i);
    } else if (v.k == arg_value::kind::list) {
      for (const auto &e : v.items) {
        if (e.k != arg_value::kind::integer) throw bind_failure{"int list"};
        out.push_back(e.i);
      }
    } else {
      throw bind_failure{"int list"};
    }
    return c10::IValue(out);
  }
  if (kind == c10::TypeKind::FloatType) {
    std::vector<double> out;
    if (v.k == arg_value::kind::real || v.k == arg_value::kind::integer) {
      out.assign(arg.N() ? static_cast<size_t>(*arg.N()) : 1, v.k == arg_value::kind::real ? v.d : static_cast<double>(v.i));
    } else if (v.k == arg_value::kind::list) {
      for (const auto &e : v.items) {
        if (e.k == arg_value::kind::real) out.push_back(e.d);
        else if (e.k == arg_value::kind::integer) out.push_back(static_cast<double>(e.i));
        else throw bind_failure{"float list"};
      }
    } else {
      throw bind_failure{"float list"};
    }
    return c10::IValue(out);
  }
  if (kind == c10::TypeKind::BoolType) {
    c10::List<bool> out;
    if (v.k != arg_value::kind::list) throw bind_failure{"bool list"};
    for (const auto &e : v.items) {
      if (e.k != arg_value::kind::boolean) throw bind_failure{"bool list"};
      out.push_back(e.b);
    }
    return c10::IValue(out);
  }
  if (kind == c10::TypeKind::TensorType) {
    if (v.k != arg_value::kind::list) throw bind_failure{"tensor list"};
    c10::List<at::Tensor> out;
    for (const auto &e : v.items) {
      if (e.k != arg_value::kind::tensor) throw bind_failure{"tensor list"};
      out.push_back(prepared_tensor(e, ctx));
    }
    return c10::IValue(out);
  }
  if (kind == c10::TypeKind::OptionalType &&
      element->castRaw<c10::OptionalType>()->getElementType()->kind() == c10::TypeKind::TensorType) {
    if (v.k != arg_value::kind::list) throw bind_failure{"optional tensor list"};
    c10::List<c10::optional<at::Tensor>> out;
    for (const auto &e : v.items) {
      if (e.k == arg_value::kind::none) out.push_back(c10::nullopt);
      else if (e.k == arg_value::kind::tensor) out.push_back(prepared_tensor(e, ctx));
      else throw bind_failure{"optional tensor list"};
    }
    return c10::IValue(out);
  }
  throw bind_failure{"list of " + element->str()};
}

c10::IValue convert(const arg_value &v, const c10::TypePtr &type_in, const c10::Argument &arg, bind_context &ctx) {
  const c10::TypePtr type = unwrap_symint(type_in);
  switch (type->kind()) {
    case c10::TypeKind::OptionalType:
      if (v.k == arg_value::kind::none) return c10::IValue();
      return convert(v, type->castRaw<c10::OptionalType>()->getElementType(), arg, ctx);
    case c10::TypeKind::TensorType:
      if (v.k != arg_value::kind::tensor) throw bind_failure{"Tensor"};
      return c10::IValue(prepared_tensor(v, ctx));
    case c10::TypeKind::IntType:
      if (v.k == arg_value::kind::integer) return c10::IValue(v.i);
      if (v.k == arg_value::kind::text && arg.name() == "reduction") return c10::IValue(reduction_value(v.s));
      if (v.k == arg_value::kind::dtype) {  // LibTorch 1.13 types a ScalarType argument as int
        at::ScalarType t = v.dtype;
        if (ctx.s == side::bench && raisable(t)) t = ctx.bench_float == at::kFloat ? at::kFloat : raised(t);
        return c10::IValue(static_cast<int64_t>(t));
      }
      throw bind_failure{"int"};
    case c10::TypeKind::FloatType:
      if (v.k == arg_value::kind::real) return c10::IValue(v.d);
      if (v.k == arg_value::kind::integer) return c10::IValue(static_cast<double>(v.i));
      throw bind_failure{"float"};
    case c10::TypeKind::BoolType:
      if (v.k == arg_value::kind::boolean) return c10::IValue(v.b);
      throw bind_failure{"bool"};
    case c10::TypeKind::NumberType:
      if (v.k == arg_value::kind::integer) return c10::IValue(v.i);
      if (v.k == arg_value::kind::real) return c10::IValue(v.d);
      if (v.k == arg_value::kind::boolean) return c10::IValue(v.b);
      throw bind_failure{"Scalar"};
    case c10::TypeKind::StringType:
      if (v.k == arg_value::kind::text) return c10::IValue(v.s);
      throw bind_failure{"str"};
    case c10::TypeKind::ListType:
      return convert_list(v, type->cast<c10::ListType>(), arg, ctx);
    case c10::TypeKind::ScalarTypeType:
      if (v.k == arg_value::kind::dtype) {
        at::ScalarType t = v.dtype;
        if (ctx.s == side::bench && raisable(t)) t = ctx.bench_float == at::kFloat ? at::kFloat : raised(t);
        return c10::IValue(static_cast<int64_t>(t));
      }
      throw bind_failure{"dtype"};
    case c10::TypeKind::LayoutType:
    case c10::TypeKind::DeviceObjType:
    case c10::TypeKind::MemoryFormatType:
      throw bind_failure{type->str()};  // only None (handled by Optional) is replayed
    default:
      throw bind_failure{type->str()};
  }
}

bool is_out_argument(const c10::Argument &a) { return a.kwarg_only() && a.alias_info() && a.alias_info()->isWrite(); }

// The stack for `schema` from the call's arguments, or bind_failure.
torch::jit::Stack bind_arguments(const c10::FunctionSchema &schema, const std::vector<arg_value> &args,
                       const std::map<std::string, arg_value> &kwargs, bind_context &ctx) {
  torch::jit::Stack stack;
  std::set<std::string> used;
  size_t next = 0;
  const auto &params = schema.arguments();
  size_t positional_params = 0;
  for (const auto &a : params) positional_params += a.kwarg_only() ? 0 : 1;
  for (size_t p = 0; p < params.size(); ++p) {
    const auto &a = params[p];
    if (is_out_argument(a)) throw bind_failure{"out= overload"};
    const arg_value *value = nullptr;
    arg_value packed;
    if (!a.kwarg_only() && next < args.size()) {
      // Tensor.view(2, 3): Python varargs fill the schema's one int list.
      const auto t = unwrap_symint(a.type());
      const bool int_list = t->kind() == c10::TypeKind::ListType &&
                            unwrap_symint(t->castRaw<c10::ListType>()->getElementType())->kind() == c10::TypeKind::IntType;
      if (int_list && args[next].k == arg_value::kind::integer && args.size() - next > positional_params - p) {
        packed.k = arg_value::kind::list;
        while (next < args.size() && args[next].k == arg_value::kind::integer) packed.items.push_back(args[next++]);
        value = &packed;
      } else {
        value = &args[next++];
      }
    } else if (auto it = kwargs.find(a.name()); it != kwargs.end()) {
      value = &it->second;
      used.insert(a.name());
    }
    // torch.memory_format / device / layout entries materialise as None (they say how a result is
    // stored, not what it is); a schema that takes no None there (Tensor.contiguous's
    // memory_format) gets its default.
    if (value && value->k == arg_value::kind::none && a.default_value() &&
        a.type()->kind() != c10::TypeKind::OptionalType)
      value = nullptr;
    if (value) {
      try {
        stack.push_back(convert(*value, a.type(), a, ctx));
      } catch (const bind_failure &f) {
        throw bind_failure{a.name() + " wants " + f.why};
      }
    } else if (a.default_value()) {
      stack.push_back(*a.default_value());
    } else if (a.type()->kind() == c10::TypeKind::OptionalType) {
      stack.emplace_back();
    } else {
      throw bind_failure{"missing " + a.name()};
    }
  }
  if (next < args.size()) throw bind_failure{"too many positional arguments"};
  for (const auto &[name, value] : kwargs) {
    if (used.count(name)) continue;
    // What changes where or how a result is stored, not what it is.
    if (name == "out" || name == "device" || name == "layout" || name == "pin_memory" || name == "memory_format" ||
        name == "non_blocking")
      continue;
    throw bind_failure{"unknown keyword " + name};
  }
  return stack;
}

// Overloads of an operator, the default one first, out= variants left out.
const std::vector<c10::OperatorHandle> &overloads_of(const std::string &op) {
  static std::once_flag once;
  static std::unordered_map<std::string, std::vector<c10::OperatorHandle>> table;
  std::call_once(once, [] {
    for (const auto &name : c10::Dispatcher::singleton().getAllOpNames()) {
      auto handle = c10::Dispatcher::singleton().findSchema(name);
      if (!handle) continue;
      const auto &o = name.overload_name;
      if (o == "out" || o.ends_with("_out") || o.starts_with("out_")) continue;
      auto &list = table[name.name];
      if (o.empty()) list.insert(list.begin(), *handle);
      else list.push_back(*handle);
    }
  });
  static const std::vector<c10::OperatorHandle> none;
  const auto it = table.find(op);
  return it == table.end() ? none : it->second;
}

// ---- outputs ----------------------------------------------------------------------------------

std::string python_float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  std::string s = fmt::format("{}", d);
  if (s.find_first_of(".e") == std::string::npos) s += ".0";
  return s;
}

tensor_values values_of(const at::Tensor &t_in, const std::string &dtype) {
  tensor_values v;
  v.dtype = dtype;
  v.shape = t_in.sizes().vec();
  at::Tensor t = t_in.detach();
  if (t.is_complex()) t = at::real(t);
  // Converted as the vector is built (assign from the tensor's own elements): no float64 tensor in
  // between and no zero-filled vector first; outputs of tens of MB are common.
  t = t.contiguous();
  AT_DISPATCH_ALL_TYPES_AND3(at::kHalf, at::kBFloat16, at::kBool, t.scalar_type(), "values_of", [&] {
    const scalar_t *p = t.data_ptr<scalar_t>();
    v.values.assign(p, p + t.numel());
  });
  return v;
}

void flatten_output(const c10::IValue &value, std::vector<c10::IValue> &out) {
  if (value.isTuple()) {
    for (const auto &e : value.toTupleRef().elements()) flatten_output(e, out);
  } else if (value.isTensorList()) {
    const auto list = value.toTensorList();
    for (size_t i = 0; i < list.size(); ++i) out.emplace_back(list.get(i));
  } else if (value.isList()) {
    const auto list = value.toList();
    for (size_t i = 0; i < list.size(); ++i) flatten_output(list.get(i), out);
  } else {
    out.push_back(value);
  }
}

output_value output_of(const c10::IValue &v) {
  if (v.isTensor()) {
    const at::Tensor t = v.toTensor();
    if (!t.defined()) return std::monostate{};
    return values_of(t, dtype_text(t.scalar_type()));
  }
  if (v.isNone()) return std::monostate{};
  if (v.isBool()) return builtin_value{"<class 'bool'>", v.toBool() ? "True" : "False"};
  if (v.isInt()) return builtin_value{"<class 'int'>", std::to_string(v.toInt())};
  if (v.isDouble()) return builtin_value{"<class 'float'>", python_float_repr(v.toDouble())};
  return builtin_value{"<class '" + v.tagKind() + "'>", v.tagKind()};
}

bool entry_is_tensor(const json &e) {
  return e.is_object() && (e.value("type", "") == "torch.Tensor" || e.value("type", "") == "torch.nn.parameter.Parameter");
}

// The device's value of a dumped output entry; nullopt when it is a tensor without data.
std::optional<std::pair<output_value, at::Tensor>> dumped_output(const json &e, tensor_source &source) {
  if (e.is_null()) return std::make_pair(output_value{}, at::Tensor());
  if (entry_is_tensor(e)) {
    auto t = source.load(e);
    if (!t) return std::nullopt;
    return std::make_pair(output_value{values_of(*t, e.value("dtype", dtype_text(t->scalar_type())))}, *t);
  }
  const std::string type = e.value("type", "");
  const json value = e.contains("value") ? e["value"] : json();
  if (value.is_boolean()) return std::make_pair(output_value{builtin_value{"<class 'bool'>", value.get<bool>() ? "True" : "False"}}, at::Tensor());
  if (value.is_number_integer())
    return std::make_pair(output_value{builtin_value{"<class 'int'>", std::to_string(value.get<int64_t>())}}, at::Tensor());
  if (value.is_number())
    return std::make_pair(output_value{builtin_value{"<class 'float'>", python_float_repr(value.get<double>())}}, at::Tensor());
  return std::make_pair(output_value{builtin_value{"<class '" + type + "'>", value.dump()}}, at::Tensor());
}

bool holds_uninitialized(const json &entry) {
  if (entry.is_array())
    return std::any_of(entry.begin(), entry.end(), [](const json &e) { return holds_uninitialized(e); });
  return entry.is_object() && entry.value("uninitialized", false);
}

// An uninitialized input is replayable only as a destination whose old values the operator never
// reads: the `self` of copy_/fill_/zero_, or `out=`. Elsewhere (the capture cannot see a write made
// outside the dispatcher, e.g. torch.tensor's) its values mattered and are unknown.
std::optional<std::string> uninitialized_input(const normalized_call &call, std::string_view api) {
  const bool overwrites = api == "copy_" || api == "fill_" || api == "zero_";
  for (size_t i = 0; i < call.args.size(); ++i)
    if (holds_uninitialized(call.args[i]) && !(overwrites && i == 0))
      return fmt::format("input {} of {} was uninitialized memory when dumped (no data, no statistics); SKIP.", i, api);
  for (const auto &[k, v] : call.kwargs.items())
    if (holds_uninitialized(v) && k != "out" && !(overwrites && k == "self"))
      return fmt::format("input {} of {} was uninitialized memory when dumped (no data, no statistics); SKIP.", k, api);
  return std::nullopt;
}

uint64_t name_seed(uint64_t seed, const std::string &name) {
  uint64_t h = 1469598103934665603ULL;  // FNV-1a: a stable per-API stream, independent of order
  for (const unsigned char c : name) h = (h ^ c) * 1099511628211ULL;
  return seed ^ h;
}

struct run_result {
  std::vector<c10::IValue> outputs;  // flattened
  std::vector<std::pair<int, at::Tensor>> leaves;
};

// A seed for torch's default CPU generator, or none (an operator that draws nothing).
struct draw_seed {
  bool given = false;
  uint64_t value = 0;
};

// Runs `handle` with the arguments converted for `s`. `seed`: an operator that draws from torch's
// default CPU generator (dropout's mask) draws from one seeded with it, and no other replay thread
// draws meanwhile: its bench and device runs draw the same mask, whatever the order of -j's threads
// and of a resumed run (else two masks of a small tensor could part by more than msprobe's 10%
// zero-fraction rule by chance alone).
run_result run(const c10::OperatorHandle &handle, const std::vector<arg_value> &args,
               const std::map<std::string, arg_value> &kwargs, bind_context ctx,
               draw_seed seed = {}) {
  static std::mutex default_generator_users;
  std::unique_lock<std::mutex> drawing(default_generator_users, std::defer_lock);
  if (seed.given) {
    drawing.lock();
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> g(generator.mutex());
    generator.set_current_seed(seed.value);
  }
  run_result r;
  ctx.grad_leaves = &r.leaves;
  torch::jit::Stack stack = bind_arguments(handle.schema(), args, kwargs, ctx);
  at::AutoGradMode grad_mode(true);
  handle.callBoxed(&stack);
  for (const auto &v : stack) flatten_output(v, r.outputs);
  return r;
}

// The dtype autocast ran an operator in: its first float output's dumped dtype, when that is
// float16/bfloat16 and a float input is wider (float32/float64); nullopt otherwise.
std::optional<at::ScalarType> autocast_dtype_of(const json &forward, const std::vector<arg_value> &args,
                                                const std::map<std::string, arg_value> &kwargs) {
  std::vector<const json *> outputs;
  if (forward.contains("output")) flatten_entries(forward["output"], outputs);
  std::optional<at::ScalarType> out;
  for (const json *e : outputs) {
    if (!entry_is_tensor(*e)) continue;
    const auto t = scalar_type_of(e->value("dtype", ""));
    if (t && at::isFloatingType(*t)) {
      out = t;
      break;
    }
  }
  if (!out || (*out != at::kHalf && *out != at::kBFloat16)) return std::nullopt;
  bool wider = false;
  std::function<void(const arg_value &)> scan = [&](const arg_value &v) {
    if (v.k == arg_value::kind::tensor && (v.tensor.scalar_type() == at::kFloat || v.tensor.scalar_type() == at::kDouble))
      wider = true;
    for (const auto &e : v.items) scan(e);
  };
  for (const auto &a : args) scan(a);
  for (const auto &[k, v] : kwargs) scan(v);
  return wider ? out : std::nullopt;
}

// msprobe's torch_ut_setting.json: which output a multi-output API's backward starts from.
std::optional<size_t> grad_index_of(std::string_view api) {
  if (api == "topk" || api == "npu_fusion_attention") return 0;
  return std::nullopt;
}

}  // namespace

std::optional<at::ScalarType> torch_scalar_type(tprobe::dtype t) {
  switch (t) {
    case tprobe::dtype::float64: return at::kDouble;
    case tprobe::dtype::float32: return at::kFloat;
    case tprobe::dtype::float16: return at::kHalf;
    case tprobe::dtype::bfloat16: return at::kBFloat16;
    case tprobe::dtype::int8: return at::kChar;
    case tprobe::dtype::int16: return at::kShort;
    case tprobe::dtype::int32: return at::kInt;
    case tprobe::dtype::int64: return at::kLong;
    case tprobe::dtype::uint8: return at::kByte;
    case tprobe::dtype::boolean: return at::kBool;
    case tprobe::dtype::complex64: return at::kComplexFloat;
    case tprobe::dtype::complex128: return at::kComplexDouble;
  }
  return std::nullopt;
}

std::optional<tprobe::dtype> tprobe_dtype(at::ScalarType t) {
  for (const auto d : {tprobe::dtype::float64, tprobe::dtype::float32, tprobe::dtype::float16, tprobe::dtype::bfloat16,
                       tprobe::dtype::int8, tprobe::dtype::int16, tprobe::dtype::int32, tprobe::dtype::int64,
                       tprobe::dtype::uint8, tprobe::dtype::boolean, tprobe::dtype::complex64, tprobe::dtype::complex128})
    if (torch_scalar_type(d) == t) return d;
  return std::nullopt;
}

at::Tensor load_tensor_file(const std::string &path, const std::string &dtype) {
  const auto type = scalar_type_of(dtype);
  if (!type) throw usage_error(path + ": dtype " + dtype + " is not replayed");
  at::Tensor t;
  if (path.ends_with(".npy")) {
    npy_array a = npy_read(path);
    const auto stored = a.type();
    if (!stored || a.fortran_order) throw usage_error(path + ": descr " + a.descr + " is not replayed");
    const auto st = torch_scalar_type(*stored);
    if (!st) throw usage_error(path + ": descr " + a.descr + " is not replayed");
    auto owner = std::make_shared<npy_array>(std::move(a));
    t = at::from_blob(owner->data.data(), owner->shape, [owner](void *) {}, at::TensorOptions().dtype(*st));
  } else if (path.ends_with(".pt")) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) throw system_error_from_errno("open", path, errno);
    try {
      caffe2::serialize::PyTorchStreamReader reader(path);
      const c10::IValue value = torch::jit::readArchiveAndTensors("data", "", "", c10::nullopt, c10::nullopt,
                                                                   c10::Device(c10::kCPU), reader);
      if (!value.isTensor()) throw usage_error(path + ": holds no tensor (torch.save of a " + value.tagKind() + ")");
      t = value.toTensor().detach().cpu();
    } catch (const c10::Error &e) {
      throw usage_error(path + ": not a readable torch.save file: " + first_line(e.what()));
    }
  } else {
    throw usage_error(path + ": a tensor file must end in .npy or .pt");
  }
  return t.to(*type).contiguous();  // bf16 stored as float32 comes back exact
}

std::optional<at::Tensor> dump_folder_source::load(const nlohmann::ordered_json &entry) {
  std::string name = entry.value("data_name", "");
  if (name.empty()) name = entry.value("datapath", "");
  if (name.empty() || name == "-1") return std::nullopt;
  if (tensor_dir_.empty()) throw usage_error("the dump names " + name + " but has no dump_tensor_data folder");
  if (name.find('/') != std::string::npos || name == "." || name == "..")
    throw usage_error("data_name " + name + " is not a file name");
  return load_tensor_file(tensor_dir_ + "/" + name, entry.value("dtype", ""));
}

api_replay replay_api(const std::string &full_name, const json &forward_in, const json *backward,
                      tensor_source &source, const replay_options &options, replay_tensors *keep) {
  api_replay replay;
  replay.full_name = full_name;
  replay.has_backward = backward != nullptr && backward->is_object();
  json forward = forward_in;
  if (forward.contains("input_args")) tag_tensor_slots(forward["input_args"], 0);
  const normalized_call call = normalize_call(full_name, forward);
  if (call.skip) {
    replay.skip_reason = *call.skip;
    return replay;
  }
  const auto parts = api_name_split(full_name);
  if (auto why = uninitialized_input(call, parts ? parts->api : full_name)) {
    replay.skip_reason = std::move(*why);
    return replay;
  }
  const std::string op_name = call.op;
  const auto &handles = overloads_of(op_name);
  if (handles.empty()) {
    replay.skip_reason = "no ATen operator " + op_name + " in this LibTorch; SKIP.";
    return replay;
  }
  try {
    materialise_context mctx{source, at::make_generator<at::CPUGeneratorImpl>(name_seed(options.seed, full_name)),
                             options.allow_random};
    std::vector<arg_value> args;
    std::map<std::string, arg_value> kwargs;
    for (const auto &a : call.args) args.push_back(materialise(a, mctx));
    for (const auto &[k, v] : call.kwargs.items()) kwargs.emplace(k, materialise(v, mctx));

    // The bench's float dtype (msprobe's generate_cpu_params): one low dtype → one step up; several → fp32.
    // Autocast (AMP): an operator whose dumped output is float16/bfloat16 while float inputs are
    // float32 ran on its inputs cast to the output's dtype. The bench starts from those inputs, as
    // the kernel received them: the rounding of the inputs is autocast's, not the kernel's.
    const std::optional<at::ScalarType> autocast = autocast_dtype_of(forward, args, kwargs);
    if (autocast) {
      std::function<void(arg_value &)> cast = [&](arg_value &v) {
        if (v.k == arg_value::kind::tensor && at::isFloatingType(v.tensor.scalar_type()) &&
            v.tensor.scalar_type() != *autocast)
          v.tensor = v.tensor.to(*autocast);
        for (auto &e : v.items) cast(e);
      };
      for (auto &a : args) cast(a);
      for (auto &[k, v] : kwargs) cast(v);
      replay.autocast_dtype = dtype_text(*autocast);
    }
    std::set<at::ScalarType> low;
    std::function<void(const arg_value &)> collect = [&](const arg_value &v) {
      if (v.k == arg_value::kind::tensor && raisable(v.tensor.scalar_type())) low.insert(v.tensor.scalar_type());
      for (const auto &e : v.items) collect(e);
    };
    for (const auto &a : args) collect(a);
    for (const auto &[k, v] : kwargs) collect(v);
    bind_context bench_ctx{side::bench};
    bench_ctx.bench_float = low.size() == 1 ? raised(*low.begin()) : at::kFloat;
    if (parts && parts->api == "type_as") bench_ctx.bench_float = low.empty() ? at::kFloat : *low.begin();

    // The first overload the arguments fit.
    const c10::OperatorHandle *chosen = nullptr;
    std::string why;
    for (const auto &h : handles) {
      try {
        bind_context probe = bench_ctx;
        probe.probe = true;
        (void)bind_arguments(h.schema(), args, kwargs, probe);
        chosen = &h;
        break;
      } catch (const bind_failure &f) {
        const auto &o = h.schema().overload_name();
        why += fmt::format("{}{}: {}", why.empty() ? "" : "; ", o.empty() ? "default" : o, f.why);
      }
    }
    if (!chosen) {
      replay.skip_reason = fmt::format("no overload of {} takes the dumped arguments ({}); SKIP.", op_name, why);
      return replay;
    }

    // Dropout draws its mask: the same seeded draw on both sides (run's `seed`).
    const draw_seed mask_seed{call.dropout, call.dropout ? name_seed(options.seed, full_name) : 0};
    run_result bench = run(*chosen, args, kwargs, bench_ctx, mask_seed);
    for (const auto &v : bench.outputs) replay.forward_bench.push_back(output_of(v));

    // The device side: what training computed, or a CPU run in the dumped dtypes.
    std::vector<const json *> dumped;
    if (forward.contains("output")) flatten_entries(forward["output"], dumped);
    bool all_dumped = !dumped.empty();
    std::vector<std::pair<output_value, at::Tensor>> device;
    for (const json *e : dumped) {
      auto d = dumped_output(*e, source);
      if (!d) {
        all_dumped = false;
        break;
      }
      device.push_back(std::move(*d));
    }
    std::optional<run_result> device_run;
    if (!all_dumped || mctx.random_used) {
      bind_context device_ctx{side::device};
      try {
        device_run = run(*chosen, args, kwargs, device_ctx, mask_seed);
      } catch (const c10::Error &e) {
        replay.skip_reason = "the dump holds statistics only and the CPU has no kernel for the dumped dtypes: " +
                             first_line(e.what()) + " SKIP.";
        return replay;
      }
      device.clear();
      for (const auto &v : device_run->outputs)
        device.emplace_back(output_of(v), v.isTensor() ? v.toTensor() : at::Tensor());
    }
    for (const auto &[value, tensor] : device) replay.forward_device.push_back(value);
    if (keep) {
      std::function<void(const arg_value &)> inputs = [&](const arg_value &v) {
        if (v.k == arg_value::kind::list) {
          for (const auto &e : v.items) inputs(e);
        } else {
          keep->forward_input.push_back(v.k == arg_value::kind::tensor ? v.tensor : at::Tensor());
        }
      };
      for (const auto &a : args) inputs(a);
      for (const auto &[k, v] : kwargs) inputs(v);
      for (const auto &v : bench.outputs) keep->forward_output_bench.push_back(v.isTensor() ? v.toTensor().detach() : at::Tensor());
      for (const auto &[value, tensor] : device) keep->forward_output_device.push_back(tensor);
    }

    // Backward, from the dumped gradient of output 0 (docs/msprobe-compat.md §7.6.3).
    if (replay.has_backward) {
      const json &grads_in = (*backward).contains("input") ? (*backward)["input"] : json();
      std::vector<const json *> grad_entries, grad_outputs;
      flatten_entries(grads_in, grad_entries);
      if ((*backward).contains("output"))
        grad_outputs = dumped_input_grads((*backward)["output"], forward.value("input_args", json::array()));
      const auto grad_index = grad_index_of(parts ? parts->api : "");
      if (call.no_backward || forward.value("input_kwargs", json::object()).contains("out")) {
        replay.backward_skip = "This API does not support backward.";
      } else if (bench.outputs.empty() || !bench.outputs[0].isTensor()) {
        replay.backward_skip = "Bench output is None, skip this test.";
      } else if (bench.outputs.size() > 1 && !grad_index) {
        replay.backward_skip = "Multiple backward is not supported.";
      } else if (grad_entries.empty() || !entry_is_tensor(*grad_entries[0])) {
        replay.backward_skip = "The dump holds no gradient of the output.";
      } else if (bench.leaves.empty()) {
        replay.backward_skip = "No input of this API requires grad.";
      } else {
        const at::Tensor grad = tensor_of(*grad_entries[0], mctx);
        const size_t index = grad_index.value_or(0);
        const at::Tensor out = bench.outputs.at(index).toTensor();
        if (!out.requires_grad()) {
          replay.backward_skip = "The bench output does not require grad.";
        } else {
          out.backward(grad.to(out.scalar_type()));
          size_t slots = 0;
          if (forward.contains("input_args")) slots = static_cast<size_t>(tag_tensor_slots(forward["input_args"], 0));
          std::vector<at::Tensor> bench_grads(slots);
          for (const auto &[slot, leaf] : bench.leaves)
            if (static_cast<size_t>(slot) < slots && leaf.grad().defined()) bench_grads[slot] = leaf.grad();
          for (const auto &g : bench_grads)
            replay.backward_bench.push_back(g.defined() ? output_value{values_of(g, dtype_text(g.scalar_type()))}
                                                        : output_value{});
          // The device's input gradients: the dumped ones, or the dumped-dtype run's.
          bool grads_dumped = !grad_outputs.empty() && !device_run;
          std::vector<std::pair<output_value, at::Tensor>> device_grads;
          if (grads_dumped) {
            for (const json *e : grad_outputs) {
              auto d = dumped_output(*e, source);
              if (!d) {
                grads_dumped = false;
                break;
              }
              device_grads.push_back(std::move(*d));
            }
          }
          if (!grads_dumped) {
            device_grads.clear();
            if (!device_run) {
              bind_context device_ctx{side::device};
              device_run = run(*chosen, args, kwargs, device_ctx, mask_seed);
            }
            const at::Tensor dout = device_run->outputs.at(index).toTensor();
            std::vector<at::Tensor> dgrads(slots);
            if (dout.requires_grad()) {
              dout.backward(grad.to(dout.scalar_type()));
              for (const auto &[slot, leaf] : device_run->leaves)
                if (static_cast<size_t>(slot) < slots && leaf.grad().defined()) dgrads[slot] = leaf.grad();
            }
            for (const auto &g : dgrads)
              device_grads.emplace_back(g.defined() ? output_value{values_of(g, dtype_text(g.scalar_type()))} : output_value{}, g);
          }
          for (const auto &[value, tensor] : device_grads) replay.backward_device.push_back(value);
          if (keep) {
            keep->backward_input.push_back(grad);
            for (const auto &g : bench_grads) keep->backward_output_bench.push_back(g);
            for (const auto &[value, tensor] : device_grads) keep->backward_output_device.push_back(tensor);
          }
        }
      }
    }
  } catch (const bind_failure &f) {
    replay.skip_reason = "the dumped arguments do not fit " + op_name + " (" + f.why + "); SKIP.";
  } catch (const c10::Error &e) {
    replay.skip_reason = first_line(e.what());
  } catch (const std::exception &e) {
    replay.skip_reason = first_line(e.what());
  }
  if (replay.skip_reason) {  // a SKIP row holds nothing else
    replay.forward_bench.clear();
    replay.forward_device.clear();
    replay.backward_bench.clear();
    replay.backward_device.clear();
    replay.backward_skip.reset();
  }
  return replay;
}

}  // namespace tprobe::precheck
