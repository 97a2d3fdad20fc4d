// backward_link.cpp: linking a forward call to its backward entry through the autograd graph
// (backward_link.h).
#include "backward_link.h"

#include <unordered_set>

#include <ATen/SequenceNumber.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "capture_state.h"
#include "dump_semantics.h"

namespace tprobe::torch_capture {

using torch::autograd::Node;
using torch::autograd::variable_list;

std::shared_ptr<backward_link> make_link(const std::string &entry, const std::optional<std::string> &parent) {
  auto link = std::make_shared<backward_link>();
  link->entry = entry;
  link->parent = parent;
  return link;
}

void state::note_edge(std::vector<input_edge> &edges, const std::string &forward_slot, const at::Tensor &t) {
  if (!t.defined()) return;
  input_edge e;
  e.slot = slot_backward_of(forward_slot);
  if (e.slot.empty()) return;  // keyword tensors have no place in a backward entry
  if (!t.requires_grad()) {
    edges.push_back(std::move(e));
    return;
  }
  if (const auto &fn = t.grad_fn()) {
    e.function = fn;
    e.input_nr = static_cast<uint32_t>(t.output_nr());
  } else {
    e.leaf = t;
  }
  edges.push_back(std::move(e));
}

void state::link_backward(const std::shared_ptr<backward_link> &link, uint64_t begin, std::vector<input_edge> &inputs,
                   const std::vector<std::pair<at::Tensor, std::string>> &outputs) {
  const uint64_t end = at::sequence_number::peek();
  if (end <= begin) return;  // the call made no autograd node
  const uint64_t thread = at::RecordFunction::currentThreadId();
  auto inside = [&](const Node *n) {
    const uint64_t s = n->sequence_nr();
    return s >= begin && s < end && n->thread_id() == thread;
  };
  std::vector<std::pair<const Node *, uint32_t>> targets;
  for (auto &e : inputs) {
    if (!e.receives()) {
      link->null_slots.push_back(e.slot);
      targets.emplace_back(nullptr, 0);  // matches no edge
    } else if (e.function) {
      targets.emplace_back(e.function.get(), e.input_nr);
    } else {
      const auto accumulator = torch::autograd::impl::try_get_grad_accumulator(e.leaf);
      targets.emplace_back(accumulator.get(), 0);
    }
  }
  std::vector<Node *> frontier;
  std::unordered_set<const Node *> seen;
  for (const auto &[t, slot] : outputs) {
    if (!t.defined() || !t.requires_grad()) continue;
    const auto &fn = t.grad_fn();
    if (!fn || !inside(fn.get())) continue;  // not made by this call (returned as it came)
    auto &subscriptions = node_inputs[node_key{thread, fn->sequence_nr()}];
    if (subscriptions.empty() || subscriptions.back().link != link) subscriptions.push_back({link, {}});
    subscriptions.back().slots.emplace_back(static_cast<uint32_t>(t.output_nr()), slot_backward_of(slot));
    if (seen.insert(fn.get()).second) frontier.push_back(fn.get());
  }
  while (!frontier.empty()) {
    Node *n = frontier.back();
    frontier.pop_back();
    std::vector<std::pair<size_t, std::string>> leaving;  // node output → backward slot
    const auto &next = n->next_edges();
    for (size_t k = 0; k < next.size(); ++k) {
      const Node *f = next[k].function.get();
      if (!f) continue;
      for (size_t j = 0; j < targets.size(); ++j)
        if (targets[j].first == f && targets[j].second == next[k].input_nr) leaving.emplace_back(k, inputs[j].slot);
      if (inside(f) && seen.insert(f).second) frontier.push_back(const_cast<Node *>(f));
    }
    if (!leaving.empty()) add_grad_input_hook(n, link, std::move(leaving));
  }
}

class grad_input_hook : public torch::autograd::FunctionPostHook {
 public:
  grad_input_hook(std::shared_ptr<backward_link> link, std::vector<std::pair<size_t, std::string>> leaving)
      : link_(std::move(link)), leaving_(std::move(leaving)) {}
  variable_list operator()(const variable_list &outputs, const variable_list & /*inputs*/) override {
    the_state().backward_outputs(*link_, leaving_, outputs);
    return outputs;
  }

 private:
  std::shared_ptr<backward_link> link_;
  std::vector<std::pair<size_t, std::string>> leaving_;
};

void state::add_grad_input_hook(Node *n, const std::shared_ptr<backward_link> &link,
                                std::vector<std::pair<size_t, std::string>> leaving) {
  n->add_post_hook(std::make_unique<grad_input_hook>(link, std::move(leaving)));
}

bool state::backward_begin(backward_link &link) {
  if (!entry_begin(link.entry, link.parent, -1, -1) || !backward_values) return false;
  if (!link.nulls_sent) {
    link.nulls_sent = true;
    for (const auto &slot : link.null_slots) capture_null(link.entry, slot);
  }
  return true;
}

void state::backward_outputs(backward_link &link, const std::vector<std::pair<size_t, std::string>> &leaving,
                      const variable_list &grads) {
  std::lock_guard lock(mutex);
  if (!backward_on.load() || !session) return;
  try {
    if (!backward_begin(link)) return;
    at::DisableRecordFunctionGuard no_record;
    at::NoGradGuard no_grad;
    std::vector<bool> done(leaving.size(), false);
    for (size_t i = 0; i < leaving.size(); ++i) {
      if (done[i]) continue;
      // An input used twice by the call (x * x) gets the sum of its gradients.
      at::Tensor g;
      for (size_t j = i; j < leaving.size(); ++j) {
        if (leaving[j].second != leaving[i].second) continue;
        done[j] = true;
        const size_t k = leaving[j].first;
        if (k >= grads.size() || !grads[k].defined()) continue;
        g = g.defined() ? g + grads[k] : grads[k];
      }
      capture_tensor(link.entry, leaving[i].second, g);
    }
  } catch (const std::exception &e) {
    fail(e.what());
  }
}

void state::backward_node(const at::RecordFunction &fn) {
  const int64_t sequence = fn.seqNr();
  if (sequence < 0) return;
  std::lock_guard lock(mutex);
  if (!session) return;
  const auto it = node_inputs.find(node_key{fn.forwardThreadId(), static_cast<uint64_t>(sequence)});
  if (it == node_inputs.end()) return;
  try {
    const auto grads = fn.inputs();
    for (const auto &sub : it->second) {
      if (!backward_begin(*sub.link)) continue;
      for (const auto &[nr, slot] : sub.slots) {
        if (nr < grads.size() && grads[nr].isTensor()) capture_tensor(sub.link->entry, slot, grads[nr].toTensor());
        else capture_null(sub.link->entry, slot);
      }
    }
  } catch (const std::exception &e) {
    fail(e.what());
  }
}

}  // namespace tprobe::torch_capture
