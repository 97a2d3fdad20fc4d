#include "repro.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <set>
#include <string_view>

#include <fmt/format.h>

#include "api_call.h"
#include "errors.h"
#include "pyjson.h"
#include "safe_path.h"

namespace tprobe {

// The fixed part of every script (tools/repro/repro_engine.py, built in by CMake): everything
// before and after its "# <<the call>>" line.
extern const char *const repro_engine_text;

namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

constexpr std::string_view call_marker = "# <<the call>>\n";

// The dtypes a script may name (getattr(torch, name)): anything else in a dump is refused rather
// than written into Python code.
constexpr std::string_view known_dtypes[] = {
    "torch.float16", "torch.bfloat16", "torch.float32", "torch.float64", "torch.int8",      "torch.int16",
    "torch.int32",   "torch.int64",    "torch.uint8",   "torch.bool",    "torch.complex64", "torch.complex128",
    "torch.half",    "torch.float",    "torch.double",  "torch.long",    "torch.int",
};

std::string checked_dtype(const json &entry, std::string_view where) {
  const std::string dtype = entry.is_string() ? entry.get<std::string>() : entry.value("dtype", std::string());
  if (std::find(std::begin(known_dtypes), std::end(known_dtypes), dtype) == std::end(known_dtypes))
    throw usage_error(fmt::format("{}: dtype \"{}\" is not reproduced", where, dtype));
  return dtype;
}

std::string py_string(const std::string &s) { return pyjson_dump(json(s), -1); }  // ASCII, escaped: a Python literal

std::string py_float(double d) {
  const std::string r = py_float_repr(d);
  return r == "nan" || r == "inf" || r == "-inf" ? "float(\"" + r + "\")" : r;
}

// A statistic (Max, Min, …) as Python: numbers, bools of a bool tensor, None, and the "inf"/"nan"
// strings of older writers.
std::string py_stat(const json &v) {
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_integer()) return v.dump();
  if (v.is_number()) return py_float(v.get<double>());
  if (v.is_string()) {
    const std::string s = v.get<std::string>();
    if (s == "inf" || s == "Infinity") return "float(\"inf\")";
    if (s == "-inf" || s == "-Infinity") return "float(\"-inf\")";
    if (s == "nan" || s == "NaN") return "float(\"nan\")";
  }
  return "None";
}

bool is_tensor(const json &e) {
  return e.is_object() && (e.value("type", "") == "torch.Tensor" || e.value("type", "") == "torch.nn.parameter.Parameter");
}

std::vector<int64_t> shape_of(const json &e) {
  std::vector<int64_t> shape;
  if (e.contains("shape") && e["shape"].is_array())
    for (const auto &d : e["shape"])
      if (d.is_number_integer()) shape.push_back(d.get<int64_t>());
  return shape;
}

// Writes the call's values as Python and collects the tensor files they name.
class call_writer {
 public:
  call_writer(bool with_data, const json &backward_outputs, repro_report &report)
      : with_data_(with_data), grads_(backward_outputs), report_(report) {}

  // The file of a tensor entry, or "" where the dump holds statistics only.
  std::string file_of(const json &e) {
    if (!with_data_) return "";
    std::string name = e.value("data_name", "");
    if (name.empty()) name = e.value("datapath", "");
    if (name.empty() || name == "-1") return "";
    if (const std::string problem = dump_name_problem(name); !problem.empty())
      throw usage_error("data_name \"" + name + "\": " + problem);
    if (std::find(report_.tensor_files.begin(), report_.tensor_files.end(), name) == report_.tensor_files.end())
      report_.tensor_files.push_back(name);
    return name;
  }

  std::string tensor(const json &e, std::string_view where, bool input, int indent) {
    const std::string file = file_of(e);
    if (file.empty() && input) ++report_.random_tensors;
    std::string out = fmt::format("Tensor({}, {}, [{}]", file.empty() ? "None" : py_string(file),
                                  py_string(checked_dtype(e, where)), fmt::join(shape_of(e), ", "));
    out += ", max=" + py_stat(e.value("Max", json())) + ", min=" + py_stat(e.value("Min", json()));
    if (file.empty() && !input)  // what a statistics dump shows of a device output
      out += ", mean=" + py_stat(e.value("Mean", json())) + ", norm=" + py_stat(e.value("Norm", json()));
    if (input && e.value("requires_grad", false)) {
      out += ", requires_grad=True";
      if (const json *g = grad_of(e)) {
        out += fmt::format(",\n{:{}}grad=", "", indent + 7);
        out += tensor(*g, "the dumped gradient", false, indent + 7);
      }
    }
    return out + ")";
  }

