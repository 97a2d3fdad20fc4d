// monitor.cpp: the monitor config, tags, rows and anomaly rules (monitor.h); the csv text is in
// monitor_csv.cpp.
#include "monitor.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <cmath>
#include <fstream>
#include <limits>
#include <regex>
#include <sstream>

#include <fmt/format.h>

#include "errors.h"
#include "json_kind.h"
#include "pyjson.h"

namespace tprobe {

using nlohmann::ordered_json;

namespace {

[[noreturn]] void fail(const std::string &source, std::string_view field, const std::string &problem) {
  throw usage_error(fmt::format("{}: field \"{}\": {}", source, field, problem));
}

// Python's str() of a JSON value, for the warnings msprobe prints with f"{value}".
std::string py_str(const ordered_json &v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_null()) return "None";
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_float()) return py_float_repr(v.get<double>());
  return v.dump();
}

// The value of `key`, or nullptr when absent (msprobe's config.get(key, default) gives the default
// then; a present null is None, which most of its checks refuse).
const ordered_json *find(const ordered_json &doc, const char *key) {
  auto it = doc.find(key);
  return it == doc.end() ? nullptr : &*it;
}

bool python_int(const ordered_json &v) { return v.is_number_integer() || v.is_number_unsigned(); }

// msprobe's isinstance(x, bool) checks: absent gives the default; anything else not a boolean
// (null included) is refused with msprobe's message.
bool expect_bool(const ordered_json &doc, const char *key, bool fallback, const std::string &source) {
  const ordered_json *v = find(doc, key);
  if (!v) return fallback;
  if (!v->is_boolean()) fail(source, key, fmt::format("{} should be a bool, got {}", key, json_kind(*v)));
  return v->get<bool>();
}

// The flags msprobe reads with config.get(key, False) without checking: a null is False there;
// tprobe wants a boolean otherwise (msprobe would take any truthy value).
bool expect_flag(const ordered_json &doc, const char *key, const std::string &source) {
  const ordered_json *v = find(doc, key);
  if (!v || v->is_null()) return false;
  if (!v->is_boolean()) fail(source, key, fmt::format("{} should be a bool, got {}", key, json_kind(*v)));
  return v->get<bool>();
}

std::string py_list_repr(const std::vector<std::string> &items) {
  std::string out = "[";
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + monitor_py_str_repr(items[i]);
  return out + "]";
}

// msprobe's validate_int_arg: None gives the default silently; a non-int or a value below
// `minimum` gives the default with a warning.
int64_t int_arg(const ordered_json &doc, const char *key, int64_t minimum, int64_t fallback,
                const std::string &fallback_text, std::vector<std::string> &warnings) {
  const ordered_json *v = find(doc, key);
  if (!v || v->is_null()) return fallback;
  std::string problem;
  if (!python_int(*v)) {
    problem = fmt::format("{} must be int", key);
  } else if (v->is_number_integer() && v->get<int64_t>() < minimum) {
    problem = fmt::format("{} must greater than {}", key, minimum);
  } else if (v->is_number_unsigned() && v->get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max())) {
    problem = fmt::format("{} is too large", key);  // Python has no bound; int64 does
  }
  if (problem.empty()) return v->get<int64_t>();
  warnings.push_back(fmt::format("Validate {} failed, {}, replaced with default value {}.", key, problem, fallback_text));
  return fallback;
}

