#include "compare_pt.h"

#include <sys/stat.h>

#include <cerrno>
#include <optional>
#include <span>

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/import_read.h>

#include "errors.h"

namespace tprobe {

namespace {

std::optional<dtype> dtype_of(c10::ScalarType t) {
  switch (t) {
    case c10::ScalarType::Float: return dtype::float32;
    case c10::ScalarType::Double: return dtype::float64;
    case c10::ScalarType::Half: return dtype::float16;
    case c10::ScalarType::Char: return dtype::int8;
    case c10::ScalarType::Short: return dtype::int16;
    case c10::ScalarType::Int: return dtype::int32;
    case c10::ScalarType::Long: return dtype::int64;
    case c10::ScalarType::Byte: return dtype::uint8;
    case c10::ScalarType::Bool: return dtype::boolean;
    case c10::ScalarType::ComplexFloat: return dtype::complex64;
    case c10::ScalarType::ComplexDouble: return dtype::complex128;
    default: return std::nullopt;
  }
}

std::string first_line(const char *what) {
  std::string s = what;
  return s.substr(0, s.find('\n'));
}

}  // namespace

loaded_tensor compare_pt_read(const std::string &path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) throw system_error_from_errno("open", path, errno);
  at::Tensor tensor;
  try {
    caffe2::serialize::PyTorchStreamReader reader(path);
    const c10::IValue value = torch::jit::readArchiveAndTensors("data", "", "", c10::nullopt, c10::nullopt,
                                                                 c10::Device(c10::kCPU), reader);
    if (!value.isTensor()) throw usage_error(path + ": holds no tensor (torch.save of a " + value.tagKind() + ")");
    tensor = value.toTensor().detach().cpu().contiguous();
    if (tensor.scalar_type() == c10::ScalarType::BFloat16) tensor = tensor.to(c10::ScalarType::Float);
  } catch (const c10::Error &e) {
    throw usage_error(path + ": not a readable torch.save file: " + first_line(e.what()));
  }
  const auto type = dtype_of(tensor.scalar_type());
  if (!type) throw usage_error(path + ": dtype " + std::string(c10::toString(tensor.scalar_type())) + " cannot be compared");
  loaded_tensor t;
  t.operand.type = *type;
  t.operand.shape.assign(tensor.sizes().begin(), tensor.sizes().end());
  auto owner = std::make_shared<at::Tensor>(std::move(tensor));
  t.operand.data = std::span<const std::byte>(static_cast<const std::byte *>(owner->data_ptr()), owner->nbytes());
  t.owner = std::move(owner);
  return t;
}

}  // namespace tprobe

extern "C" __attribute__((visibility("default"))) tprobe::compare_pt_reader tprobe_compare_pt_reader() {
  return &tprobe::compare_pt_read;
}
