#include "torch_save.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <limits>
#include <unordered_map>
#include <utility>

#include "errors.h"
#include "safe_path.h"
#include "tensor_stats.h"

namespace tprobe {

namespace {

// --- shared -------------------------------------------------------------------------------------

constexpr uint32_t sig_local = 0x04034b50;
constexpr uint32_t sig_central = 0x02014b50;
constexpr uint32_t sig_end = 0x06054b50;
constexpr uint32_t sig_end64 = 0x06064b50;
constexpr uint32_t sig_locator64 = 0x07064b50;
constexpr uint16_t extra_zip64 = 0x0001;
constexpr uint16_t extra_padding = 0x4246;  // "FB": torch's alignment padding
constexpr uint64_t alignment = 64;          // torch's kFieldAlignment
constexpr uint64_t max32 = 0xFFFFFFFF;

struct storage_entry {
  dtype type;
  std::string_view name;
};

constexpr std::array<storage_entry, 12> storages{{
    {dtype::float64, "DoubleStorage"},
    {dtype::float32, "FloatStorage"},
    {dtype::float16, "HalfStorage"},
    {dtype::bfloat16, "BFloat16Storage"},
    {dtype::int8, "CharStorage"},
    {dtype::int16, "ShortStorage"},
    {dtype::int32, "IntStorage"},
    {dtype::int64, "LongStorage"},
    {dtype::uint8, "ByteStorage"},
    {dtype::boolean, "BoolStorage"},
    {dtype::complex64, "ComplexFloatStorage"},
    {dtype::complex128, "ComplexDoubleStorage"},
}};

[[noreturn]] void bad(const std::string &source, const std::string &what) { throw usage_error(source + ": " + what); }

// The zip members' CRC-32 is the one md5 mode computes (core/tensor_stats.h: ISA-L where built with it).
uint32_t crc_of(std::span<const std::byte> data) { return crc32_bytes(data.data(), data.size()); }

// Checked element count of a shape; throws usage_error naming `source`.
uint64_t element_count_of(std::span<const int64_t> shape, const std::string &source) {
  uint64_t count = 1;
  for (const int64_t d : shape) {
    if (d < 0) bad(source, "negative dimension " + std::to_string(d));
    if (d != 0 && count > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d))
      bad(source, "element count overflows");
    count *= static_cast<uint64_t>(d);
  }
  return count;
}

// --- writer -------------------------------------------------------------------------------------

class le_buffer {
 public:
  void u16(uint16_t v) { put(v, 2); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void bytes(std::string_view s) { out_.append(s); }
  void fill(char c, size_t n) { out_.append(n, c); }
  [[nodiscard]] const std::string &str() const { return out_; }
  [[nodiscard]] size_t size() const { return out_.size(); }

 private:
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xFF));
  }
  std::string out_;
};

// Pickle protocol 2, the opcodes Python's pickler emits for these values.
class pickle_writer {
 public:
  pickle_writer() { op("\x80\x02"); }
  void op(std::string_view o) { out_.bytes(o); }
  void global(std::string_view module, std::string_view name) {
    out_.bytes("c");
    out_.bytes(module);
    out_.bytes("\n");
    out_.bytes(name);
    out_.bytes("\n");
  }
  void str(std::string_view s) {
    out_.bytes("X");
    out_.u32(static_cast<uint32_t>(s.size()));
    out_.bytes(s);
  }
  void integer(int64_t v) {
    if (v >= 0 && v < 256) {
      out_.bytes("K");
      out_.fill(static_cast<char>(v), 1);
    } else if (v >= 0 && v < 65536) {
      out_.bytes("M");
      out_.u16(static_cast<uint16_t>(v));
    } else if (v >= std::numeric_limits<int32_t>::min() && v <= std::numeric_limits<int32_t>::max()) {
      out_.bytes("J");
      out_.u32(static_cast<uint32_t>(static_cast<int32_t>(v)));
    } else {  // LONG1: minimal little-endian two's complement
      std::string digits;
      auto u = static_cast<uint64_t>(v);
      for (int i = 0; i < 8; ++i) digits.push_back(static_cast<char>((u >> (8 * i)) & 0xFF));
      while (digits.size() > 1) {
        const auto last = static_cast<unsigned char>(digits.back());
        const auto prev = static_cast<unsigned char>(digits[digits.size() - 2]);
        if ((last == 0x00 && !(prev & 0x80)) || (last == 0xFF && (prev & 0x80))) digits.pop_back();
        else break;
      }
      out_.bytes("\x8a");
      out_.fill(static_cast<char>(digits.size()), 1);
      out_.bytes(digits);
    }
  }
  void int_tuple(const std::vector<int64_t> &v) {
    if (v.size() > 3) op("(");
    for (const int64_t x : v) integer(x);
    static constexpr std::array<std::string_view, 4> small{")", "\x85", "\x86", "\x87"};
    op(v.size() <= 3 ? small[v.size()] : "t");
  }
  [[nodiscard]] std::string finish() {
    op(".");
    return out_.str();
  }

