// config_check.cpp: see config_check.h. The rules follow msprobe 8.3.3's checkers line by line
// (names in comments); the tables are its resource/*.yaml.
#include "config_check.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include <fmt/format.h>
#include <zlib.h>

#include "errors.h"
#include "pyjson.h"
#include "torch_save.h"

namespace tprobe {
namespace {

using ojson = nlohmann::ordered_json;
using row = std::vector<ojson>;

// ---- zip ------------------------------------------------------------------------------------------

std::string read_whole(const std::string &path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw system_error_from_errno("open", path, errno ? errno : EIO);
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) throw system_error_from_errno("read", path, errno ? errno : EIO);
  return s.str();
}

std::string inflate_member(std::string_view in, uint64_t size, const std::string &where) {
  std::string out(size, '\0');
  z_stream z{};
  if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw system_error(where + ": zlib inflateInit2 failed");
  z.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef *>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const int rc = inflate(&z, Z_FINISH);
  const bool ok = rc == Z_STREAM_END && z.total_out == size;
  inflateEnd(&z);
  if (!ok) throw usage_error(where + ": corrupt DEFLATE data");
  return out;
}

// zip's date for 1980-01-01 00:00:00 (zipfile.ZipInfo's default).
constexpr uint16_t dos_date_1980 = (0 << 9) | (1 << 5) | 1;

void put16(std::string &s, uint16_t v) { s.push_back(char(v & 0xff)), s.push_back(char(v >> 8)); }
void put32(std::string &s, uint32_t v) { put16(s, uint16_t(v & 0xffff)), put16(s, uint16_t(v >> 16)); }

// ---- difflib --------------------------------------------------------------------------------------

// SequenceMatcher's matching-block count over a[alo, ahi) and b[blo, bhi): find_longest_match
// (the longest run of b's non-popular characters, leftmost in a, then in b; then widened by equal
// characters on both sides, popular ones too, as difflib does), recursively left and right of it.
size_t matched_chars(std::string_view a, size_t alo, size_t ahi, std::string_view b, size_t blo, size_t bhi,
                     const std::set<char> &popular) {
  if (alo >= ahi || blo >= bhi) return 0;
  size_t besti = alo, bestj = blo, best = 0;
  std::vector<size_t> prev(bhi - blo + 1, 0), cur(bhi - blo + 1, 0);
  for (size_t i = alo; i < ahi; ++i) {
    for (size_t j = blo; j < bhi; ++j) {
      const size_t k = (a[i] == b[j] && !popular.count(b[j])) ? prev[j - blo] + 1 : 0;
      cur[j - blo + 1] = k;
      if (k > best) best = k, besti = i + 1 - k, bestj = j + 1 - k;
    }
    std::swap(prev, cur);
  }
  while (besti > alo && bestj > blo && a[besti - 1] == b[bestj - 1]) --besti, --bestj, ++best;
  while (besti + best < ahi && bestj + best < bhi && a[besti + best] == b[bestj + best]) ++best;
  if (best == 0) return 0;
  return best + matched_chars(a, alo, besti, b, blo, bestj, popular) +
         matched_chars(a, besti + best, ahi, b, bestj + best, bhi, popular);
}

// ---- tables (resource/*.yaml) ---------------------------------------------------------------------

struct env_side {
  const char *name;
  ojson default_value;
};
struct env_item {
  std::optional<env_side> npu, gpu;
};
// env.yaml in its order; its defaults as yaml loads them (False: bool, None: the string "None").
const std::vector<env_item> &env_items() {
  static const std::vector<env_item> items = {
      {env_side{"HCCL_DETERMINISTIC", false}, env_side{"NCCL_DETERMINISTIC", false}},
      {env_side{"HCCL_ALGO", "None"}, env_side{"NCCL_ALGO", "None"}},
      {env_side{"HCCL_INTRA_ROCE_ENABLE", 0}, std::nullopt},
      {env_side{"HCCL_INTRA_ROCE_ENABLE", 1}, std::nullopt},  // HCCL_INTRA_PICE_ENABLE's entry
      {env_side{"ASCEND_LAUNCH_BLOCKING", 0}, env_side{"CUDA_LAUNCH_BLOCKING", 0}},
      {env_side{"ASCEND_RT_VISIBLE_DEVICES", "None"}, env_side{"CUDA_VISIBLE_DEVICES", "None"}},
  };
  return items;
}

const std::vector<std::string> dependency_packages = {"transformers", "deepspeed", "megatron",
                                                      "numpy",        "datasets",  "peft"};

const std::vector<std::pair<std::string, std::vector<std::string>>> &hyperparameter_aliases() {
  static const std::vector<std::pair<std::string, std::vector<std::string>>> t = {
      {"learning_rate", {"lr", "learningrate"}},
      {"batch_size", {"batch", "bs", "batch_size_per_gpu"}},
      {"epochs", {"num_epochs", "max_epochs", "epoch"}},
      {"weight_decay", {"wd", "weightdecay"}},
      {"dropout_rate", {"dropout", "drop_rate"}},
      {"compute_dtype", {"bf16", "fp32"}},
      {"residual_dtype", {"fp32_residual_connection"}},
      {"softmax_compute_dtype", {"attention_softmax_in_fp32"}},
  };
  return t;
}

// ---- helpers --------------------------------------------------------------------------------------

ojson parse_entry(const config_pack &pack, const std::string &entry, const std::string &pack_name) {
  return pyjson_parse(pack.at(entry), pack_name + ": entry " + entry);
}

bool has_item(const config_pack &pack, const std::string &target) {
  if (pack.count(target)) return true;
  const auto it = pack.lower_bound(target + "/");
  return it != pack.end() && it->first.compare(0, target.size() + 1, target + "/") == 0;
}

// Python's to_str_if_number: ints and floats (bools too: int's subclass) become str(value).
ojson to_str_if_number(const ojson &v) {
  if (v.is_boolean()) return v.get<bool>() ? "True" : "False";
  if (v.is_number_float()) return py_float_repr(v.get<double>());
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  return v;
}

// Python's `a != b` for JSON values that json.load made (1 == 1.0 == True).
bool py_equal(const ojson &a, const ojson &b) {
  const auto numeric = [](const ojson &v) { return v.is_number() || v.is_boolean(); };
  if (numeric(a) && numeric(b)) {
    const auto d = [](const ojson &v) { return v.is_boolean() ? (v.get<bool>() ? 1.0 : 0.0) : v.get<double>(); };
    return d(a) == d(b);
  }
  if (a.is_array() && b.is_array()) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i)
      if (!py_equal(a[i], b[i])) return false;
    return true;
  }
  if (a.is_object() && b.is_object()) {
    if (a.size() != b.size()) return false;
    for (const auto &[k, v] : a.items())
      if (!b.contains(k) || !py_equal(v, b.at(k))) return false;
    return true;
  }
  return a == b;
}

