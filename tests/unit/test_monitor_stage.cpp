// stages/stream/monitor (tprobe-monitor) in process, through the stage harness: docs/msprobe-compat.md
// §9.12's V-5 (ops min, max, norm, mean, zeros, nans; ndigits 6; step_count_per_record 2;
// AnomalyTurbulence(0.5); grads and activations ×3 at step 2) sent as monitor records: the csv
// files as msprobe's CSVWriterWithAD writes them (header once, rows appended, the step ranges),
// every record passed on, the alarms the moment they fire with msprobe's message, anomaly.json
// (every (tag, op) kept, call_id from the row), format tensorboard and api, module_ranks,
// append_output, --output-dir, and the rank folder's Shanghai-time name.
#include <sys/stat.h>

#include <filesystem>
#include <regex>

#include <gtest/gtest.h>

#include "capture_config.h"
#include "errors.h"
#include "monitor.h"
#include "monitor/monitor_stage.h"
#include "monitor/tensorboard.h"
#include "monitor_record.h"
#include "pyjson.h"
#include "stage_harness.h"
#include "test_support.h"

namespace tprobe {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

const std::vector<std::string> kOps = {"min", "max", "norm", "mean", "zeros", "nans", "shape", "dtype"};

ojson config_doc(const std::string &format = "csv", bool dump = true, ojson extra = ojson::object()) {
  ojson doc = {{"targets", ojson::object()},
               {"wg_distribution", true},
               {"xy_distribution", true},
               {"ops", {"min", "max", "norm", "mean", "zeros", "nans"}},
               {"ndigits", 6},
               {"step_count_per_record", 2},
               {"format", format},
               {"alert", {{"rules", {{{"rule_name", "AnomalyTurbulence"}, {"args", {{"threshold", 0.5}}}}}}, {"dump", dump}}}};
  for (auto &[k, v] : extra.items()) doc[k] = v;
  return doc;
}

ojson config(const std::string &format = "csv", bool dump = true, ojson extra = ojson::object()) {
  return monitor_config_from_json(config_doc(format, dump, std::move(extra)), "test config").json;
}

record session_record(const std::string &run, int32_t rank, const std::string &output_dir, const ojson &monitor) {
  record r(record_kind::session);
  r.header.run = run;
  r.header.rank = rank;
  r.header.meta = {{"task", "monitor"}, {"framework", "pytorch"}, {"output_dir", output_dir}, {"monitor", monitor}};
  return r;
}

// The session record as the capture makes it (tprobe_monitor_open: config_for_monitor's session
// meta, output_dir from $MONITOR_OUTPUT_DIR).
record capture_session_record(const std::string &run, int32_t rank, const test::temp_dir &dir, const std::string &output_dir,
                              const ojson &doc) {
  const std::string path = dir / "monitor.json";
  test::write_file(path, doc.dump());
  ::setenv("MONITOR_OUTPUT_DIR", output_dir.c_str(), 1);
  record r(record_kind::session);
  r.header.run = run;
  r.header.rank = rank;
  r.header.meta = config_for_monitor(path).session_meta();
  ::unsetenv("MONITOR_OUTPUT_DIR");
  return r;
}

monitor_number f(double v) { return {v, false}; }
monitor_number i(int64_t v) { return {static_cast<double>(v), true}; }

monitor_row row(const std::string &tag, std::vector<monitor_number> values, std::vector<int64_t> shape,
                const std::string &dtype) {
  return {tag, std::move(values), std::move(shape), dtype};
}

// V-5's grads of step `step` (×3 at step 2): fc.weight = [[1,-2],[0,1e-9]]·s, fc.bias = [0.5, nan].
monitor_rows grads(int64_t step, int32_t rank = 0) {
  const double s = step == 2 ? 3 : 1;
  const std::string r = "/rank" + std::to_string(rank) + "/post_grad";
  monitor_rows rows;
  rows.step = step;
  rows.ops = kOps;
  rows.rows = {row("0:fc.weight" + r, {f(-2 * s), f(1 * s), f(step == 2 ? 6.708203932499369 : 2.23606797749979),
                                       f(step == 2 ? -0.74999999925 : -0.24999999975), f(0.5), i(0)},
                   {2, 2}, "torch.float32"),
               row("0:fc.bias" + r, {f(NAN), f(NAN), f(NAN), f(NAN), f(0.0), i(1)}, {2}, "torch.float32")};
  return rows;
}

// V-5's activations: fc.input:0 = arange(6).reshape(2,3)·s (fp16: zeros is 0), fc.output:0 = ones(2,2)·s.
monitor_rows actv(int64_t step, int32_t rank = 0) {
  const double s = step == 2 ? 3 : 1;
  const std::string r = "/rank" + std::to_string(rank) + "/actv";
  monitor_rows rows;
  rows.step = step;
  rows.ops = kOps;
  rows.micro_step = true;
  rows.rows = {row("0:fc.input:0" + r, {f(0.0), f(5 * s), f(step == 2 ? 22.24859546128699 : 7.416198487095663), f(2.5 * s),
                                        f(0.0), i(0)}, {2, 3}, "torch.float16"),
               row("0:fc.output:0" + r, {f(s), f(s), f(2 * s), f(s), f(0.0), i(0)}, {2, 2}, "torch.float32")};
  return rows;
}

// A record as the capture sends it; `call_ids` sets the capture's call_id of some rows.
record rows_record(const std::string &run, int32_t rank, const std::string &prefix, monitor_rows rows,
                   const std::map<std::string, int64_t> &call_ids = {}) {
  record_header h;
  h.run = run;
  h.rank = rank;
  for (auto &row : rows.rows)
    if (auto it = call_ids.find(row.tag); it != call_ids.end()) row.call_id = it->second;
  return monitor_record_make(std::move(h), prefix, rows);
}

template <class... R>
std::vector<record> list_of(R &&...rs) {
  std::vector<record> v;
  (v.push_back(std::move(rs)), ...);
  return v;
}

mode_t mode_of(const std::string &path) {
  struct stat st{};
  EXPECT_EQ(::stat(path.c_str(), &st), 0) << path;
  return st.st_mode & 07777;
}

std::vector<std::string> lines_of(const std::string &text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t end = text.find('\n', at);
    out.push_back(text.substr(at, end - at));
    at = end == std::string::npos ? text.size() : end + 1;
  }
  return out;
}

