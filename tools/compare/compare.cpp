#include "compare.h"

#include <dlfcn.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <regex>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "errors.h"
#include "npy.h"
#include "pyjson.h"
#include "safe_path.h"

namespace tprobe {

namespace fs = std::filesystem;

size_t compare_report::failing_rows() const {
  size_t n = 0;
  for (const auto &p : pairs) n += p.failing;
  return n;
}

size_t compare_report::error_rows() const {
  size_t n = 0;
  for (const auto &p : pairs) n += p.errors;
  return n;
}

const stage_description &compare_stage_description() {
  static const stage_description d{
      "compare",
      "compare two dumps (dump.json files, rank folders or step folders) into msprobe's compare_result xlsx/csv/json and advisor",
      false,
      false,
      {
          {"output", "string", "", "folder for the result files (created 0750 if missing)", {}, {}, "-o", {}, true},
          {"fuzzy-match", "bool", "false", "match names without their call count (msprobe -f)", {}, {}, "-f"},
          {"stack-mode", "bool", "false", "add NPU_Stack_Info from the NPU dump's stack.json (msprobe -s)", {}, {}, "-s"},
          {"highlight", "bool", "false", "colour suspicious rows red/yellow and say why (msprobe -hl)"},
          {"mapping", "string", "", "data mapping file, 'npu name: bench name' per line (msprobe -dm)"},
          {"compare-only", "bool", "false", "write no advisor file (msprobe -c)", {}, {}, "-c"},
          {"threads", "int", "0", "threads comparing tensors; 0 = one per hardware thread", 0, 4096},
          {"match", "string", "auto",
           "how rows are paired: auto (align calls by family and shapes, then slots; adds the Match column) or name "
           "(msprobe's name matching; --fuzzy-match and --mapping imply it)", {}, {}, {}, {"auto", "name"}},
      }};
  return d;
}


namespace {

struct run_context {
  const compare_options &options;
  const std::unordered_map<std::string, std::string> *mapping;
  std::string output_dir;
  compare_report &report;
};

// The result files of one pair, under names no other compare holds (compare_output_claim); a
// failure removes them all, so a folder never holds part of a result.
compare_output_files write_pair_files(const run_context &ctx, const compare_table &table,
                                      const compare_pair_report &pr, bool highlighted) {
  const std::string suffix = pr.rank.empty() ? "" : "_" + pr.rank;
  const compare_output_files files =
      compare_output_claim(ctx.output_dir, suffix, compare_timestamp(), ctx.options.advisor);
  try {
    compare_write_xlsx(table, files.xlsx, highlighted);
    compare_write_csv(table, files.csv);
    compare_write_json(table, files.json, pr.rank, highlighted, ctx.options.advisor ? &pr.advisor : nullptr);
    if (ctx.options.advisor) compare_write_advisor(pr.advisor, files.advisor);
  } catch (...) {
    compare_output_release(files);
    throw;
  }
  return files;
}

// "line 3, NAME: ERR_MESSAGE" of error row i (its first line: --highlight may add more).
std::string first_error_line(const compare_table &table, size_t i) {
  const std::string &message = table.rows[i].err_message;
  return fmt::format("line {}, {}: {}", i, table.npu->rows[table.rows[i].npu].name,
                     message.substr(0, message.find('\n')));
}

void compare_pair(run_context &ctx, const std::string &npu_json, const std::string &bench_json, const std::string &rank) {
  const auto start = std::chrono::steady_clock::now();
  auto bench_future = std::async(std::launch::async, [&] { return dump_load(bench_json, "bench"); });
  dump_file npu = dump_load(npu_json, "NPU");
  dump_file bench = bench_future.get();
  const compare_mode mode = dump_mode(npu, bench);

  stack_map stacks;
  if (ctx.options.stack_mode) {
    const bool given = !ctx.options.stack_path.empty();
    const std::string stack_path =
        given ? ctx.options.stack_path : (fs::path(npu_json).parent_path() / "stack.json").string();
    struct stat st {};
    if (::stat(stack_path.c_str(), &st) != 0)
      throw usage_error(given ? fmt::format("stack file {}: not found", stack_path)
                              : fmt::format("--stack-mode: no stack.json beside the NPU dump: {}", stack_path));
    stacks = stack_load(stack_path);
  }
  compare_table_options topt;
  topt.mode = mode;
  topt.match = ctx.options.match;
  topt.fuzzy_match = ctx.options.fuzzy_match;
  topt.stack_mode = ctx.options.stack_mode;
  topt.mapping = ctx.mapping;
  topt.npu_stacks = ctx.options.stack_mode ? &stacks : nullptr;
  compare_table table = compare_table_build(npu, bench, topt);

  compare_pair_report pr;
  pr.rank = rank;
  pr.npu_path = npu_json;
  pr.bench_path = bench_json;
  pr.mode = mode;
  if (table.rows.empty()) {
    ctx.report.warnings.push_back(fmt::format("{}: can't match any op (the NPU dump has no rows); no compare result "
                                              "file generated",
                                              npu_json));
    ctx.report.pairs.push_back(std::move(pr));
    return;
  }
  if (mode == compare_mode::all) compare_fill_real_data(table, ctx.options.threads, &pr.tensor_bytes, &ctx.report.warnings);
  const bool highlighted = ctx.options.highlight && table.rows.size() <= compare_max_excel_rows;
  if (highlighted) compare_table_highlight(table);
  pr.advisor = compare_table_advise(table);
  for (const auto &w : pr.advisor.unmatched_warnings) ctx.report.warnings.push_back(w);

  pr.files = write_pair_files(ctx, table, pr, highlighted);
  pr.rows = table.rows.size();
  pr.match = table.options.match;
  const compare_match_counts counts = compare_table_match_counts(table);
  pr.paired_by_name = counts.name;
  pr.aligned = counts.aligned;
  for (size_t i = 0; i < table.rows.size(); ++i) {
    pr.failing += compare_row_failing(table, i) ? 1 : 0;
    pr.unmatched += table.rows[i].bench ? 0 : 1;
    if (compare_row_error(table, i) && pr.errors++ == 0) pr.first_error = first_error_line(table, i);
  }
  pr.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ctx.report.pairs.push_back(std::move(pr));
}

// msprobe's get_sorted_ranks: only rank, rank0, rank1, … inside a step folder; sorted by number,
// "rank" first.
std::vector<std::string> sorted_ranks(const std::string &dir, const std::string &side) {
  static const std::regex pattern("^rank(?:0|[1-9][0-9]*)?$");
  std::vector<std::string> ranks;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (!std::regex_match(name, pattern))
      throw usage_error(fmt::format("{} step folder {}: contains '{}'; expected only rank folders (rank, rank0, "
                                    "rank1, ...)",
                                    side, dir, name));
    ranks.push_back(name);
  }
  if (ec) throw system_error_from_errno("read", dir, ec.value());
  const auto number = [](const std::string &r) { return r.size() > 4 ? std::stoll(r.substr(4)) : -1LL; };
  std::sort(ranks.begin(), ranks.end(), [&](const auto &a, const auto &b) { return number(a) < number(b); });
  return ranks;
}

bool is_file(const std::string &p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// What one side of a compare names: a dump.json, a rank folder holding one (as msprobe's compare
// takes), or a step folder of rank folders.
struct compare_side {
  bool step_folder = false;
  std::string dump_json;  // when not a step folder
  std::string rank;       // the rank folder's name ("rank0"), for the result names; "" otherwise
};

compare_side resolve_side(const std::string &path, const char *side) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw system_error_from_errno("open", path, errno);
  if (!S_ISDIR(st.st_mode)) {
    if (!path.ends_with("dump.json"))
      throw usage_error(fmt::format("{} {}: expected a dump.json file, a rank folder or a step folder", side, path));
    return {false, path, ""};
  }
  const std::string inside = (fs::path(path) / "dump.json").string();
  if (!is_file(inside)) return {true, "", ""};
  static const std::regex rank_name("^rank(?:0|[1-9][0-9]*)?$");
  std::string name = fs::path(path).lexically_normal().filename().string();
  if (name.empty()) name = fs::path(path).lexically_normal().parent_path().filename().string();  // "…/rank0/"
  return {false, inside, std::regex_match(name, rank_name) ? name : ""};
}

}  // namespace

