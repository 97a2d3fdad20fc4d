#include "dump_semantics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <initializer_list>
#include <limits>
#include <stdexcept>
#include <type_traits>

namespace tprobe {

namespace {

using ojson = nlohmann::ordered_json;

bool all_digits(std::string_view s) {
  return !s.empty() && s.find_first_not_of("0123456789") == std::string_view::npos;
}

entry_direction direction_of(std::string_view segment) {
  if (segment == "forward") return entry_direction::forward;
  if (segment == "backward") return entry_direction::backward;
  if (segment == "parameters_grad") return entry_direction::parameters_grad;
  return entry_direction::none;
}

bool has_module_prefix(std::string_view name) {
  return name.rfind("Module.", 0) == 0 || name.rfind("Cell.", 0) == 0;
}

std::string_view first_segment(std::string_view s) { return s.substr(0, s.find('.')); }

}  // namespace

// ---- entry names ---------------------------------------------------------------------------

entry_name entry_parse(std::string_view name) {
  entry_name e;
  e.module_prefix = has_module_prefix(name);
  const size_t last_dot = name.rfind('.');
  if (last_dot == std::string_view::npos) return e;  // one segment: no direction
  const std::string_view last = name.substr(last_dot + 1);
  if (const auto d = direction_of(last); d != entry_direction::none) {
    e.direction = d;
    const std::string_view head = name.substr(0, last_dot);
    const size_t count_dot = head.rfind('.');
    // "X.3.forward": the count precedes; "M.parameters_grad": none.
    if (d != entry_direction::parameters_grad && count_dot != std::string_view::npos &&
        all_digits(head.substr(count_dot + 1))) {
      e.count = head.substr(count_dot + 1);
      e.base = head.substr(0, count_dot);
    } else {
      e.base = head;
    }
    return e;
  }
  if (last_dot == 0) return e;
  const size_t prev_dot = name.rfind('.', last_dot - 1);
  if (prev_dot == std::string_view::npos) return e;  // the direction would be the first segment
  const std::string_view prev = name.substr(prev_dot + 1, last_dot - prev_dot - 1);
  const auto d = direction_of(prev);
  if (d == entry_direction::none) return e;
  if (d != entry_direction::parameters_grad && !all_digits(last)) return e;
  e.direction = d;
  e.count_last = true;
  e.count = last;
  e.base = name.substr(0, prev_dot);
  return e;
}

namespace {
// "{prefix}." followed by at least the dot: the regexes' "^(prefix)\..*" before the "\." that
// precedes the count or direction.
bool base_has_prefix(std::string_view base, std::initializer_list<std::string_view> prefixes) {
  for (const auto prefix : prefixes)
    if (base.size() > prefix.size() && base.starts_with(prefix) && base[prefix.size()] == '.') return true;
  return false;
}
}  // namespace

bool entry_is_api_pattern(std::string_view name) {
  if (name.find('\n') != std::string_view::npos) return false;
  const entry_name e = entry_parse(name);
  if ((!e.is_forward() && !e.is_backward()) || e.count_last || e.count.empty()) return false;
  return base_has_prefix(e.base, {"Distributed", "Functional", "Torch", "Tensor", "Mint", "MintFunctional",
                                  "Primitive", "Aten", "VF", "NPU", "Jit"});
}

bool entry_is_module_pattern(std::string_view name) {
  if (name.find('\n') != std::string_view::npos) return false;
  const entry_name e = entry_parse(name);
  if ((!e.is_forward() && !e.is_backward()) || !e.count_last) return false;
  return base_has_prefix(e.base, {"Cell", "Module"});
}

std::string_view entry_direction_name(entry_direction d) {
  switch (d) {
    case entry_direction::forward: return "forward";
    case entry_direction::backward: return "backward";
    case entry_direction::parameters_grad: return "parameters_grad";
    case entry_direction::none: break;
  }
  return "";
}

std::string entry_api_name(std::string_view prefix, std::string_view op, int64_t n, entry_direction d) {
  const std::string_view direction = entry_direction_name(d);
  std::string s;
  s.reserve(prefix.size() + op.size() + direction.size() + 23);  // one allocation: n has at most 20 digits
  s.append(prefix).append(".").append(op).append(".").append(std::to_string(n)).append(".");
  return s.append(direction);
}

std::string entry_module_name(std::string_view module, int64_t n, entry_direction d) {
  std::string s(module);
  return s.append(".").append(entry_direction_name(d)).append(".").append(std::to_string(n));
}

std::string entry_parameters_grad_name(std::string_view module, int64_t k) {
  return entry_module_name(module, k, entry_direction::parameters_grad);
}

std::string entry_with_direction(std::string_view name, entry_direction d) {
  const entry_name e = entry_parse(name);
  if ((!e.is_forward() && !e.is_backward()) || (d != entry_direction::forward && d != entry_direction::backward))
    return {};
  std::string s(e.base);
  if (e.count_last) return s.append(".").append(entry_direction_name(d)).append(".").append(e.count);
  if (!e.count.empty()) s.append(".").append(e.count);
  return s.append(".").append(entry_direction_name(d));
}

// ---- slots ---------------------------------------------------------------------------------

std::string slot_backward_of(std::string_view forward_slot) {
  const std::string_view first = first_segment(forward_slot);
  const std::string_view rest = forward_slot.substr(first.size());
  if (first == "input") return std::string("output").append(rest);
  if (first == "output") return std::string("input").append(rest);
  return {};
}

slot_location slot_locate(const entry_name &entry, std::string_view slot) {
  slot_location loc;
  if (entry.is_parameters_grad()) {
    constexpr std::string_view legacy = "parameters_grad.";
    loc.section = std::string(slot.rfind(legacy, 0) == 0 ? slot.substr(legacy.size()) : slot);
    loc.path.emplace_back(int64_t{0});  // each parameter maps to a one-element list
    return loc;
  }
  // The slot's dot-separated segments, walked in place: the writer locates every record, and a
  // vector of them cost allocations per record.
  const size_t first_dot = slot.find('.');
  const std::string_view first = slot.substr(0, first_dot);
  if (entry.is_backward() || entry.direction == entry_direction::none) loc.section = first;
  else if (first == "input") loc.section = "input_args";
  else if (first == "kwargs") loc.section = "input_kwargs";
  else loc.section = first;  // output | parameters
  // A saved variable ("x.0.debug", PrecisionDebugger.save) is the entry's value itself: slot
  // "debug" is the entry, "debug.0" / "debug.key" its elements.
  loc.whole_entry = entry.direction == entry_direction::none && first == "debug";
  if (first_dot == std::string_view::npos) return loc;
  loc.path.reserve(static_cast<size_t>(std::count(slot.begin(), slot.end(), '.')));
  std::string key;
  size_t start = first_dot + 1;
  for (size_t i = 1;; ++i) {
    bool quoted = false;
    const size_t end = slot_segment_read(slot, start, key, quoted);
    const std::string_view part = quoted ? std::string_view(key) : slot.substr(start, end - start);
    const bool key_only = quoted || loc.section == "parameters" || (loc.section == "input_kwargs" && i == 1);
    int64_t index = 0;
    if (const auto [p, ec] = std::from_chars(part.data(), part.data() + part.size(), index);
        !key_only && all_digits(part) && ec == std::errc() && p == part.data() + part.size())
      loc.path.emplace_back(index);
    else
      loc.path.emplace_back(std::string(part));
    if (end >= slot.size()) return loc;
    start = end + 1;
  }
}

size_t slot_segment_read(std::string_view slot, size_t at, std::string &key, bool &quoted) {
  quoted = at < slot.size() && slot[at] == '\'';
  if (!quoted) {
    const size_t dot = slot.find('.', at);
    return dot == std::string_view::npos ? slot.size() : dot;
  }
  key.clear();
  size_t from = at + 1;
  for (;;) {
    const size_t quote = slot.find('\'', from);
    if (quote == std::string_view::npos) {  // unterminated: the rest is the key
      key.append(slot.substr(from));
      return slot.size();
    }
    key.append(slot.substr(from, quote - from));
    if (quote + 1 < slot.size() && slot[quote + 1] == '\'') {  // '' stands for '
      key += '\'';
      from = quote + 2;
      continue;
    }
    // After the closing quote comes the next dot; anything before it is kept in the key.
    const size_t dot = slot.find('.', quote + 1);
    const size_t end = dot == std::string_view::npos ? slot.size() : dot;
    key.append(slot.substr(quote + 1, end - quote - 1));
    return end;
  }
}

void slot_key_append(std::string &slot, std::string_view key) {
  slot += '.';
  const bool plain = !key.empty() && key.front() != '\'' && key.find('.') == std::string_view::npos && !all_digits(key);
  if (plain) {
    slot += key;
    return;
  }
  slot += '\'';
  for (const char c : key) {
    if (c == '\'') slot += '\'';
    slot += c;
  }
  slot += '\'';
}

bool slot_has_quoted_key(std::string_view slot) { return slot.find(".'") != std::string_view::npos; }

std::string slot_display(std::string_view slot) {
  if (!slot_has_quoted_key(slot)) return std::string(slot);
  std::string out, key;
  size_t start = 0;
  for (;;) {
    bool quoted = false;
    const size_t end = start == 0 ? std::min(slot.find('.'), slot.size()) : slot_segment_read(slot, start, key, quoted);
    if (start) out += '.';
    out += quoted ? std::string_view(key) : slot.substr(start, end - start);
    if (end >= slot.size()) return out;
    start = end + 1;
  }
}

slot_io slot_io_of(std::string_view slot) {
  const std::string_view section = first_segment(slot);
  if (section == "input" || section == "input_args" || section == "kwargs" || section == "input_kwargs")
    return slot_io::input;
  if (section == "output") return slot_io::output;
  if (section == "parameters") return slot_io::parameters;
  return slot_io::unknown;
}

std::pair<std::string, std::string> slot_compare_row(std::string_view entry, std::string_view slot) {
  const std::string_view first = first_segment(slot);
  const std::string_view rest = first.size() < slot.size() ? slot.substr(first.size() + 1) : std::string_view();
  std::string e(entry);
  if (first == "kwargs") return {e.append(".input.").append(rest), "input"};
  if (first == "parameters_grad") return {e.append(".").append(rest), "parameters_grad"};
  if (entry_parse(entry).is_parameters_grad()) return {e.append(".").append(slot), "parameters_grad"};
  return {e.append(".").append(slot), std::string(first)};
}

// ---- data_mode -----------------------------------------------------------------------------

data_mode_filter::data_mode_filter(const std::vector<std::string> &modes) {
  auto has = [&](std::string_view m) {
    for (const auto &x : modes)
      if (x == m) return true;
    return false;
  };
  if (has("all")) return;
  forward_ = has("forward"), backward_ = has("backward");
  if (!forward_ && !backward_) forward_ = backward_ = true;
  input_ = has("input"), output_ = has("output");
  if (!input_ && !output_) input_ = output_ = true;
  // pt_hook_manager._register_param_hook reads the raw list: no hook for "forward" without "backward".
  parameters_grad_ = !(has("forward") && !has("backward"));
}

data_mode_filter data_mode_filter::from_json(const nlohmann::ordered_json &modes) {
  std::vector<std::string> list;
  if (!modes.is_array()) return data_mode_filter();
  for (const auto &m : modes)
    if (m.is_string()) list.push_back(m.get<std::string>());
  return data_mode_filter(list);
}

bool data_mode_filter::allows_entry(const entry_name &entry) const {
  if (!values_) return false;
  switch (entry.direction) {
    case entry_direction::forward: return forward_;
    case entry_direction::backward: return backward_;
    case entry_direction::parameters_grad: return parameters_grad_;
    case entry_direction::none: break;
  }
  return true;
}

bool data_mode_filter::allows(const entry_name &entry, std::string_view slot) const {
  if (!allows_entry(entry)) return false;
  if (entry.direction == entry_direction::parameters_grad || entry.direction == entry_direction::none) return true;
  switch (slot_io_of(slot)) {
    case slot_io::input: return input_;
    case slot_io::output: return output_;
    case slot_io::parameters: return true;  // any forward entry msprobe writes has its parameters
    case slot_io::unknown: break;
  }
  return true;
}

data_mode_filter data_mode_of_session(const nlohmann::ordered_json &session_meta) {
  if (!session_meta.is_object()) return data_mode_filter();
  const auto modes = session_meta.find("data_mode");
  data_mode_filter f = data_mode_filter::from_json(modes != session_meta.end() ? *modes : nlohmann::ordered_json());
  const auto task = session_meta.find("task");
  if (task != session_meta.end() && task->is_string() && task->get<std::string>() == "structure") f.without_values();
  return f;
}

// ---- a new entry ---------------------------------------------------------------------------

nlohmann::ordered_json entry_skeleton_json(const entry_name &name, const data_mode_filter &modes,
                                           const nlohmann::ordered_json *is_recompute) {
  nlohmann::ordered_json e = nlohmann::ordered_json::object();
  entry_skeleton(name, modes, is_recompute != nullptr, [&](const char *key, entry_section kind) {
    switch (kind) {
      case entry_section::list: e[key] = nlohmann::ordered_json::array(); break;
      case entry_section::dict: e[key] = nlohmann::ordered_json::object(); break;
      case entry_section::is_recompute: e[key] = *is_recompute; break;
    }
  });
  return e;
}

nlohmann::ordered_json &entry_slot_json(nlohmann::ordered_json &entry, const entry_name &name, const slot_location &where) {
  using json = nlohmann::ordered_json;
  if (where.whole_entry) return entry;
  if (!entry.is_object()) entry = json::object();
  // A module forward keeps is_recompute last, after a section that arrives later (parameters).
  if (name.is_module() && name.is_forward() && entry.contains("is_recompute") && !entry.contains(where.section)) {
    json flag = std::move(entry["is_recompute"]);
    entry.erase("is_recompute");
    entry[where.section] = nullptr;
    entry["is_recompute"] = std::move(flag);
  }
  json *at = &entry[where.section];
  for (const auto &element : where.path) {
    if (const auto *index = std::get_if<int64_t>(&element)) {
      if (*index < 0 || *index > (int64_t{1} << 20))
        throw std::invalid_argument("list index " + std::to_string(*index) + " in its path is not in 0..1048576");
      if (at->is_object() && !at->empty())
        throw std::invalid_argument("its path goes through a dict by index, which would lose what it holds");
      if (!at->is_array()) *at = json::array();
      const size_t k = static_cast<size_t>(*index);
      while (at->size() <= k) at->push_back(nullptr);
      at = &(*at)[k];
    } else {
      if (at->is_array() && !at->empty())
        throw std::invalid_argument("its path goes through a list by key, which would lose what it holds");
      if (!at->is_object()) *at = json::object();
      at = &(*at)[std::get<std::string>(element)];
    }
  }
  return *at;
}

// ---- dump.json leaves ----------------------------------------------------------------------

stats_options stats_options_of_session(const nlohmann::ordered_json &session_meta) {
  stats_options o;
  if (!session_meta.is_object()) return o;
  const auto text = [&](const char *key) {
    const auto it = session_meta.find(key);
    return it != session_meta.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  o.high_precision = text("precision") == "high";
  o.half_mean_of_rounded_sum = text("half_mean") == "rounded_sum";
  return o;
}

nlohmann::ordered_json stat_json(const stat_value &v) {
  switch (v.k) {
    case stat_value::kind::boolean: return v.boolean;
    case stat_value::kind::integer: return v.integer;
    case stat_value::kind::real: return v.real;
    case stat_value::kind::null: break;
  }
  return nullptr;
}

std::string tensor_type_default(std::string_view framework) {
  if (framework == "mindspore") return "mindspore.Tensor";
  if (framework == "pytorch" || framework == "mindtorch") return "torch.Tensor";
  return "numpy.ndarray";
}

bool entry_allocates_only(std::string_view entry) {
  const entry_name e = entry_parse(entry);
  if (!e.is_forward() || e.module_prefix) return false;
  const size_t dot = e.base.rfind('.');
  const std::string_view op = dot == std::string_view::npos ? e.base : e.base.substr(dot + 1);
  static constexpr std::string_view ops[] = {"empty",     "empty_like",        "empty_strided",
                                             "new_empty", "new_empty_strided", "empty_permuted"};
  for (const auto o : ops)
    if (op == o) return true;
  return false;
}

nlohmann::ordered_json tensor_leaf_json(const tensor_facts &t) {
  ojson j = ojson::object();
  auto &fields = static_cast<ojson::object_t::Container &>(j.get_ref<ojson::object_t &>());
  fields.reserve(11);
  tensor_leaf_fields(t, [&](std::string_view key, const auto &value) {
    using value_type = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<value_type, std::string_view>)
      fields.emplace_back(std::string(key), ojson(std::string(value)));
    else if constexpr (std::is_same_v<value_type, stat_value>)
      fields.emplace_back(std::string(key), stat_json(value));
    else
      fields.emplace_back(std::string(key), ojson(value));
  });
  return j;
}

namespace {
// A JSON string: quotes, backslashes and control characters escaped; other bytes as they are
// (UTF-8 passes through, as nlohmann's dump writes it). Not pyjson_string_append: this file is
// also compiled into the PyTorch capture, which has nothing of core but it (see the header).
void json_string_append(std::string &out, std::string_view text) {
  out += '"';
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (u < 0x20) {
      char esc[7];
      std::snprintf(esc, sizeof esc, "\\u%04x", u);
      out.append(esc, 6);
    } else {
      out += c;
    }
  }
  out += '"';
}

void leaf_open_append(std::string &out, std::string_view type) {
  out += R"({"type":)";
  json_string_append(out, type);
  out += R"(,"value":)";
}
}  // namespace

