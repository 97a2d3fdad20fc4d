// grad_probe.cpp: the torch.ops.tprobe.grad_probe operator, msprobe's task grad_probe on the
// PyTorch side (python/tprobe calls it before every optimizer step; core/grad_probe.h has the
// semantics, tprobe_capture.h the C API it publishes through).
//
//   grad_probe(str names, Tensor[] grads) -> int
//     names: the parameters' names, "\n"-separated, one per gradient (main_grad or grad; the
//     caller leaves out parameters whose gradient is None). Returns how many were captured.
//
// Where the numbers are computed:
//  - a CPU gradient is handed over as it is (tprobe_capture_grad): one pass in place on this
//    thread, no copy (a strided one is made contiguous first);
//  - a device (CUDA) gradient is reduced on the device with ATen: max, min and norm in its dtype,
//    at level L2 torch.bucketize + bincount against the float32 bounds and the zero count, at L1
//    and L2 the directions (grad > 0) packed eight to a byte; only those numbers and bytes are
//    copied to the host (tprobe_capture_grad_numbers). Level L0's CRC-32 needs every float32 byte,
//    so L0 copies the gradient as float32 to the host. Written and compiled here, but not run:
//    this machine has no GPU.
// Like the module hooks, the operator never throws into the training for a capture failure: the
// capture goes off and the next step() reports it (torch_capture.h, Errors). Only misuse (no open
// session) throws at once.
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/record_function.h>
#include <nlohmann/json.hpp>
#include <torch/library.h>

#include "capture_state.h"
#include "torch_values.h"
#include "tprobe_capture.h"

