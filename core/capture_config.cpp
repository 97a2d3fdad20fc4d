#include "capture_config.h"
#include "nan_analyze.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <initializer_list>
#include <memory>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include "errors.h"
#include "free_benchmark.h"
#include "json_kind.h"
#include "monitor.h"

namespace tprobe {
namespace {

using nlohmann::ordered_json;
namespace fs = std::filesystem;

// msprobe's Const.STEP_RANK_MINIMUM_VALUE / STEP_RANK_MAXIMUM_VALUE, and the list length cap.
constexpr int64_t rank_step_max = 1'000'000;
constexpr size_t rank_step_max_elements = 1'000'000;
// FileCheckConst: DIRECTORY_LENGTH and FILE_NAME_LENGTH.
constexpr size_t path_max_length = 4096;
constexpr size_t path_component_max_length = 255;

const std::vector<std::string> task_names{"tensor",         "statistics", "overflow_check", "free_benchmark",
                                          "run_ut",         "grad_probe", "structure",      "exception_dump"};
const std::vector<std::string> level_names{"L0", "L1", "L2", "mix", "debug"};
// "tprobe" is ours (tprobe_keys); msprobe ignores keys it does not know, so a config with it still
// works there.
const std::vector<std::string> common_keys{"task",      "dump_path",         "rank",       "step",
                                           "level",     "enable_dataloader", "async_dump", "precision",
                                           "tprobe",    "tensor_format"};
const std::vector<std::string> tprobe_keys{"pipeline_timeout_s", "on_pipeline_failure", "tensor_format", "nan_analyze"};
const std::vector<std::string> data_mode_names{"all", "forward", "backward", "input", "output"};

// The keys msprobe documents for the section of each task (§3.4-§3.10).
const std::vector<std::string> &section_keys(const std::string &task) {
  static const std::vector<std::string> statistics{"scope",     "list",         "tensor_list",
                                                   "data_mode", "summary_mode", "device"};
  static const std::vector<std::string> tensor{"scope", "list", "data_mode", "summary_mode", "file_format"};
  static const std::vector<std::string> overflow_check{"overflow_nums", "check_mode"};
  static const std::vector<std::string> free_benchmark{"scope",       "list",       "fuzz_device", "pert_mode",
                                                       "handler_type", "fuzz_level", "fuzz_stage",  "if_preheat",
                                                       "preheat_step", "max_sample"};
  static const std::vector<std::string> run_ut{"white_list", "black_list", "error_data_path"};
  static const std::vector<std::string> grad_probe{"grad_level", "param_list", "bounds"};
  static const std::vector<std::string> none;
  if (task == "statistics") return statistics;
  if (task == "tensor") return tensor;
  if (task == "overflow_check") return overflow_check;
  if (task == "free_benchmark") return free_benchmark;
  if (task == "run_ut") return run_ut;
  if (task == "grad_probe") return grad_probe;
  return none;  // structure, exception_dump
}

bool contains(const std::vector<std::string> &values, std::string_view value) {
  return std::find(values.begin(), values.end(), value) != values.end();
}

// The length of the whole UTF-8 character that starts at s[i]: 1 for ASCII, 2 to 4 for a valid
// multi-byte sequence, 0 for a byte that starts none (a stray continuation byte, a cut sequence).
size_t utf8_char_length(std::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  const size_t n = c < 0x80 ? 1 : c >= 0xC2 && c <= 0xDF ? 2 : c >= 0xE0 && c <= 0xEF ? 3 : c >= 0xF0 && c <= 0xF4 ? 4 : 0;
  if (n == 0 || i + n > s.size()) return 0;
  for (size_t k = i + 1; k < i + n; ++k)
    if ((byte(k) & 0xC0) != 0x80) return 0;
  return n;
}

// The longest prefix of s within max_bytes that ends on a character boundary: a message that
// shortens a value must not print half a character.
std::string_view utf8_prefix(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return s;
  size_t n = max_bytes;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  return s.substr(0, n);
}

// A user string for a one-line message: quoted, with control bytes and bytes that are not part of
// a whole UTF-8 character escaped, so that the line stays valid UTF-8.
std::string quote(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    const auto c = static_cast<unsigned char>(s[i]);
    const size_t n = utf8_char_length(s, i);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (n == 0 || c < 0x20 || c == 0x7f) {
      out += fmt::format("\\x{:02x}", c);
    } else {
      out.append(s.substr(i, n));
      i += n;
      continue;
    }
    ++i;
  }
  return out + "\"";
}

// A JSON value for a message, shortened: its text as written.
std::string describe(const ordered_json &v) {
  std::string text = v.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
  if (text.size() > 80) text = std::string(utf8_prefix(text, 77)) + "...";
  for (char &c : text) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  return text;
}

std::string join(const std::vector<std::string> &values) {
  return fmt::format("{}", fmt::join(values, ", "));
}

// `where` is what the message names: `config.json: field "rank"` or `TPROBE_LEVEL`.
[[noreturn]] void fail(const std::string &where, const std::string &detail) {
  throw usage_error(where + ": " + detail);
}

std::string field_where(const std::string &source, const std::string &field) {
  return fmt::format("{}: field \"{}\"", source, field);
}

// The value of `key`, or nullptr when it is absent or null (msprobe's json.get() gives None for
// both, and None means "use the default").
const ordered_json *get(const ordered_json &object, const std::string &key) {
  auto it = object.find(key);
  if (it == object.end() || it->is_null()) return nullptr;
  return &*it;
}

std::string expect_string(const ordered_json &v, const std::string &where) {
  if (!v.is_string()) fail(where, "expected a string, got " + json_kind(v));
  return v.get<std::string>();
}

bool expect_bool(const ordered_json &v, const std::string &where) {
  if (!v.is_boolean()) fail(where, "expected a boolean, got " + json_kind(v));
  return v.get<bool>();
}

// An int in the int64 range; bools and floats are not ints (msprobe: isinstance(x, int) and not bool).
int64_t expect_int(const ordered_json &v, const std::string &where) {
  if (v.is_number_unsigned()) {
    auto u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX)) fail(where, fmt::format("{} is out of the int64 range", u));
    return static_cast<int64_t>(u);
  }
  if (!v.is_number_integer()) fail(where, "expected an integer, got " + json_kind(v));
  return v.get<int64_t>();
}

