// report_graph.cpp: the report's reader of a graph file (.vis.db, report.h "report_graph") and the
// compact form the page's graph view reads (report_append_graph_json).
#include <algorithm>
#include <cmath>
#include <fstream>
#include <unordered_map>

#include <fmt/format.h>

#include "errors.h"
#include "report.h"
#include "vis_db.h"

namespace tprobe {

using ojson = nlohmann::ordered_json;

bool report_graph::negative() const {
  for (const auto &g : graphs)
    if (g.first_failing) return true;
  return false;
}

size_t report_graph::nodes() const {
  size_t n = 0;
  for (const auto &g : graphs) n += g.names.size();
  return n;
}

namespace {

std::string text_of(const ojson &row, const char *column) {
  auto it = row.find(column);
  if (it == row.end()) throw usage_error(fmt::format("tb_nodes has no column {}", column));
  if (it->is_null()) return {};
  if (it->is_string()) return it->get<std::string>();
  return it->dump();
}

int64_t int_of(const ojson &row, const char *column) {
  auto it = row.find(column);
  if (it == row.end() || !it->is_number_integer()) throw usage_error(fmt::format("{} is not an integer", column));
  return it->get<int64_t>();
}

std::vector<int64_t> int_list(const ojson &config, const char *column) {
  std::vector<int64_t> out;
  const std::string text = text_of(config, column);
  ojson v = ojson::parse(text, nullptr, false);
  if (!v.is_array()) throw usage_error(fmt::format("tb_config.{} is not a JSON list: {}", column, text));
  for (const auto &x : v)
    if (x.is_number_integer()) out.push_back(x.get<int64_t>());
  return out;
}

void read_colors(report_graph &r, const ojson &config) {
  const std::string text = text_of(config, "node_colors");
  ojson colors = ojson::parse(text, nullptr, false);
  if (colors.is_null() || colors.is_discarded()) {
    if (colors.is_discarded()) throw usage_error("tb_config.node_colors is not JSON: " + text.substr(0, 80));
    return;  // a build graph: "null"
  }
  if (!colors.is_object()) throw usage_error("tb_config.node_colors is not a JSON object");
  for (const auto &[hex, entry] : colors.items()) {
    const ojson value = entry.is_object() && entry.contains("value") ? entry["value"] : ojson();
    const std::string description = entry.is_object() && entry.contains("description") && entry["description"].is_string()
                                        ? entry["description"].get<std::string>() : "";
    if (value.is_array() && value.empty()) {
      r.unmatched_color = hex;
      continue;
    }
    if (!value.is_array() || value.size() != 2 || !value[0].is_number() || !value[1].is_number())
      throw usage_error(fmt::format("tb_config.node_colors[{}] has no [lo, hi] range", hex));
    r.colors.push_back({hex, description, value[0].get<double>(), value[1].get<double>()});
  }
  // msprobe lists the ranges from pass to error: the last one is the error band (summary
  // [0.8, 1]; md5 [0, 0], where 1 means the same md5).
  if (!r.colors.empty()) r.error_color = r.colors.size() - 1;
}

// The colour of a value: the last range (msprobe's order) holding it, so that a value on a shared
// bound (0.8 in [0.6, 0.8] and [0.8, 1]) takes the worse colour, as the error band test does.
int band_of(const report_graph &r, double v) {
  int band = -1;
  for (size_t i = 0; i < r.colors.size(); ++i)
    if (r.colors[i].lo <= v && v <= r.colors[i].hi) band = static_cast<int>(i);
  return band;
}

}  // namespace

report_graph report_read_graph(const std::string &path) {
  {
    std::ifstream probe(path, std::ios::binary);
    if (!probe) throw system_error(fmt::format("unable to open {}", path));
  }
  report_graph r;
  r.file = path;
  std::vector<ojson> rows;
  ojson config;
  try {
    rows = vis_db_read_nodes(path);
    config = vis_db_read_config(path);
  } catch (const std::exception &e) {
    // Not SQLite, or not msprobe's tables: a malformed result, not an I/O failure of ours.
    throw usage_error(fmt::format("{}: not a graph file (.vis.db): {}", path, e.what()));
  }
  try {
    if (!config.is_object()) throw usage_error("tb_config has no row");
    r.graph_type = text_of(config, "graph_type");
    r.task = text_of(config, "task");
    read_colors(r, config);
    r.rank_list = int_list(config, "rank_list");
    r.step_list = int_list(config, "step_list");
    if (rows.empty()) throw usage_error("tb_nodes has no row");

    // Rows by graph (first appearance), then node_order.
    std::unordered_map<std::string, size_t> graph_of;
    std::vector<std::vector<std::pair<int64_t, size_t>>> order;  // per graph: (node_order, row)
    for (size_t i = 0; i < rows.size(); ++i) {
      const std::string id = text_of(rows[i], "graph_id");
      auto [it, added] = graph_of.emplace(id, r.graphs.size());
      if (added) {
        report_graph_view g;
        g.id = id;
        g.source = text_of(rows[i], "data_source");
        g.step = int_of(rows[i], "step");
        g.rank = int_of(rows[i], "rank");
        r.graphs.push_back(std::move(g));
        order.emplace_back();
      }
      order[it->second].emplace_back(int_of(rows[i], "node_order"), i);
    }
    std::vector<std::unordered_map<std::string, int>> index(r.graphs.size());
    for (size_t k = 0; k < r.graphs.size(); ++k) {
      auto &g = r.graphs[k];
      auto &o = order[k];
      std::stable_sort(o.begin(), o.end());
      const size_t n = o.size();
      g.names.reserve(n);
      g.parent.assign(n, -1);
      g.kind.assign(n, '0');
      g.precision.assign(n, std::nullopt);
      g.band.assign(n, '.');
      g.input_data.resize(n);
      g.output_data.resize(n);
      for (size_t j = 0; j < n; ++j) {
        const ojson &row = rows[o[j].second];
        g.names.push_back(text_of(row, "node_name"));
        if (!index[k].emplace(g.names.back(), static_cast<int>(j)).second)
          throw usage_error(fmt::format("graph {}: node {} twice", g.id, g.names.back()));
        const std::string type = text_of(row, "node_type");
        g.kind[j] = type.size() == 1 ? type[0] : '0';
        const ojson &pi = row["precision_index"];
        if (pi.is_number()) {
          g.precision[j] = pi.get<double>();
          const int band = band_of(r, *g.precision[j]);
          if (band >= 0 && band < 10) g.band[j] = static_cast<char>('0' + band);
          if (!g.first_failing && r.error_color && band == static_cast<int>(*r.error_color)) g.first_failing = j;
        }
        g.input_data[j] = text_of(row, "input_data");
        g.output_data[j] = text_of(row, "output_data");
      }
      for (size_t j = 0; j < n; ++j) {
        const std::string up = text_of(rows[o[j].second], "up_node");
        if (up.empty()) continue;
        auto it = index[k].find(up);
        if (it == index[k].end()) throw usage_error(fmt::format("graph {}: node {}'s parent {} is not in it", g.id, g.names[j], up));
        g.parent[j] = it->second;
      }
    }
    // Links: NPU_s_r <-> Bench_s_r, each node to the last name of its matched_node_link.
    if (r.graph_type == "compare") {
      for (size_t k = 0; k < r.graphs.size(); ++k) {
        auto &g = r.graphs[k];
        const std::string other = (g.source == "NPU" ? "Bench_" : "NPU_") + std::to_string(g.step) + "_" + std::to_string(g.rank);
        auto p = graph_of.find(other);
        if (p == graph_of.end()) continue;
        g.peer = static_cast<int>(p->second);
        g.link.assign(g.names.size(), -1);
        const auto &o = order[k];
        for (size_t j = 0; j < o.size(); ++j) {
          const std::string text = text_of(rows[o[j].second], "matched_node_link");
          if (text.size() <= 2) continue;  // "[]" or ""
          ojson link = ojson::parse(text, nullptr, false);
          if (!link.is_array() || link.empty() || !link.back().is_string()) continue;
          auto t = index[p->second].find(link.back().get<std::string>());
          if (t != index[p->second].end()) g.link[j] = t->second;
        }
      }
    }
  } catch (const usage_error &e) {
    throw usage_error(fmt::format("{}: {}", path, e.what()));
  }
  return r;
}

namespace {

// Item fields the page leaves out: what every item has and the panel need not show.
bool dropped_field(const std::string &f) {
  return f == "type" || f == "requires_grad" || f == "data_name" || f == "value" || f == "full_op_name" || f == "state";
}

void append_string(std::string &out, const std::string &s) {
  out += ojson(s).dump(-1, ' ', false, ojson::error_handler_t::replace);
}

template <typename T>
void append_ints(std::string &out, const std::vector<T> &v) {
  out += '[';
  for (size_t i = 0; i < v.size(); ++i) {
    if (i) out += ',';
    out += std::to_string(v[i]);
  }
  out += ']';
}

// JS string length (UTF-16 units) of UTF-8 text: the page slices the items' text by these offsets.
size_t utf16_length(std::string_view s) {
  size_t n = 0;
  for (unsigned char c : s) n += (c & 0xC0) != 0x80 ? (c >= 0xF0 ? 2 : 1) : 0;
  return n;
}

// A value inside the items' text: its separators (tab, newline) become spaces.
void append_cell(std::string &out, std::string_view v) {
  for (char c : v) out += (c == '\t' || c == '\n') ? ' ' : c;
}

}  // namespace

// {"file","type","task","colors":[[hex,lo,hi,description]…],"unmatched":hex,"error":k|null,
//  "ranks","steps","fields":[…],"graphs":[{"id","source","step","rank","names","parent","kind",
//  "band","pi","peer","link","off","items","first"}]}. "items" is one string per graph, read only
// when a node is opened in the panel (a JSON string parses far faster than arrays of numbers or
// strings): node i's items are items.slice(off[i], off[i+1]), each "\n"-ended, as
// "{side 0|1}{key}\t{field 0}\t{field 1}…" with "" for a field the item lacks; a key that starts
// with its node's name travels as the rest of it (".output.0"). A matched bench node has none: its
// NPU node's items hold its values with the differences (the panel links there).
void report_append_graph_json(std::string &out, const report_graph &r) {
  std::vector<std::string> fields;
  std::unordered_map<std::string, size_t> field_index;
  std::vector<std::string> texts(r.graphs.size());
  std::vector<std::vector<size_t>> offsets(r.graphs.size());
  for (size_t k = 0; k < r.graphs.size(); ++k) {
    const auto &g = r.graphs[k];
    std::string &text = texts[k];
    auto &off = offsets[k];
    off.reserve(g.names.size() + 1);
    size_t units = 0;
    off.push_back(0);
    for (size_t j = 0; j < g.names.size(); ++j) {
      const size_t start = text.size();
      // A matched bench node's values are in its NPU node's items (with the differences): left out,
      // which halves a compare page (its load time at 10^5 nodes is mostly this text).
      const bool carried_by_npu = g.source == "Bench" && !g.link.empty() && g.link[j] >= 0;
      for (int side = 0; side < 2 && !carried_by_npu; ++side) {
        const std::string &data_text = side ? g.output_data[j] : g.input_data[j];
        if (data_text.size() <= 2) continue;
        ojson data = ojson::parse(data_text, nullptr, false);
        if (!data.is_object()) continue;
        for (const auto &[key, v] : data.items()) {
          const std::string &name = g.names[j];
          text += side ? '1' : '0';
          append_cell(text, key.size() > name.size() && key.compare(0, name.size(), name) == 0 && key[name.size()] == '.'
                                ? std::string_view(key).substr(name.size()) : std::string_view(key));
          std::vector<std::string> cells;
          if (v.is_object())
            for (const auto &[f, x] : v.items()) {
              if (dropped_field(f)) continue;
              auto [fi, added] = field_index.emplace(f, fields.size());
              if (added) fields.push_back(f);
              if (cells.size() <= fi->second) cells.resize(fi->second + 1);
              cells[fi->second] = x.is_string() ? x.get<std::string>() : x.dump();
            }
          for (const auto &c : cells) {
            text += '\t';
            append_cell(text, c);
          }
          text += '\n';
        }
      }
      units += utf16_length(std::string_view(text).substr(start));
      off.push_back(units);
    }
  }
  out += "{\"file\":";
  append_string(out, r.file);
  out += ",\"type\":";
  append_string(out, r.graph_type);
  out += ",\"task\":";
  append_string(out, r.task);
  ojson colors = ojson::array();
  for (const auto &c : r.colors) colors.push_back(ojson::array({c.hex, c.lo, c.hi, c.description}));
  out += ",\"colors\":" + colors.dump(-1, ' ', false, ojson::error_handler_t::replace);
  out += ",\"unmatched\":";
  append_string(out, r.unmatched_color);
  out += ",\"error\":" + (r.error_color ? std::to_string(*r.error_color) : std::string("null"));
  out += ",\"ranks\":";
  append_ints(out, r.rank_list);
  out += ",\"steps\":";
  append_ints(out, r.step_list);
  out += ",\"fields\":" + ojson(fields).dump(-1, ' ', false, ojson::error_handler_t::replace);
  out += ",\"graphs\":[";
  for (size_t k = 0; k < r.graphs.size(); ++k) {
    const auto &g = r.graphs[k];
    if (k) out += ',';
    out += "{\"id\":";
    append_string(out, g.id);
    out += ",\"source\":";
    append_string(out, g.source);
    out += fmt::format(",\"step\":{},\"rank\":{},\"names\":[", g.step, g.rank);
    for (size_t j = 0; j < g.names.size(); ++j) {
      if (j) out += ',';
      append_string(out, g.names[j]);
    }
    out += "],\"parent\":";
    append_ints(out, g.parent);
    out += ",\"kind\":";
    append_string(out, g.kind);
    out += ",\"band\":";
    append_string(out, g.band);
    out += ",\"pi\":";
    bool any = false;
    for (const auto &p : g.precision) any = any || p.has_value();
    if (!any) {
      out += "null";
    } else {
      out += '[';
      for (size_t j = 0; j < g.precision.size(); ++j) {
        if (j) out += ',';
        const auto &p = g.precision[j];
        out += p && std::isfinite(*p) ? fmt::format("{:.6g}", *p) : "null";
      }
      out += ']';
    }
    out += fmt::format(",\"peer\":{},\"link\":", g.peer);
    if (g.link.empty()) out += "null";
    else append_ints(out, g.link);
    out += ",\"off\":";
    append_ints(out, offsets[k]);
    out += ",\"items\":";
    append_string(out, texts[k]);
    out += ",\"first\":" + (g.first_failing ? std::to_string(*g.first_failing) : std::string("null")) + "}";
  }
  out += "]}";
}

std::string report_graph_summary_line(const report_graph &r) {
  std::string line = fmt::format("tprobe-report: graph {}: {}: {}{}, {} graph{}, {} nodes", r.file,
                                 r.negative() ? "FAIL" : "PASS", r.graph_type, r.task.empty() ? "" : " (" + r.task + ")",
                                 r.graphs.size(), r.graphs.size() == 1 ? "" : "s", r.nodes());
  if (r.graph_type == "compare") {
    std::string per;
    for (const auto &g : r.graphs) {
      if (g.source != "NPU") continue;
      per += fmt::format("{}step {} rank {}: {}", per.empty() ? "; first failing node: " : "; ", g.step, g.rank,
                         g.first_failing ? g.names[*g.first_failing] : std::string("none"));
    }
    line += per;
  }
  return line;
}

}  // namespace tprobe
