// Tests for core/compare/compare_dump.h and compare_table.h: flattening dump.json (msprobe's own
// examples, verbatim), mode detection, matching (exact, dtype gate, fuzzy, mapping), the statistics
// and md5 tables, highlighting, the advisor and stack.json (docs/msprobe-compat.md §2.11, §4.2–§4.11).
#include "compare/compare_table.h"

#include <gtest/gtest.h>

#include <limits>
#include <string>
#include <tuple>

#include <fmt/format.h>

#include "compare/compare_output.h"
#include "errors.h"
#include "pyjson.h"

namespace tprobe {
namespace {

dump_file parse(const std::string &text, const std::string &side = "NPU") {
  return dump_from_json(pyjson_parse(text, "test"), "/d/" + side + "/dump.json", side);
}

std::vector<std::string> names(const dump_file &f) {
  std::vector<std::string> v;
  for (const auto &r : f.rows) v.push_back(r.name);
  return v;
}

// docs/msprobe-compat.md §2.11, "L1, task tensor", verbatim.
const char *const l1_tensor = R"({
 "task": "tensor", "level": "L1", "framework": "pytorch", "dump_data_dir":"/dump/path",
 "data": {
  "Functional.relu.0.forward": {
   "input_args": [{"type": "torch.Tensor","dtype": "torch.float32","shape": [32,16,28,28],
     "Max": 1.3864083290100098,"Min": -1.3364859819412231,"Mean": 0.03711778670549393,"Norm": 236.20692443847656,
     "requires_grad": true,"data_name": "Functional.relu.0.forward.input.0.pt"}],
   "input_kwargs": {},
   "output": [{"type": "torch.Tensor","dtype": "torch.float32","shape": [32,16,28,28],
     "Max": 1.3864083290100098,"Min": 0.0,"Mean": 0.16849493980407715,"Norm": 175.23345947265625,
     "requires_grad": true,"data_name": "Functional.relu.0.forward.output.0.pt"}]
  },
  "Functional.relu.0.backward": {
   "input": [{"type": "torch.Tensor","dtype": "torch.float32","shape": [32,16,28,28],
     "Max": 0.0001815402356442064,"Min": -0.00013352684618439525,"Mean": 0.00011915402356442064,"Norm": 0.007598237134516239,
     "requires_grad": false,"data_name": "Functional.relu.0.backward.input.0.pt"}],
   "output": [{"type": "torch.Tensor","dtype": "torch.float32","shape": [32,16,28,28],
     "Max": 0.0001815402356442064,"Min": -0.00012117840378778055,"Mean": 2.0098118724831693e-08,"Norm": 0.006532244384288788,
     "requires_grad": false,"data_name": "Functional.relu.0.backward.output.0.pt"}]
  }
 }
})";

// §2.11 "mix, task statistics", verbatim except the "..." the reference uses for elision.
const char *const mix_statistics = R"({ "task": "statistics", "level": "mix", "framework": "pytorch", "dump_data_dir": null,
  "data": {
    "Tensor.__add__.0.forward": {
      "input_args": [ {"type":"torch.Tensor","dtype":"torch.int64","shape":[],"Max":423,"Min":423,"Mean":423,"Norm":423,"requires_grad":false},
                      {"type":"int","value":1} ],
      "input_kwargs": {},
      "output": [ {"type":"torch.Tensor","dtype":"torch.int64","shape":[],"Max":424,"Min":424,"Mean":424,"Norm":424,"requires_grad":false} ] },
    "Tensor.__or__.0.forward": {
      "input_args": [ {"type":"torch.Tensor","dtype":"torch.bool","shape":[1,4096],"Max":false,"Min":false,"Mean":null,"Norm":null,"requires_grad":false} ] } } })";

TEST(CompareDump, MsprobeTensorExample) {
  const dump_file f = parse(l1_tensor);
  EXPECT_EQ(f.task, "tensor");
  EXPECT_EQ(names(f), (std::vector<std::string>{"Functional.relu.0.forward.input.0", "Functional.relu.0.forward.output.0",
                                                 "Functional.relu.0.backward.input.0",
                                                 "Functional.relu.0.backward.output.0"}));
  const dump_row &r = f.rows[0];
  EXPECT_EQ(r.dtype, "torch.float32");
  EXPECT_EQ(r.shape, "[32, 16, 28, 28]");
  EXPECT_EQ(r.stats[0], cell::of_real(1.3864083290100098));
  EXPECT_EQ(r.stats[3], cell::of_real(236.20692443847656));
  EXPECT_EQ(r.requires_grad, cell::of_text("True"));
  EXPECT_EQ(r.data_name, "Functional.relu.0.forward.input.0.pt");
  EXPECT_EQ(r.state, "input");
  EXPECT_TRUE(r.first_of_entry);
  EXPECT_FALSE(f.rows[1].first_of_entry);
  EXPECT_EQ(f.tensor_dir, "/d/NPU/dump_tensor_data");
}

