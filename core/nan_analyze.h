// nan_analyze.h: which operator produced the first NaN/Inf, on which rank (docs/msprobe-compat.md §5.2).
//
// One analysis, two front doors: `tprobe nan-analyze STEPDIR` reads a step's rank folders
// (nan_load_step) and the live stage `tprobe-nan-live` assembles the same per-rank entry objects
// from record streams; both call nan_analyze() on nan_rank values and write nan_result_json().
//
// Input. Per rank, the entries of one step in call order, each as its dump.json object (the
// "data" value of one key: input_args / input_kwargs / parameters / output for a forward entry,
// input / output for a backward one), plus its stack (stack.json) and parent (construct.json).
// A tensor is any object with a "Max" or "Min" key (msprobe's check_item_anomaly): its state is
// nan when Max or Min is NaN, inf when one is ±Inf (numbers, or the strings "nan", "inf", "-inf"
// that msprobe also accepts), else clean; a leaf with "uninitialized": true is not looked at (the
// memory of torch.empty and friends). Mean and Norm are not used: an Inf next to a -Inf gives a
// NaN mean without any NaN element.
//
// Classification of one call (forward or backward; parameters_grad and debug entries are never
// candidates). Inputs are the tensors of input_args, input_kwargs and parameters (forward) or
// input (backward), outputs those of output; tensors an allow rule ignores are left out.
//   producer     inputs clean, an output non-finite;
//                or inputs with Inf but no NaN and an output with NaN (inf - inf, 0 * inf, a
//                softmax row that is all -inf): a NaN is a new event even where an Inf was
//                expected, e.g. behind an intentional -inf mask;
//   propagator   any other call with a non-finite output (it only passed on what it got);
//   clean        outputs finite (an Inf absorbed, e.g. softmax of a masked row, is no anomaly).
// A communication call (Distributed.{all_reduce, broadcast, send, recv, …}, the list of §5.2)
// whose inputs are clean but whose output is not is a propagator when the input of a peer in the
// same communication was non-finite: the producer is on that peer. When no dumped peer had a
// non-finite input it is a producer (an fp16 sum that overflows); if some peers are missing from
// the dump the verdict says so (peers_missing).
//
// Allow rules (nan_rules) say which tensors are non-finite on purpose; msprobe's ignore rules
// (msprobe/core/overflow_check/ignore_rules.yaml) and what users need:
//   - outputs of empty, empty_like, empty_strided, new_empty, new_empty_strided (any prefix):
//     uninitialised memory;
//   - outputs of masked_fill, masked_fill_, full, full_like, new_full, fill, fill_, index_fill,
//     index_fill_ when the call's input tensors are clean: an -inf attention mask, a constant;
//   - receive buffers (input.0) of recv, irecv, all_gather, _all_gather_base,
//     all_gather_into_tensor, reduce_scatter, _reduce_scatter_base, reduce_scatter_tensor,
//     all_to_all, all_to_all_single (any rank), and of broadcast, scatter, gather on the receiving
//     rank (communication type dst).
// A config may add rules and may switch the defaults off (nan_rules_from_json).
//
// Order across ranks (msprobe's layers). Per rank, communication calls split the calls into
// segments. Communication calls of different ranks that are the same communication are joined:
// collectives by entry name ("Distributed.all_reduce.1.forward" on every rank; call counts are
// per process, so the n-th all_reduce of each rank), point-to-point by pairing the k-th send from
// s to d with the k-th recv on d from s. A joined communication's layer is one more than the
// largest layer of the communications that precede it on any of its ranks, so anything before it
// on any of its ranks has a smaller layer. A compute call gets the layer of the communication
// that follows it on its rank (after the last one: that layer + 1) and a sub_layer, its index
// in the segment; a communication call sorts after the compute calls of its layer. The verdict
// is the producer with the smallest (layer, communication?, sub_layer, rank). Producers of other
// ranks in the same layer happened concurrently with it: they are listed too (`also`).
//
// Errors: usage_error for a bad rule document or a step folder without rank folders,
// system_error / usage_error from pyjson_load_file for an unreadable or invalid file (the message
// names it). Thread-safe: pure functions except the file readers and writers.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace tprobe {

enum class nan_state : uint8_t { clean, inf, nan };  // ordered: nan dominates inf

// The state of one dump.json leaf: clean for anything that is not a tensor with statistics, or is
// marked "uninitialized": true.
nan_state nan_leaf_state(const nlohmann::ordered_json &leaf);

// ---- allow rules ---------------------------------------------------------------------------

// One rule: tensors of calls to `op` that are non-finite on purpose.
//   op            an API name ("masked_fill": Torch.masked_fill, Tensor.masked_fill, …) or
//                 "Prefix.api" ("Tensor.masked_fill_"), compared case-insensitively with the
//                 entry's first two segments; "*" matches every API. Module entries never match.
//   slots         slot prefixes whose tensors are ignored: "output", "input.0", "kwargs.out";
//                 a prefix matches whole segments ("input.0" matches "input.0.1", not "input.01")
//   inputs_clean  only when the call's other (not ignored) input tensors are clean
//   receiver      only on the receiving rank of a directed communication (type dst)
struct nan_rule {
  std::string op;
  std::vector<std::string> slots;
  bool inputs_clean = false;
  bool receiver = false;
};

struct nan_rules {
  std::vector<nan_rule> rules;  // the defaults above, then the config's
};

