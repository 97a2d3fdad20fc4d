// graph_compare.cpp: see graph_compare.h.
#include "graph_compare.h"

#include <algorithm>
#include <array>
#include <map>
#include <cmath>
#include <regex>
#include <unordered_map>

#include <fmt/format.h>

#include "compare_cell.h"
#include "compare_dump.h"
#include "compare_metrics.h"
#include "errors.h"
#include "graph_data.h"

namespace tprobe {
namespace {

using json = nlohmann::ordered_json;

constexpr double pass_index = 0.0, warning_index = 0.5, error_index = 1.0;

std::vector<std::string> ancestors_of(const graph &g, int idx) {
  std::vector<std::string> out;
  for (int p = g.nodes[static_cast<size_t>(idx)].parent; p >= 0; p = g.nodes[static_cast<size_t>(p)].parent)
    out.push_back(g.nodes[static_cast<size_t>(p)].name);
  std::reverse(out.begin(), out.end());
  return out;
}

std::vector<std::string> link_of(const graph &g, int idx) {
  std::vector<std::string> out = ancestors_of(g, idx);
  out.push_back(g.nodes[static_cast<size_t>(idx)].name);
  return out;
}

std::string field(const json &item, const char *name) {
  auto it = item.find(name);
  return it != item.end() && it->is_string() ? it->get<std::string>() : std::string();
}

// The "structure" msprobe checks before matching two nodes: as many inputs and outputs, with the
// same type and shape pairwise.
bool same_structure(const graph_node &a, const graph_node &b, bool shapes_only) {
  auto same = [&](const json &x, const json &y) {
    if (!shapes_only && x.size() != y.size()) return false;
    auto i = x.begin();
    auto j = y.begin();
    for (; i != x.end() && j != y.end(); ++i, ++j) {
      if (field(*i, "shape") != field(*j, "shape")) return false;
      if (!shapes_only && field(*i, "type") != field(*j, "type")) return false;
    }
    return true;
  };
  return same(a.input_data, b.input_data) && same(a.output_data, b.output_data);
}

// msprobe's fuzzy key of an API inside a module: call counts and rank suffixes removed.
std::string fuzzy_key(const std::string &name) {
  static const std::regex count(R"(\.\d+\.)");
  static const std::regex rank(R"(_rank\d+)");
  std::string k = std::regex_replace(name, count, ".");
  return std::regex_replace(k, rank, "");
}

// Relative error text "33.333%" (or a number) as a fraction; nullopt when not a number.
std::optional<double> relative_fraction(const std::string &text) {
  std::string t = text;
  bool percent = false;
  if (!t.empty() && t.back() == '%') t.pop_back(), percent = true;
  const auto v = py_float_parse(t);
  if (!v) return std::nullopt;
  return percent ? *v / 100.0 : *v;
}

bool non_finite_stat(const json &item) {
  for (const char *s : {"Max", "Min"}) {
    const std::string t = field(item, s);
    if (t == "nan" || t == "inf" || t == "-inf") return true;
  }
  return false;
}

std::string cell_text(const cell &c) {
  switch (c.k) {
    case cell::kind::real: return graph_format_value(json(c.real));
    case cell::kind::integer: return std::to_string(c.integer);
    case cell::kind::boolean: return c.boolean ? "True" : "False";
    case cell::kind::text: return graph_format_value(json(c.text));
    default: return "null";
  }
}

// One compared item of a pair: where its fields go, and the rows it came from.
struct item_pair {
  int node;              // NPU node index
  bool output;           // in output_data (else input_data)
  std::string key;       // the NPU item's key
  size_t npu_row, bench_row;
};

bool is_empty_api(const std::string &name) {
  static const char *empties[] = {"empty", "empty_like", "empty_with_format", "new_empty_strided", "new_empty", "empty_strided"};
  const size_t a = name.find('.');
  if (a == std::string::npos) return false;
  const size_t b = name.find('.', a + 1);
  const std::string second = name.substr(a + 1, b == std::string::npos ? std::string::npos : b - a - 1);
  return std::any_of(std::begin(empties), std::end(empties), [&](const char *e) { return second == e; });
}

// The items of a node worth comparing (msprobe: those with a Max), by section.
std::vector<std::string> keys_of(const json &data) {
  std::vector<std::string> out;
  for (const auto &[k, v] : data.items()) out.push_back(k);
  return out;
}

// The unrounded metrics of one compared item: msprobe decides the index on these, not on the
// 6-decimal texts the items show.
struct raw_metrics {
  std::array<std::optional<double>, 4> relative;  // Max, Min, Mean, Norm relative errors, as fractions
  std::optional<double> thousandth, cosine;       // tensors
  bool passed = true;                             // md5
};

struct comparer {
  graph &npu;
  graph &bench;
  const graph_compare_options &options;
  dump_file nd, bd;
  compare_mode mode = compare_mode::summary;
  std::unordered_map<std::string, size_t> npu_rows, bench_rows;
  std::vector<int> match;  // NPU node -> bench node, -1
  std::map<std::pair<int, std::string>, raw_metrics> raw;  // (NPU node, item key) -> its metrics
  graph_compare_result result;