 private:
  le_buffer out_;
};

std::string tensor_pickle(dtype type, std::span<const int64_t> shape, uint64_t count) {
  // Contiguous strides as torch computes them: a dimension of size 0 counts as 1.
  std::vector<int64_t> size(shape.begin(), shape.end()), stride(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) stride[i - 1] = stride[i] * std::max<int64_t>(shape[i], 1);
  pickle_writer p;
  p.global("torch._utils", "_rebuild_tensor_v2");
  p.op("((");
  p.str("storage");
  p.global("torch", torch_storage_name(type));
  p.str("0");
  p.str("cpu");
  p.integer(static_cast<int64_t>(count));
  p.op("tQ");                 // the persistent id tuple, then BINPERSID
  p.integer(0);               // storage offset
  p.int_tuple(size);
  p.int_tuple(stride);
  p.op("\x89");               // requires_grad False: msprobe saves a detached clone
  p.global("collections", "OrderedDict");
  p.op(")R");                 // backward hooks: OrderedDict()
  p.op("tR");                 // the argument tuple, then REDUCE
  return p.finish();
}

struct written_member {
  std::string name;
  uint32_t crc;
  uint64_t size;
  uint64_t offset;
  bool zip64;
};

class zip_writer {
 public:
  zip_writer(int fd, const std::string &path, bool force_zip64) : fd_(fd), path_(path), force_zip64_(force_zip64) {}

  void add(const std::string &name, std::span<const std::byte> data) {
    const uint64_t size = data.size();
    const bool zip64 = force_zip64_ || size >= max32 || offset_ >= max32;
    le_buffer h;
    h.u32(sig_local);
    h.u16(zip64 ? 45 : 20);  // version needed: 4.5 for zip64
    h.u16(0);                // flags: sizes and CRC are in this header
    h.u16(0);                // stored
    h.u16(0);                // time and date 0, as torch writes them: the file depends on the data only
    h.u16(0);
    const uint32_t crc = crc_of(data);
    h.u32(crc);
    h.u32(zip64 ? static_cast<uint32_t>(max32) : static_cast<uint32_t>(size));
    h.u32(zip64 ? static_cast<uint32_t>(max32) : static_cast<uint32_t>(size));
    h.u16(static_cast<uint16_t>(name.size()));
    const uint64_t fixed = 30 + name.size() + (zip64 ? 20 : 0) + 4;
    const uint64_t pad = (alignment - (offset_ + fixed) % alignment) % alignment;
    h.u16(static_cast<uint16_t>((zip64 ? 20 : 0) + 4 + pad));
    h.bytes(name);
    if (zip64) {
      h.u16(extra_zip64);
      h.u16(16);
      h.u64(size);
      h.u64(size);
    }
    h.u16(extra_padding);
    h.u16(static_cast<uint16_t>(pad));
    h.fill('Z', pad);
    queue(h.str());
    queue(data);
    members_.push_back({name, crc, size, offset_, zip64});
    offset_ += h.size() + size;
  }

