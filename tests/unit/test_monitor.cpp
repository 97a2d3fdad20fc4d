// core/monitor.h against msprobe 8.3.3: the csv bytes and anomaly messages of V-5
// (docs/msprobe-compat.md §9.12; the expected text was written by msprobe's own CSVWriterWithAD and
// AnomalyDataWriter with pandas 1.5.3, the input numbers are msprobe's get_metrics of V-5's
// tensors), pandas' column typing on odd rows, msprobe's unit-test expectations (EMA, _ad, the
// rules, get_train_stage, squash, tag names), the config validation and the top-k order.
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "errors.h"
#include "monitor.h"
#include "monitor_record.h"
#include "pyjson.h"
#include "test_support.h"

using namespace tprobe;
using nlohmann::ordered_json;

namespace {

const double nan_v = std::numeric_limits<double>::quiet_NaN();
monitor_number f(double v) { return {v, false}; }
monitor_number i(int64_t v) { return {double(v), true}; }

const std::vector<std::string> v5_ops{"min", "max", "norm", "mean", "zeros", "nans", "shape", "dtype"};

// V-5's rows of one step, as msprobe's get_metrics gives them (repr of each .item()).
monitor_rows v5_actv(int64_t step) {
  const bool x3 = step == 2;
  monitor_rows r{step, v5_ops, true, {}};
  r.rows.push_back({"0:fc.input:0/rank0/actv",
                    {f(0.0), f(x3 ? 15.0 : 5.0), f(x3 ? 22.24859546128699 : 7.416198487095663), f(x3 ? 7.5 : 2.5),
                     f(0.0), i(0)},
                    std::vector<int64_t>{2, 3},
                    "torch.float16"});
  const double m = x3 ? 3.0 : 1.0;
  r.rows.push_back({"0:fc.output:0/rank0/actv", {f(m), f(m), f(2 * m), f(m), f(0.0), i(0)}, std::vector<int64_t>{2, 2},
                    "torch.float32"});
  return r;
}

monitor_rows v5_grad(int64_t step) {
  const bool x3 = step == 2;
  monitor_rows r{step, v5_ops, false, {}};
  r.rows.push_back({"0:fc.weight/rank0/post_grad",
                    {f(x3 ? -6.0 : -2.0), f(x3 ? 3.0 : 1.0), f(x3 ? 6.708203932499369 : 2.23606797749979),
                     f(x3 ? -0.74999999925 : -0.24999999975), f(0.5), i(0)},
                    std::vector<int64_t>{2, 2},
                    "torch.float32"});
  r.rows.push_back({"0:fc.bias/rank0/post_grad", {f(nan_v), f(nan_v), f(nan_v), f(nan_v), f(0.0), i(1)},
                    std::vector<int64_t>{2}, "torch.float32"});
  return r;
}

// What msprobe's writer produces for a prefix over several steps: the header once per file, then
// each step's lines, files named by step_count_per_record.
std::map<std::string, std::string> write_files(const std::vector<std::pair<std::string, monitor_rows>> &writes, int ndigits,
                                               int64_t per_record) {
  std::map<std::string, std::string> files;
  for (const auto &[prefix, rows] : writes) {
    const std::string name = monitor_csv_file_name(prefix, rows.step, per_record);
    if (!files.contains(name)) files[name] = monitor_csv_header(rows.ops, rows.micro_step);
    files[name] += monitor_csv_lines(rows, ndigits);
  }
  return files;
}

}  // namespace

TEST(MonitorCsv, V5FilesByteForByte) {
  std::vector<std::pair<std::string, monitor_rows>> writes;
  for (int64_t s = 0; s < 3; ++s) {
    writes.emplace_back("actv", v5_actv(s));
    writes.emplace_back("grad_reduced", v5_grad(s));
  }
  const auto files = write_files(writes, 6, 2);
  ASSERT_EQ(files.size(), 4u);
  EXPECT_EQ(files.at("actv_0-1.csv"),
            "vpp_stage,name,step,micro_step,min,max,norm,mean,zeros,nans,shape,dtype\n"
            "0,fc.input,0,0,0.0,5.0,7.416198,2.5,0.0,0,\"[2, 3]\",torch.float16\n"
            "0,fc.output,0,0,1.0,1.0,2.0,1.0,0.0,0,\"[2, 2]\",torch.float32\n"
            "0,fc.input,1,0,0.0,5.0,7.416198,2.5,0.0,0,\"[2, 3]\",torch.float16\n"
            "0,fc.output,1,0,1.0,1.0,2.0,1.0,0.0,0,\"[2, 2]\",torch.float32\n");
  EXPECT_EQ(files.at("actv_2-3.csv"),
            "vpp_stage,name,step,micro_step,min,max,norm,mean,zeros,nans,shape,dtype\n"
            "0,fc.input,2,0,0.0,15.0,22.248595,7.5,0.0,0,\"[2, 3]\",torch.float16\n"
            "0,fc.output,2,0,3.0,3.0,6.0,3.0,0.0,0,\"[2, 2]\",torch.float32\n");
  EXPECT_EQ(files.at("grad_reduced_0-1.csv"),
            "vpp_stage,name,step,min,max,norm,mean,zeros,nans,shape,dtype\n"
            "0,fc.weight,0,-2.0,1.0,2.236068,-0.25,0.5,0,\"[2, 2]\",torch.float32\n"
            "0,fc.bias,0,nan,nan,nan,nan,0.0,1,[2],torch.float32\n"
            "0,fc.weight,1,-2.0,1.0,2.236068,-0.25,0.5,0,\"[2, 2]\",torch.float32\n"
            "0,fc.bias,1,nan,nan,nan,nan,0.0,1,[2],torch.float32\n");
  EXPECT_EQ(files.at("grad_reduced_2-3.csv"),
            "vpp_stage,name,step,min,max,norm,mean,zeros,nans,shape,dtype\n"
            "0,fc.weight,2,-6.0,3.0,6.708204,-0.75,0.5,0,\"[2, 2]\",torch.float32\n"
            "0,fc.bias,2,nan,nan,nan,nan,0.0,1,[2],torch.float32\n");
}