  // One argument (a dump.json argument entry) as a Python expression.
  std::string value(const json &e, std::string_view where, int indent = 4) {
    if (e.is_null()) return "None";
    if (e.is_array()) {
      std::vector<std::string> items;
      for (const auto &item : e) items.push_back(value(item, where, indent));
      return "[" + fmt::format("{}", fmt::join(items, ", ")) + "]";
    }
    if (!e.is_object()) return plain(e, where);
    const std::string type = e.value("type", "");
    if (is_tensor(e)) return tensor(e, where, true, indent);
    const json v = e.contains("value") ? e["value"] : json();
    if (type == "torch.dtype") return checked_dtype(v, where);
    if (type == "slice" && v.is_array()) {
      std::vector<std::string> items;
      for (const auto &item : v) items.push_back(plain(item, where));
      return "slice(" + fmt::format("{}", fmt::join(items, ", ")) + ")";
    }
    if (type == "ellipsis") return "Ellipsis";
    // Where or how a result is stored, not what it is: the operator's default.
    if (type == "torch.device" || type == "torch.layout" || type == "torch.memory_format") return "None";
    if (type.starts_with("float") && v.is_string()) return py_stat(v);  // NaN / inf written as text
    if (!e.contains("value"))
      throw usage_error(fmt::format("{}: an argument of type \"{}\" without a value is not reproduced", where, type));
    return plain(v, where);
  }

  // A JSON value as Python (lists of numbers, torch.Size's ints, strings, bools).
  std::string plain(const json &v, std::string_view where) {
    if (v.is_null()) return "None";
    if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
    if (v.is_number_integer()) return v.dump();
    if (v.is_number()) return py_float(v.get<double>());
    if (v.is_string()) return py_string(v.get<std::string>());
    if (v.is_array()) {
      std::vector<std::string> items;
      for (const auto &item : v) items.push_back(plain(item, where));
      return "[" + fmt::format("{}", fmt::join(items, ", ")) + "]";
    }
    throw usage_error(fmt::format("{}: an argument {} is not reproduced", where, v.dump()));
  }

 private:
  // The dumped gradient of a forward input: the backward's output at the input's position in
  // input_args (tprobe's layout: one slot per argument, None for non-tensors), or else at its
  // position among the tensor arguments (one slot per tensor); the shapes must agree.
  const json *grad_of(const json &e) {
    if (!grads_.is_array()) return nullptr;
    const json *found = nullptr;
    for (const char *key : {"__repro_slot", "__repro_tensor_slot"}) {
      if (found || !e.contains(key)) continue;
      const size_t i = e[key].get<size_t>();
      if (i < grads_.size() && is_tensor(grads_[i]) && shape_of(grads_[i]) == shape_of(e)) found = &grads_[i];
    }
    return found;
  }

  bool with_data_;
  const json &grads_;
  repro_report &report_;
};

std::string strip_suffix(std::string name) {
  for (std::string_view s : {".forward", ".backward"})
    if (name.ends_with(s)) return name.substr(0, name.size() - s.size());
  return name;
}

std::string read_whole_file(const std::string &path) {
  FILE *f = std::fopen(path.c_str(), "rb");
  if (!f) throw system_error_from_errno("open", path, errno);
  std::string data;
  char buffer[1 << 16];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof buffer, f)) > 0) data.append(buffer, n);
  const bool failed = std::ferror(f);
  std::fclose(f);
  if (failed) throw system_error("unable to read " + path);
  return data;
}

}  // namespace

