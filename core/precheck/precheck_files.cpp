// precheck_files.cpp: see precheck_files.h. The byte layout is what Python's csv.writer writes
// through open(path, "a+", encoding="utf-8-sig") (msprobe's write_csv, core/common/file_utils.py):
// the BOM only at the start of the file, "\r\n" after each row, QUOTE_MINIMAL quoting.
#include "precheck_files.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <regex>
#include <sstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include "errors.h"

namespace tprobe::precheck {
namespace {

constexpr std::string_view bom = "\xEF\xBB\xBF";

std::string opt_cell(const std::optional<double> &v) { return v ? format_float_cell(*v) : " "; }
std::string text_cell(const std::string &s) { return s.empty() ? " " : s; }

std::string lower(std::string_view s) {
  std::string out(s);
  for (char &c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// Writes all of `data` (one write(2) unless interrupted) to an O_APPEND descriptor.
void write_all(int fd, const std::string &data, const std::filesystem::path &path) {
  size_t done = 0;
  while (done < data.size()) {
    const ssize_t n = ::write(fd, data.data() + done, data.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int e = errno;
      ::close(fd);
      throw system_error_from_errno("write", path.string(), e);
    }
    done += static_cast<size_t>(n);
  }
}

}  // namespace

std::string timestamp_now() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char text[32];
  std::strftime(text, sizeof text, "%Y%m%d%H%M%S", &local);
  return text;
}

std::string format_float_cell(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return fmt::format("{:.14f}", value);
}

std::optional<double> parse_float_cell(std::string_view cell) {
  const size_t first = cell.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return std::nullopt;
  const size_t last = cell.find_last_not_of(" \t\r\n");
  const std::string text(cell.substr(first, last - first + 1));
  const std::string l = lower(text);
  const std::string unsigned_l = (l[0] == '+' || l[0] == '-') ? l.substr(1) : l;
  const double sign = l[0] == '-' ? -1.0 : 1.0;
  if (unsigned_l == "nan") return std::nan("");
  if (unsigned_l == "inf" || unsigned_l == "infinity") return sign * HUGE_VAL;
  // Python's float() takes decimal forms only: refuse strtod's hex and "nan(…)" extensions.
  if (l.find('x') != std::string::npos || l.find('n') != std::string::npos)
    throw usage_error(fmt::format("\"{}\" is not a number", text));
  char *end = nullptr;
  const double v = std::strtod(text.c_str(), &end);
  if (end != text.c_str() + text.size() || text.empty()) throw usage_error(fmt::format("\"{}\" is not a number", text));
  return v;
}

std::string csv_line(const std::vector<std::string> &cells) {
  std::string line;
  for (size_t i = 0; i < cells.size(); ++i) {
    if (i) line += ',';
    const std::string &c = cells[i];
    // csv.writer quotes a row's only field when it is empty, so that the row is not blank.
    const bool quote = c.find_first_of(",\"\r\n") != std::string::npos || (cells.size() == 1 && c.empty());
    if (!quote) {
      line += c;
      continue;
    }
    line += '"';
    for (char ch : c) {
      if (ch == '"') line += '"';
      line += ch;
    }
    line += '"';
  }
  line += "\r\n";
  return line;
}

void csv_append(const std::filesystem::path &path, const std::vector<std::string> &header,
                const std::vector<std::vector<std::string>> &rows) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0) throw system_error_from_errno("open", path.string(), errno);
  struct stat st{};
  if (::fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    throw system_error_from_errno("stat", path.string(), e);
  }
  std::string text;
  if (st.st_size == 0) {
    text += bom;
    text += csv_line(header);
  }
  for (const auto &row : rows) text += csv_line(row);
  write_all(fd, text, path);
  if (::close(fd) != 0) throw system_error_from_errno("close", path.string(), errno);
}

const std::vector<std::string> &detail_header() {
  static const std::vector<std::string> h = {
      "API Name", "Bench Dtype", "DEVICE Dtype", "Shape", "余弦相似度", "最大绝对误差", "双百指标", "双千指标",
      "双万指标", "二进制一致错误率", "误差均衡性", "均方根误差", "小值域错误占比", "相对误差最大值", "相对误差平均值",
      "inf/nan错误率", "相对误差错误率", "绝对误差错误率", "ULP误差最大值", "ULP误差平均值", "ULP误差大于阈值占比",
      "Status", "Message"};
  return h;
}

const std::vector<std::string> &result_header() {
  static const std::vector<std::string> h = {"API name", "Forward Test Success", "Backward Test Success", "Message"};
  return h;
}

