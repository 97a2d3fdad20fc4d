// record_header.cpp: the header codec of record.h section 1: the header frame encoded from a
// record_header and decoded back into one (with every check of section 2), the kind names, and
// record_header_reset. Apart from the meta (record_meta.cpp), batches (record_batch.cpp) and
// files (record_file.cpp), which use it: this is what every record pays at every hop.
#include "record.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>

#include <fmt/format.h>
// msgpuck is a header library: this file holds its tables (MP_SOURCE), hidden so that the
// capture's shared library exports none of its names. record_codec.h includes it for the others.
#pragma GCC visibility push(hidden)
#define MP_SOURCE 1
#include <msgpuck.h>
#pragma GCC visibility pop

#include "dump_semantics.h"
#include "record_codec.h"

namespace tprobe {

using namespace record_detail;

namespace {

constexpr std::array<std::string_view, 12> kind_names{
    "hello", "ack",      "session", "tensor", "value", "entry", "flush",
    "step_end", "eos", "final", "synced", "control"};

void pack_json(packer_t &p, const nlohmann::ordered_json &j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null:
    case nlohmann::json::value_t::discarded: p.pack_nil(); break;
    case nlohmann::json::value_t::boolean: p.pack(j.get<bool>()); break;
    case nlohmann::json::value_t::number_integer: p.pack(j.get<int64_t>()); break;
    case nlohmann::json::value_t::number_unsigned: p.pack(j.get<uint64_t>()); break;
    case nlohmann::json::value_t::number_float: pack_float64(p, j.get<double>()); break;
    case nlohmann::json::value_t::string: pack_str(p, j.get_ref<const std::string &>()); break;
    case nlohmann::json::value_t::binary: {
      if (is_meta_text(j)) throw std::logic_error("record_meta_text is a whole meta, not a value inside one");
      const auto &b = j.get_binary();
      p.pack_bin(static_cast<uint32_t>(b.size()));
      p.pack_bin_body(reinterpret_cast<const char *>(b.data()), static_cast<uint32_t>(b.size()));
      break;
    }
    case nlohmann::json::value_t::array:
      p.pack_array(static_cast<uint32_t>(j.size()));
      for (const auto &e : j) pack_json(p, e);
      break;
    case nlohmann::json::value_t::object:
      p.pack_map(static_cast<uint32_t>(j.size()));
      for (const auto &[k, v] : j.items()) {
        pack_str(p, k);
        pack_json(p, v);
      }
      break;
  }
}

void pack_stat(packer_t &p, const stat_value &v) {
  switch (v.k) {
    case stat_value::kind::null: p.pack_nil(); break;
    case stat_value::kind::boolean: p.pack(v.boolean); break;
    case stat_value::kind::integer: p.pack(v.integer); break;
    case stat_value::kind::real: pack_float64(p, v.real); break;
  }
}

}  // namespace

std::string_view record_kind_name(record_kind k) { return kind_names.at(static_cast<size_t>(k)); }

std::optional<record_kind> record_kind_from_name(std::string_view name) {
  for (size_t i = 0; i < kind_names.size(); ++i)
    if (kind_names[i] == name) return static_cast<record_kind>(i);
  return std::nullopt;
}

uint64_t record_header::element_count() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

nlohmann::ordered_json tensor_stats_to_json(const tensor_stats &s) {
  nlohmann::ordered_json j{{"max", stat_json(s.max)},   {"min", stat_json(s.min)}, {"mean", stat_json(s.mean)},
                           {"norm", stat_json(s.norm)}, {"nan", s.nan_count},      {"inf", s.inf_count}};
  if (s.crc32) j["crc32"] = fmt::format("{:08x}", *s.crc32);
  return j;
}