void validate_alert(const ordered_json &alert, const std::string &source, monitor_config &cfg) {
  if (!alert.is_object()) fail(source, "alert", "alert should be a dictionary, got " + json_kind(alert));
  const ordered_json *rules = find(alert, "rules");
  // msprobe reads alert["rules"] (a KeyError without it); tprobe takes none.
  if (rules && !rules->is_null()) {
    if (!rules->is_array()) fail(source, "alert.rules", "must be a list of rules, got " + json_kind(*rules));
    for (size_t i = 0; i < rules->size(); ++i) {
      const ordered_json &rule = (*rules)[i];
      const std::string where = fmt::format("alert.rules[{}]", i);
      if (!rule.is_object())
        fail(source, where, "must be an object {\"rule_name\": ..., \"args\": {...}}, got " + json_kind(rule));
      const ordered_json *name = find(rule, "rule_name");
      const ordered_json *args = find(rule, "args");
      // validate_alert: a truthy rule_name must be one of RULE_NAME; truthy dict args need a
      // numeric threshold >= 0.
      const bool name_truthy = name && !name->is_null() &&
                               !(name->is_string() && name->get<std::string>().empty()) &&
                               !(name->is_boolean() && !name->get<bool>()) &&
                               !(python_int(*name) && name->get<int64_t>() == 0);
      if (name_truthy && (!name->is_string() || (name->get<std::string>() != "AnomalyTurbulence" &&
                                                 name->get<std::string>() != "AnomalyNan")))
        fail(source, where + ".rule_name",
             fmt::format("{} is not supported (rules: AnomalyTurbulence, AnomalyNan)", py_str(*name)));
      std::optional<double> threshold;
      if (args && args->is_object() && !args->empty()) {
        const ordered_json *t = find(*args, "threshold");
        if (!t || !(t->is_number()) || std::isless(t->get<double>(), 0.0))
          fail(source, where + ".args.threshold", "threshold must be float and not less than 0");
        threshold = t->get<double>();
      }
      // AnomalyScanner.load_rules: what it cannot build is logged and skipped.
      const std::string spec = rule.dump();
      const std::string rule_name = name && name->is_string() ? name->get<std::string>() : std::string();
      if (!name || name->is_null() || (rule_name == "AnomalyTurbulence" && (!args || args->is_null()))) {
        cfg.warnings.push_back(fmt::format("Spec is missing required keys: {}", spec));
        continue;
      }
      if (rule_name.empty()) {
        cfg.warnings.push_back(fmt::format("Rule class '{}' not found in the current module.", py_str(*name)));
        continue;
      }
      monitor_rule r;
      r.k = rule_name == "AnomalyTurbulence" ? monitor_rule::kind::turbulence : monitor_rule::kind::nan;
      // rule_cls(**args): only "threshold" is a keyword; AnomalyTurbulence requires it.
      bool built = !args || args->is_null() || (args->is_object() && args->size() <= (threshold ? 1u : 0u));
      if (built && r.k == monitor_rule::kind::turbulence && !threshold) built = false;
      if (!built) {
        cfg.warnings.push_back(fmt::format("Error creating instance of rule '{}': arguments {} do not fit", rule_name,
                                           args ? args->dump() : "null"));
        continue;
      }
      r.threshold = threshold;
      cfg.rules.push_back(r);
    }
  }
  const ordered_json *dump = find(alert, "dump");
  if (dump && !dump->is_null()) {
    const bool falsy = (dump->is_boolean() && !dump->get<bool>()) || (python_int(*dump) && dump->get<int64_t>() == 0) ||
                       (dump->is_string() && dump->get<std::string>().empty());
    if (!falsy && !dump->is_boolean()) fail(source, "alert.dump", "dump must be bool.");
    cfg.alert_dump = dump->is_boolean() && dump->get<bool>();
  }
}

}  // namespace

const std::vector<std::string> &monitor_op_list() {
  static const std::vector<std::string> ops{"norm", "min", "max", "zeros", "nans", "id", "mean", "shape", "dtype"};
  return ops;
}

bool monitor_rule::apply(double cur, double history) const {
  if (k == kind::turbulence) return std::fabs(cur) > history * (1 + threshold.value_or(0));
  return std::isnan(cur) || (threshold && std::fabs(cur) > *threshold);
}