TEST(CompareDump, MsprobeStatisticsExample) {
  const dump_file f = parse(mix_statistics);
  ASSERT_EQ(f.rows.size(), 4u);
  EXPECT_EQ(names(f), (std::vector<std::string>{"Tensor.__add__.0.forward.input.0", "Tensor.__add__.0.forward.input.1",
                                                 "Tensor.__add__.0.forward.output.0", "Tensor.__or__.0.forward.input.0"}));
  EXPECT_EQ(f.rows[0].shape, "[]");
  EXPECT_EQ(f.rows[0].stats[0], cell::of_int(423));
  EXPECT_EQ(f.rows[1].dtype, "<class 'int'>");
  EXPECT_EQ(f.rows[1].shape, "[]");
  EXPECT_EQ(f.rows[1].stats[2], cell::of_int(1));
  EXPECT_EQ(f.rows[1].requires_grad, cell::none());
  EXPECT_EQ(f.rows[3].stats[0], cell::of_text("False"));
  EXPECT_EQ(f.rows[3].stats[2], cell::of_text("None"));
  EXPECT_EQ(f.rows[1].md5, "83dcefb7");  // zlib.crc32(str(1))
  EXPECT_FALSE(f.has_md5);
}

TEST(CompareDump, NonTensorLeavesAndOrdering) {
  const dump_file f = parse(R"({"task": "statistics", "data": {
    "Module.fc.Linear.forward.0": {
      "output": [{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": NaN, "Min": -Infinity,
                  "Mean": Infinity, "Norm": 1.0, "requires_grad": true}],
      "input_args": [{"type": "torch.Size", "value": [2, 3]}, {"type": "slice", "value": [0, null, 1]},
                     {"type": "ellipsis", "value": "..."}, null, {"type": "int", "value": 0},
                     {"type": "torch.ProcessGroup", "group_ranks": [0, 1], "group_id": "x"}],
      "input_kwargs": {"src": {"type": "int", "value": 3}, "t": {"class_type": "torch.distributed.P2POp",
                        "tensor": {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [1]}, "op": "isend"}},
      "parameters": {"weight": {"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2, 2]}},
      "is_recompute": false},
    "Module.fc.Linear.parameters_grad.0": {"weight": [{"type": "torch.Tensor", "dtype": "torch.float32",
                                           "shape": [2, 2], "data_name": "Module.fc.Linear.parameters_grad.0.weight.npy"}]}
  }})");
  EXPECT_EQ(names(f), (std::vector<std::string>{
                          "Module.fc.Linear.forward.0.input.0", "Module.fc.Linear.forward.0.input.1",
                          "Module.fc.Linear.forward.0.input.2", "Module.fc.Linear.forward.0.input.3",
                          "Module.fc.Linear.forward.0.input.4", "Module.fc.Linear.forward.0.input.5",
                          "Module.fc.Linear.forward.0.input.src", "Module.fc.Linear.forward.0.input.t",
                          "Module.fc.Linear.forward.0.parameters.weight", "Module.fc.Linear.forward.0.output.0",
                          "Module.fc.Linear.parameters_grad.0.weight"}));
  const auto &r = f.rows;
  EXPECT_EQ(r[0].dtype, "torch.Size");
  EXPECT_EQ(r[0].shape, "[2, 3]");
  EXPECT_EQ(r[1].dtype, "slice");
  EXPECT_EQ(r[1].shape, "(3,)");
  EXPECT_EQ(r[2].dtype, "ellipsis");
  EXPECT_EQ(r[2].stats[0], cell::of_text("..."));
  EXPECT_EQ(r[3].dtype, "None");  // null
  EXPECT_EQ(r[3].md5, "N/A");
  EXPECT_EQ(r[4].md5, "f4dbdf21");  // crc32(str(0)), test_acc_compare_utils.py
  EXPECT_EQ(r[5].dtype, "torch.ProcessGroup");
  EXPECT_EQ(r[5].stats[0], cell::of_text("[0, 1]"));
  EXPECT_EQ(r[5].md5, "[0, 1]");
  EXPECT_EQ(r[6].dtype, "int");
  EXPECT_EQ(r[6].stats[0], cell::of_text("3"));
  EXPECT_EQ(r[7].dtype, "torch.float32");  // the P2POp's tensor
  EXPECT_EQ(r[7].md5, "00000000");          // crc32 of empty text
  EXPECT_EQ(r[8].state, "parameters");
  EXPECT_EQ(r[9].stats[0], cell::of_text("Nan"));
  EXPECT_EQ(r[9].stats[1], cell::of_real(-std::numeric_limits<double>::infinity()));
  EXPECT_EQ(r[10].state, "parameters_grad");
  EXPECT_TRUE(r[10].first_of_entry);
}

