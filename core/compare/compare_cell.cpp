#include "compare_cell.h"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include <fmt/format.h>

#include "pyjson.h"

namespace tprobe {

double cell::number() const {
  if (k == kind::integer) return static_cast<double>(integer);
  if (k == kind::real) return real;
  return std::numeric_limits<double>::quiet_NaN();
}

std::string cell_str(const cell &c) {
  switch (c.k) {
    case cell::kind::empty: return {};
    case cell::kind::boolean: return c.boolean ? "True" : "False";
    case cell::kind::integer: return std::to_string(c.integer);
    case cell::kind::real: return py_float_repr(c.real);
    case cell::kind::text: return c.text;
  }
  return {};
}

namespace {

bool ascii_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    char x = a[i], y = b[i];
    if (x >= 'A' && x <= 'Z') x = static_cast<char>(x - 'A' + 'a');
    if (y >= 'A' && y <= 'Z') y = static_cast<char>(y - 'A' + 'a');
    if (x != y) return false;
  }
  return true;
}

bool is_digit(char c) { return c >= '0' && c <= '9'; }

}  // namespace

std::optional<double> py_float_parse(std::string_view s) {
  while (!s.empty() && ascii_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && ascii_space(s.back())) s.remove_suffix(1);
  if (s.empty()) return std::nullopt;
  bool negative = false;
  std::string_view body = s;
  if (body.front() == '+' || body.front() == '-') {
    negative = body.front() == '-';
    body.remove_prefix(1);
  }
  if (iequals(body, "inf") || iequals(body, "infinity"))
    return negative ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  if (iequals(body, "nan")) return std::numeric_limits<double>::quiet_NaN();
  // Grammar: digits [. digits*] | . digits, then an optional exponent. Python also allows single
  // underscores between digits; nothing msprobe writes has them, so they are refused here.
  size_t i = 0, digits = 0;
  while (i < body.size() && is_digit(body[i])) ++i, ++digits;
  if (i < body.size() && body[i] == '.') {
    ++i;
    while (i < body.size() && is_digit(body[i])) ++i, ++digits;
  }
  if (digits == 0) return std::nullopt;
  if (i < body.size() && (body[i] == 'e' || body[i] == 'E')) {
    ++i;
    if (i < body.size() && (body[i] == '+' || body[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < body.size() && is_digit(body[i])) ++i, ++exp_digits;
    if (exp_digits == 0) return std::nullopt;
  }
  if (i != body.size()) return std::nullopt;
  double v = 0.0;
  const auto r = std::from_chars(body.data(), body.data() + body.size(), v);
  if (r.ec == std::errc::result_out_of_range) {
    // from_chars leaves v unchanged on range errors; float() gives ±inf or ±0.
    const std::string copy(body);
    v = std::strtod(copy.c_str(), nullptr);
  } else if (r.ec != std::errc()) {
    return std::nullopt;
  }
  return negative ? -v : v;
}

double cell_to_numeric(const cell &c) {
  switch (c.k) {
    case cell::kind::integer: return static_cast<double>(c.integer);
    case cell::kind::real: return c.real;
    case cell::kind::text: {
      const auto v = py_float_parse(c.text);
      return v ? *v : std::numeric_limits<double>::quiet_NaN();
    }
    default: return std::numeric_limits<double>::quiet_NaN();
  }
}

namespace {

// printf's %.Nf is exact (glibc prints the binary value's decimal expansion, rounded half to even),
// which is what Python's '{:.Nf}'.format() and round() do.
double round_decimal(double x, int digits) {
  if (!std::isfinite(x)) return x;
  char buffer[400];
  std::snprintf(buffer, sizeof buffer, "%.*f", digits, x);
  return std::strtod(buffer, nullptr);
}

}  // namespace

double format_value(double x) { return round_decimal(x, 12); }

double py_round(double x, int digits) { return round_decimal(x, digits); }

namespace {

// Decodes one UTF-8 (or WTF-8) sequence at s[i]; returns the code point, or -1 for an invalid byte
// (consumed alone).
long decode_utf8(std::string_view s, size_t &i) {
  const auto c0 = static_cast<unsigned char>(s[i]);
  if (c0 < 0x80) {
    ++i;
    return c0;
  }
  int len = c0 >= 0xF0 && c0 < 0xF8 ? 4 : c0 >= 0xE0 ? 3 : c0 >= 0xC2 && c0 < 0xE0 ? 2 : 0;
  if (len == 0 || i + static_cast<size_t>(len) > s.size()) {
    ++i;
    return -1;
  }
  long cp = c0 & (len == 2 ? 0x1F : len == 3 ? 0x0F : 0x07);
  for (int k = 1; k < len; ++k) {
    const auto c = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((c & 0xC0) != 0x80) {
      ++i;
      return -1;
    }
    cp = (cp << 6) | (c & 0x3F);
  }
  i += static_cast<size_t>(len);
  return cp;
}

// Python's str.isprintable() is false for categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs other
// than ' '. The ranges below cover what occurs in practice (controls, format characters, the
// separators, surrogates, private use); other code points print as themselves.
bool py_printable(long cp) {
  if (cp < 0x20 || (cp >= 0x7F && cp <= 0xA0) || cp == 0xAD) return false;
  if (cp < 0x300) return true;
  if (cp == 0x34F || (cp >= 0x600 && cp <= 0x605) || cp == 0x61C || cp == 0x6DD || cp == 0x70F) return false;
  if (cp == 0x1680 || cp == 0x180E) return false;
  if ((cp >= 0x2000 && cp <= 0x200F) || (cp >= 0x2028 && cp <= 0x202F) || (cp >= 0x205F && cp <= 0x206F))
    return false;
  if (cp == 0x3000 || (cp >= 0xD800 && cp <= 0xF8FF) || cp == 0xFEFF || (cp >= 0xFFF9 && cp <= 0xFFFB))
    return false;
  if (cp == 0xFFFE || cp == 0xFFFF || (cp >= 0xF0000)) return false;
  return true;
}

}  // namespace

std::string py_str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out;
  out.reserve(s.size() + 2);
  out.push_back(quote);
  size_t i = 0;
  while (i < s.size()) {
    const size_t start = i;
    const long cp = decode_utf8(s, i);
    if (cp < 0) {
      fmt::format_to(std::back_inserter(out), "\\x{:02x}", static_cast<unsigned char>(s[start]));
      continue;
    }
    if (cp == '\\') {
      out += "\\\\";
    } else if (cp == quote) {
      out.push_back('\\');
      out.push_back(quote);
    } else if (cp == '\t') {
      out += "\\t";
    } else if (cp == '\n') {
      out += "\\n";
    } else if (cp == '\r') {
      out += "\\r";
    } else if (py_printable(cp)) {
      out.append(s.substr(start, i - start));
    } else if (cp < 0x100) {
      fmt::format_to(std::back_inserter(out), "\\x{:02x}", cp);
    } else if (cp < 0x10000) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", cp);
    } else {
      fmt::format_to(std::back_inserter(out), "\\U{:08x}", cp);
    }
  }
  out.push_back(quote);
  return out;
}