std::vector<std::string> expect_string_list(const ordered_json &v, const std::string &where) {
  if (!v.is_array()) fail(where, "expected a list of strings, got " + json_kind(v));
  std::vector<std::string> out;
  out.reserve(v.size());
  for (const auto &element : v) {
    if (!element.is_string()) fail(where, fmt::format("element {} is {}, expected a string", describe(element), json_kind(element)));
    out.push_back(element.get<std::string>());
  }
  return out;
}

void check_one_of(const std::string &value, const std::vector<std::string> &allowed, const std::string &where) {
  if (!contains(allowed, value)) fail(where, fmt::format("{} is not one of {}", quote(value), join(allowed)));
}

std::string expect_one_of(const ordered_json &v, const std::vector<std::string> &allowed, const std::string &where) {
  std::string value = expect_string(v, where);
  check_one_of(value, allowed, where);
  return value;
}

void check_keys(const ordered_json &object, const std::vector<std::string> &allowed, const std::string &source,
                const std::string &section) {
  for (const auto &[key, value] : object.items()) {
    if (contains(allowed, key)) continue;
    if (section.empty()) {
      fail(field_where(source, key), "unknown key; allowed top-level keys: " + join(allowed));
    }
    fail(field_where(source, section + "." + key),
         fmt::format("unknown key; allowed keys in \"{}\": {}", section, allowed.empty() ? "none" : join(allowed)));
  }
}

// msprobe's path rule (FileCheckConst.FILE_PATTERN ^[a-zA-Z0-9_./-]+$, length caps), applied to
// the absolute path as msprobe applies it to the realpath: a cwd like /home/abc++ fails too.
std::string absolute_dump_path(const std::string &path, const std::string &where) {
  if (path.empty()) fail(where, "the dump_path not found (a non-empty path is required)");
  std::error_code ec;
  fs::path absolute = fs::absolute(path, ec);
  if (ec) throw system_error_from_errno("resolve", path, ec.value());
  std::string normal = absolute.lexically_normal().string();
  while (normal.size() > 1 && normal.back() == '/') normal.pop_back();
  if (normal.size() > path_max_length) {
    fail(where, fmt::format("absolute path is {} characters long, at most {} allowed", normal.size(), path_max_length));
  }
  static const std::string_view allowed_chars =
      "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./-";
  if (size_t bad = normal.find_first_not_of(allowed_chars); bad != std::string::npos) {
    fail(where, fmt::format("absolute path {} contains {}; only letters, digits and _ . / - are allowed",
                            quote(normal), quote(normal.substr(bad, std::max<size_t>(utf8_char_length(normal, bad), 1)))));
  }
  size_t start = 0;
  while (start < normal.size()) {
    size_t end = normal.find('/', start);
    if (end == std::string::npos) end = normal.size();
    if (end - start > path_component_max_length) {
      fail(where, fmt::format("path component {} is {} characters long, at most {} allowed",
                              quote(normal.substr(start, 40) + "..."), end - start, path_component_max_length));
    }
    start = end + 1;
  }
  return normal;
}

// A decimal number, digits only (msprobe's int() also takes " +3"; configs never rely on that).
std::optional<int64_t> parse_bound(std::string_view text, bool &overflow) {
  overflow = false;
  if (text.empty() || text.find_first_not_of("0123456789") != std::string_view::npos) return std::nullopt;
  int64_t value = 0;
  auto [ptr, err] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (err == std::errc::result_out_of_range) {
    overflow = true;
    return std::nullopt;
  }
  if (err != std::errc() || ptr != text.data() + text.size()) return std::nullopt;
  return value;
}

// --- task sections ---------------------------------------------------------------------------

void check_data_mode(const std::vector<std::string> &modes, const std::string &where) {
  if (modes.size() > 4) fail(where, fmt::format("has {} elements, at most 4 allowed", modes.size()));
  for (const auto &mode : modes) {
    if (!contains(data_mode_names, mode)) {
      fail(where, fmt::format("element {} is not one of {}", quote(mode), join(data_mode_names)));
    }
  }
  if (contains(modes, "all") && modes.size() != 1) fail(where, "\"all\" cannot be combined with other modes");
}

std::vector<std::string> parse_scope(const ordered_json &v, const std::string &where) {
  auto scope = expect_string_list(v, where);
  if (!scope.empty() && scope.size() != 2) {
    fail(where, fmt::format("must be empty or exactly 2 entry names (start, end), got {}", scope.size()));
  }
  return scope;
}