  comparer(graph &n, graph &b, const std::string &npu_dump, const std::string &bench_dump, const graph_compare_options &o)
      : npu(n), bench(b), options(o), nd(dump_load(npu_dump, "NPU")), bd(dump_load(bench_dump, "bench")) {
    mode = dump_mode(nd, bd);
    for (size_t i = 0; i < nd.rows.size(); ++i) npu_rows.emplace(nd.rows[i].name, i);
    for (size_t i = 0; i < bd.rows.size(); ++i) bench_rows.emplace(bd.rows[i].name, i);
    match.assign(npu.nodes.size(), -1);
  }

  void pair(int i, int j) {
    match[static_cast<size_t>(i)] = j;
    const bool same_link = options.layer_map.empty() && !options.fuzzy;
    npu.nodes[static_cast<size_t>(i)].matched_link = same_link ? link_of(npu, i) : link_of(bench, j);
    bench.nodes[static_cast<size_t>(j)].matched_link = link_of(npu, i);
  }

  // Visits the NPU nodes in pre-order from the root (msprobe matches in that order).
  template <class Visit>
  void preorder(Visit visit) {
    std::vector<int> todo{0};
    while (!todo.empty()) {
      const int i = todo.back();
      todo.pop_back();
      const graph_node &n = npu.nodes[static_cast<size_t>(i)];
      for (auto c = n.children.rbegin(); c != n.children.rend(); ++c) todo.push_back(*c);
      visit(i, n);
    }
  }

  void match_default() {
    // A node is matched on its own: same name (or its mapped one), ancestors and structure.
    preorder([&](int i, const graph_node &n) {
      auto mapped = options.layer_map.find(n.name);
      const std::string want = mapped != options.layer_map.end() ? mapped->second : n.name;
      auto it = bench.index.find(want);
      if (it == bench.index.end()) return;
      const int j = it->second;
      if (options.layer_map.empty()) {
        if (ancestors_of(npu, i) != ancestors_of(bench, j)) return;
        if (!same_structure(n, bench.nodes[static_cast<size_t>(j)], false)) return;
      }
      pair(i, j);
    });
  }

  void match_fuzzy() {
    preorder([&](int i, const graph_node &n) {
      if (n.kind == graph_node_kind::api) return;  // matched inside their module below
      auto it = bench.index.find(n.name);
      if (it == bench.index.end() || !same_structure(n, bench.nodes[static_cast<size_t>(it->second)], true)) return;
      const int j = it->second;
      pair(i, j);
      // The APIs directly inside the two nodes, by name without counts and order of appearance.
      auto keyed = [](const graph &g, int at) {
        std::unordered_map<std::string, int> seen;
        std::unordered_map<std::string, int> out;
        for (int c : g.nodes[static_cast<size_t>(at)].children) {
          const graph_node &x = g.nodes[static_cast<size_t>(c)];
          if (x.kind != graph_node_kind::api) continue;
          const std::string k = fuzzy_key(x.name);
          out.emplace(k + std::to_string(++seen[k]), c);
        }
        return out;
      };
      const auto bench_apis = keyed(bench, j);
      for (const auto &[k, c] : keyed(npu, i)) {
        auto b = bench_apis.find(k);
        if (b != bench_apis.end() &&
            same_structure(npu.nodes[static_cast<size_t>(c)], bench.nodes[static_cast<size_t>(b->second)], true))
          pair(c, b->second);
      }
    });
  }