std::string repro_dump_json(const std::string &dump) {
  std::error_code ec;
  const fs::path p(dump);
  if (fs::is_regular_file(p, ec)) return p.string();
  if (!fs::is_directory(p, ec)) throw usage_error(dump + ": no such dump.json, rank folder or step folder");
  if (fs::is_regular_file(p / "dump.json", ec)) return (p / "dump.json").string();
  std::vector<std::string> ranks;
  for (const auto &entry : fs::directory_iterator(p, ec))
    if (entry.is_directory() && fs::is_regular_file(entry.path() / "dump.json")) ranks.push_back(entry.path().string());
  if (ec) throw system_error("unable to read " + dump + ": " + ec.message());
  if (ranks.empty()) throw usage_error(dump + ": holds no dump.json (give a dump.json, a rank folder or a step folder)");
  if (ranks.size() > 1) {
    std::sort(ranks.begin(), ranks.end());
    throw usage_error(fmt::format("{}: {} rank folders; give one of them ({}, …)", dump, ranks.size(), ranks.front()));
  }
  return ranks.front() + "/dump.json";
}

std::string repro_script_text(const std::string &api, const json &forward_in, const json &backward, bool with_data,
                              const std::string &dump_json, repro_report &report) {
  // Tag each positional tensor with its place, so its dumped gradient is found after
  // normalize_call has put the arguments in the operator's order.
  json forward = forward_in;
  if (forward.contains("input_args") && forward["input_args"].is_array()) {
    size_t tensors = 0;
    for (size_t i = 0; i < forward["input_args"].size(); ++i) {
      json &a = forward["input_args"][i];
      if (!is_tensor(a)) continue;
      a["__repro_slot"] = i;
      a["__repro_tensor_slot"] = tensors++;
    }
  }
  const precheck::normalized_call call = precheck::normalize_call(api, forward);
  if (call.skip) throw usage_error(api + " is not reproduced: " + *call.skip);
  report.op = call.op;
  const std::string op_attr = call.op.substr(call.op.find("::") + 2);
  const bool has_backward = backward.is_object();
  const json grads = has_backward && backward.contains("output") ? backward["output"] : json();
  call_writer w(with_data, grads, report);

  std::string out = "API = " + py_string(api) + "\n";
  out += "OP_NAME = " + py_string(call.op) + "\n";
  out += "OP = torch.ops.aten." + op_attr + "  # the overload packet: torch picks the overload the arguments fit\n";
  out += "DUMP = " + py_string(dump_json) + "\n\n";
  out += "# The arguments in the operator's schema order (positional, then by name).\n";
  out += "ARGS = [\n";
  for (size_t i = 0; i < call.args.size(); ++i)
    out += "    " + w.value(call.args[i], fmt::format("{} argument {}", api, i)) + ",\n";
  out += "]\nKWARGS = {\n";
  for (const auto &[name, v] : call.kwargs.items()) {
    // How or where a result is stored: the operator's default, on whichever device runs it.
    if (name == "out" || name == "device" || name == "layout" || name == "pin_memory" || name == "memory_format" ||
        name == "non_blocking")
      continue;
    const std::string key = py_string(name);
    out += fmt::format("    {}: {},\n", key, w.value(v, fmt::format("{} argument {}", api, name), 6 + static_cast<int>(key.size())));
  }
  out += "}\n\n# What the dumped run computed (statistics only where the dump holds no data).\nOUTPUTS = [\n";
  std::vector<const json *> outputs;
  std::function<void(const json &)> flat = [&](const json &e) {
    if (e.is_array()) {
      for (const auto &x : e) flat(x);
    } else {
      outputs.push_back(&e);
    }
  };
  if (forward.contains("output")) flat(forward["output"]);
  for (size_t i = 0; i < outputs.size(); ++i) {
    const json &e = *outputs[i];
    const std::string where = fmt::format("{} output {}", api, i);
    out += "    " + (is_tensor(e) ? w.tensor(e, where, false, 4) : w.value(e, where)) + ",\n";
  }
  out += "]\n\n# The dumped gradient of the output the backward starts from; None: no backward in the dump.\n";
  std::string grad = "None";
  if (has_backward && backward.contains("input")) {
    std::vector<const json *> saved = std::move(outputs);
    outputs.clear();
    flat(backward["input"]);
    if (!outputs.empty() && is_tensor(*outputs[0]))
      grad = w.tensor(*outputs[0], api + " backward input 0", true, 14);  // drawn like an input in random mode
    outputs = std::move(saved);
  }
  const auto parts = precheck::api_name_split(api);
  const std::string api_short = parts ? parts->api : "";
  out += "GRAD_OUTPUT = " + grad + "\n";
  // msprobe's torch_ut_setting.json: which output a multi-output API's backward starts from.
  out += std::string("GRAD_INDEX = ") + (api_short == "topk" || api_short == "npu_fusion_attention" ? "0" : "None") + "\n";
  const bool no_backward = call.no_backward || forward.value("input_kwargs", json::object()).contains("out");
  out += std::string("NO_BACKWARD = ") + (no_backward ? "True" : "False") + "  # msprobe's no-backward lists, out=\n";
  out += std::string("DROPOUT = ") + (call.dropout ? "True" : "False") + "  # random masks: compared by their zero fraction\n";
  report.backward = has_backward && grad != "None" && !no_backward;

  const std::string engine = repro_engine_text;
  const auto marker = engine.find(call_marker);
  if (marker == std::string::npos) throw std::logic_error("repro_engine.py has no call marker");
  const std::string script_name = "repro_" + api + ".py";
  std::string header = "#!/usr/bin/env python3\n";
  header += "# " + script_name + ": " + api + " (" + call.op + ") of " + dump_json + ", alone.\n";
  header += "# Run: python3 " + script_name + "   (torch and numpy; the tensor files lie beside it)\n";
  header += "# Written by `tprobe repro` (docs/stages/repro.md). It runs the operator on the CPU one precision\n";
  header += "# higher (the bench), on the CPU in the dumped dtypes and on CUDA/NPU when there is one, then\n";
  header += "# compares each, and the dumped output, with the bench as msprobe's pre-check does. Exit 1: an error;\n";
  header += "# exit 2: the bench itself could not run.\n";
  return header + engine.substr(0, marker) + out + engine.substr(marker + call_marker.size());
}