// pandas types each column over the step's rows: ints with a NaN become floats ("3.0"), a
// non-tensor is nan everywhere, text or lists make a column object (its floats then unrounded),
// ragged rows (names without "vpp:", or with more colons) are padded with nan.
TEST(MonitorCsv, PandasColumnTypingAndRounding) {
  monitor_rows a{5, {"norm", "nans", "id", "mean", "shape", "dtype"}, true, {}};
  a.rows.push_back({"0:a.output:0/rank0/actv", {f(1e16), i(0), f(nan_v), f(0.0000025)}, std::vector<int64_t>{2, 3},
                    "torch.float16"});
  a.rows.push_back({"0:b.output:0/rank0/actv", {f(nan_v), f(nan_v), f(nan_v), f(nan_v)}, std::nullopt, std::nullopt});
  a.rows.push_back({"0:c.output_1:1/rank0/actv", {f(123456.7891234567), i(3), f(double(2.0005f)), f(-0.0004)},
                    std::vector<int64_t>{}, "torch.bfloat16"});
  a.rows.push_back({"0:d.output:0/rank0/actv", {f(INFINITY), i(0), f(nan_v), f(1.5e-5)}, std::vector<int64_t>{7},
                    "torch.float32"});
  EXPECT_EQ(monitor_csv_header(a.ops, true) + monitor_csv_lines(a, 3),
            "vpp_stage,name,step,micro_step,norm,nans,id,mean,shape,dtype\n"
            "0,a.output,5,0,1e+16,0.0,nan,0.0,\"[2, 3]\",torch.float16\n"
            "0,b.output,5,0,nan,nan,nan,nan,nan,nan\n"
            "0,c.output_1,5,1,123456.789,3.0,2.0,-0.0,[],torch.bfloat16\n"
            "0,d.output,5,0,inf,0.0,nan,0.0,[7],torch.float32\n");

  monitor_rows b{12, {"min", "nans", "shape", "dtype"}, false, {}};
  b.rows.push_back({"0:fc.weight/rank0/post_grad", {f(0.1 + 0.2), i(0)}, std::vector<int64_t>{2, 2}, "torch.float32"});
  b.rows.push_back({"all_reduce.post_0/rank0/other", {f(1234567.0000005), i(1)}, std::vector<int64_t>{4}, "torch.float32"});
  b.rows.push_back({"0:x:y:z/rank0/other", {f(-2.5e-7), i(2)}, std::vector<int64_t>{1}, "torch.float32"});
  EXPECT_EQ(monitor_csv_file_name("other", 12, 1), "other_12-12.csv");
  EXPECT_EQ(monitor_csv_header(b.ops, false) + monitor_csv_lines(b, 6),
            "vpp_stage,name,step,min,nans,shape,dtype\n"
            "0,fc.weight,12,0.30000000000000004,0,\"[2, 2]\",torch.float32,nan,nan\n"
            "all_reduce.post_0,1234567.0000005,12,1,[4],torch.float32,nan,nan,nan\n"
            "0,x,12,y,z,-2.5e-07,2,[1],torch.float32\n");

  monitor_rows c{0, {"norm", "shape", "dtype"}, false, {}};
  c.rows.push_back({"0:p/rank0/exp_avg", {f(0.1 + 0.2)}, std::vector<int64_t>{1}, "torch.float64"});
  c.rows.push_back({"0:q/rank0/exp_avg", {f(2.675)}, std::vector<int64_t>{1}, "torch.float64"});
  EXPECT_EQ(monitor_csv_lines(c, 20), "0,p,0,0.30000000000000004,[1],torch.float64\n0,q,0,2.675,[1],torch.float64\n");
  monitor_rows d{0, {"norm", "shape", "dtype"}, false, {}};
  for (auto [n, v] : {std::pair{"p", 2.5}, {"q", 3.5}, {"r", -0.4}})
    d.rows.push_back({std::string("0:") + n + "/rank0/exp_avg_sq", {f(v)}, std::vector<int64_t>{1}, "torch.float64"});
  EXPECT_EQ(monitor_csv_lines(d, 0), "0,p,0,2.0,[1],torch.float64\n0,q,0,4.0,[1],torch.float64\n0,r,0,-0.0,[1],torch.float64\n");
}

