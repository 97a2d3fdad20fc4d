// graph_run.h: `tprobe graph NPU [BENCH] -o DIR`: msprobe 8.3.3's graph_visualize over dump folders
// (docs/stages/graph.md).
//
// NPU and BENCH are the same kind of folder: a rank folder (dump.json, construct.json, stack.json),
// a folder of rank folders (rank, rank0, rank1, …) or a folder of step folders (step0, step1, …) of
// rank folders. One path builds each rank's graph into DIR/build_{YYYYmmddHHMMSS}.vis.db; two
// compare them rank by rank (the ranks and steps both sides have; none in common is an error) into
// DIR/compare_{…}.vis.db, NPU graphs first, then the Bench ones, one file for every step and rank.
// With several ranks in a step, each side's communication nodes are linked across the ranks
// (graph_distributed.h).
//
// Errors: usage_error for a path that is none of those kinds, kinds that differ, no common rank or
// step, a dump without structure (level L1), and the graph library's errors, each naming the file;
// system_error when a folder or the output cannot be read or written.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "graph_compare.h"
#include "stage_main.h"

namespace tprobe {

struct graph_run_options {
  std::string npu_path, bench_path;  // bench empty: build
  std::string output_dir;
  bool fuzzy = false;
  std::string layer_mapping;  // a mapping file (compare's data-mapping format) of node names or module paths
  graph_rule rule = graph_rule::levels;
  unsigned threads = 0;  // tensor dumps: threads reading and comparing tensors; 0 = one per hardware thread
};

struct graph_rank_report {
  int64_t step = 0, rank = 0;
  size_t nodes = 0;
  graph_compare_result compare;  // compare only
};

struct graph_run_report {
  std::string db_path;
  std::string task;  // "build", or the compare's task ("summary", "md5", "all")
  std::vector<graph_rank_report> ranks;
  std::vector<std::string> warnings;
  size_t linked = 0;  // communication nodes linked to their counterparts on other ranks
  [[nodiscard]] size_t failing_ranks() const;  // ranks with a node in the error band
};

const stage_description &graph_stage_description();

[[nodiscard]] graph_run_report graph_run(const graph_run_options &options);

// The node-name mapping of a layer-mapping file applied to one node name: the whole name if it is a
// key, else its module path's longest mapped prefix ("Module.layer2.conv.Conv2d.forward.0" with
// "layer2: block2" -> "Module.block2.conv.Conv2d.forward.0"); the name itself when nothing applies.
[[nodiscard]] std::string graph_mapped_name(const std::string &name, const std::unordered_map<std::string, std::string> &mapping);

}  // namespace tprobe