TEST(CompareDump, BadDumpsNameTheFile) {
  const auto message = [](const std::string &text) {
    try {
      (void)parse(text);
    } catch (const usage_error &e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(message(R"({"data": {}})"), "NPU dump /d/NPU/dump.json: 'task' is missing or empty");
  EXPECT_EQ(message(R"({"task": "tensor"})"), "NPU dump /d/NPU/dump.json: 'data' is missing");
  EXPECT_EQ(message(R"({"task": "tensor", "data": []})"), "NPU dump /d/NPU/dump.json: 'data' is not an object");
  EXPECT_EQ(message(R"({"task": "tensor", "data": {"a": {"output": [{"type": "t", "shape": 3}]}}})"),
            "NPU dump /d/NPU/dump.json: entry \"a\": shape is not a list");
  EXPECT_THROW(dump_load("/nonexistent/dump.json", "NPU"), system_error);
}

TEST(CompareDump, ModeDetection) {
  const dump_file t = parse(l1_tensor), s = parse(mix_statistics);
  const dump_file m = parse(R"({"task": "statistics", "data": {"a.0.forward": {"output": [{"type": "t", "md5": "00000000"}]}}})");
  EXPECT_EQ(dump_mode(t, t), compare_mode::all);
  EXPECT_EQ(dump_mode(s, s), compare_mode::summary);
  EXPECT_EQ(dump_mode(m, m), compare_mode::md5);
  EXPECT_THROW((void)dump_mode(t, s), usage_error);
  EXPECT_THROW((void)dump_mode(s, m), usage_error);
  const dump_file st = parse(R"({"task": "structure", "data": {}})");
  EXPECT_THROW((void)dump_mode(st, st), usage_error);
}

// msprobe refuses a whole dump for one string that starts like a formula; masked_fill's -inf
// argument made every masked attention's dump uncomparable that way (issue 60). tprobe reads it and
// escapes the spreadsheet cell instead.
TEST(CompareDump, FormulaLikeStringsAreReadAndEscapedInTheSpreadsheet) {
  const dump_file f = parse(R"({"task": "statistics", "data": {"=cmd": {"input_args": [{"type": "str", "value": "-x"},
      {"type": "str", "value": "@sum"}]}, "Torch.masked_fill.0.forward": {"input_args": [{"type": "float", "value": "-inf"}]}}})");
  ASSERT_EQ(f.rows.size(), 3u);
  EXPECT_EQ(f.rows[0].name, "=cmd.input.0");
  EXPECT_EQ(f.rows[0].stats[0], cell::of_text("-x"));
  EXPECT_EQ(spreadsheet_text("-x"), "'-x");
  EXPECT_EQ(spreadsheet_text("=cmd.input.0"), "'=cmd.input.0");
  EXPECT_EQ(spreadsheet_text("a;@b"), "'a;@b");
  EXPECT_EQ(spreadsheet_text("Functional.relu.0.forward"), "Functional.relu.0.forward");
  EXPECT_EQ(compare_csv_field(cell::of_text("=1+1")), "'=1+1");
  EXPECT_EQ(compare_csv_field(cell::of_real(-1.5)), "-1.5");  // numbers are never escaped
}

