#include "torch_checkpoint.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <limits>

#include "errors.h"
#include "half_float.h"
#include "tensor_stats.h"
#include "torch_save.h"

namespace tprobe {

namespace {

[[noreturn]] void bad(const std::string &source, const std::string &what) { throw usage_error(source + ": " + what); }

constexpr std::array<dtype, 12> storage_types{dtype::float64, dtype::float32, dtype::float16, dtype::bfloat16,
                                              dtype::int8,    dtype::int16,   dtype::int32,   dtype::int64,
                                              dtype::uint8,   dtype::boolean, dtype::complex64, dtype::complex128};

pickle_ref make(pickle_value::kind k) {
  auto v = std::make_shared<pickle_value>();
  v->k = k;
  return v;
}

// The index key of a hashable simple dict key ("" = not indexed: compared by identity only).
std::string key_of(const pickle_value &k) {
  switch (k.k) {
    case pickle_value::kind::string: return "s" + k.s;
    case pickle_value::kind::integer:
    case pickle_value::kind::boolean: return "i" + std::to_string(k.i);  // True == 1 in Python too
    case pickle_value::kind::none: return "n";
    default: return {};
  }
}

void dict_set(pickle_value &d, pickle_ref key, pickle_ref value) {
  const std::string k = key_of(*key);
  if (!k.empty()) {
    const auto [it, inserted] = d.index.emplace(k, d.entries.size());
    if (!inserted) {  // a repeated key keeps its place and takes the new value, as in a dict
      d.entries[it->second].second = std::move(value);
      return;
    }
  }
  d.entries.emplace_back(std::move(key), std::move(value));
}

class vm {
 public:
  vm(std::string_view text, const std::string &source, std::vector<ckpt_tensor> *tensors)
      : in_(text), source_(source), tensors_(tensors) {}