const std::string kGradHeader = "vpp_stage,name,step,min,max,norm,mean,zeros,nans,shape,dtype\n";
const std::string kActvHeader = "vpp_stage,name,step,micro_step,min,max,norm,mean,zeros,nans,shape,dtype\n";

std::string message(const std::string &tag, const std::string &op, const std::string &cur, const std::string &hist) {
  return "Rule AnomalyTurbulence reports anomaly signal in ('" + tag + "', '" + op + "') at step 2, current value " +
         cur + ", history mean " + hist + ".";
}

TEST(MonitorStage, WritesV5sCsvFilesAlarmsAndAnomalyJsonAndPassesEveryRecordOn) {
  test::temp_dir dir;
  const std::string out = dir / "monitor_output";
  test::stage_harness h;
  monitor_stage_result res;
  std::vector<record> input = list_of(capture_session_record("r", 0, dir, out, config_doc()));
  for (int64_t step = 0; step < 3; ++step) {
    input.push_back(rows_record("r", 0, "actv", actv(step)));
    input.push_back(rows_record("r", 0, "grad_reduced", grads(step), {{"0:fc.weight/rank0/post_grad", 7}}));
  }
  record other(record_kind::tensor);  // not a monitor record: passed on, not written
  other.header.run = "r";
  other.header.entry = "Torch.add.0.forward";
  other.header.type = dtype::uint8;
  other.header.shape = {0};
  input.push_back(std::move(other));
  const size_t n = input.size();
  const std::string log = test::capture_file_output([&](std::FILE *f) {
    const auto passed = h.run(
        [&](stage_io &io) {
          monitor_stage_options o;
          o.log = f;
          res = monitor_stage_run(io, o);
        },
        input);
    ASSERT_EQ(passed.size(), n);  // every record, in order
    EXPECT_EQ(passed[0].header.kind, record_kind::session);
    EXPECT_EQ(monitor_record_read(passed[2]).rows.rows[0].tag, "0:fc.weight/rank0/post_grad");
    EXPECT_FALSE(monitor_record_is(passed[n - 1]));
  });
  EXPECT_EQ(res.records, n);
  EXPECT_EQ(res.monitor_records, 6u);
  EXPECT_EQ(res.rows, 12u);
  ASSERT_EQ(res.rank_dirs.size(), 1u);
  const std::string rank_dir = res.rank_dirs[0];
  EXPECT_EQ(fs::path(rank_dir).parent_path().string(), out);
  EXPECT_TRUE(std::regex_match(fs::path(rank_dir).filename().string(),
                               std::regex(R"([A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}-rank0-[0-9a-f]{8})")))
      << rank_dir;
  EXPECT_EQ(mode_of(rank_dir), 0750u);

  // V-5's files, byte for byte (docs/msprobe-compat.md §9.12), the step-2 rows in the next range.
  EXPECT_EQ(res.csv_paths, (std::vector<std::string>{rank_dir + "/actv_0-1.csv", rank_dir + "/grad_reduced_0-1.csv",
                                                     rank_dir + "/actv_2-3.csv", rank_dir + "/grad_reduced_2-3.csv"}));
  EXPECT_EQ(test::read_file(rank_dir + "/grad_reduced_0-1.csv"),
            kGradHeader +
                "0,fc.weight,0,-2.0,1.0,2.236068,-0.25,0.5,0,\"[2, 2]\",torch.float32\n"
                "0,fc.bias,0,nan,nan,nan,nan,0.0,1,[2],torch.float32\n"
                "0,fc.weight,1,-2.0,1.0,2.236068,-0.25,0.5,0,\"[2, 2]\",torch.float32\n"
                "0,fc.bias,1,nan,nan,nan,nan,0.0,1,[2],torch.float32\n");
  EXPECT_EQ(test::read_file(rank_dir + "/actv_0-1.csv"),
            kActvHeader +
                "0,fc.input,0,0,0.0,5.0,7.416198,2.5,0.0,0,\"[2, 3]\",torch.float16\n"
                "0,fc.output,0,0,1.0,1.0,2.0,1.0,0.0,0,\"[2, 2]\",torch.float32\n"
                "0,fc.input,1,0,0.0,5.0,7.416198,2.5,0.0,0,\"[2, 3]\",torch.float16\n"
                "0,fc.output,1,0,1.0,1.0,2.0,1.0,0.0,0,\"[2, 2]\",torch.float32\n");
  EXPECT_EQ(test::read_file(rank_dir + "/grad_reduced_2-3.csv"),
            kGradHeader +
                "0,fc.weight,2,-6.0,3.0,6.708204,-0.75,0.5,0,\"[2, 2]\",torch.float32\n"
                "0,fc.bias,2,nan,nan,nan,nan,0.0,1,[2],torch.float32\n");
  EXPECT_EQ(mode_of(rank_dir + "/actv_2-3.csv"), 0640u);

  // Alarms: norm and mean of each tripled tensor (min and max fired Turbulence too, and were
  // dropped: not norm or mean), in msprobe's order (rows, then ops), each on one line.
  const std::vector<std::string> want = {
      message("0:fc.input:0/rank0/actv", "norm", "22.24859546128699", "7.416198487095663"),
      message("0:fc.input:0/rank0/actv", "mean", "7.5", "2.5"),
      message("0:fc.output:0/rank0/actv", "norm", "6.0", "2.0"),
      message("0:fc.output:0/rank0/actv", "mean", "3.0", "1.0"),
      message("0:fc.weight/rank0/post_grad", "norm", "6.708203932499369", "2.23606797749979"),
      message("0:fc.weight/rank0/post_grad", "mean", "-0.74999999925", "0.24999999975")};
  std::vector<std::string> printed;
  for (const auto &w : want) printed.push_back("tprobe-monitor: " + w);
  EXPECT_EQ(lines_of(log), printed);
  EXPECT_EQ(res.anomalies, 6u);

  // anomaly.json: every (tag, op), msprobe's values; call_id from the row (7), else -1.
  const std::string aj = out + "/anomaly_detected/rank0/anomaly.json";
  EXPECT_EQ(res.anomaly_files, std::vector<std::string>{aj});
  const std::string text = test::read_file(aj);
  const ojson doc = pyjson_parse(text, aj);
  EXPECT_EQ(text, pyjson_dump(doc, 1));  // indent 1, as msprobe's save_json
  std::vector<std::string> keys;
  for (const auto &[k, v] : doc.items()) keys.push_back(k);
  EXPECT_EQ(keys, (std::vector<std::string>{monitor_anomaly_key("0:fc.input:0/rank0/actv", "norm", 2, -1),
                                            monitor_anomaly_key("0:fc.input:0/rank0/actv", "mean", 2, -1),
                                            monitor_anomaly_key("0:fc.output:0/rank0/actv", "norm", 2, -1),
                                            monitor_anomaly_key("0:fc.output:0/rank0/actv", "mean", 2, -1),
                                            monitor_anomaly_key("0:fc.weight/rank0/post_grad", "norm", 2, 7),
                                            monitor_anomaly_key("0:fc.weight/rank0/post_grad", "mean", 2, 7)}));
  const ojson &w = doc[keys[5]];
  EXPECT_EQ(w.dump(), ojson({{"rank", 0}, {"step", 2}, {"micro_step", 0}, {"pp_stage", 0}, {"vpp_stage", 0},
                             {"call_id", 7}, {"tag_name", "0:fc.weight/rank0/post_grad"}, {"message", want[5]},
                             {"group_mates", {0}}})
                          .dump());
}

