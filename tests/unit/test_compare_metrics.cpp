// Tests for core/compare/compare_metrics.h: msprobe's real-data metrics against an independent
// float64 computation, every special case of docs/msprobe-compat.md §4.6, the accuracy rule, the
// statistics (§4.7) and md5 (§4.8) columns, and the Python text helpers of compare_cell.h.
#include "compare/compare_metrics.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace tprobe {
namespace {

const double inf = std::numeric_limits<double>::infinity();
const double nan = std::numeric_limits<double>::quiet_NaN();

// Owns the bytes of a test tensor.
struct tensor {
  std::vector<std::byte> bytes;
  tensor_operand op;
};

template <typename T>
tensor make(dtype type, std::vector<int64_t> shape, const std::vector<T> &values) {
  tensor t;
  t.bytes.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  t.op.type = type;
  t.op.shape = std::move(shape);
  t.op.data = std::span<const std::byte>(t.bytes);
  return t;
}
tensor f64(const std::vector<double> &v) { return make(dtype::float64, {static_cast<int64_t>(v.size())}, v); }
tensor f32(const std::vector<float> &v) { return make(dtype::float32, {static_cast<int64_t>(v.size())}, v); }
tensor f16(const std::vector<float> &v) {
  std::vector<uint16_t> h;
  for (const float x : v) h.push_back(float_to_float16(x));
  return make(dtype::float16, {static_cast<int64_t>(v.size())}, h);
}

double num(const cell &c) {
  EXPECT_TRUE(c.is_number()) << cell_str(c);
  return c.number();
}

// Independent float64 reference of msprobe's formulas for float64 inputs (no special cases).
struct reference {
  double cos, euc, max_abs, max_rel, r1, r5;
};
reference reference_of(const std::vector<double> &n, const std::vector<double> &b) {
  long double dot = 0, nn = 0, bb = 0, dd = 0;
  double max_abs = 0, max_rel = 0;
  size_t c1 = 0, c5 = 0;
  for (size_t i = 0; i < n.size(); ++i) {
    dot += static_cast<long double>(n[i]) * b[i];
    nn += static_cast<long double>(n[i]) * n[i];
    bb += static_cast<long double>(b[i]) * b[i];
    dd += static_cast<long double>(n[i] - b[i]) * (n[i] - b[i]);
    max_abs = std::max(max_abs, std::fabs(n[i] - b[i]));
    const double e = std::numeric_limits<double>::epsilon();
    const double np = b[i] == 0 ? n[i] + e : n[i], bp = b[i] == 0 ? e : b[i];
    const double re = std::fabs((np - bp) / bp);
    max_rel = std::max(max_rel, re);
    c1 += re < 0.001, c5 += re < 0.005;
  }
  const double cos = static_cast<double>(dot / (std::sqrt(nn) * std::sqrt(bb)));
  return {cos, static_cast<double>(std::sqrt(dd)), max_abs, max_rel, double(c1) / n.size(), double(c5) / n.size()};
}

TEST(CompareMetrics, MatchesAnIndependentFloat64Computation) {
  std::mt19937_64 rng(7);
  std::normal_distribution<double> g;
  for (const size_t size : {2u, 17u, 1000u, 4099u}) {
    std::vector<double> n(size), b(size);
    for (size_t i = 0; i < size; ++i) {
      n[i] = g(rng);
      b[i] = i % 5 == 0 ? n[i] : n[i] + 1e-3 * g(rng);
    }
    const auto r = compare_real_data(f64(n).op, f64(b).op);
    const reference ref = reference_of(n, b);
    const double cos = std::round(ref.cos * 1e12) / 1e12;
    EXPECT_NEAR(num(r.metrics[METRIC_COSINE]), cos > 0.9999 ? std::round(cos * 1e6) / 1e6 : cos, 1e-12) << size;
    EXPECT_NEAR(num(r.metrics[METRIC_EUC_DIST]), ref.euc, 1e-13 * ref.euc) << size;
    EXPECT_NEAR(num(r.metrics[METRIC_MAX_ABS_ERR]), ref.max_abs, 1e-12);
    EXPECT_NEAR(num(r.metrics[METRIC_MAX_RELATIVE_ERR]), ref.max_rel, 1e-12 * std::max(1.0, ref.max_rel));
    EXPECT_NEAR(num(r.metrics[METRIC_ONE_THOUSANDTH]), ref.r1, 1e-12);
    EXPECT_NEAR(num(r.metrics[METRIC_FIVE_THOUSANDTHS]), ref.r5, 1e-12);
    EXPECT_EQ(r.err_message, "");
  }
}

TEST(CompareMetrics, FloatThirtyTwoMatchesTheReferenceOnItsValues) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> g;
  std::vector<float> n(3001), b(3001);
  std::vector<double> nd, bd;
  for (size_t i = 0; i < n.size(); ++i) {
    n[i] = g(rng), b[i] = n[i] * (1 + 1e-3f * g(rng));
    nd.push_back(n[i]), bd.push_back(b[i]);
  }
  const auto r = compare_real_data(f32(n).op, f32(b).op);
  const reference ref = reference_of(nd, bd);
  EXPECT_NEAR(num(r.metrics[METRIC_EUC_DIST]), ref.euc, 1e-12 * ref.euc);
  EXPECT_NEAR(num(r.metrics[METRIC_MAX_ABS_ERR]), ref.max_abs, 1e-12);
  // The relative error is computed in float32, as NumPy does for float32 arrays.
  EXPECT_NEAR(num(r.metrics[METRIC_MAX_RELATIVE_ERR]), ref.max_rel, 1e-6 * ref.max_rel);
  EXPECT_NEAR(num(r.metrics[METRIC_ONE_THOUSANDTH]), ref.r1, 2.0 / n.size());
}

