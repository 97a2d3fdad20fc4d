#include "record.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <mutex>

#include <sys/stat.h>

#include <fmt/format.h>
#include <lz4.h>
#include <msgpack.hpp>
// msgpuck is a header library: this file, its one user, holds its tables (MP_SOURCE), hidden so
// that the capture's shared library exports none of its names.
#pragma GCC visibility push(hidden)
#define MP_SOURCE 1
#include <msgpuck.h>
#pragma GCC visibility pop

#include "dump_semantics.h"
#include "errors.h"
#include "pyjson.h"

namespace tprobe {

namespace {

constexpr std::array<std::string_view, 12> kind_names{
    "hello", "ack",      "session", "tensor", "value", "entry", "flush",
    "step_end", "eos", "final", "synced", "control"};

// The stream headers are packed into. msgpack::packer writes every token through its stream's
// write(): msgpack::sbuffer's was compiled out of line, a call and a memcpy call for each of a
// header's forty-odd tokens, a third of the capture's sender thread. This one's fast path is
// inlined, and a token's write of a constant size becomes a few moves.
class header_stream {
 public:
  explicit header_stream(size_t capacity = 1024) : bytes_(capacity) {}
  [[gnu::always_inline]] void write(const char *data, size_t n) {
    if (n == 0) return;  // msgpack writes empty bodies with a null pointer
    if (n > bytes_.size() - size_) [[unlikely]] grow(n);
    std::memcpy(bytes_.data() + size_, data, n);
    size_ += n;
  }
  char *data() { return bytes_.data(); }
  const char *data() const { return bytes_.data(); }
  [[nodiscard]] size_t size() const { return size_; }
  [[nodiscard]] size_t capacity() const { return bytes_.size(); }
  void clear() { size_ = 0; }
  void truncate(size_t size) { size_ = std::min(size_, size); }
  // A fixstr (a string under 32 bytes: most of a header's keys and names), marker and body.
  [[gnu::always_inline]] void write_fixstr(std::string_view s) {
    if (s.size() + 1 > bytes_.size() - size_) [[unlikely]] grow(s.size() + 1);
    bytes_[size_] = static_cast<char>(0xa0 | s.size());
    std::memcpy(bytes_.data() + size_ + 1, s.data(), s.size());
    size_ += s.size() + 1;
  }

 private:
  [[gnu::noinline]] void grow(size_t n) { bytes_.resize(std::max(bytes_.size() * 2, size_ + n)); }
  std::vector<char> bytes_;
  size_t size_ = 0;
};

// msgpack's packer, which also gives its stream back: tokens it has no fast way to write go
// to the stream directly.
class packer_t : public msgpack::packer<header_stream> {
 public:
  explicit packer_t(header_stream &stream) : msgpack::packer<header_stream>(stream), stream_(stream) {}
  [[nodiscard]] header_stream &stream() const { return stream_; }

 private:
  header_stream &stream_;
};

// msgpack-c 4's pack_double() writes integral doubles as integers, which would turn a statistic
// of 2.0 into 2 and -0.0 into 0. A float64 is always written as one (marker 0xcb, big-endian).
void pack_float64(packer_t &p, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  char buf[9];
  buf[0] = static_cast<char>(0xcb);
  for (int i = 0; i < 8; ++i) buf[1 + i] = static_cast<char>(bits >> (56 - 8 * i));
  p.stream().write(buf, sizeof buf);
}

void pack_str(packer_t &p, std::string_view s) {
  // Most strings of a header (its keys, names, the run's id) fit a fixstr: marker and body go
  // straight into the stream (a header has some thirty strings).
  if (s.size() < 32) {
    p.stream().write_fixstr(s);
    return;
  }
  p.pack_str(static_cast<uint32_t>(s.size()));
  p.pack_str_body(s.data(), static_cast<uint32_t>(s.size()));
}

// "tmtx": marks a meta held as JSON text (record_meta_text); apart from pyjson's fragments'
// subtypes ("tpjs" and the levels above it), so neither is ever taken for the other.
constexpr std::uint64_t meta_text_subtype = 0x746d7478;

bool is_meta_text(const nlohmann::ordered_json &j) {
  return j.is_binary() && j.get_binary().has_subtype() && j.get_binary().subtype() == meta_text_subtype;
}

// A map32 (0xdf) or array32 (0xdd) whose count is not known yet: its marker and four zero bytes
// go out now (open_container32 returns where), the count once the container closes.
size_t open_container32(header_stream &buf, uint8_t marker) {
  const size_t at = buf.size();
  const char header[5] = {static_cast<char>(marker), 0, 0, 0, 0};
  buf.write(header, sizeof header);
  return at;
}
void close_container32(header_stream &buf, size_t at, uint32_t count) {
  char *bytes = buf.data() + at + 1;
  for (int i = 0; i < 4; ++i) bytes[i] = static_cast<char>(count >> (24 - 8 * i));
}

// nlohmann's SAX events of a JSON text, packed as msgpack as they come. msgpack puts a container's
// count before its elements and SAX tells it only at the end, so containers are written as map32
// and array32 and their counts filled in when they close (valid msgpack; every reader takes them).
class json_text_packer {
 public:
  using json = nlohmann::ordered_json;
  explicit json_text_packer(packer_t &p) : p_(p) {}

  bool null() { return element(), p_.pack_nil(), true; }
  bool boolean(bool v) { return element(), p_.pack(v), true; }
  bool number_integer(json::number_integer_t v) { return element(), p_.pack(v), true; }
  bool number_unsigned(json::number_unsigned_t v) { return element(), p_.pack(v), true; }
  bool number_float(json::number_float_t v, const json::string_t &) { return element(), pack_float64(p_, v), true; }
  bool string(json::string_t &v) { return element(), pack_str(p_, v), true; }
  bool binary(json::binary_t &) { throw std::logic_error("JSON text holds no binary value"); }
  bool start_object(std::size_t) { return open(0xdf), true; }
  bool key(json::string_t &k) {
    ++open_.back().count;
    pack_str(p_, k);
    return true;
  }
  bool end_object() { return close(), true; }
  bool start_array(std::size_t) { return open(0xdd), true; }
  bool end_array() { return close(), true; }
  bool parse_error(std::size_t, const std::string &, const nlohmann::detail::exception &e) {
    throw std::invalid_argument(fmt::format("meta text is not JSON: {}", e.what()));
  }
  // The events of a parsed tree, in document order: the same bytes as its text's parse.
  void feed(const json &v) {
    switch (v.type()) {
      case json::value_t::object:
        start_object(v.size());
        for (const auto &[k, e] : v.items()) {
          json::string_t key = k;
          this->key(key);
          feed(e);
        }
        end_object();
        break;
      case json::value_t::array:
        start_array(v.size());
        for (const auto &e : v) feed(e);
        end_array();
        break;
      case json::value_t::string: {
        json::string_t text = v.get<std::string>();
        string(text);
        break;
      }
      case json::value_t::boolean: boolean(v.get<bool>()); break;
      case json::value_t::number_integer: number_integer(v.get<json::number_integer_t>()); break;
      case json::value_t::number_unsigned: number_unsigned(v.get<json::number_unsigned_t>()); break;
      case json::value_t::number_float: number_float(v.get<double>(), {}); break;
      default: null(); break;
    }
  }

