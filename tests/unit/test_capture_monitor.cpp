// Task monitor through the capture's C API (tprobe_capture.h): tprobe_monitor_open validates a
// monitor config as core/monitor.h does (one line naming the file and the field), opens a session
// whose dump_path is $MONITOR_OUTPUT_DIR and whose session record carries the validated config;
// tprobe_capture_monitor sends one record per call (transport/monitor_record.h) with the session's
// rank and the caller's step; stack_info travels as one record; the process group (pp_stage,
// group_mates) travels in the session meta; a stage turns the monitor off and on through the
// control path; a config.json asking for task "monitor" is refused.
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "capture_config.h"
#include "endpoint.h"
#include "monitor_record.h"
#include "record.h"
#include "test_support.h"
#include "tprobe_capture.h"

using namespace tprobe;

namespace {

// MONITOR_OUTPUT_DIR for one test, restored after.
struct output_dir_env {
  std::string old;
  bool had = false;
  explicit output_dir_env(const std::string &value) {
    if (const char *v = std::getenv("MONITOR_OUTPUT_DIR")) {
      old = v;
      had = true;
    }
    if (value.empty()) {
      ::unsetenv("MONITOR_OUTPUT_DIR");
    } else {
      ::setenv("MONITOR_OUTPUT_DIR", value.c_str(), 1);
    }
  }
  ~output_dir_env() {
    if (had) {
      ::setenv("MONITOR_OUTPUT_DIR", old.c_str(), 1);
    } else {
      ::unsetenv("MONITOR_OUTPUT_DIR");
    }
  }
  output_dir_env(const output_dir_env &) = delete;
  output_dir_env &operator=(const output_dir_env &) = delete;
};

struct monitor_session {
  test::temp_dir dir;
  std::string stream = dir / "capture.tpr";
  std::string out = dir / "monitor_output";
  output_dir_env env{out};
  tprobe_session *s = nullptr;

  explicit monitor_session(const std::string &config_text, int rank = -1) {
    const std::string config = dir / "monitor.json";
    test::write_file(config, config_text);
    tprobe_open_options o = tprobe_open_options_default();
    o.endpoint = stream.c_str();
    o.rank = rank;
    EXPECT_EQ(tprobe_monitor_open(config.c_str(), nullptr, &o, &s), TPROBE_OK) << tprobe_last_error();
  }
  ~monitor_session() { tprobe_session_close(s); }
  monitor_session(const monitor_session &) = delete;
  monitor_session &operator=(const monitor_session &) = delete;

  // Closes the session and reads the stream back: the session record's meta, the monitor records.
  std::pair<nlohmann::ordered_json, std::vector<record>> close_and_read() {
    EXPECT_EQ(tprobe_session_close(s), TPROBE_OK) << tprobe_last_error();
    s = nullptr;
    nlohmann::ordered_json session;
    std::vector<record> records;
    record_file_reader reader(stream);
    while (auto r = reader.read()) {
      if (r->header.kind == record_kind::session) session = r->header.meta;
      if (monitor_record_is(*r)) records.push_back(std::move(*r));
    }
    return {session, std::move(records)};
  }
};

// The rows of V-5's first step (core/monitor.h's test), as Python's json.dumps writes them.
const char *actv_rows =
    R"({"step": 4, "ops": ["min", "max", "norm", "mean", "zeros", "nans", "shape", "dtype"], "micro_step": true,
        "rows": [{"tag": "0:fc.input:0/rank1/actv", "values": [0.0, 5.0, 7.416198487095663, 2.5, 0.0, 0],
                  "shape": [2, 3], "dtype": "torch.float16"},
                 {"tag": "0:fc.output:0/rank1/actv", "values": [NaN, NaN, NaN, NaN, NaN, NaN], "shape": null, "dtype": null}]})";

}  // namespace

