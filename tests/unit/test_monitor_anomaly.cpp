// tools/monitor_anomaly (tprobe monitor-anomaly, msprobe's anomaly_processor) in process: every
// rank folder's anomaly.json read, a value msprobe's loader skips skipped with a warning, the step
// filter, msprobe's order (step, micro_step, train stage, vpp/pp smaller first in the forward and
// larger first elsewhere, call_id), the top k, anomaly_analyse.json with each entry's own key
// (indent 1), the refusals. The binary: tests/e2e/test_monitor_stage.cpp.
#include <filesystem>

#include <gtest/gtest.h>

#include "errors.h"
#include "monitor_anomaly/monitor_anomaly.h"
#include "pyjson.h"
#include "test_support.h"

namespace tprobe {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

ojson value(int64_t rank, int64_t step, int64_t pp, int64_t call_id, const std::string &tag, const std::string &op) {
  return {{"rank", rank}, {"step", step}, {"micro_step", 0}, {"pp_stage", pp}, {"vpp_stage", 0}, {"call_id", call_id},
          {"tag_name", tag},
          {"message", "Rule AnomalyTurbulence reports anomaly signal in ('" + tag + "', '" + op + "') at step " +
                          std::to_string(step) + ", current value 3.0, history mean 1.0."},
          {"group_mates", {0, 1}}};
}

void write_json(const std::string &path, const ojson &doc) {
  fs::create_directories(fs::path(path).parent_path());
  test::write_file(path, pyjson_dump(doc, 1));
}

// Two ranks (pp stages 0 and 1): A, D forward at step 2; E, F backward at step 2; C optimizer at
// step 2; B backward at step 1; one value msprobe's loader skips (an unknown key).
std::string make_anomalies(const test::temp_dir &dir) {
  const std::string root = dir / "anomaly_detected";
  ojson rank0 = ojson::object(), rank1 = ojson::object();
  rank0["A"] = value(0, 2, 0, -1, "0:fc.input:0/rank0/actv", "norm");
  rank0["B"] = value(0, 1, 0, 5, "0:fc.weight/rank0/post_grad", "norm");
  rank0["C"] = value(0, 2, 0, 9, "0:fc.weight/rank0/exp_avg", "mean");
  rank0["F"] = value(0, 2, 0, 2, "0:fc.weight/rank0/post_grad", "mean");
  rank1["D"] = value(1, 2, 1, -1, "0:fc.input:0/rank1/actv", "norm");
  rank1["E"] = value(1, 2, 1, 3, "0:fc.weight/rank1/post_grad", "norm");
  ojson bad = value(1, 0, 1, 0, "0:x/rank1/actv", "norm");
  bad["op"] = "norm";
  rank1["bad"] = bad;
  write_json(root + "/rank0/anomaly.json", rank0);
  write_json(root + "/rank1/anomaly.json", rank1);
  fs::create_directories(root + "/rank2");  // a folder without anomaly.json: nothing to read
  return root;
}

std::vector<std::string> keys_of(const monitor_anomaly_result &r) {
  std::vector<std::string> keys;
  for (const auto &[k, v] : r.top) keys.push_back(k);
  return keys;
}

TEST(MonitorAnomaly, KeepsTheTopKInMsprobesOrderWithTheirKeys) {
  test::temp_dir dir;
  const std::string root = make_anomalies(dir);
  monitor_anomaly_options o;
  o.data_path = root;
  const auto all = monitor_anomaly_run(o);
  EXPECT_EQ(all.files, (std::vector<std::string>{root + "/rank0/anomaly.json", root + "/rank1/anomaly.json"}));
  EXPECT_EQ(all.anomalies, 7u);
  ASSERT_EQ(all.warnings.size(), 1u);
  EXPECT_EQ(all.warnings[0], root + "/rank1/anomaly.json: bad: unexpected keyword argument 'op'");
  // Step 1 first; at step 2 the forward (pp 0 before pp 1), the backward (pp 1 before pp 0), the optimizer.
  EXPECT_EQ(keys_of(all), (std::vector<std::string>{"B", "A", "D", "E", "F", "C"}));
  EXPECT_EQ(all.output, root + "/anomaly_analyse.json");
  const std::string text = test::read_file(all.output);
  const ojson doc = pyjson_parse(text, all.output);
  EXPECT_EQ(text, pyjson_dump(doc, 1));
  std::vector<std::string> keys;
  for (const auto &[k, v] : doc.items()) keys.push_back(k);
  EXPECT_EQ(keys, keys_of(all));
  EXPECT_EQ(doc["E"].dump(), value(1, 2, 1, 3, "0:fc.weight/rank1/post_grad", "norm").dump());

  o.steps = "[2]";
  o.top_k = 3;
  o.out_path = dir / "out";
  fs::create_directories(o.out_path);
  const auto some = monitor_anomaly_run(o);
  EXPECT_EQ(keys_of(some), (std::vector<std::string>{"A", "D", "E"}));
  EXPECT_EQ(some.output, dir / "out/anomaly_analyse.json");
  EXPECT_EQ(pyjson_load_file(some.output).size(), 3u);
}

TEST(MonitorAnomaly, Refusals) {
  test::temp_dir dir;
  const std::string root = make_anomalies(dir);
  EXPECT_EQ(monitor_anomaly_steps_parse("[]"), std::vector<int64_t>{});
  EXPECT_EQ(monitor_anomaly_steps_parse("[1, 2]"), (std::vector<int64_t>{1, 2}));
  for (const std::string bad : {"2", "[1.5]", "[\"a\"]", "(1, 2)", ""})
    EXPECT_THROW((void)monitor_anomaly_steps_parse(bad), usage_error) << bad;
  monitor_anomaly_options o;
  o.data_path = root;
  o.top_k = 0;
  EXPECT_THROW((void)monitor_anomaly_run(o), usage_error);
  o.top_k = 8;
  o.out_path = dir / "missing";
  EXPECT_THROW((void)monitor_anomaly_run(o), usage_error);
  o.out_path.clear();
  o.data_path = dir / "nothing";
  EXPECT_THROW((void)monitor_anomaly_run(o), usage_error);
  test::write_file(root + "/rank0/anomaly.json", "[1, 2]");
  o.data_path = root;
  EXPECT_THROW((void)monitor_anomaly_run(o), usage_error);
}

}  // namespace
}  // namespace tprobe
