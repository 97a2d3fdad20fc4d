// op_callbacks.h: the ATen operator callbacks (at::RecordFunction, FUNCTION scope) and the
// autograd node callback (BACKWARD_FUNCTION scope). Registered once per process, disabled until a
// capture starts (state::update_callbacks turns them on and off). An operator is named, its
// arguments captured at its start and its results at its end (state::op_begin / op_end, in
// op_callbacks.cpp), and its backward linked (backward_link.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/Generator.h>
#include <ATen/record_function.h>

#include "backward_link.h"
#include "op_names.h"

namespace tprobe::torch_capture {

struct op_info {
  std::string name;  // the RecordFunction name this was made for ("aten::add")
  op_name outer, nested;
  struct argument {
    std::string name;
    bool kwarg_only;
  };
  std::vector<argument> arguments;
  // Arguments the schema marks as written (`Tensor(a!) self`, `out=`): their storages' contents
  // change under the operator, even through a tensor whose version counter is not the one
  // captured before (state::content_of).
  std::vector<size_t> written;
  // Only dispatcher operators have one. Other FUNCTION-scope ranges (the autograd engine's
  // "autograd_engine::evaluate_function: …") are not operators: never dumped, but what runs
  // inside them is nested all the same.
  bool has_schema = false;
  // Its tensor results are all zero bytes (aten::zero_, zeros, zeros_like, new_zeros): their
  // statistics need no read (tprobe_capture_tensor_zeroed).
  bool zero_fills = false;
  // The dispatcher's name of the operator (task free_benchmark re-runs it); none without a schema.
  std::optional<c10::OperatorName> operator_name;
};

// A call task free_benchmark re-runs (free_benchmark.cpp): its arguments as they were at its
// start, and the random generators' states then.
struct fuzz_call {
  std::vector<c10::IValue> args;
  int valid = -1;  // fuzz_valid_input
  std::vector<at::Generator> generators;
  std::vector<at::Tensor> rng_states;
  uint64_t sequence_begin = 0;
};

struct op_context : at::ObserverContext {
  std::string forward, backward;
  std::optional<std::string> parent, backward_parent;
  bool capture_outputs = false;
  bool outputs_zeroed = false;  // op_info::zero_fills
  bool link = false;
  uint64_t sequence_begin = 0;
  std::vector<input_edge> inputs;
  // A collective: its arguments, whose values after the communication are its output.
  bool collective = false;
  std::vector<c10::IValue> arguments;
  std::shared_ptr<fuzz_call> fuzz;  // task free_benchmark: the call is re-run at its end
};

// A collective's output waits for the communication (see state::collect_collectives).
struct pending_collective {
  std::string entry;
  std::vector<c10::IValue> arguments;
};

struct state;
// Adds the two callbacks (disabled) the first time; later calls do nothing.
void register_callbacks(state &s);

}  // namespace tprobe::torch_capture
