// report.cpp: reading the result files and rendering the page (see report.h).
#include "report.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <cctype>
#include <sstream>
#include <tuple>
#include <unordered_map>

#include <fmt/format.h>

#include "dump_semantics.h"
#include "errors.h"
#include "free_benchmark.h"
#include "precheck_files.h"
#include "pyjson.h"
#include "report_page.h"
#include "safe_path.h"

#ifndef TPROBE_VERSION
#define TPROBE_VERSION "unknown"
#endif

namespace tprobe {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

const stage_description &report_stage_description() {
  static const stage_description d{
      "report",
      "one self-contained HTML page and a terminal summary of compare, nan-analyze, gradsim, pre-check and "
      "free_benchmark results",
      true,
      false,
      {
          {"output", "string", "report.html", "the HTML page to write", {}, {}, "-o"},
          {"results", "list", "", "result folders or files (compare_result*.json, anomaly_analyze_*.json, "
                                  "similarities.csv, accuracy_checking_result_*.csv, a dump's step*/rank*/free_benchmark.csv); as a "
                                  "manifest stage, announced result folders join them"},
          {"title", "string", "tprobe report", "the page's title"},
      }};
  return d;
}

char report_precheck_api::worst() const {
  const auto rank = [](char s) { return s == 'e' ? 3 : s == 'w' ? 2 : s == 's' ? 1 : 0; };
  return rank(backward) > rank(forward) ? backward : forward;
}

bool report_precheck::negative() const {
  return forward[1] + forward[2] + backward[1] + backward[2] > 0;  // warning or error, as tprobe-precheck exits
}

bool report_model::negative() const {
  if (!unread.empty()) return true;
  for (const auto &p : prechecks)
    if (p.negative()) return true;
  for (const auto &c : compares)
    if (c.failing > 0 || c.errors > 0) return true;
  for (const auto &n : nans)
    if (!n.ranks.empty()) return true;
  for (const auto &g : gradsims)
    if (g.first_suspect_step) return true;
  for (const auto &f : free_benchmarks)
    if (f.negative()) return true;
  for (const auto &x : monitors)
    if (x.negative()) return true;
  for (const auto &g : graphs)
    if (g.negative()) return true;
  return false;
}

namespace {

std::string read_text(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw system_error(fmt::format("unable to open {}: {}", path, std::strerror(errno)));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw system_error(fmt::format("unable to read {}", path));
  return s.str();
}

bool starts_with(std::string_view s, std::string_view p) { return s.substr(0, p.size()) == p; }

// RFC 4180 rows (quoted fields, doubled quotes, CRLF or LF); a leading UTF-8 BOM is skipped.
std::vector<std::vector<std::string>> csv_parse(std::string_view text) {
  if (starts_with(text, "\xEF\xBB\xBF")) text.remove_prefix(3);
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string field;
  bool quoted = false, any = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        field += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        field += c;
      }
      continue;
    }
    if (c == '"') {
      quoted = true;
      any = true;
    } else if (c == ',') {
      row.push_back(std::move(field));
      field.clear();
      any = true;
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      if (any || !field.empty()) {
        row.push_back(std::move(field));
        rows.push_back(std::move(row));
      }
      row.clear();
      field.clear();
      any = false;
    } else {
      field += c;
      any = true;
    }
  }
  if (quoted) throw usage_error("unterminated quoted field");
  if (any || !field.empty()) {
    row.push_back(std::move(field));
    rows.push_back(std::move(row));
  }
  return rows;
}

std::optional<double> parse_number(const std::string &s) {
  if (s.empty()) return std::nullopt;
  char *end = nullptr;
  errno = 0;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

// The dump's task/level/framework: the first keys of dump.json in msprobe's order (§2.4), read
// from its head only, since the dump itself can be gigabytes.
ojson dump_head_info(const std::string &dump_json) {
  std::ifstream in(dump_json, std::ios::binary);
  if (!in) return nullptr;
  std::string head(8192, '\0');
  in.read(head.data(), static_cast<std::streamsize>(head.size()));
  head.resize(static_cast<size_t>(in.gcount()));
  ojson info = ojson::object();
  for (const char *key : {"task", "level", "framework"}) {
    const std::string quoted = fmt::format("\"{}\"", key);
    const size_t k = head.find(quoted);
    if (k == std::string::npos) continue;
    const size_t open = head.find('"', head.find(':', k + quoted.size()) + 1);
    const size_t close = open == std::string::npos ? open : head.find('"', open + 1);
    if (close != std::string::npos) info[key] = head.substr(open + 1, close - open - 1);
  }
  return info.empty() ? ojson(nullptr) : info;
}

// construct.json beside the NPU side's dump.json, when there is one (levels L0 and mix).
void attach_construct(report_compare &c, std::vector<std::string> *warnings) {
  if (c.npu.empty()) return;
  c.npu_dump_info = dump_head_info(c.npu);
  if (!c.bench.empty()) c.bench_dump_info = dump_head_info(c.bench);
  const fs::path construct = fs::path(c.npu).parent_path() / "construct.json";
  std::error_code ec;
  if (!fs::is_regular_file(construct, ec)) return;
  try {
    c.construct = pyjson_load_file(construct.string());
    c.construct_file = construct.string();
  } catch (const std::exception &e) {
    if (warnings) warnings->push_back(fmt::format("module tree left out: {}", e.what()));
  }
}

std::string rank_from_path(const fs::path &p) {
  for (fs::path d = p.parent_path(); !d.empty() && d != d.root_path(); d = d.parent_path()) {
    const std::string name = d.filename().string();
    if (name == "rank" || (starts_with(name, "rank") && name.size() > 4 &&
                           std::all_of(name.begin() + 4, name.end(), [](char ch) { return ch >= '0' && ch <= '9'; })))
      return name;
    break;  // only the folder holding the file
  }
  return {};
}

// compare_result_rank3_20250101120000.csv → "rank3"
std::string rank_from_result_name(const std::string &stem) {
  const size_t r = stem.find("_rank");
  if (r == std::string::npos) return {};
  size_t e = r + 5;
  while (e < stem.size() && stem[e] >= '0' && stem[e] <= '9') ++e;
  return stem.substr(r + 1, e - r - 1);
}

char status_from_cells(const std::vector<std::string> &columns, const std::vector<ojson> &row) {
  auto text = [&](std::string_view col) -> std::string {
    for (size_t j = 0; j < columns.size() && j < row.size(); ++j)
      if (columns[j] == col && row[j].is_string()) return row[j].get<std::string>();
    return {};
  };
  const std::string accuracy = text("Accuracy Reached or Not"), result = text("Result");
  if (accuracy == "No" || result == "Warning" || result == "Different") return 'f';
  if (text("Bench Name") == "N/A") return 'u';
  return 'o';
}

void count_status(report_compare &c) {
  c.failing = c.unmatched = c.errors = 0;
  for (char s : c.status) {
    c.failing += s == 'f';
    c.unmatched += s == 'u';
    c.errors += s == 'e';
  }
}

void set_first_failing(report_compare &c) {
  if (!c.advisor_line.empty() && c.advisor_line != "NA") {
    if (auto v = parse_number(c.advisor_line); v && *v >= 0 && static_cast<size_t>(*v) < c.rows.size()) {
      c.first_failing = static_cast<size_t>(*v);
      return;
    }
  }
  for (size_t i = 0; i < c.status.size(); ++i)
    if (c.status[i] == 'f') {
      c.first_failing = i;
      return;
    }
}

// advisor{suffix}_{ts}.txt of compare_result{suffix}_{ts}.csv.
void read_advisor(report_compare &c, const fs::path &csv) {
  const std::string stem = csv.stem().string();
  const fs::path advisor = csv.parent_path() / ("advisor" + stem.substr(std::string("compare_result").size()) + ".txt");
  std::error_code ec;
  if (!fs::is_regular_file(advisor, ec)) return;
  std::istringstream in(read_text(advisor.string()));
  std::string line, *last = nullptr;
  while (std::getline(in, line)) {
    if (starts_with(line, "Line: ")) {
      c.advisor_line = line.substr(6);
      last = nullptr;
    } else if (starts_with(line, "Suspect Nodes: ")) {
      c.suspect = line.substr(15);
      last = nullptr;
    } else if (starts_with(line, "Expert Advice: ")) {
      c.advice = line.substr(15);
      last = &c.advice;
    } else if (last) {
      *last += "\n" + line;  // advice texts span lines
    }
  }
}

std::string json_string_or(const ojson &doc, const char *key) {
  auto it = doc.find(key);
  return it != doc.end() && it->is_string() ? it->get<std::string>() : std::string{};
}

}  // namespace

