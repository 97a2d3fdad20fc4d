// torch_ops.cpp: the torch.ops.tprobe operators through which python/tprobe drives the capture
// (torch_capture.h has the contracts). They are operators, not a Python extension, so that this
// library needs LibTorch only, never Python headers; torch.ops.load_library loads it. The
// capture's callbacks recognise them by their "tprobe::" namespace and never dump them.
//
// String lists travel as one string, elements separated by "\n" (slots never hold a newline).
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/library.h>

#include "dump_semantics.h"
#include "python_stack.h"
#include "torch_capture.h"

namespace {

namespace tc = tprobe::torch_capture;

std::vector<std::string> split_lines(const std::string &text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  for (;;) {
    const size_t nl = text.find('\n', start);
    out.push_back(text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) return out;
    start = nl + 1;
  }
}

std::string op_open(std::string config_path, int64_t rank, std::string options_json) {
  tc::open_options o;
  o.config_path = std::move(config_path);
  o.rank = static_cast<int>(rank);
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(options_json);
  } catch (const nlohmann::json::exception &e) {
    throw std::runtime_error(std::string("tprobe: open: options are not JSON: ") + e.what());
  }
  o.endpoint = j.value("endpoint", "");
  o.op_depth = j.value("op_depth", 1);
  o.stats_copy = j.value("stats_copy", false);
  o.stacks = j.value("stacks", true);
  o.exclude_dir = j.value("exclude_dir", "");
  o.watch_pid = j.value("watch_pid", int64_t{0});
  return tc::open(o);
}

std::string op_config_check(std::string config_path) { return tc::config_check(config_path); }
void op_entry_name_check(std::string name) { tc::entry_name_check(name); }

std::string op_close() { return tc::close(); }
bool op_start() { return tc::start(); }
void op_stop() { tc::stop(); }
int64_t op_step() { return tc::step(); }
std::string op_counters() { return tc::counters(); }

bool op_entry(std::string entry, c10::optional<std::string> parent, int64_t stack, int64_t is_recompute) {
  std::optional<std::string> p;
  if (parent) p = *parent;
  return tc::entry(entry, p, stack, is_recompute);
}

bool op_tensor(std::string entry, std::string slot, const at::Tensor &t) { return tc::tensor(entry, slot, t); }
int64_t op_tensors(std::string entry, at::TensorList tensors, std::string slots) {
  return tc::tensors(entry, tensors.vec(), split_lines(slots));
}
bool op_value(std::string entry, std::string slot, std::string json) { return tc::value(entry, slot, json); }

// Value encoding for python/tprobe/_values.py: Python passes a value's typed facts, one operator
// call per value, and core/dump_semantics.h builds its msprobe leaf (docs/msprobe-compat.md §2.7).
// Cheaper per call than a leaf built in Python, serialised with json.dumps and parsed again here.
// As text: a real's NaN / Infinity are Python's json tokens, which no nlohmann tree can write.
std::string scalar_leaf(const c10::Scalar &v, const c10::optional<std::string> &type) {
  std::string text;
  // Python's bool reaches a Scalar as an int: the caller says "bool".
  if (v.isBoolean()) tprobe::value_bool_append(text, v.toBool());
  else if (type && *type == "bool") tprobe::value_bool_append(text, v.toLong() != 0);
  else if (v.isIntegral(/*includeBool=*/false)) tprobe::value_int_append(text, v.toLong(), type ? *type : "int");
  else if (v.isComplex()) text = tprobe::value_complex(v.toComplexDouble().real(), v.toComplexDouble().imag()).dump();
  else tprobe::value_real_append(text, v.toDouble(), type ? *type : "float");
  return text;
}

tprobe::stat_value stat_of(const c10::optional<c10::Scalar> &v) {
  if (!v) return tprobe::stat_value::none();
  if (v->isBoolean()) return tprobe::stat_value::of_bool(v->toBool());
  return tprobe::stat_value::of_real(v->toDouble());
}

// type: "bool" for a bool, None for Python's int/float ("int", "float"), a numpy scalar's dtype name.
bool op_value_scalar(std::string entry, std::string slot, const c10::Scalar &v, c10::optional<std::string> type) {
  return tc::value_leaf_text(entry, slot, scalar_leaf(v, type));
}

