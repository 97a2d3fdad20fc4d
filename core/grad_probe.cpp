// grad_probe.cpp: see grad_probe.h.
#include "grad_probe.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include <fmt/format.h>

#include "errors.h"
#include "pyjson.h"
#include "tensor_stats.h"

namespace tprobe {

using json = nlohmann::ordered_json;

bool grad_probe_settings::wants(const std::string &name) const {
  return param_list.empty() || std::find(param_list.begin(), param_list.end(), name) != param_list.end();
}

namespace {

// Python's str() of a JSON number as the config gave it: ints as ints, floats as repr(float).
std::string python_number_text(const json &v) {
  if (v.is_number_unsigned()) return std::to_string(v.get<uint64_t>());
  if (v.is_number_integer()) return std::to_string(v.get<int64_t>());
  return py_float_repr(v.get<double>());
}

double number_of(const json &v) {
  if (v.is_number_unsigned()) return static_cast<double>(v.get<uint64_t>());
  if (v.is_number_integer()) return static_cast<double>(v.get<int64_t>());
  return v.get<double>();
}

}  // namespace

grad_probe_settings grad_probe_settings_from_json(const json &section, const std::string &where) {
  grad_probe_settings s;
  if (section.is_null()) return s;
  if (!section.is_object()) throw usage_error(where + ": grad_probe settings are not an object");
  if (auto it = section.find("grad_level"); it != section.end() && !it->is_null()) {
    if (!it->is_string() || (*it != "L0" && *it != "L1" && *it != "L2"))
      throw usage_error(where + ": grad_level must be \"L0\", \"L1\" or \"L2\"");
    s.level = it->get<std::string>();
  }
  if (auto it = section.find("param_list"); it != section.end() && !it->is_null()) {
    if (!it->is_array()) throw usage_error(where + ": param_list must be a list of strings");
    for (const auto &e : *it) {
      if (!e.is_string()) throw usage_error(where + ": param_list must be a list of strings");
      s.param_list.push_back(e.get<std::string>());
    }
  }
  if (auto it = section.find("bounds"); it != section.end() && !it->is_null()) {
    if (!it->is_array()) throw usage_error(where + ": bounds must be a list of numbers");
    s.bounds.clear();
    s.bound_texts.clear();
    for (const auto &e : *it) {
      if (!e.is_number()) throw usage_error(where + ": bounds must be a list of numbers");
      // torch.Tensor(bounds) is float32: the comparison uses the rounded bound.
      s.bounds.push_back(static_cast<double>(static_cast<float>(number_of(e))));
      s.bound_texts.push_back(python_number_text(e));
    }
  }
  return s;
}

namespace {

template <typename T>
struct element;
template <>
struct element<double> {
  static double get(const void *p, size_t i) { return static_cast<const double *>(p)[i]; }
};
template <>
struct element<float> {
  static double get(const void *p, size_t i) { return static_cast<const float *>(p)[i]; }
};
struct half_tag {};
struct bf16_tag {};
template <>
struct element<half_tag> {
  static double get(const void *p, size_t i) { return float16_to_float(static_cast<const uint16_t *>(p)[i]); }
};
template <>
struct element<bf16_tag> {
  static double get(const void *p, size_t i) { return bfloat16_to_float(static_cast<const uint16_t *>(p)[i]); }
};

// One pass over the gradient: max, min, sum of squares, and (when asked) buckets, zeros and
// packed directions. NaN is tracked apart so that max/min stay plain comparisons.
template <typename T>
void scan(const void *data, uint64_t n, const grad_probe_settings &s, grad_numbers &out, uint8_t *bits) {
  double mx = -std::numeric_limits<double>::infinity(), mn = std::numeric_limits<double>::infinity(), sq = 0;
  bool nan = false;
  const bool dist = s.distribution();
  const double *b_begin = s.bounds.data(), *b_end = s.bounds.data() + s.bounds.size();
  const bool few = s.bounds.size() <= 8;
  uint64_t *buckets = out.buckets.data();
  uint64_t zeros = 0;
  uint8_t byte = 0;
  for (uint64_t i = 0; i < n; ++i) {
    const double x = element<T>::get(data, i);
    if (std::isnan(x)) {
      nan = true;
      if (dist) ++buckets[s.bounds.size()];  // torch.bucketize puts NaN last
    } else {
      mx = std::max(mx, x);
      mn = std::min(mn, x);
      if (dist) {
        // The bucket is the number of bounds below x: (b[i-1], b[i]]. A few bounds (the usual
        // three) are counted without branches; many are searched.
        size_t k = 0;
        if (few)
          for (const double *b = b_begin; b != b_end; ++b) k += *b < x;
        else
          k = static_cast<size_t>(std::lower_bound(b_begin, b_end, x) - b_begin);
        ++buckets[k];
        zeros += x == 0;
      }
    }
    sq += x * x;
    if (bits) {
      byte |= static_cast<uint8_t>(x > 0) << (i & 7);
      if ((i & 7) == 7) {
        bits[i >> 3] = byte;
        byte = 0;
      }
    }
  }
  if (bits && (n & 7)) bits[n >> 3] = byte;
  out.zeros = zeros;
  const double qnan = std::numeric_limits<double>::quiet_NaN();
  out.max = nan ? qnan : mx;
  out.min = nan ? qnan : mn;
  out.norm = std::sqrt(sq);
}

// torch.norm returns the gradient's dtype; msprobe then takes .float(): both roundings.
double round_norm(double v, dtype t) {
  switch (t) {
    case dtype::float16: return float16_to_float(float_to_float16(static_cast<float>(v)));
    case dtype::bfloat16: return bfloat16_to_float(float_to_bfloat16(static_cast<float>(v)));
    default: return static_cast<double>(static_cast<float>(v));
  }
}

// zlib's CRC-32 of the gradient as float32 bytes, converted in chunks (no copy of the whole).
uint32_t crc_as_float32(const void *data, dtype t, uint64_t n) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  if (t == dtype::float32) {
    const auto *p = static_cast<const Bytef *>(data);
    uint64_t left = n * 4;
    while (left) {
      const uInt chunk = static_cast<uInt>(std::min<uint64_t>(left, 1u << 30));
      crc = ::crc32(crc, p, chunk);
      p += chunk;
      left -= chunk;
    }
    return static_cast<uint32_t>(crc);
  }
  float buffer[4096];
  for (uint64_t i = 0; i < n;) {
    const uint64_t m = std::min<uint64_t>(n - i, 4096);
    for (uint64_t k = 0; k < m; ++k) {
      switch (t) {
        case dtype::float64: buffer[k] = static_cast<float>(static_cast<const double *>(data)[i + k]); break;
        case dtype::float16: buffer[k] = float16_to_float(static_cast<const uint16_t *>(data)[i + k]); break;
        default: buffer[k] = bfloat16_to_float(static_cast<const uint16_t *>(data)[i + k]); break;
      }
    }
    crc = ::crc32(crc, reinterpret_cast<const Bytef *>(buffer), static_cast<uInt>(m * 4));
    i += m;
  }
  return static_cast<uint32_t>(crc);
}

}  // namespace

