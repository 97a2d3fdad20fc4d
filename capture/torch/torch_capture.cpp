#include "torch_capture.h"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <ATen/ATen.h>
#include <ATen/SequenceNumber.h>
#include <ATen/core/function_schema.h>
#include <ATen/record_function.h>
#include <c10/core/Event.h>
#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/function_hook.h>
#include <torch/csrc/autograd/variable.h>

#include "op_names.h"
#include "python_stack.h"
#include "tprobe_capture.h"

namespace tprobe::torch_capture {

namespace {

using json = nlohmann::json;
using torch::autograd::Node;
using torch::autograd::variable_list;

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

// ---- values ----

std::string python_dtype_name(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return "torch.float32";
    case c10::ScalarType::Double: return "torch.float64";
    case c10::ScalarType::Half: return "torch.float16";
    case c10::ScalarType::BFloat16: return "torch.bfloat16";
    case c10::ScalarType::Long: return "torch.int64";
    case c10::ScalarType::Int: return "torch.int32";
    case c10::ScalarType::Short: return "torch.int16";
    case c10::ScalarType::Char: return "torch.int8";
    case c10::ScalarType::Byte: return "torch.uint8";
    case c10::ScalarType::Bool: return "torch.bool";
    case c10::ScalarType::ComplexFloat: return "torch.complex64";
    case c10::ScalarType::ComplexDouble: return "torch.complex128";
    case c10::ScalarType::ComplexHalf: return "torch.complex32";
    default: break;
  }
  return std::string("torch.") + c10::toString(t);
}

json real_leaf(double v) {
  // JSON has no NaN/Inf; msprobe's Python writes them as bare tokens, which a JSON value cannot
  // carry through the record's msgpack: spell them as Python would print them.
  if (std::isnan(v)) return json{{"type", "float"}, {"value", "nan"}};
  if (std::isinf(v)) return json{{"type", "float"}, {"value", v > 0 ? "inf" : "-inf"}};
  return json{{"type", "float"}, {"value", v}};
}

// msprobe's JSON leaf of a non-tensor argument (msprobe-compat.md §1.7). `arg` is the schema's
// argument name: ints named dtype / memory_format / layout are enums.
json ivalue_leaf(const c10::IValue &v, std::string_view arg) {
  if (v.isNone()) return nullptr;
  if (v.isBool()) return json{{"type", "bool"}, {"value", v.toBool()}};
  if (v.isInt()) {
    const int64_t i = v.toInt();
    if (arg == "dtype" && i >= 0 && i < static_cast<int64_t>(c10::ScalarType::NumOptions))
      return json{{"type", "torch.dtype"}, {"value", python_dtype_name(static_cast<c10::ScalarType>(i))}};
    if (arg == "memory_format") {
      static const char *names[] = {"contiguous_format", "preserve_format", "channels_last", "channels_last_3d"};
      if (i >= 0 && i < 4) return json{{"type", "torch.memory_format"}, {"format", names[i]}};
    }
    if (arg == "layout") return json{{"type", "torch.layout"}, {"value", i == 0 ? "torch.strided" : "torch.sparse_coo"}};
    return json{{"type", "int"}, {"value", i}};
  }
  if (v.isDouble()) return real_leaf(v.toDouble());
  if (v.isComplexDouble()) {
    const auto c = v.toComplexDouble();
    return json{{"type", "complex"}, {"value", "(" + std::to_string(c.real()) + "+" + std::to_string(c.imag()) + "j)"}};
  }
  if (v.isString()) return json{{"type", "str"}, {"value", v.toStringRef()}};
  if (v.isDevice()) return json{{"type", "torch.device"}, {"value", v.toDevice().str()}};
  if (v.isIntList()) {
    json a = json::array();
    for (int64_t i : v.toIntVector()) a.push_back(json{{"type", "int"}, {"value", i}});
    return a;
  }
  if (v.isDoubleList()) {
    json a = json::array();
    for (double d : v.toDoubleVector()) a.push_back(real_leaf(d));
    return a;
  }
  if (v.isBoolList()) {
    json a = json::array();
    for (bool b : v.toBoolList()) a.push_back(json{{"type", "bool"}, {"value", b}});
    return a;
  }
  if (v.isList()) {
    json a = json::array();
    for (const c10::IValue &e : v.toListRef()) a.push_back(ivalue_leaf(e, {}));
    return a;
  }
  if (v.isTuple()) {
    json a = json::array();
    for (const c10::IValue &e : v.toTupleRef().elements()) a.push_back(ivalue_leaf(e, {}));
    return a;
  }
  return nullptr;  // generators, objects: msprobe writes null for unsupported types
}

// ---- tensors ----

bool dl_dtype_of(c10::ScalarType t, DLDataType &out) {
  auto set = [&](uint8_t code, uint8_t bits) {
    out = DLDataType{code, bits, 1};
    return true;
  };
  switch (t) {
    case c10::ScalarType::Float: return set(kDLFloat, 32);
    case c10::ScalarType::Double: return set(kDLFloat, 64);
    case c10::ScalarType::Half: return set(kDLFloat, 16);
    case c10::ScalarType::BFloat16: return set(kDLBfloat, 16);
    case c10::ScalarType::Char: return set(kDLInt, 8);
    case c10::ScalarType::Short: return set(kDLInt, 16);
    case c10::ScalarType::Int: return set(kDLInt, 32);
    case c10::ScalarType::Long: return set(kDLInt, 64);
    case c10::ScalarType::Byte: return set(kDLUInt, 8);
    case c10::ScalarType::Bool: return set(TPROBE_DL_BOOL, 8);
    case c10::ScalarType::ComplexFloat: return set(kDLComplex, 64);
    case c10::ScalarType::ComplexDouble: return set(kDLComplex, 128);
    default: return false;
  }
}

// A Python number that torch wrapped into a 0-d CPU tensor (`x + 1`): dumped as the number.
std::optional<json> wrapped_number_leaf(const at::Tensor &t) {
  if (!t.unsafeGetTensorImpl()->is_wrapped_number() || !t.device().is_cpu() || t.dim() != 0) return std::nullopt;
  switch (t.scalar_type()) {
    case c10::ScalarType::Double: return real_leaf(*static_cast<const double *>(t.data_ptr()));
    case c10::ScalarType::Long: return json{{"type", "int"}, {"value", *static_cast<const int64_t *>(t.data_ptr())}};
    case c10::ScalarType::Bool: return json{{"type", "bool"}, {"value", *static_cast<const bool *>(t.data_ptr())}};
    default: return std::nullopt;
  }
}

tprobe_stat stat_null() { return tprobe_stat{TPROBE_STAT_NULL, 0, 0.0}; }
tprobe_stat stat_real(double v) { return tprobe_stat{TPROBE_STAT_REAL, 0, v}; }

// Statistics of a device tensor on its device, msprobe's semantics (core/tensor_stats.h):
// [max, min, mean, norm, nan count, inf count] as float64, still on the device.
at::Tensor device_statistics(const at::Tensor &t, bool high_precision, bool zero_dim) {
  at::Tensor x = t.detach();
  if (x.is_complex()) x = x.abs();
  if (x.scalar_type() == at::kBool) {
    const at::Tensor zero = at::zeros({}, x.options().dtype(at::kDouble));
    return at::stack({x.any().to(at::kDouble), x.all().to(at::kDouble), zero, zero, zero, zero});
  }
  if (zero_dim) {
    const at::Tensor v = x.to(at::kDouble).reshape({});
    const at::Tensor nan = v.isnan().to(at::kDouble), inf = v.isinf().to(at::kDouble);
    return at::stack({v, v, v, v, nan, inf});
  }
  if (!at::isFloatingType(x.scalar_type()) || x.scalar_type() == at::kDouble || high_precision) x = x.to(at::kFloat);
  return at::stack({x.max().to(at::kDouble), x.min().to(at::kDouble), x.mean().to(at::kDouble),
                    x.norm().to(at::kDouble), x.isnan().sum().to(at::kDouble), x.isinf().sum().to(at::kDouble)});
}

// Device statistics on their way to the host.
struct pending_summary {
  std::string entry, slot;
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::string device;
  bool requires_grad = false;
  int kind = TPROBE_STAT_REAL;  // of max/min (and mean/norm for 0-d integers)
  bool complex = false;
  at::Tensor host;  // 6 float64 in pinned memory
  std::unique_ptr<c10::Event> ready;
};

// ---- autograd ----

struct backward_link {
  std::string entry;                  // "Functional.linear.0.backward"
  std::optional<std::string> parent;  // construct.json parent (mix, L0)
  // Backward slots of forward inputs that get no gradient (tensors not requiring grad): null,
  // sent with the entry's first record, so that "output" keeps the forward's positions.
  std::vector<std::string> null_slots;
  bool nulls_sent = false;
};

std::shared_ptr<backward_link> make_link(const std::string &entry, const std::optional<std::string> &parent) {
  auto link = std::make_shared<backward_link>();
  link->entry = entry;
  link->parent = parent;
  return link;
}

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

std::string backward_slot(const std::string &forward_slot) {
  // Forward "input.1.0" → backward "output.1.0"; forward "output.0" → backward "input.0".
  if (forward_slot.rfind("input", 0) == 0) return "output" + forward_slot.substr(5);
  if (forward_slot.rfind("output", 0) == 0) return "input" + forward_slot.substr(6);
  return {};
}

std::string backward_name(const std::string &forward) {
  // "X.3.forward" → "X.3.backward"; "Module.a.B.forward.3" → "Module.a.B.backward.3".
  if (forward.size() > 8 && forward.compare(forward.size() - 8, 8, ".forward") == 0)
    return forward.substr(0, forward.size() - 8) + ".backward";
  const auto at = forward.rfind(".forward.");
  if (at != std::string::npos) return forward.substr(0, at) + ".backward." + forward.substr(at + 9);
  return forward + ".backward";
}

// ---- operators ----

struct op_info {
  std::string name;  // the RecordFunction name this was made for ("aten::add")
  op_name outer, nested;
  struct argument {
    std::string name;
    bool kwarg_only;
  };
  std::vector<argument> arguments;
  // Only dispatcher operators have one. Other FUNCTION-scope ranges (the autograd engine's
  // "autograd_engine::evaluate_function: …") are not operators: never dumped, but what runs
  // inside them is nested all the same.
  bool has_schema = false;
};

struct op_context : at::ObserverContext {
  std::string forward, backward;
  std::optional<std::string> parent, backward_parent;
  bool capture_outputs = false;
  bool link = false;
  uint64_t sequence_begin = 0;
  std::vector<input_edge> inputs;
  // A collective: its arguments, whose values after the communication are its output.
  bool collective = false;
  std::vector<c10::IValue> arguments;
};

// A collective's output waits for the communication (see state::collect_collectives).
struct pending_collective {
  std::string entry;
  std::vector<c10::IValue> arguments;
};

class grad_input_hook;

struct state {
  std::mutex mutex;
  tprobe_session *session = nullptr;
  open_options options;
  std::string config_text;
  bool level_ops = false, level_modules = false, mix = false;
  bool allow_forward = true, allow_backward = true;
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
  std::deque<pending_summary> pending;
  std::vector<pending_collective> collectives;

