// dump_document.h: dump.json's "data" object as the writer keeps it between rewrites.
//
// A folder's dump.json is rewritten every few seconds and at its step's end, and a step adds
// thousands of entries in its last milliseconds (the optimizer's burst), which step()'s barrier
// waits for. So an entry is kept as little as its text needs: a tree of sections, list items and
// dict keys (dump_node) whose leaves are text, made once for the depth they sit at, in one buffer
// a folder. A rewrite copies each leaf's text whole; nothing is parsed, re-indented or allocated
// per leaf, and freeing a finished step frees a few vectors an entry.
//
// The text render() writes is what pyjson_dump(…, indent=1) writes for the same tree (pyjson.h:
// Python's json.dump(obj, f, indent=1)), given leaf texts that pyjson_dump_append(text, value, 1,
// level) or a renderer tested against it (tensor_leaf_text_append) wrote for the leaf's depth.
// The caller knows the depth: dump.json's {"data": {entry: {section: …}}} puts an entry at level
// 2, a section's value at 3, and each path element one deeper.
//
// Not thread-safe; references to nodes stay valid until the node's parent changes shape (an item
// or key added to it, or its type changed), and entries' references until the document is
// destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

namespace tprobe {

class dump_document;

struct dump_node {
  enum class kind : uint8_t { null, text, array, object };
  kind type = kind::null;
  uint32_t text_length = 0;  // text: its bytes in the document's buffer
  size_t text_offset = 0;
  std::vector<dump_node> items;   // array items, or object values
  std::vector<std::string> keys;  // object: items[i]'s key

  // The object member `key`, appended as null when absent. A node that is not an object becomes
  // an empty one first (as nlohmann's operator[] does to null; the writer's paths rely on it).
  dump_node &member(std::string_view key);
  // The array item `index`, nulls appended up to it. A node that is not an array becomes an empty
  // one first.
  dump_node &item(size_t index);
  // The object member `key`, or nullptr (also for a node that is not an object).
  dump_node *find(std::string_view key);
  // Removes the object member `key` and returns it (null when absent).
  dump_node take(std::string_view key);
  // Appends `value` as the object member `key`, with no check for an existing one.
  void append(std::string key, dump_node value);
};

class dump_document {
 public:
  // The entry named `name`: an existing one, or a new null node appended last (created = true).
  struct entry_ref {
    dump_node &node;
    bool created;
  };
  entry_ref entry(std::string_view name);
  [[nodiscard]] size_t size() const { return entries_.size(); }
  void reserve(size_t entries, size_t text_bytes);

  // A leaf is written by appending its text here and then handing where it began to set_text.
  std::string &text() { return text_; }
  // `node` becomes the text appended to text() since `start`.
  void set_text(dump_node &node, size_t start);
  // `node` becomes `value`, which sits `level` levels deep: objects and arrays as nodes, every
  // other value as its text (a document read back from disk, an entry's is_recompute).
  void set_json(dump_node &node, const nlohmann::ordered_json &value, int level);

  // Appends the data object's text, as it is written `level` levels deep (dump.json: 1).
  void render(std::string &out, int level) const;

 private:
  void render_node(std::string &out, const dump_node &node, int level) const;

  // A deque: an entry's name never moves, so the index can point into it.
  std::deque<std::pair<std::string, dump_node>> entries_;
  std::unordered_map<std::string_view, size_t> index_;
  std::string text_;  // every leaf's text (a replaced leaf's stays, unused, until the folder ends)
};

// stack.json's text, {"0": [[entry names…], [stack lines…]], …} as pyjson_dump(…, indent=1)
// writes it, straight from the writer's stacks (index i is key "i"). A step's stacks are rewritten
// at its end, on step()'s barrier: building that tree first copied every name and line, and
// dumping it walked the copies again, half the time the step's files took.
using stack_list = std::vector<std::pair<std::vector<std::string>, std::vector<std::string>>>;
void stack_json_text_append(std::string &out, const stack_list &stacks);

}  // namespace tprobe
