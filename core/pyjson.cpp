#include "pyjson.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <utility>
#include <vector>

#include "errors.h"

#if defined(__x86_64__) && defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace tprobe {

using json = nlohmann::ordered_json;

namespace {

constexpr char hex_digits[] = "0123456789abcdef";

// 1 for bytes a JSON string may hold verbatim (printable ASCII other than '"' and '\\'): Python's
// ensure_ascii escapes everything outside ' '..'~'.
constexpr std::array<bool, 256> make_plain_table() {
  std::array<bool, 256> t{};
  for (int c = 0x20; c < 0x7f; ++c) t[c] = c != '"' && c != '\\';
  return t;
}
constexpr std::array<bool, 256> plain = make_plain_table();

// Parser side: bytes that end a fast run inside a string ('"', '\\', control characters and
// non-ASCII bytes, which need UTF-8 validation).
constexpr std::array<bool, 256> make_string_plain_table() {
  std::array<bool, 256> t{};
  for (int c = 0x20; c < 0x80; ++c) t[c] = c != '"' && c != '\\';
  return t;
}
constexpr std::array<bool, 256> string_plain = make_string_plain_table();

inline bool is_cont(unsigned char c) { return (c & 0xC0) == 0x80; }

inline void append_u_escape(std::string &out, unsigned cp) {
  const char b[6] = {'\\', 'u', hex_digits[(cp >> 12) & 15], hex_digits[(cp >> 8) & 15],
                     hex_digits[(cp >> 4) & 15], hex_digits[cp & 15]};
  out.append(b, 6);
}

// The end of the run of plain bytes from `p`: 16 bytes a compare where SSE2 is there. A stack
// line of stack.json or a key of dump.json is mostly one long run, and a byte a step cost 5
// instructions a byte.
inline const unsigned char *plain_run_end(const unsigned char *p, const unsigned char *end) {
#if defined(__x86_64__) && defined(__SSE2__)
  // Signed bytes: below ' ' are the control bytes and every byte from 0x80 on.
  const __m128i space = _mm_set1_epi8(0x20), del = _mm_set1_epi8(0x7f), quote = _mm_set1_epi8('"'),
                backslash = _mm_set1_epi8('\\');
  while (end - p >= 16) {
    const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i *>(p));
    const __m128i special = _mm_or_si128(_mm_or_si128(_mm_cmplt_epi8(v, space), _mm_cmpeq_epi8(v, del)),
                                         _mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)));
    if (const int mask = _mm_movemask_epi8(special)) return p + __builtin_ctz(static_cast<unsigned>(mask));
    p += 16;
  }
#endif
  while (p < end && plain[*p]) ++p;
  return p;
}

void append_string(std::string &out, std::string_view s) {
  out.push_back('"');
  const auto *p = reinterpret_cast<const unsigned char *>(s.data());
  const auto *end = p + s.size();
  while (p < end) {
    const auto *run = p;
    p = plain_run_end(p, end);
    if (p != run) out.append(reinterpret_cast<const char *>(run), static_cast<size_t>(p - run));
    if (p == end) break;
    const unsigned char c = *p;
    if (c < 0x80) {
      switch (c) {
        case '"': out.append("\\\"", 2); break;
        case '\\': out.append("\\\\", 2); break;
        case '\n': out.append("\\n", 2); break;
        case '\r': out.append("\\r", 2); break;
        case '\t': out.append("\\t", 2); break;
        case '\b': out.append("\\b", 2); break;
        case '\f': out.append("\\f", 2); break;
        default: append_u_escape(out, c); break;
      }
      ++p;
      continue;
    }
    const auto left = static_cast<size_t>(end - p);
    unsigned cp = 0;
    size_t len = 0;
    if (c >= 0xC2 && c <= 0xDF && left >= 2 && is_cont(p[1])) {
      cp = ((c & 0x1Fu) << 6) | (p[1] & 0x3Fu);
      len = 2;
    } else if (c >= 0xE0 && c <= 0xEF && left >= 3 && is_cont(p[1]) && is_cont(p[2])) {
      cp = ((c & 0x0Fu) << 12) | ((p[1] & 0x3Fu) << 6) | (p[2] & 0x3Fu);
      if (cp >= 0x800) len = 3;  // surrogates (WTF-8) allowed: Python's lone surrogates
    } else if (c >= 0xF0 && c <= 0xF4 && left >= 4 && is_cont(p[1]) && is_cont(p[2]) &&
               is_cont(p[3])) {
      cp = ((c & 0x07u) << 18) | ((p[1] & 0x3Fu) << 12) | ((p[2] & 0x3Fu) << 6) | (p[3] & 0x3Fu);
      if (cp >= 0x10000 && cp <= 0x10FFFF) len = 4;
    }
    if (len == 0) {
      append_u_escape(out, 0xFFFD);
      ++p;
      continue;
    }
    if (cp >= 0x10000) {
      const unsigned v = cp - 0x10000;
      append_u_escape(out, 0xD800 | (v >> 10));
      append_u_escape(out, 0xDC00 | (v & 0x3FF));
    } else {
      append_u_escape(out, cp);
    }
    p += len;
  }
  out.push_back('"');
}

