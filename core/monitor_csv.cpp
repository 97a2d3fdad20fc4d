// monitor_csv.cpp: the csv files of msprobe's CSVWriterWithAD (monitor.h), byte for byte: the
// text pandas 1.x writes for DataFrame(rows).round(ndigits).fillna("nan").to_csv(header=False,
// index=False).
#include <cmath>
#include <string>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "monitor.h"

#include "csv.h"
#include "errors.h"
#include "pyjson.h"

namespace tprobe {

namespace {

// One cell as the Python list msprobe builds holds it.
struct cell {
  enum class kind { text, integer, real, shape, none } k = kind::none;  // none: a missing cell (ragged rows)
  std::string text;
  int64_t integer = 0;
  double real = 0;
  const std::vector<int64_t> *shape = nullptr;
};


std::string shape_text(const std::vector<int64_t> &shape) {
  // str(list(torch.Size)): "[2, 3]", "[]".
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

// numpy's power_of_ten (multiarray/calculation.c), exact up to 1e22.
double power_of_ten(int n) {
  static const double p10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8};
  if (n < 9) return p10[n];
  double ret = 1e9;
  while (n-- > 9) ret *= 10.;
  return ret;
}

}  // namespace

double monitor_round(double x, int ndigits) {
  if (ndigits < 0) ndigits = 0;
  const double f = power_of_ten(ndigits);
  return std::nearbyint(x * f) / f;  // rint in the default rounding mode: half to even
}

std::pair<int64_t, int64_t> monitor_csv_step_range(int64_t step, int64_t k) {
  if (k < 1) k = 1;
  // Python's floor division, also for a negative step.
  int64_t q = step / k;
  if ((step % k != 0) && ((step < 0) != (k < 0))) --q;
  return {q * k, (q + 1) * k - 1};
}

std::string monitor_csv_file_name(std::string_view prefix, int64_t step, int64_t step_count_per_record) {
  auto [start, end] = monitor_csv_step_range(step, step_count_per_record);
  return fmt::format("{}_{}-{}.csv", prefix, start, end);
}

std::string monitor_csv_header(const std::vector<std::string> &ops, bool micro_step) {
  std::string out = micro_step ? "vpp_stage,name,step,micro_step" : "vpp_stage,name,step";
  for (const auto &op : ops) {
    out += ',';
    csv_field_append(out, op);
  }
  out += '\n';
  return out;
}

std::string monitor_csv_lines(const monitor_rows &rows, int ndigits) {
  // The Python lists: name.split(':') + the values in ops order, then the step inserted at index 2
  // (after the values: a name without ':' puts it after the first value).
  std::vector<std::vector<cell>> table;
  table.reserve(rows.rows.size());
  size_t width = 0;
  for (const auto &row : rows.rows) {
    std::vector<cell> line;
    for (auto &part : monitor_name_split(monitor_tag_name(row.tag))) {
      cell c;
      c.k = cell::kind::text;
      c.text = std::move(part);
      line.push_back(std::move(c));
    }
    size_t v = 0;
    for (const auto &op : rows.ops) {
      cell c;
      if (op == "shape") {
        if (row.shape) {
          c.k = cell::kind::shape;
          c.shape = &*row.shape;
        } else {
          c.k = cell::kind::real;  // a non-tensor's NaN
          c.real = NAN;
        }
      } else if (op == "dtype") {
        if (row.dtype) {
          c.k = cell::kind::text;
          c.text = *row.dtype;
        } else {
          c.k = cell::kind::real;
          c.real = NAN;
        }
      } else if (v < row.values.size()) {
        const monitor_number &n = row.values[v++];
        if (n.integer) {
          c.k = cell::kind::integer;
          c.integer = int64_t(n.value);
        } else {
          c.k = cell::kind::real;
          c.real = n.value;
        }
      }
      line.push_back(std::move(c));
    }
    cell step;
    step.k = cell::kind::integer;
    step.integer = rows.step;
    line.insert(line.begin() + std::min<size_t>(2, line.size()), std::move(step));
    width = std::max(width, line.size());
    table.push_back(std::move(line));
  }

  // pandas' inference per column (lib.maybe_convert_objects): a text, a shape (a list) or an
  // all-missing column is object; ints alone stay int64; ints with floats or missing cells
  // become float64. round() touches int64 and float64 columns only; fillna("nan") then writes
  // every NaN and missing cell as "nan".
  enum class column { object, int64, float64 };
  std::vector<column> kinds(width, column::int64);
  for (size_t col = 0; col < width; ++col) {
    bool object = false, real = false, any_value = false;
    for (const auto &line : table) {
      if (col >= line.size() || line[col].k == cell::kind::none) {
        real = true;
        continue;
      }
      any_value = true;
      switch (line[col].k) {
        case cell::kind::text:
        case cell::kind::shape: object = true; break;
        case cell::kind::real: real = true; break;
        default: break;
      }
    }
    kinds[col] = object || !any_value ? column::object : real ? column::float64 : column::int64;
  }

  std::string out;
  char buf[py_float_repr_max];
  for (const auto &line : table) {
    for (size_t col = 0; col < width; ++col) {
      if (col) out += ',';
      const cell missing;
      const cell &c = col < line.size() ? line[col] : missing;
      const column kind = kinds[col];
      switch (c.k) {
        case cell::kind::none: out += "nan"; break;
        case cell::kind::text: csv_field_append(out, c.text); break;
        case cell::kind::shape: csv_field_append(out, shape_text(*c.shape)); break;
        case cell::kind::integer:
          if (kind == column::float64) {
            out.append(buf, py_float_repr_write(buf, monitor_round(double(c.integer), ndigits)));
          } else {
            out += fmt::format("{}", c.integer);
          }
          break;
        case cell::kind::real: {
          if (std::isnan(c.real)) {
            out += "nan";
            break;
          }
          const double x = kind == column::float64 ? monitor_round(c.real, ndigits) : c.real;
          out.append(buf, py_float_repr_write(buf, x));
          break;
        }
      }
    }
    out += '\n';
  }
  return out;
}

}  // namespace tprobe

namespace tprobe {

nlohmann::ordered_json monitor_stack_info_to_json(const std::vector<monitor_stack> &stacks) {
  nlohmann::ordered_json out = nlohmann::ordered_json::array();
  for (const auto &s : stacks) out.push_back({s.module_name, s.stack});
  return out;
}

std::vector<monitor_stack> monitor_stack_info_from_json(const nlohmann::ordered_json &j, const std::string &what) {
  if (!j.is_array()) throw usage_error(fmt::format("{}: \"stack_info\" must be a list of [module_name, stack]", what));
  std::vector<monitor_stack> out;
  for (size_t i = 0; i < j.size(); ++i) {
    const auto &item = j[i];
    if (!item.is_array() || item.size() != 2 || !item[0].is_string() || !item[1].is_string())
      throw usage_error(fmt::format("{}: \"stack_info\"[{}] must be [module_name, stack], two strings, got {}", what, i,
                                    item.dump()));
    out.push_back({item[0].get<std::string>(), item[1].get<std::string>()});
  }
  return out;
}

std::string monitor_stack_info_csv(const std::vector<monitor_stack> &stacks) {
  std::string out = csv_line({"module_name", "stack_info"}, "\n");
  for (const auto &s : stacks) out += csv_line({s.module_name, s.stack}, "\n");
  return out;
}

}  // namespace tprobe