  std::mutex info_mutex;
  std::unordered_map<const char *, std::unique_ptr<op_info>> infos;

  uint64_t operators = 0, unsupported = 0, device_summaries = 0, errors = 0;
  tprobe_session_counts final_counts{};  // the session's, kept when it closes
  std::string failure;  // the first failure: capture is off from then on
  std::atomic<bool> forked{false};  // in a child of fork(): the session belongs to the parent

  // ---- activity ----

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
  void update_callbacks() {
    const bool active = session && started && failure.empty() && !forked && rank_enabled() && step_enabled();
    const bool ops = active && level_ops;
    const bool backward = active && allow_backward && (level_ops || level_modules);
    if (function_callback && ops != ops_on.load()) {
      if (ops) at::reenableCallback(*function_callback);
      else at::disableCallback(*function_callback);
    }
    if (backward_callback && backward != backward_on.load()) {
      if (backward) at::reenableCallback(*backward_callback);
      else at::disableCallback(*backward_callback);
    }
    ops_on = ops;
    backward_on = backward;
  }

  void fail(const std::string &what) {
    ++errors;
    if (!failure.empty()) return;
    failure = what;
    // A detached session has said so itself, once (tprobe_capture.h).
    tprobe_session_counts c{};
    if (!session || tprobe_session_counts_get(session, &c) != TPROBE_OK || !c.detached)
      std::fprintf(stderr, "tprobe: capture failed, capture is off from here: %s\n", what.c_str());
    update_callbacks();
  }