template <typename Int>
inline void append_int(std::string &out, Int v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof buf, v);
  out.append(buf, static_cast<size_t>(r.ptr - buf));
}

inline void append_newline_indent(std::string &out, int indent, int level) {
  out.push_back('\n');
  out.append(static_cast<size_t>(indent) * static_cast<size_t>(level), ' ');
}

void dump_value(std::string &out, const json &v, int indent, int level) {
  switch (v.type()) {
    case json::value_t::null: out.append("null", 4); return;
    case json::value_t::boolean:
      if (*v.get_ptr<const json::boolean_t *>())
        out.append("true", 4);
      else
        out.append("false", 5);
      return;
    case json::value_t::number_integer: append_int(out, *v.get_ptr<const json::number_integer_t *>()); return;
    case json::value_t::number_unsigned: append_int(out, *v.get_ptr<const json::number_unsigned_t *>()); return;
    case json::value_t::number_float: pyjson_real_append(out, *v.get_ptr<const json::number_float_t *>()); return;
    case json::value_t::string: append_string(out, *v.get_ptr<const json::string_t *>()); return;
    case json::value_t::array: {
      const auto &a = *v.get_ptr<const json::array_t *>();
      if (a.empty()) {
        out.append("[]", 2);
        return;
      }
      out.push_back('[');
      bool first = true;
      for (const auto &item : a) {
        pyjson_item_begin(out, indent, level, first);
        first = false;
        dump_value(out, item, indent, level + 1);
      }
      pyjson_container_end(out, ']', indent, level);
      return;
    }
    case json::value_t::object: {
      const auto &o = *v.get_ptr<const json::object_t *>();
      if (o.empty()) {
        out.append("{}", 2);
        return;
      }
      out.push_back('{');
      bool first = true;
      for (const auto &[key, item] : o) {
        pyjson_item_begin(out, indent, level, first);
        first = false;
        append_string(out, key);
        out.append(": ", 2);
        dump_value(out, item, indent, level + 1);
      }
      pyjson_container_end(out, '}', indent, level);
      return;
    }
    case json::value_t::binary: throw usage_error("pyjson_dump: a binary value has no JSON text");
    case json::value_t::discarded:
      throw usage_error("pyjson_dump: a discarded value has no JSON text");
  }
  throw usage_error("pyjson_dump: unknown JSON value type");
}

// ---------------------------------------------------------------------------------------------
// Parser

constexpr int max_depth = 2000;

class parser {
 public:
  parser(std::string_view text, const std::string &source)
      : begin_(text.data()), p_(text.data()), end_(text.data() + text.size()), source_(source) {}

  json parse_document() {
    if (end_ - p_ >= 3 && std::memcmp(p_, "\xEF\xBB\xBF", 3) == 0) p_ += 3;
    skip_ws();
    json v = parse_value(0);
    skip_ws();
    if (p_ != end_) fail(p_, "Extra data");
    return v;
  }

 private:
  const char *begin_;
  const char *p_;
  const char *end_;
  const std::string &source_;
  std::vector<std::pair<std::string, json>> members_;  // shared stack of open objects' members
  std::vector<json> items_;                            // shared stack of open arrays' items

  [[noreturn]] void fail(const char *at, std::string_view reason) const {
    size_t line = 1, column = 1;
    for (const char *q = begin_; q < at; ++q) {
      const auto c = static_cast<unsigned char>(*q);
      if (c == '\n') {
        ++line;
        column = 1;
      } else if (!is_cont(c)) {
        ++column;
      }
    }
    throw usage_error(source_ + ": invalid JSON at line " + std::to_string(line) + " column " +
                      std::to_string(column) + ": " + std::string(reason));
  }

