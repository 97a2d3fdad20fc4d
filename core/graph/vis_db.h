// vis_db.h: msprobe 8.3.3's graph file, `build_{ts}.vis.db` / `compare_{ts}.vis.db`: SQLite, tables
// tb_nodes (one row per node per graph), tb_stack (one row per distinct stack per graph) and
// tb_config (one row, id "1"), with msprobe's exact DDL, column types and indexes, so that
// msprobe's viewer (tb_graph_ascend) opens what tprobe writes (docs/stages/graph.md, "vis.db").
//
// Contract:
//   vis_db_write(path, graphs, config) creates `path` (it must not exist: usage_error naming it),
//   writes every node of every graph, in the order given (a compare gives the NPU graphs, then the
//   Bench ones), then tb_config, then the indexes, all in one transaction; the file is left in WAL
//   journal mode with permissions 0640, as msprobe leaves it. system_error (naming the file and
//   SQLite's message) when SQLite fails; nothing half-written is left behind then.
//   Per node: id `{graph_id}_{name}`, node_order its index in a post-order walk from the root
//   (children first, root last), node_type "0"/"1"/"9" as text, up_node the parent's name ('' for
//   the root), sub_nodes a JSON list of the children's names ('' when none), precision_index
//   an INTEGER when integral, a REAL otherwise, NULL when none; matched_node_link JSON ([] when
//   none); stack_id `{graph_id}_{n}`, n numbering the graph's distinct stacks (their JSON text) in
//   node_order; input_data / output_data / matched_distributed as Python's json.dumps writes them.
//   vis_db_read_nodes(path) reads tb_nodes back (tests, the report): one JSON object per row,
//   columns by name, in rowid order.
//   vis_db_read_config(path) reads tb_config's row (msprobe writes one, id "1") as one JSON object,
//   columns by name (node_colors, rank_list, step_list as the JSON text stored); null when the
//   table is empty. Both throw system_error (naming the file and SQLite's message) for a file that
//   is not such a database.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graph_model.h"

namespace tprobe {

void vis_db_write(const std::string &path, const std::vector<const graph *> &graphs, const vis_db_config &config);

[[nodiscard]] std::vector<nlohmann::ordered_json> vis_db_read_nodes(const std::string &path);
[[nodiscard]] nlohmann::ordered_json vis_db_read_config(const std::string &path);

}  // namespace tprobe