TEST(CompareMetrics, WorkedExamplesOfTheReference) {
  auto r = compare_real_data(f64({1, 2, 3, 4}).op, f64({1, 2, 3, 4.1}).op);
  EXPECT_EQ(num(r.metrics[METRIC_COSINE]), 0.999924);
  EXPECT_NEAR(num(r.metrics[METRIC_EUC_DIST]), 0.1, 1e-15);
  EXPECT_EQ(num(r.metrics[METRIC_MAX_ABS_ERR]), 0.1);
  EXPECT_EQ(num(r.metrics[METRIC_MAX_RELATIVE_ERR]), 0.024390243902);
  EXPECT_EQ(num(r.metrics[METRIC_ONE_THOUSANDTH]), 0.75);
  EXPECT_EQ(num(r.metrics[METRIC_FIVE_THOUSANDTHS]), 0.75);
  EXPECT_EQ(r.accuracy, "Yes");

  r = compare_real_data(f64({1, 2}).op, f64({1, 1}).op);
  EXPECT_EQ(num(r.metrics[METRIC_COSINE]), 0.948683298051);
  EXPECT_EQ(num(r.metrics[METRIC_MAX_ABS_ERR]), 1.0);
  EXPECT_EQ(num(r.metrics[METRIC_MAX_RELATIVE_ERR]), 1.0);
  EXPECT_EQ(num(r.metrics[METRIC_ONE_THOUSANDTH]), 0.5);
  EXPECT_EQ(num(r.metrics[METRIC_FIVE_THOUSANDTHS]), 0.5);
  EXPECT_EQ(r.accuracy, "No");

  // compare_ops_apply([1,1],[1,1]) = [1.0, 0.0, 0.0, 0.0, 1.0, 1.0]
  r = compare_real_data(f32({1, 1}).op, f32({1, 1}).op);
  const std::array<double, 6> expected{1.0, 0.0, 0.0, 0.0, 1.0, 1.0};
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(num(r.metrics[i]), expected[i]) << i;
  EXPECT_EQ(r.err_message, "");
  EXPECT_EQ(r.accuracy, "Yes");
}