TEST(MonitorStage, TensorboardFormatWritesOneEventFileAndApiFormatNoFolder) {
  test::temp_dir dir;
  test::stage_harness h;
  monitor_stage_result tb, api;
  h.run([&](stage_io &io) { tb = monitor_stage_run(io, {}); },
        list_of(session_record("t", 0, dir / "tb", config("tensorboard")), rows_record("t", 0, "grad_reduced", grads(0)),
                rows_record("t", 0, "grad_reduced", grads(1))));
  ASSERT_EQ(tb.rank_dirs.size(), 1u);
  EXPECT_TRUE(tb.csv_paths.empty());
  ASSERT_EQ(tb.event_files.size(), 1u);
  EXPECT_EQ(fs::path(tb.event_files[0]).parent_path().string(), tb.rank_dirs[0]);
  EXPECT_EQ(test::files_in(tb.rank_dirs[0]).size(), 1u);  // the event file alone
  EXPECT_EQ(tb.scalars, 2u * 2u * 6u);                    // steps × rows × ops but shape and dtype
  // Its records: the file_version record and one per scalar, each framed as tfrecord_frame
  // frames it (tests/unit/test_tensorboard.cpp reads them from the specification).
  const std::string bytes = test::read_file(tb.event_files[0]);
  size_t at = 0, records = 0;
  while (at + 12 <= bytes.size()) {
    uint64_t n = 0;
    for (int k = 0; k < 8; ++k) n |= uint64_t(static_cast<unsigned char>(bytes[at + k])) << (8 * k);
    EXPECT_EQ(bytes.substr(at, n + 16), tfrecord_frame(bytes.substr(at + 12, n)));
    at += n + 16, ++records;
  }
  EXPECT_EQ(at, bytes.size());
  EXPECT_EQ(records, 1 + tb.scalars);
  EXPECT_NE(bytes.find("0:fc.weight/rank0/post_grad_norm"), std::string::npos);
  EXPECT_EQ(bytes.find("post_grad_shape"), std::string::npos);

  // format api: no rank folder, no file; the rules and anomaly.json still run.
  const std::string log = test::capture_file_output([&](std::FILE *file) {
    h.run(
        [&](stage_io &io) {
          monitor_stage_options o;
          o.log = file;
          api = monitor_stage_run(io, o);
        },
        list_of(session_record("a", 0, dir / "api", config("api")), rows_record("a", 0, "grad_reduced", grads(0)),
                rows_record("a", 0, "grad_reduced", grads(2))));
  });
  EXPECT_TRUE(api.rank_dirs.empty());
  EXPECT_EQ(test::files_in(dir / "api"), std::vector<std::string>{"anomaly_detected"});
  EXPECT_EQ(api.anomalies, 2u);
  EXPECT_EQ(lines_of(log).size(), 2u);
  EXPECT_EQ(pyjson_load_file(dir / "api/anomaly_detected/rank0/anomaly.json").size(), 2u);
}