double number_of(const ojson &v, const std::string &where) {
  if (!v.is_number()) throw usage_error(where + ": a feature is not a number");
  return v.get<double>();
}

// |b - c| / b (signed denominator, as msprobe), None when b == 0.
ojson relative_diff(double b, double c) {
  if (b == 0) return nullptr;
  return std::fabs(b - c) / b;
}

// A feature's relative difference; empty when either side has no number (tprobe's dynamic pack
// writes null for an empty tensor's max and min).
ojson feature_diff(const ojson &b, const ojson &c, const std::string &where) {
  if (b.is_null() || c.is_null()) return nullptr;
  return relative_diff(number_of(b, where), number_of(c, where));
}

const char *feature_keys[] = {"max", "min", "mean", "norm"};

int step_or_rank(std::string s, const char *prefix, const std::string &where) {
  const size_t p = s.find(prefix);
  if (p != std::string::npos) s.erase(p, std::strlen(prefix));
  try {
    size_t used = 0;
    const int v = std::stoi(s, &used);
    if (used == s.size()) return v;
  } catch (const std::exception &) {
  }
  throw usage_error(fmt::format("{}: folder \"{}\" is not {}N", where, s, prefix));
}

std::vector<std::string> split_path(const std::string &s) {
  std::vector<std::string> out;
  size_t b = 0;
  for (size_t e; (e = s.find('/', b)) != std::string::npos; b = e + 1) out.push_back(s.substr(b, e - b));
  out.push_back(s.substr(b));
  return out;
}

void sort_by_step_rank(std::vector<row> &rows, size_t name_col) {
  std::stable_sort(rows.begin(), rows.end(), [&](const row &a, const row &b) {
    if (a[0] != b[0]) return a[0].get<int>() < b[0].get<int>();
    if (a[1] != b[1]) return a[1].get<int>() < b[1].get<int>();
    return a[name_col].get<std::string>() < b[name_col].get<std::string>();
  });
}

// weights_checker.py compare_weight_file, one weight.
row weight_row(int step, int rank, const std::string &name, const ojson *b, const ojson *c, const std::string &where) {
  row r = {step, rank, name, nullptr, nullptr, nullptr, nullptr, nullptr};
  if (!b) return r[3] = "only cmp have", r;
  if (!c) return r[3] = "only bench have", r;
  bool equal = true;
  for (int k = 0; k < 4; ++k) {
    if (!b->contains(feature_keys[k]) || !c->contains(feature_keys[k]))
      throw usage_error(fmt::format("{}: weight \"{}\" has no \"{}\"", where, name, feature_keys[k]));
    equal = equal && py_equal(b->at(feature_keys[k]), c->at(feature_keys[k]));
  }
  r[3] = equal;
  for (int k = 0; k < 4; ++k)
    r[4 + k] = feature_diff(b->at(feature_keys[k]), c->at(feature_keys[k]), where);
  return r;
}

