// ckpt_compare.h: tprobe-ckpt-compare, msprobe's checkpoint compare (`msprobe config_check -c A B`,
// docs/msprobe-compat.md; msprobe 8.3.3 core/config_check/ckpt_compare/): two checkpoints' common
// parameters → {name: {"l2", "cos", "numel", "shape"}} as msprobe's ckpt_similarity.json.
//
//   tprobe ckpt-compare A B -o OUT.json [--threads N]      (msprobe's spelling: -c A B)
//
// A checkpoint (ckpt_load) is one of
//   * a torch.save file of a state dict: its "model" (or "model0", "model1", … with virtual pipeline
//     stages) as Megatron-LM writes it, renamed to mcore's local names (name_mapping.yaml); else its
//     "module" or "state_dict" entry, or the dict itself, not renamed;
//   * a Megatron-LM checkpoint folder (latest_checkpointed_iteration.txt → iter_XXXXXXX or release,
//     or an iteration folder holding mp_rank_* folders): every mp_rank_TT[_PPP][_EEE]/
//     model_optim_rng.pt, TP shards concatenated (column-parallel params on dim 0, row-parallel on
//     dim 1, others from TP rank 0, a warning when the ranks differ), layer and expert numbers made
//     global from the PP/VPP and EP ranks, names mapped as above: megatron_loader.py's rules;
//   * any other folder: its *.pt, *.pth, *.bin files (recursively) as one state dict; when a name
//     occurs in two files, every name is prefixed by its file's relative path and "/".
// Nested dicts are flattened with "." (msprobe's _get_parameter); values that are not tensors or
// dicts are left out. Files are read by core/torch_checkpoint.h: no code of the file is run.
//
// Metrics (msprobe's metrics.py), in float64 over any real dtype, one streaming pass per pair over
// the mapped files (at most a chunk per thread in memory, each tensor's pages given back after it):
// l2 = ‖a−b‖₂ (null if the shapes differ), cos = a·b/(‖a‖‖b‖) (1.0 when both norms are 0, null when
// one is), numel (n, or [n1, n2]), shape (a list, or [shape1, shape2]); "error" where a tensor
// cannot be read as reals (complex). Names on one side only are reported, not written.
//
// Errors: usage_error for a bad checkpoint or options (an existing OUT), system_error for I/O.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "stage_main.h"
#include "torch_checkpoint.h"

namespace tprobe {

// One parameter as compared: a tensor, or the TP shards that are concatenated on `cat_dim` into it.
struct ckpt_piece {
  const torch_checkpoint *file = nullptr;
  ckpt_tensor tensor;
};
struct ckpt_param {
  std::vector<ckpt_piece> pieces;  // one, or the TP ranks' shards in rank order
  int cat_dim = 0;
  std::vector<int64_t> shape;  // after concatenation
  std::vector<ckpt_piece> replicas;  // TP ranks > 0 of a parameter taken from rank 0: checked equal
  [[nodiscard]] uint64_t numel() const;
};

// A loaded checkpoint: its files stay mapped while the parameters are compared.
struct ckpt_side {
  std::string description;  // "state dict file", "Megatron checkpoint iter_0000010 (TP 2, PP 1, EP 1)"
  std::vector<std::unique_ptr<torch_checkpoint>> files;
  std::vector<std::pair<std::string, ckpt_param>> params;  // in load order, names unique
  std::vector<std::string> warnings;
};
[[nodiscard]] ckpt_side ckpt_load(const std::string &path);

// msprobe's name_mapping.yaml, applied in order with str.replace: Megatron legacy names → mcore's.
[[nodiscard]] std::string ckpt_mcore_name(std::string name);

struct ckpt_metrics {
  std::optional<double> l2, cos;  // nullopt: null (shapes differ, or cos with one zero norm)
  bool error = false;             // a tensor could not be read: "error" for l2 and cos
  std::string error_message;
  uint64_t numel_a = 0, numel_b = 0;
  std::vector<int64_t> shape_a, shape_b;
  std::string warning;  // e.g. TP ranks of a replicated parameter that differ
};
// One pair, one pass over both (shards read in place, never concatenated in memory).
[[nodiscard]] ckpt_metrics ckpt_compare_param(const ckpt_param &a, const ckpt_param &b);

struct ckpt_compare_options {
  std::string a, b;
  std::string output = "./ckpt_similarity.json";
  int threads = 4;
};

struct ckpt_compare_report {
  std::vector<std::pair<std::string, ckpt_metrics>> rows;  // A's order
  std::vector<std::string> only_a, only_b;
  std::vector<std::string> warnings;
  std::string description_a, description_b;
  std::string file;  // written
  double seconds = 0;
};

// msprobe's JSON object for the rows ({name: {"l2", "cos", "numel", "shape"}}).
[[nodiscard]] nlohmann::ordered_json ckpt_result_json(const ckpt_compare_report &r);
// Loads both, compares the common names on o.threads threads, writes o.output (refused if it exists).
[[nodiscard]] ckpt_compare_report ckpt_compare_run(const ckpt_compare_options &o);
// The summary lines: counts, the parameters that moved most (by l2 and by 1 − cos), one-side names.
[[nodiscard]] std::vector<std::string> ckpt_summary(const ckpt_compare_report &r, size_t top = 10);

const stage_description &ckpt_compare_stage_description();

}  // namespace tprobe
