// tprobe-nan-live: see nan_live.h.
#include <fmt/format.h>

#include "nan_live.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main(argc, argv, nan_live_stage_description(), [](stage_main_context &c) {
    nan_live_options o;
    o.output_dir = c.values().text("output-dir");
    o.log = stdout;
    control_sender control(c.zmq());
    if (c.values().flag("stop-capture"))
      o.on_verdict = [&](const nan_live_verdict &v) {  // the control path of docs/wire-format.md
        record stop(record_kind::control);
        stop.header.meta = {{"command", "stop"}, {"from", "tprobe-nan-live"}, {"reason", v.line}};
        for (const auto &ep : v.controls) (void)control.send(ep, stop);
      };
    stage_io &io = c.start();
    const auto r = nan_live_run(io, o);

    fmt::print(stderr, "tprobe-nan-live: {} steps analysed, {} with a NaN/Inf producer, {} records, {} entries{}{}\n",
               r.steps_analysed, r.steps_with_producer, r.records, r.entries,
               r.first && !r.first->file.empty() ? ": " + r.first->file : "", io.interrupted() ? ", interrupted" : "");
    return static_cast<int>(r.first ? EXIT_NEGATIVE : EXIT_OK);
  });
}