// dataset_checker.py compare_dataset_dicts.
void dataset_rows(const ojson &d1, const ojson &d2, const std::string &tag, int step, int rank, std::vector<row> &out,
                  const std::string &where, int depth = 0) {
  if (depth > 200) throw usage_error(where + ": nested too deep");
  if (!d1.is_object() || !d2.is_object()) throw usage_error(where + ": " + (tag.empty() ? "the file" : tag) + " is not an object");
  for (const auto &[key, v1] : d1.items()) {
    const std::string t = tag.empty() ? key : tag + "." + key;
    if (!d2.contains(key)) {
      out.push_back({step, rank, t, false, nullptr, nullptr, nullptr, nullptr});
      continue;
    }
    const ojson &v2 = d2.at(key);
    if (!v1.is_object()) continue;
    std::set<std::string> keys;
    for (const auto &[k, _] : v1.items()) keys.insert(k);
    if (keys == std::set<std::string>{"max", "min", "mean", "norm"}) {
      if (!v2.is_object()) throw usage_error(where + ": " + t + " is not an object on the cmp side");
      row r = {step, rank, t, py_equal(v1, v2), nullptr, nullptr, nullptr, nullptr};
      for (int k = 0; k < 4; ++k) {
        if (!v2.contains(feature_keys[k])) throw usage_error(where + ": " + t + " has no " + feature_keys[k]);
        r[4 + k] = feature_diff(v1.at(feature_keys[k]), v2.at(feature_keys[k]), where);
      }
      out.push_back(std::move(r));
    } else {
      dataset_rows(v1, v2, t, step, rank, out, where, depth + 1);
    }
  }
  for (const auto &[key, _] : d2.items())
    if (!d1.contains(key)) out.push_back({step, rank, tag.empty() ? key : tag + "." + key, false, nullptr, nullptr, nullptr, nullptr});
}

std::string pass_or_error(const std::vector<row> &rows) {
  for (const auto &r : rows)
    if (r[3].is_boolean() && !r[3].get<bool>()) return "error";
  return "pass";
}

std::string lstrip(std::string_view s) {
  size_t b = 0;
  while (b < s.size() && std::isspace(static_cast<unsigned char>(s[b]))) ++b;
  return std::string(s.substr(b));
}
std::string rstrip(std::string_view s) {
  size_t e = s.size();
  while (e > 0 && std::isspace(static_cast<unsigned char>(s[e - 1]))) --e;
  return std::string(s.substr(0, e));
}

std::string replace_all(std::string s, const std::string &from, const std::string &to) {
  if (from.empty()) return s;
  for (size_t p = 0; (p = s.find(from, p)) != std::string::npos; p += to.size()) s.replace(p, from.size(), to);
  return s;
}

// random_checker.py _parse_frame: "File {path}, line {n}, in {func}, {code}" split at single spaces.
struct frame_parts {
  std::string path, func, code;
};
frame_parts parse_frame(const std::string &frame) {
  std::vector<std::string> parts;
  size_t b = 0;
  for (size_t e; (e = frame.find(' ', b)) != std::string::npos; b = e + 1) parts.push_back(frame.substr(b, e - b));
  parts.push_back(frame.substr(b));
  frame_parts f;
  if (parts.size() > 6) {
    const auto chop = [](const std::string &x) { return x.empty() ? x : x.substr(0, x.size() - 1); };
    f.path = chop(parts[1]);
    f.func = chop(parts[5]);
    for (size_t i = 6; i < parts.size(); ++i) f.code += (i > 6 ? " " : "") + parts[i];
  }
  return f;
}

std::vector<std::string> stack_of(const ojson &entry, const std::string &where) {
  if (!entry.is_object() || !entry.contains("stack") || !entry.at("stack").is_array() || !entry.contains("count") ||
      !entry.at("count").is_number_integer())
    throw usage_error(where + ": an entry is not {\"count\": N, \"stack\": [...]}");
  std::vector<std::string> s;
  for (const auto &f : entry.at("stack")) {
    if (!f.is_string()) throw usage_error(where + ": a stack frame is not a string");
    s.push_back(f.get<std::string>());
  }
  return s;
}

std::string join_lines(const std::vector<std::string> &s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) out += (i ? "\n" : "") + s[i];
  return out;
}

}  // namespace

// ---- zip ------------------------------------------------------------------------------------------

config_pack config_pack_read(const std::string &path) {
  const std::string file = read_whole(path);
  const auto bytes = std::span<const std::byte>(reinterpret_cast<const std::byte *>(file.data()), file.size());
  config_pack pack;
  for (const zip_member &m : zip_members(bytes, path)) {
    const std::string where = path + ": entry " + m.name;
    if (m.name.empty() || m.name[0] == '/' || m.name.find('\\') != std::string::npos)
      throw usage_error(where + ": not a relative path");
    for (const auto &part : split_path(m.name))
      if (part == "..") throw usage_error(where + ": a \"..\" would leave the extraction folder");
    if (m.name.back() == '/') continue;  // a directory
    if (m.data_offset + m.compressed_size > file.size()) throw usage_error(where + ": truncated");
    const std::string_view raw(file.data() + m.data_offset, m.compressed_size);
    std::string data;
    if (m.method == 0) data = std::string(raw);
    else if (m.method == 8) data = inflate_member(raw, m.size, where);
    else throw usage_error(fmt::format("{}: compression method {} (only stored and DEFLATE are read)", where, m.method));
    if (crc32(0, reinterpret_cast<const Bytef *>(data.data()), static_cast<uInt>(data.size())) != m.crc32)
      throw usage_error(where + ": CRC-32 mismatch");
    if (!pack.emplace(m.name, std::move(data)).second) throw usage_error(where + ": listed twice");
  }
  return pack;
}

