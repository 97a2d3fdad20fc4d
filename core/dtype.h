// dtype.h: the element types tprobe understands, their sizes and their names.
//
// The numeric values are part of the wire format (transport/record.h carries the name, not the
// number, but tests and the C API use these values): never renumber, only append.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tprobe {

enum class dtype : uint8_t {
  float64 = 0,
  float32 = 1,
  float16 = 2,
  bfloat16 = 3,
  int8 = 4,
  int16 = 5,
  int32 = 6,
  int64 = 7,
  uint8 = 8,
  boolean = 9,
  complex64 = 10,   // element = two float32
  complex128 = 11,  // element = two float64
};

// Size of one element in bytes.
size_t dtype_size(dtype t);

// Short name used on the wire and on command lines: "float32", "bfloat16", "bool", …
std::string_view dtype_name(dtype t);
std::optional<dtype> dtype_from_name(std::string_view name);

// The name msprobe writes in dump.json for this framework: "torch.float32" for pytorch,
// "Float32" for mindspore, the numpy name ("float32") otherwise.
std::string dtype_framework_name(dtype t, std::string_view framework);

bool dtype_is_floating(dtype t);  // float64/32/16, bfloat16
bool dtype_is_complex(dtype t);

// NumPy array-interface descriptor for .npy files; bfloat16 has none (written as float32).
std::string_view dtype_numpy_descr(dtype t);

}  // namespace tprobe
