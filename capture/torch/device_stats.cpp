// device_stats.cpp: statistics of device (CUDA) tensors computed on the device and collected
// without a host sync per operator (device_stats.h).
#include "device_stats.h"

#include <chrono>
#include <thread>

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "capture_state.h"

namespace tprobe::torch_capture {

// Statistics of a device tensor on its device, msprobe's semantics (core/tensor_stats.h):
// [max, min, mean, norm, nan count, inf count] as float64, still on the device.
at::Tensor device_statistics(const at::Tensor &t, bool high_precision, bool zero_dim) {
  at::Tensor x = t.detach();
  if (x.is_complex()) x = x.abs();
  if (x.scalar_type() == at::kBool) {
    const at::Tensor zero = at::zeros({}, x.options().dtype(at::kDouble));
    return at::stack({x.any().to(at::kDouble), x.all().to(at::kDouble), zero, zero, zero, zero});
  }
  if (zero_dim) {
    const at::Tensor v = x.to(at::kDouble).reshape({});
    const at::Tensor nan = v.isnan().to(at::kDouble), inf = v.isinf().to(at::kDouble);
    return at::stack({v, v, v, v, nan, inf});
  }
  if (!at::isFloatingType(x.scalar_type()) || x.scalar_type() == at::kDouble || high_precision) x = x.to(at::kFloat);
  return at::stack({x.max().to(at::kDouble), x.min().to(at::kDouble), x.mean().to(at::kDouble),
                    x.norm().to(at::kDouble), x.isnan().sum().to(at::kDouble), x.isinf().sum().to(at::kDouble)});
}

bool state::capture_device(const std::string &entry, const std::string &slot, const at::Tensor &t, DLDataType dtype,
                    bool requires_grad) {
  if (t.numel() == 0) return capture_summary_null(entry, slot, t, dtype, requires_grad);
  pending_summary p;
  p.entry = entry;
  p.slot = slot;
  p.dtype = dtype;
  p.shape = t.sizes().vec();
  p.device = t.device().str();
  p.requires_grad = requires_grad;
  const bool zero_dim = t.dim() == 0;
  p.complex = t.is_complex();
  if (t.scalar_type() == at::kBool) p.kind = TPROBE_STAT_BOOL;
  else if (zero_dim && at::isIntegralType(t.scalar_type(), /*includeBool=*/false)) p.kind = TPROBE_STAT_INT;
  const at::Tensor stats = device_statistics(t, high_precision, zero_dim);
  p.host = at::empty({6}, at::TensorOptions().dtype(at::kDouble).pinned_memory(true));
  p.host.copy_(stats, /*non_blocking=*/true);
  const auto *impl = c10::impl::getDeviceGuardImpl(t.device().type());
  p.ready = std::make_unique<c10::Event>(t.device().type());
  p.ready->record(impl->getStream(t.device()));
  pending.push_back(std::move(p));
  ++device_summaries;
  collect_device(false);
  return true;
}

void state::collect_device(bool wait) {
  while (!pending.empty()) {
    pending_summary &p = pending.front();
    if (!p.ready->query()) {
      if (!wait) return;
      while (!p.ready->query()) std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    const double *v = p.host.data_ptr<double>();
    tprobe_tensor_summary s{};
    s.dtype = p.dtype;
    s.ndim = static_cast<int>(p.shape.size());
    s.shape = p.shape.data();
    s.device = p.device.c_str();
    s.requires_grad = p.requires_grad;
    auto stat = [&](double x, int kind) {
      if (kind == TPROBE_STAT_BOOL) return tprobe_stat{TPROBE_STAT_BOOL, x != 0.0, 0.0};
      if (kind == TPROBE_STAT_INT) return tprobe_stat{TPROBE_STAT_INT, static_cast<int64_t>(x), 0.0};
      return stat_real(x);
    };
    s.max = stat(v[0], p.kind);
    s.min = stat(v[1], p.kind);
    const bool boolean = p.kind == TPROBE_STAT_BOOL;
    s.mean = boolean ? stat_null() : stat(v[2], p.kind);
    s.norm = boolean || p.complex ? stat_null() : stat(v[3], p.kind);
    s.nan_count = static_cast<uint64_t>(v[4]);
    s.inf_count = static_cast<uint64_t>(v[5]);
    const std::string entry = std::move(p.entry), slot = std::move(p.slot);
    pending.pop_front();
    checked(tprobe_capture_summary(session, entry.c_str(), slot.c_str(), &s), "summary");
  }
}

}  // namespace tprobe::torch_capture