TEST(MonitorCsv, NamesHeadersAndRanges) {
  EXPECT_EQ(monitor_csv_step_range(0, 2), std::make_pair(int64_t(0), int64_t(1)));
  EXPECT_EQ(monitor_csv_step_range(5, 2), std::make_pair(int64_t(4), int64_t(5)));
  EXPECT_EQ(monitor_csv_step_range(7, 1), std::make_pair(int64_t(7), int64_t(7)));
  EXPECT_EQ(monitor_csv_file_name("grad_unreduced", 1000, 300), "grad_unreduced_900-1199.csv");
  EXPECT_EQ(monitor_csv_header({"norm", "shape", "dtype"}, false), "vpp_stage,name,step,norm,shape,dtype\n");
  EXPECT_TRUE(monitor_prefix_has_micro_step("actv", false));
  EXPECT_TRUE(monitor_prefix_has_micro_step("actv_grad", false));
  EXPECT_FALSE(monitor_prefix_has_micro_step("grad_unreduced", false));
  EXPECT_TRUE(monitor_prefix_has_micro_step("grad_unreduced", true));
  EXPECT_FALSE(monitor_prefix_has_micro_step("grad_reduced", true));
  EXPECT_EQ(monitor_round(2.2360679774997898, 6), 2.236068);
  EXPECT_EQ(monitor_round(0.5, 0), 0.0);  // half to even
  EXPECT_EQ(monitor_round(1.5, 0), 2.0);
}

TEST(MonitorTags, GrammarAndSquash) {
  EXPECT_EQ(monitor_tag("0:fc.weight", "post_grad", 0), "0:fc.weight/rank0/post_grad");
  EXPECT_EQ(monitor_tag("0:fc.weight", "post_grad", std::nullopt), "0:fc.weight/post_grad");
  EXPECT_EQ(monitor_tag_name("0:fc.input:0/rank0/actv"), "0:fc.input:0");
  EXPECT_THAT(monitor_name_split("0:fc.input:0"), ::testing::ElementsAre("0", "fc.input", "0"));
  EXPECT_THAT(monitor_name_split("fc"), ::testing::ElementsAre("fc"));
  EXPECT_THAT(monitor_name_split("0:"), ::testing::ElementsAre("0", ""));
  // Python's re.findall on msprobe's five patterns (outputs checked with msprobe's squash_param_name).
  const std::vector<std::pair<std::string, std::string>> cases{
      {"module.language_model.encoder.layers.0.mlp.w", "layers.0.mlp.w"},
      {"model.embeddings.weight", "embeddings.weight"},
      {"fc.weight", "fc.weight"},
      {"a.final_layernorm.weight", "final_layernorm.weight"},
      {"m.layer.1.output.dense.weight", "layer.1.output.dense.weight"},
      {"m.decoder.output_layer.weight", "output_layer.weight"},
      {"a.b.norm.weight", "norm.weight"},
      {"embeddings.weight", "embeddings.weight"},
      {"m.layers.0.layers.1.x", "layers.1.x"},
      {"x.embedding.word_embeddings.weight", "embedding.word_embeddings.weight"},
      {"layers.0.w", "layers.0.w"}};
  for (const auto &[in, out] : cases) EXPECT_EQ(monitor_squash_name(in), out) << in;
}