namespace tprobe::torch_capture {
namespace {

// What the device path needs of the session's grad_probe settings (the session meta's
// "grad_probe", validated by the capture's config parser).
struct device_settings {
  std::string level = "L1";
  std::vector<float> bounds{-1, 0, 1};  // torch.Tensor(bounds): float32
};

device_settings settings_of(tprobe_session *session) {
  device_settings d;
  const char *text = tprobe_session_config(session);
  if (!text) fail_c_api("tprobe: grad_probe: session config");
  const auto meta = nlohmann::json::parse(text);
  const auto it = meta.find("grad_probe");
  if (it == meta.end() || !it->is_object()) throw std::runtime_error("tprobe: grad_probe needs task \"grad_probe\"");
  d.level = it->value("grad_level", std::string("L1"));
  if (auto b = it->find("bounds"); b != it->end() && b->is_array()) {
    d.bounds.clear();
    for (const auto &v : *b) d.bounds.push_back(v.get<float>());
  }
  return d;
}

bool capture_host(tprobe_session *session, const std::string &name, const at::Tensor &grad, DLDataType dtype) {
  const at::Tensor t = grad.is_contiguous() ? grad : grad.contiguous();
  DLTensor dl{};
  dl.data = t.data_ptr();
  dl.device = DLDevice{kDLCPU, 0};
  dl.ndim = static_cast<int>(t.dim());
  dl.dtype = dtype;
  dl.shape = const_cast<int64_t *>(t.sizes().data());
  dl.strides = const_cast<int64_t *>(t.strides().data());
  return checked(tprobe_capture_grad(session, name.c_str(), &dl), "grad_probe") == TPROBE_OK;
}

bool capture_device(tprobe_session *session, const device_settings &set, const std::string &name,
                    const at::Tensor &grad, DLDataType dtype) {
  const at::Tensor flat = grad.reshape({-1});
  const int64_t numel = flat.numel();
  const bool l0 = set.level == "L0", l2 = set.level == "L2";
  tprobe_grad_numbers n{};
  n.dtype = dtype;
  n.ndim = static_cast<int>(grad.dim());
  n.shape = grad.sizes().data();
  const std::string device = grad.device().str();
  n.device = device.c_str();
  n.max = n.min = n.norm = std::numeric_limits<double>::quiet_NaN();
  if (numel > 0) {
    // torch.max/min/norm in the gradient's dtype, then msprobe's .float(): one copy of three numbers.
    const at::Tensor three =
        at::stack({flat.max().to(at::kFloat), flat.min().to(at::kFloat), at::norm(flat).to(at::kFloat)}).cpu();
    const float *v = three.data_ptr<float>();
    n.max = v[0];
    n.min = v[1];
    n.norm = v[2];
  }
  // bf16 and fp16 are compared as float32 (msprobe upcasts bf16; torch promotes fp16 against the
  // float32 bounds); float64 stays float64.
  const at::Tensor wide = flat.scalar_type() == at::kDouble ? flat : flat.to(at::kFloat);
  std::vector<uint64_t> buckets;
  at::Tensor counts_host;
  if (l2) {
    const at::Tensor bounds = at::tensor(set.bounds, at::TensorOptions().dtype(at::kFloat)).to(flat.device());
    const int64_t n_buckets = static_cast<int64_t>(set.bounds.size()) + 1;
    at::Tensor counts = numel ? at::bincount(at::bucketize(wide, bounds), {}, n_buckets)
                              : at::zeros({n_buckets}, flat.options().dtype(at::kLong));
    counts = at::cat({counts, (wide == 0).sum().reshape({1})});
    counts_host = counts.to(at::kLong).cpu();
    const int64_t *c = counts_host.data_ptr<int64_t>();
    for (int64_t i = 0; i < n_buckets; ++i) buckets.push_back(static_cast<uint64_t>(c[i]));
    n.buckets = buckets.data();
    n.bucket_count = buckets.size();
    n.zeros = static_cast<uint64_t>(c[n_buckets]);
  }
  at::Tensor bits_host;
  if (!l0) {
    // Bit i % 8 of byte i / 8 is element i > 0: pad to whole bytes, weight each bit, sum a row.
    const int64_t pad = (8 - numel % 8) % 8;
    const at::Tensor positive = at::constant_pad_nd((flat > 0).to(at::kByte), {0, pad}).reshape({-1, 8});
    const at::Tensor weights =
        at::tensor(std::vector<uint8_t>{1, 2, 4, 8, 16, 32, 64, 128}, at::TensorOptions().dtype(at::kByte))
            .to(flat.device());
    bits_host = (positive * weights).sum(1, false, at::kByte).cpu().contiguous();
    n.sign_bits = bits_host.data_ptr<uint8_t>();
  }
  at::Tensor float32_host;
  if (l0) {
    float32_host = flat.to(at::kFloat).cpu().contiguous();
    n.float32_data = float32_host.data_ptr<float>();
  }
  return checked(tprobe_capture_grad_numbers(session, name.c_str(), &n), "grad_probe") == TPROBE_OK;
}

int64_t grad_probe(const std::string &names_text, at::TensorList grads) {
  state &s = the_state();
  std::lock_guard lock(s.mutex);
  if (s.forked) throw std::runtime_error("tprobe: this process is a fork of the one that opened the capture");
  if (!s.session) throw std::runtime_error("tprobe: no capture session is open");
  std::vector<std::string> names;
  for (size_t start = 0; start <= names_text.size();) {
    const size_t nl = names_text.find('\n', start);
    names.push_back(names_text.substr(start, nl == std::string::npos ? std::string::npos : nl - start));
    if (nl == std::string::npos) break;
    start = nl + 1;
  }
  if (grads.empty()) return 0;
  if (names.size() != grads.size())
    throw std::runtime_error("tprobe: grad_probe: " + std::to_string(names.size()) + " names for " +
                             std::to_string(grads.size()) + " gradients");
  if (!s.failure.empty()) return 0;
  int64_t captured = 0;
  try {
    // Our reductions are not the model's operators.
    at::DisableRecordFunctionGuard no_record;
    at::NoGradGuard no_grad;
    std::optional<device_settings> set;
    for (size_t i = 0; i < grads.size(); ++i) {
      const int rc = tprobe_grad_query(s.session, names[i].c_str());
      if (rc == TPROBE_ERROR) fail_c_api("tprobe: grad_probe");
      if (rc == TPROBE_SKIPPED || !grads[i].defined()) continue;
      at::Tensor g = grads[i].detach();
      if (g.is_sparse()) g = g.to_dense();
      DLDataType dtype{};
      if (!g.is_floating_point() || !dl_dtype_of(g.scalar_type(), dtype))
        throw std::runtime_error("tprobe: grad_probe: the gradient of " + names[i] + " is " +
                                 python_dtype_name(g.scalar_type()) + ", not a float type tprobe reads");
      if (g.is_cpu()) {
        captured += capture_host(s.session, names[i], g, dtype);
      } else {
        if (!set) set = settings_of(s.session);
        captured += capture_device(s.session, *set, names[i], g, dtype);
      }
    }
  } catch (const std::exception &e) {
    s.fail(e.what());
  }
  return captured;
}

}  // namespace
}  // namespace tprobe::torch_capture

// A fragment of torch_ops.cpp's library: the grad_probe task lives apart from the dump's operators.
TORCH_LIBRARY_FRAGMENT(tprobe, m) {
  m.def("grad_probe(str names, Tensor[] grads) -> int", &tprobe::torch_capture::grad_probe);
}
