#include "safe_path.h"

#include <fmt/format.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <filesystem>
#include <stdexcept>
#include <utility>
#include <vector>

#include "errors.h"

namespace tprobe {

namespace {

constexpr size_t max_path_length = 4096;
constexpr size_t max_name_length = 255;
constexpr mode_t dir_mode = 0750;
constexpr mode_t file_mode = 0640;

// Closes a descriptor on scope exit.
class fd_guard {
 public:
  explicit fd_guard(int fd = -1) : fd_(fd) {}
  fd_guard(const fd_guard &) = delete;
  fd_guard &operator=(const fd_guard &) = delete;
  ~fd_guard() { reset(); }
  int get() const { return fd_; }
  int release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_;
};

std::vector<std::string> split_components(std::string_view path) {
  std::vector<std::string> parts;
  size_t i = 0;
  while (i < path.size()) {
    const size_t j = path.find('/', i);
    const size_t end = j == std::string_view::npos ? path.size() : j;
    if (end > i) parts.emplace_back(path.substr(i, end - i));
    i = end + 1;
  }
  return parts;
}

std::string join(const std::string &dir, const std::string &name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

[[noreturn]] void throw_symlink(const std::string &path) {
  throw usage_error(path + ": is a symbolic link; refusing to follow it");
}

// Why openat(dirfd, name, O_NOFOLLOW | O_DIRECTORY) failed with `err`: a symbolic link or a
// non-directory becomes a usage_error; anything else a system_error.
[[noreturn]] void throw_open_dir_error(int dirfd, const std::string &name, const std::string &path, int err) {
  struct stat st {};
  if ((err == ELOOP || err == ENOTDIR) && ::fstatat(dirfd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0) {
    if (S_ISLNK(st.st_mode)) throw_symlink(path);
    if (!S_ISDIR(st.st_mode)) throw usage_error(path + ": exists and is not a directory");
  }
  throw system_error_from_errno("open directory", path, err);
}

// Open (creating if missing, mode 0750) the directory `name` under `dirfd`. Directories are
// walked through O_PATH descriptors, so an ancestor with search but no read permission is fine.
int open_or_create_dir(int dirfd, const std::string &name, const std::string &path, bool nofollow) {
  const int flags = O_PATH | O_DIRECTORY | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0);
  int fd = ::openat(dirfd, name.c_str(), flags);
  if (fd >= 0) return fd;
  if (errno != ENOENT) throw_open_dir_error(dirfd, name, path, errno);
  bool created = false;
  if (::mkdirat(dirfd, name.c_str(), dir_mode) == 0)
    created = true;
  else if (errno != EEXIST)
    throw system_error_from_errno("create directory", path, errno);
  fd = ::openat(dirfd, name.c_str(), flags);
  if (fd < 0) throw_open_dir_error(dirfd, name, path, errno);
  if (created) {
    // fchmod needs a real descriptor; a umask without u+r leaves only fchmodat on the name,
    // which is safe enough: the directory we just created sits in one we can write to.
    const int rfd = ::openat(dirfd, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const int rc = rfd >= 0 ? ::fchmod(rfd, dir_mode) : ::fchmodat(dirfd, name.c_str(), dir_mode, 0);
    const int err = errno;
    if (rfd >= 0) ::close(rfd);
    if (rc != 0) {
      ::close(fd);
      throw system_error_from_errno("set the mode of", path, err);
    }
  }
  return fd;
}

// Open (O_PATH) the parent directory of absolute path `abs` without following a symbolic link
// as its last component; `base` receives the file name.
int open_parent_dir(const std::string &abs, std::string &base) {
  const size_t slash = abs.rfind('/');
  base = abs.substr(slash + 1);
  if (base.empty() || base == "." || base == "..") throw usage_error(abs + ": is not a file path");
  const std::string dir = slash == 0 ? std::string("/") : abs.substr(0, slash);
  const int fd = ::open(dir.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) return fd;
  const int err = errno;
  struct stat st {};
  if ((err == ELOOP || err == ENOTDIR) && ::lstat(dir.c_str(), &st) == 0) {
    if (S_ISLNK(st.st_mode)) throw_symlink(dir);
    if (!S_ISDIR(st.st_mode)) throw usage_error(dir + ": exists and is not a directory");
  }
  throw system_error_from_errno("open directory", dir, err);
}

std::atomic<unsigned> temp_counter{0};

}  // namespace

std::string absolute_normal_path(const std::string &path) {
  if (path.empty()) throw usage_error("empty path");
  std::filesystem::path p(path);
  if (p.is_relative()) {
    std::vector<char> buf(PATH_MAX + 1);
    if (::getcwd(buf.data(), buf.size()) == nullptr)
      throw system_error_from_errno("read", "the current directory", errno);
    p = std::filesystem::path(buf.data()) / p;
  }
  std::string s = p.lexically_normal().string();
  while (s.size() > 1 && s.back() == '/') s.pop_back();
  return s;
}

std::string path_check_create(const std::string &path, const std::string &what) {
  if (path.empty()) throw usage_error(what + " \"\": is empty");
  const std::string abs = absolute_normal_path(path);
  const std::string quoted = what + " \"" + abs + "\"";
  for (const char c : abs) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '/' || c == '-';
    if (!ok) throw usage_error(quoted + ": contains characters outside [a-zA-Z0-9_./-]");
  }
  if (abs.size() > max_path_length)
    throw usage_error(quoted + ": is longer than " + std::to_string(max_path_length) + " characters");
  for (const auto &part : split_components(abs))
    if (part.size() > max_name_length)
      throw usage_error(quoted + ": component \"" + part + "\" is longer than " + std::to_string(max_name_length) +
                        " characters");
  return abs;
}

void safe_mkdirs(const std::string &root, const std::string &relative) {
  const std::string abs_root = absolute_normal_path(root);
  if (!relative.empty() && relative.front() == '/')
    throw usage_error("safe_mkdirs: \"" + relative + "\" must be relative to " + abs_root);
  const auto root_parts = split_components(abs_root);
  std::vector<std::string> rel_parts;
  for (auto &part : split_components(relative)) {
    if (part == ".") continue;
    if (part == "..") throw usage_error("safe_mkdirs: \"" + relative + "\" must not contain \"..\"");
    rel_parts.push_back(std::move(part));
  }

  fd_guard dir(::open("/", O_PATH | O_DIRECTORY | O_CLOEXEC));
  if (dir.get() < 0) throw system_error_from_errno("open directory", "/", errno);
  std::string so_far;
  for (size_t i = 0; i < root_parts.size(); ++i) {
    so_far += "/" + root_parts[i];
    const bool is_root = i + 1 == root_parts.size();  // ancestors may be links, the root may not
    dir.reset(open_or_create_dir(dir.get(), root_parts[i], so_far, is_root));
  }
  if (root_parts.empty()) so_far.assign(1, '/');  // not = "/": GCC 12 -Wrestrict false positive
  for (const auto &part : rel_parts) {
    so_far = join(so_far, part);
    dir.reset(open_or_create_dir(dir.get(), part, so_far, true));
  }
}

void safe_write_all(int fd, const void *data, size_t size, const std::string &path) {
  const auto *p = static_cast<const char *>(data);
  while (size > 0) {
    const size_t chunk = size < (size_t{1} << 30) ? size : (size_t{1} << 30);
    const ssize_t n = ::write(fd, p, chunk);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw system_error_from_errno("write", path, errno);
    }
    if (n == 0) throw system_error_from_errno("write", path, EIO);
    p += n;
    size -= static_cast<size_t>(n);
  }
}

bool safe_csv_append(const std::string &path, std::string_view header, std::string_view lines) {
  // O_EXCL first, so that "created" is known without a race and a new file gets its header;
  // O_EXCL never follows a symbolic link (it fails with EEXIST on one), and the second open refuses
  // it with O_NOFOLLOW.
  constexpr int flags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
  bool created = true;
  int fd = ::open(path.c_str(), flags | O_CREAT | O_EXCL, 0640);
  if (fd < 0 && errno == EEXIST) {
    created = false;
    fd = ::open(path.c_str(), flags);
    if (fd < 0 && errno == ELOOP) throw usage_error(fmt::format("{}: is a symbolic link; refusing to follow it", path));
    if (fd < 0 && (errno == ENXIO || errno == EISDIR)) throw usage_error(fmt::format("{}: is not a regular file", path));
  }
  if (fd < 0) throw system_error_from_errno("open", path, errno);
  struct closer {
    int &fd;
    ~closer() {
      if (fd >= 0) ::close(fd);
    }
  } guard{fd};
  struct stat st{};
  if (::fstat(fd, &st) != 0) throw system_error_from_errno("stat", path, errno);
  if (!S_ISREG(st.st_mode)) throw usage_error(fmt::format("{}: is not a regular file", path));
  if (created) {
    if (::fchmod(fd, 0640) != 0) throw system_error_from_errno("chmod", path, errno);
  } else if (st.st_mode & S_IWOTH) {
    throw usage_error(fmt::format("{}: others may write it (mode {:o}); refusing to append to it", path,
                                  st.st_mode & 07777));
  }
  std::string text;
  if (st.st_size == 0) text = header;
  text += lines;
  safe_write_all(fd, text.data(), text.size(), path);
  const int open_fd = fd;
  fd = -1;
  if (::close(open_fd) != 0) throw system_error_from_errno("close", path, errno);
  return created;
}

namespace {

// Opens `base` in the directory `dirfd` for writing with mode `mode` (abs names it in errors).
// A file that does not exist yet is created with O_EXCL, which guarantees a new regular file, so
// it needs none of the checks below; an existing one (a rerun into the same dump path) is opened
// with O_NONBLOCK, so that a planted FIFO cannot block us, and refused unless it is a regular
// file. Either way fchmod sets `mode`, which the umask may have narrowed.
int open_in_dir_for_write(int dirfd, const char *base, const std::string &abs, mode_t mode) {
  fd_guard fd(::openat(dirfd, base, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, mode));
  if (fd.get() >= 0) {
    if (::fchmod(fd.get(), mode) != 0) throw system_error_from_errno("set the mode of", abs, errno);
    return fd.release();
  }
  if (errno == EEXIST)
    fd.reset(::openat(dirfd, base, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK, mode));
  if (fd.get() < 0) {
    const int err = errno;
    struct stat st {};
    if (err == ELOOP && ::fstatat(dirfd, base, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
      throw_symlink(abs);
    throw system_error_from_errno("open", abs, err);
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) throw system_error_from_errno("stat", abs, errno);
  if (!S_ISREG(st.st_mode)) throw usage_error(abs + ": is not a regular file");
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0)
    throw system_error_from_errno("configure", abs, errno);
  if (::fchmod(fd.get(), mode) != 0) throw system_error_from_errno("set the mode of", abs, errno);
  return fd.release();
}

}  // namespace

int safe_open_for_write(const std::string &path, mode_t mode) {
  const std::string abs = absolute_normal_path(path);
  std::string base;
  fd_guard dir(open_parent_dir(abs, base));
  return open_in_dir_for_write(dir.get(), base.c_str(), abs, mode);
}

safe_dir::safe_dir(const std::string &path) : path_(absolute_normal_path(path)) {
  if (path_ == "/") throw usage_error("/: is not a dump directory");
  std::string base;
  fd_guard parent(open_parent_dir(path_, base));
  fd_ = ::openat(parent.get(), base.c_str(), O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd_ < 0) throw_open_dir_error(parent.get(), base, path_, errno);
}

safe_dir::~safe_dir() {
  if (fd_ >= 0) ::close(fd_);
}

std::string safe_dir::file_path(const std::string &name) const { return join(path_, name); }

int safe_dir::open_for_write(const std::string &name, mode_t mode) const {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    throw usage_error(file_path(name) + ": is not a file name in " + path_);
  return open_in_dir_for_write(fd_, name.c_str(), file_path(name), mode);
}

void safe_dir::remove(const std::string &name) const noexcept { ::unlinkat(fd_, name.c_str(), 0); }

void atomic_write_file(const std::string &path, std::string_view content, bool sync) {
  prepared_file(path).commit(content, sync);
}

prepared_file::prepared_file(const std::string &path) : path_(absolute_normal_path(path)) {
  fd_guard dir(open_parent_dir(path_, base_));
  const std::string suffix = fmt::format(".tmp.{}.{}", ::getpid(), temp_counter++);
  const size_t keep = max_name_length - 1 - suffix.size();
  tmp_ = fmt::format(".{}{}", base_.substr(0, keep), suffix);
  const int flags = O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC;
  fd_guard fd(::openat(dir.get(), tmp_.c_str(), flags, file_mode));
  if (fd.get() < 0 && errno == EEXIST) {  // left over by a crashed process with our pid
    ::unlinkat(dir.get(), tmp_.c_str(), 0);
    fd.reset(::openat(dir.get(), tmp_.c_str(), flags, file_mode));
  }
  if (fd.get() < 0) throw system_error_from_errno("create", temp_path(), errno);
  if (::fchmod(fd.get(), file_mode) != 0) {
    const int error = errno;
    ::unlinkat(dir.get(), tmp_.c_str(), 0);
    throw system_error_from_errno("set the mode of", temp_path(), error);
  }
  dir_ = dir.release();
  fd_ = fd.release();
}

prepared_file::prepared_file(prepared_file &&other) noexcept
    : dir_(std::exchange(other.dir_, -1)), fd_(std::exchange(other.fd_, -1)), path_(std::move(other.path_)),
      base_(std::move(other.base_)), tmp_(std::move(other.tmp_)) {}

prepared_file &prepared_file::operator=(prepared_file &&other) noexcept {
  if (this != &other) {
    discard();
    dir_ = std::exchange(other.dir_, -1);
    fd_ = std::exchange(other.fd_, -1);
    path_ = std::move(other.path_);
    base_ = std::move(other.base_);
    tmp_ = std::move(other.tmp_);
  }
  return *this;
}

prepared_file::~prepared_file() { discard(); }

std::string prepared_file::temp_path() const { return path_.substr(0, path_.size() - base_.size()) + tmp_; }

void prepared_file::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  if (dir_ >= 0) {
    if (!tmp_.empty()) ::unlinkat(dir_, tmp_.c_str(), 0);
    ::close(dir_);
  }
  fd_ = dir_ = -1;
  path_.clear();
  tmp_.clear();
}

void prepared_file::commit(std::string_view content, bool sync) {
  if (empty()) throw std::logic_error("prepared_file::commit: no temporary file (committed already, or never made)");
  const std::string tmp_path = temp_path();
  try {
    safe_write_all(fd_, content.data(), content.size(), tmp_path);
    if (sync && ::fsync(fd_) != 0) throw system_error_from_errno("sync", tmp_path, errno);
    if (::close(std::exchange(fd_, -1)) != 0) throw system_error_from_errno("write", tmp_path, errno);
    if (::renameat(dir_, tmp_.c_str(), dir_, base_.c_str()) != 0)
      throw system_error_from_errno("rename " + tmp_path + " to", path_, errno);
  } catch (...) {
    // Gone at once, so that a later write of the same file (the writer's last rewrite after a
    // failure) makes a new temporary rather than appending to this partial one.
    discard();
    throw;
  }
  tmp_.clear();  // renamed: nothing of ours to unlink any more
  if (sync) {  // an O_PATH descriptor cannot be synced: open the directory for reading
    fd_guard rdir(::openat(dir_, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
    if (rdir.get() < 0 || ::fsync(rdir.get()) != 0) {
      const int error = errno;
      const std::string target = path_;
      discard();
      throw system_error_from_errno("sync the directory of", target, error);
    }
  }
  discard();
}

std::string dump_name_problem(std::string_view name, size_t max_length) {
  if (name.empty()) return "is empty";
  if (name == "." || name == "..") return "is not a file name";
  if (name.size() > max_length) return fmt::format("is {} characters long, at most {} allowed", name.size(), max_length);
  static constexpr std::string_view allowed = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_.-";
  if (const size_t bad = name.find_first_not_of(allowed); bad != std::string_view::npos)
    return fmt::format("contains \"{}\" at position {}; only [a-zA-Z0-9_.-] are allowed", name[bad], bad);
  return "";
}

}  // namespace tprobe
