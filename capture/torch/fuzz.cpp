// fuzz.cpp: see fuzz.h.
#include "fuzz.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <cmath>
#include <limits>
#include <mutex>

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

}  // namespace

namespace {

// ---- CPU: one pass instead of ATen's eight ----
// On CPU tensors the comparisons run as one loop over both outputs, with each step in the
// tensor's own dtype as ATen's element-wise kernels compute it (c10::Half and c10::BFloat16
// round after every operation, as their tensors do), so the numbers are ATen's: the product
// o·p, |o| and |p| clamped below at tol (NaN stays NaN), their quotient, NaN → 1 and ±inf → the
// dtype's largest (nan_to_num), and the running minimum and maximum. Only the passes and the
// temporaries go: on resnet18 the comparisons were most of a re-run's cost.

struct ratio_numbers {
  double min_product = std::numeric_limits<double>::infinity();
  bool product_nan = false;  // torch.min propagates NaN: then no flip is seen
  double min_ratio = std::numeric_limits<double>::infinity();
  double max_ratio = -std::numeric_limits<double>::infinity();
  int64_t count = 0;
  void merge(const ratio_numbers &o) {
    min_product = std::min(min_product, o.min_product);
    product_nan = product_nan || o.product_nan;
    min_ratio = std::min(min_ratio, o.min_ratio);
    max_ratio = std::max(max_ratio, o.max_ratio);
    count += o.count;
  }
};

template <class T>
T clamp_below(T x, T tol) {
  const double d = static_cast<double>(x);
  return std::isnan(d) ? x : (d < static_cast<double>(tol) ? tol : x);
}

template <class T>
ratio_numbers ratio_pass(const T *o, const T *p, int64_t n, double tol_in) {
  const T tol = static_cast<T>(tol_in);
  const double largest = static_cast<double>(std::numeric_limits<T>::max());
  ratio_numbers total;
  std::mutex merge;
  at::parallel_for(0, n, 1 << 16, [&](int64_t begin, int64_t end) {
    ratio_numbers part;
    for (int64_t i = begin; i < end; ++i) {
      const T product = o[i] * p[i];
      const double pd = static_cast<double>(product);
      if (std::isnan(pd)) part.product_nan = true;
      else part.min_product = std::min(part.min_product, pd);
      const T ao = static_cast<T>(std::fabs(static_cast<double>(o[i])));
      const T ap = static_cast<T>(std::fabs(static_cast<double>(p[i])));
      double r = static_cast<double>(static_cast<T>(clamp_below(ao, tol) / clamp_below(ap, tol)));
      if (std::isnan(r)) r = 1.0;
      else if (std::isinf(r)) r = r > 0 ? largest : -largest;
      part.min_ratio = std::min(part.min_ratio, r);
      part.max_ratio = std::max(part.max_ratio, r);
    }
    part.count = end - begin;
    std::lock_guard lock(merge);
    total.merge(part);
  });
  return total;
}

// float and double: the same numbers, written so that the compiler vectorises the loop
// (-fopenmp-simd): no branch, NaN tested as x != x, the minimum and maximum as comparisons that
// leave NaN out exactly as the generic loop does.
template <class T>
ratio_numbers ratio_pass_simd(const T *o, const T *p, int64_t n, double tol_in) {
  const T tol = static_cast<T>(tol_in), largest = std::numeric_limits<T>::max();
  const T inf = std::numeric_limits<T>::infinity();
  ratio_numbers total;
  std::mutex merge;
  at::parallel_for(0, n, 1 << 16, [&](int64_t begin, int64_t end) {
    T min_product = inf, min_ratio = inf, max_ratio = -inf;
    int product_nan = 0;
#pragma omp simd reduction(min : min_product, min_ratio) reduction(max : max_ratio) reduction(| : product_nan)
    for (int64_t i = begin; i < end; ++i) {
      const T product = o[i] * p[i];
      product_nan |= product != product;
      min_product = product < min_product ? product : min_product;
      const T ao = std::fabs(o[i]), ap = std::fabs(p[i]);
      const T co = ao < tol ? tol : ao, cp = ap < tol ? tol : ap;  // NaN < tol is false: NaN stays
      T r = co / cp;
      r = r != r ? T(1) : r;
      r = r > largest ? largest : r;  // r >= 0: only +inf to clip
      min_ratio = r < min_ratio ? r : min_ratio;
      max_ratio = r > max_ratio ? r : max_ratio;
    }
    ratio_numbers part;
    part.min_product = min_product;
    part.product_nan = product_nan != 0;
    part.min_ratio = min_ratio;
    part.max_ratio = max_ratio;
    part.count = end - begin;
    std::lock_guard lock(merge);
    total.merge(part);
  });
  return total;
}

bool fused(const at::Tensor &t) {
  const auto s = t.scalar_type();
  return t.device().is_cpu() && (s == at::kFloat || s == at::kDouble || s == at::kHalf || s == at::kBFloat16);
}

}  // namespace

