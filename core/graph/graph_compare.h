// graph_compare.h: two graphs of the same model matched node by node and compared with the compare
// library's metrics (core/compare), as msprobe 8.3.3's graph compare does (docs/stages/graph.md
// "How two graphs are compared").
//
// Matching, in pre-order from the NPU root:
//   default      the bench node of the same name, with the same ancestors and the same number, kinds
//                and shapes of inputs and of outputs;
//   fuzzy        modules by name (shapes checked), and inside two matched modules their APIs by name
//                without call counts plus their order in the module;
//   layer_map    the bench name is the mapping's (a renamed layer), no ancestor or shape check.
// A matched pair's items are compared by position (inputs, parameters, outputs) in the dumps' mode:
// summary (statistics), md5 (CRC-32 fields) or all (tensor files, .npy or .pt); the NPU node gets
// the compare fields in its items (msprobe's names and texts). Both nodes get matched_node_link.
//
// precision_index, two rules (docs/stages/graph.md "Colours"):
//   levels (the default; msprobe's newer rule engine: pass 0, warning 0.5, error 1) blames the node
//     where the runs part: error when its inputs agree and its outputs do not (statistics: inputs'
//     largest relative error of the norm below 0.1 and an output's above 0.5; tensors: inputs'
//     lowest one-thousandth ratio above 0.9 and an output's below 0.1; md5: inputs equal and an
//     output not), when an output is NaN/Inf and the inputs and the bench's output are finite, or when
//     its parameters differ (above the same thresholds); warning for the milder cases (an output
//     above 0.1 / below 0.9 / cosine falling by more than 0.1) and for outputs whose dtype, shape or
//     requires_grad differ. A module or collection then carries the worst of its descendants, so the
//     path from the root to the first node where the runs part is coloured.
//   msprobe_833 (msprobe 8.3.3's own numbers and five colours): summary, the largest relative error of
//     the outputs, capped at 1, 1 for a NaN/Inf output; md5, 1 when all pass else 0; all, the inputs'
//     lowest one-thousandth ratio minus the outputs', in [0, 1]; a collection takes its children's
//     worst (md5: lowest), a module its own data.
// Unmatched nodes, the root and the bench side have none.
//
// Errors: usage_error when the two dumps' modes differ (compare's dump_mode). A tensor file that
// cannot be read makes its item's metrics "unsupported" and is counted in unreadable.
#pragma once

#include <functional>
#include <map>
#include <string>

#include "compare_table.h"
#include "graph_model.h"

namespace tprobe {

enum class graph_rule { levels, msprobe_833 };

// Fills the real-data metrics of every row of a table (mode all): tools/graph passes the compare
// library's thread pool and tensor readers (compare_tensor.h compare_fill_real_data), which read
// tensor files and load LibTorch for .pt files: the graph library stays free of both.
using graph_fill_real_data = std::function<void(compare_table &)>;

struct graph_compare_options {
  bool fuzzy = false;
  std::map<std::string, std::string> layer_map;  // NPU node name -> bench node name (-lm)
  graph_rule rule = graph_rule::levels;
  graph_fill_real_data fill_real_data;  // required for tensor dumps
};

struct graph_compare_result {
  std::string task;        // "summary", "md5" or "all": tb_config.task
  size_t matched = 0;      // NPU nodes with a bench counterpart (the root excluded)
  size_t unmatched = 0;    // NPU nodes without one
  size_t unreadable = 0;   // tensor items that could not be read (all mode)
  std::string first_error_node;  // the first NPU API or module (post-order) in the error band
};

// Matches npu against bench and writes the results into both (see above). npu.source must be "NPU",
// bench.source "Bench". `npu_dump` and `bench_dump` are the two dump.json paths (the compare mode and
// tensor files).
graph_compare_result graph_compare(graph &npu, graph &bench, const std::string &npu_dump, const std::string &bench_dump,
                                   const graph_compare_options &options);

// tb_config's node_colors for a task and rule, and tool_tip for a task (msprobe's texts).
[[nodiscard]] nlohmann::ordered_json graph_node_colors(const std::string &task, graph_rule rule);
[[nodiscard]] nlohmann::ordered_json graph_tool_tip(const std::string &task);

}  // namespace tprobe
