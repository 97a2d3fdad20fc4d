// compare_tensor.cpp: see compare_tensor.h.
#include "compare_tensor.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "errors.h"
#include "npy.h"
#include "pyjson.h"
#include "safe_path.h"

namespace tprobe {

namespace fs = std::filesystem;

namespace {

std::atomic<compare_pt_reader> pt_reader_hook{nullptr};

// The LibTorch module beside this executable (bin/../lib), loaded once, on the first .pt file.
compare_pt_reader module_pt_reader(std::string &why) {
  static std::once_flag once;
  static compare_pt_reader reader = nullptr;
  static std::string error;
  std::call_once(once, [] {
    std::error_code ec;
    const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
    const std::string lib = (exe.parent_path().parent_path() / "lib" / "libtprobe_compare_pt.so").string();
    if (ec || !fs::exists(lib)) {
      error = "this build has no " + lib;
      return;
    }
    void *handle = ::dlopen(lib.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
      error = ::dlerror();
      return;
    }
    const auto entry = reinterpret_cast<compare_pt_reader (*)()>(::dlsym(handle, "tprobe_compare_pt_reader"));
    if (!entry) {
      error = lib + ": no tprobe_compare_pt_reader";
      return;
    }
    reader = entry();
  });
  why = error;
  return reader;
}

// A tensor whose dtype has no metric path ('<u2', big-endian, strings): msprobe's "unreadable data".
struct unreadable_tensor : usage_error {
  using usage_error::usage_error;
};
bool ends_with(const std::string &s, std::string_view suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// C-order copy of a Fortran-order array (NumPy gives the logical order; pairing needs it).
std::shared_ptr<std::vector<std::byte>> to_c_order(std::span<const std::byte> data, const std::vector<int64_t> &shape,
                                                   size_t itemsize) {
  size_t count = 1;
  for (const int64_t d : shape) count *= static_cast<size_t>(d);
  auto out = std::make_shared<std::vector<std::byte>>(count * itemsize);
  std::vector<size_t> index(shape.size(), 0), fstride(shape.size(), 1);
  for (size_t k = 1; k < shape.size(); ++k) fstride[k] = fstride[k - 1] * static_cast<size_t>(shape[k - 1]);
  for (size_t c = 0; c < count; ++c) {
    size_t f = 0;
    for (size_t k = 0; k < shape.size(); ++k) f += index[k] * fstride[k];
    std::memcpy(out->data() + c * itemsize, data.data() + f * itemsize, itemsize);
    for (size_t k = shape.size(); k-- > 0;) {  // next C-order index: the last axis runs fastest
      if (++index[k] < static_cast<size_t>(shape[k])) break;
      index[k] = 0;
    }
  }
  return out;
}

template <typename F>
void parallel_for(size_t n, unsigned threads, F &&f) {
  if (threads == 0) threads = std::max(1u, std::thread::hardware_concurrency());
  threads = static_cast<unsigned>(std::min<size_t>(threads, std::max<size_t>(n, 1)));
  std::atomic<size_t> next{0};
  std::exception_ptr error;
  std::mutex error_mutex;
  const auto work = [&] {
    for (;;) {
      const size_t i = next.fetch_add(1);
      if (i >= n) return;
      try {
        f(i);
      } catch (...) {
        std::lock_guard lock(error_mutex);
        if (!error) error = std::current_exception();
        next.store(n);
      }
    }
  };
  std::vector<std::thread> pool;
  for (unsigned k = 1; k < threads; ++k) pool.emplace_back(work);
  work();
  for (auto &t : pool) t.join();
  if (error) std::rethrow_exception(error);
}

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return std::string(s);
}

// One YAML scalar: '…' (with '' for '), "…" (with \" and \\), or plain text.
std::string yaml_scalar(const std::string &s, const std::string &where) {
  if (s.size() >= 2 && s.front() == '\'' && s.back() == '\'') {
    std::string out;
    for (size_t i = 1; i + 1 < s.size(); ++i) {
      out.push_back(s[i]);
      if (s[i] == '\'' && s[i + 1] == '\'') ++i;
    }
    return out;
  }
  if (s.size() >= 2 && s.front() == '"' && s.back() == '"') {
    std::string out;
    for (size_t i = 1; i + 1 < s.size(); ++i) {
      if (s[i] == '\\' && i + 2 < s.size()) ++i;
      out.push_back(s[i]);
    }
    return out;
  }
  if (!s.empty() && (s.front() == '\'' || s.front() == '"')) throw usage_error(where + ": unterminated quote");
  return s;
}

std::string read_text(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw system_error_from_errno("open", path, errno ? errno : ENOENT);
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw system_error_from_errno("read", path, errno ? errno : EIO);
  return ss.str();
}

}  // namespace

void compare_set_pt_reader(compare_pt_reader reader) { pt_reader_hook.store(reader); }

loaded_tensor compare_load_tensor(const std::string &path) {
  if (ends_with(path, ".pt")) {
    compare_pt_reader reader = pt_reader_hook.load();
    std::string why;
    if (!reader) reader = module_pt_reader(why);
    if (!reader)
      throw compare_pt_unsupported(path + ": .pt tensors need tprobe-compare built with LibTorch (" + why +
                           "); dump with tprobe (.npy) or rebuild where LibTorch is installed");
    return reader(path);
  }
  auto mapped = std::make_shared<npy_mapped>(path);
  const auto type = mapped->type();
  if (!type)
    throw unreadable_tensor(path + ": dtype '" + mapped->descr() +
                            "' cannot be compared (only little-endian numeric dtypes are read)");
  loaded_tensor t;
  t.operand.type = *type;
  t.operand.shape = mapped->shape();
  const auto data = mapped->data();
  if (!data.empty()) {
    // Read ahead: the kernel streams through the file once.
    const long page = ::sysconf(_SC_PAGESIZE);
    const auto begin = reinterpret_cast<uintptr_t>(data.data()) & ~static_cast<uintptr_t>(page - 1);
    const auto end = reinterpret_cast<uintptr_t>(data.data() + data.size());
    ::madvise(reinterpret_cast<void *>(begin), end - begin, MADV_SEQUENTIAL);
    ::madvise(reinterpret_cast<void *>(begin), end - begin, MADV_WILLNEED);
  }
  if (mapped->fortran_order() && t.operand.shape.size() > 1) {
    auto copy = to_c_order(data, t.operand.shape, mapped->itemsize());
    t.operand.data = std::span<const std::byte>(copy->data(), copy->size());
    t.owner = std::move(copy);
  } else {
    t.operand.data = data;
    t.owner = std::move(mapped);
  }
  return t;
}

namespace {

// "[2, 3]": a shape as dump.json's shape list prints (py_str), for comparing with dump_row::shape.
std::string shape_str(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t k = 0; k < shape.size(); ++k) s += (k ? ", " : "") + std::to_string(shape[k]);
  return s + "]";
}

// The reason an exception message gives about `path`, without the path: "PATH: x" → "x",
// "unable to open PATH: E" → "unable to open: E".
std::string reason_of(const std::string &what, const std::string &path) {
  if (what.rfind(path + ": ", 0) == 0) return what.substr(path.size() + 2);
  std::string reason = what;
  if (const size_t at = reason.find(" " + path); at != std::string::npos) reason.erase(at, path.size() + 1);
  return reason;
}

// One side's tensor of a row, or why it cannot be used.
struct side_tensor {
  std::optional<loaded_tensor> tensor;
  tensor_read_error error;
};

// Loads the tensor file of `row` (one side of a pair). Refused before reading: a data_name that
// leaves dump_tensor_data/, and a symbolic link (msprobe's path checks refuse soft links). Refused
// after: a tensor whose shape is not the one dump.json gives, as the file then is not the tensor the
// row describes. Every failure is a value (an error row); only compare_pt_unsupported (no LibTorch at all)
// is thrown, being fatal for the whole compare.
side_tensor load_side(const dump_file &side, const dump_row &row) {
  side_tensor r;
  r.error.side = side.side;
  r.error.path = side.tensor_dir + "/" + row.data_name;
  const std::string &path = r.error.path;
  if (row.data_name.find('/') != std::string::npos || row.data_name == "..") {
    r.error.reason = fmt::format("data_name \"{}\" in {} leaves dump_tensor_data/; not read", row.data_name, side.path);
    return r;
  }
  struct stat st {};
  if (::lstat(path.c_str(), &st) == 0 && S_ISLNK(st.st_mode)) {
    r.error.reason = "is a symbolic link; refusing to follow it";
    return r;
  }
  try {
    loaded_tensor t = compare_load_tensor(path);
    // dump.json's shape is a list ("[2, 3]"); other forms ("None") promise nothing to check.
    if (!row.shape.empty() && row.shape.front() == '[' && shape_str(t.operand.shape) != row.shape) {
      r.error.read = true;
      r.error.reason = fmt::format("the file holds shape {}, {} says {}", shape_str(t.operand.shape), side.path, row.shape);
      return r;
    }
    r.tensor = std::move(t);
  } catch (const compare_pt_unsupported &) {
    throw;
  } catch (const unreadable_tensor &e) {
    r.error.read = true;
    r.error.reason = reason_of(e.what(), path);
  } catch (const system_error &e) {
    r.error.reason = reason_of(e.what(), path);
  } catch (const usage_error &e) {
    r.error.reason = reason_of(e.what(), path);
  }
  return r;
}

}  // namespace

