#include <map>
#include <set>
#include <unordered_map>

#include <fmt/format.h>

#include "dump_semantics.h"
#include "errors.h"
#include "nan_live.h"
#include "safe_path.h"

namespace tprobe {

const stage_description &nan_live_stage_description() {
  static const stage_description d{
      "nan-live",
      "name the operator and rank that produced the first NaN/Inf of a job, live, over all ranks' streams",
      true,
      true,
      {
          {"output-dir", "string", "./output", "folder for anomaly_analyze_{ns}.json of the first verdict"},
          {"stop-capture", "bool", "false", "stop every capture of the job once the first producer is named"},
      }};
  return d;
}

namespace {

using json = nlohmann::ordered_json;

struct rank_step {
  nan_rank data;
  std::unordered_map<std::string, size_t> index;  // entry → position in data.entries
  bool ended = false;
};

int32_t rank_of(int32_t r) { return r < 0 ? 0 : r; }

class live_nan {
 public:
  live_nan(stage_io &io, const nan_live_options &o) : io_(io), o_(o) {
    if (o.rules) rules_ = *o.rules;
  }

  nan_live_result run() {
    while (auto r = io_.receive()) {
      ++res_.records;
      const auto &h = r->header;
      switch (h.kind) {
        case record_kind::session: session(*r); break;
        case record_kind::entry: entry_of(h.step, rank_of(h.rank), h.entry, &h); break;
        case record_kind::tensor: tensor(*r); break;
        case record_kind::value: place(h, h.meta); break;
        case record_kind::step_end: step_end(h.step, rank_of(h.rank)); break;
        default: break;
      }
    }
    // End of the stream: every step not yet analysed is as complete as it will be.
    while (!steps_.empty()) analyse(steps_.begin()->first);
    io_.finish();
    return std::move(res_);
  }

 private:
  void session(const record &r) {
    const auto &m = r.header.meta;
    int32_t rank = r.header.rank;
    if (rank < 0 && m.is_object() && m.contains("rank") && m["rank"].is_number_integer()) rank = m["rank"].get<int32_t>();
    ranks_.insert(rank_of(rank));
    if (m.is_object() && m.contains("control") && m["control"].is_string())
      controls_.push_back(m["control"].get<std::string>());
    if (m.is_object() && m.contains("framework") && m["framework"].is_string())
      framework_[r.header.run] = m["framework"].get<std::string>();
    if (!rules_ && m.is_object())
      rules_ = nan_rules_from_json(m.contains("nan_analyze") ? m["nan_analyze"] : json(),
                                   "session config: field \"tprobe.nan_analyze\"");
  }

  rank_step &slot_of(int64_t step, int32_t rank) {
    ranks_.insert(rank);
    rank_step &s = steps_[step][rank];
    if (s.data.source.empty()) {
      s.data.rank = rank;
      s.data.source = fmt::format("step {} rank {} of the stream", step, rank);
    }
    return s;
  }

  // `announced`: the entry record, whose meta has its stack (record_stack_lines) and parent.
  nan_entry &entry_of(int64_t step, int32_t rank, const std::string &name, const record_header *announced) {
    const json *meta = announced ? &announced->meta : nullptr;
    rank_step &s = slot_of(step, rank);
    auto it = s.index.find(name);
    if (it == s.index.end()) {
      it = s.index.emplace(name, s.data.entries.size()).first;
      s.data.entries.push_back({name, json::object(), {}});
      ++res_.entries;
    }
    nan_entry &e = s.data.entries[it->second];
    if (meta && meta->is_object()) {
      if (const json *st = record_stack_lines(*announced)) {
        e.stack.clear();
        for (const auto &l : *st)
          if (l.is_string()) e.stack.push_back(l.get<std::string>());
      }
      if (auto p = meta->find("parent"); p != meta->end() && p->is_string()) s.data.parent_of[name] = p->get<std::string>();
    }
    return e;
  }

