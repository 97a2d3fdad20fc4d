// tools/report: task free_benchmark's files on the report (issue 62 item 3): msprobe 8.3.3's V-3
// rows and the doc figure's row verbatim (docs/msprobe-compat.md §8.8), found in a dump's step*/rank*/
// folders and nowhere else there, ordered by step and rank; every row listed, each a failure of
// the verdict; a file with its header alone a pass; files the stage writes read back equal; the
// terminal line and the page's data; malformed files named once, never a pass.
#include <algorithm>
#include <filesystem>
#include <regex>

#include <gtest/gtest.h>

#include "errors.h"
#include "free_benchmark.h"
#include "free_benchmark/free_benchmark_stage.h"
#include "report/report.h"
#include "test_support.h"

namespace tprobe {
namespace {

using json = nlohmann::ordered_json;

const std::string header = "rank,pert_mode,stage,step,api_name,max_rel,dtype,shape,output_index\r\n";

// §8.8 V-3 (step 3) and the doc figure's row (step 2), verbatim.
const std::string v3 = header +
                       "0,improve_precision,forward,3,Torch.add.0.forward,0.004049780885728493,torch.float16,torch.Size([2]),\r\n"
                       "0,improve_precision,forward,3,Torch.mul.1.forward,symbol_flipping,torch.float16,torch.Size([3]),\r\n"
                       "0,bit_noise,forward,3,Functional.softmax.0.forward,0.00024998475230142425,torch.float32,\"torch.Size([2, 2])\",1\r\n";
const std::string figure =
    header + "0,improve_precision,forward,2,Torch.matmul.40.forward,0.022563696,torch.float16,\"torch.Size([4096, 4, 192])\",\r\n";

void put(const std::string &path, const std::string &text) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  test::write_file(path, text);
}

report_options options(std::vector<std::string> results) {
  report_options o;
  o.results = std::move(results);
  return o;
}

json page_data(const std::string &html) {
  const std::string open = "<script type=\"application/json\" id=\"tprobe-data\">";
  const size_t a = html.find(open) + open.size();
  std::string text = html.substr(a, html.find("</script>", a) - a);
  text = std::regex_replace(text, std::regex("<\\\\/"), "</");
  return json::parse(text);
}

TEST(ReportFreeBenchmark, ReadsMsprobesRowsFromADumpsStepAndRankFolders) {
  test::temp_dir tmp;
  const std::string dump = tmp / "dump";
  put(dump + "/step3/rank0/free_benchmark.csv", v3);
  put(dump + "/step2/rank/free_benchmark.csv", figure);  // not distributed: msprobe's "rank" folder
  put(dump + "/step10/rank1/free_benchmark.csv", header);
  // The rest of a dump's step folder is not a result: a compare result there is not read.
  put(dump + "/step3/rank0/dump.json", "{}");
  put(dump + "/step3/rank0/compare_result_x.csv", "not,a,compare\r\n");
  const report_model m = report_scan(options({dump}));
  EXPECT_TRUE(m.unread.empty()) << m.unread.front();
  EXPECT_TRUE(m.compares.empty());
  ASSERT_EQ(m.free_benchmarks.size(), 3u);
  // By step, then rank: step2 < step3 < step10.
  EXPECT_EQ(report_free_benchmark_label(m.free_benchmarks[0]), "dump/step2/rank");
  EXPECT_EQ(report_free_benchmark_label(m.free_benchmarks[1]), "dump/step3/rank0");
  EXPECT_EQ(report_free_benchmark_label(m.free_benchmarks[2]), "dump/step10/rank1");
  const auto &fig = m.free_benchmarks[0].rows;
  ASSERT_EQ(fig.size(), 1u);
  EXPECT_EQ(fig[0].api_name, "Torch.matmul.40.forward");
  EXPECT_EQ(fig[0].max_rel, "0.022563696");
  EXPECT_EQ(fig[0].max_rel_value, 0.022563696);
  EXPECT_EQ(fig[0].shape, "torch.Size([4096, 4, 192])");
  EXPECT_EQ(fig[0].step, 2);
  EXPECT_FALSE(fig[0].output_index);
  const auto &rows = m.free_benchmarks[1].rows;
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].max_rel, "symbol_flipping");
  EXPECT_FALSE(rows[1].max_rel_value);
  EXPECT_EQ(rows[2].pert_mode, "bit_noise");
  EXPECT_EQ(rows[2].dtype, "torch.float32");
  EXPECT_EQ(rows[2].output_index, 1);
  EXPECT_TRUE(m.free_benchmarks[1].negative());
  EXPECT_FALSE(m.free_benchmarks[2].negative());
  EXPECT_TRUE(m.negative());

  const auto lines = report_summary_lines(m, "");
  EXPECT_NE(std::find(lines.begin(), lines.end(),
                      "tprobe-report: free_benchmark: FAIL: 4 inconsistent API calls in 3 free_benchmark.csv files; "
                      "first step 2 rank 0 Torch.matmul.40.forward (improve_precision, max_rel 0.022563696, torch.float16)"),
            lines.end())
      << lines.front();
  EXPECT_EQ(lines.back(), "tprobe-report: verdict: FAIL");

  const json d = page_data(report_render_html(m));
  ASSERT_EQ(d["free_benchmark"]["files"].size(), 3u);
  EXPECT_EQ(d["free_benchmark"]["files"][1]["rows"], 3);
  ASSERT_EQ(d["free_benchmark"]["rows"].size(), 4u);
  const json last = {3, 0, "Functional.softmax.0.forward", "bit_noise", "forward", "0.00024998475230142425",
                    "torch.float32", "torch.Size([2, 2])", 1, 1};  // [..., output_index, file index]
  EXPECT_EQ(d["free_benchmark"]["rows"][3], last);
  EXPECT_EQ(d["negative"], true);

  // A step folder or a rank folder given, or the file itself: the same file.
  for (const auto &given : {dump + "/step3", dump + "/step3/rank0", dump + "/step3/rank0/free_benchmark.csv"}) {
    const report_model one = report_scan(options({given}));
    ASSERT_EQ(one.free_benchmarks.size(), 1u) << given;
    EXPECT_EQ(one.free_benchmarks[0].rows.size(), 3u) << given;
  }
}