// statistics and tensor (§3.4, §3.5).
void parse_dump_section(const ordered_json &section, const std::string &source, capture_config &cfg) {
  auto where = [&](const char *key) { return field_where(source, cfg.task + "." + key); };
  if (auto *v = get(section, "scope")) cfg.scope = parse_scope(*v, where("scope"));
  if (auto *v = get(section, "list")) cfg.list = expect_string_list(*v, where("list"));
  if (auto *v = get(section, "tensor_list")) cfg.tensor_list = expect_string_list(*v, where("tensor_list"));
  if (auto *v = get(section, "data_mode")) {
    cfg.data_mode = expect_string_list(*v, where("data_mode"));
    check_data_mode(cfg.data_mode, where("data_mode"));
  }
  if (auto *v = get(section, "summary_mode")) {
    cfg.summary_mode = expect_one_of(*v, {"statistics", "md5"}, where("summary_mode"));
  }
  if (auto *v = get(section, "file_format")) {
    cfg.file_format = expect_one_of(*v, {"npy", "bin"}, where("file_format"));
  }
  // MindSpore static graph only; validated so that a typo still fails, otherwise unused.
  if (auto *v = get(section, "device")) (void)expect_one_of(*v, {"device", "host"}, where("device"));
}

void parse_overflow_check_section(const ordered_json &section, const std::string &source, capture_config &cfg) {
  if (auto *v = get(section, "overflow_nums")) {
    const std::string where = field_where(source, "overflow_check.overflow_nums");
    cfg.overflow_nums = expect_int(*v, where);
    if (cfg.overflow_nums != -1 && cfg.overflow_nums <= 0) {
      fail(where, fmt::format("{} is invalid: -1 (never stop) or a count > 0 is required", cfg.overflow_nums));
    }
  }
  if (auto *v = get(section, "check_mode")) {
    (void)expect_one_of(*v, {"all", "aicore", "atomic"}, field_where(source, "overflow_check.check_mode"));
  }
}

// msprobe's FreeBenchmarkCheckConfig and ListScope rules live once, in core/free_benchmark.h
// (the capture and the stages read the validated section back from the session meta).
void parse_free_benchmark_section(const ordered_json &section, const std::string &source, capture_config &cfg) {
  const free_benchmark_settings s = free_benchmark_settings_from_json(section, source);
  cfg.scope = s.scope;
  cfg.list = s.list;
  cfg.free_benchmark = free_benchmark_settings_to_json(s);
}

void parse_run_ut_section(const ordered_json &section, const std::string &source) {
  auto where = [&](const char *key) { return field_where(source, std::string("run_ut.") + key); };
  if (auto *v = get(section, "white_list")) (void)expect_string_list(*v, where("white_list"));
  if (auto *v = get(section, "black_list")) (void)expect_string_list(*v, where("black_list"));
  if (auto *v = get(section, "error_data_path")) {
    std::string path = expect_string(*v, where("error_data_path"));
    std::error_code ec;
    if (!fs::exists(path, ec)) fail(where("error_data_path"), fmt::format("path {} does not exist", quote(path)));
  }
}

void parse_grad_probe_section(const ordered_json &section, const std::string &source, capture_config &cfg) {
  cfg.grad_probe = {{"grad_level", "L1"}, {"param_list", ordered_json::array()}, {"bounds", {-1, 0, 1}}};
  for (const char *key : {"grad_level", "param_list", "bounds"})
    if (auto *v = get(section, key)) cfg.grad_probe[key] = *v;
  auto where = [&](const char *key) { return field_where(source, std::string("grad_probe.") + key); };
  if (auto *v = get(section, "grad_level")) (void)expect_one_of(*v, {"L0", "L1", "L2"}, where("grad_level"));
  if (auto *v = get(section, "param_list")) (void)expect_string_list(*v, where("param_list"));
  if (auto *v = get(section, "bounds")) {
    const std::string w = where("bounds");
    if (!v->is_array()) fail(w, "expected a list of numbers, got " + json_kind(*v));
    // long double holds every int64 exactly, so ints and floats compare correctly.
    std::optional<long double> previous;
    for (const auto &element : *v) {
      if (!element.is_number()) fail(w, fmt::format("element {} is {}, expected a number", describe(element), json_kind(element)));
      long double value = element.is_number_float() ? static_cast<long double>(element.get<double>())
                          : element.is_number_unsigned() ? static_cast<long double>(element.get<uint64_t>())
                                                          : static_cast<long double>(element.get<int64_t>());
      if (value < -9223372036854775808.0L || value > 9223372036854775807.0L) {
        fail(w, fmt::format("element {} is out of the int64 range", describe(element)));
      }
      if (previous && value <= *previous) fail(w, fmt::format("must be strictly ascending at element {}", describe(element)));
      previous = value;
    }
  }
}

void parse_task_section(const ordered_json &doc, const std::string &source, capture_config &cfg) {
  const ordered_json *section = get(doc, cfg.task);
  if (!section && cfg.task == "grad_probe") {  // msprobe's defaults
    parse_grad_probe_section(ordered_json::object(), source, cfg);
    return;
  }
  if (!section && cfg.task == "free_benchmark") {
    parse_free_benchmark_section(ordered_json::object(), source, cfg);
    return;
  }
  if (!section) return;
  if (!section->is_object()) fail(field_where(source, cfg.task), "expected an object, got " + json_kind(*section));
  check_keys(*section, section_keys(cfg.task), source, cfg.task);
  if (cfg.task == "statistics" || cfg.task == "tensor") {
    parse_dump_section(*section, source, cfg);
  } else if (cfg.task == "overflow_check") {
    parse_overflow_check_section(*section, source, cfg);
  } else if (cfg.task == "free_benchmark") {
    parse_free_benchmark_section(*section, source, cfg);
  } else if (cfg.task == "run_ut") {
    parse_run_ut_section(*section, source);
  } else if (cfg.task == "grad_probe") {
    parse_grad_probe_section(*section, source, cfg);
  }
}

