// tensor_leaf_text_append (dump_semantics.h) lives apart from dump_semantics.cpp because it writes
// through pyjson: the PyTorch capture compiles dump_semantics.cpp into its own library, with
// LibTorch's string ABI, and takes nothing else of core.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <string>
#include <type_traits>

#include "dump_semantics.h"
#include "pyjson.h"

namespace tprobe {

namespace {

// A statistic as pyjson_dump writes stat_json(v): with no JSON value made, destroyed or
// dispatched on (four of them a leaf, on the writer's path for every tensor).
void stat_text_append(std::string &out, const stat_value &v) {
  switch (v.k) {
    case stat_value::kind::null: out.append("null"); return;
    case stat_value::kind::boolean: out.append(v.boolean ? "true" : "false"); return;
    case stat_value::kind::integer: {
      char buf[24];
      const auto r = std::to_chars(buf, buf + sizeof buf, v.integer);
      out.append(buf, static_cast<size_t>(r.ptr - buf));
      return;
    }
    case stat_value::kind::real:
      if (std::isnan(v.real)) out.append("NaN");
      else if (std::isinf(v.real)) out.append(v.real > 0 ? "Infinity" : "-Infinity");
      else py_float_repr_append(out, v.real);
      return;
  }
}

// Any leaf, appended to `out` piece by piece.
void tensor_leaf_text_append_general(std::string &out, const tensor_facts &t, int level) {
  // Python's json.dump(leaf, indent=1) where the leaf sits `level` levels deep: one key a line at
  // level + 1 spaces, the shape's items at level + 2.
  const auto newline = [&](int spaces) {
    out.push_back('\n');
    out.append(static_cast<size_t>(spaces), ' ');
  };
  out.push_back('{');
  bool first = true;
  tensor_leaf_fields(t, [&](std::string_view key, const auto &value) {
    if (!first) out.push_back(',');
    first = false;
    newline(level + 1);
    out.push_back('"');
    out.append(key);  // the keys above are plain ASCII
    out.append("\": ");
    using value_type = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<value_type, std::string_view>) {
      pyjson_string_append(out, value);
    } else if constexpr (std::is_same_v<value_type, std::vector<int64_t>>) {
      if (value.empty()) {
        out.append("[]");
        return;
      }
      out.push_back('[');
      for (size_t i = 0; i < value.size(); ++i) {
        if (i != 0) out.push_back(',');
        newline(level + 2);
        char buf[24];
        const auto r = std::to_chars(buf, buf + sizeof buf, value[i]);
        out.append(buf, static_cast<size_t>(r.ptr - buf));
      }
      newline(level + 1);
      out.push_back(']');
    } else if constexpr (std::is_same_v<value_type, stat_value>) {
      stat_text_append(out, value);
    } else {
      static_assert(std::is_same_v<value_type, bool>);
      out.append(value ? "true" : "false");
    }
  });
  newline(level);
  out.push_back('}');
}


// Whether JSON writes `s` as it is: printable ASCII with no quote or backslash.
bool written_as_is(std::string_view s) {
  for (const unsigned char c : s)
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') return false;
  return true;
}

// The leaf built in a buffer on the stack and appended once: piece by piece, the appends (a
// capacity check and a call each, ten keys and their indents a leaf) cost as much as finding the
// four statistics' digits, on the writer's path for every tensor. Only for a leaf whose strings
// JSON writes as they are and whose text surely fits; false leaves `out` as it was.
bool tensor_leaf_text_append_buffered(std::string &out, const tensor_facts &t, int level) {
  constexpr size_t capacity = 2048;
  const size_t dims = t.shape ? t.shape->size() : 0;
  const auto spaces = static_cast<size_t>(level) + 2;
  // Twelve keys at most with their indents, the strings, the shape's items and the statistics.
  const size_t bound = 12 * (spaces + 24) + t.type.size() + t.dtype.size() + t.data_name.size() +
                       (dims + 1) * (spaces + 24) + 4 * py_float_repr_max + 64;
  if (level < 0 || bound > capacity) return false;
  char buf[capacity];
  char *o = buf;
  const auto put = [&](std::string_view s) { o = std::copy(s.begin(), s.end(), o); };
  const auto newline = [&](int n) {
    *o++ = '\n';
    o = std::fill_n(o, n, ' ');
  };
  bool as_is = true;
  *o++ = '{';
  bool first = true;
  tensor_leaf_fields(t, [&](std::string_view key, const auto &value) {
    if (!first) *o++ = ',';
    first = false;
    newline(level + 1);
    *o++ = '"';
    put(key);
    put("\": ");
    using value_type = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<value_type, std::string_view>) {
      as_is = as_is && written_as_is(value);
      *o++ = '"';
      put(value);
      *o++ = '"';
    } else if constexpr (std::is_same_v<value_type, std::vector<int64_t>>) {
      if (value.empty()) return put("[]");
      *o++ = '[';
      for (size_t i = 0; i < value.size(); ++i) {
        if (i != 0) *o++ = ',';
        newline(level + 2);
        o = std::to_chars(o, o + 24, value[i]).ptr;
      }
      newline(level + 1);
      *o++ = ']';
    } else if constexpr (std::is_same_v<value_type, stat_value>) {
      switch (value.k) {
        case stat_value::kind::null: return put("null");
        case stat_value::kind::boolean: return put(value.boolean ? "true" : "false");
        case stat_value::kind::integer: o = std::to_chars(o, o + 24, value.integer).ptr; return;
        case stat_value::kind::real:
          if (std::isnan(value.real)) return put("NaN");
          if (std::isinf(value.real)) return put(value.real > 0 ? "Infinity" : "-Infinity");
          o = py_float_repr_write(o, value.real);
          return;
      }
    } else {
      static_assert(std::is_same_v<value_type, bool>);
      put(value ? "true" : "false");
    }
  });
  newline(level);
  *o++ = '}';
  if (!as_is) return false;
  out.append(buf, static_cast<size_t>(o - buf));
  return true;
}

}  // namespace

void tensor_leaf_text_append(std::string &out, const tensor_facts &t, int level) {
  if (!tensor_leaf_text_append_buffered(out, t, level)) tensor_leaf_text_append_general(out, t, level);
}

}  // namespace tprobe
