// graph_model.h: one run's model graph as msprobe's graph visualization builds it (msprobe 8.3.3
// `msprobe -f pytorch graph`, docs/stages/graph.md): a tree of modules, APIs and collections of APIs
// made from construct.json, each node carrying its inputs' and outputs' statistics from dump.json
// and its call stack from stack.json, and, after a compare, its match on the other run and how far
// the two part (precision_index).
//
// The builder (graph_build.h) makes one graph per rank folder; the comparer (graph_compare.h)
// matches two graphs and fills the NPU side's metrics; the writer (vis_db.h) stores any number of
// graphs in msprobe's SQLite file (.vis.db) for msprobe's viewer (tb_graph_ascend) and tprobe's
// report. Value types only; no I/O here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json.hpp>

#include "nan_analyze.h"

namespace tprobe {

// msprobe's NodeOp values, written to tb_nodes.node_type as the text "0", "1", "9".
enum class graph_node_kind : int { module = 0, api = 1, api_collection = 9 };

struct graph_node {
  std::string name;  // "Module.layer1.Block.forward.0", "Functional.conv2d.0.forward", "Apis_Between_Modules.0"
  graph_node_kind kind = graph_node_kind::module;
  int parent = -1;            // index into graph::nodes; -1 for the root only
  std::vector<int> children;  // in msprobe's order (construct.json's, collections in place of their runs)
  // {key: {field: text}}: msprobe's format_node_data, every value a string ("2.862488", "True",
  // "null", "[2, 8]"); compare fields added to the NPU side's items after a compare. Keys are
  // `{name}.input.0`, `{name}.output.0`, `{name}.parameters.weight`, `{prefix}.parameters_grad.0.weight`.
  nlohmann::ordered_json input_data = nlohmann::ordered_json::object();
  nlohmann::ordered_json output_data = nlohmann::ordered_json::object();
  std::vector<std::string> stack;  // stack frames as stack.json holds them; empty for none
  int micro_step = 0;
  std::optional<double> precision_index;   // compare, NPU side, matched nodes (and collections) only
  std::vector<std::string> matched_link;   // the counterpart's ancestors, root first, then its name
  nlohmann::ordered_json matched_distributed = nlohmann::ordered_json::object();
  // A Distributed.* call's peers and direction (nan_analyze's reading), for the links across ranks.
  std::optional<communication_facts> communication;
};

struct graph {
  std::string source = "NPU";  // "NPU" (the run given first; also a build) or "Bench"
  int64_t step = 0;
  int64_t rank = 0;
  std::optional<std::string> dump_data_dir;  // dump.json's dump_data_dir (tensor dumps), else none
  std::vector<graph_node> nodes;             // nodes[0] is the root, "DefaultModel"
  std::unordered_map<std::string, int> index;  // node name -> index into nodes
  int micro_steps = 1;

  [[nodiscard]] std::string graph_id() const { return source + "_" + std::to_string(step) + "_" + std::to_string(rank); }
  [[nodiscard]] const graph_node *find(const std::string &name) const {
    auto it = index.find(name);
    return it == index.end() ? nullptr : &nodes[static_cast<size_t>(it->second)];
  }
};

// tb_config's one row.
struct vis_db_config {
  std::string graph_type = "build";  // "build" or "compare"
  std::string task;                  // compare: "summary", "md5" or "all"; build: ""
  std::optional<nlohmann::ordered_json> tool_tip;  // compare: metric -> description; build: none (NULL)
  std::optional<nlohmann::ordered_json> node_colors;  // compare: {hex: {value, description}}; build: none ("null")
  int micro_steps = 1;
  bool overflow_check = false;
  std::vector<int64_t> rank_list{0};
  std::vector<int64_t> step_list{0};
};

}  // namespace tprobe