// --- cross-field rules (§3.1, §3.11) ---------------------------------------------------------

void check_scope_names(const capture_config &cfg, const std::string &source) {
  const std::string where = field_where(source, cfg.task + ".scope");
  for (const auto &name : cfg.scope) {
    const bool api = entry_is_api_pattern(name);
    const bool module = entry_is_module_pattern(name);
    if (cfg.level == "L1" && !api) {
      fail(where, fmt::format("element {} is not an API entry name as level \"L1\" requires "
                              "(e.g. \"Functional.linear.0.forward\")", quote(name)));
    }
    if (cfg.level == "L0" && !module) {
      fail(where, fmt::format("element {} is not a module entry name as level \"L0\" requires "
                              "(e.g. \"Module.conv1.Conv2d.forward.0\")", quote(name)));
    }
    if (!api && !module) {
      fail(where, fmt::format("element {} is neither an API entry name (e.g. \"Functional.linear.0.forward\") "
                              "nor a module entry name (e.g. \"Module.conv1.Conv2d.forward.0\")", quote(name)));
    }
  }
}

void validate_cross_fields(capture_config &cfg, const std::string &source) {
  if (cfg.task == "structure" && cfg.level != "L0" && cfg.level != "mix") cfg.level = "mix";
  if (cfg.task == "exception_dump" && cfg.level != "L2") {
    fail(field_where(source, "level"), fmt::format("task \"exception_dump\" requires level \"L2\", got {}", quote(cfg.level)));
  }
  // PyTorch kernel dump (DebuggerConfig._check_and_adjust_config_with_l2); exception_dump's L2 is
  // MindSpore's and has none of these rules.
  if (cfg.level == "L2" && cfg.task != "exception_dump") {
    if (cfg.task != "tensor") {
      fail(field_where(source, "level"),
           fmt::format("level \"L2\" (kernel dump) requires task \"tensor\", got {}", quote(cfg.task)));
    }
    if (!cfg.scope.empty()) fail(field_where(source, cfg.task + ".scope"), "must be empty at level \"L2\"");
    if (cfg.list.size() != 1) {
      fail(field_where(source, cfg.task + ".list"),
           fmt::format("must contain exactly one API name at level \"L2\", got {}", cfg.list.size()));
    }
  } else if (!cfg.scope.empty() && cfg.task != "free_benchmark") {
    // free_benchmark's scope is ListScope's: exact names, checked against no pattern.
    check_scope_names(cfg, source);
  }
  if (cfg.async_dump && cfg.summary_mode == "md5") {
    fail(field_where(source, "async_dump"), "true cannot be combined with summary_mode \"md5\"");
  }
  if (cfg.async_dump && cfg.task == "tensor") {
    if (cfg.level == "debug") {
      cfg.list.clear();  // msprobe clears it: debug saves what the user passes to save()
    } else if (cfg.list.empty()) {
      fail(field_where(source, "tensor.list"), "must not be empty when async_dump is true with task \"tensor\"");
    }
  }
}

// The msprobe document equivalent to a config built by hand, for re-deriving it with overrides.
ordered_json document_from_fields(const capture_config &cfg) {
  ordered_json doc = ordered_json::object();
  doc["task"] = cfg.task;
  doc["dump_path"] = cfg.dump_path;
  doc["rank"] = cfg.rank;
  doc["step"] = cfg.step;
  doc["level"] = cfg.level;
  doc["enable_dataloader"] = cfg.enable_dataloader;
  doc["async_dump"] = cfg.async_dump;
  doc["precision"] = cfg.precision;
  ordered_json section = ordered_json::object();
  if (cfg.task == "statistics" || cfg.task == "tensor" || cfg.task == "free_benchmark") {
    section["scope"] = cfg.scope;
    section["list"] = cfg.list;
  }
  if (cfg.task == "free_benchmark" && cfg.free_benchmark.is_object()) {
    for (const auto &[key, value] : cfg.free_benchmark.items())
      if (key != "scope" && key != "list") section[key] = value;
  }
  if (cfg.task == "statistics" || cfg.task == "tensor") {
    section["data_mode"] = cfg.data_mode;
    section["summary_mode"] = cfg.summary_mode;
  }
  if (cfg.task == "statistics") section["tensor_list"] = cfg.tensor_list;
  if (cfg.task == "tensor") section["file_format"] = cfg.file_format;
  if (cfg.task == "overflow_check") section["overflow_nums"] = cfg.overflow_nums;
  doc[cfg.task] = std::move(section);
  doc["tprobe"] = {{"pipeline_timeout_s", cfg.pipeline_timeout_s},
                   {"on_pipeline_failure", cfg.on_pipeline_failure},
                   {"tensor_format", cfg.tensor_format}};
  if (!cfg.nan_analyze.is_null()) doc["tprobe"]["nan_analyze"] = cfg.nan_analyze;
  return doc;
}

}  // namespace

// --- public ------------------------------------------------------------------------------------

