// grad_sim.h: gradient similarity between two runs (docs/msprobe-compat.md §6.2, msprobe 8.3.3's
// GradComparator), for one rank: the fraction of elements whose gradient direction (grad > 0)
// agrees, per parameter and optimizer step, and the summary per step weighted by element count
// (Σsame / Σtotal over the parameters). The offline verb (tprobe gradsim, from the .npy files) and
// the live stage (tprobe-gradsim-live, from the records) both fill a grad_sim_table and write it
// with the same functions, so their results are the same.
//
// similarities.csv (UTF-8 with BOM, "\r\n" lines, as msprobe's write_csv):
//   step,0,1,2
//   fc.weight,1.0,1.0,0.625
//   …one row per parameter, in the order of the first grad_summary csv…
//   summary,1.0,1.0,0.7
// Similarities are repr(float); a pair with no elements is the int 0, as msprobe writes it.
//
// Suspect steps (the rule msprobe's documentation gives, which its code does not apply): a
// parameter's similarity below 0.97 at the first compared step, or falling by more than 0.03 from
// one compared step to the next, marks that step.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace tprobe {

inline constexpr double grad_suspect_first_step_below = 0.97;
inline constexpr double grad_suspect_drop_above = 0.03;

// Elements of two packed direction arrays (grad_probe.h) that agree: numel - popcount(a ^ b).
[[nodiscard]] uint64_t grad_sign_agreement(const uint8_t *a, const uint8_t *b, uint64_t numel);
// The same for unpacked bool arrays (one byte per element, as a .npy holds them).
[[nodiscard]] uint64_t grad_bool_agreement(const uint8_t *a, const uint8_t *b, uint64_t numel);

struct grad_sim_cell {
  uint64_t same = 0, total = 0;
  bool present = false;
};

class grad_sim_table {
 public:
  // Adds the pair of `param` at `step`. Steps and parameters are kept in first-seen order;
  // steps are sorted for output. A second add for the same cell replaces it.
  void add(int64_t step, const std::string &param, uint64_t same, uint64_t total);
  // Sets the parameter order (the grad_summary csv's); parameters added but not listed follow.
  void set_order(const std::vector<std::string> &params);

  [[nodiscard]] std::vector<int64_t> steps() const;        // sorted
  [[nodiscard]] std::vector<std::string> params() const;   // row order
  [[nodiscard]] bool has(int64_t step, const std::string &param) const;
  // same/total (0 when total is 0 or the cell is missing).
  [[nodiscard]] double similarity(int64_t step, const std::string &param) const;
  [[nodiscard]] double summary(int64_t step) const;
  [[nodiscard]] bool empty() const { return cells_.empty(); }

  // The csv text, BOM included. Every parameter must have a cell at every step (msprobe raises
  // otherwise): a missing one is a usage_error naming it.
  [[nodiscard]] std::string csv() const;

 private:
  std::vector<std::string> order_;
  std::map<std::string, std::map<int64_t, grad_sim_cell>> cells_;
  std::map<int64_t, std::pair<uint64_t, uint64_t>> totals_;
};

struct grad_suspect_param {
  std::string param;
  std::optional<double> before;  // the previous compared step's similarity (none at the first)
  double now = 0;
  double fall = 0;               // before - now, or 1 - now at the first step
};

struct grad_suspect {
  int64_t step = 0;
  double summary = 0;
  std::vector<grad_suspect_param> params;  // the parameters that mark the step, largest fall first
};

// Whether `step` (one of table.steps()) is suspect by the rule above, comparing it with the
// compared step before it.
[[nodiscard]] std::optional<grad_suspect> grad_suspect_at(const grad_sim_table &table, int64_t step);
// The first suspect step of the table.
[[nodiscard]] std::optional<grad_suspect> grad_first_suspect(const grad_sim_table &table);

// "first suspect step 3 (rank 0): summary 0.71; dropped most: fc.weight 1.0 -> 0.62, …" (at most
// `most` parameters named).
[[nodiscard]] std::string grad_suspect_line(const grad_suspect &s, int rank, size_t most = 5);

}  // namespace tprobe
