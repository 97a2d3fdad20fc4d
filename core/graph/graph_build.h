// graph_build.h: one rank folder's dump (construct.json, dump.json, stack.json) as msprobe 8.3.3's
// graph builder makes it (msprobe/visualization/builder; docs/stages/graph.md "How the graph is made").
//
//   - the root "DefaultModel"; construct.json's (child, parent) pairs in file order, a node attached
//     where it is first met; a backward node without a parent (or under a module other than its own)
//     re-parented through its forward twin's parent;
//   - every run of two or more consecutive APIs directly under the root grouped into a collection
//     node "Apis_Between_Modules.{k}" (runs inside modules are not grouped);
//   - `{prefix}.parameters_grad[.k]` entries of dump.json as module nodes, the last children of
//     their module's last backward call;
//   - node kinds by name prefix (Module./Cell./optimizer/clip_grad: module; Tensor./Torch./
//     Functional./NPU./VF./Distributed./Aten./Mint./Primitive./Jit./MintFunctional./MindSpeed.: API);
//   - input_data/output_data from the node's dump.json entry flattened as msprobe's read_op does
//     (input_args, input_kwargs, input, output, parameters; lists ".i", dicts ".key"), each item's
//     values formatted as msprobe's format_node_data (strings; 6 decimals; "null");
//   - stacks from stack.json (either form); a backward node takes its forward twin's.
//   - recomputation (activation checkpointing): a module re-run at the root's first level for the
//     backward pass (a name that is no first-level module's, with its forward/backward twin beside
//     it) moved under the backward twin of the parent of the module's regular forward calls;
//   - micro steps: the root's children cut where a forward module follows a backward one.
//
// Errors: usage_error naming the file for a missing or empty construct.json (msprobe: "select level
// L0 or mix"), a dump.json that is not msprobe's, a construct.json that is not an object of names;
// system_error for a file that cannot be read. Thread-safe: no shared state.
#pragma once

#include <string>

#include "graph_model.h"

namespace tprobe {

// The graph of the dump in `rank_dir` (the folder holding dump.json, construct.json, stack.json).
[[nodiscard]] graph graph_build(const std::string &rank_dir, const std::string &source, int64_t step, int64_t rank);

// The node kind msprobe gives a name (above).
[[nodiscard]] graph_node_kind graph_kind_of(const std::string &name);

}  // namespace tprobe
