#include "compare_table.h"

#include <cmath>
#include <deque>
#include <unordered_set>

#include <fmt/format.h>

namespace tprobe {

namespace {

const cell na_cell = cell::of_text("N/A");

// msprobe's Match.rename_api: the name without its call count ("Functional.conv2d.1.forward.input.0"
// → "Functional.conv2d.forward.input.0"; for modules the class name goes instead, a quirk kept).
std::string rename_api(const std::string &name) {
  const bool forward = name.find("forward") != std::string::npos;
  if (!forward && name.find("backward") == std::string::npos) return name;
  const std::string process = forward ? "forward" : "backward";
  const size_t first = name.find(process);
  const std::string before = name.substr(0, first);
  const size_t second = name.find(process, first + process.size());
  const std::string in_out = name.substr(first + process.size(),
                                         second == std::string::npos ? std::string::npos : second - first - process.size());
  // before.rsplit('.', 2)[0]
  std::string head = before;
  const size_t last = before.rfind('.');
  if (last != std::string::npos) {
    const size_t prev = last == 0 ? std::string::npos : before.rfind('.', last - 1);
    head = before.substr(0, prev == std::string::npos ? last : prev);
  }
  return head + "." + process + in_out;
}

const std::unordered_map<std::string, std::string> &cross_dtype_mapping() {
  static const std::unordered_map<std::string, std::string> m{
      {"Int8", "int"},        {"torch.int8", "int"},       {"UInt8", "int"},           {"torch.uint8", "int"},
      {"Int16", "int"},       {"torch.int16", "int"},      {"UInt16", "int"},          {"torch.uint16", "int"},
      {"Int32", "int"},       {"torch.int32", "int"},      {"UInt32", "int"},          {"torch.uint32", "int"},
      {"Int64", "int"},       {"torch.int64", "int"},      {"UInt64", "int"},          {"torch.uint64", "int"},
      {"Float16", "float"},   {"torch.float16", "float"},  {"Float32", "float"},       {"torch.float32", "float"},
      {"Float64", "float"},   {"torch.float64", "float"},  {"BFloat16", "float"},      {"torch.bfloat16", "float"},
      {"Bool", "bool"},       {"torch.bool", "bool"},      {"Complex64", "complex"},   {"torch.complex64", "complex"},
      {"Complex128", "complex"}, {"torch.complex128", "complex"}};
  return m;
}

bool dtype_match(std::string a, std::string b, bool cross) {
  if (cross) {
    const auto &m = cross_dtype_mapping();
    if (const auto it = m.find(a); it != m.end()) a = it->second;
    if (const auto it = m.find(b); it != m.end()) b = it->second;
  }
  if (a == b) return true;
  static const std::unordered_set<std::string> ms{"Float16", "Float32", "BFloat16"};
  static const std::unordered_set<std::string> pt{"torch.float16", "torch.float32", "torch.bfloat16"};
  return (ms.count(a) && ms.count(b)) || (pt.count(a) && pt.count(b));
}

using pairs_t = std::vector<std::pair<size_t, std::optional<size_t>>>;

std::string key_of(const dump_row &r) { return r.name + '\x1f' + r.shape; }

pairs_t match_exact(const dump_file &npu, const dump_file &bench) {
  std::unordered_map<std::string, std::vector<size_t>> index;
  index.reserve(bench.rows.size());
  for (size_t i = 0; i < bench.rows.size(); ++i) index[key_of(bench.rows[i])].push_back(i);
  pairs_t pairs;
  pairs.reserve(npu.rows.size());
  for (size_t i = 0; i < npu.rows.size(); ++i) {
    const auto it = index.find(key_of(npu.rows[i]));
    if (it == index.end()) {
      pairs.emplace_back(i, std::nullopt);
      continue;
    }
    for (const size_t b : it->second) pairs.emplace_back(i, b);
  }
  return pairs;
}

pairs_t match_mapping(const dump_file &npu, const dump_file &bench,
                      const std::unordered_map<std::string, std::string> &mapping) {
  std::unordered_map<std::string, std::vector<size_t>> index;
  for (size_t i = 0; i < bench.rows.size(); ++i) index[bench.rows[i].name].push_back(i);
  pairs_t pairs;
  for (size_t i = 0; i < npu.rows.size(); ++i) {
    const auto m = mapping.find(npu.rows[i].name);
    const std::string &key = m == mapping.end() ? npu.rows[i].name : m->second;
    const auto it = index.find(key);
    if (it == index.end()) {
      pairs.emplace_back(i, std::nullopt);
      continue;
    }
    for (const size_t b : it->second) pairs.emplace_back(i, b);
  }
  return pairs;
}

// msprobe's process_fuzzy_match / match_op, with per-key indexes of both queues so a long run
// without matches stays linear.
pairs_t match_fuzzy(const dump_file &npu, const dump_file &bench) {
  std::vector<std::string> nkey(npu.rows.size()), bkey(bench.rows.size());
  for (size_t i = 0; i < npu.rows.size(); ++i) nkey[i] = rename_api(npu.rows[i].name) + '\x1f' + npu.rows[i].shape;
  for (size_t i = 0; i < bench.rows.size(); ++i)
    bkey[i] = rename_api(bench.rows[i].name) + '\x1f' + bench.rows[i].shape;

  std::deque<size_t> nq, bq;
  std::unordered_map<std::string, std::deque<size_t>> nidx, bidx;  // key → queued row indices, ascending
  pairs_t pairs;
  const auto pop_npu = [&] {
    nidx[nkey[nq.front()]].pop_front();
    nq.pop_front();
  };
  const auto pop_bench = [&] {
    bidx[bkey[bq.front()]].pop_front();
    bq.pop_front();
  };
  const size_t max_len = std::max(npu.rows.size(), bench.rows.size());
  size_t next_npu = 0;
  for (size_t i = 0; i < max_len; ++i) {
    if (i < npu.rows.size()) {
      nq.push_back(i);
      nidx[nkey[i]].push_back(i);
      next_npu = i + 1;
    }
    if (i < bench.rows.size()) {
      bq.push_back(i);
      bidx[bkey[i]].push_back(i);
    }
    if (nq.empty() != bq.empty()) break;
    if (nq.empty()) continue;
    // The last NPU item against every bench item (the earliest match wins; the last bench item
    // is tried last, which is the same as taking the earliest), then earlier NPU items against the
    // last bench item.
    std::optional<size_t> n_match, b_match;
    if (const auto it = bidx.find(nkey[nq.back()]); it != bidx.end() && !it->second.empty()) {
      n_match = nq.back();
      b_match = it->second.front();
    } else if (const auto jt = nidx.find(bkey[bq.back()]); jt != nidx.end() && !jt->second.empty()) {
      n_match = jt->second.front();
      b_match = bq.back();
    }
    if (!n_match) continue;
    while (nq.front() != *n_match) {
      pairs.emplace_back(nq.front(), std::nullopt);
      pop_npu();
    }
    pairs.emplace_back(*n_match, *b_match);
    pop_npu();
    while (bq.front() != *b_match) pop_bench();
    pop_bench();
  }
  for (const size_t n : nq) pairs.emplace_back(n, std::nullopt);
  for (size_t n = next_npu; n < npu.rows.size(); ++n) pairs.emplace_back(n, std::nullopt);  // never queued
  return pairs;
}

std::string req_grad_text(const cell &c) { return c.k == cell::kind::empty ? "N/A" : cell_str(c); }

cell stack_cell(const compare_table &t, const dump_row &r) {
  if (!r.first_of_entry || !t.options.npu_stacks) return na_cell;
  const auto it = t.options.npu_stacks->find(t.npu->entries[r.entry]);
  if (it == t.options.npu_stacks->end()) return na_cell;
  std::string text = "[";
  for (size_t i = 0; i < it->second.size(); ++i) {
    if (i) text += ", ";
    text += py_str_repr(it->second[i]);
  }
  text += "]";
  return cell::of_text(std::move(text));
}

void fill_common(const compare_table &t, compare_row &row) {
  const dump_row &n = t.npu->rows[row.npu];
  const dump_row *b = row.bench ? &t.bench->rows[*row.bench] : nullptr;
  row.req_grad_consistent = req_grad_text(n.requires_grad) == (b ? req_grad_text(b->requires_grad) : "N/A");
  if (t.options.stack_mode) row.stack = stack_cell(t, n);
  if (n.uninitialized || (b && b->uninitialized)) {
    // An allocation-only operator's output: whatever the allocator held. Shown, never judged.
    row.metrics.fill(na_cell);
    row.result = t.options.mode == compare_mode::summary ? "" : "N/A";
    row.err_message = "Uninitialized memory (an allocation-only operator's output): not compared. ";
    row.uninitialized = true;
    return;
  }
  switch (t.options.mode) {
    case compare_mode::md5: {
      // An unmatched row is "N/A", unless its NPU md5 is "N/A" too (a null leaf): msprobe compares
      // after filling the bench side with N/A.
      row.result = b ? compare_md5(n.md5, b->md5) : n.md5 == "N/A" ? "pass" : "N/A";
      break;
    }
    case compare_mode::summary: {
      if (!b) {
        row.metrics.fill(na_cell);
        row.result = "N/A";
        row.err_message = "No bench data matched.";
      } else {
        const summary_result s = compare_summary(n.stats, b->stats);
        for (size_t i = 0; i < 4; ++i) row.metrics[i] = s.diff[i], row.metrics[4 + i] = s.relative_err[i];
        row.result = s.warning ? "Warning" : "";
        row.err_message = s.warning ? "Need double check api accuracy. " : "";
      }
      if (!row.req_grad_consistent) row.err_message += "Requires_grad inconsistent. ";
      break;
    }
    case compare_mode::all: {
      row.metrics.fill(b ? cell::of_text("") : na_cell);
      row.result = b ? "Yes" : "N/A";
      row.err_message = b ? "" : "No bench data matched.";
      if (!row.req_grad_consistent) row.err_message = "Requires_grad inconsistent. ";
      break;
    }
  }
}

}  // namespace

compare_table compare_table_build(const dump_file &npu, const dump_file &bench, const compare_table_options &options) {
  compare_table t;
  t.options = options;
  t.npu = &npu;
  t.bench = &bench;
  t.cross_framework = !npu.framework.empty() && !bench.framework.empty() && npu.framework != bench.framework;
  if (options.mapping || options.fuzzy_match) t.options.match = compare_match::name;
  pairs_t pairs;
  if (t.options.match == compare_match::automatic) {
    for (const auto &p : compare_match_auto(npu, bench)) pairs.emplace_back(p.npu, p.bench);
  } else {
    pairs = options.mapping       ? match_mapping(npu, bench, *options.mapping)
            : options.fuzzy_match ? match_fuzzy(npu, bench)
                                  : match_exact(npu, bench);
  }
  t.rows.reserve(pairs.size());
  for (auto &[n, b] : pairs) {
    compare_row row;
    row.npu = n;
    row.bench = b;
    if (b && !options.mapping && !dtype_match(npu.rows[n].dtype, bench.rows[*b].dtype, t.cross_framework))
      row.bench.reset();
    row.how = !row.bench                                      ? pair_how::unpaired
              : npu.rows[n].name == bench.rows[*row.bench].name ? pair_how::name
                                                                : pair_how::aligned;
    fill_common(t, row);
    t.rows.push_back(std::move(row));
  }
  return t;
}

void compare_table_set_real_data(compare_table &t, size_t i, const real_data_result &r) {
  compare_row &row = t.rows[i];
  for (size_t k = 0; k < 6; ++k) row.metrics[k] = r.metrics[k];
  row.result = r.accuracy;
  row.err_message += r.err_message;
  row.error = r.error;
  if (t.options.fuzzy_match && row.bench && t.npu->rows[row.npu].name != t.bench->rows[*row.bench].name)
    row.err_message += " Fuzzy matching data, the comparison accuracy may be affected.";
}

std::vector<std::string> compare_table_columns(const compare_table &t) {
  std::vector<std::string> c{"NPU Name",         "Bench Name",         "NPU Dtype",         "Bench Dtype",
                             "NPU Tensor Shape", "Bench Tensor Shape", "NPU Requires_grad", "Bench Requires_grad"};
  const std::vector<std::string> stats{"NPU max",   "NPU min",   "NPU mean",   "NPU l2norm",
                                       "Bench max", "Bench min", "Bench mean", "Bench l2norm"};
  switch (t.options.mode) {
    case compare_mode::all:
      c.insert(c.end(), {"Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                         "Five Thousandths Err Ratio"});
      c.insert(c.end(), stats.begin(), stats.end());
      c.insert(c.end(), {"Requires_grad Consistent", "Accuracy Reached or Not", "Err_message"});
      break;
    case compare_mode::summary:
      c.insert(c.end(), {"Max diff", "Min diff", "Mean diff", "L2norm diff", "MaxRelativeErr", "MinRelativeErr",
                         "MeanRelativeErr", "NormRelativeErr"});
      c.insert(c.end(), stats.begin(), stats.end());
      c.insert(c.end(), {"Requires_grad Consistent", "Result", "Err_message"});
      break;
    case compare_mode::md5: c.insert(c.end(), {"NPU MD5", "BENCH MD5", "Requires_grad Consistent", "Result"}); break;
  }
  if (t.options.stack_mode) c.emplace_back("NPU_Stack_Info");
  if (t.options.mode == compare_mode::all) c.emplace_back("Data_name");
  if (t.options.match == compare_match::automatic) c.emplace_back("Match");  // after msprobe's columns
  return c;
}

std::vector<cell> compare_table_row_cells(const compare_table &t, size_t i) {
  const compare_row &row = t.rows[i];
  const dump_row &n = t.npu->rows[row.npu];
  const dump_row *b = row.bench ? &t.bench->rows[*row.bench] : nullptr;
  std::vector<cell> c;
  c.reserve(32);
  c.push_back(cell::of_text(n.name));
  c.push_back(b ? cell::of_text(b->name) : na_cell);
  c.push_back(cell::of_text(n.dtype));
  c.push_back(b ? cell::of_text(b->dtype) : na_cell);
  c.push_back(cell::of_text(n.shape));
  c.push_back(b ? cell::of_text(b->shape) : na_cell);
  c.push_back(cell::of_text(req_grad_text(n.requires_grad)));
  c.push_back(b ? cell::of_text(req_grad_text(b->requires_grad)) : na_cell);
  const auto push_stats = [&] {
    for (const auto &s : n.stats) c.push_back(s);
    for (size_t k = 0; k < 4; ++k) c.push_back(b ? b->stats[k] : na_cell);
  };
  switch (t.options.mode) {
    case compare_mode::all:
      for (size_t k = 0; k < 6; ++k) c.push_back(row.metrics[k]);
      push_stats();
      c.push_back(cell::of_bool(row.req_grad_consistent));
      c.push_back(cell::of_text(row.result));
      c.push_back(cell::of_text(row.err_message));
      break;
    case compare_mode::summary:
      for (size_t k = 0; k < 8; ++k) c.push_back(row.metrics[k]);
      push_stats();
      c.push_back(cell::of_bool(row.req_grad_consistent));
      c.push_back(cell::of_text(row.result));
      c.push_back(cell::of_text(row.err_message));
      break;
    case compare_mode::md5:
      c.push_back(cell::of_text(n.md5));
      c.push_back(cell::of_text(b ? b->md5 : "N/A"));
      c.push_back(cell::of_bool(row.req_grad_consistent));
      c.push_back(cell::of_text(row.result));
      break;
  }
  if (t.options.stack_mode) c.push_back(row.stack);
  if (t.options.mode == compare_mode::all)
    c.push_back(cell::of_text("[" + py_str_repr(n.data_name) + ", " + py_str_repr(b ? b->data_name : "N/A") + "]"));
  if (t.options.match == compare_match::automatic) c.push_back(cell::of_text(pair_how_name(row.how)));
  return c;
}

compare_match_counts compare_table_match_counts(const compare_table &t) {
  compare_match_counts n;
  for (const auto &row : t.rows) {
    switch (row.how) {
      case pair_how::name: ++n.name; break;
      case pair_how::aligned: ++n.aligned; break;
      case pair_how::unpaired: ++n.unpaired; break;
    }
  }
  return n;
}

// ---- highlight (msprobe's highlight.py) -------------------------------------------------------

namespace {

struct highlight_lines {
  // (row, messages) in order of first insertion, as add_highlight_row_info keeps them.
  std::vector<std::pair<size_t, std::vector<std::string>>> red, yellow;
  static void add(std::vector<std::pair<size_t, std::vector<std::string>>> &list, size_t row, std::string msg) {
    for (auto &[r, msgs] : list) {
      if (r == row) {
        msgs.push_back(std::move(msg));
        return;
      }
    }
    list.emplace_back(row, std::vector<std::string>{std::move(msg)});
  }
};

struct api_batch {
  std::string api_name;
  size_t start, input_len = 1, params_end, output_end, params_grad_end;
  explicit api_batch(std::string name, size_t s)
      : api_name(std::move(name)), start(s), params_end(s + 1), output_end(s + 1), params_grad_end(s + 1) {}
  void increment(const std::string &state) {
    if (state == "input" || state == "kwargs") ++input_len, ++params_end, ++output_end;
    if (state == "parameters") ++params_end, ++output_end;
    if (state == "output") ++output_end;
    ++params_grad_end;
  }
};

bool has_forward_backward_segment(const std::string &name) {
  return name.find(".forward.") != std::string::npos || name.find(".backward.") != std::string::npos;
}

struct row_view {
  cell npu_max, npu_min, bench_max, max_diff, one_thousandth, cosine, max_relative;
  bool req_grad_consistent;
};

row_view view_of(const compare_table &t, size_t i) {
  const compare_row &row = t.rows[i];
  const dump_row &n = t.npu->rows[row.npu];
  row_view v;
  v.npu_max = n.stats[0];
  v.npu_min = n.stats[1];
  v.bench_max = row.bench ? t.bench->rows[*row.bench].stats[0] : na_cell;
  const bool all = t.options.mode == compare_mode::all;
  v.max_diff = all ? row.metrics[METRIC_MAX_ABS_ERR] : row.metrics[0];
  v.one_thousandth = row.metrics[METRIC_ONE_THOUSANDTH];
  v.cosine = row.metrics[METRIC_COSINE];
  v.max_relative = row.metrics[4];
  v.req_grad_consistent = row.req_grad_consistent;
  return v;
}

bool overflow_text(const cell &c) {
  const std::string s = cell_str(c);
  return s == "nan" || s == "inf" || s == "-inf" || s == "nan\t" || s == "inf\t" || s == "-inf\t";
}

// CheckMaxRelativeDiff's get_number: "x%" → x/100; other cells as they are.
std::optional<double> relative_number(const cell &c) {
  if (c.k == cell::kind::text && !c.text.empty() && c.text.back() == '%') {
    const auto v = py_float_parse(std::string_view(c.text).substr(0, c.text.size() - 1));
    if (v) return *v / 100;
    return std::nullopt;
  }
  if (c.is_number()) return c.number();
  return std::nullopt;
}

void compare_rules(const compare_table &t, const row_view &in, const row_view &out, size_t out_index,
                   highlight_lines &lines) {
  // CheckOrderMagnitude (both modes)
  {
    const double d_in = std::fabs(in.max_diff.number()), d_out = std::fabs(out.max_diff.number());
    if (!(d_in > d_out || (d_in <= 1 || d_out <= 1))) {
      const double in_order = d_in < 1 ? 0 : std::log10(d_in), out_order = d_out < 1 ? 0 : std::log10(d_out);
      if (out_order - in_order >= 1)
        highlight_lines::add(lines.yellow, out_index,
                             "maximum absolute error of both input/parameters and output exceed 1, with the output "
                             "larger by an order of magnitude");
    }
  }
  if (t.options.mode == compare_mode::all) {
    // CheckOneThousandErrorRatio
    if (in.one_thousandth.is_number() && out.one_thousandth.is_number()) {
      const double a = in.one_thousandth.number(), b = out.one_thousandth.number();
      if (a > 0.9 && b < 0.6)
        highlight_lines::add(lines.red, out_index,
                             "The input/parameter's one thousandth err ratio exceeds 0.9, while the output's is below 0.6");
      else if (a - b > 0.1)
        highlight_lines::add(lines.yellow, out_index,
                             "The output's one thousandth err ratio decreases by more than 0.1 compared to the "
                             "input/parameter's");
    }
    // CheckCosineSimilarity
    if (in.cosine.is_number() && out.cosine.is_number() && in.cosine.number() - out.cosine.number() > 0.1)
      highlight_lines::add(lines.yellow, out_index,
                           "The output's cosine decreases by more than 0.1 compared to the input/parameter's");
  } else {
    // CheckMaxRelativeDiff
    const auto out_rel = relative_number(out.max_relative);
    if (!out_rel) return;
    if (*out_rel > 0.5) highlight_lines::add(lines.red, out_index, "maximum relative error exceeds 0.5");
    const auto in_rel = relative_number(in.max_relative);
    if (!in_rel) return;
    if (*out_rel > 0.1 && *in_rel < 0.01)
      highlight_lines::add(lines.yellow, out_index,
                           "The output's maximum relative error exceeds 0.1, while the input/parameter's is below 0.01");
  }
}

void find_error_rows(const compare_table &t, const api_batch &batch, highlight_lines &lines) {
  const auto numeric = [](const row_view &v) { return v.npu_max.is_number() && v.bench_max.is_number() && v.max_diff.is_number(); };
  for (size_t i = batch.start; i < batch.params_grad_end; ++i) {
    const row_view v = view_of(t, i);
    // CheckOverflow
    if (overflow_text(v.npu_max) || overflow_text(v.npu_min))
      highlight_lines::add(lines.red, i, "maximum or minimum is nan, -inf, or inf");
    else if (v.max_diff.is_number() && std::fabs(v.max_diff.number()) > 1e+10)
      highlight_lines::add(lines.red, i, "maximum absolute error exceeds 1e+10");
  }
  // Outputs against inputs and parameters. (msprobe means to skip outputs already red here, but
  // its test compares an index with (index, messages) pairs and never skips; kept.)
  for (size_t o = batch.params_end; o < batch.output_end; ++o) {
    const row_view out = view_of(t, o);
    if (!numeric(out)) continue;
    for (size_t in_index = batch.start; in_index < batch.params_end; ++in_index) {
      const row_view in = view_of(t, in_index);
      if (!numeric(in)) continue;
      compare_rules(t, in, out, o, lines);
    }
  }
  for (size_t i = batch.start; i < batch.params_grad_end; ++i)
    if (!t.rows[i].req_grad_consistent) highlight_lines::add(lines.yellow, i, "requires_grad is inconsistent");
}

}  // namespace

void compare_table_highlight(compare_table &t) {
  if (t.options.mode == compare_mode::md5 || t.rows.size() > compare_max_excel_rows) return;
  std::vector<api_batch> batches;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    const dump_row &n = t.npu->rows[t.rows[i].npu];
    const std::string &api = t.npu->entries[n.entry];
    if (!batches.empty() && (batches.back().api_name == api ||
                             (!has_forward_backward_segment(api) && batches.back().api_name.find(api) != std::string::npos)))
      batches.back().increment(n.state);
    else
      batches.emplace_back(api, i);
  }
  highlight_lines lines;
  for (const auto &batch : batches) find_error_rows(t, batch, lines);
  std::vector<bool> red(t.rows.size(), false);
  for (const auto &[row, msgs] : lines.red) red[row] = true;
  const auto append = [&](size_t row, const std::string &msg) {
    std::string &e = t.rows[row].err_message;
    if (e.empty())
      e = msg;
    else
      e += "\n" + msg;
  };
  for (const auto &[row, msgs] : lines.red) {
    t.rows[row].color = row_color::red;
    for (const auto &m : msgs) append(row, m);
  }
  for (const auto &[row, msgs] : lines.yellow) {
    if (red[row]) continue;
    t.rows[row].color = row_color::yellow;
    for (const auto &m : msgs) append(row, m);
  }
}

bool compare_row_failing(const compare_table &t, size_t i) {
  const std::string &r = t.rows[i].result;
  switch (t.options.mode) {
    case compare_mode::all: return r == "No";
    case compare_mode::summary: return r == "Warning";
    case compare_mode::md5: return r == "Different";
  }
  return false;
}

bool compare_row_error(const compare_table &t, size_t i) { return t.rows[i].error; }

std::string advisor_message(const std::string &name) {
  const auto has = [&](const char *s) { return name.find(s) != std::string::npos; };
  const auto deterministic = [&](std::string message) {
    for (const char *api : {"conv2d", "conv3d", "matmul", "nll_loss", "layer_norm", "lstm"})
      if (has(api))
        return std::string(
            "This torch api may be uncertainty in the calculation, can seed_all(mode=True) to enable deterministic "
            "computing.");
    return message;
  };
  std::string message;
  if (has("forward")) {
    if (has("input"))
      message =
          "1. Analyze the model to view the input source.\n"
          "2. Check whether an inplace API causes the output result to overwrite the input result. That is, the fault "
          "is actually caused by a computation error.\n"
          "3. The fault may be caused by memory corruption and further analysis is required.";
    else
      message = deterministic("This is a forward API computation error. Check the computation implementation.");
  } else {
    if (has("input"))
      message = "Check whether the forward computation result is affected.";
    else
      message = deterministic("This is a backward API computation error. Check the computation implementation.");
  }
  if (has("Functional_batch_norm") && has("forward_input.1"))
    message =
        "Torch API batch_norm input not fixed, the following suggestions may fix it:\n"
        "1. If use torch.nn.functional.batch_norm, you can set parameter training=False.\n"
        "2. If use torch.nn.BatchNormXXX, you can set parameter affine=False.\n"
        "3. Use seed_all(mode=True) to enable deterministic computing.";
  return message;
}

namespace {

// What the advisor says about rows whose tensor files could not be read (`first` is the first).
std::string error_rows_advice(const compare_table &t, size_t first, size_t count) {
  const compare_row &row = t.rows[first];
  // Its first line: --highlight appends its reasons on further lines.
  const std::string message = row.err_message.substr(0, row.err_message.find('\n'));
  return fmt::format(
      "{} {} could not be compared (a tensor file could not be read): nothing is known about their data. The "
      "first is line {}, {}: {} Restore or dump those tensors again and compare again.",
      count, count == 1 ? "row" : "rows", first, t.npu->rows[row.npu].name, message);
}

}  // namespace

advisor_result compare_table_advise(const compare_table &t) {
  advisor_result a;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    // msprobe logs rows whose accuracy is "Unmatched" (mode all) or whose shape is 'Nan' (never
    // written by this table).
    if (t.options.mode == compare_mode::all && t.rows[i].result == "Unmatched")
      a.unmatched_warnings.push_back("The tensor name matches but the shape or dtype does not match: " +
                                     t.npu->rows[t.rows[i].npu].name);
  }
  std::optional<size_t> failing, error;
  for (size_t i = 0; i < t.rows.size(); ++i) {
    if (!failing && compare_row_failing(t, i)) failing = i;
    if (compare_row_error(t, i)) {
      if (!error) error = i;
      ++a.error_rows;
    }
  }
  const std::optional<size_t> suspect = failing ? failing : error;
  if (!suspect) {
    a.advice = "All data in comparison result meets the accuracy requirements.";
    return a;
  }
  a.line = std::to_string(*suspect);
  a.suspect_nodes = t.npu->rows[t.rows[*suspect].npu].name;
  if (failing) a.advice = advisor_message(a.suspect_nodes);
  if (error) {
    if (!a.advice.empty()) a.advice += "\n";
    a.advice += error_rows_advice(t, *error, a.error_rows);
  }
  return a;
}

std::string advisor_text(const advisor_result &a) {
  return "Line: " + a.line + "\nSuspect Nodes: " + a.suspect_nodes + "\nExpert Advice: " + a.advice + "\n";
}

}  // namespace tprobe