std::string report_compare_label(const report_compare &c) {
  // compare_result_step1_rank0_{ts}: the step and rank parts of the name, else the JSON's rank
  std::vector<std::string> parts;
  const std::string stem = fs::path(c.file).stem().string();
  for (size_t at = stem.find('_'); at != std::string::npos; at = stem.find('_', at + 1)) {
    const size_t end = std::min(stem.find('_', at + 1), stem.size());
    const std::string part = stem.substr(at + 1, end - at - 1);
    for (const char *prefix : {"step", "rank"})
      if (starts_with(part, prefix) && std::all_of(part.begin() + static_cast<long>(std::strlen(prefix)), part.end(),
                                                   [](char ch) { return ch >= '0' && ch <= '9'; }))
        parts.push_back(part);
  }
  if (parts.empty() && !c.rank.empty()) parts.push_back(c.rank);
  std::string label = fs::path(c.file).parent_path().filename().string();
  for (const auto &p : parts) label += (label.empty() ? "" : "/") + p;
  return label;
}

std::string report_precheck_label(const report_precheck &p) {
  // "precheck_out/20250101120000": the folder, then the run's timestamp (a folder can hold several)
  const fs::path f(p.file);
  const std::string stem = f.stem().string(), prefix = "accuracy_checking_result_";
  const std::string ts = starts_with(stem, prefix) ? stem.substr(prefix.size()) : stem;
  const std::string dir = f.parent_path().filename().string();
  return dir.empty() ? ts : dir + "/" + ts;
}

report_compare report_read_compare_json(const std::string &path) {
  ojson doc = pyjson_load_file(path);
  if (!doc.is_object() || json_string_or(doc, "format") != "tprobe-compare" || !doc.contains("columns") ||
      !doc["columns"].is_array() || !doc.contains("rows") || !doc["rows"].is_array())
    throw usage_error(fmt::format("{}: not a tprobe compare result (format tprobe-compare, columns, rows)", path));
  report_compare c;
  c.file = path;
  c.mode = json_string_or(doc, "mode");
  c.match = json_string_or(doc, "match");
  c.npu = json_string_or(doc, "npu");
  c.bench = json_string_or(doc, "bench");
  c.rank = json_string_or(doc, "rank");
  for (const auto &col : doc["columns"]) c.columns.push_back(col.is_string() ? col.get<std::string>() : col.dump());
  auto &rows = doc["rows"];
  c.rows.reserve(rows.size());
  for (auto &row : rows) {
    if (!row.is_array()) throw usage_error(fmt::format("{}: a row is not an array", path));
    std::vector<ojson> cells;
    cells.reserve(row.size());
    for (auto &cell : row) cells.push_back(std::move(cell));
    c.rows.push_back(std::move(cells));
  }
  if (auto st = doc.find("row_status"); st != doc.end() && st->is_string() && st->get_ref<const std::string &>().size() == c.rows.size()) {
    const auto &s = st->get_ref<const std::string &>();
    c.status.assign(s.begin(), s.end());
  } else {  // a result written before row_status existed
    for (const auto &row : c.rows) c.status.push_back(status_from_cells(c.columns, row));
  }
  if (auto h = doc.find("highlight"); h != doc.end() && h->is_array() && h->size() == c.rows.size()) {
    for (const auto &v : *h) {
      const std::string s = v.is_string() ? v.get<std::string>() : "";
      c.color.push_back(s == "red" ? 'r' : s == "yellow" ? 'y' : '.');
    }
  }
  count_status(c);
  if (auto a = doc.find("advisor"); a != doc.end() && a->is_object()) {
    c.advisor_line = json_string_or(*a, "line");
    c.suspect = json_string_or(*a, "suspect_nodes");
    c.advice = json_string_or(*a, "expert_advice");
  }
  set_first_failing(c);
  return c;
}

report_compare report_read_compare_csv(const std::string &path) {
  std::vector<std::vector<std::string>> table;
  try {
    table = csv_parse(read_text(path));
  } catch (const usage_error &e) {
    throw usage_error(fmt::format("{}: {}", path, e.what()));
  }
  if (table.empty() || table[0].empty() || table[0][0] != "NPU Name")
    throw usage_error(fmt::format("{}: not a compare result (its first column is not \"NPU Name\")", path));
  report_compare c;
  c.file = path;
  c.columns = table[0];
  c.rank = rank_from_result_name(fs::path(path).stem().string());
  for (size_t i = 1; i < table.size(); ++i) {
    std::vector<ojson> cells;
    for (auto &f : table[i]) {
      if (f.empty()) {
        cells.emplace_back(nullptr);
      } else if (auto v = parse_number(f); v && std::isfinite(*v)) {
        cells.emplace_back(*v);
      } else {
        cells.emplace_back(std::move(f));
      }
    }
    cells.resize(c.columns.size());
    c.rows.push_back(std::move(cells));
  }
  for (const auto &row : c.rows) c.status.push_back(status_from_cells(c.columns, row));
  const auto has = [&](std::string_view col) { return std::find(c.columns.begin(), c.columns.end(), col) != c.columns.end(); };
  c.mode = has("Accuracy Reached or Not") ? "all" : has("NPU MD5") ? "md5" : has("Max diff") ? "summary" : "";
  count_status(c);
  read_advisor(c, path);
  set_first_failing(c);
  return c;
}

report_nan report_read_nan(const std::string &path) {
  const ojson doc = pyjson_load_file(path);
  if (!doc.is_object()) throw usage_error(fmt::format("{}: not an anomaly_analyze result (an object of rank_N lists)", path));
  report_nan n;
  n.file = path;
  for (const auto &[rank, nodes] : doc.items()) {
    if (!nodes.is_array()) throw usage_error(fmt::format("{}: \"{}\" is not a list of nodes", path, rank));
    for (const auto &node : nodes) {
      if (!node.is_object()) throw usage_error(fmt::format("{}: \"{}\" holds a node that is not an object", path, rank));
      report_nan_rank r;
      r.rank = rank;
      r.op_name = json_string_or(node, "op_name");
      for (const char *key : {"construct_info", "stack_info"}) {
        auto &out = std::string_view(key) == "construct_info" ? r.construct_info : r.stack_info;
        if (auto it = node.find(key); it != node.end() && it->is_array())
          for (const auto &s : *it) out.push_back(s.is_string() ? s.get<std::string>() : s.dump());
      }
      if (auto it = node.find("data_info"); it != node.end()) r.data_info = *it;
      n.ranks.push_back(std::move(r));
    }
  }
  return n;
}

std::vector<size_t> report_suspect_steps(const std::vector<double> &s) {
  // msprobe's doc rule (not enforced by its code): "a step-0 similarity below 0.97, or a drop of
  // more than 0.03 from one step to the next, marks that step".
  std::vector<size_t> out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (std::isnan(s[i])) continue;
    const bool bad = i == 0 ? s[i] < 0.97 : (!std::isnan(s[i - 1]) && s[i - 1] - s[i] > 0.03);
    if (bad) out.push_back(i);
  }
  return out;
}