  void tensor(record &r) {
    auto &h = r.header;
    if (!h.stats && r.has_payload() && h.foreign_dtype.empty()) {
      const auto bytes = r.payload_bytes();
      if (bytes.size() != h.element_count() * dtype_size(h.type))
        throw framing_error(fmt::format("{}: payload is {} bytes, shape needs {}", r.describe(), bytes.size(),
                                        h.element_count() * dtype_size(h.type)));
      h.stats = tensor_stats_compute(bytes.data(), h.type, h.element_count(), h.shape.empty(), {});
    }
    const auto f = framework_.find(h.run);
    const std::string framework = f != framework_.end() ? f->second : "pytorch";
    const std::string type = h.tensor_type.empty() ? tensor_type_default(framework) : h.tensor_type;
    const std::string dtype = h.foreign_dtype.empty() ? dtype_framework_name(h.type, framework) : h.foreign_dtype;
    tensor_facts t;
    t.type = type;
    t.dtype = dtype;
    t.shape = &h.shape;
    t.stats = h.stats ? &*h.stats : nullptr;
    t.requires_grad = h.requires_grad;
    json leaf = tensor_leaf_json(t);
    if (h.meta.is_object() && h.meta.value("uninitialized", false)) leaf["uninitialized"] = true;
    place(h, leaf);
  }

  // Where the writer puts the leaf in dump.json (core/dump_semantics.h).
  void place(const record_header &h, const json &leaf) {
    if (h.entry.empty()) return;
    const slot_location where = slot_locate(entry_parse(h.entry), h.slot);
    if (where.whole_entry) return;  // a debug save: never analysed
    nan_entry &e = entry_of(h.step, rank_of(h.rank), h.entry, nullptr);
    json *at = &e.data[where.section];
    auto descend = [&](const std::variant<int64_t, std::string> &step) {
      if (const auto *index = std::get_if<int64_t>(&step)) {
        const size_t k = static_cast<size_t>(std::max<int64_t>(*index, 0));
        if (!at->is_array()) *at = json::array();
        while (at->size() <= k) at->push_back(nullptr);
        at = &(*at)[k];
      } else {
        if (!at->is_object()) *at = json::object();
        at = &(*at)[std::get<std::string>(step)];
      }
    };
    if (h.path)
      for (const auto &step : *h.path) descend(step);
    else
      for (const auto &step : where.path) descend(step);
    *at = leaf;
  }

  void step_end(int64_t step, int32_t rank) {
    slot_of(step, rank).ended = true;
    // Steps end in order on every rank; analyse each step all known ranks have ended.
    while (!steps_.empty()) {
      const auto &[first, by_rank] = *steps_.begin();
      for (int32_t r : ranks_) {
        const auto it = by_rank.find(r);
        if (it == by_rank.end() || !it->second.ended) return;
      }
      analyse(first);
    }
  }

  void analyse(int64_t step) {
    auto node = steps_.extract(step);
    if (node.empty()) return;
    std::vector<nan_rank> ranks;
    for (auto &[r, s] : node.mapped()) ranks.push_back(std::move(s.data));
    ++res_.steps_analysed;
    const nan_rules rules = rules_ ? *rules_ : nan_rules_default();
    const auto v = nan_analyze(ranks, rules);
    if (!v) return;
    ++res_.steps_with_producer;
    if (res_.first) return;
    nan_live_verdict out{step, *v, nan_answer_line(*v), {}};
    if (o_.log) {
      fmt::print(o_.log, "tprobe-nan-live: step {}: {}\n", step, out.line);
      std::fflush(o_.log);
    }
    if (!o_.output_dir.empty()) {
      const std::string dir = path_check_create(o_.output_dir, "output path");
      safe_mkdirs(dir);
      out.file = nan_write_result(dir, nan_result_json(ranks, *v));
    }
    record r(record_kind::value);
    r.header.step = step;
    r.header.rank = v->first.rank;
    r.header.entry = v->first.entry;
    r.header.meta = {{"event", "first_producer"}, {"step", step},       {"rank", v->first.rank},
                     {"entry", v->first.entry},   {"line", out.line}, {"file", out.file}};
    io_.send(r);
    out.controls = controls_;
    res_.first = out;
    if (o_.on_verdict) o_.on_verdict(*res_.first);
  }

  std::vector<std::string> controls_;
  stage_io &io_;
  const nan_live_options &o_;
  std::optional<nan_rules> rules_;
  std::set<int32_t> ranks_;
  std::map<std::string, std::string> framework_;  // by run id
  std::map<int64_t, std::map<int32_t, rank_step>> steps_;
  nan_live_result res_;
};

}  // namespace

nan_live_result nan_live_run(stage_io &io, const nan_live_options &o) { return live_nan(io, o).run(); }

}  // namespace tprobe
