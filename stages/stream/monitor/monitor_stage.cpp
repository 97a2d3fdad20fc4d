// monitor_stage.cpp: see monitor_stage.h.
#include "monitor_stage.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <regex>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "errors.h"
#include "monitor.h"
#include "monitor_record.h"
#include "pyjson.h"
#include "safe_path.h"
#include "tensorboard.h"

namespace tprobe {

const stage_description &monitor_stage_description() {
  static const stage_description d{
      "monitor",
      "write msprobe's training-monitor files (TrainerMon: {prefix}_{a}-{b}.csv, anomaly.json, TensorBoard "
      "event files) from the capture's monitor records and print each anomaly as it fires",
      true,
      true,
      {
          {"output-dir", "string", "", "folder of the rank folders and anomaly_detected/ (default: the session's "
                                       "output_dir, the capture's $MONITOR_OUTPUT_DIR)"},
      }};
  return d;
}

namespace {

constexpr const char *kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
constexpr int64_t kShanghaiOffset = 8 * 3600;  // UTC+8, no daylight saving since 1991

std::string random_id8() {
  std::random_device rd;
  return fmt::format("{:08x}", static_cast<uint32_t>(rd()));
}

// A folder name's time "%b%d_%H-%M-%S" as (month, day, hour, minute, second): msprobe's
// time_str2time_digit (strptime without a year) compares the same way.
std::optional<std::tuple<int, int, int, int, int>> time_tag_parse(const std::string &tag) {
  static const std::regex re(R"(^([A-Z][a-z]{2})(\d{2})_(\d{2})-(\d{2})-(\d{2})$)");
  std::smatch m;
  if (!std::regex_match(tag, m, re)) return std::nullopt;
  int month = -1;
  for (int i = 0; i < 12; ++i)
    if (m[1].str() == kMonths[i]) month = i;
  if (month < 0) return std::nullopt;
  return std::make_tuple(month, std::stoi(m[2].str()), std::stoi(m[3].str()), std::stoi(m[4].str()),
                         std::stoi(m[5].str()));
}

// The rank's folder of an earlier run whose time tag lies in [from, to] (msprobe's
// get_target_output_dir; its pattern "([\w-]{0,20})-rank(\d{1,5})-"), or "".
std::string append_output_dir(const std::string &output_dir, const nlohmann::ordered_json &range, int64_t rank) {
  if (!range.is_array() || range.size() != 2 || !range[0].is_string() || !range[1].is_string()) return {};
  const auto from = time_tag_parse(range[0].get<std::string>()), to = time_tag_parse(range[1].get<std::string>());
  if (!from || !to)
    throw usage_error(fmt::format("monitor config: field \"append_output\": {} is not two times %b%d_%H-%M-%S", range.dump()));
  static const std::regex re(R"(^([\w-]{0,20})-rank(\d{1,5})-)");
  std::error_code ec;
  std::string found;
  for (const auto &e : std::filesystem::directory_iterator(output_dir, ec)) {
    const std::string name = e.path().filename().string();
    std::smatch m;
    if (!std::regex_search(name, m, re) || std::stoll(m[2].str()) != rank) continue;
    const auto t = time_tag_parse(m[1].str());
    if (t && *from <= *t && *t <= *to && e.is_directory(ec)) found = e.path().string();  // msprobe: the last listed
  }
  return found;
}

// A session key the capture may put at the meta's top level or in its "monitor" object
// (core/capture_config.cpp config_for_monitor puts output_dir in both: dump_path and monitor.output_dir).
const nlohmann::ordered_json *session_value(const nlohmann::ordered_json &meta, const char *key) {
  if (auto v = meta.find(key); v != meta.end() && !v->is_null()) return &*v;
  const auto m = meta.find("monitor");
  if (m != meta.end() && m->is_object())
    if (auto v = m->find(key); v != m->end() && !v->is_null()) return &*v;
  return nullptr;
}

std::string session_text(const nlohmann::ordered_json &meta, const char *key) {
  const auto *v = session_value(meta, key);
  return v && v->is_string() ? v->get<std::string>() : std::string();
}

struct rank_state {
  monitor_config config;
  std::unique_ptr<monitor_anomaly_detector> detector;
  std::string rank_dir;                         // "" for format api or a rank module_ranks leaves out
  std::unique_ptr<tensorboard_writer> events;   // format tensorboard
  std::string anomaly_json;                     // "" without alert.dump
  nlohmann::ordered_json anomalies = nlohmann::ordered_json::object();  // the file's content
  int64_t pp_stage = 0;
  std::vector<int64_t> group_mates;
  bool writes = true;                           // module_ranks lets this rank write
};

class monitor_writer {
 public:
  monitor_writer(stage_io &io, const monitor_stage_options &o) : io_(io), o_(o) {
    if (!o_.output_dir.empty()) fixed_output_dir_ = path_check_create(o_.output_dir, "--output-dir");
  }