  void skip_ws() {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\n' || *p_ == '\r' || *p_ == '\t')) ++p_;
  }

  bool match(std::string_view word) {
    if (static_cast<size_t>(end_ - p_) >= word.size() && std::memcmp(p_, word.data(), word.size()) == 0) {
      p_ += word.size();
      return true;
    }
    return false;
  }

  json parse_value(int depth) {
    if (p_ == end_) fail(p_, "Expecting value");
    switch (*p_) {
      case '{': return parse_object(depth);
      case '[': return parse_array(depth);
      case '"': {
        std::string s;
        parse_string(s);
        return json(std::move(s));
      }
      case 't':
        if (match("true")) return json(true);
        break;
      case 'f':
        if (match("false")) return json(false);
        break;
      case 'n':
        if (match("null")) return json(nullptr);
        break;
      case 'N':
        if (match("NaN")) return json(std::numeric_limits<double>::quiet_NaN());
        break;
      case 'I':
        if (match("Infinity")) return json(std::numeric_limits<double>::infinity());
        break;
      case '-':
        if (match("-Infinity")) return json(-std::numeric_limits<double>::infinity());
        if (p_ + 1 < end_ && p_[1] >= '0' && p_[1] <= '9') return parse_number();
        break;
      default:
        if (*p_ >= '0' && *p_ <= '9') return parse_number();
        break;
    }
    fail(p_, "Expecting value");
  }

  void enter(int depth) const {
    if (depth >= max_depth) fail(p_, "nesting deeper than " + std::to_string(max_depth) + " levels");
  }

