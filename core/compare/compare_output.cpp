#include "compare_output.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <vector>

#include <fmt/format.h>
#include <xlsxwriter.h>

#include "compare_dump.h"
#include "errors.h"
#include "pyjson.h"
#include "safe_path.h"

namespace tprobe {

compare_output_files compare_output_names(const std::string &dir, const std::string &suffix,
                                          const std::string &timestamp) {
  const std::string base = dir + "/compare_result" + suffix + "_" + timestamp;
  return {base + ".xlsx", base + ".csv", base + ".json", dir + "/advisor" + suffix + "_" + timestamp + ".txt"};
}

std::string compare_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y%m%d%H%M%S", &local);
  return buffer;
}

namespace {

// Creates `path` empty, failing if anything (a link included) is there. False if it exists.
bool create_exclusive(const std::string &path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0640);
  if (fd < 0) {
    if (errno == EEXIST) return false;
    throw system_error_from_errno("create", path, errno);
  }
  ::close(fd);
  return true;
}

// Claims every name of `files` or none of them.
bool claim_all(const compare_output_files &files) {
  std::vector<std::string> claimed;
  try {
    for (const std::string *p : {&files.xlsx, &files.csv, &files.json, &files.advisor}) {
      if (p->empty()) continue;
      if (!create_exclusive(*p)) break;
      claimed.push_back(*p);
    }
  } catch (...) {
    for (const auto &p : claimed) ::unlink(p.c_str());
    throw;
  }
  const size_t wanted = files.advisor.empty() ? 3 : 4;
  if (claimed.size() == wanted) return true;
  for (const auto &p : claimed) ::unlink(p.c_str());
  return false;
}

}  // namespace

compare_output_files compare_output_claim(const std::string &dir, const std::string &suffix,
                                          const std::string &timestamp, bool advisor) {
  constexpr unsigned max_sets = 10000;
  for (unsigned n = 0; n < max_sets; ++n) {
    compare_output_files files = compare_output_names(dir, suffix, n == 0 ? timestamp : fmt::format("{}_{}", timestamp, n));
    if (!advisor) files.advisor.clear();
    if (claim_all(files)) return files;
  }
  throw system_error(fmt::format("unable to create {}: {} result files of this second exist already",
                                 compare_output_names(dir, suffix, timestamp).xlsx, max_sets));
}

void compare_output_release(const compare_output_files &files) noexcept {
  for (const std::string *p : {&files.xlsx, &files.csv, &files.json, &files.advisor})
    if (!p->empty()) ::unlink(p->c_str());
}

std::string spreadsheet_text(std::string s) {
  if (formula_like(s)) s.insert(s.begin(), '\'');
  return s;
}

namespace {

constexpr size_t excel_string_max = 32767;  // Excel's cell limit

std::string clip(std::string s) {
  if (s.size() <= excel_string_max) return s;
  size_t n = excel_string_max;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;  // keep UTF-8 whole
  s.resize(n);
  return s;
}

class workbook {
 public:
  explicit workbook(const std::string &path) : path_(path) {
    lxw_workbook_options options{};
    options.constant_memory = LXW_TRUE;  // rows go to disk as they are written: any table size
    options.use_zip64 = LXW_TRUE;
    wb_ = workbook_new_opt(path.c_str(), &options);
    if (!wb_) throw system_error_from_errno("create", path, errno ? errno : EIO);
  }
  ~workbook() {
    if (wb_) workbook_close(wb_);  // only on an error path: the file is removed by the caller
  }
  workbook(const workbook &) = delete;
  workbook &operator=(const workbook &) = delete;

  lxw_workbook *get() { return wb_; }
  void close() {
    const lxw_error e = workbook_close(wb_);
    wb_ = nullptr;
    if (e != LXW_NO_ERROR) throw system_error(fmt::format("unable to write {}: {}", path_, lxw_strerror(e)));
  }

