#include "compare_dump.h"

#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "compare_metrics.h"
#include "dump_semantics.h"
#include "errors.h"
#include "pyjson.h"
#include "tensor_stats.h"

namespace tprobe {

using json = nlohmann::ordered_json;

const char *compare_mode_name(compare_mode m) {
  switch (m) {
    case compare_mode::all: return "all";
    case compare_mode::summary: return "summary";
    case compare_mode::md5: return "md5";
  }
  return "?";
}

bool formula_like(std::string_view s) {
  // ASCII + - = % @ and their fullwidth forms U+FF0B U+FF0D U+FF1D U+FF05 U+FF20 (UTF-8 EF BC xx).
  const auto starts_formula = [](std::string_view t) {
    if (t.empty()) return false;
    const char c = t[0];
    if (c == '+' || c == '-' || c == '=' || c == '%' || c == '@') return true;
    if (t.size() >= 3 && static_cast<unsigned char>(t[0]) == 0xEF && static_cast<unsigned char>(t[1]) == 0xBC) {
      const auto c2 = static_cast<unsigned char>(t[2]);
      return c2 == 0x8B || c2 == 0x8D || c2 == 0x9D || c2 == 0x85 || c2 == 0xA0;
    }
    return false;
  };
  if (starts_formula(s)) return true;
  for (size_t p = s.find(';'); p != std::string_view::npos; p = s.find(';', p + 1))
    if (starts_formula(s.substr(p + 1))) return true;
  return false;
}

namespace {

constexpr int max_depth = 400;  // msprobe's Const.MAX_DEPTH

bool truthy(const json &v) {
  switch (v.type()) {
    case json::value_t::null: return false;
    case json::value_t::boolean: return v.get<bool>();
    case json::value_t::string: return !v.get_ref<const std::string &>().empty();
    case json::value_t::array:
    case json::value_t::object: return !v.empty();
    case json::value_t::number_integer: return v.get<int64_t>() != 0;
    case json::value_t::number_unsigned: return v.get<uint64_t>() != 0;
    case json::value_t::number_float: return v.get<double>() != 0.0;
    default: return false;
  }
}

// str(np.shape(np.array(value))): "()" for a scalar, "(3,)", "(2, 3)" for nested equal lists.
std::string numpy_shape_str(const json &v) {
  std::vector<size_t> dims;
  const json *level = &v;
  while (level->is_array()) {
    dims.push_back(level->size());
    if (level->empty()) break;
    const json &first = level->front();
    const bool regular = std::all_of(level->begin(), level->end(), [&](const json &e) {
      return e.is_array() == first.is_array() && (!e.is_array() || e.size() == first.size());
    });
    if (!regular || !first.is_array()) break;
    level = &first;
  }
  if (dims.empty()) return "()";
  if (dims.size() == 1) return fmt::format("({},)", dims[0]);
  return fmt::format("({})", fmt::join(dims, ", "));
}

std::string last_segment(const std::string &name) {
  const size_t dot = name.rfind('.');
  return dot == std::string::npos ? name : name.substr(dot + 1);
}

bool has_segment(std::string_view name, std::string_view segment) {
  size_t start = 0;
  while (start <= name.size()) {
    const size_t dot = name.find('.', start);
    const size_t end = dot == std::string_view::npos ? name.size() : dot;
    if (name.substr(start, end - start) == segment) return true;
    if (dot == std::string_view::npos) break;
    start = dot + 1;
  }
  return false;
}

class flattener {
 public:
  flattener(const dump_file &file, size_t entry) : file_(file), entry_(entry) {}

  std::vector<dump_row> rows;

  void parse(const json &data, const std::string &name, const std::string &state, int depth, bool params_grad) {
    if (depth > max_depth)
      throw usage_error(fmt::format("{} dump {}: entry \"{}\": nesting deeper than {} levels", file_.side,
                                    file_.path, file_.entries[entry_], max_depth));
    if (data.is_null()) {
      rows.push_back(default_row(name, state));
      return;
    }
    if (!truthy(data)) return;
    if (data.is_array()) {
      size_t i = 0;
      for (const auto &element : data) {
        parse(element, params_grad ? name : name + "." + std::to_string(i), state, depth + 1, params_grad);
        ++i;
      }
    } else if (data.is_object()) {
      const auto class_type = data.find("class_type");
      if (class_type != data.end() && class_type->is_string() && *class_type == "torch.distributed.P2POp") {
        const auto tensor = data.find("tensor");
        if (tensor != data.end() && tensor->is_object())
          rows.push_back(leaf_row(*tensor, name, state));
        else
          rows.push_back(default_row(name, state));
        return;
      }
      const auto type = data.find("type");
      if (type != data.end() && type->is_string()) {
        rows.push_back(leaf_row(data, name, state));
        return;
      }
      for (const auto &[key, value] : data.items())
        parse(value, name + "." + key, state, depth + 1, params_grad || key == "parameters_grad");
    }
  }