  // A control call of the C API failed (a detached session, say): the capture goes off, as for
  // any failure, and the caller hears of it.
  [[noreturn]] void fail_and_throw(const char *what) {
    const std::string message = std::string(what) + ": " + tprobe_last_error();
    fail(message);
    throw std::runtime_error(message);
  }

  void check_failure() const {
    if (!failure.empty()) throw std::runtime_error("tprobe capture failed earlier: " + failure);
  }

  // ---- entries and tensors (mutex held) ----

  bool entry_begin(const std::string &entry, const std::optional<std::string> &parent, int stack,
                   int is_recompute) {
    const auto &lines = python_stack_lines(stack);
    return checked(tprobe_entry_begin(session, entry.c_str(), parent ? parent->c_str() : nullptr,
                                      lines.empty() ? nullptr : lines.data(), lines.size(), is_recompute),
                   "entry") == TPROBE_OK;
  }

  bool capture_value(const std::string &entry, const std::string &slot, const json &leaf) {
    return checked(tprobe_capture_value(session, entry.c_str(), slot.c_str(), leaf.dump().c_str()), "value") ==
           TPROBE_OK;
  }

  // A tensor tprobe cannot describe with statistics: its description, statistics null.
  bool capture_unsupported(const std::string &entry, const std::string &slot, const at::Tensor &t) {
    ++unsupported;
    json leaf{{"type", "torch.Tensor"},
              {"dtype", python_dtype_name(t.scalar_type())},
              {"shape", t.sizes().vec()},
              {"Max", nullptr},
              {"Min", nullptr},
              {"Mean", nullptr},
              {"Norm", nullptr},
              {"requires_grad", t.requires_grad()}};
    return capture_value(entry, slot, leaf);
  }

