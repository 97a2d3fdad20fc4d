#include "msprobe_cli.h"

#include <algorithm>

#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "errors.h"
#include "pyjson.h"

namespace tprobe {

namespace {

// "--output=dir" → "--output"; other arguments as they are.
std::string_view option_name(std::string_view arg) {
  if (arg.rfind("--", 0) == 0) return arg.substr(0, arg.find('='));
  return arg;
}

const known_option *find_known(const std::vector<known_option> &known, std::string_view name) {
  for (const auto &k : known)
    if (std::find(k.spellings.begin(), k.spellings.end(), name) != k.spellings.end()) return &k;
  return nullptr;
}

// "-sc": flags of one letter each, given together (CLI11 takes them so).
bool combined_short_flags(const std::vector<known_option> &known, std::string_view arg) {
  if (arg.size() < 3 || arg[0] != '-' || arg[1] == '-') return false;
  for (const char c : arg.substr(1)) {
    const known_option *k = find_known(known, std::string{'-', c});
    if (!k || k->takes_value) return false;
  }
  return true;
}

std::string forms(const std::vector<known_option> &known) {
  std::vector<std::string> list;
  for (const auto &k : known) list.push_back(fmt::format("{}", fmt::join(k.spellings, "/")));
  return fmt::format("{}", fmt::join(list, ", "));
}

}  // namespace

std::vector<known_option> known_options_of(const CLI::App &app) {
  std::vector<known_option> known;
  for (const CLI::Option *o : app.get_options()) {
    if (!o->nonpositional()) continue;
    known_option k;
    for (const auto &s : o->get_snames()) k.spellings.push_back("-" + s);
    for (const auto &l : o->get_lnames()) k.spellings.push_back("--" + l);
    k.takes_value = o->get_items_expected_max() > 0;  // a flag expects none
    known.push_back(std::move(k));
  }
  return known;
}

std::vector<std::string> msprobe_args_translate(std::vector<std::string> args, std::span<const msprobe_flag> table,
                                                const std::vector<known_option> &known, std::string_view tool) {
  std::vector<std::string> out;
  out.reserve(args.size());
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string &arg = args[i];
    if (arg == "--") {
      out.insert(out.end(), args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
      break;
    }
    if (arg.size() < 2 || arg[0] != '-') {
      out.push_back(arg);
      continue;
    }
    const std::string_view name = option_name(arg);
    const auto flag = std::find_if(table.begin(), table.end(), [&](const msprobe_flag &f) { return f.spelling == name; });
    if (flag != table.end()) {
      if (!flag->refused.empty())
        throw usage_error(fmt::format("{}: msprobe's {} is not built in tprobe ({})", tool, flag->spelling, flag->refused));
      std::string value;
      const bool inline_value = name.size() < arg.size();
      if (flag->takes_value) {
        if (inline_value) value = arg.substr(name.size() + 1);
        else if (i + 1 < args.size()) value = args[++i];
        else throw usage_error(fmt::format("{}: {} needs a value", tool, flag->spelling));
      }
      if (flag->tprobe.empty()) {  // taken and dropped
        if (!flag->only_value.empty() && value != flag->only_value)
          throw usage_error(fmt::format("{}: {} {}: only {} {} is taken (tprobe reads {} dumps)", tool, flag->spelling,
                                        value, flag->spelling, flag->only_value, flag->only_value));
        continue;
      }
      out.emplace_back(flag->tprobe);
      if (flag->takes_value) out.push_back(value);
      continue;
    }
    if (const known_option *k = find_known(known, name)) {
      out.push_back(arg);
      if (k->takes_value && name.size() == arg.size() && i + 1 < args.size()) out.push_back(args[++i]);
      continue;
    }
    if (combined_short_flags(known, arg)) {
      out.push_back(arg);
      continue;
    }
    throw usage_error(fmt::format("{}: unknown option \"{}\"; its options are {} (msprobe's spellings are taken too: "
                                  "see --help)",
                                  tool, std::string(name), forms(known)));
  }
  return out;
}

msprobe_compare_input msprobe_compare_input_load(const std::string &path) {
  const auto doc = pyjson_load_file(path);
  if (!doc.is_object()) throw usage_error(fmt::format("compare input {}: not a JSON object", path));
  msprobe_compare_input in;
  const auto text = [&](const std::string &key, std::string &into, bool required) {
    const auto it = doc.find(key);
    if (it == doc.end() || it->is_null()) {
      if (required) throw usage_error(fmt::format("compare input {}: \"{}\" is missing", path, key));
      return;
    }
    if (!it->is_string() || it->get_ref<const std::string &>().empty())
      throw usage_error(fmt::format("compare input {}: \"{}\" must be a non-empty path", path, key));
    into = it->get<std::string>();
  };
  for (const auto &[key, value] : doc.items()) {
    if (key == "npu_path" || key == "bench_path" || key == "stack_path") continue;
    if (key == "is_print_compare_log") {
      if (!value.is_boolean())
        throw usage_error(fmt::format("compare input {}: \"is_print_compare_log\" must be true or false", path));
      continue;
    }
    throw usage_error(fmt::format("compare input {}: unknown key \"{}\" (msprobe's compare.json has npu_path, "
                                  "bench_path, stack_path, is_print_compare_log)",
                                  path, key));
  }
  text("npu_path", in.npu_path, true);
  text("bench_path", in.bench_path, true);
  text("stack_path", in.stack_path, false);
  return in;
}

msprobe_graph_input msprobe_graph_input_load(const std::string &path) {
  const auto doc = pyjson_load_file(path);
  if (!doc.is_object()) throw usage_error(fmt::format("graph input {}: not a JSON object", path));
  msprobe_graph_input in;
  for (const auto &[key, value] : doc.items()) {
    if (key == "npu_path" || key == "bench_path") {
      if (value.is_null() && key == "bench_path") continue;
      if (!value.is_string() || value.get_ref<const std::string &>().empty())
        throw usage_error(fmt::format("graph input {}: \"{}\" must be a non-empty path", path, key));
      (key == "npu_path" ? in.npu_path : in.bench_path) = value.get<std::string>();
    } else if (key == "is_print_compare_log") {
      if (!value.is_boolean())
        throw usage_error(fmt::format("graph input {}: \"is_print_compare_log\" must be true or false", path));
    } else if (key == "parallel_merge") {
      throw usage_error(fmt::format("graph input {}: \"parallel_merge\" (merging the graphs of parallel ranks) is not "
                                    "built in tprobe graph", path));
    } else {
      throw usage_error(fmt::format("graph input {}: unknown key \"{}\" (msprobe's graph input.json has npu_path, "
                                    "bench_path, is_print_compare_log, parallel_merge)", path, key));
    }
  }
  if (in.npu_path.empty()) throw usage_error(fmt::format("graph input {}: \"npu_path\" is missing", path));
  return in;
}

}  // namespace tprobe
