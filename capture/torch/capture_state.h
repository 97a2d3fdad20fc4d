// capture_state.h: the PyTorch capture's one state per process (torch_capture.h has the
// contracts). Its parts live by concern:
//   torch_capture.cpp   the session: open/close/start/stop/step, activity, failure, entries
//   torch_values.cpp    value encoding: an argument or result → tensor, summary, facts or value
//                       captures (the place to mark tensors whose memory is not to be read)
//   device_stats.cpp    device tensors: statistics and data enqueued on the device, read in
//                       batches, in capture order
//   backward_link.cpp   backward entries from the autograd graph
//   op_callbacks.cpp    the RecordFunction callbacks: operators named, arguments and results
//   free_benchmark.cpp  task free_benchmark: selected calls re-run and compared (fuzz.h)
// Every member function except the callbacks' entry points runs with `mutex` held.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/function.h>

#include "backward_link.h"
#include "free_benchmark.h"
#include "fuzz.h"
#include "device_stats.h"
#include "op_callbacks.h"
#include "torch_capture.h"
#include "tprobe_capture.h"

namespace tprobe::torch_capture {

// Nesting of observed operators and of autograd nodes on this thread.
extern thread_local int tl_depth;
extern thread_local int tl_backward_depth;

// Whether this thread is recomputing now: running a Python autograd.Function's backward (not a
// node nested in it), as msprobe counts one (`is_recomputation`: a `backward` called from
// torch/autograd/function.py; a reentrant checkpoint's forward run again), or inside a
// saved-tensor hooks context entered during a node (a non-reentrant checkpoint's recomputation,
// msprobe's `recompute_fn` on torch 2.x). Its operators and modules are dumped as forward entries
// with `is_recompute: true` (op_callbacks.cpp).
bool recomputing();

// A C API call's TPROBE_ERROR as an exception naming `what` and tprobe_last_error().
[[noreturn]] void fail_c_api(const char *what);
int checked(int rc, const char *what);

struct fuzz_backward_check;

struct state {
  std::mutex mutex;
  tprobe_session *session = nullptr;
  open_options options;
  std::string config_text;
  bool level_ops = false, level_modules = false, mix = false;
  // allow_backward: backward entries are linked and announced. backward_values: their tensors are
  // read. They differ under data_mode ["forward"] at L0 and mix, where construct.json still lists
  // the backward nodes (msprobe's update_construct runs before its data_mode check) and nothing
  // of their gradients is read.
  bool allow_forward = true, allow_backward = true, backward_values = true;
  bool high_precision = false;
  std::vector<int64_t> ranks, steps;

  bool started = false;
  std::atomic<bool> ops_on{false}, backward_on{false};
  uint64_t training_thread = 0;
  std::optional<at::CallbackHandle> function_callback, backward_callback;

  std::unordered_map<std::string, int64_t> call_counts;  // "Functional.linear." → next n
  std::vector<std::string> module_stack;                 // forward entries of running modules
  std::unordered_map<int64_t, open_module> open_modules;
  int64_t next_token = 1;
  std::unordered_map<node_key, std::vector<node_subscription>, node_key_hash> node_inputs;
  device_queue device;  // device tensors not yet read (device_stats.h)
  std::vector<pending_collective> collectives;

  std::mutex info_mutex;
  std::unordered_map<const char *, std::unique_ptr<op_info>> infos;

  uint64_t operators = 0, unsupported = 0, device_summaries = 0, errors = 0;
  tprobe_session_counts final_counts{};  // the session's, kept when it closes
  int64_t final_step = -1;               // its step then (tprobe_current_step)
  int64_t steps_after_failure = 0;       // step() calls the session no longer saw (failure set)
  std::string failure;  // the first failure: capture is off from then on
  std::string leaf_text;  // capture_leaf's scratch: a value's JSON text, its capacity kept
  std::atomic<bool> forked{false};  // in a child of fork(): the session belongs to the parent

  // ---- activity (torch_capture.cpp) ----

  bool rank_enabled() const {
    if (ranks.empty()) return true;
    const int64_t r = options.rank < 0 ? 0 : options.rank;
    return std::find(ranks.begin(), ranks.end(), r) != ranks.end();
  }
  bool step_enabled() const {
    if (steps.empty()) return true;
    const int64_t s = tprobe_current_step(session);
    return std::find(steps.begin(), steps.end(), s) != steps.end();
  }
  // Turns the callbacks on exactly while they can capture something.
  void update_callbacks();
  void fail(const std::string &what);
  // A control call of the C API failed (a detached session, say): the capture goes off, as for
  // any failure, and the caller hears of it.
  [[noreturn]] void fail_and_throw(const char *what);
  void check_failure() const;
  bool entry_begin(const std::string &entry, const std::optional<std::string> &parent, int stack, int is_recompute);
  // Whether entry_begin would capture `entry` now; announces nothing (tprobe_entry_wanted).
  bool entry_wanted(const std::string &entry);