report_gradsim report_read_similarities(const std::string &path) {
  std::vector<std::vector<std::string>> table;
  try {
    table = csv_parse(read_text(path));
  } catch (const usage_error &e) {
    throw usage_error(fmt::format("{}: {}", path, e.what()));
  }
  if (table.empty() || table[0].empty() || table[0][0] != "step")
    throw usage_error(fmt::format("{}: not a similarities.csv (its first row is not \"step,0,1,…\")", path));
  report_gradsim g;
  g.file = path;
  g.rank = rank_from_path(path);
  g.steps.assign(table[0].begin() + 1, table[0].end());
  for (size_t i = 1; i < table.size(); ++i) {
    report_gradsim_param p;
    p.name = table[i][0];
    for (size_t j = 1; j < table[i].size(); ++j) {
      auto v = parse_number(table[i][j]);
      if (!v) throw usage_error(fmt::format("{}: row {} (\"{}\"), step {}: \"{}\" is not a number", path, i + 1, p.name, j - 1, table[i][j]));
      p.similarity.push_back(*v);
    }
    if (p.similarity.size() != g.steps.size())
      throw usage_error(fmt::format("{}: row {} (\"{}\") has {} values for {} steps", path, i + 1, p.name, p.similarity.size(), g.steps.size()));
    p.suspect = report_suspect_steps(p.similarity);
    if (!p.suspect.empty() && (!g.first_suspect_step || p.suspect.front() < *g.first_suspect_step))
      g.first_suspect_step = p.suspect.front();
    g.params.push_back(std::move(p));
  }
  return g;
}

// ---- the accuracy pre-check ----

namespace {

// A status cell of either file: msprobe's "pass", "warning" (8.3.3: "Warning"), "error", "SKIP";
// blank (" ") only where `blank` is allowed (a result row's backward). 0 for anything else.
char precheck_status(std::string_view cell, char blank) {
  while (!cell.empty() && cell.front() == ' ') cell.remove_prefix(1);
  while (!cell.empty() && cell.back() == ' ') cell.remove_suffix(1);
  std::string s(cell);
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char ch) { return static_cast<char>(std::tolower(ch)); });
  if (s.empty()) return blank;
  return s == "pass" ? 'p' : s == "warning" ? 'w' : s == "error" ? 'e' : s == "skip" ? 's' : 0;
}

int precheck_rank(char s) { return s == 'e' ? 3 : s == 'w' ? 2 : s == 's' ? 1 : 0; }

size_t status_slot(char s) { return s == 'p' ? 0 : s == 'w' ? 1 : s == 'e' ? 2 : 3; }

std::optional<size_t> column_of(const std::vector<std::string> &header, std::string_view name) {
  for (size_t j = 0; j < header.size(); ++j)
    if (header[j] == name) return j;
  return std::nullopt;
}

// "Functional.linear.0.forward.output.0" → "Functional.linear.0"; "" for another shape.
std::string precheck_api_of_row(const std::string &row_name) {
  for (const char *part : {".forward.output.", ".backward.output."}) {
    const size_t at = row_name.rfind(part);
    if (at != std::string::npos) return row_name.substr(0, at);
  }
  return {};
}

std::string precheck_cell(const std::vector<std::string> &row, std::optional<size_t> j) {
  if (!j || *j >= row.size()) return {};
  const std::string &c = row[*j];
  return c == " " ? std::string{} : c;
}

}  // namespace

report_precheck_failure report_precheck_failed_metric(const std::vector<std::string> &header,
                                                      const std::vector<std::string> &row) {
  auto value = [&](std::string_view col) -> std::optional<double> {
    const auto j = column_of(header, col);
    if (!j || *j >= row.size()) return std::nullopt;
    return precheck::parse_float_cell(row[*j]);
  };
  // msprobe's legacy verdict (§7.7.2), in its order: the first check that fails set the Status.
  const auto cosine = value("余弦相似度");
  if (cosine && *cosine <= 0.99) return {"余弦相似度", cosine, "≤ 0.99"};
  if (auto b = value("二进制一致错误率"); b && *b > 0) return {"二进制一致错误率", b, "> 0"};
  for (const auto &[col, threshold, text] : {std::tuple{"双百指标", 0.01, "≤ 0.99"}, std::tuple{"双千指标", 0.001, "≤ 0.999"},
                                             std::tuple{"双万指标", 0.0001, "≤ 0.9999"}})
    if (auto r = value(col); r && !(*r > 1 - threshold)) return {col, r, text};
  if (cosine && std::isnan(*cosine)) return {"余弦相似度", cosine, "is NaN"};
  return {};
}

report_precheck report_read_precheck(const std::string &result_csv) {
  report_precheck p;
  p.file = result_csv;
  const precheck::csv_table result = precheck::read_csv_table(result_csv);
  const std::vector<std::string> want = {"API name", "Forward Test Success", "Backward Test Success"};
  if (result.header.size() < want.size() || !std::equal(want.begin(), want.end(), result.header.begin()))
    throw usage_error(fmt::format("{}: not a pre-check result (its header is not \"API name,Forward Test Success,"
                                  "Backward Test Success,Message\")", result_csv));

  // The details rows of each API, in file order.
  std::optional<precheck::csv_table> details;
  std::unordered_map<std::string, std::vector<size_t>> rows_of;
  std::optional<size_t> d_name, d_status, d_message, d_bench, d_device, d_shape, d_cos, d_abs;
  const fs::path rpath(result_csv);
  const std::string stem = rpath.stem().string();
  const fs::path dpath = rpath.parent_path() / ("accuracy_checking_details" + stem.substr(std::string("accuracy_checking_result").size()) + ".csv");
  std::error_code ec;
  if (fs::is_regular_file(dpath, ec)) {
    details = precheck::read_csv_table(dpath);
    p.details_file = dpath.string();
    const auto &h = details->header;
    d_name = column_of(h, "API Name");
    d_status = column_of(h, "Status");
    if (!d_name || !d_status || *d_name != 0)
      throw usage_error(fmt::format("{}: not a pre-check details file (no \"API Name\" first and \"Status\" column)", p.details_file));
    d_message = column_of(h, "Message");
    d_bench = column_of(h, "Bench Dtype");
    d_device = column_of(h, "DEVICE Dtype");
    d_shape = column_of(h, "Shape");
    d_cos = column_of(h, "余弦相似度");
    d_abs = column_of(h, "最大绝对误差");
    for (size_t i = 0; i < details->rows.size(); ++i) {
      const auto &row = details->rows[i];
      if (row.size() <= *d_status)
        throw usage_error(fmt::format("{}: row {} has {} cells, no Status", p.details_file, i + 2, row.size()));
      if (!precheck_status(row[*d_status], 0))
        throw usage_error(fmt::format("{}: row {} ({}): status \"{}\" is none of pass, warning, error, SKIP",
                                      p.details_file, i + 2, row[0], row[*d_status]));
      rows_of[precheck_api_of_row(row[0])].push_back(i);
    }
  }

  for (size_t i = 0; i < result.rows.size(); ++i) {
    const auto &row = result.rows[i];
    if (row.size() < 3)
      throw usage_error(fmt::format("{}: row {} has {} cells, not 3 or 4", result_csv, i + 2, row.size()));
    report_precheck_api a;
    a.name = row[0];
    a.forward = precheck_status(row[1], 0);
    a.backward = precheck_status(row[2], '-');
    if (!a.forward || !a.backward || a.forward == '-')
      throw usage_error(fmt::format("{}: row {} ({}): status \"{}\"/\"{}\" is none of pass, warning, error, SKIP",
                                    result_csv, i + 2, a.name, row[1], row[2]));
    if (row.size() > 3 && row[3] != " ") a.message = row[3];
    ++p.apis;
    ++p.forward[status_slot(a.forward)];
    if (a.backward == '-') ++p.backward_none;
    else ++p.backward[status_slot(a.backward)];
    if (a.worst() == 'p') continue;

    if (auto it = rows_of.find(a.name); details && it != rows_of.end()) {
      const std::vector<std::string> *worst = nullptr;
      for (size_t k : it->second) {
        const auto &r = details->rows[k];
        const char s = precheck_status(r[*d_status], 0);
        if (!worst || precheck_rank(s) > precheck_rank(a.worst_status)) {
          worst = &r;
          a.worst_status = s;
        }
      }
      const auto &r = *worst;
      a.worst_row = r[0];
      try {
        if (a.worst_status == 'e' || a.worst_status == 'w') {
          auto f = report_precheck_failed_metric(details->header, r);
          a.metric = std::move(f.metric);
          a.value = f.value;
          a.rule = std::move(f.rule);
        }
        if (d_cos && *d_cos < r.size()) a.cosine = precheck::parse_float_cell(r[*d_cos]);
        if (d_abs && *d_abs < r.size()) a.max_abs_err = precheck::parse_float_cell(r[*d_abs]);
      } catch (const usage_error &e) {
        throw usage_error(fmt::format("{}: row {}: {}", p.details_file, a.worst_row, e.what()));
      }
      a.bench_dtype = precheck_cell(r, d_bench);
      a.device_dtype = precheck_cell(r, d_device);
      a.shape = precheck_cell(r, d_shape);
      a.row_message = precheck_cell(r, d_message);
    }
    p.failing.push_back(std::move(a));
  }
  std::stable_sort(p.failing.begin(), p.failing.end(),
                   [](const auto &x, const auto &y) { return precheck_rank(x.worst()) > precheck_rank(y.worst()); });
  return p;
}