// Non-finite reals: Python's NaN / Infinity tokens (what tprobe and msprobe write now) and the
// strings "nan", "inf", "-inf" (what tprobe wrote before) read as the same float rows.
TEST(CompareDump, NonFiniteScalarsReadInBothForms) {
  const auto rows_of = [](const char *a, const char *b, const char *c) {
    return parse(fmt::format(R"({{"task": "statistics", "data": {{"X.0.forward": {{"input_args": [
        {{"type": "float", "value": {}}}, {{"type": "float32", "value": {}}},
        {{"type": "numpy.ndarray", "dtype": "float64", "shape": [2], "Max": {}, "Min": 1.0, "Mean": 1.0, "Norm": 1.0}},
        {{"type": "str", "value": "inf"}}]}}}}}})",
                             a, b, c)).rows;
  };
  const auto tokens = rows_of("-Infinity", "NaN", "Infinity"), strings = rows_of(R"("-inf")", R"("nan")", R"("inf")");
  ASSERT_EQ(tokens.size(), 4u);
  ASSERT_EQ(strings.size(), 4u);
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(tokens[i].dtype, strings[i].dtype) << i;
    EXPECT_EQ(tokens[i].md5, strings[i].md5) << i;
    for (size_t k = 0; k < 4; ++k) EXPECT_EQ(cell_str(tokens[i].stats[k]), cell_str(strings[i].stats[k])) << i << k;
  }
  EXPECT_EQ(tokens[0].dtype, "<class 'float'>");
  EXPECT_EQ(tokens[0].stats[0], cell::of_real(-std::numeric_limits<double>::infinity()));
  EXPECT_EQ(tokens[2].stats[0], cell::of_real(std::numeric_limits<double>::infinity()));
  EXPECT_EQ(strings[3].dtype, "<class 'str'>");  // a str leaf stays text
  EXPECT_EQ(strings[3].stats[0], cell::of_text("inf"));
}

TEST(CompareDump, FormulaBlacklist) {
  EXPECT_TRUE(formula_like("=1+1"));
  EXPECT_TRUE(formula_like("-x"));
  EXPECT_TRUE(formula_like("a;@b"));
  EXPECT_TRUE(formula_like("\xEF\xBC\x8B" "1"));  // fullwidth plus
  EXPECT_FALSE(formula_like("Functional.relu.0.forward"));
  EXPECT_FALSE(formula_like("a;b"));
}

TEST(CompareDump, BothStackForms) {
  const auto current = stack_from_json(
      pyjson_parse(R"J({"0": [["A.0.forward", "B.0.forward"], ["File a.py, line 1, in f, \n x()"]], "1": [["C.0.forward"], ["l"]]})J",
                   "s"),
      "s");
  EXPECT_EQ(current.at("B.0.forward"), std::vector<std::string>{"File a.py, line 1, in f, \n x()"});
  EXPECT_EQ(current.at("C.0.forward"), std::vector<std::string>{"l"});
  const auto legacy = stack_from_json(pyjson_parse(R"({"Tensor.__add__.0.forward": ["File x, line 61, in t, \n return 1"]})", "s"), "s");
  EXPECT_EQ(legacy.at("Tensor.__add__.0.forward").size(), 1u);
}

std::string stats_leaf(double max, const char *dtype = "torch.float32", const char *shape = "[2]", bool rg = true) {
  return fmt::format(R"({{"type": "torch.Tensor", "dtype": "{}", "shape": {}, "Max": {}, "Min": 0.0, "Mean": 1.0, "Norm": 1.0, "requires_grad": {}}})",
                     dtype, shape, max, rg ? "true" : "false");
}

TEST(CompareTable, StatisticsTable) {
  const dump_file npu = parse(fmt::format(R"({{"task": "statistics", "data": {{
      "A.0.forward": {{"input_args": [{}], "output": [{}]}},
      "B.0.forward": {{"input_args": [{}], "output": [{}]}},
      "C.0.forward": {{"output": [{}]}}}}}})",
                                          stats_leaf(2), stats_leaf(3), stats_leaf(1, "torch.int32"),
                                          stats_leaf(1, "torch.float16"), stats_leaf(5, "torch.float32", "[3]")));
  const dump_file bench = parse(fmt::format(R"({{"task": "statistics", "data": {{
      "A.0.forward": {{"input_args": [{}], "output": [{}]}},
      "B.0.forward": {{"input_args": [{}], "output": [{}]}},
      "C.0.forward": {{"output": [{}]}},
      "D.0.forward": {{"output": [{}]}}}}}})",
                                            stats_leaf(2), stats_leaf(1, "torch.float32", "[2]", false),
                                            stats_leaf(1, "torch.int64"), stats_leaf(1, "torch.bfloat16"),
                                            stats_leaf(5, "torch.float32", "[4]"), stats_leaf(9)),
                                "bench");
  compare_table_options o;
  o.match = compare_match::name;  // msprobe's matching
  o.mode = dump_mode(npu, bench);
  ASSERT_EQ(o.mode, compare_mode::summary);
  const compare_table t = compare_table_build(npu, bench, o);
  ASSERT_EQ(t.rows.size(), 5u);  // every NPU row, bench-only D dropped
  EXPECT_EQ(compare_table_columns(t).size(), 27u);
  // A input: equal
  EXPECT_EQ(t.rows[0].result, "");
  EXPECT_EQ(t.rows[0].err_message, "");
  // A output: 3 vs 1 → Warning, requires_grad differs
  EXPECT_EQ(t.rows[1].result, "Warning");
  EXPECT_EQ(t.rows[1].metrics[4], cell::of_text("200.0%"));
  EXPECT_EQ(t.rows[1].err_message, "Need double check api accuracy. Requires_grad inconsistent. ");
  EXPECT_FALSE(t.rows[1].req_grad_consistent);
  // B input: int32 vs int64 fails the dtype gate → unmatched
  EXPECT_FALSE(t.rows[2].bench);
  EXPECT_EQ(t.rows[2].result, "N/A");
  EXPECT_EQ(t.rows[2].err_message, "No bench data matched.Requires_grad inconsistent. ");
  const auto cells = compare_table_row_cells(t, 2);
  EXPECT_EQ(cells[1], cell::of_text("N/A"));
  EXPECT_EQ(cells[8], cell::of_text("N/A"));
  EXPECT_EQ(cells[20], cell::of_text("N/A"));  // Bench max
  // B output: float16 vs bfloat16 pass the gate
  EXPECT_TRUE(t.rows[3].bench);
  // C output: shape [3] vs [4] → no match
  EXPECT_FALSE(t.rows[4].bench);
  EXPECT_TRUE(compare_row_failing(t, 1));
  EXPECT_FALSE(compare_row_failing(t, 0));
}

