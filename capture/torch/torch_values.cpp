// torch_values.cpp: value encoding, how an operator argument or result becomes capture calls
// (torch_values.h, capture_state.h).
#include "torch_values.h"

#include <cctype>
#include <cmath>
#include <vector>

#include "capture_state.h"
#include "dump_semantics.h"

namespace tprobe::torch_capture {

using json = nlohmann::ordered_json;

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
  // The rest as torch prints them: c10's name lowercased (QInt8 → torch.qint8,
  // Float8_e4m3fn → torch.float8_e4m3fn).
  std::string name = c10::toString(t);
  for (char &c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return "torch." + name;
}

// msprobe's JSON leaf of a non-tensor argument (docs/msprobe-compat.md §2.7), as text. `arg` is the
// schema's argument name: ints named dtype / memory_format / layout are enums, an int named
// reduction the str its Python API took.
void ivalue_leaf_append(std::string &out, const c10::IValue &v, std::string_view arg) {
  // A list of leaves: "[leaf,leaf,…]".
  auto list = [&out](const auto &items, auto &&leaf) {
    out += '[';
    bool first = true;
    for (const auto &item : items) {
      if (!first) out += ',';
      first = false;
      leaf(item);
    }
    out += ']';
  };
  if (v.isNone()) {
    out += "null";
  } else if (v.isBool()) {
    value_bool_append(out, v.toBool());
  } else if (v.isInt()) {
    const int64_t i = v.toInt();
    if (arg == "dtype" && i >= 0 && i < static_cast<int64_t>(c10::ScalarType::NumOptions)) {
      value_text_append(out, "torch.dtype", python_dtype_name(static_cast<c10::ScalarType>(i)));
    } else if (arg == "memory_format" && i >= 0 && i < 4) {
      static const char *const names[] = {"contiguous_format", "preserve_format", "channels_last", "channels_last_3d"};
      out += value_memory_format(names[i]).dump();
    } else if (arg == "layout") {
      value_text_append(out, "torch.layout", i == 0 ? "torch.strided" : "torch.sparse_coo");
    } else if (arg == "reduction" && i >= 0 && i < 3) {
      // at::Reduction::Reduction: the str the loss's Python API took, and msprobe records, for
      // the int its ATen operator gets (F.cross_entropy(reduction="mean") → cross_entropy_loss(…, 1, …)).
      static const char *const names[] = {"none", "mean", "sum"};
      value_text_append(out, "str", names[i]);
    } else {
      value_int_append(out, i);
    }
  } else if (v.isDouble()) {
    value_real_append(out, v.toDouble());
  } else if (v.isComplexDouble()) {
    const auto c = v.toComplexDouble();
    out += value_complex(c.real(), c.imag()).dump();
  } else if (v.isString()) {
    value_text_append(out, "str", v.toStringRef());
  } else if (v.isDevice()) {
    value_text_append(out, "torch.device", v.toDevice().str());
  } else if (v.isIntList()) {
    list(v.toIntList(), [&out](int64_t i) { value_int_append(out, i); });
  } else if (v.isDoubleList()) {
    list(v.toDoubleList(), [&out](double d) { value_real_append(out, d); });
  } else if (v.isBoolList()) {
    list(v.toBoolList(), [&out](bool b) { value_bool_append(out, b); });
  } else if (v.isList()) {
    list(v.toListRef(), [&out](const c10::IValue &e) { ivalue_leaf_append(out, e, {}); });
  } else if (v.isTuple()) {
    list(v.toTupleRef().elements(), [&out](const c10::IValue &e) { ivalue_leaf_append(out, e, {}); });
  } else {
    out += "null";  // generators, objects: msprobe writes null for unsupported types
  }
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
bool wrapped_number_append(std::string &out, const at::Tensor &t) {
  if (!t.unsafeGetTensorImpl()->is_wrapped_number() || !t.device().is_cpu() || t.dim() != 0) return false;
  switch (t.scalar_type()) {
    case c10::ScalarType::Double: value_real_append(out, *static_cast<const double *>(t.data_ptr())); return true;
    case c10::ScalarType::Long: value_int_append(out, *static_cast<const int64_t *>(t.data_ptr())); return true;
    case c10::ScalarType::Bool: value_bool_append(out, *static_cast<const bool *>(t.data_ptr())); return true;
    default: return false;
  }
}

// ---- state: entries and tensors (mutex held) ----

bool state::capture_value(const std::string &entry, const std::string &slot, const json &leaf) {
  // Leaves without reals only: nlohmann's dump() writes NaN as null (reals go as text,
  // value_real_append).
  return capture_value_text(entry, slot, leaf.dump());
}

bool state::capture_value_text(const std::string &entry, const std::string &slot, const std::string &text) {
  // Every caller's text comes from core's encoders (value_*_append, or a leaf's dump).
  return checked(tprobe_capture_value_unchecked(session, entry.c_str(), slot.c_str(), text.c_str()), "value") ==
         TPROBE_OK;
}

bool state::capture_leaf(const std::string &entry, const std::string &slot, const c10::IValue &v, std::string_view arg) {
  leaf_text.clear();
  ivalue_leaf_append(leaf_text, v, arg);
  return capture_value_text(entry, slot, leaf_text);
}

bool state::capture_unsupported(const std::string &entry, const std::string &slot, const at::Tensor &t) {
  ++unsupported;
  // Typed facts only: the writer turns them into the dump.json leaf (core/dump_semantics.h).
  const std::string dtype = python_dtype_name(t.scalar_type());
  const std::string device = t.device().str();
  const auto sizes = t.sizes();
  tprobe_tensor_facts f{};
  f.dtype = dtype.c_str();
  f.ndim = static_cast<int>(sizes.size());
  f.shape = sizes.data();
  f.device = device.c_str();
  f.requires_grad = t.requires_grad();
  return checked(tprobe_capture_facts(session, entry.c_str(), slot.c_str(), &f), "facts") == TPROBE_OK;
}

namespace {
bool trackable(const at::Tensor &t) { return !t.is_inference() && t.has_storage(); }
constexpr size_t contents_known_max = 16384;
}  // namespace

uint64_t state::content_of(const at::Tensor &t) {
  if (!reuse_stats || !trackable(t)) return 0;
  const c10::StorageImpl *impl = t.storage().unsafeGetStorageImpl();
  const int64_t version = t._version();
  // A known impl is the same storage, alive: the weak reference keeps any other storage from
  // taking its address.
  if (auto it = contents.find(impl); it != contents.end()) {
    if (it->second.version != version) {
      it->second.version = version;
      it->second.name = ++contents_named;
    }
    return it->second.name;
  }
  if (contents.size() >= contents_known_max) contents.clear();
  contents.emplace(impl, known_content{t.storage().getWeakStorageImpl(), version, ++contents_named});
  return contents_named;
}

void state::forget_content(const at::Tensor &t) {
  if (!t.defined() || !t.has_storage()) return;
  const c10::StorageImpl *impl = t.storage().unsafeGetStorageImpl();
  contents.erase(impl);
  // Its deferred copy, if it has one, must read it before the write.
  if (device.has_deferred.load(std::memory_order_relaxed) && device.deferred_storages.count(impl))
    flush_device_deferred();
}

void state::forget_contents_in(const c10::IValue &v) {
  if (v.isTensor()) {
    forget_content(v.toTensor());
  } else if (v.isTensorList()) {
    for (const at::Tensor &t : v.toTensorList().vec()) forget_content(t);
  } else if (v.isList()) {
    for (const c10::IValue &e : v.toListRef()) forget_contents_in(e);
  } else if (v.isTuple()) {
    for (const c10::IValue &e : v.toTupleRef().elements()) forget_contents_in(e);
  }
}

bool state::capture_host(const std::string &entry, const std::string &slot, const at::Tensor &t, DLDataType dtype,
                  bool requires_grad) {
  DLTensor dl{};
  dl.data = t.data_ptr();
  dl.device = DLDevice{kDLCPU, 0};
  dl.ndim = static_cast<int>(t.dim());
  dl.dtype = dtype;
  dl.shape = const_cast<int64_t *>(t.sizes().data());
  dl.strides = const_cast<int64_t *>(t.strides().data());
  dl.byte_offset = 0;
  const auto capture = capturing_zeroed ? tprobe_capture_tensor_zeroed : tprobe_capture_tensor_content;
  return checked(capture(session, entry.c_str(), slot.c_str(), &dl, requires_grad, content_of(t)), "tensor") ==
         TPROBE_OK;
}

namespace {

// The output of an allocation-only operator: only its shape travels, marked uninitialized (its
// memory holds whatever the allocator held: statistics or a checksum of it would be noise).
int capture_uninitialized(tprobe_session *session, const std::string &entry, const std::string &slot,
                          const at::Tensor &t, DLDataType dtype) {
  tprobe_tensor_summary s{};
  s.dtype = dtype;
  const auto sizes = t.sizes();
  s.ndim = static_cast<int>(sizes.size());
  s.shape = sizes.data();
  const std::string device = t.device().str();
  s.device = device.c_str();
  s.requires_grad = t.requires_grad();
  return tprobe_capture_uninitialized(session, entry.c_str(), slot.c_str(), &s);
}

// Memory stays uninitialized until something writes it: an allocation-only operator's output
// that reaches another operator as an input (the destination of a copy_, fill_ or out=) before any
// write is still garbage there. Tracked by its storage, weakly (a freed storage is forgotten, so a
// later tensor at the same address is never mistaken for it), and its version counter, which every
// in-place or out= write bumps. Bounded: the last few allocations only. Under the state's mutex.
struct uninitialized_storage {
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;
  int64_t version;
};
std::vector<uninitialized_storage> g_uninitialized;
constexpr size_t uninitialized_tracked_max = 64;

void remember_uninitialized(const at::Tensor &t) {
  if (!trackable(t)) return;
  if (g_uninitialized.size() >= uninitialized_tracked_max) g_uninitialized.erase(g_uninitialized.begin());
  g_uninitialized.push_back({t.storage().getWeakStorageImpl(), t._version()});
}

// True when `t` is still the unwritten memory of an allocation-only operator. One empty() check
// while nothing is tracked.
bool still_uninitialized(const at::Tensor &t) {
  if (g_uninitialized.empty() || !trackable(t)) return false;
  const c10::StorageImpl *impl = t.storage().unsafeGetStorageImpl();
  bool found = false;
  std::erase_if(g_uninitialized, [&](const uninitialized_storage &u) {
    auto strong = u.storage.lock();
    if (!strong) return true;  // freed
    if (strong.get() != impl) return false;
    if (t._version() != u.version) return true;  // written since
    found = true;
    return false;
  });
  return found;
}

}  // namespace

// Where a tensor goes: a value (undefined, a wrapped Python number), its facts (what tprobe cannot
// read), a null summary (meta), device statistics, or host data. A tensor whose memory must not be
// read (the uninitialised output of empty/empty_like) is decided here, before any branch touches
// its data.
bool state::capture_tensor(const std::string &entry, const std::string &slot, const at::Tensor &t) {
  if (!t.defined()) return capture_null(entry, slot);
  leaf_text.clear();
  if (wrapped_number_append(leaf_text, t)) return capture_value_text(entry, slot, leaf_text);
  if (DLDataType dl{}; dl_dtype_of(t.scalar_type(), dl) && !t.is_sparse() && !t.is_quantized() && !t.is_meta()) {
    const bool allocated_here = slot_io_of(slot) == slot_io::output && entry_allocates_only(entry);
    if (allocated_here) remember_uninitialized(t);
    if (allocated_here || (slot_io_of(slot) == slot_io::input && still_uninitialized(t)))
      return checked(capture_uninitialized(session, entry, slot, t, dl), "uninitialized") == TPROBE_OK;
  }
  DLDataType dtype{};
  if (!dl_dtype_of(t.scalar_type(), dtype) || t.is_sparse() || t.is_quantized() || t.is_mkldnn() ||
      (!t.is_meta() && !t.has_storage()))
    return capture_unsupported(entry, slot, t);
  const bool requires_grad = t.requires_grad();
  if (t.is_meta()) return capture_summary_null(entry, slot, t, dtype, requires_grad);
  // A device tensor never syncs the stream here: its statistics or data are enqueued and read
  // once per step (device_stats.h).
  // A plain CPU tensor is read through its memory (the C API), without an operator. The other
  // paths run operators of ours (reductions, copies), which are not the model's: the guards, which
  // cost more than the rest of a small tensor's capture, are paid only there.
  const bool plain_cpu = t.device().is_cpu() && !t.is_conj() && !t.is_neg();
  if (plain_cpu && !device_path_settings_get().on_cpu) return capture_host(entry, slot, t, dtype, requires_grad);
  at::DisableRecordFunctionGuard no_record;
  at::NoGradGuard no_grad;
  const device_path_settings &device_path = device_path_settings_get();
  if ((t.is_cuda() && !device_path.off) || (t.device().is_cpu() && device_path.on_cpu)) {
    unsigned flags = 0;
    if (checked(tprobe_capture_query(session, entry.c_str(), slot.c_str(), &flags), "query") != TPROBE_OK)
      return false;
    return capture_device(entry, slot, t, dtype, requires_grad, flags);
  }
  if (!t.device().is_cpu()) return capture_host(entry, slot, t.cpu().resolve_conj().resolve_neg(), dtype, requires_grad);
  // Conjugate and negative views keep their bit in the tensor, not in memory.
  return capture_host(entry, slot, t.resolve_conj().resolve_neg(), dtype, requires_grad);
}

bool state::capture_summary_null(const std::string &entry, const std::string &slot, const at::Tensor &t,
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

// msprobe's output of a collective is its in-place buffers after the communication (§2.5). The
// operator returns before that (the caller waits on its work handle, outside any operator), so
// the buffers are read later: at the next captured operator, or at stop/step/close, by which
// time a synchronous collective has completed. An asynchronous one still in flight by then is
// read mid-communication (docs/pytorch.md).
void state::collect_collectives() {
  if (collectives.empty()) return;
  auto done = std::move(collectives);
  collectives.clear();
  // The communication writes the buffers without an operator or a version bump (gloo, NCCL write
  // their memory): what was read of them before is not their content now.
  for (const auto &c : done)
    for (const c10::IValue &a : c.arguments) forget_contents_in(a);
  for (const auto &c : done)
    for (size_t i = 0; i < c.arguments.size(); ++i)
      capture_ivalue(c.entry, "output." + std::to_string(i), c.arguments[i], {}, true, nullptr);
}

void state::capture_ivalue(const std::string &entry, const std::string &slot, const c10::IValue &v,
                    std::string_view arg, bool capture, std::vector<input_edge> *edges) {
  if (v.isTensor()) {
    const at::Tensor &t = v.toTensor();
    if (capture) capture_tensor(entry, slot, t);
    if (edges) note_edge(*edges, slot, t);
  } else if (v.isTensorList()) {
    const auto list = v.toTensorList();
    if (capture && list.size() == 0) capture_value_text(entry, slot, "[]");
    for (size_t j = 0; j < list.size(); ++j)
      capture_ivalue(entry, slot + "." + std::to_string(j), c10::IValue(list.get(j)), {}, capture, edges);
  } else if (v.isList() && !v.isIntList() && !v.isDoubleList() && !v.isBoolList()) {
    const auto list = v.toListRef();
    bool has_tensor = false;
    for (const auto &e : list) has_tensor = has_tensor || e.isTensor();
    if (!has_tensor) {
      if (capture) capture_leaf(entry, slot, v, arg);
      return;
    }
    for (size_t j = 0; j < list.size(); ++j)
      capture_ivalue(entry, slot + "." + std::to_string(j), list[j], {}, capture, edges);
  } else if (capture) {
    capture_leaf(entry, slot, v, arg);
  }
}

}  // namespace tprobe::torch_capture