TEST(CaptureMonitor, rows_travel_as_records_with_rank_and_step) {
  monitor_session m(R"({"ops": ["min", "max", "norm", "mean", "zeros", "nans", "bogus"], "ndigits": 4,
                        "alert": {"rules": [{"rule_name": "AnomalyTurbulence", "args": {"threshold": 0.5}}], "dump": true}})",
                    1);
  ASSERT_NE(m.s, nullptr);
  // The session's config carries the validated monitor config.
  const char *text = tprobe_session_config(m.s);
  ASSERT_NE(text, nullptr);
  const auto cfg = nlohmann::ordered_json::parse(text);
  EXPECT_EQ(cfg["task"], "monitor");
  EXPECT_EQ(cfg["dump_path"], m.out);
  EXPECT_EQ(cfg["monitor"]["output_dir"], m.out);
  EXPECT_EQ(cfg["monitor"]["ops"].size(), 8u);
  EXPECT_EQ(cfg["monitor"]["ndigits"], 4);
  EXPECT_EQ(cfg["monitor"]["alert"]["dump"], true);
  ASSERT_EQ(cfg["monitor"]["warnings"].size(), 1u);
  EXPECT_THAT(cfg["monitor"]["warnings"][0].get<std::string>(), ::testing::StartsWith("op bogus is not supported"));

  ASSERT_EQ(tprobe_capture_monitor(m.s, "actv", 4, actv_rows), TPROBE_OK) << tprobe_last_error();
  const std::string grads =
      R"({"step": 5, "ops": ["norm", "shape", "dtype"], "micro_step": false,
          "rows": [{"tag": "0:fc.weight/rank1/post_grad", "values": [2.23606797749979], "shape": [2, 2], "dtype": "torch.float32",
                    "call_id": 7}]})";
  ASSERT_EQ(tprobe_capture_monitor(m.s, "grad_reduced", 5, grads.c_str()), TPROBE_OK) << tprobe_last_error();

  // Refused at the call: a prefix msprobe does not write, a step that disagrees, bad rows.
  EXPECT_EQ(tprobe_capture_monitor(m.s, "weights", 5, grads.c_str()), TPROBE_ERROR);
  EXPECT_THAT(tprobe_last_error(), ::testing::HasSubstr("prefix \"weights\""));
  EXPECT_EQ(tprobe_capture_monitor(m.s, "grad_reduced", 6, grads.c_str()), TPROBE_ERROR);
  EXPECT_THAT(tprobe_last_error(), ::testing::HasSubstr("the rows say step 5"));
  EXPECT_EQ(tprobe_capture_monitor(m.s, "grad_reduced", 5, R"({"step": 5, "ops": ["norm"], "rows": [{"tag": "t", "values": []}]})"),
            TPROBE_ERROR);
  EXPECT_THAT(tprobe_last_error(), ::testing::HasSubstr("rows[0].values"));
  EXPECT_EQ(tprobe_capture_monitor(m.s, "grad_reduced", 5, "{"), TPROBE_ERROR);
  EXPECT_EQ(tprobe_capture_monitor(m.s, "grad_reduced", 5, nullptr), TPROBE_ERROR);
  EXPECT_EQ(tprobe_capture_monitor(nullptr, "grad_reduced", 5, grads.c_str()), TPROBE_ERROR);

  auto [session, records] = m.close_and_read();
  EXPECT_EQ(session["task"], "monitor");
  EXPECT_EQ(session["rank"], 1);
  EXPECT_EQ(session["monitor"]["output_dir"], m.out);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(records[0].header.rank, 1);
  EXPECT_EQ(records[0].header.step, 4);
  const monitor_record_view actv = monitor_record_read(records[0]);
  EXPECT_EQ(actv.prefix, "actv");
  EXPECT_TRUE(actv.rows.micro_step);
  EXPECT_EQ(monitor_csv_lines(actv.rows, 6),
            "0,fc.input,4,0,0.0,5.0,7.416198,2.5,0.0,0.0,\"[2, 3]\",torch.float16\n"
            "0,fc.output,4,0,nan,nan,nan,nan,nan,nan,nan,nan\n");
  const monitor_record_view grad = monitor_record_read(records[1]);
  EXPECT_EQ(grad.prefix, "grad_reduced");
  EXPECT_EQ(grad.rows.step, 5);
  EXPECT_EQ(monitor_csv_lines(grad.rows, 6), "0,fc.weight,5,2.236068,\"[2, 2]\",torch.float32\n");
  // call_id travels (anomaly.json's), in the record's meta as sent.
  EXPECT_EQ(grad.rows.rows[0].call_id, 7);
  EXPECT_EQ(records[1].header.meta["monitor"]["rows"][0]["call_id"], 7);
  EXPECT_EQ(actv.rows.rows[0].call_id, -1);
  EXPECT_FALSE(records[0].header.meta["monitor"]["rows"][0].contains("call_id"));
}

