// compare_pt.h: msprobe's PyTorch tensor files (.pt, written by torch.save) for tprobe-compare, read
// with LibTorch. Built only where LibTorch is found (tools/compare/CMakeLists.txt: if(Torch_FOUND)),
// as the module lib/libtprobe_compare_pt.so that compare_load_tensor() dlopens on the first .pt file
// (LibTorch takes ~2 s to load; a compare of .npy files never pays it). The module's one C symbol,
// tprobe_compare_pt_reader(), returns compare_pt_read.
//
// As msprobe's read_pt_data: the file's tensor is loaded onto the CPU (map_location="cpu"), made
// contiguous, and bf16 is converted to float32. Errors: system_error when the file cannot be opened,
// usage_error when it holds no tensor or a dtype the compare has no path for (the row then reads
// "Dump file: … not found or read failed."). Tensors saved from a device LibTorch does not know
// (e.g. "npu:0" with this LibTorch) cannot be read here: convert them on the CPU first.
// This file is compiled with LibTorch's flags; LibTorch must use this build's std::string ABI
// (Debian's libtorch-dev does).
#pragma once

#include <string>

#include "compare_tensor.h"

namespace tprobe {

[[nodiscard]] loaded_tensor compare_pt_read(const std::string &path);

}  // namespace tprobe

extern "C" tprobe::compare_pt_reader tprobe_compare_pt_reader();
