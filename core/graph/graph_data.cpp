// graph_data.cpp: see graph_data.h.
#include "graph_data.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <regex>

#include <fmt/format.h>

#include "compare_cell.h"
#include "pyjson.h"
#include "tensor_stats.h"

namespace tprobe {
namespace {

using json = nlohmann::ordered_json;

std::string without_quotes(std::string s) {
  s.erase(std::remove(s.begin(), s.end(), '\''), s.end());
  return s;
}

bool is_leaf(const json &v) { return v.is_object() && v.contains("type") && v["type"].is_string(); }

struct flattener {
  bool keep_md5;
  json &in;
  json &out;

  void item(const std::string &key_by_position, const json &leaf) {
    std::string key = key_by_position;
    json item = json::object();
    if (leaf.is_null()) {
      item["value"] = "null";
    } else {
      for (const auto &[field, value] : leaf.items()) {
        if (field == "state" || field == "full_op_name" || (field == "md5" && !keep_md5)) continue;
        item[field] = value;
      }
      if (item.contains("data_name") && item["data_name"].is_string()) {
        const std::string data_name = item["data_name"].get<std::string>();
        const size_t dot = data_name.rfind('.');
        if (!data_name.empty() && data_name != "-1" && dot != std::string::npos) key = data_name.substr(0, dot);
      } else {
        item["data_name"] = "-1";
      }
      if (!item.contains("requires_grad")) item["requires_grad"] = nullptr;
      const bool has_value = leaf.contains("value");
      for (const char *stat : {"Max", "Min", "Mean", "Norm"})
        if (!item.contains(stat)) item[stat] = has_value ? leaf["value"] : json(nullptr);
      if (has_value && !item.contains("dtype")) item["dtype"] = py_type_str(leaf["value"]);
      if (has_value && !item.contains("shape")) item["shape"] = "[]";
      if (keep_md5 && has_value && !item.contains("md5")) {  // msprobe's CRC-32 of str(value), as compare_dump's
        const std::string text = py_str(leaf["value"]);
        item["md5"] = fmt::format("{:08x}", crc32_bytes(text.data(), text.size()));
      }
      json formatted = json::object();
      for (const auto &[field, value] : item.items()) formatted[field] = graph_format_value(value);
      item = formatted["Max"] == "null" ? json{{"value", "null"}} : std::move(formatted);
    }
    const bool output = key.find(".output.") != std::string::npos && key.find(".input.") == std::string::npos;
    (output ? out : in)[key] = std::move(item);
  }

  void walk(const std::string &prefix, const json &v, int depth = 0) {
    if (depth > 400) return;  // dump_load refuses such a dump first
    if (v.is_null() || is_leaf(v)) {
      item(prefix, v);
    } else if (v.is_array()) {
      for (size_t i = 0; i < v.size(); ++i) walk(prefix + "." + std::to_string(i), v[i], depth + 1);
    } else if (v.is_object()) {
      for (const auto &[k, x] : v.items()) walk(prefix + "." + k, x, depth + 1);
    }
  }
};

}  // namespace

std::string graph_format_value(const json &v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return v.get<bool>() ? "True" : "False";
    case json::value_t::number_integer: return std::to_string(v.get<int64_t>());
    case json::value_t::number_unsigned: return std::to_string(v.get<uint64_t>());
    case json::value_t::number_float: {
      const double d = v.get<double>();
      const std::string repr = py_float_repr(d);
      if (repr.find('e') != std::string::npos) return fmt::format("{:.6e}", d);
      return py_float_repr(py_round(d, 6));
    }
    case json::value_t::string: {
      std::string s = without_quotes(v.get<std::string>());
      if (s == "None" || s == " ") return "null";
      static const std::regex long_decimal(R"(^(-?\d+\.\d{7,})(%?)$)");
      std::smatch m;
      if (std::regex_match(s, m, long_decimal)) {
        if (const auto x = py_float_parse(m[1].str())) return fmt::format("{:.6f}", *x) + m[2].str();
      }
      return s;
    }
    default: return without_quotes(py_str(v));
  }
}

void graph_node_data(const std::string &name, const json &entry, bool keep_md5, json &input_data, json &output_data) {
  flattener f{keep_md5, input_data, output_data};
  if (name.find(".parameters_grad") != std::string::npos && !entry.contains("input") && !entry.contains("output")) {
    for (const auto &[param, v] : entry.items()) {
      if (v.is_array() && v.size() == 1) f.walk(name + "." + param, v[0]);
      else f.walk(name + "." + param, v);
    }
    return;
  }
  static const std::pair<const char *, const char *> sections[] = {
      {"input_args", ".input"}, {"input_kwargs", ".input"}, {"input", ".input"}, {"output", ".output"},
      {"parameters", ".parameters"}};
  for (const auto &[section, suffix] : sections) {
    auto it = entry.find(section);
    if (it == entry.end()) continue;
    f.walk(name + suffix, *it);
  }
}

bool graph_dump_has_md5(const json &data) {
  std::vector<const json *> todo{&data};
  while (!todo.empty()) {
    const json *v = todo.back();
    todo.pop_back();
    if (v->is_object()) {
      if (is_leaf(*v) && v->contains("md5")) return true;
      for (const auto &[k, x] : v->items()) todo.push_back(&x);
    } else if (v->is_array()) {
      for (const auto &x : *v) todo.push_back(&x);
    }
  }
  return false;
}

}  // namespace tprobe