TEST(CaptureMonitor, a_row_set_and_numbers_make_the_record_the_json_rows_make) {
  monitor_session m(R"({"ops": ["min", "max", "norm", "mean", "zeros", "nans"]})", 1);
  ASSERT_NE(m.s, nullptr);
  // actv_rows' fixed part: its values are templates (an int marks an int column).
  const int set = tprobe_monitor_rowset(m.s, actv_rows);
  ASSERT_GE(set, 0) << tprobe_last_error();
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double numbers[] = {0.0, 5.0, 7.416198487095663, 2.5, 0.0, 0.0, nan, nan, nan, nan, nan, nan};
  ASSERT_EQ(tprobe_capture_monitor(m.s, "actv", 4, actv_rows), TPROBE_OK) << tprobe_last_error();
  ASSERT_EQ(tprobe_capture_monitor_values(m.s, "actv", 4, set, numbers, 12), TPROBE_OK) << tprobe_last_error();
  // An int column's NaN stays a float; a whole int column is written as ints.
  const int ints = tprobe_monitor_rowset(m.s, R"({"step": 0, "ops": ["nans", "norm"], "micro_step": false,
      "rows": [{"tag": "0:a/rank1/post_grad", "values": [0, 0.0], "shape": [2], "dtype": "torch.int64"},
               {"tag": "0:b/rank1/post_grad", "values": [0, 0.0], "shape": [2], "dtype": "torch.int64"}]})");
  ASSERT_GE(ints, 0) << tprobe_last_error();
  const double counts[] = {3, 1.5, 2, 2.5};
  ASSERT_EQ(tprobe_capture_monitor_values(m.s, "grad_reduced", 9, ints, counts, 4), TPROBE_OK) << tprobe_last_error();
  const double with_nan[] = {3, 1.5, nan, 2.5};
  ASSERT_EQ(tprobe_capture_monitor_values(m.s, "grad_reduced", 10, ints, with_nan, 4), TPROBE_OK) << tprobe_last_error();
  // Refused: a count that does not fit, an unknown set, a bad template.
  EXPECT_EQ(tprobe_capture_monitor_values(m.s, "actv", 4, set, numbers, 11), TPROBE_ERROR);
  EXPECT_THAT(tprobe_last_error(), ::testing::HasSubstr("11 numbers for a row set of 12"));
  EXPECT_EQ(tprobe_capture_monitor_values(m.s, "actv", 4, set + 7, numbers, 12), TPROBE_ERROR);
  EXPECT_EQ(tprobe_monitor_rowset(m.s, "{"), TPROBE_ERROR);

  auto [session, records] = m.close_and_read();
  ASSERT_EQ(records.size(), 4u);
  EXPECT_EQ(records[1].header.meta.dump(), records[0].header.meta.dump());  // the same record meta
  const monitor_record_view whole = monitor_record_read(records[2]);
  EXPECT_EQ(whole.rows.step, 9);
  EXPECT_EQ(monitor_csv_lines(whole.rows, 6), "0,a,9,3,1.5\n0,b,9,2,2.5\n");
  const monitor_record_view holed = monitor_record_read(records[3]);
  EXPECT_EQ(monitor_csv_lines(holed.rows, 6), "0,a,10,3.0,1.5\n0,b,10,nan,2.5\n");
}

TEST(CaptureMonitor, output_dir_defaults_to_monitor_output_in_the_working_directory) {
  test::temp_dir dir;
  output_dir_env env("");
  const std::string config = dir / "monitor.json";
  test::write_file(config, R"({"ops": ["norm"]})");
  capture_config cfg = config_for_monitor(config);
  EXPECT_EQ(cfg.task, "monitor");
  EXPECT_THAT(cfg.dump_path, ::testing::EndsWith("/monitor_output"));
  EXPECT_EQ(cfg.dump_path.front(), '/');
  EXPECT_EQ(cfg.session_meta()["monitor"]["ops"], nlohmann::ordered_json::parse(R"(["norm", "shape", "dtype"])"));
}