void report_link_precheck(report_model &m) {
  std::unordered_map<std::string, std::pair<size_t, size_t>> api;  // name → {precheck, failing index}
  for (size_t k = 0; k < m.prechecks.size(); ++k)
    for (size_t j = 0; j < m.prechecks[k].failing.size(); ++j) {
      m.prechecks[k].failing[j].compare_rows.clear();
      api.try_emplace(m.prechecks[k].failing[j].name, k, j);
    }
  m.compare_precheck.assign(m.compares.size(), {});
  if (api.empty()) return;
  for (size_t c = 0; c < m.compares.size(); ++c) {
    const auto &rows = m.compares[c].rows;
    for (size_t i = 0; i < rows.size(); ++i) {
      if (rows[i].empty() || !rows[i][0].is_string()) continue;
      const std::string &name = rows[i][0].get_ref<const std::string &>();
      // the longest dotted prefix that names a listed API ("Functional.linear.0" of
      // "Functional.linear.0.forward.output.0")
      for (size_t end = name.rfind('.'); end != std::string::npos && end > 0; end = name.rfind('.', end - 1)) {
        auto it = api.find(name.substr(0, end));
        if (it == api.end()) continue;
        const auto [k, j] = it->second;
        auto &links = m.prechecks[k].failing[j].compare_rows;
        if (links.empty() || links.back().compare != c) links.push_back({c, 0, i});
        ++links.back().rows;
        m.compare_precheck[c].push_back({i, k, j});
        break;
      }
    }
  }
}

// ---- task free_benchmark ----

namespace {

// An integer cell as Python's csv writes one ("0", "-3"), nothing else.
std::optional<int64_t> integer_cell(const std::string &cell) {
  int64_t v = 0;
  const char *end = cell.data() + cell.size();
  const auto [p, ec] = std::from_chars(cell.data(), end, v);
  if (cell.empty() || ec != std::errc() || p != end) return std::nullopt;
  return v;
}

// msprobe's nine columns, from the writer's own header (core/free_benchmark.h).
const std::vector<std::string> &free_benchmark_columns() {
  static const std::vector<std::string> columns = [] {
    std::string h = free_benchmark_csv_header();
    while (!h.empty() && (h.back() == '\n' || h.back() == '\r')) h.pop_back();
    std::vector<std::string> c;
    for (size_t at = 0;;) {
      const size_t comma = h.find(',', at);
      c.push_back(h.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
      if (comma == std::string::npos) break;
      at = comma + 1;
    }
    return c;
  }();
  return columns;
}

// The number in a folder name after `prefix` ("step12" → 12), else -1 ("rank": not distributed).
int64_t folder_number(const fs::path &folder, std::string_view prefix) {
  const std::string name = folder.filename().string();
  if (!starts_with(name, prefix)) return -1;
  const auto n = integer_cell(name.substr(prefix.size()));
  return n ? *n : -1;
}

}  // namespace

report_free_benchmark report_read_free_benchmark(const std::string &path) {
  const precheck::csv_table t = precheck::read_csv_table(path);  // usage_error: empty, a quote left open
  const auto &columns = free_benchmark_columns();
  if (t.header != columns)
    throw usage_error(fmt::format("{}: not msprobe's free_benchmark.csv: its header is \"{}\", not \"{}\"", path,
                                  fmt::join(t.header, ","), fmt::join(columns, ",")));
  report_free_benchmark f;
  f.file = path;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const auto &cells = t.rows[i];
    // Row numbers count the header as row 1, as a spreadsheet shows the file.
    auto bad = [&](const std::string &what) { return usage_error(fmt::format("{}: row {}: {}", path, i + 2, what)); };
    if (cells.size() != columns.size())
      throw bad(fmt::format("{} cells, not {} (a truncated or foreign file)", cells.size(), columns.size()));
    report_free_benchmark_row r;
    const auto rank = integer_cell(cells[0]), step = integer_cell(cells[3]);
    if (!rank) throw bad(fmt::format("rank \"{}\" is not an integer", cells[0]));
    if (!step) throw bad(fmt::format("step \"{}\" is not an integer", cells[3]));
    r.rank = *rank;
    r.step = *step;
    r.pert_mode = cells[1];
    r.stage = cells[2];
    if (r.stage != "forward" && r.stage != "backward")
      throw bad(fmt::format("stage \"{}\" is neither forward nor backward", r.stage));
    r.api_name = cells[4];
    if (r.api_name.empty() || r.pert_mode.empty()) throw bad("empty api_name or pert_mode");
    r.max_rel = cells[5];
    if (!r.max_rel.empty() && r.max_rel != "symbol_flipping") {
      std::optional<double> v;
      try {
        v = precheck::parse_float_cell(r.max_rel);
      } catch (const usage_error &) {
      }
      if (!v) throw bad(fmt::format("max_rel \"{}\" is neither a number, symbol_flipping nor empty", r.max_rel));
      r.max_rel_value = v;
    }
    r.dtype = cells[6];
    r.shape = cells[7];
    if (!cells[8].empty()) {
      r.output_index = integer_cell(cells[8]);
      if (!r.output_index) throw bad(fmt::format("output_index \"{}\" is neither empty nor an integer", cells[8]));
    }
    f.rows.push_back(std::move(r));
  }
  return f;
}

std::string report_free_benchmark_label(const report_free_benchmark &f) {
  // "dump/step2/rank0": the dump folder, then the step and rank folders the file lies in
  const fs::path rank = fs::path(f.file).parent_path(), step = rank.parent_path();
  std::string label = step.parent_path().filename().string();
  for (const auto &part : {step.filename().string(), rank.filename().string()})
    if (!part.empty()) label += (label.empty() ? "" : "/") + part;
  return label;
}

// ---- scanning ----