TEST(CompareTable, Md5Table) {
  const auto leaf = [](const char *md5) {
    return fmt::format(R"({{"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "requires_grad": false, "md5": "{}"}})", md5);
  };
  const dump_file npu = parse(fmt::format(R"({{"task": "statistics", "data": {{"A.0.forward": {{"output": [{}, {}, {}]}}}}}})",
                                          leaf("aaaaaaaa"), leaf("bbbbbbbb"), leaf("cccccccc")));
  const dump_file bench = parse(fmt::format(R"({{"task": "statistics", "data": {{"A.0.forward": {{"output": [{}, {}]}}}}}})",
                                            leaf("aaaaaaaa"), leaf("00000000")),
                                "bench");
  compare_table_options o;
  o.match = compare_match::name;  // msprobe's matching
  o.mode = dump_mode(npu, bench);
  ASSERT_EQ(o.mode, compare_mode::md5);
  const compare_table t = compare_table_build(npu, bench, o);
  EXPECT_EQ(t.rows[0].result, "pass");
  EXPECT_EQ(t.rows[1].result, "Different");
  EXPECT_EQ(t.rows[2].result, "N/A");
  EXPECT_EQ(compare_table_columns(t),
            (std::vector<std::string>{"NPU Name", "Bench Name", "NPU Dtype", "Bench Dtype", "NPU Tensor Shape",
                                      "Bench Tensor Shape", "NPU Requires_grad", "Bench Requires_grad", "NPU MD5",
                                      "BENCH MD5", "Requires_grad Consistent", "Result"}));
  EXPECT_EQ(compare_table_row_cells(t, 1)[9], cell::of_text("00000000"));
  const advisor_result a = compare_table_advise(t);
  EXPECT_EQ(a.line, "1");
  EXPECT_EQ(a.suspect_nodes, "A.0.forward.output.1");
}

TEST(CompareTable, FuzzyMatchIgnoresCallCounts) {
  const auto leaf = [] { return stats_leaf(1); };
  const dump_file npu = parse(fmt::format(R"({{"task": "statistics", "data": {{
      "Functional.conv2d.3.forward": {{"output": [{}]}}, "Functional.relu.7.forward": {{"output": [{}]}},
      "Functional.gelu.0.forward": {{"output": [{}]}}, "Functional.tanh.0.forward": {{"output": [{}]}}}}}})",
                                          leaf(), leaf(), leaf(), leaf()));
  const dump_file bench = parse(fmt::format(R"({{"task": "statistics", "data": {{
      "Functional.conv2d.0.forward": {{"output": [{}]}}, "Functional.relu.0.forward": {{"output": [{}]}}}}}})",
                                            leaf(), leaf()),
                                "bench");
  compare_table_options o;
  o.match = compare_match::name;  // msprobe's matching
  o.mode = compare_mode::summary;
  EXPECT_FALSE(compare_table_build(npu, bench, o).rows[0].bench);  // exact: counts differ
  o.fuzzy_match = true;
  const compare_table t = compare_table_build(npu, bench, o);
  ASSERT_EQ(t.rows.size(), 4u);  // msprobe would drop the never-queued NPU rows; they are listed here
  EXPECT_EQ(*t.rows[0].bench, 0u);
  EXPECT_EQ(*t.rows[1].bench, 1u);
  EXPECT_FALSE(t.rows[2].bench);
  EXPECT_FALSE(t.rows[3].bench);
  EXPECT_EQ(t.npu->rows[t.rows[3].npu].name, "Functional.tanh.0.forward.output.0");
}