  // Each matched pair's items, by position within inputs and within outputs.
  std::vector<item_pair> item_pairs() const {
    std::vector<item_pair> out;
    for (size_t i = 1; i < npu.nodes.size(); ++i) {
      const int j = match[i];
      if (j < 0) continue;
      const graph_node &n = npu.nodes[i];
      const graph_node &b = bench.nodes[static_cast<size_t>(j)];
      for (bool output : {false, true}) {
        const json &nd_items = output ? n.output_data : n.input_data;
        const json &bd_items = output ? b.output_data : b.input_data;
        const std::vector<std::string> nk = keys_of(nd_items), bk = keys_of(bd_items);
        for (size_t p = 0; p < nk.size() && p < bk.size(); ++p) {
          if (field(nd_items[nk[p]], "Max").empty() || field(nd_items[nk[p]], "Max") == "null") continue;
          auto r = npu_rows.find(nk[p]);
          auto s = bench_rows.find(bk[p]);
          if (r == npu_rows.end() || s == bench_rows.end()) continue;
          out.push_back({static_cast<int>(i), output, nk[p], r->second, s->second});
        }
      }
    }
    return out;
  }

  json &item_of(const item_pair &p) {
    graph_node &n = npu.nodes[static_cast<size_t>(p.node)];
    return (p.output ? n.output_data : n.input_data)[p.key];
  }

  void add_fields() {
    const std::vector<item_pair> pairs = item_pairs();
    if (mode == compare_mode::all) {
      if (!options.fill_real_data) throw usage_error("graph compare of tensor dumps needs the tensor reader (tools/graph)");
      compare_table t;
      t.options.mode = compare_mode::all;
      t.npu = &nd;
      t.bench = &bd;
      for (const item_pair &p : pairs) {
        compare_row row;
        row.npu = p.npu_row;
        row.bench = p.bench_row;
        row.req_grad_consistent = cell_str(nd.rows[p.npu_row].requires_grad) == cell_str(bd.rows[p.bench_row].requires_grad);
        t.rows.push_back(std::move(row));
      }
      options.fill_real_data(t);
      static const char *names[] = {"Cosine", "EucDist", "MaxAbsErr", "MaxRelativeErr", "One Thousandth Err Ratio",
                                    "Five Thousandths Err Ratio"};
      for (size_t r = 0; r < pairs.size(); ++r) {
        json &item = item_of(pairs[r]);
        for (size_t m = 0; m < 6; ++m) item[names[m]] = cell_text(t.rows[r].metrics[m]);
        raw_metrics &rm = raw[{pairs[r].node, pairs[r].key}];
        if (t.rows[r].metrics[METRIC_ONE_THOUSANDTH].is_number()) rm.thousandth = t.rows[r].metrics[METRIC_ONE_THOUSANDTH].number();
        if (t.rows[r].metrics[METRIC_COSINE].is_number()) rm.cosine = t.rows[r].metrics[METRIC_COSINE].number();
        item["Requires_grad Consistent"] = t.rows[r].req_grad_consistent ? "True" : "False";
        if (t.rows[r].error) ++result.unreadable;
      }
      return;
    }
    for (const item_pair &p : pairs) {
      const dump_row &a = nd.rows[p.npu_row];
      const dump_row &b = bd.rows[p.bench_row];
      json &item = item_of(p);
      raw_metrics &rm = raw[{p.node, p.key}];
      if (mode == compare_mode::md5) {
        item["Result"] = compare_md5(a.md5, b.md5);
        rm.passed = item["Result"] == "pass";
      } else {
        const summary_result s = compare_summary(a.stats, b.stats);
        static const char *diffs[] = {"Max diff", "Min diff", "Mean diff", "L2norm diff"};
        static const char *rels[] = {"MaxRelativeErr", "MinRelativeErr", "MeanRelativeErr", "NormRelativeErr"};
        for (size_t k = 0; k < 4; ++k) {
          // Python subtracts two ints as an int (a non-tensor argument's "statistics")
          const bool ints = a.stats[k].k == cell::kind::integer && b.stats[k].k == cell::kind::integer;
          item[diffs[k]] = ints ? std::to_string(a.stats[k].integer - b.stats[k].integer) : cell_text(s.diff[k]);
        }
        for (size_t k = 0; k < 4; ++k) {
          item[rels[k]] = cell_text(s.relative_err[k]);
          if (s.relative_err[k].k == cell::kind::text) rm.relative[k] = relative_fraction(s.relative_err[k].text);
        }
      }
      item["Requires_grad Consistent"] = cell_str(a.requires_grad) == cell_str(b.requires_grad) ? "True" : "False";
    }
  }

