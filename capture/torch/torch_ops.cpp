// torch_ops.cpp: the torch.ops.tprobe operators through which python/tprobe drives the capture
// (torch_capture.h has the contracts). They are operators, not a Python extension, so that this
// library needs LibTorch only, never Python headers; torch.ops.load_library loads it. The
// capture's callbacks recognise them by their "tprobe::" namespace and never dump them.
//
// String lists travel as one string, elements separated by "\n" (slots and stack lines never
// hold a newline on their own: stack lines are JSON-encoded, see python/tprobe/_native.py).
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>
#include <torch/library.h>

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

int64_t op_stack_intern(std::string lines_json) {
  const auto j = nlohmann::json::parse(lines_json);
  return tc::python_stack_intern(j.get<std::vector<std::string>>());
}

bool op_entry(std::string entry, c10::optional<std::string> parent, int64_t stack, int64_t is_recompute) {
  std::optional<std::string> p;
  if (parent) p = *parent;
  return tc::entry(entry, p, stack, is_recompute);
}

bool op_tensor(std::string entry, std::string slot, const at::Tensor &t) { return tc::tensor(entry, slot, t); }
bool op_value(std::string entry, std::string slot, std::string json) { return tc::value(entry, slot, json); }

int64_t op_module_enter(std::string forward_entry, at::TensorList inputs, std::string slots) {
  return tc::module_enter(forward_entry, inputs.vec(), split_lines(slots));
}

void op_module_exit(int64_t token, std::string backward_entry, c10::optional<std::string> backward_parent,
                    at::TensorList outputs, std::string slots) {
  std::optional<std::string> p;
  if (backward_parent) p = *backward_parent;
  tc::module_exit(token, backward_entry, p, outputs.vec(), split_lines(slots));
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
  m.def("stack_intern(str lines) -> int", &op_stack_intern);
  m.def("entry(str entry, str? parent, int stack, int is_recompute) -> bool", &op_entry);
  m.def("tensor(str entry, str slot, Tensor t) -> bool", &op_tensor);
  m.def("value(str entry, str slot, str json) -> bool", &op_value);
  m.def("module_enter(str forward_entry, Tensor[] inputs, str slots) -> int", &op_module_enter);
  m.def("module_exit(int token, str backward_entry, str? backward_parent, Tensor[] outputs, str slots) -> ()",
        &op_module_exit);
}
