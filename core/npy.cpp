#include "npy.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <utility>

#include "errors.h"
#include "safe_path.h"

namespace tprobe {

static_assert(std::endian::native == std::endian::little, "tprobe's .npy writer assumes a little-endian host");

namespace {

constexpr char magic[] = "\x93NUMPY";
constexpr size_t magic_len = 6;
constexpr size_t array_align = 64;
constexpr size_t growth_axis_max_digits = 21;  // numpy's spare space for growing axis 0
constexpr size_t max_header_len = size_t{1} << 20;

[[noreturn]] void bad_file(const std::string &path, const std::string &why) {
  throw usage_error(path + ": not a valid .npy file: " + why);
}

// Product of the dimensions; throws on negative dimensions or overflow.
size_t checked_count(std::span<const int64_t> shape, const std::string &source) {
  size_t count = 1;
  for (const int64_t d : shape) {
    if (d < 0) throw usage_error(source + ": negative dimension " + std::to_string(d) + " in shape");
    if (__builtin_mul_overflow(count, static_cast<size_t>(d), &count))
      throw usage_error(source + ": shape has too many elements");
  }
  return count;
}

size_t checked_bytes(size_t count, size_t itemsize, const std::string &source) {
  size_t bytes = 0;
  if (__builtin_mul_overflow(count, itemsize, &bytes)) throw usage_error(source + ": array too large");
  return bytes;
}

std::string shape_repr(std::span<const int64_t> shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  s += ")";
  return s;
}

struct header_info {
  std::string descr;
  std::vector<int64_t> shape;
  bool fortran_order = false;
  size_t data_offset = 0;
  size_t count = 0;
  size_t itemsize = 0;
};

// Magic, version and header length from the first bytes. Returns the prefix length (10 or 12)
// and sets header_len.
size_t parse_prefix(const unsigned char *p, size_t n, const std::string &path, size_t &header_len) {
  if (n < magic_len + 2 || std::memcmp(p, magic, magic_len) != 0) bad_file(path, "missing the \\x93NUMPY magic");
  const unsigned major = p[6];
  const unsigned minor = p[7];
  if (minor != 0 || major < 1 || major > 3)
    bad_file(path, "unsupported format version " + std::to_string(major) + "." + std::to_string(minor));
  if (major == 1) {
    if (n < 10) bad_file(path, "truncated header");
    header_len = p[8] | (static_cast<size_t>(p[9]) << 8);
    return 10;
  }
  if (n < 12) bad_file(path, "truncated header");
  header_len = p[8] | (static_cast<size_t>(p[9]) << 8) | (static_cast<size_t>(p[10]) << 16) |
               (static_cast<size_t>(p[11]) << 24);
  if (header_len > max_header_len) bad_file(path, "header of " + std::to_string(header_len) + " bytes is too large");
  return 12;
}

// A parser for the header's Python dict literal.
class header_parser {
 public:
  header_parser(std::string_view text, const std::string &path) : s_(text), path_(path) {}

  void parse(header_info &h) {
    bool have_descr = false, have_order = false, have_shape = false;
    ws();
    expect('{');
    for (;;) {
      ws();
      if (peek() == '}') {
        ++i_;
        break;
      }
      const std::string key = string_literal();
      ws();
      expect(':');
      ws();
      if (key == "descr") {
        if (peek() == '[') fail("structured dtypes are not supported");
        h.descr = string_literal();
        have_descr = true;
      } else if (key == "fortran_order") {
        h.fortran_order = boolean();
        have_order = true;
      } else if (key == "shape") {
        h.shape = tuple();
        have_shape = true;
      } else {
        fail("unexpected key '" + key + "'");
      }
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      ws();
      expect('}');
      break;
    }
    ws();
    if (i_ != s_.size()) fail("unexpected text after the header dict");
    if (!have_descr || !have_order || !have_shape) fail("header lacks one of 'descr', 'fortran_order', 'shape'");
  }

 private:
  std::string_view s_;
  size_t i_ = 0;
  const std::string &path_;

