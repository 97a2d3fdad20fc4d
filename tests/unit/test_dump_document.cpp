// The writer's dump document (stages/stream/writer/dump_document.h): its text is pyjson_dump's
// for the same tree (Python's json.dump(…, indent=1)), whatever the tree, and its paths are made
// as nlohmann's operator[] makes them, which the writer's earlier JSON tree relied on.
#include <random>

#include <gtest/gtest.h>

#include "pyjson.h"
#include "writer/dump_document.h"

using namespace tprobe;
using json = nlohmann::ordered_json;

namespace {

// The text of {"data": <doc>} at indent 1, the way dump.json holds it, from both sides.
std::string rendered(const dump_document &doc) {
  std::string out;
  doc.render(out, 1);
  return out;
}
std::string expected(const json &data) {
  std::string out;
  pyjson_dump_append(out, data, 1, 1);
  return out;
}

json random_value(std::mt19937_64 &rng, int depth) {
  std::uniform_int_distribution<int> pick(0, depth > 4 ? 5 : 9);
  switch (pick(rng)) {
    case 0: return nullptr;
    case 1: return rng() % 2 == 0;
    case 2: return static_cast<int64_t>(rng()) >> (rng() % 64);
    case 3: {
      const double values[] = {0.1, -2.5e-300, 1e16, 3.0, std::nan(""), -std::numeric_limits<double>::infinity()};
      return values[rng() % 6] * static_cast<double>(rng() % 1000);
    }
    case 4: {
      const char *texts[] = {"", "plain", "quote \" and \\ slash", "caf\xc3\xa9 \xf0\x9f\x98\x80", "line\nbreak"};
      return texts[rng() % 5];
    }
    case 5: return rng() % 2 ? json::array() : json::object();
    case 6:
    case 7: {
      json a = json::array();
      for (size_t i = 0, n = rng() % 4; i < n; ++i) a.push_back(random_value(rng, depth + 1));
      return a;
    }
    default: {
      json o = json::object();
      for (size_t i = 0, n = rng() % 4; i < n; ++i) o[std::to_string(rng() % 6) + "k"] = random_value(rng, depth + 1);
      return o;
    }
  }
}

}  // namespace

TEST(DumpDocument, an_empty_document_is_an_empty_object) {
  dump_document doc;
  EXPECT_EQ(rendered(doc), "{}");
}

TEST(DumpDocument, any_tree_renders_as_pyjson_dumps_it) {
  std::mt19937_64 rng(20261127);
  for (int round = 0; round < 2000; ++round) {
    json data = json::object();
    dump_document doc;
    for (size_t i = 0, n = rng() % 5; i < n; ++i) {
      const std::string name = std::to_string(rng() % 8) + ".forward";
      json value = random_value(rng, 0);
      data[name] = value;
      // As a document read back from disk: set again when the name repeats, as data[name] does.
      doc.set_json(doc.entry(name).node, value, 2);
    }
    ASSERT_EQ(rendered(doc), expected(data)) << data.dump();
  }
}