TEST(MonitorStage, ModuleRanksAppendOutputOutputDirAndWithoutDump) {
  test::temp_dir dir;
  test::stage_harness h;
  // An earlier run's rank-1 folder in the append_output range, one outside it, and one of rank 0.
  const std::string out = dir / "out";
  fs::create_directories(out + "/Dec03_21-34-40-rank1-aaaaaaaa");
  fs::create_directories(out + "/Dec03_21-35-00-rank1-bbbbbbbb");
  fs::create_directories(out + "/Dec03_21-34-40-rank0-cccccccc");
  const ojson appending = config("csv", false, {{"append_output", {"Dec03_21-34-40", "Dec03_21-34-41"}}});
  const ojson only_rank1 = config("csv", true, {{"module_ranks", {1}}});
  monitor_stage_result res;
  h.run(
      [&](stage_io &io) {
        monitor_stage_options o;
        o.output_dir = out;  // wins over the sessions' output_dir
        res = monitor_stage_run(io, o);
      },
      list_of(session_record("x", 1, dir / "elsewhere", appending), rows_record("x", 1, "actv", actv(0, 1)),
              session_record("y", 0, dir / "elsewhere", only_rank1), rows_record("y", 0, "actv", actv(0, 0))));
  EXPECT_FALSE(fs::exists(dir / "elsewhere"));
  // rank 1 appended into the folder of the range; rank 0, left out by module_ranks, wrote nothing.
  EXPECT_EQ(res.rank_dirs, std::vector<std::string>{out + "/Dec03_21-34-40-rank1-aaaaaaaa"});
  EXPECT_EQ(test::read_file(out + "/Dec03_21-34-40-rank1-aaaaaaaa/actv_0-1.csv"),
            kActvHeader +
                "0,fc.input,0,0,0.0,5.0,7.416198,2.5,0.0,0,\"[2, 3]\",torch.float16\n"
                "0,fc.output,0,0,1.0,1.0,2.0,1.0,0.0,0,\"[2, 2]\",torch.float32\n");
  EXPECT_TRUE(test::files_in(out + "/Dec03_21-34-40-rank0-cccccccc").empty());
  EXPECT_FALSE(fs::exists(out + "/anomaly_detected"));  // no dump for rank 1, no writer for rank 0
  EXPECT_EQ(res.rows, 2u);
}

