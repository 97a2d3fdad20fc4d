#include "stats.h"

#include <map>

#include <fmt/format.h>

#include "dump_semantics.h"
#include "errors.h"
#include "part_runner.h"
#include "record_leaf.h"

namespace tprobe {

const stage_description &stats_stage_description() {
  static const stage_description d{
      "stats",
      "compute per-tensor statistics (Max, Min, Mean, Norm, NaN/Inf counts, CRC-32) and pass records on",
      true,
      true,
      {
          {"keep-payload", "bool", "false", "pass tensor data on even when it is not to be saved"},
          {"recompute", "bool", "false", "recompute statistics that arrive already computed"},
          {"threads", "int", "0",
           "threads reading a tensor larger than 1 MiB, in parts (the same statistics with any number); "
           "0: 2 where the machine has two cores or more",
           0, 64},
      }};
  return d;
}

bool stats_leaves_unchanged(const record_glance &g, const stats_stage_options &options) {
  if (g.kind == record_kind::session) return false;  // its statistics settings are read below
  if (g.kind != record_kind::tensor || !g.has_payload) return true;
  const bool complete = g.has_stats && (!(g.flags & RECORD_FLAG_CRC32) || g.has_crc32);
  return complete && !options.recompute && ((g.flags & RECORD_FLAG_SAVE) || options.keep_payload);
}

stats_stage_result stats_run(stage_io &io, const stats_stage_options &options) {
  stats_stage_result result;
  part_runner runner(options.threads ? options.threads : part_runner_default_threads());
  std::map<std::string, stats_options> stats_by_run;  // from each session record
  // The capture computes most statistics itself: such records pass by in whole batches.
  io.pass_unchanged([&](const record_glance &g) { return stats_leaves_unchanged(g, options); },
                    [&](const record_glance &g) {
                      ++result.records;
                      if (g.kind != record_kind::tensor) return;
                      ++result.tensors;
                      if (g.has_payload) result.payload_bytes += g.length;
                    });
  while (record *r = io.next()) {
    auto &h = r->header;
    if (h.kind == record_kind::session && h.meta.is_object())
      stats_by_run[h.run] = stats_options_of_session(h.meta);
    if (h.kind == record_kind::tensor) {
      ++result.tensors;
      if (r->has_payload()) result.payload_bytes += h.length;
      const auto it = stats_by_run.find(h.run);
      if (record_fill_missing_stats(*r, it != stats_by_run.end() ? it->second : stats_options{},
                                    {options.recompute, &runner}))
        ++result.computed;
      if (r->has_payload() && !(h.flags & RECORD_FLAG_SAVE) && !options.keep_payload) {
        r->drop_payload();
        ++result.payloads_dropped;
      }
    }
    io.send(*r);
    ++result.records;
  }
  io.finish();
  return result;
}

}  // namespace tprobe