TEST(CompareTable, MappingFileNames) {
  const dump_file npu = parse(fmt::format(R"({{"task": "statistics", "data": {{"NPU.npu_fusion_attention.4.forward": {{"output": [{}]}}}}}})",
                                          stats_leaf(1, "torch.float16", "[2]")));
  const dump_file bench = parse(fmt::format(R"({{"task": "statistics", "data": {{"Functional.attention.0.forward": {{"output": [{}]}}}}}})",
                                            stats_leaf(1, "torch.int8", "[5]")),
                                "bench");
  const std::unordered_map<std::string, std::string> mapping{
      {"NPU.npu_fusion_attention.4.forward.output.0", "Functional.attention.0.forward.output.0"}};
  compare_table_options o;
  o.match = compare_match::name;  // msprobe's matching
  o.mode = compare_mode::summary;
  o.mapping = &mapping;
  const compare_table t = compare_table_build(npu, bench, o);
  ASSERT_TRUE(t.rows[0].bench);  // mapped: shape and dtype not required
  EXPECT_EQ(compare_table_row_cells(t, 0)[1], cell::of_text("Functional.attention.0.forward.output.0"));
}

// Mode all with metrics set by hand, to drive the highlight rules.
real_data_result metrics(double cos, double max_abs, double one_thousandth) {
  real_data_result r;
  r.metrics = {cell::of_real(cos), cell::of_real(0), cell::of_real(max_abs), cell::of_real(0),
               cell::of_real(one_thousandth), cell::of_real(one_thousandth)};
  r.accuracy = check_accuracy(r.metrics[0], r.metrics[2]);
  return r;
}

TEST(CompareHighlight, RealDataRules) {
  const std::string leaf = stats_leaf(1);
  const std::string inf_leaf = R"({"type": "torch.Tensor", "dtype": "torch.float32", "shape": [2], "Max": Infinity, "Min": 0, "Mean": 0, "Norm": 0, "requires_grad": true})";
  const std::string text = fmt::format(R"({{"task": "tensor", "data": {{
      "A.0.forward": {{"input_args": [{0}], "output": [{0}]}},
      "B.0.forward": {{"input_args": [{0}], "output": [{0}, {0}]}},
      "C.0.forward": {{"output": [{1}]}}}}}})",
                                       leaf, inf_leaf);
  const dump_file npu = parse(text), bench = parse(text, "bench");
  compare_table_options o;
  o.match = compare_match::name;  // msprobe's matching
  o.mode = compare_mode::all;
  compare_table t = compare_table_build(npu, bench, o);
  ASSERT_EQ(t.rows.size(), 6u);
  compare_table_set_real_data(t, 0, metrics(1.0, 0.5, 1.0));   // A in
  compare_table_set_real_data(t, 1, metrics(0.99, 0.5, 0.5));  // A out: ratio 1 → 0.5: red
  compare_table_set_real_data(t, 2, metrics(1.0, 2.0, 0.95));  // B in
  compare_table_set_real_data(t, 3, metrics(0.8, 50, 0.9));    // B out 1: cosine -0.2, |err| ×25: yellow ×2
  compare_table_set_real_data(t, 4, metrics(1.0, 2.0, 0.95));  // B out 2: fine
  compare_table_set_real_data(t, 5, metrics(1.0, 0, 1.0));     // C: NPU max inf: red
  compare_table_highlight(t);
  EXPECT_EQ(t.rows[0].color, row_color::none);
  EXPECT_EQ(t.rows[1].color, row_color::red);
  EXPECT_EQ(t.rows[1].err_message, "The input/parameter's one thousandth err ratio exceeds 0.9, while the output's is below 0.6");
  EXPECT_EQ(t.rows[3].color, row_color::yellow);
  EXPECT_EQ(t.rows[3].err_message,
            "maximum absolute error of both input/parameters and output exceed 1, with the output larger by an order "
            "of magnitude\nThe output's cosine decreases by more than 0.1 compared to the input/parameter's");
  EXPECT_EQ(t.rows[4].color, row_color::none);
  EXPECT_EQ(t.rows[5].color, row_color::red);
  EXPECT_EQ(t.rows[5].err_message, "maximum or minimum is nan, -inf, or inf");
}