TEST(CaptureMonitor, a_bad_monitor_config_fails_the_open_in_one_line) {
  test::temp_dir dir;
  output_dir_env env(dir / "out");
  const std::string config = dir / "monitor.json";
  const std::string stream = dir / "capture.tpr";
  tprobe_open_options o = tprobe_open_options_default();
  o.endpoint = stream.c_str();
  tprobe_session *s = nullptr;
  test::write_file(config, R"({"ndigits": 30})");
  EXPECT_EQ(tprobe_monitor_open(config.c_str(), nullptr, &o, &s), TPROBE_ERROR);
  EXPECT_EQ(s, nullptr);
  EXPECT_THAT(tprobe_last_error(), ::testing::StartsWith(config + ": field \"ndigits\": "));
  EXPECT_EQ(std::string(tprobe_last_error()).find('\n'), std::string::npos);
  test::write_file(config, R"({"eps": 0})");
  EXPECT_EQ(tprobe_monitor_open(config.c_str(), nullptr, &o, &s), TPROBE_ERROR);
  EXPECT_THAT(tprobe_last_error(), ::testing::StartsWith(config + ": field \"eps\": "));
  EXPECT_EQ(tprobe_monitor_open((dir / "absent.json").c_str(), nullptr, &o, &s), TPROBE_ERROR);
  EXPECT_EQ(tprobe_monitor_open(nullptr, nullptr, &o, &s), TPROBE_ERROR);
  EXPECT_EQ(tprobe_monitor_open(config.c_str(), nullptr, &o, nullptr), TPROBE_ERROR);
  // A MONITOR_OUTPUT_DIR outside msprobe's path rule.
  output_dir_env bad(dir / "out put");
  test::write_file(config, R"({})");
  EXPECT_EQ(tprobe_monitor_open(config.c_str(), nullptr, &o, &s), TPROBE_ERROR);
  EXPECT_THAT(tprobe_last_error(), ::testing::StartsWith("MONITOR_OUTPUT_DIR: "));
}

TEST(CaptureMonitor, config_json_with_task_monitor_points_to_trainermon) {
  test::temp_dir dir;
  const std::string config = dir / "config.json";
  test::write_file(config, R"({"task": "monitor", "dump_path": ")" + (dir / "dump") + R"("})");
  const char *checked = tprobe_config_check(config.c_str());
  EXPECT_EQ(checked, nullptr);
  EXPECT_THAT(tprobe_last_error(), ::testing::StartsWith(config + ": field \"task\": \"monitor\" is msprobe's TrainerMon"));
  EXPECT_THAT(tprobe_last_error(), ::testing::HasSubstr("TrainerMon(\"monitor.json\")"));
}

TEST(CaptureMonitor, other_tasks_skip_monitor_rows) {
  test::temp_dir dir;
  const std::string config = dir / "config.json";
  const std::string stream = dir / "capture.tpr";
  test::write_file(config, R"({"task": "statistics", "level": "L1", "dump_path": ")" + (dir / "dump") + R"("})");
  tprobe_open_options o = tprobe_open_options_default();
  o.endpoint = stream.c_str();
  tprobe_session *s = nullptr;
  ASSERT_EQ(tprobe_session_open(config.c_str(), &o, &s), TPROBE_OK) << tprobe_last_error();
  EXPECT_EQ(tprobe_capture_monitor(s, "actv", 4, actv_rows), TPROBE_SKIPPED);
  tprobe_session_counts c{};
  ASSERT_EQ(tprobe_session_counts_get(s, &c), TPROBE_OK);
  EXPECT_EQ(c.skipped, 1u);
  EXPECT_EQ(tprobe_session_close(s), TPROBE_OK) << tprobe_last_error();
}

TEST(CaptureMonitor, monitor_is_a_task_a_manifest_can_name) {
  EXPECT_THAT(config_task_names(), ::testing::Contains("monitor"));
  EXPECT_THAT(config_built_tasks(), ::testing::Contains("monitor"));
}

