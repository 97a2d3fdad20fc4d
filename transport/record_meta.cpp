// record_meta.cpp: a header's meta in its two quick forms (record.h, record_meta_text and
// record_header::meta_msgpack): a meta given as JSON text packed straight into msgpack (a plain
// packer for the texts the captures make, nlohmann's SAX parse for any other), and a meta kept as
// its msgpack bytes rendered as pyjson text. Apart from the header codec (record_header.cpp),
// which calls meta_text_packed, because they are the value records' fast paths, not the format.
#include "record.h"

#include <charconv>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "pyjson.h"
#include "record_codec.h"

namespace tprobe {

using namespace record_detail;

namespace {

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

}  // namespace

namespace record_detail {

// pack_meta_text into a buffer of this thread: the plain packer's bytes as they are, the general
// path's packed there too.
std::string_view meta_text_packed(std::string_view text, bool general_only) {
  thread_local header_stream packed;
  packed.clear();
  if (!general_only && plain_json_packer(text).run(packed)) return {packed.data(), packed.size()};
  packed.clear();
  packer_t p(packed);
  pack_meta_text(p, text, true);
  return {packed.data(), packed.size()};
}

}  // namespace record_detail

nlohmann::ordered_json record_meta_text(std::string_view json_text) {
  const auto *p = reinterpret_cast<const std::uint8_t *>(json_text.data());
  return nlohmann::ordered_json::binary(std::vector<std::uint8_t>(p, p + json_text.size()), meta_text_subtype);
}

std::string record_meta_text_msgpack(std::string_view json_text, bool general_only) {
  header_stream buf;
  packer_t p(buf);
  pack_meta_text(p, json_text, general_only);
  return {buf.data(), buf.size()};
}

namespace {

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
        case kind::nil: out.append("null", 4); return true;
        case kind::boolean: v.boolean ? out.append("true", 4) : out.append("false", 5); return true;
        case kind::positive_integer: pyjson_uint_append(out, v.u64); return true;
        case kind::negative_integer: pyjson_int_append(out, v.i64); return true;
        case kind::float32:
        case kind::float64: pyjson_real_append(out, v.f64); return true;
        case kind::str: pyjson_string_append(out, v.text); return true;
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

void record_meta_pyjson_append(std::string &out, const record_header &h, int indent, int level) {
  if (h.meta_msgpack.empty()) pyjson_dump_append(out, h.meta, indent, level);
  else meta_renderer(h.meta_msgpack).render(out, indent, level);
}

}  // namespace tprobe