  monitor_stage_result run() {
    while (auto r = io_.receive()) {
      ++res_.records;
      if (r->header.kind == record_kind::session) {
        session(*r);
      } else if (monitor_record_is(*r)) {
        rows(*r);
      }
      io_.send(*r);
    }
    for (auto &[key, s] : ranks_)
      if (s.events) s.events->flush();
    io_.finish();
    return res_;
  }

 private:
  static int64_t rank_of(int32_t r) { return r < 0 ? 0 : r; }

  void session(const record &r) {
    const auto &meta = r.header.meta;
    if (!meta.is_object() || !meta.contains("monitor")) return;  // another task's session: passed on
    const std::string what = r.describe() + ": session meta";
    rank_state s;
    s.config = monitor_config_from_json(meta["monitor"], what + " \"monitor\"");
    s.detector = std::make_unique<monitor_anomaly_detector>(s.config.rules);
    const int64_t rank = rank_of(r.header.rank);
    s.pp_stage = rank;
    s.group_mates = {rank};
    if (const auto *p = session_value(meta, "pp_stage"); p && p->is_number_integer()) s.pp_stage = p->get<int64_t>();
    if (const auto *g = session_value(meta, "group_mates"); g && g->is_array()) {
      s.group_mates.clear();
      for (const auto &v : *g)
        if (v.is_number_integer()) s.group_mates.push_back(v.get<int64_t>());
    }
    const auto &ranks = s.config.module_ranks;
    s.writes = ranks.empty() || std::find(ranks.begin(), ranks.end(), rank) != ranks.end();

    std::string output_dir = fixed_output_dir_;
    if (output_dir.empty()) {
      std::string given = session_text(meta, "output_dir");
      if (given.empty()) given = session_text(meta, "dump_path");
      output_dir = path_check_create(given.empty() ? std::string("./monitor_output") : given, "output_dir");
    }
    if (s.writes && s.config.format != "api") {
      std::string dir = session_text(meta, "rank_dir");
      if (dir.empty() && r.header.rank >= 0 && s.config.json.contains("append_output"))
        dir = append_output_dir(output_dir, s.config.json["append_output"], rank);
      if (dir.empty()) {
        const auto now = std::chrono::system_clock::now();
        dir = output_dir + "/" +
              monitor_rank_dir_name(std::chrono::duration_cast<std::chrono::seconds>(now.time_since_epoch()).count(),
                                    rank, random_id8());
      }
      dir = path_check_create(dir, "the rank folder");
      safe_mkdirs(dir);
      s.rank_dir = dir;
      res_.rank_dirs.push_back(dir);
      if (s.config.format == "tensorboard") {
        s.events = std::make_unique<tensorboard_writer>(dir);
        res_.event_files.push_back(s.events->path());
      }
    }
    if (s.writes && s.config.alert_dump) {
      // msprobe's init_detected_json: the rank's anomaly.json starts empty at every start.
      const std::string rel = fmt::format("anomaly_detected/rank{}", rank);
      safe_mkdirs(output_dir, rel);
      s.anomaly_json = fmt::format("{}/{}/anomaly.json", output_dir, rel);
      atomic_write_file(s.anomaly_json, pyjson_dump(s.anomalies, 1));
      res_.anomaly_files.push_back(s.anomaly_json);
    }
    ranks_[{r.header.run, rank}] = std::move(s);
  }