TEST(CaptureMonitor, the_process_group_travels_in_the_session_meta_and_is_checked) {
  test::temp_dir dir;
  output_dir_env env(dir / "out");
  const std::string config = dir / "monitor.json";
  test::write_file(config, R"({"ops": ["norm"]})");
  // Defaults: pp_stage the rank, group_mates [rank]; rank -1 (not distributed) counts as 0.
  capture_config plain = config_for_monitor(config, "", 3);
  EXPECT_EQ(plain.monitor["pp_stage"], 3);
  EXPECT_EQ(plain.monitor["group_mates"], nlohmann::ordered_json::parse("[3]"));
  EXPECT_EQ(config_for_monitor(config).monitor["group_mates"], nlohmann::ordered_json::parse("[0]"));
  const char *checked = tprobe_monitor_config_check(config.c_str(), R"({"pp_stage": 1, "group_mates": [2, 5]})");
  ASSERT_NE(checked, nullptr) << tprobe_last_error();
  const auto meta = nlohmann::ordered_json::parse(checked);
  EXPECT_EQ(meta["task"], "monitor");
  EXPECT_EQ(meta["monitor"]["pp_stage"], 1);
  EXPECT_EQ(meta["monitor"]["group_mates"], nlohmann::ordered_json::parse("[2, 5]"));
  for (const char *bad : {R"({"pp_stage": -1})", R"({"group_mates": []})", R"({"group_mates": ["a"]})",
                          R"({"pp": 1})", "[1]", "{"}) {
    EXPECT_EQ(tprobe_monitor_config_check(config.c_str(), bad), nullptr) << bad;
    EXPECT_THAT(tprobe_last_error(), ::testing::StartsWith("tprobe_monitor_open: group: ")) << bad;
  }
  // The check refuses what the open refuses, and opens nothing.
  test::write_file(config, R"({"ndigits": 30})");
  EXPECT_EQ(tprobe_monitor_config_check(config.c_str(), nullptr), nullptr);
  EXPECT_THAT(tprobe_last_error(), ::testing::StartsWith(config + ": field \"ndigits\": "));
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));

  // Through a session: its record's meta carries the group for tprobe-monitor.
  test::write_file(config, R"({"ops": ["norm"]})");
  const std::string stream = dir / "capture.tpr";
  tprobe_open_options o = tprobe_open_options_default();
  o.endpoint = stream.c_str();
  o.rank = 1;
  tprobe_session *s = nullptr;
  ASSERT_EQ(tprobe_monitor_open(config.c_str(), R"({"pp_stage": 1, "group_mates": [0, 1]})", &o, &s), TPROBE_OK)
      << tprobe_last_error();
  ASSERT_EQ(tprobe_session_close(s), TPROBE_OK);
  record_file_reader reader(stream);
  nlohmann::ordered_json session;
  while (auto r = reader.read())
    if (r->header.kind == record_kind::session) session = r->header.meta;
  EXPECT_EQ(session["monitor"]["pp_stage"], 1);
  EXPECT_EQ(session["monitor"]["group_mates"], nlohmann::ordered_json::parse("[0, 1]"));
}

TEST(CaptureMonitor, stack_info_travels_as_one_record) {
  monitor_session m(R"({"ops": ["norm"], "stack_info": true})");
  ASSERT_NE(m.s, nullptr);
  ASSERT_EQ(tprobe_capture_monitor(m.s, "stack_info", 0,
                                   R"({"step": 0, "stack_info": [["0:fc", "File \"t.py\", line 3, in <module>, \n x = 1"], ["0:", ""]]})"),
            TPROBE_OK)
      << tprobe_last_error();
  EXPECT_EQ(tprobe_capture_monitor(m.s, "stack_info", 0, R"({"step": 0, "stack_info": [["0:fc"]]})"), TPROBE_ERROR);
  EXPECT_THAT(tprobe_last_error(), ::testing::HasSubstr("\"stack_info\"[0] must be [module_name, stack]"));
  EXPECT_EQ(tprobe_capture_monitor(m.s, "stack_info", 1, R"({"step": 0, "stack_info": []})"), TPROBE_ERROR);
  auto [session, records] = m.close_and_read();
  ASSERT_EQ(records.size(), 1u);
  const monitor_record_view v = monitor_record_read(records[0]);
  EXPECT_EQ(v.prefix, "stack_info");
  ASSERT_EQ(v.stack_info.size(), 2u);
  EXPECT_EQ(v.stack_info[0].module_name, "0:fc");
  // pandas' to_csv of msprobe's DataFrame: quoted where Python's csv quotes, '\n' line ends.
  EXPECT_EQ(monitor_stack_info_csv(v.stack_info),
            "module_name,stack_info\n0:fc,\"File \"\"t.py\"\", line 3, in <module>, \n x = 1\"\n0:,\n");
}

