// free_benchmark_csv.cpp: the row of free_benchmark.csv as text and as record meta (see
// free_benchmark.h). Separate from free_benchmark.cpp because it needs pyjson's repr(float), which
// the PyTorch capture does not link.
#include <fmt/format.h>

#include "errors.h"
#include "free_benchmark.h"

#include "csv.h"
#include "pyjson.h"

namespace tprobe {

using json = nlohmann::ordered_json;

namespace {


const char *verdict_name(free_benchmark_row::kind k) {
  switch (k) {
    case free_benchmark_row::kind::ratio: return "ratio";
    case free_benchmark_row::kind::symbol_flipping: return "symbol_flipping";
    case free_benchmark_row::kind::none: return "none";
  }
  return "none";
}

}  // namespace

std::string free_benchmark_csv_header() { return "rank,pert_mode,stage,step,api_name,max_rel,dtype,shape,output_index\r\n"; }

std::string free_benchmark_max_rel_text(const free_benchmark_row &row) {
  switch (row.verdict) {
    case free_benchmark_row::kind::ratio: return py_float_repr(row.ratio - 1.0);  // make_unequal_row: ratio - 1
    case free_benchmark_row::kind::symbol_flipping: return "symbol_flipping";
    case free_benchmark_row::kind::none: return "";
  }
  return "";
}

std::string free_benchmark_shape_text(const std::vector<int64_t> &shape) {
  // str(torch.Size([...])): the list's repr, ", "-separated.
  return fmt::format("torch.Size([{}])", fmt::join(shape, ", "));
}

std::string free_benchmark_csv_line(const free_benchmark_row &row) {
  std::string out;
  const std::string cells[] = {
      std::to_string(row.rank),
      row.pert_mode,
      row.stage,
      std::to_string(row.step),
      row.api_name,
      free_benchmark_max_rel_text(row),
      row.dtype,
      // msprobe sets dtype and shape together, only when the output element is a tensor.
      row.dtype.empty() ? std::string() : free_benchmark_shape_text(row.shape),
      row.output_index ? std::to_string(*row.output_index) : std::string(),
  };
  bool first = true;
  for (const auto &cell : cells) {
    if (!first) out += ',';
    first = false;
    csv_field_append(out, cell);
  }
  out += "\r\n";
  return out;
}

json free_benchmark_row_to_json(const free_benchmark_row &row) {
  json j = json::object();
  j["rank"] = row.rank;
  j["pert_mode"] = row.pert_mode;
  j["stage"] = row.stage;
  j["step"] = row.step;
  j["api_name"] = row.api_name;
  j["verdict"] = verdict_name(row.verdict);
  if (row.verdict == free_benchmark_row::kind::ratio) j["ratio"] = row.ratio;
  j["dtype"] = row.dtype;
  j["shape"] = row.shape;
  j["output_index"] = row.output_index ? json(*row.output_index) : json(nullptr);
  return j;
}

free_benchmark_row free_benchmark_row_from_json(const json &j, const std::string &where) {
  auto bad = [&](const std::string &what) { return usage_error(fmt::format("{}: free_benchmark row: {}", where, what)); };
  if (!j.is_object()) throw bad("not an object");
  auto need = [&](const char *key) -> const json & {
    auto it = j.find(key);
    if (it == j.end()) throw bad(fmt::format("no \"{}\"", key));
    return *it;
  };
  auto integer = [&](const char *key) {
    const json &v = need(key);
    if (!v.is_number_integer()) throw bad(fmt::format("\"{}\" is not an integer", key));
    return v.get<int64_t>();
  };
  auto text = [&](const char *key) {
    const json &v = need(key);
    if (!v.is_string()) throw bad(fmt::format("\"{}\" is not a string", key));
    return v.get<std::string>();
  };
  free_benchmark_row row;
  row.rank = integer("rank");
  row.pert_mode = text("pert_mode");
  row.stage = text("stage");
  row.step = integer("step");
  row.api_name = text("api_name");
  const std::string verdict = text("verdict");
  if (verdict == "ratio") {
    row.verdict = free_benchmark_row::kind::ratio;
    const json &r = need("ratio");
    if (!r.is_number()) throw bad("\"ratio\" is not a number");
    row.ratio = r.get<double>();
  } else if (verdict == "symbol_flipping") {
    row.verdict = free_benchmark_row::kind::symbol_flipping;
  } else if (verdict == "none") {
    row.verdict = free_benchmark_row::kind::none;
  } else {
    throw bad(fmt::format("\"verdict\" is \"{}\", not ratio, symbol_flipping or none", verdict));
  }
  row.dtype = text("dtype");
  const json &shape = need("shape");
  if (!shape.is_array()) throw bad("\"shape\" is not a list");
  for (const auto &d : shape) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0) throw bad("\"shape\" holds a bad dimension");
    row.shape.push_back(d.get<int64_t>());
  }
  const json &index = need("output_index");
  if (!index.is_null()) {
    if (!index.is_number_integer() || index.get<int64_t>() < 0) throw bad("\"output_index\" is not an index");
    row.output_index = index.get<int64_t>();
  }
  return row;
}

}  // namespace tprobe
