// fuzz.h: msprobe 8.3.3's free_benchmark on tensors (core/free_benchmark.h has the task's
// settings, thresholds and rows; docs/stages/free-benchmark.md the user's view). Everything here
// runs in the training process, on the tensors' own device, with ATen: the perturbations of one
// call's arguments (msprobe's perturbed layers), its re-run through the dispatcher, and the
// comparison of two outputs (msprobe's FuzzHandler.calculate_max_ratio and SingleCompare).
//
// The capture calls it from its operator callbacks (state::fuzz_begin / fuzz_end,
// free_benchmark.cpp); tests/torch/test_fuzz.cpp calls it directly. Nothing here records, hooks or
// synchronises except where a number must reach the host (one read per compared output).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/ivalue.h>

namespace tprobe::torch_capture {

// "torch.float16", as str(torch dtype) prints it (the csv's dtype column).
std::string fuzz_dtype_name(at::ScalarType t);

// msprobe's calculate_max_ratio after pre_process: `origin` converted to `perturbed`'s dtype and
// device; the floor abs_tol is sqrt(ABS_TOL[perturbed dtype]) forward, 1e-3 backward; the
// flattened tensors are split into free_benchmark_chunks() parts (only to bound the temporaries:
// the answer is the whole tensor's). symbol_flipping when min(o·p) < -abs_tol²; else the ratio is
// max(max r, 1/min r), r = nan_to_num(max(|o|, tol) / max(|p|, tol), nan = 1). One host read.
// One deliberate difference: msprobe keeps only the last chunk's ratio (its loop overwrites the
// running maximum), so for outputs of 32 MiB and more it judges the last part alone; here every
// part counts.
struct fuzz_ratio {
  bool symbol_flipping = false;
  double ratio = 1.0;
};
fuzz_ratio fuzz_max_ratio(const at::Tensor &origin, const at::Tensor &perturbed, bool backward);

// msprobe's SingleCompare.compare_seq for one tensor: `actual` (the training's output) against
// `golden` (the CPU's, in float32), with BENCHMARK_THD_DICT[actual's dtype]. A golden with inf or
// NaN is consistent.
bool fuzz_single_compare(const at::Tensor &actual, const at::Tensor &golden);

// The perturbations of one tensor (§8.4); nullopt where msprobe cancels (not floating, empty, a
// dtype outside its tables, every |x| below the dtype's tolerance, a shape change_value cannot swap).
std::optional<at::Tensor> fuzz_add_noise(const at::Tensor &x);
std::optional<at::Tensor> fuzz_bit_noise(const at::Tensor &x);
std::optional<at::Tensor> fuzz_change_value(const at::Tensor &x);

// msprobe's check_args_type: the index of the first positional argument that is a floating,
// non-meta tensor, or a list; -1 when none.
int fuzz_valid_input(const std::vector<c10::IValue> &args, const std::vector<bool> &kwarg_only);

// The arguments of the re-run. `written`: indices the operator writes (in place, out=): when the
// call is re-run they get a copy (unless the perturbation made a new tensor already), so the
// re-run never writes the training's tensors; nothing is copied when it is not.
//   improve_precision  every float16/bfloat16 tensor (in lists too) → float32; `perturbed` false
//                      when there was none (the call is not re-run, as msprobe)
//   to_cpu             every tensor → CPU, float16/bfloat16 → float32
//   no_change          the same arguments
//   add_noise, bit_noise, change_value: the first tensor inside args[valid] (itself, or a list's
//                      first tensor) perturbed; `perturbed` false when msprobe would cancel
struct fuzz_arguments {
  std::vector<c10::IValue> args;
  bool perturbed = false;
};
fuzz_arguments fuzz_perturb(const std::vector<c10::IValue> &args, int valid, const std::string &pert_mode,
                            const std::vector<size_t> &written);

// Runs `op` boxed on `args` (RecordFunction off, so the capture does not see it) and returns its
// results.
// Whether fuzz_perturb may re-run the call, cheaply (before it runs): false without a valid
// input, and for improve_precision without a float16/bfloat16 tensor. The capture keeps a call's
// written arguments and random state only when this is true.
bool fuzz_may_rerun(const std::vector<c10::IValue> &args, int valid, const std::string &pert_mode);

std::vector<c10::IValue> fuzz_rerun(const c10::OperatorHandle &op, std::vector<c10::IValue> args);

// The outputs of a call as msprobe compares them: one tensor (index -1), or the elements of a
// tuple or of a single list result (index = position). Non-tensors are left out.
std::vector<std::pair<int64_t, at::Tensor>> fuzz_output_tensors(const std::vector<c10::IValue> &outputs);

// One inconsistent output.
struct fuzz_finding {
  int64_t index = -1;  // output_index; -1 for a single output
  bool symbol_flipping = false;
  bool no_ratio = false;  // to_cpu (SingleCompare gives no ratio)
  double ratio = 1.0;
  at::ScalarType dtype = at::kFloat;  // the original's
  std::vector<int64_t> shape;
};
// Compares `original` with `perturbed` output by output (floating tensors only; a call whose
// perturbed outputs hold none is not compared): to_cpu by SingleCompare, the other modes by
// fuzz_max_ratio against `threshold` (DTYPE_PER_THD of the first original tensor's dtype, 1.0
// for no_change, or preheat's, given by the caller through threshold_of). `largest` receives the
// largest ratio seen (preheat's sample), 1.0 when none.
std::vector<fuzz_finding> fuzz_compare(const std::vector<std::pair<int64_t, at::Tensor>> &original,
                                       const std::vector<std::pair<int64_t, at::Tensor>> &perturbed,
                                       const std::string &pert_mode, bool backward, double threshold,
                                       double *largest = nullptr);

// msprobe's Tools.convert_fuzz_output_to_origin (handler fix): each original output tensor takes
// the perturbed one's values, in its own dtype and device, through a view that autograd does not
// version (`.data`), so the graph is untouched. False when the two do not pair up.
bool fuzz_fix_outputs(const std::vector<std::pair<int64_t, at::Tensor>> &original,
                      const std::vector<std::pair<int64_t, at::Tensor>> &perturbed);

}  // namespace tprobe::torch_capture