  bool capture_host(const std::string &entry, const std::string &slot, const at::Tensor &t, DLDataType dtype,
                    bool requires_grad) {
    DLTensor dl{};
    dl.data = t.data_ptr();
    dl.device = DLDevice{kDLCPU, 0};
    dl.ndim = static_cast<int>(t.dim());
    dl.dtype = dtype;
    dl.shape = const_cast<int64_t *>(t.sizes().data());
    dl.strides = const_cast<int64_t *>(t.strides().data());
    dl.byte_offset = 0;
    return checked(tprobe_capture_tensor(session, entry.c_str(), slot.c_str(), &dl, requires_grad), "tensor") ==
           TPROBE_OK;
  }

  bool capture_tensor(const std::string &entry, const std::string &slot, const at::Tensor &t) {
    if (!t.defined()) return capture_value(entry, slot, nullptr);
    if (auto number = wrapped_number_leaf(t)) return capture_value(entry, slot, *number);
    // Our own reductions and copies are not the model's operators.
    at::DisableRecordFunctionGuard no_record;
    at::NoGradGuard no_grad;
    DLDataType dtype{};
    if (!dl_dtype_of(t.scalar_type(), dtype) || t.is_sparse() || t.is_quantized() || t.is_mkldnn() ||
        (!t.is_meta() && !t.has_storage()))
      return capture_unsupported(entry, slot, t);
    const bool requires_grad = t.requires_grad();
    if (t.is_meta()) return capture_summary_null(entry, slot, t, dtype, requires_grad);
    if (t.is_cuda()) {
      unsigned flags = 0;
      if (checked(tprobe_capture_query(session, entry.c_str(), slot.c_str(), &flags), "query") != TPROBE_OK)
        return false;
      if (flags == 0) return capture_device(entry, slot, t, dtype, requires_grad);
      return capture_host(entry, slot, t.cpu().resolve_conj().resolve_neg(), dtype, requires_grad);
    }
    if (!t.device().is_cpu()) return capture_host(entry, slot, t.cpu().resolve_conj().resolve_neg(), dtype, requires_grad);
    // Conjugate and negative views keep their bit in the tensor, not in memory.
    if (t.is_conj() || t.is_neg()) return capture_host(entry, slot, t.resolve_conj().resolve_neg(), dtype, requires_grad);
    return capture_host(entry, slot, t, dtype, requires_grad);
  }