TEST(CompareMetrics, ZeroDimensionalTensor) {
  const auto n = make(dtype::float32, {}, std::vector<float>{2.0f});
  const auto b = make(dtype::float32, {}, std::vector<float>{1.5f});
  const auto r = compare_real_data(n.op, b.op);
  for (const size_t i : {METRIC_COSINE, METRIC_EUC_DIST, METRIC_ONE_THOUSANDTH, METRIC_FIVE_THOUSANDTHS})
    EXPECT_EQ(r.metrics[i], cell::of_text("unsupported")) << i;
  EXPECT_EQ(num(r.metrics[METRIC_MAX_ABS_ERR]), 0.5);
  EXPECT_EQ(num(r.metrics[METRIC_MAX_RELATIVE_ERR]), format_value(0.5f / 1.5f));  // float32 arithmetic
  EXPECT_EQ(r.err_message,
            "This is type of 0-d tensor, can not calculate 'Cosine', 'EucDist', 'One Thousandth Err Ratio' and "
            "'Five Thousandths Err Ratio'. ");
  EXPECT_EQ(r.accuracy, "None");
  // Integers subtract in their own type; 423 vs 424 (msprobe's int64 scalar fixture).
  const auto i1 = make(dtype::int64, {}, std::vector<int64_t>{423});
  const auto i2 = make(dtype::int64, {}, std::vector<int64_t>{424});
  const auto ri = compare_real_data(i1.op, i2.op);
  EXPECT_EQ(num(ri.metrics[METRIC_MAX_ABS_ERR]), 1.0);
  EXPECT_EQ(num(ri.metrics[METRIC_MAX_RELATIVE_ERR]), format_value(1.0 / 424));
}

TEST(CompareMetrics, LengthOneTensor) {
  const auto r = compare_real_data(f32({3}).op, f32({2}).op);
  EXPECT_EQ(r.metrics[METRIC_COSINE], cell::of_text("unsupported"));
  EXPECT_EQ(r.err_message, "This is a 1-d tensor of length 1.");
  EXPECT_EQ(num(r.metrics[METRIC_EUC_DIST]), 1.0);
  EXPECT_EQ(num(r.metrics[METRIC_MAX_ABS_ERR]), 1.0);
  EXPECT_EQ(num(r.metrics[METRIC_MAX_RELATIVE_ERR]), 0.5);
  EXPECT_EQ(num(r.metrics[METRIC_ONE_THOUSANDTH]), 0.0);
  EXPECT_EQ(r.accuracy, "None");
}

TEST(CompareMetrics, AllZeroSides) {
  auto r = compare_real_data(f32({0, 0}).op, f32({0, 0}).op);
  EXPECT_EQ(num(r.metrics[METRIC_COSINE]), 1.0);
  EXPECT_EQ(num(r.metrics[METRIC_MAX_RELATIVE_ERR]), 0.0);
  EXPECT_EQ(r.accuracy, "Yes");

  r = compare_real_data(f64({1, 2}).op, f64({0, 0}).op);
  EXPECT_EQ(r.metrics[METRIC_COSINE], cell::of_text("Nan"));
  EXPECT_EQ(num(r.metrics[METRIC_MAX_ABS_ERR]), 2.0);
  EXPECT_EQ(r.err_message, "Cannot compare by Cosine Similarity, All the data is Zero in Bench dump data.");
  const double e = std::numeric_limits<double>::epsilon();  // eps added to both sides where bench is 0
  EXPECT_EQ(num(r.metrics[METRIC_MAX_RELATIVE_ERR]), format_value(((2.0 + e) - e) / e));
  EXPECT_EQ(r.accuracy, "No");  // float('Nan') is nan, MaxAbsErr 2 > 1

  r = compare_real_data(f64({0, 0}).op, f64({1e-4, 0}).op);
  EXPECT_EQ(r.metrics[METRIC_COSINE], cell::of_text("Nan"));
  EXPECT_EQ(r.err_message, "Cannot compare by Cosine Similarity, All the data is Zero in npu dump data.");
  EXPECT_EQ(r.accuracy, "Yes");  // nan comparisons are false and MaxAbsErr is small, as in msprobe
}

TEST(CompareMetrics, InfAndNanAtTheSamePositionsCountAsZero) {
  const auto r = compare_real_data(f32({1, 2, NAN, INFINITY, 4}).op, f32({1, 2, NAN, -INFINITY, 4.5}).op);
  const auto z = compare_real_data(f32({1, 2, 0, 0, 4}).op, f32({1, 2, 0, 0, 4.5}).op);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(r.metrics[i], z.metrics[i]) << i;
  EXPECT_EQ(r.err_message, "");
}

