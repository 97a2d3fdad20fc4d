// The pre-check's stage-1 judgement (core/precheck/precheck_standard.h, precheck_metrics.h):
// docs/msprobe-compat.md's V-1 in both dialects, and the expectations of msprobe's own unit tests
// (§7.10 "Unit-test expectations").
#include <cmath>
#include <limits>

#include <gtest/gtest.h>

#include "errors.h"
#include "precheck_files.h"
#include "precheck_metrics.h"
#include "precheck_standard.h"
#include "precheck_vectors.h"

namespace tprobe::precheck {
namespace {

using vectors::tv;

std::vector<std::vector<std::string>> detail_rows_of(const std::vector<api_judgement> &js, dialect d) {
  std::vector<std::vector<std::string>> rows;
  for (const auto &j : js)
    for (const auto &r : j.details) rows.push_back(detail_cells(r, d));
  return rows;
}

std::vector<std::vector<std::string>> result_rows_of(const std::vector<api_judgement> &js, dialect d) {
  std::vector<std::vector<std::string>> rows;
  for (const auto &j : js) rows.push_back(result_cells(j.result, d));
  return rows;
}

std::vector<api_judgement> judge_all(const std::vector<api_replay> &replays, dialect d) {
  std::vector<api_judgement> js;
  for (const auto &r : replays) js.push_back(judge_api(r, d));
  return js;
}

TEST(PrecheckStandard, V1HeadEveryCellOfEveryRow) {
  const auto js = judge_all(vectors::v1_replays(), dialect::msprobe_head);
  vectors::expect_table(vectors::v1_head_details, detail_header(), detail_rows_of(js, dialect::msprobe_head));
  vectors::expect_table(vectors::v1_head_result, result_header(), result_rows_of(js, dialect::msprobe_head));
  // The result rows are exact, 3 cells each: no message unless SKIP.
  for (const auto &j : js) EXPECT_EQ(result_cells(j.result, dialect::msprobe_head).size(), 3u);
}

TEST(PrecheckStandard, V1Msprobe833UlpAbsoluteAndSpelling) {
  const auto js = judge_all(vectors::v1_replays(), dialect::msprobe_8_3_3);
  vectors::expect_table(vectors::v1_833_details, detail_header(), detail_rows_of(js, dialect::msprobe_8_3_3));
  vectors::expect_table(vectors::v1_833_result, result_header(), result_rows_of(js, dialect::msprobe_8_3_3));
  // The document's notes on V-1, spelled out.
  const detail_row &linear = js[0].details[0];
  EXPECT_DOUBLE_EQ(*linear.ulp_max, 1.0);
  EXPECT_NEAR(*linear.ulp_mean, 0.33779907, 1e-8);
  EXPECT_EQ(*linear.ulp_over_threshold, 0.0);
  const detail_row &add = js[2].details[0];
  EXPECT_EQ(*add.inf_nan_error_ratio, 0.0);
  EXPECT_EQ(*add.rel_err_ratio, 0.25);
  EXPECT_EQ(*add.abs_err_ratio, 0.0);
  EXPECT_EQ(status_text(add.verdict, dialect::msprobe_8_3_3), "Warning");
  EXPECT_EQ(js[3].details[0].message, "Compare algorithm is not supported for int64 data. Only judged by Error Rate.\n");
}

TEST(PrecheckStandard, V2GpuRunAsMsprobe833JudgesIt) {
  const auto js = judge_all(vectors::v1_replays(true), dialect::msprobe_8_3_3);
  vectors::expect_table(vectors::v1_gpu_833_details, detail_header(), detail_rows_of(js, dialect::msprobe_8_3_3));
}

// test_compare.py::test_compare_core_wrapper: identical randn(100,100) float32 outputs.
TEST(PrecheckStandard, CompareCoreWrapperIdenticalOutputs) {
  std::vector<double> v(100 * 100);
  uint64_t s = 42;
  for (double &x : v) {  // any values will do: the row must not depend on them
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    x = static_cast<double>(static_cast<float>((static_cast<int64_t>(s >> 33) % 20001 - 10000) / 3000.0));
  }
  const tensor_values t{"torch.float32", {100, 100}, v};
  const detail_row r = judge_output("x.forward.output.0", "add", t, t, dialect::msprobe_head);
  const std::vector<std::string> want = {"x.forward.output.0", "torch.float32", "torch.float32", "(100, 100)",
                                         format_float_cell(1.0), format_float_cell(0.0), " ", " ", " ", " ",
                                         format_float_cell(0.0), format_float_cell(0.0), format_float_cell(0.0),
                                         format_float_cell(0.0), format_float_cell(0.0), " ", " ", " ", " ", " ", " ",
                                         "pass",
                                         "\nMax abs error is less than 0.001, consider as pass, skip other check and "
                                         "set to SPACE.\n"};
  EXPECT_EQ(detail_cells(r, dialect::msprobe_head), want);
}

// test_compare_float_tensor_*: bench and device of one dtype, API __matmul__.
TEST(PrecheckStandard, Fp16AndFp32LegacyVerdicts) {
  const auto judge = [](const std::string &dtype, std::vector<double> device, dialect d) {
    return judge_output("m.forward.output.0", "__matmul__", tv(dtype, {3}, {1, 2, 3}), tv(dtype, {3}, std::move(device)), d)
        .verdict;
  };
  for (dialect d : {dialect::msprobe_head, dialect::msprobe_8_3_3}) {
    EXPECT_EQ(judge("torch.float16", {1.1, 2.1, 3.1}, d), status::error);
    EXPECT_EQ(judge("torch.float16", {1.0001, 2.0001, 3.0001}, d), status::pass);
    EXPECT_EQ(judge("torch.float16", {1.01, 2.01, 3.01}, d), status::warning);
    EXPECT_EQ(judge("torch.float32", {1.01, 2.01, 3.01}, d), status::error);
  }
  const detail_row warn = judge_output("m.forward.output.0", "__matmul__", tv("torch.float16", {3}, {1, 2, 3}),
                                       tv("torch.float16", {3}, {1.01, 2.01, 3.01}), dialect::msprobe_head);
  EXPECT_EQ(*warn.ratio_hundredth, 1.0);
  EXPECT_EQ(*warn.ratio_thousandth, 0.0);
  EXPECT_EQ(warn.message,
            "\nRelative error is greater than 0.001, consider as warning, skip other check and set to SPACE.\n");
}

TEST(PrecheckStandard, DropoutZeroFractions) {
  const auto zeros = [](size_t n, size_t z) {
    std::vector<double> v(n, 1.0);
    std::fill(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(z), 0.0);
    return tensor_values{"torch.float32", {static_cast<int64_t>(n)}, v};
  };
  EXPECT_EQ(dropout_status(zeros(120, 30), zeros(120, 30)), status::pass);
  EXPECT_EQ(dropout_status(zeros(120, 60), zeros(120, 0)), status::error);
  EXPECT_EQ(dropout_status(zeros(100, 67), zeros(100, 34)), status::error);
  EXPECT_EQ(dropout_status(zeros(99, 67), zeros(99, 0)), status::pass);  // under 100: pass

  // A dropout API writes no details row, only its status.
  api_replay r;
  r.full_name = "Functional.dropout.0";
  r.forward_bench = {zeros(120, 60)};
  r.forward_device = {zeros(120, 0)};
  const api_judgement j = judge_api(r, dialect::msprobe_head);
  EXPECT_TRUE(j.details.empty());
  EXPECT_EQ(j.result.forward, status::error);
  EXPECT_FALSE(j.result.backward.has_value());
}

// compare/test_algorithm.py: bench fp16 [1,1,9], device fp16 [5,2,1].
TEST(PrecheckMetrics, AlgorithmNumbers) {
  float_arrays a;
  a.bench = a.device = np_float::f16;
  a.device_dtype = "torch.float16";
  a.b = {1, 1, 9};
  a.d = {5, 2, 1};
  const auto abs_err = abs_err_of(a);
  EXPECT_EQ(abs_err, (std::vector<double>{4, 1, 8}));
  EXPECT_EQ(np_max(abs_err), 8.0);
  EXPECT_FALSE(np_max(abs_err) < 0.001);
  EXPECT_NEAR(rmse_of(abs_err, {0, 0, 0}, np_float::f16), 5.196, 1e-3);
  EXPECT_DOUBLE_EQ(error_balance_of(a), 1.0 / 3);
  const auto abs_bench_eps = abs_bench_with_eps_of(a);
  std::vector<double> rel(3);
  for (size_t i = 0; i < 3; ++i) rel[i] = np_round(np_float::f16, abs_err[i] / abs_bench_eps[i]);
  EXPECT_NEAR(max_rel_err_of(rel), 3.996, 1e-3);
  EXPECT_NEAR(mean_rel_err_of(rel, np_float::f16), 1.961, 1e-3);
  EXPECT_EQ(norm_value_err_ratio({1, 1, 1}, rel, 0.001), 1.0);  // none of them is small (≤ 1e-3)
  EXPECT_EQ(small_value_err_ratio_of({1, 1, 1, 0, 1}, {0, 1, 1, 1, 0}), 0.5);
  const ratio_result empty = rel_err_ratio({}, 0.01);
  EXPECT_EQ(empty.ratio, 1.0);
  EXPECT_TRUE(empty.ok);
  const ratio_result same = rel_err_ratio({0, 0, 0}, 0.001);
  EXPECT_EQ(same.ratio, 1.0);
  EXPECT_TRUE(same.ok);
}

// np.mean of a float32 array sums pairwise in float32 within blocks of 8192: its answer (from
// numpy 1.24) differs from the exact mean's float32 (0.1300000101327896) in the last bit.
TEST(PrecheckMetrics, MeanAsNumpySumsIt) {
  std::vector<double> v(20000);
  for (size_t i = 0; i < v.size(); ++i)
    v[i] = np_round(np_float::f32, static_cast<double>((i * 7919) % 1000) / 37.0 - 13.37);
  EXPECT_EQ(np_mean(v, np_float::f32), 0.12999999523162842);
  for (double &x : v) x = np_round(np_float::f16, x);
  EXPECT_EQ(np_mean(v, np_float::f16), 0.1300048828125);
}

TEST(PrecheckMetrics, CosineEdgeCases) {
  const cosine_result same = cosine_sim({1, 2, 3}, {1, 2, 3}, true);
  EXPECT_EQ(*same.value, 1.0);
  EXPECT_TRUE(same.ok);
  EXPECT_EQ(same.message, "");

  const cosine_result shape = cosine_sim({1, 2, 3}, {4, 5}, true);
  EXPECT_EQ(*shape.value, -1);
  EXPECT_FALSE(shape.ok);
  EXPECT_EQ(shape.message.rfind("Shape of device and bench outputs don't match", 0), 0u);

  const cosine_result scalar = cosine_sim({1}, {1}, true);
  EXPECT_FALSE(scalar.value.has_value());  // " "
  EXPECT_TRUE(scalar.ok);
  EXPECT_EQ(scalar.message.rfind("All the data in device dump data is scalar", 0), 0u);

  const cosine_result zeros = cosine_sim({0, 0, 0}, {0, 0, 0}, true);
  EXPECT_FALSE(zeros.value.has_value());
  EXPECT_TRUE(zeros.ok);
  EXPECT_EQ(zeros.message, "All the data in device and bench outputs are zero.");
  EXPECT_FALSE(cosine_sim({0, 1, 0}, {0, 0, 0}, true).ok);
  EXPECT_EQ(cosine_sim({0, 1, 0}, {0, 0, 0}, true).message, "All the data is zero in device dump data.");
  EXPECT_EQ(cosine_sim({0, 0, 0}, {0, 1, 0}, true).message, "All the data is zero in bench dump data.");

  const double nan = std::numeric_limits<double>::quiet_NaN();
  const cosine_result head = cosine_sim({1, 2, nan}, {1, 2, 3}, true);
  EXPECT_TRUE(std::isnan(*head.value));
  EXPECT_TRUE(head.ok);  // [HEAD] a NaN cosine passes this check
  EXPECT_EQ(head.message, "Dump data has NaN when comparing with Cosine Similarity.");
  EXPECT_FALSE(cosine_sim({1, 2, nan}, {1, 2, 3}, false).ok);  // [8.3.3] it is an error
}

TEST(PrecheckStandard, NanCosineByDialect) {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const auto b = tv("torch.float32", {3}, {1, 2, nan}), d = tv("torch.float32", {3}, {1, 2, nan});
  const detail_row head = judge_output("x.forward.output.0", "exp", b, d, dialect::msprobe_head);
  const detail_row old = judge_output("x.forward.output.0", "exp", b, d, dialect::msprobe_8_3_3);
  EXPECT_EQ(old.verdict, status::error);
  EXPECT_EQ(old.message, "Dump data has NaN when comparing with Cosine Similarity.\nCosine similarity is less than "
                         "0.99, consider as error, skip other check and set to SPACE.\n");
  EXPECT_TRUE(std::isnan(*head.cosine));
  EXPECT_EQ(detail_cells(head, dialect::msprobe_head)[4], "nan");
  // Past the cosine, the NaN max abs error is not < 0.001 and NaN relative errors fail.
  EXPECT_EQ(head.verdict, status::error);
}

TEST(PrecheckStandard, BinaryInt8ByDialect) {
  const auto b = tv("torch.int8", {5}, {1, 2, 3, 4, 5}), d = tv("torch.int8", {5}, {1, 2, 0, 4, 6});
  const detail_row head = judge_output("q.forward.output.0", "foo", b, d, dialect::msprobe_head);
  EXPECT_EQ(*head.binary_error_rate, 0.4);
  EXPECT_EQ(head.verdict, status::error);
  EXPECT_EQ(head.message, "Current int8 data, only perform binary comparison.");
  const detail_row old = judge_output("q.forward.output.0", "foo", b, d, dialect::msprobe_8_3_3);
  EXPECT_EQ(old.verdict, status::error);
  EXPECT_EQ(old.message, "Bench out dtype is int8 but npu output dtype is int8, cannot compare.");
  EXPECT_FALSE(old.binary_error_rate.has_value());
  // [HEAD] quantization APIs: max |a − b| ≤ 1 passes.
  const detail_row quant = judge_output("q.forward.output.0", "npu_dynamic_quant", b, d, dialect::msprobe_head);
  EXPECT_EQ(quant.verdict, status::error);  // |3 − 0| = 3
  const detail_row quant_ok = judge_output("q.forward.output.0", "npu_dynamic_quant", b,
                                           tv("torch.int8", {5}, {1, 2, 2, 4, 6}), dialect::msprobe_head);
  EXPECT_EQ(quant_ok.verdict, status::pass);
  EXPECT_EQ(quant_ok.message, "Quantization type: Max abs error is 1.00, less than or equal to 1, consider as pass.\n");
}

// test_ulp_compare.py: the share of [31, 33, 31] above 32 is 1/3 (float32 device, float64 bench).
TEST(PrecheckMetrics, UlpProportion) {
  float_arrays a;
  a.bench = np_float::f64;
  a.device = np_float::f32;
  a.device_dtype = "torch.float32";
  a.b = {1.0, 1.0, 1.0};
  a.d = {1.0 + 31 * 0x1p-23, 1.0 + 33 * 0x1p-23, 1.0 - 31 * 0x1p-23};  // ulps of the bench exponent
  EXPECT_EQ(ulp_err_of(a), (std::vector<double>{31, 33, 31}));
  const ulp_metrics m = ulp_metrics_of(a);
  EXPECT_DOUBLE_EQ(m.ulp_error_proportion, 1.0 / 3);
  EXPECT_EQ(m.max_ulp_error, 33);
}

TEST(PrecheckStandard, StandardRegisterBothDialects) {
  const std::string_view f32 = "torch.float32";
  // [HEAD] test_standard_register.py: every float output is benchmark.
  for (const char *api : {"mul", "matmul", "conv2d", "relu", "topk", "softmax"})
    EXPECT_EQ(standard_of(api, f32, f32, dialect::msprobe_head), "benchmark") << api;
  EXPECT_EQ(standard_of("relu", "torch.float16", f32, dialect::msprobe_head), "benchmark");
  EXPECT_EQ(standard_of("relu", "torch.int64", f32, dialect::msprobe_head), "binary_consistency");
  // [8.3.3] the yaml lists decide (docs/msprobe-compat.md §7.8.1, "checked by running").
  const dialect old = dialect::msprobe_8_3_3;
  EXPECT_EQ(standard_of("relu", "torch.float16", f32, old), "binary_consistency");
  EXPECT_EQ(standard_of("topk", f32, f32, old), "binary_consistency");
  EXPECT_EQ(standard_of("mul", f32, f32, old), "absolute_threshold");
  EXPECT_EQ(standard_of("matmul", "torch.bfloat16", f32, old), "ulp_compare");
  EXPECT_EQ(standard_of("conv2d", f32, f32, old), "thousandth_threshold");
  EXPECT_EQ(standard_of("softmax", "torch.float16", f32, old), "benchmark");
  EXPECT_EQ(standard_of("relu", "torch.int64", f32, old), "binary_consistency");
  EXPECT_EQ(standard_of("test_api", f32, f32, old), "accumulative_error_compare");
  // fp8 goes first in both.
  EXPECT_EQ(standard_of("softmax", f32, "torch.float8_e4m3fn", dialect::msprobe_head), "absolute_threshold");
  EXPECT_EQ(standard_of("softmax", "torch.float8_e5m2", f32, dialect::msprobe_head), "ulp_compare");
}

TEST(PrecheckMetrics, StandardConstants) {
  EXPECT_EQ(rtol_of("torch.float32"), std::ldexp(1.0, -20));  // test_absolute_threshold.py
  EXPECT_EQ(rtol_of("torch.float16"), std::ldexp(1.0, -10));
  EXPECT_EQ(rtol_of("torch.bfloat16"), std::ldexp(1.0, -8));
  EXPECT_EQ(small_value_bound("torch.float16", "benchmark"), std::ldexp(1.0, -10));
  EXPECT_EQ(small_value_bound("torch.float32", "benchmark"), std::ldexp(1.0, -20));
  EXPECT_EQ(small_value_bound("torch.float32", "accumulative_error_compare"), 1.0);
  EXPECT_EQ(small_value_atol("torch.float16", "absolute_threshold"), std::ldexp(1.0, -16));
  EXPECT_EQ(small_value_atol("torch.bfloat16", "absolute_threshold"), 1e-16);
  EXPECT_EQ(small_value_atol("torch.float16", "benchmark"), 1e-16);
  EXPECT_EQ(minimum_err("torch.float16"), std::ldexp(1.0, -11));
  EXPECT_EQ(minimum_err("torch.bfloat16"), std::ldexp(1.0, -8));
  EXPECT_EQ(minimum_err("torch.float32"), std::ldexp(1.0, -14));
}

TEST(PrecheckStandard, BareApiNames) {
  EXPECT_EQ(bare_api_name("Functional.linear.0"), "linear");
  EXPECT_EQ(bare_api_name("Torch.linalg.inv.0"), "linalg.inv");
  EXPECT_EQ(bare_api_name("Tensor.__add__.0"), "__add__");
  EXPECT_EQ(bare_api_name("Distributed.all.reduce.x.0"), "");
  EXPECT_EQ(dialect_parse("8.3.3"), dialect::msprobe_8_3_3);
  EXPECT_EQ(dialect_parse("head"), dialect::msprobe_head);
  EXPECT_THROW((void)dialect_parse("9.0"), usage_error);
}

TEST(PrecheckStandard, StructureRules) {
  const auto t = tv("torch.float32", {2}, {1, 2});
  // More bench outputs than device outputs: one error row.
  api_replay r;
  r.full_name = "Torch.split.0";
  r.forward_bench = {t, t};
  r.forward_device = {t};
  api_judgement j = judge_api(r, dialect::msprobe_head);
  ASSERT_EQ(j.details.size(), 1u);
  EXPECT_EQ(j.details[0].api_name, "Torch.split.0.forward.output.0");
  EXPECT_EQ(j.details[0].message, "bench and npu output structure is different.");
  EXPECT_EQ(j.result.forward, status::error);
  // More device outputs: the extra ones are not compared.
  r.forward_bench = {t};
  r.forward_device = {t, t};
  j = judge_api(r, dialect::msprobe_head);
  EXPECT_EQ(j.details.size(), 1u);
  EXPECT_EQ(j.result.forward, status::pass);
  // None bench: SKIP row, status unchanged; None against a tensor: type error.
  r.forward_bench = {std::monostate{}, t};
  r.forward_device = {std::monostate{}, t};
  j = judge_api(r, dialect::msprobe_head);
  EXPECT_EQ(j.details[0].verdict, status::skip);
  EXPECT_EQ(j.details[0].message, "Bench output is None, skip this test.");
  EXPECT_EQ(j.result.forward, status::pass);
  EXPECT_EQ(judge_output("x", "x", t, std::monostate{}, dialect::msprobe_head).message,
            "bench and npu output type is different.");
  // Builtins: ==; the type column is str(type(x)).
  const builtin_value one{"<class 'int'>", "1"}, two{"<class 'int'>", "2"};
  const detail_row same = judge_output("x", "size", one, one, dialect::msprobe_head);
  EXPECT_EQ(same.verdict, status::pass);
  EXPECT_EQ(*same.binary_error_rate, 0);
  EXPECT_EQ(same.bench_dtype, "<class 'int'>");
  EXPECT_EQ(judge_output("x", "size", one, two, dialect::msprobe_head).verdict, status::error);
  EXPECT_EQ(judge_output("x", "size", one, builtin_value{"<class 'float'>", "1.0"}, dialect::msprobe_head).message,
            "bench and npu output type is different.");
  // Shapes and dtype classes.
  const detail_row shape = judge_output("x", "x", tv("torch.float32", {2}, {1, 2}), tv("torch.float32", {1, 2}, {1, 2}),
                                        dialect::msprobe_head);
  EXPECT_EQ(shape.message, "The shape of benchtorch.Size([2]) and nputorch.Size([1, 2]) not equal.");
  EXPECT_EQ(shape.shape, "(1, 2)");
  EXPECT_EQ(judge_output("x", "x", tv("torch.float32", {2}, {1, 2}), tv("torch.int64", {2}, {1, 2}), dialect::msprobe_head)
                .message,
            "Bench out dtype is float32 but npu output dtype is int64, cannot compare.");
  EXPECT_EQ(judge_output("x", "x", tv("torch.int16", {1}, {1}), tv("torch.int16", {1}, {1}), dialect::msprobe_head).verdict,
            status::error);
  // An empty output: [HEAD] SKIP, [8.3.3] error.
  const auto empty = tv("torch.float32", {0}, {});
  EXPECT_EQ(judge_output("x", "x", empty, empty, dialect::msprobe_head).verdict, status::skip);
  EXPECT_EQ(judge_output("x", "x", empty, empty, dialect::msprobe_8_3_3).verdict, status::error);
  EXPECT_EQ(judge_output("x", "x", empty, empty, dialect::msprobe_8_3_3).message, "There is not bench calculation result.");
  // fp64 devices get no new-standard metrics.
  const detail_row f64 = judge_output("x", "exp", tv("torch.float64", {2}, {1, 2}), tv("torch.float64", {2}, {1, 2}),
                                      dialect::msprobe_head);
  EXPECT_EQ(f64.message.rfind("The data type torch.float64 is not supported for new precision standard.\n", 0), 0u);
  EXPECT_FALSE(f64.rmse.has_value());
}

TEST(PrecheckStandard, SkipRowsAndBackwardMessages) {
  api_replay r;
  r.full_name = "Distributed.all_reduce.0";
  r.skip_reason = "API Distributed.all_reduce.0 not support for acc_check. SKIP.";
  api_judgement j = judge_api(r, dialect::msprobe_head);
  ASSERT_EQ(j.details.size(), 1u);
  EXPECT_EQ(detail_cells(j.details[0], dialect::msprobe_head),
            (std::vector<std::string>{"Distributed.all_reduce.0.forward.output.0", " ", " ", " ", " ", " ", " ", " ", " ",
                                      " ", " ", " ", " ", " ", " ", " ", " ", " ", " ", " ", " ", "SKIP", *r.skip_reason}));
  EXPECT_EQ(result_cells(j.result, dialect::msprobe_head),
            (std::vector<std::string>{"Distributed.all_reduce.0", "SKIP", "SKIP", *r.skip_reason}));

  // A backward skip message replaces all backward rows with one SKIP row, and is the result's message.
  r = vectors::v1_replays()[0];
  r.backward_skip = "Multiple backward is not supported.";
  j = judge_api(r, dialect::msprobe_head);
  ASSERT_EQ(j.details.size(), 2u);
  EXPECT_EQ(j.details[1].api_name, "Functional.linear.0.backward.output.0");
  EXPECT_EQ(j.details[1].verdict, status::skip);
  EXPECT_EQ(result_cells(j.result, dialect::msprobe_head),
            (std::vector<std::string>{"Functional.linear.0", "pass", "SKIP", "Multiple backward is not supported."}));

  // A name of another shape is skipped as msprobe's run_api_offline does.
  api_replay odd;
  odd.full_name = "Weird.name";
  EXPECT_EQ(judge_api(odd, dialect::msprobe_head).result.message, "API Weird.name not support for acc_check. SKIP.");
}

// Documented deviation: an error in any output makes the direction error, whatever follows.
TEST(PrecheckStandard, ErrorOutlivesALaterWarning) {
  api_replay r;
  r.full_name = "Torch.chunk.0";
  r.forward_bench = {tv("torch.float32", {3}, {1, 2, 3}), tv("torch.float16", {3}, {1, 2, 3})};
  r.forward_device = {tv("torch.float32", {3}, {1.01, 2.01, 3.01}), tv("torch.float16", {3}, {1.01, 2.01, 3.01})};
  const api_judgement j = judge_api(r, dialect::msprobe_head);
  EXPECT_EQ(j.details[0].verdict, status::error);
  EXPECT_EQ(j.details[1].verdict, status::warning);
  EXPECT_EQ(j.result.forward, status::error);
}

}  // namespace
}  // namespace tprobe::precheck