namespace {

void append_py(std::string &out, const nlohmann::ordered_json &v, bool repr) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::string:
      if (repr)
        out += py_str_repr(v.get_ref<const std::string &>());
      else
        out += v.get_ref<const std::string &>();
      return;
    case nlohmann::ordered_json::value_t::boolean: out += v.get<bool>() ? "True" : "False"; return;
    case nlohmann::ordered_json::value_t::null: out += "None"; return;
    case nlohmann::ordered_json::value_t::number_integer: out += std::to_string(v.get<int64_t>()); return;
    case nlohmann::ordered_json::value_t::number_unsigned: out += std::to_string(v.get<uint64_t>()); return;
    case nlohmann::ordered_json::value_t::number_float: out += py_float_repr(v.get<double>()); return;
    case nlohmann::ordered_json::value_t::array: {
      out.push_back('[');
      bool first = true;
      for (const auto &e : v) {
        if (!first) out += ", ";
        first = false;
        append_py(out, e, true);
      }
      out.push_back(']');
      return;
    }
    case nlohmann::ordered_json::value_t::object: {
      out.push_back('{');
      bool first = true;
      for (const auto &[key, value] : v.items()) {
        if (!first) out += ", ";
        first = false;
        out += py_str_repr(key);
        out += ": ";
        append_py(out, value, true);
      }
      out.push_back('}');
      return;
    }
    default: out += "None"; return;
  }
}

}  // namespace

std::string py_str(const nlohmann::ordered_json &v) {
  std::string out;
  append_py(out, v, false);
  return out;
}

std::string py_repr(const nlohmann::ordered_json &v) {
  std::string out;
  append_py(out, v, true);
  return out;
}

std::string py_type_str(const nlohmann::ordered_json &v) {
  switch (v.type()) {
    case nlohmann::ordered_json::value_t::null: return "<class 'NoneType'>";
    case nlohmann::ordered_json::value_t::boolean: return "<class 'bool'>";
    case nlohmann::ordered_json::value_t::number_integer:
    case nlohmann::ordered_json::value_t::number_unsigned: return "<class 'int'>";
    case nlohmann::ordered_json::value_t::number_float: return "<class 'float'>";
    case nlohmann::ordered_json::value_t::string: return "<class 'str'>";
    case nlohmann::ordered_json::value_t::array: return "<class 'list'>";
    default: return "<class 'dict'>";
  }
}

}  // namespace tprobe
