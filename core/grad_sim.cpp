// grad_sim.cpp: see grad_sim.h.
#include "grad_sim.h"

#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>

#include "errors.h"
#include "grad_probe.h"
#include "pyjson.h"

namespace tprobe {

uint64_t grad_sign_agreement(const uint8_t *a, const uint8_t *b, uint64_t numel) {
  uint64_t differ = 0;
  const uint64_t full = numel / 64;
  for (uint64_t w = 0; w < full; ++w) {
    uint64_t x, y;
    std::memcpy(&x, a + w * 8, 8);
    std::memcpy(&y, b + w * 8, 8);
    differ += static_cast<uint64_t>(std::popcount(x ^ y));
  }
  for (uint64_t i = full * 64; i < numel; ++i) differ += ((a[i >> 3] ^ b[i >> 3]) >> (i & 7)) & 1u;
  return numel - differ;
}

uint64_t grad_bool_agreement(const uint8_t *a, const uint8_t *b, uint64_t numel) {
  uint64_t same = 0;
  for (uint64_t i = 0; i < numel; ++i) same += (a[i] != 0) == (b[i] != 0);
  return same;
}

void grad_sim_table::add(int64_t step, const std::string &param, uint64_t same, uint64_t total) {
  if (!cells_.count(param)) order_.push_back(param);
  auto &cell = cells_[param][step];
  auto &t = totals_[step];
  if (cell.present) {
    t.first -= cell.same;
    t.second -= cell.total;
  }
  cell = {same, total, true};
  t.first += same;
  t.second += total;
}

void grad_sim_table::set_order(const std::vector<std::string> &params) {
  std::vector<std::string> order;
  for (const auto &p : params)
    if (std::find(order.begin(), order.end(), p) == order.end()) order.push_back(p);
  for (const auto &p : order_)
    if (std::find(order.begin(), order.end(), p) == order.end()) order.push_back(p);
  order_ = std::move(order);
}

std::vector<int64_t> grad_sim_table::steps() const {
  std::vector<int64_t> s;
  for (const auto &[step, t] : totals_) s.push_back(step);
  return s;
}

std::vector<std::string> grad_sim_table::params() const {
  std::vector<std::string> p;
  for (const auto &name : order_)
    if (cells_.count(name)) p.push_back(name);
  return p;
}

bool grad_sim_table::has(int64_t step, const std::string &param) const {
  auto it = cells_.find(param);
  if (it == cells_.end()) return false;
  auto c = it->second.find(step);
  return c != it->second.end() && c->second.present;
}

double grad_sim_table::similarity(int64_t step, const std::string &param) const {
  auto it = cells_.find(param);
  if (it == cells_.end()) return 0;
  auto c = it->second.find(step);
  if (c == it->second.end() || c->second.total == 0) return 0;
  return static_cast<double>(c->second.same) / static_cast<double>(c->second.total);
}

double grad_sim_table::summary(int64_t step) const {
  auto it = totals_.find(step);
  if (it == totals_.end() || it->second.second == 0) return 0;
  return static_cast<double>(it->second.first) / static_cast<double>(it->second.second);
}

std::string grad_sim_table::csv() const {
  const auto all_steps = steps();
  std::string out(csv_utf8_bom);
  std::vector<std::string> row{"step"};
  for (int64_t s : all_steps) row.push_back(std::to_string(s));
  out += csv_line(row);
  // Python writes the int 0 where a pair has no elements, repr(float) elsewhere.
  auto text = [](uint64_t same, uint64_t total) {
    return total ? py_float_repr(static_cast<double>(same) / static_cast<double>(total)) : std::string("0");
  };
  for (const auto &param : params()) {
    row = {param};
    const auto &by_step = cells_.at(param);
    for (int64_t s : all_steps) {
      auto c = by_step.find(s);
      if (c == by_step.end() || !c->second.present)
        throw usage_error(fmt::format("parameter {} has no gradient direction at step {} in both runs", param, s));
      row.push_back(text(c->second.same, c->second.total));
    }
    out += csv_line(row);
  }
  row = {"summary"};
  for (int64_t s : all_steps) row.push_back(text(totals_.at(s).first, totals_.at(s).second));
  out += csv_line(row);
  return out;
}

std::optional<grad_suspect> grad_suspect_at(const grad_sim_table &table, int64_t step) {
  const auto steps = table.steps();
  auto at = std::find(steps.begin(), steps.end(), step);
  if (at == steps.end()) return std::nullopt;
  const std::optional<int64_t> before = at == steps.begin() ? std::nullopt : std::optional<int64_t>(*(at - 1));
  grad_suspect s;
  s.step = step;
  s.summary = table.summary(step);
  for (const auto &param : table.params()) {
    if (!table.has(step, param)) continue;
    grad_suspect_param p;
    p.param = param;
    p.now = table.similarity(step, param);
    if (!before) {
      if (!(p.now < grad_suspect_first_step_below)) continue;
      p.fall = 1.0 - p.now;
    } else {
      if (!table.has(*before, param)) continue;
      p.before = table.similarity(*before, param);
      p.fall = *p.before - p.now;
      if (!(p.fall > grad_suspect_drop_above)) continue;
    }
    s.params.push_back(std::move(p));
  }
  if (s.params.empty()) return std::nullopt;
  std::stable_sort(s.params.begin(), s.params.end(), [](const auto &a, const auto &b) { return a.fall > b.fall; });
  return s;
}

std::optional<grad_suspect> grad_first_suspect(const grad_sim_table &table) {
  for (int64_t step : table.steps())
    if (auto s = grad_suspect_at(table, step)) return s;
  return std::nullopt;
}

std::string grad_suspect_line(const grad_suspect &s, int rank, size_t most) {
  std::string line = fmt::format("first suspect step {} (rank {}): summary similarity {:.4f}; dropped most:", s.step,
                                 rank, s.summary);
  for (size_t i = 0; i < s.params.size() && i < most; ++i) {
    const auto &p = s.params[i];
    if (p.before)
      line += fmt::format("{} {} {:.4f} -> {:.4f}", i ? "," : "", p.param, *p.before, p.now);
    else
      line += fmt::format("{} {} {:.4f} (below {} at the first step)", i ? "," : "", p.param, p.now,
                          grad_suspect_first_step_below);
  }
  if (s.params.size() > most) line += fmt::format(" (+{} more)", s.params.size() - most);
  return line;
}

}  // namespace tprobe