// msprobe's test_data_writers.py and test_anomaly_processor.py.
TEST(MonitorAnomaly, MsprobeUnitExpectations) {
  monitor_anomaly_detector ema({monitor_rule{monitor_rule::kind::turbulence, 0.5}});
  (void)ema.add("t", "norm", f(1.0), 0);
  ASSERT_NE(ema.state("t", "norm"), nullptr);
  EXPECT_EQ(ema.state("t", "norm")->avg.value, 1.0);
  EXPECT_EQ(ema.state("t", "norm")->count, 1);
  (void)ema.add("t", "norm", f(2.0), 1);
  EXPECT_DOUBLE_EQ(ema.state("t", "norm")->avg.value, 1.01);
  EXPECT_EQ(ema.state("t", "norm")->count, 2);
  EXPECT_EQ(ema.state("t", "shape"), nullptr);

  const std::vector<monitor_rule> turb{{monitor_rule::kind::turbulence, 0.2}};
  const monitor_rule *r = monitor_scan(turb, 1.0, 2.0);  // _ad(2.0, history 1.0)
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(r->name(), "AnomalyTurbulence");
  EXPECT_TRUE(turb[0].apply(16, 12));
  EXPECT_TRUE(turb[0].apply(-1, 0));
  EXPECT_FALSE(turb[0].apply(0, 0));
  const monitor_rule nan_rule{monitor_rule::kind::nan, 1e10};
  EXPECT_TRUE(nan_rule.apply(nan_v, 0));
  EXPECT_TRUE(nan_rule.apply(1e30, 0));
  EXPECT_FALSE(nan_rule.apply(0.5, 0));
  EXPECT_FALSE((monitor_rule{monitor_rule::kind::nan, std::nullopt}.apply(1e300, 0)));

  std::vector<int> stages;
  for (const char *t : {"0:fc2.input:0/rank0/actv", "0:fc1.weight/rank0/post_grad", "0:fc2.weight/rank0/exp_avg_sq", ""})
    stages.push_back(monitor_train_stage(t));
  EXPECT_THAT(stages, ::testing::ElementsAre(0, 1, 2, -1));

  monitor_anomaly_data d;
  std::vector<std::string> keys;
  const ordered_json dj = d.to_json();
  for (const auto &[k, v] : dj.items()) keys.push_back(k);
  EXPECT_THAT(keys, ::testing::ElementsAre("rank", "step", "micro_step", "pp_stage", "vpp_stage", "call_id", "tag_name",
                                           "message", "group_mates"));
}

// first-rule-wins: Turbulence deciding for an op other than norm/mean drops the value, later
// rules untried; the first value never trips Turbulence; shape and dtype are never scanned.
TEST(MonitorAnomaly, FirstRuleWinsAndNormMeanOnly) {
  monitor_anomaly_detector det({{monitor_rule::kind::turbulence, 0.5}, {monitor_rule::kind::nan, 10.0}});
  EXPECT_FALSE(det.add("t", "max", f(1.0), 0));
  // max 100: Turbulence decides first, and max is not norm/mean: nothing, though AnomalyNan(10) holds.
  EXPECT_FALSE(det.add("t", "max", f(100.0), 1));
  // min NaN: Turbulence is false for NaN, so AnomalyNan decides.
  (void)det.add("t", "min", f(1.0), 0);
  auto a = det.add("t", "min", f(nan_v), 1);
  ASSERT_TRUE(a);
  EXPECT_EQ(a->rule, "AnomalyNan");
  // The first value over AnomalyNan's threshold fires (Turbulence is false on the first value):
  // history is the int itself.
  auto b = det.add("u", "nans", i(20), 3);
  ASSERT_TRUE(b);
  EXPECT_EQ(b->message(), "Rule AnomalyNan reports anomaly signal in ('u', 'nans') at step 3, current value 20, history mean 20.");
  EXPECT_FALSE(det.add("t", "shape", f(1e9), 2));
  EXPECT_EQ(det.state("t", "shape"), nullptr);
  // A NaN makes the average NaN for good: Turbulence never fires again on that (tag, op).
  monitor_anomaly_detector t({{monitor_rule::kind::turbulence, 0.5}});
  (void)t.add("n", "norm", f(1.0), 0);
  (void)t.add("n", "norm", f(nan_v), 1);
  EXPECT_FALSE(t.add("n", "norm", f(1e9), 2));
  EXPECT_TRUE(std::isnan(t.state("n", "norm")->avg.value));
  // No rules: nothing is kept.
  monitor_anomaly_detector none({});
  EXPECT_FALSE(none.add("n", "norm", f(1.0), 0));
  EXPECT_EQ(none.state("n", "norm"), nullptr);
}

