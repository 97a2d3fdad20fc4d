// The real tprobe-monitor binary over a real socket (ipc in a temp dir, no fixed port): a producer
// sends a session (the monitor config, output_dir) and grad_reduced rows of three steps, the norm
// tripled at step 2; the csv files appear in the rank folder as msprobe writes them, the alarm on
// stderr the moment it fires, anomaly.json, the summary line, exit 0. A record before its session
// or an output_dir msprobe refuses: the fatal line, exit 100. `tprobe monitor-anomaly` (msprobe's
// spellings) over anomaly_detected/, and `tprobe report` over the output: the monitor line, exit 1.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <zmq.hpp>

#include "endpoint.h"
#include "errors.h"
#include "monitor.h"
#include "monitor_record.h"
#include "pyjson.h"
#include "record.h"
#include "test_support.h"

namespace tprobe {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

monitor_rows grads(int64_t step) {
  monitor_rows rows;
  rows.step = step;
  rows.ops = {"norm", "nans", "shape", "dtype"};
  const double norm = step == 2 ? 6.0 : 2.0;
  rows.rows = {{"0:fc.weight/rank0/post_grad", {{norm, false}, {0, true}}, std::vector<int64_t>{2, 2}, "torch.float32"}};
  return rows;
}

// Runs the stage, sends the session (unless not) and steps 0..2, returns {status, stderr}.
std::pair<int, std::string> run_stage(const test::temp_dir &dir, const std::string &output_dir, bool with_session = true) {
  const std::string in = test::ipc_endpoint(dir, "monitor.in");
  test::child_process stage({test::bin("tprobe-monitor"), "--input", in, "--producers", "1"}, dir.path(), {}, true);
  stage.wait_ready();
  {
    zmq::context_t ctx;
    record_sender sender(ctx, in, "e2e-producer");
    record session(record_kind::session);
    session.header.run = "e2e";
    session.header.rank = 0;
    const ojson config = {{"wg_distribution", true}, {"ops", {"norm", "nans"}},
                          {"alert", {{"rules", {{{"rule_name", "AnomalyTurbulence"}, {"args", {{"threshold", 0.5}}}}}},
                                     {"dump", true}}}};
    session.header.meta = {{"task", "monitor"}, {"output_dir", output_dir},
                           {"monitor", monitor_config_from_json(config, "e2e config").json}};
    uint64_t sent = 0;
    if (with_session) sender.send(session), ++sent;
    for (int64_t step = 0; step < 3; ++step) {
      record_header h;
      h.run = "e2e";
      h.rank = 0;
      sender.send(monitor_record_make(std::move(h), "grad_reduced", grads(step)));
      ++sent;
    }
    try {
      sender.finish(sent, 0);
    } catch (const system_error &) {
      // A stage that refused the stream is gone before it answers the end: its exit says why.
    }
  }
  const int status = stage.wait();
  return {status, stage.err()};
}

TEST(MonitorStageE2e, WritesTheCsvFilesAnomalyJsonAndPrintsTheAlarm) {
  test::temp_dir dir;
  const std::string out = dir / "monitor_output";
  const auto [status, err] = run_stage(dir, out);
  EXPECT_EQ(status, 0) << err;
  std::vector<std::string> rank_dirs;
  for (const auto &e : fs::directory_iterator(out))
    if (e.path().filename() != "anomaly_detected") rank_dirs.push_back(e.path().string());
  ASSERT_EQ(rank_dirs.size(), 1u);
  const std::string header = "vpp_stage,name,step,norm,nans,shape,dtype\n";
  // step_count_per_record 1 (the default): a file per step.
  EXPECT_EQ(test::read_file(rank_dirs[0] + "/grad_reduced_0-0.csv"), header + "0,fc.weight,0,2.0,0,\"[2, 2]\",torch.float32\n");
  EXPECT_EQ(test::read_file(rank_dirs[0] + "/grad_reduced_2-2.csv"), header + "0,fc.weight,2,6.0,0,\"[2, 2]\",torch.float32\n");
  const std::string alarm = "Rule AnomalyTurbulence reports anomaly signal in ('0:fc.weight/rank0/post_grad', 'norm') at "
                            "step 2, current value 6.0, history mean 2.0.";
  EXPECT_NE(err.find("tprobe-monitor: " + alarm + "\n"), std::string::npos) << err;
  EXPECT_NE(err.find("tprobe-monitor: 1 anomalies, 3 rows in 3 csv files, 0 TensorBoard scalars, 1 rank folders, 4 records, "
                     "1 producers, 0 truncated\n"),
            std::string::npos)
      << err;
  const ojson doc = pyjson_load_file(out + "/anomaly_detected/rank0/anomaly.json");
  ASSERT_EQ(doc.size(), 1u);
  EXPECT_EQ(doc.begin().value()["message"], alarm);

  // msprobe's sorter with msprobe's spellings over the stage's anomaly_detected/.
  auto m = test::run_process({test::bin("tprobe"), "monitor-anomaly", "--data_path", out + "/anomaly_detected",
                              "--topk", "1", "-s", "[2]"});
  EXPECT_EQ(m.status, 0) << m.out << m.err;
  EXPECT_EQ(m.out, "tprobe-monitor-anomaly: Top 1 anomalies are listed as follows:\ntprobe-monitor-anomaly: 0: " + alarm +
                       "\ntprobe-monitor-anomaly: 1 anomalies in 1 anomaly.json files; " + out +
                       "/anomaly_detected/anomaly_analyse.json\n");
  EXPECT_EQ(pyjson_load_file(out + "/anomaly_detected/anomaly_analyse.json"), doc);
  m = test::run_process({test::bin("tprobe"), "monitor-anomaly", "-d", out + "/anomaly_detected", "-s", "[x]"});
  EXPECT_EQ(m.status, 100) << m.out << m.err;
  EXPECT_NE(m.err.find("tprobe-monitor-anomaly: fatal: --step \"[x]\": the step list must be a list of integers"),
            std::string::npos)
      << m.err;
  m = test::run_process({test::bin("tprobe"), "monitor-anomaly", "-d", out + "/anomaly_detected", "-k", "0"});
  EXPECT_EQ(m.status, 100) << m.out << m.err;

  // The report over the monitor folder: its line, FAIL for the anomaly.
  auto r = test::run_process({test::bin("tprobe"), "report", out, "-o", dir / "r.html"});
  EXPECT_EQ(r.status, 1) << r.out << r.err;
  EXPECT_NE(r.out.find("tprobe-report: monitor " + out + ": FAIL: 1 anomaly; 1 tags in 3 csv files, 1 rank, steps 0-2; "
                       "first step 2 rank 0 0:fc.weight/rank0/post_grad norm\n"),
            std::string::npos)
      << r.out;
}

TEST(MonitorStageE2e, AnOutputDirMsprobeRefusesIsAUsageError) {
  test::temp_dir dir;
  const auto [status, err] = run_stage(dir, dir / "a b");
  EXPECT_EQ(status, 100) << err;
  EXPECT_NE(err.find("tprobe-monitor: fatal: output_dir \"" + dir / "a b" +
                     "\": contains characters outside [a-zA-Z0-9_./-]"),
            std::string::npos)
      << err;
  EXPECT_FALSE(fs::exists(dir / "a b"));
}

TEST(MonitorStageE2e, ARecordBeforeItsSessionIsAUsageError) {
  test::temp_dir dir;
  const auto [status, err] = run_stage(dir, dir / "out", false);
  EXPECT_EQ(status, 100) << err;
  EXPECT_NE(err.find("tprobe-monitor: fatal: "), std::string::npos) << err;
  EXPECT_NE(err.find("monitor record before its session record"), std::string::npos) << err;
  EXPECT_FALSE(fs::exists(dir / "out"));
}

}  // namespace
}  // namespace tprobe
