// record_codec.h: the pieces of the record codec (record.h) that more than one of its files
// uses: the stream headers are packed into and the packer over it (msgpuck's encoders), the small
// packing helpers, the per-thread header buffer, the header frame's prefix check, the msgpuck cursor
// the readers walk a header with, and the few functions one part of the codec calls in another.
// Internal to transport/: no other directory includes it (record.h is the specification and the
// only public header). It is apart so that each part (record_header.cpp, record_meta.cpp,
// record_batch.cpp, record_stacks.cpp, record_file.cpp, record.cpp) holds one concern while they
// share one text of each helper.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <type_traits>

#include <fmt/format.h>
// The codec's one msgpack library, to write and to read: msgpuck (Tarantool's, one header of
// inline per-format encoders and decoders over a char pointer; Debian's libmsgpuck-dev). The
// readers need its cursor (a header is walked once, no object tree, a fraction of msgpack-c's
// parse per record); the writer needs no more than its encoders, which write each token straight
// into the header buffer. record_header.cpp holds its tables (MP_SOURCE), hidden so that the
// capture's shared library exports none of its names.
#pragma GCC visibility push(hidden)
#include <msgpuck.h>
#pragma GCC visibility pop

#include "record.h"

namespace tprobe::record_detail {

// Everything up to the declarations at the end is local to each file that includes it (an
// unnamed namespace), as it was inside the one file the codec was: the compiler inlines and
// specialises it per file as it did then, the packer over header_stream included. Shared
// by the files as inline functions and types of a named namespace, a header cost 3-16% more
// instructions to encode, glance at or decode (measured); so no type of this part crosses from
// one file to another, only the plain ones of the declarations at the end.
namespace {

// The stream headers are packed into. A buffer compiled out of line costs a call and a memcpy
// call for each of a header's forty-odd tokens (msgpack::sbuffer's did: a third of the capture's
// sender thread). This one's fast path is inlined: a token is encoded in place (room() then
// advance()), and a write of a constant size becomes a few moves.
class header_stream {
 public:
  explicit header_stream(size_t capacity = 1024) : bytes_(capacity) {}
  [[gnu::always_inline]] void write(const char *data, size_t n) {
    if (n == 0) return;  // an empty body may come with a null pointer
    if (n > bytes_.size() - size_) [[unlikely]] grow(n);
    std::memcpy(bytes_.data() + size_, data, n);
    size_ += n;
  }
  char *data() { return bytes_.data(); }
  const char *data() const { return bytes_.data(); }
  [[nodiscard]] size_t size() const { return size_; }
  [[nodiscard]] size_t capacity() const { return bytes_.size(); }
  void clear() { size_ = 0; }
  // Room for `n` more bytes at the end, written by the caller and then kept by advance().
  [[gnu::always_inline]] char *room(size_t n) {
    if (n > bytes_.size() - size_) [[unlikely]] grow(n);
    return bytes_.data() + size_;
  }
  [[gnu::always_inline]] void advance(const char *end) { size_ = static_cast<size_t>(end - bytes_.data()); }
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

// msgpack tokens into a header_stream, each in its smallest format (msgpack's rule, and what the
// record ladder's bytes pin): an integer as a positive fixint or uint 8-64 when it is 0 or more
// and as a negative fixint or int 8-64 below, a str as fixstr or str 8-32, bin 8-32, fixmap or map
// 16/32, fixarray or array 16/32. msgpuck's encoders (mp_encode_*) write each one in place.
class packer_t {
 public:
  explicit packer_t(header_stream &stream) : stream_(stream) {}
  [[nodiscard]] header_stream &stream() const { return stream_; }

  void pack_nil() { stream_.advance(mp_encode_nil(stream_.room(1))); }
  void pack(bool b) { stream_.advance(mp_encode_bool(stream_.room(1), b)); }
  template <class T>
    requires(std::is_integral_v<T> && !std::is_same_v<T, bool>)
  void pack(T v) {
    char *at = stream_.room(9);
    if constexpr (std::is_signed_v<T>) {
      if (v < 0) return stream_.advance(mp_encode_int(at, static_cast<int64_t>(v)));
    }
    stream_.advance(mp_encode_uint(at, static_cast<uint64_t>(v)));
  }
  void pack_map(uint32_t pairs) { stream_.advance(mp_encode_map(stream_.room(5), pairs)); }
  void pack_array(uint32_t elements) { stream_.advance(mp_encode_array(stream_.room(5), elements)); }
  void pack_str(uint32_t length) { stream_.advance(mp_encode_strl(stream_.room(5), length)); }
  void pack_str_body(const char *data, uint32_t length) { stream_.write(data, length); }
  void pack_bin(uint32_t length) { stream_.advance(mp_encode_binl(stream_.room(5), length)); }
  void pack_bin_body(const char *data, uint32_t length) { stream_.write(data, length); }