TEST(ReportFreeBenchmark, HeaderAloneIsAPass) {
  test::temp_dir tmp;
  put(tmp / "dump/step0/rank0/free_benchmark.csv", header);
  const report_model m = report_scan(options({tmp / "dump"}));
  ASSERT_EQ(m.free_benchmarks.size(), 1u);
  EXPECT_FALSE(m.negative());
  const auto lines = report_summary_lines(m, "r.html");
  EXPECT_EQ(lines, (std::vector<std::string>{
                       "tprobe-report: free_benchmark: PASS: 0 inconsistent API calls in 1 free_benchmark.csv file",
                       "tprobe-report: verdict: PASS; report r.html"}));
}

// What the stage writes (its append and core's csv line) is what the report reads.
TEST(ReportFreeBenchmark, ReadsBackWhatTheStageWrites) {
  test::temp_dir tmp;
  std::filesystem::create_directories(tmp / "dump/step7/rank3");
  const std::string csv = tmp / "dump/step7/rank3/free_benchmark.csv";
  std::vector<free_benchmark_row> rows(3);
  rows[0].rank = 3, rows[0].pert_mode = "add_noise", rows[0].stage = "forward", rows[0].step = 7;
  rows[0].api_name = "Tensor.__matmul__.2.forward", rows[0].ratio = 1.25, rows[0].dtype = "torch.bfloat16";
  rows[0].shape = {8, 16};
  rows[1] = rows[0];
  rows[1].stage = "backward", rows[1].api_name = "Tensor.__matmul__.2.backward", rows[1].output_index = 0;
  rows[1].verdict = free_benchmark_row::kind::symbol_flipping;
  rows[2] = rows[0];
  rows[2].pert_mode = "to_cpu", rows[2].verdict = free_benchmark_row::kind::none, rows[2].shape = {};
  for (const auto &r : rows) (void)free_benchmark_csv_append(csv, free_benchmark_csv_line(r));
  const report_free_benchmark f = report_read_free_benchmark(csv);
  ASSERT_EQ(f.rows.size(), 3u);
  for (size_t i = 0; i < rows.size(); ++i) {
    SCOPED_TRACE(i);
    EXPECT_EQ(f.rows[i].rank, rows[i].rank);
    EXPECT_EQ(f.rows[i].step, rows[i].step);
    EXPECT_EQ(f.rows[i].pert_mode, rows[i].pert_mode);
    EXPECT_EQ(f.rows[i].stage, rows[i].stage);
    EXPECT_EQ(f.rows[i].api_name, rows[i].api_name);
    EXPECT_EQ(f.rows[i].max_rel, free_benchmark_max_rel_text(rows[i]));
    EXPECT_EQ(f.rows[i].dtype, rows[i].dtype);
    EXPECT_EQ(f.rows[i].shape, free_benchmark_shape_text(rows[i].shape));
    EXPECT_EQ(f.rows[i].output_index, rows[i].output_index);
  }
  EXPECT_EQ(f.rows[0].max_rel_value, 0.25);
  EXPECT_EQ(f.rows[2].max_rel, "");
}