void value_bool_append(std::string &out, bool v) {
  out += v ? R"({"type":"bool","value":true})" : R"({"type":"bool","value":false})";
}

void value_int_append(std::string &out, int64_t v, std::string_view type) {
  leaf_open_append(out, type);
  char digits[24];
  const auto end = std::to_chars(digits, digits + sizeof digits, v).ptr;
  out.append(digits, end);
  out += '}';
}

namespace {
// A real as Python's json writes it: NaN / Infinity / -Infinity tokens (docs/msprobe-compat.md §2.4),
// never strings, so that a reader sees a float; else the shortest text that reads back as the
// same double, with a point or an exponent so that it reads back as a float (2.0, not 2).
void real_text_append(std::string &out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "Infinity" : "-Infinity";
  } else {
    char digits[32];
    const auto end = std::to_chars(digits, digits + sizeof digits, v).ptr;
    out.append(digits, end);
    if (std::string_view(digits, static_cast<size_t>(end - digits)).find_first_of(".e") == std::string_view::npos)
      out += ".0";
  }
}

void stat_text_append(std::string &out, const stat_value &v) {
  switch (v.k) {
    case stat_value::kind::null: out += "null"; break;
    case stat_value::kind::boolean: out += v.boolean ? "true" : "false"; break;
    case stat_value::kind::integer: {
      char digits[24];
      out.append(digits, std::to_chars(digits, digits + sizeof digits, v.integer).ptr);
      break;
    }
    case stat_value::kind::real: real_text_append(out, v.real); break;
  }
}
}  // namespace

