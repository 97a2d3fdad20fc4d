// graph_distributed.h: the communication nodes of one step's rank graphs linked to their
// counterparts on the other ranks (msprobe 8.3.3's DistributedAnalyzer; docs/stages/graph.md
// "Ranks"): tb_nodes.matched_distributed.
//
// Calls are read by nan_analyze's communication_facts_of (one reading of msprobe's src/dst and
// group arguments, and of tprobe's positional ones). Joined as the NaN analysis joins them: the
// k-th send from s to d with the k-th recv on d from s, when their first outputs' dtype, shape and
// statistics are equal (msprobe's check); a collective by its node name on every rank of its group
// (the whole step's ranks when the dump names no group).
// Each linked node gets {"communications_type": "send" | "receive" | "send_receive", "nodes_info":
// {"<rank>": ["<the other node's precision_index, or Nan>", "<its name>"]}}: a point-to-point node
// its peer; an undirected collective every other member; a directed collective's root every other
// member, each of them the root. Call after the compare (the indexes are the compare's).
#pragma once

#include <vector>

#include "graph_model.h"

namespace tprobe {

// `graphs`: one step's graphs of one side, one per rank. Returns the number of nodes linked.
size_t graph_link_communications(const std::vector<graph *> &graphs);

}  // namespace tprobe