void config_pack_write(const std::string &path, const std::vector<std::pair<std::string, std::string>> &entries) {
  std::string out, central;
  for (const auto &entry : entries) {
    // Named, not structured bindings: clang (the fuzz build) does not capture those in a lambda.
    const std::string &name = entry.first;
    const std::string &data = entry.second;
    if (data.size() > 0xFFFFFFF0u || out.size() > 0xFFFFFFF0u) throw usage_error(path + ": pack too large (no zip64 here)");
    uLongf bound = compressBound(data.size()) + 64;
    std::string deflated(bound, '\0');
    z_stream z{};
    if (deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, -MAX_WBITS, 8, Z_DEFAULT_STRATEGY) != Z_OK)
      throw system_error("zlib deflateInit2 failed");
    z.next_in = reinterpret_cast<Bytef *>(const_cast<char *>(data.data()));
    z.avail_in = static_cast<uInt>(data.size());
    z.next_out = reinterpret_cast<Bytef *>(deflated.data());
    z.avail_out = static_cast<uInt>(deflated.size());
    const int rc = deflate(&z, Z_FINISH);
    deflated.resize(z.total_out);
    deflateEnd(&z);
    if (rc != Z_STREAM_END) throw system_error("zlib deflate failed for " + name);
    const uint32_t crc = crc32(0, reinterpret_cast<const Bytef *>(data.data()), static_cast<uInt>(data.size()));
    const uint32_t offset = static_cast<uint32_t>(out.size());
    const auto header = [&](std::string &s, bool in_central) {
      put32(s, in_central ? 0x02014b50 : 0x04034b50);
      if (in_central) put16(s, 0x0314);  // made by: Unix, 2.0
      put16(s, 20), put16(s, 0), put16(s, 8), put16(s, 0), put16(s, dos_date_1980);
      put32(s, crc), put32(s, static_cast<uint32_t>(deflated.size())), put32(s, static_cast<uint32_t>(data.size()));
      put16(s, static_cast<uint16_t>(name.size())), put16(s, 0);
      if (in_central) {
        put16(s, 0), put16(s, 0), put16(s, 0), put32(s, 0600u << 16), put32(s, offset);
      }
      s += name;
    };
    header(out, false);
    out += deflated;
    header(central, true);
  }
  const uint32_t cd_offset = static_cast<uint32_t>(out.size());
  out += central;
  put32(out, 0x06054b50), put16(out, 0), put16(out, 0);
  put16(out, static_cast<uint16_t>(entries.size())), put16(out, static_cast<uint16_t>(entries.size()));
  put32(out, static_cast<uint32_t>(central.size())), put32(out, cd_offset), put16(out, 0);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw system_error_from_errno("create", path, errno ? errno : EIO);
  f.write(out.data(), static_cast<std::streamsize>(out.size()));
  f.close();
  if (!f) throw system_error_from_errno("write", path, errno ? errno : EIO);
}

void config_pack_extract(const config_pack &pack, const std::string &dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw system_error(fmt::format("cannot create {}: {}", dir, ec.message()));
  for (const auto &[name, data] : pack) {
    const fs::path p = fs::path(dir) / name;
    fs::create_directories(p.parent_path(), ec);
    if (ec) throw system_error(fmt::format("cannot create {}: {}", p.parent_path().string(), ec.message()));
    std::ofstream f(p, std::ios::binary | std::ios::trunc);
    if (!f) throw system_error_from_errno("create", p.string(), errno ? errno : EIO);
    f.write(data.data(), static_cast<std::streamsize>(data.size()));
    f.close();
    if (!f) throw system_error_from_errno("write", p.string(), errno ? errno : EIO);
  }
}

// ---- rules ----------------------------------------------------------------------------------------

std::string config_pass_check(const std::vector<std::string> &levels) {
  if (std::find(levels.begin(), levels.end(), "error") != levels.end()) return "error";
  if (std::find(levels.begin(), levels.end(), "warning") != levels.end()) return "warning";
  return "pass";
}

double difflib_ratio(std::string_view a, std::string_view b) {
  if (a.empty() && b.empty()) return 1.0;
  // autojunk: for len(b) >= 200, characters occurring more than 1% + 1 times in b are junk.
  std::set<char> junk;
  if (b.size() >= 200) {
    std::map<char, size_t> n;
    for (char ch : b) ++n[ch];
    const size_t limit = b.size() / 100 + 1;
    for (const auto &[ch, k] : n)
      if (k > limit) junk.insert(ch);
  }
  return 2.0 * static_cast<double>(matched_chars(a, 0, a.size(), b, 0, b.size(), junk)) / static_cast<double>(a.size() + b.size());
}