 private:
  dump_row base_row(const std::string &state) const {
    dump_row r;
    r.state = state;
    r.entry = entry_;
    return r;
  }

  // msprobe's default_item: a null value.
  dump_row default_row(const std::string &name, const std::string &state) const {
    dump_row r = base_row(state);
    r.name = name;
    r.dtype = "None";
    r.shape = "None";
    r.stats.fill(cell::of_text("None"));
    r.md5 = "N/A";
    return r;
  }

  static cell field_stat(const json &leaf, const char *key) {
    const auto it = leaf.find(key);
    if (it == leaf.end()) return cell::of_text("None");
    // An older tprobe dump's "nan"/"inf"/"-inf" strings read as the reals they stand for.
    if (const auto real = value_leaf_real(*it); real && it->is_string()) return statistic_cell(json(*real));
    return statistic_cell(*it);
  }

  // msprobe's gen_op_item.
  dump_row leaf_row(const json &leaf, const std::string &name, const std::string &state) const {
    dump_row r = base_row(state);
    const auto data_name = leaf.find("data_name");
    if (data_name != leaf.end() && truthy(*data_name))
      r.data_name = data_name->is_string() ? data_name->get<std::string>() : py_str(*data_name);
    if (r.data_name != "-1") {
      const size_t dot = r.data_name.rfind('.');
      r.name = dot == std::string::npos ? r.data_name : r.data_name.substr(0, dot);
    } else {
      r.name = name;
    }
    for (size_t i = 0; i < 4; ++i) r.stats[i] = field_stat(leaf, std::array{"Max", "Min", "Mean", "Norm"}[i]);
    if (const auto u = leaf.find("uninitialized"); u != leaf.end() && u->is_boolean()) r.uninitialized = u->get<bool>();
    if (const auto rg = leaf.find("requires_grad"); rg != leaf.end() && !rg->is_null())
      r.requires_grad = rg->is_boolean() ? cell::of_text(rg->get<bool>() ? "True" : "False") : statistic_cell(*rg);
    std::string md5;
    if (const auto m = leaf.find("md5"); m != leaf.end() && truthy(*m)) md5 = m->is_string() ? m->get<std::string>() : py_str(*m);

    const auto dtype = leaf.find("dtype");
    const json null_value;
    const auto value_it = leaf.find("value");
    json legacy_real;  // a float leaf's value that an older tprobe wrote as "nan", "inf" or "-inf"
    if (const auto t = leaf.find("type"); value_it != leaf.end() && value_it->is_string() && t != leaf.end() &&
                                          t->is_string() && value_real_type(t->get_ref<const std::string &>()))
      if (const auto real = value_leaf_real(*value_it)) legacy_real = *real;
    const json &value = !legacy_real.is_null() ? legacy_real : value_it == leaf.end() ? null_value : *value_it;
    if (dtype == leaf.end() || !truthy(*dtype)) {
      // A P2POp's "tensor" leaf may have no string "type" (msprobe reads None): no type matches.
      const auto type_it = leaf.find("type");
      const std::string type = type_it != leaf.end() && type_it->is_string() ? type_it->get<std::string>() : "";
      const std::string last = last_segment(name);
      if (type == "torch.Size") {
        r.dtype = type;
        r.shape = py_str(value);
      } else if (type == "slice") {
        r.dtype = type;
        r.shape = numpy_shape_str(value);
      } else if (type == "ellipsis") {
        r.dtype = type;
        r.shape = "[]";
        r.stats.fill(statistic_cell(value));
      } else if (last == "src" || last == "dst" || last == "group_src" || last == "group_dst") {
        r.dtype = type;
        r.shape = "[]";
        r.stats.fill(statistic_cell(json(py_str(value))));
        md5 = py_str(value);
      } else if (type == "torch.ProcessGroup") {
        const auto ranks = leaf.find("group_ranks");
        const std::string text = ranks == leaf.end() ? "None" : py_str(*ranks);
        r.dtype = type;
        r.shape = "[]";
        r.stats.fill(statistic_cell(json(text)));
        md5 = text;
      } else {
        r.dtype = py_type_str(value);
        r.shape = "[]";
        r.stats.fill(statistic_cell(value));
      }
    } else {
      r.dtype = dtype->is_boolean() ? (dtype->get<bool>() ? "True" : "False") : py_str(*dtype);
      const auto shape = leaf.find("shape");
      r.shape = shape == leaf.end() ? "None" : py_str(*shape);
    }
    if (md5.empty()) {
      const std::string text = value_it == leaf.end() ? std::string() : py_str(value);
      md5 = fmt::format("{:08x}", crc32_bytes(text.data(), text.size()));
    }
    r.md5 = std::move(md5);
    return r;
  }