  [[noreturn]] void fail(const std::string &why) const { bad_file(path_, "bad header: " + why); }
  char peek() const { return i_ < s_.size() ? s_[i_] : '\0'; }
  void ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\n' || s_[i_] == '\t' || s_[i_] == '\r')) ++i_;
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++i_;
  }
  std::string string_literal() {
    const char q = peek();
    if (q != '\'' && q != '"') fail("expected a string");
    ++i_;
    const size_t start = i_;
    while (i_ < s_.size() && s_[i_] != q) {
      if (s_[i_] == '\\') fail("escapes in strings are not supported");
      ++i_;
    }
    if (i_ == s_.size()) fail("unterminated string");
    return std::string(s_.substr(start, i_++ - start));
  }
  bool boolean() {
    if (s_.substr(i_, 4) == "True") {
      i_ += 4;
      return true;
    }
    if (s_.substr(i_, 5) == "False") {
      i_ += 5;
      return false;
    }
    fail("fortran_order is not True or False");
  }
  std::vector<int64_t> tuple() {
    std::vector<int64_t> dims;
    expect('(');
    for (;;) {
      ws();
      if (peek() == ')') {
        ++i_;
        return dims;
      }
      if (!(peek() >= '0' && peek() <= '9')) fail("shape is not a tuple of non-negative integers");
      int64_t v = 0;
      while (peek() >= '0' && peek() <= '9') {
        if (__builtin_mul_overflow(v, 10, &v) || __builtin_add_overflow(v, peek() - '0', &v))
          fail("dimension too large");
        ++i_;
      }
      if (peek() == 'L') ++i_;  // Python 2 long literal
      dims.push_back(v);
      ws();
      if (peek() == ',') {
        ++i_;
        continue;
      }
      ws();
      expect(')');
      if (dims.size() == 1) fail("a one-element shape needs a trailing comma");
      return dims;
    }
  }
};

// Parse prefix and dict from `p` (which holds at least prefix + header bytes) and check the
// data fits in file_size.
void parse_header_text(const unsigned char *p, size_t prefix_len, size_t header_len, uint64_t file_size,
                       const std::string &path, header_info &h) {
  std::string_view text(reinterpret_cast<const char *>(p + prefix_len), header_len);
  header_parser(text, path).parse(h);
  h.itemsize = npy_descr_itemsize(h.descr, path);
  h.count = checked_count(h.shape, path);
  h.data_offset = prefix_len + header_len;
  const size_t bytes = checked_bytes(h.count, h.itemsize, path);
  if (file_size - h.data_offset < bytes)
    bad_file(path, "truncated data: the header promises " + std::to_string(bytes) + " bytes, the file holds " +
                       std::to_string(file_size - h.data_offset));
}

void pread_all(int fd, void *buf, size_t size, uint64_t offset, const std::string &path) {
  auto *p = static_cast<char *>(buf);
  while (size > 0) {
    const size_t chunk = std::min(size, size_t{1} << 30);
    const ssize_t n = ::pread(fd, p, chunk, static_cast<off_t>(offset));
    if (n < 0) {
      if (errno == EINTR) continue;
      throw system_error_from_errno("read", path, errno);
    }
    if (n == 0) bad_file(path, "file shrank while being read");
    p += n;
    size -= static_cast<size_t>(n);
    offset += static_cast<uint64_t>(n);
  }
}

int open_regular(const std::string &path, uint64_t &size) {
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
    throw usage_error(path + ": is not a regular file");
  }
  size = static_cast<uint64_t>(st.st_size);
  return fd;
}

}  // namespace

size_t npy_descr_itemsize(std::string_view descr, const std::string &source) {
  std::string_view d = descr;
  if (!d.empty() && (d[0] == '<' || d[0] == '>' || d[0] == '|' || d[0] == '=')) d.remove_prefix(1);
  if (d.empty()) throw usage_error(source + ": empty dtype descr");
  const char kind = d[0];
  d.remove_prefix(1);
  if (kind == 'O') throw usage_error(source + ": object arrays (descr '" + std::string(descr) + "') are not supported");
  if ((kind == 'm' || kind == 'M') && !d.empty() && d.back() == ']') {
    const size_t bracket = d.find('[');
    if (bracket != std::string_view::npos) d = d.substr(0, bracket);
  }
  static constexpr std::string_view kinds = "biufcSaUVmM";
  if (kinds.find(kind) == std::string_view::npos || d.empty() || d.size() > 6 ||
      !std::all_of(d.begin(), d.end(), [](char c) { return c >= '0' && c <= '9'; }))
    throw usage_error(source + ": unsupported dtype descr '" + std::string(descr) + "'");
  size_t n = 0;
  for (const char c : d) n = n * 10 + static_cast<size_t>(c - '0');
  return kind == 'U' ? n * 4 : n;
}

std::optional<dtype> npy_descr_dtype(std::string_view descr) {
  if (descr.size() < 2) return std::nullopt;
  const char order = descr[0];
  std::string_view rest = descr.substr(1);
  if (order != '<' && order != '>' && order != '|' && order != '=') {
    rest = descr;
  }
  struct entry {
    std::string_view code;
    dtype type;
  };
  static constexpr entry table[] = {
      {"f8", dtype::float64}, {"f4", dtype::float32}, {"f2", dtype::float16},  {"i1", dtype::int8},
      {"i2", dtype::int16},   {"i4", dtype::int32},   {"i8", dtype::int64},    {"u1", dtype::uint8},
      {"b1", dtype::boolean}, {"c8", dtype::complex64}, {"c16", dtype::complex128},
  };
  for (const auto &e : table) {
    if (e.code != rest) continue;
    const bool single_byte = dtype_size(e.type) == 1;
    if (order == '>' && !single_byte) return std::nullopt;
    return e.type;
  }
  return std::nullopt;
}

