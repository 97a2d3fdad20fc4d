// graph_build.cpp: see graph_build.h.
#include "graph_build.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <regex>
#include <string_view>

#include <fmt/format.h>

#include "compare_cell.h"
#include "compare_dump.h"
#include "errors.h"
#include "graph_data.h"
#include "pyjson.h"

namespace tprobe {
namespace {

constexpr const char *root_name = "DefaultModel";  // msprobe's model_name

std::vector<std::string> split_dots(const std::string &name) {
  std::vector<std::string> out;
  size_t start = 0;
  for (;;) {
    const size_t dot = name.find('.', start);
    out.push_back(name.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return out;
    start = dot + 1;
  }
}

std::string join_dots(const std::vector<std::string> &fields, size_t count) {
  std::string out;
  for (size_t i = 0; i < count && i < fields.size(); ++i) {
    if (i) out += '.';
    out += fields[i];
  }
  return out;
}

bool all_digits(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); });
}

std::string replace_all(std::string s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size())) s.replace(at, from.size(), to);
  return s;
}

// "X.backward.3" -> "X.forward.3" (the last "backward" field only), "" when the name has none.
std::string twin_of(const std::string &name, const char *from, const char *to) {
  std::vector<std::string> f = split_dots(name);
  if (f.size() >= 2 && f[f.size() - 2] == from && all_digits(f.back())) {
    f[f.size() - 2] = to;
    return join_dots(f, f.size());
  }
  return "";
}

const nlohmann::ordered_json *parent_in(const nlohmann::ordered_json &construct, const std::string &name) {
  auto it = construct.find(name);
  return it == construct.end() ? nullptr : &*it;
}

// msprobe's parent fixes for backward nodes (graph-spec §3.2): the parent a backward node is hung
// under, given its construct.json parent (null: none).
std::optional<std::string> fixed_parent(const std::string &child, const std::optional<std::string> &parent,
                                        const nlohmann::ordered_json &construct) {
  const std::vector<std::string> f = split_dots(child);
  const bool module_backward = f.size() >= 2 && f[f.size() - 2] == "backward" && all_digits(f.back());
  const bool api_backward = !f.empty() && f.back() == "backward";
  auto via_forward_twin = [&]() -> std::optional<std::string> {
    const std::string forward = module_backward ? twin_of(child, "backward", "forward") : replace_all(child, "backward", "forward");
    const nlohmann::ordered_json *p = parent_in(construct, forward);
    if (!p || !p->is_string()) return std::nullopt;
    const std::string forward_parent = p->get<std::string>();
    std::string backward_parent = twin_of(forward_parent, "forward", "backward");
    if (backward_parent.empty()) backward_parent = replace_all(forward_parent, "forward", "backward");
    if (construct.contains(backward_parent)) return backward_parent;
    return std::nullopt;
  };
  if (!parent) {
    if (module_backward || api_backward) return via_forward_twin();
    return std::nullopt;
  }
  if (module_backward && f.size() >= 5) {
    const std::vector<std::string> pf = split_dots(*parent);
    if (pf.size() >= 4 && join_dots(f, f.size() - 4) != join_dots(pf, pf.size() - 3)) {
      const std::string forward = twin_of(child, "backward", "forward");
      const nlohmann::ordered_json *p = parent_in(construct, forward);
      if (p && p->is_string()) {
        const std::string mapped = twin_of(p->get<std::string>(), "forward", "backward");
        return mapped.empty() ? parent : std::optional<std::string>(mapped);
      }
      if (p && p->is_null()) return std::nullopt;
    }
  }
  return parent;
}

struct builder {
  graph g;
  std::vector<bool> attached;
  const nlohmann::ordered_json *data = nullptr;  // dump.json's "data"
  const stack_map *stacks = nullptr;
  bool keep_md5 = false;