nlohmann::ordered_json capture_config::session_meta() const {
  ordered_json meta = ordered_json::object();
  meta["task"] = task;
  meta["level"] = level;
  meta["framework"] = "pytorch";
  meta["dump_path"] = dump_path;
  meta["rank"] = rank;
  meta["step"] = step;
  meta["precision"] = precision;
  meta["summary_mode"] = summary_mode;
  meta["data_mode"] = data_mode;
  meta["scope"] = scope;
  meta["list"] = list;
  meta["tensor_list"] = tensor_list;
  meta["async_dump"] = async_dump;
  if (task == "overflow_check") meta["overflow_nums"] = overflow_nums;  // tprobe-overflow stops the capture there
  meta["tensor_format"] = tensor_format;
  if (!nan_analyze.is_null()) meta["nan_analyze"] = nan_analyze;
  if (!grad_probe.is_null()) meta["grad_probe"] = grad_probe;
  if (!free_benchmark.is_null()) meta["free_benchmark"] = free_benchmark;
  if (!monitor.is_null()) meta["monitor"] = monitor;
  return meta;
}

std::vector<int64_t> config_parse_rank_or_step(const nlohmann::ordered_json &value, const std::string &field,
                                               const std::string &source) {
  if (value.is_null()) return {};
  const std::string where = field_where(source, field);
  if (!value.is_array()) fail(where, "expected a list of ints and \"a-b\" strings, got " + json_kind(value));
  if (value.size() > rank_step_max_elements) {
    fail(where, fmt::format("has {} elements, at most {} allowed", value.size(), rank_step_max_elements));
  }
  // Collected as intervals and merged, so overlapping ranges cost nothing however many are given.
  std::vector<std::pair<int64_t, int64_t>> intervals;
  intervals.reserve(value.size());
  for (const auto &element : value) {
    if (element.is_boolean()) {
      fail(where, fmt::format("element {} is a boolean, expected an integer or an \"a-b\" string", describe(element)));
    }
    if (element.is_number_integer()) {
      const bool in_range = element.is_number_unsigned() ? element.get<uint64_t>() <= rank_step_max
                                                         : element.get<int64_t>() >= 0 && element.get<int64_t>() <= rank_step_max;
      if (!in_range) fail(where, fmt::format("element {} is out of range [0, {}]", describe(element), rank_step_max));
      intervals.emplace_back(element.get<int64_t>(), element.get<int64_t>());
      continue;
    }
    if (!element.is_string()) {
      fail(where, fmt::format("element {} is {}, expected an integer or an \"a-b\" string", describe(element), json_kind(element)));
    }
    const std::string text = element.get<std::string>();
    const size_t hyphen = text.find('-');
    if (hyphen == std::string::npos || text.find('-', hyphen + 1) != std::string::npos) {
      fail(where, fmt::format("element {} is not of the form \"a-b\" (e.g. \"3-5\")", quote(text)));
    }
    bool overflow_a = false, overflow_b = false;
    auto a = parse_bound(std::string_view(text).substr(0, hyphen), overflow_a);
    auto b = parse_bound(std::string_view(text).substr(hyphen + 1), overflow_b);
    if ((!a && !overflow_a) || (!b && !overflow_b)) {
      fail(where, fmt::format("element {} is not a valid range (the hyphen must start and end with decimal numbers)",
                              quote(text)));
    }
    if (!a || !b || *a > rank_step_max || *b > rank_step_max) {
      fail(where, fmt::format("element {} is not a valid range (both ends must be in [0, {}])", quote(text), rank_step_max));
    }
    if (*a > *b) fail(where, fmt::format("element {} is not a valid range (a <= b required)", quote(text)));
    intervals.emplace_back(*a, *b);
  }
  std::sort(intervals.begin(), intervals.end());
  std::vector<int64_t> out;
  for (const auto &[a, b] : intervals) {
    for (int64_t i = out.empty() ? a : std::max(a, out.back() + 1); i <= b; ++i) out.push_back(i);
  }
  return out;
}

static void parse_tprobe_section(const ordered_json &section, const std::string &source, capture_config &cfg) {
  const std::string where_section = field_where(source, "tprobe");
  if (!section.is_object()) fail(where_section, "expected an object, got " + json_kind(section));
  check_keys(section, tprobe_keys, source, "tprobe");
  auto where = [&](const char *key) { return fmt::format("{}: field \"tprobe.{}\"", source, key); };
  if (auto *v = get(section, "pipeline_timeout_s")) {
    if (!v->is_number()) fail(where("pipeline_timeout_s"), "expected a number of seconds, got " + json_kind(*v));
    const double seconds = v->get<double>();
    // -1 (wait forever) is the only negative allowed; the upper bound keeps milliseconds in an int.
    if (!(seconds == -1 || (seconds > 0 && seconds <= 86400)))
      fail(where("pipeline_timeout_s"), fmt::format("{} is not -1 (forever) or in (0, 86400]", v->dump()));
    cfg.pipeline_timeout_s = seconds;
  }
  if (auto *v = get(section, "on_pipeline_failure"))
    cfg.on_pipeline_failure = expect_one_of(*v, {"raise", "warn"}, where("on_pipeline_failure"));
  if (auto *v = get(section, "tensor_format")) cfg.tensor_format = expect_one_of(*v, {"npy", "pt"}, where("tensor_format"));
  if (auto *v = get(section, "nan_analyze")) {
    (void)nan_rules_from_json(*v, where("nan_analyze"));  // validated now: a typo must not wait for the stage
    cfg.nan_analyze = *v;
  }
}