fuzz_ratio fuzz_max_ratio(const at::Tensor &origin_in, const at::Tensor &perturbed, bool backward) {
  at::NoGradGuard no_grad;
  const std::string dtype = fuzz_dtype_name(perturbed.scalar_type());
  const at::Tensor origin = origin_in.detach().to(perturbed.scalar_type()).to(perturbed.device());
  const double tol = free_benchmark_abs_tol(dtype, backward);
  // As msprobe compares: the product's minimum against -(tol**2), a Python float, in the dtype.
  const double flip = at::scalar_tensor(-(tol * tol), perturbed.scalar_type()).item<double>();
  fuzz_ratio out;
  if (origin.numel() == 0) return out;
  double min_ratio = 1, max_ratio = 1;
  if (fused(perturbed)) {
    const at::Tensor o = origin.contiguous(), p = perturbed.detach().contiguous();
    ratio_numbers n;
    if (p.scalar_type() == at::kFloat)
      n = ratio_pass_simd<float>(o.data_ptr<float>(), p.data_ptr<float>(), p.numel(), tol);
    else if (p.scalar_type() == at::kDouble)
      n = ratio_pass_simd<double>(o.data_ptr<double>(), p.data_ptr<double>(), p.numel(), tol);
    else
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, p.scalar_type(), "fuzz_max_ratio", [&] {
        n = ratio_pass<scalar_t>(o.data_ptr<scalar_t>(), p.data_ptr<scalar_t>(), p.numel(), tol);
      });
    if (!n.product_nan && n.min_product < flip) return {true, 1.0};
    min_ratio = n.min_ratio;
    max_ratio = n.max_ratio;
  } else {
    // The device: ATen on the tensors' own device, split into free_benchmark_chunks() parts only
    // to bound the temporaries, every part's three numbers read back at once.
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
    const at::Tensor host = at::stack(numbers).cpu();  // the one read
    const auto a = host.accessor<double, 2>();
    for (int64_t i = 0; i < host.size(0); ++i)
      if (a[i][0] < flip) return {true, 1.0};
    min_ratio = std::numeric_limits<double>::infinity();
    max_ratio = -std::numeric_limits<double>::infinity();
    for (int64_t i = 0; i < host.size(0); ++i) {
      min_ratio = std::min(min_ratio, a[i][1]);
      max_ratio = std::max(max_ratio, a[i][2]);
    }
  }
  const double reciprocal = min_ratio == 0 ? std::numeric_limits<double>::infinity() : 1.0 / min_ratio;
  out.ratio = std::max({1.0, max_ratio, reciprocal});
  return out;
}

bool fuzz_single_compare(const at::Tensor &actual_in, const at::Tensor &golden_in) {
  at::NoGradGuard no_grad;
  double rtol = std::ldexp(1.0, -14), atol = std::ldexp(1.0, -14);
  const double small = 1.0, eb_max = 1e-4;
  if (actual_in.scalar_type() == at::kHalf) rtol = atol = std::ldexp(1.0, -11);
  if (actual_in.scalar_type() == at::kBFloat16) rtol = atol = std::ldexp(1.0, -8);
  if (golden_in.numel() == 0) return true;
  // In float64, as msprobe: the actual's non-finite values count as 1 (msprobe writes 1 into the
  // training's own tensor; a value here). abs_err is the largest |a-g| where |a| < small, rel_err
  // the largest |a-g|/|g| elsewhere, eb the mean of (a-g)/(|g| >= small ? |g| : 1). A NaN among
  // them passes its test, as Python's `NaN > threshold` is false.
  // Read in their own dtypes (no float64 copies), on the CPU.
  const at::Tensor ac = actual_in.detach().cpu().contiguous();
  const at::Tensor gc = golden_in.detach().to(ac.device()).contiguous();
  const int64_t n = gc.numel();
  if (ac.numel() != n) return false;
  double abs_err = 0, rel_err = 0, eb_sum = 0;
  bool abs_nan = false, rel_nan = false, golden_bad = false;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, ac.scalar_type(), "fuzz_single_compare", [&] {
    using actual_t = scalar_t;
    const actual_t *a = ac.data_ptr<actual_t>();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, gc.scalar_type(), "fuzz_single_compare_golden", [&] {
      const scalar_t *g = gc.data_ptr<scalar_t>();
      for (int64_t i = 0; i < n; ++i) {
        const double gi = static_cast<double>(g[i]), raw = static_cast<double>(a[i]);
        if (!std::isfinite(gi)) golden_bad = true;
        const double ai = std::isfinite(raw) ? raw : 1.0;
        const double d = ai - gi, ad = std::fabs(d), ag = std::fabs(gi);
        if (std::fabs(ai) < small) {
          if (std::isnan(ad)) abs_nan = true;
          else abs_err = std::max(abs_err, ad);
        } else {
          const double rel = ad / ag;
          if (std::isnan(rel)) rel_nan = true;
          else rel_err = std::max(rel_err, rel);
        }
        eb_sum += d / (ag >= small ? ag : 1.0);
      }
    });
  });
  if (golden_bad) return true;  // msprobe: a golden with inf or NaN is not compared
  const double eb = eb_sum / static_cast<double>(n);
  if (!abs_nan && abs_err > atol) return false;
  if (!rel_nan && rel_err > rtol) return false;
  return !(eb > eb_max);
}