namespace {

// The header frame (prefix + msgpack map), appended to `buf`.
void header_encode_into(header_stream &buf, const record_header &h) {
  const char prefix[RECORD_PREFIX_SIZE] = {'T', 'P', static_cast<char>(RECORD_VERSION_MAJOR),
                                           static_cast<char>(RECORD_VERSION_MINOR)};
  buf.write(prefix, sizeof prefix);
  packer_t p(buf);

  const bool is_tensor = h.kind == record_kind::tensor;
  uint32_t n = 1;  // kind
  n += !h.run.empty();
  n += h.rank != -1;
  n += h.step != 0;
  n += h.seq != 0;
  n += !h.entry.empty();
  n += !h.slot.empty();
  n += h.path.has_value();
  n += is_tensor ? 4 : 0;  // dtype, shape, device, requires_grad
  n += !h.tensor_type.empty();
  n += h.flags != 0;
  n += h.codec != record_codec::raw;
  n += h.stored.has_value() ? 2 : 0;  // length, stored
  n += h.shm.has_value() ? 2 : 0;     // length, shm
  n += h.stats.has_value();
  if (!h.meta.is_null() && !h.meta_msgpack.empty())
    throw std::logic_error("record header has meta both as a tree and as msgpack bytes");
  n += !h.meta.is_null() || !h.meta_msgpack.empty();
  p.pack_map(n);

  pack_str(p, "kind");
  pack_str(p, record_kind_name(h.kind));
  if (!h.run.empty()) pack_str(p, "run"), pack_str(p, h.run);
  if (h.rank != -1) pack_str(p, "rank"), p.pack(h.rank);
  if (h.step != 0) pack_str(p, "step"), p.pack(h.step);
  if (h.seq != 0) pack_str(p, "seq"), p.pack(h.seq);
  if (!h.entry.empty()) pack_str(p, "entry"), pack_str(p, h.entry);
  if (!h.slot.empty()) pack_str(p, "slot"), pack_str(p, h.slot);
  if (h.path) {
    pack_str(p, "path");
    p.pack_array(static_cast<uint32_t>(h.path->size()));
    for (const auto &e : *h.path) {
      if (const auto *i = std::get_if<int64_t>(&e)) p.pack(*i);
      else pack_str(p, std::get<std::string>(e));
    }
  }
  if (is_tensor) {
    if (h.foreign_dtype.empty()) pack_str(p, "dtype"), pack_str(p, dtype_name(h.type));
    else pack_str(p, "foreign_dtype"), pack_str(p, h.foreign_dtype);
    pack_str(p, "shape");
    p.pack_array(static_cast<uint32_t>(h.shape.size()));
    for (int64_t d : h.shape) p.pack(d);
    pack_str(p, "device");
    pack_str(p, h.device);
    pack_str(p, "requires_grad");
    p.pack(h.requires_grad);
  }
  if (!h.tensor_type.empty()) pack_str(p, "type"), pack_str(p, h.tensor_type);
  if (h.flags != 0) pack_str(p, "flags"), p.pack(h.flags);
  if (h.codec != record_codec::raw) pack_str(p, "codec"), pack_str(p, "lz4");
  if (h.stored) {
    pack_str(p, "length");
    p.pack(h.length);
    pack_str(p, "stored");
    p.pack(*h.stored);
  }
  if (h.shm) {
    if (h.stored) throw std::logic_error("record header has both a payload frame and a shm reference");
    pack_str(p, "length");
    p.pack(h.length);
    pack_str(p, "shm");
    p.pack_map(3);
    pack_str(p, "path"), pack_str(p, h.shm->path);
    pack_str(p, "id"), p.pack(h.shm->id);
    pack_str(p, "offset"), p.pack(h.shm->offset);
  }
  if (h.stats) {
    const tensor_stats &s = *h.stats;
    pack_str(p, "stats");
    p.pack_map(6 + (s.crc32 ? 1 : 0));
    pack_str(p, "max"), pack_stat(p, s.max);
    pack_str(p, "min"), pack_stat(p, s.min);
    pack_str(p, "mean"), pack_stat(p, s.mean);
    pack_str(p, "norm"), pack_stat(p, s.norm);
    pack_str(p, "nan"), p.pack(s.nan_count);
    pack_str(p, "inf"), p.pack(s.inf_count);
    if (s.crc32) pack_str(p, "crc32"), p.pack(*s.crc32);
  }
  if (!h.meta_msgpack.empty()) {
    pack_str(p, "meta");
    buf.write(h.meta_msgpack.data(), h.meta_msgpack.size());  // checked when it was decoded
  } else if (!h.meta.is_null()) {
    pack_str(p, "meta");
    if (is_meta_text(h.meta)) {
      const auto &text = h.meta.get_binary();
      const std::string_view packed =
          meta_text_packed({reinterpret_cast<const char *>(text.data()), text.size()}, false);
      buf.write(packed.data(), packed.size());
    } else {
      pack_json(p, h.meta);
    }
  }
}

}  // namespace