  int ensure(const std::string &name) {
    auto it = g.index.find(name);
    if (it != g.index.end()) return it->second;
    graph_node n;
    n.name = name;
    n.kind = graph_kind_of(name);
    if (data) {
      auto entry = data->find(name);
      if (entry != data->end() && entry->is_object()) {
        graph_node_data(name, *entry, keep_md5, n.input_data, n.output_data);
        if (name.rfind("Distributed.", 0) == 0)
          n.communication = communication_facts_of(name, *entry, static_cast<int32_t>(g.rank));
      }
    }
    n.stack = stack_for(name);
    g.nodes.push_back(std::move(n));
    attached.push_back(false);
    const int idx = static_cast<int>(g.nodes.size() - 1);
    g.index.emplace(name, idx);
    return idx;
  }

  void attach(int child, int parent) {
    if (attached[static_cast<size_t>(child)] || child == parent) return;
    attached[static_cast<size_t>(child)] = true;
    g.nodes[static_cast<size_t>(child)].parent = parent;
    g.nodes[static_cast<size_t>(parent)].children.push_back(child);
  }

  std::vector<std::string> stack_for(const std::string &name) const {
    if (!stacks) return {};
    auto it = stacks->find(name);
    if (it != stacks->end()) return it->second;
    const std::vector<std::string> f = split_dots(name);
    std::string forward;
    if (f.size() >= 2 && f[f.size() - 2] == "backward" && all_digits(f.back()))
      forward = join_dots(f, f.size() - 2) + ".forward.0";  // msprobe: the count is forced to 0
    else if (!f.empty() && f.back() == "backward")
      forward = replace_all(name, "backward", "forward");
    if (forward.empty()) return {};
    auto twin = stacks->find(forward);
    if (twin != stacks->end()) return twin->second;
    return {"This backward node cannot find the forward node and cannot retrieve stack information."};
  }
};

// msprobe's recomputation handling: a module at the root's first level whose name does not look like
// a first-level module (Module.{n?}.name.{n?}.Class.forward.n) and whose forward/backward twin is
// there too was run again for the backward pass (activation checkpointing). Each is moved under the
// backward twin of the parent of the same module's regular forward calls, in order.
void handle_recompute(graph &g) {
  static const std::regex forward_end(R"(\.forward\.(\d+)$)");
  auto is_recompute = [](const std::vector<std::string> &s) {
    if (s.size() > 7) return true;
    if (s.size() == 7 && !(all_digits(s[1]) && all_digits(s[3]))) return true;
    return s.size() == 6 && !all_digits(s[1]);
  };
  std::vector<int> &top = g.nodes[0].children;
  std::set<std::string> at_top;
  for (int c : top) at_top.insert(g.nodes[static_cast<size_t>(c)].name);
  std::vector<std::pair<size_t, std::string>> recomputed;  // (position among the root's children, prefix)
  std::set<std::string> twins_seen;
  for (size_t i = 0; i < top.size(); ++i) {
    const graph_node &n = g.nodes[static_cast<size_t>(top[i])];
    if (n.kind != graph_node_kind::module) continue;
    std::vector<std::string> s = split_dots(n.name);
    if (s.size() < 3) continue;
    const std::string prefix = join_dots(s, s.size() - 2);
    if (twins_seen.count(n.name)) {
      recomputed.emplace_back(i, prefix);
      continue;
    }
    if (!is_recompute(s)) continue;
    s[s.size() - 2] = s[s.size() - 2] == "forward" ? "backward" : "forward";
    const std::string twin = join_dots(s, s.size());
    if (at_top.count(twin)) {
      recomputed.emplace_back(i, prefix);
      twins_seen.insert(twin);
    }
  }
  if (recomputed.empty()) return;
  std::set<std::string> prefixes;
  for (const auto &r : recomputed) prefixes.insert(r.second);
  std::map<std::string, std::vector<int>> regular;  // prefix -> its regular forward calls, last first
  for (size_t i = 1; i < g.nodes.size(); ++i) {
    const graph_node &n = g.nodes[i];
    if (n.kind != graph_node_kind::module || n.parent <= 0 || !std::regex_search(n.name, forward_end)) continue;
    const std::string prefix = std::regex_replace(n.name, forward_end, "");
    if (prefixes.count(prefix)) regular[prefix].push_back(static_cast<int>(i));
  }
  for (auto &[prefix, list] : regular) std::reverse(list.begin(), list.end());
  auto for_backward = regular;
  std::vector<size_t> moved;
  for (const auto &[position, prefix] : recomputed) {
    const int idx = top[position];
    graph_node &n = g.nodes[static_cast<size_t>(idx)];
    auto &lists = std::regex_search(n.name, forward_end) ? regular : for_backward;
    auto it = lists.find(prefix);
    if (it == lists.end() || it->second.empty()) continue;
    const int regular_call = it->second.back();
    it->second.pop_back();
    const std::string &regular_parent = g.nodes[static_cast<size_t>(g.nodes[static_cast<size_t>(regular_call)].parent)].name;
    const std::string new_parent = std::regex_replace(regular_parent, forward_end, ".backward.$1");
    auto p = g.index.find(new_parent);
    if (p == g.index.end()) continue;
    n.parent = p->second;
    g.nodes[static_cast<size_t>(p->second)].children.push_back(idx);
    moved.push_back(position);
  }
  std::sort(moved.rbegin(), moved.rend());
  for (size_t position : moved) top.erase(top.begin() + static_cast<std::ptrdiff_t>(position));
}