namespace {

// Whether max(|x|) >= floor, as msprobe's precondition reads it (a NaN anywhere makes the
// maximum NaN, and the test false): a loop on the CPU.
bool reaches(const at::Tensor &x, double floor) {
  if (!fused(x)) return x.abs().max().item<double>() >= floor;
  const at::Tensor c = x.contiguous();
  bool any = false, nan = false;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c.scalar_type(), "fuzz_reaches", [&] {
    const scalar_t *v = c.data_ptr<scalar_t>();
    for (int64_t i = 0, n = c.numel(); i < n && !nan; ++i) {
      const double a = std::fabs(static_cast<double>(v[i]));
      nan = std::isnan(a);
      any = any || a >= floor;
    }
  });
  return any && !nan;
}

// msprobe's pre_check and _check_details of add_noise and bit_noise.
bool noise_applies(const at::Tensor &x) {
  if (!x.is_floating_point() || x.numel() == 0) return false;
  const auto t = x.scalar_type();
  if (t != at::kHalf && t != at::kBFloat16 && t != at::kFloat && t != at::kDouble) return false;
  return reaches(x, free_benchmark_noise(fuzz_dtype_name(t)));
}

}  // namespace

std::optional<at::Tensor> fuzz_add_noise(const at::Tensor &x) {
  at::NoGradGuard no_grad;
  if (!noise_applies(x)) return std::nullopt;
  const double v = free_benchmark_noise(fuzz_dtype_name(x.scalar_type()));
  const at::Tensor d = x.detach();
  if (fused(d)) {
    const at::Tensor c = d.contiguous();
    at::Tensor out = at::empty_like(c);
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, c.scalar_type(), "fuzz_add_noise", [&] {
      const scalar_t noise = static_cast<scalar_t>(v), above = static_cast<scalar_t>(std::sqrt(v));
      const scalar_t *in = c.data_ptr<scalar_t>();
      scalar_t *o = out.data_ptr<scalar_t>();
      at::parallel_for(0, c.numel(), 1 << 16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          o[i] = std::fabs(static_cast<double>(in[i])) > static_cast<double>(above) ? static_cast<scalar_t>(noise + in[i])
                                                                                      : in[i];
      });
    });
    return out;
  }
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
  if (fused(d)) {
    at::Tensor out = d.clone();
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, d.scalar_type(), "fuzz_bit_noise", [&] {
      const double normal = static_cast<double>(static_cast<scalar_t>(smallest_normal));
      const scalar_t *in = d.data_ptr<scalar_t>();
      auto *o = reinterpret_cast<unsigned char *>(out.data_ptr<scalar_t>());
      at::parallel_for(0, d.numel(), 1 << 16, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          if (std::fabs(static_cast<double>(in[i])) > normal) o[i * sizeof(scalar_t)] ^= 1;  // little-endian: lowest bit
      });
    });
    return out;
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

namespace {

// The argument the re-run gets for one the operator writes: a copy, unless the perturbation has
// made a new tensor already (a raised one, a noisy one).
c10::IValue copy_unless_new(const c10::IValue &before, const c10::IValue &now) {
  if (now.isTensor() && before.isTensor()) {
    const at::Tensor &t = now.toTensor();
    return t.defined() && t.is_same(before.toTensor()) ? c10::IValue(t.detach().clone()) : now;
  }
  if (now.isTensorList() && before.isTensorList()) {
    const auto b = before.toTensorList(), n = now.toTensorList();
    c10::List<at::Tensor> out;
    for (size_t i = 0; i < n.size(); ++i) {
      const at::Tensor t = n.get(i);
      out.push_back(t.defined() && i < b.size() && t.is_same(b.get(i)) ? t.detach().clone() : t);
    }
    return out;
  }
  return now;
}

bool has_half(const c10::IValue &v) {
  bool found = false;
  map_tensors(v, [&](const at::Tensor &t) {
    found = found || (t.is_floating_point() && is_half(t));
    return t;
  });
  return found;
}

}  // namespace

bool fuzz_may_rerun(const std::vector<c10::IValue> &args, int valid, const std::string &mode) {
  if (valid < 0) return false;
  if (mode == "improve_precision") return std::any_of(args.begin(), args.end(), has_half);
  return true;
}

fuzz_arguments fuzz_perturb(const std::vector<c10::IValue> &args, int valid, const std::string &mode,
                            const std::vector<size_t> &written) {
  fuzz_arguments out;
  out.args = args;
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
  } else if (mode == "no_change") {
    out.perturbed = true;
  } else if (valid >= 0 && static_cast<size_t>(valid) < out.args.size()) {
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
  }
  if (!out.perturbed) return out;  // no re-run: nothing copied
  for (size_t i : written)
    if (i < out.args.size()) out.args[i] = copy_unless_new(args[i], out.args[i]);
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
