// gradsim.h: tprobe-gradsim, the offline front door of the gradient similarity of core/grad_sim.h
// (msprobe's GradComparator, docs/msprobe-compat.md §6.2); the live one is
// stages/stream/gradsim_live/gradsim_live.h, and both write the files of core/grad_sim_output.h.
//
// Offline, tprobe-gradsim (`tprobe gradsim DIR1 DIR2 -o OUTDIR`): two grad_probe dump_paths (their
// rank{N}/ folders, paired by number) are compared as msprobe's GradComparator.compare_distributed
// compares them: per rank, the step{S}/ folders (each on both sides: one that a side lacks is a
// usage error naming that side, where msprobe skips it), the parameters of the first
// grad_summary csv present in both (in its row order, at least one row; msprobe takes the first .csv that
// os.listdir happens to return, tprobe the lowest step's), and for each step and parameter the
// agreement of the two {param}.npy direction arrays (same shape, dtype bool, else an error).
// It prints one line on stdout:
//   tprobe-gradsim: first suspect step 3 (rank 0): summary similarity 0.7120; dropped most: fc.weight 1.0000 -> 0.6250, …
// (the earliest suspect step over the ranks) or "tprobe-gradsim: no suspect step (…)"; exit 1
// when a step is suspect, 0 when none.
//
// Both write, per rank, OUTDIR/rank{N}/similarities.csv and
// OUTDIR/rank{N}/similarities_picture/{param}_similarities.svg (and summary_similarities.svg):
// msprobe's csv, and its line charts (x steps, y similarities, title "{key}_similarities") drawn
// as SVG by tprobe where msprobe draws PNGs with matplotlib.
//
// Errors: usage_error naming the side at fault (missing or unpaired rank/step folders, a direction
// file missing on one side, a grad_summary csv without parameter rows, shapes or dtypes that
// differ), system_error (files).
#pragma once

#include <string>
#include <vector>

#include "grad_sim_output.h"
#include "stage_main.h"

namespace tprobe {

struct gradsim_offline_options {
  std::string dir1, dir2;
  std::string output_dir = "./output";
};

const stage_description &gradsim_stage_description();
std::vector<gradsim_rank> gradsim_offline_run(const gradsim_offline_options &o);

}  // namespace tprobe
