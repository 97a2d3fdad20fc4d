// torch_values.h: value encoding for the PyTorch capture. How an ATen value is described:
// tensors by their DLPack dtype (or, for what tprobe cannot read, by their facts alone), other
// values as msprobe's JSON leaves (msprobe-compat.md §1.7). The routing of an operator argument to
// the capture calls (capture_tensor, capture_ivalue, …) is state's, in torch_values.cpp.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>
#include <dlpack/dlpack.h>
#include <nlohmann/json.hpp>

namespace tprobe::torch_capture {

// str(dtype) as Python prints it: "torch.float32", "torch.bfloat16", …
std::string python_dtype_name(c10::ScalarType t);

// msprobe's JSON leaf of a non-tensor argument. `arg` is the schema's argument name: ints named
// dtype / memory_format / layout are enums.
nlohmann::ordered_json ivalue_leaf(const c10::IValue &v, std::string_view arg);

// The DLPack type of a scalar type tprobe reads; false for the others (fp8, quantized, …).
bool dl_dtype_of(c10::ScalarType t, DLDataType &out);

// A Python number that torch wrapped into a 0-d CPU tensor (`x + 1`): dumped as the number.
std::optional<nlohmann::ordered_json> wrapped_number_leaf(const at::Tensor &t);

// Statistics reuse between an operator and the next. An operator's output is most often the next
// operator's input (conv -> batch_norm -> relu_, the optimizer's mul_ -> add_ chain), and reading
// it twice is most of what a statistics capture costs beyond the model. So the statistics of the
// last captured operator's outputs (contiguous CPU tensors of at least stats_memo_min_bytes whose
// slot wants statistics only) are kept, keyed by storage (held weakly: a freed one never matches),
// offset, shape, dtype and version counter, and an input equal on all of them takes them instead
// of a second pass. Only what torch lets run between that operator's end and the next one's start
// could change the data unseen: Python code writing through a NumPy view or a raw pointer (no
// version bump). Every other operator clears it, as do start, stop and step. Under the state's
// mutex; nothing here reads tensor data.
constexpr size_t stats_memo_min_bytes = 16384;
// Forgets every kept statistic: called when anything but the capture may have written tensors.
void stats_memo_clear();
// Clears the memo when it goes out of scope, unless told to keep it (an operator whose end is
// observed clears it there, after its inputs have used it).
struct stats_memo_guard {
  bool keep = false;
  stats_memo_guard() = default;
  stats_memo_guard(const stats_memo_guard &) = delete;
  stats_memo_guard &operator=(const stats_memo_guard &) = delete;
  ~stats_memo_guard() {
    if (!keep) stats_memo_clear();
  }
};
// Statistics passes saved by the memo since the process started (tests, counters()).
uint64_t stats_memo_hits();

}  // namespace tprobe::torch_capture