  pickle_ref run() {
    while (pos_ < in_.size()) {
      const auto op = static_cast<unsigned char>(in_[pos_++]);
      switch (op) {
        case 0x80: take(1); break;  // PROTO
        case 0x95: take(8); break;  // FRAME: frames are contiguous in memory
        case '.': return stop();
        case '(': marks_.push_back(stack_.size()); break;
        case '0': (void)pop(); break;       // POP
        case '1': (void)pop_mark(); break;  // POP_MARK
        case '2': push(top()); break;       // DUP
        case 'c': {                         // GLOBAL
          std::string module(line()), name(line());
          push_global(module + "." + name);
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          const pickle_ref name = pop(), module = pop();
          if (name->k != pickle_value::kind::string || module->k != pickle_value::kind::string)
            fail("STACK_GLOBAL of non-strings");
          push_global(module->s + "." + name->s);
          break;
        }
        case 'X': push_text(pickle_value::kind::string, take(le(4))); break;   // BINUNICODE
        case 0x8c: push_text(pickle_value::kind::string, take(le(1))); break;  // SHORT_BINUNICODE
        case 0x8d: push_text(pickle_value::kind::string, take(le(8))); break;  // BINUNICODE8
        case 'T': push_text(pickle_value::kind::bytes, take(le(4))); break;    // BINSTRING
        case 'U': push_text(pickle_value::kind::bytes, take(le(1))); break;    // SHORT_BINSTRING
        case 'B': push_text(pickle_value::kind::bytes, take(le(4))); break;    // BINBYTES
        case 'C': push_text(pickle_value::kind::bytes, take(le(1))); break;    // SHORT_BINBYTES
        case 0x8e: push_text(pickle_value::kind::bytes, take(le(8))); break;   // BINBYTES8
        case 0x96: push_text(pickle_value::kind::bytes, take(le(8))); break;   // BYTEARRAY8
        case 'K': push_int(static_cast<int64_t>(le(1))); break;
        case 'M': push_int(static_cast<int64_t>(le(2))); break;
        case 'J': push_int(static_cast<int32_t>(static_cast<uint32_t>(le(4)))); break;
        case 0x8a: push_long(take(le(1))); break;  // LONG1
        case 0x8b: push_long(take(le(4))); break;  // LONG4
        case 'I': text_int(); break;               // INT (protocol 0; "00"/"01" are False/True)
        case 'L': text_int(); break;               // LONG (protocol 0)
        case 'F': {                                // FLOAT (protocol 0)
          const std::string s(line());
          auto v = make(pickle_value::kind::floating);
          char *end = nullptr;
          v->f = std::strtod(s.c_str(), &end);
          if (end == s.c_str()) fail("bad FLOAT");
          push(v);
          break;
        }
        case 'G': {  // BINFLOAT, big-endian
          uint64_t bits = 0;
          for (const char c : take(8)) bits = (bits << 8) | static_cast<uint8_t>(c);
          auto v = make(pickle_value::kind::floating);
          std::memcpy(&v->f, &bits, 8);
          push(v);
          break;
        }
        case 'N': push(make(pickle_value::kind::none)); break;
        case 0x88: push_bool(true); break;
        case 0x89: push_bool(false); break;
        case ')': push(make(pickle_value::kind::tuple)); break;
        case 't': push_seq(pickle_value::kind::tuple, pop_mark()); break;
        case 0x85: push_seq(pickle_value::kind::tuple, pop_n(1)); break;
        case 0x86: push_seq(pickle_value::kind::tuple, pop_n(2)); break;
        case 0x87: push_seq(pickle_value::kind::tuple, pop_n(3)); break;
        case ']': push(make(pickle_value::kind::list)); break;
        case 'l': push_seq(pickle_value::kind::list, pop_mark()); break;  // LIST
        case '}': push(make(pickle_value::kind::dict)); break;
        case 'd': {  // DICT
          const auto items = pop_mark();
          if (items.size() % 2) fail("DICT of an odd number of items");
          auto d = make(pickle_value::kind::dict);
          for (size_t n = 0; n < items.size(); n += 2) dict_set(*d, items[n], items[n + 1]);
          push(d);
          break;
        }
        case 0x8f: push(make(pickle_value::kind::set)); break;  // EMPTY_SET
        case 0x91: push_seq(pickle_value::kind::set, pop_mark()); break;  // FROZENSET
        case 0x90: {  // ADDITEMS
          auto items = pop_mark();
          container(pickle_value::kind::set, "ADDITEMS").items.insert(top()->items.end(), items.begin(), items.end());
          break;
        }
        case 'a': {  // APPEND
          auto v = pop();
          container(pickle_value::kind::list, "APPEND").items.push_back(std::move(v));
          break;
        }
        case 'e': {  // APPENDS
          auto items = pop_mark();
          auto &list = container(pickle_value::kind::list, "APPENDS").items;
          list.insert(list.end(), items.begin(), items.end());
          break;
        }
        case 's': {  // SETITEM
          auto value = pop(), key = pop();
          dict_set(container(pickle_value::kind::dict, "SETITEM"), std::move(key), std::move(value));
          break;
        }
        case 'u': {  // SETITEMS
          auto items = pop_mark();
          if (items.size() % 2) fail("SETITEMS of an odd number of items");
          auto &d = container(pickle_value::kind::dict, "SETITEMS");
          for (size_t n = 0; n < items.size(); n += 2) dict_set(d, items[n], items[n + 1]);
          break;
        }
        case 'q': memo_[le(1)] = top(); break;  // BINPUT
        case 'r': memo_[le(4)] = top(); break;  // LONG_BINPUT
        case 'p': memo_[decimal()] = top(); break;  // PUT
        case 0x94: memo_[memo_.size()] = top(); break;  // MEMOIZE
        case 'h': push(memo(le(1))); break;
        case 'j': push(memo(le(4))); break;
        case 'g': push(memo(decimal())); break;  // GET
        case 'Q': persistent_load(); break;      // BINPERSID
        case 'R': {                              // REDUCE
          const pickle_ref args = pop(), callable = pop();
          push(reduce(callable, args));
          break;
        }
        case 0x81: {  // NEWOBJ: cls.__new__(cls, *args), never run
          const pickle_ref args = pop(), cls = pop();
          push(opaque(*cls, args));
          break;
        }
        case 0x92: {  // NEWOBJ_EX
          (void)pop();  // kwargs
          const pickle_ref args = pop(), cls = pop();
          push(opaque(*cls, args));
          break;
        }
        case 'b': {  // BUILD: the state is kept on an opaque object, never applied
          pickle_ref state = pop();
          const pickle_ref &target = top();
          if (target->k == pickle_value::kind::opaque) target->state = std::move(state);
          break;
        }
        default: fail("unsupported pickle opcode 0x" + hex(op));
      }
    }
    fail("truncated (no STOP opcode)");
  }

