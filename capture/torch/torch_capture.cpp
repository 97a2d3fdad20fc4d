// torch_capture.cpp: the capture session of the process (open/close/start/stop/step), its
// activity and failure, entries, and the functions python/tprobe's hooks call. The rest of the
// state's work lives by concern (capture_state.h lists the files).
#include "torch_capture.h"

#include <cstdio>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

#include <ATen/SequenceNumber.h>
#include <nlohmann/json.hpp>

#include "capture_state.h"
#include "dump_semantics.h"
#include "op_callbacks.h"
#include "python_stack.h"

namespace tprobe::torch_capture {

using json = nlohmann::json;

// Nesting of observed operators and of autograd nodes on this thread.
thread_local int tl_depth = 0;
thread_local int tl_backward_depth = 0;

[[noreturn]] void fail_c_api(const char *what) {
  throw std::runtime_error(std::string(what) + ": " + tprobe_last_error());
}

int checked(int rc, const char *what) {
  if (rc == TPROBE_ERROR) fail_c_api(what);
  return rc;
}

state &the_state() {
  static auto *s = new state;  // never destroyed: operators and hooks may run during exit
  return *s;
}

// ---- state: activity ----

void state::update_callbacks() {
  const bool active = session && started && failure.empty() && !forked && rank_enabled() && step_enabled();
  const bool ops = active && level_ops;
  const bool backward = active && allow_backward && (level_ops || level_modules);
  // Deferred copies rely on the operator callbacks to see writes: they are enqueued before those stop.
  if (!ops && ops_on.load()) {
    try {
      flush_device_deferred();
    } catch (const std::exception &e) {
      ++errors;
      if (failure.empty()) failure = e.what();
    }
  }
  // What is known of contents outlives the capture's gaps only while they are watched.
  if (ops && !ops_on.load() && !watch_on.load()) forget_contents();
  if (!ops && ops_on.load()) {
    watch_ops_left = watch_ops_max;
    // A dead storage's weak reference keeps its StorageImpl allocated: a step's thousand of them,
    // scattered among the activations' memory, fragment the heap (measured: resnet18 L1 faulted
    // 27 MiB a step and ran at 3.5x). Only the living are worth keeping into the next step.
    std::erase_if(contents, [](const auto &c) { return c.second.storage.expired(); });
  }
  const bool watch = !ops && (watch_on.load() || ops_on.load()) && session && failure.empty() && !forked &&
                     !contents.empty();
  watch_on = watch;
  if (!watch && !ops) forget_contents();
  const bool function_on = ops || watch;
  if (function_callback && function_on != function_callback_on) {
    if (function_on) at::reenableCallback(*function_callback);
    else at::disableCallback(*function_callback);
  }
  function_callback_on = function_on;
  if (backward_callback && backward != backward_on.load()) {
    if (backward) at::reenableCallback(*backward_callback);
    else at::disableCallback(*backward_callback);
  }
  ops_on = ops;
  backward_on = backward;
}

void state::fail(const std::string &what) {
  ++errors;
  if (!failure.empty()) return;
  failure = what;
  // A detached session has said so itself, once (tprobe_capture.h).
  tprobe_session_counts c{};
  if (!session || tprobe_session_counts_get(session, &c) != TPROBE_OK || !c.detached)
    std::fprintf(stderr, "tprobe: capture failed, capture is off from here: %s\n", what.c_str());
  update_callbacks();
}

[[noreturn]] void state::fail_and_throw(const char *what) {
  const std::string message = std::string(what) + ": " + tprobe_last_error();
  fail(message);
  throw std::runtime_error(message);
}

void state::check_failure() const {
  if (!failure.empty()) throw std::runtime_error("tprobe capture failed earlier: " + failure);
}

bool state::entry_begin(const std::string &entry, const std::optional<std::string> &parent, int stack,
                 int is_recompute) {
  const auto &lines = python_stack_lines(stack);
  return checked(tprobe_entry_begin(session, entry.c_str(), parent ? parent->c_str() : nullptr,
                                    lines.empty() ? nullptr : lines.data(), lines.size(), is_recompute),
                 "entry") == TPROBE_OK;
}

bool state::entry_wanted(const std::string &entry) {
  return checked(tprobe_entry_wanted(session, entry.c_str()), "entry") == TPROBE_OK;
}

namespace {

std::vector<int64_t> int_list(const nlohmann::ordered_json &v) {
  std::vector<int64_t> out;
  if (v.is_array())
    for (const auto &e : v)
      if (e.is_number_integer()) out.push_back(e.get<int64_t>());
  return out;
}

void require_open(const state &s) {
  if (s.forked) throw std::runtime_error("tprobe: this process is a fork of the one that opened the capture");
  if (!s.session) throw std::runtime_error("tprobe: no capture session is open");
}

// Whether this torch's CPU mean of a half type divides a sum already rounded to the dtype (torch
// before 2.2, whose mean_out summed in the dtype), as msprobe's Mean is that torch.mean: five
// copies of 1.9921875 in bfloat16 have the mean 1.984375 there, and 1.9921875 where the sum is
// divided in float32. Asked of torch itself, as the version that changed it is not in its API.
bool torch_half_mean_rounds_sum() {
  at::DisableRecordFunctionGuard no_record;  // not an operator of the model
  at::NoGradGuard no_grad;
  const float probe = 1.9921875f;
  return at::full({5}, probe, at::TensorOptions().dtype(at::kBFloat16)).mean().item<float>() != probe;
}

}  // namespace

std::string open(const open_options &options) {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  if (s.session) throw std::runtime_error("tprobe: a capture session is already open in this process");
  if (options.op_depth < 1) throw std::runtime_error("tprobe: op_depth must be at least 1");
  tprobe_open_options o = tprobe_open_options_default();
  o.rank = options.rank;
  o.framework = "pytorch";
  if (!options.endpoint.empty()) o.endpoint = options.endpoint.c_str();
  o.stats_mode = options.stats_copy ? TPROBE_STATS_COPY : TPROBE_STATS_AUTO;
  o.half_mean_of_rounded_sum = torch_half_mean_rounds_sum();
  o.watch_pid = options.watch_pid;
  tprobe_session *session = nullptr;
  checked(tprobe_session_open(options.config_path.empty() ? nullptr : options.config_path.c_str(), &o, &session),
          "tprobe: cannot open the capture");
  const char *config = tprobe_session_config(session);
  s.config_text = config ? config : "{}";
  const nlohmann::ordered_json cfg = nlohmann::ordered_json::parse(s.config_text);
  const std::string level = cfg.value("level", "L1");
  s.level_ops = level == "L1" || level == "mix";
  s.level_modules = level == "L0" || level == "mix";
  s.mix = level == "mix";
  s.high_precision = cfg.value("precision", "low") == "high";
  const char *reuse = std::getenv("TPROBE_REUSE_STATS");
  s.reuse_stats = !(reuse && std::string_view(reuse) == "off");
  const char *quiet = std::getenv("TPROBE_QUIET_NESTED");
  s.quiet_nested = !(quiet && std::string_view(quiet) == "off");
  s.forget_contents();
  s.ranks = int_list(cfg.value("rank", nlohmann::ordered_json::array()));
  s.steps = int_list(cfg.value("step", nlohmann::ordered_json::array()));
  // Whole directions data_mode turns off (core/dump_semantics.h); slots are filtered by the session.
  const data_mode_filter modes = data_mode_filter::from_json(cfg.value("data_mode", nlohmann::ordered_json::array({"all"})));
  s.allow_forward = modes.forward();
  s.backward_values = modes.backward();
  s.allow_backward = modes.backward() || s.level_modules;  // level_modules: L0 or mix, which have a construct.json
  // Task free_benchmark: the callbacks re-run the selected calls (free_benchmark.cpp), nothing is dumped.
  s.fuzz.reset();
  s.preheat.reset();
  s.fuzz_warned.clear();
  if (cfg.value("task", "") == "free_benchmark") {
    s.fuzz = free_benchmark_settings_from_json(cfg.value("free_benchmark", nlohmann::ordered_json::object()),
                                              "the session's free_benchmark");
    if (s.fuzz->preheat()) s.preheat = std::make_unique<free_benchmark_preheat>(s.fuzz->preheat_step, s.fuzz->max_sample, s.fuzz->pert_mode);
    if (s.fuzz->fix())
      std::fprintf(stderr, "tprobe: free_benchmark handler fix: the outputs of the selected APIs are replaced by their "
                           "%s re-run in this training\n", s.fuzz->pert_mode.c_str());
  }
  s.options = options;
  s.session = session;
  s.failure.clear();
  python_stack_exclude(options.exclude_dir);
  register_callbacks(s);
  return s.config_text;
}

std::string close() {
  state &s = the_state();
  std::string result;
  {
    std::lock_guard lock(s.mutex);
    if (!s.session || s.forked) return "{}";
    s.started = false;
    s.update_callbacks();
    std::string error;
    try {
      s.collect_collectives();
      s.collect_device(true);
    } catch (const std::exception &e) {
      error = e.what();
    }
    tprobe_session *session = s.session;
    s.session = nullptr;
    s.update_callbacks();  // no gap to watch any more
    tprobe_session_counts_get(session, &s.final_counts);
    s.final_step = tprobe_current_step(session);
    const int rc = tprobe_session_close(session);
    if (rc == TPROBE_ERROR && error.empty()) error = std::string("tprobe: closing the capture: ") + tprobe_last_error();
    s.node_inputs.clear();
    s.open_modules.clear();
    s.module_stack.clear();
    s.forget_contents();
    if (!error.empty()) s.fail(error);
  }
  result = counters();
  return result;
}

std::string config_check(const std::string &config_path) {
  const char *text = tprobe_config_check(config_path.empty() ? nullptr : config_path.c_str());
  if (!text) throw std::runtime_error(std::string("tprobe: ") + tprobe_last_error());
  return text;
}

void entry_name_check(const std::string &name) {
  if (tprobe_entry_name_check(name.c_str()) != TPROBE_OK)
    throw std::runtime_error(std::string("tprobe: ") + tprobe_last_error());
}

bool start() {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  require_open(s);
  s.check_failure();
  const uint64_t thread = at::RecordFunction::currentThreadId();
  if (thread != s.training_thread) {  // the gap was watched on another thread
    s.forget_contents();
    s.watch_on = false;
  }
  s.training_thread = thread;
  s.device.known.clear();
  checked(tprobe_start(s.session), "tprobe: start");
  s.started = true;
  s.update_callbacks();
  return s.rank_enabled() && s.step_enabled();
}

void stop() {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  require_open(s);
  s.started = false;
  s.update_callbacks();
  s.device.known.clear();
  s.collect_collectives();
  s.collect_device(true);
  s.check_failure();
  if (tprobe_stop(s.session) == TPROBE_ERROR) s.fail_and_throw("tprobe: stop");
}

int64_t step() {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  require_open(s);
  // A failed capture no longer reaches the session, but its steps still count: the user is told
  // how many were not dumped.
  if (!s.failure.empty()) ++s.steps_after_failure;
  s.collect_collectives();
  s.collect_device(true);
  s.check_failure();
  const int rc = tprobe_step(s.session);  // the step advances even when it reports a detached session
  s.device.known.clear();
  s.call_counts.clear();
  s.node_inputs.clear();
  s.open_modules.clear();
  s.module_stack.clear();
  if (rc == TPROBE_ERROR) s.fail_and_throw("tprobe: step");
  s.update_callbacks();
  return tprobe_current_step(s.session);
}

// The functions module and gradient hooks call: like the operator callbacks, they never throw
// into the model; a failure turns the capture off and stop/step report it.
template <typename F>
auto hook_guarded(state &s, F &&f) -> decltype(f()) {
  require_open(s);
  if (!s.failure.empty()) return {};
  try {
    return f();
  } catch (const std::exception &e) {
    s.fail(e.what());
    return {};
  }
}

bool entry(const std::string &entry, const std::optional<std::string> &parent, int64_t stack, int64_t is_recompute) {
  state &s = the_state();
  if (stack == entry_stack_here) stack = python_stack_current();  // takes the GIL: never under our mutex
  std::lock_guard lock(s.mutex);
  return hook_guarded(s, [&] {
    const int flag = is_recompute == 0 && recomputing() ? 1 : static_cast<int>(is_recompute);
    return s.entry_begin(entry, parent, static_cast<int>(stack), flag);
  });
}

bool tensor(const std::string &entry, const std::string &slot, const at::Tensor &t) {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  return hook_guarded(s, [&] { return s.capture_tensor(entry, slot, t); });
}

int64_t tensors(const std::string &entry, const std::vector<at::Tensor> &tensors, const std::vector<std::string> &slots) {
  if (tensors.size() != slots.size()) throw std::runtime_error("tprobe: tensors: one slot per tensor needed");
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  int64_t captured = 0;
  for (size_t i = 0; i < tensors.size(); ++i)
    captured += hook_guarded(s, [&] { return s.capture_tensor(entry, slots[i], tensors[i]); });
  return captured;
}

bool value(const std::string &entry, const std::string &slot, const std::string &text) {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  return hook_guarded(s, [&] {
    return checked(tprobe_capture_value(s.session, entry.c_str(), slot.c_str(), text.c_str()), "value") ==
           TPROBE_OK;
  });
}

bool value_leaf(const std::string &entry, const std::string &slot, const nlohmann::ordered_json &leaf) {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  return hook_guarded(s, [&] { return s.capture_value(entry, slot, leaf); });
}

bool value_leaf_text(const std::string &entry, const std::string &slot, const std::string &text) {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  return hook_guarded(s, [&] { return s.capture_value_text(entry, slot, text); });
}

int64_t module_enter(const std::string &forward_entry, const std::vector<at::Tensor> &inputs,
                     const std::vector<std::string> &slots) {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  require_open(s);
  if (inputs.size() != slots.size()) throw std::runtime_error("tprobe: module_enter: one slot per input tensor needed");
  s.module_stack.push_back(forward_entry);
  if (!s.failure.empty()) return 0;
  checked(tprobe_module_begin(s.session, forward_entry.c_str()), "module");
  if (!s.backward_on.load() || !at::GradMode::is_enabled()) return 0;
  open_module m;
  m.sequence_begin = at::sequence_number::peek();
  for (size_t i = 0; i < inputs.size(); ++i) state::note_edge(m.inputs, slots[i], inputs[i]);
  // Even without an input requiring grad the outputs may (parameters inside): always linked.
  const int64_t token = s.next_token++;
  s.open_modules.emplace(token, std::move(m));
  return token;
}

void module_exit(int64_t token, const std::string &forward_entry, const std::optional<std::string> &parent,
                 const std::vector<at::Tensor> &outputs, const std::vector<std::string> &slots) {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  require_open(s);
  if (outputs.size() != slots.size()) throw std::runtime_error("tprobe: module_exit: one slot per output tensor needed");
  if (!s.module_stack.empty()) s.module_stack.pop_back();
  if (s.failure.empty()) checked(tprobe_module_end(s.session, forward_entry.c_str()), "module");
  const auto it = s.open_modules.find(token);
  if (it == s.open_modules.end()) return;
  open_module m = std::move(it->second);
  s.open_modules.erase(it);
  if (!s.backward_on.load()) return;
  std::vector<std::pair<at::Tensor, std::string>> linked;
  for (size_t i = 0; i < outputs.size(); ++i) linked.emplace_back(outputs[i], slots[i]);
  std::optional<std::string> backward_parent;
  if (parent) backward_parent = entry_backward_of(*parent);
  auto link = make_link(entry_backward_of(forward_entry), backward_parent);
  try {
    s.link_backward(link, m.sequence_begin, m.inputs, linked);
  } catch (const std::exception &e) {
    s.fail(e.what());
  }
}

std::string counters() {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  tprobe_session_counts c = s.final_counts;
  if (s.session) tprobe_session_counts_get(s.session, &c);
  json j{{"records", c.records},           {"bytes", c.bytes},
         {"skipped", c.skipped},           {"waits", c.waits},
         {"undelivered", c.undelivered},   {"detached", c.detached != 0},
         {"first_step_not_dumped", c.first_step_not_dumped}, {"step", (s.session ? tprobe_current_step(s.session) : s.final_step) + s.steps_after_failure},
         {"shared_bytes", c.shared_bytes}, {"shared_gave_up", c.shared_gave_up},
         {"stats_reused", c.stats_reused},
         {"stats_parts_helped", c.stats_parts_helped},
         {"stats_zeroed", c.stats_zeroed},     {"stats_bytes_read", c.stats_bytes_read},
         {"operators", s.operators},       {"unsupported", s.unsupported},
         {"nested_record_functions", s.nested_record_functions.load()},
         {"contents_known", s.contents.size()},
         {"device_summaries", s.device_summaries}, {"device_tensors", s.device.tensors},
         {"device_segments", s.device.segments}, {"device_reused", s.device.reused},
         {"device_reads", s.device.reads}, {"device_waits", s.device.waits},
         {"device_full", s.device.full},   {"device_bytes", s.device.bytes},
         {"device_capture_ns", s.device.capture_ns}, {"device_collect_ns", s.device.collect_ns},
         {"device_deferred", s.device.deferred}, {"device_flushes", s.device.flushes},
         {"device_unread", s.device.unread},   {"device_flush_ns", s.device.flush_ns},
         {"device_raw_copies", s.device.raw_copies}, {"device_kernels", s.device.kernels},
         {"device_copy_ns", s.device.copy_ns},
         {"fuzz_reruns", s.fuzz_reruns}, {"fuzz_found", s.fuzz_found},
         {"fuzz_failures", s.fuzz_failures}, {"fuzz_unsupported", s.fuzz_unsupported},
         {"errors", s.errors},
         {"error", s.failure}};
  return j.dump();
}

}  // namespace tprobe::torch_capture
