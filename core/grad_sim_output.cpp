// gradsim_output.cpp: what the offline and the live gradsim write (gradsim.h): msprobe's
// similarities.csv and one SVG line chart per parameter and for the summary.
#include <algorithm>
#include <cmath>

#include <fmt/format.h>

#include "grad_sim_output.h"
#include "safe_path.h"

namespace tprobe {

namespace {

std::string xml_escape(const std::string &s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

}  // namespace

std::string gradsim_chart_svg(const std::string &title, const std::vector<int64_t> &steps,
                              const std::vector<double> &values) {
  // matplotlib's default figure (640x480) and axes box, so the charts read like msprobe's PNGs.
  const double width = 640, height = 480, left = 80, right = 24, top = 48, bottom = 56;
  const double pw = width - left - right, ph = height - top - bottom;
  double lo = 0, hi = 1;
  if (!values.empty()) {
    lo = *std::min_element(values.begin(), values.end());
    hi = *std::max_element(values.begin(), values.end());
  }
  if (hi - lo < 1e-9) {
    lo -= 0.05;
    hi += 0.05;
  }
  const double margin = (hi - lo) * 0.05;
  lo -= margin;
  hi += margin;
  const int64_t x0 = steps.empty() ? 0 : steps.front(), x1 = steps.empty() ? 1 : steps.back();
  const double xspan = x1 > x0 ? static_cast<double>(x1 - x0) : 1.0;
  auto X = [&](int64_t s) { return left + (x1 > x0 ? (static_cast<double>(s - x0) / xspan) * pw : pw / 2); };
  auto Y = [&](double v) { return top + (hi - v) / (hi - lo) * ph; };

  std::string svg = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"{1}\" viewBox=\"0 0 {0} {1}\" "
      "font-family=\"DejaVu Sans, sans-serif\" font-size=\"12\">\n"
      "<rect width=\"{0}\" height=\"{1}\" fill=\"white\"/>\n"
      "<text x=\"{2}\" y=\"28\" text-anchor=\"middle\" font-size=\"14\">{3}</text>\n"
      "<rect x=\"{4}\" y=\"{5}\" width=\"{6}\" height=\"{7}\" fill=\"none\" stroke=\"black\"/>\n",
      width, height, left + pw / 2, xml_escape(title), left, top, pw, ph);
  // y ticks: five, evenly spaced
  for (int i = 0; i <= 4; ++i) {
    const double v = lo + (hi - lo) * i / 4.0, y = Y(v);
    svg += fmt::format("<line x1=\"{0}\" y1=\"{1:.2f}\" x2=\"{2}\" y2=\"{1:.2f}\" stroke=\"black\"/>"
                       "<text x=\"{3}\" y=\"{4:.2f}\" text-anchor=\"end\">{5:.4g}</text>\n",
                       left - 5, y, left, left - 8, y + 4, v);
  }
  // x ticks: every step, or about ten of them
  const size_t every = std::max<size_t>(1, (steps.size() + 9) / 10);
  for (size_t i = 0; i < steps.size(); i += every) {
    const double x = X(steps[i]);
    svg += fmt::format("<line x1=\"{0:.2f}\" y1=\"{1}\" x2=\"{0:.2f}\" y2=\"{2}\" stroke=\"black\"/>"
                       "<text x=\"{0:.2f}\" y=\"{3}\" text-anchor=\"middle\">{4}</text>\n",
                       x, top + ph, top + ph + 5, top + ph + 20, steps[i]);
  }
  svg += fmt::format("<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">steps</text>\n", left + pw / 2, height - 12);
  svg += fmt::format("<text x=\"20\" y=\"{0}\" text-anchor=\"middle\" transform=\"rotate(-90 20 {0})\">"
                     "similarities</text>\n", top + ph / 2);
  std::string points;
  for (size_t i = 0; i < steps.size() && i < values.size(); ++i)
    points += fmt::format("{}{:.2f},{:.2f}", i ? " " : "", X(steps[i]), Y(values[i]));
  svg += fmt::format("<polyline points=\"{}\" fill=\"none\" stroke=\"#1f77b4\" stroke-width=\"1.5\"/>\n", points);
  for (size_t i = 0; i < steps.size() && i < values.size(); ++i)
    svg += fmt::format("<circle cx=\"{:.2f}\" cy=\"{:.2f}\" r=\"2.5\" fill=\"#1f77b4\"><title>step {}: {}</title>"
                       "</circle>\n", X(steps[i]), Y(values[i]), steps[i], values[i]);
  return svg + "</svg>\n";
}

std::vector<std::string> gradsim_write_rank(const std::string &output_dir, int32_t rank, const grad_sim_table &t) {
  const std::string root = path_check_create(output_dir, "output path");
  const std::string rank_dir = fmt::format("rank{}", rank);
  safe_mkdirs(root, rank_dir + "/similarities_picture");
  std::vector<std::string> files;
  const std::string csv = fmt::format("{}/{}/similarities.csv", root, rank_dir);
  atomic_write_file(csv, t.csv());
  files.push_back(csv);
  const auto steps = t.steps();
  auto chart = [&](const std::string &key, const std::vector<double> &values) {
    const std::string path = fmt::format("{}/{}/similarities_picture/{}_similarities.svg", root, rank_dir, key);
    atomic_write_file(path, gradsim_chart_svg(key + "_similarities", steps, values));
    files.push_back(path);
  };
  for (const auto &param : t.params()) {
    std::vector<double> v;
    for (int64_t s : steps) v.push_back(t.similarity(s, param));
    chart(param, v);
  }
  std::vector<double> summary;
  for (int64_t s : steps) summary.push_back(t.summary(s));
  chart("summary", summary);
  return files;
}

const gradsim_rank *gradsim_earliest(const std::vector<gradsim_rank> &ranks) {
  const gradsim_rank *best = nullptr;
  for (const auto &r : ranks)
    if (r.first && (!best || r.first->step < best->first->step)) best = &r;
  return best;
}

}  // namespace tprobe