size_t npy_array::element_count() const { return checked_count(shape, "npy_array"); }
size_t npy_array::itemsize() const { return npy_descr_itemsize(descr, "npy_array"); }
std::optional<dtype> npy_array::type() const { return npy_descr_dtype(descr); }

std::string npy_header(dtype type, std::span<const int64_t> shape) {
  checked_count(shape, "npy_header");
  const std::string_view descr = type == dtype::bfloat16 ? std::string_view("<f4") : dtype_numpy_descr(type);
  std::string dict = "{'descr': '" + std::string(descr) + "', 'fortran_order': False, 'shape': " + shape_repr(shape) +
                     ", }";
  if (!shape.empty()) {
    const size_t digits = std::to_string(shape[0]).size();
    if (digits < growth_axis_max_digits) dict.append(growth_axis_max_digits - digits, ' ');
  }
  const size_t hlen = dict.size() + 1;  // with the final '\n'
  unsigned major = 1;
  size_t len_bytes = 2;
  size_t padlen = array_align - ((magic_len + 2 + len_bytes + hlen) % array_align);
  if (hlen + padlen > 0xFFFF) {  // numpy falls back to format 2.0
    major = 2;
    len_bytes = 4;
    padlen = array_align - ((magic_len + 2 + len_bytes + hlen) % array_align);
  }
  const size_t total_len = hlen + padlen;
  std::string out(magic, magic_len);
  out.push_back(static_cast<char>(major));
  out.push_back('\0');
  for (size_t i = 0; i < len_bytes; ++i) out.push_back(static_cast<char>((total_len >> (8 * i)) & 0xFF));
  out += dict;
  out.append(padlen, ' ');
  out.push_back('\n');
  return out;
}

