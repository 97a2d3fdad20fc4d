// torch_values.h: value encoding for the PyTorch capture. How an ATen value is described:
// tensors by their DLPack dtype (or, for what tprobe cannot read, by their facts alone), other
// values as msprobe's JSON leaves (docs/msprobe-compat.md §2.7). The routing of an operator argument to
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

// msprobe's JSON leaf of a non-tensor argument, appended to `out` as text (the form the C API
// takes; built without a DOM). `arg` is the schema's argument name: ints named dtype /
// memory_format / layout are enums, an int named reduction the str its Python API took.
void ivalue_leaf_append(std::string &out, const c10::IValue &v, std::string_view arg);

// The DLPack type of a scalar type tprobe reads; false for the others (fp8, quantized, …).
bool dl_dtype_of(c10::ScalarType t, DLDataType &out);

// A Python number that torch wrapped into a 0-d CPU tensor (`x + 1`): dumped as the number, its
// leaf appended to `out`; false (nothing appended) for any other tensor.
bool wrapped_number_append(std::string &out, const at::Tensor &t);

}  // namespace tprobe::torch_capture
