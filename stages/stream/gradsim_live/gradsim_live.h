// gradsim_live.h: tprobe-gradsim-live, the stream front door of the gradient similarity of
// core/grad_sim.h (msprobe's GradComparator); the offline one is tools/gradsim/gradsim.h, and both
// write the files of core/grad_sim_output.h.
//
// Live, tprobe-gradsim-live (pipelines/gradsim-live.json): the gradient records of two runs of one
// script (manifest runs a and b; a session is known by its meta "label", else by the order its run
// appears) are paired by (rank, step, parameter) as they arrive; a step is judged the moment both
// runs have ended it on that rank, and the first suspect step is printed at once (options.log,
// "tprobe-gradsim-live: first suspect step …") and sent downstream as a value record with meta
// {"event": "first_suspect", "step", "rank", "line"}. A waiting gradient holds only its packed
// directions (numel / 8 bytes).
//
// Per rank it writes OUTDIR/rank{N}/similarities.csv and the charts (core/grad_sim_output.h).
//
// Errors: usage_error (shapes or dtypes that differ), system_error (files), framing_error (records).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "stage_io.h"
#include "grad_sim_output.h"
#include "stage_main.h"

namespace tprobe {

struct gradsim_live_options {
  std::string a = "a", b = "b";  // run labels compared (a is path1's side)
  std::string output_dir;        // "" = write nothing
  std::FILE *log = nullptr;      // the first-suspect line
};

struct gradsim_live_result {
  uint64_t records = 0, gradients = 0, pairs = 0;
  uint64_t unmatched = 0;  // gradients whose partner never came
  std::vector<std::string> warnings;
  std::vector<gradsim_rank> ranks;
  std::optional<std::string> first_line;  // printed the moment it was known
};

const stage_description &gradsim_live_stage_description();
gradsim_live_result gradsim_live_run(stage_io &io, const gradsim_live_options &o);

}  // namespace tprobe
