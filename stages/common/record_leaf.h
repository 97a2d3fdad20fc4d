// record_leaf.h: a data record as the leaf its slot gets in dump.json, the one way every stage
// that rebuilds dump.json's entries from the stream names a tensor: the writer (as text), and the
// live stages that need the entry itself (tprobe-precheck-live replays it). msprobe's rules are
// core's (dump_semantics.h: tensor_facts, tensor_leaf_json, slot_locate, entry_slot_json); what
// is here is only how a record header carries those facts.
//
// Header-only and pure: no I/O, thread-safe.
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "dtype.h"
#include "dump_semantics.h"
#include "record.h"
#include "tensor_stats.h"

namespace tprobe {

// A tensor leaf's type and dtype as dump.json spells them for the session's framework: the
// record's own type when it names one, else the framework's tensor type; a foreign dtype (no
// payload, no stats) as the framework named it, else tprobe's dtype in the framework's spelling.
struct record_leaf_names {
  std::string type, dtype;
};
inline record_leaf_names record_leaf_names_of(const record_header &h, std::string_view framework) {
  return {h.tensor_type.empty() ? tensor_type_default(framework) : h.tensor_type,
          h.foreign_dtype.empty() ? dtype_framework_name(h.type, framework) : h.foreign_dtype};
}

// The facts of a tensor record's leaf (views into `h` and `names`, which must outlive them).
// Statistics: h.stats (null statistics when absent); `data_name`: its file, "" when not saved.
inline tensor_facts record_tensor_facts(const record_header &h, const record_leaf_names &names,
                                        std::string_view data_name = {}) {
  return {names.type,       names.dtype, &h.shape, h.stats ? &*h.stats : nullptr, h.requires_grad,
          data_name,        (h.flags & RECORD_FLAG_UNINITIALIZED) != 0};
}

// Whether the writer saves this tensor record's data as a file (RECORD_FLAG_SAVE with a payload).
inline bool record_tensor_saved(const record &r) {
  return r.header.kind == record_kind::tensor && r.has_payload() && (r.header.flags & RECORD_FLAG_SAVE) != 0;
}

// The file name of a saved tensor (docs/msprobe-compat.md §2.3), "{entry}.{slot}.npy", or ".pt" for the
// session's tensor_format "pt".
inline std::string record_data_name(const record_header &h, std::string_view tensor_format) {
  return h.entry + "." + h.slot + (tensor_format == "pt" ? ".pt" : ".npy");
}

// How record_fill_missing_stats works: `recompute` also replaces statistics that came complete
// (tprobe-stats --recompute); `runner` reads a large payload's parts (none: all on this thread).
struct record_stats_fill {
  bool recompute = false;
  parallel_runner *runner = nullptr;
};

// The one statistics path of the stages (tprobe-stats, the writer, precheck-live): a tensor record
// that came with its data but without (all of) its statistics gets them here, with core's
// computation (tensor_stats_compute, the same the capture runs in place), as `stats` (the
// session's precision and half_mean, stats_options_of_session) says; the CRC-32 too when its
// RECORD_FLAG_CRC32 asks for it. The capture computes them in place for most tensors and
// tprobe-stats for the rest, but a pipeline whose statistics stage was replaced by a user's own
// stage must still give complete leaves. A record without a payload (a foreign dtype's has none)
// is left as it is. Returns whether it computed them; throws framing_error when the payload's
// size is not the shape's.
inline bool record_fill_missing_stats(record &r, stats_options stats, const record_stats_fill &how = {}) {
  auto &h = r.header;
  const bool want_crc = (h.flags & RECORD_FLAG_CRC32) != 0;
  const bool complete = h.stats && (!want_crc || h.stats->crc32);
  if (!r.has_payload() || !h.foreign_dtype.empty() || (complete && !how.recompute)) return false;
  const auto bytes = r.payload_bytes();
  const uint64_t count = h.element_count();
  if (bytes.size() != count * dtype_size(h.type))
    throw framing_error(r.describe() + ": payload is " + std::to_string(bytes.size()) + " bytes, shape needs " +
                        std::to_string(count * dtype_size(h.type)));
  stats.crc32 = want_crc;
  stats.runner = how.runner;
  h.stats = tensor_stats_compute(bytes.data(), h.type, count, h.shape.empty(), stats);
  return true;
}

// The leaf a data record puts at its slot: a tensor's (tensor_leaf_json) or a value record's meta
// (decoded as a tree: not with record_decode_options::value_meta_as_msgpack).
inline nlohmann::ordered_json record_leaf_json(const record &r, std::string_view framework,
                                               std::string_view data_name = {}) {
  if (r.header.kind != record_kind::tensor) return r.header.meta;
  const record_leaf_names names = record_leaf_names_of(r.header, framework);
  return tensor_leaf_json(record_tensor_facts(r.header, names, data_name));
}

// Where a record's leaf goes in its entry: slot_locate, with the record's own path when it has one
// (a parameters_grad entry's path is always its one-element list).
inline slot_location record_slot_location(const record_header &h, const entry_name &name) {
  slot_location where = slot_locate(name, h.slot);
  if (h.path && !name.is_parameters_grad()) where.path = *h.path;
  return where;
}

}  // namespace tprobe
