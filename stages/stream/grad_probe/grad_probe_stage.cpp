// grad_probe_stage.cpp: see grad_probe_stage.h.
#include "grad_probe_stage.h"

#include <map>
#include <tuple>

#include <fmt/format.h>

#include "errors.h"
#include "grad_probe.h"
#include "grad_record.h"
#include "npy.h"
#include "safe_path.h"

namespace tprobe {

const stage_description &grad_probe_stage_description() {
  static const stage_description d{
      "grad-probe",
      "write msprobe's grad_probe files (grad_summary_{S}.csv, step{S}/{param}.npy) from gradient records",
      true,
      true,
      {
          {"dump-path", "string", "", "folder of rank{R}/ (default: the session's dump_path)"},
      }};
  return d;
}

namespace {

struct session_info {
  grad_probe_settings settings;
  std::string dump_path;
};

class grad_writer {
 public:
  grad_writer(stage_io &io, const grad_probe_stage_options &o) : io_(io), o_(o) {}

  grad_probe_stage_result run() {
    while (auto r = io_.receive()) {
      ++res_.records;
      const auto &h = r->header;
      if (h.kind == record_kind::session) {
        session_info s;
        s.settings = grad_probe_settings_from_json(h.meta.is_object() ? h.meta.value("grad_probe", nlohmann::ordered_json())
                                                                      : nlohmann::ordered_json(),
                                                   r->describe());
        s.dump_path = !o_.dump_path.empty() ? o_.dump_path
                      : h.meta.is_object()  ? h.meta.value("dump_path", std::string("./dump_path"))
                                            : std::string("./dump_path");
        s.dump_path = path_check_create(s.dump_path, "dump_path");
        sessions_[h.run] = std::move(s);
      } else if (grad_record_is(*r)) {
        gradient(*r);
      } else if (h.kind == record_kind::step_end) {
        write_csv(h.run, rank_of(h.rank), h.step);
      }
      io_.send(*r);
    }
    // Steps a producer never ended (a signal, a producer gone): written as they are.
    while (!rows_.empty()) {
      const auto &[run, rank, step] = rows_.begin()->first;
      write_csv(run, rank, step);
    }
    io_.finish();
    return res_;
  }

 private:
  static int32_t rank_of(int32_t r) { return r < 0 ? 0 : r; }

  const session_info &session(const record &r) {
    auto it = sessions_.find(r.header.run);
    if (it == sessions_.end())
      throw usage_error(fmt::format("{}: gradient record before its session record", r.describe()));
    return it->second;
  }

  void gradient(const record &r) {
    ++res_.gradients;
    const session_info &s = session(r);
    const grad_record_view v = grad_record_read(r);
    if (std::string problem = dump_name_problem(v.param); !problem.empty())
      throw usage_error(fmt::format("parameter name \"{}\" {}", v.param, problem));
    const int32_t rank = rank_of(r.header.rank);
    rows_[{r.header.run, rank, r.header.step}].push_back(csv_line(grad_csv_row(v.param, s.settings, v.numbers)));
    if (!s.settings.direction() || v.bits.size() != grad_sign_bytes(v.numbers.numel)) return;
    const std::string dir = fmt::format("rank{}/step{}", rank, r.header.step);
    safe_mkdirs(s.dump_path, dir);
    std::vector<std::byte> bools(v.numbers.numel);
    grad_sign_unpack(reinterpret_cast<const uint8_t *>(v.bits.data()), v.numbers.numel,
                     reinterpret_cast<uint8_t *>(bools.data()));
    npy_write(fmt::format("{}/{}/{}.npy", s.dump_path, dir, v.param), dtype::boolean, v.numbers.shape, bools);
    ++res_.npy_files;
  }

  void write_csv(const std::string &run, int32_t rank, int64_t step) {
    auto node = rows_.extract({run, rank, step});
    if (node.empty()) return;
    const session_info &s = sessions_.at(run);
    std::string text(csv_utf8_bom);
    text += csv_line(grad_csv_header(s.settings));
    for (const auto &row : node.mapped()) text += row;
    const std::string dir = fmt::format("rank{}", rank);
    safe_mkdirs(s.dump_path, dir);
    const std::string path = fmt::format("{}/{}/grad_summary_{}.csv", s.dump_path, dir, step);
    atomic_write_file(path, text);
    ++res_.csv_files;
    res_.csv_paths.push_back(path);
  }

  stage_io &io_;
  const grad_probe_stage_options &o_;
  std::map<std::string, session_info> sessions_;                                    // by run id
  std::map<std::tuple<std::string, int32_t, int64_t>, std::vector<std::string>> rows_;  // (run, rank, step)
  grad_probe_stage_result res_;
};

}  // namespace

grad_probe_stage_result grad_probe_stage_run(stage_io &io, const grad_probe_stage_options &o) {
  return grad_writer(io, o).run();
}

}  // namespace tprobe
