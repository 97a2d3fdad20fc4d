// dump_semantics.h: msprobe's dump semantics, in one place (docs/msprobe-compat.md §2.2, §2.3, §2.5,
// §2.6, §2.7, §2.8). The capture (C++ and, through torch.ops.tprobe, Python), the writer, the
// compare stages and the transport's tap all decide through these functions what an entry name
// means, which slots data_mode lets through, where a slot goes in dump.json and how a tensor, a
// statistic or a non-tensor value is written there. No other file re-derives any of it.
//
// Grammar (names are the keys of dump.json's "data"):
//   API entry       {Prefix}.{op}.{n}.{forward|backward}          "Functional.linear.0.forward"
//   module entry    {Module|Cell}.{path}.{Class}.{forward|backward}.{n}
//                                                                "Module.conv1.Conv2d.forward.0"
//   parameter grads {module}.parameters_grad.{k}                  "Module.fc.Linear.parameters_grad.0"
//                   (and msprobe's older "{module}.parameters_grad", read by compare)
//   anything else   "other": a debug save ("x.0.debug"), or a name tprobe does not recognise
// Slots name a place inside an entry: "{section}[.{path}]" with section input, kwargs, output or
// parameters (forward), input or output (backward), and path segments list indices or dict keys:
// "input.0", "input.1.0", "kwargs.dim", "output.0.1", "parameters.weight". A parameters_grad
// entry's slot is the parameter's name ("weight"; "parameters_grad.weight" is accepted). The
// tensor file of a slot is "{entry}.{slot}.npy" (§2.3).
//
// Everything here is a pure function of its arguments (thread-safe, no I/O, no allocation beyond
// its results). This file and dump_semantics.cpp use only the standard library and nlohmann_json,
// so that capture/torch compiles the same source with LibTorch's ABI flags (see its CMakeLists).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "tensor_stats.h"

namespace tprobe {

// ---- entry names ---------------------------------------------------------------------------

enum class entry_direction : uint8_t { none, forward, backward, parameters_grad };

// A parsed entry name. The views point into the parsed string.
struct entry_name {
  entry_direction direction = entry_direction::none;
  // The count follows the direction ("…forward.0": modules, parameters_grad) rather than
  // preceding it ("….0.forward": APIs).
  bool count_last = false;
  bool module_prefix = false;  // starts with "Module." or "Cell."
  std::string_view base;       // the name without direction and count: "Functional.linear",
                               // "Module.conv1.Conv2d"
  std::string_view count;      // "0"; empty when absent ("X.forward", "M.parameters_grad")