// {"type": type, "value": text}: str, torch.dtype, torch.device, ellipsis.
bool op_value_text(std::string entry, std::string slot, std::string type, std::string text) {
  return tc::value_leaf(entry, slot, tprobe::value_text(type, text));
}

bool op_value_memory_format(std::string entry, std::string slot, std::string name) {
  return tc::value_leaf(entry, slot, tprobe::value_memory_format(name));
}

// A list of ints under "value" (torch.Size; slice's [start, stop, step]); bit i of none_mask
// makes element i null.
bool op_value_ints(std::string entry, std::string slot, std::string type, std::vector<int64_t> v, int64_t none_mask) {
  std::vector<std::optional<int64_t>> list;
  for (size_t i = 0; i < v.size(); ++i)
    list.push_back(i < 63 && ((none_mask >> i) & 1) ? std::nullopt : std::optional<int64_t>(v[i]));
  return tc::value_leaf(entry, slot, tprobe::value_int_list(type, list));
}

// A numpy ndarray: its statistics computed by numpy (reals, or bools for a bool array; None for
// an empty or object array).
bool op_value_ndarray(std::string entry, std::string slot, std::string dtype, std::vector<int64_t> shape,
                      c10::optional<c10::Scalar> max, c10::optional<c10::Scalar> min,
                      c10::optional<c10::Scalar> mean, c10::optional<c10::Scalar> norm) {
  std::string text;
  tprobe::value_ndarray_append(text, dtype, shape, stat_of(max), stat_of(min), stat_of(mean), stat_of(norm));
  return tc::value_leaf_text(entry, slot, text);
}

int64_t op_module_enter(std::string forward_entry, at::TensorList inputs, std::string slots) {
  return tc::module_enter(forward_entry, inputs.vec(), split_lines(slots));
}

void op_module_exit(int64_t token, std::string forward_entry, c10::optional<std::string> parent,
                    at::TensorList outputs, std::string slots) {
  std::optional<std::string> p;
  if (parent) p = *parent;
  tc::module_exit(token, forward_entry, p, outputs.vec(), split_lines(slots));
}

}  // namespace

TORCH_LIBRARY(tprobe, m) {
  m.def("open(str config_path, int rank, str options) -> str", &op_open);
  m.def("close() -> str", &op_close);
  m.def("config_check(str config_path) -> str", &op_config_check);
  m.def("entry_name_check(str name) -> ()", &op_entry_name_check);
  m.def("start() -> bool", &op_start);
  m.def("stop() -> ()", &op_stop);
  m.def("step() -> int", &op_step);
  m.def("counters() -> str", &op_counters);
  m.def("entry(str entry, str? parent, int stack, int is_recompute) -> bool", &op_entry);
  m.def("tensor(str entry, str slot, Tensor t) -> bool", &op_tensor);
  m.def("tensors(str entry, Tensor[] tensors, str slots) -> int", &op_tensors);
  m.def("value(str entry, str slot, str json) -> bool", &op_value);
  m.def("module_enter(str forward_entry, Tensor[] inputs, str slots) -> int", &op_module_enter);
  m.def("module_exit(int token, str forward_entry, str? parent, Tensor[] outputs, str slots) -> ()",
        &op_module_exit);
  m.def("value_scalar(str entry, str slot, Scalar v, str? type) -> bool", &op_value_scalar);
  m.def("value_text(str entry, str slot, str type, str text) -> bool", &op_value_text);
  m.def("value_memory_format(str entry, str slot, str name) -> bool", &op_value_memory_format);
  m.def("value_ints(str entry, str slot, str type, int[] v, int none_mask) -> bool", &op_value_ints);
  m.def("value_ndarray(str entry, str slot, str dtype, int[] shape, Scalar? max, Scalar? min, Scalar? mean, "
        "Scalar? norm) -> bool",
        &op_value_ndarray);
  m.def("recompute_scope_enter() -> bool", &tc::recompute_scope_enter);
  m.def("recompute_scope_exit() -> ()", &tc::recompute_scope_exit);
}
