// backward_link.h: backward entries from the autograd graph (torch_capture.h has the whole
// story). At a forward's end the capture subscribes to the autograd nodes the call created: the
// node holding an output's gradient function gets the forward's "input" slots of its backward
// entry (state::backward_node, BACKWARD_FUNCTION callback), and the nodes whose edges lead out of
// the call to an input get a post hook that captures the "output" slots (grad_input_hook).
// Nothing changes the graph or the order in which gradients accumulate.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <ATen/core/Tensor.h>
#include <torch/csrc/autograd/function.h>

namespace tprobe::torch_capture {

using torch::autograd::Node;

struct backward_link {
  std::string entry;                  // "Functional.linear.0.backward"
  std::optional<std::string> parent;  // construct.json parent (mix, L0)
  // Backward slots of forward inputs that get no gradient (tensors not requiring grad): null,
  // sent with the entry's first record, so that "output" keeps the forward's positions.
  std::vector<std::string> null_slots;
  bool nulls_sent = false;
};

// A forward input whose gradient the backward reports: the edge its gradient leaves through.
// Neither function nor leaf: a tensor that gets no gradient (its slot is null).
struct input_edge {
  std::string slot;                 // backward slot, "output.1"
  std::shared_ptr<Node> function;   // the input's grad_fn, or
  at::Tensor leaf;                  // a leaf input: its grad accumulator, resolved at the end
  uint32_t input_nr = 0;
  bool receives() const { return function || leaf.defined(); }
};

struct node_key {
  uint64_t thread, sequence;
  bool operator==(const node_key &) const = default;
};
struct node_key_hash {
  size_t operator()(const node_key &k) const { return std::hash<uint64_t>()(k.sequence * 1000003u ^ k.thread); }
};

// The gradients of a forward's outputs: inputs `slots` (node input → backward slot "input.0").
struct node_subscription {
  std::shared_ptr<backward_link> link;
  std::vector<std::pair<uint32_t, std::string>> slots;
};

// A module whose forward is running.
struct open_module {
  uint64_t sequence_begin = 0;
  std::vector<input_edge> inputs;
};

std::shared_ptr<backward_link> make_link(const std::string &entry, const std::optional<std::string> &parent);

// Slots and names of backward entries come from core/dump_semantics.h (slot_backward_of,
// entry_backward_of).

}  // namespace tprobe::torch_capture