namespace {

// report_scan, where `require` false lets a manifest stage render run info without results.
report_model scan_results(const report_options &o, bool require) {
  report_model m;
  m.title = o.title;
  if (o.results.empty() && require) throw usage_error("no result folder or file given (RESULT_DIR… or --results)");
  std::vector<fs::path> files;
  std::set<std::string> seen;
  auto add = [&](const fs::path &p) {
    std::error_code ec;
    const std::string key = fs::weakly_canonical(p, ec).string();
    if (seen.insert(ec ? p.string() : key).second) files.push_back(p);
  };
  auto scan_dir = [&](const fs::path &dir, int depth, auto &self) -> void {
    std::error_code ec;
    std::vector<fs::path> entries;
    for (const auto &e : fs::directory_iterator(dir, ec)) entries.push_back(e.path());
    if (ec) throw system_error(fmt::format("unable to list {}: {}", dir.string(), ec.message()));
    std::sort(entries.begin(), entries.end());
    for (const auto &p : entries) {
      const std::string name = p.filename().string();
      if (fs::is_directory(p, ec)) {
        // gradsim writes rank{N}/similarities.csv; a step folder's rank folders hold other results
        if (depth == 0 && starts_with(name, "rank")) self(p, depth + 1, self);
        // A dump folder's step{N}/rank{R}/: free_benchmark.csv alone (the rest is the dump itself)
        if (depth == 0 && starts_with(name, "step")) {
          std::vector<fs::path> ranks;
          for (const auto &e : fs::directory_iterator(p, ec))
            if (starts_with(e.path().filename().string(), "rank")) ranks.push_back(e.path());
          if (ec) throw system_error(fmt::format("unable to list {}: {}", p.string(), ec.message()));
          std::sort(ranks.begin(), ranks.end());
          for (const auto &r : ranks)
            if (fs::is_regular_file(r / "free_benchmark.csv", ec)) add(r / "free_benchmark.csv");
        }
      } else {
        add(p);
      }
    }
  };
  for (const auto &r : o.results) {
    std::error_code ec;
    const fs::path p(r);
    if (fs::is_directory(p, ec)) {
      scan_dir(p, 0, scan_dir);
      // A monitor output folder: its rank folders' csv files and anomaly_detected/ (report_monitor).
      bool monitor = fs::is_directory(p / "anomaly_detected", ec);
      for (const auto &e : fs::directory_iterator(p, ec))
        if (!monitor && report_is_monitor_rank_dir(e.path().filename().string()) && e.is_directory(ec)) monitor = true;
      if (monitor) {
        try {
          m.monitors.push_back(report_read_monitor(p.string()));
          const auto &x = m.monitors.back();
          m.inputs.insert(m.inputs.end(), x.csv_files.begin(), x.csv_files.end());
          m.inputs.insert(m.inputs.end(), x.anomaly_files.begin(), x.anomaly_files.end());
        } catch (const usage_error &e) {
          m.unread.push_back(e.what());
        }
      }
    } else if (fs::exists(p, ec)) {
      add(p);
    } else {
      throw usage_error(fmt::format("{}: no such file or folder", r));
    }
  }

  std::set<std::string> json_stems;
  for (const auto &f : files)
    if (starts_with(f.filename().string(), "compare_result") && f.extension() == ".json")
      json_stems.insert((f.parent_path() / f.stem()).string());
  for (const auto &f : files) {
    const std::string name = f.filename().string();
    try {
      if (starts_with(name, "compare_result") && f.extension() == ".json") {
        m.compares.push_back(report_read_compare_json(f.string()));
      } else if (starts_with(name, "compare_result") && f.extension() == ".csv") {
        if (json_stems.count((f.parent_path() / f.stem()).string())) continue;  // the JSON says more
        m.compares.push_back(report_read_compare_csv(f.string()));
      } else if (starts_with(name, "anomaly_analyze_") && f.extension() == ".json") {
        m.nans.push_back(report_read_nan(f.string()));
      } else if (name == "similarities.csv") {
        m.gradsims.push_back(report_read_similarities(f.string()));
      } else if (starts_with(name, "accuracy_checking_result_") && f.extension() == ".csv") {
        m.prechecks.push_back(report_read_precheck(f.string()));
        m.inputs.push_back(f.string());
        if (!m.prechecks.back().details_file.empty()) m.inputs.push_back(m.prechecks.back().details_file);
        continue;
      } else if (name == "free_benchmark.csv") {
        m.free_benchmarks.push_back(report_read_free_benchmark(f.string()));
      } else if (name.size() > 7 && name.compare(name.size() - 7, 7, ".vis.db") == 0) {
        m.graphs.push_back(report_read_graph(f.string()));
      } else {
        continue;
      }
      m.inputs.push_back(f.string());
    } catch (const usage_error &e) {
      m.unread.push_back(e.what());
    }
  }
  for (auto &c : m.compares) attach_construct(c, &m.warnings);
  if (require && m.compares.empty() && m.nans.empty() && m.gradsims.empty() && m.prechecks.empty() &&
      m.free_benchmarks.empty() && m.monitors.empty() && m.graphs.empty()) {
    std::string why = m.unread.empty() ? "" : " (not read: " + m.unread.front() + ")";
    throw usage_error(fmt::format("no result found in {} (compare_result*.json/.csv, anomaly_analyze_*.json, "
                                  "rank*/similarities.csv, accuracy_checking_result_*.csv, "
                                  "step*/rank*/free_benchmark.csv, a monitor output folder, *.vis.db){}", fmt::join(o.results, ", "), why));
  }
  // Ranks in order, so the page and the summary read rank0, rank1, …
  auto rank_key = [](const std::string &r) {
    auto n = parse_number(r.size() > 4 ? r.substr(4) : std::string{});
    return n ? *n : -1.0;
  };
  std::stable_sort(m.compares.begin(), m.compares.end(),
                   [&](const auto &a, const auto &b) { return rank_key(a.rank) < rank_key(b.rank); });
  std::stable_sort(m.gradsims.begin(), m.gradsims.end(),
                   [&](const auto &a, const auto &b) { return rank_key(a.rank) < rank_key(b.rank); });
  // Free benchmark files by step, then rank (step10 after step9, the folder "rank" first)
  auto step_rank = [](const report_free_benchmark &f) {
    const fs::path rank = fs::path(f.file).parent_path();
    return std::make_pair(folder_number(rank.parent_path(), "step"), folder_number(rank, "rank"));
  };
  std::stable_sort(m.free_benchmarks.begin(), m.free_benchmarks.end(),
                   [&](const auto &a, const auto &b) { return step_rank(a) < step_rank(b); });
  report_link_precheck(m);
  return m;
}

}  // namespace

report_model report_scan(const report_options &o) { return scan_results(o, true); }

// ---- the page ----