repro_report repro_write(const repro_options &o) {
  repro_report report;
  report.dump_json = repro_dump_json(o.dump);
  report.api = strip_suffix(o.api);
  if (report.api.empty()) throw usage_error("--api NAME is required (\"Functional.linear.0\")");
  const json doc = pyjson_load_file(report.dump_json);
  if (!doc.is_object() || !doc.contains("data") || !doc["data"].is_object())
    throw usage_error(report.dump_json + ": has no \"data\" object");
  const json &data = doc["data"];
  const auto fwd = data.find(report.api + ".forward");
  if (fwd == data.end() || !fwd->is_object())
    throw usage_error(fmt::format("{}: no API {} (its \"{}.forward\" entry)", report.dump_json, report.api, report.api));
  const auto bwd = data.find(report.api + ".backward");
  const json backward = bwd != data.end() && bwd->is_object() ? *bwd : json();
  const bool with_data = doc.contains("dump_data_dir") && doc["dump_data_dir"].is_string() &&
                         !doc["dump_data_dir"].get<std::string>().empty();
  const std::string abs_dump = absolute_normal_path(report.dump_json);
  const std::string script = repro_script_text(report.api, *fwd, backward, with_data, abs_dump, report);

  // msprobe reads tensors from dump_tensor_data beside dump.json, whatever dump_data_dir says.
  const std::string tensor_dir = fs::path(abs_dump).parent_path().string() + "/dump_tensor_data";
  const std::string dir = path_check_create(o.output_dir, "output path");
  if (const std::string problem = dump_name_problem("repro_" + report.api + ".py"); !problem.empty())
    throw usage_error("--api " + report.api + ": " + problem);
  safe_mkdirs(dir);
  for (const auto &name : report.tensor_files) atomic_write_file(dir + "/" + name, read_whole_file(tensor_dir + "/" + name));
  report.script = dir + "/repro_" + report.api + ".py";
  atomic_write_file(report.script, script);
  ::chmod(report.script.c_str(), 0750);
  return report;
}

}  // namespace tprobe