// Every run of two or more consecutive APIs among the root's children becomes one collection node.
void group_root_apis(graph &g) {
  std::vector<int> &children = g.nodes[0].children;
  std::vector<int> regrouped;
  int collections = 0;
  for (size_t i = 0; i < children.size();) {
    size_t end = i;
    while (end < children.size() && g.nodes[static_cast<size_t>(children[end])].kind == graph_node_kind::api) ++end;
    if (end - i >= 2) {
      graph_node c;
      c.name = fmt::format("Apis_Between_Modules.{}", collections++);
      c.kind = graph_node_kind::api_collection;
      c.parent = 0;
      const int idx = static_cast<int>(g.nodes.size());
      for (size_t k = i; k < end; ++k) {
        c.children.push_back(children[k]);
        g.nodes[static_cast<size_t>(children[k])].parent = idx;
      }
      g.nodes.push_back(std::move(c));
      g.index.emplace(g.nodes.back().name, idx);
      regrouped.push_back(idx);
      i = end;
    } else if (end > i) {
      regrouped.push_back(children[i]);
      i = end;
    } else {
      regrouped.push_back(children[i++]);
    }
  }
  g.nodes[0].children = std::move(regrouped);
}

// `{prefix}.parameters_grad[.k]` entries: module nodes, the last children of `{prefix}.backward.{n}`
// with the largest n; dropped where no such node is (msprobe's).
void add_parameters_grad(builder &b) {
  if (!b.data) return;
  static const std::regex grad_key(R"(^(.*)\.parameters_grad(\.\d+)?$)");
  for (const auto &[name, entry] : b.data->items()) {
    std::smatch m;
    if (b.g.index.count(name) || !std::regex_match(name, m, grad_key)) continue;
    const std::string prefix = m[1].str() + ".backward.";
    int target = -1;
    long best = -1;
    for (const auto &[other, idx] : b.g.index) {
      if (other.compare(0, prefix.size(), prefix) != 0 || !all_digits(std::string_view(other).substr(prefix.size()))) continue;
      const long n = std::stol(other.substr(prefix.size()));
      if (n > best) best = n, target = idx;
    }
    if (target < 0) continue;
    const int idx = b.ensure(name);
    b.g.nodes[static_cast<size_t>(idx)].kind = graph_node_kind::module;
    b.g.nodes[static_cast<size_t>(idx)].stack.clear();
    b.attach(idx, target);
  }
}

