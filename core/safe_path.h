// safe_path.h: creating a dump tree the way msprobe does (docs/msprobe-compat.md §2.1, §3.2).
//
// Directories 0750, files 0640 whatever the umask; paths limited to [a-zA-Z0-9_./-]; no symbolic
// link inside the dump tree is ever followed. Directory walks use openat()/mkdirat() with
// O_NOFOLLOW from a directory descriptor, so a link swapped in concurrently is refused too.
//
// Errors: usage_error for a path the user must change (bad characters, too long, a symbolic
// link, a file where a directory belongs); system_error "unable to <verb> PATH: <strerror>"
// for failed system calls.
// Thread-safe: no shared state besides a counter for temporary file names.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>
#include <utility>

namespace tprobe {

// The absolute form of `path` (relative paths resolved against the current directory),
// lexically normalised ("a/./b/../c" → "a/c", no trailing '/'); symbolic links are not resolved.
// Throws usage_error for an empty path, system_error if the current directory is unreadable.
[[nodiscard]] std::string absolute_normal_path(const std::string &path);

// msprobe's check before creating `path`: its absolute, normalised form must match
// ^[a-zA-Z0-9_./-]+$, be at most 4096 characters long, with every component at most 255.
// `what` names the input in the message, e.g.
//   dump_path "/tmp/a b": contains characters outside [a-zA-Z0-9_./-]
// Returns the absolute normalised path.
std::string path_check_create(const std::string &path, const std::string &what);

// What is wrong with `name` as a file name inside the dump tree (an entry name, or the tensor
// file name NAME.SLOT.npy made from it), or "" when nothing is: msprobe's file-name rule
// [a-zA-Z0-9_.-], not empty, not "." or "..", at most `max_length` characters.
[[nodiscard]] std::string dump_name_problem(std::string_view name, size_t max_length = 255);

// Create `root` (parents as needed) and then `relative` (e.g. "step0/rank0/dump_tensor_data")
// under it. Every directory this call creates gets mode 0750 (chmod'ed, so the umask does not
// matter); existing directories keep their mode. Symbolic links are followed only in the
// ancestors of `root`: `root` itself and every component of `relative` must not be one
// (usage_error "PATH: is a symbolic link; refusing to follow it"). `relative` must not be
// absolute nor contain "..". An empty `relative` creates just the root.
void safe_mkdirs(const std::string &root, const std::string &relative = {});

// Open `path` for writing: create or truncate, O_NOFOLLOW, mode set to `mode` with fchmod
// (default 0640). Refuses a symbolic link at `path` or as its parent directory, and anything
// that is not a regular file. Returns the descriptor (O_CLOEXEC); the caller closes it.
[[nodiscard]] int safe_open_for_write(const std::string &path, mode_t mode = 0640);

// A directory of the dump tree held open (an O_PATH descriptor; the directory itself must not be
// a symbolic link), so that a writer creating thousands of files in it (dump_tensor_data/)
// resolves its path once rather than once a file. Move-only; closes the descriptor when destroyed.
class safe_dir {
 public:
  // Opens `path`, an existing directory: usage_error if it is a symbolic link or not a
  // directory, system_error if it cannot be opened.
  explicit safe_dir(const std::string &path);
  safe_dir(safe_dir &&other) noexcept : fd_(other.fd_), path_(std::move(other.path_)) { other.fd_ = -1; }
  safe_dir &operator=(safe_dir &&other) noexcept {
    std::swap(fd_, other.fd_);
    std::swap(path_, other.path_);
    return *this;
  }
  safe_dir(const safe_dir &) = delete;
  ~safe_dir();

  const std::string &path() const { return path_; }  // absolute, normalised
  std::string file_path(const std::string &name) const;
  // safe_open_for_write(path() + "/" + name, mode) without resolving the path again; `name` is
  // a plain file name (usage_error for "", ".", ".." or one with a '/').
  [[nodiscard]] int open_for_write(const std::string &name, mode_t mode = 0640) const;
  // Unlinks `name` here, ignoring errors: the clean-up of a partly written file.
  void remove(const std::string &name) const noexcept;

 private:
  int fd_ = -1;
  std::string path_;
};

// Write `size` bytes to `fd` (retrying short writes and EINTR); system_error
// "unable to write PATH: ..." on failure.
void safe_write_all(int fd, const void *data, size_t size, const std::string &path);

// Appends `lines` to the csv file at `path` in one write (the rows of processes appending to one
// file stay whole), msprobe's write_data_to_csv ("a+"): a file that does not exist is created
// with mode 0640 whatever the umask, and a file that is empty gets `header` first. As msprobe's
// FileOpen, a symbolic link, something that is not a regular file (a folder, a FIFO: O_NONBLOCK,
// so it fails instead of blocking) and an existing file that others may write are refused
// (usage_error). Returns whether the file was created. system_error for I/O.
bool safe_csv_append(const std::string &path, std::string_view header, std::string_view lines);

// Replace `path` atomically with `content`: write ".NAME.tmp.PID.N" in the same directory
// (mode 0640), optionally fsync it (and the directory after the rename), then rename() it over
// `path`. A symbolic link at `path` is replaced, never followed; a parent directory that is a
// symbolic link is refused. On failure the temporary file is removed and `path` is untouched.
void atomic_write_file(const std::string &path, std::string_view content, bool sync = false);

// atomic_write_file in two halves, so that the costly one can come before the content is known:
// creating the temporary allocates an inode and a directory entry, about 1 ms on ext4 while
// training runs beside it, where writing a step's dump.json into the page cache takes 0.2 ms.
// The constructor creates ".NAME.tmp.PID.N" beside `path` (system_error if it cannot, naming
// it); commit() writes `content` into it, optionally fsyncs, and renames it over `path`, as
// atomic_write_file does, after which the object is empty. A commit that fails removes the
// temporary before it throws and leaves the object empty too, so that a retry cannot append to
// a partial file; one never committed removes its temporary when destroyed. A default-constructed
// one is empty.
class prepared_file {
 public:
  prepared_file() = default;
  explicit prepared_file(const std::string &path);
  prepared_file(prepared_file &&other) noexcept;
  prepared_file &operator=(prepared_file &&other) noexcept;
  prepared_file(const prepared_file &) = delete;
  prepared_file &operator=(const prepared_file &) = delete;
  ~prepared_file();

  bool empty() const { return fd_ < 0; }
  const std::string &path() const { return path_; }  // absolute, normalised; "" when empty
  // Precondition: !empty() (std::logic_error otherwise).
  void commit(std::string_view content, bool sync = false);

 private:
  void discard() noexcept;
  std::string temp_path() const;
  int dir_ = -1;  // O_PATH descriptor of path's directory
  int fd_ = -1;   // the temporary, open for writing
  std::string path_, base_, tmp_;  // path, its last component, the temporary's name
};

}  // namespace tprobe