std::vector<std::string> detail_cells(const detail_row &r, dialect d) {
  return {r.api_name,
          text_cell(r.bench_dtype),
          text_cell(r.device_dtype),
          text_cell(r.shape),
          opt_cell(r.cosine),
          opt_cell(r.max_abs_err),
          opt_cell(r.ratio_hundredth),
          opt_cell(r.ratio_thousandth),
          opt_cell(r.ratio_ten_thousandth),
          opt_cell(r.binary_error_rate),
          opt_cell(r.error_balance),
          opt_cell(r.rmse),
          opt_cell(r.small_value_err_ratio),
          opt_cell(r.max_rel_error),
          opt_cell(r.mean_rel_error),
          opt_cell(r.inf_nan_error_ratio),
          opt_cell(r.rel_err_ratio),
          opt_cell(r.abs_err_ratio),
          opt_cell(r.ulp_max),
          opt_cell(r.ulp_mean),
          opt_cell(r.ulp_over_threshold),
          std::string(status_text(r.verdict, d)),
          r.message};
}

std::vector<std::string> result_cells(const result_row &r, dialect d) {
  std::vector<std::string> cells = {r.api_name, std::string(status_text(r.forward, d)),
                                    r.backward ? std::string(status_text(*r.backward, d)) : " "};
  if (r.forward == status::skip || r.backward == status::skip) cells.push_back(r.message);
  return cells;
}

precheck_files::precheck_files(std::filesystem::path result_path, std::filesystem::path details_path, std::string ts,
                               dialect d)
    : result_path_(std::move(result_path)), details_path_(std::move(details_path)), ts_(std::move(ts)), dialect_(d) {}

precheck_files::precheck_files(const std::filesystem::path &out_dir, const std::string &ts, dialect d)
    : precheck_files(out_dir / ("accuracy_checking_result_" + ts + ".csv"),
                     out_dir / ("accuracy_checking_details_" + ts + ".csv"), ts, d) {
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) throw system_error(fmt::format("unable to create {}: {}", out_dir.string(), ec.message()));
  // Comparator.write_csv_title: each header once, when its file is new.
  csv_append(result_path_, result_header(), {});
  csv_append(details_path_, detail_header(), {});
}

precheck_files precheck_files::resume(const std::filesystem::path &result_csv, dialect d) {
  static const std::regex name(R"(^accuracy_checking_result_(\d{14})\.csv$)");
  const std::string file = result_csv.filename().string();
  std::smatch m;
  if (!std::regex_match(file, m, name))
    throw usage_error(fmt::format("{}: a resumed result file must be named accuracy_checking_result_<14 digits>.csv",
                                  result_csv.string()));
  std::error_code ec;
  if (!std::filesystem::is_regular_file(result_csv, ec))
    throw usage_error(fmt::format("{}: no such result file to resume", result_csv.string()));
  const std::string ts = m[1].str();
  precheck_files files(result_csv, result_csv.parent_path() / ("accuracy_checking_details_" + ts + ".csv"), ts, d);
  const csv_table done = read_csv_table(result_csv);
  for (const auto &row : done.rows)
    if (!row.empty()) files.done_.insert(row[0]);
  return files;
}

void precheck_files::write(const api_judgement &judgement) {
  csv_append(result_path_, result_header(), {result_cells(judgement.result, dialect_)});
  std::vector<std::vector<std::string>> rows;
  for (const auto &r : judgement.details) rows.push_back(detail_cells(r, dialect_));
  csv_append(details_path_, detail_header(), rows);
  done_.insert(judgement.result.api_name);
}

csv_table parse_csv_table(std::string_view text, const std::string &name) {
  if (text.substr(0, bom.size()) == bom) text.remove_prefix(bom.size());
  std::vector<std::vector<std::string>> rows;
  std::vector<std::string> row;
  std::string cell;
  bool quoted = false, cell_started = false;
  size_t i = 0;
  const auto end_row = [&] {
    row.push_back(std::move(cell));
    cell.clear();
    cell_started = false;
    // csv.reader gives [] for a blank line; such lines carry no row.
    if (!(row.size() == 1 && row[0].empty())) rows.push_back(std::move(row));
    row.clear();
  };
  while (i < text.size()) {
    const char c = text[i];
    if (quoted) {
      if (c == '"') {
        if (i + 1 < text.size() && text[i + 1] == '"') {
          cell += '"';
          i += 2;
          continue;
        }
        quoted = false;
      } else {
        cell += c;
      }
      ++i;
      continue;
    }
    if (c == '"' && !cell_started) {
      quoted = cell_started = true;
    } else if (c == ',') {
      row.push_back(std::move(cell));
      cell.clear();
      cell_started = false;
    } else if (c == '\r' || c == '\n') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      end_row();
    } else {
      cell += c;
      cell_started = true;
    }
    ++i;
  }
  if (quoted) throw usage_error(fmt::format("{}: a quoted cell is not closed", name));
  if (cell_started || !cell.empty() || !row.empty()) end_row();
  if (rows.empty()) throw usage_error(fmt::format("{}: empty file, no header", name));
  csv_table t;
  t.header = std::move(rows.front());
  t.rows.assign(std::make_move_iterator(rows.begin() + 1), std::make_move_iterator(rows.end()));
  return t;
}

csv_table read_csv_table(const std::filesystem::path &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw system_error_from_errno("open", path.string(), errno);
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw system_error_from_errno("read", path.string(), errno);
  return parse_csv_table(text.str(), path.string());
}

}  // namespace tprobe::precheck