TEST(CaptureMonitor, a_stage_turns_the_monitor_off_and_on_through_the_control_path) {
  monitor_session m(R"({"ops": ["norm"]})");
  ASSERT_NE(m.s, nullptr);
  const auto meta = nlohmann::ordered_json::parse(tprobe_session_config(m.s));
  ASSERT_TRUE(meta.contains("control")) << meta.dump();
  const std::string endpoint = meta["control"];
  EXPECT_EQ(tprobe_monitor_control(m.s), TPROBE_SKIPPED);  // nothing came yet
  EXPECT_EQ(tprobe_control_pending(m.s), 0);

  zmq::context_t ctx;
  control_sender sender(ctx);
  auto command = [](nlohmann::ordered_json meta) {
    record r(record_kind::control);
    r.header.meta = std::move(meta);
    return r;
  };
  // The commands arrive on the listener's thread: wait (with a deadline) until one is in.
  auto wait_pending = [&] {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!tprobe_control_pending(m.s) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::yield();
    return tprobe_control_pending(m.s) == 1;
  };
  ASSERT_TRUE(sender.send(endpoint, command({{"command", "monitor"}, {"on", false}, {"from", "test"}})));
  ASSERT_TRUE(wait_pending());
  EXPECT_EQ(tprobe_monitor_control(m.s), TPROBE_MONITOR_OFF);
  EXPECT_EQ(tprobe_monitor_control(m.s), TPROBE_SKIPPED);  // said once

  ASSERT_TRUE(sender.send(endpoint, command({{"command", "monitor"}, {"on", true}})));
  ASSERT_TRUE(wait_pending());
  EXPECT_EQ(tprobe_monitor_control(m.s), TPROBE_MONITOR_ON);

  // A malformed command is reported and ignored: the last switch stands, the session goes on.
  ASSERT_TRUE(sender.send(endpoint, command({{"command", "monitor"}, {"on", "yes"}})));
  ASSERT_TRUE(wait_pending());
  EXPECT_EQ(tprobe_monitor_control(m.s), TPROBE_SKIPPED);
  EXPECT_EQ(tprobe_capture_monitor(m.s, "grad_reduced", 0,
                                   R"({"step": 0, "ops": ["norm", "shape", "dtype"], "rows": []})"),
            TPROBE_OK)
      << tprobe_last_error();

  // "stop" still ends the session for good: nothing more is taken.
  ASSERT_TRUE(sender.send(endpoint, command({{"command", "stop"}, {"from", "test"}})));
  ASSERT_TRUE(wait_pending());
  EXPECT_EQ(tprobe_monitor_control(m.s), TPROBE_SKIPPED);
  EXPECT_EQ(tprobe_capture_monitor(m.s, "grad_reduced", 1,
                                   R"({"step": 1, "ops": ["norm", "shape", "dtype"], "rows": []})"),
            TPROBE_SKIPPED);
  EXPECT_EQ(tprobe_monitor_control(nullptr), TPROBE_ERROR);
}

TEST(CaptureMonitor, the_monitor_command_is_refused_by_a_dump_session) {
  test::temp_dir dir;
  const std::string config = dir / "config.json";
  test::write_file(config, R"({"task": "statistics", "level": "L1", "dump_path": ")" + (dir / "dump") + R"("})");
  const std::string stream = dir / "capture.tpr";
  tprobe_open_options o = tprobe_open_options_default();
  o.endpoint = stream.c_str();
  tprobe_session *s = nullptr;
  ASSERT_EQ(tprobe_session_open(config.c_str(), &o, &s), TPROBE_OK) << tprobe_last_error();
  const std::string endpoint = nlohmann::ordered_json::parse(tprobe_session_config(s))["control"];
  zmq::context_t ctx;
  control_sender sender(ctx);
  record r(record_kind::control);
  r.header.meta = {{"command", "monitor"}, {"on", false}};
  ASSERT_TRUE(sender.send(endpoint, r));
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!tprobe_control_pending(s) && std::chrono::steady_clock::now() < deadline)
    std::this_thread::yield();
  ASSERT_EQ(tprobe_control_pending(s), 1);
  EXPECT_EQ(tprobe_monitor_control(s), TPROBE_SKIPPED);  // ignored with a warning line
  EXPECT_EQ(tprobe_session_close(s), TPROBE_OK);
}
