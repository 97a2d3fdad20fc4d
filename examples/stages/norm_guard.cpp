// norm_guard: a stage of your own in C++ with the stage kit (stages/stream/kit/tprobe_stage.h,
// docs/stage-protocol.md). It passes every record on, so it can stand where tprobe-stats stands,
// and the first time a tensor's norm exceeds --limit, or a tensor holds NaN/Inf, it prints that
// tensor and stops that capture (msprobe's service end: the training runs on, the dump so far is
// complete). Built as build/bin/tprobe-example-norm-guard; in a manifest:
//   {"name": "guard", "exec": "/path/to/tprobe-example-norm-guard", "inputs": ["capture"],
//    "options": {"limit": 1e4}}
#include <set>

#include <fmt/format.h>

#include "tprobe_stage.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  stage_kit kit;
  kit.description = {"norm-guard", "stop the capture at the first tensor whose norm exceeds a limit or is not finite",
                     true, true, {{"limit", "float", "1e4", "norm above which the capture is stopped", 0.0}}};
  std::set<std::string> stopped;  // runs (captures) already told to stop
  kit.on_record = [&](record &&r, stage_context &ctx) {
    const auto &h = r.header;
    if (h.kind == record_kind::tensor && h.stats && !stopped.count(h.run)) {
      const double norm = h.stats->norm.as_double();  // NaN when the dtype has no norm (bool)
      const bool bad = h.stats->nan_count > 0 || h.stats->inf_count > 0 || norm > ctx.options().number("limit");
      if (bad) {
        fmt::print("norm-guard: step {} rank {} {} {}: norm {:.6g}, {} NaN, {} Inf: stopping the capture\n", h.step,
                   h.rank, h.entry, h.slot, norm, h.stats->nan_count, h.stats->inf_count);
        std::fflush(stdout);
        ctx.control(h.run, "stop", fmt::format("{} {} exceeded the norm limit", h.entry, h.slot));
        stopped.insert(h.run);
      }
    }
    ctx.emit(std::move(r));
  };
  return stage_kit_main(argc, argv, kit);
}