 private:
  struct container {
    size_t at;  // of its marker in the buffer
    bool is_array;
    uint32_t count = 0;
  };
  // A value begins: one more element of the array it is in (a map counts its keys).
  void element() {
    if (!open_.empty() && open_.back().is_array) ++open_.back().count;
  }
  void open(uint8_t marker) {
    element();
    open_.push_back({open_container32(p_.stream(), marker), marker == 0xdd});
  }
  void close() {
    close_container32(p_.stream(), open_.back().at, open_.back().count);
    open_.pop_back();
  }

  packer_t &p_;
  std::vector<container> open_;
};

// The same bytes as json_text_packer makes from nlohmann's parse, for the texts the captures make
// (objects, arrays, ASCII strings without escapes, numbers, literals): the optimizer's scalar
// values are a third of a step's records, and nlohmann's lexer was a fifth of the sender
// thread's time. run() is false, with `out` holding anything, for a text outside that subset (an
// escape, a byte past ASCII, an integer of 19 digits or more, a float out of double's range) or
// not JSON at all: the caller then packs it by nlohmann's parse, which also names what is wrong.
class plain_json_packer {
 public:
  explicit plain_json_packer(std::string_view text) : s_(text) {}

  bool run(header_stream &out) {
    packer_t p(out);
    p_ = &p;
    skip_space();
    if (!value(0)) return false;
    skip_space();
    return at_ == s_.size();
  }

 private:
  static constexpr int max_depth = 64;

  bool value(int depth) {
    if (at_ >= s_.size() || depth > max_depth) return false;
    switch (s_[at_]) {
      case '{': return container(depth, '}');
      case '[': return container(depth, ']');
      case '"': {
        std::string_view text;
        if (!string(text)) return false;
        pack_str(*p_, text);
        return true;
      }
      case 't': return literal("true") && (p_->pack(true), true);
      case 'f': return literal("false") && (p_->pack(false), true);
      case 'n': return literal("null") && (p_->pack_nil(), true);
      // Python's tokens for non-finite reals (core/pyjson.h), as the value leaves write them.
      case 'N': return literal("NaN") && (pack_float64(*p_, std::numeric_limits<double>::quiet_NaN()), true);
      case 'I': return literal("Infinity") && (pack_float64(*p_, std::numeric_limits<double>::infinity()), true);
      case '-':
        if (literal("-Infinity")) return pack_float64(*p_, -std::numeric_limits<double>::infinity()), true;
        return number();
      default: return number();
    }
  }

  // An object (map32: json_text_packer's marker, its count written at the end) or an array.
  bool container(int depth, char close) {
    ++at_;
    const size_t header_at = open_container32(p_->stream(), close == '}' ? 0xdf : 0xdd);
    uint32_t count = 0;
    skip_space();
    if (eat(close)) return true;
    for (;;) {
      skip_space();
      if (close == '}') {
        std::string_view key;
        if (!string(key)) return false;
        pack_str(*p_, key);
        skip_space();
        if (!eat(':')) return false;
        skip_space();
      }
      if (!value(depth + 1)) return false;
      ++count;
      skip_space();
      if (eat(',')) continue;
      if (!eat(close)) return false;
      close_container32(p_->stream(), header_at, count);
      return true;
    }
  }

  bool string(std::string_view &text) {
    if (!eat('"')) return false;
    const size_t start = at_;
    for (; at_ < s_.size(); ++at_) {
      const auto c = static_cast<unsigned char>(s_[at_]);
      if (c == '"') {
        text = s_.substr(start, at_ - start);
        ++at_;
        return true;
      }
      if (c == '\\' || c < 0x20 || c >= 0x80) return false;
    }
    return false;
  }

  // JSON's grammar, classified as nlohmann does: no fraction and no exponent is an integer
  // (signed with a minus, else unsigned), anything else a double.
  bool number() {
    const size_t start = at_;
    const bool negative = eat('-');
    if (eat('0')) {
    } else if (digit()) {
      while (digit()) {}
    } else {
      return false;
    }
    bool real = false;
    if (eat('.')) {
      if (!digit()) return false;
      while (digit()) {}
      real = true;
    }
    if (eat('e') || eat('E')) {
      if (!eat('+')) (void)eat('-');
      if (!digit()) return false;
      while (digit()) {}
      real = true;
    }
    const char *first = s_.data() + start, *last = s_.data() + at_;
    if (real) {
      double d = 0;
      const auto [end, ec] = std::from_chars(first, last, d);
      if (ec != std::errc() || end != last) return false;
      pack_float64(*p_, d);
      return true;
    }
    if (last - first - (negative ? 1 : 0) > 18) return false;  // nlohmann may read it as a double
    if (negative) {
      int64_t v = 0;
      if (std::from_chars(first, last, v).ec != std::errc()) return false;
      p_->pack(v);
    } else {
      uint64_t v = 0;
      if (std::from_chars(first, last, v).ec != std::errc()) return false;
      p_->pack(v);
    }
    return true;
  }