namespace record_detail {

encoded_header::encoded_header(const record_header &h) {
  auto &buf = header_buffer();
  try {
    header_encode_into(buf, h);
  } catch (...) {
    const header_buffer_reset reset_now;  // as the guard of record_header_encode
    throw;
  }
  bytes_ = {reinterpret_cast<const std::byte *>(buf.data()), buf.size()};
}

encoded_header::~encoded_header() { const header_buffer_reset reset_now; }

}  // namespace record_detail

zmq::message_t record_header_encode(const record_header &h) {
  const header_buffer_reset reset_at_return;
  auto &buf = header_buffer();
  header_encode_into(buf, h);
  return zmq::message_t(buf.data(), buf.size());
}

namespace {

// The header map read straight into a record_header by a cursor over its bytes. msgpack-c's
// unpack (an object tree, then read) and its visitor parse both cost 5,000-7,000 instructions a
// 225-byte header, a third of what a stage spent a record; msgpuck's per-format decoders, with
// the bytes each needs checked first, do it in a fraction of that. The rules are section 2's:
// bad msgpack (anywhere, and nesting past RECORD_HEADER_MAX_DEPTH) is named first, then trailing
// bytes, then the first mistyped key, met in order; a key given twice counts by its last value;
// an unknown key is passed over whatever it holds.
class header_reader : msgpack_cursor {
 public:
  header_reader(std::string_view body, record_header &h, const record_decode_options &options = {})
      : msgpack_cursor(body), h_(h), value_meta_as_msgpack_(options.value_meta_as_msgpack) {}

  // The bytes are one meta value (meta_msgpack's), read into h.meta as a tree.
  void read_meta_tree() { meta_value(h_.meta, 2); }

  // Reads the whole map. Then, in this order: msgpack_problem(), trailing(), problem().
  void read() {
    const auto type = peek();
    if (!type) return;
    if (*type != MP_MAP) {
      fail("header is not a msgpack map");
      skip(1);
      return;
    }
    uint64_t elements = 0;
    if (!open(MP_MAP, 1, elements)) return;
    for (uint64_t i = 0; i < elements / 2 && msgpack_problem_.empty(); ++i) {
      const auto key_type = peek();
      if (!key_type) return;
      top_key key = top_key::other;
      if (*key_type == MP_STR) {
        std::string_view name;
        if (!read_str(name)) return;
        key = top_key_of(name);
      } else {
        fail("header map has a key that is not a string");
        if (!skip(2)) return;
      }
      top_value(key);
    }
  }

  using msgpack_cursor::msgpack_problem;
  using msgpack_cursor::trailing;
  const std::string &problem() const { return problem_; }
  bool have_kind = false, have_dtype = false, have_shape = false, have_length = false;

