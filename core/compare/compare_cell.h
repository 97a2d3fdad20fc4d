// compare_cell.h: one cell of a compare result table, and the Python text forms msprobe's tables
// are made of (docs/msprobe-compat.md §4.5–§4.8).
//
// msprobe builds its result as a pandas DataFrame of Python objects: a metric is a float or a
// string such as 'unsupported', a statistic is whatever dump.json held (int, float, the strings
// "True"/"None"/"Nan"), Requires_grad Consistent is a bool. A `cell` keeps exactly that
// distinction, because it decides what msprobe does next (only int/float cells take part in the
// highlight rules; the xlsx gets a number or a string) and how a value prints ("1" vs "1.0").
//
// The helpers below reproduce the Python text forms those cells are written with: str() and
// repr() of the objects json.load returns, Python's float() parser, and msprobe's
// format_value() (12-decimal rounding).
//
// Thread-safe: pure functions and value types.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tprobe {

struct cell {
  enum class kind : uint8_t { empty, boolean, integer, real, text };
  kind k = kind::empty;
  bool boolean = false;
  int64_t integer = 0;
  double real = 0.0;
  std::string text;

  static cell none() { return {}; }
  static cell of_bool(bool v) { return {kind::boolean, v, 0, 0.0, {}}; }
  static cell of_int(int64_t v) { return {kind::integer, false, v, 0.0, {}}; }
  static cell of_real(double v) { return {kind::real, false, 0, v, {}}; }
  static cell of_text(std::string v) { return {kind::text, false, 0, 0.0, std::move(v)}; }

  // Python isinstance(v, (int, float)) and not bool: the cells msprobe's rules treat as numbers.
  [[nodiscard]] bool is_number() const { return k == kind::integer || k == kind::real; }
  // The number (integer converted); NaN when not a number.
  [[nodiscard]] double number() const;
  [[nodiscard]] bool is_text(std::string_view t) const { return k == kind::text && text == t; }
  bool operator==(const cell &) const = default;
};

// Python str(v): "True", "3", "0.1", "inf", "nan", the text itself; "" for an empty cell.
[[nodiscard]] std::string cell_str(const cell &c);

// Python float(text): decimal or exponent notation, "inf", "infinity", "nan" in any case, an
// optional sign, surrounding whitespace; nullopt where float() raises ValueError.
[[nodiscard]] std::optional<double> py_float_parse(std::string_view text);

// pandas.to_numeric(str(v), errors='coerce') for one cell: the number, or NaN where pandas gives
// NaN (text that is not a number, "nan", an empty cell, bools).
[[nodiscard]] double cell_to_numeric(const cell &c);

// msprobe's format_value(x) = float('{:.12f}'.format(x)): x rounded to 12 decimals (exactly, from
// its binary value); ±inf and NaN pass through.
[[nodiscard]] double format_value(double x);
// Python round(x, digits) for a float (correctly rounded, half to even on the exact value).
[[nodiscard]] double py_round(double x, int digits);

// Python repr(str): quoted with ' (or " when the text has ' and no "), escapes as Python writes them.
[[nodiscard]] std::string py_str_repr(std::string_view s);
// Python str() / repr() of the object json.load() returns for `v` (dict, list, str, int, float,
// bool, None): "[2, 3]", "{'a': 1}", "None", "True", "1.0".
[[nodiscard]] std::string py_str(const nlohmann::ordered_json &v);
// Python str(type(v)) of the object json.load() returns for `v`: "<class 'int'>", "<class 'NoneType'>".
[[nodiscard]] std::string py_type_str(const nlohmann::ordered_json &v);
[[nodiscard]] std::string py_repr(const nlohmann::ordered_json &v);

}  // namespace tprobe
