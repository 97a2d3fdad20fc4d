// op_names.h: how an ATen operator is named in a dump ("Functional.linear", "Tensor.add_").
//
// msprobe names an API by the Python namespace it was called through (torch.nn.functional →
// Functional, torch.Tensor → Tensor, torch → Torch). The capture sees the dispatcher's operator
// ("aten::linear"), not the Python call, so the prefix is a fixed function of the operator name,
// identical in every run and every torch version (two runs always align):
//
//   1. an operator nested inside another captured one (TPROBE_OP_DEPTH > 1)   → Aten
//   2. aten:: operators that torch.nn.functional exposes (linear, conv2d, relu, softmax,
//      layer_norm, dropout, the losses, the pools, …; the table in op_names.cpp)    → Functional
//   3. aten:: operators that are torch.Tensor methods only (view, expand, contiguous, to, repeat,
//      new_zeros, …), and in-place operators (name ends in "_": add_, mul_, copy_) → Tensor
//   4. other aten:: operators whose name starts with "_" (_softmax, _to_copy)         → Aten
//   5. other aten:: operators (add, matmul, mm, cat, sum, …)                          → Torch
//   6. c10d:: collectives → Distributed, under torch.distributed's name (allreduce_ →
//      all_reduce, allgather_ → all_gather, …)
//   7. any other namespace ns::name → Aten, api "ns_name" (msprobe's scope patterns accept
//      these prefixes only)
//
// The api part is the operator name without its overload ("aten::add.Tensor" → "add").
#pragma once

#include <string>
#include <string_view>

namespace tprobe::torch_capture {

struct op_name {
  std::string prefix;  // "Functional"
  std::string api;     // "linear"
  std::string counter;  // "Functional.linear.": its call count's key (op_callbacks.cpp); "" from op_name_of
};

// `qualified` is the operator's name as at::RecordFunction reports it ("aten::linear");
// `nested` is true for an operator called inside a captured one.
op_name op_name_of(std::string_view qualified, bool nested);

}  // namespace tprobe::torch_capture