  bool capture_summary_null(const std::string &entry, const std::string &slot, const at::Tensor &t,
                            DLDataType dtype, bool requires_grad) {
    tprobe_tensor_summary s{};
    s.dtype = dtype;
    const auto sizes = t.sizes();
    s.ndim = static_cast<int>(sizes.size());
    s.shape = sizes.data();
    const std::string device = t.device().str();
    s.device = device.c_str();
    s.requires_grad = requires_grad;
    s.max = s.min = s.mean = s.norm = stat_null();
    return checked(tprobe_capture_summary(session, entry.c_str(), slot.c_str(), &s), "summary") == TPROBE_OK;
  }

  bool capture_device(const std::string &entry, const std::string &slot, const at::Tensor &t, DLDataType dtype,
                      bool requires_grad) {
    if (t.numel() == 0) return capture_summary_null(entry, slot, t, dtype, requires_grad);
    pending_summary p;
    p.entry = entry;
    p.slot = slot;
    p.dtype = dtype;
    p.shape = t.sizes().vec();
    p.device = t.device().str();
    p.requires_grad = requires_grad;
    const bool zero_dim = t.dim() == 0;
    p.complex = t.is_complex();
    if (t.scalar_type() == at::kBool) p.kind = TPROBE_STAT_BOOL;
    else if (zero_dim && at::isIntegralType(t.scalar_type(), /*includeBool=*/false)) p.kind = TPROBE_STAT_INT;
    const at::Tensor stats = device_statistics(t, high_precision, zero_dim);
    p.host = at::empty({6}, at::TensorOptions().dtype(at::kDouble).pinned_memory(true));
    p.host.copy_(stats, /*non_blocking=*/true);
    const auto *impl = c10::impl::getDeviceGuardImpl(t.device().type());
    p.ready = std::make_unique<c10::Event>(t.device().type());
    p.ready->record(impl->getStream(t.device()));
    pending.push_back(std::move(p));
    ++device_summaries;
    collect_device(false);
    return true;
  }