  json parse_object(int depth) {
    enter(depth);
    ++p_;  // '{'
    skip_ws();
    if (p_ < end_ && *p_ == '}') {
      ++p_;
      return json::object();
    }
    const size_t start = members_.size();
    for (;;) {
      if (p_ == end_ || *p_ != '"') fail(p_, "Expecting property name enclosed in double quotes");
      std::string key;
      parse_string(key);
      skip_ws();
      if (p_ == end_ || *p_ != ':') fail(p_, "Expecting ':' delimiter");
      ++p_;
      skip_ws();
      json value = parse_value(depth + 1);
      members_.emplace_back(std::move(key), std::move(value));
      skip_ws();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        skip_ws();
        continue;
      }
      if (p_ < end_ && *p_ == '}') {
        ++p_;
        break;
      }
      fail(p_, "Expecting ',' delimiter");
    }
    json result = json::object();
    auto &map = result.get_ref<json::object_t &>();
    const size_t n = members_.size() - start;
    map.reserve(n);
    if (!has_duplicates(start)) {
      for (size_t i = start; i < members_.size(); ++i)
        map.emplace_back(std::move(members_[i].first), std::move(members_[i].second));
    } else {
      // Python dict semantics: the first occurrence keeps its place, the last value wins.
      std::unordered_map<std::string_view, size_t> index;
      index.reserve(n);
      for (size_t i = start; i < members_.size(); ++i) {
        auto [it, inserted] = index.emplace(members_[i].first, map.size());
        if (inserted)
          map.emplace_back(members_[i].first, std::move(members_[i].second));
        else
          (map.begin() + static_cast<std::ptrdiff_t>(it->second))->second = std::move(members_[i].second);
      }
    }
    members_.resize(start);
    return result;
  }

  bool has_duplicates(size_t start) const {
    const size_t n = members_.size() - start;
    if (n < 2) return false;
    if (n <= 16) {
      for (size_t i = start; i < members_.size(); ++i)
        for (size_t j = i + 1; j < members_.size(); ++j)
          if (members_[i].first == members_[j].first) return true;
      return false;
    }
    std::unordered_set<std::string_view> seen;
    seen.reserve(n);
    for (size_t i = start; i < members_.size(); ++i)
      if (!seen.insert(members_[i].first).second) return true;
    return false;
  }

  json parse_array(int depth) {
    enter(depth);
    ++p_;  // '['
    skip_ws();
    if (p_ < end_ && *p_ == ']') {
      ++p_;
      return json::array();
    }
    const size_t start = items_.size();
    for (;;) {
      json value = parse_value(depth + 1);
      items_.push_back(std::move(value));
      skip_ws();
      if (p_ < end_ && *p_ == ',') {
        ++p_;
        skip_ws();
        continue;
      }
      if (p_ < end_ && *p_ == ']') {
        ++p_;
        break;
      }
      fail(p_, "Expecting ',' delimiter");
    }
    json result = json::array();
    auto &arr = result.get_ref<json::array_t &>();
    arr.reserve(items_.size() - start);
    for (size_t i = start; i < items_.size(); ++i) arr.push_back(std::move(items_[i]));
    items_.resize(start);
    return result;
  }

  int hex4(const char *q) const {
    int v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = q[i];
      v <<= 4;
      if (c >= '0' && c <= '9')
        v |= c - '0';
      else if (c >= 'a' && c <= 'f')
        v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F')
        v |= c - 'A' + 10;
      else
        return -1;
    }
    return v;
  }

  static void append_utf8(std::string &out, unsigned cp) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    } else {
      out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
    }
  }

  // Length of the valid UTF-8 sequence at q (strict: no overlong forms, no surrogates), or 0.
  size_t utf8_length(const char *q) const {
    const auto *u = reinterpret_cast<const unsigned char *>(q);
    const auto left = static_cast<size_t>(end_ - q);
    const unsigned char c = u[0];
    if (c >= 0xC2 && c <= 0xDF) return left >= 2 && is_cont(u[1]) ? 2 : 0;
    if (c >= 0xE0 && c <= 0xEF) {
      if (left < 3 || !is_cont(u[1]) || !is_cont(u[2])) return 0;
      if (c == 0xE0 && u[1] < 0xA0) return 0;   // overlong
      if (c == 0xED && u[1] >= 0xA0) return 0;  // surrogate
      return 3;
    }
    if (c >= 0xF0 && c <= 0xF4) {
      if (left < 4 || !is_cont(u[1]) || !is_cont(u[2]) || !is_cont(u[3])) return 0;
      if (c == 0xF0 && u[1] < 0x90) return 0;  // overlong
      if (c == 0xF4 && u[1] >= 0x90) return 0;  // above U+10FFFF
      return 4;
    }
    return 0;
  }

  void parse_string(std::string &out) {
    const char *open = p_;
    ++p_;  // '"'
    for (;;) {
      const char *run = p_;
      while (p_ < end_ && string_plain[static_cast<unsigned char>(*p_)]) ++p_;
      if (p_ != run) out.append(run, static_cast<size_t>(p_ - run));
      if (p_ == end_) fail(open, "Unterminated string");
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return;
      }
      if (c == '\\') {
        if (end_ - p_ < 2) fail(open, "Unterminated string");
        const char e = p_[1];
        switch (e) {
          case '"': out.push_back('"'); break;
          case '\\': out.push_back('\\'); break;
          case '/': out.push_back('/'); break;
          case 'b': out.push_back('\b'); break;
          case 'f': out.push_back('\f'); break;
          case 'n': out.push_back('\n'); break;
          case 'r': out.push_back('\r'); break;
          case 't': out.push_back('\t'); break;
          case 'u': {
            const int cp = end_ - p_ >= 6 ? hex4(p_ + 2) : -1;
            if (cp < 0) fail(p_ + 1, "Invalid \\uXXXX escape");
            p_ += 6;
            if (cp >= 0xD800 && cp <= 0xDBFF && end_ - p_ >= 6 && p_[0] == '\\' && p_[1] == 'u') {
              const int low = hex4(p_ + 2);
              if (low >= 0xDC00 && low <= 0xDFFF) {
                append_utf8(out, 0x10000 + ((static_cast<unsigned>(cp) - 0xD800) << 10) +
                                     (static_cast<unsigned>(low) - 0xDC00));
                p_ += 6;
                continue;
              }
            }
            append_utf8(out, static_cast<unsigned>(cp));  // lone surrogates become WTF-8
            continue;
          }
          default: fail(p_, "Invalid \\escape");
        }
        p_ += 2;
        continue;
      }
      if (c < 0x20) fail(p_, "Invalid control character in string");
      const size_t len = utf8_length(p_);
      if (len == 0) fail(p_, "invalid UTF-8 byte in string");
      out.append(p_, len);
      p_ += len;
    }
  }

  json parse_number() {
    // Python's grammar: -?(0|[1-9]\d*)(\.\d+)?([eE][-+]?\d+)?
    const char *start = p_;
    const char *q = p_;
    const bool negative = *q == '-';
    if (negative) ++q;
    const char *int_begin = q;
    if (*q == '0') {
      ++q;
    } else {
      while (q < end_ && *q >= '0' && *q <= '9') ++q;
    }
    const char *int_end = q;
    bool is_integer = true;
    if (q + 1 < end_ && *q == '.' && q[1] >= '0' && q[1] <= '9') {
      is_integer = false;
      q += 2;
      while (q < end_ && *q >= '0' && *q <= '9') ++q;
    }
    const char *mantissa_end = q;
    long exp_value = 0;
    if (q < end_ && (*q == 'e' || *q == 'E')) {
      const char *e = q + 1;
      bool exp_negative = false;
      if (e < end_ && (*e == '+' || *e == '-')) exp_negative = *e++ == '-';
      if (e < end_ && *e >= '0' && *e <= '9') {
        is_integer = false;
        while (e < end_ && *e >= '0' && *e <= '9') {
          if (exp_value < 100000) exp_value = exp_value * 10 + (*e - '0');
          ++e;
        }
        if (exp_negative) exp_value = -exp_value;
        q = e;
      }
    }
    p_ = q;
    if (is_integer) {
      if (negative) {
        int64_t v = 0;
        auto r = std::from_chars(start, q, v);
        if (r.ec == std::errc() && r.ptr == q) return json(static_cast<json::number_integer_t>(v));
      } else {
        uint64_t v = 0;
        auto r = std::from_chars(start, q, v);
        if (r.ec == std::errc() && r.ptr == q) return json(static_cast<json::number_unsigned_t>(v));
      }
    }
    double d = 0;
    auto r = std::from_chars(start, q, d);
    if (r.ec == std::errc::result_out_of_range) {
      // Too large or too small for a double: float() gives ±inf or ±0. Estimate the decimal
      // exponent of the leading significant digit to tell which.
      long lead = -1;  // exponent of the first non-zero digit, relative to the decimal point
      bool found = false;
      long pos = static_cast<long>(int_end - int_begin) - 1;
      for (const char *c = int_begin; c < mantissa_end; ++c) {
        if (*c == '.') continue;
        if (*c != '0') {
          lead = pos;
          found = true;
          break;
        }
        --pos;
      }
      const bool overflow = found && lead + exp_value > 0;
      d = overflow ? std::numeric_limits<double>::infinity() : 0.0;
      if (negative) d = -d;
    } else if (r.ec != std::errc() || r.ptr != q) {
      fail(start, "invalid number");
    }
    return json(d);
  }
};

}  // namespace