 private:
  enum class top_key {
    other, kind, run, rank, step, seq, entry, slot, path, dtype, foreign_dtype, shape, device,
    requires_grad, type, flags, codec, length, stored, shm, stats, meta
  };
  static top_key top_key_of(std::string_view k) {
    switch (k.size()) {
      case 3: return key_is(k, "run") ? top_key::run : key_is(k, "seq") ? top_key::seq : key_is(k, "shm") ? top_key::shm : top_key::other;
      case 4:
        return key_is(k, "kind") ? top_key::kind : key_is(k, "rank") ? top_key::rank : key_is(k, "step") ? top_key::step
             : key_is(k, "slot") ? top_key::slot : key_is(k, "path") ? top_key::path : key_is(k, "type") ? top_key::type
             : key_is(k, "meta") ? top_key::meta : top_key::other;
      case 5:
        return key_is(k, "entry") ? top_key::entry : key_is(k, "dtype") ? top_key::dtype : key_is(k, "shape") ? top_key::shape
             : key_is(k, "flags") ? top_key::flags : key_is(k, "codec") ? top_key::codec : key_is(k, "stats") ? top_key::stats
             : top_key::other;
      case 6: return key_is(k, "device") ? top_key::device : key_is(k, "length") ? top_key::length : key_is(k, "stored") ? top_key::stored : top_key::other;
      case 13: return key_is(k, "foreign_dtype") ? top_key::foreign_dtype : key_is(k, "requires_grad") ? top_key::requires_grad : top_key::other;
      default: return top_key::other;
    }
  }
  static const char *top_name(top_key k) {
    constexpr const char *names[] = {"?", "kind", "run", "rank", "step", "seq", "entry", "slot", "path", "dtype",
                                     "foreign_dtype", "shape", "device", "requires_grad", "type", "flags", "codec",
                                     "length", "stored", "shm", "stats", "meta"};
    return names[static_cast<size_t>(k)];
  }
  // What a value of `key` must be, for a message about one that is not.
  static const char *expected_of(top_key k) {
    switch (k) {
      case top_key::kind: case top_key::run: case top_key::entry: case top_key::slot: case top_key::dtype:
      case top_key::foreign_dtype: case top_key::device: case top_key::type: case top_key::codec: return "a string";
      case top_key::rank: case top_key::step: return "an integer";
      case top_key::seq: case top_key::flags: case top_key::length: case top_key::stored: return "an unsigned integer";
      case top_key::requires_grad: return "a bool";
      case top_key::path: case top_key::shape: return "an array";
      default: return "a map";  // shm, stats
    }
  }

  // ---- what the values mean ----

  // The first problem is kept; reading goes on so that bad msgpack further on is named first.
  void fail(std::string problem) {
    if (problem_.empty()) problem_ = std::move(problem);
  }
  void fail_key(std::string_view key, std::string_view expected) {
    if (problem_.empty()) fail(fmt::format("header key \"{}\" is not {}", key, expected));
  }

  std::optional<int64_t> as_int(const value &v, std::string_view key) {
    if (v.type == kind::positive_integer) {
      if (v.u64 > static_cast<uint64_t>(INT64_MAX)) return fail_key(key, "an int64"), std::nullopt;
      return static_cast<int64_t>(v.u64);
    }
    if (v.type == kind::negative_integer) return v.i64;
    return fail_key(key, "an integer"), std::nullopt;
  }

  static nlohmann::ordered_json json_of(const value &v) {
    switch (v.type) {
      case kind::nil: return nullptr;
      case kind::boolean: return v.boolean;
      case kind::positive_integer: return v.u64;
      case kind::negative_integer: return v.i64;
      case kind::float32:
      case kind::float64: return v.f64;
      case kind::str: return std::string(v.text);
      default: {  // BIN
        const auto *p = reinterpret_cast<const uint8_t *>(v.text.data());
        return nlohmann::ordered_json::binary(std::vector<uint8_t>(p, p + v.text.size()));
      }
    }
  }