TEST(CompareHighlight, StatisticsRules) {
  // test_cmp_highlight.py: input MaxRelativeErr 1% / output 60% → red; 0.1% / 20% → yellow;
  // 15000% / 20% → nothing.
  const auto table = [](double in_npu, double out_npu) {
    return fmt::format(R"({{"task": "statistics", "data": {{"A.0.forward": {{"input_args": [{}], "output": [{}]}}}}}})",
                       stats_leaf(in_npu), stats_leaf(out_npu));
  };
  const dump_file bench = parse(table(100, 100), "bench");
  for (const auto &[in, out, color, message] : std::vector<std::tuple<double, double, row_color, std::string>>{
           {101, 160, row_color::red, "maximum relative error exceeds 0.5"},
           {100.1, 120, row_color::yellow,
            "The output's maximum relative error exceeds 0.1, while the input/parameter's is below 0.01"},
           {15100, 120, row_color::none, ""}}) {
    const dump_file npu = parse(table(in, out));
    compare_table_options o;
    o.match = compare_match::name;  // msprobe's matching
    o.mode = compare_mode::summary;
    compare_table t = compare_table_build(npu, bench, o);
    compare_table_highlight(t);
    EXPECT_EQ(t.rows[1].color, color) << in;
    EXPECT_EQ(t.rows[1].err_message, message) << in;
  }
}

TEST(CompareHighlight, RequiresGradInconsistentIsYellow) {
  const dump_file npu = parse(fmt::format(R"({{"task": "statistics", "data": {{"A.0.forward": {{"output": [{}]}}}}}})", stats_leaf(1)));
  const dump_file bench = parse(fmt::format(R"({{"task": "statistics", "data": {{"A.0.forward": {{"output": [{}]}}}}}})",
                                            stats_leaf(1, "torch.float32", "[2]", false)),
                                "bench");
  compare_table_options o;
  o.match = compare_match::name;  // msprobe's matching
  o.mode = compare_mode::summary;
  compare_table t = compare_table_build(npu, bench, o);
  compare_table_highlight(t);
  EXPECT_EQ(t.rows[0].color, row_color::yellow);
  EXPECT_EQ(t.rows[0].err_message, "Requires_grad inconsistent. \nrequires_grad is inconsistent");
}

TEST(CompareAdvisor, Messages) {
  EXPECT_EQ(advisor_message("Functional.linear.0.forward.input.0").substr(0, 49),
            "1. Analyze the model to view the input source.\n2.");
  EXPECT_EQ(advisor_message("Functional.linear.0.forward.output.0"),
            "This is a forward API computation error. Check the computation implementation.");
  EXPECT_EQ(advisor_message("Functional.conv2d.0.forward.output.0"),
            "This torch api may be uncertainty in the calculation, can seed_all(mode=True) to enable deterministic "
            "computing.");
  EXPECT_EQ(advisor_message("Functional.linear.0.backward.input.0"), "Check whether the forward computation result is affected.");
  EXPECT_EQ(advisor_message("Functional.linear.0.backward.output.0"),
            "This is a backward API computation error. Check the computation implementation.");
  advisor_result none;
  none.advice = "All data in comparison result meets the accuracy requirements.";
  // msprobe/test/resources/advisor.txt
  EXPECT_EQ(advisor_text(none),
            "Line: NA\nSuspect Nodes: NA\nExpert Advice: All data in comparison result meets the accuracy requirements.\n");
}

TEST(CompareTable, UnmatchedRowInRealDataMode) {
  // msprobe overwrites "No bench data matched." with the requires_grad message, then appends the
  // real-data message (§4.5).
  const dump_file npu = parse(l1_tensor);
  const dump_file bench = parse(R"({"task": "tensor", "data": {}})", "bench");
  compare_table_options o;
  o.match = compare_match::name;  // msprobe's matching
  o.mode = compare_mode::all;
  compare_table t = compare_table_build(npu, bench, o);
  ASSERT_EQ(t.rows.size(), 4u);
  EXPECT_EQ(t.rows[0].err_message, "Requires_grad inconsistent. ");
  compare_table_set_real_data(t, 0, real_data_unavailable(real_data_missing::bench_unmatched));
  EXPECT_EQ(t.rows[0].err_message, "Requires_grad inconsistent. Bench api/module unmatched.");
  EXPECT_EQ(t.rows[0].result, "None");
  const auto cells = compare_table_row_cells(t, 0);
  EXPECT_EQ(cells[8], cell::of_text("unsupported"));
  EXPECT_EQ(cells[18], cell::of_text("N/A"));  // Bench max
  EXPECT_EQ(cells[22], cell::of_bool(false));  // Requires_grad Consistent
  EXPECT_EQ(cells.back(), cell::of_text("['Functional.relu.0.forward.input.0.pt', 'N/A']"));
  EXPECT_FALSE(compare_row_failing(t, 0));
}

