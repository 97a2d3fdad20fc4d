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

bool free_benchmark_csv_append(const std::string &path, const std::string &lines) {
  return safe_csv_append(path, free_benchmark_csv_header(), lines);
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
