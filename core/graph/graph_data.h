// graph_data.h: a dump.json entry as a graph node's input_data and output_data (msprobe 8.3.3's
// read_op + format_node_data, docs/stages/graph.md "Node data").
//
//   graph_node_data(name, entry, keep_md5, in, out) flattens the entry's input_args, input_kwargs,
//   input, output and parameters (lists ".i", dicts ".key"; a leaf is an object with a string
//   "type"), or a parameters_grad entry's {param: [leaf]} as "{name}.{param}", into items keyed by
//   leaf name (a tensor file's data_name, extension removed, where the leaf has one). A key with
//   ".output." and no ".input." goes to `out`, every other to `in`. Each item is the leaf's fields
//   (state and full_op_name dropped, md5 only with keep_md5), then data_name ("-1"), requires_grad
//   and Max/Min/Mean/Norm (a non-tensor's value) and dtype/shape ("<class int>", "[]") where the
//   leaf has none (with keep_md5, a non-tensor's md5: the CRC-32 of str(value), as compare reads
//   it), every value formatted by graph_format_value; an item whose Max is "null" is {"value": "null"}.
//   graph_format_value(v): msprobe's text of one value: null "null", bools "True"/"False", ints as
//   Python prints them, a float whose repr is scientific as "%.6e", else rounded to 6 decimals;
//   strings without "'" ("None" and " " read "null", a decimal with more than 6 fraction digits
//   rounded to 6, a trailing % kept); lists and objects as Python's str() without "'".
//   graph_dump_has_md5(data): some leaf of the dump has an "md5" field.
// Thread-safe: pure functions.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tprobe {

void graph_node_data(const std::string &name, const nlohmann::ordered_json &entry, bool keep_md5,
                     nlohmann::ordered_json &input_data, nlohmann::ordered_json &output_data);

[[nodiscard]] std::string graph_format_value(const nlohmann::ordered_json &v);

[[nodiscard]] bool graph_dump_has_md5(const nlohmann::ordered_json &data);

}  // namespace tprobe
