// msprobe's stage-2 api_precision_compare (core/precheck/api_precision_compare.h): V-2 in both
// dialects from details files our writer wrote, the standards' row verdicts, aggregation per API,
// and the offline tool's library (tools/api_precision_compare/precision_offline.h).
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "api_precision_compare.h"
#include "errors.h"
#include "precheck_files.h"
#include "precheck_vectors.h"
#include "api_precision_compare/precision_offline.h"
#include "test_support.h"

namespace tprobe::precheck {
namespace {

// The details file of V-1 (or of V-2's GPU run) in dialect `d`, written by precheck_files.
std::filesystem::path details_file(const tprobe::test::temp_dir &dir, const std::string &ts, bool gpu, dialect d) {
  precheck_files files(dir.path(), ts, d);
  for (const auto &r : vectors::v1_replays(gpu)) files.write(judge_api(r, d));
  return files.details_path();
}

std::vector<std::vector<std::string>> detail_rows(const precision_compare_result &r, bool with_backward = true) {
  std::vector<std::vector<std::string>> rows;
  for (const auto &d : r.details)
    if (with_backward || d.api_name.find(".backward.") == std::string::npos) rows.push_back(precision_detail_cells(d));
  return rows;
}

std::vector<std::vector<std::string>> result_rows(const precision_compare_result &r) {
  std::vector<std::vector<std::string>> rows;
  for (const auto &row : r.results) rows.push_back(precision_result_cells(row));
  return rows;
}

TEST(ApiPrecisionCompare, V2HeadFromOurOwnFiles) {
  tprobe::test::temp_dir dir;
  const csv_table npu = read_csv_table(details_file(dir, "20260101000000", false, dialect::msprobe_head));
  const csv_table gpu = read_csv_table(details_file(dir, "20260101000001", true, dialect::msprobe_head));
  check_precision_columns(npu, "npu");
  const precision_compare_result r = api_precision_compare(npu, gpu, dialect::msprobe_head);
  vectors::expect_table(vectors::v2_head_details, precision_detail_header(), detail_rows(r, false));
  vectors::expect_table(vectors::v2_head_result, precision_result_header(), result_rows(r));
  // The backward row the document leaves out: error, rmse ratio 2.00007.
  ASSERT_EQ(r.details.size(), 5u);
  const precision_detail &bwd = r.details[1];
  EXPECT_EQ(bwd.api_name, "Functional.linear.0.backward.output.0");
  EXPECT_NEAR(*bwd.rmse_ratio, 2.00007, 1e-5);
  EXPECT_EQ(bwd.compare_result, "error");
  // rmse ratio 6.733 = 0.003287695 / max(0, 2^-11); eb 512 > 2 is shown but not counted.
  EXPECT_NEAR(*r.details[0].rmse_ratio, 0.00328769515116 / std::ldexp(1.0, -11), 1e-9);
  EXPECT_EQ(r.details[0].eb_status, "error");
  EXPECT_TRUE(r.warnings.empty());
}

TEST(ApiPrecisionCompare, V2Msprobe833FromOurOwnFiles) {
  tprobe::test::temp_dir dir;
  const csv_table npu = read_csv_table(details_file(dir, "20260101000000", false, dialect::msprobe_8_3_3));
  const csv_table gpu = read_csv_table(details_file(dir, "20260101000001", true, dialect::msprobe_8_3_3));
  const precision_compare_result r = api_precision_compare(npu, gpu, dialect::msprobe_8_3_3);
  vectors::expect_table(vectors::v2_833_details, precision_detail_header(), detail_rows(r));
  vectors::expect_table(vectors::v2_833_result, precision_result_header(), result_rows(r));
}

TEST(ApiPrecisionCompare, Msprobe833FilesReadAsTheyAre) {
  // msprobe 8.3.3's own details files (numpy str floats) give msprobe's own answer.
  const csv_table npu = parse_csv_table(vectors::v1_833_details, "npu.csv");
  const csv_table gpu = parse_csv_table(vectors::v1_gpu_833_details, "gpu.csv");
  const precision_compare_result r = api_precision_compare(npu, gpu, dialect::msprobe_8_3_3);
  vectors::expect_table(vectors::v2_833_details, precision_detail_header(), detail_rows(r));
  vectors::expect_table(vectors::v2_833_result, precision_result_header(), result_rows(r));
}

// A one-row details table: the required columns plus Shape and Message, cells by name.
csv_table table(const std::vector<std::map<std::string, std::string>> &rows) {
  csv_table t;
  t.header = precision_required_columns();
  t.header.push_back("Shape");
  t.header.push_back("Message");
  for (const auto &cells : rows) {
    std::vector<std::string> row;
    for (const auto &h : t.header) {
      const auto it = cells.find(h);
      row.push_back(it == cells.end() ? " " : it->second);
    }
    t.rows.push_back(row);
  }
  return t;
}

std::map<std::string, std::string> benchmark_row(const std::string &name, const std::string &dtype, double rmse) {
  return {{"API Name", name}, {"DEVICE Dtype", dtype}, {"Shape", "(4,)"}, {"小值域错误占比", "0"},
          {"均方根误差", format_float_cell(rmse)}, {"相对误差最大值", "0.001"}, {"相对误差平均值", "0.001"},
          {"误差均衡性", "0"}};
}

TEST(ApiPrecisionCompare, HeadThresholdLevelsPerApi) {
  const double gpu_rmse = 1.0;
  const auto run = [&](const std::string &name, double npu_rmse) {
    const auto r = api_precision_compare(table({benchmark_row(name, "torch.float32", npu_rmse)}),
                                         table({benchmark_row(name, "torch.float32", gpu_rmse)}), dialect::msprobe_head);
    return r.details.at(0).rmse_status;
  };
  EXPECT_EQ(run("Torch.softmax.0.forward.output.0", 1.3), "pass");   // L0: 2.0
  EXPECT_EQ(run("Torch.embedding.0.forward.output.0", 1.6), "error");  // L1: 1.5
  EXPECT_EQ(run("Torch.embedding.0.forward.output.0", 1.3), "pass");
  EXPECT_EQ(run("Torch.matmul.0.forward.output.0", 1.3), "error");  // L2: 1.2
  // 8.3.3: one threshold (2) for every API; softmax is a benchmark API there too.
  const auto old = api_precision_compare(table({benchmark_row("Torch.softmax.0.forward.output.0", "torch.float32", 1.9)}),
                                         table({benchmark_row("Torch.softmax.0.forward.output.0", "torch.float32", 1.0)}),
                                         dialect::msprobe_8_3_3);
  EXPECT_EQ(old.details.at(0).rmse_status, "pass");
  EXPECT_EQ(old.details.at(0).compare_algorithm, "标杆比对法");
}

TEST(ApiPrecisionCompare, BlankCellsByDialect) {
  auto npu = benchmark_row("Torch.softmax.0.forward.output.0", "torch.float16", 0.001);
  npu["均方根误差"] = " ";
  const auto gpu = benchmark_row("Torch.softmax.0.forward.output.0", "torch.float16", 0.001);
  // [HEAD] a blank benchmark cell reads as 0.
  const auto head = api_precision_compare(table({npu}), table({gpu}), dialect::msprobe_head);
  EXPECT_EQ(*head.details.at(0).rmse_ratio, 0.0);
  EXPECT_EQ(head.details.at(0).compare_result, "pass");
  // [8.3.3] it is a SKIP row, detail and result, carrying msprobe's message.
  const auto old = api_precision_compare(table({npu}), table({gpu}), dialect::msprobe_8_3_3);
  EXPECT_EQ(old.details.at(0).compare_result, "SKIP");
  EXPECT_EQ(old.details.at(0).compare_message, "ERROR: Input data is an empty string");
  ASSERT_EQ(old.results.size(), 1u);
  EXPECT_EQ(precision_result_cells(old.results[0]),
            (std::vector<std::string>{"Torch.softmax.0.forward.output.0", "SKIP", "SKIP",
                                      "ERROR: Input data is an empty string"}));
}

TEST(ApiPrecisionCompare, BinaryThousandthAbsoluteRules) {
  // check_error_rate('0') → pass, ('0.1') → error.
  const auto binary = [](const std::string &rate) {
    const auto row = std::map<std::string, std::string>{
        {"API Name", "Torch.argmax.0.forward.output.0"}, {"DEVICE Dtype", "torch.int64"}, {"二进制一致错误率", rate}};
    return api_precision_compare(table({row}), table({row}), dialect::msprobe_head).details.at(0);
  };
  EXPECT_EQ(binary("0").compare_result, "pass");
  EXPECT_EQ(binary("0.1").compare_result, "error");
  EXPECT_EQ(binary("0.1").compare_message, "ERROR: 二进制一致错误率超过阈值\n");
  EXPECT_EQ(binary("0.1").compare_algorithm, "二进制一致法");
  // [8.3.3] conv2d: 双千指标 ≥ 0.999.
  const auto conv = [](const std::string &v) {
    const auto row = std::map<std::string, std::string>{
        {"API Name", "Functional.conv2d.0.forward.output.0"}, {"DEVICE Dtype", "torch.float32"}, {"双千指标", v}};
    return api_precision_compare(table({row}), table({row}), dialect::msprobe_8_3_3).details.at(0);
  };
  EXPECT_EQ(conv("0.999").compare_result, "pass");
  EXPECT_EQ(conv("0.998").compare_message, "ERROR: 双千指标不达标\n");
  // [8.3.3] absolute threshold: all three NPU ratios 0; messages without newlines.
  const auto row = std::map<std::string, std::string>{{"API Name", "Torch.mul.0.forward.output.0"},
                                                      {"DEVICE Dtype", "torch.float16"},
                                                      {"inf/nan错误率", "0.5"},
                                                      {"相对误差错误率", "0"},
                                                      {"绝对误差错误率", "0.1"}};
  const precision_detail abs = api_precision_compare(table({row}), table({row}), dialect::msprobe_8_3_3).details.at(0);
  EXPECT_EQ(abs.compare_result, "error");
  EXPECT_EQ(abs.compare_message, "ERROR: inf/nan错误率超过阈值ERROR: 绝对误差错误率超过阈值");
  EXPECT_EQ(abs.rel_err_ratio_status, "pass");
}

TEST(ApiPrecisionCompare, UlpRulesAndInfNan) {
  const auto ulp = [](const std::string &dtype, const std::string &mean, const std::string &npu_prop,
                      const std::string &gpu_prop) {
    const std::map<std::string, std::string> n{{"API Name", "Torch.mm.0.forward.output.0"}, {"DEVICE Dtype", dtype},
                                               {"ULP误差平均值", mean}, {"ULP误差大于阈值占比", npu_prop}};
    auto g = n;
    g["ULP误差大于阈值占比"] = gpu_prop;
    g["ULP误差平均值"] = "0.1";
    return api_precision_compare(table({n}), table({g}), dialect::msprobe_8_3_3).details.at(0);
  };
  EXPECT_EQ(ulp("torch.float32", "10", "0.9", "0.9").compare_result, "pass");   // mean < 64
  EXPECT_EQ(ulp("torch.float32", "100", "0.01", "0.9").compare_result, "pass");  // proportion < 0.05
  EXPECT_EQ(ulp("torch.float32", "100", "0.5", "0.6").compare_result, "pass");   // ratio < 1
  const precision_detail bad = ulp("torch.float32", "100", "0.5", "0.4");
  EXPECT_EQ(bad.compare_result, "error");
  EXPECT_EQ(bad.ulp_err_status, "error");
  EXPECT_EQ(bad.compare_message, "ERROR: ULP误差不满足标准\n");
  EXPECT_EQ(ulp("torch.float16", "0.1", "0.0005", "0").compare_result, "pass");  // proportion < 0.001
  EXPECT_EQ(ulp("torch.float16", "0.1", "0.002", "0.001").compare_result, "error");
  // An inconsistent inf/nan: error, the ULP status cell left blank as msprobe leaves it.
  const precision_detail inf = ulp("torch.float16", "inf", "0.002", "0.001");
  EXPECT_EQ(inf.compare_result, "error");
  EXPECT_EQ(inf.ulp_err_status, "");
  EXPECT_EQ(precision_detail_cells(inf)[22], " ");
  EXPECT_EQ(inf.compare_message, "ULP误差平均值inf或nan不一致\nERROR: ULP误差不满足标准\n");
}

TEST(ApiPrecisionCompare, AggregationPerApi) {
  const auto fwd_ok = benchmark_row("Torch.topk.0.forward.output.0", "torch.float16", 0.001);
  const auto fwd_bad = benchmark_row("Torch.topk.0.forward.output.1", "torch.float16", 1.0);
  const auto gpu_ok = benchmark_row("Torch.topk.0.forward.output.1", "torch.float16", 0.001);
  auto skip = benchmark_row("Torch.empty.0.forward.output.0", "torch.float32", 0);
  skip["Shape"] = "(0,)";
  skip["Message"] = "There is not bench calculation result.";
  const auto f64 = benchmark_row("Torch.exp.0.forward.output.0", "torch.float64", 0);
  auto lonely = benchmark_row("Torch.nowhere.0.forward.output.0", "torch.float32", 0);
  const csv_table npu = table({fwd_ok, fwd_bad, skip, f64, lonely});
  const csv_table gpu = table({fwd_ok, gpu_ok, skip, f64});
  const precision_compare_result r = api_precision_compare(npu, gpu, dialect::msprobe_head);
  ASSERT_EQ(r.results.size(), 3u);
  // get_api_checker_result([pass, error]) → error; topk's forward error gets msprobe's hint.
  EXPECT_EQ(r.results[0].api_name, "Torch.topk.0");
  EXPECT_EQ(r.results[0].forward, "error");
  EXPECT_EQ(r.results[0].backward, " ");
  EXPECT_NE(r.results[0].message.find("topk的入参sorted=False时不生效"), std::string::npos);
  // All SKIP → SKIP, with the forward row's message.
  EXPECT_EQ(precision_result_cells(r.results[1]),
            (std::vector<std::string>{"Torch.empty.0", "SKIP", " ", "There is not bench calculation result."}));
  // A float64 API is not judged.
  EXPECT_EQ(precision_result_cells(r.results[2]),
            (std::vector<std::string>{"Torch.exp.0", "SKIP", "SKIP", "This data type does not support benchmark compare."}));
  // No GPU row: a warning, no output row.
  ASSERT_EQ(r.warnings.size(), 1u);
  EXPECT_EQ(r.warnings[0], "This API : Torch.nowhere.0.forward.output.0 does not exist in the GPU data.");
  EXPECT_EQ(r.details.size(), 4u);
}

TEST(ApiPrecisionCompare, BadInputs) {
  csv_table t = table({benchmark_row("Torch.exp.0.forward.output.0", "torch.float32", 0)});
  csv_table no_rmse = t;
  no_rmse.header[3] = "RMSE";
  try {
    check_precision_columns(no_rmse, "npu.csv");
    FAIL() << "no throw";
  } catch (const usage_error &e) {
    EXPECT_EQ(std::string(e.what()), "npu.csv: missing column 均方根误差 (not an accuracy_checking_details CSV?)");
  }
  csv_table twice = t;
  twice.rows.push_back(twice.rows[0]);
  EXPECT_THROW((void)api_precision_compare(t, twice, dialect::msprobe_head), usage_error);
  // A row name of another shape: SKIP rows, with msprobe's message.
  const precision_compare_result r =
      api_precision_compare(table({benchmark_row("bad.name", "torch.float32", 0)}), t, dialect::msprobe_head);
  EXPECT_EQ(precision_result_cells(r.results.at(0)),
            (std::vector<std::string>{"bad.name", "SKIP", "SKIP", "The API name bad.name is invalid."}));
}

std::string slurp(const std::filesystem::path &p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(ApiPrecisionCompare, OfflineToolWritesMsprobesFiles) {
  tprobe::test::temp_dir dir;
  const auto npu = details_file(dir, "20260101000000", false, dialect::msprobe_head);
  const auto gpu = details_file(dir, "20260101000001", true, dialect::msprobe_head);
  precision_offline_options o{npu.string(), gpu.string(), dir / "out", "head"};
  const precision_offline_report r = precision_offline_run(o);
  EXPECT_EQ(r.passed, 2u);
  EXPECT_EQ(r.errors, 2u);
  EXPECT_EQ(precision_summary_line(r),
            "4 APIs: 2 pass, 2 error, 0 other; first not pass: Functional.linear.0 (forward error, backward error)");
  EXPECT_EQ(r.files.result.parent_path(), std::filesystem::path(dir / "out"));
  EXPECT_EQ(r.files.result.filename().string().rfind("api_precision_compare_result_", 0), 0u);
  EXPECT_EQ(slurp(r.files.result), "\xEF\xBB\xBF" + std::string(vectors::v2_head_result));
  const csv_table details = read_csv_table(r.files.details);
  EXPECT_EQ(details.header.size(), 28u);
  EXPECT_EQ(details.rows.size(), 5u);
  // 8.3.3 judges files of its own dialect: only __add__ fails (absolute threshold).
  const precision_offline_options old{details_file(dir, "20260101000002", false, dialect::msprobe_8_3_3).string(),
                                      details_file(dir, "20260101000003", true, dialect::msprobe_8_3_3).string(),
                                      dir / "out833"};
  EXPECT_EQ(old.version, "8.3.3");  // the default
  const precision_offline_report r833 = precision_offline_run(old);
  EXPECT_EQ(precision_summary_line(r833),
            "4 APIs: 3 pass, 1 error, 0 other; first not pass: Tensor.__add__.0 (forward error, backward none)");
  // Head files read by 8.3.3: its ULP and absolute columns are blank there, so those rows are SKIP.
  o.version = "8.3.3";
  o.output_dir = dir / "mixed";
  const precision_offline_report mixed = precision_offline_run(o);
  EXPECT_EQ(mixed.errors, 0u);
  EXPECT_EQ(mixed.result.results.back().forward, "pass");  // argmax: binary, as in both
  o.version = "7";
  EXPECT_THROW((void)precision_offline_run(o), usage_error);
  o.version = "head";
  o.npu_csv = dir / "missing.csv";
  EXPECT_THROW((void)precision_offline_run(o), system_error);
  o.npu_csv = dir / "notes.txt";
  EXPECT_THROW((void)precision_offline_run(o), usage_error);
}

}  // namespace
}  // namespace tprobe::precheck