  const dump_file &file_;
  size_t entry_;
};

// msprobe's check_dump_json_str: in input, kwargs and output, every dict value must be sane
// (shape a list, requires_grad a bool). msprobe also refuses any string that starts like a
// spreadsheet formula; tprobe escapes such a cell where it goes into a spreadsheet instead
// (spreadsheet_text, compare_output.h): one argument such as masked_fill's "-inf" must not make a
// whole dump uncomparable.
void check_strings(const json &v, const dump_file &file, const std::string &entry, int depth) {
  if (depth > max_depth) return;
  if (v.is_array()) {
    for (const auto &item : v) check_strings(item, file, entry, depth + 1);
  } else if (v.is_object()) {
    for (const auto &[key, value] : v.items()) {
      if (value.is_object()) {
        check_strings(value, file, entry, depth + 1);
      } else if (key == "shape" && !value.is_array()) {
        throw usage_error(fmt::format("{} dump {}: entry \"{}\": shape is not a list", file.side, file.path, entry));
      } else if (key == "requires_grad" && !value.is_boolean()) {
        throw usage_error(
            fmt::format("{} dump {}: entry \"{}\": requires_grad is not a bool", file.side, file.path, entry));
      }
    }
  }
}

void check_entry_strings(const json &data, const dump_file &file, const std::string &entry) {
  const auto section = [&](const char *key) -> const json * {
    const auto it = data.find(key);
    return it == data.end() ? nullptr : &*it;
  };
  const json *inputs = section("input_args");
  if (!inputs || !truthy(*inputs)) inputs = section("input");
  for (const json *arg : {inputs, section("input_kwargs"), section("output")}) {
    if (!arg || !truthy(*arg)) continue;
    if (arg->is_object()) {
      check_strings(*arg, file, entry, 0);
    } else if (arg->is_array()) {
      for (const auto &element : *arg)
        if (truthy(element)) check_strings(element, file, entry, 0);
    }
  }
}

// msprobe's md5_find for dump.json: a leaf directly inside a top-level list of some entry has md5
// (or a top-level dict value has the key "md5").
bool find_md5(const json &data) {
  for (const auto &[name, entry] : data.items()) {
    if (!entry.is_object()) continue;
    for (const auto &[section, value] : entry.items()) {
      if (value.is_array()) {
        for (const auto &detail : value) {
          if (detail.is_object() && detail.contains("md5")) return true;
          if (detail.is_array() && std::find(detail.begin(), detail.end(), json("md5")) != detail.end()) return true;
          if (detail.is_string() && detail.get_ref<const std::string &>().find("md5") != std::string::npos)
            return true;
        }
      } else if (value.is_object()) {
        if (value.contains("md5")) return true;
      } else if (value.is_string()) {
        if (value.get_ref<const std::string &>().find("md5") != std::string::npos) return true;
      }
    }
  }
  return false;
}

int state_rank(const std::string &state) {
  if (state == "parameters") return 1;
  if (state == "output") return 2;
  if (state == "parameters_grad") return 3;
  return 0;
}

bool params_grad_entry(const std::string &name) {
  // "….parameters_grad.N" (tprobe, msprobe's docs) or "….parameters_grad" (msprobe's read_op).
  return entry_parse(name).is_parameters_grad();
}

}  // namespace

dump_file dump_from_json(const json &doc, const std::string &path, const std::string &side) {
  dump_file f;
  f.path = path;
  f.side = side;
  f.tensor_dir = (std::filesystem::path(path).parent_path() / "dump_tensor_data").string();
  if (!doc.is_object()) throw usage_error(fmt::format("{} dump {}: not a dump.json (not a JSON object)", side, path));
  const auto task = doc.find("task");
  if (task == doc.end() || !task->is_string() || task->get_ref<const std::string &>().empty())
    throw usage_error(fmt::format("{} dump {}: 'task' is missing or empty", side, path));
  f.task = task->get<std::string>();
  const auto data = doc.find("data");
  if (data == doc.end()) throw usage_error(fmt::format("{} dump {}: 'data' is missing", side, path));
  if (!data->is_object()) throw usage_error(fmt::format("{} dump {}: 'data' is not an object", side, path));
  if (const auto fw = doc.find("framework"); fw != doc.end() && fw->is_string()) f.framework = fw->get<std::string>();
  f.has_md5 = find_md5(*data);

  f.entries.reserve(data->size());
  for (const auto &[name, entry] : data->items()) {
    if (!entry.is_object())
      throw usage_error(fmt::format("{} dump {}: entry \"{}\" is not an object", side, path, name));
    check_entry_strings(entry, f, name);
    f.entries.push_back(name);
    flattener flat(f, f.entries.size() - 1);
    if (params_grad_entry(name)) {
      flat.parse(entry, name, "parameters_grad", 0, true);
    } else {
      static const std::array<std::pair<const char *, const char *>, 5> sections{{{"input_args", ".input"},
                                                                                  {"input_kwargs", ".input"},
                                                                                  {"input", ".input"},
                                                                                  {"output", ".output"},
                                                                                  {"parameters", ".parameters"}}};
      for (const auto &[key, suffix] : sections) {
        const auto it = entry.find(key);
        if (it == entry.end()) continue;
        const std::string state = std::string(key) == "input_args" || std::string(key) == "input_kwargs" ? "input" : key;
        const std::string base = name + suffix;
        flat.parse(*it, base, state, 0, has_segment(base, "parameters_grad"));
      }
    }
    std::stable_sort(flat.rows.begin(), flat.rows.end(),
                     [](const dump_row &a, const dump_row &b) { return state_rank(a.state) < state_rank(b.state); });
    if (!flat.rows.empty()) flat.rows.front().first_of_entry = true;
    for (auto &row : flat.rows) f.rows.push_back(std::move(row));
  }
  return f;
}

dump_file dump_load(const std::string &path, const std::string &side) {
  json doc = pyjson_load_file(path);
  return dump_from_json(doc, path, side);
}

compare_mode dump_mode(const dump_file &npu, const dump_file &bench) {
  if (npu.task != bench.task)
    throw usage_error(fmt::format("the dumps' tasks differ: NPU {} is \"{}\", bench {} is \"{}\"", npu.path, npu.task,
                                  bench.path, bench.task));
  if (npu.task == "tensor") return compare_mode::all;
  if (npu.task == "statistics") {
    if (npu.has_md5 != bench.has_md5)
      throw usage_error(fmt::format("the dumps' summary modes differ: NPU {} {} md5 fields, bench {} {}", npu.path,
                                    npu.has_md5 ? "has" : "has no", bench.path, bench.has_md5 ? "has" : "has no"));
    return npu.has_md5 ? compare_mode::md5 : compare_mode::summary;
  }
  throw usage_error(fmt::format("{}: task \"{}\": compare applies only to task tensor or statistics", npu.path, npu.task));
}

stack_map stack_from_json(const json &doc, const std::string &path) {
  if (!doc.is_object()) throw usage_error(fmt::format("stack file {}: not a JSON object", path));
  stack_map stacks;
  const auto lines_of = [&](const json &v, const std::string &what) {
    if (!v.is_array()) throw usage_error(fmt::format("stack file {}: {}: stack is not a list", path, what));
    std::vector<std::string> lines;
    lines.reserve(v.size());
    for (const auto &l : v) {
      lines.push_back(l.is_string() ? l.get<std::string>() : py_str(l));
    }
    return lines;
  };
  if (doc.contains("0")) {
    // Current form: {"0": [[names…], [lines…]], …}, identical stacks shared.
    for (const auto &[key, value] : doc.items()) {
      if (!value.is_array() || value.size() != 2 || !value[0].is_array())
        throw usage_error(fmt::format("stack file {}: item \"{}\" is not [[names], [stack lines]]", path, key));
      const auto lines = lines_of(value[1], "item \"" + key + "\"");
      for (const auto &name : value[0])
        if (name.is_string()) stacks[name.get<std::string>()] = lines;
    }
  } else {
    for (const auto &[key, value] : doc.items()) stacks[key] = lines_of(value, "\"" + key + "\"");
  }
  return stacks;
}

stack_map stack_load(const std::string &path) { return stack_from_json(pyjson_load_file(path), path); }

}  // namespace tprobe