  // ---- precision_index ----

  // msprobe 8.3.3's numbers (graph_compare.h).
  const raw_metrics *raw_of(int idx, const std::string &key) const {
    auto it = raw.find({idx, key});
    return it == raw.end() ? nullptr : &it->second;
  }

  std::optional<double> index_833(int idx) const {
    const graph_node &n = npu.nodes[static_cast<size_t>(idx)];
    if (mode == compare_mode::md5) {
      double index = 1;
      for (const json *data : {&n.input_data, &n.output_data})
        for (const auto &[k, item] : data->items())
          if (const raw_metrics *rm = raw_of(idx, k); rm && !rm->passed) index = 0;
      return is_empty_api(n.name) ? 1.0 : index;
    }
    if (mode == compare_mode::summary) {
      double worst = 0;
      for (const auto &[k, item] : n.output_data.items()) {
        if (field(item, "Max") == "null" || field(item, "Max").empty()) continue;
        if (const raw_metrics *rm = raw_of(idx, k))
          for (const auto &v : rm->relative)
            if (v) worst = std::max(worst, *v);
        if (non_finite_stat(item)) worst = 1;
      }
      return is_empty_api(n.name) ? 0.0 : std::min(worst, 1.0);
    }
    auto lowest = [&](const json &data) -> std::optional<double> {  // nullopt: N/A
      double low = 1;
      for (const auto &[k, item] : data.items()) {
        if (field(item, "Max") == "null" || field(item, "Max").empty()) continue;
        if (non_finite_stat(item)) return std::nullopt;
        if (field(item, "shape") == "[]") continue;
        if (const raw_metrics *rm = raw_of(idx, k); rm && rm->thousandth) low = std::min(low, *rm->thousandth);
      }
      return low;
    };
    const auto in = lowest(n.input_data), out = lowest(n.output_data);
    double index = !out ? 1.0 : !in ? 0.0 : std::clamp(*in - *out, 0.0, 1.0);
    return is_empty_api(n.name) ? 0.0 : index;
  }

  // The levels rule (graph_compare.h): blame where the runs part.
  double index_levels(int idx) const {
    const graph_node &n = npu.nodes[static_cast<size_t>(idx)];
    if (is_empty_api(n.name)) return pass_index;
    double index = pass_index;
    auto raise = [&](double v) { index = std::max(index, v); };
    // Agreement of one item: summary, its norm's relative error (fraction); all, its one-thousandth
    // ratio turned into a disagreement (1 - ratio); md5, 0 or 1.
    auto disagreement = [&](const std::string &key, const json &item) -> std::optional<double> {
      const raw_metrics *rm = raw_of(idx, key);
      if (!rm) return std::nullopt;
      if (mode == compare_mode::md5) return rm->passed ? 0.0 : 1.0;
      if (mode == compare_mode::summary) {
        if (rm->relative[3]) return *rm->relative[3];  // the norm's
        // A zero norm on the bench side: N/A; the maximum's still says whether they agree.
        return rm->relative[0];
      }
      if (field(item, "shape") == "[]" || !rm->thousandth) return std::nullopt;
      return 1.0 - *rm->thousandth;
    };
    const double error_above = mode == compare_mode::all ? 0.9 : 0.5;  // 1 - 0.1 ratio: tensors
    const double warn_above = 0.1;
    const double agree_below = 0.1;
    double in_worst = 0, param_worst = 0;
    bool in_non_finite = false;
    for (const auto &[k, item] : n.input_data.items()) {
      const bool parameter = k.find(".parameters.") != std::string::npos;
      if (non_finite_stat(item)) in_non_finite = true;
      if (const auto d = disagreement(k, item)) (parameter ? param_worst : in_worst) = std::max(parameter ? param_worst : in_worst, *d);
    }
    // Parameters that differ are this node's own difference: blamed from the inputs' threshold on.
    if (param_worst > agree_below) raise(error_index);
    else if (param_worst > agree_below / 10) raise(warning_index);
    for (const auto &[k, item] : n.output_data.items()) {
      if (field(item, "Requires_grad Consistent") == "False") raise(warning_index);
      if (non_finite_stat(item) && !in_non_finite) raise(error_index);
      const auto d = disagreement(k, item);
      if (!d || in_worst >= agree_below) continue;
      if (*d > error_above) raise(error_index);
      else if (*d > warn_above) raise(warning_index);
    }
    if (mode == compare_mode::all) {  // CosineWarn: the cosine falls by more than 0.1 across the node
      double in_cos = 1, out_cos = 1;
      for (const auto &[k, item] : n.input_data.items())
        if (const raw_metrics *rm = raw_of(idx, k); rm && rm->cosine) in_cos = std::min(in_cos, *rm->cosine);
      for (const auto &[k, item] : n.output_data.items())
        if (const raw_metrics *rm = raw_of(idx, k); rm && rm->cosine) out_cos = std::min(out_cos, *rm->cosine);
      if (in_cos > 0.9 && in_cos - out_cos > 0.1) raise(warning_index);
    }
    return index;
  }