monitor_config monitor_config_from_json(const ordered_json &doc, const std::string &source) {
  if (!doc.is_object())
    throw usage_error(fmt::format("{}: expected a JSON object at the top level, got {}", source, json_kind(doc)));
  monitor_config cfg;
  auto &warnings = cfg.warnings;

  // ops (validate_ops): invalid ones dropped with a warning, norm when none is left, shape and
  // dtype appended.
  {
    const ordered_json *ops = find(doc, "ops");
    if (ops && !ops->is_array()) fail(source, "ops", "ops should be a list, got " + json_kind(*ops));
    if (ops) {
      for (const auto &op : *ops) {
        const bool known = op.is_string() && std::ranges::find(monitor_op_list(), op.get<std::string>()) !=
                                                 monitor_op_list().end();
        if (!known) {
          warnings.push_back(
              fmt::format("op {} is not supported. Optional ops: {}", py_str(op), py_list_repr(monitor_op_list())));
          continue;
        }
        cfg.ops.push_back(op.get<std::string>());
      }
    }
    if (cfg.ops.empty()) {
      // msprobe says so at info level; a warning here only when ops were listed and all dropped.
      cfg.ops.push_back("norm");
      if (ops && !ops->empty()) warnings.push_back("There is no valid ops, default op norm is used");
    }
    if (std::ranges::find(cfg.ops, "shape") == cfg.ops.end()) cfg.ops.push_back("shape");
    if (std::ranges::find(cfg.ops, "dtype") == cfg.ops.end()) cfg.ops.push_back("dtype");
  }

  // ndigits (validate_ndigits): a falsy value passes its check; 0 rounds to units there.
  if (const ordered_json *v = find(doc, "ndigits"); v && !v->is_null()) {
    if (!python_int(*v) || (v->is_number_integer() && v->get<int64_t>() < 0))
      fail(source, "ndigits", fmt::format("ndigits({}) is not a positive integer", py_str(*v)));
    if (v->is_number_unsigned() ? v->get<uint64_t>() > 20 : v->get<int64_t>() > 20)
      fail(source, "ndigits", fmt::format("The maximum supported ndigits is 20, current value: {}.", py_str(*v)));
    cfg.ndigits = v->get<int>();
  }

  if (const ordered_json *v = find(doc, "eps")) {
    if (!v->is_number_float()) fail(source, "eps", "eps should be a float (write 1e-8 or 0.0, not 0), got " + json_kind(*v));
    cfg.eps = v->get<double>();
  }

  if (const ordered_json *v = find(doc, "module_ranks")) {
    if (!v->is_array()) fail(source, "module_ranks", "module_ranks should be a list, got " + json_kind(*v));
    for (const auto &r : *v) {
      if (!python_int(r)) fail(source, "module_ranks", "element in module_ranks should be a int, got " + json_kind(r));
      cfg.module_ranks.push_back(r.get<int64_t>());
    }
  }

  const ordered_json *targets = find(doc, "targets");
  if (targets) {
    if (!targets->is_object()) fail(source, "targets", "targets in config.json should be a dict, got " + json_kind(*targets));
    for (const auto &[name, field] : targets->items())
      if (!field.is_object())
        fail(source, "targets." + name,
             "values of targets should be cared filed e.g. {\"input\": \"tensor\"}, got " + json_kind(field));
  }

  if (const ordered_json *v = find(doc, "l2_targets")) {
    if (!v->is_object()) fail(source, "l2_targets", "l2_targets in config.json should be a dict, got " + json_kind(*v));
    for (const auto &[hook, list] : v->items()) {
      if (hook != "linear_hook" && hook != "attention_hook")
        fail(source, "l2_targets", fmt::format("key of l2_targets must be in ['linear_hook', 'attention_hook'], got {}", hook));
      if (!list.is_array()) fail(source, "l2_targets." + hook, "values of l2_targets should be a list");
      for (const auto &item : list)
        if (!item.is_string())
          fail(source, "l2_targets." + hook, fmt::format("item of \"{}\" in l2_targets should be module_name[str]", hook));
    }
  }
  (void)expect_bool(doc, "recording_l2_features", false, source);
  if (const ordered_json *v = find(doc, "sa_order")) {
    std::string order = v->is_string() ? v->get<std::string>() : std::string();
    std::erase(order, ' ');
    if (!v->is_string() || (order != "s,b,h,d" && order != "b,s,h,d"))
      fail(source, "sa_order", fmt::format("sa_order must be in ['s,b,h,d', 'b,s,h,d'], got {}", py_str(*v)));
  }
  (void)expect_bool(doc, "print_struct", false, source);
  bool ur_distribution = expect_bool(doc, "ur_distribution", false, source);
  const bool xy_distribution = expect_bool(doc, "xy_distribution", false, source);
  (void)expect_bool(doc, "wg_distribution", false, source);
  (void)expect_bool(doc, "mg_distribution", false, source);  // msprobe checks this misspelt key
  (void)expect_bool(doc, "param_distribution", false, source);

  if (const ordered_json *v = find(doc, "cc_distribution")) {
    if (!v->is_object()) fail(source, "cc_distribution", "cc_distribution should be a dictionary, got " + json_kind(*v));
    for (const auto &[key, value] : v->items()) {
      if (key == "enable" || key == "cc_pre_hook" || key == "cc_log_only") {
        if (!value.is_boolean()) fail(source, "cc_distribution." + key, fmt::format("cc_distribution {} should be a bool", key));
      } else if (key == "cc_codeline") {
        if (!value.is_array()) fail(source, "cc_distribution." + key, "cc_distribution cc_codeline should be a list");
      } else {
        fail(source, "cc_distribution." + key, fmt::format("{} of cc_distribution is not supported.", key));
      }
    }
  }

  if (const ordered_json *v = find(doc, "alert")) validate_alert(*v, source, cfg);

  if (const ordered_json *v = find(doc, "step_count_per_record")) {
    if (!python_int(*v)) fail(source, "step_count_per_record", "step_count_per_record must be int, got " + json_kind(*v));
    if (v->is_number_integer() && v->get<int64_t>() < 1)
      fail(source, "step_count_per_record", "step_count_per_record must greater than 0");
    if (v->is_number_unsigned() ? v->get<uint64_t>() > 1000000 : v->get<int64_t>() > 1000000)
      fail(source, "step_count_per_record", "step_count_per_record must smaller than 1e6");
    cfg.step_count_per_record = v->get<int64_t>();
  }

  cfg.start_step = int_arg(doc, "start_step", 0, 0, "0", warnings);
  cfg.collect_times = int_arg(doc, "collect_times", 0, 100000000, "100000000.0", warnings);
  cfg.step_interval = int_arg(doc, "step_interval", 1, 1, "1", warnings);

  cfg.squash_name = expect_bool(doc, "squash_name", true, source);

  if (const ordered_json *v = find(doc, "append_output")) {
    if (!v->is_array()) fail(source, "append_output", "append_output should be a list, got " + json_kind(*v));
    if (!v->empty() && v->size() != 2)
      fail(source, "append_output", "append_output should be empty or contain exactly 2 elements");
    for (const auto &t : *v)
      if (!t.is_string()) fail(source, "append_output", "the timestamps should be strings like \"Dec03_21-34-40\"");
  }

  if (const ordered_json *v = find(doc, "monitor_mbs_grad")) {
    if (!v->is_boolean()) {
      warnings.push_back(fmt::format("monitor_mbs_grad should be a bool, actual value is {}.", py_str(*v)));
    } else {
      cfg.monitor_mbs_grad = v->get<bool>();
    }
  }
  cfg.dynamic_on = expect_bool(doc, "dynamic_on", false, source);

  // set_config's fallbacks.
  bool all_xy = expect_flag(doc, "all_xy", source);
  const bool forward_only = expect_flag(doc, "forward_only", source);
  const bool backward_only = expect_flag(doc, "backward_only", source);
  (void)expect_flag(doc, "mv_distribution", source);
  (void)expect_flag(doc, "mg_direction", source);
  (void)expect_flag(doc, "stack_info", source);
  if (const ordered_json *v = find(doc, "format")) {
    const std::string f = v->is_string() ? v->get<std::string>() : std::string();
    if (f == "csv" || f == "tensorboard" || f == "api") {
      cfg.format = f;
    } else {
      warnings.push_back(fmt::format("Unsupported format: {}, use default format: csv", py_str(*v)));
    }
  }
  if (ur_distribution && cfg.format != "tensorboard") {
    warnings.push_back("can only set ur_distribution when format is 'tensorboard', cancel ur_distribution");
    ur_distribution = false;
  }
  if (forward_only && backward_only) warnings.push_back("not enable backward_only and forward_only simultaneously");

  // The normalised document: the given keys in their places, every value as used.
  ordered_json &j = cfg.json;
  j = doc;
  j["ops"] = cfg.ops;
  j["eps"] = cfg.eps;
  j["ndigits"] = cfg.ndigits;
  j["module_ranks"] = cfg.module_ranks;
  if (!targets || targets->empty()) {
    j["targets"] = ordered_json::object({{"", ordered_json::object()}});
    if (xy_distribution) all_xy = true;
  }
  j["xy_distribution"] = xy_distribution;
  j["all_xy"] = all_xy;
  j["forward_only"] = forward_only;
  j["backward_only"] = backward_only;
  for (const char *flag : {"wg_distribution", "param_distribution", "print_struct", "recording_l2_features"})
    j[flag] = expect_bool(doc, flag, false, source);
  for (const char *flag : {"mv_distribution", "mg_direction", "stack_info"}) j[flag] = expect_flag(doc, flag, source);
  j["ur_distribution"] = ur_distribution;
  j["monitor_mbs_grad"] = cfg.monitor_mbs_grad;
  j["start_step"] = cfg.start_step;
  j["step_interval"] = cfg.step_interval;
  j["collect_times"] = cfg.collect_times;
  j["step_count_per_record"] = cfg.step_count_per_record;
  j["format"] = cfg.format;
  j["squash_name"] = cfg.squash_name;
  j["dynamic_on"] = cfg.dynamic_on;
  ordered_json alert = ordered_json::object();
  alert["rules"] = ordered_json::array();
  for (const auto &r : cfg.rules) {
    ordered_json rule = {{"rule_name", std::string(r.name())}};
    if (r.threshold) rule["args"] = {{"threshold", *r.threshold}};
    alert["rules"].push_back(std::move(rule));
  }
  alert["dump"] = cfg.alert_dump;
  j["alert"] = std::move(alert);
  if (!find(doc, "append_output")) j["append_output"] = ordered_json::array();
  if (!find(doc, "cc_distribution")) j["cc_distribution"] = ordered_json::object();
  return cfg;
}

