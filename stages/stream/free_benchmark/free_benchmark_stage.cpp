// free_benchmark_stage.cpp: see free_benchmark_stage.h.
#include "free_benchmark_stage.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <map>
#include <set>

#include <fmt/format.h>

#include "errors.h"
#include "free_benchmark_record.h"
#include "safe_path.h"

namespace tprobe {

const stage_description &free_benchmark_stage_description() {
  static const stage_description d{
      "free-benchmark",
      "write msprobe's free_benchmark.csv (step{N}/rank{R}/, one row per inconsistent API call) from the "
      "capture's free_benchmark records",
      true,
      true,
      {
          {"dump-path", "string", "", "folder of step{N}/rank{R}/ (default: the session's dump_path)"},
      }};
  return d;
}

std::string free_benchmark_stage_line(const free_benchmark_row &row) {
  std::string verdict;
  switch (row.verdict) {
    case free_benchmark_row::kind::ratio:
    case free_benchmark_row::kind::symbol_flipping:
      verdict = "max_rel " + free_benchmark_max_rel_text(row);
      break;
    case free_benchmark_row::kind::none:
      verdict = "inconsistent with the CPU (to_cpu: no max_rel)";
      break;
  }
  return fmt::format("tprobe-free-benchmark: step {} rank {} {}: {} ({}, {}{})", row.step, row.rank, row.api_name,
                     verdict, row.dtype, free_benchmark_shape_text(row.shape),
                     row.output_index ? fmt::format(", output {}", *row.output_index) : std::string());
}

namespace {

// Closes a descriptor on every path out.
struct fd_guard {
  int fd;
  ~fd_guard() {
    if (fd >= 0) ::close(fd);
  }
};

void write_all(int fd, std::string_view text, const std::string &path) {
  while (!text.empty()) {
    const ssize_t n = ::write(fd, text.data(), text.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw system_error_from_errno("write", path, errno);
    }
    text.remove_prefix(static_cast<size_t>(n));
  }
}

}  // namespace

bool free_benchmark_csv_append(const std::string &path, const std::string &lines) {
  // O_EXCL first, so that "created" is known without a race and a new file gets its header;
  // O_EXCL never follows a symbolic link (it fails with EEXIST on one), and the second open refuses
  // it with O_NOFOLLOW. O_NONBLOCK: a FIFO planted there fails (ENXIO) instead of blocking.
  constexpr int flags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
  bool created = true;
  fd_guard f{::open(path.c_str(), flags | O_CREAT | O_EXCL, 0640)};
  if (f.fd < 0 && errno == EEXIST) {
    created = false;
    f.fd = ::open(path.c_str(), flags);
    if (f.fd < 0 && errno == ELOOP) throw usage_error(fmt::format("{}: is a symbolic link; refusing to follow it", path));
    if (f.fd < 0 && (errno == ENXIO || errno == EISDIR)) throw usage_error(fmt::format("{}: is not a regular file", path));
  }
  if (f.fd < 0) throw system_error_from_errno("open", path, errno);
  struct stat st{};
  if (::fstat(f.fd, &st) != 0) throw system_error_from_errno("stat", path, errno);
  if (!S_ISREG(st.st_mode)) throw usage_error(fmt::format("{}: is not a regular file", path));
  if (created) {
    if (::fchmod(f.fd, 0640) != 0) throw system_error_from_errno("chmod", path, errno);  // whatever the umask
  } else if (st.st_mode & S_IWOTH) {
    // msprobe's FileOpen (check_path_no_others_write) refuses to write such a file too.
    throw usage_error(fmt::format("{}: others may write it (mode {:o}); refusing to append to it", path,
                                  st.st_mode & 07777));
  }
  std::string text;
  if (st.st_size == 0) text = free_benchmark_csv_header();
  text += lines;
  write_all(f.fd, text, path);  // one write: rows of processes appending to one file stay whole
  const int fd = f.fd;
  f.fd = -1;
  if (::close(fd) != 0) throw system_error_from_errno("close", path, errno);
  return created;
}

namespace {

class csv_writer {
 public:
  csv_writer(stage_io &io, const free_benchmark_stage_options &o) : io_(io), o_(o) {
    if (!o_.dump_path.empty()) fixed_dump_path_ = path_check_create(o_.dump_path, "--dump-path");
  }

  free_benchmark_stage_result run() {
    while (auto r = io_.receive()) {
      ++res_.records;
      const auto &h = r->header;
      if (h.kind == record_kind::session && fixed_dump_path_.empty()) {
        const std::string path = h.meta.is_object() ? h.meta.value("dump_path", std::string("./dump_path"))
                                                    : std::string("./dump_path");
        sessions_[h.run] = path_check_create(path, "dump_path");
      } else if (free_benchmark_record_is(*r)) {
        row(*r);
      }
      io_.send(*r);
    }
    io_.finish();
    return res_;
  }

 private:
  const std::string &dump_path(const record &r) {
    if (!fixed_dump_path_.empty()) return fixed_dump_path_;
    auto it = sessions_.find(r.header.run);
    if (it == sessions_.end())
      throw usage_error(fmt::format("{}: free_benchmark record before its session record", r.describe()));
    return it->second;
  }

  void row(const record &r) {
    const free_benchmark_row row = free_benchmark_record_read(r);
    const std::string &root = dump_path(r);
    // msprobe's dump folder: "rank" without a number when the producer is not distributed.
    const std::string dir = r.header.rank < 0 ? fmt::format("step{}/rank", row.step)
                                              : fmt::format("step{}/rank{}", row.step, r.header.rank);
    const std::string path = fmt::format("{}/{}/free_benchmark.csv", root, dir);
    if (made_.insert(root + "/" + dir).second) safe_mkdirs(root, dir);
    const bool created = free_benchmark_csv_append(path, free_benchmark_csv_line(row));
    ++res_.rows;
    if (written_.insert(path).second) {
      ++res_.files;
      res_.created += created ? 1 : 0;
      res_.csv_paths.push_back(path);
    }
    if (o_.log) {
      fmt::print(o_.log, "{}\n", free_benchmark_stage_line(row));
      std::fflush(o_.log);
    }
  }

  stage_io &io_;
  const free_benchmark_stage_options &o_;
  std::string fixed_dump_path_;                  // --dump-path, checked
  std::map<std::string, std::string> sessions_;  // run id -> dump_path, checked
  std::set<std::string> made_, written_;         // folders made, files written
  free_benchmark_stage_result res_;
};

}  // namespace

free_benchmark_stage_result free_benchmark_stage_run(stage_io &io, const free_benchmark_stage_options &o) {
  return csv_writer(io, o).run();
}

}  // namespace tprobe