 private:
  static constexpr size_t max_stack = 1 << 20;

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
  std::string_view line() {
    const size_t end = in_.find('\n', pos_);
    if (end == std::string_view::npos) fail("truncated line");
    const std::string_view s = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return s;
  }
  uint64_t decimal() {
    const std::string s(line());
    char *end = nullptr;
    const unsigned long long v = std::strtoull(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0') fail("bad memo index \"" + s + "\"");
    return v;
  }
  void text_int() {
    std::string s(line());
    if (s == "00" || s == "01") return push_bool(s == "01");
    if (!s.empty() && s.back() == 'L') s.pop_back();
    errno = 0;
    char *end = nullptr;
    const long long v = std::strtoll(s.c_str(), &end, 10);
    if (s.empty() || *end != '\0') fail("bad INT \"" + s + "\"");
    if (errno == ERANGE) return push(opaque_named("int"));  // wider than 64 bits: a value tprobe does not use
    push_int(v);
  }

  void push(pickle_ref v) {
    if (stack_.size() >= max_stack) fail("stack too deep");
    stack_.push_back(std::move(v));
  }
  void push_int(int64_t i) {
    auto v = make(pickle_value::kind::integer);
    v->i = i;
    push(std::move(v));
  }
  void push_long(std::string_view b) {
    if (b.size() > 8) return push(opaque_named("int"));  // wider than 64 bits
    uint64_t v = 0;
    for (size_t i = b.size(); i-- > 0;) v = (v << 8) | static_cast<uint8_t>(b[i]);
    if (!b.empty() && b.size() < 8 && (static_cast<uint8_t>(b.back()) & 0x80)) v |= ~uint64_t{0} << (8 * b.size());
    push_int(static_cast<int64_t>(v));
  }
  void push_bool(bool b) {
    auto v = make(pickle_value::kind::boolean);
    v->i = b;
    push(std::move(v));
  }
  void push_text(pickle_value::kind k, std::string_view s) {
    auto v = make(k);
    v->s = s;
    push(std::move(v));
  }
  void push_global(std::string name) {
    auto v = make(pickle_value::kind::global);
    v->s = std::move(name);
    push(std::move(v));
  }
  void push_seq(pickle_value::kind k, std::vector<pickle_ref> items) {
    auto v = make(k);
    v->items = std::move(items);
    push(std::move(v));
  }
  const pickle_ref &top() const {
    if (stack_.empty() || (!marks_.empty() && marks_.back() == stack_.size())) fail("empty stack");
    return stack_.back();
  }
  pickle_ref pop() {
    pickle_ref v = top();
    stack_.pop_back();
    return v;
  }
  std::vector<pickle_ref> pop_n(size_t n) {
    const size_t floor = marks_.empty() ? 0 : marks_.back();
    if (stack_.size() < floor + n) fail("stack underflow");
    std::vector<pickle_ref> items(stack_.end() - static_cast<std::ptrdiff_t>(n), stack_.end());
    stack_.resize(stack_.size() - n);
    return items;
  }
  std::vector<pickle_ref> pop_mark() {
    if (marks_.empty()) fail("no MARK");
    const size_t at = marks_.back();
    marks_.pop_back();
    std::vector<pickle_ref> items(stack_.begin() + static_cast<std::ptrdiff_t>(at), stack_.end());
    stack_.resize(at);
    return items;
  }
  pickle_value &container(pickle_value::kind k, const char *op) const {
    const pickle_ref &t = top();
    if (t->k != k) fail(std::string(op) + " on a value of another kind");
    return *t;
  }
  pickle_ref memo(uint64_t key) const {
    const auto it = memo_.find(key);
    if (it == memo_.end()) fail("memo key " + std::to_string(key) + " not defined");
    return it->second;
  }

  static pickle_ref opaque_named(std::string name) {
    auto v = make(pickle_value::kind::opaque);
    v->s = std::move(name);
    return v;
  }
  // An object whose constructor is not run: its class (or callable) and arguments, kept as data.
  static pickle_ref opaque(const pickle_value &callable, const pickle_ref &args) {
    auto v = opaque_named(callable.k == pickle_value::kind::global || callable.k == pickle_value::kind::opaque
                              ? callable.s
                              : "?");
    if (args->k == pickle_value::kind::tuple) v->items = args->items;
    return v;
  }

  // ("storage", torch.<T>Storage, key, location, numel)
  void persistent_load() {
    const pickle_ref pid = pop();
    const auto &a = pid->items;
    if (pid->k != pickle_value::kind::tuple || a.size() != 5 || a[0]->k != pickle_value::kind::string ||
        a[0]->s != "storage")
      fail("persistent id is not a (\"storage\", type, key, location, numel) tuple");
    if (a[1]->k != pickle_value::kind::global || a[2]->k != pickle_value::kind::string ||
        a[4]->k != pickle_value::kind::integer || a[4]->i < 0)
      fail("malformed storage persistent id");
    const auto it = std::find_if(storage_types.begin(), storage_types.end(), [&](dtype t) {
      return a[1]->s == "torch." + std::string(torch_storage_name(t));
    });
    if (it == storage_types.end()) fail("storage type " + a[1]->s + " is not one tprobe reads");
    auto v = make(pickle_value::kind::storage);
    v->tensor.storage = a[2]->s;
    v->tensor.type = *it;
    v->tensor.storage_numel = static_cast<uint64_t>(a[4]->i);
    push(std::move(v));
  }

  std::vector<int64_t> ints(const pickle_ref &v, const std::string &what) const {
    if (v->k != pickle_value::kind::tuple && v->k != pickle_value::kind::list) fail(what + " is not a tuple");
    std::vector<int64_t> out;
    for (const auto &e : v->items) {
      if (e->k != pickle_value::kind::integer) fail(what + " holds a non-integer");
      out.push_back(e->i);
    }
    return out;
  }

  pickle_ref reduce(const pickle_ref &callable, const pickle_ref &args) {
    if (callable->k != pickle_value::kind::global) return opaque(*callable, args);
    if (args->k != pickle_value::kind::tuple) fail("REDUCE arguments are not a tuple");
    const auto &a = args->items;
    const std::string &name = callable->s;
    if (name == "collections.OrderedDict") {
      auto d = make(pickle_value::kind::dict);
      // OrderedDict([(k, v), …]) as older picklers write it; usually () then SETITEMS.
      if (!a.empty() && (a[0]->k == pickle_value::kind::list || a[0]->k == pickle_value::kind::tuple))
        for (const auto &pair : a[0]->items)
          if (pair->k == pickle_value::kind::tuple && pair->items.size() == 2)
            dict_set(*d, pair->items[0], pair->items[1]);
      return d;
    }
    if (name == "torch._utils._rebuild_tensor_v2" || name == "torch._utils._rebuild_tensor") {
      // (storage, storage_offset, size, stride[, requires_grad, backward_hooks[, metadata]])
      const bool v2 = name.ends_with("_v2");
      if ((v2 && (a.size() < 6 || a.size() > 7)) || (!v2 && a.size() != 4))
        fail(name + " with " + std::to_string(a.size()) + " arguments");
      if (a[0]->k != pickle_value::kind::storage || a[1]->k != pickle_value::kind::integer)
        fail(name + ": malformed storage or offset");
      auto v = make(pickle_value::kind::tensor);
      v->tensor = a[0]->tensor;
      v->tensor.offset = a[1]->i;
      v->tensor.shape = ints(a[2], "size");
      v->tensor.stride = ints(a[3], "stride");
      if (v->tensor.shape.size() != v->tensor.stride.size()) fail(name + ": size and stride differ in length");
      if (tensors_) tensors_->push_back(v->tensor);
      return v;
    }
    if (name == "torch._utils._rebuild_parameter" || name == "torch._utils._rebuild_parameter_with_state") {
      // (tensor, requires_grad, backward_hooks[, state]): an nn.Parameter is read as its tensor.
      if (a.size() < 3 || a[0]->k != pickle_value::kind::tensor) fail(name + ": malformed arguments");
      return a[0];
    }
    if (name == "torch._tensor._rebuild_from_type_v2") {
      // (func, type, args, state): a tensor subclass; its tensor is func(*args) when func is known.
      if (a.size() == 4 && a[0]->k == pickle_value::kind::global && a[2]->k == pickle_value::kind::tuple) {
        pickle_ref r = reduce(a[0], a[2]);
        if (r->k == pickle_value::kind::tensor) return r;
      }
      return opaque(*callable, args);
    }
    return opaque(*callable, args);
  }

  pickle_ref stop() {
    pickle_ref v = pop();
    if (!stack_.empty()) fail("values left on the stack at STOP");
    return v;
  }

  std::string_view in_;
  size_t pos_ = 0;
  const std::string &source_;
  std::vector<ckpt_tensor> *tensors_;
  std::vector<pickle_ref> stack_;
  std::vector<size_t> marks_;
  std::unordered_map<uint64_t, pickle_ref> memo_;
};

bool c_contiguous(const ckpt_tensor &t) {
  int64_t expected = 1;
  for (size_t i = t.shape.size(); i-- > 0;) {
    if (t.shape[i] != 1 && t.stride[i] != expected) return false;
    expected *= t.shape[i];
  }
  return true;
}

template <typename T>
void convert(const std::byte *p, size_t n, double *out) {
  for (size_t i = 0; i < n; ++i) {
    T v;
    std::memcpy(&v, p + i * sizeof(T), sizeof(T));
    out[i] = static_cast<double>(v);
  }
}

// Elements at `p` (contiguous) to double.
void convert_run(dtype type, const std::byte *p, size_t n, double *out) {
  switch (type) {
    case dtype::float64: return convert<double>(p, n, out);
    case dtype::float32: return convert<float>(p, n, out);
    case dtype::int8: return convert<int8_t>(p, n, out);
    case dtype::int16: return convert<int16_t>(p, n, out);
    case dtype::int32: return convert<int32_t>(p, n, out);
    case dtype::int64: return convert<int64_t>(p, n, out);
    case dtype::uint8: return convert<uint8_t>(p, n, out);
    case dtype::boolean:
      for (size_t i = 0; i < n; ++i) out[i] = static_cast<uint8_t>(p[i]) != 0 ? 1.0 : 0.0;
      return;
    case dtype::float16:
    case dtype::bfloat16:
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        out[i] = type == dtype::float16 ? float16_to_float(h) : bfloat16_to_float(h);
      }
      return;
    default: throw usage_error(std::string(dtype_name(type)) + " tensors are not read as real numbers");
  }
}

}  // namespace

uint64_t ckpt_tensor::numel() const {
  uint64_t n = 1;
  for (const int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

const pickle_value *pickle_value::get(std::string_view key) const {
  if (k != kind::dict) return nullptr;
  const auto it = index.find("s" + std::string(key));
  return it == index.end() ? nullptr : entries[it->second].second.get();
}

const pickle_value *opaque_state_get(const pickle_value &v, std::string_view name) {
  if (v.k != pickle_value::kind::opaque || !v.state) return nullptr;
  return v.state->get(name);
}

pickle_ref pickle_load(std::string_view pickle, const std::string &source, std::vector<ckpt_tensor> *tensors) {
  return vm(pickle, source, tensors).run();
}

torch_checkpoint::torch_checkpoint(const std::string &path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw system_error_from_errno("open", path, errno);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw system_error_from_errno("stat", path, err);
  }
  if (!S_ISREG(st.st_mode) || st.st_size == 0) {
    ::close(fd);
    bad(path, S_ISREG(st.st_mode) ? "empty file" : "not a regular file");
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
    // The archive's folder is whatever torch named it (the file's stem, "archive"): data.pkl's.
    const zip_member *pkl = nullptr;
    for (const auto &m : members)
      if (m.name.ends_with("/data.pkl") && m.name.find('/') == m.name.size() - 9) pkl = &m;
    if (!pkl) bad(path, "no data.pkl in the zip archive (not a torch.save file)");
    const std::string prefix = pkl->name.substr(0, pkl->name.size() - 8) + "data/";
    auto bytes_of = [&](const zip_member &m) {
      if (m.method != 0) bad(path, m.name + ": compressed (method " + std::to_string(m.method) + "); torch stores members");
      if (m.size != m.compressed_size) bad(path, m.name + ": stored member with two sizes");
      return file.subspan(m.data_offset, m.size);
    };
    const auto pickle = bytes_of(*pkl);
    if (crc32_bytes(pickle.data(), pickle.size()) != pkl->crc32) bad(path, pkl->name + ": CRC-32 mismatch (the file is damaged)");
    for (const auto &m : members)
      if (m.name.starts_with(prefix)) storages_.emplace(m.name.substr(prefix.size()), bytes_of(m));
    std::vector<ckpt_tensor> tensors;
    root_ = pickle_load(std::string_view(reinterpret_cast<const char *>(pickle.data()), pickle.size()), path, &tensors);
    tensors_ = tensors.size();
    for (const auto &t : tensors) {
      const auto it = storages_.find(t.storage);
      if (it == storages_.end()) bad(path, "no member " + prefix + t.storage + " for a tensor's storage");
      const size_t itemsize = dtype_size(t.type);
      if (t.storage_numel > it->second.size() / itemsize)
        bad(path, "storage " + t.storage + " holds " + std::to_string(it->second.size()) + " bytes, fewer than its " +
                      std::to_string(t.storage_numel) + " elements");
      uint64_t count = 1;
      for (const int64_t d : t.shape) {
        if (d < 0) bad(path, "negative dimension in a tensor of storage " + t.storage);
        if (d != 0 && count > std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d)) bad(path, "element count overflows");
        count *= static_cast<uint64_t>(d);
      }
      if (count == 0) continue;
      if (t.offset < 0) bad(path, "negative storage offset");
      uint64_t last = static_cast<uint64_t>(t.offset);
      for (size_t i = 0; i < t.shape.size(); ++i) {
        if (t.stride[i] < 0) bad(path, "negative stride");
        const auto size = static_cast<uint64_t>(t.shape[i]), stride = static_cast<uint64_t>(t.stride[i]);
        if (stride != 0 && size - 1 > (std::numeric_limits<uint64_t>::max() - last) / stride) bad(path, "view overflows");
        last += (size - 1) * stride;
      }
      if (last >= t.storage_numel) bad(path, "a tensor's view runs past its storage " + t.storage);
    }
  } catch (...) {
    ::munmap(map_, map_size_);
    throw;
  }
  ::madvise(map_, map_size_, MADV_SEQUENTIAL);
}

torch_checkpoint::~torch_checkpoint() {
  if (map_) ::munmap(map_, map_size_);
}

void torch_checkpoint::read(const ckpt_tensor &t, uint64_t first, size_t n, double *out) const {
  if (n == 0) return;
  if (first > t.numel() || n > t.numel() - first) bad(path_, "read outside a tensor");
  const auto it = storages_.find(t.storage);
  if (it == storages_.end()) bad(path_, "no storage " + t.storage);
  const size_t itemsize = dtype_size(t.type);
  const std::byte *base = it->second.data();
  if (c_contiguous(t)) return convert_run(t.type, base + (static_cast<uint64_t>(t.offset) + first) * itemsize, n, out);
  // A strided view: walk its C-order index from `first`, one run of the last dimension at a time.
  const size_t nd = t.shape.size();
  std::vector<int64_t> index(nd, 0);
  uint64_t rest = first;
  for (size_t k = nd; k-- > 0;) {
    index[k] = static_cast<int64_t>(rest % static_cast<uint64_t>(t.shape[k]));
    rest /= static_cast<uint64_t>(t.shape[k]);
  }
  size_t done = 0;
  while (done < n) {
    uint64_t at = static_cast<uint64_t>(t.offset);
    for (size_t k = 0; k < nd; ++k) at += static_cast<uint64_t>(index[k] * t.stride[k]);
    const size_t run = std::min<size_t>(n - done, static_cast<size_t>(t.shape[nd - 1] - index[nd - 1]));
    const int64_t s = t.stride[nd - 1];
    if (s == 1) {
      convert_run(t.type, base + at * itemsize, run, out + done);
    } else {
      for (size_t r = 0; r < run; ++r) convert_run(t.type, base + (at + r * static_cast<uint64_t>(s)) * itemsize, 1, out + done + r);
    }
    done += run;
    index[nd - 1] += static_cast<int64_t>(run);
    for (size_t k = nd; k-- > 1 && index[k] == t.shape[k];) {
      index[k] = 0;
      ++index[k - 1];
    }
  }
}

void torch_checkpoint::release(const ckpt_tensor &t) const {
  const auto it = storages_.find(t.storage);
  if (it == storages_.end() || t.numel() == 0) return;
  // The whole storage's pages: a view's span is inside it, and the storage is what was touched.
  const size_t itemsize = dtype_size(t.type);
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<uintptr_t>(it->second.data());
  const uintptr_t end = begin + std::min<uint64_t>(it->second.size(), t.storage_numel * itemsize);
  const uintptr_t lo = begin & ~(page - 1), hi = (end + page - 1) & ~(page - 1);
  ::madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_DONTNEED);
}

void torch_checkpoint::release(const ckpt_tensor &t, uint64_t from, uint64_t to) const {
  const auto it = storages_.find(t.storage);
  if (it == storages_.end() || to <= from || to > t.numel() || !c_contiguous(t)) return;
  const size_t itemsize = dtype_size(t.type);
  const auto page = static_cast<uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto start = reinterpret_cast<uintptr_t>(it->second.data()) + static_cast<uint64_t>(t.offset) * itemsize;
  const uintptr_t lo = (start + from * itemsize) & ~(page - 1), hi = (start + to * itemsize) & ~(page - 1);
  if (hi > lo) ::madvise(reinterpret_cast<void *>(lo), hi - lo, MADV_DONTNEED);
}

}  // namespace tprobe