monitor_config monitor_config_read(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw system_error(fmt::format("{}: cannot read the monitor config: {}", path, std::strerror(errno)));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) throw system_error(fmt::format("{}: cannot read the monitor config", path));
  return monitor_config_from_json(pyjson_parse(text.str(), path), path);
}

// ---- tags ----

std::string monitor_tag(std::string_view name, std::string_view suffix, std::optional<int64_t> rank) {
  if (!rank) return fmt::format("{}/{}", name, suffix);
  return fmt::format("{}/rank{}/{}", name, *rank, suffix);
}

std::string monitor_squash_name(std::string_view name) {
  // re.findall(pattern, name)[0] of the first pattern that matches. Python's '.' stops at '\n'
  // only; ECMAScript's at '\r' too, a difference no parameter name shows.
  static const std::regex patterns[] = {
      std::regex(R"(^.*\.(layers?\..*))"), std::regex(R"(^.*\.(embeddings?\..*))"), std::regex(R"(^.*\.(final.*))"),
      std::regex(R"(^.*\.(output.*))"),    std::regex(R"(^.*\.(norm.*))")};
  const std::string s(name);
  std::smatch m;
  for (const auto &p : patterns)
    if (std::regex_search(s, m, p) && m[1].length() > 0) return m[1].str();
  return s;
}