config_sheet config_check_env(const ojson &bench_file, const ojson &cmp_file) {
  // msprobe's compare_env_data(npu_path, bench_path) is called (bench, cmp): its "cmp" is the bench pack.
  const ojson &cmp_data = bench_file, &bench_data = cmp_file;
  if (!cmp_data.is_object() || !bench_data.is_object()) throw usage_error("env is not a JSON object");
  const auto is_npu = [](const ojson &env) {
    for (const auto &[k, _] : env.items())
      if (k.find("ASCEND") != std::string::npos) return true;
    return false;
  };
  const bool cmp_npu = is_npu(cmp_data), bench_npu = is_npu(bench_data);
  config_sheet s{"env", {"bench_env_name", "cmp_env_name", "bench_value", "cmp_value", "level"}, {}, {}};
  const auto get = [](const ojson &env, const env_side &side) {
    return env.contains(side.name) ? env.at(side.name) : side.default_value;
  };
  std::vector<std::string> levels;
  for (const env_item &item : env_items()) {
    const auto &cmp_env = cmp_npu ? item.npu : item.gpu;
    const auto &bench_env = bench_npu ? item.npu : item.gpu;
    if (!cmp_env && !bench_env) continue;
    if (cmp_env) {
      const ojson cmp_value = get(cmp_data, *cmp_env);
      if (!bench_env) {
        s.rows.push_back({"only cmp has this env", cmp_env->name, "", cmp_value, "warning"});
        continue;
      }
      const ojson bench_value = get(bench_data, *bench_env);
      if (!py_equal(cmp_value, bench_value))
        s.rows.push_back({bench_env->name, cmp_env->name, bench_value, cmp_value, "error"});
    } else {
      // `bench_data.get(name) if bench_data.get(name) else default`: an empty value takes the default.
      const bool set = bench_data.contains(bench_env->name) && bench_data.at(bench_env->name) != "";
      s.rows.push_back({bench_env->name, "only bench has this env", set ? bench_data.at(bench_env->name) : bench_env->default_value, "", "warning"});
    }
  }
  for (const auto &r : s.rows) levels.push_back(r.back().get<std::string>());
  s.pass_check = config_pass_check(levels);
  return s;
}

config_sheet config_check_pip(std::string_view bench, std::string_view cmp, const std::string &fmk) {
  // load_pip_txt: each line stripped and split at "="; a line of not exactly two parts has "".
  const auto load = [](std::string_view text) {
    std::map<std::string, std::string> out;
    std::istringstream in{std::string(text)};
    for (std::string line; std::getline(in, line);) {
      const auto parts = [&] {
        std::vector<std::string> p;
        const std::string l = rstrip(lstrip(line));
        size_t b = 0;
        for (size_t e; (e = l.find('=', b)) != std::string::npos; b = e + 1) p.push_back(l.substr(b, e - b));
        p.push_back(l.substr(b));
        return p;
      }();
      out[parts[0]] = parts.size() == 2 ? parts[1] : "";
    }
    return out;
  };
  const auto b = load(bench), c = load(cmp);
  config_sheet s{"pip", {"package", "bench version", "cmp version", "level"}, {}, {}};
  std::vector<std::string> packages = dependency_packages;
  packages.push_back(fmk);
  for (const auto &p : packages) {
    const auto bi = b.find(p), ci = c.find(p);
    const bool has_b = bi != b.end(), has_c = ci != c.end();
    if (has_b != has_c || (has_b && bi->second != ci->second)) {
      const std::string bv = has_b && !bi->second.empty() ? bi->second : "None";
      const std::string cv = has_c && !ci->second.empty() ? ci->second : "None";
      s.rows.push_back({p, bv, cv, "error"});
    }
  }
  s.pass_check = s.rows.empty() ? "pass" : "error";
  return s;
}

std::pair<std::string, std::string> config_hyperparameter_match(const std::string &name,
                                                                const std::vector<std::string> &available) {
  const auto has = [&](const std::string &n) { return std::find(available.begin(), available.end(), n) != available.end(); };
  if (has(name)) return {name, "pure name"};
  for (const auto &[standard, aliases] : hyperparameter_aliases()) {
    if (name != standard && std::find(aliases.begin(), aliases.end(), name) == aliases.end()) continue;
    if (has(standard)) return {standard, "mapping"};
    for (const auto &alias : aliases)
      if (has(alias)) return {alias, "mapping"};
    break;
  }
  const auto lower = [](std::string s) {
    for (auto &ch : s) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    return s;
  };
  std::string best;
  double best_ratio = 0.8;
  for (const auto &candidate : available) {
    const double r = difflib_ratio(lower(name), lower(candidate));
    if (r > best_ratio) best_ratio = r, best = candidate;
  }
  if (best.empty()) return {"", ""};
  return {best, "similarity:" + py_float_repr(best_ratio)};
}

