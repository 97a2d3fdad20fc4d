// graph_run.cpp: see graph_run.h.
#include "graph_run.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <map>
#include <regex>
#include <set>

#include <fmt/format.h>

#include "compare_output.h"
#include "compare_tensor.h"
#include "errors.h"
#include "graph_build.h"
#include "graph_distributed.h"
#include "vis_db.h"

namespace tprobe {

const stage_description &graph_stage_description() {
  static const stage_description d{
      "graph",
      "build one run's model graph, or compare two runs node by node, into msprobe's .vis.db (msprobe graph_visualize)",
      false,
      false,
      {
          {"output", "string", "", "folder for the .vis.db (created 0750 if missing)", {}, {}, "-o", {}, true},
          {"fuzzy-match", "bool", "false",
           "match modules by name and the APIs inside two matched modules by name without call count and order "
           "(msprobe -fm)", {}, {}, "-f"},
          {"layer-mapping", "string", "",
           "mapping file of renamed layers: 'npu: bench' per line, node names or module paths (msprobe -lm)"},
          {"rule", "string", "levels",
           "precision index: levels (pass/warning/error where the runs part, ancestors coloured) or msprobe-8.3.3 "
           "(msprobe 8.3.3's numbers and colours)", {}, {}, {}, {"levels", "msprobe-8.3.3"}},
          {"threads", "int", "0", "tensor dumps: threads comparing tensors; 0 = one per hardware thread", 0, 4096},
      }};
  return d;
}

size_t graph_run_report::failing_ranks() const {
  return static_cast<size_t>(
      std::count_if(ranks.begin(), ranks.end(), [](const graph_rank_report &r) { return !r.compare.first_error_node.empty(); }));
}

namespace {

namespace fs = std::filesystem;

struct rank_folder {
  int64_t rank = 0;
  std::string name;  // "rank0", "rank", "" for a rank folder given directly
  std::string path;
};

struct step_folder {
  int64_t step = 0;
  std::string name;  // "step0", "" without a step level
  std::vector<rank_folder> ranks;
};

enum class layout { single, ranks, steps };

std::vector<std::string> subfolders(const std::string &path) {
  std::vector<std::string> out;
  std::error_code ec;
  fs::directory_iterator it(path, ec);
  if (ec) throw system_error(fmt::format("unable to read {}: {}", path, ec.message()));
  for (const auto &e : it) {
    std::error_code kind_ec;
    if (e.is_directory(kind_ec)) out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

int64_t number_after(const std::string &name, size_t prefix) {
  return name.size() > prefix ? std::stoll(name.substr(prefix)) : 0;
}

std::vector<rank_folder> rank_folders(const std::string &path, const std::vector<std::string> &names) {
  std::vector<rank_folder> out;
  for (const auto &n : names) out.push_back({number_after(n, 4), n, (fs::path(path) / n).string()});
  std::sort(out.begin(), out.end(), [](const auto &a, const auto &b) { return a.rank < b.rank; });
  return out;
}

// msprobe's check_directory_content: a rank folder, a folder of rank folders or of step folders.
std::pair<layout, std::vector<step_folder>> read_layout(const std::string &path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) throw usage_error(fmt::format("{}: no such folder", path));
  if (!fs::is_directory(path, ec)) throw usage_error(fmt::format("{}: not a folder (give a rank, step or dump folder)", path));
  if (fs::exists(fs::path(path) / "dump.json", ec)) return {layout::single, {{0, "", {{0, "", path}}}}};
  static const std::regex rank_re(R"(rank\d*)");
  static const std::regex step_re(R"(step\d+)");
  const std::vector<std::string> names = subfolders(path);
  auto all = [&](const std::regex &re) {
    return !names.empty() && std::all_of(names.begin(), names.end(), [&](const std::string &n) { return std::regex_match(n, re); });
  };
  if (all(rank_re)) return {layout::ranks, {{0, "", rank_folders(path, names)}}};
  if (all(step_re)) {
    std::vector<step_folder> steps;
    for (const auto &s : names) {
      const std::string step_path = (fs::path(path) / s).string();
      const std::vector<std::string> ranks = subfolders(step_path);
      if (ranks.empty() || !std::all_of(ranks.begin(), ranks.end(), [&](const std::string &n) { return std::regex_match(n, rank_re); }))
        throw usage_error(fmt::format("{}: expected rank folders (rank, rank0, rank1, …) in a step folder", step_path));
      steps.push_back({number_after(s, 4), s, rank_folders(step_path, ranks)});
    }
    std::sort(steps.begin(), steps.end(), [](const auto &a, const auto &b) { return a.step < b.step; });
    return {layout::steps, steps};
  }
  throw usage_error(fmt::format(
      "{}: neither a dump folder (dump.json) nor a folder of rank folders (rank0, …) or step folders (step0, …)", path));
}

void make_output_dir(const std::string &dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return;
  fs::create_directories(dir, ec);
  if (ec) throw system_error(fmt::format("unable to create {}: {}", dir, ec.message()));
  ::chmod(dir.c_str(), 0750);
}

}  // namespace

std::string graph_mapped_name(const std::string &name, const std::unordered_map<std::string, std::string> &mapping) {
  if (auto it = mapping.find(name); it != mapping.end()) return it->second;
  // "Module.<path>.<Class>.<forward|backward>.<n>": the path is between the prefix and the class.
  const size_t first = name.find('.');
  if (first == std::string::npos || name.compare(0, first, "Module") != 0) return name;
  std::vector<size_t> dots;
  for (size_t i = first; i < name.size(); ++i)
    if (name[i] == '.') dots.push_back(i);
  if (dots.size() < 4) return name;
  const size_t path_end = dots[dots.size() - 3];  // before "<Class>.<direction>.<n>"
  const std::string path = name.substr(first + 1, path_end - first - 1);
  // The longest mapped prefix of the path, on whole attribute names.
  for (size_t end = path.size(); end != std::string::npos && end > 0; end = path.rfind('.', end - 1)) {
    const std::string prefix = path.substr(0, end);
    if (auto it = mapping.find(prefix); it != mapping.end())
      return name.substr(0, first + 1) + it->second + path.substr(end) + name.substr(path_end);
    if (end == 0) break;
  }
  return name;
}

graph_run_report graph_run(const graph_run_options &o) {
  graph_run_report report;
  const bool compare = !o.bench_path.empty();
  const auto [npu_kind, npu_steps] = read_layout(o.npu_path);
  std::vector<step_folder> bench_steps;
  if (compare) {
    auto [bench_kind, steps] = read_layout(o.bench_path);
    if (bench_kind != npu_kind)
      throw usage_error(fmt::format("{} and {} are different kinds of folder (rank, ranks or steps): give two of a kind",
                                    o.npu_path, o.bench_path));
    bench_steps = std::move(steps);
  }
  std::unordered_map<std::string, std::string> mapping;
  if (!o.layer_mapping.empty()) {
    if (!compare) throw usage_error("--layer-mapping needs two runs to compare");
    mapping = compare_load_mapping(o.layer_mapping);
  }

  std::vector<graph> npu_graphs, bench_graphs;
  std::set<int64_t> rank_set, step_set;
  vis_db_config config;
  for (const step_folder &s : npu_steps) {
    const step_folder *bench_step = nullptr;
    if (compare) {
      for (const auto &b : bench_steps)
        if (b.name == s.name) bench_step = &b;
      if (!bench_step) {
        report.warnings.push_back(fmt::format("{} has no {} in {}: not compared", s.name, s.name, o.bench_path));
        continue;
      }
    }
    const size_t step_npu_begin = npu_graphs.size(), step_bench_begin = bench_graphs.size();
    for (const rank_folder &r : s.ranks) {
      const rank_folder *bench_rank = nullptr;
      if (compare) {
        for (const auto &b : bench_step->ranks)
          if (b.name == r.name) bench_rank = &b;
        if (!bench_rank) {
          report.warnings.push_back(fmt::format("{}: no {} on the bench side: not compared", r.path, r.name));
          continue;
        }
      }
      graph_rank_report rr;
      rr.step = s.step;
      rr.rank = r.rank;
      npu_graphs.push_back(graph_build(r.path, "NPU", s.step, r.rank));
      rr.nodes = npu_graphs.back().nodes.size();
      if (compare) {
        bench_graphs.push_back(graph_build(bench_rank->path, "Bench", s.step, r.rank));
        graph_compare_options co;
        co.fuzzy = o.fuzzy;
        co.rule = o.rule;
        if (!mapping.empty())
          for (const auto &n : npu_graphs.back().nodes)
            if (const std::string m = graph_mapped_name(n.name, mapping); m != n.name) co.layer_map.emplace(n.name, m);
        co.fill_real_data = [&o, &report](compare_table &t) {
          uint64_t bytes = 0;
          compare_fill_real_data(t, o.threads, &bytes, &report.warnings);
        };
        rr.compare = graph_compare(npu_graphs.back(), bench_graphs.back(), (fs::path(r.path) / "dump.json").string(),
                                   (fs::path(bench_rank->path) / "dump.json").string(), co);
        report.task = rr.compare.task;
      }
      config.micro_steps = std::max(config.micro_steps, npu_graphs.back().micro_steps);
      rank_set.insert(r.rank);
      step_set.insert(s.step);
      report.ranks.push_back(std::move(rr));
    }
    // Communication nodes linked across the step's ranks, on each side (after the compare: the
    // links carry the other node's index).
    auto link = [&](std::vector<graph> &graphs, size_t begin) {
      std::vector<graph *> step_graphs;
      for (size_t i = begin; i < graphs.size(); ++i) step_graphs.push_back(&graphs[i]);
      if (step_graphs.size() > 1) report.linked += graph_link_communications(step_graphs);
    };
    link(npu_graphs, step_npu_begin);
    link(bench_graphs, step_bench_begin);
  }
  if (report.ranks.empty())
    throw usage_error(fmt::format("{} and {}: no step and rank folder in common: nothing compared", o.npu_path, o.bench_path));

  make_output_dir(o.output_dir);
  report.db_path = (fs::path(o.output_dir) / fmt::format("{}_{}.vis.db", compare ? "compare" : "build", compare_timestamp())).string();
  config.graph_type = compare ? "compare" : "build";
  if (compare) {
    config.task = report.task;
    config.tool_tip = graph_tool_tip(report.task);
    config.node_colors = graph_node_colors(report.task, o.rule);
  } else {
    report.task = "build";
  }
  config.rank_list.assign(rank_set.begin(), rank_set.end());
  config.step_list.assign(step_set.begin(), step_set.end());
  std::vector<const graph *> all;
  for (const auto &g : npu_graphs) all.push_back(&g);
  for (const auto &g : bench_graphs) all.push_back(&g);
  vis_db_write(report.db_path, all, config);
  return report;
}

}  // namespace tprobe