grad_numbers grad_numbers_compute(const void *data, dtype type, std::span<const int64_t> shape,
                                  const grad_probe_settings &settings, uint8_t *sign_bits) {
  grad_numbers out;
  out.type = type;
  out.shape.assign(shape.begin(), shape.end());
  out.numel = 1;
  for (int64_t d : shape) {
    if (d < 0) throw usage_error("gradient shape has a negative dimension");
    out.numel *= static_cast<uint64_t>(d);
  }
  if (settings.distribution()) out.buckets.assign(settings.bounds.size() + 1, 0);
  if (out.numel && !data) throw usage_error("gradient data is NULL");
  switch (type) {
    case dtype::float64: scan<double>(data, out.numel, settings, out, sign_bits); break;
    case dtype::float32: scan<float>(data, out.numel, settings, out, sign_bits); break;
    case dtype::float16: scan<half_tag>(data, out.numel, settings, out, sign_bits); break;
    case dtype::bfloat16: scan<bf16_tag>(data, out.numel, settings, out, sign_bits); break;
    default:
      throw usage_error(fmt::format("gradient of dtype {}: grad_probe reads floating-point gradients only",
                                    dtype_name(type)));
  }
  if (out.numel == 0) {
    out.max = out.min = out.norm = std::numeric_limits<double>::quiet_NaN();
  } else {
    // msprobe writes torch.max(grad).float(): a float32 value whatever the dtype.
    out.max = static_cast<double>(static_cast<float>(out.max));
    out.min = static_cast<double>(static_cast<float>(out.min));
    out.norm = round_norm(out.norm, type);
  }
  if (settings.md5()) out.crc32 = crc_as_float32(data, type, out.numel);
  return out;
}

json grad_numbers_to_meta(const grad_numbers &n) {
  json m = json::object();
  m["dtype"] = std::string(dtype_name(n.type));
  m["shape"] = n.shape;
  m["numel"] = n.numel;
  m["max"] = n.max;
  m["min"] = n.min;
  m["norm"] = n.norm;
  if (n.crc32) m["crc32"] = *n.crc32;
  if (!n.buckets.empty()) {
    m["buckets"] = n.buckets;
    m["zeros"] = n.zeros;
  }
  return m;
}