TEST(CompareMetrics, InfOrNanAtDifferentPositions) {
  for (const auto &[n, b] : std::vector<std::pair<std::vector<float>, std::vector<float>>>{
           {{1, 2, INFINITY, 4}, {1, 2, 3, 4}}, {{1, NAN}, {NAN, 1}}, {{1, INFINITY}, {1, NAN}}}) {
    const auto r = compare_real_data(f32(n).op, f32(b).op);
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(r.metrics[i], cell::of_text("N/A"));
    EXPECT_EQ(r.err_message, "The position of inf or nan in NPU and bench Tensor do not match.");
    EXPECT_EQ(r.accuracy, "No");
  }
}

TEST(CompareMetrics, ShapeDtypeAndEmpty) {
  auto r = compare_real_data(make(dtype::float32, {2, 2}, std::vector<float>{1, 2, 3, 4}).op,
                             make(dtype::float32, {4}, std::vector<float>{1, 2, 3, 4}).op);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(r.metrics[i], cell::of_text("shape unmatched"));
  EXPECT_EQ(r.err_message, "Shape of NPU and bench tensor do not match. Skipped.");
  EXPECT_EQ(r.accuracy, "Unmatched");

  r = compare_real_data(f16({1, 2, 3}).op, f32({1, 2, 3}).op);
  EXPECT_EQ(r.err_message, "Dtype of NPU and bench tensor do not match.");
  EXPECT_EQ(num(r.metrics[METRIC_COSINE]), 1.0);
  EXPECT_EQ(r.accuracy, "Yes");

  r = compare_real_data(make(dtype::float32, {0, 3}, std::vector<float>{}).op,
                        make(dtype::float32, {0, 3}, std::vector<float>{}).op);
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(r.metrics[i], cell::of_text("unsupported"));
  EXPECT_EQ(r.err_message, "This is empty data, can not compare.");
  EXPECT_EQ(r.accuracy, "None");
}

TEST(CompareMetrics, Float16RelativeErrorIsComputedInFloat16) {
  // eps underflows in float16: where both sides are 0 the relative error is 0/0 = nan, so msprobe
  // reports MaxRelativeErr 'Nan' for such float16 tensors.
  const auto r = compare_real_data(f16({0, 1, 2}).op, f16({0, 1, 2}).op);
  EXPECT_EQ(r.metrics[METRIC_MAX_RELATIVE_ERR], cell::of_text("Nan"));
  EXPECT_EQ(r.err_message, "Cannot compare by MaxRelativeError, the data contains nan/inf/-inf in dump data.");
  EXPECT_EQ(num(r.metrics[METRIC_ONE_THOUSANDTH]), format_value(2.0 / 3));
  // 0.001 as float16 is 0.0010004: a relative error of 0.001 exactly counts as below it.
  const auto s = compare_real_data(f16({1.0009765625f, 1}).op, f16({1, 1}).op);
  EXPECT_EQ(num(s.metrics[METRIC_MAX_RELATIVE_ERR]), 0.0009765625);
  EXPECT_EQ(num(s.metrics[METRIC_ONE_THOUSANDTH]), 1.0);
}

TEST(CompareMetrics, RowsWithoutTensors) {
  const auto check = [](real_data_missing why, const std::string &message) {
    const auto r = real_data_unavailable(why, "x/dump_tensor_data/a.npy");
    for (size_t i = 0; i < 6; ++i) EXPECT_EQ(r.metrics[i], cell::of_text("unsupported"));
    EXPECT_EQ(r.err_message, message);
    EXPECT_EQ(r.accuracy, "None");
  };
  check(real_data_missing::npu_no_file, "NPU does not have data file.");
  check(real_data_missing::bench_no_file, "Bench does not have data file.");
  check(real_data_missing::bench_unmatched, "Bench api/module unmatched.");
  check(real_data_missing::read_failed, "Dump file: x/dump_tensor_data/a.npy not found or read failed.");
  check(real_data_missing::unreadable, "Data is unreadable.");
  // Only a file that could not be read makes an error row: the others are rows without data by design.
  EXPECT_FALSE(real_data_unavailable(real_data_missing::npu_no_file).error);
  EXPECT_FALSE(real_data_unavailable(real_data_missing::bench_unmatched).error);
  EXPECT_TRUE(real_data_unavailable(real_data_missing::read_failed, "a.npy").error);
  EXPECT_TRUE(real_data_unavailable(real_data_missing::unreadable).error);
}