void value_real_append(std::string &out, double v, std::string_view type) {
  leaf_open_append(out, type);
  real_text_append(out, v);
  out += '}';
}

void value_ndarray_append(std::string &out, std::string_view dtype, const std::vector<int64_t> &shape,
                          const stat_value &max, const stat_value &min, const stat_value &mean,
                          const stat_value &norm) {
  out += R"({"type":"numpy.ndarray","dtype":)";
  json_string_append(out, dtype);
  out += R"(,"shape":[)";
  char digits[24];
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) out += ',';
    out.append(digits, std::to_chars(digits, digits + sizeof digits, shape[i]).ptr);
  }
  out += "]";
  const std::pair<const char *, const stat_value *> stats[] = {
      {R"(,"Max":)", &max}, {R"(,"Min":)", &min}, {R"(,"Mean":)", &mean}, {R"(,"Norm":)", &norm}};
  for (const auto &[key, v] : stats) out += key, stat_text_append(out, *v);
  out += '}';
}

void value_text_append(std::string &out, std::string_view type, std::string_view text) {
  leaf_open_append(out, type);
  json_string_append(out, text);
  out += '}';
}

std::optional<double> value_leaf_real(const nlohmann::ordered_json &v) {
  if (v.is_number()) return v.get<double>();
  if (!v.is_string()) return std::nullopt;
  const auto &s = v.get_ref<const std::string &>();
  if (s == "nan") return std::numeric_limits<double>::quiet_NaN();
  if (s == "inf") return std::numeric_limits<double>::infinity();
  if (s == "-inf") return -std::numeric_limits<double>::infinity();
  return std::nullopt;
}