  void finish() {
    const uint64_t cd_offset = offset_;
    le_buffer cd;
    for (const auto &m : members_) {
      cd.u32(sig_central);
      cd.u16(45);  // made by: MS-DOS attributes, version 4.5
      cd.u16(m.zip64 ? 45 : 20);
      cd.u16(0);
      cd.u16(0);
      cd.u16(0);
      cd.u16(0);
      cd.u32(m.crc);
      cd.u32(m.zip64 ? static_cast<uint32_t>(max32) : static_cast<uint32_t>(m.size));
      cd.u32(m.zip64 ? static_cast<uint32_t>(max32) : static_cast<uint32_t>(m.size));
      cd.u16(static_cast<uint16_t>(m.name.size()));
      cd.u16(m.zip64 ? 28 : 0);
      cd.u16(0);  // comment
      cd.u16(0);  // disk
      cd.u16(0);  // internal attributes
      cd.u32(0);  // external attributes
      cd.u32(m.zip64 ? static_cast<uint32_t>(max32) : static_cast<uint32_t>(m.offset));
      cd.bytes(m.name);
      if (m.zip64) {
        cd.u16(extra_zip64);
        cd.u16(24);
        cd.u64(m.size);
        cd.u64(m.size);
        cd.u64(m.offset);
      }
    }
    const uint64_t cd_size = cd.size();
    const uint64_t end64_offset = cd_offset + cd_size;
    // The zip64 end record and its locator, always (torch writes them for every archive), then the
    // classic end record, with 0xFFFFFFFF where a value does not fit.
    cd.u32(sig_end64);
    cd.u64(44);
    cd.u16(45);
    cd.u16(45);
    cd.u32(0);
    cd.u32(0);
    cd.u64(members_.size());
    cd.u64(members_.size());
    cd.u64(cd_size);
    cd.u64(cd_offset);
    cd.u32(sig_locator64);
    cd.u32(0);
    cd.u64(end64_offset);
    cd.u32(1);
    cd.u32(sig_end);
    cd.u16(0);
    cd.u16(0);
    cd.u16(static_cast<uint16_t>(members_.size()));
    cd.u16(static_cast<uint16_t>(members_.size()));
    cd.u32(cd_size >= max32 ? static_cast<uint32_t>(max32) : static_cast<uint32_t>(cd_size));
    cd.u32(cd_offset >= max32 ? static_cast<uint32_t>(max32) : static_cast<uint32_t>(cd_offset));
    cd.u16(0);
    queue(cd.str());
    flush();
  }

 private:
  // The whole file goes out in one writev(): a dump has thousands of small tensors, and nine
  // write() calls per file cost more than the data (the headers are kept here, the data is not
  // copied).
  void queue(std::string s) {
    pieces_.push_back(std::move(s));
    queue(std::as_bytes(std::span<const char>(pieces_.back())));
  }
  void queue(std::span<const std::byte> s) {
    if (!s.empty()) iov_.push_back({const_cast<std::byte *>(s.data()), s.size()});
  }
  void flush() {
    size_t first = 0;
    while (first < iov_.size()) {
      const int count = static_cast<int>(std::min<size_t>(iov_.size() - first, IOV_MAX));
      const ssize_t n = ::writev(fd_, iov_.data() + first, count);
      if (n < 0) {
        if (errno == EINTR) continue;
        throw system_error_from_errno("write", path_, errno);
      }
      for (auto left = static_cast<size_t>(n); left > 0 && first < iov_.size();) {
        const size_t take = std::min(left, iov_[first].iov_len);
        iov_[first].iov_base = static_cast<char *>(iov_[first].iov_base) + take;
        iov_[first].iov_len -= take;
        left -= take;
        if (iov_[first].iov_len == 0) ++first;
      }
    }
  }

  int fd_;
  const std::string &path_;
  bool force_zip64_;
  uint64_t offset_ = 0;
  std::vector<written_member> members_;
  std::deque<std::string> pieces_;  // a deque: queued pointers into it stay valid
  std::vector<iovec> iov_;
};

std::span<const std::byte> as_bytes(std::string_view s) { return std::as_bytes(std::span<const char>(s)); }

// --- zip reader ---------------------------------------------------------------------------------

class le_reader {
 public:
  le_reader(std::span<const std::byte> data, uint64_t pos, const std::string &source, const char *what)
      : data_(data), pos_(pos), source_(source), what_(what) {}
  uint16_t u16() { return static_cast<uint16_t>(get(2)); }
  uint32_t u32() { return static_cast<uint32_t>(get(4)); }
  uint64_t u64() { return get(8); }
  std::string_view bytes(uint64_t n) {
    need(n);
    std::string_view s(reinterpret_cast<const char *>(data_.data() + pos_), n);
    pos_ += n;
    return s;
  }
  void skip(uint64_t n) {
    need(n);
    pos_ += n;
  }
  [[nodiscard]] uint64_t pos() const { return pos_; }

 private:
  void need(uint64_t n) const {
    if (pos_ > data_.size() || n > data_.size() - pos_) bad(source_, std::string("truncated ") + what_);
  }
  uint64_t get(int n) {
    need(static_cast<uint64_t>(n));
    uint64_t v = 0;
    for (int i = 0; i < n; ++i) v |= static_cast<uint64_t>(static_cast<uint8_t>(data_[pos_ + i])) << (8 * i);
    pos_ += static_cast<uint64_t>(n);
    return v;
  }

  std::span<const std::byte> data_;
  uint64_t pos_;
  const std::string &source_;
  const char *what_;
};

uint32_t peek_u32(std::span<const std::byte> d, uint64_t pos) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(static_cast<uint8_t>(d[pos + i])) << (8 * i);
  return v;
}

// --- pickle reader ------------------------------------------------------------------------------

