// The real binaries of the NaN/Inf analysis: `tprobe nan-analyze STEPDIR -o OUT` on step folders
// (exit codes 1, 0, 100, 111, the one-line answer, the result file, a config's allow rule) and
// tprobe-nan-live on a recorded stream of two ranks (the same answer, the same file).
#include <filesystem>
#include <limits>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "nan_analyze.h"
#include "pyjson.h"
#include "record.h"
#include "test_support.h"

namespace tprobe {
namespace {

using json = nlohmann::ordered_json;
constexpr double inf = std::numeric_limits<double>::infinity();

json t(double max, double min = -1.0) {
  return {{"type", "torch.Tensor"}, {"dtype", "torch.float32"}, {"shape", {3}}, {"Max", max},
          {"Min", min},             {"Mean", 0.0},               {"Norm", 1.0},  {"requires_grad", false}};
}
json fwd(json args, json out) { return {{"input_args", std::move(args)}, {"input_kwargs", json::object()}, {"output", std::move(out)}}; }
json reduce(double in_max, double out_max) {
  return fwd({json::array({t(in_max)}), nullptr, nullptr, {{"type", "int"}, {"value", -1}}}, {json::array({t(out_max)})});
}

// The job as dump.json data: rank 1's exp makes an Inf that all_reduce.1 spreads to rank 0;
// both ranks fill an attention mask with -inf on purpose.
json rank_data(int rank) {
  json d = json::object();
  d["Torch.matmul.0.forward"] = fwd({t(1), t(1)}, {t(2)});
  d["Distributed.all_reduce.0.forward"] = reduce(2, 4);
  d["Torch.masked_fill.0.forward"] = fwd({t(4), t(1), {{"type", "float"}, {"value", "-inf"}}}, {t(4, -inf)});
  d["Functional.softmax.0.forward"] = fwd({t(4, -inf)}, {t(1, 0)});
  if (rank == 1) {
    d["Torch.exp.0.forward"] = fwd({t(600)}, {t(inf, 0)});
    d["Distributed.all_reduce.1.forward"] = reduce(inf, inf);
  } else {
    d["Torch.mul.0.forward"] = fwd({t(4)}, {t(8)});
    d["Distributed.all_reduce.1.forward"] = reduce(8, inf);
  }
  return d;
}

void write_step(const std::string &step, bool with_inf = true) {
  for (int r : {0, 1}) {
    const std::string dir = step + "/rank" + std::to_string(r);
    std::filesystem::create_directories(dir);
    json data = rank_data(r);
    if (!with_inf) {
      data.erase("Torch.exp.0.forward");
      data["Distributed.all_reduce.1.forward"] = reduce(8, 16);
    }
    test::write_file(dir + "/dump.json", pyjson_dump({{"task", "statistics"}, {"level", "L1"}, {"data", data}}));
    test::write_file(dir + "/stack.json", "{}");
    test::write_file(dir + "/construct.json", "{}");
  }
}

TEST(NanAnalyzeCli, NamesRankOnesExpAndWritesTheResult) {
  test::temp_dir dir;
  write_step(dir / "step0");
  const auto r = test::run_process({test::bin("tprobe"), "nan-analyze", dir / "step0", "-o", dir / "out"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.out, "tprobe-nan-analyze: first producer: rank 1 Torch.exp.0.forward (inputs finite, output.0 inf; layer 1)\n");
  const std::string file = test::find_file(dir / "out", "anomaly_analyze_", ".json");
  ASSERT_FALSE(file.empty());
  const json doc = pyjson_load_file(file);
  ASSERT_EQ(doc.size(), 1u);
  EXPECT_EQ(doc["rank_1"][0]["op_name"], "Torch.exp.0.forward");
  EXPECT_EQ(doc["rank_1"][0]["construct_info"], json({"Torch.exp.0.forward"}));
}

// msprobe's command line with tprobe in msprobe's place (issue 60 item 6).
TEST(NanAnalyzeCli, MsprobesCommandLine) {
  test::temp_dir dir;
  write_step(dir / "step0");
  auto r = test::run_process({test::bin("tprobe"), "-f", "pytorch", "nan_analyze", "-i", dir / "step0",
                              "--output_path", dir / "out"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_NE(r.out.find("first producer: rank 1 Torch.exp.0.forward"), std::string::npos) << r.out << r.err;
  EXPECT_FALSE(test::find_file(dir / "out", "anomaly_analyze_", ".json").empty());
  r = test::run_process({test::bin("tprobe"), "nan-analyze", "-i", dir / "step0", dir / "step0", "-o", dir / "o2"});
  EXPECT_EQ(r.status, 100);
  EXPECT_NE(r.err.find("not both"), std::string::npos) << r.err;
  r = test::run_process({test::bin("tprobe"), "nan-analyze", "-i", dir / "step0", "-x"});
  EXPECT_EQ(r.status, 100);
  EXPECT_NE(r.err.find("unknown option \"-x\"; its options are"), std::string::npos) << r.err;
}

TEST(NanAnalyzeCli, CleanStepIsZeroWithoutAFile) {
  test::temp_dir dir;
  write_step(dir / "step0", false);
  const auto r = test::run_process({test::bin("tprobe"), "nan-analyze", dir / "step0", "-o", dir / "out"});
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_NE(r.out.find("no NaN/Inf producer"), std::string::npos) << r.out;
  EXPECT_FALSE(std::filesystem::exists(dir / "out"));
}

TEST(NanAnalyzeCli, ConfigAllowRule) {
  test::temp_dir dir;
  write_step(dir / "step0");
  test::write_file(dir / "config.json", json{{"task", "statistics"},
                                             {"dump_path", dir / "dump"},
                                             {"tprobe", {{"nan_analyze", {{"allow", {{{"op", "exp"}, {"slots", {"output"}}}}}}}}}}
                                            .dump());
  const auto r = test::run_process(
      {test::bin("tprobe"), "nan-analyze", dir / "step0", "-o", dir / "out", "--config", dir / "config.json"});
  EXPECT_EQ(r.status, 0) << r.out << r.err;
  test::write_file(dir / "bad.json", json{{"task", "statistics"},
                                          {"dump_path", dir / "dump"},
                                          {"tprobe", {{"nan_analyze", {{"allow", {{{"op", "exp"}}}}}}}}}
                                         .dump());
  const auto bad = test::run_process(
      {test::bin("tprobe"), "nan-analyze", dir / "step0", "-o", dir / "out", "--config", dir / "bad.json"});
  EXPECT_EQ(bad.status, 100);
  EXPECT_NE(bad.err.find(fmt::format("tprobe-nan-analyze: fatal: {}: field \"tprobe.nan_analyze\"", dir / "bad.json")),
            std::string::npos)
      << bad.err;
}

TEST(NanAnalyzeCli, UsageAndUnreadableRankFolders) {
  test::temp_dir dir;
  EXPECT_EQ(test::run_process({test::bin("tprobe"), "nan-analyze"}).status, 100);
  std::filesystem::create_directories(dir / "empty");
  const auto none = test::run_process({test::bin("tprobe"), "nan-analyze", dir / "empty", "-o", dir / "out"});
  EXPECT_EQ(none.status, 100);
  EXPECT_NE(none.err.find("no rank folders"), std::string::npos) << none.err;
  // A rank folder without dump.json: that rank is an error line, the other one is still analysed
  // (rank 0 alone: its all_reduce.1 is the producer, with no peer in the dump), and the exit
  // status is the error's, never the answer's.
  write_step(dir / "step0");
  std::filesystem::remove(dir / "step0/rank1/dump.json");
  const auto broken = test::run_process({test::bin("tprobe"), "nan-analyze", dir / "step0", "-o", dir / "out"});
  EXPECT_EQ(broken.status, 111) << broken.err;
  EXPECT_NE(broken.err.find(fmt::format("tprobe-nan-analyze: error: rank 1 not analysed: unable to open {}",
                                        dir / "step0/rank1/dump.json")),
            std::string::npos)
      << broken.err;
  EXPECT_NE(broken.err.find("tprobe-nan-analyze: 1 of 2 rank folders could not be analysed"), std::string::npos)
      << broken.err;
  EXPECT_EQ(broken.out.rfind("tprobe-nan-analyze: first producer: rank 0 Distributed.all_reduce.1.forward", 0), 0u)
      << broken.out;
}

// One rank's dump.json that is not JSON (a dump cut short) is skipped with an error line, as
// compare skips a step folder's invalid rank: the good rank is analysed and gives its answer, and
// the exit status says that an error happened (100: invalid input).
TEST(NanAnalyzeCli, OneRanksInvalidDumpIsAnErrorLineAndTheOthersAreAnalysed) {
  test::temp_dir dir;
  write_step(dir / "step0");
  write_step(dir / "clean", false);
  test::write_file(dir / "step0/rank0/dump.json", "{\"task\": \"statistics\", \"data\": {\"x\": ");
  const auto r = test::run_process({test::bin("tprobe"), "nan-analyze", dir / "step0", "-o", dir / "out"});
  EXPECT_EQ(r.status, 100) << r.err;
  EXPECT_EQ(r.out, "tprobe-nan-analyze: first producer: rank 1 Torch.exp.0.forward (inputs finite, output.0 inf; layer 1)\n")
      << r.err;
  EXPECT_NE(r.err.find(fmt::format("tprobe-nan-analyze: error: rank 0 not analysed: {}", dir / "step0/rank0/dump.json")),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("fatal"), std::string::npos) << r.err;
  EXPECT_FALSE(test::find_file(dir / "out", "anomaly_analyze_", ".json").empty());

  // No producer among the ranks read is no pass either: the line says a rank was not read.
  test::write_file(dir / "clean/rank1/dump.json", "not json");
  const auto clean = test::run_process({test::bin("tprobe"), "nan-analyze", dir / "clean", "-o", dir / "out2"});
  EXPECT_EQ(clean.status, 100) << clean.err;
  EXPECT_NE(clean.out.find("no NaN/Inf producer"), std::string::npos) << clean.out;
  EXPECT_NE(clean.out.find("1 rank folder not read"), std::string::npos) << clean.out;
  EXPECT_NE(clean.err.find(fmt::format("error: rank 1 not analysed: {}", dir / "clean/rank1/dump.json")),
            std::string::npos)
      << clean.err;
}

// The same job as a record stream of two ranks (what tprobe-stats passes on), with the
// collective's outputs arriving after the next call's entry record, as the torch capture sends them.
void write_stream(const std::string &path) {
  record_file_writer w(path);
  auto send = [&](record_header h) { w.write(record(std::move(h))); };
  for (int32_t rank : {0, 1}) {
    record_header s = record_header_of(record_kind::session);
    s.rank = rank;
    s.run = fmt::format("r{}", rank);
    s.meta = {{"task", "statistics"}, {"framework", "pytorch"}, {"rank", rank}};
    send(s);
  }
  for (int32_t rank : {0, 1}) {
    const json data = rank_data(rank);
    std::vector<record_header> late;  // a collective's outputs: sent after the next entry record
    for (const auto &[entry, body] : data.items()) {
      record_header e = record_header_of(record_kind::entry);
      e.rank = rank;
      e.run = fmt::format("r{}", rank);
      e.entry = entry;
      e.meta = {{"stack", {"File train.py, line 1, in run, \n " + entry}}, {"parent", nullptr}};
      send(e);
      for (auto &h : late) send(std::move(h));
      late.clear();
      const bool collective = entry.rfind("Distributed.", 0) == 0;
      auto leaves = [&](const json &section, const std::string &prefix) {
        for (size_t k = 0; k < section.size(); ++k) {
          const json &v = section[k];
          const json &leaf = v.is_array() ? v[0] : v;
          const std::string slot = fmt::format("{}.{}{}", prefix, k, v.is_array() ? ".0" : "");
          record_header h = record_header_of(leaf.is_object() && leaf.contains("Max") ? record_kind::tensor : record_kind::value);
          h.rank = rank;
          h.run = fmt::format("r{}", rank);
          h.entry = entry;
          h.slot = slot;
          if (h.kind == record_kind::tensor) {
            h.shape = {3};
            tensor_stats st;
            st.max = stat_value::of_real(leaf["Max"].get<double>());
            st.min = stat_value::of_real(leaf["Min"].get<double>());
            st.mean = stat_value::of_real(0.0);
            st.norm = stat_value::of_real(1.0);
            h.stats = st;
          } else {
            h.meta = leaf;
          }
          if (collective && prefix == "output")
            late.push_back(std::move(h));
          else
            send(h);
        }
      };
      leaves(body["input_args"], "input");
      leaves(body["output"], "output");
    }
    for (auto &h : late) send(std::move(h));
    record_header end = record_header_of(record_kind::step_end);
    end.rank = rank;
    end.run = fmt::format("r{}", rank);
    send(end);
  }
  w.close();
}

TEST(NanLive, RecordedTwoRankStreamGivesTheOfflineAnswer) {
  test::temp_dir dir;
  write_stream(dir / "job.records");
  const auto r = test::run_process({test::bin("tprobe-nan-live"), "--input", dir / "job.records", "--output-dir", dir / "out"});
  EXPECT_EQ(r.status, 1) << r.err;
  EXPECT_EQ(r.out, "tprobe-nan-live: step 0: first producer: rank 1 Torch.exp.0.forward (inputs finite, output.0 inf; "
                   "layer 1)\n");
  const std::string file = test::find_file(dir / "out", "anomaly_analyze_", ".json");
  ASSERT_FALSE(file.empty());
  const json doc = pyjson_load_file(file);
  EXPECT_EQ(doc["rank_1"][0]["op_name"], "Torch.exp.0.forward");
  EXPECT_EQ(doc["rank_1"][0]["stack_info"][0], "File train.py, line 1, in run, \n Torch.exp.0.forward");
  EXPECT_EQ(doc["rank_1"][0]["data_info"]["input_args"][0]["Max"], 600.0);
  EXPECT_NE(r.err.find("1 steps analysed, 1 with a NaN/Inf producer"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace tprobe