  bool in_error_band(double v) const {
    if (options.rule == graph_rule::levels) return v >= 0.6;
    if (mode == compare_mode::md5) return v == 0;
    return mode == compare_mode::summary ? v >= 0.8 : v >= 0.2;
  }

  void set_indexes() {
    for (size_t i = 1; i < npu.nodes.size(); ++i) {
      graph_node &n = npu.nodes[i];
      if (match[i] < 0 || n.kind == graph_node_kind::api_collection) continue;
      n.precision_index = options.rule == graph_rule::levels ? index_levels(static_cast<int>(i)) : index_833(static_cast<int>(i));
    }
    if (options.rule == graph_rule::msprobe_833) {
      // Collections take their children's worst (md5: lowest), matched or not.
      for (int c : npu.nodes[0].children) {
        graph_node &n = npu.nodes[static_cast<size_t>(c)];
        if (n.kind != graph_node_kind::api_collection) continue;
        const bool md5 = mode == compare_mode::md5;
        double v = md5 ? 1 : 0;
        for (int k : n.children) {
          const auto &x = npu.nodes[static_cast<size_t>(k)].precision_index;
          v = md5 ? std::min(v, x.value_or(1)) : std::max(v, x.value_or(0));
        }
        n.precision_index = v;
      }
    } else {
      // Modules and collections carry the worst of their descendants (post-order: children first).
      carry(0);
      npu.nodes[0].precision_index.reset();
    }
  }

  std::optional<double> carry(int at) {
    graph_node &n = npu.nodes[static_cast<size_t>(at)];
    std::optional<double> worst = n.precision_index;
    for (int c : n.children) {
      const auto v = carry(c);
      if (v && (!worst || *v > *worst)) worst = v;
    }
    if (n.kind != graph_node_kind::api && (match[static_cast<size_t>(at)] >= 0 || n.kind == graph_node_kind::api_collection))
      n.precision_index = worst;
    return worst;
  }

  void find_first_error(int at) {
    const graph_node &n = npu.nodes[static_cast<size_t>(at)];
    for (int c : n.children) find_first_error(c);
    if (!result.first_error_node.empty() || at == 0 || n.kind == graph_node_kind::api_collection) return;
    if (n.precision_index && in_error_band(*n.precision_index)) result.first_error_node = n.name;
  }