struct pvalue;
using pref = std::shared_ptr<const pvalue>;

struct tensor_ref {
  std::string key;  // storage record name under data/
  dtype type = dtype::float32;
  uint64_t storage_numel = 0;
  int64_t offset = 0;
  std::vector<int64_t> size, stride;
  bool requires_grad = false;
};

struct pvalue {
  enum class kind { none, boolean, integer, floating, string, global, tuple, list, dict, storage, tensor } k;
  int64_t i = 0;
  double f = 0;
  std::string s;  // string; global "module.name"
  std::vector<pref> items;
  tensor_ref tensor;  // storage (key, type, storage_numel) and tensor
};

pref make(pvalue::kind k) {
  auto v = std::make_shared<pvalue>();
  v->k = k;
  return v;
}

class unpickler {
 public:
  unpickler(std::string_view text, const std::string &source) : in_(text), source_(source) {}

  tensor_ref run() {
    while (pos_ < in_.size()) {
      const auto op = static_cast<unsigned char>(in_[pos_++]);
      switch (op) {
        case 0x80: take(1); break;  // PROTO
        case 0x95: take(8); break;  // FRAME (protocol 4): the frames are contiguous here
        case '.': return result();
        case 'c': {  // GLOBAL
          std::string module(line()), name(line());
          push_global(module + "." + name);
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          const pref name = pop(), module = pop();
          if (name->k != pvalue::kind::string || module->k != pvalue::kind::string) fail("STACK_GLOBAL of non-strings");
          push_global(module->s + "." + name->s);
          break;
        }
        case 'X': push_string(take(le(4))); break;      // BINUNICODE
        case 0x8c: push_string(take(le(1))); break;     // SHORT_BINUNICODE
        case 0x8d: push_string(take(le(8))); break;     // BINUNICODE8
        case 'K': push_int(static_cast<int64_t>(le(1))); break;
        case 'M': push_int(static_cast<int64_t>(le(2))); break;
        case 'J': push_int(static_cast<int32_t>(static_cast<uint32_t>(le(4)))); break;
        case 0x8a: push_int(long1()); break;
        case 'G': {  // BINFLOAT, big-endian
          uint64_t bits = 0;
          for (const char c : take(8)) bits = (bits << 8) | static_cast<uint8_t>(c);
          auto v = std::make_shared<pvalue>();
          v->k = pvalue::kind::floating;
          std::memcpy(&v->f, &bits, 8);
          push(v);
          break;
        }
        case 'N': push(make(pvalue::kind::none)); break;
        case 0x88: push_bool(true); break;
        case 0x89: push_bool(false); break;
        case '(': marks_.push_back(stack_.size()); break;
        case ')': push(make(pvalue::kind::tuple)); break;
        case 't': push_tuple(pop_mark()); break;
        case 0x85: push_tuple(pop_n(1)); break;
        case 0x86: push_tuple(pop_n(2)); break;
        case 0x87: push_tuple(pop_n(3)); break;
        case '}': push(make(pvalue::kind::dict)); break;
        case ']': push(make(pvalue::kind::list)); break;
        // SETITEM(S), APPEND(S): the contents of hooks and metadata are not needed, only checked.
        case 's': (void)pop_n(2); dict_top(); break;
        case 'u': (void)pop_mark(); dict_top(); break;
        case 'a': (void)pop_n(1); list_top(); break;
        case 'e': (void)pop_mark(); list_top(); break;
        case 'q': memo_[le(1)] = top(); break;  // BINPUT
        case 'r': memo_[le(4)] = top(); break;  // LONG_BINPUT
        case 0x94: memo_[memo_.size()] = top(); break;  // MEMOIZE
        case 'h': push(memo(le(1))); break;
        case 'j': push(memo(le(4))); break;
        case 'Q': persistent_load(); break;  // BINPERSID
        case 'R': reduce(); break;
        default: fail("unsupported pickle opcode 0x" + hex(op));
      }
    }
    fail("no STOP opcode");
  }

 private:
  static constexpr size_t max_stack = 1 << 16;

