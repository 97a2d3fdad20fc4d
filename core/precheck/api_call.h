// api_call.h: one API call of a dump.json, as the pre-check replays it, without LibTorch.
//
// msprobe names an API by the Python function it wrapped (Functional.linear, Tensor.__add__,
// Torch.matmul) and dumps that function's Python arguments; tprobe names the ATen operator it
// observed and dumps the operator's schema arguments (positional ones in input_args, keyword-only
// ones in input_kwargs). normalize_call() brings both to the second form: the ATen operator
// ("aten::embedding") and its arguments in schema order, so that one replay (tools/precheck/replay.h)
// finds the operator through the dispatcher and binds the arguments by the schema, and so that the
// scripts of `tprobe repro` call torch.ops.aten the same way.
//
// Most Python APIs already take their operator's arguments in its order (linear, conv2d, matmul,
// layer_norm, gelu, …) and need nothing; the table in api_call.cpp rewrites the others (embedding's
// swapped operands, the losses' reduction strings, softmax's _stacklevel, the dunder methods, the
// varargs of Tensor.view/permute/repeat, …). An API the replay must never run (random, stateful,
// collective, allocation-only) carries the reason it is skipped.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace tprobe::precheck {

// "Functional.linear.0" → {"Functional", "linear", "0"}; "Torch.linalg.inv.0" → {"Torch",
// "linalg.inv", "0"}. nullopt for any other shape (msprobe's extract_basic_api_segments).
struct api_name_parts {
  std::string prefix, api, index;
};
[[nodiscard]] std::optional<api_name_parts> api_name_split(std::string_view full_name);

struct normalized_call {
  std::string op;          // "aten::embedding"; empty when skip is set
  nlohmann::ordered_json args;     // positional arguments in schema order (dump.json argument entries)
  nlohmann::ordered_json kwargs;   // by schema argument name
  std::optional<std::string> skip;  // why this API is never replayed (msprobe's SKIP message)
  bool in_place = false;   // the operator writes its first argument (add_, relu_, __iadd__)
  bool dropout = false;    // judged by msprobe's zero-fraction rule, not by values
  bool no_backward = false;  // msprobe's "no backward" and "unsupported backward" lists
};

// `forward` is the ".forward" entry (input_args, input_kwargs). Never throws for an unknown API:
// it is tried as aten::<api> and the replay's binding says whether the arguments fit.
[[nodiscard]] normalized_call normalize_call(std::string_view full_name, const nlohmann::ordered_json &forward);

}  // namespace tprobe::precheck