std::string monitor_tag_name(std::string_view tag) { return std::string(tag.substr(0, tag.find('/'))); }

std::vector<std::string> monitor_name_split(std::string_view name) {
  std::vector<std::string> out;
  size_t begin = 0;
  for (;;) {
    size_t end = name.find(':', begin);
    out.emplace_back(name.substr(begin, end == std::string_view::npos ? std::string_view::npos : end - begin));
    if (end == std::string_view::npos) return out;
    begin = end + 1;
  }
}

// ---- rows ----

const std::vector<std::string> &monitor_csv_prefixes() {
  static const std::vector<std::string> prefixes{"actv",       "actv_grad",  "grad_reduced",  "grad_unreduced", "exp_avg",
                                                 "exp_avg_sq", "param_origin", "param_updated", "other"};
  return prefixes;
}

bool monitor_prefix_has_micro_step(std::string_view prefix, bool monitor_mbs_grad) {
  return prefix == "actv" || prefix == "actv_grad" || (monitor_mbs_grad && prefix == "grad_unreduced");
}

namespace {
bool is_shape_or_dtype(std::string_view op) { return op == "shape" || op == "dtype"; }
size_t value_count(const std::vector<std::string> &ops) {
  return size_t(std::ranges::count_if(ops, [](const std::string &op) { return !is_shape_or_dtype(op); }));
}
}  // namespace