  // ---- values and tensors (torch_values.cpp) ----

  bool capture_value(const std::string &entry, const std::string &slot, const nlohmann::ordered_json &leaf);
  // The hot path: a leaf already in text (tprobe_capture_value's form), or built into leaf_text.
  bool capture_value_text(const std::string &entry, const std::string &slot, const std::string &text);
  bool capture_null(const std::string &entry, const std::string &slot) { return capture_value_text(entry, slot, "null"); }
  bool capture_leaf(const std::string &entry, const std::string &slot, const c10::IValue &v, std::string_view arg);
  // A tensor tprobe cannot read (fp8, quantized, sparse, …): its facts (tprobe_capture_facts).
  bool capture_unsupported(const std::string &entry, const std::string &slot, const at::Tensor &t);
  bool capture_host(const std::string &entry, const std::string &slot, const at::Tensor &t, DLDataType dtype,
                    bool requires_grad);
  // Set while op_end captures the results of an operator that zero-fills them (op_info::zero_fills):
  // capture_host vouches for their bytes (tprobe_capture_tensor_zeroed).
  bool capturing_zeroed = false;
  // The content name of a host tensor's bytes for tprobe_capture_tensor_content: the same for two
  // captures only while its storage lives, its version counter has not moved and no observed
  // operator wrote the storage (forget_content); 0 (no promise) for tensors without a version
  // counter (inference tensors) or storage. Every write through an operator bumps the version
  // counter, except through a second tensor with its own counter on the same storage
  // (`x.data.add_()`): op_begin forgets the storages an operator writes, a collective's buffers
  // are forgotten before its result is read (the communication writes them directly), and what
  // runs while the operator callbacks are off is not observed, so everything is forgotten when
  // they come back on (update_callbacks), unless the gap was watched (watch_op).
  uint64_t content_of(const at::Tensor &t);
  void forget_content(const at::Tensor &t);
  void forget_contents_in(const c10::IValue &v);  // every tensor in it, lists and tuples included
  void forget_contents() {
    contents.clear();
    device.known.clear();  // device statistics are reused by content name (device_stats.h)
  }
  struct known_content {
    c10::weak_intrusive_ptr<c10::StorageImpl> storage;  // weak: keeps the address from being reused
    int64_t version;
    uint64_t name;
  };
  // By storage: this step's (a step of resnet18 reads ~1,100 tensors, a transformer's ~2,800),
  // and the living ones of the steps before it while the gaps between were watched; all
  // forgotten when it grows past contents_known_max.
  std::unordered_map<const c10::StorageImpl *, known_content> contents;
  uint64_t contents_named = 0;
  // Watching the gap. A step's weights were last written by the previous step's optimizer, and
  // read then as its results; a training loop's stop(), step() and start() between the two would
  // otherwise forget that and read them again (on resnet18, a fifth of what a step reads for the
  // first time). So when the capture goes off with contents known, the operator callback stays
  // on, watch-only: operators on the training thread down to op_depth forget what they write,
  // as while capturing, and capture nothing. A gap watched to its end keeps the contents. One
  // longer than watch_ops_max operators (an evaluation loop, the rest of training after the last
  // dumped step) forgets them all and turns the callback off: the watch costs a bounded few
  // milliseconds, once.
  static constexpr int64_t watch_ops_max = 4096;
  std::atomic<bool> watch_on{false};
  int64_t watch_ops_left = 0;
  bool function_callback_on = false;
  // Operators on the training thread below the captured depth or inside an autograd node whose
  // RecordFunction reached the callback anyway (counters(): what quiet_nested leaves).
  std::atomic<uint64_t> nested_record_functions{0};
  // User settings (docs/performance.md, "Runtime switches"). TPROBE_QUIET_NESTED=off: nested
  // operators keep their RecordFunction (op_callbacks.cpp), for another global observer.
  // TPROBE_REUSE_STATS=off: every tensor is read, for code that writes tensors where no operator
  // shows it (tensor.numpy(), a raw pointer, another thread).
  bool quiet_nested = true;
  bool reuse_stats = true;
  bool capture_tensor(const std::string &entry, const std::string &slot, const at::Tensor &t);
  bool capture_summary_null(const std::string &entry, const std::string &slot, const at::Tensor &t,
                            DLDataType dtype, bool requires_grad);
  void collect_collectives();
  // An operator argument or result at `slot`: tensors, lists of tensors, values. With `edges`,
  // tensors requiring grad are noted for the backward link.
  void capture_ivalue(const std::string &entry, const std::string &slot, const c10::IValue &v, std::string_view arg,
                      bool capture, std::vector<input_edge> *edges);

