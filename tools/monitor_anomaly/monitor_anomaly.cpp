// monitor_anomaly.cpp: see monitor_anomaly.h.
#include "monitor_anomaly.h"

#include <algorithm>
#include <filesystem>
#include <tuple>

#include <fmt/format.h>

#include "errors.h"
#include "pyjson.h"
#include "safe_path.h"

namespace tprobe {

namespace fs = std::filesystem;

const stage_description &monitor_anomaly_stage_description() {
  static const stage_description d{
      "monitor-anomaly",
      "msprobe's anomaly_processor: the top-k anomalies of a monitor's anomaly_detected/*/anomaly.json by msprobe's "
      "order, written to anomaly_analyse.json",
      false,
      false,
      {
          {"data-path", "string", "", "the anomaly_detected folder (msprobe's -d/--data_path)", {}, {}, "-d"},
          {"out-path", "string", "", "folder of anomaly_analyse.json (default: the data path; msprobe's --out_path)", {}, {}, "-o"},
          {"topk", "int", "8", "how many of the earliest anomalies to keep", 1, {}, "-k"},
          {"step", "string", "[]", "the steps to keep, a Python list (\"[2, 3]\"; [] keeps every step)", {}, {}, "-s"},
      }};
  return d;
}

std::vector<int64_t> monitor_anomaly_steps_parse(const std::string &text) {
  // msprobe's ast.literal_eval + isinstance(list): a list of integer literals is JSON's too.
  nlohmann::ordered_json v;
  try {
    v = pyjson_parse(text, "--step");
  } catch (const usage_error &) {
    v = nullptr;
  }
  std::vector<int64_t> steps;
  bool ok = v.is_array();
  if (ok)
    for (const auto &s : v) {
      if (!s.is_number_integer()) {
        ok = false;
        break;
      }
      steps.push_back(s.get<int64_t>());
    }
  if (!ok) throw usage_error(fmt::format("--step \"{}\": the step list must be a list of integers, such as \"[2, 3]\"", text));
  return steps;
}

namespace {

// Sub-folders by the number after "rank" (rank2 before rank10), then by name.
std::vector<fs::path> rank_folders(const fs::path &dir) {
  std::vector<std::tuple<int64_t, std::string, fs::path>> found;
  std::error_code ec;
  for (const auto &e : fs::directory_iterator(dir, ec)) {
    if (!e.is_directory(ec)) continue;
    const std::string name = e.path().filename().string();
    int64_t n = -1;
    if (name.rfind("rank", 0) == 0 && name.size() > 4 &&
        std::all_of(name.begin() + 4, name.end(), [](char c) { return c >= '0' && c <= '9'; }) && name.size() < 15)
      n = std::stoll(name.substr(4));
    found.emplace_back(n, name, e.path());
  }
  if (ec) throw system_error(fmt::format("unable to list {}: {}", dir.string(), ec.message()));
  std::sort(found.begin(), found.end());
  std::vector<fs::path> out;
  for (auto &f : found) out.push_back(std::get<2>(f));
  return out;
}

void require_folder(const std::string &path, const std::string &what) {
  std::error_code ec;
  if (!fs::is_directory(path, ec)) throw usage_error(fmt::format("{} \"{}\": is not a folder", what, path));
}

}  // namespace

monitor_anomaly_result monitor_anomaly_run(const monitor_anomaly_options &o) {
  if (o.data_path.empty()) throw usage_error("--data-path (-d) is required: the anomaly_detected folder");
  if (o.top_k < 1) throw usage_error(fmt::format("--topk {}: the top k number must be greater than 0", o.top_k));
  const std::vector<int64_t> steps = monitor_anomaly_steps_parse(o.steps);
  require_folder(o.data_path, "--data-path");
  const std::string out_dir = o.out_path.empty() ? o.data_path : o.out_path;
  require_folder(out_dir, "--out-path");

  monitor_anomaly_result res;
  std::vector<std::pair<std::string, monitor_anomaly_data>> all;
  for (const auto &dir : rank_folders(o.data_path)) {
    const fs::path file = dir / "anomaly.json";
    std::error_code ec;
    if (!fs::is_regular_file(file, ec)) continue;
    res.files.push_back(file.string());
    const auto doc = pyjson_load_file(file.string());
    if (!doc.is_object()) throw usage_error(fmt::format("{}: not an anomaly.json: not a JSON object", file.string()));
    for (const auto &[key, value] : doc.items()) {
      ++res.anomalies;
      std::string why;
      auto a = monitor_anomaly_data_from_json(value, &why);
      if (!a) {
        res.warnings.push_back(fmt::format("{}: {}: {}", file.string(), key, why));
        continue;
      }
      if (!steps.empty() && std::find(steps.begin(), steps.end(), a->step) == steps.end()) continue;
      all.emplace_back(key, std::move(*a));
    }
  }
  // monitor_anomaly_top_k's order (msprobe's sorted / heapq.nsmallest), on the entries with their keys.
  std::stable_sort(all.begin(), all.end(), [](const auto &a, const auto &b) { return monitor_anomaly_less(a.second, b.second); });
  if (all.size() > static_cast<size_t>(o.top_k)) all.resize(static_cast<size_t>(o.top_k));

  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const auto &[key, a] : all) out[key] = a.to_json();
  res.output = (fs::path(out_dir) / "anomaly_analyse.json").string();
  atomic_write_file(res.output, pyjson_dump(out, 1));
  res.top = std::move(all);
  return res;
}

}  // namespace tprobe
