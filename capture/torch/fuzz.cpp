// fuzz.cpp: see fuzz.h.
#include "fuzz.h"

#include <ATen/record_function.h>

#include <cmath>
#include <limits>

#include "free_benchmark.h"

namespace tprobe::torch_capture {

std::string fuzz_dtype_name(at::ScalarType t) {
  switch (t) {
    case at::kHalf: return "torch.float16";
    case at::kBFloat16: return "torch.bfloat16";
    case at::kFloat: return "torch.float32";
    case at::kDouble: return "torch.float64";
    case at::kComplexHalf: return "torch.complex32";
    case at::kComplexFloat: return "torch.complex64";
    case at::kComplexDouble: return "torch.complex128";
    case at::kBool: return "torch.bool";
    case at::kByte: return "torch.uint8";
    case at::kChar: return "torch.int8";
    case at::kShort: return "torch.int16";
    case at::kInt: return "torch.int32";
    case at::kLong: return "torch.int64";
    default: return std::string("torch.") + c10::toString(t);
  }
}

namespace {

bool is_half(const at::Tensor &t) { return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16; }

// A copy with the same values, for an argument the operator writes.
c10::IValue copy_of(const c10::IValue &v) {
  if (v.isTensor()) {
    const at::Tensor &t = v.toTensor();
    return t.defined() ? c10::IValue(t.detach().clone()) : v;
  }
  if (v.isTensorList()) {
    auto list = v.toTensorList();
    c10::List<at::Tensor> out;
    for (const at::Tensor &t : list) out.push_back(t.defined() ? t.detach().clone() : t);
    return out;
  }
  return v;
}

// Applies `f` to every tensor of v (lists of tensors and of optional tensors included).
template <class F>
c10::IValue map_tensors(const c10::IValue &v, F &&f) {
  if (v.isTensor()) return v.toTensor().defined() ? c10::IValue(f(v.toTensor())) : v;
  if (v.isTensorList()) {
    c10::List<at::Tensor> out;
    for (const at::Tensor &t : v.toTensorList()) out.push_back(t.defined() ? f(t) : t);
    return out;
  }
  if (v.isOptionalTensorList()) {
    c10::List<c10::optional<at::Tensor>> out;
    for (const c10::optional<at::Tensor> &t : v.toOptionalTensorList())
      out.push_back(t && t->defined() ? c10::optional<at::Tensor>(f(*t)) : t);
    return out;
  }
  return v;
}

// msprobe's pre_check and _check_details of add_noise and bit_noise.
bool noise_applies(const at::Tensor &x) {
  if (!x.is_floating_point() || x.numel() == 0) return false;
  const auto t = x.scalar_type();
  if (t != at::kHalf && t != at::kBFloat16 && t != at::kFloat && t != at::kDouble) return false;
  const double tol = free_benchmark_noise(fuzz_dtype_name(t));
  return x.abs().max().item<double>() >= tol;
}

}  // namespace

fuzz_ratio fuzz_max_ratio(const at::Tensor &origin_in, const at::Tensor &perturbed, bool backward) {
  at::NoGradGuard no_grad;
  const std::string dtype = fuzz_dtype_name(perturbed.scalar_type());
  const at::Tensor origin = origin_in.detach().to(perturbed.scalar_type()).to(perturbed.device());
  const double tol = free_benchmark_abs_tol(dtype, backward);
  const int64_t chunks = free_benchmark_chunks(static_cast<uint64_t>(origin.numel()) * origin.element_size(),
                                               origin.dim());
  const auto o_parts = origin.reshape({-1}).tensor_split(chunks);
  const auto p_parts = perturbed.detach().reshape({-1}).tensor_split(chunks);
  std::vector<at::Tensor> numbers;  // per part: min(o·p), min r, max r
  for (size_t i = 0; i < o_parts.size(); ++i) {
    if (o_parts[i].numel() == 0) break;
    const at::Tensor r = at::nan_to_num(o_parts[i].abs().clamp_min(tol) / p_parts[i].abs().clamp_min(tol), 1.0);
    const auto [lo, hi] = at::aminmax(r);
    numbers.push_back(at::stack({(o_parts[i] * p_parts[i]).min(), lo, hi}).to(at::kDouble));
  }
  fuzz_ratio out;
  if (numbers.empty()) return out;
  const at::Tensor host = at::stack(numbers).cpu();  // the one read
  const auto a = host.accessor<double, 2>();
  // As msprobe compares: the product's minimum against -(tol**2), a Python float, in the dtype.
  const double flip = static_cast<double>(at::scalar_tensor(-(tol * tol), perturbed.scalar_type()).item<double>());
  for (int64_t i = 0; i < host.size(0); ++i)
    if (a[i][0] < flip) return {true, 1.0};
  double ratio = 1.0;
  for (int64_t i = 0; i < host.size(0); ++i) {
    const double reciprocal = a[i][1] == 0 ? std::numeric_limits<double>::infinity() : 1.0 / a[i][1];
    ratio = std::max({ratio, a[i][2], reciprocal});
  }
  out.ratio = ratio;
  return out;
}

bool fuzz_single_compare(const at::Tensor &actual_in, const at::Tensor &golden_in) {
  at::NoGradGuard no_grad;
  double rtol = std::ldexp(1.0, -14), small = 1.0, atol = std::ldexp(1.0, -14), eb_max = 1e-4;
  if (actual_in.scalar_type() == at::kHalf) rtol = atol = std::ldexp(1.0, -11);
  if (actual_in.scalar_type() == at::kBFloat16) rtol = atol = std::ldexp(1.0, -8);
  if (golden_in.numel() == 0 || !golden_in.isfinite().all().item<bool>()) return true;
  // msprobe writes 1 over the training's own non-finite values; a copy here.
  at::Tensor actual = actual_in.detach().to(at::kDouble);
  actual = at::where(actual.isfinite(), actual, at::ones_like(actual));
  const at::Tensor golden = golden_in.detach().to(at::kDouble).to(actual.device());
  const at::Tensor diff = actual - golden;
  const at::Tensor diff_abs = diff.abs();
  const at::Tensor zero = at::zeros({}, actual.options());
  const at::Tensor abs_err = at::where(actual.abs() < small, diff_abs, zero).max();
  const at::Tensor rel_err = at::where(actual.abs() >= small, diff_abs / golden.abs(), zero).max();
  const at::Tensor eb = (diff / at::where(golden.abs() >= small, golden.abs(), at::ones_like(golden))).mean();
  const at::Tensor host = at::stack({abs_err, rel_err, eb}).cpu();
  const auto a = host.accessor<double, 1>();
  // NaN (0/0 where both are 0 above `small` cannot happen; a NaN here fails every test, as in Python).
  return a[0] <= atol && a[1] <= rtol && a[2] <= eb_max;
}

std::optional<at::Tensor> fuzz_add_noise(const at::Tensor &x) {
  at::NoGradGuard no_grad;
  if (!noise_applies(x)) return std::nullopt;
  const double v = free_benchmark_noise(fuzz_dtype_name(x.scalar_type()));
  const at::Tensor d = x.detach();
  const at::Tensor noise = at::full(d.sizes(), v, d.options());
  return at::where(d.abs() > std::sqrt(v), noise + d, d).to(d.scalar_type());
}

std::optional<at::Tensor> fuzz_bit_noise(const at::Tensor &x) {
  at::NoGradGuard no_grad;
  if (!noise_applies(x)) return std::nullopt;
  const at::Tensor d = x.detach().contiguous();
  at::ScalarType bits = at::kLong;
  double smallest_normal = std::numeric_limits<double>::min();
  switch (d.scalar_type()) {
    case at::kHalf: bits = at::kShort; smallest_normal = 6.103515625e-05; break;
    case at::kBFloat16: bits = at::kShort; smallest_normal = 1.1754943508222875e-38; break;
    case at::kFloat: bits = at::kInt; smallest_normal = std::numeric_limits<float>::min(); break;
    default: break;
  }
  const at::Tensor as_int = d.view(bits);
  const at::Tensor flipped = at::bitwise_xor(as_int, at::ones_like(as_int));
  return at::where(d.abs() > smallest_normal, flipped, as_int).view(d.scalar_type());
}

std::optional<at::Tensor> fuzz_change_value(const at::Tensor &x) {
  at::NoGradGuard no_grad;
  if (!x.is_floating_point() || x.dim() == 0) return std::nullopt;
  if (x.dim() == 1 && x.size(0) < 2) return std::nullopt;
  if (x.dim() > 1 && (x.size(1) == 0 || (x.size(1) < 2 && x.size(0) < 2))) return std::nullopt;
  at::Tensor out = x.detach().clone();
  if (x.dim() == 1) {
    const at::Tensor first = out[0].clone();
    out[0].copy_(out[-1]);
    out[-1].copy_(first);
  } else {
    const at::Tensor first = out[0][0].clone();
    out[0][0].copy_(out[-1][-1]);
    out[-1][-1].copy_(first);
  }
  return out;
}

int fuzz_valid_input(const std::vector<c10::IValue> &args, const std::vector<bool> &kwarg_only) {
  for (size_t i = 0; i < args.size(); ++i) {
    if (i < kwarg_only.size() && kwarg_only[i]) continue;
    const c10::IValue &a = args[i];
    if (a.isTensor()) {
      const at::Tensor &t = a.toTensor();
      if (t.defined() && !t.is_meta() && t.is_floating_point()) return static_cast<int>(i);
    } else if (a.isList() || a.isTuple() || a.isGenericDict()) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

fuzz_arguments fuzz_perturb(const std::vector<c10::IValue> &args, int valid, const std::string &mode,
                            const std::vector<size_t> &written) {
  fuzz_arguments out;
  out.args = args;
  for (size_t i : written)
    if (i < out.args.size()) out.args[i] = copy_of(out.args[i]);
  at::NoGradGuard no_grad;
  if (mode == "improve_precision" || mode == "to_cpu") {
    const bool cpu = mode == "to_cpu";
    for (auto &a : out.args)
      a = map_tensors(a, [&](const at::Tensor &t) {
        at::Tensor r = t;
        if (t.is_floating_point() && is_half(t)) {
          r = t.detach().to(at::kFloat);
          out.perturbed = true;
        }
        if (cpu) {
          r = r.detach().cpu();
          out.perturbed = true;
        }
        return r;
      });
    return out;
  }
  if (mode == "no_change") {
    out.perturbed = true;
    return out;
  }
  if (valid < 0 || static_cast<size_t>(valid) >= out.args.size()) return out;
  // Only the first tensor inside the valid argument, as msprobe's is_added flag has it.
  bool tried = false;
  out.args[valid] = map_tensors(out.args[valid], [&](const at::Tensor &t) {
    if (tried) return t;
    if (!t.is_floating_point()) return t;  // pre_check refuses it and looks further
    tried = true;
    std::optional<at::Tensor> p = mode == "add_noise"   ? fuzz_add_noise(t)
                                  : mode == "bit_noise" ? fuzz_bit_noise(t)
                                                        : fuzz_change_value(t);
    if (!p) return t;
    out.perturbed = true;
    return *p;
  });
  return out;
}

std::vector<c10::IValue> fuzz_rerun(const c10::OperatorHandle &op, std::vector<c10::IValue> args) {
  at::DisableRecordFunctionGuard no_record;
  torch::jit::Stack stack(std::make_move_iterator(args.begin()), std::make_move_iterator(args.end()));
  op.callBoxed(&stack);
  return std::vector<c10::IValue>(stack.begin(), stack.end());
}

std::vector<std::pair<int64_t, at::Tensor>> fuzz_output_tensors(const std::vector<c10::IValue> &outputs) {
  std::vector<std::pair<int64_t, at::Tensor>> out;
  if (outputs.size() == 1 && outputs[0].isTensor()) {
    out.emplace_back(-1, outputs[0].toTensor());
    return out;
  }
  if (outputs.size() == 1 && outputs[0].isTensorList()) {
    const auto list = outputs[0].toTensorList();
    for (size_t j = 0; j < list.size(); ++j) out.emplace_back(static_cast<int64_t>(j), list.get(j));
    return out;
  }
  for (size_t i = 0; i < outputs.size(); ++i)
    if (outputs[i].isTensor()) out.emplace_back(static_cast<int64_t>(i), outputs[i].toTensor());
  return out;
}

std::vector<fuzz_finding> fuzz_compare(const std::vector<std::pair<int64_t, at::Tensor>> &original,
                                       const std::vector<std::pair<int64_t, at::Tensor>> &perturbed,
                                       const std::string &mode, bool backward, double threshold, double *largest) {
  std::vector<fuzz_finding> findings;
  if (largest) *largest = 1.0;
  const bool any_float = std::any_of(perturbed.begin(), perturbed.end(), [](const auto &p) {
    return p.second.defined() && p.second.is_floating_point();
  });
  if (!any_float) return findings;
  for (size_t i = 0; i < original.size() && i < perturbed.size(); ++i) {
    const at::Tensor &o = original[i].second;
    const at::Tensor &p = perturbed[i].second;
    if (!o.defined() || !p.defined() || !p.is_floating_point() || !o.is_floating_point()) continue;
    if (o.sizes() != p.sizes()) continue;
    fuzz_finding f;
    f.index = original[i].first;
    f.dtype = o.scalar_type();
    f.shape.assign(o.sizes().begin(), o.sizes().end());
    if (mode == "to_cpu") {
      if (fuzz_single_compare(o, p)) continue;
      f.no_ratio = true;
    } else {
      const fuzz_ratio r = fuzz_max_ratio(o, p, backward);
      if (largest && !r.symbol_flipping) *largest = std::max(*largest, r.ratio);
      if (free_benchmark_consistent(r.ratio, r.symbol_flipping, threshold)) continue;
      f.symbol_flipping = r.symbol_flipping;
      f.ratio = r.ratio;
    }
    findings.push_back(std::move(f));
  }
  return findings;
}

bool fuzz_fix_outputs(const std::vector<std::pair<int64_t, at::Tensor>> &original,
                      const std::vector<std::pair<int64_t, at::Tensor>> &perturbed) {
  if (original.size() != perturbed.size()) return false;
  at::NoGradGuard no_grad;
  for (size_t i = 0; i < original.size(); ++i) {
    const at::Tensor &o = original[i].second;
    const at::Tensor &p = perturbed[i].second;
    if (!o.defined() || !p.defined() || o.sizes() != p.sizes()) return false;
  }
  for (size_t i = 0; i < original.size(); ++i) {
    at::Tensor target = original[i].second.variable_data();  // `.data`: no version bump seen by autograd
    target.copy_(perturbed[i].second.to(target.scalar_type()).to(target.device()));
  }
  return true;
}

}  // namespace tprobe::torch_capture