  bool literal(std::string_view word) {
    if (s_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }
  bool digit() {
    if (at_ < s_.size() && s_[at_] >= '0' && s_[at_] <= '9') return ++at_, true;
    return false;
  }
  bool eat(char c) {
    if (at_ < s_.size() && s_[at_] == c) return ++at_, true;
    return false;
  }
  void skip_space() {
    while (at_ < s_.size() && (s_[at_] == ' ' || s_[at_] == '\t' || s_[at_] == '\n' || s_[at_] == '\r')) ++at_;
  }

  std::string_view s_;
  size_t at_ = 0;
  packer_t *p_ = nullptr;
};

// A meta text packed into `p`'s stream: by plain_json_packer where it can, else by nlohmann's parse.
void pack_meta_text(packer_t &p, std::string_view text, bool general_only) {
  if (!general_only) {
    thread_local header_stream scratch;
    scratch.clear();
    if (plain_json_packer(text).run(scratch)) {
      p.stream().write(scratch.data(), scratch.size());
      return;
    }
  }
  const size_t start = p.stream().size();
  json_text_packer packer(p);
  try {
    nlohmann::ordered_json::sax_parse(text.begin(), text.end(), &packer);
  } catch (const std::invalid_argument &not_json) {
    // nlohmann's grammar has no NaN / Infinity tokens, Python's (and so the value leaves') has:
    // such a text is read by pyjson and its tree replayed as the same SAX events.
    nlohmann::ordered_json tree;
    try {
      tree = pyjson_parse(text, "meta text");
    } catch (const std::exception &) {
      throw not_json;  // nlohmann's message: the text is JSON in neither grammar
    }
    p.stream().truncate(start);
    json_text_packer replay(p);
    replay.feed(tree);
  }
}

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

// key == literal with the literal's length known here, so that the comparison is a load or two,
// not a call to memcmp: a header's dozen keys are each compared with several names.
template <size_t N>
inline bool key_is(std::string_view key, const char (&literal)[N]) {
  return key.size() == N - 1 && std::memcmp(key.data(), literal, N - 1) == 0;
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

nlohmann::ordered_json record_meta_text(std::string_view json_text) {
  const auto *p = reinterpret_cast<const std::uint8_t *>(json_text.data());
  return nlohmann::ordered_json::binary(std::vector<std::uint8_t>(p, p + json_text.size()), meta_text_subtype);
}

nlohmann::ordered_json tensor_stats_to_json(const tensor_stats &s) {
  nlohmann::ordered_json j{{"max", stat_json(s.max)},   {"min", stat_json(s.min)}, {"mean", stat_json(s.mean)},
                           {"norm", stat_json(s.norm)}, {"nan", s.nan_count},      {"inf", s.inf_count}};
  if (s.crc32) j["crc32"] = fmt::format("{:08x}", *s.crc32);
  return j;
}

namespace {

// The buffer headers are encoded in, kept per thread: a buffer of its own per header was a
// malloc, and a realloc or two for the larger ones, per record at every hop. Emptied when the
// guard goes; one that grew for a huge header is not kept.
header_stream &header_buffer() {
  thread_local header_stream buf(1024);
  return buf;
}
struct header_buffer_reset {
  ~header_buffer_reset() {
    auto &buf = header_buffer();
    if (buf.capacity() > 64 * 1024) buf = header_stream(1024);
    else buf.clear();
  }
};

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
      pack_meta_text(p, {reinterpret_cast<const char *>(text.data()), text.size()}, false);
    } else {
      pack_json(p, h.meta);
    }
  }
}

}  // namespace

std::string record_meta_text_msgpack(std::string_view json_text, bool general_only) {
  header_stream buf;
  packer_t p(buf);
  pack_meta_text(p, json_text, general_only);
  return {buf.data(), buf.size()};
}

zmq::message_t record_header_encode(const record_header &h) {
  const header_buffer_reset reset_at_return;
  auto &buf = header_buffer();
  header_encode_into(buf, h);
  return zmq::message_t(buf.data(), buf.size());
}

namespace {

// A header frame's msgpack body, after its prefix is checked (section 1). Throws framing_error.
std::string_view header_body(std::span<const std::byte> frame) {
  if (frame.size() < RECORD_PREFIX_SIZE)
    throw framing_error(fmt::format("header frame of {} bytes is shorter than the 4-byte prefix", frame.size()));
  const auto *bytes = reinterpret_cast<const unsigned char *>(frame.data());
  if (bytes[0] != 'T' || bytes[1] != 'P')
    throw framing_error(fmt::format("header frame starts with 0x{:02x}{:02x}, not the magic \"TP\"", bytes[0], bytes[1]));
  if (bytes[2] != RECORD_VERSION_MAJOR)
    throw framing_error(fmt::format("record format major version {} is not supported (this build reads {})",
                                    bytes[2], RECORD_VERSION_MAJOR));
  return {reinterpret_cast<const char *>(frame.data()) + RECORD_PREFIX_SIZE, frame.size() - RECORD_PREFIX_SIZE};
}

// A cursor over one msgpack value, for readers that walk a header once: msgpuck decodes one format
// at a time, and every read checks first that its bytes are there. Bad msgpack (a count or length
// past the end, 0xc1, nesting past RECORD_HEADER_MAX_DEPTH) stops the reader; msgpack_problem()
// says why.
class msgpack_cursor {
 public:
  explicit msgpack_cursor(std::string_view bytes) : p_(bytes.data()), end_(bytes.data() + bytes.size()) {}
  const std::string &msgpack_problem() const { return msgpack_problem_; }
  size_t trailing() const { return static_cast<size_t>(end_ - p_); }

 protected:
  // A scalar as msgpack-c's object model has it: a signed format holding 0 or more is a
  // POSITIVE_INTEGER, float32 is widened to double.
  struct value {
    msgpack::type::object_type type = msgpack::type::NIL;
    bool boolean = false;
    uint64_t u64 = 0;
    int64_t i64 = 0;
    double f64 = 0;
    std::string_view text = {};
  };

  bool fail_msgpack(const char *why) {
    if (msgpack_problem_.empty()) msgpack_problem_ = why;
    return false;
  }
  // mp_check_*'s answer: 0, or how many bytes are missing.
  bool check(ptrdiff_t missing) { return missing <= 0 || fail_msgpack("insufficient bytes"); }
  bool have(size_t n) { return static_cast<size_t>(end_ - p_) >= n || fail_msgpack("insufficient bytes"); }

  // The next value's type; nullopt (and the reason kept) at the end or on 0xc1, a byte msgpack
  // never uses.
  std::optional<mp_type> peek() {
    if (p_ >= end_) return fail_msgpack("insufficient bytes"), std::nullopt;
    if (static_cast<uint8_t>(*p_) == 0xc1) return fail_msgpack("parse error"), std::nullopt;
    return mp_typeof(*p_);
  }

  // The `n` bytes of a str or bin whose length was just read.
  bool read_bytes(uint32_t n, std::string_view &out) {
    if (!have(n)) return false;
    out = {p_, n};
    p_ += n;
    return true;
  }
  bool read_str(std::string_view &out) {
    return check(mp_check_strl(p_, end_)) && read_bytes(mp_decode_strl(&p_), out);
  }

  // Reads the scalar at the cursor (the caller peeked `type`, not a container).
  bool read_scalar(mp_type type, value &v) {
    switch (type) {
      case MP_NIL: ++p_, v.type = msgpack::type::NIL; return true;
      case MP_BOOL:
        v.type = msgpack::type::BOOLEAN, v.boolean = mp_decode_bool(&p_);
        return true;
      case MP_UINT:
        if (!check(mp_check_uint(p_, end_))) return false;
        v.type = msgpack::type::POSITIVE_INTEGER, v.u64 = mp_decode_uint(&p_);
        return true;
      case MP_INT: {
        if (!check(mp_check_int(p_, end_))) return false;
        const int64_t i = mp_decode_int(&p_);
        if (i >= 0) v.type = msgpack::type::POSITIVE_INTEGER, v.u64 = static_cast<uint64_t>(i);
        else v.type = msgpack::type::NEGATIVE_INTEGER, v.i64 = i;
        return true;
      }
      case MP_FLOAT:
        if (!check(mp_check_float(p_, end_))) return false;
        v.type = msgpack::type::FLOAT32, v.f64 = mp_decode_float(&p_);
        return true;
      case MP_DOUBLE:
        if (!check(mp_check_double(p_, end_))) return false;
        v.type = msgpack::type::FLOAT64, v.f64 = mp_decode_double(&p_);
        return true;
      case MP_STR: v.type = msgpack::type::STR; return read_str(v.text);
      case MP_BIN:
        v.type = msgpack::type::BIN;
        return check(mp_check_binl(p_, end_)) && read_bytes(mp_decode_binl(&p_), v.text);
      case MP_EXT: {  // msgpuck reads no ext: fixext 1-16 (0xd4-0xd8), ext 8/16/32 (0xc7-0xc9)
        const auto c = static_cast<uint8_t>(*p_);
        size_t size_bytes = 0, data = 0;
        if (c >= 0xd4 && c <= 0xd8) data = size_t{1} << (c - 0xd4);
        else size_bytes = c == 0xc7 ? 1 : c == 0xc8 ? 2 : 4;
        if (!have(1 + size_bytes)) return false;
        for (size_t i = 0; i < size_bytes; ++i) data = data << 8 | static_cast<uint8_t>(p_[1 + i]);
        if (!have(1 + size_bytes + 1 + data)) return false;
        v.type = msgpack::type::EXT, v.text = {p_ + 2 + size_bytes, data};
        p_ += 1 + size_bytes + 1 + data;
        return true;
      }
      default: return fail_msgpack("parse error");  // a container: the caller's mistake
    }
  }