  // A value of the header's map, of key `key`.
  bool top_value(top_key key) {
    const auto type = peek();
    if (!type) return false;
    const bool container = *type == MP_ARRAY || *type == MP_MAP;
    switch (key) {
      case top_key::other: return skip(2);
      case top_key::path: case top_key::shape:
        if (*type != MP_ARRAY) return fail_key(top_name(key), "an array"), skip(2);
        return array_value(key);
      case top_key::shm: case top_key::stats:
        if (*type != MP_MAP) return fail_key(top_name(key), "a map"), skip(2);
        return key == top_key::shm ? shm_value() : stats_value();
      case top_key::meta:
        // A key given twice counts by its last value, in whichever form that one is kept.
        if (value_meta_as_msgpack_ && have_kind && h_.kind == record_kind::value) return meta_bytes();
        h_.meta_msgpack.clear();
        return meta_value(h_.meta, 2);
      default: break;
    }
    if (container) return fail_key(top_name(key), expected_of(key)), skip(2);
    value v;
    if (!read_scalar(*type, v)) return false;
    scalar_value(key, v);
    return true;
  }

  // kind and dtype: a name from a fixed set, looked up as `found`.
  template <typename T>
  void named(std::optional<T> found, const char *what, std::string_view name, T &out, bool &have) {
    if (!found) return fail(fmt::format("unknown {} \"{}\"", what, name));
    out = *found;
    have = true;
  }

  void scalar_value(top_key k, const value &v) {
    const bool text = v.type == kind::str;
    const auto need = [&]() { fail_key(top_name(k), expected_of(k)); };
    switch (k) {
      case top_key::kind: return text ? named(record_kind_from_name(v.text), "record kind", v.text, h_.kind, have_kind) : need();
      case top_key::run: return text ? void(h_.run.assign(v.text)) : need();
      case top_key::entry: return text ? void(h_.entry.assign(v.text)) : need();
      case top_key::slot: return text ? void(h_.slot.assign(v.text)) : need();
      case top_key::device: return text ? void(h_.device.assign(v.text)) : need();
      case top_key::type: return text ? void(h_.tensor_type.assign(v.text)) : need();
      case top_key::rank: {
        const auto r = as_int(v, "rank");
        if (!r) return;
        if (*r < -1 || *r > INT32_MAX) return fail_key("rank", "a rank (-1 or a non-negative int32)");
        h_.rank = static_cast<int32_t>(*r);
        return;
      }
      case top_key::step:
        if (const auto s = as_int(v, "step")) h_.step = *s;
        return;
      case top_key::seq: case top_key::flags: case top_key::length: case top_key::stored:
        if (v.type != kind::positive_integer) return need();
        if (k == top_key::seq) h_.seq = v.u64;
        else if (k == top_key::length) h_.length = v.u64, have_length = true;
        else if (k == top_key::stored) h_.stored = v.u64;
        else if (v.u64 > UINT32_MAX) fail_key("flags", "a 32-bit set");
        else h_.flags = static_cast<uint32_t>(v.u64);
        return;
      case top_key::dtype: return text ? named(dtype_from_name(v.text), "dtype", v.text, h_.type, have_dtype) : need();
      case top_key::foreign_dtype:
        if (!text) return need();
        if (v.text.empty()) return fail_key("foreign_dtype", "a non-empty string");
        h_.foreign_dtype.assign(v.text);
        have_dtype = true;
        return;
      case top_key::requires_grad:
        if (v.type != kind::boolean) return need();
        h_.requires_grad = v.boolean;
        return;
      case top_key::codec:
        if (!text) return need();
        if (v.text == "raw") h_.codec = record_codec::raw;
        else if (v.text == "lz4") h_.codec = record_codec::lz4;
        else fail(fmt::format("unknown payload codec \"{}\"", v.text));
        return;
      default: return;
    }
  }

  // path (ints and strings) or shape (non-negative ints).
  bool array_value(top_key key) {
    uint64_t elements = 0;
    if (!open(MP_ARRAY, 2, elements)) return false;
    const bool path = key == top_key::path;
    if (path) h_.path.emplace();
    else h_.shape.clear(), h_.shape.reserve(std::min<uint64_t>(elements, 16)), have_shape = true;
    for (uint64_t i = 0; i < elements; ++i) {
      const auto type = peek();
      if (!type) return false;
      if (*type == MP_ARRAY || *type == MP_MAP) {
        fail_key(top_name(key), "an integer");
        if (!skip(3)) return false;
        continue;
      }
      value v;
      if (!read_scalar(*type, v)) return false;
      if (path && v.type == kind::str) h_.path->emplace_back(std::string(v.text));
      else if (const auto d = as_int(v, top_name(key))) {
        if (path) h_.path->emplace_back(*d);
        else if (*d < 0) fail_key("shape", "an array of non-negative ints");
        else h_.shape.push_back(*d);
      }
    }
    return true;
  }

