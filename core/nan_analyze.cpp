#include "nan_analyze.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <deque>
#include <filesystem>
#include <set>

#include <fmt/format.h>

#include "dump_semantics.h"
#include "errors.h"
#include "pyjson.h"
#include "safe_path.h"

namespace tprobe {

namespace {

using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

std::string lower(std::string_view s) {
  std::string out(s);
  for (auto &c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

nan_state stat_state(const json &v) {
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (std::isnan(d)) return nan_state::nan;
    if (std::isinf(d)) return nan_state::inf;
  } else if (v.is_string()) {
    // msprobe's check_item_anomaly: str(x).lower() in {nan, inf, -inf}, also with a trailing tab.
    std::string s = lower(v.get<std::string>());
    if (!s.empty() && s.back() == '\t') s.pop_back();
    if (s == "nan") return nan_state::nan;
    if (s == "inf" || s == "-inf") return nan_state::inf;
  }
  return nan_state::clean;
}

// ---- one call's facts ----

struct leaf {
  std::string slot;
  nan_state state = nan_state::clean;
};

void walk(const json &v, const std::string &slot, std::vector<leaf> &out) {
  if (v.is_object()) {
    if (v.contains("Max") || v.contains("Min")) {
      out.push_back({slot, nan_leaf_state(v)});
      return;
    }
    for (const auto &[k, e] : v.items()) walk(e, slot + "." + k, out);
  } else if (v.is_array()) {
    for (size_t i = 0; i < v.size(); ++i) walk(v[i], slot + "." + std::to_string(i), out);
  }
}

enum class comm_type : uint8_t { none, link, src, dst };

struct call_facts {
  bool analysed = false;  // forward or backward entry
  bool backward = false;
  std::string prefix, api;  // "Torch", "exp"; empty for module entries
  std::vector<leaf> inputs, outputs;
  bool communication = false;
  comm_type type = comm_type::none;
  std::optional<int64_t> peer;  // send/recv: the other rank
  std::vector<int64_t> group_ranks;
};

const std::set<std::string, std::less<>> &communication_apis() {
  static const std::set<std::string, std::less<>> apis{
      "send",           "recv",          "broadcast",           "all_reduce",           "reduce",
      "all_gather",     "gather",        "isend",               "irecv",                "scatter",
      "reduce_scatter", "_reduce_scatter_base", "_all_gather_base", "all_to_all_single", "all_to_all",
      "all_gather_into_tensor", "reduce_scatter_tensor", "send_object_list", "recv_object_list",
      "all_reduce_coalesced", "all_gather_coalesced"};
  return apis;
}

// §5.2 step 3: the type a directed API has when its rank argument is this rank.
std::optional<comm_type> directed_type(std::string_view api) {
  static const std::pair<std::string_view, comm_type> table[] = {
      {"send", comm_type::dst},        {"recv", comm_type::src},    {"isend", comm_type::dst},
      {"irecv", comm_type::src},       {"broadcast", comm_type::src}, {"scatter", comm_type::src},
      {"gather", comm_type::dst},      {"reduce", comm_type::dst},  {"send_object_list", comm_type::dst},
      {"recv_object_list", comm_type::src}};
  for (const auto &[name, type] : table)
    if (name == api) return type;
  return std::nullopt;
}

comm_type opposite(comm_type t) { return t == comm_type::src ? comm_type::dst : comm_type::src; }

std::optional<int64_t> int_value(const json &v) {
  if (!v.is_object() || !v.contains("value")) return std::nullopt;
  const json &x = v["value"];
  if (x.is_number_integer()) return x.get<int64_t>();
  return std::nullopt;
}

void find_group_ranks(const json &v, std::vector<int64_t> &out) {
  if (!out.empty()) return;
  if (v.is_object()) {
    if (auto g = v.find("group_ranks"); g != v.end() && g->is_array()) {
      for (const auto &r : *g)
        if (r.is_number_integer()) out.push_back(r.get<int64_t>());
      return;
    }
    for (const auto &[k, e] : v.items()) find_group_ranks(e, out);
  } else if (v.is_array()) {
    for (const auto &e : v) find_group_ranks(e, out);
  }
}

void resolve_communication(const json &data, int32_t rank, call_facts &f) {
  f.communication = true;
  const json empty = json::object();
  const json &kwargs = data.contains("input_kwargs") && data["input_kwargs"].is_object() ? data["input_kwargs"] : empty;
  const json &args = data.contains("input_args") && data["input_args"].is_array() ? data["input_args"] : json::array();
  auto kwarg = [&](const char *a, const char *b) -> std::optional<int64_t> {
    for (const char *k : {a, b})
      if (kwargs.contains(k))
        if (auto v = int_value(kwargs[k])) return v;
    return std::nullopt;
  };
  std::optional<int64_t> first_int;
  for (const auto &a : args)
    if (auto v = int_value(a); v && a.value("type", "") == "int") {
      first_int = v;
      break;
    }
  if (auto src = kwarg("src", "group_src")) {
    f.type = *src == rank ? comm_type::src : comm_type::dst;
    f.peer = src;
  } else if (auto dst = kwarg("dst", "group_dst")) {
    f.type = *dst == rank ? comm_type::dst : comm_type::src;
    f.peer = dst;
  } else if (auto t = directed_type(f.api); t && first_int) {
    f.type = *first_int == rank ? *t : opposite(*t);
    f.peer = first_int;
  } else {
    f.type = comm_type::link;
  }
  find_group_ranks(kwargs, f.group_ranks);
  find_group_ranks(args, f.group_ranks);
}

call_facts facts_of(const nan_entry &e, int32_t rank) {
  call_facts f;
  const entry_name n = entry_parse(e.name);
  if (!n.is_forward() && !n.is_backward()) return f;
  if (!e.data.is_object()) return f;
  f.analysed = true;
  f.backward = n.is_backward();
  if (!n.is_module()) {
    const std::string_view base = n.base;
    const size_t dot = base.find('.');
    if (dot != std::string_view::npos) {
      f.prefix = base.substr(0, dot);
      f.api = base.substr(dot + 1);
    }
  }
  const json &d = e.data;
  auto section = [&](const char *key, const char *slot, std::vector<leaf> &out) {
    if (auto it = d.find(key); it != d.end()) walk(*it, slot, out);
  };
  if (f.backward) {
    section("input", "input", f.inputs);
  } else {
    section("input_args", "input", f.inputs);
    section("input_kwargs", "kwargs", f.inputs);
    section("parameters", "parameters", f.inputs);
  }
  section("output", "output", f.outputs);
  if (!f.backward && f.prefix == "Distributed" && communication_apis().count(f.api)) resolve_communication(d, rank, f);
  return f;
}

// ---- rules ----

bool slot_has_prefix(std::string_view slot, std::string_view prefix) {
  return slot == prefix || (slot.size() > prefix.size() && slot.starts_with(prefix) && slot[prefix.size()] == '.');
}

bool rule_matches_op(const nan_rule &r, const call_facts &f) {
  if (f.api.empty()) return false;
  if (r.op == "*") return true;
  const std::string op = lower(r.op);
  if (op.find('.') != std::string::npos) return op == lower(f.prefix + "." + f.api);
  return op == lower(f.api);
}

bool rule_ignores(const nan_rule &r, const call_facts &f, std::string_view slot) {
  if (r.receiver && f.type != comm_type::dst) return false;
  if (!rule_matches_op(r, f)) return false;
  return std::any_of(r.slots.begin(), r.slots.end(), [&](const std::string &p) { return slot_has_prefix(slot, p); });
}

// A call's tensors after the rules: what is left, and whether a rule hid a non-finite tensor.
struct judged {
  nan_state in = nan_state::clean, out = nan_state::clean;
  std::string first_bad_output;  // slot
  bool allowed = false;
};

judged judge(const call_facts &f, const nan_rules &rules) {
  std::vector<const nan_rule *> plain, conditional;
  for (const auto &r : rules.rules) {
    if (!rule_matches_op(r, f)) continue;
    (r.inputs_clean ? conditional : plain).push_back(&r);
  }
  auto hidden_by = [&](const std::vector<const nan_rule *> &set, std::string_view slot) {
    return std::any_of(set.begin(), set.end(), [&](const nan_rule *r) { return rule_ignores(*r, f, slot); });
  };
  judged j;
  // A conditional rule applies when the inputs that neither the plain rules nor its own slots
  // hide are clean.
  std::vector<const nan_rule *> active = plain;
  for (const nan_rule *r : conditional) {
    nan_state others = nan_state::clean;
    for (const auto &l : f.inputs)
      if (l.state != nan_state::clean && !hidden_by(plain, l.slot) && !hidden_by({r}, l.slot))
        others = std::max(others, l.state);
    if (others == nan_state::clean) active.push_back(r);
  }
  for (const auto &l : f.inputs) {
    if (l.state == nan_state::clean) continue;
    if (hidden_by(active, l.slot)) {
      j.allowed = true;
      continue;
    }
    j.in = std::max(j.in, l.state);
  }
  for (const auto &l : f.outputs) {
    if (l.state == nan_state::clean) continue;
    if (hidden_by(active, l.slot)) {
      j.allowed = true;
      continue;
    }
    if (l.state > j.out) j.first_bad_output = l.slot;
    j.out = std::max(j.out, l.state);
  }
  return j;
}

std::string_view state_name(nan_state s) { return s == nan_state::nan ? "nan" : s == nan_state::inf ? "inf" : "finite"; }

// ---- layers ----

struct node_ref {
  size_t rank_idx = 0, entry = 0;
};

struct union_find {
  std::vector<size_t> parent;
  explicit union_find(size_t n) : parent(n) {
    for (size_t i = 0; i < n; ++i) parent[i] = i;
  }
  size_t find(size_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  }
  void join(size_t a, size_t b) {
    a = find(a), b = find(b);
    if (a != b) parent[std::max(a, b)] = std::min(a, b);
  }
};

bool is_sender(std::string_view api) { return api == "send" || api == "isend" || api == "send_object_list"; }
bool is_receiver(std::string_view api) { return api == "recv" || api == "irecv" || api == "recv_object_list"; }

}  // namespace

nan_state nan_leaf_state(const nlohmann::ordered_json &leaf) {
  if (!leaf.is_object()) return nan_state::clean;
  if (auto u = leaf.find("uninitialized"); u != leaf.end() && u->is_boolean() && u->get<bool>()) return nan_state::clean;
  nan_state s = nan_state::clean;
  for (const char *key : {"Max", "Min"})
    if (auto it = leaf.find(key); it != leaf.end()) s = std::max(s, stat_state(*it));
  return s;
}

std::string_view nan_role_name(nan_role r) {
  switch (r) {
    case nan_role::producer: return "producer";
    case nan_role::propagator: return "propagator";
    default: return "clean";
  }
}

// ---- rules ----------------------------------------------------------------------------------

nan_rules nan_rules_default() {
  nan_rules r;
  for (const char *op : {"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided"})
    r.rules.push_back({op, {"output"}, false, false});
  for (const char *op : {"masked_fill", "masked_fill_", "full", "full_like", "new_full", "fill", "fill_", "index_fill",
                         "index_fill_"})
    r.rules.push_back({op, {"output"}, true, false});
  for (const char *op : {"recv", "irecv", "all_gather", "_all_gather_base", "all_gather_into_tensor", "reduce_scatter",
                         "_reduce_scatter_base", "reduce_scatter_tensor", "all_to_all", "all_to_all_single",
                         "recv_object_list"})
    r.rules.push_back({std::string("Distributed.") + op, {"input.0"}, false, false});
  for (const char *op : {"broadcast", "scatter", "gather"})
    r.rules.push_back({std::string("Distributed.") + op, {"input.0"}, false, true});
  return r;
}

nan_rules nan_rules_from_json(const nlohmann::ordered_json &doc, const std::string &where) {
  if (doc.is_null()) return nan_rules_default();
  if (!doc.is_object()) throw usage_error(fmt::format("{}: expected an object with \"allow\" and/or \"default_allow\"", where));
  for (const auto &[k, v] : doc.items())
    if (k != "allow" && k != "default_allow")
      throw usage_error(fmt::format("{}: unknown key \"{}\"; allowed keys: allow, default_allow", where, k));
  nan_rules out;
  bool defaults = true;
  if (auto d = doc.find("default_allow"); d != doc.end()) {
    if (!d->is_boolean()) throw usage_error(fmt::format("{}: default_allow: expected true or false", where));
    defaults = d->get<bool>();
  }
  if (defaults) out = nan_rules_default();
  const auto a = doc.find("allow");
  if (a == doc.end()) return out;
  if (!a->is_array()) throw usage_error(fmt::format("{}: allow: expected a list of rules", where));
  for (size_t i = 0; i < a->size(); ++i) {
    const json &r = (*a)[i];
    const std::string at = fmt::format("{}: allow[{}]", where, i);
    if (!r.is_object()) throw usage_error(at + ": expected an object {\"op\": …, \"slots\": […]}");
    nan_rule rule;
    for (const auto &[k, v] : r.items()) {
      if (k == "op") {
        if (!v.is_string() || v.get<std::string>().empty()) throw usage_error(at + ": op: expected a non-empty string");
        rule.op = v.get<std::string>();
      } else if (k == "slots") {
        if (!v.is_array() || v.empty()) throw usage_error(at + ": slots: expected a non-empty list of slot prefixes");
        for (const auto &s : v) {
          const std::string slot = s.is_string() ? s.get<std::string>() : std::string();
          const std::string first = slot.substr(0, slot.find('.'));
          if (first != "input" && first != "kwargs" && first != "output" && first != "parameters")
            throw usage_error(fmt::format("{}: slots: {} is not input, kwargs, output or parameters[.path]", at,
                                          s.dump()));
          rule.slots.push_back(slot);
        }
      } else if (k == "inputs_clean" || k == "receiver") {
        if (!v.is_boolean()) throw usage_error(fmt::format("{}: {}: expected true or false", at, k));
        (k == "inputs_clean" ? rule.inputs_clean : rule.receiver) = v.get<bool>();
      } else {
        throw usage_error(fmt::format("{}: unknown key \"{}\"; allowed keys: op, slots, inputs_clean, receiver", at, k));
      }
    }
    if (rule.op.empty() || rule.slots.empty()) throw usage_error(at + ": \"op\" and \"slots\" are required");
    out.rules.push_back(std::move(rule));
  }
  return out;
}

// ---- input ------------------------------------------------------------------------------------

std::map<std::string, std::vector<std::string>> nan_stacks_from_json(const nlohmann::ordered_json &stack) {
  std::map<std::string, std::vector<std::string>> out;
  if (!stack.is_object()) return out;
  auto lines_of = [](const json &v) {
    std::vector<std::string> lines;
    if (v.is_array())
      for (const auto &l : v)
        if (l.is_string()) lines.push_back(l.get<std::string>());
    return lines;
  };
  for (const auto &[key, v] : stack.items()) {
    // New format: "0": [[names…], [lines…]]; old: name: [lines…].
    if (v.is_array() && v.size() == 2 && v[0].is_array() && v[1].is_array()) {
      const auto lines = lines_of(v[1]);
      for (const auto &name : v[0])
        if (name.is_string()) out[name.get<std::string>()] = lines;
    } else {
      out[key] = lines_of(v);
    }
  }
  return out;
}

namespace {

// One rank folder: dump.json, and stack.json and construct.json when present.
nan_rank load_rank(int32_t rank, const fs::path &dir, std::vector<std::string> &warnings) {
  std::error_code error;
  nan_rank r;
  r.rank = rank;
  r.source = dir.string();
  const std::string dump_path = (dir / "dump.json").string();
  const json dump = pyjson_load_file(dump_path);
  if (!dump.is_object() || !dump.contains("data") || !dump["data"].is_object())
    throw usage_error(dump_path + ": no \"data\" object (not an msprobe dump.json)");
  std::map<std::string, std::vector<std::string>> stacks;
  const std::string stack_path = (dir / "stack.json").string(), construct_path = (dir / "construct.json").string();
  if (fs::exists(stack_path, error))
    stacks = nan_stacks_from_json(pyjson_load_file(stack_path));
  else
    warnings.push_back(stack_path + " is missing: stack_info stays empty");
  if (fs::exists(construct_path, error)) {
    const json construct = pyjson_load_file(construct_path);
    if (construct.is_object())
      for (const auto &[k, v] : construct.items())
        if (v.is_string()) r.parent_of[k] = v.get<std::string>();
  } else {
    warnings.push_back(construct_path + " is missing: construct_info holds the entry alone");
  }
  for (const auto &[name, data] : dump["data"].items()) {
    nan_entry e{name, data, {}};
    if (auto s = stacks.find(name); s != stacks.end()) e.stack = std::move(s->second);
    r.entries.push_back(std::move(e));
  }
  return r;
}

}  // namespace

std::vector<nan_rank> nan_load_step(const std::string &step_dir, std::vector<std::string> &warnings,
                                    std::vector<nan_rank_error> *errors) {
  std::error_code error;
  std::vector<std::pair<int32_t, fs::path>> dirs;
  fs::directory_iterator it(step_dir, error);
  if (error) throw system_error_from_errno("open", step_dir, error.value());
  for (const auto &e : it) {
    const std::string name = e.path().filename().string();
    if (!name.starts_with("rank")) continue;
    const std::string digits = name.substr(4);
    if (!digits.empty() && (digits.size() > 9 || digits.find_first_not_of("0123456789") != std::string::npos)) continue;
    if (!e.is_directory(error)) continue;
    dirs.emplace_back(digits.empty() ? 0 : static_cast<int32_t>(std::stol(digits)), e.path());
  }
  if (dirs.empty())
    throw usage_error(fmt::format("{}: no rank folders (rank, rank0, rank1, …) in this step folder", step_dir));
  std::sort(dirs.begin(), dirs.end());
  std::vector<nan_rank> ranks;
  for (const auto &[rank, dir] : dirs) {
    if (!errors) {
      ranks.push_back(load_rank(rank, dir, warnings));
      continue;
    }
    // One rank's unreadable files leave that rank out, never the whole step (as compare does a
    // step folder's ranks): the caller names it and counts it as an error.
    std::vector<std::string> rank_warnings;
    try {
      ranks.push_back(load_rank(rank, dir, rank_warnings));
      warnings.insert(warnings.end(), rank_warnings.begin(), rank_warnings.end());
    } catch (const system_error &e) {
      errors->push_back({rank, dir.string(), e.what(), true});
    } catch (const usage_error &e) {
      errors->push_back({rank, dir.string(), e.what(), false});
    }
  }
  return ranks;
}

// ---- analysis -----------------------------------------------------------------------------------

std::optional<nan_verdict> nan_analyze(const std::vector<nan_rank> &ranks, const nan_rules &rules) {
  // Facts of every call.
  std::vector<std::vector<call_facts>> facts(ranks.size());
  std::vector<std::vector<size_t>> comms(ranks.size());  // entry indices of communication calls
  for (size_t r = 0; r < ranks.size(); ++r) {
    for (const auto &e : ranks[r].entries) facts[r].push_back(facts_of(e, ranks[r].rank));
    for (size_t i = 0; i < facts[r].size(); ++i)
      if (facts[r][i].communication) comms[r].push_back(i);
  }

  // Join the communication calls that are one communication.
  std::vector<node_ref> nodes;
  std::vector<std::vector<size_t>> node_of(ranks.size());  // per rank, per comm index → node id
  for (size_t r = 0; r < ranks.size(); ++r)
    for (size_t i : comms[r]) {
      node_of[r].push_back(nodes.size());
      nodes.push_back({r, i});
    }
  union_find uf(nodes.size());
  std::map<std::string, size_t> by_name;                                 // collectives
  std::map<std::tuple<int64_t, int64_t, size_t>, size_t> sends, recvs;  // (from, to, k) → node
  std::map<std::pair<int64_t, int64_t>, size_t> send_count, recv_count;
  for (size_t id = 0; id < nodes.size(); ++id) {
    const auto &[r, i] = nodes[id];
    const call_facts &f = facts[r][i];
    const int64_t self = ranks[r].rank;
    if (is_sender(f.api) || is_receiver(f.api)) {
      if (!f.peer || *f.peer < 0) continue;
      if (is_sender(f.api)) {
        const auto key = std::make_pair(self, *f.peer);
        const auto k = send_count[key]++;
        sends[{self, *f.peer, k}] = id;
        if (auto m = recvs.find({self, *f.peer, k}); m != recvs.end()) uf.join(id, m->second);
      } else {
        const auto key = std::make_pair(*f.peer, self);
        const auto k = recv_count[key]++;
        recvs[{*f.peer, self, k}] = id;
        if (auto m = sends.find({*f.peer, self, k}); m != sends.end()) uf.join(id, m->second);
      }
      continue;
    }
    if (!f.group_ranks.empty() && std::find(f.group_ranks.begin(), f.group_ranks.end(), self) == f.group_ranks.end())
      continue;
    const std::string &name = ranks[r].entries[i].name;
    if (auto m = by_name.find(name); m != by_name.end())
      uf.join(id, m->second);
    else
      by_name.emplace(name, id);
  }
  std::vector<std::vector<size_t>> members(nodes.size());
  for (size_t id = 0; id < nodes.size(); ++id) members[uf.find(id)].push_back(id);

  // Layers: longest path over "precedes on some rank" (Kahn); a cycle (calls joined in different
  // orders on two ranks) is broken at its first group in node order.
  std::vector<std::vector<size_t>> next(nodes.size());
  std::vector<size_t> indegree(nodes.size(), 0);
  for (size_t r = 0; r < ranks.size(); ++r)
    for (size_t k = 1; k < node_of[r].size(); ++k) {
      const size_t a = uf.find(node_of[r][k - 1]), b = uf.find(node_of[r][k]);
      if (a == b) continue;
      next[a].push_back(b);
      ++indegree[b];
    }
  std::vector<int64_t> level(nodes.size(), 0);
  std::vector<bool> done(nodes.size(), false);
  std::deque<size_t> ready;
  size_t groups = 0, processed = 0;
  for (size_t g = 0; g < nodes.size(); ++g)
    if (uf.find(g) == g) {
      ++groups;
      if (indegree[g] == 0) ready.push_back(g);
    }
  while (processed < groups) {
    if (ready.empty())
      for (size_t g = 0; g < nodes.size(); ++g)
        if (uf.find(g) == g && !done[g]) {
          ready.push_back(g);
          break;
        }
    const size_t g = ready.front();
    ready.pop_front();
    if (done[g]) continue;
    done[g] = true;
    ++processed;
    for (size_t b : next[g]) {
      level[b] = std::max(level[b], level[g] + 1);
      if (indegree[b] > 0 && --indegree[b] == 0 && !done[b]) ready.push_back(b);
    }
  }

  // Classify every call.
  std::vector<std::vector<judged>> judgement(ranks.size());
  for (size_t r = 0; r < ranks.size(); ++r)
    for (const auto &f : facts[r]) judgement[r].push_back(f.analysed ? judge(f, rules) : judged{});

  nan_verdict v;
  for (size_t r = 0; r < ranks.size(); ++r) {
    size_t comm_k = 0;
    int64_t sub = 0;
    for (size_t i = 0; i < facts[r].size(); ++i) {
      const call_facts &f = facts[r][i];
      const judged &j = judgement[r][i];
      const bool comm = f.communication;
      nan_finding x;
      x.rank = ranks[r].rank;
      x.index = i;
      x.entry = ranks[r].entries[i].name;
      x.communication = comm;
      if (comm) {
        x.layer = level[uf.find(node_of[r][comm_k])];
        x.sub_layer = sub;
        ++comm_k;
        sub = 0;
      } else {
        x.sub_layer = sub++;
        x.layer = comm_k < node_of[r].size() ? level[uf.find(node_of[r][comm_k])]
                  : node_of[r].empty()       ? 0
                                             : level[uf.find(node_of[r].back())] + 1;
      }
      if (!f.analysed) continue;
      if (j.allowed && j.out == nan_state::clean) ++v.allowed;
      if (j.out == nan_state::clean) continue;
      ++v.anomalous;
      if (j.in == nan_state::clean) {
        x.role = nan_role::producer;
        x.why = fmt::format("inputs finite, {} {}", j.first_bad_output, state_name(j.out));
        if (comm) {
          const size_t me = node_of[r][comm_k - 1];
          const auto &group = members[uf.find(me)];
          for (size_t peer : group) {
            if (peer == me) continue;
            const judged &pj = judgement[nodes[peer].rank_idx][nodes[peer].entry];
            if (pj.in != nan_state::clean) {
              x.role = nan_role::propagator;
              x.why = fmt::format("inputs finite here, rank {}'s input to the same {} {}", ranks[nodes[peer].rank_idx].rank,
                                  f.api, state_name(pj.in));
              break;
            }
          }
          if (x.role == nan_role::producer && group.size() == 1) {
            x.peers_missing = true;
            x.why += "; no peer of this communication in the dump";
          }
        }
      } else if (j.in == nan_state::inf && j.out == nan_state::nan) {
        x.role = nan_role::producer;
        x.why = fmt::format("{} nan from inputs with inf only", j.first_bad_output);
      } else {
        x.role = nan_role::propagator;
      }
      if (x.role == nan_role::producer) v.producers.push_back(std::move(x));
    }
  }
  if (v.producers.empty()) return std::nullopt;

  auto key = [](const nan_finding &x) { return std::make_tuple(x.layer, x.communication, x.sub_layer, x.rank); };
  const auto first = std::min_element(v.producers.begin(), v.producers.end(),
                                      [&](const auto &a, const auto &b) { return key(a) < key(b); });
  v.first = *first;
  std::set<int32_t> seen{v.first.rank};
  std::vector<nan_finding> same_layer;
  for (const auto &p : v.producers)
    if (p.layer == v.first.layer) same_layer.push_back(p);
  std::sort(same_layer.begin(), same_layer.end(), [&](const auto &a, const auto &b) { return key(a) < key(b); });
  for (const auto &p : same_layer)
    if (seen.insert(p.rank).second) v.also.push_back(p);
  return v;
}

// ---- output -------------------------------------------------------------------------------------

nlohmann::ordered_json nan_result_json(const std::vector<nan_rank> &ranks, const nan_verdict &v) {
  json out = json::object();
  auto node = [&](const nan_finding &x) {
    const nan_rank *rank = nullptr;
    for (const auto &r : ranks)
      if (r.rank == x.rank) rank = &r;
    json n = json::object();
    n["op_name"] = x.entry;
    json info = json::object();
    const json empty;
    const json &data = rank && x.index < rank->entries.size() ? rank->entries[x.index].data : empty;
    auto field = [&](const char *key, json fallback) {
      info[key] = data.is_object() && data.contains(key) ? data[key] : std::move(fallback);
    };
    if (entry_parse(x.entry).is_backward()) {
      field("input", json::array());
      field("output", json::array());
    } else {
      field("input_args", json::array());
      field("input_kwargs", json::object());
      field("output", json::array());
    }
    n["data_info"] = std::move(info);
    std::vector<std::string> chain{x.entry};
    if (rank) {
      std::set<std::string> visited{x.entry};
      for (auto p = rank->parent_of.find(x.entry); p != rank->parent_of.end() && visited.insert(p->second).second;
           p = rank->parent_of.find(p->second))
        chain.insert(chain.begin(), p->second);
    }
    n["construct_info"] = chain;
    n["stack_info"] = rank && x.index < rank->entries.size() ? rank->entries[x.index].stack : std::vector<std::string>{};
    out["rank_" + std::to_string(x.rank)].push_back(std::move(n));
  };
  node(v.first);
  for (const auto &a : v.also) node(a);
  return out;
}

std::string nan_answer_line(const nan_verdict &v) {
  std::string line = fmt::format("first producer: rank {} {} ({}; layer {})", v.first.rank, v.first.entry, v.first.why,
                                 v.first.layer);
  for (const auto &a : v.also) line += fmt::format("; also rank {} {} (same layer)", a.rank, a.entry);
  return line;
}

std::string nan_write_result(const std::string &dir, const nlohmann::ordered_json &result) {
  const std::string text = pyjson_dump(result, 2);
  for (int attempt = 0;; ++attempt) {
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    const std::string path = fmt::format("{}/anomaly_analyze_{}.json", dir, ns);
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
    if (fd < 0) {
      if (errno == EEXIST && attempt < 100) continue;
      throw system_error_from_errno("create", path, errno);
    }
    try {
      safe_write_all(fd, text.data(), text.size(), path);
    } catch (...) {
      ::close(fd);
      throw;
    }
    if (::close(fd) != 0) throw system_error_from_errno("close", path, errno);
    return path;
  }
}

std::optional<communication_facts> communication_facts_of(const std::string &entry_name, const json &data,
                                                          int32_t rank) {
  const call_facts f = facts_of(nan_entry{entry_name, data}, rank);
  if (!f.communication) return std::nullopt;
  communication_facts c;
  c.api = f.api;
  c.peer = f.peer;
  c.point_to_point = is_sender(f.api) || is_receiver(f.api);
  c.directed = !c.point_to_point && directed_type(f.api).has_value();
  if (c.point_to_point) {
    c.sends = is_sender(f.api);
    c.receives = !c.sends;
  } else if (c.directed && f.peer) {
    // The root sends a broadcast or scatter and receives a gather or reduce; the others the opposite.
    const bool root = *f.peer == rank;
    const bool root_sends = *directed_type(f.api) == comm_type::src;
    c.sends = root == root_sends;
    c.receives = !c.sends;
  } else {
    c.sends = c.receives = true;
  }
  c.group_ranks = f.group_ranks;
  return c;
}

}  // namespace tprobe