grad_numbers grad_numbers_from_meta(const json &m, const std::string &where) {
  auto bad = [&](const std::string &what) { return usage_error(fmt::format("{}: gradient numbers: {}", where, what)); };
  if (!m.is_object()) throw bad("not an object");
  auto need = [&](const char *key) -> const json & {
    auto it = m.find(key);
    if (it == m.end()) throw bad(fmt::format("no \"{}\"", key));
    return *it;
  };
  auto real = [&](const char *key) {
    const json &v = need(key);
    if (v.is_null()) return std::numeric_limits<double>::quiet_NaN();
    if (!v.is_number()) throw bad(fmt::format("\"{}\" is not a number", key));
    return number_of(v);
  };
  grad_numbers n;
  const json &t = need("dtype");
  if (!t.is_string() || !dtype_from_name(t.get<std::string>())) throw bad("\"dtype\" is not a dtype name");
  n.type = *dtype_from_name(t.get<std::string>());
  const json &shape = need("shape");
  if (!shape.is_array()) throw bad("\"shape\" is not a list");
  for (const auto &d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) throw bad("\"shape\" holds a bad dimension");
    n.shape.push_back(d.get<int64_t>());
  }
  const json &numel = need("numel");
  if (!numel.is_number_unsigned()) throw bad("\"numel\" is not a count");
  n.numel = numel.get<uint64_t>();
  uint64_t product = 1;
  for (int64_t d : n.shape) product *= static_cast<uint64_t>(d);
  if (product != n.numel) throw bad("\"numel\" does not match \"shape\"");
  n.max = real("max");
  n.min = real("min");
  n.norm = real("norm");
  if (auto it = m.find("crc32"); it != m.end()) {
    if (!it->is_number_unsigned() || it->get<uint64_t>() > 0xffffffffu) throw bad("\"crc32\" is not a CRC-32");
    n.crc32 = static_cast<uint32_t>(it->get<uint64_t>());
  }
  if (auto it = m.find("buckets"); it != m.end()) {
    if (!it->is_array()) throw bad("\"buckets\" is not a list");
    for (const auto &c : *it) {
      if (!c.is_number_unsigned()) throw bad("\"buckets\" holds a bad count");
      n.buckets.push_back(c.get<uint64_t>());
    }
    const json &zeros = need("zeros");
    if (!zeros.is_number_unsigned()) throw bad("\"zeros\" is not a count");
    n.zeros = zeros.get<uint64_t>();
  }
  return n;
}

std::vector<std::string> grad_csv_header(const grad_probe_settings &s) {
  std::vector<std::string> h{"param_name"};
  if (s.md5()) h.push_back("MD5");
  if (s.distribution()) {
    const auto &b = s.bound_texts;
    if (!b.empty()) {
      h.push_back(fmt::format("(-inf, {}]", b.front()));
      for (size_t i = 1; i < b.size(); ++i) h.push_back(fmt::format("({}, {}]", b[i - 1], b[i]));
      h.push_back(fmt::format("({}, inf)", b.back()));
    }
    h.push_back("=0");
  }
  for (const char *c : {"max", "min", "norm", "shape"}) h.push_back(c);
  return h;
}

std::string grad_shape_text(std::span<const int64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? ", " : "") + std::to_string(shape[i]);
  return out + "]";
}

std::vector<std::string> grad_csv_row(const std::string &param, const grad_probe_settings &s, const grad_numbers &n) {
  std::vector<std::string> row{param};
  if (s.md5()) row.push_back(n.crc32 ? fmt::format("{:08x}", *n.crc32) : std::string());
  if (s.distribution()) {
    // Python: x / element_num, or the int 0 for an empty gradient.
    auto fraction = [&](uint64_t count) {
      return n.numel ? py_float_repr(static_cast<double>(count) / static_cast<double>(n.numel)) : std::string("0");
    };
    if (!s.bounds.empty())
      for (uint64_t c : n.buckets) row.push_back(fraction(c));
    row.push_back(fraction(n.zeros));
  }
  row.push_back(py_float_repr(n.max));
  row.push_back(py_float_repr(n.min));
  row.push_back(py_float_repr(n.norm));
  row.push_back(grad_shape_text(n.shape));
  return row;
}

std::vector<std::string> csv_split(std::string_view line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cells.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cells.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else {
      cells.back() += c;
    }
  }
  return cells;
}

void grad_sign_unpack(const uint8_t *bits, uint64_t numel, uint8_t *out) {
  for (uint64_t i = 0; i < numel; ++i) out[i] = (bits[i >> 3] >> (i & 7)) & 1u;
}

}  // namespace tprobe