// V-5's anomalies: what msprobe's writer reported at step 2 (each line as msprobe printed it), and
// its anomaly.json, where the later mean overwrote the norm; tprobe's key keeps both.
TEST(MonitorAnomaly, V5Messages) {
  monitor_anomaly_detector det({{monitor_rule::kind::turbulence, 0.5}});
  std::vector<monitor_anomaly> found;
  for (int64_t s = 0; s < 3; ++s) {
    for (auto rows : {v5_actv(s), v5_grad(s)}) {
      auto a = det.add_rows(rows);
      if (s < 2) {
        EXPECT_TRUE(a.empty()) << s;
      }
      found.insert(found.end(), a.begin(), a.end());
    }
  }
  std::vector<std::string> messages;
  for (const auto &a : found) messages.push_back(a.message());
  EXPECT_THAT(messages,
              ::testing::ElementsAre(
                  "Rule AnomalyTurbulence reports anomaly signal in ('0:fc.input:0/rank0/actv', 'norm') at step 2, current value 22.24859546128699, history mean 7.416198487095663.",
                  "Rule AnomalyTurbulence reports anomaly signal in ('0:fc.input:0/rank0/actv', 'mean') at step 2, current value 7.5, history mean 2.5.",
                  "Rule AnomalyTurbulence reports anomaly signal in ('0:fc.output:0/rank0/actv', 'norm') at step 2, current value 6.0, history mean 2.0.",
                  "Rule AnomalyTurbulence reports anomaly signal in ('0:fc.output:0/rank0/actv', 'mean') at step 2, current value 3.0, history mean 1.0.",
                  "Rule AnomalyTurbulence reports anomaly signal in ('0:fc.weight/rank0/post_grad', 'norm') at step 2, current value 6.708203932499369, history mean 2.23606797749979.",
                  "Rule AnomalyTurbulence reports anomaly signal in ('0:fc.weight/rank0/post_grad', 'mean') at step 2, current value -0.74999999925, history mean 0.24999999975."));

  // msprobe's anomaly.json entry for the weight (call_id 7 set by the harness), value for value.
  const monitor_anomaly &mean = found[5];
  const monitor_anomaly_data d = monitor_anomaly_data_make(mean, 0, 0, {0}, 7);
  EXPECT_EQ(pyjson_dump(d.to_json(), 1),
            "{\n \"rank\": 0,\n \"step\": 2,\n \"micro_step\": 0,\n \"pp_stage\": 0,\n \"vpp_stage\": 0,\n \"call_id\": 7,\n"
            " \"tag_name\": \"0:fc.weight/rank0/post_grad\",\n"
            " \"message\": \"Rule AnomalyTurbulence reports anomaly signal in ('0:fc.weight/rank0/post_grad', 'mean') at step 2, current value -0.74999999925, history mean 0.24999999975.\",\n"
            " \"group_mates\": [\n  0\n ]\n}");
  EXPECT_EQ(monitor_anomaly_key_msprobe(mean.tag, 2, 7), "0:fc.weight/rank0/post_grad_step_2_call_7");
  EXPECT_EQ(monitor_anomaly_key(found[4].tag, found[4].op, 2, 7), "0:fc.weight/rank0/post_grad_norm_step_2_call_7");
  EXPECT_EQ(monitor_anomaly_key(mean.tag, mean.op, 2, 7), "0:fc.weight/rank0/post_grad_mean_step_2_call_7");
  EXPECT_EQ(monitor_anomaly_data_make(found[0], 0, 0, {0}).call_id, -1);
  // The record read back as msprobe's loader reads it.
  auto back = monitor_anomaly_data_from_json(d.to_json());
  ASSERT_TRUE(back);
  EXPECT_EQ(back->to_json(), d.to_json());
  std::string why;
  ordered_json extra = d.to_json();
  extra["op"] = "mean";
  EXPECT_FALSE(monitor_anomaly_data_from_json(extra, &why));
  EXPECT_THAT(why, ::testing::HasSubstr("'op'"));
}

TEST(MonitorAnomaly, VppStageAndReprQuotes) {
  monitor_anomaly a{"3:x.weight/rank1/exp_avg", "norm", "AnomalyNan", 4, f(nan_v), f(1.0)};
  EXPECT_EQ(monitor_anomaly_data_make(a, 1, 2, {0, 1}).vpp_stage, 3);
  a.tag = "all_reduce.post_0/rank1/other";
  EXPECT_EQ(monitor_anomaly_data_make(a, 1, 2, {0, 1}).vpp_stage, 0);
  EXPECT_EQ(a.message(),
            "Rule AnomalyNan reports anomaly signal in ('all_reduce.post_0/rank1/other', 'norm') at step 4, current value nan, history mean 1.0.");
  EXPECT_EQ(monitor_py_str_repr("it's"), "\"it's\"");
  EXPECT_EQ(monitor_py_str_repr("a'b\"c"), "'a\\'b\"c'");
}

// AnomalyAnalyse: (step, micro_step, stage, ±vpp, ±pp, call_id), stable; steps filter; top k.
TEST(MonitorAnomaly, TopKOrder) {
  auto mk = [](int64_t step, const char *suffix, int64_t vpp, int64_t pp, int64_t call, const char *label) {
    monitor_anomaly_data d;
    d.step = step;
    d.tag_name = std::string("0:m/rank0/") + suffix;
    d.vpp_stage = vpp;
    d.pp_stage = pp;
    d.call_id = call;
    d.message = label;
    return d;
  };
  std::vector<monitor_anomaly_data> all{
      mk(3, "actv", 0, 0, 1, "late"),         mk(1, "exp_avg", 0, 0, 0, "optimizer"),
      mk(1, "post_grad", 0, 0, 5, "bw pp0"),  mk(1, "post_grad", 0, 1, 9, "bw pp1"),
      mk(1, "actv", 0, 1, 0, "fw pp1"),       mk(1, "actv", 0, 0, 4, "fw pp0"),
      mk(1, "other", 0, 0, 0, "other"),       mk(1, "actv", 0, 0, 4, "fw pp0 again")};
  std::vector<std::string> order;
  for (const auto &d : monitor_anomaly_top_k(all, 100, {})) order.push_back(d.message);
  EXPECT_THAT(order, ::testing::ElementsAre("other", "fw pp0", "fw pp0 again", "fw pp1", "bw pp1", "bw pp0", "optimizer",
                                            "late"));
  order.clear();
  for (const auto &d : monitor_anomaly_top_k(all, 2, {3, 1})) order.push_back(d.message);
  EXPECT_THAT(order, ::testing::ElementsAre("other", "fw pp0"));
  order.clear();
  for (const auto &d : monitor_anomaly_top_k(all, 8, {3})) order.push_back(d.message);
  EXPECT_THAT(order, ::testing::ElementsAre("late"));
}