  // A key of shm's or stats' map: false on bad msgpack; `name` empty when not a string.
  bool sub_key(std::string_view &name, std::string_view map, const char *expected) {
    const auto type = peek();
    if (!type) return false;
    name = {};
    if (*type == MP_STR) return read_str(name);
    fail_key(map, expected);
    return skip(3);
  }

  bool shm_value() {
    uint64_t elements = 0;
    if (!open(MP_MAP, 2, elements)) return false;
    record_shm_ref ref;
    bool have_path = false, have_id = false, have_offset = false;
    for (uint64_t i = 0; i < elements / 2; ++i) {
      std::string_view sub;
      if (!sub_key(sub, "shm", "a string")) return false;
      const bool path = key_is(sub, "path"), id = key_is(sub, "id"), offset = key_is(sub, "offset");
      value v;
      if (!read_any(3, v)) return false;
      if (path) {
        if (v.type != kind::str) fail_key("shm.path", "a string");
        else ref.path.assign(v.text), have_path = true;
      } else if (id || offset) {
        if (v.type != kind::positive_integer) fail_key(id ? "shm.id" : "shm.offset", "an unsigned integer");
        else if (id) ref.id = v.u64, have_id = true;
        else ref.offset = v.u64, have_offset = true;
      }
    }
    if (!have_path || !have_id || !have_offset || ref.path.empty()) fail_key("shm", "a map of path, id and offset");
    else h_.shm = std::move(ref);
    return true;
  }

  bool stats_value() {
    uint64_t elements = 0;
    if (!open(MP_MAP, 2, elements)) return false;
    tensor_stats &s = h_.stats.emplace();
    for (uint64_t i = 0; i < elements / 2; ++i) {
      std::string_view sub;
      if (!sub_key(sub, "stats", "a map with string keys")) return false;
      value v;
      if (!read_any(3, v)) return false;
      stat_value *real = key_is(sub, "max") ? &s.max : key_is(sub, "min") ? &s.min
                       : key_is(sub, "mean") ? &s.mean : key_is(sub, "norm") ? &s.norm : nullptr;
      if (real) {
        switch (v.type) {
          case kind::nil: *real = stat_value::none(); break;
          case kind::boolean: *real = stat_value::of_bool(v.boolean); break;
          case kind::positive_integer:
          case kind::negative_integer:
            if (const auto x = as_int(v, fmt::format("stats.{}", sub))) *real = stat_value::of_int(*x);
            break;
          case kind::float32:
          case kind::float64: *real = stat_value::of_real(v.f64); break;
          default: fail_key(fmt::format("stats.{}", sub), "nil, a bool or a number");
        }
        continue;
      }
      const bool nan = key_is(sub, "nan"), inf = key_is(sub, "inf"), crc = key_is(sub, "crc32");
      if (!nan && !inf && !crc) continue;  // a newer minor version's statistic
      if (v.type != kind::positive_integer) fail_key(fmt::format("stats.{}", sub), "an unsigned integer");
      else if (nan) s.nan_count = v.u64;
      else if (inf) s.inf_count = v.u64;
      else if (v.u64 > UINT32_MAX) fail_key("stats.crc32", "a 32-bit value");
      else s.crc32 = static_cast<uint32_t>(v.u64);
    }
    return true;
  }

