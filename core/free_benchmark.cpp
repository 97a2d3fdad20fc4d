// free_benchmark.cpp: see free_benchmark.h. Only the standard library, nlohmann_json and
// errors.h (header-only use): the PyTorch capture compiles this file with LibTorch's flags and
// links no core archive.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "errors.h"
#include "free_benchmark.h"
#include "json_kind.h"

namespace tprobe {

using json = nlohmann::ordered_json;

namespace {

// msprobe's lists, in its order (PytorchFreeBenchmarkConst).
const std::vector<std::string> pert_modes{"add_noise", "change_value", "improve_precision",
                                          "no_change", "bit_noise",    "to_cpu"};
const std::vector<std::string> devices{"npu", "cpu"};
const std::vector<std::string> handler_types{"check", "fix"};
const std::vector<std::string> fuzz_levels{"L1"};
const std::vector<std::string> fuzz_stages{"forward", "backward"};

std::string json_quoted(const std::string &s) { return json(s).dump(-1, ' ', false, json::error_handler_t::replace); }

std::string joined(const std::vector<std::string> &values) {
  std::string out;
  for (const auto &v : values) out += (out.empty() ? "" : ", ") + v;
  return out;
}

struct section_reader {
  const json &section;
  const std::string &where;

  [[noreturn]] void fail(const std::string &key, const std::string &problem) const {
    throw usage_error(where + ": field \"free_benchmark." + key + "\": " + problem);
  }
  const json *find(const std::string &key) const {
    auto it = section.find(key);
    return it == section.end() ? nullptr : &*it;
  }
  // msprobe reads these with json_config.get(key, default): an absent key takes the default, a
  // present null stays None and fails the check like any value outside the list.
  std::string one_of(const std::string &key, const std::string &fallback, const std::vector<std::string> &allowed) const {
    const json *v = find(key);
    if (!v) return fallback;
    if (!v->is_string()) fail(key, "expected one of " + joined(allowed) + ", got " + json_kind(*v));
    std::string value = v->get<std::string>();
    if (std::find(allowed.begin(), allowed.end(), value) == allowed.end())
      fail(key, json_quoted(value) + " is not one of " + joined(allowed));
    return value;
  }
  // ListScope.rectify_args: a list of strings; scope may also be one string. msprobe's
  // DebuggerConfig turns a falsy value (null, "", []) into [].
  std::vector<std::string> names(const std::string &key, bool string_allowed) const {
    const json *v = find(key);
    if (!v || v->is_null()) return {};
    if (string_allowed && v->is_string()) {
      std::string s = v->get<std::string>();
      if (s.empty()) return {};
      return {s};
    }
    if (!v->is_array()) fail(key, std::string("expected a list of strings") + (string_allowed ? " or a string" : "") + ", got " + json_kind(*v));
    std::vector<std::string> out;
    for (const auto &e : *v) {
      if (!e.is_string()) fail(key, "element " + e.dump(-1, ' ', false, json::error_handler_t::replace) + " is " + json_kind(e) + ", expected a string");
      out.push_back(e.get<std::string>());
    }
    return out;
  }
  // is_int: an int, not a bool; then > 0.
  int64_t positive(const std::string &key, int64_t fallback) const {
    const json *v = find(key);
    if (!v) return fallback;
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      fail(key, v->dump() + " is out of the int64 range");
    if (!v->is_number_integer()) fail(key, "expected an integer, got " + json_kind(*v));
    int64_t n = v->get<int64_t>();
    if (n <= 0) fail(key, std::to_string(n) + " is invalid: must be > 0");
    return n;
  }
  // Outside preheat msprobe never reads preheat_step and max_sample, nor checks them: an int is
  // kept (it is what the meta shows), anything else leaves the default.
  int64_t unchecked_int(const std::string &key, int64_t fallback) const {
    const json *v = find(key);
    if (!v || !v->is_number_integer()) return fallback;
    if (v->is_number_unsigned() && v->get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
      return fallback;
    return v->get<int64_t>();
  }
};

bool is(std::string_view dtype, std::string_view name) { return dtype == name; }

}  // namespace

bool free_benchmark_settings::wants(std::string_view api_name) const {
  if (!scope.empty() && std::find(scope.begin(), scope.end(), api_name) == scope.end()) return false;
  if (list.empty()) return true;
  return std::any_of(list.begin(), list.end(),
                     [&](const std::string &s) { return api_name.find(s) != std::string_view::npos; });
}

free_benchmark_settings free_benchmark_settings_from_json(const json &section, const std::string &where) {
  free_benchmark_settings s;
  if (section.is_null()) return s;
  if (!section.is_object()) throw usage_error(where + ": field \"free_benchmark\": expected an object, got " + json_kind(section));
  const section_reader r{section, where};
  s.scope = r.names("scope", true);
  s.list = r.names("list", false);
  // FreeBenchmarkCheckConfig.check_freebenchmark_config's order.
  s.pert_mode = r.one_of("pert_mode", s.pert_mode, pert_modes);
  s.fuzz_device = r.one_of("fuzz_device", s.fuzz_device, devices);
  if ((s.fuzz_device == "cpu") != (s.pert_mode == "to_cpu"))
    r.fail("fuzz_device", "\"cpu\" is required by, and only allowed with, pert_mode \"to_cpu\"");
  s.handler_type = r.one_of("handler_type", s.handler_type, handler_types);
  s.fuzz_stage = r.one_of("fuzz_stage", s.fuzz_stage, fuzz_stages);
  if (s.backward() && s.list.empty()) r.fail("list", "must not be empty when fuzz_stage is \"backward\"");
  s.fuzz_level = r.one_of("fuzz_level", s.fuzz_level, fuzz_levels);
  if (const json *v = r.find("if_preheat")) {
    if (!v->is_boolean()) r.fail("if_preheat", "expected a boolean (JSON true or false), got " + json_kind(*v));
    s.if_preheat = v->get<bool>();
  }
  if (s.fix()) {
    if (s.if_preheat) r.fail("handler_type", "\"fix\" cannot be used with if_preheat");
    if (s.fuzz_stage != "forward") r.fail("handler_type", "\"fix\" requires fuzz_stage \"forward\"");
    if (s.pert_mode != "improve_precision" && s.pert_mode != "to_cpu")
      r.fail("handler_type", "\"fix\" requires pert_mode \"improve_precision\" or \"to_cpu\"");
  }
  if (s.if_preheat) {
    s.preheat_step = r.positive("preheat_step", s.preheat_step);
    s.max_sample = r.positive("max_sample", s.max_sample);
  } else {
    s.preheat_step = r.unchecked_int("preheat_step", s.preheat_step);
    s.max_sample = r.unchecked_int("max_sample", s.max_sample);
  }
  // ListScope.rectify_args (ScopeException ArgConflict).
  if (!s.scope.empty() && !s.list.empty()) r.fail("scope", "cannot be combined with free_benchmark.list");
  return s;
}

json free_benchmark_settings_to_json(const free_benchmark_settings &s) {
  json j = json::object();
  j["scope"] = s.scope;
  j["list"] = s.list;
  j["fuzz_device"] = s.fuzz_device;
  j["pert_mode"] = s.pert_mode;
  j["handler_type"] = s.handler_type;
  j["fuzz_level"] = s.fuzz_level;
  j["fuzz_stage"] = s.fuzz_stage;
  j["if_preheat"] = s.if_preheat;
  j["preheat_step"] = s.preheat_step;
  j["max_sample"] = s.max_sample;
  return j;
}

double free_benchmark_noise(std::string_view t) {
  if (is(t, "torch.bfloat16")) return 1e-4;
  if (is(t, "torch.float16")) return 1e-6;
  if (is(t, "torch.float64")) return 1e-16;
  return 1e-8;  // fp32 and any other (FuzzThreshold.F32_THD)
}

double free_benchmark_abs_tol(std::string_view t, bool backward) {
  if (backward) return 1e-3;  // BACKWARD_OUTPUT_LOWER_BOUND
  return std::pow(free_benchmark_noise(t), 0.5);  // Python's abs_tol ** 0.5 is C pow()
}

double free_benchmark_threshold(std::string_view t, std::string_view pert_mode) {
  if (pert_mode == "no_change") return 1.0;
  if (is(t, "torch.float16")) return 1.002;
  if (is(t, "torch.bfloat16")) return 1.004;
  return 1.0002;
}

int64_t free_benchmark_chunks(uint64_t bytes, int64_t ndim) {
  // tensor_split_for_error_calculate: M is a true division, log2 is math.log(M, 2), that is
  // log(M) / log(2), truncated by int() toward zero.
  const double m = static_cast<double>(bytes) / (1024.0 * 1024.0);
  if (m == 0 || ndim == 0) return 1;
  const double exponent = std::trunc(std::log(m) / std::log(2.0)) - 4;
  if (exponent < 0) return 1;
  if (exponent >= 7) return 128;  // TENSOR_SPLIT_MAX_CHUNK
  return int64_t{1} << static_cast<int>(exponent);
}

bool free_benchmark_consistent(double ratio, bool symbol_flipping, double threshold) {
  if (symbol_flipping) return false;
  return threshold >= ratio && ratio >= 1 / threshold;
}

// ---- preheat ----

free_benchmark_preheat::free_benchmark_preheat(int64_t preheat_step, int64_t max_sample, std::string pert_mode)
    : preheat_step_(preheat_step), max_sample_(max_sample), pert_mode_(std::move(pert_mode)) {
  if (preheat_step_ <= 0 || max_sample_ <= 0)
    throw usage_error("free_benchmark preheat: preheat_step and max_sample must be > 0");
}

std::string free_benchmark_preheat::pure_name(std::string_view api_name) {
  // api_name.rsplit(".", 2)[0]: drop the last two dot-separated parts (fewer when there are none).
  size_t end = api_name.size();
  for (int i = 0; i < 2; ++i) {
    size_t dot = api_name.rfind('.', end == 0 ? 0 : end - 1);
    if (end == 0 || dot == std::string_view::npos) break;
    end = dot;
  }
  return std::string(api_name.substr(0, end));
}

void free_benchmark_preheat::enter_step(per_api &a, int64_t step) {
  // PreheatCounter.check_step: a new step clears the step's orders, sample count and records.
  if (a.last_step == step) return;
  a.last_step = step;
  a.order = 0;
  a.sampled = 0;
  for (auto &[dtype, d] : a.dtypes) d.ratios.clear();
}

int64_t free_benchmark_preheat::count_call(const std::string &pure, int64_t step) {
  per_api &a = apis_[pure];
  enter_step(a, step);
  ++a.order;
  if (step == 0) ++a.step0_calls;  // one_step_used_api
  // _is_take_a_sample counts every call in the sample set, whatever its dtype.
  if (step >= 1 && step < preheat_step_ && in_sample_set(pure, step, a.order)) ++a.sampled;
  return a.order;
}

int64_t free_benchmark_preheat::one_step_calls(const std::string &pure) const {
  auto it = apis_.find(pure);
  return it == apis_.end() ? 0 : it->second.step0_calls;
}

int64_t free_benchmark_preheat::per_step(const std::string &pure) const {
  const int64_t total = one_step_calls(pure);
  return std::min((total + preheat_step_ - 1) / preheat_step_, max_sample_);  // ceil(total / preheat_step)
}

int64_t free_benchmark_preheat::sampled_calls(const std::string &pure) const {
  auto it = apis_.find(pure);
  return it == apis_.end() ? 0 : it->second.sampled;
}

bool free_benchmark_preheat::in_sample_set(const std::string &pure, int64_t step, int64_t order) const {
  const int64_t total = one_step_calls(pure);
  if (total == 0) return false;
  const int64_t n = per_step(pure);
  for (int64_t i = 1; i <= n; ++i) {
    int64_t seq = (preheat_step_ * (i - 1) + step) % total;
    if (seq == 0) seq = total;
    if (seq == order) return true;
  }
  return false;
}

bool free_benchmark_preheat::preheating(const std::string &pure, const std::string &torch_dtype) const {
  auto it = apis_.find(pure);
  if (it == apis_.end()) return true;
  auto d = it->second.dtypes.find(torch_dtype);
  return d == it->second.dtypes.end() || d->second.preheating;
}

bool free_benchmark_preheat::sampled(const std::string &pure, const std::string &torch_dtype, int64_t step,
                                     int64_t order) const {
  if (step < 1 || step >= preheat_step_) return false;
  return in_sample_set(pure, step, order) && preheating(pure, torch_dtype);
}

double free_benchmark_preheat::threshold(const std::string &pure, const std::string &torch_dtype) const {
  auto it = apis_.find(pure);
  if (it == apis_.end()) return initial_threshold;
  auto d = it->second.dtypes.find(torch_dtype);
  return d == it->second.dtypes.end() ? initial_threshold : d->second.threshold;
}

void free_benchmark_preheat::add_sample(const std::string &pure, const std::string &torch_dtype, int64_t step,
                                        double ratio, bool cpu_consistent) {
  per_api &a = apis_[pure];
  enter_step(a, step);
  per_dtype &record = a.dtypes[torch_dtype];
  if (!record.preheating) return;  // PreheatHandler records only dtypes still preheating
  record.ratios.emplace_back(ratio, cpu_consistent);
  // _need_adjust_threshold: this step's samples of the API (all dtypes) reach per_step; then
  // _adjust_threshold moves every dtype recorded this step.
  if (a.sampled < per_step(pure)) return;
  for (auto &[dtype, d] : a.dtypes) {
    if (d.ratios.empty()) continue;
    std::vector<double> con, incon;
    for (const auto &[r, ok] : d.ratios) (ok ? con : incon).push_back(r);
    const double old = d.threshold;
    double next = old;
    if (!con.empty() && !incon.empty()) {
      const double min_incon = *std::min_element(incon.begin(), incon.end());
      if (min_incon > *std::max_element(con.begin(), con.end())) {
        next = std::min(min_incon, old);
        d.preheating = false;
      }
    } else if (!con.empty()) {
      // Consistent with the CPU but above the threshold: a missed report would be a false one, so
      // the threshold widens (API_THD_STEP 2); otherwise it narrows.
      if (*std::max_element(con.begin(), con.end()) > old)
        next = 1 + ((old - 1) * 2.0);
      else
        next = 1 + ((old - 1) / 2.0);
    } else {
      next = std::min(*std::min_element(incon.begin(), incon.end()), old);
      d.preheating = false;
    }
    const double floor = free_benchmark_threshold(dtype, pert_mode_);
    d.threshold = next > floor ? next : floor;
  }
}

}  // namespace tprobe