// ---- config ----

namespace {
monitor_config parse(const std::string &text) { return monitor_config_from_json(pyjson_parse(text, "t"), "monitor.json"); }
std::string error_of(const std::string &text) {
  try {
    (void)parse(text);
  } catch (const usage_error &e) {
    return e.what();
  }
  return "";
}
}  // namespace

TEST(MonitorConfig, DefaultsAndOpsExpansion) {
  const monitor_config c = parse(R"({"ops": ["min", "max", "norm", "mean", "zeros", "nans"]})");
  EXPECT_THAT(c.ops, ::testing::ElementsAre("min", "max", "norm", "mean", "zeros", "nans", "shape", "dtype"));
  EXPECT_TRUE(c.warnings.empty());
  EXPECT_EQ(c.ndigits, 6);
  EXPECT_EQ(c.eps, 1e-8);
  EXPECT_EQ(c.step_count_per_record, 1);
  EXPECT_EQ(c.collect_times, 100000000);
  EXPECT_EQ(c.step_interval, 1);
  EXPECT_EQ(c.format, "csv");
  EXPECT_TRUE(c.squash_name);  // 8.3.3
  EXPECT_FALSE(c.dynamic_on);
  EXPECT_EQ(c.json["targets"], ordered_json::parse(R"({"": {}})"));
  EXPECT_EQ(c.json["all_xy"], false);
  EXPECT_EQ(c.json["ops"].size(), 8u);
  EXPECT_EQ(c.json["alert"], ordered_json::parse(R"({"rules": [], "dump": false})"));

  const monitor_config e = parse(R"({"ops": ["bogus", 3, "shape", "norm"], "xy_distribution": true})");
  EXPECT_THAT(e.ops, ::testing::ElementsAre("shape", "norm", "dtype"));
  ASSERT_EQ(e.warnings.size(), 2u);
  EXPECT_EQ(e.warnings[0],
            "op bogus is not supported. Optional ops: ['norm', 'min', 'max', 'zeros', 'nans', 'id', 'mean', 'shape', 'dtype']");
  EXPECT_EQ(e.json["all_xy"], true);  // empty targets with xy_distribution

  const monitor_config none = parse(R"({"ops": ["x"], "targets": {"fc": {}}, "xy_distribution": true})");
  EXPECT_THAT(none.ops, ::testing::ElementsAre("norm", "shape", "dtype"));
  EXPECT_EQ(none.json["all_xy"], false);
  EXPECT_EQ(none.json["targets"], ordered_json::parse(R"({"fc": {}})"));
}

TEST(MonitorConfig, IntFieldsFallBackWithWarning) {
  const monitor_config c = parse(R"({"start_step": -1, "step_interval": 0, "collect_times": "5", "monitor_mbs_grad": 1})");
  EXPECT_EQ(c.start_step, 0);
  EXPECT_EQ(c.step_interval, 1);
  EXPECT_EQ(c.collect_times, 100000000);
  EXPECT_FALSE(c.monitor_mbs_grad);
  EXPECT_THAT(c.warnings, ::testing::ElementsAre(
                              "Validate start_step failed, start_step must greater than 0, replaced with default value 0.",
                              "Validate collect_times failed, collect_times must be int, replaced with default value 100000000.0.",
                              "Validate step_interval failed, step_interval must greater than 1, replaced with default value 1.",
                              "monitor_mbs_grad should be a bool, actual value is 1."));
  const monitor_config ok = parse(R"({"start_step": 3, "step_interval": 2, "collect_times": 0, "step_count_per_record": 5})");
  EXPECT_EQ(ok.start_step, 3);
  EXPECT_EQ(ok.step_interval, 2);
  EXPECT_EQ(ok.collect_times, 0);
  EXPECT_EQ(ok.step_count_per_record, 5);
  EXPECT_TRUE(ok.warnings.empty());
}

