#include "overflow.h"

#include <cmath>
#include <deque>
#include <map>
#include <unordered_map>

#include <fmt/format.h>

#include "dump_semantics.h"
#include "errors.h"

namespace tprobe {

const stage_description &overflow_stage_description() {
  static const stage_description d{
      "overflow",
      "pass on only the calls whose tensors have NaN or Inf in Max or Min (task overflow_check), and stop the "
      "capture after overflow_nums of them",
      true,
      true,
      {
          {"overflow-nums", "int", "0",
           "overflowing calls to pass per capture before stopping it; 0 = the config's overflow_check.overflow_nums; "
           "-1 = never stop",
           -1, {}},
      }};
  return d;
}

namespace {

bool stat_is_anomalous(const stat_value &v) { return v.k == stat_value::kind::real && !std::isfinite(v.real); }

// One call of one producer whose verdict is not known yet: its records, held.
struct open_call {
  std::vector<record> records;
  bool anomalous = false;
  bool saw_output = false;  // a forward call is complete only once its outputs came
  bool forward = false;
};

// One producer (a capture: run and rank).
struct producer {
  std::string control;       // its control endpoint, from the session record
  int64_t limit = 1;         // overflow_nums
  int64_t passed = 0;        // overflowing calls passed on
  bool stopped = false;      // limit reached: nothing more of its calls passes
  std::unordered_map<std::string, open_call> calls;
  std::deque<std::string> order;  // open calls, by their first record
};

class overflow_filter {
 public:
  overflow_filter(stage_io &io, control_sender &control, const overflow_stage_options &o)
      : io_(io), control_(control), options_(o) {}

  void handle(record &r) {
    ++result_.records;
    const auto &h = r.header;
    auto &p = producers_[{h.run, h.rank}];
    switch (h.kind) {
      case record_kind::session:
        if (h.meta.is_object()) {
          p.control = h.meta.value("control", std::string{});
          p.limit = options_.overflow_nums != 0 ? options_.overflow_nums : h.meta.value("overflow_nums", int64_t{1});
          // Connected now, so that the stop, when it comes, reaches the capture before it closes
          // (python_test_overflow missed the capture's "stopped" line once under load).
          if (p.limit > 0 && !p.control.empty() && !endpoint_is_file(p.control)) control_.connect(p.control);
        }
        io_.send(r);
        return;
      case record_kind::entry:
      case record_kind::tensor:
      case record_kind::value: call_record(p, r); return;
      default:  // step_end, flush, and kinds of a newer minor: every open call is complete
        complete_all(p);
        io_.send(r);
        return;
    }
  }

  void finish() {
    for (auto &[key, p] : producers_) complete_all(p);
  }

  const overflow_stage_result &result() const { return result_; }

 private:
  void call_record(producer &p, record &r) {
    const auto &h = r.header;
    if (p.stopped) {
      ++result_.dropped_after_limit;
      return;
    }
    // Another call's record: the open calls that have all their records are complete. A call
    // that has not had its outputs yet (a module around this one, an operator around an inner one)
    // stays open.
    for (size_t i = 0; i < p.order.size();) {
      const std::string &name = p.order[i];
      auto &c = p.calls.at(name);
      if (name != h.entry && (!c.forward || c.saw_output)) {
        complete(p, name);  // erases order[i]
        if (p.stopped) {
          ++result_.dropped_after_limit;
          return;
        }
      } else {
        ++i;
      }
    }
    auto [it, inserted] = p.calls.try_emplace(h.entry);
    open_call &c = it->second;
    if (inserted) {
      c.forward = entry_parse(h.entry).is_forward();
      p.order.push_back(h.entry);
    }
    if (h.kind == record_kind::tensor) {
      if (overflow_tensor_is_anomalous(h)) c.anomalous = true;
      if (slot_io_of(h.slot) == slot_io::output) c.saw_output = true;
    } else if (h.kind == record_kind::value && slot_io_of(h.slot) == slot_io::output) {
      c.saw_output = true;
    }
    c.records.push_back(std::move(r));
  }

  void complete_all(producer &p) {
    while (!p.order.empty()) complete(p, p.order.front());
  }

  void complete(producer &p, std::string name) {
    auto node = p.calls.extract(name);
    for (auto it = p.order.begin(); it != p.order.end(); ++it)
      if (*it == name) {
        p.order.erase(it);
        break;
      }
    if (node.empty()) return;
    open_call &c = node.mapped();
    ++result_.calls;
    if (p.stopped) {
      result_.dropped_after_limit += c.records.size();
      return;
    }
    if (!c.anomalous) {
      // A clean call: its tensors and values go. Its entry records go on marked data: false
      // (transport/record.h), since msprobe's stack.json and construct.json list every call of a
      // step, dumped or not, and it writes the folder of a step in which nothing overflowed.
      for (auto &r : c.records)
        if (r.header.kind == record_kind::entry && r.header.meta.is_object()) {
          r.header.meta["data"] = false;
          io_.send(r);
        }
      return;
    }
    for (const auto &r : c.records) io_.send(r);
    ++result_.overflow_calls;
    ++p.passed;
    if (p.limit > 0 && p.passed >= p.limit) stop(p, c.records.front().header);
  }

  void stop(producer &p, const record_header &h) {
    p.stopped = true;
    fmt::print(stderr, "tprobe-overflow: {}: reached the preset overflow times, current overflow times: {}\n",
               h.rank < 0 ? std::string("rank") : fmt::format("rank {}", h.rank), p.passed);
    if (p.control.empty()) return;  // a recording, or a capture without a control endpoint
    record stop(record_kind::control);
    stop.header.run = h.run;
    stop.header.rank = h.rank;
    stop.header.meta = {{"command", "stop"},
                        {"from", "tprobe-overflow"},
                        {"reason", fmt::format("reached the preset overflow times, current overflow times: {}", p.passed)}};
    if (control_.send(p.control, stop)) ++result_.stops_sent;
  }

  stage_io &io_;
  control_sender &control_;
  overflow_stage_options options_;
  std::map<std::pair<std::string, int32_t>, producer> producers_;
  overflow_stage_result result_;
};

}  // namespace

bool overflow_tensor_is_anomalous(const record_header &h) {
  if (!h.stats) return false;  // nothing known about the data (uninitialised, foreign dtype): no verdict
  const auto &s = *h.stats;
  return stat_is_anomalous(s.max) || stat_is_anomalous(s.min) || s.nan_count > 0 || s.inf_count > 0;
}

overflow_stage_result overflow_run(stage_io &io, control_sender &control, const overflow_stage_options &options) {
  overflow_filter filter(io, control, options);
  try {
    while (auto r = io.receive()) filter.handle(*r);
  } catch (...) {
    filter.finish();  // what was judged overflowing still reaches the writer
    throw;
  }
  filter.finish();
  io.finish();
  return filter.result();
}

}  // namespace tprobe
