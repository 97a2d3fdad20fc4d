// grad_probe_stage.h: tprobe-grad-probe, the stage that writes msprobe's grad_probe files from the
// gradient records of the capture (transport/grad_record.h; the numbers were computed in the
// training process, core/grad_probe.h):
//   {dump_path}/rank{R}/grad_summary_{S}.csv     at the producer's step_end of step S
//   {dump_path}/rank{R}/step{S}/{param}.npy      as each gradient arrives (levels L1, L2)
// R is the record's rank, 0 when not distributed; dump_path and the level and bounds are the
// session's (its record's meta: dump_path, grad_probe), unless --dump-path is given. The rows of a
// csv are in arrival order, which is the parameters' order in model.named_parameters(). A step
// that ends without a gradient (every one filtered or None) leaves no csv. At the end of the
// stream (or a signal), the steps still open are written as they are.
//
// Example manifest (pipelines/grad_probe.json):
//   {"stages": [{"name": "grad", "stage": "grad-probe", "inputs": ["capture"]}]}
// Example launch line:
//   tprobe-grad-probe --input ipc:///tmp/run/grad.in --producers 1
//
// Errors: framing_error for a malformed gradient record, usage_error for a gradient before its
// session or a parameter name that cannot be a file name, system_error for files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "stage_io.h"
#include "stage_main.h"

namespace tprobe {

struct grad_probe_stage_options {
  std::string dump_path;  // "" = each session's dump_path
};

struct grad_probe_stage_result {
  uint64_t records = 0;    // records received
  uint64_t gradients = 0;  // gradient records
  uint64_t csv_files = 0, npy_files = 0;
  std::vector<std::string> csv_paths;  // every csv written, in order
};

const stage_description &grad_probe_stage_description();
grad_probe_stage_result grad_probe_stage_run(stage_io &io, const grad_probe_stage_options &o);

}  // namespace tprobe