  [[noreturn]] void fail(const std::string &what) const {
    bad(source_, "data.pkl at byte " + std::to_string(pos_) + ": " + what);
  }
  static std::string hex(unsigned v) {
    static const char digits[] = "0123456789abcdef";
    return {digits[(v >> 4) & 15], digits[v & 15]};
  }
  std::string_view take(uint64_t n) {
    if (n > in_.size() - pos_) fail("truncated");
    const std::string_view s = in_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  uint64_t le(int n) {
    const std::string_view b = take(static_cast<uint64_t>(n));
    uint64_t v = 0;
    for (int i = n; i-- > 0;) v = (v << 8) | static_cast<uint8_t>(b[i]);
    return v;
  }
  int64_t long1() {
    const std::string_view b = take(le(1));
    if (b.size() > 8) fail("integer wider than 64 bits");
    if (b.empty()) return 0;
    uint64_t v = 0;
    for (size_t i = b.size(); i-- > 0;) v = (v << 8) | static_cast<uint8_t>(b[i]);
    if (b.size() < 8 && (static_cast<uint8_t>(b.back()) & 0x80)) v |= ~uint64_t{0} << (8 * b.size());
    return static_cast<int64_t>(v);
  }
  std::string_view line() {
    const size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos) fail("truncated GLOBAL");
    const std::string_view s = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }

  void push(pref v) {
    if (stack_.size() >= max_stack) fail("stack too deep");
    stack_.push_back(std::move(v));
  }
  void push_int(int64_t i) {
    auto v = std::make_shared<pvalue>();
    v->k = pvalue::kind::integer;
    v->i = i;
    push(v);
  }
  void push_bool(bool b) {
    auto v = std::make_shared<pvalue>();
    v->k = pvalue::kind::boolean;
    v->i = b;
    push(v);
  }
  void push_string(std::string_view s) {
    auto v = std::make_shared<pvalue>();
    v->k = pvalue::kind::string;
    v->s = s;
    push(v);
  }
  void push_global(std::string name) {
    auto v = std::make_shared<pvalue>();
    v->k = pvalue::kind::global;
    v->s = std::move(name);
    push(v);
  }
  void push_tuple(std::vector<pref> items) {
    auto v = std::make_shared<pvalue>();
    v->k = pvalue::kind::tuple;
    v->items = std::move(items);
    push(v);
  }
  const pref &top() const {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) fail("empty stack");
    return stack_.back();
  }
  pref pop() {
    const pref v = top();
    stack_.pop_back();
    return v;
  }
  std::vector<pref> pop_n(size_t n) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n) fail("stack underflow");
    std::vector<pref> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return items;
  }
  std::vector<pref> pop_mark() {
    if (marks_.empty()) fail("no MARK");
    const size_t at = marks_.back();
    marks_.pop_back();
    std::vector<pref> items(stack_.begin() + static_cast<std::ptrdiff_t>(at), stack_.end());
    stack_.resize(at);
    return items;
  }
  void dict_top() const {
    if (top()->k != pvalue::kind::dict) fail("SETITEM on a non-dict");
  }
  void list_top() const {
    if (top()->k != pvalue::kind::list) fail("APPEND on a non-list");
  }
  pref memo(uint64_t key) const {
    const auto it = memo_.find(key);
    if (it == memo_.end()) fail("memo key " + std::to_string(key) + " not defined");
    return it->second;
  }

  // ("storage", torch.<T>Storage, key, location, numel)
  void persistent_load() {
    const pref pid = pop();
    const auto &a = pid->items;
    if (pid->k != pvalue::kind::tuple || a.size() != 5 || a[0]->k != pvalue::kind::string || a[0]->s != "storage")
      fail("persistent id is not a (\"storage\", type, key, location, numel) tuple");
    if (a[1]->k != pvalue::kind::global || a[2]->k != pvalue::kind::string || a[4]->k != pvalue::kind::integer ||
        a[4]->i < 0)
      fail("malformed storage persistent id");
    const std::string &type = a[1]->s;
    const auto it = std::find_if(storages.begin(), storages.end(),
                                 [&](const storage_entry &e) { return type == "torch." + std::string(e.name); });
    if (it == storages.end()) fail("storage type " + type + " is not one tprobe reads");
    auto v = std::make_shared<pvalue>();
    v->k = pvalue::kind::storage;
    v->tensor.key = a[2]->s;
    v->tensor.type = it->type;
    v->tensor.storage_numel = static_cast<uint64_t>(a[4]->i);
    push(v);
  }

  static bool is_int(const pref &v) { return v->k == pvalue::kind::integer; }
  std::vector<int64_t> ints(const pref &v, const char *what) const {
    if (v->k != pvalue::kind::tuple) fail(std::string(what) + " is not a tuple");
    std::vector<int64_t> out;
    for (const auto &e : v->items) {
      if (!is_int(e)) fail(std::string(what) + " holds a non-integer");
      out.push_back(e->i);
    }
    return out;
  }

  void reduce() {
    const pref args = pop(), callable = pop();
    if (callable->k != pvalue::kind::global) fail("REDUCE of a non-global");
    if (args->k != pvalue::kind::tuple) fail("REDUCE arguments are not a tuple");
    const auto &a = args->items;
    const std::string &name = callable->s;
    auto v = std::make_shared<pvalue>();
    if (name == "collections.OrderedDict") {
      v->k = pvalue::kind::dict;
    } else if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
      // (storage, storage_offset, size, stride[, requires_grad, backward_hooks[, metadata]])
      const bool v2 = name.ends_with("_v2");
      if (a.size() < 4 || (v2 && (a.size() < 6 || a.size() > 7)) || (!v2 && a.size() != 4))
        fail(name + " with " + std::to_string(a.size()) + " arguments");
      if (a[0]->k != pvalue::kind::storage || !is_int(a[1])) fail(name + ": malformed storage or offset");
      v->k = pvalue::kind::tensor;
      v->tensor = a[0]->tensor;
      v->tensor.offset = a[1]->i;
      v->tensor.size = ints(a[2], "size");
      v->tensor.stride = ints(a[3], "stride");
      if (v2) {
        if (a[4]->k != pvalue::kind::boolean) fail("requires_grad is not a bool");
        v->tensor.requires_grad = a[4]->i != 0;
      }
    } else if (name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state") {
      // (tensor, requires_grad, backward_hooks[, state]): an nn.Parameter is read as its tensor.
      if (a.size() < 3 || a[0]->k != pvalue::kind::tensor || a[1]->k != pvalue::kind::boolean)
        fail(name + ": malformed arguments");
      v->k = pvalue::kind::tensor;
      v->tensor = a[0]->tensor;
      v->tensor.requires_grad = a[1]->i != 0;
    } else {
      fail("calls " + name + ": not a plain tensor (only torch.save of one tensor is read)");
    }
    push(v);
  }

  tensor_ref result() {
    const pref v = pop();
    if (v->k != pvalue::kind::tensor) fail("the saved object is not a tensor");
    return v->tensor;
  }

  std::string_view in_;
  size_t pos_ = 0;
  const std::string &source_;
  std::vector<pref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, pref> memo_;
};

}  // namespace