namespace {

void append_json_string(std::string &out, std::string_view s) {
  out += ojson(std::string(s)).dump(-1, ' ', false, ojson::error_handler_t::replace);
}

std::string json_text(const ojson &v) { return v.dump(-1, ' ', false, ojson::error_handler_t::replace); }

// One column: {"name": …, "dict": [strings], "v": [cells]}. A cell is a number (6 significant
// digits: a page to look at; the compare's own files keep every digit), null, a bool, "N"/"I"/"-I"
// (NaN, ±inf), "=" (the same text as the row's first column: Bench Name beside NPU Name), "K" (the
// index of its text in dict) or "~K" (dict[K] with each \x01 standing for the row's first column).
void append_column(std::string &out, const report_compare &c, size_t j) {
  std::unordered_map<std::string, size_t> index;
  std::vector<const std::string *> dict;
  std::string values;
  values.reserve(c.rows.size() * 8);
  for (size_t i = 0; i < c.rows.size(); ++i) {
    if (i) values += ',';
    const ojson &v = j < c.rows[i].size() ? c.rows[i][j] : ojson(nullptr);
    if (v.is_number_integer()) {
      values += json_text(v);
    } else if (v.is_number()) {
      const double d = v.get<double>();
      if (std::isnan(d)) values += "\"N\"";
      else if (std::isinf(d)) values += d > 0 ? "\"I\"" : "\"-I\"";
      else values += fmt::format("{:.6g}", d);
    } else if (v.is_boolean()) {
      values += v.get<bool>() ? "true" : "false";
    } else if (v.is_string()) {
      const auto &s = v.get_ref<const std::string &>();
      const std::string *name = j > 0 && !c.rows[i].empty() && c.rows[i][0].is_string()
                                    ? &c.rows[i][0].get_ref<const std::string &>() : nullptr;
      if (name && *name == s) {
        values += "\"=\"";
        continue;
      }
      // Texts that repeat the row's name (Data_name "['NAME.npy', 'NAME.npy']") share one template.
      std::string templated;
      const bool has_name = name && !name->empty() && s.find(*name) != std::string::npos;
      if (has_name) {
        for (size_t at = 0;;) {
          const size_t hit = s.find(*name, at);
          templated.append(s, at, hit == std::string::npos ? std::string::npos : hit - at);
          if (hit == std::string::npos) break;
          templated += '\x01';
          at = hit + name->size();
        }
      }
      auto [it, fresh] = index.try_emplace(has_name ? templated : s, dict.size());
      if (fresh) dict.push_back(&it->first);
      values += has_name ? "\"~" : "\"";
      values += std::to_string(it->second);
      values += '"';
    } else {
      values += "null";
    }
  }
  out += "{\"name\":";
  append_json_string(out, c.columns[j]);
  out += ",\"dict\":[";
  for (size_t k = 0; k < dict.size(); ++k) {
    if (k) out += ',';
    append_json_string(out, *dict[k]);
  }
  out += "],\"v\":[";
  out += values;
  out += "]}";
}

// The entry a row belongs to: the longest dotted prefix of its name that construct.json knows, else
// the longest one that reads as an entry name (core/dump_semantics.h), else the name itself.
struct entry_index {
  std::vector<std::string> entries;
  std::vector<int64_t> row_entry;
  std::string direction;  // per entry: f forward, b backward, g parameters_grad, ? unknown
};

entry_index rows_to_entries(const report_compare &c, const std::unordered_map<std::string, size_t> &nodes) {
  entry_index x;
  std::unordered_map<std::string, size_t> known;
  for (const auto &row : c.rows) {
    const std::string name = !row.empty() && row[0].is_string() ? row[0].get<std::string>() : std::string{};
    std::string entry;
    char dir = '?';
    for (size_t end = name.size(); end != std::string::npos && end > 0; end = name.rfind('.', end - 1)) {
      const std::string_view prefix(name.data(), end);
      const entry_name parsed = entry_parse(prefix);
      if (nodes.count(std::string(prefix)) || parsed.direction != entry_direction::none) {
        entry = std::string(prefix);
        dir = parsed.is_forward() ? 'f' : parsed.is_backward() ? 'b' : parsed.is_parameters_grad() ? 'g' : '?';
        if (dir == '?') {  // a construct key of no known form: its direction from its segments
          dir = entry.find(".backward") != std::string::npos ? 'b' : 'f';
        }
        break;
      }
    }
    if (entry.empty()) entry = name;
    auto [it, fresh] = known.try_emplace(entry, x.entries.size());
    if (fresh) {
      x.entries.push_back(entry);
      x.direction += dir;
    }
    x.row_entry.push_back(static_cast<int64_t>(it->second));
  }
  return x;
}

void append_compare(std::string &out, const report_compare &c, const std::vector<std::array<size_t, 3>> &precheck_links) {
  // The module tree: construct.json's nodes, each with its parent's index (-1 for a root).
  std::vector<std::string> nodes;
  std::unordered_map<std::string, size_t> node_index;
  std::vector<int64_t> parent;
  auto node_of = [&](const std::string &name) {
    auto [it, fresh] = node_index.try_emplace(name, nodes.size());
    if (fresh) {
      nodes.push_back(name);
      parent.push_back(-1);
    }
    return it->second;
  };
  if (c.construct.is_object()) {
    for (const auto &[key, value] : c.construct.items()) {
      const ojson *p = &value;
      if (value.is_array() && !value.empty()) p = &value[0];  // Megatron: [parent, micro_step]
      if (!p->is_null() && !p->is_string()) continue;          // "megatron_micro_step_number": N
      const size_t k = node_of(key);
      if (p->is_string() && !p->get_ref<const std::string &>().empty())
        parent[k] = static_cast<int64_t>(node_of(p->get<std::string>()));
    }
  }
  const entry_index x = rows_to_entries(c, node_index);

  ojson head = ojson::object();
  head["file"] = c.file;
  head["rank"] = c.rank;
  head["label"] = report_compare_label(c);
  head["mode"] = c.mode;
  head["match"] = c.match;
  head["npu"] = c.npu;
  head["bench"] = c.bench;
  head["npu_dump"] = c.npu_dump_info;
  head["bench_dump"] = c.bench_dump_info;
  head["construct_file"] = c.construct_file;
  head["n"] = c.rows.size();
  head["failing"] = c.failing;
  head["unmatched"] = c.unmatched;
  head["errors"] = c.errors;
  head["first_failing"] = c.first_failing ? ojson(*c.first_failing) : ojson(nullptr);
  head["advisor_line"] = c.advisor_line;
  head["suspect"] = c.suspect;
  head["advice"] = c.advice;
  head["status"] = std::string(c.status.begin(), c.status.end());
  head["color"] = std::string(c.color.begin(), c.color.end());
  head["entries"] = x.entries;
  head["entry_dir"] = x.direction;
  head["nodes"] = nodes;
  head["node_parent"] = parent;
  std::vector<int64_t> entry_node;
  for (const auto &e : x.entries) {
    auto it = node_index.find(e);
    entry_node.push_back(it == node_index.end() ? -1 : static_cast<int64_t>(it->second));
  }
  head["entry_node"] = entry_node;
  head["precheck"] = precheck_links;  // [[row, precheck, api], …]: rows of a pre-check API not pass
  std::string text = json_text(head);
  text.pop_back();  // reopen the object for the big arrays, written without a DOM
  out += text;
  out += ",\"row_entry\":[";
  for (size_t i = 0; i < x.row_entry.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(x.row_entry[i]);
  }
  out += "],\"columns\":[";
  for (size_t j = 0; j < c.columns.size(); ++j) {
    if (j) out += ',';
    append_column(out, c, j);
  }
  out += "]}";
}

std::string local_time_text() {
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char buffer[64];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%d %H:%M:%S %Z", &tm);
  return buffer;
}

// "</" would end the <script> element that holds the data; "<\/" is the same JSON string.
void escape_for_script(std::string &s) {
  std::string out;
  out.reserve(s.size() + 64);
  for (size_t i = 0; i < s.size(); ++i) {
    out += s[i];
    if (s[i] == '<' && i + 1 < s.size() && s[i + 1] == '/') out += '\\';
  }
  s.swap(out);
}

std::string html_escape(std::string_view s) {
  std::string out;
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += ch;
    }
  }
  return out;
}

}  // namespace