  void rows(const record &r) {
    ++res_.monitor_records;
    auto it = ranks_.find({r.header.run, rank_of(r.header.rank)});
    if (it == ranks_.end())
      throw usage_error(fmt::format("{}: monitor record before its session record", r.describe()));
    rank_state &s = it->second;
    const monitor_record_view v = monitor_record_read(r);
    if (v.prefix == monitor_stack_info_slot) {
      // msprobe's write_stack_info: once, in the rank folder, never over an existing file
      // (append_output's earlier run keeps its own).
      if (!s.writes || s.rank_dir.empty()) return;
      const std::string path = s.rank_dir + "/stack_info.csv";
      std::error_code ec;
      if (std::filesystem::symlink_status(path, ec).type() != std::filesystem::file_type::not_found) return;
      if (safe_csv_append(path, "", monitor_stack_info_csv(v.stack_info))) res_.csv_paths.push_back(path);
      return;
    }
    if (!s.writes || v.rows.rows.empty()) return;  // msprobe writes nothing for an empty prefix
    res_.rows += v.rows.rows.size();

    if (s.config.format == "csv") {
      const std::string path = s.rank_dir + "/" + monitor_csv_file_name(v.prefix, v.rows.step, s.config.step_count_per_record);
      monitor_csv_append(path, monitor_csv_header(v.rows.ops, v.rows.micro_step), monitor_csv_lines(v.rows, s.config.ndigits));
      if (written_.insert(path).second) res_.csv_paths.push_back(path);
    } else if (s.events) {
      const double now = tensorboard_now();
      for (const auto &row : v.rows.rows) {
        size_t k = 0;
        for (const auto &op : v.rows.ops) {
          if (op == "shape" || op == "dtype") continue;  // msprobe's SummaryWriter cannot take them either
          if (k < row.values.size()) {
            s.events->add_scalar(row.tag + "_" + op, static_cast<float>(row.values[k].value), v.rows.step, now);
            ++res_.scalars;
          }
          ++k;
        }
      }
      s.events->flush();
    }

    const std::vector<monitor_anomaly> fired = s.detector->add_rows(v.rows);
    if (fired.empty()) return;
    res_.anomalies += fired.size();
    std::map<std::string, int64_t> call_ids;  // the capture's call_id of each row's tag
    for (const auto &row : v.rows.rows) call_ids.emplace(row.tag, row.call_id);
    for (const auto &a : fired) {
      if (o_.log) fmt::print(o_.log, "tprobe-monitor: {}\n", a.message());
      if (!s.anomaly_json.empty()) {
        const auto c = call_ids.find(a.tag);
        const int64_t call_id = c == call_ids.end() ? -1 : c->second;
        const auto data = monitor_anomaly_data_make(a, rank_of(r.header.rank), s.pp_stage, s.group_mates, call_id);
        s.anomalies[monitor_anomaly_key(a.tag, a.op, a.step, call_id)] = data.to_json();
      }
    }
    if (o_.log) std::fflush(o_.log);
    if (!s.anomaly_json.empty()) atomic_write_file(s.anomaly_json, pyjson_dump(s.anomalies, 1));
  }

  stage_io &io_;
  const monitor_stage_options &o_;
  std::string fixed_output_dir_;
  std::map<std::pair<std::string, int64_t>, rank_state> ranks_;  // (run, rank)
  std::set<std::string> written_;
  monitor_stage_result res_;
};

}  // namespace

std::string monitor_rank_dir_name(int64_t unix_seconds, int64_t rank, const std::string &id8) {
  const time_t t = static_cast<time_t>(unix_seconds + kShanghaiOffset);
  struct tm tm{};
  ::gmtime_r(&t, &tm);
  return fmt::format("{}{:02d}_{:02d}-{:02d}-{:02d}-rank{}-{}", kMonths[tm.tm_mon], tm.tm_mday, tm.tm_hour, tm.tm_min,
                     tm.tm_sec, rank, id8);
}

bool monitor_csv_append(const std::string &path, const std::string &header, const std::string &lines) {
  return safe_csv_append(path, header, lines);
}

monitor_stage_result monitor_stage_run(stage_io &io, const monitor_stage_options &o) {
  return monitor_writer(io, o).run();
}

}  // namespace tprobe