// msprobe's micro steps without Megatron's numbering: the root's children cut where a forward
// module follows a module that was not one; descendants take their top-level ancestor's.
void number_micro_steps(graph &g) {
  int batch = 0;
  bool after_backward = false;
  for (int child : g.nodes[0].children) {
    graph_node &n = g.nodes[static_cast<size_t>(child)];
    if (n.kind == graph_node_kind::module) {
      const bool forward = n.name.find(".forward.") != std::string::npos;
      if (forward && after_backward) ++batch;
      after_backward = !forward;
    }
    std::vector<int> todo{child};
    while (!todo.empty()) {
      const int at = todo.back();
      todo.pop_back();
      g.nodes[static_cast<size_t>(at)].micro_step = batch;
      for (int c : g.nodes[static_cast<size_t>(at)].children) todo.push_back(c);
    }
  }
  g.micro_steps = batch + 1;
}

}  // namespace

graph_node_kind graph_kind_of(const std::string &name) {
  // msprobe matches these as regular expressions, where "." is any character: "Module." is
  // "Module" and one more character.
  static const std::regex module_re("^(Module.|Cell.|optimizer|clip_grad)");
  static const std::regex api_re(
      "^(Tensor.|Torch.|Functional.|NPU.|VF.|Distributed.|Aten.|Mint.|Primitive.|Jit.|MintFunctional.|MindSpeed.)");
  if (std::regex_search(name, module_re)) return graph_node_kind::module;
  if (std::regex_search(name, api_re)) return graph_node_kind::api;
  return graph_node_kind::module;
}

graph graph_build(const std::string &rank_dir, const std::string &source, int64_t step, int64_t rank) {
  namespace fs = std::filesystem;
  const std::string construct_path = (fs::path(rank_dir) / "construct.json").string();
  const std::string dump_path = (fs::path(rank_dir) / "dump.json").string();
  const std::string stack_path = (fs::path(rank_dir) / "stack.json").string();
  std::error_code ec;
  if (!fs::exists(construct_path, ec))
    throw usage_error(fmt::format("{}: no construct.json: the graph needs a dump of level L0 or mix", rank_dir));
  const nlohmann::ordered_json construct = pyjson_load_file(construct_path);
  if (!construct.is_object())
    throw usage_error(fmt::format("{}: expected an object of node -> parent names", construct_path));
  if (construct.empty())
    throw usage_error(fmt::format("{}: empty: the graph needs a dump of level L0 or mix (level L1 records no structure)",
                                  construct_path));
  const nlohmann::ordered_json dump = pyjson_load_file(dump_path);
  if (!dump.is_object() || !dump.contains("data") || !dump["data"].is_object())
    throw usage_error(fmt::format("{}: not a dump.json: no 'data' object", dump_path));
  const stack_map stacks = fs::exists(stack_path, ec) ? stack_load(stack_path) : stack_map{};

  builder b;
  b.g.source = source;
  b.g.step = step;
  b.g.rank = rank;
  if (dump.contains("dump_data_dir") && dump["dump_data_dir"].is_string())
    b.g.dump_data_dir = dump["dump_data_dir"].get<std::string>();
  b.data = &dump["data"];
  b.stacks = &stacks;
  b.keep_md5 = graph_dump_has_md5(dump["data"]);
  {
    graph_node root;
    root.name = root_name;
    b.g.nodes.push_back(std::move(root));
    b.g.index.emplace(root_name, 0);
    b.attached.push_back(true);
  }
  for (const auto &[child, parent_value] : construct.items()) {
    if (!parent_value.is_null() && !parent_value.is_string())
      throw usage_error(fmt::format("{}: the parent of {} is not a name or null", construct_path, child));
    if (child == "megatron_micro_step_number") continue;
    std::optional<std::string> parent;
    if (parent_value.is_string()) parent = parent_value.get<std::string>();
    parent = fixed_parent(child, parent, construct);
    const int p = parent ? b.ensure(*parent) : 0;
    const int c = b.ensure(child);
    b.attach(c, p);
  }
  // A parent named but never listed itself hangs under the root, so that every node is in the tree.
  for (size_t i = 1; i < b.g.nodes.size(); ++i)
    if (!b.attached[i]) b.attach(static_cast<int>(i), 0);
  add_parameters_grad(b);
  handle_recompute(b.g);
  group_root_apis(b.g);
  number_micro_steps(b.g);
  return std::move(b.g);
}

}  // namespace tprobe
