// device_stats.h: statistics of device tensors, on the device. A CUDA tensor's statistics are ATen
// reductions on its current stream, copied into pinned memory behind an event; only the numbers
// travel, collected when the event completes (state::collect_device), in capture order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <c10/core/Event.h>

#include "tprobe_capture.h"

namespace tprobe::torch_capture {

inline tprobe_stat stat_null() { return tprobe_stat{TPROBE_STAT_NULL, 0, 0.0}; }
inline tprobe_stat stat_real(double v) { return tprobe_stat{TPROBE_STAT_REAL, 0, v}; }

// Statistics of a device tensor on its device, msprobe's semantics (core/tensor_stats.h):
// [max, min, mean, norm, nan count, inf count] as float64, still on the device.
at::Tensor device_statistics(const at::Tensor &t, bool high_precision, bool zero_dim);

// Device statistics on their way to the host.
struct pending_summary {
  std::string entry, slot;
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::string device;
  bool requires_grad = false;
  int kind = TPROBE_STAT_REAL;  // of max/min (and mean/norm for 0-d integers)
  bool complex = false;
  at::Tensor host;  // 6 float64 in pinned memory
  std::unique_ptr<c10::Event> ready;
};

}  // namespace tprobe::torch_capture