void compare_fill_real_data(compare_table &t, unsigned threads, uint64_t *bytes, std::vector<std::string> *warnings) {
  std::atomic<uint64_t> compared{0};
  std::mutex warn_mutex;
  const auto failed = [&](size_t i, const tensor_read_error &e) {
    compare_table_set_real_data(t, i, real_data_read_error(e));
    if (!warnings) return;
    std::lock_guard lock(warn_mutex);
    warnings->push_back(fmt::format("cannot read {} tensor {}: {}", e.side, e.path, e.reason));
  };
  parallel_for(t.rows.size(), threads, [&](size_t i) {
    const compare_row &row = t.rows[i];
    if (row.uninitialized) return;  // nothing to read: fill_common said so
    const dump_row &n = t.npu->rows[row.npu];
    const std::string bench_name = row.bench ? t.bench->rows[*row.bench].data_name : "N/A";
    if (n.data_name == "-1") return compare_table_set_real_data(t, i, real_data_unavailable(real_data_missing::npu_no_file));
    if (bench_name == "-1")
      return compare_table_set_real_data(t, i, real_data_unavailable(real_data_missing::bench_no_file));
    if (bench_name == "N/A")
      return compare_table_set_real_data(t, i, real_data_unavailable(real_data_missing::bench_unmatched));
    const side_tensor npu_tensor = load_side(*t.npu, n);
    if (!npu_tensor.tensor) return failed(i, npu_tensor.error);
    const side_tensor bench_tensor = load_side(*t.bench, t.bench->rows[*row.bench]);
    if (!bench_tensor.tensor) return failed(i, bench_tensor.error);
    const tensor_operand &a = npu_tensor.tensor->operand, &b = bench_tensor.tensor->operand;
    compare_table_set_real_data(t, i, compare_real_data(a, b));
    compared += a.data.size() + b.data.size();
  });
  if (bytes) *bytes += compared.load();
}