std::vector<row> config_check_hyperparameter_rows(const ojson &bench, ojson cmp, const std::string &file_name) {
  if (!bench.is_object() || !cmp.is_object()) throw usage_error(file_name + " is not a JSON object");
  // refine_json_keys: the last dotted part, "-" → "_"; a later key of the same refined name wins.
  const auto refine = [](const ojson &d) {
    ojson r = ojson::object();
    for (const auto &[k, _] : d.items()) {
      std::string last = k.substr(k.rfind('.') == std::string::npos ? 0 : k.rfind('.') + 1);
      std::replace(last.begin(), last.end(), '-', '_');
      r[last] = k;
    }
    return r;
  };
  const ojson b_ref = refine(bench), c_ref = refine(cmp);
  std::vector<std::string> available;
  for (const auto &[k, _] : c_ref.items()) available.push_back(k);
  std::vector<row> rows;
  for (const auto &[refined, original] : b_ref.items()) {
    const auto [matched, how] = config_hyperparameter_match(refined, available);
    const std::string bench_name = original.get<std::string>();
    const ojson bench_value = to_str_if_number(bench.at(bench_name));
    if (!matched.empty()) {
      const std::string cmp_name = c_ref.at(matched).get<std::string>();
      if (!cmp.contains(cmp_name))  // msprobe's `del cmp_params[...]` raises KeyError here
        throw usage_error(fmt::format("{}: cmp parameter \"{}\" matched twice (msprobe fails here too)", file_name, cmp_name));
      const ojson cmp_value = to_str_if_number(cmp.at(cmp_name));
      if (!py_equal(bench_value, cmp_value))
        rows.push_back({file_name, bench_name, cmp_name, bench_value, cmp_value, how, "error"});
      cmp.erase(cmp_name);
    } else {
      rows.push_back({file_name, bench_name, "Only in benchmark", bench_value, "", "", "warning"});
    }
  }
  for (const auto &[k, v] : cmp.items()) rows.push_back({file_name, "Only in comparison", k, "", v, "", "warning"});
  // all_diffs.sort(): Python's list order; values compared as their text here (Python cannot
  // order str against int either).
  std::stable_sort(rows.begin(), rows.end(), [](const row &a, const row &b) {
    for (size_t i = 0; i < a.size(); ++i) {
      const std::string x = a[i].is_string() ? a[i].get<std::string>() : a[i].dump();
      const std::string y = b[i].is_string() ? b[i].get<std::string>() : b[i].dump();
      if (x != y) return x < y;
    }
    return false;
  });
  return rows;
}

bool config_stack_match(const std::vector<std::string> &stack1, const std::vector<std::string> &stack2) {
  if (stack1.size() != stack2.size()) return false;
  const auto basename = [](const std::string &p) { return p.substr(p.rfind('/') == std::string::npos ? 0 : p.rfind('/') + 1); };
  for (size_t i = 0; i < stack1.size(); ++i) {
    const frame_parts f1 = parse_frame(stack1[i]), f2 = parse_frame(stack2[i]);
    const double path = (!f1.path.empty() && !f2.path.empty() && basename(f1.path) == basename(f2.path)) ? 1.0 : 0.0;
    const double func = f1.func == f2.func ? 1.0 : 0.0;
    const double code = difflib_ratio(f1.code, f2.code);
    if ((path + func + code) / 3.0 < 0.8) return false;
  }
  return true;
}

namespace {
// random_checker.py load_stats_files: random/rank{R}.json directly under random/.
std::map<int, ojson> random_ranks(const config_pack &pack, const std::string &pack_name) {
  std::map<int, ojson> out;
  for (const auto &[entry, _] : pack) {
    if (entry.compare(0, 7, "random/") != 0) continue;
    const std::string file = entry.substr(7);
    if (file.find('/') != std::string::npos || file.compare(0, 4, "rank") != 0 || file.size() < 5 ||
        file.compare(file.size() - 5, 5, ".json") != 0)
      continue;
    const std::string rank = file.substr(0, file.find('.')).substr(4);
    if (rank.empty() || !std::all_of(rank.begin(), rank.end(), [](char c) { return c >= '0' && c <= '9'; }))
      throw usage_error(pack_name + ": entry " + entry + ": extract rank id from " + file + " failed");
    const ojson d = parse_entry(pack, entry, pack_name);
    if (!d.is_object()) throw usage_error(pack_name + ": entry " + entry + ": not a JSON object");
    out[std::stoi(rank)] = d;
  }
  return out;
}
}  // namespace