// A row whose tensor file could not be read: msprobe's columns, but counted as an error and named
// by the advisor (never "All data … meets the accuracy requirements").
TEST(CompareAdvisor, ErrorRowsAreNamed) {
  const dump_file npu = parse(l1_tensor), bench = parse(l1_tensor, "bench");
  compare_table_options o;
  o.match = compare_match::name;  // msprobe's matching
  o.mode = compare_mode::all;
  compare_table t = compare_table_build(npu, bench, o);
  ASSERT_EQ(t.rows.size(), 4u);
  for (size_t i = 0; i < 4; ++i) compare_table_set_real_data(t, i, metrics(1.0, 0, 1.0));
  tensor_read_error e{"bench", "/d/bench/dump_tensor_data/Functional.relu.0.forward.output.0.pt", "is not a regular file"};
  compare_table_set_real_data(t, 1, real_data_read_error(e));
  compare_table_set_real_data(t, 3, real_data_read_error(e));
  EXPECT_TRUE(compare_row_error(t, 1));
  EXPECT_FALSE(compare_row_error(t, 0));
  EXPECT_FALSE(compare_row_failing(t, 1));  // msprobe's Accuracy "None"
  EXPECT_EQ(t.rows[1].result, "None");
  advisor_result a = compare_table_advise(t);
  EXPECT_EQ(a.error_rows, 2u);
  EXPECT_EQ(advisor_text(a),
            "Line: 1\nSuspect Nodes: Functional.relu.0.forward.output.0\nExpert Advice: 2 rows could not be compared (a "
            "tensor file could not be read): nothing is known about their data. The first is line 1, "
            "Functional.relu.0.forward.output.0: Dump file: /d/bench/dump_tensor_data/Functional.relu.0.forward.output.0.pt "
            "not found or read failed. Cannot read bench tensor: is not a regular file. Restore or dump those tensors "
            "again and compare again.\n");

  // A failing row stays msprobe's suspect; the error rows follow its advice.
  compare_table_set_real_data(t, 2, metrics(0.5, 2, 0.1));
  a = compare_table_advise(t);
  EXPECT_EQ(a.line, "2");
  EXPECT_EQ(a.suspect_nodes, "Functional.relu.0.backward.input.0");
  EXPECT_EQ(a.advice, "Check whether the forward computation result is affected.\n2 rows could not be compared (a "
                      "tensor file could not be read): nothing is known about their data. The first is line 1, "
                      "Functional.relu.0.forward.output.0: Dump file: "
                      "/d/bench/dump_tensor_data/Functional.relu.0.forward.output.0.pt not found or read failed. Cannot "
                      "read bench tensor: is not a regular file. Restore or dump those tensors again and compare again.");
}

TEST(CompareTable, StackColumnOnTheFirstRowOfAnEntry) {
  const dump_file npu = parse(l1_tensor);
  const stack_map stacks{{"Functional.relu.0.forward", {"File t.py, line 3, in f, \n y = relu(x)"}}};
  compare_table_options o;
  o.match = compare_match::name;  // msprobe's matching
  o.mode = compare_mode::all;
  o.stack_mode = true;
  o.npu_stacks = &stacks;
  const compare_table t = compare_table_build(npu, npu, o);
  const auto columns = compare_table_columns(t);
  ASSERT_EQ(columns[columns.size() - 2], "NPU_Stack_Info");
  EXPECT_EQ(compare_table_row_cells(t, 0)[columns.size() - 2], cell::of_text("['File t.py, line 3, in f, \\n y = relu(x)']"));
  EXPECT_EQ(compare_table_row_cells(t, 1)[columns.size() - 2], cell::of_text("N/A"));
  EXPECT_EQ(compare_table_row_cells(t, 2)[columns.size() - 2], cell::of_text("N/A"));  // not in stack.json
  EXPECT_EQ(compare_table_row_cells(t, 0).back(),
            cell::of_text("['Functional.relu.0.forward.input.0.pt', 'Functional.relu.0.forward.input.0.pt']"));
}

}  // namespace
}  // namespace tprobe