  // ---- device statistics (device_stats.cpp) ----

  // A device tensor (or a CPU one under TPROBE_DEVICE_PATH_ON_CPU) whose capture asked for
  // `flags` (tprobe_capture_query): enqueued on its stream, read later, in order.
  bool capture_device(const std::string &entry, const std::string &slot, const at::Tensor &t, DLDataType dtype,
                      bool requires_grad, unsigned flags);
  // Hands read batches to the session, in capture order. wait: closes the open batch and reads
  // every batch, waiting on their events (stop/step/close); otherwise reads only batches whose
  // event has completed, waiting only when more than the settings' batches are in flight.
  void collect_device(bool wait);
  // Enqueues the open batch's deferred copies (device_stats.h): before anything writes one of
  // their tensors, and when the batch closes.
  void flush_device_deferred();
  // The operator callbacks' check, on every thread and at every depth while copies are deferred:
  // an operator about to write a tensor with a deferred copy has the copies enqueued first. Takes
  // the mutex.
  void flush_before_write(const at::RecordFunction &fn);
  bool warned_unread = false;  // a deferred tensor found changed at its flush was reported
  // Statistics enqueued earlier in this span for the same bytes (device_stats.h), or none.
  device_queue::known_statistics *known_statistics_of(uint64_t content, const at::Tensor &t);
  // Hands a statistics record whose values are read to the session.
  void summary_emit(const device_record &r);

  // ---- backward link (backward_link.cpp) ----

  static void note_edge(std::vector<input_edge> &edges, const std::string &forward_slot, const at::Tensor &t);
  void link_backward(const std::shared_ptr<backward_link> &link, uint64_t begin, std::vector<input_edge> &inputs,
                     const std::vector<std::pair<at::Tensor, std::string>> &outputs);
  void add_grad_input_hook(Node *n, const std::shared_ptr<backward_link> &link,
                           std::vector<std::pair<size_t, std::string>> leaving);
  // Announces a backward entry; true when its gradients are to be captured (not under a data_mode
  // that leaves the backward out, which links for construct.json alone).
  bool backward_begin(backward_link &link);
  // A node's post hook: the gradients leaving it toward the forward's inputs.
  void backward_outputs(backward_link &link, const std::vector<std::pair<size_t, std::string>> &leaving,
                        const torch::autograd::variable_list &grads);
  // The BACKWARD_FUNCTION callback: a node starts with the gradients of forward outputs.
  void backward_node(const at::RecordFunction &fn);

  // ---- operators (op_callbacks.cpp) ----

  const op_info &info_of(const at::RecordFunction &fn);
  std::unique_ptr<at::ObserverContext> op_begin(const at::RecordFunction &fn, const op_info &info, int depth,
                                                bool recompute);
  // The contents an operator is about to write are forgotten (content_of), after its inputs were
  // captured as they were before it ran.
  void forget_written(const op_info &info, decltype(std::declval<const at::RecordFunction &>().inputs()) inputs);
  // An operator while the capture is off and the gap is watched (watch_on, above).
  void watch_op(const at::RecordFunction &fn, const op_info &info);
  void op_end(const at::RecordFunction &fn, op_context &ctx);

  // ---- task free_benchmark (free_benchmark.cpp) ----

  // Set for task free_benchmark: the operator callbacks re-run the selected calls instead of
  // capturing them (no dump entries at all).
  std::optional<free_benchmark_settings> fuzz;
  std::unique_ptr<free_benchmark_preheat> preheat;  // if_preheat
  std::unordered_set<std::string> fuzz_warned;      // APIs whose re-run failed, said once each
  uint64_t fuzz_reruns = 0, fuzz_found = 0, fuzz_failures = 0, fuzz_unsupported = 0;
  // At a selected call's start (the name counted as op_begin counts it): its arguments kept.
  std::unique_ptr<at::ObserverContext> fuzz_begin(const at::RecordFunction &fn, const op_info &info, int depth);
  // At its end, without the mutex held while the call re-runs.
  void fuzz_end(const at::RecordFunction &fn, op_context &ctx);
  void fuzz_link_backward(op_context &ctx, const c10::OperatorHandle &op, const std::vector<c10::IValue> &outputs);
  void fuzz_backward_compare(fuzz_backward_check &check);
  // Says `what` on stderr once per API; counts a failure (a re-run that threw) or an unsupported call.
  void fuzz_warn(const std::string &api, const std::string &what, bool failed = true);
  void fuzz_rows(const std::string &api, const char *stage, const std::vector<fuzz_finding> &findings);
};

// The process's state, never destroyed: operators and hooks may run during exit.
state &the_state();

}  // namespace tprobe::torch_capture