  // meta's value (or one inside it) at nesting `level`, into `out`.
  bool meta_value(nlohmann::ordered_json &out, size_t level) {
    const auto type = peek();
    if (!type) return false;
    if (*type != MP_ARRAY && *type != MP_MAP) {
      value v;
      if (!read_scalar(*type, v)) return false;
      if (v.type == kind::ext) fail("meta holds a msgpack ext value, which tprobe does not use");
      else out = json_of(v);
      return true;
    }
    uint64_t elements = 0;
    if (!open(*type, level, elements)) return false;
    // Room for the items at once, for at most 64 (more grow as before): an entry's meta of three
    // keys grew its vector three times.
    constexpr uint64_t reserved_at_most = 64;
    if (*type == MP_ARRAY) {
      out = nlohmann::ordered_json::array();
      auto &items = out.get_ref<nlohmann::ordered_json::array_t &>();
      items.reserve(std::min(elements, reserved_at_most));
      for (uint64_t i = 0; i < elements; ++i)
        if (!meta_value(items.emplace_back(nullptr), level + 1)) return false;
      return true;
    }
    out = nlohmann::ordered_json::object();
    auto &members = out.get_ref<nlohmann::ordered_json::object_t &>();
    members.reserve(std::min(elements / 2, reserved_at_most));
    for (uint64_t i = 0; i < elements / 2; ++i) {
      const auto key_type = peek();
      if (!key_type) return false;
      std::string_view key;
      if (*key_type == MP_STR) {
        if (!read_str(key)) return false;
      } else {
        fail("meta map key is not a string");
        if (!skip(level + 1)) return false;
      }
      // A key given twice keeps its first place and takes the last value (as ordered_json's []
      // does). The member stays where it is while its value is read: only deeper maps grow.
      auto it = std::find_if(members.begin(), members.end(), [&](const auto &m) { return m.first == key; });
      auto &member = it != members.end() ? it->second : members.emplace_back(std::string(key), nullptr).second;
      if (!meta_value(member, level + 1)) return false;
    }
    return true;
  }

  // A value record's meta kept as its bytes when it is plain (record_decode_options), else built
  // as a tree from the same bytes, which then names what is wrong with it as meta_value does.
  bool meta_bytes() {
    const char *const start = p_;
    bool plain = true;
    if (!meta_check(2, true, plain)) return false;
    if (plain) {
      h_.meta = nullptr;
      h_.meta_msgpack.assign(start, static_cast<size_t>(p_ - start));
      return true;
    }
    p_ = start;
    h_.meta_msgpack.clear();
    return meta_value(h_.meta, 2);
  }

  // Passes over a meta value at nesting `level` as meta_value reads it, building nothing;
  // `plain` turns false at what the bytes cannot stand for as they are: ext (an error
  // meta_value names), a map key that is not a string or is given twice (the tree keeps one), a
  // map of more keys than are compared, bin (no JSON text), and a top-level "barrier" (stage_io
  // looks for it in the tree). False on bad msgpack.
  bool meta_check(size_t level, bool top, bool &plain) {
    const auto type = peek();
    if (!type) return false;
    if (*type != MP_ARRAY && *type != MP_MAP) {
      value v;
      if (!read_scalar(*type, v)) return false;
      if (v.type == kind::ext || v.type == kind::bin) plain = false;
      return true;
    }
    uint64_t elements = 0;
    if (!open(*type, level, elements)) return false;
    if (*type == MP_ARRAY) {
      for (uint64_t i = 0; i < elements; ++i)
        if (!meta_check(level + 1, false, plain)) return false;
      return true;
    }
    constexpr size_t compared = 16;
    std::string_view keys[compared];
    const uint64_t pairs = elements / 2;
    if (pairs > compared) plain = false;
    for (uint64_t i = 0; i < pairs; ++i) {
      const auto key_type = peek();
      if (!key_type) return false;
      if (*key_type != MP_STR) {
        plain = false;
        if (!skip(level + 1)) return false;
      } else {
        std::string_view key;
        if (!read_str(key)) return false;
        if (top && key_is(key, "barrier")) plain = false;
        if (i < compared) {
          for (size_t j = 0; j < i; ++j) plain &= keys[j] != key;
          keys[i] = key;
        }
      }
      if (!meta_check(level + 1, false, plain)) return false;
    }
    return true;
  }

