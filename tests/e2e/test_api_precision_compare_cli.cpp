// tprobe api-precision-compare end to end: the binary through the launcher, with msprobe's command
// line (`tprobe -f pytorch api_precision_compare -npu A -gpu B -o OUT`), its exit codes and files.
#include <filesystem>

#include <gtest/gtest.h>

#include "../unit/precheck_vectors.h"
#include "precheck_files.h"
#include "test_support.h"

namespace tprobe {
namespace {

// V-1's details file (or V-2's GPU run) as tprobe's writer writes it.
std::string details_file(const test::temp_dir &dir, const std::string &ts, bool gpu, precheck::dialect d) {
  precheck::precheck_files files(dir.path(), ts, d);
  for (const auto &r : precheck::vectors::v1_replays(gpu)) files.write(precheck::judge_api(r, d));
  return files.details_path().string();
}

std::vector<std::filesystem::path> files_in(const std::string &dir) {
  std::vector<std::filesystem::path> out;
  for (const auto &e : std::filesystem::directory_iterator(dir)) out.push_back(e.path().filename());
  std::sort(out.begin(), out.end());
  return out;
}

TEST(ApiPrecisionCompareCli, MsprobeCommandLineAndExitCodes) {
  test::temp_dir dir;
  const std::string npu = details_file(dir, "20260101000000", false, precheck::dialect::msprobe_8_3_3);
  const std::string gpu = details_file(dir, "20260101000001", true, precheck::dialect::msprobe_8_3_3);
  // msprobe's spelling: -f pytorch first, the verb with an underscore, -npu/-gpu/-o.
  auto r = test::run_process({test::bin("tprobe"), "-f", "pytorch", "api_precision_compare", "-npu", npu, "-gpu", gpu,
                              "-o", dir / "out"});
  EXPECT_EQ(r.status, 1) << r.err;  // __add__ fails the absolute threshold
  EXPECT_EQ(r.out, "tprobe-api-precision-compare: 4 APIs: 3 pass, 1 error, 0 other; first not pass: Tensor.__add__.0 "
                   "(forward error, backward none)\n");
  const auto names = files_in(dir / "out");
  ASSERT_EQ(names.size(), 2u);
  EXPECT_EQ(names[0].string().rfind("api_precision_compare_details_", 0), 0u);
  EXPECT_EQ(names[1].string().rfind("api_precision_compare_result_", 0), 0u);
  const precheck::csv_table result = precheck::read_csv_table(std::filesystem::path(dir / "out") / names[1]);
  EXPECT_EQ(result.rows[2], (std::vector<std::string>{"Tensor.__add__.0", "error", " ", ""}));

  // The long spellings, and head's verdict on head files: linear and __add__ fail by rmse ratio.
  const std::string npu_head = details_file(dir, "20260101000002", false, precheck::dialect::msprobe_head);
  const std::string gpu_head = details_file(dir, "20260101000003", true, precheck::dialect::msprobe_head);
  r = test::run_process({test::bin("tprobe"), "api-precision-compare", "--npu_csv_path", npu_head, "--gpu_csv_path",
                         gpu_head, "--out_path", dir / "head", "--msprobe-version", "head"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.out.find("2 pass, 2 error"), std::string::npos) << r.out;

  // A GPU file compared with itself: nothing fails, exit 0.
  r = test::run_process({test::bin("tprobe"), "api-precision-compare", "-npu", gpu, "-gpu", gpu, "-o", dir / "same"});
  EXPECT_EQ(r.status, 0) << r.err;

  // Bad input: exit 100 with one line naming the file and the column; unreadable: 111.
  const std::string result_csv = (std::filesystem::path(dir.path()) / "accuracy_checking_result_20260101000000.csv").string();
  r = test::run_process({test::bin("tprobe"), "api-precision-compare", "-npu", result_csv, "-gpu", gpu, "-o", dir / "x"});
  EXPECT_EQ(r.status, 100);
  EXPECT_EQ(r.err, "tprobe-api-precision-compare: fatal: " + result_csv +
                       ": missing column API Name (not an accuracy_checking_details CSV?)\n");  // "API name" there
  r = test::run_process({test::bin("tprobe"), "api-precision-compare", "-npu", dir / "none.csv", "-gpu", gpu, "-o", dir / "x"});
  EXPECT_EQ(r.status, 111) << r.err;
  r = test::run_process({test::bin("tprobe"), "api-precision-compare", "-gpu", gpu});
  EXPECT_EQ(r.status, 100) << r.err;
  r = test::run_process({test::bin("tprobe"), "api-precision-compare", "-npu", npu, "-gpu", gpu, "--msprobe-version", "9"});
  EXPECT_EQ(r.status, 100) << r.err;
}

}  // namespace
}  // namespace tprobe
