// op_callbacks.cpp: the operator and autograd-node callbacks (at::RecordFunction), registered
// once per process and enabled while capturing (op_callbacks.h).
#include "op_callbacks.h"

#include <pthread.h>

#include <algorithm>
#include <cstring>
#include <string_view>
#include <vector>

#include <ATen/SequenceNumber.h>
#include <ATen/core/function_schema.h>

#include "capture_state.h"
#include "dump_semantics.h"
#include "python_stack.h"

namespace tprobe::torch_capture {

const op_info &state::info_of(const at::RecordFunction &fn) {
  // Keyed by the name's address, which for dispatcher operators is their schema's (one per
  // overload, alive as long as the operator); the name check catches a reused address.
  // Ranges named by a temporary string (no schema) are not cached: their addresses are not
  // stable, and the map would grow with every new one.
  static const op_info not_an_operator;
  const char *name = fn.name();
  std::lock_guard lock(info_mutex);
  if (auto it = infos.find(name); it != infos.end() && it->second->name == name) return *it->second;
  const auto schema = fn.operator_schema();
  if (!schema) return not_an_operator;
  auto info = std::make_unique<op_info>();
  info->name = name;
  info->outer = op_name_of(name, false);
  info->nested = op_name_of(name, true);
  for (op_name *n : {&info->outer, &info->nested}) n->counter = n->prefix + "." + n->api + ".";
  info->has_schema = true;
  if (const auto name_of = fn.operator_name()) info->operator_name = *name_of;
  info->zero_fills = std::string_view(name) == "aten::zero_" || std::string_view(name) == "aten::zeros" ||
                     std::string_view(name) == "aten::zeros_like" || std::string_view(name) == "aten::new_zeros";
  // Some operators write arguments their schema does not mark: a collective its buffers (c10d's
  // are not marked: every argument counts as written), batch and instance norm their running
  // statistics (unmarked in torch 1.13's batch_norm, native_batch_norm and cudnn_batch_norm).
  const std::string_view op(name);
  const bool collective = info->outer.prefix == "Distributed";
  const bool norm = (op.find("batch_norm") != op.npos || op.find("instance_norm") != op.npos) &&
                    op.find("backward") == op.npos;
  for (const auto &a : schema->arguments()) {
    const bool running_statistics = norm && (a.name() == "running_mean" || a.name() == "running_var");
    if (collective || running_statistics || (a.alias_info() && a.alias_info()->isWrite()))
      info->written.push_back(info->arguments.size());
    info->arguments.push_back({a.name(), a.kwarg_only()});
  }
  auto &slot = infos[name];
  slot = std::move(info);
  return *slot;
}

std::unique_ptr<at::ObserverContext> state::op_begin(const at::RecordFunction &fn, const op_info &info, int depth,
                                                    bool recompute) {
  if (!info.has_schema) return nullptr;
  std::unique_lock lock(mutex);
  if (!ops_on.load() || !session) return nullptr;
  try {
    collect_collectives();
    auto ctx = std::make_unique<op_context>();
    const op_name &n = depth == 0 ? info.outer : info.nested;
    const int64_t count = call_counts[n.counter]++;
    ctx->forward = entry_api_name(n.prefix, n.api, count, entry_direction::forward);
    if (mix && !module_stack.empty()) ctx->parent = module_stack.back();
    ++operators;
    // The call stack only for an entry the filters keep (a list or scope excludes most): the
    // walk takes the GIL, which must never be awaited under our mutex, so the lock is let go
    // for it, and the session checked again after.
    int stack = -1;
    if (options.stacks && entry_wanted(ctx->forward)) {
      tprobe_session *const before = session;
      lock.unlock();
      stack = python_stack_current();
      lock.lock();
      if (!ops_on.load() || session != before) return nullptr;
    }
    // The forward entry is announced whatever data_mode says: its stack and its place in
    // construct.json are written at every data_mode, as msprobe writes them; dump.json leaves
    // out what data_mode does (the writer, core/dump_semantics.h), and no tensor of a direction
    // it drops is read.
    const bool forward = entry_begin(ctx->forward, ctx->parent, stack, recompute ? 1 : 0) && allow_forward;
    ctx->capture_outputs = forward;
    ctx->outputs_zeroed = info.zero_fills;
    ctx->link = allow_backward && at::GradMode::is_enabled();
    if (ctx->link) {
      // Only a linked operator's backward is named (the optimizer's operators, under no_grad,
      // are most of a step's operators and have none).
      ctx->sequence_begin = at::sequence_number::peek();
      ctx->backward = entry_api_name(n.prefix, n.api, count, entry_direction::backward);
      if (ctx->parent) ctx->backward_parent = entry_backward_of(*ctx->parent);
    }
    const auto inputs = fn.inputs();
    if (!forward && !ctx->link) {
      forget_written(info, inputs);
      return nullptr;
    }
    if (forward && n.prefix == "Distributed") {
      ctx->collective = true;
      ctx->arguments.assign(inputs.begin(), inputs.end());
    }
    size_t positional = 0;
    for (size_t i = 0; i < inputs.size(); ++i) {
      const bool kw = i < info.arguments.size() && info.arguments[i].kwarg_only;
      const std::string arg = i < info.arguments.size() ? info.arguments[i].name : std::string();
      const std::string slot = kw ? "kwargs." + arg : "input." + std::to_string(positional++);
      capture_ivalue(ctx->forward, slot, inputs[i], arg, forward, ctx->link ? &ctx->inputs : nullptr);
    }
    forget_written(info, inputs);
    if (ctx->link && std::none_of(ctx->inputs.begin(), ctx->inputs.end(), [](const input_edge &e) {
          return e.receives();
        }))
      ctx->link = false;  // no input requires grad, so no output will
    if (!forward && !ctx->link) return nullptr;
    return ctx;
  } catch (const std::exception &e) {
    fail(e.what());
    return nullptr;
  }
}

void state::forget_written(const op_info &info, decltype(std::declval<const at::RecordFunction &>().inputs()) inputs) {
  if (contents.empty() && !device.has_deferred.load(std::memory_order_relaxed)) return;
  for (size_t i : info.written)
    if (i < inputs.size()) forget_contents_in(inputs[i]);
}

void state::watch_op(const at::RecordFunction &fn, const op_info &info) {
  std::lock_guard lock(mutex);
  if (!watch_on.load() || ops_on.load()) return;
  if (info.has_schema) forget_written(info, fn.inputs());
  if (--watch_ops_left <= 0) {
    watch_on = false;
    update_callbacks();  // forgets everything: what runs from here on is not watched
  }
}

void state::op_end(const at::RecordFunction &fn, op_context &ctx) {
  std::lock_guard lock(mutex);
  if (!session) return;
  try {
    const auto &outputs = fn.outputs();
    // A single list result (split, unbind) is the output list itself, as msprobe's is.
    const bool flatten = outputs.size() == 1 && outputs[0].isTensorList();
    std::vector<std::pair<at::Tensor, std::string>> linked;
    if (ctx.collective) collectives.push_back({ctx.forward, std::move(ctx.arguments)});
    auto add = [&](const c10::IValue &v, const std::string &slot) {
      if (ctx.capture_outputs && !ctx.collective) {
        capturing_zeroed = ctx.outputs_zeroed;
        capture_ivalue(ctx.forward, slot, v, {}, true, nullptr);
        capturing_zeroed = false;
      }
      if (ctx.link && v.isTensor()) linked.emplace_back(v.toTensor(), slot);
    };
    if (flatten) {
      const auto list = outputs[0].toTensorList();
      for (size_t j = 0; j < list.size(); ++j) add(c10::IValue(list.get(j)), "output." + std::to_string(j));
    } else {
      for (size_t i = 0; i < outputs.size(); ++i) add(outputs[i], "output." + std::to_string(i));
    }
    if (ctx.link && backward_on.load()) {
      auto link = make_link(ctx.backward, ctx.backward_parent);
      link_backward(link, ctx.sequence_begin, ctx.inputs, linked);
    }
  } catch (const std::exception &e) {
    capturing_zeroed = false;
    fail(e.what());
  }
}

namespace {

// ---- RecordFunction callbacks: registered once per process, enabled while capturing ----

bool is_own(const at::RecordFunction &fn) { return std::strncmp(fn.name(), "tprobe::", 8) == 0; }

// In a forked child (a DataLoader worker) the callbacks are still enabled but capture nothing:
// turn them off for good at the first chance outside the fork handler, where taking the callback
// registry's lock is safe.
void quiesce_after_fork(state &s) {
  static std::atomic<bool> done{false};
  if (done.exchange(true)) return;
  if (s.function_callback) at::disableCallback(*s.function_callback);
  if (s.backward_callback) at::disableCallback(*s.backward_callback);
}

// ---- Quiet below the captured depth ----
//
// A callback that needs inputs and outputs makes every RecordFunction on the thread box its
// operator's arguments and results, whether or not the callback wants them. Only the operators
// down to op_depth are captured, yet a transformer step runs ~5,300 RecordFunctions for its ~580
// captured operators: the ops inside them (linear's t and addmm) and inside the backward kernels.
// So while an operator at the deepest captured level runs, and while an autograd node runs, the
// thread's RecordFunction is off (at::enableRecordFunction, thread-local): its nested operators
// make none. Never when
//   - the operator has no schema: the autograd engine's evaluate_function ranges are FUNCTION
//     scope too, and the node inside them must still reach on_backward_start;
//   - a thread-local callback is registered (the profiler is one): it wants every operator;
//   - TPROBE_DEVICE_STATS=deferred: every write must pass flush_before_write (device_stats.h);
//   - TPROBE_QUIET_NESTED=off.
// Only C++ autograd nodes are quiet: a Python one (a custom autograd.Function's backward) may run
// module hooks that link what they see, or a reentrant backward (checkpoint) whose nodes must reach
// on_backward_start.
thread_local int tl_quiet_depth = -1;   // the depth whose operator turned RecordFunction off
thread_local bool tl_quiet_node = false;  // an autograd node turned it off

bool may_quiet(const state &s) {
  return s.quiet_nested && !device_path_settings_get().deferred_copies && !at::hasThreadLocalCallbacks();
}

// The nodes PyTorch generates are named `{Op}Backward{N}` (AddmmBackward0) and run ATen operators
// only; so does AccumulateGrad. A Python Function's node is named after its class
// (`{Function}Backward`), a C++ Function's after its type, and CopySlices runs another node inside
// it: those are not quiet.
bool is_generated_node(std::string_view name) {
  return (!name.empty() && name.back() >= '0' && name.back() <= '9' && name.find("Backward") != name.npos) ||
         name == "torch::autograd::AccumulateGrad";
}

// A Python autograd.Function's apply is a FUNCTION-scope RecordFunction too, named after its class
// and without a schema. It is not an operator: the operators its forward calls are the outermost
// ones, as msprobe, which hooks them from Python, dumps them (checkpoint's forward, a model's own
// fused functions). So it does not count as a level of depth; its RecordFunction is kept here to
// know it at its end. The ranges PyTorch names in C++ (`autograd::engine::evaluate_function: ...`,
// holding the gradient sums the engine runs between nodes) have a `::` and still count.
thread_local std::vector<const at::RecordFunction *> tl_function_applies;

// Recomputation (capture_state.h `recomputing`) happens in two places, each a frame here: a Python
// Function's backward node (a reentrant checkpoint, a custom Function's backward), and a
// saved-tensor hooks context entered while a node runs (a non-reentrant checkpoint recomputing
// inside the node that unpacks its saved tensors: recompute_scope_enter). The operators a frame
// runs directly are the outermost again, so depth counts from where it began. A node nested in it
// (a reentrant checkpoint's backward through the recomputed graph) is not a recomputation.
struct recompute_frame {
  const at::RecordFunction *range;  // a node's own, to know it at its end; null for a scope
  int backward_depth;               // tl_backward_depth inside the frame
  int depth_base;                   // tl_depth when it began: its own operators' depth 0
};
thread_local std::vector<recompute_frame> tl_recompute_frames;

bool in_recompute_frame() {
  return !tl_recompute_frames.empty() && tl_recompute_frames.back().backward_depth == tl_backward_depth;
}

// The nodes of Functions written in Python are named after their class, `{Function}Backward`: not
// generated (the caller has asked is_generated_node), no `::` (a C++ node's name is its qualified
// type), not a number at the end.
bool is_python_node(std::string_view name, bool generated) {
  return !generated && name.find("::") == name.npos && name.size() > 8 && name.substr(name.size() - 8) == "Backward";
}

bool is_function_apply(state &s, const at::RecordFunction &fn) {
  return std::strchr(fn.name(), ':') == nullptr && !s.info_of(fn).has_schema;
}

std::unique_ptr<at::ObserverContext> on_function_start(const at::RecordFunction &fn) {
  if (is_own(fn)) return nullptr;
  state &s = the_state();
  if (s.forked) {  // before any lock: one held at the fork is never let go in the child
    ++tl_depth;
    quiesce_after_fork(s);
    return nullptr;
  }
  if (is_function_apply(s, fn)) {
    tl_function_applies.push_back(&fn);
    return nullptr;
  }
  const int absolute_depth = tl_depth++;
  // Before the early returns: an operator nested too deep to capture, in backward or on another
  // thread still writes memory a deferred copy has yet to read (device_stats.h).
  if (s.device.has_deferred.load(std::memory_order_acquire)) s.flush_before_write(fn);
  const bool capturing = s.ops_on.load(std::memory_order_relaxed);
  if ((!capturing && !s.watch_on.load(std::memory_order_relaxed)) ||
      at::RecordFunction::currentThreadId() != s.training_thread)
    return nullptr;
  const bool recompute = tl_backward_depth > 0 && in_recompute_frame();
  const int depth = recompute ? absolute_depth - tl_recompute_frames.back().depth_base : absolute_depth;
  if ((tl_backward_depth > 0 && !recompute) || depth >= s.options.op_depth) {
    if (capturing) s.nested_record_functions.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  const op_info &info = s.info_of(fn);
  std::unique_ptr<at::ObserverContext> ctx;
  if (capturing && s.fuzz) ctx = recompute ? nullptr : s.fuzz_begin(fn, info, depth);
  else if (capturing) ctx = s.op_begin(fn, info, depth, recompute);
  else s.watch_op(fn, info);
  if (info.has_schema && depth + 1 == s.options.op_depth && may_quiet(s)) {
    tl_quiet_depth = absolute_depth;
    at::enableRecordFunction(false);
  }
  return ctx;
}

void on_function_end(const at::RecordFunction &fn, at::ObserverContext *ctx) {
  if (is_own(fn)) return;
  if (!tl_function_applies.empty() && tl_function_applies.back() == &fn) {
    tl_function_applies.pop_back();
    return;
  }
  if (--tl_depth == tl_quiet_depth) {
    tl_quiet_depth = -1;
    at::enableRecordFunction(true);
  }
  if (!ctx) return;
  auto &c = *static_cast<op_context *>(ctx);
  if (c.fuzz) the_state().fuzz_end(fn, c);
  else the_state().op_end(fn, c);
}

std::unique_ptr<at::ObserverContext> on_backward_start(const at::RecordFunction &fn) {
  ++tl_backward_depth;
  state &s = the_state();
  if (s.forked) {
    quiesce_after_fork(s);
    return nullptr;
  }
  if (s.backward_on.load(std::memory_order_relaxed)) s.backward_node(fn);
  // A node beginning at this depth means none at it or deeper is still open: an entry left there
  // (its end never reached us, the callback switched off in between) must not make the operators
  // of a generated node look recomputed.
  while (!tl_recompute_frames.empty() && tl_recompute_frames.back().backward_depth >= tl_backward_depth)
    tl_recompute_frames.pop_back();
  const std::string_view name = fn.name();
  const bool generated = is_generated_node(name);
  if (is_python_node(name, generated)) tl_recompute_frames.push_back({&fn, tl_backward_depth, tl_depth});
  if (!tl_quiet_node && s.ops_on.load(std::memory_order_relaxed) && generated && may_quiet(s)) {
    tl_quiet_node = true;
    at::enableRecordFunction(false);
  }
  return nullptr;
}

void on_backward_end(const at::RecordFunction &fn, at::ObserverContext *) {
  if (!tl_recompute_frames.empty() && tl_recompute_frames.back().range == &fn) tl_recompute_frames.pop_back();
  --tl_backward_depth;
  if (tl_quiet_node) {
    tl_quiet_node = false;
    at::enableRecordFunction(true);
  }
}

}  // namespace

bool recomputing() { return tl_backward_depth > 0 && in_recompute_frame(); }

bool recompute_scope_enter() {
  state &s = the_state();
  if (tl_backward_depth == 0 || s.forked || !s.ops_on.load(std::memory_order_relaxed) ||
      at::RecordFunction::currentThreadId() != s.training_thread)
    return false;
  tl_recompute_frames.push_back({nullptr, tl_backward_depth, tl_depth});
  // The node that unpacks runs quiet (on_backward_start): its recomputation must be seen.
  if (tl_quiet_node) at::enableRecordFunction(true);
  return true;
}

void recompute_scope_exit() {
  if (!tl_recompute_frames.empty() && tl_recompute_frames.back().range == nullptr &&
      tl_recompute_frames.back().backward_depth == tl_backward_depth)
    tl_recompute_frames.pop_back();
  if (tl_quiet_node) at::enableRecordFunction(false);
}

void register_callbacks(state &s) {
  if (s.function_callback) return;
  s.function_callback = at::addGlobalCallback(at::RecordFunctionCallback(on_function_start, on_function_end)
                                                  .needsInputs(true)
                                                  .needsOutputs(true)
                                                  .scopes({at::RecordScope::FUNCTION}));
  at::disableCallback(*s.function_callback);
  s.backward_callback = at::addGlobalCallback(at::RecordFunctionCallback(on_backward_start, on_backward_end)
                                                  .needsInputs(true)
                                                  .scopes({at::RecordScope::BACKWARD_FUNCTION}));
  at::disableCallback(*s.backward_callback);
  // A forked child (a DataLoader worker) inherits our state but not the sender thread.
  pthread_atfork(nullptr, nullptr, [] {
    state &c = the_state();
    c.forked = true;
    c.ops_on = false;
    c.watch_on = false;
    c.backward_on = false;
  });
}

}  // namespace tprobe::torch_capture