// --- public -------------------------------------------------------------------------------------

std::string_view torch_storage_name(dtype type) {
  for (const auto &e : storages)
    if (e.type == type) return e.name;
  throw usage_error("dtype " + std::string(dtype_name(type)) + " has no torch storage");
}

namespace {

// Checks the data against the shape and returns the archive's pickle.
std::string torch_save_pickle(const std::string &path, dtype type, std::span<const int64_t> shape,
                              std::span<const std::byte> data) {
  const uint64_t count = element_count_of(shape, path);
  const size_t itemsize = dtype_size(type);
  if (count > std::numeric_limits<uint64_t>::max() / itemsize) bad(path, "byte count overflows");
  if (data.size() != count * itemsize)
    bad(path, std::to_string(data.size()) + " data bytes given for a " + std::string(dtype_name(type)) +
                  " tensor of " + std::to_string(count) + " elements, expected " + std::to_string(count * itemsize));
  return tensor_pickle(type, shape, count);
}

// Writes the archive through `fd` and closes it; `remove` unlinks the partly written file on any
// failure.
template <typename Remove>
void torch_save_write_and_close(int fd, const std::string &path, const std::string &pickle,
                                std::span<const std::byte> data, const torch_save_options &options, Remove &&remove) {
  // torch names the archive after the file: "a/b/x.y.pt" → "x.y".
  const std::string stem = std::filesystem::path(path).stem().string();
  try {
    zip_writer zip(fd, path, options.force_zip64);
    zip.add(stem + "/data.pkl", as_bytes(pickle));
    zip.add(stem + "/byteorder", as_bytes("little"));
    zip.add(stem + "/data/0", data);
    zip.add(stem + "/version", as_bytes("3\n"));
    zip.finish();
  } catch (...) {
    ::close(fd);
    remove();
    throw;
  }
  if (::close(fd) != 0) {
    const int err = errno;
    remove();
    throw system_error_from_errno("write", path, err);
  }
}

}  // namespace

void torch_save_write(const std::string &path, dtype type, std::span<const int64_t> shape,
                      std::span<const std::byte> data, mode_t mode, const torch_save_options &options) {
  const std::string pickle = torch_save_pickle(path, type, shape, data);
  torch_save_write_and_close(safe_open_for_write(path, mode), path, pickle, data, options,
                             [&] { ::unlink(path.c_str()); });
}

