// tensor_leaf_text_append (dump_semantics.h) lives apart from dump_semantics.cpp because it writes
// through pyjson: the PyTorch capture compiles dump_semantics.cpp into its own library, with
// LibTorch's string ABI, and takes nothing else of core.
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

}  // namespace

void tensor_leaf_text_append(std::string &out, const tensor_facts &t, int level) {
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

}  // namespace tprobe
