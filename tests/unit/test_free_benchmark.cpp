// core/free_benchmark and transport/free_benchmark_record: msprobe 8.3.3's task free_benchmark
// (docs/msprobe-compat.md §8): the csv rows of V-3 rebuilt from rows, the thresholds and chunks of
// calculate_max_ratio, preheat's sampling and threshold rules, the config section's validation,
// and the row's record.
#include <cmath>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "errors.h"
#include "free_benchmark.h"
#include "free_benchmark_record.h"
#include "half_float.h"

namespace tprobe {
namespace {

using json = nlohmann::ordered_json;
using ::testing::HasSubstr;

float f16(float v) { return float16_to_float(float_to_float16(v)); }

// calculate_max_ratio on two fp32 vectors with no symbol flip and no value under abs_tol: the
// ratio tensor is computed in float32, then max(max(r), 1/min(r)) in Python floats (doubles).
double max_ratio(const std::vector<float> &origin, const std::vector<float> &perturbed) {
  double lo = INFINITY, hi = -INFINITY;
  for (size_t i = 0; i < origin.size(); ++i) {
    const float r = std::fabs(origin[i]) / std::fabs(perturbed[i]);
    lo = std::min(lo, static_cast<double>(r));
    hi = std::max(hi, static_cast<double>(r));
  }
  return std::max({1.0, hi, 1.0 / lo});
}

free_benchmark_row v3_row(const char *mode, const char *api, double ratio) {
  free_benchmark_row row;
  row.rank = 0;
  row.pert_mode = mode;
  row.stage = "forward";
  row.step = 3;
  row.api_name = api;
  row.ratio = ratio;
  return row;
}

// V-3: msprobe's CheckerHandler on the CPU, step 3.
TEST(FreeBenchmarkCsv, MsprobeV3Lines) {
  EXPECT_EQ(free_benchmark_csv_header(), "rank,pert_mode,stage,step,api_name,max_rel,dtype,shape,output_index\r\n");

  // case 1: torch.add of fp16 [3.01, 3.02] and [0.02, 0.02]; the perturbed inputs are the fp16
  // inputs times 1.0041 (still fp16), widened to fp32 and added in fp32. The original output is
  // cast to fp32 for the comparison.
  const float a0 = f16(3.01f), a1 = f16(3.02f), b = f16(0.02f);
  const std::vector<float> origin{f16(a0 + b), f16(a1 + b)};
  const float pa0 = f16(a0 * 1.0041f), pa1 = f16(a1 * 1.0041f), pb = f16(b * 1.0041f);
  const std::vector<float> perturbed{pa0 + pb, pa1 + pb};
  EXPECT_EQ(origin, (std::vector<float>{3.029296875f, 3.0390625f}));
  EXPECT_EQ(perturbed, (std::vector<float>{3.04156494140625f, 3.05133056640625f}));
  auto row1 = v3_row("improve_precision", "Torch.add.0.forward", max_ratio(origin, perturbed));
  row1.dtype = "torch.float16";
  row1.shape = {2};
  EXPECT_EQ(free_benchmark_csv_line(row1),
            "0,improve_precision,forward,3,Torch.add.0.forward,0.004049780885728493,torch.float16,torch.Size([2]),\r\n");

  // case 2: fp16 [1, -2, 3] against fp32 [1, 2, 3]: a flipped sign.
  auto row2 = v3_row("improve_precision", "Torch.mul.1.forward", 0);
  row2.verdict = free_benchmark_row::kind::symbol_flipping;
  row2.dtype = "torch.float16";
  row2.shape = {3};
  EXPECT_EQ(free_benchmark_csv_line(row2),
            "0,improve_precision,forward,3,Torch.mul.1.forward,symbol_flipping,torch.float16,torch.Size([3]),\r\n");

  // case 3: bit_noise, the second element of a tuple output: [[1,2],[3,4]] vs [[1,2],[3,4.001]].
  auto row3 = v3_row("bit_noise", "Functional.softmax.0.forward", max_ratio({1, 2, 3, 4}, {1, 2, 3, 4.001f}));
  row3.dtype = "torch.float32";
  row3.shape = {2, 2};
  row3.output_index = 1;
  EXPECT_EQ(free_benchmark_csv_line(row3), "0,bit_noise,forward,3,Functional.softmax.0.forward,"
                                           "0.00024998475230142425,torch.float32,\"torch.Size([2, 2])\",1\r\n");
}

TEST(FreeBenchmarkCsv, CellsAndQuoting) {
  EXPECT_EQ(free_benchmark_shape_text({}), "torch.Size([])");
  EXPECT_EQ(free_benchmark_shape_text({4096, 4, 192}), "torch.Size([4096, 4, 192])");
  free_benchmark_row row;
  row.pert_mode = "to_cpu";
  row.stage = "forward";
  row.step = 2;
  row.rank = 7;
  row.api_name = "Torch.matmul.40.forward";
  row.verdict = free_benchmark_row::kind::none;  // to_cpu's rows have no max_rel
  row.dtype = "torch.float16";
  EXPECT_EQ(free_benchmark_max_rel_text(row), "");
  EXPECT_EQ(free_benchmark_csv_line(row), "7,to_cpu,forward,2,Torch.matmul.40.forward,,torch.float16,torch.Size([]),\r\n");
  // An output element that is no tensor: dtype and shape both empty.
  row.dtype.clear();
  row.shape = {5};
  row.output_index = 3;
  EXPECT_EQ(free_benchmark_csv_line(row), "7,to_cpu,forward,2,Torch.matmul.40.forward,,,,3\r\n");
  // csv.writer's QUOTE_MINIMAL: a quote is doubled, a line break quoted.
  row.api_name = "a\"b";
  row.stage = "x\ny";
  EXPECT_EQ(free_benchmark_csv_line(row), "7,to_cpu,\"x\ny\",2,\"a\"\"b\",,,,3\r\n");
  // max_rel is repr(ratio - 1.0), infinity included (1 / 0 of a zero minimum).
  row.verdict = free_benchmark_row::kind::ratio;
  row.ratio = 1.022563696;
  EXPECT_EQ(free_benchmark_max_rel_text(row), "0.022563695999999966");
  row.ratio = INFINITY;
  EXPECT_EQ(free_benchmark_max_rel_text(row), "inf");
  row.ratio = 10.0;
  EXPECT_EQ(free_benchmark_max_rel_text(row), "9.0");
}

TEST(FreeBenchmarkCsv, RowJsonRoundTripAndErrors) {
  free_benchmark_row row = v3_row("add_noise", "Torch.matmul.0.backward", 1.5);
  row.stage = "backward";
  row.dtype = "torch.bfloat16";
  row.shape = {2, 0, 3};
  row.output_index = 0;
  EXPECT_EQ(free_benchmark_row_from_json(free_benchmark_row_to_json(row), "test"), row);
  row.verdict = free_benchmark_row::kind::symbol_flipping;
  row.ratio = 1.0;  // not carried for symbol_flipping: the default comes back
  EXPECT_EQ(free_benchmark_row_from_json(free_benchmark_row_to_json(row), "test"), row);
  row.verdict = free_benchmark_row::kind::none;
  row.output_index.reset();
  EXPECT_EQ(free_benchmark_row_from_json(free_benchmark_row_to_json(row), "test"), row);

  json j = free_benchmark_row_to_json(row);
  j["verdict"] = "maybe";
  try {
    (void)free_benchmark_row_from_json(j, "rec");
    FAIL();
  } catch (const usage_error &e) {
    EXPECT_THAT(e.what(), HasSubstr("rec: free_benchmark row: \"verdict\""));
  }
  j = free_benchmark_row_to_json(row);
  j.erase("step");
  EXPECT_THROW((void)free_benchmark_row_from_json(j, "rec"), usage_error);
  j = free_benchmark_row_to_json(row);
  j["shape"] = json::array({-1});
  EXPECT_THROW((void)free_benchmark_row_from_json(j, "rec"), usage_error);
}

TEST(FreeBenchmarkRecord, RoundTripAndMalformed) {
  free_benchmark_row row = v3_row("improve_precision", "Torch.add.0.forward", 1.004049780885728493);
  row.rank = 3;
  row.dtype = "torch.float16";
  row.shape = {2};
  record r = free_benchmark_record_make(record_header_of(record_kind::tensor), row);
  EXPECT_EQ(r.header.slot, "Torch.add.0.forward");
  auto frames = record_encode(r);
  const record back = record_decode(frames);
  ASSERT_TRUE(free_benchmark_record_is(back));
  EXPECT_EQ(free_benchmark_record_read(back), row);

  record no_meta(back.header);
  no_meta.header.meta = json::object();
  EXPECT_THROW((void)free_benchmark_record_read(no_meta), framing_error);
  record bad_row(back.header);
  bad_row.header.meta["free_benchmark"]["rank"] = "zero";
  EXPECT_THROW((void)free_benchmark_record_read(bad_row), framing_error);
  record other_slot(back.header);
  other_slot.header.slot = "Torch.add.1.forward";
  EXPECT_THROW((void)free_benchmark_record_read(other_slot), framing_error);
  record not_ours(back.header);
  not_ours.header.entry = "grad_probe";
  EXPECT_FALSE(free_benchmark_record_is(not_ours));
  EXPECT_THROW((void)free_benchmark_record_read(not_ours), framing_error);
}

// ThresholdConfig: ABS_TOL_VALUE_DICT and DTYPE_PER_THD.
TEST(FreeBenchmarkThresholds, TablesAsMsprobe) {
  EXPECT_EQ(free_benchmark_noise("torch.bfloat16"), 1e-4);
  EXPECT_EQ(free_benchmark_noise("torch.float16"), 1e-6);
  EXPECT_EQ(free_benchmark_noise("torch.float32"), 1e-8);
  EXPECT_EQ(free_benchmark_noise("torch.float64"), 1e-16);
  EXPECT_EQ(free_benchmark_noise("torch.int32"), 1e-8);
  // Forward: the square root (Python's ** 0.5); backward: 1e-3 for every dtype.
  EXPECT_EQ(free_benchmark_abs_tol("torch.float32", false), std::pow(1e-8, 0.5));
  EXPECT_NEAR(free_benchmark_abs_tol("torch.float32", false), 1e-4, 1e-19);
  EXPECT_NEAR(free_benchmark_abs_tol("torch.float16", false), 1e-3, 1e-18);
  EXPECT_NEAR(free_benchmark_abs_tol("torch.bfloat16", false), 1e-2, 1e-17);
  EXPECT_NEAR(free_benchmark_abs_tol("torch.float64", false), 1e-8, 1e-23);
  EXPECT_EQ(free_benchmark_abs_tol("torch.float16", true), 1e-3);
  EXPECT_EQ(free_benchmark_abs_tol("torch.float64", true), 1e-3);
  EXPECT_EQ(free_benchmark_threshold("torch.float16", "improve_precision"), 1.002);
  EXPECT_EQ(free_benchmark_threshold("torch.bfloat16", "add_noise"), 1.004);
  EXPECT_EQ(free_benchmark_threshold("torch.float32", "bit_noise"), 1.0002);
  EXPECT_EQ(free_benchmark_threshold("torch.float64", "bit_noise"), 1.0002);
  EXPECT_EQ(free_benchmark_threshold("torch.float16", "no_change"), 1.0);
  // The doc's verdicts: max_rel above 0.002 (fp16) is inconsistent.
  EXPECT_TRUE(free_benchmark_consistent(1.002, false, 1.002));
  EXPECT_TRUE(free_benchmark_consistent(1 / 1.002, false, 1.002));
  EXPECT_FALSE(free_benchmark_consistent(1.0021, false, 1.002));
  EXPECT_FALSE(free_benchmark_consistent(1.0, true, 1.002));
  EXPECT_FALSE(free_benchmark_consistent(INFINITY, false, 1.0002));
  EXPECT_TRUE(free_benchmark_consistent(1.0, false, 1.0));
  EXPECT_FALSE(free_benchmark_consistent(1.0 + 1e-12, false, 1.0));
}

TEST(FreeBenchmarkThresholds, Chunks) {
  const uint64_t mib = 1024 * 1024;
  EXPECT_EQ(free_benchmark_chunks(256ull * mib * 4, 1), 64);  // 256 Mi fp32 elements, msprobe's test
  EXPECT_EQ(free_benchmark_chunks(0, 1), 1);
  EXPECT_EQ(free_benchmark_chunks(4, 0), 1);  // 0-d
  EXPECT_EQ(free_benchmark_chunks(mib / 2, 1), 1);
  EXPECT_EQ(free_benchmark_chunks(31 * mib, 2), 1);
  EXPECT_EQ(free_benchmark_chunks(32 * mib, 2), 2);
  EXPECT_EQ(free_benchmark_chunks(63 * mib, 2), 2);
  EXPECT_EQ(free_benchmark_chunks(64 * mib, 2), 4);
  EXPECT_EQ(free_benchmark_chunks(2048 * mib, 3), 128);
  EXPECT_EQ(free_benchmark_chunks(4096 * mib, 3), 128);  // TENSOR_SPLIT_MAX_CHUNK
  EXPECT_EQ(free_benchmark_chunks(uint64_t{1} << 50, 1), 128);
  for (int k = 4; k < 12; ++k) EXPECT_EQ(free_benchmark_chunks((uint64_t{1} << k) * mib, 1), int64_t{1} << (k - 4)) << k;
}

// ---- preheat ----

// msprobe's test_result_handler_preheat: preheat_step 4, max_sample 3, three calls of "add" a
// step; step 0 counts, steps 1..3 each sample one call, and the threshold stays in [1.002, 2.05].
TEST(FreeBenchmarkPreheat, MsprobeUnitTest) {
  free_benchmark_preheat p(4, 3);
  const std::string api = free_benchmark_preheat::pure_name("add.0.forward");
  EXPECT_EQ(api, "add");
  for (int i = 0; i < 3; ++i) EXPECT_EQ(p.count_call(api, 0), i + 1);
  EXPECT_EQ(p.one_step_calls(api), 3);
  EXPECT_EQ(p.per_step(api), 1);  // min(ceil(3 / 4), 3)
  for (int64_t step = 1; step < 4; ++step) {
    int sampled = 0;
    for (int i = 0; i < 3; ++i) {
      const int64_t order = p.count_call(api, step);
      EXPECT_EQ(order, i + 1);
      if (p.sampled(api, "torch.float16", step, order)) {
        ++sampled;
        // The case's ratio (1.00405) is below the preheat threshold and the CPU agrees.
        p.add_sample(api, "torch.float16", step, 1.004049780885728493, true);
      }
    }
    EXPECT_EQ(sampled, 1) << step;
    EXPECT_EQ(p.sampled_calls(api), 1) << step;
    EXPECT_LE(p.threshold(api, "torch.float16"), free_benchmark_preheat::initial_threshold);
    EXPECT_GE(p.threshold(api, "torch.float16"), 1.002);
  }
  // Three consistent samples below the threshold: it halved its excess each step.
  EXPECT_DOUBLE_EQ(p.threshold(api, "torch.float16"), 1 + 1.05 / 8);
  // From preheat_step on nothing is sampled.
  for (int i = 0; i < 3; ++i) EXPECT_FALSE(p.sampled(api, "torch.float16", 4, p.count_call(api, 4)));
}

TEST(FreeBenchmarkPreheat, SampleSet) {
  // total 20, preheat_step 15, max_sample 15: per_step = ceil(20/15) = 2; at step s the orders
  // s % 20 and (15 + s) % 20 (0 read as 20).
  free_benchmark_preheat p(15, 15);
  for (int i = 0; i < 20; ++i) (void)p.count_call("Torch.mm", 0);
  EXPECT_EQ(p.per_step("Torch.mm"), 2);
  auto orders = [&](int64_t step) {
    std::vector<int64_t> out;
    for (int64_t o = 1; o <= 20; ++o)
      if (p.sampled("Torch.mm", "torch.float32", step, o)) out.push_back(o);
    return out;
  };
  EXPECT_EQ(orders(1), (std::vector<int64_t>{1, 16}));
  EXPECT_EQ(orders(5), (std::vector<int64_t>{5, 20}));
  EXPECT_EQ(orders(14), (std::vector<int64_t>{9, 14}));
  EXPECT_TRUE(orders(0).empty());
  EXPECT_TRUE(orders(15).empty());
  // max_sample caps per_step.
  free_benchmark_preheat q(2, 3);
  for (int i = 0; i < 100; ++i) (void)q.count_call("Torch.mm", 0);
  EXPECT_EQ(q.per_step("Torch.mm"), 3);
  // No calls at step 0: nothing to sample.
  EXPECT_EQ(q.per_step("Torch.other"), 0);
  EXPECT_FALSE(q.sampled("Torch.other", "torch.float32", 1, 1));
  EXPECT_THROW(free_benchmark_preheat(0, 1), usage_error);
}

// One step of an API with per_step samples; returns the threshold after it.
struct preheat_case {
  free_benchmark_preheat p{2, 10};
  std::string api = "Torch.mm";
  explicit preheat_case(int calls) {
    for (int i = 0; i < calls; ++i) (void)p.count_call(api, 0);
  }
  void step(int64_t s, const std::vector<std::pair<double, bool>> &samples, const std::string &dtype = "torch.float16") {
    size_t next = 0;
    for (int64_t o = 1; o <= p.one_step_calls(api); ++o) {
      (void)p.count_call(api, s);
      if (p.sampled(api, dtype, s, o) && next < samples.size()) {
        p.add_sample(api, dtype, s, samples[next].first, samples[next].second);
        ++next;
      }
    }
  }
};

TEST(FreeBenchmarkPreheat, AdjustmentRules) {
  const std::string fp16 = "torch.float16";
  {  // both kinds, min(incon) > max(con): thd = min(min(incon), old), preheating stops
    preheat_case c(4);  // per_step ceil(4/2) = 2
    c.step(1, {{1.3, true}, {1.5, false}});
    EXPECT_EQ(c.p.threshold(c.api, fp16), 1.5);
    EXPECT_FALSE(c.p.preheating(c.api, fp16));
    EXPECT_FALSE(c.p.sampled(c.api, fp16, 1, 1));
  }
  {  // both kinds, overlapping: unchanged, still preheating
    preheat_case c(4);
    c.step(1, {{1.6, true}, {1.5, false}});
    EXPECT_EQ(c.p.threshold(c.api, fp16), 2.05);
    EXPECT_TRUE(c.p.preheating(c.api, fp16));
  }
  {  // only consistent, one above the threshold: widen, 1 + (old - 1) * 2
    preheat_case c(4);
    c.step(1, {{1.1, true}, {3.0, true}});
    EXPECT_EQ(c.p.threshold(c.api, fp16), 1 + (2.05 - 1) * 2.0);
  }
  {  // only consistent, all within: narrow, 1 + (old - 1) / 2, and never under DTYPE_PER_THD
    preheat_case c(4);
    c.step(1, {{1.1, true}, {1.2, true}});
    EXPECT_EQ(c.p.threshold(c.api, fp16), 1 + (2.05 - 1) / 2.0);
    free_benchmark_preheat q(100, 10);
    (void)q.count_call("x", 0);
    for (int64_t s = 1; s < 20; ++s) {
      ASSERT_TRUE(q.sampled("x", fp16, s, q.count_call("x", s)));
      q.add_sample("x", fp16, s, 1.0, true);
    }
    EXPECT_EQ(q.threshold("x", fp16), 1.002);
  }
  {  // only inconsistent: thd = min(min(incon), old), preheating stops; the floor still holds
    preheat_case c(4);
    c.step(1, {{1.0001, false}, {1.8, false}});
    EXPECT_EQ(c.p.threshold(c.api, fp16), 1.002);
    EXPECT_FALSE(c.p.preheating(c.api, fp16));
    preheat_case d(4);
    d.step(1, {{1.7, false}, {1.8, false}});
    EXPECT_EQ(d.p.threshold(d.api, fp16), 1.7);
  }
  {  // no adjustment before the step's samples reach per_step
    preheat_case c(4);
    c.step(1, {{1.1, true}});
    EXPECT_EQ(c.p.threshold(c.api, fp16), 2.05);
  }
  {  // no_change's floor is 1.0
    free_benchmark_preheat q(100, 10, "no_change");
    (void)q.count_call("x", 0);
    for (int64_t s = 1; s < 40; ++s) {
      ASSERT_TRUE(q.sampled("x", "torch.float32", s, q.count_call("x", s)));
      q.add_sample("x", "torch.float32", s, 1.0, true);
    }
    EXPECT_LT(q.threshold("x", "torch.float32"), 1.0000001);
    EXPECT_GE(q.threshold("x", "torch.float32"), 1.0);
  }
  // Thresholds are per dtype: an untouched dtype keeps the initial one.
  preheat_case c(4);
  c.step(1, {{1.7, false}, {1.8, false}});
  EXPECT_EQ(c.p.threshold(c.api, "torch.float32"), 2.05);
  EXPECT_TRUE(c.p.preheating(c.api, "torch.float32"));
}

TEST(FreeBenchmarkPreheat, PureName) {
  EXPECT_EQ(free_benchmark_preheat::pure_name("Torch.matmul.0.forward"), "Torch.matmul");
  EXPECT_EQ(free_benchmark_preheat::pure_name("Tensor.__add__.3.backward"), "Tensor.__add__");
  EXPECT_EQ(free_benchmark_preheat::pure_name("a.b"), "a");
  EXPECT_EQ(free_benchmark_preheat::pure_name("abc"), "abc");
  EXPECT_EQ(free_benchmark_preheat::pure_name("a."), "a");
  EXPECT_EQ(free_benchmark_preheat::pure_name(".a"), "");
}

// ---- settings ----

std::string settings_error(const json &section) {
  try {
    (void)free_benchmark_settings_from_json(section, "config.json");
  } catch (const usage_error &e) {
    return e.what();
  }
  return "";
}

TEST(FreeBenchmarkSettings, DefaultsAndRoundTrip) {
  const auto s = free_benchmark_settings_from_json(json::object(), "config.json");
  EXPECT_EQ(free_benchmark_settings_to_json(s).dump(),
            R"({"scope":[],"list":[],"fuzz_device":"npu","pert_mode":"improve_precision","handler_type":"check",)"
            R"("fuzz_level":"L1","fuzz_stage":"forward","if_preheat":false,"preheat_step":15,"max_sample":15})");
  json full = {{"scope", json::array()}, {"list", {"relu"}},       {"fuzz_device", "cpu"},
               {"pert_mode", "to_cpu"},  {"handler_type", "check"}, {"fuzz_level", "L1"},
               {"fuzz_stage", "backward"}, {"if_preheat", true},   {"preheat_step", 4},
               {"max_sample", 3}};
  const auto t = free_benchmark_settings_from_json(full, "config.json");
  EXPECT_EQ(free_benchmark_settings_to_json(t), full);
  EXPECT_TRUE(t.backward());
  EXPECT_TRUE(t.preheat());
  EXPECT_FALSE(t.fix());
  // scope as one string (ListScope.rectify_args); "" is no scope.
  EXPECT_EQ(free_benchmark_settings_from_json({{"scope", "Torch.add.0.forward"}}, "c").scope,
            std::vector<std::string>{"Torch.add.0.forward"});
  EXPECT_TRUE(free_benchmark_settings_from_json({{"scope", ""}, {"list", {"a"}}}, "c").scope.empty());
  // Outside preheat msprobe neither reads nor checks preheat_step and max_sample.
  EXPECT_EQ(settings_error({{"preheat_step", 0}, {"max_sample", "20"}}), "");
}

TEST(FreeBenchmarkSettings, Wants) {
  auto s = free_benchmark_settings_from_json(json::object(), "c");
  EXPECT_TRUE(s.wants("Torch.matmul.0.forward"));
  s = free_benchmark_settings_from_json({{"scope", {"Torch.matmul.0.forward", "Functional.relu.1.forward"}}}, "c");
  EXPECT_TRUE(s.wants("Torch.matmul.0.forward"));
  EXPECT_FALSE(s.wants("Torch.matmul.1.forward"));
  EXPECT_FALSE(s.wants("Torch.matmul.0.backward"));  // backward names never match .forward scope entries
  s = free_benchmark_settings_from_json({{"list", {"relu", "matmul"}}}, "c");
  EXPECT_TRUE(s.wants("Functional.relu.3.forward"));
  EXPECT_TRUE(s.wants("Torch.matmul.0.backward"));
  EXPECT_FALSE(s.wants("Torch.add.0.forward"));
}

TEST(FreeBenchmarkSettings, ValidationMessages) {
  EXPECT_EQ(settings_error({{"fuzz_device", "cpu"}}),
            "config.json: field \"free_benchmark.fuzz_device\": \"cpu\" is required by, and only allowed with, "
            "pert_mode \"to_cpu\"");
  EXPECT_THAT(settings_error({{"pert_mode", "to_cpu"}}), HasSubstr("field \"free_benchmark.fuzz_device\""));
  EXPECT_EQ(settings_error({{"pert_mode", "noise"}}),
            "config.json: field \"free_benchmark.pert_mode\": \"noise\" is not one of add_noise, change_value, "
            "improve_precision, no_change, bit_noise, to_cpu");
  EXPECT_THAT(settings_error({{"pert_mode", nullptr}}), HasSubstr("field \"free_benchmark.pert_mode\": expected one of"));
  EXPECT_THAT(settings_error({{"fuzz_device", "gpu"}}), HasSubstr("field \"free_benchmark.fuzz_device\": \"gpu\" is not one of npu, cpu"));
  EXPECT_THAT(settings_error({{"handler_type", "preheat"}}), HasSubstr("field \"free_benchmark.handler_type\""));
  EXPECT_THAT(settings_error({{"fuzz_stage", "both"}}), HasSubstr("field \"free_benchmark.fuzz_stage\""));
  EXPECT_EQ(settings_error({{"fuzz_stage", "backward"}}),
            "config.json: field \"free_benchmark.list\": must not be empty when fuzz_stage is \"backward\"");
  EXPECT_THAT(settings_error({{"fuzz_stage", "backward"}, {"list", json::array()}}), HasSubstr("free_benchmark.list"));
  EXPECT_EQ(settings_error({{"fuzz_stage", "backward"}, {"list", {"relu"}}}), "");
  EXPECT_THAT(settings_error({{"fuzz_level", "L2"}}), HasSubstr("field \"free_benchmark.fuzz_level\": \"L2\" is not one of L1"));
  EXPECT_EQ(settings_error({{"if_preheat", "true"}}),
            "config.json: field \"free_benchmark.if_preheat\": expected a boolean (JSON true or false), got a string");
  EXPECT_THAT(settings_error({{"if_preheat", 1}}), HasSubstr("free_benchmark.if_preheat"));
  EXPECT_THAT(settings_error({{"handler_type", "fix"}, {"fuzz_stage", "backward"}, {"list", {"a"}}}),
              HasSubstr("field \"free_benchmark.handler_type\": \"fix\" requires fuzz_stage \"forward\""));
  EXPECT_THAT(settings_error({{"handler_type", "fix"}, {"pert_mode", "add_noise"}}),
              HasSubstr("field \"free_benchmark.handler_type\": \"fix\" requires pert_mode"));
  EXPECT_THAT(settings_error({{"handler_type", "fix"}, {"if_preheat", true}}),
              HasSubstr("field \"free_benchmark.handler_type\": \"fix\" cannot be used with if_preheat"));
  EXPECT_EQ(settings_error({{"handler_type", "fix"}, {"pert_mode", "to_cpu"}, {"fuzz_device", "cpu"}}), "");
  EXPECT_EQ(settings_error({{"if_preheat", true}, {"preheat_step", 0}}),
            "config.json: field \"free_benchmark.preheat_step\": 0 is invalid: must be > 0");
  EXPECT_EQ(settings_error({{"if_preheat", true}, {"max_sample", "20"}}),
            "config.json: field \"free_benchmark.max_sample\": expected an integer, got a string");
  EXPECT_THAT(settings_error({{"if_preheat", true}, {"max_sample", true}}), HasSubstr("expected an integer, got a boolean"));
  EXPECT_THAT(settings_error({{"if_preheat", true}, {"max_sample", 2.0}}), HasSubstr("expected an integer, got a float"));
  EXPECT_EQ(settings_error({{"scope", {"Torch.add.0.forward"}}, {"list", {"add"}}}),
            "config.json: field \"free_benchmark.scope\": cannot be combined with free_benchmark.list");
  EXPECT_THAT(settings_error({{"scope", 3}}), HasSubstr("field \"free_benchmark.scope\": expected a list of strings or a string"));
  EXPECT_THAT(settings_error({{"list", "relu"}}), HasSubstr("field \"free_benchmark.list\": expected a list of strings"));
  EXPECT_THAT(settings_error({{"list", {1}}}), HasSubstr("element 1 is an integer"));
  EXPECT_THAT(settings_error("x"), HasSubstr("field \"free_benchmark\": expected an object"));
}

}  // namespace
}  // namespace tprobe
