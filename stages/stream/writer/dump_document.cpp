#include "dump_document.h"

#include <charconv>
#include <limits>

#include "errors.h"
#include "pyjson.h"

namespace tprobe {

namespace {

void newline_indent(std::string &out, int level) {
  out.push_back('\n');
  out.append(static_cast<size_t>(level), ' ');
}

void become(dump_node &node, dump_node::kind type) {
  if (node.type == type) return;
  node.type = type;
  node.items.clear();
  node.keys.clear();
  node.text_length = 0;
  node.text_offset = 0;
}

}  // namespace

dump_node &dump_node::member(std::string_view key) {
  if (dump_node *found = find(key)) return *found;
  become(*this, kind::object);
  keys.emplace_back(key);
  return items.emplace_back();
}

dump_node &dump_node::item(size_t index) {
  become(*this, kind::array);
  if (items.size() <= index) items.resize(index + 1);
  return items[index];
}

dump_node *dump_node::find(std::string_view key) {
  if (type != kind::object) return nullptr;
  for (size_t i = 0; i < keys.size(); ++i)
    if (keys[i] == key) return &items[i];
  return nullptr;
}

dump_node dump_node::take(std::string_view key) {
  if (type == kind::object)
    for (size_t i = 0; i < keys.size(); ++i)
      if (keys[i] == key) {
        dump_node taken = std::move(items[i]);
        items.erase(items.begin() + static_cast<std::ptrdiff_t>(i));
        keys.erase(keys.begin() + static_cast<std::ptrdiff_t>(i));
        return taken;
      }
  return {};
}

void dump_node::append(std::string key, dump_node value) {
  become(*this, kind::object);
  keys.push_back(std::move(key));
  items.push_back(std::move(value));
}

dump_document::entry_ref dump_document::entry(std::string_view name) {
  if (const auto it = index_.find(name); it != index_.end()) return {entries_[it->second].second, false};
  auto &added = entries_.emplace_back(std::string(name), dump_node{});
  index_.emplace(added.first, entries_.size() - 1);
  return {added.second, true};
}

void dump_document::reserve(size_t entries, size_t text_bytes) {
  index_.reserve(entries);
  text_.reserve(text_bytes);
}

void dump_document::set_text(dump_node &node, size_t start) {
  if (start > text_.size() || text_.size() - start > std::numeric_limits<uint32_t>::max())
    throw usage_error("dump_document: a leaf's text is over 4 GiB or began past the buffer's end");
  become(node, dump_node::kind::text);
  node.text_offset = start;
  node.text_length = static_cast<uint32_t>(text_.size() - start);
}

void dump_document::set_json(dump_node &node, const nlohmann::ordered_json &value, int level) {
  if (value.is_object()) {
    become(node, dump_node::kind::object);
    node.items.clear();
    node.keys.clear();
    node.keys.reserve(value.size());
    node.items.reserve(value.size());
    for (const auto &[key, item] : value.items()) {
      node.keys.push_back(key);
      set_json(node.items.emplace_back(), item, level + 1);
    }
  } else if (value.is_array()) {
    become(node, dump_node::kind::array);
    node.items.clear();
    node.items.resize(value.size());
    for (size_t i = 0; i < value.size(); ++i) set_json(node.items[i], value[i], level + 1);
  } else {
    const size_t start = text_.size();
    pyjson_dump_append(text_, value, 1, level);
    set_text(node, start);
  }
}

void dump_document::render(std::string &out, int level) const {
  if (entries_.empty()) {
    out.append("{}");
    return;
  }
  out.push_back('{');
  bool first = true;
  for (const auto &[name, node] : entries_) {
    if (!first) out.push_back(',');
    first = false;
    newline_indent(out, level + 1);
    pyjson_string_append(out, name);
    out.append(": ");
    render_node(out, node, level + 1);
  }
  newline_indent(out, level);
  out.push_back('}');
}

// Python's json.dump(…, indent=1) layout (pyjson.cpp's dump_value at indent 1), with a leaf's
// text copied as it was made.
void dump_document::render_node(std::string &out, const dump_node &node, int level) const {
  switch (node.type) {
    case dump_node::kind::null: out.append("null"); return;
    case dump_node::kind::text: out.append(text_, node.text_offset, node.text_length); return;
    case dump_node::kind::array:
    case dump_node::kind::object: {
      const bool object = node.type == dump_node::kind::object;
      if (node.items.empty()) {
        out.append(object ? "{}" : "[]");
        return;
      }
      out.push_back(object ? '{' : '[');
      for (size_t i = 0; i < node.items.size(); ++i) {
        if (i != 0) out.push_back(',');
        newline_indent(out, level + 1);
        if (object) {
          pyjson_string_append(out, node.keys[i]);
          out.append(": ");
        }
        render_node(out, node.items[i], level + 1);
      }
      newline_indent(out, level);
      out.push_back(object ? '}' : ']');
      return;
    }
  }
}

namespace {

// A list of strings `level` levels deep, as pyjson_dump writes it at indent 1.
void string_list_append(std::string &out, const std::vector<std::string> &items, int level) {
  if (items.empty()) {
    out.append("[]");
    return;
  }
  out.push_back('[');
  for (size_t i = 0; i < items.size(); ++i) {
    if (i != 0) out.push_back(',');
    newline_indent(out, level + 1);
    pyjson_string_append(out, items[i]);
  }
  newline_indent(out, level);
  out.push_back(']');
}

}  // namespace

void stack_json_text_append(std::string &out, const stack_list &stacks) {
  if (stacks.empty()) {
    out.append("{}");
    return;
  }
  out.push_back('{');
  char key[24];
  for (size_t i = 0; i < stacks.size(); ++i) {
    if (i != 0) out.push_back(',');
    newline_indent(out, 1);
    const auto end = std::to_chars(key, key + sizeof key, i).ptr;
    out.push_back('"');
    out.append(key, static_cast<size_t>(end - key));
    out.append("\": [");
    newline_indent(out, 2);
    string_list_append(out, stacks[i].first, 2);
    out.push_back(',');
    newline_indent(out, 2);
    string_list_append(out, stacks[i].second, 2);
    newline_indent(out, 1);
    out.push_back(']');
  }
  newline_indent(out, 0);
  out.push_back('}');
}

}  // namespace tprobe