ordered_json monitor_rows_to_json(const monitor_rows &rows) {
  ordered_json j = ordered_json::object();
  j["step"] = rows.step;
  j["ops"] = rows.ops;
  j["micro_step"] = rows.micro_step;
  ordered_json list = ordered_json::array();
  for (const auto &row : rows.rows) {
    ordered_json r = ordered_json::object();
    r["tag"] = row.tag;
    ordered_json values = ordered_json::array();
    for (const auto &v : row.values) {
      if (v.integer) {
        values.push_back(int64_t(v.value));
      } else {
        values.push_back(v.value);  // NaN stays a float (msgpack carries it)
      }
    }
    r["values"] = std::move(values);
    r["shape"] = row.shape ? ordered_json(*row.shape) : ordered_json();
    r["dtype"] = row.dtype ? ordered_json(*row.dtype) : ordered_json();
    if (row.call_id != -1) r["call_id"] = row.call_id;
    list.push_back(std::move(r));
  }
  j["rows"] = std::move(list);
  return j;
}

monitor_rows monitor_rows_from_json(const ordered_json &j, const std::string &what) {
  auto bad = [&](std::string_view field, const std::string &problem) -> void { fail(what, field, problem); };
  if (!j.is_object()) throw usage_error(fmt::format("{}: monitor rows must be an object, got {}", what, json_kind(j)));
  monitor_rows rows;
  auto step = j.find("step");
  if (step == j.end() || !python_int(*step)) bad("step", "must be an integer");
  rows.step = step->get<int64_t>();
  auto ops = j.find("ops");
  if (ops == j.end() || !ops->is_array() || ops->empty()) bad("ops", "must be a non-empty list of ops");
  for (const auto &op : *ops) {
    if (!op.is_string() || std::ranges::find(monitor_op_list(), op.get<std::string>()) == monitor_op_list().end())
      bad("ops", fmt::format("{} is not one of {}", op.dump(), py_list_repr(monitor_op_list())));
    rows.ops.push_back(op.get<std::string>());
  }
  const size_t n_values = value_count(rows.ops);
  if (auto m = j.find("micro_step"); m != j.end()) {
    if (!m->is_boolean()) bad("micro_step", "must be true or false");
    rows.micro_step = m->get<bool>();
  }
  auto list = j.find("rows");
  if (list == j.end() || !list->is_array()) bad("rows", "must be a list");
  for (size_t i = 0; i < list->size(); ++i) {
    const ordered_json &r = (*list)[i];
    const std::string at = fmt::format("rows[{}]", i);
    if (!r.is_object()) bad(at, "must be an object {\"tag\", \"values\", \"shape\", \"dtype\"}");
    monitor_row row;
    auto tag = r.find("tag");
    if (tag == r.end() || !tag->is_string() || tag->get<std::string>().empty()) bad(at + ".tag", "must be a non-empty string");
    row.tag = tag->get<std::string>();
    auto values = r.find("values");
    if (values == r.end() || !values->is_array()) bad(at + ".values", "must be a list");
    if (values->size() != n_values)
      bad(at + ".values", fmt::format("{} values for {} ops other than shape and dtype", values->size(), n_values));
    for (const auto &v : *values) {
      if (v.is_null()) {
        row.values.push_back({std::numeric_limits<double>::quiet_NaN(), false});
      } else if (v.is_number_integer() || v.is_number_unsigned()) {
        row.values.push_back({double(v.get<int64_t>()), true});
      } else if (v.is_number_float()) {
        row.values.push_back({v.get<double>(), false});
      } else {
        bad(at + ".values", "must be numbers or null (NaN), got " + json_kind(v));
      }
    }
    if (auto s = r.find("shape"); s != r.end() && !s->is_null()) {
      if (!s->is_array()) bad(at + ".shape", "must be a list of sizes or null");
      std::vector<int64_t> shape;
      for (const auto &d : *s) {
        if (!python_int(d) || (d.is_number_integer() && d.get<int64_t>() < 0)) bad(at + ".shape", "must hold sizes >= 0");
        shape.push_back(d.get<int64_t>());
      }
      row.shape = std::move(shape);
    }
    if (auto d = r.find("dtype"); d != r.end() && !d->is_null()) {
      if (!d->is_string()) bad(at + ".dtype", "must be a string (\"torch.float32\") or null");
      row.dtype = d->get<std::string>();
    }
    if (auto c = r.find("call_id"); c != r.end() && !c->is_null()) {
      if (!c->is_number_integer() && !c->is_number_unsigned()) bad(at + ".call_id", "must be an integer or null");
      row.call_id = c->get<int64_t>();
    }
    rows.rows.push_back(std::move(row));
  }
  return rows;
}