capture_config config_parse(const nlohmann::ordered_json &doc, const std::string &source) {
  if (!doc.is_object()) {
    throw usage_error(fmt::format("{}: expected a JSON object at the top level, got {}", source, json_kind(doc)));
  }
  std::vector<std::string> top_level_keys = common_keys;
  top_level_keys.insert(top_level_keys.end(), task_names.begin(), task_names.end());
  check_keys(doc, top_level_keys, source, "");

  capture_config cfg;
  cfg.source = doc;
  cfg.source_name = source;
  auto where = [&](const char *field) { return field_where(source, field); };
  if (auto *v = get(doc, "task")) {
    // msprobe's monitor is no PrecisionDebugger task: TrainerMon reads its own config.
    if (v->is_string() && v->get<std::string>() == "monitor")
      fail(where("task"), "\"monitor\" is msprobe's TrainerMon (训练状态监控), not a task of config.json: use "
                          "`from tprobe import TrainerMon; TrainerMon(\"monitor.json\")` with a monitor config "
                          "(docs/stages/monitor.md)");
    cfg.task = expect_one_of(*v, task_names, where("task"));
  }
  const ordered_json *dump_path = get(doc, "dump_path");
  if (!dump_path) fail(where("dump_path"), "the dump_path not found (a non-empty path is required)");
  cfg.dump_path = absolute_dump_path(expect_string(*dump_path, where("dump_path")), where("dump_path"));
  if (auto *v = get(doc, "rank")) cfg.rank = config_parse_rank_or_step(*v, "rank", source);
  if (auto *v = get(doc, "step")) cfg.step = config_parse_rank_or_step(*v, "step", source);
  if (auto *v = get(doc, "level")) cfg.level = expect_one_of(*v, level_names, where("level"));
  if (auto *v = get(doc, "enable_dataloader")) cfg.enable_dataloader = expect_bool(*v, where("enable_dataloader"));
  if (auto *v = get(doc, "async_dump")) cfg.async_dump = expect_bool(*v, where("async_dump"));
  if (auto *v = get(doc, "precision")) cfg.precision = expect_one_of(*v, {"low", "high"}, where("precision"));

  // The spelling, beside tprobe.tensor_format (which wins when both are given).
  if (auto *v = get(doc, "tensor_format")) cfg.tensor_format = expect_one_of(*v, {"npy", "pt"}, where("tensor_format"));
  if (auto *v = get(doc, "tprobe")) parse_tprobe_section(*v, source, cfg);

  parse_task_section(doc, source, cfg);
  validate_cross_fields(cfg, source);
  return cfg;
}

void config_check_dump_path_usable(const capture_config &cfg) {
  const std::string where = field_where(cfg.source_name, "dump_path");
  // The nearest existing ancestor decides: the writer creates what is missing below it.
  fs::path p = cfg.dump_path;
  std::error_code ec;
  while (!fs::exists(fs::symlink_status(p, ec)) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  const auto status = fs::status(p, ec);
  if (ec) throw system_error_from_errno("inspect", p.string(), ec.value());
  if (!fs::is_directory(status)) {
    fail(where, p.string() == cfg.dump_path
                    ? fmt::format("{} exists and is not a directory", quote(cfg.dump_path))
                    : fmt::format("{} cannot be created: {} is not a directory", quote(cfg.dump_path), p.string()));
  }
  // access() says yes to root on a read-only or special file system; only trying tells. A probe
  // directory is made and removed at once.
  std::string probe = (p / ".tprobe-probe-XXXXXX").string();
  if (::mkdtemp(probe.data()) == nullptr) {
    const int e = errno;
    fail(where, fmt::format("{} {}: {}", quote(cfg.dump_path),
                            p.string() == cfg.dump_path ? "is not writable" : "cannot be created in " + p.string(),
                            std::strerror(e)));
  }
  ::rmdir(probe.c_str());
}

capture_config config_load(const std::string &path) {
  std::unique_ptr<std::FILE, int (*)(std::FILE *)> file(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!file) throw system_error_from_errno("open", path, errno);
  std::string text;
  char buffer[1 << 16];
  size_t n = 0;
  while ((n = std::fread(buffer, 1, sizeof buffer, file.get())) > 0) text.append(buffer, n);
  if (std::ferror(file.get())) throw system_error_from_errno("read", path, errno);

  ordered_json doc;
  try {
    doc = ordered_json::parse(text);
  } catch (const nlohmann::json::exception &e) {  // parse_error, and out_of_range for a number like 1e309
    // e.what() is "[json.exception.parse_error.101] parse error at line L, column C: ..."
    std::string detail = e.what();
    if (size_t end = detail.find("] "); detail.starts_with("[json.exception.") && end != std::string::npos) {
      detail.erase(0, end + 2);
    }
    throw usage_error(fmt::format("{}: invalid JSON: {}", path, detail));
  }
  return config_parse(doc, path);
}

void config_apply_overrides(capture_config &cfg, const config_overrides &overrides) {
  ordered_json doc = cfg.source.is_object() ? cfg.source : document_from_fields(cfg);
  if (overrides.task) doc["task"] = *overrides.task;
  if (overrides.dump_path) doc["dump_path"] = *overrides.dump_path;
  if (overrides.level) doc["level"] = *overrides.level;
  if (overrides.step) doc["step"] = *overrides.step;
  const std::string name = cfg.source_name.empty() ? "config" : cfg.source_name;
  capture_config updated = config_parse(doc, name + " (with overrides)");
  updated.source = cfg.source;
  updated.source_name = cfg.source_name;
  cfg = std::move(updated);
}

config_overrides config_overrides_from_env() {
  config_overrides overrides;
  if (const char *task = std::getenv("TPROBE_TASK")) {
    check_one_of(task, task_names, "TPROBE_TASK");
    overrides.task = task;
  }
  if (const char *dump_path = std::getenv("TPROBE_DUMP_PATH")) {
    (void)absolute_dump_path(dump_path, "TPROBE_DUMP_PATH");
    overrides.dump_path = dump_path;
  }
  if (const char *level = std::getenv("TPROBE_LEVEL")) {
    check_one_of(level, level_names, "TPROBE_LEVEL");
    overrides.level = level;
  }
  return overrides;
}

// --- which tasks run --------------------------------------------------------------------------

const std::vector<std::string> &config_task_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all = task_names;
    all.push_back("monitor");  // tprobe_monitor_open's sessions (TrainerMon), never a config.json's
    return all;
  }();
  return names;
}

