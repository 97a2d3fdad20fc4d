// The pre-check's CSV files (core/precheck/precheck_files.h), byte by byte: msprobe's write_csv
// (utf-8-sig, csv.writer) layout, resume, and a reader that takes msprobe's own files.
#include <fstream>
#include <sstream>

#include <gtest/gtest.h>

#include "errors.h"
#include "precheck_files.h"
#include "precheck_standard.h"
#include "precheck_vectors.h"
#include "test_support.h"

namespace tprobe::precheck {
namespace {

std::string slurp(const std::filesystem::path &p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

size_t count(const std::string &text, const std::string &what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

const std::string bom = "\xEF\xBB\xBF";

TEST(PrecheckFiles, FloatCells) {
  EXPECT_EQ(format_float_cell(0.25), "0.25000000000000");
  EXPECT_EQ(format_float_cell(0.0078125), "0.00781250000000");
  EXPECT_EQ(format_float_cell(2.021552e-07), "0.00000020215520");
  EXPECT_EQ(format_float_cell(std::nan("")), "nan");
  EXPECT_EQ(format_float_cell(-HUGE_VAL), "-inf");
  // Both of msprobe's spellings read back, and its blanks are no number.
  EXPECT_EQ(*parse_float_cell("0.00781250000000"), 0.0078125);
  EXPECT_EQ(*parse_float_cell("2.021552e-07"), 2.021552e-07);
  EXPECT_EQ(*parse_float_cell("0.0078125"), 0.0078125);
  EXPECT_EQ(*parse_float_cell("0"), 0.0);
  EXPECT_TRUE(std::isnan(*parse_float_cell("nan")));
  EXPECT_TRUE(std::isnan(*parse_float_cell("NaN")));
  EXPECT_EQ(*parse_float_cell("-inf"), -HUGE_VAL);
  EXPECT_EQ(*parse_float_cell("Infinity"), HUGE_VAL);
  EXPECT_FALSE(parse_float_cell(" ").has_value());
  EXPECT_FALSE(parse_float_cell("").has_value());
  EXPECT_THROW((void)parse_float_cell("pass"), usage_error);
  EXPECT_THROW((void)parse_float_cell("0x10"), usage_error);
}

TEST(PrecheckFiles, CsvLineQuotesOnlyWhereNeeded) {
  EXPECT_EQ(csv_line({"a", " ", "", "pass"}), "a, ,,pass\r\n");
  EXPECT_EQ(csv_line({"(2, 4)"}), "\"(2, 4)\"\r\n");
  EXPECT_EQ(csv_line({"(4,)", "()"}), "\"(4,)\",()\r\n");
  EXPECT_EQ(csv_line({"\nRelative error\n"}), "\"\nRelative error\n\"\r\n");
  EXPECT_EQ(csv_line({"say \"x\""}), "\"say \"\"x\"\"\"\r\n");
  EXPECT_EQ(csv_line({"ERROR: 均方根误差比值超过阈值"}), "ERROR: 均方根误差比值超过阈值\r\n");
  EXPECT_EQ(csv_line({""}), "\"\"\r\n");  // a lone empty field is quoted, as csv.writer does
}

TEST(PrecheckFiles, WriterBytes) {
  tprobe::test::temp_dir dir;
  precheck_files files(dir.path(), "20260101123456", dialect::msprobe_head);
  EXPECT_EQ(files.result_path(), std::filesystem::path(dir.path()) / "accuracy_checking_result_20260101123456.csv");
  EXPECT_EQ(files.details_path(), std::filesystem::path(dir.path()) / "accuracy_checking_details_20260101123456.csv");
  // The headers are there before any API (msprobe's Comparator writes them at start).
  EXPECT_EQ(slurp(files.result_path()), bom + "API name,Forward Test Success,Backward Test Success,Message\r\n");
  for (const auto &r : vectors::v1_replays()) files.write(judge_api(r, dialect::msprobe_head));
  api_replay skipped;
  skipped.full_name = "Distributed.all_reduce.0";
  skipped.skip_reason = "API Distributed.all_reduce.0 not support for acc_check. SKIP.";
  files.write(judge_api(skipped, dialect::msprobe_head));

  const std::string result = slurp(files.result_path());
  EXPECT_EQ(result, bom + vectors::v1_head_result +
                        "Distributed.all_reduce.0,SKIP,SKIP,API Distributed.all_reduce.0 not support for acc_check. SKIP.\r\n");
  const std::string details = slurp(files.details_path());
  EXPECT_EQ(details.substr(0, 3), bom);
  EXPECT_EQ(count(details, bom), 1u);
  EXPECT_EQ(count(details, "API Name,Bench Dtype"), 1u);  // header once
  // The linear row as written: quoted shape, " " cells, %.14f floats, quoted message with its newlines.
  EXPECT_NE(details.find("Functional.linear.0.forward.output.0,torch.float32,torch.float16,\"(2, 4)\",0.99999998392154,"
                         "0.00781250000000,1.00000000000000,1.00000000000000, , ,0.25000000000000,0.00328769515116,"
                         "1.00000000000000,0.00078125"),
            std::string::npos);
  EXPECT_NE(details.find(", , , , , , ,pass,\"\nRelative error is less than 0.001, consider as pass, skip other check "
                         "and set to SPACE.\n\"\r\nFunctional.linear.0.backward.output.0,"),
            std::string::npos);
  EXPECT_NE(details.find("Torch.argmax.0.forward.output.0,torch.int64,torch.int64,\"(3,)\", , , , , ,0.00000000000000, , ,"),
            std::string::npos);
  // Every line ends CRLF: no bare LF outside the quoted messages.
  const csv_table read = read_csv_table(files.details_path());
  EXPECT_EQ(read.header, detail_header());
  ASSERT_EQ(read.rows.size(), 6u);
  for (const auto &row : read.rows) EXPECT_EQ(row.size(), 23u);
  EXPECT_EQ(read.rows[0][22], "\nRelative error is less than 0.001, consider as pass, skip other check and set to SPACE.\n");
  vectors::expect_table(vectors::v1_head_details,
                     read.header, std::vector<std::vector<std::string>>(read.rows.begin(), read.rows.begin() + 5));
}

TEST(PrecheckFiles, ResumeSkipsDoneNamesAndAppends) {
  tprobe::test::temp_dir dir;
  const auto replays = vectors::v1_replays();
  std::filesystem::path result_path;
  {
    precheck_files files(dir.path(), "20260101000000", dialect::msprobe_8_3_3);
    files.write(judge_api(replays[0], dialect::msprobe_8_3_3));
    files.write(judge_api(replays[1], dialect::msprobe_8_3_3));
    result_path = files.result_path();
  }
  precheck_files resumed = precheck_files::resume(result_path, dialect::msprobe_8_3_3);
  EXPECT_EQ(resumed.ts(), "20260101000000");
  EXPECT_EQ(resumed.details_path(), std::filesystem::path(dir.path()) / "accuracy_checking_details_20260101000000.csv");
  EXPECT_EQ(resumed.done(), (std::set<std::string>{"Functional.linear.0", "Torch.matmul.0"}));
  for (const auto &r : replays)
    if (!resumed.done().count(r.full_name)) resumed.write(judge_api(r, dialect::msprobe_8_3_3));
  EXPECT_EQ(slurp(result_path), bom + vectors::v1_833_result);
  const std::string details = slurp(resumed.details_path());
  EXPECT_EQ(count(details, bom), 1u);
  EXPECT_EQ(count(details, "API Name,Bench Dtype"), 1u);
  EXPECT_EQ(read_csv_table(resumed.details_path()).rows.size(), 5u);

  // A name that is not msprobe's, or a file that is not there.
  EXPECT_THROW((void)precheck_files::resume(std::filesystem::path(dir.path()) / "result.csv", dialect::msprobe_head),
               usage_error);
  EXPECT_THROW((void)precheck_files::resume(std::filesystem::path(dir.path()) / "accuracy_checking_result_2026.csv",
                                            dialect::msprobe_head),
               usage_error);
  EXPECT_THROW((void)precheck_files::resume(std::filesystem::path(dir.path()) / "accuracy_checking_result_20990101000000.csv",
                                            dialect::msprobe_head),
               usage_error);
}

TEST(PrecheckFiles, NewFilesWithAnExistingNameKeepOneHeader) {
  tprobe::test::temp_dir dir;
  { precheck_files a(dir.path(), "20260101000000", dialect::msprobe_head); }
  precheck_files b(dir.path(), "20260101000000", dialect::msprobe_head);  // as msprobe: header only when new
  EXPECT_EQ(count(slurp(b.result_path()), "API name"), 1u);
}

TEST(PrecheckFiles, ReaderTakesMsprobesOwnFile) {
  // The start of a details file msprobe 8.3.3 wrote (numpy str floats, " ", a quoted message).
  const std::string text = bom + vectors::v1_gpu_833_details;
  const csv_table t = parse_csv_table(text, "gpu.csv");
  EXPECT_EQ(t.header, detail_header());
  ASSERT_EQ(t.rows.size(), 5u);
  EXPECT_EQ(t.rows[0][5], "2.021552e-07");
  EXPECT_EQ(*parse_float_cell(t.rows[0][5]), 2.021552e-07);
  EXPECT_EQ(t.rows[0][3], "(2, 4)");
  EXPECT_EQ(t.rows[0][6], " ");
  EXPECT_EQ(t.rows[4][22], "Compare algorithm is not supported for int64 data. Only judged by Error Rate.\n");
  // LF-only files and a missing final newline read the same.
  const csv_table lf = parse_csv_table("a,b\n1,\"x\ny\"", "lf.csv");
  EXPECT_EQ(lf.rows, (std::vector<std::vector<std::string>>{{"1", "x\ny"}}));
  EXPECT_THROW((void)parse_csv_table("a,b\r\n1,\"open", "bad.csv"), usage_error);
  EXPECT_THROW((void)parse_csv_table(bom, "empty.csv"), usage_error);
  EXPECT_THROW((void)read_csv_table("/nonexistent/x.csv"), system_error);
}

}  // namespace
}  // namespace tprobe::precheck