std::unordered_map<std::string, std::string> compare_load_mapping(const std::string &path) {
  const std::string text = read_text(path);
  std::unordered_map<std::string, std::string> mapping;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    const auto doc = pyjson_parse(text, path);
    for (const auto &[key, value] : doc.items()) {
      if (!value.is_string()) throw usage_error(fmt::format("mapping {}: the value of \"{}\" is not a string", path, key));
      mapping[key] = value.get<std::string>();
    }
  } else {
    std::istringstream in(text);
    std::string line;
    size_t number = 0;
    while (std::getline(in, line)) {
      ++number;
      const std::string where = fmt::format("mapping {} line {}", path, number);
      std::string s = trim(line);
      if (s.empty() || s[0] == '#' || s == "---" || s == "...") continue;
      if (const size_t hash = s.find(" #"); hash != std::string::npos && s.find_first_of("'\"") == std::string::npos)
        s = trim(s.substr(0, hash));
      // The key ends at the first ": " (or a final ':') outside quotes.
      size_t colon = std::string::npos;
      char quote = 0;
      for (size_t k = 0; k < s.size(); ++k) {
        if (quote) {
          if (s[k] == quote) quote = 0;
        } else if (s[k] == '\'' || s[k] == '"') {
          quote = s[k];
        } else if (s[k] == ':' && (k + 1 == s.size() || s[k + 1] == ' ' || s[k + 1] == '\t')) {
          colon = k;
          break;
        }
      }
      if (colon == std::string::npos) throw usage_error(where + ": expected 'npu name: bench name'");
      const std::string key = yaml_scalar(trim(s.substr(0, colon)), where);
      const std::string value = yaml_scalar(trim(s.substr(colon + 1)), where);
      if (key.empty() || value.empty()) throw usage_error(where + ": expected 'npu name: bench name'");
      mapping[key] = value;
    }
  }
  if (mapping.empty()) throw usage_error(fmt::format("mapping {}: no 'npu name: bench name' entries", path));
  return mapping;
}

}  // namespace tprobe
