// report_monitor.cpp: the report's reader of a monitor output folder (report.h, "monitor"):
// tprobe-monitor's (or msprobe's TrainerMon's) {output_dir}/{time}-rank{R}-{uuid8}/{prefix}_{a}-{b}.csv
// and {output_dir}/anomaly_detected/rank{R}/anomaly.json, read into per-tag series.
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <regex>

#include <fmt/format.h>

#include "errors.h"
#include "precheck_files.h"
#include "pyjson.h"
#include "report.h"

namespace tprobe {

namespace fs = std::filesystem;

namespace {

// msprobe's rank folder: "{%b%d_%H-%M-%S}-rank{R}-{uuid4[:8]}" (its append_output finds them by
// "([\w-]{0,20})-rank(\d{1,5})-"); the uuid part is checked too, so that a dump's "rank0" or a
// user's folder is not taken for one.
const std::regex &rank_dir_pattern() {
  static const std::regex re(R"(^[\w-]{0,20}-rank(\d{1,5})-[0-9a-f]{8}$)");
  return re;
}

const std::regex &csv_name_pattern() {
  static const std::regex re(R"(^([a-z_]+)_(\d+)-(\d+)\.csv$)");
  return re;
}

std::optional<double> cell_number(const std::string &s) {
  if (s == "nan") return std::nan("");
  if (s == "inf") return HUGE_VAL;
  if (s == "-inf") return -HUGE_VAL;
  if (s.empty() || s == " ") return std::nullopt;
  char *end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

std::optional<int64_t> cell_integer(const std::string &s) {
  auto v = cell_number(s);
  if (!v || !std::isfinite(*v) || *v != std::floor(*v)) return std::nullopt;
  return static_cast<int64_t>(*v);
}

// The csv prefix whose file holds a tag's numbers, from the tag's last part (msprobe's tags,
// docs/msprobe-compat.md §9.4): "0:fc.weight/rank0/post_grad" → grad_reduced.
std::string prefix_of_tag(const std::string &tag_name) {
  const std::string kind = tag_name.substr(tag_name.rfind('/') + 1);
  if (kind == "post_grad") return "grad_reduced";
  if (kind == "pre_grad" || kind == "acc_grad") return "grad_unreduced";
  static const char *same[] = {"actv", "actv_grad", "exp_avg", "exp_avg_sq", "param_origin", "param_updated"};
  for (const char *s : same)
    if (kind == s) return kind;
  return "other";
}

// The op of an anomaly: its "op" (tprobe's anomaly.json keeps it) or msprobe's message
// "… anomaly signal in ('TAG', 'OP') at step …".
std::string op_of_anomaly(const nlohmann::ordered_json &a) {
  if (auto op = a.find("op"); op != a.end() && op->is_string()) return op->get<std::string>();
  const std::string message = a.value("message", std::string());
  static const std::regex re(R"(, '([a-z_]+)'\) at step )");
  std::smatch m;
  return std::regex_search(message, m, re) ? m[1].str() : std::string();
}

void read_csv(const fs::path &file, int64_t rank, const std::string &prefix, report_monitor &out,
              std::map<std::string, std::map<std::string, size_t>> &tag_index) {
  const precheck::csv_table t = precheck::read_csv_table(file);
  const auto &h = t.header;
  if (h.size() < 3 || h[0] != "vpp_stage" || h[1] != "name" || h[2] != "step")
    throw usage_error(fmt::format("{}: not a monitor csv: its header does not start with vpp_stage,name,step", file.string()));
  const size_t first_op = h.size() > 3 && h[3] == "micro_step" ? 4 : 3;
  std::vector<std::string> ops;
  std::vector<size_t> op_columns;
  for (size_t j = first_op; j < h.size(); ++j)
    if (h[j] != "shape" && h[j] != "dtype") ops.push_back(h[j]), op_columns.push_back(j);
  auto type = std::find_if(out.types.begin(), out.types.end(), [&](const auto &x) { return x.prefix == prefix; });
  if (type == out.types.end()) {
    out.types.push_back({prefix, ops, {}});
    type = std::prev(out.types.end());
  } else if (type->ops != ops) {
    // Another rank or step range with other ops (a dynamic restart with a new config): the union.
    for (const auto &op : ops)
      if (std::find(type->ops.begin(), type->ops.end(), op) == type->ops.end()) {
        type->ops.push_back(op);
        for (auto &tag : type->tags)
          for (auto &s : tag.ranks) s.values.emplace_back(s.steps.size(), std::nan(""));
      }
  }
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const auto &row = t.rows[i];
    if (row.size() != h.size())
      throw usage_error(fmt::format("{}: row {}: {} cells, not {} (a truncated or foreign file)", file.string(), i + 2,
                                    row.size(), h.size()));
    const auto step = cell_integer(row[2]);
    if (!step) throw usage_error(fmt::format("{}: row {}: step \"{}\" is not an integer", file.string(), i + 2, row[2]));
    std::string name = row[0] + ":" + row[1];
    if (first_op == 4) name += ":" + row[3];
    auto &index = tag_index[prefix];
    auto [at, added] = index.emplace(name, type->tags.size());
    if (added) type->tags.push_back({name, {}});
    auto &tag = type->tags[at->second];
    auto s = std::find_if(tag.ranks.begin(), tag.ranks.end(), [&](const auto &x) { return x.rank == rank; });
    if (s == tag.ranks.end()) {
      tag.ranks.push_back({rank, {}, std::vector<std::vector<double>>(type->ops.size())});
      s = std::prev(tag.ranks.end());
    }
    s->steps.push_back(*step);
    for (size_t k = 0; k < type->ops.size(); ++k) {
      const auto col = std::find(ops.begin(), ops.end(), type->ops[k]);
      double v = std::nan("");
      if (col != ops.end()) {
        const std::string &cell = row[op_columns[static_cast<size_t>(col - ops.begin())]];
        const auto n = cell_number(cell);
        if (!n)
          throw usage_error(fmt::format("{}: row {}: {} \"{}\" is not a number", file.string(), i + 2,
                                        type->ops[k], cell));
        v = *n;
      }
      s->values[k].push_back(v);
    }
  }
}

}  // namespace

bool report_is_monitor_rank_dir(const std::string &name) { return std::regex_match(name, rank_dir_pattern()); }

report_monitor report_read_monitor(const std::string &dir) {
  report_monitor m;
  m.dir = dir;
  std::error_code ec;
  std::vector<std::pair<int64_t, fs::path>> rank_dirs;
  for (const auto &e : fs::directory_iterator(dir, ec)) {
    std::smatch match;
    const std::string name = e.path().filename().string();
    if (e.is_directory(ec) && std::regex_match(name, match, rank_dir_pattern()))
      rank_dirs.emplace_back(std::stoll(match[1].str()), e.path());
  }
  if (ec) throw system_error(fmt::format("unable to list {}: {}", dir, ec.message()));
  std::sort(rank_dirs.begin(), rank_dirs.end());
  std::map<std::string, std::map<std::string, size_t>> tag_index;  // prefix → tag → index
  for (const auto &[rank, path] : rank_dirs) {
    m.rank_dirs.push_back(path.string());
    if (std::find(m.ranks.begin(), m.ranks.end(), rank) == m.ranks.end()) m.ranks.push_back(rank);
    // Files by prefix, then by their first step (numerically: 10-19 after 2-3).
    std::vector<std::tuple<std::string, int64_t, fs::path>> files;
    for (const auto &e : fs::directory_iterator(path, ec)) {
      std::smatch match;
      const std::string name = e.path().filename().string();
      if (e.is_regular_file(ec) && std::regex_match(name, match, csv_name_pattern()))
        files.emplace_back(match[1].str(), std::stoll(match[2].str()), e.path());
      else if (name.rfind("events.out.tfevents.", 0) == 0)
        m.event_files.push_back(e.path().string());
    }
    if (ec) throw system_error(fmt::format("unable to list {}: {}", path.string(), ec.message()));
    std::sort(files.begin(), files.end());
    for (const auto &[prefix, start, file] : files) {
      read_csv(file, rank, prefix, m, tag_index);
      m.csv_files.push_back(file.string());
    }
  }
  // Each series in step order (a rank's files were read in order; duplicates keep file order).
  for (auto &type : m.types)
    for (auto &tag : type.tags)
      for (auto &s : tag.ranks) {
        std::vector<size_t> order(s.steps.size());
        for (size_t i = 0; i < order.size(); ++i) order[i] = i;
        std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return s.steps[a] < s.steps[b]; });
        auto steps = s.steps;
        for (size_t i = 0; i < order.size(); ++i) s.steps[i] = steps[order[i]];
        for (auto &v : s.values) {
          auto copy = v;
          for (size_t i = 0; i < order.size(); ++i) v[i] = copy[order[i]];
        }
      }

  const fs::path anomalies = fs::path(dir) / "anomaly_detected";
  if (fs::is_directory(anomalies, ec)) {
    std::vector<fs::path> jsons;
    for (const auto &e : fs::directory_iterator(anomalies, ec))
      if (fs::is_regular_file(e.path() / "anomaly.json", ec)) jsons.push_back(e.path() / "anomaly.json");
    std::sort(jsons.begin(), jsons.end());
    for (const auto &j : jsons) {
      m.anomaly_files.push_back(j.string());
      const auto doc = pyjson_load_file(j.string());
      if (!doc.is_object()) throw usage_error(fmt::format("{}: not an anomaly.json: not a JSON object", j.string()));
      for (const auto &[key, a] : doc.items()) {
        if (!a.is_object() || !a.contains("tag_name") || !a["tag_name"].is_string() || !a.contains("step") ||
            !a["step"].is_number_integer())
          throw usage_error(fmt::format("{}: entry \"{}\": no tag_name or integer step", j.string(), key));
        report_monitor_anomaly x;
        x.tag_name = a["tag_name"].get<std::string>();
        x.name = x.tag_name.substr(0, x.tag_name.find('/'));
        x.prefix = prefix_of_tag(x.tag_name);
        x.op = op_of_anomaly(a);
        x.step = a["step"].get<int64_t>();
        x.rank = a.value("rank", int64_t{0});
        x.message = a.value("message", std::string());
        m.anomalies.push_back(std::move(x));
      }
    }
  }
  std::stable_sort(m.anomalies.begin(), m.anomalies.end(), [](const auto &a, const auto &b) {
    return std::tie(a.step, a.rank) < std::tie(b.step, b.rank);
  });
  if (m.rank_dirs.empty() && m.anomaly_files.empty())
    throw usage_error(fmt::format("{}: no monitor rank folder ({{time}}-rank{{R}}-{{uuid8}}) or anomaly_detected/rank*/anomaly.json", dir));
  return m;
}

}  // namespace tprobe
