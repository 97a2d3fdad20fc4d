// The real `tprobe report` over pre-check results (issue 61 item 5): a pre-check folder written by
// core/precheck's writer beside a compare result gives the terminal line, exit 1 for an error API,
// exit 0 when every API passes (or is SKIP), and a page that carries the links; a malformed pre-check
// file is one "ERROR: result not read: FILE" line and exit 1 beside a readable result, and a
// usage error (exit 100) naming it when it is all there is.
#include <algorithm>
#include <filesystem>

#include <gtest/gtest.h>

#include "precheck_files.h"
#include "pyjson.h"
#include "test_support.h"

namespace tprobe {
namespace {

namespace pc = tprobe::precheck;
using json = nlohmann::ordered_json;

pc::api_judgement api(const std::string &name, pc::status fwd, std::optional<pc::status> bwd, pc::status row_status,
                      std::optional<double> cosine) {
  pc::api_judgement j;
  j.result.api_name = name;
  j.result.forward = fwd;
  j.result.backward = bwd;
  pc::detail_row r;
  r.api_name = name + ".forward.output.0";
  r.bench_dtype = "torch.float32";
  r.device_dtype = "torch.float16";
  r.shape = "(2, 4)";
  r.cosine = cosine;
  r.verdict = row_status;
  j.details.push_back(r);
  return j;
}

void write_compare(const std::string &dir) {
  std::filesystem::create_directories(dir);
  json rows = json::array();
  for (const char *n : {"Functional.linear.0.forward.input.0", "Functional.linear.0.forward.output.0", "Torch.relu.0.forward.output.0"})
    rows.push_back({n, n, 1.0, "Yes"});
  test::write_file(dir + "/compare_result_20250101000000.json",
                   pyjson_dump({{"format", "tprobe-compare"}, {"mode", "all"},
                                {"columns", {"NPU Name", "Bench Name", "Cosine", "Accuracy Reached or Not"}},
                                {"rows", rows}, {"row_status", "ooo"}}));
}

std::vector<std::string> lines_of(const std::string &text) {
  std::vector<std::string> out;
  size_t at = 0;
  for (size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) out.push_back(text.substr(at, nl - at));
  return out;
}

TEST(ReportPrecheckCli, ErrorApiFailsAndLinksToTheCompare) {
  test::temp_dir tmp;
  write_compare(tmp / "cmp");
  std::filesystem::create_directories(tmp / "pre");
  pc::precheck_files files(tmp / "pre", "20250101000000", pc::dialect::msprobe_head);
  files.write(api("Torch.relu.0", pc::status::pass, std::nullopt, pc::status::pass, 1.0));
  files.write(api("Functional.linear.0", pc::status::error, pc::status::pass, pc::status::error, 0.75));
  const std::string page = tmp / "out/report.html";
  const auto r = test::run_process({test::bin("tprobe"), "report", tmp / "cmp", tmp / "pre", "-o", page});
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  const auto lines = lines_of(r.out);
  EXPECT_NE(std::find(lines.begin(), lines.end(),
                      "tprobe-report: precheck pre/20250101000000: FAIL: 2 APIs; forward 1 pass, 0 warning, 1 error, 0 SKIP; "
                      "backward 1 pass, 0 warning, 0 error, 0 SKIP, 1 none; first error Functional.linear.0 (余弦相似度 0.75 ≤ 0.99)"),
            lines.end()) << r.out;
  EXPECT_EQ(lines.back(), "tprobe-report: verdict: FAIL; report " + page);
  const std::string html = test::read_file(page);
  EXPECT_NE(html.find("\"compare_rows\":[{\"compare\":0,\"rows\":2,\"first\":0}]"), std::string::npos);
  EXPECT_NE(html.find("\"precheck\":[[0,0,0],[1,0,0]]"), std::string::npos);
}

TEST(ReportPrecheckCli, PassAndSkipPass) {
  test::temp_dir tmp;
  std::filesystem::create_directories(tmp / "pre");
  pc::precheck_files files(tmp / "pre", "20250101000000", pc::dialect::msprobe_8_3_3);
  files.write(api("Torch.relu.0", pc::status::pass, pc::status::pass, pc::status::pass, 1.0));
  files.write(api("Torch.nonzero.0", pc::status::skip, std::nullopt, pc::status::skip, std::nullopt));
  const auto r = test::run_process({test::bin("tprobe"), "report", tmp / "pre", "-o", tmp / "r.html"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  EXPECT_NE(r.out.find("tprobe-report: precheck pre/20250101000000: PASS: 2 APIs; forward 1 pass, 0 warning, 0 error, 1 SKIP"),
            std::string::npos) << r.out;
}

TEST(ReportPrecheckCli, MalformedFileIsOneErrorLine) {
  test::temp_dir tmp;
  write_compare(tmp / "cmp");
  std::filesystem::create_directories(tmp / "pre");
  const std::string bad = tmp / "pre/accuracy_checking_result_20250101000000.csv";
  test::write_file(bad, "API name,Forward Test Success,Backward Test Success,Message\r\n\"Torch.relu.0,pass, \r\n");
  auto r = test::run_process({test::bin("tprobe"), "report", tmp / "cmp", tmp / "pre", "-o", tmp / "r.html"});
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  const auto lines = lines_of(r.out);
  const auto errors = std::count_if(lines.begin(), lines.end(), [](const std::string &l) { return l.find("ERROR") != std::string::npos; });
  EXPECT_EQ(errors, 1) << r.out;
  EXPECT_NE(std::find(lines.begin(), lines.end(), "tprobe-report: ERROR: result not read: " + bad + ": a quoted cell is not closed"),
            lines.end()) << r.out;
  EXPECT_EQ(lines.back(), "tprobe-report: verdict: FAIL; report " + (tmp / "r.html"));

  // alone: nothing was read, a usage error that names it
  r = test::run_process({test::bin("tprobe"), "report", tmp / "pre", "-o", tmp / "r2.html"});
  EXPECT_EQ(r.status, 100) << r.out << r.err;
  EXPECT_NE(r.err.find("tprobe-report: fatal: no result found in " + (tmp / "pre")), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(not read: " + bad + ": a quoted cell is not closed)"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(tmp / "r2.html"));
}

}  // namespace
}  // namespace tprobe