TEST(MonitorConfig, RefusalsNameTheField) {
  EXPECT_THAT(error_of(R"({"ndigits": 21})"), ::testing::StartsWith("monitor.json: field \"ndigits\": "));
  EXPECT_THAT(error_of(R"({"ndigits": -1})"), ::testing::StartsWith("monitor.json: field \"ndigits\": "));
  EXPECT_THAT(error_of(R"({"ndigits": 2.5})"), ::testing::StartsWith("monitor.json: field \"ndigits\": "));
  EXPECT_EQ(parse(R"({"ndigits": 20})").ndigits, 20);
  EXPECT_EQ(parse(R"({"ndigits": 0})").ndigits, 0);
  EXPECT_THAT(error_of(R"({"eps": 0})"), ::testing::StartsWith("monitor.json: field \"eps\": eps should be a float"));
  EXPECT_EQ(parse(R"({"eps": 0.0})").eps, 0.0);
  EXPECT_THAT(error_of(R"({"ops": "norm"})"), ::testing::StartsWith("monitor.json: field \"ops\": ops should be a list"));
  EXPECT_THAT(error_of(R"({"module_ranks": [0, true]})"), ::testing::StartsWith("monitor.json: field \"module_ranks\""));
  EXPECT_THAT(error_of(R"({"targets": {"fc": "tensor"}})"), ::testing::StartsWith("monitor.json: field \"targets.fc\""));
  EXPECT_THAT(error_of(R"({"wg_distribution": "yes"})"), ::testing::StartsWith("monitor.json: field \"wg_distribution\""));
  EXPECT_THAT(error_of(R"({"mg_distribution": 1})"), ::testing::StartsWith("monitor.json: field \"mg_distribution\""));
  EXPECT_THAT(error_of(R"({"mv_distribution": 1})"), ::testing::StartsWith("monitor.json: field \"mv_distribution\""));
  EXPECT_THAT(error_of(R"({"squash_name": null})"), ::testing::StartsWith("monitor.json: field \"squash_name\""));
  EXPECT_THAT(error_of(R"({"dynamic_on": "true"})"), ::testing::StartsWith("monitor.json: field \"dynamic_on\""));
  EXPECT_THAT(error_of(R"({"step_count_per_record": 0})"), ::testing::HasSubstr("must greater than 0"));
  EXPECT_THAT(error_of(R"({"step_count_per_record": 1000001})"), ::testing::HasSubstr("smaller than 1e6"));
  EXPECT_THAT(error_of(R"({"cc_distribution": {"enable": true, "x": 1}})"),
              ::testing::StartsWith("monitor.json: field \"cc_distribution.x\""));
  EXPECT_THAT(error_of(R"({"append_output": ["Dec03_21-34-40"]})"), ::testing::HasSubstr("exactly 2 elements"));
  EXPECT_THAT(error_of(R"({"sa_order": "h,b,s,d"})"), ::testing::StartsWith("monitor.json: field \"sa_order\""));
  EXPECT_NO_THROW((void)parse(R"({"sa_order": "b, s, h, d"})"));
  EXPECT_THAT(error_of(R"({"l2_targets": {"conv_hook": []}})"), ::testing::StartsWith("monitor.json: field \"l2_targets\""));
  EXPECT_THAT(error_of(R"([1])"), ::testing::HasSubstr("expected a JSON object"));
}

TEST(MonitorConfig, AlertRules) {
  const monitor_config c = parse(R"({"alert": {"rules": [
      {"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}},
      {"rule_name": "AnomalyNan"},
      {"rule_name": "AnomalyNan", "args": {"threshold": 1e10}},
      {"rule_name": "AnomalyTurbulence"},
      {"args": {"threshold": 1}}], "dump": true}})");
  ASSERT_EQ(c.rules.size(), 3u);
  EXPECT_EQ(c.rules[0].k, monitor_rule::kind::turbulence);
  EXPECT_EQ(c.rules[0].threshold, 0.5);
  EXPECT_EQ(c.rules[1].k, monitor_rule::kind::nan);
  EXPECT_FALSE(c.rules[1].threshold);
  EXPECT_EQ(c.rules[2].threshold, 1e10);
  EXPECT_TRUE(c.alert_dump);
  ASSERT_EQ(c.warnings.size(), 2u);
  EXPECT_THAT(c.warnings[0], ::testing::StartsWith("Spec is missing required keys: "));
  EXPECT_EQ(c.json["alert"]["rules"].size(), 3u);
  EXPECT_THAT(error_of(R"({"alert": {"rules": [{"rule_name": "AnomalyBig"}]}})"),
              ::testing::StartsWith("monitor.json: field \"alert.rules[0].rule_name\""));
  EXPECT_THAT(error_of(R"({"alert": {"rules": [{"rule_name": "AnomalyNan", "args": {"threshold": -1}}]}})"),
              ::testing::StartsWith("monitor.json: field \"alert.rules[0].args.threshold\""));
  EXPECT_THAT(error_of(R"({"alert": {"dump": "yes"}})"), ::testing::StartsWith("monitor.json: field \"alert.dump\""));
  EXPECT_THAT(error_of(R"({"alert": []})"), ::testing::StartsWith("monitor.json: field \"alert\""));
}