const std::vector<std::string> &config_built_tasks() {
  static const std::vector<std::string> built{"statistics",     "tensor",    "overflow_check", "grad_probe",
                                              "free_benchmark", "structure", "monitor"};
  return built;
}

capture_config config_for_monitor(const std::string &monitor_config_path, const std::string &group_json, int rank) {
  if (monitor_config_path.empty()) throw usage_error("no monitor config: pass the path of a monitor json");
  const monitor_config monitor = monitor_config_read(monitor_config_path);
  capture_config cfg;
  cfg.task = "monitor";
  cfg.source_name = monitor_config_path;
  const char *env = std::getenv("MONITOR_OUTPUT_DIR");
  cfg.dump_path = absolute_dump_path(env && *env ? env : "./monitor_output", "MONITOR_OUTPUT_DIR");
  cfg.monitor = monitor.json;
  cfg.monitor["warnings"] = monitor.warnings;
  cfg.monitor["output_dir"] = cfg.dump_path;
  // msprobe's AnomalyDataFactory: pp_stage = dist.get_group_rank(group, rank), group_mates =
  // dist.get_process_group_ranks(group); the framework knows its group, the stage writes them.
  const int64_t own = rank < 0 ? 0 : rank;
  int64_t pp_stage = own;
  std::vector<int64_t> mates{own};
  if (!group_json.empty()) {
    const std::string what = "tprobe_monitor_open: group";
    nlohmann::json g;
    try {
      g = nlohmann::json::parse(group_json);
    } catch (const nlohmann::json::exception &) {
      throw usage_error(fmt::format("{}: not JSON: {}", what, group_json));
    }
    if (!g.is_object()) throw usage_error(fmt::format("{}: expected an object {{\"pp_stage\", \"group_mates\"}}", what));
    for (const auto &[key, value] : g.items()) {
      if (key == "pp_stage") {
        if (!value.is_number_integer() || value.get<int64_t>() < 0)
          throw usage_error(fmt::format("{}: \"pp_stage\": expected an integer >= 0, got {}", what, value.dump()));
        pp_stage = value.get<int64_t>();
      } else if (key == "group_mates") {
        if (!value.is_array() || value.empty())
          throw usage_error(fmt::format("{}: \"group_mates\": expected a non-empty list of ranks, got {}", what, value.dump()));
        mates.clear();
        for (const auto &r : value) {
          if (!r.is_number_integer() || r.get<int64_t>() < 0)
            throw usage_error(fmt::format("{}: \"group_mates\": {} is not a rank", what, r.dump()));
          mates.push_back(r.get<int64_t>());
        }
      } else {
        throw usage_error(fmt::format("{}: unknown key \"{}\" (pp_stage, group_mates)", what, key));
      }
    }
  }
  cfg.monitor["pp_stage"] = pp_stage;
  cfg.monitor["group_mates"] = mates;
  return cfg;
}

void config_check_task_runs(const capture_config &cfg, const config_pipeline &pipeline) {
  const std::string source = cfg.source_name.empty() ? "config" : cfg.source_name;
  // msprobe's pre-check is no capture task: it replays a dump afterwards (docs/msprobe-compat.md §7.1).
  if (cfg.task == "run_ut")
    throw usage_error(fmt::format("{}: task \"run_ut\" replays a dump, it captures nothing: dump with task "
                                  "\"tensor\" (or \"statistics\") at level L1, then run `tprobe precheck DUMP "
                                  "-config {}` (docs/stages/precheck.md)",
                                  source, source));
  if (!contains(config_built_tasks(), cfg.task))
    throw usage_error(fmt::format("{}: task {} is not built in tprobe yet (built: {})", source, quote(cfg.task),
                                  fmt::join(config_built_tasks(), ", ")));
  // msprobe fuzzes whole modules at L0 and mix (their forward re-run); tprobe re-runs API calls only.
  if (cfg.task == "free_benchmark" && cfg.level != "L1")
    throw usage_error(fmt::format("{}: task \"free_benchmark\" at level {} is not built in tprobe yet: it re-runs "
                                  "API calls, level \"L1\"",
                                  source, quote(cfg.level)));
  if (!pipeline.tasks.empty() && !contains(pipeline.tasks, cfg.task))
    throw usage_error(fmt::format("{}: task {} is not one that {} can do (its tasks: {})", source, quote(cfg.task),
                                  pipeline.manifest.empty() ? "the pipeline" : pipeline.manifest,
                                  fmt::join(pipeline.tasks, ", ")));
}

config_pipeline config_pipeline_from_env() {
  config_pipeline pipeline;
  if (const char *manifest = std::getenv("TPROBE_PIPELINE")) pipeline.manifest = manifest;
  if (const char *tasks = std::getenv("TPROBE_PIPELINE_TASKS")) {
    std::string_view rest = tasks;
    while (!rest.empty()) {
      const size_t comma = rest.find(',');
      const std::string task(rest.substr(0, comma));
      if (!task.empty()) {
        check_one_of(task, config_task_names(), "TPROBE_PIPELINE_TASKS");
        pipeline.tasks.push_back(task);
      }
      rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    }
  }
  return pipeline;
}