  bool is_forward() const { return direction == entry_direction::forward; }
  bool is_backward() const { return direction == entry_direction::backward; }
  bool is_parameters_grad() const { return direction == entry_direction::parameters_grad; }
  // A module's forward or backward, "Module.a.B.forward.0": such a forward entry gets its
  // parameters and keeps is_recompute last (docs/msprobe-compat.md §2.5).
  bool is_module() const { return count_last && module_prefix && !is_parameters_grad(); }
};

// Parses a name; never fails: a name of no known form has direction none. Whole segments are
// compared, from the end, so a module path may itself contain "forward" ("Module.forward_net…").
// The direction is the last segment (API form, or "….parameters_grad"), or the second to last
// when the last is a count (module form; for parameters_grad, any last segment, as msprobe's
// compare reads it). A direction segment that is the whole name's first segment is not one.
entry_name entry_parse(std::string_view name);

std::string_view entry_direction_name(entry_direction d);  // "forward", "backward", "parameters_grad", ""

// msprobe's RangeScope.check_name_pattern (core/data_dump/scope.py), the names a scope may give:
//   API    ^(Distributed|Functional|Torch|Tensor|Mint|MintFunctional|Primitive|Aten|VF|NPU|Jit)\..*\.\d+\.(forward|backward)$
//   module ^(Cell|Module)\..*\.(forward|backward)\.\d+$
// (`.` does not match a newline, so no name with one matches.)
bool entry_is_api_pattern(std::string_view name);
bool entry_is_module_pattern(std::string_view name);

// Operators that only allocate: their outputs hold whatever the allocator held (empty,
// empty_like, empty_strided, new_empty, new_empty_strided, empty_permuted; resize_ keeps the old
// data and is not one). True for a forward entry of one of them, whatever its prefix (Torch.,
// Tensor., Functional.): its outputs are dumped as uninitialized, never as data.
bool entry_allocates_only(std::string_view entry);

// Builders, the inverse of entry_parse.
std::string entry_api_name(std::string_view prefix, std::string_view op, int64_t n, entry_direction d);
std::string entry_module_name(std::string_view module, int64_t n, entry_direction d);  // module = "Module.a.B"
std::string entry_parameters_grad_name(std::string_view module, int64_t k);

// The same entry in another direction, in the same form: "X.3.forward" → "X.3.backward",
// "Module.a.B.forward.3" → "Module.a.B.backward.3". "" when `name` has no forward/backward
// direction.
std::string entry_with_direction(std::string_view name, entry_direction d);
// The backward entry of a forward entry ("" when `forward` is not one).
inline std::string entry_backward_of(std::string_view forward) {
  return entry_parse(forward).is_forward() ? entry_with_direction(forward, entry_direction::backward) : std::string();
}

// ---- slots ---------------------------------------------------------------------------------

// The backward slot a forward slot's gradient goes to (§2.5: a backward's "input" holds the
// gradients of the forward outputs, its "output" those of the forward inputs): "input.1.0" →
// "output.1.0", "output.0" → "input.0"; "" for slots that have no place in a backward entry
// (kwargs, parameters).
std::string slot_backward_of(std::string_view forward_slot);

// One step of the nesting path under a section: a list index or a dict key.
using dump_path_element = std::variant<int64_t, std::string>;

// Where a slot's leaf goes in its entry's JSON object.
struct slot_location {
  std::string section;  // key in the entry: input_args, input_kwargs, output, parameters, input,
                        // or for a parameters_grad entry the parameter's name
  std::vector<dump_path_element> path;  // under the section
  bool whole_entry = false;             // a debug save's "debug" slot is the entry's value itself
};

// msprobe's layout (§2.5): forward "input" → input_args, "kwargs" → input_kwargs (its first path
// segment is the keyword, never an index), "parameters.{name}" → parameters/{name}; backward
// "input"/"output" stay; a parameters_grad entry maps each parameter to a one-element list
// ({param: [leaf]}). Digit-only path segments are list indices, others dict keys; a quoted
// segment (slot_key_append) is always a dict key.
slot_location slot_locate(const entry_name &entry, std::string_view slot);

// The slot grammar of dict keys. A slot is dot-separated segments: the section, then per level a
// list index (ASCII digits) or a dict key. A key that would read as something else (all digits,
// empty, holding a dot, or starting with an apostrophe) is quoted: ' + the key with each '
// doubled + ', so that {"a": t, 3: u, "head.0": v} nests as three keys ("output.a",
// "output.'3'", "output.'head.0'"), as msprobe writes them, never as list items or deeper levels.
// Producers quote (the capture's C API takes quoted slots); the capture sends a record the
// displayed slot and the path (record.h), so stages see msprobe's names.
void slot_key_append(std::string &slot, std::string_view key);  // appends "." and the segment
bool slot_has_quoted_key(std::string_view slot);
// The slot as msprobe names it (tensor file names, compare rows): every key unquoted,
// "output.'head.0'" → "output.head.0".
std::string slot_display(std::string_view slot);
// Reads the segment at `at` (after a dot): returns where it ends (its dot, or slot.size());
// a quoted one is unquoted into `key` (quoted = true), a plain one is slot[at, end).
size_t slot_segment_read(std::string_view slot, size_t at, std::string &key, bool &quoted);

// The io kind of a slot's section as data_mode sees it.
enum class slot_io : uint8_t { unknown, input, output, parameters };
slot_io slot_io_of(std::string_view slot);  // by the slot's first segment

// msprobe's row name and state of a slot in compare results: kwargs are inputs
// ("{entry}.input.{key}", "input"), a parameters_grad entry's rows are "{entry}.{param}" with
// state "parameters_grad", others "{entry}.{slot}" with the section as state.
std::pair<std::string, std::string> slot_compare_row(std::string_view entry, std::string_view slot);

// ---- data_mode -----------------------------------------------------------------------------

// msprobe's data_mode filter: the config's list ("all", "forward", "backward", "input",
// "output"), as _get_allowed_data_mode (msprobe core/data_dump/data_processor/base.py) reads it:
// "all" allows everything; otherwise a direction axis with nothing named allows both directions,
// and likewise the io axis. Per section:
// - forward input_args/input_kwargs: forward and input; forward output: forward and output;
// - forward parameters: forward alone (analyze_forward adds them to any forward entry it writes);
// - backward input / output: backward and input / backward and output;
// - parameters_grad: msprobe's PyTorch hook manager (_register_param_hook in
//   pytorch/hook_module/pt_hook_manager.py) registers the gradient hooks unless the *raw* list
//   names "forward" without "backward", and analyze_params checks no io kind. So
//   parameters_grad follows the direction axis only: ["input"] and ["output"] keep it, ["forward"]
//   drops it, ["backward"] keeps it. (tprobe's capture used to require "output" as well, and its
//   writer filtered nothing: both now decide here.)
// - an entry or a slot of no known kind is not filtered on that axis.
class data_mode_filter {
 public:
  data_mode_filter() = default;  // ["all"]
  explicit data_mode_filter(const std::vector<std::string> &modes);
  // From the session record's / config's JSON list; a missing or non-list value means ["all"].
  static data_mode_filter from_json(const nlohmann::ordered_json &modes);