// ---- anomaly rules ----

const monitor_rule *monitor_scan(const std::vector<monitor_rule> &rules, double history, double cur) {
  for (const auto &r : rules)
    if (r.apply(cur, history)) return &r;
  return nullptr;
}

namespace {
// Python's str() of the number as msprobe holds it.
std::string py_number(const monitor_number &n) {
  if (n.integer) return fmt::format("{}", int64_t(n.value));
  return py_float_repr(n.value);
}
}  // namespace

std::string monitor_anomaly::message() const {
  return fmt::format("Rule {} reports anomaly signal in ({}, {}) at step {}, current value {}, history mean {}.", rule,
                     monitor_py_str_repr(tag), monitor_py_str_repr(op), step, py_number(value), py_number(history));
}

std::optional<monitor_anomaly> monitor_anomaly_detector::add(const std::string &tag, const std::string &op,
                                                             monitor_number v, int64_t step) {
  if (rules_.empty() || is_shape_or_dtype(op)) return std::nullopt;
  if (op == "id" && std::isnan(v.value)) return std::nullopt;  // msprobe: abs(None) raises
  std::string key;
  key.reserve(tag.size() + 1 + op.size());
  key.append(tag).append(1, '\n').append(op);
  const monitor_number a{std::fabs(v.value), v.integer};
  auto [it, first] = ema_.try_emplace(std::move(key), monitor_ema{a, 0});
  monitor_ema &state = it->second;
  const monitor_number history = state.avg;
  state.avg = {0.99 * history.value + (1 - 0.99) * a.value, false};
  ++state.count;
  const monitor_rule *rule = monitor_scan(rules_, history.value, v.value);
  if (!rule) return std::nullopt;
  if (rule->k == monitor_rule::kind::turbulence && op != "norm" && op != "mean") return std::nullopt;
  return monitor_anomaly{tag, op, std::string(rule->name()), step, v, history};
}

std::vector<monitor_anomaly> monitor_anomaly_detector::add_rows(const monitor_rows &rows) {
  std::vector<monitor_anomaly> found;
  if (rules_.empty()) return found;
  for (const auto &row : rows.rows) {
    size_t i = 0;
    for (const auto &op : rows.ops) {
      if (is_shape_or_dtype(op)) continue;
      if (i >= row.values.size()) break;
      if (auto a = add(row.tag, op, row.values[i++], rows.step)) found.push_back(std::move(*a));
    }
  }
  return found;
}

const monitor_ema *monitor_anomaly_detector::state(const std::string &tag, const std::string &op) const {
  auto it = ema_.find(tag + '\n' + op);
  return it == ema_.end() ? nullptr : &it->second;
}

int monitor_train_stage(std::string_view tag_name) {
  const size_t slash = tag_name.rfind('/');
  const std::string_view key = slash == std::string_view::npos ? tag_name : tag_name.substr(slash + 1);
  if (key == "actv") return 0;
  if (key == "actv_grad" || key == "pre_grad" || key == "post_grad" || key == "acc_grad") return 1;
  if (key == "exp_avg" || key == "exp_avg_sq") return 2;
  return -1;
}

ordered_json monitor_anomaly_data::to_json() const {
  ordered_json j = ordered_json::object();
  j["rank"] = rank;
  j["step"] = step;
  j["micro_step"] = micro_step;
  j["pp_stage"] = pp_stage;
  j["vpp_stage"] = vpp_stage;
  j["call_id"] = call_id;
  j["tag_name"] = tag_name;
  j["message"] = message;
  j["group_mates"] = group_mates;
  return j;
}

