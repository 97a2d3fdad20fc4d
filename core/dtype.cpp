#include "dtype.h"

#include <array>

namespace tprobe {

namespace {
struct dtype_info {
  dtype type;
  std::string_view name;
  size_t size;
  std::string_view torch_name;
  std::string_view mindspore_name;
  std::string_view numpy_descr;
};

constexpr std::array<dtype_info, 12> dtype_table{{
    {dtype::float64, "float64", 8, "torch.float64", "Float64", "<f8"},
    {dtype::float32, "float32", 4, "torch.float32", "Float32", "<f4"},
    {dtype::float16, "float16", 2, "torch.float16", "Float16", "<f2"},
    {dtype::bfloat16, "bfloat16", 2, "torch.bfloat16", "BFloat16", ""},
    {dtype::int8, "int8", 1, "torch.int8", "Int8", "|i1"},
    {dtype::int16, "int16", 2, "torch.int16", "Int16", "<i2"},
    {dtype::int32, "int32", 4, "torch.int32", "Int32", "<i4"},
    {dtype::int64, "int64", 8, "torch.int64", "Int64", "<i8"},
    {dtype::uint8, "uint8", 1, "torch.uint8", "UInt8", "|u1"},
    {dtype::boolean, "bool", 1, "torch.bool", "Bool", "|b1"},
    {dtype::complex64, "complex64", 8, "torch.complex64", "Complex64", "<c8"},
    {dtype::complex128, "complex128", 16, "torch.complex128", "Complex128", "<c16"},
}};

const dtype_info &info(dtype t) { return dtype_table.at(static_cast<size_t>(t)); }
}  // namespace

size_t dtype_size(dtype t) { return info(t).size; }
std::string_view dtype_name(dtype t) { return info(t).name; }

std::optional<dtype> dtype_from_name(std::string_view name) {
  for (const auto &i : dtype_table)
    if (i.name == name) return i.type;
  return std::nullopt;
}

std::string dtype_framework_name(dtype t, std::string_view framework) {
  if (framework == "pytorch" || framework == "mindtorch") return std::string(info(t).torch_name);
  if (framework == "mindspore") return std::string(info(t).mindspore_name);
  return std::string(info(t).name);
}

bool dtype_is_floating(dtype t) {
  return t == dtype::float64 || t == dtype::float32 || t == dtype::float16 || t == dtype::bfloat16;
}
bool dtype_is_complex(dtype t) { return t == dtype::complex64 || t == dtype::complex128; }
std::string_view dtype_numpy_descr(dtype t) { return info(t).numpy_descr; }

}  // namespace tprobe