TEST(MonitorStage, RankFolderNamesAreShanghaiTime) {
  EXPECT_EQ(monitor_rank_dir_name(0, 3, "deadbeef"), "Jan01_08-00-00-rank3-deadbeef");
  EXPECT_EQ(monitor_rank_dir_name(1733497509, 0, "0123abcd"), "Dec06_23-05-09-rank0-0123abcd");
}

// msprobe's write_df_to_csv: an existing file (append_output, a rerun into the same folder) is
// appended to without a second header; a link, a file others may write and a folder are refused.
// A record before its session and an output_dir msprobe refuses end the stage: the binary's tests
// (e2e), as the harness would wait out its send deadline.
TEST(MonitorStage, CsvAppendKeepsOneHeaderAndRefusesLinksOpenFilesAndFolders) {
  test::temp_dir dir;
  const std::string csv = dir / "actv_0-1.csv";
  EXPECT_TRUE(monitor_csv_append(csv, "h\n", "a\n"));
  EXPECT_FALSE(monitor_csv_append(csv, "h\n", "b\n"));
  EXPECT_EQ(test::read_file(csv), "h\na\nb\n");
  EXPECT_EQ(mode_of(csv), 0640u);
  test::write_file(dir / "empty.csv", "");
  EXPECT_FALSE(monitor_csv_append(dir / "empty.csv", "h\n", "a\n"));
  EXPECT_EQ(test::read_file(dir / "empty.csv"), "h\na\n");
  fs::create_symlink(csv, dir / "link.csv");
  try {
    (void)monitor_csv_append(dir / "link.csv", "h\n", "x\n");
    ADD_FAILURE() << "a link was followed";
  } catch (const usage_error &e) {
    EXPECT_EQ(std::string(e.what()), dir / "link.csv" + ": is a symbolic link; refusing to follow it");
  }
  EXPECT_EQ(test::read_file(csv), "h\na\nb\n");
  test::write_file(dir / "open.csv", "h\n");
  ASSERT_EQ(::chmod((dir / "open.csv").c_str(), 0666), 0);
  EXPECT_THROW((void)monitor_csv_append(dir / "open.csv", "h\n", "x\n"), usage_error);
  fs::create_directory(dir / "folder.csv");
  EXPECT_THROW((void)monitor_csv_append(dir / "folder.csv", "h\n", "x\n"), usage_error);
}