// --- capture_filter ----------------------------------------------------------------------------

capture_filter::capture_filter(const capture_config &cfg)
    : ranks_(cfg.rank),
      steps_(cfg.step),
      scope_(cfg.scope),
      list_(cfg.list),
      // msprobe ignores tensor_list at level debug.
      tensor_list_(cfg.task == "statistics" && cfg.level != "debug" ? cfg.tensor_list : std::vector<std::string>{}),
      // overflow_check: msprobe writes every tensor of an overflowing call; tprobe-overflow holds them
      // until the verdict and drops the rest.
      save_all_tensors_(cfg.task == "tensor" || cfg.task == "overflow_check"),
      crc32_(cfg.summary_mode == "md5"),
      data_mode_(cfg.data_mode),
      mix_(cfg.level == "mix"),
      structured_(cfg.level == "mix" || cfg.level == "L0") {
  if (cfg.task == "structure") data_mode_.without_values();  // no tensor is read, no value sent
  std::sort(ranks_.begin(), ranks_.end());
  std::sort(steps_.begin(), steps_.end());
}

bool capture_filter::rank_enabled(int rank) const {
  if (ranks_.empty()) return true;
  return std::binary_search(ranks_.begin(), ranks_.end(), static_cast<int64_t>(rank < 0 ? 0 : rank));
}

bool capture_filter::step_enabled(int64_t step) const {
  return steps_.empty() || std::binary_search(steps_.begin(), steps_.end(), step);
}

bool capture_filter::past_last_step(int64_t step) const { return !steps_.empty() && step > steps_.back(); }

bool capture_filter::entry_enabled(std::string_view entry) {
  const bool in_range = in_scope_range(entry);  // always runs: it advances the scope state
  if (!in_range) return false;
  if (in_list(entry)) return true;
  if (!in_list_module_or_its_backward(entry)) return false;
  if (entry_parse(entry).is_forward()) forwards_in_list_.emplace(entry);  // its backward follows it in
  return true;
}

bool capture_filter::in_list_module_or_its_backward(std::string_view entry) const {
  if (list_modules_running_.empty() && forwards_in_list_.empty()) return false;
  const entry_name name = entry_parse(entry);
  if (name.is_forward()) return !list_modules_running_.empty();
  return name.is_backward() && forwards_in_list_.contains(entry_with_direction(entry, entry_direction::forward));
}

void capture_filter::module_begin(std::string_view forward_entry) {
  if (!scope_.empty() && forward_entry == scope_[0]) in_scope_ = true;
  if (mix_ && !list_.empty() && in_list(forward_entry)) list_modules_running_.emplace_back(forward_entry);
}

void capture_filter::module_end(std::string_view forward_entry) {
  if (!scope_.empty() && forward_entry == scope_[1]) in_scope_ = false;
  // The innermost first: a module ends before the one it runs in.
  for (auto it = list_modules_running_.rbegin(); it != list_modules_running_.rend(); ++it)
    if (*it == forward_entry) {
      list_modules_running_.erase(std::next(it).base());
      break;
    }
}

bool capture_filter::entry_wanted(std::string_view entry) const {
  if (!in_list(entry) && !in_list_module_or_its_backward(entry)) return false;
  if (scope_.empty() || in_scope_ || entry == scope_[0]) return true;  // in_scope_range's in_range
  const entry_name name = entry_parse(entry);
  if (name.is_backward()) return forwards_in_scope_.contains(entry_with_direction(entry, entry_direction::forward));
  if (name.is_parameters_grad()) return modules_in_scope_.contains(std::string(name.base));
  return false;
}

bool capture_filter::in_scope_range(std::string_view entry) {
  if (scope_.empty()) return true;
  if (entry == scope_[0]) in_scope_ = true;
  bool in_range = in_scope_;
  if (in_scope_ && entry == scope_[1]) in_scope_ = false;

  const entry_name name = entry_parse(entry);
  if (in_range && name.is_forward()) {
    forwards_in_scope_.emplace(entry);
    if (name.count_last) modules_in_scope_.emplace(name.base);
  } else if (!in_range && name.is_backward()) {
    in_range = forwards_in_scope_.contains(entry_with_direction(entry, entry_direction::forward));
  } else if (!in_range && name.is_parameters_grad()) {
    in_range = modules_in_scope_.contains(std::string(name.base));
  }
  return in_range;
}

bool capture_filter::in_list(std::string_view entry) const {
  if (list_.empty()) return true;
  return std::any_of(list_.begin(), list_.end(),
                     [&](const std::string &item) { return entry.find(item) != std::string_view::npos; });
}

bool capture_filter::slot_enabled(std::string_view entry, std::string_view slot) const {
  if (data_mode_.allows_everything()) return true;
  return data_mode_.allows(entry, slot);
}

bool capture_filter::save_tensor(std::string_view entry) const {
  if (save_all_tensors_) return true;
  return std::any_of(tensor_list_.begin(), tensor_list_.end(),
                     [&](const std::string &item) { return entry.find(item) != std::string_view::npos; });
}

void capture_filter::reset_step() {
  in_scope_ = false;
  forwards_in_scope_.clear();
  modules_in_scope_.clear();
  list_modules_running_.clear();
  forwards_in_list_.clear();
}

}  // namespace tprobe