bool value_real_type(std::string_view type) {
  return type == "float" || type == "float16" || type == "float32" || type == "float64" || type == "float_" ||
         type == "longdouble" || type == "double" || type == "single" || type == "half" || type == "float128";
}

namespace {
ojson parsed_leaf(const std::string &text) { return ojson::parse(text); }
}  // namespace

nlohmann::ordered_json value_bool(bool v) {
  std::string text;
  value_bool_append(text, v);
  return parsed_leaf(text);
}

nlohmann::ordered_json value_int(int64_t v, std::string_view type) {
  std::string text;
  value_int_append(text, v, type);
  return parsed_leaf(text);
}

nlohmann::ordered_json value_real(double v, std::string_view type) {
  // Built, not parsed: nlohmann's parser has no NaN / Infinity tokens (the tree holds the IEEE value).
  return ojson{{"type", type}, {"value", v}};
}

nlohmann::ordered_json value_text(std::string_view type, std::string_view text) {
  std::string json;
  value_text_append(json, type, text);
  return parsed_leaf(json);
}

nlohmann::ordered_json value_memory_format(std::string_view name) {
  return ojson{{"type", "torch.memory_format"}, {"format", name}};
}

nlohmann::ordered_json value_complex(double re, double im) {
  return ojson{{"type", "complex"}, {"value", "(" + std::to_string(re) + "+" + std::to_string(im) + "j)"}};
}

nlohmann::ordered_json value_int_list(std::string_view type, const std::vector<std::optional<int64_t>> &v) {
  ojson list = ojson::array();
  for (const auto &x : v) list.push_back(x ? ojson(*x) : ojson(nullptr));
  return ojson{{"type", type}, {"value", std::move(list)}};
}

// ---- stack.json ----------------------------------------------------------------------------

std::string stack_line(std::string_view file, int64_t line, std::string_view function, std::string_view code) {
  constexpr std::string_view space = " \t\n\r\f\v";
  const size_t b = code.find_first_not_of(space);
  code = b == std::string_view::npos ? std::string_view() : code.substr(b, code.find_last_not_of(space) - b + 1);
  std::string s = "File ";
  s.append(file).append(", line ").append(std::to_string(line)).append(", in ").append(function).append(", \n ");
  return s.append(code);
}

}  // namespace tprobe