nan_rules nan_rules_default();
// The config's "nan_analyze" object (capture config key tprobe.nan_analyze):
//   {"allow": [{"op": "my_mask", "slots": ["output"], "inputs_clean": true, "receiver": false}, …],
//    "default_allow": true}
// null gives the defaults. Unknown keys, a rule without op or slots, a slot that is not
// input/kwargs/output/parameters[.path] are usage_error naming `where` and the field.
nan_rules nan_rules_from_json(const nlohmann::ordered_json &doc, const std::string &where);

// ---- input ---------------------------------------------------------------------------------

struct nan_entry {
  std::string name;               // "Torch.exp.0.forward"
  nlohmann::ordered_json data;    // its dump.json object
  std::vector<std::string> stack;  // stack.json lines ([] when unknown)
};

struct nan_rank {
  int32_t rank = 0;  // "rank" folder and rank -1 streams count as rank 0, as msprobe's do
  std::vector<nan_entry> entries;                // call order
  std::map<std::string, std::string> parent_of;  // construct.json (entries without a parent absent)
  std::string source;                            // "step0/rank1" or "rank 1 of the stream": for notes
};

// A rank folder that could not be read: its files are not in the analysis.
struct nan_rank_error {
  int32_t rank = 0;
  std::string source;   // the rank folder
  std::string message;  // the error's one line, naming the file
  bool system = false;  // a file that could not be read (system_error), not one that is invalid
};

// Reads STEPDIR's rank folders ("rank" → 0, "rankN" → N, other names ignored), each needing
// dump.json; stack.json and construct.json are read when present (their absence is a note in
// `warnings`). Throws usage_error when there is no rank folder, system_error when STEPDIR cannot
// be listed. A rank folder whose files cannot be read or parsed: with `errors`, the rank is left
// out and its error appended there (the other ranks are still read); without, its
// system_error/usage_error (naming the file) is thrown.
std::vector<nan_rank> nan_load_step(const std::string &step_dir, std::vector<std::string> &warnings,
                                    std::vector<nan_rank_error> *errors = nullptr);

// stack.json in either of msprobe's formats: {"0": [[names…], [lines…]], …} or {name: [lines…]}.
std::map<std::string, std::vector<std::string>> nan_stacks_from_json(const nlohmann::ordered_json &stack);

// ---- analysis ------------------------------------------------------------------------------

enum class nan_role : uint8_t { clean, producer, propagator };

struct nan_finding {
  int32_t rank = 0;
  size_t index = 0;  // in nan_rank::entries
  std::string entry;
  nan_role role = nan_role::clean;
  std::string why;  // "inputs clean, output.0 inf", "output.0 nan from inputs with inf only", …
  bool communication = false;
  bool peers_missing = false;  // a communication producer some of whose peers are not in the input
  int64_t layer = 0, sub_layer = 0;
};

struct nan_verdict {
  nan_finding first;                // the earliest producer
  std::vector<nan_finding> also;    // other ranks' first producers in the same layer
  std::vector<nan_finding> producers;  // every producer found, in order
  uint64_t anomalous = 0;           // calls with a non-finite output (producers and propagators)
  uint64_t allowed = 0;             // calls whose non-finite tensors the rules explained
};

// nullopt: no producer (nothing non-finite, or only what the rules allow).
std::optional<nan_verdict> nan_analyze(const std::vector<nan_rank> &ranks, const nan_rules &rules);

// msprobe's anomaly_analyze file: {"rank_R": [{"op_name", "data_info", "construct_info",
// "stack_info"}, …], …} with the verdict's node first, then `also`. data_info is {input_args,
// input_kwargs, output} (forward) or {input, output} (backward); construct_info the ancestor
// chain from construct.json, root first, ending with the entry; stack_info its stack lines.
nlohmann::ordered_json nan_result_json(const std::vector<nan_rank> &ranks, const nan_verdict &v);

// The one-line answer:
//   "first producer: rank 1 Torch.exp.0.forward (inputs clean, output.0 inf; layer 1)"
// plus "; also rank 0 X (same layer)" for each of `also`.
std::string nan_answer_line(const nan_verdict &v);

// Writes nan_result_json() to `dir`/anomaly_analyze_{ns}.json (created O_EXCL; indent 2, NaN
// written as Python does) and returns the path. Throws system_error.
std::string nan_write_result(const std::string &dir, const nlohmann::ordered_json &result);

std::string_view nan_role_name(nan_role r);  // "clean", "producer", "propagator"

// A communication call as the analysis reads it (§5.2), for other analyses that join the calls of
// several ranks (the graph compare's links across ranks): the API ("send", "all_reduce"), the other
// rank of a point-to-point call or the root of a directed collective (msprobe's src/dst keyword, or
// tprobe's first integer argument), whether this rank sends (send, isend, a broadcast or scatter
// from here), receives (recv, irecv, a gather or reduce to here) or both (the rest), and the group's
// ranks where the dump names them. nullopt for an entry that is no forward communication call.
struct communication_facts {
  std::string api;
  std::optional<int64_t> peer;  // send/recv: the other rank; broadcast/scatter/gather/reduce: the root
  bool point_to_point = false;  // send, isend, recv, irecv (and their object-list forms)
  bool directed = false;        // a collective with a root (broadcast, scatter, gather, reduce)
  bool sends = false, receives = false;
  std::vector<int64_t> group_ranks;  // empty: not in the dump (the whole world)
};
[[nodiscard]] std::optional<communication_facts> communication_facts_of(const std::string &entry_name,
                                                                        const nlohmann::ordered_json &data, int32_t rank);

}  // namespace tprobe