// stack_info.csv (msprobe's write_stack_info) is written by the stage in the rank folder it made,
// once: a second record (a dynamic restart) leaves it; and anomaly.json takes pp_stage and
// group_mates from the capture's session meta (tprobe_monitor_open's group).
TEST(MonitorStage, StackInfoInTheRankFolderAndTheGroupInAnomalyJson) {
  test::temp_dir dir;
  test::stage_harness h;
  const std::string out = dir / "out";
  const std::string path = dir / "monitor.json";
  test::write_file(path, config_doc("csv", true).dump());
  ::setenv("MONITOR_OUTPUT_DIR", out.c_str(), 1);
  record session(record_kind::session);
  session.header.run = "g";
  session.header.rank = 1;
  session.header.meta = config_for_monitor(path, R"({"pp_stage": 1, "group_mates": [0, 1]})", 1).session_meta();
  ::unsetenv("MONITOR_OUTPUT_DIR");
  record_header sh;
  sh.run = "g";
  sh.rank = 1;
  const std::vector<monitor_stack> stacks = {{"0:fc", "File \"train.py\", line 9, in <module>, \n x"}, {"0:", ""}};
  monitor_stage_result res;
  const auto passed = h.run(
      [&](stage_io &io) {
        monitor_stage_options o;
        res = monitor_stage_run(io, o);
      },
      list_of(std::move(session), monitor_stack_record_make(sh, 0, stacks), rows_record("g", 1, "grad_reduced", grads(0, 1)),
              rows_record("g", 1, "grad_reduced", grads(1, 1)), rows_record("g", 1, "grad_reduced", grads(2, 1)),
              monitor_stack_record_make(sh, 3, {{"0:other", "later"}})));
  ASSERT_EQ(res.rank_dirs.size(), 1u);
  EXPECT_EQ(test::read_file(res.rank_dirs[0] + "/stack_info.csv"),
            "module_name,stack_info\n0:fc,\"File \"\"train.py\"\", line 9, in <module>, \n x\"\n0:,\n");
  EXPECT_EQ(mode_of(res.rank_dirs[0] + "/stack_info.csv"), 0640u);
  const ojson anomalies = ojson::parse(test::read_file(out + "/anomaly_detected/rank1/anomaly.json"));
  ASSERT_FALSE(anomalies.empty());
  for (const auto &[key, a] : anomalies.items()) {
    EXPECT_EQ(a["pp_stage"], 1) << key;
    EXPECT_EQ(a["group_mates"], ojson::parse("[0, 1]")) << key;
  }
  EXPECT_EQ(passed.size(), 6u);  // every record passed on
}

}  // namespace
}  // namespace tprobe