void torch_save_write(const safe_dir &dir, const std::string &name, dtype type, std::span<const int64_t> shape,
                      std::span<const std::byte> data, mode_t mode, const torch_save_options &options) {
  const std::string path = dir.file_path(name);
  const std::string pickle = torch_save_pickle(path, type, shape, data);
  torch_save_write_and_close(dir.open_for_write(name, mode), path, pickle, data, options, [&] { dir.remove(name); });
}

std::vector<zip_member> zip_members(std::span<const std::byte> file, const std::string &source) {
  // The end record is in the last 22 + 65535 bytes (its comment is at most 65535 long).
  if (file.size() < 22) bad(source, "not a zip archive (too short; torch.save's legacy format is not read)");
  uint64_t end = file.size() - 22;
  const uint64_t lowest = file.size() > 22 + 65535 ? file.size() - 22 - 65535 : 0;
  while (peek_u32(file, end) != sig_end) {
    if (end == lowest) bad(source, "not a zip archive (no end of central directory; torch.save's legacy format is not read)");
    --end;
  }
  le_reader e(file, end + 4, source, "end of central directory");
  e.skip(4);
  uint64_t entries = e.u16();
  e.skip(2);
  uint64_t cd_size = e.u32(), cd_offset = e.u32();
  if (end >= 20 && peek_u32(file, end - 20) == sig_locator64) {
    le_reader loc(file, end - 20 + 8, source, "zip64 locator");
    const uint64_t end64 = loc.u64();
    if (file.size() < 56 || end64 > file.size() - 56 || peek_u32(file, end64) != sig_end64)
      bad(source, "bad zip64 end of central directory");
    le_reader z(file, end64 + 4 + 8 + 4 + 8, source, "zip64 end of central directory");
    z.skip(8);
    entries = z.u64();
    cd_size = z.u64();
    cd_offset = z.u64();
  }
  if (cd_offset > file.size() || cd_size > file.size() - cd_offset) bad(source, "central directory outside the file");
  if (entries > cd_size / 46) bad(source, "central directory too small for its entry count");
  std::vector<zip_member> members;
  le_reader c(file, cd_offset, source, "central directory");
  for (uint64_t n = 0; n < entries; ++n) {
    if (c.u32() != sig_central) bad(source, "bad central directory entry " + std::to_string(n));
    zip_member m;
    c.skip(4);
    const uint16_t flags = c.u16();
    m.method = c.u16();
    c.skip(4);
    m.crc32 = c.u32();
    m.compressed_size = c.u32();
    m.size = c.u32();
    const uint16_t name_len = c.u16(), extra_len = c.u16(), comment_len = c.u16();
    c.skip(8);
    m.header_offset = c.u32();
    m.name = c.bytes(name_len);
    le_reader x(file, c.pos(), source, "zip extra field");
    c.skip(extra_len);
    while (x.pos() + 4 <= c.pos()) {
      const uint16_t id = x.u16(), len = x.u16();
      if (x.pos() + len > c.pos()) bad(source, m.name + ": extra field overruns its entry");
      if (id == extra_zip64) {
        // Only the fields whose 32-bit value is 0xFFFFFFFF are present, in this order.
        le_reader z(file, x.pos(), source, "zip64 extra field");
        const uint64_t stop = x.pos() + len;
        auto field = [&](uint64_t &v) {
          if (v != max32) return;
          if (z.pos() + 8 > stop) bad(source, m.name + ": short zip64 extra field");
          v = z.u64();
        };
        field(m.size);
        field(m.compressed_size);
        field(m.header_offset);
        m.zip64 = true;
      }
      x.skip(len);
    }
    c.skip(comment_len);
    if (flags & 1) bad(source, m.name + ": encrypted");
    // The local header: its own name and extra lengths decide where the data starts.
    le_reader l(file, m.header_offset, source, "local header");
    if (l.u32() != sig_local) bad(source, m.name + ": bad local header");
    l.skip(22);
    const uint16_t local_name = l.u16(), local_extra = l.u16();
    if (l.bytes(local_name) != m.name) bad(source, m.name + ": its local header names another member");
    l.skip(local_extra);
    m.data_offset = l.pos();
    if (m.compressed_size > file.size() - m.data_offset) bad(source, m.name + ": data runs past the end of the file");
    members.push_back(std::move(m));
  }
  return members;
}