config_sheet config_check_random(const config_pack &bench, const config_pack &cmp, const std::string &bench_name,
                                 const std::string &cmp_name) {
  config_sheet s{"random", {"op", "rank", "bench_stack", "cmp_stack", "bench_count", "cmp_count", "check_result"}, {}, {}};
  const auto b = random_ranks(bench, bench_name), c = random_ranks(cmp, cmp_name);
  std::set<int> ranks;
  for (const auto &[r, _] : b) ranks.insert(r);
  for (const auto &[r, _] : c) ranks.insert(r);
  const ojson empty = ojson::object();
  for (const int rank : ranks) {
    const ojson &bd = b.count(rank) ? b.at(rank) : empty, &cd = c.count(rank) ? c.at(rank) : empty;
    std::set<std::string> ops;  // msprobe: a set's (hash) order; sorted here
    for (const auto &[op, _] : bd.items()) ops.insert(op);
    for (const auto &[op, _] : cd.items()) ops.insert(op);
    for (const auto &op : ops) {
      const std::string where = fmt::format("random/rank{}.json: {}", rank, op);
      std::vector<std::pair<std::vector<std::string>, int64_t>> bs, cs;
      for (const auto *side : {&bd, &cd}) {
        if (!side->contains(op)) continue;
        if (!side->at(op).is_array()) throw usage_error(where + " is not a list");
        for (const auto &e : side->at(op)) (side == &bd ? bs : cs).emplace_back(stack_of(e, where), e.at("count").get<int64_t>());
      }
      // Named, not structured bindings: clang (the fuzz build) does not capture those in a lambda.
      for (const auto &b : bs) {
        const auto &stack = b.first;
        const int64_t count = b.second;
        const auto m = std::find_if(cs.begin(), cs.end(), [&](const auto &ce) { return config_stack_match(ce.first, stack); });
        if (m != cs.end()) s.rows.push_back({op, rank, join_lines(stack), join_lines(m->first), count, m->second, count == m->second});
        else s.rows.push_back({op, rank, join_lines(stack), "no match stack", count, 0, false});
      }
      for (const auto &c : cs)
        if (std::none_of(bs.begin(), bs.end(), [&](const auto &be) { return config_stack_match(be.first, c.first); }))
          s.rows.push_back({op, rank, "no match stack", join_lines(c.first), 0, c.second, false});
    }
  }
  s.pass_check = "pass";
  for (const auto &r : s.rows)
    if (!r[6].get<bool>()) s.pass_check = "error";
  return s;
}

std::vector<config_sheet> config_check_compare(const config_pack &bench, const config_pack &cmp,
                                               const std::string &bench_name, const std::string &cmp_name,
                                               const std::string &fmk) {
  std::vector<config_sheet> sheets;
  if (has_item(bench, "env") && has_item(cmp, "env"))
    sheets.push_back(config_check_env(parse_entry(bench, "env", bench_name), parse_entry(cmp, "env", cmp_name)));
  if (has_item(bench, "pip") && has_item(cmp, "pip")) sheets.push_back(config_check_pip(bench.at("pip"), cmp.at("pip"), fmk));
  if (has_item(bench, "dataset") && has_item(cmp, "dataset")) {
    config_sheet s{"dataset", {"step", "rank", "tag", "equal", "max_relative_diff", "min_relative_diff", "mean_relative_diff", "norm_relative_diff"}, {}, {}};
    for (const auto &[entry, _] : bench) {
      const auto parts = split_path(entry);  // dataset/STEP/RANK/dataset.json
      if (parts.size() != 4 || parts[0] != "dataset" || parts[3] != "dataset.json" || !cmp.count(entry)) continue;
      const std::string where = bench_name + ": entry " + entry;
      const int step = step_or_rank(parts[1], "step", where), rank = step_or_rank(parts[2], "rank", where);
      dataset_rows(parse_entry(bench, entry, bench_name), parse_entry(cmp, entry, cmp_name), "", step, rank, s.rows, where);
    }
    sort_by_step_rank(s.rows, 2);
    s.pass_check = pass_or_error(s.rows);
    sheets.push_back(std::move(s));
  }
  if (has_item(bench, "weights") && has_item(cmp, "weights")) {
    config_sheet s{"weights", {"step", "rank", "weight_name", "equal", "max_relative_diff", "min_relative_diff", "mean_relative_diff", "norm_relative_diff"}, {}, {}};
    for (const auto &[entry, _] : bench) {
      if (entry.compare(0, 8, "weights/") != 0 || entry.size() < 5 || entry.compare(entry.size() - 5, 5, ".json") != 0) continue;
      const std::string where = bench_name + ": entry " + entry;
      auto parts = split_path(entry.substr(8));
      parts.pop_back();  // the file
      if (parts.size() < 2) throw usage_error(where + ": not under weights/stepS/rankR/ (msprobe: the extracted file has been corrupted)");
      const int step = step_or_rank(parts[0], "step", where), rank = step_or_rank(parts[1], "rank", where);
      const ojson b = parse_entry(bench, entry, bench_name);
      if (!b.is_object()) throw usage_error(where + ": not a JSON object");
      if (!cmp.count(entry)) {
        for (const auto &[name, _] : b.items()) s.rows.push_back({step, rank, name, "only bench have", nullptr, nullptr, nullptr, nullptr});
        continue;
      }
      const ojson c = parse_entry(cmp, entry, cmp_name);
      if (!c.is_object()) throw usage_error(cmp_name + ": entry " + entry + ": not a JSON object");
      std::set<std::string> names;
      for (const auto &[name, _] : b.items()) names.insert(name);
      for (const auto &[name, _] : c.items()) names.insert(name);
      for (const auto &name : names)
        s.rows.push_back(weight_row(step, rank, name, b.contains(name) ? &b.at(name) : nullptr, c.contains(name) ? &c.at(name) : nullptr, where));
    }
    sort_by_step_rank(s.rows, 2);
    s.pass_check = pass_or_error(s.rows);
    sheets.push_back(std::move(s));
  }
  if (has_item(bench, "hyperparameters") && has_item(cmp, "hyperparameters")) {
    config_sheet s{"hyperparameters", {"file_name", "bench_para", "cmp_para", "bench_value", "cmp_value", "matched_with", "level"}, {}, {}};
    for (const char *file : {"hyperparameters_static.json", "hyperparameters_dynamic.json"}) {
      const std::string entry = std::string("hyperparameters/") + file;
      if (!bench.count(entry) || !cmp.count(entry)) continue;
      for (auto &r : config_check_hyperparameter_rows(parse_entry(bench, entry, bench_name), parse_entry(cmp, entry, cmp_name), file))
        s.rows.push_back(std::move(r));
    }
    std::vector<std::string> levels;
    for (const auto &r : s.rows) levels.push_back(r.back().get<std::string>());
    s.pass_check = config_pass_check(levels);
    sheets.push_back(std::move(s));
  }
  if (has_item(bench, "random") && has_item(cmp, "random")) sheets.push_back(config_check_random(bench, cmp, bench_name, cmp_name));
  return sheets;
}

