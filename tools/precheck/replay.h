// replay.h: the pre-check's replay of one API call on the CPU, one precision higher, with LibTorch
// (docs/msprobe-compat.md §7.6). The one replay both front doors use: tprobe-precheck over dump files
// (precheck_offline.h) and tprobe-precheck-live over the tensor stream.
//
// For one call (its .forward entry and, when the dump has one, its .backward entry):
//   1. normalize_call (core/precheck/api_call.h) names the ATen operator and orders the arguments by
//      its schema; the operator's overloads are found through the dispatcher and the first whose
//      schema the arguments fit is called, boxed, through the dispatcher (autograd included).
//   2. Arguments: a tensor is the dumped one (tensor_source) or, in random mode (a statistics dump),
//      drawn from its Max/Min as msprobe's gen_random_tensor does, from a generator seeded by
//      `seed` and the API's name (so -j and resume give the same tensors in any order).
//   3. Bench: float tensors raised (fp16/bf16 → fp32, fp32 → fp64; fp32 when several low dtypes
//      meet), tensors that required grad made leaves, the operator run on the CPU, and — when the
//      dump holds a backward entry — backward from the dumped gradient of output 0.
//   4. Device: the dumped outputs and input gradients (what training computed). Where the dump holds
//      statistics only, the operator is run again on the CPU in the dumped dtypes (random mode),
//      and the message says so.
//   5. Output: an api_replay (core/precheck/precheck_standard.h) for judge_api.
// Random operators, allocation-only operators, writes into views, collectives and operators with no
// CPU kernel are skipped with the reason; an exception of the operator becomes a SKIP row with its
// message, as in msprobe. Nothing here throws for one bad API: the row says what went wrong.
//
// Thread-safe: each call builds its own tensors; callers may replay different APIs in parallel
// (LibTorch's intra-op threads should then be 1: at::set_num_threads).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include "dtype.h"
#include "precheck_standard.h"

namespace tprobe::precheck {

// Where the data of a dumped tensor comes from.
class tensor_source {
 public:
  virtual ~tensor_source() = default;
  // The tensor an argument entry names ({"type": "torch.Tensor", "data_name": …}), on the CPU, in
  // the entry's dtype; nullopt when the entry has no data (statistics). Throws usage_error or
  // system_error when the named data cannot be read.
  [[nodiscard]] virtual std::optional<at::Tensor> load(const nlohmann::ordered_json &entry) = 0;
};

// Tensors of a dump folder: <dump_tensor_data>/<data_name>, .npy or .pt (torch.save).
class dump_folder_source : public tensor_source {
 public:
  // `tensor_dir` is the dump's dump_tensor_data folder; empty when the dump has none.
  explicit dump_folder_source(std::string tensor_dir) : tensor_dir_(std::move(tensor_dir)) {}
  [[nodiscard]] std::optional<at::Tensor> load(const nlohmann::ordered_json &entry) override;

 private:
  std::string tensor_dir_;
};

// tprobe's dtypes (core/dtype.h: the wire's and .npy's) and LibTorch's, both ways.
[[nodiscard]] std::optional<at::ScalarType> torch_scalar_type(tprobe::dtype t);
[[nodiscard]] std::optional<tprobe::dtype> tprobe_dtype(at::ScalarType t);

// A tensor file (.npy or .pt) as a CPU tensor of `dtype` ("torch.bfloat16": an .npy holds bf16 as
// float32); throws usage_error / system_error naming the file.
[[nodiscard]] at::Tensor load_tensor_file(const std::string &path, const std::string &dtype);

struct replay_options {
  uint64_t seed = 1234;        // msprobe's seed_all(1234)
  bool allow_random = true;    // statistics dumps: inputs drawn from Max/Min
};

// The tensors of one replay, kept for -save_error_data (msprobe's {full}.{part}.{index}.pt, §7.9.4):
// undefined tensors stand for None and scalars, which take an index too.
struct replay_tensors {
  std::vector<at::Tensor> forward_input, forward_output_bench, forward_output_device, backward_input,
      backward_output_bench, backward_output_device;
};

// Replays `full_name` ("Functional.linear.0"). `backward` is its .backward entry or null; `keep`,
// when given, receives the tensors.
[[nodiscard]] api_replay replay_api(const std::string &full_name, const nlohmann::ordered_json &forward,
                                    const nlohmann::ordered_json *backward, tensor_source &source,
                                    const replay_options &options, replay_tensors *keep = nullptr);

}  // namespace tprobe::precheck