torch_save_tensor::torch_save_tensor(const std::string &path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw system_error_from_errno("open", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw system_error_from_errno("stat", path, err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    bad(path, "not a regular file");
  }
  if (st.st_size == 0) {
    ::close(fd);
    bad(path, "empty file");
  }
  map_size_ = static_cast<size_t>(st.st_size);
  map_ = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw system_error_from_errno("map", path, err);
  }
  try {
    const std::span<const std::byte> file(static_cast<const std::byte *>(map_), map_size_);
    const auto members = zip_members(file, path);
    if (members.empty()) bad(path, "empty zip archive");
    archive_ = members.front().name.substr(0, members.front().name.find('/'));
    auto member = [&](const std::string &name) -> std::span<const std::byte> {
      const std::string full = archive_ + "/" + name;
      for (const auto &m : members) {
        if (m.name != full) continue;
        if (m.method != 0) bad(path, full + ": compressed (method " + std::to_string(m.method) + "); torch stores members");
        if (m.size != m.compressed_size) bad(path, full + ": stored member with two sizes");
        const auto bytes = file.subspan(m.data_offset, m.size);
        if (crc_of(bytes) != m.crc32) bad(path, full + ": CRC-32 mismatch (the file is damaged)");
        return bytes;
      }
      bad(path, "no member " + full);
    };
    const auto pickle = member("data.pkl");
    const tensor_ref t = unpickler(std::string_view(reinterpret_cast<const char *>(pickle.data()), pickle.size()), path).run();
    type_ = t.type;
    shape_ = t.size;
    requires_grad_ = t.requires_grad;
    if (t.size.size() != t.stride.size()) bad(path, "size and stride have different lengths");
    const uint64_t count = element_count_of(t.size, path);
    const size_t itemsize = dtype_size(t.type);
    const auto storage = member("data/" + t.key);
    if (t.storage_numel > storage.size() / itemsize)
      bad(path, "storage " + t.key + " holds " + std::to_string(storage.size()) + " bytes, fewer than its " +
                    std::to_string(t.storage_numel) + " elements");
    if (count == 0) {
      data_ = {};
    } else {
      // The highest element index the view touches must lie inside the storage.
      if (t.offset < 0) bad(path, "negative storage offset");
      uint64_t last = static_cast<uint64_t>(t.offset);
      bool contiguous = true;
      uint64_t expected = 1;
      for (size_t i = t.size.size(); i-- > 0;) {
        if (t.stride[i] < 0) bad(path, "negative stride");
        const auto size = static_cast<uint64_t>(t.size[i]), stride = static_cast<uint64_t>(t.stride[i]);
        if (stride != 0 && size - 1 > (std::numeric_limits<uint64_t>::max() - last) / stride)
          bad(path, "view overflows");
        last += (size - 1) * stride;
        if (size != 1 && stride != expected) contiguous = false;
        expected *= size;
      }
      if (last >= t.storage_numel) bad(path, "the tensor's view runs past its storage");
      if (contiguous) {
        data_ = storage.subspan(static_cast<size_t>(t.offset) * itemsize, count * itemsize);
      } else {
        copy_.resize(count * itemsize);
        std::vector<int64_t> index(t.size.size(), 0);
        for (uint64_t n = 0; n < count; ++n) {
          uint64_t at = static_cast<uint64_t>(t.offset);
          for (size_t k = 0; k < index.size(); ++k) at += static_cast<uint64_t>(index[k] * t.stride[k]);
          std::memcpy(copy_.data() + n * itemsize, storage.data() + at * itemsize, itemsize);
          for (size_t k = index.size(); k-- > 0;) {  // next C-order index
            if (++index[k] < t.size[k]) break;
            index[k] = 0;
          }
        }
        data_ = copy_;
      }
    }
  } catch (...) {
    unmap();
    throw;
  }
}

size_t torch_save_tensor::element_count() const {
  size_t n = 1;
  for (const int64_t d : shape_) n *= static_cast<size_t>(d);
  return n;
}

torch_save_tensor::~torch_save_tensor() { unmap(); }

void torch_save_tensor::unmap() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
  if (copy_.empty()) data_ = {};
}

torch_save_tensor::torch_save_tensor(torch_save_tensor &&other) noexcept
    : type_(other.type_),
      shape_(std::move(other.shape_)),
      requires_grad_(other.requires_grad_),
      archive_(std::move(other.archive_)),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      copy_(std::move(other.copy_)),
      data_(std::exchange(other.data_, {})) {
  // A moved vector keeps its buffer, so a span into the copy stays valid.
}

torch_save_tensor &torch_save_tensor::operator=(torch_save_tensor &&other) noexcept {
  if (this != &other) {
    unmap();
    type_ = other.type_;
    shape_ = std::move(other.shape_);
    requires_grad_ = other.requires_grad_;
    archive_ = std::move(other.archive_);
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    copy_ = std::move(other.copy_);
    data_ = std::exchange(other.data_, {});
  }
  return *this;
}

}  // namespace tprobe
