// tprobe-grad-probe: see grad_probe_stage.h.
#include <fmt/format.h>

#include "grad_probe_stage.h"

int main(int argc, char **argv) {
  using namespace tprobe;
  return stage_main(argc, argv, grad_probe_stage_description(), [](stage_main_context &c) {
    grad_probe_stage_options o;
    o.dump_path = c.values().text("dump-path");
    stage_io &io = c.start();
    const auto r = grad_probe_stage_run(io, o);

    fmt::print(stderr, "tprobe-grad-probe: {} gradients, {} grad_summary csv files, {} direction files, {} records, "
               "{} producers, {} truncated{}\n", r.gradients, r.csv_files, r.npy_files, r.records,
               io.counts().producers, io.counts().truncated_producers, io.interrupted() ? ", interrupted" : "");
    return static_cast<int>(EXIT_OK);
  });
}
