// torch_capture.h: the PyTorch capture of one process, behind the torch.ops.tprobe operators that
// python/tprobe calls (torch_ops.cpp registers them; docs/pytorch.md is the user's view).
//
// What it observes:
//  - every ATen operator, through one global at::RecordFunction callback (FUNCTION scope,
//    registered once per process, enabled only while capturing at level L1 or mix): inputs at
//    its start, outputs at its end. Only operators called on the thread that called start(),
//    outside any autograd node, and at most `op_depth` levels deep (1: only the outermost of
//    nested calls, msprobe's API level) are captured. Entries are named as msprobe does,
//    "{Prefix}.{api}.{n}.forward" (op_names.h), n counted from 0 per "{Prefix}.{api}." per step.
//  - the backward pass, through a second callback (BACKWARD_FUNCTION scope): an autograd node's
//    inputs are the gradients of the forward outputs it belongs to ("{…}.{n}.backward" "input"),
//    linked to the forward call by the node's (forward thread, sequence number). A node's
//    RecordFunction carries no outputs, so the gradients of the forward inputs ("output") come
//    from post hooks the capture adds, at the forward's end, to the nodes the forward created
//    (sequence numbers in [peek at start, peek at end)) that lead out of the call: the edge to an
//    input's gradient function tells which input a gradient belongs to. Nothing changes the
//    graph or the order in which gradients accumulate.
//  - modules (levels L0 and mix) through module_enter/module_exit, which python/tprobe calls from
//    its module hooks: the module is the forward parent of the operators inside it (mix), and its
//    backward is linked exactly as an operator's.
//
// Tensors: CPU tensors go to tprobe_capture_tensor (statistics in place on this thread when only
// statistics are wanted, else a copy for the sender thread, per the session's stats mode). CUDA
// tensors get their statistics on the device (ATen reductions on the current stream, copied
// into pinned memory behind an event), and only the numbers travel, without a host sync per
// operator: they are collected when their event completes, and at stop/step/close at the latest.
// A CUDA tensor whose data must be written (task tensor, tensor_list) or hashed (md5) is copied
// to the host. A tensor tprobe cannot represent (sparse, quantized, fp8, …) is dumped with
// null statistics and counted as "unsupported".
//
// Errors: neither an operator callback nor a hook may throw into the model. The first failure
// (say, the pipeline went away) turns the capture off and is kept; entry/tensor/value then return
// false, and start/stop/step throw it, one line. Only misuse (no open session) throws at once.
//
// Thread-safety: every function may be called from any thread; one mutex serialises the session.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

namespace tprobe::torch_capture {

struct open_options {
  std::string config_path;  // msprobe config.json ("" = $TPROBE_CONFIG)
  int rank = -1;            // torch.distributed rank, -1 when not distributed
  std::string endpoint;     // "" = $TPROBE_ENDPOINT
  int op_depth = 1;         // operators captured down to this nesting depth
  bool stats_copy = false;  // copy CPU tensors for the stats stage instead of computing in place
  bool stacks = true;       // Python stacks for stack.json
  std::string exclude_dir;  // frames from files under it are left out of stacks
  int64_t watch_pid = 0;    // the launcher of a direct-mode pipeline (tprobe_open_options)
};

// Validates a config like open() would (tprobe_config_check); returns the effective config as JSON.
// Throws std::runtime_error with the one-line message naming the file and field.
std::string config_check(const std::string &config_path);
// Throws std::runtime_error when `name` cannot be an entry name (tprobe_entry_name_check).
void entry_name_check(const std::string &name);

// Opens the process's session; returns the effective configuration as JSON (tprobe_session_config).
// Throws std::runtime_error (one line) when it cannot be opened, or is open already.
std::string open(const open_options &options);
// Collects outstanding device statistics, closes the session (flush, end-of-stream) and returns
// the counters as JSON (counters()). A no-op returning "{}" when none is open.
std::string close();

// Capture on; the calling thread is the training thread. Returns whether this rank and step are
// captured at all (the config's rank and step lists).
bool start();
void stop();       // capture off, files brought up to date
int64_t step();    // ends the step; returns the new step number

// The Python side calls these around every torch.autograd.graph.saved_tensors_hooks context
// (python/tprobe/_recompute.py). enter: true when it began a recomputation (on the training
// thread, while an autograd node runs, capturing: a non-reentrant checkpoint unpacking), which
// makes the node's quiet RecordFunction observe again; only then is exit to be called, on the
// same thread, before the node ends (op_callbacks.cpp).
bool recompute_scope_enter();
void recompute_scope_exit();

// Announces an entry (python side: modules, parameters_grad, save). stack: python_stack id, -1
// for none, or entry_stack_here: the calling Python thread's stack, walked here (one operator call
// from Python instead of two).
// is_recompute: 0 or 1, the forward entry's flag; 0 becomes 1 while the thread recomputes (a
// Python Function's backward, a saved-tensor hooks context in a node: capture_state.h
// `recomputing`); -1: the entry has none.
bool entry(const std::string &entry, const std::optional<std::string> &parent, int64_t stack, int64_t is_recompute);
constexpr int64_t entry_stack_here = -2;
bool tensor(const std::string &entry, const std::string &slot, const at::Tensor &t);
// tensor() for each of `tensors` in order, at the slot of the same index, under one lock: a module's
// leaves in one call from Python. Returns how many were captured.
int64_t tensors(const std::string &entry, const std::vector<at::Tensor> &tensors, const std::vector<std::string> &slots);
bool value(const std::string &entry, const std::string &slot, const std::string &json);
// A non-tensor value as its leaf, built by core/dump_semantics.h from the typed facts python/tprobe
// passes (torch_ops.cpp's value_* operators).
bool value_leaf(const std::string &entry, const std::string &slot, const nlohmann::ordered_json &leaf);
// The same, given as its JSON text (a leaf holding a real: value_real_append's NaN / Infinity tokens).
bool value_leaf_text(const std::string &entry, const std::string &slot, const std::string &text);

// A module's forward begins: `forward_entry` becomes the parent of the operators inside it (mix),
// and the gradient edges of `inputs` (tensors requiring grad, at their forward slots "input.0",
// "kwargs.x", …) are noted. Returns a token for module_exit (0 when its backward is not linked).
int64_t module_enter(const std::string &forward_entry, const std::vector<at::Tensor> &inputs,
                     const std::vector<std::string> &slots);
// The module's forward ended with these outputs (at forward slots "output.0", …): its backward
// entry (named from `forward_entry`, its construct.json parent from the forward's `parent`) is
// linked as an operator's is. Must follow every module_enter, token 0 included.
void module_exit(int64_t token, const std::string &forward_entry, const std::optional<std::string> &parent,
                 const std::vector<at::Tensor> &outputs, const std::vector<std::string> &slots);

// Counters as JSON: records, bytes, skipped, waits (the session's), operators, unsupported,
// device_summaries, errors, error (the first failure's message or "").
std::string counters();

}  // namespace tprobe::torch_capture