namespace {

void npy_data_check(const std::string &path, dtype type, std::span<const int64_t> shape, size_t data_size,
                    size_t &count) {
  count = checked_count(shape, path);
  const size_t expected = checked_bytes(count, dtype_size(type), path);
  if (data_size != expected)
    throw usage_error(path + ": " + std::to_string(data_size) + " data bytes given for a " +
                      std::string(dtype_name(type)) + " array of shape " + shape_repr(shape) + ", expected " +
                      std::to_string(expected));
}

// Header and data in one writev: a step of small tensors is thousands of files, and system calls
// are what each of them costs most.
void write_header_and_data(int fd, std::string_view header, std::span<const std::byte> data, const std::string &path) {
  iovec iov[2] = {{const_cast<char *>(header.data()), header.size()},
                  {const_cast<std::byte *>(data.data()), std::min(data.size(), size_t{1} << 30)}};
  ssize_t n;
  do n = ::writev(fd, iov, 2);
  while (n < 0 && errno == EINTR);
  if (n < 0) throw system_error_from_errno("write", path, errno);
  size_t done = static_cast<size_t>(n);
  if (done < header.size()) {
    safe_write_all(fd, header.data() + done, header.size() - done, path);
    done = header.size();
  }
  done -= header.size();
  safe_write_all(fd, data.data() + done, data.size() - done, path);
}

void npy_write_fd(int fd, const std::string &path, dtype type, std::span<const int64_t> shape,
                  std::span<const std::byte> data, size_t count) {
  const std::string header = npy_header(type, shape);
  if (type != dtype::bfloat16) {
    write_header_and_data(fd, header, data, path);
    return;
  }
  safe_write_all(fd, header.data(), header.size(), path);
  constexpr size_t chunk = 1 << 15;
  std::vector<uint32_t> buf(std::min(chunk, count));
  for (size_t done = 0; done < count;) {
    const size_t n = std::min(chunk, count - done);
    const std::byte *src = data.data() + done * 2;
    for (size_t i = 0; i < n; ++i) {
      uint16_t bits;
      std::memcpy(&bits, src + 2 * i, 2);
      buf[i] = static_cast<uint32_t>(bits) << 16;
    }
    safe_write_all(fd, buf.data(), n * 4, path);
    done += n;
  }
}

// Writes through `fd` and closes it; `remove` unlinks the partly written file on any failure.
template <typename Remove>
void npy_write_and_close(int fd, const std::string &path, dtype type, std::span<const int64_t> shape,
                         std::span<const std::byte> data, size_t count, Remove &&remove) {
  try {
    npy_write_fd(fd, path, type, shape, data, count);
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

void npy_write(const std::string &path, dtype type, std::span<const int64_t> shape, std::span<const std::byte> data,
               mode_t mode) {
  size_t count = 0;
  npy_data_check(path, type, shape, data.size(), count);
  npy_write_and_close(safe_open_for_write(path, mode), path, type, shape, data, count,
                      [&] { ::unlink(path.c_str()); });
}

void npy_write(const safe_dir &dir, const std::string &name, dtype type, std::span<const int64_t> shape,
               std::span<const std::byte> data, mode_t mode) {
  const std::string path = dir.file_path(name);
  size_t count = 0;
  npy_data_check(path, type, shape, data.size(), count);
  npy_write_and_close(dir.open_for_write(name, mode), path, type, shape, data, count, [&] { dir.remove(name); });
}

npy_array npy_read(const std::string &path) {
  uint64_t file_size = 0;
  const int fd = open_regular(path, file_size);
  try {
    unsigned char prefix[12];
    const size_t n = static_cast<size_t>(std::min<uint64_t>(file_size, sizeof prefix));
    pread_all(fd, prefix, n, 0, path);
    size_t header_len = 0;
    const size_t prefix_len = parse_prefix(prefix, n, path, header_len);
    if (file_size < prefix_len + header_len) bad_file(path, "truncated header");
    std::vector<unsigned char> head(prefix_len + header_len);
    pread_all(fd, head.data(), head.size(), 0, path);
    header_info h;
    parse_header_text(head.data(), prefix_len, header_len, file_size, path, h);
    npy_array a;
    a.descr = std::move(h.descr);
    a.shape = std::move(h.shape);
    a.fortran_order = h.fortran_order;
    a.data.resize(h.count * h.itemsize);
    pread_all(fd, a.data.data(), a.data.size(), h.data_offset, path);
    ::close(fd);
    return a;
  } catch (...) {
    ::close(fd);
    throw;
  }
}

npy_mapped::npy_mapped(const std::string &path) : path_(path) {
  uint64_t file_size = 0;
  const int fd = open_regular(path, file_size);
  if (file_size < 10) {
    ::close(fd);
    bad_file(path, "file too short");
  }
  map_size_ = static_cast<size_t>(file_size);
  map_ = ::mmap(nullptr, map_size_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw system_error_from_errno("map", path, err);
  }
  try {
    const auto *p = static_cast<const unsigned char *>(map_);
    size_t header_len = 0;
    const size_t prefix_len = parse_prefix(p, map_size_, path, header_len);
    if (map_size_ < prefix_len + header_len) bad_file(path, "truncated header");
    header_info h;
    parse_header_text(p, prefix_len, header_len, file_size, path, h);
    descr_ = std::move(h.descr);
    shape_ = std::move(h.shape);
    fortran_order_ = h.fortran_order;
    count_ = h.count;
    itemsize_ = h.itemsize;
    data_ = reinterpret_cast<const std::byte *>(p + h.data_offset);
    if (count_ * itemsize_ > (size_t{1} << 20))
      ::madvise(map_, map_size_, MADV_SEQUENTIAL);
  } catch (...) {
    unmap();
    throw;
  }
}

npy_mapped::~npy_mapped() { unmap(); }

void npy_mapped::unmap() noexcept {
  if (map_ != nullptr) ::munmap(map_, map_size_);
  map_ = nullptr;
  map_size_ = 0;
  data_ = nullptr;
  count_ = 0;
}

npy_mapped::npy_mapped(npy_mapped &&other) noexcept
    : path_(std::move(other.path_)),
      descr_(std::move(other.descr_)),
      shape_(std::move(other.shape_)),
      fortran_order_(other.fortran_order_),
      count_(other.count_),
      itemsize_(other.itemsize_),
      map_(std::exchange(other.map_, nullptr)),
      map_size_(std::exchange(other.map_size_, 0)),
      data_(std::exchange(other.data_, nullptr)) {
  other.count_ = 0;
}

npy_mapped &npy_mapped::operator=(npy_mapped &&other) noexcept {
  if (this != &other) {
    unmap();
    path_ = std::move(other.path_);
    descr_ = std::move(other.descr_);
    shape_ = std::move(other.shape_);
    fortran_order_ = other.fortran_order_;
    count_ = std::exchange(other.count_, 0);
    itemsize_ = other.itemsize_;
    map_ = std::exchange(other.map_, nullptr);
    map_size_ = std::exchange(other.map_size_, 0);
    data_ = std::exchange(other.data_, nullptr);
  }
  return *this;
}

}  // namespace tprobe