  record_header &h_;
  const bool value_meta_as_msgpack_;
  std::string problem_;
};

}  // namespace

record_header record_header_decode(std::span<const std::byte> frame) {
  record_header h;
  record_header_decode(frame, h);
  return h;
}

namespace record_detail {

// record_header_decode's work on a header record_header_reset has just reset: record_decode's
// and record_batch_decode's records were, by reuse_as, and a second reset cost 4% of the decode.
void header_decode_into_reset(std::span<const std::byte> frame, record_header &h,
                              const record_decode_options &options) {
  const std::string_view body = header_body(frame);
  header_reader reader(body, h, options);
  reader.read();
  if (!reader.msgpack_problem().empty())
    throw framing_error(fmt::format("header is not valid msgpack ({})", reader.msgpack_problem()));
  if (reader.trailing())
    throw framing_error(fmt::format("header has {} trailing bytes after its msgpack map", reader.trailing()));
  if (!reader.problem().empty()) throw framing_error(reader.problem());
  const bool have_kind = reader.have_kind, have_dtype = reader.have_dtype, have_shape = reader.have_shape,
             have_length = reader.have_length;

  if (!have_kind) throw framing_error("header has no \"kind\"");
  if (!h.meta_msgpack.empty() && h.kind != record_kind::value) {  // "kind" given again after meta
    const std::string bytes = std::move(h.meta_msgpack);
    h.meta_msgpack.clear();
    header_reader(bytes, h).read_meta_tree();
  }
  if (h.kind == record_kind::tensor && (!have_dtype || !have_shape))
    throw framing_error(fmt::format("tensor record {} {} lacks \"dtype\" or \"shape\"", h.entry, h.slot));
  if (!h.foreign_dtype.empty() && (h.stored || h.stats))
    throw framing_error(fmt::format("tensor record {} {} of foreign dtype \"{}\" carries data or statistics",
                                    h.entry, h.slot, h.foreign_dtype));
  if (h.stored && !have_length) throw framing_error("header has \"stored\" without \"length\"");
  if (h.shm && (h.stored || !have_length || h.codec != record_codec::raw))
    throw framing_error("header has \"shm\" with \"stored\", without \"length\", or with a codec");
  if (h.stored && h.codec == record_codec::raw && *h.stored != h.length)
    throw framing_error(fmt::format("raw payload: stored {} != length {}", *h.stored, h.length));
  if (h.kind == record_kind::tensor && (h.stored || h.shm)) {
    const uint64_t expected = h.element_count() * dtype_size(h.type);
    if (h.length != expected)
      throw framing_error(fmt::format("tensor {} {}: payload length {} does not match {} {} (expected {} bytes)",
                                      h.entry, h.slot, h.length, dtype_name(h.type),
                                      fmt::join(h.shape, "x"), expected));
  }
}

}  // namespace record_detail

void record_header_decode(std::span<const std::byte> frame, record_header &h) {
  record_header_reset(h, record_kind::tensor);
  header_decode_into_reset(frame, h);
}

void record_header_reset(record_header &h, record_kind kind) {
  // Field by field, in record_header's order (test_record checks every one against a new header).
  h.kind = kind;
  h.run.clear();
  h.rank = -1;
  h.step = 0;
  h.seq = 0;
  h.entry.clear();
  h.slot.clear();
  h.path.reset();
  h.type = dtype::float32;
  h.shape.clear();
  h.foreign_dtype.clear();
  if (h.device != "cpu") h.device.assign("cpu");  // a compare: assign() cost 150 instructions
  h.requires_grad = false;
  h.tensor_type.clear();
  h.flags = 0;
  h.codec = record_codec::raw;
  h.length = 0;
  h.stored.reset();
  h.shm.reset();
  h.stats.reset();
  h.meta = nullptr;
  h.meta_msgpack.clear();
}

}  // namespace tprobe
