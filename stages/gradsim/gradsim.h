// gradsim.h: the two front doors of the gradient similarity of core/grad_sim.h (msprobe's
// GradComparator, msprobe-compat.md §5.2).
//
// Offline, tprobe-gradsim (`tprobe gradsim DIR1 DIR2 -o OUTDIR`): two grad_probe dump_paths (their
// rank{N}/ folders, paired by number) are compared as msprobe's GradComparator.compare_distributed
// compares them: per rank, the step{S}/ folders present in both, the parameters of the first
// grad_summary csv present in both (in its row order; msprobe takes the first .csv that
// os.listdir happens to return, tprobe the lowest step's), and for each step and parameter the
// agreement of the two {param}.npy direction arrays (same shape, dtype bool, else an error).
// It prints one line on stdout:
//   tprobe-gradsim: first suspect step 3 (rank 0): summary similarity 0.7120; dropped most: fc.weight 1.0000 -> 0.6250, …
// (the earliest suspect step over the ranks) or "tprobe-gradsim: no suspect step (…)"; exit 1
// when a step is suspect, 0 when none.
//
// Live, tprobe-gradsim-live (pipelines/gradsim-live.json): the gradient records of two runs of one
// script (manifest runs a and b; a session is known by its meta "label", else by the order its run
// appears) are paired by (rank, step, parameter) as they arrive; a step is judged the moment both
// runs have ended it on that rank, and the first suspect step is printed at once (options.log,
// "tprobe-gradsim-live: first suspect step …") and sent downstream as a value record with meta
// {"event": "first_suspect", "step", "rank", "line"}. A waiting gradient holds only its packed
// directions (numel / 8 bytes).
//
// Both write, per rank, OUTDIR/rank{N}/similarities.csv and
// OUTDIR/rank{N}/similarities_picture/{param}_similarities.svg (and summary_similarities.svg):
// msprobe's csv, and its line charts (x steps, y similarities, title "{key}_similarities") drawn
// as SVG by tprobe where msprobe draws PNGs with matplotlib.
//
// Errors: usage_error (missing or unpaired folders, a direction file missing on one side, shapes
// or dtypes that differ), system_error (files), framing_error (records).
#pragma once

#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "endpoint.h"
#include "grad_sim.h"
#include "stage_main.h"

namespace tprobe {

struct gradsim_rank {
  int32_t rank = 0;
  grad_sim_table table;
  std::optional<grad_suspect> first;
  std::vector<std::string> files;  // csv first, then the charts
};

// Writes rank{N}/similarities.csv and the charts of one rank under output_dir; returns the paths.
std::vector<std::string> gradsim_write_rank(const std::string &output_dir, int32_t rank, const grad_sim_table &t);
// One line chart as an SVG document (x: steps, y: similarities).
std::string gradsim_chart_svg(const std::string &title, const std::vector<int64_t> &steps,
                              const std::vector<double> &values);
// The earliest first suspect step over the ranks (ties: the lowest rank).
const gradsim_rank *gradsim_earliest(const std::vector<gradsim_rank> &ranks);

// ---- offline ----

struct gradsim_offline_options {
  std::string dir1, dir2;
  std::string output_dir = "./output";
};

const stage_description &gradsim_stage_description();
std::vector<gradsim_rank> gradsim_offline_run(const gradsim_offline_options &o);

// ---- live ----

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