  graph_compare_result run() {
    if (options.fuzzy) match_fuzzy();
    else match_default();
    add_fields();
    set_indexes();
    result.task = compare_mode_name(mode);
    for (size_t i = 1; i < npu.nodes.size(); ++i) (match[i] >= 0 ? result.matched : result.unmatched) += 1;
    // The first node where the runs part, by the rule's own blame (not a carried colour): a leaf
    // first in post-order, i.e. the earliest call.
    find_first_error(0);
    return result;
  }
};

json colors_833(const std::string &task) {
  const json unmatched = {{"value", json::array()}, {"description", "比对过程中节点未匹配上"}};
  json c = json::object();
  if (task == "md5") {
    c["#FFFCF3"] = {{"value", {1, 1}}, {"description", "与标杆相比, 此节点所有输入输出的md5值相同"}};
    c["#FF704D"] = {{"value", {0, 0}}, {"description", "与标杆相比, 此节点任意输入输出的md5值不同"}};
    c["#C7C7C7"] = unmatched;
    return c;
  }
  const bool summary = task == "summary";
  const std::string description =
      summary ? "此节点所有输入输出的统计量相对误差, 值越大代表测量值与标杆值的偏差越大, 相对误差计算方式:|(测量值-标杆值)/标杆值|"
              : "此节点所有输入的最小双千分之一和所有输出的最小双千分之一的差值的绝对值, 代表双千指标的变化情况, "
                "值越大代表测量值与标杆值的偏差越大, 双千分之一指标计算方式：Tensor中的元素逐个与对应的标杆数据对比，"
                "相对误差小于千分之一的比例占总元素个数的比例，比例越接近1越好";
  const double s = summary ? 0.2 : 0.05;
  const char *hexes[] = {"#FFFCF3", "#FFEDBE", "#FFDC7F", "#FFC62E", "#FF704D"};
  for (int k = 0; k < 5; ++k) {
    const double lo = k * s, hi = k == 4 ? 1.0 : (k + 1) * s;
    // msprobe writes 0 and 1 as integers, the steps as floats
    json range = json::array();
    range.push_back(lo == 0 ? json(0) : json(std::round(lo * 100) / 100));
    range.push_back(hi == 1 ? json(1) : json(std::round(hi * 100) / 100));
    c[hexes[k]] = {{"value", range}, {"description", description}};
  }
  c["#C7C7C7"] = unmatched;
  return c;
}

}  // namespace

graph_compare_result graph_compare(graph &npu, graph &bench, const std::string &npu_dump, const std::string &bench_dump,
                                   const graph_compare_options &options) {
  if (npu.nodes.empty() || bench.nodes.empty()) throw usage_error("graph compare: a graph without its root");
  comparer c(npu, bench, npu_dump, bench_dump, options);
  // The roots match (msprobe), with no data to compare.
  c.match[0] = 0;
  npu.nodes[0].matched_link = {npu.nodes[0].name};
  bench.nodes[0].matched_link = {bench.nodes[0].name};
  return c.run();
}

nlohmann::ordered_json graph_node_colors(const std::string &task, graph_rule rule) {
  if (rule == graph_rule::msprobe_833) return colors_833(task);
  json c = json::object();
  c["#FFFCF3"] = {{"value", {0, 0.3}}, {"description", "pass: where the inputs agree with the bench, so do the outputs"}};
  c["#FFDC7F"] = {{"value", {0.3, 0.6}},
                  {"description", "warning: the outputs drift from the bench's more than the inputs do, or their dtype, "
                                  "shape or requires_grad differ (or, for a module, a node inside it)"}};
  c["#FF704D"] = {{"value", {0.6, 1}},
                  {"description", "error: the inputs agree and the outputs do not, an output turns NaN/Inf, or the "
                                  "parameters differ (or, for a module, a node inside it): where the two runs part"}};
  c["#C7C7C7"] = {{"value", json::array()}, {"description", "比对过程中节点未匹配上 (no counterpart in the bench run)"}};
  return c;
}

nlohmann::ordered_json graph_tool_tip(const std::string &task) {
  json t = json::object();
  if (task == "md5") {
    t["md5"] = "数据MD5信息，用于比较两个数据信息是否完全一致";
  } else if (task == "summary") {
    t["Max diff"] = "NPU与标杆API统计信息比对，最大值的差值";
    t["Min diff"] = "NPU与标杆API统计信息比对，最小值的差值";
    t["Mean diff"] = "NPU与标杆API统计信息比对，平均值的差值";
    t["L2norm diff"] = "NPU与标杆API统计信息比对，2范数（平方根）的差值";
  } else {
    t["One Thousandth Err Ratio"] =
        "Tensor中的元素逐个与对应的标杆数据对比，相对误差小于千分之一的比例占总元素个数的比例，比例越接近1越好";
    t["Five Thousandths Err Ratio"] =
        "Tensor中的元素逐个与对应的标杆数据对比，相对误差小于千分之五的比例占总元素个数的比例，比例越接近1越好";
    t["Cosine"] =
        "通过计算两个向量的余弦值来判断其相似度，数值越接近于1说明计算出的两个张量越相似，实际可接受阈值为大于0.99。"
        "在计算中可能会存在nan，主要由于可能会出现其中一个向量为0";
    t["MaxAbsErr"] = "当最大绝对误差越接近0表示其计算的误差越小，实际可接受阈值为小于0.001";
    t["MaxRelativeErr"] =
        "当最大相对误差越接近0表示其计算的误差越小。当dump数据中存在0或Nan时，比对结果中最大相对误差则出现inf或Nan的情况，"
        "属于正常现象";
  }
  return t;
}

}  // namespace tprobe
