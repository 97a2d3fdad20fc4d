// free_benchmark.h: msprobe 8.3.3's task free_benchmark (无标杆比对; docs/stages/free-benchmark.md,
// docs/msprobe-compat.md §8): each selected API call is run a second time with a perturbed input (or in
// higher precision, or on the CPU) and the two outputs compared; the calls whose outputs part are
// the rows of {dump_path}/step{N}/rank{R}/free_benchmark.csv.
//
// This header holds what needs no tensor library: the config section, the choice of calls, the
// thresholds, the chunking of the ratio, preheat's sampling and threshold adaptation, and the
// row with its csv text. The perturbation and the comparison of tensors run in the training
// process (capture/torch/free_benchmark.h), where the tensors are; the rows travel as records
// (transport/free_benchmark_record.h) to tprobe-free-benchmark, which writes the csv.
//
// Errors: usage_error (core/errors.h) with one line naming `where` and the field, for a section
// that does not parse (the capture's config parser validates the same rules first, with this
// function, so this means a malformed session record or a bad call).
//
// Files: free_benchmark.cpp (settings, thresholds, preheat: std and nlohmann_json only, compiled
// into the PyTorch capture too) and free_benchmark_csv.cpp (the row's csv and JSON: tprobe_core
// only, it uses pyjson's repr(float)).
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace tprobe {

// ---- The config section (msprobe's FreeBenchmarkCheckConfig, validation rules of §8.2) ----

struct free_benchmark_settings {
  std::vector<std::string> scope;  // exact API names ("Torch.matmul.0.forward"); excludes `list`
  std::vector<std::string> list;   // substrings ("relu"); required for fuzz_stage backward
  std::string fuzz_device = "npu";  // npu (the training's own device) | cpu (iff pert_mode to_cpu)
  std::string pert_mode = "improve_precision";  // improve_precision add_noise bit_noise change_value no_change to_cpu
  std::string handler_type = "check";  // check | fix (forward, improve_precision or to_cpu, no preheat)
  std::string fuzz_level = "L1";       // only L1
  std::string fuzz_stage = "forward";  // forward | backward
  bool if_preheat = false;
  int64_t preheat_step = 15;
  int64_t max_sample = 15;  // msprobe's code default (its doc says 20)

  [[nodiscard]] bool fix() const { return handler_type == "fix"; }
  [[nodiscard]] bool backward() const { return fuzz_stage == "backward"; }
  [[nodiscard]] bool preheat() const { return if_preheat; }
  // msprobe's ListScope.check: with a scope, the name must be one of it; then, with a list, one of
  // its elements must be a substring. For backward fuzzing the name is the backward one
  // ("Torch.matmul.0.backward").
  [[nodiscard]] bool wants(std::string_view api_name) const;
};

// All msprobe's rules (§8.2), each broken one a usage_error:
//   `{where}: field "free_benchmark.{key}": {problem}`
// Missing keys take the defaults above. Unknown keys are the config parser's to refuse.
[[nodiscard]] free_benchmark_settings free_benchmark_settings_from_json(const nlohmann::ordered_json &section,
                                                                        const std::string &where);
// Every field, defaults filled in: what the session meta carries as "free_benchmark".
[[nodiscard]] nlohmann::ordered_json free_benchmark_settings_to_json(const free_benchmark_settings &s);

// ---- Thresholds (msprobe's ThresholdConfig) ----
// Dtypes are named as torch prints them: "torch.float16", "torch.bfloat16", "torch.float32",
// "torch.float64"; any other name takes the default.

// ABS_TOL_VALUE_DICT: bf16 1e-4, fp16 1e-6, fp32 1e-8, fp64 1e-16; others 1e-8. The comparison's
// floor is its square root in forward, 1e-3 in backward (free_benchmark_abs_tol).
[[nodiscard]] double free_benchmark_noise(std::string_view torch_dtype);
[[nodiscard]] double free_benchmark_abs_tol(std::string_view torch_dtype, bool backward);
// DTYPE_PER_THD: fp16 1.002, bf16 1.004, fp32 1.0002; others (fp64 included) 1.0002. no_change: 1.0.
[[nodiscard]] double free_benchmark_threshold(std::string_view torch_dtype, std::string_view pert_mode);
// The number of chunks calculate_max_ratio splits a flattened tensor of `bytes` into:
// M = bytes / 1 MiB; k = clamp(2^(floor(log2 M) - 4), 1, 128); 1 when M == 0 or the tensor is 0-d.
[[nodiscard]] int64_t free_benchmark_chunks(uint64_t bytes, int64_t ndim);
// consistent = not symbol_flipping and 1/threshold <= ratio <= threshold.
[[nodiscard]] bool free_benchmark_consistent(double ratio, bool symbol_flipping, double threshold);

// ---- One row of free_benchmark.csv (msprobe's UnequalRow) ----

struct free_benchmark_row {
  int64_t rank = 0;
  std::string pert_mode;
  std::string stage;  // forward | backward
  int64_t step = 0;
  std::string api_name;  // "Torch.matmul.40.forward"
  // max_rel: ratio - 1 (Python float repr), or "symbol_flipping", or empty (to_cpu's rows).
  enum class kind { ratio, symbol_flipping, none } verdict = kind::ratio;
  double ratio = 1.0;
  // Of the original output element: "torch.float16". Empty when that element is no tensor (a
  // Python number: msprobe leaves dtype and shape None), and then the shape cell is empty too.
  std::string dtype;
  std::vector<int64_t> shape;  // of the same: written as str(torch.Size); {} is "torch.Size([])" (0-d)
  std::optional<int64_t> output_index;

  bool operator==(const free_benchmark_row &) const = default;
};

// "rank,pert_mode,stage,step,api_name,max_rel,dtype,shape,output_index\r\n"
[[nodiscard]] std::string free_benchmark_csv_header();
// One line as Python's csv.writer writes the row: "\r\n"-terminated, a field quoted when it holds
// a comma, quote or line break. max_rel is repr(ratio - 1.0), shape "torch.Size([4096, 4, 192])".
[[nodiscard]] std::string free_benchmark_csv_line(const free_benchmark_row &row);
// The max_rel cell alone, and the shape cell alone (unquoted).
[[nodiscard]] std::string free_benchmark_max_rel_text(const free_benchmark_row &row);
[[nodiscard]] std::string free_benchmark_shape_text(const std::vector<int64_t> &shape);

// A row as record meta and back (transport/free_benchmark_record.h); from_json throws usage_error
// naming `where` for a malformed one.
[[nodiscard]] nlohmann::ordered_json free_benchmark_row_to_json(const free_benchmark_row &row);
[[nodiscard]] free_benchmark_row free_benchmark_row_from_json(const nlohmann::ordered_json &j, const std::string &where);

// ---- Preheat (msprobe's PreheatHandler and PreheatCounter, §8.6) ----
//
// Thresholds adapt per API (its pure name, api_name.rsplit(".", 2)[0]: "Torch.matmul") and per
// dtype. Step 0 only counts the calls of each API; from step 1 every call is compared against the
// API's threshold (initially 2.05), and while step < preheat_step some calls are sampled: also run
// on the CPU, their (ratio, cpu_consistent) recorded; once a step has its samples the threshold
// moves (§8.6's four rules) and never falls below DTYPE_PER_THD.
class free_benchmark_preheat {
 public:
  static constexpr double initial_threshold = 2.05;  // PREHEAT_INITIAL_THD

  // pert_mode sets the floor of the thresholds (free_benchmark_threshold: 1.0 for no_change).
  // usage_error when preheat_step or max_sample is not > 0.
  free_benchmark_preheat(int64_t preheat_step, int64_t max_sample, std::string pert_mode = "improve_precision");

  // "Torch.matmul.0.forward" -> "Torch.matmul".
  [[nodiscard]] static std::string pure_name(std::string_view api_name);

  // Counts a call of `pure` at `step` and returns its 1-based order in this step. Call once per
  // fuzzed call, in order; a new step (any step different from the last) restarts the orders and
  // drops the step's samples (PreheatCounter.check_step). At step 0 it also counts
  // one_step_calls; in a preheat step, a call whose order is in the sample set counts as sampled
  // whatever its dtype (msprobe's api_sample_time).
  int64_t count_call(const std::string &pure, int64_t step);
  // Calls of `pure` counted at step 0 (one_step_used_api).
  [[nodiscard]] int64_t one_step_calls(const std::string &pure) const;
  // Whether the call of 1-based order `order` at `step` is sampled (so is to be run on the CPU
  // too and given to add_sample): step >= 1, step < preheat_step, the dtype still preheating, and
  // order in msprobe's sample set
  //   { ((preheat_step*(i-1) + step) % total) or total : i in 1..per_step },
  //   per_step = min(ceil(total / preheat_step), max_sample), total = one_step_calls(pure).
  [[nodiscard]] bool sampled(const std::string &pure, const std::string &torch_dtype, int64_t step, int64_t order) const;
  // The threshold for this API and dtype now.
  [[nodiscard]] double threshold(const std::string &pure, const std::string &torch_dtype) const;
  // A sampled call's result (torch_dtype: the first tensor's of the original output; ratio: the
  // largest float ratio of its elements, 0 when none). Recorded for the step when the dtype still
  // preheats; once the step's sampled calls of the API reach per_step, every dtype recorded this
  // step has its threshold adjusted (§8.6's four rules, floor free_benchmark_threshold).
  void add_sample(const std::string &pure, const std::string &torch_dtype, int64_t step, double ratio,
                  bool cpu_consistent);
  // Whether a step compares at all (step 0 only counts).
  [[nodiscard]] static bool compares(int64_t step) { return step >= 1; }
  [[nodiscard]] int64_t per_step(const std::string &pure) const;
  // Calls of `pure` in the sample set so far in its last counted step (api_sample_time).
  [[nodiscard]] int64_t sampled_calls(const std::string &pure) const;
  // Whether the dtype of `pure` still preheats (not stopped by an inconsistent sample).
  [[nodiscard]] bool preheating(const std::string &pure, const std::string &torch_dtype) const;

 private:
  struct per_dtype {
    double threshold = initial_threshold;
    bool preheating = true;
    std::vector<std::pair<double, bool>> ratios;  // this step's (ratio, cpu_consistent)
  };
  struct per_api {
    int64_t step0_calls = 0;
    int64_t last_step = -1, order = 0, sampled = 0;
    std::map<std::string, per_dtype> dtypes;
  };
  static void enter_step(per_api &a, int64_t step);
  [[nodiscard]] bool in_sample_set(const std::string &pure, int64_t step, int64_t order) const;
  int64_t preheat_step_, max_sample_;
  std::string pert_mode_;
  std::map<std::string, per_api> apis_;
};

}  // namespace tprobe
