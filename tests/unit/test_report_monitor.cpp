// tools/report over a monitor output folder (report_read_monitor, report_scan, the summary line and
// the page's data) in process, on files the stage itself wrote: tprobe-monitor run through the
// stage harness on two ranks, rank 1's norm tripled at step 2 (AnomalyTurbulence). The browser
// side: tests/python/test_report_monitor.py.
#include <filesystem>
#include <regex>

#include <gtest/gtest.h>

#include "errors.h"
#include "monitor.h"
#include "monitor/monitor_stage.h"
#include "monitor_record.h"
#include "report/report.h"
#include "stage_harness.h"
#include "test_support.h"

namespace tprobe {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

record session(int32_t rank, const std::string &out) {
  const ojson doc = {{"wg_distribution", true}, {"ops", {"norm", "mean"}}, {"step_count_per_record", 2},
                     {"alert", {{"rules", {{{"rule_name", "AnomalyTurbulence"}, {"args", {{"threshold", 0.5}}}}}},
                                {"dump", true}}}};
  record r(record_kind::session);
  r.header.run = "run" + std::to_string(rank);
  r.header.rank = rank;
  r.header.meta = {{"task", "monitor"}, {"output_dir", out}, {"monitor", monitor_config_from_json(doc, "test").json}};
  return r;
}

record grads(int32_t rank, int64_t step) {
  monitor_rows rows;
  rows.step = step;
  rows.ops = {"norm", "mean", "shape", "dtype"};
  const double s = rank == 1 && step == 2 ? 3 : 1;
  const std::string r = "/rank" + std::to_string(rank) + "/post_grad";
  rows.rows.push_back({"0:fc.weight" + r, {{2.0 * s, false}, {0.5, false}}, std::vector<int64_t>{2, 2}, "torch.float32"});
  rows.rows.push_back({"0:fc.bias" + r, {{NAN, false}, {NAN, false}}, std::vector<int64_t>{2}, "torch.float32"});
  record_header h;
  h.run = "run" + std::to_string(rank);
  h.rank = rank;
  return monitor_record_make(std::move(h), "grad_reduced", rows);
}

TEST(ReportMonitor, ReadsTheStagesFilesIntoSeriesAndAnomalies) {
  test::temp_dir dir;
  const std::string out = dir / "monitor_output";
  std::vector<record> input;
  for (int32_t rank : {0, 1}) {
    input.push_back(session(rank, out));
    for (int64_t step = 0; step < 3; ++step) input.push_back(grads(rank, step));
  }
  test::stage_harness h;
  h.run([&](stage_io &io) { (void)monitor_stage_run(io, {}); }, input);

  const report_monitor m = report_read_monitor(out);
  EXPECT_EQ(m.ranks, (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(m.csv_files.size(), 4u);  // grad_reduced_0-1 and _2-3 per rank
  ASSERT_EQ(m.types.size(), 1u);
  EXPECT_EQ(m.types[0].prefix, "grad_reduced");
  EXPECT_EQ(m.types[0].ops, (std::vector<std::string>{"norm", "mean"}));
  ASSERT_EQ(m.types[0].tags.size(), 2u);
  const auto &weight = m.types[0].tags[0];
  EXPECT_EQ(weight.name, "0:fc.weight");
  ASSERT_EQ(weight.ranks.size(), 2u);
  EXPECT_EQ(weight.ranks[1].rank, 1);
  EXPECT_EQ(weight.ranks[1].steps, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(weight.ranks[1].values[0], (std::vector<double>{2.0, 2.0, 6.0}));
  EXPECT_TRUE(std::isnan(m.types[0].tags[1].ranks[0].values[0][2]));
  ASSERT_EQ(m.anomalies.size(), 1u);
  const auto &a = m.anomalies[0];
  EXPECT_EQ(std::make_tuple(a.rank, a.step, a.tag_name, a.name, a.prefix, a.op),
            std::make_tuple(int64_t{1}, int64_t{2}, std::string("0:fc.weight/rank1/post_grad"), std::string("0:fc.weight"),
                            std::string("grad_reduced"), std::string("norm")));

  report_options o;
  o.results = {out};
  const report_model model = report_scan(o);
  ASSERT_EQ(model.monitors.size(), 1u);
  EXPECT_TRUE(model.negative());
  const auto lines = report_summary_lines(model, "");
  EXPECT_EQ(lines[0], "tprobe-report: monitor " + out + ": FAIL: 1 anomaly; 2 tags in 4 csv files, 2 ranks, steps 0-2; "
                      "first step 2 rank 1 0:fc.weight/rank1/post_grad norm");
  const std::string page = report_render_html(model);
  EXPECT_NE(page.find("\"monitors\":[{\"dir\":\"" + out + "\""), std::string::npos);
  EXPECT_NE(page.find("\"v\":[[2.0,2.0,6.0],[0.5,0.5,0.5]]"), std::string::npos);
  EXPECT_NE(page.find("\"v\":[[\"nan\",\"nan\",\"nan\"]"), std::string::npos);
}

TEST(ReportMonitor, RankFolderNamesAndMalformedFiles) {
  EXPECT_TRUE(report_is_monitor_rank_dir("Dec06_21-05-09-rank0-1a2b3c4d"));
  EXPECT_TRUE(report_is_monitor_rank_dir(monitor_rank_dir_name(1733497509, 12, "0123abcd")));
  EXPECT_FALSE(report_is_monitor_rank_dir("rank0"));
  EXPECT_FALSE(report_is_monitor_rank_dir("Dec06_21-05-09-rank0-1a2b3c4"));
  test::temp_dir dir;
  EXPECT_THROW((void)report_read_monitor(dir.path()), usage_error);  // neither rank folders nor anomalies
  fs::create_directories(dir / "Dec06_21-05-09-rank0-1a2b3c4d");
  test::write_file(dir / "Dec06_21-05-09-rank0-1a2b3c4d/actv_0-0.csv", "a,b,c\n1,2,3\n");
  try {
    (void)report_read_monitor(dir.path());
    ADD_FAILURE() << "a foreign csv was read";
  } catch (const usage_error &e) {
    EXPECT_NE(std::string(e.what()).find("not a monitor csv"), std::string::npos) << e.what();
  }
  test::write_file(dir / "Dec06_21-05-09-rank0-1a2b3c4d/actv_0-0.csv", "vpp_stage,name,step,norm\n0,x,1,abc\n");
  EXPECT_THROW((void)report_read_monitor(dir.path()), usage_error);
  fs::remove(dir / "Dec06_21-05-09-rank0-1a2b3c4d/actv_0-0.csv");
  fs::create_directories(dir / "anomaly_detected/rank0");
  test::write_file(dir / "anomaly_detected/rank0/anomaly.json", "{\"k\": {\"step\": 1}}");
  EXPECT_THROW((void)report_read_monitor(dir.path()), usage_error);  // no tag_name
}

}  // namespace
}  // namespace tprobe