monitor_anomaly_data monitor_anomaly_data_make(const monitor_anomaly &a, int64_t rank, int64_t pp_stage,
                                               std::vector<int64_t> group_mates, int64_t call_id) {
  monitor_anomaly_data d;
  d.rank = rank;
  d.step = a.step;
  d.micro_step = 0;
  d.pp_stage = pp_stage;
  const std::string name = monitor_tag_name(a.tag);
  if (size_t colon = name.find(':'); colon != std::string::npos) {
    // int(): optional sign, digits, surrounding spaces; tprobe takes 0 where Python would raise.
    const std::string head = name.substr(0, colon);
    static const std::regex python_int_text(R"(^\s*[+-]?\d+\s*$)");
    if (std::regex_match(head, python_int_text)) {
      try {
        d.vpp_stage = std::stoll(head);
      } catch (const std::exception &) {
        d.vpp_stage = 0;
      }
    }
  }
  d.call_id = call_id;
  d.tag_name = a.tag;
  d.message = a.message();
  d.group_mates = std::move(group_mates);
  return d;
}

std::optional<monitor_anomaly_data> monitor_anomaly_data_from_json(const ordered_json &j, std::string *why) {
  auto skip = [&](const std::string &reason) -> std::optional<monitor_anomaly_data> {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (!j.is_object()) return skip("not an object");
  monitor_anomaly_data d;
  for (const auto &[key, v] : j.items()) {
    int64_t *number = key == "rank"         ? &d.rank
                      : key == "step"       ? &d.step
                      : key == "micro_step" ? &d.micro_step
                      : key == "pp_stage"   ? &d.pp_stage
                      : key == "vpp_stage"  ? &d.vpp_stage
                      : key == "call_id"    ? &d.call_id
                                            : nullptr;
    if (number) {
      if (!python_int(v)) return skip(fmt::format("\"{}\" is not an integer", key));
      *number = v.get<int64_t>();
    } else if (key == "tag_name" || key == "message") {
      if (!v.is_string()) return skip(fmt::format("\"{}\" is not a string", key));
      (key == "tag_name" ? d.tag_name : d.message) = v.get<std::string>();
    } else if (key == "group_mates") {
      if (v.is_null()) continue;
      if (!v.is_array()) return skip("\"group_mates\" is not a list");
      for (const auto &m : v) {
        if (!python_int(m)) return skip("\"group_mates\" holds a value that is not an integer");
        d.group_mates.push_back(m.get<int64_t>());
      }
    } else {
      return skip(fmt::format("unexpected keyword argument '{}'", key));
    }
  }
  return d;
}

std::string monitor_anomaly_key(std::string_view tag, std::string_view op, int64_t step, int64_t call_id) {
  return fmt::format("{}_{}_step_{}_call_{}", tag, op, step, call_id);
}

std::string monitor_anomaly_key_msprobe(std::string_view tag, int64_t step, int64_t call_id) {
  return fmt::format("{}_step_{}_call_{}", tag, step, call_id);
}

bool monitor_anomaly_less(const monitor_anomaly_data &a, const monitor_anomaly_data &b) {
  const int stage_a = monitor_train_stage(a.tag_name), stage_b = monitor_train_stage(b.tag_name);
  const bool forward = stage_a == 0;  // a's stage decides for both, as in msprobe's __lt__
  auto key = [&](const monitor_anomaly_data &x, int stage) {
    return std::array<int64_t, 6>{x.step,           x.micro_step, stage, forward ? x.vpp_stage : -x.vpp_stage,
                                  forward ? x.pp_stage : -x.pp_stage, x.call_id};
  };
  return key(a, stage_a) < key(b, stage_b);
}

std::vector<monitor_anomaly_data> monitor_anomaly_top_k(std::vector<monitor_anomaly_data> anomalies, size_t k,
                                                        const std::vector<int64_t> &steps) {
  if (!steps.empty())
    std::erase_if(anomalies, [&](const monitor_anomaly_data &a) { return std::ranges::find(steps, a.step) == steps.end(); });
  std::stable_sort(anomalies.begin(), anomalies.end(), monitor_anomaly_less);
  if (anomalies.size() > k) anomalies.resize(k);
  return anomalies;
}

std::string monitor_py_str_repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == quote) {
      out += '\\';
      out += char(c);
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out += char(c);  // UTF-8 passes as Python prints printable text
    }
  }
  out += quote;
  return out;
}

}  // namespace tprobe
