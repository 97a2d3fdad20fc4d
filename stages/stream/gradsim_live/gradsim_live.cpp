// gradsim_live.cpp: tprobe-gradsim-live, two runs' gradient streams compared as they arrive
// (gradsim.h).
#include <map>
#include <set>
#include <tuple>

#include <fmt/format.h>

#include "errors.h"
#include "grad_record.h"
#include "gradsim_live.h"

namespace tprobe {

const stage_description &gradsim_live_stage_description() {
  static const stage_description d{
      "gradsim-live",
      "compare two runs' gradient directions live (grad_probe), print the first suspect step the moment it is known",
      true,
      true,
      {
          {"a", "string", "a", "run label of the first run (msprobe's path1)"},
          {"b", "string", "b", "run label of the second run"},
          {"output-dir", "string", "./output", "folder for rank{N}/similarities.csv and the charts"},
      }};
  return d;
}

namespace {

struct waiting {
  std::vector<std::byte> bits;
  uint64_t numel = 0;
  std::vector<int64_t> shape;
};

using grad_key = std::tuple<int32_t, int64_t, std::string>;  // rank, step, parameter

class live_gradsim {
 public:
  live_gradsim(stage_io &io, const gradsim_live_options &o) : io_(io), o_(o) {}

  gradsim_live_result run() {
    while (auto r = io_.receive()) {
      ++res_.records;
      const auto &h = r->header;
      if (h.kind == record_kind::session) {
        session(*r);
      } else if (grad_record_is(*r)) {
        gradient(*r);
      } else if (h.kind == record_kind::step_end) {
        if (auto side = side_of(h.run)) step_end(*side, rank_of(h.rank), h.step);
      }
    }
    finish();
    io_.finish();
    return std::move(res_);
  }

 private:
  static int32_t rank_of(int32_t r) { return r < 0 ? 0 : r; }

  // A run is side 0 (a) or 1 (b) by its label; unlabelled runs take the sides in order of arrival.
  void session(const record &r) {
    std::string label = r.header.meta.is_object() ? r.header.meta.value("label", std::string()) : std::string();
    int side = -1;
    if (label == o_.a) side = 0;
    else if (label == o_.b) side = 1;
    else if (label.empty() && taken_.size() < 2) side = taken_.count(0) ? 1 : 0;
    if (side < 0 || taken_.count(side)) {
      res_.warnings.push_back(fmt::format("ignored run {} (label \"{}\"): compared are \"{}\" and \"{}\"",
                                          r.header.run, label, o_.a, o_.b));
      return;
    }
    taken_.insert(side);
    sides_[r.header.run] = side;
  }

  std::optional<int> side_of(const std::string &run) const {
    auto it = sides_.find(run);
    return it == sides_.end() ? std::nullopt : std::optional<int>(it->second);
  }

  void gradient(const record &r) {
    const auto side = side_of(r.header.run);
    if (!side) return;
    ++res_.gradients;
    const grad_record_view v = grad_record_read(r);
    const int32_t rank = rank_of(r.header.rank);
    if (*side == 0) {
      auto &order = order_[rank];
      if (!order.second.count(v.param)) {
        order.first.push_back(v.param);
        order.second.insert(v.param);
      }
    }
    if (v.bits.empty() && v.numbers.numel) {
      no_directions_ = true;  // level L0
      return;
    }
    grad_key key{rank, r.header.step, v.param};
    auto &mine = pending_[*side], &theirs = pending_[1 - *side];
    auto partner = theirs.find(key);
    if (partner == theirs.end()) {
      mine[key] = waiting{{v.bits.begin(), v.bits.end()}, v.numbers.numel, v.numbers.shape};
      return;
    }
    if (partner->second.shape != v.numbers.shape) {
      res_.warnings.push_back(fmt::format("step {} rank {} {}: shapes differ ({} vs {}); not compared",
                                          r.header.step, rank, v.param, grad_shape_text(partner->second.shape),
                                          grad_shape_text(v.numbers.shape)));
      theirs.erase(partner);
      return;
    }
    const uint64_t same = grad_sign_agreement(reinterpret_cast<const uint8_t *>(partner->second.bits.data()),
                                              reinterpret_cast<const uint8_t *>(v.bits.data()), v.numbers.numel);
    tables_[rank].add(r.header.step, v.param, same, v.numbers.numel);
    ++res_.pairs;
    theirs.erase(partner);
  }

  // Both runs ended `step` on `rank`: its similarities are final, and the step is judged.
  void step_end(int side, int32_t rank, int64_t step) {
    auto &ended = ended_[{rank, step}];
    ended |= 1 << side;
    if (ended != 3) return;
    ended_.erase({rank, step});
    auto t = tables_.find(rank);
    if (t == tables_.end() || res_.first_line) return;
    t->second.set_order(order_[rank].first);
    const auto suspect = grad_suspect_at(t->second, step);
    if (!suspect) return;
    res_.first_line = grad_suspect_line(*suspect, rank);
    if (o_.log) {
      fmt::print(o_.log, "tprobe-gradsim-live: {}\n", *res_.first_line);
      std::fflush(o_.log);
    }
    record out(record_kind::value);
    out.header.step = step;
    out.header.rank = rank;
    out.header.meta = {{"event", "first_suspect"}, {"step", step}, {"rank", rank}, {"line", *res_.first_line}};
    io_.send(out);
  }

  void finish() {
    for (int side = 0; side < 2; ++side) {
      for (const auto &[key, w] : pending_[side]) {
        ++res_.unmatched;
        if (res_.unmatched <= 10)
          res_.warnings.push_back(fmt::format("step {} rank {} {}: only in {}", std::get<1>(key), std::get<0>(key),
                                              std::get<2>(key), side == 0 ? o_.a : o_.b));
      }
    }
    if (no_directions_ && tables_.empty())
      res_.warnings.push_back("the runs sent no gradient directions (grad_level L0): nothing to compare");
    for (auto &[rank, table] : tables_) {
      gradsim_rank g;
      g.rank = rank;
      table.set_order(order_[rank].first);
      g.table = std::move(table);
      g.first = grad_first_suspect(g.table);
      if (!o_.output_dir.empty()) g.files = gradsim_write_rank(o_.output_dir, rank, g.table);
      res_.ranks.push_back(std::move(g));
    }
  }

  stage_io &io_;
  const gradsim_live_options &o_;
  std::map<std::string, int> sides_;  // run id → 0 (a) or 1 (b)
  std::set<int> taken_;
  std::map<grad_key, waiting> pending_[2];
  std::map<int32_t, grad_sim_table> tables_;
  std::map<int32_t, std::pair<std::vector<std::string>, std::set<std::string>>> order_;  // run a's order
  std::map<std::pair<int32_t, int64_t>, int> ended_;
  bool no_directions_ = false;
  gradsim_live_result res_;
};

}  // namespace

gradsim_live_result gradsim_live_run(stage_io &io, const gradsim_live_options &o) { return live_gradsim(io, o).run(); }

}  // namespace tprobe
