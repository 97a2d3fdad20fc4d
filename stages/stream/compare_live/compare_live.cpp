#include "compare_live.h"

#include <algorithm>
#include <list>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

#include "compare_output.h"  // core/compare: the compare library, shared with tools/compare
#include "compare_table.h"
#include "dump_semantics.h"
#include "errors.h"
#include "safe_path.h"

namespace tprobe {

const stage_description &compare_live_stage_description() {
  static const stage_description d{
      "compare-live",
      "compare two runs' capture streams live (aligned by step, rank, entry, slot) with msprobe's compare metrics",
      true,
      true,
      {
          {"npu", "string", "", "run label compared as NPU (default: \"a\" if present, else the first label seen)"},
          {"bench", "string", "", "run label compared as bench (default: the other label)"},
          {"output-dir", "string", "./output", "folder for compare_result_*.xlsx/.csv/.json and advisor_*.txt"},
          {"max-buffer-mib", "int", "1024",
           "MiB of tensor data waiting for its partner; past it, waiting payloads are dropped and compared by "
           "statistics (counted)", 0, {}},
          {"highlight", "bool", "false", "colour suspicious rows red/yellow in the xlsx (msprobe -hl)"},
      }};
  return d;
}

namespace {

// One (step, rank) group: each label's rows as a flattened dump, and the live results of the pairs.
struct side_rows {
  dump_file dump;
  std::unordered_map<std::string, size_t> entry_index;
  std::unordered_map<std::string, size_t> row_of_key;  // entry + '\n' + slot → row
};
struct group {
  std::map<std::string, side_rows> sides;               // by label
  std::unordered_map<size_t, real_data_result> results;  // NPU row → its real-data (or stand-in) columns
  bool any_payload = false;
};

struct waiting {
  std::string label;
  record rec;
  size_t row = 0;
  bool dropped = false;  // its payload went to keep the buffer bounded
  std::list<std::string>::iterator order;
};

std::string shape_str(const std::vector<int64_t> &shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// msprobe's row name and state for a slot (core/dump_semantics.h).
std::pair<std::string, std::string> row_name(const std::string &entry, const std::string &slot) {
  return slot_compare_row(entry, slot);
}

tensor_operand operand_of(const record &r) {
  return tensor_operand{r.header.type, r.header.shape, r.payload_bytes()};
}

std::array<cell, 4> stat_cells(const std::optional<tensor_stats> &s) {
  if (!s) return {cell::of_text("None"), cell::of_text("None"), cell::of_text("None"), cell::of_text("None")};
  return {statistic_cell(s->max), statistic_cell(s->min), statistic_cell(s->mean), statistic_cell(s->norm)};
}

class live_compare {
 public:
  live_compare(stage_io &io, const compare_live_options &o) : io_(io), o_(o) {}

  compare_live_result run() {
    while (auto r = io_.receive()) {
      ++res_.records;
      const auto &h = r->header;
      if (h.kind == record_kind::session) {
        session(*r);
      } else if (h.kind == record_kind::tensor || h.kind == record_kind::value) {
        aligned(std::move(*r));
      }
    }
    finish();
    return std::move(res_);
  }

 private:
  void session(const record &r) {
    const auto &m = r.header.meta;
    std::string label = r.header.run;
    if (m.is_object() && m.contains("label") && m["label"].is_string()) label = m["label"].get<std::string>();
    label_of_run_[r.header.run] = label;
    if (m.is_object() && m.contains("framework") && m["framework"].is_string())
      framework_[label] = m["framework"].get<std::string>();
    note_label(label);
  }

  void note_label(const std::string &label) {
    for (const auto &l : labels_)
      if (l == label) return;
    labels_.push_back(label);
  }

  // Decides NPU and bench once two labels have data; a third label is ignored.
  bool side_known(const std::string &label) {
    if (!res_.npu_label.empty()) return label == res_.npu_label || label == res_.bench_label;
    return true;
  }
  void decide_sides(const std::string &x, const std::string &y) {
    if (!res_.npu_label.empty()) return;
    std::string npu = o_.npu, bench = o_.bench;
    if (npu.empty() && !bench.empty()) npu = bench == x ? y : x;
    if (npu.empty()) npu = (x == "a" || y == "a") ? "a" : labels_order_first(x, y);
    if (bench.empty()) bench = npu == x ? y : x;
    res_.npu_label = npu;
    res_.bench_label = bench;
  }
  std::string labels_order_first(const std::string &x, const std::string &y) const {
    for (const auto &l : labels_)
      if (l == x || l == y) return l;
    return x;
  }

  // A tensor or a non-tensor argument (value): a row of its run's table, paired by key.
  void aligned(record r) {
    auto &h = r.header;
    const auto it = label_of_run_.find(h.run);
    const std::string label = it != label_of_run_.end() ? it->second : h.run;
    note_label(label);
    if (!o_.npu.empty() && !o_.bench.empty() && label != o_.npu && label != o_.bench) return ignore(label);
    if (!side_known(label)) return ignore(label);
    const bool is_tensor = h.kind == record_kind::tensor;
    if (is_tensor) ++res_.tensors;
    if (is_tensor && r.has_payload()) {
      const auto bytes = r.payload_bytes();
      if (bytes.size() != h.element_count() * dtype_size(h.type))
        throw framing_error(fmt::format("{}: payload is {} bytes, shape needs {}", r.describe(), bytes.size(),
                                        h.element_count() * dtype_size(h.type)));
      if (!h.stats) h.stats = tensor_stats_compute(bytes.data(), h.type, h.element_count(), h.shape.empty(), {});
    }
    group &g = groups_[{h.step, h.rank}];
    side_rows &side = g.sides[label];
    const std::string slot_key = h.entry + '\n' + h.slot;
    if (side.row_of_key.count(slot_key)) {
      ++res_.ignored;
      warn(fmt::format("{} sent twice by run \"{}\"; the second is not compared", r.describe(), label));
      return;
    }
    const size_t row = is_tensor ? add_row(side, label, r) : add_value_row(side, label, r);
    side.row_of_key[slot_key] = row;
    if (r.has_payload()) g.any_payload = true;

    const std::string key = fmt::format("{}\n{}\n{}", h.step, h.rank, slot_key);
    const auto w = waiting_.find(key);
    if (w == waiting_.end()) {
      order_.push_back(key);
      buffered_ += r.has_payload() ? r.payload_bytes().size() : 0;
      waiting_.emplace(key, waiting{label, std::move(r), row, false, std::prev(order_.end())});
      enforce_limit();
      return;
    }
    if (w->second.label == label) return;  // cannot happen: duplicates are caught above
    decide_sides(w->second.label, label);
    if (!side_known(label) || !side_known(w->second.label)) return ignore(label);
    const bool mine_is_npu = label == res_.npu_label;
    const record &npu = mine_is_npu ? r : w->second.rec;
    const record &bench = mine_is_npu ? w->second.rec : r;
    const size_t npu_row = mine_is_npu ? row : w->second.row;
    // Non-tensor rows have no data to compare (msprobe: 'unsupported'); the table fills them.
    if (npu.header.kind == record_kind::tensor && bench.header.kind == record_kind::tensor)
      compare_pair(g, npu_row, npu, bench, w->second.dropped);
    if (w->second.rec.has_payload()) buffered_ -= w->second.rec.payload_bytes().size();
    order_.erase(w->second.order);
    waiting_.erase(w);
  }

  void ignore(const std::string &label) {
    ++res_.ignored;
    if (warned_labels_.insert({label, true}).second)
      warn(fmt::format("records of run \"{}\" are not compared (comparing \"{}\" with \"{}\")", label,
                       res_.npu_label.empty() ? o_.npu : res_.npu_label,
                       res_.bench_label.empty() ? o_.bench : res_.bench_label));
  }

  void init_side(side_rows &side, const std::string &label) {
    if (!side.dump.side.empty()) return;
    side.dump.side = label;
    side.dump.path = "run " + label;
    side.dump.task = "tensor";
    const auto f = framework_.find(label);
    side.dump.framework = f != framework_.end() ? f->second : "pytorch";
  }

  // The entry's index; `first` says whether this is its first row (it carries the stack).
  size_t entry_of(side_rows &side, const std::string &entry, bool &first) {
    auto e = side.entry_index.find(entry);
    first = e == side.entry_index.end();
    if (first) {
      e = side.entry_index.emplace(entry, side.dump.entries.size()).first;
      side.dump.entries.push_back(entry);
    }
    return e->second;
  }

  // A value's row as the offline compare flattens it: its msprobe JSON leaf placed at the slot of a
  // one-entry dump, flattened by dump_from_json (dtype "<class 'int'>", shape "[]", the value as
  // its statistics, …), and the row of that name taken.
  size_t add_value_row(side_rows &side, const std::string &label, const record &r) {
    const auto &h = r.header;
    init_side(side, label);
    const auto [name, state] = row_name(h.entry, h.slot);
    // Placed where the writer would place it in dump.json.
    const slot_location where = slot_locate(entry_parse(h.entry), h.slot);
    nlohmann::ordered_json doc = {
        {"task", "tensor"}, {"framework", side.dump.framework}, {"data", nlohmann::ordered_json::object()}};
    nlohmann::ordered_json *at = where.whole_entry ? &doc["data"][h.entry] : &doc["data"][h.entry][where.section];
    for (const auto &step : where.path) {
      if (const auto *index = std::get_if<int64_t>(&step)) {
        const size_t k = static_cast<size_t>(*index);
        if (!at->is_array()) *at = nlohmann::ordered_json::array();
        while (at->size() <= k) at->push_back(nullptr);
        at = &(*at)[k];
      } else {
        at = &(*at)[std::get<std::string>(step)];
      }
    }
    *at = h.meta;
    const dump_file flat = dump_from_json(doc, side.dump.path, side.dump.side);
    dump_row row;
    for (const auto &candidate : flat.rows)
      if (candidate.name == name) row = candidate;
    if (row.name.empty()) {  // a leaf the flattening names otherwise: keep it as text
      row.name = name;
      row.dtype = "None";
      row.shape = "None";
      row.stats = {cell::of_text("None"), cell::of_text("None"), cell::of_text("None"), cell::of_text("None")};
    }
    bool first = false;
    row.entry = entry_of(side, h.entry, first);
    row.first_of_entry = first;
    side.dump.rows.push_back(std::move(row));
    return side.dump.rows.size() - 1;
  }

  size_t add_row(side_rows &side, const std::string &label, const record &r) {
    const auto &h = r.header;
    init_side(side, label);
    bool first = false;
    const size_t entry = entry_of(side, h.entry, first);
    dump_row row;
    auto [name, state] = row_name(h.entry, h.slot);
    row.name = std::move(name);
    row.state = std::move(state);
    row.dtype = h.foreign_dtype.empty() ? dtype_framework_name(h.type, side.dump.framework) : h.foreign_dtype;
    row.shape = shape_str(h.shape);
    row.stats = stat_cells(h.stats);
    row.requires_grad = cell::of_text(h.requires_grad ? "True" : "False");
    row.data_name = r.has_payload() ? h.entry + "." + h.slot + ".npy" : "-1";
    row.entry = entry;
    row.first_of_entry = first;
    side.dump.rows.push_back(std::move(row));
    return side.dump.rows.size() - 1;
  }

  // Past the limit, the oldest waiting payloads go; their statistics stay for the pair.
  void enforce_limit() {
    res_.peak_buffer_bytes = std::max(res_.peak_buffer_bytes, buffered_);
    for (auto it = order_.begin(); buffered_ > o_.max_buffer_bytes && it != order_.end(); ++it) {
      waiting &w = waiting_.at(*it);
      if (!w.rec.has_payload()) continue;
      buffered_ -= w.rec.payload_bytes().size();
      w.rec.drop_payload();
      w.dropped = true;
      if (!dropped_once_)
        warn(fmt::format("more than {} MiB of tensor data waiting for the other run; dropping waiting payloads, "
                         "their rows are compared by statistics only",
                         o_.max_buffer_bytes >> 20));
      dropped_once_ = true;
    }
  }

  void compare_pair(group &g, size_t npu_row, const record &npu, const record &bench, bool dropped) {
    ++res_.pairs;
    real_data_result r;
    bool failing = false;
    bool by_stats = false;
    if (npu.has_payload() && bench.has_payload()) {
      ++res_.real_data_pairs;
      r = compare_real_data(operand_of(npu), operand_of(bench));
      failing = r.accuracy == "No";
    } else {
      by_stats = true;
      const summary_result s = compare_summary(stat_cells(npu.header.stats), stat_cells(bench.header.stats));
      r.metrics.fill(cell::of_text("unsupported"));
      r.accuracy = s.warning ? "No" : "None";
      if (dropped) {
        ++res_.stats_only_rows;
        r.err_message = "Tensor data dropped by the live compare (buffer limit); compared by statistics";
      } else {
        r.err_message = "No tensor data on both sides; compared by statistics";
      }
      r.err_message += s.warning ? ": Warning. " : ". ";
      failing = s.warning;
    }
    if (failing) {
      ++res_.live_failing;
      if (!res_.first_divergence) report_divergence(npu, r, by_stats);
    }
    g.results[npu_row] = std::move(r);
  }

  void report_divergence(const record &npu, const real_data_result &r, bool by_stats) {
    compare_live_divergence d;
    d.step = npu.header.step;
    d.rank = npu.header.rank;
    d.entry = npu.header.entry;
    d.slot = npu.header.slot;
    d.cosine = cell_str(r.metrics[METRIC_COSINE]);
    d.max_abs_err = cell_str(r.metrics[METRIC_MAX_ABS_ERR]);
    d.accuracy = by_stats ? "Warning" : r.accuracy;
    d.by_statistics = by_stats;
    if (o_.log)
      fmt::print(o_.log, "tprobe-compare-live: first divergence: step {} rank {} {} {} cosine={} max_abs_err={}{}\n",
                 d.step, d.rank, d.entry, d.slot, d.cosine, d.max_abs_err, by_stats ? " (statistics: Warning)" : "");
    record out(record_kind::value);
    out.header.step = d.step;
    out.header.rank = d.rank;
    out.header.entry = d.entry;
    out.header.slot = d.slot;
    out.header.meta = {{"event", "first_divergence"}, {"npu", res_.npu_label}, {"bench", res_.bench_label},
                       {"cosine", d.cosine},           {"max_abs_err", d.max_abs_err}, {"accuracy", d.accuracy},
                       {"by_statistics", by_stats},    {"err_message", r.err_message}};
    io_.send(out);
    res_.first_divergence = std::move(d);
  }

  void finish() {
    // Records still waiting were seen on one side only.
    for (const auto &key : order_) {
      const waiting &w = waiting_.at(key);
      ++res_.unmatched;
      res_.unmatched_names.push_back(fmt::format("step {} rank {} {}.{} (only in {})", w.rec.header.step,
                                                 w.rec.header.rank, w.rec.header.entry, w.rec.header.slot, w.label));
    }
    bool several_steps = false;
    for (const auto &[k, g] : groups_) several_steps |= k.first != groups_.begin()->first.first;
    std::string dir;
    if (!o_.output_dir.empty() && !groups_.empty()) {
      dir = path_check_create(o_.output_dir, "output path");
      safe_mkdirs(dir);
    }
    const std::string ts = compare_timestamp();
    for (auto &[k, g] : groups_) write_group(k.first, k.second, g, several_steps, dir, ts);

    record summary(record_kind::value);
    summary.header.meta = {{"event", "compare_live_summary"},
                           {"npu", res_.npu_label},
                           {"bench", res_.bench_label},
                           {"rows", res_.rows},
                           {"failing", res_.failing},
                           {"unmatched", res_.unmatched},
                           {"stats_only_rows", res_.stats_only_rows},
                           {"files", res_.files}};
    io_.send(summary);
    io_.finish();
  }

  void write_group(int64_t step, int32_t rank, group &g, bool several_steps, const std::string &dir,
                   const std::string &ts) {
    const auto n = g.sides.find(res_.npu_label.empty() ? (o_.npu.empty() ? "a" : o_.npu) : res_.npu_label);
    if (n == g.sides.end()) return;  // no NPU rows: nothing msprobe would write
    static const dump_file empty_bench{};
    const auto b = res_.bench_label.empty() ? g.sides.end() : g.sides.find(res_.bench_label);
    const dump_file &bench = b != g.sides.end() ? b->second.dump : empty_bench;
    compare_table_options topt;
    topt.mode = g.any_payload ? compare_mode::all : compare_mode::summary;
    // Tensors were compared as they arrived, paired by (entry, slot), and their payloads are gone:
    // with tensor data the table pairs by name as they were; statistics are in every row, so a
    // statistics table pairs calls as the offline compare does (compare_match.h).
    topt.match = topt.mode == compare_mode::all ? compare_match::name : compare_match::automatic;
    compare_table t = compare_table_build(n->second.dump, bench, topt);
    if (topt.mode == compare_mode::all)
      for (size_t i = 0; i < t.rows.size(); ++i) {
        // As the offline compare_fill_real_data decides, with the live result for a compared pair.
        const compare_row &row = t.rows[i];
        const auto r = g.results.find(row.npu);
        if (row.bench && r != g.results.end())
          compare_table_set_real_data(t, i, r->second);
        else if (t.npu->rows[row.npu].data_name == "-1")
          compare_table_set_real_data(t, i, real_data_unavailable(real_data_missing::npu_no_file));
        else if (!row.bench)
          compare_table_set_real_data(t, i, real_data_unavailable(real_data_missing::bench_unmatched));
        else
          compare_table_set_real_data(t, i, real_data_unavailable(real_data_missing::bench_no_file));
      }
    const bool highlighted = o_.highlight && t.rows.size() <= compare_max_excel_rows;
    if (highlighted) compare_table_highlight(t);
    const advisor_result advisor = compare_table_advise(t);
    res_.rows += t.rows.size();
    for (size_t i = 0; i < t.rows.size(); ++i) res_.failing += compare_row_failing(t, i) ? 1 : 0;
    if (dir.empty() || t.rows.empty()) return;
    std::string suffix = several_steps ? fmt::format("_step{}", step) : "";
    if (rank >= 0) suffix += fmt::format("_rank{}", rank);
    // Claimed, not just named: another compare writing into this folder in the same second keeps its files.
    const auto files = compare_output_claim(dir, suffix, ts, true);
    compare_write_xlsx(t, files.xlsx, highlighted);
    compare_write_csv(t, files.csv);
    compare_write_json(t, files.json, rank >= 0 ? fmt::format("rank{}", rank) : "", highlighted, &advisor);
    compare_write_advisor(advisor, files.advisor);
    res_.files.insert(res_.files.end(), {files.xlsx, files.csv, files.json, files.advisor});
  }

  void warn(const std::string &line) {
    if (o_.log) fmt::print(o_.log, "tprobe-compare-live: warning: {}\n", line);
  }

  stage_io &io_;
  const compare_live_options &o_;
  compare_live_result res_;
  std::vector<std::string> labels_;  // in order of first appearance
  std::unordered_map<std::string, std::string> label_of_run_, framework_;
  std::unordered_map<std::string, bool> warned_labels_;
  std::map<std::pair<int64_t, int32_t>, group> groups_;
  std::unordered_map<std::string, waiting> waiting_;
  std::list<std::string> order_;  // waiting keys, oldest first
  uint64_t buffered_ = 0;
  bool dropped_once_ = false;
};

}  // namespace

compare_live_result compare_live_run(stage_io &io, const compare_live_options &options) {
  return live_compare(io, options).run();
}

}  // namespace tprobe