std::string report_render_html(const report_model &m) {
  std::string data = "{\"title\":";
  append_json_string(data, m.title);
  data += ",\"version\":";
  append_json_string(data, TPROBE_VERSION);
  data += ",\"generated\":";
  append_json_string(data, local_time_text());
  data += ",\"compares\":[";
  for (size_t i = 0; i < m.compares.size(); ++i) {
    if (i) data += ',';
    append_compare(data, m.compares[i], i < m.compare_precheck.size() ? m.compare_precheck[i]
                                                                       : std::vector<std::array<size_t, 3>>{});
  }
  data += "]";

  ojson nans = ojson::array();
  for (const auto &n : m.nans) {
    ojson ranks = ojson::array();
    for (const auto &r : n.ranks)
      ranks.push_back({{"rank", r.rank}, {"op_name", r.op_name}, {"construct_info", r.construct_info},
                       {"stack_info", r.stack_info}, {"data_info", r.data_info}});
    nans.push_back({{"file", n.file}, {"ranks", std::move(ranks)}});
  }
  ojson gradsims = ojson::array();
  for (const auto &g : m.gradsims) {
    ojson params = ojson::array();
    for (const auto &p : g.params)
      params.push_back({{"name", p.name}, {"sim", p.similarity}, {"suspect", p.suspect}});
    gradsims.push_back({{"file", g.file}, {"rank", g.rank}, {"steps", g.steps}, {"params", std::move(params)},
                        {"first_suspect", g.first_suspect_step ? ojson(*g.first_suspect_step) : ojson(nullptr)}});
  }
  ojson prechecks = ojson::array();
  auto status_name = [](char st) { return st == 'p' ? "pass" : st == 'w' ? "warning" : st == 'e' ? "error" : st == 's' ? "SKIP" : ""; };
  auto number = [](const std::optional<double> &v) -> ojson {
    if (!v) return nullptr;
    if (std::isnan(*v)) return "nan";  // JSON has no NaN; the page prints these as they are
    if (std::isinf(*v)) return *v > 0 ? "inf" : "-inf";
    return *v;
  };
  for (const auto &p : m.prechecks) {
    ojson apis = ojson::array();
    for (const auto &a : p.failing) {
      ojson links = ojson::array();
      for (const auto &l : a.compare_rows) links.push_back({{"compare", l.compare}, {"rows", l.rows}, {"first", l.first}});
      apis.push_back({{"name", a.name}, {"forward", status_name(a.forward)}, {"backward", status_name(a.backward)},
                      {"worst", status_name(a.worst())}, {"message", a.message}, {"row", a.worst_row},
                      {"row_status", a.worst_row.empty() ? "" : status_name(a.worst_status)}, {"metric", a.metric},
                      {"value", number(a.value)}, {"rule", a.rule}, {"cosine", number(a.cosine)},
                      {"max_abs_err", number(a.max_abs_err)}, {"bench_dtype", a.bench_dtype},
                      {"device_dtype", a.device_dtype}, {"shape", a.shape}, {"row_message", a.row_message},
                      {"compare_rows", std::move(links)}});
    }
    auto counts = [](const size_t (&c)[4]) { return ojson{{"pass", c[0]}, {"warning", c[1]}, {"error", c[2]}, {"SKIP", c[3]}}; };
    ojson backward = counts(p.backward);
    backward["none"] = p.backward_none;
    prechecks.push_back({{"file", p.file}, {"details_file", p.details_file}, {"label", report_precheck_label(p)},
                         {"apis", p.apis}, {"forward", counts(p.forward)}, {"backward", std::move(backward)},
                         {"negative", p.negative()}, {"failing", std::move(apis)}});
  }
  // Free benchmark rows column-free: [step, rank, api, pert_mode, stage, max_rel, dtype, shape,
  // output_index, file index], max_rel as written (the page sorts on its number).
  ojson free_benchmark = {{"files", ojson::array()}, {"rows", ojson::array()}};
  for (size_t k = 0; k < m.free_benchmarks.size(); ++k) {
    const auto &f = m.free_benchmarks[k];
    free_benchmark["files"].push_back({{"file", f.file}, {"label", report_free_benchmark_label(f)}, {"rows", f.rows.size()}});
    for (const auto &r : f.rows)
      free_benchmark["rows"].push_back(ojson::array({r.step, r.rank, r.api_name, r.pert_mode, r.stage, r.max_rel, r.dtype,
                                                     r.shape, r.output_index ? ojson(*r.output_index) : ojson(nullptr), k}));
  }
  // Monitor folders: per csv type its numeric ops and tags, per tag and rank the steps and one
  // array of values per op (non-finite values as "nan", "inf", "-inf": JSON has no NaN).
  auto cell = [](double v) -> ojson {
    if (std::isnan(v)) return "nan";
    if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
    return v;
  };
  ojson monitors = ojson::array();
  for (const auto &x : m.monitors) {
    ojson types = ojson::array();
    for (const auto &t : x.types) {
      ojson tags = ojson::array();
      for (const auto &tag : t.tags) {
        ojson series = ojson::array();
        for (const auto &r : tag.ranks) {
          ojson values = ojson::array();
          for (const auto &v : r.values) {
            ojson column = ojson::array();
            for (double d : v) column.push_back(cell(d));
            values.push_back(std::move(column));
          }
          series.push_back({{"rank", r.rank}, {"steps", r.steps}, {"v", std::move(values)}});
        }
        tags.push_back({{"name", tag.name}, {"series", std::move(series)}});
      }
      types.push_back({{"prefix", t.prefix}, {"ops", t.ops}, {"tags", std::move(tags)}});
    }
    ojson anomalies = ojson::array();
    for (const auto &a : x.anomalies)
      anomalies.push_back({{"rank", a.rank}, {"step", a.step}, {"tag", a.tag_name}, {"name", a.name},
                           {"prefix", a.prefix}, {"op", a.op}, {"message", a.message}});
    monitors.push_back({{"dir", x.dir}, {"ranks", x.ranks}, {"csv_files", x.csv_files.size()},
                        {"event_files", x.event_files.size()}, {"types", std::move(types)},
                        {"anomalies", std::move(anomalies)}});
  }
  ojson run = {{"inputs", m.inputs}, {"warnings", m.warnings}, {"unread", m.unread}, {"stream", nullptr}};
  if (m.stream) {
    run["stream"] = {{"sessions", m.stream->sessions},
                     {"records", m.stream->records},
                     {"producers", m.stream->producers},
                     {"truncated_producers", m.stream->truncated_producers},
                     {"upstream_dropped", m.stream->upstream_dropped},
                     {"events", m.stream->events}};
  }
  data += ",\"nans\":" + json_text(nans) + ",\"gradsims\":" + json_text(gradsims) +
          ",\"prechecks\":" + json_text(prechecks) + ",\"free_benchmark\":" + json_text(free_benchmark) + ",\"monitors\":" + json_text(monitors) +
          ",\"run\":" + json_text(run);
  data += ",\"graphs\":[";
  for (size_t i = 0; i < m.graphs.size(); ++i) {
    if (i) data += ',';
    report_append_graph_json(data, m.graphs[i]);
  }
  data += "]";
  data += ",\"negative\":";
  data += m.negative() ? "true" : "false";
  data += "}";
  escape_for_script(data);

  std::string page(report_page_template());
  auto replace = [&](std::string_view marker, const std::string &with) {
    const size_t at = page.find(marker);
    if (at == std::string::npos) throw std::logic_error(fmt::format("report page template lacks {}", marker));
    page.replace(at, marker.size(), with);
  };
  replace("@@TITLE@@", html_escape(m.title));
  replace("@@DATA@@", data);
  return page;
}