TEST(MonitorConfig, FormatAndFlags) {
  const monitor_config c = parse(R"({"format": "parquet", "ur_distribution": true, "forward_only": true, "backward_only": true})");
  EXPECT_EQ(c.format, "csv");
  EXPECT_EQ(c.json["format"], "csv");
  EXPECT_EQ(c.json["ur_distribution"], false);
  EXPECT_THAT(c.warnings, ::testing::ElementsAre("Unsupported format: parquet, use default format: csv",
                                                 "can only set ur_distribution when format is 'tensorboard', cancel ur_distribution",
                                                 "not enable backward_only and forward_only simultaneously"));
  const monitor_config t = parse(R"({"format": "tensorboard", "ur_distribution": true, "squash_name": false, "dynamic_on": true,
                                    "module_ranks": [0, 2], "unknown_key": 1})");
  EXPECT_EQ(t.format, "tensorboard");
  EXPECT_EQ(t.json["ur_distribution"], true);
  EXPECT_FALSE(t.squash_name);
  EXPECT_TRUE(t.dynamic_on);
  EXPECT_THAT(t.module_ranks, ::testing::ElementsAre(0, 2));
  EXPECT_EQ(t.json["unknown_key"], 1);
}

TEST(MonitorConfig, ReadFile) {
  test::temp_dir dir;
  const std::string path = dir / "monitor.json";
  test::write_file(path, R"({"ops": ["norm"], "eps": NaN})");
  EXPECT_TRUE(std::isnan(monitor_config_read(path).eps));
  test::write_file(path, R"({"ops": )");
  EXPECT_THROW((void)monitor_config_read(path), usage_error);
  EXPECT_THROW((void)monitor_config_read(dir / "absent.json"), system_error);
}

// ---- rows and the record ----

TEST(MonitorRows, JsonRoundTripAndChecks) {
  monitor_rows rows = v5_grad(2);
  const ordered_json j = monitor_rows_to_json(rows);
  EXPECT_TRUE(j["rows"][0]["values"][5].is_number_integer());
  EXPECT_TRUE(j["rows"][0]["values"][0].is_number_float());
  const monitor_rows back = monitor_rows_from_json(j, "rows");
  EXPECT_EQ(monitor_csv_lines(back, 6), monitor_csv_lines(rows, 6));
  // Python's json.dumps text: NaN tokens, null for a non-tensor's shape and dtype.
  const monitor_rows py = monitor_rows_from_json(
      pyjson_parse(R"({"step": 1, "ops": ["norm", "nans", "shape", "dtype"], "micro_step": true,
                       "rows": [{"tag": "0:m.output:0/rank0/actv", "values": [NaN, null], "shape": null, "dtype": null}]})",
                   "t"),
      "rows");
  EXPECT_EQ(monitor_csv_lines(py, 6), "0,m.output,1,0,nan,nan,nan,nan\n");
  auto bad = [](const std::string &text) {
    try {
      (void)monitor_rows_from_json(pyjson_parse(text, "t"), "record");
    } catch (const usage_error &e) {
      return std::string(e.what());
    }
    return std::string();
  };
  EXPECT_THAT(bad(R"({"step": 1, "ops": ["norm", "shape", "dtype"], "rows": [{"tag": "a", "values": [1, 2]}]})"),
              ::testing::HasSubstr("rows[0].values"));
  EXPECT_THAT(bad(R"({"step": 1, "ops": ["std"], "rows": []})"), ::testing::HasSubstr("field \"ops\""));
  EXPECT_THAT(bad(R"({"ops": ["norm"], "rows": []})"), ::testing::HasSubstr("field \"step\""));
  EXPECT_THAT(bad(R"({"step": 1, "ops": ["norm"], "rows": [{"tag": "", "values": [1]}]})"), ::testing::HasSubstr("rows[0].tag"));
}

TEST(MonitorRecord, MakeAndRead) {
  record_header h;
  h.rank = 3;
  const record r = monitor_record_make(h, "grad_reduced", v5_grad(2));
  EXPECT_TRUE(monitor_record_is(r));
  EXPECT_EQ(r.header.slot, "grad_reduced");
  EXPECT_EQ(r.header.step, 2);
  EXPECT_EQ(r.header.rank, 3);
  const monitor_record_view v = monitor_record_read(r);
  EXPECT_EQ(v.prefix, "grad_reduced");
  EXPECT_EQ(monitor_csv_lines(v.rows, 6), monitor_csv_lines(v5_grad(2), 6));
  EXPECT_THROW((void)monitor_record_make(h, "weights", v5_grad(2)), usage_error);
  record other = monitor_record_make(h, "grad_reduced", v5_grad(2));
  other.header.step = 5;
  EXPECT_THROW((void)monitor_record_read(other), framing_error);
  record empty = monitor_record_make(h, "grad_reduced", v5_grad(2));
  empty.header.meta = nlohmann::ordered_json::object();
  EXPECT_THROW((void)monitor_record_read(empty), framing_error);
}