 private:
  std::string path_;
  lxw_workbook *wb_ = nullptr;
};

void write_cell(lxw_worksheet *ws, lxw_row_t r, lxw_col_t c, const cell &v, lxw_format *f, bool highlighted) {
  // pandas writes NaN as an empty cell and ±inf as the text "inf"/"-inf"; msprobe's highlighted
  // workbook writes every non-number as text and inf/-inf/nan as "inf\t" etc.
  const auto text = [&](const std::string &s) { worksheet_write_string(ws, r, c, clip(s).c_str(), f); };
  switch (v.k) {
    case cell::kind::empty:
      if (f) worksheet_write_blank(ws, r, c, f);
      return;
    case cell::kind::boolean:
      if (highlighted)
        text(v.boolean ? "True" : "False");
      else
        worksheet_write_boolean(ws, r, c, v.boolean, f);
      return;
    case cell::kind::integer: worksheet_write_number(ws, r, c, static_cast<double>(v.integer), f); return;
    case cell::kind::real:
      if (std::isfinite(v.real)) {
        worksheet_write_number(ws, r, c, v.real, f);
      } else if (highlighted) {
        text(cell_str(v) + "\t");
      } else if (std::isnan(v.real)) {
        if (f) worksheet_write_blank(ws, r, c, f);
      } else {
        text(v.real > 0 ? "inf" : "-inf");
      }
      return;
    case cell::kind::text:
      if (highlighted && (v.text == "inf" || v.text == "-inf" || v.text == "nan"))
        text(v.text + "\t");
      else
        text(spreadsheet_text(v.text));
      return;
  }
}

// Writes through a temporary name in the same folder, then 0640 and rename().
template <typename Writer>
void write_atomically(const std::string &path, Writer &&write) {
  const auto p = std::filesystem::path(path);
  const std::string tmp = (p.parent_path() / fmt::format(".{}.tmp.{}", p.filename().string(), ::getpid())).string();
  try {
    write(tmp);
    if (::chmod(tmp.c_str(), 0640) != 0) throw system_error_from_errno("chmod", tmp, errno);
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw system_error_from_errno("rename", tmp, errno);
  } catch (...) {
    ::unlink(tmp.c_str());
    throw;
  }
}

}  // namespace

void compare_write_xlsx(const compare_table &t, const std::string &path, bool highlighted) {
  write_atomically(path, [&](const std::string &tmp) {
    workbook wb(tmp);
    const auto columns = compare_table_columns(t);
    lxw_format *header = nullptr;
    if (!highlighted) {
      header = workbook_add_format(wb.get());
      format_set_bold(header);
      format_set_border(header, LXW_BORDER_THIN);
      format_set_align(header, LXW_ALIGN_CENTER);
      format_set_align(header, LXW_ALIGN_VERTICAL_TOP);
    }
    lxw_format *red = workbook_add_format(wb.get());
    format_set_pattern(red, LXW_PATTERN_SOLID);
    format_set_bg_color(red, 0xFF0000);
    lxw_format *yellow = workbook_add_format(wb.get());
    format_set_pattern(yellow, LXW_PATTERN_SOLID);
    format_set_bg_color(yellow, 0xFFFF00);

    // pandas' save_excel: one sheet below 1,048,500 rows, else ceil(rows / 1,048,500) even slices.
    const size_t rows = t.rows.size();
    const bool sliced = !highlighted && rows >= compare_max_excel_rows;
    const size_t parts = sliced ? (rows + compare_max_excel_rows - 1) / compare_max_excel_rows : 1;
    const size_t per_part = sliced ? (rows + parts - 1) / parts : rows;
    for (size_t part = 0; part < parts; ++part) {
      const std::string name = highlighted ? "Sheet" : sliced ? fmt::format("part_{}", part) : "Sheet1";
      lxw_worksheet *ws = workbook_add_worksheet(wb.get(), name.c_str());
      if (!ws) throw system_error(fmt::format("unable to write {}: cannot add sheet {}", path, name));
      for (size_t c = 0; c < columns.size(); ++c)
        worksheet_write_string(ws, 0, static_cast<lxw_col_t>(c), columns[c].c_str(), header);
      const size_t first = part * per_part, last = std::min(rows, first + per_part);
      for (size_t i = first; i < last; ++i) {
        const auto cells = compare_table_row_cells(t, i);
        lxw_format *fill = t.rows[i].color == row_color::red      ? red
                           : t.rows[i].color == row_color::yellow ? yellow
                                                                   : nullptr;
        const auto r = static_cast<lxw_row_t>(i - first + 1);
        for (size_t c = 0; c < cells.size(); ++c) write_cell(ws, r, static_cast<lxw_col_t>(c), cells[c], fill, highlighted);
      }
    }
    wb.close();
  });
}

std::string compare_csv_field(const cell &c) {
  std::string s = c.k == cell::kind::text ? spreadsheet_text(cell_str(c)) : cell_str(c);
  if (s.find_first_of(",\"\n\r") == std::string::npos) return s;
  std::string quoted = "\"";
  for (const char ch : s) {
    if (ch == '"') quoted.push_back('"');
    quoted.push_back(ch);
  }
  quoted.push_back('"');
  return quoted;
}