TEST(CompareMetrics, ReadErrorNamesSideFileAndReasonOnOneLine) {
  tensor_read_error e{"bench", "/d/x.npy", "not a valid .npy file: truncated data:\nthe header promises 16 bytes."};
  real_data_result r = real_data_read_error(e);
  EXPECT_TRUE(r.error);
  EXPECT_EQ(r.accuracy, "None");
  for (size_t i = 0; i < 6; ++i) EXPECT_EQ(r.metrics[i], cell::of_text("unsupported"));
  EXPECT_EQ(r.err_message,
            "Dump file: /d/x.npy not found or read failed. Cannot read bench tensor: not a valid .npy file: truncated "
            "data: the header promises 16 bytes.");
  e = {"NPU", "/d/y.npy", "dtype '>f4' cannot be compared", true};
  r = real_data_read_error(e);
  EXPECT_TRUE(r.error);
  EXPECT_EQ(r.err_message, "Data is unreadable. Cannot read NPU tensor /d/y.npy: dtype '>f4' cannot be compared.");
}

TEST(CompareMetrics, AccuracyRule) {
  // test_cmp_multiprocessing_compute.py::test_check_accuracy
  EXPECT_EQ(check_accuracy(cell::of_real(0.95), cell::of_real(0.002)), "No");
  EXPECT_EQ(check_accuracy(cell::of_real(0.85), cell::of_real(2)), "No");
  EXPECT_EQ(check_accuracy(cell::of_real(0.95), cell::of_real(0.001)), "Yes");
  EXPECT_EQ(check_accuracy(cell::of_text("shape unmatched"), cell::of_text("shape unmatched")), "Unmatched");
  EXPECT_EQ(check_accuracy(cell::of_text("None"), cell::of_real(1)), "None");
  EXPECT_EQ(check_accuracy(cell::of_text("N/A"), cell::of_real(1)), "No");
  EXPECT_EQ(check_accuracy(cell::of_text(""), cell::of_real(1)), "None");
  EXPECT_EQ(check_accuracy(cell::of_real(0.995), cell::of_real(1.5)), "No");
  EXPECT_EQ(check_accuracy(cell::of_real(0.89), cell::of_real(0.0001)), "No");
}

std::array<cell, 4> stats(std::initializer_list<cell> v) {
  std::array<cell, 4> a;
  std::copy(v.begin(), v.end(), a.begin());
  return a;
}

TEST(CompareSummary, ReferenceCases) {
  // test_acc_compare.py::test_compare_statistics: Max=2, Min=0, Mean=1, Norm=1 on both sides.
  auto s = stats({cell::of_int(2), cell::of_int(0), cell::of_int(1), cell::of_int(1)});
  auto r = compare_summary(s, s);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(num(r.diff[i]), 0.0);
  EXPECT_EQ(r.relative_err[0], cell::of_text("0.0%"));
  EXPECT_EQ(r.relative_err[1], cell::of_text("N/A"));
  EXPECT_EQ(r.relative_err[2], cell::of_text("0.0%"));
  EXPECT_FALSE(r.warning);

  // npu [1,1,1,1] vs bench [2,2,2,2]: diff -1, '50.0%', no Warning (0.5 is not > 0.5).
  r = compare_summary(stats({cell::of_real(1), cell::of_real(1), cell::of_real(1), cell::of_real(1)}),
                      stats({cell::of_real(2), cell::of_real(2), cell::of_real(2), cell::of_real(2)}));
  EXPECT_EQ(num(r.diff[0]), -1.0);
  EXPECT_EQ(r.relative_err[3], cell::of_text("50.0%"));
  EXPECT_FALSE(r.warning);

  // aten_result fixture: 139.625 vs 3.061628818511963.
  r = compare_summary(stats({cell::of_real(139.625), cell::of_real(0), cell::of_real(0), cell::of_real(0)}),
                      stats({cell::of_real(3.061628818511963), cell::of_real(0), cell::of_real(0), cell::of_real(0)}));
  EXPECT_EQ(num(r.diff[0]), 136.56337118148804);
  EXPECT_EQ(r.relative_err[0], cell::of_text("4460.480981749501%"));
  EXPECT_TRUE(r.warning);
}