  // Task "structure": msprobe analyzes nothing (forward_data_collect skips analyze_forward), so
  // dump.json's data stays {} while stack.json and construct.json are written as at any task. No
  // entry and no slot is allowed; forward() and backward(), the directions a capture observes for
  // the stacks and the tree, are unchanged.
  data_mode_filter &without_values() {
    values_ = false;
    return *this;
  }

  bool allows_everything() const { return values_ && forward_ && backward_ && input_ && output_ && parameters_grad_; }
  bool allows(const entry_name &entry, std::string_view slot) const;
  bool allows(std::string_view entry, std::string_view slot) const { return allows(entry_parse(entry), slot); }
  // Whether anything of an entry of this direction can be written (forward: the forward
  // direction; a backward entry: backward; parameters_grad as above; other: always).
  bool allows_entry(const entry_name &entry) const;
  // Whether a section of a new entry's skeleton is written (the writer's empty input_args etc.).
  bool forward() const { return forward_; }
  bool backward() const { return backward_; }
  bool input() const { return input_; }
  bool output() const { return output_; }

 private:
  bool forward_ = true, backward_ = true, input_ = true, output_ = true, parameters_grad_ = true, values_ = true;
};

// What a session record's meta (the capture's effective config) lets into dump.json: its
// data_mode list, and nothing at task "structure" (without_values).
data_mode_filter data_mode_of_session(const nlohmann::ordered_json &session_meta);

// ---- a new entry ---------------------------------------------------------------------------

// What a new entry holds before any value arrives (msprobe's analyze_forward / analyze_backward
// write the sections, empty until filled), in msprobe's key order: a forward entry input_args
// (list) and input_kwargs (dict) when data_mode lets forward inputs through, then its
// is_recompute (an API's; a module keeps it last, entry_slot_json), output (list) for forward
// outputs, and for a module its parameters (dict, {} for a module without any); a backward entry
// input and output (lists). Other entries start empty. The writer builds its text tree from it
// and entry_skeleton_json the same entry as JSON, so every reader of a live stream sees the entry
// dump.json will hold. emit(key, kind) per section, kind one of these:
enum class entry_section : uint8_t { list, dict, is_recompute };
template <typename Emit>
void entry_skeleton(const entry_name &name, const data_mode_filter &modes, bool has_is_recompute, Emit &&emit) {
  if (name.is_forward()) {
    if (modes.forward() && modes.input()) emit("input_args", entry_section::list), emit("input_kwargs", entry_section::dict);
    if (has_is_recompute && !name.is_module()) emit("is_recompute", entry_section::is_recompute);
    if (modes.forward() && modes.output()) emit("output", entry_section::list);
    if (name.is_module() && modes.forward() && (modes.input() || modes.output())) emit("parameters", entry_section::dict);
  } else if (name.is_backward()) {
    if (modes.backward() && modes.input()) emit("input", entry_section::list);
    if (modes.backward() && modes.output()) emit("output", entry_section::list);
  }
}
// The same as a JSON object; `is_recompute` is the entry record's meta value, nullptr when absent.
nlohmann::ordered_json entry_skeleton_json(const entry_name &name, const data_mode_filter &modes,
                                           const nlohmann::ordered_json *is_recompute);
// The node of `entry` (an entry object of dump.json's data, as entry_skeleton_json began it)
// where a slot's leaf goes (slot_locate; a record's own path in where.path), made on the way as
// the writer makes it: list items padded with null, dict keys appended; a module forward's
// is_recompute kept last. `entry` itself for a debug save's whole value. Throws
// std::invalid_argument (this file stays standard library only) for a path that goes through a
// filled list by key or a filled dict by index, or a list index past 2^20: the writer refuses
// such a record.
nlohmann::ordered_json &entry_slot_json(nlohmann::ordered_json &entry, const entry_name &name, const slot_location &where);

// ---- dump.json leaves ----------------------------------------------------------------------

// How statistics computed for a session (a stage's, of a payload that came without them) are
// taken, from its session record's meta: precision "high" (high_precision) and half_mean
// "rounded_sum" (half_mean_of_rounded_sum, transport/record.h). A non-object meta: the defaults.
stats_options stats_options_of_session(const nlohmann::ordered_json &session_meta);

// A statistic as dump.json writes it (§2.6): null, true/false, an integer or a real (NaN and
// Inf stay IEEE values; pyjson_dump writes them as Python does).
nlohmann::ordered_json stat_json(const stat_value &v);

// The tensor type written when the producer did not name one: "torch.Tensor" for pytorch and
// mindtorch, "mindspore.Tensor", else "numpy.ndarray".
std::string tensor_type_default(std::string_view framework);

// The facts of one tensor as dump.json needs them. `stats` null: a statistics-less tensor (a
// dtype or layout tprobe cannot read, or statistics not computed): Max/Min/Mean/Norm are null.
struct tensor_facts {
  std::string_view type;   // "torch.Tensor"
  std::string_view dtype;  // as dumped: "torch.float32"
  const std::vector<int64_t> *shape = nullptr;
  const tensor_stats *stats = nullptr;
  bool requires_grad = false;
  std::string_view data_name;  // "" when the data was not saved
  // The output of an allocation-only operator (entry_allocates_only): memory nobody wrote, so no
  // statistics, checksum or file, and the leaf says "uninitialized": true (a tprobe key msprobe
  // ignores), which compare and nan-analyze read.
  bool uninitialized = false;
};

// §2.6, PyTorch key order: type, dtype, shape, Max, Min, Mean, Norm, requires_grad,
// [data_name], [md5] (md5 = the CRC-32 as 8 lowercase hex digits, when computed).
nlohmann::ordered_json tensor_leaf_json(const tensor_facts &t);
// The same leaf as text, appended to `out`: exactly pyjson_dump_append(out, tensor_leaf_json(t), 1,
// level), without the tree (the writer keeps its leaves so, made for the depth they sit at:
// stages/stream/writer/dump_document.h). Defined in dump_text.cpp.
void tensor_leaf_text_append(std::string &out, const tensor_facts &t, int level = 0);

// The leaf's fields in the order above, for every rendering of it: emit(key, value) with a value
// that is a std::string_view, the shape (const std::vector<int64_t> &), a statistic
// (const stat_value &: null, bool, integer or real) or a bool.
template <typename Emit>
void tensor_leaf_fields(const tensor_facts &t, Emit &&emit) {
  static const std::vector<int64_t> no_shape;
  emit("type", t.type);
  emit("dtype", t.dtype);
  emit("shape", t.shape ? *t.shape : no_shape);
  const tensor_stats none;
  const tensor_stats &s = t.stats ? *t.stats : none;
  emit("Max", s.max);
  emit("Min", s.min);
  emit("Mean", s.mean);
  emit("Norm", s.norm);
  emit("requires_grad", t.requires_grad);
  if (t.uninitialized) {
    emit("uninitialized", true);
    return;  // no file, no checksum: nothing worth reading was there
  }
  if (!t.data_name.empty()) emit("data_name", t.data_name);
  if (s.crc32) {
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", static_cast<unsigned>(*s.crc32));
    emit("md5", std::string_view(hex, 8));
  }
}

// Non-tensor values (§2.7), built from typed facts. Reals: NaN and ±Inf are written as msprobe's
// json.dump writes them, the bare tokens NaN, Infinity and -Infinity (§2.4), so every reader sees
// a float; the texts are JSON as pyjson_parse reads it (core/pyjson.h), and so is the capture's
// value text. The tree value_real holds the IEEE value (pyjson_dump writes it as a token,
// nlohmann's dump() as null), so a capture hands reals on as text, the *_append forms. Older
// tprobe dumps spelled them as the strings "nan", "inf", "-inf": readers take both
// (value_leaf_real).
//
// The four commonest leaves are defined once, as JSON text appended to `out`: the capture's hot
// path hands a leaf to the C API as text, and this builds it with no DOM and, once `out` has
// grown, no allocation. value_bool, value_int, value_real and value_text are those leaves as trees.
void value_bool_append(std::string &out, bool v);
void value_int_append(std::string &out, int64_t v, std::string_view type = "int");
void value_real_append(std::string &out, double v, std::string_view type = "float");
void value_text_append(std::string &out, std::string_view type, std::string_view text);
// A real as a dump may hold it: a number, or one of the strings "nan", "inf",
// "-inf" that tprobe wrote for non-finite reals before it wrote Python's tokens. nullopt for
// anything else. Readers use it where a real belongs: a float leaf's value (type "float" or a
// numpy float type, value_real_type) and an ndarray's statistics.
std::optional<double> value_leaf_real(const nlohmann::ordered_json &v);
// Whether a value leaf's type names a real: Python's "float", numpy's "float16/32/64", "float_",
// "longdouble", "double", "single", "half".
bool value_real_type(std::string_view type);
nlohmann::ordered_json value_bool(bool v);                                      // {"type":"bool","value":v}
nlohmann::ordered_json value_int(int64_t v, std::string_view type = "int");    // numpy ints: type "int64"
nlohmann::ordered_json value_real(double v, std::string_view type = "float");  // numpy: "float32"
nlohmann::ordered_json value_text(std::string_view type, std::string_view text);  // str, torch.dtype, torch.device,
                                                                                   // torch.layout, ellipsis ("...")
nlohmann::ordered_json value_memory_format(std::string_view name);  // {"type":"torch.memory_format","format":name}
nlohmann::ordered_json value_complex(double re, double im);         // {"type":"complex","value":"(re+imj)"}
// A list of ints or nulls under "value": torch.Size, slice ([start, stop, step]).
nlohmann::ordered_json value_int_list(std::string_view type, const std::vector<std::optional<int64_t>> &v);
// A numpy ndarray: type, dtype, shape, Max, Min, Mean, Norm (reals spelled as above), as text.
void value_ndarray_append(std::string &out, std::string_view dtype, const std::vector<int64_t> &shape,
                          const stat_value &max, const stat_value &min, const stat_value &mean,
                          const stat_value &norm);

// ---- stack.json ----------------------------------------------------------------------------

// One frame as msprobe writes it (§2.8): "File {file}, line {line}, in {function}, \n {code}",
// code stripped of surrounding whitespace.
std::string stack_line(std::string_view file, int64_t line, std::string_view function, std::string_view code);

}  // namespace tprobe
