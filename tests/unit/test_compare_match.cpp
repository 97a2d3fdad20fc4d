// Tests for core/compare/compare_match.h (tprobe compare --match auto): calls recorded under other
// names, inserted and missing operators, backward slots in another order, and --match name keeping
// msprobe's behaviour. Each tensor of a test dump carries a value that identifies it (its Max), the
// same on both sides: a row is paired right exactly when both sides' Max agree.
#include "compare/compare_table.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "pyjson.h"

namespace tprobe {
namespace {

struct tensor_spec {
  std::string shape;  // "[8, 64]"
  double tag;         // identifies the tensor: its Max (and Min, Mean, Norm)
  std::string dtype = "torch.float32";
};

struct call_spec {
  std::string name;  // entry name
  std::vector<tensor_spec> inputs, outputs;
  std::string kwargs = "{}";  // input_kwargs as JSON
  std::vector<std::string> args;  // non-tensor input_args after the tensors, as JSON leaves
};

std::string leaf(const tensor_spec &t) {
  return fmt::format(R"({{"type": "torch.Tensor", "dtype": "{}", "shape": {}, "Max": {}, "Min": {}, "Mean": {}, "Norm": {}, "requires_grad": false}})",
                     t.dtype, t.shape, t.tag, t.tag, t.tag, t.tag);
}

std::string list(const std::vector<tensor_spec> &ts, const std::vector<std::string> &values = {}) {
  std::string s = "[";
  for (size_t i = 0; i < ts.size(); ++i) s += (i ? ", " : "") + leaf(ts[i]);
  for (size_t i = 0; i < values.size(); ++i) s += (i || !ts.empty() ? ", " : "") + values[i];
  return s + "]";
}

dump_file make_dump(const std::vector<call_spec> &calls, const std::string &side) {
  std::string data;
  for (const auto &c : calls) {
    const bool backward = c.name.find(".backward") != std::string::npos;
    data += (data.empty() ? "" : ",\n") +
            (backward ? fmt::format(R"("{}": {{"input": {}, "output": {}}})", c.name, list(c.inputs), list(c.outputs))
                      : fmt::format(R"("{}": {{"input_args": {}, "input_kwargs": {}, "output": {}}})", c.name,
                                    list(c.inputs, c.args), c.kwargs, list(c.outputs)));
  }
  const std::string text = R"({"task": "statistics", "level": "L1", "framework": "pytorch", "data": {)" + data + "}}";
  return dump_from_json(pyjson_parse(text, side), "/d/" + side + "/dump.json", side);
}

compare_table build(const dump_file &npu, const dump_file &bench, compare_match m = compare_match::automatic) {
  compare_table_options o;
  o.mode = compare_mode::summary;
  o.match = m;
  return compare_table_build(npu, bench, o);
}

// Rows paired with the right bench row (equal tag), rows paired with a wrong one, rows unpaired.
struct tally {
  size_t right = 0, wrong = 0, unpaired = 0;
};
tally count(const compare_table &t) {
  tally n;
  for (const auto &row : t.rows) {
    if (!row.bench) {
      ++n.unpaired;
      continue;
    }
    const bool same = cell_str(t.npu->rows[row.npu].stats[0]) == cell_str(t.bench->rows[*row.bench].stats[0]);
    ++(same ? n.right : n.wrong);
  }
  return n;
}

const compare_row *row_named(const compare_table &t, const std::string &name) {
  for (const auto &row : t.rows)
    if (t.npu->rows[row.npu].name == name) return &row;
  ADD_FAILURE() << "no row " << name;
  return nullptr;
}

// A small Conv1d → ReLU → transpose → Linear → Linear forward, as msprobe names it.
std::vector<call_spec> forward_calls() {
  return {
      {"Functional.conv1d.0.forward", {{"[8, 4, 10]", 1}, {"[8, 4, 3]", 2}, {"[8]", 3}}, {{"[8, 8, 10]", 4}}},
      {"Functional.relu.0.forward", {{"[8, 8, 10]", 4}}, {{"[8, 8, 10]", 5}}},
      {"Tensor.transpose.0.forward", {{"[8, 8, 10]", 5}}, {{"[8, 10, 8]", 6}}},
      {"Functional.linear.0.forward", {{"[8, 10, 8]", 6}, {"[8, 8]", 7}, {"[8]", 8}}, {{"[8, 10, 8]", 9}}},
      {"Functional.linear.1.forward", {{"[8, 10, 8]", 9}, {"[8, 8]", 10}, {"[8]", 11}}, {{"[8, 10, 8]", 12}}},
  };
}

TEST(CompareMatch, InsertedOperatorPairsEveryOtherRow) {
  const auto calls = forward_calls();
  std::vector<call_spec> with_insert = calls;
  // An extra Linear before the others, of the same family and input shape: name matching pairs every
  // later linear with its predecessor (linear.0 ↔ the inserted one, linear.1 ↔ linear.0).
  with_insert.insert(with_insert.begin() + 3,
                     {"Functional.linear.0.forward", {{"[8, 10, 8]", 6}, {"[8, 8]", 100}, {"[8]", 101}}, {{"[8, 10, 8]", 102}}});
  with_insert[4].name = "Functional.linear.1.forward";
  with_insert[5].name = "Functional.linear.2.forward";
  with_insert.insert(with_insert.begin() + 1, {"Torch.zeros.0.forward", {}, {{"[1, 8, 64]", 103}}});
  const dump_file npu = make_dump(calls, "NPU"), bench = make_dump(with_insert, "bench");

  const tally by_name = count(build(npu, bench, compare_match::name));
  EXPECT_GT(by_name.wrong, 0u);  // what this test guards against

  const compare_table t = build(npu, bench);
  const tally n = count(t);
  EXPECT_EQ(n.right, npu.rows.size());
  EXPECT_EQ(n.wrong, 0u);
  EXPECT_EQ(n.unpaired, 0u);
  EXPECT_EQ(row_named(t, "Functional.linear.0.forward.input.1")->how, pair_how::aligned);  // ↔ linear.1
  EXPECT_EQ(row_named(t, "Functional.relu.0.forward.output.0")->how, pair_how::name);
}

TEST(CompareMatch, InsertedOperatorOnTheNpuSideStaysUnpaired) {
  auto calls = forward_calls();
  const dump_file bench = make_dump(calls, "bench");
  calls.insert(calls.begin() + 2, {"Functional.relu.1.forward", {{"[8, 8, 10]", 50}}, {{"[8, 8, 10]", 51}}});
  const dump_file npu = make_dump(calls, "NPU");
  const compare_table t = build(npu, bench);
  const tally n = count(t);
  EXPECT_EQ(n.wrong, 0u);
  EXPECT_EQ(n.unpaired, 2u);
  EXPECT_EQ(row_named(t, "Functional.relu.1.forward.input.0")->how, pair_how::unpaired);
  EXPECT_EQ(n.right, npu.rows.size() - 2);
}

TEST(CompareMatch, MissingOperatorLeavesOnlyItsRowsUnpaired) {
  const auto calls = forward_calls();
  std::vector<call_spec> missing = calls;
  missing.erase(missing.begin() + 3);  // the bench side lacks linear.0; its linear.1 is called linear.0
  missing[3].name = "Functional.linear.0.forward";
  const dump_file npu = make_dump(calls, "NPU"), bench = make_dump(missing, "bench");
  EXPECT_GT(count(build(npu, bench, compare_match::name)).wrong + 0u, 0u);
  const compare_table t = build(npu, bench);
  const tally n = count(t);
  EXPECT_EQ(n.wrong, 0u);
  // linear.0's three inputs (its input.0 has the shape of linear.1's, but linear.1 pairs with its own)
  // and its output.
  EXPECT_EQ(n.unpaired, 4u);
  EXPECT_EQ(row_named(t, "Functional.linear.0.forward.output.0")->bench, std::nullopt);
  EXPECT_EQ(n.right, npu.rows.size() - 4);
}

TEST(CompareMatch, RenamedFamiliesPair) {
  // msprobe's names (NPU) against tprobe's for the same calls (bench).
  const std::vector<call_spec> msprobe = {
      {"Tensor.transpose.0.forward", {{"[8, 8, 10]", 1}}, {{"[8, 10, 8]", 2}}},
      {"Tensor.__add__.0.forward", {{"[8, 10, 8]", 2}, {"[8, 10, 8]", 3}}, {{"[8, 10, 8]", 4}}},
      {"Tensor.__iadd__.0.forward", {{"[8, 10, 8]", 4}, {"[8, 10, 8]", 3}}, {{"[8, 10, 8]", 5}}},
      {"Tensor.__getitem__.0.forward", {{"[8, 10, 8]", 5}}, {{"[8, 8]", 6}}},
      {"Functional.cross_entropy.0.forward",
       {{"[8, 5]", 7}, {"[8]", 8, "torch.int64"}},
       {{"[]", 9}},
       R"({"weight": null, "reduction": {"type": "str", "value": "mean"}, "ignore_index": {"type": "int", "value": -100}, "label_smoothing": {"type": "float", "value": 0.0}})"},
  };
  const std::vector<call_spec> tprobe = {
      {"Torch.transpose.0.forward", {{"[8, 8, 10]", 1}}, {{"[8, 10, 8]", 2}}},
      {"Torch.add.0.forward", {{"[8, 10, 8]", 2}, {"[8, 10, 8]", 3}}, {{"[8, 10, 8]", 4}}},
      {"Tensor.add_.0.forward", {{"[8, 10, 8]", 4}, {"[8, 10, 8]", 3}}, {{"[8, 10, 8]", 5}}},
      {"Torch.select.0.forward", {{"[8, 10, 8]", 5}}, {{"[8, 8]", 6}}},
      {"Functional.cross_entropy_loss.0.forward", {{"[8, 5]", 7}, {"[8]", 8, "torch.int64"}}, {{"[]", 9}}},
  };
  const dump_file npu = make_dump(msprobe, "NPU"), bench = make_dump(tprobe, "bench");
  EXPECT_EQ(count(build(npu, bench, compare_match::name)).right, 0u);
  const compare_table t = build(npu, bench);
  const tally n = count(t);
  EXPECT_EQ(n.wrong, 0u);
  // Every tensor pairs; cross_entropy's four kwargs have no partner (this tprobe dump has no
  // non-tensor arguments).
  EXPECT_EQ(n.right, 13u);
  EXPECT_EQ(n.unpaired, 4u);
  EXPECT_EQ(row_named(t, "Functional.cross_entropy.0.forward.input.1")->how, pair_how::aligned);
  EXPECT_EQ(t.bench->rows[*row_named(t, "Functional.cross_entropy.0.forward.input.1")->bench].name,
            "Functional.cross_entropy_loss.0.forward.input.1");
}

// The same calls of one GRU training step (bench/train_gru.py: the linear head, flatten, the loss),
// as msprobe 8.3.3 wrote them (NPU: Python calls, the loss's keywords by name) and as tprobe writes
// them (bench: ATen operators, every schema argument by position). Values from the two dumps of that
// run, tensors identified by their Max.
std::vector<call_spec> loss_head_msprobe() {
  return {
      {"Functional.linear.0.forward", {{"[16, 8, 16]", 1}, {"[8, 16]", 2}, {"[8]", 3}}, {{"[16, 8, 8]", 4}}},
      {"Tensor.flatten.0.forward", {{"[16, 8, 8]", 4}}, {{"[128, 8]", 4}}, "{}",
       {R"({"type": "int", "value": 0})", R"({"type": "int", "value": 1})"}},
      {"Functional.cross_entropy.0.forward",
       {{"[128, 8]", 4}, {"[128]", 7, "torch.int64"}},
       {{"[]", 2.13}},
       R"({"weight": null, "ignore_index": {"type": "int", "value": -100}, "reduction": {"type": "str", "value": "mean"}, "label_smoothing": {"type": "float", "value": 0.0}})"},
      {"Torch.ones_like.0.forward", {{"[]", 2.13}}, {{"[]", 1}}, R"({"memory_format": {"type": "torch.memory_format", "format": "preserve_format"}})"},
  };
}
std::vector<call_spec> loss_head_tprobe() {
  return {
      {"Functional.linear.0.forward", {{"[16, 8, 16]", 1}, {"[8, 16]", 2}, {"[8]", 3}}, {{"[16, 8, 8]", 4}}},
      {"Torch.flatten.0.forward", {{"[16, 8, 8]", 4}}, {{"[128, 8]", 4}}, "{}",
       {R"({"type": "int", "value": 0})", R"({"type": "int", "value": 1})"}},
      {"Functional.cross_entropy_loss.0.forward",
       {{"[128, 8]", 4}, {"[128]", 7, "torch.int64"}},
       {{"[]", 2.13}},
       "{}",
       {"null", R"({"type": "str", "value": "mean"})", R"({"type": "int", "value": -100})", R"({"type": "float", "value": 0.0})"}},
      {"Torch.ones_like.0.forward", {{"[]", 2.13}}, {{"[]", 1}},
       R"({"dtype": {"type": "torch.dtype", "value": "torch.float32"}, "layout": {"type": "torch.layout", "value": "torch.strided"}, "device": {"type": "torch.device", "value": "cpu"}, "pin_memory": {"type": "bool", "value": false}, "memory_format": {"type": "torch.memory_format", "format": "preserve_format"}})"},
  };
}

// Where each row of `npu` went: its bench row's name, "" when unpaired.
std::map<std::string, std::string> pairing(const compare_table &t) {
  std::map<std::string, std::string> m;
  for (const auto &row : t.rows) m[t.npu->rows[row.npu].name] = row.bench ? t.bench->rows[*row.bench].name : "";
  return m;
}

TEST(CompareMatch, KeywordArgumentsPairWithPositionalOnesByTheSchemasNames) {
  const dump_file ms = make_dump(loss_head_msprobe(), "NPU"), tp = make_dump(loss_head_tprobe(), "bench");
  const std::string ce = "Functional.cross_entropy.0.forward.input.", loss = "Functional.cross_entropy_loss.0.forward.input.";
  auto m = pairing(build(ms, tp));
  // msprobe writes Python values as "<class 'int'>" rows of shape []: values, not 0-d int tensors
  // (as such, ignore_index went to the first int, reduction's 1).
  EXPECT_EQ(m[ce + "ignore_index"], loss + "4");
  EXPECT_EQ(m[ce + "reduction"], loss + "3");
  EXPECT_EQ(m[ce + "weight"], loss + "2");
  EXPECT_EQ(m[ce + "label_smoothing"], loss + "5");
  EXPECT_EQ(m["Torch.ones_like.0.forward.input.memory_format"], "Torch.ones_like.0.forward.input.memory_format");
  EXPECT_EQ(m["Tensor.flatten.0.forward.input.1"], "Torch.flatten.0.forward.input.1");
  EXPECT_EQ(m["Tensor.flatten.0.forward.input.2"], "Torch.flatten.0.forward.input.2");
  size_t paired = 0;
  for (const auto &[npu, bench] : m) paired += !bench.empty();
  EXPECT_EQ(paired, m.size());  // 21 of 21 (100 %; the issue's floor is 95 %)

  // The other way round: tprobe's positional arguments find msprobe's keywords.
  m = pairing(build(tp, ms));
  EXPECT_EQ(m[loss + "3"], ce + "reduction");
  EXPECT_EQ(m[loss + "4"], ce + "ignore_index");
  // ones_like's keyword-only defaults the autograd engine did not pass: msprobe never saw them.
  EXPECT_EQ(m["Torch.ones_like.0.forward.input.dtype"], "");

  // By name whatever the values: a run with another ignore_index pairs it and shows the difference,
  // also beside reduction as ATen's int (as tprobe wrote it before it wrote msprobe's str: then two
  // ints, and ignore_index went to the first). reduction pairs by name too, and msprobe's dtype gate
  // (a str against an int) then leaves it unpaired.
  auto other = loss_head_tprobe();
  other[2].args[1] = R"({"type": "int", "value": 1})";
  other[2].args[2] = R"({"type": "int", "value": 0})";
  const dump_file tp_before = make_dump(other, "bench");
  const compare_table t = build(ms, tp_before);
  m = pairing(t);
  EXPECT_EQ(m[ce + "ignore_index"], loss + "4");
  EXPECT_EQ(m[ce + "reduction"], "");
  EXPECT_EQ(cell_str(t.bench->rows[*row_named(t, ce + "ignore_index")->bench].stats[0]), "0");
}

TEST(CompareMatch, PositionalNamesFromTheSchemas) {
  EXPECT_EQ(compare_positional_name("cross_entropy_loss", 0), "self");
  EXPECT_EQ(compare_positional_name("cross_entropy_loss", 3), "reduction");
  EXPECT_EQ(compare_positional_name("cross_entropy_loss", 4), "ignore_index");
  EXPECT_EQ(compare_positional_name("cross_entropy_loss", 6), "");
  EXPECT_EQ(compare_positional_name("conv2d", 4), "padding");
  EXPECT_EQ(compare_positional_name("flatten", 2), "end_dim");  // named-tensor overloads left out
  EXPECT_EQ(compare_positional_name("max", 1), "");  // max(self, other) and max(self, dim, keepdim)
  EXPECT_EQ(compare_positional_name("cross_entropy", 3), "");  // not an ATen operator
}

TEST(CompareMatch, BackwardSlotsInAnotherOrderPairByShape) {
  const std::vector<call_spec> msprobe = {
      {"Functional.linear.0.forward", {{"[8, 64]", 1}, {"[5, 64]", 2}, {"[5]", 3}}, {{"[8, 5]", 4}}},
      {"Functional.linear.0.backward", {{"[8, 5]", 10}}, {{"[5]", 13}, {"[8, 64]", 11}, {"[64, 5]", 14}}},
  };
  const std::vector<call_spec> tprobe = {
      {"Functional.linear.0.forward", {{"[8, 64]", 1}, {"[5, 64]", 2}, {"[5]", 3}}, {{"[8, 5]", 4}}},
      {"Functional.linear.0.backward", {{"[8, 5]", 10}}, {{"[8, 64]", 11}, {"[5, 64]", 12}, {"[5]", 13}}},
  };
  const dump_file npu = make_dump(msprobe, "NPU"), bench = make_dump(tprobe, "bench");
  const compare_table t = build(npu, bench);
  const tally n = count(t);
  EXPECT_EQ(n.wrong, 0u);
  EXPECT_EQ(n.unpaired, 1u);  // [64, 5]: no bench tensor of that shape
  EXPECT_EQ(t.bench->rows[*row_named(t, "Functional.linear.0.backward.output.0")->bench].name,
            "Functional.linear.0.backward.output.2");
  EXPECT_EQ(row_named(t, "Functional.linear.0.backward.output.2")->bench, std::nullopt);
}

TEST(CompareMatch, BackwardEntriesFollowTheirForwardsInAnyOrder) {
  // The forwards differ by shape; every backward has the same shapes, and the two sides emit them in
  // crossing orders: only the link to the paired forward tells them apart.
  const std::vector<call_spec> npu_calls = {
      {"Functional.relu.0.forward", {{"[4]", 1}}, {{"[4]", 2}}},
      {"Functional.relu.1.forward", {{"[6]", 3}}, {{"[6]", 4}}},
      {"Functional.relu.1.backward", {{"[2]", 5}}, {{"[2]", 6}}},
      {"Functional.relu.0.backward", {{"[2]", 7}}, {{"[2]", 8}}},
  };
  const std::vector<call_spec> bench_calls = {
      {"Functional.relu.0.forward", {{"[5]", 90}}, {{"[5]", 91}}},
      {"Functional.relu.1.forward", {{"[4]", 1}}, {{"[4]", 2}}},
      {"Functional.relu.2.forward", {{"[6]", 3}}, {{"[6]", 4}}},
      {"Functional.relu.1.backward", {{"[2]", 7}}, {{"[2]", 8}}},
      {"Functional.relu.2.backward", {{"[2]", 5}}, {{"[2]", 6}}},
      {"Functional.relu.0.backward", {{"[2]", 92}}, {{"[2]", 93}}},
  };
  const dump_file npu = make_dump(npu_calls, "NPU"), bench = make_dump(bench_calls, "bench");
  EXPECT_GT(count(build(npu, bench, compare_match::name)).wrong, 0u);
  const tally n = count(build(npu, bench));
  EXPECT_EQ(n.right, npu.rows.size());
  EXPECT_EQ(n.wrong + n.unpaired, 0u);
}

TEST(CompareMatch, NameModeKeepsMsprobeColumnsAndPairs) {
  const auto calls = forward_calls();
  std::vector<call_spec> renamed = calls;
  renamed[2].name = "Torch.transpose.0.forward";
  const dump_file npu = make_dump(calls, "NPU"), bench = make_dump(renamed, "bench");
  const compare_table by_name = build(npu, bench, compare_match::name);
  const compare_table automatic = build(npu, bench);
  const auto name_columns = compare_table_columns(by_name), auto_columns = compare_table_columns(automatic);
  EXPECT_EQ(name_columns.back(), "Err_message");  // msprobe's summary columns, nothing added
  ASSERT_EQ(auto_columns.size(), name_columns.size() + 1);
  EXPECT_EQ(auto_columns.back(), "Match");
  EXPECT_TRUE(std::equal(name_columns.begin(), name_columns.end(), auto_columns.begin()));
  EXPECT_EQ(cell_str(compare_table_row_cells(automatic, 0).back()), "name");
  // Name matching: exactly the rows of equal name and shape.
  for (const auto &row : by_name.rows) {
    const std::string &n = by_name.npu->rows[row.npu].name;
    EXPECT_EQ(row.bench.has_value(), n.rfind("Tensor.transpose", 0) != 0) << n;
  }
  const auto counts = compare_table_match_counts(automatic);
  EXPECT_EQ(counts.aligned, 2u);  // the transpose's input and output
  EXPECT_EQ(counts.unpaired, 0u);
  EXPECT_EQ(counts.name, npu.rows.size() - 2);
  // --fuzzy-match implies msprobe's matching.
  compare_table_options o;
  o.mode = compare_mode::summary;
  o.fuzzy_match = true;
  EXPECT_EQ(compare_table_build(npu, bench, o).options.match, compare_match::name);
}

TEST(CompareMatch, AliasTable) {
  EXPECT_EQ(compare_api_family("__add__"), "add");
  EXPECT_EQ(compare_api_family("__radd__"), "add");
  EXPECT_EQ(compare_api_family("__iadd__"), "add_");
  EXPECT_EQ(compare_api_family("__truediv__"), "div");
  EXPECT_EQ(compare_api_family("__itruediv__"), "div_");
  EXPECT_EQ(compare_api_family("__rsub__"), "rsub");
  EXPECT_EQ(compare_api_family("__getitem__"), "getitem");
  EXPECT_EQ(compare_api_family("slice"), "getitem");
  EXPECT_EQ(compare_api_family("cross_entropy_loss"), "cross_entropy");
  EXPECT_EQ(compare_api_family("cross_entropy"), "cross_entropy");
  EXPECT_EQ(compare_api_family("_to_copy"), "to");
  EXPECT_EQ(compare_api_family("transpose"), "transpose");
  EXPECT_EQ(compare_api_family("add"), "add");
}

TEST(CompareMatch, ModulesAndParameterGradientsPairByPath) {
  const std::vector<call_spec> npu_calls = {
      {"Functional.linear.0.forward", {{"[2, 4]", 1}}, {{"[2, 3]", 2}}},
      {"Module.fc.Linear.forward.0", {{"[2, 4]", 1}}, {{"[2, 3]", 2}}},
      {"Module.fc.Linear.backward.0", {{"[2, 3]", 3}}, {{"[2, 4]", 4}}},
  };
  const std::vector<call_spec> bench_calls = {
      {"Torch.zeros.0.forward", {}, {{"[2, 3]", 9}}},
      {"Functional.linear.0.forward", {{"[2, 4]", 1}}, {{"[2, 3]", 2}}},
      {"Module.fc.Linear.forward.0", {{"[2, 4]", 1}}, {{"[2, 3]", 2}}},
      {"Module.fc.Linear.backward.0", {{"[2, 3]", 3}}, {{"[2, 4]", 4}}},
  };
  const compare_table t = build(make_dump(npu_calls, "NPU"), make_dump(bench_calls, "bench"));
  const tally n = count(t);
  EXPECT_EQ(n.right, 6u);
  EXPECT_EQ(n.wrong + n.unpaired, 0u);
}

TEST(CompareMatch, LongDumpsWithScatteredInsertionsStayLinear) {
  // 20,000 calls on the NPU side; the bench side has an extra call every 50 and misses every 97th.
  std::vector<call_spec> npu_calls, bench_calls;
  const char *apis[] = {"Functional.linear", "Torch.add", "Functional.relu", "Torch.matmul"};
  std::vector<int> counters_n(4), counters_b(4);
  int zeros = 0;
  for (int i = 0; i < 20000; ++i) {
    const int k = i % 4;
    const std::string shape = fmt::format("[{}, 8]", 1 + i % 7);
    const call_spec c{fmt::format("{}.{}.forward", apis[k], counters_n[k]++), {{shape, 2.0 * i}}, {{shape, 2.0 * i + 1}}};
    npu_calls.push_back(c);
    if (i % 50 == 0) bench_calls.push_back({fmt::format("Torch.zeros.{}.forward", zeros++), {}, {{"[3]", -1.0 - i}}});
    if (i % 97 == 0) continue;
    call_spec b = c;
    b.name = fmt::format("{}.{}.forward", apis[k], counters_b[k]++);
    bench_calls.push_back(b);
  }
  const dump_file npu = make_dump(npu_calls, "NPU"), bench = make_dump(bench_calls, "bench");
  const auto start = std::chrono::steady_clock::now();
  const compare_table t = build(npu, bench);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const tally n = count(t);
  EXPECT_EQ(n.wrong, 0u);
  EXPECT_EQ(n.unpaired, 2u * ((20000 + 96) / 97));
  EXPECT_LT(seconds, 20.0);  // O(n·w): a quadratic alignment of 20,000 × 20,400 would take far longer
}

}  // namespace
}  // namespace tprobe
