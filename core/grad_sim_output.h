// grad_sim_output.h: the files both front doors of core/grad_sim.h write (tprobe-gradsim, the
// offline tool in tools/gradsim/, and tprobe-gradsim-live, the stream stage in
// stages/stream/gradsim_live/), so that the two give the same files for the same gradients:
// Both write, per rank, OUTDIR/rank{N}/similarities.csv and
// OUTDIR/rank{N}/similarities_picture/{param}_similarities.svg (and summary_similarities.svg):
// msprobe's csv, and its line charts (x steps, y similarities, title "{key}_similarities") drawn
// as SVG by tprobe where msprobe draws PNGs with matplotlib.
//
// Errors: system_error (files).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "grad_sim.h"

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

}  // namespace tprobe