namespace {

char *py_float_repr_compute(char *out, double d) {
  if (std::isnan(d)) return std::copy_n("nan", 3, out);
  if (std::isinf(d)) return d > 0 ? std::copy_n("inf", 3, out) : std::copy_n("-inf", 4, out);
  // Shortest round-trip digits in scientific form, "[-]d[.ddd]e(+|-)XX[X]" (two exponent digits
  // at least), rearranged the way Python's repr places the point: at most 25 bytes (a sign, 17
  // digits, the point and "e-308"; or "0.000" and 17 digits).
  char sci[40];
  const char *const sci_end = std::to_chars(sci, sci + sizeof sci, d, std::chars_format::scientific).ptr;
  const char *p = sci;
  char *o = out;
  if (*p == '-') *o++ = *p++;
  const char *e = sci_end - 1;
  while (*e != 'e') --e;
  const char lead = *p;
  const char *frac = p[1] == '.' ? p + 2 : p + 1;  // the digits after the first
  const auto frac_len = static_cast<int>(e - frac);
  int exp10 = 0;
  for (const char *q = e + 2; q < sci_end; ++q) exp10 = exp10 * 10 + (*q - '0');
  if (e[1] == '-') exp10 = -exp10;

  if (exp10 < -4 || exp10 >= 16) {
    *o++ = lead;
    if (frac_len > 0) {
      *o++ = '.';
      o = std::copy(frac, e, o);
    }
    o = std::copy(e, sci_end, o);  // "e+16", "e-05", "e+300": as to_chars wrote it
  } else if (exp10 < 0) {  // 0.000ddd: 1 to 4 zeros after the point, then every digit
    *o++ = '0';
    *o++ = '.';
    for (int i = -1; i > exp10; --i) *o++ = '0';
    *o++ = lead;
    o = std::copy(frac, e, o);
  } else {  // exp10 + 1 digits before the point (zeros past the last digit), at least one after
    *o++ = lead;
    const int before = exp10;  // digits of frac before the point
    if (frac_len <= before) {
      o = std::copy(frac, e, o);
      for (int i = frac_len; i < before; ++i) *o++ = '0';
      *o++ = '.';
      *o++ = '0';
    } else {
      o = std::copy(frac, frac + before, o);
      *o++ = '.';
      o = std::copy(frac + before, e, o);
    }
  }
  return o;
}

// The texts of the reals this thread wrote last, by their bits (direct-mapped). A tensor's
// statistics are written twice or more, as one operator's output and the next ones' input: in the
// writer's dump.json of a transformer step, 7 reals of 10 are one of the 16 written before it,
// and finding the digits cost 400 instructions a real against 30 for a copy.
struct float_repr_slot {
  uint64_t bits = 0;
  uint8_t length = 0;  // 0: empty
  char text[py_float_repr_max];
};
thread_local std::array<float_repr_slot, 64> float_repr_slots;

}  // namespace

