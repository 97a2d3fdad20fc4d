// tools/report: the accuracy pre-check's two CSV files on the report (issue 61 item 5): msprobe's
// verbatim V-1 output (docs/msprobe-compat.md §7.10) and files written by core/precheck's writer, read
// through core/precheck; counts by status, the APIs not pass in order (errors, then warnings, then
// SKIP) with their worst details row and the metric that failed it, the links between an API and
// the rows of a compare on the same page, the terminal line, and malformed files (named once,
// never a pass).
#include <algorithm>
#include <filesystem>
#include <optional>
#include <regex>

#include <gtest/gtest.h>

#include "errors.h"
#include "precheck_files.h"
#include "pyjson.h"
#include "report/report.h"
#include "test_support.h"

namespace tprobe {
namespace {

namespace pc = tprobe::precheck;
using json = nlohmann::ordered_json;

const char *const bom = "\xEF\xBB\xBF";

// msprobe HEAD's V-1 details and result files, verbatim (§7.10): numpy's str floats beside
// "%.14f", messages quoted across lines, " " for empty cells and for no backward.
std::string v1_details(const std::string &warning = "warning") {
  return std::string(bom) +
         "API Name,Bench Dtype,DEVICE Dtype,Shape,余弦相似度,最大绝对误差,双百指标,双千指标,双万指标,二进制一致错误率,"
         "误差均衡性,均方根误差,小值域错误占比,相对误差最大值,相对误差平均值,inf/nan错误率,相对误差错误率,绝对误差错误率,"
         "ULP误差最大值,ULP误差平均值,ULP误差大于阈值占比,Status,Message\r\n"
         "Functional.linear.0.forward.output.0,torch.float32,torch.float16,\"(2, 4)\",0.99999998392154,0.0078125,"
         "1.00000000000000,1.00000000000000, , ,0.25000000000000,0.00328769515116,1.00000000000000,0.00078125,"
         "0.00023871528, , , , , , ,pass,\"\nRelative error is less than 0.001, consider as pass, skip other check and set "
         "to SPACE.\n\"\r\n"
         "Functional.linear.0.backward.output.0,torch.float32,torch.float16,\"(2, 2)\",0.99999991142870,0.001953125,"
         "1.00000000000000,1.00000000000000, , ,0.25000000000000,0.00097659912071,0,0.0009765625,0.00024414062, , , , , "
         ", ,pass,\"\nRelative error is less than 0.001, consider as pass, skip other check and set to SPACE.\n\"\r\n"
         "Torch.matmul.0.forward.output.0,torch.float64,torch.float32,\"(2, 2)\",1.00000000000000,0.00000047683716, , , "
         ", ,0.50000000000000,0.00000024576546,0,0.00000011920929,0.00000005960464, , , , , , ,pass,\"\nMax abs error is "
         "less than 0.001, consider as pass, skip other check and set to SPACE.\n\"\r\n"
         "Tensor.__add__.0.forward.output.0,torch.float32,torch.bfloat16,\"(4,)\",0.99999379969176,0.015625,"
         "1.00000000000000,0.75000000000000, , ,0.00000000000000,0.00781279296570,0,0.007797271,0.0019773107, , , , , , ," +
         warning +
         ",\"\nRelative error is greater than 0.001, consider as warning, skip other check and set to SPACE.\n\"\r\n"
         "Torch.argmax.0.forward.output.0,torch.int64,torch.int64,\"(3,)\", , , , , ,0.00000000000000, , , , , , , , , , "
         ", ,pass,\"Current int64 data, only perform binary comparison.\"\r\n";
}
std::string v1_result(const std::string &warning = "warning") {
  return std::string(bom) +
         "API name,Forward Test Success,Backward Test Success,Message\r\n"
         "Functional.linear.0,pass,pass\r\n"
         "Torch.matmul.0,pass, \r\n"
         "Tensor.__add__.0," + warning + ", \r\n"
         "Torch.argmax.0,pass, \r\n";
}

void write_v1(const std::string &dir, const std::string &warning = "warning") {
  std::filesystem::create_directories(dir);
  test::write_file(dir + "/accuracy_checking_details_20250101120000.csv", v1_details(warning));
  test::write_file(dir + "/accuracy_checking_result_20250101120000.csv", v1_result(warning));
}

pc::detail_row drow(const std::string &name, pc::status s, const std::string &message = "") {
  pc::detail_row r;
  r.api_name = name;
  r.bench_dtype = "torch.float32";
  r.device_dtype = "torch.float16";
  r.shape = "(2, 4)";
  r.verdict = s;
  r.message = message;
  return r;
}

pc::api_judgement api(const std::string &name, pc::status fwd, std::optional<pc::status> bwd,
                      std::vector<pc::detail_row> details, const std::string &message = "") {
  pc::api_judgement j;
  j.result.api_name = name;
  j.result.forward = fwd;
  j.result.backward = bwd;
  j.result.message = message;
  j.details = std::move(details);
  return j;
}

// Written through core/precheck's writer (the files tprobe precheck writes), in the dialect given.
// In file order: a pass, a warning (fp16 双千), an error in the backward only (cosine), a SKIP,
// an int64 error (binary), an error with no failing metric (shape mismatch), an fp32 error whose
// second row is the error (双千) after a warning row (双万), and a forward-only error (双百).
void write_mixed(const std::string &dir, pc::dialect d) {
  std::filesystem::create_directories(dir);
  pc::precheck_files files(dir, "20250102030405", d);
  using pc::status;
  auto pass_row = drow("Torch.relu.0.forward.output.0", status::pass);
  pass_row.cosine = 1.0;
  pass_row.max_abs_err = 0.0;
  files.write(api("Torch.relu.0", status::pass, std::nullopt, {pass_row}));

  auto warn_row = drow("Functional.softmax.0.forward.output.0", status::warning, "\nRelative error is greater than 0.001\n");
  warn_row.cosine = 0.9999;
  warn_row.max_abs_err = 0.004;
  warn_row.ratio_hundredth = 1.0;
  warn_row.ratio_thousandth = 0.99;
  files.write(api("Functional.softmax.0", status::warning, std::nullopt, {warn_row}));

  auto lin_f = drow("Functional.linear.0.forward.output.0", status::pass);
  lin_f.cosine = 0.99999;
  lin_f.max_abs_err = 0.0001;
  auto lin_b = drow("Functional.linear.0.backward.output.0", status::error, "\nCosine similarity is less than 0.99\n");
  lin_b.cosine = 0.5;
  lin_b.max_abs_err = 3.25;
  files.write(api("Functional.linear.0", status::pass, status::error, {lin_f, lin_b}));

  auto skip_row = drow("Torch.nonzero.0.forward.output.0", status::skip, "This API is not supported");
  files.write(api("Torch.nonzero.0", status::skip, std::nullopt, {skip_row}, "This API is not supported"));

  auto bin = drow("Torch.argmax.0.forward.output.0", status::error, "Current int64 data, only perform binary comparison.");
  bin.bench_dtype = bin.device_dtype = "torch.int64";
  bin.binary_error_rate = 0.4;
  files.write(api("Torch.argmax.0", status::error, std::nullopt, {bin}));

  auto shape = drow("Torch.reshape.0.forward.output.0", status::error, "Shape of device and bench outputs don't match.");
  files.write(api("Torch.reshape.0", status::error, std::nullopt, {shape}));

  auto mm_w = drow("Torch.matmul.0.forward.output.0", status::warning);
  mm_w.device_dtype = "torch.float32";
  mm_w.cosine = 0.9999;
  mm_w.ratio_thousandth = 1.0;
  mm_w.ratio_ten_thousandth = 0.99;
  auto mm_e = drow("Torch.matmul.0.forward.output.1", status::error);
  mm_e.device_dtype = "torch.float32";
  mm_e.cosine = 0.999;
  mm_e.max_abs_err = 0.5;
  mm_e.ratio_thousandth = 0.9;
  files.write(api("Torch.matmul.0", status::error, std::nullopt, {mm_w, mm_e}));

  auto gelu = drow("Functional.gelu.0.forward.output.0", status::error);
  gelu.cosine = 0.995;
  gelu.ratio_hundredth = 0.5;
  gelu.ratio_thousandth = 0.4;
  files.write(api("Functional.gelu.0", status::error, status::pass, {gelu}));
}

// A compare result as tprobe compare writes it (the fields the report reads), one row per name.
void write_compare(const std::string &dir, const std::vector<std::string> &names) {
  std::filesystem::create_directories(dir);
  json rows = json::array();
  std::string status;
  for (const auto &n : names) {
    rows.push_back({n, n, 1.0, "Yes"});
    status += 'o';
  }
  test::write_file(dir + "/compare_result_rank0_20250101000000.json",
                   pyjson_dump({{"format", "tprobe-compare"}, {"mode", "all"}, {"rank", "rank0"},
                                {"columns", {"NPU Name", "Bench Name", "Cosine", "Accuracy Reached or Not"}},
                                {"rows", rows}, {"row_status", status}}));
}

json page_data(const std::string &html) {
  const std::string open = "<script type=\"application/json\" id=\"tprobe-data\">";
  const size_t a = html.find(open) + open.size();
  std::string text = html.substr(a, html.find("</script>", a) - a);
  text = std::regex_replace(text, std::regex("<\\\\/"), "</");
  return json::parse(text);
}

report_options options(std::vector<std::string> results) {
  report_options o;
  o.results = std::move(results);
  return o;
}

TEST(ReportPrecheck, ReadsMsprobesVerbatimFiles) {
  test::temp_dir tmp;
  write_v1(tmp / "pre");
  const report_model m = report_scan(options({tmp / "pre"}));
  ASSERT_EQ(m.prechecks.size(), 1u);
  ASSERT_TRUE(m.unread.empty()) << m.unread.front();
  const auto &p = m.prechecks[0];
  EXPECT_EQ(p.details_file, tmp / "pre/accuracy_checking_details_20250101120000.csv");
  EXPECT_EQ(p.apis, 4u);
  EXPECT_EQ((std::vector<size_t>(p.forward, p.forward + 4)), (std::vector<size_t>{3, 1, 0, 0}));
  EXPECT_EQ((std::vector<size_t>(p.backward, p.backward + 4)), (std::vector<size_t>{1, 0, 0, 0}));
  EXPECT_EQ(p.backward_none, 3u);
  ASSERT_EQ(p.failing.size(), 1u);
  const auto &a = p.failing[0];
  EXPECT_EQ(a.name, "Tensor.__add__.0");
  EXPECT_EQ(a.forward, 'w');
  EXPECT_EQ(a.backward, '-');
  EXPECT_EQ(a.worst_row, "Tensor.__add__.0.forward.output.0");
  EXPECT_EQ(a.worst_status, 'w');
  EXPECT_EQ(a.metric, "双千指标");  // bf16: 双百 1.0 passes, 双千 0.75 is not above 0.999
  EXPECT_DOUBLE_EQ(*a.value, 0.75);
  EXPECT_EQ(a.rule, "≤ 0.999");
  EXPECT_DOUBLE_EQ(*a.max_abs_err, 0.015625);
  EXPECT_DOUBLE_EQ(*a.cosine, 0.99999379969176);
  EXPECT_EQ(a.device_dtype, "torch.bfloat16");
  EXPECT_EQ(a.shape, "(4,)");
  EXPECT_NE(a.row_message.find("Relative error is greater than 0.001"), std::string::npos);
  EXPECT_TRUE(m.negative());  // a warning fails, as tprobe-precheck exits 1 on it
  EXPECT_EQ(m.inputs, (std::vector<std::string>{tmp / "pre/accuracy_checking_result_20250101120000.csv",
                                                tmp / "pre/accuracy_checking_details_20250101120000.csv"}));
}

TEST(ReportPrecheck, ReadsMsprobe833Spelling) {
  test::temp_dir tmp;
  write_v1(tmp / "pre", "Warning");
  const report_model m = report_scan(options({tmp / "pre"}));
  ASSERT_TRUE(m.unread.empty()) << m.unread.front();
  ASSERT_EQ(m.prechecks[0].failing.size(), 1u);
  EXPECT_EQ(m.prechecks[0].forward[1], 1u);
  EXPECT_EQ(m.prechecks[0].failing[0].worst_status, 'w');
}

TEST(ReportPrecheck, AllPassIsAPass) {
  test::temp_dir tmp;
  std::filesystem::create_directories(tmp / "pre");
  pc::precheck_files files(tmp / "pre", "20250101000000", pc::dialect::msprobe_head);
  auto r = drow("Torch.relu.0.forward.output.0", pc::status::pass);
  files.write(api("Torch.relu.0", pc::status::pass, pc::status::pass, {r}));
  files.write(api("Torch.nonzero.0", pc::status::skip, std::nullopt, {drow("Torch.nonzero.0.forward.output.0", pc::status::skip)}, "no"));
  const report_model m = report_scan(options({tmp / "pre"}));
  ASSERT_EQ(m.prechecks.size(), 1u);
  EXPECT_FALSE(m.negative());  // SKIP does not fail
  ASSERT_EQ(m.prechecks[0].failing.size(), 1u);  // but is listed
  EXPECT_EQ(m.prechecks[0].failing[0].name, "Torch.nonzero.0");
  const auto lines = report_summary_lines(m, "");
  EXPECT_EQ(lines[0], "tprobe-report: precheck pre/20250101000000: PASS: 2 APIs; forward 1 pass, 0 warning, 0 error, "
                      "1 SKIP; backward 1 pass, 0 warning, 0 error, 0 SKIP, 1 none");
  EXPECT_EQ(lines.back(), "tprobe-report: verdict: PASS");
}

class Mixed : public ::testing::TestWithParam<pc::dialect> {};

TEST_P(Mixed, OrderCountsAndWorstMetric) {
  test::temp_dir tmp;
  write_mixed(tmp / "pre", GetParam());
  const report_model m = report_scan(options({tmp / "pre"}));
  ASSERT_TRUE(m.unread.empty()) << m.unread.front();
  const auto &p = m.prechecks.at(0);
  EXPECT_EQ(p.apis, 8u);
  EXPECT_EQ((std::vector<size_t>(p.forward, p.forward + 4)), (std::vector<size_t>{2, 1, 4, 1}));
  EXPECT_EQ((std::vector<size_t>(p.backward, p.backward + 4)), (std::vector<size_t>{1, 0, 1, 0}));
  EXPECT_EQ(p.backward_none, 6u);
  std::vector<std::string> order;
  for (const auto &a : p.failing) order.push_back(a.name);
  // errors in file order, then the warning, then the SKIP; the passing relu is not listed
  EXPECT_EQ(order, (std::vector<std::string>{"Functional.linear.0", "Torch.argmax.0", "Torch.reshape.0", "Torch.matmul.0",
                                             "Functional.gelu.0", "Functional.softmax.0", "Torch.nonzero.0"}));
  struct want {
    std::string row, metric;
    std::optional<double> value;
    std::string rule;
  };
  const std::vector<want> expected = {
      {"Functional.linear.0.backward.output.0", "余弦相似度", 0.5, "≤ 0.99"},  // the backward row is the worst
      {"Torch.argmax.0.forward.output.0", "二进制一致错误率", 0.4, "> 0"},
      {"Torch.reshape.0.forward.output.0", "", std::nullopt, ""},  // no metric: the message says why
      {"Torch.matmul.0.forward.output.1", "双千指标", 0.9, "≤ 0.999"},  // the error row, not the first (warning) one
      {"Functional.gelu.0.forward.output.0", "双百指标", 0.5, "≤ 0.99"},  // 双百 comes before 双千
      {"Functional.softmax.0.forward.output.0", "双千指标", 0.99, "≤ 0.999"},
      {"Torch.nonzero.0.forward.output.0", "", std::nullopt, ""},
  };
  for (size_t k = 0; k < expected.size(); ++k) {
    const auto &a = p.failing[k];
    SCOPED_TRACE(a.name);
    EXPECT_EQ(a.worst_row, expected[k].row);
    EXPECT_EQ(a.metric, expected[k].metric);
    EXPECT_EQ(a.value.has_value(), expected[k].value.has_value());
    if (a.value && expected[k].value) {
      EXPECT_NEAR(*a.value, *expected[k].value, 1e-12);
    }
    EXPECT_EQ(a.rule, expected[k].rule);
  }
  EXPECT_EQ(p.failing[0].forward, 'p');
  EXPECT_EQ(p.failing[0].backward, 'e');
  EXPECT_DOUBLE_EQ(*p.failing[0].max_abs_err, 3.25);
  EXPECT_EQ(p.failing[2].row_message, "Shape of device and bench outputs don't match.");
  EXPECT_EQ(p.failing[6].message, "This API is not supported");
  const auto lines = report_summary_lines(m, "r.html");
  EXPECT_EQ(lines[0], "tprobe-report: precheck pre/20250102030405: FAIL: 8 APIs; forward 2 pass, 1 warning, 4 error, "
                      "1 SKIP; backward 1 pass, 0 warning, 1 error, 0 SKIP, 6 none; first error Functional.linear.0 "
                      "(余弦相似度 0.5 ≤ 0.99)");
  EXPECT_EQ(lines.back(), "tprobe-report: verdict: FAIL; report r.html");
}

INSTANTIATE_TEST_SUITE_P(BothDialects, Mixed, ::testing::Values(pc::dialect::msprobe_head, pc::dialect::msprobe_8_3_3));

TEST(ReportPrecheck, FailedMetricFollowsMsprobesOrder) {
  const auto &h = pc::detail_header();
  auto row = [&](std::vector<std::pair<std::string, std::string>> cells) {
    std::vector<std::string> r(h.size(), " ");
    for (const auto &[col, v] : cells) r[std::find(h.begin(), h.end(), col) - h.begin()] = v;
    return r;
  };
  // cosine first, even when a ratio fails too
  EXPECT_EQ(report_precheck_failed_metric(h, row({{"余弦相似度", "0.98"}, {"双千指标", "0.5"}})).metric, "余弦相似度");
  // exactly at the threshold fails (msprobe passes only above it)
  EXPECT_EQ(report_precheck_failed_metric(h, row({{"余弦相似度", "0.99"}})).metric, "余弦相似度");
  EXPECT_EQ(report_precheck_failed_metric(h, row({{"余弦相似度", "0.9901"}, {"双千指标", "0.999"}})).metric, "双千指标");
  EXPECT_EQ(report_precheck_failed_metric(h, row({{"双千指标", "0.9991"}, {"双万指标", "0.9999"}})).metric, "双万指标");
  EXPECT_EQ(report_precheck_failed_metric(h, row({{"双千指标", "1.0"}, {"双万指标", "0.99995"}})).metric, "");
  // numpy's spelling of a float32 value
  const auto f = report_precheck_failed_metric(h, row({{"双百指标", "9.8e-01"}}));
  EXPECT_EQ(f.metric, "双百指标");
  EXPECT_DOUBLE_EQ(*f.value, 0.98);
  // a NaN cosine (an error in 8.3.3) is named when nothing else failed
  EXPECT_EQ(report_precheck_failed_metric(h, row({{"余弦相似度", "nan"}})).rule, "is NaN");
}

TEST(ReportPrecheck, LinksBothWaysWithACompare) {
  test::temp_dir tmp;
  write_mixed(tmp / "pre", pc::dialect::msprobe_head);
  write_compare(tmp / "cmp", {"Functional.linear.0.forward.input.0", "Functional.linear.0.forward.output.0",
                              "Functional.linear.01.forward.output.0",  // another API: .0 is not its prefix
                              "Torch.relu.0.forward.output.0",          // passes the pre-check: no link
                              "Functional.linear.0.backward.input.0", "Torch.matmul.0.forward.output.0"});
  const report_model m = report_scan(options({tmp / "cmp", tmp / "pre"}));
  ASSERT_TRUE(m.unread.empty()) << m.unread.front();
  ASSERT_EQ(m.compares.size(), 1u);
  const auto &failing = m.prechecks.at(0).failing;
  // linear (failing[0]): rows 0, 1, 4; matmul (failing[3]): row 5
  ASSERT_EQ(failing[0].compare_rows.size(), 1u);
  EXPECT_EQ(failing[0].compare_rows[0].compare, 0u);
  EXPECT_EQ(failing[0].compare_rows[0].rows, 3u);
  EXPECT_EQ(failing[0].compare_rows[0].first, 0u);
  ASSERT_EQ(failing[3].name, "Torch.matmul.0");
  ASSERT_EQ(failing[3].compare_rows.size(), 1u);
  EXPECT_EQ(failing[3].compare_rows[0].rows, 1u);
  EXPECT_EQ(failing[3].compare_rows[0].first, 5u);
  EXPECT_TRUE(failing[1].compare_rows.empty());
  ASSERT_EQ(m.compare_precheck.size(), 1u);
  EXPECT_EQ(m.compare_precheck[0], (std::vector<std::array<size_t, 3>>{{0, 0, 0}, {1, 0, 0}, {4, 0, 0}, {5, 0, 3}}));

  // the page carries both directions: the API's compare rows, and each compare row's API
  const json d = page_data(report_render_html(m));
  ASSERT_EQ(d["prechecks"].size(), 1u);
  const json &pj = d["prechecks"][0];
  EXPECT_EQ(pj["label"], "pre/20250102030405");
  EXPECT_EQ(pj["forward"], json::parse(R"({"pass":2,"warning":1,"error":4,"SKIP":1})"));
  EXPECT_EQ(pj["backward"], json::parse(R"({"pass":1,"warning":0,"error":1,"SKIP":0,"none":6})"));
  EXPECT_EQ(pj["failing"][0]["name"], "Functional.linear.0");
  EXPECT_EQ(pj["failing"][0]["worst"], "error");
  EXPECT_EQ(pj["failing"][0]["metric"], "余弦相似度");
  EXPECT_EQ(pj["failing"][0]["compare_rows"], json::parse(R"([{"compare":0,"rows":3,"first":0}])"));
  EXPECT_EQ(d["compares"][0]["precheck"], json::parse("[[0,0,0],[1,0,0],[4,0,0],[5,0,3]]"));
  EXPECT_EQ(pj["failing"][2]["value"], nullptr);
}

TEST(ReportPrecheck, MalformedFilesAreNamedOnceAndFail) {
  test::temp_dir tmp;
  write_compare(tmp / "cmp", {"Torch.relu.0.forward.output.0"});
  struct bad {
    std::string name, result, details, says;
  };
  const std::string header = "API name,Forward Test Success,Backward Test Success,Message\r\n";
  auto details_row = [](const std::string &cosine, const std::string &status) {
    std::vector<std::string> r(pc::detail_header().size(), " ");
    r[0] = "Torch.relu.0.forward.output.0";
    r[4] = cosine;  // 余弦相似度
    r[r.size() - 2] = status;
    return pc::csv_line(pc::detail_header()) + pc::csv_line(r);
  };
  const std::vector<bad> cases = {
      {"open_quote", header + "\"Torch.relu.0,pass,pass\r\n", "", "a quoted cell is not closed"},
      {"status", header + "Torch.relu.0,maybe,pass\r\n", "", "Torch.relu.0): status \"maybe\"/\"pass\""},
      {"header", "API,Forward,Backward\r\nTorch.relu.0,pass,pass\r\n", "", "not a pre-check result"},
      {"short_row", header + "Torch.relu.0,pass\r\n", "", "row 2 has 2 cells"},
      {"details_status", header + "Torch.relu.0,error, \r\n",
       details_row("1.0", "oops"),
       "status \"oops\""},
      {"details_cell", header + "Torch.relu.0,error, \r\n",
       details_row("zero", "error"),
       "Torch.relu.0.forward.output.0"},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE(c.name);
    const std::string dir = tmp / c.name;
    std::filesystem::create_directories(dir);
    const std::string result = dir + "/accuracy_checking_result_20250101000000.csv";
    const std::string details = dir + "/accuracy_checking_details_20250101000000.csv";
    test::write_file(result, c.result);
    if (!c.details.empty()) test::write_file(details, c.details);
    const report_model m = report_scan(options({tmp / "cmp", dir}));
    EXPECT_TRUE(m.prechecks.empty());
    ASSERT_EQ(m.unread.size(), 1u);
    const std::string &named = c.details.empty() ? result : details;
    EXPECT_EQ(m.unread[0].rfind(named + ": ", 0), 0u) << m.unread[0];
    EXPECT_NE(m.unread[0].find(c.says), std::string::npos) << m.unread[0];
    EXPECT_TRUE(m.negative());
    const auto lines = report_summary_lines(m, "");
    EXPECT_EQ(std::count_if(lines.begin(), lines.end(), [](const std::string &l) { return l.find("ERROR: result not read: ") != std::string::npos; }), 1);
  }
  // A malformed pre-check alone: nothing was read, the usage error names it (exit 100).
  try {
    (void)report_scan(options({tmp / "status"}));
    FAIL() << "no usage_error";
  } catch (const usage_error &e) {
    EXPECT_NE(std::string(e.what()).find("not read: " + (tmp / "status/accuracy_checking_result_20250101000000.csv")),
              std::string::npos) << e.what();
  }
}

TEST(ReportPrecheck, AResultWithoutDetailsIsCountedWithoutMetrics) {
  test::temp_dir tmp;
  write_v1(tmp / "pre");
  std::filesystem::remove(tmp / "pre/accuracy_checking_details_20250101120000.csv");
  const report_model m = report_scan(options({tmp / "pre/accuracy_checking_result_20250101120000.csv"}));
  ASSERT_EQ(m.prechecks.size(), 1u);
  EXPECT_EQ(m.prechecks[0].details_file, "");
  ASSERT_EQ(m.prechecks[0].failing.size(), 1u);
  EXPECT_EQ(m.prechecks[0].failing[0].worst_row, "");
  EXPECT_EQ(m.prechecks[0].failing[0].metric, "");
}

}  // namespace
}  // namespace tprobe
