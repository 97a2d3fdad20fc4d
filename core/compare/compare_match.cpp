#include "compare_match.h"

#include <algorithm>
#include <array>
#include <climits>
#include <cmath>
#include <cstdint>
#include <functional>
#include <unordered_map>
#include <utility>

#include <fmt/format.h>

namespace tprobe {

const char *compare_match_name(compare_match m) { return m == compare_match::name ? "name" : "auto"; }

const char *pair_how_name(pair_how h) {
  switch (h) {
    case pair_how::name: return "name";
    case pair_how::aligned: return "aligned";
    case pair_how::unpaired: return "unpaired";
  }
  return "unpaired";
}

namespace {

// ---- the alias table --------------------------------------------------------------------------
// Names one call gets from msprobe (the Python API it was called through) and from tprobe (the ATen
// operator it dispatched to), folded into one family. Left: a name as it appears after the prefix
// (dunder methods already stripped of their underscores); right: the family.
constexpr std::pair<std::string_view, std::string_view> api_aliases[] = {
    // Python operators (Tensor.__truediv__ …) → the ATen operator they call
    {"truediv", "div"},
    {"floordiv", "floor_divide"},
    {"mod", "remainder"},
    {"and", "bitwise_and"},
    {"or", "bitwise_or"},
    {"xor", "bitwise_xor"},
    {"invert", "bitwise_not"},
    {"lshift", "bitwise_left_shift"},
    {"rshift", "bitwise_right_shift"},
    {"matmul", "matmul"},
    {"abs", "abs"},
    // indexing: msprobe records x[...] as Tensor.__getitem__ / __setitem__, ATen as these
    {"getitem", "getitem"},
    {"slice", "getitem"},
    {"select", "getitem"},
    {"index", "getitem"},
    {"setitem", "setitem"},
    {"index_put_", "setitem"},
    // F.* functions whose ATen operator has another name
    {"cross_entropy_loss", "cross_entropy"},
    {"nll_loss_nd", "nll_loss"},
    {"nll_loss2d", "nll_loss"},
    {"max_pool1d_with_indices", "max_pool1d"},
    {"max_pool2d_with_indices", "max_pool2d"},
    {"max_pool3d_with_indices", "max_pool3d"},
    {"native_dropout", "dropout"},
    {"feature_dropout", "dropout"},
    {"_softmax", "softmax"},
    {"_log_softmax", "log_softmax"},
    {"native_layer_norm", "layer_norm"},
    {"native_batch_norm", "batch_norm"},
    {"_batch_norm_impl_index", "batch_norm"},
    {"native_group_norm", "group_norm"},
    // Tensor conversion methods: all dispatch to aten::to / _to_copy
    {"_to_copy", "to"},
    {"float", "to"},
    {"double", "to"},
    {"half", "to"},
    {"bfloat16", "to"},
    {"int", "to"},
    {"long", "to"},
    {"bool", "to"},
    {"type", "to"},
    {"cuda", "to"},
    {"cpu", "to"},
    {"npu", "to"},
};

// Python's in-place and reflected operator methods: __iadd__ → add_, __radd__ → add.
bool operator_method(std::string_view name) {
  static constexpr std::string_view ops[] = {"add", "sub", "mul", "truediv", "floordiv", "div", "mod",  "pow",
                                             "matmul", "and", "or", "xor", "lshift", "rshift"};
  return std::find(std::begin(ops), std::end(ops), name) != std::end(ops);
}

std::string alias(std::string_view name) {
  for (const auto &[from, to] : api_aliases)
    if (from == name) return std::string(to);
  return std::string(name);
}

// ---- ATen's argument names ----------------------------------------------------------------------
// The positional arguments of ATen's operators by name, generated from torch's schemas
// (scripts/gen_aten_arguments.py): "self target weight reduction ignore_index label_smoothing".
constexpr std::pair<std::string_view, std::string_view> aten_arguments[] = {
#include "aten_arguments.inc"
};

}  // namespace

std::string compare_positional_name(std::string_view api, size_t k) {
  static const std::unordered_map<std::string_view, std::vector<std::string_view>> table = [] {
    std::unordered_map<std::string_view, std::vector<std::string_view>> t;
    for (const auto &[op, names] : aten_arguments) {
      auto &v = t[op];
      for (size_t start = 0; start < names.size();) {
        const size_t space = std::min(names.find(' ', start), names.size());
        v.push_back(names.substr(start, space - start));
        start = space + 1;
      }
    }
    return t;
  }();
  const auto it = table.find(api);
  if (it == table.end() || k >= it->second.size() || it->second[k] == "?") return {};
  return std::string(it->second[k]);
}

std::string compare_api_family(std::string_view api) {
  if (api.size() > 4 && api.substr(0, 2) == "__" && api.substr(api.size() - 2) == "__") {
    const std::string_view inner = api.substr(2, api.size() - 4);
    if (inner == "rsub") return "rsub";  // aten::rsub of its own
    if (inner.size() > 1 && inner[0] == 'i' && operator_method(inner.substr(1))) return alias(inner.substr(1)) + "_";
    if (inner.size() > 1 && inner[0] == 'r' && operator_method(inner.substr(1))) return alias(inner.substr(1));
    return alias(inner);
  }
  return alias(api);
}

size_t compare_match_band(size_t n, size_t m) {
  // Bound the traceback (one byte a cell) to about 64 MiB.
  const size_t longer = std::max<size_t>({n, m, 1});
  return std::clamp<size_t>((size_t{64} << 20) / longer / 2, 128, 1024);
}

namespace {

enum class direction : uint8_t { forward, backward, params_grad, other };

struct entry_info {
  direction dir = direction::other;
  uint32_t family = 0;               // interned family key (shared by both dumps)
  std::string link;                  // forward ↔ backward key: "Functional.linear.0", "Module.fc.Linear#0"
  std::string api;                   // an API entry's name without prefix and counter: "cross_entropy_loss"
  uint64_t sig_in = 0, sig_out = 0, sig_par = 0;
  std::vector<uint64_t> values;      // sorted fingerprints of its tensors' statistics (value_print)
  std::vector<size_t> rows;          // row indices of this entry, in dump order
};

// 'f' float, 'i' integer, 'b' bool, 'c' complex, 0 not a tensor dtype (a Python value, None, Size).
char dtype_class(const std::string &d) {
  std::string_view s = d;
  if (s.substr(0, 7) == "<class ") return 0;  // a Python value: msprobe's str(type(value)), "<class 'int'>"
  if (s.substr(0, 6) == "torch.") s.remove_prefix(6);
  if (s == "Size" || s.empty()) return 0;
  std::string lower(s);
  for (auto &ch : lower) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  if (lower.find("complex") != std::string::npos) return 'c';
  if (lower.find("float") != std::string::npos || lower == "half" || lower == "double") return 'f';
  if (lower == "bool") return 'b';
  if (lower.find("int") != std::string::npos || lower == "long" || lower == "short") return 'i';
  return 0;
}

bool is_tensor(const dump_row &r) { return dtype_class(r.dtype) != 0 && !r.shape.empty() && r.shape.front() == '['; }

// input | parameters | output | parameters_grad as a small number (kwargs rows are "input").
int state_slot(const std::string &s) {
  if (s == "input") return 0;
  if (s == "parameters") return 1;
  if (s == "output") return 2;
  return 3;
}

uint64_t hash_combine(uint64_t h, uint64_t v) { return h ^ (v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2)); }

std::vector<std::string> split_dots(const std::string &s) {
  std::vector<std::string> parts;
  size_t start = 0;
  for (;;) {
    const size_t dot = s.find('.', start);
    parts.push_back(s.substr(start, dot == std::string::npos ? std::string::npos : dot - start));
    if (dot == std::string::npos) return parts;
    start = dot + 1;
  }
}

std::string join(const std::vector<std::string> &parts, size_t from, size_t to) {
  std::string s;
  for (size_t k = from; k < to; ++k) s += (k > from ? "." : "") + parts[k];
  return s;
}

bool all_digits(const std::string &s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

struct interner {
  std::unordered_map<std::string, uint32_t> ids;
  uint32_t of(const std::string &s) { return ids.emplace(s, static_cast<uint32_t>(ids.size() + 1)).first->second; }
};

// Parses an entry name: API "Prefix.api.N.forward", module "Module.path.Class.forward.N",
// parameter gradients "Module.path.Class.parameters_grad.K"; anything else is `other`, its own family.
entry_info parse_entry(const std::string &name, interner &families) {
  entry_info e;
  const auto parts = split_dots(name);
  size_t k = parts.size();
  for (size_t i = parts.size(); i-- > 1;) {
    if (parts[i] == "forward" || parts[i] == "backward" || parts[i] == "parameters_grad") {
      k = i;
      break;
    }
  }
  if (k == parts.size()) {
    e.family = families.of("?" + name);
    e.link = name;
    return e;
  }
  e.dir = parts[k] == "forward" ? direction::forward : parts[k] == "backward" ? direction::backward : direction::params_grad;
  const std::string &prefix = parts[0];
  if (prefix == "Module" || prefix == "Cell" || e.dir == direction::params_grad || k + 1 < parts.size()) {
    // Module form: the count follows the direction. Cell (MindSpore) and Module name the same modules.
    const std::string path = join(parts, 1, k);
    e.family = families.of((e.dir == direction::params_grad ? "G:" : "M:") + path);
    e.link = "M:" + path + "#" + (k + 1 < parts.size() ? join(parts, k + 1, parts.size()) : "");
    return e;
  }
  // API form: the count precedes the direction.
  const size_t api_end = k >= 2 && all_digits(parts[k - 1]) ? k - 1 : k;
  const std::string api = join(parts, 1, api_end);
  e.family = families.of((prefix == "Distributed" ? "D:" : "A:") + compare_api_family(api));
  e.api = api;
  e.link = join(parts, 0, k);
  return e;
}

// A tensor's state, shape and Max/Min/Mean to three significant digits: equal for the same tensor in
// two dumps of one run (tools differ in the last digits of a Norm), often for a float32 and a
// bfloat16 run, rarely for two different tensors of one shape.
uint64_t value_print(const dump_row &r) {
  uint64_t h = hash_combine(std::hash<std::string>{}(r.shape), static_cast<uint64_t>(state_slot(r.state)));
  for (size_t k = 0; k < 3; ++k) {
    const cell &c = r.stats[k];
    h = hash_combine(h, std::hash<std::string>{}(c.is_number() && std::isfinite(c.number())
                                                     ? fmt::format("{:.2e}", c.number())
                                                     : cell_str(c)));
  }
  return h;
}

size_t common_values(const std::vector<uint64_t> &a, const std::vector<uint64_t> &b) {
  size_t n = 0;
  for (size_t i = 0, j = 0; i < a.size() && j < b.size();) {
    if (a[i] < b[j]) ++i;
    else if (b[j] < a[i]) ++j;
    else ++n, ++i, ++j;
  }
  return n;
}

std::vector<entry_info> entries_of(const dump_file &d, interner &families) {
  std::vector<entry_info> entries;
  entries.reserve(d.entries.size());
  for (const auto &name : d.entries) entries.push_back(parse_entry(name, families));
  for (size_t i = 0; i < d.rows.size(); ++i)
    if (d.rows[i].entry < entries.size()) entries[d.rows[i].entry].rows.push_back(i);
  const std::hash<std::string> h;
  for (auto &e : entries) {
    std::array<std::vector<uint64_t>, 4> sig;
    for (const size_t r : e.rows) {
      const dump_row &row = d.rows[r];
      if (!is_tensor(row)) continue;
      e.values.push_back(value_print(row));
      sig[state_slot(row.state)].push_back(hash_combine(h(row.shape), static_cast<uint64_t>(dtype_class(row.dtype))));
    }
    const auto fold = [](std::vector<uint64_t> v) {
      std::sort(v.begin(), v.end());  // a multiset: the order of slots does not matter
      uint64_t acc = 0x51ed270b27e3f1a9ull + v.size();
      for (const uint64_t x : v) acc = hash_combine(acc, x);
      return acc;
    };
    std::sort(e.values.begin(), e.values.end());
    e.sig_in = fold(sig[0]);
    e.sig_par = fold(sig[1]);
    e.sig_out = fold(sig[2]) ^ fold(sig[3]) * 31;
  }
  return entries;
}

// Weighted LCS of a (n items) and b (m items) in a band that follows the frontier: score(i, j) > 0
// lets a[i] pair with b[j]. Returns the pairs in increasing order. Rows run over the longer sequence,
// so the longer side's extra items are free to skip at any length; the shorter side's runs of extra
// items are bridged up to the band's half-width.
std::vector<std::pair<size_t, size_t>> align(size_t n, size_t m, const std::function<int(size_t, size_t)> &score) {
  std::vector<std::pair<size_t, size_t>> pairs;
  if (n == 0 || m == 0) return pairs;
  const bool swap = m > n;
  const size_t rows = swap ? m : n, cols = swap ? n : m;
  const auto s = [&](size_t r, size_t c) { return swap ? score(c, r) : score(r, c); };
  const size_t w = compare_match_band(n, m);
  constexpr int unreachable = INT_MIN / 2;
  enum : uint8_t { diag = 0, up = 1, left = 2, start = 3 };

  std::vector<size_t> lo(rows + 1), hi(rows + 1), offset(rows + 2);
  std::vector<uint8_t> moves;
  std::vector<int> prev, cur;
  lo[0] = 0;
  hi[0] = std::min(cols, w);
  prev.assign(hi[0] + 1, 0);
  moves.assign(hi[0] + 1, start);
  offset[0] = 0;
  offset[1] = moves.size();
  size_t frontier = 0;  // leftmost column of the previous row's maximum
  for (size_t i = 1; i <= rows; ++i) {
    lo[i] = frontier > w ? frontier - w : 0;
    hi[i] = std::min(cols, frontier + w);
    cur.assign(hi[i] - lo[i] + 1, unreachable);
    const auto prev_at = [&](size_t j) { return j < lo[i - 1] || j > hi[i - 1] ? unreachable : prev[j - lo[i - 1]]; };
    int best = unreachable;
    size_t best_j = lo[i];
    for (size_t j = lo[i]; j <= hi[i]; ++j) {
      int v = prev_at(j);
      uint8_t mv = up;
      if (j > lo[i] && cur[j - 1 - lo[i]] > v) v = cur[j - 1 - lo[i]], mv = left;
      if (j > 0) {
        const int p = prev_at(j - 1);
        if (p != unreachable) {
          const int sc = s(i - 1, j - 1);
          if (sc > 0 && p + sc >= v) v = p + sc, mv = diag;
        }
      }
      if (v == unreachable) mv = start;
      cur[j - lo[i]] = v;
      moves.push_back(mv);
      if (v > best) best = v, best_j = j;
    }
    offset[i + 1] = moves.size();
    frontier = best_j;
    prev.swap(cur);
  }
  // The best end cell of the last row, then back.
  size_t j = lo[rows];
  for (size_t k = lo[rows]; k <= hi[rows]; ++k)
    if (prev[k - lo[rows]] > prev[j - lo[rows]]) j = k;
  size_t i = rows;
  while (i > 0) {
    if (j < lo[i] || j > hi[i]) break;  // cannot happen on a reachable path
    const uint8_t mv = moves[offset[i] + (j - lo[i])];
    if (mv == start) break;
    if (mv == diag) {
      pairs.emplace_back(swap ? j - 1 : i - 1, swap ? i - 1 : j - 1);
      --i, --j;
    } else if (mv == up) {
      --i;
    } else {
      --j;
    }
  }
  std::reverse(pairs.begin(), pairs.end());
  return pairs;
}

// Points of a pair score. Weights: the family is what makes two calls the same call; equal
// signatures decide between calls of one family; then tensors of equal statistics (a point each, at
// most score_values: the same data, where shapes cannot tell an inserted call from the real one);
// the name only breaks what is left (its counter shifts after an inserted call).
constexpr int score_family = 16, score_signature = 4, score_values = 4, score_name = 1;

int entry_score(const entry_info &a, const entry_info &b, const std::string &name_a, const std::string &name_b) {
  if (a.dir != b.dir || a.family != b.family) return 0;
  int s = score_family;
  if (a.sig_in == b.sig_in) s += score_signature;
  if (a.sig_out == b.sig_out) s += score_signature;
  if (a.sig_par == b.sig_par) s += score_signature / 2;
  s += static_cast<int>(std::min<size_t>(score_values, common_values(a.values, b.values)));
  if (name_a == name_b) s += score_name;
  return s;
}

// The argument a forward row holds, by name, for pairing a keyword with a positional argument:
// `keyword` true for a top-level keyword argument ("….forward.input.reduction": "reduction"), false
// for a top-level positional one named by ATen's schema ("….forward.input.3" of cross_entropy_loss:
// "reduction"); "" for anything else (outputs, list elements, an operator the table lacks).
struct argument {
  std::string name;
  bool keyword = false;
};
argument argument_of(const dump_row &r, const std::string &entry, const entry_info &e) {
  if (e.dir != direction::forward || e.api.empty() || r.state != "input") return {};
  const std::string prefix = entry + ".input.";
  if (r.name.size() <= prefix.size() || r.name.compare(0, prefix.size(), prefix) != 0) return {};
  const std::string slot = r.name.substr(prefix.size());
  if (slot.find('.') != std::string::npos) return {};  // a list element
  if (!all_digits(slot)) return {slot, true};
  if (slot.size() > 6) return {};
  return {compare_positional_name(e.api, std::stoul(slot)), false};
}

// Rows of two paired entries, by slot (see the header, step 4).
void pair_slots(const dump_file &npu, const dump_file &bench, const entry_info &a, const entry_info &b,
                const std::string &entry_a, const std::string &entry_b, std::vector<std::optional<size_t>> &out) {
  // Not by slot name: two layouts of one call (msprobe's cross_entropy(input, target, **kwargs),
  // ATen's cross_entropy_loss with six positional arguments; backward outputs with a None between)
  // give one slot name to different arguments, while the k-th tensor of a state, dtype class and shape
  // is the same argument in both whenever the layouts agree. Argument names, where one side has
  // them, come first.
  std::vector<bool> used(b.rows.size(), false);
  std::vector<bool> done(a.rows.size(), false);
  // First by argument name where one side passed it by keyword: msprobe records a Python call's
  // keywords by name, tprobe every positional argument of the ATen schema by position (the same
  // names: torch's bindings are generated from the schemas). Whatever their values, they are one
  // argument, so a differing value is compared instead of left unpaired. A tensor still needs an
  // equal shape and dtype class.
  std::vector<argument> names_b(b.rows.size());
  for (size_t q = 0; q < b.rows.size(); ++q) names_b[q] = argument_of(bench.rows[b.rows[q]], entry_b, b);
  for (size_t k = 0; k < a.rows.size(); ++k) {
    const dump_row &r = npu.rows[a.rows[k]];
    const argument name = argument_of(r, entry_a, a);
    if (name.name.empty()) continue;
    for (size_t q = 0; q < b.rows.size(); ++q) {
      const dump_row &rb = bench.rows[b.rows[q]];
      if (used[q] || names_b[q].name != name.name || !(name.keyword || names_b[q].keyword)) continue;
      if (is_tensor(r) != is_tensor(rb)) continue;
      if (is_tensor(r) && (r.shape != rb.shape || dtype_class(r.dtype) != dtype_class(rb.dtype))) continue;
      used[q] = true;
      done[k] = true;
      out[a.rows[k]] = b.rows[q];
      break;
    }
  }
  // In order, by state, dtype class and shape; values of non-tensors first by equal value.
  const auto key = [](const dump_row &r, bool with_value) {
    std::string k = std::to_string(state_slot(r.state)) + '\x1f' + r.shape + '\x1f';
    if (is_tensor(r)) return k + dtype_class(r.dtype);
    k += "v:" + r.dtype;
    if (with_value) k += '\x1f' + cell_str(r.stats[0]);
    return k;
  };
  for (const bool with_value : {true, false}) {
    std::unordered_map<std::string, std::vector<size_t>> queue;  // key → unused bench slots, in order
    for (size_t k = b.rows.size(); k-- > 0;)
      if (!used[k]) queue[key(bench.rows[b.rows[k]], with_value)].push_back(k);
    for (size_t k = 0; k < a.rows.size(); ++k) {
      if (done[k]) continue;
      const dump_row &r = npu.rows[a.rows[k]];
      if (!with_value && is_tensor(r)) continue;  // tensors were keyed the same in both passes
      const auto it = queue.find(key(r, with_value));
      if (it == queue.end()) continue;
      while (!it->second.empty() && used[it->second.back()]) it->second.pop_back();
      if (it->second.empty()) continue;
      const size_t q = it->second.back();
      it->second.pop_back();
      used[q] = true;
      done[k] = true;
      out[a.rows[k]] = b.rows[q];
    }
  }
}

}  // namespace

std::vector<row_pair> compare_match_auto(const dump_file &npu, const dump_file &bench) {
  interner families;
  const std::vector<entry_info> ea = entries_of(npu, families), eb = entries_of(bench, families);

  // The entries taking part, in execution order: forward (and unparsed) ones, then the rest.
  std::vector<size_t> fa, fb, ba, bb;
  for (size_t i = 0; i < ea.size(); ++i)
    if (!ea[i].rows.empty()) (ea[i].dir == direction::forward || ea[i].dir == direction::other ? fa : ba).push_back(i);
  for (size_t i = 0; i < eb.size(); ++i)
    if (!eb[i].rows.empty()) (eb[i].dir == direction::forward || eb[i].dir == direction::other ? fb : bb).push_back(i);

  std::vector<std::optional<size_t>> entry_pair(ea.size());  // NPU entry → bench entry
  for (const auto &[x, y] : align(fa.size(), fb.size(), [&](size_t i, size_t j) {
         return entry_score(ea[fa[i]], eb[fb[j]], npu.entries[fa[i]], bench.entries[fb[j]]);
       }))
    entry_pair[fa[x]] = fb[y];

  // Backward entries: linked to their forward entry by the link key.
  const auto forward_of = [](const std::vector<entry_info> &es) {
    std::unordered_map<std::string, size_t> fwd;
    for (size_t i = 0; i < es.size(); ++i)
      if (es[i].dir == direction::forward) fwd.emplace(es[i].link, i);
    std::vector<std::optional<size_t>> of(es.size());
    for (size_t i = 0; i < es.size(); ++i)
      if (es[i].dir == direction::backward)
        if (const auto it = fwd.find(es[i].link); it != fwd.end()) of[i] = it->second;
    return of;
  };
  // A backward entry pairs with the backward entry of its paired forward, whatever their order; the
  // rest (no forward in the dump, or its forward unpaired) are aligned among themselves.
  const auto fwd_a = forward_of(ea), fwd_b = forward_of(eb);
  std::unordered_map<size_t, size_t> backward_of_b;  // bench forward entry → its backward entry
  for (const size_t b : bb)
    if (fwd_b[b]) backward_of_b.emplace(*fwd_b[b], b);
  std::vector<bool> bench_taken(eb.size(), false);
  std::vector<size_t> rest_a, rest_b;
  for (const size_t a : ba) {
    if (fwd_a[a] && entry_pair[*fwd_a[a]]) {
      const auto it = backward_of_b.find(*entry_pair[*fwd_a[a]]);
      if (it != backward_of_b.end() && ea[a].family == eb[it->second].family && !bench_taken[it->second]) {
        entry_pair[a] = it->second;
        bench_taken[it->second] = true;
        continue;
      }
    }
    rest_a.push_back(a);
  }
  for (const size_t b : bb)
    if (!bench_taken[b]) rest_b.push_back(b);
  for (const auto &[x, y] : align(rest_a.size(), rest_b.size(), [&](size_t i, size_t j) {
         return entry_score(ea[rest_a[i]], eb[rest_b[j]], npu.entries[rest_a[i]], bench.entries[rest_b[j]]);
       }))
    entry_pair[rest_a[x]] = rest_b[y];

  std::vector<std::optional<size_t>> row_bench(npu.rows.size());
  for (size_t i = 0; i < ea.size(); ++i)
    if (entry_pair[i]) pair_slots(npu, bench, ea[i], eb[*entry_pair[i]], npu.entries[i], bench.entries[*entry_pair[i]], row_bench);
  std::vector<row_pair> pairs(npu.rows.size());
  for (size_t i = 0; i < npu.rows.size(); ++i) pairs[i] = {i, row_bench[i]};
  return pairs;
}

}  // namespace tprobe
