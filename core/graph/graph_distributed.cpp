// graph_distributed.cpp: see graph_distributed.h.
#include "graph_distributed.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <tuple>

#include "pyjson.h"

namespace tprobe {
namespace {

using json = nlohmann::ordered_json;

struct comm_ref {
  graph *g;
  int node;
  const communication_facts &facts() const { return *g->nodes[static_cast<size_t>(node)].communication; }
  graph_node &n() const { return g->nodes[static_cast<size_t>(node)]; }
};

// Python's str() of the index msprobe reads from the other node, "Nan" where it has none.
std::string index_text(const graph_node &n) {
  if (!n.precision_index) return "Nan";
  const double v = *n.precision_index;
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return py_float_repr(v);
}

void add_info(const comm_ref &at, const comm_ref &other, const std::string &type) {
  json &m = at.n().matched_distributed;
  if (!m.is_object() || m.empty()) m = json{{"communications_type", type}, {"nodes_info", json::object()}};
  m["nodes_info"][std::to_string(other.g->rank)] = json::array({index_text(other.n()), other.n().name});
}

std::string type_of(const communication_facts &f) {
  if (f.sends && f.receives) return "send_receive";
  return f.sends ? "send" : "receive";
}

// msprobe's _node_output_all_equal on the first output item.
bool first_outputs_equal(const graph_node &a, const graph_node &b) {
  if (a.output_data.empty() || b.output_data.empty()) return false;
  const json &x = a.output_data.begin().value();
  const json &y = b.output_data.begin().value();
  for (const char *k : {"dtype", "shape", "Max", "Min", "Mean", "Norm"})
    if (x.value(k, json()) != y.value(k, json())) return false;
  return true;
}

}  // namespace

size_t graph_link_communications(const std::vector<graph *> &graphs) {
  std::set<int64_t> world;
  for (graph *g : graphs) world.insert(g->rank);
  std::map<std::tuple<int64_t, int64_t, size_t>, comm_ref> sends, recvs;
  std::map<std::pair<int64_t, int64_t>, size_t> send_count, recv_count;
  std::map<std::string, std::vector<comm_ref>> collectives;  // node name -> its calls on every rank
  for (graph *g : graphs) {
    // In execution order (the dump's): the k-th send pairs with the k-th recv.
    for (size_t i = 0; i < g->nodes.size(); ++i) {
      const graph_node &n = g->nodes[i];
      if (!n.communication) continue;
      const comm_ref ref{g, static_cast<int>(i)};
      const communication_facts &f = *n.communication;
      if (f.point_to_point) {
        if (!f.peer || *f.peer < 0) continue;
        if (f.sends) {
          const auto k = send_count[{g->rank, *f.peer}]++;
          sends.emplace(std::make_tuple(g->rank, *f.peer, k), ref);
        } else {
          const auto k = recv_count[{*f.peer, g->rank}]++;
          recvs.emplace(std::make_tuple(*f.peer, g->rank, k), ref);
        }
      } else {
        collectives[n.name].push_back(ref);
      }
    }
  }
  size_t linked = 0;
  for (const auto &[key, s] : sends) {
    auto r = recvs.find(key);
    if (r == recvs.end() || !first_outputs_equal(s.n(), r->second.n())) continue;
    add_info(s, r->second, "send");
    add_info(r->second, s, "receive");
    linked += 2;
  }
  for (auto &[name, calls] : collectives) {
    for (const comm_ref &at : calls) {
      const communication_facts &f = at.facts();
      const std::vector<int64_t> &group = f.group_ranks;
      auto member = [&](int64_t rank) {
        return group.empty() ? world.count(rank) > 0 : std::find(group.begin(), group.end(), rank) != group.end();
      };
      if (!member(at.g->rank)) continue;
      // A directed collective: its root lists every member, the others list the root (msprobe).
      if (f.directed && (!f.peer || *f.peer != at.g->rank)) continue;
      for (const comm_ref &other : calls) {
        if (other.g == at.g || !member(other.g->rank)) continue;
        add_info(at, other, type_of(f));
        if (f.directed) add_info(other, at, type_of(other.facts()));
      }
    }
    for (const comm_ref &at : calls)
      if (!at.n().matched_distributed.empty()) ++linked;
  }
  return linked;
}

}  // namespace tprobe