  // Hands finished device statistics to the session, in order; wait: all of them.
  void collect_device(bool wait) {
    while (!pending.empty()) {
      pending_summary &p = pending.front();
      if (!p.ready->query()) {
        if (!wait) return;
        while (!p.ready->query()) std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
      const double *v = p.host.data_ptr<double>();
      tprobe_tensor_summary s{};
      s.dtype = p.dtype;
      s.ndim = static_cast<int>(p.shape.size());
      s.shape = p.shape.data();
      s.device = p.device.c_str();
      s.requires_grad = p.requires_grad;
      auto stat = [&](double x, int kind) {
        if (kind == TPROBE_STAT_BOOL) return tprobe_stat{TPROBE_STAT_BOOL, x != 0.0, 0.0};
        if (kind == TPROBE_STAT_INT) return tprobe_stat{TPROBE_STAT_INT, static_cast<int64_t>(x), 0.0};
        return stat_real(x);
      };
      s.max = stat(v[0], p.kind);
      s.min = stat(v[1], p.kind);
      const bool boolean = p.kind == TPROBE_STAT_BOOL;
      s.mean = boolean ? stat_null() : stat(v[2], p.kind);
      s.norm = boolean || p.complex ? stat_null() : stat(v[3], p.kind);
      s.nan_count = static_cast<uint64_t>(v[4]);
      s.inf_count = static_cast<uint64_t>(v[5]);
      const std::string entry = std::move(p.entry), slot = std::move(p.slot);
      pending.pop_front();
      checked(tprobe_capture_summary(session, entry.c_str(), slot.c_str(), &s), "summary");
    }
  }

  // msprobe's output of a collective is its in-place buffers after the communication (§1.5). The
  // operator returns before that (the caller waits on its work handle, outside any operator), so
  // the buffers are read later: at the next captured operator, or at stop/step/close, by which
  // time a synchronous collective has completed. An asynchronous one still in flight by then is
  // read mid-communication (docs/pytorch.md).
  void collect_collectives() {
    if (collectives.empty()) return;
    auto done = std::move(collectives);
    collectives.clear();
    for (const auto &c : done)
      for (size_t i = 0; i < c.arguments.size(); ++i)
        capture_ivalue(c.entry, "output." + std::to_string(i), c.arguments[i], {}, true, nullptr);
  }

  // An operator argument or result at `slot`: tensors, lists of tensors, values. With `edges`,
  // tensors requiring grad are noted for the backward link.
  void capture_ivalue(const std::string &entry, const std::string &slot, const c10::IValue &v,
                      std::string_view arg, bool capture, std::vector<input_edge> *edges) {
    if (v.isTensor()) {
      const at::Tensor &t = v.toTensor();
      if (capture) capture_tensor(entry, slot, t);
      if (edges) note_edge(*edges, slot, t);
    } else if (v.isTensorList()) {
      const auto list = v.toTensorList();
      if (capture && list.size() == 0) capture_value(entry, slot, json::array());
      for (size_t j = 0; j < list.size(); ++j)
        capture_ivalue(entry, slot + "." + std::to_string(j), c10::IValue(list.get(j)), {}, capture, edges);
    } else if (v.isList() && !v.isIntList() && !v.isDoubleList() && !v.isBoolList()) {
      const auto list = v.toListRef();
      bool has_tensor = false;
      for (const auto &e : list) has_tensor = has_tensor || e.isTensor();
      if (!has_tensor) {
        if (capture) capture_value(entry, slot, ivalue_leaf(v, arg));
        return;
      }
      for (size_t j = 0; j < list.size(); ++j)
        capture_ivalue(entry, slot + "." + std::to_string(j), list[j], {}, capture, edges);
    } else if (capture) {
      capture_value(entry, slot, ivalue_leaf(v, arg));
    }
  }

  static void note_edge(std::vector<input_edge> &edges, const std::string &forward_slot, const at::Tensor &t) {
    if (!t.defined()) return;
    input_edge e;
    e.slot = backward_slot(forward_slot);
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

  // ---- backward link (mutex held) ----

  void link_backward(const std::shared_ptr<backward_link> &link, uint64_t begin, std::vector<input_edge> &inputs,
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
      subscriptions.back().slots.emplace_back(static_cast<uint32_t>(t.output_nr()), backward_slot(slot));
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

  void add_grad_input_hook(Node *n, const std::shared_ptr<backward_link> &link,
                           std::vector<std::pair<size_t, std::string>> leaving);

  // Announces a backward entry; true when it is captured.
  bool backward_begin(backward_link &link) {
    if (!entry_begin(link.entry, link.parent, -1, -1)) return false;
    if (!link.nulls_sent) {
      link.nulls_sent = true;
      for (const auto &slot : link.null_slots) capture_value(link.entry, slot, nullptr);
    }
    return true;
  }

  // A node's post hook: the gradients leaving it toward the forward's inputs.
  void backward_outputs(backward_link &link, const std::vector<std::pair<size_t, std::string>> &leaving,
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

  // The BACKWARD_FUNCTION callback: a node starts with the gradients of forward outputs.
  void backward_node(const at::RecordFunction &fn) {
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
          else capture_value(sub.link->entry, slot, nullptr);
        }
      }
    } catch (const std::exception &e) {
      fail(e.what());
    }
  }

  // ---- operators ----

  const op_info &info_of(const at::RecordFunction &fn) {
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
    info->has_schema = true;
    for (const auto &a : schema->arguments()) info->arguments.push_back({a.name(), a.kwarg_only()});
    auto &slot = infos[name];
    slot = std::move(info);
    return *slot;
  }

  std::unique_ptr<at::ObserverContext> op_begin(const at::RecordFunction &fn, int depth) {
    const op_info &info = info_of(fn);
    if (!info.has_schema) return nullptr;
    // The stack first: it takes the GIL, which must never be awaited under our mutex.
    const int stack = options.stacks && allow_forward ? python_stack_current() : -1;
    std::lock_guard lock(mutex);
    if (!ops_on.load() || !session) return nullptr;
    try {
      collect_collectives();
      auto ctx = std::make_unique<op_context>();
      const op_name &n = depth == 0 ? info.outer : info.nested;
      std::string base = n.prefix + "." + n.api + ".";
      const int64_t count = call_counts[base]++;
      base += std::to_string(count);
      ctx->forward = base + ".forward";
      ctx->backward = base + ".backward";
      if (mix && !module_stack.empty()) {
        ctx->parent = module_stack.back();
        ctx->backward_parent = backward_name(module_stack.back());
      }
      ++operators;
      const bool forward = allow_forward && entry_begin(ctx->forward, ctx->parent, stack, 0);
      ctx->capture_outputs = forward;
      ctx->link = allow_backward && at::GradMode::is_enabled();
      if (ctx->link) ctx->sequence_begin = at::sequence_number::peek();
      if (!forward && !ctx->link) return nullptr;
      const auto inputs = fn.inputs();
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

  void op_end(const at::RecordFunction &fn, op_context &ctx) {
    std::lock_guard lock(mutex);
    if (!session) return;
    try {
      const auto &outputs = fn.outputs();
      // A single list result (split, unbind) is the output list itself, as msprobe's is.
      const bool flatten = outputs.size() == 1 && outputs[0].isTensorList();
      std::vector<std::pair<at::Tensor, std::string>> linked;
      if (ctx.collective) collectives.push_back({ctx.forward, std::move(ctx.arguments)});
      auto add = [&](const c10::IValue &v, const std::string &slot) {
        if (ctx.capture_outputs && !ctx.collective) capture_ivalue(ctx.forward, slot, v, {}, true, nullptr);
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
      fail(e.what());
    }
  }
};

state &the_state() {
  static auto *s = new state;  // never destroyed: operators and hooks may run during exit
  return *s;
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

std::unique_ptr<at::ObserverContext> on_function_start(const at::RecordFunction &fn) {
  if (is_own(fn)) return nullptr;
  const int depth = tl_depth++;
  state &s = the_state();
  if (s.forked) {
    quiesce_after_fork(s);
    return nullptr;
  }
  if (!s.ops_on.load(std::memory_order_relaxed) || tl_backward_depth > 0 || depth >= s.options.op_depth ||
      at::RecordFunction::currentThreadId() != s.training_thread)
    return nullptr;
  return s.op_begin(fn, depth);
}

void on_function_end(const at::RecordFunction &fn, at::ObserverContext *ctx) {
  if (is_own(fn)) return;
  --tl_depth;
  if (ctx) the_state().op_end(fn, *static_cast<op_context *>(ctx));
}

std::unique_ptr<at::ObserverContext> on_backward_start(const at::RecordFunction &fn) {
  ++tl_backward_depth;
  state &s = the_state();
  if (s.forked) quiesce_after_fork(s);
  else if (s.backward_on.load(std::memory_order_relaxed)) s.backward_node(fn);
  return nullptr;
}

void on_backward_end(const at::RecordFunction &, at::ObserverContext *) { --tl_backward_depth; }

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
    c.backward_on = false;
  });
}

std::vector<int64_t> int_list(const json &v) {
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
  o.watch_pid = options.watch_pid;
  tprobe_session *session = nullptr;
  checked(tprobe_session_open(options.config_path.empty() ? nullptr : options.config_path.c_str(), &o, &session),
          "tprobe: cannot open the capture");
  const char *config = tprobe_session_config(session);
  s.config_text = config ? config : "{}";
  const json cfg = json::parse(s.config_text);
  const std::string level = cfg.value("level", "L1");
  s.level_ops = level == "L1" || level == "mix";
  s.level_modules = level == "L0" || level == "mix";
  s.mix = level == "mix";
  s.high_precision = cfg.value("precision", "low") == "high";
  s.ranks = int_list(cfg.value("rank", json::array()));
  s.steps = int_list(cfg.value("step", json::array()));
  // msprobe's _get_allowed_data_mode: a direction not named at all means both.
  const json modes = cfg.value("data_mode", json::array({"all"}));
  auto has = [&](const char *m) {
    for (const auto &e : modes)
      if (e.is_string() && e.get<std::string>() == m) return true;
    return false;
  };
  s.allow_forward = has("all") || has("forward") || !has("backward");
  s.allow_backward = has("all") || has("backward") || !has("forward");
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
    tprobe_session_counts_get(session, &s.final_counts);
    const int rc = tprobe_session_close(session);
    if (rc == TPROBE_ERROR && error.empty()) error = std::string("tprobe: closing the capture: ") + tprobe_last_error();
    s.node_inputs.clear();
    s.open_modules.clear();
    s.module_stack.clear();
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
  s.training_thread = at::RecordFunction::currentThreadId();
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
  s.collect_collectives();
  s.collect_device(true);
  s.check_failure();
  if (tprobe_stop(s.session) == TPROBE_ERROR) s.fail_and_throw("tprobe: stop");
}

int64_t step() {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  require_open(s);
  s.collect_collectives();
  s.collect_device(true);
  s.check_failure();
  const int rc = tprobe_step(s.session);  // the step advances even when it reports a detached session
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
  std::lock_guard lock(s.mutex);
  return hook_guarded(s, [&] {
    return s.entry_begin(entry, parent, static_cast<int>(stack), static_cast<int>(is_recompute));
  });
}

bool tensor(const std::string &entry, const std::string &slot, const at::Tensor &t) {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  return hook_guarded(s, [&] { return s.capture_tensor(entry, slot, t); });
}

bool value(const std::string &entry, const std::string &slot, const std::string &text) {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  return hook_guarded(s, [&] {
    return checked(tprobe_capture_value(s.session, entry.c_str(), slot.c_str(), text.c_str()), "value") ==
           TPROBE_OK;
  });
}

int64_t module_enter(const std::string &forward_entry, const std::vector<at::Tensor> &inputs,
                     const std::vector<std::string> &slots) {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  require_open(s);
  if (inputs.size() != slots.size()) throw std::runtime_error("tprobe: module_enter: one slot per input tensor needed");
  s.module_stack.push_back(forward_entry);
  if (!s.failure.empty()) return 0;
  if (!s.backward_on.load() || !at::GradMode::is_enabled()) return 0;
  open_module m;
  m.sequence_begin = at::sequence_number::peek();
  for (size_t i = 0; i < inputs.size(); ++i) state::note_edge(m.inputs, slots[i], inputs[i]);
  // Even without an input requiring grad the outputs may (parameters inside): always linked.
  const int64_t token = s.next_token++;
  s.open_modules.emplace(token, std::move(m));
  return token;
}

void module_exit(int64_t token, const std::string &backward_entry, const std::optional<std::string> &backward_parent,
                 const std::vector<at::Tensor> &outputs, const std::vector<std::string> &slots) {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  require_open(s);
  if (outputs.size() != slots.size()) throw std::runtime_error("tprobe: module_exit: one slot per output tensor needed");
  if (!s.module_stack.empty()) s.module_stack.pop_back();
  const auto it = s.open_modules.find(token);
  if (it == s.open_modules.end()) return;
  open_module m = std::move(it->second);
  s.open_modules.erase(it);
  if (!s.backward_on.load()) return;
  std::vector<std::pair<at::Tensor, std::string>> linked;
  for (size_t i = 0; i < outputs.size(); ++i) linked.emplace_back(outputs[i], slots[i]);
  auto link = make_link(backward_entry, backward_parent);
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
         {"operators", s.operators},       {"unsupported", s.unsupported},
         {"device_summaries", s.device_summaries}, {"errors", s.errors},
         {"error", s.failure}};
  return j.dump();
}

}  // namespace tprobe::torch_capture