TEST(CompareSummary, WarningUsesTheSignedMaximum) {
  const auto one = [](double n, double b) {
    return compare_summary(stats({cell::of_real(n), cell::of_text("None"), cell::of_text("None"), cell::of_text("None")}),
                           stats({cell::of_real(b), cell::of_text("None"), cell::of_text("None"), cell::of_text("None")}));
  };
  EXPECT_FALSE(one(1.8, 1.0).warning);
  EXPECT_EQ(one(1.8, 1.0).relative_err[0], cell::of_text("80.0%"));
  EXPECT_TRUE(one(-1.0, -2.0).warning);
  EXPECT_TRUE(one(3.0, 1.0).warning);
  EXPECT_EQ(one(3.0, 1.0).relative_err[1], cell::of_text("N/A"));  // "None" is not a number
}

TEST(CompareSummary, NanBoolAndText) {
  const auto r = compare_summary(stats({cell::of_text("Nan"), cell::of_text("True"), cell::of_text("1.5"), cell::of_real(inf)}),
                                 stats({cell::of_real(1), cell::of_text("True"), cell::of_real(1), cell::of_real(1)}));
  EXPECT_EQ(r.diff[0], cell::of_text("Nan"));
  EXPECT_EQ(r.relative_err[0], cell::of_text("Nan"));
  EXPECT_EQ(r.diff[1], cell::of_text("N/A"));  // bools take no part
  EXPECT_EQ(num(r.diff[2]), 0.5);              // text that is a number does (pandas.to_numeric)
  EXPECT_EQ(num(r.diff[3]), inf);
  EXPECT_EQ(r.relative_err[3], cell::of_text("inf%"));
  EXPECT_FALSE(r.warning);  // |inf| / (inf + 1e-10) = nan
}

TEST(CompareSummary, StatisticCells) {
  EXPECT_EQ(statistic_cell(nlohmann::ordered_json(nan)), cell::of_text("Nan"));
  EXPECT_EQ(statistic_cell(nlohmann::ordered_json(false)), cell::of_text("False"));
  EXPECT_EQ(statistic_cell(nlohmann::ordered_json(nullptr)), cell::of_text("None"));
  EXPECT_EQ(statistic_cell(nlohmann::ordered_json(423)), cell::of_int(423));
  EXPECT_EQ(statistic_cell(stat_value::of_real(nan)), cell::of_text("Nan"));
  EXPECT_EQ(statistic_cell(stat_value::of_bool(true)), cell::of_text("True"));
}

TEST(CompareMd5, Result) {
  EXPECT_EQ(compare_md5("00000000", "00000000"), "pass");
  EXPECT_EQ(compare_md5("f4dbdf21", "00000000"), "Different");
}

TEST(CompareCell, PythonTextForms) {
  EXPECT_EQ(format_value(0.9999242641451), 0.999924264145);
  EXPECT_EQ(py_round(0.999924264145, 6), 0.999924);
  EXPECT_EQ(format_value(inf), inf);
  EXPECT_EQ(cell_str(cell::of_real(1.0)), "1.0");
  EXPECT_EQ(cell_str(cell::of_real(1e-05)), "1e-05");
  EXPECT_EQ(cell_str(cell::of_int(-3)), "-3");
  EXPECT_EQ(cell_str(cell::of_bool(true)), "True");
  EXPECT_EQ(py_float_parse(" Nan ").has_value(), true);
  EXPECT_TRUE(std::isnan(*py_float_parse("Nan")));
  EXPECT_EQ(*py_float_parse("-Infinity"), -inf);
  EXPECT_EQ(*py_float_parse("1e3"), 1000.0);
  EXPECT_FALSE(py_float_parse("unsupported"));
  EXPECT_FALSE(py_float_parse("0x10"));
  EXPECT_EQ(py_str_repr("a'b"), "\"a'b\"");
  EXPECT_EQ(py_str_repr("File x, line 1, in f, \n y = 1"), "'File x, line 1, in f, \\n y = 1'");
  EXPECT_EQ(py_str(nlohmann::ordered_json::parse(R"([1, "a", null, true, 2.0, {"k": [0]}])")),
            "[1, 'a', None, True, 2.0, {'k': [0]}]");
}

}  // namespace
}  // namespace tprobe