char *py_float_repr_write(char *out, double d) {
  uint64_t bits;
  std::memcpy(&bits, &d, sizeof bits);
  auto &slot = float_repr_slots[(bits * 0x9E3779B97F4A7C15u) >> 58];
  if (slot.length == 0 || slot.bits != bits) {
    slot.length = static_cast<uint8_t>(py_float_repr_compute(slot.text, d) - slot.text);
    slot.bits = bits;
  }
  std::memcpy(out, slot.text, py_float_repr_max);  // the whole slot: a fixed size copies fastest
  return out + slot.length;
}

void py_float_repr_append(std::string &out, double d) {
  // Built in a local buffer and appended once: a leaf of dump.json has four of these, and growing
  // `out` a character at a time cost as much as finding the digits.
  char text[py_float_repr_max];
  out.append(text, static_cast<size_t>(py_float_repr_write(text, d) - text));
}

std::string py_float_repr(double d) {
  std::string s;
  py_float_repr_append(s, d);
  return s;
}

void pyjson_string_append(std::string &out, std::string_view s) { append_string(out, s); }

void pyjson_item_begin(std::string &out, int indent, int level, bool first) {
  if (indent >= 0) {
    if (!first) out.push_back(',');
    append_newline_indent(out, indent, level + 1);
  } else if (!first) {
    out.append(", ", 2);
  }
}

void pyjson_container_end(std::string &out, char closing_bracket, int indent, int level) {
  if (indent >= 0) append_newline_indent(out, indent, level);
  out.push_back(closing_bracket);
}

void pyjson_int_append(std::string &out, int64_t v) { append_int(out, v); }
void pyjson_uint_append(std::string &out, uint64_t v) { append_int(out, v); }

char *pyjson_real_write(char *out, double d) {
  if (std::isnan(d)) return std::copy_n("NaN", 3, out);
  if (std::isinf(d)) return d > 0 ? std::copy_n("Infinity", 8, out) : std::copy_n("-Infinity", 9, out);
  return py_float_repr_write(out, d);
}

void pyjson_real_append(std::string &out, double d) {
  char text[py_float_repr_max];
  out.append(text, static_cast<size_t>(pyjson_real_write(text, d) - text));
}

void pyjson_dump_append(std::string &out, const nlohmann::ordered_json &v, int indent, int level) {
  dump_value(out, v, indent, level);
}

std::string pyjson_dump(const nlohmann::ordered_json &v, int indent) {
  std::string out;
  dump_value(out, v, indent, 0);
  return out;
}

nlohmann::ordered_json pyjson_parse(std::string_view text, const std::string &source) {
  parser p(text, source);
  return p.parse_document();
}

nlohmann::ordered_json pyjson_load_file(const std::string &path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw system_error_from_errno("open", path, errno);
  std::string text;
  struct stat st {};
  size_t filled = 0;
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
    text.resize(static_cast<size_t>(st.st_size));
  for (;;) {
    if (filled == text.size()) text.resize(text.size() + (1 << 16));  // growing or not regular
    const ssize_t got = ::read(fd, text.data() + filled, text.size() - filled);
    if (got < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      throw system_error_from_errno("read", path, err);
    }
    if (got == 0) break;
    filled += static_cast<size_t>(got);
  }
  text.resize(filled);
  ::close(fd);
  return pyjson_parse(text, path);
}

}  // namespace tprobe