TEST(DumpDocument, leaves_placed_on_paths_make_the_containers_operator_brackets_makes) {
  // What the writer does for a slot: a section, then list indices and dict keys, then the leaf's
  // text made for its depth. The same on an nlohmann tree gives the text to expect (its leaves
  // are the objects with a "type" key).
  std::mt19937_64 rng(7);
  for (int round = 0; round < 2000; ++round) {
    json data = json::object();
    dump_document doc;
    for (int placed = 0, n = 1 + static_cast<int>(rng() % 6); placed < n; ++placed) {
      const std::string name = rng() % 2 ? "Module.m0.forward.0" : "Module.m1.forward.0";
      auto [entry, created] = doc.entry(name);
      json *at = &data[name];
      if (created) {
        entry.type = dump_node::kind::object;
        entry.member("input_args").type = dump_node::kind::array;
        entry.member("input_kwargs").type = dump_node::kind::object;
        (*at)["input_args"] = json::array();
        (*at)["input_kwargs"] = json::object();
      }
      const char *sections[] = {"input_args", "input_kwargs", "output", "parameters"};
      const std::string section = sections[rng() % 4];
      dump_node *node = &entry.member(section);
      at = &(*at)[section];
      int level = 3;
      for (size_t depth = 0, d = rng() % 4; depth < d; ++depth, ++level) {
        if (rng() % 2) {
          const size_t index = rng() % 3;
          node = &node->item(index);
          if (!at->is_array()) *at = json::array();
          while (at->size() <= index) at->push_back(nullptr);
          at = &(*at)[index];
        } else {
          const std::string key = std::string("k").append(1, static_cast<char>('0' + rng() % 3));
          node = &node->member(key);
          // A leaf is text to the writer, never an object to add keys to, whatever it holds.
          if (!at->is_object() || at->contains("type")) *at = json::object();
          at = &(*at)[key];
        }
      }
      const json leaf = {{"type", "torch.Tensor"}, {"Max", static_cast<double>(rng() % 100) / 8}, {"shape", {2, 3}}};
      const size_t start = doc.text().size();
      pyjson_dump_append(doc.text(), leaf, 1, level);
      doc.set_text(*node, start);
      *at = leaf;
    }
    ASSERT_EQ(rendered(doc), expected(data)) << data.dump();
  }
}

TEST(DumpDocument, a_member_taken_and_appended_moves_last) {
  dump_document doc;
  dump_node &e = doc.entry("Module.m.forward.0").node;
  e.member("output").type = dump_node::kind::array;
  doc.set_json(e.member("is_recompute"), false, 3);
  dump_node flag = e.take("is_recompute");
  e.append("parameters", {});
  e.append("is_recompute", std::move(flag));
  EXPECT_EQ(e.take("absent").type, dump_node::kind::null);
  const json data = {{"Module.m.forward.0", {{"output", json::array()}, {"parameters", nullptr}, {"is_recompute", false}}}};
  EXPECT_EQ(rendered(doc), expected(data));
}

TEST(DumpDocument, an_entry_is_found_again_by_its_name) {
  dump_document doc;
  auto first = doc.entry("a");
  EXPECT_TRUE(first.created);
  for (int i = 0; i < 1000; ++i) doc.entry(std::to_string(i) + ".e");  // the deque grows; "a" stays
  auto again = doc.entry("a");
  EXPECT_FALSE(again.created);
  EXPECT_EQ(&first.node, &again.node);
  EXPECT_EQ(doc.size(), 1001u);
}

// stack.json straight from the writer's stacks is the text of the tree the writer built before
// (key "i" → [names, lines]) as pyjson_dump writes it: empty lists, escapes, non-ASCII, many keys.
TEST(DumpDocument, stack_json_is_what_pyjson_dumps_for_the_same_stacks) {
  EXPECT_EQ([] { std::string out; stack_json_text_append(out, {}); return out; }(), pyjson_dump(json::object(), 1));
  std::mt19937_64 rng(20261128);
  const char *texts[] = {"Functional.linear.0.forward", "File \"a.py\", line 3, in f, \n x = \"q\\\\\"",
                         "caf\xc3\xa9 \xf0\x9f\x98\x80\ttab", "", "line\nbreak \x01"};
  for (int round = 0; round < 500; ++round) {
    stack_list stacks(rng() % 14);
    json tree = json::object();
    for (size_t i = 0; i < stacks.size(); ++i) {
      for (size_t n = rng() % 4; n-- > 0;) stacks[i].first.emplace_back(texts[rng() % 5]);
      for (size_t n = rng() % 4; n-- > 0;) stacks[i].second.emplace_back(texts[rng() % 5]);
      tree[std::to_string(i)] = json::array({stacks[i].first, stacks[i].second});
    }
    std::string out = "kept ";
    stack_json_text_append(out, stacks);
    ASSERT_EQ(out, "kept " + pyjson_dump(tree, 1)) << tree.dump();
  }
}