// ---- static pack ----------------------------------------------------------------------------------

ojson config_hyperparameters_from_shell(std::string_view script) {
  std::string content;
  std::istringstream in{std::string(script)};
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();  // universal newlines
    if (lstrip(line).rfind('#', 0) == 0) continue;
    line = rstrip(line.substr(0, line.find('#'))) + "\n";
    if (!rstrip(lstrip(line)).empty()) content += line;
  }
  ojson out = ojson::object();
  std::smatch m;
  static const std::regex command_re(R"(msrun\s[^|]*|torchrun\s[^|]*|python\d? -m torch.distributed.launch\s[^|]*)");
  if (!std::regex_search(content, m, command_re)) return out;
  std::string command = m.str();
  static const std::regex block_re(R"re(([a-zA-Z0-9_]{1,20}_ARGS)="([\s\S]*?)")re");
  for (auto it = std::sregex_iterator(content.begin(), content.end(), block_re); it != std::sregex_iterator(); ++it) {
    std::string body = (*it)[2].str();
    std::replace(body.begin(), body.end(), '\n', ' ');
    command = replace_all(command, "$" + (*it)[1].str(), body);
  }
  static const std::regex arg_re(R"(--([\w-]+)(?:\s+([^\s\\]+))?)");
  static const std::regex var_re(R"(^\$\{?(\w+)\}?)");
  for (auto it = std::sregex_iterator(command.begin(), command.end(), arg_re); it != std::sregex_iterator(); ++it) {
    const std::string key = (*it)[1].str();
    std::string value = (*it)[2].matched ? (*it)[2].str() : "";
    std::smatch v;
    if (std::regex_search(value, v, var_re)) {
      const std::regex def_re(v[1].str() + R"(=\s*(.+))");
      std::string last;
      bool found = false;
      for (auto d = std::sregex_iterator(content.begin(), content.end(), def_re); d != std::sregex_iterator(); ++d)
        last = (*d)[1].str(), found = true;
      if (found) value = last;
    }
    if (value.empty()) out[key] = true;
    else out[key] = value;
  }
  return out;
}

namespace {
void yaml_walk(const ojson &v, const std::string &prefix, ojson &out, int depth) {
  if (depth > 500) throw usage_error("yaml nested too deep");
  const auto scalar = [](const ojson &x) { return x.is_number() || x.is_string() || x.is_boolean(); };
  if (v.is_object()) {
    for (const auto &[k, x] : v.items()) yaml_walk(x, prefix.empty() ? k : prefix + "." + k, out, depth + 1);
  } else if (v.is_array()) {
    if (std::all_of(v.begin(), v.end(), [&](const ojson &x) { return scalar(x) || x.is_array(); })) {
      out[prefix] = v;
    } else {
      for (size_t i = 0; i < v.size(); ++i)
        yaml_walk(v[i], prefix.empty() ? std::to_string(i) : prefix + "." + std::to_string(i), out, depth + 1);
    }
  } else if (scalar(v)) {
    out[prefix] = v;
  }
}
}  // namespace

void config_hyperparameters_from_yaml(const ojson &doc, ojson &out) { yaml_walk(doc, "", out, 0); }

void config_update_dict(ojson &ori, const ojson &add) {
  for (const auto &[k, v] : add.items()) {
    if (ori.contains(k) && !py_equal(ori.at(k), v)) {
      if (ori.contains("values")) {  // msprobe tests the top level's keys, then appends to ori[k]
        if (!ori.at(k).is_object() || !ori.at(k).contains("values") || !ori.at(k).at("values").is_array())
          throw usage_error(fmt::format("hyperparameter \"{}\": msprobe's update_dict fails here (a key \"values\" beside it)", k));
        ori[k]["values"].push_back(v);
      } else {
        ori[k] = ojson{{"description", "duplicate_value"}, {"values", ojson::array({ori.at(k), v})}};
      }
    } else {
      ori[k] = v;
    }
  }
}

}  // namespace tprobe
