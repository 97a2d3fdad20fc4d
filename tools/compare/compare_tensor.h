// compare_tensor.h: a tensor file loaded for comparison, and the hook type of the optional .pt reader
// (see compare.h, compare_pt.h).
#pragma once

#include <memory>
#include <string>

#include "compare_metrics.h"

namespace tprobe {

// A tensor file mapped or loaded into memory; `operand` stays valid while the object lives.
struct loaded_tensor {
  tensor_operand operand;
  std::shared_ptr<const void> owner;
};

// Reads one .pt file; throws system_error (cannot open) or usage_error (not a tensor file).
using compare_pt_reader = loaded_tensor (*)(const std::string &path);

}  // namespace tprobe