TEST(ReportFreeBenchmark, MalformedFilesAreNamedOnceAndFail) {
  test::temp_dir tmp;
  put(tmp / "good/step0/rank0/free_benchmark.csv", header);
  const std::string row = "0,add_noise,forward,1,Torch.add.0.forward,0.5,torch.float32,torch.Size([2]),";
  struct bad {
    std::string name, text, says;
  };
  const std::vector<bad> cases = {
      {"empty", "", "empty file, no header"},
      {"header", "rank,pert_mode,stage,step,api_name,max_rel,dtype,shape\r\n", "not msprobe's free_benchmark.csv"},
      {"truncated", header + row.substr(0, 40), "row 2: 5 cells, not 9"},
      {"quote", header + row + "\r\n0,add_noise,forward,1,Torch.add.1.forward,0.5,torch.float32,\"torch.Size([2, ",
       "a quoted cell is not closed"},
      {"rank", header + "x" + row.substr(1) + "\r\n", "row 2: rank \"x\" is not an integer"},
      {"step", header + row + "\r\n" + "0,add_noise,forward,1.5,Torch.add.1.forward,0.5,torch.float32,x,\r\n",
       "row 3: step \"1.5\" is not an integer"},
      {"stage", header + "0,add_noise,sideways,1,Torch.add.0.forward,0.5,torch.float32,x,\r\n", "stage \"sideways\""},
      {"max_rel", header + "0,add_noise,forward,1,Torch.add.0.forward,big,torch.float32,x,\r\n", "max_rel \"big\""},
      {"index", header + "0,add_noise,forward,1,Torch.add.0.forward,0.5,torch.float32,x,one\r\n", "output_index \"one\""},
  };
  for (const auto &c : cases) {
    SCOPED_TRACE(c.name);
    const std::string file = tmp / (c.name + "/step1/rank0/free_benchmark.csv");
    put(file, c.text);
    const report_model m = report_scan(options({tmp / "good", tmp / c.name}));
    ASSERT_EQ(m.free_benchmarks.size(), 1u);  // the good one
    ASSERT_EQ(m.unread.size(), 1u);
    EXPECT_EQ(m.unread[0].rfind(file + ": ", 0), 0u) << m.unread[0];
    EXPECT_NE(m.unread[0].find(c.says), std::string::npos) << m.unread[0];
    EXPECT_TRUE(m.negative());  // never a pass over a file not read
    const auto lines = report_summary_lines(m, "");
    EXPECT_EQ(std::count_if(lines.begin(), lines.end(),
                            [](const std::string &l) { return l.find("ERROR: result not read: ") != std::string::npos; }),
              1);
    EXPECT_EQ(lines.back(), "tprobe-report: verdict: FAIL");
  }
  // A malformed file alone: nothing was read, the usage error names it (exit 100).
  try {
    (void)report_scan(options({tmp / "rank"}));
    FAIL() << "no usage_error";
  } catch (const usage_error &e) {
    EXPECT_NE(std::string(e.what()).find("not read: " + (tmp / "rank/step1/rank0/free_benchmark.csv")), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace tprobe