  // The header of an array or map opened at nesting `level` (the header's own map is 1): its
  // element count (a map's pairs count twice).
  bool open(mp_type type, size_t level, uint64_t &elements) {
    if (level > RECORD_HEADER_MAX_DEPTH) {
      static const std::string too_deep = fmt::format("nested deeper than {} levels", RECORD_HEADER_MAX_DEPTH);
      return fail_msgpack(too_deep.c_str());
    }
    if (type == MP_ARRAY) {
      if (!check(mp_check_array(p_, end_))) return false;
      elements = mp_decode_array(&p_);
    } else {
      if (!check(mp_check_map(p_, end_))) return false;
      elements = uint64_t{2} * mp_decode_map(&p_);
    }
    return true;
  }

  // The value at the cursor into `v`, or, when it is an array or map (nesting `level`), passed
  // over with v.type ARRAY. False on bad msgpack.
  bool read_any(size_t level, value &v) {
    const auto type = peek();
    if (!type) return false;
    if (*type != MP_ARRAY && *type != MP_MAP) return read_scalar(*type, v);
    v.type = msgpack::type::ARRAY;
    return skip(level);
  }

  // Passes over one value of nesting `level`, checking it. False on bad msgpack.
  bool skip(size_t level) {
    const auto type = peek();
    if (!type) return false;
    if (*type != MP_ARRAY && *type != MP_MAP) {
      value v;
      return read_scalar(*type, v);
    }
    uint64_t elements = 0;
    if (!open(*type, level, elements)) return false;
    for (uint64_t i = 0; i < elements; ++i)
      if (!skip(level + 1)) return false;
    return true;
  }

  const char *p_;
  const char *const end_;
  std::string msgpack_problem_;
};

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
    if (v.type == msgpack::type::POSITIVE_INTEGER) {
      if (v.u64 > static_cast<uint64_t>(INT64_MAX)) return fail_key(key, "an int64"), std::nullopt;
      return static_cast<int64_t>(v.u64);
    }
    if (v.type == msgpack::type::NEGATIVE_INTEGER) return v.i64;
    return fail_key(key, "an integer"), std::nullopt;
  }

  static nlohmann::ordered_json json_of(const value &v) {
    switch (v.type) {
      case msgpack::type::NIL: return nullptr;
      case msgpack::type::BOOLEAN: return v.boolean;
      case msgpack::type::POSITIVE_INTEGER: return v.u64;
      case msgpack::type::NEGATIVE_INTEGER: return v.i64;
      case msgpack::type::FLOAT32:
      case msgpack::type::FLOAT64: return v.f64;
      case msgpack::type::STR: return std::string(v.text);
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
    const bool text = v.type == msgpack::type::STR;
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
        if (v.type != msgpack::type::POSITIVE_INTEGER) return need();
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
        if (v.type != msgpack::type::BOOLEAN) return need();
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
      if (path && v.type == msgpack::type::STR) h_.path->emplace_back(std::string(v.text));
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
        if (v.type != msgpack::type::STR) fail_key("shm.path", "a string");
        else ref.path.assign(v.text), have_path = true;
      } else if (id || offset) {
        if (v.type != msgpack::type::POSITIVE_INTEGER) fail_key(id ? "shm.id" : "shm.offset", "an unsigned integer");
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
          case msgpack::type::NIL: *real = stat_value::none(); break;
          case msgpack::type::BOOLEAN: *real = stat_value::of_bool(v.boolean); break;
          case msgpack::type::POSITIVE_INTEGER:
          case msgpack::type::NEGATIVE_INTEGER:
            if (const auto x = as_int(v, fmt::format("stats.{}", sub))) *real = stat_value::of_int(*x);
            break;
          case msgpack::type::FLOAT32:
          case msgpack::type::FLOAT64: *real = stat_value::of_real(v.f64); break;
          default: fail_key(fmt::format("stats.{}", sub), "nil, a bool or a number");
        }
        continue;
      }
      const bool nan = key_is(sub, "nan"), inf = key_is(sub, "inf"), crc = key_is(sub, "crc32");
      if (!nan && !inf && !crc) continue;  // a newer minor version's statistic
      if (v.type != msgpack::type::POSITIVE_INTEGER) fail_key(fmt::format("stats.{}", sub), "an unsigned integer");
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
      if (v.type == msgpack::type::EXT) fail("meta holds a msgpack ext value, which tprobe does not use");
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
      if (v.type == msgpack::type::EXT || v.type == msgpack::type::BIN) plain = false;
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

// A meta's msgpack bytes, checked when they were decoded (header_reader::meta_bytes), rendered
// as pyjson_dump_append renders the tree header_reader::meta_value builds of them.
class meta_renderer : msgpack_cursor {
 public:
  explicit meta_renderer(std::string_view bytes) : msgpack_cursor(bytes) {}

  void render(std::string &out, int indent, int level) {
    if (!value(out, indent, level, 2) || trailing())
      throw std::logic_error("record_meta_pyjson_append: meta_msgpack is not the one value it was checked to be");
  }

 private:
  bool value(std::string &out, int indent, int level, size_t nesting) {
    const auto type = peek();
    if (!type) return false;
    if (*type != MP_ARRAY && *type != MP_MAP) {
      msgpack_cursor::value v;
      if (!read_scalar(*type, v)) return false;
      switch (v.type) {
        case msgpack::type::NIL: out.append("null", 4); return true;
        case msgpack::type::BOOLEAN: v.boolean ? out.append("true", 4) : out.append("false", 5); return true;
        case msgpack::type::POSITIVE_INTEGER: pyjson_uint_append(out, v.u64); return true;
        case msgpack::type::NEGATIVE_INTEGER: pyjson_int_append(out, v.i64); return true;
        case msgpack::type::FLOAT32:
        case msgpack::type::FLOAT64: pyjson_real_append(out, v.f64); return true;
        case msgpack::type::STR: pyjson_string_append(out, v.text); return true;
        default: return false;  // bin and ext were never kept as bytes
      }
    }
    uint64_t elements = 0;
    if (!open(*type, nesting, elements)) return false;
    const bool map = *type == MP_MAP;
    const uint64_t items = map ? elements / 2 : elements;
    if (items == 0) return out.append(map ? "{}" : "[]", 2), true;
    out.push_back(map ? '{' : '[');
    for (uint64_t i = 0; i < items; ++i) {
      pyjson_item_begin(out, indent, level, i == 0);
      if (map) {
        std::string_view key;
        if (!read_str(key)) return false;
        pyjson_string_append(out, key);
        out.append(": ", 2);
      }
      if (!value(out, indent, level + 1, nesting + 1)) return false;
    }
    pyjson_container_end(out, map ? '}' : ']', indent, level);
    return true;
  }
};

}  // namespace

record_header record_header_decode(std::span<const std::byte> frame) {
  record_header h;
  record_header_decode(frame, h);
  return h;
}