void compare_write_csv(const compare_table &t, const std::string &path) {
  std::string out;
  const auto columns = compare_table_columns(t);
  for (size_t c = 0; c < columns.size(); ++c) {
    if (c) out.push_back(',');
    out += compare_csv_field(cell::of_text(columns[c]));
  }
  out.push_back('\n');
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const auto cells = compare_table_row_cells(t, i);
    for (size_t c = 0; c < cells.size(); ++c) {
      if (c) out.push_back(',');
      out += compare_csv_field(cells[c]);
    }
    out.push_back('\n');
  }
  atomic_write_file(path, out);
}

namespace {

nlohmann::ordered_json cell_json(const cell &c) {
  switch (c.k) {
    case cell::kind::empty: return nullptr;
    case cell::kind::boolean: return c.boolean;
    case cell::kind::integer: return c.integer;
    case cell::kind::real: return c.real;
    case cell::kind::text: return c.text;
  }
  return nullptr;
}

}  // namespace

void compare_write_json(const compare_table &t, const std::string &path, const std::string &rank, bool highlighted,
                        const advisor_result *advisor) {
  using json = nlohmann::ordered_json;
  size_t failing = 0, unmatched = 0, errors = 0;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    failing += compare_row_failing(t, i) ? 1 : 0;
    unmatched += t.rows[i].bench ? 0 : 1;
    errors += compare_row_error(t, i) ? 1 : 0;
  }
  json head;
  head["format"] = "tprobe-compare";
  head["version"] = 1;
  head["mode"] = compare_mode_name(t.options.mode);
  head["match"] = compare_match_name(t.options.match);
  // Absolute, so that a reader elsewhere (the report stage) finds the dumps and their construct.json;
  // a live compare's sides are run labels, not files, and stay as they are.
  auto where = [](const std::string &path) {
    std::error_code ec;
    return std::filesystem::exists(path, ec) ? absolute_normal_path(path) : path;
  };
  head["npu"] = where(t.npu->path);
  head["bench"] = where(t.bench->path);
  head["rank"] = rank.empty() ? json(nullptr) : json(rank);
  head["columns"] = compare_table_columns(t);
  std::string text = pyjson_dump(head, 1);
  text.pop_back();  // reopen the object: '}'
  while (!text.empty() && text.back() == '\n') text.pop_back();
  text += ",\n \"rows\": [";
  for (size_t i = 0; i < t.rows.size(); ++i) {
    json row = json::array();
    for (const auto &c : compare_table_row_cells(t, i)) row.push_back(cell_json(c));
    text += i ? ",\n  " : "\n  ";
    pyjson_dump_append(text, row, -1);
  }
  text += t.rows.empty() ? "]" : "\n ]";
  json tail;
  if (highlighted) {
    json colors = json::array();
    for (const auto &r : t.rows)
      colors.push_back(r.color == row_color::red ? json("red") : r.color == row_color::yellow ? json("yellow") : json(nullptr));
    tail["highlight"] = std::move(colors);
  }
  // Each row's verdict, so a reader (the report stage) need not re-derive msprobe's rules per mode:
  // "f" failing (compare_row_failing), "e" tensor files not read, "u" no bench row, "o" otherwise.
  std::string status(t.rows.size(), 'o');
  for (size_t i = 0; i < t.rows.size(); ++i)
    status[i] = compare_row_failing(t, i) ? 'f' : compare_row_error(t, i) ? 'e' : t.rows[i].bench ? 'o' : 'u';
  tail["row_status"] = std::move(status);
  tail["failing_rows"] = failing;
  tail["unmatched_rows"] = unmatched;
  tail["error_rows"] = errors;
  const compare_match_counts counts = compare_table_match_counts(t);
  tail["paired_by_name"] = counts.name;
  tail["paired_by_alignment"] = counts.aligned;
  tail["advisor"] = advisor ? json{{"line", advisor->line},
                                   {"suspect_nodes", advisor->suspect_nodes},
                                   {"expert_advice", advisor->advice}}
                            : json(nullptr);
  std::string tail_text = pyjson_dump(tail, 1);  // "{\n \"failing_rows\": …\n}"
  text += ",\n" + tail_text.substr(2);
  atomic_write_file(path, text);
}

void compare_write_advisor(const advisor_result &a, const std::string &path) { atomic_write_file(path, advisor_text(a)); }

}  // namespace tprobe
