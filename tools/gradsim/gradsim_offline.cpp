// gradsim_offline.cpp: tprobe-gradsim, two grad_probe dumps compared (gradsim.h).
#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <fmt/format.h>

#include "errors.h"
#include "grad_probe.h"
#include "gradsim.h"
#include "npy.h"

namespace tprobe {

namespace fs = std::filesystem;

const stage_description &gradsim_stage_description() {
  static const stage_description d{
      "gradsim",
      "compare two grad_probe dumps: gradient-direction similarity per parameter and step, first suspect step "
      "(msprobe GradComparator)",
      false,
      false,
      {
          {"output", "string", "./output", "folder for rank{N}/similarities.csv and rank{N}/similarities_picture/", {}, {}, "-o"},
      }};
  return d;
}

namespace {

// "rank3" → 3 for prefix "rank"; nullopt for anything else (msprobe: prefix + digits).
std::optional<int64_t> numbered(const std::string &name, const std::string &prefix) {
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size() || name.size() - prefix.size() > 18) return std::nullopt;
  const std::string digits = name.substr(prefix.size());
  if (!std::all_of(digits.begin(), digits.end(), [](unsigned char c) { return std::isdigit(c); })) return std::nullopt;
  return std::stoll(digits);
}

// The numbers of the folders "{prefix}{N}" in dir.
std::set<int64_t> numbered_dirs(const std::string &dir, const std::string &prefix) {
  std::set<int64_t> found;
  std::error_code ec;
  for (const auto &e : fs::directory_iterator(dir, ec)) {
    auto n = numbered(e.path().filename().string(), prefix);
    std::error_code is_dir;
    if (n && e.is_directory(is_dir)) found.insert(*n);
  }
  if (ec) throw system_error(fmt::format("unable to read {}: {}", dir, ec.message()));
  return found;
}

// Folders "{prefix}{N}" of both sides, by number. msprobe pairs those present in both and passes
// over the others in silence; here a folder one side lacks is a usage error naming that side, since
// a verdict would otherwise be about part of the data. Empty when neither side has any.
std::vector<int64_t> matched_dirs(const std::string &dir1, const std::string &dir2, const std::string &prefix) {
  const auto one = numbered_dirs(dir1, prefix), two = numbered_dirs(dir2, prefix);
  for (int64_t n : one)
    if (!two.count(n))
      throw usage_error(fmt::format("{} has no {}{}, which {} has: dump both runs with the same configuration", dir2,
                                    prefix, n, dir1));
  for (int64_t n : two)
    if (!one.count(n))
      throw usage_error(fmt::format("{} has no {}{}, which {} has: dump both runs with the same configuration", dir1,
                                    prefix, n, dir2));
  return {one.begin(), one.end()};
}

std::string read_text(const std::string &path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) throw system_error(fmt::format("unable to open {}", path));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// The param_name column of the first grad summary csv present in both (lowest step first).
std::vector<std::string> param_order(const std::string &path1, const std::string &path2) {
  std::vector<std::pair<int64_t, std::string>> csvs;
  std::error_code ec;
  for (const auto &e : fs::directory_iterator(path1, ec)) {
    const std::string name = e.path().filename().string();
    if (name.size() < 4 || name.compare(name.size() - 4, 4, ".csv") != 0) continue;
    if (!fs::exists(fs::path(path2) / name, ec)) continue;
    const auto step = numbered(name.substr(0, name.size() - 4), "grad_summary_");
    csvs.emplace_back(step.value_or(INT64_MAX), name);
  }
  if (csvs.empty())
    throw usage_error(fmt::format("no grad_summary csv in both {} and {}: dump both runs with the same configuration",
                                  path1, path2));
  std::sort(csvs.begin(), csvs.end());
  const std::string path = path1 + "/" + csvs.front().second;
  std::string text = read_text(path);
  if (text.rfind(csv_utf8_bom, 0) == 0) text.erase(0, csv_utf8_bom.size());
  std::istringstream lines(text);
  std::string line;
  std::vector<std::string> params;
  std::optional<size_t> column;
  while (std::getline(lines, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const auto cells = csv_split(line);
    if (!column) {
      auto it = std::find(cells.begin(), cells.end(), "param_name");
      if (it == cells.end()) throw usage_error(fmt::format("{}: no param_name column", path));
      column = static_cast<size_t>(it - cells.begin());
    } else if (*column < cells.size()) {
      params.push_back(cells[*column]);
    }
  }
  // A header alone would compare nothing and answer "no suspect step" about no data.
  if (params.empty()) throw usage_error(fmt::format("{}: no parameter rows (a header alone, or an empty file)", path));
  return params;
}

// Agreeing and total elements of one parameter's direction files at one step.
std::pair<uint64_t, uint64_t> compare_files(const std::string &f1, const std::string &f2) {
  const npy_mapped a(f1), b(f2);
  if (a.shape() != b.shape()) throw usage_error(fmt::format("tensor shape is not equal: {}, {}", f1, f2));
  for (const auto *m : {&a, &b})
    if (m->type() != dtype::boolean) throw usage_error(fmt::format("tensor type is not bool: {}", m->path()));
  const auto *x = reinterpret_cast<const uint8_t *>(a.data().data());
  const auto *y = reinterpret_cast<const uint8_t *>(b.data().data());
  return {grad_bool_agreement(x, y, a.element_count()), a.element_count()};
}

gradsim_rank compare_rank(const std::string &path1, const std::string &path2, int32_t rank) {
  gradsim_rank out;
  out.rank = rank;
  const auto steps = matched_dirs(path1, path2, "step");
  if (steps.empty())
    throw usage_error(fmt::format("no step folders in {} nor in {} (level L0 writes no direction files)", path1,
                                  path2));
  const auto params = param_order(path1, path2);
  for (int64_t step : steps) {
    const std::string s1 = fmt::format("{}/step{}", path1, step), s2 = fmt::format("{}/step{}", path2, step);
    for (const auto &param : params) {
      const std::string f1 = s1 + "/" + param + ".npy", f2 = s2 + "/" + param + ".npy";
      std::error_code ec;
      for (const auto &[lacking, other] : {std::pair{&s1, &s2}, std::pair{&s2, &s1}})
        if (!fs::exists(*lacking + "/" + param + ".npy", ec))
          throw usage_error(fmt::format("{} has no direction file {}.npy{}: dump both runs with the same configuration",
                                        *lacking, param,
                                        fs::exists(*other + "/" + param + ".npy", ec) ? ", which " + *other + " has" : ""));
      const auto [same, total] = compare_files(f1, f2);
      out.table.add(step, param, same, total);
    }
  }
  out.table.set_order(params);
  out.first = grad_first_suspect(out.table);
  return out;
}

}  // namespace

std::vector<gradsim_rank> gradsim_offline_run(const gradsim_offline_options &o) {
  for (const auto *d : {&o.dir1, &o.dir2}) {
    std::error_code ec;
    if (!fs::is_directory(*d, ec)) throw usage_error(fmt::format("{}: not a directory", *d));
  }
  const auto ranks = matched_dirs(o.dir1, o.dir2, "rank");
  if (ranks.empty())
    throw usage_error(fmt::format("no rank folders (rank0, rank1, …) in {} nor in {}", o.dir1, o.dir2));
  std::vector<gradsim_rank> out;
  for (int64_t r : ranks) {
    gradsim_rank g = compare_rank(fmt::format("{}/rank{}", o.dir1, r), fmt::format("{}/rank{}", o.dir2, r),
                                  static_cast<int32_t>(r));
    g.files = gradsim_write_rank(o.output_dir, g.rank, g.table);
    out.push_back(std::move(g));
  }
  return out;
}

}  // namespace tprobe