namespace {

// record_header_decode's work on a header record_header_reset has just reset: record_decode's
// and record_batch_decode's records were, by reuse_as, and a second reset cost 4% of the decode.
void header_decode_into_reset(std::span<const std::byte> frame, record_header &h,
                              const record_decode_options &options = {}) {
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

}  // namespace

void record_header_decode(std::span<const std::byte> frame, record_header &h) {
  record_header_reset(h, record_kind::tensor);
  header_decode_into_reset(frame, h);
}

std::span<const std::byte> record::payload_bytes() const {
  if (!payload_frame_) return {};
  const auto *data = static_cast<const std::byte *>(payload_frame_->data());
  if (header.codec == record_codec::raw) return {data, payload_frame_->size()};
  if (!decoded_valid_) {
    if (header.length > static_cast<uint64_t>(INT32_MAX))
      throw framing_error(describe() + ": LZ4 payload larger than 2 GiB");
    decoded_.resize(header.length);
    const int n = LZ4_decompress_safe(reinterpret_cast<const char *>(data), reinterpret_cast<char *>(decoded_.data()),
                                      static_cast<int>(payload_frame_->size()), static_cast<int>(header.length));
    if (n < 0 || static_cast<uint64_t>(n) != header.length)
      throw framing_error(describe() + ": corrupt LZ4 payload");
    decoded_valid_ = true;
  }
  return {decoded_.data(), decoded_.size()};
}

void record::set_payload(std::vector<std::byte> bytes) {
  // The frame owns the vector's buffer: moving it to the heap avoids a copy of the data.
  auto *owned = new std::vector<std::byte>(std::move(bytes));
  header.codec = record_codec::raw;
  header.length = owned->size();
  header.stored = owned->size();
  payload_frame_.emplace(owned->data(), owned->size(),
                         [](void *, void *hint) { delete static_cast<std::vector<std::byte> *>(hint); }, owned);
  decoded_valid_ = false;
}

void record::set_payload_frame(zmq::message_t frame) {
  header.stored = frame.size();
  if (header.codec == record_codec::raw) header.length = frame.size();
  payload_frame_.emplace(std::move(frame));
  decoded_valid_ = false;
}

void record::reuse_as(record_kind kind) {
  drop_payload();
  decoded_.shrink_to_fit();  // an LZ4 payload's decoded bytes are not kept for the next record
  record_header_reset(header, kind);
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

void record_meta_pyjson_append(std::string &out, const record_header &h, int indent, int level) {
  if (h.meta_msgpack.empty()) pyjson_dump_append(out, h.meta, indent, level);
  else meta_renderer(h.meta_msgpack).render(out, indent, level);
}

void record::drop_payload() {
  payload_frame_.reset();
  decoded_.clear();
  decoded_valid_ = false;
  header.stored.reset();
  header.length = 0;
  header.codec = record_codec::raw;
}

std::string record::describe() const {
  std::string s(record_kind_name(header.kind));
  s += " record";
  if (!header.entry.empty()) s += " " + header.entry;
  if (!header.slot.empty()) s += " " + header.slot;
  s += fmt::format(" (rank {}, step {}, seq {})", header.rank, header.step, header.seq);
  return s;
}

std::vector<zmq::message_t> record_encode(const record &r) {
  std::vector<zmq::message_t> frames;
  frames.reserve(2);
  frames.push_back(record_header_encode(r.header));
  if (r.has_payload()) {
    if (!r.payload_frame()) throw std::logic_error("record header says stored but has no payload frame");
    frames.emplace_back();
    frames.back().copy(const_cast<zmq::message_t &>(*r.payload_frame()));  // shares large buffers
  }
  return frames;
}

record record_decode(std::vector<zmq::message_t> &frames) {
  record r;
  record_decode(frames, r);
  return r;
}

void record_decode(std::vector<zmq::message_t> &frames, record &r, const record_decode_options &options) {
  if (frames.empty() || frames.size() > 2)
    throw framing_error(fmt::format("a record has 1 or 2 frames, not {}", frames.size()));
  const auto &hf = frames[0];
  r.reuse_as(record_kind::tensor);
  header_decode_into_reset({static_cast<const std::byte *>(hf.data()), hf.size()}, r.header, options);
  const bool expects_payload = r.header.stored.has_value();
  if (expects_payload != (frames.size() == 2))
    throw framing_error(r.describe() + (expects_payload ? ": header announces a payload frame that is missing"
                                                        : ": unexpected payload frame"));
  if (expects_payload) {
    if (frames[1].size() != *r.header.stored)
      throw framing_error(r.describe() + fmt::format(": payload frame is {} bytes, header says {} (truncated?)",
                                                     frames[1].size(), *r.header.stored));
    const uint64_t length = r.header.length;
    r.set_payload_frame(std::move(frames[1]));
    r.header.length = length;
  }
}

// ---- batches ----

namespace {
constexpr unsigned char BATCH_MAGIC[2] = {'T', 'B'};
constexpr size_t BATCH_PREFIX_SIZE = 4;
}  // namespace

// ---- call stacks by reference (record.h section 5) ----

namespace {

struct stack_book {
  std::mutex mutex;
  // Never erased: record_stack_lines hands out pointers into it. Distinct stacks are few.
  std::map<std::pair<std::string, uint64_t>, std::unique_ptr<const nlohmann::ordered_json>> lines;
};

stack_book &the_stack_book() {
  static auto *book = new stack_book;  // never destroyed: stages read it until they exit
  return *book;
}

const nlohmann::ordered_json *stack_book_find(const std::string &run, uint64_t id) {
  stack_book &b = the_stack_book();
  std::lock_guard lock(b.mutex);
  auto it = b.lines.find({run, id});
  return it == b.lines.end() ? nullptr : it->second.get();
}

}  // namespace

void stack_book_define(const std::string &run, uint64_t id, nlohmann::ordered_json lines) {
  stack_book &b = the_stack_book();
  std::lock_guard lock(b.mutex);
  auto &slot = b.lines[{run, id}];
  if (!slot) slot = std::make_unique<const nlohmann::ordered_json>(std::move(lines));
}

std::optional<uint64_t> record_stack_id(const record_header &h) {
  if (h.kind != record_kind::entry || !h.meta.is_object()) return std::nullopt;
  auto it = h.meta.find("stack_id");
  if (it == h.meta.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<uint64_t>();
}

const nlohmann::ordered_json *record_stack_lines(const record_header &h) {
  if (!h.meta.is_object()) return nullptr;
  if (auto it = h.meta.find("stack"); it != h.meta.end() && it->is_array()) return &*it;
  const auto id = record_stack_id(h);
  return id ? stack_book_find(h.run, *id) : nullptr;
}

std::optional<record_header> stack_link::adapt(const record_header &h, bool consumer_takes_refs) {
  const auto id = record_stack_id(h);
  if (!id) return std::nullopt;
  const auto stack = h.meta.find("stack");
  const bool has_lines = stack != h.meta.end() && stack->is_array();
  bool defined = false;
  if (consumer_takes_refs) {
    auto key = std::make_pair(h.run, *id);
    auto at = std::lower_bound(defined_.begin(), defined_.end(), key);
    defined = at != defined_.end() && *at == key;
    if (!defined) defined_.insert(at, std::move(key));
  }
  if (defined) {
    if (!has_lines) return std::nullopt;
    record_header out = h;
    out.meta.erase("stack");
    return out;
  }
  if (has_lines) return std::nullopt;
  const nlohmann::ordered_json *lines = stack_book_find(h.run, *id);
  if (!lines)
    throw framing_error(fmt::format("entry record {}: stack_id {} of run \"{}\" was never defined on this stream",
                                    h.entry, *id, h.run));
  record_header out = h;
  out.meta["stack"] = *lines;
  return out;
}

bool stack_link::defined(std::string_view run, uint64_t id) const {
  const auto at = std::lower_bound(defined_.begin(), defined_.end(), std::make_pair(run, id),
                                   [](const std::pair<std::string, uint64_t> &a, const std::pair<std::string_view, uint64_t> &b) {
                                     return std::string_view(a.first) < b.first || (a.first == b.first && a.second < b.second);
                                   });
  return at != defined_.end() && at->first == run && at->second == id;
}

bool record_is_barrier(const record_header &h) { return h.meta.is_object() && h.meta.contains("barrier"); }

bool record_batchable(const record_header &h) {
  return !record_kind_is_control(h.kind) && !h.shm && !record_is_barrier(h);
}

bool record_frame_is_batch(const zmq::message_t &frame) {
  const auto *b = static_cast<const unsigned char *>(frame.data());
  return frame.size() >= 2 && b[0] == BATCH_MAGIC[0] && b[1] == BATCH_MAGIC[1];
}

namespace {

// Walks a batch frame's framing (record.h section 4): `each(index, header, at)` gets the header
// bytes of record `index` and returns its payload's size (0 without one), which must lie within
// the frame from byte `at`. Returns the number of records.
template <typename Each>
size_t batch_walk(const zmq::message_t &frame, Each &&each) {
  const auto *bytes = static_cast<const std::byte *>(frame.data());
  const size_t size = frame.size();
  if (size < BATCH_PREFIX_SIZE || !record_frame_is_batch(frame))
    throw framing_error(fmt::format("batch frame of {} bytes lacks the 4-byte \"TB\" prefix", size));
  const auto major = static_cast<uint8_t>(bytes[2]);
  if (major != RECORD_VERSION_MAJOR)
    throw framing_error(fmt::format("batch format major version {} is not supported (this build reads {})", major,
                                    RECORD_VERSION_MAJOR));
  size_t index = 0;
  size_t at = BATCH_PREFIX_SIZE;
  while (at < size) {
    if (size - at < 4)
      throw framing_error(fmt::format("batch record {} at byte {}: {} bytes left, a length takes 4 (truncated?)",
                                      index, at, size - at));
    uint32_t header_length = 0;
    std::memcpy(&header_length, bytes + at, 4);  // little-endian hosts only (x86-64, aarch64)
    at += 4;
    if (header_length > size - at)
      throw framing_error(fmt::format("batch record {} at byte {}: header of {} bytes, {} left (truncated?)", index,
                                      at - 4, header_length, size - at));
    const std::span<const std::byte> header(bytes + at, header_length);
    at += header_length;
    const uint64_t stored = each(index, header, at);
    if (stored > size - at)
      throw framing_error(fmt::format("batch record {} announces {} payload bytes, {} left (truncated?)", index,
                                      stored, size - at));
    at += static_cast<size_t>(stored);
    ++index;
  }
  return index;
}

}  // namespace

std::vector<record> record_batch_decode(const zmq::message_t &frame) {
  std::vector<record> out;
  record_batch_decode(frame, out);
  return out;
}

void record_batch_decode(const zmq::message_t &frame, std::vector<record> &out) {
  const size_t kept = out.size();
  size_t used = kept;
  try {
    record_batch_decode(frame, out, used);
  } catch (...) {
    out.resize(kept);
    throw;
  }
}

void record_batch_decode(const zmq::message_t &frame, std::vector<record> &out, size_t &used,
                         const record_decode_options &options) {
  const size_t kept = used;
  const auto *bytes = static_cast<const std::byte *>(frame.data());
  try {
    batch_walk(frame, [&](size_t index, std::span<const std::byte> header, size_t at) -> uint64_t {
      record &r = used < out.size() ? out[used] : out.emplace_back();
      ++used;
      r.reuse_as(record_kind::tensor);  // a spare record's payload and LZ4 buffer go
      header_decode_into_reset(header, r.header, options);
      if (!record_batchable(r.header))
        throw framing_error(fmt::format("batch record {}: {} may not travel in a batch (control, barrier or shm)",
                                        index, r.describe()));
      const uint64_t stored = r.header.stored.value_or(0);
      if (r.header.stored && stored <= frame.size() - at) {
        const uint64_t length = r.header.length;
        r.set_payload_frame(zmq::message_t(bytes + at, static_cast<size_t>(stored)));
        r.header.length = length;
      }
      return stored;
    });
  } catch (...) {
    used = kept;
    throw;
  }
}

namespace {

// Reads only record_glance's keys of one header, with the decoder's cursor: no object tree, no
// allocation. Stops at the first problem; problem() or msgpack_problem() says why.
class glance_reader : msgpack_cursor {
 public:
  glance_reader(std::string_view body, record_glance &g) : msgpack_cursor(body), g_(g) {}

  // False on a problem.
  bool read() {
    const auto type = peek();
    if (!type) return false;
    if (*type != MP_MAP) return skip(1);  // finish() says it is not a map
    top_level_map_ = true;
    uint64_t elements = 0;
    if (!open(MP_MAP, 1, elements)) return false;
    for (uint64_t i = 0; i < elements / 2; ++i) {
      const auto key_type = peek();
      if (!key_type) return false;
      if (*key_type != MP_STR) return fail("header map has a key that is not a string");
      std::string_view key;
      if (!read_str(key) || !top_value(key)) return false;
    }
    return true;
  }

  using msgpack_cursor::msgpack_problem;
  using msgpack_cursor::trailing;
  const std::string &problem() const { return problem_; }

  // After a successful read: the checks of the whole header.
  void finish(size_t index) const {
    if (!top_level_map_) throw framing_error(fmt::format("batch record {}: header is not a msgpack map", index));
    if (!have_kind_) throw framing_error(fmt::format("batch record {}: header has no \"kind\"", index));
    if (record_kind_is_control(g_.kind) || barrier_ || shm_)
      throw framing_error(fmt::format("batch record {}: a {} record{} may not travel in a batch (control, barrier or shm)",
                                      index, record_kind_name(g_.kind), barrier_ ? " with a barrier" : ""));
  }
  uint64_t stored() const { return stored_; }

 private:
  bool fail(std::string problem) {
    problem_ = std::move(problem);
    return false;
  }

  // The value at the cursor as an unsigned integer (a signed format holding 0 or more counts, as
  // in the decoder); nullopt, and the value passed over, when it is anything else.
  bool unsigned_value(std::optional<uint64_t> &out) {
    out.reset();
    value v;
    if (!read_any(3, v)) return false;
    if (v.type == msgpack::type::POSITIVE_INTEGER) out = v.u64;
    return true;
  }

  bool top_value(std::string_view key) {
    const auto type = peek();
    if (!type) return false;
    if (key_is(key, "kind") || key_is(key, "run")) {
      if (*type != MP_STR) return skip(2) && fail(fmt::format("header key \"{}\" is not a string", key));
      std::string_view text;
      if (!read_str(text)) return false;
      if (key_is(key, "run")) {
        g_.run = text;
        return true;
      }
      const auto k = record_kind_from_name(text);
      if (!k) return fail(fmt::format("unknown record kind \"{}\"", text));
      g_.kind = *k;
      have_kind_ = true;
      return true;
    }
    if (key_is(key, "flags") || key_is(key, "length") || key_is(key, "stored") || key_is(key, "seq")) {
      std::optional<uint64_t> v;
      if (!unsigned_value(v)) return false;
      if (!v) return fail(fmt::format("header key \"{}\" is not an unsigned int", key));
      if (key_is(key, "length")) g_.length = *v;
      else if (key_is(key, "seq")) g_.seq = *v;
      else if (key_is(key, "stored")) stored_ = *v, g_.has_payload = true;
      else if (*v > UINT32_MAX) return fail("header key \"flags\" is not a 32-bit set");
      else g_.flags = static_cast<uint32_t>(*v);
      return true;
    }
    // A key given twice counts as the decoder counts it, by its last value.
    if (key_is(key, "stats")) {
      g_.has_stats = g_.has_crc32 = false;
      if (*type != MP_MAP) return skip(2);
      g_.has_stats = true;
      return sub_map(key);
    }
    if (key_is(key, "meta")) {
      barrier_ = g_.has_stack_lines = false;
      g_.stack_id.reset();
      if (*type != MP_MAP) return skip(2);
      return sub_map(key);
    }
    if (key_is(key, "shm")) shm_ = true;
    return skip(2);
  }

  // stats' or meta's map: the keys that decide; the others, and keys that are not strings, are
  // the decoder's concern.
  bool sub_map(std::string_view top) {
    uint64_t elements = 0;
    if (!open(MP_MAP, 2, elements)) return false;
    const bool meta = key_is(top, "meta");
    for (uint64_t i = 0; i < elements / 2; ++i) {
      const auto key_type = peek();
      if (!key_type) return false;
      std::string_view sub;
      if (*key_type == MP_STR) {
        if (!read_str(sub)) return false;
      } else if (!skip(3)) {
        return false;
      }
      if (!meta) {
        if (!skip(3)) return false;
        if (key_is(sub, "crc32")) g_.has_crc32 = true;
        continue;
      }
      if (key_is(sub, "stack")) {
        const auto type = peek();
        if (!type) return false;
        g_.has_stack_lines = *type == MP_ARRAY;
        if (!skip(3)) return false;
      } else if (key_is(sub, "stack_id")) {
        if (!unsigned_value(g_.stack_id)) return false;
      } else {
        if (!skip(3)) return false;
        if (key_is(sub, "barrier")) barrier_ = true;
      }
    }
    return true;
  }

  record_glance &g_;
  bool top_level_map_ = false;
  bool have_kind_ = false;
  bool barrier_ = false;
  bool shm_ = false;
  uint64_t stored_ = 0;
  std::string problem_;
};

}  // namespace

void record_batch_glance(const zmq::message_t &frame, std::vector<record_glance> &out) {
  out.clear();
  batch_walk(frame, [&](size_t index, std::span<const std::byte> header, size_t) -> uint64_t {
    std::string_view body;
    try {
      body = header_body(header);
    } catch (const framing_error &e) {
      throw framing_error(fmt::format("batch record {}: {}", index, e.what()));
    }
    record_glance &g = out.emplace_back();
    glance_reader reader(body, g);
    if (!reader.read()) {
      if (!reader.msgpack_problem().empty())
        throw framing_error(fmt::format("batch record {}: header is not valid msgpack ({})", index,
                                        reader.msgpack_problem()));
      throw framing_error(fmt::format("batch record {}: {}", index, reader.problem()));
    }
    if (reader.trailing())
      throw framing_error(fmt::format("batch record {}: header has {} trailing bytes after its msgpack map", index,
                                      reader.trailing()));
    reader.finish(index);
    return reader.stored();
  });
}

namespace {

// Batch buffers, recycled. A batch frame is freed where ZeroMQ lets go of it (its I/O thread,
// once sent), so with a fresh buffer every batch glibc kept handing the sender's arena top back to
// the kernel and faulting it in again: 5-22 pages a transformer step on the capture's sender, each
// first touch ~14 µs on a paravirtualised guest (docs/performance.md, 2026-11-28 evening). A few
// buffers kept here are mapped already, and warm.
constexpr size_t batch_buffer_bytes = RECORD_BATCH_BYTES + RECORD_BATCH_RECORD_MAX;

struct batch_buffer_pool {
  static constexpr size_t kept_max = 16;  // batches in flight at once, beyond which buffers go back
  std::mutex mutex;
  std::vector<std::vector<std::byte>> kept;
};

batch_buffer_pool &the_batch_buffer_pool() {
  static auto *pool = new batch_buffer_pool;  // never destroyed: frames may die in static destruction
  return *pool;
}

std::vector<std::byte> batch_buffer_get() {
  auto &pool = the_batch_buffer_pool();
  {
    std::lock_guard lock(pool.mutex);
    if (!pool.kept.empty()) {
      std::vector<std::byte> b = std::move(pool.kept.back());
      pool.kept.pop_back();
      return b;
    }
  }
  std::vector<std::byte> b;
  b.reserve(batch_buffer_bytes);
  return b;
}

void batch_buffer_put(std::vector<std::byte> &&b) {
  if (b.capacity() > 4 * batch_buffer_bytes) return;  // grown by an unusual record: not kept
  b.clear();
  auto &pool = the_batch_buffer_pool();
  std::lock_guard lock(pool.mutex);
  if (pool.kept.size() < batch_buffer_pool::kept_max) pool.kept.push_back(std::move(b));
}

}  // namespace

record_batch_builder::record_batch_builder() : buffer_(batch_buffer_get()) {
  const unsigned char prefix[BATCH_PREFIX_SIZE] = {BATCH_MAGIC[0], BATCH_MAGIC[1], RECORD_VERSION_MAJOR,
                                                   RECORD_VERSION_MINOR};
  buffer_.insert(buffer_.end(), reinterpret_cast<const std::byte *>(prefix),
                 reinterpret_cast<const std::byte *>(prefix) + BATCH_PREFIX_SIZE);
}

namespace {

// One record of a batch (section 4): its header's length, the header, the payload.
void batch_append_bytes(std::vector<std::byte> &batch, std::span<const std::byte> header,
                        std::span<const std::byte> payload) {
  if (header.size() > UINT32_MAX) throw std::logic_error("a header frame over 4 GiB");
  const auto length = static_cast<uint32_t>(header.size());
  const auto *l = reinterpret_cast<const std::byte *>(&length);
  batch.insert(batch.end(), l, l + 4);
  batch.insert(batch.end(), header.begin(), header.end());
  batch.insert(batch.end(), payload.begin(), payload.end());
}

std::span<const std::byte> bytes_of(const zmq::message_t &m) {
  return {static_cast<const std::byte *>(m.data()), m.size()};
}

}  // namespace

bool record_batch_builder::append(const record &r) {
  if (!record_batchable(r.header)) throw std::logic_error("record_batch_builder: a record that may not be batched");
  if (r.has_payload() && !r.payload_frame()) throw std::logic_error("record header says stored but has no payload frame");
  const auto payload = r.has_payload() ? bytes_of(*r.payload_frame()) : std::span<const std::byte>{};
  if (payload.size() > RECORD_BATCH_RECORD_MAX) return false;
  const header_buffer_reset reset_at_return;
  auto &buf = header_buffer();
  header_encode_into(buf, r.header);
  if (buf.size() + payload.size() > RECORD_BATCH_RECORD_MAX) return false;
  batch_append_bytes(buffer_, {reinterpret_cast<const std::byte *>(buf.data()), buf.size()}, payload);
  ++records_;
  return true;
}

void record_batch_builder::append(const std::vector<zmq::message_t> &frames) {
  if (frames.empty() || frames.size() > 2) throw std::logic_error("a record has 1 or 2 frames");
  batch_append_bytes(buffer_, bytes_of(frames[0]),
                     frames.size() == 2 ? bytes_of(frames[1]) : std::span<const std::byte>{});
  ++records_;
}

zmq::message_t record_batch_builder::take() {
  // The frame owns the buffer (no copy) and gives it back to the pool when freed; the builder
  // starts over with another.
  auto *owned = new std::vector<std::byte>(std::move(buffer_));
  zmq::message_t frame(owned->data(), owned->size(),
                       [](void *, void *hint) {
                         auto *b = static_cast<std::vector<std::byte> *>(hint);
                         batch_buffer_put(std::move(*b));
                         delete b;
                       },
                       owned);
  *this = record_batch_builder();
  return frame;
}

std::optional<zmq::message_t> record_payload_lz4(std::span<const std::byte> bytes) {
  if (bytes.size() > static_cast<size_t>(LZ4_MAX_INPUT_SIZE)) return std::nullopt;
  const int bound = LZ4_compressBound(static_cast<int>(bytes.size()));
  std::vector<char> out(static_cast<size_t>(bound));
  const int n = LZ4_compress_default(reinterpret_cast<const char *>(bytes.data()), out.data(),
                                     static_cast<int>(bytes.size()), bound);
  if (n <= 0 || static_cast<size_t>(n) >= bytes.size()) return std::nullopt;
  return zmq::message_t(out.data(), static_cast<size_t>(n));
}

// ---- record files ----

record_file_writer::record_file_writer(const std::string &path) : path_(path) {
  file_ = std::fopen(path.c_str(), "wb");
  if (!file_) throw system_error_from_errno("create", path, errno);
  ::fchmod(fileno(file_), 0640);
  if (std::fwrite(RECORD_FILE_MAGIC.data(), 1, RECORD_FILE_MAGIC.size(), file_) != RECORD_FILE_MAGIC.size())
    throw system_error_from_errno("write", path, errno);
}

record_file_writer::~record_file_writer() {
  if (file_) std::fclose(file_);
}

void record_file_writer::write(const record &r) {
  auto frames = record_encode(r);
  const uint8_t count = static_cast<uint8_t>(frames.size());
  bool ok = std::fwrite(&count, 1, 1, file_) == 1;
  for (const auto &f : frames) {
    const uint64_t size = f.size();  // little-endian hosts only (x86-64, aarch64)
    ok = ok && std::fwrite(&size, sizeof size, 1, file_) == 1;
    ok = ok && (size == 0 || std::fwrite(f.data(), 1, size, file_) == size);
  }
  if (!ok) throw system_error_from_errno("write", path_, errno);
}

void record_file_writer::close() {
  if (!file_) return;
  const bool ok = std::fflush(file_) == 0;
  const int err = errno;
  std::fclose(file_);
  file_ = nullptr;
  if (!ok) throw system_error_from_errno("write", path_, err);
}

namespace {

// The largest frame length that may follow byte `offset` of `file`: the bytes left in a regular
// file (measured now, so a file still being appended to is read as far as it goes), capped at
// RECORD_FILE_MAX_FRAME for any file (a pipe cannot be measured).
uint64_t frame_size_limit(std::FILE *file, uint64_t offset) {
  struct stat st {};
  if (::fstat(fileno(file), &st) != 0 || !S_ISREG(st.st_mode)) return RECORD_FILE_MAX_FRAME;
  const auto size = static_cast<uint64_t>(st.st_size);
  return std::min(size > offset ? size - offset : 0, RECORD_FILE_MAX_FRAME);
}

}  // namespace

record_file_reader::record_file_reader(const std::string &path, const record_decode_options &options)
    : path_(path), options_(options) {
  file_ = std::fopen(path.c_str(), "rb");
  if (!file_) throw system_error_from_errno("open", path, errno);
  char magic[RECORD_FILE_MAGIC.size()];
  if (std::fread(magic, 1, sizeof magic, file_) != sizeof magic ||
      std::string_view(magic, sizeof magic) != RECORD_FILE_MAGIC) {
    std::fclose(file_);  // no destructor runs for a constructor that throws
    file_ = nullptr;
    throw framing_error(fmt::format("{}: not a tprobe record file (bad magic)", path));
  }
  offset_ = sizeof magic;
}

record_file_reader::~record_file_reader() {
  if (file_) std::fclose(file_);
}

std::optional<record> record_file_reader::read() {
  record r;
  if (!read(r)) return std::nullopt;
  return r;
}

bool record_file_reader::read(record &into) {
  const uint64_t record_offset = offset_;
  uint8_t count = 0;
  if (std::fread(&count, 1, 1, file_) != 1) {
    if (std::ferror(file_)) throw system_error_from_errno("read", path_, errno);
    return false;
  }
  offset_ += 1;
  auto truncated = [&] {
    return framing_error(fmt::format("{}: record at byte {} is truncated", path_, record_offset));
  };
  if (count < 1 || count > 2)
    throw framing_error(fmt::format("{}: record at byte {} has {} frames (corrupt file)", path_, record_offset, count));
  std::vector<zmq::message_t> frames;
  for (uint8_t i = 0; i < count; ++i) {
    uint64_t size = 0;
    if (std::fread(&size, sizeof size, 1, file_) != 1) throw truncated();
    offset_ += sizeof size;
    // Checked before allocating: a corrupt length must be a corrupt-file error (exit 100), not a
    // failed 1 TB allocation (ENOMEM, exit 111) or a machine driven into swap.
    // A frame inside the end measured last needs no fstat (a file only grows): one per record
    // was a tenth of a stage's time replaying a recording.
    if (size > measured_end_ - std::min(offset_, measured_end_)) {
      const uint64_t limit = frame_size_limit(file_, offset_);
      measured_end_ = offset_ + limit;
      if (size > limit)
        throw framing_error(fmt::format(
            "{}: record at byte {} claims a {}-byte frame at byte {}, but {} (corrupt file)", path_, record_offset,
            size, offset_ - sizeof size,
            limit == RECORD_FILE_MAX_FRAME ? fmt::format("a frame is at most {} bytes", RECORD_FILE_MAX_FRAME)
                                           : fmt::format("only {} bytes are left in the file", limit)));
    }
    zmq::message_t frame(size);
    if (size && std::fread(frame.data(), 1, size, file_) != size) throw truncated();
    offset_ += size;
    frames.push_back(std::move(frame));
  }
  try {
    record_decode(frames, into, options_);
    return true;
  } catch (const framing_error &e) {
    throw framing_error(fmt::format("{}: record at byte {}: {}", path_, record_offset, e.what()));
  }
}

}  // namespace tprobe