std::vector<std::string> report_summary_lines(const report_model &m, const std::string &file) {
  std::vector<std::string> lines;
  for (const auto &c : m.compares) {
    const std::string verdict = c.failing ? "FAIL" : c.errors ? "ERROR" : "PASS";
    const std::string label = report_compare_label(c);
    std::string line = fmt::format("tprobe-report: compare {}: {}: {} rows, {} failing, {} unmatched, {} not compared",
                                   label, verdict, c.rows.size(), c.failing, c.unmatched, c.errors);
    if (c.first_failing && c.first_failing < c.rows.size() && !c.rows[*c.first_failing].empty() &&
        c.rows[*c.first_failing][0].is_string())
      line += fmt::format("; first {}: line {} {}", c.status[*c.first_failing] == 'e' ? "error" : "failing",
                          *c.first_failing, c.rows[*c.first_failing][0].get<std::string>());
    lines.push_back(std::move(line));
  }
  for (const auto &n : m.nans) {
    if (n.ranks.empty()) {
      lines.push_back("tprobe-report: nan-analyze: PASS: no NaN/Inf producer");
      continue;
    }
    for (const auto &r : n.ranks)
      lines.push_back(fmt::format("tprobe-report: nan-analyze: FAIL: first producer {} {}{}", r.rank, r.op_name,
                                  r.construct_info.size() > 1 ? " in " + r.construct_info[r.construct_info.size() - 2] : ""));
  }
  for (const auto &g : m.gradsims) {
    const std::string where = g.rank.empty() ? "" : " " + g.rank;
    if (!g.first_suspect_step) {
      lines.push_back(fmt::format("tprobe-report: gradsim{}: PASS: no suspect step in {} steps", where, g.steps.size()));
      continue;
    }
    std::vector<std::string> names;
    for (const auto &p : g.params)
      if (std::find(p.suspect.begin(), p.suspect.end(), *g.first_suspect_step) != p.suspect.end()) names.push_back(p.name);
    if (names.size() > 3) names.resize(3), names.push_back("…");
    lines.push_back(fmt::format("tprobe-report: gradsim{}: FAIL: first suspect step {} ({})", where,
                                g.steps[*g.first_suspect_step], fmt::join(names, ", ")));
  }
  for (const auto &p : m.prechecks) {
    std::string line = fmt::format(
        "tprobe-report: precheck {}: {}: {} APIs; forward {} pass, {} warning, {} error, {} SKIP; backward {} pass, "
        "{} warning, {} error, {} SKIP, {} none", report_precheck_label(p), p.negative() ? "FAIL" : "PASS", p.apis,
        p.forward[0], p.forward[1], p.forward[2], p.forward[3], p.backward[0], p.backward[1], p.backward[2],
        p.backward[3], p.backward_none);
    if (!p.failing.empty() && p.failing.front().worst() != 's') {
      const auto &a = p.failing.front();
      line += fmt::format("; first {} {}", a.worst() == 'e' ? "error" : "warning", a.name);
      if (!a.metric.empty())
        line += fmt::format(" ({} {} {})", a.metric, a.value ? fmt::format("{:.6g}", *a.value) : "", a.rule);
    }
    lines.push_back(std::move(line));
  }
  if (!m.free_benchmarks.empty()) {
    // One line over every file: a long run has a file per step and rank.
    size_t rows = 0;
    const report_free_benchmark_row *first = nullptr;
    for (const auto &f : m.free_benchmarks) {
      rows += f.rows.size();
      if (!first && !f.rows.empty()) first = &f.rows.front();
    }
    std::string line = fmt::format("tprobe-report: free_benchmark: {}: {} inconsistent API call{} in {} free_benchmark.csv "
                                   "file{}", rows ? "FAIL" : "PASS", rows, rows == 1 ? "" : "s",
                                   m.free_benchmarks.size(), m.free_benchmarks.size() == 1 ? "" : "s");
    if (first)
      line += fmt::format("; first step {} rank {} {} ({}, max_rel {}{})", first->step, first->rank, first->api_name,
                          first->pert_mode, first->max_rel.empty() ? "none" : first->max_rel,
                          first->dtype.empty() ? "" : ", " + first->dtype);
    lines.push_back(std::move(line));
  }
  for (const auto &x : m.monitors) {
    size_t tags = 0;
    int64_t steps_min = -1, steps_max = -1;
    for (const auto &t : x.types)
      for (const auto &tag : t.tags) {
        ++tags;
        for (const auto &r : tag.ranks)
          if (!r.steps.empty()) {
            if (steps_min < 0 || r.steps.front() < steps_min) steps_min = r.steps.front();
            if (r.steps.back() > steps_max) steps_max = r.steps.back();
          }
      }
    std::string line = fmt::format("tprobe-report: monitor {}: {}: {} anomal{}; {} tags in {} csv files, {} rank{}",
                                   x.dir, x.negative() ? "FAIL" : "PASS", x.anomalies.size(),
                                   x.anomalies.size() == 1 ? "y" : "ies", tags, x.csv_files.size(), x.ranks.size(),
                                   x.ranks.size() == 1 ? "" : "s");
    if (steps_min >= 0) line += fmt::format(", steps {}-{}", steps_min, steps_max);
    if (!x.anomalies.empty()) {
      const auto &a = x.anomalies.front();
      line += fmt::format("; first step {} rank {} {}{}", a.step, a.rank, a.tag_name, a.op.empty() ? "" : " " + a.op);
    }
    lines.push_back(std::move(line));
  }
  for (const auto &g : m.graphs) lines.push_back(report_graph_summary_line(g));
  if (m.stream)
    lines.push_back(fmt::format("tprobe-report: stream: {} records from {} producers, {} dropped upstream, {} gone "
                                "without end-of-stream", m.stream->records, m.stream->producers,
                                m.stream->upstream_dropped, m.stream->truncated_producers));
  for (const auto &why : m.unread) lines.push_back(fmt::format("tprobe-report: ERROR: result not read: {}", why));
  lines.push_back(fmt::format("tprobe-report: verdict: {}{}", m.negative() ? "FAIL" : "PASS",
                              file.empty() ? "" : "; report " + file));
  return lines;
}

namespace {

void write_page(report_result &r, const std::string &output) {
  if (output.empty()) throw usage_error("--output is empty");
  const std::string page = report_render_html(r.model);
  const fs::path out(output);
  std::error_code ec;
  if (out.has_parent_path() && !fs::exists(out.parent_path(), ec)) {
    fs::create_directories(out.parent_path(), ec);
    if (ec) throw system_error(fmt::format("unable to create {}: {}", out.parent_path().string(), ec.message()));
  }
  atomic_write_file(output, page);
  r.file = output;
  r.bytes = page.size();
  r.summary = report_summary_lines(r.model, r.file);
}

}  // namespace

report_result report_run(const report_options &o) {
  report_result r;
  r.model = report_scan(o);
  write_page(r, o.output);
  return r;
}

report_result report_run_stream(stage_io &io, const report_options &o) {
  report_stream_info info;
  report_options options = o;
  auto add_folder_of = [&](const std::string &file) {
    const std::string dir = fs::path(file).parent_path().string();
    if (!dir.empty() && std::find(options.results.begin(), options.results.end(), dir) == options.results.end())
      options.results.push_back(dir);
  };
  while (auto rec = io.receive()) {
    const auto &h = rec->header;
    ++info.records;
    if (h.kind == record_kind::session) {
      info.sessions.push_back(h.meta.is_null() ? ojson::object() : ojson(h.meta));
      continue;
    }
    if (h.kind != record_kind::value || !h.meta.is_object()) continue;
    const std::string event = h.meta.value("event", "");
    if (event == "compare_live_summary") {
      if (auto f = h.meta.find("files"); f != h.meta.end() && f->is_array())
        for (const auto &file : *f)
          if (file.is_string()) add_folder_of(file.get<std::string>());
      info.events.push_back(fmt::format("compare-live: {} rows, {} failing", h.meta.value("rows", uint64_t{0}),
                                        h.meta.value("failing", uint64_t{0})));
    } else if (event == "first_producer") {
      if (auto f = h.meta.find("file"); f != h.meta.end() && f->is_string() && !f->get<std::string>().empty())
        add_folder_of(f->get<std::string>());
      info.events.push_back(fmt::format("nan-live: first producer: step {} rank {} {}", h.step, h.rank, h.entry));
    } else if (event == "first_divergence") {
      info.events.push_back(fmt::format("compare-live: first divergence: step {} rank {} {} {}", h.step, h.rank,
                                        h.entry, h.slot));
    }
  }
  const auto &counts = io.counts();
  info.producers = counts.producers;
  info.truncated_producers = counts.truncated_producers;
  info.upstream_dropped = counts.upstream_dropped;

  report_result r;
  r.model = scan_results(options, false);  // a run's counters and configs are worth a page on their own
  r.model.title = options.title;
  r.model.stream = std::move(info);
  write_page(r, options.output);
  return r;
}

}  // namespace tprobe
