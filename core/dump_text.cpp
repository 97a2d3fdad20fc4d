// tensor_leaf_text_append (dump_semantics.h) lives apart from dump_semantics.cpp because it writes
// through pyjson: the PyTorch capture compiles dump_semantics.cpp into its own library, with
// LibTorch's string ABI, and takes nothing else of core.
#include <algorithm>
#include <charconv>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "dump_semantics.h"
#include "pyjson.h"

namespace tprobe {

namespace {

// Whether JSON writes `s` as it is: printable ASCII with no quote or backslash.
bool written_as_is(std::string_view s) {
  for (const unsigned char c : s)
    if (c < 0x20 || c >= 0x7f || c == '"' || c == '\\') return false;
  return true;
}

}  // namespace

// Python's json.dump(leaf, indent=1) where the leaf sits `level` levels deep: one key a line at
// level + 1 spaces, the shape's items at level + 2. `out` first grows by a bound on the leaf's
// text, which is then written through a pointer and the rest cut off: appended piece by piece,
// the appends (a capacity check and a call each, ten keys and their indents a leaf) cost as much
// as finding the four statistics' digits, on the writer's path for every tensor.
void tensor_leaf_text_append(std::string &out, const tensor_facts &t, int level) {
  if (level < 0) throw std::invalid_argument("tensor_leaf_text_append: a negative level");
  const size_t dims = t.shape ? t.shape->size() : 0;
  const auto spaces = static_cast<size_t>(level) + 2;
  // Ten keys at most (eleven counted) with their indents; the strings, escaped (6 bytes a byte at
  // most, as \uXXXX), and the checksum; the shape's items; the statistics; the braces.
  const size_t bound = 11 * (spaces + 24) + 6 * (t.type.size() + t.dtype.size() + t.data_name.size()) + 32 +
                       (dims + 1) * (spaces + 24) + 4 * py_float_repr_max + spaces + 8;
  const size_t start = out.size();
  out.resize(start + bound);
  char *o = out.data() + start;
  const auto put = [&](std::string_view s) { o = std::copy(s.begin(), s.end(), o); };
  const auto newline = [&](int n) {
    *o++ = '\n';
    o = std::fill_n(o, n, ' ');
  };
  *o++ = '{';
  bool first = true;
  tensor_leaf_fields(t, [&](std::string_view key, const auto &value) {
    if (!first) *o++ = ',';
    first = false;
    newline(level + 1);
    *o++ = '"';
    put(key);  // the keys are plain ASCII
    put("\": ");
    using value_type = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<value_type, std::string_view>) {
      if (written_as_is(value)) {
        *o++ = '"';
        put(value);
        *o++ = '"';
      } else {
        std::string escaped;
        pyjson_string_append(escaped, value);
        put(escaped);
      }
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
      // A statistic as pyjson_dump writes stat_json(v), with no JSON value made.
      switch (value.k) {
        case stat_value::kind::null: return put("null");
        case stat_value::kind::boolean: return put(value.boolean ? "true" : "false");
        case stat_value::kind::integer: o = std::to_chars(o, o + 24, value.integer).ptr; return;
        case stat_value::kind::real: o = pyjson_real_write(o, value.real); return;
      }
    } else {
      static_assert(std::is_same_v<value_type, bool>);
      put(value ? "true" : "false");
    }
  });
  newline(level);
  *o++ = '}';
  out.resize(static_cast<size_t>(o - out.data()));
}

}  // namespace tprobe