compare_report compare_run(const compare_options &options) {
  if (options.npu_path.empty() || options.bench_path.empty()) throw usage_error("NPU and BENCH paths are required");
  const compare_side npu = resolve_side(options.npu_path, "NPU"), bench = resolve_side(options.bench_path, "bench");
  const bool npu_dir = npu.step_folder;
  if (npu.step_folder != bench.step_folder)
    throw usage_error(fmt::format("NPU {} and bench {}: a step folder pairs only with a step folder (ranks by position); "
                                  "give a rank folder or a dump.json on both sides to compare one rank",
                                  options.npu_path, options.bench_path));
  if (npu_dir && !options.stack_path.empty())
    throw usage_error(fmt::format("stack file {}: a stack path applies to one dump.json pair, not to step folders "
                                  "(each rank's stack.json is read beside its dump.json)",
                                  options.stack_path));
  std::unordered_map<std::string, std::string> mapping;
  if (!options.mapping_path.empty()) mapping = compare_load_mapping(options.mapping_path);

  if (options.output_dir.empty()) throw usage_error("an output folder (-o) is required");
  const std::string output_dir = path_check_create(options.output_dir, "output path");
  safe_mkdirs(output_dir);

  compare_report report;
  run_context ctx{options, options.mapping_path.empty() ? nullptr : &mapping, output_dir, report};
  if (!npu_dir) {
    compare_pair(ctx, npu.dump_json, bench.dump_json, npu.rank);
    return report;
  }
  const auto npu_ranks = sorted_ranks(options.npu_path, "NPU");
  const auto bench_ranks = sorted_ranks(options.bench_path, "bench");
  if (npu_ranks.size() != bench_ranks.size())
    throw usage_error(fmt::format("NPU {} has {} rank folders, bench {} has {}: ranks are paired by position, so "
                                  "the counts must be equal",
                                  options.npu_path, npu_ranks.size(), options.bench_path, bench_ranks.size()));
  if (npu_ranks.empty())
    throw usage_error(fmt::format("NPU step folder {}: no rank folders (rank, rank0, ...)", options.npu_path));
  for (size_t k = 0; k < npu_ranks.size(); ++k) {
    const std::string npu_json = (fs::path(options.npu_path) / npu_ranks[k] / "dump.json").string();
    const std::string bench_json = (fs::path(options.bench_path) / bench_ranks[k] / "dump.json").string();
    if (!is_file(npu_json) || !is_file(bench_json)) {
      report.warnings.push_back(fmt::format("{}: no dump.json in {}; rank not compared", npu_ranks[k],
                                            is_file(npu_json) ? bench_json : npu_json));
      continue;
    }
    try {
      compare_pair(ctx, npu_json, bench_json, npu_ranks[k]);
    } catch (const compare_pt_unsupported &) {
      throw;
    } catch (const usage_error &e) {
      report.errors.push_back(fmt::format("{}: {}", npu_ranks[k], e.what()));
    }
  }
  return report;
}

}  // namespace tprobe