 private:
  header_stream &stream_;
};

// A float64 is always written as one (marker 0xcb, big-endian), never as an integer: a statistic
// of 2.0 stays 2.0 and -0.0 stays -0.0 (msgpack-c 4's pack_double wrote integral doubles as
// integers).
[[maybe_unused]] void pack_float64(packer_t &p, double d) {
  p.stream().advance(mp_encode_double(p.stream().room(9), d));
}

[[maybe_unused]] void pack_str(packer_t &p, std::string_view s) {
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
inline constexpr std::uint64_t meta_text_subtype = 0x746d7478;

[[maybe_unused]] bool is_meta_text(const nlohmann::ordered_json &j) {
  return j.is_binary() && j.get_binary().has_subtype() && j.get_binary().subtype() == meta_text_subtype;
}

// key == literal with the literal's length known here, so that the comparison is a load or two,
// not a call to memcmp: a header's dozen keys are each compared with several names.
template <size_t N>
inline bool key_is(std::string_view key, const char (&literal)[N]) {
  return key.size() == N - 1 && std::memcmp(key.data(), literal, N - 1) == 0;
}

// The buffer headers are encoded in, kept per thread: a buffer of its own per header was a
// malloc, and a realloc or two for the larger ones, per record at every hop. Emptied when the
// guard goes; one that grew for a huge header is not kept. (One per thread and file: the header
// encoder's and the batch builder's.)
[[maybe_unused]] header_stream &header_buffer() {
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

// A header frame's msgpack body, after its prefix is checked (section 1). Throws framing_error.
[[maybe_unused]] std::string_view header_body(std::span<const std::byte> frame) {
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
  // A scalar's kind, as the readers tell values apart: a signed format holding 0 or more is a
  // positive integer, float32 is widened to double; array stands for any container passed over.
  enum class kind { nil, boolean, positive_integer, negative_integer, float32, float64, str, bin, ext, array };
  // A scalar.
  struct value {
    kind type = kind::nil;
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
      case MP_NIL: ++p_, v.type = kind::nil; return true;
      case MP_BOOL:
        v.type = kind::boolean, v.boolean = mp_decode_bool(&p_);
        return true;
      case MP_UINT:
        if (!check(mp_check_uint(p_, end_))) return false;
        v.type = kind::positive_integer, v.u64 = mp_decode_uint(&p_);
        return true;
      case MP_INT: {
        if (!check(mp_check_int(p_, end_))) return false;
        const int64_t i = mp_decode_int(&p_);
        if (i >= 0) v.type = kind::positive_integer, v.u64 = static_cast<uint64_t>(i);
        else v.type = kind::negative_integer, v.i64 = i;
        return true;
      }
      case MP_FLOAT:
        if (!check(mp_check_float(p_, end_))) return false;
        v.type = kind::float32, v.f64 = mp_decode_float(&p_);
        return true;
      case MP_DOUBLE:
        if (!check(mp_check_double(p_, end_))) return false;
        v.type = kind::float64, v.f64 = mp_decode_double(&p_);
        return true;
      case MP_STR: v.type = kind::str; return read_str(v.text);
      case MP_BIN:
        v.type = kind::bin;
        return check(mp_check_binl(p_, end_)) && read_bytes(mp_decode_binl(&p_), v.text);
      case MP_EXT: {  // msgpuck reads no ext: fixext 1-16 (0xd4-0xd8), ext 8/16/32 (0xc7-0xc9)
        const auto c = static_cast<uint8_t>(*p_);
        size_t size_bytes = 0, data = 0;
        if (c >= 0xd4 && c <= 0xd8) data = size_t{1} << (c - 0xd4);
        else size_bytes = c == 0xc7 ? 1 : c == 0xc8 ? 2 : 4;
        if (!have(1 + size_bytes)) return false;
        for (size_t i = 0; i < size_bytes; ++i) data = data << 8 | static_cast<uint8_t>(p_[1 + i]);
        if (!have(1 + size_bytes + 1 + data)) return false;
        v.type = kind::ext, v.text = {p_ + 2 + size_bytes, data};
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
    v.type = kind::array;
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

}  // namespace

// ---- what one part of the codec calls in another ----

// record_header_decode's work on a header record_header_reset has just reset (record_header.cpp;
// record_decode and record_batch_decode call it on records reuse_as reset).
void header_decode_into_reset(std::span<const std::byte> frame, record_header &h,
                              const record_decode_options &options = {});

// The header frame of `h` (prefix + msgpack map) encoded in this thread's header buffer, which
// is emptied when the object goes (record_header.cpp; the batch builder copies it into a batch).
class encoded_header {
 public:
  explicit encoded_header(const record_header &h);
  ~encoded_header();
  encoded_header(const encoded_header &) = delete;
  encoded_header &operator=(const encoded_header &) = delete;
  std::span<const std::byte> bytes() const { return bytes_; }

 private:
  std::span<const std::byte> bytes_;
};

// The msgpack bytes of a meta given as JSON text, as the header encoder writes them
// (record_meta.cpp): in a buffer of this thread, valid until its next call. Throws
// std::invalid_argument for a text that is not JSON.
std::string_view meta_text_packed(std::string_view text, bool general_only);

}  // namespace tprobe::record_detail
